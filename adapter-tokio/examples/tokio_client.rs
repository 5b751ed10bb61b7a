//! Spawn an MCP server, call a tool with a timeout, cancel a slow one, shut down.
//!
//! `cargo run -p mcp-stdio-tokio --example tokio_client -- SERVER_COMMAND [ARGS…]`

use std::time::Duration;

use mcp_stdio_tokio::core::to_raw;
use mcp_stdio_tokio::{Client, ClientOptions, CommandSpec};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let command = CommandSpec::from_argv(&argv).ok_or("usage: client SERVER_COMMAND [ARGS…]")?;
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(4 << 20); // the wire limit, both ways
    let client = Client::spawn(&command, options)?;
    let init = client.initialize().await?;
    // A 2026-07-28 server may leave its name out of `server/discover`.
    let (name, version) = init
        .server_info
        .as_ref()
        .map_or(("?", "?"), |i| (i.name.as_str(), i.version.as_str()));
    eprintln!(
        "connected to {name} {version}: protocol {} via {:?}",
        init.protocol_version, init.via
    );

    let tools = client.request("tools/list", None).await?;
    eprintln!("tools: {}", tools.get());

    // A request with its own deadline: on timeout a cancel is sent (G6).
    let params = to_raw(&serde_json::json!({"name": "echo", "arguments": {"text": "hi"}}))?;
    match client
        .request_with_timeout("tools/call", Some(params), Some(Duration::from_secs(5)))
        .await
    {
        Ok(result) => eprintln!("echo: {}", result.get()),
        Err(e) => eprintln!("echo failed: {e}"),
    }

    // Cancel from elsewhere: the request completes as cancelled at once and
    // the server is told with `notifications/cancelled`.
    let pending = client.start_request("ping", None, None).await?;
    let cancel = pending.cancel_handle();
    cancel.cancel("no longer needed");
    let _ = pending.await;

    // Close stdin → grace → SIGTERM → grace → SIGKILL; the record holds
    // what was observed (G11, G12).
    let record = client.shutdown().await;
    eprintln!(
        "exit {:?} via {:?}; stderr {} bytes seen",
        record.exit_status(),
        record.process.ended_by,
        record.stderr.seen
    );
    Ok(())
}
