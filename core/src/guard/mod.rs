//! The guard's whole session as one machine: the [`Proxy`] (host ↔ server
//! traffic and records), the [`ProcessSupervisor`] (the server process) and
//! the server's stderr (forwarding budget and retained tail) joined, with the
//! decisions between them: which event shuts the server down, when the host
//! side closes, what goes to our stderr, and the exit status.
//!
//! The whole story is on [`GuardSession`].

mod crash;
mod idle;
pub(crate) mod log_copy;
pub(crate) mod pin;
pub(crate) mod policy;
pub(crate) mod proxy;
pub(crate) mod restart;
mod secrets;
pub(crate) mod status;
pub(crate) mod trace;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::driver::{exit_before_end, LookForExit};
use crate::guard::proxy::{Entry, HostClosed, Proxy, ProxyConfig, ProxyEvent, ProxyMetrics};
use crate::guard::restart::{GuardPhase, RestartConfig};
use crate::guard::secrets::SessionSecrets;
use crate::io_result::{ChildStream, ReadResult, WriteResult};
use crate::outbox::Outgoing;
use crate::process::capture::{CaptureConfig, CaptureSummary, OutputCapture, SharedRetentionPool};
use crate::process::secrets::Secrets;
use crate::process::supervisor::{
    ChildPipes, ExitStatus, ProcessAction, ProcessOutcome, ProcessSupervisor, Signal,
    SupervisorConfig,
};
use crate::records::call::{CallConfig, CallRecord};
use crate::time::Stamp;
use crate::wire::frame::{FramerConfig, ReadRoom};

/// Exit status when the guard closed the session itself (the host stopped
/// reading, or a line passed the wire limit under the oversized policy
/// [`Close`](crate::OversizedPolicy::Close)): `EX_TEMPFAIL`.
pub const EXIT_GUARD_CLOSED: u8 = 75;
/// Exit status when no exit of the server was observed.
pub const EXIT_UNKNOWN: u8 = 1;
/// Default bytes of the server's stderr passed through to ours: 1 MiB.
pub const DEFAULT_STDERR_FORWARD: u64 = 1024 * 1024;
/// Default time the host gets to read what it is owed once the server is gone: 2 s.
pub const DEFAULT_FINAL_FLUSH: Duration = Duration::from_secs(2);
/// Records waiting for the disk before the guard stops reading the host,
/// with the audit gate on ([`GuardConfig::audit_gate`]): 1024.
pub const DEFAULT_MAX_WAITING_RECORDS: u64 = 1024;

/// Limits of a guard session.
///
/// It holds the knobs of the session itself (the stderr pool, forwarding
/// budget and final flush) and one config per part, each edited in place
/// with `name_mut()` and read with `get_name()`: the proxy
/// ([`proxy_mut`](Self::proxy_mut)), the framing of both directions and the
/// wire limit ([`framer_mut`](Self::framer_mut)), the call records
/// ([`call_mut`](Self::call_mut)), the server's shutdown
/// ([`supervisor_mut`](Self::supervisor_mut)) and its stderr capture
/// ([`stderr_capture_mut`](Self::stderr_capture_mut)). Each knob has one
/// setter, on the config that holds it; none holds a config of its own.
///
/// ```
/// use mcp_stdio_core::{GuardConfig, OversizedPolicy};
///
/// let mut config = GuardConfig::default();
/// config
///     .framer_mut()
///     .max_frame(1 << 20)
///     .oversized_policy(OversizedPolicy::Close);
/// config.proxy_mut().max_buffered(4 << 20);
/// assert_eq!(config.get_framer().get_max_frame(), 1 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GuardConfig {
    proxy: ProxyConfig,
    framer: FramerConfig,
    call: CallConfig,
    supervisor: SupervisorConfig,
    stderr_capture: CaptureConfig,
    stderr_pool: Option<SharedRetentionPool>,
    stderr_forward: u64,
    final_flush: Duration,
    audit_gate: Option<u64>,
    restart: RestartConfig,
    pub(crate) secrets: Secrets,
    log_copy: bool,
    trace_seed: Option<u64>,
    idle_stop: Option<Duration>,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            proxy: ProxyConfig::default(),
            framer: FramerConfig::default(),
            call: CallConfig::default(),
            supervisor: SupervisorConfig::default(),
            stderr_capture: CaptureConfig::default(),
            stderr_pool: Some(SharedRetentionPool::process()),
            stderr_forward: DEFAULT_STDERR_FORWARD,
            final_flush: DEFAULT_FINAL_FLUSH,
            audit_gate: None,
            restart: RestartConfig::default(),
            secrets: Secrets::default(),
            log_copy: false,
            trace_seed: None,
            idle_stop: None,
        }
    }
}

impl GuardConfig {
    /// Edits the proxy's limits in place (see [`ProxyConfig`]: 32 MiB
    /// buffered each way, its `max_buffered` being the bound on bytes
    /// waiting for a host that stopped reading; 4096 requests tracked).
    pub fn proxy_mut(&mut self) -> &mut ProxyConfig {
        &mut self.proxy
    }

    /// Edits the framing of both directions in place (see [`FramerConfig`]):
    /// the wire limit `max_frame` (default 16 MiB,
    /// [`DEFAULT_MAX_FRAME`](crate::DEFAULT_MAX_FRAME)), the id scan of an
    /// oversized line (256 B), the oversized policy (discard) and the invalid
    /// UTF-8 policy (repair). Each of the two framers buffers at most
    /// `max_frame + 1` bytes: worst case `2 × max_frame`.
    pub fn framer_mut(&mut self) -> &mut FramerConfig {
        &mut self.framer
    }

    /// Edits the limits of each call record in place (see [`CallConfig`]:
    /// 64 events of at most 512 bytes of text each; worst case per tracked
    /// request `≈ 2 KiB + 4 × max_text_bytes`).
    pub fn call_mut(&mut self) -> &mut CallConfig {
        &mut self.call
    }

    /// Edits the shutdown graces and the reader drain deadline in place (see
    /// [`SupervisorConfig`]: 2 s, 2 s, 1 s).
    pub fn supervisor_mut(&mut self) -> &mut SupervisorConfig {
        &mut self.supervisor
    }

    /// Edits in place what of the server's stderr is kept for the report
    /// (default: last 16 KiB; worst case the capture's `head + tail`).
    pub fn stderr_capture_mut(&mut self) -> &mut CaptureConfig {
        &mut self.stderr_capture
    }

