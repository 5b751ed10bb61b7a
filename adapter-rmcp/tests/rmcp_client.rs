//! The rmcp client through [`ClientTransport`] against the conformance suite's
//! fixture server (a real process; `fixture-server` is a bin of `mcp-stdio-tests`,
//! built by `cargo build -p mcp-stdio-tests --bins` or any workspace build).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcp_stdio_rmcp::{ClientOptions, ClientTransport, CommandSpec};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;

/// Generous: "at once" is milliseconds; CI machines are slow, never this slow.
const PROMPT: Duration = Duration::from_secs(10);

fn fixture() -> PathBuf {
    // Test binaries live in `target/<profile>/deps`; the workspace's bins one level up.
    let exe = std::env::current_exe().expect("the test's own path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("fixture-server");
    assert!(
        path.exists(),
        "{} missing: run `cargo build -p mcp-stdio-tests --bins`",
        path.display()
    );
    path
}

fn args(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        _ => panic!("tool arguments are an object"),
    }
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    let value = serde_json::to_value(result).expect("result serializes");
    value["content"][0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned()
}

#[tokio::test]
async fn g12_rmcp_client_initializes_lists_calls_and_the_record_is_reachable() {
    let transport = ClientTransport::spawn(&CommandSpec::new(fixture()), ClientOptions::default())
        .expect("spawn the fixture");
    let mut session = transport.session();
    let pid = session.pid();
    let client = ().serve(transport).await.expect("rmcp initializes");
    let info = client.peer_info().expect("server info after initialize");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "fixture-server");

    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "echo"), "echo is listed");

    let result = client
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"text": "hi rmcp"}))),
        )
        .await
        .expect("tools/call echo");
    assert_eq!(text_of(&result), "hi rmcp");

    let started = Instant::now();
    client.cancel().await.expect("rmcp closes the transport");
    let record = tokio::time::timeout(PROMPT, session.record())
        .await
        .expect("the record is published promptly")
        .expect("closed, not dropped");
    eprintln!("pid {pid}: shutdown and record in {:?}", started.elapsed());
    assert!(
        record.exit_status().is_some(),
        "the server was reaped: {:?}",
        record.process
    );
    assert!(
        record.metrics.frames >= 3,
        "initialize, tools/list, tools/call answered"
    );
}

#[tokio::test]
async fn g3_rmcp_request_with_an_oversized_response_id_last_fails_at_once() {
    oversized_response_fails_that_request_at_once("big_id_last").await;
}

#[tokio::test]
async fn g3_rmcp_request_with_an_oversized_response_id_first_fails_at_once() {
    oversized_response_fails_that_request_at_once("big").await;
}

async fn oversized_response_fails_that_request_at_once(tool: &'static str) {
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(64 * 1024);
    let transport =
        ClientTransport::spawn(&CommandSpec::new(fixture()), options).expect("spawn the fixture");
    let mut session = transport.session();
    let client = ().serve(transport).await.expect("rmcp initializes");

    // 4 MiB; with `big_id_last` the id is the last member, found only at the
    // frame's end, with nothing of the frame kept.
    let started = Instant::now();
    let call = client.call_tool(
        CallToolRequestParams::new(tool)
            .with_arguments(args(serde_json::json!({"bytes": 4 * 1024 * 1024}))),
    );
    let outcome = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the oversized response fails the request, no hang");
    let elapsed = started.elapsed();
    eprintln!("oversized response ({tool}) failed the request in {elapsed:?}");
    let error = outcome.expect_err("the response passed the wire limit");
    let message = error.to_string();
    assert!(
        message.contains("wire limit"),
        "rmcp sees our error: {message}"
    );
    // The one wire-limit error of every component: code, text, data.
    let rmcp::ServiceError::McpError(data) = &error else {
        panic!("an MCP error, got {error:?}");
    };
    assert_eq!(data.code.0, -32000, "{data:?}");
    // It names the client's knob as its user writes it.
    assert!(
        data.message
            .ends_with("; raise ClientOptions::framer_mut().max_frame(bytes)"),
        "{data:?}"
    );
    let extra = data.data.as_ref().expect("data {limit, seen}");
    assert_eq!(extra["limit"], 64 * 1024, "{extra}");
    assert!(extra["seen"].as_u64() > Some(64 * 1024), "{extra}");

    // Only that request failed: the session goes on.
    let result = client
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"text": "still here"}))),
        )
        .await
        .expect("the session survives the oversized response");
    assert_eq!(text_of(&result), "still here");

    client.cancel().await.expect("rmcp closes the transport");
    let record = session.record().await.expect("closed, not dropped");
    assert_eq!(record.metrics.oversized_frames, 1);
    assert_eq!(
        record.metrics.oversized_ids_missing, 0,
        "the id was recovered"
    );
}

/// G2: a 5 MiB result passes at the default wire limit (rmcp's own stdio
/// takes lines up to 16 MiB; through us it must not fail where it worked).
#[tokio::test]
async fn g2_a_5_mib_result_passes_at_the_default_limit() {
    let transport = ClientTransport::spawn(&CommandSpec::new(fixture()), ClientOptions::default())
        .expect("spawn the fixture");
    let client = ().serve(transport).await.expect("rmcp initializes");
    let started = Instant::now();
    let result = client
        .call_tool(
            CallToolRequestParams::new("big")
                .with_arguments(args(serde_json::json!({"bytes": 5 << 20}))),
        )
        .await
        .expect("5 MiB at the default limit");
    assert_eq!(text_of(&result).len(), 5 << 20);
    eprintln!(
        "5 MiB result through ClientTransport in {:?}",
        started.elapsed()
    );
    client.cancel().await.expect("rmcp closes the transport");
}

