//! Bounded capture of an untrusted byte stream and the process-wide retention
//! pool (G10).
//!
//! A child's stderr (or a helper's stdout) is read continuously by the
//! adapter, whatever it holds and however fast it comes. This module decides
//! what of it is kept: the newest `tail` bytes in a ring buffer, optionally the
//! first `head` bytes, and a byte counter that keeps counting after the limit.
//! Nothing is decoded while the stream runs; only the retained bytes are
//! decoded, lossily, at the end, after a truncation marker written by us:
//!
//! ```text
//! [stderr truncated: kept last 16384 of 184320 bytes]
//! connection retry 18 failed: remote side closed the channel
//! ```
//!
//! ## The three budgets of G10
//!
//! | budget | protects | here | default |
//! | --- | --- | --- | --- |
//! | per call | one operation | [`CaptureConfig`] (`head` + `tail`) of an [`OutputCapture`] | tail 16 KiB, head 0 |
//! | per process | concurrent operations together | [`RetentionPool`] ([`PoolConfig::limit`]) | 256 KiB |
//! | agent excerpt | the model's context | [`Captured::excerpt`] (`max_bytes`) | [`DEFAULT_EXCERPT`] = 4 KiB |
//!
//! The fourth bound, the OS pipe buffer, is kept small by the adapters, which
//! never stop reading (G1, G10); the core never sees it.
//!
//! ## What the record says about the kept bytes
//!
//! A [`CaptureSummary`] says which part was kept ([`RetainedPart`]: all, head,
//! tail, head and tail, nothing) with the stream bytes of each, whether the
//! kept bytes went through the fallback [redactor](crate::redact) (on by
//! default, [`CaptureConfig::redact`]) and how many secrets it replaced, and
//! the [`DebugMark`] of the debug window the capture was made in, if any.
//!
//! ## Debug mode: a bounded window, not a `quiet` switch
//!
//! [`DebugMode`] opens one window at a time, at most [`MAX_DEBUG_WINDOW`]
//! long, multiplying capture limits by at most [`MAX_DEBUG_MULTIPLIER`];
//! captures configured during it ([`DebugMode::apply`]) carry its mark into
//! their summaries and call records. Normal output stays small; when evidence
//! is needed, a window gives more of it, for a while, and the records say so.
//!
//! ## Handoff between a capture and the pool
//!
//! The pool is pure bookkeeping: no lock, no atomics. The adapters share one
//! pool per process behind a `Mutex` and hold the lock only for
//! [`RetentionPool::grant`] and [`RetentionPool::release`], never while
//! pushing bytes.
//!
//! ```
//! use mcp_stdio_core::capture::{CaptureConfig, OutputCapture, PoolConfig, RetentionPool};
//!
//! let mut pool = RetentionPool::new(&PoolConfig::default()); // adapters: in a Mutex
//! let config = CaptureConfig::default();
//! // 1. Ask for the capture's own limit; the pool grants what is free (maybe less).
//! let grant = pool.grant(config.wanted());
//! let mut capture = OutputCapture::with_grant(&config, grant);
//! // 2. Push every chunk read from the pipe (no lock needed).
//! capture.push(b"connection retry 18 failed\n");
//! // 3. At end of stream: summary for the call record, excerpt for the agent.
//! let captured = capture.finish();
//! let summary = captured.summary();
//! let excerpt = captured.excerpt("stderr", 4096);
//! assert_eq!(summary.seen, 27);
//! assert_eq!(excerpt, "connection retry 18 failed\n");
//! // 4. Drop the bytes and give their allowance back.
//! if let Some(grant) = captured.into_grant() {
//!     pool.release(grant).expect("grant came from this pool");
//! }
//! assert_eq!(pool.in_use(), 0);
//! ```
//!
//! A [`Grant`] is not `Clone` and [`RetentionPool::release`] consumes it, so a
//! grant cannot be released twice. A grant dropped without release stays
//! counted as in use (the pool cannot know the bytes are gone); that is logged
//! with `tracing` at `warn` level.

use std::cmp::min;
use std::fmt;
use std::time::{Duration, Instant};

use crate::call::Stamp;

use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

/// Default `tail` limit of one capture: 16 KiB.
pub const DEFAULT_TAIL: usize = 16 * 1024;
/// Default `head` limit of one capture: 0 (keep the newest bytes only).
pub const DEFAULT_HEAD: usize = 0;
/// Default limit of the process-wide retention pool: 256 KiB.
pub const DEFAULT_POOL_LIMIT: usize = 256 * 1024;
/// Default part of the pool held back for per-capture minimums: 32 KiB.
pub const DEFAULT_POOL_RESERVE: usize = 32 * 1024;
/// Default per-capture minimum served from the reserve: 512 bytes.
pub const DEFAULT_MIN_GRANT: usize = 512;
/// Suggested `max_bytes` for [`Captured::excerpt`]: 4 KiB.
pub const DEFAULT_EXCERPT: usize = 4 * 1024;
/// Longest debug window [`DebugMode::open`] accepts: 15 minutes.
pub const MAX_DEBUG_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Largest budget multiplier [`DebugMode::open`] accepts: 8 (a 16 KiB tail
/// becomes 128 KiB).
pub const MAX_DEBUG_MULTIPLIER: u32 = 8;

/// The limits of one [`OutputCapture`] (the per-call budget of G10).
///
/// A capture keeps the first `head` bytes of the stream and the newest `tail`
/// bytes after them; everything else is counted and dropped.
///
/// Two more settings decide what the retained bytes become at the end:
/// [`redact`](Self::redact) (on by default) and [`debug`](Self::debug) (off
/// by default; a [`DebugMark`] from an open [`DebugMode`] window multiplies
/// both limits and is noted in the summary).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CaptureConfig {
    head: usize,
    tail: usize,
    redact: bool,
    debug: Option<DebugMark>,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        Self {
            head: DEFAULT_HEAD,
            tail: DEFAULT_TAIL,
            redact: true,
            debug: None,
        }
    }
}

impl CaptureConfig {
    /// Sets how many of the first bytes of the stream are kept (default 0).
    ///
    /// Memory: allocated in full when the capture is built, so one capture
    /// holds at most `head + tail` bytes of stream data.
    pub fn head(&mut self, bytes: usize) -> &mut Self {
        self.head = bytes;
        self
    }

    /// Sets how many of the newest bytes of the stream are kept in the ring
    /// buffer (default [`DEFAULT_TAIL`], 16 KiB).
    ///
    /// Memory: allocated in full when the capture is built, so one capture
    /// holds at most `head + tail` bytes of stream data. Zero keeps no tail.
    pub fn tail(&mut self, bytes: usize) -> &mut Self {
        self.tail = bytes;
        self
    }

    /// The `head` limit.
    pub fn get_head(&self) -> usize {
        self.head
    }

    /// The `tail` limit.
    pub fn get_tail(&self) -> usize {
        self.tail
    }

    /// Whether the retained bytes pass through the [redactor](crate::redact)
    /// when the capture finishes (default `true`). A fallback, never a
    /// guarantee: see [`crate::redact`] for what it catches and misses.
    ///
    /// Memory: none; redaction works in place and never lengthens the bytes.
    /// Work: linear in the retained bytes, once, at [`OutputCapture::finish`].
    pub fn redact(&mut self, on: bool) -> &mut Self {
        self.redact = on;
        self
    }

    /// Marks captures built with this config as made during a debug window
    /// (default `None`). The head and tail limits are multiplied by the
    /// mark's multiplier (at most [`MAX_DEBUG_MULTIPLIER`]), and the summary
    /// carries the mark, so the record shows the call ran with higher
    /// budgets. Get a mark from [`DebugMode::open`] / [`DebugMode::apply`].
    ///
    /// Memory: one capture holds at most `(head + tail) × multiplier` bytes;
    /// a pooled capture still gets no more than its grant.
    pub fn debug(&mut self, mark: Option<DebugMark>) -> &mut Self {
        self.debug = mark;
        self
    }

    /// Whether redaction is on.
    pub fn get_redact(&self) -> bool {
        self.redact
    }

    /// The debug mark, if any.
    pub fn get_debug(&self) -> Option<DebugMark> {
        self.debug
    }

    fn multiplier(&self) -> usize {
        self.debug
            .map_or(1, |m| m.multiplier.clamp(1, MAX_DEBUG_MULTIPLIER) as usize)
    }

    /// The head limit in effect: `head`, times the debug multiplier.
    pub fn effective_head(&self) -> usize {
        self.head.saturating_mul(self.multiplier())
    }

    /// The tail limit in effect: `tail`, times the debug multiplier.
    pub fn effective_tail(&self) -> usize {
        self.tail.saturating_mul(self.multiplier())
    }

    /// `head + tail` in effect (saturating, debug multiplier included): what
    /// to ask the [`RetentionPool`] for.
    pub fn wanted(&self) -> usize {
        self.effective_head().saturating_add(self.effective_tail())
    }
}

/// Bounded capture of one byte stream (G10): first `head` bytes, newest `tail`
/// bytes, and an exact count of everything seen.
///
/// - [`push`](Self::push) takes each chunk as read, in O(chunk) time (a chunk
///   longer than the ring only copies its last `tail` bytes) and never
///   allocates: the whole buffer is allocated once, at construction, at its
///   final size.
/// - Counting never stops: `seen` is a `u64` and keeps growing after the
///   limits are reached, so the reader can (and must) keep draining.
/// - Bytes are never decoded here; [`finish`](Self::finish) hands them over as
///   a [`Captured`], which decodes at the end.
///
/// Head and tail never overlap: a byte goes to the head while it has room,
/// otherwise to the ring. So if nothing was dropped, head followed by tail is
/// exactly the stream.
pub struct OutputCapture {
    /// Head region `[..head_cap]`, then ring region `[head_cap..]`; allocated once.
    buf: Vec<u8>,
    head_cap: usize,
    head_len: usize,
    /// Offset of the oldest ring byte inside the ring region.
    ring_start: usize,
    ring_len: usize,
    seen: u64,
    pool_limited: bool,
    redact: bool,
    debug: Option<DebugMark>,
    grant: Option<Grant>,
}

impl fmt::Debug for OutputCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the bytes: they are untrusted and possibly large.
        f.debug_struct("OutputCapture")
            .field("head_limit", &self.head_limit())
            .field("tail_limit", &self.tail_limit())
            .field("seen", &self.seen)
            .field("retained", &self.retained())
            .field("pool_limited", &self.pool_limited)
            .finish_non_exhaustive()
    }
}

