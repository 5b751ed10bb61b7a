//! The system calls the adapter makes besides pipe I/O come from
//! `mcp-stdio-sys` (the group and the exit through [`Leader`](crate::leader::Leader));
//! only the conversion to tokio's command lives here.

/// A tokio command for a spec: argv, env, cwd, own process group.
pub(crate) fn command(spec: &mcp_stdio_core::CommandSpec) -> tokio::process::Command {
    tokio::process::Command::from(mcp_stdio_sys::command(spec))
}
