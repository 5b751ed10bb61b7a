//! Exact-value masking of configured secrets: values handed to a server
//! (the guard reads them from files) that must never appear in what we
//! write ourselves — forwarded stderr, the retained tail, notes, records,
//! reports.
//!
//! The redactor (`redact`) knows the *shapes* of common secrets and is a
//! fallback for retained bytes; this knows the *values*, and runs on
//! everything the guard passes on from its server.
//!
//! # What is masked
//!
//! Each occurrence of a secret's exact bytes is replaced by
//! [`SECRET_MARKER`]. So is its JSON string form (what a JSON writer puts
//! between the quotes: `\n`, `\"`, `\\`, control characters as `\u00XX`)
//! when that differs and is at most twice as long, since a server's JSON log
//! line carries that form. Where occurrences overlap, the leftmost wins, and
//! at one position the longest. A text that the guard itself cut at its end
//! (a note or record detail shortened to its limit) may end inside a secret:
//! such a trailing part is masked as well
//! ([`Secrets::mask_cut_text`]).
//!
//! Not recognised: any other encoding (base64, URL encoding, `\u` escapes of
//! printable characters), and a secret with bytes inserted into it.
//!
//! # Streams
//!
//! [`SecretStream`] masks a stream read in chunks: a secret split across
//! two reads is still masked. At a chunk's end it holds back only bytes that
//! could begin a secret (at most `longest - 1`, and nothing when the chunk
//! ends in ordinary text), and gives them out with the next chunk or at
//! [`SecretStream::finish`]. The output of any split of the stream equals
//! the output of [`Secrets::mask`] on the whole (a property test checks it).
//!
//! # Limits and cost
//!
//! At most [`MAX_SECRETS`] values, each of [`MIN_SECRET_BYTES`] to
//! [`MAX_SECRET_BYTES`] bytes, together at most [`MAX_SECRETS_TOTAL_BYTES`].
//! Each value gives one or two patterns (its JSON form); a pattern costs 5
//! bytes of memory per byte (the bytes and a `u32` border table), so at most
//! `3 × MAX_SECRETS_TOTAL_BYTES × 5` ≈ 3.75 MiB, shared by every clone. A
//! stream holds back at most `longest pattern - 1` bytes (< 128 KiB).
//!
//! Work is linear: each pattern is matched with a Knuth–Morris–Pratt
//! automaton (skipping to its first byte with `memchr` while nothing is
//! matched), so masking `n` bytes takes `O(patterns × n)` steps plus, in a
//! stream, one pass over at most `longest - 1` held bytes per pattern and
//! chunk: at most two automaton steps per byte and pattern, and at most
//! `2 × MAX_SECRETS` = 32 patterns. The bytes a stream holds back are
//! scanned again with the next chunk (a chunk costs
//! `O(patterns × (held + chunk))`); they are only held while they are a
//! beginning of a secret, so ordinary text is scanned once. Throughput is
//! measured by the `secrets` benchmark of `mcp-stdio-bench`.

use std::borrow::Cow;
use std::sync::Arc;

use memchr::memchr;
use smallvec::SmallVec;

/// Most secret values a [`Secrets`] holds: 16.
pub const MAX_SECRETS: usize = 16;
/// Longest secret value: 64 KiB.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;
/// Most bytes of all secret values together: 256 KiB (the patterns built
/// from them, JSON forms included, are at most three times that).
pub const MAX_SECRETS_TOTAL_BYTES: usize = 256 * 1024;
/// Shortest secret value: 4 bytes. A shorter one would mask ordinary text
/// everywhere (and is no secret worth the name); it is refused.
pub const MIN_SECRET_BYTES: usize = 4;
/// What replaces a secret: `[SECRET]` (the pattern redactor's marker is
/// `[REDACTED]`, so a reader can tell which of the two acted).
pub const SECRET_MARKER: &str = "[SECRET]";

