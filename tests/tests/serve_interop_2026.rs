//! Our `serve` (every adapter's serve binary) driven by a 2026-07-28 client
//! we did not write: the Python `mcp` package's `Client`, pinned to
//! `mode="2026-07-28"` (every request stamped with its `_meta`; a raw
//! `server/discover` validated against the package's own 2026 schema), in
//! `mode="auto"` (it probes `server/discover` and adopts 2026-07-28), and in
//! `mode="legacy"` (the 2025-11-25 `initialize` handshake, still served as
//! before). Script: `tests/interop/py_client_modern.py`. Install the peers
//! first: `tests/interop/setup.sh` (a missing peer fails the test unless
//! `MCP_STDIO_SKIP_INTEROP=1`).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_stdio_core::SUPPORTED_PROTOCOL_VERSIONS;
use mcp_stdio_tests::interop::{python, require, scripts_dir};
use mcp_stdio_tests::{wait_until, ProcessGroupGuard};
use serde_json::{json, Value};

/// Three sessions with server start-up on a shared 2-core machine: generous.
const DEADLINE: Duration = Duration::from_secs(120);

const SERVERS: [(&str, &str); 3] = [
    ("serve-tokio", env!("CARGO_BIN_EXE_serve-tokio")),
    ("serve-async-std", env!("CARGO_BIN_EXE_serve-async-std")),
    ("serve-blocking", env!("CARGO_BIN_EXE_serve-blocking")),
];

#[test]
fn interop_python_client_pinned_to_2026_07_28_lists_and_calls_tools_on_every_serve() {
    const TEST: &str =
        "interop_python_client_pinned_to_2026_07_28_lists_and_calls_tools_on_every_serve";
    let Some((python, mcp_version)) = require(TEST, python()) else {
        return;
    };
    let script = scripts_dir().join("py_client_modern.py");
    for (name, path) in SERVERS {
        let t = Instant::now();
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .arg("--")
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: spawn python: {e}"));
        let mut guard = ProcessGroupGuard::new(child);
        let read_all = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let out = read_all(Box::new(guard.child().stdout.take().expect("piped")));
        let err = read_all(Box::new(guard.child().stderr.take().expect("piped")));
        let mut status = None;
        wait_until(DEADLINE, Duration::from_millis(20), || {
            status = guard.child().try_wait().expect("try_wait");
            status.is_some()
        });
        let Some(status) = status else {
            guard.kill_all();
            panic!(
                "{name}: the Python client did not finish within {DEADLINE:?}; stderr:\n{}",
                err.join().unwrap_or_default()
            );
        };
        let stdout = out.join().expect("stdout reader");
        let stderr = err.join().expect("stderr reader");
        let summary: Value = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{name}: no JSON summary ({status})\n{stdout}\n{stderr}"));
        eprintln!(
            "{TEST} [{name}]: mcp {mcp_version}, {:?}; summary {summary}",
            t.elapsed()
        );
        assert!(
            status.success() && summary["ok"] == json!(true),
            "{name}: {summary}\n--- stderr:\n{stderr}"
        );
        for mode in ["2026-07-28", "auto"] {
            let m = &summary[mode];
            assert_eq!(m["protocol_version"], "2026-07-28", "{name} {mode}: {m}");
            assert_eq!(
                m["supported_versions"],
                json!(SUPPORTED_PROTOCOL_VERSIONS),
                "{name} {mode}"
            );
            assert_eq!(
                m["discover_server_info"]["name"],
                format!("mcp-stdio-{name}"),
                "{name} {mode}"
            );
            // Our handler saw the revision and the client of each request's `_meta`.
            assert_eq!(m["handler_revision"], "2026-07-28", "{name} {mode}");
            assert_eq!(
                m["handler_client_info"],
                json!({"name": "py-modern", "version": "1"}),
                "{name} {mode}"
            );
        }
        let legacy = &summary["legacy"];
        assert_eq!(legacy["protocol_version"], "2025-11-25", "{name}: {legacy}");
        assert_eq!(legacy["handler_revision"], "2025-11-25", "{name}: {legacy}");
        // G13: the SDK would log a parse failure for any non-protocol stdout line.
        assert!(
            !stderr.contains("Failed to parse JSONRPC"),
            "{name}:\n{stderr}"
        );
        // Our servers exited on stdin EOF by themselves, each session.
        assert_eq!(
            stderr.matches("stdin closed; exiting").count(),
            3,
            "{name}:\n{stderr}"
        );
    }
}
