//! The proxy's side of restart on crash (see `crate::guard::restart`): the
//! requests a crash cost get their error, the host's handshake goes to the
//! new server first, and what the host sent meanwhile waits for it.

use super::{Entry, Proxy, ProxyEvent, State};
use crate::guard::restart::{compatible, GuardPhase, REPLAY_ID_PREFIX, SERVER_CRASHED};
use crate::process::supervisor::ExitStatus;
use crate::records::call::CallLifecycle;
use crate::time::Stamp;
use crate::wire::frame::Framer;
use crate::wire::message::{encode_request, ErrorObject, Id};

/// Whether what the host sends may go to the server now.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum ServerGate {
    /// A server is up and its session is the host's.
    #[default]
    Open,
    /// No server: what the host sends waits.
    Down,
    /// A new server got the host's handshake again (under this id): what
    /// the host sends waits for its answer.
    Replaying(Id),
}

/// The replay's state beside the proxy's: the guard's own messages for the
/// new server, and the answers it takes for itself.
#[derive(Debug, Default)]
pub(crate) struct ReplayState {
    pub(crate) gate: ServerGate,
    /// The guard's own messages for the new server, sent before anything
    /// of the host's (at most the handshake, `initialized`, the log level
    /// and [`MAX_SUBSCRIPTIONS`](crate::guard::restart::MAX_SUBSCRIPTIONS)).
    pub(crate) out: std::collections::VecDeque<Vec<u8>>,
    /// Ids of the guard's own requests whose answers it takes (not the
    /// host's), each with what it was for.
    swallow: std::collections::HashMap<Id, Option<String>>,
    /// Ids the guard gave its requests so far.
    next_id: u64,
    /// Which server of the session is up (from 1).
    pub(crate) server: u32,
    /// The next server resumes a sleeping session (`--idle-stop`), not a
    /// crashed one.
    pub(crate) resuming: bool,
}

impl ReplayState {
    fn next_id(&mut self) -> Id {
        self.next_id += 1;
        Id::String(format!("{REPLAY_ID_PREFIX}{}", self.next_id))
    }
}

/// Why the host's waiting requests got an error: the message and its `data`.
pub(crate) struct Failure<'a> {
    pub(crate) message: &'a str,
    pub(crate) data: serde_json::Value,
    pub(crate) exit: Option<ExitStatus>,
}

impl Proxy {
    /// The server is gone while the host is still there: every request it
    /// had not answered (written to it or waiting here) gets `failure` at
    /// once, what waited for it is dropped, and what the host sends from
    /// now on waits for the next server. Returns the requests failed.
    pub(crate) fn server_down(&mut self, at: Stamp, failure: &Failure<'_>) -> u64 {
        let s = &mut self.state;
        s.to_server.clear();
        s.server_unwritten = 0;
        s.replay_state.out.clear();
        s.replay_state.swallow.clear();
        s.replay_state.gate = ServerGate::Down;
        s.replay.on_server_down();
        s.tasks.clear();
        // A partial line of the dead server is nobody's.
        self.server_framer = Framer::new(self.state.framing.clone());
        self.fail_open(at, failure)
    }

    /// Every tracked request gets `failure` as its error, its record ends
    /// `unknown` (the server may have acted). Returns how many.
    pub(crate) fn fail_open(&mut self, at: Stamp, failure: &Failure<'_>) -> u64 {
        let s = &mut self.state;
        s.progress_owner.clear();
        let mut open: Vec<(Id, CallLifecycle)> =
            s.tracked.drain().map(|(id, t)| (id, t.call)).collect();
        open.sort_by_key(|(_, c)| super::call_seq(c));
        let data = serde_json::value::to_raw_value(&failure.data).ok();
        let n = open.len() as u64;
        for (id, mut call) in open {
            let mut err = ErrorObject::new(SERVER_CRASHED, failure.message);
            err.data.clone_from(&data);
            s.reply_error_object(Some(&id), err);
            if let Some(spans) = s.spans.as_mut() {
                let call_id = call.record().call_id();
                spans.answered(call_id, Some(SERVER_CRASHED), 0, false, false);
            }
            let _ = call.mark_unknown(at);
            call.note(
                at.unix_ms,
                &format!("{}; the host got error {SERVER_CRASHED}", failure.message),
            );
            if let Some(status) = failure.exit {
                call.observe_exit(status);
            }
            s.push_record(call.record().clone());
        }
        s.metrics.requests_failed_by_crash += n;
        n
    }

