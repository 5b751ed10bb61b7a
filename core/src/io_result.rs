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
