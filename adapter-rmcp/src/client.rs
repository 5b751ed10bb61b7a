//! [`ClientTransport`]: rmcp's client role over [`mcp_stdio_tokio::Client`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcp_stdio_core::RequestFailure;
use mcp_stdio_core::{ErrorObject, Id, RawResult, RawValue, INTERNAL_ERROR, METHOD_NOT_FOUND};
use mcp_stdio_tokio::{
    CancelHandle, Client, ClientOptions, CommandSpec, IncomingMessage, RequestError, Responder,
    SessionRecord,
};
use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, NumberOrString, RequestId, ServerResult};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, watch, Notify, RwLock};

/// Server→client requests waiting for rmcp's answer. rmcp answers every
/// request it receives; past this many unanswered, the transport answers the
/// server itself with an internal error (each entry is an id and a sender).
pub const MAX_PENDING_SERVER_REQUESTS: usize = 256;
/// Outcomes of rmcp's requests waiting for [`Transport::receive`]: a full
/// queue holds back only the tasks that carry them, never the session.
const OUTCOME_QUEUE: usize = 64;

/// An error of the transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The session could not take the message (it is closed or closing).
    #[error(transparent)]
    Session(#[from] RequestError),
    /// rmcp's message could not be turned into JSON-RPC (a bug in the caller's types).
    #[error("message does not encode: {0}")]
    Encode(#[from] serde_json::Error),
    /// The message is not a valid JSON-RPC message (no method, no id).
    #[error("not a JSON-RPC message: {0}")]
    Malformed(&'static str),
    /// The transport was already closed.
    #[error("transport closed")]
    Closed,
    /// rmcp's server sent a request to the client (roots, sampling,
    /// elicitation): the serve session does not carry server→client
    /// requests, so it fails at once.
    #[error("server-to-client request {method} is not supported over mcp-stdio's serve transport")]
    ServerRequestUnsupported {
        /// The request's method.
        method: String,
    },
}

/// State shared by the transport and the futures it hands to rmcp.
struct Shared {
    /// `None` once [`Transport::close`] took it to shut the session down.
    client: RwLock<Option<Client>>,
    /// rmcp's requests in flight: cancels by rmcp's id (ours is the session's own).
    in_flight: Mutex<HashMap<Id, CancelHandle>>,
    /// The server's requests waiting for rmcp's answer (≤ [`MAX_PENDING_SERVER_REQUESTS`]).
    responders: Mutex<HashMap<Id, Responder>>,
    outcomes: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
    /// Signalled each time one of rmcp's requests leaves `in_flight`.
    settled: Notify,
    record: watch::Sender<Option<Arc<SessionRecord>>>,
}

/// rmcp's client transport over mcp-stdio's hardened stdio; use it where
/// rmcp takes `TokioChildProcess` (`().serve(transport)`).
///
/// rmcp's requests go out under the session's own ids; their outcomes come
/// back under rmcp's. A request that fails in the session (its response
/// passed the wire limit, the session closed, its deadline passed) reaches
/// rmcp as a JSON-RPC error for that id, so rmcp fails that request at once.
/// rmcp's `notifications/cancelled` cancels through the session (G6).
/// [`Transport::close`] runs the graceful shutdown (G11) and publishes the
/// [`SessionRecord`] to every [`SessionHandle`]; dropping the transport
/// kills the server's process group at once.
///
/// [`Transport::close`]: https://docs.rs/rmcp/3/rmcp/transport/trait.Transport.html#tymethod.close
pub struct ClientTransport {
    shared: Arc<Shared>,
    outcomes: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    incoming_done: bool,
    pid: u32,
}

impl std::fmt::Debug for ClientTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTransport")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// Reaches the session from the rmcp side once the transport is handed over.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    pid: u32,
    record: watch::Receiver<Option<Arc<SessionRecord>>>,
}

impl SessionHandle {
    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The session record once the transport was closed (rmcp closes it when
    /// the service ends); `None` if the transport was dropped unclosed.
    pub async fn record(&mut self) -> Option<Arc<SessionRecord>> {
        match self.record.wait_for(Option::is_some).await {
            Ok(record) => record.clone(),
            Err(_) => None,
        }
    }
}

impl ClientTransport {
    /// Spawns `command` under [`mcp_stdio_tokio::Client`] (no shell, its own
    /// process group, stdout and stderr read continuously). Must be called
    /// inside a tokio runtime. rmcp does the MCP handshake itself.
    ///
    /// [`mcp_stdio_tokio::Client`]: https://docs.rs/mcp-stdio-tokio/latest/mcp_stdio_tokio/struct.Client.html
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<Self> {
        let client = Client::spawn(command, options)?;
        let pid = client.pid();
        let (outcomes_tx, outcomes) = mpsc::channel(OUTCOME_QUEUE);
        let (record, _) = watch::channel(None);
        Ok(Self {
            shared: Arc::new(Shared {
                client: RwLock::new(Some(client)),
                in_flight: Mutex::new(HashMap::new()),
                responders: Mutex::new(HashMap::new()),
                outcomes: outcomes_tx,
                settled: Notify::new(),
                record,
            }),
            outcomes,
            incoming_done: false,
            pid,
        })
    }

    /// A handle to the session, kept to read its record after rmcp is done.
    pub fn session(&self) -> SessionHandle {
        SessionHandle {
            pid: self.pid,
            record: self.shared.record.subscribe(),
        }
    }
}

impl Transport<RoleClient> for ClientTransport {
    type Error = TransportError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let shared = self.shared.clone();
        async move { send(shared, item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if self.incoming_done {
                // The session is over: rmcp's requests still in flight resolve
                // promptly (as closed); hand over their outcomes, then end.
                if let Ok(outcome) = self.outcomes.try_recv() {
                    return Some(outcome);
                }
                if lock(&self.shared.in_flight).is_empty() {
                    return None;
                }
                tokio::select! {
                    outcome = self.outcomes.recv() => return outcome,
                    // A cancelled request settles without an outcome.
                    () = self.shared.settled.notified() => continue,
                }
            }
            let guard = self.shared.client.read().await;
            let client = guard.as_ref()?;
            tokio::select! {
                biased;
                Some(outcome) = self.outcomes.recv() => return Some(outcome),
                incoming = client.next_incoming() => match incoming {
                    Some(message) => {
                        if let Some(message) = self.shared.admit(message).await {
                            return Some(message);
                        }
                    }
                    None => self.incoming_done = true,
                },
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let Some(client) = self.shared.client.write().await.take() else {
            return Ok(());
        };
        let record = client.shutdown().await;
        self.shared.record.send_replace(Some(Arc::new(record)));
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks leaves the maps consistent (single inserts/removes).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Turns a server→client message into rmcp's type; `None` when it is
    /// answered or dropped here.
    async fn admit(&self, message: IncomingMessage) -> Option<RxJsonRpcMessage<RoleClient>> {
        match message {
            IncomingMessage::Request(request, responder) => {
                let value = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": &request.id,
                    "method": &request.method,
                    "params": request.params.as_deref(),
                });
                let parsed = strip_null_params(value)
                    .and_then(|v| serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(v).ok());
                let Some(parsed) = parsed else {
                    let error =
                        ErrorObject::new(METHOD_NOT_FOUND, "method not supported by this client");
                    let _ = responder.respond(Err(error)).await;
                    return None;
                };
                let refused = {
                    let mut responders = lock(&self.responders);
                    if responders.len() >= MAX_PENDING_SERVER_REQUESTS {
                        Some(responder)
                    } else {
                        responders.insert(request.id, responder);
                        None
                    }
                };
                if let Some(responder) = refused {
                    tracing::warn!(method = %request.method, "too many unanswered server requests");
                    let error = ErrorObject::new(INTERNAL_ERROR, "too many unanswered requests");
                    let _ = responder.respond(Err(error)).await;
                    return None;
                }
                Some(parsed)
            }
            IncomingMessage::Notification(notification) => {
                let value = serde_json::json!({
                    "jsonrpc": "2.0",
                    "method": &notification.method,
                    "params": notification.params.as_deref(),
                });
                let parsed = strip_null_params(value)
                    .and_then(|v| serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(v).ok());
                if parsed.is_none() {
                    tracing::debug!(method = %notification.method, "notification rmcp does not model, dropped");
                }
                parsed
            }
            _ => None,
        }
    }
}

/// An absent `params` is absent, not `null`, for rmcp's types.
fn strip_null_params(mut value: serde_json::Value) -> Option<serde_json::Value> {
    let object = value.as_object_mut()?;
    if object.get("params").is_some_and(serde_json::Value::is_null) {
        object.remove("params");
    }
    Some(value)
}

async fn send(
    shared: Arc<Shared>,
    item: TxJsonRpcMessage<RoleClient>,
) -> Result<(), TransportError> {
    match item {
        JsonRpcMessage::Request(request) => {
            let rmcp_id = request.id.clone();
            let (method, params) = method_and_params(&request.request)?;
            let pending = {
                let guard = shared.client.read().await;
                let client = guard.as_ref().ok_or(TransportError::Closed)?;
                // `None`: the session's default deadline (`ClientConfig::default_timeout`); rmcp adds its own.
                client.start_request(&method, params, None).await?
            };
            lock(&shared.in_flight).insert(to_id(&rmcp_id), pending.cancel_handle());
            let shared = shared.clone();
            tokio::spawn(async move {
                let outcome = pending.await;
                let message = outcome_message(rmcp_id.clone(), outcome);
                if let Some(message) = message {
                    let _ = shared.outcomes.send(message).await;
                }
                lock(&shared.in_flight).remove(&to_id(&rmcp_id));
                // `notify_one` keeps a permit: a receive that looks later still sees it.
                shared.settled.notify_one();
            });
            Ok(())
        }
        JsonRpcMessage::Notification(notification) => {
            let (method, params) = method_and_params(&notification.notification)?;
            if method == "notifications/cancelled" {
                // Cancel through the session, which sends the cancel under its
                // own id; the reason is rmcp's, as it gave it (none if none).
                let params = params
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok());
                let id = params
                    .as_ref()
                    .and_then(|p| serde_json::from_value::<Id>(p.get("requestId")?.clone()).ok());
                let reason = params
                    .as_ref()
                    .and_then(|p| p.get("reason")?.as_str().map(str::to_owned))
                    .unwrap_or_default();
                if let Some(id) = id {
                    if let Some(cancel) = lock(&shared.in_flight).get(&id) {
                        cancel.cancel(&reason);
                    }
                }
                return Ok(());
            }
            let guard = shared.client.read().await;
            let client = guard.as_ref().ok_or(TransportError::Closed)?;
            client.notify(&method, params).await?;
            Ok(())
        }
        JsonRpcMessage::Response(response) => {
            let raw = serde_json::value::to_raw_value(&response.result)?;
            respond(&shared, &response.id, Ok(raw)).await
        }
        JsonRpcMessage::Error(error) => {
            let Some(id) = error.id else {
                return Err(TransportError::Malformed("error without an id"));
            };
            let object = error_object(error.error)?;
            respond(&shared, &id, Err(object)).await
        }
    }
}

async fn respond(
    shared: &Shared,
    id: &RequestId,
    result: Result<Box<RawValue>, ErrorObject>,
) -> Result<(), TransportError> {
    let responder = lock(&shared.responders).remove(&to_id(id));
    match responder {
        Some(responder) => Ok(responder.respond(result).await?),
        None => {
            tracing::debug!(?id, "answer to no pending server request, dropped");
            Ok(())
        }
    }
}

/// rmcp's error as the core's JSON-RPC error object.
pub(crate) fn error_object(error: ErrorData) -> Result<ErrorObject, serde_json::Error> {
    Ok(ErrorObject {
        code: i64::from(error.code.0),
        message: error.message.into_owned(),
        data: error
            .data
            .map(|d| serde_json::value::to_raw_value(&d))
            .transpose()?,
    })
}

/// The method and raw params of rmcp's typed request or notification.
pub(crate) fn method_and_params<T: serde::Serialize>(
    typed: &T,
) -> Result<(String, Option<Box<RawValue>>), TransportError> {
    let mut value = serde_json::to_value(typed)?;
    let object = value
        .as_object_mut()
        .ok_or(TransportError::Malformed("not an object"))?;
    let method = match object.remove("method") {
        Some(serde_json::Value::String(method)) => method,
        _ => return Err(TransportError::Malformed("no method")),
    };
    let params = match object.remove("params") {
        None | Some(serde_json::Value::Null) => None,
        Some(params) => Some(serde_json::value::to_raw_value(&params)?),
    };
    Ok((method, params))
}

/// rmcp's message for the outcome of its request `id`; `None` for a request
/// cancelled (rmcp expects no answer then).
fn outcome_message(
    id: RequestId,
    outcome: Result<RawResult, RequestError>,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let error = match outcome {
        Ok(result) => {
            // Straight from the raw text into rmcp's type: no intermediate `Value` tree.
            match result.parse::<ServerResult>() {
                Ok(result) => return Some(JsonRpcMessage::response(result, id)),
                Err(e) => ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("result does not decode: {e}"),
                    None,
                ),
            }
        }
        Err(RequestError::Failed(RequestFailure::Cancelled { .. })) => return None,
        // The server's error as it came, and the one wire-limit error of every
        // component (code, text, data).
        Err(RequestError::Failed(
            failure @ (RequestFailure::Server(_) | RequestFailure::ResponseTooLarge { .. }),
        )) => {
            let e = failure.to_error_object();
            ErrorData::new(
                ErrorCode(i32::try_from(e.code).unwrap_or(ErrorCode::INTERNAL_ERROR.0)),
                e.message,
                e.data
                    .as_deref()
                    .and_then(|d| serde_json::from_str(d.get()).ok()),
            )
        }
        Err(other) => ErrorData::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
    };
    Some(JsonRpcMessage::error(error, Some(id)))
}

pub(crate) fn to_id(id: &RequestId) -> Id {
    match id {
        NumberOrString::Number(n) => Id::Number(*n),
        NumberOrString::String(s) => Id::String(s.to_string()),
    }
}
