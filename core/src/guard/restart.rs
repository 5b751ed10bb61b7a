//! Restart on crash: a server that exits while the host is still there is
//! started again, and the host's session goes on.
//!
//! The 2026-07-28 revision says a client SHOULD restart a server that exits
//! unexpectedly; hosts do not (a crashed stdio server stays dead until the
//! user restarts everything). The guard does it for them, without the host
//! noticing more than the requests the crash cost:
//!
//! - **What the guard keeps of the host's session** ([`Replay`]): the
//!   `initialize` request the host sent and the server's answer to it (or,
//!   at 2026-07-28, the host's `server/discover` and its answer), whether
//!   the host sent `notifications/initialized`, the last
//!   `logging/setLevel`, and the resources the host subscribed to (each
//!   bounded: [`MAX_REPLAY_BYTES`], [`MAX_SUBSCRIPTIONS`]).
//! - **At the crash**: every request the server had not answered — written
//!   to it or still waiting here — gets an error at once
//!   ([`SERVER_CRASHED`]) that says the server crashed, with its exit status
//!   and the end of its stderr; each such call's record ends `unknown` (the
//!   server may have acted). A request the host sends while the server is
//!   down waits here (within the proxy's bound) for the new server.
//! - **The new server** gets the host's handshake again, under the guard's
//!   own ids ([`REPLAY_ID_PREFIX`]); its answer must be compatible — the same
//!   protocol version (at 2026-07-28: the version the host uses still
//!   offered) and no capability the first answer had missing or turned off
//!   ([`narrowed`]) — or the session ends with an error that says why
//!   (exit 75). Then `notifications/initialized`, the log level and the
//!   subscriptions are sent again (their answers are the guard's: a failed
//!   re-subscription is told on stderr and in the audit log), and what
//!   waited goes to the new server. **Subscriptions are re-established, not
//!   reported**: the host's view (which resources it watches) stays true.
//! - **When restarts stop**: after [`RestartConfig::max_restarts`] crashes
//!   in a row (a server that ran [`RESTART_RESET_AFTER`] after its handshake
//!   starts the count again), when a restarted server crashes before the
//!   replayed handshake is answered (it would only crash again), when it
//!   cannot be spawned, or when its answer is not compatible or does not
//!   come within [`REPLAY_TIMEOUT`]. What waited
//!   gets an error, the session ends, and one line on stderr says why.
//! - Backoff between a crash and the next start: [`RestartConfig::backoff`],
//!   doubled for each crash in a row, at most [`MAX_RESTART_BACKOFF`].
//!
//! Each crash, restart and refusal is an audit entry of its own
//! ([`GuardPhase`], `phase` `server_crashed`, `server_restarted`,
//! `restart_refused`) and is counted in the guard's report.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::process::supervisor::ExitStatus;
use crate::wire::message::{Id, RawValue};

/// Default number of restarts in a row before the guard gives up: 5.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// Default wait between a crash and the next start: 250 ms (doubled for
/// each crash in a row).
pub const DEFAULT_RESTART_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between a crash and the next start: 8 s.
pub const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(8);
/// A server that ran this long after its handshake starts the count of
/// restarts in a row again: 60 s.
pub const RESTART_RESET_AFTER: Duration = Duration::from_secs(60);
/// How long a restarted server has to answer the replayed handshake before
/// the guard gives up on it (a server run by `npx` or `uvx` may fetch its
/// package first): 60 s.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest `params` of a handshake request (or `logging/setLevel`) the
/// guard keeps to replay, and the largest `capabilities` it keeps to
/// compare: 64 KiB. A session with a larger one cannot be restarted (the
/// crash ends it, as without `--restart`).
pub const MAX_REPLAY_BYTES: usize = 64 * 1024;
/// Resources subscriptions the guard keeps to re-establish: 1024 (more are
/// told on stderr as not re-established).
pub const MAX_SUBSCRIPTIONS: usize = 1024;
/// The longest resource URI kept for a subscription: 4 KiB.
pub const MAX_SUBSCRIPTION_URI_BYTES: usize = 4096;
/// Bytes of the crashed server's stderr (its newest, redacted) put in the
/// error the host gets and in the `server_crashed` entry: 2 KiB.
pub const CRASH_TAIL_BYTES: usize = 2048;
/// The JSON-RPC error code of a request the server crashed under (or that
/// waited for a server that never came back): in the implementation-defined
/// server error range.
pub const SERVER_CRASHED: i64 = -32001;
/// The start of the ids of the requests the guard itself sends to a
/// restarted server (the replayed handshake, log level, subscriptions).
/// No host request is in flight at the new server when they are sent, so
/// they cannot collide with one.
pub const REPLAY_ID_PREFIX: &str = "mcp-stdio-guard/replay/";