    /// Server number `server` is up: the host's handshake goes to it again
    /// (when there was one), and what the host sent waits for its answer;
    /// with none to replay, the server is the session's at once (and a
    /// `server_restarted` entry says so).
    pub(crate) fn server_up(&mut self, at: Stamp, server: u32) {
        let s = &mut self.state;
        s.replay_state.server = server;
        let Some(first) = s.replay.handshake.clone() else {
            s.replay_state.gate = ServerGate::Open;
            if server > 1 {
                s.restarted(at, "none", None, 0);
            }
            return;
        };
        let id = s.replay_state.next_id();
        let max = s.framing.get_max_frame().max(1024);
        match encode_request(&id, first.method, first.params.as_deref(), max) {
            Ok(line) => {
                s.replay_state.out.push_back(line);
                s.replay_state.gate = ServerGate::Replaying(id);
            }
            Err(_) => {
                let reason = format!(
                    "the host's {} does not fit the wire limit ({max} bytes)",
                    first.method
                );
                s.refuse_restart(at, reason);
            }
        }
    }

    /// The next server resumes a sleeping session: its phase is
    /// `server_resumed`.
    pub(crate) fn resuming(&mut self) {
        self.state.replay_state.resuming = true;
    }

    /// Whether nothing of the host's session holds the server: no
    /// subscription (kept or in flight) and no task it created.
    pub(crate) fn nothing_open(&self) -> bool {
        self.state.replay.nothing_subscribed() && self.state.tasks.is_empty()
    }

    /// Whether the new server has not answered the replayed handshake yet.
    pub(crate) fn replay_in_flight(&self) -> bool {
        matches!(self.state.replay_state.gate, ServerGate::Replaying(_))
    }

    /// The new server did not answer the replayed handshake in time: the
    /// session ends (as for an answer that does not fit).
    pub(crate) fn replay_timed_out(&mut self, at: Stamp, after: std::time::Duration) {
        if self.replay_in_flight() {
            self.state.refuse_restart(
                at,
                format!(
                    "it did not answer the replayed handshake within {} s",
                    after.as_secs()
                ),
            );
        }
    }

    /// Why this session could not be replayed to a new server, if so.
    pub(crate) fn unreplayable(&self) -> Option<&str> {
        self.state.replay.unreplayable.as_deref()
    }

    /// Queues an audit entry for a moment of the server's life.
    pub(crate) fn push_phase(&mut self, phase: GuardPhase) {
        self.state.records.push_back(Entry::Phase(phase));
        self.state.records_made += 1;
    }
}

impl State {
    /// Whether the answer with `id` is the guard's own (a replayed request):
    /// then it is taken here and never reaches the host.
    pub(super) fn on_replay_answer(
        &mut self,
        at: Stamp,
        id: &Id,
        error: Option<&ErrorObject>,
        result: Option<&str>,
    ) -> bool {
        if self.replay_state.gate == ServerGate::Replaying(id.clone()) {
            self.on_replayed_handshake(at, error, result);
            return true;
        }
        let Some(what) = self.replay_state.swallow.remove(id) else {
            return false;
        };
        if let (Some(e), Some(uri)) = (error, what) {
            self.metrics.resubscribe_failed += 1;
            self.note(format!(
                "mcp-stdio guard: the restarted server refused the host's subscription to {uri} again: error {} {}",
                e.code,
                e.message.chars().take(200).collect::<String>()
            ));
        }
        true
    }

