//! The async-std adapter behind the suite's interface: its `Client` and its
//! `run_helper`.
//!
//! The adapter runs its driver and I/O tasks on async-std's global executor,
//! so the facade needs no runtime of its own: each call is one
//! `async_std::task::block_on` on the calling thread, and a bounded wait
//! (`next_incoming`) is `async_std::future::timeout`. Helper jobs run
//! concurrently as async-std tasks.

use std::time::{Duration, Instant};

use async_std::task;
use mcp_stdio_async_std::{
    run_helper_with_approval, ApprovalRequest, CancelToken, Client, ClientHandle, IncomingMessage,
    PendingRequest,
};
use mcp_stdio_core::ClientMetrics;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Negotiated;
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::{Id, RawValue};
use mcp_stdio_core::{LiveSnapshot, Progress};

use crate::adapter::{Adapter, Outcome, SuiteClient, SuiteHandle, SuiteIncoming, SuitePending};
use crate::helper_adapter::{HelperAdapter, HelperJob, HelperRunReport, RunClock};

/// The async-std adapter.
#[derive(Debug)]
pub struct AsyncStd;

/// An async-std `Client` (its tasks run on async-std's global executor).
#[derive(Debug)]
pub struct AsyncStdClient {
    client: Option<Client>,
}

impl Adapter for AsyncStd {
    const NAME: &'static str = "async-std";
    type Client = AsyncStdClient;

    fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<AsyncStdClient> {
        Ok(AsyncStdClient {
            client: Some(Client::spawn(command, options)?),
        })
    }
}

impl AsyncStdClient {
    fn client(&self) -> &Client {
        self.client.as_ref().expect("present until shutdown")
    }
}

struct AsyncStdHandle(ClientHandle);

impl SuiteHandle for AsyncStdHandle {
    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        task::block_on(self.0.call_tool(name, arguments))
    }
    fn clone_handle(&self) -> Box<dyn SuiteHandle> {
        Box::new(Self(self.0.clone()))
    }
}

struct AsyncStdPending(PendingRequest);

impl SuitePending for AsyncStdPending {
    fn id(&self) -> Id {
        self.0.id().clone()
    }
    fn cancel(&self, reason: &str) {
        self.0.cancel(reason);
    }
    fn wait(self: Box<Self>) -> Outcome {
        task::block_on(self.0)
    }
}

impl SuiteClient for AsyncStdClient {
    fn pid(&self) -> u32 {
        self.client().pid()
    }

    fn initialize(&self) -> Result<Negotiated, InitializeError> {
        task::block_on(self.client().initialize())
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome {
        task::block_on(self.client().request_with_timeout(method, params, timeout))
    }

    fn start(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<Box<dyn SuitePending>, RequestError> {
        let pending = task::block_on(self.client().start_request(method, params, timeout))?;
        Ok(Box::new(AsyncStdPending(pending)))
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError> {
        task::block_on(self.client().notify(method, params))
    }

    fn next_incoming(&self, wait: Duration) -> Option<SuiteIncoming> {
        // `next_incoming` is cancel-safe: a timed-out wait loses no message.
        let msg = task::block_on(async_std::future::timeout(
            wait,
            self.client().next_incoming(),
        ))
        .ok()??;
        Some(match msg {
            IncomingMessage::Request(r, responder) => SuiteIncoming::Request(
                r,
                Box::new(move |result| {
                    let _ = task::block_on(responder.respond(result));
                }),
            ),
            IncomingMessage::Notification(n) => SuiteIncoming::Notification(n),
            _ => return None,
        })
    }

    fn metrics(&self) -> Option<ClientMetrics> {
        task::block_on(self.client().metrics())
    }

    fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot> {
        task::block_on(self.client().snapshot(stderr_bytes))
    }

    fn list_tools(&self, cursor: Option<&str>) -> Outcome {
        task::block_on(self.client().list_tools(cursor))
    }

    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        task::block_on(self.client().call_tool(name, arguments))
    }

    fn call_tool_collecting_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(Vec<Progress>, Outcome), RequestError> {
        task::block_on(async {
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
        Box::new(AsyncStdHandle(self.client().handle()))
    }

    fn shutdown(mut self: Box<Self>) -> SessionRecord {
        let client = self.client.take().expect("present until shutdown");
        task::block_on(client.shutdown())
    }

    fn wait(mut self: Box<Self>) -> SessionRecord {
        let client = self.client.take().expect("present until shutdown");
        task::block_on(client.wait())
    }
}

async fn run_one(job: HelperJob) -> HelperRunReport {
    task::sleep(job.start_after).await;
    let cancel = CancelToken::new();
    let clock = RunClock::default();
    let canceller = job.cancel_after.map(|d| {
        let cancel = cancel.clone();
        let clock = clock.clone();
        task::spawn(async move {
            task::sleep(d).await;
            clock.cancelled();
            cancel.cancel();
        })
    });
    let script = job.approval;
    let approver = |request: ApprovalRequest| {
        clock.approval_requested(request.deadline);
        async move {
            match script {
                Some(s) => {
                    task::sleep(s.after).await;
                    s.approve
                }
                None => false,
            }
        }
    };
    let start = Instant::now();
    let outcome = run_helper_with_approval(&job.command, &job.options, &cancel, &approver).await;
    let end = Instant::now();
    if let Some(c) = canceller {
        // Dropping an async-std `JoinHandle` detaches the task; cancel it.
        c.cancel().await;
    }
    HelperRunReport::new(outcome, start, end, &clock)
}

impl HelperAdapter for AsyncStd {
    const NAME: &'static str = "async-std";

    fn run_helpers(jobs: Vec<HelperJob>) -> Vec<HelperRunReport> {
        task::block_on(async {
            let handles: Vec<_> = jobs.into_iter().map(|j| task::spawn(run_one(j))).collect();
            let mut out = Vec::with_capacity(handles.len());
            for h in handles {
                out.push(h.await);
            }
            out
        })
    }
}
