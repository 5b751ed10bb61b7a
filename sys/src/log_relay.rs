//! The server's stderr lines reach `tracing` from a thread of their own.
//!
//! A `tracing` subscriber may block: one that writes to a stderr nobody
//! reads stops in `write()` once the pipe is full. The I/O loops must never
//! wait for it (G1), so they hand each forwarded line to this relay with a
//! non-blocking send. One process-wide thread emits them. When its queue is
//! full the line is dropped and counted, and the count is logged with the
//! next line that gets through.
//!
//! Limit: [`RELAY_QUEUE`] lines waiting, each at most the forwarding
//! config's `max_line_bytes` (default 2 KiB): 2 MiB worst case at the
//! defaults, for the whole process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;

/// Lines waiting for the relay thread, for the whole process.
pub const RELAY_QUEUE: usize = 1024;

static RELAY: OnceLock<Option<SyncSender<(u32, String)>>> = OnceLock::new();
/// Dropped since the relay last reported.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Dropped since the process started.
static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Hands one stderr line of server `pid` to the relay thread. Never blocks:
/// a full queue (the subscriber fell behind) drops the line and counts it.
pub fn forward_server_stderr(pid: u32, line: String) {
    let sent = match RELAY.get_or_init(start) {
        Some(tx) => tx.try_send((pid, line)).is_ok(),
        // No thread could be started: logging it here could block.
        None => false,
    };
    if !sent {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        DROPPED_TOTAL.fetch_add(1, Ordering::Relaxed);
    }
}

/// Lines dropped by the relay since the process started (its queue was full).
pub fn server_stderr_lines_dropped() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

fn start() -> Option<SyncSender<(u32, String)>> {
    let (tx, rx) = sync_channel::<(u32, String)>(RELAY_QUEUE);
    let relay = std::thread::Builder::new()
        .name("mcp-stderr-log".to_owned())
        .spawn(move || {
            for (pid, line) in rx {
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    tracing::warn!(
                        target: "mcp_stdio::server_stderr",
                        dropped,
                        "server stderr lines not logged: the log subscriber fell behind"
                    );
                }
                tracing::info!(target: "mcp_stdio::server_stderr", pid, "{line}");
            }
        });
    relay.ok().map(|_| tx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forwarding never blocks, whatever the subscriber does; here there is
    /// none, so every line goes through the thread and none is dropped.
    #[test]
    fn g1_forwarding_a_burst_returns_at_once() {
        let t = std::time::Instant::now();
        for i in 0..RELAY_QUEUE {
            forward_server_stderr(1, format!("line {i}"));
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }
}
