//! A small MCP server on this process's stdin and stdout with
//! `mcp_stdio_async_std::serve`: two tools, `echo {text}` and `wait {ms}`
//! (which stops at once when cancelled). `serve` answers `initialize`, `ping`,
//! `tools/list` and unknown methods or tools itself, from the options.
//!
//! Run it under any MCP host: `cargo run -p mcp-stdio-async-std --example stdio_server`.
//! Only protocol messages go to stdout (G13); log lines go to stderr.

use std::time::Duration;

use mcp_stdio_async_std::core::{to_raw, ErrorObject, Request};
use mcp_stdio_async_std::{serve, HandlerResult, RequestContext, ServeOptions};
use serde_json::{json, Value};

async fn handle(req: Request, ctx: RequestContext) -> HandlerResult {
    // Only `tools/call` of `echo` or `wait` gets here.
    let params: Value = req
        .params
        .as_deref()
        .map_or(Ok(Value::Null), |p| serde_json::from_str(p.get()))
        .map_err(|e| ErrorObject::new(-32602, format!("bad params: {e}")))?;
    let text = if params["name"] == "wait" {
        let ms = params["arguments"]["ms"].as_u64().unwrap_or(1000);
        eprintln!("stdio_server: request {} waits {ms} ms", ctx.id());
        // A cancel drops this future at its next await, so nothing more runs
        // and no response goes out. Work that does not await (a CPU loop, a
        // blocking thread, a subprocess) watches `ctx.cancel_token()` instead.
        async_io::Timer::after(Duration::from_millis(ms)).await;
        format!("waited {ms} ms")
    } else {
        params["arguments"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    to_raw(&json!({"content": [{"type": "text", "text": text}]}))
        .map_err(|e| ErrorObject::new(-32603, e.to_string()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut options = ServeOptions::default();
    options
        .basics_mut()
        .server_info("async-std-example", "0.1.0")?
        .tool(&json!({"name": "echo", "inputSchema": {"type": "object"}}))?
        .tool(&json!({"name": "wait", "inputSchema": {"type": "object"}}))?;
    let report = async_std::task::block_on(serve(options, handle))?;
    eprintln!(
        "stdio_server: stdin closed; {} requests, {} cancelled while running",
        report.metrics.requests, report.metrics.cancels_running
    );
    Ok(())
}
