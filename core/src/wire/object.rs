//! Editing the top level of a JSON object given as text, without parsing its
//! values: what the 2026-07-28 revision needs of a transport that carries
//! raw results and params.
//!
//! - [`insert_missing`]: a server answering a 2026-07-28 request adds the
//!   result fields that revision requires (`resultType`, and `ttlMs` /
//!   `cacheScope` on cacheable results) when a handler written for
//!   2025-11-25 left them out;
//! - [`merge_meta`]: a client of a 2026-07-28 server sets the `_meta` keys
//!   every request must carry (protocol version, client capabilities and
//!   info), keeping the caller's own `_meta` keys;
//! - [`member`]: one top-level member's raw value (`_meta`, `resultType`).
//!
//! Values are borrowed as [`RawValue`]s, never decoded into a tree: the cost
//! is one validating pass over the text and one copy of it, and the memory
//! is the output plus one `(key, &RawValue)` pair per top-level member.
//! Input that is not a JSON object gives `None` (the caller keeps it as it
//! is); nothing here panics on input.
//!
//! A JSON object is RFC 8259's: its syntax, member names that are Unicode
//! strings, values as the text they are. A value serde_json's `Value`
//! cannot represent is still valid JSON and still a member: a number beyond
//! `f64` (`{"a":1e48188}`), a lone surrogate escape in a string. A proxy
//! that must be transparent carries such members on byte for byte and lets
//! the peer's reader decide what they mean; refusing them would make a
//! 2026-07-28 result unanswerable, or a request unsendable, for a number
//! the transport never needed to read. (The `json_edit` fuzz target checks
//! the editors against serde_json's map of names to raw values, which
//! holds the same view.)

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The members of a JSON object, in order, values raw; `None` for anything
/// that is not one object (duplicate keys are kept as they came).
pub(crate) fn members(text: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let value: &'de RawValue = map.next_value()?;
                out.push((key, value));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let out = (&mut de).deserialize_map(Members).ok()?;
    de.end().ok()?;
    Some(out)
}

/// The raw value of the top-level member `key` of the object `text` (the
/// first, should the key repeat); `None` when `text` is not an object or has
/// no such member.
pub fn member<'a>(text: &'a str, key: &str) -> Option<&'a RawValue> {
    members(text)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// `text` (a JSON object) with each `(key, json)` of `fields` whose key it
/// does not have added at its front; `json` must be valid JSON text. `None`
/// when `text` is not an object or has every key already (keep `text`).
///
/// ```
/// use mcp_stdio_core::insert_missing;
///
/// let out = insert_missing(r#"{"content":[]}"#, &[("resultType", r#""complete""#)]);
/// assert_eq!(out.as_deref(), Some(r#"{"resultType":"complete","content":[]}"#));
/// assert_eq!(insert_missing(r#"{"resultType":"task"}"#, &[("resultType", r#""complete""#)]), None);
/// assert_eq!(insert_missing("[1]", &[("resultType", r#""complete""#)]), None);
/// ```
pub fn insert_missing(text: &str, fields: &[(&str, &str)]) -> Option<String> {
    let have = members(text)?;
    let missing: Vec<&(&str, &str)> = fields
        .iter()
        .filter(|(k, _)| !have.iter().any(|(h, _)| h == k))
        .collect();
    if missing.is_empty() {
        return None;
    }
    // `members` accepted it: an object, so after the whitespace comes `{`.
    let body = text.trim_start().strip_prefix('{')?;
    let mut out = String::with_capacity(text.len() + 32 * missing.len());
    out.push('{');
    for (i, (key, json)) in missing.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_key(&mut out, key);
        out.push_str(json);
    }
    if !have.is_empty() {
        out.push(',');
    }
    out.push_str(body.trim_start());
    Some(out)
}

