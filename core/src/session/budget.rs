//! Content budget for tool results (G9).
//!
//! A tool handler that may produce many items pushes them one at a time into a
//! [`ResultBudget`] and stops when it says [`PushError::Full`]; the budget then
//! builds the MCP tool result, whose **whole serialized size** (the
//! `{"content":[…],"structuredContent":{…}}` object, escaping included) never
//! passes `max_bytes`:
//!
//! ```json
//! {"content":[{"type":"text","text":"Returned 50 of 4,382 matching records. Use cursor \"eyJvZmZzZXQiOjUwfQ\" to continue."}],
//!  "structuredContent":{"items":[…],"nextCursor":"eyJvZmZzZXQiOjUwfQ","truncated":true,"totalEstimate":4382}}
//! ```
//!
//! (shown on two lines; the result is compact JSON.)
//!
//! Honesty rules:
//!
//! - The items are always a **prefix** of what was pushed, in order: once one
//!   item is refused, every later push is refused too, so the caller's
//!   continuation cursor (pointing at the first refused item) stays right.
//! - `truncated` is true iff an item was refused (or the caller said more
//!   exist, [`ResultBudget::mark_more_available`]).
//! - A total is stated (`"Returned 50 of 4,382 …"`, `totalEstimate`) only when
//!   the caller passes one; otherwise the text says `"Returned 50 matching
//!   records; more are available."`. `nextCursor` appears only when truncated.
//!
//! ## How the size is guaranteed
//!
//! Each item is serialized once, to the exact compact bytes that will appear
//! in the result. Before accepting items the budget reserves the largest
//! envelope `finish` could build: the summary text with the largest count and
//! total (both `18,446,744,073,709,551,615`), the longer noun form, the hint, a
//! cursor of [`BudgetConfig::max_cursor_bytes`] (counted twice: in the text
//! and in `nextCursor`), `"truncated":false` and `totalEstimate`. So an item
//! is accepted only if the result still fits whatever `finish` is told. The
//! reserve is 510 bytes with the defaults (256 of them for the cursor); [`ResultBudget::new`]
//! gives [`BudgetError::TooSmall`] when `max_bytes` cannot hold it.
//!
//! Memory: the accepted items, at most `max_bytes`; `finish` builds the
//! result in one more buffer of at most `max_bytes`.

use serde::de::IgnoredAny;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::wire::json::{compact_json_in_place, LimitedWriter};

/// Default limit on a continuation cursor's serialized (escaped) length: 128 bytes.
pub const DEFAULT_MAX_CURSOR_BYTES: usize = 128;

/// How the summary text is worded, and the cursor reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetConfig {
    noun_one: String,
    noun_many: String,
    hint: Option<String>,
    max_cursor_bytes: usize,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            noun_one: "matching record".to_owned(),
            noun_many: "matching records".to_owned(),
            hint: None,
            max_cursor_bytes: DEFAULT_MAX_CURSOR_BYTES,
        }
    }
}

impl BudgetConfig {
    /// The noun of the summary, singular and plural (default `"matching
    /// record"` / `"matching records"`).
    pub fn noun(&mut self, one: &str, many: &str) -> &mut Self {
        one.clone_into(&mut self.noun_one);
        many.clone_into(&mut self.noun_many);
        self
    }

    /// A sentence appended to the summary, for example `"Results are sorted
    /// by updated time."` (default none). Counted in the reserve.
    pub fn hint(&mut self, hint: &str) -> &mut Self {
        self.hint = Some(hint.to_owned());
        self
    }

    /// The longest continuation cursor `finish` accepts, measured as its
    /// serialized JSON string content (escapes counted, quotes not). Default
    /// [`DEFAULT_MAX_CURSOR_BYTES`] = 128. Reserved twice (text and
    /// `nextCursor`), so a larger value leaves less room for items.
    pub fn max_cursor_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_cursor_bytes = bytes;
        self
    }
}

