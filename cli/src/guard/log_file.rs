//! `guard --log-file PATH`: the session's log copy (the server's whole
//! stderr and the guard's notes, timestamped lines made by the core) on
//! disk, size-rotated: `PATH`, then `PATH.1` … `PATH.<count-1>`, each at
//! most `--log-file-max` bytes.
//!
//! The loop never waits for the disk (G1): lines go into one bounded queue
//! ([`LOG_QUEUE_BYTES`]) drained by a writer thread of the file's own. When
//! the queue is full (a slow disk) or a write fails (a full disk), the bytes
//! are dropped and counted, and the writer marks the place in the file once
//! it writes again.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Bytes that may wait for the log's writer thread; past it lines are
/// dropped and counted.
pub(crate) const LOG_QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// The smallest `--log-file-max` (a rotation per line is no log).
pub(crate) const MIN_LOG_FILE_MAX: u64 = 64 * 1024;

/// Where and how big.
#[derive(Debug, Clone)]
pub(crate) struct LogFileSettings {
    pub(crate) path: PathBuf,
    /// Bytes of one file before it is rotated.
    pub(crate) max_bytes: u64,
    /// Files kept, the current one included (at least 1).
    pub(crate) files: u32,
}

#[derive(Default)]
struct Queue {
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Bytes dropped since the writer last said so in the file.
    dropped: u64,
    /// Bytes dropped in all.
    dropped_total: u64,
    /// Chunks handed over and written (or dropped by a failed write).
    queued: u64,
    done: u64,
    closing: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The log file's queue and writer thread.
pub(crate) struct LogFile {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogFile {
    /// Opens (appends to) the file and starts its writer.
    ///
    /// # Errors
    /// The file cannot be opened, or no thread for its writer.
    pub(crate) fn open(settings: LogFileSettings) -> io::Result<Self> {
        if let Some(dir) = settings.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(&settings.path)?;
        let size = file.metadata()?.len();
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        });
        let writer = Writer {
            settings,
            file: Some(file),
            size,
            warned: false,
        };
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("mcp-stdio-log".into())
            .spawn(move || writer.run(&s))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues lines; never blocks (past [`LOG_QUEUE_BYTES`] they are dropped
    /// and counted). Returns false when they were dropped.
    pub(crate) fn push(&self, lines: Vec<u8>) -> bool {
        let mut q = self.shared.lock();
        if q.bytes + lines.len() > LOG_QUEUE_BYTES {
            q.dropped += lines.len() as u64;
            q.dropped_total += lines.len() as u64;
            return false;
        }
        q.bytes += lines.len();
        q.queued += 1;
        q.chunks.push_back(lines);
        drop(q);
        self.shared.changed.notify_all();
        true
    }

    /// Waits at most `max` for what is queued to be written, then lets the
    /// writer go (a disk that hangs does not hold the guard's exit).
    /// Returns the bytes dropped (queue full, writes that failed, and what
    /// was still queued at the deadline).
    pub(crate) fn close(mut self, max: Duration) -> u64 {
        let deadline = Instant::now() + max;
        let mut q = self.shared.lock();
        q.closing = true;
        self.shared.changed.notify_all();
        while q.done < q.queued {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return q.dropped_total + q.bytes as u64;
            }
            q = self
                .shared
                .changed
                .wait_timeout(q, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let dropped = q.dropped_total;
        drop(q);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        dropped
    }
}

struct Writer {
    settings: LogFileSettings,
    file: Option<File>,
    size: u64,
    /// A failure was said on stderr already.
    warned: bool,
}

impl Writer {
    fn run(mut self, shared: &Shared) {
        loop {
            let (chunks, dropped) = {
                let mut q = shared.lock();
                while q.chunks.is_empty() && !q.closing {
                    q = shared
                        .changed
                        .wait(q)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if q.chunks.is_empty() {
                    return;
                }
                q.bytes = 0;
                (
                    std::mem::take(&mut q.chunks),
                    std::mem::take(&mut q.dropped),
                )
            };
            let n = chunks.len() as u64;
            let mut failed = 0u64;
            if dropped > 0 {
                let marker = format!(
                    "[mcp-stdio: {dropped} bytes of log dropped here: the disk was slow or full]\n"
                );
                failed += self.write(marker.as_bytes());
            }
            for chunk in chunks {
                failed += self.write(&chunk);
            }
            let mut q = shared.lock();
            q.done += n;
            q.dropped += failed;
            q.dropped_total += failed;
            drop(q);
            shared.changed.notify_all();
        }
    }

    /// Writes `bytes`, rotating first when they would pass the limit;
    /// returns the bytes that could not be written.
    fn write(&mut self, bytes: &[u8]) -> u64 {
        if self.size > 0 && self.size + bytes.len() as u64 > self.settings.max_bytes {
            if let Err(e) = self.rotate() {
                self.warn(&format!("rotating {}: {e}", self.settings.path.display()));
            }
        }
        let r = match self.file.as_mut() {
            Some(f) => f.write_all(bytes),
            None => open_append(&self.settings.path).and_then(|mut f| {
                let r = f.write_all(bytes);
                self.file = Some(f);
                r
            }),
        };
        match r {
            Ok(()) => {
                self.size += bytes.len() as u64;
                0
            }
            Err(e) => {
                self.warn(&format!("writing {}: {e}", self.settings.path.display()));
                bytes.len() as u64
            }
        }
    }

    /// `PATH.<n-2>` → `PATH.<n-1>` … `PATH` → `PATH.1`, a new `PATH`.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let path = &self.settings.path;
        let files = self.settings.files.max(1);
        if files == 1 {
            std::fs::remove_file(path)?;
        } else {
            for i in (1..files - 1).rev() {
                let from = numbered(path, i);
                if from.exists() {
                    std::fs::rename(&from, numbered(path, i + 1))?;
                }
            }
            std::fs::rename(path, numbered(path, 1))?;
        }
        self.file = Some(open_append(path)?);
        self.size = 0;
        Ok(())
    }

    fn warn(&mut self, what: &str) {
        if !self.warned {
            self.warned = true;
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: --log-file: {what}; lines that cannot be written are dropped and counted"
            ));
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// `PATH.n`.
pub(crate) fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}
