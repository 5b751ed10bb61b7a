//! The protocol basics `serve` answers by itself, so a server's handler only
//! sees its own work.
//!
//! The whole story is on [`ServerBasics`].

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::session::client::INITIALIZE;
use crate::session::handshake::{
    is_modern, negotiate_version, Implementation, InitializeResult, DISCOVER,
    META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SERVER_INFO, SUPPORTED_PROTOCOL_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::wire::message::{
    to_raw, ErrorObject, RawValue, Request, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND,
};
use crate::wire::object::insert_missing;

/// The method of a ping (removed in 2026-07-28).
pub const PING: &str = "ping";
/// The method that sets the log level (removed in 2026-07-28: a modern
/// request asks for log messages in its own `_meta`).
pub(crate) const SET_LEVEL: &str = "logging/setLevel";
/// The methods whose 2026-07-28 results are cacheable: they carry `ttlMs`
/// and `cacheScope` beside `resultType`.
pub const CACHEABLE_METHODS: &[&str] = &[
    DISCOVER,
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];
/// Bound of the `requested` version a -32022 error echoes in its `data`, in
/// bytes: a longer one is cut (at a character boundary), so the refusal of
/// a request whose version string is as long as a frame still fits the
/// wire limit.
pub const MAX_ECHOED_VERSION_BYTES: usize = 64;
/// Bound of the server info: name and version together, in bytes.
pub const MAX_SERVER_INFO_BYTES: usize = 1024;
/// Bound of the capabilities object, encoded, in bytes.
pub const MAX_CAPABILITIES_BYTES: usize = 64 * 1024;
/// Bound of the instructions, in bytes.
pub const MAX_INSTRUCTIONS_BYTES: usize = 64 * 1024;
/// Bound of the number of tools given.
pub const MAX_TOOLS: usize = 1024;
/// Bound of all tool definitions together, encoded, in bytes (the
/// `tools/list` answer is this plus a few bytes).
pub const MAX_TOOL_LIST_BYTES: usize = 1024 * 1024;
/// Bound of a tool's name, in bytes (the MCP spec's 128 characters).
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// Bound of the number of methods added with [`ServerBasics::method`].
pub const MAX_EXTRA_METHODS: usize = 256;
/// Bound of one method name added with [`ServerBasics::method`], in bytes.
pub const MAX_METHOD_NAME_BYTES: usize = 256;

/// Why a [`ServerBasics`] setter refused its value (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BasicsError {
    /// The value could not be encoded as JSON.
    #[error("not encodable as JSON: {0}")]
    Json(String),
    /// The capabilities are not a JSON object.
    #[error("capabilities must be a JSON object")]
    CapabilitiesNotObject,
    /// The value passed its bound.
    #[error("{what} is {len} bytes, more than the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size in bytes.
        len: usize,
        /// The bound in bytes.
        limit: usize,
    },
    /// One more would pass the bound on their number.
    #[error("more than {limit} {what}")]
    TooMany {
        /// What there were too many of.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
    /// A tool definition is not an object with a string `name` (1 to
    /// [`MAX_TOOL_NAME_BYTES`] bytes) and an object `inputSchema`.
    #[error("invalid tool definition: {0}")]
    InvalidTool(String),
    /// A tool with this name was already given.
    #[error("duplicate tool {0:?}")]
    DuplicateTool(String),
    /// A method name is empty or longer than [`MAX_METHOD_NAME_BYTES`].
    #[error("invalid method name {0:?}")]
    InvalidMethod(String),
}

