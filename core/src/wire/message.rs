//! JSON-RPC 2.0 messages as MCP uses them over stdio.
//!
//! Payloads (`params`, `result`, `error.data`) stay raw JSON
//! ([`RawValue`]): the core checks the envelope and never builds a tree of
//! untrusted data. Decoding takes one frame (see [`crate::wire::frame`]) and accepts
//! exactly one JSON object; a batch array is a typed error.
//!
//! Encoding writes compact JSON and refuses, with a typed error, any message
//! whose bytes would pass the wire limit. It stops writing as soon as the limit
//! is passed, so refusing a huge message never allocates more than the limit.
//! Raw payloads may hold insignificant whitespace, including newlines; the
//! encoder turns every raw `\n` and `\r` into a space (in valid JSON they can
//! only be whitespace), so an encoded message never holds a line break before
//! its final `\n`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
pub use serde_json::value::RawValue;

use crate::wire::json::LimitedWriter;

/// JSON-RPC error code: invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC error code: the JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC error code: the method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code: invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC error code: internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// Implementation-defined server error: used for overload replies.
pub const SERVER_ERROR: i64 = -32000;
/// JSON-RPC error code of every message refused at a wire limit, in every
/// component (the `Client`s' [`RequestFailure::ResponseTooLarge`] as rmcp
/// sees it, `serve`, the guard, the rmcp transports): -32000, the first
/// implementation-defined server error. Built by [`wire_limit_error`].
///
/// [`RequestFailure::ResponseTooLarge`]: crate::session::client::RequestFailure::ResponseTooLarge
pub const WIRE_LIMIT_EXCEEDED: i64 = -32000;

/// How a client's user raises its wire limit, as they would write it:
/// every adapter's `Client` (and the rmcp client transport) takes
/// `ClientOptions`. Named in the wire-limit errors a client gives
/// ([`RequestFailure::ResponseTooLarge`]).
///
/// [`RequestFailure::ResponseTooLarge`]: crate::session::client::RequestFailure::ResponseTooLarge
pub const CLIENT_MAX_FRAME_KNOB: &str = "ClientOptions::framer_mut().max_frame(bytes)";

/// How a server's author raises its wire limit, as they would write it:
/// every adapter's `serve` (and the rmcp server transport) takes
/// `ServeOptions`. Named in the wire-limit errors a served session sends,
/// so the peer reading one learns that the server's setting refused.
pub const SERVE_MAX_FRAME_KNOB: &str = "ServeOptions::framer_mut().max_frame(bytes)";

/// What passed a wire limit, for [`wire_limit_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Oversized {
    /// A request from the client (or host).
    Request,
    /// A response from the server.
    Response,
    /// A result a handler produced, before it was written.
    Result,
}

impl Oversized {
    fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Response => "response",
            Self::Result => "result",
        }
    }
}

/// The one message for "over the wire limit", everywhere:
/// `response exceeded the wire limit (8388608 bytes; 9000000 bytes seen);
/// raise ClientOptions::framer_mut().max_frame(bytes)`. `knob` names the
/// setting the reader turns to accept it, as they would write it
/// ([`CLIENT_MAX_FRAME_KNOB`] for a `Client`, [`SERVE_MAX_FRAME_KNOB`] for
/// `serve`, `--max-frame` for the guard). `seen` is the message's size
/// when known, else a lower bound (`limit + 1` when it was refused as soon
/// as it passed the limit).
pub fn wire_limit_message(what: Oversized, limit: usize, seen: u64, knob: &str) -> String {
    format!(
        "{} exceeded the wire limit ({limit} bytes; {seen} bytes seen); raise {knob}",
        what.as_str()
    )
}

