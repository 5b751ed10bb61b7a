//! G2/G3/G4 with awkward payloads: one huge field full of escapes, many small
//! blocks, long strings without separators, and garbage lines on stdout.

use std::time::Instant;

use serde_json::{json, Value};

use super::{
    first_text, metrics, options, parse_errors, ping_within, shutdown_within, start, tool,
    LeakCheck, LONG, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient};
use crate::huge_field_text;

/// G2: one ~6 MiB string field with quotes, backslashes, control characters
/// and 2-, 3- and 4-byte characters arrives exactly (escaping makes the line
/// longer than the text; bytes are bytes, not chars).
pub fn g2_huge_single_field_with_escapes_round_trips_exactly<A: Adapter>() {
    let bytes = 6 << 20;
    let mut leaks = LeakCheck::new::<A>("g2_huge_field");
    let client = start::<A>(&mut leaks, &[], options(16 << 20));
    let t = Instant::now();
    let r = client
        .request(
            "tools/call",
            tool("huge_field", json!({ "bytes": bytes })),
            Some(LONG),
        )
        .expect("huge_field result");
    let took = t.elapsed();
    let expected = huge_field_text(bytes);
    let got = first_text(&r);
    assert_eq!(got.len(), expected.len(), "byte length");
    assert!(got == expected, "the text differs from huge_field_text");
    let m = metrics(&*client);
    // JSON escaping makes the frame strictly larger than the text.
    assert!(m.largest_frame > bytes as u64, "{}", m.largest_frame);
    eprintln!(
        "{}: huge field of {} bytes ({} chars) in a {}-byte frame, {took:?}",
        A::NAME,
        got.len(),
        got.chars().count(),
        m.largest_frame
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G2: 20,000 content blocks of 16 bytes each arrive, all of them, intact.
pub fn g2_twenty_thousand_small_content_blocks_arrive_whole<A: Adapter>() {
    let (count, size) = (20_000, 16);
    let mut leaks = LeakCheck::new::<A>("g2_many_blocks");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let t = Instant::now();
    let r = client
        .request(
            "tools/call",
            tool("many_blocks", json!({ "count": count, "size": size })),
            Some(LONG),
        )
        .expect("many_blocks result");
    let took = t.elapsed();
    let v: Value = serde_json::from_str(r.get()).expect("a result is JSON");
    let blocks = v["content"].as_array().expect("content is an array");
    assert_eq!(blocks.len(), count);
    let block = "b".repeat(size);
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(b["type"], "text", "block {i}");
        assert_eq!(b["text"], block.as_str(), "block {i}");
    }
    eprintln!(
        "{}: {count} blocks of {size} bytes in a {}-byte result, {took:?}",
        A::NAME,
        r.get().len()
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G2/G4: 3 MiB strings without any separator, with newlines (sent as `\n`
/// escapes), with literal backslash-n pairs, and with quotes and multi-byte
/// characters round-trip exactly through echo — in both directions, split
/// across many pipe reads at arbitrary points.
pub fn g2_g4_long_strings_without_separators_round_trip_exactly<A: Adapter>() {
    let len = 3 << 20;
    let mut leaks = LeakCheck::new::<A>("g2_g4_long_strings");
    let client = start::<A>(&mut leaks, &[], options(16 << 20));
    let cycle = |unit: &str| -> String {
        let mut s = String::with_capacity(len + 8);
        for ch in unit.chars().cycle() {
            if s.len() + ch.len_utf8() > len {
                break;
            }
            s.push(ch);
        }
        s
    };
    let cases = [
        (
            "no separators",
            cycle("abcdefghijklmnopqrstuvwxyz0123456789"),
        ),
        ("newlines", cycle("line of text\n")),
        ("backslash-n", cycle("a\\nb\\\\n")),
        ("quotes and multi-byte", cycle("\"é€😀'\\\"")),
    ];
    for (what, text) in cases {
        let t = Instant::now();
        let r = client
            .request(
                "tools/call",
                tool("echo", json!({ "text": text })),
                Some(LONG),
            )
            .unwrap_or_else(|e| panic!("echo of {what}: {e}"));
        let got = first_text(&r);
        assert_eq!(got.len(), text.len(), "{what}: byte length");
        assert!(got == text, "{what}: the echo differs");
        eprintln!(
            "{}: echo of {} bytes ({what}) in {:?}",
            A::NAME,
            text.len(),
            t.elapsed()
        );
    }
    let m = metrics(&*client);
    assert_eq!(parse_errors(&m), 0, "{:?}", m.parse_errors);
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G3: a malformed JSON line right after the initialize response is counted
/// as a parse error and the session goes on.
pub fn g3_malformed_line_after_init_is_counted_and_ping_still_works<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g3_malformed");
    let client = start::<A>(&mut leaks, &["--malformed-after-init"], options(4 << 20));
    // The ping's response follows the malformed line on the wire, so once it
    // is in, the parse error has been counted.
    let took = ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert_eq!(parse_errors(&m), 1, "{:?}", m.parse_errors);
    let r = client
        .request(
            "tools/call",
            tool("echo", json!({"text": "still here"})),
            None,
        )
        .expect("echo after the malformed line");
    assert_eq!(first_text(&r), "still here");
    eprintln!(
        "{}: malformed line counted as {:?}; ping {took:?}",
        A::NAME,
        m.parse_errors
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G3/G13 from the host side: non-JSON log lines on the server's stdout
/// (one before everything, one between every two messages) are counted as
/// parse errors, exactly, and every request still completes.
pub fn g3_stdout_log_lines_are_counted_and_every_request_completes<A: Adapter>() {
    let n = 10_u64;
    let mut leaks = LeakCheck::new::<A>("g3_stdout_log");
    let client = start::<A>(
        &mut leaks,
        &["--stdout-log-before", "--stdout-log-between"],
        options(4 << 20),
    );
    let mut slowest = std::time::Duration::ZERO;
    for i in 0..n {
        if i % 2 == 0 {
            slowest = slowest.max(ping_within(&*client, PROMPT));
        } else {
            let text = format!("request {i} \"quoted\" é");
            let r = client
                .request(
                    "tools/call",
                    tool("echo", json!({ "text": text })),
                    Some(PROMPT),
                )
                .unwrap_or_else(|e| panic!("echo {i}: {e}"));
            assert_eq!(first_text(&r), text);
        }
    }
    let m = metrics(&*client);
    // One line before the `server/discover` probe's answer (-32601: the
    // fixture speaks the handshake only), one before each later response
    // (initialize's and the n); each log line precedes the response we
    // waited for.
    assert_eq!(parse_errors(&m), n + 2, "{:?}", m.parse_errors);
    assert_eq!(m.responses, n + 2, "discover + initialize + {n}");
    eprintln!(
        "{}: {n} requests through stdout log lines: parse errors {:?}, slowest ping {slowest:?}",
        A::NAME,
        m.parse_errors
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G3: a result with bytes that are not UTF-8 (the field's case: `\xff\xfe`
/// inside a string, the id first, or last) is repaired to U+FFFD by default
/// and arrives as a result at once; one that is not JSON once repaired fails
/// its request at once; with the policy `Refuse` the line is dropped and its
/// request fails at once too. None waits for its timeout; a ping follows.
pub fn g3_an_invalid_utf8_response_gets_its_outcome_at_once<A: Adapter>() {
    use mcp_stdio_core::InvalidUtf8Policy;
    use mcp_stdio_core::RequestError;
    use mcp_stdio_core::RequestFailure;
    let timeout = std::time::Duration::from_secs(60);
    let within = std::time::Duration::from_secs(5);
    let mut leaks = LeakCheck::new::<A>("g3_bad_utf8");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    for id_last in [false, true] {
        let t = Instant::now();
        let r = client.request(
            "tools/call",
            tool("bad_utf8_result", json!({ "id_last": id_last })),
            Some(timeout),
        );
        let took = t.elapsed();
        let r = r.unwrap_or_else(|e| panic!("{}: a repaired result, got {e}", A::NAME));
        assert_eq!(first_text(&r), "bad \u{fffd}\u{fffd} byte");
        assert!(took < within, "took {took:?}");
        eprintln!(
            "{}: invalid UTF-8 result (id last: {id_last}) repaired in {took:?}",
            A::NAME
        );
    }
    let t = Instant::now();
    let r = client.request(
        "tools/call",
        tool("bad_utf8_result", json!({ "broken": true })),
        Some(timeout),
    );
    let took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::MalformedResponse(_)))
        ),
        "{}: {r:?}",
        A::NAME
    );
    assert!(took < within, "took {took:?}");
    eprintln!("{}: repaired but not JSON: failed in {took:?}", A::NAME);
    let m = metrics(&*client);
    assert_eq!(m.utf8_repaired, 3, "{m:?}");
    assert_eq!(m.refused_frames_failed, 1, "{m:?}");
    ping_within(&*client, PROMPT);
    shutdown_within::<A>(client, LONG);

    let mut refuse = options(4 << 20);
    refuse.framer_mut().invalid_utf8(InvalidUtf8Policy::Refuse);
    let client = start::<A>(&mut leaks, &[], refuse);
    let t = Instant::now();
    let r = client.request(
        "tools/call",
        tool("bad_utf8_result", json!({})),
        Some(timeout),
    );
    let took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(
                RequestFailure::InvalidUtf8Response { .. }
            ))
        ),
        "{}: {r:?}",
        A::NAME
    );
    assert!(took < within, "took {took:?}");
    let ping = ping_within(&*client, PROMPT);
    eprintln!(
        "{}: refused by policy: failed in {took:?}; then ping {ping:?}",
        A::NAME
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G2: a 5 MiB tool result (a `read_text_file` of a 5 MiB file, say) passes
/// at the default wire limit, which rmcp and the Python SDK would accept too.
pub fn g2_a_5_mib_result_passes_at_the_default_limit<A: Adapter>() {
    use mcp_stdio_core::DEFAULT_MAX_FRAME;
    let mut leaks = LeakCheck::new::<A>("g2_5_mib");
    let client = start::<A>(&mut leaks, &[], options(DEFAULT_MAX_FRAME));
    let t = Instant::now();
    let r = client
        .request(
            "tools/call",
            tool("big", json!({ "bytes": 5 << 20 })),
            Some(LONG),
        )
        .unwrap_or_else(|e| panic!("{}: 5 MiB at the default limit: {e}", A::NAME));
    assert_eq!(first_text(&r).len(), 5 << 20);
    eprintln!(
        "{}: 5 MiB result at the default {DEFAULT_MAX_FRAME}-byte limit in {:?}",
        A::NAME,
        t.elapsed()
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}
