//! What the three `serve-<adapter>` interop binaries share: their options
//! (`serve` answers `initialize`, `ping`, `tools/list`, unknown methods and
//! unknown tools from them), the argument checks of the tools, and the log
//! line that proves a cancel reached a handler. Each binary keeps only the
//! adapter-specific wait of `slow`.

use std::time::{Duration, Instant};

use mcp_stdio_core::ServeOptions;
use mcp_stdio_core::{ErrorObject, Id, Request, INVALID_PARAMS, METHOD_NOT_FOUND};
use serde_json::{json, Value};

/// Writes one diagnostic line to stderr through the non-blocking writer
/// (`mcp_stdio_sys::NonBlockingStderr`): a client that never reads the
/// server's stderr cannot stall the serve loop or a handler (G1).
pub fn log_line(line: &str) {
    let mut b = Vec::with_capacity(line.len() + 1);
    b.extend_from_slice(line.as_bytes());
    b.push(b'\n');
    mcp_stdio_sys::write_stderr(&b);
}

/// `log_line(format!(…))`.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => { $crate::serve_tools::log_line(&format!($($arg)*)) };
}

/// Installs a `tracing` subscriber when `MCP_STDIO_TEST_LOG` names a level
/// (`debug`, `trace`, …), so the library's own diagnostics are part of what
/// a stalled-stderr case emits: on the non-blocking stderr writer, or —
/// with a `blocking-` prefix (`blocking-debug`) — on plain, blocking
/// `std::io::stderr`, the subscriber the library must survive.
pub fn init_tracing() {
    let Ok(value) = std::env::var("MCP_STDIO_TEST_LOG") else {
        return;
    };
    let (blocking, level) = match value.strip_prefix("blocking-") {
        Some(level) => (true, level),
        None => (false, value.as_str()),
    };
    let level = level
        .parse::<tracing_subscriber::filter::LevelFilter>()
        .unwrap_or(tracing_subscriber::filter::LevelFilter::DEBUG);
    let fmt = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false);
    if blocking {
        fmt.with_writer(std::io::stderr).init();
    } else {
        fmt.with_writer(mcp_stdio_sys::NonBlockingStderr::default)
            .init();
    }
}

/// The start of a serve binary: tracing when asked, then
/// `<log> pid N serving on stdio`.
pub fn start(log: &str) -> Instant {
    init_tracing();
    log_line!("{log} pid {} serving on stdio", std::process::id());
    Instant::now()
}

/// The end of a serve binary: `<log> stdin closed; exiting after D; report
/// {json}` (or `<log> serve failed after D: E`), then the stderr writer gets
/// a bounded time to finish, so a client that never reads stderr cannot hold
/// the exit.
pub fn finish(
    log: &str,
    started: Instant,
    result: std::io::Result<mcp_stdio_core::ServeReport>,
) -> std::process::ExitCode {
    let code = match result {
        Ok(report) => {
            let report = serde_json::to_string(&report).unwrap_or_else(|e| e.to_string());
            log_line!(
                "{log} stdin closed; exiting after {:?}; report {report}",
                started.elapsed()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            log_line!("{log} serve failed after {:?}: {e}", started.elapsed());
            std::process::ExitCode::FAILURE
        }
    };
    mcp_stdio_sys::drain_stderr(Duration::from_secs(2));
    code
}

/// The instructions every serve binary gives in `initialize`.
pub const INSTRUCTIONS: &str =
    "Test server: `echo` returns its text, `slow` waits, `helper` runs a helper process.";

/// The options of a serve binary: the basics answered by `serve` — server
/// info `server_name` with this crate's version, [`INSTRUCTIONS`], and the
/// tools `echo`, `slow` and `helper` — so its handler sees only calls of
/// these tools.
pub fn options(server_name: &str) -> ServeOptions {
    let mut options = ServeOptions::default();
    let basics = options.basics_mut();
    basics
        .server_info(server_name, env!("CARGO_PKG_VERSION"))
        .and_then(|b| b.instructions(INSTRUCTIONS))
        .expect("the server info and instructions are within their bounds");
    for tool in tools() {
        basics
            .tool(&tool)
            .expect("the tools are valid and within bounds");
    }
    options
}

/// The tool definitions: `echo`, `slow`, `helper`, `whoami`, `ticker` and
/// `revision`.
pub fn tools() -> [Value; 6] {
    [
        json!({
            "name": "echo",
            "description": "Returns `text` unchanged.",
            "inputSchema": {
                "type": "object",
                "properties": { "text": { "type": "string" } },
                "required": ["text"],
            },
        }),
        json!({
            "name": "slow",
            "description": "Waits `seconds`, or until the request is cancelled.",
            "inputSchema": {
                "type": "object",
                "properties": { "seconds": { "type": "number" } },
                "required": ["seconds"],
            },
        }),
        json!({
            "name": "helper",
            "description": "Runs `fixture-helper sleep seconds` with `run_helper`; its records go to stderr.",
            "inputSchema": {
                "type": "object",
                "properties": { "seconds": { "type": "number" } },
                "required": ["seconds"],
            },
        }),
        json!({
            "name": "whoami",
            "description": "Returns what the client said about itself in `initialize`, as JSON text.",
            "inputSchema": { "type": "object" },
        }),
        json!({
            "name": "ticker",
            "description": "Sends notifications/progress every millisecond until cancelled, looking at the cancel only every `check_every` ticks; one last one after it saw the cancel.",
            "inputSchema": {
                "type": "object",
                "properties": { "check_every": { "type": "number" } },
            },
        }),
        json!({
            "name": "revision",
            "description": "Returns the protocol version the request is handled under (`RequestContext::protocol_version`), or `null`.",
            "inputSchema": { "type": "object" },
        }),
    ]
}

/// How often `ticker` notifies.
pub const TICK_INTERVAL: Duration = Duration::from_millis(1);
/// At most this many ticks (a minute): a `ticker` nobody cancels still ends.
pub const MAX_TICKS: u64 = 60_000;

/// The params of `ticker`'s `n`th `notifications/progress`.
pub fn tick(token: &Value, n: u64) -> Box<mcp_stdio_core::RawValue> {
    mcp_stdio_core::to_raw(&json!({"progressToken": token, "progress": n}))
        .expect("a serde_json::Value always serializes")
}

/// The `revision` tool's text: the handler's protocol version, as JSON.
pub fn revision(version: Option<&str>) -> String {
    serde_json::to_string(&version).unwrap_or_else(|e| e.to_string())
}

/// The `whoami` tool's text: the handler's view of the client's
/// `initialize` (`RequestContext::client`), as JSON; `null` when unknown.
pub fn whoami(client: Option<&mcp_stdio_core::ClientHello>) -> String {
    serde_json::to_string(&client).unwrap_or_else(|e| e.to_string())
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
    /// `helper {seconds, ignore_term?}`, 0 to 3600: a helper process
    /// sleeping that long (ignoring `SIGTERM` when asked).
    Helper(f64, bool),
    /// `whoami {}`: what the client said in `initialize`.
    WhoAmI,
    /// `ticker {check_every?}`: progress with this token (the request's
    /// `_meta.progressToken`, else its id) every [`TICK_INTERVAL`] until
    /// cancelled, looking at the cancel every `check_every` ticks (default 1).
    Ticker {
        /// The `progressToken` of the notifications.
        token: Value,
        /// Ticks between two looks at the cancel token.
        check_every: u64,
    },
    /// `revision {}`: the protocol version the request is handled under.
    Revision,
}

fn bad_arguments(what: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("invalid arguments: {what}"))
}

