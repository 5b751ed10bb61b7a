//! F3, every running guard can be found and asked: the guard's status
//! socket, `mcp-stdio ps` and `mcp-stdio logs`, with real guards in front
//! of the fixture server, each test in a runtime folder of its own
//! (`XDG_RUNTIME_DIR`). G1 for the socket: a bounded number of clients,
//! clients that send nothing are dropped at their deadline, and none of it
//! slows the host's session.
#![cfg(target_os = "linux")]

#[path = "support/guarded.rs"]
mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{fixture_server, guard_bin, guard_command, ping, tmp, Guarded, RuntimeBase};

/// A runtime base of the test's own: `XDG_RUNTIME_DIR` for its guards.
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

    fn guard(&self, name: &str, server_args: &[&str]) -> Guarded {
        let mut cmd = self.guard_command(&["--name", name]);
        cmd.args(server_args);
        Guarded::spawn(cmd)
    }

    fn socket(&self, pid: u32) -> PathBuf {
        self.folder().join(format!("{pid}.sock"))
    }
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One request on the socket, the answer (all of it, to EOF; nothing when
/// the guard closed it unanswered, which may reset it).
fn ask(path: &Path, request: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(request);
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => answer,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => answer,
        Err(e) => panic!("no answer: {e}"),
    }
}

/// F3: `ps` lists every live guard of this user (20 here) well within a
/// second, and the socket a SIGKILLed guard left behind is cleaned away.
#[test]
fn f3_ps_lists_twenty_guards_and_cleans_a_dead_ones_socket() {
    let base = Base::new();
    let mut guards: Vec<Guarded> = (0..20)
        .map(|i| base.guard(&format!("srv{i:02}"), &[]))
        .collect();
    for g in &guards {
        let sock = base.socket(g.child.id());
        wait_for("the status socket", Duration::from_secs(20), || {
            sock.exists()
        });
    }
    let t = Instant::now();
    let rows = base.ps();
    let took = t.elapsed();
    eprintln!("ps over 20 guards: {:.1} ms", took.as_secs_f64() * 1e3);
    assert_eq!(rows.len(), 20, "{rows:?}");
    let mut names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names[0], "srv00");
    assert_eq!(names[19], "srv19");
    for r in &rows {
        assert_eq!(r["schema"], 1);
        assert!(r["process"]["pid"].as_u64().is_some(), "{r}");
        assert!(r["process"]["rss_bytes"].as_u64() > Some(0), "{r}");
    }
    // Generous: the figure itself is printed above.
    assert!(took < Duration::from_secs(5), "ps took {took:?}");
    let (code, table, _) = base.run(&["ps"]);
    assert_eq!(code, Some(0));
    assert_eq!(table.lines().count(), 21, "{table}");
    assert!(table.starts_with("NAME"), "{table}");

    // A guard killed outright leaves its socket; `ps` removes it.
    let mut dead = guards.remove(7);
    let dead_pid = dead.child.id();
    dead.child.kill().expect("kill");
    dead.child.wait().expect("reaped");
    assert!(base.socket(dead_pid).exists(), "SIGKILL leaves the socket");
    let rows = base.ps();
    assert_eq!(rows.len(), 19);
    assert!(
        !base.socket(dead_pid).exists(),
        "ps cleaned the dead guard's socket"
    );
    let (code, _, err) = base.run(&["logs", &dead_pid.to_string()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no running guard"), "{err}");

    // A guard that ends as a host ends it removes its own socket.
    let g = guards.remove(0);
    let pid = g.child.id();
    g.close();
    assert!(!base.socket(pid).exists());
}

/// G1: clients that connect and send nothing hold at most their slots
/// (8) until their deadline (2 s); one more is refused at once; the host's
/// pings go on at their pace all the while, and the port serves again
/// once they are dropped.
#[test]
fn g1_status_clients_that_stall_never_slow_the_session() {
    let base = Base::new();
    let mut g = base.guard("stalled", &[]);
    g.initialize();
    let sock = base.socket(g.child.id());
    wait_for("the status socket", Duration::from_secs(10), || {
        sock.exists()
    });
    let silent: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&sock).expect("connect"))
        .collect();
    // The ninth is refused: closed without an answer.
    std::thread::sleep(Duration::from_millis(200));
    let refused = ask(&sock, b"{\"request\":\"status\"}\n");
    assert!(refused.is_empty(), "{}", String::from_utf8_lossy(&refused));
    let mut worst = Duration::ZERO;
    for id in 1..=20 {
        worst = worst.max(ping(&mut g, id));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "host pings while 8 status clients stalled: worst {:.1} ms",
        worst.as_secs_f64() * 1e3
    );
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    // Each silent client is dropped at its deadline: EOF for it.
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("closed by the guard");
        assert!(rest.is_empty());
    }
    let status: Value =
        serde_json::from_slice(&ask(&sock, b"{\"request\":\"status\"}\n")).expect("a status");
    assert_eq!(status["status_port"]["dropped"], 8, "{status}");
    assert_eq!(status["status_port"]["refused_full"], 1, "{status}");
    assert_eq!(status["requests"]["ok"], 21, "{status}");
    assert!(status["latency"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["operation"] == "ping"));
    g.close();
}

