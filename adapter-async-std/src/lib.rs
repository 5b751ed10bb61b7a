//! # mcp-stdio-async-std
//!
//! The async-std adapter of mcp-stdio: every decision comes from the sans-IO
//! core ([`mcp_stdio_core`]); this crate only does the pipe I/O, the timers
//! and the process management, on async-std's executor over `async-process`
//! and `async-io`.
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
//! ## async-std, smol and other executors
//!
//! async-std is discontinued upstream in favour of [smol]. This crate is
//! built on the foundations the two share — `async-process` for children,
//! `async-io` for the pipes and timers, `async-channel` and `event-listener`
//! for the tasks' queues — and uses async-std only to spawn its tasks
//! (`async_std::task::spawn`, which runs them on async-std's own global
//! executor threads) and for this process's stdin and stdout in [`serve`].
//! Its futures are executor-agnostic, so an application running on smol
//! (`smol::block_on`, `smol::Executor`) or on `futures_lite::future::block_on`
//! uses it unchanged; the crate's tests include ones that run under
//! `smol::block_on`.
//!
//! Each [`Client`]'s driver runs on a thread of its own (`async_io::block_on`,
//! on the process's one async-io reactor), its exit watcher on async-std's
//! executor threads, neither on the thread that awaits the [`Client`]: an
//! application that sleeps, blocks or stops polling does not pause them, and
//! neither does code that blocks every executor thread. A thread, not a task:
//! the executor moved the driver task between its worker threads from one
//! wake-up to the next, about a third of a round trip's latency.
//!
//! [`run_helper`] spawns no task at all: it is one future that owns the
//! child, both pipes and the timer, and reads the pipes whenever it is
//! polled — that is, for as long as the tool handler awaits it. Dropping it
//! (a cancelled handler) kills the helper's process group at once.
//!
//! [smol]: https://docs.rs/smol
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod helper;
pub mod runtime;
mod serve;

pub use mcp_stdio_async::{CancelHandle, IncomingMessage, PendingRequest, Responder};

/// A spawned MCP server and its session, its driver on a thread of its own
/// (see [`runtime::AsyncStd`] and [`mcp_stdio_async::Client`]). Works from
/// any thread, inside or outside an executor (async-std, smol or none).
pub type Client = mcp_stdio_async::Client<runtime::AsyncStd>;
pub use helper::{run_helper, run_helper_with_approval, ApprovalRequest, Approver};
pub use serve::{
    serve, serve_io, CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions,
    ServeReport,
};

/// The async driver this crate runs on its runtime, documented here in full (as the core).
#[doc(inline)]
pub use mcp_stdio_async as driver;
/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;
pub use mcp_stdio_core::basics::{BasicsError, ServerBasics};
pub use mcp_stdio_core::client::Deadline;
pub use mcp_stdio_core::helper::{HelperConfig, HelperOptions, HelperOutcome};
pub use mcp_stdio_core::host::{
    ClientOptions, HostConfig, InitializeError, RequestError, SessionRecord,
};
pub use mcp_stdio_core::CommandSpec;
/// What [`Client::signal_group`] did.
pub use mcp_stdio_sys::Signalled;