/// The one JSON-RPC error for "over the wire limit", everywhere: code
/// [`WIRE_LIMIT_EXCEEDED`], [`wire_limit_message`], and
/// `data: {"limit": limit, "seen": seen}`.
pub fn wire_limit_error(what: Oversized, limit: usize, seen: u64, knob: &str) -> ErrorObject {
    let data = format!("{{\"limit\":{limit},\"seen\":{seen}}}");
    ErrorObject {
        code: WIRE_LIMIT_EXCEEDED,
        message: wire_limit_message(what, limit, seen, knob),
        // Two integers: always valid JSON.
        data: RawValue::from_string(data).ok(),
    }
}

/// A JSON-RPC request id: a number (integer) or a string.
///
/// `null`, fractional numbers, booleans, arrays and objects are not ids; they
/// give [`DecodeError::InvalidId`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            // Debug formatting quotes and escapes, which is what a log wants.
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for Id {
    fn from(n: i64) -> Self {
        Self::Number(n)
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl From<String> for Id {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(n) => serializer.serialize_i64(*n),
            Self::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match WireId::deserialize(deserializer)? {
            WireId::Valid(id) => Ok(id),
            WireId::Absent => Err(de::Error::custom("missing id")),
            WireId::Invalid(e) => Err(de::Error::custom(e)),
        }
    }
}

/// Why a JSON value is not a valid id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The id is `null`.
    #[error("id is null")]
    Null,
    /// The id is a number with a fraction or exponent.
    #[error("id is not an integer")]
    Float,
    /// The id is an integer outside the signed 64-bit range.
    #[error("id is out of range")]
    OutOfRange,
    /// The id is `true` or `false`.
    #[error("id is a boolean")]
    Bool,
    /// The id is an array or an object.
    #[error("id is an array or object")]
    Structured,
}

/// A request: it has an id and expects exactly one response.
#[derive(Debug, Clone)]
pub struct Request {
    /// The id the response will carry.
    pub id: Id,
    /// The method name, e.g. `tools/call`.
    pub method: String,
    /// The raw `params` value, if present.
    pub params: Option<Box<RawValue>>,
}

/// A notification: no id, no response.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The method name, e.g. `notifications/cancelled`.
    pub method: String,
    /// The raw `params` value, if present.
    pub params: Option<Box<RawValue>>,
}

/// A response to a request: a result or an error.
#[derive(Debug, Clone)]
pub struct Response {
    /// The id of the request this answers.
    pub id: Id,
    /// The raw `result` value, or the `error` object.
    pub result: Result<RawResult, ErrorObject>,
}

/// The raw JSON text of a response's `result`.
///
/// A large response arrives as a frame the framer lends
/// ([`crate::wire::frame::FrameText`]); [`Message::decode_owned`] keeps that frame
/// whole and this value is its `result` member, found in place. So the one
/// copy of an 8 MiB result in the process is the bytes read from the pipe:
/// no second buffer for the result, no memmove, no second parse. A smaller
/// result owns exactly its text.
///
/// [`RawResult::get`] gives the JSON text (as [`RawValue::get`] does);
/// [`RawResult::parse`] deserializes it; [`RawResult::into_raw_value`] turns
/// it into a `Box<RawValue>` where one is needed (a copy, unless the value
/// owns exactly its text).
#[derive(Clone)]
pub struct RawResult {
    /// Holds the JSON text at `start..end`: the whole frame, or just the text.
    text: String,
    start: usize,
    end: usize,
}

impl RawResult {
    /// A result of exactly `raw`, owning it (no copy).
    pub fn new(raw: Box<RawValue>) -> Self {
        let text = String::from(Box::<str>::from(raw));
        let end = text.len();
        Self {
            text,
            start: 0,
            end,
        }
    }

    /// The JSON text of the value, as received (insignificant whitespace
    /// kept).
    pub fn get(&self) -> &str {
        &self.text[self.start..self.end]
    }

