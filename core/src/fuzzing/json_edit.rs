//! Fuzz target `json_edit`: the top-level object editors of 2026-07-28
//! (`insert_missing`, `merge_meta`, `member`) on any text.
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
