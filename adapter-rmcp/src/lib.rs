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
#![forbid(unsafe_code)]

mod client;
mod server;

pub use client::{ClientTransport, SessionHandle, TransportError, MAX_PENDING_SERVER_REQUESTS};
pub use mcp_stdio_core::serve::{ServeEnd, ServeOptions, ServeReport};
pub use mcp_stdio_tokio::{ClientOptions, CommandSpec, SessionRecord};
pub use server::{ServerHandle, ServerReport, ServerTransport, MAX_QUEUED_FOR_RMCP};
