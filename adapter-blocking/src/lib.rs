//! # mcp-stdio-blocking
//!
//! The blocking adapter of mcp-stdio, for hosts that cannot use an async
//! runtime: plain threads and [`mio`], and no async runtime anywhere in the
//! dependency tree. It is a synchronous facade over the one driver
//! ([`mcp_stdio_async`], inlined here as [`driver`]) run on its mio runtime
//! ([`runtime::Mio`]): the same loops as the tokio and async-std adapters,
//! every decision the sans-IO core's ([`mcp_stdio_core`]).
//!
//! - [`Client`] spawns an MCP server (no shell, its own process group) and
//!   runs the session on a driver thread of its own: stdout and stderr are
//!   read whatever the application does (G1), requests have deadlines and
//!   real cancels (G6), stderr is budgeted (G10), and the shutdown ends with
//!   a record of what was observed (G11, G12).
//! - [`serve`] runs an MCP server on stdin and stdout, the loop on the
//!   calling thread, handlers on a pool of threads, each request with a
//!   [`CancelToken`] (G7), bounded concurrency and the wire limit (G9).
//! - [`run_helper`] runs a command-line helper on the calling thread, both
//!   streams captured under budgets (G10), its [`CancelToken`] reaching the
//!   helper's group (G7, G11); [`run_helper_with_approval`] adds an approval
//!   step whose deadline the run enforces whatever the [`Approver`] does.
//!
//! The API is the async adapters', names and types, with the waits made
//! blocking: a [`PendingRequest`] is waited for with [`PendingRequest::wait`]
//! (or `wait_timeout`), [`Client::next_incoming`] takes a timeout, and an
//! [`Approver`] answers a plain `bool` on a thread of its own (hence
//! `Clone + 'static`).
//!
//! ## Example: a host on plain threads
//!
//! Spawn a server, call a tool from two threads through handles, follow a
//! long call's progress (an iterator that ends with the call), and shut down.
//!
//! ```no_run
//! use mcp_stdio_blocking::{Client, ClientOptions, CommandSpec};
//! use serde_json::json;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let server = CommandSpec::from_argv(["npx", "-y", "@modelcontextprotocol/server-everything"])
//!         .ok_or("no command")?;
//!     let client = Client::spawn(&server, ClientOptions::default())?;
//!     client.initialize()?;
//!     let workers: Vec<_> = (0..2)
//!         .map(|i| {
//!             let handle = client.handle();
//!             std::thread::spawn(move || handle.call_tool("echo", &json!({"message": format!("from {i}")})))
//!         })
//!         .collect();
//!     for w in workers {
//!         eprintln!("{}", w.join().expect("thread")?.get());
//!     }
//!     let (call, progress) = client
//!         .call_tool_with_progress("trigger-long-running-operation", &json!({"duration": 2, "steps": 4}))?;
//!     for p in progress {
//!         eprintln!("progress {} of {:?}", p.progress, p.total);
//!     }
//!     eprintln!("result: {}", call.wait()?.get());
//!     let record = client.shutdown();
//!     eprintln!("exit {:?}", record.exit_status());
//!     Ok(())
//! }
//! ```
//!
//! A handler thread cannot be aborted: a cancel sets the request's
//! [`CancelToken`] and suppresses its response; the handler looks at the
//! token to stop early, and passes it to [`run_helper`]. Unix-only.
//!
//! [`mio`]: https://docs.rs/mio/1
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(unix)]
mod client;
#[cfg(unix)]
mod helper;
/// The executor every driver of this crate runs on: the driver's mio
/// runtime (a reactor per driver, a thread of its own per `Client`, the
/// calling thread for `serve` and `run_helper`, a pool of threads for
/// handlers).
#[cfg(unix)]
pub mod runtime {
    pub use mcp_stdio_async::Mio;
}
#[cfg(unix)]
mod serve;

#[cfg(unix)]
pub use client::{
    CancelHandle, Client, ClientHandle, IncomingMessage, PendingRequest, ProgressStream, Responder,
};
#[cfg(unix)]
pub use helper::{run_helper, run_helper_with_approval, ApprovalRequest, Approver};
pub use mcp_stdio_core::{LiveSnapshot, Progress, ProgressPoll};
#[cfg(unix)]
pub use serve::{
    serve, serve_io, CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions,
    ServeReport,
};

/// The async driver this crate's [`Client`], [`serve`] and [`run_helper`]
/// run on its mio executor ([`runtime::Mio`]), documented here in full for
/// the same reason as the core.
#[cfg(unix)]
#[doc(inline)]
pub use mcp_stdio_async as driver;
/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;
pub use mcp_stdio_core::CommandSpec;
pub use mcp_stdio_core::Deadline;
pub use mcp_stdio_core::{BasicsError, ServerBasics};
pub use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
pub use mcp_stdio_core::{HelperOptions, HelperOutcome};
pub use mcp_stdio_core::{Negotiated, NegotiatedVia, VersionPolicy};
/// What [`Client::signal_group`] did.
pub use mcp_stdio_sys::Signalled;
