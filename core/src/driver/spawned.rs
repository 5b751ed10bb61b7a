//! A spawned MCP server as its client sees it: the protocol
//! session, the child's supervisor and its stderr, as one state machine.
//!
//! [`SpawnedServer`] combines a [`ClientSession`] (G2–G6), a
//! [`ProcessSupervisor`] (G11) and a budgeted stderr [`OutputCapture`] (G10),
//! and decides how they affect each other: stdout EOF or a closed session
//! starts the shutdown sequence; the record is built only from what was
//! observed (G12). Every adapter's `Client` is this state machine plus pipe
//! I/O, so the three adapters behave alike by construction.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::outbox::Outbox;
use crate::process::capture::{
    CaptureConfig, CaptureSummary, Grant, OutputCapture, SharedRetentionPool, DEFAULT_EXCERPT,
};
use crate::process::supervisor::{
    ChildPipes, ExitStatus, ProcessAction, ProcessOutcome, ProcessSupervisor, Signal,
    SupervisorConfig,
};
use crate::session::client::{
    CancelError, ClientConfig, ClientEvent, ClientMetrics, ClientSession, CloseReason, Incoming,
    SendError,
};
use crate::session::handshake::Implementation;
use crate::session::handshake::RequestStamp;
use crate::session::negotiate::{Negotiated, Negotiation, VersionPolicy, DEFAULT_DISCOVER_TIMEOUT};
use crate::wire::frame::{FramerConfig, ReadRoom};
use crate::wire::message::{ErrorObject, Id, RawValue};

/// Limits for forwarding the server's stderr to logs, line by line.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StderrForwardConfig {
    max_line_bytes: usize,
    max_total_bytes: u64,
    max_queued_lines: usize,
}

impl Default for StderrForwardConfig {
    fn default() -> Self {
        Self {
            max_line_bytes: 2048,
            max_total_bytes: 64 * 1024,
            max_queued_lines: 64,
        }
    }
}

impl StderrForwardConfig {
    /// Longest line forwarded (default 2 KiB); longer lines are cut and marked
    /// with `…`. This is also the size of the line buffer.
    pub fn max_line_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_line_bytes = bytes;
        self
    }

    /// Total bytes forwarded over the session (default 64 KiB; 0 disables
    /// forwarding). After it, one notice line says forwarding stopped; the
    /// capture still keeps the tail.
    pub fn max_total_bytes(&mut self, bytes: u64) -> &mut Self {
        self.max_total_bytes = bytes;
        self
    }

    /// Lines waiting for `SpawnedServer::poll_stderr_line` (default 64; worst
    /// case that many × `max_line_bytes`). Past it lines are dropped and counted.
    pub fn max_queued_lines(&mut self, n: usize) -> &mut Self {
        self.max_queued_lines = n;
        self
    }
}

/// Everything observed about one session, built when it is over (G12).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct SessionRecord {
    /// The child's observed end: exit status (or `None`), shutdown path, stream ends.
    pub process: ProcessOutcome,
    /// Why the protocol session closed.
    pub close_reason: Option<CloseReason>,
    /// stderr accounting: bytes seen, retained, truncated.
    pub stderr: CaptureSummary,
    /// The retained stderr, decoded lossily, after a truncation marker when
    /// bytes were dropped (`[stderr truncated: kept last N of M bytes]`).
    pub stderr_tail: String,
    /// The newest stderr bytes for an agent's context, at most the configured
    /// excerpt size.
    pub stderr_excerpt: String,
    /// stderr lines forwarded to logs, and lines dropped from forwarding.
    pub stderr_lines_forwarded: u64,
    /// stderr lines not forwarded (queue full or budget used up).
    pub stderr_lines_dropped: u64,
    /// The protocol session's counters.
    pub metrics: ClientMetrics,
}

impl SessionRecord {
    /// The exit status actually observed, if any.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.process.exit_status
    }
}

/// What the adapter must do, from [`SpawnedServer::poll_action`].
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum SpawnedAction {
    /// Close the write end of the server's stdin (drop it); discard any bytes
    /// not yet written.
    CloseStdin,
    /// Send this signal to the server's process group; `ESRCH` is not an error.
    SignalGroup(Signal),
    /// Stop reading the streams that are still open.
    AbandonReaders,
    /// The session is over. Release the stderr grant with
    /// [`SpawnedServer::take_grant`] if a pool is used.
    Finished(Box<SessionRecord>),
}

