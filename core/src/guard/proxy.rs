//! The guard's decisions: a host session and a server session joined, limits
//! both ways, cancel enforcement, and one [`CallRecord`] per request.
//!
//! A [`Proxy`] stands between a host (an MCP client that launched us instead
//! of the server) and the server we spawned. Both directions are framed with
//! the wire limit before any parse (G2). Frames are forwarded byte for byte as
//! they arrived (plus `\n`), so a well-behaved session is unchanged; the proxy
//! decodes them only to track requests, cancels and outcomes:
//!
//! - an oversized host request never reaches the server; the host gets an
//!   error for its id (G2);
//! - an oversized server response becomes an error for its id, and the
//!   session goes on (G3);
//! - nothing for a cancelled id reaches the host after the cancel (G6, and
//!   the 2026-07-28 rule that no message for a cancelled request follows):
//!   a response or progress notification still queued here is withdrawn, a
//!   late one is dropped (bytes already handed to the adapter are out of
//!   reach); progress is tied to its request by the request's
//!   `_meta.progressToken`;
//! - both revisions' handshakes are known: a host's cancel of `initialize`
//!   or `server/discover` (which the spec forbids) is neither forwarded nor
//!   enforced, so the host still gets its answer; their records say the
//!   version settled on or the versions offered;
//! - a multi-round-trip request (2026-07-28: a result with
//!   `resultType: "input_required"`) is one call per round trip, linked in
//!   the records by a digest of its `requestState` (`input required,
//!   requestState #…` on the first, `continues requestState #…` on the
//!   retry); a task the server creates (`resultType: "task"`) is remembered
//!   so the record of a `tasks/cancel` names the call whose work it cancels;
//! - non-protocol server stdout lines become notes for stderr (G13);
//! - each request gets a [`CallLifecycle`]: its record is emitted when it is
//!   dispatched (before the adapter writes it to the server) and again when it
//!   ends (G12);
//! - **the host that stops reading is detected here** (G1): the adapter
//!   reports the bytes it actually wrote to the host
//!   ([`Proxy::handle_host_written`]); once more than
//!   [`ProxyConfig::max_buffered`] bytes wait for the host, the proxy gives
//!   [`ProxyEvent::HostStoppedReading`], drops what waits, and from then on
//!   counts and drops everything meant for the host. The adapter closes the
//!   session (the guard exits 75 after shutting the server down).
//!
//! # Methods, by group
//!
//! - **Getters:** [`config`](Proxy::config), [`metrics`](Proxy::metrics),
//!   [`host_backlog`](Proxy::host_backlog),
//!   [`server_backlog`](Proxy::server_backlog),
//!   [`wants_host_input`](Proxy::wants_host_input),
//!   [`host_closed`](Proxy::host_closed),
//!   [`tracked`](Proxy::tracked).
//! - **Inputs** (`handle_*`, each with a [`Stamp`] of both clocks):
//!   [`handle_host`](Proxy::handle_host) /
//!   [`handle_host_eof`](Proxy::handle_host_eof) (bytes read from the host),
//!   [`handle_server`](Proxy::handle_server) /
//!   [`handle_server_eof`](Proxy::handle_server_eof) (bytes read from the
//!   server's stdout),
//!   [`handle_host_written`](Proxy::handle_host_written) /
//!   [`handle_server_written`](Proxy::handle_server_written) (write
//!   progress: bytes that reached the pipe),
//!   [`handle_host_write_error`](Proxy::handle_host_write_error),
//!   [`handle_server_input_closed`](Proxy::handle_server_input_closed),
//!   [`finish`](Proxy::finish) (the session is over).
//! - **Outputs** (`poll_*`, `#[must_use]`):
//!   [`poll_event`](Proxy::poll_event), [`poll_record`](Proxy::poll_record),
//!   [`poll_to_server`](Proxy::poll_to_server),
//!   [`poll_to_host`](Proxy::poll_to_host), [`poll_note`](Proxy::poll_note).
//!
//! The proxy has no timers. After every input, poll in this order until
//! nothing is left: `poll_event` (a close decision comes first, so nothing is
//! handed out for a host that is gone), `poll_record` (write the audit line
//! before the request it names is written to the server), `poll_to_server`,
//! `poll_to_host`, `poll_note`. Bytes taken with `poll_to_host` /
//! `poll_to_server` stay counted against [`ProxyConfig::max_buffered`] until
//! the adapter reports them written.
//!
//! # Memory
//!
//! Worst case, with `c` the proxy's config, `f` the framers' and `r` the call
//! records' (all three in the [`GuardConfig`]), and the poll rule followed:
//! bytes waiting for the host `≤ c.max_buffered` (one byte more closes the
//! host side); bytes waiting for the server `≤ c.max_buffered + the largest
//! chunk passed to handle_host` (the adapter stops reading the host while
//! [`Proxy::wants_host_input`] is false); framers `2 × f.max_frame`; tracked
//! requests `c.max_tracked × (≈ 2 KiB + 4 × r.max_text_bytes)`;
//! remembered cancels `c.max_cancelled × 2 × (≈ 32 B + id bytes)`, and as
//! many cancelled progress tokens; progress tokens of tracked requests
//! `c.max_tracked × 2 × (≈ 32 B + id bytes)`; remembered tasks
//! `c.max_tracked × (MAX_TASK_ID_BYTES + ≈ 64 B)`; notes
//! `c.max_notes × 600 B`. With the defaults: 2 × 32 MiB each way + 2 × 16 MiB
//! framers + 4096 × ≈ 4 KiB + ≈ 256 KiB ≈ 112 MiB, reached only when both
//! sides send lines at the wire limit and neither reads; a session passing
//! one 16 MiB result to a host that reads grows by about one copy of it
//! (measured in the guard's tests, `g2_results_a_host_takes_directly_…`).

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use crate::guard::pin::{ListRequest, PinCheck, PinMetrics, ToolPins};
use crate::guard::restart::{GuardPhase, Replay, REPLAY_ID_PREFIX};
use crate::guard::GuardConfig;
use crate::outbox::Outbox;
use crate::records::call::{CallConfig, CallIdentity, CallLifecycle, CallOutcome, CallRecord};
use crate::session::client::INITIALIZE;
use crate::session::handshake::{is_modern, DISCOVER};
use crate::time::Stamp;
use crate::wire::frame::{
    refused_line_id, FrameError, FrameEvent, FrameText, Framer, FramerConfig, IdRecovery,
    OversizedPolicy, ReadRoom,
};
use crate::wire::idset::RecentIds;
use crate::wire::message::{
    encode_error, wire_limit_error, Decoded, ErrorObject, Id, Message, Oversized, PARSE_ERROR,
    SERVER_ERROR,
};
use fields::{
    cancelled_id, id_json, is_tool_error, link_hash, progress_token, request_context, span_target,
    special_result_type, tool_name,
};
pub(crate) use replay::Failure;
use replay::{ReplayState, ServerGate};

/// The method of a progress notification.
const PROGRESS: &str = "notifications/progress";
/// The tasks extension's cancel.
const TASKS_CANCEL: &str = "tasks/cancel";

/// Default bound on bytes waiting for the host: 32 MiB, two messages at the
/// default wire limit ([`DEFAULT_MAX_FRAME`](crate::DEFAULT_MAX_FRAME)):
/// one being written while the next waits, so a host that reads never
/// meets it.
pub const DEFAULT_MAX_BUFFERED: usize = 32 * 1024 * 1024;
/// Default bytes of non-protocol server stdout shown as notes: 64 KiB.
pub const DEFAULT_NOISE_BUDGET: u64 = 64 * 1024;
/// Default number of requests tracked at once: 4096.
pub const DEFAULT_MAX_TRACKED: usize = 4096;
/// Default number of cancelled ids remembered: 4096.
pub const DEFAULT_MAX_CANCELLED: usize = 4096;
/// Default number of notes waiting for stderr: 256.
pub const DEFAULT_MAX_NOTES: usize = 256;
/// Longest non-protocol line shown in a note, in characters.
pub const MAX_NOTE_LINE: usize = 512;

