//! Waiting on the application's thread for what the driver answers: the
//! driver runs on a thread of its own ([`Mio`](crate::runtime::Mio)); the
//! application's side only awaits channels, woken by the driver.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Blocks the calling thread until `future` completes.
pub(crate) fn wait<F: Future>(future: F) -> F::Output {
    futures_lite::future::block_on(future)
}

/// Unparks the waiting thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Blocks the calling thread until `future` completes or `timeout` passes
/// (`None`, or one too large to represent: as long as it takes); `None` on
/// timeout, the future dropped (every future waited on here loses nothing
/// when dropped: a channel's receive, a queue's look).
pub(crate) fn wait_timeout<F: Future>(future: F, timeout: Option<Duration>) -> Option<F::Output> {
    let Some(deadline) = timeout.and_then(|t| Instant::now().checked_add(t)) else {
        return Some(wait(future));
    };
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        // A wake before the park leaves its token: the park returns at once.
        std::thread::park_timeout(left);
    }
}