/// When the guard starts a server again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RestartPolicy {
    /// Never: the server's end is the session's end.
    #[default]
    Never,
    /// When it ends on its own with a failure: a non-zero exit code, a
    /// signal, or no observed status (an exit code 0 ends the session).
    OnFailure,
    /// Whenever it ends on its own while the host is still there.
    Always,
}

/// Restart on crash: a server that ends on its own while the host is still
/// there is started again, the host's handshake is replayed to it and
/// checked, and the requests the crash cost get [`SERVER_CRASHED`] at once;
/// restarts stop after [`max_restarts`](Self::max_restarts) crashes in a
/// row, a crash during the replay, an answer that does not fit the session,
/// or none within [`REPLAY_TIMEOUT`]. Edited in place through
/// `GuardConfig::restart_mut` (the CLI's `--restart`, `--restart-max`,
/// `--restart-backoff`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RestartConfig {
    policy: RestartPolicy,
    max_restarts: u32,
    backoff: Duration,
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            policy: RestartPolicy::Never,
            max_restarts: DEFAULT_MAX_RESTARTS,
            backoff: DEFAULT_RESTART_BACKOFF,
        }
    }
}

impl RestartConfig {
    /// When to restart [default: never].
    pub fn policy(&mut self, policy: RestartPolicy) -> &mut Self {
        self.policy = policy;
        self
    }

    /// Restarts in a row before the guard gives up [default:
    /// [`DEFAULT_MAX_RESTARTS`]]; 0 is the same as [`RestartPolicy::Never`].
    pub fn max_restarts(&mut self, max: u32) -> &mut Self {
        self.max_restarts = max;
        self
    }

    /// The wait before the first restart in a row, doubled for each next
    /// one up to [`MAX_RESTART_BACKOFF`] [default: [`DEFAULT_RESTART_BACKOFF`]].
    pub fn backoff(&mut self, first: Duration) -> &mut Self {
        self.backoff = first;
        self
    }

    /// When to restart.
    pub fn get_policy(&self) -> RestartPolicy {
        self.policy
    }

    /// Restarts in a row before the guard gives up.
    pub fn get_max_restarts(&self) -> u32 {
        self.max_restarts
    }

    /// The wait before the first restart in a row.
    pub fn get_backoff(&self) -> Duration {
        self.backoff
    }

    /// The wait before restart number `n` in a row (from 1).
    pub fn backoff_for(&self, n: u32) -> Duration {
        let factor = 1u32 << n.saturating_sub(1).min(16);
        self.backoff
            .checked_mul(factor)
            .unwrap_or(MAX_RESTART_BACKOFF)
            .min(MAX_RESTART_BACKOFF.max(self.backoff))
    }

    /// Whether restart number `n` in a row (from 1) may be made after an
    /// end that was a failure (a shared session's hub that went): the
    /// policy is not `Never` and `n` is within [`max_restarts`](Self::max_restarts).
    pub fn allows_after_failure(&self, n: u32) -> bool {
        self.policy != RestartPolicy::Never && n <= self.max_restarts
    }

    /// Whether an end with `status` (while the host is still there) calls
    /// for a restart under the policy.
    pub(crate) fn restarts_after(&self, status: Option<ExitStatus>) -> bool {
        if self.max_restarts == 0 {
            return false;
        }
        match self.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => status != Some(ExitStatus::Code(0)),
            RestartPolicy::Always => true,
        }
    }
}

