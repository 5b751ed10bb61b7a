//! Fuzz target `json_edit`: the top-level object editors of 2026-07-28
//! (`insert_missing`, `merge_meta`, `member`) and the guard's content limit
//! on tool results (`ContentLimit::edit`) on any text.
//!
//! # What a JSON object is, here and in the editors
//!
//! RFC 8259's object: its syntax, member names that are Unicode strings,
//! and values taken as the text they are. serde_json's `Value` is not the
//! judge: it refuses what RFC 8259 allows but cannot represent, such as a
//! number beyond `f64` (`{"a":1e48188}`) or a lone surrogate escape in a
//! string. The editors work on raw text so that a proxy stays transparent:
//! such a member is carried on exactly as it came, and the peer's reader
//! decides what it means. So the oracle here is serde_json's own map of
//! names to raw values (`BTreeMap<String, &RawValue>`), not the editors'
//! member visitor, and values are compared as text (the editors copy them
//! byte for byte). Names repeat in some objects: the oracle's map keeps the
//! last, as many readers do, so the editors must keep every occurrence
//! right.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::wire::object::{insert_missing, member, merge_meta};

/// An object's members, names decoded, values as text (the last of a
/// repeated name); `None` when `text` is not one JSON object.
fn object(text: &str) -> Option<BTreeMap<String, &RawValue>> {
    serde_json::from_str(text).ok()
}

/// Any UTF-8 input as params/result text: the editors never panic; what
/// they give is one JSON object with the fields set and every old member
/// kept as it was; they give nothing for text that is not one JSON object.
pub fn fuzz_json_edit(data: &[u8]) {
    content_limit(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let fields = [("resultType", r#""complete""#), ("ttlMs", "0")];
    let inserted = insert_missing(text, &fields);
    let merged = merge_meta(Some(text), &[("p", r#""v""#)]);
    let Some(obj) = object(text) else {
        assert!(
            inserted.is_none() && merged.is_none(),
            "edited a non-object: {text:?}"
        );
        return;
    };
    match &inserted {
        Some(out) => {
            let v = object(out).expect("insert_missing gives a JSON object");
            for (k, json) in fields {
                let want = obj.get(k).map_or(json, |old| old.get());
                assert_eq!(v[k].get(), want, "{k}: {out}");
            }
            for (k, val) in &obj {
                assert_eq!(v[k].get(), val.get(), "kept {k}: {out}");
            }
        }
        None => assert!(
            fields.iter().all(|(k, _)| obj.contains_key(*k)),
            "insert_missing left out a field: {text:?}"
        ),
    }
    let out = merged.expect("merge_meta edits every object");
    let v = object(&out).expect("merge_meta gives a JSON object");
    let meta = object(v["_meta"].get()).expect("_meta is an object");
    assert_eq!(meta["p"].get(), r#""v""#, "{out}");
    for (k, val) in obj.iter().filter(|(k, _)| *k != "_meta") {
        assert_eq!(v[k].get(), val.get(), "kept {k}: {out}");
    }
    if let Some(old) = obj.get("_meta").and_then(|m| object(m.get())) {
        for (k, val) in old.iter().filter(|(k, _)| *k != "p") {
            assert_eq!(meta[k].get(), val.get(), "kept _meta.{k}: {out}");
        }
    }
    for k in obj.keys() {
        assert!(member(text, k).is_some(), "member {k}");
    }
}

/// The content limit on the input as a result, and on a tool result whose
/// text block and image data are the input as a string's body: an edit is
/// one JSON object with the marker in `_meta` and every other member kept;
/// a cut text is a head and a tail of the text as it came around the marker.
fn content_limit(data: &[u8]) {
    use crate::guard::policy::{ContentLimit, Keep, TRUNCATED_META_KEY};
    let Some((&knob, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let keep = [Keep::Head, Keep::Tail, Keep::HeadAndTail][usize::from(knob % 3)];
    let Ok(limit) = ContentLimit::new(u64::from(knob / 3) + 1, keep) else {
        return;
    };
    let wrapped = format!(
        r#"{{"content":[{{"type":"text","text":"{text}"}},{{"type":"image","data":"{text}"}}],"k":1}}"#
    );
    for result in [text, wrapped.as_str()] {
        let Some(edit) = limit.edit(result) else {
            continue;
        };
        let s = edit.summary();
        assert!(s.omitted_bytes <= s.total_bytes, "{s:?}");
        let out = edit.apply(result);
        let v = object(&out).expect("an edit gives a JSON object");
        let meta = object(v["_meta"].get()).expect("_meta is an object");
        let entry: serde_json::Value =
            serde_json::from_str(meta[TRUNCATED_META_KEY].get()).expect("the marker");
        assert_eq!(entry["omittedBytes"], s.omitted_bytes, "{out}");
        let old = object(result).expect("only an object is edited");
        for (k, val) in &old {
            if !matches!(
                k.as_str(),
                "content" | "_meta" | "structuredContent" | "isError"
            ) {
                assert_eq!(v[k].get(), val.get(), "kept {k}: {out}");
            }
        }
        if s.structured_withheld.is_none() {
            if let Some(sc) = old.get("structuredContent") {
                assert_eq!(v["structuredContent"].get(), sc.get(), "never edited");
            }
        }
        // A cut text is the old text's head and tail around the marker.
        let (Ok(before), Ok(after)) = (
            serde_json::from_str::<serde_json::Value>(result),
            serde_json::from_str::<serde_json::Value>(&out),
        ) else {
            continue;
        };
        let (Some(was), Some(now)) = (
            before["content"][0]["text"].as_str(),
            after["content"][0]["text"].as_str(),
        ) else {
            continue;
        };
        if was != now && s.structured_withheld.is_none() {
            // The marker is at one of these (the text may hold the words too).
            let fits = now.match_indices("[mcp-stdio: ").any(|(at, _)| {
                let Some(end) = now[at..].find(")]").map(|e| at + e + 2) else {
                    return false;
                };
                let head = now[..at].strip_suffix('\n').unwrap_or(&now[..at]);
                let tail = now[end..].strip_prefix('\n').unwrap_or(&now[end..]);
                was.starts_with(head) && was.ends_with(tail)
            });
            assert!(fits, "{was:?} → {now:?}");
        }
    }
}