/// The budget cannot hold even an empty result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// `max_bytes` is below the reserve for the envelope and summary.
    #[error("result budget of {max_bytes} bytes is below the {needed} bytes the envelope needs")]
    TooSmall {
        /// Bytes needed for the envelope, the summary text and the cursor reserve.
        needed: usize,
        /// The budget given.
        max_bytes: usize,
    },
}

/// Why an item was not added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The item does not fit (or an earlier one did not): the result is
    /// truncated here. Stop producing items.
    #[error("result budget is full")]
    Full,
    /// The item's `Serialize` implementation failed; nothing was added and
    /// the budget is unchanged.
    #[error("item failed to serialize: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The item serialized to bytes that are not valid JSON (possible only
    /// through a hand-written raw value); nothing was added.
    #[error("item is not valid JSON")]
    InvalidJson,
}

/// Why `finish` could not build the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FinishError {
    /// The cursor's serialized length passes [`BudgetConfig::max_cursor_bytes`].
    #[error("cursor of {bytes} bytes exceeds the reserved {max} bytes")]
    CursorTooLong {
        /// Serialized length of the cursor (escapes counted, quotes not).
        bytes: usize,
        /// The reserve.
        max: usize,
    },
}

/// Collects the items of one tool result under a byte budget.
///
/// Methods: [`try_push`](Self::try_push) /
/// [`try_push_raw`](Self::try_push_raw) until [`PushError::Full`], optionally
/// [`mark_more_available`](Self::mark_more_available), then
/// [`finish`](Self::finish).
#[derive(Debug, Clone)]
pub struct ResultBudget {
    config: BudgetConfig,
    max_bytes: usize,
    /// Bytes available to the items and their separating commas.
    item_capacity: usize,
    /// Accepted items, comma-separated, exactly as they appear in `items`.
    items: Vec<u8>,
    count: u64,
    refused: bool,
    more_available: bool,
}

impl ResultBudget {
    /// A budget of `max_bytes` for the whole serialized result, with the
    /// default wording.
    pub fn new(max_bytes: usize) -> Result<Self, BudgetError> {
        Self::with_config(max_bytes, &BudgetConfig::default())
    }

    /// A budget of `max_bytes` for the whole serialized result.
    pub fn with_config(max_bytes: usize, config: &BudgetConfig) -> Result<Self, BudgetError> {
        let needed = reserve(config);
        if needed > max_bytes {
            return Err(BudgetError::TooSmall { needed, max_bytes });
        }
        Ok(Self {
            config: config.clone(),
            max_bytes,
            item_capacity: max_bytes - needed,
            items: Vec::new(),
            count: 0,
            refused: false,
            more_available: false,
        })
    }

    /// Adds an item (any `Serialize` value; its compact JSON is what counts).
    ///
    /// Refused with [`PushError::Full`] if the result could then pass the
    /// budget, and always after a first refusal.
    pub fn try_push(&mut self, item: impl Serialize) -> Result<(), PushError> {
        self.push_with(|w| serde_json::to_writer(w, &item))
    }

    /// Adds an item given as raw JSON (whitespace outside strings is removed).
    pub fn try_push_raw(&mut self, item: &RawValue) -> Result<(), PushError> {
        self.push_with(|w| {
            use std::io::Write as _;
            w.write_all(item.get().as_bytes())
                .map_err(serde_json::Error::io)
        })
    }