    /// Sets the retention pool the stderr capture draws its budget from:
    /// the capture keeps at most what the pool grants (default
    /// [`SharedRetentionPool::process`], 256 KiB for the whole process; the
    /// CLI builds one of `stderr_retained_process_bytes`). `None`: the
    /// capture's own `head + tail` alone.
    pub fn stderr_pool(&mut self, pool: Option<SharedRetentionPool>) -> &mut Self {
        self.stderr_pool = pool;
        self
    }

    /// Stops the server after `after` with nothing open (no request in
    /// flight, no subscription, no task) and starts it again at the host's
    /// next bytes, its handshake replayed first (`guard --idle-stop`; off
    /// by default). Never while a call is in flight.
    pub fn idle_stop(&mut self, after: Option<Duration>) -> &mut Self {
        self.idle_stop = after;
        self
    }

    /// How long the server may sit idle (see [`idle_stop`](Self::idle_stop)).
    pub fn get_idle_stop(&self) -> Option<Duration> {
        self.idle_stop
    }

    /// Edits restart on crash in place (see [`RestartConfig`]; off by
    /// default).
    pub fn restart_mut(&mut self) -> &mut RestartConfig {
        &mut self.restart
    }

    /// Restart on crash.
    pub fn get_restart(&self) -> &RestartConfig {
        &self.restart
    }

    /// Sets how many bytes of the server's stderr pass through to ours
    /// (default [`DEFAULT_STDERR_FORWARD`] = 1 MiB); past it one marker line,
    /// then the rest is only counted and its tail kept.
    pub fn stderr_forward(&mut self, bytes: u64) -> &mut Self {
        self.stderr_forward = bytes;
        self
    }

    /// Spans for the requests (`guard --otel`; off by default): each
    /// request forwarded carries its span's `traceparent` (a child of the
    /// host's, when its request had one), and its span is given as
    /// [`GuardOutput::Span`] when its call ends. `seed` makes the ids (the
    /// core takes no randomness: give it some).
    pub fn trace(&mut self, seed: Option<u64>) -> &mut Self {
        self.trace_seed = seed;
        self
    }

    /// The seed of the span ids, when spans are on.
    pub fn get_trace_seed(&self) -> Option<u64> {
        self.trace_seed
    }

    /// Makes a log copy (off by default): the server's whole stderr and the
    /// guard's notes as timestamped lines, given as [`GuardOutput::Log`]
    /// (at most [`MAX_LOG_PENDING`](log_copy::MAX_LOG_PENDING) bytes waiting,
    /// lines of at most [`MAX_LOG_LINE`](log_copy::MAX_LOG_LINE) bytes).
    pub fn log_copy(&mut self, on: bool) -> &mut Self {
        self.log_copy = on;
        self
    }

    /// Sets how long the host may take to read what it is still owed once
    /// the server is gone (default [`DEFAULT_FINAL_FLUSH`] = 2 s).
    pub fn final_flush(&mut self, time: Duration) -> &mut Self {
        self.final_flush = time;
        self
    }

    /// Turns on the audit gate (G12): `Some(max_waiting)` holds each message
    /// for the server until every record given before it
    /// ([`GuardOutput::Record`]) is reported durable
    /// ([`GuardInput::RecordsDurable`]), and stops reading the host while
    /// more than `max_waiting` records wait for the disk (the CLI's `--audit`
    /// uses [`DEFAULT_MAX_WAITING_RECORDS`] = 1024; records are ≈ 1–2 KiB, so
    /// ≈ 2 MiB worst case in the writer's hands). `None` (the default): no
    /// record needs to be durable first.
    pub fn audit_gate(&mut self, max_waiting: Option<u64>) -> &mut Self {
        self.audit_gate = max_waiting;
        self
    }

    /// The audit gate: `Some(max_waiting)` when on.
    pub fn get_audit_gate(&self) -> Option<u64> {
        self.audit_gate
    }

    /// The proxy's limits.
    pub fn get_proxy(&self) -> &ProxyConfig {
        &self.proxy
    }
    /// The framing of both directions, and the wire limit.
    pub fn get_framer(&self) -> &FramerConfig {
        &self.framer
    }
    /// The limits of each call record.
    pub fn get_call(&self) -> &CallConfig {
        &self.call
    }
    /// The supervisor's config.
    pub fn get_supervisor(&self) -> &SupervisorConfig {
        &self.supervisor
    }
    /// The stderr capture's config.
    pub fn get_stderr_capture(&self) -> &CaptureConfig {
        &self.stderr_capture
    }
    /// The stderr forwarding budget.
    pub fn get_stderr_forward(&self) -> u64 {
        self.stderr_forward
    }
    /// The final flush bound.
    pub fn get_final_flush(&self) -> Duration {
        self.final_flush
    }
}

/// One thing that happened to the guard's session: the one way into
/// [`GuardSession`] ([`GuardSession::handle_input`]). After each, drain
/// [`GuardSession::poll_output`] until it says [`GuardOutput::Timeout`].
#[non_exhaustive]
pub enum GuardInput<'a> {
    /// The server was spawned with all three streams piped (at the start,
    /// and after each [`GuardAction::RespawnServer`]).
    Spawned,
    /// A [`GuardAction::RespawnServer`] failed: restarts stop and the
    /// session ends.
    SpawnFailed(std::io::Error),
    /// A read of the host's input into `buf` returned `result`: bytes, or
    /// (end or error) the host's end, which starts the shutdown once what
    /// the host sent has reached the server (or after the stdin close grace).
    HostRead {
        /// What the read returned.
        result: std::io::Result<usize>,
        /// The buffer it read into.
        buf: &'a [u8],
    },
    /// A read of the server's `stream` returned `result` (the rule:
    /// [`ReadResult`]): stdout's bytes are in
    /// [`GuardSession::server_stdout_room`], stderr's in `buf`. At the end,
    /// `look` is asked whether the server has exited, and an exit it reports
    /// is taken first; a [`GuardAction::CloseServerReader`] follows.
    ServerRead {
        /// Which stream.
        stream: ChildStream,
        /// What the read returned.
        result: std::io::Result<usize>,
        /// The buffer it read into (stderr; empty for stdout).
        buf: &'a [u8],
        /// A non-reaping look at the exit.
        look: LookForExit<'a>,
    },
    /// A write of [`GuardOutput::ToServer`]'s bytes returned this (the rule:
    /// [`WriteResult`]); a failure (a 0-byte write included) drops what waits
    /// for the server, with a [`GuardAction::CloseServerStdin`].
    ServerWritten(std::io::Result<usize>),
    /// The server's stdin can take bytes again, after a write of
    /// [`GuardOutput::ToServer`] returned `WouldBlock` (which parks it).
    ServerWritable,
    /// A write of [`GuardOutput::ToHost`]'s message returned this, as it
    /// came (the rule: [`WriteResult`]): bytes taken, `WouldBlock` (or a
    /// pending write) parks it until [`HostWritable`](Self::HostWritable),
    /// `EINTR` offers it again, a 0-byte write or an error closes the host
    /// side. The next message is offered once all of this one was taken.
    HostWrote(std::io::Result<usize>),
    /// The host's writer can take bytes again.
    HostWritable,
    /// This many records given by [`GuardOutput::Record`], counted from the
    /// first, are on disk (with the audit gate on: a message for the server
    /// is offered only once the records given before it are).
    RecordsDurable(u64),
    /// This many bytes reached the host's pipe.
    HostWritten(usize),
    /// Writing to the host failed: the host side closes and the server is
    /// shut down.
    HostWriteFailed(std::io::Error),
    /// The wait for the server's exit returned this; a failed wait means no
    /// status can ever be observed (the supervisor's deadlines end the session).
    Exited(std::io::Result<ExitStatus>),
    /// A signal reached the guard (`SIGINT`, `SIGTERM` or `SIGHUP`: a host
    /// stopping its server): the host sets the pace (F1). The first is
    /// passed to the server's group at once, as the server would have got
    /// it directly, and its stdin closed; each further one climbs a rung at
    /// once (`SIGTERM`, then `SIGKILL`); the audit log is sealed at once
    /// ([`GuardOutput::Seal`]), so a kill that follows finds it sealed.
    Signal(Signal),
    /// Time passed: deadlines that are due act; before them, nothing.
    Timeout,
}

