//! Spawning a child that dies with this process (Linux), even when this
//! process is killed with `SIGKILL`.
//!
//! The child asks the kernel for `SIGKILL` when its parent dies
//! (`PR_SET_PDEATHSIG`), between `fork` and `exec`. The kernel's "parent" is
//! the *thread* that forked: the signal fires when that thread exits, even
//! though the process lives on. tokio's blocking-pool threads exit after 10 s
//! idle, and an application may spawn from a short-lived thread, so every tied
//! child is forked by one process-wide spawner thread that never exits while
//! the process lives.
//!
//! What this covers: the direct child only. A grandchild the server started
//! is not tied (it is still in the server's process group, which an orderly
//! shutdown signals). The kernel also clears the setting when the child
//! executes a set-user-ID, set-group-ID or file-capability binary.
//!
//! Elsewhere (macOS, the BSDs, Windows) there is no such request, and a host
//! killed with `SIGKILL` leaves its child with only the end-of-file on its
//! stdin. Tied spawns still run on the spawner thread there, one at a time:
//! where pipes are made close-on-exec only after they are created (macOS has
//! no `pipe2`), a server forked at the same instant by another thread could
//! inherit the write end of a sibling's stdin and keep that EOF from coming.
//! Serialized, our own spawns never leak pipes into each other.

use std::io;

use mcp_stdio_core::CommandSpec;

/// Spawns `spec` (built by [`command`](crate::command): no shell, its own
/// process group) tied to this process's life: on Linux the child gets
/// `SIGKILL` when this process dies, however it dies.
///
/// `spawn` receives the std command, sets what it needs (pipes), converts it
/// to its runtime's command and spawns it. It runs on the process-wide
/// spawner thread, so it must carry whatever runtime context its spawn needs
/// (tokio: enter the caller's `Handle`); async-process and std need none.
/// The caller blocks until `spawn` returns, which is as long as the `fork`
/// and `exec` take. A panic in `spawn` is resumed on the caller.
///
/// # Errors
/// What `spawn` returns; or an error when the spawner thread cannot be
/// started or its job queue is gone.
pub fn spawn_tied<T, F>(spec: &CommandSpec, spawn: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce(std::process::Command) -> io::Result<T> + Send + 'static,
{
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut cmd = crate::command(spec)?;
    #[cfg(target_os = "linux")]
    kill_child_when_parent_dies(&mut cmd);
    spawner::on_spawner_thread(move || spawn(cmd))?
}

/// [`spawn_tied`] with stdin, stdout and stderr piped: how an MCP server is
/// spawned (by every `Client`, the guard and `check`). Take the pipes from
/// the child, then hand it to its group's owner.
///
/// # Errors
/// As [`spawn_tied`].
pub fn spawn_piped(spec: &CommandSpec) -> io::Result<std::process::Child> {
    spawn_tied(spec, |mut cmd| {
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
    })
}

/// The process-wide spawner thread.
pub(crate) mod spawner {
    use std::cell::Cell;
    use std::io;
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    use std::sync::mpsc::{self, Receiver, SyncSender};
    use std::sync::{Mutex, PoisonError};

    /// Spawn jobs that may wait for the spawner thread. A full queue blocks
    /// the next spawning thread (it would block in `fork` anyway); each waiting
    /// caller holds one job, a boxed closure of a few hundred bytes.
    pub(crate) const SPAWN_QUEUE: usize = 16;

    type Job = Box<dyn FnOnce() + Send>;

    /// The spawner thread's queue, and the process it was started in (a
    /// `fork` without `exec` copies this static but not the thread).
    struct Spawner {
        pid: u32,
        jobs: SyncSender<Job>,
    }

    static SPAWNER: Mutex<Option<Spawner>> = Mutex::new(None);

    thread_local! {
        /// True on the spawner thread itself: a job that spawns again runs
        /// inline instead of waiting for itself.
        static ON_SPAWNER: Cell<bool> = const { Cell::new(false) };
    }

    /// Runs `job` on the process-wide spawner thread (started on first use)
    /// and returns its result. The thread lives as long as the process.
    pub(crate) fn on_spawner_thread<T, F>(job: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if ON_SPAWNER.with(Cell::get) {
            return Ok(job());
        }
        let jobs = spawner_queue()?;
        // Capacity 1: exactly one result comes back, and the job never blocks on it.
        let (result_tx, result_rx) = mpsc::sync_channel(1);
        let boxed: Job = Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(job));
            // The caller waits for this; it is gone only if it panicked itself.
            let _ = result_tx.send(result);
        });
        jobs.send(boxed).map_err(|_| gone())?;
        match result_rx.recv() {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => resume_unwind(panic),
            Err(_) => Err(gone()),
        }
    }

    fn gone() -> io::Error {
        io::Error::other("the process-wide spawner thread is gone")
    }

    /// The spawner's queue, starting the thread if this process has none.
    fn spawner_queue() -> io::Result<SyncSender<Job>> {
        let me = std::process::id();
        // A poisoned lock only means another caller panicked while cloning a sender.
        let mut spawner = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = spawner.as_ref().filter(|s| s.pid == me) {
            return Ok(s.jobs.clone());
        }
        let (jobs, queue) = mpsc::sync_channel::<Job>(SPAWN_QUEUE);
        std::thread::Builder::new()
            .name("mcp-stdio-spawner".to_owned())
            .spawn(move || run_spawner(&queue))?;
        *spawner = Some(Spawner {
            pid: me,
            jobs: jobs.clone(),
        });
        Ok(jobs)
    }

    /// The spawner thread: runs jobs until the process ends (the static keeps
    /// a sender, so the queue never closes). Jobs catch their own panics.
    fn run_spawner(queue: &Receiver<Job>) {
        ON_SPAWNER.with(|on| on.set(true));
        while let Ok(job) = queue.recv() {
            job();
        }
    }
}