/// Bad input: a request that is not valid gets one error line and the
/// connection closes; the guard keeps serving.
#[test]
fn f3_a_bad_status_request_gets_an_error_and_a_close() {
    let base = Base::new();
    let mut g = base.guard("bad-input", &[]);
    g.initialize();
    let sock = base.socket(g.child.id());
    wait_for("the status socket", Duration::from_secs(10), || {
        sock.exists()
    });
    for bad in [
        &b"status\n"[..],
        b"{\"request\":\"restart\"}\n",
        &[b'x'; 2000][..],
    ] {
        let answer: Value = serde_json::from_slice(&ask(&sock, bad)).expect("one JSON line");
        assert!(answer["error"].is_string(), "{answer}");
    }
    ping(&mut g, 1);
    let status: Value =
        serde_json::from_slice(&ask(&sock, b"{\"request\":\"status\"}\n")).expect("status");
    assert_eq!(status["status_port"]["bad_requests"], 3);
    assert_eq!(status["server"]["name"], "fixture-server", "{status}");
    assert_eq!(status["state"], "running");
    g.close();
}

/// `logs` prints the server's kept stderr, by name or by pid.
#[test]
fn f3_logs_prints_the_servers_stderr() {
    let base = Base::new();
    let mut g = base.guard("noisy", &[]);
    g.initialize();
    let pid = g.child.id();
    wait_for("the status socket", Duration::from_secs(10), || {
        base.socket(pid).exists()
    });
    let (code, out, err) = base.run(&["logs", "noisy", "-n", "50"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("fixture: started pid"), "{out}");
    let last = out.lines().last().expect("a line").to_owned();
    let (code, out, err) = base.run(&["logs", &pid.to_string(), "-n", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), [last.as_str()]);
    let (code, _, err) = base.run(&["logs", "nobody-by-this-name"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no running guard"), "{err}");
    g.close();
}

/// A runtime folder open to others is not used: one line says why, the
/// guard runs unannounced and serves its host as ever; `--no-announce`
/// opens nothing.
#[test]
fn f3_a_runtime_folder_open_to_others_is_refused() {
    let base = Base::new();
    std::fs::create_dir(base.folder()).expect("folder");
    std::fs::set_permissions(base.folder(), std::fs::Permissions::from_mode(0o755)).expect("0755");
    let mut g = base.guard("open", &[]);
    g.initialize();
    ping(&mut g, 1);
    assert!(!base.socket(g.child.id()).exists());
    let (_, err) = g.close();
    assert!(err.contains("not announced"), "{err}");
    assert!(err.contains("open to others (mode 0755)"), "{err}");
    let mode = std::fs::metadata(base.folder())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "left as it was");

    let base = Base::new();
    let base_path = base.path().to_str().unwrap().to_owned();
    let cmd = guard_command(
        &["--no-announce"],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", &base_path)],
    );
    let mut g = Guarded::spawn(cmd);
    g.initialize();
    assert!(!base.socket(g.child.id()).exists());
    assert!(base.ps().is_empty());
    g.close();
}

/// Only the guard's uid is answered: a peer of another uid (`nobody`) is
/// closed without an answer even when the folder and socket are opened
/// to it on purpose (the kernel's peer credentials decide, not the modes).
#[test]
fn f3_a_peer_of_another_uid_is_refused() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: switching to nobody needs root");
        return;
    }
    let base = Base::new();
    let mut g = base.guard("private", &[]);
    g.initialize();
    let sock = base.socket(g.child.id());
    wait_for("the status socket", Duration::from_secs(10), || {
        sock.exists()
    });
    // Open the way to the socket, as a careless chmod would.
    let above = base.path().parent().expect("the test's folder").to_owned();
    for (p, mode) in [
        (above.as_path(), 0o755),
        (base.path(), 0o755),
        (&base.folder(), 0o755),
        (&sock, 0o777),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    // What nobody gets: the bytes of an answer (0 when closed or reset unanswered;
    // the guard may close before the request is even sent).
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
d = b""
try:
    s.sendall(b'{"request":"status"}\n')
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
    let out = match Command::new("python3")
        .args(["-c", script])
        .arg(&sock)
        .uid(65534)
        .gid(65534)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: python3 as nobody: {e}");
            g.close();
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "0", "nobody got an answer");
    let status: Value =
        serde_json::from_slice(&ask(&sock, b"{\"request\":\"status\"}\n")).expect("status");
    assert_eq!(status["status_port"]["refused_other_user"], 1, "{status}");
    g.close();
}

