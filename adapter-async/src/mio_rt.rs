//! The mio runtime (feature `mio`): the driver's [`Runtime`] on a mio
//! reactor, with no async runtime in the tree; the blocking adapter
//! (`mcp-stdio-blocking`) runs every driver on it. A [`Mio`] is one reactor (a
//! `mio::Poll`); [`Mio::block_on`] runs one future on the calling thread,
//! sleeping in the poll until a descriptor is ready, the one nearest timer
//! is due or a waker fires. [`Runtime::spawn_driver`] gives a driver a thread
//! of its own running `block_on`; a thread that has nothing to do sleeps
//! without a timeout (no wake-up while idle).
//!
//! Readiness is edge-triggered (mio's): each registered descriptor keeps a
//! "ready" mark per direction, set by the reactor's events and cleared when
//! a call finds it spurious (`WouldBlock`); a direction not marked ready
//! costs no system call, only a registered waker. An event counter per
//! direction tells a call that found nothing whether an event came since it
//! began, so a wake is never lost between the call and the registration of
//! the waker.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use crate::runtime::{BoxFuture, Interest, IoOp, IoPoll, Readiness, Runtime, Timer};
use mio::unix::SourceFd;

/// The token of the reactor's own waker.
const WAKER: mio::Token = mio::Token(usize::MAX);

/// Events taken from the kernel per poll (more wait for the next).
const EVENTS_PER_POLL: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One mio reactor as the driver's [`Runtime`]. Cheap to clone (a handle);
/// [`Runtime::current`] makes a new one, so each driver has its own.
#[derive(Clone)]
pub struct Mio(Arc<Reactor>);

impl std::fmt::Debug for Mio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mio")
            .field("sources", &lock(&self.0.sources).len())
            .field("timers", &lock(&self.0.timers).len())
            .finish_non_exhaustive()
    }
}

struct Reactor {
    /// Taken by the thread in [`Mio::block_on`]; one at a time.
    poll: Mutex<Option<mio::Poll>>,
    registry: mio::Registry,
    wake: Arc<ThreadWake>,
    next: AtomicUsize,
    /// Registered descriptors by token: at most the driver's pipes and pidfd.
    sources: Mutex<HashMap<usize, Arc<Mutex<Ready>>>>,
    /// Timers by id: at most the driver's one deadline timer and an exit tick.
    timers: Mutex<HashMap<usize, TimerSlot>>,
}

/// What the reactor saw of one descriptor, per direction (read, write).
struct Ready {
    /// Worth a call: an event came since a call last found nothing (it
    /// starts so: what the descriptor holds is not known yet).
    ready: [bool; 2],
    /// Events seen, for a call to tell whether one came while it ran.
    events: [u64; 2],
    wakers: [Option<Waker>; 2],
}

impl Default for Ready {
    fn default() -> Self {
        Self {
            ready: [true; 2],
            events: [0; 2],
            wakers: [None, None],
        }
    }
}

#[derive(Default)]
struct TimerSlot {
    at: Option<Instant>,
    /// Due and woken: left out of the poll's timeout until it is set again.
    fired: bool,
    waker: Option<Waker>,
}

/// Wakes the thread in `block_on`: a mark, and the poll interrupted only
/// while the thread sleeps in it.
struct ThreadWake {
    woken: AtomicBool,
    sleeping: AtomicBool,
    mio: mio::Waker,
}

impl Wake for ThreadWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            if let Err(e) = self.mio.wake() {
                tracing::warn!(error = %e, "waking a driver thread failed");
            }
        }
    }
}

