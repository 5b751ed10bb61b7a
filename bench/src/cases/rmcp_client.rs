//! rmcp (the official Rust SDK) 3.x: its child-process client, on the same
//! multi-threaded tokio runtime our tokio adapter gets.
//!
//! - `rmcp`: `TokioChildProcess` with its defaults (16 MiB line limit), the
//!   server's stderr discarded (`Stdio::null()`): rmcp inherits it by default,
//!   which would put the fixture's log lines on our terminal.
//! - `rmcp-lines` (flood, ping): stderr piped and read line by line by a task, as
//!   a host that logs each line does; the lines are dropped.
//! - `rmcp-keep-all` (flood): stderr piped and read to the end into a `Vec`.
//! - `rmcp-4mib` (oversized): `AsyncRwTransport::with_max_line_length(4 MiB)`
//!   over a child we spawn (`TokioChildProcess` does not expose the limit).
//! - `rmcp-1mib` (id-last): the same with 1 MiB, the limit our clients get.
//! - `rmcp-ours` (large, ping): rmcp's client over our transport,
//!   `mcp_stdio_rmcp::ClientTransport` where `TokioChildProcess` was, with
//!   `max_frame` = 16 MiB (rmcp's line limit); the server's stderr read
//!   continuously into the budgeted capture, as with every client of ours.

use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, JsonObject, PingRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, BufReader, ReadBuf};
use tokio::process::ChildStderr;

use super::{
    bench_peer, big_params, cancel_setup, fixture, flood_params, huge_params, id_last_line,
    id_last_params, monotonic_ns, server_for, CaseResult, Stamps, Trial, CANCEL_TRIALS,
    CANCEL_WARMUP, FLOOD_BYTES, ID_LAST_LIMIT, ID_LAST_TRIALS, ID_LAST_WAIT, IN_FLIGHT_BYTES,
    LARGE_BYTES, LARGE_CALLS, LARGE_LIMIT, OVERSIZED_LIMIT, OVERSIZED_LINE, PATIENCE, PINGS,
    PING_AFTER, PING_WARMUP, POLL, SETTLE,
};
use crate::mem::Probe;

type Client = RunningService<RoleClient, ()>;

async fn connect(program: PathBuf, stderr: Stdio) -> (Client, Option<ChildStderr>) {
    let command = tokio::process::Command::new(program);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(stderr)
        .spawn()
        .expect("spawn with rmcp");
    let client = ().serve(transport).await.expect("rmcp initialize");
    (client, stderr)
}

/// rmcp over our transport (`rmcp-ours`): the same rmcp client, our stdio.
async fn connect_ours(program: PathBuf) -> Client {
    let mut options = mcp_stdio_rmcp::ClientOptions::default();
    options.framer_mut().max_frame(LARGE_LIMIT);
    let command = mcp_stdio_rmcp::CommandSpec::new(program);
    let transport = mcp_stdio_rmcp::ClientTransport::spawn(&command, options)
        .expect("spawn with our transport");
    ().serve(transport).await.expect("rmcp initialize")
}

/// `tools/call` params from our JSON form.
fn call_params(v: &serde_json::Value) -> CallToolRequestParams {
    let name = v["name"].as_str().expect("a tool name").to_owned();
    let args: JsonObject = v["arguments"].as_object().cloned().unwrap_or_default();
    CallToolRequestParams::new(name).with_arguments(args)
}

fn ping_request() -> ClientRequest {
    ClientRequest::PingRequest(PingRequest::default())
}

fn call_request(v: &serde_json::Value) -> ClientRequest {
    ClientRequest::CallToolRequest(CallToolRequest::new(call_params(v)))
}

/// `ours`: through [`connect_ours`] instead of `TokioChildProcess`.
async fn large(server: PathBuf, ours: bool) -> CaseResult {
    let client = if ours {
        connect_ours(server).await
    } else {
        connect(server, Stdio::null()).await.0
    };
    let params = call_params(&big_params(LARGE_BYTES));
    let mut out = CaseResult::default();
    for _ in 0..LARGE_CALLS {
        let probe = Probe::start();
        let result = client.peer().call_tool(params.clone()).await.expect("big");
        let text = &result.content[0].as_text().expect("a text block").text;
        assert_eq!(text.len(), LARGE_BYTES);
        out.push(probe.stop());
        drop(result);
    }
    let _ = client.cancel().await;
    out
}

/// `read_stderr`: pipe the server's stderr and read it line by line (lines
/// dropped), as a host that logs it would; otherwise discard it. `ours`:
/// through [`connect_ours`] (which always reads stderr).
async fn ping(server: PathBuf, read_stderr: bool, ours: bool) -> CaseResult {
    let (client, stderr) = if ours {
        (connect_ours(server).await, None)
    } else if read_stderr {
        connect(server, Stdio::piped()).await
    } else {
        connect(server, Stdio::null()).await
    };
    if let Some(stderr) = stderr {
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(_line)) = lines.next_line().await {}
        });
    }
    let mut out = CaseResult::default();
    for i in 0..PING_WARMUP + PINGS {
        let start = Instant::now();
        client
            .peer()
            .send_request(ping_request())
            .await
            .expect("ping");
        if i >= PING_WARMUP {
            out.push_time(start.elapsed());
        }
    }
    let _ = client.cancel().await;
    out
}