    fn on_replayed_handshake(
        &mut self,
        at: Stamp,
        error: Option<&ErrorObject>,
        result: Option<&str>,
    ) {
        let Some(first) = self.replay.handshake.clone() else {
            return;
        };
        let checked = match (error, result) {
            (Some(e), _) => Err(format!(
                "it answered the replayed {} with error {} {}",
                first.method,
                e.code,
                e.message.chars().take(200).collect::<String>()
            )),
            (None, Some(result)) => {
                compatible(&first, result, self.protocol_version.as_deref()).map(|v| (v, result))
            }
            (None, None) => Err(format!(
                "it answered the replayed {} with nothing",
                first.method
            )),
        };
        let versions = match checked {
            Ok((versions, _)) => versions,
            Err(reason) => {
                self.refuse_restart(at, reason);
                return;
            }
        };
        // The rest of the host's session, before anything it sent since.
        let max = self.framing.get_max_frame().max(1024);
        if let Some(line) = self.replay.initialized.clone() {
            self.replay_state.out.push_back(line);
        }
        if let Some(level) = self.replay.log_level.clone() {
            let id = self.replay_state.next_id();
            if let Ok(line) = encode_request(&id, "logging/setLevel", Some(&level), max) {
                self.replay_state.out.push_back(line);
                self.replay_state.swallow.insert(id, None);
            }
        }
        let uris: Vec<String> = self.replay.subscriptions.iter().cloned().collect();
        let mut resubscribed = 0;
        for uri in uris {
            let id = self.replay_state.next_id();
            let params = serde_json::value::to_raw_value(&serde_json::json!({ "uri": uri }));
            let Ok(params) = params else { continue };
            if let Ok(line) = encode_request(&id, "resources/subscribe", Some(&params), max) {
                self.replay_state.out.push_back(line);
                self.replay_state.swallow.insert(id, Some(uri));
                resubscribed += 1;
            }
        }
        self.metrics.resubscribed += resubscribed;
        self.replay_state.gate = ServerGate::Open;
        let method = first.method;
        let version = versions.first().cloned();
        self.note(format!(
            "mcp-stdio guard: server {} took over the host's session ({method} replayed{}{})",
            self.replay_state.server,
            version
                .as_deref()
                .map(|v| format!(", protocol {v}"))
                .unwrap_or_default(),
            if resubscribed > 0 {
                format!(", {resubscribed} subscription(s) sent again")
            } else {
                String::new()
            }
        ));
        self.restarted(at, method, version, resubscribed);
    }

    /// The `server_restarted` entry.
    fn restarted(
        &mut self,
        at: Stamp,
        handshake: &str,
        protocol_version: Option<String>,
        resubscribed: u64,
    ) {
        let phase = if std::mem::take(&mut self.replay_state.resuming) {
            GuardPhase::ServerResumed {
                session_id: self.config.session_id.clone(),
                server: self.replay_state.server,
                at_unix_ms: at.unix_ms,
                handshake: handshake.to_owned(),
                protocol_version,
            }
        } else {
            GuardPhase::ServerRestarted {
                session_id: self.config.session_id.clone(),
                server: self.replay_state.server,
                at_unix_ms: at.unix_ms,
                handshake: handshake.to_owned(),
                protocol_version,
                resubscribed,
            }
        };
        self.records.push_back(Entry::Phase(phase));
        self.records_made += 1;
    }

    /// The new server does not fit the host's session: the session ends.
    pub(super) fn refuse_restart(&mut self, at: Stamp, reason: String) {
        self.replay_state.gate = ServerGate::Down;
        self.replay_state.out.clear();
        self.note(format!(
            "mcp-stdio guard: the restarted server cannot take over the host's session: {reason}; ending the session"
        ));
        let phase = GuardPhase::RestartRefused {
            session_id: self.config.session_id.clone(),
            server: self.replay_state.server,
            at_unix_ms: at.unix_ms,
            reason: reason.clone(),
        };
        self.records.push_back(Entry::Phase(phase));
        self.records_made += 1;
        self.events.push_back(ProxyEvent::RestartRefused { reason });
    }
}
