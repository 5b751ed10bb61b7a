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
//! # A signal passed on: the application's pace
//!
//! When the application itself is asked to stop by a signal (a host stops a
//! wrapper such as the guard with `SIGINT`, `SIGTERM` or `SIGHUP`),
//! [`ProcessSupervisor::forward`] passes that signal to the child's group at
//! once, as the child would have got it directly, and closes its stdin. Each
//! further signal climbs one rung at once: `SIGTERM` (if not sent yet), then
//! `SIGKILL`. Without a further signal the ladder goes on by itself: after a
//! forwarded `SIGINT` or `SIGHUP`, `SIGTERM` follows `stdin_close_grace` later;
//! after `SIGTERM`, `SIGKILL` follows `term_grace` later. So the sender sets the
//! pace, and the supervisor's own deadlines are only the floor.
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
const SIGINT: i32 = 2;
const SIGHUP: i32 = 1;

/// Default [`SupervisorConfig::stdin_close_grace`]: 2 s.
pub const DEFAULT_STDIN_CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Default [`SupervisorConfig::term_grace`]: 2 s.
pub const DEFAULT_TERM_GRACE: Duration = Duration::from_secs(2);
/// Default [`SupervisorConfig::reader_drain_deadline`]: 1 s.
pub const DEFAULT_READER_DRAIN_DEADLINE: Duration = Duration::from_secs(1);

/// The most actions [`ProcessSupervisor`] ever holds queued: one each of
/// `CloseStdin`, a forwarded `SignalGroup(Interrupt | Hangup)`,
/// `SignalGroup(Term)`, `SignalGroup(Kill)`, `AbandonReaders` and `Finished`,
/// each emitted at most once per child.
pub(crate) const ACTION_QUEUE_CAPACITY: usize = 6;

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
    /// `SIGINT`: an interrupt, as a terminal's Ctrl-C or a host stopping a
    /// server sends it; only ever passed on ([`ProcessSupervisor::forward`]).
    Interrupt,
    /// `SIGHUP`: the controlling terminal or the parent went away; only ever
    /// passed on ([`ProcessSupervisor::forward`]).
    Hangup,
}

impl Signal {
    /// The signal's number on Linux and macOS (`SIGTERM` 15, `SIGKILL` 9,
    /// `SIGINT` 2, `SIGHUP` 1).
    pub fn number(self) -> i32 {
        match self {
            Self::Term => SIGTERM,
            Self::Kill => SIGKILL,
            Self::Interrupt => SIGINT,
            Self::Hangup => SIGHUP,
        }
    }