/// The protocol basics `serve` answers by itself, so a server's handler only
/// sees its own work.
///
/// [`ServerBasics`] is what a server says about itself — its
/// [`Implementation`], its capabilities, its instructions, optionally its
/// tools — and `BasicsRouter` answers from it, inside the
/// [`ServeLifecycle`](crate::serve::ServeLifecycle), identically for every
/// adapter:
///
/// # The revisions spoken
///
/// Every revision in [`SUPPORTED_PROTOCOL_VERSIONS`]: the handshake ones
/// (2025-11-25 and before: `initialize` first) and the modern one
/// (2026-07-28: no handshake, each request names its version and carries
/// the client's context in `params._meta`). Each request is handled under
/// one revision, decided in this order:
///
/// 1. its `_meta` names a version ([`META_PROTOCOL_VERSION`]): that one;
///    a version not spoken gets -32022 ([`UNSUPPORTED_PROTOCOL_VERSION`],
///    `data: {"requested", "supported"}`), a `_meta` that is not an object
///    or a version that is not a string -32602; a modern version without a
///    [`META_CLIENT_CAPABILITIES`] object -32602 (except `server/discover`);
/// 2. else the version `initialize` negotiated, once it did (an
///    `initialize` asking for 2026-07-28 gets it: the session is modern);
/// 3. else, in a session that began with `server/discover` or a modern
///    request (before any `initialize`): -32602, the required `_meta` keys
///    are missing (`server/discover` itself is answered anyway);
/// 4. else none: a request before `initialize`, served as always.
///
/// A modern request's result carries what 2026-07-28 requires: the
/// lifecycle adds `"resultType":"complete"` to a result that lacks it (a
/// handler's or these basics'), and `"ttlMs":0, "cacheScope":"private"` to
/// the [`CACHEABLE_METHODS`]'; a legacy request's result is untouched.
///
/// | request | answer |
/// | --- | --- |
/// | `initialize` | the client's `protocolVersion` when this crate speaks it (2026-07-28 included), else the latest handshake version ([`negotiate_version`]); the capabilities, server info and instructions given. Params without a string `protocolVersion`: -32602. Its `_meta` is not read |
/// | a second `initialize` (after one was answered) | -32600; the session keeps the version first negotiated |
/// | `server/discover`, any revision | `{"resultType":"complete","supportedVersions":[…],"capabilities",…,"instructions"?,"ttlMs":0,"cacheScope":"private","_meta":{"io.modelcontextprotocol/serverInfo":…}}` |
/// | `ping` | legacy: `{}`, at any time; modern: -32601 |
/// | `logging/setLevel` | modern: -32601; legacy: as any method (the handler, if `logging` is declared) |
/// | `tools/list`, when tools were given | `{"tools":[…]}`, all of them, in the order given (one page, no cursor) |
/// | `tools/call`, when tools were given | a name not given: -32602 `unknown tool`; else the handler |
/// | a method the server does not serve | -32601 |
/// | anything else | the handler, with its cancel token, its revision and the client's context ([`ClientHello`]: from the request's `_meta`, else from `initialize`) |
///
/// The methods served are derived from the declared capabilities — `tools`
/// → `tools/list`, `tools/call`; `resources` → `resources/*`; `prompts` →
/// `prompts/*`; `logging` → `logging/setLevel`; `completions` →
/// `completion/complete` — plus those added with [`ServerBasics::method`].
/// Giving tools declares `tools` when the capabilities do not.
///
/// # The lifecycle, decided
///
/// - **Requests before `initialize`** are served as after it (and counted in
///   [`BasicsMetrics::requests_before_initialize`]): the MCP lifecycle asks
///   the *client* not to send them; refusing them would only break clients
///   that probe with `tools/list` or `ping` first. Modern requests need no
///   `initialize` and are not counted there.
/// - **The client's `clientInfo` and `capabilities`** are kept, bounded
///   ([`ClientHello`]): a malformed or oversized one is dropped, never a
///   reason to refuse the handshake. The same holds for the
///   [`META_CLIENT_INFO`](crate::META_CLIENT_INFO) and [`META_CLIENT_CAPABILITIES`] of each modern
///   request (a `ClientHello` per request, shared by its handler).
/// - **`notifications/initialized`** goes to the handler's notification
///   callback like every notification; nothing waits for it.
/// - **Cancels of `initialize`** are ignored, as the spec requires (the
///   session does it).
///
/// An answer is held to the wire limit like a handler's result (G9): one
/// above `max_frame` goes out as error -32603 instead, so keep the tool list
/// (at most [`MAX_TOOL_LIST_BYTES`]) under a lowered `max_frame`;
/// [`ServerBasics::largest_answer`] says how large an answer can get.
///
/// # The way out
///
/// [`ServerBasics::passthrough`] (or [`answer_basics(false)`](ServerBasics::answer_basics))
/// turns all of this off: the handler sees every request, `initialize`,
/// `server/discover` and `ping` included, and answers them itself; nothing
/// is refused. A request whose `_meta` names a version spoken is still
/// handled under it (the handler is told, and a modern result lacking
/// `resultType` still gets it); any other is handled under none.
///
/// # Worst-case memory
///
/// [`MAX_SERVER_INFO_BYTES`] + [`MAX_CAPABILITIES_BYTES`] +
/// [`MAX_INSTRUCTIONS_BYTES`] + [`MAX_TOOL_LIST_BYTES`] (plus one name per
/// tool, at most [`MAX_TOOLS`] × [`MAX_TOOL_NAME_BYTES`]) +
/// [`MAX_EXTRA_METHODS`] × [`MAX_METHOD_NAME_BYTES`]: about 1.3 MiB, fixed
/// when `serve` starts; plus the client's [`ClientHello`] once it said it
/// (at most [`MAX_SERVER_INFO_BYTES`] + [`MAX_CAPABILITIES_BYTES`], shared
/// by every handler), and one more per modern request in flight (under
/// `max_concurrent`), plus the last modern one kept for the report. An
/// answer is built per request and queued like a handler's response (one
/// per request in flight, under `max_concurrent`).
///
/// What a server says about itself, and whether `serve` answers the
/// protocol basics from it (see [`ServerBasics`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerBasics {
    answer: bool,
    server_info: Implementation,
    capabilities: Map<String, Value>,
    instructions: Option<String>,
    /// Tool definitions, encoded, in the order given.
    tools: Vec<Box<RawValue>>,
    tool_names: BTreeSet<String>,
    tools_bytes: usize,
    methods: BTreeSet<String>,
}