impl std::fmt::Debug for GuardInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Spawned => f.write_str("Spawned"),
            Self::SpawnFailed(e) => f.debug_tuple("SpawnFailed").field(e).finish(),
            Self::HostRead { result, .. } => f
                .debug_struct("HostRead")
                .field("result", result)
                .finish_non_exhaustive(),
            Self::ServerRead { stream, result, .. } => f
                .debug_struct("ServerRead")
                .field("stream", stream)
                .field("result", result)
                .finish_non_exhaustive(),
            Self::ServerWritten(r) => f.debug_tuple("ServerWritten").field(r).finish(),
            Self::ServerWritable => f.write_str("ServerWritable"),
            Self::HostWrote(r) => f.debug_tuple("HostWrote").field(r).finish(),
            Self::HostWritable => f.write_str("HostWritable"),
            Self::RecordsDurable(n) => f.debug_tuple("RecordsDurable").field(n).finish(),
            Self::HostWritten(n) => f.debug_tuple("HostWritten").field(n).finish(),
            Self::HostWriteFailed(e) => f.debug_tuple("HostWriteFailed").field(e).finish(),
            Self::Exited(r) => f.debug_tuple("Exited").field(r).finish(),
            Self::Signal(s) => f.debug_tuple("Signal").field(s).finish(),
            Self::Timeout => f.write_str("Timeout"),
        }
    }
}

/// What the session asks of its loop, in the order it must happen, from
/// [`GuardSession::poll_output`].
#[derive(Debug)]
pub enum GuardOutput<'a> {
    /// Do this now.
    Action(GuardAction),
    /// Append this call record to the audit log. With the audit gate on, the
    /// request it names is not offered to the server until the loop reports
    /// the record durable ([`GuardInput::RecordsDurable`], G12).
    Record(CallRecord),
    /// Append this moment of the server's life (a crash, a restart) to the
    /// audit log; it counts as a record for
    /// [`GuardInput::RecordsDurable`].
    Phase(GuardPhase),
    /// Seal the audit log now, after the records given so far: the session
    /// is ending (a host's signal, its EOF, the guard closing it), and a
    /// host may kill the guard at any moment of its shutdown. Given once
    /// when the session starts ending, then after each turn that gave
    /// records; a log that is already sealed needs no other.
    Seal,
    /// Keep this in the pin file now: tools pinned on first use, and what
    /// the pins saw and did not accept (see `ProxyConfig::tool_pins`).
    Pins(pin::PinUpdate),
    /// Write what the server's stdin takes of these bytes now and report
    /// the result ([`GuardInput::ServerWritten`]); a `WouldBlock` (or a
    /// pending write) parks it until [`GuardInput::ServerWritable`].
    ToServer(Outgoing<'a>),
    /// Write what the host's writer takes of this message now and report
    /// the write's result as it came ([`GuardInput::HostWrote`]). One
    /// message at a time while the session runs, so a cancel can still
    /// withdraw a response not yet started.
    ToHost(Outgoing<'a>),
    /// Hand these bytes to our own stderr (never blocking): the server's
    /// stderr within its budget, the budget marker, the proxy's notes.
    Stderr(Vec<u8>),
    /// One request's span (with [`GuardConfig::trace`]): hand it to the
    /// exporter, which never makes the session wait.
    Span(trace::CallSpan),
    /// Hand these lines to the log file's writer (never blocking; what it
    /// cannot take it drops and counts): with [`GuardConfig::log_copy`], the
    /// server's whole stderr and the guard's notes, timestamped.
    Log(Vec<u8>),
    /// Nothing more until the next input: wait for I/O, a signal, or this
    /// instant, then feed [`GuardInput::Timeout`]. `None`: no deadline.
    Timeout(Option<Instant>),
}

/// What the adapter must do, inside [`GuardOutput::Action`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardAction {
    /// Close (drop) the server's stdin; drop what was queued for it.
    CloseServerStdin,
    /// This stream of the server is at its end: stop reading it (drop it).
    CloseServerReader(ChildStream),
    /// The host's input is at its end: stop reading it.
    CloseHostInput,
    /// Send this signal to the server's process group.
    SignalServerGroup(Signal),
    /// Stop reading the server's stdout and stderr (drop them): a
    /// grandchild holds them past the drain deadline.
    AbandonServerReaders,
    /// Stop writing to the host and drop what was taken for it: the host
    /// stopped reading or its end is closed.
    CloseHostOutput,
    /// The server ended and will be started again (restart on crash): reap
    /// it (it is never signalled again) and drop its pipes. The session
    /// goes on; a [`RespawnServer`](Self::RespawnServer) follows.
    ReapServer,
    /// Start the server again (the same command), then feed
    /// [`GuardInput::Spawned`] or [`GuardInput::SpawnFailed`].
    RespawnServer,
    /// The server is gone and every record is out. Give the host at most
    /// `flush_for` to take what [`GuardSession::poll_output`] still gives
    /// ([`GuardOutput::ToHost`], all of it now), then exit with `exit_code`.
    /// Emitted once, last.
    Finished {
        /// What was observed of the server process.
        outcome: ProcessOutcome,
        /// The guard's exit status (see [`GuardSession::exit_code`]).
        exit_code: u8,
        /// The bound on the final write to the host.
        flush_for: Duration,
    },
}

