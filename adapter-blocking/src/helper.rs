//! `run_helper`: run a command-line helper from inside a tool, blocking the
//! calling thread.
//!
//! Every decision comes from the core's [`HelperRun`]; this file only
//! spawns, reads, reaps, signals and waits, in the order its type doc lists.
//!
//! # Threads
//!
//! - **The calling thread** drives the run. It owns the [`HelperRun`], the
//!   [`Child`], one [`mio::Poll`] with the two output pipes (non-blocking,
//!   read until `WouldBlock`) and, on Linux, a pidfd that makes the exit a
//!   readiness event. One poller rather than a reader thread per stream: a
//!   thread blocked in `read` on a pipe that an escaped grandchild holds open
//!   cannot be stopped, so `AbandonReaders` would leak it until that
//!   grandchild exits, whereas dropping a non-blocking pipe ends the reading
//!   at once. It also keeps every chunk on the thread that owns the run, with
//!   no queue in between to bound.
//! - **An approval thread** (`mcp-approval`), only when an approval step is
//!   configured, calls [`Approver::approve`] and sends the answer back over a
//!   channel of capacity 1. The run waits for that answer, the deadline or a
//!   cancel, whichever comes first, and never for the thread: an approver
//!   that answers late, or never, is left behind and its answer is dropped.
//! - **A reaper thread** (`mcp-reap-<pid>`), only when supervision gave up
//!   without observing the exit (uninterruptible sleep after `SIGKILL`),
//!   waits for the child so it does not stay a zombie.
//!
//! # Cancel latency
//!
//! [`CancelToken`] wakes threads blocked on its condition variable, which a
//! poller cannot wait on alongside file descriptors. So, until the cancel is
//! seen, the run never sleeps longer than [`CANCEL_TICK`] (10 ms) and looks
//! at the token after every wake-up: a cancel from another thread reaches
//! the core within 10 ms plus scheduling delay, and `SIGTERM` goes to the
//! group in the same turn. The cost is at most 100 wake-ups a second while a
//! helper runs (or an approval is pending), each a few system calls.
//!
//! # The exit and the group id
//!
//! The exit is observed with `waitid(…, WNOWAIT)` (through
//! [`ProcessGroup`]): the leader stays a zombie until the run is finished,
//! which keeps its pid, and so the group id, reserved while the supervisor
//! may still `killpg` it (the group `SIGKILL` after the leader's exit, the
//! drop guard). It is reaped at the end, and its group is never signalled
//! after that.

use std::io;
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use mcp_stdio_core::ChildStream;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Signal;
use mcp_stdio_core::{
    HelperAction, HelperInput, HelperOptions, HelperOutcome, HelperOutput, HelperRun, RecordTap,
};
use mio::unix::pipe;
use mio::{Events, Interest, Poll, Token};

use crate::os;
use crate::serve::CancelToken;

/// Bytes read per read call (one buffer, shared by both streams): a whole
/// default pipe buffer.
const READ_CHUNK: usize = 64 * 1024;
/// Reads of one stream per turn (at most 1 MiB) before the other stream, the
/// exit, the clock and the cancel get their turn; the stream stays marked
/// readable, so the next turn does not wait for a new event.
const READS_PER_TURN: usize = 16;
/// The longest the run sleeps before it looks at the [`CancelToken`] again,
/// until the cancel is seen: the cancel latency.
const CANCEL_TICK: Duration = Duration::from_millis(10);
use mcp_stdio_sys::{ProcessGroup, EXIT_POLL_TICK};

const STDOUT: Token = Token(0);
const STDERR: Token = Token(1);
const CHILD_EXIT: Token = Token(2);

use mcp_stdio_sys::stamp;

pub use mcp_stdio_core::ApprovalRequest;

/// Decides approval requests: `true` approves, `false` denies.
///
/// [`approve`](Self::approve) blocks for as long as it takes (a dialog, a
/// policy service). It runs on a thread of its own; the deadline is enforced
/// by [`run_helper_with_approval`], not by the approver, and an answer that
/// comes after it is ignored.
pub trait Approver: Send + Sync {
    /// Asks for a decision.
    fn approve(&self, request: ApprovalRequest) -> bool;
}

impl<F> Approver for F
where
    F: Fn(ApprovalRequest) -> bool + Send + Sync,
{
    fn approve(&self, request: ApprovalRequest) -> bool {
        self(request)
    }
}

/// An approver that denies at once (no approval step configured, so it is
/// never consulted; if one is, the call is denied, as with the tokio adapter).
#[derive(Debug, Clone, Copy)]
struct NoApprover;

impl Approver for NoApprover {
    fn approve(&self, _request: ApprovalRequest) -> bool {
        false
    }
}

