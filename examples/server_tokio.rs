//! A server on tokio with `serve`: `echo`, and `count`, which reports its
//! progress to a client that asked for it and stops at a cancel. `serve`
//! answers the handshake (both revisions), `ping`, `tools/list` and unknown
//! methods or tools itself; the handler sees only calls of its tools.
//!
//! ```sh
//! cargo build -p mcp-stdio-examples --example server_tokio
//! mcp-stdio check -- target/debug/examples/server_tokio
//! ```

use std::time::Duration;

use mcp_stdio_tokio::core::{to_raw, ErrorObject, Request};
use mcp_stdio_tokio::{serve, HandlerResult, RequestContext, ServeOptions};
use serde_json::{json, Value};

fn text(t: &str) -> HandlerResult {
    to_raw(&json!({"content": [{"type": "text", "text": t}]}))
        .map_err(|e| ErrorObject::new(-32603, e.to_string()))
}

async fn handle(request: Request, ctx: RequestContext) -> HandlerResult {
    let call: Value = request
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    match call["name"].as_str() {
        Some("count") => {
            let steps = call["arguments"]["steps"].as_u64().unwrap_or(5).min(100);
            let token = call["_meta"]["progressToken"].clone();
            for step in 0..steps {
                if !token.is_null() {
                    let note = json!({"progressToken": token, "progress": step, "total": steps});
                    if let Ok(params) = to_raw(&note) {
                        ctx.notify("notifications/progress", Some(params)).await;
                    }
                }
                // Aborted at this await when the client cancels (G7).
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    () = ctx.cancel_token().cancelled() => return Err(ErrorObject::new(-32800, "cancelled")),
                }
            }
            text(&format!("counted to {steps}"))
        }
        _ => text(call["arguments"]["text"].as_str().unwrap_or("")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut options = ServeOptions::default();
    options
        .basics_mut()
        .server_info("example-server", "0.1.0")?
        .tool(&json!({"name": "echo", "inputSchema": {"type": "object",
            "properties": {"text": {"type": "string"}}}}))?
        .tool(&json!({"name": "count", "inputSchema": {"type": "object",
            "properties": {"steps": {"type": "integer"}}}}))?;
    // Logs go to stderr; stdout belongs to the protocol (G13).
    let report = serve(options, handle).await?;
    eprintln!("served {} requests", report.metrics.requests);
    Ok(())
}
