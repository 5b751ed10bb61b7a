//! The canonical JSON text of a tool definition's covered fields, read in
//! one pass: object keys sorted by their UTF-8 bytes (a key that repeats
//! counts by its last value, as `JSON.parse` takes it), no whitespace,
//! strings decoded and escaped again as `serde_json` writes them (so
//! `"\u00e9"` and `"é"` are one text), numbers and literals exactly as
//! written (so `1`, `1.0` and `1e0` differ: no change to a number's text
//! goes unnoticed, and no number is rounded through a float). Reading a
//! canonical text gives it back unchanged, so a definition kept in the pin
//! file digests as it did when it was seen.
//!
//! Memory: one node per JSON value of the text (like a `serde_json::Value`).

use super::PinError;

/// Bound of nesting in a tool definition: 128 levels (`serde_json`'s own
/// default). Deeper is an error, not a stack overflow.
pub const MAX_DEFINITION_DEPTH: usize = 128;

/// One JSON value as read.
#[derive(Debug)]
pub(super) enum Node<'a> {
    /// A number, `true`, `false` or `null`: its text as written.
    Literal(&'a str),
    /// A string, decoded.
    Str(String),
    Array(Vec<Self>),
    /// Members in the order written.
    Object(Vec<(String, Self)>),
}

/// Reads one JSON value (surrounding whitespace allowed, nothing else).
pub(super) fn parse(text: &str) -> Result<Node<'_>, PinError> {
    let mut p = Parser { text, pos: 0 };
    let node = p.value(0)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(p.error("trailing characters"));
    }
    Ok(node)
}

impl Node<'_> {
    /// The value of `key` in an object (its last, when repeated).
    pub(super) fn member(&self, key: &str) -> Option<&Self> {
        match self {
            Self::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a string.
    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Writes the canonical text.
    pub(super) fn write(&self, out: &mut String) {
        match self {
            Self::Literal(text) => out.push_str(text),
            Self::Str(s) => push_string(s, out),
            Self::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Self::Object(members) => {
                // Sorted by key, and within one key the last written first:
                // the first of each run is the value that counts.
                let mut order: Vec<usize> = (0..members.len()).collect();
                order.sort_by(|&a, &b| {
                    members[a]
                        .0
                        .as_bytes()
                        .cmp(members[b].0.as_bytes())
                        .then(b.cmp(&a))
                });
                out.push('{');
                let mut last: Option<&str> = None;
                for i in order {
                    let (key, value) = &members[i];
                    if last == Some(key.as_str()) {
                        continue;
                    }
                    if last.is_some() {
                        out.push(',');
                    }
                    last = Some(key);
                    push_string(key, out);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// A string as JSON text, escaped as `serde_json` escapes it (`"`, `\\` and
/// control characters; a string without them is copied as it is).
pub(super) fn push_string(s: &str, out: &mut String) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    // Serializing a `str` cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &str) -> PinError {
        PinError::Json(format!("{what} at byte {}", self.pos))
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, PinError> {
        self.skip_ws();
        match self.peek() {
            Some(b'{' | b'[') if depth >= MAX_DEFINITION_DEPTH => {
                Err(self.error(&format!("nested deeper than {MAX_DEFINITION_DEPTH} levels")))
            }
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Node::Str(self.string()?)),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("unexpected character")),
            None => Err(self.error("unexpected end")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Node<'a>, PinError> {
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.error("expected `:`"));
            }
            self.pos += 1;
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Node::Object(members));
                }
                _ => return Err(self.error("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Node<'a>, PinError> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                _ => return Err(self.error("expected `,` or `]`")),
            }
        }
    }

    /// A string token, decoded by `serde_json` (escapes, surrogates).
    fn string(&mut self) -> Result<String, PinError> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => self.pos += 2,
                Some(c) if c < 0x20 => return Err(self.error("control character in a string")),
                Some(_) => self.pos += 1,
            }
        }
        self.pos += 1;
        // Ends on the closing quote (ASCII): a character boundary.
        let token = self
            .text
            .get(start..self.pos)
            .ok_or_else(|| self.error("unterminated string"))?;
        serde_json::from_str::<String>(token).map_err(|e| self.error(&e.to_string()))
    }

    fn number(&mut self) -> Result<Node<'a>, PinError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid number"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid number"));
            }
            self.digits();
        }
        // ASCII from `start` to here: character boundaries.
        Ok(Node::Literal(&self.text[start..self.pos]))
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &'static str) -> Result<Node<'a>, PinError> {
        if self.text.as_bytes()[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(Node::Literal(word))
        } else {
            Err(self.error("invalid literal"))
        }
    }
}