/// Runs `command` as a helper, blocking the calling thread until it is over:
/// its own process group, stdin from `/dev/null`, stdout and stderr each
/// captured within its budget and read to EOF even past it (G10). A cancel
/// of `cancel` from another thread (seen within 10 ms) →
/// `SIGTERM` to the group → grace → `SIGKILL` (G7, G11). The outcome holds
/// the exit status actually observed, both captures and the call record
/// (G12).
///
/// If the run unwinds (a panic), the helper's process group is killed (one
/// `killpg` in a drop guard).
pub fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    run_helper_with_approval(command, options, cancel, &NoApprover)
}

/// [`run_helper`] with an approval step when `options.get_approval()` gives an
/// approval deadline: the request is raised before the spawn, without
/// waiting for any output, and its deadline runs on the clock alone.
///
/// The approver runs on its own thread and the run returns at the deadline
/// (denied, `approval_timeout`) or at a cancel (`cancelled`) without waiting
/// for it. That thread may outlive this call, so the approver is cloned into
/// it: hence `Clone + 'static`, which the tokio adapter (whose approval
/// future is simply dropped) does not need. A closure that captures
/// `Arc`s or owned `Clone` values qualifies.
pub fn run_helper_with_approval<A: Approver + Clone + 'static>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
    approver: &A,
) -> HelperOutcome {
    // Counted while alive, so that `serve` waits for this run at its end.
    let _ticket = mcp_stdio_sys::helper_owners::OwnerTicket::new();
    let mut run = options.start(stamp());
    let mut tap = RecordTap::default();
    let sink = options.get_records();
    let mut guard = GroupGuard(None);
    let mut helper: Option<Helper> = None;
    let mut approval: Option<Receiver<bool>> = None;
    let mut answer: Option<Answer> = None;
    let mut cancel_seen = false;
    let mut events = Events::with_capacity(8);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut deadline = None;
    loop {
        // Inputs: the approval answer, the exit, stdout, stderr, the cancel,
        // the clock. The exit first: when it and the EOFs arrive together,
        // the record then says the helper exited by itself, which it did.
        if let Some(answer) = answer.take() {
            approval = None;
            let approved = match answer {
                Answer::Approve => true,
                Answer::Deny => false,
                Answer::Lost => {
                    tracing::warn!("the approver ended without an answer (it panicked); denying");
                    false
                }
            };
            run.handle_input(stamp(), HelperInput::Approval(approved));
        }
        if let Some(h) = helper.as_mut() {
            h.observe_exit(&mut run);
            h.read(&mut run, &mut buf);
        }
        if !cancel_seen && cancel.is_cancelled() {
            cancel_seen = true;
            run.handle_input(stamp(), HelperInput::Cancel);
        }
        if deadline.is_some_and(|d| d <= Instant::now()) {
            run.handle_input(stamp(), HelperInput::Timeout);
        }

        // Outputs, in the core's order, until the next deadline.
        loop {
            // The record of each new state goes out before the action it
            // leads to: `authorized` before the spawn (G12).
            tap.observe(&run, sink);
            let action = match run.poll_output() {
                HelperOutput::Action(action) => action,
                HelperOutput::Timeout(next) => {
                    deadline = next;
                    break;
                }
            };
            match action {
                HelperAction::RequestApproval { deadline } => {
                    let request = run.approval_request(deadline);
                    match ask(approver, request) {
                        Ok(rx) => approval = Some(rx),
                        Err(e) => {
                            // Never spawn without an answer: no thread, no approval.
                            tracing::warn!(error = %e, "no thread for the approver; denying");
                            answer = Some(Answer::Deny);
                        }
                    }
                }
                HelperAction::Spawn => {
                    approval = None;
                    match Helper::spawn(command) {
                        Ok(h) => {
                            guard.0 = Some(h.group.clone());
                            tracing::debug!(pid = h.pid, command = %command.display(), "spawned helper");
                            helper = Some(h);
                            run.handle_input(stamp(), HelperInput::Spawned);
                        }
                        Err(e) => {
                            let reason = e.to_string();
                            run.handle_input(stamp(), HelperInput::SpawnFailed(&reason));
                        }
                    }
                }
                HelperAction::SignalGroup(sig) => {
                    if let Some(group) = &guard.0 {
                        let _ = group.signal(sig);
                    }
                }
                HelperAction::CloseReader(stream) => {
                    if let Some(h) = helper.as_mut() {
                        h.io.close(stream);
                    }
                }
                HelperAction::AbandonReaders => {
                    if let Some(h) = helper.as_mut() {
                        tracing::warn!(
                            pid = h.pid,
                            "helper pipes still open past the drain deadline; abandoning readers"
                        );
                        h.io.close(ChildStream::Stdout);
                        h.io.close(ChildStream::Stderr);
                    }
                }
                HelperAction::Finished(outcome) => {
                    guard.0 = None;
                    options.release(&mut run);
                    if let Some(h) = helper.take() {
                        h.finish();
                    }
                    tap.finish(&outcome.record, sink);
                    return *outcome;
                }
                _ => {}
            }
            tap.observe(&run, sink);
        }
        if answer.is_some() {
            // The approver could not be asked: apply the denial at once.
            continue;
        }

        // Wait for readiness, the answer, the exit, a deadline or the tick.
        let timeout = wait_timeout(&run, deadline, helper.as_ref(), cancel_seen);
        if let Some(h) = helper.as_mut() {
            h.wait(&mut events, timeout);
        } else if let Some(rx) = &approval {
            // `None` cannot happen here: the tick bounds every wait until the
            // cancel is seen, and a cancel ends a run that awaits approval.
            answer = match rx.recv_timeout(timeout.unwrap_or(CANCEL_TICK)) {
                Ok(true) => Some(Answer::Approve),
                Ok(false) => Some(Answer::Deny),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Answer::Lost),
            };
        } else {
            // Nothing to wait on (a transition the next turn completes).
            std::thread::sleep(timeout.unwrap_or(CANCEL_TICK));
        }
    }
}