    /// Length of the JSON text in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Deserializes the value.
    pub fn parse<T: de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.get())
    }

    /// The value as a `Box<RawValue>`: no copy when this value owns exactly
    /// its text; otherwise the text is copied into a new box.
    pub fn into_raw_value(self) -> Box<RawValue> {
        let whole = self.start == 0 && self.end == self.text.len();
        let text = if whole {
            self.text
        } else {
            self.get().to_owned()
        };
        // The text is one JSON value: it was parsed as one when decoded, or
        // came from a `RawValue`.
        RawValue::from_string(text)
            .unwrap_or_else(|_| RawValue::from_string("null".to_owned()).expect("`null` is JSON"))
    }

    /// Bytes of memory this value keeps alive (its whole frame, when it was
    /// taken from one).
    pub fn retained_bytes(&self) -> usize {
        self.text.capacity()
    }
}

impl From<Box<RawValue>> for RawResult {
    fn from(raw: Box<RawValue>) -> Self {
        Self::new(raw)
    }
}

impl From<&RawValue> for RawResult {
    fn from(raw: &RawValue) -> Self {
        let text = raw.get().to_owned();
        let end = text.len();
        Self {
            text,
            start: 0,
            end,
        }
    }
}

impl fmt::Debug for RawResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RawResult")
            .field(&format_args!("{}", self.get()))
            .finish()
    }
}

impl fmt::Display for RawResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl PartialEq for RawResult {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawResult {}

impl Serialize for RawResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Embedded as raw JSON; the text is checked again here, once.
        let raw: &RawValue = serde_json::from_str(self.get()).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(Self::new)
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code (see the constants in this module).
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional raw extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<RawValue>>,
}

impl ErrorObject {
    /// An error object with no `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
}

impl PartialEq for ErrorObject {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
            && self.message == other.message
            && self.data.as_ref().map(|d| d.get()) == other.data.as_ref().map(|d| d.get())
    }
}

/// One decoded JSON-RPC message.
#[derive(Debug, Clone)]
pub enum Message {
    /// A request (has an id and a method).
    Request(Request),
    /// A notification (a method, no id).
    Notification(Notification),
    /// A response (an id and a result or an error).
    Response(Response),
}

/// Why a frame is not a valid JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame is not valid JSON.
    #[error("invalid JSON at column {column}: {category}")]
    Json {
        /// serde_json's category of the error: `syntax`, `eof` or `data`.
        category: &'static str,
        /// The 1-based byte column (frames are single lines) where it was found.
        column: usize,
    },
    /// The frame is a JSON array: batches are not part of MCP.
    #[error("batch arrays are not supported")]
    Batch,
    /// The frame is valid JSON but not an object.
    #[error("message is not a JSON object")]
    NotAnObject,
    /// `jsonrpc` is missing or not `"2.0"`.
    #[error("jsonrpc version is missing or not \"2.0\"")]
    BadVersion,
    /// The `id` member is not a valid id.
    #[error("invalid id: {0}")]
    InvalidId(IdError),
    /// A member has the wrong type (e.g. a numeric `method`).
    #[error("member `{0}` has the wrong type")]
    BadMember(&'static str),
    /// The member combination matches no message shape (e.g. `result` and `error`
    /// together, `method` and `result` together, or an id alone).
    #[error("members match no JSON-RPC message shape")]
    Shape,
}

impl DecodeError {
    /// A short stable name of the error kind, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Json { .. } => "json",
            Self::Batch => "batch",
            Self::NotAnObject => "not_object",
            Self::BadVersion => "bad_version",
            Self::InvalidId(_) => "invalid_id",
            Self::BadMember(_) => "bad_member",
            Self::Shape => "shape",
        }
    }
}

/// Why a message could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The encoded message would pass the wire limit. Encoding stopped at the
    /// limit, so the full size is not known.
    #[error("message exceeds the wire limit of {limit} bytes")]
    TooLarge {
        /// The wire limit in bytes (excluding the final newline).
        limit: usize,
    },
}

/// The `id` member as found on the wire, before it is judged.
#[derive(Debug, Default)]
enum WireId {
    #[default]
    Absent,
    Valid(Id),
    Invalid(IdError),
}

