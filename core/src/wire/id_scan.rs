//! Streaming recovery of the top-level `"id"` of a frame too large to keep.
//!
//! [`IdScanner`] reads a JSON text in chunks cut anywhere and, at its end,
//! says what its top-level object's `"id"` member is ([`IdRecovery`]). Member
//! order is free in JSON (the TypeScript SDK writes `{result, jsonrpc, id}`),
//! so the id may come after megabytes of payload; the scanner finds it
//! first, in the middle or last, without storing the payload.
//!
//! It is a complete JSON validator: the id is only reported when the whole
//! text is one valid JSON object (the rules of `serde_json`: UTF-8 in
//! strings, escapes and surrogate pairs, no control characters in strings,
//! at most 127 levels of nesting), so a frame that is not JSON never yields
//! an id.
//!
//! # Limits
//!
//! - **The id's length**: a string id whose decoded text passes `max_id`
//!   bytes (the framer passes `id_scan_limit`, default 256) is not kept and
//!   counts as absent ([`IdRecovery::TooLong`]). This is the scanner's only
//!   buffer: worst case `max(max_id, 21) + 4` bytes, held only while that id is read.
//! - **Nesting**: containers nested deeper than [`MAX_DEPTH`] make the text
//!   [`IdRecovery::NotJson`] (as `serde_json`'s recursion limit does); the
//!   depth is a 128-bit stack, so memory stays constant.
//! - **Work**: linear in the text, each byte looked at once; string bodies
//!   (the bulk of any large payload) are skipped with `memchr`.

use crate::wire::message::Id;

/// Deepest container nesting accepted (`serde_json`'s default limit).
pub(crate) const MAX_DEPTH: u32 = 127;

/// What the scan of a whole frame found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdRecovery {
    /// The frame is one JSON object whose top-level `"id"` is this integer
    /// (fitting `i64`) or string. Repeated `"id"` members count only when
    /// they all carry this same id.
    Found(Id),
    /// The frame is one JSON object without a top-level `"id"` (a
    /// notification, or a message that names no request).
    Absent,
    /// Two top-level `"id"` members with different values (or values that
    /// cannot be compared: `null`, floats, containers).
    Ambiguous,
    /// The top-level `"id"` is `null`, a float, a boolean, a container or an
    /// integer outside `i64`: no request can carry it.
    NotAnId,
    /// The top-level `"id"` is a string longer than the id bound.
    TooLong,
    /// The frame is not one valid JSON object.
    NotJson,
    /// Recovery is turned off (`id_scan_limit` 0).
    Off,
}

impl IdRecovery {
    /// The recovered id, if any.
    pub fn id(&self) -> Option<&Id> {
        match self {
            Self::Found(id) => Some(id),
            _ => None,
        }
    }
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Found(_) => "found",
            Self::Absent => "absent",
            Self::Ambiguous => "ambiguous",
            Self::NotAnId => "not_an_id",
            Self::TooLong => "too_long",
            Self::NotJson => "not_json",
            Self::Off => "off",
        }
    }
}

/// Where the scanner is in the JSON grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the top-level object.
    Start,
    /// After `{`: a key or `}`.
    KeyOrClose,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After `[`: a value or `]`.
    ValueOrClose,
    /// After `:` or `,` in an array: a value.
    Value,
    /// After a value inside a container: `,` or the closing bracket.
    CommaOrClose,
    /// Inside a string (key or value).
    Str,
    /// Inside a number.
    Num(NumPhase),
    /// Inside `true`, `false` or `null`: the rest of the word.
    Lit(&'static [u8]),
    /// After the top-level object: only whitespace.
    End,
    /// Not JSON; sticky.
    Invalid,
}

/// Position inside a number, per the JSON grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumPhase {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

/// Position inside an escape sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    None,
    Backslash,
    /// `\u` and `n` hex digits so far; `high` is a pending high surrogate.
    Hex {
        n: u8,
        code: u32,
        high: Option<u32>,
    },
    /// After a high surrogate: `\` of the low one.
    LowBackslash(u32),
    /// After a high surrogate: `u` of the low one.
    LowU(u32),
}

