//! The system calls the adapter makes besides pipe I/O come from
//! `mcp-stdio-sys`: the command in its own group, the exit status, and
//! [`ProcessGroup`](mcp_stdio_sys::ProcessGroup) for the group's signals, the
//! non-reaping exit observation and the pidfd (Linux) that makes the exit a
//! readiness event.

pub(crate) use mcp_stdio_sys::{command, exit_status};
