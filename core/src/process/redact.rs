//! Redaction of retained diagnostics: a fallback, never a guarantee.
//!
//! A helper must not write credentials, authorization headers or key material
//! to stderr. When one does anyway, the bytes we *retain* pass through this
//! scanner before they reach a record, a rendered tail or an agent excerpt,
//! so the most obvious secrets are replaced by `[REDACTED]`. It cannot take
//! back what already reached a terminal, a crash report or the child's own
//! logs, and it only knows the shapes below: treat it as a safety net under
//! the rule "helpers print no secrets", not as a reason to relax it.
//!
//! # What is recognised
//!
//! | shape | replaced |
//! | --- | --- |
//! | `Authorization: …`, `Proxy-Authorization: …` (any case) | the value to the end of the line; a leading scheme word (`Bearer`, `Basic`, …) stays |
//! | `Bearer <token>` (any case, token ≥ 8 chars) | the token |
//! | `-----BEGIN … PRIVATE KEY-----` … `-----END … PRIVATE KEY-----` (also `PGP PRIVATE KEY BLOCK`) | the whole block, as one `[REDACTED]` |
//! | a block cut at the start of a segment (its `BEGIN` line was dropped): base64 lines then an `END … PRIVATE KEY` line | the base64 lines and the `END` line |
//! | a block cut at the end of a segment (no `END` line) | from `BEGIN` to the end of the segment |
//! | `sk-…` (≥ 20 chars after the prefix), `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_…` (≥ 20), `xoxb-`/`xoxp-`/`xoxa-`/`xoxr-`/`xoxs-…` (≥ 10), `AKIA`/`ASIA` + 16 upper-case letters or digits | the whole token, at a word start only (`task-…` is not `sk-…`) |
//! | `password=`, `passwd=`, `secret=`, `token=`, `api_key=`, `apikey=` (any case, also as the end of a longer name: `access_token=`, `DB_PASSWORD=`) | the value (up to a space, quote, `&`, `,`, `;` or bracket) |
//! | the same names as JSON keys (`"token": "…"`) | the quoted value |
//! | the same names followed by `:` and a long token (≥ 16 of base64/hex characters, one a digit) | the token |
//!
//! # Bounds
//!
//! One pass over the bytes, in place: every replacement is no longer than
//! what it replaces (a value shorter than `[REDACTED]` becomes `***`, or one
//! `*` per byte below three), so the result never needs more memory than the
//! retained bytes already use and the retention pool's accounting holds.
//! Work is linear in the bytes (each position is compared against a fixed
//! set of short patterns; each line is searched for key markers about once
//! per kind); nothing is allocated.
//!
//! # What it misses
//!
//! A secret whose recognisable start was dropped by the retention boundary
//! (the tail begins in the middle of a token) is not recognised, except a
//! private key's body, which is caught through its `END` line. A key body cut
//! at *both* ends (neither `BEGIN` nor `END` retained) is not recognised.
//! Any secret of another shape passes. It errs towards hiding: short
//! base64-like lines just before an `END … PRIVATE KEY` line go with it.

use memchr::{memchr, memmem};

/// What replaces a secret of at least its length.
pub(crate) const MARKER: &[u8] = b"[REDACTED]";