/// What the string being read is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrRole {
    /// Skipped.
    Plain,
    /// A key of the top-level object: compared with `id`.
    TopKey,
    /// The top-level id's value: captured.
    Id,
}

/// Matching a top-level key against `id`, one decoded char at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyMatch {
    Matched(u8),
    Other,
}

/// What the top-level `"id"` members seen so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Nothing,
    One(Id),
    Unusable(IdRecovery),
    Ambiguous,
}

/// A streaming scanner for the top-level `"id"` of one JSON text. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct IdScanner {
    max_id: usize,
    state: State,
    /// Open containers, innermost in bit 0: 1 = object, 0 = array.
    stack: u128,
    depth: u32,
    esc: Esc,
    /// Continuation bytes still due in the current UTF-8 character, and the
    /// range the next one must fall in.
    utf8_need: u8,
    utf8_lo: u8,
    utf8_hi: u8,
    role: StrRole,
    /// The string being read is a key.
    in_key: bool,
    key: KeyMatch,
    /// The next value at depth 1 is the id's.
    id_next: bool,
    /// The id value being read (string bytes or number text); `None` once
    /// it passed `max_id`.
    capture: Option<Vec<u8>>,
    seen: Seen,
}

impl IdScanner {
    /// A scanner keeping ids of at most `max_id` bytes.
    pub(crate) fn new(max_id: usize) -> Self {
        Self {
            max_id,
            state: State::Start,
            stack: 0,
            depth: 0,
            esc: Esc::None,
            utf8_need: 0,
            utf8_lo: 0,
            utf8_hi: 0,
            role: StrRole::Plain,
            in_key: false,
            key: KeyMatch::Other,
            id_next: false,
            capture: None,
            seen: Seen::Nothing,
        }
    }

    /// Reads the next bytes of the text.
    pub(crate) fn push(&mut self, mut chunk: &[u8]) {
        while let Some((&b, rest)) = chunk.split_first() {
            if self.state == State::Invalid {
                return;
            }
            if self.state == State::Str
                && self.role == StrRole::Plain
                && self.esc == Esc::None
                && self.utf8_need == 0
            {
                // Fast path over a skipped string's body.
                let end = memchr::memchr2(b'"', b'\\', chunk).unwrap_or(chunk.len());
                let body = &chunk[..end];
                if body.iter().all(|&c| c >= 0x20) {
                    // Whole characters are skipped at once; one cut by the
                    // chunk's end goes through `byte`, which carries it over.
                    let valid = match std::str::from_utf8(body) {
                        Ok(_) => end,
                        Err(e) if e.error_len().is_none() => e.valid_up_to(),
                        Err(_) => return self.fail(),
                    };
                    // The cut character's bytes (at most 3), or the quote
                    // or backslash that ended the body.
                    let tail = if valid < end { end - valid } else { 1 };
                    let (now, rest) = chunk[valid..].split_at(tail.min(chunk.len() - valid));
                    for &b in now {
                        self.byte(b);
                    }
                    chunk = rest;
                    continue;
                }
            }
            self.byte(b);
            chunk = rest;
        }
    }

    /// The id read so far, in a text that may go on: the top-level `"id"`
    /// when one complete, usable id value was read (repeated only with the
    /// same value) and nothing so far is invalid. What a prefix of the text
    /// says; [`finish`](Self::finish) says what the whole text says.
    pub(crate) fn id_so_far(&self) -> Option<Id> {
        // A second top-level `"id"` key was read and its value is still
        // to come (or being read): it may differ.
        let another_id_pending = self.id_next
            || (self.state == State::Str && self.role == StrRole::Id)
            || (matches!(self.state, State::Num(_)) && self.capture.is_some());
        match (&self.state, &self.seen) {
            (State::Invalid, _) => None,
            _ if another_id_pending => None,
            (_, Seen::One(id)) => Some(id.clone()),
            _ => None,
        }
    }

