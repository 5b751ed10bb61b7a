//! The MCP initialize handshake: the request the host sends, how the
//! server's answer is judged, and how a server picks its answer (protocol
//! version negotiation).
//!
//! The host proposes the newest version it supports; the server answers with
//! that version when it supports it, else with its own latest
//! ([`negotiate_version`]); if the host does not support the answer, the
//! session must not go on.

use serde::{Deserialize, Serialize};

use crate::wire::message::{to_raw, RawValue};

/// Protocol versions this crate speaks, newest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] =
    &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The version proposed in `initialize`.
pub const LATEST_PROTOCOL_VERSION: &str = SUPPORTED_PROTOCOL_VERSIONS[0];

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

/// The version a server answers to a client that asked for `requested`:
/// that version when this crate speaks it, else [`LATEST_PROTOCOL_VERSION`]
/// (the client then decides whether it can go on).
pub fn negotiate_version(requested: &str) -> &'static str {
    SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_PROTOCOL_VERSION)
}

/// Builds the `initialize` params: the latest protocol version, the given
/// client capabilities (raw JSON object; `{}` when `None`) and client info.
pub fn initialize_params(
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
        protocol_version: LATEST_PROTOCOL_VERSION,
        capabilities: capabilities.unwrap_or(&empty),
        client_info: client,
    })
    .expect("strings and raw values always serialize")
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
    /// The server chose a protocol version this crate does not speak.
    #[error("server chose unsupported protocol version {0:?}")]
    UnsupportedVersion(String),
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
        assert_eq!(v["protocolVersion"], LATEST_PROTOCOL_VERSION);
        assert_eq!(v["clientInfo"]["name"], "mcp-stdio");
        assert!(v["capabilities"].as_object().unwrap().is_empty());
    }

    #[test]
    fn negotiate_version_echoes_a_supported_version_else_answers_the_latest() {
        for v in SUPPORTED_PROTOCOL_VERSIONS {
            assert_eq!(negotiate_version(v), *v);
        }
        assert_eq!(negotiate_version("2023-01-01"), LATEST_PROTOCOL_VERSION);
        assert_eq!(negotiate_version(""), LATEST_PROTOCOL_VERSION);
        assert_eq!(negotiate_version("2099-01-01"), LATEST_PROTOCOL_VERSION);
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
