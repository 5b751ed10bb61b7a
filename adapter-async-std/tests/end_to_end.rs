//! This crate's `Client` against this crate's `serve` (the `stdio_server`
//! example), two real processes: `serve` on async-std's stdin and stdout,
//! stdin EOF ending it, and a cancel reaching a handler in the other process.
//!
//! `cargo test` builds the example into `target/<profile>/examples/`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_std::task::block_on;
use mcp_stdio_async_std::core::to_raw;
use mcp_stdio_async_std::core::EndedBy;
use mcp_stdio_async_std::core::ExitStatus;
use mcp_stdio_async_std::core::RequestFailure;
use mcp_stdio_async_std::{Client, ClientOptions, CommandSpec, RequestError};
use serde_json::{json, Value};

fn example_server() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/end_to_end-<hash> → target/<profile>/examples/
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples/stdio_server");
    assert!(path.is_file(), "{} not built", path.display());
    path
}

#[test]
fn client_and_serve_end_to_end_with_cancel_and_stdin_eof() {
    block_on(async {
        let client = Client::spawn(
            &CommandSpec::new(example_server()),
            ClientOptions::default(),
        )
        .expect("spawn");
        let init = client.initialize().await.expect("initialize");
        assert_eq!(
            init.server_info.as_ref().expect("serverInfo").name,
            "async-std-example"
        );
        let echo = |text: &str| {
            Some(to_raw(&json!({"name": "echo", "arguments": {"text": text}})).expect("JSON"))
        };
        let r = client
            .request("tools/call", echo("hi"))
            .await
            .expect("echo");
        let v: Value = serde_json::from_str(r.get()).expect("JSON");
        assert_eq!(v["content"][0]["text"], "hi");

        let wait = to_raw(&json!({"name": "wait", "arguments": {"ms": 60_000}})).expect("JSON");
        let pending = client
            .start_request("tools/call", Some(wait), None)
            .await
            .expect("sent");
        async_std::task::sleep(Duration::from_millis(100)).await;
        pending.cancel("stop");
        let r = pending.await;
        assert!(
            matches!(
                r,
                Err(RequestError::Failed(RequestFailure::Cancelled { .. }))
            ),
            "{r:?}"
        );
        let t = Instant::now();
        // The session negotiated 2026-07-28 with our `serve`, where `ping`
        // is removed: `server/discover` is the request answerable any time.
        client
            .request("server/discover", None)
            .await
            .expect("a request after the cancel");
        let ping = t.elapsed();

        let t = Instant::now();
        let record = client.shutdown().await;
        eprintln!(
            "async-std end to end: ping after cancel {ping:?}, shutdown {:?}; stderr {:?}",
            t.elapsed(),
            record.stderr_tail
        );
        // stdin EOF ended `serve`, which exited by itself.
        assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
        assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
        assert!(
            record.stderr_tail.contains("cancelled"),
            "{}",
            record.stderr_tail
        );
        assert!(
            record.stderr_tail.contains("1 cancelled while running"),
            "{}",
            record.stderr_tail
        );
    });
}
