//! The content limit on tool results (`--max-result-text BYTES`, `--keep`):
//! the second of the two limits a result needs (the wire limit is the
//! first). A `tools/call` result whose text passes the limit is cut, with a
//! marker that says what was cut in the text itself and in `_meta`
//! ([`TRUNCATED_META_KEY`]); an image, audio or blob block that alone passes
//! it is replaced by a text block saying so; `structuredContent` is never
//! edited (it may have to match the tool's `outputSchema`): when it alone
//! passes the limit, the result becomes a tool error that says so.
//!
//! # How much is kept
//!
//! The limit is on the text of the whole result, in bytes of UTF-8 as the
//! host's reader decodes it (a JSON escape counts as what it stands for).
//! Shares are water-filled: text blocks under the common share stay whole,
//! and each larger one is cut to that share, its marker included. `--keep`
//! says which part of a cut block stays: the head, the tail, or both (half
//! each). Cuts fall on character boundaries, never inside an escape.
//!
//! # Cost
//!
//! The result is read as JSON text, never built as a tree: one validating
//! pass finds the top-level members, one pass over `content` finds the
//! blocks and their places (a second one when there are more than 4,096),
//! and a memchr walk over a cut string finds the boundaries. The output is one copy of the result
//! with the edits spliced in ([`ResultEdit::apply_within`] writes the whole
//! frame around it). Memory besides the output: one `u64` per text block
//! (a third of the frame at most) and the spliced pieces (the kept text,
//! at most the limit, and one marker per edited block).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::PolicyError;
// `n` with thousands separators, as `serve`'s result budget writes them.
use crate::session::budget::thousands as commas;

/// The `_meta` key of a result the guard cut:
/// `{"omittedBytes": N, "totalBytes": N, "limit": N}`.
pub const TRUNCATED_META_KEY: &str = "io.mcp-stdio/truncated";
/// Characters of a block's `mimeType` named in its replacement text.
const MAX_MIME_CHARS: usize = 64;
/// Content blocks whose places the first pass keeps (about 64 bytes each);
/// a result with more is read a second time instead.
const MAX_KEPT_UNITS: usize = 4096;

/// Which part of a cut text block stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keep {
    /// The beginning.
    Head,
    /// The end.
    Tail,
    /// Half each (the head gets the odd byte).
    #[default]
    HeadAndTail,
}

impl Keep {
    /// `head`, `tail` or `head-and-tail`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "head" => Some(Self::Head),
            "tail" => Some(Self::Tail),
            "head-and-tail" | "head_and_tail" => Some(Self::HeadAndTail),
            _ => None,
        }
    }

    /// Its name as `--keep` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Head => "head",
            Self::Tail => "tail",
            Self::HeadAndTail => "head-and-tail",
        }
    }

    /// Bytes of head and of tail out of `kept`.
    fn split(self, kept: u64) -> (u64, u64) {
        match self {
            Self::Head => (kept, 0),
            Self::Tail => (0, kept),
            Self::HeadAndTail => (kept - kept / 2, kept / 2),
        }
    }

    /// Newlines the marker takes (between it and the kept text).
    fn newlines(self) -> u64 {
        match self {
            Self::HeadAndTail => 2,
            Self::Head | Self::Tail => 1,
        }
    }
}

/// The content limit: at most `max` bytes of text in a tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentLimit {
    max: u64,
    keep: Keep,
}

/// What the content limit did to one result: for the call's record, the
/// `_meta` marker and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutSummary {
    /// Bytes of text and media the result carried (with `structuredContent`
    /// when it was withheld).
    pub total_bytes: u64,
    /// Bytes of those the host did not get.
    pub omitted_bytes: u64,
    /// Text blocks cut.
    pub blocks_cut: u64,
    /// Image, audio and blob blocks replaced by a text block.
    pub media_replaced: u64,
    /// The size of a `structuredContent` over the limit: the result was
    /// withheld and the host got a tool error instead.
    pub structured_withheld: Option<u64>,
}

impl CutSummary {
    /// One clause for the call's record.
    pub fn describe(&self, limit: u64) -> String {
        if let Some(s) = self.structured_withheld {
            return format!(
                "its structuredContent of {} bytes passed --max-result-text {limit}: the host got a tool error instead",
                commas(s)
            );
        }
        let mut parts = Vec::new();
        if self.blocks_cut > 0 {
            parts.push(format!("{} text block(s) cut", self.blocks_cut));
        }
        if self.media_replaced > 0 {
            parts.push(format!(
                "{} image/audio/blob block(s) replaced",
                self.media_replaced
            ));
        }
        format!(
            "--max-result-text {limit}: {}; {} of {} bytes omitted",
            parts.join(", "),
            commas(self.omitted_bytes),
            commas(self.total_bytes)
        )
    }
}

