//! Our own stderr, written without ever blocking the caller.
//!
//! A host may pipe the guard's stderr and never read it. A blocking write
//! there would stop the guard's loop, and with it the draining of the
//! server's stdout (G1). So every stderr write goes through
//! `mcp_stdio_sys::NonBlockingStderr`: one bounded queue
//! (`STDERR_QUEUE_BYTES`) to one writer thread; when the queue is full the
//! bytes are dropped and counted, and a note says so once the writer
//! catches up.

pub(crate) use mcp_stdio_sys::NonBlockingStderr as SinkWriter;

/// Queues bytes for stderr; never blocks. Returns false when they were dropped.
pub(crate) fn write(bytes: &[u8]) -> bool {
    mcp_stdio_sys::write_stderr(bytes)
}

/// Queues one line for stderr.
pub(crate) fn line(text: &str) {
    let mut b = Vec::with_capacity(text.len() + 1);
    b.extend_from_slice(text.as_bytes());
    b.push(b'\n');
    write(&b);
}

/// Bytes dropped so far.
pub(crate) fn dropped() -> u64 {
    mcp_stdio_sys::stderr_dropped_bytes()
}

/// Waits (at most `max`) until everything queued so far is written.
pub(crate) fn drain(max: std::time::Duration) {
    mcp_stdio_sys::drain_stderr(max);
}
