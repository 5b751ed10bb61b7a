//! A tiny MCP server on stdio with `serve`: `echo`, and `slow`, which honours cancel.
//! `serve` answers `initialize`, `ping`, `tools/list` and unknown methods or tools
//! itself, from the options; the handler sees only calls of the two tools.
//!
//! `cargo run -p mcp-stdio-tokio --example tokio_server`

use std::time::Duration;

use mcp_stdio_tokio::core::{to_raw, ErrorObject, Request};
use mcp_stdio_tokio::{serve, HandlerResult, RequestContext, ServeOptions};
use serde_json::{json, Value};

async fn handle(request: Request, ctx: RequestContext) -> HandlerResult {
    // Only `tools/call` of `echo` or `slow` gets here.
    let call: Value = request
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    if call["name"] == "slow" {
        // Aborted at the next await when the client cancels (G7).
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
            () = ctx.cancel_token().cancelled() => {}
        }
    }
    let text = call["arguments"]["text"].as_str().unwrap_or("done");
    to_raw(&json!({"content": [{"type": "text", "text": text}]}))
        .map_err(|e| ErrorObject::new(-32603, e.to_string()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut options = ServeOptions::default();
    options
        .basics_mut()
        .server_info("example", "0.1.0")?
        .tool(&json!({"name": "echo", "inputSchema": {"type": "object"}}))?
        .tool(&json!({"name": "slow", "inputSchema": {"type": "object"}}))?;
    // Logs go to stderr; stdout belongs to the protocol (G13).
    let report = serve(options, handle).await?;
    eprintln!("served {} requests", report.metrics.requests);
    Ok(())
}
