//! The framer's memory bound, measured: 256 MiB of adversarial input in 64 KiB
//! chunks through a `Framer` with `max_frame` = 1 MiB must never make the heap
//! grow past `max_frame + 1 + 64 KiB`; with invalid UTF-8 repaired (the
//! default), past that plus one repaired copy of at most `max_frame` bytes.
//!
//! A counting global allocator tracks the live heap of the test's thread.
//! `realloc` is counted at its worst: the new block live before the old one is
//! freed, as happens when a reallocation moves.

// Why unsafe code here: a `#[global_allocator]` must `unsafe impl GlobalAlloc`.
// The workspace denies unsafe code (the library crates forbid it with
// `#![forbid(unsafe_code)]`), so this test file can allow it locally. The
// unsafe code below only forwards each call to `System` and counts bytes.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

use mcp_stdio_core::{FrameError, FrameEvent, Framer, FramerConfig, InvalidUtf8Policy};

/// Live bytes allocated by the tracked thread since tracking started (may go
/// negative when it frees older blocks).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Highest `LIVE` seen.
static PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    // `const`, with no destructor: reading it never allocates.
    static TRACKED: Cell<bool> = const { Cell::new(false) };
}

fn tracked() -> bool {
    TRACKED.try_with(Cell::get).unwrap_or(false)
}

fn grew(bytes: usize) {
    if tracked() {
        let live = LIVE.fetch_add(bytes as isize, Relaxed) + bytes as isize;
        PEAK.fetch_max(live, Relaxed);
    }
}

fn shrank(bytes: usize) {
    if tracked() {
        LIVE.fetch_sub(bytes as isize, Relaxed);
    }
}

struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counting touches only atomics
// and a const thread-local, never the heap.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Worst case: both blocks live at once.
        grew(new_size);
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        shrank(if p.is_null() { new_size } else { layout.size() });
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MAX_FRAME: usize = 1 << 20;
const CHUNK: usize = 64 << 10;
const TOTAL: usize = 256 << 20;
const BOUND: isize = (MAX_FRAME + 1 + CHUNK) as isize;
/// With [`InvalidUtf8Policy::Repair`]: plus the repaired copy being handed out.
const REPAIR_BOUND: isize = BOUND + MAX_FRAME as isize;

#[derive(Debug, Default)]
struct Seen {
    frames: u64,
    oversized: u64,
    ids: u64,
    ended: u64,
    invalid_utf8: u64,
    repaired: u64,
    truncated: u64,
}

/// Pushes `TOTAL` bytes, chunk by chunk as `fill` writes them into `chunk`,
/// and returns the peak heap growth from just before the framer is created.
fn measure(
    via: Via,
    utf8: InvalidUtf8Policy,
    name: &str,
    chunk: &mut [u8],
    mut fill: impl FnMut(usize, &mut [u8]),
) -> Seen {
    let mut config = FramerConfig::default();
    config.max_frame(MAX_FRAME).invalid_utf8(utf8);
    let bound = match utf8 {
        InvalidUtf8Policy::Refuse => BOUND,
        _ => REPAIR_BOUND,
    };
    let mut seen = Seen::default();
    let started = Instant::now();

    LIVE.store(0, Relaxed);
    PEAK.store(0, Relaxed);
    TRACKED.with(|t| t.set(true));
    let mut framer = Framer::new(config);
    let mut on_event = |event: FrameEvent<'_>| match event {
        FrameEvent::Frame(f) => {
            seen.frames += 1;
            seen.repaired += u64::from(f.repair().is_some());
        }
        FrameEvent::Error(FrameError::Oversized { id_hint, .. }) => {
            seen.oversized += 1;
            seen.ids += u64::from(id_hint.is_some());
        }
        FrameEvent::Error(FrameError::OversizedEnded { .. }) => seen.ended += 1,
        FrameEvent::Error(FrameError::InvalidUtf8 { .. }) => seen.invalid_utf8 += 1,
        FrameEvent::Error(FrameError::TruncatedAtEof { .. }) => seen.truncated += 1,
        FrameEvent::Error(e) => panic!("unexpected {e}"),
    };
    for i in 0..TOTAL / CHUNK {
        fill(i, chunk);
        match via {
            Via::Push => framer.push(chunk, &mut on_event),
            Via::Reads => {
                // As an adapter reads: into the room, as much as it holds.
                let mut rest = &chunk[..];
                while !rest.is_empty() {
                    let room = framer.read_room().zeroed();
                    let n = room.len().min(rest.len());
                    room[..n].copy_from_slice(&rest[..n]);
                    framer.filled(n, &mut on_event);
                    rest = &rest[n..];
                }
            }
        }
        assert!(framer.buffer_capacity() <= MAX_FRAME + 1);
    }
    framer.finish(&mut on_event);
    drop(framer);
    TRACKED.with(|t| t.set(false));
    let peak = PEAK.load(Relaxed);

    eprintln!(
        "{name} ({via:?}, {utf8:?}): peak heap growth {peak} bytes ({:.3} MiB; bound {bound}), {:.2} s, {seen:?}",
        peak as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64(),
    );
    assert!(peak <= bound, "{name}: peak {peak} > bound {bound}");
    // Each scenario fills the buffer to `max_frame`: the counter must see it.
    assert!(
        peak >= MAX_FRAME as isize,
        "{name}: the buffer was not exercised"
    );
    seen
}