impl OutputCapture {
    /// A capture outside any pool, with exactly the limits of `config`.
    ///
    /// Allocates `head + tail` bytes now and never again. The limits are
    /// configuration, not input: as with any allocation, limits the machine
    /// cannot allocate abort. Prefer [`with_grant`](Self::with_grant), whose
    /// allocation is bounded by the pool.
    pub fn new(config: &CaptureConfig) -> Self {
        let (head, tail) = (config.effective_head(), config.effective_tail());
        Self::build(config, head, tail, false, None)
    }

    /// A capture whose allowance comes from a [`RetentionPool`].
    ///
    /// The granted bytes go to the tail first (the newest bytes are where
    /// errors usually are), then to the head: with `g` bytes granted the tail
    /// limit is `min(tail, g)` and the head limit `min(head, g - tail limit)`.
    /// A capture granted less than [`CaptureConfig::wanted`] (even nothing)
    /// still counts every byte and reports its truncation honestly. The grant
    /// travels with the capture into [`Captured`]; get it back with
    /// [`Captured::into_grant`].
    pub fn with_grant(config: &CaptureConfig, grant: Grant) -> Self {
        let granted = grant.bytes();
        let tail = min(config.effective_tail(), granted);
        let head = min(config.effective_head(), granted - tail);
        let pool_limited = granted < config.wanted();
        Self::build(config, head, tail, pool_limited, Some(grant))
    }

    fn build(
        config: &CaptureConfig,
        head: usize,
        tail: usize,
        pool_limited: bool,
        grant: Option<Grant>,
    ) -> Self {
        Self {
            // The only allocation of a capture: `push` writes in place.
            buf: vec![0; head.saturating_add(tail)],
            head_cap: head,
            head_len: 0,
            ring_start: 0,
            ring_len: 0,
            seen: 0,
            pool_limited,
            redact: config.redact,
            debug: config.debug,
            grant,
        }
    }

    /// Feeds one chunk of the stream, as read. O(`chunk.len()`), no allocation.
    pub fn push(&mut self, chunk: &[u8]) {
        // usize is at most 64 bits on every supported target, so this is lossless.
        self.seen = self.seen.saturating_add(chunk.len() as u64);
        let mut rest = chunk;
        if self.head_len < self.head_cap {
            let take = min(self.head_cap - self.head_len, rest.len());
            self.buf[self.head_len..self.head_len + take].copy_from_slice(&rest[..take]);
            self.head_len += take;
            rest = &rest[take..];
        }
        if !rest.is_empty() {
            self.push_ring(rest);
        }
    }

    fn push_ring(&mut self, data: &[u8]) {
        let ring = &mut self.buf[self.head_cap..];
        let cap = ring.len();
        if cap == 0 {
            return;
        }
        let n = data.len();
        if n >= cap {
            // Only the last `cap` bytes of a big chunk can survive: copy just those.
            ring.copy_from_slice(&data[n - cap..]);
            self.ring_start = 0;
            self.ring_len = cap;
            return;
        }
        let write = (self.ring_start + self.ring_len) % cap;
        let first = min(n, cap - write);
        ring[write..write + first].copy_from_slice(&data[..first]);
        ring[..n - first].copy_from_slice(&data[first..]);
        let total = self.ring_len + n;
        if total > cap {
            self.ring_start = (self.ring_start + (total - cap)) % cap;
            self.ring_len = cap;
        } else {
            self.ring_len = total;
        }
    }

    /// Bytes pushed so far, including the dropped ones.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Bytes currently kept (head + tail).
    pub fn retained(&self) -> u64 {
        (self.head_len + self.ring_len) as u64
    }

    /// True once any byte has been dropped.
    pub fn truncated(&self) -> bool {
        self.seen > self.retained()
    }

    /// The effective head limit (smaller than configured if the pool granted less).
    pub fn head_limit(&self) -> usize {
        self.head_cap
    }

    /// The effective tail limit (smaller than configured if the pool granted less).
    pub fn tail_limit(&self) -> usize {
        self.buf.len() - self.head_cap
    }

    /// True if the pool granted less than the configured `head + tail`.
    pub fn pool_limited(&self) -> bool {
        self.pool_limited
    }

    /// Ends the capture: the retained bytes in stream order, and the counts.
    ///
    /// With redaction on (the default), head and tail are each passed
    /// through [`crate::redact::redact_in_place`] here, so no later view
    /// (render, excerpt, serialization) ever sees the raw secret. The counts
    /// (`retained`, `head_bytes`, `tail_bytes`) stay those of the stream's
    /// bytes that were kept; [`Captured::head`] and [`Captured::tail`] may be
    /// shorter after redaction.
    ///
    /// No allocation: the ring is rotated in place, redaction works in place,
    /// and the buffer moves into the result.
    #[must_use]
    pub fn finish(self) -> Captured {
        let Self {
            mut buf,
            head_cap,
            head_len,
            ring_start,
            ring_len,
            seen,
            pool_limited,
            redact,
            debug,
            grant,
        } = self;
        let ring = &mut buf[head_cap..];
        if ring_len == ring.len() {
            ring.rotate_left(ring_start);
        }
        // A partly filled ring never wrapped (start is 0), and a ring holds
        // bytes only once the head is full: so the retained bytes are the
        // prefix `head_len + ring_len` of the buffer, in stream order.
        buf.truncate(head_len + ring_len);
        let (mut shown_head, mut redactions) = (head_len, 0);
        if redact {
            // Each part alone: the bytes between them were dropped.
            let (h, hc) = crate::redact::redact_in_place(&mut buf[..head_len]);
            let (t, tc) = crate::redact::redact_in_place(&mut buf[head_len..]);
            buf.copy_within(head_len..head_len + t, h);
            buf.truncate(h + t);
            shown_head = h;
            redactions = hc + tc;
        }
        Captured {
            bytes: buf,
            head_len: shown_head,
            head_kept: head_len as u64,
            tail_kept: ring_len as u64,
            seen,
            pool_limited,
            redact,
            redactions,
            debug,
            grant,
        }
    }
}

/// What an [`OutputCapture`] kept of its stream, in stream order.
///
/// Owns the retained bytes (one vector: head, then tail) and, for a pooled
/// capture, the [`Grant`] that pays for them: give it back with
/// [`into_grant`](Self::into_grant) once the bytes are no longer needed.
///
/// Serializes as the [`CaptureSummary`] fields plus `head` and `tail`, each
/// decoded lossily.
pub struct Captured {
    /// Head then tail, after redaction.
    bytes: Vec<u8>,
    /// Length of the (redacted) head inside `bytes`.
    head_len: usize,
    /// Stream bytes kept in the head and in the tail (before redaction).
    head_kept: u64,
    tail_kept: u64,
    seen: u64,
    pool_limited: bool,
    redact: bool,
    redactions: u64,
    debug: Option<DebugMark>,
    grant: Option<Grant>,
}

impl fmt::Debug for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Captured")
            .field("summary", &self.summary())
            .finish_non_exhaustive()
    }
}

impl Serialize for Captured {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let summary = self.summary();
        let mut s = serializer.serialize_struct("Captured", 12)?;
        s.serialize_field("seen", &summary.seen)?;
        s.serialize_field("retained", &summary.retained)?;
        s.serialize_field("truncated", &summary.truncated)?;
        s.serialize_field("retained_part", &summary.retained_part)?;
        s.serialize_field("head_bytes", &summary.head_bytes)?;
        s.serialize_field("tail_bytes", &summary.tail_bytes)?;
        s.serialize_field("pool_limited", &summary.pool_limited)?;
        s.serialize_field("redaction", &summary.redaction)?;
        s.serialize_field("redactions", &summary.redactions)?;
        s.serialize_field("debug", &summary.debug)?;
        s.serialize_field("head", &String::from_utf8_lossy(self.head()))?;
        s.serialize_field("tail", &String::from_utf8_lossy(self.tail()))?;
        s.end()
    }
}

impl Captured {
    /// Bytes the stream carried in total.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Stream bytes kept (head and tail), counted before redaction: with
    /// redaction off, `head().len() + tail().len()`.
    pub fn retained(&self) -> u64 {
        self.head_kept + self.tail_kept
    }

    /// True iff bytes were dropped (`seen > retained`).
    pub fn truncated(&self) -> bool {
        self.seen > self.retained()
    }

    /// The first bytes of the stream (at most the head limit), redacted if
    /// redaction is on.
    pub fn head(&self) -> &[u8] {
        &self.bytes[..self.head_len]
    }

    /// The bytes kept after the head: the newest bytes of the stream,
    /// redacted if redaction is on. When nothing was dropped and nothing
    /// redacted, `head` followed by `tail` is the whole stream.
    pub fn tail(&self) -> &[u8] {
        &self.bytes[self.head_len..]
    }

    /// The counts, for call and session records.
    pub fn summary(&self) -> CaptureSummary {
        CaptureSummary {
            seen: self.seen,
            retained: self.retained(),
            truncated: self.truncated(),
            retained_part: RetainedPart::of(self.truncated(), self.head_kept, self.tail_kept),
            head_bytes: self.head_kept,
            tail_bytes: self.tail_kept,
            pool_limited: self.pool_limited,
            redaction: self.redact,
            redactions: self.redactions,
            debug: self.debug,
        }
    }

