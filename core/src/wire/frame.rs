//! Newline-delimited framing with a byte limit (MCP stdio).
//!
//! MCP over stdio sends one JSON-RPC message per line. [`Framer`] turns an
//! arbitrary sequence of byte chunks (as read from a pipe) into those lines,
//! with a hard limit on how much memory one line may take.
//!
//! # Framing rules
//!
//! - A **line** is the bytes before a `\n`. The `\n` itself belongs to no
//!   frame.
//! - The **frame** is the line with *one* trailing `\r` removed, so both `\n`
//!   and `\r\n` endings work. A `\r` anywhere else (in the middle, or a second
//!   one before the last: `a\r\r\n` gives `a\r`) is kept.
//! - An empty frame (an empty line, or a line that is a lone `\r`) is ignored
//!   and counted in [`FramerStats::empty_lines`].
//! - A frame that is not valid UTF-8 is repaired by default: each invalid
//!   sequence becomes U+FFFD, as the TypeScript SDK's decoder does, and the
//!   frame is handed out with [`FrameText::repair`] saying so (counted in
//!   [`FramerStats::utf8_repaired`]). With [`InvalidUtf8Policy::Refuse`], or
//!   when the repaired text would pass the wire limit, it gives
//!   [`FrameError::InvalidUtf8`] with the line's top-level id if one can be
//!   found ([`refused_line_id`]), so that a session can fail the request it
//!   answers at once; framing goes on with the next line.
//! - Lengths are in bytes.
//!
//! # The limit
//!
//! [`FramerConfig::max_frame`] (default [`DEFAULT_MAX_FRAME`], 8 MiB) limits
//! the **line**: the bytes before `\n`, *including* a trailing `\r`. A line of
//! exactly `max_frame` bytes passes; `max_frame + 1` bytes do not. Counting the
//! `\r` keeps the rule identical to [`crate::message`]'s encoders, which refuse
//! a message whose bytes before the `\n` exceed `max_frame` (and never write a
//! `\r`): every message the encoder accepts under a limit passes a framer with
//! the same limit. A peer that ends lines with `\r\n` gets one byte less of
//! payload. It also means the framer never needs to hold more than `max_frame`
//! bytes to decide.
//!
//! # Oversized lines
//!
//! When the `max_frame + 1`-th byte of a line arrives and it is not the
//! newline, the framer reports [`FrameError::Oversized`] **at once**, without
//! waiting for the newline (which might never come), and frees the partial
//! line. Then, with [`OversizedPolicy::Discard`] (the default), it drops every
//! byte up to the next `\n` without storing it, reports
//! [`FrameError::OversizedEnded`] with the line's total length when that
//! newline arrives, and resumes framing after it. With
//! [`OversizedPolicy::Close`] it stops framing instead: [`Framer::is_closed`]
//! turns true and further input is only counted in [`FramerStats::bytes`].
//!
//! With `Discard`, every `Oversized` is followed by exactly one
//! `OversizedEnded` or, if the stream ends first, one
//! [`FrameError::TruncatedAtEof`].
//!
//! ## Id recovery
//!
//! So that the session can still answer an oversized request with an error
//! carrying its id, `Oversized` has an `id_hint`: [`recover_id`] run on the
//! first `min(id_scan_limit, max_frame)` bytes of the line
//! ([`FramerConfig::id_scan_limit`], default [`DEFAULT_ID_SCAN_LIMIT`] = 256).
//! `recover_id` is a small bounded JSON scanner that returns the top-level
//! `"id"` member only when it is unambiguous within those bytes: an integer or
//! a string (escapes decoded), complete (a number only when a byte follows it,
//! since `123` cut from `12345` looks complete). A nested
//! `"id"` or one inside a string value is never taken; a value cut by the scan
//! limit, a non-integer or `null` id, two top-level ids or any syntax error in
//! the scanned bytes give `None`. It may miss an id; it never returns a wrong
//! one.
//!
//! Member order is free in JSON, and the TypeScript SDK writes `{result,
//! jsonrpc, id}`: the id of a large response is usually *last*, far past any
//! prefix. So, with `Discard` and a non-zero `id_scan_limit`, the whole line
//! also goes through an [`IdScanner`] as it is discarded (each byte once,
//! nothing stored but the id), and its outcome rides on
//! [`FrameError::OversizedEnded`] as `recovered`: [`IdRecovery::Found`] when
//! the line is one valid JSON object whose top-level `"id"` is an integer or a
//! string (escapes decoded) of at most `id_scan_limit` bytes, wherever the
//! member sits; otherwise why not (absent, ambiguous, not an id, too long, not
//! JSON). `hinted` says the line's `Oversized` already carried an `id_hint`,
//! so a session acts on one of them only: a request whose id comes first still
//! fails at once, one whose id comes last fails when its newline arrives. A
//! line ending without a usable id is counted
//! ([`FramerStats::oversized_ids_missing`]) and logged at WARN: nothing can be
//! failed for it, so its request (if any) runs to its deadline. The early hint
//! and the whole-line scan can disagree only on a line with two top-level
//! `"id"` members (the hint sees the first, the scan reports `Ambiguous`).
//!
//! # End of stream
//!
//! [`Framer::finish`] reports an unterminated line as
//! [`FrameError::TruncatedAtEof`] with its length in bytes (it is **not**
//! delivered as a frame). A lone trailing `\r` counts as such a line. An
//! oversized line still being discarded at end of stream is reported the same
//! way, with its total length, in place of its `OversizedEnded`. After
//! `finish` the framer is empty and ready for a new stream; counters are kept.
//! A framer closed by [`OversizedPolicy::Close`] stays closed (`finish`
//! reports nothing then) until [`Framer::reset`].
//!
//! # Performance
//!
//! Each byte is scanned for `\n` once, with `memchr`, and scanning resumes
//! where it stopped: a partial line is never rescanned. The only other
//! per-byte work on the hot path is UTF-8 validation of each frame.
//!
//! Bytes come in one of two ways:
//!
//! - [`Framer::push`] takes a chunk the caller read into a buffer of its own.
//!   A frame lying wholly inside it is handed out borrowed from it, without
//!   copying; only a line split across chunks is copied, once, into the
//!   framer's buffer.
//! - [`Framer::read_room`] lends room in the framer's buffer, right after the
//!   partial line, and the adapter reads straight into it; [`Framer::filled`]
//!   then frames what came in (the unbuffered style of rustls and quinn). A
//!   large frame is gathered where it lands: no copy at all between the pipe
//!   and the frame. The adapters read the server's stdout this way.
//!
//! A frame of at least [`LEND_MIN_FRAME`] (256 KiB) gathered in the buffer is
//! *lent* ([`FrameText::is_lent`]): whoever wants it owned takes the buffer
//! itself with [`FrameText::into_string`], and the framer starts a new one
//! (copying into it only the bytes read after the frame, at most
//! [`READ_ROOM`]). So one copy of a large frame is live, in its owner's
//! hands. A lent frame that is not taken goes back to the framer.
//!
//! # Memory
//!
//! The framer owns one buffer, holding the partial line at the end of the last
//! chunk or read, and the room lent for the next read: never more than
//! `max_frame + 1` bytes (the one byte past the limit that shows a line is
//! oversized). Its capacity:
//!
//! - is allocated on first need, at [`SMALL_BUFFER_CAPACITY`] (8 KiB, or
//!   `max_frame + 1` if smaller) unless more is needed at once;
//! - doubles while it stays within [`BUFFER_DOUBLING_LIMIT`] (64 KiB);
//! - beyond that, is set in one step to exactly `max_frame + 1`, never more.
//!   Growing in one step from at most 64 KiB means that even while the buffer
//!   is being reallocated (old and new block both live) the framer holds at
//!   most `max_frame + 1 + 64 KiB`. The capacity is then kept for later
//!   frames (only pages written count in a process's RSS);
//! - is released (back to at most 8 KiB) after an oversized line, by
//!   [`Framer::finish`], [`Framer::reset`], and on request by
//!   [`Framer::shrink_buffer`]; a lent frame that is taken takes it along.
//!
//! Worst-case heap held by a framer: `max_frame + 1 + 64 KiB` (momentarily,
//! during the one large reallocation), plus, only while an oversized line is
//! reported, [`recover_id`]'s few small allocations (decoded strings, each at
//! most `id_scan_limit` bytes), and while an oversized line is discarded the
//! [`IdScanner`]'s one buffer, at most `max(id_scan_limit, 21) + 4` bytes,
//! held only while the id's value is read. Discarded bytes are counted, never
//! stored. The scan costs nothing on lines within the limit. A frame that is
//! not valid UTF-8 and is repaired ([`InvalidUtf8Policy::Repair`]) is built
//! as a new string of at most `max_frame` bytes, live while it is handed out
//! (or for as long as its taker keeps it): with repairs the bound is
//! `2 × max_frame + 1 + 64 KiB`; [`InvalidUtf8Policy::Refuse`] keeps the
//! first one (a refused line costs one [`IdScanner`] pass).
//! `tests/alloc_bound.rs` measures this bound with a counting allocator.
//!
//! ```
//! use mcp_stdio_core::frame::{Framer, FramerConfig, FrameEvent};
//!
//! let mut framer = Framer::new(FramerConfig::default());
//! let mut frames = Vec::new();
//! for chunk in [&b"{\"id\":1}\r\n{\"i"[..], b"d\":2}\n\n"] {
//!     framer.push(chunk, |event| match event {
//!         FrameEvent::Frame(text) => frames.push(text.into_string()),
//!         FrameEvent::Error(e) => panic!("{e}"),
//!     });
//! }
//! framer.finish(|_| unreachable!("nothing left"));
//! assert_eq!(frames, ["{\"id\":1}", "{\"id\":2}"]);
//! assert_eq!(framer.stats().empty_lines, 1);
//! ```

use std::borrow::Cow;

use memchr::memchr;

pub use crate::id_scan::{IdRecovery, IdScanner};
use crate::message::Id;

/// Default wire limit: 8 MiB.
///
/// Chosen from the hosts people run: rmcp reads lines up to 16 MiB and the
/// Python SDK has no limit, so a smaller default made results fail through
/// us that work without us (a 5 MiB `read_text_file` did); the TypeScript
/// SDK, inside most hosts, closes the whole connection when its read buffer
/// passes 10 MiB (the line plus whatever arrived after it), so a line we
/// forward must stay well below that. 8 MiB is also where Codex caps a
/// server's stdout line.
pub const DEFAULT_MAX_FRAME: usize = 8 * 1024 * 1024;
/// Default number of leading bytes of an oversized frame scanned for its id.
pub const DEFAULT_ID_SCAN_LIMIT: usize = 256;
/// Capacity of the framer's buffer when first allocated, and the most it keeps
/// after an oversized line: 8 KiB (or `max_frame + 1`, if smaller).
pub const SMALL_BUFFER_CAPACITY: usize = 8 * 1024;
/// The buffer's capacity doubles up to this size (64 KiB); a partial line
/// longer than this makes it grow, in one step, to exactly `max_frame + 1`.
pub const BUFFER_DOUBLING_LIMIT: usize = 64 * 1024;
/// The most bytes lent for one read by [`Framer::read_room`]: 64 KiB, what a
/// Linux pipe holds by default.
pub const READ_ROOM: usize = 64 * 1024;
/// A frame of at least this many bytes (256 KiB) gathered in the framer's
/// buffer is lent: [`FrameText::into_string`] takes the buffer itself.
/// Smaller ones are cheaper to copy than a new buffer is to grow (and lending
/// costs up to two copies of the bytes read after the frame).
pub const LEND_MIN_FRAME: usize = 256 * 1024;