/// Why a set of secrets was refused. The messages never contain a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsError {
    /// More than [`MAX_SECRETS`] values.
    #[error("{count} secrets given; at most {MAX_SECRETS} can be masked")]
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// A value shorter than [`MIN_SECRET_BYTES`].
    #[error(
        "secret #{index} is {len} bytes; a secret shorter than {MIN_SECRET_BYTES} bytes \
         cannot be masked without masking ordinary text"
    )]
    TooShort {
        /// Its position among the values given, from 0.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// A value longer than [`MAX_SECRET_BYTES`].
    #[error("secret #{index} is {len} bytes; at most {MAX_SECRET_BYTES} bytes can be masked")]
    TooLong {
        /// Its position among the values given, from 0.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// The values together pass [`MAX_SECRETS_TOTAL_BYTES`].
    #[error("the secrets total {total} bytes; at most {MAX_SECRETS_TOTAL_BYTES} can be masked")]
    TooMuch {
        /// Their total length.
        total: usize,
    },
}

/// One byte string to mask, with its Knuth–Morris–Pratt border table.
#[derive(Clone)]
struct Pattern {
    bytes: Box<[u8]>,
    /// `border[i]`: length of the longest proper prefix of `bytes[..=i]`
    /// that is also its suffix.
    border: Box<[u32]>,
}

impl Pattern {
    /// `bytes` is at most `2 × MAX_SECRET_BYTES` long, so borders fit a `u32`.
    fn new(bytes: &[u8]) -> Self {
        let mut border = vec![0u32; bytes.len()];
        let mut k = 0usize;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = border[k - 1] as usize;
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            border[i] = u32::try_from(k).unwrap_or(u32::MAX);
        }
        Self {
            bytes: bytes.into(),
            border: border.into(),
        }
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The border below `q` matched bytes (`q > 0`).
    fn fall(&self, q: usize) -> usize {
        self.border[q - 1] as usize
    }

    /// The automaton's next state from `q` (< len) on byte `b`.
    fn step(&self, mut q: usize, b: u8) -> usize {
        while q > 0 && self.bytes[q] != b {
            q = self.fall(q);
        }
        if self.bytes[q] == b {
            q += 1;
        }
        q
    }

    /// The longest proper prefix of the pattern that ends `text`.
    fn tail_border(&self, text: &[u8]) -> usize {
        let mut at = text.len().saturating_sub(self.len() - 1);
        let mut q = 0;
        while at < text.len() {
            if q == 0 {
                // Nothing matched: skip to the next possible start.
                match memchr(self.bytes[0], &text[at..]) {
                    Some(k) => at += k,
                    None => return 0,
                }
            }
            q = self.step(q, text[at]);
            at += 1;
            if q == self.len() {
                q = self.fall(q);
            }
        }
        q
    }
}

/// A search of one pattern through one buffer, resumed where it stopped.
#[derive(Default)]
struct Cursor {
    /// The next byte to feed.
    at: usize,
    /// Bytes of the pattern matched so far.
    q: usize,
    /// The next occurrence found, by its start.
    found: Option<usize>,
}

impl Cursor {
    /// Makes `found` the first occurrence in `buf` that starts at or after
    /// `from` (`None`: there is none).
    fn seek(&mut self, p: &Pattern, buf: &[u8], from: usize) {
        if self.found.is_some_and(|s| s >= from) {
            return;
        }
        self.found = None;
        while self.at < buf.len() {
            if self.q == 0 {
                match memchr(p.bytes[0], &buf[self.at..]) {
                    Some(k) => self.at += k,
                    None => {
                        self.at = buf.len();
                        return;
                    }
                }
            }
            self.q = p.step(self.q, buf[self.at]);
            self.at += 1;
            if self.q == p.len() {
                let start = self.at - self.q;
                self.q = p.fall(self.q);
                if start >= from {
                    self.found = Some(start);
                    return;
                }
            }
        }
    }
}

/// What one scan decided: the output is `out` (replacements and the bytes
/// before them) followed by `buf[pos..end]`; `buf[end..]` is held back.
struct Scan {
    pos: usize,
    end: usize,
    count: u64,
}

/// The secrets to mask: cheap to clone (shared), and never printed (its
/// `Debug` shows counts only).
///
/// ```
/// use mcp_stdio_core::Secrets;
///
/// let secrets = Secrets::new(["hunter22"]).unwrap();
/// let (masked, n) = secrets.mask_text("password is hunter22.");
/// assert_eq!((masked.as_ref(), n), ("password is [SECRET].", 1));
///
/// let mut stream = secrets.stream();
/// let mut out = stream.push(b"split: hun").into_owned();
/// out.extend_from_slice(&stream.push(b"ter22!\n"));
/// out.extend_from_slice(&stream.finish());
/// assert_eq!(out, b"split: [SECRET]!\n");
/// ```
#[derive(Clone, Default)]
pub struct Secrets {
    patterns: Arc<[Pattern]>,
    values: usize,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("values", &self.values)
            .field("patterns", &self.patterns.len())
            .field("longest", &self.longest())
            .finish()
    }
}

