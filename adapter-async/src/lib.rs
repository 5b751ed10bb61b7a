//! # mcp-stdio-async
//!
//! The async driver of mcp-stdio, written once over a small [`Runtime`]
//! trait (quinn's shape). `mcp-stdio-tokio` and `mcp-stdio-async-std` are
//! this crate plus a few dozen lines that supply their runtime; an
//! application uses one of them, not this crate.
//!
//! Every decision comes from the sans-IO core ([`mcp_stdio_core`]). What
//! is here is the waiting: which descriptor is ready, which timer fired,
//! which command came in.
//!
//! ## The run-loop rule
//!
//! Every loop here is one `poll` over one core machine, which takes one
//! input (`handle_input`) and gives one output stream (`poll_output`, ending
//! with `Timeout(next)`). Each turn is:
//!
//! 1. read the clock once;
//! 2. poll every input in a fixed order — cancels first, then the child's
//!    exit, then the pipes, then the application's commands, then the timer
//!    — feeding whatever is ready to the machine with that `now`, as it came
//!    (the machine, not the loop, decides what an error, an end of stream,
//!    a zero-byte write or a full pipe means, and takes an exit before the
//!    end of stream it caused);
//! 3. after each input, drain the outputs: act on each action, write the
//!    bytes offered as far as the pipe takes them now (a pending write is
//!    reported as `WouldBlock` and the machine stops offering until the next
//!    turn says the pipe may be writable), keep the next deadline for the
//!    one timer;
//! 4. if nothing was ready, return `Pending`: every input registered its
//!    waker on the way.
//!
//! The loop never waits for a write, a flush or a lock while it could read
//! (G1).
//!
//! ## Example: code generic over the runtime
//!
//! A library that should run on whatever runtime its user has takes the
//! runtime as a parameter; `mcp_stdio_tokio::runtime::Tokio` and
//! `mcp_stdio_async_std::runtime::AsyncStd` fill it in.
//!
//! ```no_run
//! use mcp_stdio_async::{Client, Runtime};
//! use mcp_stdio_core::{ClientOptions, CommandSpec};
//!
//! /// The server's tools, as its `tools/list` answered.
//! async fn tools_of<R: Runtime>(server: &CommandSpec) -> Result<String, Box<dyn std::error::Error>> {
//!     let client = Client::<R>::spawn(server, ClientOptions::default())?;
//!     client.initialize().await?;
//!     let tools = client.list_tools(None).await?;
//!     client.shutdown().await;
//!     Ok(tools.get().to_owned())
//! }
//! ```
//!
//! ## The runtime trait
//!
//! [`Runtime`] gives a reactor for non-blocking descriptors
//! ([`Readiness`]), re-armable timers ([`Timer`]), and a place to run a
//! driver ([`Runtime::spawn_driver`]: tokio's task, or async-std's thread of
//! its own). The `read`, `write` and the non-reaping look at an exit are the
//! driver's own system calls (`mcp-stdio-sys`), so every runtime reads and
//! writes alike.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "async-io")]
mod async_io_rt;
mod cancel;
mod client;
mod helper;
mod io;
pub mod leader;
#[cfg(feature = "mio")]
mod mio_rt;
mod pipe;
mod runtime;
mod serve;
pub mod stdio;
pub mod surface;

/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;

#[cfg(feature = "async-io")]
pub use async_io_rt::{spawn_thread, AsyncIo};
pub use cancel::{CancelSignal, Cancelled};
pub use client::{
    CancelHandle, Client, ClientHandle, IncomingMessage, PendingRequest, ProgressStream, Responder,
};
pub use helper::{
    run_helper, run_helper_here, run_helper_with_approval, ApprovalRequest, Approver,
};
pub use io::{FuturesIo, Sink, Source};
#[cfg(feature = "mio")]
pub use mio_rt::{wait, Mio, MioFd, MioTimer};
#[cfg(unix)]
pub use pipe::Listener;
pub use pipe::Pipe;
pub use runtime::{BoxFuture, DeadlineTimer, Interest, IoOp, IoPoll, Readiness, Runtime, Timer};
pub use serve::{
    serve, serve_dispatch, serve_io, CancelToken, Dispatch, Handler, HandlerResult, RequestContext,
    ServeEnd, ServeLifecycle, ServeOptions, ServeReport,
};
