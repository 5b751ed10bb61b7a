//! `mcp-stdio guard --share`: one server for many host sessions (F2:
//! sessions never see each other). Real processes: guards, the hub they
//! start, the fixture server; each test in a runtime folder of its own.
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{call, fixture_server, guard_command, Guarded, RuntimeBase};

/// A runtime base of the test's own (`XDG_RUNTIME_DIR`).
struct Base(RuntimeBase);

impl std::ops::Deref for Base {
    type Target = RuntimeBase;
    fn deref(&self) -> &RuntimeBase {
        &self.0
    }
}

impl Base {
    fn new() -> Self {
        Self(RuntimeBase::new())
    }

    fn share_dir(&self) -> PathBuf {
        self.folder().join("share")
    }

    /// A guard with `--share` and `args` in front of the fixture server.
    fn guard(&self, args: &[&str]) -> Guarded {
        let mut all = vec!["--no-announce", "--share", "--share-linger", "1s"];
        all.extend_from_slice(args);
        Guarded::spawn(self.guard_command(&all))
    }

    /// The hub serving this base, if one runs.
    fn hub(&self) -> Option<u32> {
        self.hubs().first().copied()
    }

    /// Every hub of this base.
    fn hubs(&self) -> Vec<u32> {
        let needle = self.share_dir();
        let needle = needle.to_str().expect("utf-8");
        procs()
            .into_iter()
            .filter(|(_, _, cmdline)| cmdline.contains("--hub-socket") && cmdline.contains(needle))
            .map(|(pid, _, _)| pid)
            .collect()
    }
}

/// Every process: pid, parent, command line.
fn procs() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(stat), Ok(cmdline)) = (
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
            std::fs::read(format!("/proc/{pid}/cmdline")),
        ) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        let Some(ppid) = rest.split(' ').nth(1).and_then(|p| p.parse().ok()) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        out.push((pid, ppid, cmdline));
    }
    out
}

fn children(pid: u32) -> Vec<u32> {
    procs()
        .into_iter()
        .filter(|(_, ppid, _)| *ppid == pid)
        .map(|(p, _, _)| p)
        .collect()
}

fn initialize(g: &mut Guarded, capabilities: Value) -> Duration {
    let t = Instant::now();
    g.send(
        &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":capabilities,
        "clientInfo":{"name":"share-test","version":"1"}}}),
    );
    let r = g.reply(0);
    assert_eq!(r["result"]["serverInfo"]["name"], "fixture-server", "{r}");
    g.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    t.elapsed()
}

/// SIGKILL to `pid` (a hub: it gets no chance to say goodbye).
fn sigkill(pid: u32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill");
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s[s.rfind(')').map_or(0, |i| i + 2)..].starts_with('Z'))
}

