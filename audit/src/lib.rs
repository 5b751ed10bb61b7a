//! # mcp-stdio-audit
//!
//! The append-only, hash-chained JSON-lines audit log of mcp-stdio and its
//! offline verification: the log `mcp-stdio guard --audit` writes and
//! `mcp-stdio verify` checks. Entries are chained with SHA-256, or with
//! HMAC-SHA256 under a key ([`AuditKey`]); a writing session ends with a
//! seal that counts what it wrote.
//!
//! - **Writing**: [`AuditChain`] turns each record (any `Serialize`, such as
//!   the core's [`CallRecord`]) into one line to write; [`record_sink`] hands
//!   a helper run's records to a chain.
//! - **Verifying**: [`verify`] checks a whole log in memory,
//!   [`AuditVerifier`] streams one, and both name the first bad line.
//!
//! [`CallRecord`]: https://docs.rs/mcp-stdio-core/latest/mcp_stdio_core/struct.CallRecord.html
//!
//! ## Why a crate of its own
//!
//! The log is a file format plus cryptography. The core's machines only
//! emit records; none of them needs the chain. So the core does not depend
//! on `sha2` and `hmac`, and a user of the transport who never keeps an
//! audit log does not compile SHA-256 and HMAC. This crate depends on the
//! core (for [`record_sink`] and the core's JSON helpers), never the other
//! way round.
//!
//! ## Example
//!
//! ```
//! use mcp_stdio_audit::{verify, AuditChain, AuditKey, LogEnd};
//! use serde_json::json;
//!
//! let key = AuditKey::new(b"32 random bytes, kept elsewhere.")?;
//! let mut chain = AuditChain::with_key(key.clone());
//! let mut log = chain.begin_session("s-1")?;
//! log.extend(chain.append(json!({"call_id": "c_1", "state": "dispatched"}))?);
//! log.extend(chain.append(json!({"call_id": "c_1", "state": "completed"}))?);
//! log.extend(chain.seal()?);
//! // Write each line (and fsync) as it comes; later, offline:
//! let summary = verify(&log, Some(&key))?;
//! assert_eq!(summary.entries, 4);
//! assert_eq!(summary.end, LogEnd::Sealed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Line format
//!
//! Each entry is one line of compact JSON with its keys in this order, ending
//! in a single `\n`:
//!
//! ```text
//! {"seq":1,"alg":"sha256","prev":"<64 hex>","record":<record JSON>,"hash":"<64 hex>"}
//! {"seq":2,"alg":"hmac-sha256","kid":"<16 hex>","prev":"<64 hex>","record":<record JSON>,"hash":"<64 hex>"}
//! ```
//!
//! - `seq` counts entries from 1, so entry `seq` is line `seq` of its file.
//! - `prev` is the `hash` of the previous entry; the first entry's `prev` is
//!   [`GENESIS_PREV`] (64 zeros).
//! - `hash` = `SHA-256(prev ‖ record)` (`alg: "sha256"`), or
//!   `HMAC-SHA256(key, prev ‖ record)` (`alg: "hmac-sha256"`), where `prev`
//!   is the 32 raw bytes of the previous hash (not its hex) and `record` is the
//!   record's **canonical bytes**. With a key the chain cannot be recomputed
//!   without it.
//! - `kid` (keyed chains only) is a key check value: the first 8 bytes of
//!   `HMAC-SHA256(key, "mcp-stdio audit key id v1")`, in hex. It lets the
//!   verifier say "wrong key" instead of "hash mismatch" on line 1; it reveals
//!   nothing usable about the key.
//! - Hex is lowercase.
//!
//! ## Canonical bytes
//!
//! The canonical bytes of a record are **exactly the bytes of the `record`
//! value as they appear in the line**: [`AuditChain::append`] serializes the
//! record with `serde_json` and then removes every whitespace byte outside
//! strings (so raw values embedded in the record cannot carry a newline), and
//! writes those bytes verbatim. Verification extracts the same byte range
//! (a borrowed [`RawValue`]) and hashes it; nothing is re-serialized, so the
//! hash covers the bytes on disk and no key-ordering or number-formatting rule
//! is involved.
//!
//! Beyond the hash, the verifier requires each line to be byte-identical to
//! the line `append` would write for its fields (key order, no whitespace
//! around the envelope, no `\r`). So any change to any byte of a line is
//! either invalid JSON, a changed field value caught by the `seq` / `prev` /
//! `alg` / `kid` / `hash` checks, or a non-canonical line.
//!
//! ## Sessions and the seal
//!
//! A writing session may start with a `session_start` entry
//! ([`AuditChain::begin_session`]) and ends with a **seal**
//! ([`AuditChain::seal`]), one entry counting what the session wrote:
//!
//! ```text
//! {"phase":"session_start","session_id":"4711-1796097132190"}
//! … the session's records …
//! {"phase":"seal","first_seq":1,"entries":7,"kinds":{"call.completed":3,"call.dispatched":3,"phase.session_start":1},"last_hash":"<64 hex>"}
//! ```
//!
//! - `first_seq` is the first entry the seal covers: the session's
//!   `session_start`, else the entry after the previous seal, else entry 1.
//!   The seal covers `first_seq` up to the entry before it.
//! - `entries` is how many entries that is; `kinds` counts them by kind (see
//!   [`entry_kind`]: `call.<state>`, `phase.<name>` or `other`).
//! - `last_hash` is the `hash` of the entry before the seal.
//!
//! The chain alone cannot show entries removed from the *end* of the log:
//! what is left is a valid, shorter chain. The seal makes that visible: a log
//! whose last entry is not a seal was cut, or is still being written, or its
//! writer died (SIGKILL, crash). [`VerifySummary::end`] says which entries
//! are not sealed; a seal whose counts or last hash do not match the entries
//! before it is [`VerifyErrorKind::SealMismatch`]. A `session_start` that
//! follows entries no seal covers shows a session that ended without a seal
//! ([`VerifySummary::unsealed_sessions`]).
//!
//! With a plain chain anyone can append a forged seal to a cut log; only a
//! keyed chain makes the seal the writer's word. Removing whole sessions,
//! seal included, from the end leaves a sealed log: compare
//! [`VerifySummary::entries`] and [`VerifySummary::last_hash`] with an anchor
//! kept elsewhere (for example the last hash printed at shutdown) to detect that.
//!
//! ## Limits
//!
//! Lines are at most [`DEFAULT_MAX_LINE_BYTES`] (1 MiB, without the `\n`)
//! unless changed with [`AuditChain::max_line_bytes`] /
//! [`AuditVerifier::max_line_bytes`]. The verifier buffers at most one partial
//! line plus one re-rendered line: worst case 2 × the limit. A seal counts at
//! most [`MAX_SEAL_KINDS`] kinds (the rest go to `other`), so the counts of
//! the open session stay small on both sides.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unnameable_types)]