/// Context switches of every thread of `pid` so far.
fn switches(pid: u32) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
    {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                n += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    n
}

/// F3, free when idle: an announced guard with nothing to do sleeps (its
/// socket costs no wake-up), and a status request wakes it once.
#[test]
fn f3_an_idle_announced_guard_makes_no_wake_ups() {
    let base = Base::new();
    let mut g = base.guard("idle", &[]);
    g.initialize();
    let pid = g.child.id();
    wait_for("the status socket", Duration::from_secs(10), || {
        base.socket(pid).exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    let before = switches(pid);
    std::thread::sleep(Duration::from_secs(3));
    let idle = switches(pid) - before;
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    eprintln!("idle announced guard: {idle} context switches in 3 s; RSS {rss_kib} KiB");
    assert!(idle <= 1, "{idle} wake-ups while idle");
    assert_eq!(base.ps().len(), 1);
    assert!(switches(pid) > before + idle, "a request wakes it");
    g.close();
}

/// `logs -f`: the tail, then each line as the server writes it, until the
/// guard ends.
#[test]
fn f3_logs_follow_gets_the_lines_as_they_come() {
    use std::io::BufRead;
    let base = Base::new();
    let mut g = base.guard("followed", &[]);
    g.initialize();
    let pid = g.child.id();
    wait_for("the status socket", Duration::from_secs(10), || {
        base.socket(pid).exists()
    });
    let mut follower = Command::new(guard_bin())
        .args(["logs", "followed", "-f", "-n", "1"])
        .env("XDG_RUNTIME_DIR", base.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("logs -f");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = follower.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let tail = rx.recv_timeout(Duration::from_secs(10)).expect("the tail");
    assert!(tail.starts_with("fixture: "), "{tail}");
    let t = Instant::now();
    ping(&mut g, 41);
    let live = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a live line");
        if line.contains("request 41") {
            break line;
        }
    };
    eprintln!(
        "logs -f: the server's line arrived {:.1} ms after the ping was sent",
        t.elapsed().as_secs_f64() * 1e3
    );
    assert!(live.contains("Z stderr fixture: "), "{live}");
    g.close();
    let status = follower.wait().expect("logs -f ends with the guard");
    assert!(status.success());
}

/// G1: a follower that stops reading is dropped once it falls behind; the
/// host's pings never wait for it.
#[test]
fn g1_a_follower_that_stops_reading_is_dropped() {
    let base = Base::new();
    let mut g = base.guard("flooded", &[]);
    g.initialize();
    let sock = base.socket(g.child.id());
    wait_for("the status socket", Duration::from_secs(10), || {
        sock.exists()
    });
    let mut stuck = UnixStream::connect(&sock).expect("connect");
    stuck
        .write_all(b"{\"request\":\"logs\",\"bytes\":1,\"follow\":true}\n")
        .expect("follow");
    std::thread::sleep(Duration::from_millis(200));
    let r = g.call_tool(1, "stderr_flood", json!({"bytes": 8 << 20}));
    assert!(r.get("result").is_some(), "{r}");
    let mut worst = Duration::ZERO;
    for id in 2..12 {
        worst = worst.max(ping(&mut g, id));
    }
    eprintln!(
        "host pings after 8 MiB of stderr with a follower that does not read: worst {:.1} ms",
        worst.as_secs_f64() * 1e3
    );
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    let status: Value =
        serde_json::from_slice(&ask(&sock, b"{\"request\":\"status\"}\n")).expect("status");
    assert_eq!(status["status_port"]["dropped_behind"], 1, "{status}");
    drop(stuck);
    g.close();
}

/// The config file's keys: `name`, `log_file` (from the file's folder),
/// `announce = false`; a flag overrides the file.
#[test]
fn f3_the_config_file_names_announces_and_logs() {
    let base = Base::new();
    let dir = tmp("config");
    std::fs::create_dir_all(dir.path()).unwrap();
    let config = dir.path().join("guard.toml");
    std::fs::write(
        &config,
        "name = \"from-config\"\nlog_file = \"logs/srv.log\"\nlog_file_count = 2\n",
    )
    .unwrap();
    let xdg = base.path().to_str().unwrap().to_owned();
    let cfg = config.to_str().unwrap().to_owned();
    let mut g = Guarded::spawn(guard_command(
        &["--config", &cfg],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", &xdg)],
    ));
    g.initialize();
    wait_for("the status socket", Duration::from_secs(10), || {
        base.socket(g.child.id()).exists()
    });
    let rows = base.ps();
    assert_eq!(rows[0]["name"], "from-config", "{rows:?}");
    assert!(
        rows[0]["log_file"]
            .as_str()
            .unwrap()
            .ends_with("logs/srv.log"),
        "{rows:?}"
    );
    g.close();
    let log = std::fs::read_to_string(dir.path().join("logs/srv.log")).expect("the log file");
    assert!(log.contains(" stderr fixture: started pid"), "{log}");

    std::fs::write(&config, "name = \"quiet\"\nannounce = false\n").unwrap();
    let mut g = Guarded::spawn(guard_command(
        &["--config", &cfg, "--name", "flag-wins"],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", &xdg)],
    ));
    g.initialize();
    assert!(!base.socket(g.child.id()).exists());
    assert!(base.ps().is_empty());
    g.close();
}

/// A guard that does not answer (stopped with SIGSTOP) costs `ps` its
/// deadline, not the others' rows, and `ps` says which one it was.
#[test]
fn f3_ps_lists_the_others_when_a_guard_hangs() {
    use mcp_stdio_tests::{signal_pid, Signal};
    let base = Base::new();
    let mut guards: Vec<Guarded> = ["up-a", "hung", "up-b"]
        .iter()
        .map(|n| base.guard(n, &[]))
        .collect();
    for g in &guards {
        let sock = base.socket(g.child.id());
        wait_for("the status socket", Duration::from_secs(10), || {
            sock.exists()
        });
    }
    let hung = guards[1].child.id();
    signal_pid(hung, Signal::SIGSTOP).expect("SIGSTOP");
    let t = Instant::now();
    let (code, out, err) = base.run(&["ps", "--json"]);
    let took = t.elapsed();
    signal_pid(hung, Signal::SIGCONT).expect("SIGCONT");
    eprintln!(
        "ps with one stopped guard: {:.0} ms",
        took.as_secs_f64() * 1e3
    );
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    let mut names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["up-a", "up-b"]);
    assert!(err.contains(&format!("guard {hung}:")), "{err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    for g in guards.drain(..) {
        g.close();
    }
}

/// G1: a client of the status socket that never stops sending (here a
/// follower, whose bytes are ignored) cannot hold the guard's loop: the
/// host's pings go on at their pace.
#[test]
fn g1_a_status_client_that_floods_the_socket_never_slows_the_session() {
    let base = Base::new();
    let mut g = base.guard("flood", &[]);
    g.initialize();
    let sock = base.socket(g.child.id());
    wait_for("the status socket", Duration::from_secs(10), || {
        sock.exists()
    });
    let mut flood = UnixStream::connect(&sock).expect("connect");
    flood
        .write_all(b"{\"request\":\"logs\",\"bytes\":1,\"follow\":true}\n")
        .expect("follow");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopper = stop.clone();
    let writer = std::thread::spawn(move || {
        let junk = vec![b'j'; 64 * 1024];
        let mut sent = 0u64;
        while !stopper.load(std::sync::atomic::Ordering::Relaxed) {
            match flood.write(&junk) {
                Ok(n) => sent += n as u64,
                Err(_) => break,
            }
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut worst = Duration::ZERO;
    for id in 1..=20 {
        worst = worst.max(ping(&mut g, id));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = writer.join().expect("writer");
    eprintln!(
        "host pings while a status client sent {} MiB: worst {:.1} ms",
        sent >> 20,
        worst.as_secs_f64() * 1e3
    );
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    g.close();
}
