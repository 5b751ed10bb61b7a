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
//! - nothing for a cancelled id reaches the host after the cancel (G6): a
//!   response still queued here is withdrawn, a late one is dropped (bytes
//!   already handed to the adapter are out of reach);
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
//! Worst case, with `c` the config and the poll rule followed: bytes waiting
//! for the host `≤ c.max_buffered` (one byte more closes the host side);
//! bytes waiting for the server `≤ c.max_buffered + the largest chunk passed
//! to handle_host` (the adapter stops reading the host while
//! [`Proxy::wants_host_input`] is false); framers `2 × c.max_frame`; tracked
//! requests `c.max_tracked × (≈ 2 KiB + 4 × c.call.max_text_bytes)`;
//! remembered cancels `c.max_cancelled × 2 × (≈ 32 B + id bytes)`; notes
//! `c.max_notes × 600 B`. With the defaults: 16 MiB + 8 MiB + 4096 × ≈ 4 KiB
//! + ≈ 256 KiB ≈ 40 MiB.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use crate::call::{CallConfig, CallIdentity, CallLifecycle, CallOutcome, CallRecord, Stamp};
use crate::frame::{
    refused_line_id, FrameError, FrameEvent, FrameText, Framer, FramerConfig, IdRecovery, ReadRoom,
};
use crate::idset::RecentIds;
use crate::message::{
    encode_error, wire_limit_error, Decoded, ErrorObject, Id, Message, Oversized, RawValue,
    MAX_FRAME_KNOB, PARSE_ERROR, SERVER_ERROR,
};

/// Default bound on bytes waiting for the host: 16 MiB.
pub const DEFAULT_MAX_BUFFERED: usize = 16 * 1024 * 1024;
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
/// Smallest accepted wire limit: room for an error reply with a short id.
pub const MIN_MAX_FRAME: usize = 64;

/// Limits and identity of a proxy.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    framer: FramerConfig,
    limit_knob: String,
    max_buffered: usize,
    noise_budget: u64,
    max_tracked: usize,
    max_cancelled: usize,
    max_notes: usize,
    call: CallConfig,
    session_id: String,
    target: String,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            framer: FramerConfig::default(),
            limit_knob: MAX_FRAME_KNOB.to_owned(),
            max_buffered: DEFAULT_MAX_BUFFERED,
            noise_budget: DEFAULT_NOISE_BUDGET,
            max_tracked: DEFAULT_MAX_TRACKED,
            max_cancelled: DEFAULT_MAX_CANCELLED,
            max_notes: DEFAULT_MAX_NOTES,
            call: CallConfig::default(),
            session_id: String::new(),
            target: String::new(),
        }
    }
}

impl ProxyConfig {
    /// Sets the wire limit of both directions, in bytes (default
    /// [`DEFAULT_MAX_FRAME`](crate::frame::DEFAULT_MAX_FRAME); values below [`MIN_MAX_FRAME`] are raised to
    /// it). Each framer buffers at most this much: worst case `2 × max`.
    pub fn max_frame(&mut self, max: usize) -> &mut Self {
        self.framer.max_frame(max.max(MIN_MAX_FRAME));
        self
    }

    /// Edits both framers' settings in place (see [`FramerConfig`]: the wire
    /// limit, the id scan, the oversized and invalid UTF-8 policies). A wire
    /// limit below [`MIN_MAX_FRAME`] is raised to it when the proxy is built.
    pub fn framer_mut(&mut self) -> &mut FramerConfig {
        &mut self.framer
    }

    /// Sets the name of the setting that raises the wire limit, written in
    /// every wire-limit error the proxy sends ([`wire_limit_error`]); the
    /// guard names its flag (default `max_frame`).
    pub fn limit_knob(&mut self, knob: &str) -> &mut Self {
        knob.clone_into(&mut self.limit_knob);
        self
    }

    /// Sets the bound on bytes waiting for the host (default
    /// [`DEFAULT_MAX_BUFFERED`] = 16 MiB): queued here plus handed to the
    /// adapter and not yet written. One byte more and the proxy decides the
    /// host stopped reading ([`ProxyEvent::HostStoppedReading`]). Also the
    /// bound on bytes waiting for the server before
    /// [`Proxy::wants_host_input`] turns false. Worst case: this many bytes
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

    /// Sets how many notes may wait for [`Proxy::poll_note`] (default
    /// [`DEFAULT_MAX_NOTES`] = 256); past it notes are dropped and counted in
    /// [`ProxyMetrics::notes_dropped`]. Worst case: `max × ≈ 600 B`.
    pub fn max_notes(&mut self, max: usize) -> &mut Self {
        self.max_notes = max;
        self
    }

    /// Edits the limits of each call record in place (see [`CallConfig`]:
    /// 64 events of at most 512 bytes of text each).
    pub fn call_mut(&mut self) -> &mut CallConfig {
        &mut self.call
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

    /// The wire limit.
    pub fn get_max_frame(&self) -> usize {
        self.framer.get_max_frame()
    }
    /// Both framers' settings.
    pub fn get_framer(&self) -> &FramerConfig {
        &self.framer
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
    /// The limits of each call record.
    pub fn get_call(&self) -> &CallConfig {
        &self.call
    }
}

/// A decision of the proxy that the adapter must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyEvent {
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
}

/// Why the host side is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostClosed {
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
}

