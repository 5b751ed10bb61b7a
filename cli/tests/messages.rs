//! What a user reads when something goes wrong, through the real binary:
//! a server that exits or cannot start (guard), a server that dies before
//! the handshake (check row 1), a file that is not an audit log (verify),
//! an `--audit` path in a missing folder, and no colour or WARN noise where
//! nobody asked for it. Servers are small `sh -c` commands.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-stdio");

/// Generous bound on any one run here: they all end in well under a second.
const BOUND: Duration = Duration::from_secs(20);

/// Waits for `child` at most [`BOUND`] (killing it past that); returns its
/// status, its stderr and the time it took.
fn finish(mut child: Child, started: Instant) -> (ExitStatus, String, Duration) {
    let mut err = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if started.elapsed() > BOUND {
            let _ = child.kill();
            panic!("still running after {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    (status, reader.join().expect("stderr reader"), took)
}

/// `mcp-stdio guard -- SERVER…` with the host's end (our stdin to it) kept
/// open while the guard runs, as a connected host does.
fn guard_connected(guard_args: &[&str], server: &[&str]) -> (ExitStatus, String, Duration) {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .arg("guard")
        .args(guard_args)
        .arg("--")
        .args(server)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the guard");
    let stdin = child.stdin.take();
    let r = finish(child, started);
    drop(stdin);
    r
}

/// `mcp-stdio guard -- SERVER…` whose host closed its end at once.
fn guard_host_gone(guard_args: &[&str], server: &[&str]) -> (ExitStatus, String, Duration) {
    let started = Instant::now();
    let child = Command::new(BIN)
        .arg("guard")
        .args(guard_args)
        .arg("--")
        .args(server)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the guard");
    finish(child, started)
}

fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("mcp-stdio runs")
}

/// The line(s) the guard wrote about its server's end.
fn guard_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("mcp-stdio guard:") || l.starts_with("  | "))
        .collect()
}

