//! Framing throughput: our `Framer` against the framings hosts use instead.
//!
//! Every decoder gets the same byte stream (newline-delimited JSON-RPC
//! responses of one frame size) through `read()` calls of at most `chunk`
//! bytes on [`Pipe`], which copies the bytes into the caller's buffer the way
//! `read(2)` on a pipe does. So each decoder pays the copy a real one pays, and
//! no decoder pays a copy a real one would not:
//!
//! - `framer`: our [`Framer`], each read landing straight in the room it
//!   lends (`read_room`/`filled`, what the adapters do). Hands out `&str`:
//!   UTF-8 validated.
//! - `lines_codec`: tokio-util's `LinesCodec::new_with_max_length`, decoding
//!   from a `BytesMut` that each read appends to (what `FramedRead` does).
//!   Hands out `String`: validated and copied.
//! - `read_until`: `BufRead::read_until` into a reused `Vec` through a 64 KiB
//!   `BufReader`. Hands out bytes: not validated.
//! - `memchr`: reads into a reused 64 KiB buffer and finds every newline with
//!   `memchr`. The limit for any framer that reads a pipe.
//! - `memchr_utf8`: the same, plus UTF-8 validation of every line (in place,
//!   piece by piece, carrying at most 3 bytes of a character cut by a chunk
//!   boundary). The limit for a framer that hands out `&str`, as ours does.
//! - `memchr_in_memory`: `memchr` over the stream in memory, no read copy at
//!   all. A reference only.
//!
//! The limit of every decoder is 16 MiB (above the largest frame).
//!
//! `bench/run` reads criterion's `sample.json` files to report medians and
//! min–max; see BENCHMARKS.md.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use bytes::BytesMut;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use mcp_stdio_core::{FrameEvent, Framer, FramerConfig};
use tokio_util::codec::{Decoder, LinesCodec};

/// Bytes of stream per iteration, for every frame size.
const STREAM_BYTES: usize = 16 * 1024 * 1024;
/// The framing limit given to every decoder that has one.
const LIMIT: usize = 16 * 1024 * 1024;
/// The read buffer of our adapters (and of the `memchr` baselines).
const READ_BUFFER: usize = 64 * 1024;

const FRAME_SIZES: [(usize, &str); 3] = [
    (200, "200B"),
    (64 * 1024, "64KiB"),
    (8 * 1024 * 1024, "8MiB"),
];
const CHUNK_SIZES: [(usize, &str); 2] = [(4 * 1024, "4KiB"), (64 * 1024, "64KiB")];

/// A stream of JSON-RPC responses, each line exactly `frame` bytes before its
/// `\n`, `STREAM_BYTES` in all (rounded down to whole lines, at least two).
fn stream(frame: usize) -> Vec<u8> {
    let lines = (STREAM_BYTES / (frame + 1)).max(2);
    let mut out = Vec::with_capacity(lines * (frame + 1));
    for id in 0..lines {
        let head = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id:08},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\""
        );
        let tail = "\"}]}}";
        let pad = frame - head.len() - tail.len();
        out.extend_from_slice(head.as_bytes());
        out.resize(out.len() + pad, b'x');
        out.extend_from_slice(tail.as_bytes());
        out.push(b'\n');
    }
    out
}

/// A pipe that delivers `data` in reads of at most `chunk` bytes, copying
/// them into the reader's buffer like `read(2)`.
struct Pipe<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl Pipe<'_> {
    /// The next piece the kernel would hand out.
    fn next_piece(&mut self, room: usize) -> &[u8] {
        let n = self.chunk.min(room).min(self.data.len());
        let (piece, rest) = self.data.split_at(n);
        self.data = rest;
        piece
    }
}

impl Read for Pipe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let piece = self.next_piece(buf.len());
        buf[..piece.len()].copy_from_slice(piece);
        Ok(piece.len())
    }
}