fn wait_gone(pid: u32, within: Duration) -> Duration {
    let t = Instant::now();
    while !gone(pid) {
        assert!(
            t.elapsed() < within,
            "pid {pid} still there after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

/// Four host sessions, one server: each gets its own answers under the
/// same ids, a later session's `initialize` is answered by the hub, and
/// when the last leaves the hub and the server are gone after the linger.
#[test]
fn f2_four_sessions_share_one_server_with_colliding_ids_and_nothing_stays() {
    let base = Base::new();
    let mut gs: Vec<Guarded> = (0..4).map(|_| base.guard(&[])).collect();
    let mut inits = Vec::new();
    for g in &mut gs {
        inits.push(initialize(g, json!({})));
    }
    let hub = base.hub().expect("a hub");
    let servers = children(hub);
    assert_eq!(
        servers.len(),
        1,
        "one server for four sessions: {servers:?}"
    );
    for (i, g) in gs.iter_mut().enumerate() {
        g.send(&call(1, "echo", json!({"text": format!("session {i}")})));
    }
    for (i, g) in gs.iter_mut().enumerate() {
        let r = g.reply(1);
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("session {i}"),
            "{r}"
        );
    }
    eprintln!("initialize through the hub: {inits:?}");
    assert!(
        inits[1..].iter().all(|d| *d < Duration::from_secs(1)),
        "a later initialize is the hub's: {inits:?}"
    );
    for g in gs {
        let (code, stderr) = g.close();
        assert_eq!(code, Some(0), "{stderr}");
    }
    let took = wait_gone(hub, Duration::from_secs(10));
    wait_gone(servers[0], Duration::from_secs(5));
    eprintln!("the hub ended {took:?} after the last session (linger 1 s)");
    let left: Vec<_> = std::fs::read_dir(base.share_dir())
        .expect("share dir")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
        .collect();
    assert!(left.is_empty(), "the socket is removed: {left:?}");
}

/// G6 across sessions: a cancel reaches only its own session's request;
/// a host killed mid-call ends only its session.
#[test]
fn g6_f2_a_cancel_or_a_killed_host_leaves_the_other_sessions_alone() {
    let base = Base::new();
    let mut a = base.guard(&[]);
    let mut b = base.guard(&[]);
    let mut c = base.guard(&[]);
    for g in [&mut a, &mut b, &mut c] {
        initialize(g, json!({}));
    }
    let slow = json!({"chunks": 10, "delay_ms": 100, "honour_cancel": true});
    a.send(&call(5, "slow", slow.clone()));
    b.send(&call(5, "slow", slow.clone()));
    c.send(&call(5, "slow", slow));
    std::thread::sleep(Duration::from_millis(200));
    a.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}));
    // c's host dies mid-call (its guard killed).
    c.child.kill().expect("kill");
    let r = b.reply(5);
    assert!(r.get("result").is_some(), "b's call completes: {r}");
    // a's answer never comes; a goes on.
    a.send(&call(6, "echo", json!({"text": "a after"})));
    let r = a.reply(6);
    assert_eq!(r["result"]["content"][0]["text"], "a after", "{r}");
    assert!(
        a.lines.try_recv().is_err(),
        "nothing for the cancelled call"
    );
    b.send(&call(7, "echo", json!({"text": "b after"})));
    assert_eq!(b.reply(7)["result"]["content"][0]["text"], "b after");
    a.close();
    b.close();
}

/// The hub killed: every session's guard closes its host's stdout within
/// a second (its call ends with the session), and the server goes with
/// the hub.
#[test]
fn f2_the_hub_killed_ends_every_session_at_once() {
    let base = Base::new();
    let mut a = base.guard(&[]);
    let mut b = base.guard(&[]);
    initialize(&mut a, json!({}));
    initialize(&mut b, json!({}));
    let hub = base.hub().expect("a hub");
    let server = children(hub)[0];
    a.send(&call(1, "slow", json!({"chunks": 50, "delay_ms": 100})));
    b.send(&call(1, "slow", json!({"chunks": 50, "delay_ms": 100})));
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    sigkill(hub);
    for g in [a, b] {
        let r = g.reply(1);
        assert_eq!(
            r["error"]["code"], -32001,
            "the open call gets the crash error: {r}"
        );
        let (code, stderr) = g.exits_by_itself(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("the hub closed this session"), "{stderr}");
    }
    eprintln!("both sessions ended {:?} after the hub's kill", t.elapsed());
    wait_gone(server, Duration::from_secs(5));
}

/// A session the shared server cannot serve as it serves the first (the
/// first had `sampling`, this one has not) gets a server of its own,
/// transparently, with one note.
#[test]
fn f2_a_session_the_shared_server_cannot_serve_gets_a_private_one() {
    let base = Base::new();
    // With --audit: the hub keeps the shared log; b's own goes beside it.
    let log = base.path().join("audit.jsonl");
    let log_arg = log.to_str().expect("utf-8");
    let mut a = base.guard(&["--audit", log_arg]);
    initialize(&mut a, json!({"sampling": {}}));
    let mut b = base.guard(&["--audit", log_arg]);
    initialize(&mut b, json!({}));
    b.send(&call(1, "echo", json!({"text": "private"})));
    assert_eq!(b.reply(1)["result"]["content"][0]["text"], "private");
    let hub = base.hub().expect("a hub");
    assert_eq!(children(hub).len(), 1, "the hub's server only");
    let b_pid = b.child.id();
    assert_eq!(children(b_pid).len(), 1, "b runs its own");
    let (code, stderr) = b.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("running a server of its own").count(),
        1,
        "{stderr}"
    );
    a.close();
    wait_gone(hub, Duration::from_secs(10));
    let own = base.path().join(format!("audit.jsonl.private-{b_pid}"));
    for path in [&log, &own] {
        let out = std::process::Command::new(guarded::guard_bin())
            .args(["verify", path.to_str().expect("utf-8")])
            .output()
            .expect("verify");
        assert_eq!(out.status.code(), Some(0), "{}: {out:?}", path.display());
    }
    let private = std::fs::read_to_string(&own).expect("b's own log");
    assert!(private.contains("\"echo\""), "{private}");
}

