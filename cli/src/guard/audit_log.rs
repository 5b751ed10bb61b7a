//! The `--audit` log, written without the loop ever waiting on the disk (G1).
//!
//! The chain (hashes) is computed in the loop; the file writes and the fsync
//! of each batch happen on one writer thread, which counts the records on
//! disk ([`AuditLog::records_done`]); the loop tells the session, which
//! holds back a request for the server until its `dispatched` record is on
//! disk (G12) and stops asking for the host's input while too many records
//! wait (`GuardConfig::audit_gate`); meanwhile the loop keeps reading.
//!
//! A session's entries start with `session_start` and end with a seal
//! (counts by kind and the last hash), written by [`AuditLog::close`] on
//! every way the guard exits on its own (server exit, host gone, host not
//! reading, SIGTERM/SIGINT/SIGHUP, a server that cannot start). Once the
//! session starts ending, the log is also sealed after each batch
//! ([`AuditLog::seal`], when the session says so): a host that kills the
//! guard in the middle of its shutdown sequence finds the log sealed. A
//! guard that is killed or crashes while the session runs leaves the session
//! unsealed, which `verify` reports.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use mcp_stdio_audit::{AuditChain, AuditKey};
use serde::Serialize;

/// One numbered batch: its lines, then one fsync.
struct Batch {
    seq: u64,
    lines: Vec<Vec<u8>>,
    /// How many of the lines are records ([`AuditLog::append`]).
    records: u64,
}

/// What the writer thread reports.
#[derive(Default)]
struct Progress {
    /// Highest batch number on disk (or failed and reported).
    batches_done: AtomicU64,
    /// Records on disk (or failed and reported).
    records_done: AtomicU64,
    wake: tokio::sync::Notify,
}

/// The audit log: a chain appended to a file by a writer thread.
pub(crate) struct AuditLog {
    chain: AuditChain,
    batch: Vec<Vec<u8>>,
    tx: Option<mpsc::Sender<Batch>>,
    progress: Arc<Progress>,
    batches_sent: u64,
    /// Records in the batch being built.
    batch_records: u64,
    /// Entries were added since the last seal.
    unsealed: bool,
}

impl AuditLog {
    /// Opens (or continues) the log at `path`, starts its writer thread and
    /// begins the session (its `session_start` entry goes with the first batch).
    pub(crate) fn open(
        path: &Path,
        key: Option<AuditKey>,
        session_id: &str,
    ) -> Result<Self, String> {
        let shown = path.display();
        if let Some(folder) = path.parent().filter(|f| !f.as_os_str().is_empty()) {
            if folder.exists() && !folder.is_dir() {
                return Err(format!(
                    "audit log {shown}: {} is not a folder; give --audit a path in a folder",
                    folder.display()
                ));
            }
            if !folder.is_dir() {
                std::fs::create_dir_all(folder).map_err(|e| {
                    format!(
                        "audit log {shown}: cannot create its folder {}: {e}; create it, or \
                         give --audit a path in a folder you can write",
                        folder.display()
                    )
                })?;
                tracing::debug!(folder = %folder.display(), "created the audit log's folder");
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                format!(
                    "audit log {shown}: cannot open it for appending: {e}; check that it is a \
                     file you can read and write, or give --audit another path"
                )
            })?;
        let last = last_line(&mut file).map_err(|e| {
            format!("audit log {shown}: cannot read its last entry: {e}; give --audit another path")
        })?;
        let mut chain = AuditChain::resume(&last, key.as_ref()).map_err(|e| {
            format!(
                "audit log {shown}: cannot continue this log: {e}; check it with `mcp-stdio \
                 verify {shown}` (and the same --audit-key-file), or give --audit a new file"
            )
        })?;
        let start = chain
            .begin_session(session_id)
            .map_err(|e| format!("audit log {shown}: cannot start the session: {e}"))?;
        // The count of batches is bounded by MAX_PENDING_LINES through the loop.
        let (tx, rx) = mpsc::channel::<Batch>();
        let progress = Arc::new(Progress::default());
        let seen = progress.clone();
        let owned = path.to_owned();
        std::thread::Builder::new()
            .name("mcp-stdio-audit".into())
            .spawn(move || write_batches(&rx, file, &owned, &seen))
            .map_err(|e| format!("audit log {shown}: cannot start its writer thread: {e}"))?;
        Ok(Self {
            chain,
            batch: vec![start],
            tx: Some(tx),
            progress,
            batches_sent: 0,
            batch_records: 0,
            unsealed: true,
        })
    }

