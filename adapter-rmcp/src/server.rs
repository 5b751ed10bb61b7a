//! [`ServerTransport`]: rmcp's server role over this process's stdin and
//! stdout, driven by the core's [`ServeLifecycle`].
//!
//! One driver task owns stdin, stdout and the lifecycle, and waits the way
//! the tokio adapter's `serve` does: for input, for rmcp's answers, for the
//! pipe to take bytes and for the lifecycle's timer, whichever comes first,
//! never for a write alone (G1). rmcp sits where `serve`'s handlers sit:
//!
//! - `ServeAction::Start(request)` → the request goes to rmcp ([`Transport::receive`]);
//! - rmcp's response ([`Transport::send`]) → `ServeInput::HandlerFinished`,
//!   which replaces a result above the wire limit with an error for its id (G9);
//! - rmcp's notification → `ServeInput::Notify`, refused and counted past
//!   the wire limit or when the client does not read;
//! - `ServeAction::Cancel` → `notifications/cancelled` to rmcp, and the
//!   handler's end is reported at once (its response is suppressed, G7).

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mcp_stdio_core::{ErrorObject, Id, Notification, RawValue, Request, SERVER_ERROR};
use mcp_stdio_core::{ServeInput, ServeLifecycle, ServeOptions, ServeReport};
// The driver's own events go through the relay, never inline: a stalled
// stderr under a blocking subscriber must not stall the loop (G1).
use mcp_stdio_sys::log_relay::{self, Level};
use mcp_stdio_tokio::driver::stdio::{Stdin, Stdout};
use mcp_stdio_tokio::driver::{serve_dispatch, Dispatch, Runtime, Sink, Source};
use mcp_stdio_tokio::runtime::{Tokio, TokioIo};
use rmcp::model::JsonRpcMessage;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};

use crate::client::{error_object, method_and_params, to_id};
use crate::TransportError;

/// Messages for rmcp (requests, notifications, cancels) it has not taken
/// with [`Transport::receive`] yet. rmcp takes them as they come; if it
/// falls this far behind, a new request is answered with error -32000, a
/// notification is dropped and a cancel is not forwarded, each counted in
/// [`ServerReport`]. Worst case: this many decoded messages of at most
/// `max_frame` bytes each.
///
/// [`Transport::receive`]: https://docs.rs/rmcp/3/rmcp/transport/trait.Transport.html#tymethod.receive
pub const MAX_QUEUED_FOR_RMCP: usize = 256;
/// rmcp's responses and notifications waiting for the driver, which takes
/// them on every turn of its loop (worst case: this many messages, each at
/// most the size rmcp made it; one response per request in flight).
const COMMAND_QUEUE: usize = 64;

/// What the transport observed, published when its driver ends.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ServerReport {
    /// The serve lifecycle's report: the session's counters (responses
    /// replaced for passing the wire limit among them), how it ended,
    /// notifications refused, output given up at exit.
    pub serve: ServeReport,
    /// Requests answered with error -32000 because rmcp was
    /// [`MAX_QUEUED_FOR_RMCP`] messages behind.
    pub requests_refused_rmcp_behind: u64,
    /// Client notifications dropped because rmcp was [`MAX_QUEUED_FOR_RMCP`]
    /// messages behind, or because rmcp does not model them.
    pub notifications_dropped: u64,
    /// Cancels that could not be forwarded to rmcp (it was behind, or no
    /// longer receiving); the response was suppressed all the same.
    pub cancels_not_forwarded: u64,
    /// Requests rmcp's model could not decode, answered with error -32602.
    pub requests_undecodable: u64,
    /// rmcp's own requests to the client (roots, sampling, elicitation),
    /// refused at once with [`TransportError::ServerRequestUnsupported`].
    pub server_requests_refused: u64,
    /// The error that ended the loop when writing stdout failed.
    pub write_error: Option<String>,
}

