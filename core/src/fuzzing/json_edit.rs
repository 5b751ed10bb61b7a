//! Fuzz target `json_edit`: the top-level object editors of 2026-07-28
//! (`insert_missing`, `merge_meta`, `member`) on any text.

use serde_json::Value;

use crate::wire::object::{insert_missing, member, merge_meta};

/// Any UTF-8 input as params/result text: the editors never panic; what
/// they give is valid JSON with the fields set and every old member kept;
/// they give nothing for text that is not one JSON object.
pub fn fuzz_json_edit(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed: Option<serde_json::Map<String, Value>> = serde_json::from_str(text).ok();
    let fields = [("resultType", r#""complete""#), ("ttlMs", "0")];
    let inserted = insert_missing(text, &fields);
    let merged = merge_meta(Some(text), &[("p", r#""v""#)]);
    let Some(obj) = parsed else {
        // Not an object (or not JSON): nothing to edit. (serde_json's map
        // parse may refuse duplicate-free text our members accept, never the
        // other way round for valid objects.)
        if serde_json::from_str::<Value>(text).map_or(true, |v| !v.is_object()) {
            assert!(
                inserted.is_none() && merged.is_none(),
                "edited a non-object: {text:?}"
            );
        }
        return;
    };
    match inserted {
        Some(out) => {
            let v: serde_json::Map<String, Value> =
                serde_json::from_str(&out).expect("insert_missing gives a JSON object");
            for (k, json) in fields {
                let want: Value = serde_json::from_str(json).expect("field JSON");
                assert_eq!(v[k], obj.get(k).cloned().unwrap_or(want), "{k}: {out}");
            }
            for (k, val) in &obj {
                assert_eq!(&v[k], val, "kept {k}: {out}");
            }
        }
        None => assert!(fields.iter().all(|(k, _)| obj.contains_key(*k))),
    }
    let out = merged.expect("merge_meta edits every object");
    let v: serde_json::Map<String, Value> =
        serde_json::from_str(&out).expect("merge_meta gives a JSON object");
    assert_eq!(v["_meta"]["p"], "v", "{out}");
    for (k, val) in obj.iter().filter(|(k, _)| *k != "_meta") {
        assert_eq!(&v[k], val, "kept {k}: {out}");
    }
    if let Some(Value::Object(old)) = obj.get("_meta") {
        for (k, val) in old.iter().filter(|(k, _)| *k != "p") {
            assert_eq!(&v["_meta"][k], val, "kept _meta.{k}: {out}");
        }
    }
    for k in obj.keys() {
        assert!(member(text, k).is_some(), "member {k}");
    }
}