/// Limits and identity of the guard's proxy: the host ↔ server traffic.
///
/// Edited in place through [`GuardConfig::proxy_mut`]; the framing of both
/// directions (the wire limit `max_frame` included) and the call records'
/// limits are configs of their own beside it
/// ([`GuardConfig::framer_mut`], [`GuardConfig::call_mut`]).
///
/// [`GuardConfig::proxy_mut`]: crate::GuardConfig::proxy_mut
/// [`GuardConfig::framer_mut`]: crate::GuardConfig::framer_mut
/// [`GuardConfig::call_mut`]: crate::GuardConfig::call_mut
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    limit_knob: String,
    max_buffered: usize,
    noise_budget: u64,
    max_tracked: usize,
    max_cancelled: usize,
    max_notes: usize,
    session_id: String,
    target: String,
    tool_pins: Option<ToolPins>,
    tool_policy: Option<crate::guard::policy::ToolPolicy>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            limit_knob: "GuardConfig::framer_mut().max_frame(bytes)".to_owned(),
            max_buffered: DEFAULT_MAX_BUFFERED,
            noise_budget: DEFAULT_NOISE_BUDGET,
            max_tracked: DEFAULT_MAX_TRACKED,
            max_cancelled: DEFAULT_MAX_CANCELLED,
            max_notes: DEFAULT_MAX_NOTES,
            session_id: String::new(),
            target: String::new(),
            tool_pins: None,
            tool_policy: None,
        }
    }
}

impl ProxyConfig {
    /// Sets the name of the setting that raises the wire limit, written in
    /// every wire-limit error the proxy sends ([`wire_limit_error`]); the
    /// CLI names its flag (default, for a guard built from the library:
    /// `GuardConfig::framer_mut().max_frame(bytes)`).
    pub fn limit_knob(&mut self, knob: &str) -> &mut Self {
        knob.clone_into(&mut self.limit_knob);
        self
    }

    /// Sets the bound on bytes waiting for the host (default
    /// [`DEFAULT_MAX_BUFFERED`] = 32 MiB): queued here plus handed to the
    /// adapter and not yet written. One byte more and the proxy decides the
    /// host stopped reading (`ProxyEvent::HostStoppedReading`). Also the
    /// bound on bytes waiting for the server before
    /// `Proxy::wants_host_input` turns false. Worst case: this many bytes
    /// each way.
    pub fn max_buffered(&mut self, max: usize) -> &mut Self {
        self.max_buffered = max;
        self
    }

    /// Sets how many bytes of non-protocol server stdout are shown as notes
    /// (default [`DEFAULT_NOISE_BUDGET`] = 64 KiB); past it lines are only
    /// counted. Notes are bounded anyway by [`Self::max_notes`].
    pub fn noise_budget(&mut self, bytes: u64) -> &mut Self {
        self.noise_budget = bytes;
        self
    }

    /// Sets how many requests are tracked at once for cancel enforcement and
    /// records (default [`DEFAULT_MAX_TRACKED`] = 4096). Past it a request is
    /// forwarded but not tracked (counted in
    /// [`ProxyMetrics::untracked_requests`]). Worst case: `max × (≈ 2 KiB +
    /// 4 × call text limit)`.
    pub fn max_tracked(&mut self, max: usize) -> &mut Self {
        self.max_tracked = max;
        self
    }

    /// Sets how many cancelled ids are remembered so a late response is
    /// dropped (default [`DEFAULT_MAX_CANCELLED`] = 4096; oldest forgotten
    /// first). Worst case: `max × 2 × (≈ 32 B + id bytes)`.
    pub fn max_cancelled(&mut self, max: usize) -> &mut Self {
        self.max_cancelled = max;
        self
    }

    /// Sets how many notes may wait for `Proxy::poll_note` (default
    /// [`DEFAULT_MAX_NOTES`] = 256); past it notes are dropped and counted in
    /// [`ProxyMetrics::notes_dropped`]. Worst case: `max × ≈ 600 B`.
    pub fn max_notes(&mut self, max: usize) -> &mut Self {
        self.max_notes = max;
        self
    }

    /// Sets the session id written in every call record (default empty).
    pub fn session_id(&mut self, id: &str) -> &mut Self {
        id.clone_into(&mut self.session_id);
        self
    }

    /// Sets the target written in every call record, for example the
    /// server's command line (default empty).
    pub fn target(&mut self, target: &str) -> &mut Self {
        target.clone_into(&mut self.target);
        self
    }

    /// The session id written in every call record.
    pub fn get_session_id(&self) -> &str {
        &self.session_id
    }
    /// The name of the setting that raises the wire limit.
    pub fn get_limit_knob(&self) -> &str {
        &self.limit_knob
    }
    /// The bound on bytes waiting for the host.
    pub fn get_max_buffered(&self) -> usize {
        self.max_buffered
    }
    /// The noise budget.
    pub fn get_noise_budget(&self) -> u64 {
        self.noise_budget
    }
    /// The tracked-request limit.
    pub fn get_max_tracked(&self) -> usize {
        self.max_tracked
    }
    /// The remembered-cancel limit.
    pub fn get_max_cancelled(&self) -> usize {
        self.max_cancelled
    }
    /// The note limit.
    pub fn get_max_notes(&self) -> usize {
        self.max_notes
    }

    /// The guard's tool policies (`--tools`, `--deny-tool`,
    /// `--rate-limit`, `--repeat-limit`) [default: none]: a `tools/call`
    /// they refuse is answered with a
    /// [`POLICY_REFUSED`](crate::guard::policy::POLICY_REFUSED) error and
    /// recorded as denied; a `tools/list` answer loses the tools outside
    /// `--tools` / `--deny-tool`.
    pub fn tool_policy(&mut self, policy: Option<crate::guard::policy::ToolPolicy>) -> &mut Self {
        self.tool_policy = policy.filter(|p| !p.is_empty());
        self
    }

    /// Whether tool policies are set.
    pub fn has_tool_policy(&self) -> bool {
        self.tool_policy.is_some()
    }

    /// The tool policies, when some are set (a hub gives each of its
    /// sessions a copy: `Hub::tool_policy`).
    pub fn get_tool_policy(&self) -> Option<&crate::guard::policy::ToolPolicy> {
        self.tool_policy.as_ref()
    }

    /// Sets the pinned tool definitions the guard checks `tools/list`
    /// answers against, with their policy (default `None`: not checked).
    /// Worst case: the bounds of [`ToolPins`], ≈ 13 MiB (a few hundred KiB
    /// for a real server).
    pub fn tool_pins(&mut self, pins: Option<ToolPins>) -> &mut Self {
        self.tool_pins = pins;
        self
    }
    /// The pinned tool definitions, if any.
    pub fn get_tool_pins(&self) -> Option<&ToolPins> {
        self.tool_pins.as_ref()
    }
}

