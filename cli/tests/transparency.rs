//! The guard is transparent: the Python `mcp` package's own client (a real
//! host-side peer) driving the official `server-everything` gets the same
//! results for the same calls with and without `mcp-stdio guard` in between.
//!
//! Needs the interop peers (`bash tests/interop/setup.sh`); fails without
//! them, or is skipped with `MCP_STDIO_SKIP_INTEROP=1`.

use std::process::Command;
use std::time::Instant;

use mcp_stdio_tests::interop::{node, python, require, scripts_dir, server_everything_entry};
use serde_json::Value;

fn run(python: &std::path::Path, server: &[String]) -> Value {
    let t = Instant::now();
    let out = Command::new(python)
        .arg(scripts_dir().join("py_transparency.py"))
        .arg("--")
        .args(server)
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "python client failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{} in {:?}",
        server.join(" ").chars().take(80).collect::<String>(),
        t.elapsed()
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn guard_is_transparent_for_server_everything_driven_by_the_python_sdk() {
    let test = "guard_is_transparent_for_server_everything_driven_by_the_python_sdk";
    let Some((py, mcp_version)) = require(test, python()) else {
        return;
    };
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
    eprintln!("python mcp {mcp_version}");
    let direct = vec![
        node.display().to_string(),
        entry.display().to_string(),
        "stdio".to_owned(),
    ];
    let mut guarded = vec![
        env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
        "guard".to_owned(),
        "--".to_owned(),
    ];
    guarded.extend(direct.iter().cloned());
    let a = run(&py, &direct);
    let b = run(&py, &guarded);
    assert!(a["calls"].as_object().is_some_and(|c| c.len() >= 3), "{a}");
    assert_eq!(a, b, "results differ with the guard in between");
}

/// Both protocol revisions pass the guard unchanged: the Python `mcp`
/// client against the Python `mcp` server, probing (`auto`: 2026-07-28 via
/// `server/discover`), pinned to 2026-07-28, and with the legacy
/// `initialize` handshake, directly and through the guard.
#[test]
fn guard_is_transparent_at_2026_07_28_and_2025_11_25() {
    let test = "guard_is_transparent_at_2026_07_28_and_2025_11_25";
    let Some((py, mcp_version)) = require(test, python()) else {
        return;
    };
    eprintln!("python mcp {mcp_version}");
    let server = vec![
        py.display().to_string(),
        scripts_dir().join("py_server.py").display().to_string(),
    ];
    let mut guarded = vec![
        env!("CARGO_BIN_EXE_mcp-stdio").to_owned(),
        "guard".to_owned(),
        "--".to_owned(),
    ];
    guarded.extend(server.iter().cloned());
    for (mode, version) in [
        ("auto", "2026-07-28"),
        ("2026-07-28", "2026-07-28"),
        ("legacy", "2025-11-25"),
    ] {
        let run = |cmd: &[String]| {
            let t = Instant::now();
            let out = Command::new(&py)
                .arg(scripts_dir().join("py_revisions.py"))
                .arg(mode)
                .arg("--")
                .args(cmd)
                .output()
                .expect("run the Python client");
            assert!(
                out.status.success(),
                "{mode}: python client failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!("{mode}: {} in {:?}", cmd[0], t.elapsed());
            serde_json::from_slice::<Value>(&out.stdout).expect("one JSON document")
        };
        let direct = run(&server);
        let through = run(&guarded);
        assert_eq!(direct["protocol_version"], version, "{mode}: {direct}");
        assert_eq!(
            direct, through,
            "{mode}: the guard changed what the client saw"
        );
    }
}
