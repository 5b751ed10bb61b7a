//! A tiny MCP server on stdio with `serve`: `echo`, and `slow`, which honours cancel.
//!
//! `cargo run -p mcp-stdio-tokio --example tokio_server`

use std::time::Duration;

use mcp_stdio_tokio::core::message::{to_raw, ErrorObject, Request, METHOD_NOT_FOUND};
use mcp_stdio_tokio::{serve, HandlerResult, RequestContext, ServeOptions};
use serde_json::json;

async fn handle(request: Request, ctx: RequestContext) -> HandlerResult {
    let value = match request.method.as_str() {
        "initialize" => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "example", "version": "0.1.0"}
        }),
        "ping" => json!({}),
        "tools/list" => json!({"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}},
            {"name": "slow", "inputSchema": {"type": "object"}}
        ]}),
        "tools/call" => {
            let call: serde_json::Value = request
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
            let text = call["arguments"]["text"]
                .as_str()
                .unwrap_or("done")
                .to_owned();
            json!({"content": [{"type": "text", "text": text}]})
        }
        other => {
            return Err(ErrorObject::new(
                METHOD_NOT_FOUND,
                format!("no method {other}"),
            ))
        }
    };
    to_raw(&value).map_err(|e| ErrorObject::new(-32603, e.to_string()))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // Logs go to stderr; stdout belongs to the protocol (G13).
    let report = serve(ServeOptions::default(), handle).await?;
    eprintln!("served {} requests", report.metrics.requests);
    Ok(())
}
