//! Newline-delimited framing with a byte limit (MCP stdio).
//!
//! The whole story is on [`Framer`].

use memchr::memchr;

pub(crate) use crate::wire::id_scan::{refused_line_id, IdRecovery, IdScanner};
use crate::wire::message::Id;

/// Default wire limit: 16 MiB.
///
/// Chosen so that no mainstream host is below it: rmcp reads lines up to
/// 16 MiB, the TypeScript SDK (inside most hosts) up to 10 MiB before it
/// drops the connection, the Python SDK without a limit. A guard between a
/// host and its server must pass what the host would have taken directly:
/// with a lower default, a 9 MiB result that a TypeScript host reads
/// directly failed through the guard (a clean error, but not transparent).
/// Above a host's own limit the host fails as it would directly. The cost
/// is memory only when such lines come: a framer's buffer grows with the
/// line it holds, up to `max_frame + 1` bytes.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;
/// The smallest wire limit: 64 bytes, room for a JSON-RPC error reply with a
/// short id. A smaller limit would refuse every message, the answers to
/// refused ones included. The one rule: [`FramerConfig::max_frame`] raises a
/// smaller value to this, and every machine — `ClientSession`,
/// `ServerSession`, `serve`, the `Client`s, the guard, the codec — takes its
/// wire limit from a [`FramerConfig`]. A front end may refuse a smaller value
/// instead (the guard's `--max-frame` does), naming this constant.
pub const MIN_MAX_FRAME: usize = 64;
/// Default number of leading bytes of an oversized frame scanned for its id.
pub const DEFAULT_ID_SCAN_LIMIT: usize = 256;
/// Capacity of the framer's buffer when first allocated, and the most it keeps
/// after an oversized line: 8 KiB (or `max_frame + 1`, if smaller).
pub(crate) const SMALL_BUFFER_CAPACITY: usize = 8 * 1024;
/// The buffer's capacity doubles up to this size (64 KiB); a partial line
/// longer than this makes it grow, in one step, to exactly `max_frame + 1`.
pub(crate) const BUFFER_DOUBLING_LIMIT: usize = 64 * 1024;
/// The most bytes lent for one read by [`Framer::read_room`]: 64 KiB, what a
/// Linux pipe holds by default.
pub const READ_ROOM: usize = 64 * 1024;
/// A frame of at least this many bytes (256 KiB) gathered in the framer's
/// buffer is lent: [`FrameText::into_string`] takes the buffer itself.
/// Smaller ones are cheaper to copy than a new buffer is to grow (and lending
/// costs up to two copies of the bytes read after the frame).
pub(crate) const LEND_MIN_FRAME: usize = 256 * 1024;

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
    /// counting a trailing `\r`. Default [`DEFAULT_MAX_FRAME`] (16 MiB).
    ///
    /// **At least [`MIN_MAX_FRAME`] (64 bytes)**: a smaller value is raised
    /// to it (a setter cannot fail), and
    /// [`get_max_frame`](Self::get_max_frame) gives the limit in force. This
    /// is the one place the minimum is applied, for every machine; to refuse
    /// a smaller value instead, compare what `get_max_frame` gives back.
    ///
    /// Memory: a framer holds at most `max_frame + 1 + 64 KiB` of heap (see the
    /// [framer's docs](Framer)). A partial line longer than 64 KiB makes the
    /// framer reserve exactly `max_frame + 1` bytes at once, so the value must be a
    /// size the process can allocate.
    pub fn max_frame(&mut self, bytes: usize) -> &mut Self {
        self.max_frame = bytes.max(MIN_MAX_FRAME);
        self
    }
    /// Sets how many leading bytes of an oversized line the id scanner reads
    /// for the message id at once (never past `max_frame` bytes), and the
    /// longest string id the whole-line `IdScanner` keeps (a longer one
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
    /// The wire limit in force (never below [`MIN_MAX_FRAME`]).
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
        /// The top-level id the id scanner found in the line's first
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
        /// (`IdScanner`), wherever the member sits.
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
        /// The frame's top-level id, when `refused_line_id` finds one: the
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
    /// for a frame of at least `LEND_MIN_FRAME` bytes that was gathered
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