/// A moment of the server's life the audit log records, beside the call
/// records (`"phase"` names it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GuardPhase {
    /// The server ended on its own while the host was still there.
    ServerCrashed {
        /// The guard's session id.
        session_id: String,
        /// Which server of this session (from 1).
        server: u32,
        /// When the guard saw the end, in Unix milliseconds.
        at_unix_ms: u64,
        /// How it ended (`None`: no status observed).
        exit_status: Option<ExitStatus>,
        /// How long it ran, in milliseconds.
        uptime_ms: u64,
        /// Requests that got the crash error.
        requests_failed: u64,
        /// The end of its stderr (redacted, at most [`CRASH_TAIL_BYTES`]).
        stderr_tail: String,
        /// The wait before the next start; `None` when restarts stop.
        restart_in_ms: Option<u64>,
        /// Why restarts stop, when they do.
        restarts_stopped: Option<String>,
    },
    /// A new server took over the host's session.
    ServerRestarted {
        /// The guard's session id.
        session_id: String,
        /// Which server of this session (from 2).
        server: u32,
        /// When its handshake was answered (or it started, with none to
        /// replay), in Unix milliseconds.
        at_unix_ms: u64,
        /// What was replayed: `initialize`, `server/discover` or `none`.
        handshake: String,
        /// The protocol version it answered with (`None`: none to compare).
        protocol_version: Option<String>,
        /// Subscriptions sent again.
        resubscribed: u64,
    },
    /// The server sat idle for `--idle-stop` with nothing open: the guard
    /// stopped it; the host's next message starts it again.
    ServerIdleStopped {
        /// The guard's session id.
        session_id: String,
        /// Which server of this session (from 1).
        server: u32,
        /// When the guard stopped it, in Unix milliseconds.
        at_unix_ms: u64,
        /// How long it had been idle, in milliseconds.
        idle_ms: u64,
    },
    /// A server stopped for idleness was started again by the host's next
    /// message and took over the host's session.
    ServerResumed {
        /// The guard's session id.
        session_id: String,
        /// Which server of this session (from 2).
        server: u32,
        /// When its handshake was answered (or it started, with none to
        /// replay), in Unix milliseconds.
        at_unix_ms: u64,
        /// What was replayed: `initialize`, `server/discover` or `none`.
        handshake: String,
        /// The protocol version it answered with.
        protocol_version: Option<String>,
    },
    /// A signal reached the guard (a host stopping its server): passed on
    /// to the server's group, the next one climbing to `SIGTERM`, then
    /// `SIGKILL`.
    HostSignal {
        /// The guard's session id.
        session_id: String,
        /// When it came, in Unix milliseconds.
        at_unix_ms: u64,
        /// Which: `SIGINT`, `SIGTERM` or `SIGHUP`.
        signal: String,
        /// How many signals the host has sent, this one included.
        nth: u32,
    },
    /// A restarted server's answer did not match the host's session, or it
    /// could not be started: the session ends.
    RestartRefused {
        /// The guard's session id.
        session_id: String,
        /// Which server of this session.
        server: u32,
        /// When, in Unix milliseconds.
        at_unix_ms: u64,
        /// Why.
        reason: String,
    },
}

/// The handshake the host made, as the first server answered it.
#[derive(Debug, Clone)]
pub(crate) struct Handshake {
    /// `initialize` or `server/discover`.
    pub(crate) method: &'static str,
    /// The host's params, replayed as they were.
    pub(crate) params: Option<Box<RawValue>>,
    /// The version settled on (`initialize`), or the versions offered
    /// (`server/discover`).
    pub(crate) versions: Vec<String>,
    /// The first answer's capabilities (`None`: none given, or too large).
    pub(crate) capabilities: Option<serde_json::Value>,
}

