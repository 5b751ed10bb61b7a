//! The guard with the host clients people run: the TypeScript SDK's client
//! and the Python `mcp` client (`tests/interop/host_calls.*`), each making
//! tool calls through `mcp-stdio guard` in front of the fixture server.
//!
//! - G3: a server answers with bytes that are not UTF-8 inside a string
//!   (`\xff\xfe`), its id first, then last, then in a line that is not JSON
//!   once repaired; each client gets a result or an error for every call
//!   within a second, and the session goes on (an `echo` after). What each
//!   client does with the same server directly is printed beside it.
//! - Restart on crash (issue 23): the server crashes on a call behind
//!   `guard --restart on-failure`; the client gets an error for that call
//!   within a second, and its next call succeeds on the restarted server,
//!   in the same client session.
//!
//! Needs the interop peers (`tests/interop/setup.sh`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_stdio_tests::fixture_server_path;
use mcp_stdio_tests::interop::{
    node, python, require, scripts_dir, server_everything_entry, server_filesystem_entry,
};
use serde_json::Value;

/// Runs one client script against `server`; `None` when it did not finish
/// within `bound` or printed no JSON (what a client that dies on the line does).
/// Its stdout and stderr are read while it runs (a client printing more than
/// a pipe holds must not wait for us).
fn run(client: &[String], server: &[String], bound: Duration) -> Result<Value, String> {
    use std::io::Read;
    let t = Instant::now();
    let mut child = Command::new(&client[0])
        .args(&client[1..])
        .arg("--")
        .args(server)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", client[0]))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut out);
            }
            out
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if t.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no end within {bound:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    serde_json::from_slice(&stdout).map_err(|_| {
        format!(
            "{status}; stderr: {}",
            String::from_utf8_lossy(&stderr)
                .lines()
                .last()
                .unwrap_or("")
        )
    })
}

fn guarded(server: &[String]) -> Vec<String> {
    let mut cmd = vec![
        env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
        "guard".to_owned(),
        "--".to_owned(),
    ];
    cmd.extend(server.iter().cloned());
    cmd
}

/// Every call has its outcome within a second; the repaired ones are results.
fn assert_outcomes(who: &str, v: &Value) {
    let calls = v["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 4, "{who}: {v}");
    for (i, c) in calls.iter().enumerate() {
        let ms = c["ms"].as_f64().expect("ms");
        assert!(ms < 1000.0, "{who}: call {i} took {ms} ms: {c}");
    }
    for c in &calls[..2] {
        assert_eq!(c["text"], "bad \u{fffd}\u{fffd} byte", "{who}: {c}");
    }
    assert!(
        calls[2]["error"].is_string(),
        "{who}: not JSON once repaired: {}",
        calls[2]
    );
    assert_eq!(
        calls[3]["text"], "after",
        "{who}: the session goes on: {}",
        calls[3]
    );
    eprintln!("{who} through the guard: {}", v["calls"]);
}

/// The Python client's command, when the interop peers are there.
fn python_client(test: &str) -> Option<Vec<String>> {
    let (py, _) = require(test, python())?;
    let script = scripts_dir().join("host_calls.py");
    Some(vec![py.display().to_string(), script.display().to_string()])
}

/// The TypeScript SDK client's command, when the interop peers are there.
fn typescript_client(test: &str) -> Option<Vec<String>> {
    let (node, _) = require(test, node())?;
    let entry = require(test, server_everything_entry())?;
    // server-everything depends on the SDK: node_modules/@modelcontextprotocol/sdk.
    let scope = entry
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "server-everything"))
        .and_then(Path::parent)
        .expect("server-everything sits in node_modules/@modelcontextprotocol");
    let sdk = scope.join("sdk");
    assert!(
        sdk.join("package.json").is_file(),
        "no SDK at {}",
        sdk.display()
    );
    let script = scripts_dir().join("host_calls.mjs");
    Some(vec![
        node.display().to_string(),
        script.display().to_string(),
        sdk.display().to_string(),
    ])
}