impl Secrets {
    /// The secrets `values`, checked against the limits ([`MAX_SECRETS`],
    /// [`MIN_SECRET_BYTES`], [`MAX_SECRET_BYTES`],
    /// [`MAX_SECRETS_TOTAL_BYTES`]); duplicates count once.
    pub fn new<I, B>(values: I) -> Result<Self, SecretsError>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let mut raw: Vec<Vec<u8>> = Vec::new();
        let mut total = 0usize;
        for (index, v) in values.into_iter().enumerate() {
            let v = v.as_ref();
            if v.len() < MIN_SECRET_BYTES {
                return Err(SecretsError::TooShort {
                    index,
                    len: v.len(),
                });
            }
            if v.len() > MAX_SECRET_BYTES {
                return Err(SecretsError::TooLong {
                    index,
                    len: v.len(),
                });
            }
            if raw.len() == MAX_SECRETS {
                return Err(SecretsError::TooMany { count: index + 1 });
            }
            total += v.len();
            if total > MAX_SECRETS_TOTAL_BYTES {
                return Err(SecretsError::TooMuch { total });
            }
            raw.push(v.to_vec());
        }
        raw.sort();
        raw.dedup();
        let values = raw.len();
        let mut all: Vec<Vec<u8>> = Vec::with_capacity(values * 2);
        for v in raw {
            if let Some(json) = json_form(&v) {
                all.push(json);
            }
            all.push(v);
        }
        // Longest first: at one position the longest pattern wins.
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
        Ok(Self {
            patterns: all.iter().map(|p| Pattern::new(p)).collect(),
            values,
        })
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// How many distinct values.
    pub fn count(&self) -> usize {
        self.values
    }

    /// The longest pattern (a value or its JSON form), in bytes; a stream
    /// holds back fewer bytes than this.
    pub fn longest(&self) -> usize {
        self.patterns.first().map_or(0, Pattern::len)
    }

    /// `bytes` with every secret replaced by [`SECRET_MARKER`], and how many
    /// were. Borrowed when nothing was.
    pub fn mask<'a>(&self, bytes: &'a [u8]) -> (Cow<'a, [u8]>, u64) {
        self.mask_bytes(bytes, false)
    }

    /// [`mask`](Self::mask) for text. A secret that is not UTF-8 may leave
    /// part of a character beside its marker: that part becomes U+FFFD.
    pub fn mask_text<'a>(&self, text: &'a str) -> (Cow<'a, str>, u64) {
        let (masked, n) = self.mask_bytes(text.as_bytes(), false);
        (to_text(masked, text), n)
    }

    /// [`mask_text`](Self::mask_text) for a text that may have been cut at
    /// its end: a trailing part that begins a secret (however short) is
    /// replaced as well, and counted.
    pub fn mask_cut_text<'a>(&self, text: &'a str) -> (Cow<'a, str>, u64) {
        let (masked, n) = self.mask_bytes(text.as_bytes(), true);
        (to_text(masked, text), n)
    }

    /// A stream masker for these secrets.
    pub fn stream(&self) -> SecretStream {
        SecretStream {
            secrets: self.clone(),
            held: Vec::new(),
            finished: false,
            masked: 0,
        }
    }

    /// Masks `bytes`; with `cut`, a trailing beginning of a secret too.
    fn mask_bytes<'a>(&self, bytes: &'a [u8], cut: bool) -> (Cow<'a, [u8]>, u64) {
        if self.is_empty() {
            return (Cow::Borrowed(bytes), 0);
        }
        let mut out = Vec::new();
        let scan = self.scan(bytes, cut, &mut out);
        let partial = scan.end < bytes.len();
        if scan.count == 0 && !partial {
            return (Cow::Borrowed(bytes), 0);
        }
        out.extend_from_slice(&bytes[scan.pos..scan.end]);
        if partial {
            out.extend_from_slice(SECRET_MARKER.as_bytes());
        }
        (Cow::Owned(out), scan.count + u64::from(partial))
    }

    /// Replaces, leftmost first and longest at a position, the occurrences
    /// that start before `end`, writing to `out` up to the last one. With
    /// `hold`, `end` is the first position from which the rest of `buf`
    /// could be the beginning of a secret (the bytes a stream holds back);
    /// otherwise the end of `buf`.
    fn scan(&self, buf: &[u8], hold: bool, out: &mut Vec<u8>) -> Scan {
        let patterns = &self.patterns[..];
        let len = buf.len();
        // Per pattern, its longest proper prefix ending `buf`.
        let mut borders: SmallVec<[usize; 8]> = if hold {
            patterns.iter().map(|p| p.tail_border(buf)).collect()
        } else {
            SmallVec::new()
        };
        let held_from = |borders: &[usize]| len - borders.iter().copied().max().unwrap_or(0);
        let mut end = held_from(&borders);
        let mut cursors: SmallVec<[Cursor; 8]> =
            patterns.iter().map(|_| Cursor::default()).collect();
        let (mut pos, mut count) = (0, 0);
        loop {
            let mut best: Option<(usize, usize)> = None;
            for (i, (c, p)) in cursors.iter_mut().zip(patterns).enumerate() {
                c.seek(p, buf, pos);
                // Strictly less: among equal starts the first, longest, pattern stays.
                if let Some(s) = c.found.filter(|&s| best.is_none_or(|(b, _)| s < b)) {
                    best = Some((s, i));
                }
            }
            let Some((start, i)) = best.filter(|&(s, _)| s < end) else {
                break;
            };
            out.extend_from_slice(&buf[pos..start]);
            out.extend_from_slice(SECRET_MARKER.as_bytes());
            count += 1;
            pos = start + patterns[i].len();
            if pos > end {
                // The held part began inside this occurrence: only a
                // beginning of a secret after it still counts.
                for (b, p) in borders.iter_mut().zip(patterns) {
                    while *b > len - pos {
                        *b = p.fall(*b);
                    }
                }
                end = held_from(&borders);
            }
        }
        Scan { pos, end, count }
    }
}