/// What of the host's session the guard keeps to replay to a new server.
/// Every part is bounded (see the constants of this module).
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// Handshake requests in flight: id → (method, params).
    pending_handshake: HashMap<Id, (&'static str, Option<Box<RawValue>>)>,
    /// The handshake the first answer settled.
    pub(crate) handshake: Option<Handshake>,
    /// The host sent `notifications/initialized` (its line, as sent).
    pub(crate) initialized: Option<Vec<u8>>,
    /// The last `logging/setLevel` params.
    pub(crate) log_level: Option<Box<RawValue>>,
    /// Subscriptions in flight: id → uri.
    pending_subscribe: HashMap<Id, String>,
    /// Resources subscribed to, in order.
    pub(crate) subscriptions: BTreeSet<String>,
    /// Subscriptions not kept (past [`MAX_SUBSCRIPTIONS`] or too long).
    pub(crate) subscriptions_dropped: u64,
    /// A handshake request too large to keep was seen: this session
    /// cannot be replayed.
    pub(crate) unreplayable: Option<String>,
}

impl Replay {
    /// No subscription kept or in flight.
    pub(crate) fn nothing_subscribed(&self) -> bool {
        self.subscriptions.is_empty() && self.pending_subscribe.is_empty()
    }

    /// A host request the guard tracks.
    pub(crate) fn on_host_request(&mut self, method: &str, id: &Id, params: Option<&RawValue>) {
        let size = params.map_or(0, |p| p.get().len());
        match method {
            "initialize" | "server/discover" => {
                let method = if method == "initialize" {
                    "initialize"
                } else {
                    "server/discover"
                };
                if size > MAX_REPLAY_BYTES {
                    self.unreplayable = Some(format!(
                        "its {method} params ({size} bytes) are larger than the guard keeps ({MAX_REPLAY_BYTES})"
                    ));
                    return;
                }
                if self.pending_handshake.len() < 8 {
                    self.pending_handshake
                        .insert(id.clone(), (method, params.map(RawValue::to_owned)));
                }
            }
            "logging/setLevel" if size <= MAX_REPLAY_BYTES => {
                self.log_level = params.map(RawValue::to_owned);
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = uri_of(params) else { return };
                if method == "resources/unsubscribe" {
                    self.subscriptions.remove(&uri);
                } else if uri.len() > MAX_SUBSCRIPTION_URI_BYTES
                    || self.subscriptions.len() + self.pending_subscribe.len() >= MAX_SUBSCRIPTIONS
                {
                    self.subscriptions_dropped += 1;
                } else {
                    self.pending_subscribe.insert(id.clone(), uri);
                }
            }
            _ => {}
        }
    }

    /// A host notification.
    pub(crate) fn on_host_notification(&mut self, method: &str, line: &[u8]) {
        if method == "notifications/initialized" && line.len() <= MAX_REPLAY_BYTES {
            let mut l = line.to_vec();
            l.push(b'\n');
            self.initialized = Some(l);
        }
    }

    /// The server answered the host's request `id`; `result` is its result
    /// (`None`: an error).
    pub(crate) fn on_response(&mut self, id: &Id, result: Option<&str>) {
        if let Some((method, params)) = self.pending_handshake.remove(id) {
            let Some(result) = result else { return };
            let versions = answered_versions(method, result);
            self.handshake = Some(Handshake {
                method,
                params,
                versions,
                capabilities: capabilities_of(result),
            });
        } else if let Some(uri) = self.pending_subscribe.remove(id) {
            if result.is_some() {
                self.subscriptions.insert(uri);
            }
        }
    }

    /// The server crashed: requests in flight are answered by the guard,
    /// so what they would have settled is forgotten.
    pub(crate) fn on_server_down(&mut self) {
        self.pending_handshake.clear();
        self.pending_subscribe.clear();
    }
}

/// The `uri` of a subscribe request.
fn uri_of(params: Option<&RawValue>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct P {
        uri: String,
    }
    serde_json::from_str::<P>(params?.get()).ok().map(|p| p.uri)
}

/// What a handshake's answer settles: `initialize`'s `protocolVersion`, or
/// `server/discover`'s `supportedVersions`.
pub(crate) fn answered_versions(method: &str, result: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct A {
        #[serde(default)]
        protocol_version: Option<String>,
        #[serde(default)]
        supported_versions: Vec<String>,
    }
    let Ok(a) = serde_json::from_str::<A>(result) else {
        return Vec::new();
    };
    if method == "initialize" {
        a.protocol_version.into_iter().collect()
    } else {
        a.supported_versions.into_iter().take(64).collect()
    }
}