fn both_ways(who: &str, client: &[String]) {
    let server = vec![fixture_server_path().display().to_string()];
    let direct = run(client, &server, Duration::from_secs(60));
    eprintln!("{who} directly (recorded, not asserted): {direct:?}");
    let through = run(client, &guarded(&server), Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{who} through the guard: {e}"));
    assert_outcomes(who, &through);
}

#[test]
fn g3_an_invalid_utf8_response_reaches_the_python_client_through_the_guard() {
    let test = "g3_an_invalid_utf8_response_reaches_the_python_client_through_the_guard";
    if let Some(client) = python_client(test) {
        both_ways("python mcp", &client);
    }
}

#[test]
fn g3_an_invalid_utf8_response_reaches_the_typescript_client_through_the_guard() {
    let test = "g3_an_invalid_utf8_response_reaches_the_typescript_client_through_the_guard";
    if let Some(client) = typescript_client(test) {
        both_ways("typescript sdk", &client);
    }
}

/// Restart on crash with a real client: `echo`, a call the server crashes
/// on (`exit`), `echo` again, in one client session.
fn crash_and_go_on(who: &str, client: &[String]) {
    let calls = serde_json::json!([
        ["echo", {"text": "before"}],
        ["exit", {"code": 3}],
        ["echo", {"text": "after"}],
    ]);
    let mut with_calls = client.to_vec();
    with_calls.extend(["--calls".to_owned(), calls.to_string()]);
    let mut server = vec![
        env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
        "guard".to_owned(),
        "--restart".to_owned(),
        "on-failure".to_owned(),
        "--".to_owned(),
    ];
    server.push(fixture_server_path().display().to_string());
    let v = run(&with_calls, &server, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{who} through the guard: {e}"));
    eprintln!("{who} through guard --restart: {}", v["calls"]);
    let calls = v["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 3, "{who}: {v}");
    assert_eq!(calls[0]["text"], "before", "{who}: {v}");
    let error = calls[1]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("crashed") && error.contains("exit code 3"),
        "{who}: the crashed call gets the guard's error: {v}"
    );
    let ms = calls[1]["ms"].as_f64().expect("ms");
    assert!(ms < 1000.0, "{who}: the crash error took {ms} ms");
    assert_eq!(
        calls[2]["text"], "after",
        "{who}: the next call succeeds on the restarted server: {v}"
    );
}

#[test]
fn restart_on_crash_keeps_the_python_clients_session() {
    let test = "restart_on_crash_keeps_the_python_clients_session";
    if let Some(client) = python_client(test) {
        crash_and_go_on("python mcp", &client);
    }
}

#[test]
fn restart_on_crash_keeps_the_typescript_clients_session() {
    let test = "restart_on_crash_keeps_the_typescript_clients_session";
    if let Some(client) = typescript_client(test) {
        crash_and_go_on("typescript sdk", &client);
    }
}

/// Idle stop with a real client: `echo`, a quiet spell past `--idle-stop`
/// (the server is stopped), `echo` again in the same client session: the
/// new server got the client's handshake first; the client never knew.
fn sleep_and_go_on(who: &str, client: &[String]) {
    let calls = serde_json::json!([
        ["echo", {"text": "before"}],
        ["__pause__", {"ms": 1500}],
        ["echo", {"text": "after"}],
    ]);
    let mut with_calls = client.to_vec();
    with_calls.extend(["--calls".to_owned(), calls.to_string()]);
    let dir = mcp_stdio_tests::TempPath::new("idle-client");
    std::fs::create_dir_all(dir.path()).expect("dir");
    let audit = dir.path().join("audit.jsonl");
    let server = vec![
        env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
        "guard".to_owned(),
        "--no-announce".to_owned(),
        "--idle-stop".to_owned(),
        "300ms".to_owned(),
        "--audit".to_owned(),
        audit.display().to_string(),
        "--".to_owned(),
        fixture_server_path().display().to_string(),
    ];
    let v = run(&with_calls, &server, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{who} through the guard: {e}"));
    eprintln!("{who} through guard --idle-stop: {}", v["calls"]);
    let calls = v["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2, "{who}: {v}");
    assert_eq!(calls[0]["text"], "before", "{who}: {v}");
    assert_eq!(
        calls[1]["text"], "after",
        "{who}: the same session goes on: {v}"
    );
    let phases: Vec<String> = std::fs::read_to_string(&audit)
        .expect("audit")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["record"]["phase"].as_str().map(str::to_owned))
        .collect();
    assert!(
        phases.contains(&"server_idle_stopped".to_owned())
            && phases.contains(&"server_resumed".to_owned()),
        "{who}: {phases:?}"
    );
}

#[test]
fn idle_stop_keeps_the_python_clients_session() {
    let test = "idle_stop_keeps_the_python_clients_session";
    if let Some(client) = python_client(test) {
        sleep_and_go_on("python mcp", &client);
    }
}

#[test]
fn idle_stop_keeps_the_typescript_clients_session() {
    let test = "idle_stop_keeps_the_typescript_clients_session";
    if let Some(client) = typescript_client(test) {
        sleep_and_go_on("typescript sdk", &client);
    }
}

/// `guard --share` with the hosts' own clients: two TypeScript SDK and two
/// Python `mcp` sessions at once share one server-everything (each client
/// numbers its requests from the same start: the ids collide), and each
/// gets what it gets directly.
#[test]
fn f2_four_real_client_sessions_share_server_everything_as_if_alone() {
    let test = "f2_four_real_client_sessions_share_server_everything_as_if_alone";
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
    let server = vec![
        node.display().to_string(),
        entry.display().to_string(),
        "stdio".to_owned(),
    ];
    four_sessions_as_if_alone(test, &server, |who| {
        serde_json::json!([
            ["echo", {"message": format!("{who} one")}],
            ["get-sum", {"a": 2, "b": 3}],
            ["echo", {"message": format!("{who} two")}],
        ])
    });
}

/// The same with server-filesystem: four sessions list, read and stat
/// files of one folder through one shared server.
#[test]
fn f2_four_real_client_sessions_share_server_filesystem_as_if_alone() {
    let test = "f2_four_real_client_sessions_share_server_filesystem_as_if_alone";
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_filesystem_entry()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // The server's own view of the folder (it resolves symbolic links).
    let root = dir.path().canonicalize().expect("canonical");
    for who in ["alone", "ts-a", "ts-b", "py-a", "py-b"] {
        std::fs::write(root.join(format!("{who}.txt")), format!("notes of {who}\n"))
            .expect("write");
    }
    let server = vec![
        node.display().to_string(),
        entry.display().to_string(),
        root.display().to_string(),
    ];
    let root = root.display().to_string();
    four_sessions_as_if_alone(test, &server, |who| {
        serde_json::json!([
            ["read_text_file", {"path": format!("{root}/{who}.txt")}],
            ["list_allowed_directories", {}],
            ["read_text_file", {"path": format!("{root}/missing-{who}.txt")}],
        ])
    });
}

/// `mcp-stdio guard --share` in front of `server`, its runtime folder
/// `runtime` (through `env`, so each client's guard gets it).
fn shared_guard(runtime: &Path, server: &[String]) -> Vec<String> {
    let mut shared = vec![
        "env".to_owned(),
        format!("XDG_RUNTIME_DIR={}", runtime.display()),
        env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
        "guard".to_owned(),
        "--no-announce".to_owned(),
        "--share".to_owned(),
        "--share-linger".to_owned(),
        "1s".to_owned(),
        "--".to_owned(),
    ];
    shared.extend(server.iter().cloned());
    shared
}

/// Four sessions (two TypeScript SDK, two Python `mcp`) at once through
/// `guard --share` in front of `server`, each making the calls `calls`
/// gives for its name; each must get what a session alone (named "alone")
/// gets directly, its name put in for "alone".
fn four_sessions_as_if_alone(test: &str, server: &[String], calls: impl Fn(&str) -> Value) {
    let (Some(py), Some(ts)) = (python_client(test), typescript_client(test)) else {
        return;
    };
    let with = |client: &[String], who: &str| {
        let mut c = client.to_vec();
        c.extend(["--calls".to_owned(), calls(who).to_string()]);
        c
    };
    let direct = run(&with(&py, "alone"), server, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("directly: {e}"));
    let runtime = tempfile::tempdir().expect("tempdir");
    let shared = shared_guard(runtime.path(), server);
    let sessions: Vec<(String, Vec<String>)> = vec![
        ("ts-a".to_owned(), with(&ts, "ts-a")),
        ("ts-b".to_owned(), with(&ts, "ts-b")),
        ("py-a".to_owned(), with(&py, "py-a")),
        ("py-b".to_owned(), with(&py, "py-b")),
    ];
    let handles: Vec<_> = sessions
        .into_iter()
        .map(|(who, client)| {
            let shared = shared.clone();
            std::thread::spawn(move || (who, run(&client, &shared, Duration::from_secs(90))))
        })
        .collect();
    let outcomes = |v: &Value| -> Vec<String> {
        v["calls"]
            .as_array()
            .expect("calls")
            .iter()
            .map(|c| match c["text"].as_str() {
                Some(text) => text.to_owned(),
                None => format!("error: {}", c["error"]),
            })
            .collect()
    };
    let alone = outcomes(&direct);
    eprintln!("alone, directly: {alone:?}");
    for h in handles {
        let (who, got) = h.join().expect("a client thread");
        let got = got.unwrap_or_else(|e| panic!("{who} shared: {e}"));
        let expected: Vec<String> = alone.iter().map(|t| t.replace("alone", &who)).collect();
        assert_eq!(outcomes(&got), expected, "{who}: {got}");
        eprintln!("{who} shared: {}", got["calls"]);
    }
    let log = std::fs::read_dir(runtime.path().join("mcp-stdio").join("share"))
        .expect("the share folder")
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "log"))
        .and_then(|e| std::fs::read_to_string(e.path()).ok())
        .unwrap_or_default();
    assert!(log.contains("serving"), "{log}");
    eprintln!(
        "sessions given a private server: {}",
        log.matches("a private server").count()
    );
}

/// `guard --share` at 2025-11-25: a server's `sampling/createMessage` goes
/// to the session whose call asked for it. Two TypeScript SDK and two
/// Python `mcp` sessions, each answering sampling with its own name, stay
/// attached to one server-everything while each in turn calls
/// `trigger-sampling-request`; each gets its own answer back, and the hub
/// served them all from one server (no private one).
#[test]
fn f2_sampling_reaches_the_session_whose_call_asked_for_it() {
    let test = "f2_sampling_reaches_the_session_whose_call_asked_for_it";
    let (Some(py), Some(ts)) = (python_client(test), typescript_client(test)) else {
        return;
    };
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
    let runtime = tempfile::tempdir().expect("tempdir");
    let shared = shared_guard(
        runtime.path(),
        &[
            node.display().to_string(),
            entry.display().to_string(),
            "stdio".to_owned(),
        ],
    );
    // Each session's call in its own 1.5 s slot, all four attached throughout.
    let sessions = [("py-a", &py), ("ts-a", &ts), ("py-b", &py), ("ts-b", &ts)];
    let slot = 1500;
    let handles: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(k, (who, client))| {
            let calls = serde_json::json!([
                ["__pause__", {"ms": 500 + slot * k}],
                ["trigger-sampling-request", {"prompt": format!("from {who}")}],
                ["__pause__", {"ms": slot * (sessions.len() - k)}],
            ]);
            let mut c = client.to_vec();
            c.extend([
                "--sample-as".to_owned(),
                (*who).to_owned(),
                "--calls".to_owned(),
                calls.to_string(),
            ]);
            let shared = shared.clone();
            let who = (*who).to_owned();
            std::thread::spawn(move || (who, run(&c, &shared, Duration::from_secs(90))))
        })
        .collect();
    for h in handles {
        let (who, got) = h.join().expect("a client thread");
        let got = got.unwrap_or_else(|e| panic!("{who}: {e}"));
        let text = got["calls"][0]["text"].as_str().unwrap_or_default();
        eprintln!(
            "{who}: {} in {} ms",
            text.lines()
                .find(|l| l.contains("sampled by"))
                .unwrap_or(text)
                .trim(),
            got["calls"][0]["ms"]
        );
        assert!(text.contains(&format!("sampled by {who}")), "{who}: {got}");
    }
    let log = std::fs::read_dir(runtime.path().join("mcp-stdio").join("share"))
        .expect("the share folder")
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "log"))
        .and_then(|e| std::fs::read_to_string(e.path()).ok())
        .unwrap_or_default();
    assert!(log.contains("serving"), "{log}");
    assert!(
        !log.contains("private"),
        "a session got a private server: {log}"
    );
}