/// A decision of the proxy that the adapter must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ProxyEvent {
    /// More than [`ProxyConfig::max_buffered`] bytes waited for the host: it
    /// stopped reading. What waited was dropped; the session must close (the
    /// guard shuts the server down and exits 75).
    HostStoppedReading {
        /// Bytes that were waiting for the host.
        waiting: usize,
        /// The limit they passed.
        limit: usize,
    },
    /// Writing to the host failed (it closed its end): the session must close.
    HostOutputClosed,
    /// A line passed the wire limit under [`OversizedPolicy::Close`]: that
    /// direction is no longer framed (its bytes are counted and dropped) and
    /// the session must close (the guard stops reading the host, shuts the
    /// server down and exits 75). Its id, when the scan of its first
    /// `id_scan_limit` bytes found one, was answered with the wire-limit
    /// error first.
    OversizedClose {
        /// The line came from the host (a request), not the server.
        from_host: bool,
    },
    /// A restarted server cannot take over the host's session (its answer
    /// to the replayed handshake does not fit): the session must end.
    RestartRefused {
        /// Why.
        reason: String,
    },
}

/// One line for the audit log, in the order made: a call's record, or a
/// moment of the server's life.
#[derive(Debug)]
pub(crate) enum Entry {
    Call(CallRecord),
    Phase(GuardPhase),
}

/// Why the host side is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub(crate) enum HostClosed {
    /// The host stopped reading and the backlog passed the limit.
    StoppedReading,
    /// A write to the host failed.
    OutputClosed,
}

/// Counters of a proxied session.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ProxyMetrics {
    /// Bytes read from the host.
    pub host_bytes: u64,
    /// Bytes read from the server's stdout.
    pub server_bytes: u64,
    /// Bytes reported written to the host.
    pub host_written_bytes: u64,
    /// Requests from the host.
    pub requests: u64,
    /// Requests not tracked because `max_tracked` were in flight (or the id
    /// was already in flight).
    pub untracked_requests: u64,
    /// Responses forwarded to the host.
    pub responses: u64,
    /// Cancels sent by the host.
    pub cancels: u64,
    /// Messages for a cancelled id dropped instead of reaching the host.
    pub dropped_after_cancel: u64,
    /// Host requests over the wire limit (answered by the proxy).
    pub oversized_requests: u64,
    /// Server messages over the wire limit.
    pub oversized_responses: u64,
    /// Oversized server messages whose id could not be recovered from the
    /// whole frame (absent, ambiguous, not an id, too long or not JSON).
    pub oversized_response_ids_missing: u64,
    /// Non-protocol lines on the server's stdout (moved to notes).
    pub non_protocol_lines: u64,
    /// Bytes of non-protocol stdout not shown (over the noise budget).
    pub non_protocol_bytes_dropped: u64,
    /// Undecodable frames from the host (forwarded as they were).
    pub host_parse_errors: u64,
    /// Host lines that were not UTF-8, repaired (U+FFFD) and forwarded.
    pub host_utf8_repaired: u64,
    /// Server lines that were not UTF-8, repaired (U+FFFD) and forwarded.
    pub server_utf8_repaired: u64,
    /// Refused server lines (not UTF-8, not JSON, not a JSON-RPC message)
    /// whose id named a tracked call, which the host got an error for at once.
    pub refused_responses_failed: u64,
    /// Largest frame from the server.
    pub largest_server_frame: u64,
    /// Peak bytes waiting for the host (queued plus not yet written).
    pub host_queue_peak: u64,
    /// Bytes meant for the host dropped because the host side was closed.
    pub host_bytes_dropped: u64,
    /// Notes dropped because `max_notes` were waiting.
    pub notes_dropped: u64,
    /// `server/discover` requests from the host (2026-07-28 probes).
    pub discovers: u64,
    /// Host cancels naming an `initialize` or `server/discover` in flight:
    /// the spec forbids them; not forwarded, the answer still reaches the
    /// host.
    pub handshake_cancels_ignored: u64,
    /// Server progress notifications for a cancelled request, dropped
    /// (also counted in `dropped_after_cancel`).
    pub progress_dropped_after_cancel: u64,
    /// Results with `resultType: "input_required"` (a multi-round-trip
    /// request; the host's retry is a call of its own, linked in the records).
    pub input_required_results: u64,
    /// Results with `resultType: "task"` (the tasks extension).
    pub tasks_created: u64,
    /// `tasks/cancel` requests from the host.
    pub task_cancels: u64,
    /// Requests the server sent to a host whose session is 2026-07-28 or
    /// later (a protocol violation; forwarded, the host answers).
    pub server_requests_to_modern_host: u64,
    /// Requests the host got the crash error for (restart on crash: the
    /// server ended before answering, or no server came back for them).
    pub requests_failed_by_crash: u64,
    /// Subscriptions the guard sent a restarted server again.
    pub resubscribed: u64,
    /// Of those, the ones the restarted server refused.
    pub resubscribe_failed: u64,
    /// The pinned tool definitions' counters, when the guard checks them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pins: Option<PinMetrics>,
    /// What the tool policies did, when some are set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::guard::policy::PolicyMetrics>,
}

/// Bound of the protocol version the guard remembers, in bytes.
pub const MAX_VERSION_BYTES: usize = 64;
/// Bound of a task id the guard remembers, in bytes (longer ones are not
/// linked to their call).
pub const MAX_TASK_ID_BYTES: usize = 256;

/// A request in flight: its record, and what ties later messages to it.
#[derive(Debug)]
struct Tracked {
    call: CallLifecycle,
    /// `initialize` or `server/discover`: never cancelled.
    handshake: bool,
    /// Its `_meta.progressToken`, if any.
    progress_token: Option<Id>,
    /// A `tools/list` whose answer the pins check.
    pin_list: Option<ListRequest>,
    /// A `tools/list`, `prompts/list` or `resources/list` whose answer
    /// the policy filters.
    policy_list: Option<crate::guard::policy::Listed>,
    /// A `tools/call` whose result the content limit may cut.
    policy_result: bool,
}

/// The proxy state machine. See the [module docs](self) for the method
/// groups and the poll order.
#[derive(Debug)]
pub(crate) struct Proxy {
    host_framer: Framer,
    server_framer: Framer,
    state: State,
}

#[derive(Debug)]
struct State {
    config: ProxyConfig,
    /// Both framers' settings: the wire limit each way, the id scan.
    framing: FramerConfig,
    /// The limits of each call record.
    call: CallConfig,
    /// Messages for the server, each with its gate: the count of records
    /// made before it, which must be durable before it is handed out (G12).
    to_server: Outbox<u64>,
    server_unwritten: usize,
    /// Messages for the host, each with the id of the response it is (so a
    /// cancel can withdraw one not yet handed out).
    to_host: Outbox<Option<Id>>,
    host_unwritten: usize,
    host_closed: Option<HostClosed>,
    events: VecDeque<ProxyEvent>,
    notes: VecDeque<String>,
    records: VecDeque<Entry>,
    /// Records made so far (handed out or not).
    records_made: u64,
    tracked: HashMap<Id, Tracked>,
    cancelled: RecentIds,
    /// The progress token of each tracked request that carries one, and the
    /// request's id: a server progress notification is tied to its request
    /// (at most one entry per tracked request).
    progress_owner: HashMap<Id, Id>,
    /// Progress tokens of cancelled requests (bounded like `cancelled`):
    /// a later progress notification with one is dropped (2026-07-28: no
    /// message for a cancelled request).
    cancelled_progress: RecentIds,
    /// Task ids the server created (`resultType: "task"`) and the call that
    /// created each, oldest first, at most `max_tracked`; a `tasks/cancel`
    /// naming one is recorded as a cancel of that call's work.
    tasks: VecDeque<(String, String)>,
    /// The protocol version the session runs at, as last seen: the answer
    /// to `initialize`, or a request's `_meta` (at most
    /// [`MAX_VERSION_BYTES`]).
    protocol_version: Option<String>,
    /// The server's `serverInfo` name and version from its handshake
    /// answer, each cut to [`MAX_VERSION_BYTES`] characters.
    server_info: Option<(String, String)>,
    next_call: u64,
    noise_shown: u64,
    metrics: ProxyMetrics,
    /// What of the host's session a restarted server gets again.
    replay: Replay,
    /// The replay under way, and whether the host's messages may go out.
    replay_state: ReplayState,
    /// The pinned tool definitions' machine, when on.
    pins: Option<PinCheck>,
    /// The tool policies, when some are set.
    policy: Option<crate::guard::policy::ToolPolicy>,
    /// The requests' spans (`guard --otel`), when on.
    spans: Option<crate::guard::trace::Spans>,
}

