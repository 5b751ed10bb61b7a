//! [`ServerTransport`]'s own decisions, in process over an in-memory pipe
//! (the pipe behaviour itself is tested with real processes in
//! `rmcp_server.rs`): what happens when rmcp falls behind, and what
//! [`Transport::close`] answers for requests rmcp left unanswered.

use std::time::Duration;

use mcp_stdio_rmcp::{ServeOptions, ServerTransport, MAX_QUEUED_FOR_RMCP};
use rmcp::model::JsonRpcMessage;
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PROMPT: Duration = Duration::from_secs(10);

type Lines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;

fn pair() -> (
    ServerTransport,
    Lines,
    tokio::io::WriteHalf<tokio::io::DuplexStream>,
) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (server_read, server_write) = tokio::io::split(server);
    let transport = ServerTransport::with_io(server_read, server_write, &ServeOptions::default());
    let (client_read, client_write) = tokio::io::split(client);
    (transport, BufReader::new(client_read).lines(), client_write)
}

async fn next_message(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(PROMPT, lines.next_line())
        .await
        .expect("a message in time")
        .expect("read")
        .expect("not at EOF");
    serde_json::from_str(&line).expect("JSON")
}

/// Requests rmcp received but never answered are answered with an error
/// for their id when rmcp closes the transport: the client is not left waiting.
#[tokio::test]
async fn close_answers_the_requests_rmcp_left_unanswered() {
    let (mut transport, mut lines, mut client) = pair();
    let mut handle = transport.handle();
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "anything", "arguments": {}}});
    client
        .write_all(format!("{request}\n").as_bytes())
        .await
        .expect("write");
    let received = tokio::time::timeout(PROMPT, Transport::<RoleServer>::receive(&mut transport))
        .await
        .expect("received in time")
        .expect("a message");
    assert!(matches!(&received, JsonRpcMessage::Request(r) if r.id.to_string() == "7"));

    tokio::time::timeout(PROMPT, Transport::<RoleServer>::close(&mut transport))
        .await
        .expect("close does not hang")
        .expect("close");
    let answer = next_message(&mut lines).await;
    assert_eq!(answer["id"], json!(7), "{answer}");
    assert!(answer["error"].is_object(), "{answer}");
    let report = handle.report().await.expect("a report");
    assert_eq!(report.serve.metrics.responses, 1);
    assert!(
        Transport::<RoleServer>::receive(&mut transport)
            .await
            .is_none(),
        "rmcp sees the transport closed"
    );
}

/// rmcp taking nothing: past [`MAX_QUEUED_FOR_RMCP`] messages, notifications
/// are dropped and a request is answered with -32000 at once; reading
/// stdin never stops.
#[tokio::test]
async fn past_the_rmcp_queue_notifications_are_dropped_and_requests_refused() {
    let (mut transport, mut lines, mut client) = pair();
    let mut handle = transport.handle();
    let extra = 44;
    let mut input = String::new();
    for _ in 0..MAX_QUEUED_FOR_RMCP + extra {
        input.push_str(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#);
        input.push('\n');
    }
    input.push_str(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    input.push('\n');
    client.write_all(input.as_bytes()).await.expect("write");
    let answer = next_message(&mut lines).await;
    assert_eq!(answer["id"], json!(1), "{answer}");
    assert_eq!(answer["error"]["code"], json!(-32000), "{answer}");

    // The queue holds what came first, in order.
    let first = Transport::<RoleServer>::receive(&mut transport)
        .await
        .expect("queued");
    assert!(matches!(first, JsonRpcMessage::Notification(_)));
    drop(client);
    tokio::time::timeout(PROMPT, Transport::<RoleServer>::close(&mut transport))
        .await
        .expect("close does not hang")
        .expect("close");
    let report = handle.report().await.expect("a report");
    eprintln!("report: {report:?}");
    // Dropped by the session's event queue (a burst in one read) or by ours.
    let dropped = report.notifications_dropped + report.serve.metrics.notifications_dropped;
    assert_eq!(dropped, extra as u64, "{report:?}");
    assert_eq!(report.requests_refused_rmcp_behind, 1);
}
