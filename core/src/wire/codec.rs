//! The [`Framer`] as a tokio-util codec (feature `tokio-util`).
//!
//! [`FrameCodec`] is a [`Decoder`] for `FramedRead` / `Framed` with every
//! property of the framer: a byte limit on each line that holds before the
//! line's end arrives, the id of an oversized frame found wherever it sits,
//! discard to the next newline, invalid UTF-8 repaired or reported per frame. Unlike
//! tokio-util's `LinesCodec`, a framing error is an *item*, not the stream's
//! error: `FramedRead` ends its stream after the first `Err`, and a session
//! must survive a bad line. The stream's error is only ever an I/O error.
//!
//! ```
//! use mcp_stdio_core::codec::{FrameCodec, FrameItem};
//! use mcp_stdio_core::FramerConfig;
//! use tokio_util::bytes::BytesMut;
//! use tokio_util::codec::Decoder;
//!
//! let mut config = FramerConfig::default();
//! config.max_frame(64);
//! let mut codec = FrameCodec::new(config);
//! let mut buf = BytesMut::from(&b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":1}\n"[..]);
//! let item = codec.decode(&mut buf).unwrap();
//! assert!(matches!(item, Some(FrameItem::Frame(f)) if f.contains("ping")));
//! ```
//!
//! # Worst-case memory
//!
//! The framer's (`max_frame + 1` plus one read room; see `crate::wire::frame`),
//! plus at most [`MAX_READY`] events that one line produced and the caller
//! has not yet taken. The codec consumes every byte `decode` is given, so
//! `FramedRead`'s own buffer never holds more than one read.

use std::collections::VecDeque;

use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::wire::frame::{FrameError, FrameEvent, Framer, FramerConfig};

/// Events one line can produce (an oversized line: `Oversized`, then
/// `OversizedEnded`): the most `decode` ever holds back.
pub const MAX_READY: usize = 2;

/// One item of a [`FrameCodec`] stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameItem {
    /// A complete frame, without its line ending. A frame that came as
    /// invalid UTF-8 is repaired (U+FFFD) by default and comes as a frame too,
    /// counted in [`FramerStats::utf8_repaired`](crate::wire::frame::FramerStats::utf8_repaired)
    /// ([`FrameCodec::framer`]).
    Frame(String),
    /// A framing error; the stream goes on after it (see
    /// [`FrameError`] for what each means).
    Error(FrameError),
}

/// Why [`FrameCodec`] could not encode a frame.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameEncodeError {
    /// The frame is longer than the wire limit.
    #[error("frame of {len} bytes exceeds the wire limit of {limit} bytes")]
    TooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The frame contains a newline, which would split it in two on the wire.
    #[error("frame contains a newline at byte {at}")]
    Newline {
        /// Where the first newline is.
        at: usize,
    },
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A [`Framer`] behind tokio-util's [`Decoder`] and [`Encoder`] (see the
/// module docs).
#[derive(Debug)]
pub struct FrameCodec {
    framer: Framer,
    /// Events of the last line fed, not yet returned (at most [`MAX_READY`]).
    ready: VecDeque<FrameItem>,
}

impl FrameCodec {
    /// A codec with the framer's limits (`max_frame` bounds both directions).
    pub fn new(config: FramerConfig) -> Self {
        Self {
            framer: Framer::new(config),
            ready: VecDeque::with_capacity(MAX_READY),
        }
    }

    /// The framer inside: its counters ([`Framer::stats`]) and state.
    pub fn framer(&self) -> &Framer {
        &self.framer
    }
}

/// The owned item of one framer event.
fn item(event: FrameEvent<'_>) -> FrameItem {
    match event {
        FrameEvent::Frame(text) => FrameItem::Frame(text.into_string()),
        FrameEvent::Error(e) => FrameItem::Error(e),
    }
}

impl Decoder for FrameCodec {
    type Item = FrameItem;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<FrameItem>, std::io::Error> {
        // Feed at most one line's end per turn, so that what is held back
        // stays within `MAX_READY`; the rest waits in `src`.
        while self.ready.is_empty() && !src.is_empty() {
            let n = memchr::memchr(b'\n', src).map_or(src.len(), |at| at + 1);
            let ready = &mut self.ready;
            self.framer
                .push(&src[..n], |event| ready.push_back(item(event)));
            src.advance(n);
        }
        Ok(self.ready.pop_front())
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<FrameItem>, std::io::Error> {
        if let Some(item) = self.decode(src)? {
            return Ok(Some(item));
        }
        // `src` is empty now: an unfinished line is the framer's to report
        // (once: `finish` empties it).
        let ready = &mut self.ready;
        self.framer.finish(|event| ready.push_back(item(event)));
        Ok(self.ready.pop_front())
    }
}

impl Encoder<&str> for FrameCodec {
    type Error = FrameEncodeError;

