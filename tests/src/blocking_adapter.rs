//! The blocking adapter behind the suite's interface: its `Client` and its
//! `run_helper`.
//!
//! The adapter's API is already synchronous, so the facade is a thin
//! forwarding layer: `next_incoming(Some(wait))`, [`PendingRequest::wait`],
//! a blocking `Responder::respond`. Helper jobs run concurrently, one thread
//! each; the approver is a blocking closure (it sleeps, then answers) that
//! owns what it captures, as the adapter's `Clone + 'static` bound asks.

use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_blocking::{
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

/// The blocking adapter.
#[derive(Debug)]
pub struct Blocking;

/// A blocking `Client` (its session runs on its own I/O thread).
#[derive(Debug)]
pub struct BlockingClient {
    client: Option<Client>,
}

impl Adapter for Blocking {
    const NAME: &'static str = "blocking";
    type Client = BlockingClient;

    fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<BlockingClient> {
        Ok(BlockingClient {
            client: Some(Client::spawn(command, options)?),
        })
    }
}

impl BlockingClient {
    fn client(&self) -> &Client {
        self.client.as_ref().expect("present until shutdown")
    }
}

struct BlockingHandle(ClientHandle);

impl SuiteHandle for BlockingHandle {
    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        self.0.call_tool(name, arguments)
    }
    fn clone_handle(&self) -> Box<dyn SuiteHandle> {
        Box::new(Self(self.0.clone()))
    }
}

struct BlockingPending(PendingRequest);

impl SuitePending for BlockingPending {
    fn id(&self) -> Id {
        self.0.id().clone()
    }
    fn cancel(&self, reason: &str) {
        self.0.cancel(reason);
    }
    fn wait(self: Box<Self>) -> Outcome {
        self.0.wait()
    }
}

impl SuiteClient for BlockingClient {
    fn pid(&self) -> u32 {
        self.client().pid()
    }

    fn initialize(&self) -> Result<Negotiated, InitializeError> {
        self.client().initialize()
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome {
        self.client().request_with_timeout(method, params, timeout)
    }

    fn start(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<Box<dyn SuitePending>, RequestError> {
        let pending = self.client().start_request(method, params, timeout)?;
        Ok(Box::new(BlockingPending(pending)))
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError> {
        self.client().notify(method, params)
    }

    fn next_incoming(&self, wait: Duration) -> Option<SuiteIncoming> {
        Some(match self.client().next_incoming(Some(wait))? {
            IncomingMessage::Request(r, responder) => SuiteIncoming::Request(
                r,
                Box::new(move |result| {
                    let _ = responder.respond(result);
                }),
            ),
            IncomingMessage::Notification(n) => SuiteIncoming::Notification(n),
            _ => return None,
        })
    }

    fn metrics(&self) -> Option<ClientMetrics> {
        self.client().metrics()
    }

    fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot> {
        self.client().snapshot(stderr_bytes)
    }

    fn list_tools(&self, cursor: Option<&str>) -> Outcome {
        self.client().list_tools(cursor)
    }

    fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        self.client().call_tool(name, arguments)
    }

    fn call_tool_collecting_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(Vec<Progress>, Outcome), RequestError> {
        let (pending, progress) = self.client().call_tool_with_progress(name, arguments)?;
        let updates: Vec<Progress> = progress.collect();
        Ok((updates, pending.wait()))
    }

    fn handle(&self) -> Box<dyn SuiteHandle> {
        Box::new(BlockingHandle(self.client().handle()))
    }

    fn shutdown(mut self: Box<Self>) -> SessionRecord {
        self.client
            .take()
            .expect("present until shutdown")
            .shutdown()
    }

    fn wait(mut self: Box<Self>) -> SessionRecord {
        self.client.take().expect("present until shutdown").wait()
    }
}

fn run_one(job: HelperJob) -> HelperRunReport {
    thread::sleep(job.start_after);
    let cancel = CancelToken::new();
    let clock = RunClock::default();
    // A second token as a "run is over" signal, so the canceller thread
    // stops waiting as soon as the run ends.
    let finished = CancelToken::new();
    let canceller = job.cancel_after.map(|d| {
        let cancel = cancel.clone();
        let clock = clock.clone();
        let finished = finished.clone();
        thread::spawn(move || {
            if !finished.wait_timeout(d) {
                clock.cancelled();
                cancel.cancel();
            }
        })
    });
    let script = job.approval;
    // Owns its captures (`Clone + 'static`): the adapter runs it on a thread
    // of its own, which may outlive the run (an answer after the deadline).
    let approver = {
        let clock = clock.clone();
        move |request: ApprovalRequest| {
            clock.approval_requested(request.deadline);
            match script {
                Some(s) => {
                    thread::sleep(s.after);
                    s.approve
                }
                None => false,
            }
        }
    };
    let start = Instant::now();
    let outcome = run_helper_with_approval(&job.command, &job.options, &cancel, &approver);
    let end = Instant::now();
    finished.cancel();
    if let Some(c) = canceller {
        c.join().expect("the canceller never panics");
    }
    HelperRunReport::new(outcome, start, end, &clock)
}

impl HelperAdapter for Blocking {
    const NAME: &'static str = "blocking";

    fn run_helpers(jobs: Vec<HelperJob>) -> Vec<HelperRunReport> {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|j| thread::spawn(move || run_one(j)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a helper run never panics"))
            .collect()
    }
}