async fn flood(keep_all: bool) -> CaseResult {
    let (client, stderr) = connect(fixture(), Stdio::piped()).await;
    let mut stderr = stderr.expect("stderr piped");
    let reader = tokio::spawn(async move {
        if keep_all {
            let mut all = Vec::new();
            let _ = stderr.read_to_end(&mut all).await;
            all.len() as u64
        } else {
            let mut lines = BufReader::new(stderr).lines();
            let mut seen = 0_u64;
            while let Ok(Some(line)) = lines.next_line().await {
                seen += line.len() as u64 + 1;
            }
            seen
        }
    });
    let probe = Probe::start();
    client
        .peer()
        .call_tool(call_params(&flood_params(FLOOD_BYTES)))
        .await
        .expect("stderr_flood");
    let mut out = CaseResult::default();
    out.push(probe.stop());
    let _ = client.cancel().await;
    if let Ok(Ok(seen)) = tokio::time::timeout(Duration::from_secs(10), reader).await {
        out.value("stderr_seen", seen as f64);
    }
    out
}

/// Counts the bytes read through it: how the cancel scenario sees that a
/// response is arriving (`TokioChildProcess` does not expose its reader).
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let read = (buf.filled().len() - before) as u64;
            self.count.fetch_add(read, Ordering::Relaxed);
        }
        polled
    }
}