    fn push_with(
        &mut self,
        write: impl FnOnce(&mut LimitedWriter<'_>) -> Result<(), serde_json::Error>,
    ) -> Result<(), PushError> {
        if self.refused {
            return Err(PushError::Full);
        }
        let start = self.items.len();
        if self.count > 0 {
            self.items.push(b',');
        }
        let body = self.items.len();
        let mut writer = LimitedWriter::new(&mut self.items, self.item_capacity);
        let written = write(&mut writer);
        let overflowed = writer.overflowed();
        if self.items.len() > self.item_capacity {
            // Only the separator can get here (the writer never passes the limit).
            self.items.truncate(start);
            self.refused = true;
            return Err(PushError::Full);
        }
        match written {
            Err(_) if overflowed => {
                self.items.truncate(start);
                self.refused = true;
                return Err(PushError::Full);
            }
            Err(e) => {
                self.items.truncate(start);
                return Err(PushError::Serialize(e));
            }
            Ok(()) => {}
        }
        compact_json_in_place(&mut self.items, body);
        let bytes = &self.items[body..];
        if std::str::from_utf8(bytes).is_err()
            || serde_json::from_slice::<IgnoredAny>(bytes).is_err()
        {
            self.items.truncate(start);
            return Err(PushError::InvalidJson);
        }
        self.count += 1;
        Ok(())
    }

    /// Marks the result truncated although nothing was refused (the caller
    /// stopped early and knows more items exist).
    pub fn mark_more_available(&mut self) {
        self.more_available = true;
    }

    /// Number of accepted items.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True if no item was accepted.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// True once an item was refused or more were marked available.
    pub fn is_truncated(&self) -> bool {
        self.refused || self.more_available
    }

    /// The whole budget.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Bytes still free for items (a further item also needs a comma).
    pub fn remaining_item_bytes(&self) -> usize {
        self.item_capacity - self.items.len()
    }

    /// Builds the result.
    ///
    /// `total` is the number of matching items, only if actually known;
    /// `next_cursor` is used only when the result is truncated. Its serialized
    /// length must not pass [`BudgetConfig::max_cursor_bytes`].
    pub fn finish(
        &self,
        total: Option<u64>,
        next_cursor: Option<&str>,
    ) -> Result<BudgetedResult, FinishError> {
        let truncated = self.is_truncated();
        let cursor = next_cursor.filter(|_| truncated);
        if let Some(c) = cursor {
            let bytes = escaped_len(c);
            if bytes > self.config.max_cursor_bytes {
                return Err(FinishError::CursorTooLong {
                    bytes,
                    max: self.config.max_cursor_bytes,
                });
            }
        }
        let noun = match total {
            Some(t) => self.noun(t),
            None => self.noun(self.count),
        };
        let text = summary_text(
            self.count,
            total,
            truncated,
            cursor,
            self.config.hint.as_deref(),
            noun,
        );
        let out = render(&self.items, &text, cursor, truncated, total);
        debug_assert!(out.len() <= self.max_bytes, "reserve covers the envelope");
        // Items were validated at push; the envelope is built here from escaped strings.
        let json = String::from_utf8(out).expect("all parts are UTF-8");
        let json = RawValue::from_string(json).expect("all parts are valid JSON");
        Ok(BudgetedResult {
            json,
            returned: self.count,
            truncated,
        })
    }

    fn noun(&self, n: u64) -> &str {
        if n == 1 {
            &self.config.noun_one
        } else {
            &self.config.noun_many
        }
    }
}

/// A finished tool result: `{"content":[…],"structuredContent":{…}}`.
///
/// Serializes as that JSON object, verbatim, so it can be the `result` of a
/// JSON-RPC response.
#[derive(Debug, Clone)]
pub struct BudgetedResult {
    json: Box<RawValue>,
    returned: u64,
    truncated: bool,
}

impl BudgetedResult {
    /// The result JSON.
    pub fn as_raw(&self) -> &RawValue {
        &self.json
    }

    /// The result JSON, owned (ready for a JSON-RPC response).
    pub fn into_raw(self) -> Box<RawValue> {
        self.json
    }

    /// Its size in bytes (at most the budget).
    pub fn len(&self) -> usize {
        self.json.get().len()
    }

    /// Always false: a result has at least its envelope.
    pub fn is_empty(&self) -> bool {
        self.json.get().is_empty()
    }

