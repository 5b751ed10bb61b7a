//! The log copy (`guard --log-file`): the server's whole stderr and the
//! guard's notes, as timestamped lines, for a file of the server's. Sans-IO:
//! lines are made here, in the session's order, and handed out with
//! [`GuardOutput::Log`](super::GuardOutput::Log); the adapter's writer puts
//! them on disk without ever making the session wait, and says what it
//! dropped.
//!
//! Bounded: a partial line is kept to at most [`MAX_LOG_LINE`] bytes (a
//! longer one is cut there and marked), and at most [`MAX_LOG_PENDING`]
//! bytes wait to be handed out (past it whole lines are dropped, counted,
//! and one marker line says how many once there is room again).

use std::collections::VecDeque;

/// Bytes of one line of the log copy; a longer line is cut there and ends
/// with ` [mcp-stdio: line cut]`.
pub const MAX_LOG_LINE: usize = 16 * 1024;

/// Bytes of lines waiting to be handed out.
pub const MAX_LOG_PENDING: usize = 1024 * 1024;

/// The log copy's machine.
#[derive(Debug, Default)]
pub(crate) struct LogCopy {
    /// The server's stderr since its last newline.
    partial: Vec<u8>,
    /// The partial line was cut at [`MAX_LOG_LINE`]: the rest of it is dropped.
    cutting: bool,
    pending: VecDeque<Vec<u8>>,
    pending_bytes: usize,
    /// Lines dropped since the last marker.
    dropped_lines: u64,
    /// Lines dropped in all.
    dropped_total: u64,
}

impl LogCopy {
    /// A chunk of the server's stderr (already masked) read at `unix_ms`.
    pub(crate) fn stderr(&mut self, unix_ms: u64, chunk: &[u8]) {
        let mut rest = chunk;
        while !rest.is_empty() {
            let end = rest.iter().position(|&b| b == b'\n');
            let (piece, next) = match end {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &[][..]),
            };
            if !self.cutting {
                let room = MAX_LOG_LINE - self.partial.len();
                if piece.len() > room {
                    self.partial.extend_from_slice(&piece[..room]);
                    self.partial.extend_from_slice(b" [mcp-stdio: line cut]");
                    self.cutting = true;
                } else {
                    self.partial.extend_from_slice(piece);
                }
            }
            if end.is_some() {
                let line = std::mem::take(&mut self.partial);
                self.cutting = false;
                self.line(unix_ms, "stderr", &line);
            }
            rest = next;
        }
    }

    /// One of the guard's notes (already masked).
    pub(crate) fn note(&mut self, unix_ms: u64, note: &str) {
        self.line(unix_ms, "guard", note.trim_end().as_bytes());
    }

    /// The server's stderr ended: a last line without its newline is given.
    pub(crate) fn end_stderr(&mut self, unix_ms: u64) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.cutting = false;
            self.line(unix_ms, "stderr", &line);
        }
    }

    /// The next lines to write.
    pub(crate) fn poll(&mut self) -> Option<Vec<u8>> {
        let out = self.pending.pop_front()?;
        self.pending_bytes -= out.len();
        Some(out)
    }

    /// Lines dropped because too many waited.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped_total
    }

    fn line(&mut self, unix_ms: u64, source: &str, text: &[u8]) {
        let mut out = Vec::with_capacity(text.len() + 40);
        if self.dropped_lines > 0 {
            let marker = format!(
                "{} guard  [mcp-stdio: {} line(s) dropped here: the log's writer fell behind]\n",
                rfc3339_ms(unix_ms),
                self.dropped_lines
            );
            out.extend_from_slice(marker.as_bytes());
        }
        out.extend_from_slice(rfc3339_ms(unix_ms).as_bytes());
        out.push(b' ');
        out.extend_from_slice(source.as_bytes());
        out.push(b' ');
        out.extend_from_slice(text);
        out.push(b'\n');
        if self.pending_bytes + out.len() > MAX_LOG_PENDING {
            self.dropped_lines += 1;
            self.dropped_total += 1;
            return;
        }
        self.dropped_lines = 0;
        self.pending_bytes += out.len();
        self.pending.push_back(out);
    }
}

/// `unix_ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub(crate) fn rfc3339_ms(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// Days since 1970-01-01 as a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(log: &mut LogCopy) -> String {
        let mut s = String::new();
        while let Some(b) = log.poll() {
            s.push_str(&String::from_utf8_lossy(&b));
        }
        s
    }

    #[test]
    fn timestamps_are_utc_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_796_487_797_580), "2026-12-05T16:23:17.580Z");
    }

    /// G4 for the log: any split of the stderr stream gives the same lines.
    #[test]
    fn g4_lines_are_the_same_however_stderr_is_split() {
        let text = b"first\nsecond line\n\nthird";
        let mut whole = LogCopy::default();
        whole.stderr(0, text);
        whole.end_stderr(0);
        let want = all(&mut whole);
        assert_eq!(want.lines().count(), 4, "{want}");
        for split in 0..text.len() {
            let mut log = LogCopy::default();
            log.stderr(0, &text[..split]);
            log.stderr(0, &text[split..]);
            log.end_stderr(0);
            assert_eq!(all(&mut log), want, "split at {split}");
        }
    }

    #[test]
    fn a_line_past_its_limit_is_cut_and_marked() {
        let mut log = LogCopy::default();
        log.stderr(0, &vec![b'x'; MAX_LOG_LINE + 10]);
        log.stderr(0, &[b'y'; 100]);
        log.stderr(0, b"\nnext\n");
        let out = all(&mut log);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].ends_with("[mcp-stdio: line cut]"),
            "{}",
            &lines[0][..40]
        );
        assert!(!lines[0].contains('y'));
        assert!(lines[1].ends_with("stderr next"), "{}", lines[1]);
    }

    #[test]
    fn lines_past_the_pending_bound_are_dropped_and_said() {
        let mut log = LogCopy::default();
        let line = vec![b'z'; 1000];
        let mut fed = 0;
        while log.dropped() < 5 {
            log.stderr(1, &line);
            log.stderr(1, b"\n");
            fed += 1;
        }
        assert!(fed > 1000);
        let kept = all(&mut log).lines().count();
        assert_eq!(kept as u64 + 5, fed);
        log.note(2, "back");
        let out = all(&mut log);
        assert!(out.contains("[mcp-stdio: 5 line(s) dropped here"), "{out}");
        assert!(out.ends_with("guard back\n"), "{out}");
    }
}
