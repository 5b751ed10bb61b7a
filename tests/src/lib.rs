//! Support library for the mcp-stdio conformance suite.
//!
//! One suite, written once, runs unchanged against all three adapters —
//! `mcp-stdio-tokio`, `mcp-stdio-async-std` and `mcp-stdio-blocking` — through
//! real process spawns. It holds:
//!
//! - the synchronous facade the suite drives: [`adapter`] (`Adapter`, `SuiteClient`,
//!   `SuitePending`, `SuiteIncoming`) for the `Client`, and [`helper_adapter`]
//!   (`HelperAdapter`, `HelperJob`, `HelperRunReport`) for `run_helper`;
//! - the facade's implementations, one per adapter: [`tokio_adapter`] and [`tokio_helper`]
//!   (`Tokio`, on a runtime of its own), [`async_std_adapter`] (`AsyncStd`, on async-std's
//!   global executor with `task::block_on`) and [`blocking_adapter`] (`Blocking`, plain
//!   blocking calls, helper jobs on threads);
//! - the `Client` gates ([`suite`], instantiated by [`conformance_suite!`] in
//!   `tests/tests/conformance_<adapter>.rs`) and the helper gates ([`helper_adapter`],
//!   instantiated by [`helper_suite!`] in `tests/tests/helpers_<adapter>.rs`);
//! - the interop tests against real MCP peers we did not write, generic over the adapter:
//!   [`interop`], instantiated by [`interop_suite!`] in `tests/tests/interop_<adapter>.rs`
//!   with that adapter's `serve` binary (`src/bin/serve-tokio.rs`, `serve-async-std.rs`,
//!   `serve-blocking.rs`: the same tools and the same stderr lines, each made with its
//!   adapter's `serve`), which the Python SDK's client drives;
//! - where the fixture processes are: [`fixture_server_path`], [`fixture_helper_path`];
//! - Linux process-tree facts for leak checks, read from `/proc`: [`proc_stat`],
//!   [`pid_alive`], [`descendants`], [`group_members`], [`LeaderWatch`] (how long a group
//!   leader stayed an unreaped zombie);
//! - signalling and cleanup: [`signal_pid`], [`signal_group`], [`ProcessGroupGuard`];
//! - polling with a bound: [`wait_until`];
//! - the exact text of the `huge_field` tool: [`huge_field_text`];
//! - a file path in a temporary folder removed when the test ends: [`TempPath`].
//!
//! The fixture binaries (`src/bin/fixture-server.rs`, `src/bin/fixture-helper.rs`) do **not**
//! use this library or `mcp-stdio-core`: they are independent peers, so they cannot share our
//! bugs. Their command lines are documented at the top of each file.

pub mod adapter;
pub mod async_std_adapter;
pub mod blocking_adapter;
pub mod descriptors;
pub mod helper_adapter;
pub mod interop;
pub mod negotiation;
pub mod serve_tools;
pub mod suite;
pub mod tokio_adapter;
pub mod tokio_helper;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg};
use nix::unistd::{getpgrp, Pid};

/// Signals for [`signal_pid`] and [`signal_group`] (re-exported from `nix`).
pub use nix::sys::signal::Signal;

/// Path of the `fixture-server` binary. See [`fixture_path`] for the lookup order.
///
/// # Panics
/// When the binary cannot be found (the message says where it looked).
#[must_use]
pub fn fixture_server_path() -> PathBuf {
    fixture_path("fixture-server", "MCP_STDIO_FIXTURE_SERVER")
}

/// Path of the `fixture-helper` binary. See [`fixture_path`] for the lookup order.
///
/// # Panics
/// When the binary cannot be found (the message says where it looked).
#[must_use]
pub fn fixture_helper_path() -> PathBuf {
    fixture_path("fixture-helper", "MCP_STDIO_FIXTURE_HELPER")
}

