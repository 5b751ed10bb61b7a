//! `serve_io` over a pair of `async_io::Async<UnixStream>` socket pairs fed
//! JSON lines: cancel reaching the handler (G7), bounded concurrency, the
//! outgoing wire limit (G9) and the bounded drain at EOF.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_io::Async;
use async_std::task::{block_on, JoinHandle};
use futures_lite::io::BufReader;
use futures_lite::{AsyncBufReadExt, AsyncWriteExt};
use mcp_stdio_async_std::core::{to_raw, ErrorObject, Request};
use mcp_stdio_async_std::{
    serve_io, CancelToken, Handler, HandlerResult, RequestContext, ServeOptions, ServeReport,
};
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(5);

/// The client's ends of the two socket pairs, and the running server.
struct Peer {
    input: Option<Async<UnixStream>>,
    output: BufReader<Async<UnixStream>>,
    server: JoinHandle<std::io::Result<ServeReport>>,
}

impl Peer {
    fn start<H: Handler>(mut options: ServeOptions, handler: H) -> Self {
        // These tests are about handlers: every request reaches one.
        options.basics_mut().answer_basics(false);
        let (input, server_in) = Async::<UnixStream>::pair().expect("socketpair");
        let (server_out, output) = Async::<UnixStream>::pair().expect("socketpair");
        let server = async_std::task::spawn(serve_io(server_in, server_out, options, handler));
        Self {
            input: Some(input),
            output: BufReader::new(output),
            server,
        }
    }

    async fn send(&mut self, msg: Value) {
        let mut line = serde_json::to_vec(&msg).expect("JSON");
        line.push(b'\n');
        let input = self.input.as_mut().expect("input open");
        input.write_all(&line).await.expect("write");
    }

    /// The next line from the server, as JSON; `None` at EOF.
    async fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = async_std::future::timeout(LONG, self.output.read_line(&mut line))
            .await
            .expect("a line in time")
            .expect("read");
        (n > 0).then(|| serde_json::from_str(&line).expect("a JSON line"))
    }

    /// Closes the server's stdin and returns its report and every line it
    /// wrote after that.
    async fn finish(mut self) -> (ServeReport, Vec<Value>) {
        drop(self.input.take());
        // EOF on the output comes when `serve_io` returns and drops its writer.
        let mut rest = Vec::new();
        while let Some(v) = self.recv().await {
            rest.push(v);
        }
        let report = async_std::future::timeout(LONG, self.server)
            .await
            .expect("serve returns in time")
            .expect("serve ran");
        (report, rest)
    }
}

fn request(id: u64, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
}

/// Sets its flag when dropped: shows a handler's future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[test]
fn g7_cancel_reaches_the_handler_token_and_suppresses_its_response() {
    block_on(async {
        let (tokens_tx, tokens_rx) = async_channel::unbounded::<CancelToken>();
        let dropped = Arc::new(AtomicBool::new(false));
        let dropped_in_handler = dropped.clone();
        let handler = move |req: Request, ctx: RequestContext| {
            let tokens_tx = tokens_tx.clone();
            let dropped = dropped_in_handler.clone();
            async move {
                match req.method.as_str() {
                    "wait_for_cancel" => {
                        let _flag = DropFlag(dropped);
                        let token = ctx.cancel_token().clone();
                        tokens_tx.send(token.clone()).await.expect("test listens");
                        token.cancelled().await;
                        // Never written: the cancel suppresses the response.
                        Ok(to_raw(&json!("answered after the cancel")).expect("JSON"))
                    }
                    _ => Ok(to_raw(&json!({"echo": req.method})).expect("JSON")),
                }
            }
        };
        let mut peer = Peer::start(ServeOptions::default(), handler);
        peer.send(request(1, "hello")).await;
        let r = peer.recv().await.expect("response 1");
        assert_eq!(r["id"], 1);
        assert_eq!(r["result"]["echo"], "hello");

        peer.send(request(2, "wait_for_cancel")).await;
        let token = async_std::future::timeout(LONG, tokens_rx.recv())
            .await
            .expect("the handler started")
            .expect("token");
        assert!(!token.is_cancelled());
        let t = Instant::now();
        peer.send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "user pressed stop"}
        }))
        .await;
        async_std::future::timeout(LONG, token.cancelled())
            .await
            .expect("the cancel reaches the handler's token");
        let reached = t.elapsed();
        while !dropped.load(Ordering::Acquire) {
            assert!(t.elapsed() < LONG, "the handler's future was not dropped");
            async_std::task::sleep(Duration::from_millis(1)).await;
        }
        let dropped_in = t.elapsed();

        // G8: the next request is answered, and it is the next line.
        peer.send(request(3, "ping")).await;
        let r = peer.recv().await.expect("response 3");
        assert_eq!(r["id"], 3, "{r}");
        let (report, rest) = peer.finish().await;
        eprintln!(
            "async-std serve: cancel reached the token in {reached:?}, handler dropped in \
             {dropped_in:?}; {:?}",
            report.metrics
        );
        assert!(rest.iter().all(|v| v["id"] != 2), "{rest:?}");
        assert_eq!(report.metrics.cancels_running, 1);
        assert_eq!(report.metrics.responses, 2);
        assert_eq!(report.aborted_at_exit, 0);
    });
}

