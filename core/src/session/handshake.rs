//! The protocol revisions spoken and how a session agrees on one: the
//! `initialize` handshake of 2025-11-25 and before, and the
//! `server/discover` probe and per-request `_meta` of 2026-07-28.
//!
//! **Up to 2025-11-25** (the *handshake* revisions) the host sends
//! `initialize` proposing the newest version it supports; the server answers
//! with that version when it supports it, else with its own choice
//! ([`negotiate_version`]); if the host does not support the answer, the
//! session must not go on. Then `notifications/initialized`.
//!
//! **From 2026-07-28** (the *modern* revisions, [`is_modern`]) there is no
//! handshake: a client may ask `server/discover` for the versions and
//! capabilities a server offers, and every request carries its own context
//! in `params._meta` ([`META_PROTOCOL_VERSION`], [`META_CLIENT_CAPABILITIES`],
//! [`META_CLIENT_INFO`]). A server that does not speak the version a request
//! names answers [`UNSUPPORTED_PROTOCOL_VERSION`] with the versions it does.
//! Clients probe with `server/discover` and fall back to `initialize` on any
//! error (the spec forbids keying the fallback to one code).

use serde::{Deserialize, Serialize};

use crate::wire::message::{to_raw, RawValue};
use crate::wire::object::merge_meta;

/// Protocol versions this crate speaks, newest first: the modern ones
/// ([`MODERN_PROTOCOL_VERSIONS`]) then the handshake ones.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &[
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// The modern protocol versions this crate speaks (no handshake; context in
/// each request's `_meta`), newest first.
pub const MODERN_PROTOCOL_VERSIONS: &[&str] = &["2026-07-28"];

/// The newest protocol version this crate speaks: what a client proposes in
/// its `server/discover` probe.
pub const LATEST_PROTOCOL_VERSION: &str = SUPPORTED_PROTOCOL_VERSIONS[0];

/// The newest version with the `initialize` handshake: what a client proposes
/// when it falls back to `initialize`, and what a server answers to an
/// `initialize` asking for a version it does not speak.
pub const LATEST_HANDSHAKE_VERSION: &str = "2025-11-25";

/// The method of the 2026-07-28 probe.
pub const DISCOVER: &str = "server/discover";

/// The `_meta` key of a modern request naming its protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a modern request carrying the client's capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key of a modern request carrying the client's name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key of a modern request asking for log messages at a level.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The `_meta` key of a `server/discover` result carrying the server's name
/// and version.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Error code: the request names a protocol version the server does not
/// speak; `data` is `{"requested": …, "supported": […]}`.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// Error code: the request lacks a client capability the server requires.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;

/// Whether `version` is a modern revision (2026-07-28 or later: no
/// handshake, per-request `_meta`). Versions are dates, so a later unknown
/// one counts as modern too.
pub fn is_modern(version: &str) -> bool {
    version >= MODERN_PROTOCOL_VERSIONS[MODERN_PROTOCOL_VERSIONS.len() - 1]
}

/// Who a peer says it is (`clientInfo`, `serverInfo`).
///
/// `#[non_exhaustive]`: the protocol has grown this object before (`title`),
/// so build one with [`Implementation::new`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct Implementation {
    /// Name, e.g. `mcp-stdio`.
    pub name: String,
    /// Version string.
    pub version: String,
}

impl Implementation {
    /// A name and a version, e.g. `Implementation::new("my-host", "1.2.0")`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
        }
    }
}

impl Default for Implementation {
    fn default() -> Self {
        Self::new("mcp-stdio", env!("CARGO_PKG_VERSION"))
    }
}

/// The version a server answers to an `initialize` that asked for
/// `requested`: that version when this crate speaks it (2026-07-28
/// included), else [`LATEST_HANDSHAKE_VERSION`] (the client then decides
/// whether it can go on).
pub fn negotiate_version(requested: &str) -> &'static str {
    SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_HANDSHAKE_VERSION)
}

/// Builds the `initialize` params: [`LATEST_HANDSHAKE_VERSION`], the given
/// client capabilities (raw JSON object; `{}` when `None`) and client info.
pub fn initialize_params(
    client: &Implementation,
    capabilities: Option<&RawValue>,
) -> Box<RawValue> {
    initialize_params_at(LATEST_HANDSHAKE_VERSION, client, capabilities)
}

/// Builds the `initialize` params proposing `version` (a pinned handshake
/// version), with the client capabilities (`{}` when `None`) and info.
pub fn initialize_params_at(
    version: &str,
    client: &Implementation,
    capabilities: Option<&RawValue>,
) -> Box<RawValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Params<'a> {
        protocol_version: &'a str,
        capabilities: &'a RawValue,
        client_info: &'a Implementation,
    }
    let empty = RawValue::from_string("{}".to_owned()).expect("`{}` is valid JSON");
    to_raw(&Params {
        protocol_version: version,
        capabilities: capabilities.unwrap_or(&empty),
        client_info: client,
    })
    .expect("strings and raw values always serialize")
}