mod sink;

pub use sink::record_sink;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write as _;

use hmac::{Hmac, KeyInit, Mac};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use mcp_stdio_core::{compact_json_in_place, LimitedWriter};

type HmacSha256 = Hmac<Sha256>;

/// `prev` of the first entry: 64 zeros (32 zero bytes in hex).
pub const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Default limit on the length of one log line, without its `\n`: 1 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1024 * 1024;

/// Kinds a seal counts separately (default and only value: 64); entries of
/// further kinds are counted as `other`. Worst case ≈ 64 × 64 B per open
/// session, on the writer and on the verifier.
pub const MAX_SEAL_KINDS: usize = 64;

/// The `phase` of the entry that starts a session.
pub const PHASE_SESSION_START: &str = "session_start";

/// The `phase` of the entry that seals a session.
pub const PHASE_SEAL: &str = "seal";

/// Longest state or phase name used as a kind; longer names count as `other`.
const MAX_KIND_NAME: usize = 40;

/// The kind of entries that fit no other kind.
const OTHER_KIND: &str = "other";

/// The message whose HMAC gives the key check value (`kid`).
const KEY_ID_LABEL: &[u8] = b"mcp-stdio audit key id v1";

/// Hash algorithm of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Alg {
    /// Plain SHA-256: detects changes, but anyone can recompute the chain.
    Sha256,
    /// HMAC-SHA256: the chain cannot be recomputed without the key.
    HmacSha256,
}

impl Alg {
    /// The name written in the `alg` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::HmacSha256 => "hmac-sha256",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "sha256" => Some(Self::Sha256),
            "hmac-sha256" => Some(Self::HmacSha256),
            _ => None,
        }
    }
}

impl std::fmt::Display for Alg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused HMAC key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty, which would make the HMAC no secret at all.
    #[error("audit key is empty")]
    Empty,
}

/// A validated HMAC key for a keyed chain, with its key check value.
///
/// Its `Debug` output shows only the key check value (`kid`), never the key.
#[derive(Clone)]
pub struct AuditKey {
    /// The keyed MAC state, cloned per line so the key is processed once.
    mac: HmacSha256,
    kid: [u8; 16],
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditKey")
            .field("kid", &self.kid())
            .finish()
    }
}

impl AuditKey {
    /// A key from raw bytes (any non-empty length; see RFC 2104 for why 32
    /// random bytes are enough).
    pub fn new(key: &[u8]) -> Result<Self, KeyError> {
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        // HMAC takes keys of any length (longer ones are hashed first).
        let mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
        let mut check = mac.clone();
        check.update(KEY_ID_LABEL);
        let tag = check.finalize().into_bytes();
        let mut kid = [0u8; 16];
        hex_encode(&tag[..8], &mut kid);
        Ok(Self { mac, kid })
    }

    /// The key check value written in the `kid` field (16 hex digits).
    pub fn kid(&self) -> &str {
        // Hex digits are ASCII.
        std::str::from_utf8(&self.kid).expect("hex is ASCII")
    }
}

fn alg_of(key: Option<&AuditKey>) -> Alg {
    match key {
        Some(_) => Alg::HmacSha256,
        None => Alg::Sha256,
    }
}

fn link_hash(key: Option<&AuditKey>, prev: &[u8; 32], record: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    match key {
        None => {
            let mut h = Sha256::new();
            Digest::update(&mut h, prev);
            Digest::update(&mut h, record);
            out.copy_from_slice(&h.finalize());
        }
        Some(k) => {
            let mut m = k.mac.clone();
            m.update(prev);
            m.update(record);
            out.copy_from_slice(&m.finalize().into_bytes());
        }
    }
    out
}