/// Everything an adapter's `Client::spawn` takes besides the command.
///
/// It holds the knobs of its own (the stderr pool, the excerpt, who the
/// client says it is) and one config per part of the session, each edited in
/// place with `name_mut()` and read with `get_name()`: the protocol session
/// ([`session_mut`](Self::session_mut)), the framing of the server's stdout
/// and the wire limit ([`framer_mut`](Self::framer_mut)), the shutdown
/// graces ([`supervisor_mut`](Self::supervisor_mut)), the stderr capture
/// ([`stderr_mut`](Self::stderr_mut)) and its forwarding to logs
/// ([`stderr_forward_mut`](Self::stderr_forward_mut)). Each knob has one
/// setter, on the config that holds it; none holds a config of its own.
///
/// ```
/// use std::time::Duration;
/// use mcp_stdio_core::ClientOptions;
///
/// let mut options = ClientOptions::default();
/// options.framer_mut().max_frame(1 << 20);
/// options.session_mut().default_timeout(Some(Duration::from_secs(10)));
/// options.stderr_mut().tail(4096);
/// options.supervisor_mut().term_grace(Duration::from_millis(500));
/// assert_eq!(options.get_framer().get_max_frame(), 1 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    session: ClientConfig,
    framer: FramerConfig,
    supervisor: SupervisorConfig,
    stderr: CaptureConfig,
    stderr_excerpt_bytes: usize,
    stderr_forward: StderrForwardConfig,
    stderr_pool: Option<SharedRetentionPool>,
    client_info: Implementation,
    client_capabilities: Option<Box<RawValue>>,
    version_policy: VersionPolicy,
    discover_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            session: ClientConfig::default(),
            framer: FramerConfig::default(),
            supervisor: SupervisorConfig::default(),
            stderr: CaptureConfig::default(),
            stderr_excerpt_bytes: DEFAULT_EXCERPT,
            stderr_forward: StderrForwardConfig::default(),
            stderr_pool: Some(SharedRetentionPool::process()),
            client_info: Implementation::default(),
            client_capabilities: None,
            version_policy: VersionPolicy::Auto,
            discover_timeout: DEFAULT_DISCOVER_TIMEOUT,
        }
    }
}

impl ClientOptions {
    /// Edits the protocol session's limits in place (see [`ClientConfig`]:
    /// 128 requests in flight, a 256-message inbox, 8 MiB outgoing, a 60 s
    /// default deadline).
    pub fn session_mut(&mut self) -> &mut ClientConfig {
        &mut self.session
    }

    /// Edits the framing of the server's stdout in place (see
    /// [`FramerConfig`]): the wire limit `max_frame` (default 16 MiB,
    /// [`DEFAULT_MAX_FRAME`](crate::DEFAULT_MAX_FRAME)), which also limits
    /// every message this client sends, the id scan of an oversized line
    /// (256 B), the oversized policy (discard) and the invalid UTF-8 policy
    /// (repair). Worst case: one frame of `max_frame` buffered while it
    /// arrives, and each response waiting to be polled up to this size.
    pub fn framer_mut(&mut self) -> &mut FramerConfig {
        &mut self.framer
    }

    /// Edits the shutdown graces in place (see [`SupervisorConfig`]: 2 s
    /// after closing stdin, 2 s after `SIGTERM`, 1 s reader drain).
    pub fn supervisor_mut(&mut self) -> &mut SupervisorConfig {
        &mut self.supervisor
    }

    /// Edits the per-process stderr capture budget in place (default: last
    /// 16 KiB, no head; worst case `head + tail` bytes, allocated in full at
    /// the spawn). When a retention pool is set, the capture keeps at most
    /// what the pool grants.
    pub fn stderr_mut(&mut self) -> &mut CaptureConfig {
        &mut self.stderr
    }

    /// Sets the bytes of stderr in the record's agent excerpt (default
    /// 4 KiB; one string of at most this size, built at the end).
    pub fn stderr_excerpt_bytes(&mut self, bytes: usize) -> &mut Self {
        self.stderr_excerpt_bytes = bytes;
        self
    }