/// What to do after a frame passes the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OversizedPolicy {
    /// Discard up to the next newline, then resume framing (default).
    #[default]
    Discard,
    /// Stop framing: the session is to be closed.
    Close,
}

/// What to do with a frame that is not valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum InvalidUtf8Policy {
    /// Replace each invalid sequence with U+FFFD and hand the frame out,
    /// marked ([`FrameText::repair`]) and counted (default). This is what
    /// the TypeScript SDK's decoder does, so a host that works with a server
    /// directly keeps working through us; Python hosts that would tear the
    /// session down on such a line get valid text instead. A repair that
    /// would pass the wire limit (each bad byte can become three) is refused.
    #[default]
    Repair,
    /// Drop the frame with [`FrameError::InvalidUtf8`], carrying its id when
    /// one can be found, so its request fails at once.
    Refuse,
}

/// Framer limits.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FramerConfig {
    max_frame: usize,
    id_scan_limit: usize,
    oversized: OversizedPolicy,
    invalid_utf8: InvalidUtf8Policy,
}

impl Default for FramerConfig {
    fn default() -> Self {
        Self {
            max_frame: DEFAULT_MAX_FRAME,
            id_scan_limit: DEFAULT_ID_SCAN_LIMIT,
            oversized: OversizedPolicy::Discard,
            invalid_utf8: InvalidUtf8Policy::Repair,
        }
    }
}

impl FramerConfig {
    /// Sets the wire limit: the most bytes a line may have before its `\n`,
    /// counting a trailing `\r`. Default [`DEFAULT_MAX_FRAME`] (8 MiB).
    ///
    /// Memory: a framer holds at most `max_frame + 1 + 64 KiB` of heap (see the
    /// [module docs](self)). A partial line longer than 64 KiB makes the
    /// framer reserve exactly `max_frame + 1` bytes at once, so the value must be a
    /// size the process can allocate.
    pub fn max_frame(&mut self, bytes: usize) -> &mut Self {
        self.max_frame = bytes;
        self
    }
    /// Sets how many leading bytes of an oversized line [`recover_id`] scans
    /// for the message id at once (never past `max_frame` bytes), and the
    /// longest string id the whole-line [`IdScanner`] keeps (a longer one
    /// counts as absent: [`IdRecovery::TooLong`]). Default
    /// [`DEFAULT_ID_SCAN_LIMIT`] (256). Memory: at most this many bytes (plus
    /// one character) are allocated for the recovered id; 0 turns both scans
    /// off.
    pub fn id_scan_limit(&mut self, bytes: usize) -> &mut Self {
        self.id_scan_limit = bytes;
        self
    }
    /// Sets the oversized policy. Default [`OversizedPolicy::Discard`].
    pub fn oversized_policy(&mut self, policy: OversizedPolicy) -> &mut Self {
        self.oversized = policy;
        self
    }
    /// Sets what to do with a frame that is not valid UTF-8. Default
    /// [`InvalidUtf8Policy::Repair`]. Memory: a repair builds a new string of
    /// at most `max_frame` bytes, handed out like a large frame.
    pub fn invalid_utf8(&mut self, policy: InvalidUtf8Policy) -> &mut Self {
        self.invalid_utf8 = policy;
        self
    }
    /// The invalid UTF-8 policy.
    pub fn get_invalid_utf8(&self) -> InvalidUtf8Policy {
        self.invalid_utf8
    }
    /// The wire limit.
    pub fn get_max_frame(&self) -> usize {
        self.max_frame
    }
    /// The id scan limit.
    pub fn get_id_scan_limit(&self) -> usize {
        self.id_scan_limit
    }
    /// The oversized policy.
    pub fn get_oversized_policy(&self) -> OversizedPolicy {
        self.oversized
    }
}

/// One output of the framer.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameEvent<'a> {
    /// A complete frame: never empty, without its line ending. Borrowed from
    /// the pushed chunk (or the read) when the whole line lies inside it,
    /// else from the framer's buffer; a large frame gathered in the buffer is
    /// lent, so that it can be taken without a copy ([`FrameText`]).
    Frame(FrameText<'a>),
    /// A framing error. Framing goes on after it, except after
    /// [`FrameError::Oversized`] under [`OversizedPolicy::Close`].
    Error(FrameError),
}

/// Framing errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A line passed the limit; reported as soon as its `max_frame + 1`-th
    /// byte arrived, before its newline.
    #[error("frame exceeds the wire limit of {limit} bytes")]
    Oversized {
        /// The limit.
        limit: usize,
        /// The top-level id found by [`recover_id`] in the line's first
        /// `min(id_scan_limit, max_frame)` bytes, if unambiguous.
        id_hint: Option<Id>,
    },
    /// The newline ending an oversized line arrived (policy `Discard`).
    #[error("oversized frame of {discarded} bytes discarded (id {})", recovered.kind())]
    OversizedEnded {
        /// Bytes in the whole oversized line, before its `\n` (a trailing `\r`
        /// included).
        discarded: u64,
        /// The top-level id found by a streaming scan of the *whole* line
        /// ([`IdScanner`]), wherever the member sits.
        recovered: IdRecovery,
        /// The line's `Oversized` already carried an `id_hint`: whoever acted
        /// on it must not act on `recovered` again.
        hinted: bool,
    },
    /// A frame is not valid UTF-8 and was not repaired
    /// ([`InvalidUtf8Policy::Refuse`], or a repair that would pass the wire
    /// limit). The frame is dropped.
    #[error("frame of {len} bytes is not valid UTF-8 (valid up to byte {valid_up_to})")]
    InvalidUtf8 {
        /// Frame length (after removing a trailing `\r`).
        len: usize,
        /// Valid prefix length.
        valid_up_to: usize,
        /// The frame's top-level id, when [`refused_line_id`] finds one: the
        /// request it answers can fail at once.
        id: Option<Id>,
    },
    /// End of stream inside a line (an unterminated last line, or an oversized
    /// line still being discarded).
    #[error("stream ended inside a frame after {bytes} bytes")]
    TruncatedAtEof {
        /// Bytes of the unfinished line (for an oversized line: all of them,
        /// discarded ones included).
        bytes: u64,
    },
}

/// Counters kept by the framer. They survive [`Framer::finish`] and
/// [`Framer::reset`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct FramerStats {
    /// Bytes pushed (including bytes pushed after a `Close`).
    pub bytes: u64,
    /// Frames handed out.
    pub frames: u64,
    /// Largest frame handed out.
    pub largest_frame: u64,
    /// Oversized frames.
    pub oversized: u64,
    /// Empty lines ignored.
    pub empty_lines: u64,
    /// Invalid UTF-8 frames refused ([`FrameError::InvalidUtf8`]).
    pub invalid_utf8: u64,
    /// Invalid UTF-8 frames repaired and handed out.
    pub utf8_repaired: u64,
    /// Bytes of oversized lines dropped (not counting their newlines).
    pub discarded_bytes: u64,
    /// Lines cut by end of stream ([`FrameError::TruncatedAtEof`]).
    pub truncated: u64,
    /// Oversized lines whose whole-line scan found their id.
    pub oversized_ids_found: u64,
    /// Oversized lines that ended without a usable id (absent, ambiguous,
    /// not an id, too long or not JSON); each is also a WARN event.
    pub oversized_ids_missing: u64,
}

/// A complete frame handed out by the framer: its text, and for a large frame
/// that was gathered in the framer's buffer, that buffer itself.
///
/// It derefs to `str`. [`FrameText::into_string`] gives an owned `String`:
/// for a lent frame ([`FrameText::is_lent`]) that is the framer's buffer,
/// handed over without a copy (the framer starts a new one); otherwise a copy.
/// A lent frame that is not taken goes back to the framer, which keeps its
/// buffer for the next large frame.
pub struct FrameText<'a>(Text<'a>, Option<Utf8Repair>);

/// How a frame that was not valid UTF-8 was repaired
/// ([`InvalidUtf8Policy::Repair`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Utf8Repair {
    /// The frame's length as it came, in bytes.
    pub original_len: usize,
    /// Valid prefix length of the original.
    pub valid_up_to: usize,
    /// Invalid sequences replaced with U+FFFD.
    pub replaced: usize,
}

enum Text<'a> {
    /// Borrowed from the pushed chunk or from the framer's buffer.
    Borrowed(&'a str),
    /// The framer's buffer, holding exactly this frame.
    Lent(&'a mut String),
}

impl<'a> FrameText<'a> {
    /// The frame's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Text::Borrowed(text) => text,
            Text::Lent(text) => text.as_str(),
        }
    }

    /// True when the frame is the framer's own buffer, so that
    /// [`FrameText::into_string`] takes it without a copy. That is the case
    /// for a frame of at least [`LEND_MIN_FRAME`] bytes that was gathered
    /// across several chunks or reads.
    pub fn is_lent(&self) -> bool {
        matches!(self.0, Text::Lent(_))
    }

    /// `Some` when the frame came as invalid UTF-8 and was repaired: its
    /// text then has U+FFFD where the invalid sequences were.
    pub fn repair(&self) -> Option<Utf8Repair> {
        self.1
    }

    /// The frame as an owned `String`: the framer's buffer when lent (no
    /// copy), else a copy of the text.
    pub fn into_string(self) -> String {
        match self.0 {
            Text::Borrowed(text) => text.to_owned(),
            Text::Lent(text) => std::mem::take(text),
        }
    }
}

impl std::ops::Deref for FrameText<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for FrameText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for FrameText<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for FrameText<'_> {}

impl PartialEq<str> for FrameText<'_> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for FrameText<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<'a> From<&'a str> for FrameText<'a> {
    fn from(text: &'a str) -> Self {
        Self(Text::Borrowed(text), None)
    }
}

/// Room in the framer's buffer for the next read, lent by
/// [`Framer::read_room`]; after the read, [`Framer::filled`] frames what
/// came in.
///
/// Two ways to fill it, both without a copy of their own:
///
/// - [`ReadRoom::vec`]: the buffer as a `Vec` whose spare capacity holds at
///   least [`ReadRoom::len`] bytes, for reads that append into spare capacity
///   (tokio's `AsyncReadExt::read_buf`, `Read::take(n).read_to_end`): no
///   zeroing at all.
/// - [`ReadRoom::zeroed`]: the room as initialized bytes for a plain
///   `read(&mut [u8])`. Bytes are zeroed once, the first time the buffer
///   grows over them (the core has no `unsafe`, so it cannot lend
///   uninitialized memory as a slice).
#[derive(Debug)]
pub struct ReadRoom<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
    room: usize,
}

impl<'a> ReadRoom<'a> {
    /// The most bytes to read now: at most [`READ_ROOM`], never past one byte
    /// over the wire limit for the line being gathered. Never 0.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.room
    }

    /// The buffer, for a read that appends at most [`ReadRoom::len`] bytes
    /// to it in place. Its spare capacity holds at least that many; then call
    /// [`Framer::filled`] with the number of bytes appended.
    pub fn vec(self) -> &'a mut Vec<u8> {
        self.buf.truncate(self.start);
        self.buf
    }

    /// The room as a slice of [`ReadRoom::len`] initialized bytes; read into
    /// its front, then call [`Framer::filled`] with the number of bytes read.
    pub fn zeroed(self) -> &'a mut [u8] {
        let end = self.start + self.room;
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        &mut self.buf[self.start..end]
    }
}