    /// The retained bytes as text, for a person or a log, decoded lossily.
    ///
    /// Nothing dropped: the text alone, no marker. Something dropped: first a
    /// marker line written by us, naming `stream`:
    ///
    /// - `[stderr truncated: kept last 16384 of 184320 bytes]`
    /// - `[stderr truncated: kept first 1024 and last 16384 of 184320 bytes]`,
    ///   then the head, a gap line `[… 166912 bytes omitted …]`, then the tail
    /// - `[stderr truncated: kept first 1024 of 184320 bytes]` (head only), or
    ///   `[stderr truncated: kept 0 of 184320 bytes]` (nothing kept).
    ///
    /// The counts are raw bytes. Up to three continuation bytes at the start of
    /// a truncated tail (a character cut by the ring boundary) become one
    /// U+FFFD; every other invalid sequence becomes U+FFFD as in
    /// [`String::from_utf8_lossy`]. The result is at most about three times
    /// the retained bytes (each invalid byte can become a 3-byte U+FFFD).
    #[must_use]
    pub fn render(&self, stream: &str) -> String {
        if !self.truncated() {
            return String::from_utf8_lossy(&self.bytes).into_owned();
        }
        // The counts are the stream's; the bytes may be shorter after redaction.
        let (head, tail) = (self.head(), self.tail());
        let marker = truncation_marker(stream, self.head_kept, self.tail_kept, self.seen);
        let mut raw = Vec::with_capacity(marker.len() + self.bytes.len() + 64);
        raw.extend_from_slice(marker.as_bytes());
        raw.push(b'\n');
        if self.head_kept > 0 {
            raw.extend_from_slice(head);
            if head.last() != Some(&b'\n') {
                raw.push(b'\n');
            }
            let omitted = self.seen - self.retained();
            raw.extend_from_slice(format!("[… {omitted} bytes omitted …]\n").as_bytes());
        }
        let cut = tail
            .iter()
            .take(3)
            .take_while(|&&b| is_continuation(b))
            .count();
        if cut > 0 {
            raw.extend_from_slice("\u{FFFD}".as_bytes());
        }
        raw.extend_from_slice(&tail[cut..]);
        // Our lines end in `\n`, never a continuation byte, so decoding the
        // whole buffer at once decodes each part as if alone.
        String::from_utf8(raw)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// The newest retained bytes as text for the agent's context, at most
    /// `max_bytes` long **including the marker**.
    ///
    /// - If nothing was dropped and the whole stream decodes (lossily) within
    ///   `max_bytes`, it is returned as is, with no marker.
    /// - Otherwise the result is a marker line
    ///   `[stderr truncated: kept last K of N bytes]` (K = raw bytes shown,
    ///   after redaction when it is on; N = bytes seen) followed by the
    ///   newest bytes that fit, decoded
    ///   lossily. The excerpt is drawn from the tail only (the head is for the
    ///   full [`render`](Self::render)); it starts on a character boundary:
    ///   continuation bytes at its start are skipped, never shown as U+FFFD.
    /// - If `max_bytes` cannot even hold the marker, the result is empty: an
    ///   excerpt without its marker would hide the truncation.
    ///
    /// The marker's room is reserved for its longest form, so the excerpt may
    /// fall a few bytes short of `max_bytes`; it never exceeds it.
    #[must_use]
    pub fn excerpt(&self, stream: &str, max_bytes: usize) -> String {
        let truncated = self.truncated();
        let segment = if truncated {
            self.tail()
        } else {
            &self.bytes[..]
        };
        if !truncated && lossy_len(segment) <= max_bytes {
            return String::from_utf8_lossy(segment).into_owned();
        }
        // K ≤ N, so the marker with K = N has the most digits.
        let marker_room = truncation_marker(stream, 0, self.seen, self.seen).len() + 1;
        let Some(budget) = max_bytes.checked_sub(marker_room) else {
            return String::new();
        };
        let shown = &segment[excerpt_start(segment, budget)..];
        let mut out = truncation_marker(stream, 0, shown.len() as u64, self.seen);
        out.push('\n');
        out.push_str(&String::from_utf8_lossy(shown));
        out
    }

    /// Drops the retained bytes and returns the grant that paid for them (for
    /// [`RetentionPool::release`]); `None` for a capture made with
    /// [`OutputCapture::new`].
    #[must_use]
    pub fn into_grant(self) -> Option<Grant> {
        self.grant
    }
}

/// The counts of one capture: what goes into call and session records.
///
/// A reader of the record can tell "the command printed this" from "we kept
/// the last part of what it printed".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CaptureSummary {
    /// Bytes the stream carried in total.
    pub seen: u64,
    /// Bytes kept (`head_bytes + tail_bytes`).
    pub retained: u64,
    /// True iff bytes were dropped (`seen > retained`).
    pub truncated: bool,
    /// Which part of the stream the retained bytes are: `all`, `head`,
    /// `tail`, `head_and_tail` or `nothing`, with the byte counts of each part
    /// in `head_bytes` and `tail_bytes`.
    #[serde(default)]
    pub retained_part: RetainedPart,
    /// Stream bytes kept from the start of the stream (before redaction).
    pub head_bytes: u64,
    /// Stream bytes kept after the head, the newest ones (before redaction).
    pub tail_bytes: u64,
    /// True if the retention pool granted less than the configured limits.
    pub pool_limited: bool,
    /// True if the retained bytes passed through the redactor.
    #[serde(default)]
    pub redaction: bool,
    /// Secrets the redactor replaced in the retained bytes.
    #[serde(default)]
    pub redactions: u64,
    /// The debug window the capture was built in, if any: its limits were
    /// multiplied.
    #[serde(default)]
    pub debug: Option<DebugMark>,
}

/// Which part of a stream a capture kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RetainedPart {
    /// Nothing was dropped: the retained bytes are the whole stream (also an
    /// empty one).
    #[default]
    All,
    /// Only the first bytes (a head limit, no tail room).
    Head,
    /// Only the newest bytes.
    Tail,
    /// The first bytes and the newest bytes, with a gap between them.
    HeadAndTail,
    /// Bytes were seen but none kept (no room at all).
    Nothing,
}

impl RetainedPart {
    fn of(truncated: bool, head: u64, tail: u64) -> Self {
        match (truncated, head > 0, tail > 0) {
            (false, _, _) => Self::All,
            (true, false, false) => Self::Nothing,
            (true, true, false) => Self::Head,
            (true, false, true) => Self::Tail,
            (true, true, true) => Self::HeadAndTail,
        }
    }
}

/// A debug window, as noted in every capture summary and call record made
/// while it was open: which window, how much larger the budgets were, and
/// when it opened and closes (ms since the Unix epoch, caller's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DebugMark {
    /// The window's number within its [`DebugMode`], from 1.
    pub window: u64,
    /// The factor applied to the head and tail limits (1 to
    /// [`MAX_DEBUG_MULTIPLIER`]).
    pub multiplier: u32,
    /// When the window opened.
    pub opened_unix_ms: u64,
    /// When it closes by itself.
    pub closes_unix_ms: u64,
}

/// Why [`DebugMode::open`] refused a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DebugModeError {
    /// The duration is zero or longer than [`MAX_DEBUG_WINDOW`].
    #[error("debug window of {requested:?} refused: it must be above zero and at most {max:?}")]
    DurationOutOfRange {
        /// What was asked.
        requested: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// The multiplier is below 1 or above [`MAX_DEBUG_MULTIPLIER`].
    #[error("debug budget multiplier {requested} refused: it must be 1 to {max}")]
    MultiplierOutOfRange {
        /// What was asked.
        requested: u32,
        /// The largest accepted.
        max: u32,
    },
    /// A window is open already; close it first (a window cannot be
    /// extended, so it always ends within [`MAX_DEBUG_WINDOW`]).
    #[error("debug window {} is open already", .open.window)]
    AlreadyOpen {
        /// The open window.
        open: DebugMark,
    },
}

/// A controlled debug mode: a short window with higher capture budgets,
/// instead of a global `quiet`/`verbose` switch (G10).
///
/// Off by default. [`open`](Self::open) starts one window, bounded in time
/// ([`MAX_DEBUG_WINDOW`]) and in budget ([`MAX_DEBUG_MULTIPLIER`]); it closes
/// by itself at its end (or earlier by [`close`](Self::close)) and cannot be
/// extended. While it is open, [`apply`](Self::apply) gives a capture config
/// multiplied budgets and the window's [`DebugMark`], which lands in the
/// capture summary and in the call record (`debug`), so anyone reading a
/// record later knows the call ran with more diagnostics than usual.
///
/// A call takes the mode in force when its captures are configured (at its
/// start): a window that opens or closes during the call changes nothing for
/// it. Sans-IO like the rest of the crate: time is an argument, and
/// [`poll_timeout`](Self::poll_timeout) / [`handle_timeout`](Self::handle_timeout)
/// close the window on time. A few words of state, no allocation.
///
/// ```
/// use std::time::{Duration, Instant};
/// use mcp_stdio_core::call::Stamp;
/// use mcp_stdio_core::capture::{CaptureConfig, DebugMode};
///
/// let now = Stamp::new(Instant::now(), 1_700_000_000_000);
/// let mut debug = DebugMode::default();
/// let mark = debug.open(now, Duration::from_secs(300), 4).expect("within limits");
/// let config = debug.apply(now.instant, &CaptureConfig::default());
/// assert_eq!(config.get_debug(), Some(mark));
/// assert_eq!(config.effective_tail(), 4 * 16 * 1024);
/// ```
#[derive(Debug, Clone, Default)]
pub struct DebugMode {
    open: Option<(DebugMark, Instant)>,
    windows: u64,
}

impl DebugMode {
    /// Opens a window of `duration` (above zero, at most
    /// [`MAX_DEBUG_WINDOW`]) during which capture limits are multiplied by
    /// `multiplier` (1 to [`MAX_DEBUG_MULTIPLIER`]). Refused with a typed
    /// error outside those limits or while a window is open.
    pub fn open(
        &mut self,
        at: Stamp,
        duration: Duration,
        multiplier: u32,
    ) -> Result<DebugMark, DebugModeError> {
        self.handle_timeout(at.instant);
        if let Some((open, _)) = self.open {
            return Err(DebugModeError::AlreadyOpen { open });
        }
        if duration.is_zero() || duration > MAX_DEBUG_WINDOW {
            return Err(DebugModeError::DurationOutOfRange {
                requested: duration,
                max: MAX_DEBUG_WINDOW,
            });
        }
        if !(1..=MAX_DEBUG_MULTIPLIER).contains(&multiplier) {
            return Err(DebugModeError::MultiplierOutOfRange {
                requested: multiplier,
                max: MAX_DEBUG_MULTIPLIER,
            });
        }
        // At most 15 minutes ahead: representable wherever `at` is.
        let until = at.instant.checked_add(duration).unwrap_or(at.instant);
        self.windows += 1;
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let mark = DebugMark {
            window: self.windows,
            multiplier,
            opened_unix_ms: at.unix_ms,
            closes_unix_ms: at.unix_ms.saturating_add(ms),
        };
        self.open = Some((mark, until));
        tracing::info!(
            window = mark.window,
            multiplier,
            ?duration,
            "debug window opened"
        );
        Ok(mark)
    }

    /// Closes the open window early; returns it, or `None` if none was open.
    pub fn close(&mut self) -> Option<DebugMark> {
        let closed = self.open.take().map(|(mark, _)| mark);
        if let Some(mark) = closed {
            tracing::info!(window = mark.window, "debug window closed");
        }
        closed
    }

    /// The open window at `now`, if any (one that has reached its end is
    /// not active even before [`handle_timeout`](Self::handle_timeout)).
    pub fn active(&self, now: Instant) -> Option<DebugMark> {
        self.open
            .filter(|(_, until)| now < *until)
            .map(|(mark, _)| mark)
    }