/// True if `claimed` is the link hash; constant-time for HMAC.
fn link_hash_matches(
    key: Option<&AuditKey>,
    prev: &[u8; 32],
    record: &[u8],
    claimed: &[u8; 32],
) -> bool {
    match key {
        None => link_hash(None, prev, record) == *claimed,
        Some(k) => {
            let mut m = k.mac.clone();
            m.update(prev);
            m.update(record);
            m.verify_slice(claimed).is_ok()
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_encode(bytes: &[u8], out: &mut [u8]) {
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0x0f)];
    }
}

fn hex32(bytes: &[u8; 32]) -> String {
    let mut out = [0u8; 64];
    hex_encode(bytes, &mut out);
    out.iter().map(|&b| char::from(b)).collect()
}

/// Decodes exactly 64 lowercase hex digits.
fn unhex32(s: &str) -> Option<[u8; 32]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Writes the canonical line (without `\n`) for these fields.
fn render_line(
    out: &mut Vec<u8>,
    seq: u64,
    alg: Alg,
    kid: Option<&str>,
    prev: &str,
    record: &[u8],
    hash: &str,
) {
    out.extend_from_slice(b"{\"seq\":");
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{seq}");
    out.extend_from_slice(b",\"alg\":\"");
    out.extend_from_slice(alg.as_str().as_bytes());
    if let Some(kid) = kid {
        out.extend_from_slice(b"\",\"kid\":\"");
        out.extend_from_slice(kid.as_bytes());
    }
    out.extend_from_slice(b"\",\"prev\":\"");
    out.extend_from_slice(prev.as_bytes());
    out.extend_from_slice(b"\",\"record\":");
    out.extend_from_slice(record);
    out.extend_from_slice(b",\"hash\":\"");
    out.extend_from_slice(hash.as_bytes());
    out.extend_from_slice(b"\"}");
}

/// The kind of an entry, from its record's shape: `phase.<phase>` for a
/// record with a string `phase` (a session entry), `call.<state>` for one
/// with a string `call_id` and a string `state` (a call record), `other`
/// otherwise (and for names that are not 1–40 of `a-z`, `0-9`, `_`).
pub fn entry_kind(record: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Shape<'a> {
        #[serde(default, borrow)]
        phase: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        call_id: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        state: Option<Cow<'a, str>>,
    }
    let named = |prefix: &str, name: &str| {
        let plain = !name.is_empty()
            && name.len() <= MAX_KIND_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if plain {
            format!("{prefix}.{name}")
        } else {
            OTHER_KIND.to_owned()
        }
    };
    match serde_json::from_slice::<Shape<'_>>(record) {
        Ok(Shape {
            phase: Some(phase), ..
        }) => named("phase", &phase),
        Ok(Shape {
            call_id: Some(_),
            state: Some(state),
            ..
        }) => named("call", &state),
        _ => OTHER_KIND.to_owned(),
    }
}

/// Counts of entries by kind, as a seal states them; at most
/// [`MAX_SEAL_KINDS`] kinds, plus `other`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EntryCounts {
    kinds: BTreeMap<String, u64>,
}

impl EntryCounts {
    /// Counts one entry of `kind` (as `other` once [`MAX_SEAL_KINDS`] other
    /// kinds are counted).
    pub fn add(&mut self, kind: String) {
        let full = self.kinds.len() >= MAX_SEAL_KINDS && !self.kinds.contains_key(&kind);
        let key = if full { OTHER_KIND.to_owned() } else { kind };
        let n = self.kinds.entry(key).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// Entries counted.
    pub fn total(&self) -> u64 {
        self.kinds.values().fold(0u64, |a, n| a.saturating_add(*n))
    }

    /// Entries counted of `kind`.
    pub fn get(&self, kind: &str) -> u64 {
        self.kinds.get(kind).copied().unwrap_or(0)
    }

    /// `(kind, count)` in kind order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.kinds.iter().map(|(k, n)| (k.as_str(), *n))
    }
}

/// A seal entry's record (see the crate docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Seal {
    /// Always [`PHASE_SEAL`].
    pub phase: String,
    /// The first entry the seal covers.
    pub first_seq: u64,
    /// How many entries it covers (`first_seq` up to the entry before the seal).
    pub entries: u64,
    /// Those entries by kind.
    pub kinds: EntryCounts,
    /// The hash of the entry before the seal (hex).
    pub last_hash: String,
}

/// The entries since the last session boundary, as both the writer and the
/// verifier count them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    /// The first entry of the segment; `None` when a writer resumed a log
    /// whose session is not sealed and has not started its own.
    first: Option<u64>,
    counts: EntryCounts,
}

/// What one entry did to the open segment.
enum SegmentStep {
    /// Counted in the open segment.
    Counted,
    /// A `session_start` closed an unsealed segment (its first and last
    /// entry) and opened a new one.
    Restarted { unsealed: Option<(u64, u64)> },
    /// A seal: the segment it must match (already closed).
    Sealed(Segment),
}

impl Segment {
    fn new(first: Option<u64>) -> Self {
        Self {
            first,
            counts: EntryCounts::default(),
        }
    }

