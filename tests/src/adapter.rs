//! The one interface the conformance suite drives, implemented once per
//! adapter. It is synchronous (each async adapter runs on its own executor
//! behind it), so every suite test is written once and runs unchanged
//! against tokio, async-std and the blocking adapter.

use std::time::Duration;

use mcp_stdio_core::ClientMetrics;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Negotiated;
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::{ErrorObject, Id, Notification, RawResult, RawValue, Request};
use mcp_stdio_core::{LiveSnapshot, Progress};

/// A result as the suite sees it.
pub type Outcome = Result<RawResult, RequestError>;

/// An adapter under test.
pub trait Adapter: 'static {
    /// Its name, for messages.
    const NAME: &'static str;
    /// Its client, behind the suite's interface. `'static` so the suite can
    /// move it to a watchdog thread and bound calls that must not hang.
    type Client: SuiteClient + 'static;

    /// Spawns an MCP server.
    fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<Self::Client>;
}

/// A server→client message as the suite sees it.
pub enum SuiteIncoming {
    /// A request with a way to answer it.
    Request(
        Request,
        Box<dyn FnOnce(Result<Box<RawValue>, ErrorObject>) + Send>,
    ),
    /// A notification.
    Notification(Notification),
}

/// A request in flight.
pub trait SuitePending: Send {
    /// Its id.
    fn id(&self) -> Id;
    /// Cancels it (G6).
    fn cancel(&self, reason: &str);
    /// Waits for its outcome.
    fn wait(self: Box<Self>) -> Outcome;
}

/// A `ClientHandle` behind the suite's interface: cloned into threads.
pub trait SuiteHandle: Send {
    /// `call_tool` through the handle.
    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome;
    /// Another handle on the same session.
    fn clone_handle(&self) -> Box<dyn SuiteHandle>;
}

/// A client under test. Dropping it must kill the server's process group.
pub trait SuiteClient: Send {
    /// The server's pid (= its process group id).
    fn pid(&self) -> u32;
    /// The MCP handshake.
    fn initialize(&self) -> Result<Negotiated, InitializeError>;
    /// A request with a timeout, waited for.
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome;
    /// A request sent, not waited for.
    fn start(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<Box<dyn SuitePending>, RequestError>;
    /// A notification.
    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError>;
    /// The next server→client message, waiting at most `wait`.
    fn next_incoming(&self, wait: Duration) -> Option<SuiteIncoming>;
    /// The session's counters (`None` once it is over).
    fn metrics(&self) -> Option<ClientMetrics>;
    /// The counters and the newest `stderr_bytes` of stderr, while it runs.
    fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot>;
    /// `list_tools`: one page of `tools/list`.
    fn list_tools(&self, cursor: Option<&str>) -> Outcome;
    /// `call_tool`, with the session's default timeout.
    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome;
    /// `call_tool_with_progress`: the progress stream read to its end (each
    /// update as it came), then the call's outcome.
    fn call_tool_collecting_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(Vec<Progress>, Outcome), RequestError>;
    /// A handle on the session, to use from other threads.
    fn handle(&self) -> Box<dyn SuiteHandle>;
    /// Graceful shutdown, returning the record.
    fn shutdown(self: Box<Self>) -> SessionRecord;
    /// Waits for the server to end by itself.
    fn wait(self: Box<Self>) -> SessionRecord;
}

impl std::fmt::Debug for SuiteIncoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Request(r, _) => f.debug_tuple("Request").field(r).finish(),
            Self::Notification(n) => f.debug_tuple("Notification").field(n).finish(),
        }
    }
}