    /// Edits the line forwarding of stderr to logs in place (see
    /// [`StderrForwardConfig`]: 2 KiB lines, 64 KiB in all, 64 queued).
    pub fn stderr_forward_mut(&mut self) -> &mut StderrForwardConfig {
        &mut self.stderr_forward
    }

    /// Sets the process-wide stderr budget shared by every capture; the
    /// client asks it for the stderr capture's budget and gives it back at
    /// the end. Default: [`SharedRetentionPool::process`] (256 KiB for the
    /// whole process); `None`: this client's capture is bounded by the
    /// config alone.
    pub fn stderr_pool(&mut self, pool: Option<SharedRetentionPool>) -> &mut Self {
        self.stderr_pool = pool;
        self
    }

    /// Sets who the client says it is in `initialize`, `server/discover`
    /// and the `_meta` of every modern request (default `mcp-stdio` and this
    /// crate's version).
    pub fn client_info(&mut self, info: Implementation) -> &mut Self {
        self.client_info = info;
        self
    }

    /// Sets the capabilities the client declares in `initialize` (and in
    /// the `_meta` of every modern request): a raw JSON
    /// object, e.g. `{"roots":{"listChanged":true},"sampling":{}}` (default
    /// `None`, which sends `{}`).
    pub fn client_capabilities(&mut self, capabilities: Option<Box<RawValue>>) -> &mut Self {
        self.client_capabilities = capabilities;
        self
    }

    /// Sets which protocol revision `initialize` asks for (default
    /// [`VersionPolicy::Auto`]: probe with `server/discover`, fall back to
    /// the `initialize` handshake; a pin asks for one version only). See
    /// [`Negotiation`](crate::Negotiation).
    pub fn version_policy(&mut self, policy: VersionPolicy) -> &mut Self {
        self.version_policy = policy;
        self
    }

    /// Sets how long the automatic `server/discover` probe waits before
    /// falling back to `initialize` (default
    /// [`DEFAULT_DISCOVER_TIMEOUT`], 10 s). A pinned modern version waits
    /// the session's default timeout instead.
    pub fn discover_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.discover_timeout = timeout;
        self
    }

    /// Which protocol revision `initialize` asks for.
    pub fn get_version_policy(&self) -> &VersionPolicy {
        &self.version_policy
    }

    /// How long the automatic probe waits.
    pub fn get_discover_timeout(&self) -> Duration {
        self.discover_timeout
    }

    /// A new negotiation of the protocol version with these options' policy,
    /// client info, capabilities and probe timeout: what every adapter's
    /// `Client::initialize` runs.
    pub fn negotiation(&self) -> Negotiation {
        Negotiation::new(
            self.version_policy.clone(),
            self.client_info.clone(),
            self.client_capabilities.clone(),
            self.discover_timeout,
        )
    }

    /// The protocol session's limits.
    pub fn get_session(&self) -> &ClientConfig {
        &self.session
    }

    /// The framing of the server's stdout, and the wire limit.
    pub fn get_framer(&self) -> &FramerConfig {
        &self.framer
    }

    /// The shutdown graces.
    pub fn get_supervisor(&self) -> &SupervisorConfig {
        &self.supervisor
    }

    /// The stderr capture budget.
    pub fn get_stderr(&self) -> &CaptureConfig {
        &self.stderr
    }

    /// The size of the record's stderr excerpt.
    pub fn get_stderr_excerpt_bytes(&self) -> usize {
        self.stderr_excerpt_bytes
    }

    /// The stderr line forwarding limits.
    pub fn get_stderr_forward(&self) -> &StderrForwardConfig {
        &self.stderr_forward
    }

    /// The stderr retention pool, if any.
    pub fn get_stderr_pool(&self) -> Option<&SharedRetentionPool> {
        self.stderr_pool.as_ref()
    }

    /// Who the client says it is.
    pub fn get_client_info(&self) -> &Implementation {
        &self.client_info
    }

    /// The declared client capabilities (`None`: `{}`).
    pub fn get_client_capabilities(&self) -> Option<&RawValue> {
        self.client_capabilities.as_deref()
    }

    /// Builds the spawned server's machine for a new child, taking a grant from the pool.
    pub(crate) fn new_spawned_server(&self) -> SpawnedServer {
        let grant = self
            .stderr_pool
            .as_ref()
            .map(|p| p.grant(self.stderr.wanted()));
        SpawnedServer::new(self, grant)
    }

    /// Gives a finished session's grant back to the pool.
    pub(crate) fn release_grant(&self, host: &mut SpawnedServer) {
        if let (Some(pool), Some(grant)) = (&self.stderr_pool, host.take_grant()) {
            if let Err(e) = pool.release(grant) {
                tracing::warn!(error = %e, "stderr grant not returned to its pool");
            }
        }
    }
}