    /// `config` as a capture started at `now` must use: with the open
    /// window's mark (multiplied limits), or unmarked outside any window.
    #[must_use]
    pub fn apply(&self, now: Instant, config: &CaptureConfig) -> CaptureConfig {
        let mut config = config.clone();
        config.debug(self.active(now));
        config
    }

    /// Time has reached `now`: a window at its end closes.
    pub fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.open, Some((_, until)) if now >= until) {
            self.close();
        }
    }

    /// When the open window ends.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.open.map(|(_, until)| until)
    }

    /// Windows opened so far.
    pub fn windows_opened(&self) -> u64 {
        self.windows
    }
}

/// The limits of the process-wide [`RetentionPool`] (the per-process budget of G10).
///
/// The pool is split in two: a general part (`limit - reserve`) served first
/// come, first served, and a reserve from which a capture that got less than
/// `min_grant` from the general part is topped up to `min_grant`. With the
/// defaults, 14 captures of 16 KiB take the general part and 64 more still get
/// 512 bytes each, so the 51st concurrent capture still keeps its last lines.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    limit: usize,
    reserve: usize,
    min_grant: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            limit: DEFAULT_POOL_LIMIT,
            reserve: DEFAULT_POOL_RESERVE,
            min_grant: DEFAULT_MIN_GRANT,
        }
    }
}

impl PoolConfig {
    /// Sets the most bytes all live pooled captures may retain together
    /// (default [`DEFAULT_POOL_LIMIT`], 256 KiB).
    ///
    /// Memory: at every instant the bytes granted to live captures, and so the
    /// stream data they hold, sum to at most `limit`. The pool itself is a few
    /// counters.
    pub fn limit(&mut self, bytes: usize) -> &mut Self {
        self.limit = bytes;
        self
    }

    /// Sets the part of `limit` held back for per-capture minimums (default
    /// [`DEFAULT_POOL_RESERVE`], 32 KiB). Clamped to `limit`. Zero disables
    /// minimums: the pool is then plain first come, first served.
    ///
    /// Memory: part of `limit`, never in addition to it.
    pub fn reserve(&mut self, bytes: usize) -> &mut Self {
        self.reserve = bytes;
        self
    }

    /// Sets the minimum a capture is topped up to from the reserve while the
    /// reserve lasts (default [`DEFAULT_MIN_GRANT`], 512 bytes); never more
    /// than the capture asked for.
    ///
    /// Memory: none of its own; the reserve bounds it.
    pub fn min_grant(&mut self, bytes: usize) -> &mut Self {
        self.min_grant = bytes;
        self
    }

    /// The pool limit.
    pub fn get_limit(&self) -> usize {
        self.limit
    }

    /// The reserve, as configured (the pool clamps it to the limit).
    pub fn get_reserve(&self) -> usize {
        self.reserve
    }

    /// The per-capture minimum.
    pub fn get_min_grant(&self) -> usize {
        self.min_grant
    }
}

/// An allowance of retained bytes handed out by a [`RetentionPool`].
///
/// Not `Clone`: [`RetentionPool::release`] consumes it, so it cannot be
/// released twice. Give it to [`OutputCapture::with_grant`], get it back from
/// [`Captured::into_grant`], release it to the pool that issued it.
#[must_use = "a grant keeps its bytes counted as in use until released"]
pub struct Grant {
    wanted: usize,
    general: usize,
    reserved: usize,
    released: bool,
    /// The shared pool that issued it, if any: a grant dropped unreleased
    /// (a run abandoned mid-way) gives its bytes back there.
    home: Option<std::sync::Weak<std::sync::Mutex<RetentionPool>>>,
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("wanted", &self.wanted)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Grant {
    /// Bytes granted (at most what was asked for; maybe 0).
    pub fn bytes(&self) -> usize {
        self.general + self.reserved
    }

    /// Bytes asked for.
    pub fn wanted(&self) -> usize {
        self.wanted
    }

    /// True if the pool granted less than asked.
    pub fn is_short(&self) -> bool {
        self.bytes() < self.wanted
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(pool) = self.home.take().and_then(|w| w.upgrade()) {
            // A lock, not a task: safe in `Drop`. Move the bytes into a
            // fresh grant so `release` does the bookkeeping once.
            let back = Self {
                wanted: self.wanted,
                general: self.general,
                reserved: self.reserved,
                released: false,
                home: None,
            };
            self.released = true;
            let mut pool = pool
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = pool.release(back);
            return;
        }
        if self.bytes() > 0 {
            tracing::warn!(
                bytes = self.bytes(),
                "retention grant dropped without release; its bytes stay counted as in use"
            );
        }
    }
}

/// Releasing a grant failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// The grant holds more than this pool has handed out: it came from another pool.
    #[error("grant of {bytes} bytes was not issued by this pool")]
    ForeignGrant {
        /// Bytes the grant held.
        bytes: usize,
    },
}

/// Counters of a [`RetentionPool`], for metrics and session records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoolStats {
    /// The pool limit.
    pub limit: u64,
    /// Bytes granted to live captures now.
    pub in_use: u64,
    /// Highest `in_use` ever.
    pub peak: u64,
    /// Grants handed out and not yet released.
    pub outstanding: u64,
    /// Grants handed out in total.
    pub grants: u64,
    /// Grants smaller than asked (including empty ones).
    pub short_grants: u64,
    /// Grants of 0 bytes for a non-zero request.
    pub empty_grants: u64,
}

/// The process-wide budget of all concurrent captures (G10).
///
/// Invariant: at every instant the bytes granted to unreleased grants, and so
/// the bytes retained by live pooled captures, sum to at most
/// [`limit`](Self::limit). A request is granted what is free, possibly less
/// than asked or nothing (see [`PoolConfig`] for the reserve that serves
/// per-capture minimums); it is never refused with an error, because a capture
/// with no allowance still counts its stream and says so.
///
/// Pure bookkeeping: share it behind a `Mutex` in the adapters.
#[derive(Debug)]
pub struct RetentionPool {
    config: PoolConfig,
    general_limit: usize,
    reserve_limit: usize,
    general_in_use: usize,
    reserve_in_use: usize,
    peak: usize,
    outstanding: u64,
    grants: u64,
    short_grants: u64,
    empty_grants: u64,
}

impl Default for RetentionPool {
    fn default() -> Self {
        Self::new(&PoolConfig::default())
    }
}

impl RetentionPool {
    /// An empty pool with the given limits.
    pub fn new(config: &PoolConfig) -> Self {
        let reserve_limit = min(config.reserve, config.limit);
        Self {
            config: config.clone(),
            general_limit: config.limit - reserve_limit,
            reserve_limit,
            general_in_use: 0,
            reserve_in_use: 0,
            peak: 0,
            outstanding: 0,
            grants: 0,
            short_grants: 0,
            empty_grants: 0,
        }
    }

    /// Grants up to `wanted` bytes: as much as the general part has free, then,
    /// if that is below `min(min_grant, wanted)`, a top-up from the reserve
    /// while it lasts. Never more than `wanted`; possibly 0.
    pub fn grant(&mut self, wanted: usize) -> Grant {
        let general = min(wanted, self.general_limit - self.general_in_use);
        let floor = min(self.config.min_grant, wanted);
        let reserved = if general < floor {
            min(floor - general, self.reserve_limit - self.reserve_in_use)
        } else {
            0
        };
        self.general_in_use += general;
        self.reserve_in_use += reserved;
        self.peak = self.peak.max(self.in_use());
        self.outstanding += 1;
        self.grants += 1;
        let grant = Grant {
            wanted,
            general,
            reserved,
            released: false,
            home: None,
        };
        if grant.is_short() {
            self.short_grants += 1;
            if grant.bytes() == 0 {
                self.empty_grants += 1;
            }
            tracing::debug!(
                wanted,
                granted = grant.bytes(),
                "retention pool grant cut short"
            );
        }
        grant
    }

    /// Gives a grant's bytes back; returns how many.
    ///
    /// A grant from another pool is detected when it holds more than this
    /// pool has out, and refused with [`ReleaseError::ForeignGrant`] (nothing
    /// changes); one that happens to fit cannot be told apart, so keep one
    /// pool per budget.
    pub fn release(&mut self, mut grant: Grant) -> Result<usize, ReleaseError> {
        // Consumed either way: a foreign grant must not warn on drop either.
        grant.released = true;
        if self.outstanding == 0
            || grant.general > self.general_in_use
            || grant.reserved > self.reserve_in_use
        {
            return Err(ReleaseError::ForeignGrant {
                bytes: grant.bytes(),
            });
        }
        self.general_in_use -= grant.general;
        self.reserve_in_use -= grant.reserved;
        self.outstanding -= 1;
        Ok(grant.bytes())
    }

    /// Bytes granted to unreleased grants.
    pub fn in_use(&self) -> usize {
        self.general_in_use + self.reserve_in_use
    }

    /// Bytes not granted (`limit - in_use`).
    pub fn free(&self) -> usize {
        self.limit() - self.in_use()
    }

    /// Highest `in_use` ever.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// The pool limit.
    pub fn limit(&self) -> usize {
        self.general_limit + self.reserve_limit
    }

    /// Grants handed out and not yet released.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// Grants smaller than asked (including empty ones).
    pub fn short_grants(&self) -> u64 {
        self.short_grants
    }

    /// Grants of 0 bytes for a non-zero request.
    pub fn empty_grants(&self) -> u64 {
        self.empty_grants
    }

    /// The config the pool was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// All counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            limit: self.limit() as u64,
            in_use: self.in_use() as u64,
            peak: self.peak as u64,
            outstanding: self.outstanding,
            grants: self.grants,
            short_grants: self.short_grants,
            empty_grants: self.empty_grants,
        }
    }
}

/// The marker line (without its newline). Written by us, never by the stream.
fn truncation_marker(stream: &str, head: u64, tail: u64, seen: u64) -> String {
    match (head, tail) {
        (0, 0) => format!("[{stream} truncated: kept 0 of {seen} bytes]"),
        (0, t) => format!("[{stream} truncated: kept last {t} of {seen} bytes]"),
        (h, 0) => format!("[{stream} truncated: kept first {h} of {seen} bytes]"),
        (h, t) => format!("[{stream} truncated: kept first {h} and last {t} of {seen} bytes]"),
    }
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// Length of `String::from_utf8_lossy(bytes)` without building it.
fn lossy_len(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|chunk| {
            let replacement = if chunk.invalid().is_empty() { 0 } else { 3 };
            chunk.valid().len() + replacement
        })
        .sum()
}

