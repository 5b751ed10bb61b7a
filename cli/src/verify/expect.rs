//! `verify --expect FILE`: compares what a verified log says about each call
//! with the lifecycle a person wrote down for the session.
//!
//! Verification shows the entries were not altered; this comparison shows the
//! bridge wrote what it should have.
//!
//! ## The expectation format
//!
//! Plain text, one item per line; blank lines and lines starting with `#`
//! are ignored:
//!
//! ```text
//! session
//! call 1/0 initialize: received validated authorized [dispatched] [completed]
//! call 2/1 echo: received validated authorized [dispatched] [cancelled_after_dispatch]
//! phase session_end
//! ```
//!
//! - `session` starts the next session (optional before the first). Sessions
//!   are matched in order with the log's: a log has one per `session_start`
//!   (a log appended to by several runs has several; a guard seals its
//!   session again after each batch once it is ending, and those seals do
//!   not start sessions); in a log without `session_start` entries, one per
//!   seal.
//! - `call <CALL_ID> [<OPERATION>]: <STATE>…` lists one call: its
//!   `call_id` as the records write it (the guard writes
//!   `<sequence>/<JSON-RPC id>`, e.g. `2/1` for the second request, id 1),
//!   optionally its `operation`, then every state it passes through, in
//!   order. A state in brackets, `[dispatched]`, must also have an entry of
//!   its own: a record written while the call was in that state. The
//!   bracketed states are exactly the call's entries, in order (the guard
//!   writes one at `dispatched`, before the request reaches the server, and
//!   one when the call ends). States are the record's names: `received`,
//!   `validated`, `awaiting_approval`, `authorized`, `dispatched`,
//!   `completed`, `denied`, `failed_before_dispatch`, `cancelled`,
//!   `cancelled_after_dispatch`, `force_killed`, `unknown`.
//! - `phase <NAME>` lists the session's other entries in order (the guard
//!   writes one `session_end`); `session_start` and the seal are checked by
//!   verification and are not listed.
//!
//! Calls are matched by id, so concurrent calls may end in any order; the
//! states and entries of one call are compared in order. Every call of the
//! log must be listed.
//!
//! ## What the log says about a call
//!
//! Its path is the transitions in the `events` of all its records, merged by
//! event number; its entries are the `state` of each of its records, in log
//! order. A record keeps the first and last events only (`events_dropped`
//! counts the rest): a mismatch on such a call says so.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use mcp_stdio_audit::{entry_kind, PHASE_SEAL, PHASE_SESSION_START};
use mcp_stdio_core::CallState;
use serde::Deserialize;

/// Largest expectation file read: 1 MiB.
pub(crate) const MAX_EXPECT_FILE_BYTES: u64 = 1024 * 1024;

/// Calls remembered from the log for the comparison: 10 000 (each ≈ 1 KiB
/// at most with the core's default record limits: ≈ 10 MiB worst case).
pub(crate) const MAX_OBSERVED_CALLS: usize = 10_000;

/// States and entries remembered per call: 256 each.
const MAX_STATES_PER_CALL: usize = 256;

/// Sessions remembered from the log: 10 000.
const MAX_OBSERVED_SESSIONS: usize = 10_000;

/// Phase entries remembered per session: 256.
const MAX_PHASES_PER_SESSION: usize = 256;

/// A line of the expectation file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub(crate) struct ExpectError {
    /// 1-based line number.
    pub(crate) line: usize,
    /// What is wrong with it.
    pub(crate) kind: ExpectErrorKind,
}

/// What is wrong with an expectation line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ExpectErrorKind {
    /// Not `session`, `call …` or `phase …`.
    #[error("expected `session`, `call <id> [<operation>]: <states>` or `phase <name>`")]
    UnknownItem,
    /// A `call` line without its `:` or without an id.
    #[error("a call is `call <id> [<operation>]: <states>`")]
    BadCall,
    /// A state name that is not a lifecycle state.
    #[error("unknown state `{0}`")]
    UnknownState(String),
    /// The same call listed twice in one session.
    #[error("call {0} is listed twice in this session")]
    DuplicateCall(String),
    /// More calls or states than the comparison keeps.
    #[error("more than {0} items")]
    TooMany(usize),
}