/// Splits stderr into lines for logs, within a byte budget.
#[derive(Debug)]
struct LineForwarder {
    config: StderrForwardConfig,
    line: Vec<u8>,
    cut: bool,
    lines: VecDeque<String>,
    forwarded_bytes: u64,
    forwarded_lines: u64,
    dropped_lines: u64,
    exhausted: bool,
}

impl LineForwarder {
    fn new(config: StderrForwardConfig) -> Self {
        Self {
            config,
            line: Vec::new(),
            cut: false,
            lines: VecDeque::new(),
            forwarded_bytes: 0,
            forwarded_lines: 0,
            dropped_lines: 0,
            exhausted: false,
        }
    }

    fn push(&mut self, mut chunk: &[u8]) {
        if self.config.max_total_bytes == 0 {
            return;
        }
        if self.exhausted {
            // Past the budget only the count of lines matters: no copies,
            // no decoding (a 1 GiB flood is millions of lines).
            self.dropped_lines += memchr::memchr_iter(b'\n', chunk).count() as u64;
            return;
        }
        while !chunk.is_empty() {
            let (part, rest, complete) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &[][..], false),
            };
            let room = self.config.max_line_bytes.saturating_sub(self.line.len());
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            self.cut |= part.len() > room;
            if complete {
                self.end_line();
            }
            chunk = rest;
        }
    }

    fn end_line(&mut self) {
        if self.exhausted {
            self.line.clear();
            self.cut = false;
            self.dropped_lines += 1;
            return;
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        let mut text = String::from_utf8_lossy(&self.line).into_owned();
        if self.cut {
            text.push('…');
        }
        self.line.clear();
        self.cut = false;
        if self.forwarded_bytes + text.len() as u64 > self.config.max_total_bytes {
            self.exhausted = true;
            self.dropped_lines += 1;
            self.queue(format!(
                "[stderr forwarding stopped after {} bytes; the capture keeps the tail]",
                self.forwarded_bytes
            ));
            return;
        }
        self.forwarded_bytes += text.len() as u64;
        if self.queue(text) {
            self.forwarded_lines += 1;
        }
    }

    fn queue(&mut self, text: String) -> bool {
        if self.lines.len() >= self.config.max_queued_lines {
            self.dropped_lines += 1;
            return false;
        }
        self.lines.push_back(text);
        true
    }

    fn finish(&mut self) {
        if !self.line.is_empty() {
            self.end_line();
        }
    }
}

/// A running session seen from outside: its counters and the newest bytes
/// of the server's stderr, now (`Client::snapshot` in every adapter). The
/// final [`SessionRecord`] says the same at the end.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct LiveSnapshot {
    /// The protocol session's counters.
    pub metrics: ClientMetrics,
    /// Bytes the server has written to stderr so far (kept or not).
    pub stderr_seen: u64,
    /// The newest bytes of stderr kept (the capture's tail, redacted when the
    /// capture redacts), decoded lossily.
    pub stderr_tail: String,
}

