//! Agreeing on a protocol revision with a server, sans-IO: the client's half
//! of the 2026-07-28 `server/discover` probe and the fallback to the
//! `initialize` handshake of 2025-11-25 and before.
//!
//! A [`Negotiation`] says which request to send next ([`NegotiationStep`]);
//! the caller sends it through its usual request path (so deadlines, the
//! wire limit and the "never cancel the handshake" rule apply as to any
//! request) and feeds the outcome back. Every adapter's
//! `Client::initialize` is this loop:
//!
//! ```text
//! let mut step = negotiation.start();
//! loop {
//!     step = match step {
//!         Request { method, params, timeout } => negotiation.handle_response(request(method, params, timeout)),
//!         Notify { method } => negotiation.handle_notified(notify(method)),
//!         Done(result) => break result,
//!     }
//! }
//! ```
//!
//! # The policy ([`VersionPolicy`])
//!
//! - **Auto** (default): `server/discover` at [`LATEST_PROTOCOL_VERSION`],
//!   bounded by the probe timeout ([`DEFAULT_DISCOVER_TIMEOUT`]). A result
//!   listing a modern version we speak: the newest such version, no
//!   handshake. Error -32022 naming a mutual modern version: one retry at
//!   it. Anything else that is an answer or its absence (any other error
//!   code, -32022 naming only handshake versions, a timeout, an unusable or
//!   unparsable answer, a result listing only handshake versions): the
//!   `initialize` handshake at [`LATEST_HANDSHAKE_VERSION`] — the fallback is
//!   not keyed to one error code. A -32022 whose list names only versions we
//!   do not speak at all is an incompatibility, not a legacy server: it
//!   fails with [`InitializeError::NoMutualVersion`]. An `initialize`
//!   answered -32022 naming a mutual modern version (a probe that timed out
//!   here but reached a slow server, which then settled on the modern
//!   revision) re-probes once at it, if no retry was used yet.
//! - **Pin a modern version**: `server/discover` at that version, under the
//!   session's default timeout; any failure is the result, no fallback.
//! - **Pin a handshake version**: `initialize` proposing it; the server must
//!   answer that version.
//!
//! A session that ends without an answer (`SessionClosed`), a request that
//! could not be sent, or a cancel by the application ends the negotiation
//! with that error: there is nothing to fall back on.
//!
//! # Limits
//!
//! Everything kept comes from one response, itself under the wire limit;
//! the versions a server offers are kept up to [`MAX_OFFERED_VERSIONS`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::session::client::{RequestError, RequestFailure, INITIALIZE};
use crate::session::handshake::{
    check_initialize_result, discover_params, initialize_params_at, is_modern, HandshakeError,
    Implementation, DISCOVER, LATEST_HANDSHAKE_VERSION, LATEST_PROTOCOL_VERSION,
    MODERN_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::wire::message::{ErrorObject, RawResult, RawValue};

/// How long the automatic `server/discover` probe waits for an answer before
/// falling back to `initialize`: 10 s (rmcp's choice too). A server that
/// ignores unknown methods still connects, this much later; one that starts
/// slowly and answers the probe late is handled by the -32022 re-probe.
pub const DEFAULT_DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many of the versions a server offers (a discover result's
/// `supportedVersions`, a -32022 error's `supported`) are kept; the rest are
/// ignored.
pub const MAX_OFFERED_VERSIONS: usize = 32;

/// The notification that ends the `initialize` handshake.
pub const INITIALIZED: &str = "notifications/initialized";

/// Which protocol revision a `Client` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum VersionPolicy {
    /// Probe with `server/discover`, fall back to `initialize` (the module
    /// docs say when). The default.
    #[default]
    Auto,
    /// This version only: a modern one with `server/discover` and no
    /// fallback, a handshake one with `initialize` alone. A version this
    /// crate does not speak fails before anything is sent.
    Pin(String),
}

/// How a session's version was agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NegotiatedVia {
    /// A `server/discover` result (2026-07-28 and later): no handshake; every
    /// request carries its context in `_meta`.
    Discover,
    /// The `initialize` handshake (2025-11-25 and before).
    Initialize,
}

/// Why an automatic negotiation used `initialize` after probing.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FallbackReason {
    /// The probe was answered with this JSON-RPC error (-32601 from a server
    /// that does not know `server/discover`, or -32022 naming only
    /// handshake versions, or any other).
    ProbeRejected(ErrorObject),
    /// No answer within the probe timeout (the probe is not cancelled).
    ProbeTimedOut(Duration),
    /// The probe's answer could not be used (over the wire limit, not a
    /// JSON-RPC response): what was wrong.
    ProbeUnusable(String),
    /// The probe's result is not a discover result: why.
    InvalidDiscoverResult(String),
    /// The discover result lists no modern version this crate speaks: the
    /// versions it lists.
    NoModernVersion(Vec<String>),
}

