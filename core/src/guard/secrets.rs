//! The guard's use of [`Secrets`]: the config setter, and a session's
//! masking of the server's stderr stream and of every text the session
//! gives out (notes, call records, the report). The masking itself lives in
//! `process::secrets`; what only the guard needs lives here, so `process/`
//! never imports `guard/`.

use std::borrow::Cow;

use crate::guard::proxy::MAX_NOTE_LINE;
use crate::guard::GuardConfig;
use crate::process::capture::OutputCapture;
use crate::process::secrets::{SecretStream, Secrets};
use crate::records::call::CallRecord;

/// The start of a note carrying a non-protocol server stdout line, which
/// the proxy cuts at [`MAX_NOTE_LINE`] characters (a test drives a session
/// to keep the two in step).
const NOISE_NOTE: &str = "[server stdout, not protocol] ";

impl GuardConfig {
    /// Sets the secrets the guard masks (default: none): every occurrence
    /// in the server's stderr (forwarded and retained), in notes, in call
    /// records and in the report is replaced by
    /// [`SECRET_MARKER`](crate::SECRET_MARKER), and
    /// counted in [`GuardReport::secrets_masked`](crate::GuardReport::secrets_masked). Cost and memory: see
    /// [`Secrets`] (at most ≈ 3.75 MiB, and fewer than
    /// [`Secrets::longest`] stderr bytes held back at a time).
    pub fn secrets(&mut self, secrets: Secrets) -> &mut Self {
        self.secrets = secrets;
        self
    }

    /// The secrets to mask.
    pub fn get_secrets(&self) -> &Secrets {
        &self.secrets
    }
}

/// A guard session's masking: the stderr stream, and every text the
/// session gives out.
#[derive(Debug)]
pub(crate) struct SessionSecrets {
    secrets: Secrets,
    stderr: SecretStream,
    /// The end of stderr was seen: the next chunk given out carries the
    /// held-back bytes.
    ending: bool,
    /// Replacements outside the current stderr stream.
    masked: u64,
}

impl SessionSecrets {
    pub(crate) fn new(secrets: &Secrets) -> Self {
        Self {
            secrets: secrets.clone(),
            stderr: secrets.stream(),
            ending: false,
            masked: 0,
        }
    }

    /// A chunk of the server's stderr, masked (see [`SecretStream::push`]).
    pub(crate) fn stderr<'a>(&mut self, chunk: &'a [u8]) -> Cow<'a, [u8]> {
        if !std::mem::take(&mut self.ending) {
            return self.stderr.push(chunk);
        }
        let mut out = self.stderr.finish();
        // Bytes after an end are a new stream (a restarted server's).
        let ended = std::mem::replace(&mut self.stderr, self.secrets.stream());
        self.masked += ended.masked();
        out.extend_from_slice(&self.stderr.push(chunk));
        Cow::Owned(out)
    }

    /// The server's stderr ended: the next [`stderr`](Self::stderr) call
    /// (an empty chunk will do) gives out the bytes held back; later chunks
    /// are a new stream (a restarted server's), split secrets caught again.
    pub(crate) fn end_stderr(&mut self) {
        self.ending = true;
    }

    /// Held-back stderr of a stream that never ended (its reader was
    /// abandoned) goes to the retained bytes, masked.
    pub(crate) fn flush_into(&mut self, capture: &mut OutputCapture) {
        let rest = self.stderr.finish();
        capture.push(&rest);
    }

    /// A note for our stderr; one carrying a server stdout line cut at
    /// [`MAX_NOTE_LINE`] characters also loses a trailing beginning of a secret.
    pub(crate) fn note(&mut self, note: String) -> String {
        if self.secrets.is_empty() {
            return note;
        }
        let cut = note
            .strip_prefix(NOISE_NOTE)
            .is_some_and(|line| line.chars().count() >= MAX_NOTE_LINE);
        let (masked, n) = if cut {
            self.secrets.mask_cut_text(&note)
        } else {
            self.secrets.mask_text(&note)
        };
        self.masked += n;
        let masked = (n > 0).then(|| masked.into_owned());
        masked.unwrap_or(note)
    }

    /// A call record, its texts masked (a text the record cut loses a
    /// trailing beginning of a secret too).
    pub(crate) fn record(&mut self, mut record: CallRecord) -> CallRecord {
        if self.secrets.is_empty() {
            return record;
        }
        record.rewrite_texts(|text, cut| {
            let (kept, mark) = match text.strip_suffix('…') {
                Some(kept) if cut => (kept, "…"),
                _ => (text.as_str(), ""),
            };
            let (masked, n) = if cut {
                self.secrets.mask_cut_text(kept)
            } else {
                self.secrets.mask_text(kept)
            };
            if n > 0 {
                self.masked += n;
                let new = format!("{masked}{mark}");
                drop(masked);
                *text = new;
            }
        });
        record
    }

    /// A text of the report, masked.
    pub(crate) fn text(&mut self, text: &str) -> String {
        let (masked, n) = self.secrets.mask_text(text);
        self.masked += n;
        masked.into_owned()
    }

    /// Replacements so far, the stderr stream's included.
    pub(crate) fn masked(&self) -> u64 {
        self.masked + self.stderr.masked()
    }
}

#[cfg(test)]
mod tests;
