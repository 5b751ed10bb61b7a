//! The tokio adapter behind the suite's interface.

use std::sync::Arc;
use std::time::Duration;

use mcp_stdio_core::ClientMetrics;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Negotiated;
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::{Id, RawValue};
use mcp_stdio_core::{LiveSnapshot, Progress};
use mcp_stdio_tokio::{Client, ClientHandle, IncomingMessage, PendingRequest};
use tokio::runtime::Runtime;

use crate::adapter::{Adapter, Outcome, SuiteClient, SuiteHandle, SuiteIncoming, SuitePending};

/// The tokio adapter.
#[derive(Debug)]
pub struct Tokio;

/// A tokio `Client` with the runtime it runs on.
#[derive(Debug)]
pub struct TokioClient {
    rt: Arc<Runtime>,
    client: Option<Client>,
}

fn runtime() -> Arc<Runtime> {
    Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime"),
    )
}

impl Adapter for Tokio {
    const NAME: &'static str = "tokio";
    type Client = TokioClient;

    fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<TokioClient> {
        let rt = runtime();
        let client = {
            let _guard = rt.enter();
            Client::spawn(command, options)?
        };
        Ok(TokioClient {
            rt,
            client: Some(client),
        })
    }
}

impl TokioClient {
    fn client(&self) -> &Client {
        self.client.as_ref().expect("present until shutdown")
    }
}

struct TokioHandle {
    rt: Arc<Runtime>,
    handle: ClientHandle,
}

impl SuiteHandle for TokioHandle {
    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        self.rt.block_on(self.handle.call_tool(name, arguments))
    }
    fn clone_handle(&self) -> Box<dyn SuiteHandle> {
        Box::new(Self {
            rt: self.rt.clone(),
            handle: self.handle.clone(),
        })
    }
}

struct TokioPending {
    rt: Arc<Runtime>,
    pending: PendingRequest,
}

impl SuitePending for TokioPending {
    fn id(&self) -> Id {
        self.pending.id().clone()
    }
    fn cancel(&self, reason: &str) {
        self.pending.cancel(reason);
    }
    fn wait(self: Box<Self>) -> Outcome {
        let Self { rt, pending } = *self;
        rt.block_on(pending)
    }
}

impl SuiteClient for TokioClient {
    fn pid(&self) -> u32 {
        self.client().pid()
    }

    fn initialize(&self) -> Result<Negotiated, InitializeError> {
        self.rt.block_on(self.client().initialize())
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome {
        self.rt
            .block_on(self.client().request_with_timeout(method, params, timeout))
    }

    fn start(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<Box<dyn SuitePending>, RequestError> {
        let pending = self
            .rt
            .block_on(self.client().start_request(method, params, timeout))?;
        Ok(Box::new(TokioPending {
            rt: self.rt.clone(),
            pending,
        }))
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError> {
        self.rt.block_on(self.client().notify(method, params))
    }

    fn next_incoming(&self, wait: Duration) -> Option<SuiteIncoming> {
        let msg = self
            .rt
            .block_on(async { tokio::time::timeout(wait, self.client().next_incoming()).await })
            .ok()??;
        Some(match msg {
            IncomingMessage::Request(r, responder) => {
                let rt = self.rt.clone();
                SuiteIncoming::Request(
                    r,
                    Box::new(move |result| {
                        let _ = rt.block_on(responder.respond(result));
                    }),
                )
            }
            IncomingMessage::Notification(n) => SuiteIncoming::Notification(n),
            _ => return None,
        })
    }

    fn metrics(&self) -> Option<ClientMetrics> {
        self.rt.block_on(self.client().metrics())
    }

    fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot> {
        self.rt.block_on(self.client().snapshot(stderr_bytes))
    }

    fn list_tools(&self, cursor: Option<&str>) -> Outcome {
        self.rt.block_on(self.client().list_tools(cursor))
    }

    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        self.rt.block_on(self.client().call_tool(name, arguments))
    }

    fn call_tool_collecting_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(Vec<Progress>, Outcome), RequestError> {
        self.rt.block_on(async {
            let (pending, mut progress) = self
                .client()
                .call_tool_with_progress(name, arguments)
                .await?;
            let mut updates = Vec::new();
            while let Some(u) = progress.next().await {
                updates.push(u);
            }
            Ok((updates, pending.await))
        })
    }

    fn handle(&self) -> Box<dyn SuiteHandle> {
        Box::new(TokioHandle {
            rt: self.rt.clone(),
            handle: self.client().handle(),
        })
    }

    fn shutdown(mut self: Box<Self>) -> SessionRecord {
        let client = self.client.take().expect("present until shutdown");
        self.rt.block_on(client.shutdown())
    }

    fn wait(mut self: Box<Self>) -> SessionRecord {
        let client = self.client.take().expect("present until shutdown");
        self.rt.block_on(client.wait())
    }
}
