//! The cancel token every adapter hands its handlers and takes for a helper
//! run (G7): runtime-neutral, so the same type serves tokio, async-std and
//! plain threads. A cancel wakes async waiters (`cancelled().await`) and
//! blocked threads (`wait_timeout`) alike, through one `event-listener`
//! event; a child token is cancelled with its parent.
//!
//! A token an application already holds of another kind (tokio-util's
//! `CancellationToken`) reaches a helper run through [`CancelSignal`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use event_listener::{Event, Listener};

/// Children remembered per token before the dead ones are swept out: a
/// token that hands out many short-lived children keeps at most this many
/// entries beyond its live children.
const CHILDREN_SWEEP_AT: usize = 64;

/// A cancellation signal (G7): cancelled once, for good; every clone is the
/// same token. [`child_token`](Self::child_token) makes a token cancelled
/// with this one (and on its own). Waiting works from async code
/// ([`cancelled`](Self::cancelled)) and from a plain thread
/// ([`wait_timeout`](Self::wait_timeout)); a cancel wakes both at once.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<Node>);

#[derive(Debug, Default)]
struct Node {
    cancelled: AtomicBool,
    event: Event,
    /// Tokens cancelled with this one (weak: a dropped child is forgotten).
    children: Mutex<Vec<Weak<Self>>>,
}

impl Node {
    fn cancel(&self) {
        if self.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        self.event.notify(usize::MAX);
        let children =
            std::mem::take(&mut *self.children.lock().unwrap_or_else(PoisonError::into_inner));
        for child in children.iter().filter_map(Weak::upgrade) {
            child.cancel();
        }
    }
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels this token and its children: every waiter wakes.
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Whether it is cancelled (by [`cancel`](Self::cancel) or a parent's).
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// A new token, cancelled when this one is (and cancellable on its own,
    /// without touching this one).
    pub fn child_token(&self) -> Self {
        let child = Self::new();
        let mut children = self
            .0
            .children
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.is_cancelled() {
            drop(children);
            child.cancel();
            return child;
        }
        if children.len() >= CHILDREN_SWEEP_AT {
            children.retain(|c| c.strong_count() > 0);
        }
        children.push(Arc::downgrade(&child.0));
        child
    }

    /// Completes once the token is cancelled.
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + '_ {
        wait_for(&self.0)
    }

    /// [`cancelled`](Self::cancelled), owning a clone of the token: a
    /// future that outlives the borrow (a helper run's owner holds it).
    pub async fn cancelled_owned(self) {
        wait_for(&self.0).await;
    }

    /// Blocks the calling thread until the token is cancelled.
    pub fn wait(&self) {
        while !self.is_cancelled() {
            let listener = self.0.event.listen();
            if self.is_cancelled() {
                return;
            }
            listener.wait();
        }
    }

    /// Blocks the calling thread until the token is cancelled or `timeout`
    /// passes; returns whether it is cancelled. Use it instead of
    /// `thread::sleep` in a handler, so a cancel ends the wait at once.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        while !self.is_cancelled() {
            let listener = self.0.event.listen();
            if self.is_cancelled() {
                break;
            }
            match deadline {
                Some(d) => {
                    if listener.wait_deadline(d).is_none() {
                        break;
                    }
                }
                None => listener.wait(),
            }
        }
        self.is_cancelled()
    }
}

async fn wait_for(node: &Node) {
    while !node.cancelled.load(Ordering::Acquire) {
        let listener = node.event.listen();
        if node.cancelled.load(Ordering::Acquire) {
            return;
        }
        listener.await;
    }
}

/// A future that completes when a signal is cancelled, owning what it needs.
pub type Cancelled = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A cancellation signal a helper run takes ([`run_helper`](crate::run_helper)):
/// this crate's [`CancelToken`], and, with the `tokio-util` feature (which
/// `mcp-stdio-tokio` turns on), tokio-util's `CancellationToken` as a tokio
/// application already holds it.
pub trait CancelSignal: Send + Sync {
    /// Whether it is cancelled now.
    fn is_cancelled(&self) -> bool;

    /// Completes once it is cancelled; owns what it needs (it may outlive
    /// the borrow of `self`).
    fn cancelled_owned(&self) -> Cancelled;
}

impl CancelSignal for CancelToken {
    fn is_cancelled(&self) -> bool {
        Self::is_cancelled(self)
    }

    fn cancelled_owned(&self) -> Cancelled {
        Box::pin(self.clone().cancelled_owned())
    }
}

#[cfg(feature = "tokio-util")]
impl CancelSignal for tokio_util::sync::CancellationToken {
    fn is_cancelled(&self) -> bool {
        Self::is_cancelled(self)
    }

    fn cancelled_owned(&self) -> Cancelled {
        Box::pin(self.clone().cancelled_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// G7: a cancel wakes a blocked thread at once, and a child with its
    /// parent; a child's cancel leaves the parent alone.
    #[test]
    fn g7_a_cancel_wakes_a_blocked_thread_and_reaches_children() {
        let parent = CancelToken::new();
        let child = parent.child_token();
        let grandchild = child.child_token();
        assert!(!child.wait_timeout(Duration::from_millis(10)));
        let waiter = {
            let g = grandchild.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                let cancelled = g.wait_timeout(Duration::from_secs(30));
                (cancelled, t.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        parent.cancel();
        let (cancelled, took) = waiter.join().expect("waiter");
        assert!(cancelled && took < Duration::from_secs(10), "{took:?}");
        assert!(child.is_cancelled() && grandchild.is_cancelled());

        let parent = CancelToken::new();
        let child = parent.child_token();
        child.cancel();
        assert!(!parent.is_cancelled());
        // A child made after the cancel is born cancelled.
        parent.cancel();
        assert!(parent.child_token().is_cancelled());
    }

    /// G7: `cancelled().await` completes on a cancel from another thread.
    #[test]
    fn g7_cancelled_completes_on_a_cancel_from_another_thread() {
        let token = CancelToken::new();
        let other = token.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.cancel();
        });
        futures_lite::future::block_on(token.cancelled());
        canceller.join().expect("canceller");
        futures_lite::future::block_on(token.clone().cancelled_owned());
        token.wait();
    }

    /// Dropped children do not pile up in a long-lived parent.
    #[test]
    fn dropped_children_are_swept() {
        let parent = CancelToken::new();
        for _ in 0..10 * CHILDREN_SWEEP_AT {
            drop(parent.child_token());
        }
        let kept = parent.0.children.lock().expect("lock").len();
        assert!(kept <= CHILDREN_SWEEP_AT + 1, "{kept}");
    }
}