/// rmcp's server transport over this process's stdin and stdout, with the
/// guarantees of mcp-stdio's `serve`.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use mcp_stdio_rmcp::ServerTransport;
/// use rmcp::ServiceExt;
///
/// #[derive(Clone)]
/// struct Hello;
/// impl rmcp::ServerHandler for Hello {}
///
/// let transport = ServerTransport::stdio()?;
/// let mut handle = transport.handle();
/// Hello.serve(transport).await?.waiting().await?;
/// let report = handle.report().await; // counters, how it ended
/// # let _ = report;
/// # Ok(())
/// # }
/// ```
///
/// - **G1**: stdin is read while stdout is blocked; a client that stops
///   reading still gets its cancels through, and the outgoing queue is
///   bounded by the session's limits (one response per request in flight,
///   `max_outgoing_bytes` of notifications).
/// - **G9**: a response above `max_frame` is replaced by a JSON-RPC error
///   for the same id; a notification above it is dropped and counted.
/// - **G7**: a cancel reaches rmcp (which cancels the handler's
///   `RequestContext::ct`) and the response is suppressed.
/// - At stdin end-of-file rmcp sees the transport close
///   ([`Transport::receive`] returns `None`) once it took what came before;
///   in-flight requests may still answer until the drain deadline
///   (`ServeOptions::drain_timeout`), then they are answered with an error.
///   [`Transport::close`] stops reading, answers what rmcp left unanswered
///   with an error, and waits for the output to drain (bounded by the drain
///   deadline plus `EXIT_WRITE_GRACE`).
///
/// Server→client requests (`peer.list_roots()`, sampling, elicitation) are
/// not carried: the serve session sends no requests of its own, so rmcp's
/// request fails at once with [`TransportError::ServerRequestUnsupported`]
/// (rmcp reports it as `ServiceError::TransportSend`), never a hang.
///
/// [`Transport::receive`]: https://docs.rs/rmcp/3/rmcp/transport/trait.Transport.html#tymethod.receive
/// [`Transport::close`]: https://docs.rs/rmcp/3/rmcp/transport/trait.Transport.html#tymethod.close
pub struct ServerTransport {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    commands: mpsc::Sender<Command>,
    report: watch::Receiver<Option<Arc<ServerReport>>>,
    server_requests_refused: Arc<AtomicU64>,
}

impl std::fmt::Debug for ServerTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTransport").finish_non_exhaustive()
    }
}

/// Reaches the transport's report once the transport is handed to rmcp.
#[derive(Debug, Clone)]
pub struct ServerHandle {
    report: watch::Receiver<Option<Arc<ServerReport>>>,
}

impl ServerHandle {
    /// The report once the driver ended (stdin closed and output drained,
    /// the transport closed, or stdout failed).
    pub async fn report(&mut self) -> Option<Arc<ServerReport>> {
        match self.report.wait_for(Option::is_some).await {
            Ok(report) => report.clone(),
            Err(_) => None,
        }
    }
}

impl ServerTransport {
    /// Serves on this process's stdin and stdout with the default limits.
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// Setting stdin or stdout non-blocking failed.
    pub fn stdio() -> io::Result<Self> {
        Self::stdio_with(&ServeOptions::default())
    }

    /// Serves on this process's stdin and stdout with `options` (wire limit,
    /// concurrency, outgoing queue, drain deadline; `serve`'s protocol basics
    /// are left to rmcp, which answers every request itself). Pipes and sockets are
    /// made non-blocking; their flags come back when the driver ends.
    /// (`helper_grace` is `serve`'s wait for `run_helper` runs at exit; this
    /// transport does not wait for them.)
    ///
    /// # Errors
    /// Setting stdin or stdout non-blocking failed.
    pub fn stdio_with(options: &ServeOptions) -> io::Result<Self> {
        let rt = Tokio::current()?;
        let input = Stdin::new(&rt)?;
        let output = Stdout::new(&rt)?;
        Ok(Self::start(rt, input, output, options))
    }