    /// Applies entry `seq` of `kind`.
    fn step(&mut self, seq: u64, kind: String) -> SegmentStep {
        if kind == format!("phase.{PHASE_SEAL}") {
            let closed = std::mem::replace(self, Self::new(Some(seq.saturating_add(1))));
            return SegmentStep::Sealed(closed);
        }
        if kind == format!("phase.{PHASE_SESSION_START}") {
            let unsealed = (self.counts.total() > 0)
                .then(|| (self.first.unwrap_or(seq), seq.saturating_sub(1)));
            *self = Self::new(Some(seq));
            self.counts.add(kind);
            return SegmentStep::Restarted { unsealed };
        }
        self.counts.add(kind);
        SegmentStep::Counted
    }
}

/// Errors of [`AuditChain::append`]. A failed append does not advance the chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The line would pass the line limit (which `verify` enforces too).
    #[error("audit line would exceed {limit} bytes")]
    TooLarge {
        /// The line limit.
        limit: usize,
    },
    /// The record's `Serialize` implementation failed.
    #[error("audit record failed to serialize: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The record serialized to bytes that are not valid JSON (possible only
    /// through a hand-written raw value).
    #[error("audit record is not valid JSON")]
    InvalidJson,
    /// `seq` reached `u64::MAX`.
    #[error("audit sequence exhausted")]
    SequenceExhausted,
    /// [`AuditChain::seal`] on a chain resumed inside a session that is not
    /// sealed: where this writer's session starts is not known, so call
    /// [`AuditChain::begin_session`] first.
    #[error("the session to seal has no known start (begin a session first)")]
    SessionNotStarted,
}

/// Errors of [`AuditChain::resume`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The last line does not check out on its own.
    #[error("last audit line is invalid: {0}")]
    InvalidLine(VerifyErrorKind),
}

/// The writer side of an audit log.
///
/// [`append`](Self::append) returns the bytes of one line, `\n` included;
/// the caller writes them (and fsyncs) in order. If writing a line fails, drop
/// this chain and [`resume`](Self::resume) from what is on disk: the chain has
/// already advanced past the lost line.
#[derive(Clone)]
pub struct AuditChain {
    key: Option<AuditKey>,
    next_seq: u64,
    prev: [u8; 32],
    max_line_bytes: usize,
    /// What the next seal covers.
    segment: Segment,
}

impl std::fmt::Debug for AuditChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("AuditChain")
            .field("alg", &self.alg())
            .field("kid", &self.key.as_ref().map(AuditKey::kid))
            .field("next_seq", &self.next_seq)
            .field("prev", &hex32(&self.prev))
            .field("max_line_bytes", &self.max_line_bytes)
            .field("session_first_seq", &self.segment.first)
            .finish()
    }
}

impl Default for AuditChain {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditChain {
    /// A new, empty chain with plain SHA-256.
    pub fn new() -> Self {
        Self {
            key: None,
            next_seq: 1,
            prev: [0; 32],
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            segment: Segment::new(Some(1)),
        }
    }

    /// A new, empty chain with HMAC-SHA256 under `key`.
    pub fn with_key(key: AuditKey) -> Self {
        Self {
            key: Some(key),
            ..Self::new()
        }
    }

    /// Continues an existing log from its last line.
    ///
    /// `last_line` is the file's last line *including* its `\n`; an empty
    /// slice means an empty file (a new chain). The line must check out on
    /// its own (canonical form, algorithm and key, and its hash over its own
    /// `prev` and record); the rest of the file is not read here, so run
    /// [`verify`] first if the file may have been touched. Unless the last
    /// line is a seal, start with [`begin_session`](Self::begin_session)
    /// before [`seal`](Self::seal).
    pub fn resume(last_line: &[u8], key: Option<&AuditKey>) -> Result<Self, ResumeError> {
        let mut chain = match key {
            Some(k) => Self::with_key(k.clone()),
            None => Self::new(),
        };
        if last_line.is_empty() {
            return Ok(chain);
        }
        let line = match last_line.split_last() {
            Some((b'\n', line)) => line,
            _ => return Err(ResumeError::InvalidLine(VerifyErrorKind::TruncatedLastLine)),
        };
        if line.len() > chain.max_line_bytes {
            return Err(ResumeError::InvalidLine(VerifyErrorKind::LineTooLong {
                limit: chain.max_line_bytes,
            }));
        }
        let mut scratch = Vec::new();
        let parsed = parse_line(line, chain.key.as_ref(), &mut scratch).map_err(|fault| {
            ResumeError::InvalidLine(match fault {
                LineFault::Cut => VerifyErrorKind::TruncatedLastLine,
                LineFault::Kind(kind) => kind,
            })
        })?;
        let prev = parsed
            .prev
            .ok_or(ResumeError::InvalidLine(VerifyErrorKind::BrokenLink))?;
        let hash = parsed
            .hash
            .filter(|h| link_hash_matches(chain.key.as_ref(), &prev, parsed.record, h))
            .ok_or(ResumeError::InvalidLine(VerifyErrorKind::HashMismatch))?;
        chain.next_seq = parsed.seq.saturating_add(1);
        chain.prev = hash;
        // After a seal the next session starts cleanly; inside an unsealed
        // session its start is not known here.
        let sealed = entry_kind(parsed.record) == format!("phase.{PHASE_SEAL}");
        chain.segment = Segment::new(sealed.then_some(chain.next_seq));
        Ok(chain)
    }

