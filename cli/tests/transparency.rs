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