/// The end-of-session report (`--metrics`).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct GuardReport {
    /// The proxy's counters.
    pub proxy: ProxyMetrics,
    /// What was observed of the server process (`None` if it never finished).
    pub process: Option<ProcessOutcome>,
    /// Counters of the server's stderr.
    pub stderr: CaptureSummary,
    /// The retained stderr with its truncation marker.
    pub stderr_tail: String,
    /// The agent excerpt of stderr.
    pub stderr_excerpt: String,
    /// Bytes of the server's stderr passed through to ours.
    pub stderr_forwarded_bytes: u64,
    /// Why the guard closed the session itself, if it did
    /// ([`GuardSession::closed_by_guard`]): `host_stopped_reading`,
    /// `oversized_request` or `oversized_response`.
    pub guard_closed_session: Option<&'static str>,
    /// The protocol version the session ran at, as the guard last saw it:
    /// the answer to `initialize`, or the version a 2026-07-28 request names
    /// in its `_meta` (`None` when neither was seen).
    pub protocol_version: Option<String>,
    /// Times the server was started again after a crash.
    pub restarts: u32,
    /// Why restarts stopped, when they did.
    pub restarts_stopped: Option<String>,
    /// Secrets ([`GuardConfig::secrets`]) replaced in what the guard gave out.
    pub secrets_masked: u64,
    /// Lines of the log copy ([`GuardConfig::log_copy`]) dropped because
    /// more than [`MAX_LOG_PENDING`](log_copy::MAX_LOG_PENDING) bytes waited.
    pub log_lines_dropped: u64,
    /// Spans ([`GuardConfig::trace`]) dropped because too many waited or
    /// were open.
    pub spans_dropped: u64,
    /// Times the server was stopped for idleness (`--idle-stop`).
    pub idle_stops: u64,
    /// Times a sleeping server was started again.
    pub resumes: u64,
}

/// The guard's whole session as one machine: the `Proxy` (host ↔ server
/// traffic and records), the [`ProcessSupervisor`] (the server process) and
/// the server's stderr (forwarding budget and retained tail) joined, with the
/// decisions between them: which event shuts the server down, when the host
/// side closes, what goes to our stderr, and the exit status.
///
/// The adapter (the `mcp-stdio guard` command) only moves bytes, waits and
/// makes system calls. Its loop waits on every source at once and never on a
/// write finishing (G1):
///
/// ```text
/// loop {
///     loop match s.poll_output() {
///         Action(a)    => act (close stdin, signal, drop readers, close host, finish),
///         Record(r)    => append to the audit log (a batch per drain),
///         Pins(u)      => keep it in the pin file (`--pin`), off the loop,
///         ToServer(b)  => write what the server's stdin takes of b now,
///                         feed ServerWritten (WouldBlock parks it),
///         ToHost(b)    => write what the host takes of b now (one message
///                         at a time), feed HostWrote (WouldBlock parks it),
///         Stderr(b)    => hand to a non-blocking stderr writer,
///         Timeout(t)   => break,
///     }
///     wait for: server stdout / stderr, host stdin, write readiness both ways
///               (then ServerWritable / HostWritable), the audit writer
///               (RecordsDurable), child exit, t, SIGTERM/SIGINT/SIGHUP
///     feed what happened: s.handle_input(Stamp, GuardInput::…)
/// }
/// ```
///
/// # Methods, by group
///
/// - **Getters:** `proxy`,
///   [`wants_host_input`](GuardSession::wants_host_input),
///   [`exit_seen`](GuardSession::exit_seen),
///   [`closed_by_guard`](GuardSession::closed_by_guard),
///   [`exit_code`](GuardSession::exit_code).
/// - **The one input:** [`handle_input`](GuardSession::handle_input) with a
///   [`GuardInput`] and a [`Stamp`]; the server's stdout is read straight
///   into [`server_stdout_room`](GuardSession::server_stdout_room).
/// - **The one output:** [`poll_output`](GuardSession::poll_output), a
///   [`GuardOutput`], in the session's order: decisions first (so nothing is
///   written to a side that is closing), then the audit records (the line
///   before the request it names is written), what goes to the server, to
///   the host, to our stderr, and last the next deadline.
/// - **End:** after [`GuardAction::Finished`], [`report`](GuardSession::report).
///
/// # Memory
///
/// The proxy's bound (see `crate::guard::proxy`) plus the stderr capture's
/// (`head + tail` of [`CaptureConfig`]) plus stderr chunks waiting for
/// `poll_stderr` (at most the chunk just read plus one marker line and the
/// proxy's notes, when the poll rule is followed).
///
/// The guard session. Its rules are above.
#[derive(Debug)]
pub struct GuardSession {
    pub(crate) config: GuardConfig,
    proxy: Proxy,
    supervisor: ProcessSupervisor,
    stderr: OutputCapture,
    pub(crate) stderr_forwarded: u64,
    stderr_marker_shown: bool,
    stderr_out: VecDeque<Vec<u8>>,
    server_stdin_closed: bool,
    /// Set at host EOF while bytes still wait for the server's stdin.
    stdin_drain_deadline: Option<Instant>,
    latest: Option<Stamp>,
    finished: Option<ProcessOutcome>,
    /// A write to the server returned `WouldBlock`: wait for `ServerWritable`.
    server_parked: bool,
    /// The host's writer took nothing: wait for `HostWritable`.
    host_parked: bool,
    /// Records given by `poll_output`.
    records_given: u64,
    /// Records reported durable (the audit gate).
    records_durable: u64,
    /// Actions the I/O results led to, given before the session's own (at
    /// most one per stream end and write failure: four).
    early: VecDeque<GuardAction>,
    /// Waiting for the server's exit failed: no status will ever be observed.
    exit_wait_failed: bool,
    /// The guard closed the session because a line passed the wire limit
    /// under [`OversizedPolicy::Close`](crate::OversizedPolicy::Close):
    /// `oversized_request` or `oversized_response`.
    oversized_close: Option<&'static str>,
    /// The host is gone or the session is closing: a server's end is the
    /// session's end (no restart).
    ending: bool,
    /// `records_given` when [`GuardOutput::Seal`] was last given.
    sealed_at: Option<u64>,
    /// Signals the host sent (each one climbs the ladder).
    host_signals: u32,
    /// The servers of this session: which is up, the crashes, restarts.
    lives: crash::Lives,
    secrets: SessionSecrets,
    /// Calls counted as their records are given, for the status.
    calls: status::CallStats,
    /// Signals given to the server's group ([`GuardAction::SignalServerGroup`]).
    signals_sent: u64,
    /// The log copy, when on.
    log: Option<log_copy::LogCopy>,
    /// The idle clock (`--idle-stop`).
    idle: idle::Idle,
}

