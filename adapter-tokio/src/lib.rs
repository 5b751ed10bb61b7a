//! # mcp-stdio-tokio
//!
//! The tokio adapter of mcp-stdio: the driver of `mcp-stdio-async`
//! ([`driver`]), written once over a runtime trait, on tokio's reactor,
//! timers and tasks ([`runtime::Tokio`]). Every decision comes from the
//! sans-IO core ([`mcp_stdio_core`]).
//!
//! - [`Client`] spawns an MCP server (never through a shell, in its own
//!   process group) and runs the session: stdout and stderr are read for the
//!   whole life of the process whatever the application does (G1), requests
//!   have deadlines and real cancels (G6), stderr is budgeted (G10), and the
//!   shutdown sequence ends with a record of what was observed (G11, G12).
//! - [`serve`] runs an MCP server on this process's stdin and stdout, with a
//!   task and a cancellation token per request (G7), bounded concurrency and
//!   the outgoing wire limit (G9).
//! - [`run_helper`] runs a command-line helper from inside a tool with both
//!   streams captured under budgets and a cancel that reaches the process
//!   group.
//!
//! The same API, with the same names and types, exists in
//! `mcp-stdio-async-std` and `mcp-stdio-blocking`.
//!
//! ## Example: a host
//!
//! Spawn a server, list its tools, call one while its progress comes in on
//! a stream of its own, look at the live stderr tail, and shut down (the
//! record says what was observed). A [`ClientHandle`] (`client.handle()`)
//! does the same from other tasks.
//!
//! ```no_run
//! use mcp_stdio_tokio::{Client, ClientOptions, CommandSpec};
//! use serde_json::json;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let server = CommandSpec::from_argv(["npx", "-y", "@modelcontextprotocol/server-everything"])
//!         .ok_or("no command")?;
//!     let client = Client::spawn(&server, ClientOptions::default())?;
//!     let negotiated = client.initialize().await?;
//!     eprintln!("protocol {}", negotiated.protocol_version);
//!     eprintln!("tools: {}", client.list_tools(None).await?.get());
//!
//!     let arguments = json!({"duration": 2, "steps": 4});
//!     let (call, mut progress) = client
//!         .call_tool_with_progress("trigger-long-running-operation", &arguments)
//!         .await?;
//!     while let Some(p) = progress.next().await {
//!         eprintln!("progress {} of {:?}", p.progress, p.total);
//!     }
//!     eprintln!("result: {}", call.await?.get());
//!
//!     if let Some(live) = client.snapshot(1024).await {
//!         eprintln!("stderr so far ({} bytes): {}", live.stderr_seen, live.stderr_tail);
//!     }
//!     let record = client.shutdown().await;
//!     eprintln!("exit {:?}, ended {:?}", record.exit_status(), record.process.ended_by);
//!     Ok(())
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod runtime;

/// A spawned child that leads its process group, on tokio (see
/// [`mcp_stdio_async::leader`]): its exit observed without reaping, its group
/// signalled only while the id is still ours.
pub mod leader {
    pub use mcp_stdio_async::leader::{LeaderState, ProcessGroup, Signalled, EXIT_POLL_TICK};

    /// The one owner of a spawned child and its group, on tokio.
    pub type Leader = mcp_stdio_async::leader::Leader<crate::runtime::Tokio>;
}

pub use mcp_stdio_async::surface::*;
mcp_stdio_async::runtime_api!(
    runtime::Tokio,
    "On tokio: the driver and the helper's owner are tasks of the runtime the call was made in (call inside a tokio runtime).",
    io: runtime::TokioIo,
    tokio::io::AsyncRead,
    tokio::io::AsyncWrite
);

/// The async driver this crate runs on its runtime, documented here in full (as the core).
#[doc(inline)]
pub use mcp_stdio_async as driver;
/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;
