//! The one outgoing queue: the messages waiting for one pipe, in order, and
//! the one being written ([`WriteCursor`]). Every machine that writes to a
//! pipe keeps its messages in an [`Outbox`] — the client session (the
//! server's stdin), the server session (the client's stdout), the guard's
//! proxy (both ways) — and the machine a loop drives lends the message being
//! written from it ([`Outgoing`]), so a cancel can still withdraw a message
//! that is queued and not yet started (G6, G7), and the bytes waiting are
//! counted in one place.

use std::collections::VecDeque;

/// Messages for one pipe, each with a tag (what it answers, its gate), and
/// the one being written.
///
/// The owner bounds it: [`queued_bytes`](Self::queued_bytes) counts what
/// waits in the queue, [`writing`](Self::writing) what is left of the
/// message being written (at most one message).
#[derive(Debug)]
pub(crate) struct Outbox<T> {
    queue: VecDeque<(T, Vec<u8>)>,
    queued_bytes: usize,
    peak_bytes: usize,
    cursor: WriteCursor,
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            queued_bytes: 0,
            peak_bytes: 0,
            cursor: WriteCursor::Empty,
        }
    }
}

impl<T> Outbox<T> {
    /// Queues `bytes`, tagged.
    pub(crate) fn push(&mut self, tag: T, bytes: Vec<u8>) {
        self.queued_bytes += bytes.len();
        self.peak_bytes = self.peak_bytes.max(self.queued_bytes);
        self.queue.push_back((tag, bytes));
    }

    /// The front message, out of the queue (for a writer of its own, or for
    /// [`hold`](Self::hold)).
    pub(crate) fn pop(&mut self) -> Option<(T, Vec<u8>)> {
        let (tag, bytes) = self.queue.pop_front()?;
        self.queued_bytes -= bytes.len();
        Some((tag, bytes))
    }

    /// The tag of the front message.
    pub(crate) fn front_tag(&self) -> Option<&T> {
        self.queue.front().map(|(tag, _)| tag)
    }

    /// Keeps the queued messages whose tag passes `keep`; returns the
    /// messages and bytes withdrawn (the one being written stays).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> (usize, usize) {
        let (before, mut freed) = (self.queue.len(), 0);
        self.queue.retain(|(tag, bytes)| {
            let kept = keep(tag);
            if !kept {
                freed += bytes.len();
            }
            kept
        });
        self.queued_bytes -= freed;
        (before - self.queue.len(), freed)
    }

    /// Drops the queue; returns its bytes (the one being written stays).
    pub(crate) fn clear_queue(&mut self) -> usize {
        self.queue.clear();
        std::mem::take(&mut self.queued_bytes)
    }

    /// Drops the queue and the message being written; returns their bytes.
    pub(crate) fn clear(&mut self) -> usize {
        self.clear_queue() + self.cursor.clear()
    }

    /// Bytes waiting in the queue.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// The most bytes ever waiting in the queue.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// Whether no message waits in the queue.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    // ---- the message being written ----

    /// Makes `bytes` the message being written (the slot must be free:
    /// [`writing_is_empty`](Self::writing_is_empty)).
    pub(crate) fn hold(&mut self, bytes: Vec<u8>) {
        self.cursor.hold(bytes);
    }

    /// Whether no message is being written.
    pub(crate) fn writing_is_empty(&self) -> bool {
        self.cursor.is_empty()
    }

    /// Whether a message is held here to be written (not lent whole).
    pub(crate) fn writing_is_held(&self) -> bool {
        self.cursor.is_held()
    }

    /// Bytes of the message being written not yet written.
    pub(crate) fn writing(&self) -> usize {
        self.cursor.rest()
    }

    /// `n` more bytes of it reached the pipe; returns whether it is out.
    pub(crate) fn advance(&mut self, n: usize) -> bool {
        self.cursor.advance(n)
    }

    /// Drops the message being written; returns its unwritten bytes.
    pub(crate) fn clear_writing(&mut self) -> usize {
        self.cursor.clear()
    }

    /// The message being written, for the loop.
    pub(crate) fn lend(&mut self) -> Outgoing<'_> {
        self.cursor.lend()
    }

    /// The message being written, as it stands (for tests and checks).
    pub(crate) fn cursor(&self) -> &WriteCursor {
        &self.cursor
    }
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