/// The framer: turns byte chunks into newline-delimited frames under a limit.
///
/// See the [module docs](self) for the rules, the limits and the memory bound.
#[derive(Debug)]
pub struct Framer {
    lines: Lines,
    /// `buf[..data]` is the partial line at the end of what was pushed or
    /// read (`data <= max_frame`); `buf[data..]`, when present, is room
    /// zeroed for reads ([`ReadRoom::zeroed`]), not data.
    buf: Vec<u8>,
    data: usize,
}

/// The framer's state apart from its buffer, so that lines borrowed from the
/// buffer can be framed while the state changes.
#[derive(Debug)]
struct Lines {
    config: FramerConfig,
    stats: FramerStats,
    /// Inside an oversized line (policy `Discard`): its bytes so far.
    discarding: Option<u64>,
    /// Scanning the oversized line being discarded for its id (`None` when
    /// `id_scan_limit` is 0).
    id_scan: Option<IdScanner>,
    /// The oversized line being discarded had an `id_hint`.
    hinted: bool,
    /// Stopped by policy `Close`.
    closed: bool,
}

impl Framer {
    /// A framer with the given limits. Allocates nothing until a line is split
    /// across chunks or a read room is asked for.
    pub fn new(config: FramerConfig) -> Self {
        Self {
            lines: Lines {
                config,
                stats: FramerStats::default(),
                discarding: None,
                id_scan: None,
                hinted: false,
                closed: false,
            },
            buf: Vec::new(),
            data: 0,
        }
    }

    /// Feeds one chunk; calls `on_event` for each event, in stream order.
    ///
    /// Chunks may be cut anywhere (inside a UTF-8 character, between `\r` and
    /// `\n`): the events are the same as for the whole stream in one chunk.
    /// Lines wholly inside `chunk` are handed out borrowed from it; the rest
    /// of a line is copied into the framer's buffer.
    pub fn push(&mut self, chunk: &[u8], mut on_event: impl FnMut(FrameEvent<'_>)) {
        self.lines.stats.bytes += chunk.len() as u64;
        // Room zeroed for reads is not data: appending starts after the data.
        self.buf.truncate(self.data);
        let max = self.lines.config.max_frame;
        let mut rest = chunk;
        let mut oversized = false;
        loop {
            if self.lines.closed || rest.is_empty() {
                break;
            }
            if self.lines.discarding.is_some() {
                match self.lines.discard(rest, &mut on_event) {
                    None => break,
                    Some(i) => {
                        rest = &rest[i + 1..];
                        continue;
                    }
                }
            }
            if self.data > 0 {
                // Complete the buffered line; look no further than one byte
                // past what the limit still allows.
                let room = max - self.data;
                let head = &rest[..rest.len().min(room + 1)];
                match memchr(b'\n', head) {
                    Some(i) => {
                        self.append(&head[..i]);
                        rest = &rest[i + 1..];
                        let end = self.data;
                        self.data = 0;
                        self.frame_buffered(end, end, end, &mut on_event);
                    }
                    None if head.len() <= room => {
                        self.append(head);
                        break;
                    }
                    None => {
                        self.lines
                            .oversized(&self.buf[..self.data], head, &mut on_event);
                        self.data = 0;
                        oversized = true;
                        rest = &rest[head.len()..];
                    }
                }
                continue;
            }
            // Nothing buffered: lines wholly inside `rest` are borrowed.
            let head = &rest[..rest.len().min(max.saturating_add(1))];
            match memchr(b'\n', head) {
                Some(i) => {
                    self.lines.deliver(&head[..i], &mut on_event);
                    rest = &rest[i + 1..];
                }
                None if head.len() <= max => {
                    // `head` is all of `rest`: keep the partial line.
                    self.append(head);
                    break;
                }
                None => {
                    self.lines.oversized(&[], head, &mut on_event);
                    oversized = true;
                    rest = &rest[head.len()..];
                }
            }
        }
        self.settle(oversized);
    }

    /// Lends room in the framer's buffer for the next read: the adapter
    /// reads straight into it (no read buffer of its own, no copy), then
    /// calls [`Framer::filled`]. The room follows the partial line, so a
    /// large frame is gathered in place. See [`ReadRoom`] for the two ways
    /// to fill it; "Memory" in the module docs for how the buffer grows.
    pub fn read_room(&mut self) -> ReadRoom<'_> {
        let max = self.lines.config.max_frame;
        let room = READ_ROOM.min(max.saturating_add(1) - self.data);
        self.grow(self.data + room);
        ReadRoom {
            buf: &mut self.buf,
            start: self.data,
            room,
        }
    }

