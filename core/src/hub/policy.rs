//! The tool policies in the hub (`guard --share` with `--tools`,
//! `--deny-tool`, `--rate-limit`, `--repeat-limit`, `--max-result-text`):
//! each session has its own copy of them, so each is limited as if it had
//! the server alone (its own rate buckets, its own loop brake). The
//! decisions are the policy's (`crate::guard::policy`); these answer
//! through the hub's paths (records, notes, the session's queue).

use super::{field, Hub, Pending, SessionId};
use crate::guard::policy::{PolicyMetrics, ToolPolicy};
use crate::wire::message::{encode_error, RawValue, Request};

impl Hub {
    /// The tool policies every session gets a copy of (`None`, or a
    /// policy with nothing set: off). Sessions attached before keep theirs.
    pub fn tool_policy(&mut self, policy: Option<ToolPolicy>) -> &mut Self {
        self.policy = policy.filter(|p| !p.is_empty());
        self.metrics.policy = self.policy.as_ref().map(|_| PolicyMetrics::default());
        self
    }

    /// A request of `session` its policy refuses (a `tools/call`, or a
    /// prompt or resource its filters keep out): answered with the
    /// policy's error, recorded as denied, never given to the server.
    pub(super) fn policy_refuses(&mut self, session: SessionId, r: &Request) -> bool {
        let now = self.now.map(|s| s.instant);
        let Some(policy) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.policy.as_mut())
        else {
            return false;
        };
        let params = r.params.as_deref().map(RawValue::get);
        let verdict = if r.method == "tools/call" {
            let tool = field(r.params.as_deref(), "name").unwrap_or_default();
            let arguments = params.and_then(|p| crate::wire::object::member(p, "arguments"));
            policy.check_call(&tool, arguments.map(RawValue::get), now)
        } else {
            policy.check_request(&r.method, params)
        };
        let Err(err) = verdict else {
            return false;
        };
        self.policy_counted();
        let why = err
            .message
            .trim_start_matches("mcp-stdio guard: ")
            .to_owned();
        self.note(format!(
            "host session {}: tools/call {} refused: {why}",
            session.0, r.id
        ));
        if let Some((mut call, at)) = self.new_call(session, r) {
            // With spans on, the refusal is a span too, its error the code
            // the session got (ended with the record).
            if self.open_span(&call, r).is_some() {
                if let Some(spans) = self.spans.as_mut() {
                    spans.answered(call.record().call_id(), Some(err.code), 0, false, false);
                }
            }
            let _ = call.deny(at);
            call.note(
                at.unix_ms,
                &format!(
                    "refused by the guard's policy; host session {} got error {}: {}",
                    session.0, err.code, err.message
                ),
            );
            self.close_call(Some(call), |_, _| {});
        }
        if let Ok(b) = encode_error(Some(&r.id), &err, self.max_frame) {
            self.send_session(session, b);
        }
        true
    }

    /// A server's result for `p` as its session's policy edits it: a
    /// `tools/list` without the tools the policy hides, a `tools/call`
    /// result cut by the content limit; and what was done, for the call's
    /// record. `(None, None)`: as it came.
    pub(super) fn policy_edits(
        &mut self,
        p: &Pending,
        result: &RawValue,
    ) -> (Option<Box<RawValue>>, Option<String>) {
        let Some(policy) = self
            .sessions
            .get_mut(&p.session)
            .and_then(|s| s.policy.as_mut())
        else {
            return (None, None);
        };
        let mut warning = None;
        let edited = match (policy.filters_list(&p.method), p.method.as_str()) {
            (Some(listed), _) => {
                let (filtered, w) = policy.filter_list(listed, result.get());
                warning = w;
                filtered.map(|f| {
                    (
                        f,
                        format!(
                            "the host session got it without the {} the policy hides",
                            listed.policy()
                        ),
                    )
                })
            }
            (None, "tools/call") => {
                let limit = policy.get_content_limit().map_or(0, |c| c.max());
                policy
                    .edit_result(result.get())
                    .map(|e| (e.apply(result.get()), e.summary().describe(limit)))
            }
            (None, _) => None,
        };
        if edited.is_some() || warning.is_some() {
            self.policy_counted();
        }
        if let Some(w) = warning {
            self.note(format!("host session {}: {w}", p.session.0));
        }
        let Some((text, what)) = edited else {
            return (None, None);
        };
        match RawValue::from_string(text) {
            Ok(raw) => (Some(raw), Some(what)),
            Err(_) => (None, None),
        }
    }

    /// The metrics of every session's policies, and of those gone.
    fn policy_counted(&mut self) {
        let mut total = self.policy_gone.clone();
        for s in self.sessions.values() {
            if let Some(p) = &s.policy {
                total.add(p.metrics());
            }
        }
        self.metrics.policy = Some(total);
    }
}