/// The `_meta` pairs every request of a modern session carries: the
/// protocol version, the client's capabilities (`{}` when `None`) and its
/// name and version. Set on a session with
/// [`ClientSession::stamp_requests`](crate::ClientSession::stamp_requests);
/// its size is that of the capabilities plus about 150 bytes, added to
/// every request (a request past the wire limit with it fails to send).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStamp {
    pairs: [(&'static str, String); 3],
}

impl RequestStamp {
    /// The stamp of `version` for this client.
    pub fn new(version: &str, client: &Implementation, capabilities: Option<&RawValue>) -> Self {
        // Strings and an `Implementation` always serialize.
        let quoted = serde_json::to_string(version).unwrap_or_else(|_| "\"\"".to_owned());
        let info = serde_json::to_string(client).unwrap_or_else(|_| "{}".to_owned());
        let caps = capabilities.map_or("{}", RawValue::get).to_owned();
        Self {
            pairs: [
                (META_PROTOCOL_VERSION, quoted),
                (META_CLIENT_CAPABILITIES, caps),
                (META_CLIENT_INFO, info),
            ],
        }
    }

    /// `params` (a JSON object's text, or none) with the stamp's keys set in
    /// its `_meta`, the caller's other `_meta` keys (a `progressToken`)
    /// kept; `None` when `params` is not a JSON object.
    pub fn apply(&self, params: Option<&str>) -> Option<Box<RawValue>> {
        let pairs: [(&str, &str); 3] = [
            (self.pairs[0].0, &self.pairs[0].1),
            (self.pairs[1].0, &self.pairs[1].1),
            (self.pairs[2].0, &self.pairs[2].1),
        ];
        let text = merge_meta(params, &pairs)?;
        RawValue::from_string(text).ok()
    }
}

/// The params of a `server/discover` probe at `version`: only `_meta`.
pub fn discover_params(
    version: &str,
    client: &Implementation,
    capabilities: Option<&RawValue>,
) -> Box<RawValue> {
    RequestStamp::new(version, client, capabilities)
        .apply(None)
        // `merge_meta(None, …)` of valid JSON members is always an object.
        .unwrap_or_else(|| RawValue::from_string("{}".to_owned()).expect("`{}` is valid JSON"))
}

/// What the server said about itself in its `initialize` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InitializeResult {
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// The server's capabilities, raw.
    pub capabilities: Box<RawValue>,
    /// The server's name and version.
    pub server_info: Implementation,
    /// Optional usage instructions for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// Why an `initialize` result cannot start a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The result is not a valid `InitializeResult`.
    #[error("invalid initialize result: {0}")]
    InvalidResult(String),
    /// The server chose a protocol version this crate does not speak (or a
    /// pinned one this crate does not speak was asked for).
    #[error("server chose unsupported protocol version {0:?}")]
    UnsupportedVersion(String),
    /// The result of `server/discover` is not a valid discover result.
    #[error("invalid server/discover result: {0}")]
    InvalidDiscoverResult(String),
}

/// Parses and checks the server's `initialize` result (its JSON text).
pub fn check_initialize_result(result: &str) -> Result<InitializeResult, HandshakeError> {
    let parsed: InitializeResult =
        serde_json::from_str(result).map_err(|e| HandshakeError::InvalidResult(e.to_string()))?;
    if !SUPPORTED_PROTOCOL_VERSIONS.contains(&parsed.protocol_version.as_str()) {
        return Err(HandshakeError::UnsupportedVersion(parsed.protocol_version));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_propose_the_latest_version() {
        let p = initialize_params(&Implementation::default(), None);
        let v: serde_json::Value = serde_json::from_str(p.get()).unwrap();
        assert_eq!(v["protocolVersion"], LATEST_HANDSHAKE_VERSION);
        assert_eq!(v["clientInfo"]["name"], "mcp-stdio");
        assert!(v["capabilities"].as_object().unwrap().is_empty());
    }

    #[test]
    fn negotiate_version_echoes_a_supported_version_else_answers_the_latest() {
        for v in SUPPORTED_PROTOCOL_VERSIONS {
            assert_eq!(negotiate_version(v), *v);
        }
        assert_eq!(negotiate_version("2023-01-01"), LATEST_HANDSHAKE_VERSION);
        assert_eq!(negotiate_version(""), LATEST_HANDSHAKE_VERSION);
        assert_eq!(negotiate_version("2099-01-01"), LATEST_HANDSHAKE_VERSION);
    }

    #[test]
    fn modern_means_2026_07_28_and_later() {
        assert!(is_modern("2026-07-28"));
        assert!(is_modern("2027-01-01"));
        assert!(!is_modern("2025-11-25"));
        assert!(!is_modern(""));
        for v in MODERN_PROTOCOL_VERSIONS {
            assert!(SUPPORTED_PROTOCOL_VERSIONS.contains(v));
        }
        assert!(!is_modern(LATEST_HANDSHAKE_VERSION));
        assert!(SUPPORTED_PROTOCOL_VERSIONS.contains(&LATEST_HANDSHAKE_VERSION));
    }

    #[test]
    fn negotiation_accepts_known_versions_only() {
        let ok = RawValue::from_string(
            r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}"#.into(),
        )
        .unwrap();
        assert_eq!(
            check_initialize_result(ok.get()).unwrap().protocol_version,
            "2025-06-18"
        );
        let old = RawValue::from_string(
            r#"{"protocolVersion":"2023-01-01","capabilities":{},"serverInfo":{"name":"s","version":"1"}}"#.into(),
        )
        .unwrap();
        assert_eq!(
            check_initialize_result(old.get()).unwrap_err(),
            HandshakeError::UnsupportedVersion("2023-01-01".into())
        );
        let bad = RawValue::from_string(r#"{"capabilities":{}}"#.into()).unwrap();
        assert!(matches!(
            check_initialize_result(bad.get()),
            Err(HandshakeError::InvalidResult(_))
        ));
    }
}