/// What a negotiation agreed with the server.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Negotiated {
    /// The protocol version of the session.
    pub protocol_version: String,
    /// How it was agreed.
    pub via: NegotiatedVia,
    /// The server's capabilities, raw.
    pub capabilities: Box<RawValue>,
    /// The server's name and version: always from `initialize`, optional in
    /// a discover result (`_meta["io.modelcontextprotocol/serverInfo"]`).
    pub server_info: Option<Implementation>,
    /// Usage instructions for the model, if the server gave some.
    pub instructions: Option<String>,
    /// The versions the server offers, when it said (a discover result, a
    /// -32022 error), at most [`MAX_OFFERED_VERSIONS`].
    pub supported_versions: Option<Vec<String>>,
    /// Why `initialize` was used after a probe (automatic policy only).
    pub fallback: Option<FallbackReason>,
}

impl Negotiated {
    /// Whether the session speaks a modern revision (no handshake; every
    /// request stamped with `_meta`).
    pub fn is_modern(&self) -> bool {
        is_modern(&self.protocol_version)
    }
}

/// What the caller does next, from [`Negotiation::start`] and the `handle_*`
/// methods.
#[derive(Debug)]
#[must_use]
pub enum NegotiationStep {
    /// Send this request through the usual request path (never cancel it,
    /// the session enforces that) and feed its outcome to
    /// [`Negotiation::handle_response`].
    Request {
        /// `server/discover` or `initialize`.
        method: &'static str,
        /// Its params.
        params: Box<RawValue>,
        /// Its timeout (`None`: the session's default).
        timeout: Option<Duration>,
    },
    /// Send this notification (no params) and feed whether it went out to
    /// [`Negotiation::handle_notified`].
    Notify {
        /// `notifications/initialized`.
        method: &'static str,
    },
    /// The negotiation is over. On success, tell the session
    /// (`Command::Negotiated`), so modern requests are stamped.
    Done(Result<Negotiated, InitializeError>),
}

#[derive(Debug, Clone)]
enum State {
    Start,
    Probing { version: String, retried: bool },
    Initializing { version: String, retried: bool },
    Notifying(Box<Negotiated>),
    Done(Result<Box<Negotiated>, InitializeError>),
}

/// The client's half of agreeing on a protocol revision (sans-IO). See the
/// module docs for the policy and the loop that drives it.
#[derive(Debug, Clone)]
pub struct Negotiation {
    policy: VersionPolicy,
    client_info: Implementation,
    capabilities: Option<Box<RawValue>>,
    discover_timeout: Duration,
    state: State,
    fallback: Option<FallbackReason>,
    offered: Option<Vec<String>>,
}

impl Negotiation {
    /// A negotiation under `policy`, saying who the client is and what it
    /// can do (`None`: `{}`); the automatic probe waits `discover_timeout`.
    pub fn new(
        policy: VersionPolicy,
        client_info: Implementation,
        capabilities: Option<Box<RawValue>>,
        discover_timeout: Duration,
    ) -> Self {
        Self {
            policy,
            client_info,
            capabilities,
            discover_timeout,
            state: State::Start,
            fallback: None,
            offered: None,
        }
    }

    fn pinned(&self) -> bool {
        matches!(self.policy, VersionPolicy::Pin(_))
    }

    /// The first step. Called again (or after the end), it repeats the
    /// current step.
    pub fn start(&mut self) -> NegotiationStep {
        if matches!(self.state, State::Start) {
            match &self.policy {
                VersionPolicy::Auto => {
                    return self.probe(LATEST_PROTOCOL_VERSION.to_owned(), false);
                }
                VersionPolicy::Pin(v) if !SUPPORTED_PROTOCOL_VERSIONS.contains(&v.as_str()) => {
                    let e = HandshakeError::UnsupportedVersion(v.clone());
                    return self.done(Err(e.into()));
                }
                VersionPolicy::Pin(v) if is_modern(v) => return self.probe(v.clone(), false),
                VersionPolicy::Pin(v) => return self.initialize(v.clone(), false),
            }
        }
        self.step()
    }

    /// The outcome of the request of the last [`NegotiationStep::Request`].
    /// Fed when no request is awaited, it is ignored and the current step
    /// is repeated.
    pub fn handle_response(&mut self, outcome: Result<RawResult, RequestError>) -> NegotiationStep {
        match self.state.clone() {
            State::Probing { version, retried } => self.on_probe(version, retried, outcome),
            State::Initializing { version, retried } => {
                self.on_initialize(&version, retried, outcome)
            }
            _ => self.step(),
        }
    }

