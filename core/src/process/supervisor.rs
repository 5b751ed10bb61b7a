//! The shutdown/cancel supervisor of one child process (G11).
//!
//! [`ProcessSupervisor`] is the one owner of a child's life. It decides when to
//! close the child's stdin, when to signal its process group with `SIGTERM` and
//! `SIGKILL`, when to stop waiting for its stdout and stderr readers, and it
//! records what was actually observed in a [`ProcessOutcome`]. It does none of
//! these things itself: the adapter spawns, reads, reaps and signals, and feeds
//! the facts back in.
//!
//! # The shutdown order
//!
//! close stdin → `stdin_close_grace` → `SIGTERM` to the group → `term_grace` →
//! `SIGKILL` to the group → readers drain to EOF within `reader_drain_deadline`
//! → the exit status actually observed is recorded. A cancel skips the stdin
//! grace: stdin is closed and `SIGTERM` sent at once, `SIGKILL` follows after
//! `term_grace`. Once the child's exit is observed, no further escalation is
//! sent for it.
//!
//! # After the leader exits: the group and the pipes
//!
//! The child is the leader of its own process group. Its exit does not end the
//! group: a shell wrapper can exit while a grandchild keeps the stderr pipe
//! open. So, whenever the exit is observed while a watched stream is still open
//! (whether or not a shutdown was requested), the readers get
//! `reader_drain_deadline`; if a stream is still open when it passes and no
//! `SIGKILL` was sent yet, the group is sent `SIGKILL` and the readers get one
//! more `reader_drain_deadline`; streams still open then are abandoned (a
//! grandchild that escaped the group with `setsid` can hold a pipe forever).
//! The first wait absorbs the ordinary race between the reaper and the readers
//! (the exit is often seen a moment before the EOFs), so a child that simply
//! exits is never signalled.
//!
//! The adapter signals the group id it recorded at spawn (the child's pid, with
//! `process_group(0)`). That id is reserved only while some task uses it as
//! pid, pgid or session id; the leader counts until it is reaped, even as a
//! zombie. So adapters observe the exit without reaping (`waitid(…, WEXITED |
//! WNOHANG | WNOWAIT)`, or a pidfd's readiness followed by that call), keep the
//! leader a zombie while this supervisor may still ask for a signal, and reap
//! only after [`ProcessAction::Finished`]. After the reap they never signal the
//! group again, from any path (`Drop` guards included): the group may be empty
//! by then (its holder escaped with `setsid`) and the id reused by an unrelated
//! program's group. `mcp_stdio_sys::ProcessGroup` holds that rule for every
//! adapter. `ESRCH` from `killpg` means the group is gone and is not an error.
//!
//! # Bounded in time and memory
//!
//! From the first shutdown or cancel request, [`ProcessAction::Finished`] comes
//! at most `stdin_close_grace + term_grace + 2 × reader_drain_deadline` later
//! (6 s with the defaults; a cancel drops the first term), whatever the child
//! does. A child that never exits even after `SIGKILL` (uninterruptible sleep)
//! ends the supervision `reader_drain_deadline` after the `SIGKILL` with
//! `exit_status: None` and [`EndedBy::ExitNotObserved`]; the adapter should then
//! hand the child to a background reaper and never block on it. Without a
//! request, a child that runs is supervised for as long as it runs; after its
//! exit, `Finished` comes within `2 × reader_drain_deadline`.
//!
//! The action queue holds at most [`ACTION_QUEUE_CAPACITY`] entries: each kind
//! of action is emitted at most once per child, so it cannot grow further even
//! if the adapter never polls.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// How a process ended, as actually observed by `waitpid` (never invented).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// Exited by itself with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

/// How one output stream (stdout or stderr) of a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// Read to end-of-file before any shutdown or cancel was requested.
    Eof,
    /// Read to end-of-file after a cancel was requested.
    EofAfterCancel,
    /// Read to end-of-file after a shutdown (and no cancel) was requested.
    EofAfterShutdown,
    /// Still open when the reader drain deadline passed; the reader was abandoned
    /// (an escaped grandchild can hold a pipe forever).
    AbandonedAfterDeadline,
}

/// The signal numbers the supervisor sends (the same on every Unix).
const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// Default [`SupervisorConfig::stdin_close_grace`]: 2 s.
pub const DEFAULT_STDIN_CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Default [`SupervisorConfig::term_grace`]: 2 s.
pub const DEFAULT_TERM_GRACE: Duration = Duration::from_secs(2);
/// Default [`SupervisorConfig::reader_drain_deadline`]: 1 s.
pub const DEFAULT_READER_DRAIN_DEADLINE: Duration = Duration::from_secs(1);

/// The most actions [`ProcessSupervisor`] ever holds queued: one each of
/// `CloseStdin`, `SignalGroup(Term)`, `SignalGroup(Kill)`, `AbandonReaders` and
/// `Finished`, each emitted at most once per child.
pub const ACTION_QUEUE_CAPACITY: usize = 5;

/// Timing of the shutdown sequence.
///
/// A duration so large that `now + duration` overflows [`Instant`] means
/// "never": that step then waits for the child instead of escalating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupervisorConfig {
    stdin_close_grace: Duration,
    term_grace: Duration,
    reader_drain_deadline: Duration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            stdin_close_grace: DEFAULT_STDIN_CLOSE_GRACE,
            term_grace: DEFAULT_TERM_GRACE,
            reader_drain_deadline: DEFAULT_READER_DRAIN_DEADLINE,
        }
    }
}

impl SupervisorConfig {
    /// Sets how long a shutdown waits after closing stdin before `SIGTERM`
    /// (default 2 s). Not used by a cancel, nor when stdin is not a pipe.
    pub fn stdin_close_grace(&mut self, grace: Duration) -> &mut Self {
        self.stdin_close_grace = grace;
        self
    }
    /// Sets how long to wait after `SIGTERM` before `SIGKILL` (default 2 s).
    pub fn term_grace(&mut self, grace: Duration) -> &mut Self {
        self.term_grace = grace;
        self
    }
    /// Sets how long the readers may take to reach EOF after the exit is
    /// observed or `SIGKILL` is sent, and how long an exit is awaited after
    /// `SIGKILL` (default 1 s). An escaped grandchild can hold a pipe forever.
    pub fn reader_drain_deadline(&mut self, deadline: Duration) -> &mut Self {
        self.reader_drain_deadline = deadline;
        self
    }
    /// The stdin close grace.
    pub fn get_stdin_close_grace(&self) -> Duration {
        self.stdin_close_grace
    }
    /// The `SIGTERM` grace.
    pub fn get_term_grace(&self) -> Duration {
        self.term_grace
    }
    /// The reader drain deadline.
    pub fn get_reader_drain_deadline(&self) -> Duration {
        self.reader_drain_deadline
    }
}

/// Which of the child's standard streams the adapter holds as pipes.
///
/// An output stream that is not a pipe (inherited, `/dev/null`, a file) has no
/// reader to wait for; its end in the outcome is `None`. Without a stdin pipe a
/// shutdown has no stdin to close and sends `SIGTERM` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChildPipes {
    /// stdin is a pipe the adapter writes to.
    pub stdin: bool,
    /// stdout is a pipe the adapter reads.
    pub stdout: bool,
    /// stderr is a pipe the adapter reads.
    pub stderr: bool,
}

impl ChildPipes {
    /// All three streams are pipes (an MCP server).
    pub const ALL: Self = Self {
        stdin: true,
        stdout: true,
        stderr: true,
    };
    /// No stream is a pipe.
    pub const NONE: Self = Self {
        stdin: false,
        stdout: false,
        stderr: false,
    };
    /// stdout and stderr are pipes, stdin is not (a captured helper).
    pub const OUTPUTS: Self = Self {
        stdin: false,
        stdout: true,
        stderr: true,
    };
}

/// A signal the supervisor asks the adapter to send to the child's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// `SIGTERM`: please exit.
    Term,
    /// `SIGKILL`: cannot be caught or ignored.
    Kill,
}