/// `--pin`, which a shared session cannot honour yet, is a usage error
/// that names it.
#[test]
fn f2_share_with_pin_is_a_usage_error() {
    let base = Base::new();
    let b = base.path().to_str().expect("utf-8");
    let out = guard_command(
        &["--share", "--pin", "pins.json"],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", b)],
    )
    .stdin(std::process::Stdio::null())
    .output()
    .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pin"));
}

/// G1 per session: a host that stops reading has its own session closed
/// once 8 MiB wait for it (its guard exits 75); another session's pings go
/// on meanwhile.
#[test]
fn g1_a_host_that_stops_reading_loses_its_session_and_the_others_go_on() {
    use std::io::{Read, Write};
    let base = Base::new();
    let mut b = base.guard(&[]);
    initialize(&mut b, json!({}));
    // A host that writes and never reads its stdout.
    let mut stalled = guard_command(
        &["--no-announce", "--share", "--share-linger", "1s"],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", base.path().to_str().expect("utf-8"))],
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("spawn");
    let mut input = stalled.stdin.take().expect("stdin");
    let mut send = |v: &Value| {
        input.write_all(format!("{v}\n").as_bytes()).expect("write");
    };
    send(
        &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"s","version":"1"}}}),
    );
    send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    for id in 10..16 {
        send(&call(id, "big", json!({"bytes": 4 * 1024 * 1024})));
    }
    let t = Instant::now();
    let mut slowest = Duration::ZERO;
    for id in 100..150 {
        slowest = slowest.max(guarded::ping(&mut b, id));
    }
    eprintln!(
        "50 pings beside a stalled session in {:?}, the slowest {slowest:?}",
        t.elapsed()
    );
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    // The hub closes the stalled session (its log says why).
    let t = Instant::now();
    let log = loop {
        let log = std::fs::read_dir(base.share_dir())
            .expect("share dir")
            .flatten()
            .find(|e| e.path().extension().is_some_and(|x| x == "log"))
            .and_then(|e| std::fs::read_to_string(e.path()).ok())
            .unwrap_or_default();
        if log.contains("its host stopped reading") || t.elapsed() > Duration::from_secs(20) {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(log.contains("its host stopped reading"), "{log}");
    eprintln!(
        "the stalled session was closed {:?} after the pings",
        t.elapsed()
    );
    b.send(&call(1, "echo", json!({"text": "still here"})));
    assert_eq!(b.reply(1)["result"]["content"][0]["text"], "still here");
    b.close();
    // Its guard says so and exits 75 on its own, as a guard of its own would.
    let t = Instant::now();
    let status = loop {
        if let Some(status) = stalled.try_wait().expect("wait") {
            break Some(status);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = stalled.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(input);
    let mut err = String::new();
    let _ = stalled
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    let _ = stalled.wait();
    let status = status.unwrap_or_else(|| panic!("the stalled guard did not exit: {err}"));
    eprintln!("the stalled guard exited {status} after {:?}", t.elapsed());
    assert_eq!(status.code(), Some(75), "{err}");
    assert!(err.contains("the host stopped reading"), "{err}");
}

/// Same uid only: a process of another uid (`nobody`) that reaches the
/// hub's socket (the folder and socket opened to it on purpose) gets
/// nothing; the kernel's peer credentials decide, not the modes.
#[test]
fn f2_a_peer_of_another_uid_is_refused_by_the_hub() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: switching to nobody needs root");
        return;
    }
    let base = Base::new();
    let mut a = base.guard(&[]);
    initialize(&mut a, json!({}));
    let sock = std::fs::read_dir(base.share_dir())
        .expect("share dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sock"))
        .expect("the hub's socket");
    let above = base.path().parent().expect("the test's folder").to_owned();
    for (p, mode) in [
        (above.as_path(), 0o755),
        (base.path(), 0o755),
        (&base.path().join("mcp-stdio"), 0o755),
        (&base.share_dir(), 0o755),
        (&sock, 0o777),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
d = b""
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}\n')
    while True:
        c = s.recv(65536)
        if not c:
            break
        d += c
except (ConnectionResetError, BrokenPipeError):
    pass
print(len(d))
"#;
    use std::os::unix::process::CommandExt;
    let out = match std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&sock)
        .uid(65534)
        .gid(65534)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: python3 as nobody: {e}");
            a.close();
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "nobody got an answer"
    );
    // The session of our uid goes on.
    a.send(&call(2, "echo", json!({"text": "mine"})));
    assert_eq!(a.reply(2)["result"]["content"][0]["text"], "mine");
    a.close();
}

