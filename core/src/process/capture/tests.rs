use super::*;
use proptest::prelude::*;

/// Tiny deterministic generator (xorshift64), so tests need no extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Raw bytes only: these tests compare the kept bytes with the input.
fn tail_config(tail: usize) -> CaptureConfig {
    let mut config = CaptureConfig::default();
    config.tail(tail).redact(false);
    config
}

fn captured(config: &CaptureConfig, chunks: &[&[u8]]) -> Captured {
    let mut capture = OutputCapture::new(config);
    for chunk in chunks {
        capture.push(chunk);
    }
    capture.finish()
}

fn numbered(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

#[test]
fn g10_marker_exact_text_tail_only() {
    let input = numbered(184_320);
    let c = captured(&CaptureConfig::default(), &[&input]);
    let rendered = c.render("stderr");
    let (marker, body) = rendered.split_once('\n').expect("marker line");
    assert_eq!(
        marker,
        "[stderr truncated: kept last 16384 of 184320 bytes]"
    );
    assert_eq!(body.as_bytes(), &input[184_320 - 16_384..]);
    let summary = c.summary();
    assert_eq!(
        (summary.seen, summary.retained, summary.truncated),
        (184_320, 16_384, true)
    );
}

#[test]
fn g10_marker_exact_text_with_head_and_gap_line() {
    let mut input = numbered(184_320);
    input[1023] = b'\n';
    let mut config = CaptureConfig::default();
    config.head(1024);
    let c = captured(&config, &[&input[..5000], &input[5000..]]);
    let rendered = c.render("stderr");
    let mut lines = rendered.splitn(2, '\n');
    assert_eq!(
        lines.next(),
        Some("[stderr truncated: kept first 1024 and last 16384 of 184320 bytes]")
    );
    let rest = lines.next().expect("content");
    let head = std::str::from_utf8(&input[..1024]).expect("ascii");
    let tail = std::str::from_utf8(&input[184_320 - 16_384..]).expect("ascii");
    assert_eq!(rest, format!("{head}[… 166912 bytes omitted …]\n{tail}"));
}

#[test]
fn g10_marker_names_the_stream() {
    let c = captured(&tail_config(4), &[b"0123456789"]);
    assert_eq!(
        c.render("stdout"),
        "[stdout truncated: kept last 4 of 10 bytes]\n6789"
    );
}

#[test]
fn g10_no_marker_when_nothing_dropped() {
    let mut config = CaptureConfig::default();
    config.head(4).tail(6);
    let c = captured(&config, &[b"hello", b" worl"]);
    assert!(!c.truncated());
    assert_eq!((c.head(), c.tail()), (&b"hell"[..], &b"o worl"[..]));
    assert_eq!(c.render("stderr"), "hello worl");
    let c = captured(&config, &[b"hello", b" world!"]);
    assert!(c.truncated());
    assert_eq!(
        c.render("stderr"),
        "[stderr truncated: kept first 4 and last 6 of 12 bytes]\nhell\n[… 2 bytes omitted …]\nworld!"
    );
}

#[test]
fn g10_tail_keeps_newest_bytes() {
    let input = numbered(1000);
    let mut capture = OutputCapture::new(&tail_config(100));
    for chunk in input.chunks(7) {
        capture.push(chunk);
    }
    let c = capture.finish();
    assert_eq!(c.tail(), &input[900..]);
    assert_eq!(c.seen(), 1000);
}

#[test]
fn g10_chunk_larger_than_ring_keeps_its_last_bytes() {
    let c = captured(&tail_config(4), &[b"ab", b"0123456789", b"x"]);
    assert_eq!(c.tail(), b"789x");
    assert_eq!(c.seen(), 13);
}

#[test]
fn g10_push_never_allocates_after_construction() {
    let mut config = CaptureConfig::default();
    config.head(10).tail(100);
    let mut capture = OutputCapture::new(&config);
    let (ptr, cap) = (capture.buf.as_ptr(), capture.buf.capacity());
    let mut rng = XorShift(7);
    for _ in 0..500 {
        let len = rng.below(300);
        capture.push(&numbered(len));
        assert_eq!((capture.buf.as_ptr(), capture.buf.capacity()), (ptr, cap));
        assert!(capture.retained() <= 110);
    }
    let c = capture.finish();
    assert_eq!((c.bytes.as_ptr(), c.bytes.capacity()), (ptr, cap));
}

#[test]
fn g10_zero_limits_keep_nothing_but_count() {
    let mut config = CaptureConfig::default();
    config.head(0).tail(0);
    let c = captured(&config, &[b"abc", b"", b"defgh"]);
    assert_eq!((c.seen(), c.retained(), c.truncated()), (8, 0, true));
    assert!(c.head().is_empty() && c.tail().is_empty());
    assert_eq!(
        c.render("stderr"),
        "[stderr truncated: kept 0 of 8 bytes]\n"
    );
    assert_eq!(
        c.excerpt("stderr", 100),
        "[stderr truncated: kept 0 of 8 bytes]\n"
    );
    let empty = captured(&config, &[]);
    assert_eq!((empty.seen(), empty.truncated()), (0, false));
    assert_eq!(empty.render("stderr"), "");
}

#[test]
fn g10_head_only_capture_shows_gap_at_the_end() {
    let mut config = CaptureConfig::default();
    config.head(3).tail(0);
    let c = captured(&config, &[b"abcdef"]);
    assert_eq!(
        c.render("stderr"),
        "[stderr truncated: kept first 3 of 6 bytes]\nabc\n[… 3 bytes omitted …]\n"
    );
}

#[test]
fn g10_invalid_utf8_is_decoded_lossily() {
    let c = captured(
        &tail_config(64),
        &[b"ok \xff\xfe bad \xc3", b"\xa9 \xe2\x82"],
    );
    assert_eq!(c.render("stderr"), "ok \u{FFFD}\u{FFFD} bad é \u{FFFD}");
    assert_eq!(
        c.excerpt("stderr", 64),
        "ok \u{FFFD}\u{FFFD} bad é \u{FFFD}"
    );
}

#[test]
fn g10_char_cut_by_ring_boundary_becomes_one_replacement() {
    // "€" is E2 82 AC; the ring keeps its last two bytes.
    let c = captured(&tail_config(4), &["x€ab".as_bytes()]);
    assert_eq!(c.tail(), b"\x82\xacab");
    assert_eq!(
        c.render("stderr"),
        "[stderr truncated: kept last 4 of 6 bytes]\n\u{FFFD}ab"
    );
    // The excerpt starts on a character boundary instead.
    assert_eq!(
        c.excerpt("stderr", 100),
        "[stderr truncated: kept last 2 of 6 bytes]\nab"
    );
}

#[test]
fn g10_line_longer_than_limit_keeps_its_end() {
    let mut line = vec![b'x'; 100_000];
    line.extend_from_slice(b" the error\n");
    let c = captured(&tail_config(32), &[b"first line\n", &line]);
    assert_eq!(c.seen(), 100_022);
    assert!(c.tail().ends_with(b"x the error\n"));
    assert_eq!(c.tail().len(), 32);
    assert!(c
        .render("stderr")
        .starts_with("[stderr truncated: kept last 32 of 100022 bytes]\n"));
}

#[test]
fn g10_excerpt_counts_marker_against_max_bytes() {
    let input = numbered(10_000);
    let c = captured(&CaptureConfig::default(), &[&input]);
    let excerpt = c.excerpt("stderr", 200);
    assert!(excerpt.len() <= 200);
    let (marker, body) = excerpt.split_once('\n').expect("marker");
    assert_eq!(
        marker,
        format!(
            "[stderr truncated: kept last {} of 10000 bytes]",
            body.len()
        )
    );
    assert!(body.len() >= 200 - 60, "uses most of the room");
    assert_eq!(body.as_bytes(), &input[10_000 - body.len()..]);
    // Too small for the marker: nothing rather than an unmarked excerpt.
    assert_eq!(c.excerpt("stderr", 20), "");
    // Complete and small enough: as is.
    let small = captured(&CaptureConfig::default(), &[b"short"]);
    assert_eq!(small.excerpt("stderr", 5), "short");
    assert_eq!(small.excerpt("stderr", 4), "");
}

#[test]
fn g10_excerpt_marks_bytes_it_drops_from_a_complete_capture() {
    let input = numbered(100);
    let c = captured(&CaptureConfig::default(), &[&input]);
    assert!(!c.truncated());
    let excerpt = c.excerpt("stderr", 80);
    let (marker, body) = excerpt.split_once('\n').expect("marker");
    assert_eq!(
        marker,
        format!("[stderr truncated: kept last {} of 100 bytes]", body.len())
    );
    check_excerpt(&c, &input, 80);
}

#[test]
fn g10_summary_and_capture_serialize() {
    let c = captured(&tail_config(3), &[b"abcde"]);
    let value = serde_json::to_value(c.summary()).expect("serializable");
    assert_eq!(
        value,
        serde_json::json!({"seen": 5, "retained": 3, "truncated": true,
            "retained_part": "tail", "head_bytes": 0, "tail_bytes": 3,
            "pool_limited": false, "redaction": false, "redactions": 0,
            "debug": null})
    );
    // Older summaries (before these fields) still read.
    let old: CaptureSummary = serde_json::from_value(serde_json::json!({"seen": 5,
        "retained": 3, "truncated": true, "head_bytes": 0, "tail_bytes": 3,
        "pool_limited": false}))
    .expect("readable");
    assert_eq!((old.retained, old.redactions, old.debug), (3, 0, None));
    let back: CaptureSummary = serde_json::from_value(value).expect("round trip");
    assert_eq!(back, c.summary());
    let value = serde_json::to_value(&c).expect("serializable");
    assert_eq!(value["tail"], "cde");
    assert_eq!(value["seen"], 5);
}

#[test]
fn g10_summary_says_which_part_was_retained_with_byte_counts() {
    let cases: [(usize, usize, usize, RetainedPart, u64, u64); 6] = [
        (0, 16, 10, RetainedPart::All, 0, 10),
        (4, 16, 10, RetainedPart::All, 4, 6),
        (0, 8, 100, RetainedPart::Tail, 0, 8),
        (8, 0, 100, RetainedPart::Head, 8, 0),
        (4, 8, 100, RetainedPart::HeadAndTail, 4, 8),
        (0, 0, 100, RetainedPart::Nothing, 0, 0),
    ];
    for (head, tail, len, part, head_bytes, tail_bytes) in cases {
        let mut config = CaptureConfig::default();
        config.head(head).tail(tail);
        let c = captured(&config, &[&numbered(len)]);
        let summary = c.summary();
        assert_eq!(
            (
                summary.retained_part,
                summary.head_bytes,
                summary.tail_bytes
            ),
            (part, head_bytes, tail_bytes),
            "head {head} tail {tail} len {len}"
        );
        let json = serde_json::to_value(summary).expect("serializable");
        assert_eq!(
            json["retained_part"],
            serde_json::to_value(part).expect("enum")
        );
    }
    let names: Vec<String> = [
        RetainedPart::All,
        RetainedPart::Head,
        RetainedPart::Tail,
        RetainedPart::HeadAndTail,
        RetainedPart::Nothing,
    ]
    .iter()
    .map(|p| serde_json::to_value(p).expect("enum").to_string())
    .collect();
    assert_eq!(
        names,
        [
            "\"all\"",
            "\"head\"",
            "\"tail\"",
            "\"head_and_tail\"",
            "\"nothing\""
        ]
    );
}

const SECRET_TOKEN: &str = "ghp_R4wS3cr3tT0kenAbCdEfGhIjKlMnOp";
const SECRET_KEY_BODY: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj";

#[test]
fn g10_redaction_is_on_by_default_and_reaches_every_view() {
    let stream = format!(
        "starting upload\nAuthorization: Bearer {SECRET_TOKEN}\n\
         -----BEGIN PRIVATE KEY-----\n{SECRET_KEY_BODY}\n-----END PRIVATE KEY-----\n\
         upload failed: 403\n"
    );
    let c = captured(&CaptureConfig::default(), &[stream.as_bytes()]);
    let summary = c.summary();
    assert!(summary.redaction);
    assert_eq!(summary.redactions, 2);
    assert_eq!(
        summary.retained,
        stream.len() as u64,
        "counts are the stream's"
    );
    assert!(!summary.truncated);
    let views = [
        c.render("stderr"),
        c.excerpt("stderr", 4096),
        c.excerpt("stderr", 60),
        serde_json::to_string(&c).expect("serializable"),
    ];
    for view in &views {
        assert!(!view.contains(SECRET_TOKEN), "{view}");
        assert!(!view.contains(SECRET_KEY_BODY), "{view}");
    }
    assert_eq!(
        views[0],
        "starting upload\nAuthorization: Bearer [REDACTED]\n[REDACTED]\nupload failed: 403\n"
    );
    // Switched off: the bytes as they came (for a caller with its own scrubbing).
    let mut off = CaptureConfig::default();
    off.redact(false);
    let raw = captured(&off, &[stream.as_bytes()]);
    assert_eq!(raw.render("stderr"), stream);
    assert_eq!(
        (raw.summary().redaction, raw.summary().redactions),
        (false, 0)
    );
}

#[test]
fn g10_a_key_block_cut_by_the_retention_boundary_is_redacted_on_both_sides() {
    // Head keeps the BEGIN line and part of the body; the tail starts
    // inside the body and keeps the END line. Chunks cut mid-line too.
    let body: String = (0..40)
        .map(|i| format!("{SECRET_KEY_BODY}{i:02}\n"))
        .collect();
    let stream = format!(
        "loading key\n-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\nkey rejected\n"
    );
    let mut config = CaptureConfig::default();
    config.head(120).tail(200);
    let bytes = stream.as_bytes();
    let c = captured(&config, &[&bytes[..7], &bytes[7..1000], &bytes[1000..]]);
    let summary = c.summary();
    assert_eq!(summary.retained_part, RetainedPart::HeadAndTail);
    assert_eq!((summary.head_bytes, summary.tail_bytes), (120, 200));
    assert_eq!(summary.redactions, 2, "one per side of the gap");
    let rendered = c.render("stderr");
    assert!(!rendered.contains(&SECRET_KEY_BODY[..20]), "{rendered}");
    assert!(
        rendered.starts_with(&format!(
        "[stderr truncated: kept first 120 and last 200 of {} bytes]\nloading key\n[REDACTED]\n[…",
        stream.len()
    )),
        "{rendered}"
    );
    assert!(
        rendered.ends_with("bytes omitted …]\n[REDACTED]\nkey rejected\n"),
        "{rendered}"
    );
    let excerpt = c.excerpt("stderr", 4096);
    assert!(!excerpt.contains(&SECRET_KEY_BODY[..20]), "{excerpt}");
    assert!(excerpt.ends_with("[REDACTED]\nkey rejected\n"), "{excerpt}");
}

#[test]
fn g10_debug_window_multiplies_budgets_within_limits_and_is_noted() {
    let base = Instant::now();
    let at = |ms: u64| Stamp::new(base + Duration::from_millis(ms), 1_000_000 + ms);
    let mut debug = DebugMode::default();
    let config = CaptureConfig::default();
    // Off by default: the config is unchanged.
    assert_eq!(debug.apply(at(0).instant, &config), config);
    assert_eq!(debug.poll_timeout(), None);
    // Limits: typed refusals, nothing opened.
    assert_eq!(
        debug.open(at(0), MAX_DEBUG_WINDOW + Duration::from_millis(1), 2),
        Err(DebugModeError::DurationOutOfRange {
            requested: MAX_DEBUG_WINDOW + Duration::from_millis(1),
            max: MAX_DEBUG_WINDOW
        })
    );
    assert!(matches!(
        debug.open(at(0), Duration::ZERO, 2),
        Err(DebugModeError::DurationOutOfRange { .. })
    ));
    for bad in [0, MAX_DEBUG_MULTIPLIER + 1] {
        assert_eq!(
            debug.open(at(0), Duration::from_secs(60), bad),
            Err(DebugModeError::MultiplierOutOfRange {
                requested: bad,
                max: MAX_DEBUG_MULTIPLIER
            })
        );
    }
    assert_eq!(debug.windows_opened(), 0);
    // A window of 60 s at ×4.
    let mark = debug
        .open(at(10), Duration::from_secs(60), 4)
        .expect("within limits");
    assert_eq!(
        (
            mark.window,
            mark.multiplier,
            mark.opened_unix_ms,
            mark.closes_unix_ms
        ),
        (1, 4, 1_000_010, 1_060_010)
    );
    assert!(matches!(
        debug.open(at(20), Duration::from_secs(1), 2),
        Err(DebugModeError::AlreadyOpen { open }) if open == mark
    ));
    let during = debug.apply(at(30).instant, &config);
    assert_eq!(during.get_debug(), Some(mark));
    assert_eq!(during.wanted(), 4 * DEFAULT_TAIL);
    let input = numbered(200_000);
    let c = captured(&during, &[&input]);
    assert_eq!(c.summary().tail_bytes, 4 * DEFAULT_TAIL as u64);
    assert_eq!(c.summary().debug, Some(mark));
    let json = serde_json::to_value(c.summary()).expect("serializable");
    assert_eq!(json["debug"]["window"], 1);
    assert_eq!(json["debug"]["multiplier"], 4);
    // A pooled capture in debug mode still gets at most its grant.
    let mut pool = RetentionPool::new(PoolConfig::default().limit(20_000).reserve(0));
    let capture = OutputCapture::with_grant(&during, pool.grant(during.wanted()));
    assert_eq!(capture.tail_limit(), 20_000);
    assert!(capture.pool_limited());
    let grant = capture.finish().into_grant().expect("pooled");
    pool.release(grant).expect("own grant");
    // At its end the window is over, even before handle_timeout.
    assert_eq!(debug.poll_timeout(), Some(at(60_010).instant));
    assert_eq!(debug.active(at(60_010).instant), None);
    assert_eq!(debug.apply(at(60_010).instant, &config), config);
    debug.handle_timeout(at(60_010).instant);
    assert_eq!(debug.poll_timeout(), None);
    // A new window gets a new number; close ends it early.
    let second = debug
        .open(at(70_000), Duration::from_secs(5), 1)
        .expect("ok");
    assert_eq!(second.window, 2);
    assert_eq!(debug.close(), Some(second));
    assert_eq!(debug.active(at(70_001).instant), None);
    assert_eq!(captured(&config, &[b"x"]).summary().debug, None);
}

#[test]
fn g10_pool_grants_what_is_free_and_counts_short_grants() {
    let mut config = PoolConfig::default();
    config.limit(100).reserve(0).min_grant(0);
    let mut pool = RetentionPool::new(&config);
    let a = pool.grant(60);
    let b = pool.grant(60);
    let c = pool.grant(60);
    assert_eq!((a.bytes(), b.bytes(), c.bytes()), (60, 40, 0));
    assert_eq!((pool.in_use(), pool.free(), pool.peak()), (100, 0, 100));
    assert_eq!(
        (pool.short_grants(), pool.empty_grants(), pool.outstanding()),
        (2, 1, 3)
    );
    assert_eq!(pool.release(a), Ok(60));
    assert_eq!(pool.in_use(), 40);
    let d = pool.grant(10);
    assert!(!d.is_short());
    for grant in [b, c, d] {
        pool.release(grant).expect("own grant");
    }
    assert_eq!(
        (pool.in_use(), pool.peak(), pool.outstanding()),
        (0, 100, 0)
    );
    assert_eq!(pool.stats().grants, 4);
}

#[test]
fn g10_pool_reserve_gives_late_captures_a_minimum() {
    let mut pool = RetentionPool::default();
    let config = CaptureConfig::default();
    let grants: Vec<Grant> = (0..80).map(|_| pool.grant(config.wanted())).collect();
    let sizes: Vec<usize> = grants.iter().map(Grant::bytes).collect();
    assert!(sizes[..14].iter().all(|&b| b == DEFAULT_TAIL), "{sizes:?}");
    assert!(
        sizes[14..78].iter().all(|&b| b == DEFAULT_MIN_GRANT),
        "{sizes:?}"
    );
    assert!(sizes[78..].iter().all(|&b| b == 0), "{sizes:?}");
    assert_eq!(pool.in_use(), DEFAULT_POOL_LIMIT);
    for grant in grants {
        pool.release(grant).expect("own grant");
    }
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn g10_pool_reserve_is_clamped_to_limit() {
    let mut config = PoolConfig::default();
    config.limit(10).reserve(1000).min_grant(4);
    let mut pool = RetentionPool::new(&config);
    let grants: Vec<Grant> = (0..4).map(|_| pool.grant(100)).collect();
    let sizes: Vec<usize> = grants.iter().map(Grant::bytes).collect();
    assert_eq!(sizes, [4, 4, 2, 0]);
    assert_eq!(pool.limit(), 10);
    for grant in grants {
        pool.release(grant).expect("own grant");
    }
}

#[test]
fn g10_pool_refuses_foreign_grant() {
    let mut small = RetentionPool::new(PoolConfig::default().limit(10));
    let mut big = RetentionPool::default();
    let grant = big.grant(1000);
    assert_eq!(
        small.release(grant),
        Err(ReleaseError::ForeignGrant { bytes: 1000 })
    );
    assert_eq!((small.in_use(), small.outstanding()), (0, 0));
}

#[test]
fn g10_short_grant_truncates_honestly() {
    let mut config = PoolConfig::default();
    config.limit(8).reserve(0);
    let mut pool = RetentionPool::new(&config);
    let mut limits = CaptureConfig::default();
    limits.head(4).tail(16);
    let mut capture = OutputCapture::with_grant(&limits, pool.grant(limits.wanted()));
    assert_eq!((capture.tail_limit(), capture.head_limit()), (8, 0));
    assert!(capture.pool_limited());
    capture.push(b"0123456789");
    let c = capture.finish();
    assert_eq!(
        c.render("stderr"),
        "[stderr truncated: kept last 8 of 10 bytes]\n23456789"
    );
    assert!(c.summary().pool_limited);
    let mut starved = OutputCapture::with_grant(&limits, pool.grant(limits.wanted()));
    starved.push(b"abc");
    let s = starved.finish();
    assert_eq!(
        s.render("stderr"),
        "[stderr truncated: kept 0 of 3 bytes]\n"
    );
    for grant in [c.into_grant(), s.into_grant()].into_iter().flatten() {
        pool.release(grant).expect("own grant");
    }
    assert_eq!(pool.in_use(), 0);
}

/// Byte `pos` of flood `id`: any position can be recomputed, so 50 floods
/// are checked exactly without storing their input.
fn flood_byte(id: usize, pos: u64) -> u8 {
    (pos.wrapping_mul(0x9E37_79B9).rotate_right(11) as u8) ^ (id as u8).wrapping_mul(37)
}

struct Flood {
    id: usize,
    capture: OutputCapture,
    target: u64,
}

#[test]
fn g10_pool_limit_holds_under_50_concurrent_floods() {
    let mut rng = XorShift(0x5EED_CAFE);
    let mut pool = RetentionPool::default();
    let mut live: Vec<Flood> = Vec::new();
    let (mut started, mut finished, mut max_live) = (0, 0, 0);
    let mut chunk = vec![0u8; 40_000];
    while finished < 50 {
        if started < 50 && rng.below(4) == 0 {
            let mut limits = CaptureConfig::default();
            if started % 5 == 0 {
                limits.head(1024);
            }
            let grant = pool.grant(limits.wanted());
            live.push(Flood {
                id: started,
                capture: OutputCapture::with_grant(&limits, grant),
                target: 10_000 + rng.below(400_000) as u64,
            });
            started += 1;
        } else if !live.is_empty() {
            let index = rng.below(live.len());
            let flood = &mut live[index];
            let seen = flood.capture.seen();
            if seen >= flood.target {
                let flood = live.swap_remove(index);
                finish_flood(&mut pool, flood);
                finished += 1;
            } else {
                let len = min(1 + rng.below(chunk.len()), (flood.target - seen) as usize);
                for (i, byte) in chunk[..len].iter_mut().enumerate() {
                    *byte = flood_byte(flood.id, seen + i as u64);
                }
                flood.capture.push(&chunk[..len]);
            }
        }
        max_live = max_live.max(live.len());
        assert!(pool.in_use() <= pool.limit(), "pool over its limit");
        let retained: u64 = live.iter().map(|f| f.capture.retained()).sum();
        assert!(
            retained <= pool.limit() as u64,
            "live captures over the pool limit"
        );
    }
    assert_eq!((pool.in_use(), pool.outstanding()), (0, 0));
    assert!(max_live >= 25, "floods overlapped: {max_live}");
    assert!(pool.short_grants() > 0, "the pool was under pressure");
    assert!(pool.peak() <= pool.limit() && pool.peak() > pool.limit() / 2);
}

fn finish_flood(pool: &mut RetentionPool, flood: Flood) {
    let (head_limit, tail_limit) = (flood.capture.head_limit(), flood.capture.tail_limit());
    let c = flood.capture.finish();
    let n = c.seen();
    let head = min(head_limit as u64, n);
    let tail = min(tail_limit as u64, n - head);
    let expect_head: Vec<u8> = (0..head).map(|p| flood_byte(flood.id, p)).collect();
    let expect_tail: Vec<u8> = (n - tail..n).map(|p| flood_byte(flood.id, p)).collect();
    assert_eq!(c.head(), &expect_head[..]);
    assert_eq!(c.tail(), &expect_tail[..]);
    assert_eq!(c.retained(), head + tail);
    assert_eq!(c.truncated(), n > head + tail);
    if c.truncated() {
        let rendered = c.render("stderr");
        let marker = rendered.split('\n').next().expect("a line");
        assert_eq!(marker, truncation_marker("stderr", head, tail, n));
    }
    let grant = c.into_grant().expect("pooled");
    pool.release(grant).expect("own grant");
}

#[test]
fn g10_fuzz_capture_on_pseudo_random_inputs() {
    let mut rng = XorShift(0xDEAD_BEEF);
    for round in 0..300 {
        let len = rng.below(64 + round * 8);
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        crate::fuzzing::fuzz_capture(&data);
    }
}

fn chunked(input: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
    cuts.iter_mut().for_each(|c| *c = min(*c, input.len()));
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut at = 0;
    for cut in cuts.into_iter().chain([input.len()]) {
        chunks.push(&input[at..cut]);
        at = cut;
    }
    chunks
}

fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        any::<String>().prop_map(String::into_bytes),
        proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(0x80u8), Just(0xE2), Just(0xF0)],
            0..200
        ),
    ]
}

