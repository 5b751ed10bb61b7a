//! `mcp-stdio`: put a hardened stdio transport in front of any MCP server.
//!
//! - `guard`: a drop-in wrapper a host launches instead of the server;
//! - `check`: the release-gate battery against any server;
//! - `verify`: offline verification of a guard's audit log.
//!
//! stdout belongs to the protocol (G13): `guard` writes only protocol
//! messages there; everything a person reads goes to stderr, except the
//! reports of `check` and `verify`, which are their output.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod config;
mod guard;
mod stderr_sink;
mod verify;

/// Hardened stdio transport for MCP servers.
#[derive(Debug, Parser)]
#[command(name = "mcp-stdio", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an MCP server behind the guard: wire limits both ways, stdout always drained,
    /// bounded stderr, cancel enforced, orderly shutdown, optional audit log.
    Guard(guard::GuardArgs),
    /// Run the release-gate battery against an MCP server (or the built-in misbehaving one):
    /// a PASS/WARN/FAIL table with the measured value on each row; `--json` for machines.
    Check(check::CheckArgs),
    /// Verify a hash-chained audit log offline: entries and last hash, or the first bad line.
    Verify(verify::VerifyArgs),
    /// The deliberately misbehaving MCP server that `check` runs when given no command.
    #[command(hide = true)]
    BuiltinServer(check::builtin::BuiltinArgs),
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCP_STDIO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| stderr_sink::SinkWriter)
        .with_target(false)
        .init();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime can be built")
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match cli.command {
        Command::Guard(args) => {
            let rt = runtime();
            let code = rt.block_on(guard::run(args));
            // Reading our stdin happens on a blocking thread that may never
            // return (the host keeps the pipe open): do not wait for it.
            rt.shutdown_timeout(std::time::Duration::from_millis(100));
            guard::restore_stdio();
            stderr_sink::drain(std::time::Duration::from_secs(1));
            code
        }
        Command::Check(args) => runtime().block_on(check::run(args)),
        Command::Verify(args) => verify::run(&args),
        Command::BuiltinServer(args) => check::builtin::run(&args),
    }
}
