use super::*;
use crate::wire::id_scan::recover_id;
use proptest::prelude::*;

/// An event with the frame owned, to compare runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Frame(String),
    /// A frame that came as invalid UTF-8 and was repaired.
    Repaired(String),
    Error(FrameError),
}

fn own(events: &mut Vec<Ev>) -> impl FnMut(FrameEvent<'_>) + '_ {
    |e| {
        events.push(match e {
            FrameEvent::Frame(text) if text.repair().is_some() => Ev::Repaired(text.to_owned()),
            FrameEvent::Frame(text) => Ev::Frame(text.to_owned()),
            FrameEvent::Error(e) => Ev::Error(e),
        })
    }
}

/// A framer config with wire limit `max`, set on the field: these tests
/// take the framing apart with limits of a few bytes, below
/// [`MIN_MAX_FRAME`], which the setter (the one way in from outside this
/// module) would raise; the framing itself does not depend on it.
fn config(max: usize) -> FramerConfig {
    FramerConfig {
        max_frame: max,
        ..FramerConfig::default()
    }
}

#[test]
fn the_wire_limit_is_at_least_min_max_frame_and_the_setter_raises_to_it() {
    let mut c = FramerConfig::default();
    for (set, got) in [
        (0, MIN_MAX_FRAME),
        (1, MIN_MAX_FRAME),
        (MIN_MAX_FRAME - 1, MIN_MAX_FRAME),
        (MIN_MAX_FRAME, MIN_MAX_FRAME),
        (MIN_MAX_FRAME + 1, MIN_MAX_FRAME + 1),
        (DEFAULT_MAX_FRAME, DEFAULT_MAX_FRAME),
    ] {
        assert_eq!(c.max_frame(set).get_max_frame(), got, "set {set}");
    }
    // A framer built from a raised config refuses at 64, not at 10.
    c.max_frame(10);
    let line = format!("{}\n", "x".repeat(MIN_MAX_FRAME));
    assert_eq!(
        run(&c, [line.as_bytes()]),
        [frame(&"x".repeat(MIN_MAX_FRAME))]
    );
    let over = format!("{}\n", "x".repeat(MIN_MAX_FRAME + 1));
    assert!(matches!(
        run(&c, [over.as_bytes()]).first(),
        Some(Ev::Error(FrameError::Oversized {
            limit: MIN_MAX_FRAME,
            ..
        }))
    ));
}

/// Feeds `chunks` then finishes; returns all events.
fn run<'c>(config: &FramerConfig, chunks: impl IntoIterator<Item = &'c [u8]>) -> Vec<Ev> {
    let mut framer = Framer::new(config.clone());
    let mut events = Vec::new();
    for chunk in chunks {
        framer.push(chunk, own(&mut events));
        assert!(framer.buffered_len() <= config.get_max_frame());
        assert!(framer.buffer_capacity() <= config.get_max_frame() + 1);
    }
    framer.finish(own(&mut events));
    events
}

/// How a read fills the framer's room.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// Appends to [`ReadRoom::vec`], as tokio's `read_buf` does.
    Vec,
    /// Writes into [`ReadRoom::zeroed`], as `read(2)` does.
    Zeroed,
}

/// Reads `stream` into the framer's room in reads of at most the sizes
/// given (cycled), then finishes; lent frames are taken when `take`.
fn run_reads(
    config: &FramerConfig,
    stream: &[u8],
    sizes: &[usize],
    fill: Fill,
    take: bool,
) -> Vec<Ev> {
    let mut framer = Framer::new(config.clone());
    let mut events = Vec::new();
    let mut rest = stream;
    let mut sizes = sizes.iter().copied().cycle();
    while !rest.is_empty() {
        let want = sizes.next().unwrap_or(usize::MAX).max(1);
        let room = framer.read_room();
        let n = want.min(room.len()).min(rest.len());
        assert!(n > 0);
        match fill {
            Fill::Vec => room.vec().extend_from_slice(&rest[..n]),
            Fill::Zeroed => room.zeroed()[..n].copy_from_slice(&rest[..n]),
        }
        rest = &rest[n..];
        framer.filled(n, |e| {
            events.push(match e {
                FrameEvent::Frame(text) if text.repair().is_some() => Ev::Repaired(if take {
                    text.into_string()
                } else {
                    text.to_owned()
                }),
                FrameEvent::Frame(text) if take && text.is_lent() => Ev::Frame(text.into_string()),
                FrameEvent::Frame(text) => Ev::Frame(text.to_owned()),
                FrameEvent::Error(e) => Ev::Error(e),
            })
        });
        assert!(framer.buffered_len() <= config.get_max_frame());
        assert!(framer.buffer_capacity() <= config.get_max_frame() + 1);
    }
    framer.finish(own(&mut events));
    events
}

fn frame(s: &str) -> Ev {
    Ev::Frame(s.to_owned())
}
fn oversized(limit: usize, id_hint: Option<Id>) -> Ev {
    Ev::Error(FrameError::Oversized { limit, id_hint })
}
fn ended(discarded: u64, recovered: IdRecovery, hinted: bool) -> Ev {
    Ev::Error(FrameError::OversizedEnded {
        discarded,
        recovered,
        hinted,
    })
}