#[cfg(unix)]
#[test]
fn guard_says_how_its_server_ended_and_exits_with_its_status() {
    // `false`: code 1, no stderr, nothing asked. Before: exit 1 and not a word.
    let (status, err, took) = guard_connected(&[], &["false"]);
    println!("false: {status:?} in {took:?}: {err}");
    assert_eq!(status.code(), Some(1), "{err}");
    let lines = guard_lines(&err);
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].contains(
            "the server exited with code 1 before any request, with its stdin still open"
        ),
        "{err}"
    );
    assert!(lines[0].contains("(command: false)"), "{err}");
    assert!(
        lines[0].contains("it wrote nothing to stderr: run the command by itself"),
        "{err}"
    );

    // A server that says why on stderr: its words come with the status.
    let (status, err, took) = guard_connected(
        &[],
        &[
            "sh",
            "-c",
            "echo 'Error: Cannot find module /app/build/index.js' >&2; exit 3",
        ],
    );
    println!("exit 3: {status:?} in {took:?}: {err}");
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("the server exited with code 3"), "{err}");
    assert!(err.contains("; its stderr:\n"), "{err}");
    assert!(
        err.contains("\n  | Error: Cannot find module /app/build/index.js\n"),
        "{err}"
    );

    // Many lines: only the last 5, and the cut is said.
    let (status, err, _) = guard_connected(
        &[],
        &[
            "sh",
            "-c",
            "i=1; while [ $i -le 20 ]; do echo \"stack line $i\" >&2; i=$((i+1)); done; exit 7",
        ],
    );
    assert_eq!(status.code(), Some(7), "{err}");
    let tail: Vec<&str> = err.lines().filter(|l| l.starts_with("  | ")).collect();
    assert_eq!(
        tail,
        [
            "  | stack line 16",
            "  | stack line 17",
            "  | stack line 18",
            "  | stack line 19",
            "  | stack line 20"
        ],
        "{err}"
    );
    assert!(
        err.contains("its stderr ends with (last 5 lines, 65 of 271 bytes)"),
        "{err}"
    );

    // Killed by a signal: 128 + N, and the signal named.
    let (status, err, _) = guard_connected(&[], &["sh", "-c", "kill -9 $$"]);
    assert_eq!(status.code(), Some(137), "{err}");
    assert!(err.contains("was killed by signal 9 (SIGKILL)"), "{err}");

    // Exit 0 on its own while the host is connected is news too.
    let (status, err, _) = guard_connected(&[], &["true"]);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "exited with code 0 before any request, with its stdin still open \
             (command: true); a stdio server should run until its stdin closes"
        ),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn guard_is_quiet_about_an_ordinary_end_and_not_about_a_failed_one() {
    // The host closes stdin, the server exits 0: nothing to say.
    let (status, err, took) = guard_host_gone(&[], &["sh", "-c", "cat >/dev/null"]);
    println!("clean end in {took:?}: {err:?}");
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(guard_lines(&err).is_empty(), "{err}");

    // The host closes stdin, the server fails: said, status mirrored.
    let (status, err, _) = guard_host_gone(&[], &["sh", "-c", "cat >/dev/null; exit 4"]);
    assert_eq!(status.code(), Some(4), "{err}");
    assert!(
        err.contains("the server exited with code 4 after its stdin closed, before any request"),
        "{err}"
    );

    // It ignores stdin EOF and SIGTERM: the escalation is said.
    let (status, err, took) = guard_host_gone(
        &["--shutdown-grace", "0.2"],
        &["sh", "-c", "trap '' TERM; sleep 5"],
    );
    println!("TERM ignored: {status:?} in {took:?}");
    assert_eq!(status.code(), Some(137), "{err}");
    assert!(
        err.contains("the server did not exit within 0."),
        "the measured grace, about 0.2 s: {err}"
    );
    assert!(
        err.contains(
            " s of its stdin closing; it ignored SIGTERM too, and SIGKILL stopped it (signal 9)"
        ),
        "{err}"
    );
    assert!(
        err.contains("a stdio server should exit when its stdin closes"),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn guard_refuses_a_wire_limit_below_the_cores_minimum_before_any_server_starts() {
    // The core would raise it to `MIN_MAX_FRAME`; the guard says so instead.
    let out = run(&["guard", "--max-frame", "10", "--", "true"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "mcp-stdio guard: --max-frame: a wire limit of 10 bytes is too small (at least 64)"
        ),
        "{err}"
    );
    let out = run(&["guard", "--max-frame", "64", "--", "true"], &[]);
    assert_eq!(out.status.code(), Some(0), "64 is taken");
}

#[cfg(unix)]
#[test]
fn guard_says_which_server_cannot_start_and_what_to_check() {
    // Before: `cannot start X: No such file or directory (os error 2)`, 127 for both.
    let (status, err, _) = guard_host_gone(&[], &["mcp-stdio-no-such-server"]);
    assert_eq!(status.code(), Some(127), "{err}");
    assert!(
        err.contains(
            "cannot start the server: `mcp-stdio-no-such-server` was not found in PATH; check the spelling"
        ),
        "{err}"
    );

    let (status, err, _) = guard_host_gone(&[], &["/nonexistent/dir/mcp-server"]);
    assert_eq!(status.code(), Some(127), "{err}");
    assert!(
        err.contains("`/nonexistent/dir/mcp-server` does not exist; check the path"),
        "{err}"
    );

    // A script without its execute bit: 126, as a shell says it.
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("server.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write the script");
    let script = script.to_str().expect("UTF-8 temp path");
    let (status, err, _) = guard_host_gone(&[], &[script]);
    assert_eq!(status.code(), Some(126), "{err}");
    assert!(
        err.contains(&format!(
            "`{script}` is not executable (permission denied); make it executable (`chmod +x {script}`)"
        )),
        "{err}"
    );

    // The help says the rule.
    let help = run(&["guard", "--help"], &[]);
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in ["128+N", "126 when", "127 when", "75 when", "2 for a usage"] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[cfg(unix)]
#[test]
fn check_row_1_names_the_exit_status_and_the_end_of_stderr() {
    // Before: `the session closed (the server closed its stdout or exited)`, nothing more.
    let script = "i=1; while [ $i -le 40 ]; do \
                  echo \"Error: Cannot find module '/app/build/index.js' (require stack line $i)\" >&2; \
                  i=$((i+1)); done; exit 1";
    let started = Instant::now();
    let out = run(
        &[
            "check",
            "--json",
            "-q",
            "--timeout",
            "5",
            "--",
            "sh",
            "-c",
            script,
        ],
        &[],
    );
    println!("check in {:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let row = &doc["rows"][0];
    assert_eq!(row["id"], "initialize");
    assert_eq!(row["status"], "FAIL");
    assert_eq!(
        row["value"],
        "the server exited with code 1 before answering initialize"
    );
    assert_eq!(row["measured"]["exit_status"], "code 1");
    let seen = row["measured"]["stderr_bytes"].as_u64().expect("a count");
    assert!(seen > 2500, "{row:#}");
    let detail = row["detail"].as_str().expect("a detail");
    println!("{detail}");
    assert!(
        detail.contains("its stderr ends with (last 5 lines, "),
        "{detail}"
    );
    assert!(
        detail.contains(&format!(" of {seen} bytes):\n")),
        "{detail}"
    );
    assert!(detail.contains("(require stack line 40)"), "{detail}");
    assert!(detail.contains("(require stack line 36)"), "{detail}");
    assert!(!detail.contains("(require stack line 35)"), "{detail}");
    assert!(detail.len() < 1024 + 300, "bounded: {} bytes", detail.len());
    assert_eq!(row["measured"]["stderr_excerpt_cut"], true);

    // The table puts the excerpt under the row's detail, indented.
    let out = run(
        &["check", "-q", "--timeout", "5", "--", "sh", "-c", script],
        &[],
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let excerpt: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("| Error: Cannot find module"))
        .collect();
    assert_eq!(excerpt.len(), 5, "{table}");
    assert!(excerpt.iter().all(|l| l.starts_with("      ")), "{table}");
}

/// Writes a real, sealed audit log and the metrics file of the same run.
#[cfg(unix)]
fn real_log(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let log = dir.join("audit.jsonl");
    let metrics = dir.join("metrics.json");
    let (status, err, _) = guard_host_gone(
        &[
            "--audit",
            log.to_str().expect("UTF-8"),
            "--metrics",
            metrics.to_str().expect("UTF-8"),
        ],
        &["sh", "-c", "cat >/dev/null"],
    );
    assert_eq!(status.code(), Some(0), "{err}");
    (log, metrics)
}

fn verify(file: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["verify"];
    args.extend_from_slice(extra);
    args.push(file.to_str().expect("UTF-8"));
    let out = run(&args, &[]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[cfg(unix)]
#[test]
fn verify_tells_a_file_that_is_not_an_audit_log_from_a_tampered_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, metrics) = real_log(dir.path());
    let (code, out) = verify(&log, &[]);
    assert_eq!(code, Some(0), "{out}");

    // A metrics file. Before: `FAIL: line 1: not a valid audit entry …`, exit 1.
    let (code, out) = verify(&metrics, &[]);
    assert_eq!(code, Some(5), "{out}");
    assert!(out.starts_with("NOT AN AUDIT LOG: "), "{out}");
    assert!(
        out.contains("give verify the file that `mcp-stdio guard --audit` writes"),
        "{out}"
    );
    let (code, out) = verify(&metrics, &["--json"]);
    assert_eq!(code, Some(5), "{out}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["status"], "not_an_audit_log");
    assert_eq!(v["ok"], false);

    // JSON lines without the chain's fields.
    let other = dir.path().join("events.jsonl");
    std::fs::write(
        &other,
        "{\"event\":\"start\",\"sequence\":1}\n{\"event\":\"stop\"}\n",
    )
    .expect("write");
    assert_eq!(verify(&other, &[]).0, Some(5));

    let text = std::fs::read_to_string(&log).expect("read the log");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3, "{text}");

    // A real log whose first line is destroyed: the rest names the chain, so tampered.
    let first_gone = dir.path().join("first-gone.jsonl");
    std::fs::write(
        &first_gone,
        format!("not json at all\n{}\n", lines[1..].join("\n")),
    )
    .expect("write");
    let (code, out) = verify(&first_gone, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("FAIL: line 1:"), "{out}");

    // A valid first entry, then garbage: tampered.
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, format!("{}\nxyz\n{{\"a\":1}}\n", lines[0])).expect("write");
    let (code, out) = verify(&garbage, &["--json"]);
    assert_eq!(code, Some(1), "{out}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["status"], "tampered");
    assert_eq!(v["line"], 2);

    // Every exit code is in --help.
    let help = run(&["verify", "--help"], &[]);
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "0 intact",
        "1 tampered",
        "2 bad",
        "3 intact",
        "4 intact",
        "5 not an audit log",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[cfg(unix)]
#[test]
fn audit_log_in_a_missing_folder_is_created_and_a_bad_path_says_it_is_the_audit_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("logs").join("mcp").join("audit.jsonl");
    let log_s = log.to_str().expect("UTF-8");
    let started = Instant::now();
    let child = Command::new(BIN)
        .args([
            "guard",
            "--audit",
            log_s,
            "--",
            "sh",
            "-c",
            "cat >/dev/null",
        ])
        .env("MCP_STDIO_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the guard");
    let (status, err, took) = finish(child, started);
    println!("created in {took:?}");
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(log.is_file(), "{err}");
    assert!(err.contains("created the audit log's folder"), "{err}");
    // Our stderr is a pipe here: no colour codes, even at debug.
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert_eq!(verify(&log, &[]).0, Some(0));

    // A file where the folder should be. Before: the path and `Not a directory`, nothing else.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, "").expect("write");
    let bad = blocker.join("audit.jsonl");
    let bad_s = bad.to_str().expect("UTF-8");
    let (status, err, _) = guard_host_gone(&["--audit", bad_s], &["true"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "mcp-stdio guard: audit log {bad_s}: {} is not a folder; give --audit a path in a folder",
            blocker.display()
        )),
        "{err}"
    );

    // A folder where the file should be.
    let (status, err, _) =
        guard_host_gone(&["--audit", dir.path().to_str().expect("UTF-8")], &["true"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("cannot open it for appending"), "{err}");
    assert!(err.contains("or give --audit another path"), "{err}");
}

#[cfg(unix)]
#[test]
fn no_colour_off_a_terminal_and_no_warn_noise_under_quiet() {
    // A server whose banner on stdout makes the client log a WARN.
    let server = ["sh", "-c", "echo 'Server listening'; sleep 0.2; exit 1"];
    let mut args = vec!["check", "--timeout", "2"];
    args.push("--");
    args.extend_from_slice(&server);
    let out = run(&args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARN"),
        "the client warns about the banner: {err}"
    );
    assert!(!err.contains('\u{1b}'), "colour off a terminal: {err:?}");

    // Before: the same coloured WARN lines under -q.
    let mut quiet = vec!["check", "-q", "--timeout", "2", "--"];
    quiet.extend_from_slice(&server);
    let out = run(&quiet, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.is_empty(), "nothing on stderr under -q: {err:?}");

    // An explicit filter still wins over -q, and NO_COLOR is honoured.
    let out = run(&quiet, &[("MCP_STDIO_LOG", "warn"), ("NO_COLOR", "1")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WARN"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

/// Issue 34: `guard -h` is a short page of the main options grouped by
/// heading; `--help` has every option, the exit statuses and the signals.
#[test]
fn guard_help_is_grouped_and_short_with_dash_h() {
    let short = run(&["guard", "-h"], &[]);
    let long = run(&["guard", "--help"], &[]);
    assert!(short.status.success() && long.status.success());
    let short = String::from_utf8_lossy(&short.stdout).into_owned();
    let long = String::from_utf8_lossy(&long.stdout).into_owned();
    eprintln!(
        "guard -h: {} lines; guard --help: {} lines",
        short.lines().count(),
        long.lines().count()
    );
    assert!(short.lines().count() <= 60, "{short}");
    for heading in [
        "Wire limits:",
        "Server stderr:",
        "Shutdown and restart:",
        "Server environment:",
        "Sandbox (Linux):",
        "Pinned tools:",
        "Audit and metrics:",
        "Policies:",
    ] {
        assert!(short.contains(heading), "-h lacks {heading}");
        assert!(long.contains(heading), "--help lacks {heading}");
    }
    for detail in [
        "--sandbox-open-files",
        "--audit-key-file",
        "--restart-max",
        "--repeat-limit",
    ] {
        assert!(!short.contains(detail), "-h shows {detail}");
        assert!(long.contains(detail), "--help lacks {detail}");
    }
    assert!(long.contains("128+N") && long.contains("SIGINT"), "{long}");
}