/// The proxy state machine. See the [module docs](self) for the method
/// groups and the poll order.
#[derive(Debug)]
pub struct Proxy {
    host_framer: Framer,
    server_framer: Framer,
    state: State,
}

#[derive(Debug)]
struct State {
    config: ProxyConfig,
    to_server: VecDeque<Vec<u8>>,
    to_server_bytes: usize,
    server_unwritten: usize,
    /// Messages for the host, each with the id of the response it is (so a
    /// cancel can withdraw one not yet handed out).
    to_host: VecDeque<(Option<Id>, Vec<u8>)>,
    to_host_bytes: usize,
    host_unwritten: usize,
    host_closed: Option<HostClosed>,
    events: VecDeque<ProxyEvent>,
    notes: VecDeque<String>,
    records: VecDeque<CallRecord>,
    tracked: HashMap<Id, CallLifecycle>,
    cancelled: RecentIds,
    next_call: u64,
    noise_shown: u64,
    metrics: ProxyMetrics,
}

impl Proxy {
    /// A proxy with the given limits.
    pub fn new(mut config: ProxyConfig) -> Self {
        let max = config.framer.get_max_frame().max(MIN_MAX_FRAME);
        config.framer.max_frame(max);
        let framing = config.framer.clone();
        Self {
            host_framer: Framer::new(framing.clone()),
            server_framer: Framer::new(framing),
            state: State {
                to_server: VecDeque::new(),
                to_server_bytes: 0,
                server_unwritten: 0,
                to_host: VecDeque::new(),
                to_host_bytes: 0,
                host_unwritten: 0,
                host_closed: None,
                events: VecDeque::new(),
                notes: VecDeque::new(),
                records: VecDeque::new(),
                tracked: HashMap::new(),
                cancelled: RecentIds::new(config.max_cancelled),
                next_call: 1,
                noise_shown: 0,
                metrics: ProxyMetrics::default(),
                config,
            },
        }
    }

    // ---- getters ----

    /// The limits.
    pub fn config(&self) -> &ProxyConfig {
        &self.state.config
    }

    /// The counters.
    pub fn metrics(&self) -> &ProxyMetrics {
        &self.state.metrics
    }

    /// Bytes waiting for the host: queued here plus taken by the adapter and
    /// not yet reported written.
    pub fn host_backlog(&self) -> usize {
        self.state.host_backlog()
    }

    /// Bytes waiting for the server: queued here plus taken and not written.
    pub fn server_backlog(&self) -> usize {
        self.state.to_server_bytes + self.state.server_unwritten
    }

    /// Whether the adapter should read more from the host: false while more
    /// than [`ProxyConfig::max_buffered`] bytes wait for the server (the
    /// server is not keeping up), so that direction stays bounded too.
    pub fn wants_host_input(&self) -> bool {
        self.server_backlog() <= self.state.config.max_buffered
    }

    /// Why the host side is closed, once it is.
    pub fn host_closed(&self) -> Option<HostClosed> {
        self.state.host_closed
    }

    /// Requests being tracked now.
    pub fn tracked(&self) -> usize {
        self.state.tracked.len()
    }

    // ---- inputs ----

    /// Bytes read from the host (any chunking).
    pub fn handle_host(&mut self, at: Stamp, chunk: &[u8]) {
        self.state.metrics.host_bytes += chunk.len() as u64;
        let state = &mut self.state;
        self.host_framer
            .push(chunk, |ev| state.on_host_event(at, ev));
    }

    /// The host closed our input. A last unterminated frame is handled.
    pub fn handle_host_eof(&mut self, at: Stamp) {
        let state = &mut self.state;
        self.host_framer.finish(|ev| state.on_host_event(at, ev));
    }

    /// Bytes read from the server's stdout (any chunking).
    pub fn handle_server(&mut self, at: Stamp, chunk: &[u8]) {
        self.state.metrics.server_bytes += chunk.len() as u64;
        let state = &mut self.state;
        self.server_framer
            .push(chunk, |ev| state.on_server_event(at, ev));
    }