/// Finds the fixture binary `name`.
///
/// Lookup order:
/// 1. the environment variable `env_var`, if set (an explicit path);
/// 2. the directory of [`std::env::current_exe`], then its parent. An integration test runs
///    from `target/<profile>/deps/<test>-<hash>` and a binary from `target/<profile>/`, while
///    Cargo puts the fixture binaries in `target/<profile>/`, so one of the two matches.
///
/// `env!("CARGO_BIN_EXE_fixture-server")` is the most exact answer, but Cargo sets it only
/// while compiling integration tests and benches *of this package*; this library is compiled
/// without it, hence the lookup. Cargo builds a package's binaries before running its
/// integration tests, so inside `mcp-stdio-tests` the binaries always exist and are fresh;
/// code in other packages must build them first (`cargo build -p mcp-stdio-tests --bins`).
///
/// # Panics
/// When the binary cannot be found (the message says where it looked).
#[must_use]
pub fn fixture_path(name: &str, env_var: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe is readable on Linux");
    let mut tried = Vec::new();
    let mut dir = exe.parent();
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join(name);
        if candidate.is_file() {
            return candidate;
        }
        tried.push(candidate);
        dir = d.parent();
    }
    panic!(
        "fixture binary {name} not found (tried {tried:?}; set {env_var} or run \
         `cargo build -p mcp-stdio-tests --bins`)"
    );
}

/// The fields of `/proc/<pid>/stat` the leak checks need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: u32,
    /// State letter: `R` running, `S` sleeping, `D` disk sleep, `Z` zombie, `X` dead, `T`…
    pub state: char,
    /// Parent process id (after reparenting, the reaper's pid).
    pub ppid: u32,
    /// Process group id.
    pub pgrp: u32,
    /// Session id.
    pub session: u32,
}

/// Reads `/proc/<pid>/stat`; `None` when the process does not exist (any more).
#[must_use]
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a `/proc/<pid>/stat` line. The command name is in parentheses and may itself contain
/// spaces and parentheses, so the fixed fields are taken after the **last** `)`.
fn parse_stat(line: &str) -> Option<ProcStat> {
    let pid = line.split_once(' ')?.0.parse().ok()?;
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let mut num = || -> Option<u32> { fields.next()?.parse().ok() };
    Some(ProcStat {
        pid,
        state,
        ppid: num()?,
        pgrp: num()?,
        session: num()?,
    })
}

/// All processes visible in `/proc`, best effort (processes come and go while we read).
fn all_stats() -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .collect()
}

/// True while `pid` exists and is neither a zombie (`Z`) nor dead (`X`).
///
/// Zombies count as dead: a killed orphan stays a zombie until its reaper (often PID 1 of a
/// container, which may never reap) collects it, but it no longer runs or holds pipes.
#[must_use]
pub fn pid_alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|s| !matches!(s.state, 'Z' | 'X'))
}

/// A group leader's life as seen from `/proc`, sampled every [`LeaderWatch::EVERY`] on a thread
/// of its own: when it was first and last seen a zombie (exited, not reaped: its pid, and so its
/// group id, still reserved), and when its pid was first seen free (reaped).
///
/// The leader is found by `find` (polled until it answers), because some owners (`run_helper`,
/// the guard) do not tell the pid they spawned.
pub struct LeaderWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<LeaderLife>>,
}

/// What a [`LeaderWatch`] saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaderLife {
    /// The leader's pid, once found.
    pub pid: Option<u32>,
    /// The first and the last sample that showed it a zombie (`Z`).
    pub first_zombie: Option<Instant>,
    /// See `first_zombie`.
    pub last_zombie: Option<Instant>,
    /// The first sample that found the pid free (or reused by another group).
    pub gone: Option<Instant>,
}

impl LeaderLife {
    /// How long it was seen a zombie (first to last such sample).
    #[must_use]
    pub fn zombie_for(&self) -> Duration {
        match (self.first_zombie, self.last_zombie) {
            (Some(a), Some(b)) => b.duration_since(a),
            _ => Duration::ZERO,
        }
    }
}

impl LeaderWatch {
    /// The sampling period.
    pub const EVERY: Duration = Duration::from_millis(5);