/// Redacts `buf` in place; returns the new length (never more than
/// `buf.len()`; the result is `buf[..len]`) and the number of secrets
/// replaced.
///
/// The segment is treated on its own: a caller with a head and a tail (two
/// segments separated by dropped bytes) redacts each, so a key block cut by
/// the boundary is caught on both sides.
pub fn redact_in_place(buf: &mut [u8]) -> (usize, u64) {
    let mut out = Out {
        w: 0,
        count: 0,
        buf,
    };
    let n = out.buf.len();
    let mut r = 0;
    let mut in_key = false;
    // Output offset and count where the current run of key-body-like lines began.
    let mut run: Option<(usize, u64)> = None;
    while r < n {
        let le = memchr(b'\n', &out.buf[r..]).map_or(n, |i| r + i + 1);
        let body_end = trim_eol(out.buf, r, le);
        let unterminated = le == n && out.buf[n - 1] != b'\n';
        let mut begins = NextMarker::new(b"-----BEGIN ");
        let mut ends = NextMarker::new(b"-----END ");
        let plain = !in_key
            && begins.from(out.buf, r, body_end).is_none()
            && ends.from(out.buf, r, body_end).is_none();
        let line = &out.buf[r..body_end];
        if plain {
            let t = trim_start(line);
            let (empty, body_like) = (t.is_empty(), is_key_body_line(line));
            if unterminated && run.is_some() && !empty && is_prefix_of_end(t) {
                // The stream stopped inside the END line of a block whose BEGIN was dropped.
                // The marker replaces the body and this line, which together
                // may be shorter than it: `replace` keeps within them.
                out.rewind(run.take());
                out.replace(body_end - out.w);
            } else {
                let before = (out.w, out.count);
                redact_line(&mut out, r, body_end);
                if body_like || (empty && run.is_some()) {
                    run.get_or_insert(before);
                } else {
                    run = None;
                }
            }
            out.copy(body_end, le);
            r = le;
            continue;
        }
        // A line with key markers, possibly several (`-----END …----- -----BEGIN …`).
        let mut p = r;
        loop {
            if in_key {
                match ends.from(out.buf, p, body_end) {
                    Some((_, e)) => {
                        in_key = false;
                        p = e;
                        continue;
                    }
                    None => break, // the whole rest is key material
                }
            }
            let begin = begins.from(out.buf, p, body_end);
            let end = ends
                .from(out.buf, p, body_end)
                .filter(|(es, _)| !matches!(begin, Some((bs, _)) if bs < *es));
            if let Some((es, e)) = end {
                // A block whose BEGIN was dropped: what came just before is its body.
                let before = &out.buf[p..es];
                if run.is_some() {
                    out.rewind(run.take());
                } else if !is_key_body_line(before) && !trim_start(before).is_empty() {
                    redact_line(&mut out, p, es);
                }
                out.put(MARKER, true);
                p = e;
                continue;
            }
            if let Some((bs, be)) = begin {
                redact_line(&mut out, p, bs);
                out.put(MARKER, true);
                in_key = true;
                run = None;
                p = be;
                continue;
            }
            redact_line(&mut out, p, body_end);
            break;
        }
        run = None;
        if !in_key {
            out.copy(body_end, le);
        }
        r = le;
    }
    (out.w, out.count)
}

/// The next private-key marker of one kind in a line, searched again only
/// once the position passes the one found (so a line with many markers is
/// still scanned about once per kind).
struct NextMarker {
    prefix: &'static [u8],
    found: Option<Option<(usize, usize)>>,
}

impl NextMarker {
    fn new(prefix: &'static [u8]) -> Self {
        Self {
            prefix,
            found: None,
        }
    }

    /// `(start, end)` in `buf` of the first marker in `buf[p..end]`. Bytes at
    /// or after `p` are still input: the write position never passes it.
    fn from(&mut self, buf: &[u8], p: usize, end: usize) -> Option<(usize, usize)> {
        if matches!(self.found, Some(Some((s, _))) if s < p) {
            self.found = None;
        }
        *self.found.get_or_insert_with(|| {
            let hay = &buf[p..end];
            memmem::find_iter(hay, self.prefix).find_map(|s| {
                let label = private_key_label_end(&hay[s + self.prefix.len()..])?;
                Some((p + s, p + s + self.prefix.len() + label))
            })
        })
    }
}

/// The write side of the in-place pass: `w` never passes the read position.
struct Out<'a> {
    buf: &'a mut [u8],
    w: usize,
    count: u64,
}

impl Out<'_> {
    /// Moves input bytes `from..to` (at or after `w`) to the write position.
    fn copy(&mut self, from: usize, to: usize) {
        if from < to {
            self.buf.copy_within(from..to, self.w);
            self.w += to - from;
        }
    }

    /// Drops what was written since `mark` (output offset and count), if any.
    fn rewind(&mut self, mark: Option<(usize, u64)>) {
        if let Some((w, count)) = mark {
            self.w = w;
            self.count = count;
        }
    }

    /// Writes replacement bytes (callers ensure they are no longer than what
    /// they replace, so `w` stays behind the read position).
    fn put(&mut self, bytes: &[u8], counted: bool) {
        self.buf[self.w..self.w + bytes.len()].copy_from_slice(bytes);
        self.w += bytes.len();
        if counted {
            self.count += 1;
        }
    }

    /// Replaces a secret of `len` bytes with the marker, or a shorter mask.
    fn replace(&mut self, len: usize) {
        if len >= MARKER.len() {
            self.put(MARKER, true);
        } else {
            self.put(&b"***"[..len.min(3)], true);
        }
    }
}