/// xorshift64*: deterministic junk without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Writes `text` into `chunk` from `at`, as far as it fits.
fn put(chunk: &mut [u8], at: usize, text: &[u8]) {
    let n = text.len().min(chunk.len() - at);
    chunk[at..at + n].copy_from_slice(&text[..n]);
}

/// How the bytes reach the framer.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// `push` of each chunk.
    Push,
    /// Reads into the framer's room (`read_room` / `filled`).
    Reads,
}

/// One test: the counters are process-wide, so the two ways run one after
/// the other.
#[test]
fn framer_heap_stays_under_max_frame_plus_64_kib() {
    scenarios(Via::Push);
    scenarios(Via::Reads);
}

fn scenarios(via: Via) {
    // Allocated before measuring, and reused.
    let mut chunk = vec![0u8; CHUNK];

    // 1. One endless line: an id at its start, then never a newline.
    chunk.fill(b'x');
    put(
        &mut chunk,
        0,
        br#"{"jsonrpc":"2.0","id":"endless","params":""#,
    );
    let header = chunk.clone();
    let seen = measure(
        via,
        InvalidUtf8Policy::Refuse,
        "endless line",
        &mut chunk,
        |i, chunk| {
            if i == 1 {
                chunk.copy_from_slice(&header);
                chunk[..64].fill(b'x');
            }
        },
    );
    assert_eq!(
        (seen.oversized, seen.ids, seen.truncated, seen.frames),
        (1, 1, 1, 0)
    );

    // 2. Lines of exactly the limit (delivered from a full buffer) alternating
    //    with lines just over it, each starting with an id.
    let mut next_newline = MAX_FRAME;
    let mut line = 0usize;
    let seen = measure(
        via,
        InvalidUtf8Policy::Refuse,
        "lines at and just over the limit",
        &mut chunk,
        |i, chunk| {
            let start = i * CHUNK;
            chunk.fill(b'a');
            if i == 0 {
                put(chunk, 0, br#"{"id":0,"x":""#);
            }
            while next_newline < start + CHUNK {
                let at = next_newline - start;
                chunk[at] = b'\n';
                line += 1;
                let header = format!(r#"{{"id":{line},"x":""#);
                put(chunk, at + 1, header.as_bytes());
                let len = if line.is_multiple_of(2) {
                    MAX_FRAME
                } else {
                    MAX_FRAME + 1 + line % 97
                };
                next_newline += 1 + len;
            }
        },
    );
    assert!(seen.frames > 100 && seen.oversized > 100, "{seen:?}");
    assert_eq!(seen.ids, seen.oversized);

    // 3. Random junk with newlines at random distances, from a few bytes to
    //    several times the limit: windows of a 4 MiB pool at random offsets.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut pool = vec![0u8; 4 << 20];
    for b in pool.iter_mut() {
        *b = match rng.next() as u8 {
            b'\n' => b' ',
            b => b,
        };
    }
    let mut at = 0;
    loop {
        at += match rng.below(20) {
            0..=9 => rng.below(200),
            10..=15 => rng.below(64 << 10),
            16..=18 => rng.below(MAX_FRAME),
            _ => MAX_FRAME + rng.below(3 * MAX_FRAME),
        };
        if at >= pool.len() {
            break;
        }
        pool[at] = b'\n';
        // Sometimes valid UTF-8 after the newline, for frames to be found.
        if rng.below(2) == 0 {
            let n = rng.below(300).min(pool.len() - at - 1);
            pool[at + 1..at + 1 + n].fill(b'j');
        }
    }
    let state = rng.0;
    let seen = measure(
        via,
        InvalidUtf8Policy::Refuse,
        "random junk",
        &mut chunk,
        |_, chunk| {
            let from = rng.below(pool.len() - CHUNK);
            chunk.copy_from_slice(&pool[from..from + CHUNK]);
        },
    );
    assert!(
        seen.frames > 0 && seen.oversized > 0 && seen.invalid_utf8 > 0 && seen.repaired == 0,
        "{seen:?}"
    );
    // The same junk repaired: lines whose repair fits the limit are handed out.
    rng.0 = state;
    let seen = measure(
        via,
        InvalidUtf8Policy::Repair,
        "random junk",
        &mut chunk,
        |_, chunk| {
            let from = rng.below(pool.len() - CHUNK);
            chunk.copy_from_slice(&pool[from..from + CHUNK]);
        },
    );
    assert!(seen.repaired > 0 && seen.oversized > 0, "{seen:?}");
}
