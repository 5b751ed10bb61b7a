//! # mcp-stdio-async-std
//!
//! The async-std adapter of mcp-stdio: the driver of `mcp-stdio-async`
//! ([`driver`]), written once over a runtime trait, on async-io's reactor and
//! timers ([`runtime::AsyncStd`]). Every decision comes from the sans-IO core
//! ([`mcp_stdio_core`]).
//!
//! - [`Client`] spawns an MCP server (never through a shell, in its own
//!   process group) and runs the session: stdout and stderr are read for the
//!   whole life of the process whatever the application does (G1), requests
//!   have deadlines and real cancels (G6), stderr is budgeted (G10), and the
//!   shutdown sequence ends with a record of what was observed (G11, G12).
//! - [`serve`] runs an MCP server on this process's stdin and stdout, with a
//!   task and a cancellation token per request (G7), bounded concurrency and
//!   the outgoing wire limit (G9); [`serve_io`] does the same over any
//!   `futures-io` reader and writer.
//! - [`run_helper`] runs a command-line helper from inside a tool (own
//!   process group, stdin from `/dev/null`) with both streams captured under
//!   budgets and drained to EOF (G10), and a cancel that reaches the process
//!   group: `SIGTERM`, grace, `SIGKILL` (G7, G11); the outcome has the exit
//!   status actually observed and the call record (G12).
//!   [`run_helper_with_approval`] adds an approval step whose deadline the
//!   run enforces, whatever the [`Approver`] does.
//!
//! The same API, with the same names and types, exists in `mcp-stdio-tokio`
//! and `mcp-stdio-blocking`: switching adapters is a change of import.
//!
//! ## Example: a host
//!
//! Spawn a server, list its tools, call one while its progress comes in on
//! a stream of its own, and shut down (the record says what was observed).
//!
//! ```no_run
//! use mcp_stdio_async_std::{Client, ClientOptions, CommandSpec};
//! use serde_json::json;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     async_std::task::block_on(async {
//!         let server = CommandSpec::from_argv(["npx", "-y", "@modelcontextprotocol/server-everything"])
//!             .ok_or("no command")?;
//!         let client = Client::spawn(&server, ClientOptions::default())?;
//!         client.initialize().await?;
//!         eprintln!("tools: {}", client.list_tools(None).await?.get());
//!         let arguments = json!({"duration": 2, "steps": 4});
//!         let (call, mut progress) = client
//!             .call_tool_with_progress("trigger-long-running-operation", &arguments)
//!             .await?;
//!         while let Some(p) = progress.next().await {
//!             eprintln!("progress {} of {:?}", p.progress, p.total);
//!         }
//!         eprintln!("result: {}", call.await?.get());
//!         let record = client.shutdown().await;
//!         eprintln!("exit {:?}", record.exit_status());
//!         Ok(())
//!     })
//! }
//! ```
//!
//! ## async-std, smol and other executors
//!
//! async-std is discontinued upstream in favour of [smol]. This crate is
//! built on the foundations the two share — `async-io` for the pipes and
//! timers, `async-channel` and `event-listener` for the queues — and uses
//! async-std only to spawn request handlers (`async_std::task::spawn`). Its
//! futures are executor-agnostic, so an application running on smol
//! (`smol::block_on`, `smol::Executor`) or on `futures_lite::future::block_on`
//! uses it unchanged; the crate's tests include ones that run under
//! `smol::block_on`.
//!
//! Each [`Client`]'s driver, and each [`run_helper`]'s owner, runs on a
//! thread of its own (`async_io::block_on`, on the process's one async-io
//! reactor), not on the thread that awaits it: an application that sleeps,
//! blocks or stops polling does not pause it, and neither does code that
//! blocks every executor thread. A thread, not a task: the executor moved a
//! driver task between its worker threads from one wake-up to the next,
//! about a third of a round trip's latency. Dropping a `run_helper` future
//! (a cancelled handler) cancels the run; its owner finishes the shutdown
//! and writes the final record.
//!
//! [smol]: https://docs.rs/smol
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod runtime;

pub use mcp_stdio_async::surface::*;
mcp_stdio_async::runtime_api!(
    runtime::AsyncStd,
    "On async-std: the driver and the helper's owner each run on a thread of their own (async-io's `block_on`); works from any thread, inside or outside an executor.",
    io: driver::FuturesIo,
    futures_lite::AsyncRead,
    futures_lite::AsyncWrite
);

/// The async driver this crate runs on its runtime, documented here in full (as the core).
#[doc(inline)]
pub use mcp_stdio_async as driver;
/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;
