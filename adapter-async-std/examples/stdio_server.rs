//! A small MCP server on this process's stdin and stdout with
//! `mcp_stdio_async_std::serve`: `initialize`, `ping`, and two tools,
//! `echo {text}` and `wait {ms}` (which stops at once when cancelled).
//!
//! Run it under any MCP host: `cargo run -p mcp-stdio-async-std --example stdio_server`.
//! Only protocol messages go to stdout (G13); log lines go to stderr.

use std::time::Duration;

use mcp_stdio_async_std::core::handshake::LATEST_PROTOCOL_VERSION;
use mcp_stdio_async_std::core::message::{to_raw, ErrorObject, Request};
use mcp_stdio_async_std::{serve, HandlerResult, RequestContext, ServeOptions};
use serde_json::{json, Value};

async fn handle(req: Request, ctx: RequestContext) -> HandlerResult {
    let params: Value = req
        .params
        .as_deref()
        .map_or(Ok(Value::Null), |p| serde_json::from_str(p.get()))
        .map_err(|e| ErrorObject::new(-32602, format!("bad params: {e}")))?;
    let result = match req.method.as_str() {
        "initialize" => json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or(LATEST_PROTOCOL_VERSION),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "async-std-example", "version": "0.1.0"},
        }),
        "ping" => json!({}),
        "tools/call" => match params["name"].as_str() {
            Some("echo") => {
                let text = params["arguments"]["text"].as_str().unwrap_or_default();
                json!({"content": [{"type": "text", "text": text}]})
            }
            Some("wait") => {
                let ms = params["arguments"]["ms"].as_u64().unwrap_or(1000);
                eprintln!("stdio_server: request {} waits {ms} ms", ctx.id());
                // A cancel drops this future at its next await, so nothing
                // more runs and no response goes out. Work that does not
                // await (a CPU loop, a blocking thread, a subprocess) watches
                // `ctx.cancel_token()` instead.
                async_io::Timer::after(Duration::from_millis(ms)).await;
                json!({"content": [{"type": "text", "text": format!("waited {ms} ms")}]})
            }
            _ => return Err(ErrorObject::new(-32602, "unknown tool")),
        },
        _ => return Err(ErrorObject::new(-32601, "method not found")),
    };
    to_raw(&result).map_err(|e| ErrorObject::new(-32603, e.to_string()))
}

fn main() -> std::io::Result<()> {
    let report = async_std::task::block_on(serve(ServeOptions::default(), handle))?;
    eprintln!(
        "stdio_server: stdin closed; {} requests, {} cancelled while running",
        report.metrics.requests, report.metrics.cancels_running
    );
    Ok(())
}
