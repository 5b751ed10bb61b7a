//! The proxy's hooks for pinned tool definitions (`crate::guard::pin`): a
//! host request the pins refuse, a server's answer to a `tools/list`, and
//! the server's `notifications/tools/list_changed`. The decisions are the
//! pin machine's; these answer through the proxy's own paths (records,
//! notes, messages for the host within the wire limit, with the request's
//! id as it was).

use super::{id_json, tool_name, State};
use crate::guard::pin::{ListAnswer, ListRequest, PinCheck, TOOLS_LIST_CHANGED};
use crate::records::call::{CallIdentity, CallLifecycle, CallOutcome};
use crate::time::Stamp;
use crate::wire::frame::Utf8Repair;
use crate::wire::message::{
    encode_error, encode_result, ErrorObject, Id, RawValue, Request, SERVER_ERROR,
};

/// The method that lists tools.
const TOOLS_LIST: &str = "tools/list";

/// What a `tools/list` request asks for, when the pins are on (kept with
/// the request while it is in flight).
pub(super) fn list_request(
    pins: Option<&PinCheck>,
    method: &str,
    params: Option<&RawValue>,
) -> Option<ListRequest> {
    (pins.is_some() && method == TOOLS_LIST).then(|| ListRequest::of(params))
}

impl State {
    /// A host request the pins refuse — a `tools/call` the policy refuses,
    /// or a `tools/list` the proxy cannot track now (its answer could not
    /// be checked) — is answered with an error and recorded as denied; it
    /// never reaches the server. True when refused.
    pub(super) fn pin_refuses(&mut self, at: Stamp, r: &Request, text: &str) -> bool {
        let Some(pins) = self.pins.as_mut() else {
            return false;
        };
        let tool = (r.method == "tools/call")
            .then(|| tool_name(r.params.as_deref()))
            .flatten();
        let err = if r.method == "tools/call" {
            let Some(err) = pins.refuse_call(tool.as_deref()) else {
                return false;
            };
            self.metrics.pins = Some(pins.metrics().clone());
            err
        } else if r.method == TOOLS_LIST
            && (self.tracked.len() >= self.config.max_tracked || self.tracked.contains_key(&r.id))
        {
            ErrorObject::new(
                SERVER_ERROR,
                format!(
                    "the guard cannot check this tools/list answer against the pinned tool definitions now ({} requests in flight, or id {} already is); retry",
                    self.tracked.len(),
                    r.id
                ),
            )
        } else {
            return false;
        };
        self.record_denied(
            at,
            r,
            text,
            tool.as_deref().unwrap_or(&r.method),
            err.code,
            &format!(
                "refused by the guard (pinned tool definitions); the host got error {}: {}",
                err.code, err.message
            ),
        );
        self.note(format!(
            "mcp-stdio guard: {} {} refused: {}",
            r.method, r.id, err.message
        ));
        self.pin_reply(&r.id, err);
        true
    }

    /// A host request refused before dispatch (by the pins or a policy):
    /// its record, `denied`, with the request's size and why.
    pub(super) fn record_denied(
        &mut self,
        at: Stamp,
        r: &Request,
        text: &str,
        operation: &str,
        code: i64,
        why: &str,
    ) {
        let seq = self.next_call;
        self.next_call += 1;
        let call_id = format!("{seq}/{}", id_json(&r.id));
        // With spans on, the refusal is a span too, its error the code the
        // host got (ended with the record, below).
        if let Some(spans) = self.spans.as_mut() {
            let parent = super::fields::request_context(r.params.as_deref()).traceparent;
            let start = crate::guard::trace::SpanStart {
                context: spans.ids.child_of(parent.as_ref()),
                parent,
                method: r.method.clone(),
                tool: (r.method == "tools/call").then(|| operation.to_owned()),
                target: super::span_target(&r.method, r.params.as_deref()),
                request_id: id_json(&r.id),
                protocol_version: self.protocol_version.clone(),
                request_bytes: text.len() as u64,
            };
            spans.open(&call_id, start, at.unix_ms);
            spans.answered(&call_id, Some(code), 0, false, false);
        }
        let mut call = CallLifecycle::new(
            &self.call,
            CallIdentity {
                call_id: &call_id,
                session_id: &self.config.session_id,
                operation,
                target: &self.config.target,
            },
            at.unix_ms,
        );
        // Refused before dispatch: each step is legal from the one before.
        let _ = call.validate(at);
        let _ = call.deny(at);
        call.note(
            at.unix_ms,
            &format!("{} request of {} bytes", r.method, text.len()),
        );
        call.note(at.unix_ms, why);
        self.push_record(call.record().clone());
    }

