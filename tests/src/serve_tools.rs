//! What the three `serve-<adapter>` interop binaries share: the answers that
//! do not depend on the adapter (initialize, tools/list, argument checks) and
//! the log line that proves a cancel reached a handler. Each binary keeps only
//! the adapter-specific wait of `slow`.

use std::time::Instant;

use mcp_stdio_core::handshake::{LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use mcp_stdio_core::message::{ErrorObject, Id, INVALID_PARAMS};
use serde_json::{json, Value};

/// The `initialize` result: the client's protocol version when supported
/// (else the latest), `capabilities {tools:{}}`, and `server_name`.
pub fn initialize(params: &Value, log: &str, server_name: &str) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or_default();
    let version = if SUPPORTED_PROTOCOL_VERSIONS.contains(&asked) {
        asked
    } else {
        LATEST_PROTOCOL_VERSION
    };
    eprintln!("{log} initialize: client asked {asked:?}, answering {version}");
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": {} },
        "serverInfo": { "name": server_name, "version": env!("CARGO_PKG_VERSION") },
    })
}

/// The `tools/list` result: `echo` and `slow`.
pub fn tools_list() -> Value {
    json!({ "tools": [
        {
            "name": "echo",
            "description": "Returns `text` unchanged.",
            "inputSchema": {
                "type": "object",
                "properties": { "text": { "type": "string" } },
                "required": ["text"],
            },
        },
        {
            "name": "slow",
            "description": "Waits `seconds`, or until the request is cancelled.",
            "inputSchema": {
                "type": "object",
                "properties": { "seconds": { "type": "number" } },
                "required": ["seconds"],
            },
        },
    ]})
}

/// A tool result with one text block.
pub fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": false })
}

/// The error a cancelled `slow` returns (the core suppresses it, G7).
pub fn cancelled() -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, "cancelled")
}

/// A checked `tools/call`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCall {
    /// `echo {text}`.
    Echo(String),
    /// `slow {seconds}`, 0 to 3600.
    Slow(f64),
}

fn bad_arguments(what: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("invalid arguments: {what}"))
}

/// Checks a `tools/call`'s params: -32602 for an unknown tool or bad arguments.
///
/// # Errors
/// The JSON-RPC error to answer with.
pub fn parse_tool_call(params: &Value) -> Result<ToolCall, ErrorObject> {
    let args = &params["arguments"];
    match params["name"].as_str() {
        Some("echo") => {
            let text = args["text"].as_str().ok_or_else(|| bad_arguments("text"))?;
            Ok(ToolCall::Echo(text.to_owned()))
        }
        Some("slow") => args["seconds"]
            .as_f64()
            .filter(|s| (0.0..=3600.0).contains(s))
            .map(ToolCall::Slow)
            .ok_or_else(|| bad_arguments("seconds (0..=3600)")),
        Some(other) => Err(ErrorObject::new(
            INVALID_PARAMS,
            format!("unknown tool: {other}"),
        )),
        None => Err(bad_arguments("name")),
    }
}

/// Logs `<log> cancelled ID after D` once the handler ends — by return or by
/// abort (the tokio and async-std adapters drop a cancelled handler) — with
/// its cancel token fired.
pub struct CancelWatch<F: Fn() -> bool> {
    log: &'static str,
    id: Id,
    is_cancelled: F,
    started: Instant,
}

impl<F: Fn() -> bool> CancelWatch<F> {
    /// Logs `<log> slow ID started` and starts watching.
    pub fn start(log: &'static str, id: Id, is_cancelled: F) -> Self {
        eprintln!("{log} slow {id} started");
        Self {
            log,
            id,
            is_cancelled,
            started: Instant::now(),
        }
    }
}

impl<F: Fn() -> bool> Drop for CancelWatch<F> {
    fn drop(&mut self) {
        if (self.is_cancelled)() {
            eprintln!(
                "{} cancelled {} after {:?}",
                self.log,
                self.id,
                self.started.elapsed()
            );
        }
    }
}
