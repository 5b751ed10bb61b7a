//! A server on tokio with `serve`: one tool, `echo`; `serve` answers the rest of the protocol.
use mcp_stdio_tokio::core::{to_raw, ErrorObject, Request};
use mcp_stdio_tokio::{serve, RequestContext, ServeOptions};
use serde_json::{json, Value};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let echo = json!({"name": "echo", "inputSchema": {"type": "object",
        "properties": {"text": {"type": "string"}}}});
    let mut options = ServeOptions::default();
    options
        .basics_mut()
        .server_info("echo-server", "0.1.0")?
        .tool(&echo)?;
    // Only calls of the tools listed get here: `serve` answers the rest itself.
    let handler = |request: Request, _ctx: RequestContext| async move {
        let params = request.params.as_deref().map_or("{}", |p| p.get());
        let call: Value = serde_json::from_str(params).unwrap_or_default();
        let text = call["arguments"]["text"].as_str().unwrap_or_default();
        to_raw(&json!({"content": [{"type": "text", "text": text}]}))
            .map_err(|e| ErrorObject::new(-32603, e.to_string()))
    };
    serve(options, handler).await?; // until stdin closes; stdout carries only the protocol
    Ok(())
}