impl Mio {
    /// A new reactor.
    ///
    /// # Errors
    /// The kernel refused a poll instance or its waker.
    pub fn new() -> io::Result<Self> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let mio = mio::Waker::new(poll.registry(), WAKER)?;
        Ok(Self(Arc::new(Reactor {
            poll: Mutex::new(Some(poll)),
            registry,
            wake: Arc::new(ThreadWake {
                woken: AtomicBool::new(false),
                sleeping: AtomicBool::new(false),
                mio,
            }),
            next: AtomicUsize::new(0),
            sources: Mutex::new(HashMap::new()),
            timers: Mutex::new(HashMap::new()),
        })))
    }

    /// Runs `future` to its end on the calling thread, in this reactor.
    /// Without the reactor's poll (another thread runs it), a plain
    /// thread-parking wait takes its place: the future is then only woken
    /// by channels, not by this reactor's descriptors.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let Some(mut poll) = lock(&self.0.poll).take() else {
            return futures_lite::future::block_on(future);
        };
        let r = self.0.run(&mut poll, future);
        *lock(&self.0.poll) = Some(poll);
        r
    }
}

impl Reactor {
    fn run<F: Future>(&self, poll: &mut mio::Poll, future: F) -> F::Output {
        let waker = Waker::from(self.wake.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(future);
        let mut events = mio::Events::with_capacity(EVENTS_PER_POLL);
        loop {
            self.wake.woken.store(false, Ordering::SeqCst);
            if let Poll::Ready(r) = future.as_mut().poll(&mut cx) {
                return r;
            }
            self.wake.sleeping.store(true, Ordering::SeqCst);
            // Woken already: no poll, and none of the last poll's events again.
            events.clear();
            if !self.wake.woken.load(Ordering::SeqCst) {
                let timeout = self
                    .next_deadline()
                    .map(|at| at.saturating_duration_since(Instant::now()));
                match poll.poll(&mut events, timeout) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => tracing::warn!(error = %e, "mio poll failed"),
                }
            }
            self.wake.sleeping.store(false, Ordering::SeqCst);
            for event in events.iter() {
                if event.token() != WAKER {
                    self.dispatch(event);
                }
            }
            self.fire_timers();
        }
    }

    fn dispatch(&self, event: &mio::event::Event) {
        let Some(source) = lock(&self.sources).get(&event.token().0).cloned() else {
            return;
        };
        let mut s = lock(&source);
        let error = event.is_error();
        let sides = [
            event.is_readable() || event.is_read_closed() || error,
            event.is_writable() || event.is_write_closed() || error,
        ];
        for (i, hit) in sides.into_iter().enumerate() {
            if hit {
                s.ready[i] = true;
                s.events[i] += 1;
                if let Some(w) = s.wakers[i].take() {
                    w.wake();
                }
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        lock(&self.timers)
            .values()
            .filter(|t| !t.fired)
            .filter_map(|t| t.at)
            .min()
    }

    fn fire_timers(&self) {
        let now = Instant::now();
        for t in lock(&self.timers).values_mut() {
            if !t.fired && t.at.is_some_and(|at| at <= now) {
                t.fired = true;
                if let Some(w) = t.waker.take() {
                    w.wake();
                }
            }
        }
    }
}

impl Runtime for Mio {
    type Fd = MioFd;
    type Timer = MioTimer;

    fn current() -> io::Result<Self> {
        Self::new()
    }

    fn register(&self, fd: OwnedFd) -> io::Result<MioFd> {
        let token = self.0.next.fetch_add(1, Ordering::Relaxed);
        let ready = Arc::new(Mutex::new(Ready::default()));
        lock(&self.0.sources).insert(token, ready.clone());
        let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
        if let Err(e) =
            self.0
                .registry
                .register(&mut SourceFd(&fd.as_raw_fd()), mio::Token(token), interest)
        {
            lock(&self.0.sources).remove(&token);
            return Err(e);
        }
        Ok(MioFd {
            fd,
            token,
            ready,
            reactor: self.0.clone(),
        })
    }

    fn timer(&self) -> MioTimer {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.0.timers).insert(id, TimerSlot::default());
        MioTimer {
            id,
            reactor: self.0.clone(),
        }
    }

    fn spawn_driver(&self, name: String, future: BoxFuture) -> io::Result<()> {
        let rt = self.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || rt.block_on(future))
            .map(drop)
    }

    fn spawn(&self, future: BoxFuture) {
        pool::run(future);
    }
}

