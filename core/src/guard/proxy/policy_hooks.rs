//! The proxy's hooks for the guard's tool policies
//! (`crate::guard::policy`): a `tools/call` a policy refuses, and a
//! server's answer to a `tools/list` the tool filter edits. The decisions
//! are the policy's; these answer through the proxy's own paths (records,
//! notes, messages for the host within the wire limit).

use super::{tool_name, State};
use crate::records::call::CallOutcome;
use crate::time::Stamp;
use crate::wire::message::{encode_error, encode_result, Id, RawValue, Request};

impl State {
    /// A `tools/call` (or `prompts/get`, `resources/read`,
    /// `resources/subscribe`) a policy refuses is answered with its error
    /// and recorded as denied; it never reaches the server. True when
    /// refused.
    pub(super) fn policy_refuses(&mut self, at: Stamp, r: &Request, text: &str) -> bool {
        let Some(policy) = self.policy.as_mut() else {
            return false;
        };
        let params = r.params.as_deref().map(RawValue::get);
        let (tool, verdict) = if r.method == "tools/call" {
            let tool = tool_name(r.params.as_deref()).unwrap_or_default();
            let arguments = params.and_then(|p| crate::wire::object::member(p, "arguments"));
            let verdict = policy.check_call(&tool, arguments.map(|a| a.get()), Some(at.instant));
            (tool, verdict)
        } else {
            (r.method.clone(), policy.check_request(&r.method, params))
        };
        let Err(err) = verdict else {
            return false;
        };
        self.metrics.policy = Some(policy.metrics().clone());
        self.record_denied(
            at,
            r,
            text,
            &tool,
            err.code,
            &format!(
                "refused by the guard's policy; the host got error {}: {}",
                err.code, err.message
            ),
        );
        self.note(format!(
            "mcp-stdio guard: {} {} refused: {}",
            r.method,
            r.id,
            err.message.trim_start_matches("mcp-stdio guard: ")
        ));
        match encode_error(Some(&r.id), &err, self.framing.get_max_frame()) {
            Ok(bytes) => self.send_host_message(Some(r.id.clone()), bytes),
            Err(_) => self.reply_error(Some(&r.id), err.code, err.message),
        }
        true
    }

    /// A server's result for a `tools/list` the tool filter edits: the
    /// tools outside `--tools` / `--deny-tool` taken out (the cursor kept),
    /// the call completed here, the host given the edited result (true).
    /// As it came (nothing to take out, not a list): the usual path (false).
    pub(super) fn policy_answers_list(
        &mut self,
        at: Stamp,
        id: &Id,
        result: Option<&str>,
        text: &str,
    ) -> bool {
        let (Some(result), Some(policy)) = (result, self.policy.as_mut()) else {
            return false;
        };
        let Some(listed) = self.tracked.get(id).and_then(|t| t.policy_list) else {
            return false;
        };
        let (filtered, warning) = policy.filter_list(listed, result);
        self.metrics.policy = Some(policy.metrics().clone());
        if let Some(w) = warning {
            self.note(w);
        }
        let Some(filtered) = filtered else {
            return false;
        };
        let max = self.framing.get_max_frame();
        let Some(bytes) = RawValue::from_string(filtered)
            .ok()
            .and_then(|raw| encode_result(id, &raw, max).ok())
        else {
            return false;
        };
        self.metrics.responses += 1;
        let Some(call) = self.untrack(id) else {
            return false;
        };
        let note = format!(
            "result of {} bytes; the host got it without the {} the policy hides ({} bytes)",
            text.len(),
            listed.policy(),
            bytes.len()
        );
        self.complete(at, call, CallOutcome::Succeeded, &note);
        self.send_host_message(Some(id.clone()), bytes);
        true
    }

    /// A server's `tools/call` result the content limit edits: the line
    /// for the host (the frame copied once with the edits spliced in) and
    /// what was cut, for the call's record. `None`: as it came (within the
    /// limit, not a tool result, or an edit that would not fit the wire
    /// limit).
    pub(super) fn policy_cuts_result(
        &mut self,
        id: &Id,
        result: Option<&str>,
        text: &str,
    ) -> Option<(Vec<u8>, String)> {
        let result = result?;
        if !self.tracked.get(id).is_some_and(|t| t.policy_result) {
            return None;
        }
        let policy = self.policy.as_mut()?;
        let edit = policy.edit_result(result)?;
        let limit = policy.get_content_limit().map_or(0, |c| c.max());
        self.metrics.policy = Some(policy.metrics().clone());
        let max = self.framing.get_max_frame();
        let mut bytes = match crate::guard::policy::offset_in(text, result) {
            // The result lies in the frame: the frame edited, one copy.
            Some(at) => edit.apply_within(text, at).into_bytes(),
            None => {
                let raw = RawValue::from_string(edit.apply(result)).ok()?;
                let mut line = encode_result(id, &raw, max).ok()?;
                line.pop();
                line
            }
        };
        if bytes.len() > max {
            return None;
        }
        bytes.push(b'\n');
        Some((bytes, edit.summary().describe(limit)))
    }
}