    /// Sets the line limit (default [`DEFAULT_MAX_LINE_BYTES`] = 1 MiB,
    /// without the `\n`). Use the same limit for [`AuditVerifier`]. `append`
    /// holds at most two buffers of this size while building a line.
    pub fn max_line_bytes(&mut self, limit: usize) -> &mut Self {
        self.max_line_bytes = limit;
        self
    }

    /// The algorithm of this chain.
    pub fn alg(&self) -> Alg {
        alg_of(self.key.as_ref())
    }

    /// The `seq` the next line will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The hash of the last line (hex), or [`GENESIS_PREV`] for an empty chain.
    pub fn last_hash(&self) -> String {
        hex32(&self.prev)
    }

    /// Appends the entry that starts a session,
    /// `{"phase":"session_start","session_id":…}`; the next
    /// [`seal`](Self::seal) covers from here. Returns the line to write.
    pub fn begin_session(&mut self, session_id: &str) -> Result<Vec<u8>, AppendError> {
        #[derive(Serialize)]
        struct SessionStart<'a> {
            phase: &'static str,
            session_id: &'a str,
        }
        self.append(SessionStart {
            phase: PHASE_SESSION_START,
            session_id,
        })
    }

    /// Appends the seal of the open session (see the crate docs): the
    /// counts by kind of the entries since the session started (or since the
    /// previous seal, or the start of the log) and the last hash. Returns the
    /// line to write; once it is on disk the session's end is provable.
    pub fn seal(&mut self) -> Result<Vec<u8>, AppendError> {
        let first_seq = self.segment.first.ok_or(AppendError::SessionNotStarted)?;
        let seal = Seal {
            phase: PHASE_SEAL.to_owned(),
            first_seq,
            entries: self.segment.counts.total(),
            kinds: self.segment.counts.clone(),
            last_hash: self.last_hash(),
        };
        self.append(&seal)
    }

    /// The entries the next seal would count.
    pub fn open_session_counts(&self) -> &EntryCounts {
        &self.segment.counts
    }

    /// Appends a record; returns the line to write, `\n` included.
    pub fn append(&mut self, record: impl Serialize) -> Result<Vec<u8>, AppendError> {
        let mut body = Vec::new();
        let mut writer = LimitedWriter::new(&mut body, self.max_line_bytes);
        if let Err(e) = serde_json::to_writer(&mut writer, &record) {
            return Err(if writer.overflowed() {
                AppendError::TooLarge {
                    limit: self.max_line_bytes,
                }
            } else {
                AppendError::Serialize(e)
            });
        }
        self.append_body(body)
    }

    /// Appends a record given as raw JSON (whitespace outside strings is
    /// removed first); returns the line to write, `\n` included.
    pub fn append_raw(&mut self, record: &RawValue) -> Result<Vec<u8>, AppendError> {
        let raw = record.get().as_bytes();
        if raw.len() > self.max_line_bytes {
            return Err(AppendError::TooLarge {
                limit: self.max_line_bytes,
            });
        }
        self.append_body(raw.to_vec())
    }

    fn append_body(&mut self, mut body: Vec<u8>) -> Result<Vec<u8>, AppendError> {
        if self.next_seq == u64::MAX {
            return Err(AppendError::SequenceExhausted);
        }
        compact_json_in_place(&mut body, 0);
        // A Serialize impl can inject arbitrary raw text; refuse anything the
        // verifier would not parse back.
        if std::str::from_utf8(&body).is_err()
            || serde_json::from_slice::<IgnoredAny>(&body).is_err()
        {
            return Err(AppendError::InvalidJson);
        }
        let hash = link_hash(self.key.as_ref(), &self.prev, &body);
        let mut line = Vec::with_capacity(body.len() + 200);
        render_line(
            &mut line,
            self.next_seq,
            self.alg(),
            self.key.as_ref().map(AuditKey::kid),
            &hex32(&self.prev),
            &body,
            &hex32(&hash),
        );
        if line.len() > self.max_line_bytes {
            return Err(AppendError::TooLarge {
                limit: self.max_line_bytes,
            });
        }
        line.push(b'\n');
        let _ = self.segment.step(self.next_seq, entry_kind(&body));
        self.next_seq += 1;
        self.prev = hash;
        Ok(line)
    }
}