/// `guard` with every tool policy in front of server-everything, as a host
/// with the TypeScript SDK's or the Python `mcp` client sees it (issue 38,
/// F4: a policy says what it did). Two guards, one client session each:
///
/// 1. `--tools 'echo,get-*' --deny-tool get-env --max-result-text 65536
///    --repeat-limit 3`: the list holds only the allowed tools; `get-env`
///    gets the policy's error (-32031); a 5 MiB `echo` comes back cut to
///    64 KiB with the marker in the text and in `_meta`; the fourth
///    identical `get-sum` is refused as a loop, a different one answered;
///    `--metrics` counts it all.
/// 2. `--max-result-text 48 --rate-limit echo=5/1s`: the tiny image is
///    replaced by a text block; `get-structured-content`, whose
///    `structuredContent` passes 48 bytes, is a tool error that says so;
///    twenty `echo` calls at once get fifteen refusals with `retryAfterMs`.
fn policies_with_server_everything(test: &str, who: &str, client: &[String]) {
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let metrics = dir.path().join("metrics.json");
    let guard = |flags: &[&str]| -> Vec<String> {
        let mut cmd = vec![
            env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
            "guard".to_owned(),
            "--no-announce".to_owned(),
        ];
        cmd.extend(flags.iter().map(|f| (*f).to_owned()));
        cmd.extend([
            "--".to_owned(),
            node.display().to_string(),
            entry.display().to_string(),
            "stdio".to_owned(),
        ]);
        cmd
    };
    let session = |name: &str, calls: &Value, server: &[String]| -> Vec<Value> {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, calls.to_string()).expect("write the calls");
        let mut c = client.to_vec();
        c.extend(["--calls".to_owned(), format!("@{}", file.display())]);
        let t = Instant::now();
        let v = run(&c, server, Duration::from_secs(90))
            .unwrap_or_else(|e| panic!("{who}, {name}: {e}"));
        eprintln!("{who}, {name}: {:?}", t.elapsed());
        v["calls"].as_array().expect("calls").clone()
    };
    let refused = |c: &Value, policy: &str| {
        assert_eq!(c["code"], -32031, "{who}: {c}");
        assert_eq!(c["data"]["policy"], policy, "{who}: {c}");
    };

    // 1. The filter, the 64 KiB content limit, the loop brake.
    let big = "x".repeat(5 * 1024 * 1024);
    let sum = serde_json::json!({"a": 1, "b": 2});
    let calls = serde_json::json!([
        ["__list__", {}],
        ["get-env", {}],
        ["echo", {"message": big}],
        ["get-sum", sum], ["get-sum", sum], ["get-sum", sum], ["get-sum", sum],
        ["get-sum", {"a": 2, "b": 2}],
    ]);
    let metrics_flag = metrics.display().to_string();
    let server = guard(&[
        "--tools",
        "echo,get-*",
        "--deny-tool",
        "get-env",
        "--max-result-text",
        "65536",
        "--repeat-limit",
        "3",
        "--metrics",
        &metrics_flag,
    ]);
    let got = session("filter-cut-loop", &calls, &server);
    let tools: Vec<&str> = got[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    eprintln!("{who} sees {tools:?}");
    assert!(
        tools
            .iter()
            .all(|t| (*t == "echo" || t.starts_with("get-")) && *t != "get-env"),
        "{who}: {tools:?}"
    );
    for t in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "get-structured-content",
    ] {
        assert!(tools.contains(&t), "{who}: {t} in {tools:?}");
    }
    refused(&got[1], "tools");
    assert!(
        got[1]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--deny-tool get-env"),
        "{who}: {}",
        got[1]
    );
    let text = got[2]["text"].as_str().expect("the cut echo");
    let total = "Echo: ".len() + big.len();
    assert!(text.len() <= 65536, "{who}: {} bytes", text.len());
    assert!(
        text.starts_with("Echo: xxx") && text.ends_with("xxx"),
        "{who}"
    );
    let marker = format!(
        " of {} bytes omitted (--max-result-text 65536)]",
        total
            .to_string()
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| std::str::from_utf8(c).expect("digits"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(text.contains(&marker), "{who}: no {marker:?}");
    let cut = &got[2]["meta"]["io.mcp-stdio/truncated"];
    assert_eq!(cut["totalBytes"], total, "{who}: {}", got[2]["meta"]);
    assert_eq!(cut["limit"], 65536, "{who}");
    let head = text.find("\n[mcp-stdio: ").expect("the marker");
    let tail = text.len() - text.rfind("]\n").expect("the marker's end") - 2;
    assert_eq!(cut["omittedBytes"], total - head - tail, "{who}");
    for c in &got[3..6] {
        assert_eq!(c["text"], "The sum of 1 and 2 is 3.", "{who}: {c}");
    }
    refused(&got[6], "repeat-limit");
    assert_eq!(got[7]["text"], "The sum of 2 and 2 is 4.", "{who}");
    let m: Value =
        serde_json::from_slice(&std::fs::read(&metrics).expect("metrics")).expect("JSON");
    let policy = &m["proxy"]["policy"];
    assert_eq!(policy["refused"]["get-env"], 1, "{who}: {m}");
    assert_eq!(policy["refused_by"]["repeat-limit"], 1, "{who}: {m}");
    assert_eq!(policy["results_cut"], 1, "{who}: {m}");
    assert!(policy["tools_hidden"].as_u64() >= Some(1), "{who}: {m}");

    // 2. An image and a structuredContent over 48 bytes; a rate limit.
    let mut calls = vec![
        serde_json::json!(["get-tiny-image", {}]),
        serde_json::json!(["get-structured-content", {"location": "Chicago"}]),
    ];
    calls.extend((0..20).map(|i| serde_json::json!(["echo", {"message": format!("m{i}")}])));
    let got = session(
        "media-structured-rate",
        &Value::from(calls),
        &guard(&["--max-result-text", "48", "--rate-limit", "echo=5/1s"]),
    );
    // The twenty calls' own time (the client's start is not in it).
    let took = Duration::from_secs_f64(
        got[2..]
            .iter()
            .filter_map(|c| c["ms"].as_f64())
            .sum::<f64>()
            / 1000.0,
    );
    assert_eq!(
        got[0]["types"],
        serde_json::json!(["text", "text", "text"]),
        "{who}: {}",
        got[0]
    );
    let image = got[0]["texts"][1].as_str().unwrap_or_default();
    assert!(
        image.starts_with("[mcp-stdio: an image (image/png) of ")
            && image.ends_with("bytes omitted (--max-result-text 48)]"),
        "{who}: {image}"
    );
    assert_eq!(got[1]["is_error"], true, "{who}: {}", got[1]);
    let withheld = got[1]["error"].as_str().unwrap_or_default();
    assert!(
        withheld.contains("structuredContent of") && withheld.contains("--max-result-text 48"),
        "{who}: {withheld}"
    );
    assert!(got[1]["structured"].is_null(), "{who}: {}", got[1]);
    let waits: Vec<u64> = got[2..]
        .iter()
        .filter(|c| c.get("code").is_some())
        .map(|c| {
            refused(c, "rate-limit");
            c["data"]["retryAfterMs"].as_u64().expect("retryAfterMs")
        })
        .collect();
    // Tokens come back at 5 a second: a slow machine may have earned some.
    let earned = usize::try_from(took.as_millis() / 200).unwrap_or(usize::MAX);
    eprintln!(
        "{who}: {} of 20 echo calls refused (retry after {waits:?} ms), in {took:?}",
        waits.len()
    );
    assert!(
        waits.len() <= 15 && waits.len() + earned >= 15,
        "{who}: {waits:?}"
    );
}

#[test]
fn f4_policies_with_server_everything_and_the_python_client() {
    let test = "f4_policies_with_server_everything_and_the_python_client";
    if let Some(client) = python_client(test) {
        policies_with_server_everything(test, "python mcp", &client);
    }
}

#[test]
fn f4_policies_with_server_everything_and_the_typescript_client() {
    let test = "f4_policies_with_server_everything_and_the_typescript_client";
    if let Some(client) = typescript_client(test) {
        policies_with_server_everything(test, "typescript sdk", &client);
    }
}