    /// Serves over any reader and writer (a socket, a pipe pair). Must be
    /// called inside a tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime (as `tokio::spawn`).
    pub fn with_io<R, W>(input: R, output: W, options: &ServeOptions) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let rt =
            Tokio::current().expect("ServerTransport::with_io is called inside a tokio runtime");
        Self::start(rt, TokioIo(input), TokioIo(output), options)
    }

    /// Starts the driver: the serve loop of `mcp-stdio-async` with rmcp
    /// where `serve`'s handlers are ([`ToRmcp`]).
    fn start<I, O>(rt: Tokio, input: I, output: O, options: &ServeOptions) -> Self
    where
        I: Source + Send + 'static,
        O: Sink + Send + 'static,
    {
        let (to_rmcp, incoming) = mpsc::channel(MAX_QUEUED_FOR_RMCP);
        let (commands, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        let (report_tx, report) = watch::channel(None);
        let server_requests_refused = Arc::new(AtomicU64::new(0));
        // rmcp answers `initialize`, `ping` and every method itself: the
        // core's protocol basics stay off whatever `options` say.
        let mut options = options.clone();
        options.basics_mut().answer_basics(false);
        let dispatch = ToRmcp {
            to_rmcp: Some(to_rmcp),
            commands: commands_rx,
            commands_open: true,
            started: HashSet::new(),
            counts: Counts::default(),
        };
        let refused = server_requests_refused.clone();
        let life = ServeLifecycle::new(&options);
        let driver = rt.clone();
        rt.spawn(Box::pin(async move {
            let (mut life, rmcp) = serve_dispatch(&driver, input, output, life, dispatch).await;
            let c = rmcp.counts;
            let report = ServerReport {
                write_error: life.take_write_error().map(|e| e.to_string()),
                serve: life.report(),
                requests_refused_rmcp_behind: c.requests_refused_rmcp_behind,
                notifications_dropped: c.notifications_dropped,
                cancels_not_forwarded: c.cancels_not_forwarded,
                requests_undecodable: c.requests_undecodable,
                server_requests_refused: refused.load(Ordering::Relaxed),
            };
            report_tx.send_replace(Some(Arc::new(report)));
        }));
        Self {
            incoming,
            commands,
            report,
            server_requests_refused,
        }
    }

    /// A handle to the transport's report, kept before rmcp takes the transport.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            report: self.report.clone(),
        }
    }
}

impl Transport<RoleServer> for ServerTransport {
    type Error = TransportError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let commands = self.commands.clone();
        let refused = self.server_requests_refused.clone();
        async move {
            let command = match item {
                JsonRpcMessage::Response(response) => Command::Respond {
                    id: to_id(&response.id),
                    result: Ok(serde_json::value::to_raw_value(&response.result)?),
                },
                JsonRpcMessage::Error(error) => {
                    let Some(id) = error.id else {
                        return Err(TransportError::Malformed("error without an id"));
                    };
                    Command::Respond {
                        id: to_id(&id),
                        result: Err(error_object(error.error)?),
                    }
                }
                JsonRpcMessage::Notification(notification) => {
                    let (method, params) = method_and_params(&notification.notification)?;
                    Command::Notify { method, params }
                }
                JsonRpcMessage::Request(request) => {
                    let (method, _) = method_and_params(&request.request)?;
                    refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%method, "server-to-client request refused: not carried by this transport");
                    return Err(TransportError::ServerRequestUnsupported { method });
                }
            };
            // The driver takes commands on every turn, never waiting on stdout.
            commands
                .send(command)
                .await
                .map_err(|_| TransportError::Closed)
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // A driver already gone has published its report: nothing to close.
        let _ = self.commands.send(Command::Close).await;
        let _ = self.report.wait_for(Option::is_some).await;
        Ok(())
    }
}

