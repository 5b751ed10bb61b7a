//! The content limit, result by result. With a real server and real
//! clients: the guard's tests in `cli/` (`guard_policy.rs`).

use serde_json::{json, Value};

use super::*;

fn limit(max: u64, keep: Keep) -> ContentLimit {
    ContentLimit::new(max, keep).expect("a limit")
}

/// The edited result as a tree (it must be valid JSON).
fn edited(l: &ContentLimit, result: &Value) -> (Value, CutSummary) {
    let text = result.to_string();
    let edit = l.edit(&text).expect("an edit");
    let out: Value = serde_json::from_str(&edit.apply(&text)).expect("valid JSON");
    (out, edit.summary().clone())
}

fn text_of(v: &Value, i: usize) -> &str {
    v["content"][i]["text"].as_str().expect("a text block")
}

#[test]
fn f4_a_result_within_the_limit_or_not_a_tool_result_goes_on_as_it_came() {
    let l = limit(100, Keep::HeadAndTail);
    let small = json!({"content": [{"type": "text", "text": "x".repeat(100)}]});
    assert_eq!(l.edit(&small.to_string()), None);
    for other in [
        "[1,2]",
        "not json",
        "{\"tools\":[]}",
        "{\"content\":\"text\"}",
        "{\"content\":[{\"type\":\"text\",\"text\":",
        "",
    ] {
        assert_eq!(l.edit(other), None, "{other}");
    }
    // A block of another kind, or a text that is not a string, is not measured.
    let odd = json!({"content": [{"type": "text", "text": 5}, {"type": "resource_link", "uri": "x".repeat(500)}, 7]});
    assert_eq!(l.edit(&odd.to_string()), None);
    assert_eq!(
        ContentLimit::new(0, Keep::Head),
        Err(PolicyError::ZeroResultText)
    );
}

#[test]
fn f4_a_long_text_is_cut_to_the_limit_with_a_marker_in_the_text_and_in_meta() {
    let total = 5 * 1024 * 1024;
    let body: String = (0..total)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let result = json!({"content": [{"type": "text", "text": body}], "isError": false});
    let l = limit(65536, Keep::HeadAndTail);
    let (out, summary) = edited(&l, &result);
    let text = text_of(&out, 0);
    assert!(text.len() <= 65536, "{} bytes", text.len());
    assert!(
        text.len() > 65000,
        "{} bytes: the share is used",
        text.len()
    );
    let (head, rest) = text.split_once("\n[mcp-stdio: ").expect("the marker");
    let (mark, tail) = rest.split_once("]\n").expect("the marker's end");
    assert!(body.starts_with(head) && body.ends_with(tail));
    let omitted = total - head.len() - tail.len();
    assert_eq!(
        mark,
        format!(
            "{} of 5,242,880 bytes omitted (--max-result-text 65536)",
            commas(omitted as u64)
        )
    );
    assert!(head.len().abs_diff(tail.len()) <= 1, "half each");
    assert_eq!(
        out["_meta"][TRUNCATED_META_KEY],
        json!({"omittedBytes": omitted, "totalBytes": total, "limit": 65536})
    );
    assert_eq!(out["isError"], json!(false));
    assert_eq!(summary.blocks_cut, 1);
    assert_eq!(summary.omitted_bytes, omitted as u64);
    assert!(summary.describe(65536).contains("1 text block(s) cut"));

    let (out, _) = edited(&limit(1000, Keep::Head), &result);
    let text = text_of(&out, 0);
    let (head, mark) = text.split_once("\n[mcp-stdio: ").expect("the marker");
    assert!(body.starts_with(head) && mark.ends_with(")]") && text.len() <= 1000);
    let (out, _) = edited(&limit(1000, Keep::Tail), &result);
    let text = text_of(&out, 0);
    let (mark, tail) = text.split_once("]\n").expect("the marker");
    assert!(body.ends_with(tail) && mark.starts_with("[mcp-stdio: ") && text.len() <= 1000);
}

