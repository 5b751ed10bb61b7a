//! Polling a read once, outside the wait that owns it.
//!
//! The adapters' loops read on while a pipe has bytes ready: after a read
//! wakes them, they poll the next read once more with this waker instead of
//! taking another turn through their `select` (a large response is many
//! reads, and each turn re-polls every branch). A read that is not ready is
//! simply waited for by the next turn, with the task's own waker.

use std::sync::{Arc, OnceLock};
use std::task::{Wake, Waker};

struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// A waker that does nothing (one per process, cloned).
pub fn noop_waker() -> Waker {
    static NOOP: OnceLock<Waker> = OnceLock::new();
    NOOP.get_or_init(|| Waker::from(Arc::new(Noop))).clone()
}