    /// Room to read the server's stdout into: the framer's own buffer, so a
    /// large response is read once and goes to the host as it landed (see
    /// [`ReadRoom`]); then [`handle_server_read`](Self::handle_server_read).
    pub fn server_room(&mut self) -> ReadRoom<'_> {
        self.server_framer.read_room()
    }

    /// `n` bytes were read into [`server_room`](Self::server_room): as
    /// [`handle_server`](Self::handle_server) with those bytes.
    pub fn handle_server_read(&mut self, at: Stamp, n: usize) {
        let before = self.server_framer.stats().bytes;
        let state = &mut self.state;
        self.server_framer
            .filled(n, |ev| state.on_server_event(at, ev));
        self.state.metrics.server_bytes += self.server_framer.stats().bytes - before;
    }

    /// The server's stdout ended. A last unterminated frame is handled.
    pub fn handle_server_eof(&mut self, at: Stamp) {
        let state = &mut self.state;
        self.server_framer
            .finish(|ev| state.on_server_event(at, ev));
    }

    /// `n` bytes taken with [`poll_to_host`](Self::poll_to_host) reached the
    /// host's pipe. Reporting more than was taken counts as all of it.
    pub fn handle_host_written(&mut self, n: usize) {
        let s = &mut self.state;
        let n = n.min(s.host_unwritten);
        s.host_unwritten -= n;
        s.metrics.host_written_bytes += n as u64;
    }

    /// `n` bytes taken with [`poll_to_server`](Self::poll_to_server) reached
    /// the server's pipe.
    pub fn handle_server_written(&mut self, n: usize) {
        let s = &mut self.state;
        s.server_unwritten -= n.min(s.server_unwritten);
    }

    /// The server's stdin is gone: what waits for it is dropped.
    pub fn handle_server_input_closed(&mut self) {
        let s = &mut self.state;
        s.to_server.clear();
        s.to_server_bytes = 0;
        s.server_unwritten = 0;
    }

    /// A write to the host failed: the host side closes
    /// ([`ProxyEvent::HostOutputClosed`]).
    pub fn handle_host_write_error(&mut self) {
        if self.state.host_closed.is_none() {
            self.state.close_host(HostClosed::OutputClosed);
            self.state.events.push_back(ProxyEvent::HostOutputClosed);
        }
    }

    /// The session is over: every request still open ends `unknown` (the
    /// server may have acted), with the exit status if one was observed.
    pub fn finish(&mut self, at: Stamp, exit: Option<crate::process::ExitStatus>) {
        let mut open: Vec<(Id, CallLifecycle)> = self.state.tracked.drain().collect();
        open.sort_by_key(|(_, c)| call_seq(c));
        for (_, mut call) in open {
            // Dispatched by construction, so the transition is legal.
            let _ = call.mark_unknown(at);
            call.note(at.unix_ms, "the session ended before a response");
            if let Some(status) = exit {
                call.observe_exit(status);
            }
            self.state.records.push_back(call.record().clone());
        }
    }

    // ---- outputs ----

    /// The next decision the adapter must act on.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ProxyEvent> {
        self.state.events.pop_front()
    }

    /// The next call record for the audit log: once when a request is
    /// dispatched (before its bytes are handed out), once when it ends.
    #[must_use]
    pub fn poll_record(&mut self) -> Option<CallRecord> {
        self.state.records.pop_front()
    }

    /// The next message (with its `\n`) for the server's stdin. Its bytes
    /// stay counted until [`handle_server_written`](Self::handle_server_written).
    #[must_use]
    pub fn poll_to_server(&mut self) -> Option<Vec<u8>> {
        let s = &mut self.state;
        let b = s.to_server.pop_front()?;
        s.to_server_bytes -= b.len();
        s.server_unwritten += b.len();
        Some(b)
    }

    /// The next message (with its `\n`) for the host. Its bytes stay counted
    /// against [`ProxyConfig::max_buffered`] until
    /// [`handle_host_written`](Self::handle_host_written).
    #[must_use]
    pub fn poll_to_host(&mut self) -> Option<Vec<u8>> {
        let s = &mut self.state;
        let (_, b) = s.to_host.pop_front()?;
        s.to_host_bytes -= b.len();
        s.host_unwritten += b.len();
        Some(b)
    }

    /// The next line for stderr (notes about refused, dropped or
    /// non-protocol traffic).
    #[must_use]
    pub fn poll_note(&mut self) -> Option<String> {
        self.state.notes.pop_front()
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

fn tool_name(params: Option<&RawValue>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct P {
        name: String,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.name)
}

fn cancelled_id(params: Option<&RawValue>) -> Option<Id> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct P {
        request_id: Id,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.request_id)
}

/// An id as JSON text: `5` or `"abc"`.
fn id_json(id: &Id) -> String {
    match id {
        Id::Number(n) => n.to_string(),
        Id::String(s) => serde_json::to_string(s).unwrap_or_default(),
    }
}

impl State {
    fn host_backlog(&self) -> usize {
        self.to_host_bytes + self.host_unwritten
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
        self.metrics.host_bytes_dropped += self.to_host_bytes as u64;
        self.to_host.clear();
        self.to_host_bytes = 0;
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
        self.to_host_bytes += bytes.len();
        self.to_host.push_back((response_to, bytes));
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
        let before = self.to_host.len();
        let mut freed = 0;
        self.to_host.retain(|(response_to, bytes)| {
            let keep = response_to.as_ref() != Some(id);
            if !keep {
                freed += bytes.len();
            }
            keep
        });
        self.to_host_bytes -= freed;
        self.metrics.dropped_after_cancel += (before - self.to_host.len()) as u64;
    }

    fn send_server(&mut self, bytes: Vec<u8>) {
        self.to_server_bytes += bytes.len();
        self.to_server.push_back(bytes);
    }

    fn reply_error(&mut self, id: Option<&Id>, code: i64, message: String) {
        self.reply_error_object(id, ErrorObject::new(code, message));
    }

    /// The one wire-limit error ([`wire_limit_error`]), naming the guard's
    /// setting.
    fn limit_error(&self, what: Oversized, seen: u64) -> ErrorObject {
        let limit = self.config.framer.get_max_frame();
        wire_limit_error(what, limit, seen, &self.config.limit_knob)
    }

    fn reply_error_object(&mut self, id: Option<&Id>, err: ErrorObject) {
        // Small by construction (an id from a bounded scan and a short message),
        // so even a tiny wire limit must not silence the reply.
        if let Ok(bytes) = encode_error(id, &err, self.config.framer.get_max_frame().max(1024)) {
            self.send_host(bytes);
        }
    }