    /// The text ended: what its id is. The scanner is ready for a new text.
    pub(crate) fn finish(&mut self) -> IdRecovery {
        if let State::Num(_) = self.state {
            // Only inside a container, which is still open: not JSON.
            self.state = State::Invalid;
        }
        let outcome = match (self.state, std::mem::replace(&mut self.seen, Seen::Nothing)) {
            (State::End, Seen::Nothing) => IdRecovery::Absent,
            (State::End, Seen::One(id)) => IdRecovery::Found(id),
            (State::End, Seen::Unusable(why)) => why,
            (State::End, Seen::Ambiguous) => IdRecovery::Ambiguous,
            _ => IdRecovery::NotJson,
        };
        *self = Self::new(self.max_id);
        outcome
    }

    fn fail(&mut self) {
        self.state = State::Invalid;
        self.capture = None;
    }

    fn byte(&mut self, b: u8) {
        match self.state {
            State::Invalid => {}
            State::Str => self.string_byte(b),
            State::Num(phase) => self.number_byte(phase, b),
            State::Lit(rest) => match rest.split_first() {
                Some((&want, more)) if want == b => {
                    if more.is_empty() {
                        self.value_done();
                    } else {
                        self.state = State::Lit(more);
                    }
                }
                _ => self.fail(),
            },
            _ if is_ws(b) => {}
            State::Start => {
                if b == b'{' {
                    self.open(true);
                } else {
                    self.fail();
                }
            }
            State::KeyOrClose | State::Key => match b {
                b'"' => {
                    self.role = if self.depth == 1 {
                        self.key = KeyMatch::Matched(0);
                        StrRole::TopKey
                    } else {
                        StrRole::Plain
                    };
                    self.in_key = true;
                    self.state = State::Str;
                }
                b'}' if self.state == State::KeyOrClose => self.close(),
                _ => self.fail(),
            },
            State::Colon => {
                if b == b':' {
                    self.state = State::Value;
                } else {
                    self.fail();
                }
            }
            State::Value | State::ValueOrClose => {
                if b == b']' && self.state == State::ValueOrClose {
                    self.close();
                } else {
                    self.value_start(b);
                }
            }
            State::CommaOrClose => {
                let in_object = self.stack & 1 == 1;
                match b {
                    b',' => self.state = if in_object { State::Key } else { State::Value },
                    b'}' if in_object => self.close(),
                    b']' if !in_object => self.close(),
                    _ => self.fail(),
                }
            }
            State::End => self.fail(),
        }
    }

    /// The first byte of a value.
    fn value_start(&mut self, b: u8) {
        let is_id = std::mem::take(&mut self.id_next);
        match b {
            b'"' => {
                self.role = if is_id {
                    self.capture = Some(Vec::new());
                    StrRole::Id
                } else {
                    StrRole::Plain
                };
                self.state = State::Str;
                return;
            }
            b'-' | b'0'..=b'9' => {
                if is_id {
                    self.capture = Some(vec![b]);
                }
                self.state = State::Num(match b {
                    b'-' => NumPhase::Minus,
                    b'0' => NumPhase::Zero,
                    _ => NumPhase::Int,
                });
                return;
            }
            b't' => self.state = State::Lit(b"rue"),
            b'f' => self.state = State::Lit(b"alse"),
            b'n' => self.state = State::Lit(b"ull"),
            b'{' => self.open(true),
            b'[' => self.open(false),
            _ => return self.fail(),
        }
        if is_id {
            self.record(IdRecovery::NotAnId);
        }
    }

    fn open(&mut self, object: bool) {
        if self.depth == MAX_DEPTH {
            return self.fail();
        }
        self.stack = (self.stack << 1) | u128::from(object);
        self.depth += 1;
        self.state = if object {
            State::KeyOrClose
        } else {
            State::ValueOrClose
        };
    }

    fn close(&mut self) {
        self.stack >>= 1;
        self.depth -= 1;
        self.value_done();
    }

    /// A value (or a key) ended.
    fn value_done(&mut self) {
        self.state = if self.depth == 0 {
            State::End
        } else {
            State::CommaOrClose
        };
    }