/// A result's edits: byte ranges of the result text and what replaces each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultEdit {
    /// Sorted by start, none overlapping.
    splices: Vec<(Range<usize>, String)>,
    summary: CutSummary,
}

impl ResultEdit {
    /// What was cut.
    pub fn summary(&self) -> &CutSummary {
        &self.summary
    }

    /// The edited result, for the result text it was made from.
    pub fn apply(&self, result: &str) -> String {
        self.apply_within(result, 0)
    }

    /// `text` with the result it holds at byte `at` edited: one copy of
    /// `text`, the edits spliced in. A range that does not fit `text` (an
    /// edit applied to another text) leaves that part as it is.
    pub fn apply_within(&self, text: &str, at: usize) -> String {
        let removed: usize = self.splices.iter().map(|(r, _)| r.len()).sum();
        let added: usize = self.splices.iter().map(|(_, s)| s.len()).sum();
        let mut out = String::with_capacity((text.len() + added).saturating_sub(removed) + 1);
        let mut from = 0;
        for (range, with) in &self.splices {
            let (start, end) = (at + range.start, at + range.end);
            if start < from || end > text.len() {
                continue;
            }
            let (Some(before), true) = (text.get(from..start), text.is_char_boundary(end)) else {
                continue;
            };
            out.push_str(before);
            out.push_str(with);
            from = end;
        }
        out.push_str(&text[from..]);
        out
    }
}

impl ContentLimit {
    /// At most `max_bytes` of text per result, `keep` of each cut block.
    ///
    /// # Errors
    /// `max_bytes` is 0.
    pub fn new(max_bytes: u64, keep: Keep) -> Result<Self, PolicyError> {
        if max_bytes == 0 {
            return Err(PolicyError::ZeroResultText);
        }
        Ok(Self {
            max: max_bytes,
            keep,
        })
    }

    /// The limit in bytes.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Which part of a cut block stays.
    pub fn keep(&self) -> Keep {
        self.keep
    }