    /// Frames the `n` bytes just read into the room from
    /// [`Framer::read_room`] (appended through [`ReadRoom::vec`], or written
    /// to the front of [`ReadRoom::zeroed`]); calls `on_event` for each
    /// event, in stream order. The events are the same as [`Framer::push`]
    /// would give for those bytes; a large frame gathered across reads is
    /// handed out lent ([`FrameText::is_lent`]).
    pub fn filled(&mut self, n: usize, mut on_event: impl FnMut(FrameEvent<'_>)) {
        let start = self.data;
        let mut end = start.saturating_add(n).min(self.buf.len());
        self.lines.stats.bytes += (end - start) as u64;
        let max = self.lines.config.max_frame;
        // `buf[..pos]` is searched (the partial line holds no newline);
        // `buf[line..]` is the line being framed; `gathered`: that line began
        // in an earlier read and sits at the front of the buffer.
        let mut pos = start;
        let mut line = 0;
        let mut gathered = start > 0;
        let mut oversized = false;
        self.data = 0;
        loop {
            if self.lines.closed {
                break;
            }
            if self.lines.discarding.is_some() {
                match self.lines.discard(&self.buf[pos..end], &mut on_event) {
                    None => break,
                    Some(i) => {
                        pos += i + 1;
                        line = pos;
                    }
                }
            }
            let limit = end.min(line.saturating_add(max).saturating_add(1));
            match memchr(b'\n', &self.buf[pos..limit]) {
                Some(i) if gathered && pos + i >= LEND_MIN_FRAME => {
                    // Lent: what follows the newline moves to the front of the
                    // framer's next buffer, unsearched.
                    end = self.frame_buffered(pos + i, pos + i + 1, end, &mut on_event);
                    pos = 0;
                    line = 0;
                    gathered = false;
                }
                Some(i) => {
                    let nl = pos + i;
                    self.lines.deliver(&self.buf[line..nl], &mut on_event);
                    pos = nl + 1;
                    line = pos;
                    gathered = false;
                }
                None if end - line <= max => {
                    if line > 0 {
                        self.buf.copy_within(line..end, 0);
                    }
                    self.data = end - line;
                    break;
                }
                None => {
                    let over = line + max + 1;
                    self.lines
                        .oversized(&self.buf[line..over], &[], &mut on_event);
                    oversized = true;
                    pos = over;
                    line = over;
                    gathered = false;
                }
            }
        }
        self.settle(oversized);
    }

    /// End of stream: reports an unfinished line as
    /// [`FrameError::TruncatedAtEof`], then empties the framer (releasing its
    /// buffer) so that it can take a new stream. Counters are kept; a closed
    /// framer reports nothing and stays closed.
    pub fn finish(&mut self, mut on_event: impl FnMut(FrameEvent<'_>)) {
        let lines = &mut self.lines;
        lines.hinted = false;
        if let Some(scan) = &mut lines.id_scan {
            let _ = scan.finish();
        }
        let pending = match lines.discarding.take() {
            Some(seen) => seen,
            None => self.data as u64,
        };
        let report = pending > 0 && !lines.closed;
        self.buf = Vec::new();
        self.data = 0;
        if report {
            lines.stats.truncated += 1;
            on_event(FrameEvent::Error(FrameError::TruncatedAtEof {
                bytes: pending,
            }));
        }
    }

    /// Drops any partial line without reporting it, releases the buffer and
    /// reopens a framer closed by [`OversizedPolicy::Close`]. Counters are
    /// kept.
    pub fn reset(&mut self) {
        self.buf = Vec::new();
        self.data = 0;
        let lines = &mut self.lines;
        lines.discarding = None;
        lines.hinted = false;
        if let Some(scan) = &mut lines.id_scan {
            let _ = scan.finish();
        }
        lines.closed = false;
    }

    /// Counters.
    pub fn stats(&self) -> &FramerStats {
        &self.lines.stats
    }
    /// Config.
    pub fn config(&self) -> &FramerConfig {
        &self.lines.config
    }
    /// True once the `Close` policy has stopped framing.
    pub fn is_closed(&self) -> bool {
        self.lines.closed
    }
    /// True while the rest of an oversized line is being discarded.
    pub fn is_discarding(&self) -> bool {
        self.lines.discarding.is_some()
    }
    /// Bytes of the partial line held in the buffer (at most `max_frame`).
    pub fn buffered_len(&self) -> usize {
        self.data
    }
    /// Current capacity of the buffer in bytes (at most `max_frame + 1`).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }
    /// Frees the buffer if it holds no partial line (e.g. when a session goes
    /// idle after a large message); otherwise does nothing.
    pub fn shrink_buffer(&mut self) {
        if self.data == 0 {
            self.buf = Vec::new();
        }
    }

    /// Appends to the partial line; the caller guarantees that
    /// `data + bytes.len() <= max_frame`.
    fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.grow(self.data + bytes.len());
        self.buf.truncate(self.data);
        self.buf.extend_from_slice(bytes);
        self.data += bytes.len();
    }

    /// Makes the capacity at least `need` (`need <= max_frame + 1`). See
    /// "Memory" in the module docs.
    fn grow(&mut self, need: usize) {
        if need <= self.buf.capacity() {
            return;
        }
        let max = self.lines.config.max_frame.saturating_add(1);
        let target = if need <= BUFFER_DOUBLING_LIMIT {
            need.next_power_of_two()
                .clamp(SMALL_BUFFER_CAPACITY, BUFFER_DOUBLING_LIMIT)
        } else {
            max
        };
        let target = target.min(max).max(need);
        self.buf.reserve_exact(target - self.buf.len());
    }

    /// After an oversized line the buffer goes back to at most
    /// [`SMALL_BUFFER_CAPACITY`] (keeping a partial line that follows it).
    fn settle(&mut self, oversized: bool) {
        if oversized && self.buf.capacity() > SMALL_BUFFER_CAPACITY.max(self.data) {
            let mut small = Vec::with_capacity(SMALL_BUFFER_CAPACITY.max(self.data));
            small.extend_from_slice(&self.buf[..self.data]);
            self.buf = small;
        }
    }

    /// `buf[..nl]` is a line gathered in the buffer (its newline consumed),
    /// `buf[after..end]` bytes read after it. Hands the line out — one of at
    /// least [`LEND_MIN_FRAME`] bytes lent: the buffer itself — and leaves
    /// the bytes after it at the front of the buffer; returns their length.
    fn frame_buffered(
        &mut self,
        nl: usize,
        after: usize,
        end: usize,
        on_event: &mut impl FnMut(FrameEvent<'_>),
    ) -> usize {
        if nl < LEND_MIN_FRAME {
            self.lines.deliver(&self.buf[..nl], on_event);
            self.buf.copy_within(after..end, 0);
            return end - after;
        }
        let mut next = Vec::with_capacity(SMALL_BUFFER_CAPACITY.max(end - after));
        next.extend_from_slice(&self.buf[after..end]);
        let mut line = std::mem::replace(&mut self.buf, next);
        line.truncate(nl);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let back = match String::from_utf8(line) {
            Ok(mut text) => {
                self.lines.count_frame(text.len());
                on_event(FrameEvent::Frame(FrameText(Text::Lent(&mut text), None)));
                text.into_bytes()
            }
            Err(e) => {
                let valid_up_to = e.utf8_error().valid_up_to();
                let bytes = e.into_bytes();
                self.lines.deliver_invalid(&bytes, valid_up_to, on_event);
                bytes
            }
        };
        // Not taken: the large block goes on serving the next large frame.
        if back.capacity() > self.buf.capacity() {
            let mut back = back;
            back.clear();
            back.extend_from_slice(&self.buf);
            self.buf = back;
        }
        end - after
    }
}

impl Lines {
    /// Discards bytes of an oversized line: returns the index of the newline
    /// that ends it, if `bytes` holds it (the line's end is then reported).
    fn discard(
        &mut self,
        bytes: &[u8],
        on_event: &mut impl FnMut(FrameEvent<'_>),
    ) -> Option<usize> {
        let seen = self.discarding?;
        match memchr(b'\n', bytes) {
            None => {
                self.discarding = Some(seen + bytes.len() as u64);
                self.stats.discarded_bytes += bytes.len() as u64;
                if let Some(scan) = &mut self.id_scan {
                    scan.push(bytes);
                }
                None
            }
            Some(i) => {
                self.discarding = None;
                self.stats.discarded_bytes += i as u64;
                let discarded = seen + i as u64;
                let recovered = match &mut self.id_scan {
                    Some(scan) => {
                        scan.push(&bytes[..i]);
                        scan.finish()
                    }
                    None => IdRecovery::Off,
                };
                match &recovered {
                    IdRecovery::Found(_) => self.stats.oversized_ids_found += 1,
                    IdRecovery::Off => {}
                    missing => {
                        self.stats.oversized_ids_missing += 1;
                        tracing::warn!(
                            discarded,
                            outcome = missing.kind(),
                            "oversized frame ended without a usable top-level id: no request can be failed for it"
                        );
                    }
                }
                on_event(FrameEvent::Error(FrameError::OversizedEnded {
                    discarded,
                    recovered,
                    hinted: std::mem::take(&mut self.hinted),
                }));
                Some(i)
            }
        }
    }

    /// The line made of `held` and `head` has just passed the limit
    /// (`held.len() + head.len() == max_frame + 1`, no newline in either).
    fn oversized(&mut self, held: &[u8], head: &[u8], on_event: &mut impl FnMut(FrameEvent<'_>)) {
        let seen = (held.len() + head.len()) as u64;
        if self.config.oversized == OversizedPolicy::Discard && self.config.id_scan_limit > 0 {
            // The whole line goes through the scan: what is held now, then
            // every discarded chunk up to the newline.
            let limit = self.config.id_scan_limit;
            let scan = self.id_scan.get_or_insert_with(|| IdScanner::new(limit));
            scan.push(held);
            scan.push(head);
        }
        // The scanned prefix is fixed by the stream alone (not by where the
        // chunks were cut), and we have it: the line holds `max_frame + 1`
        // bytes.
        let scan = self.config.id_scan_limit.min(self.config.max_frame);
        let id_hint = if scan == 0 {
            None
        } else if held.len() >= scan {
            recover_id(&held[..scan])
        } else if held.is_empty() {
            recover_id(&head[..scan])
        } else {
            // At most `id_scan_limit` bytes, briefly.
            let mut prefix = Vec::with_capacity(scan);
            prefix.extend_from_slice(held);
            prefix.extend_from_slice(&head[..scan - held.len()]);
            recover_id(&prefix)
        };
        self.stats.oversized += 1;
        self.stats.discarded_bytes += seen;
        self.hinted = id_hint.is_some();
        match self.config.oversized {
            OversizedPolicy::Discard => self.discarding = Some(seen),
            OversizedPolicy::Close => self.closed = true,
        }
        on_event(FrameEvent::Error(FrameError::Oversized {
            limit: self.config.max_frame,
            id_hint,
        }));
    }

    fn count_frame(&mut self, len: usize) {
        self.stats.frames += 1;
        self.stats.largest_frame = self.stats.largest_frame.max(len as u64);
    }

    /// Hands out one line (without its `\n`) as a frame, an error or nothing.
    fn deliver(&mut self, line: &[u8], on_event: &mut impl FnMut(FrameEvent<'_>)) {
        let frame = match line {
            [body @ .., b'\r'] => body,
            _ => line,
        };
        if frame.is_empty() {
            self.stats.empty_lines += 1;
            return;
        }
        match std::str::from_utf8(frame) {
            Ok(text) => {
                self.count_frame(text.len());
                on_event(FrameEvent::Frame(FrameText(Text::Borrowed(text), None)));
            }
            Err(e) => self.deliver_invalid(frame, e.valid_up_to(), on_event),
        }
    }

    /// A frame that is not valid UTF-8: repaired and handed out, or refused
    /// with its id (see [`InvalidUtf8Policy`]).
    fn deliver_invalid(
        &mut self,
        frame: &[u8],
        valid_up_to: usize,
        on_event: &mut impl FnMut(FrameEvent<'_>),
    ) {
        if self.config.invalid_utf8 == InvalidUtf8Policy::Repair {
            let (len, replaced) = repaired_len(frame);
            if len <= self.config.max_frame {
                let mut text = String::with_capacity(len);
                for chunk in frame.utf8_chunks() {
                    text.push_str(chunk.valid());
                    if !chunk.invalid().is_empty() {
                        text.push(char::REPLACEMENT_CHARACTER);
                    }
                }
                self.stats.utf8_repaired += 1;
                self.count_frame(text.len());
                let repair = Utf8Repair {
                    original_len: frame.len(),
                    valid_up_to,
                    replaced,
                };
                on_event(FrameEvent::Frame(FrameText(
                    Text::Lent(&mut text),
                    Some(repair),
                )));
                return;
            }
        }
        self.stats.invalid_utf8 += 1;
        let id = refused_line_id(frame, self.config.id_scan_limit);
        on_event(FrameEvent::Error(FrameError::InvalidUtf8 {
            len: frame.len(),
            valid_up_to,
            id,
        }));
    }
}

/// The length of `bytes` with each invalid UTF-8 sequence replaced by U+FFFD
/// (as [`String::from_utf8_lossy`] does), and how many were replaced.
fn repaired_len(bytes: &[u8]) -> (usize, usize) {
    let mut len = 0;
    let mut replaced = 0;
    for chunk in bytes.utf8_chunks() {
        len += chunk.valid().len();
        if !chunk.invalid().is_empty() {
            len += char::REPLACEMENT_CHARACTER.len_utf8();
            replaced += 1;
        }
    }
    (len, replaced)
}

/// The top-level id of a line that is refused (not UTF-8, not JSON, not a
/// JSON-RPC message), so that the request it answers can get its outcome at
/// once instead of waiting for its deadline.
///
/// The whole line goes through an [`IdScanner`] (invalid UTF-8 sequences
/// read as U+FFFD, nothing copied): that finds the id wherever it sits when
/// the line is one JSON object. A line that is not JSON still gives the id
/// [`recover_id`] finds in its first `id_scan_limit` bytes, before any syntax
/// error there. Like both scanners it may miss an id and never returns a
/// wrong one; `id_scan_limit` 0 turns it off. Linear in the line, memory
/// bounded by `id_scan_limit`.
pub fn refused_line_id(line: &[u8], id_scan_limit: usize) -> Option<Id> {
    if id_scan_limit == 0 {
        return None;
    }
    let mut scan = IdScanner::new(id_scan_limit);
    let mut utf8 = [0; 4];
    let replacement = char::REPLACEMENT_CHARACTER
        .encode_utf8(&mut utf8)
        .as_bytes();
    for chunk in line.utf8_chunks() {
        scan.push(chunk.valid().as_bytes());
        if !chunk.invalid().is_empty() {
            scan.push(replacement);
        }
    }
    match scan.finish() {
        IdRecovery::Found(id) => Some(id),
        IdRecovery::NotJson => {
            let valid = line.utf8_chunks().next().map_or(0, |c| c.valid().len());
            recover_id(&line[..valid.min(id_scan_limit)])
        }
        _ => None,
    }
}

/// Bounded id recovery from the first bytes of a frame.
///
/// `prefix` is the start of a JSON text, possibly cut anywhere (even inside a
/// UTF-8 character). Returns the value of the top-level object's `"id"` member
/// when it is an integer (fitting `i64`) or a string, complete within `prefix`,
/// and unambiguous:
///
/// - the text so far must be valid JSON (any syntax error gives `None`);
/// - an `"id"` key in a nested object, or the text `"id"` inside a string
///   value, is not the id;
/// - a value cut by the end of `prefix` gives `None` — a number counts as cut
///   unless a byte follows it (`"id":123` at the very end may be `1234…`);
/// - a float, `null`, boolean, array or object id gives `None`;
/// - a second top-level `"id"` within `prefix` gives `None`;
/// - string escapes (`\"`, `\n`, `\u00e9`, surrogate pairs) are decoded; a
///   bad escape or a lone surrogate gives `None`. Keys are decoded too, so
///   `"\u0069d"` is the id key.
///
/// Never returns a wrong id: if it returns `Some`, a JSON parser reading the
/// complete text (if it is valid and has no duplicate keys) finds that id.
/// Work and memory are linear in `prefix.len()`; nesting deeper than 128
/// levels before the id gives `None`.
pub fn recover_id(prefix: &[u8]) -> Option<Id> {
    let text = match std::str::from_utf8(prefix) {
        Ok(text) => text,
        // Cut inside a character at the end: scan the complete ones.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&prefix[..e.valid_up_to()]).ok()?
        }
        Err(_) => return None,
    };
    let mut scan = IdScan { text, at: 0 };
    let mut id = None;
    match scan.object(&mut id) {
        Ok(()) | Err(Stop::Cut) => id,
        Err(Stop::Invalid) => None,
    }
}

/// Why [`IdScan`] stopped early.
enum Stop {
    /// The prefix ended.
    Cut,
    /// Not JSON, or the id is invalid or ambiguous.
    Invalid,
}

type Scan<T> = Result<T, Stop>;

/// A minimal JSON scanner over a prefix, for [`recover_id`].
struct IdScan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> IdScan<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }
    fn peek(&self) -> Scan<u8> {
        self.bytes().get(self.at).copied().ok_or(Stop::Cut)
    }
    fn bump(&mut self) -> Scan<u8> {
        let b = self.peek()?;
        self.at += 1;
        Ok(b)
    }
    fn expect(&mut self, want: u8) -> Scan<()> {
        if self.bump()? == want {
            Ok(())
        } else {
            Err(Stop::Invalid)
        }
    }
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// The top-level object; sets `id` when its id member is read.
    fn object(&mut self, id: &mut Option<Id>) -> Scan<()> {
        self.ws();
        self.expect(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.at += 1;
            return self.end();
        }
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return Err(Stop::Invalid);
            }
            let key = self.string(true)?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            if key == "id" {
                if id.is_some() {
                    return Err(Stop::Invalid);
                }
                *id = Some(self.id_value()?);
            } else {
                self.skip_value()?;
            }
            self.ws();
            match self.bump()? {
                b',' => {}
                b'}' => return self.end(),
                _ => return Err(Stop::Invalid),
            }
        }
    }

    /// Only whitespace may follow the top-level object.
    fn end(&mut self) -> Scan<()> {
        self.ws();
        if self.at == self.bytes().len() {
            Ok(())
        } else {
            Err(Stop::Invalid)
        }
    }

    fn id_value(&mut self) -> Scan<Id> {
        match self.peek()? {
            b'"' => Ok(Id::String(self.string(true)?.into_owned())),
            b'-' | b'0'..=b'9' => {
                let (number, integer) = self.number()?;
                if !integer {
                    return Err(Stop::Invalid);
                }
                number.parse().map(Id::Number).map_err(|_| Stop::Invalid)
            }
            _ => Err(Stop::Invalid),
        }
    }

    /// Skips one value of any kind, checking its syntax.
    fn skip_value(&mut self) -> Scan<()> {
        // Open containers, innermost in bit 0: 1 = object, 0 = array.
        let mut stack: u128 = 0;
        let mut depth = 0u32;
        loop {
            self.ws();
            match self.peek()? {
                b'"' => {
                    self.string(false)?;
                }
                b'-' | b'0'..=b'9' => {
                    self.number()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                open @ (b'{' | b'[') => {
                    self.at += 1;
                    self.ws();
                    let is_object = open == b'{';
                    if self.peek()? == if is_object { b'}' } else { b']' } {
                        self.at += 1;
                    } else {
                        if depth == u128::BITS {
                            return Err(Stop::Invalid);
                        }
                        stack = (stack << 1) | u128::from(is_object);
                        depth += 1;
                        if is_object {
                            self.member_key()?;
                        }
                        continue;
                    }
                }
                _ => return Err(Stop::Invalid),
            }
            // A value is complete: close containers until one goes on.
            loop {
                if depth == 0 {
                    return Ok(());
                }
                self.ws();
                let in_object = stack & 1 == 1;
                match self.bump()? {
                    b',' => {
                        if in_object {
                            self.member_key()?;
                        }
                        break;
                    }
                    b'}' if in_object => {}
                    b']' if !in_object => {}
                    _ => return Err(Stop::Invalid),
                }
                stack >>= 1;
                depth -= 1;
            }
        }
    }

    /// `"key":` inside a skipped object.
    fn member_key(&mut self) -> Scan<()> {
        self.ws();
        if self.peek()? != b'"' {
            return Err(Stop::Invalid);
        }
        self.string(false)?;
        self.ws();
        self.expect(b':')
    }

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
        for &want in word {
            self.expect(want)?;
        }
        Ok(())
    }

    /// A number; returns its text and whether it is an integer. A number that
    /// reaches the end of the prefix is cut: more digits may follow.
    fn number(&mut self) -> Scan<(&'a str, bool)> {
        let start = self.at;
        if self.peek()? == b'-' {
            self.at += 1;
        }
        match self.bump()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return Err(Stop::Invalid),
        }
        let mut integer = true;
        if self.peek()? == b'.' {
            self.at += 1;
            integer = false;
            self.digits1()?;
        }
        if let b'e' | b'E' = self.peek()? {
            self.at += 1;
            integer = false;
            if let b'+' | b'-' = self.peek()? {
                self.at += 1;
            }
            self.digits1()?;
            self.peek()?;
        }
        Ok((&self.text[start..self.at], integer))
    }
    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }
    fn digits1(&mut self) -> Scan<()> {
        if !self.bump()?.is_ascii_digit() {
            return Err(Stop::Invalid);
        }
        self.digits();
        Ok(())
    }

    /// A string starting at the opening quote. With `decode`, returns its
    /// value (borrowed unless it has escapes); without, its raw text.
    fn string(&mut self, decode: bool) -> Scan<Cow<'a, str>> {
        self.expect(b'"')?;
        let bytes = self.bytes();
        let start = self.at;
        let mut segment = start;
        let mut decoded: Option<String> = None;
        loop {
            let tail = &bytes[self.at..];
            let Some(k) = memchr::memchr2(b'"', b'\\', tail) else {
                return Err(if tail.iter().any(|&b| b < 0x20) {
                    Stop::Invalid
                } else {
                    Stop::Cut
                });
            };
            if tail[..k].iter().any(|&b| b < 0x20) {
                return Err(Stop::Invalid);
            }
            let stop = self.at + k;
            self.at = stop + 1;
            if bytes[stop] == b'"' {
                return Ok(match decoded {
                    Some(mut value) => {
                        value.push_str(&self.text[segment..stop]);
                        Cow::Owned(value)
                    }
                    None => Cow::Borrowed(&self.text[start..stop]),
                });
            }
            let c = self.escape()?;
            if decode {
                let value = decoded.get_or_insert_with(String::new);
                value.push_str(&self.text[segment..stop]);
                value.push(c);
            }
            segment = self.at;
        }
    }

    /// The escape after a backslash.
    fn escape(&mut self) -> Scan<char> {
        Ok(match self.bump()? {
            b'u' => match self.hex4()? {
                high @ 0xD800..=0xDBFF => {
                    self.expect(b'\\')?;
                    self.expect(b'u')?;
                    let low = self.hex4()?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return Err(Stop::Invalid);
                    }
                    char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
                        .ok_or(Stop::Invalid)?
                }
                code => char::from_u32(code).ok_or(Stop::Invalid)?,
            },
            other => crate::id_scan::short_escape(other).ok_or(Stop::Invalid)?,
        })
    }
    fn hex4(&mut self) -> Scan<u32> {
        let mut code = 0;
        for _ in 0..4 {
            let digit = char::from(self.bump()?).to_digit(16).ok_or(Stop::Invalid)?;
            code = code * 16 + digit;
        }
        Ok(code)
    }
}

