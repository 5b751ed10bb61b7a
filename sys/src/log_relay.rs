//! The I/O loops' diagnostics reach `tracing` from a thread of their own.
//!
//! A `tracing` subscriber may block: one that writes to a stderr nobody
//! reads stops in `write()` once the pipe is full. The I/O loops (the
//! `Client` drivers and the `serve` loops) must never wait for it (G1), so
//! they hand each forwarded server stderr line, and each event of their own,
//! to this relay with a non-blocking send. One
//! process-wide thread emits them. When its queue is full the note is
//! dropped and counted, and the count is logged with the next note that
//! gets through.
//!
//! Limit: [`RELAY_QUEUE`] notes waiting, each at most the forwarding
//! config's `max_line_bytes` (default 2 KiB) or one error message: about
//! 2 MiB worst case at the defaults, for the whole process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;

/// Lines waiting for the relay thread, for the whole process.
pub const RELAY_QUEUE: usize = 1024;

/// The `tracing` target of the forwarded server stderr lines, so they can be
/// filtered on their own (`RUST_LOG=info,mcp_stdio::server_stderr=off`).
/// Each line is one INFO event with the server's `pid` as a field.
pub const SERVER_STDERR_TARGET: &str = "mcp_stdio::server_stderr";

/// What waits for the relay thread.
enum Note {
    /// A line of server `pid`'s stderr.
    Line(u32, String),
    /// An event of a `serve` loop (this process is the server).
    Serve {
        level: Level,
        message: &'static str,
        detail: Option<String>,
    },
    /// An event of an I/O loop about server `pid`.
    Event {
        pid: u32,
        level: Level,
        message: &'static str,
        error: Option<String>,
    },
}

/// The level of an I/O loop's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Level {
    /// Routine trouble (a peer closed its stdin).
    Debug,
    /// Something the operator should know (a `wait` that failed).
    Warn,
    /// The loop itself is in trouble (polling failed).
    Error,
}

static RELAY: OnceLock<Option<SyncSender<Note>>> = OnceLock::new();
/// Dropped since the relay last reported.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Dropped since the process started.
static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Hands one stderr line of server `pid` to the relay thread, which logs it
/// at INFO under [`SERVER_STDERR_TARGET`]. Never blocks: a full queue (the
/// subscriber fell behind) drops the line and counts it.
pub fn forward_server_stderr(pid: u32, line: String) {
    relay(Note::Line(pid, line));
}

/// Logs an I/O loop's event about server `pid` from the relay thread.
/// Never blocks; dropped and counted when the relay's queue is full.
pub fn event(pid: u32, level: Level, message: &'static str, error: Option<String>) {
    relay(Note::Event {
        pid,
        level,
        message,
        error,
    });
}

/// Logs a `serve` loop's event from the relay thread. Never blocks; dropped
/// and counted when the relay's queue is full.
pub fn serve_event(level: Level, message: &'static str, detail: Option<String>) {
    relay(Note::Serve {
        level,
        message,
        detail,
    });
}

fn relay(note: Note) {
    let sent = match RELAY.get_or_init(start) {
        Some(tx) => tx.try_send(note).is_ok(),
        // No thread could be started: logging it here could block.
        None => false,
    };
    if !sent {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        DROPPED_TOTAL.fetch_add(1, Ordering::Relaxed);
    }
}

/// Notes dropped by the relay since the process started (its queue was full).
pub fn server_stderr_lines_dropped() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

fn start() -> Option<SyncSender<Note>> {
    let (tx, rx) = sync_channel::<Note>(RELAY_QUEUE);
    let relay = std::thread::Builder::new()
        .name("mcp-stderr-log".to_owned())
        .spawn(move || {
            for note in rx {
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    tracing::warn!(
                        dropped,
                        "log notes not emitted: the log subscriber fell behind"
                    );
                }
                emit(note);
            }
        });
    relay.ok().map(|_| tx)
}

fn emit(note: Note) {
    match note {
        Note::Line(pid, line) => {
            tracing::info!(target: SERVER_STDERR_TARGET, pid, "{line}");
        }
        Note::Serve {
            level,
            message,
            detail,
        } => {
            let detail = detail.unwrap_or_default();
            match level {
                Level::Debug => tracing::debug!(detail, "{message}"),
                Level::Warn => tracing::warn!(detail, "{message}"),
                Level::Error => tracing::error!(detail, "{message}"),
            }
        }
        Note::Event {
            pid,
            level,
            message,
            error,
        } => {
            let error = error.unwrap_or_default();
            match level {
                Level::Debug => tracing::debug!(pid, error, "{message}"),
                Level::Warn => tracing::warn!(pid, error, "{message}"),
                Level::Error => tracing::error!(pid, error, "{message}"),
            }
        }
    }
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