#[test]
fn bounded_concurrency_refuses_beyond_max_concurrent() {
    block_on(async {
        let handler = |req: Request, ctx: RequestContext| async move {
            if req.method == "wait_for_cancel" {
                ctx.cancel_token().cancelled().await;
            }
            Ok(to_raw(&json!({})).expect("JSON"))
        };
        let mut options = ServeOptions::default();
        options.session_mut().max_concurrent(1);
        let mut peer = Peer::start(options, handler);
        peer.send(request(1, "wait_for_cancel")).await;
        peer.send(request(2, "ping")).await;
        let r = peer.recv().await.expect("overload reply");
        assert_eq!(r["id"], 2, "{r}");
        assert_eq!(r["error"]["code"], -32000, "{r}");
        peer.send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 1}
        }))
        .await;
        let (report, rest) = peer.finish().await;
        assert!(rest.is_empty(), "{rest:?}");
        assert_eq!(report.metrics.overload_rejects, 1);
        assert_eq!(report.metrics.cancels_running, 1);
    });
}

#[test]
fn g9_oversized_result_becomes_an_error_and_a_panic_becomes_internal_error() {
    block_on(async {
        let handler = |req: Request, _ctx: RequestContext| async move {
            match req.method.as_str() {
                "big" => Ok(to_raw(&"x".repeat(8192)).expect("JSON")),
                "panic" => panic!("handler bug (expected by the test)"),
                _ => Err(ErrorObject::new(-32601, "no such method")),
            }
        };
        let mut options = ServeOptions::default();
        options.framer_mut().max_frame(1024);
        let mut peer = Peer::start(options, handler);
        peer.send(request(1, "big")).await;
        let r = peer.recv().await.expect("response 1");
        assert_eq!(r["id"], 1);
        assert_eq!(r["error"]["code"], -32000, "{r}");
        assert_eq!(r["error"]["data"]["limit"], 1024, "{r}");
        peer.send(request(2, "panic")).await;
        let r = peer.recv().await.expect("response 2");
        assert_eq!(r["id"], 2);
        assert_eq!(r["error"]["code"], -32603, "{r}");
        peer.send(request(3, "nope")).await;
        let r = peer.recv().await.expect("response 3");
        assert_eq!(r["error"]["code"], -32601, "{r}");
        let (report, _) = peer.finish().await;
        assert_eq!(report.metrics.responses_too_large, 1);
    });
}

#[test]
fn stdin_eof_drains_in_flight_work_within_the_drain_timeout() {
    block_on(async {
        let handler = |req: Request, _ctx: RequestContext| async move {
            let wait = if req.method == "forever" { 3600 } else { 0 };
            async_std::task::sleep(Duration::from_secs(wait)).await;
            HandlerResult::Ok(to_raw(&json!({})).expect("JSON"))
        };
        let mut options = ServeOptions::default();
        options.drain_timeout(Duration::from_millis(200));
        let mut peer = Peer::start(options, handler);
        peer.send(request(1, "forever")).await;
        peer.send(request(2, "quick")).await;
        let r = peer.recv().await.expect("response 2");
        assert_eq!(r["id"], 2);
        let t = Instant::now();
        let (report, rest) = peer.finish().await;
        let took = t.elapsed();
        eprintln!("async-std serve: drained in {took:?}; {rest:?}");
        assert!(
            took >= Duration::from_millis(200) && took < LONG,
            "{took:?}"
        );
        assert_eq!(report.aborted_at_exit, 1);
        // The aborted request gets an error, never silence.
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(rest[0]["id"], 1);
        assert_eq!(rest[0]["error"]["code"], -32603);
    });
}