    /// The edits the limit makes to a `tools/call` result; `None` when it
    /// is within the limit, or is not a tool result (not a JSON object, no
    /// `content` array): then it goes on as it came.
    pub fn edit(&self, result: &str) -> Option<ResultEdit> {
        // No part of a result is longer decoded than its JSON text: one
        // within the limit as text is within it, and costs nothing more.
        if result.len() as u64 <= self.max {
            return None;
        }
        let members = crate::wire::object::members(result)?;
        let first = |key: &str| members.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        let content = first("content").filter(|c| c.get().starts_with('['))?;
        let structured = first("structuredContent").filter(|s| s.get() != "null");
        let meta = first("_meta");

        // Pass 1: the sizes, and the units themselves while there are few.
        let mut sizes = Vec::new();
        let mut units = Some(Vec::new());
        let mut media_total = 0u64;
        let mut media_over = false;
        let complete = each_element(content.get(), |block| {
            let Some(unit) = classify(block) else {
                return;
            };
            match &unit {
                Unit::Text { len, .. } => sizes.push(*len),
                Unit::Media { len, .. } => {
                    media_total = media_total.saturating_add(*len);
                    media_over |= *len > self.max;
                }
            }
            match units.as_mut() {
                Some(u) if u.len() < MAX_KEPT_UNITS => u.push(unit),
                _ => units = None,
            }
        });
        if !complete {
            return None;
        }
        let text_total = sizes.iter().fold(0u64, |a, s| a.saturating_add(*s));
        let structured_len = structured.map(|s| s.get().len() as u64);
        if let Some(s) = structured_len.filter(|s| *s > self.max) {
            return Some(self.withhold(result, &members, meta, s, text_total + media_total));
        }
        if text_total <= self.max && !media_over {
            return None;
        }

        // Pass 2: the edits (the blocks read again only when there were many).
        let level = water_level(&sizes, self.max);
        let mut summary = CutSummary {
            total_bytes: text_total.saturating_add(media_total),
            ..CutSummary::default()
        };
        let mut splices = Vec::new();
        let mut edit = |unit: Unit<'_>| {
            let media = matches!(unit, Unit::Media { .. });
            if let Some((range, with, omitted)) = self.edit_unit(result, unit, level) {
                splices.push((range, with));
                summary.omitted_bytes += omitted;
                if media {
                    summary.media_replaced += 1;
                } else {
                    summary.blocks_cut += 1;
                }
            }
        };
        match units {
            Some(units) => units.into_iter().for_each(&mut edit),
            None => {
                each_element(content.get(), |block| {
                    if let Some(unit) = classify(block) {
                        edit(unit);
                    }
                });
            }
        }
        splices.push(self.meta_splice(result, meta, &summary)?);
        splices.sort_by_key(|(r, _)| r.start);
        Some(ResultEdit { splices, summary })
    }

    /// The splice for one unit of `result` at the share `level`: the range,
    /// what replaces it (a JSON string for a text, a block for media), the
    /// bytes omitted; `None` when the unit stays.
    fn edit_unit(
        &self,
        result: &str,
        unit: Unit<'_>,
        level: u64,
    ) -> Option<(Range<usize>, String, u64)> {
        match unit {
            Unit::Text { literal, body, len } if len > level => {
                let at = offset_in(result, literal)?;
                let (cut, omitted) = self.cut_text(body, len, level);
                Some((at..at + literal.len(), cut, omitted))
            }
            Unit::Media {
                block,
                kind,
                mime,
                len,
            } if len > self.max => {
                let at = offset_in(result, block)?;
                let what = match mime {
                    Some(m) => format!("{kind} ({m})"),
                    None => kind.to_owned(),
                };
                let text = format!(
                    "[mcp-stdio: {what} of {} bytes omitted (--max-result-text {})]",
                    commas(len),
                    self.max
                );
                let with = serde_json::json!({"type": "text", "text": text}).to_string();
                Some((at..at + block.len(), with, len))
            }
            _ => None,
        }
    }

    /// The result withheld for its `structuredContent` of `len` bytes: a
    /// tool error saying so, every other member kept.
    fn withhold(
        &self,
        result: &str,
        members: &[(Cow<'_, str>, &RawValue)],
        meta: Option<&RawValue>,
        len: u64,
        others: u64,
    ) -> ResultEdit {
        let summary = CutSummary {
            total_bytes: len.saturating_add(others),
            omitted_bytes: len.saturating_add(others),
            structured_withheld: Some(len),
            ..CutSummary::default()
        };
        let text = format!(
            "[mcp-stdio: this result's structuredContent of {} bytes passes --max-result-text {}; \
             the guard withheld the result (structuredContent is never cut: it may have to match \
             the tool's outputSchema). Ask for less, or raise the limit.]",
            commas(len),
            self.max
        );
        let mut out = String::from("{");
        for (key, value) in members {
            if matches!(
                key.as_ref(),
                "content" | "structuredContent" | "isError" | "_meta"
            ) {
                continue;
            }
            out.push_str(&serde_json::Value::from(key.as_ref()).to_string());
            out.push(':');
            out.push_str(value.get());
            out.push(',');
        }
        out.push_str("\"content\":");
        out.push_str(&serde_json::json!([{"type": "text", "text": text}]).to_string());
        out.push_str(",\"isError\":true,\"_meta\":");
        let entry = self.meta_entry(&summary);
        match meta.map(RawValue::get).filter(|m| m.starts_with('{')) {
            Some(m) => {
                let (inner, _) = m.split_at(m.len() - 1);
                out.push_str(inner);
                if !inner[1..].trim().is_empty() {
                    out.push(',');
                }
                out.push_str(&entry);
                out.push('}');
            }
            None => {
                out.push('{');
                out.push_str(&entry);
                out.push('}');
            }
        }
        out.push('}');
        ResultEdit {
            splices: vec![(0..result.len(), out)],
            summary,
        }
    }

    /// `"io.mcp-stdio/truncated":{…}` for `summary`.
    fn meta_entry(&self, summary: &CutSummary) -> String {
        format!(
            "\"{TRUNCATED_META_KEY}\":{{\"omittedBytes\":{},\"totalBytes\":{},\"limit\":{}}}",
            summary.omitted_bytes, summary.total_bytes, self.max
        )
    }

    /// The splice that puts the marker into the result's `_meta`: at the
    /// end of the object it has (a key the server set itself is followed by
    /// ours, which a reader then takes), in place of a `_meta` that is not
    /// an object, or as a new first member.
    fn meta_splice(
        &self,
        result: &str,
        meta: Option<&RawValue>,
        summary: &CutSummary,
    ) -> Option<(Range<usize>, String)> {
        let entry = self.meta_entry(summary);
        let Some(meta) = meta else {
            let open = result.find('{')? + 1;
            return Some((open..open, format!("\"_meta\":{{{entry}}},")));
        };
        let at = offset_in(result, meta.get())?;
        let m = meta.get();
        if !m.starts_with('{') {
            return Some((at..at + m.len(), format!("{{{entry}}}")));
        }
        let close = at + m.len() - 1;
        let empty = m[1..m.len() - 1].trim().is_empty();
        Some((
            close..close,
            if empty { entry } else { format!(",{entry}") },
        ))
    }

    /// A text block's string (`body`, the JSON text between its quotes, of
    /// `len` decoded bytes) cut to `share` bytes with its marker: the new
    /// JSON string, and the bytes omitted.
    fn cut_text(&self, body: &str, len: u64, share: u64) -> (String, u64) {
        let keep = self.keep;
        let marker_room = marker(len, len, self.max).len() as u64 + keep.newlines();
        let (head, tail) = keep.split(share.saturating_sub(marker_room));
        let (head_end, head_kept) = raw_offset(body, head, false);
        let (tail_start, before_tail) = raw_offset(body, len.saturating_sub(tail), true);
        let (tail_start, tail_kept) = if tail == 0 || tail_start < head_end {
            (body.len(), 0)
        } else {
            (tail_start, len - before_tail)
        };
        let omitted = len - head_kept - tail_kept;
        let mark = marker(omitted, len, self.max);
        let mut out = String::with_capacity(head_end + mark.len() + 8 + body.len() - tail_start);
        out.push('"');
        out.push_str(&body[..head_end]);
        if keep != Keep::Tail {
            out.push_str("\\n");
        }
        out.push_str(&mark);
        if keep != Keep::Head {
            out.push_str("\\n");
        }
        out.push_str(&body[tail_start..]);
        out.push('"');
        (out, omitted)
    }
}

/// The marker a cut text carries.
fn marker(omitted: u64, total: u64, limit: u64) -> String {
    format!(
        "[mcp-stdio: {} of {} bytes omitted (--max-result-text {limit})]",
        commas(omitted),
        commas(total)
    )
}

/// The largest share `L` at most `budget` with every block cut to `L`
/// fitting the budget: `sum(min(size, L)) <= budget`.
fn water_level(sizes: &[u64], budget: u64) -> u64 {
    let fits = |l: u64| {
        sizes
            .iter()
            .try_fold(0u64, |acc, s| {
                let acc = acc.saturating_add((*s).min(l));
                (acc <= budget).then_some(acc)
            })
            .is_some()
    };
    let (mut lo, mut hi) = (0u64, budget);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Where `part` (a slice of `base`) starts in `base`; `None` when it is
/// not a slice of it.
pub(crate) fn offset_in(base: &str, part: &str) -> Option<usize> {
    let (b, p) = (base.as_ptr() as usize, part.as_ptr() as usize);
    (p >= b && p + part.len() <= b + base.len()).then(|| p - b)
}

/// What the limit measures in a content block.
enum Unit<'a> {
    /// A text block's string (or an embedded resource's `text`): the JSON
    /// literal with its quotes, its body between them, its decoded length.
    Text {
        literal: &'a str,
        body: &'a str,
        len: u64,
    },
    /// An image or audio block's `data`, or an embedded resource's `blob`:
    /// the whole block, what it is, and the data's length.
    Media {
        block: &'a str,
        kind: &'static str,
        mime: Option<String>,
        len: u64,
    },
}

/// A content block's fields the limit reads (an embedded resource's
/// `resource` is read as one too: its `text`, `blob`, `mimeType`).
#[derive(serde::Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
    #[serde(borrow)]
    blob: Option<&'a RawValue>,
    #[serde(rename = "mimeType", borrow)]
    mime: Option<Cow<'a, str>>,
    #[serde(borrow)]
    resource: Option<&'a RawValue>,
}