proptest! {
    #[test]
    fn g10_exact_accounting_under_any_chunking(
        input in stream_bytes(),
        cuts in proptest::collection::vec(0usize..400, 0..20),
        head in 0usize..64,
        tail in 0usize..64,
        granted in proptest::option::of(0usize..160),
    ) {
        let mut limits = CaptureConfig::default();
        limits.head(head).tail(tail);
        let mut pool = RetentionPool::new(PoolConfig::default().reserve(0).limit(granted.unwrap_or(0)));
        let mut capture = match granted {
            Some(_) => OutputCapture::with_grant(&limits, pool.grant(limits.wanted())),
            None => OutputCapture::new(&limits),
        };
        let (head_limit, tail_limit) = (capture.head_limit(), capture.tail_limit());
        if let Some(g) = granted {
            prop_assert_eq!(tail_limit, min(tail, g));
            prop_assert_eq!(head_limit, min(head, g - tail_limit));
        } else {
            prop_assert_eq!((head_limit, tail_limit), (head, tail));
        }
        for chunk in chunked(&input, cuts) {
            capture.push(chunk);
        }
        let c = capture.finish();
        check_captured(&c, &input, head_limit, tail_limit);
        if let Some(grant) = c.into_grant() {
            prop_assert!(pool.release(grant).is_ok());
        }
        prop_assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn g10_excerpt_never_exceeds_max_bytes(
        input in stream_bytes(),
        tail in 0usize..300,
        max in 0usize..400,
    ) {
        let c = captured(&tail_config(tail), &[&input]);
        check_excerpt(&c, &input, max);
    }
}

#[test]
fn g10_the_newest_bytes_are_visible_while_the_capture_goes_on() {
    let mut config = CaptureConfig::default();
    config.head(4).tail(8).redact(false);
    let mut c = OutputCapture::new(&config);
    c.push(b"abc");
    assert_eq!(c.newest(100), b"abc");
    c.push(b"defghijklmnop");
    // Head "abcd", ring "ijklmnop": kept in stream order, the newest last.
    assert_eq!(c.newest(100), b"abcdijklmnop");
    assert_eq!(c.newest(5), b"lmnop");
    assert_eq!(c.newest(0), b"");
    c.push(b"QRS");
    assert_eq!(c.newest(6), b"nopQRS");
    // The capture goes on as before.
    let done = c.finish();
    assert_eq!(done.tail(), b"lmnopQRS");
}

#[test]
fn g10_a_live_view_is_redacted_like_the_final_one() {
    let mut config = CaptureConfig::default();
    config.head(0).tail(256);
    let mut c = OutputCapture::new(&config);
    c.push(b"Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789\n");
    let live = String::from_utf8_lossy(&c.newest(256)).into_owned();
    assert!(
        !live.contains("abcdefghijklmnopqrstuvwxyz0123456789"),
        "{live}"
    );
}