    /// Starts watching the pid `find` names.
    pub fn start(mut find: impl FnMut() -> Option<u32> + Send + 'static) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = thread::spawn(move || {
            use std::sync::atomic::Ordering;
            let mut life = LeaderLife::default();
            while !stopping.load(Ordering::Acquire) {
                let Some(pid) = life.pid.or_else(&mut find) else {
                    thread::sleep(Self::EVERY);
                    continue;
                };
                life.pid = Some(pid);
                let now = Instant::now();
                match proc_stat(pid) {
                    Some(s) if s.pgrp == pid && s.state == 'Z' => {
                        life.first_zombie.get_or_insert(now);
                        life.last_zombie = Some(now);
                    }
                    Some(s) if s.pgrp == pid => {}
                    // Free, or already another process's: the leader was reaped.
                    _ => {
                        life.gone.get_or_insert(now);
                    }
                }
                thread::sleep(Self::EVERY);
            }
            life
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Watches a pid known now.
    #[must_use]
    pub fn pid(pid: u32) -> Self {
        Self::start(move || Some(pid))
    }

    /// Stops sampling; what was seen.
    ///
    /// # Panics
    /// If the sampling thread panicked.
    #[must_use]
    pub fn finish(mut self) -> LeaderLife {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread
            .take()
            .expect("finished once")
            .join()
            .expect("the sampler does not panic")
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Children of `parent` (zombies included) that lead a process group of their own.
#[must_use]
pub fn group_leading_children(parent: u32) -> Vec<u32> {
    all_stats()
        .into_iter()
        .filter(|s| s.ppid == parent && s.pgrp == s.pid)
        .map(|s| s.pid)
        .collect()
}

/// Live (non-zombie) descendants of `pid`: children, grandchildren, … found by following the
/// parent-pid links in `/proc/*/stat`. Order: breadth first.
///
/// Limits: a process whose parent exited has been reparented (to PID 1 or a subreaper) and is
/// **no longer** a descendant — exactly the escaped grandchild a leak check worries about. Check
/// [`group_members`] of the child's process group too, and remember pids the fixtures print.
#[must_use]
pub fn descendants(pid: u32) -> Vec<u32> {
    let stats = all_stats();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for s in stats.iter().filter(|s| s.ppid == parent) {
            if !found.contains(&s.pid) && s.pid != pid {
                found.push(s.pid);
                frontier.insert(0, s.pid);
            }
        }
    }
    found.retain(|&p| pid_alive(p));
    found
}

/// Live (non-zombie) members of process group `pgid`, whoever their parent is now.
#[must_use]
pub fn group_members(pgid: u32) -> Vec<u32> {
    all_stats()
        .into_iter()
        .filter(|s| s.pgrp == pgid && !matches!(s.state, 'Z' | 'X'))
        .map(|s| s.pid)
        .collect()
}

/// Polls `cond` every `poll` until it returns true or `timeout` has passed.
///
/// Returns `Some(elapsed)` — when the condition was first seen true — or `None` on timeout.
/// The condition is checked once more at the deadline, so a zero timeout is one check.
pub fn wait_until(
    timeout: Duration,
    poll: Duration,
    mut cond: impl FnMut() -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            return None;
        }
        thread::sleep(poll.min(timeout - elapsed));
    }
}

fn to_pid(pid: u32) -> nix::Result<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|&p| p > 1)
        .map(Pid::from_raw)
        .ok_or(nix::Error::EINVAL)
}

/// Sends `signal` to process `pid`. Pids 0 and 1 are refused (`EINVAL`).
///
/// # Errors
/// The `kill(2)` error, e.g. `ESRCH` when the process is gone.
pub fn signal_pid(pid: u32, signal: Signal) -> nix::Result<()> {
    kill(to_pid(pid)?, signal)
}

/// Sends `signal` to every process of group `pgid` (`kill(-pgid, signal)`).
///
/// Refuses (`EINVAL`) pgid 0 and 1 and **our own process group**: a child spawned without
/// `process_group(0)` shares the test runner's group, and killing "its" group would kill us.
///
/// # Errors
/// The `killpg(2)` error, e.g. `ESRCH` when the group is empty.
pub fn signal_group(pgid: u32, signal: Signal) -> nix::Result<()> {
    let target = to_pid(pgid)?;
    if target == getpgrp() {
        return Err(nix::Error::EINVAL);
    }
    killpg(target, signal)
}