#[test]
fn f4_cuts_fall_on_character_boundaries_and_never_inside_an_escape() {
    // Multi-byte characters, escapes of every length, surrogate pairs.
    let piece = "é漢😀\n\"\\\u{1}a\t/";
    let body = piece.repeat(400);
    let result = json!({"content": [{"type": "text", "text": body}]});
    let json_text = result.to_string();
    let total = body.len() as u64;
    for max in [1, 2, 3, 50, 97, 98, 99, 100, 101, 333, 1000, 4095] {
        for keep in [Keep::Head, Keep::Tail, Keep::HeadAndTail] {
            let l = limit(max, keep);
            let edit = l.edit(&json_text).expect("cut");
            let out: Value = serde_json::from_str(&edit.apply(&json_text)).expect("valid JSON");
            let text = text_of(&out, 0);
            let mark = marker(edit.summary().omitted_bytes, total, max);
            let (head, tail) = text.split_once(mark.as_str()).expect("the marker");
            let head = head.strip_suffix('\n').unwrap_or(head);
            let tail = tail.strip_prefix('\n').unwrap_or(tail);
            assert!(body.starts_with(head), "{max} {keep:?}");
            assert!(body.ends_with(tail), "{max} {keep:?}");
            let kept = (head.len() + tail.len()) as u64;
            assert_eq!(kept + edit.summary().omitted_bytes, total);
            if max as usize >= mark.len() + 2 {
                assert!(text.len() as u64 <= max, "{max} {keep:?}: {}", text.len());
            }
        }
    }
    // Escaped forms of the same characters (as another encoder writes them),
    // and a lone surrogate (valid JSON text that serde_json's `Value` refuses).
    let escaped =
        r#"{"content":[{"type":"text","text":"\u00e9\u6f22\ud83d\ude00\u000a\ud800x\/"}]}"#;
    let l = limit(1, Keep::Head);
    assert!(l.edit(escaped).is_some());
    let body = &escaped[escaped.find(r"\u00e9").unwrap()..escaped.rfind('"').unwrap()];
    // é 2, 漢 3, 😀 4, \n 1, the lone surrogate as U+FFFD 3, x 1, / 1.
    assert_eq!(decoded_len(body), 15);
    assert_eq!(raw_offset(body, 6, false), (12, 5), "not inside the pair");
    assert_eq!(raw_offset(body, 6, true), (24, 9));
}

#[test]
fn f4_shares_are_water_filled_so_a_short_block_stays_whole() {
    let result = json!({"content": [
        {"type": "text", "text": "summary: 3 matches"},
        {"type": "text", "text": "L".repeat(50_000)},
        {"type": "text", "text": "M".repeat(30_000)},
    ]});
    let (out, summary) = edited(&limit(10_000, Keep::HeadAndTail), &result);
    assert_eq!(text_of(&out, 0), "summary: 3 matches");
    let (a, b) = (text_of(&out, 1), text_of(&out, 2));
    assert!(a.contains("[mcp-stdio: ") && b.contains("[mcp-stdio: "));
    let sum = 18 + a.len() + b.len();
    assert!((9_900..=10_000).contains(&sum), "{sum}");
    assert!(a.len().abs_diff(b.len()) <= 2);
    assert_eq!(summary.blocks_cut, 2);
    assert_eq!(summary.total_bytes, 80_018);
}

#[test]
fn f4_an_image_audio_or_blob_over_the_limit_is_replaced_by_a_text_block() {
    let result = json!({"content": [
        {"type": "text", "text": "Here's the image you requested:"},
        {"type": "image", "data": "A".repeat(4000), "mimeType": "image/png", "annotations": {"audience": ["user"]}},
        {"type": "audio", "data": "B".repeat(10), "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///x", "blob": "C".repeat(2000), "mimeType": "application/zip"}},
    ], "resultType": "complete"});
    let (out, summary) = edited(&limit(1024, Keep::HeadAndTail), &result);
    assert_eq!(text_of(&out, 0), "Here's the image you requested:");
    assert_eq!(
        out["content"][1],
        json!({"type": "text", "text": "[mcp-stdio: an image (image/png) of 4,000 bytes omitted (--max-result-text 1024)]"})
    );
    assert_eq!(
        out["content"][2], result["content"][2],
        "under the limit: kept"
    );
    assert_eq!(
        text_of(&out, 3),
        "[mcp-stdio: a resource blob (application/zip) of 2,000 bytes omitted (--max-result-text 1024)]"
    );
    assert_eq!(out["resultType"], json!("complete"));
    assert_eq!(summary.media_replaced, 2);
    assert_eq!(summary.omitted_bytes, 6000);
    assert_eq!(summary.total_bytes, 31 + 4000 + 10 + 2000);
    assert_eq!(
        out["_meta"][TRUNCATED_META_KEY]["omittedBytes"],
        json!(6000)
    );
}

#[test]
fn f4_an_embedded_resource_text_is_cut_like_a_text_block() {
    let result = json!({"content": [
        {"type": "resource", "resource": {"uri": "file:///log", "text": "x".repeat(5000), "mimeType": "text/plain"}},
    ]});
    let (out, summary) = edited(&limit(500, Keep::Tail), &result);
    let text = out["content"][0]["resource"]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("[mcp-stdio: ") && text.len() <= 500);
    assert_eq!(out["content"][0]["resource"]["uri"], json!("file:///log"));
    assert_eq!(summary.blocks_cut, 1);
}