/// Start of the longest suffix of `segment` that begins on a non-continuation
/// byte and decodes (lossily) to at most `budget` bytes.
///
/// Lossy decoding never carries a sequence across a non-continuation byte, so
/// the decoded length of a suffix is the sum over its units (a
/// non-continuation byte and the continuation bytes after it). Each byte is
/// looked at once: O(bytes scanned).
fn excerpt_start(segment: &[u8], budget: usize) -> usize {
    let mut start = segment.len();
    let mut used = 0;
    let mut at = segment.len();
    while at > 0 {
        at -= 1;
        if is_continuation(segment[at]) {
            continue;
        }
        let unit = lossy_len(&segment[at..start]);
        if used + unit > budget {
            break;
        }
        used += unit;
        start = at;
    }
    start
}

/// Checks a finished capture against the whole input it was fed; panics on any
/// difference (the fuzzer's and the tests' oracle).
#[cfg(any(test, feature = "fuzzing"))]
fn check_captured(captured: &Captured, input: &[u8], head_limit: usize, tail_limit: usize) {
    let n = input.len();
    let head = min(head_limit, n);
    let tail = min(tail_limit, n - head);
    assert_eq!(captured.seen(), n as u64, "seen counts every byte");
    assert_eq!(captured.retained(), (head + tail) as u64);
    assert_eq!(captured.truncated(), n > head + tail);
    let summary = captured.summary();
    assert_eq!(summary.retained, summary.head_bytes + summary.tail_bytes);
    assert_eq!(
        (summary.head_bytes, summary.tail_bytes),
        (head as u64, tail as u64)
    );
    assert_eq!(
        summary.retained_part,
        RetainedPart::of(n > head + tail, head as u64, tail as u64)
    );
    if summary.redaction {
        check_redacted(captured, &input[..head], &input[n - tail..]);
        return;
    }
    assert_eq!(summary.redactions, 0);
    assert_eq!(captured.head(), &input[..head], "head is the prefix");
    assert_eq!(captured.tail(), &input[n - tail..], "tail is the suffix");
    let rendered = captured.render("stderr");
    if captured.truncated() {
        assert!(
            rendered.starts_with("[stderr truncated: kept "),
            "marker first"
        );
    } else {
        assert_eq!(
            rendered,
            String::from_utf8_lossy(input),
            "no marker when complete"
        );
    }
    for max in [0, 1, 40, 60, 64, 100, 300, 5000] {
        check_excerpt(captured, input, max);
    }
}

/// With redaction on: each part is its raw bytes redacted alone, the views
/// show only those, and excerpts stay within their bound.
#[cfg(any(test, feature = "fuzzing"))]
fn check_redacted(captured: &Captured, raw_head: &[u8], raw_tail: &[u8]) {
    let mut head = raw_head.to_vec();
    let (h, hc) = crate::redact::redact_in_place(&mut head);
    head.truncate(h);
    let mut tail = raw_tail.to_vec();
    let (t, tc) = crate::redact::redact_in_place(&mut tail);
    tail.truncate(t);
    assert_eq!(captured.head(), &head[..], "head is the redacted prefix");
    assert_eq!(captured.tail(), &tail[..], "tail is the redacted suffix");
    assert_eq!(captured.summary().redactions, hc + tc);
    let visible = [&head[..], &tail[..]].concat();
    let rendered = captured.render("stderr");
    if !captured.truncated() {
        assert_eq!(rendered, String::from_utf8_lossy(&visible));
    }
    for max in [0, 1, 40, 60, 64, 100, 300, 5000] {
        let excerpt = captured.excerpt("stderr", max);
        assert!(excerpt.len() <= max, "excerpt {} > {max}", excerpt.len());
        if !captured.truncated() && lossy_len(&visible) <= max {
            assert_eq!(excerpt, String::from_utf8_lossy(&visible));
        }
    }
}

/// Checks one excerpt: within `max`, a suffix of the input from a character
/// start, marked iff anything is missing.
#[cfg(any(test, feature = "fuzzing"))]
fn check_excerpt(captured: &Captured, input: &[u8], max: usize) {
    let excerpt = captured.excerpt("stderr", max);
    assert!(excerpt.len() <= max, "excerpt {} > {max}", excerpt.len());
    // Decided from the state, not the text: the stream may mimic our marker.
    let marked = captured.truncated() || lossy_len(input) > max;
    if !marked {
        assert_eq!(
            excerpt,
            String::from_utf8_lossy(input),
            "complete and fits: as is"
        );
        return;
    }
    if excerpt.is_empty() {
        // Only when the marker itself does not fit.
        let marker = truncation_marker("stderr", 0, input.len() as u64, input.len() as u64);
        assert!(
            max <= marker.len(),
            "empty excerpt although the marker fits"
        );
        return;
    }
    let rest = excerpt
        .strip_prefix("[stderr truncated: kept ")
        .expect("a marked excerpt starts with the marker");
    let (line, body) = rest
        .split_once('\n')
        .expect("marker line ends in a newline");
    let shown: usize = line
        .strip_prefix("last ")
        .unwrap_or(line)
        .split(' ')
        .next()
        .and_then(|k| k.parse().ok())
        .expect("marker holds the shown byte count");
    assert!(shown < input.len(), "marker only when bytes are missing");
    let suffix = &input[input.len() - shown..];
    assert!(
        suffix.first().is_none_or(|&b| !is_continuation(b)),
        "char boundary"
    );
    assert_eq!(
        body,
        String::from_utf8_lossy(suffix),
        "body is the shown suffix"
    );
}

/// Fuzz entry point: arbitrary pool limits, captures with arbitrary limits
/// (zero included), pooled or not, fed arbitrary chunks, finished and released
/// in arbitrary order. Panics on any broken invariant.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_capture(data: &[u8]) {
    let mut u = arbitrary::Unstructured::new(data);
    // Running out of fuzz data just ends the run.
    let _ = fuzz_run(&mut u);
}

#[cfg(feature = "fuzzing")]
struct FuzzCapture {
    capture: OutputCapture,
    input: Vec<u8>,
    granted: Option<usize>,
}

#[cfg(feature = "fuzzing")]
fn fuzz_run(u: &mut arbitrary::Unstructured<'_>) -> arbitrary::Result<()> {
    const MAX_LIMIT: usize = 512;
    const MAX_LIVE: usize = 32;
    let mut config = PoolConfig::default();
    config
        .limit(u.int_in_range(0..=4 * MAX_LIMIT)?)
        .reserve(u.int_in_range(0..=2 * MAX_LIMIT)?)
        .min_grant(u.int_in_range(0..=MAX_LIMIT)?);
    let mut pool = RetentionPool::new(&config);
    let mut live: Vec<FuzzCapture> = Vec::new();
    while !u.is_empty() {
        match u.int_in_range(0..=3u8)? {
            0 if live.len() < MAX_LIVE => {
                let mut limits = CaptureConfig::default();
                limits
                    .head(u.int_in_range(0..=MAX_LIMIT)?)
                    .tail(u.int_in_range(0..=MAX_LIMIT)?)
                    .redact(u.arbitrary::<bool>()?);
                let (capture, granted) = if u.arbitrary::<bool>()? {
                    let before = pool.in_use();
                    let grant = pool.grant(limits.wanted());
                    let bytes = grant.bytes();
                    assert!(bytes <= limits.wanted(), "never more than asked");
                    assert_eq!(pool.in_use(), before + bytes);
                    (OutputCapture::with_grant(&limits, grant), Some(bytes))
                } else {
                    (OutputCapture::new(&limits), None)
                };
                let allowed = granted.unwrap_or(limits.wanted());
                assert!(capture.head_limit() + capture.tail_limit() <= allowed);
                assert!(capture.head_limit() <= limits.get_head());
                assert!(capture.tail_limit() <= limits.get_tail());
                live.push(FuzzCapture {
                    capture,
                    input: Vec::new(),
                    granted,
                });
            }
            1 if !live.is_empty() => {
                let index = u.choose_index(live.len())?;
                let len = u.int_in_range(0..=3 * MAX_LIMIT)?;
                let chunk = u.bytes(min(len, u.len()))?;
                let entry = &mut live[index];
                entry.capture.push(chunk);
                entry.input.extend_from_slice(chunk);
                assert_eq!(entry.capture.seen(), entry.input.len() as u64);
            }
            2 if !live.is_empty() => {
                let index = u.choose_index(live.len())?;
                let max = u.int_in_range(0..=4 * MAX_LIMIT)?;
                let entry = live.swap_remove(index);
                fuzz_finish(&mut pool, entry, max);
            }
            _ => {}
        }
        fuzz_check_pool(&pool, &live);
    }
    for entry in live {
        fuzz_finish(&mut pool, entry, MAX_LIMIT);
    }
    assert_eq!(pool.in_use(), 0, "every byte came back");
    assert_eq!(pool.outstanding(), 0);
    Ok(())
}

#[cfg(feature = "fuzzing")]
fn fuzz_finish(pool: &mut RetentionPool, entry: FuzzCapture, max_excerpt: usize) {
    let (head, tail) = (entry.capture.head_limit(), entry.capture.tail_limit());
    let captured = entry.capture.finish();
    check_captured(&captured, &entry.input, head, tail);
    if !captured.summary().redaction {
        check_excerpt(&captured, &entry.input, max_excerpt);
    }
    match (captured.into_grant(), entry.granted) {
        (Some(grant), Some(bytes)) => {
            let before = pool.in_use();
            assert_eq!(pool.release(grant), Ok(bytes));
            assert_eq!(pool.in_use(), before - bytes);
        }
        (None, None) => {}
        _ => panic!("a capture's grant must come back with it"),
    }
}