/// What the adapter must do, from [`ProcessSupervisor::poll_action`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessAction {
    /// Close (drop) the write end of the child's stdin pipe.
    CloseStdin,
    /// Send this signal to the process group recorded at spawn (`killpg`);
    /// `ESRCH` (the group is gone) is not an error.
    SignalGroup(Signal),
    /// Stop the readers of the streams that are still open (drop their read
    /// ends) and stop waiting for them. Always followed by `Finished`.
    AbandonReaders,
    /// Supervision is over; here is what was observed. Emitted exactly once,
    /// always last.
    Finished(ProcessOutcome),
}

/// The last step of the shutdown sequence taken before the exit was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// Exited before any shutdown step was taken, or after one but with its
    /// stdout already at EOF before that step: it was ending on its own.
    ExitedByItself,
    /// Died of a signal the supervisor did not send (a crash such as
    /// `SIGSEGV` or `SIGABRT`, or a kill from elsewhere), whatever step had
    /// been taken; the signal is in `exit_status`.
    Crashed,
    /// Exited after its stdin was closed, before `SIGTERM`.
    ExitedAfterStdinClose,
    /// Exited after `SIGTERM`, before `SIGKILL`.
    ExitedAfterTerm,
    /// Exited after `SIGKILL`.
    ExitedAfterKill,
    /// No exit was observed within `reader_drain_deadline` after `SIGKILL`
    /// (e.g. uninterruptible sleep); supervision gave up and `exit_status` is
    /// `None`.
    ExitNotObserved,
}

/// What was observed over a child's life. Times are durations since spawn.
///
/// Serialized, every time is a number of milliseconds (to the microsecond)
/// and its field name ends in `_ms` (`cancel_to_exit_ms`, `exited_at_ms`, …);
/// see [`crate::duration_ms`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessOutcome {
    /// The exit status actually observed; `None` when none was (never an
    /// invented `0`).
    pub exit_status: Option<ExitStatus>,
    /// The last shutdown step taken before the exit.
    pub ended_by: EndedBy,
    /// How stdout ended; `None` when it was not a pipe.
    pub stdout: Option<StreamEnd>,
    /// How stderr ended; `None` when it was not a pipe.
    pub stderr: Option<StreamEnd>,
    /// From the cancel request to the observed exit; `None` without a cancel,
    /// without an observed exit, or when the exit came first.
    #[serde(
        rename = "cancel_to_exit_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub cancel_to_exit: Option<Duration>,
    /// From the shutdown request to the observed exit; `None` without a
    /// shutdown, without an observed exit, or when the exit came first.
    #[serde(
        rename = "shutdown_to_exit_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub shutdown_to_exit: Option<Duration>,
    /// When a shutdown was first requested.
    #[serde(
        rename = "shutdown_requested_at_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub shutdown_requested_at: Option<Duration>,
    /// When a cancel was first requested.
    #[serde(
        rename = "cancel_requested_at_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub cancel_requested_at: Option<Duration>,
    /// When stdin was closed (`CloseStdin` emitted).
    #[serde(
        rename = "stdin_closed_at_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub stdin_closed_at: Option<Duration>,
    /// When `SIGTERM` was sent to the group; `None` if it never was.
    #[serde(
        rename = "term_sent_at_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub term_sent_at: Option<Duration>,
    /// When `SIGKILL` was sent to the group; `None` if it never was. It may
    /// come after `exited_at`: the group outlived its leader.
    #[serde(
        rename = "kill_sent_at_ms",
        with = "crate::duration_ms::option",
        default
    )]
    pub kill_sent_at: Option<Duration>,
    /// When the exit was observed.
    #[serde(rename = "exited_at_ms", with = "crate::duration_ms::option", default)]
    pub exited_at: Option<Duration>,
    /// When supervision finished.
    #[serde(rename = "finished_at_ms", with = "crate::duration_ms")]
    pub finished_at: Duration,
}

impl ProcessOutcome {
    /// True when `SIGKILL` went to the group after the leader's exit was
    /// observed (a grandchild held a pipe open).
    pub fn group_killed_after_exit(&self) -> bool {
        matches!((self.kill_sent_at, self.exited_at), (Some(kill), Some(exit)) if kill >= exit)
    }
}

/// One reader's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamState {
    /// Not a pipe; nothing to wait for.
    Unwatched,
    /// The reader has not reported EOF.
    Open,
    /// The reader is done.
    Ended(StreamEnd),
}

impl StreamState {
    fn end(self) -> Option<StreamEnd> {
        match self {
            Self::Unwatched => None,
            // Still open when supervision finishes: its reader is abandoned.
            Self::Open => Some(StreamEnd::AbandonedAfterDeadline),
            Self::Ended(end) => Some(end),
        }
    }
}

/// What happens when the one timer expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    /// Stdin grace over: `SIGTERM`.
    SendTerm,
    /// `SIGTERM` grace over: `SIGKILL`.
    SendKill,
    /// Drain deadline over: `SIGKILL` the group if not yet done, else give up.
    EndDrain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timer {
    at: Instant,
    on_expiry: Expiry,
}

/// An action waiting in the queue; `Finished` takes its outcome on poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queued {
    CloseStdin,
    Term,
    Kill,
    AbandonReaders,
    Finished,
}

/// The supervisor of one child process: the single owner of its shutdown and
/// cancel path (G11).
///
/// # Methods
///
/// - **Getters:** [`config`](Self::config), [`is_spawned`](Self::is_spawned),
///   [`is_finished`](Self::is_finished), [`exit_status`](Self::exit_status),
///   [`outcome`](Self::outcome), [`ignored_inputs`](Self::ignored_inputs).
/// - **Inputs from the system** (`handle_*`):
///   [`handle_spawned`](Self::handle_spawned),
///   [`handle_stdout_eof`](Self::handle_stdout_eof),
///   [`handle_stderr_eof`](Self::handle_stderr_eof),
///   [`handle_exited`](Self::handle_exited),
///   [`handle_timeout`](Self::handle_timeout).
/// - **Commands from the application:** [`shutdown`](Self::shutdown)
///   (graceful: close stdin first), [`cancel`](Self::cancel) (`SIGTERM` at once).
/// - **Outputs** (`poll_*`): [`poll_action`](Self::poll_action),
///   [`poll_timeout`](Self::poll_timeout).
///
/// After any input or command, poll until nothing is left: `poll_action()`
/// until `None`, then `poll_timeout()`, and call `handle_timeout(now)` once
/// `now` reaches it. A spurious `handle_timeout` (before the deadline) does
/// nothing.
///
/// # States
///
/// - **not spawned** → `handle_spawned` → **running**. Every other input before
///   that is ignored.
/// - **running**, no request: waits; no deadline. `shutdown` → `CloseStdin`,
///   **stdin closed** (deadline `stdin_close_grace`), or straight to `SIGTERM`
///   without a stdin pipe. `cancel` → `CloseStdin` and `SignalGroup(Term)`,
///   **termed**.
/// - **stdin closed** → deadline → `SignalGroup(Term)`, **termed** (deadline
///   `term_grace`); a `cancel` here sends `SIGTERM` at once.
/// - **termed** → deadline → `SignalGroup(Kill)`, **killed** (deadline
///   `reader_drain_deadline`).
/// - **killed** → deadline with no exit observed → `AbandonReaders` (if a
///   stream is open) and `Finished` with `ExitNotObserved`.
/// - **exited** (from any of the above, on `handle_exited`): escalation stops.
///   All watched streams ended → `Finished`. Otherwise **draining**: deadline
///   `reader_drain_deadline` from the exit (or the pending one from `SIGKILL`).
///   A `cancel` here sends `SignalGroup(Kill)` at once.
/// - **draining** → all streams at EOF → `Finished`; deadline → without a
///   `SIGKILL` so far: `SignalGroup(Kill)` and a fresh `reader_drain_deadline`;
///   with one: `AbandonReaders`, `Finished`.
/// - **finished**: every input is ignored; no deadline.
///
/// # Bad input
///
/// Facts that make no sense in the current state (an EOF or exit before
/// spawn, a second spawn or exit, an EOF twice or on a stream that is not a
/// pipe, any fact after `Finished`, a command before spawn) are ignored and
/// counted in [`ignored_inputs`](Self::ignored_inputs). Repeated commands are
/// idempotent and not counted. A `now` earlier than one already seen is taken
/// as the latest one seen, so time never runs backwards inside.
#[derive(Debug)]
pub struct ProcessSupervisor {
    config: SupervisorConfig,
    pipes: ChildPipes,
    /// Latest `now` seen; inputs never move time backwards.
    latest: Option<Instant>,
    spawned_at: Option<Instant>,
    shutdown_at: Option<Instant>,
    cancel_at: Option<Instant>,
    stdin_closed_at: Option<Instant>,
    term_at: Option<Instant>,
    kill_at: Option<Instant>,
    /// When stdout reached EOF: before our first step, it tells an exit of
    /// the child's own.
    stdout_eof_at: Option<Instant>,
    exit: Option<(Instant, ExitStatus, EndedBy)>,
    stdout: StreamState,
    stderr: StreamState,
    timer: Option<Timer>,
    /// Bounded by [`ACTION_QUEUE_CAPACITY`]: each kind is queued at most once.
    actions: SmallVec<[Queued; ACTION_QUEUE_CAPACITY]>,
    outcome: Option<ProcessOutcome>,
    ignored_inputs: u64,
}