impl Default for ServerBasics {
    fn default() -> Self {
        Self {
            answer: true,
            server_info: Implementation::default(),
            capabilities: Map::new(),
            instructions: None,
            tools: Vec::new(),
            tool_names: BTreeSet::new(),
            tools_bytes: 0,
            methods: BTreeSet::new(),
        }
    }
}

impl ServerBasics {
    /// The way out: `serve` answers nothing by itself, and the handler sees
    /// every request, `initialize` and `ping` included.
    pub fn passthrough() -> Self {
        Self {
            answer: false,
            ..Self::default()
        }
    }

    // ---- setters ----

    /// Whether `serve` answers `initialize`, `ping`, unknown methods and
    /// (with tools given) `tools/list` by itself (default `true`). `false`
    /// is the way out: the handler sees every request.
    pub fn answer_basics(&mut self, on: bool) -> &mut Self {
        self.answer = on;
        self
    }

    /// The `serverInfo` of the `initialize` answer (default `mcp-stdio` and
    /// this crate's version: set your own). Name and version together within
    /// [`MAX_SERVER_INFO_BYTES`].
    ///
    /// # Errors
    /// [`BasicsError::TooLarge`].
    pub fn server_info(
        &mut self,
        name: impl Into<String>,
        version: impl Into<String>,
    ) -> Result<&mut Self, BasicsError> {
        let info = Implementation::new(name, version);
        check_len(
            "server info",
            info.name.len() + info.version.len(),
            MAX_SERVER_INFO_BYTES,
        )?;
        self.server_info = info;
        Ok(self)
    }

    /// The `capabilities` of the `initialize` answer: a JSON object (default
    /// `{}`), within [`MAX_CAPABILITIES_BYTES`] encoded. Its keys decide which
    /// methods are served (see [`ServerBasics`]).
    ///
    /// # Errors
    /// [`BasicsError::Json`], [`BasicsError::CapabilitiesNotObject`],
    /// [`BasicsError::TooLarge`].
    pub fn capabilities<T: Serialize + ?Sized>(
        &mut self,
        capabilities: &T,
    ) -> Result<&mut Self, BasicsError> {
        let raw = to_raw(capabilities).map_err(|e| BasicsError::Json(e.to_string()))?;
        check_len("capabilities", raw.get().len(), MAX_CAPABILITIES_BYTES)?;
        match serde_json::from_str(raw.get()) {
            Ok(Value::Object(map)) => {
                self.capabilities = map;
                Ok(self)
            }
            _ => Err(BasicsError::CapabilitiesNotObject),
        }
    }

    /// The `instructions` of the `initialize` answer: how to use this server,
    /// for the model (default none), within [`MAX_INSTRUCTIONS_BYTES`].
    ///
    /// # Errors
    /// [`BasicsError::TooLarge`].
    pub fn instructions(&mut self, text: impl Into<String>) -> Result<&mut Self, BasicsError> {
        let text = text.into();
        check_len("instructions", text.len(), MAX_INSTRUCTIONS_BYTES)?;
        self.instructions = Some(text);
        Ok(self)
    }