/// The host side of a session with one spawned MCP server (sans-IO).
///
/// # Methods, by group
///
/// - **Getters**: [`metrics`](Self::metrics), [`session`](Self::session),
///   [`stderr_seen`](Self::stderr_seen).
/// - **Inputs from the system**: [`handle_spawned`](Self::handle_spawned),
///   [`handle_stdout`](Self::handle_stdout),
///   [`handle_stdout_eof`](Self::handle_stdout_eof),
///   [`handle_stderr`](Self::handle_stderr),
///   [`handle_stderr_eof`](Self::handle_stderr_eof),
///   [`handle_exited`](Self::handle_exited),
///   [`handle_timeout`](Self::handle_timeout).
/// - **Commands from the application**: [`request`](Self::request),
///   [`notify`](Self::notify), [`cancel`](Self::cancel),
///   [`respond`](Self::respond), [`shutdown`](Self::shutdown),
///   [`kill`](Self::kill).
/// - **Outputs**: [`poll_transmit`](Self::poll_transmit),
///   [`poll_action`](Self::poll_action), [`poll_event`](Self::poll_event),
///   [`poll_incoming`](Self::poll_incoming),
///   [`poll_stderr_line`](Self::poll_stderr_line),
///   [`poll_timeout`](Self::poll_timeout).
///
/// # Polling order
///
/// After any input or command: `poll_transmit` until `None` (queue the bytes
/// for stdin), `poll_action` until `None` (close stdin, signal the group,
/// stop readers; `Finished` ends the session), `poll_event` until `None`
/// (wake waiting callers), `poll_stderr_line` until `None` (log), then arm a
/// timer for `poll_timeout`. Keep reading stdout and stderr throughout (G1):
/// the session never asks the adapter to pause a reader.
#[derive(Debug)]
pub(crate) struct SpawnedServer {
    stderr_excerpt_bytes: usize,
    session: ClientSession,
    supervisor: ProcessSupervisor,
    stderr: Option<OutputCapture>,
    forwarder: LineForwarder,
    stdin_closed: bool,
    shutdown_started: bool,
    grant: Option<Grant>,
    finished: bool,
}

impl SpawnedServer {
    /// A session for a server about to be spawned. `stderr_grant` is this
    /// process's share of a process-wide retention pool, if one is used.
    pub(crate) fn new(options: &ClientOptions, stderr_grant: Option<Grant>) -> Self {
        let stderr = match stderr_grant {
            Some(grant) => OutputCapture::with_grant(&options.stderr, grant),
            None => OutputCapture::new(&options.stderr),
        };
        Self {
            session: ClientSession::new(options.session.clone(), options.framer.clone()),
            supervisor: ProcessSupervisor::new(options.supervisor),
            forwarder: LineForwarder::new(options.stderr_forward.clone()),
            stderr: Some(stderr),
            stderr_excerpt_bytes: options.stderr_excerpt_bytes,
            stdin_closed: false,
            shutdown_started: false,
            grant: None,
            finished: false,
        }
    }

    // ---- getters ----

    /// The protocol session's counters.
    pub(crate) fn metrics(&self) -> ClientMetrics {
        self.session.metrics()
    }

    /// The protocol session.
    pub(crate) fn session(&self) -> &ClientSession {
        &self.session
    }

    #[cfg(test)]
    /// stderr bytes seen so far.
    pub(crate) fn stderr_seen(&self) -> u64 {
        self.stderr.as_ref().map_or(0, OutputCapture::seen)
    }

    // ---- inputs ----

    /// The server was spawned with stdin, stdout and stderr piped.
    pub(crate) fn handle_spawned(&mut self, now: Instant) {
        self.supervisor.handle_spawned(now, ChildPipes::ALL);
    }

    #[cfg(test)]
    /// Bytes from the server's stdout.
    pub(crate) fn handle_stdout(&mut self, now: Instant, chunk: &[u8]) {
        self.session.handle_stdout(now, chunk);
        self.shutdown_if_session_closed(now);
    }