impl ProcessSupervisor {
    /// A supervisor for a child about to be spawned.
    pub fn new(config: SupervisorConfig) -> Self {
        Self {
            config,
            pipes: ChildPipes::NONE,
            latest: None,
            spawned_at: None,
            shutdown_at: None,
            cancel_at: None,
            stdin_closed_at: None,
            term_at: None,
            kill_at: None,
            stdout_eof_at: None,
            exit: None,
            stdout: StreamState::Unwatched,
            stderr: StreamState::Unwatched,
            timer: None,
            actions: SmallVec::new(),
            outcome: None,
            ignored_inputs: 0,
        }
    }

    // ----- getters -----

    /// The configuration.
    pub fn config(&self) -> &SupervisorConfig {
        &self.config
    }

    /// True once `handle_spawned` was accepted.
    pub fn is_spawned(&self) -> bool {
        self.spawned_at.is_some()
    }

    /// True once `Finished` has been queued.
    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }

    /// The exit status observed so far.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit.map(|(_, status, _)| status)
    }

    /// The outcome, once finished (the same one `Finished` carries).
    pub fn outcome(&self) -> Option<&ProcessOutcome> {
        self.outcome.as_ref()
    }

    /// Inputs ignored because they made no sense in the state they arrived in.
    pub fn ignored_inputs(&self) -> u64 {
        self.ignored_inputs
    }

    // ----- inputs -----

    /// The child was spawned at `now`, leader of its own process group, with
    /// these streams as pipes.
    pub fn handle_spawned(&mut self, now: Instant, pipes: ChildPipes) {
        let now = self.tick(now);
        if self.spawned_at.is_some() {
            self.ignore("spawned twice");
            return;
        }
        self.spawned_at = Some(now);
        self.pipes = pipes;
        self.stdout = watched(pipes.stdout);
        self.stderr = watched(pipes.stderr);
    }

    /// The stdout reader reached EOF (a read error also ends the reader:
    /// report it here too).
    pub fn handle_stdout_eof(&mut self, now: Instant) {
        self.stream_eof(now, true);
    }

    /// The stderr reader reached EOF (a read error also ends the reader:
    /// report it here too).
    pub fn handle_stderr_eof(&mut self, now: Instant) {
        self.stream_eof(now, false);
    }

    /// The child's exit was observed (`waitpid`) with this status. Once the
    /// exit is seen, no `SIGTERM` is ever sent; `SIGKILL` goes to the group
    /// only while a watched pipe is still open (see the module docs).
    pub fn handle_exited(&mut self, now: Instant, status: ExitStatus) {
        let now = self.tick(now);
        if !self.accepts_facts() {
            self.ignore("exit before spawn or after finish");
            return;
        }
        if self.exit.is_some() {
            self.ignore("exited twice");
            return;
        }
        let sent = |signal: i32| match signal {
            SIGKILL => self.kill_at.is_some(),
            SIGTERM => self.term_at.is_some(),
            _ => false,
        };
        // The first step we took, and whether stdout had ended before it.
        let first_step = [self.stdin_closed_at, self.term_at, self.kill_at]
            .into_iter()
            .flatten()
            .min();
        let ending_before = match (self.stdout_eof_at, first_step) {
            (Some(eof), Some(step)) => eof <= step,
            _ => false,
        };
        let ended_by = match status {
            ExitStatus::Signal(signal) if !sent(signal) => EndedBy::Crashed,
            ExitStatus::Signal(SIGKILL) => EndedBy::ExitedAfterKill,
            ExitStatus::Signal(_) => EndedBy::ExitedAfterTerm,
            _ if first_step.is_none() || ending_before => EndedBy::ExitedByItself,
            _ if self.kill_at.is_some() => EndedBy::ExitedAfterKill,
            _ if self.term_at.is_some() => EndedBy::ExitedAfterTerm,
            _ => EndedBy::ExitedAfterStdinClose,
        };
        self.exit = Some((now, status, ended_by));
        if !self.any_stream_open() {
            self.finish(now);
            return;
        }
        // No more escalation for the leader; a pending post-KILL drain deadline
        // is kept (it is earlier than a new one would be).
        if !matches!(
            self.timer,
            Some(Timer {
                on_expiry: Expiry::EndDrain,
                ..
            })
        ) {
            self.set_timer(now, self.config.reader_drain_deadline, Expiry::EndDrain);
        }
    }

    /// Time has reached `now`: act on an expired deadline. Does nothing before
    /// the deadline from [`poll_timeout`](Self::poll_timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.tick(now);
        // Terminates: each expiry moves strictly along SendTerm → SendKill →
        // EndDrain (no KILL yet) → EndDrain (KILL sent) → finished, and every
        // step but the last sends a once-only signal. At most four turns.
        while let Some(timer) = self.timer {
            if timer.at > now {
                break;
            }
            self.timer = None;
            match timer.on_expiry {
                Expiry::SendTerm => self.send_term(now),
                Expiry::SendKill => self.send_kill(now),
                Expiry::EndDrain => {
                    if self.exit.is_some() && self.any_stream_open() && self.kill_at.is_none() {
                        // The leader is gone but something still holds a pipe.
                        self.send_kill(now);
                    } else {
                        self.finish(now);
                    }
                }
            }
        }
    }

    // ----- commands -----

    /// Requests a graceful shutdown: close stdin, then escalate to `SIGTERM`
    /// and `SIGKILL` after their graces. Idempotent; after a cancel it does
    /// nothing more.
    pub fn shutdown(&mut self, now: Instant) {
        let now = self.tick(now);
        if self.spawned_at.is_none() {
            self.ignore("shutdown before spawn");
            return;
        }
        if self.is_finished() {
            return;
        }
        let first_request = self.shutdown_at.is_none() && self.cancel_at.is_none();
        self.shutdown_at.get_or_insert(now);
        if !first_request {
            return;
        }
        // Even after the exit, the adapter should let go of the stdin pipe.
        let closed = self.close_stdin(now);
        if self.exit.is_some() {
            // Draining already runs on its own deadline.
            return;
        }
        if closed {
            self.set_timer(now, self.config.stdin_close_grace, Expiry::SendTerm);
        } else {
            self.send_term(now);
        }
    }

    /// Requests a cancel: close stdin and send `SIGTERM` at once, `SIGKILL`
    /// after `term_grace`. After a shutdown it skips what is left of the stdin
    /// grace; after the exit, with a stream still open, it sends `SIGKILL` to
    /// the group at once. Idempotent.
    pub fn cancel(&mut self, now: Instant) {
        let now = self.tick(now);
        if self.spawned_at.is_none() {
            self.ignore("cancel before spawn");
            return;
        }
        if self.is_finished() || self.cancel_at.is_some() {
            return;
        }
        self.cancel_at = Some(now);
        self.close_stdin(now);
        if self.exit.is_some() {
            if self.any_stream_open() && self.kill_at.is_none() {
                self.send_kill(now);
            }
        } else if self.term_at.is_none() {
            self.send_term(now);
        }
        // Otherwise SIGTERM is out and SIGKILL is scheduled or sent.
    }

    // ----- outputs -----

    /// The next thing the adapter must do.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<ProcessAction> {
        if self.actions.is_empty() {
            return None;
        }
        Some(match self.actions.remove(0) {
            Queued::CloseStdin => ProcessAction::CloseStdin,
            Queued::Term => ProcessAction::SignalGroup(Signal::Term),
            Queued::Kill => ProcessAction::SignalGroup(Signal::Kill),
            Queued::AbandonReaders => ProcessAction::AbandonReaders,
            Queued::Finished => ProcessAction::Finished(
                self.outcome
                    .clone()
                    .expect("Finished is queued only by `finish`, which sets the outcome"),
            ),
        })
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called;
    /// `None` when no deadline is pending.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timer.map(|timer| timer.at)
    }

    // ----- internals -----

    /// Clamps `now` so that time never runs backwards.
    fn tick(&mut self, now: Instant) -> Instant {
        let now = match self.latest {
            Some(latest) if latest > now => latest,
            _ => now,
        };
        self.latest = Some(now);
        now
    }

    fn ignore(&mut self, what: &'static str) {
        self.ignored_inputs = self.ignored_inputs.saturating_add(1);
        tracing::debug!(input = what, "process supervisor ignored an input");
    }

    fn accepts_facts(&self) -> bool {
        self.spawned_at.is_some() && !self.is_finished()
    }

    fn stream_eof(&mut self, now: Instant, stdout: bool) {
        let now = self.tick(now);
        if !self.accepts_facts() {
            self.ignore("eof before spawn or after finish");
            return;
        }
        let end = if self.cancel_at.is_some() {
            StreamEnd::EofAfterCancel
        } else if self.shutdown_at.is_some() {
            StreamEnd::EofAfterShutdown
        } else {
            StreamEnd::Eof
        };
        let state = if stdout {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        if *state != StreamState::Open {
            self.ignore("eof on an unwatched or ended stream");
            return;
        }
        *state = StreamState::Ended(end);
        if stdout {
            self.stdout_eof_at = Some(now);
        }
        if self.exit.is_some() && !self.any_stream_open() {
            self.finish(now);
        }
    }

    fn any_stream_open(&self) -> bool {
        self.stdout == StreamState::Open || self.stderr == StreamState::Open
    }

    fn set_timer(&mut self, now: Instant, after: Duration, on_expiry: Expiry) {
        // An overflowing deadline means "never" (see `SupervisorConfig`).
        self.timer = now.checked_add(after).map(|at| Timer { at, on_expiry });
    }

    /// Queues `CloseStdin` once, if stdin is a pipe. True if it did.
    fn close_stdin(&mut self, now: Instant) -> bool {
        if !self.pipes.stdin || self.stdin_closed_at.is_some() {
            return false;
        }
        self.stdin_closed_at = Some(now);
        self.actions.push(Queued::CloseStdin);
        true
    }

    fn send_term(&mut self, now: Instant) {
        if self.term_at.is_none() {
            self.term_at = Some(now);
            self.actions.push(Queued::Term);
        }
        self.set_timer(now, self.config.term_grace, Expiry::SendKill);
    }

    fn send_kill(&mut self, now: Instant) {
        if self.kill_at.is_none() {
            self.kill_at = Some(now);
            self.actions.push(Queued::Kill);
        }
        self.set_timer(now, self.config.reader_drain_deadline, Expiry::EndDrain);
    }

    fn finish(&mut self, now: Instant) {
        if self.is_finished() {
            return;
        }
        let Some(spawned_at) = self.spawned_at else {
            // Unreachable: every path to `finish` requires a spawn. Stay
            // consistent rather than panic.
            return;
        };
        self.timer = None;
        if self.any_stream_open() {
            self.actions.push(Queued::AbandonReaders);
        }
        let since = |t: Instant| t.saturating_duration_since(spawned_at);
        let to_exit = |req: Option<Instant>| match (req, self.exit) {
            (Some(req), Some((exit, _, _))) if exit >= req => Some(exit - req),
            _ => None,
        };
        let outcome = ProcessOutcome {
            exit_status: self.exit.map(|(_, status, _)| status),
            ended_by: self
                .exit
                .map_or(EndedBy::ExitNotObserved, |(_, _, ended_by)| ended_by),
            stdout: self.stdout.end(),
            stderr: self.stderr.end(),
            cancel_to_exit: to_exit(self.cancel_at),
            shutdown_to_exit: to_exit(self.shutdown_at),
            shutdown_requested_at: self.shutdown_at.map(since),
            cancel_requested_at: self.cancel_at.map(since),
            stdin_closed_at: self.stdin_closed_at.map(since),
            term_sent_at: self.term_at.map(since),
            kill_sent_at: self.kill_at.map(since),
            exited_at: self.exit.map(|(at, _, _)| since(at)),
            finished_at: since(now),
        };
        for state in [&mut self.stdout, &mut self.stderr] {
            if *state == StreamState::Open {
                *state = StreamState::Ended(StreamEnd::AbandonedAfterDeadline);
            }
        }
        self.outcome = Some(outcome);
        self.actions.push(Queued::Finished);
    }
}