impl<'de> Deserialize<'de> for WireId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<WireId, E> {
                Ok(WireId::Valid(Id::Number(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<WireId, E> {
                Ok(match i64::try_from(v) {
                    Ok(v) => WireId::Valid(Id::Number(v)),
                    Err(_) => WireId::Invalid(IdError::OutOfRange),
                })
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<WireId, E> {
                Ok(WireId::Invalid(IdError::Float))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<WireId, E> {
                Ok(WireId::Invalid(IdError::Bool))
            }
            fn visit_unit<E: de::Error>(self) -> Result<WireId, E> {
                Ok(WireId::Invalid(IdError::Null))
            }
            fn visit_none<E: de::Error>(self) -> Result<WireId, E> {
                Ok(WireId::Invalid(IdError::Null))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<WireId, E> {
                Ok(WireId::Valid(Id::String(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<WireId, E> {
                Ok(WireId::Valid(Id::String(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WireId, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(WireId::Invalid(IdError::Structured))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WireId, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(WireId::Invalid(IdError::Structured))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A member whose presence matters even when its value is `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// [`present`], borrowed from the frame.
fn present_borrowed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// A string member that may be absent; a present non-string is a shape error we
/// report by name, so it is taken raw and judged afterwards.
/// A decoded frame, a result still borrowed from it.
pub(crate) enum Decoded<'a> {
    Message(Message),
    Result { id: Id, result: &'a RawValue },
}

#[derive(Deserialize)]
struct WireEnvelope<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default)]
    id: WireId,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Box<RawValue>>,
    #[serde(default, borrow, deserialize_with = "present_borrowed")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

fn json_error(e: &serde_json::Error) -> DecodeError {
    use serde_json::error::Category;
    DecodeError::Json {
        category: match e.classify() {
            Category::Io => "io",
            Category::Syntax => "syntax",
            Category::Data => "data",
            Category::Eof => "eof",
        },
        column: e.column(),
    }
}

impl Message {
    /// Decodes one frame (one line, without its newline) into a message.
    ///
    /// Exactly one JSON object is accepted. Unknown members are ignored; a
    /// duplicated member is a JSON error.
    pub fn decode(frame: &str) -> Result<Self, DecodeError> {
        Ok(match Self::decode_in(frame)? {
            Decoded::Message(m) => m,
            Decoded::Result { id, result } => Self::Response(Response {
                id,
                result: Ok(RawResult::from(result)),
            }),
        })
    }

    /// Decodes one frame taken whole, as [`Message::decode`] does; a
    /// response's result is then the frame itself, its `result` member found
    /// in place ([`RawResult`]): no copy. Meant for large frames, which the
    /// framer lends ([`crate::wire::frame::FrameText::into_string`]). On error the
    /// frame is given back with it.
    pub fn decode_owned(frame: String) -> Result<Self, (DecodeError, String)> {
        let decoded = match Self::decode_in(&frame) {
            Ok(d) => d,
            Err(e) => return Err((e, frame)),
        };
        let (id, start, end) = match decoded {
            Decoded::Message(m) => return Ok(m),
            Decoded::Result { id, result } => {
                // Where the member's text lies in the frame it was parsed from.
                let start = result.get().as_ptr() as usize - frame.as_ptr() as usize;
                (id, start, start + result.get().len())
            }
        };
        let mut text = frame;
        // Only what is past the result's end may go (the frame's capacity can
        // be up to the wire limit): shrinking in place, no copy.
        text.truncate(end);
        Ok(Self::Response(Response {
            id,
            result: Ok(RawResult { text, start, end }),
        }))
    }

    /// [`Message::decode`] without copying a response's result: it stays
    /// borrowed from the frame.
    pub(crate) fn decode_in(frame: &str) -> Result<Decoded<'_>, DecodeError> {
        match frame
            .trim_start_matches([' ', '\t', '\r', '\n'])
            .as_bytes()
            .first()
        {
            Some(b'{') => {}
            Some(b'[') => return Err(DecodeError::Batch),
            Some(_) => {
                // Distinguish "valid JSON but not an object" from "not JSON".
                return match serde_json::from_str::<IgnoredAny>(frame) {
                    Ok(_) => Err(DecodeError::NotAnObject),
                    Err(e) => Err(json_error(&e)),
                };
            }
            None => {
                return Err(DecodeError::Json {
                    category: "eof",
                    column: 0,
                })
            }
        }
        let w: WireEnvelope<'_> = serde_json::from_str(frame).map_err(|e| json_error(&e))?;
        match w.jsonrpc.map(RawValue::get) {
            Some("\"2.0\"") => {}
            _ => return Err(DecodeError::BadVersion),
        }
        let method = match w.method {
            None => None,
            Some(raw) => Some(
                serde_json::from_str::<Cow<'_, str>>(raw.get())
                    .map_err(|_| DecodeError::BadMember("method"))?
                    .into_owned(),
            ),
        };
        let params = w.params.filter(|p| p.get() != "null");
        match (method, w.id, w.result, w.error) {
            (Some(method), WireId::Absent, None, None) => {
                Ok(Decoded::Message(Self::Notification(Notification {
                    method,
                    params,
                })))
            }
            (Some(method), WireId::Valid(id), None, None) => {
                Ok(Decoded::Message(Self::Request(Request {
                    id,
                    method,
                    params,
                })))
            }
            (None, WireId::Valid(id), Some(result), None) if params.is_none() => {
                Ok(Decoded::Result { id, result })
            }
            (None, WireId::Valid(id), None, Some(error)) if params.is_none() => {
                let error: ErrorObject = serde_json::from_str(error.get())
                    .map_err(|_| DecodeError::BadMember("error"))?;
                Ok(Decoded::Message(Self::Response(Response {
                    id,
                    result: Err(error),
                })))
            }
            (_, WireId::Invalid(e), _, _) => Err(DecodeError::InvalidId(e)),
            _ => Err(DecodeError::Shape),
        }
    }

    /// The id of a request or response; `None` for a notification.
    pub fn id(&self) -> Option<&Id> {
        match self {
            Self::Request(r) => Some(&r.id),
            Self::Response(r) => Some(&r.id),
            Self::Notification(_) => None,
        }
    }

    /// Encodes this message as compact JSON followed by one `\n`.
    ///
    /// Fails with [`EncodeError::TooLarge`] when the bytes before the newline
    /// would exceed `max_frame`; at most `max_frame + 1` bytes are allocated
    /// before giving up.
    pub fn encode(&self, max_frame: usize) -> Result<Vec<u8>, EncodeError> {
        match self {
            Self::Request(r) => encode_request(&r.id, &r.method, r.params.as_deref(), max_frame),
            Self::Notification(n) => encode_notification(&n.method, n.params.as_deref(), max_frame),
            Self::Response(r) => match &r.result {
                Ok(v) => {
                    // Every `RawResult` holds one JSON value.
                    let raw: &RawValue = serde_json::from_str(v.get())
                        .map_err(|_| EncodeError::TooLarge { limit: max_frame })?;
                    encode_result(&r.id, raw, max_frame)
                }
                Err(e) => encode_error(Some(&r.id), e, max_frame),
            },
        }
    }
}

#[derive(Serialize)]
struct OutEnvelope<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<OutId<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
}

/// An outgoing id: error responses to unreadable requests carry `null`.
enum OutId<'a> {
    Id(&'a Id),
    Null,
}

impl Serialize for OutId<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Id(id) => id.serialize(s),
            Self::Null => s.serialize_unit(),
        }
    }
}

const EMPTY: OutEnvelope<'static> = OutEnvelope {
    jsonrpc: "2.0",
    id: None,
    method: None,
    params: None,
    result: None,
    error: None,
};

fn encode_envelope(env: &OutEnvelope<'_>, max_frame: usize) -> Result<Vec<u8>, EncodeError> {
    // Sized for the raw payload and the envelope around it (a large result
    // is copied once, never regrown), and never past the limit.
    let raw = env.params.or(env.result).map_or(0, |r| r.get().len());
    let mut buf = Vec::with_capacity(
        raw.saturating_add(ENVELOPE_ROOM)
            .min(max_frame.saturating_add(1)),
    );
    // The only failure a Vec-backed writer can produce is our limit; serializing
    // borrowed strings and raw values has no other failure mode.
    serde_json::to_writer(&mut LimitedWriter::new(&mut buf, max_frame), env)
        .map_err(|_| EncodeError::TooLarge { limit: max_frame })?;
    // Raw payloads keep their whitespace; a raw CR or LF can only be whitespace.
    let mut at = 0;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', &buf[at..]) {
        buf[at + i] = b' ';
        at += i + 1;
    }
    buf.push(b'\n');
    Ok(buf)
}

/// Room for an envelope around its raw payload: `jsonrpc`, an id, a
/// method name; more is grown into.
const ENVELOPE_ROOM: usize = 256;

/// Encodes a request (`id`, `method`, optional raw `params`) plus `\n`.
pub fn encode_request(
    id: &Id,
    method: &str,
    params: Option<&RawValue>,
    max_frame: usize,
) -> Result<Vec<u8>, EncodeError> {
    encode_envelope(
        &OutEnvelope {
            id: Some(OutId::Id(id)),
            method: Some(method),
            params,
            ..EMPTY
        },
        max_frame,
    )
}

/// Encodes a notification (`method`, optional raw `params`) plus `\n`.
pub fn encode_notification(
    method: &str,
    params: Option<&RawValue>,
    max_frame: usize,
) -> Result<Vec<u8>, EncodeError> {
    encode_envelope(
        &OutEnvelope {
            method: Some(method),
            params,
            ..EMPTY
        },
        max_frame,
    )
}

/// Encodes a success response plus `\n`.
pub fn encode_result(id: &Id, result: &RawValue, max_frame: usize) -> Result<Vec<u8>, EncodeError> {
    encode_envelope(
        &OutEnvelope {
            id: Some(OutId::Id(id)),
            result: Some(result),
            ..EMPTY
        },
        max_frame,
    )
}

/// Encodes an error response plus `\n`. `id` is `None` only when the request's
/// id could not be read (JSON-RPC then requires `"id": null`).
pub fn encode_error(
    id: Option<&Id>,
    error: &ErrorObject,
    max_frame: usize,
) -> Result<Vec<u8>, EncodeError> {
    encode_envelope(
        &OutEnvelope {
            id: Some(id.map_or(OutId::Null, OutId::Id)),
            error: Some(error),
            ..EMPTY
        },
        max_frame,
    )
}

/// Builds a raw JSON value from any serializable value.
///
/// A convenience for applications and tests; the core itself never builds
/// trees of untrusted data.
pub fn to_raw<T: Serialize + ?Sized>(value: &T) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).expect("test JSON is valid")
    }

    #[test]
    fn decode_owned_finds_the_result_in_place_and_agrees_with_decode() {
        for frame in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":[1,2]}}"#,
            r#"{"result":  "x\"y" ,"jsonrpc":"2.0","id":"s"}"#,
            r#"{"id":3,"result":null,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
        ] {
            let borrowed = Message::decode(frame).unwrap();
            let owned = Message::decode_owned(frame.to_owned()).unwrap();
            assert_eq!(format!("{borrowed:?}"), format!("{owned:?}"), "{frame}");
            if let Message::Response(Response { result: Ok(r), .. }) = owned {
                // The frame itself, cut after the value: no copy of the value.
                assert!(r.retained_bytes() >= frame.find(r.get()).unwrap() + r.len());
            }
        }
        let (e, back) = Message::decode_owned("[1]".to_owned()).unwrap_err();
        assert_eq!((e, back.as_str()), (DecodeError::Batch, "[1]"));
    }

    #[test]
    fn raw_result_round_trips() {
        let r = RawResult::from(raw(r#"{"k": [1, 2]}"#));
        assert_eq!(r.get(), r#"{"k": [1, 2]}"#);
        assert_eq!(r.to_string(), r.get());
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"k": [1, 2]}"#);
        let v: serde_json::Value = r.parse().unwrap();
        assert_eq!(v["k"][1], 2);
        assert_eq!(r.clone().into_raw_value().get(), r.get());
        let m = Message::decode_owned(r#"{"jsonrpc":"2.0","id":1,"result":[true]}"#.to_owned())
            .unwrap();
        let Message::Response(Response { result: Ok(r), .. }) = m else {
            panic!()
        };
        assert_eq!(r.into_raw_value().get(), "[true]");
    }

    #[test]
    fn decodes_the_three_shapes() {
        let m = Message::decode(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).unwrap();
        assert!(
            matches!(m, Message::Request(Request { id: Id::Number(7), ref method, params: None }) if method == "ping")
        );
        let m =
            Message::decode(r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"a":[1,2]}}"#)
                .unwrap();
        match m {
            Message::Notification(n) => assert_eq!(n.params.unwrap().get(), r#"{"a":[1,2]}"#),
            other => panic!("{other:?}"),
        }
        let m = Message::decode(r#"{"jsonrpc":"2.0","id":"a","result":null}"#).unwrap();
        match m {
            Message::Response(Response { id, result: Ok(v) }) => {
                assert_eq!(id, Id::from("a"));
                assert_eq!(v.get(), "null");
            }
            other => panic!("{other:?}"),
        }
        let m =
            Message::decode(r#"{"id":3,"error":{"code":-32601,"message":"no"},"jsonrpc":"2.0"}"#)
                .unwrap();
        match m {
            Message::Response(Response { result: Err(e), .. }) => {
                assert_eq!(e, ErrorObject::new(METHOD_NOT_FOUND, "no"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_bad_ids_with_typed_errors() {
        for (id, want) in [
            ("null", IdError::Null),
            ("1.5", IdError::Float),
            ("true", IdError::Bool),
            ("[1]", IdError::Structured),
            ("{\"a\":1}", IdError::Structured),
            ("18446744073709551615", IdError::OutOfRange),
        ] {
            let frame = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
            assert_eq!(
                Message::decode(&frame).unwrap_err(),
                DecodeError::InvalidId(want),
                "{frame}"
            );
        }
    }

    #[test]
    fn rejects_batches_non_objects_and_bad_shapes() {
        assert_eq!(
            Message::decode(r#"[{"jsonrpc":"2.0","method":"a"}]"#).unwrap_err(),
            DecodeError::Batch
        );
        assert_eq!(Message::decode("42").unwrap_err(), DecodeError::NotAnObject);
        assert_eq!(
            Message::decode(r#""x""#).unwrap_err(),
            DecodeError::NotAnObject
        );
        assert!(matches!(
            Message::decode("{oops").unwrap_err(),
            DecodeError::Json { .. }
        ));
        assert!(matches!(
            Message::decode("not json").unwrap_err(),
            DecodeError::Json { .. }
        ));
        assert!(matches!(
            Message::decode("").unwrap_err(),
            DecodeError::Json { .. }
        ));
        assert_eq!(
            Message::decode(r#"{"id":1,"method":"a"}"#).unwrap_err(),
            DecodeError::BadVersion
        );
        assert_eq!(
            Message::decode(r#"{"jsonrpc":"1.0","id":1,"method":"a"}"#).unwrap_err(),
            DecodeError::BadVersion
        );
        assert_eq!(
            Message::decode(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).unwrap_err(),
            DecodeError::BadMember("method")
        );
        assert_eq!(
            Message::decode(
                r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#
            )
            .unwrap_err(),
            DecodeError::Shape
        );
        assert_eq!(
            Message::decode(r#"{"jsonrpc":"2.0","id":1,"method":"a","result":1}"#).unwrap_err(),
            DecodeError::Shape
        );
        assert_eq!(
            Message::decode(r#"{"jsonrpc":"2.0","id":1}"#).unwrap_err(),
            DecodeError::Shape
        );
        assert_eq!(
            Message::decode(r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#).unwrap_err(),
            DecodeError::BadMember("error")
        );
        assert!(matches!(
            Message::decode(r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"a"}"#).unwrap_err(),
            DecodeError::Json { .. }
        ));
    }

    #[test]
    fn encodes_compactly_with_one_newline() {
        let params = raw("{\n  \"text\": \"a\\nb\"\r\n}");
        let bytes = encode_request(&Id::Number(1), "tools/call", Some(&params), 1024).unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{   \"text\": \"a\\nb\"  }}\n"
        );
        let e = encode_error(None, &ErrorObject::new(PARSE_ERROR, "parse error"), 1024).unwrap();
        assert_eq!(
            std::str::from_utf8(&e).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"parse error\"}}\n"
        );
    }

    #[test]
    fn encode_refuses_above_the_wire_limit_exactly() {
        let result = raw("\"xxxxxxxxxx\"");
        let exact = encode_result(&Id::Number(1), &result, usize::MAX).unwrap();
        let body = exact.len() - 1;
        assert_eq!(encode_result(&Id::Number(1), &result, body).unwrap(), exact);
        assert_eq!(
            encode_result(&Id::Number(1), &result, body - 1).unwrap_err(),
            EncodeError::TooLarge { limit: body - 1 }
        );
    }

    #[test]
    fn round_trips() {
        let msgs = [
            r#"{"jsonrpc":"2.0","id":"é\"x","method":"m","params":[1,"\n"]}"#,
            r#"{"jsonrpc":"2.0","method":"n"}"#,
            r#"{"jsonrpc":"2.0","id":-5,"result":{"a":"ü"}}"#,
            r#"{"jsonrpc":"2.0","id":0,"error":{"code":-1,"message":"m","data":{"k":1}}}"#,
        ];
        for m in msgs {
            let bytes = Message::decode(m).unwrap().encode(1 << 20).unwrap();
            assert_eq!(&bytes[..bytes.len() - 1], m.as_bytes());
        }
    }

    proptest! {
        /// Encoded output never holds a raw newline before its last byte,
        /// whatever the strings and raw payloads hold.
        #[test]
        fn encoded_output_has_exactly_one_trailing_newline(
            method in any::<String>(),
            text in any::<String>(),
            ws in proptest::collection::vec(prop_oneof![Just(" "), Just("\n"), Just("\r\n"), Just("\t")], 0..4),
            id in prop_oneof![any::<i64>().prop_map(Id::Number), any::<String>().prop_map(Id::String)],
        ) {
            let sep = ws.concat();
            let params_json = format!("{{{sep}\"t\"{sep}:{sep}{}{sep}}}", serde_json::to_string(&text).unwrap());
            let params = raw(&params_json);
            for bytes in [
                encode_request(&id, &method, Some(&params), usize::MAX).unwrap(),
                encode_notification(&method, Some(&params), usize::MAX).unwrap(),
                encode_result(&id, &params, usize::MAX).unwrap(),
                encode_error(Some(&id), &ErrorObject { code: 1, message: text.clone(), data: Some(params.clone()) }, usize::MAX).unwrap(),
            ] {
                prop_assert_eq!(bytes.last(), Some(&b'\n'));
                prop_assert!(memchr::memchr(b'\n', &bytes[..bytes.len() - 1]).is_none());
                prop_assert!(memchr::memchr(b'\r', &bytes).is_none());
                // And it still decodes to the same envelope.
                let s = std::str::from_utf8(&bytes[..bytes.len() - 1]).unwrap();
                let m = Message::decode(s).unwrap();
                if let Message::Request(r) = m {
                    prop_assert_eq!(r.id, id.clone());
                    prop_assert_eq!(&r.method, &method);
                }
            }
        }
    }
}