impl Proxy {
    /// A proxy with the guard's limits: its own, both framers' and the call
    /// records'.
    pub(crate) fn new(guard: &GuardConfig) -> Self {
        let mut config = guard.get_proxy().clone();
        let pins = config.tool_pins.take().map(PinCheck::new);
        let policy = config.tool_policy.take();
        let framing = guard.get_framer().clone();
        Self {
            host_framer: Framer::new(framing.clone()),
            server_framer: Framer::new(framing.clone()),
            state: State {
                to_server: Outbox::default(),
                server_unwritten: 0,
                to_host: Outbox::default(),
                host_unwritten: 0,
                host_closed: None,
                events: VecDeque::new(),
                notes: VecDeque::new(),
                records: VecDeque::new(),
                records_made: 0,
                tracked: HashMap::new(),
                cancelled: RecentIds::new(config.max_cancelled),
                progress_owner: HashMap::new(),
                cancelled_progress: RecentIds::new(config.max_cancelled),
                tasks: VecDeque::new(),
                protocol_version: None,
                server_info: None,
                next_call: 1,
                noise_shown: 0,
                metrics: ProxyMetrics {
                    pins: pins.as_ref().map(|p| p.metrics().clone()),
                    policy: policy.as_ref().map(|p| p.metrics().clone()),
                    ..ProxyMetrics::default()
                },
                pins,
                policy,
                spans: guard.get_trace_seed().map(crate::guard::trace::Spans::new),
                replay: Replay::default(),
                replay_state: ReplayState::default(),
                config,
                framing,
                call: guard.get_call().clone(),
            },
        }
    }

    // ---- getters ----

    #[cfg(any(test, feature = "fuzzing"))]
    /// The limits.
    pub(crate) fn config(&self) -> &ProxyConfig {
        &self.state.config
    }

    /// The counters.
    pub(crate) fn metrics(&self) -> &ProxyMetrics {
        &self.state.metrics
    }

    /// Bytes waiting for the host: queued here plus taken by the adapter and
    /// not yet reported written.
    pub(crate) fn host_backlog(&self) -> usize {
        self.state.host_backlog()
    }

    /// Bytes waiting for the server: queued here plus taken and not written.
    pub(crate) fn server_backlog(&self) -> usize {
        self.state.to_server.queued_bytes() + self.state.server_unwritten
    }

    /// Whether the adapter should read more from the host: false while more
    /// than [`ProxyConfig::max_buffered`] bytes wait for the server (the
    /// server is not keeping up), so that direction stays bounded too.
    pub(crate) fn wants_host_input(&self) -> bool {
        self.server_backlog() <= self.state.config.max_buffered
    }

    /// Why the host side is closed, once it is.
    pub(crate) fn host_closed(&self) -> Option<HostClosed> {
        self.state.host_closed
    }

    /// The protocol version the session runs at, as last seen (the answer
    /// to `initialize`, or a request's `_meta`).
    pub(crate) fn protocol_version(&self) -> Option<&str> {
        self.state.protocol_version.as_deref()
    }

    /// The next span ready to be given (`guard --otel`).
    pub(crate) fn poll_span(&mut self) -> Option<crate::guard::trace::CallSpan> {
        self.state.spans.as_mut()?.poll()
    }

    /// Spans dropped so far.
    pub(crate) fn spans_dropped(&self) -> u64 {
        self.state
            .spans
            .as_ref()
            .map_or(0, crate::guard::trace::Spans::dropped)
    }