/// The hub's folder deleted under it (a cleaner of the runtime folder, a
/// logout): nothing hangs and nothing is lost. The attached session goes
/// on with its hub; the next guard cannot find that hub and starts another,
/// which later guards join; the first hub, once its last session has gone,
/// stops after the linger and leaves the new hub's socket alone.
#[test]
fn f2_the_share_folder_deleted_under_the_hub_loses_nothing() {
    let base = Base::new();
    let mut a = base.guard(&[]);
    initialize(&mut a, json!({}));
    let first = base.hub().expect("a hub");
    std::fs::remove_dir_all(base.share_dir()).expect("delete the share folder");
    assert!(guarded::ping(&mut a, 2) < Duration::from_secs(2));
    let mut b = base.guard(&[]);
    initialize(&mut b, json!({}));
    let hubs = base.hubs();
    assert_eq!(hubs.len(), 2, "a second hub: {hubs:?}");
    let second = hubs.into_iter().find(|&p| p != first).expect("the new hub");
    a.send(&call(3, "echo", json!({"text": "a goes on"})));
    assert_eq!(a.reply(3)["result"]["content"][0]["text"], "a goes on");
    a.close();
    let took = wait_gone(first, Duration::from_secs(10));
    eprintln!("the first hub stopped {took:?} after its last session left");
    // The new hub's socket is still there: a third guard joins it.
    let mut c = base.guard(&[]);
    let t = initialize(&mut c, json!({}));
    eprintln!("a third guard joined the new hub in {t:?}");
    assert_eq!(base.hubs(), [second], "no third hub");
    c.send(&call(4, "echo", json!({"text": "c joined"})));
    assert_eq!(c.reply(4)["result"]["content"][0]["text"], "c joined");
    b.close();
    c.close();
    wait_gone(second, Duration::from_secs(10));
}

/// `--restart` with `--share`: the hub killed is a server crash for each
/// session (the open call gets -32001 at once), then each guard starts or
/// joins a new hub and replays its host's handshake there; the hosts go on
/// with the next call, one new hub serving both.
#[test]
fn f2_with_restart_a_killed_hub_is_a_crash_and_the_sessions_join_a_new_one() {
    let base = Base::new();
    let flags = ["--restart", "on-failure", "--restart-backoff", "0.05"];
    let mut a = base.guard(&flags);
    let mut b = base.guard(&flags);
    initialize(&mut a, json!({}));
    initialize(&mut b, json!({}));
    let hub = base.hub().expect("a hub");
    let server = children(hub)[0];
    a.send(&call(1, "slow", json!({"chunks": 50, "delay_ms": 100})));
    b.send(&call(1, "slow", json!({"chunks": 50, "delay_ms": 100})));
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    sigkill(hub);
    for g in [&mut a, &mut b] {
        let r = g.reply(1);
        assert_eq!(r["error"]["code"], -32001, "the open call: {r}");
    }
    eprintln!("both open calls failed {:?} after the kill", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    wait_gone(server, Duration::from_secs(5));
    for (k, g) in [&mut a, &mut b].into_iter().enumerate() {
        let text = format!("after the crash {k}");
        g.send(&call(2, "echo", json!({"text": text})));
        let r = g.reply(2);
        assert_eq!(r["result"]["content"][0]["text"], text, "{r}");
    }
    eprintln!("both sessions went on {:?} after the kill", t.elapsed());
    let hubs = base.hubs();
    assert_eq!(hubs.len(), 1, "one new hub serves both: {hubs:?}");
    assert_ne!(hubs[0], hub);
    let (code, stderr) = a.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("joined a new hub"), "{stderr}");
    b.close();
    wait_gone(hubs[0], Duration::from_secs(10));
}