#[test]
fn limit_is_inclusive_and_counts_the_carriage_return() {
    let max = 10;
    let ok = "x".repeat(max);
    assert_eq!(
        run(&config(max), [format!("{ok}\n").as_bytes()]),
        [frame(&ok)]
    );
    // Split, so that the line goes through the buffer.
    assert_eq!(
        run(
            &config(max),
            [&ok.as_bytes()[..3], b"", &ok.as_bytes()[3..], b"\n"]
        ),
        [frame(&ok)]
    );
    let over = "x".repeat(max + 1);
    assert_eq!(
        run(&config(max), [format!("{over}\nok\n").as_bytes()]),
        [
            oversized(max, None),
            ended(11, IdRecovery::NotJson, false),
            frame("ok")
        ]
    );
    // `\r` counts: 9 bytes + `\r` pass, 10 bytes + `\r` do not.
    let nine = "y".repeat(max - 1);
    assert_eq!(
        run(&config(max), [format!("{nine}\r\n").as_bytes()]),
        [frame(&nine)]
    );
    assert_eq!(
        run(&config(max), [format!("{ok}\r\n").as_bytes()]),
        [oversized(max, None), ended(11, IdRecovery::NotJson, false)]
    );
}

#[test]
fn encoder_output_always_passes_a_framer_with_the_same_limit() {
    use crate::wire::message::{encode_result, RawValue};
    let result =
        RawValue::from_string("{\"text\":\"line\\nnext \\\"q\\\" é\"}".to_owned()).unwrap();
    let id = Id::from("req-1");
    let exact = encode_result(&id, &result, usize::MAX).unwrap();
    let limit = exact.len() - 1;
    let bytes = encode_result(&id, &result, limit).unwrap();
    let body = std::str::from_utf8(&bytes[..limit]).unwrap();
    assert_eq!(run(&config(limit), [&bytes[..]]), [frame(body)]);
    for cut in 0..bytes.len() {
        assert_eq!(
            run(&config(limit), [&bytes[..cut], &bytes[cut..]]),
            [frame(body)]
        );
    }
    assert!(encode_result(&id, &result, limit - 1).is_err());
}

#[test]
fn line_endings() {
    let c = FramerConfig::default();
    assert_eq!(
        run(&c, [&b"a\r\nb\nc\rd\r\n"[..]]),
        [frame("a"), frame("b"), frame("c\rd")]
    );
    // Only one `\r` is removed; a `\r` split from its `\n` still goes.
    assert_eq!(run(&c, [&b"a\r\r\n"[..]]), [frame("a\r")]);
    assert_eq!(
        run(&c, [&b"a\r"[..], b"\nb\r", b"\n"]),
        [frame("a"), frame("b")]
    );
    assert_eq!(run(&c, [&b"\r"[..], b"x\n"]), [frame("\rx")]);
}

#[test]
fn empty_lines_are_ignored_and_counted() {
    let mut framer = Framer::new(FramerConfig::default());
    let mut events = Vec::new();
    framer.push(b"\n\r\n\n{}\n\r", own(&mut events));
    framer.push(b"\n", own(&mut events));
    framer.finish(own(&mut events));
    assert_eq!(events, [frame("{}")]);
    assert_eq!(framer.stats().empty_lines, 4);
    assert_eq!(framer.stats().frames, 1);
}

#[test]
fn g3_invalid_utf8_is_refused_with_its_id_and_framing_goes_on() {
    let mut c = FramerConfig::default();
    c.invalid_utf8(InvalidUtf8Policy::Refuse);
    let mut framer = Framer::new(c);
    let mut events = Vec::new();
    framer.push(
        b"ab\xffc\r\n\xe2\x82\n{\"id\":4,\"result\":\"\xff\"}\n{}\n",
        own(&mut events),
    );
    framer.finish(own(&mut events));
    assert_eq!(
        events,
        [
            Ev::Error(FrameError::InvalidUtf8 {
                len: 4,
                valid_up_to: 2,
                id: None,
            }),
            Ev::Error(FrameError::InvalidUtf8 {
                len: 2,
                valid_up_to: 0,
                id: None,
            }),
            Ev::Error(FrameError::InvalidUtf8 {
                len: 21,
                valid_up_to: 18,
                id: Some(Id::Number(4)),
            }),
            frame("{}"),
        ]
    );
    assert_eq!(framer.stats().invalid_utf8, 3);
    assert_eq!(framer.stats().utf8_repaired, 0);
}

#[test]
fn g3_invalid_utf8_is_repaired_by_default_and_marked() {
    let mut framer = Framer::new(FramerConfig::default());
    let mut events = Vec::new();
    let mut repairs = Vec::new();
    // The line from the field: one bad sequence inside a string, id first.
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"bad \xff\xfe byte\"}}\n{}\n";
    framer.push(line, |e| {
        if let FrameEvent::Frame(t) = &e {
            repairs.push(t.repair());
        }
        own(&mut events)(e)
    });
    let fixed =
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"bad \u{fffd}\u{fffd} byte\"}}";
    assert_eq!(events, [Ev::Repaired(fixed.to_owned()), frame("{}")]);
    assert_eq!(
        repairs,
        [
            Some(Utf8Repair {
                original_len: line.len() - 4,
                valid_up_to: 46,
                replaced: 2
            }),
            None
        ]
    );
    assert_eq!(framer.stats().utf8_repaired, 1);
    assert_eq!(framer.stats().invalid_utf8, 0);
}

