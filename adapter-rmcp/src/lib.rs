//! rmcp, the official Rust MCP SDK, over mcp-stdio's hardened stdio.
//!
//! [`ClientTransport`] spawns an MCP server under [`mcp_stdio_tokio::Client`]
//! and is usable wherever rmcp takes its own `TokioChildProcess`:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_stdio_rmcp::{ClientOptions, ClientTransport, CommandSpec};
//! use rmcp::ServiceExt;
//!
//! let transport = ClientTransport::spawn(&CommandSpec::new("my-server"), ClientOptions::default())?;
//! let mut session = transport.session();
//! let client = ().serve(transport).await?;
//! let tools = client.list_all_tools().await?;
//! client.cancel().await?;
//! let record = session.record().await; // stderr tail, exit status, counters
//! # let _ = (tools, record);
//! # Ok(())
//! # }
//! ```
//!
//! What it brings over `TokioChildProcess`: the wire limit with id recovery
//! (an oversized response reaches rmcp as a JSON-RPC error for its id, so
//! that one request fails at once), a bounded stderr budget with a kept tail,
//! the server in its own process group, the shutdown sequence stdin close →
//! `SIGTERM` → `SIGKILL` to the group, and the session record.
//!
//! [`ServerTransport`] serves an rmcp server on this process's stdin and
//! stdout through the same loop as `mcp_stdio_tokio::serve` (the core's
//! [`ServeLifecycle`] decides, rmcp
//! stands where the handlers stand):
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_stdio_rmcp::{ServeOptions, ServerTransport};
//! use rmcp::ServiceExt;
//!
//! #[derive(Clone)]
//! struct MyServer;
//! impl rmcp::ServerHandler for MyServer {}
//!
//! let mut options = ServeOptions::default();
//! options.framer_mut().max_frame(4 * 1024 * 1024);
//! let transport = ServerTransport::stdio_with(&options)?;
//! let mut handle = transport.handle();
//! MyServer.serve(transport).await?.waiting().await?;
//! let report = handle.report().await; // how it ended, the session's counters
//! # let _ = report;
//! # Ok(())
//! # }
//! ```
//!
//! What it brings over rmcp's `stdio()`: stdin is read while stdout is
//! blocked and what waits for stdout is bounded (G1); a response over the
//! wire limit becomes a JSON-RPC error for its id, a notification over it is
//! dropped and counted (G9); a cancel reaches rmcp's handler and suppresses
//! the response (G7); stdin EOF closes the transport for rmcp and drains with
//! a deadline. Server→client requests fail at once with
//! [`TransportError::ServerRequestUnsupported`].
//!
//! [`mcp_stdio_tokio::Client`]: https://docs.rs/mcp-stdio-tokio/latest/mcp_stdio_tokio/struct.Client.html
//! [`ServeLifecycle`]: https://docs.rs/mcp-stdio-core/latest/mcp_stdio_core/struct.ServeLifecycle.html
#![forbid(unsafe_code)]

mod client;
mod server;

pub use client::{ClientTransport, SessionHandle, TransportError, MAX_PENDING_SERVER_REQUESTS};
// The options and the serve report are documented in their own crates, where the links of
// their docs resolve; inlined here they would link to pages this crate does not have.
#[doc(no_inline)]
pub use mcp_stdio_core::{ServeEnd, ServeOptions, ServeReport};
#[doc(no_inline)]
pub use mcp_stdio_tokio::ClientOptions;
pub use mcp_stdio_tokio::{CommandSpec, SessionRecord};
pub use server::{ServerHandle, ServerReport, ServerTransport, MAX_QUEUED_FOR_RMCP};