/// What came back from the approval thread.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Approve,
    Deny,
    /// The thread ended without answering (the approver panicked).
    Lost,
}

/// How long the next wait may last: the core's next deadline, the cancel
/// tick until the cancel is seen, the exit tick without a pidfd; zero while a
/// stream has more to read.
fn wait_timeout(
    run: &HelperRun,
    deadline: Option<Instant>,
    helper: Option<&Helper>,
    cancel_seen: bool,
) -> Option<Duration> {
    if helper.is_some_and(|h| h.io.stdout_ready || h.io.stderr_ready) {
        return Some(Duration::ZERO);
    }
    let now = Instant::now();
    let mut timeout = deadline.map(|d| d.saturating_duration_since(now));
    let mut cap = |tick: Duration| timeout = Some(timeout.map_or(tick, |t| t.min(tick)));
    if !cancel_seen {
        cap(CANCEL_TICK);
    }
    if !run.exit_seen() && helper.is_some_and(|h| h.io.exit_fd.is_none()) {
        cap(EXIT_POLL_TICK);
    }
    timeout
}

/// Starts the approver on its own thread; the answer arrives on the receiver
/// (capacity 1, so the approver never blocks on sending it, even when nobody
/// listens any more).
fn ask<A: Approver + Clone + 'static>(
    approver: &A,
    request: ApprovalRequest,
) -> io::Result<Receiver<bool>> {
    let (tx, rx) = mpsc::sync_channel(1);
    let approver = approver.clone();
    std::thread::Builder::new()
        .name("mcp-approval".to_owned())
        .spawn(move || {
            let approved = approver.approve(request);
            // The run may be over (deadline, cancel): then nobody listens.
            let _ = tx.send(approved);
        })?;
    Ok(rx)
}

/// Kills the helper's process group if the run unwinds unfinished: one
/// `killpg`, nothing that can block, and only while the id is ours (the
/// unreaped leader then stays a zombie until this process exits: a panic
/// here is a bug).
struct GroupGuard(Option<ProcessGroup>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(group) = &self.0 {
            let _ = group.signal(Signal::Kill);
        }
    }
}

/// The spawned helper: the child and its pipes, owned by the calling thread.
struct Helper {
    child: Child,
    group: ProcessGroup,
    pid: u32,
    io: Io,
}

impl Helper {
    /// Spawns the helper: no shell, its own process group, stdin from
    /// `/dev/null`, stdout and stderr into pipes made and registered before
    /// the spawn, so every step that can fail fails before anything runs.
    fn spawn(command: &CommandSpec) -> io::Result<Self> {
        let poll = Poll::new()?;
        // Both ends close-on-exec and non-blocking; the child's ends are made
        // blocking again (the helper's own writes must block, not fail).
        let (out_tx, mut stdout) = pipe::new()?;
        let (err_tx, mut stderr) = pipe::new()?;
        out_tx.set_nonblocking(false)?;
        err_tx.set_nonblocking(false)?;
        let registry = poll.registry();
        registry.register(&mut stdout, STDOUT, Interest::READABLE)?;
        registry.register(&mut stderr, STDERR, Interest::READABLE)?;
        let child = {
            let mut cmd = os::command(command)?;
            cmd.stdin(Stdio::null())
                .stdout(Stdio::from(OwnedFd::from(out_tx)))
                .stderr(Stdio::from(OwnedFd::from(err_tx)));
            cmd.spawn()?
            // `cmd` drops here with our copies of the write ends, so EOF
            // comes when the helper's side closes.
        };
        let pid = child.id();
        let group = ProcessGroup::new(pid);
        let exit_fd = os::register_exit_fd(registry, group.exit_fd(), CHILD_EXIT, pid);
        Ok(Self {
            child,
            group,
            pid,
            io: Io {
                poll,
                stdout: Some(stdout),
                stderr: Some(stderr),
                exit_fd,
                stdout_ready: true,
                stderr_ready: true,
            },
        })
    }