/// One expected call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExpectedCall {
    call_id: String,
    operation: Option<String>,
    path: Vec<CallState>,
    entries: Vec<CallState>,
}

/// One expected session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ExpectedSession {
    calls: Vec<ExpectedCall>,
    phases: Vec<String>,
}

/// A parsed expectation file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expectation {
    sessions: Vec<ExpectedSession>,
}

fn parse_state(token: &str) -> Option<CallState> {
    CallState::ALL.into_iter().find(|s| s.as_str() == token)
}

impl Expectation {
    /// Parses the text format (see the module docs).
    pub(crate) fn parse(text: &str) -> Result<Self, ExpectError> {
        let mut sessions: Vec<ExpectedSession> = Vec::new();
        let mut current: Option<ExpectedSession> = None;
        let mut calls_total = 0usize;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let err = |kind| ExpectError {
                line: line_no,
                kind,
            };
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let rest = rest.trim();
            match word {
                "session" if rest.is_empty() => {
                    if let Some(s) = current.take() {
                        sessions.push(s);
                    }
                    current = Some(ExpectedSession::default());
                }
                "phase" if !rest.is_empty() && !rest.contains(char::is_whitespace) => {
                    let s = current.get_or_insert_with(ExpectedSession::default);
                    if s.phases.len() >= MAX_PHASES_PER_SESSION {
                        return Err(err(ExpectErrorKind::TooMany(MAX_PHASES_PER_SESSION)));
                    }
                    s.phases.push(rest.to_owned());
                }
                "call" => {
                    let (head, states) =
                        rest.rsplit_once(':').ok_or(err(ExpectErrorKind::BadCall))?;
                    let mut head = head.split_whitespace();
                    let call_id = head.next().ok_or(err(ExpectErrorKind::BadCall))?;
                    let operation = head.next().map(str::to_owned);
                    if head.next().is_some() {
                        return Err(err(ExpectErrorKind::BadCall));
                    }
                    let mut call = ExpectedCall {
                        call_id: call_id.to_owned(),
                        operation,
                        path: Vec::new(),
                        entries: Vec::new(),
                    };
                    for token in states.split_whitespace() {
                        let (name, entry) = match token.strip_prefix('[') {
                            Some(t) => (t.strip_suffix(']').unwrap_or(t), true),
                            None => (token, false),
                        };
                        let state = parse_state(name)
                            .ok_or_else(|| err(ExpectErrorKind::UnknownState(token.to_owned())))?;
                        if call.path.len() >= MAX_STATES_PER_CALL {
                            return Err(err(ExpectErrorKind::TooMany(MAX_STATES_PER_CALL)));
                        }
                        call.path.push(state);
                        if entry {
                            call.entries.push(state);
                        }
                    }
                    let s = current.get_or_insert_with(ExpectedSession::default);
                    if s.calls.iter().any(|c| c.call_id == call.call_id) {
                        return Err(err(ExpectErrorKind::DuplicateCall(call.call_id)));
                    }
                    calls_total += 1;
                    if calls_total > MAX_OBSERVED_CALLS {
                        return Err(err(ExpectErrorKind::TooMany(MAX_OBSERVED_CALLS)));
                    }
                    s.calls.push(call);
                }
                _ => return Err(err(ExpectErrorKind::UnknownItem)),
            }
        }
        if let Some(s) = current.take() {
            sessions.push(s);
        }
        Ok(Self { sessions })
    }

    /// Compares with what the log recorded; every difference, in order.
    pub(crate) fn compare(&self, log: &Observed) -> Vec<Mismatch> {
        let mut out = Vec::new();
        if let Some(limit) = log.overflow {
            out.push(Mismatch {
                session: None,
                call: None,
                what: format!("the log holds more than {limit} calls or sessions: not compared"),
            });
            return out;
        }
        if self.sessions.len() != log.sessions.len() {
            out.push(Mismatch {
                session: None,
                call: None,
                what: format!(
                    "expected {} session(s), the log has {}",
                    self.sessions.len(),
                    log.sessions.len()
                ),
            });
        }
        for (i, (want, got)) in self.sessions.iter().zip(&log.sessions).enumerate() {
            compare_session(i + 1, want, got, &mut out);
        }
        out
    }

    /// Calls listed, over all sessions.
    pub(crate) fn calls(&self) -> usize {
        self.sessions.iter().map(|s| s.calls.len()).sum()
    }

    /// Sessions listed.
    pub(crate) fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