fn watched(pipe: bool) -> StreamState {
    if pipe {
        StreamState::Open
    } else {
        StreamState::Unwatched
    }
}

/// Fuzz entry point: drives a supervisor with an arbitrary sequence of inputs
/// (any order, repeated, spurious timeouts, time only moving forward) and
/// checks its invariants. Panics on a violated invariant.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_supervisor(data: &[u8]) {
    fuzzing::run(data);
}

#[cfg(feature = "fuzzing")]
mod fuzzing {
    use super::*;
    use arbitrary::{Result, Unstructured};

    /// What the harness has fed in, to check the supervisor's outputs against.
    struct Harness {
        sup: ProcessSupervisor,
        now: Instant,
        pipes: Option<ChildPipes>,
        /// First exit accepted (after spawn, before finish).
        exit: Option<ExitStatus>,
        /// EOF accepted on stdout / stderr.
        eof: [bool; 2],
        /// That EOF came after a shutdown or cancel request.
        eof_after_request: [bool; 2],
        eof_after_cancel: [bool; 2],
        requested: bool,
        cancel_requested: bool,
        closed_stdin: bool,
        term: bool,
        kill: bool,
        abandoned: bool,
        finished: Option<ProcessOutcome>,
    }

    pub(super) fn run(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let config = *SupervisorConfig::default()
            .stdin_close_grace(ms(&mut u))
            .term_grace(ms(&mut u))
            .reader_drain_deadline(ms(&mut u));
        let mut h = Harness {
            sup: ProcessSupervisor::new(config),
            // The harness's one base instant; the supervisor never reads the clock.
            now: Instant::now(),
            pipes: None,
            exit: None,
            eof: [false; 2],
            eof_after_request: [false; 2],
            eof_after_cancel: [false; 2],
            requested: false,
            cancel_requested: false,
            closed_stdin: false,
            term: false,
            kill: false,
            abandoned: false,
            finished: None,
        };
        for _ in 0..64 {
            if h.step(&mut u).is_err() {
                break;
            }
        }
        h.end(u.arbitrary().unwrap_or(false));
    }

    fn ms(u: &mut Unstructured<'_>) -> Duration {
        Duration::from_millis(u.int_in_range(0..=3_000u64).unwrap_or(1_000))
    }

    impl Harness {
        fn live(&self) -> bool {
            self.pipes.is_some() && self.finished.is_none()
        }