    /// Adds a tool definition (`{"name", "inputSchema", …}`, as `tools/list`
    /// shows it). With at least one tool given, `serve` answers `tools/list`
    /// itself and answers -32602 to a `tools/call` of any other name, so the
    /// handler only sees calls of these tools. At most [`MAX_TOOLS`], within
    /// [`MAX_TOOL_LIST_BYTES`] together (default: none; the handler answers
    /// `tools/list` if the capabilities declare `tools`).
    ///
    /// # Errors
    /// [`BasicsError::Json`], [`BasicsError::InvalidTool`],
    /// [`BasicsError::DuplicateTool`], [`BasicsError::TooMany`],
    /// [`BasicsError::TooLarge`].
    pub fn tool<T: Serialize + ?Sized>(
        &mut self,
        definition: &T,
    ) -> Result<&mut Self, BasicsError> {
        #[derive(Deserialize)]
        struct ToolShape<'a> {
            #[serde(borrow)]
            name: Cow<'a, str>,
            // Parsed only to check it is an object.
            #[serde(rename = "inputSchema")]
            _input_schema: Map<String, Value>,
        }
        let raw = to_raw(definition).map_err(|e| BasicsError::Json(e.to_string()))?;
        if !raw.get().starts_with('{') {
            return Err(BasicsError::InvalidTool("not a JSON object".to_owned()));
        }
        let shape: ToolShape<'_> =
            serde_json::from_str(raw.get()).map_err(|e| BasicsError::InvalidTool(e.to_string()))?;
        let name = shape.name.into_owned();
        if name.is_empty() || name.len() > MAX_TOOL_NAME_BYTES {
            return Err(BasicsError::InvalidTool(format!(
                "a name of 1 to {MAX_TOOL_NAME_BYTES} bytes, not {}",
                name.len()
            )));
        }
        if self.tool_names.contains(&name) {
            return Err(BasicsError::DuplicateTool(name));
        }
        if self.tools.len() >= MAX_TOOLS {
            return Err(BasicsError::TooMany {
                what: "tools",
                limit: MAX_TOOLS,
            });
        }
        check_len(
            "the tool list",
            self.tools_bytes + raw.get().len(),
            MAX_TOOL_LIST_BYTES,
        )?;
        self.tools_bytes += raw.get().len();
        self.tool_names.insert(name);
        self.tools.push(raw);
        Ok(self)
    }

    /// Serves `method` too, beyond those the capabilities give (default
    /// none): for a method of your own, or an experimental one. At most
    /// [`MAX_EXTRA_METHODS`], each 1 to [`MAX_METHOD_NAME_BYTES`] bytes; the
    /// same name twice counts once.
    ///
    /// # Errors
    /// [`BasicsError::InvalidMethod`], [`BasicsError::TooMany`].
    pub fn method(&mut self, method: impl Into<String>) -> Result<&mut Self, BasicsError> {
        let method = method.into();
        if method.is_empty() || method.len() > MAX_METHOD_NAME_BYTES {
            return Err(BasicsError::InvalidMethod(method));
        }
        if !self.methods.contains(&method) && self.methods.len() >= MAX_EXTRA_METHODS {
            return Err(BasicsError::TooMany {
                what: "extra methods",
                limit: MAX_EXTRA_METHODS,
            });
        }
        self.methods.insert(method);
        Ok(self)
    }

    // ---- getters ----

    /// Whether `serve` answers the basics by itself.
    pub fn get_answer_basics(&self) -> bool {
        self.answer
    }

    /// The server info.
    pub fn get_server_info(&self) -> &Implementation {
        &self.server_info
    }

    /// The capabilities as given (without the `tools` that tools imply).
    pub fn get_capabilities(&self) -> &Map<String, Value> {
        &self.capabilities
    }

    /// The instructions.
    pub fn get_instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The names of the tools given.
    pub fn get_tool_names(&self) -> impl Iterator<Item = &str> {
        self.tool_names.iter().map(String::as_str)
    }

    /// The methods added with [`method`](Self::method).
    pub fn get_methods(&self) -> impl Iterator<Item = &str> {
        self.methods.iter().map(String::as_str)
    }

    /// An upper bound of the largest answer built from these basics (the
    /// `initialize`, `server/discover` or `tools/list` result, in either
    /// revision's shape, without the JSON-RPC envelope), in bytes: compare
    /// it with the wire limit.
    pub fn largest_answer(&self) -> usize {
        // Per-key JSON overhead, the versions spoken, and the 2026-07-28
        // fields (`resultType`, `ttlMs`, `cacheScope`, the server info's
        // `_meta` key), rounded up.
        const SLACK: usize = 512;
        // A JSON string escape is at most 6 bytes per byte (`\u0001`).
        const ESCAPE: usize = 6;
        let info = self.server_info.name.len() + self.server_info.version.len();
        let capabilities = serde_json::to_string(&self.capabilities).map_or(0, |s| s.len());
        let instructions = self.instructions.as_ref().map_or(0, String::len);
        let initialize = (info + instructions) * ESCAPE + capabilities + SLACK;
        let tools_list = self.tools_bytes + self.tools.len() + SLACK;
        initialize.max(tools_list)
    }

    /// Whether a request for `method` is served (answered by `serve` or
    /// passed to the handler) rather than answered -32601. Always `true`
    /// with the basics off.
    pub fn serves(&self, method: &str) -> bool {
        if !self.answer
            || method == INITIALIZE
            || method == DISCOVER
            || method == PING
            || self.methods.contains(method)
        {
            return true;
        }
        let declared = |key: &str| self.capabilities.contains_key(key);
        match method {
            "tools/list" | "tools/call" => declared("tools") || !self.tools.is_empty(),
            "logging/setLevel" => declared("logging"),
            "completion/complete" => declared("completions"),
            m if m.starts_with("resources/") => declared("resources"),
            m if m.starts_with("prompts/") => declared("prompts"),
            _ => false,
        }
    }

    /// The capabilities as `initialize` answers them: those given, plus
    /// `tools` when tools were given.
    fn answered_capabilities(&self) -> Cow<'_, Map<String, Value>> {
        if self.tools.is_empty() || self.capabilities.contains_key("tools") {
            return Cow::Borrowed(&self.capabilities);
        }
        let mut map = self.capabilities.clone();
        map.insert("tools".to_owned(), Value::Object(Map::new()));
        Cow::Owned(map)
    }
}