#[test]
fn g2_a_repair_that_would_pass_the_limit_is_refused() {
    // 10 bad bytes become 30: over a 20-byte limit, so the line is refused
    // (with its id) rather than handed out above the limit.
    let mut framer = Framer::new(config(20));
    let mut events = Vec::new();
    framer.push(
        b"{\"id\":1,\"r\":\"\xff\xff\xff\xff\xff\"}\n",
        own(&mut events),
    );
    assert_eq!(
        events,
        [Ev::Error(FrameError::InvalidUtf8 {
            len: 20,
            valid_up_to: 13,
            id: Some(Id::Number(1)),
        })]
    );
    assert_eq!(framer.stats().utf8_repaired, 0);
}

#[test]
fn g3_refused_line_id_finds_the_id_of_broken_lines_and_never_a_wrong_one() {
    let id = |l: &[u8]| refused_line_id(l, 256);
    // Invalid UTF-8, id last (read as U+FFFD, the object is valid).
    assert_eq!(id(b"{\"result\":\"\xff\",\"id\":9}"), Some(Id::Number(9)));
    // Not JSON after the id: the prefix scan finds it.
    assert_eq!(
        id(b"{\"id\":\"a\",\"result\":tru"),
        Some(Id::String("a".into()))
    );
    // Not JSON-RPC, but JSON: found wherever it sits.
    let far = format!("{{\"x\":\"{}\",\"id\":3}}", "y".repeat(1000));
    assert_eq!(id(far.as_bytes()), Some(Id::Number(3)));
    // A nested id or an id inside a string is never taken.
    assert_eq!(id(b"{\"result\":{\"id\":5}}"), None);
    assert_eq!(id(b"{\"x\":\"\\\"id\\\":5\"}"), None);
    // A syntax error before the id: nothing.
    assert_eq!(id(b"{\"x\":,\"id\":5}"), None);
    assert_eq!(refused_line_id(b"{\"id\":5}", 0), None);
}

#[test]
fn resyncs_after_oversized() {
    let max = 16;
    let mut c = config(max);
    c.id_scan_limit(64);
    let long = format!("{{\"id\":7,\"x\":\"{}\"}}", "z".repeat(40));
    let input = format!("{{\"id\":1}}\n{long}\n{{\"id\":2}}\n");
    let want = [
        frame("{\"id\":1}"),
        // The id scan never reads past `max_frame` bytes.
        oversized(max, Some(Id::Number(7))),
        ended(long.len() as u64, IdRecovery::Found(Id::Number(7)), true),
        frame("{\"id\":2}"),
    ];
    assert_eq!(run(&c, [input.as_bytes()]), want);
    assert_eq!(run(&c, input.as_bytes().chunks(5)), want);
    let mut framer = Framer::new(c);
    framer.push(input.as_bytes(), |_| {});
    assert_eq!(framer.stats().oversized, 1);
    assert_eq!(framer.stats().discarded_bytes, long.len() as u64);
    assert_eq!(framer.stats().frames, 2);
}

#[test]
fn oversized_is_reported_before_the_newline() {
    let max = 1000;
    let line = "{\"id\":\"abc\",\"p\":\"".to_owned() + &"q".repeat(2 * max);
    for chunk in [line.len(), 1000, 7, 1] {
        let mut framer = Framer::new(config(max));
        let mut events = Vec::new();
        for piece in line.as_bytes().chunks(chunk) {
            framer.push(piece, own(&mut events));
        }
        assert_eq!(
            events,
            [oversized(max, Some(Id::from("abc")))],
            "chunk {chunk}"
        );
        assert!(framer.is_discarding());
        assert_eq!(framer.buffered_len(), 0);
        framer.push(b"\n", own(&mut events));
        assert_eq!(
            events[1],
            ended(line.len() as u64, IdRecovery::NotJson, true)
        );
    }
}

#[test]
fn reports_as_soon_as_the_limit_is_crossed() {
    let max = 8;
    let mut framer = Framer::new(config(max));
    let mut events = Vec::new();
    framer.push(b"12345678", own(&mut events));
    assert!(events.is_empty());
    assert_eq!(framer.buffered_len(), 8);
    framer.push(b"9", own(&mut events));
    assert_eq!(events, [oversized(max, None)]);
}