/// End of the line without its `\n` or `\r\n`.
fn trim_eol(buf: &[u8], start: usize, end: usize) -> usize {
    let mut e = end;
    if e > start && buf[e - 1] == b'\n' {
        e -= 1;
    }
    if e > start && buf[e - 1] == b'\r' {
        e -= 1;
    }
    e
}

fn trim_start(line: &[u8]) -> &[u8] {
    let skip = line
        .iter()
        .take_while(|b| **b == b' ' || **b == b'\t')
        .count();
    &line[skip..]
}

/// After `-----BEGIN ` / `-----END `: the end of `… PRIVATE KEY[ BLOCK]-----`
/// if the label (at most 40 bytes) says private key.
fn private_key_label_end(rest: &[u8]) -> Option<usize> {
    let window = &rest[..rest.len().min(40)];
    let p = memmem::find(window, b"PRIVATE KEY")? + 11;
    let mut at = p;
    if rest[at..].starts_with(b" BLOCK") {
        at += 6;
    }
    rest[at..].starts_with(b"-----").then_some(at + 5)
}

/// A prefix of an END line, as when the stream stopped inside it: `-----E`,
/// `-----END RSA PRIV`, but not a complete `-----END CERTIFICATE-----`.
fn is_prefix_of_end(t: &[u8]) -> bool {
    let end = b"-----END ";
    if t.len() <= end.len() {
        return end.starts_with(t);
    }
    t.starts_with(end)
        && t[end.len()..]
            .iter()
            .all(|b| b.is_ascii_uppercase() || *b == b' ')
}

/// A line that can belong to a PEM body: base64 only, or a PEM header.
fn is_key_body_line(line: &[u8]) -> bool {
    let t = trim_start(line);
    if t.starts_with(b"Proc-Type:") || t.starts_with(b"DEK-Info:") {
        return true;
    }
    !t.is_empty()
        && t.iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Characters of a bearer token (RFC 6750 `b64token`).
fn is_bearer_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
}

/// Characters of a base64 or hex token.
fn is_long_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'_' | b'.' | b'-')
}

/// Where a key=value value ends.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\''
                | b'&'
                | b','
                | b';'
                | b'<'
                | b'>'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
        )
}

/// Case-insensitive `starts_with` against a lower-case needle.
fn starts_ci(hay: &[u8], lower: &[u8]) -> bool {
    hay.len() >= lower.len()
        && hay
            .iter()
            .zip(lower)
            .all(|(h, l)| h.to_ascii_lowercase() == *l)
}

/// Prefixed tokens: (prefix, allowed body characters, minimum body length,
/// exact length if fixed).
struct TokenShape {
    prefix: &'static [u8],
    body: fn(u8) -> bool,
    min: usize,
    exact: bool,
}