    /// The server's name and version, as its handshake answer gave them.
    pub(crate) fn server_info(&self) -> Option<(&str, &str)> {
        self.state
            .server_info
            .as_ref()
            .map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Requests being tracked now.
    pub(crate) fn tracked(&self) -> usize {
        self.state.tracked.len()
    }

    // ---- inputs ----

    /// Bytes read from the host (any chunking).
    pub(crate) fn handle_host(&mut self, at: Stamp, chunk: &[u8]) {
        self.state.metrics.host_bytes += chunk.len() as u64;
        let state = &mut self.state;
        self.host_framer
            .push(chunk, |ev| state.on_host_event(at, ev));
    }

    /// The host closed our input. A last unterminated frame is handled.
    pub(crate) fn handle_host_eof(&mut self, at: Stamp) {
        let state = &mut self.state;
        self.host_framer.finish(|ev| state.on_host_event(at, ev));
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// Bytes read from the server's stdout (any chunking).
    pub(crate) fn handle_server(&mut self, at: Stamp, chunk: &[u8]) {
        self.state.metrics.server_bytes += chunk.len() as u64;
        let state = &mut self.state;
        self.server_framer
            .push(chunk, |ev| state.on_server_event(at, ev));
    }

    /// Room to read the server's stdout into: the framer's own buffer, so a
    /// large response is read once and goes to the host as it landed (see
    /// [`ReadRoom`]); then [`handle_server_read`](Self::handle_server_read).
    pub(crate) fn server_room(&mut self) -> ReadRoom<'_> {
        self.server_framer.read_room()
    }

    /// `n` bytes were read into [`server_room`](Self::server_room): as
    /// [`handle_server`](Self::handle_server) with those bytes.
    pub(crate) fn handle_server_read(&mut self, at: Stamp, n: usize) {
        let before = self.server_framer.stats().bytes;
        let state = &mut self.state;
        self.server_framer
            .filled(n, |ev| state.on_server_event(at, ev));
        self.state.metrics.server_bytes += self.server_framer.stats().bytes - before;
    }

    /// The server's stdout ended. A last unterminated frame is handled.
    pub(crate) fn handle_server_eof(&mut self, at: Stamp) {
        let state = &mut self.state;
        self.server_framer
            .finish(|ev| state.on_server_event(at, ev));
    }

    /// `n` bytes taken with [`poll_to_host`](Self::poll_to_host) reached the
    /// host's pipe. Reporting more than was taken counts as all of it.
    pub(crate) fn handle_host_written(&mut self, n: usize) {
        let s = &mut self.state;
        let n = n.min(s.host_unwritten);
        s.host_unwritten -= n;
        s.metrics.host_written_bytes += n as u64;
    }

    /// `n` bytes taken with [`poll_to_server`](Self::poll_to_server) reached
    /// the server's pipe.
    pub(crate) fn handle_server_written(&mut self, n: usize) {
        let s = &mut self.state;
        s.server_unwritten -= n.min(s.server_unwritten);
    }

    /// The server's stdin is gone: what waits for it is dropped.
    pub(crate) fn handle_server_input_closed(&mut self) {
        let s = &mut self.state;
        s.to_server.clear();
        s.server_unwritten = 0;
    }

    /// A write to the host failed: the host side closes
    /// ([`ProxyEvent::HostOutputClosed`]).
    pub(crate) fn handle_host_write_error(&mut self) {
        if self.state.host_closed.is_none() {
            self.state.close_host(HostClosed::OutputClosed);
            self.state.events.push_back(ProxyEvent::HostOutputClosed);
        }
    }

    /// The session is over: every request still open ends `unknown` (the
    /// server may have acted), with the exit status if one was observed.
    pub(crate) fn finish(
        &mut self,
        at: Stamp,
        exit: Option<crate::process::supervisor::ExitStatus>,
    ) {
        self.state.progress_owner.clear();
        let mut open: Vec<(Id, CallLifecycle)> = self
            .state
            .tracked
            .drain()
            .map(|(id, t)| (id, t.call))
            .collect();
        open.sort_by_key(|(_, c)| call_seq(c));
        for (_, mut call) in open {
            // Dispatched by construction, so the transition is legal.
            let _ = call.mark_unknown(at);
            call.note(at.unix_ms, "the session ended before a response");
            if let Some(status) = exit {
                call.observe_exit(status);
            }
            self.state.push_record(call.record().clone());
        }
    }

    // ---- outputs ----

    /// The next decision the adapter must act on.
    #[must_use]
    pub(crate) fn poll_event(&mut self) -> Option<ProxyEvent> {
        self.state.events.pop_front()
    }

    /// The next call record for the audit log: once when a request is
    /// dispatched (before its bytes are handed out), once when it ends.
    #[must_use]
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn poll_record(&mut self) -> Option<CallRecord> {
        loop {
            if let Entry::Call(r) = self.state.records.pop_front()? {
                return Some(r);
            }
        }
    }

    /// The next line for the audit log: a call's record (as
    /// [`poll_record`](Self::poll_record)) or a moment of the server's
    /// life; both count as records for the audit gate.
    #[must_use]
    pub(crate) fn poll_entry(&mut self) -> Option<Entry> {
        self.state.records.pop_front()
    }

    /// The next message (with its `\n`) for the server's stdin, once the
    /// records made before it are durable: `durable` counts the records
    /// given out by [`poll_record`](Self::poll_record) that are on disk
    /// (`u64::MAX` when none need to be). Its bytes stay counted until
    /// [`handle_server_written`](Self::handle_server_written).
    #[must_use]
    pub(crate) fn poll_to_server(&mut self, durable: u64) -> Option<Vec<u8>> {
        let s = &mut self.state;
        // A restarted server gets the host's handshake first, and nothing
        // of the host's until it answered; no server, nothing.
        if let Some(b) = s.replay_state.out.pop_front() {
            s.server_unwritten += b.len();
            return Some(b);
        }
        if s.replay_state.gate != ServerGate::Open {
            return None;
        }
        if s.to_server.front_tag().is_none_or(|gate| *gate > durable) {
            return None;
        }
        let (_, b) = s.to_server.pop()?;
        s.server_unwritten += b.len();
        Some(b)
    }

    /// The next message (with its `\n`) for the host. Its bytes stay counted
    /// against [`ProxyConfig::max_buffered`] until
    /// [`handle_host_written`](Self::handle_host_written).
    #[must_use]
    pub(crate) fn poll_to_host(&mut self) -> Option<Vec<u8>> {
        let s = &mut self.state;
        let (_, b) = s.to_host.pop()?;
        s.host_unwritten += b.len();
        Some(b)
    }

    /// The messages for the server and the one being written from them.
    pub(crate) fn server_outbox_mut(&mut self) -> &mut Outbox<u64> {
        &mut self.state.to_server
    }

    /// The messages for the host and the one being written from them.
    pub(crate) fn host_outbox_mut(&mut self) -> &mut Outbox<Option<Id>> {
        &mut self.state.to_host
    }

    /// The next line for stderr (notes about refused, dropped or
    /// non-protocol traffic).
    #[must_use]
    pub(crate) fn poll_note(&mut self) -> Option<String> {
        self.state.notes.pop_front()
    }

    /// The next update for the pin file (what the pins saw and did not
    /// accept, or pinned on first use).
    #[must_use]
    pub(crate) fn poll_pin_update(&mut self) -> Option<crate::guard::pin::PinUpdate> {
        self.state.pins.as_mut().and_then(PinCheck::poll_update)
    }
}

/// The sequence number at the front of a call id (`"<seq>/<id>"`).
fn call_seq(call: &CallLifecycle) -> u64 {
    let id = call.record().call_id();
    id.split('/')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

/// A frame as one line for the other side: a lent (large) frame is its own
/// buffer, with room for the newline (its capacity is `max_frame + 1`), so
/// nothing is copied; a small one is copied.
fn line(frame: FrameText<'_>) -> Vec<u8> {
    if frame.is_lent() {
        let mut v = frame.into_string().into_bytes();
        v.push(b'\n');
        return v;
    }
    let mut v = Vec::with_capacity(frame.len() + 1);
    v.extend_from_slice(frame.as_bytes());
    v.push(b'\n');
    v
}

/// `r` with `_meta.traceparent` set to `context` (added, or replacing the
/// host's), re-encoded; `None` when that does not fit the wire limit (the
/// request then goes as it came).
fn traced_request(
    r: &crate::wire::message::Request,
    context: &crate::guard::trace::TraceContext,
    max_frame: usize,
) -> Option<Vec<u8>> {
    let value = format!("\"{}\"", context.to_traceparent());
    let params = crate::wire::object::merge_meta(
        r.params.as_deref().map(crate::wire::message::RawValue::get),
        &[("traceparent", &value)],
    )?;
    let params = crate::wire::message::RawValue::from_string(params).ok()?;
    crate::wire::message::encode_request(&r.id, &r.method, Some(&params), max_frame).ok()
}

impl State {
    /// Ends the tracking of `id`, with what tied messages to it.
    fn untrack(&mut self, id: &Id) -> Option<CallLifecycle> {
        let t = self.tracked.remove(id)?;
        if let Some(token) = &t.progress_token {
            self.progress_owner.remove(token);
        }
        Some(t.call)
    }

    /// Remembers a task the server created for the call `call_id`.
    fn remember_task(&mut self, task_id: String, call_id: String) {
        if self.config.max_tracked == 0 {
            return;
        }
        if self.tasks.len() >= self.config.max_tracked {
            self.tasks.pop_front();
        }
        self.tasks.push_back((task_id, call_id));
    }

    fn host_backlog(&self) -> usize {
        self.to_host.queued_bytes() + self.host_unwritten
    }

    fn note(&mut self, text: String) {
        if self.notes.len() < self.config.max_notes {
            self.notes.push_back(text);
        } else {
            self.metrics.notes_dropped += 1;
        }
    }

    fn close_host(&mut self, why: HostClosed) {
        self.host_closed = Some(why);
        self.metrics.host_bytes_dropped += self.to_host.clear_queue() as u64;
    }

    /// A line passed the wire limit under [`OversizedPolicy::Close`]: its
    /// framer is closed; say so and ask for the session's end.
    fn close_on_oversized(&mut self, from_host: bool) {
        let what = if from_host {
            "a request from the host"
        } else {
            "a line from the server"
        };
        self.note(format!(
            "mcp-stdio guard: {what} passed the wire limit ({} bytes) and the oversized policy is `close`: closing the session",
            self.framing.get_max_frame()
        ));
        self.events
            .push_back(ProxyEvent::OversizedClose { from_host });
    }

    fn send_host(&mut self, bytes: Vec<u8>) {
        self.send_host_message(None, bytes);
    }

    /// Queues a message for the host; `response_to` names the id of a
    /// response from the server, which a later cancel may withdraw.
    fn send_host_message(&mut self, response_to: Option<Id>, bytes: Vec<u8>) {
        if self.host_closed.is_some() {
            self.metrics.host_bytes_dropped += bytes.len() as u64;
            return;
        }
        self.to_host.push(response_to, bytes);
        let waiting = self.host_backlog();
        self.metrics.host_queue_peak = self.metrics.host_queue_peak.max(waiting as u64);
        if waiting > self.config.max_buffered {
            self.close_host(HostClosed::StoppedReading);
            self.note(format!(
                "mcp-stdio guard: the host stopped reading stdout ({waiting} bytes waiting, limit {}); closing the session",
                self.config.max_buffered
            ));
            self.events.push_back(ProxyEvent::HostStoppedReading {
                waiting,
                limit: self.config.max_buffered,
            });
        }
    }

    /// A cancel arrived: a server response for `id` that waits here (not
    /// yet handed to the adapter) never reaches the host (G6).
    fn withdraw_response(&mut self, id: &Id) {
        let (withdrawn, _) = self
            .to_host
            .retain(|response_to| response_to.as_ref() != Some(id));
        self.metrics.dropped_after_cancel += withdrawn as u64;
    }

    fn send_server(&mut self, bytes: Vec<u8>) {
        self.to_server.push(self.records_made, bytes);
    }

    fn push_record(&mut self, record: CallRecord) {
        if let Some(spans) = self.spans.as_mut() {
            spans.on_record(&record, self.protocol_version.as_deref());
        }
        self.records.push_back(Entry::Call(record));
        self.records_made += 1;
    }

    fn reply_error(&mut self, id: Option<&Id>, code: i64, message: String) {
        self.reply_error_object(id, ErrorObject::new(code, message));
    }

    /// The one wire-limit error ([`wire_limit_error`]), naming the guard's
    /// setting.
    fn limit_error(&self, what: Oversized, seen: u64) -> ErrorObject {
        let limit = self.framing.get_max_frame();
        wire_limit_error(what, limit, seen, &self.config.limit_knob)
    }

    fn reply_error_object(&mut self, id: Option<&Id>, err: ErrorObject) {
        // Small by construction (an id from a bounded scan and a short message),
        // so even a tiny wire limit must not silence the reply.
        if let Ok(bytes) = encode_error(id, &err, self.framing.get_max_frame().max(1024)) {
            self.send_host(bytes);
        }
    }

    /// Ends a tracked call and queues its record.
    fn complete(&mut self, at: Stamp, mut call: CallLifecycle, outcome: CallOutcome, note: &str) {
        // Tracked calls are dispatched, so `complete` is legal.
        let _ = call.complete(at, outcome);
        call.note(at.unix_ms, note);
        self.push_record(call.record().clone());
    }

    fn on_host_event(&mut self, at: Stamp, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => {
                if let Some(r) = text.repair() {
                    self.metrics.host_utf8_repaired += 1;
                    self.note(format!(
                        "mcp-stdio guard: host line of {} bytes was not UTF-8; {} sequence(s) replaced with U+FFFD",
                        r.original_len, r.replaced
                    ));
                }
                self.on_host_frame(at, &text)
            }
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                // Never forwarded: the framer discards the rest of the line.
                self.metrics.oversized_requests += 1;
                self.note(format!(
                    "mcp-stdio guard: request over the wire limit ({limit} bytes) refused{}",
                    id_hint
                        .as_ref()
                        .map(|i| format!(" (id {i})"))
                        .unwrap_or_default()
                ));
                if let Some(id) = id_hint {
                    let err = self.limit_error(Oversized::Request, limit as u64 + 1);
                    if let Some(spans) = self.spans.as_mut() {
                        spans.refused_unread(id_json(&id), err.code, at.unix_ms);
                    }
                    self.reply_error_object(Some(&id), err);
                }
                if self.framing.get_oversized_policy() == OversizedPolicy::Close {
                    self.close_on_oversized(true);
                }
            }
            FrameEvent::Error(FrameError::OversizedEnded {
                discarded,
                recovered: IdRecovery::Found(id),
                hinted: false,
            }) => {
                // The id came after the scanned prefix: answer it now.
                self.note(format!(
                    "mcp-stdio guard: oversized request has id {id}; it gets an error"
                ));
                let err = self.limit_error(Oversized::Request, discarded);
                if let Some(spans) = self.spans.as_mut() {
                    spans.refused_unread(id_json(&id), err.code, at.unix_ms);
                }
                self.reply_error_object(Some(&id), err);
            }
            FrameEvent::Error(FrameError::InvalidUtf8 { len, id, .. }) => {
                self.metrics.host_parse_errors += 1;
                self.note(format!(
                    "mcp-stdio guard: host line of {len} bytes is not UTF-8; refused{}",
                    id.as_ref()
                        .map(|i| format!(" (id {i})"))
                        .unwrap_or_default()
                ));
                self.reply_error(id.as_ref(), PARSE_ERROR, "invalid UTF-8".to_owned());
            }
            FrameEvent::Error(_) => {}
        }
    }