fn check_len(what: &'static str, len: usize, limit: usize) -> Result<(), BasicsError> {
    if len > limit {
        return Err(BasicsError::TooLarge { what, len, limit });
    }
    Ok(())
}

/// What `BasicsRouter` answered, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BasicsMetrics {
    /// Requests answered without the handler: `initialize`, `ping`,
    /// `tools/list` and every error below.
    pub answered: u64,
    /// Requests answered -32601: a method the server does not serve.
    pub method_not_found: u64,
    /// `tools/call`s answered -32602: no string name, or a tool not given.
    pub unknown_tools: u64,
    /// `initialize` requests refused: bad params, or after one was answered.
    pub initialize_refused: u64,
    /// Requests other than `initialize` and `ping` that came before
    /// `initialize` was answered (served anyway), modern ones not counted.
    pub requests_before_initialize: u64,
    /// `server/discover` requests answered.
    pub discovers_answered: u64,
    /// Requests handled under a modern revision (2026-07-28), whether
    /// answered here or by the handler (`server/discover` included).
    pub modern_requests: u64,
    /// Requests refused -32022: their `_meta` named a version not spoken.
    pub unsupported_version_refused: u64,
    /// Requests refused -32602 for their `_meta`: not an object, a version
    /// that is not a string, or a modern request (or one in a session that
    /// began modern) without the required keys.
    pub missing_meta_refused: u64,
}

/// What the client said about itself in the `initialize` that was answered,
/// or in the `_meta` of a modern request, kept within the same bounds as
/// the server's own (at most [`MAX_SERVER_INFO_BYTES`] +
/// [`MAX_CAPABILITIES_BYTES`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ClientHello {
    /// The protocol version answered (`initialize`), or the one the modern
    /// request named.
    pub protocol_version: &'static str,
    /// The client's `clientInfo`; `None` when absent, malformed or above
    /// [`MAX_SERVER_INFO_BYTES`].
    pub client_info: Option<Implementation>,
    /// The client's `capabilities` (raw), for a server that wants to know
    /// whether it may ask for sampling, roots or elicitation; `None` when
    /// absent, not an object or above [`MAX_CAPABILITIES_BYTES`].
    pub capabilities: Option<Box<RawValue>>,
}

/// Where a request goes.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum Route {
    /// Answer it with this, without the handler.
    Answer(Result<Box<RawValue>, ErrorObject>),
    /// Start the handler for it.
    Handler,
}

/// The revision one request is handled under, and the client's context
/// that goes with it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Revision {
    /// The protocol version; `None`: a request before `initialize` (or one
    /// without a version under the way out), served as always.
    pub(crate) version: Option<&'static str>,
    /// What the client said about itself: in the request's `_meta`, else
    /// in `initialize`.
    pub(crate) client: Option<Arc<ClientHello>>,
}

impl Revision {
    /// Whether results must take the 2026-07-28 shape.
    pub(crate) fn is_modern(&self) -> bool {
        self.version.is_some_and(is_modern)
    }
}

/// What a request's `params._meta` says of its revision.
enum Meta<'a> {
    /// No `_meta`, or one without a protocol version.
    Absent,
    /// A `_meta` naming a version (as sent, maybe not one spoken).
    Named {
        version: Cow<'a, str>,
        capabilities: Option<&'a RawValue>,
        info: Option<&'a RawValue>,
    },
    /// A `_meta` that is not an object, or a version that is not a string.
    Malformed(String),
}

