//! G3 through the guard, with the host clients people run: a server answers
//! with bytes that are not UTF-8 inside a string (`\xff\xfe`), its id first,
//! then last, then in a line that is not JSON once repaired. The TypeScript
//! SDK's client and the Python `mcp` client each get a result or an error for
//! every call within a second, and the session goes on (an `echo` after).
//! What each client does with the same server directly is printed beside it.
//!
//! Needs the interop peers (`tests/interop/setup.sh`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_stdio_tests::fixture_server_path;
use mcp_stdio_tests::interop::{node, python, require, scripts_dir, server_everything_entry};
use serde_json::Value;

/// Runs one client script against `server`; `None` when it did not finish
/// within `bound` or printed no JSON (what a client that dies on the line does).
fn run(client: &[String], server: &[String], bound: Duration) -> Result<Value, String> {
    let t = Instant::now();
    let mut child = Command::new(&client[0])
        .args(&client[1..])
        .arg("--")
        .args(server)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", client[0]))?;
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if t.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no end within {bound:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    serde_json::from_slice(&out.stdout).map_err(|_| {
        format!(
            "{}; stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
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
    let Some((py, _)) = require(test, python()) else {
        return;
    };
    let script = scripts_dir().join("bad_utf8_client.py");
    both_ways(
        "python mcp",
        &[py.display().to_string(), script.display().to_string()],
    );
}

#[test]
fn g3_an_invalid_utf8_response_reaches_the_typescript_client_through_the_guard() {
    let test = "g3_an_invalid_utf8_response_reaches_the_typescript_client_through_the_guard";
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
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
    let script = scripts_dir().join("bad_utf8_client.mjs");
    both_ways(
        "typescript sdk",
        &[
            node.display().to_string(),
            script.display().to_string(),
            sdk.display().to_string(),
        ],
    );
}