    fn on_host_frame(&mut self, at: Stamp, text: &str) {
        // With spans on, a request goes out with its span's `traceparent`.
        let mut forward = None;
        match Message::decode(text) {
            Ok(Message::Request(r)) => {
                self.metrics.requests += 1;
                if self.pin_refuses(at, &r, text) || self.policy_refuses(at, &r, text) {
                    return;
                }
                let handshake = r.method == INITIALIZE || r.method == DISCOVER;
                if r.method == DISCOVER {
                    self.metrics.discovers += 1;
                }
                let ctx = request_context(r.params.as_deref());
                if let Some(v) = &ctx.protocol_version {
                    if self.protocol_version.as_ref() != Some(v) {
                        self.protocol_version = Some(v.clone());
                    }
                }
                if self.tracked.len() >= self.config.max_tracked || self.tracked.contains_key(&r.id)
                {
                    self.metrics.untracked_requests += 1;
                } else {
                    let seq = self.next_call;
                    self.next_call += 1;
                    let tool = (r.method == "tools/call")
                        .then(|| tool_name(r.params.as_deref()))
                        .flatten();
                    let call_id = format!("{seq}/{}", id_json(&r.id));
                    if let Some(spans) = self.spans.as_mut() {
                        let parent = ctx.traceparent;
                        let context = spans.ids.child_of(parent.as_ref());
                        forward = traced_request(&r, &context, self.framing.get_max_frame());
                        let start = crate::guard::trace::SpanStart {
                            context,
                            parent,
                            method: r.method.clone(),
                            tool: tool.clone(),
                            target: span_target(&r.method, r.params.as_deref()),
                            request_id: id_json(&r.id),
                            protocol_version: self.protocol_version.clone(),
                            request_bytes: text.len() as u64,
                        };
                        spans.open(&call_id, start, at.unix_ms);
                    }
                    let mut call = CallLifecycle::new(
                        &self.call,
                        CallIdentity {
                            call_id: &call_id,
                            session_id: &self.config.session_id,
                            operation: tool.as_deref().unwrap_or(&r.method),
                            target: &self.config.target,
                        },
                        at.unix_ms,
                    );
                    // The guard has no approval step: policy allows, then it
                    // is dispatched. Each step is legal from the one before.
                    let _ = call.validate(at);
                    let _ = call.authorize(at);
                    let _ = call.dispatch(at);
                    call.note(
                        at.unix_ms,
                        &format!("{} request of {} bytes", r.method, text.len()),
                    );
                    if let Some(link) = ctx.request_state {
                        // A multi-round-trip retry: linked to the call whose
                        // result asked for input (same digest in its record).
                        call.note(at.unix_ms, &format!("continues requestState #{link:016x}"));
                    }
                    if r.method == TASKS_CANCEL {
                        self.metrics.task_cancels += 1;
                        if let Some(task) = &ctx.task_id {
                            let created_by = self
                                .tasks
                                .iter()
                                .find(|(t, _)| t == task)
                                .map(|(_, c)| c.as_str());
                            call.note(
                                at.unix_ms,
                                &match created_by {
                                    Some(c) => format!("cancels task {task} created by call {c}"),
                                    None => format!("cancels task {task}"),
                                },
                            );
                        }
                    }
                    self.replay
                        .on_host_request(&r.method, &r.id, r.params.as_deref());
                    // G12: the record is out before the request is handed out.
                    self.push_record(call.record().clone());
                    self.cancelled.remove(&r.id);
                    if let Some(token) = &ctx.progress_token {
                        self.cancelled_progress.remove(token);
                        self.progress_owner.insert(token.clone(), r.id.clone());
                    }
                    self.tracked.insert(
                        r.id,
                        Tracked {
                            call,
                            handshake,
                            progress_token: ctx.progress_token,
                            pin_list: pin_hooks::list_request(
                                self.pins.as_ref(),
                                &r.method,
                                r.params.as_deref(),
                            ),
                            policy_list: self
                                .policy
                                .as_ref()
                                .and_then(|p| p.filters_list(&r.method)),
                            policy_result: r.method == "tools/call"
                                && self
                                    .policy
                                    .as_ref()
                                    .is_some_and(|p| p.get_content_limit().is_some()),
                        },
                    );
                }
            }
            Ok(Message::Notification(n)) if n.method == "notifications/cancelled" => {
                self.metrics.cancels += 1;
                if let Some(id) = cancelled_id(n.params.as_deref()) {
                    if self.tracked.get(&id).is_some_and(|t| t.handshake) {
                        // The spec forbids cancelling the handshake: the
                        // server would ignore it, and the host's session
                        // needs the answer. Not forwarded, not enforced.
                        self.metrics.handshake_cancels_ignored += 1;
                        self.note(format!(
                            "mcp-stdio guard: the host cancelled its handshake request {id}; ignored (the spec forbids it)"
                        ));
                        return;
                    }
                    self.withdraw_response(&id);
                    if let Some(t) = self.tracked.remove(&id) {
                        if let Some(token) = t.progress_token {
                            self.progress_owner.remove(&token);
                            self.cancelled_progress.insert(token);
                        }
                        let mut call = t.call;
                        // Dispatched, so this is `cancelled_after_dispatch`.
                        let _ = call.cancel(at);
                        call.note(at.unix_ms, "cancelled by the host");
                        self.push_record(call.record().clone());
                    }
                    self.cancelled.insert(id);
                }
            }
            Ok(Message::Notification(n)) => {
                self.replay.on_host_notification(&n.method, text.as_bytes());
            }
            Ok(_) => {}
            Err(_) => self.metrics.host_parse_errors += 1,
        }
        match forward {
            Some(bytes) => self.send_server(bytes),
            None => self.send_server(line(text.into())),
        }
    }