    /// Number of items returned.
    pub fn returned(&self) -> u64 {
        self.returned
    }

    /// Whether the result says `truncated: true`.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl Serialize for BudgetedResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

/// The largest envelope `finish` can build, items excluded.
///
/// The count and the total are reserved at `u64::MAX` (26 characters with
/// separators), so the reserve does not depend on `max_bytes`. JSON escaping
/// is per character, so a cursor adds exactly its escaped
/// length to the text and again to `nextCursor`: the reserve renders an empty
/// cursor and adds `2 × max_cursor_bytes` instead of building a long one.
fn reserve(config: &BudgetConfig) -> usize {
    let mut worst = 0;
    for truncated in [false, true] {
        for total in [None, Some(u64::MAX)] {
            for noun in [&config.noun_one, &config.noun_many] {
                let c = truncated.then_some("");
                let text =
                    summary_text(u64::MAX, total, truncated, c, config.hint.as_deref(), noun);
                let mut len = render(b"", &text, c, truncated, total).len();
                if truncated {
                    len = len.saturating_add(config.max_cursor_bytes.saturating_mul(2));
                }
                worst = worst.max(len);
            }
        }
    }
    worst
}

fn summary_text(
    count: u64,
    total: Option<u64>,
    truncated: bool,
    cursor: Option<&str>,
    hint: Option<&str>,
    noun: &str,
) -> String {
    let n = thousands(count);
    let mut text = match total {
        Some(t) => format!("Returned {n} of {} {noun}.", thousands(t)),
        None if truncated => format!("Returned {n} {noun}; more are available."),
        None => format!("Returned {n} {noun}."),
    };
    if let Some(hint) = hint {
        text.push(' ');
        text.push_str(hint);
    }
    if let Some(c) = cursor {
        text.push_str(" Use cursor \"");
        text.push_str(c);
        text.push_str("\" to continue.");
    }
    text
}

fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a str into a Vec cannot fail.
    serde_json::to_writer(&mut *out, s).expect("str into Vec");
}

fn escaped_len(s: &str) -> usize {
    let mut buf = Vec::with_capacity(s.len() + 2);
    push_json_str(&mut buf, s);
    buf.len() - 2
}

fn render(
    items: &[u8],
    text: &str,
    cursor: Option<&str>,
    truncated: bool,
    total: Option<u64>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.len() + text.len() + 128);
    out.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    push_json_str(&mut out, text);
    out.extend_from_slice(br#"}],"structuredContent":{"items":["#);
    out.extend_from_slice(items);
    out.push(b']');
    if let Some(c) = cursor {
        out.extend_from_slice(br#","nextCursor":"#);
        push_json_str(&mut out, c);
    }
    out.extend_from_slice(if truncated {
        br#","truncated":true"#.as_slice()
    } else {
        br#","truncated":false"#.as_slice()
    });
    if let Some(t) = total {
        out.extend_from_slice(br#","totalEstimate":"#);
        out.extend_from_slice(t.to_string().as_bytes());
    }
    out.extend_from_slice(b"}}");
    out
}

/// `4382` → `"4,382"`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn parse(r: &BudgetedResult) -> Value {
        serde_json::from_str(r.as_raw().get()).expect("valid JSON")
    }

    fn text_of(v: &Value) -> &str {
        v["content"][0]["text"].as_str().expect("text block")
    }

    #[test]
    fn g9_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(4382), "4,382");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn g9_seed_example_shape() {
        let mut config = BudgetConfig::default();
        config.hint("Results are sorted by updated time.");
        let mut budget = ResultBudget::with_config(8192, &config).expect("fits");
        let item =
            json!({"path": "src/auth.ts", "line": 18, "summary": "reads token from environment"});
        let mut pushed = 0;
        while budget.try_push(&item).is_ok() {
            pushed += 1;
        }
        assert!(pushed > 10);
        let r = budget
            .finish(Some(4382), Some("eyJvZmZzZXQiOjUwfQ"))
            .expect("cursor fits");
        assert!(r.len() <= 8192);
        let v = parse(&r);
        assert_eq!(
            text_of(&v),
            format!(
                "Returned {pushed} of 4,382 matching records. Results are sorted by updated time. Use cursor \"eyJvZmZzZXQiOjUwfQ\" to continue."
            )
        );
        assert_eq!(v["content"][0]["type"], "text");
        let sc = &v["structuredContent"];
        assert_eq!(sc["items"].as_array().map(Vec::len), Some(pushed));
        assert_eq!(sc["items"][0], item);
        assert_eq!(sc["nextCursor"], "eyJvZmZzZXQiOjUwfQ");
        assert_eq!(sc["truncated"], true);
        assert_eq!(sc["totalEstimate"], 4382);
        let keys: Vec<&String> = sc.as_object().expect("object").keys().collect();
        assert_eq!(keys.len(), 4);
    }