    /// A server's result for a tracked `tools/list`: checked against the
    /// pins. As it came, its notes go on the call and the usual path goes
    /// on (false); otherwise the call is completed here and the host gets
    /// the result without the hidden tools, or an error (true).
    pub(super) fn pin_answers_list(
        &mut self,
        at: Stamp,
        id: &Id,
        result: Option<&str>,
        text: &str,
        repair: Option<Utf8Repair>,
    ) -> bool {
        let (Some(result), Some(pins)) = (result, self.pins.as_mut()) else {
            return false;
        };
        let Some(request) = self.tracked.get(id).and_then(|t| t.pin_list) else {
            return false;
        };
        let verdict = pins.check_list(request, result, at.unix_ms);
        self.metrics.pins = Some(pins.metrics().clone());
        for line in verdict.lines {
            self.note(line);
        }
        if verdict.answer == ListAnswer::Forward {
            if let Some(t) = self.tracked.get_mut(id) {
                for note in &verdict.notes {
                    t.call.note(at.unix_ms, note);
                }
            }
            return false;
        }
        self.metrics.responses += 1;
        let Some(mut call) = self.untrack(id) else {
            return false;
        };
        for note in &verdict.notes {
            call.note(at.unix_ms, note);
        }
        let mut note = format!("result of {} bytes", text.len());
        if let Some(r) = repair {
            note.push_str(&format!(
                "; invalid UTF-8 repaired: {} sequence(s) replaced with U+FFFD",
                r.replaced
            ));
        }
        let max = self.framing.get_max_frame();
        let (replaced, refusal) = match verdict.answer {
            ListAnswer::Replace(new) => (
                RawValue::from_string(new)
                    .ok()
                    .and_then(|raw| encode_result(id, &raw, max).ok()),
                None,
            ),
            ListAnswer::Refuse(err) => (None, Some(err)),
            ListAnswer::Forward => (None, None),
        };
        if let Some(bytes) = replaced {
            note.push_str(&format!(
                "; the host got it without the tools the pins hide ({} bytes)",
                bytes.len()
            ));
            self.complete(at, call, CallOutcome::Succeeded, &note);
            self.send_host_message(Some(id.clone()), bytes);
        } else {
            let err = refusal.unwrap_or_else(|| {
                ErrorObject::new(
                    SERVER_ERROR,
                    "the tools/list result without the tools the pins hide could not be encoded",
                )
            });
            note.push_str(&format!("; the host got error {}", err.code));
            self.complete(at, call, CallOutcome::LocalFailure, &note);
            self.pin_reply(id, err);
        }
        true
    }

    /// A server notification: `notifications/tools/list_changed` is noted
    /// (the next `tools/list` answer is checked as any other); it is
    /// forwarded by the caller.
    pub(super) fn pin_notification(&mut self, method: &str) {
        if method != TOOLS_LIST_CHANGED {
            return;
        }
        let Some(pins) = self.pins.as_mut() else {
            return;
        };
        let line = pins.on_list_changed();
        self.metrics.pins = Some(pins.metrics().clone());
        self.note(line);
    }

    /// Answers `id` with a refusal of the pins, within the wire limit: a
    /// refusal too long for it goes without its list of changes.
    fn pin_reply(&mut self, id: &Id, err: ErrorObject) {
        match encode_error(Some(id), &err, self.framing.get_max_frame()) {
            Ok(bytes) => self.send_host_message(Some(id.clone()), bytes),
            Err(_) => self.reply_error(
                Some(id),
                err.code,
                "refused by the guard's pinned tool definitions (the details are on its stderr)"
                    .to_owned(),
            ),
        }
    }
}