/// Kills a spawned child's process group (and any extra pids) with SIGKILL when dropped, so a
/// test cleans up even when an assertion fails.
///
/// The child must have been spawned with `process_group(0)`
/// (`std::os::unix::process::CommandExt`), so its pid is its group id. `Drop` only sends
/// signals and reaps the direct child (`wait` after SIGKILL returns promptly); it never spawns.
#[derive(Debug)]
pub struct ProcessGroupGuard {
    child: Child,
    extra: Vec<u32>,
}

impl ProcessGroupGuard {
    /// Takes ownership of `child`, whose pid is its process group id.
    #[must_use]
    pub fn new(child: Child) -> Self {
        Self {
            child,
            extra: Vec::new(),
        }
    }

    /// The process group id (= the child's pid).
    #[must_use]
    pub fn pgid(&self) -> u32 {
        self.child.id()
    }

    /// The child, e.g. to take its pipes or `try_wait` it.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Also SIGKILL `pid` on drop (e.g. a grandchild that left the group with `setsid`).
    pub fn also_kill(&mut self, pid: u32) {
        self.extra.push(pid);
    }

    /// SIGKILLs the group and the extra pids now and reaps the child; idempotent.
    pub fn kill_all(&mut self) {
        let _ = signal_group(self.pgid(), Signal::SIGKILL);
        for &pid in &self.extra {
            let _ = signal_pid(pid, Signal::SIGKILL);
        }
        // The direct child is ours to reap, group kill or not.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ProcessGroupGuard {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// The text of the fixture server's `huge_field {bytes}` result: the unit
/// `a"b\c é€😀<LF><TAB>` repeated and cut at a character boundary to at most `bytes` UTF-8
/// bytes. Quotes, backslashes, control characters and 2-, 3- and 4-byte characters make JSON
/// escaping and byte-vs-char counting matter.
#[must_use]
pub fn huge_field_text(bytes: usize) -> String {
    const UNIT: &str = "a\"b\\c é€😀\n\t";
    let mut s = String::with_capacity(bytes);
    for ch in UNIT.chars().cycle() {
        if s.len() + ch.len_utf8() > bytes {
            break;
        }
        s.push(ch);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_parentheses_in_the_name() {
        let s = parse_stat("42 (a) b (c)) S 7 42 42 0 -1 4194560").expect("valid stat line");
        assert_eq!(
            s,
            ProcStat {
                pid: 42,
                state: 'S',
                ppid: 7,
                pgrp: 42,
                session: 42
            }
        );
    }

    #[test]
    fn our_own_process_is_alive_and_has_a_stat() {
        let me = std::process::id();
        assert!(pid_alive(me));
        assert_eq!(proc_stat(me).expect("own stat").pid, me);
    }

    #[test]
    fn refuses_our_own_group() {
        let own = u32::try_from(getpgrp().as_raw()).expect("pgid is positive");
        assert_eq!(signal_group(own, Signal::SIGKILL), Err(nix::Error::EINVAL));
        assert_eq!(signal_group(1, Signal::SIGKILL), Err(nix::Error::EINVAL));
    }

    #[test]
    fn huge_field_text_respects_char_boundaries() {
        for n in 0..64 {
            let s = huge_field_text(n);
            assert!(s.len() <= n && s.len() + 4 > n, "n={n} len={}", s.len());
        }
    }

    #[test]
    fn wait_until_reports_timeout_and_success() {
        assert!(
            wait_until(Duration::from_millis(20), Duration::from_millis(5), || {
                false
            })
            .is_none()
        );
        assert!(wait_until(Duration::ZERO, Duration::from_millis(5), || true).is_some());
    }
}

/// A path named `name` inside a fresh temporary folder of its own (`tempfile`): the folder,
/// with whatever the test or its processes wrote there, is removed when this is dropped, so a
/// test leaves nothing in the temporary directory, also when it fails (unwinding drops it).
/// Nothing is created at the path itself.
#[derive(Debug)]
pub struct TempPath {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempPath {
    /// A fresh folder `mcp-stdio-test-XXXXXX` in the temporary directory, and `name` in it.
    ///
    /// # Panics
    /// When the folder cannot be created.
    #[must_use]
    pub fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("mcp-stdio-test-")
            .tempdir()
            .expect("create a temporary folder");
        Self {
            path: dir.path().join(name),
            _dir: dir,
        }
    }

    /// The path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for TempPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<OsStr> for TempPath {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}
