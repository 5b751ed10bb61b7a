//! An rmcp server on mcp-stdio's hardened stdio: rmcp's `ServerHandler`
//! over [`ServerTransport`]. The tests of this crate drive it as a real
//! process (`tests/rmcp_server.rs`).
//!
//! Usage: `rmcp_server [--modern-only] [--max-frame BYTES] [--max-outgoing BYTES] [--drain-ms MS]`
//!
//! `--modern-only` offers protocol 2026-07-28 alone: `server/discover` lists
//! only it and `initialize` is refused (-32022), as a server written for the
//! current revision only would.
//!
//! Tools: `echo {text}`; `slow {seconds}` (stops at a cancel and says so on
//! stderr); `big {bytes}` (a text result of that size); `log {bytes}` (a
//! progress notification whose message has that size, then "sent"); `flood {count, bytes}`
//! (that many progress notifications); `roots` (asks the client for its roots:
//! this transport refuses server→client requests at once); `ask` (2026-07-28's
//! multi-round-trip: an `InputRequiredResult` asking for the roots, then, on
//! the retry with its `requestState`, a text result). At the end the
//! transport's report goes to stderr as one JSON line after `report `.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_stdio_rmcp::{ServeOptions, ServerTransport};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, InputRequest, InputRequests, InputRequiredResult, ListToolsResult,
    NumberOrString, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};

#[derive(Clone)]
struct Example {
    /// Offer 2026-07-28 only (`--modern-only`).
    modern_only: bool,
}

fn tool(name: &'static str, description: &'static str, properties: Value) -> Tool {
    let schema = json!({"type": "object", "properties": properties});
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new(name, description, Arc::new(schema))
}

fn text(t: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(t)]).into())
}

/// A progress notification whose message is `bytes` bytes long.
fn progress(step: u64, bytes: f64) -> ProgressNotificationParam {
    let token = ProgressToken(NumberOrString::String("rmcp_server".into()));
    ProgressNotificationParam::new(token, step as f64).with_message("p".repeat(bytes as usize))
}

fn number(args: &Map<String, Value>, key: &str) -> Result<f64, ErrorData> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{key}` must be a number"), None))
}

impl ServerHandler for Example {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.modern_only {
            std::borrow::Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("mcp-stdio-rmcp-example", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let n = json!({"type": "number"});
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "echo",
                "Returns its text",
                json!({"text": {"type": "string"}}),
            ),
            tool(
                "slow",
                "Sleeps, stopping at a cancel",
                json!({"seconds": n}),
            ),
            tool("big", "A text result of `bytes` bytes", json!({"bytes": n})),
            tool(
                "log",
                "A progress notification of `bytes` bytes",
                json!({"bytes": n}),
            ),
            tool(
                "flood",
                "`count` progress notifications",
                json!({"count": n, "bytes": n}),
            ),
            tool("roots", "Asks the client for its roots", json!({})),
            tool(
                "ask",
                "2026-07-28 multi-round-trip: asks for the client's roots, then answers",
                json!({}),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let id = context.id.clone();
        match request.name.as_ref() {
            "echo" => text(args.get("text").and_then(Value::as_str).unwrap_or_default()),
            "slow" => {
                let seconds = number(&args, "seconds")?;
                let started = Instant::now();
                eprintln!("rmcp_server: slow {id} started");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 3600.0))) => text("slept"),
                    () = context.ct.cancelled() => {
                        eprintln!("rmcp_server: slow {id} cancelled after {} ms", started.elapsed().as_millis());
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                }
            }
            "big" => text("x".repeat(number(&args, "bytes")? as usize)),
            #[expect(
                deprecated,
                reason = "roots are the input request rmcp's default client handler answers"
            )]
            "ask" => match request.request_state.as_deref() {
                None => {
                    let mut asks = InputRequests::new();
                    asks.insert(
                        "roots".to_owned(),
                        InputRequest::ListRoots(rmcp::model::ListRootsRequest::default()),
                    );
                    Ok(InputRequiredResult::new(Some(asks), Some("ask-round-1".to_owned())).into())
                }
                Some(state) => text(format!(
                    "answered after {} input response(s), state {state}",
                    request.input_responses.as_ref().map_or(0, |r| r.len())
                )),
            },
            "log" => {
                let sent = context
                    .peer
                    .notify_progress(progress(0, number(&args, "bytes")?))
                    .await;
                text(format!("sent: {sent:?}"))
            }
            "flood" => {
                let count = number(&args, "count")? as u64;
                let bytes = number(&args, "bytes")?;
                for i in 0..count {
                    if let Err(e) = context.peer.notify_progress(progress(i, bytes)).await {
                        return text(format!("stopped at {i}: {e}"));
                    }
                }
                text(format!("sent {count}"))
            }
            #[expect(
                deprecated,
                reason = "roots are what rmcp offers for a server-to-client request"
            )]
            "roots" => {
                let started = Instant::now();
                let outcome = match context.peer.list_roots().await {
                    Ok(roots) => format!("{} roots", roots.roots.len()),
                    Err(e) => format!("error: {e}"),
                };
                text(format!(
                    "{outcome} after {} ms",
                    started.elapsed().as_millis()
                ))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// The transport's options and whether to offer 2026-07-28 only.
fn options() -> (ServeOptions, bool) {
    let mut options = ServeOptions::default();
    let mut modern_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--modern-only" {
            modern_only = true;
            continue;
        }
        let value: u64 = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--max-frame" => {
                options.framer_mut().max_frame(value as usize);
            }
            "--max-outgoing" => {
                options.session_mut().max_outgoing_bytes(value as usize);
            }
            "--drain-ms" => {
                options.drain_timeout(Duration::from_millis(value));
            }
            other => panic!("unknown flag {other}"),
        }
    }
    (options, modern_only)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (options, modern_only) = options();
    let transport = ServerTransport::stdio_with(&options)?;
    let mut handle = transport.handle();
    eprintln!("rmcp_server: pid {} serving", std::process::id());
    let ended = match (Example { modern_only }).serve(transport).await {
        Ok(service) => format!("{:?}", service.waiting().await?),
        Err(e) => format!("initialize failed: {e}"),
    };
    let report = handle.report().await;
    eprintln!("rmcp_server: ended ({ended})");
    eprintln!("rmcp_server: report {}", serde_json::to_string(&report)?);
    Ok(())
}