    /// Appends `frame` and its `\n`, after checking it against the wire
    /// limit and for a newline inside it (`\r` is left to the peer's framer,
    /// which strips one before the `\n`).
    fn encode(&mut self, frame: &str, dst: &mut BytesMut) -> Result<(), FrameEncodeError> {
        let limit = self.framer.config().get_max_frame();
        if frame.len() > limit {
            return Err(FrameEncodeError::TooLarge {
                len: frame.len(),
                limit,
            });
        }
        if let Some(at) = memchr::memchr(b'\n', frame.as_bytes()) {
            return Err(FrameEncodeError::Newline { at });
        }
        dst.reserve(frame.len() + 1);
        dst.extend_from_slice(frame.as_bytes());
        dst.extend_from_slice(b"\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::MIN_MAX_FRAME;
    use crate::wire::message::Id;
    use proptest::prelude::*;

    fn config(max_frame: usize) -> FramerConfig {
        let mut c = FramerConfig::default();
        c.max_frame(max_frame);
        c
    }

    /// Everything the codec gives for `stream` cut at `cuts`, through `decode`
    /// as bytes arrive and `decode_eof` at the end.
    fn through_codec(max_frame: usize, stream: &[u8], cuts: &[usize]) -> Vec<FrameItem> {
        let mut codec = FrameCodec::new(config(max_frame));
        let mut buf = BytesMut::new();
        let mut items = Vec::new();
        let mut from = 0;
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        ends.sort_unstable();
        ends.push(stream.len());
        for end in ends {
            buf.extend_from_slice(&stream[from..end.max(from)]);
            from = end.max(from);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                items.push(item);
            }
            assert!(buf.is_empty(), "decode leaves no bytes behind");
            assert!(codec.ready.len() <= MAX_READY);
        }
        while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
            items.push(item);
        }
        items
    }

    /// The framer's own events for the whole stream at once.
    fn through_framer(max_frame: usize, stream: &[u8]) -> Vec<FrameItem> {
        let mut framer = Framer::new(config(max_frame));
        let mut items = Vec::new();
        framer.push(stream, |e| items.push(item(e)));
        framer.finish(|e| items.push(item(e)));
        items
    }

    #[test]
    fn frames_errors_and_the_stream_goes_on() {
        let stream = b"{\"id\":1}\n{\"id\":7,\"x\":\"0123456789012345678901234567890123456789012345678901234567890\"}\n\xff\xfe\n{\"id\":2}\r\n{\"id\":3";
        let items = through_codec(MIN_MAX_FRAME, stream, &[3, 20, 21]);
        assert_eq!(items[0], FrameItem::Frame("{\"id\":1}".into()));
        assert!(matches!(
            &items[1],
            FrameItem::Error(FrameError::Oversized {
                limit: MIN_MAX_FRAME,
                id_hint: Some(Id::Number(7))
            })
        ));
        assert!(matches!(
            &items[2],
            FrameItem::Error(FrameError::OversizedEnded { .. })
        ));
        // Repaired by default: a frame, counted by the framer.
        assert_eq!(items[3], FrameItem::Frame("\u{fffd}\u{fffd}".into()));
        assert_eq!(items[4], FrameItem::Frame("{\"id\":2}".into()));
        assert_eq!(
            items[5],
            FrameItem::Error(FrameError::TruncatedAtEof { bytes: 7 })
        );
        assert_eq!(items.len(), 6);
    }

    #[test]
    fn encode_checks_the_limit_and_newlines() {
        let mut codec = FrameCodec::new(config(MIN_MAX_FRAME));
        let mut dst = BytesMut::new();
        // 64 bytes pass, 65 do not.
        let fits = format!("{{\"a\":\"{}\"}}", "x".repeat(MIN_MAX_FRAME - 8));
        codec.encode(&fits, &mut dst).unwrap();
        assert_eq!(&dst[..], format!("{fits}\n").as_bytes());
        let over = format!("{{\"a\":\"{}\"}}", "x".repeat(MIN_MAX_FRAME - 7));
        assert!(matches!(
            codec.encode(&over, &mut dst),
            Err(FrameEncodeError::TooLarge {
                len: 65,
                limit: MIN_MAX_FRAME
            })
        ));
        assert!(matches!(
            codec.encode("{}\n{}", &mut dst),
            Err(FrameEncodeError::Newline { at: 2 })
        ));
        assert_eq!(
            dst.len(),
            MIN_MAX_FRAME + 1,
            "a refused frame writes nothing"
        );
    }

    proptest! {
        /// However the bytes arrive, the codec gives exactly the framer's
        /// events, in order, and holds back at most `MAX_READY`.
        #[test]
        fn codec_equals_the_framer(
            lines in proptest::collection::vec(
                prop_oneof![
                    "[a-z{}\":,0-9 ]{0,100}".prop_map(String::into_bytes),
                    proptest::collection::vec(any::<u8>(), 0..100),
                ],
                0..12,
            ),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            max_frame in MIN_MAX_FRAME..MIN_MAX_FRAME + 48,
        ) {
            let stream: Vec<u8> = lines.join(&b'\n');
            prop_assert_eq!(through_codec(max_frame, &stream, &cuts), through_framer(max_frame, &stream));
        }
    }
}