/// The JSON string form of `value` (without quotes), when it is UTF-8,
/// differs, and is at most twice as long.
fn json_form(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?;
    let quoted = serde_json::to_string(text).ok()?;
    let inner = quoted.get(1..quoted.len() - 1)?;
    (inner.len() != value.len() && inner.len() <= 2 * value.len())
        .then(|| inner.as_bytes().to_vec())
}

fn to_text<'a>(masked: Cow<'a, [u8]>, original: &'a str) -> Cow<'a, str> {
    match masked {
        Cow::Borrowed(_) => Cow::Borrowed(original),
        Cow::Owned(v) => Cow::Owned(
            String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()),
        ),
    }
}

/// Masks a stream read in chunks (see the module docs): feed each chunk to
/// [`push`](Self::push) and pass on what it returns, then pass on
/// [`finish`](Self::finish) at the stream's end. After `finish`, `push`
/// holds nothing back.
pub struct SecretStream {
    secrets: Secrets,
    held: Vec<u8>,
    finished: bool,
    masked: u64,
}

impl std::fmt::Debug for SecretStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStream")
            .field("secrets", &self.secrets)
            .field("held", &self.held.len())
            .field("finished", &self.finished)
            .field("masked", &self.masked)
            .finish()
    }
}

impl SecretStream {
    /// The masked bytes that are final after `chunk`: everything up to a
    /// possible beginning of a secret at its end, which is held back.
    /// Borrowed from `chunk` when nothing was held or replaced.
    pub fn push<'a>(&mut self, chunk: &'a [u8]) -> Cow<'a, [u8]> {
        if self.secrets.is_empty() {
            return Cow::Borrowed(chunk);
        }
        let hold = !self.finished;
        let mut out = Vec::new();
        if self.held.is_empty() {
            let scan = self.secrets.scan(chunk, hold, &mut out);
            self.masked += scan.count;
            self.held.extend_from_slice(&chunk[scan.end..]);
            if scan.count == 0 {
                return Cow::Borrowed(&chunk[..scan.end]);
            }
            out.extend_from_slice(&chunk[scan.pos..scan.end]);
            return Cow::Owned(out);
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        let scan = self.secrets.scan(&buf, hold, &mut out);
        self.masked += scan.count;
        out.extend_from_slice(&buf[scan.pos..scan.end]);
        buf.drain(..scan.end);
        self.held = buf;
        Cow::Owned(out)
    }

    /// The end of the stream: the held-back bytes, masked. Later chunks are
    /// masked whole, nothing held back.
    pub fn finish(&mut self) -> Vec<u8> {
        self.finished = true;
        let held = std::mem::take(&mut self.held);
        self.push(&held).into_owned()
    }

    /// Bytes held back now (fewer than [`Secrets::longest`]).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Secrets replaced so far.
    pub fn masked(&self) -> u64 {
        self.masked
    }
}

#[cfg(test)]
mod tests;
