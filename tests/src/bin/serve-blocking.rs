//! `serve-blocking` — an MCP server made with the blocking adapter's `serve`, for the
//! interop tests: a client we did not write (the Python `mcp` package's stdio
//! client, `tests/interop/py_client.py`) drives it.
//!
//! ```text
//! USAGE: serve-blocking        (no arguments; MCP on stdin/stdout)
//!
//!   initialize, ping,  answered by `serve` itself from the options (`serve_tools::options`):
//!   tools/list         the client's protocolVersion when supported (else the latest), capabilities
//!                      {tools:{}}, serverInfo {name:"mcp-stdio-serve-blocking", version}, instructions;
//!                      tools echo, slow, helper, whoami, ticker, revision; -32601 for other methods,
//!                      -32602 for other tools; server/discover and 2026-07-28 requests too
//!   tools/call         the handler:
//!     echo {text}      content [{type:"text", text}]
//!     slow {seconds}   waits `seconds` or until its cancel token fires, whichever is first
//!     helper {seconds} runs `fixture-helper sleep seconds` under `run_helper`
//!     whoami {}        the client's initialize (or the request's 2026 `_meta`) as the handler sees it
//!                      (`RequestContext::client`)
//!     ticker {check_every?}  notifications/progress every ms until cancelled (the cancel looked at
//!                      every `check_every` ticks), one more after it saw the cancel: `serve` drops it
//!     revision {}      the request's protocol version as the handler sees it (`RequestContext::protocol_version`)
//!                      bad arguments: -32602
//! ```
//!
//! stdout carries protocol messages only (G13); every diagnostic goes to stderr,
//! one line each, prefixed `serve-blocking:`. The tests read these lines:
//!
//! - `serve-blocking: pid N serving on stdio` at start;
//! - `serve-blocking: slow ID started`;
//! - `serve-blocking: cancelled ID after D` when a handler's cancel token fired
//!   (logged when the handler returns: a handler thread cannot be aborted, so
//!   `slow` waits on its token with `CancelToken::wait_timeout` and returns
//!   as soon as it fires; the log lives in a drop guard, as in `serve-tokio`);
//! - `serve-blocking: stdin closed; exiting after D; report {json}` at the end.

use std::process::ExitCode;
use std::time::Duration;

use mcp_stdio_blocking::{serve, Handler, HandlerResult, RequestContext};
use mcp_stdio_core::{to_raw, ErrorObject, Notification, Request};
use mcp_stdio_tests::serve_tools::{
    cancelled, helper_command, helper_options, options, parse_tool_call, revision, text_result,
    tick, whoami, CancelWatch, ToolCall, MAX_TICKS, TICK_INTERVAL,
};
use serde_json::Value;

/// The prefix of every stderr line.
const LOG: &str = "serve-blocking:";

/// The server: stateless, every request is independent.
struct InteropServer;

impl Handler for InteropServer {
    fn call(&self, request: Request, ctx: RequestContext) -> HandlerResult {
        // `serve` answered initialize, ping, tools/list and every unknown
        // method or tool from `options`: only calls of our tools get here.
        let result = tools_call(parse_tool_call(&request)?, &ctx)?;
        Ok(to_raw(&result).expect("a serde_json::Value always serializes"))
    }

    fn notification(&self, notification: Notification) {
        mcp_stdio_tests::log_line!("{LOG} notification {}", notification.method);
    }
}

fn tools_call(call: ToolCall, ctx: &RequestContext) -> Result<Value, ErrorObject> {
    match call {
        ToolCall::Echo(text) => Ok(text_result(&text)),
        ToolCall::WhoAmI => Ok(text_result(&whoami(ctx.client()))),
        ToolCall::Revision => Ok(text_result(&revision(ctx.protocol_version()))),
        ToolCall::Ticker { token, check_every } => {
            for n in 1..=MAX_TICKS {
                ctx.notify("notifications/progress", Some(tick(&token, n)));
                std::thread::sleep(TICK_INTERVAL);
                if n % check_every == 0 && ctx.cancel_token().is_cancelled() {
                    // One more after the cancel was seen: `serve` must drop it (G7).
                    ctx.notify("notifications/progress", Some(tick(&token, n + 1)));
                    return Err(cancelled());
                }
            }
            Ok(text_result("ticked"))
        }
        ToolCall::Slow(seconds) => {
            let token = ctx.cancel_token().clone();
            let watch = CancelWatch::start(LOG, ctx.id().clone(), move || token.is_cancelled());
            // A handler thread cannot be aborted: it waits on its token, so a
            // cancel ends the wait at once.
            if ctx
                .cancel_token()
                .wait_timeout(Duration::from_secs_f64(seconds))
            {
                drop(watch);
                Err(cancelled())
            } else {
                Ok(text_result(&format!("slept {seconds} s")))
            }
        }
        ToolCall::Helper(seconds, ignore_term) => {
            // The run's owner outlives this handler: a cancel that aborts the
            // handler still ends the helper through the supervisor path, and
            // the final record is logged by the sink.
            let outcome = mcp_stdio_blocking::run_helper(
                &helper_command(seconds, ignore_term),
                &helper_options(LOG, ctx.id()),
                ctx.cancel_token(),
            );
            Ok(text_result(&format!("helper {}", outcome.record.state())))
        }
    }
}

fn main() -> ExitCode {
    let started = mcp_stdio_tests::serve_tools::start(LOG);
    let result = serve(options("mcp-stdio-serve-blocking"), InteropServer);
    mcp_stdio_tests::serve_tools::finish(LOG, started, result)
}