/// `params` (a JSON object, or none) with the keys of `meta` (a JSON object's
/// members as `(key, json)`) set in its `_meta` object: added when absent,
/// replaced when present; the caller's other `_meta` keys and other members
/// stay, in their order. A `_meta` that is not an object is replaced; a
/// repeated `_meta` gets the keys in each occurrence.
/// `None` when `params` is given and is not a JSON object.
///
/// ```
/// use mcp_stdio_core::merge_meta;
///
/// let v = [("io.modelcontextprotocol/protocolVersion", r#""2026-07-28""#)];
/// assert_eq!(
///     merge_meta(None, &v).as_deref(),
///     Some(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#)
/// );
/// assert_eq!(
///     merge_meta(Some(r#"{"name":"x","_meta":{"progressToken":1}}"#), &v).as_deref(),
///     Some(r#"{"name":"x","_meta":{"progressToken":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#)
/// );
/// ```
pub fn merge_meta(params: Option<&str>, meta: &[(&str, &str)]) -> Option<String> {
    let Some(params) = params else {
        let mut out = String::from("{\"_meta\":");
        push_object(&mut out, &[], meta);
        out.push('}');
        return Some(out);
    };
    let have = members(params)?;
    let mut out = String::with_capacity(
        params.len()
            + 64
            + meta
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>(),
    );
    out.push('{');
    let mut merged = false;
    for (i, (key, value)) in have.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_key(&mut out, key);
        // Every `_meta`, should the name repeat: readers differ on which
        // one counts (the first or the last), so each gets the keys.
        if key == "_meta" {
            let old = members(value.get()).unwrap_or_default();
            push_object(&mut out, &old, meta);
            merged = true;
        } else {
            out.push_str(value.get());
        }
    }
    if !merged {
        if !have.is_empty() {
            out.push(',');
        }
        out.push_str("\"_meta\":");
        push_object(&mut out, &[], meta);
    }
    out.push('}');
    Some(out)
}