/// Our framer, kept across iterations (as in a session), read straight into
/// the room it lends, as the adapters read stdout: each piece lands in the
/// room's spare capacity (what tokio's `read_buf` does), then `filled`.
/// Frames are taken as owned `String`s when lent (what the client does with a
/// large response). Returns payload bytes.
fn framer(framer: &mut Framer, data: &[u8], chunk: usize) -> usize {
    let mut pipe = Pipe { data, chunk };
    let mut total = 0;
    loop {
        let room = framer.read_room();
        let piece = pipe.next_piece(room.len());
        if piece.is_empty() {
            return total;
        }
        room.vec().extend_from_slice(piece);
        framer.filled(piece.len(), |event| match event {
            FrameEvent::Frame(text) => total += black_box(text).len(),
            FrameEvent::Error(e) => panic!("{e}"),
        });
    }
}

/// tokio-util's `LinesCodec`, its buffer kept across iterations.
fn lines_codec(codec: &mut LinesCodec, buf: &mut BytesMut, data: &[u8], chunk: usize) -> usize {
    let mut pipe = Pipe { data, chunk };
    let mut total = 0;
    loop {
        // What `FramedRead` does: make room, read into the buffer's spare
        // capacity (here: append the piece), decode every complete line.
        let piece = pipe.next_piece(usize::MAX);
        if piece.is_empty() {
            return total;
        }
        buf.extend_from_slice(piece);
        while let Some(line) = codec.decode(buf).expect("lines fit the limit") {
            total += black_box(line).len();
        }
    }
}

/// `read_until` through a 64 KiB `BufReader`, into a reused `Vec`.
fn read_until(line: &mut Vec<u8>, data: &[u8], chunk: usize) -> usize {
    let mut reader = BufReader::with_capacity(READ_BUFFER, Pipe { data, chunk });
    let mut total = 0;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', line)
            .expect("Pipe::read cannot fail");
        if n == 0 {
            return total;
        }
        total += black_box(&line[..n - 1]).len();
    }
}

/// The limit: read, find the newlines. Returns the bytes before newlines.
fn memchr_scan(read_buf: &mut [u8], data: &[u8], chunk: usize) -> usize {
    let mut pipe = Pipe { data, chunk };
    let mut total = 0;
    let mut line = 0;
    loop {
        let n = pipe.read(read_buf).expect("Pipe::read cannot fail");
        if n == 0 {
            return total;
        }
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', &read_buf[..n]) {
            total += line + nl - start;
            line = 0;
            start = nl + 1;
        }
        line += n - start;
    }
}

/// Streaming UTF-8 validation of one line's pieces, without copying the
/// line: at most 3 bytes of a character cut between pieces are carried.
#[derive(Default)]
struct Utf8Pieces {
    carry: [u8; 4],
    carried: usize,
    ok: bool,
}

impl Utf8Pieces {
    fn start_line(&mut self) {
        self.carried = 0;
        self.ok = true;
    }

    fn piece(&mut self, mut piece: &[u8]) {
        if !self.ok {
            return;
        }
        if self.carried > 0 {
            // Complete the cut character from the head of this piece.
            while self.carried < 4 && !piece.is_empty() {
                self.carry[self.carried] = piece[0];
                self.carried += 1;
                piece = &piece[1..];
                match std::str::from_utf8(&self.carry[..self.carried]) {
                    Ok(_) => {
                        self.carried = 0;
                        break;
                    }
                    Err(e) if e.error_len().is_some() => {
                        self.ok = false;
                        return;
                    }
                    Err(_) => {}
                }
            }
            if self.carried > 0 {
                return; // still incomplete: the piece was that short
            }
        }
        match std::str::from_utf8(piece) {
            Ok(_) => {}
            Err(e) if e.error_len().is_none() => {
                let tail = &piece[e.valid_up_to()..];
                self.carry[..tail.len()].copy_from_slice(tail);
                self.carried = tail.len();
            }
            Err(_) => self.ok = false,
        }
    }