/// Checks a `tools/call` (the only request `serve` passes to the handler
/// with [`options`]): -32602 for bad arguments, or for an unknown tool
/// (which `serve` already refuses before the handler).
///
/// # Errors
/// The JSON-RPC error to answer with.
pub fn parse_tool_call(request: &Request) -> Result<ToolCall, ErrorObject> {
    if request.method != "tools/call" {
        // Unreachable while `serve` routes as documented; answered properly anyway.
        return Err(ErrorObject::new(
            METHOD_NOT_FOUND,
            format!("Method not found: {}", request.method),
        ));
    }
    let params: Value = match &request.params {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ErrorObject::new(INVALID_PARAMS, format!("params: {e}")))?,
        None => Value::Null,
    };
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
        Some("helper") => args["seconds"]
            .as_f64()
            .filter(|s| (0.0..=3600.0).contains(s))
            .map(|s| ToolCall::Helper(s, args["ignore_term"].as_bool().unwrap_or(false)))
            .ok_or_else(|| bad_arguments("seconds (0..=3600)")),
        Some("whoami") => Ok(ToolCall::WhoAmI),
        Some("revision") => Ok(ToolCall::Revision),
        Some("ticker") => {
            let token = match &params["_meta"]["progressToken"] {
                Value::Null => serde_json::to_value(&request.id).unwrap_or_default(),
                t => t.clone(),
            };
            let check_every = match &args["check_every"] {
                Value::Null => Some(1),
                v => v.as_u64().filter(|n| (1..=10_000).contains(n)),
            };
            check_every
                .map(|check_every| ToolCall::Ticker { token, check_every })
                .ok_or_else(|| bad_arguments("check_every (1..=10000)"))
        }
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
        log_line!("{log} slow {id} started");
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
            log_line!(
                "{} cancelled {} after {:?}",
                self.log,
                self.id,
                self.started.elapsed()
            );
        }
    }
}

/// The `helper` tool's command: `fixture-helper sleep SECONDS` (or
/// `ignore-term SECONDS`), the helper binary next to the running server's.
pub fn helper_command(seconds: f64, ignore_term: bool) -> mcp_stdio_core::CommandSpec {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let mut command = mcp_stdio_core::CommandSpec::new(dir.join("fixture-helper"));
    command
        .arg(if ignore_term { "ignore-term" } else { "sleep" })
        .arg(seconds.to_string());
    command
}

/// The `helper` tool's options: every record the run makes is logged as
/// `<log> record ID {json}` (the final one too, even when the handler was
/// dropped), so the tests can read the lifecycle from stderr.
pub fn helper_options(log: &'static str, id: &Id) -> mcp_stdio_core::HelperOptions {
    let sink_id = id.clone();
    let mut options = mcp_stdio_core::HelperOptions::default();
    options
        .call_id(&id.to_string())
        .operation("helper")
        .records(Some(mcp_stdio_core::RecordSink::new(move |record| {
            let json = serde_json::to_string(record).unwrap_or_default();
            log_line!("{log} record {sink_id} {json}");
        })));
    options
}