#[test]
fn capacity_grows_exactly_and_is_released_after_oversized() {
    let max = 1 << 20;
    let mut framer = Framer::new(config(max));
    assert_eq!(framer.buffer_capacity(), 0);
    framer.push(b"{\"a\":", |_| panic!());
    assert_eq!(framer.buffer_capacity(), SMALL_BUFFER_CAPACITY);
    framer.push(&[b' '; 10_000], |_| panic!());
    assert_eq!(framer.buffer_capacity(), 16 * 1024);
    framer.push(&[b' '; 20_000], |_| panic!());
    assert_eq!(framer.buffer_capacity(), 32 * 1024);
    framer.push(&[b' '; 20_000], |_| panic!());
    assert_eq!(framer.buffer_capacity(), 64 * 1024);
    // Past 64 KiB: exactly `max_frame + 1`, in one step.
    framer.push(&[b' '; 100_000], |_| panic!());
    assert_eq!(framer.buffer_capacity(), max + 1);
    let chunk = vec![b' '; 64 * 1024];
    let mut events = Vec::new();
    while events.is_empty() {
        framer.push(&chunk, own(&mut events));
        assert!(framer.buffer_capacity() <= max + 1);
    }
    assert_eq!(events, [oversized(max, None)]);
    assert!(framer.buffer_capacity() <= SMALL_BUFFER_CAPACITY);
    // Resync, and a later split frame starts small again.
    framer.push(b"\n{\"b\":", own(&mut events));
    assert!(framer.buffer_capacity() <= SMALL_BUFFER_CAPACITY);
    framer.push(b"1}\n", own(&mut events));
    assert_eq!(events.last(), Some(&frame("{\"b\":1}")));
    // A big split frame is lent; not taken, its buffer is kept for the
    // next one...
    let big = vec![b' '; LEND_MIN_FRAME];
    framer.push(&big, |_| panic!());
    framer.push(b"\n", |e| {
        assert!(matches!(e, FrameEvent::Frame(t) if t.is_lent()))
    });
    assert_eq!(framer.buffer_capacity(), max + 1);
    // ...taken, the framer starts a small one...
    framer.push(&big, |_| panic!());
    let mut taken = String::new();
    framer.push(b"\n", |e| match e {
        FrameEvent::Frame(t) => taken = t.into_string(),
        FrameEvent::Error(e) => panic!("{e}"),
    });
    assert_eq!(taken.len(), big.len());
    assert_eq!(taken.capacity(), max + 1, "the buffer itself, not a copy");
    assert_eq!(framer.buffer_capacity(), SMALL_BUFFER_CAPACITY);
    // ...and a smaller split frame is not lent.
    framer.push(&chunk, |_| panic!());
    framer.push(b"\n", |e| {
        assert!(matches!(e, FrameEvent::Frame(t) if !t.is_lent()))
    });
    assert_eq!(framer.buffer_capacity(), 64 * 1024);
    // ...until asked, or until the stream ends.
    framer.shrink_buffer();
    assert_eq!(framer.buffer_capacity(), 0);
    framer.push(b"partial", |_| panic!());
    framer.finish(|_| {});
    assert_eq!(framer.buffer_capacity(), 0);
}

/// Large frames (lent when gathered), next to small ones, a large
/// invalid one, a `\r\n` ending and an oversized one: reads of any size,
/// filled either way, lent frames taken or not, give the events of one
/// push.
#[test]
fn g4_large_frames_read_into_the_room_equal_one_push() {
    let big = |n: usize, fill: u8| {
        let mut line = b"{\"id\":1,\"result\":\"".to_vec();
        line.resize(n - 2, fill);
        line.extend_from_slice(b"\"}");
        line
    };
    let mut stream = Vec::new();
    for (line, end) in [
        (big(70_000, b'a'), &b"\n"[..]),
        (b"{\"small\":1}".to_vec(), b"\n"),
        (big(LEND_MIN_FRAME, b'b'), b"\r\n"),
        (big(LEND_MIN_FRAME + 1, b'c'), b"\n"),
        (big(300_000, 0xff), b"\n"),
        (big(2_000_000, b'd'), b"\n"),
        (big(200_000, b'e'), b"\n"),
        (b"{\"tail\":".to_vec(), b""),
    ] {
        stream.extend_from_slice(&line);
        stream.extend_from_slice(end);
    }
    let c = config(1 << 20);
    let want = run(&c, [&stream[..]]);
    assert_eq!(want.iter().filter(|e| matches!(e, Ev::Frame(_))).count(), 5);
    assert_eq!(
        want.iter().filter(|e| matches!(e, Ev::Repaired(_))).count(),
        1
    );
    for sizes in [&[usize::MAX][..], &[1000], &[7, 65536, 3], &[65535, 1]] {
        for fill in [Fill::Vec, Fill::Zeroed] {
            for take in [false, true] {
                let got = run_reads(&c, &stream, sizes, fill, take);
                assert!(got == want, "sizes {sizes:?} {fill:?} take {take}");
            }
        }
    }
}

#[test]
fn small_limits_cap_the_capacity() {
    let mut framer = Framer::new(config(100));
    framer.push(&[b'a'; 60], |_| panic!());
    assert_eq!(framer.buffer_capacity(), 101);
    framer.push(&[b'a'; 40], |_| panic!());
    assert_eq!(framer.buffer_capacity(), 101);
}

#[test]
fn frames_inside_one_chunk_are_borrowed() {
    let chunk = b"{\"a\":1}\r\n{\"b\":2}\n{\"c\":";
    let range = chunk.as_ptr_range();
    let mut framer = Framer::new(FramerConfig::default());
    let mut seen = 0;
    framer.push(chunk, |e| match e {
        FrameEvent::Frame(text) => {
            let r = text.as_bytes().as_ptr_range();
            assert!(range.contains(&r.start) && r.end <= range.end);
            seen += 1;
        }
        FrameEvent::Error(e) => panic!("{e}"),
    });
    assert_eq!(seen, 2);
    // A frame completed from the buffer is not in the chunk.
    let tail = b"3}\n";
    let range = tail.as_ptr_range();
    framer.push(tail, |e| match e {
        FrameEvent::Frame(text) => {
            assert_eq!(text, "{\"c\":3}");
            assert!(!range.contains(&text.as_ptr()));
        }
        FrameEvent::Error(e) => panic!("{e}"),
    });
}

