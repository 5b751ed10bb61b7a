//! The runtime trait: everything the drivers need from an async runtime, and
//! nothing else (quinn's shape). A runtime registers non-blocking
//! descriptors with its reactor and reports their readiness, arms timers,
//! and runs a driver's future. The system calls themselves
//! (`read`, `write`, the non-reaping look at an exit) are the driver's, made
//! once the runtime says a descriptor is ready: so every runtime reads and
//! writes exactly alike.

use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// A future the runtime runs to completion: a driver, an owner, a handler.
pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One non-blocking system call on a ready descriptor (see [`Readiness::poll_io`]).
pub type IoOp<'a> = &'a mut dyn FnMut(BorrowedFd<'_>) -> io::Result<usize>;

/// What [`Readiness::poll_io`] gives: the call's result once it did not block.
pub type IoPoll = Poll<io::Result<usize>>;

/// What a descriptor is waited on for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Bytes to read, the end of the stream, or (a pidfd) the exit.
    Read,
    /// Room to write.
    Write,
}

/// An async runtime, as the drivers use it. Cheap to clone (a handle).
pub trait Runtime: Clone + Send + Sync + fmt::Debug + 'static {
    /// A descriptor registered with the runtime's reactor.
    type Fd: Readiness;
    /// A timer of the runtime.
    type Timer: Timer;

    /// The runtime the caller runs in.
    ///
    /// # Errors
    /// There is none (tokio: called outside a runtime).
    fn current() -> io::Result<Self>;

    /// Registers `fd`, already non-blocking, with the reactor.
    ///
    /// # Errors
    /// The reactor refused it (a regular file cannot be polled).
    fn register(&self, fd: OwnedFd) -> io::Result<Self::Fd>;

    /// A timer that is not armed.
    fn timer(&self) -> Self::Timer;

    /// Runs the future of a driver or a helper's owner, which must make
    /// progress whatever the application's tasks do: a task of the runtime,
    /// or a thread of its own where the runtime's tasks would move between
    /// threads on every wake (async-std). `name` names a thread.
    ///
    /// # Errors
    /// No task or thread could be started; `future` was dropped.
    fn spawn_driver(&self, name: String, future: BoxFuture) -> io::Result<()>;

    /// Runs a short task (a request handler) on the runtime's executor.
    fn spawn(&self, future: BoxFuture);
}

/// The readiness of one registered, non-blocking descriptor.
pub trait Readiness: Send + Sync + fmt::Debug + 'static {
    /// Runs `op` (one non-blocking system call on the descriptor) once the
    /// descriptor is ready for `interest`, and again after every readiness
    /// that `op` found spurious (`WouldBlock`), until it returns something
    /// else or the descriptor is not ready (`Pending`, the waker registered).
    fn poll_io(&self, cx: &mut Context<'_>, interest: Interest, op: IoOp<'_>) -> IoPoll;
}

/// One re-armable timer.
pub trait Timer: Send + Unpin + fmt::Debug + 'static {
    /// Arms the timer for `at` (moving it if armed).
    fn set(&mut self, at: Instant);

    /// `Ready` once the armed instant has passed; `Pending` (the waker
    /// registered) before. Polled only while armed.
    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()>;
}

/// One timer armed for a machine's next deadline, the rule every driver
/// here follows: moved only to an earlier deadline (arming may wake the
/// reactor's thread); a later or vanished deadline lets it fire early once,
/// which the machine ignores (a spurious timeout input does nothing).
/// Public for the loops built on this driver's pieces (the guard's).
#[derive(Debug)]
pub struct DeadlineTimer<R: Runtime> {
    timer: R::Timer,
    /// When `timer` fires (`None`: it is not armed).
    armed: Option<Instant>,
}

impl<R: Runtime> DeadlineTimer<R> {
    /// A timer of `rt`, not armed.
    pub fn new(rt: &R) -> Self {
        Self {
            timer: rt.timer(),
            armed: None,
        }
    }

    /// Arms for `deadline` (the machine's next deadline, from its last
    /// `Timeout` output); `Ready(now)` once the armed instant has passed, for
    /// the machine's timeout input.
    pub fn poll(&mut self, cx: &mut Context<'_>, deadline: Option<Instant>) -> Poll<Instant> {
        if let Some(d) = deadline {
            if self.armed.is_none_or(|armed| d < armed) {
                self.timer.set(d);
                self.armed = Some(d);
            }
        }
        if self.armed.is_none() {
            return Poll::Pending;
        }
        std::task::ready!(self.timer.poll_fired(cx));
        self.armed = None;
        Poll::Ready(Instant::now())
    }
}