    /// Adds a record to the current batch. A record the chain refuses still
    /// counts, as done once its batch is: the session waits for it, and a
    /// refused record is logged, not waited for forever.
    pub(crate) fn append(&mut self, record: &impl Serialize) {
        match self.chain.append(record) {
            Ok(line) => {
                self.batch.push(line);
                self.unsealed = true;
            }
            Err(e) => tracing::error!(error = %e, "audit record not appended"),
        }
        self.batch_records += 1;
    }

    /// Adds a seal of what the chain holds so far to the current batch
    /// (nothing when it is sealed already): the session is ending, and a
    /// kill may come before [`close`](Self::close).
    pub(crate) fn seal(&mut self) {
        if !self.unsealed {
            return;
        }
        match self.chain.seal() {
            Ok(line) => {
                self.batch.push(line);
                self.unsealed = false;
            }
            Err(e) => tracing::error!(error = %e, "audit log not sealed"),
        }
    }

    /// Hands the current batch to the writer; returns the number of the last
    /// batch sent (what a message written after these records must wait for).
    pub(crate) fn commit(&mut self) -> u64 {
        if !self.batch.is_empty() || self.batch_records > 0 {
            let lines = std::mem::take(&mut self.batch);
            self.batches_sent += 1;
            let batch = Batch {
                seq: self.batches_sent,
                lines,
                records: std::mem::take(&mut self.batch_records),
            };
            if let Some(tx) = &self.tx {
                if tx.send(batch).is_err() {
                    tracing::error!("the audit writer is gone; records lost");
                }
            }
        }
        self.batches_sent
    }

    /// The number of the last batch on disk.
    pub(crate) fn done(&self) -> u64 {
        self.progress.batches_done.load(Ordering::Acquire)
    }

    /// Records ([`append`](Self::append)) on disk, counted from the first.
    pub(crate) fn records_done(&self) -> u64 {
        self.progress.records_done.load(Ordering::Acquire)
    }

    /// True while a batch handed out is not yet on disk.
    pub(crate) fn in_flight(&self) -> bool {
        self.done() < self.batches_sent
    }

    /// A future that completes when the writer made progress; it never
    /// completes while nothing is in flight. It owns what it needs.
    pub(crate) fn progress(&self) -> impl std::future::Future<Output = ()> + 'static {
        let waiting = (self.done() < self.batches_sent).then(|| self.progress.clone());
        async move {
            match waiting {
                Some(p) => p.wake.notified().await,
                None => std::future::pending().await,
            }
        }
    }

    /// Seals the session, commits what is left and waits (at most `within`)
    /// until it is on disk. A seal that does not reach the disk in time
    /// leaves the log unsealed, which is then the truth.
    pub(crate) async fn close(mut self, within: std::time::Duration) {
        self.seal();
        let last = self.commit();
        self.tx = None;
        let wait = async {
            while self.done() < last {
                self.progress().await;
            }
        };
        if tokio::time::timeout(within, wait).await.is_err() {
            tracing::error!("the audit log did not reach the disk within {within:?}");
        }
    }
}

/// The writer thread: each batch written, then fsynced, then reported.
fn write_batches(rx: &mpsc::Receiver<Batch>, mut file: File, path: &Path, progress: &Progress) {
    for batch in rx {
        for line in &batch.lines {
            if let Err(e) = file.write_all(line) {
                tracing::error!(path = %path.display(), error = %e, "audit write failed");
            }
        }
        if let Err(e) = file.sync_data() {
            tracing::error!(path = %path.display(), error = %e, "audit fsync failed");
        }
        progress
            .records_done
            .fetch_add(batch.records, Ordering::AcqRel);
        progress.batches_done.store(batch.seq, Ordering::Release);
        progress.wake.notify_one();
    }
}

/// The last line of a file (with its newline), read from the end.
fn last_line(file: &mut File) -> std::io::Result<Vec<u8>> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(Vec::new());
    }
    // Records are small; read a generous tail and take its last line.
    let start = len.saturating_sub(2 * 1024 * 1024);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    let from = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    Ok(tail[from..].to_vec())
}