/// Counts the bytes written through it: how the cancel scenario sees that
/// the request reached the pipe.
struct CountingWrite<W> {
    inner: W,
    count: Arc<AtomicU64>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for CountingWrite<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.count.fetch_add(n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `cancel`: cancel once 1 MiB of the response has arrived; `cancel-early`:
/// right after the request reached the pipe (see [`cancel_setup`]). The
/// transport is rmcp's `AsyncRwTransport` (what `TokioChildProcess` wraps,
/// same default limit) over a counting reader and writer.
///
/// rmcp writes each outgoing message from a task of its own, so a cancel
/// issued as soon as `send_cancellable_request` returns usually reaches the
/// pipe *before* its request: the server then ignores it (unknown id) and
/// answers in full. Waiting for the request's bytes first makes rmcp's
/// cancel a real one, as ours is.
async fn cancel(scenario: &str) -> CaseResult {
    let in_flight = scenario == "cancel";
    let (server, call) = cancel_setup(scenario);
    let mut child = tokio::process::Command::new(server)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the server");
    let count = Arc::new(AtomicU64::new(0));
    let stdout = Counting {
        inner: child.stdout.take().expect("stdout piped"),
        count: count.clone(),
    };
    let written = Arc::new(AtomicU64::new(0));
    let stdin = CountingWrite {
        inner: child.stdin.take().expect("stdin piped"),
        count: written.clone(),
    };
    let client =
        ().serve(AsyncRwTransport::new_client(stdout, stdin))
            .await
            .expect("rmcp initialize");
    let big = call;
    for _ in 0..CANCEL_WARMUP {
        client
            .peer()
            .call_tool(call_params(&big))
            .await
            .expect("big");
    }
    let mut out = CaseResult::default();
    for _ in 0..CANCEL_TRIALS {
        let base = count.load(Ordering::Relaxed);
        let sent = written.load(Ordering::Relaxed);
        let handle = client
            .peer()
            .send_cancellable_request(call_request(&big), PeerRequestOptions::no_options())
            .await
            .expect("start big");
        while written.load(Ordering::Relaxed) == sent {
            tokio::task::yield_now().await;
        }
        if in_flight {
            while count.load(Ordering::Relaxed) < base + IN_FLIGHT_BYTES {
                tokio::time::sleep(POLL).await;
            }
        }
        let start = Instant::now();
        handle
            .cancel(Some("bench: cancel under load".to_owned()))
            .await
            .expect("cancel");
        client
            .peer()
            .send_request(ping_request())
            .await
            .expect("ping after cancel");
        out.push_time(start.elapsed());
        tokio::time::sleep(SETTLE).await;
    }
    let _ = client.cancel().await;
    out
}

async fn oversized(limit_4mib: bool) -> CaseResult {
    let (client, _child) = if limit_4mib {
        let mut child = tokio::process::Command::new(bench_peer())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn bench-peer");
        let stdout = child.stdout.take().expect("stdout piped");
        let stdin = child.stdin.take().expect("stdin piped");
        let transport =
            AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(OVERSIZED_LIMIT);
        let client = ().serve(transport).await.expect("rmcp initialize");
        (client, Some(child))
    } else {
        (connect(bench_peer(), Stdio::null()).await.0, None)
    };
    let probe = Probe::start();
    let mut huge = client
        .peer()
        .send_cancellable_request(
            call_request(&huge_params(OVERSIZED_LINE)),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("start huge");
    tokio::time::sleep(PING_AFTER).await;
    let ping = tokio::time::timeout(PATIENCE, client.peer().send_request(ping_request())).await;
    let mut out = CaseResult::default();
    out.push(probe.stop());
    out.value("recovered", f64::from(u8::from(matches!(ping, Ok(Ok(_))))));
    out.note(match huge.rx.try_recv() {
        Ok(Ok(_)) => "huge request: succeeded (unexpected)".to_owned(),
        Ok(Err(e)) => format!("huge request: {e}"),
        Err(_) => "huge request: still pending after the ping returned (no error delivered; \
                   it waits for its timeout)"
            .to_owned(),
    });
    let _ = client.cancel().await;
    out
}

/// Requests answered with a `line_bytes` response whose id comes last.
/// `limit`: `AsyncRwTransport::with_max_line_length` over a child we spawn;
/// `None`: `TokioChildProcess` with its default 16 MiB. rmcp drops an
/// over-limit line (an ERROR log) without reading an id from it, so the
/// request is expected to see nothing until the wait ends.
async fn id_last(line_bytes: usize, limit: Option<usize>) -> CaseResult {
    let stamps = Stamps::new();
    let mut command = tokio::process::Command::new(bench_peer());
    command.arg("--stamps").arg(stamps.path());
    let (client, _child) = if let Some(limit) = limit {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn bench-peer");
        let stdout = child.stdout.take().expect("stdout piped");
        let stdin = child.stdin.take().expect("stdin piped");
        let transport = AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(limit);
        let client = ().serve(transport).await.expect("rmcp initialize");
        (client, Some(child))
    } else {
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn with rmcp");
        (().serve(transport).await.expect("rmcp initialize"), None)
    };
    let params = id_last_params(line_bytes);
    let mut out = CaseResult::default();
    for n in 0..ID_LAST_TRIALS {
        let sent = monotonic_ns();
        let mut handle = client
            .peer()
            .send_cancellable_request(call_request(&params), PeerRequestOptions::no_options())
            .await
            .expect("send id_last");
        let outcome = tokio::time::timeout(ID_LAST_WAIT, &mut handle.rx).await;
        let done = monotonic_ns();
        let (kind, detail) = match outcome {
            Ok(Ok(Ok(ServerResult::CallToolResult(r)))) => (
                "result",
                format!(
                    "{} bytes of text",
                    r.content
                        .first()
                        .and_then(|c| c.as_text())
                        .map_or(0, |t| t.text.len())
                ),
            ),
            Ok(Ok(Ok(other))) => ("result", format!("an unexpected result: {other:?}")),
            Ok(Ok(Err(e))) => ("error", e.to_string()),
            Ok(Err(_)) => ("closed", "the transport closed".to_owned()),
            Err(_) => (
                "timeout",
                format!(
                    "no answer within {} s (the line was dropped unparsed)",
                    ID_LAST_WAIT.as_secs()
                ),
            ),
        };
        let answered = kind == "error" || kind == "result";
        out.trials
            .push(Trial::new(kind, sent, done, stamps.end_ns(n), detail));
        if !answered {
            break;
        }
    }
    let _ = client.cancel().await;
    out
}

pub(super) fn case(scenario: &str, client: &str) -> Option<CaseResult> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    Some(match (scenario, client) {
        ("large" | "large-fast", "rmcp") => rt.block_on(large(server_for(scenario), false)),
        ("large" | "large-fast", "rmcp-ours") => rt.block_on(large(server_for(scenario), true)),
        ("ping" | "ping-quiet", "rmcp") => rt.block_on(ping(server_for(scenario), false, false)),
        ("ping" | "ping-quiet", "rmcp-lines") => {
            rt.block_on(ping(server_for(scenario), true, false))
        }
        ("ping" | "ping-quiet", "rmcp-ours") => {
            rt.block_on(ping(server_for(scenario), false, true))
        }
        ("flood", "rmcp-lines") => rt.block_on(flood(false)),
        ("flood", "rmcp-keep-all") => rt.block_on(flood(true)),
        ("cancel" | "cancel-early", "rmcp") => rt.block_on(cancel(scenario)),
        ("oversized", "rmcp") => rt.block_on(oversized(false)),
        ("oversized", "rmcp-4mib") => rt.block_on(oversized(true)),
        (s, "rmcp") if id_last_line(s).is_some() => rt.block_on(id_last(id_last_line(s)?, None)),
        (s, "rmcp-1mib") if id_last_line(s).is_some() => {
            rt.block_on(id_last(id_last_line(s)?, Some(ID_LAST_LIMIT)))
        }
        _ => return None,
    })
}