    #[test]
    fn g9_no_invented_total_or_cursor() {
        let mut budget = ResultBudget::new(1000).expect("fits");
        for i in 0..3 {
            budget.try_push(i).expect("fits");
        }
        // Complete result: no cursor even if one is offered, no total.
        let r = budget.finish(None, Some("ignored")).expect("ok");
        let v = parse(&r);
        assert_eq!(text_of(&v), "Returned 3 matching records.");
        assert_eq!(
            v["structuredContent"],
            json!({"items": [0, 1, 2], "truncated": false})
        );
        assert_eq!(
            r.as_raw().get(),
            r#"{"content":[{"type":"text","text":"Returned 3 matching records."}],"structuredContent":{"items":[0,1,2],"truncated":false}}"#
        );
        // Known to be incomplete, total unknown.
        budget.mark_more_available();
        let r = budget.finish(None, Some("c2")).expect("ok");
        let v = parse(&r);
        assert_eq!(
            text_of(&v),
            "Returned 3 matching records; more are available. Use cursor \"c2\" to continue."
        );
        assert_eq!(
            v["structuredContent"],
            json!({"items": [0, 1, 2], "nextCursor": "c2", "truncated": true})
        );
        assert!(r.truncated());
        assert_eq!(r.returned(), 3);
    }

    #[test]
    fn g9_noun_is_configurable_and_singular_for_one() {
        let mut config = BudgetConfig::default();
        config.noun("file", "files");
        let mut budget = ResultBudget::with_config(1000, &config).expect("fits");
        budget.try_push("a.txt").expect("fits");
        let v = parse(&budget.finish(None, None).expect("ok"));
        assert_eq!(text_of(&v), "Returned 1 file.");
        let v = parse(&budget.finish(Some(12_000), None).expect("ok"));
        assert_eq!(text_of(&v), "Returned 1 of 12,000 files.");
    }

    #[test]
    fn g9_budget_too_small_for_envelope_is_a_typed_error() {
        match ResultBudget::new(100) {
            Err(BudgetError::TooSmall { needed, max_bytes }) => {
                assert_eq!(max_bytes, 100);
                assert!(needed > 100);
                // Exactly the reserve works, with room for no item.
                let mut b = ResultBudget::new(needed).expect("exact fit");
                assert!(matches!(b.try_push(0), Err(PushError::Full)));
                let r = b
                    .finish(Some(u64::MAX), Some(&"\"".repeat(64)))
                    .expect("fits");
                assert!(r.len() <= needed);
            }
            other => panic!("{other:?}"),
        }
        let mut config = BudgetConfig::default();
        config.max_cursor_bytes(usize::MAX);
        assert!(matches!(
            ResultBudget::with_config(4096, &config),
            Err(BudgetError::TooSmall { .. })
        ));
    }