    /// Its name as a shell or a log shows it: `SIGTERM`, `SIGKILL`,
    /// `SIGINT`, `SIGHUP`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Term => "SIGTERM",
            Self::Kill => "SIGKILL",
            Self::Interrupt => "SIGINT",
            Self::Hangup => "SIGHUP",
        }
    }
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
    /// Exited after a signal the application received (`SIGINT` or
    /// `SIGHUP`) was passed on to it ([`ProcessSupervisor::forward`]),
    /// before `SIGTERM`.
    ExitedAfterForwardedSignal,
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
/// see `crate::time::duration_ms`.
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
        with = "crate::time::duration_ms::option",
        default
    )]
    pub cancel_to_exit: Option<Duration>,
    /// From the shutdown request to the observed exit; `None` without a
    /// shutdown, without an observed exit, or when the exit came first.
    #[serde(
        rename = "shutdown_to_exit_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub shutdown_to_exit: Option<Duration>,
    /// When a shutdown was first requested.
    #[serde(
        rename = "shutdown_requested_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub shutdown_requested_at: Option<Duration>,
    /// When a cancel was first requested.
    #[serde(
        rename = "cancel_requested_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub cancel_requested_at: Option<Duration>,
    /// When stdin was closed (`CloseStdin` emitted).
    #[serde(
        rename = "stdin_closed_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub stdin_closed_at: Option<Duration>,
    /// The signal the application received and passed on to the group
    /// first ([`ProcessSupervisor::forward`]); `None` if none was.
    #[serde(default)]
    pub forwarded_signal: Option<Signal>,
    /// When the first signal was passed on; `None` if none was.
    #[serde(
        rename = "forwarded_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub forwarded_at: Option<Duration>,
    /// When `SIGTERM` was sent to the group; `None` if it never was.
    #[serde(
        rename = "term_sent_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub term_sent_at: Option<Duration>,
    /// When `SIGKILL` was sent to the group; `None` if it never was. It may
    /// come after `exited_at`: the group outlived its leader.
    #[serde(
        rename = "kill_sent_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub kill_sent_at: Option<Duration>,
    /// When the exit was observed.
    #[serde(
        rename = "exited_at_ms",
        with = "crate::time::duration_ms::option",
        default
    )]
    pub exited_at: Option<Duration>,
    /// When supervision finished.
    #[serde(rename = "finished_at_ms", with = "crate::time::duration_ms")]
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
pub(crate) enum Queued {
    CloseStdin,
    /// The first signal passed on, when it is not `SIGTERM` or `SIGKILL`.
    Forward(Signal),
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
///   (graceful: close stdin first), [`cancel`](Self::cancel) (`SIGTERM` at once),
///   [`forward`](Self::forward) (a signal the application got, passed on at
///   once; the next one climbs).
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
///   **termed**. `forward(Interrupt | Hangup)` → `CloseStdin` and that
///   signal, **stdin closed**; `forward(Term)` → `CloseStdin` and
///   `SignalGroup(Term)`, **termed**.
/// - **stdin closed** → deadline → `SignalGroup(Term)`, **termed** (deadline
///   `term_grace`); a `cancel` here sends `SIGTERM` at once; a `forward`
///   passes its signal on if it is the first, else sends `SIGTERM` at once.
/// - **termed** → a further `forward` → `SignalGroup(Kill)` at once.
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
    /// The first signal passed on, and when.
    forwarded: Option<(Instant, Signal)>,
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
    pub(crate) actions: SmallVec<[Queued; ACTION_QUEUE_CAPACITY]>,
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
            forwarded: None,
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
        let forwarded = self.forwarded.map(|(_, s)| s);
        let sent = |signal: i32| match signal {
            SIGKILL => self.kill_at.is_some(),
            SIGTERM => self.term_at.is_some(),
            other => forwarded.is_some_and(|s| s.number() == other),
        };
        // The first step we took, and whether stdout had ended before it.
        let first_step = [
            self.stdin_closed_at,
            self.forwarded.map(|(at, _)| at),
            self.term_at,
            self.kill_at,
        ]
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
            ExitStatus::Signal(SIGTERM) => EndedBy::ExitedAfterTerm,
            ExitStatus::Signal(_) => EndedBy::ExitedAfterForwardedSignal,
            _ if first_step.is_none() || ending_before => EndedBy::ExitedByItself,
            _ if self.kill_at.is_some() => EndedBy::ExitedAfterKill,
            _ if self.term_at.is_some() => EndedBy::ExitedAfterTerm,
            _ if forwarded.is_some() => EndedBy::ExitedAfterForwardedSignal,
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

    /// Passes on a signal the application received (a host stopping it) at
    /// once, the way the child would have got it directly: the first one
    /// closes stdin and goes to the group as it is (`SIGINT`, `SIGHUP` or
    /// `SIGTERM`); each one after it climbs a rung at once (`SIGTERM` if not
    /// sent yet, else `SIGKILL`). Without a further signal the ladder goes on
    /// by the deadlines: `SIGTERM` `stdin_close_grace` after a forwarded
    /// `SIGINT` or `SIGHUP`, `SIGKILL` `term_grace` after `SIGTERM`. After
    /// the exit, with a stream still held open, a further signal sends
    /// `SIGKILL` to the group at once. A shutdown or cancel before counts as
    /// the first step: the next signal climbs.
    pub fn forward(&mut self, now: Instant, signal: Signal) {
        let now = self.tick(now);
        if self.spawned_at.is_none() {
            self.ignore("signal before spawn");
            return;
        }
        if self.is_finished() {
            return;
        }
        let first = self.forwarded.is_none();
        if first {
            self.forwarded = Some((now, signal));
        }
        // SIGTERM (and a SIGKILL, which no one receives) is the ladder's own
        // first rung: SIGKILL never goes out before SIGTERM while the leader lives.
        let climbing = !first
            || self.cancel_at.is_some()
            || self.term_at.is_some()
            || matches!(signal, Signal::Term | Signal::Kill);
        self.shutdown_at.get_or_insert(now);
        // The signal goes out before stdin closes: the server meets the
        // host's signal first, as it would directly, and not an EOF that
        // could end it first, with another status.
        if self.exit.is_some() {
            // No signal for a leader that is gone; a grandchild holding a
            // pipe gets SIGKILL at the next one.
            if !first && self.any_stream_open() && self.kill_at.is_none() {
                self.send_kill(now);
            }
        } else if climbing {
            if self.term_at.is_none() {
                self.send_term(now);
            } else {
                self.send_kill(now);
            }
        } else {
            self.actions.push(Queued::Forward(signal));
            // A shutdown's SIGTERM already due keeps its time.
            if self.timer.is_none() {
                self.set_timer(now, self.config.stdin_close_grace, Expiry::SendTerm);
            }
        }
        self.close_stdin(now);
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
            Queued::Forward(signal) => ProcessAction::SignalGroup(signal),
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
            forwarded_signal: self.forwarded.map(|(_, s)| s),
            forwarded_at: self.forwarded.map(|(at, _)| since(at)),
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

#[cfg(test)]
mod tests;