/// The hub's log is bounded: a server that writes 24 MiB on stderr leaves
/// at most three files of 10 MiB (`<key>.log`, `.log.1`, `.log.2`), and
/// its calls are answered meanwhile.
#[test]
fn g2_f2_the_hub_log_is_rotated_under_a_stderr_flood() {
    let base = Base::new();
    let mut a = base.guard(&[]);
    initialize(&mut a, json!({}));
    let t = Instant::now();
    for id in 1..=3 {
        let r = a.call_tool(id, "stderr_flood", json!({"bytes": 8 * 1024 * 1024}));
        assert!(r.get("result").is_some(), "{r}");
    }
    eprintln!("24 MiB of stderr through the hub in {:?}", t.elapsed());
    a.close();
    let hub = base.hub();
    if let Some(hub) = hub {
        wait_gone(hub, Duration::from_secs(10));
    }
    let mut sizes: Vec<(String, u64)> = std::fs::read_dir(base.share_dir())
        .expect("share dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".log"))
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    sizes.sort();
    eprintln!("the hub's log files: {sizes:?}");
    assert!(sizes.len() <= 3, "{sizes:?}");
    assert!(
        sizes.iter().any(|(n, _)| n.ends_with(".log.1")),
        "{sizes:?}"
    );
    let total: u64 = sizes.iter().map(|(_, l)| l).sum();
    assert!(total <= 3 * 10 * 1024 * 1024 + 64 * 1024, "{sizes:?}");
}

/// `--idle-stop` with `--share`: the shared server never stops while a
/// call is in flight (a 2.5 s call under a 1 s idle stop); once nothing is
/// open for the set time it is stopped and both sessions stay; the next
/// call, from the other session, starts it again (the handshake replayed
/// by the hub) and is answered.
#[test]
fn f2_a_shared_server_sleeps_when_idle_never_mid_call_and_wakes_for_the_next() {
    let base = Base::new();
    let mut a = base.guard(&["--idle-stop", "1s"]);
    let mut b = base.guard(&["--idle-stop", "1s"]);
    initialize(&mut a, json!({}));
    initialize(&mut b, json!({}));
    let hub = base.hub().expect("a hub");
    let first = children(hub)[0];
    let t = Instant::now();
    let r = a.call_tool(1, "slow", json!({"chunks": 25, "delay_ms": 100}));
    assert!(r.get("result").is_some(), "the long call completes: {r}");
    assert!(!gone(first), "not stopped during the call");
    eprintln!("a {:?} call under a 1 s idle stop completed", t.elapsed());
    let slept = wait_gone(first, Duration::from_secs(10));
    eprintln!("the server stopped {slept:?} after the call");
    assert!(children(hub).is_empty(), "{:?}", children(hub));
    let t = Instant::now();
    let r = b.call_tool(2, "echo", json!({"text": "awake"}));
    assert_eq!(r["result"]["content"][0]["text"], "awake", "{r}");
    eprintln!(
        "the next call was answered in {:?} (a new server)",
        t.elapsed()
    );
    let second = children(hub);
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first);
    let r = a.call_tool(3, "echo", json!({"text": "a too"}));
    assert_eq!(r["result"]["content"][0]["text"], "a too", "{r}");
    a.close();
    b.close();
    wait_gone(hub, Duration::from_secs(10));
    let log = std::fs::read_dir(base.share_dir())
        .expect("share dir")
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "log"))
        .and_then(|e| std::fs::read_to_string(e.path()).ok())
        .unwrap_or_default();
    assert!(log.contains("the server sleeps"), "{log}");
    assert!(log.contains("started again"), "{log}");
}