fn token_body(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}
fn github_body(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
fn slack_body(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}
fn aws_body(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

const TOKENS: &[TokenShape] = &[
    TokenShape {
        prefix: b"sk-",
        body: token_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghp_",
        body: github_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"gho_",
        body: github_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghu_",
        body: github_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghs_",
        body: github_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghr_",
        body: github_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"github_pat_",
        body: github_body,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxb-",
        body: slack_body,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxp-",
        body: slack_body,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxa-",
        body: slack_body,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxr-",
        body: slack_body,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxs-",
        body: slack_body,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"AKIA",
        body: aws_body,
        min: 16,
        exact: true,
    },
    TokenShape {
        prefix: b"ASIA",
        body: aws_body,
        min: 16,
        exact: true,
    },
];

/// Names whose value is a secret (lower case).
const SECRET_NAMES: &[&[u8]] = &[
    b"password",
    b"passwd",
    b"secret",
    b"token",
    b"api_key",
    b"apikey",
];

/// Redacts the secrets of one line `buf[start..end]` (no end-of-line bytes),
/// writing the result at `out.w`.
fn redact_line(out: &mut Out<'_>, start: usize, end: usize) {
    let mut copied = start; // input bytes before this are already written
    let mut i = start;
    while i < end {
        match secret_at(out.buf, start, i, end) {
            Some((s, e, keep)) => {
                out.copy(copied, s);
                if keep > 0 {
                    out.copy(s, s + keep);
                }
                out.replace(e - s - keep);
                copied = e;
                i = e;
            }
            None => i += 1,
        }
    }
    out.copy(copied, end);
}

/// A secret starting its match at `i`: `(span start, span end, bytes of the
/// span kept)`, spans never before `i`.
fn secret_at(buf: &[u8], line_start: usize, i: usize, end: usize) -> Option<(usize, usize, usize)> {
    let line = &buf[..end];
    let c = line[i].to_ascii_lowercase();
    let word_start = i == line_start || !is_word(line[i - 1]);
    // Authorization headers: the rest of the line.
    if matches!(c, b'a' | b'p') && starts_ci(&line[i..], b"authorization:") {
        let v = skip_blanks(line, i + 14);
        if v < end {
            // Keep a scheme word (`Bearer`, `Basic`, …) before the credentials.
            let word = line[v..]
                .iter()
                .take_while(|b| b.is_ascii_alphabetic())
                .count();
            let keep = if word > 0 && word <= 10 && line.get(v + word) == Some(&b' ') {
                skip_blanks(line, v + word) - v
            } else {
                0
            };
            if v + keep < end {
                return Some((v, end, keep));
            }
        }
        return None;
    }
    if c == b'b' && word_start && starts_ci(&line[i..], b"bearer") {
        let v = skip_blanks(line, i + 6);
        if v > i + 6 {
            let len = line[v..].iter().take_while(|b| is_bearer_char(**b)).count();
            // `bearer Authorization: …` is a header name, handled at its own start.
            if len >= 8 && line.get(v + len) != Some(&b':') {
                return Some((v, v + len, 0));
            }
        }
        return None;
    }
    if word_start {
        for shape in TOKENS {
            if !line[i..].starts_with(shape.prefix) {
                continue;
            }
            let b = i + shape.prefix.len();
            let len = line[b..].iter().take_while(|x| (shape.body)(**x)).count();
            let ok = if shape.exact {
                len == shape.min
                    && !matches!(line.get(b + len), Some(x) if x.is_ascii_alphanumeric())
            } else {
                len >= shape.min
            };
            if ok {
                return Some((i, b + len, 0));
            }
        }
    }
    for name in SECRET_NAMES {
        if c == name[0] && starts_ci(&line[i..], name) {
            if let Some((s, e)) = secret_value(line, i + name.len()) {
                return Some((s, e, 0));
            }
        }
    }
    None
}

fn skip_blanks(line: &[u8], mut at: usize) -> usize {
    while at < line.len() && (line[at] == b' ' || line[at] == b'\t') {
        at += 1;
    }
    at
}

/// The value after a secret's name ending at `at`: `name=value`,
/// `"name": "value"`, or `name: <long token>`.
fn secret_value(line: &[u8], at: usize) -> Option<(usize, usize)> {
    let quoted_name = matches!(line.get(at), Some(b'"' | b'\''));
    let sep_at = skip_blanks(line, at + usize::from(quoted_name));
    let sep = *line.get(sep_at)?;
    if sep != b'=' && sep != b':' {
        return None;
    }
    let mut v = skip_blanks(line, sep_at + 1);
    let quoted_value = matches!(line.get(v), Some(b'"' | b'\''));
    if quoted_value {
        v += 1;
    }
    if sep == b'=' || (quoted_name && quoted_value) {
        let len = line[v..].iter().take_while(|b| !ends_value(**b)).count();
        return (len > 0).then_some((v, v + len));
    }
    // `name: value` is also prose ("invalid token: expected …"): only a long
    // token counts. Scanned with the token's own characters, so a rejected
    // value ends at the next separator and the pass stays linear.
    let len = line[v..]
        .iter()
        .take_while(|b| is_long_token_char(**b))
        .count();
    let value = &line[v..v + len];
    (len >= 16 && value.iter().any(u8::is_ascii_digit)).then_some((v, v + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(text: &str) -> (String, u64) {
        let mut buf = text.as_bytes().to_vec();
        let (len, count) = redact_in_place(&mut buf);
        assert!(len <= text.len());
        buf.truncate(len);
        (String::from_utf8(buf).expect("ASCII in, ASCII out"), count)
    }

    const KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\n\
        MIIEowIBAAKCAQEAxk3kF0Zq1vSECRETKEYBODYLINE1aaaaaaaaaaaaaaaaaaaaa\n\
        b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQSECRETKEYBODYLINE2bbbb\n\
        Zm9vYmFyYmF6cXV4SECRETKEYBODYLINE3cccccccccccccccccccccccccc==\n\
        -----END RSA PRIVATE KEY-----\n";

    /// G10: a segment that ends inside the END line of a block whose BEGIN
    /// was dropped, with a body shorter than the marker: the replacement
    /// stays within the bytes it replaces (found by the `helper_run` fuzz
    /// target: the marker was written past the end of the segment).
    #[test]
    fn g10_a_short_cut_key_block_is_masked_within_its_bytes() {
        for text in ["ab\n-", "ab\n-----E", "a\n\n--", "x\nab\r\n-----END "] {
            let (out, n) = redact(text);
            assert!(out.len() <= text.len(), "{text:?} → {out:?}");
            assert_eq!(n, 1, "{text:?} → {out:?}");
            assert!(!out.contains("ab\n-"), "{text:?} → {out:?}");
        }
        let (out, _) = redact("ab\n-");
        assert_eq!(out, "***");
        let (out, _) = redact("QUJDREVGR0hJSktMTU5PUA==\n-----END RSA PRI");
        assert_eq!(out, "[REDACTED]");
    }

    #[test]
    fn g10_redacts_authorization_headers_keeping_the_scheme() {
        let (out, n) = redact(
            "> GET /v1 HTTP/1.1\n> Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig\n",
        );
        assert_eq!(
            out,
            "> GET /v1 HTTP/1.1\n> Authorization: Bearer [REDACTED]\n"
        );
        assert_eq!(n, 1);
        let (out, n) = redact("proxy-authorization: Basic dXNlcjpwYXNzd29yZA==\r\n");
        assert_eq!(out, "proxy-authorization: Basic [REDACTED]\r\n");
        assert_eq!(n, 1);
        let (out, _) = redact("AUTHORIZATION:abc\n");
        assert_eq!(out, "AUTHORIZATION:***\n");
    }

    #[test]
    fn g10_redacts_bearer_tokens_outside_headers() {
        let (out, n) = redact("retrying with bearer abcdEFGH1234.xyz after 401\n");
        assert_eq!(out, "retrying with bearer [REDACTED] after 401\n");
        assert_eq!(n, 1);
    }

    #[test]
    fn g10_redacts_a_whole_private_key_block() {
        let text = format!("loading key\n{KEY}key loaded\n");
        let (out, n) = redact(&text);
        assert_eq!(out, "loading key\n[REDACTED]\nkey loaded\n");
        assert_eq!(n, 1);
        let (out, _) =
            redact("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----");
        assert_eq!(out, "[REDACTED]");
        let (out, _) = redact("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGAAAA\n-----END PGP PRIVATE KEY BLOCK-----\n");
        assert_eq!(out, "[REDACTED]\n");
    }

    #[test]
    fn g10_redacts_a_key_block_cut_by_the_retention_boundary() {
        // Tail side: the BEGIN line and the first body line were dropped.
        let cut = &KEY[KEY.find("b3Bl").expect("line 2") + 7..];
        let (out, n) = redact(&format!("{cut}next step failed\n"));
        assert_eq!(out, "[REDACTED]\nnext step failed\n");
        assert_eq!(n, 1);
        // Head side: the block runs past the end of the segment.
        let head = &KEY[..KEY.find("Zm9v").expect("line 3") + 10];
        let (out, n) = redact(&format!("starting\n{head}"));
        assert_eq!(out, "starting\n[REDACTED]");
        assert_eq!(n, 1);
        // The stream stopped inside the END line.
        let (out, _) = redact("AAAABBBB\nCCCCDDDD==\n-----EN");
        assert_eq!(out, "[REDACTED]");
        // A log line before the cut body stays.
        let (out, _) = redact(&format!("error: handshake\n{cut}"));
        assert_eq!(out, "error: handshake\n[REDACTED]\n");
    }

    #[test]
    fn g10_redacts_several_key_markers_and_tokens_on_one_line() {
        // Found by the property test: markers and tokens share lines.
        let one = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBody0123\n-----END EC PRIVATE KEY-----";
        let text = format!("{one} {one} sk-live-0123456789abcdefghijKLMN\n");
        let (out, n) = redact(&text);
        assert_eq!(out, "[REDACTED] [REDACTED] [REDACTED]\n");
        assert_eq!(n, 3);
        let (out, _) = redact("-----BEGIN CERTIFICATE----- -----BEGIN RSA PRIVATE KEY-----\nQUJD\n-----END RSA PRIVATE KEY-----\n");
        assert_eq!(out, "-----BEGIN CERTIFICATE----- [REDACTED]\n");
        let (out, n) = redact("bearer Authorization: Basic c2VjcmV0OnZhbHVlMTIz\n");
        assert_eq!(out, "bearer Authorization: Basic [REDACTED]\n");
        assert_eq!(n, 1);
    }

    #[test]
    fn g10_redacts_obvious_tokens() {
        let cases = [
            (
                "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv rejected",
                "key [REDACTED] rejected",
            ),
            (
                "push with ghp_1234567890abcdefghijABCDEFGHIJ failed",
                "push with [REDACTED] failed",
            ),
            (
                "token github_pat_11ABCDEFG0123456789_abcdefghij used",
                "token [REDACTED] used",
            ),
            (
                "slack xoxb-1234-5678-abcdefGHIJ said no",
                "slack [REDACTED] said no",
            ),
            ("xoxp-99999999999-abc", "[REDACTED]"),
            (
                "aws key AKIAIOSFODNN7EXAMPLE denied",
                "aws key [REDACTED] denied",
            ),
            (
                "session ASIAY34FZKBOKMUTVV7A expired",
                "session [REDACTED] expired",
            ),
        ];
        for (input, want) in cases {
            let (out, n) = redact(input);
            assert_eq!(out, want, "{input}");
            assert_eq!(n, 1, "{input}");
        }
    }

    #[test]
    fn g10_redacts_values_of_secret_names() {
        let cases = [
            (
                "GET /cb?code=7&access_token=3f9a1c0e5b7d2468ace0&state=x",
                "GET /cb?code=7&access_token=[REDACTED]&state=x",
            ),
            ("DB_PASSWORD=hunter2 ./run", "DB_PASSWORD=*** ./run"),
            (
                "client_secret = 'abcdefghijklmnop'",
                "client_secret = '[REDACTED]'",
            ),
            (
                r#"{"token": "0123456789abcdef0123", "user": "ann"}"#,
                r#"{"token": "[REDACTED]", "user": "ann"}"#,
            ),
            (
                "api_key: 9f86d081884c7d659a2feaa0c55ad015",
                "api_key: [REDACTED]",
            ),
            ("passwd=ab", "passwd=**"),
        ];
        for (input, want) in cases {
            let (out, n) = redact(input);
            assert_eq!(out, want, "{input}");
            assert_eq!(n, 1, "{input}");
        }
    }

    #[test]
    fn g10_ordinary_log_lines_are_not_redacted() {
        let lines = [
            "connection retry 18 failed: remote side closed the channel",
            "task-runner-0123456789abcdefghij started",
            "invalid token: expected string, got number",
            "max_tokens=4096 temperature=0.2",
            "the bearer of bad news",
            "password prompt disabled",
            "PWD=/home/build/src",
            "secret: rotated",
            "ASKIA0123456789ABCDEF is not a key id",
            "AKIA0123",
            "-----BEGIN CERTIFICATE-----",
            "MIIBkTCB+wIJAKHBfpegPjMCMA0GCSqGSIb3DQEBBQUAMBExDzANBgNVBAMMBnVu",
            "-----END CERTIFICATE-----",
            "helper-diagnostic",
            "ok",
            "Authorization: ",
            "warning: 3 retries (sk-short)",
        ];
        let text = lines.join("\n") + "\n";
        let (out, n) = redact(&text);
        assert_eq!(out, text);
        assert_eq!(n, 0);
    }

    const PLANTED: &[&str] = &[
        "sk-live-0123456789abcdefghijKLMN",
        "ghp_0123456789abcdefghijKLMNOPQRST",
        "xoxb-1111-2222-abcdefghij",
        "AKIAQWERTYUIOP123456",
        "Authorization: Basic c2VjcmV0OnZhbHVlMTIz",
        "Bearer tok3n.Value_0123456789",
        "password=S3cretValue!42",
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKeyMaterialLine0123456789abcdefABCDEF\n-----END EC PRIVATE KEY-----",
    ];
    /// The part of each planted item that must not survive.
    const SECRET_PARTS: &[&str] = &[
        "0123456789abcdefghijKLMN",
        "0123456789abcdefghijKLMNOPQRST",
        "1111-2222-abcdefghij",
        "QWERTYUIOP123456",
        "c2VjcmV0OnZhbHVlMTIz",
        "tok3n.Value_0123456789",
        "S3cretValue!42",
        "KeyMaterialLine0123456789",
    ];
    const NOISE: &[&str] = &[
        "retry",
        "connection refused",
        "token count",
        "max_tokens=5",
        "task-1",
        "ok",
        "AAAA",
        "==",
        "error: 403",
        "-----",
        "secret:",
        "bearer",
        "(sk-x)",
    ];

    proptest::proptest! {
        #[test]
        fn g10_planted_secrets_never_survive_and_nothing_grows(
            parts in proptest::collection::vec((0usize..21, 0usize..3), 0..40),
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            let mut text = String::new();
            for (pick, sep) in &parts {
                text.push_str(if *pick < PLANTED.len() { PLANTED[*pick] } else { NOISE[pick - PLANTED.len()] });
                text.push_str(["\n", " ", "\r\n"][*sep]);
            }
            let (out, _) = redact(&text);
            for secret in SECRET_PARTS {
                proptest::prop_assert!(!out.contains(secret), "{} survived in {:?}", secret, out);
            }
            // Any bytes at all: no panic, never longer.
            let mut buf = junk.clone();
            let (len, _) = redact_in_place(&mut buf);
            proptest::prop_assert!(len <= junk.len());
        }
    }

    #[test]
    fn g10_redaction_is_linear_and_never_grows() {
        // Many short secrets back to back: each value shrinks or stays.
        let text = "password=a ".repeat(10_000) + &"x".repeat(100_000);
        let started = std::time::Instant::now();
        let (out, n) = redact(&text);
        eprintln!("redacted {} bytes in {:?}", text.len(), started.elapsed());
        assert_eq!(n, 10_000);
        assert_eq!(out.len(), text.len());
        // A lone BEGIN with a megabyte after it: one pass, all gone.
        let text = format!("-----BEGIN PRIVATE KEY-----\n{}", "QUJD\n".repeat(200_000));
        let (out, n) = redact(&text);
        assert_eq!((out.as_str(), n), ("[REDACTED]", 1));
        // Names that match but whose values are refused must not rescan the line.
        for text in [
            "token:".repeat(50_000),
            "bearer ".repeat(50_000),
            "AKIA".repeat(50_000),
            "-----END PRIVATE KEY----- ".repeat(10_000),
            "-----BEGIN CERTIFICATE----- ".repeat(10_000) + "-----BEGIN PRIVATE KEY-----",
        ] {
            let started = std::time::Instant::now();
            let (out, n) = redact(&text);
            let took = started.elapsed();
            eprintln!("{} bytes of {:?}… in {took:?}", text.len(), &text[..8]);
            assert!(out.len() <= text.len());
            assert!(n <= 10_000);
            assert!(took < std::time::Duration::from_secs(2), "{took:?}");
        }
    }
}