/// What is wrong with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyErrorKind {
    /// The line is longer than the line limit.
    #[error("line exceeds {limit} bytes")]
    LineTooLong {
        /// The limit.
        limit: usize,
    },
    /// The line is not a JSON object with exactly the entry fields.
    #[error("not a valid audit entry (bad JSON or fields)")]
    BadJson,
    /// The last line is cut: for the verifier, its JSON ends early yet the
    /// line has its `\n` (a cut write has none; see
    /// [`AuditVerifier::finish`]); for [`AuditChain::resume`], it has no `\n`.
    #[error("last line is truncated")]
    TruncatedLastLine,
    /// The line parses but is not byte-for-byte what `append` writes.
    #[error("line is not in canonical form")]
    NotCanonical,
    /// The `alg` field names no known algorithm.
    #[error("unknown algorithm")]
    UnknownAlgorithm,
    /// The line's algorithm is not the verifier's (a key given for a plain
    /// chain, none given for a keyed one, or a keyed chain recomputed as plain).
    #[error("algorithm mismatch: expected {expected}, found {found}")]
    AlgorithmMismatch {
        /// The algorithm the verifier expects (from whether it has a key).
        expected: Alg,
        /// The algorithm the line names.
        found: Alg,
    },
    /// The line's key check value (`kid`) is not the verifier key's.
    #[error("wrong key")]
    WrongKey,
    /// `seq` is not the previous entry's plus one (a line deleted, inserted or moved).
    #[error("sequence gap: expected {expected}, found {found}")]
    SequenceGap {
        /// The expected sequence number.
        expected: u64,
        /// The sequence number in the line.
        found: u64,
    },
    /// `prev` is not the previous entry's `hash`.
    #[error("broken link: prev is not the previous hash")]
    BrokenLink,
    /// `hash` does not match `prev` and the record (changed record, or a
    /// keyed chain checked with a different key that has the same `kid`).
    #[error("hash mismatch")]
    HashMismatch,
    /// A `phase: "seal"` record without exactly the seal's fields.
    #[error("not a valid seal")]
    BadSeal,
    /// A seal whose `first_seq`, counts or `last_hash` are not those of the
    /// entries before it.
    #[error("seal does not match the entries it covers: {0}")]
    SealMismatch(SealField),
}

/// The field of a seal that does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealField {
    /// `first_seq` is not where the session started.
    #[error("first_seq")]
    FirstSeq,
    /// `entries` is not the number of entries covered.
    #[error("entries")]
    Entries,
    /// `kinds` is not the count of the covered entries by kind.
    #[error("kinds")]
    Kinds,
    /// `last_hash` is not the previous entry's hash.
    #[error("last_hash")]
    LastHash,
}

/// The first bad line of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("audit log line {line}: {kind}")]
#[non_exhaustive]
pub struct VerifyError {
    /// 1-based line number.
    pub line: u64,
    /// What is wrong with it.
    pub kind: VerifyErrorKind,
}

/// How a verified log ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogEnd {
    /// The last entry is a seal that matches what it covers.
    Sealed,
    /// No seal covers the last `entries` entries (from `first_seq`): the log
    /// was cut, is still being written, or its writer died. An empty log
    /// ends here too.
    Unsealed {
        /// The first entry no seal covers (`entries + 1` past the end when none).
        first_seq: u64,
        /// Entries after the last seal (all of them when there is none).
        entries: u64,
        /// A cut line follows the last entry (a write cut short).
        partial_line: bool,
    },
}

/// The result of a successful verification: the chain is intact.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifySummary {
    /// Number of entries (lines).
    pub entries: u64,
    /// Hash of the last entry (hex), or [`GENESIS_PREV`] for an empty log.
    pub last_hash: String,
    /// The algorithm verified.
    pub alg: Alg,
    /// Seals verified.
    pub seals: u64,
    /// Whether the log ends with a seal.
    pub end: LogEnd,
    /// Sessions that ended without a seal and were followed by another
    /// session (a writer that died, then a new one that continued the log).
    pub unsealed_sessions: u64,
    /// The first of those: its first and last entry.
    pub first_unsealed_session: Option<(u64, u64)>,
}

impl VerifySummary {
    /// True when every session of the log is sealed (and it is not empty).
    pub fn is_sealed(&self) -> bool {
        self.end == LogEnd::Sealed && self.unsealed_sessions == 0
    }
}

/// A parsed line that is in canonical form for its algorithm and key.
struct ParsedLine<'a> {
    seq: u64,
    /// `None` if `prev` is not 64 lowercase hex digits.
    prev: Option<[u8; 32]>,
    record: &'a [u8],
    /// `None` if `hash` is not 64 lowercase hex digits.
    hash: Option<[u8; 32]>,
}

enum LineFault {
    /// The JSON ended early: bad, unless this turns out to be the last line.
    Cut,
    Kind(VerifyErrorKind),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireLine<'a> {
    seq: u64,
    alg: &'a str,
    #[serde(default)]
    kid: Option<&'a str>,
    prev: &'a str,
    #[serde(borrow)]
    record: &'a RawValue,
    hash: &'a str,
}

/// Parses one line (no `\n`) and checks everything that needs no context.
fn parse_line<'a>(
    line: &'a [u8],
    key: Option<&AuditKey>,
    scratch: &mut Vec<u8>,
) -> Result<ParsedLine<'a>, LineFault> {
    if line.is_empty() {
        return Err(LineFault::Kind(VerifyErrorKind::BadJson));
    }
    let wire: WireLine<'a> = serde_json::from_slice(line).map_err(|e| {
        if e.is_eof() {
            LineFault::Cut
        } else {
            LineFault::Kind(VerifyErrorKind::BadJson)
        }
    })?;
    let found = Alg::parse(wire.alg).ok_or(LineFault::Kind(VerifyErrorKind::UnknownAlgorithm))?;
    let expected = alg_of(key);
    if found != expected {
        return Err(LineFault::Kind(VerifyErrorKind::AlgorithmMismatch {
            expected,
            found,
        }));
    }
    match (key, wire.kid) {
        (Some(k), Some(kid)) if kid != k.kid() => {
            return Err(LineFault::Kind(VerifyErrorKind::WrongKey));
        }
        (Some(_), Some(_)) | (None, None) => {}
        // A keyed line without `kid`, or a plain one with it.
        _ => return Err(LineFault::Kind(VerifyErrorKind::NotCanonical)),
    }
    let record = wire.record.get().as_bytes();
    scratch.clear();
    render_line(
        scratch, wire.seq, found, wire.kid, wire.prev, record, wire.hash,
    );
    if scratch.as_slice() != line {
        return Err(LineFault::Kind(VerifyErrorKind::NotCanonical));
    }
    Ok(ParsedLine {
        seq: wire.seq,
        prev: unhex32(wire.prev),
        record,
        hash: unhex32(wire.hash),
    })
}

