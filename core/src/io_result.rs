//! What a read or a write of a pipe came to, by the one rule every loop
//! follows. The loops hand the system call's result to the machine they
//! drive (`handle_*_result`); the machine applies this rule, so no loop
//! decides for itself what a read error or a zero-byte write means.
//!
//! - A read of 0 bytes is the end of the stream; a read error other than
//!   `EINTR` is the end too (nothing more can come), noted with its error.
//! - A write of 0 bytes is a failure (`WriteZero`): the pipe will not take
//!   the message; so is every write error other than `EINTR`.
//! - `EINTR` is nothing: try again. A read's `WouldBlock` is taken as
//!   `EINTR`; a write's `WouldBlock` (or an async write that is pending,
//!   reported as `WouldBlock`) means the pipe is full: the machine offers
//!   nothing more to write to it until the loop says it is writable.

use std::io;

/// A read, as a machine takes it.
#[derive(Debug)]
pub enum ReadResult {
    /// This many bytes (never 0).
    Bytes(usize),
    /// Interrupted: nothing happened, read again.
    Again,
    /// The stream ended: end of file (`None`) or a read error.
    End(Option<io::Error>),
}

impl From<io::Result<usize>> for ReadResult {
    fn from(r: io::Result<usize>) -> Self {
        match r {
            Ok(0) => Self::End(None),
            Ok(n) => Self::Bytes(n),
            Err(e) if retry(&e) => Self::Again,
            Err(e) => Self::End(Some(e)),
        }
    }
}

impl ReadResult {
    /// Whether a read that returned `r` ended its stream, by the rule above:
    /// for a reader thread that must stop at the end, whose machine takes
    /// the result itself.
    pub fn ends_stream(r: &io::Result<usize>) -> bool {
        match r {
            Ok(n) => *n == 0,
            Err(e) => !retry(e),
        }
    }
}

/// A write, as a machine takes it.
#[derive(Debug)]
pub enum WriteResult {
    /// This many bytes reached the pipe (never 0).
    Bytes(usize),
    /// Interrupted: nothing happened, write again.
    Again,
    /// The pipe is full (`WouldBlock`, or a poll that is pending): the
    /// machine offers no more writes to it until the loop reports it
    /// writable again.
    Full,
    /// Nothing more can be written: the error, `WriteZero` for a write of 0 bytes.
    Failed(io::Error),
}

impl From<io::Result<usize>> for WriteResult {
    fn from(r: io::Result<usize>) -> Self {
        match r {
            Ok(0) => Self::Failed(io::ErrorKind::WriteZero.into()),
            Ok(n) => Self::Bytes(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Self::Full,
            Err(e) if retry(&e) => Self::Again,
            Err(e) => Self::Failed(e),
        }
    }
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

/// The one message a machine is writing to a pipe, and how far it got: held
/// by the machine and written in parts ([`Outgoing::bytes`]), or lent whole
/// to a writer thread ([`Outgoing::take`]) until its length is acknowledged.
/// At most one message (at most the wire limit) at a time: every machine's
/// outgoing queue stays in its session until this slot is free.
#[derive(Debug, Default)]
pub(crate) enum WriteCursor {
    /// Nothing being written.
    #[default]
    Empty,
    /// These bytes, of which `offset` are written.
    Held {
        /// The whole message.
        bytes: Vec<u8>,
        /// How much of it reached the pipe.
        offset: usize,
    },
    /// Lent to a writer that owns the write; `len` bytes not yet acknowledged.
    Lent {
        /// Bytes handed out and not yet reported written.
        len: usize,
    },
}

impl WriteCursor {
    /// Whether no message is being written.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Self::Empty)
    }

    /// Holds `bytes` (an empty message is nothing to write).
    pub(crate) fn hold(&mut self, bytes: Vec<u8>) {
        debug_assert!(self.is_empty(), "a message is already being written");
        if !bytes.is_empty() {
            *self = Self::Held { bytes, offset: 0 };
        }
    }

    /// `n` more bytes reached the pipe; returns whether the message is out.
    pub(crate) fn advance(&mut self, n: usize) -> bool {
        let done = match self {
            Self::Held { bytes, offset } => {
                *offset = offset.saturating_add(n).min(bytes.len());
                *offset == bytes.len()
            }
            Self::Lent { len } => {
                *len = len.saturating_sub(n);
                *len == 0
            }
            Self::Empty => false,
        };
        if done {
            *self = Self::Empty;
        }
        done
    }

    /// Bytes not yet written.
    pub(crate) fn rest(&self) -> usize {
        match self {
            Self::Held { bytes, offset } => bytes.len() - offset,
            Self::Lent { len } => *len,
            Self::Empty => 0,
        }
    }

    /// Drops the message; returns the bytes that were not written.
    pub(crate) fn clear(&mut self) -> usize {
        let rest = self.rest();
        *self = Self::Empty;
        rest
    }

    /// Whether a message is held (not lent): what [`lend`](Self::lend) needs.
    pub(crate) fn is_held(&self) -> bool {
        matches!(self, Self::Held { .. })
    }

    /// The held message for the loop to write (test [`is_held`](Self::is_held)
    /// first: lent or empty, it offers no bytes).
    pub(crate) fn lend(&mut self) -> Outgoing<'_> {
        Outgoing(self)
    }
}