/// Newline-delimited framing with a byte limit (MCP stdio).
///
/// MCP over stdio sends one JSON-RPC message per line. [`Framer`] turns an
/// arbitrary sequence of byte chunks (as read from a pipe) into those lines,
/// with a hard limit on how much memory one line may take.
///
/// # Framing rules
///
/// - A **line** is the bytes before a `\n`. The `\n` itself belongs to no
///   frame.
/// - The **frame** is the line with *one* trailing `\r` removed, so both `\n`
///   and `\r\n` endings work. A `\r` anywhere else (in the middle, or a second
///   one before the last: `a\r\r\n` gives `a\r`) is kept.
/// - An empty frame (an empty line, or a line that is a lone `\r`) is ignored
///   and counted in [`FramerStats::empty_lines`].
/// - A frame that is not valid UTF-8 is repaired by default: each invalid
///   sequence becomes U+FFFD, as the TypeScript SDK's decoder does, and the
///   frame is handed out with [`FrameText::repair`] saying so (counted in
///   [`FramerStats::utf8_repaired`]). With [`InvalidUtf8Policy::Refuse`], or
///   when the repaired text would pass the wire limit, it gives
///   [`FrameError::InvalidUtf8`] with the line's top-level id if one can be
///   found (`refused_line_id`), so that a session can fail the request it
///   answers at once; framing goes on with the next line.
/// - Lengths are in bytes.
///
/// # The limit
///
/// [`FramerConfig::max_frame`] (default [`DEFAULT_MAX_FRAME`], 16 MiB) limits
/// the **line**: the bytes before `\n`, *including* a trailing `\r`. A line of
/// exactly `max_frame` bytes passes; `max_frame + 1` bytes do not. Counting the
/// `\r` keeps the rule identical to `crate::wire::message`'s encoders, which refuse
/// a message whose bytes before the `\n` exceed `max_frame` (and never write a
/// `\r`): every message the encoder accepts under a limit passes a framer with
/// the same limit. A peer that ends lines with `\r\n` gets one byte less of
/// payload. It also means the framer never needs to hold more than `max_frame`
/// bytes to decide.
///
/// # Oversized lines
///
/// When the `max_frame + 1`-th byte of a line arrives and it is not the
/// newline, the framer reports [`FrameError::Oversized`] **at once**, without
/// waiting for the newline (which might never come), and frees the partial
/// line. Then, with [`OversizedPolicy::Discard`] (the default), it drops every
/// byte up to the next `\n` without storing it, reports
/// [`FrameError::OversizedEnded`] with the line's total length when that
/// newline arrives, and resumes framing after it. With
/// [`OversizedPolicy::Close`] it stops framing instead: [`Framer::is_closed`]
/// turns true and further input is only counted in [`FramerStats::bytes`].
///
/// With `Discard`, every `Oversized` is followed by exactly one
/// `OversizedEnded` or, if the stream ends first, one
/// [`FrameError::TruncatedAtEof`].
///
/// ## Id recovery
///
/// So that the session can still answer an oversized request with an error
/// carrying its id, `Oversized` has an `id_hint`: what the id scanner found
/// in the first `min(id_scan_limit, max_frame)` bytes of the line
/// ([`FramerConfig::id_scan_limit`], default [`DEFAULT_ID_SCAN_LIMIT`] = 256).
/// It is the same scanner as the whole-line scan below, asked what it found in
/// those bytes: it returns the top-level
/// `"id"` member only when it is unambiguous within those bytes: an integer or
/// a string (escapes decoded), complete (a number only when a byte follows it,
/// since `123` cut from `12345` looks complete). A nested
/// `"id"` or one inside a string value is never taken; a value cut by the scan
/// limit, a non-integer or `null` id, two different top-level ids or any syntax error in
/// the scanned bytes give `None`. It may miss an id; it never returns a wrong
/// one.
///
/// Member order is free in JSON, and the TypeScript SDK writes `{result,
/// jsonrpc, id}`: the id of a large response is usually *last*, far past any
/// prefix. So, with `Discard` and a non-zero `id_scan_limit`, the whole line
/// also goes through an `IdScanner` as it is discarded (each byte once,
/// nothing stored but the id), and its outcome rides on
/// [`FrameError::OversizedEnded`] as `recovered`: [`IdRecovery::Found`] when
/// the line is one valid JSON object whose top-level `"id"` is an integer or a
/// string (escapes decoded) of at most `id_scan_limit` bytes, wherever the
/// member sits; otherwise why not (absent, ambiguous, not an id, too long, not
/// JSON). `hinted` says the line's `Oversized` already carried an `id_hint`,
/// so a session acts on one of them only: a request whose id comes first still
/// fails at once, one whose id comes last fails when its newline arrives. A
/// line ending without a usable id is counted
/// ([`FramerStats::oversized_ids_missing`]) and logged at WARN: nothing can be
/// failed for it, so its request (if any) runs to its deadline. The early hint
/// and the whole-line scan can disagree only on a line with two top-level
/// `"id"` members (the hint sees the first, the scan reports `Ambiguous`).
///
/// # End of stream
///
/// [`Framer::finish`] reports an unterminated line as
/// [`FrameError::TruncatedAtEof`] with its length in bytes (it is **not**
/// delivered as a frame). A lone trailing `\r` counts as such a line. An
/// oversized line still being discarded at end of stream is reported the same
/// way, with its total length, in place of its `OversizedEnded`. After
/// `finish` the framer is empty and ready for a new stream; counters are kept.
/// A framer closed by [`OversizedPolicy::Close`] stays closed (`finish`
/// reports nothing then) until [`Framer::reset`].
///
/// # Performance
///
/// Each byte is scanned for `\n` once, with `memchr`, and scanning resumes
/// where it stopped: a partial line is never rescanned. The only other
/// per-byte work on the hot path is UTF-8 validation of each frame.
///
/// Bytes come in one of two ways:
///
/// - [`Framer::push`] takes a chunk the caller read into a buffer of its own.
///   A frame lying wholly inside it is handed out borrowed from it, without
///   copying; only a line split across chunks is copied, once, into the
///   framer's buffer.
/// - [`Framer::read_room`] lends room in the framer's buffer, right after the
///   partial line, and the adapter reads straight into it; [`Framer::filled`]
///   then frames what came in (the unbuffered style of rustls and quinn). A
///   large frame is gathered where it lands: no copy at all between the pipe
///   and the frame. The adapters read the server's stdout this way.
///
/// A frame of at least `LEND_MIN_FRAME` (256 KiB) gathered in the buffer is
/// *lent* ([`FrameText::is_lent`]): whoever wants it owned takes the buffer
/// itself with [`FrameText::into_string`], and the framer starts a new one
/// (copying into it only the bytes read after the frame, at most
/// [`READ_ROOM`]). So one copy of a large frame is live, in its owner's
/// hands. A lent frame that is not taken goes back to the framer.
///
/// # Memory
///
/// The framer owns one buffer, holding the partial line at the end of the last
/// chunk or read, and the room lent for the next read: never more than
/// `max_frame + 1` bytes (the one byte past the limit that shows a line is
/// oversized). Its capacity:
///
/// - is allocated on first need, at `SMALL_BUFFER_CAPACITY` (8 KiB, or
///   `max_frame + 1` if smaller) unless more is needed at once;
/// - doubles while it stays within `BUFFER_DOUBLING_LIMIT` (64 KiB);
/// - beyond that, is set in one step to exactly `max_frame + 1`, never more.
///   Growing in one step from at most 64 KiB means that even while the buffer
///   is being reallocated (old and new block both live) the framer holds at
///   most `max_frame + 1 + 64 KiB`. The capacity is then kept for later
///   frames (only pages written count in a process's RSS);
/// - is released (back to at most 8 KiB) after an oversized line, by
///   [`Framer::finish`], [`Framer::reset`], and on request by
///   [`Framer::shrink_buffer`]; a lent frame that is taken takes it along.
///
/// Worst-case heap held by a framer: `max_frame + 1 + 64 KiB` (momentarily,
/// during the one large reallocation), plus, only while an oversized line is
/// reported or discarded, the id scanner's one buffer, at most `max(id_scan_limit, 21) + 4` bytes,
/// held only while the id's value is read. Discarded bytes are counted, never
/// stored. The scan costs nothing on lines within the limit. A frame that is
/// not valid UTF-8 and is repaired ([`InvalidUtf8Policy::Repair`]) is built
/// as a new string of at most `max_frame` bytes, live while it is handed out
/// (or for as long as its taker keeps it): with repairs the bound is
/// `2 × max_frame + 1 + 64 KiB`; [`InvalidUtf8Policy::Refuse`] keeps the
/// first one (a refused line costs one `IdScanner` pass).
/// `tests/alloc_bound.rs` measures this bound with a counting allocator.
///
/// ```
/// use mcp_stdio_core::{Framer, FramerConfig, FrameEvent};
///
/// let mut framer = Framer::new(FramerConfig::default());
/// let mut frames = Vec::new();
/// for chunk in [&b"{\"id\":1}\r\n{\"i"[..], b"d\":2}\n\n"] {
///     framer.push(chunk, |event| match event {
///         FrameEvent::Frame(text) => frames.push(text.into_string()),
///         FrameEvent::Error(e) => panic!("{e}"),
///     });
/// }
/// framer.finish(|_| unreachable!("nothing left"));
/// assert_eq!(frames, ["{\"id\":1}", "{\"id\":2}"]);
/// assert_eq!(framer.stats().empty_lines, 1);
/// ```
///
/// The framer: turns byte chunks into newline-delimited frames under a limit.
///
/// See the [framer's docs](Framer) for the rules, the limits and the memory bound.
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
        // The hint comes from the line's first `scan` bytes, fixed by the
        // stream alone (not by where the chunks were cut); the line holds
        // `max_frame + 1` bytes, so we have them.
        let scan = self.config.id_scan_limit.min(self.config.max_frame);
        let (first, rest) = split_pair(held, head, scan);
        let id_hint =
            if self.config.oversized == OversizedPolicy::Discard && self.config.id_scan_limit > 0 {
                // One scanner for the hint and the whole line: it reads the
                // first `scan` bytes and says what it found so far, then reads
                // what is held now and every discarded chunk up to the newline.
                let limit = self.config.id_scan_limit;
                let scanner = self.id_scan.get_or_insert_with(|| IdScanner::new(limit));
                scanner.push(first.0);
                scanner.push(first.1);
                let hint = scanner.id_so_far();
                scanner.push(rest.0);
                scanner.push(rest.1);
                hint
            } else if scan == 0 {
                None
            } else {
                // The same scanner, for the first bytes only.
                let mut scanner = IdScanner::new(scan);
                scanner.push(first.0);
                scanner.push(first.1);
                scanner.id_so_far()
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

/// A run of bytes given as two slices, one after the other (what the framer
/// holds, then the chunk at hand).
type Pair<'a> = (&'a [u8], &'a [u8]);

/// `a` then `b` cut after their first `n` bytes: (the first `n`, the rest),
/// each as its part of `a` and its part of `b`.
fn split_pair<'a>(a: &'a [u8], b: &'a [u8], n: usize) -> (Pair<'a>, Pair<'a>) {
    let in_a = n.min(a.len());
    let in_b = (n - in_a).min(b.len());
    ((&a[..in_a], &b[..in_b]), (&a[in_a..], &b[in_b..]))
}

#[cfg(test)]
// Test code: a panic is how a test reports failure.
#[allow(clippy::unwrap_used)]
mod tests;