#[cfg(feature = "fuzzing")]
fn fuzz_check_pool(pool: &RetentionPool, live: &[FuzzCapture]) {
    assert!(pool.in_use() <= pool.limit(), "pool over its limit");
    assert!(pool.peak() <= pool.limit());
    let granted: usize = live.iter().filter_map(|e| e.granted).sum();
    assert_eq!(granted, pool.in_use(), "in_use is the sum of live grants");
    let retained: u64 = live
        .iter()
        .filter(|e| e.granted.is_some())
        .map(|e| e.capture.retained())
        .sum();
    assert!(retained <= pool.in_use() as u64, "retained within grants");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Tiny deterministic generator (xorshift64), so tests need no extra crates.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Raw bytes only: these tests compare the kept bytes with the input.
    fn tail_config(tail: usize) -> CaptureConfig {
        let mut config = CaptureConfig::default();
        config.tail(tail).redact(false);
        config
    }

    fn captured(config: &CaptureConfig, chunks: &[&[u8]]) -> Captured {
        let mut capture = OutputCapture::new(config);
        for chunk in chunks {
            capture.push(chunk);
        }
        capture.finish()
    }

    fn numbered(len: usize) -> Vec<u8> {
        (0..len).map(|i| b'a' + (i % 26) as u8).collect()
    }

    #[test]
    fn g10_marker_exact_text_tail_only() {
        let input = numbered(184_320);
        let c = captured(&CaptureConfig::default(), &[&input]);
        let rendered = c.render("stderr");
        let (marker, body) = rendered.split_once('\n').expect("marker line");
        assert_eq!(
            marker,
            "[stderr truncated: kept last 16384 of 184320 bytes]"
        );
        assert_eq!(body.as_bytes(), &input[184_320 - 16_384..]);
        let summary = c.summary();
        assert_eq!(
            (summary.seen, summary.retained, summary.truncated),
            (184_320, 16_384, true)
        );
    }

    #[test]
    fn g10_marker_exact_text_with_head_and_gap_line() {
        let mut input = numbered(184_320);
        input[1023] = b'\n';
        let mut config = CaptureConfig::default();
        config.head(1024);
        let c = captured(&config, &[&input[..5000], &input[5000..]]);
        let rendered = c.render("stderr");
        let mut lines = rendered.splitn(2, '\n');
        assert_eq!(
            lines.next(),
            Some("[stderr truncated: kept first 1024 and last 16384 of 184320 bytes]")
        );
        let rest = lines.next().expect("content");
        let head = std::str::from_utf8(&input[..1024]).expect("ascii");
        let tail = std::str::from_utf8(&input[184_320 - 16_384..]).expect("ascii");
        assert_eq!(rest, format!("{head}[… 166912 bytes omitted …]\n{tail}"));
    }

    #[test]
    fn g10_marker_names_the_stream() {
        let c = captured(&tail_config(4), &[b"0123456789"]);
        assert_eq!(
            c.render("stdout"),
            "[stdout truncated: kept last 4 of 10 bytes]\n6789"
        );
    }

    #[test]
    fn g10_no_marker_when_nothing_dropped() {
        let mut config = CaptureConfig::default();
        config.head(4).tail(6);
        let c = captured(&config, &[b"hello", b" worl"]);
        assert!(!c.truncated());
        assert_eq!((c.head(), c.tail()), (&b"hell"[..], &b"o worl"[..]));
        assert_eq!(c.render("stderr"), "hello worl");
        let c = captured(&config, &[b"hello", b" world!"]);
        assert!(c.truncated());
        assert_eq!(
            c.render("stderr"),
            "[stderr truncated: kept first 4 and last 6 of 12 bytes]\nhell\n[… 2 bytes omitted …]\nworld!"
        );
    }

    #[test]
    fn g10_tail_keeps_newest_bytes() {
        let input = numbered(1000);
        let mut capture = OutputCapture::new(&tail_config(100));
        for chunk in input.chunks(7) {
            capture.push(chunk);
        }
        let c = capture.finish();
        assert_eq!(c.tail(), &input[900..]);
        assert_eq!(c.seen(), 1000);
    }

    #[test]
    fn g10_chunk_larger_than_ring_keeps_its_last_bytes() {
        let c = captured(&tail_config(4), &[b"ab", b"0123456789", b"x"]);
        assert_eq!(c.tail(), b"789x");
        assert_eq!(c.seen(), 13);
    }

    #[test]
    fn g10_push_never_allocates_after_construction() {
        let mut config = CaptureConfig::default();
        config.head(10).tail(100);
        let mut capture = OutputCapture::new(&config);
        let (ptr, cap) = (capture.buf.as_ptr(), capture.buf.capacity());
        let mut rng = XorShift(7);
        for _ in 0..500 {
            let len = rng.below(300);
            capture.push(&numbered(len));
            assert_eq!((capture.buf.as_ptr(), capture.buf.capacity()), (ptr, cap));
            assert!(capture.retained() <= 110);
        }
        let c = capture.finish();
        assert_eq!((c.bytes.as_ptr(), c.bytes.capacity()), (ptr, cap));
    }

    #[test]
    fn g10_zero_limits_keep_nothing_but_count() {
        let mut config = CaptureConfig::default();
        config.head(0).tail(0);
        let c = captured(&config, &[b"abc", b"", b"defgh"]);
        assert_eq!((c.seen(), c.retained(), c.truncated()), (8, 0, true));
        assert!(c.head().is_empty() && c.tail().is_empty());
        assert_eq!(
            c.render("stderr"),
            "[stderr truncated: kept 0 of 8 bytes]\n"
        );
        assert_eq!(
            c.excerpt("stderr", 100),
            "[stderr truncated: kept 0 of 8 bytes]\n"
        );
        let empty = captured(&config, &[]);
        assert_eq!((empty.seen(), empty.truncated()), (0, false));
        assert_eq!(empty.render("stderr"), "");
    }

    #[test]
    fn g10_head_only_capture_shows_gap_at_the_end() {
        let mut config = CaptureConfig::default();
        config.head(3).tail(0);
        let c = captured(&config, &[b"abcdef"]);
        assert_eq!(
            c.render("stderr"),
            "[stderr truncated: kept first 3 of 6 bytes]\nabc\n[… 3 bytes omitted …]\n"
        );
    }

    #[test]
    fn g10_invalid_utf8_is_decoded_lossily() {
        let c = captured(
            &tail_config(64),
            &[b"ok \xff\xfe bad \xc3", b"\xa9 \xe2\x82"],
        );
        assert_eq!(c.render("stderr"), "ok \u{FFFD}\u{FFFD} bad é \u{FFFD}");
        assert_eq!(
            c.excerpt("stderr", 64),
            "ok \u{FFFD}\u{FFFD} bad é \u{FFFD}"
        );
    }

    #[test]
    fn g10_char_cut_by_ring_boundary_becomes_one_replacement() {
        // "€" is E2 82 AC; the ring keeps its last two bytes.
        let c = captured(&tail_config(4), &["x€ab".as_bytes()]);
        assert_eq!(c.tail(), b"\x82\xacab");
        assert_eq!(
            c.render("stderr"),
            "[stderr truncated: kept last 4 of 6 bytes]\n\u{FFFD}ab"
        );
        // The excerpt starts on a character boundary instead.
        assert_eq!(
            c.excerpt("stderr", 100),
            "[stderr truncated: kept last 2 of 6 bytes]\nab"
        );
    }

    #[test]
    fn g10_line_longer_than_limit_keeps_its_end() {
        let mut line = vec![b'x'; 100_000];
        line.extend_from_slice(b" the error\n");
        let c = captured(&tail_config(32), &[b"first line\n", &line]);
        assert_eq!(c.seen(), 100_022);
        assert!(c.tail().ends_with(b"x the error\n"));
        assert_eq!(c.tail().len(), 32);
        assert!(c
            .render("stderr")
            .starts_with("[stderr truncated: kept last 32 of 100022 bytes]\n"));
    }

    #[test]
    fn g10_excerpt_counts_marker_against_max_bytes() {
        let input = numbered(10_000);
        let c = captured(&CaptureConfig::default(), &[&input]);
        let excerpt = c.excerpt("stderr", 200);
        assert!(excerpt.len() <= 200);
        let (marker, body) = excerpt.split_once('\n').expect("marker");
        assert_eq!(
            marker,
            format!(
                "[stderr truncated: kept last {} of 10000 bytes]",
                body.len()
            )
        );
        assert!(body.len() >= 200 - 60, "uses most of the room");
        assert_eq!(body.as_bytes(), &input[10_000 - body.len()..]);
        // Too small for the marker: nothing rather than an unmarked excerpt.
        assert_eq!(c.excerpt("stderr", 20), "");
        // Complete and small enough: as is.
        let small = captured(&CaptureConfig::default(), &[b"short"]);
        assert_eq!(small.excerpt("stderr", 5), "short");
        assert_eq!(small.excerpt("stderr", 4), "");
    }

    #[test]
    fn g10_excerpt_marks_bytes_it_drops_from_a_complete_capture() {
        let input = numbered(100);
        let c = captured(&CaptureConfig::default(), &[&input]);
        assert!(!c.truncated());
        let excerpt = c.excerpt("stderr", 80);
        let (marker, body) = excerpt.split_once('\n').expect("marker");
        assert_eq!(
            marker,
            format!("[stderr truncated: kept last {} of 100 bytes]", body.len())
        );
        check_excerpt(&c, &input, 80);
    }

    #[test]
    fn g10_summary_and_capture_serialize() {
        let c = captured(&tail_config(3), &[b"abcde"]);
        let value = serde_json::to_value(c.summary()).expect("serializable");
        assert_eq!(
            value,
            serde_json::json!({"seen": 5, "retained": 3, "truncated": true,
                "retained_part": "tail", "head_bytes": 0, "tail_bytes": 3,
                "pool_limited": false, "redaction": false, "redactions": 0,
                "debug": null})
        );
        // Older summaries (before these fields) still read.
        let old: CaptureSummary = serde_json::from_value(serde_json::json!({"seen": 5,
            "retained": 3, "truncated": true, "head_bytes": 0, "tail_bytes": 3,
            "pool_limited": false}))
        .expect("readable");
        assert_eq!((old.retained, old.redactions, old.debug), (3, 0, None));
        let back: CaptureSummary = serde_json::from_value(value).expect("round trip");
        assert_eq!(back, c.summary());
        let value = serde_json::to_value(&c).expect("serializable");
        assert_eq!(value["tail"], "cde");
        assert_eq!(value["seen"], 5);
    }

    #[test]
    fn g10_summary_says_which_part_was_retained_with_byte_counts() {
        let cases: [(usize, usize, usize, RetainedPart, u64, u64); 6] = [
            (0, 16, 10, RetainedPart::All, 0, 10),
            (4, 16, 10, RetainedPart::All, 4, 6),
            (0, 8, 100, RetainedPart::Tail, 0, 8),
            (8, 0, 100, RetainedPart::Head, 8, 0),
            (4, 8, 100, RetainedPart::HeadAndTail, 4, 8),
            (0, 0, 100, RetainedPart::Nothing, 0, 0),
        ];
        for (head, tail, len, part, head_bytes, tail_bytes) in cases {
            let mut config = CaptureConfig::default();
            config.head(head).tail(tail);
            let c = captured(&config, &[&numbered(len)]);
            let summary = c.summary();
            assert_eq!(
                (
                    summary.retained_part,
                    summary.head_bytes,
                    summary.tail_bytes
                ),
                (part, head_bytes, tail_bytes),
                "head {head} tail {tail} len {len}"
            );
            let json = serde_json::to_value(summary).expect("serializable");
            assert_eq!(
                json["retained_part"],
                serde_json::to_value(part).expect("enum")
            );
        }
        let names: Vec<String> = [
            RetainedPart::All,
            RetainedPart::Head,
            RetainedPart::Tail,
            RetainedPart::HeadAndTail,
            RetainedPart::Nothing,
        ]
        .iter()
        .map(|p| serde_json::to_value(p).expect("enum").to_string())
        .collect();
        assert_eq!(
            names,
            [
                "\"all\"",
                "\"head\"",
                "\"tail\"",
                "\"head_and_tail\"",
                "\"nothing\""
            ]
        );
    }

    const SECRET_TOKEN: &str = "ghp_R4wS3cr3tT0kenAbCdEfGhIjKlMnOp";
    const SECRET_KEY_BODY: &str =
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj";

    #[test]
    fn g10_redaction_is_on_by_default_and_reaches_every_view() {
        let stream = format!(
            "starting upload\nAuthorization: Bearer {SECRET_TOKEN}\n\
             -----BEGIN PRIVATE KEY-----\n{SECRET_KEY_BODY}\n-----END PRIVATE KEY-----\n\
             upload failed: 403\n"
        );
        let c = captured(&CaptureConfig::default(), &[stream.as_bytes()]);
        let summary = c.summary();
        assert!(summary.redaction);
        assert_eq!(summary.redactions, 2);
        assert_eq!(
            summary.retained,
            stream.len() as u64,
            "counts are the stream's"
        );
        assert!(!summary.truncated);
        let views = [
            c.render("stderr"),
            c.excerpt("stderr", 4096),
            c.excerpt("stderr", 60),
            serde_json::to_string(&c).expect("serializable"),
        ];
        for view in &views {
            assert!(!view.contains(SECRET_TOKEN), "{view}");
            assert!(!view.contains(SECRET_KEY_BODY), "{view}");
        }
        assert_eq!(
            views[0],
            "starting upload\nAuthorization: Bearer [REDACTED]\n[REDACTED]\nupload failed: 403\n"
        );
        // Switched off: the bytes as they came (for a caller with its own scrubbing).
        let mut off = CaptureConfig::default();
        off.redact(false);
        let raw = captured(&off, &[stream.as_bytes()]);
        assert_eq!(raw.render("stderr"), stream);
        assert_eq!(
            (raw.summary().redaction, raw.summary().redactions),
            (false, 0)
        );
    }

    #[test]
    fn g10_a_key_block_cut_by_the_retention_boundary_is_redacted_on_both_sides() {
        // Head keeps the BEGIN line and part of the body; the tail starts
        // inside the body and keeps the END line. Chunks cut mid-line too.
        let body: String = (0..40)
            .map(|i| format!("{SECRET_KEY_BODY}{i:02}\n"))
            .collect();
        let stream = format!(
            "loading key\n-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\nkey rejected\n"
        );
        let mut config = CaptureConfig::default();
        config.head(120).tail(200);
        let bytes = stream.as_bytes();
        let c = captured(&config, &[&bytes[..7], &bytes[7..1000], &bytes[1000..]]);
        let summary = c.summary();
        assert_eq!(summary.retained_part, RetainedPart::HeadAndTail);
        assert_eq!((summary.head_bytes, summary.tail_bytes), (120, 200));
        assert_eq!(summary.redactions, 2, "one per side of the gap");
        let rendered = c.render("stderr");
        assert!(!rendered.contains(&SECRET_KEY_BODY[..20]), "{rendered}");
        assert!(rendered.starts_with(&format!(
            "[stderr truncated: kept first 120 and last 200 of {} bytes]\nloading key\n[REDACTED]\n[…",
            stream.len()
        )), "{rendered}");
        assert!(
            rendered.ends_with("bytes omitted …]\n[REDACTED]\nkey rejected\n"),
            "{rendered}"
        );
        let excerpt = c.excerpt("stderr", 4096);
        assert!(!excerpt.contains(&SECRET_KEY_BODY[..20]), "{excerpt}");
        assert!(excerpt.ends_with("[REDACTED]\nkey rejected\n"), "{excerpt}");
    }

    #[test]
    fn g10_debug_window_multiplies_budgets_within_limits_and_is_noted() {
        let base = Instant::now();
        let at = |ms: u64| Stamp::new(base + Duration::from_millis(ms), 1_000_000 + ms);
        let mut debug = DebugMode::default();
        let config = CaptureConfig::default();
        // Off by default: the config is unchanged.
        assert_eq!(debug.apply(at(0).instant, &config), config);
        assert_eq!(debug.poll_timeout(), None);
        // Limits: typed refusals, nothing opened.
        assert_eq!(
            debug.open(at(0), MAX_DEBUG_WINDOW + Duration::from_millis(1), 2),
            Err(DebugModeError::DurationOutOfRange {
                requested: MAX_DEBUG_WINDOW + Duration::from_millis(1),
                max: MAX_DEBUG_WINDOW
            })
        );
        assert!(matches!(
            debug.open(at(0), Duration::ZERO, 2),
            Err(DebugModeError::DurationOutOfRange { .. })
        ));
        for bad in [0, MAX_DEBUG_MULTIPLIER + 1] {
            assert_eq!(
                debug.open(at(0), Duration::from_secs(60), bad),
                Err(DebugModeError::MultiplierOutOfRange {
                    requested: bad,
                    max: MAX_DEBUG_MULTIPLIER
                })
            );
        }
        assert_eq!(debug.windows_opened(), 0);
        // A window of 60 s at ×4.
        let mark = debug
            .open(at(10), Duration::from_secs(60), 4)
            .expect("within limits");
        assert_eq!(
            (
                mark.window,
                mark.multiplier,
                mark.opened_unix_ms,
                mark.closes_unix_ms
            ),
            (1, 4, 1_000_010, 1_060_010)
        );
        assert!(matches!(
            debug.open(at(20), Duration::from_secs(1), 2),
            Err(DebugModeError::AlreadyOpen { open }) if open == mark
        ));
        let during = debug.apply(at(30).instant, &config);
        assert_eq!(during.get_debug(), Some(mark));
        assert_eq!(during.wanted(), 4 * DEFAULT_TAIL);
        let input = numbered(200_000);
        let c = captured(&during, &[&input]);
        assert_eq!(c.summary().tail_bytes, 4 * DEFAULT_TAIL as u64);
        assert_eq!(c.summary().debug, Some(mark));
        let json = serde_json::to_value(c.summary()).expect("serializable");
        assert_eq!(json["debug"]["window"], 1);
        assert_eq!(json["debug"]["multiplier"], 4);
        // A pooled capture in debug mode still gets at most its grant.
        let mut pool = RetentionPool::new(PoolConfig::default().limit(20_000).reserve(0));
        let capture = OutputCapture::with_grant(&during, pool.grant(during.wanted()));
        assert_eq!(capture.tail_limit(), 20_000);
        assert!(capture.pool_limited());
        let grant = capture.finish().into_grant().expect("pooled");
        pool.release(grant).expect("own grant");
        // At its end the window is over, even before handle_timeout.
        assert_eq!(debug.poll_timeout(), Some(at(60_010).instant));
        assert_eq!(debug.active(at(60_010).instant), None);
        assert_eq!(debug.apply(at(60_010).instant, &config), config);
        debug.handle_timeout(at(60_010).instant);
        assert_eq!(debug.poll_timeout(), None);
        // A new window gets a new number; close ends it early.
        let second = debug
            .open(at(70_000), Duration::from_secs(5), 1)
            .expect("ok");
        assert_eq!(second.window, 2);
        assert_eq!(debug.close(), Some(second));
        assert_eq!(debug.active(at(70_001).instant), None);
        assert_eq!(captured(&config, &[b"x"]).summary().debug, None);
    }

    #[test]
    fn g10_pool_grants_what_is_free_and_counts_short_grants() {
        let mut config = PoolConfig::default();
        config.limit(100).reserve(0).min_grant(0);
        let mut pool = RetentionPool::new(&config);
        let a = pool.grant(60);
        let b = pool.grant(60);
        let c = pool.grant(60);
        assert_eq!((a.bytes(), b.bytes(), c.bytes()), (60, 40, 0));
        assert_eq!((pool.in_use(), pool.free(), pool.peak()), (100, 0, 100));
        assert_eq!(
            (pool.short_grants(), pool.empty_grants(), pool.outstanding()),
            (2, 1, 3)
        );
        assert_eq!(pool.release(a), Ok(60));
        assert_eq!(pool.in_use(), 40);
        let d = pool.grant(10);
        assert!(!d.is_short());
        for grant in [b, c, d] {
            pool.release(grant).expect("own grant");
        }
        assert_eq!(
            (pool.in_use(), pool.peak(), pool.outstanding()),
            (0, 100, 0)
        );
        assert_eq!(pool.stats().grants, 4);
    }

    #[test]
    fn g10_pool_reserve_gives_late_captures_a_minimum() {
        let mut pool = RetentionPool::default();
        let config = CaptureConfig::default();
        let grants: Vec<Grant> = (0..80).map(|_| pool.grant(config.wanted())).collect();
        let sizes: Vec<usize> = grants.iter().map(Grant::bytes).collect();
        assert!(sizes[..14].iter().all(|&b| b == DEFAULT_TAIL), "{sizes:?}");
        assert!(
            sizes[14..78].iter().all(|&b| b == DEFAULT_MIN_GRANT),
            "{sizes:?}"
        );
        assert!(sizes[78..].iter().all(|&b| b == 0), "{sizes:?}");
        assert_eq!(pool.in_use(), DEFAULT_POOL_LIMIT);
        for grant in grants {
            pool.release(grant).expect("own grant");
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn g10_pool_reserve_is_clamped_to_limit() {
        let mut config = PoolConfig::default();
        config.limit(10).reserve(1000).min_grant(4);
        let mut pool = RetentionPool::new(&config);
        let grants: Vec<Grant> = (0..4).map(|_| pool.grant(100)).collect();
        let sizes: Vec<usize> = grants.iter().map(Grant::bytes).collect();
        assert_eq!(sizes, [4, 4, 2, 0]);
        assert_eq!(pool.limit(), 10);
        for grant in grants {
            pool.release(grant).expect("own grant");
        }
    }

    #[test]
    fn g10_pool_refuses_foreign_grant() {
        let mut small = RetentionPool::new(PoolConfig::default().limit(10));
        let mut big = RetentionPool::default();
        let grant = big.grant(1000);
        assert_eq!(
            small.release(grant),
            Err(ReleaseError::ForeignGrant { bytes: 1000 })
        );
        assert_eq!((small.in_use(), small.outstanding()), (0, 0));
    }

    #[test]
    fn g10_short_grant_truncates_honestly() {
        let mut config = PoolConfig::default();
        config.limit(8).reserve(0);
        let mut pool = RetentionPool::new(&config);
        let mut limits = CaptureConfig::default();
        limits.head(4).tail(16);
        let mut capture = OutputCapture::with_grant(&limits, pool.grant(limits.wanted()));
        assert_eq!((capture.tail_limit(), capture.head_limit()), (8, 0));
        assert!(capture.pool_limited());
        capture.push(b"0123456789");
        let c = capture.finish();
        assert_eq!(
            c.render("stderr"),
            "[stderr truncated: kept last 8 of 10 bytes]\n23456789"
        );
        assert!(c.summary().pool_limited);
        let mut starved = OutputCapture::with_grant(&limits, pool.grant(limits.wanted()));
        starved.push(b"abc");
        let s = starved.finish();
        assert_eq!(
            s.render("stderr"),
            "[stderr truncated: kept 0 of 3 bytes]\n"
        );
        for grant in [c.into_grant(), s.into_grant()].into_iter().flatten() {
            pool.release(grant).expect("own grant");
        }
        assert_eq!(pool.in_use(), 0);
    }

    /// Byte `pos` of flood `id`: any position can be recomputed, so 50 floods
    /// are checked exactly without storing their input.
    fn flood_byte(id: usize, pos: u64) -> u8 {
        (pos.wrapping_mul(0x9E37_79B9).rotate_right(11) as u8) ^ (id as u8).wrapping_mul(37)
    }

    struct Flood {
        id: usize,
        capture: OutputCapture,
        target: u64,
    }

    #[test]
    fn g10_pool_limit_holds_under_50_concurrent_floods() {
        let mut rng = XorShift(0x5EED_CAFE);
        let mut pool = RetentionPool::default();
        let mut live: Vec<Flood> = Vec::new();
        let (mut started, mut finished, mut max_live) = (0, 0, 0);
        let mut chunk = vec![0u8; 40_000];
        while finished < 50 {
            if started < 50 && rng.below(4) == 0 {
                let mut limits = CaptureConfig::default();
                if started % 5 == 0 {
                    limits.head(1024);
                }
                let grant = pool.grant(limits.wanted());
                live.push(Flood {
                    id: started,
                    capture: OutputCapture::with_grant(&limits, grant),
                    target: 10_000 + rng.below(400_000) as u64,
                });
                started += 1;
            } else if !live.is_empty() {
                let index = rng.below(live.len());
                let flood = &mut live[index];
                let seen = flood.capture.seen();
                if seen >= flood.target {
                    let flood = live.swap_remove(index);
                    finish_flood(&mut pool, flood);
                    finished += 1;
                } else {
                    let len = min(1 + rng.below(chunk.len()), (flood.target - seen) as usize);
                    for (i, byte) in chunk[..len].iter_mut().enumerate() {
                        *byte = flood_byte(flood.id, seen + i as u64);
                    }
                    flood.capture.push(&chunk[..len]);
                }
            }
            max_live = max_live.max(live.len());
            assert!(pool.in_use() <= pool.limit(), "pool over its limit");
            let retained: u64 = live.iter().map(|f| f.capture.retained()).sum();
            assert!(
                retained <= pool.limit() as u64,
                "live captures over the pool limit"
            );
        }
        assert_eq!((pool.in_use(), pool.outstanding()), (0, 0));
        assert!(max_live >= 25, "floods overlapped: {max_live}");
        assert!(pool.short_grants() > 0, "the pool was under pressure");
        assert!(pool.peak() <= pool.limit() && pool.peak() > pool.limit() / 2);
    }

    fn finish_flood(pool: &mut RetentionPool, flood: Flood) {
        let (head_limit, tail_limit) = (flood.capture.head_limit(), flood.capture.tail_limit());
        let c = flood.capture.finish();
        let n = c.seen();
        let head = min(head_limit as u64, n);
        let tail = min(tail_limit as u64, n - head);
        let expect_head: Vec<u8> = (0..head).map(|p| flood_byte(flood.id, p)).collect();
        let expect_tail: Vec<u8> = (n - tail..n).map(|p| flood_byte(flood.id, p)).collect();
        assert_eq!(c.head(), &expect_head[..]);
        assert_eq!(c.tail(), &expect_tail[..]);
        assert_eq!(c.retained(), head + tail);
        assert_eq!(c.truncated(), n > head + tail);
        if c.truncated() {
            let rendered = c.render("stderr");
            let marker = rendered.split('\n').next().expect("a line");
            assert_eq!(marker, truncation_marker("stderr", head, tail, n));
        }
        let grant = c.into_grant().expect("pooled");
        pool.release(grant).expect("own grant");
    }

    #[test]
    fn g10_fuzz_capture_on_pseudo_random_inputs() {
        let mut rng = XorShift(0xDEAD_BEEF);
        for round in 0..300 {
            let len = rng.below(64 + round * 8);
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            fuzz_capture(&data);
        }
    }

    fn chunked(input: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
        cuts.iter_mut().for_each(|c| *c = min(*c, input.len()));
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for cut in cuts.into_iter().chain([input.len()]) {
            chunks.push(&input[at..cut]);
            at = cut;
        }
        chunks
    }

    fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..400),
            any::<String>().prop_map(String::into_bytes),
            proptest::collection::vec(
                prop_oneof![Just(b'a'), Just(0x80u8), Just(0xE2), Just(0xF0)],
                0..200
            ),
        ]
    }

    proptest! {
        #[test]
        fn g10_exact_accounting_under_any_chunking(
            input in stream_bytes(),
            cuts in proptest::collection::vec(0usize..400, 0..20),
            head in 0usize..64,
            tail in 0usize..64,
            granted in proptest::option::of(0usize..160),
        ) {
            let mut limits = CaptureConfig::default();
            limits.head(head).tail(tail);
            let mut pool = RetentionPool::new(PoolConfig::default().reserve(0).limit(granted.unwrap_or(0)));
            let mut capture = match granted {
                Some(_) => OutputCapture::with_grant(&limits, pool.grant(limits.wanted())),
                None => OutputCapture::new(&limits),
            };
            let (head_limit, tail_limit) = (capture.head_limit(), capture.tail_limit());
            if let Some(g) = granted {
                prop_assert_eq!(tail_limit, min(tail, g));
                prop_assert_eq!(head_limit, min(head, g - tail_limit));
            } else {
                prop_assert_eq!((head_limit, tail_limit), (head, tail));
            }
            for chunk in chunked(&input, cuts) {
                capture.push(chunk);
            }
            let c = capture.finish();
            check_captured(&c, &input, head_limit, tail_limit);
            if let Some(grant) = c.into_grant() {
                prop_assert!(pool.release(grant).is_ok());
            }
            prop_assert_eq!(pool.in_use(), 0);
        }

        #[test]
        fn g10_excerpt_never_exceeds_max_bytes(
            input in stream_bytes(),
            tail in 0usize..300,
            max in 0usize..400,
        ) {
            let c = captured(&tail_config(tail), &[&input]);
            check_excerpt(&c, &input, max);
        }
    }
}