    /// Looks for the exit after every wake-up: one non-blocking `waitid`.
    fn observe_exit(&mut self, run: &mut HelperRun) {
        if !run.exit_seen() {
            let child = &mut self.child;
            // A failed wait: no status can ever be observed; the supervisor's
            // deadlines end the run, with `exit_status: None`.
            if let Some(r) = self.group.observe_exit(|| child.try_wait()).transpose() {
                run.handle_input(stamp(), HelperInput::Exited(r));
            }
        }
        if run.exit_seen() {
            self.io.close_exit_fd();
        }
    }

    /// Reads both streams until `WouldBlock` (or the per-turn cap), by the
    /// core's rule for what a read came to.
    fn read(&mut self, run: &mut HelperRun, buf: &mut [u8]) {
        for stream in [ChildStream::Stdout, ChildStream::Stderr] {
            for _ in 0..READS_PER_TURN {
                let (pipe, ready) = self.io.pipe(stream);
                let Some(r) = os::read_ready(pipe, ready, buf) else {
                    break;
                };
                // Only bytes keep this turn reading: what else a read came
                // to is the core's to decide (a `CloseReader` at the end).
                let more = matches!(r, Ok(n) if n > 0);
                let (child, group) = (&mut self.child, &self.group);
                let mut look = || group.observe_exit(|| child.try_wait());
                let read = HelperInput::Read {
                    stream,
                    result: r,
                    buf,
                    look: &mut look,
                };
                run.handle_input(stamp(), read);
                if !more {
                    break;
                }
            }
        }
    }

    /// Sleeps until a pipe or the pidfd is ready, or `timeout` passes.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) {
        if let Err(e) = self.io.poll.poll(events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(pid = self.pid, error = %e, "polling the helper's pipes failed");
                // Do not spin on a persistent error; deadlines still run.
                std::thread::sleep(timeout.unwrap_or(CANCEL_TICK).min(EXIT_POLL_TICK));
            }
            return;
        }
        for event in events.iter() {
            // Spurious events are harmless: the next read says `WouldBlock`
            // and the flag drops again.
            match event.token() {
                STDOUT => self.io.stdout_ready = true,
                STDERR => self.io.stderr_ready = true,
                // The exit is checked every turn.
                _ => {}
            }
        }
    }

    /// The run is over: reap the child, or hand it to a reaper thread if it
    /// has not exited (supervision gave up on it). Never blocks. Its group is
    /// never signalled after this.
    fn finish(mut self) {
        drop(self.io);
        let child = &mut self.child;
        match self.group.reap(|| child.try_wait()) {
            Ok(Some(_)) => {}
            Ok(None) => {
                let pid = self.pid;
                let mut child = self.child;
                let reaper = std::thread::Builder::new()
                    .name(format!("mcp-reap-{pid}"))
                    .spawn(move || {
                        let _ = child.wait();
                    });
                if let Err(e) = reaper {
                    tracing::warn!(pid, error = %e, "no thread to reap the helper; it stays a zombie");
                }
            }
            Err(e) => tracing::debug!(pid = self.pid, error = %e, "reaping the helper failed"),
        }
    }
}

/// The poller and the helper's pipes, non-blocking and registered.
struct Io {
    poll: Poll,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    /// A pidfd: readable once the child exits (Linux).
    exit_fd: Option<OwnedFd>,
    /// Readiness seen and not yet used up (until `WouldBlock`). They start
    /// true: a first attempt costs one syscall and misses nothing.
    stdout_ready: bool,
    stderr_ready: bool,
}

impl Io {
    /// The pipe of `stream`, with its readiness.
    fn pipe(&mut self, stream: ChildStream) -> (&mut Option<pipe::Receiver>, &mut bool) {
        match stream {
            ChildStream::Stdout => (&mut self.stdout, &mut self.stdout_ready),
            ChildStream::Stderr => (&mut self.stderr, &mut self.stderr_ready),
        }
    }

    fn close(&mut self, stream: ChildStream) {
        let poll = &self.poll;
        let (pipe, ready) = match stream {
            ChildStream::Stdout => (&mut self.stdout, &mut self.stdout_ready),
            ChildStream::Stderr => (&mut self.stderr, &mut self.stderr_ready),
        };
        crate::os::close(poll, pipe, ready);
    }

    fn close_exit_fd(&mut self) {
        crate::os::close_fd(&self.poll, &mut self.exit_fd);
    }
}