        fn step(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
            match u.int_in_range(0..=10u8)? {
                0 => {
                    let pipes = ChildPipes {
                        stdin: u.arbitrary()?,
                        stdout: u.arbitrary()?,
                        stderr: u.arbitrary()?,
                    };
                    if self.pipes.is_none() {
                        self.pipes = Some(pipes);
                    }
                    self.sup.handle_spawned(self.now, pipes);
                }
                1 => self.eof(0),
                2 => self.eof(1),
                3 => {
                    let status = if u.arbitrary()? {
                        ExitStatus::Code(u.arbitrary()?)
                    } else {
                        ExitStatus::Signal(u.int_in_range(1..=64)?)
                    };
                    if self.live() && self.exit.is_none() {
                        self.exit = Some(status);
                    }
                    self.sup.handle_exited(self.now, status);
                }
                4 => {
                    self.requested |= self.live();
                    self.sup.shutdown(self.now);
                }
                5 => {
                    self.requested |= self.live();
                    self.cancel_requested |= self.live();
                    self.sup.cancel(self.now);
                }
                // A spurious or due timeout at the current time.
                6 => return self.timeout_at(self.now),
                // Jump to the next deadline.
                7 => {
                    if let Some(at) = self.sup.poll_timeout() {
                        self.now = self.now.max(at);
                    }
                    return self.timeout_at(self.now);
                }
                // Just before the next deadline: must do nothing.
                8 => {
                    if let Some(at) = self.sup.poll_timeout() {
                        if let Some(before) = at.checked_sub(Duration::from_millis(1)) {
                            if before >= self.now {
                                self.now = before;
                                let queued = self.sup.actions.len();
                                self.sup.handle_timeout(self.now);
                                assert_eq!(self.sup.actions.len(), queued, "early timeout acted");
                                assert_eq!(self.sup.poll_timeout(), Some(at));
                            }
                        }
                    }
                }
                _ => self.now += ms(u),
            }
            self.drain();
            Ok(())
        }

        fn timeout_at(&mut self, now: Instant) -> Result<()> {
            self.sup.handle_timeout(now);
            self.drain();
            if let Some(at) = self.sup.poll_timeout() {
                assert!(at > now, "deadline left expired after handle_timeout");
            }
            Ok(())
        }

        fn eof(&mut self, index: usize) {
            if self.live() && !self.eof[index] {
                self.eof[index] = true;
                self.eof_after_request[index] = self.requested;
                self.eof_after_cancel[index] = self.cancel_requested;
            }
            if index == 0 {
                self.sup.handle_stdout_eof(self.now);
            } else {
                self.sup.handle_stderr_eof(self.now);
            }
        }

        fn watched(&self) -> [bool; 2] {
            self.pipes.map_or([false; 2], |p| [p.stdout, p.stderr])
        }

        fn any_open(&self) -> bool {
            let watched = self.watched();
            (watched[0] && !self.eof[0]) || (watched[1] && !self.eof[1])
        }

        fn drain(&mut self) {
            while let Some(action) = self.sup.poll_action() {
                assert!(self.finished.is_none(), "action after Finished: {action:?}");
                let pipes = self.pipes.expect("no action before spawn");
                match action {
                    ProcessAction::CloseStdin => {
                        assert!(pipes.stdin && !self.closed_stdin && self.requested);
                        self.closed_stdin = true;
                    }
                    ProcessAction::SignalGroup(Signal::Term) => {
                        assert!(!self.term && !self.kill && self.requested);
                        assert!(self.exit.is_none(), "TERM after the exit");
                        self.term = true;
                    }
                    ProcessAction::SignalGroup(Signal::Kill) => {
                        assert!(!self.kill);
                        if self.exit.is_some() {
                            assert!(self.any_open(), "group KILL after exit with pipes closed");
                        } else {
                            assert!(self.term, "KILL without TERM before the exit");
                        }
                        self.kill = true;
                    }
                    ProcessAction::AbandonReaders => {
                        assert!(!self.abandoned && self.any_open());
                        self.abandoned = true;
                    }
                    ProcessAction::Finished(outcome) => {
                        self.check_outcome(&outcome);
                        self.finished = Some(outcome);
                    }
                }
            }
            assert_eq!(self.abandoned, self.abandoned && self.finished.is_some());
            assert_eq!(self.sup.is_finished(), self.finished.is_some());
            if self.finished.is_some() {
                assert_eq!(self.sup.poll_timeout(), None, "deadline after Finished");
            }
            if self.pipes.is_some() && self.exit.is_some() && !self.any_open() {
                assert!(
                    self.finished.is_some(),
                    "exited and drained but not finished"
                );
            }
        }

        fn check_outcome(&self, o: &ProcessOutcome) {
            assert_eq!(o.exit_status, self.exit, "exit status not the observed one");
            assert_eq!(
                o.exit_status.is_none(),
                o.ended_by == EndedBy::ExitNotObserved
            );
            if o.exit_status.is_none() {
                assert!(self.kill, "gave up on the exit without KILL");
            }
            let ends = [o.stdout, o.stderr];
            for (i, watched) in self.watched().into_iter().enumerate() {
                match (watched, self.eof[i], ends[i]) {
                    (false, _, None) => {}
                    (true, true, Some(StreamEnd::Eof)) => assert!(!self.eof_after_request[i]),
                    (true, true, Some(StreamEnd::EofAfterCancel)) => {
                        assert!(self.eof_after_cancel[i]);
                    }
                    (true, true, Some(StreamEnd::EofAfterShutdown)) => {
                        assert!(self.eof_after_request[i] && !self.eof_after_cancel[i]);
                    }
                    (true, false, Some(StreamEnd::AbandonedAfterDeadline)) => {
                        assert!(self.abandoned);
                        // A pipe is given up on only after the group was killed.
                        assert!(self.kill, "abandoned without a group KILL");
                    }
                    other => panic!("stream {i} end inconsistent: {other:?}"),
                }
            }
            assert_eq!(o.term_sent_at.is_some(), self.term);
            assert_eq!(o.kill_sent_at.is_some(), self.kill);
        }

        /// Drives to the end: either the child exits and its pipes close, or a
        /// cancel and the deadlines alone must finish it.
        fn end(&mut self, natural: bool) {
            if self.pipes.is_none() {
                self.pipes = Some(ChildPipes::ALL);
                self.sup.handle_spawned(self.now, ChildPipes::ALL);
            }
            if natural {
                if self.live() && self.exit.is_none() {
                    self.exit = Some(ExitStatus::Code(0));
                }
                self.sup.handle_exited(self.now, ExitStatus::Code(0));
                self.drain();
                self.eof(0);
                self.drain();
                self.eof(1);
                self.drain();
            } else {
                self.requested |= self.live();
                self.cancel_requested |= self.live();
                self.sup.cancel(self.now);
                self.drain();
                for _ in 0..8 {
                    let Some(at) = self.sup.poll_timeout() else {
                        break;
                    };
                    self.now = self.now.max(at);
                    let _ = self.timeout_at(self.now);
                }
            }
            assert!(self.finished.is_some(), "never finished");
            // Nothing more comes out, whatever arrives late.
            self.sup.handle_exited(self.now, ExitStatus::Signal(9));
            self.eof(0);
            self.eof(1);
            self.sup.cancel(self.now);
            self.sup.shutdown(self.now);
            self.sup
                .handle_timeout(self.now + Duration::from_secs(3600));
            assert_eq!(self.sup.poll_action(), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn drain(sup: &mut ProcessSupervisor) -> Vec<ProcessAction> {
        // Bounded: the queue never holds more than ACTION_QUEUE_CAPACITY.
        let mut out = Vec::new();
        for _ in 0..=ACTION_QUEUE_CAPACITY {
            match sup.poll_action() {
                Some(action) => out.push(action),
                None => return out,
            }
        }
        panic!("more actions than the queue capacity: {out:?}");
    }

    fn spawned(t0: Instant, pipes: ChildPipes) -> ProcessSupervisor {
        let mut sup = ProcessSupervisor::new(SupervisorConfig::default());
        sup.handle_spawned(t0, pipes);
        assert_eq!(drain(&mut sup), []);
        assert_eq!(sup.poll_timeout(), None);
        sup
    }

    fn finished(actions: &[ProcessAction]) -> ProcessOutcome {
        match actions.last() {
            Some(ProcessAction::Finished(outcome)) => outcome.clone(),
            other => panic!("expected Finished last, got {other:?}"),
        }
    }

    const TERM: ProcessAction = ProcessAction::SignalGroup(Signal::Term);
    const KILL: ProcessAction = ProcessAction::SignalGroup(Signal::Kill);

    #[test]
    fn g11_config_defaults() {
        let c = SupervisorConfig::default();
        assert_eq!(c.get_stdin_close_grace(), 2 * S);
        assert_eq!(c.get_term_grace(), 2 * S);
        assert_eq!(c.get_reader_drain_deadline(), S);
        let c = *SupervisorConfig::default()
            .stdin_close_grace(3 * S)
            .term_grace(4 * S)
            .reader_drain_deadline(5 * S);
        assert_eq!(
            (
                c.get_stdin_close_grace(),
                c.get_term_grace(),
                c.get_reader_drain_deadline()
            ),
            (3 * S, 4 * S, 5 * S)
        );
    }

    #[test]
    fn g11_exits_on_stdin_close() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0 + S);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        assert_eq!(sup.poll_timeout(), Some(t0 + 3 * S));
        sup.handle_stdout_eof(t0 + S + 400 * MS);
        sup.handle_exited(t0 + S + 500 * MS, ExitStatus::Code(0));
        assert_eq!(drain(&mut sup), [], "stderr still open: not finished");
        sup.handle_stderr_eof(t0 + S + 600 * MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterStdinClose);
        assert_eq!(o.stdout, Some(StreamEnd::EofAfterShutdown));
        assert_eq!(o.stderr, Some(StreamEnd::EofAfterShutdown));
        // G12: no cancel was sent, so no cancel fact is recorded.
        assert_eq!(o.cancel_to_exit, None);
        assert_eq!(o.shutdown_to_exit, Some(500 * MS));
        assert_eq!(o.shutdown_requested_at, Some(S));
        assert_eq!(o.stdin_closed_at, Some(S));
        assert_eq!((o.term_sent_at, o.kill_sent_at), (None, None));
        assert_eq!(o.exited_at, Some(S + 500 * MS));
        assert_eq!(o.finished_at, S + 600 * MS);
        assert_eq!(sup.poll_timeout(), None);
        assert!(sup.is_finished());
        assert_eq!(sup.outcome(), Some(&o));
    }

