//! The guard's writes of the pin file, off its loop.
//!
//! The loop hands each `GuardOutput::Pins` to [`PinWriter::send`], which
//! merges it into what waits to be written (keyed by tool, so at most
//! `MAX_PINNED_TOOLS` entries of each kind wait, each at most
//! `MAX_PINNED_DEFINITION_BYTES` of definition) and wakes one writer
//! thread; the loop never waits for the disk (G1). The thread writes at
//! once, so a guard killed mid-session has written what it saw.
//!
//! Each write reads the file again and changes only what the update says:
//! tools pinned on first use are added when absent, pending entries set or
//! removed. So a `pin accept` run while the guard runs is kept. Two guards
//! (or a guard and `pin accept`) writing at the same instant: each write is
//! atomic, the file is one writer's whole file, never a mix; the last
//! writer wins, and an entry of `pending` the other wrote in between may
//! be lost (the next session reports it again).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use mcp_stdio_core::{PinUpdate, MAX_PINNED_TOOLS};

use super::file::{PendingEntry, PinFile, ToolEntry};

/// What waits to be written.
#[derive(Debug, Default)]
struct Queued {
    /// Tools pinned on first use.
    pinned: BTreeMap<String, ToolEntry>,
    /// Pending entries to set (`Some`) or remove (`None`).
    pending: BTreeMap<String, Option<PendingEntry>>,
    closed: bool,
}

impl Queued {
    fn is_empty(&self) -> bool {
        self.pinned.is_empty() && self.pending.is_empty()
    }
}

#[derive(Debug, Default)]
struct Shared {
    queued: Mutex<Queued>,
    wake: Condvar,
}

fn lock(m: &Mutex<Queued>) -> MutexGuard<'_, Queued> {
    // The writer thread does not panic while holding it; if it did, the
    // queue is still whole.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The pin file's writer thread.
#[derive(Debug)]
pub(crate) struct PinWriter {
    shared: Arc<Shared>,
    done: mpsc::Receiver<()>,
}

impl PinWriter {
    /// Starts the writer of the pin file at `path`.
    pub(crate) fn start(path: PathBuf) -> Result<Self, String> {
        let shared = Arc::new(Shared::default());
        let (tx, done) = mpsc::channel();
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("mcp-stdio-pins".into())
            .spawn(move || {
                write_loop(&theirs, &path);
                let _ = tx.send(());
            })
            .map_err(|e| format!("cannot start the pin file's writer thread: {e}"))?;
        Ok(Self { shared, done })
    }

    /// Queues an update (merged with what waits); never waits for the disk.
    pub(crate) fn send(&self, update: PinUpdate) {
        let mut q = lock(&self.shared.queued);
        for p in update.pinned {
            if q.pinned.len() < MAX_PINNED_TOOLS || q.pinned.contains_key(&p.tool) {
                let entry = ToolEntry::of(&p.digest, p.definition.as_deref());
                q.pinned.insert(p.tool, entry);
            }
        }
        for c in update.pending {
            if q.pending.len() < MAX_PINNED_TOOLS || q.pending.contains_key(&c.tool) {
                let entry = PendingEntry::of(&c, update.seen_unix_ms);
                q.pending.insert(c.tool, Some(entry));
            }
        }
        for tool in update.cleared {
            if q.pending.len() < MAX_PINNED_TOOLS || q.pending.contains_key(&tool) {
                q.pending.insert(tool, None);
            }
        }
        drop(q);
        self.shared.wake.notify_one();
    }

    /// Writes what waits and stops the thread, waiting at most `within`.
    pub(crate) fn close(self, within: Duration) {
        lock(&self.shared.queued).closed = true;
        self.shared.wake.notify_one();
        if self.done.recv_timeout(within).is_err() {
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: the pin file was not written within {within:?}"
            ));
        }
    }
}

impl Drop for PinWriter {
    /// A writer dropped without [`close`](PinWriter::close) (the guard
    /// stopped before its session): its thread writes what waits and ends.
    fn drop(&mut self) {
        lock(&self.shared.queued).closed = true;
        self.shared.wake.notify_one();
    }
}

fn write_loop(shared: &Shared, path: &Path) {
    loop {
        let batch = {
            let mut q = lock(&shared.queued);
            while q.is_empty() && !q.closed {
                q = shared
                    .wake
                    .wait(q)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if q.is_empty() {
                return;
            }
            std::mem::take(&mut *q)
        };
        if let Err(e) = apply(path, batch) {
            crate::stderr_sink::line(&format!("mcp-stdio guard: {e}"));
        }
    }
}

/// Reads the file again, applies `batch`, writes it.
fn apply(path: &Path, batch: Queued) -> Result<(), String> {
    let shown = path.display();
    let mut file = PinFile::read(path)
        .map_err(|e| format!("{e}; what the guard saw is not recorded"))?
        .unwrap_or_else(PinFile::new);
    let mut pinned = 0;
    for (tool, entry) in batch.pinned {
        if file.tools.len() < MAX_PINNED_TOOLS && !file.tools.contains_key(&tool) {
            file.tools.insert(tool, entry);
            pinned += 1;
        }
    }
    let mut pending = 0;
    for (tool, entry) in batch.pending {
        match entry {
            Some(e)
                if file.pending.len() < MAX_PINNED_TOOLS || file.pending.contains_key(&tool) =>
            {
                file.pending.insert(tool, e);
                pending += 1;
            }
            Some(_) => {}
            None => {
                file.pending.remove(&tool);
            }
        }
    }
    file.write(path)?;
    if pinned > 0 {
        crate::stderr_sink::line(&format!(
            "mcp-stdio guard: pin file {shown}: pinned {pinned} tool(s) as the server lists them"
        ));
    }
    if pending > 0 {
        crate::stderr_sink::line(&format!(
            "mcp-stdio guard: pin file {shown}: {} difference(s) pending; review with \
             `mcp-stdio pin show {shown}`, accept with `mcp-stdio pin accept {shown}`",
            file.pending.len()
        ));
    }
    Ok(())
}