/// One difference between the expectation and the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Mismatch {
    /// The session (1-based), if the difference is inside one.
    pub(crate) session: Option<usize>,
    /// The call, if the difference is about one.
    pub(crate) call: Option<String>,
    /// What differs.
    pub(crate) what: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.session {
            write!(f, "session {s}")?;
            if let Some(c) = &self.call {
                write!(f, ", call {c}")?;
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.what)
    }
}

fn names(states: &[CallState]) -> String {
    if states.is_empty() {
        return "(none)".to_owned();
    }
    states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" > ")
}

/// Differences between two state sequences: what is missing, what is
/// unexpected, or (same states) the wrong order.
fn compare_states(
    (what, plural): (&str, &str),
    want: &[CallState],
    got: &[CallState],
) -> Vec<String> {
    let count = |v: &[CallState], s: CallState| v.iter().filter(|x| **x == s).count();
    let mut out = Vec::new();
    for s in CallState::ALL {
        let (w, g) = (count(want, s), count(got, s));
        if w > g {
            out.push(format!("missing {what} {s}"));
        } else if g > w {
            out.push(format!("unexpected {what} {s}"));
        }
    }
    if out.is_empty() && want != got {
        out.push(format!("{plural} in the wrong order"));
    }
    if !out.is_empty() {
        out.push(format!(
            "{plural}: expected {}, found {}",
            names(want),
            names(got)
        ));
    }
    out
}

fn compare_session(
    n: usize,
    want: &ExpectedSession,
    got: &ObservedSession,
    out: &mut Vec<Mismatch>,
) {
    let mismatch = |call: Option<&str>, what: String| Mismatch {
        session: Some(n),
        call: call.map(str::to_owned),
        what,
    };
    for call in &want.calls {
        let Some(seen) = got.index.get(&call.call_id).map(|&i| &got.calls[i]) else {
            out.push(mismatch(
                Some(&call.call_id),
                "missing: no entry in the log".to_owned(),
            ));
            continue;
        };
        let id = Some(call.call_id.as_str());
        if let Some(op) = &call.operation {
            if seen.operation.as_deref() != Some(op.as_str()) {
                out.push(mismatch(
                    id,
                    format!(
                        "operation: expected {op}, found {}",
                        seen.operation.as_deref().unwrap_or("(none)")
                    ),
                ));
            }
        }
        let path = seen.path();
        let mut found = compare_states(("state", "states"), &call.path, &path);
        found.extend(compare_states(
            ("entry in state", "entries"),
            &call.entries,
            &seen.entries,
        ));
        if !found.is_empty() && seen.events_dropped > 0 {
            found.push(format!(
                "its records dropped {} events, so the path may be incomplete",
                seen.events_dropped
            ));
        }
        out.extend(found.into_iter().map(|w| mismatch(id, w)));
    }
    for seen in &got.calls {
        if !want.calls.iter().any(|c| c.call_id == seen.call_id) {
            out.push(mismatch(
                Some(&seen.call_id),
                format!(
                    "not expected ({}, states {}, entries {})",
                    seen.operation.as_deref().unwrap_or("no operation"),
                    names(&seen.path()),
                    names(&seen.entries)
                ),
            ));
        }
    }
    if want.phases != got.phases {
        out.push(mismatch(
            None,
            format!(
                "phase entries: expected {:?}, found {:?}",
                want.phases, got.phases
            ),
        ));
    }
    if got.other_entries > 0 {
        out.push(mismatch(
            None,
            format!(
                "{} entries that are neither calls nor phases",
                got.other_entries
            ),
        ));
    }
}

