//! Our own stderr, written without ever blocking the caller.
//!
//! A host may pipe the guard's stderr and never read it. A blocking write
//! there would stop the guard's loop, and with it the draining of the
//! server's stdout (G1). So every stderr write goes through a bounded queue
//! to one writer thread; when the queue is full the bytes are dropped and
//! counted, and a note says so once the writer catches up.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

/// Chunks that may wait for the writer thread.
const QUEUE_CHUNKS: usize = 1024;

enum Msg {
    Bytes(Vec<u8>),
    Flush(std::sync::mpsc::Sender<()>),
}

struct Sink {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

fn sink() -> &'static Sink {
    SINK.get_or_init(|| {
        let (tx, rx) = sync_channel::<Msg>(QUEUE_CHUNKS);
        let dropped = Arc::new(AtomicU64::new(0));
        let seen = dropped.clone();
        let spawned = std::thread::Builder::new()
            .name("mcp-stdio-stderr".into())
            .spawn(move || {
                let mut err = std::io::stderr();
                let mut reported = 0;
                for msg in rx {
                    let now = seen.load(Ordering::Relaxed);
                    if now > reported {
                        let _ = writeln!(
                            err,
                            "[mcp-stdio: {} bytes of stderr output dropped: stderr was not being read]",
                            now - reported
                        );
                        reported = now;
                    }
                    match msg {
                        Msg::Bytes(chunk) => {
                            let _ = err.write_all(&chunk);
                        }
                        Msg::Flush(done) => {
                            let _ = err.flush();
                            let _ = done.send(());
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            // Without a writer thread stderr output is dropped and counted.
            let _ = e;
        }
        Sink { tx, dropped }
    })
}

/// Queues bytes for stderr; never blocks. Returns false when they were dropped.
pub(crate) fn write(bytes: &[u8]) -> bool {
    let s = sink();
    match s.tx.try_send(Msg::Bytes(bytes.to_vec())) {
        Ok(()) => true,
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            s.dropped.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            false
        }
    }
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
    sink().dropped.load(Ordering::Relaxed)
}

/// An `io::Write` for `tracing-subscriber` that goes through the queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SinkWriter;

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits (at most `max`) until everything queued so far is written.
pub(crate) fn drain(max: std::time::Duration) {
    let s = sink();
    let t = std::time::Instant::now();
    let (done, wait) = std::sync::mpsc::channel();
    let mut msg = Msg::Flush(done);
    loop {
        match s.tx.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(m)) if t.elapsed() < max => {
                msg = m;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = wait.recv_timeout(max.saturating_sub(t.elapsed()));
}