    /// Ends a tracked call and queues its record.
    fn complete(&mut self, at: Stamp, mut call: CallLifecycle, outcome: CallOutcome, note: &str) {
        // Tracked calls are dispatched, so `complete` is legal.
        let _ = call.complete(at, outcome);
        call.note(at.unix_ms, note);
        self.records.push_back(call.record().clone());
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
                    self.reply_error_object(Some(&id), err);
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
        match Message::decode(text) {
            Ok(Message::Request(r)) => {
                self.metrics.requests += 1;
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
                    let mut call = CallLifecycle::new(
                        &self.config.call,
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
                    // G12: the record is out before the request is handed out.
                    self.records.push_back(call.record().clone());
                    self.cancelled.remove(&r.id);
                    self.tracked.insert(r.id, call);
                }
            }
            Ok(Message::Notification(n)) if n.method == "notifications/cancelled" => {
                self.metrics.cancels += 1;
                if let Some(id) = cancelled_id(n.params.as_deref()) {
                    self.withdraw_response(&id);
                    if let Some(mut call) = self.tracked.remove(&id) {
                        // Dispatched, so this is `cancelled_after_dispatch`.
                        let _ = call.cancel(at);
                        call.note(at.unix_ms, "cancelled by the host");
                        self.records.push_back(call.record().clone());
                    }
                    self.cancelled.insert(id);
                }
            }
            Ok(_) => {}
            Err(_) => self.metrics.host_parse_errors += 1,
        }
        self.send_server(line(text.into()));
    }

    fn on_server_event(&mut self, at: Stamp, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => self.on_server_frame(at, text),
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                self.metrics.oversized_responses += 1;
                // Without an id in the prefix, wait for the frame's end: the
                // whole-frame scan may find it.
                if id_hint.is_some() {
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
        let limit = self.config.framer.get_max_frame();
        let tracked = id.as_ref().and_then(|id| self.tracked.remove(id));
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
            Ok(Decoded::Result { id, .. }) => Some((id, None)),
            Ok(Decoded::Message(Message::Response(r))) => Some((r.id, r.result.err())),
            Ok(Decoded::Message(_)) => None,
            Err(_) => {
                self.on_server_noise(at, text);
                return;
            }
        };
        let Some((id, error)) = response else {
            let bytes = line(frame);
            self.send_host(bytes);
            return;
        };
        if self.cancelled.contains(&id) && !self.tracked.contains_key(&id) {
            // The spec forbids it; the guard enforces it.
            self.metrics.dropped_after_cancel += 1;
            return;
        }
        self.metrics.responses += 1;
        if let Some(call) = self.tracked.remove(&id) {
            let (outcome, mut note) = match error {
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
            self.complete(at, call, outcome, &note);
        }
        let bytes = line(frame);
        self.send_host_message(Some(id), bytes);
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
        let scan = self.config.framer.get_id_scan_limit();
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
        if let Some(call) = self.tracked.remove(id) {
            self.metrics.refused_responses_failed += 1;
            let note = format!("{message}; the host got error {SERVER_ERROR}");
            self.reply_error(Some(id), SERVER_ERROR, message);
            self.complete(at, call, CallOutcome::RemoteFailure, &note);
        } else if self.cancelled.contains(id) {
            self.metrics.dropped_after_cancel += 1;
        }
    }
}

/// Fuzz entry point: drives a proxy with an arbitrary sequence of host and
/// server traffic (structured messages split anywhere, raw bytes, EOFs),
/// write progress, write errors and the end of the session, and checks its
/// invariants. Panics on a violated invariant.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_proxy(data: &[u8]) {
    fuzzing::run(data);
}

#[cfg(feature = "fuzzing")]
mod fuzzing {
    use super::*;
    use crate::call::CallState;
    use arbitrary::{Arbitrary, Unstructured};
    use std::collections::HashSet;
    use std::time::{Duration, Instant};

    #[derive(Arbitrary, Debug)]
    enum Op {
        HostRequest {
            id: u8,
            tool: bool,
            pad: u16,
            split: u16,
        },
        HostCancel {
            id: u8,
            split: u16,
        },
        HostRaw(Vec<u8>),
        HostEof,
        ServerResult {
            id: u8,
            pad: u16,
            split: u16,
        },
        ServerError {
            id: u8,
        },
        ServerNotification {
            pad: u16,
        },
        ServerRaw(Vec<u8>),
        ServerEof,
        TakeHost(u8),
        HostWritten(u16),
        TakeServer(u8),
        ServerWritten(u16),
        HostWriteError,
        ServerInputClosed,
        Finish,
    }

    struct Harness {
        p: Proxy,
        base: Instant,
        step: u64,
        max_frame: usize,
        max_buffered: usize,
        max_tracked: usize,
        /// The host's recent cancels, oldest first (the proxy's own limit).
        cancelled: Vec<u8>,
        max_cancelled: usize,
        /// Bytes handed out and not yet reported written.
        host_taken: usize,
        server_taken: usize,
        events: usize,
        /// Call ids with a terminal record.
        ended: HashSet<String>,
        /// Call ids with a dispatched record.
        dispatched: HashSet<String>,
    }