/// Asks the kernel, in the child before `exec`, to `SIGKILL` it when the
/// thread that forks it exits. If this process already died before the
/// request took effect (the child was reparented), the child exits at once.
#[cfg(target_os = "linux")]
pub(crate) fn kill_child_when_parent_dies(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;

    let parent = rustix::process::getpid();
    let in_child = move || -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        // The parent died between `fork` and the request: no signal will
        // come, so do not exec. std then `_exit`s the child.
        if rustix::process::getppid() != Some(parent) {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::SRCH.raw_os_error(),
            ));
        }
        Ok(())
    };
    // SAFETY: the closure runs in the child between `fork` and `exec`,
    // where only async-signal-safe calls are allowed. It makes two raw
    // system calls (`prctl`, `getppid`), compares two integers and builds
    // an `io::Error` from an OS error code (no allocation); it takes no
    // lock and touches no state shared with other threads.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(in_child);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::spawner::on_spawner_thread;
    use super::*;
    use std::time::{Duration, Instant};

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let state = s.get(s.rfind(')')? + 2..)?.chars().next()?;
                Some(!matches!(state, 'Z' | 'X'))
            })
            .unwrap_or(false)
    }

    #[test]
    fn g11_every_tied_spawn_runs_on_one_thread_that_outlives_its_callers() {
        let here = std::thread::current().id();
        let first = on_spawner_thread(|| std::thread::current().id()).expect("spawner runs");
        let second = std::thread::spawn(|| {
            on_spawner_thread(|| std::thread::current().id()).expect("spawner runs")
        })
        .join()
        .expect("thread joins");
        assert_ne!(first, here);
        assert_eq!(first, second);
        // A job that spawns again runs inline rather than deadlocking.
        let nested = on_spawner_thread(|| on_spawner_thread(|| 7).expect("inline"));
        assert_eq!(nested.expect("outer"), 7);
    }

    #[test]
    fn g11_a_panicking_spawn_reaches_its_caller_and_the_spawner_survives() {
        let caught = std::panic::catch_unwind(|| {
            let _ = on_spawner_thread(|| -> u32 { panic!("spawn closure panicked") });
        });
        assert!(caught.is_err());
        assert_eq!(on_spawner_thread(|| 5).expect("still running"), 5);
    }

    #[test]
    fn g11_a_tied_child_outlives_the_thread_that_asked_for_it() {
        let mut spec = CommandSpec::new("sleep");
        spec.arg("30");
        let mut child = std::thread::spawn(move || {
            spawn_tied(&spec, |mut cmd| {
                cmd.stdin(std::process::Stdio::null()).spawn()
            })
            .expect("sleep runs")
        })
        .join()
        .expect("thread joins");
        // The asking thread is gone; were the child tied to it, the kernel
        // would have sent SIGKILL on its exit.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            assert!(alive(child.id()), "killed when the asking thread exited");
            std::thread::sleep(Duration::from_millis(20));
        }
        crate::ProcessGroup::new(child.id()).signal(mcp_stdio_core::Signal::Kill);
        assert_eq!(
            crate::exit_status(child.wait().expect("waited")),
            mcp_stdio_core::ExitStatus::Signal(9)
        );
    }

    #[test]
    fn g11_a_child_of_an_exited_thread_is_killed_without_the_spawner() {
        // The pitfall the spawner thread exists for, shown directly: the same
        // request made from a thread that then exits kills the child.
        let mut cmd = crate::command(&CommandSpec::new("sleep")).expect("no sandbox");
        cmd.arg("30");
        kill_child_when_parent_dies(&mut cmd);
        let mut child = std::thread::spawn(move || cmd.spawn().expect("sleep runs"))
            .join()
            .expect("thread joins");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if start.elapsed() > Duration::from_secs(5) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        eprintln!("killed {:?} after its thread exited", start.elapsed());
        let Some(status) = status else {
            crate::ProcessGroup::new(child.id()).signal(mcp_stdio_core::Signal::Kill);
            let _ = child.wait();
            panic!("still running 5 s after the thread that forked it exited");
        };
        assert_eq!(
            crate::exit_status(status),
            mcp_stdio_core::ExitStatus::Signal(9)
        );
    }
}