    /// The reserve is not wasteful and not short: with 1-byte items and the
    /// largest total and cursor, the result lands within the count's slack
    /// (a `u64::MAX` count is reserved; 26 characters with separators) of the
    /// budget, and never past it.
    #[test]
    fn g9_budget_is_filled_to_within_the_count_slack() {
        for max in [600, 1000, 4096, 65_536] {
            let mut budget = ResultBudget::new(max).expect("fits");
            let mut i = 0u64;
            while budget.try_push(i % 10).is_ok() {
                i += 1;
            }
            let cursor = "\"\"".repeat(DEFAULT_MAX_CURSOR_BYTES / 4); // escapes to 128
            let r = budget.finish(Some(u64::MAX), Some(&cursor)).expect("fits");
            assert!(r.len() <= max, "{} > {max}", r.len());
            assert!(r.len() + 26 >= max, "{} wastes too much of {max}", r.len());
        }
    }

    #[test]
    fn g9_refusal_is_sticky_so_items_stay_a_prefix() {
        let mut budget = ResultBudget::new(1000).expect("fits");
        budget.try_push("small").expect("fits");
        assert!(matches!(
            budget.try_push("x".repeat(2000)),
            Err(PushError::Full)
        ));
        // A smaller item after a refusal is refused too.
        assert!(matches!(budget.try_push("tiny"), Err(PushError::Full)));
        let v = parse(&budget.finish(None, None).expect("ok"));
        assert_eq!(v["structuredContent"]["items"], json!(["small"]));
        assert_eq!(v["structuredContent"]["truncated"], true);
    }

    #[test]
    fn g9_cursor_over_reserve_is_a_typed_error() {
        let mut budget = ResultBudget::new(1000).expect("fits");
        budget.mark_more_available();
        let long = "\\".repeat(65); // escapes to 130 bytes
        assert_eq!(
            budget.finish(None, Some(&long)).expect_err("too long"),
            FinishError::CursorTooLong {
                bytes: 130,
                max: DEFAULT_MAX_CURSOR_BYTES
            }
        );
        assert!(budget.finish(None, Some(&"\\".repeat(64))).is_ok());
    }

    #[test]
    fn g9_serialize_failure_leaves_budget_unchanged() {
        use std::collections::BTreeMap;
        let mut budget = ResultBudget::new(1000).expect("fits");
        budget.try_push(1).expect("fits");
        let mut bad = BTreeMap::new();
        bad.insert(vec![1u8], 2); // non-string map keys do not serialize to JSON
        assert!(matches!(
            budget.try_push(&bad),
            Err(PushError::Serialize(_))
        ));
        assert!(!budget.is_truncated());
        budget.try_push(2).expect("fits");
        let v = parse(&budget.finish(None, None).expect("ok"));
        assert_eq!(v["structuredContent"]["items"], json!([1, 2]));
    }