/// A [`RetentionPool`] shared by every capture of a process (G10's
/// per-process budget), cheap to clone.
///
/// The lock is held only for `grant` and `release`, never while bytes are
/// pushed; a poisoned lock is recovered, since the pool's bookkeeping is
/// updated in single assignments.
#[derive(Debug, Clone, Default)]
pub struct SharedRetentionPool(std::sync::Arc<std::sync::Mutex<RetentionPool>>);

impl SharedRetentionPool {
    /// A shared pool with the given limits.
    pub fn new(config: &PoolConfig) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(
            RetentionPool::new(config),
        )))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RetentionPool> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Grants up to `wanted` bytes (see [`RetentionPool::grant`]). A grant
    /// from a shared pool that is dropped without [`release`](Self::release)
    /// (say, a helper run abandoned when its handler was cancelled) gives its
    /// bytes back by itself.
    pub fn grant(&self, wanted: usize) -> Grant {
        let mut grant = self.lock().grant(wanted);
        grant.home = Some(std::sync::Arc::downgrade(&self.0));
        grant
    }

    /// Gives a grant back (see [`RetentionPool::release`]).
    pub fn release(&self, grant: Grant) -> Result<usize, ReleaseError> {
        self.lock().release(grant)
    }

    /// The process-wide pool, with the default limits ([`PoolConfig`]'s:
    /// 256 KiB, 32 KiB of it held back for per-capture minimums), created on
    /// first use. Every capture that takes the defaults draws on it: a
    /// `Client`'s stderr and both streams of every helper run, in every
    /// adapter. So the diagnostics a process retains stay within 256 KiB
    /// however many servers and helpers run at once.
    pub fn process() -> Self {
        static PROCESS: std::sync::OnceLock<SharedRetentionPool> = std::sync::OnceLock::new();
        PROCESS
            .get_or_init(|| Self::new(&PoolConfig::default()))
            .clone()
    }

    /// The pool's counters now.
    pub fn stats(&self) -> PoolStats {
        self.lock().stats()
    }
}

#[cfg(test)]
mod shared_pool_tests {
    use super::*;

    #[test]
    fn g10_a_shared_grant_dropped_unreleased_gives_its_bytes_back() {
        let mut config = PoolConfig::default();
        config.limit(1000).reserve(0);
        let pool = SharedRetentionPool::new(&config);
        let g = pool.grant(600);
        let mut capture = OutputCapture::with_grant(&CaptureConfig::default(), g);
        capture.push(b"abc");
        assert_eq!(pool.stats().in_use, 600);
        drop(capture); // abandoned mid-run: never finished, never released
        assert_eq!(pool.stats().in_use, 0);
        // An explicit release still works and is not counted twice.
        let g = pool.grant(300);
        assert_eq!(pool.release(g), Ok(300));
        assert_eq!(pool.stats().in_use, 0);
    }
}