#[test]
fn truncated_at_eof_and_reuse() {
    let c = config(8);
    assert_eq!(
        run(&c, [&b"{}\n{\"a\""[..]]),
        [
            frame("{}"),
            Ev::Error(FrameError::TruncatedAtEof { bytes: 4 })
        ]
    );
    assert_eq!(
        run(&c, [&b"\r"[..]]),
        [Ev::Error(FrameError::TruncatedAtEof { bytes: 1 })]
    );
    // An oversized line being discarded: its whole length.
    assert_eq!(
        run(&c, [&b"0123456789"[..], b"abc"]),
        [
            oversized(8, None),
            Ev::Error(FrameError::TruncatedAtEof { bytes: 13 })
        ]
    );
    assert_eq!(run(&c, [&b""[..]]), []);
    let mut framer = Framer::new(c);
    let mut events = Vec::new();
    framer.push(b"abc", own(&mut events));
    framer.finish(own(&mut events));
    framer.finish(own(&mut events));
    framer.push(b"def\n", own(&mut events));
    assert_eq!(
        events,
        [
            Ev::Error(FrameError::TruncatedAtEof { bytes: 3 }),
            frame("def")
        ]
    );
    assert_eq!(framer.stats().truncated, 1);
}

#[test]
fn close_policy_stops_framing() {
    let mut c = config(4);
    c.oversized_policy(OversizedPolicy::Close);
    let mut framer = Framer::new(c);
    let mut events = Vec::new();
    framer.push(b"ab\n{\"id\":1}\ncd\n", own(&mut events));
    assert!(framer.is_closed());
    framer.push(b"ef\n", own(&mut events));
    framer.finish(own(&mut events));
    assert_eq!(events, [frame("ab"), oversized(4, None)]);
    assert!(framer.is_closed());
    assert_eq!(framer.stats().bytes, 18);
    assert_eq!(framer.buffer_capacity(), 0);
    framer.reset();
    assert!(!framer.is_closed());
    framer.push(b"gh\n", own(&mut events));
    assert_eq!(events.last(), Some(&frame("gh")));
}

#[test]
fn g3_id_last_is_recovered_at_the_frame_end() {
    let max = 64;
    let line = format!(
        r#"{{"result":{{"id":1,"t":"{}"}},"jsonrpc":"2.0","id":"a\"b\u00e9"}}"#,
        "p".repeat(300)
    );
    let input = format!("{line}\r\n{{\"id\":2}}\n");
    let want = [
        oversized(max, None),
        ended(
            line.len() as u64 + 1,
            IdRecovery::Found(Id::from("a\"bé")),
            false,
        ),
        frame("{\"id\":2}"),
    ];
    for chunk in [input.len(), 100, 7, 1] {
        assert_eq!(
            run(&config(max), input.as_bytes().chunks(chunk)),
            want,
            "chunk {chunk}"
        );
    }
    let mut framer = Framer::new(config(max));
    framer.push(input.as_bytes(), |_| {});
    framer.push(b"{\"jsonrpc\":\"2.0\",\"x\":\"", |_| {});
    framer.push("q".repeat(100).as_bytes(), |_| {});
    framer.push(b"\"}\n", |_| {});
    assert_eq!(framer.stats().oversized_ids_found, 1);
    assert_eq!(framer.stats().oversized_ids_missing, 1);
    // Off: no scan.
    let mut c = config(max);
    c.id_scan_limit(0);
    assert_eq!(
        run(&c, [input.as_bytes()])[1],
        ended(line.len() as u64 + 1, IdRecovery::Off, false)
    );
}

#[test]
fn zero_limit() {
    let c = config(0);
    assert_eq!(
        run(&c, [&b"\n\nx\n"[..]]),
        [oversized(0, None), ended(1, IdRecovery::NotJson, false)]
    );
}

#[test]
fn id_hint_spans_buffer_and_chunk() {
    let mut c = config(32);
    c.id_scan_limit(20);
    let line = br#"{"jsonrpc":"2.0","id":42,"method":"m","params":{}}"#;
    // 20 bytes end inside `42`? `{"jsonrpc":"2.0","id` is 20 bytes: cut.
    assert_eq!(
        run(&c, [&line[..]]),
        [
            oversized(32, None),
            Ev::Error(FrameError::TruncatedAtEof {
                bytes: line.len() as u64
            })
        ]
    );
    c.id_scan_limit(25);
    for cut in 0..line.len() {
        assert_eq!(
            run(&c, [&line[..cut], &line[cut..], b"\n"]),
            [
                oversized(32, Some(Id::Number(42))),
                ended(line.len() as u64, IdRecovery::Found(Id::Number(42)), true)
            ],
            "cut at {cut}"
        );
    }
}

// ---- recover_id ----

fn rid(s: &str) -> Option<Id> {
    recover_id(s.as_bytes())
}
fn num(n: i64) -> Option<Id> {
    Some(Id::Number(n))
}
fn st(s: &str) -> Option<Id> {
    Some(Id::from(s))
}