    pub(super) fn run(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let max_frame = u.int_in_range(MIN_MAX_FRAME..=512).unwrap_or(128);
        let max_buffered = u.int_in_range(0..=4096usize).unwrap_or(1024);
        let max_tracked = u.int_in_range(0..=8usize).unwrap_or(4);
        let max_cancelled = u.int_in_range(0..=8usize).unwrap_or(4);
        let max_notes = u.int_in_range(0..=4usize).unwrap_or(2);
        let noise = u.int_in_range(0..=256u64).unwrap_or(64);
        let mut config = ProxyConfig::default();
        config
            .max_frame(max_frame)
            .max_buffered(max_buffered)
            .max_tracked(max_tracked)
            .max_cancelled(max_cancelled)
            .max_notes(max_notes)
            .noise_budget(noise);
        let mut h = Harness {
            p: Proxy::new(config),
            base: Instant::now(),
            step: 0,
            max_frame,
            max_buffered,
            max_tracked,
            cancelled: Vec::new(),
            max_cancelled,
            host_taken: 0,
            server_taken: 0,
            events: 0,
            ended: HashSet::new(),
            dispatched: HashSet::new(),
        };
        for _ in 0..256 {
            let Ok(op) = u.arbitrary::<Op>() else { break };
            h.apply(op);
            h.check();
        }
    }

    fn split_push(bytes: &[u8], split: u16, mut push: impl FnMut(&[u8])) {
        let at = usize::from(split) % (bytes.len() + 1);
        push(&bytes[..at]);
        push(&bytes[at..]);
    }

    impl Harness {
        fn at(&mut self) -> Stamp {
            self.step += 1;
            Stamp::new(self.base + Duration::from_millis(self.step), self.step)
        }

