//! rmcp 3.11 on both ends at MCP 2026-07-28: its client through our
//! [`ClientTransport`], its server on our `ServerTransport` (the example
//! `rmcp_server --modern-only`, which offers 2026-07-28 alone), directly and
//! with `mcp-stdio guard` in between. The session negotiates 2026-07-28
//! through `server/discover`; tools list and answer; a multi-round-trip call
//! (`InputRequiredResult`, then the client's retry with `requestState`) ends
//! as without us; a call abandoned midway leaves the session working; through the guard the
//! audit log links the two rounds.
//!
//! Needs the example and the CLI built (`cargo build -p mcp-stdio-rmcp
//! --examples -p mcp-stdio-cli`; any workspace test run builds both).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcp_stdio_rmcp::{ClientTransport, CommandSpec};
use mcp_stdio_tests::interop::{peer_options, require};
use mcp_stdio_tests::negotiation::rmcp_example_server;
use mcp_stdio_tests::TempPath;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};

/// Generous: these are milliseconds when things go well.
const PROMPT: Duration = Duration::from_secs(20);

/// `mcp-stdio` (the CLI) beside the example: `target/<profile>/mcp-stdio`.
fn guard_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the test's own path: {e}"))?;
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("no target/<profile> above the test binary")?
        .join("mcp-stdio");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the guard is not at {} (build it with `cargo build -p mcp-stdio-cli`)",
            path.display()
        ))
    }
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    let value = serde_json::to_value(result).expect("result serializes");
    value["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// One session of the rmcp client against `command`; what it saw.
async fn session(label: &str, command: CommandSpec) -> Vec<String> {
    let started = Instant::now();
    let transport = ClientTransport::spawn(&command, peer_options(1 << 20)).expect("spawn");
    // rmcp's `serve` keeps the legacy handshake; its auto mode probes
    // `server/discover` first, as a 2026-07-28 host does.
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    let client = tokio::time::timeout(PROMPT, ().serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("negotiates in time")
        .expect("rmcp negotiates");
    let info = client.peer_info().expect("peer info after discover");
    assert_eq!(
        info.protocol_version,
        ProtocolVersion::V_2026_07_28,
        "{label}: 2026-07-28 negotiated"
    );
    let mut seen = vec![info.protocol_version.to_string()];
    let mut tools: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    tools.sort();
    seen.push(tools.join(","));
    let mut args = serde_json::Map::new();
    args.insert("text".into(), "héllo 2026".into());
    let echo = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
        .await
        .expect("tools/call echo");
    seen.push(text_of(&echo));
    // The multi-round-trip: rmcp's client answers the roots request and retries.
    let asked = client
        .call_tool(CallToolRequestParams::new("ask"))
        .await
        .expect("tools/call ask, two rounds");
    let answer = text_of(&asked);
    assert!(
        answer.starts_with("answered after 1 input response(s), state ask-round-1"),
        "{label}: {answer}"
    );
    seen.push(answer);
    // A call abandoned midway (rmcp cancels it): the session goes on.
    let mut args = serde_json::Map::new();
    args.insert("seconds".into(), 30.into());
    let slow = tokio::time::timeout(
        Duration::from_millis(300),
        client.call_tool(CallToolRequestParams::new("slow").with_arguments(args)),
    )
    .await;
    assert!(slow.is_err(), "{label}: the slow call was still running");
    let again = client
        .call_tool(CallToolRequestParams::new("echo"))
        .await
        .expect("a call after the cancel");
    seen.push(text_of(&again));
    tokio::time::timeout(PROMPT, client.cancel())
        .await
        .expect("closes in time")
        .expect("closes");
    eprintln!("{label}: {:?}", started.elapsed());
    seen
}

#[tokio::test]
async fn rmcp_client_and_server_at_2026_07_28_directly_and_through_the_guard() {
    let test = "rmcp_client_and_server_at_2026_07_28_directly_and_through_the_guard";
    let Some(server) = require(test, rmcp_example_server()) else {
        return;
    };
    let Some(guard) = require(test, guard_bin()) else {
        return;
    };
    let mut direct = CommandSpec::new(&server);
    direct.args(["--modern-only"]);
    let a = session("direct", direct).await;

    let audit = TempPath::new("audit.jsonl");
    let mut guarded = CommandSpec::new(&guard);
    guarded.args([
        "guard".as_ref(),
        "--audit".as_ref(),
        audit.path().as_os_str(),
        "--".as_ref(),
        server.as_os_str(),
        "--modern-only".as_ref(),
    ]);
    let b = session("through the guard", guarded).await;
    assert_eq!(a, b, "the guard changed what the client saw");

    // The guard's records: one call per round trip, linked by requestState.
    let log = std::fs::read_to_string(&audit).expect("the audit log");
    let first = log
        .split("input required, requestState #")
        .nth(1)
        .map(|rest| rest[..16].to_owned())
        .unwrap_or_else(|| panic!("no input-required record in {log}"));
    assert!(
        log.contains(&format!("continues requestState #{first}")),
        "the retry is linked to the first round: {log}"
    );
    assert!(log.contains("offers protocol 2026-07-28"), "{log}");
}
