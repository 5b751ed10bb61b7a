//! Progress of one request (`notifications/progress`), routed to whoever
//! made the request instead of the session's inbox.
//!
//! A request sent with a [`ProgressQueue`]
//! ([`ClientSession::request_with_progress`](crate::ClientSession::request_with_progress))
//! carries `_meta.progressToken` equal to its own id. Each
//! `notifications/progress` the server sends with that token goes to the
//! queue: never to the inbox, so an application that reads only its request's
//! progress is not held up by one that reads no incoming messages, and the
//! reverse. When the request completes (answered, cancelled, timed out, the
//! session closed), the queue is closed: a reader sees the updates still
//! queued, then the end.
//!
//! # Limits
//!
//! At most [`MAX_PROGRESS_QUEUED`] updates wait per request; past it the
//! oldest is dropped and counted ([`ProgressQueue::dropped`]): progress is
//! about the latest state, and a reader that falls behind should see where
//! the work is now. One queue per request in flight, so at most
//! `max_in_flight` of them. Pushing never blocks the session's loop: one
//! `std` mutex held for a `VecDeque` push or pop, then the reader's wake.
//!
//! # No waiting here
//!
//! The queue never waits: a reader polls it ([`ProgressQueue::try_next`])
//! and is told of each push and of the close by the `wake` it gave. How a
//! reader waits is its adapter's business (an async task's waker, a
//! blocking thread's condition variable), as the core reads no clock.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Deserialize;

use crate::wire::message::{Id, RawValue};

/// The notification's method.
pub const PROGRESS_METHOD: &str = "notifications/progress";

/// Updates that may wait per request before the oldest is dropped.
pub const MAX_PROGRESS_QUEUED: usize = 32;

/// One `notifications/progress` for a request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Progress {
    /// How far the work is (increases with each update).
    pub progress: f64,
    /// The total, when the server knows it.
    pub total: Option<f64>,
    /// A message for people, when the server gave one.
    pub message: Option<String>,
}

#[derive(Deserialize)]
struct Params {
    #[serde(rename = "progressToken")]
    token: Id,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

/// The token and the update of a `notifications/progress`'s params; `None`
/// when they are not one (no token, no number).
pub(crate) fn parse(params: Option<&RawValue>) -> Option<(Id, Progress)> {
    let p: Params = serde_json::from_str(params?.get()).ok()?;
    Some((
        p.token,
        Progress {
            progress: p.progress,
            total: p.total,
            message: p.message,
        },
    ))
}

/// What [`ProgressQueue::try_next`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressPoll {
    /// The oldest update still queued.
    Update(Progress),
    /// Nothing queued yet; the request is in flight.
    Empty,
    /// The request completed and every update was taken.
    Ended,
}

struct State {
    updates: VecDeque<Progress>,
    closed: bool,
    dropped: u64,
    received: u64,
}

/// The progress updates of one request, from the session's loop to a reader
/// (a task, a thread). Shared through an `Arc`.
pub struct ProgressQueue {
    state: Mutex<State>,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl fmt::Debug for ProgressQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("ProgressQueue")
            .field("queued", &s.updates.len())
            .field("closed", &s.closed)
            .field("dropped", &s.dropped)
            .finish_non_exhaustive()
    }
}