/// The threads [`Runtime::spawn`] runs tasks on (request handlers): an idle
/// one takes the next task, else a new one starts; a thread idle for
/// [`POOL_IDLE`](pool::POOL_IDLE) ends. The pool itself has no bound: what
/// spawns bounds it (`serve` admits at most `max_concurrent` requests), and
/// it holds at most as many threads as were ever busy at once.
mod pool {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{self, RecvTimeoutError, Sender};
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::runtime::BoxFuture;

    use super::lock;

    /// How long a thread waits for its next task before it ends.
    pub(super) const POOL_IDLE: Duration = Duration::from_secs(30);

    /// Idle threads, each by id with the sender of its next task.
    static IDLE: Mutex<Vec<(u64, Sender<BoxFuture>)>> = Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// Runs `task` on an idle thread, or a new one.
    pub(super) fn run(mut task: BoxFuture) {
        loop {
            let Some((_, worker)) = lock(&IDLE).pop() else {
                break;
            };
            match worker.send(task) {
                Ok(()) => return,
                // It ended meanwhile: the next one.
                Err(mpsc::SendError(back)) => task = back,
            }
        }
        let spawned = std::thread::Builder::new()
            .name("mcp-stdio-handler".into())
            .spawn(move || work(task));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for a task; it does not run");
        }
    }

    fn work(first: BoxFuture) {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<BoxFuture>();
        let mut task = Some(first);
        while let Some(t) = task.take() {
            futures_lite::future::block_on(t);
            lock(&IDLE).push((id, tx.clone()));
            task = match rx.recv_timeout(POOL_IDLE) {
                Ok(next) => Some(next),
                Err(RecvTimeoutError::Disconnected) => None,
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = lock(&IDLE);
                    match idle.iter().position(|(i, _)| *i == id) {
                        // Still idle: nobody will send; end.
                        Some(at) => {
                            idle.swap_remove(at);
                            None
                        }
                        // Taken meanwhile: its task is on its way.
                        None => {
                            drop(idle);
                            rx.recv().ok()
                        }
                    }
                }
            };
        }
    }
}

/// A descriptor in a [`Mio`] reactor; dropping it takes it out and closes it.
pub struct MioFd {
    fd: OwnedFd,
    token: usize,
    ready: Arc<Mutex<Ready>>,
    reactor: Arc<Reactor>,
}

impl std::fmt::Debug for MioFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MioFd")
            .field("fd", &self.fd)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Drop for MioFd {
    fn drop(&mut self) {
        let _ = self
            .reactor
            .registry
            .deregister(&mut SourceFd(&self.fd.as_raw_fd()));
        lock(&self.reactor.sources).remove(&self.token);
    }
}