    /// Whether the notification of the last [`NegotiationStep::Notify`] went
    /// out. Fed when none is awaited, it is ignored.
    pub fn handle_notified(&mut self, sent: Result<(), RequestError>) -> NegotiationStep {
        match std::mem::replace(&mut self.state, State::Start) {
            State::Notifying(n) => match sent {
                Ok(()) => self.done(Ok(*n)),
                Err(e) => self.done(Err(e.into())),
            },
            other => {
                self.state = other;
                self.step()
            }
        }
    }

    /// The current step, rebuilt from the state.
    fn step(&mut self) -> NegotiationStep {
        match self.state.clone() {
            State::Start => self.start(),
            State::Probing { version, retried } => self.probe(version, retried),
            State::Initializing { version, retried } => self.initialize(version, retried),
            State::Notifying(_) => NegotiationStep::Notify {
                method: INITIALIZED,
            },
            State::Done(r) => NegotiationStep::Done(r.map(|n| *n)),
        }
    }

    fn done(&mut self, result: Result<Negotiated, InitializeError>) -> NegotiationStep {
        self.state = State::Done(result.clone().map(Box::new));
        NegotiationStep::Done(result)
    }

    fn probe(&mut self, version: String, retried: bool) -> NegotiationStep {
        let params = discover_params(&version, &self.client_info, self.capabilities.as_deref());
        let timeout = (!self.pinned()).then_some(self.discover_timeout);
        self.state = State::Probing { version, retried };
        NegotiationStep::Request {
            method: DISCOVER,
            params,
            timeout,
        }
    }

    fn initialize(&mut self, version: String, retried: bool) -> NegotiationStep {
        let params =
            initialize_params_at(&version, &self.client_info, self.capabilities.as_deref());
        self.state = State::Initializing { version, retried };
        NegotiationStep::Request {
            method: INITIALIZE,
            params,
            timeout: None,
        }
    }

    fn fall_back(&mut self, reason: FallbackReason, retried: bool) -> NegotiationStep {
        tracing::debug!(
            ?reason,
            "server/discover did not settle a modern version; falling back to initialize"
        );
        self.fallback = Some(reason);
        self.initialize(LATEST_HANDSHAKE_VERSION.to_owned(), retried)
    }

    fn on_probe(
        &mut self,
        version: String,
        retried: bool,
        outcome: Result<RawResult, RequestError>,
    ) -> NegotiationStep {
        let pinned = self.pinned();
        let error = match outcome {
            Ok(result) => return self.on_discover_result(&version, retried, result.get()),
            Err(e) => e,
        };
        if let Some(err) = error.server_error() {
            if err.code == UNSUPPORTED_PROTOCOL_VERSION {
                let offered = offered_versions(err);
                if offered.is_some() {
                    self.offered.clone_from(&offered);
                }
                if pinned {
                    return self.no_mutual(offered.unwrap_or_default());
                }
                if let Some(v) = offered.as_deref().and_then(newest_modern) {
                    if !retried {
                        return self.probe(v.to_owned(), true);
                    }
                }
                if let Some(offered) = offered {
                    if !offered.iter().any(|v| speaks_handshake(v)) {
                        return self.no_mutual(offered);
                    }
                }
                return self.fall_back(FallbackReason::ProbeRejected(err.clone()), retried);
            }
        }
        if pinned {
            return self.done(Err(error.into()));
        }
        let reason = match &error {
            RequestError::Failed(RequestFailure::Server(err)) => {
                FallbackReason::ProbeRejected(err.clone())
            }
            RequestError::Failed(RequestFailure::TimedOut { after, .. }) => {
                FallbackReason::ProbeTimedOut(*after)
            }
            RequestError::Failed(
                f @ (RequestFailure::ResponseTooLarge { .. }
                | RequestFailure::MalformedResponse(_)
                | RequestFailure::InvalidUtf8Response { .. }),
            ) => FallbackReason::ProbeUnusable(f.to_string()),
            // Closed, cancelled or never sent: nothing to fall back on.
            _ => return self.done(Err(error.into())),
        };
        self.fall_back(reason, retried)
    }