    fn on_server_event(&mut self, at: Stamp, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => self.on_server_frame(at, text),
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                self.metrics.oversized_responses += 1;
                if self.framing.get_oversized_policy() == OversizedPolicy::Close {
                    // No frame's end will come: what the prefix gave is all.
                    if id_hint.is_none() {
                        self.metrics.oversized_response_ids_missing += 1;
                    }
                    self.on_oversized_response(at, id_hint, limit as u64 + 1);
                    self.close_on_oversized(false);
                } else if id_hint.is_some() {
                    // Without an id in the prefix, wait for the frame's end:
                    // the whole-frame scan may find it.
                    self.on_oversized_response(at, id_hint, limit as u64 + 1);
                }
            }
            FrameEvent::Error(FrameError::OversizedEnded {
                discarded,
                recovered,
                hinted: false,
            }) => {
                if recovered.id().is_none() {
                    self.metrics.oversized_response_ids_missing += 1;
                }
                self.on_oversized_response(at, recovered.id().cloned(), discarded);
            }
            FrameEvent::Error(FrameError::InvalidUtf8 { len, id, .. }) => {
                self.metrics.non_protocol_lines += 1;
                self.note(format!(
                    "mcp-stdio guard: server stdout line of {len} bytes is not UTF-8; refused{}",
                    id.as_ref()
                        .map(|i| format!(" (id {i})"))
                        .unwrap_or_default()
                ));
                // G3: the request it answers gets an error now.
                if let Some(id) = id {
                    self.fail_refused_response(
                        at,
                        &id,
                        format!(
                            "response of {len} bytes from the server is not valid UTF-8; refused"
                        ),
                    );
                }
            }
            FrameEvent::Error(_) => {}
        }
    }

    /// A server message passed the wire limit; `id` is its id, if known,
    /// `seen` its size (or `limit + 1` when refused as it passed the limit).
    fn on_oversized_response(&mut self, at: Stamp, id: Option<Id>, seen: u64) {
        let limit = self.framing.get_max_frame();
        let tracked = id.as_ref().and_then(|id| self.untrack(id));
        match (id, tracked) {
            (Some(id), Some(call)) => {
                self.note(format!(
                    "mcp-stdio guard: response to {id} over the wire limit ({limit} bytes); the host gets an error instead; raise {} to let it through",
                    self.config.limit_knob
                ));
                let err = self.limit_error(Oversized::Response, seen);
                let note = format!("{}; the host got error {}", err.message, err.code);
                self.reply_error_object(Some(&id), err);
                self.complete(at, call, CallOutcome::LocalFailure, &note);
            }
            (Some(id), None) if self.cancelled.contains(&id) => {
                self.metrics.dropped_after_cancel += 1;
            }
            (hint, _) => self.note(format!(
                "mcp-stdio guard: server message over the wire limit ({limit} bytes) dropped{}",
                hint.map(|i| format!(" (id {i})")).unwrap_or_default()
            )),
        }
    }

    fn on_server_frame(&mut self, at: Stamp, frame: FrameText<'_>) {
        let repair = frame.repair();
        if let Some(r) = repair {
            self.metrics.server_utf8_repaired += 1;
            self.note(format!(
                "mcp-stdio guard: server stdout line of {} bytes was not UTF-8; {} sequence(s) replaced with U+FFFD",
                r.original_len, r.replaced
            ));
        }
        let text: &str = &frame;
        self.metrics.largest_server_frame =
            self.metrics.largest_server_frame.max(text.len() as u64);
        // The envelope only: a result stays in the frame, which goes to the
        // host as it came (a lent large frame without any copy).
        let response = match Message::decode_in(text) {
            Ok(Decoded::Result { id, result }) => {
                Some((id, None, Some(std::borrow::Cow::Borrowed(result.get()))))
            }
            Ok(Decoded::Message(Message::Response(r))) => match r.result {
                Ok(result) => Some((
                    r.id,
                    None,
                    Some(std::borrow::Cow::Owned(result.get().to_owned())),
                )),
                Err(e) => Some((r.id, Some(e), None)),
            },
            Ok(Decoded::Message(Message::Notification(n))) => {
                self.pin_notification(&n.method);
                // Tied to a request by its progress token: dropped once
                // that request was cancelled, withdrawn with it while queued.
                let owner = if n.method == PROGRESS
                    && !(self.progress_owner.is_empty() && self.cancelled_progress.is_empty())
                {
                    match progress_token(n.params.as_deref()) {
                        Some(t) if self.cancelled_progress.contains(&t) => {
                            self.metrics.dropped_after_cancel += 1;
                            self.metrics.progress_dropped_after_cancel += 1;
                            return;
                        }
                        Some(t) => self.progress_owner.get(&t).cloned(),
                        None => None,
                    }
                } else {
                    None
                };
                let bytes = line(frame);
                self.send_host_message(owner, bytes);
                return;
            }
            Ok(Decoded::Message(Message::Request(_))) => {
                if self.protocol_version.as_deref().is_some_and(is_modern) {
                    self.metrics.server_requests_to_modern_host += 1;
                }
                None
            }
            Err(_) => {
                self.on_server_noise(at, text);
                return;
            }
        };
        let Some((id, error, result)) = response else {
            let bytes = line(frame);
            self.send_host(bytes);
            return;
        };
        if matches!(&id, Id::String(s) if s.starts_with(REPLAY_ID_PREFIX))
            && self.on_replay_answer(at, &id, error.as_ref(), result.as_deref())
        {
            return;
        }
        if self.tracked.contains_key(&id) {
            self.replay.on_response(&id, result.as_deref());
        }
        if self.cancelled.contains(&id) && !self.tracked.contains_key(&id) {
            // The spec forbids it; the guard enforces it.
            self.metrics.dropped_after_cancel += 1;
            return;
        }
        if self.pin_answers_list(at, &id, result.as_deref(), text, repair)
            || self.policy_answers_list(at, &id, result.as_deref(), text)
        {
            return;
        }
        let cut = self.policy_cuts_result(&id, result.as_deref(), text);
        self.metrics.responses += 1;
        let handshake = self.tracked.get(&id).is_some_and(|t| t.handshake);
        if let Some(call) = self.untrack(&id) {
            let (outcome, mut note) = match &error {
                None => (
                    CallOutcome::Succeeded,
                    format!("result of {} bytes", text.len()),
                ),
                Some(e) => (
                    CallOutcome::RemoteFailure,
                    format!("error {} ({} bytes)", e.code, text.len()),
                ),
            };
            if let Some(r) = repair {
                // Recorded with the call, so the audit log shows what the host got.
                note.push_str(&format!(
                    "; invalid UTF-8 repaired: {} sequence(s) replaced with U+FFFD",
                    r.replaced
                ));
            }
            if let Some(spans) = self.spans.as_mut() {
                let tool_error = spans.is_tool_call(call.record().call_id())
                    && result.as_deref().is_some_and(is_tool_error);
                spans.answered(
                    call.record().call_id(),
                    error.as_ref().map(|e| e.code),
                    text.len() as u64,
                    repair.is_some(),
                    tool_error,
                );
            }
            if let Some(result) = result.as_deref() {
                if handshake {
                    note.push_str(&self.on_handshake_result(result));
                } else {
                    note.push_str(&self.on_result_type(result, call.record().call_id()));
                }
            }
            if let Some((bytes, what)) = &cut {
                note.push_str(&format!("; the host got {} bytes: {what}", bytes.len()));
            }
            self.complete(at, call, outcome, &note);
        }
        let bytes = match cut {
            Some((bytes, _)) => bytes,
            None => line(frame),
        };
        self.send_host_message(Some(id), bytes);
    }

    /// What a handshake's answer says, for its record: the version
    /// `initialize` settled on (which the guard remembers), or the versions
    /// `server/discover` offers.
    fn on_handshake_result(&mut self, result: &str) -> String {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Answer {
            #[serde(default)]
            protocol_version: Option<String>,
            #[serde(default)]
            supported_versions: Option<Vec<String>>,
            #[serde(default)]
            server_info: Option<Info>,
        }
        #[derive(serde::Deserialize)]
        struct Info {
            #[serde(default)]
            name: String,
            #[serde(default)]
            version: String,
        }
        let Ok(answer) = serde_json::from_str::<Answer>(result) else {
            return String::new();
        };
        if let Some(info) = answer.server_info {
            let cut = |s: &str| s.chars().take(MAX_VERSION_BYTES).collect::<String>();
            self.server_info = Some((cut(&info.name), cut(&info.version)));
        }
        if let Some(v) = answer
            .protocol_version
            .filter(|v| v.len() <= MAX_VERSION_BYTES)
        {
            let note = format!("; protocol {v}");
            self.protocol_version = Some(v);
            return note;
        }
        match answer.supported_versions {
            Some(vs) => {
                let mut list = vs
                    .iter()
                    .take(8)
                    .map(|v| v.chars().take(MAX_VERSION_BYTES).collect::<String>())
                    .collect::<Vec<_>>()
                    .join(", ");
                if vs.len() > 8 {
                    list.push_str(", …");
                }
                format!("; offers protocol {list}")
            }
            None => String::new(),
        }
    }

    /// A result that is not `"complete"`, for its record: a multi-round-trip
    /// request asking for input (the digest of its `requestState` links the
    /// host's retry, a call of its own), or a task created (remembered so a
    /// `tasks/cancel` names this call).
    fn on_result_type(&mut self, result: &str, call_id: &str) -> String {
        let Some(kind) = special_result_type(result) else {
            return String::new();
        };
        match kind.as_str() {
            "input_required" => {
                self.metrics.input_required_results += 1;
                let state = crate::wire::object::member(result, "requestState")
                    .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
                match state {
                    Some(s) => format!("; input required, requestState #{:016x}", link_hash(&s)),
                    None => "; input required".to_owned(),
                }
            }
            "task" => {
                self.metrics.tasks_created += 1;
                let task = crate::wire::object::member(result, "taskId")
                    .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
                    .filter(|t| t.len() <= MAX_TASK_ID_BYTES);
                match task {
                    Some(t) => {
                        let note = format!("; task {t} created");
                        self.remember_task(t, call_id.to_owned());
                        note
                    }
                    None => "; task created".to_owned(),
                }
            }
            other => format!("; resultType {other}"),
        }
    }

    /// A server stdout line that is not a protocol message.
    fn on_server_noise(&mut self, at: Stamp, text: &str) {
        // An accidental log line: move it to stderr instead of breaking the
        // host's parser.
        self.metrics.non_protocol_lines += 1;
        if self.noise_shown < self.config.noise_budget {
            let cut = text
                .char_indices()
                .nth(MAX_NOTE_LINE)
                .map_or(text, |(i, _)| &text[..i]);
            self.noise_shown += cut.len() as u64;
            self.note(format!("[server stdout, not protocol] {cut}"));
        } else {
            self.metrics.non_protocol_bytes_dropped += text.len() as u64;
        }
        // Keep a near-miss response visible to the host as an error rather
        // than a silent hang (G3).
        let scan = self.framing.get_id_scan_limit();
        if let Some(id) = refused_line_id(text.as_bytes(), scan) {
            self.fail_refused_response(
                at,
                &id,
                format!(
                    "malformed response of {} bytes from the server (not a JSON-RPC response); refused",
                    text.len()
                ),
            );
        }
    }

    /// A refused server line named `id`: a tracked call gets an error now.
    fn fail_refused_response(&mut self, at: Stamp, id: &Id, message: String) {
        if let Some(call) = self.untrack(id) {
            self.metrics.refused_responses_failed += 1;
            let note = format!("{message}; the host got error {SERVER_ERROR}");
            if let Some(spans) = self.spans.as_mut() {
                spans.answered(call.record().call_id(), Some(SERVER_ERROR), 0, false, false);
            }
            self.reply_error(Some(id), SERVER_ERROR, message);
            self.complete(at, call, CallOutcome::RemoteFailure, &note);
        } else if self.cancelled.contains(id) {
            self.metrics.dropped_after_cancel += 1;
        }
    }
}

mod fields;
mod pin_hooks;
mod policy_hooks;
mod replay;
#[cfg(test)]
mod tests;