    /// The id's value was read.
    fn record(&mut self, value: IdRecovery) {
        self.seen = match (std::mem::replace(&mut self.seen, Seen::Nothing), value) {
            (Seen::Nothing, IdRecovery::Found(id)) => Seen::One(id),
            (Seen::Nothing, why) => Seen::Unusable(why),
            (Seen::One(a), IdRecovery::Found(b)) if a == b => Seen::One(a),
            _ => Seen::Ambiguous,
        };
    }

    fn number_byte(&mut self, phase: NumPhase, b: u8) {
        use NumPhase::*;
        let next = match (phase, b) {
            (Minus, b'0') => Some(Zero),
            (Minus | Int, b'1'..=b'9') | (Int, b'0') => Some(Int),
            (Zero | Int, b'.') => Some(Dot),
            (Dot | Frac, b'0'..=b'9') => Some(Frac),
            (Zero | Int | Frac, b'e' | b'E') => Some(Exp),
            (Exp, b'+' | b'-') => Some(ExpSign),
            (Exp | ExpSign | ExpDigits, b'0'..=b'9') => Some(ExpDigits),
            _ => None,
        };
        match next {
            Some(next) => {
                self.state = State::Num(next);
                if let Some(text) = &mut self.capture {
                    if text.len() <= self.max_id.max(20) {
                        text.push(b);
                    } else {
                        // Longer than any i64: not an id, but still a number.
                        text.clear();
                        text.push(b'x');
                    }
                }
            }
            None if matches!(phase, Zero | Int | Frac | ExpDigits) => {
                if let Some(text) = self.capture.take() {
                    let id = std::str::from_utf8(&text)
                        .ok()
                        .filter(|_| matches!(phase, Zero | Int))
                        .and_then(|t| t.parse::<i64>().ok());
                    self.record(
                        id.map_or(IdRecovery::NotAnId, |n| IdRecovery::Found(Id::Number(n))),
                    );
                }
                self.value_done();
                self.byte(b);
            }
            None => self.fail(),
        }
    }