    #[test]
    fn g11_term_after_stdin_close_ignored() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [TERM]);
        assert_eq!(sup.poll_timeout(), Some(t0 + 4 * S));
        sup.handle_exited(t0 + 2 * S + 100 * MS, ExitStatus::Signal(15));
        sup.handle_stdout_eof(t0 + 2 * S + 110 * MS);
        sup.handle_stderr_eof(t0 + 2 * S + 120 * MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterTerm);
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
        assert_eq!(o.term_sent_at, Some(2 * S));
        assert_eq!(o.kill_sent_at, None);
        assert_eq!(o.cancel_to_exit, None);
        assert_eq!(o.shutdown_to_exit, Some(2 * S + 100 * MS));
    }

    #[test]
    fn g11_kill_after_term_ignored() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [TERM]);
        sup.handle_timeout(t0 + 4 * S);
        assert_eq!(drain(&mut sup), [KILL]);
        assert_eq!(
            sup.poll_timeout(),
            Some(t0 + 5 * S),
            "drain deadline after KILL"
        );
        sup.handle_stderr_eof(t0 + 4 * S + 5 * MS);
        sup.handle_stdout_eof(t0 + 4 * S + 6 * MS);
        assert_eq!(drain(&mut sup), [], "exit not observed yet");
        sup.handle_exited(t0 + 4 * S + 10 * MS, ExitStatus::Signal(9));
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterKill);
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
        assert_eq!(o.term_sent_at, Some(2 * S));
        assert_eq!(o.kill_sent_at, Some(4 * S));
        assert!(!o.group_killed_after_exit());
        assert_eq!(o.cancel_to_exit, None);
        assert_eq!(o.shutdown_to_exit, Some(4 * S + 10 * MS));
    }

    #[test]
    fn g11_exit_by_itself_without_shutdown() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.handle_stdout_eof(t0 + S);
        sup.handle_exited(t0 + S, ExitStatus::Code(3));
        assert_eq!(
            sup.poll_timeout(),
            Some(t0 + 2 * S),
            "stderr gets the drain deadline"
        );
        sup.handle_stderr_eof(t0 + S + MS);
        let actions = drain(&mut sup);
        assert_eq!(actions.len(), 1, "no signal, no stdin close: {actions:?}");
        let o = finished(&actions);
        assert_eq!(o.ended_by, EndedBy::ExitedByItself);
        assert_eq!(o.exit_status, Some(ExitStatus::Code(3)));
        assert_eq!(
            (o.stdout, o.stderr),
            (Some(StreamEnd::Eof), Some(StreamEnd::Eof))
        );
        assert_eq!(o.cancel_to_exit, None);
        assert_eq!(
            (o.stdin_closed_at, o.term_sent_at, o.kill_sent_at),
            (None, None, None)
        );
        assert_eq!(sup.poll_timeout(), None);
    }

    #[test]
    fn g11_eofs_before_exit_finish_on_exit() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.handle_stderr_eof(t0 + S);
        sup.handle_stdout_eof(t0 + S);
        assert_eq!(drain(&mut sup), []);
        assert_eq!(sup.poll_timeout(), None, "a running child has no deadline");
        sup.handle_exited(t0 + 2 * S, ExitStatus::Code(1));
        let o = finished(&drain(&mut sup));
        assert_eq!(o.exit_status, Some(ExitStatus::Code(1)));
        assert_eq!(o.finished_at, 2 * S);
    }

    #[test]
    fn g11_wrapper_exits_grandchild_holds_stderr_group_killed() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        // The wrapper exits; its grandchild keeps writing stderr.
        sup.handle_stdout_eof(t0 + 500 * MS);
        sup.handle_exited(t0 + 500 * MS, ExitStatus::Code(0));
        assert_eq!(drain(&mut sup), [], "no signal to a leader that exited");
        assert_eq!(
            sup.poll_timeout(),
            Some(t0 + 1500 * MS),
            "drain deadline, not TERM"
        );
        sup.handle_timeout(t0 + 1500 * MS);
        assert_eq!(
            drain(&mut sup),
            [KILL],
            "the group kill ends the grandchild"
        );
        assert_eq!(sup.poll_timeout(), Some(t0 + 2500 * MS));
        sup.handle_stderr_eof(t0 + 1510 * MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterStdinClose);
        assert_eq!(o.stderr, Some(StreamEnd::EofAfterShutdown));
        assert_eq!(o.term_sent_at, None);
        assert_eq!(o.kill_sent_at, Some(1500 * MS));
        assert!(o.group_killed_after_exit());
    }

    #[test]
    fn g11_escaped_grandchild_abandoned_after_deadline() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        let _ = drain(&mut sup);
        sup.handle_stdout_eof(t0 + 500 * MS);
        sup.handle_exited(t0 + 500 * MS, ExitStatus::Code(0));
        sup.handle_timeout(t0 + 1500 * MS);
        assert_eq!(drain(&mut sup), [KILL]);
        // The grandchild escaped with setsid: the KILL does not reach it.
        sup.handle_timeout(t0 + 2499 * MS);
        assert_eq!(drain(&mut sup), []);
        sup.handle_timeout(t0 + 2500 * MS);
        let actions = drain(&mut sup);
        assert_eq!(actions[0], ProcessAction::AbandonReaders);
        let o = finished(&actions);
        assert_eq!(actions.len(), 2);
        assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
        assert_eq!(o.stdout, Some(StreamEnd::EofAfterShutdown));
        assert_eq!(o.stderr, Some(StreamEnd::AbandonedAfterDeadline));
        assert_eq!(o.finished_at, 2500 * MS);
        assert_eq!(sup.poll_timeout(), None, "no hang");
        // The late EOF is ignored.
        sup.handle_stderr_eof(t0 + 3 * S);
        assert_eq!(drain(&mut sup), []);
        assert_eq!(sup.ignored_inputs(), 1);
    }

    #[test]
    fn g11_exit_by_itself_grandchild_holds_pipe_group_killed() {
        // Without any request: the group is still killed once the drain deadline passes.
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::OUTPUTS);
        sup.handle_stderr_eof(t0 + S);
        sup.handle_exited(t0 + S, ExitStatus::Code(0));
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [KILL]);
        sup.handle_stdout_eof(t0 + 2 * S + MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedByItself);
        assert_eq!(o.stdout, Some(StreamEnd::Eof), "no cancel was requested");
        assert!(o.group_killed_after_exit());
        assert_eq!(o.stdin_closed_at, None);
    }

    #[test]
    fn g11_worst_case_finish_bound_after_shutdown() {
        // The leader exits just before KILL is due and a setsid grandchild
        // holds stderr: the longest path, stdin grace + TERM grace + 2 drains.
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin, TERM]);
        sup.handle_stdout_eof(t0 + 4 * S - MS);
        sup.handle_exited(t0 + 4 * S - MS, ExitStatus::Signal(15));
        sup.handle_timeout(t0 + 4 * S);
        assert_eq!(drain(&mut sup), [], "no KILL for an exited leader");
        sup.handle_timeout(t0 + 5 * S - MS);
        assert_eq!(drain(&mut sup), [KILL], "the group kill");
        sup.handle_timeout(t0 + 6 * S - MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterTerm);
        assert_eq!(o.stderr, Some(StreamEnd::AbandonedAfterDeadline));
        assert!(o.finished_at <= 2 * S + 2 * S + 2 * S);
    }

    #[test]
    fn g11_cancel_while_child_ignores_term_kills() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.cancel(t0 + S);
        assert_eq!(
            drain(&mut sup),
            [ProcessAction::CloseStdin, TERM],
            "no stdin grace"
        );
        assert_eq!(sup.poll_timeout(), Some(t0 + 3 * S));
        sup.handle_timeout(t0 + 3 * S);
        assert_eq!(drain(&mut sup), [KILL]);
        sup.handle_exited(t0 + 3 * S + MS, ExitStatus::Signal(9));
        sup.handle_stdout_eof(t0 + 3 * S + MS);
        sup.handle_stderr_eof(t0 + 3 * S + MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterKill);
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
        assert_eq!(o.cancel_requested_at, Some(S));
        assert_eq!(o.shutdown_requested_at, None);
        assert_eq!(o.cancel_to_exit, Some(2 * S + MS));
        assert_eq!(o.stdout, Some(StreamEnd::EofAfterCancel));
    }

    #[test]
    fn g11_cancel_during_stdin_grace_terms_at_once() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        sup.cancel(t0 + 500 * MS);
        assert_eq!(drain(&mut sup), [TERM], "stdin already closed: not again");
        assert_eq!(sup.poll_timeout(), Some(t0 + 2500 * MS));
        sup.shutdown(t0 + 600 * MS);
        sup.cancel(t0 + 700 * MS);
        assert_eq!(drain(&mut sup), [], "repeated commands are idempotent");
        assert_eq!(sup.ignored_inputs(), 0, "and not counted");
        sup.handle_exited(t0 + S, ExitStatus::Code(0));
        sup.handle_stdout_eof(t0 + S);
        sup.handle_stderr_eof(t0 + S);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterTerm);
        assert_eq!(o.cancel_to_exit, Some(500 * MS), "from the cancel");
        assert_eq!(o.shutdown_to_exit, Some(S), "from the shutdown");
        assert_eq!(o.cancel_requested_at, Some(500 * MS));
    }

    #[test]
    fn g11_no_stdin_pipe_shutdown_terms_at_once() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::OUTPUTS);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [TERM]);
        assert_eq!(sup.poll_timeout(), Some(t0 + 2 * S));
    }

    #[test]
    fn g11_cancel_after_exit_with_open_stream_kills_group() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.handle_stdout_eof(t0);
        sup.handle_exited(t0 + S, ExitStatus::Code(0));
        sup.cancel(t0 + S + 100 * MS);
        assert_eq!(
            drain(&mut sup),
            [ProcessAction::CloseStdin, KILL],
            "never TERM after exit"
        );
        assert_eq!(sup.poll_timeout(), Some(t0 + 2 * S + 100 * MS));
        sup.handle_timeout(t0 + 2 * S + 100 * MS);
        let actions = drain(&mut sup);
        assert_eq!(actions[0], ProcessAction::AbandonReaders);
        let o = finished(&actions);
        assert_eq!(o.cancel_to_exit, None, "the exit came before the cancel");
        assert_eq!(o.ended_by, EndedBy::ExitedByItself);
    }

    #[test]
    fn g11_no_signal_after_exit_when_pipes_closed() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        let _ = drain(&mut sup);
        sup.handle_stdout_eof(t0 + MS);
        sup.handle_stderr_eof(t0 + MS);
        sup.handle_exited(t0 + 2 * MS, ExitStatus::Code(0));
        let actions = drain(&mut sup);
        assert_eq!(actions.len(), 1);
        assert_eq!(sup.poll_timeout(), None);
        for secs in 1..10 {
            sup.handle_timeout(t0 + secs * S);
        }
        assert_eq!(drain(&mut sup), []);
    }

    #[test]
    fn g11_exit_after_kill_observed_as_signal_9() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::NONE);
        sup.cancel(t0);
        assert_eq!(drain(&mut sup), [TERM], "no stdin pipe to close");
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [KILL]);
        sup.handle_exited(t0 + 2 * S + MS, ExitStatus::Signal(9));
        let o = finished(&drain(&mut sup));
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterKill);
        assert_eq!((o.stdout, o.stderr), (None, None), "unwatched streams");
    }

    #[test]
    fn g11_never_exits_after_kill_finishes_without_status() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.cancel(t0);
        let _ = drain(&mut sup);
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [KILL]);
        sup.handle_timeout(t0 + 3 * S);
        let actions = drain(&mut sup);
        assert_eq!(actions[0], ProcessAction::AbandonReaders);
        let o = finished(&actions);
        assert_eq!(o.exit_status, None, "never an invented status");
        assert_eq!(o.ended_by, EndedBy::ExitNotObserved);
        assert_eq!(o.stdout, Some(StreamEnd::AbandonedAfterDeadline));
        assert_eq!(o.stderr, Some(StreamEnd::AbandonedAfterDeadline));
        assert_eq!(o.cancel_to_exit, None);
        assert_eq!(o.finished_at, 3 * S);
        assert_eq!(sup.poll_timeout(), None);
        // A late exit does not change the recorded outcome.
        sup.handle_exited(t0 + 4 * S, ExitStatus::Signal(9));
        assert_eq!(drain(&mut sup), []);
        assert_eq!(sup.outcome(), Some(&o));
        let json = serde_json::to_value(&o).expect("outcome serializes");
        assert_eq!(json["exit_status"], serde_json::Value::Null);
        assert_eq!(json["ended_by"], "exit_not_observed");
    }

    #[test]
    fn g11_never_exits_after_kill_pipes_closed_no_abandon() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.handle_stdout_eof(t0);
        sup.handle_stderr_eof(t0);
        sup.cancel(t0);
        let _ = drain(&mut sup);
        sup.handle_timeout(t0 + 2 * S);
        assert_eq!(drain(&mut sup), [KILL]);
        sup.handle_timeout(t0 + 3 * S);
        let actions = drain(&mut sup);
        assert_eq!(actions.len(), 1, "nothing to abandon: {actions:?}");
        let o = finished(&actions);
        assert_eq!(o.ended_by, EndedBy::ExitNotObserved);
        assert_eq!(o.stdout, Some(StreamEnd::Eof), "EOF came before the cancel");
    }

    #[test]
    fn g11_spurious_timeouts_do_nothing() {
        let t0 = Instant::now();
        let mut sup = ProcessSupervisor::new(SupervisorConfig::default());
        sup.handle_timeout(t0);
        sup.handle_spawned(t0, ChildPipes::ALL);
        sup.handle_timeout(t0 + 100 * S);
        assert_eq!(drain(&mut sup), [], "no deadline while running");
        sup.shutdown(t0 + 100 * S);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        let due = t0 + 102 * S;
        for early in [100 * S, 101 * S, 102 * S - MS] {
            sup.handle_timeout(t0 + early);
            assert_eq!(drain(&mut sup), []);
            assert_eq!(sup.poll_timeout(), Some(due));
        }
        sup.handle_timeout(due);
        assert_eq!(drain(&mut sup), [TERM]);
        sup.handle_timeout(due);
        assert_eq!(drain(&mut sup), [], "the same instant twice");
        assert_eq!(sup.ignored_inputs(), 0, "timeouts are never bad input");
    }

    #[test]
    fn g11_duplicate_and_out_of_order_inputs_ignored() {
        let t0 = Instant::now();
        let mut sup = ProcessSupervisor::new(SupervisorConfig::default());
        sup.handle_stdout_eof(t0);
        sup.handle_stderr_eof(t0);
        sup.handle_exited(t0, ExitStatus::Code(0));
        sup.shutdown(t0);
        sup.cancel(t0);
        assert_eq!(drain(&mut sup), []);
        assert_eq!(sup.ignored_inputs(), 5);
        assert!(!sup.is_spawned());

        sup.handle_spawned(
            t0,
            ChildPipes {
                stdin: true,
                stdout: true,
                stderr: false,
            },
        );
        sup.handle_spawned(t0 + S, ChildPipes::NONE);
        sup.handle_stderr_eof(t0 + S); // not a pipe
        sup.handle_stdout_eof(t0 + S);
        sup.handle_stdout_eof(t0 + S); // twice
        assert_eq!(sup.ignored_inputs(), 8);
        sup.handle_exited(t0 + 2 * S, ExitStatus::Code(7));
        let o = finished(&drain(&mut sup));
        assert_eq!(o.exit_status, Some(ExitStatus::Code(7)));
        assert_eq!((o.stdout, o.stderr), (Some(StreamEnd::Eof), None));
        sup.handle_exited(t0 + 3 * S, ExitStatus::Code(0));
        sup.handle_stdout_eof(t0 + 3 * S);
        sup.handle_spawned(t0 + 3 * S, ChildPipes::ALL);
        sup.shutdown(t0 + 3 * S);
        sup.cancel(t0 + 3 * S);
        sup.handle_timeout(t0 + 99 * S);
        assert_eq!(drain(&mut sup), [], "nothing after Finished");
        assert_eq!(sup.ignored_inputs(), 11);
        assert_eq!(
            sup.exit_status(),
            Some(ExitStatus::Code(7)),
            "first status kept"
        );
    }

    #[test]
    fn g11_exit_twice_keeps_first_status() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.handle_exited(t0 + S, ExitStatus::Code(2));
        sup.handle_exited(t0 + S, ExitStatus::Code(0));
        assert_eq!(sup.ignored_inputs(), 1);
        assert_eq!(sup.exit_status(), Some(ExitStatus::Code(2)));
        assert_eq!(
            sup.poll_timeout(),
            Some(t0 + 2 * S),
            "the second exit moved nothing"
        );
    }

    #[test]
    fn g11_time_going_backwards_is_clamped() {
        let t0 = Instant::now();
        let t1 = t0 + 10 * S;
        let mut sup = spawned(t1, ChildPipes::NONE);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [TERM]);
        assert_eq!(
            sup.poll_timeout(),
            Some(t1 + 2 * S),
            "measured from the latest time"
        );
        sup.handle_exited(t0, ExitStatus::Code(0));
        let o = finished(&drain(&mut sup));
        assert_eq!(o.exited_at, Some(Duration::ZERO));
        assert_eq!(o.shutdown_to_exit, Some(Duration::ZERO));
    }

    #[test]
    fn g11_zero_graces_escalate_in_one_timeout() {
        let t0 = Instant::now();
        let config = *SupervisorConfig::default()
            .stdin_close_grace(Duration::ZERO)
            .term_grace(Duration::ZERO)
            .reader_drain_deadline(Duration::ZERO);
        let mut sup = ProcessSupervisor::new(config);
        sup.handle_spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        assert_eq!(sup.poll_timeout(), Some(t0));
        sup.handle_timeout(t0);
        let actions = drain(&mut sup);
        assert_eq!(actions[..3], [TERM, KILL, ProcessAction::AbandonReaders]);
        assert_eq!(finished(&actions).ended_by, EndedBy::ExitNotObserved);
        assert_eq!(sup.poll_timeout(), None);
    }

    #[test]
    fn g11_overflowing_grace_means_never() {
        let t0 = Instant::now();
        let config = *SupervisorConfig::default().stdin_close_grace(Duration::MAX);
        let mut sup = ProcessSupervisor::new(config);
        sup.handle_spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
        assert_eq!(sup.poll_timeout(), None);
        sup.cancel(t0 + S);
        assert_eq!(drain(&mut sup), [TERM], "a cancel still escalates");
    }

    #[test]
    fn g11_actions_wait_in_the_queue_unpolled() {
        // An adapter that never polls loses nothing and the queue stays within its capacity.
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0);
        sup.handle_timeout(t0 + 2 * S);
        sup.handle_timeout(t0 + 4 * S);
        sup.handle_timeout(t0 + 5 * S);
        let actions = drain(&mut sup);
        assert_eq!(
            actions[..4],
            [
                ProcessAction::CloseStdin,
                TERM,
                KILL,
                ProcessAction::AbandonReaders
            ]
        );
        assert_eq!(actions.len(), ACTION_QUEUE_CAPACITY);
    }

    #[test]
    fn g11_outcome_serializes_with_stable_names() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::OUTPUTS);
        sup.handle_exited(t0 + S, ExitStatus::Signal(9));
        sup.handle_stdout_eof(t0 + S);
        sup.handle_stderr_eof(t0 + S);
        let o = finished(&drain(&mut sup));
        let json = serde_json::to_value(&o).expect("outcome serializes");
        assert_eq!(json["exit_status"], serde_json::json!({"signal": 9}));
        // A KILL nobody here sent: a crash (or a kill from elsewhere).
        assert_eq!(json["ended_by"], "crashed");
        assert_eq!(json["stdout"], "eof");
        let back: ProcessOutcome = serde_json::from_value(json).expect("round trip");
        assert_eq!(back, o);
    }

    #[test]
    fn g12_a_crash_is_recorded_as_a_crash_with_its_signal() {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0 + S);
        drain(&mut sup);
        // SIGABRT during the stdin grace: not ours, whatever step was taken.
        sup.handle_exited(t0 + S + 5 * MS, ExitStatus::Signal(6));
        sup.handle_stdout_eof(t0 + S + 5 * MS);
        sup.handle_stderr_eof(t0 + S + 5 * MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::Crashed);
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(6)));
        assert_eq!((o.cancel_to_exit, o.cancel_requested_at), (None, None));
    }

    #[test]
    fn g12_stdout_closed_before_our_first_step_is_an_exit_of_its_own() {
        // The host's shutdown follows the server's stdout EOF at once (the
        // same instant): the exit observed after it is still the server's own.
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.handle_stdout_eof(t0 + S);
        sup.shutdown(t0 + S);
        drain(&mut sup);
        sup.handle_exited(t0 + S + MS, ExitStatus::Code(1));
        sup.handle_stderr_eof(t0 + S + MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedByItself);
        assert_eq!(o.exit_status, Some(ExitStatus::Code(1)));
        assert_eq!(o.stdout, Some(StreamEnd::Eof));
        assert_eq!(o.stderr, Some(StreamEnd::EofAfterShutdown));
        assert_eq!(o.cancel_to_exit, None, "no cancel was sent");
        // Stdout still open at the close: the exit answered it.
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.shutdown(t0 + S);
        drain(&mut sup);
        sup.handle_stdout_eof(t0 + S + MS);
        sup.handle_exited(t0 + S + MS, ExitStatus::Code(0));
        sup.handle_stderr_eof(t0 + S + MS);
        let o = finished(&drain(&mut sup));
        assert_eq!(o.ended_by, EndedBy::ExitedAfterStdinClose);
    }

    #[cfg(feature = "fuzzing")]
    #[test]
    fn g11_fuzz_supervisor_random_inputs() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        fuzz_supervisor(&[]);
        for _ in 0..400 {
            let len = (next() % 256) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            fuzz_supervisor(&data);
        }
    }
}