/// A result's `capabilities`, when it has them and they are not larger
/// than [`MAX_REPLAY_BYTES`].
pub(crate) fn capabilities_of(result: &str) -> Option<serde_json::Value> {
    let raw = crate::wire::object::member(result, "capabilities")?;
    if raw.get().len() > MAX_REPLAY_BYTES {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Where `new` offers less than `old`: a member of `old` (at any depth of
/// objects) missing from `new`, or `true` in `old` and not in `new`. Other
/// values (strings, numbers, lists) may change. `None`: not narrowed.
pub(crate) fn narrowed(old: &serde_json::Value, new: &serde_json::Value) -> Option<String> {
    fn walk(old: &serde_json::Value, new: &serde_json::Value, path: &mut String) -> bool {
        use serde_json::Value;
        match (old, new) {
            (Value::Object(o), Value::Object(n)) => {
                for (k, v) in o {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    let Some(nv) = n.get(k) else { return true };
                    if walk(v, nv, path) {
                        return true;
                    }
                    path.truncate(len);
                }
                false
            }
            (Value::Object(_), _) => true,
            (Value::Bool(true), n) => n != &Value::Bool(true),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(old, new, &mut path).then(|| {
        if path.is_empty() {
            "capabilities".to_owned()
        } else {
            format!("capabilities.{path}")
        }
    })
}

/// Whether a restarted server's handshake answer fits the host's session;
/// `Err` says why not. `session_version` is the version the host's requests
/// use (2026-07-28: from their `_meta`).
pub(crate) fn compatible(
    first: &Handshake,
    result: &str,
    session_version: Option<&str>,
) -> Result<Vec<String>, String> {
    let versions = answered_versions(first.method, result);
    if first.method == "initialize" {
        if versions != first.versions {
            return Err(format!(
                "it answered initialize with protocol version {}, the session runs at {}",
                versions.first().map_or("(none)", String::as_str),
                first.versions.first().map_or("(none)", String::as_str),
            ));
        }
    } else if let Some(v) = session_version.or(first.versions.first().map(String::as_str)) {
        if !versions.iter().any(|o| o == v) {
            return Err(format!(
                "its server/discover no longer offers protocol version {v} (offers: {})",
                versions.join(", ")
            ));
        }
    }
    if let Some(old) = &first.capabilities {
        let new = capabilities_of(result).unwrap_or(serde_json::Value::Null);
        if let Some(path) = narrowed(old, &new) {
            return Err(format!(
                "its capabilities are narrower than the first server's ({path} is gone)"
            ));
        }
    }
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn narrowed_finds_a_missing_or_turned_off_capability_and_allows_more() {
        let old = json!({"tools": {"listChanged": true}, "logging": {}});
        assert_eq!(narrowed(&old, &old), None);
        let more = json!({"tools": {"listChanged": true}, "logging": {}, "prompts": {}});
        assert_eq!(narrowed(&old, &more), None);
        let off = json!({"tools": {"listChanged": false}, "logging": {}});
        assert_eq!(
            narrowed(&old, &off).as_deref(),
            Some("capabilities.tools.listChanged")
        );
        let gone = json!({"tools": {"listChanged": true}});
        assert_eq!(
            narrowed(&old, &gone).as_deref(),
            Some("capabilities.logging")
        );
        assert_eq!(
            narrowed(&old, &serde_json::Value::Null).as_deref(),
            Some("capabilities")
        );
        // Values other than `true` and objects may change.
        let old = json!({"experimental": {"x": 1, "y": "a", "z": false}});
        let new = json!({"experimental": {"x": 2, "y": "b", "z": true}});
        assert_eq!(narrowed(&old, &new), None);
    }

    #[test]
    fn compatible_wants_the_same_version_and_no_narrower_capabilities() {
        let first = Handshake {
            method: "initialize",
            params: None,
            versions: vec!["2025-11-25".into()],
            capabilities: Some(json!({"tools": {}})),
        };
        let same = r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}}}"#;
        assert!(compatible(&first, same, None).is_ok());
        let older = r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}}}"#;
        let e = compatible(&first, older, None).unwrap_err();
        assert!(e.contains("2025-06-18") && e.contains("2025-11-25"), "{e}");
        let fewer = r#"{"protocolVersion":"2025-11-25","capabilities":{}}"#;
        let e = compatible(&first, fewer, None).unwrap_err();
        assert!(e.contains("capabilities.tools"), "{e}");

        let discover = Handshake {
            method: "server/discover",
            params: None,
            versions: vec!["2026-07-28".into()],
            capabilities: Some(json!({"tools": {}})),
        };
        let ok = r#"{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{}}}"#;
        assert!(compatible(&discover, ok, Some("2026-07-28")).is_ok());
        let gone = r#"{"supportedVersions":["2025-11-25"],"capabilities":{"tools":{}}}"#;
        assert!(compatible(&discover, gone, Some("2026-07-28")).is_err());
    }

    #[test]
    fn the_backoff_doubles_up_to_its_bound() {
        let mut c = RestartConfig::default();
        c.backoff(Duration::from_millis(100));
        assert_eq!(c.backoff_for(1), Duration::from_millis(100));
        assert_eq!(c.backoff_for(2), Duration::from_millis(200));
        assert_eq!(c.backoff_for(4), Duration::from_millis(800));
        assert_eq!(c.backoff_for(40), MAX_RESTART_BACKOFF);
        c.backoff(Duration::from_secs(20));
        assert_eq!(c.backoff_for(3), Duration::from_secs(20));
    }

    #[test]
    fn a_failure_allows_restarts_up_to_the_count_unless_never() {
        let mut c = RestartConfig::default();
        assert!(!c.allows_after_failure(1), "never by default");
        c.policy(RestartPolicy::OnFailure).max_restarts(2);
        assert!(c.allows_after_failure(1));
        assert!(c.allows_after_failure(2));
        assert!(!c.allows_after_failure(3));
        c.policy(RestartPolicy::Always).max_restarts(0);
        assert!(!c.allows_after_failure(1));
    }

    #[test]
    fn the_policy_says_which_ends_restart() {
        let mut c = RestartConfig::default();
        assert!(!c.restarts_after(Some(ExitStatus::Code(1))));
        c.policy(RestartPolicy::OnFailure);
        assert!(c.restarts_after(Some(ExitStatus::Code(1))));
        assert!(c.restarts_after(Some(ExitStatus::Signal(9))));
        assert!(c.restarts_after(None));
        assert!(!c.restarts_after(Some(ExitStatus::Code(0))));
        c.policy(RestartPolicy::Always);
        assert!(c.restarts_after(Some(ExitStatus::Code(0))));
        c.max_restarts(0);
        assert!(!c.restarts_after(Some(ExitStatus::Code(1))));
    }

    #[test]
    fn the_replay_keeps_the_answered_handshake_and_live_subscriptions() {
        let mut r = Replay::default();
        let params = RawValue::from_string(r#"{"protocolVersion":"2025-11-25"}"#.into()).unwrap();
        r.on_host_request("initialize", &Id::Number(0), Some(&params));
        r.on_response(
            &Id::Number(0),
            Some(r#"{"protocolVersion":"2025-11-25","capabilities":{"resources":{"subscribe":true}}}"#),
        );
        let h = r.handshake.as_ref().expect("kept");
        assert_eq!(h.versions, ["2025-11-25"]);
        let sub = RawValue::from_string(r#"{"uri":"file:///a"}"#.into()).unwrap();
        r.on_host_request("resources/subscribe", &Id::Number(1), Some(&sub));
        r.on_host_request("resources/subscribe", &Id::Number(2), Some(&sub));
        r.on_response(&Id::Number(1), Some("{}"));
        r.on_response(&Id::Number(2), None);
        assert_eq!(r.subscriptions.len(), 1);
        r.on_host_request("resources/unsubscribe", &Id::Number(3), Some(&sub));
        assert!(r.subscriptions.is_empty());
        // A handshake answered with an error settles nothing.
        let mut r = Replay::default();
        r.on_host_request("initialize", &Id::Number(0), Some(&params));
        r.on_response(&Id::Number(0), None);
        assert!(r.handshake.is_none());
    }
}
