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
//! kept bytes went through the fallback [redactor](crate::process::redact) (on by
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
//! use mcp_stdio_core::{CaptureConfig, OutputCapture, PoolConfig, RetentionPool};
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

use crate::time::Stamp;

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

    /// Whether the retained bytes pass through the redactor
    /// when the capture finishes (default `true`). A fallback, never a
    /// guarantee: see `crate::process::redact` for what it catches and misses.
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

    /// The newest `max_bytes` bytes kept so far, in stream order, while the
    /// capture goes on (a live view: the session's stderr tail now).
    /// Redacted as [`finish`](Self::finish) redacts, when redaction is on.
    /// Allocates at most `max_bytes`.
    #[must_use]
    pub fn newest(&self, max_bytes: usize) -> Vec<u8> {
        let ring = &self.buf[self.head_cap..];
        let cap = ring.len();
        // The ring's bytes in order: from `ring_start`, wrapping.
        let ring_iter = (0..self.ring_len).map(|i| ring[(self.ring_start + i) % cap.max(1)]);
        let head = &self.buf[..self.head_len];
        let total = self.head_len + self.ring_len;
        let skip = total.saturating_sub(max_bytes);
        let mut out: Vec<u8> = head.iter().copied().chain(ring_iter).skip(skip).collect();
        if self.redact {
            let (n, _) = crate::process::redact::redact_in_place(&mut out);
            out.truncate(n);
        }
        out
    }

    /// Ends the capture: the retained bytes in stream order, and the counts.
    ///
    /// With redaction on (the default), head and tail are each passed
    /// through [`crate::process::redact::redact_in_place`] here, so no later view
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
            let (h, hc) = crate::process::redact::redact_in_place(&mut buf[..head_len]);
            let (t, tc) = crate::process::redact::redact_in_place(&mut buf[head_len..]);
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
/// use mcp_stdio_core::Stamp;
/// use mcp_stdio_core::{CaptureConfig, DebugMode};
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
pub(crate) fn check_captured(
    captured: &Captured,
    input: &[u8],
    head_limit: usize,
    tail_limit: usize,
) {
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
    let (h, hc) = crate::process::redact::redact_in_place(&mut head);
    head.truncate(h);
    let mut tail = raw_tail.to_vec();
    let (t, tc) = crate::process::redact::redact_in_place(&mut tail);
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
pub(crate) fn check_excerpt(captured: &Captured, input: &[u8], max: usize) {
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

#[cfg(test)]
mod tests;

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
mod shared_pool_tests;