        fn apply(&mut self, op: Op) {
            let at = self.at();
            match op {
                Op::HostRequest {
                    id,
                    tool,
                    pad,
                    split,
                } => {
                    let params = if tool {
                        format!(
                            ",\"params\":{{\"name\":\"t{}\"}}",
                            "x".repeat(usize::from(pad % 600))
                        )
                    } else {
                        format!(",\"params\":\"{}\"", "y".repeat(usize::from(pad % 600)))
                    };
                    let method = if tool { "tools/call" } else { "m" };
                    let line = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"{params}}}\n"
                    );
                    let before = self.p.tracked();
                    split_push(line.as_bytes(), split, |b| self.p.handle_host(at, b));
                    if self.p.tracked() > before {
                        // A tracked request makes its id live again.
                        self.cancelled.retain(|&c| c != id);
                    }
                }
                Op::HostCancel { id, split } => {
                    let line = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{id}}}}}\n");
                    // An oversized cancel is refused, so it cancels nothing.
                    let fits = line.len() - 1 <= self.max_frame;
                    if fits && self.max_cancelled > 0 && !self.cancelled.contains(&id) {
                        self.cancelled.push(id);
                        if self.cancelled.len() > self.max_cancelled {
                            self.cancelled.remove(0);
                        }
                    }
                    split_push(line.as_bytes(), split, |b| self.p.handle_host(at, b));
                }
                Op::HostRaw(bytes) => {
                    // Raw bytes may form any request or cancel: the model of
                    // cancelled ids no longer holds, so stop checking it.
                    self.cancelled.clear();
                    self.max_cancelled = 0;
                    self.p.handle_host(at, &bytes);
                }
                Op::HostEof => self.p.handle_host_eof(at),
                Op::ServerResult { id, pad, split } => {
                    let line = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":\"{}\"}}\n",
                        "r".repeat(usize::from(pad % 600))
                    );
                    split_push(line.as_bytes(), split, |b| self.p.handle_server(at, b));
                }
                Op::ServerError { id } => {
                    let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-1,\"message\":\"e\"}}}}\n");
                    self.p.handle_server(at, line.as_bytes());
                }
                Op::ServerNotification { pad } => {
                    let line = format!(
                        "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}\n",
                        "n".repeat(usize::from(pad % 2000))
                    );
                    self.p.handle_server(at, line.as_bytes());
                }
                Op::ServerRaw(bytes) => self.p.handle_server(at, &bytes),
                Op::ServerEof => self.p.handle_server_eof(at),
                Op::TakeHost(n) => {
                    for _ in 0..n {
                        let Some(b) = self.p.poll_to_host() else {
                            break;
                        };
                        self.check_host_message(&b);
                        self.host_taken += b.len();
                    }
                }
                Op::HostWritten(n) => {
                    let n = usize::from(n).min(self.host_taken);
                    self.host_taken -= n;
                    self.p.handle_host_written(n);
                }
                Op::TakeServer(n) => {
                    for _ in 0..n {
                        let Some(b) = self.p.poll_to_server() else {
                            break;
                        };
                        assert!(
                            b.len() <= self.max_frame + 1,
                            "G2: {} bytes to the server",
                            b.len()
                        );
                        assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), 1);
                        assert_eq!(b.last(), Some(&b'\n'));
                        self.server_taken += b.len();
                    }
                }
                Op::ServerWritten(n) => {
                    let n = usize::from(n).min(self.server_taken);
                    self.server_taken -= n;
                    self.p.handle_server_written(n);
                }
                Op::HostWriteError => self.p.handle_host_write_error(),
                Op::ServerInputClosed => {
                    self.server_taken = 0;
                    self.p.handle_server_input_closed();
                }
                Op::Finish => {
                    self.p.finish(at, None);
                    assert_eq!(self.p.tracked(), 0);
                }
            }
        }

        fn check_host_message(&self, b: &[u8]) {
            assert!(
                b.len() <= self.max_frame.max(1024) + 1,
                "G2: {} bytes to the host",
                b.len()
            );
            assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), 1);
            assert_eq!(b.last(), Some(&b'\n'));
            assert!(self.p.host_closed().is_none(), "handed out after close");
            let text = std::str::from_utf8(b).expect("frames are UTF-8");
            if let Ok(Message::Response(r)) = Message::decode(&text[..text.len() - 1]) {
                if let (Id::Number(n), Ok(_)) = (&r.id, &r.result) {
                    let cancelled = u8::try_from(*n).is_ok_and(|n| self.cancelled.contains(&n));
                    assert!(
                        !cancelled,
                        "G6: a result for cancelled id {n} reached the host"
                    );
                }
            }
        }

        fn check(&mut self) {
            while let Some(ev) = self.p.poll_event() {
                self.events += 1;
                assert_eq!(self.events, 1, "the host side closes once: {ev:?}");
                if let ProxyEvent::HostStoppedReading { waiting, limit } = ev {
                    assert!(waiting > limit && limit == self.max_buffered);
                }
            }
            if self.p.host_closed().is_none() {
                assert!(
                    self.p.host_backlog() <= self.max_buffered,
                    "G1: {} bytes wait for the host, limit {}",
                    self.p.host_backlog(),
                    self.max_buffered
                );
            } else {
                assert!(self.p.poll_to_host().is_none(), "handed out after close");
                assert!(self.events == 1);
            }
            assert!(self.p.host_backlog() >= self.host_taken);
            assert!(self.p.tracked() <= self.max_tracked);
            while let Some(r) = self.p.poll_record() {
                let id = r.call_id().to_owned();
                assert!(
                    !self.ended.contains(&id),
                    "G12: a record after the end of {id}"
                );
                if r.state() == CallState::Dispatched {
                    assert!(self.dispatched.insert(id), "dispatched twice");
                } else {
                    assert!(r.state().is_terminal(), "{:?}", r.state());
                    assert!(
                        self.dispatched.contains(&id),
                        "G12: ended before dispatched"
                    );
                    self.ended.insert(id);
                }
            }
            let mut notes = 0;
            while self.p.poll_note().is_some() {
                notes += 1;
            }
            assert!(notes <= self.p.config().get_max_notes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallState;
    use crate::frame::InvalidUtf8Policy;
    use crate::message::WIRE_LIMIT_EXCEEDED;
    use std::time::Instant;

    fn at() -> Stamp {
        Stamp::new(Instant::now(), 1_700_000_000_000)
    }

    fn drain_host(p: &mut Proxy) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(b) = p.poll_to_host() {
            p.handle_host_written(b.len());
            v.push(String::from_utf8(b).expect("utf-8"));
        }
        v
    }

    fn drain_server(p: &mut Proxy) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(b) = p.poll_to_server() {
            p.handle_server_written(b.len());
            v.push(String::from_utf8(b).expect("utf-8"));
        }
        v
    }

    fn records(p: &mut Proxy) -> Vec<CallRecord> {
        std::iter::from_fn(|| p.poll_record()).collect()
    }

    fn small_frame(max: usize) -> ProxyConfig {
        let mut c = ProxyConfig::default();
        c.max_frame(max);
        c
    }

    #[test]
    fn transparent_for_a_well_behaved_session() {
        let mut c = ProxyConfig::default();
        c.session_id("s1").target("server --flag");
        let mut p = Proxy::new(c);
        let req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\n";
        p.handle_host(at(), req.as_bytes());
        let r = records(&mut p);
        assert_eq!(r.len(), 1, "the record comes with the request");
        assert_eq!(r[0].state(), CallState::Dispatched);
        assert_eq!(
            (
                r[0].call_id(),
                r[0].operation(),
                r[0].target(),
                r[0].session_id()
            ),
            ("1/1", "echo", "server --flag", "s1")
        );
        assert_eq!(drain_server(&mut p), [req]);
        let resp = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n";
        p.handle_server(at(), resp.as_bytes());
        assert_eq!(drain_host(&mut p), [resp]);
        let r = records(&mut p);
        assert_eq!(r[0].state(), CallState::Completed);
        assert_eq!(r[0].outcome(), Some(CallOutcome::Succeeded));
        assert!(p.poll_event().is_none());
    }

    #[test]
    fn g6_nothing_for_a_cancelled_id_reaches_the_host() {
        let mut p = Proxy::new(ProxyConfig::default());
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"slow\"}\n",
        );
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}\n",
        );
        assert_eq!(drain_server(&mut p).len(), 2);
        let r = records(&mut p);
        assert_eq!(r[1].state(), CallState::CancelledAfterDispatch);
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
        assert!(drain_host(&mut p).is_empty());
        assert_eq!(p.metrics().dropped_after_cancel, 1);
    }

    #[test]
    fn g6_a_cancel_withdraws_a_queued_response_for_its_id() {
        let mut p = Proxy::new(ProxyConfig::default());
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"slow\"}\n",
        );
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"slow\"}\n",
        );
        // Both answers wait for the host; the host then cancels 7.
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n");
        let waiting = p.host_backlog();
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}\n",
        );
        let host = drain_host(&mut p);
        assert_eq!(host.len(), 1, "{host:?}");
        assert!(host[0].contains("\"id\":8"));
        assert!(p.host_backlog() == 0 && waiting > 0);
        assert_eq!(p.metrics().dropped_after_cancel, 1);
    }

    #[test]
    fn g3_invalid_utf8_response_is_repaired_and_recorded() {
        let mut p = Proxy::new(ProxyConfig::default());
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\"}\n",
        );
        drain_server(&mut p);
        records(&mut p);
        p.handle_server(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"bad \xff\xfe byte\"}]}}\n",
        );
        let host = drain_host(&mut p);
        assert_eq!(host.len(), 1, "{host:?}");
        assert!(host[0].contains("bad \u{fffd}\u{fffd} byte"), "{host:?}");
        let r = records(&mut p);
        assert_eq!(r[0].outcome(), Some(CallOutcome::Succeeded));
        let events = serde_json::to_string(&r[0]).expect("record");
        assert!(
            events.contains("invalid UTF-8 repaired: 2 sequence(s)"),
            "{events}"
        );
        assert_eq!(p.metrics().server_utf8_repaired, 1);
    }

    #[test]
    fn g3_refused_lines_fail_their_call_at_once() {
        let mut c = ProxyConfig::default();
        c.framer_mut().invalid_utf8(InvalidUtf8Policy::Refuse);
        c.limit_knob("--max-frame");
        let mut p = Proxy::new(c);
        for id in [1, 2] {
            let req = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\"}}\n");
            p.handle_host(at(), req.as_bytes());
        }
        drain_server(&mut p);
        records(&mut p);
        // Not UTF-8 (refused by policy), then valid JSON that is no JSON-RPC
        // message, its id last.
        p.handle_server(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xff\"}\n",
        );
        p.handle_server(at(), b"{\"jsonrpc\":\"1.0\",\"result\":{},\"id\":2}\n");
        let host = drain_host(&mut p);
        assert_eq!(host.len(), 2, "{host:?}");
        assert!(
            host[0].contains("\"id\":1") && host[0].contains("not valid UTF-8"),
            "{host:?}"
        );
        assert!(
            host[1].contains("\"id\":2") && host[1].contains("malformed response"),
            "{host:?}"
        );
        let r = records(&mut p);
        assert_eq!(r.len(), 2);
        assert!(r
            .iter()
            .all(|r| r.outcome() == Some(CallOutcome::RemoteFailure)));
        assert_eq!(p.metrics().refused_responses_failed, 2);
    }

    #[test]
    fn g3_the_wire_limit_error_names_the_guards_setting() {
        let mut c = small_frame(1024);
        c.limit_knob("--max-frame");
        let mut p = Proxy::new(c);
        p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
        let mut big = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"".to_vec();
        big.extend(std::iter::repeat_n(b'x', 5000));
        big.extend_from_slice(b"\"}\n");
        p.handle_server(at(), &big);
        let host = drain_host(&mut p);
        let v: serde_json::Value = serde_json::from_str(&host[0]).expect("json");
        assert_eq!(v["error"]["code"], WIRE_LIMIT_EXCEEDED);
        assert_eq!(v["error"]["data"]["limit"], 1024);
        assert_eq!(v["error"]["data"]["seen"], 1025);
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("raise --max-frame")),
            "{v}"
        );
    }

    #[test]
    fn g3_oversized_response_becomes_an_error_for_its_id() {
        let mut p = Proxy::new(small_frame(1024));
        p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
        let mut big = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"".to_vec();
        big.extend(std::iter::repeat_n(b'x', 5000));
        big.extend_from_slice(b"\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"after\"}\n");
        p.handle_server(at(), &big);
        let host = drain_host(&mut p);
        assert_eq!(host.len(), 2, "{host:?}");
        assert!(
            host[0].contains("\"id\":3")
                && host[0].contains("exceeded the wire limit (1024 bytes;")
        );
        assert!(host[1].contains("after"));
        let r = records(&mut p);
        assert_eq!(r[1].outcome(), Some(CallOutcome::LocalFailure));
    }

    #[test]
    fn g3_id_last_oversized_response_becomes_an_error_at_its_end() {
        let mut p = Proxy::new(small_frame(1024));
        p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"big\"}\n",
        );
        let _ = drain_server(&mut p);
        let mut big = b"{\"result\":{\"id\":\"q\",\"t\":\"".to_vec();
        big.extend(std::iter::repeat_n(b'x', 5000));
        big.extend_from_slice(b"\"},\"jsonrpc\":\"2.0\",\"id\":3}");
        for piece in big.chunks(333) {
            p.handle_server(at(), piece);
        }
        assert!(drain_host(&mut p).is_empty());
        p.handle_server(at(), b"\n");
        let host = drain_host(&mut p);
        assert_eq!(host.len(), 1, "{host:?}");
        assert!(
            host[0].contains("\"id\":3")
                && host[0].contains("exceeded the wire limit (1024 bytes;"),
            "{host:?}"
        );
        let r = records(&mut p);
        assert!(r
            .iter()
            .any(|r| r.outcome() == Some(CallOutcome::LocalFailure)));
        // No id anywhere: dropped with a note, counted, nothing answered.
        let mut nameless = b"{\"result\":\"".to_vec();
        nameless.extend(std::iter::repeat_n(b'x', 5000));
        nameless.extend_from_slice(b"\",\"jsonrpc\":\"2.0\"}\n");
        p.handle_server(at(), &nameless);
        assert!(drain_host(&mut p).is_empty());
        assert_eq!(p.metrics().oversized_response_ids_missing, 1);
    }

    #[test]
    fn g2_oversized_request_never_reaches_the_server() {
        let mut p = Proxy::new(small_frame(100));
        let mut req = b"{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"method\":\"m\",\"params\":\"".to_vec();
        req.extend(std::iter::repeat_n(b'y', 500));
        req.extend_from_slice(b"\"}\n");
        p.handle_host(at(), &req);
        assert!(drain_server(&mut p).is_empty());
        let host = drain_host(&mut p);
        assert!(
            host[0].contains("\"id\":\"r\"") && host[0].contains("request exceeded the wire limit")
        );
    }

    #[test]
    fn g13_non_protocol_stdout_moves_to_notes() {
        let mut p = Proxy::new(ProxyConfig::default());
        p.handle_server(
            at(),
            b"Server listening on stdio\n{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n",
        );
        assert_eq!(drain_host(&mut p).len(), 1);
        assert_eq!(
            p.poll_note().as_deref(),
            Some("[server stdout, not protocol] Server listening on stdio")
        );
        assert_eq!(p.metrics().non_protocol_lines, 1);
    }

    #[test]
    fn g12_open_requests_end_unknown_with_the_exit_status() {
        let mut p = Proxy::new(ProxyConfig::default());
        p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\n");
        p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"m\"}\n");
        let _ = records(&mut p);
        p.finish(at(), Some(crate::process::ExitStatus::Code(3)));
        let r = records(&mut p);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].call_id(), r[1].call_id()), ("1/1", "2/2"));
        assert!(r.iter().all(|r| r.state() == CallState::Unknown
            && r.exit_status() == Some(crate::process::ExitStatus::Code(3))));
        assert_eq!(p.tracked(), 0);
    }

    #[test]
    fn g1_host_that_stops_reading_closes_at_the_limit_counting_unwritten_bytes() {
        let mut c = ProxyConfig::default();
        c.max_buffered(1000);
        let mut p = Proxy::new(c);
        let note = |i: usize| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}\n",
                "x".repeat(i)
            )
        };
        // Taken by the adapter but never reported written: still counted.
        p.handle_server(at(), note(400).as_bytes());
        let taken = p.poll_to_host().expect("a message");
        assert_eq!(p.host_backlog(), taken.len());
        p.handle_server(at(), note(400).as_bytes());
        assert!(p.poll_event().is_none(), "{} bytes", p.host_backlog());
        // Progress keeps it open.
        p.handle_host_written(taken.len());
        p.handle_server(at(), note(400).as_bytes());
        assert!(p.poll_event().is_none());
        p.handle_server(at(), note(400).as_bytes());
        match p.poll_event() {
            Some(ProxyEvent::HostStoppedReading { waiting, limit }) => {
                assert!(waiting > 1000 && limit == 1000);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.host_closed(), Some(HostClosed::StoppedReading));
        assert!(p.poll_to_host().is_none(), "nothing is handed out any more");
        p.handle_server(at(), note(10).as_bytes());
        assert!(p.poll_to_host().is_none());
        assert!(p.metrics().host_bytes_dropped > 0);
        assert!(p.poll_event().is_none(), "decided once");
    }

    #[test]
    fn g1_server_backlog_pauses_host_reading() {
        let mut c = ProxyConfig::default();
        c.max_buffered(100);
        let mut p = Proxy::new(c);
        let req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\n";
        p.handle_host(at(), req.as_bytes());
        p.handle_host(at(), req.replace(":1,", ":2,").as_bytes());
        assert!(!p.wants_host_input());
        let a = p.poll_to_server().expect("queued");
        let b = p.poll_to_server().expect("queued");
        assert!(!p.wants_host_input(), "taken is not written");
        p.handle_server_written(a.len() + b.len());
        assert!(p.wants_host_input());
    }

    #[test]
    fn a_write_error_closes_the_host_side_once() {
        let mut p = Proxy::new(ProxyConfig::default());
        p.handle_host_write_error();
        p.handle_host_write_error();
        assert_eq!(p.poll_event(), Some(ProxyEvent::HostOutputClosed));
        assert!(p.poll_event().is_none());
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n");
        assert!(p.poll_to_host().is_none());
    }

    #[cfg(feature = "fuzzing")]
    #[test]
    fn fuzz_proxy_random_inputs() {
        crate::fuzzing::run_random_inputs(0x2545_F491_4F6C_DD1D, 400, 512, fuzz_proxy);
    }

    #[test]
    fn cancelled_ids_are_bounded() {
        let mut c = ProxyConfig::default();
        c.max_cancelled(2);
        let mut p = Proxy::new(c);
        for i in 0..5 {
            p.handle_host(
                at(),
                format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{i}}}}}\n").as_bytes(),
            );
        }
        // Id 0 was forgotten: its late response is forwarded; id 4 is not.
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n");
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}\n");
        assert_eq!(drain_host(&mut p).len(), 1);
    }
}