#[test]
fn recover_id_position_and_nesting() {
    assert_eq!(rid(r#"{"id":1,"method":"x"#), num(1));
    assert_eq!(rid(r#" { "id" : "a" , "#), st("a"));
    assert_eq!(
        rid(r#"{"jsonrpc":"2.0","method":"tools/call","id":99,"params":{"#),
        num(99)
    );
    assert_eq!(rid(r#"{"a":"x\"y","b":"\\","id":5}"#), num(5));
    assert_eq!(
        rid(r#"{"a":{"b":[1,{"c":null}],"d":{}},"e":[],"id":6,"#),
        num(6)
    );
    assert_eq!(
        rid(r#"{"a":[true,false,null,-1.5e+3,0,"]}"],"id":7}"#),
        num(7)
    );
    // Nested ids are not the id.
    assert_eq!(rid(r#"{"params":{"id":3},"method":"x"}"#), None);
    assert_eq!(rid(r#"{"params":{"id":3},"id":4}"#), num(4));
    assert_eq!(rid(r#"{"params":[{"id":3}],"#), None);
    // "id" inside string values.
    assert_eq!(rid(r#"{"method":"\"id\":5","x":1}"#), None);
    assert_eq!(rid(r#"{"method":"\",\"id\":5,\"","id":6,"#), num(6));
    assert_eq!(rid(r#"{"method":"id","#), None);
    // A top-level array or other text is not an object.
    assert_eq!(rid(r#"[{"id":1}]"#), None);
    assert_eq!(rid(r#""id":1,"#), None);
    assert_eq!(rid(""), None);
}

#[test]
fn recover_id_values() {
    assert_eq!(rid(r#"{"id":-42,"#), num(-42));
    assert_eq!(rid(r#"{"id":0}"#), num(0));
    assert_eq!(rid(r#"{"id":-0}"#), num(0));
    assert_eq!(rid(r#"{"id":9223372036854775807}"#), num(i64::MAX));
    assert_eq!(rid(r#"{"id":-9223372036854775808}"#), num(i64::MIN));
    assert_eq!(rid(r#"{"id":9223372036854775808}"#), None);
    assert_eq!(rid(r#"{"id":1.5}"#), None);
    assert_eq!(rid(r#"{"id":1.0}"#), None);
    assert_eq!(rid(r#"{"id":1e3}"#), None);
    assert_eq!(rid(r#"{"id":null}"#), None);
    assert_eq!(rid(r#"{"id":true}"#), None);
    assert_eq!(rid(r#"{"id":[1]}"#), None);
    assert_eq!(rid(r#"{"id":{"id":1}}"#), None);
    assert_eq!(rid(r#"{"id":01}"#), None);
    assert_eq!(rid(r#"{"id":+1}"#), None);
    assert_eq!(
        rid(r#"{"id":"",}"#),
        None,
        "trailing comma is invalid, but a byte later"
    );
    assert_eq!(rid(r#"{"id":""}"#), st(""));
    // Escapes decode.
    assert_eq!(
        rid(r#"{"id":"a\"b\\c\/d\n\t\u00e9\ud83d\ude00"}"#),
        st("a\"b\\c/d\n\té😀")
    );
    assert_eq!(rid(r#"{"id":"ü-é"}"#), st("ü-é"));
    assert_eq!(rid(r#"{"id":"\ud83d"}"#), None, "lone high surrogate");
    assert_eq!(rid(r#"{"id":"\ude00"}"#), None, "lone low surrogate");
    assert_eq!(rid(r#"{"id":"\x"}"#), None);
    assert_eq!(rid(r#"{"id":"\u00g0"}"#), None);
    assert_eq!(rid("{\"id\":\"a\tb\"}"), None, "raw control character");
    // Escaped key names are decoded.
    assert_eq!(rid(r#"{"\u0069d":8,"#), num(8));
    assert_eq!(rid(r#"{"i\"d":8,"#), None);
}

#[test]
fn recover_id_cut_by_the_scan_limit() {
    let full = r#"{"id":12345,"method":"x"}"#;
    assert_eq!(rid(&full[..9]), None, "`123` may go on");
    assert_eq!(rid(&full[..11]), None, "`12345` may go on");
    assert_eq!(rid(&full[..12]), num(12345));
    assert_eq!(rid(r#"{"id":-"#), None);
    assert_eq!(rid(r#"{"id":1."#), None);
    assert_eq!(rid(r#"{"id":1e"#), None);
    assert_eq!(rid(r#"{"id":"abc"#), None);
    assert_eq!(rid(r#"{"id":"abc""#), st("abc"));
    assert_eq!(rid(r#"{"id":"ab\"#), None);
    assert_eq!(rid(r#"{"id":"ab\u00"#), None);
    assert_eq!(rid(r#"{"id":"\ud83d\ude"#), None);
    assert_eq!(rid(r#"{"id""#), None);
    assert_eq!(rid(r#"{"i"#), None);
    // Cut inside a multi-byte character after the id.
    let s = "{\"id\":3,\"m\":\"é\"}";
    let cut = s.find('é').unwrap() + 1;
    assert_eq!(recover_id(&s.as_bytes()[..cut]), num(3));
    // ...but invalid UTF-8 before the end is not JSON.
    assert_eq!(recover_id(b"{\"id\":3,\"m\":\"\xff\"}"), None);
}

#[test]
fn recover_id_ambiguity() {
    assert_eq!(rid(r#"{"id":1,"id":2}"#), None);
    assert_eq!(rid(r#"{"id":1,"id":"#), None);
    // The same id twice is that id, in a prefix as in the whole text (one
    // scanner for both).
    assert_eq!(rid(r#"{"id":1,"\u0069d":1}"#), num(1));
    assert_eq!(rid(r#"{"id":1,"\u0069d":1,"id":2}"#), None);
    // A syntax error anywhere in the prefix.
    assert_eq!(rid(r#"{"id":1 "x":2}"#), None);
    assert_eq!(rid(r#"{"a":[1,}],"id":1}"#), None);
    assert_eq!(rid(r#"{"a":[1}],"id":1}"#), None);
    assert_eq!(rid(r#"{"a":tru,"id":1}"#), None);
    assert_eq!(rid(r#"{"id":1}x"#), None);
    assert_eq!(rid("{\"id\":1}\r"), num(1));
    // Deep nesting before the id: up to serde_json's 127 levels (the object
    // and 126 arrays), as for the whole-line scan.
    let deep = format!("{{\"a\":{}1{},\"id\":2}}", "[".repeat(126), "]".repeat(126));
    assert_eq!(rid(&deep), num(2));
    let deeper = format!("{{\"a\":{}1{},\"id\":2}}", "[".repeat(127), "]".repeat(127));
    assert_eq!(rid(&deeper), None);
}

// ---- property tests ----

/// Reference model: splits the whole stream at `\n` and applies the rules.
fn model(config: &FramerConfig, stream: &[u8]) -> Vec<Ev> {
    let max = config.get_max_frame();
    let scan = config.get_id_scan_limit().min(max);
    let mut out = Vec::new();
    let mut lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    let last = lines.pop().unwrap_or_default();
    // The whole-line scan, in one piece.
    let whole = |line: &[u8]| {
        if config.get_id_scan_limit() == 0 {
            return IdRecovery::Off;
        }
        let mut scan = IdScanner::new(config.get_id_scan_limit());
        scan.push(line);
        scan.finish()
    };
    let hint = |line: &[u8]| {
        if scan == 0 {
            None
        } else {
            recover_id(&line[..scan])
        }
    };
    for line in lines {
        if line.len() > max {
            let hinted = hint(line);
            out.push(oversized(max, hinted.clone()));
            if config.get_oversized_policy() == OversizedPolicy::Close {
                return out;
            }
            out.push(ended(line.len() as u64, whole(line), hinted.is_some()));
            continue;
        }
        let f = line.strip_suffix(b"\r").unwrap_or(line);
        if f.is_empty() {
            continue;
        }
        out.push(match std::str::from_utf8(f) {
            Ok(s) => frame(s),
            Err(e) => {
                let lossy = String::from_utf8_lossy(f).into_owned();
                if config.get_invalid_utf8() == InvalidUtf8Policy::Repair && lossy.len() <= max {
                    Ev::Repaired(lossy)
                } else {
                    Ev::Error(FrameError::InvalidUtf8 {
                        len: f.len(),
                        valid_up_to: e.valid_up_to(),
                        id: refused_line_id(f, config.get_id_scan_limit()),
                    })
                }
            }
        });
    }
    if last.len() > max {
        out.push(oversized(max, hint(last)));
        if config.get_oversized_policy() == OversizedPolicy::Close {
            return out;
        }
    }
    if !last.is_empty() {
        out.push(Ev::Error(FrameError::TruncatedAtEof {
            bytes: last.len() as u64,
        }));
    }
    out
}

/// One piece of a random stream.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    let text = "[a-z \"\\\\{}:,é€😀\u{0}]{0,12}";
    let id = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        text.prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("1.5".to_owned()),
        Just("null".to_owned()),
    ];
    let message = (id, text, 0usize..3, any::<bool>(), any::<bool>()).prop_map(
        |(id, s, pos, nested, crlf)| {
            let value = serde_json::to_string(&format!("{s}\n\"x\"\r{s}")).unwrap();
            let mut members = vec![
                format!("\"jsonrpc\":\"2.0\""),
                format!(
                    "\"params\":{{\"s\":{value}{}}}",
                    if nested { ",\"id\":0" } else { "" }
                ),
            ];
            members.insert(pos.min(members.len()), format!("\"id\":{id}"));
            format!(
                "{{{}}}{}",
                members.join(","),
                if crlf { "\r\n" } else { "\n" }
            )
            .into_bytes()
        },
    );
    prop_oneof![
        4 => message,
        1 => (1usize..300).prop_map(|n| format!("{{\"id\":\"big\",\"x\":\"{}\"}}\n", "ü".repeat(n)).into_bytes()),
        1 => prop_oneof![Just(b"\n".to_vec()), Just(b"\r\n".to_vec()), Just(b"\r".to_vec())],
        1 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => proptest::collection::vec(prop_oneof![Just(0xffu8), Just(0xc3), Just(0xa9), Just(b'\n'), Just(b'\r'), Just(b'a')], 0..10),
    ]
}

fn stream_and_config() -> impl Strategy<Value = (Vec<u8>, FramerConfig)> {
    (
        proptest::collection::vec(piece(), 0..24),
        prop_oneof![Just(0usize), 1usize..40, 40usize..400, Just(4096)],
        prop_oneof![Just(0usize), 1usize..64, Just(256)],
        prop_oneof![4 => Just(OversizedPolicy::Discard), 1 => Just(OversizedPolicy::Close)],
        prop_oneof![
            Just(InvalidUtf8Policy::Repair),
            Just(InvalidUtf8Policy::Refuse)
        ],
    )
        .prop_map(|(pieces, max, scan, policy, utf8)| {
            let mut c = config(max);
            c.id_scan_limit(scan)
                .oversized_policy(policy)
                .invalid_utf8(utf8);
            (pieces.concat(), c)
        })
}

/// Cut points: random ones, plus some inside multi-byte characters and
/// between `\r` and `\n`.
fn cuts(stream: &[u8], picks: &[(bool, usize)]) -> Vec<usize> {
    let tricky: Vec<usize> = (1..stream.len())
        .filter(|&i| {
            (0x80..0xc0).contains(&stream[i]) || (stream[i - 1] == b'\r' && stream[i] == b'\n')
        })
        .collect();
    let mut cuts: Vec<usize> = picks
        .iter()
        .map(|&(t, k)| {
            if t && !tricky.is_empty() {
                tricky[k % tricky.len()]
            } else {
                k % (stream.len() + 1)
            }
        })
        .collect();
    cuts.sort_unstable();
    cuts
}

fn chunks_at<'s>(stream: &'s [u8], cuts: &[usize]) -> Vec<&'s [u8]> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(&stream[from..c]);
        from = c;
    }
    out.push(&stream[from..]);
    out
}

/// Any JSON value, with `"id"` keys and strings that look like JSON.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "(\"id\":1|[a-z{}\\[\\],:\"\\\\]|é|\u{1f600}|\u{1}){0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec(("id|[a-z]{0,2}", inner), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// G4: however the stream is cut, the events are those of the whole
    /// stream in one chunk, which are those of the reference model.
    #[test]
    fn chunking_never_changes_the_events(
        (stream, c) in stream_and_config(),
        picks in proptest::collection::vec((any::<bool>(), any::<usize>()), 0..40),
    ) {
        let one_shot = run(&c, [&stream[..]]);
        prop_assert_eq!(&one_shot, &model(&c, &stream));
        let cuts = cuts(&stream, &picks);
        prop_assert_eq!(&run(&c, chunks_at(&stream, &cuts)), &one_shot);
    }

    /// G4: reading straight into the framer's room (either way of
    /// filling it, lent frames taken or not) gives the events of pushing
    /// the same stream.
    #[test]
    fn reads_into_the_room_equal_pushes(
        (stream, c) in stream_and_config(),
        sizes in proptest::collection::vec(1usize..300, 1..8),
        zeroed in any::<bool>(),
        take in any::<bool>(),
    ) {
        let fill = if zeroed { Fill::Zeroed } else { Fill::Vec };
        prop_assert_eq!(run_reads(&c, &stream, &sizes, fill, take), run(&c, [&stream[..]]));
    }

    /// 1-byte chunks equal one chunk.
    #[test]
    fn byte_by_byte_equals_one_shot((stream, c) in stream_and_config()) {
        prop_assert_eq!(run(&c, stream.chunks(1)), run(&c, [&stream[..]]));
    }

    /// `recover_id` never returns a wrong id, on any prefix of any object.
    #[test]
    fn recover_id_is_never_wrong(
        members in proptest::collection::vec(
            ("[a-z]{0,3}|id", json_value()), 0..5),
        id in prop_oneof![
            Just(None),
            any::<i64>().prop_map(|n| Some(serde_json::json!(n))),
            ".{0,8}".prop_map(|s| Some(serde_json::json!(s))),
            any::<f64>().prop_map(|f| Some(serde_json::json!(f))),
        ],
        at in any::<usize>(),
        pretty in any::<bool>(),
    ) {
        let mut members = members;
        if let Some(id) = id {
            members.insert(at % (members.len() + 1), ("id".to_owned(), id));
        }
        let body: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(),
                if pretty { serde_json::to_string_pretty(v).unwrap() } else { v.to_string() }))
            .collect();
        let text = format!("{{{}}}", body.join(if pretty { " ,\n " } else { "," }));
        let ids: Vec<_> = members.iter().filter(|(k, _)| k == "id").collect();
        // One id, or the same id more than once (the scan gives that id, as
        // issue 21 decided); two different ones: none.
        let truth = match ids.as_slice() {
            [(_, first), rest @ ..] if rest.iter().all(|(_, v)| v == first) => match first {
                serde_json::Value::String(s) => Some(Id::String(s.clone())),
                v => v.as_i64().map(Id::Number),
            },
            _ => None,
        };
        prop_assert_eq!(recover_id(text.as_bytes()), truth.clone(), "{}", text);
        // With two ids the frame is invalid JSON, and a prefix holding only
        // the first cannot know: no promise there.
        let checked_prefixes = if ids.len() > 1 { 0 } else { text.len() };
        for end in 0..checked_prefixes {
            let got = recover_id(&text.as_bytes()[..end]);
            prop_assert!(got.is_none() || got == truth, "{:?} from {:?}", got, &text[..end.min(text.len())]);
        }
    }
}