#[cfg(test)]
// Test code: a panic is how a test reports failure.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An event with the frame owned, to compare runs.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Ev {
        Frame(String),
        /// A frame that came as invalid UTF-8 and was repaired.
        Repaired(String),
        Error(FrameError),
    }

    fn own(events: &mut Vec<Ev>) -> impl FnMut(FrameEvent<'_>) + '_ {
        |e| {
            events.push(match e {
                FrameEvent::Frame(text) if text.repair().is_some() => Ev::Repaired(text.to_owned()),
                FrameEvent::Frame(text) => Ev::Frame(text.to_owned()),
                FrameEvent::Error(e) => Ev::Error(e),
            })
        }
    }

    fn config(max: usize) -> FramerConfig {
        let mut c = FramerConfig::default();
        c.max_frame(max);
        c
    }

    /// Feeds `chunks` then finishes; returns all events.
    fn run<'c>(config: &FramerConfig, chunks: impl IntoIterator<Item = &'c [u8]>) -> Vec<Ev> {
        let mut framer = Framer::new(config.clone());
        let mut events = Vec::new();
        for chunk in chunks {
            framer.push(chunk, own(&mut events));
            assert!(framer.buffered_len() <= config.get_max_frame());
            assert!(framer.buffer_capacity() <= config.get_max_frame() + 1);
        }
        framer.finish(own(&mut events));
        events
    }

    /// How a read fills the framer's room.
    #[derive(Debug, Clone, Copy)]
    enum Fill {
        /// Appends to [`ReadRoom::vec`], as tokio's `read_buf` does.
        Vec,
        /// Writes into [`ReadRoom::zeroed`], as `read(2)` does.
        Zeroed,
    }

    /// Reads `stream` into the framer's room in reads of at most the sizes
    /// given (cycled), then finishes; lent frames are taken when `take`.
    fn run_reads(
        config: &FramerConfig,
        stream: &[u8],
        sizes: &[usize],
        fill: Fill,
        take: bool,
    ) -> Vec<Ev> {
        let mut framer = Framer::new(config.clone());
        let mut events = Vec::new();
        let mut rest = stream;
        let mut sizes = sizes.iter().copied().cycle();
        while !rest.is_empty() {
            let want = sizes.next().unwrap_or(usize::MAX).max(1);
            let room = framer.read_room();
            let n = want.min(room.len()).min(rest.len());
            assert!(n > 0);
            match fill {
                Fill::Vec => room.vec().extend_from_slice(&rest[..n]),
                Fill::Zeroed => room.zeroed()[..n].copy_from_slice(&rest[..n]),
            }
            rest = &rest[n..];
            framer.filled(n, |e| {
                events.push(match e {
                    FrameEvent::Frame(text) if text.repair().is_some() => Ev::Repaired(if take {
                        text.into_string()
                    } else {
                        text.to_owned()
                    }),
                    FrameEvent::Frame(text) if take && text.is_lent() => {
                        Ev::Frame(text.into_string())
                    }
                    FrameEvent::Frame(text) => Ev::Frame(text.to_owned()),
                    FrameEvent::Error(e) => Ev::Error(e),
                })
            });
            assert!(framer.buffered_len() <= config.get_max_frame());
            assert!(framer.buffer_capacity() <= config.get_max_frame() + 1);
        }
        framer.finish(own(&mut events));
        events
    }

    fn frame(s: &str) -> Ev {
        Ev::Frame(s.to_owned())
    }
    fn oversized(limit: usize, id_hint: Option<Id>) -> Ev {
        Ev::Error(FrameError::Oversized { limit, id_hint })
    }
    fn ended(discarded: u64, recovered: IdRecovery, hinted: bool) -> Ev {
        Ev::Error(FrameError::OversizedEnded {
            discarded,
            recovered,
            hinted,
        })
    }

    #[test]
    fn limit_is_inclusive_and_counts_the_carriage_return() {
        let max = 10;
        let ok = "x".repeat(max);
        assert_eq!(
            run(&config(max), [format!("{ok}\n").as_bytes()]),
            [frame(&ok)]
        );
        // Split, so that the line goes through the buffer.
        assert_eq!(
            run(
                &config(max),
                [&ok.as_bytes()[..3], b"", &ok.as_bytes()[3..], b"\n"]
            ),
            [frame(&ok)]
        );
        let over = "x".repeat(max + 1);
        assert_eq!(
            run(&config(max), [format!("{over}\nok\n").as_bytes()]),
            [
                oversized(max, None),
                ended(11, IdRecovery::NotJson, false),
                frame("ok")
            ]
        );
        // `\r` counts: 9 bytes + `\r` pass, 10 bytes + `\r` do not.
        let nine = "y".repeat(max - 1);
        assert_eq!(
            run(&config(max), [format!("{nine}\r\n").as_bytes()]),
            [frame(&nine)]
        );
        assert_eq!(
            run(&config(max), [format!("{ok}\r\n").as_bytes()]),
            [oversized(max, None), ended(11, IdRecovery::NotJson, false)]
        );
    }

    #[test]
    fn encoder_output_always_passes_a_framer_with_the_same_limit() {
        use crate::message::{encode_result, RawValue};
        let result =
            RawValue::from_string("{\"text\":\"line\\nnext \\\"q\\\" é\"}".to_owned()).unwrap();
        let id = Id::from("req-1");
        let exact = encode_result(&id, &result, usize::MAX).unwrap();
        let limit = exact.len() - 1;
        let bytes = encode_result(&id, &result, limit).unwrap();
        let body = std::str::from_utf8(&bytes[..limit]).unwrap();
        assert_eq!(run(&config(limit), [&bytes[..]]), [frame(body)]);
        for cut in 0..bytes.len() {
            assert_eq!(
                run(&config(limit), [&bytes[..cut], &bytes[cut..]]),
                [frame(body)]
            );
        }
        assert!(encode_result(&id, &result, limit - 1).is_err());
    }

    #[test]
    fn line_endings() {
        let c = FramerConfig::default();
        assert_eq!(
            run(&c, [&b"a\r\nb\nc\rd\r\n"[..]]),
            [frame("a"), frame("b"), frame("c\rd")]
        );
        // Only one `\r` is removed; a `\r` split from its `\n` still goes.
        assert_eq!(run(&c, [&b"a\r\r\n"[..]]), [frame("a\r")]);
        assert_eq!(
            run(&c, [&b"a\r"[..], b"\nb\r", b"\n"]),
            [frame("a"), frame("b")]
        );
        assert_eq!(run(&c, [&b"\r"[..], b"x\n"]), [frame("\rx")]);
    }

    #[test]
    fn empty_lines_are_ignored_and_counted() {
        let mut framer = Framer::new(FramerConfig::default());
        let mut events = Vec::new();
        framer.push(b"\n\r\n\n{}\n\r", own(&mut events));
        framer.push(b"\n", own(&mut events));
        framer.finish(own(&mut events));
        assert_eq!(events, [frame("{}")]);
        assert_eq!(framer.stats().empty_lines, 4);
        assert_eq!(framer.stats().frames, 1);
    }

    #[test]
    fn g3_invalid_utf8_is_refused_with_its_id_and_framing_goes_on() {
        let mut c = FramerConfig::default();
        c.invalid_utf8(InvalidUtf8Policy::Refuse);
        let mut framer = Framer::new(c);
        let mut events = Vec::new();
        framer.push(
            b"ab\xffc\r\n\xe2\x82\n{\"id\":4,\"result\":\"\xff\"}\n{}\n",
            own(&mut events),
        );
        framer.finish(own(&mut events));
        assert_eq!(
            events,
            [
                Ev::Error(FrameError::InvalidUtf8 {
                    len: 4,
                    valid_up_to: 2,
                    id: None,
                }),
                Ev::Error(FrameError::InvalidUtf8 {
                    len: 2,
                    valid_up_to: 0,
                    id: None,
                }),
                Ev::Error(FrameError::InvalidUtf8 {
                    len: 21,
                    valid_up_to: 18,
                    id: Some(Id::Number(4)),
                }),
                frame("{}"),
            ]
        );
        assert_eq!(framer.stats().invalid_utf8, 3);
        assert_eq!(framer.stats().utf8_repaired, 0);
    }

    #[test]
    fn g3_invalid_utf8_is_repaired_by_default_and_marked() {
        let mut framer = Framer::new(FramerConfig::default());
        let mut events = Vec::new();
        let mut repairs = Vec::new();
        // The line from the field: one bad sequence inside a string, id first.
        let line =
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"bad \xff\xfe byte\"}}\n{}\n";
        framer.push(line, |e| {
            if let FrameEvent::Frame(t) = &e {
                repairs.push(t.repair());
            }
            own(&mut events)(e)
        });
        let fixed =
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"bad \u{fffd}\u{fffd} byte\"}}";
        assert_eq!(events, [Ev::Repaired(fixed.to_owned()), frame("{}")]);
        assert_eq!(
            repairs,
            [
                Some(Utf8Repair {
                    original_len: line.len() - 4,
                    valid_up_to: 46,
                    replaced: 2
                }),
                None
            ]
        );
        assert_eq!(framer.stats().utf8_repaired, 1);
        assert_eq!(framer.stats().invalid_utf8, 0);
    }

    #[test]
    fn g2_a_repair_that_would_pass_the_limit_is_refused() {
        // 10 bad bytes become 30: over a 20-byte limit, so the line is refused
        // (with its id) rather than handed out above the limit.
        let mut framer = Framer::new(config(20));
        let mut events = Vec::new();
        framer.push(
            b"{\"id\":1,\"r\":\"\xff\xff\xff\xff\xff\"}\n",
            own(&mut events),
        );
        assert_eq!(
            events,
            [Ev::Error(FrameError::InvalidUtf8 {
                len: 20,
                valid_up_to: 13,
                id: Some(Id::Number(1)),
            })]
        );
        assert_eq!(framer.stats().utf8_repaired, 0);
    }

    #[test]
    fn g3_refused_line_id_finds_the_id_of_broken_lines_and_never_a_wrong_one() {
        let id = |l: &[u8]| refused_line_id(l, 256);
        // Invalid UTF-8, id last (read as U+FFFD, the object is valid).
        assert_eq!(id(b"{\"result\":\"\xff\",\"id\":9}"), Some(Id::Number(9)));
        // Not JSON after the id: the prefix scan finds it.
        assert_eq!(
            id(b"{\"id\":\"a\",\"result\":tru"),
            Some(Id::String("a".into()))
        );
        // Not JSON-RPC, but JSON: found wherever it sits.
        let far = format!("{{\"x\":\"{}\",\"id\":3}}", "y".repeat(1000));
        assert_eq!(id(far.as_bytes()), Some(Id::Number(3)));
        // A nested id or an id inside a string is never taken.
        assert_eq!(id(b"{\"result\":{\"id\":5}}"), None);
        assert_eq!(id(b"{\"x\":\"\\\"id\\\":5\"}"), None);
        // A syntax error before the id: nothing.
        assert_eq!(id(b"{\"x\":,\"id\":5}"), None);
        assert_eq!(refused_line_id(b"{\"id\":5}", 0), None);
    }

    #[test]
    fn resyncs_after_oversized() {
        let max = 16;
        let mut c = config(max);
        c.id_scan_limit(64);
        let long = format!("{{\"id\":7,\"x\":\"{}\"}}", "z".repeat(40));
        let input = format!("{{\"id\":1}}\n{long}\n{{\"id\":2}}\n");
        let want = [
            frame("{\"id\":1}"),
            // The id scan never reads past `max_frame` bytes.
            oversized(max, Some(Id::Number(7))),
            ended(long.len() as u64, IdRecovery::Found(Id::Number(7)), true),
            frame("{\"id\":2}"),
        ];
        assert_eq!(run(&c, [input.as_bytes()]), want);
        assert_eq!(run(&c, input.as_bytes().chunks(5)), want);
        let mut framer = Framer::new(c);
        framer.push(input.as_bytes(), |_| {});
        assert_eq!(framer.stats().oversized, 1);
        assert_eq!(framer.stats().discarded_bytes, long.len() as u64);
        assert_eq!(framer.stats().frames, 2);
    }

    #[test]
    fn oversized_is_reported_before_the_newline() {
        let max = 1000;
        let line = "{\"id\":\"abc\",\"p\":\"".to_owned() + &"q".repeat(2 * max);
        for chunk in [line.len(), 1000, 7, 1] {
            let mut framer = Framer::new(config(max));
            let mut events = Vec::new();
            for piece in line.as_bytes().chunks(chunk) {
                framer.push(piece, own(&mut events));
            }
            assert_eq!(
                events,
                [oversized(max, Some(Id::from("abc")))],
                "chunk {chunk}"
            );
            assert!(framer.is_discarding());
            assert_eq!(framer.buffered_len(), 0);
            framer.push(b"\n", own(&mut events));
            assert_eq!(
                events[1],
                ended(line.len() as u64, IdRecovery::NotJson, true)
            );
        }
    }

    #[test]
    fn reports_as_soon_as_the_limit_is_crossed() {
        let max = 8;
        let mut framer = Framer::new(config(max));
        let mut events = Vec::new();
        framer.push(b"12345678", own(&mut events));
        assert!(events.is_empty());
        assert_eq!(framer.buffered_len(), 8);
        framer.push(b"9", own(&mut events));
        assert_eq!(events, [oversized(max, None)]);
    }

    #[test]
    fn capacity_grows_exactly_and_is_released_after_oversized() {
        let max = 1 << 20;
        let mut framer = Framer::new(config(max));
        assert_eq!(framer.buffer_capacity(), 0);
        framer.push(b"{\"a\":", |_| panic!());
        assert_eq!(framer.buffer_capacity(), SMALL_BUFFER_CAPACITY);
        framer.push(&[b' '; 10_000], |_| panic!());
        assert_eq!(framer.buffer_capacity(), 16 * 1024);
        framer.push(&[b' '; 20_000], |_| panic!());
        assert_eq!(framer.buffer_capacity(), 32 * 1024);
        framer.push(&[b' '; 20_000], |_| panic!());
        assert_eq!(framer.buffer_capacity(), 64 * 1024);
        // Past 64 KiB: exactly `max_frame + 1`, in one step.
        framer.push(&[b' '; 100_000], |_| panic!());
        assert_eq!(framer.buffer_capacity(), max + 1);
        let chunk = vec![b' '; 64 * 1024];
        let mut events = Vec::new();
        while events.is_empty() {
            framer.push(&chunk, own(&mut events));
            assert!(framer.buffer_capacity() <= max + 1);
        }
        assert_eq!(events, [oversized(max, None)]);
        assert!(framer.buffer_capacity() <= SMALL_BUFFER_CAPACITY);
        // Resync, and a later split frame starts small again.
        framer.push(b"\n{\"b\":", own(&mut events));
        assert!(framer.buffer_capacity() <= SMALL_BUFFER_CAPACITY);
        framer.push(b"1}\n", own(&mut events));
        assert_eq!(events.last(), Some(&frame("{\"b\":1}")));
        // A big split frame is lent; not taken, its buffer is kept for the
        // next one...
        let big = vec![b' '; LEND_MIN_FRAME];
        framer.push(&big, |_| panic!());
        framer.push(b"\n", |e| {
            assert!(matches!(e, FrameEvent::Frame(t) if t.is_lent()))
        });
        assert_eq!(framer.buffer_capacity(), max + 1);
        // ...taken, the framer starts a small one...
        framer.push(&big, |_| panic!());
        let mut taken = String::new();
        framer.push(b"\n", |e| match e {
            FrameEvent::Frame(t) => taken = t.into_string(),
            FrameEvent::Error(e) => panic!("{e}"),
        });
        assert_eq!(taken.len(), big.len());
        assert_eq!(taken.capacity(), max + 1, "the buffer itself, not a copy");
        assert_eq!(framer.buffer_capacity(), SMALL_BUFFER_CAPACITY);
        // ...and a smaller split frame is not lent.
        framer.push(&chunk, |_| panic!());
        framer.push(b"\n", |e| {
            assert!(matches!(e, FrameEvent::Frame(t) if !t.is_lent()))
        });
        assert_eq!(framer.buffer_capacity(), 64 * 1024);
        // ...until asked, or until the stream ends.
        framer.shrink_buffer();
        assert_eq!(framer.buffer_capacity(), 0);
        framer.push(b"partial", |_| panic!());
        framer.finish(|_| {});
        assert_eq!(framer.buffer_capacity(), 0);
    }

    /// Large frames (lent when gathered), next to small ones, a large
    /// invalid one, a `\r\n` ending and an oversized one: reads of any size,
    /// filled either way, lent frames taken or not, give the events of one
    /// push.
    #[test]
    fn g4_large_frames_read_into_the_room_equal_one_push() {
        let big = |n: usize, fill: u8| {
            let mut line = b"{\"id\":1,\"result\":\"".to_vec();
            line.resize(n - 2, fill);
            line.extend_from_slice(b"\"}");
            line
        };
        let mut stream = Vec::new();
        for (line, end) in [
            (big(70_000, b'a'), &b"\n"[..]),
            (b"{\"small\":1}".to_vec(), b"\n"),
            (big(LEND_MIN_FRAME, b'b'), b"\r\n"),
            (big(LEND_MIN_FRAME + 1, b'c'), b"\n"),
            (big(300_000, 0xff), b"\n"),
            (big(2_000_000, b'd'), b"\n"),
            (big(200_000, b'e'), b"\n"),
            (b"{\"tail\":".to_vec(), b""),
        ] {
            stream.extend_from_slice(&line);
            stream.extend_from_slice(end);
        }
        let c = config(1 << 20);
        let want = run(&c, [&stream[..]]);
        assert_eq!(want.iter().filter(|e| matches!(e, Ev::Frame(_))).count(), 5);
        assert_eq!(
            want.iter().filter(|e| matches!(e, Ev::Repaired(_))).count(),
            1
        );
        for sizes in [&[usize::MAX][..], &[1000], &[7, 65536, 3], &[65535, 1]] {
            for fill in [Fill::Vec, Fill::Zeroed] {
                for take in [false, true] {
                    let got = run_reads(&c, &stream, sizes, fill, take);
                    assert!(got == want, "sizes {sizes:?} {fill:?} take {take}");
                }
            }
        }
    }

    #[test]
    fn small_limits_cap_the_capacity() {
        let mut framer = Framer::new(config(100));
        framer.push(&[b'a'; 60], |_| panic!());
        assert_eq!(framer.buffer_capacity(), 101);
        framer.push(&[b'a'; 40], |_| panic!());
        assert_eq!(framer.buffer_capacity(), 101);
    }

    #[test]
    fn frames_inside_one_chunk_are_borrowed() {
        let chunk = b"{\"a\":1}\r\n{\"b\":2}\n{\"c\":";
        let range = chunk.as_ptr_range();
        let mut framer = Framer::new(FramerConfig::default());
        let mut seen = 0;
        framer.push(chunk, |e| match e {
            FrameEvent::Frame(text) => {
                let r = text.as_bytes().as_ptr_range();
                assert!(range.contains(&r.start) && r.end <= range.end);
                seen += 1;
            }
            FrameEvent::Error(e) => panic!("{e}"),
        });
        assert_eq!(seen, 2);
        // A frame completed from the buffer is not in the chunk.
        let tail = b"3}\n";
        let range = tail.as_ptr_range();
        framer.push(tail, |e| match e {
            FrameEvent::Frame(text) => {
                assert_eq!(text, "{\"c\":3}");
                assert!(!range.contains(&text.as_ptr()));
            }
            FrameEvent::Error(e) => panic!("{e}"),
        });
    }

    #[test]
    fn truncated_at_eof_and_reuse() {
        let c = config(8);
        assert_eq!(
            run(&c, [&b"{}\n{\"a\""[..]]),
            [
                frame("{}"),
                Ev::Error(FrameError::TruncatedAtEof { bytes: 4 })
            ]
        );
        assert_eq!(
            run(&c, [&b"\r"[..]]),
            [Ev::Error(FrameError::TruncatedAtEof { bytes: 1 })]
        );
        // An oversized line being discarded: its whole length.
        assert_eq!(
            run(&c, [&b"0123456789"[..], b"abc"]),
            [
                oversized(8, None),
                Ev::Error(FrameError::TruncatedAtEof { bytes: 13 })
            ]
        );
        assert_eq!(run(&c, [&b""[..]]), []);
        let mut framer = Framer::new(c);
        let mut events = Vec::new();
        framer.push(b"abc", own(&mut events));
        framer.finish(own(&mut events));
        framer.finish(own(&mut events));
        framer.push(b"def\n", own(&mut events));
        assert_eq!(
            events,
            [
                Ev::Error(FrameError::TruncatedAtEof { bytes: 3 }),
                frame("def")
            ]
        );
        assert_eq!(framer.stats().truncated, 1);
    }

    #[test]
    fn close_policy_stops_framing() {
        let mut c = config(4);
        c.oversized_policy(OversizedPolicy::Close);
        let mut framer = Framer::new(c);
        let mut events = Vec::new();
        framer.push(b"ab\n{\"id\":1}\ncd\n", own(&mut events));
        assert!(framer.is_closed());
        framer.push(b"ef\n", own(&mut events));
        framer.finish(own(&mut events));
        assert_eq!(events, [frame("ab"), oversized(4, None)]);
        assert!(framer.is_closed());
        assert_eq!(framer.stats().bytes, 18);
        assert_eq!(framer.buffer_capacity(), 0);
        framer.reset();
        assert!(!framer.is_closed());
        framer.push(b"gh\n", own(&mut events));
        assert_eq!(events.last(), Some(&frame("gh")));
    }

    #[test]
    fn g3_id_last_is_recovered_at_the_frame_end() {
        let max = 64;
        let line = format!(
            r#"{{"result":{{"id":1,"t":"{}"}},"jsonrpc":"2.0","id":"a\"b\u00e9"}}"#,
            "p".repeat(300)
        );
        let input = format!("{line}\r\n{{\"id\":2}}\n");
        let want = [
            oversized(max, None),
            ended(
                line.len() as u64 + 1,
                IdRecovery::Found(Id::from("a\"bé")),
                false,
            ),
            frame("{\"id\":2}"),
        ];
        for chunk in [input.len(), 100, 7, 1] {
            assert_eq!(
                run(&config(max), input.as_bytes().chunks(chunk)),
                want,
                "chunk {chunk}"
            );
        }
        let mut framer = Framer::new(config(max));
        framer.push(input.as_bytes(), |_| {});
        framer.push(b"{\"jsonrpc\":\"2.0\",\"x\":\"", |_| {});
        framer.push("q".repeat(100).as_bytes(), |_| {});
        framer.push(b"\"}\n", |_| {});
        assert_eq!(framer.stats().oversized_ids_found, 1);
        assert_eq!(framer.stats().oversized_ids_missing, 1);
        // Off: no scan.
        let mut c = config(max);
        c.id_scan_limit(0);
        assert_eq!(
            run(&c, [input.as_bytes()])[1],
            ended(line.len() as u64 + 1, IdRecovery::Off, false)
        );
    }

    #[test]
    fn zero_limit() {
        let c = config(0);
        assert_eq!(
            run(&c, [&b"\n\nx\n"[..]]),
            [oversized(0, None), ended(1, IdRecovery::NotJson, false)]
        );
    }

    #[test]
    fn id_hint_spans_buffer_and_chunk() {
        let mut c = config(32);
        c.id_scan_limit(20);
        let line = br#"{"jsonrpc":"2.0","id":42,"method":"m","params":{}}"#;
        // 20 bytes end inside `42`? `{"jsonrpc":"2.0","id` is 20 bytes: cut.
        assert_eq!(
            run(&c, [&line[..]]),
            [
                oversized(32, None),
                Ev::Error(FrameError::TruncatedAtEof {
                    bytes: line.len() as u64
                })
            ]
        );
        c.id_scan_limit(25);
        for cut in 0..line.len() {
            assert_eq!(
                run(&c, [&line[..cut], &line[cut..], b"\n"]),
                [
                    oversized(32, Some(Id::Number(42))),
                    ended(line.len() as u64, IdRecovery::Found(Id::Number(42)), true)
                ],
                "cut at {cut}"
            );
        }
    }

    // ---- recover_id ----

    fn rid(s: &str) -> Option<Id> {
        recover_id(s.as_bytes())
    }
    fn num(n: i64) -> Option<Id> {
        Some(Id::Number(n))
    }
    fn st(s: &str) -> Option<Id> {
        Some(Id::from(s))
    }

    #[test]
    fn recover_id_position_and_nesting() {
        assert_eq!(rid(r#"{"id":1,"method":"x"#), num(1));
        assert_eq!(rid(r#" { "id" : "a" , "#), st("a"));
        assert_eq!(
            rid(r#"{"jsonrpc":"2.0","method":"tools/call","id":99,"params":{"#),
            num(99)
        );
        assert_eq!(rid(r#"{"a":"x\"y","b":"\\","id":5}"#), num(5));
        assert_eq!(
            rid(r#"{"a":{"b":[1,{"c":null}],"d":{}},"e":[],"id":6,"#),
            num(6)
        );
        assert_eq!(
            rid(r#"{"a":[true,false,null,-1.5e+3,0,"]}"],"id":7}"#),
            num(7)
        );
        // Nested ids are not the id.
        assert_eq!(rid(r#"{"params":{"id":3},"method":"x"}"#), None);
        assert_eq!(rid(r#"{"params":{"id":3},"id":4}"#), num(4));
        assert_eq!(rid(r#"{"params":[{"id":3}],"#), None);
        // "id" inside string values.
        assert_eq!(rid(r#"{"method":"\"id\":5","x":1}"#), None);
        assert_eq!(rid(r#"{"method":"\",\"id\":5,\"","id":6,"#), num(6));
        assert_eq!(rid(r#"{"method":"id","#), None);
        // A top-level array or other text is not an object.
        assert_eq!(rid(r#"[{"id":1}]"#), None);
        assert_eq!(rid(r#""id":1,"#), None);
        assert_eq!(rid(""), None);
    }

    #[test]
    fn recover_id_values() {
        assert_eq!(rid(r#"{"id":-42,"#), num(-42));
        assert_eq!(rid(r#"{"id":0}"#), num(0));
        assert_eq!(rid(r#"{"id":-0}"#), num(0));
        assert_eq!(rid(r#"{"id":9223372036854775807}"#), num(i64::MAX));
        assert_eq!(rid(r#"{"id":-9223372036854775808}"#), num(i64::MIN));
        assert_eq!(rid(r#"{"id":9223372036854775808}"#), None);
        assert_eq!(rid(r#"{"id":1.5}"#), None);
        assert_eq!(rid(r#"{"id":1.0}"#), None);
        assert_eq!(rid(r#"{"id":1e3}"#), None);
        assert_eq!(rid(r#"{"id":null}"#), None);
        assert_eq!(rid(r#"{"id":true}"#), None);
        assert_eq!(rid(r#"{"id":[1]}"#), None);
        assert_eq!(rid(r#"{"id":{"id":1}}"#), None);
        assert_eq!(rid(r#"{"id":01}"#), None);
        assert_eq!(rid(r#"{"id":+1}"#), None);
        assert_eq!(
            rid(r#"{"id":"",}"#),
            None,
            "trailing comma is invalid, but a byte later"
        );
        assert_eq!(rid(r#"{"id":""}"#), st(""));
        // Escapes decode.
        assert_eq!(
            rid(r#"{"id":"a\"b\\c\/d\n\t\u00e9\ud83d\ude00"}"#),
            st("a\"b\\c/d\n\té😀")
        );
        assert_eq!(rid(r#"{"id":"ü-é"}"#), st("ü-é"));
        assert_eq!(rid(r#"{"id":"\ud83d"}"#), None, "lone high surrogate");
        assert_eq!(rid(r#"{"id":"\ude00"}"#), None, "lone low surrogate");
        assert_eq!(rid(r#"{"id":"\x"}"#), None);
        assert_eq!(rid(r#"{"id":"\u00g0"}"#), None);
        assert_eq!(rid("{\"id\":\"a\tb\"}"), None, "raw control character");
        // Escaped key names are decoded.
        assert_eq!(rid(r#"{"\u0069d":8,"#), num(8));
        assert_eq!(rid(r#"{"i\"d":8,"#), None);
    }

    #[test]
    fn recover_id_cut_by_the_scan_limit() {
        let full = r#"{"id":12345,"method":"x"}"#;
        assert_eq!(rid(&full[..9]), None, "`123` may go on");
        assert_eq!(rid(&full[..11]), None, "`12345` may go on");
        assert_eq!(rid(&full[..12]), num(12345));
        assert_eq!(rid(r#"{"id":-"#), None);
        assert_eq!(rid(r#"{"id":1."#), None);
        assert_eq!(rid(r#"{"id":1e"#), None);
        assert_eq!(rid(r#"{"id":"abc"#), None);
        assert_eq!(rid(r#"{"id":"abc""#), st("abc"));
        assert_eq!(rid(r#"{"id":"ab\"#), None);
        assert_eq!(rid(r#"{"id":"ab\u00"#), None);
        assert_eq!(rid(r#"{"id":"\ud83d\ude"#), None);
        assert_eq!(rid(r#"{"id""#), None);
        assert_eq!(rid(r#"{"i"#), None);
        // Cut inside a multi-byte character after the id.
        let s = "{\"id\":3,\"m\":\"é\"}";
        let cut = s.find('é').unwrap() + 1;
        assert_eq!(recover_id(&s.as_bytes()[..cut]), num(3));
        // ...but invalid UTF-8 before the end is not JSON.
        assert_eq!(recover_id(b"{\"id\":3,\"m\":\"\xff\"}"), None);
    }

    #[test]
    fn recover_id_ambiguity() {
        assert_eq!(rid(r#"{"id":1,"id":2}"#), None);
        assert_eq!(rid(r#"{"id":1,"id":"#), None);
        assert_eq!(rid(r#"{"id":1,"\u0069d":1}"#), None);
        // A syntax error anywhere in the prefix.
        assert_eq!(rid(r#"{"id":1 "x":2}"#), None);
        assert_eq!(rid(r#"{"a":[1,}],"id":1}"#), None);
        assert_eq!(rid(r#"{"a":[1}],"id":1}"#), None);
        assert_eq!(rid(r#"{"a":tru,"id":1}"#), None);
        assert_eq!(rid(r#"{"id":1}x"#), None);
        assert_eq!(rid("{\"id\":1}\r"), num(1));
        // Deep nesting before the id.
        let deep = format!("{{\"a\":{}1{},\"id\":2}}", "[".repeat(128), "]".repeat(128));
        assert_eq!(rid(&deep), num(2));
        let deeper = format!("{{\"a\":{}1{},\"id\":2}}", "[".repeat(129), "]".repeat(129));
        assert_eq!(rid(&deeper), None);
    }

    // ---- property tests ----

    /// Reference model: splits the whole stream at `\n` and applies the rules.
    fn model(config: &FramerConfig, stream: &[u8]) -> Vec<Ev> {
        let max = config.get_max_frame();
        let scan = config.get_id_scan_limit().min(max);
        let mut out = Vec::new();
        let mut lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
        let last = lines.pop().unwrap_or_default();
        // The whole-line scan, in one piece.
        let whole = |line: &[u8]| {
            if config.get_id_scan_limit() == 0 {
                return IdRecovery::Off;
            }
            let mut scan = IdScanner::new(config.get_id_scan_limit());
            scan.push(line);
            scan.finish()
        };
        let hint = |line: &[u8]| {
            if scan == 0 {
                None
            } else {
                recover_id(&line[..scan])
            }
        };
        for line in lines {
            if line.len() > max {
                let hinted = hint(line);
                out.push(oversized(max, hinted.clone()));
                if config.get_oversized_policy() == OversizedPolicy::Close {
                    return out;
                }
                out.push(ended(line.len() as u64, whole(line), hinted.is_some()));
                continue;
            }
            let f = line.strip_suffix(b"\r").unwrap_or(line);
            if f.is_empty() {
                continue;
            }
            out.push(match std::str::from_utf8(f) {
                Ok(s) => frame(s),
                Err(e) => {
                    let lossy = String::from_utf8_lossy(f).into_owned();
                    if config.get_invalid_utf8() == InvalidUtf8Policy::Repair && lossy.len() <= max
                    {
                        Ev::Repaired(lossy)
                    } else {
                        Ev::Error(FrameError::InvalidUtf8 {
                            len: f.len(),
                            valid_up_to: e.valid_up_to(),
                            id: refused_line_id(f, config.get_id_scan_limit()),
                        })
                    }
                }
            });
        }
        if last.len() > max {
            out.push(oversized(max, hint(last)));
            if config.get_oversized_policy() == OversizedPolicy::Close {
                return out;
            }
        }
        if !last.is_empty() {
            out.push(Ev::Error(FrameError::TruncatedAtEof {
                bytes: last.len() as u64,
            }));
        }
        out
    }

    /// One piece of a random stream.
    fn piece() -> impl Strategy<Value = Vec<u8>> {
        let text = "[a-z \"\\\\{}:,é€😀\u{0}]{0,12}";
        let id = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            text.prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just("1.5".to_owned()),
            Just("null".to_owned()),
        ];
        let message = (id, text, 0usize..3, any::<bool>(), any::<bool>()).prop_map(
            |(id, s, pos, nested, crlf)| {
                let value = serde_json::to_string(&format!("{s}\n\"x\"\r{s}")).unwrap();
                let mut members = vec![
                    format!("\"jsonrpc\":\"2.0\""),
                    format!(
                        "\"params\":{{\"s\":{value}{}}}",
                        if nested { ",\"id\":0" } else { "" }
                    ),
                ];
                members.insert(pos.min(members.len()), format!("\"id\":{id}"));
                format!(
                    "{{{}}}{}",
                    members.join(","),
                    if crlf { "\r\n" } else { "\n" }
                )
                .into_bytes()
            },
        );
        prop_oneof![
            4 => message,
            1 => (1usize..300).prop_map(|n| format!("{{\"id\":\"big\",\"x\":\"{}\"}}\n", "ü".repeat(n)).into_bytes()),
            1 => prop_oneof![Just(b"\n".to_vec()), Just(b"\r\n".to_vec()), Just(b"\r".to_vec())],
            1 => proptest::collection::vec(any::<u8>(), 0..40),
            1 => proptest::collection::vec(prop_oneof![Just(0xffu8), Just(0xc3), Just(0xa9), Just(b'\n'), Just(b'\r'), Just(b'a')], 0..10),
        ]
    }

    fn stream_and_config() -> impl Strategy<Value = (Vec<u8>, FramerConfig)> {
        (
            proptest::collection::vec(piece(), 0..24),
            prop_oneof![Just(0usize), 1usize..40, 40usize..400, Just(4096)],
            prop_oneof![Just(0usize), 1usize..64, Just(256)],
            prop_oneof![4 => Just(OversizedPolicy::Discard), 1 => Just(OversizedPolicy::Close)],
            prop_oneof![
                Just(InvalidUtf8Policy::Repair),
                Just(InvalidUtf8Policy::Refuse)
            ],
        )
            .prop_map(|(pieces, max, scan, policy, utf8)| {
                let mut c = FramerConfig::default();
                c.max_frame(max)
                    .id_scan_limit(scan)
                    .oversized_policy(policy)
                    .invalid_utf8(utf8);
                (pieces.concat(), c)
            })
    }

    /// Cut points: random ones, plus some inside multi-byte characters and
    /// between `\r` and `\n`.
    fn cuts(stream: &[u8], picks: &[(bool, usize)]) -> Vec<usize> {
        let tricky: Vec<usize> = (1..stream.len())
            .filter(|&i| {
                (0x80..0xc0).contains(&stream[i]) || (stream[i - 1] == b'\r' && stream[i] == b'\n')
            })
            .collect();
        let mut cuts: Vec<usize> = picks
            .iter()
            .map(|&(t, k)| {
                if t && !tricky.is_empty() {
                    tricky[k % tricky.len()]
                } else {
                    k % (stream.len() + 1)
                }
            })
            .collect();
        cuts.sort_unstable();
        cuts
    }

    fn chunks_at<'s>(stream: &'s [u8], cuts: &[usize]) -> Vec<&'s [u8]> {
        let mut out = Vec::new();
        let mut from = 0;
        for &c in cuts {
            out.push(&stream[from..c]);
            from = c;
        }
        out.push(&stream[from..]);
        out
    }

    /// Any JSON value, with `"id"` keys and strings that look like JSON.
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "(\"id\":1|[a-z{}\\[\\],:\"\\\\]|é|\u{1f600}|\u{1}){0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("id|[a-z]{0,2}", inner), 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// G4: however the stream is cut, the events are those of the whole
        /// stream in one chunk, which are those of the reference model.
        #[test]
        fn chunking_never_changes_the_events(
            (stream, c) in stream_and_config(),
            picks in proptest::collection::vec((any::<bool>(), any::<usize>()), 0..40),
        ) {
            let one_shot = run(&c, [&stream[..]]);
            prop_assert_eq!(&one_shot, &model(&c, &stream));
            let cuts = cuts(&stream, &picks);
            prop_assert_eq!(&run(&c, chunks_at(&stream, &cuts)), &one_shot);
        }

        /// G4: reading straight into the framer's room (either way of
        /// filling it, lent frames taken or not) gives the events of pushing
        /// the same stream.
        #[test]
        fn reads_into_the_room_equal_pushes(
            (stream, c) in stream_and_config(),
            sizes in proptest::collection::vec(1usize..300, 1..8),
            zeroed in any::<bool>(),
            take in any::<bool>(),
        ) {
            let fill = if zeroed { Fill::Zeroed } else { Fill::Vec };
            prop_assert_eq!(run_reads(&c, &stream, &sizes, fill, take), run(&c, [&stream[..]]));
        }

        /// 1-byte chunks equal one chunk.
        #[test]
        fn byte_by_byte_equals_one_shot((stream, c) in stream_and_config()) {
            prop_assert_eq!(run(&c, stream.chunks(1)), run(&c, [&stream[..]]));
        }

        /// `recover_id` never returns a wrong id, on any prefix of any object.
        #[test]
        fn recover_id_is_never_wrong(
            members in proptest::collection::vec(
                ("[a-z]{0,3}|id", json_value()), 0..5),
            id in prop_oneof![
                Just(None),
                any::<i64>().prop_map(|n| Some(serde_json::json!(n))),
                ".{0,8}".prop_map(|s| Some(serde_json::json!(s))),
                any::<f64>().prop_map(|f| Some(serde_json::json!(f))),
            ],
            at in any::<usize>(),
            pretty in any::<bool>(),
        ) {
            let mut members = members;
            if let Some(id) = id {
                members.insert(at % (members.len() + 1), ("id".to_owned(), id));
            }
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(),
                    if pretty { serde_json::to_string_pretty(v).unwrap() } else { v.to_string() }))
                .collect();
            let text = format!("{{{}}}", body.join(if pretty { " ,\n " } else { "," }));
            let ids: Vec<_> = members.iter().filter(|(k, _)| k == "id").collect();
            let truth = match ids.as_slice() {
                [(_, serde_json::Value::String(s))] => Some(Id::String(s.clone())),
                [(_, v)] => v.as_i64().map(Id::Number),
                _ => None,
            };
            prop_assert_eq!(recover_id(text.as_bytes()), truth.clone(), "{}", text);
            // With two ids the frame is invalid JSON, and a prefix holding only
            // the first cannot know: no promise there.
            let checked_prefixes = if ids.len() > 1 { 0 } else { text.len() };
            for end in 0..checked_prefixes {
                let got = recover_id(&text.as_bytes()[..end]);
                prop_assert!(got.is_none() || got == truth, "{:?} from {:?}", got, &text[..end.min(text.len())]);
            }
        }
    }
}