    fn end_line(&self) -> bool {
        self.ok && self.carried == 0
    }
}

/// The limit for a framer that hands out `&str`: read, find the newlines,
/// validate every line as UTF-8 where it lies.
fn memchr_utf8(read_buf: &mut [u8], data: &[u8], chunk: usize) -> usize {
    let mut pipe = Pipe { data, chunk };
    let mut total = 0;
    let mut line = 0;
    let mut utf8 = Utf8Pieces::default();
    utf8.start_line();
    loop {
        let n = pipe.read(read_buf).expect("Pipe::read cannot fail");
        if n == 0 {
            return total;
        }
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', &read_buf[..n]) {
            utf8.piece(&read_buf[start..nl]);
            assert!(utf8.end_line(), "the stream is valid UTF-8");
            utf8.start_line();
            total += line + nl - start;
            line = 0;
            start = nl + 1;
        }
        utf8.piece(&read_buf[start..n]);
        line += n - start;
    }
}

/// Reference: `memchr` over the bytes in memory, no read copy.
fn memchr_in_memory(data: &[u8], chunk: usize) -> usize {
    let mut total = 0;
    let mut line = 0;
    for piece in data.chunks(chunk) {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', piece) {
            total += line + nl - start;
            line = 0;
            start = nl + 1;
        }
        line += piece.len() - start;
    }
    total
}

fn framing(c: &mut Criterion) {
    for (frame, frame_name) in FRAME_SIZES {
        let data = stream(frame);
        for (chunk, chunk_name) in CHUNK_SIZES {
            let mut group = c.benchmark_group(format!("framing/{frame_name}/{chunk_name}"));
            group
                .throughput(Throughput::Bytes(data.len() as u64))
                .sampling_mode(SamplingMode::Flat)
                .sample_size(20)
                .warm_up_time(Duration::from_millis(800))
                .measurement_time(Duration::from_secs(2));

            let mut config = FramerConfig::default();
            config.max_frame(LIMIT);
            let mut our_framer = Framer::new(config);
            let mut read_buf = vec![0_u8; READ_BUFFER];
            let mut codec = LinesCodec::new_with_max_length(LIMIT);
            let mut codec_buf = BytesMut::new();
            let mut line = Vec::new();

            // Every decoder must see the same payload bytes.
            let expected = memchr_in_memory(&data, chunk);
            assert_eq!(framer(&mut our_framer, &data, chunk), expected);
            assert_eq!(
                lines_codec(&mut codec, &mut codec_buf, &data, chunk),
                expected
            );
            assert_eq!(read_until(&mut line, &data, chunk), expected);
            assert_eq!(memchr_scan(&mut read_buf, &data, chunk), expected);
            assert_eq!(memchr_utf8(&mut read_buf, &data, chunk), expected);

            group.bench_function(BenchmarkId::from_parameter("framer"), |b| {
                b.iter(|| framer(&mut our_framer, &data, chunk));
            });
            group.bench_function(BenchmarkId::from_parameter("lines_codec"), |b| {
                b.iter(|| lines_codec(&mut codec, &mut codec_buf, &data, chunk));
            });
            group.bench_function(BenchmarkId::from_parameter("read_until"), |b| {
                b.iter(|| read_until(&mut line, &data, chunk));
            });
            group.bench_function(BenchmarkId::from_parameter("memchr"), |b| {
                b.iter(|| memchr_scan(&mut read_buf, &data, chunk));
            });
            group.bench_function(BenchmarkId::from_parameter("memchr_utf8"), |b| {
                b.iter(|| memchr_utf8(&mut read_buf, &data, chunk));
            });
            group.bench_function(BenchmarkId::from_parameter("memchr_in_memory"), |b| {
                b.iter(|| memchr_in_memory(black_box(&data), chunk));
            });
            group.finish();
        }
    }
}

// `criterion_main!` would declare an undocumented `pub fn`; this is what it expands to.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    framing(&mut criterion);
    criterion.final_summary();
}