/// Writes an object: `old`'s members whose key `new` does not set, then
/// every member of `new`.
fn push_object(out: &mut String, old: &[(Cow<'_, str>, &RawValue)], new: &[(&str, &str)]) {
    out.push('{');
    let mut first = true;
    for (key, value) in old {
        if new.iter().any(|(k, _)| k == key) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        push_key(out, key);
        out.push_str(value.get());
    }
    for (key, json) in new {
        if !first {
            out.push(',');
        }
        first = false;
        push_key(out, key);
        out.push_str(json);
    }
    out.push('}');
}

/// Writes `"key":`, the key escaped as JSON.
fn push_key(out: &mut String, key: &str) {
    // Serializing a `str` cannot fail.
    out.push_str(&serde_json::to_string(key).unwrap_or_default());
    out.push(':');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).expect("valid JSON out")
    }

    #[test]
    fn insert_missing_adds_only_absent_keys_in_front() {
        let fields = [("resultType", r#""complete""#), ("ttlMs", "0")];
        assert_eq!(
            insert_missing("{}", &fields).as_deref(),
            Some(r#"{"resultType":"complete","ttlMs":0}"#)
        );
        assert_eq!(
            insert_missing(" { \"ttlMs\" : 5 , \"a\":[1] } ", &fields).as_deref(),
            Some(r#"{"resultType":"complete","ttlMs" : 5 , "a":[1] } "#)
        );
        assert_eq!(
            insert_missing(r#"{"resultType":"x","ttlMs":1}"#, &fields),
            None
        );
        for bad in ["", "[]", "1", "{", r#"{"a":1} x"#, r#"{"a":}"#, "null"] {
            assert_eq!(insert_missing(bad, &fields), None, "{bad:?}");
        }
    }

    #[test]
    fn merge_meta_keeps_the_callers_keys_and_order() {
        let meta = [("p", r#""v""#), ("c", "{}")];
        let out = merge_meta(
            Some(r#"{"a":1,"_meta":{"c":{"x":1},"t":2},"b":[{"_meta":0}]}"#),
            &meta,
        )
        .unwrap();
        assert_eq!(
            out,
            r#"{"a":1,"_meta":{"t":2,"p":"v","c":{}},"b":[{"_meta":0}]}"#
        );
        assert_eq!(parse(&out)["_meta"], json!({"t":2,"p":"v","c":{}}));
        // A `_meta` that is not an object is replaced.
        assert_eq!(
            merge_meta(Some(r#"{"_meta":7}"#), &meta).as_deref(),
            Some(r#"{"_meta":{"p":"v","c":{}}}"#)
        );
        assert_eq!(
            merge_meta(Some("{}"), &meta).as_deref(),
            Some(r#"{"_meta":{"p":"v","c":{}}}"#)
        );
        // A repeated `_meta` gets the keys in each (issue 34: found by the
        // fuzz target, whose oracle keeps the last, as many readers do).
        assert_eq!(
            merge_meta(Some(r#"{"_meta":{"x":1},"a":2,"_meta":{"y":3}}"#), &meta).as_deref(),
            Some(r#"{"_meta":{"x":1,"p":"v","c":{}},"a":2,"_meta":{"y":3,"p":"v","c":{}}}"#)
        );
        assert_eq!(merge_meta(Some("[1]"), &meta), None);
        assert_eq!(merge_meta(Some("{\"a\":1"), &meta), None);
    }

    /// Values serde_json's `Value` refuses but RFC 8259 allows are members
    /// like any other, kept byte for byte (issue 34: the fuzz target stopped
    /// on `{"a":1e48188}`).
    #[test]
    fn values_beyond_what_serde_represents_are_kept_as_they_came() {
        for text in [r#"{"a":1e48188}"#, r#"{"a":"\ud800","b":-1e-999999}"#] {
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
            assert_eq!(
                insert_missing(text, &[("resultType", r#""complete""#)]),
                Some(format!(r#"{{"resultType":"complete",{}"#, &text[1..]))
            );
            let merged = merge_meta(Some(text), &[("p", "1")]).expect("an object");
            assert_eq!(
                merged,
                format!(r#"{},"_meta":{{"p":1}}}}"#, &text[..text.len() - 1])
            );
        }
        assert_eq!(
            member(r#"{"a":1e48188}"#, "a").map(|v| v.get()),
            Some("1e48188")
        );
        // A name must be a Unicode string: one that is not is no member.
        assert_eq!(insert_missing(r#"{"\ud800":1}"#, &[("a", "1")]), None);
    }

    #[test]
    fn keys_are_escaped_and_member_finds_top_level_only() {
        let out = insert_missing("{}", &[("a\"b", "1")]).unwrap();
        assert_eq!(parse(&out), json!({"a\"b": 1}));
        let text = r#"{"x":{"resultType":"no"},"resultType":"task"}"#;
        assert_eq!(
            member(text, "resultType").map(|v| v.get()),
            Some(r#""task""#)
        );
        assert_eq!(member(text, "y").map(|v| v.get()), None);
        assert_eq!(member("[]", "x").map(|v| v.get()), None);
    }

    proptest::proptest! {
        /// Whatever the input, the output is valid JSON with the fields set
        /// and every old member kept (nothing panics on input).
        #[test]
        fn edits_keep_valid_json(keys in proptest::collection::vec("[a-z_]{1,4}", 0..6), junk in ".{0,40}") {
            let mut obj = serde_json::Map::new();
            for (i, k) in keys.iter().enumerate() {
                obj.insert(k.clone(), json!(i));
            }
            let text = Value::Object(obj.clone()).to_string();
            if let Some(out) = insert_missing(&text, &[("resultType", r#""complete""#)]) {
                let v = parse(&out);
                proptest::prop_assert_eq!(&v["resultType"], &json!("complete"));
                for (k, val) in &obj {
                    proptest::prop_assert_eq!(&v[k], val);
                }
            } else {
                proptest::prop_assert!(obj.contains_key("resultType"));
            }
            let out = merge_meta(Some(&text), &[("p", "1")]).expect("an object");
            let v = parse(&out);
            proptest::prop_assert_eq!(&v["_meta"]["p"], &json!(1));
            let _ = insert_missing(&junk, &[("a", "1")]);
            let _ = merge_meta(Some(&junk), &[("a", "1")]);
        }
    }
}