fn read_meta(params: Option<&RawValue>) -> Meta<'_> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", default, borrow)]
        meta: Option<&'a RawValue>,
    }
    // The names are those of `META_*` (a test checks they agree).
    #[derive(Deserialize)]
    struct Context<'a> {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion", default, borrow)]
        version: Option<Cow<'a, str>>,
        #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default, borrow)]
        capabilities: Option<&'a RawValue>,
        #[serde(rename = "io.modelcontextprotocol/clientInfo", default, borrow)]
        info: Option<&'a RawValue>,
    }
    // Params that are not an object carry no `_meta` (the method's own
    // checks refuse them).
    let Some(meta) = params
        .filter(|p| p.get().trim_start().starts_with('{'))
        .and_then(|p| serde_json::from_str::<Params<'_>>(p.get()).ok())
        .and_then(|p| p.meta)
    else {
        return Meta::Absent;
    };
    if !meta.get().starts_with('{') {
        return Meta::Malformed("_meta is not an object".to_owned());
    }
    match serde_json::from_str::<Context<'_>>(meta.get()) {
        Ok(Context {
            version: Some(version),
            capabilities,
            info,
        }) => Meta::Named {
            version,
            capabilities,
            info,
        },
        Ok(_) => Meta::Absent,
        Err(e) => Meta::Malformed(format!("_meta: {e}")),
    }
}

/// The client's context, bounded: a malformed or oversized part is dropped.
fn client_hello(
    version: &'static str,
    info: Option<&RawValue>,
    capabilities: Option<&RawValue>,
) -> ClientHello {
    ClientHello {
        protocol_version: version,
        client_info: info
            .and_then(|i| serde_json::from_str::<Implementation>(i.get()).ok())
            .filter(|i| i.name.len() + i.version.len() <= MAX_SERVER_INFO_BYTES),
        capabilities: capabilities
            .filter(|c| c.get().len() <= MAX_CAPABILITIES_BYTES && c.get().starts_with('{'))
            .map(ToOwned::to_owned),
    }
}

/// Error -32022 for a request naming `requested`, with the versions spoken.
fn unsupported_version(requested: &str) -> ErrorObject {
    #[derive(Serialize)]
    struct Data<'a> {
        requested: &'a str,
        supported: &'static [&'static str],
    }
    let mut cut = requested.len().min(MAX_ECHOED_VERSION_BYTES);
    while !requested.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut e = ErrorObject::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version");
    e.data = to_raw(&Data {
        requested: &requested[..cut],
        supported: SUPPORTED_PROTOCOL_VERSIONS,
    })
    .ok();
    e
}

fn missing_meta(what: &str) -> ErrorObject {
    ErrorObject::new(
        INVALID_PARAMS,
        format!("request _meta is missing or has malformed required fields: {what}"),
    )
}

