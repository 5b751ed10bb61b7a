//! This process's stderr, written without ever blocking the caller (G1).
//!
//! A host may pipe a server's stderr and never read it. A blocking write
//! there — a `tracing` subscriber's, say — would stop whatever loop emitted
//! the event, and with it the reading of stdin or of a child's stdout. So
//! every write through [`NonBlockingStderr`] goes into one bounded queue
//! ([`STDERR_QUEUE_BYTES`]) drained by one writer thread; when the queue is
//! full the bytes are dropped and counted ([`stderr_dropped_bytes`]), and a
//! note says so once the writer catches up.
//!
//! Use it as the writer of a `tracing-subscriber` `fmt` layer:
//! `.with_writer(NonBlockingStderr::default)`.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Bytes that may wait for the writer thread (1 MiB); past it new writes
/// are dropped and counted.
pub const STDERR_QUEUE_BYTES: usize = 1024 * 1024;

/// A writer to this process's stderr that never blocks: see the module docs.
/// Cheap to create; every instance shares the one queue and writer thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct NonBlockingStderr;

struct Queue {
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Writes handed to the writer thread and finished, for [`drain_stderr`].
    written: u64,
    queued: u64,
}

struct Sink {
    queue: Mutex<Queue>,
    /// Signalled when bytes are queued (to the writer) and when they are
    /// written (to [`drain_stderr`]).
    changed: Condvar,
    dropped: AtomicU64,
    writer_started: bool,
}

impl Sink {
    /// The lock is held only to move a chunk in or out, never across a write.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

static SINK: OnceLock<Sink> = OnceLock::new();

fn sink() -> &'static Sink {
    SINK.get_or_init(|| {
        let writer_started = std::thread::Builder::new()
            .name("mcp-stdio-stderr".into())
            .spawn(write_loop)
            .is_ok();
        Sink {
            queue: Mutex::new(Queue {
                chunks: VecDeque::new(),
                bytes: 0,
                written: 0,
                queued: 0,
            }),
            changed: Condvar::new(),
            dropped: AtomicU64::new(0),
            writer_started,
        }
    })
}

fn write_loop() {
    let s = sink();
    let mut err = io::stderr();
    let mut reported = 0;
    loop {
        let chunk = {
            let mut q = s.lock();
            loop {
                if let Some(c) = q.chunks.pop_front() {
                    q.bytes -= c.len();
                    break c;
                }
                q = s.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let dropped = s.dropped.load(Ordering::Relaxed);
        if dropped > reported {
            let _ = writeln!(
                err,
                "[mcp-stdio: {} bytes of stderr output dropped: stderr was not being read]",
                dropped - reported
            );
            reported = dropped;
        }
        let _ = err.write_all(&chunk);
        s.lock().written += 1;
        s.changed.notify_all();
    }
}

/// Queues `bytes` for stderr without blocking; returns `false` when they were
/// dropped (the queue is full: stderr is not being read).
pub fn write_stderr(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    let s = sink();
    let queued = {
        let mut q = s.lock();
        if !s.writer_started || q.bytes + bytes.len() > STDERR_QUEUE_BYTES {
            false
        } else {
            q.bytes += bytes.len();
            q.queued += 1;
            q.chunks.push_back(bytes.to_vec());
            true
        }
    };
    if queued {
        s.changed.notify_all();
    } else {
        s.dropped.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
    queued
}

/// Bytes dropped so far because stderr was not being read.
pub fn stderr_dropped_bytes() -> u64 {
    sink().dropped.load(Ordering::Relaxed)
}

/// Waits, at most `max`, until everything queued so far is written (before
/// the process exits). Returns whether it was.
pub fn drain_stderr(max: Duration) -> bool {
    let s = sink();
    let end = Instant::now() + max;
    let mut q = s.lock();
    let target = q.queued;
    while q.written < target {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        q = s
            .changed
            .wait_timeout(q, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}

impl Write for NonBlockingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Dropped bytes are counted, never an error: diagnostics must not fail the caller.
        write_stderr(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_queued_and_drained() {
        assert!(write_stderr(b""));
        let mut w = NonBlockingStderr;
        assert_eq!(w.write(b"mcp-stdio-sys test line\n").unwrap(), 24);
        assert!(drain_stderr(Duration::from_secs(10)));
    }
}