    fn string_byte(&mut self, b: u8) {
        match self.esc {
            Esc::None => {}
            Esc::Backslash => {
                self.esc = Esc::None;
                let c = match b {
                    b'u' => {
                        self.esc = Esc::Hex {
                            n: 0,
                            code: 0,
                            high: None,
                        };
                        return;
                    }
                    other => match short_escape(other) {
                        Some(c) => c,
                        None => return self.fail(),
                    },
                };
                return self.char_out(c);
            }
            Esc::Hex { n, code, high } => {
                let Some(digit) = char::from(b).to_digit(16) else {
                    return self.fail();
                };
                let code = code * 16 + digit;
                if n < 3 {
                    self.esc = Esc::Hex {
                        n: n + 1,
                        code,
                        high,
                    };
                    return;
                }
                self.esc = Esc::None;
                let c = match (high, code) {
                    (None, 0xD800..=0xDBFF) => {
                        self.esc = Esc::LowBackslash(code);
                        return;
                    }
                    (None, 0xDC00..=0xDFFF) => return self.fail(),
                    (None, code) => char::from_u32(code),
                    (Some(high), 0xDC00..=0xDFFF) => {
                        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00))
                    }
                    (Some(_), _) => None,
                };
                return match c {
                    Some(c) => self.char_out(c),
                    None => self.fail(),
                };
            }
            Esc::LowBackslash(high) => {
                return if b == b'\\' {
                    self.esc = Esc::LowU(high);
                } else {
                    self.fail()
                };
            }
            Esc::LowU(high) => {
                return if b == b'u' {
                    self.esc = Esc::Hex {
                        n: 0,
                        code: 0,
                        high: Some(high),
                    };
                } else {
                    self.fail()
                };
            }
        }
        if self.utf8_need > 0 {
            if !(self.utf8_lo..=self.utf8_hi).contains(&b) {
                return self.fail();
            }
            self.utf8_need -= 1;
            (self.utf8_lo, self.utf8_hi) = (0x80, 0xBF);
            return self.raw_out(b, false);
        }
        match b {
            b'"' => self.string_end(),
            b'\\' => self.esc = Esc::Backslash,
            0x00..=0x1F => self.fail(),
            0x20..=0x7F => self.raw_out(b, true),
            _ => {
                let (need, lo, hi) = match b {
                    0xC2..=0xDF => (1, 0x80, 0xBF),
                    0xE0 => (2, 0xA0, 0xBF),
                    0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
                    0xED => (2, 0x80, 0x9F),
                    0xF0 => (3, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, 0x80, 0xBF),
                    0xF4 => (3, 0x80, 0x8F),
                    _ => return self.fail(),
                };
                (self.utf8_need, self.utf8_lo, self.utf8_hi) = (need, lo, hi);
                self.raw_out(b, false);
            }
        }
    }

    /// One decoded char from an escape.
    fn char_out(&mut self, c: char) {
        let mut buf = [0; 4];
        let bytes = c.encode_utf8(&mut buf).as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            self.raw_out(b, i == 0 && bytes.len() == 1);
        }
    }

    /// One byte of a string's decoded text; `ascii` when it is a whole char.
    fn raw_out(&mut self, b: u8, ascii: bool) {
        match self.role {
            StrRole::Plain => {}
            StrRole::TopKey => {
                self.key = match (self.key, ascii, b) {
                    (KeyMatch::Matched(0), true, b'i') => KeyMatch::Matched(1),
                    (KeyMatch::Matched(1), true, b'd') => KeyMatch::Matched(2),
                    _ => KeyMatch::Other,
                };
            }
            StrRole::Id => {
                if let Some(text) = &mut self.capture {
                    if text.len() < self.max_id {
                        text.push(b);
                    } else {
                        self.capture = None;
                    }
                }
            }
        }
    }

    fn string_end(&mut self) {
        let role = std::mem::replace(&mut self.role, StrRole::Plain);
        if std::mem::take(&mut self.in_key) {
            self.id_next = role == StrRole::TopKey && self.key == KeyMatch::Matched(2);
            self.state = State::Colon;
            return;
        }
        match role {
            StrRole::Plain | StrRole::TopKey => self.value_done(),
            StrRole::Id => {
                let outcome = match self.capture.take().map(String::from_utf8) {
                    Some(Ok(text)) => IdRecovery::Found(Id::String(text)),
                    Some(Err(_)) => IdRecovery::NotJson,
                    None => IdRecovery::TooLong,
                };
                self.record(outcome);
                self.value_done();
            }
        }
    }
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
pub(crate) fn refused_line_id(line: &[u8], id_scan_limit: usize) -> Option<Id> {
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

/// The top-level id in the first bytes of a frame, cut anywhere (even inside
/// a UTF-8 character): the same [`IdScanner`], asked what it has read so far
/// ([`IdScanner::id_so_far`]).
///
/// Returns the top-level object's `"id"` when its value is an integer
/// (fitting `i64`) or a string, complete within `prefix` (a number only when
/// a byte follows it: `"id":123` at the very end may be `1234…`), with no
/// syntax error and no second, different top-level `"id"` before the cut. A
/// nested `"id"`, or the text `"id"` inside a string value, is not the id.
/// Never returns a wrong id: if it returns `Some`, a JSON parser reading the
/// complete text (if it is valid) finds that id. Work is linear in
/// `prefix.len()`; memory is the scanner's one buffer, bounded by
/// `prefix.len()`.
pub(crate) fn recover_id(prefix: &[u8]) -> Option<Id> {
    let mut scan = IdScanner::new(prefix.len());
    scan.push(prefix);
    scan.id_so_far()
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// What a full `serde_json` parse says of a frame, to check the scanner
/// against: `None` when the frame is not one JSON object, else the values of
/// all its top-level `"id"` members, in order (duplicates kept).
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub(crate) fn parsed_top_level_ids(
    frame: &[u8],
) -> Result<Vec<serde_json::Value>, serde_json::Error> {
    use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

    struct TopLevelIds(Vec<serde_json::Value>);
    impl<'de> Deserialize<'de> for TopLevelIds {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Members;
            impl<'de> Visitor<'de> for Members {
                type Value = TopLevelIds;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevelIds, A::Error> {
                    let mut ids = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        let value = map.next_value::<serde_json::Value>()?;
                        if key == "id" {
                            ids.push(value);
                        }
                    }
                    Ok(TopLevelIds(ids))
                }
            }
            d.deserialize_map(Members)
        }
    }
    serde_json::from_slice::<TopLevelIds>(frame).map(|t| t.0)
}