    fn on_discover_result(&mut self, version: &str, retried: bool, text: &str) -> NegotiationStep {
        let parsed = match serde_json::from_str::<DiscoverResult>(text) {
            Ok(d) => d,
            Err(e) if self.pinned() => {
                return self.done(Err(
                    HandshakeError::InvalidDiscoverResult(e.to_string()).into()
                ));
            }
            Err(e) => {
                return self.fall_back(
                    FallbackReason::InvalidDiscoverResult(e.to_string()),
                    retried,
                )
            }
        };
        let mut offered = parsed.supported_versions;
        offered.truncate(MAX_OFFERED_VERSIONS);
        let chosen = if self.pinned() {
            offered.iter().find(|v| *v == version).cloned()
        } else {
            newest_modern(&offered).map(ToOwned::to_owned)
        };
        let Some(chosen) = chosen else {
            if self.pinned() {
                return self.no_mutual(offered);
            }
            self.offered = Some(offered.clone());
            return self.fall_back(FallbackReason::NoModernVersion(offered), retried);
        };
        let server_info = parsed
            .meta
            .and_then(|m| m.server_info)
            .and_then(|raw| serde_json::from_str::<Implementation>(raw.get()).ok());
        let negotiated = Negotiated {
            protocol_version: chosen,
            via: NegotiatedVia::Discover,
            capabilities: parsed.capabilities,
            server_info,
            instructions: parsed.instructions,
            supported_versions: Some(offered),
            fallback: self.fallback.take(),
        };
        self.done(Ok(negotiated))
    }

    fn on_initialize(
        &mut self,
        version: &str,
        retried: bool,
        outcome: Result<RawResult, RequestError>,
    ) -> NegotiationStep {
        let result = match outcome {
            Ok(r) => r,
            Err(e) => {
                // A server that settled on a modern revision meanwhile (our
                // probe timed out here but reached it) names its versions.
                let modern = e
                    .server_error()
                    .filter(|err| err.code == UNSUPPORTED_PROTOCOL_VERSION)
                    .and_then(offered_versions)
                    .and_then(|o| newest_modern(&o).map(ToOwned::to_owned));
                if let (Some(v), false, false) = (modern, retried, self.pinned()) {
                    return self.probe(v, true);
                }
                return self.done(Err(e.into()));
            }
        };
        let init = match check_initialize_result(result.get()) {
            Ok(i) => i,
            Err(e) => return self.done(Err(e.into())),
        };
        if is_modern(&init.protocol_version) {
            let e = HandshakeError::UnsupportedVersion(init.protocol_version);
            return self.done(Err(e.into()));
        }
        if self.pinned() && init.protocol_version != version {
            return self.no_mutual(vec![init.protocol_version]);
        }
        let negotiated = Negotiated {
            protocol_version: init.protocol_version,
            via: NegotiatedVia::Initialize,
            capabilities: init.capabilities,
            server_info: Some(init.server_info),
            instructions: init.instructions,
            supported_versions: self.offered.take(),
            fallback: self.fallback.take(),
        };
        self.state = State::Notifying(Box::new(negotiated));
        NegotiationStep::Notify {
            method: INITIALIZED,
        }
    }

    fn no_mutual(&mut self, offered: Vec<String>) -> NegotiationStep {
        self.done(Err(InitializeError::NoMutualVersion { offered }))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoverResult {
    supported_versions: Vec<String>,
    capabilities: Box<RawValue>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Option<DiscoverMeta>,
}

#[derive(Deserialize)]
struct DiscoverMeta {
    #[serde(default, rename = "io.modelcontextprotocol/serverInfo")]
    server_info: Option<Box<RawValue>>,
}

/// The `supported` list of a -32022 error's `data`, at most
/// [`MAX_OFFERED_VERSIONS`]; `None` when it has none.
fn offered_versions(err: &ErrorObject) -> Option<Vec<String>> {
    #[derive(Deserialize)]
    struct Data {
        supported: Vec<String>,
    }
    let data: Data = serde_json::from_str(err.data.as_ref()?.get()).ok()?;
    let mut v = data.supported;
    v.truncate(MAX_OFFERED_VERSIONS);
    Some(v)
}

/// The newest modern version this crate speaks among `offered`.
fn newest_modern(offered: &[String]) -> Option<&'static str> {
    MODERN_PROTOCOL_VERSIONS
        .iter()
        .find(|v| offered.iter().any(|o| o == *v))
        .copied()
}

/// Whether `v` is a handshake version this crate speaks.
fn speaks_handshake(v: &str) -> bool {
    !is_modern(v) && SUPPORTED_PROTOCOL_VERSIONS.contains(&v)
}

/// Why `initialize` (the negotiation of a protocol version, see
/// [`Negotiation`](crate::Negotiation)) failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InitializeError {
    /// The request failed (timeout, server error, session closed, …).
    #[error("initialize request failed: {0}")]
    Request(#[from] RequestError),
    /// The server's answer cannot start a session.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The server offers no protocol version this client speaks, or not the
    /// pinned one: the versions it offers (a discover result's list, a
    /// -32022 error's `supported`, or the one `initialize` answered).
    #[error("no mutual protocol version: the server offers {offered:?}")]
    NoMutualVersion {
        /// The versions the server offers.
        offered: Vec<String>,
    },
}

#[cfg(test)]
mod tests;