    /// Room to read the server's stdout into (see
    /// [`ClientSession::stdout_room`]); then
    /// [`handle_stdout_read`](Self::handle_stdout_read).
    pub(crate) fn stdout_room(&mut self) -> ReadRoom<'_> {
        self.session.stdout_room()
    }

    /// `n` bytes were read into [`stdout_room`](Self::stdout_room).
    pub(crate) fn handle_stdout_read(&mut self, now: Instant, n: usize) {
        self.session.handle_stdout_read(now, n);
        self.shutdown_if_session_closed(now);
    }

    /// The server's stdout reached end-of-file (or failed): the protocol
    /// session is over, so the shutdown sequence starts.
    pub(crate) fn handle_stdout_eof(&mut self, now: Instant) {
        self.session.handle_stdout_eof(now);
        self.supervisor.handle_stdout_eof(now);
        self.shutdown_if_session_closed(now);
    }

    /// Bytes from the server's stderr: captured within budget, forwarded as
    /// lines within budget, always counted (G10).
    pub(crate) fn handle_stderr(&mut self, _now: Instant, chunk: &[u8]) {
        if let Some(c) = self.stderr.as_mut() {
            c.push(chunk);
        }
        self.forwarder.push(chunk);
    }

    /// The server's stderr reached end-of-file (or failed).
    pub(crate) fn handle_stderr_eof(&mut self, now: Instant) {
        self.forwarder.finish();
        self.supervisor.handle_stderr_eof(now);
    }

    /// The server process exited (observed by `wait`).
    pub(crate) fn handle_exited(&mut self, now: Instant, status: ExitStatus) {
        self.supervisor.handle_exited(now, status);
    }

    /// Time passed: request deadlines and shutdown graces.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        self.supervisor.handle_timeout(now);
    }

    // ---- commands ----

    /// Sends a request (see [`ClientSession::request`]), its progress to
    /// `progress` if given ([`ClientSession::request_with_progress`]).
    pub(crate) fn request(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<&RawValue>,
        timeout: Option<Duration>,
        progress: Option<std::sync::Arc<crate::session::progress::ProgressQueue>>,
    ) -> Result<Id, SendError> {
        if self.stdin_closed {
            return Err(SendError::Closed);
        }
        match progress {
            Some(queue) => self
                .session
                .request_with_progress(now, method, params, timeout, queue),
            None => self.session.request(now, method, params, timeout),
        }
    }

    /// The counters now and the newest `stderr_bytes` bytes of stderr kept.
    pub(crate) fn snapshot(&self, stderr_bytes: usize) -> LiveSnapshot {
        let (seen, tail) = self
            .stderr
            .as_ref()
            .map_or((0, Vec::new()), |c| (c.seen(), c.newest(stderr_bytes)));
        LiveSnapshot {
            metrics: self.session.metrics(),
            stderr_seen: seen,
            stderr_tail: String::from_utf8_lossy(&tail).into_owned(),
        }
    }

    /// What a negotiation agreed: a modern version stamps every request
    /// from now on and refuses the server's requests; a handshake version
    /// stamps nothing.
    pub(crate) fn set_negotiated(&mut self, negotiated: &Negotiated, options: &ClientOptions) {
        let stamp = negotiated.is_modern().then(|| {
            RequestStamp::new(
                &negotiated.protocol_version,
                &options.client_info,
                options.client_capabilities.as_deref(),
            )
        });
        self.session.stamp_requests(stamp);
    }

    /// Sends a notification.
    pub(crate) fn notify(
        &mut self,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), SendError> {
        if self.stdin_closed {
            return Err(SendError::Closed);
        }
        self.session.notify(method, params)
    }

    /// Cancels a pending request (G6).
    pub(crate) fn cancel(&mut self, id: &Id, reason: Option<&str>) -> Result<(), CancelError> {
        self.session.cancel(id, reason)
    }

    /// Answers a server→client request.
    pub(crate) fn respond(
        &mut self,
        id: &Id,
        result: Result<&RawValue, &ErrorObject>,
    ) -> Result<(), SendError> {
        if self.stdin_closed {
            return Err(SendError::Closed);
        }
        self.session.respond(id, result)
    }

    /// Graceful shutdown: pending requests fail with `SessionClosed`, then
    /// close stdin → grace → `SIGTERM` → grace → `SIGKILL` → drain readers (G11).
    pub(crate) fn shutdown(&mut self, now: Instant) {
        self.session.close();
        self.shutdown_started = true;
        self.supervisor.shutdown(now);
    }

    /// Hard stop: pending requests fail, `SIGTERM` at once, `SIGKILL` after
    /// the grace.
    pub(crate) fn kill(&mut self, now: Instant) {
        self.session.close();
        self.shutdown_started = true;
        self.supervisor.cancel(now);
    }

    // ---- outputs ----

    /// The session's outgoing queue, and the message being written from it.
    pub(crate) fn outbox(&self) -> &Outbox<()> {
        self.session.outbox()
    }

    /// The same, to fill and write from.
    pub(crate) fn outbox_mut(&mut self) -> &mut Outbox<()> {
        self.session.outbox_mut()
    }

    /// The next message for the server's stdin.
    #[must_use]
    pub(crate) fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.stdin_closed {
            // Drain and drop: nobody will write them.
            while self.session.poll_transmit().is_some() {}
            return None;
        }
        self.session.poll_transmit()
    }

    /// The next process action.
    #[must_use]
    pub(crate) fn poll_action(&mut self) -> Option<SpawnedAction> {
        let action = self.supervisor.poll_action()?;
        Some(match action {
            ProcessAction::CloseStdin => {
                self.stdin_closed = true;
                SpawnedAction::CloseStdin
            }
            ProcessAction::SignalGroup(s) => SpawnedAction::SignalGroup(s),
            ProcessAction::AbandonReaders => SpawnedAction::AbandonReaders,
            ProcessAction::Finished(outcome) => {
                self.finished = true;
                self.stdin_closed = true;
                // Whatever happened, the protocol session is over now.
                self.session.close();
                self.forwarder.finish();
                SpawnedAction::Finished(Box::new(self.build_record(outcome)))
            }
        })
    }

    /// The next completion or session state change.
    #[must_use]
    pub(crate) fn poll_event(&mut self) -> Option<ClientEvent> {
        self.session.poll_event()
    }

    /// The next server→client message from the bounded inbox.
    #[must_use]
    pub(crate) fn poll_incoming(&mut self, now: Instant) -> Option<Incoming> {
        self.session.poll_incoming(now)
    }

    /// The next stderr line to log (within the forwarding budget).
    #[must_use]
    pub(crate) fn poll_stderr_line(&mut self) -> Option<String> {
        self.forwarder.lines.pop_front()
    }

    /// The earliest deadline: a request's or the shutdown sequence's.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match (self.session.poll_timeout(), self.supervisor.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// After `Finished`: the retention pool grant to give back, if any.
    pub(crate) fn take_grant(&mut self) -> Option<Grant> {
        self.grant.take()
    }

    fn shutdown_if_session_closed(&mut self, now: Instant) {
        if !self.shutdown_started && self.session.is_closed().is_some() {
            self.shutdown_started = true;
            self.supervisor.shutdown(now);
        }
    }

    fn build_record(&mut self, process: ProcessOutcome) -> SessionRecord {
        let captured = self
            .stderr
            .take()
            .unwrap_or_else(|| OutputCapture::new(&CaptureConfig::default()))
            .finish();
        let record = SessionRecord {
            process,
            close_reason: self.session.is_closed().cloned(),
            stderr: captured.summary(),
            stderr_tail: captured.render("stderr"),
            stderr_excerpt: captured.excerpt("stderr", self.stderr_excerpt_bytes),
            stderr_lines_forwarded: self.forwarder.forwarded_lines,
            stderr_lines_dropped: self.forwarder.dropped_lines,
            metrics: self.session.metrics(),
        };
        self.grant = captured.into_grant();
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spawned_server_is_built_from_the_options() {
        let mut pool = crate::PoolConfig::default();
        pool.limit(1 << 20).reserve(0);
        let pool = crate::SharedRetentionPool::new(&pool);
        let mut o = ClientOptions::default();
        o.stderr_pool(Some(pool.clone())).stderr_mut().tail(4096);
        let host = o.new_spawned_server();
        // The capture asked the pool for exactly the configured tail.
        assert_eq!(pool.stats().in_use, 4096);
        assert_eq!(
            host.session().framer_config().get_max_frame(),
            crate::DEFAULT_MAX_FRAME
        );
    }
    use crate::process::supervisor::{EndedBy, StreamEnd};
    use crate::session::client::RequestFailure;

    fn drain_actions(h: &mut SpawnedServer) -> Vec<SpawnedAction> {
        let mut v = Vec::new();
        while let Some(a) = h.poll_action() {
            v.push(a);
        }
        v
    }

    #[test]
    fn g11_g12_stdout_eof_starts_shutdown_and_the_record_is_observed_facts() {
        let t0 = Instant::now();
        let mut h = SpawnedServer::new(&ClientOptions::default(), None);
        h.handle_spawned(t0);
        let id = h.request(t0, "ping", None, None, None).unwrap();
        assert!(h.poll_transmit().is_some());
        h.handle_stderr(t0, b"booting\npartial");
        h.handle_stdout_eof(t0);
        // Pending request failed; shutdown began by closing stdin.
        let mut failed = false;
        while let Some(ev) = h.poll_event() {
            if let ClientEvent::Completed { id: got, outcome } = ev {
                failed |= got == id && matches!(outcome, Err(RequestFailure::SessionClosed));
            }
        }
        assert!(failed);
        assert!(matches!(
            drain_actions(&mut h).as_slice(),
            [SpawnedAction::CloseStdin]
        ));
        assert!(h.request(t0, "ping", None, None, None).is_err());
        h.handle_stderr_eof(t0);
        h.handle_exited(t0 + Duration::from_millis(5), ExitStatus::Code(0));
        let actions = drain_actions(&mut h);
        let Some(SpawnedAction::Finished(record)) = actions.last() else {
            panic!("{actions:?}");
        };
        assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
        // Its stdout closed before ours: it was ending on its own (G12).
        assert_eq!(record.process.ended_by, EndedBy::ExitedByItself);
        assert_eq!(record.process.stdout, Some(StreamEnd::Eof));
        assert_eq!(record.process.stderr, Some(StreamEnd::EofAfterShutdown));
        assert_eq!(record.process.cancel_to_exit, None);
        assert_eq!(record.close_reason, Some(CloseReason::StdoutEof));
        assert_eq!(record.stderr.seen, 15);
        assert_eq!(record.stderr_tail, "booting\npartial");
        assert_eq!(record.stderr_lines_forwarded, 2);
        assert_eq!(h.poll_stderr_line().as_deref(), Some("booting"));
        assert_eq!(h.poll_stderr_line().as_deref(), Some("partial"));
    }

    #[test]
    fn g10_stderr_forwarding_is_budgeted_and_the_capture_keeps_the_tail() {
        let t0 = Instant::now();
        let mut cfg = ClientOptions::default();
        cfg.stderr_forward_mut()
            .max_total_bytes(100)
            .max_line_bytes(10);
        cfg.stderr_mut().tail(64);
        let mut h = SpawnedServer::new(&cfg, None);
        h.handle_spawned(t0);
        for _ in 0..1000 {
            h.handle_stderr(t0, b"helper-diagnostic 1234567890\n");
        }
        let mut lines = Vec::new();
        while let Some(l) = h.poll_stderr_line() {
            lines.push(l);
        }
        // Lines cut to 10 bytes plus the marker; forwarding stops within budget.
        assert_eq!(lines[0], "helper-dia…");
        assert!(lines
            .last()
            .unwrap()
            .starts_with("[stderr forwarding stopped"));
        let forwarded: usize = lines[..lines.len() - 1].iter().map(String::len).sum();
        assert!(forwarded <= 100, "{forwarded}");
        assert_eq!(h.stderr_seen(), 29_000);
        h.kill(t0);
        h.handle_stdout_eof(t0);
        h.handle_stderr_eof(t0);
        h.handle_exited(t0, ExitStatus::Signal(15));
        let actions = drain_actions(&mut h);
        let Some(SpawnedAction::Finished(r)) = actions.last() else {
            panic!("{actions:?}");
        };
        assert!(r.stderr.truncated);
        assert_eq!(r.stderr.retained, 64);
        assert!(r
            .stderr_tail
            .starts_with("[stderr truncated: kept last 64 of 29000 bytes]"));
        assert_eq!(r.exit_status(), Some(ExitStatus::Signal(15)));
    }

    #[test]
    fn g11_shutdown_escalates_on_the_clock() {
        let t0 = Instant::now();
        let mut h = SpawnedServer::new(&ClientOptions::default(), None);
        h.handle_spawned(t0);
        h.shutdown(t0);
        assert!(matches!(
            drain_actions(&mut h).as_slice(),
            [SpawnedAction::CloseStdin]
        ));
        let t1 = h.poll_timeout().unwrap();
        assert_eq!(t1, t0 + Duration::from_secs(2));
        h.handle_timeout(t1);
        assert!(matches!(
            drain_actions(&mut h).as_slice(),
            [SpawnedAction::SignalGroup(Signal::Term)]
        ));
        let t2 = h.poll_timeout().unwrap();
        h.handle_timeout(t2);
        assert!(matches!(
            drain_actions(&mut h).as_slice(),
            [SpawnedAction::SignalGroup(Signal::Kill)]
        ));
        h.handle_exited(t2, ExitStatus::Signal(9));
        h.handle_stdout_eof(t2);
        h.handle_stderr_eof(t2);
        let actions = drain_actions(&mut h);
        let Some(SpawnedAction::Finished(r)) = actions.last() else {
            panic!("{actions:?}");
        };
        assert_eq!(r.process.ended_by, EndedBy::ExitedAfterKill);
        assert_eq!(r.close_reason, Some(CloseReason::Local));
    }
}