#[tokio::test]
async fn g5_server_request_reaches_rmcp_and_its_answer_reaches_the_server() {
    let transport = ClientTransport::spawn(&CommandSpec::new(fixture()), ClientOptions::default())
        .expect("spawn the fixture");
    let client = ().serve(transport).await.expect("rmcp initializes");
    // The fixture sends a `ping` request to the client and returns only once
    // it is answered: rmcp answers it, under the server's own id.
    let started = Instant::now();
    let call = client.call_tool(
        CallToolRequestParams::new("server_request").with_arguments(args(serde_json::json!({}))),
    );
    let result = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the server's request was answered, no hang")
        .expect("tools/call server_request");
    eprintln!("server→client ping round trip in {:?}", started.elapsed());
    assert_ne!(result.is_error, Some(true), "{result:?}");
    client.cancel().await.expect("rmcp closes the transport");
}

#[tokio::test]
async fn g4_stderr_flood_stays_within_the_budget_and_the_tail_is_on_record() {
    let transport = ClientTransport::spawn(&CommandSpec::new(fixture()), ClientOptions::default())
        .expect("spawn the fixture");
    let mut session = transport.session();
    let client = ().serve(transport).await.expect("rmcp initializes");
    let flood: u64 = 16 * 1024 * 1024;
    let started = Instant::now();
    let call = client.call_tool(
        CallToolRequestParams::new("stderr_flood")
            .with_arguments(args(serde_json::json!({"bytes": flood}))),
    );
    tokio::time::timeout(PROMPT, call)
        .await
        .expect("a stderr flood nobody reads does not stall the server")
        .expect("tools/call stderr_flood");
    eprintln!("16 MiB of stderr went through in {:?}", started.elapsed());
    client.cancel().await.expect("rmcp closes the transport");
    let record = session.record().await.expect("closed, not dropped");
    eprintln!(
        "stderr seen {} retained {} truncated {}",
        record.stderr.seen, record.stderr.retained, record.stderr.truncated
    );
    assert!(record.stderr.seen >= flood, "every byte was read");
    assert!(record.stderr.truncated, "the budget cut it");
    assert!(record.stderr.retained < flood / 4, "memory stayed bounded");
}

#[tokio::test]
async fn g11_a_server_ignoring_eof_and_term_is_killed_on_close() {
    let mut options = ClientOptions::default();
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(300))
        .term_grace(Duration::from_millis(300));
    let mut command = CommandSpec::new(fixture());
    command.args(["--ignore-stdin-eof", "--ignore-sigterm"]);
    let transport = ClientTransport::spawn(&command, options).expect("spawn the fixture");
    let mut session = transport.session();
    let client = ().serve(transport).await.expect("rmcp initializes");
    let started = Instant::now();
    tokio::time::timeout(PROMPT, client.cancel())
        .await
        .expect("close does not hang on a stubborn server")
        .expect("rmcp closes the transport");
    let record = session.record().await.expect("closed, not dropped");
    eprintln!(
        "stubborn server ended by {:?} after {:?}",
        record.process.ended_by,
        started.elapsed()
    );
    assert_eq!(
        record.process.ended_by,
        mcp_stdio_core::EndedBy::ExitedAfterKill
    );
    assert!(
        record.stderr_tail.contains("SIGTERM received and ignored"),
        "TERM was sent first: {}",
        record.stderr_tail
    );
}

#[tokio::test]
async fn g6_rmcp_cancel_reaches_the_server_under_the_sessions_id() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;

    let transport = ClientTransport::spawn(&CommandSpec::new(fixture()), ClientOptions::default())
        .expect("spawn the fixture");
    let mut session = transport.session();
    let client = ().serve(transport).await.expect("rmcp initializes");
    // 100 × 100 ms of work that stops at a cancel.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("slow").with_arguments(args(
            serde_json::json!({"chunks": 100, "delay_ms": 100, "honour_cancel": true}),
        )),
    ));
    let handle = client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("the request goes out");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    handle
        .cancel(Some("no longer needed".into()))
        .await
        .expect("rmcp sends its cancel");
    // The session still answers, and the fixture saw the cancel.
    let result = client
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"text": "after cancel"}))),
        )
        .await
        .expect("tools/call echo");
    assert_eq!(text_of(&result), "after cancel");
    client.cancel().await.expect("rmcp closes the transport");
    let elapsed = started.elapsed();
    let record = session.record().await.expect("closed, not dropped");
    eprintln!("cancel, echo and close in {elapsed:?}");
    assert!(
        record.stderr_tail.contains("cancel received"),
        "the server got the cancel: {}",
        record.stderr_tail
    );
    // The id is ours to map; the reason is rmcp's, as it gave it.
    assert!(
        record
            .stderr_tail
            .contains("cancel received (reason \"no longer needed\")"),
        "the client's reason reached the server: {}",
        record.stderr_tail
    );
    assert!(
        elapsed < PROMPT,
        "the cancelled work did not hold up the close"
    );
}