/// What rmcp hands the driver.
enum Command {
    /// rmcp's answer to request `id`.
    Respond {
        id: Id,
        result: Result<Box<RawValue>, ErrorObject>,
    },
    /// rmcp's notification for the client.
    Notify {
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// rmcp is done: stop reading, answer what is left, drain.
    Close,
}

/// The serve loop's dispatch for rmcp: a request goes to rmcp's
/// [`Transport::receive`], its answer comes back through [`Transport::send`].
///
/// [`Transport::receive`]: https://docs.rs/rmcp/3/rmcp/transport/trait.Transport.html#tymethod.receive
/// [`Transport::send`]: https://docs.rs/rmcp/3/rmcp/transport/trait.Transport.html#tymethod.send
struct ToRmcp {
    /// `None` once no more input comes: rmcp's `receive` then ends.
    to_rmcp: Option<mpsc::Sender<RxJsonRpcMessage<RoleServer>>>,
    commands: mpsc::Receiver<Command>,
    commands_open: bool,
    /// Requests handed to rmcp and not yet answered (≤ `max_concurrent`:
    /// the lifecycle starts no more).
    started: HashSet<Id>,
    counts: Counts,
}

/// The transport's own counters (see [`ServerReport`]).
#[derive(Default)]
struct Counts {
    requests_refused_rmcp_behind: u64,
    notifications_dropped: u64,
    cancels_not_forwarded: u64,
    requests_undecodable: u64,
}

impl Dispatch for ToRmcp {
    fn start(&mut self, life: &mut ServeLifecycle, request: Request) {
        let now = Instant::now();
        let message = match rmcp_request(&request) {
            Ok(message) => message,
            Err(e) => {
                self.counts.requests_undecodable += 1;
                let error = ErrorObject::new(
                    mcp_stdio_core::INVALID_PARAMS,
                    format!("request does not decode: {e}"),
                );
                let done = ServeInput::HandlerFinished {
                    id: &request.id,
                    result: Err(&error),
                };
                life.handle_input(now, done);
                return;
            }
        };
        if self.offer(message) {
            self.started.insert(request.id);
        } else {
            self.counts.requests_refused_rmcp_behind += 1;
            let error = ErrorObject::new(SERVER_ERROR, "server overloaded: requests not taken");
            let done = ServeInput::HandlerFinished {
                id: &request.id,
                result: Err(&error),
            };
            life.handle_input(now, done);
        }
    }

    fn cancel(&mut self, life: &mut ServeLifecycle, id: Id, reason: Option<String>) {
        if !self.forward_cancel(&id, reason.as_deref()) {
            self.counts.cancels_not_forwarded += 1;
        }
        // rmcp sends nothing for a cancelled request: its end is now.
        self.started.remove(&id);
        life.handle_input(Instant::now(), ServeInput::HandlerAborted(&id));
    }

    fn abort(&mut self, id: Id) {
        // Answered with an error by the lifecycle; rmcp's handler is told to stop.
        self.started.remove(&id);
        let _ = self.forward_cancel(&id, Some("the server is shutting down"));
    }

    fn notification(&mut self, notification: Notification) {
        let text = envelope(None, &notification.method, notification.params.as_deref());
        match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(&text) {
            Ok(message) => {
                if !self.offer(message) {
                    self.counts.notifications_dropped += 1;
                }
            }
            Err(e) => {
                log_relay::serve_event(
                    Level::Debug,
                    "notification rmcp does not model, dropped",
                    Some(format!("{}: {e}", notification.method)),
                );
                self.counts.notifications_dropped += 1;
            }
        }
    }

    fn poll_answers(
        &mut self,
        cx: &mut std::task::Context<'_>,
        life: &mut ServeLifecycle,
        now: Instant,
    ) -> bool {
        let mut busy = false;
        while self.commands_open {
            let std::task::Poll::Ready(command) = self.commands.poll_recv(cx) else {
                break;
            };
            busy = true;
            self.handle_command(life, now, command);
        }
        busy
    }