/// A JSON string literal's body, when `raw` is one.
fn string_body(raw: &RawValue) -> Option<(&str, &str)> {
    let s = raw.get();
    (s.len() >= 2 && s.starts_with('"') && s.ends_with('"')).then(|| (s, &s[1..s.len() - 1]))
}

fn mime_label(mime: Option<Cow<'_, str>>) -> Option<String> {
    mime.map(|m| m.chars().take(MAX_MIME_CHARS).collect())
}

/// The unit the limit measures in `block`, if any.
fn classify(block: &RawValue) -> Option<Unit<'_>> {
    let b: Block<'_> = serde_json::from_str(block.get()).ok()?;
    let media = |data: &RawValue, kind, mime| {
        let (_, body) = string_body(data)?;
        Some(Unit::Media {
            block: block.get(),
            kind,
            mime: mime_label(mime),
            len: decoded_len(body),
        })
    };
    match b.kind.as_deref()? {
        "text" => {
            let (literal, body) = string_body(b.text?)?;
            let len = decoded_len(body);
            Some(Unit::Text { literal, body, len })
        }
        "image" => media(b.data?, "an image", b.mime),
        "audio" => media(b.data?, "audio", b.mime),
        "resource" => {
            let r: Block<'_> = serde_json::from_str(b.resource?.get()).ok()?;
            if let Some((literal, body)) = r.text.and_then(string_body) {
                let len = decoded_len(body);
                return Some(Unit::Text { literal, body, len });
            }
            media(r.blob?, "a resource blob", r.mime)
        }
        _ => None,
    }
}

