//! The rmcp client through [`ClientTransport`] against real MCP servers:
//! server-everything (TypeScript SDK) and the Python `mcp` package's server.
//! Install them first: `bash tests/interop/setup.sh`; absent, they fail, or
//! are skipped with `MCP_STDIO_SKIP_INTEROP=1` (see `mcp_stdio_tests::interop`).

use std::time::{Duration, Instant};

use mcp_stdio_rmcp::{ClientTransport, CommandSpec};
use mcp_stdio_tests::interop::{
    node, peer_options, python, require, scripts_dir, server_everything_entry,
};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;

const PROMPT: Duration = Duration::from_secs(30);

/// initialize, tools/list, tools/call `echo`, close: the echoed text comes back.
async fn initialize_list_call(test: &str, command: CommandSpec, echo_key: &str) {
    let started = Instant::now();
    let transport =
        ClientTransport::spawn(&command, peer_options(1 << 20)).expect("spawn the peer");
    let mut session = transport.session();
    let client = tokio::time::timeout(PROMPT, ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("rmcp initializes");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(
        tools.iter().any(|t| t.name == "echo"),
        "{test}: echo listed"
    );
    let mut args = serde_json::Map::new();
    args.insert(echo_key.into(), "through mcp-stdio".into());
    let result = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
        .await
        .expect("tools/call echo");
    let text = serde_json::to_value(&result).expect("serializes")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("through mcp-stdio"), "{test}: echoed: {text}");
    client.cancel().await.expect("rmcp closes the transport");
    let record = session.record().await.expect("closed, not dropped");
    eprintln!(
        "{test}: {} tools, echo ok, ended by {:?}, total {:?}",
        tools.len(),
        record.process.ended_by,
        started.elapsed()
    );
    assert!(
        record.exit_status().is_some(),
        "{test}: the peer was reaped"
    );
}

#[tokio::test]
async fn interop_rmcp_client_against_server_everything() {
    let test = "interop_rmcp_client_against_server_everything";
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
    let mut command = CommandSpec::new(node);
    command.arg(entry).arg("stdio");
    initialize_list_call(test, command, "message").await;
}

#[tokio::test]
async fn interop_rmcp_client_against_the_python_server() {
    let test = "interop_rmcp_client_against_the_python_server";
    let Some((python, _)) = require(test, python()) else {
        return;
    };
    let mut command = CommandSpec::new(python);
    command.arg(scripts_dir().join("py_server.py"));
    initialize_list_call(test, command, "text").await;
}