    fn input_ended(&mut self) {
        // Everything read so far is queued: rmcp takes it, then sees the end.
        self.to_rmcp = None;
    }
}

impl ToRmcp {
    /// Tells rmcp that request `id` is cancelled; `false` if it could not.
    fn forward_cancel(&mut self, id: &Id, reason: Option<&str>) -> bool {
        let params = serde_json::json!({"requestId": id, "reason": reason});
        let text = serde_json::json!({
            "jsonrpc": "2.0",
            "method": mcp_stdio_core::CANCELLED,
            "params": params,
        });
        match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(text) {
            Ok(message) => self.offer(message),
            Err(_) => false,
        }
    }

    /// Queues `message` for rmcp without waiting; `false` when rmcp is
    /// [`MAX_QUEUED_FOR_RMCP`] behind or no longer receiving.
    fn offer(&self, message: RxJsonRpcMessage<RoleServer>) -> bool {
        self.to_rmcp
            .as_ref()
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }

    fn handle_command(
        &mut self,
        life: &mut ServeLifecycle,
        now: Instant,
        command: Option<Command>,
    ) {
        match command {
            Some(Command::Respond { id, result }) => {
                self.started.remove(&id);
                let result = result.as_deref();
                life.handle_input(now, ServeInput::HandlerFinished { id: &id, result });
            }
            Some(Command::Notify { method, params }) => {
                // rmcp's notification: refused past the wire limit or when the
                // client does not read, counted and noted by the lifecycle (G9, G1).
                let notify = ServeInput::Notify {
                    method: &method,
                    params: params.as_deref(),
                };
                life.handle_input(now, notify);
            }
            Some(Command::Close) | None => {
                // rmcp answers nothing more: stop reading, answer what it left.
                self.commands_open = false;
                self.to_rmcp = None;
                life.handle_input(now, ServeInput::StopReading);
                let mut left: Vec<Id> = self.started.drain().collect();
                left.sort_by_key(ToString::to_string);
                for id in left {
                    life.handle_input(now, ServeInput::HandlerAborted(&id));
                }
            }
        }
    }
}

/// A JSON-RPC request or notification as text, for rmcp's decoder.
fn envelope(id: Option<&Id>, method: &str, params: Option<&RawValue>) -> String {
    // Ids, method names and raw params serialize infallibly.
    let mut text = String::from(r#"{"jsonrpc":"2.0""#);
    if let Some(id) = id {
        text.push_str(r#","id":"#);
        text.push_str(&serde_json::to_string(id).unwrap_or_default());
    }
    text.push_str(r#","method":"#);
    text.push_str(&serde_json::to_string(method).unwrap_or_default());
    if let Some(params) = params {
        text.push_str(r#","params":"#);
        text.push_str(params.get());
    }
    text.push('}');
    text
}

fn rmcp_request(request: &Request) -> Result<RxJsonRpcMessage<RoleServer>, serde_json::Error> {
    let text = envelope(
        Some(&request.id),
        &request.method,
        request.params.as_deref(),
    );
    serde_json::from_str(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_builds_what_rmcp_decodes() {
        let params = serde_json::value::to_raw_value(&serde_json::json!({"name": "echo"}))
            .expect("params encode");
        let request = Request {
            id: Id::String("a\"b".into()),
            method: "tools/call".into(),
            params: Some(params),
        };
        let message = rmcp_request(&request).expect("rmcp decodes a tools/call");
        assert!(matches!(message, JsonRpcMessage::Request(r) if r.id.to_string() == "a\"b"));
        let text = envelope(None, "notifications/initialized", None);
        let message: RxJsonRpcMessage<RoleServer> =
            serde_json::from_str(&text).expect("rmcp decodes initialized");
        assert!(matches!(message, JsonRpcMessage::Notification(_)));
    }
}
