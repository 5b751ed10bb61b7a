//! The system calls the adapter makes besides pipe I/O come from
//! `mcp-stdio-sys` (the group and the exit through [`Leader`](crate::leader::Leader)); only the conversion to async-process's command lives
//! here (`async_process::unix::CommandExt` has no `process_group`, so the
//! command is built with std and converted; async-process keeps every
//! setting of the std command).

/// An async-process command for a spec: argv, env, cwd, own process group.
pub(crate) fn command(spec: &mcp_stdio_core::CommandSpec) -> async_process::Command {
    async_process::Command::from(mcp_stdio_sys::command(spec))
}