/// The id a full parse finds: all top-level ids equal and valid as an [`Id`].
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub(crate) fn expected_id(ids: &[serde_json::Value]) -> Option<Id> {
    let first = ids.first()?;
    if ids.iter().any(|v| v != first) {
        return None;
    }
    serde_json::from_value::<Id>(first.clone()).ok()
}

/// Checks the scanner on `frame` cut at `cuts` against a full parse; panics
/// with the frame on a mismatch.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub(crate) fn check_against_parse(frame: &[u8], cuts: &[usize], max_id: usize) {
    let mut scanner = IdScanner::new(max_id);
    let mut start = 0;
    for &cut in cuts {
        let end = cut.clamp(start, frame.len());
        scanner.push(&frame[start..end]);
        start = end;
    }
    scanner.push(&frame[start..]);
    let got = scanner.finish();
    let shown = String::from_utf8_lossy(frame);
    match parsed_top_level_ids(frame) {
        Ok(ids) => {
            let want = expected_id(&ids);
            let fits = |id: &Id| match id {
                Id::String(s) => s.len() <= max_id,
                Id::Number(_) => true,
            };
            match &want {
                Some(id) if fits(id) => assert_eq!(got.id(), Some(id), "{shown:?}"),
                // Two ids both too long cannot be compared: either name fits.
                Some(_) if ids.len() > 1 => assert!(
                    matches!(got, IdRecovery::TooLong | IdRecovery::Ambiguous),
                    "{shown:?}: {got:?}"
                ),
                Some(_) => assert_eq!(got, IdRecovery::TooLong, "{shown:?}"),
                None => assert_eq!(got.id(), None, "{shown:?}"),
            }
            assert_eq!(
                got == IdRecovery::Absent,
                ids.is_empty(),
                "{shown:?}: {got:?}"
            );
        }
        // `serde_json` refuses numbers beyond `f64`; the scanner checks
        // syntax only.
        Err(e) if e.to_string().contains("number out of range") => {}
        Err(e) => assert_eq!(got, IdRecovery::NotJson, "{shown:?}: serde says {e}"),
    }
}

/// The character a one-letter JSON escape (`\n`, `\"`, …) stands for;
/// `None` for `u` (four hex digits follow) and for anything that is no escape.
pub(crate) fn short_escape(b: u8) -> Option<char> {
    Some(match b {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        _ => return None,
    })
}