/// `result` in the shape a modern request's result must have: with
/// `"resultType":"complete"` when it has no `resultType`, and for a
/// `cacheable` method `"ttlMs":0` and `"cacheScope":"private"` when absent.
/// `None`: keep `result` as it is (complete already, or not an object).
pub(crate) fn modern_result(result: &RawValue, cacheable: bool) -> Option<Box<RawValue>> {
    const COMPLETE: (&str, &str) = ("resultType", r#""complete""#);
    let fields: &[(&str, &str)] = if cacheable {
        &[COMPLETE, ("ttlMs", "0"), ("cacheScope", r#""private""#)]
    } else {
        &[COMPLETE]
    };
    // `insert_missing` only adds valid members to a valid object.
    RawValue::from_string(insert_missing(result.get(), fields)?).ok()
}

/// Answers the protocol basics of one session from a [`ServerBasics`]
/// (see [`ServerBasics`]). Sans-IO; the serve lifecycle calls it for
/// each admitted request.
#[derive(Debug)]
pub(crate) struct BasicsRouter {
    basics: ServerBasics,
    protocol_version: Option<&'static str>,
    /// Shared with every handler started after `initialize`.
    client: Option<Arc<ClientHello>>,
    /// The session began with `server/discover` or a modern request,
    /// before any `initialize`: a request must then say its revision.
    began_modern: bool,
    /// The context of the last modern request, for the report.
    last_modern: Option<Arc<ClientHello>>,
    metrics: BasicsMetrics,
}

impl BasicsRouter {
    /// A router for a new session.
    pub(crate) fn new(basics: ServerBasics) -> Self {
        Self {
            basics,
            protocol_version: None,
            client: None,
            began_modern: false,
            last_modern: None,
            metrics: BasicsMetrics::default(),
        }
    }

    /// The protocol version `initialize` was answered with, once it was.
    pub(crate) fn protocol_version(&self) -> Option<&'static str> {
        self.protocol_version
    }

    /// What the client said in the `initialize` that was answered (shared:
    /// an adapter hands a clone of the `Arc` to each handler).
    pub(crate) fn client(&self) -> Option<&Arc<ClientHello>> {
        self.client.as_ref()
    }

    /// What the client said in the `_meta` of the last modern request.
    pub(crate) fn last_modern_client(&self) -> Option<&Arc<ClientHello>> {
        self.last_modern.as_ref()
    }

    /// Whether the session began with `server/discover` or a modern request.
    pub(crate) fn began_modern(&self) -> bool {
        self.began_modern
    }

    /// The counters so far.
    pub(crate) fn metrics(&self) -> &BasicsMetrics {
        &self.metrics
    }

    /// Where `request` goes — answered here, or to the handler — and the
    /// revision it is handled under (an answer here is in the legacy
    /// shape; the lifecycle gives a modern one its 2026-07-28 fields).
    #[must_use]
    pub(crate) fn route(&mut self, request: &Request) -> (Route, Revision) {
        let method = request.method.as_str();
        let meta = read_meta(request.params.as_deref());
        if !self.basics.answer {
            let revision = match meta {
                Meta::Named {
                    version,
                    capabilities,
                    info,
                } => match spoken(&version) {
                    Some(v) => Revision {
                        version: Some(v),
                        client: Some(Arc::new(client_hello(v, info, capabilities))),
                    },
                    None => Revision::default(),
                },
                _ => Revision::default(),
            };
            return (Route::Handler, revision);
        }
        if method == INITIALIZE {
            let answer = self.initialize(request.params.as_deref());
            self.metrics.answered += 1;
            return (Route::Answer(answer), Revision::default());
        }
        let revision = match self.revision_of(method, meta) {
            Ok(r) => r,
            Err(e) => {
                self.metrics.answered += 1;
                return (Route::Answer(Err(e)), Revision::default());
            }
        };
        let modern = revision.is_modern();
        if modern {
            self.metrics.modern_requests += 1;
        }
        if revision.version.is_none() && method != PING {
            self.metrics.requests_before_initialize += 1;
        }
        let answer = match method {
            DISCOVER => {
                self.metrics.discovers_answered += 1;
                self.discover()
            }
            PING | SET_LEVEL if modern => {
                self.metrics.method_not_found += 1;
                Err(ErrorObject::new(
                    METHOD_NOT_FOUND,
                    format!("Method not found: {method} (removed in 2026-07-28)"),
                ))
            }
            PING => Ok(empty_object()),
            _ if !self.basics.serves(method) => {
                self.metrics.method_not_found += 1;
                Err(ErrorObject::new(
                    METHOD_NOT_FOUND,
                    format!("Method not found: {method}"),
                ))
            }
            "tools/list" if !self.basics.tools.is_empty() => self.tools_list(),
            "tools/call" if !self.basics.tools.is_empty() => {
                match self.check_tool_call(request.params.as_deref()) {
                    Ok(()) => return (Route::Handler, revision),
                    Err(e) => {
                        self.metrics.unknown_tools += 1;
                        Err(e)
                    }
                }
            }
            _ => return (Route::Handler, revision),
        };
        self.metrics.answered += 1;
        (Route::Answer(answer), revision)
    }

    /// The revision of a request other than `initialize` (see
    /// [`ServerBasics`], "The revisions spoken"), or the error refusing it.
    fn revision_of(&mut self, method: &str, meta: Meta<'_>) -> Result<Revision, ErrorObject> {
        let discover = method == DISCOVER;
        let revision = match meta {
            Meta::Malformed(why) => {
                self.metrics.missing_meta_refused += 1;
                return Err(missing_meta(&why));
            }
            Meta::Named {
                version,
                capabilities,
                info,
            } => {
                let Some(v) = spoken(&version) else {
                    self.metrics.unsupported_version_refused += 1;
                    return Err(unsupported_version(&version));
                };
                if is_modern(v)
                    && !discover
                    && !capabilities.is_some_and(|c| c.get().starts_with('{'))
                {
                    self.metrics.missing_meta_refused += 1;
                    return Err(missing_meta(META_CLIENT_CAPABILITIES));
                }
                let hello = Arc::new(client_hello(v, info, capabilities));
                if is_modern(v) {
                    self.last_modern = Some(hello.clone());
                }
                Revision {
                    version: Some(v),
                    client: Some(hello),
                }
            }
            Meta::Absent => match self.protocol_version {
                Some(v) => Revision {
                    version: Some(v),
                    client: self.client.clone(),
                },
                // Lenient: a discover without `_meta` is answered in the newest revision.
                None if discover => Revision {
                    version: Some(MODERN_DEFAULT),
                    client: None,
                },
                None if self.began_modern => {
                    self.metrics.missing_meta_refused += 1;
                    return Err(missing_meta(&format!(
                        "{META_PROTOCOL_VERSION}, {META_CLIENT_CAPABILITIES}"
                    )));
                }
                None => Revision::default(),
            },
        };
        if self.protocol_version.is_none() && (discover || revision.is_modern()) {
            self.began_modern = true;
        }
        Ok(revision)
    }

    fn discover(&self) -> Result<Box<RawValue>, ErrorObject> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct DiscoverResult<'a> {
            result_type: &'static str,
            supported_versions: &'static [&'static str],
            capabilities: &'a Map<String, Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            instructions: Option<&'a str>,
            ttl_ms: u64,
            cache_scope: &'static str,
            #[serde(rename = "_meta")]
            meta: BTreeMap<&'static str, &'a Implementation>,
        }
        to_raw(&DiscoverResult {
            result_type: "complete",
            supported_versions: SUPPORTED_PROTOCOL_VERSIONS,
            capabilities: &self.basics.answered_capabilities(),
            instructions: self.basics.instructions.as_deref(),
            ttl_ms: 0,
            cache_scope: "private",
            meta: BTreeMap::from([(META_SERVER_INFO, &self.basics.server_info)]),
        })
        .map_err(internal)
    }

    fn initialize(&mut self, params: Option<&RawValue>) -> Result<Box<RawValue>, ErrorObject> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Params<'a> {
            #[serde(borrow)]
            protocol_version: Cow<'a, str>,
            // Kept raw: a malformed one must not fail the handshake.
            #[serde(default, borrow)]
            client_info: Option<&'a RawValue>,
            #[serde(default, borrow)]
            capabilities: Option<&'a RawValue>,
        }
        if let Some(v) = self.protocol_version {
            self.metrics.initialize_refused += 1;
            return Err(ErrorObject::new(
                INVALID_REQUEST,
                format!("initialize was already answered; this session speaks {v}"),
            ));
        }
        let parsed = params
            .ok_or_else(|| "no params".to_owned())
            .and_then(|p| serde_json::from_str::<Params<'_>>(p.get()).map_err(|e| e.to_string()));
        let params = match parsed {
            Ok(p) => p,
            Err(e) => {
                self.metrics.initialize_refused += 1;
                return Err(ErrorObject::new(
                    INVALID_PARAMS,
                    format!("initialize needs params with a string protocolVersion: {e}"),
                ));
            }
        };
        let version = negotiate_version(&params.protocol_version);
        let capabilities = to_raw(&*self.basics.answered_capabilities()).map_err(internal)?;
        let result = InitializeResult {
            protocol_version: version.to_owned(),
            capabilities,
            server_info: self.basics.server_info.clone(),
            instructions: self.basics.instructions.clone(),
        };
        let raw = to_raw(&result).map_err(internal)?;
        let client = client_hello(version, params.client_info, params.capabilities);
        tracing::debug!(
            // Bounded: a client's version string can be as long as a frame.
            asked_len = params.protocol_version.len(),
            answered = version,
            client = ?client.client_info,
            "initialize answered"
        );
        self.protocol_version = Some(version);
        self.client = Some(Arc::new(client));
        Ok(raw)
    }

    fn tools_list(&self) -> Result<Box<RawValue>, ErrorObject> {
        #[derive(Serialize)]
        struct ToolsList<'a> {
            tools: &'a [Box<RawValue>],
        }
        to_raw(&ToolsList {
            tools: &self.basics.tools,
        })
        .map_err(internal)
    }

    fn check_tool_call(&self, params: Option<&RawValue>) -> Result<(), ErrorObject> {
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow)]
            name: Cow<'a, str>,
        }
        let name = params
            .and_then(|p| serde_json::from_str::<Params<'_>>(p.get()).ok())
            .map(|p| p.name)
            .ok_or_else(|| {
                ErrorObject::new(INVALID_PARAMS, "tools/call needs params with a string name")
            })?;
        if self.basics.tool_names.contains(name.as_ref()) {
            Ok(())
        } else {
            Err(ErrorObject::new(
                INVALID_PARAMS,
                format!("Unknown tool: {name}"),
            ))
        }
    }
}

/// The revision a discover without `_meta` is answered in: the newest.
const MODERN_DEFAULT: &str = SUPPORTED_PROTOCOL_VERSIONS[0];

/// `version` as one of [`SUPPORTED_PROTOCOL_VERSIONS`], if it is one.
fn spoken(version: &str) -> Option<&'static str> {
    SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == version)
        .copied()
}

fn empty_object() -> Box<RawValue> {
    // `{}` is valid JSON.
    RawValue::from_string("{}".to_owned()).expect("`{}` is valid JSON")
}

fn internal(e: serde_json::Error) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, format!("encoding the answer: {e}"))
}

#[cfg(test)]
mod tests;