/// What the log says about one call.
#[derive(Debug, Default)]
struct ObservedCall {
    call_id: String,
    operation: Option<String>,
    /// Transitions by event number, merged over the call's records.
    transitions: BTreeMap<u64, CallState>,
    /// The state of each of its records, in log order.
    entries: Vec<CallState>,
    events_dropped: u64,
}

impl ObservedCall {
    fn path(&self) -> Vec<CallState> {
        let mut path: Vec<CallState> = Vec::new();
        for s in self.transitions.values() {
            if path.last() != Some(s) {
                path.push(*s);
            }
        }
        path
    }
}

#[derive(Debug, Default)]
struct ObservedSession {
    calls: Vec<ObservedCall>,
    index: HashMap<String, usize>,
    phases: Vec<String>,
    other_entries: u64,
    /// Any entry seen (a `session_start` after one starts a new session).
    entries: u64,
    /// It began with a `session_start`: a seal does not end it, the next
    /// `session_start` does.
    started: bool,
}

/// What a verified log says, collected entry by entry (see
/// [`AuditVerifier::push_entries`]).
///
/// [`AuditVerifier::push_entries`]: https://docs.rs/mcp-stdio-audit/latest/mcp_stdio_audit/struct.AuditVerifier.html#method.push_entries
#[derive(Debug, Default)]
pub(crate) struct Observed {
    sessions: Vec<ObservedSession>,
    /// The entry after a seal opens a new session.
    closed: bool,
    calls: usize,
    /// Set when a limit was passed: the comparison is refused.
    overflow: Option<usize>,
}

#[derive(Deserialize)]
struct CallEntry {
    call_id: String,
    #[serde(default)]
    operation: Option<String>,
    state: String,
    #[serde(default)]
    events: Vec<EventEntry>,
    #[serde(default)]
    events_dropped: u64,
}

#[derive(Deserialize)]
struct EventEntry {
    n: u64,
    kind: String,
    state: String,
}