impl GuardSession {
    /// A session for a server about to be spawned.
    pub fn new(config: GuardConfig) -> Self {
        Self {
            proxy: Proxy::new(&config),
            supervisor: ProcessSupervisor::new(config.supervisor),
            stderr: match &config.stderr_pool {
                Some(pool) => OutputCapture::with_grant(
                    &config.stderr_capture,
                    pool.grant(config.stderr_capture.wanted()),
                ),
                None => OutputCapture::new(&config.stderr_capture),
            },
            stderr_forwarded: 0,
            stderr_marker_shown: false,
            stderr_out: VecDeque::new(),
            server_stdin_closed: false,
            stdin_drain_deadline: None,
            latest: None,
            finished: None,
            server_parked: false,
            host_parked: false,
            records_given: 0,
            records_durable: 0,
            early: VecDeque::new(),
            exit_wait_failed: false,
            oversized_close: None,
            ending: false,
            sealed_at: None,
            host_signals: 0,
            lives: crash::Lives::default(),
            secrets: SessionSecrets::new(&config.secrets),
            calls: status::CallStats::default(),
            signals_sent: 0,
            log: config.log_copy.then(log_copy::LogCopy::default),
            idle: idle::Idle {
                after: config.idle_stop,
                ..idle::Idle::default()
            },
            config,
        }
    }

    // ---- getters ----

    #[cfg(any(test, feature = "fuzzing"))]
    /// The proxy (its metrics, backlogs, whether to read the host).
    pub(crate) fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Whether to read more from the host now (the server is keeping up).
    pub fn wants_host_input(&self) -> bool {
        let disk_behind = self
            .config
            .audit_gate
            .is_some_and(|max| self.records_given.saturating_sub(self.records_durable) >= max);
        self.proxy.wants_host_input() && !disk_behind
    }

