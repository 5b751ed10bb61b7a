//! Newline-delimited framing with a byte limit (MCP stdio).
//!
//! API SKELETON — the implementation is being written.

use crate::message::Id;

/// Default wire limit: 4 MiB.
pub const DEFAULT_MAX_FRAME: usize = 4 * 1024 * 1024;
/// Default number of leading bytes of an oversized frame scanned for its id.
pub const DEFAULT_ID_SCAN_LIMIT: usize = 256;

/// What to do after a frame passes the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OversizedPolicy {
    /// Discard up to the next newline, then resume framing (default).
    #[default]
    Discard,
    /// Stop framing: the session is to be closed.
    Close,
}

/// Framer limits.
#[derive(Debug, Clone)]
pub struct FramerConfig {
    max_frame: usize,
    id_scan_limit: usize,
    oversized: OversizedPolicy,
}

impl Default for FramerConfig {
    fn default() -> Self {
        Self {
            max_frame: DEFAULT_MAX_FRAME,
            id_scan_limit: DEFAULT_ID_SCAN_LIMIT,
            oversized: OversizedPolicy::Discard,
        }
    }
}

impl FramerConfig {
    /// Sets the wire limit.
    pub fn max_frame(&mut self, bytes: usize) -> &mut Self {
        self.max_frame = bytes;
        self
    }
    /// Sets the id scan limit.
    pub fn id_scan_limit(&mut self, bytes: usize) -> &mut Self {
        self.id_scan_limit = bytes;
        self
    }
    /// Sets the oversized policy.
    pub fn oversized_policy(&mut self, policy: OversizedPolicy) -> &mut Self {
        self.oversized = policy;
        self
    }
    /// The wire limit.
    pub fn get_max_frame(&self) -> usize {
        self.max_frame
    }
    /// The id scan limit.
    pub fn get_id_scan_limit(&self) -> usize {
        self.id_scan_limit
    }
    /// The oversized policy.
    pub fn get_oversized_policy(&self) -> OversizedPolicy {
        self.oversized
    }
}

/// One output of the framer.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameEvent<'a> {
    /// A complete frame.
    Frame(&'a str),
    /// A framing error.
    Error(FrameError),
}

/// Framing errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame passed the limit.
    #[error("frame exceeds the wire limit of {limit} bytes")]
    Oversized {
        /// The limit.
        limit: usize,
        /// The id found in the first bytes, if unambiguous.
        id_hint: Option<Id>,
    },
    /// The newline ending an oversized frame arrived.
    #[error("oversized frame of {discarded} bytes discarded")]
    OversizedEnded {
        /// Bytes in the whole oversized frame.
        discarded: u64,
    },
    /// A frame is not valid UTF-8.
    #[error("frame of {len} bytes is not valid UTF-8 (valid up to byte {valid_up_to})")]
    InvalidUtf8 {
        /// Frame length.
        len: usize,
        /// Valid prefix length.
        valid_up_to: usize,
    },
    /// End of stream inside a frame.
    #[error("stream ended inside a frame after {bytes} bytes")]
    TruncatedAtEof {
        /// Bytes of the unfinished frame.
        bytes: u64,
    },
}

/// Counters kept by the framer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct FramerStats {
    /// Bytes pushed.
    pub bytes: u64,
    /// Frames handed out.
    pub frames: u64,
    /// Largest frame handed out.
    pub largest_frame: u64,
    /// Oversized frames.
    pub oversized: u64,
    /// Empty lines ignored.
    pub empty_lines: u64,
    /// Invalid UTF-8 frames.
    pub invalid_utf8: u64,
}

/// The framer.
#[derive(Debug)]
pub struct Framer {
    config: FramerConfig,
    stats: FramerStats,
}

impl Framer {
    /// A framer with the given limits.
    pub fn new(config: FramerConfig) -> Self {
        Self {
            config,
            stats: FramerStats::default(),
        }
    }
    /// Feeds one chunk; calls `on_event` for each event, in stream order.
    pub fn push(&mut self, chunk: &[u8], on_event: impl FnMut(FrameEvent<'_>)) {
        let _ = (chunk, on_event);
        todo!()
    }
    /// End of stream.
    pub fn finish(&mut self, on_event: impl FnMut(FrameEvent<'_>)) {
        let _ = on_event;
        todo!()
    }
    /// Counters.
    pub fn stats(&self) -> &FramerStats {
        &self.stats
    }
    /// Config.
    pub fn config(&self) -> &FramerConfig {
        &self.config
    }
    /// Bytes buffered for an unfinished frame.
    pub fn buffered_len(&self) -> usize {
        todo!()
    }
    /// True once the `Close` policy has stopped framing.
    pub fn is_closed(&self) -> bool {
        todo!()
    }
}

/// Bounded id recovery from the first bytes of a frame.
pub fn recover_id(prefix: &[u8]) -> Option<Id> {
    let _ = prefix;
    todo!()
}