impl Observed {
    /// Takes one verified entry.
    pub(crate) fn on_entry(&mut self, record: &[u8]) {
        if self.overflow.is_some() {
            return;
        }
        let kind = entry_kind(record);
        let phase = kind.strip_prefix("phase.");
        let starts = phase == Some(PHASE_SESSION_START)
            && self.sessions.last().is_some_and(|s| s.entries > 0);
        if self.sessions.is_empty() || self.closed || starts {
            if self.sessions.len() >= MAX_OBSERVED_SESSIONS {
                self.overflow = Some(MAX_OBSERVED_SESSIONS);
                return;
            }
            self.sessions.push(ObservedSession::default());
            self.closed = false;
        }
        let Some(session) = self.sessions.last_mut() else {
            return;
        };
        session.entries += 1;
        match phase {
            Some(PHASE_SEAL) => self.closed = !session.started,
            Some(PHASE_SESSION_START) => session.started = true,
            Some(name) => {
                if session.phases.len() < MAX_PHASES_PER_SESSION {
                    session.phases.push(name.to_owned());
                }
            }
            None if kind.starts_with("call.") => {
                let Ok(entry) = serde_json::from_slice::<CallEntry>(record) else {
                    session.other_entries += 1;
                    return;
                };
                let Some(state) = parse_state(&entry.state) else {
                    session.other_entries += 1;
                    return;
                };
                let i = match session.index.get(&entry.call_id) {
                    Some(&i) => i,
                    None => {
                        if self.calls >= MAX_OBSERVED_CALLS {
                            self.overflow = Some(MAX_OBSERVED_CALLS);
                            return;
                        }
                        self.calls += 1;
                        session
                            .index
                            .insert(entry.call_id.clone(), session.calls.len());
                        session.calls.push(ObservedCall {
                            call_id: entry.call_id.clone(),
                            ..ObservedCall::default()
                        });
                        session.calls.len() - 1
                    }
                };
                let call = &mut session.calls[i];
                if call.operation.is_none() {
                    call.operation = entry.operation;
                }
                if call.entries.len() < MAX_STATES_PER_CALL {
                    call.entries.push(state);
                }
                for e in entry.events.iter().filter(|e| e.kind == "transition") {
                    if call.transitions.len() >= MAX_STATES_PER_CALL {
                        break;
                    }
                    if let Some(s) = parse_state(&e.state) {
                        call.transitions.insert(e.n, s);
                    }
                }
                call.events_dropped = call.events_dropped.max(entry.events_dropped);
            }
            None => session.other_entries += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(call_id: &str, op: &str, states: &[&str], n0: u64) -> Vec<u8> {
        let events: Vec<_> = states
            .iter()
            .enumerate()
            .map(|(i, s)| json!({"n": n0 + i as u64, "unix_ms": 1, "kind": "transition", "state": s}))
            .collect();
        serde_json::to_vec(&json!({
            "call_id": call_id, "operation": op, "state": states.last().unwrap(),
            "events": events, "events_dropped": 0
        }))
        .unwrap()
    }

    fn guard_log() -> Observed {
        let mut o = Observed::default();
        let path = ["received", "validated", "authorized", "dispatched"];
        o.on_entry(br#"{"phase":"session_start","session_id":"s"}"#);
        o.on_entry(&record("1/0", "initialize", &path, 0));
        o.on_entry(&record("2/1", "echo", &path, 0));
        o.on_entry(&record(
            "1/0",
            "initialize",
            &[
                "received",
                "validated",
                "authorized",
                "dispatched",
                "completed",
            ],
            0,
        ));
        o.on_entry(&record(
            "2/1",
            "echo",
            &[
                "received",
                "validated",
                "authorized",
                "dispatched",
                "completed",
            ],
            0,
        ));
        o.on_entry(br#"{"phase":"session_end"}"#);
        o.on_entry(br#"{"phase":"seal"}"#);
        o
    }

    const GUARD_EXPECT: &str = "# two calls\n\
        call 1/0 initialize: received validated authorized [dispatched] [completed]\n\
        call 2/1 echo: received validated authorized [dispatched] [completed]\n\
        phase session_end\n";

    #[test]
    fn expect_a_matching_session_has_no_mismatch() {
        let e = Expectation::parse(GUARD_EXPECT).expect("parses");
        assert_eq!((e.sessions(), e.calls()), (1, 2));
        assert_eq!(e.compare(&guard_log()), vec![]);
    }

    /// A guard that is ending seals after each batch: those seals are
    /// inside its session; the next `session_start` begins the next one.
    /// Without `session_start` entries, a seal ends a session.
    #[test]
    fn expect_seals_inside_a_session_do_not_start_one() {
        let e = Expectation::parse(GUARD_EXPECT).expect("parses");
        let path = ["received", "validated", "authorized", "dispatched"];
        let done = [
            "received",
            "validated",
            "authorized",
            "dispatched",
            "completed",
        ];
        let mut o = Observed::default();
        o.on_entry(br#"{"phase":"session_start","session_id":"s"}"#);
        o.on_entry(&record("1/0", "initialize", &path, 0));
        o.on_entry(&record("2/1", "echo", &path, 0));
        o.on_entry(&record("1/0", "initialize", &done, 0));
        o.on_entry(br#"{"phase":"seal"}"#);
        o.on_entry(&record("2/1", "echo", &done, 0));
        o.on_entry(br#"{"phase":"seal"}"#);
        o.on_entry(br#"{"phase":"session_end"}"#);
        o.on_entry(br#"{"phase":"seal"}"#);
        assert_eq!(e.compare(&o), vec![]);
        o.on_entry(br#"{"phase":"session_start","session_id":"t"}"#);
        assert_eq!(o.sessions.len(), 2);

        let mut bare = Observed::default();
        for _ in 0..2 {
            bare.on_entry(&record("1/0", "initialize", &done, 0));
            bare.on_entry(br#"{"phase":"seal"}"#);
        }
        assert_eq!(bare.sessions.len(), 2);
    }

    #[test]
    fn expect_each_difference_is_named() {
        let e = Expectation::parse(
            "session\n\
             call 1/0 initialize: received validated authorized [dispatched] [completed]\n\
             call 2/1 ping: received validated awaiting_approval authorized [dispatched] [completed]\n\
             call 3/2: received [denied]\n\
             phase session_end\n",
        )
        .expect("parses");
        let got: Vec<String> = e
            .compare(&guard_log())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            got.contains(&"session 1, call 2/1: operation: expected ping, found echo".to_owned()),
            "{got:#?}"
        );
        assert!(
            got.contains(&"session 1, call 2/1: missing state awaiting_approval".to_owned()),
            "{got:#?}"
        );
        assert!(
            got.contains(&"session 1, call 3/2: missing: no entry in the log".to_owned()),
            "{got:#?}"
        );
        // The dispatched entry of 2/1 taken out of the log.
        let mut o = Observed::default();
        o.on_entry(&record(
            "1/0",
            "initialize",
            &["received", "validated", "authorized", "dispatched"],
            0,
        ));
        o.on_entry(&record(
            "1/0",
            "initialize",
            &["received", "validated", "authorized", "completed"],
            0,
        ));
        o.on_entry(br#"{"phase":"session_end"}"#);
        let e = Expectation::parse(
            "call 1/0 initialize: received validated authorized [dispatched] [completed]\nphase session_end\n",
        )
        .expect("parses");
        let got: Vec<String> = e.compare(&o).iter().map(ToString::to_string).collect();
        // Event 3 is `completed` in the later record: the path lost `dispatched`.
        assert!(
            got.contains(&"session 1, call 1/0: missing state dispatched".to_owned()),
            "{got:#?}"
        );
        // Wrong order, unexpected entries, extra calls.
        let e = Expectation::parse(
            "call 1/0: received authorized validated [dispatched] [completed]\n",
        )
        .expect("parses");
        let got: Vec<String> = e
            .compare(&guard_log())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            got.contains(&"session 1, call 1/0: states in the wrong order".to_owned()),
            "{got:#?}"
        );
        assert!(
            got.iter()
                .any(|m| m.starts_with("session 1, call 2/1: not expected (echo")),
            "{got:#?}"
        );
        assert!(
            got.iter()
                .any(|m| m.starts_with("session 1: phase entries")),
            "{got:#?}"
        );
        let e = Expectation::parse(
            "call 1/0: received validated authorized dispatched [completed]\n\
             call 2/1: received validated authorized [dispatched] [completed]\nphase session_end\n",
        )
        .expect("parses");
        let got: Vec<String> = e
            .compare(&guard_log())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got[0], "session 1, call 1/0: unexpected entry in state dispatched",
            "{got:#?}"
        );
        // Session counts.
        let e = Expectation::parse(&format!("{GUARD_EXPECT}session\n")).expect("parses");
        let got: Vec<String> = e
            .compare(&guard_log())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, vec!["expected 2 session(s), the log has 1".to_owned()]);
    }

    #[test]
    fn expect_bad_lines_are_refused_with_their_number() {
        let bad = [
            ("call 1/0 received", ExpectErrorKind::BadCall),
            (
                "call 1/0: received shipped",
                ExpectErrorKind::UnknownState("shipped".into()),
            ),
            ("calls 1/0: received", ExpectErrorKind::UnknownItem),
            (
                "call 1/0: received\ncall 1/0: received",
                ExpectErrorKind::DuplicateCall("1/0".into()),
            ),
            ("call a b c: received", ExpectErrorKind::BadCall),
        ];
        for (text, kind) in bad {
            let e = Expectation::parse(&format!("# header\n{text}")).expect_err(text);
            assert_eq!(e.kind, kind, "{text}");
            assert!(e.line >= 2, "{text}: line {}", e.line);
        }
    }
}