/// `--audit` with `--share`: the hub keeps one audit log for its sessions,
/// a record per call naming its host session (`hub-…/1`, `hub-…/2`), ended
/// as the call ended; sealed when the hub stops, and `verify` passes it.
#[test]
fn f2_audit_with_share_is_the_hubs_log_with_a_record_per_call_naming_its_session() {
    let base = Base::new();
    let log = base.path().join("audit.jsonl");
    let log_arg = log.to_str().expect("utf-8");
    let mut a = base.guard(&["--audit", log_arg]);
    let mut b = base.guard(&["--audit", log_arg]);
    initialize(&mut a, json!({}));
    initialize(&mut b, json!({}));
    let r = a.call_tool(1, "echo", json!({"text": "a"}));
    assert!(r.get("result").is_some(), "{r}");
    b.send(&call(1, "slow", json!({"chunks": 50, "delay_ms": 100})));
    std::thread::sleep(Duration::from_millis(200));
    b.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}));
    let r = b.call_tool(2, "echo", json!({"text": "b"}));
    assert!(r.get("result").is_some(), "{r}");
    let hub = base.hub().expect("a hub");
    a.close();
    b.close();
    wait_gone(hub, Duration::from_secs(10));
    let out = std::process::Command::new(guarded::guard_bin())
        .args(["verify", "--json", log_arg])
        .output()
        .expect("verify");
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let records: Vec<Value> = std::fs::read_to_string(&log)
        .expect("the log")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line")["record"].clone())
        .filter(|r| r.get("call_id").is_some())
        .collect();
    let seen: Vec<(String, String, String)> = records
        .iter()
        .map(|r| {
            let session = r["session_id"].as_str().unwrap_or_default();
            (
                session[session.rfind('/').map_or(0, |i| i + 1)..].to_owned(),
                r["operation"].as_str().unwrap_or_default().to_owned(),
                r["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    eprintln!("verify: {report}");
    eprintln!("records: {seen:?}");
    // Each host session's calls under its own name: a's (initialize, echo)
    // under one, b's (its cancelled call, echo) under another.
    let of = |session: &str| -> Vec<(String, String)> {
        seen.iter()
            .filter(|(s, _, _)| s == session)
            .map(|(_, op, state)| (op.clone(), state.clone()))
            .collect()
    };
    let a_session = &seen
        .iter()
        .find(|(_, op, _)| op == "initialize")
        .expect("a's")
        .0;
    let b_session = &seen.iter().find(|(_, op, _)| op == "slow").expect("b's").0;
    assert_ne!(a_session, b_session);
    let pair = |op: &str, state: &str| (op.to_owned(), state.to_owned());
    assert_eq!(
        of(a_session),
        [pair("initialize", "completed"), pair("echo", "completed")]
    );
    assert_eq!(
        of(b_session),
        [
            pair("slow", "cancelled_after_dispatch"),
            pair("echo", "completed")
        ]
    );
    assert!(
        records.iter().all(|r| r["session_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("hub-"))),
        "{records:?}"
    );
}

/// A socket at a key's path whose hub is of another key (stale or
/// tampered: here another hub's socket moved there): the hub refuses the
/// guard's hello, the guard runs a server of its own with one note, and
/// its host's calls are answered.
#[test]
fn f2_a_hub_of_another_key_at_the_path_is_refused_and_the_guard_runs_its_own() {
    let base = Base::new();
    // Two keys: the wire limit is part of it.
    let mut a = base.guard(&[]);
    initialize(&mut a, json!({}));
    let sockets = |base: &Base| -> Vec<PathBuf> {
        std::fs::read_dir(base.share_dir())
            .expect("share dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sock"))
            .collect()
    };
    let first = sockets(&base);
    assert_eq!(first.len(), 1);
    let mut b = base.guard(&["--max-frame", "2000000"]);
    initialize(&mut b, json!({}));
    let both = sockets(&base);
    let other = both
        .iter()
        .find(|p| !first.contains(p))
        .expect("b's socket")
        .clone();
    b.close();
    // b's hub lingers 1 s; then a's socket is put at b's key's path.
    let t = Instant::now();
    while other.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!other.exists(), "b's hub is gone");
    std::fs::rename(&first[0], &other).expect("move a's hub socket");
    let mut c = base.guard(&["--max-frame", "2000000"]);
    initialize(&mut c, json!({}));
    c.send(&call(1, "echo", json!({"text": "own"})));
    assert_eq!(c.reply(1)["result"]["content"][0]["text"], "own");
    let c_pid = c.child.id();
    assert_eq!(children(c_pid).len(), 1, "c runs its own server");
    let (code, stderr) = c.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("running a server of its own"), "{stderr}");
    let log = std::fs::read_to_string(first[0].with_extension("log")).unwrap_or_default();
    assert!(log.contains("refused: the guard's share key is"), "{log}");
    a.close();
}

/// `mcp-stdio ps` lists a hub: a row of its own (its sessions as its
/// host), state `running`, then `sleeping` after an idle stop; `logs`
/// shows the shared server's stderr.
#[test]
fn f2_ps_lists_the_hub_running_then_sleeping_and_logs_shows_its_server() {
    let base = Base::new();
    let guard = |name: &str| {
        Guarded::spawn(base.guard_command(&[
            "--share",
            "--share-linger",
            "1s",
            "--idle-stop",
            "1s",
            "--name",
            name,
        ]))
    };
    let mut g1 = guard("shared-fixture");
    let mut g2 = guard("shared-fixture");
    initialize(&mut g1, json!({}));
    initialize(&mut g2, json!({}));
    let ps = || base.ps();
    let hub_row = |rows: &[Value]| {
        rows.iter()
            .find(|r| r["share"].is_object())
            .cloned()
            .unwrap_or_else(|| panic!("no hub row in {rows:?}"))
    };
    let row = hub_row(&ps());
    eprintln!("the hub's row: {row}");
    assert_eq!(row["name"], "shared-fixture");
    assert_eq!(row["state"], "running");
    assert_eq!(row["share"]["sessions"], 2);
    assert!(row["process"]["pid"].as_u64().is_some(), "{row}");
    let t = Instant::now();
    let row = loop {
        let row = hub_row(&ps());
        if row["state"] == "sleeping" || t.elapsed() > Duration::from_secs(10) {
            break row;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(row["state"], "sleeping", "{row}");
    eprintln!(
        "ps shows the hub sleeping {:?} after the handshakes",
        t.elapsed()
    );
    let (_, text, _) = base.run(&["logs", "shared-fixture"]);
    assert!(text.contains("fixture: started"), "{text}");
    g1.close();
    g2.close();
}

/// G1 for the hub's status socket: eight clients that connect and say
/// nothing fill it (a ninth is refused), a session's pings go on at their
/// pace meanwhile, and each silent client is dropped at its deadline.
#[test]
fn g1_hub_status_clients_that_stall_never_slow_a_session() {
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    let base = Base::new();
    let b = base.path().to_str().expect("utf-8").to_owned();
    let mut g = Guarded::spawn(guard_command(
        &["--share", "--share-linger", "1s"],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", b.as_str())],
    ));
    initialize(&mut g, json!({}));
    let hub = base.hub().expect("a hub");
    let sock = base.path().join("mcp-stdio").join(format!("{hub}.sock"));
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let silent: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&sock).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut ninth = UnixStream::connect(&sock).expect("connect");
    ninth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = Vec::new();
    let _ = ninth.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    let mut worst = Duration::ZERO;
    for id in 1..=20 {
        worst = worst.max(guarded::ping(&mut g, id));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "pings while 8 clients stalled the hub's status socket: worst {:.1} ms",
        worst.as_secs_f64() * 1e3
    );
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("closed by the hub");
        assert!(rest.is_empty());
    }
    g.close();
}

/// `--log-file` and `--metrics` with `--share` are the hub's: its log (the
/// server's stderr and its notes) goes to the file named, rotated as
/// `--log-file` says, and its figures are written when it stops.
#[test]
fn f2_log_file_and_metrics_with_share_are_the_hubs() {
    let base = Base::new();
    let log = base.path().join("server.log");
    let metrics = base.path().join("metrics.json");
    let (log_arg, metrics_arg) = (
        log.to_str().expect("utf-8"),
        metrics.to_str().expect("utf-8"),
    );
    let flags = ["--log-file", log_arg, "--metrics", metrics_arg];
    let mut a = base.guard(&flags);
    let mut b = base.guard(&flags);
    initialize(&mut a, json!({}));
    initialize(&mut b, json!({}));
    for (g, id) in [(&mut a, 1), (&mut b, 2)] {
        let r = g.call_tool(id, "echo", json!({"text": "x"}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let hub = base.hub().expect("a hub");
    a.close();
    b.close();
    wait_gone(hub, Duration::from_secs(10));
    let text = std::fs::read_to_string(&log).expect("the hub's log file");
    assert!(text.contains("fixture: started"), "{text}");
    assert!(text.contains("mcp-stdio hub: serving"), "{text}");
    let figures: Value =
        serde_json::from_slice(&std::fs::read(&metrics).expect("the metrics file")).expect("JSON");
    eprintln!("the hub's metrics: {figures}");
    assert_eq!(
        figures["hub"]["metrics"]["handshakes_shared"], 1,
        "{figures}"
    );
    assert!(
        figures["hub"]["metrics"]["requests"].as_u64() >= Some(3),
        "{figures}"
    );
}

/// The tool policies with `--share` (F4): two sessions with the same
/// policies share one hub, and each is limited as if alone. A denied tool
/// is refused, hidden from `tools/list`; the loop brake counts each
/// session's calls apart; a long result is cut with its marker; a guard
/// under other policies gets a hub of its own; the hub's metrics add the
/// sessions' counts.
#[test]
fn f4_the_tool_policies_hold_for_each_shared_session() {
    let base = Base::new();
    let metrics = base.path().join("metrics.json");
    let metrics_arg = metrics.to_str().expect("utf-8");
    let flags = [
        "--deny-tool",
        "slow*",
        "--repeat-limit",
        "1",
        "--max-result-text",
        "200",
        "--metrics",
        metrics_arg,
    ];
    let mut a = base.guard(&flags);
    let mut b = base.guard(&flags);
    initialize(&mut a, json!({}));
    initialize(&mut b, json!({}));
    assert_eq!(base.hubs().len(), 1, "one hub for the same policies");
    let list = a.list_tools(1, None);
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && !names.iter().any(|n| n.starts_with("slow")),
        "{names:?}"
    );
    let r = b.call_tool(2, "slow", json!({"chunks": 1, "delay_ms": 1}));
    assert_eq!(r["error"]["code"], -32031, "{r}");
    assert_eq!(r["error"]["data"]["policy"], "tools", "{r}");
    // One echo each passes; a's second identical one is refused.
    for g in [&mut a, &mut b] {
        let r = g.call_tool(3, "echo", json!({"text": "same"}));
        assert_eq!(r["result"]["content"][0]["text"], "same", "{r}");
    }
    let r = a.call_tool(4, "echo", json!({"text": "same"}));
    assert_eq!(r["error"]["data"]["policy"], "repeat-limit", "{r}");
    let r = b.call_tool(5, "big", json!({"bytes": 100_000}));
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.len() <= 200 && text.contains("[mcp-stdio: "), "{text}");
    assert_eq!(
        r["result"]["_meta"]["io.mcp-stdio/truncated"]["totalBytes"], 100_000,
        "{r}"
    );
    // Other policies: a hub of their own.
    let mut c = base.guard(&["--max-result-text", "300"]);
    initialize(&mut c, json!({}));
    assert_eq!(base.hubs().len(), 2, "another hub for other policies");
    c.close();
    let hub = base.hubs()[0];
    a.close();
    b.close();
    wait_gone(hub, Duration::from_secs(10));
    let figures: Value =
        serde_json::from_slice(&std::fs::read(&metrics).expect("the metrics file")).expect("JSON");
    let policy = &figures["hub"]["metrics"]["policy"];
    assert_eq!(policy["refused_by"]["tools"], 1, "{figures}");
    assert_eq!(policy["refused_by"]["repeat-limit"], 1, "{figures}");
    assert_eq!(policy["results_cut"], 1, "{figures}");
}