#[cfg(test)]
// Test code: a panic is how a test reports failure.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scan(text: &str) -> IdRecovery {
        let mut s = IdScanner::new(256);
        s.push(text.as_bytes());
        s.finish()
    }

    #[test]
    fn g3_id_first_middle_last() {
        let pad = "x".repeat(10_000);
        for text in [
            format!(r#"{{"id":7,"jsonrpc":"2.0","result":{{"t":"{pad}"}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"t":"{pad}"}}}}"#),
            format!(r#"{{"result":{{"t":"{pad}","id":1}},"jsonrpc":"2.0","id":7}}"#),
            format!("{{\"result\" : [\"{pad}\", {{\"id\":2}}] ,\r\n \"id\" : 7 }}\r"),
        ] {
            assert_eq!(scan(&text), IdRecovery::Found(Id::Number(7)), "{text}");
            check_against_parse(text.as_bytes(), &[], 256);
        }
    }

    #[test]
    fn g3_string_ids_with_escapes() {
        assert_eq!(
            scan(r#"{"r":"\"id\":1","\u0069d":"a\"b\\c\u00e9\ud83d\ude00"}"#),
            IdRecovery::Found(Id::String("a\"b\\c\u{e9}\u{1F600}".into()))
        );
        assert_eq!(
            scan(r#"{"id":"é"}"#),
            IdRecovery::Found(Id::String("é".into()))
        );
    }

    #[test]
    fn g3_absent_ambiguous_and_unusable() {
        assert_eq!(
            scan(r#"{"method":"x","params":{"id":1}}"#),
            IdRecovery::Absent
        );
        assert_eq!(scan(r#"{"id":1,"x":[],"id":2}"#), IdRecovery::Ambiguous);
        assert_eq!(scan(r#"{"id":1,"id":1}"#), IdRecovery::Found(Id::Number(1)));
        assert_eq!(scan(r#"{"id":null}"#), IdRecovery::NotAnId);
        assert_eq!(scan(r#"{"id":1.5}"#), IdRecovery::NotAnId);
        assert_eq!(scan(r#"{"id":{"id":1}}"#), IdRecovery::NotAnId);
        assert_eq!(scan(r#"{"id":9223372036854775808}"#), IdRecovery::NotAnId);
        assert_eq!(
            scan(r#"{"id":-9223372036854775808}"#),
            IdRecovery::Found(Id::Number(i64::MIN))
        );
        let mut s = IdScanner::new(3);
        s.push(br#"{"id":"abcd"}"#);
        assert_eq!(s.finish(), IdRecovery::TooLong);
        s.push(br#"{"id":"abc"}"#);
        assert_eq!(s.finish(), IdRecovery::Found(Id::String("abc".into())));
    }

    #[test]
    fn g3_not_json_never_yields_an_id() {
        for text in [
            r#"{"id":1"#,
            r#"{"id":1,}"#,
            r#"{"id":1} x"#,
            r#"{"id":01}"#,
            r#"{"id":1,"r":"\x"}"#,
            r#"{"id":1,"r":"\ud800"}"#,
            "{\"id\":1,\"r\":\"\t\"}",
            r#"[{"id":1}]"#,
            r#"{"id":1,"r":tru}"#,
            "",
        ] {
            assert_eq!(scan(text), IdRecovery::NotJson, "{text}");
            check_against_parse(text.as_bytes(), &[], 256);
        }
        let mut s = IdScanner::new(8);
        s.push(b"{\"id\":1,\"r\":\"\xff\"}");
        assert_eq!(s.finish(), IdRecovery::NotJson);
    }

    #[test]
    fn g3_depth_matches_serde() {
        for depth in [125usize, 126, 127, 128, 129] {
            let text = format!(
                r#"{{"r":{}1{},"id":3}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            check_against_parse(text.as_bytes(), &[], 256);
        }
    }

    /// A JSON value of bounded depth, with `"id"` keys in nested objects.
    fn value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[\\PC\"\\\\\u{0}-\u{1f}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::vec(
                    (prop_oneof![Just("id".to_owned()), "[a-z]{0,3}"], inner),
                    0..4
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A JSON string literal with random escaping (`\uXXXX` for any char).
    fn encode_str(s: &str, escape_all: bool) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if escape_all || (c as u32) < 0x20 => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// G3/G4: for any member order (id first, middle, last), numeric or
        /// string ids with escapes, nested `"id"` keys and padding, cut into
        /// any chunks, the scanner finds what a full parse finds.
        #[test]
        fn g3_scan_equals_full_parse(
            id in prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                ("[\\PC\"\\\\\u{0}-\u{1f}]{0,16}", any::<bool>()).prop_map(|(s, e)| encode_str(&s, e)),
                Just("null".to_owned()),
                Just("1.5".to_owned()),
            ],
            with_id in prop::bool::weighted(0.9),
            others in prop::collection::vec(value(), 0..4),
            pad in 0usize..3000,
            position in any::<prop::sample::Index>(),
            escape_key in any::<bool>(),
            ws in "[ \t\r\n]{0,2}",
            cuts in prop::collection::vec(0usize..4000, 0..8),
        ) {
            let mut members: Vec<String> = vec![
                r#""jsonrpc":"2.0""#.to_owned(),
                format!(r#""result":{{"content":[{{"type":"text","text":"{}"}}],"id":{{"id":1}}}}"#, "x".repeat(pad)),
            ];
            for (i, v) in others.iter().enumerate() {
                members.push(format!(r#""k{i}":{v}"#));
            }
            if with_id {
                let key = if escape_key { r#""\u0069d""# } else { r#""id""# };
                members.insert(position.index(members.len() + 1), format!("{key}{ws}:{ws}{id}"));
            }
            let text = format!("{{{ws}{}{ws}}}", members.join(&format!("{ws},")));
            let mut cuts = cuts;
            cuts.sort_unstable();
            check_against_parse(text.as_bytes(), &cuts, 256);
            // And the id really is recovered when it is one.
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            let want = parsed.get("id").and_then(|v| serde_json::from_value::<Id>(v.clone()).ok());
            let mut s = IdScanner::new(256);
            for w in text.as_bytes().chunks(cuts.first().copied().unwrap_or(7).max(1)) {
                s.push(w);
            }
            prop_assert_eq!(s.finish().id().cloned(), want.filter(|id| !matches!(id, Id::String(s) if s.len() > 256)));
        }

        /// Random bytes around JSON punctuation: never a wrong id, any cuts.
        #[test]
        fn g3_scan_on_noise_never_disagrees(
            parts in prop::collection::vec(prop_oneof![
                Just("{".to_owned()), Just("}".to_owned()), Just("[".to_owned()), Just("]".to_owned()),
                Just(",".to_owned()), Just(":".to_owned()), Just("\"id\"".to_owned()), Just("\"".to_owned()),
                Just("\\".to_owned()), Just("1".to_owned()), Just("-0".to_owned()), Just("e5".to_owned()),
                Just(".".to_owned()), Just("null".to_owned()), Just("\\u00".to_owned()), Just(" ".to_owned()),
                "[a-z0-9é]{1,3}",
            ], 0..40),
            cuts in prop::collection::vec(0usize..200, 0..6),
        ) {
            let text = parts.concat();
            let mut cuts = cuts;
            cuts.sort_unstable();
            check_against_parse(text.as_bytes(), &cuts, 256);
        }
    }
}

/// The top-level ids of newline-delimited JSON texts, read in chunks cut
/// anywhere, without buffering a line: one scanner (the one that finds an oversized line's id) streams each line
/// and says its id at the newline. For a relay that only needs to know which
/// request a line answers, where parsing each (possibly large) line would
/// cost a full pass and a copy. Never gives a wrong id; a line whose id is
/// not a usable JSON-RPC id (or is longer than `max_id`) gives `None`.
#[derive(Debug, Clone)]
pub struct LineIds {
    scan: IdScanner,
}

impl LineIds {
    /// Ids of at most `max_id` bytes are kept.
    pub fn new(max_id: usize) -> Self {
        Self {
            scan: IdScanner::new(max_id),
        }
    }

    /// Reads the next bytes; `on_line` gets each completed line's id.
    pub fn push(&mut self, mut chunk: &[u8], mut on_line: impl FnMut(Option<Id>)) {
        while let Some(nl) = memchr::memchr(b'\n', chunk) {
            self.scan.push(&chunk[..nl]);
            on_line(match self.scan.finish() {
                IdRecovery::Found(id) => Some(id),
                _ => None,
            });
            chunk = &chunk[nl + 1..];
        }
        self.scan.push(chunk);
    }
}

#[cfg(test)]
mod line_ids_tests {
    use super::*;

    #[test]
    fn line_ids_gives_each_lines_top_level_id_across_any_cut() {
        let text = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"id\":9,\"t\":\"a\\nb\"}}\n{\"method\":\"n\"}\n{\"result\":{},\"id\":\"x\"}\nnot json\n";
        for cut in 0..text.len() {
            let mut ids = Vec::new();
            let mut l = LineIds::new(64);
            l.push(&text[..cut], |id| ids.push(id));
            l.push(&text[cut..], |id| ids.push(id));
            assert_eq!(
                ids,
                [
                    Some(Id::Number(7)),
                    None,
                    Some(Id::String("x".into())),
                    None
                ],
                "cut at {cut}"
            );
        }
    }
}