impl Readiness for MioFd {
    fn poll_io(&self, cx: &mut Context<'_>, interest: Interest, op: IoOp<'_>) -> IoPoll {
        let side = match interest {
            Interest::Read => 0,
            Interest::Write => 1,
        };
        loop {
            let seen = {
                let mut s = lock(&self.ready);
                if !s.ready[side] {
                    // Nothing came since a call found nothing: no call now.
                    s.wakers[side] = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                s.events[side]
            };
            match op(self.fd.as_fd()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
            let mut s = lock(&self.ready);
            // An event while the call ran: try again; else wait for the next.
            if s.events[side] == seen {
                s.ready[side] = false;
                s.wakers[side] = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
    }
}

/// A timer of a [`Mio`] reactor (its deadline is the poll's timeout).
pub struct MioTimer {
    id: usize,
    reactor: Arc<Reactor>,
}

impl std::fmt::Debug for MioTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MioTimer").field("id", &self.id).finish()
    }
}

impl Drop for MioTimer {
    fn drop(&mut self) {
        lock(&self.reactor.timers).remove(&self.id);
    }
}

impl Timer for MioTimer {
    fn set(&mut self, at: Instant) {
        let mut timers = lock(&self.reactor.timers);
        let slot = timers.entry(self.id).or_default();
        slot.at = Some(at);
        slot.fired = false;
        drop(timers);
        // A thread asleep in the poll wakes to take the new deadline into
        // account; the thread setting it (the driver's own) is not asleep.
        let wake = &self.reactor.wake;
        if wake.sleeping.load(Ordering::SeqCst) {
            if let Err(e) = wake.mio.wake() {
                tracing::warn!(error = %e, "waking a driver thread failed");
            }
        }
    }

    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut timers = lock(&self.reactor.timers);
        let slot = timers.entry(self.id).or_default();
        match slot.at {
            Some(at) if at <= Instant::now() => {
                slot.at = None;
                slot.fired = false;
                Poll::Ready(())
            }
            _ => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Waiting on an application's thread for a future the driver completes
/// (a reply, a channel): the blocking adapter's calls.
pub mod wait {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::Thread;
    use std::time::{Duration, Instant};

    /// Blocks the calling thread until `future` completes.
    pub fn wait<F: Future>(future: F) -> F::Output {
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
    pub fn wait_timeout<F: Future>(future: F, timeout: Option<Duration>) -> Option<F::Output> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeadlineTimer, Pipe};
    use std::io::Write;
    use std::time::Duration;

    /// A read waits in the poll for bytes another thread writes later, and
    /// a write to a full pipe waits for room a reader makes (G1's pieces).
    #[test]
    fn a_pipe_read_and_a_full_write_wait_for_the_other_side() {
        let rt = Mio::new().expect("reactor");
        let (reader, mut writer) = std::io::pipe().expect("pipe");
        let pipe = Pipe::new(&rt, OwnedFd::from(reader)).expect("register");
        let feeder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            writer.write_all(b"hello").expect("write");
        });
        let mut buf = [0u8; 16];
        let t = Instant::now();
        let n = rt
            .block_on(std::future::poll_fn(|cx| pipe.poll_read(cx, &mut buf)))
            .expect("read");
        assert_eq!(&buf[..n], b"hello");
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        feeder.join().expect("feeder");

        let (mut reader, writer) = std::io::pipe().expect("pipe");
        let pipe = Pipe::new(&rt, OwnedFd::from(writer)).expect("register");
        let chunk = vec![b'x'; 1 << 20];
        let mut written = 0;
        // Fill the pipe until a write would block.
        while let Poll::Ready(r) = pipe.poll_write(&mut Context::from_waker(Waker::noop()), &chunk)
        {
            written += r.expect("write");
        }
        let drainer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut buf = vec![0u8; 1 << 20];
            let n = std::io::Read::read(&mut reader, &mut buf).expect("read");
            (n, reader)
        });
        let more = rt
            .block_on(std::future::poll_fn(|cx| pipe.poll_write(cx, &chunk)))
            .expect("write after room");
        assert!(written > 0 && more > 0);
        assert!(drainer.join().expect("drainer").0 > 0);
    }

    /// The one deadline timer fires at its time, moved earlier or not; a
    /// driver on a thread of its own runs to its end.
    #[test]
    fn the_deadline_timer_fires_and_a_driver_thread_runs() {
        let rt = Mio::new().expect("reactor");
        let mut timer = DeadlineTimer::new(&rt);
        let t = Instant::now();
        let far = t + Duration::from_secs(30);
        let near = t + Duration::from_millis(60);
        // Armed far, then moved earlier in the same turn (a machine's
        // deadline that came nearer): the near one fires.
        rt.block_on(std::future::poll_fn(|cx| {
            if timer.poll(cx, Some(far)).is_ready() {
                return Poll::Ready(());
            }
            timer.poll(cx, Some(near)).map(drop)
        }));
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(55) && took < Duration::from_secs(10),
            "{took:?}"
        );

        let (tx, rx) = std::sync::mpsc::channel();
        let driver = Mio::new().expect("reactor");
        let timer_rt = driver.clone();
        driver
            .spawn_driver(
                "test-driver".into(),
                Box::pin(async move {
                    let mut timer = DeadlineTimer::new(&timer_rt);
                    let at = Instant::now() + Duration::from_millis(20);
                    std::future::poll_fn(|cx| timer.poll(cx, Some(at))).await;
                    let _ = tx.send(());
                }),
            )
            .expect("thread");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the driver ran");
    }
}
