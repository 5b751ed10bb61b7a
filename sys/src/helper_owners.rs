//! The helper runs alive in this process, counted so that `serve` can wait
//! for them before it returns.
//!
//! A helper run's owner outlives the tool handler that started it (a
//! cancelled handler is dropped; the owner still sends `SIGTERM`, waits the
//! grace, sends `SIGKILL`, drains and writes the final record). When `serve`
//! ends, those owners may still be on that path; returning at once would let
//! the process exit under them, with the helper killed by nobody and the
//! record never written. So each owner holds an [`OwnerTicket`] for its
//! lifetime, and `serve` waits (bounded) until [`live`] is 0.

use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Held by a helper run's owner for as long as the run lasts.
#[derive(Debug)]
pub struct OwnerTicket(());

impl OwnerTicket {
    /// Counts one more live owner.
    #[must_use]
    pub fn new() -> Self {
        LIVE.fetch_add(1, Ordering::AcqRel);
        Self(())
    }
}

impl Default for OwnerTicket {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for OwnerTicket {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Helper-run owners alive now, in this process.
pub fn live() -> usize {
    LIVE.load(Ordering::Acquire)
}