impl ProgressQueue {
    /// A queue whose pushes and close call `wake` (after the queue's lock
    /// is released; it must not block): an async reader's waker, or what
    /// wakes a blocking reader's condition variable.
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                updates: VecDeque::new(),
                closed: false,
                dropped: 0,
                received: 0,
            }),
            wake: Box::new(wake),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics under the lock; a poisoned queue is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `update` (dropping the oldest past [`MAX_PROGRESS_QUEUED`]) and
    /// wakes the reader. After the close it is ignored.
    pub(crate) fn push(&self, update: Progress) {
        {
            let mut s = self.lock();
            if s.closed {
                return;
            }
            s.received += 1;
            if s.updates.len() >= MAX_PROGRESS_QUEUED {
                s.updates.pop_front();
                s.dropped += 1;
            }
            s.updates.push_back(update);
        }
        (self.wake)();
    }

    /// Ends the queue: the request completed.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        (self.wake)();
    }

    /// The oldest update, or why there is none; never waits.
    pub fn try_next(&self) -> ProgressPoll {
        let mut s = self.lock();
        match s.updates.pop_front() {
            Some(u) => ProgressPoll::Update(u),
            None if s.closed => ProgressPoll::Ended,
            None => ProgressPoll::Empty,
        }
    }

    /// Updates dropped because the reader fell [`MAX_PROGRESS_QUEUED`] behind.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Updates received for this request.
    pub fn received(&self) -> u64 {
        self.lock().received
    }

    /// Whether the request completed (updates may still be queued).
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn update(n: f64) -> Progress {
        Progress {
            progress: n,
            total: Some(10.0),
            message: None,
        }
    }

    #[test]
    fn updates_arrive_in_order_then_the_end_and_each_push_wakes_the_reader() {
        let wakes = Arc::new(AtomicUsize::new(0));
        let w = wakes.clone();
        let q = ProgressQueue::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(q.try_next(), ProgressPoll::Empty);
        q.push(update(1.0));
        q.push(update(2.0));
        q.close();
        q.push(update(3.0)); // after the close: ignored
        assert_eq!(q.try_next(), ProgressPoll::Update(update(1.0)));
        assert_eq!(q.try_next(), ProgressPoll::Update(update(2.0)));
        assert_eq!(q.try_next(), ProgressPoll::Ended);
        assert_eq!(wakes.load(Ordering::Relaxed), 3);
        assert_eq!(q.received(), 2);
    }

    #[test]
    fn a_reader_that_falls_behind_sees_the_newest_and_the_count_of_the_dropped() {
        let q = ProgressQueue::new(|| {});
        for i in 0..(MAX_PROGRESS_QUEUED + 5) {
            q.push(update(i as f64));
        }
        assert_eq!(q.dropped(), 5);
        assert_eq!(q.try_next(), ProgressPoll::Update(update(5.0)));
    }

    fn session() -> (crate::ClientSession, Instant) {
        (
            crate::ClientSession::new(
                crate::ClientConfig::default(),
                crate::FramerConfig::default(),
            ),
            Instant::now(),
        )
    }

    fn sent(s: &mut crate::ClientSession) -> Vec<serde_json::Value> {
        std::iter::from_fn(|| s.poll_transmit())
            .map(|b| serde_json::from_slice(&b).expect("JSON line"))
            .collect()
    }

    #[test]
    fn a_request_with_progress_carries_its_id_as_token_and_gets_its_updates_not_the_inbox() {
        let (mut s, t0) = session();
        let q = ProgressQueue::new(|| {});
        let raw =
            RawValue::from_string(r#"{"name":"slow","arguments":{}}"#.to_owned()).expect("json");
        let id = s
            .request_with_progress(t0, "tools/call", Some(&raw), None, q.clone())
            .expect("sent");
        let other = s.request(t0, "ping", None, None).expect("sent");
        let lines = sent(&mut s);
        assert_eq!(lines[0]["params"]["_meta"]["progressToken"], 1);
        assert_eq!(lines[0]["params"]["name"], "slow");
        assert!(lines[1].get("params").is_none());
        // Its updates go to the queue; another token's, and malformed ones, to the inbox.
        s.handle_stdout(
            t0,
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1,\"total\":2}}\n\
              {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":99,\"progress\":1}}\n\
              {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":2,\"total\":2,\"message\":\"done\"}}\n",
        );
        assert_eq!(s.metrics().progress_routed, 2);
        assert_eq!(
            s.inbox_len(),
            1,
            "the other token's update waits in the inbox"
        );
        let first = q.try_next();
        assert!(
            matches!(&first, ProgressPoll::Update(u) if u.progress == 1.0),
            "{first:?}"
        );
        // The answer completes the request; the queue ends once its completion is polled.
        s.handle_stdout(
            t0,
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}}}}\n").as_bytes(),
        );
        assert!(!q.is_closed());
        while s.poll_event().is_some() {}
        assert!(q.is_closed());
        let last = q.try_next();
        assert!(
            matches!(&last, ProgressPoll::Update(u) if u.message.as_deref() == Some("done")),
            "{last:?}"
        );
        assert_eq!(q.try_next(), ProgressPoll::Ended);
        // A request whose params are not an object cannot carry a token.
        let bad = RawValue::from_string("[1]".to_owned()).expect("json");
        let err = s.request_with_progress(t0, "x", Some(&bad), None, ProgressQueue::new(|| {}));
        assert!(
            matches!(err, Err(crate::SendError::ParamsNotAnObject)),
            "{err:?}"
        );
        let _ = other;
    }

    #[test]
    fn params_give_the_token_and_the_update_or_nothing() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).expect("json");
        let p = raw(r#"{"progressToken":3,"progress":1.5,"total":4,"message":"half"}"#);
        let (token, u) = parse(Some(&p)).expect("parses");
        assert_eq!(token, Id::Number(3));
        assert_eq!(u.message.as_deref(), Some("half"));
        assert_eq!(u.total, Some(4.0));
        assert!(parse(Some(&raw(r#"{"progress":1}"#))).is_none());
        assert!(parse(Some(&raw(r#"{"progressToken":"t"}"#))).is_none());
        assert!(parse(None).is_none());
    }
}
