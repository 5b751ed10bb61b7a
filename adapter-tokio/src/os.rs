//! The system calls the adapter makes besides pipe I/O come from
//! `mcp-stdio-sys`; only the conversion to tokio's command lives here.

pub(crate) use mcp_stdio_sys::{exit_status, signal_group};

/// A tokio command for a spec: argv, env, cwd, own process group.
pub(crate) fn command(spec: &mcp_stdio_core::CommandSpec) -> tokio::process::Command {
    tokio::process::Command::from(mcp_stdio_sys::command(spec))
}