    #[test]
    fn g9_raw_items_are_compacted_and_checked() {
        let mut budget = ResultBudget::new(1000).expect("fits");
        let raw = RawValue::from_string("{ \"a\" :\n [1, 2] }".to_owned()).expect("valid");
        budget.try_push_raw(&raw).expect("fits");
        let r = budget.finish(None, None).expect("ok");
        assert!(r.as_raw().get().contains(r#""items":[{"a":[1,2]}]"#));
        assert!(!r.as_raw().get().contains('\n'));
    }

    #[test]
    fn g9_result_serializes_verbatim() {
        let budget = ResultBudget::new(1000).expect("fits");
        let r = budget.finish(None, None).expect("ok");
        #[derive(Serialize)]
        struct Response<'a> {
            result: &'a BudgetedResult,
        }
        let wrapped = serde_json::to_string(&Response { result: &r }).expect("ok");
        assert_eq!(wrapped, format!("{{\"result\":{}}}", r.as_raw().get()));
    }

    /// Strings rich in escapes and multi-byte characters.
    fn nasty_string() -> impl Strategy<Value = String> {
        let chars = vec![
            '"', '\\', '\n', '\r', '\t', '\u{0}', '\u{1}', '\u{1f}', '\u{7f}', '/', 'a', 'Z', ' ',
            'é', '中', '文', '😀', '🦀', '\u{2028}', '\u{feff}',
        ];
        proptest::collection::vec(proptest::sample::select(chars), 0..40)
            .prop_map(|v| v.into_iter().collect())
    }

    fn item() -> impl Strategy<Value = Value> {
        prop_oneof![
            (0u8..10).prop_map(|n| json!(n)),
            nasty_string().prop_map(Value::String),
            (nasty_string(), any::<u32>(), nasty_string())
                .prop_map(|(p, l, s)| json!({"path": p, "line": l, "summary": s})),
            proptest::collection::vec(nasty_string(), 0..4).prop_map(|v| json!(v)),
            any::<i64>().prop_map(|n| json!(n)),
        ]
    }

    proptest! {
        #[test]
        fn g9_result_never_exceeds_budget(
            items in proptest::collection::vec(item(), 0..60),
            extra in 0usize..3000,
            total in proptest::option::of(prop_oneof![Just(u64::MAX), any::<u64>()]),
            cursor in proptest::option::of(nasty_string()),
            hint in proptest::option::of(nasty_string()),
            more in any::<bool>(),
            tight_cursor in any::<bool>(),
        ) {
            let mut config = BudgetConfig::default();
            if let Some(h) = &hint {
                config.hint(h);
            }
            // A cursor reserve of exactly the cursor's size leaves no slack there.
            if let (true, Some(c)) = (tight_cursor, &cursor) {
                config.max_cursor_bytes(escaped_len(c));
            }
            let needed = match ResultBudget::with_config(0, &config) {
                Err(BudgetError::TooSmall { needed, .. }) => needed,
                other => panic!("{other:?}"),
            };
            // Just below the reserve is refused.
            let below = ResultBudget::with_config(needed - 1, &config);
            prop_assert!(matches!(below, Err(BudgetError::TooSmall { .. })), "below the reserve");
            let max = needed + extra;
            let mut budget = ResultBudget::with_config(max, &config).expect("above the reserve");
            let mut accepted = 0;
            let mut refused_once = false;
            for it in &items {
                match budget.try_push(it) {
                    Ok(()) => {
                        prop_assert!(!refused_once, "accepted after a refusal");
                        accepted += 1;
                    }
                    Err(PushError::Full) => refused_once = true,
                    Err(e) => panic!("{e}"),
                }
            }
            prop_assert_eq!(budget.len(), accepted as u64);
            if more {
                budget.mark_more_available();
            }
            let result = match budget.finish(total, cursor.as_deref()) {
                Ok(r) => r,
                Err(FinishError::CursorTooLong { bytes, max: limit }) => {
                    prop_assert!(bytes > limit);
                    return Ok(());
                }
            };
            prop_assert!(result.len() <= max, "{} > {}", result.len(), max);
            let v = parse(&result);
            let sc = &v["structuredContent"];
            // Order preserved: the items are exactly the accepted prefix.
            prop_assert_eq!(sc["items"].as_array().expect("items"), &items[..accepted].to_vec());
            let refused = accepted < items.len();
            prop_assert_eq!(sc["truncated"].as_bool(), Some(refused || more));
            prop_assert_eq!(result.truncated(), refused || more);
            prop_assert_eq!(
                sc.get("nextCursor").and_then(Value::as_str),
                if refused || more { cursor.as_deref() } else { None }
            );
            prop_assert_eq!(sc.get("totalEstimate").and_then(Value::as_u64), total);
            let text = text_of(&v);
            let returned = format!("Returned {} ", thousands(accepted as u64));
            prop_assert!(text.starts_with(&returned), "{}", text);
            prop_assert_eq!(text.contains(" of "), total.is_some());
        }
    }
}
