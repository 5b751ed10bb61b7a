//! The protocol basics `serve` answers by itself, so a server's handler only
//! sees its own work.
//!
//! The whole story is on [`ServerBasics`].

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::session::client::INITIALIZE;
use crate::session::handshake::{negotiate_version, Implementation, InitializeResult};
use crate::wire::message::{
    to_raw, ErrorObject, RawValue, Request, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND,
};

/// The method of a ping.
pub(crate) const PING: &str = "ping";
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
/// | request | answer |
/// | --- | --- |
/// | `initialize` | the client's `protocolVersion` when this crate speaks it, else the latest ([`negotiate_version`]); the capabilities, server info and instructions given. Params without a string `protocolVersion`: -32602 |
/// | a second `initialize` (after one was answered) | -32600; the session keeps the version first negotiated |
/// | `ping` | `{}`, at any time |
/// | `tools/list`, when tools were given | `{"tools":[…]}`, all of them, in the order given (one page, no cursor) |
/// | `tools/call`, when tools were given | a name not given: -32602 `unknown tool`; else the handler |
/// | a method the server does not serve | -32601 |
/// | anything else | the handler, with its cancel token |
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
///   that probe with `tools/list` or `ping` first.
/// - **The client's `clientInfo` and `capabilities`** are kept, bounded
///   ([`ClientHello`]): a malformed or oversized one is dropped, never a
///   reason to refuse the handshake.
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
/// turns all of this off: the handler sees every request, `initialize` and
/// `ping` included, and answers them itself.
///
/// # Worst-case memory
///
/// [`MAX_SERVER_INFO_BYTES`] + [`MAX_CAPABILITIES_BYTES`] +
/// [`MAX_INSTRUCTIONS_BYTES`] + [`MAX_TOOL_LIST_BYTES`] (plus one name per
/// tool, at most [`MAX_TOOLS`] × [`MAX_TOOL_NAME_BYTES`]) +
/// [`MAX_EXTRA_METHODS`] × [`MAX_METHOD_NAME_BYTES`]: about 1.3 MiB, fixed
/// when `serve` starts; plus the client's [`ClientHello`] once it said it
/// (at most [`MAX_SERVER_INFO_BYTES`] + [`MAX_CAPABILITIES_BYTES`], shared
/// by every handler). An answer is built per request and queued like a
/// handler's response (one per request in flight, under `max_concurrent`).
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
    /// `initialize` or the `tools/list` result, without the JSON-RPC
    /// envelope), in bytes: compare it with the wire limit.
    pub fn largest_answer(&self) -> usize {
        // Per-key JSON overhead and the longest protocol version, rounded up.
        const SLACK: usize = 256;
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
        if !self.answer || method == INITIALIZE || method == PING || self.methods.contains(method) {
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
    /// `initialize` was answered (served anyway).
    pub requests_before_initialize: u64,
}

/// What the client said about itself in the `initialize` that was answered,
/// kept within the same bounds as the server's own (at most
/// [`MAX_SERVER_INFO_BYTES`] + [`MAX_CAPABILITIES_BYTES`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ClientHello {
    /// The protocol version answered.
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

/// Answers the protocol basics of one session from a [`ServerBasics`]
/// (see [`ServerBasics`]). Sans-IO; the serve lifecycle calls it for
/// each admitted request.
#[derive(Debug)]
pub(crate) struct BasicsRouter {
    basics: ServerBasics,
    protocol_version: Option<&'static str>,
    /// Shared with every handler started after `initialize`.
    client: Option<Arc<ClientHello>>,
    metrics: BasicsMetrics,
}

impl BasicsRouter {
    /// A router for a new session.
    pub(crate) fn new(basics: ServerBasics) -> Self {
        Self {
            basics,
            protocol_version: None,
            client: None,
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

    /// The counters so far.
    pub(crate) fn metrics(&self) -> &BasicsMetrics {
        &self.metrics
    }

    /// Where `request` goes: answered here, or to the handler.
    #[must_use]
    pub(crate) fn route(&mut self, request: &Request) -> Route {
        if !self.basics.answer {
            return Route::Handler;
        }
        let method = request.method.as_str();
        if self.protocol_version.is_none() && method != INITIALIZE && method != PING {
            self.metrics.requests_before_initialize += 1;
        }
        let answer = match method {
            INITIALIZE => self.initialize(request.params.as_deref()),
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
                    Ok(()) => return Route::Handler,
                    Err(e) => {
                        self.metrics.unknown_tools += 1;
                        Err(e)
                    }
                }
            }
            _ => return Route::Handler,
        };
        self.metrics.answered += 1;
        Route::Answer(answer)
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
        let client = ClientHello {
            protocol_version: version,
            client_info: params
                .client_info
                .and_then(|i| serde_json::from_str::<Implementation>(i.get()).ok())
                .filter(|i| i.name.len() + i.version.len() <= MAX_SERVER_INFO_BYTES),
            capabilities: params
                .capabilities
                .filter(|c| c.get().len() <= MAX_CAPABILITIES_BYTES && c.get().starts_with('{'))
                .map(ToOwned::to_owned),
        };
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

fn empty_object() -> Box<RawValue> {
    // `{}` is valid JSON.
    RawValue::from_string("{}".to_owned()).expect("`{}` is valid JSON")
}

fn internal(e: serde_json::Error) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, format!("encoding the answer: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::session::handshake::{LATEST_HANDSHAKE_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
    use crate::wire::message::Id;

    fn request(method: &str, params: Option<Value>) -> Request {
        Request {
            id: Id::Number(1),
            method: method.to_owned(),
            params: params.map(|p| to_raw(&p).unwrap()),
        }
    }

    fn answer(router: &mut BasicsRouter, method: &str, params: Option<Value>) -> Value {
        match router.route(&request(method, params)) {
            Route::Answer(Ok(v)) => serde_json::from_str(v.get()).unwrap(),
            Route::Answer(Err(e)) => json!({"error": e.code, "message": e.message}),
            Route::Handler => json!("handler"),
        }
    }

    fn init(version: &str) -> Option<Value> {
        Some(
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
        )
    }

    fn one_tool() -> ServerBasics {
        let mut b = ServerBasics::default();
        b.server_info("echo-server", "1.2.3")
            .unwrap()
            .instructions("say hi")
            .unwrap()
            .tool(&json!({"name": "echo", "inputSchema": {"type": "object"}}))
            .unwrap();
        b
    }

    #[test]
    fn initialize_negotiation_table() {
        // (asked, answered): supported versions are echoed, anything else gets the latest handshake version.
        let mut table: Vec<(&str, &str)> = SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .map(|v| (*v, *v))
            .collect();
        table.push(("2023-01-01", LATEST_HANDSHAKE_VERSION));
        table.push(("2099-12-31", LATEST_HANDSHAKE_VERSION));
        table.push(("", LATEST_HANDSHAKE_VERSION));
        for (asked, answered) in table {
            let mut r = BasicsRouter::new(one_tool());
            let v = answer(&mut r, "initialize", init(asked));
            assert_eq!(v["protocolVersion"], answered, "asked {asked:?}: {v}");
            assert_eq!(
                v["serverInfo"],
                json!({"name": "echo-server", "version": "1.2.3"})
            );
            assert_eq!(v["instructions"], "say hi");
            // Tools given: `tools` is declared even though the capabilities did not say so.
            assert_eq!(v["capabilities"], json!({"tools": {}}));
            assert_eq!(r.protocol_version(), Some(answered));
            let client = r.client().expect("the client's hello is kept");
            assert_eq!(client.client_info, Some(Implementation::new("c", "1")));
            assert_eq!(client.capabilities.as_ref().map(|c| c.get()), Some("{}"));
        }
    }

    #[test]
    fn a_malformed_or_oversized_client_hello_does_not_fail_the_handshake() {
        for params in [
            json!({"protocolVersion": "2025-06-18"}),
            json!({"protocolVersion": "2025-06-18", "clientInfo": 5, "capabilities": []}),
            json!({"protocolVersion": "2025-06-18", "clientInfo": {"name": "n"}}),
            json!({"protocolVersion": "2025-06-18",
                   "clientInfo": {"name": "n".repeat(MAX_SERVER_INFO_BYTES), "version": "1"},
                   "capabilities": {"x": "y".repeat(MAX_CAPABILITIES_BYTES)}}),
        ] {
            let mut r = BasicsRouter::new(ServerBasics::default());
            let v = answer(&mut r, "initialize", Some(params.clone()));
            assert_eq!(v["protocolVersion"], "2025-06-18", "{params}");
            let client = r.client().expect("kept");
            assert_eq!(client.client_info, None, "{params}");
            assert!(client.capabilities.is_none(), "{params}");
        }
        let mut r = BasicsRouter::new(ServerBasics::default());
        let _ = answer(
            &mut r,
            "initialize",
            Some(json!({"protocolVersion": "2025-06-18",
            "clientInfo": {"name": "host", "version": "2", "title": "Host"},
            "capabilities": {"sampling": {}}})),
        );
        let client = r.client().unwrap();
        assert_eq!(client.client_info, Some(Implementation::new("host", "2")));
        assert_eq!(
            client.capabilities.as_ref().unwrap().get(),
            r#"{"sampling":{}}"#
        );
    }

    #[test]
    fn initialize_without_a_protocol_version_is_invalid_params() {
        for params in [
            None,
            Some(json!({})),
            Some(json!({"protocolVersion": 20250618})),
            Some(json!([1, 2])),
        ] {
            let mut r = BasicsRouter::new(ServerBasics::default());
            let v = answer(&mut r, "initialize", params.clone());
            assert_eq!(v["error"], INVALID_PARAMS, "{params:?}: {v}");
            assert_eq!(r.protocol_version(), None);
            // A good retry still works.
            let v = answer(&mut r, "initialize", init("2025-06-18"));
            assert_eq!(v["protocolVersion"], "2025-06-18");
            assert_eq!(r.metrics().initialize_refused, 1);
        }
    }

    #[test]
    fn a_second_initialize_is_refused_and_keeps_the_first_version() {
        let mut r = BasicsRouter::new(ServerBasics::default());
        assert_eq!(
            answer(&mut r, "initialize", init("2025-03-26"))["protocolVersion"],
            "2025-03-26"
        );
        let v = answer(&mut r, "initialize", init("2025-11-25"));
        assert_eq!(v["error"], INVALID_REQUEST, "{v}");
        assert!(v["message"].as_str().unwrap().contains("2025-03-26"), "{v}");
        assert_eq!(r.protocol_version(), Some("2025-03-26"));
    }

    #[test]
    fn ping_is_an_empty_object_before_and_after_initialize() {
        let mut r = BasicsRouter::new(ServerBasics::default());
        assert_eq!(answer(&mut r, "ping", None), json!({}));
        let _ = answer(&mut r, "initialize", init("2025-06-18"));
        assert_eq!(answer(&mut r, "ping", Some(json!({}))), json!({}));
        assert_eq!(r.metrics().requests_before_initialize, 0);
        assert_eq!(r.metrics().answered, 3);
    }

    #[test]
    fn method_not_found_for_what_the_capabilities_do_not_declare() {
        let mut b = ServerBasics::default();
        b.capabilities(&json!({"resources": {}, "logging": {}}))
            .unwrap()
            .method("x/custom")
            .unwrap();
        let mut r = BasicsRouter::new(b);
        for (method, expect) in [
            ("resources/list", json!("handler")),
            ("resources/templates/list", json!("handler")),
            ("logging/setLevel", json!("handler")),
            ("x/custom", json!("handler")),
            ("tools/list", json!(METHOD_NOT_FOUND)),
            ("tools/call", json!(METHOD_NOT_FOUND)),
            ("prompts/get", json!(METHOD_NOT_FOUND)),
            ("completion/complete", json!(METHOD_NOT_FOUND)),
            ("no/such", json!(METHOD_NOT_FOUND)),
        ] {
            let v = answer(&mut r, method, None);
            let got = if v == json!("handler") {
                v
            } else {
                v["error"].clone()
            };
            assert_eq!(got, expect, "{method}");
        }
        assert_eq!(r.metrics().method_not_found, 5);
        // Served before initialize, and counted.
        assert_eq!(r.metrics().requests_before_initialize, 9);
    }

    #[test]
    fn every_capability_maps_to_its_methods() {
        let mut b = ServerBasics::default();
        b.capabilities(&json!({"tools": {}, "prompts": {}, "completions": {}}))
            .unwrap();
        for m in [
            "tools/list",
            "tools/call",
            "prompts/list",
            "prompts/get",
            "completion/complete",
            "initialize",
            "ping",
        ] {
            assert!(b.serves(m), "{m}");
        }
        for m in [
            "resources/read",
            "logging/setLevel",
            "tools/other",
            "toolsx/list",
        ] {
            assert!(!b.serves(m), "{m}");
        }
        assert!(ServerBasics::passthrough().serves("anything/at/all"));
    }

    #[test]
    fn the_core_answers_tools_list_and_refuses_unknown_tools() {
        let mut b = one_tool();
        b.tool(&json!({"name": "slow", "description": "d", "inputSchema": {"type": "object"}}))
            .unwrap();
        let mut r = BasicsRouter::new(b);
        let v = answer(&mut r, "tools/list", None);
        let names: Vec<&str> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["echo", "slow"]);
        assert_eq!(v["tools"][1]["description"], "d");
        let call = |name: Value| Some(json!({"name": name, "arguments": {}}));
        assert_eq!(
            answer(&mut r, "tools/call", call(json!("echo"))),
            json!("handler")
        );
        assert_eq!(
            answer(&mut r, "tools/call", call(json!("nope")))["error"],
            INVALID_PARAMS
        );
        assert_eq!(
            answer(&mut r, "tools/call", call(json!(7)))["error"],
            INVALID_PARAMS
        );
        assert_eq!(answer(&mut r, "tools/call", None)["error"], INVALID_PARAMS);
        assert_eq!(r.metrics().unknown_tools, 3);
    }

    #[test]
    fn declared_tools_without_a_list_go_to_the_handler() {
        let mut b = ServerBasics::default();
        b.capabilities(&json!({"tools": {"listChanged": true}}))
            .unwrap();
        let mut r = BasicsRouter::new(b);
        assert_eq!(answer(&mut r, "tools/list", None), json!("handler"));
        assert_eq!(answer(&mut r, "tools/call", None), json!("handler"));
        let v = answer(&mut r, "initialize", init("2025-06-18"));
        assert_eq!(v["capabilities"], json!({"tools": {"listChanged": true}}));
        assert!(v.get("instructions").is_none(), "{v}");
        assert_eq!(v["serverInfo"]["name"], "mcp-stdio");
    }

    #[test]
    fn the_way_out_sends_every_request_to_the_handler() {
        let mut r = BasicsRouter::new(ServerBasics::passthrough());
        for m in ["initialize", "ping", "tools/list", "no/such"] {
            assert_eq!(
                answer(&mut r, m, init("2025-06-18")),
                json!("handler"),
                "{m}"
            );
        }
        let mut b = one_tool();
        b.answer_basics(false);
        let mut r = BasicsRouter::new(b);
        assert_eq!(answer(&mut r, "tools/call", None), json!("handler"));
        assert_eq!(r.metrics(), &BasicsMetrics::default());
        assert_eq!(r.protocol_version(), None);
    }

    #[test]
    fn setters_refuse_bad_or_oversized_values_and_change_nothing() {
        let mut b = ServerBasics::default();
        assert_eq!(
            b.capabilities(&json!([1])).unwrap_err(),
            BasicsError::CapabilitiesNotObject
        );
        assert!(matches!(
            b.capabilities(&json!({"x": "y".repeat(MAX_CAPABILITIES_BYTES)})),
            Err(BasicsError::TooLarge { .. })
        ));
        assert!(matches!(
            b.instructions("i".repeat(MAX_INSTRUCTIONS_BYTES + 1)),
            Err(BasicsError::TooLarge { .. })
        ));
        assert!(matches!(
            b.server_info("n".repeat(MAX_SERVER_INFO_BYTES), "1"),
            Err(BasicsError::TooLarge { .. })
        ));
        for bad in [
            json!("echo"),
            json!({"name": "echo"}),
            json!({"name": "", "inputSchema": {}}),
            json!({"name": "n".repeat(MAX_TOOL_NAME_BYTES + 1), "inputSchema": {}}),
            json!({"name": 1, "inputSchema": {}}),
        ] {
            assert!(
                matches!(b.tool(&bad), Err(BasicsError::InvalidTool(_))),
                "{bad}"
            );
        }
        b.tool(&json!({"name": "a", "inputSchema": {}})).unwrap();
        assert_eq!(
            b.tool(&json!({"name": "a", "inputSchema": {}}))
                .unwrap_err(),
            BasicsError::DuplicateTool("a".into())
        );
        let big = json!({"name": "big", "inputSchema": {"d": "x".repeat(MAX_TOOL_LIST_BYTES)}});
        assert!(matches!(b.tool(&big), Err(BasicsError::TooLarge { .. })));
        assert_eq!(b.get_tool_names().collect::<Vec<_>>(), ["a"]);
        for i in 1..MAX_TOOLS {
            b.tool(&json!({"name": format!("t{i}"), "inputSchema": {}}))
                .unwrap();
        }
        assert!(matches!(
            b.tool(&json!({"name": "one-more", "inputSchema": {}})),
            Err(BasicsError::TooMany { .. })
        ));
        assert!(matches!(b.method(""), Err(BasicsError::InvalidMethod(_))));
        assert!(matches!(
            b.method("m".repeat(MAX_METHOD_NAME_BYTES + 1)),
            Err(BasicsError::InvalidMethod(_))
        ));
        for i in 0..MAX_EXTRA_METHODS {
            b.method(format!("m{i}")).unwrap();
        }
        b.method("m0").unwrap();
        assert!(matches!(
            b.method("m-new"),
            Err(BasicsError::TooMany { .. })
        ));
        assert!(b.get_capabilities().is_empty());
        assert_eq!(b.get_instructions(), None);
        assert_eq!(b.get_server_info(), &Implementation::default());
    }

    #[test]
    fn largest_answer_bounds_the_real_answers() {
        let mut b = one_tool();
        b.capabilities(&json!({"logging": {}, "experimental": {"x": [1, 2, 3]}}))
            .unwrap()
            .instructions("é\"quoted\"\n".repeat(100))
            .unwrap();
        for i in 0..50 {
            b.tool(&json!({"name": format!("t{i}"), "inputSchema": {"type": "object"}}))
                .unwrap();
        }
        let bound = b.largest_answer();
        let mut r = BasicsRouter::new(b);
        for (m, p) in [("initialize", init("2025-06-18")), ("tools/list", None)] {
            let Route::Answer(Ok(v)) = r.route(&request(m, p)) else {
                panic!("{m} not answered")
            };
            assert!(v.get().len() <= bound, "{m}: {} > {bound}", v.get().len());
        }
    }
}
