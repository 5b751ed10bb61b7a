//! `mcp-stdio`: put a hardened stdio transport in front of any MCP server.
//!
//! - `guard`: a drop-in wrapper a host launches instead of the server;
//! - `check`: the release-gate battery against any server;
//! - `verify`: offline verification of a guard's audit log.
//! - `pin`: review and accept the tool definitions `guard --pin` pinned.
//! - `ps`, `logs`, `top`: the running guards of this user, a server's
//!   stderr, and a live view of them.
//!
//! stdout belongs to the protocol (G13): `guard` writes only protocol
//! messages there; everything a person reads goes to stderr, except the
//! reports of `check` and `verify`, which are their output.
#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod config;
mod diagnose;
#[cfg(unix)]
mod fleet;
mod guard;
mod pin;
mod stderr_sink;
#[cfg(unix)]
mod top;
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
    Guard(Box<guard::GuardArgs>),
    /// Run the release-gate battery against an MCP server (or the built-in misbehaving one):
    /// a PASS/WARN/FAIL table with the measured value on each row; `--json` for machines.
    Check(check::CheckArgs),
    /// Verify a hash-chained audit log offline: entries and last hash, or the first bad line.
    Verify(verify::VerifyArgs),
    /// Review and accept the tool definitions `guard --pin FILE` pinned and saw change.
    Pin(pin::PinArgs),
    /// List the running guards of this user: name, state, calls, errors, latency, memory, CPU.
    #[cfg(unix)]
    Ps(fleet::PsArgs),
    /// Print a guarded server's kept stderr (by its name or its guard's pid); -f follows it.
    #[cfg(unix)]
    Logs(fleet::LogsArgs),
    /// Watch the running guards live, full screen: sort by CPU, memory, calls, errors; Enter
    /// shows a server's stderr; q quits.
    #[cfg(unix)]
    Top(top::TopArgs),
    /// The deliberately misbehaving MCP server that `check` runs when given no command.
    #[command(hide = true)]
    BuiltinServer(check::builtin::BuiltinArgs),
}

/// Installs the `tracing` subscriber on our non-blocking stderr.
///
/// `MCP_STDIO_LOG` (an `EnvFilter`) wins when set; otherwise WARN and up,
/// or only errors when `quiet` (`check -q`). Colour only on a terminal,
/// and never under `NO_COLOR`.
fn init_tracing(quiet: bool) {
    let default = if quiet { "error" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCP_STDIO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = use_color(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| stderr_sink::SinkWriter)
        .with_ansi(ansi)
        .with_target(false)
        .init();
}

/// Colour on stderr: only on a terminal, and not when `NO_COLOR` is set to
/// anything but the empty string (<https://no-color.org>).
fn use_color(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime can be built")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(matches!(&cli.command, Command::Check(a) if a.quiet));
    match cli.command {
        Command::Guard(args) => {
            let rt = runtime();
            let code = rt.block_on(guard::run(*args));
            // Reading our stdin happens on a blocking thread that may never
            // return (the host keeps the pipe open): do not wait for it.
            rt.shutdown_timeout(std::time::Duration::from_millis(100));
            stderr_sink::drain(std::time::Duration::from_secs(1));
            code
        }
        Command::Check(args) => runtime().block_on(check::run(args)),
        Command::Verify(args) => verify::run(&args),
        Command::Pin(args) => pin::run(&args),
        #[cfg(unix)]
        Command::Ps(args) => fleet::ps(&args),
        #[cfg(unix)]
        Command::Logs(args) => fleet::logs(&args),
        #[cfg(unix)]
        Command::Top(args) => top::top(&args),
        Command::BuiltinServer(args) => check::builtin::run(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_color(true, None));
        assert!(use_color(true, Some(OsStr::new(""))));
        assert!(!use_color(true, Some(OsStr::new("1"))));
        assert!(!use_color(false, None));
        assert!(!use_color(false, Some(OsStr::new(""))));
    }
}