#[test]
fn f4_structured_content_is_never_edited_and_over_the_limit_makes_a_tool_error() {
    let weather = json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82});
    let result = json!({
        "content": [{"type": "text", "text": weather.to_string()}],
        "structuredContent": weather,
        "resultType": "complete",
        "_meta": {"server/key": 1},
    });
    let (out, summary) = edited(&limit(48, Keep::HeadAndTail), &result);
    assert_eq!(out["isError"], json!(true));
    assert!(out.get("structuredContent").is_none());
    assert_eq!(out["resultType"], json!("complete"));
    assert_eq!(out["_meta"]["server/key"], json!(1));
    let size = weather.to_string().len() as u64;
    assert_eq!(summary.structured_withheld, Some(size));
    assert!(text_of(&out, 0).contains(&format!(
        "structuredContent of {size} bytes passes --max-result-text 48"
    )));
    assert_eq!(
        out["_meta"][TRUNCATED_META_KEY]["omittedBytes"],
        json!(2 * size)
    );
    // Under the limit it stays byte for byte while the text is cut.
    let result = json!({
        "content": [{"type": "text", "text": "y".repeat(500)}],
        "structuredContent": {"ok": true},
    });
    let text = result.to_string();
    let edit = limit(100, Keep::Head).edit(&text).expect("cut");
    assert!(edit
        .apply(&text)
        .contains(r#""structuredContent":{"ok":true}"#));
}

#[test]
fn f4_the_marker_joins_the_servers_meta_or_takes_the_place_of_one_that_is_not_an_object() {
    let long = "z".repeat(300);
    let l = limit(100, Keep::Head);
    for (meta, want) in [
        (json!({"a": 1}), json!({"a": 1})),
        (json!({}), json!({})),
        (json!(null), json!({})),
        (json!("odd"), json!({})),
    ] {
        let result = json!({"_meta": meta, "content": [{"type": "text", "text": long}]});
        let (out, _) = edited(&l, &result);
        let mut got = out["_meta"].clone();
        let entry = got
            .as_object_mut()
            .and_then(|m| m.remove(TRUNCATED_META_KEY))
            .expect("the entry");
        assert_eq!(entry["totalBytes"], json!(300));
        assert_eq!(got, want);
    }
    // Whitespace and a server's own entry of the key: ours comes last, and
    // a reader takes the last.
    let text = format!(
        "{{ \"_meta\" : {{ \"{TRUNCATED_META_KEY}\" : 0 }} , \"content\" : [ {{ \"type\":\"text\", \"text\":\"{long}\" }} ] }}"
    );
    let edit = l.edit(&text).expect("cut");
    let out: Value = serde_json::from_str(&edit.apply(&text)).expect("valid");
    assert_eq!(out["_meta"][TRUNCATED_META_KEY]["limit"], json!(100));
}

#[test]
fn f4_the_frame_around_a_result_is_copied_once_with_the_edits_in_place() {
    let result = json!({"content": [{"type": "text", "text": "q".repeat(1000)}]}).to_string();
    let frame = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{result}}}"#);
    let at = frame.find(r#"{"content""#).expect("the result");
    let edit = limit(100, Keep::Head)
        .edit(&frame[at..frame.len() - 1])
        .expect("cut");
    let out: Value = serde_json::from_str(&edit.apply_within(&frame, at)).expect("valid");
    assert_eq!(out["id"], json!(7));
    assert!(text_of(&out["result"], 0).len() <= 100);
}

#[test]
fn f4_numbers_get_thousands_separators_and_keep_parses_its_names() {
    assert_eq!(commas(0), "0");
    assert_eq!(commas(999), "999");
    assert_eq!(commas(1000), "1,000");
    assert_eq!(commas(1_234_567), "1,234,567");
    assert_eq!(commas(u64::MAX), "18,446,744,073,709,551,615");
    for k in [Keep::Head, Keep::Tail, Keep::HeadAndTail] {
        assert_eq!(Keep::parse(k.as_str()), Some(k));
    }
    assert_eq!(Keep::parse("middle"), None);
}

#[test]
fn f4_water_level_is_the_largest_share_that_fits() {
    assert_eq!(water_level(&[10, 10], 100), 100);
    assert_eq!(water_level(&[50, 100], 100), 50);
    assert_eq!(water_level(&[10, 100, 100], 100), 45);
    assert_eq!(water_level(&[u64::MAX, u64::MAX], 10), 5);
    assert_eq!(water_level(&[], 10), 10);
}

#[test]
fn f4_a_result_of_more_blocks_than_the_first_pass_keeps_is_read_again_alike() {
    let n = MAX_KEPT_UNITS + 10;
    let blocks: Vec<Value> = (0..n)
        .map(|i| json!({"type": "text", "text": format!("{i:04}").repeat(50)}))
        .collect();
    let result = json!({"content": blocks});
    let l = limit(n as u64 * 150, Keep::Head);
    let (out, summary) = edited(&l, &result);
    assert_eq!(summary.blocks_cut, n as u64);
    let first = text_of(&out, 0);
    let last = text_of(&out, n - 1);
    assert!(
        first.starts_with("0000") && first.contains("[mcp-stdio: "),
        "{first}"
    );
    assert!(last.starts_with(&format!("{:04}", n - 1)), "{last}");
    // The same cut with few blocks takes the kept path: the same shares.
    let few = json!({"content": blocks_of(&result, 3)});
    let (out_few, _) = edited(&limit(3 * 150, Keep::Head), &few);
    assert_eq!(text_of(&out_few, 0).len(), first.len());
}

fn blocks_of(result: &Value, n: usize) -> Vec<Value> {
    result["content"].as_array().expect("content")[..n].to_vec()
}