/// Streaming verifier: feed the log in chunks of any size, then `finish`.
///
/// Verification stops at the first bad line; later calls return the same
/// error. Memory: one partial line and one re-rendered line, each at most
/// [`max_line_bytes`](Self::max_line_bytes).
#[derive(Clone)]
pub struct AuditVerifier {
    key: Option<AuditKey>,
    max_line_bytes: usize,
    partial: Vec<u8>,
    lines: u64,
    entries: u64,
    prev: [u8; 32],
    scratch: Vec<u8>,
    failed: Option<VerifyError>,
    /// A line whose JSON ended early: fatal unless no line follows it.
    pending_cut: Option<u64>,
    /// The entries since the last session boundary.
    segment: Segment,
    seals: u64,
    unsealed_sessions: u64,
    first_unsealed_session: Option<(u64, u64)>,
}

impl std::fmt::Debug for AuditVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("AuditVerifier")
            .field("alg", &alg_of(self.key.as_ref()))
            .field("lines", &self.lines)
            .field("entries", &self.entries)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl AuditVerifier {
    /// A verifier for a plain chain (`key: None`) or a keyed one.
    pub fn new(key: Option<&AuditKey>) -> Self {
        Self {
            key: key.cloned(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            partial: Vec::new(),
            lines: 0,
            entries: 0,
            prev: [0; 32],
            scratch: Vec::new(),
            failed: None,
            pending_cut: None,
            segment: Segment::new(Some(1)),
            seals: 0,
            unsealed_sessions: 0,
            first_unsealed_session: None,
        }
    }

    /// Sets the longest accepted line, without its `\n` (default
    /// [`DEFAULT_MAX_LINE_BYTES`] = 1 MiB). A longer line is reported as
    /// [`VerifyErrorKind::LineTooLong`] as soon as the limit is passed,
    /// without buffering the rest. Worst-case memory: 2 × the limit.
    pub fn max_line_bytes(&mut self, limit: usize) -> &mut Self {
        self.max_line_bytes = limit;
        self
    }

    /// Feeds the next bytes of the log.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), VerifyError> {
        self.push_entries(chunk, |_, _| {})
    }

    /// Feeds the next bytes of the log and hands each entry that checked out
    /// (its `seq` and its record's bytes) to `on_entry`, in order.
    pub fn push_entries(
        &mut self,
        chunk: &[u8],
        mut on_entry: impl FnMut(u64, &[u8]),
    ) -> Result<(), VerifyError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut rest = chunk;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            let piece = &rest[..i];
            rest = &rest[i + 1..];
            if self.partial.is_empty() {
                self.check_line(piece, &mut on_entry)?;
            } else {
                if self.partial.len() + piece.len() > self.max_line_bytes {
                    return Err(self.fail(self.lines + 1, self.too_long()));
                }
                self.partial.extend_from_slice(piece);
                let line = std::mem::take(&mut self.partial);
                let result = self.check_line(&line, &mut on_entry);
                self.partial = line;
                self.partial.clear();
                result?;
            }
        }
        if self.partial.len() + rest.len() > self.max_line_bytes {
            return Err(self.fail(self.lines + 1, self.too_long()));
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the log: the summary, or the first bad line.
    ///
    /// A last line without its `\n` is not an error: it is what a writer
    /// killed mid-write leaves, and the summary reports it as
    /// [`LogEnd::Unsealed`] with `partial_line`. It must still be the start of
    /// a line (or a whole entry that links to the one before it); anything
    /// else is reported as bad. A line whose JSON ends early but that has its
    /// `\n` is [`VerifyErrorKind::TruncatedLastLine`]: writes end with the
    /// `\n`, so that is not a cut write.
    pub fn finish(mut self) -> Result<VerifySummary, VerifyError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if let Some(line) = self.pending_cut {
            return Err(VerifyError {
                line,
                kind: VerifyErrorKind::TruncatedLastLine,
            });
        }
        let partial_line = !self.partial.is_empty();
        if partial_line {
            let line_no = self.lines + 1;
            let partial = std::mem::take(&mut self.partial);
            let mut scratch = Vec::new();
            match parse_line(&partial, self.key.as_ref(), &mut scratch) {
                // The start of the next line is known up to its record.
                Err(LineFault::Cut) => {
                    let mut head = Vec::new();
                    render_line(
                        &mut head,
                        self.entries + 1,
                        alg_of(self.key.as_ref()),
                        self.key.as_ref().map(AuditKey::kid),
                        &hex32(&self.prev),
                        b"",
                        "",
                    );
                    let known = head.len() - b",\"hash\":\"\"}".len();
                    let n = known.min(partial.len());
                    if partial[..n] != head[..n] {
                        return Err(VerifyError {
                            line: line_no,
                            kind: VerifyErrorKind::NotCanonical,
                        });
                    }
                }
                Err(LineFault::Kind(kind)) => {
                    return Err(VerifyError {
                        line: line_no,
                        kind,
                    })
                }
                // A whole entry without its `\n`: it must link, but it is
                // not counted (its write did not finish).
                Ok(p) => {
                    let mut probe = self.clone();
                    probe.check_links(&p).map_err(|kind| VerifyError {
                        line: line_no,
                        kind,
                    })?;
                }
            }
        }
        let end = if self.seals > 0 && self.segment.counts.total() == 0 && !partial_line {
            LogEnd::Sealed
        } else {
            LogEnd::Unsealed {
                first_seq: self.segment.first.unwrap_or(self.entries + 1),
                entries: self.segment.counts.total(),
                partial_line,
            }
        };
        Ok(VerifySummary {
            entries: self.entries,
            last_hash: hex32(&self.prev),
            alg: alg_of(self.key.as_ref()),
            seals: self.seals,
            end,
            unsealed_sessions: self.unsealed_sessions,
            first_unsealed_session: self.first_unsealed_session,
        })
    }

    /// Applies a checked entry to the open session; checks a seal against it.
    fn check_session(
        &mut self,
        seq: u64,
        record: &[u8],
        hash_before: &[u8; 32],
    ) -> Result<(), VerifyErrorKind> {
        match self.segment.step(seq, entry_kind(record)) {
            SegmentStep::Counted => Ok(()),
            SegmentStep::Restarted { unsealed } => {
                if let Some(range) = unsealed {
                    self.unsealed_sessions += 1;
                    self.first_unsealed_session.get_or_insert(range);
                }
                Ok(())
            }
            SegmentStep::Sealed(closed) => {
                let seal: Seal =
                    serde_json::from_slice(record).map_err(|_| VerifyErrorKind::BadSeal)?;
                let mismatch = if Some(seal.first_seq) != closed.first {
                    Some(SealField::FirstSeq)
                } else if seal.entries != closed.counts.total() {
                    Some(SealField::Entries)
                } else if seal.kinds != closed.counts {
                    Some(SealField::Kinds)
                } else if unhex32(&seal.last_hash) != Some(*hash_before) {
                    Some(SealField::LastHash)
                } else {
                    None
                };
                match mismatch {
                    Some(field) => Err(VerifyErrorKind::SealMismatch(field)),
                    None => {
                        self.seals += 1;
                        Ok(())
                    }
                }
            }
        }
    }

    fn too_long(&self) -> VerifyErrorKind {
        VerifyErrorKind::LineTooLong {
            limit: self.max_line_bytes,
        }
    }

    fn fail(&mut self, line: u64, kind: VerifyErrorKind) -> VerifyError {
        let e = VerifyError { line, kind };
        self.failed = Some(e);
        e
    }

    fn check_line(
        &mut self,
        line: &[u8],
        on_entry: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<(), VerifyError> {
        self.lines += 1;
        let line_no = self.lines;
        if let Some(cut) = self.pending_cut {
            // A line follows, so the cut line was not the last: it is just bad.
            return Err(self.fail(cut, VerifyErrorKind::BadJson));
        }
        if line.len() > self.max_line_bytes {
            return Err(self.fail(line_no, self.too_long()));
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let parsed = parse_line(line, self.key.as_ref(), &mut scratch);
        let result = match parsed {
            Err(LineFault::Cut) => {
                self.pending_cut = Some(line_no);
                Ok(())
            }
            Err(LineFault::Kind(kind)) => Err(kind),
            Ok(p) => {
                let before = self.prev;
                self.check_links(&p)
                    .and_then(|()| self.check_session(p.seq, p.record, &before))
                    .map(|()| on_entry(p.seq, p.record))
            }
        };
        self.scratch = scratch;
        result.map_err(|kind| self.fail(line_no, kind))
    }

    fn check_links(&mut self, p: &ParsedLine<'_>) -> Result<(), VerifyErrorKind> {
        let expected = self.entries + 1;
        if p.seq != expected {
            return Err(VerifyErrorKind::SequenceGap {
                expected,
                found: p.seq,
            });
        }
        if p.prev != Some(self.prev) {
            return Err(VerifyErrorKind::BrokenLink);
        }
        let hash = p
            .hash
            .filter(|h| link_hash_matches(self.key.as_ref(), &self.prev, p.record, h))
            .ok_or(VerifyErrorKind::HashMismatch)?;
        self.prev = hash;
        self.entries = expected;
        Ok(())
    }
}

/// Verifies a whole log held in memory (see [`AuditVerifier`] to stream it).
pub fn verify(log: &[u8], key: Option<&AuditKey>) -> Result<VerifySummary, VerifyError> {
    let mut verifier = AuditVerifier::new(key);
    verifier.push(log)?;
    verifier.finish()
}

#[cfg(test)]
mod tests;