/// The unwritten rest of the message a machine holds for a pipe, as its
/// output asks the loop to write it: either write what the pipe takes of
/// [`bytes`](Self::bytes) and report the count as written, or
/// [`take`](Self::take) it whole for a writer thread and report its length
/// once written.
#[derive(Debug)]
pub struct Outgoing<'a>(&'a mut WriteCursor);

impl Outgoing<'_> {
    /// The bytes still to write.
    pub fn bytes(&self) -> &[u8] {
        match &*self.0 {
            WriteCursor::Held { bytes, offset } => &bytes[*offset..],
            // Only a held message is ever lent out as `Outgoing`.
            _ => &[],
        }
    }

    /// The rest, owned: lent to the caller until its length is reported
    /// written; the machine offers nothing more to write meanwhile.
    pub fn take(self) -> Vec<u8> {
        match std::mem::take(self.0) {
            WriteCursor::Held { mut bytes, offset } => {
                if offset > 0 {
                    bytes.drain(..offset);
                }
                *self.0 = WriteCursor::Lent { len: bytes.len() };
                bytes
            }
            other => {
                *self.0 = other;
                Vec::new()
            }
        }
    }
}

/// Which of a child's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStream {
    /// Its stdout.
    Stdout,
    /// Its stderr.
    Stderr,
}

/// How loud a machine's note is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoteLevel {
    /// For whoever debugs a session.
    Debug,
    /// Something the operator should see.
    Warn,
}

/// A diagnostic a machine asks its loop to log. Loops hand it to something
/// that cannot block them (the adapters' log relay): a `tracing` subscriber
/// may block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// How loud.
    pub level: NoteLevel,
    /// What happened, fixed text.
    pub message: &'static str,
    /// The error or detail, if any.
    pub detail: Option<String>,
}

impl Note {
    pub(crate) fn new(level: NoteLevel, message: &'static str, detail: Option<String>) -> Self {
        Self {
            level,
            message,
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_byte_read_is_end_and_zero_byte_write_is_failure() {
        assert!(matches!(ReadResult::from(Ok(0)), ReadResult::End(None)));
        assert!(matches!(ReadResult::from(Ok(3)), ReadResult::Bytes(3)));
        let intr = || Err(io::Error::from(io::ErrorKind::Interrupted));
        assert!(matches!(ReadResult::from(intr()), ReadResult::Again));
        assert!(matches!(
            ReadResult::from(Err(io::Error::other("x"))),
            ReadResult::End(Some(_))
        ));
        match WriteResult::from(Ok(0)) {
            WriteResult::Failed(e) => assert_eq!(e.kind(), io::ErrorKind::WriteZero),
            other => panic!("{other:?}"),
        }
        assert!(matches!(WriteResult::from(intr()), WriteResult::Again));
        assert!(matches!(WriteResult::from(Ok(5)), WriteResult::Bytes(5)));
    }
}
