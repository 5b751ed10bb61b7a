//! What the proxy reads out of a message beyond its envelope: a tool's
//! name, a request's `_meta`, a progress token, a cancelled id, a result's
//! `resultType`. Each parses only the fields it names (a substring test
//! first where a large message may lack them).

use super::{MAX_TASK_ID_BYTES, MAX_VERSION_BYTES};
use crate::wire::message::{Id, RawValue};

pub(super) fn tool_name(params: Option<&RawValue>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct P {
        name: String,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.name)
}

/// A prompt's name (`prompts/get`) or a resource's URI (`resources/read`,
/// `/subscribe`, `/unsubscribe`) for the request's span, cut to
/// [`MAX_SPAN_TARGET_BYTES`](crate::guard::trace::MAX_SPAN_TARGET_BYTES).
pub(super) fn span_target(
    method: &str,
    params: Option<&RawValue>,
) -> Option<crate::guard::trace::SpanTarget> {
    use crate::guard::trace::{SpanTarget, MAX_SPAN_TARGET_BYTES};
    #[derive(serde::Deserialize)]
    struct P<'a> {
        #[serde(default, borrow)]
        name: Option<std::borrow::Cow<'a, str>>,
        #[serde(default, borrow)]
        uri: Option<std::borrow::Cow<'a, str>>,
    }
    let cut = |s: &str| {
        let mut end = s.len().min(MAX_SPAN_TARGET_BYTES);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_owned()
    };
    let prompt = method == "prompts/get";
    if !prompt
        && !matches!(
            method,
            "resources/read" | "resources/subscribe" | "resources/unsubscribe"
        )
    {
        return None;
    }
    let p = serde_json::from_str::<P<'_>>(params?.get()).ok()?;
    if prompt {
        p.name.map(|n| SpanTarget::Prompt(cut(&n)))
    } else {
        p.uri.map(|u| SpanTarget::Resource(cut(&u)))
    }
}

/// Whether a tool result says `isError: true` (a substring test first, so a
/// large result without the key is not parsed).
pub(super) fn is_tool_error(result: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct R {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    memchr::memmem::find(result.as_bytes(), b"\"isError\"").is_some()
        && serde_json::from_str::<R>(result).is_ok_and(|r| r.is_error)
}

/// What the guard reads from a host request's params beyond its method: only
/// looked for when the text can hold it (a substring test first), so a
/// large request without these keys is not parsed twice.
#[derive(Debug, Default)]
pub(super) struct RequestContext {
    pub(super) progress_token: Option<Id>,
    pub(super) protocol_version: Option<String>,
    pub(super) request_state: Option<u64>,
    pub(super) task_id: Option<String>,
    /// Its `_meta.traceparent`, when valid.
    pub(super) traceparent: Option<crate::guard::trace::TraceContext>,
}

pub(super) fn request_context(params: Option<&RawValue>) -> RequestContext {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "progressToken", default, borrow)]
        progress_token: Option<&'a RawValue>,
        #[serde(rename = "io.modelcontextprotocol/protocolVersion", default, borrow)]
        protocol_version: Option<std::borrow::Cow<'a, str>>,
        #[serde(default, borrow)]
        traceparent: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", default, borrow)]
        meta: Option<Meta<'a>>,
        #[serde(rename = "requestState", default, borrow)]
        request_state: Option<std::borrow::Cow<'a, str>>,
        #[serde(rename = "taskId", default, borrow)]
        task_id: Option<std::borrow::Cow<'a, str>>,
    }
    let Some(text) = params.map(RawValue::get) else {
        return RequestContext::default();
    };
    let has = |key: &[u8]| memchr::memmem::find(text.as_bytes(), key).is_some();
    if !has(b"\"_meta\"") && !has(b"\"requestState\"") && !has(b"\"taskId\"") {
        return RequestContext::default();
    }
    let Ok(p) = serde_json::from_str::<Params<'_>>(text) else {
        return RequestContext::default();
    };
    let meta = p.meta.as_ref();
    RequestContext {
        progress_token: meta
            .and_then(|m| m.progress_token)
            .and_then(|t| serde_json::from_str::<Id>(t.get()).ok()),
        protocol_version: meta
            .and_then(|m| m.protocol_version.as_deref())
            .filter(|v| v.len() <= MAX_VERSION_BYTES)
            .map(str::to_owned),
        request_state: p.request_state.as_deref().map(link_hash),
        task_id: p
            .task_id
            .filter(|t| t.len() <= MAX_TASK_ID_BYTES)
            .map(|t| t.into_owned()),
        traceparent: meta
            .and_then(|m| m.traceparent.as_deref())
            .and_then(crate::guard::trace::TraceContext::parse),
    }
}

/// A short, stable digest that links the records of one multi-round-trip
/// request (its `requestState`); FNV-1a, 64 bits: a link, not a proof.
pub(super) fn link_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The token of a `notifications/progress`.
pub(super) fn progress_token(params: Option<&RawValue>) -> Option<Id> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct P {
        progress_token: Id,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.progress_token)
}

/// The `resultType` of a result when it is not `"complete"`: read at the
/// first `"resultType"` key in the text (where every known server puts it,
/// at the top level), confirmed on the whole top level only then, so a
/// large ordinary result costs one substring search.
pub(super) fn special_result_type(result: &str) -> Option<String> {
    let at = memchr::memmem::find(result.as_bytes(), b"\"resultType\"")?;
    let rest = result[at + 12..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    if rest.starts_with("\"complete\"") {
        return None;
    }
    let value = crate::wire::object::member(result, "resultType")?;
    let kind: String = serde_json::from_str(value.get()).ok()?;
    (kind != "complete" && kind.len() <= MAX_VERSION_BYTES).then_some(kind)
}

pub(super) fn cancelled_id(params: Option<&RawValue>) -> Option<Id> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct P {
        request_id: Id,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.request_id)
}

/// An id as JSON text: `5` or `"abc"`.
pub(super) fn id_json(id: &Id) -> String {
    match id {
        Id::Number(n) => n.to_string(),
        Id::String(s) => serde_json::to_string(s).unwrap_or_default(),
    }
}