    /// Why the guard closed the session itself, if it did:
    /// `host_stopped_reading` (more than `max_buffered` bytes waited for
    /// the host), or, under the oversized policy
    /// [`Close`](crate::OversizedPolicy::Close), `oversized_request` (a host
    /// line passed the wire limit) or `oversized_response` (a server line
    /// did).
    pub fn closed_by_guard(&self) -> Option<&'static str> {
        (self.proxy.host_closed() == Some(HostClosed::StoppedReading))
            .then_some("host_stopped_reading")
            .or(self.oversized_close)
            .or(self.lives.refused.then_some("restart_refused"))
    }

    /// The exit status: [`EXIT_GUARD_CLOSED`] (75) when the guard closed the
    /// session; otherwise the server's own code, `128 + N` when it was killed
    /// by signal N, and [`EXIT_UNKNOWN`] when no exit was observed.
    pub fn exit_code(&self) -> u8 {
        if self.closed_by_guard().is_some() {
            return EXIT_GUARD_CLOSED;
        }
        if self.lives.is_asleep() || self.idle.ended_asleep {
            // The guard stopped it for idleness; the host then left: by a
            // signal, the status the server would have died with.
            return self
                .idle
                .first_signal
                .map_or(0, |s| u8::try_from(128 + s.number()).unwrap_or(255));
        }
        match self.supervisor.exit_status() {
            Some(ExitStatus::Code(c)) => u8::try_from(c).unwrap_or(EXIT_UNKNOWN),
            Some(ExitStatus::Signal(s)) => u8::try_from(128 + s).unwrap_or(255),
            None => EXIT_UNKNOWN,
        }
    }

    // ---- the one input and the one output ----

    /// Takes one input (see [`GuardInput`] for what each means). Then drain
    /// [`poll_output`](Self::poll_output).
    pub fn handle_input(&mut self, at: Stamp, input: GuardInput<'_>) {
        match input {
            GuardInput::Spawned => self.handle_spawned(at),
            GuardInput::SpawnFailed(e) => self.handle_spawn_failed(at, &e),
            GuardInput::HostRead { result, buf } => {
                if !self.handle_host_read_result(at, result, buf) {
                    self.early.push_back(GuardAction::CloseHostInput);
                }
            }
            GuardInput::ServerRead {
                stream,
                result,
                buf,
                look,
            } => {
                if !self.handle_server_read_result(at, stream, result, buf, look) {
                    self.early.push_back(GuardAction::CloseServerReader(stream));
                }
            }
            GuardInput::ServerWritten(r) => self.handle_server_write_result(r),
            GuardInput::ServerWritable => self.server_parked = false,
            GuardInput::HostWrote(r) => match WriteResult::from(r) {
                WriteResult::Bytes(n) => {
                    self.proxy.host_outbox_mut().advance(n);
                }
                WriteResult::Again => {}
                WriteResult::Full => self.host_parked = true,
                WriteResult::Failed(e) => {
                    tracing::debug!(error = %e, "writing stdout failed");
                    self.handle_host_write_error(at);
                }
            },
            GuardInput::HostWritable => self.host_parked = false,
            GuardInput::RecordsDurable(n) => {
                self.records_durable = self.records_durable.max(n.min(self.records_given));
            }
            GuardInput::HostWritten(n) => self.handle_host_written(n),
            GuardInput::HostWriteFailed(e) => {
                tracing::debug!(error = %e, "writing stdout failed");
                self.handle_host_write_error(at);
            }
            GuardInput::Exited(r) => self.handle_exit_result(at, r),
            GuardInput::Signal(signal) => self.handle_signal(at, signal),
            GuardInput::Timeout => self.handle_timeout(at),
        }
    }

    /// The next thing the loop must do, in the session's order: actions,
    /// audit records, bytes for the server, the next message for the host
    /// (once the last one was taken; all that is owed after `Finished`),
    /// bytes for our stderr, and last the next deadline (the end of this
    /// drain; it repeats until the next input).
    #[must_use]
    pub fn poll_output(&mut self) -> GuardOutput<'_> {
        if let Some(action) = self.early.pop_front() {
            return GuardOutput::Action(action);
        }
        if let Some(action) = self.poll_action() {
            if matches!(action, GuardAction::SignalServerGroup(_)) {
                self.signals_sent += 1;
            }
            if matches!(action, GuardAction::CloseHostOutput) {
                self.proxy.host_outbox_mut().clear_writing();
            }
            return GuardOutput::Action(action);
        }
        if let Some(entry) = self.proxy.poll_entry() {
            self.records_given += 1;
            return match entry {
                Entry::Call(record) => {
                    self.calls.see(&record);
                    GuardOutput::Record(self.secrets.record(record))
                }
                Entry::Phase(phase) => GuardOutput::Phase(phase),
            };
        }
        if self.ending && self.sealed_at != Some(self.records_given) {
            self.sealed_at = Some(self.records_given);
            return GuardOutput::Seal;
        }
        if let Some(update) = self.proxy.poll_pin_update() {
            return GuardOutput::Pins(update);
        }
        if !self.server_parked
            && self.finished.is_none()
            && self.lives.is_up()
            && self.refill_to_server()
        {
            return GuardOutput::ToServer(self.proxy.server_outbox_mut().lend());
        }
        if !self.host_parked && self.refill_to_host() {
            return GuardOutput::ToHost(self.proxy.host_outbox_mut().lend());
        }
        if let Some(bytes) = self.poll_stderr() {
            return GuardOutput::Stderr(bytes);
        }
        if let Some(lines) = self.poll_log() {
            return GuardOutput::Log(lines);
        }
        if let Some(span) = self.poll_span() {
            return GuardOutput::Span(span);
        }
        GuardOutput::Timeout(self.poll_timeout())
    }

    /// Whether a message for the server is held to be written: the one in
    /// progress, or the next whose records are durable (all of them when
    /// the audit gate is off).
    fn refill_to_server(&mut self) -> bool {
        if self.proxy.server_outbox_mut().writing_is_empty() {
            let durable = match self.config.audit_gate {
                Some(_) => self.records_durable,
                None => u64::MAX,
            };
            if let Some(bytes) = self.poll_to_server(durable) {
                self.proxy.server_outbox_mut().hold(bytes);
            }
        }
        self.proxy.server_outbox_mut().writing_is_held()
    }

    /// Whether a message for the host is held to be written: the one in
    /// progress, or the next once the last was taken whole.
    fn refill_to_host(&mut self) -> bool {
        if self.proxy.host_outbox_mut().writing_is_empty() {
            if let Some(bytes) = self.poll_to_host() {
                self.proxy.host_outbox_mut().hold(bytes);
            }
        }
        self.proxy.host_outbox_mut().writing_is_held()
    }

    // ---- inputs, one by one (what `handle_input` calls) ----

    /// The server was spawned with all three streams piped.
    pub(crate) fn handle_spawned(&mut self, at: Stamp) {
        self.see(at);
        if self.lives.respawning() {
            // A new server: its own supervisor, pipes and session.
            self.supervisor = ProcessSupervisor::new(self.config.supervisor);
            self.server_stdin_closed = false;
            self.server_parked = false;
            self.exit_wait_failed = false;
            // Its stderr is a stream of its own (a secret split at the
            // old one's end is not joined to the new one's start).
            self.secrets.end_stderr();
        }
        self.supervisor.handle_spawned(at.instant, ChildPipes::ALL);
        self.idle.busy(at.instant);
        let server = self.lives.up(at.instant);
        self.proxy.server_up(at, server);
    }

    /// Bytes read from the host.
    pub(crate) fn handle_host(&mut self, at: Stamp, chunk: &[u8]) {
        self.see(at);
        self.idle.busy(at.instant);
        self.wake(at);
        self.proxy.handle_host(at, chunk);
    }

    /// The host closed our stdin: the shutdown sequence starts once what the
    /// host sent has reached the server's stdin, or after the stdin close
    /// grace if the server does not take it (a host may write its last
    /// messages and close at once).
    pub(crate) fn handle_host_eof(&mut self, at: Stamp) {
        self.see(at);
        self.proxy.handle_host_eof(at);
        self.end_host_input(at);
    }

    /// The host's input is over (its EOF, or a request past the wire limit
    /// under the oversized policy `close`): the shutdown starts once what
    /// the host sent has reached the server's stdin, or after the stdin
    /// close grace.
    fn end_host_input(&mut self, at: Stamp) {
        let grace = self.config.supervisor.get_stdin_close_grace();
        self.ending = true;
        match at.instant.checked_add(grace) {
            Some(deadline)
                if self.proxy.server_backlog() > 0
                    && !self.server_stdin_closed
                    && self.lives.is_up() =>
            {
                self.stdin_drain_deadline = Some(deadline);
            }
            _ => self.supervisor.shutdown(at.instant),
        }
    }

    /// `n` bytes taken with [`poll_to_host`](Self::poll_to_host) reached the host's pipe.
    pub(crate) fn handle_host_written(&mut self, n: usize) {
        self.proxy.handle_host_written(n);
    }

    /// Writing to the host failed: the host side closes and the server is
    /// shut down.
    pub(crate) fn handle_host_write_error(&mut self, at: Stamp) {
        self.see(at);
        self.proxy.handle_host_write_error();
    }

    /// Bytes read from the server's stdout.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn handle_server_stdout(&mut self, at: Stamp, chunk: &[u8]) {
        self.see(at);
        self.idle.busy(at.instant);
        self.proxy.handle_server(at, chunk);
    }

    /// Room to read the server's stdout into (see `Proxy::server_room`);
    /// then [`GuardInput::ServerRead`] with what the read returned.
    pub fn server_stdout_room(&mut self) -> ReadRoom<'_> {
        self.proxy.server_room()
    }

    /// `n` bytes were read into [`server_stdout_room`](Self::server_stdout_room).
    pub(crate) fn handle_server_read(&mut self, at: Stamp, n: usize) {
        self.see(at);
        self.idle.busy(at.instant);
        self.proxy.handle_server_read(at, n);
    }

    /// The server's stdout ended: the shutdown sequence starts.
    pub(crate) fn handle_server_stdout_eof(&mut self, at: Stamp) {
        self.see(at);
        self.proxy.handle_server_eof(at);
        self.supervisor.handle_stdout_eof(at.instant);
        self.supervisor.shutdown(at.instant);
    }

    /// Bytes read from the server's stderr: kept within the capture, passed
    /// through within the forwarding budget (G10).
    pub(crate) fn handle_server_stderr(&mut self, at: Stamp, chunk: &[u8]) {
        let chunk: &[u8] = &self.secrets.stderr(chunk);
        self.see(at);
        if let Some(log) = self.log.as_mut() {
            log.stderr(at.unix_ms, chunk);
        }
        self.stderr.push(chunk);
        self.lives.stderr(chunk);
        let room = self
            .config
            .stderr_forward
            .saturating_sub(self.stderr_forwarded);
        let take = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if take > 0 {
            self.stderr_out.push_back(chunk[..take].to_vec());
            self.stderr_forwarded += take as u64;
        }
        if take < chunk.len() && !self.stderr_marker_shown {
            self.stderr_marker_shown = true;
            self.stderr_out.push_back(
                format!(
                    "\n[mcp-stdio guard: server stderr passed its budget of {} bytes; the rest is counted, its tail kept for the record]\n",
                    self.config.stderr_forward
                )
                .into_bytes(),
            );
        }
    }

    /// The server's stderr ended.
    pub(crate) fn handle_server_stderr_eof(&mut self, at: Stamp) {
        self.secrets.end_stderr();
        self.handle_server_stderr(at, &[]); // what the masking held back
        if let Some(log) = self.log.as_mut() {
            log.end_stderr(at.unix_ms);
        }
        self.see(at);
        self.supervisor.handle_stderr_eof(at.instant);
    }

    /// `n` bytes taken with [`poll_to_server`](Self::poll_to_server) reached the server's pipe.
    pub(crate) fn handle_server_written(&mut self, n: usize) {
        self.proxy.handle_server_written(n);
    }

    /// Writing to the server's stdin failed (it closed it): what waits for
    /// it is dropped.
    pub(crate) fn handle_server_stdin_error(&mut self) {
        self.server_stdin_closed = true;
        self.proxy.handle_server_input_closed();
    }

    /// The server exited with `status`.
    pub(crate) fn handle_exited(&mut self, at: Stamp, status: ExitStatus) {
        self.see(at);
        self.supervisor.handle_exited(at.instant, status);
    }

    /// Whether the server's exit was fed (or waiting for it failed for good):
    /// the loop stops waiting for it.
    pub fn exit_seen(&self) -> bool {
        self.exit_wait_failed || self.supervisor.exit_status().is_some()
    }

    /// The wait for the server's exit returned `r`; a failed wait means no
    /// status can ever be observed (the supervisor's deadlines end the session).
    pub(crate) fn handle_exit_result(&mut self, at: Stamp, r: std::io::Result<ExitStatus>) {
        match r {
            Ok(status) => self.handle_exited(at, status),
            Err(e) => {
                self.exit_wait_failed = true;
                tracing::warn!(error = %e, "waiting for the server failed");
            }
        }
    }

    /// A read of the server's `stream` returned `r` (the rule:
    /// [`ReadResult`]): stdout's bytes are in
    /// [`server_stdout_room`](Self::server_stdout_room), stderr's in `buf`.
    /// At the end of the stream, `look` is asked whether the server has
    /// exited, and an exit it reports is taken first, whatever order the loop
    /// saw them in. Returns whether the stream is still open.
    pub(crate) fn handle_server_read_result(
        &mut self,
        at: Stamp,
        stream: ChildStream,
        r: std::io::Result<usize>,
        buf: &[u8],
        look: LookForExit<'_>,
    ) -> bool {
        match (ReadResult::from(r), stream) {
            (ReadResult::Bytes(n), ChildStream::Stdout) => self.handle_server_read(at, n),
            (ReadResult::Bytes(n), ChildStream::Stderr) => {
                self.handle_server_stderr(at, &buf[..n.min(buf.len())]);
            }
            (ReadResult::Again, _) => {}
            (ReadResult::End(error), _) => {
                if let Some(e) = error {
                    tracing::debug!(error = %e, ?stream, "reading the server failed; taken as its end");
                }
                if let Some(r) = exit_before_end(self.exit_seen(), look) {
                    self.handle_exit_result(at, r);
                }
                match stream {
                    ChildStream::Stdout => self.handle_server_stdout_eof(at),
                    ChildStream::Stderr => self.handle_server_stderr_eof(at),
                }
                return false;
            }
        }
        true
    }

    /// A write to the server's stdin returned `r` (the rule: [`WriteResult`]).
    /// A failure (a 0-byte write included) drops what waits for the server
    /// and tells the loop to close the pipe.
    fn handle_server_write_result(&mut self, r: std::io::Result<usize>) {
        match WriteResult::from(r) {
            WriteResult::Bytes(n) => {
                self.proxy.server_outbox_mut().advance(n);
                self.handle_server_written(n);
            }
            WriteResult::Again => {}
            WriteResult::Full => self.server_parked = true,
            WriteResult::Failed(e) => {
                tracing::debug!(error = %e, "server stdin closed");
                self.handle_server_stdin_error();
                self.early.push_back(GuardAction::CloseServerStdin);
            }
        }
    }

    /// A read of the host's input into `buf` returned `r`: bytes, or (end or
    /// error) the host's end. Returns whether the input is still open.
    pub(crate) fn handle_host_read_result(
        &mut self,
        at: Stamp,
        r: std::io::Result<usize>,
        buf: &[u8],
    ) -> bool {
        match ReadResult::from(r) {
            ReadResult::Bytes(n) => self.handle_host(at, &buf[..n.min(buf.len())]),
            ReadResult::Again => {}
            ReadResult::End(error) => {
                if let Some(e) = error {
                    tracing::debug!(error = %e, "reading stdin failed");
                }
                self.handle_host_eof(at);
                return false;
            }
        }
        true
    }

    /// A signal reached the guard (the host stopping its server): passed on
    /// to the server's group at once, a further one climbs the ladder (see
    /// `ProcessSupervisor::forward`); recorded, and the log sealed.
    pub(crate) fn handle_signal(&mut self, at: Stamp, signal: Signal) {
        self.see(at);
        self.ending = true;
        self.host_signals = self.host_signals.saturating_add(1);
        self.idle.first_signal.get_or_insert(signal);
        // The host is stopping now: what it sent last waits no longer.
        self.stdin_drain_deadline = None;
        self.proxy.push_phase(GuardPhase::HostSignal {
            session_id: self.config.get_proxy().get_session_id().to_owned(),
            at_unix_ms: at.unix_ms,
            signal: signal.name().to_owned(),
            nth: self.host_signals,
        });
        self.supervisor.forward(at.instant, signal);
    }

    /// The time from [`poll_timeout`](Self::poll_timeout) was reached. A
    /// spurious call does nothing.
    pub(crate) fn handle_timeout(&mut self, at: Stamp) {
        self.see(at);
        if self.stdin_drain_deadline.is_some_and(|d| at.instant >= d) {
            self.stdin_drain_deadline = None;
            self.supervisor.shutdown(at.instant);
        }
        self.check_replay_deadline(at);
        self.check_idle(at);
        self.supervisor.handle_timeout(at.instant);
    }

    // ---- outputs ----

    /// The next thing the adapter must do.
    #[must_use]
    pub(crate) fn poll_action(&mut self) -> Option<GuardAction> {
        // After host EOF: once the server took everything, its stdin closes.
        if self.stdin_drain_deadline.is_some()
            && (self.proxy.server_backlog() == 0 || self.server_stdin_closed)
        {
            self.stdin_drain_deadline = None;
            if let Some(at) = self.latest {
                self.supervisor.shutdown(at.instant);
            }
        }
        while let Some(event) = self.proxy.poll_event() {
            // Events only follow inputs, which all carry a time.
            let Some(at) = self.latest else { continue };
            match event {
                ProxyEvent::RestartRefused { reason } => {
                    self.restart_refused(at, &reason);
                }
                ProxyEvent::OversizedClose { from_host } => {
                    self.ending = true;
                    self.oversized_close.get_or_insert(if from_host {
                        "oversized_request"
                    } else {
                        "oversized_response"
                    });
                    if from_host {
                        // As at the host's EOF: what it sent before reaches
                        // the server, then the shutdown; nothing more is read.
                        self.end_host_input(at);
                        return Some(GuardAction::CloseHostInput);
                    }
                    // The server's stdout is still drained (and dropped).
                    self.supervisor.shutdown(at.instant);
                }
                ProxyEvent::HostStoppedReading { .. } | ProxyEvent::HostOutputClosed => {
                    self.ending = true;
                    // Either way the host side is gone: stop the server too.
                    if let ProxyEvent::HostOutputClosed = event {
                        tracing::debug!("host stdout closed; shutting the server down");
                    }
                    self.supervisor.shutdown(at.instant);
                    return Some(GuardAction::CloseHostOutput);
                }
            }
        }
        if let Some(action) = self.poll_restart() {
            return Some(action);
        }
        let action = self.supervisor.poll_action()?;
        Some(match action {
            ProcessAction::CloseStdin => {
                self.server_stdin_closed = true;
                self.proxy.handle_server_input_closed();
                GuardAction::CloseServerStdin
            }
            ProcessAction::SignalGroup(sig) => GuardAction::SignalServerGroup(sig),
            ProcessAction::AbandonReaders => {
                self.stderr_out.push_back(
                    b"mcp-stdio guard: server pipes still open past the drain deadline (an escaped grandchild?); abandoning them\n"
                        .to_vec(),
                );
                GuardAction::AbandonServerReaders
            }
            ProcessAction::Finished(outcome) => self.on_server_finished(outcome),
        })
    }

    /// The next call record for the audit log.
    #[cfg(any(test, feature = "fuzzing"))]
    #[must_use]
    pub(crate) fn poll_record(&mut self) -> Option<CallRecord> {
        self.proxy.poll_record()
    }

    /// The next message for the server's stdin (none once it is closed).
    #[must_use]
    pub(crate) fn poll_to_server(&mut self, durable: u64) -> Option<Vec<u8>> {
        if self.server_stdin_closed {
            self.proxy.handle_server_input_closed();
            return None;
        }
        self.proxy.poll_to_server(durable)
    }

    /// The next message for the host (none once the host side is closed).
    /// Take one when nothing is being written, so a cancel can still
    /// withdraw a response not yet started.
    #[must_use]
    pub(crate) fn poll_to_host(&mut self) -> Option<Vec<u8>> {
        self.proxy.poll_to_host()
    }

    /// The next bytes for our own stderr: the server's stderr within its
    /// budget, the budget marker, and the proxy's notes (as lines).
    #[must_use]
    pub(crate) fn poll_stderr(&mut self) -> Option<Vec<u8>> {
        if let Some(b) = self.stderr_out.pop_front() {
            return Some(b);
        }
        self.proxy.poll_note().map(|note| {
            let mut note = self.secrets.note(note);
            if let Some(log) = self.log.as_mut() {
                log.note(self.latest.map_or(0, |l| l.unix_ms), &note);
            }
            note.push('\n');
            note.into_bytes()
        })
    }

    /// Turns the log copy on or off while the session runs: on while
    /// someone follows the server's logs (`mcp-stdio logs -f`); always on
    /// with [`GuardConfig::log_copy`]. A line already begun when it turns
    /// on starts where the copy did.
    pub fn set_log_copy(&mut self, on: bool) {
        let on = on || self.config.log_copy;
        if on != self.log.is_some() {
            self.log = on.then(log_copy::LogCopy::default);
        }
    }

    /// The next span ready (with [`GuardConfig::trace`]).
    pub(crate) fn poll_span(&mut self) -> Option<trace::CallSpan> {
        self.proxy.poll_span()
    }

    /// The log copy's next lines (with [`GuardConfig::log_copy`]).
    pub(crate) fn poll_log(&mut self) -> Option<Vec<u8>> {
        self.log.as_mut().and_then(log_copy::LogCopy::poll)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        [
            self.supervisor.poll_timeout(),
            self.stdin_drain_deadline,
            self.lives.restart_at(),
            self.idle_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ---- end ----

    /// The end-of-session report; `excerpt_bytes` sizes the stderr excerpt.
    pub fn report(mut self, excerpt_bytes: usize) -> GuardReport {
        let guard_closed_session = self.closed_by_guard();
        let protocol_version = self.proxy.protocol_version().map(|v| self.secrets.text(v));
        self.secrets.flush_into(&mut self.stderr);
        let captured = self.stderr.finish();
        GuardReport {
            protocol_version,
            proxy: self.proxy.metrics().clone(),
            process: self.finished,
            stderr: captured.summary(),
            stderr_tail: captured.render("stderr"),
            stderr_excerpt: captured.excerpt("stderr", excerpt_bytes),
            stderr_forwarded_bytes: self.stderr_forwarded,
            guard_closed_session,
            restarts: self.lives.restarts(),
            restarts_stopped: self.lives.stopped().map(str::to_owned),
            secrets_masked: self.secrets.masked(),
            log_lines_dropped: self.log.as_ref().map_or(0, log_copy::LogCopy::dropped),
            spans_dropped: self.proxy.spans_dropped(),
            idle_stops: self.idle.stops,
            resumes: self.idle.resumes,
        }
    }

    fn see(&mut self, at: Stamp) {
        self.latest = Some(match self.latest {
            Some(l) if l.instant > at.instant => l,
            _ => at,
        });
    }
}

#[cfg(test)]
mod tests;