/// Calls `f` with each element of the JSON array `array`; false when it is
/// not one.
fn each_element<'a>(array: &'a str, mut f: impl FnMut(&'a RawValue)) -> bool {
    struct Each<'f, F>(&'f mut F);
    impl<'de, F: FnMut(&'de RawValue)> Visitor<'de> for Each<'_, F> {
        type Value = ();
        fn expecting(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
            out.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(element) = seq.next_element::<&'de RawValue>()? {
                (self.0)(element);
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(array);
    (&mut de).deserialize_seq(Each(&mut f)).is_ok() && de.end().is_ok()
}

/// Bytes of UTF-8 the JSON string body `body` decodes to.
pub(crate) fn decoded_len(body: &str) -> u64 {
    raw_offset(body, u64::MAX, false).1
}

/// The offset in the JSON string body `body` of the unit boundary nearest
/// decoded byte `pos` (the last at or before it, or with `up` the first at
/// or after it), and the decoded bytes before that offset. A unit is one
/// character or one escape (a surrogate pair's two escapes are one unit).
pub(crate) fn raw_offset(body: &str, pos: u64, up: bool) -> (usize, u64) {
    let b = body.as_bytes();
    let (mut i, mut decoded) = (0usize, 0u64);
    loop {
        let escape = memchr::memchr(b'\\', &b[i..]).map_or(b.len(), |k| i + k);
        let run = (escape - i) as u64;
        if decoded + run >= pos {
            // The position falls in this run of plain characters.
            let mut at = i + usize::try_from(pos - decoded)
                .unwrap_or(usize::MAX)
                .min(escape - i);
            if up {
                while at < escape && !body.is_char_boundary(at) {
                    at += 1;
                }
            } else {
                while at > i && !body.is_char_boundary(at) {
                    at -= 1;
                }
            }
            return (at, decoded + (at - i) as u64);
        }
        decoded += run;
        i = escape;
        if i >= b.len() {
            return (b.len(), decoded);
        }
        let (raw, dec) = escape_unit(&b[i..]);
        if decoded + dec > pos {
            return if up {
                (i + raw, decoded + dec)
            } else {
                (i, decoded)
            };
        }
        decoded += dec;
        i += raw;
    }
}

/// The raw length and the decoded UTF-8 length of the escape at the start
/// of `b` (`b[0]` is `\`). A lone surrogate counts as the U+FFFD a reader
/// puts in its place; a malformed escape (not valid JSON, never seen in a
/// validated string) as one byte per byte.
fn escape_unit(b: &[u8]) -> (usize, u64) {
    let hex4 = |h: Option<&[u8]>| -> Option<u32> {
        let h = std::str::from_utf8(h?).ok()?;
        u32::from_str_radix(h, 16).ok()
    };
    match b.get(1) {
        Some(b'u') => {
            let Some(cp) = hex4(b.get(2..6)) else {
                return (2, 2);
            };
            let low = b.get(6..8) == Some(b"\\u".as_slice())
                && hex4(b.get(8..12)).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
            if (0xD800..0xDC00).contains(&cp) && low {
                return (12, 4);
            }
            let dec = match cp {
                0..=0x7F => 1,
                0x80..=0x7FF => 2,
                _ => 3,
            };
            (6, dec)
        }
        Some(_) => (2, 1),
        None => (1, 1),
    }
}

#[cfg(test)]
mod tests;
