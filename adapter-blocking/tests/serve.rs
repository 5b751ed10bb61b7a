//! `serve_io` over Unix socket pairs: JSON lines in, replies checked.

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mcp_stdio_blocking::core::{to_raw, ErrorObject, Request};
use mcp_stdio_blocking::{
    serve_io, Handler, HandlerResult, RequestContext, ServeOptions, ServeReport,
};
use serde_json::{json, Value};

/// The client's end of a served session.
struct Peer {
    out: UnixStream,
    lines: BufReader<UnixStream>,
    server: JoinHandle<std::io::Result<ServeReport>>,
}

impl Peer {
    fn start<H: Handler>(mut options: ServeOptions, handler: H) -> Self {
        // These tests are about handlers: every request reaches one.
        options.basics_mut().answer_basics(false);
        let (ours, theirs) = UnixStream::pair().expect("socket pair");
        let server_in = theirs.try_clone().expect("clone");
        let server = std::thread::spawn(move || serve_io(server_in, theirs, options, handler));
        ours.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        Self {
            lines: BufReader::new(ours.try_clone().expect("clone")),
            out: ours,
            server,
        }
    }

    fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).expect("json");
        line.push(b'\n');
        self.out.write_all(&line).expect("write");
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.lines.read_line(&mut line).expect("a reply line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Closes the server's stdin and returns its report.
    fn finish(self) -> (ServeReport, Vec<Value>) {
        self.out.shutdown(Shutdown::Write).expect("EOF");
        let report = self.server.join().expect("serve thread").expect("serve");
        let rest = self
            .lines
            .lines()
            .map(|l| serde_json::from_str(&l.expect("line")).expect("json"))
            .collect();
        (report, rest)
    }
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn cancel(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": "test"}})
}

fn ok(v: Value) -> HandlerResult {
    Ok(to_raw(&v).expect("json"))
}

fn params(r: &Request) -> Value {
    r.params.as_ref().map_or(Value::Null, |p| {
        serde_json::from_str(p.get()).expect("json")
    })
}

#[test]
fn serve_answers_requests_and_notifications_and_exits_on_eof() {
    let notes = Arc::new(AtomicU64::new(0));
    struct H(Arc<AtomicU64>);
    impl Handler for H {
        fn call(&self, r: Request, ctx: RequestContext) -> HandlerResult {
            assert_eq!(ctx.id(), &r.id);
            assert!(ctx.result_budget().is_some());
            match r.method.as_str() {
                "echo" => ok(params(&r)),
                "progress" => {
                    ctx.notify(
                        "notifications/progress",
                        Some(to_raw(&json!({"progress": 1})).expect("json")),
                    );
                    ok(json!("done"))
                }
                "boom" => panic!("handler bug"),
                _ => Err(ErrorObject::new(-32601, "method not found")),
            }
        }
        fn notification(&self, _n: mcp_stdio_blocking::core::Notification) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut peer = Peer::start(ServeOptions::default(), H(notes.clone()));
    peer.send(request(1, "echo", json!({"x": "é"})));
    assert_eq!(
        peer.recv(),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"x": "é"}})
    );
    peer.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    peer.send(request(2, "progress", json!({})));
    let note = peer.recv();
    assert_eq!(note["method"], "notifications/progress");
    assert_eq!(
        peer.recv(),
        json!({"jsonrpc": "2.0", "id": 2, "result": "done"})
    );
    peer.send(request(3, "nope", json!({})));
    assert_eq!(peer.recv()["error"]["code"], -32601);
    peer.send(request(4, "boom", json!({})));
    let r = peer.recv();
    assert_eq!(
        (r["id"].as_u64(), r["error"]["message"].as_str()),
        (Some(4), Some("handler panicked"))
    );
    peer.send(request(5, "echo", json!(5)));
    assert_eq!(peer.recv()["result"], 5);
    let (report, rest) = peer.finish();
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(notes.load(Ordering::Relaxed), 1);
    assert_eq!(report.metrics.requests, 5);
    assert_eq!(report.metrics.responses, 5);
    assert_eq!(report.aborted_at_exit, 0);
}

#[test]
fn g7_cancel_sets_the_handler_flag_and_suppresses_its_response() {
    let (started_tx, started) = mpsc::channel::<()>();
    let (saw_cancel_tx, saw_cancel) = mpsc::channel::<Instant>();
    let started_tx = std::sync::Mutex::new(started_tx);
    let saw_cancel_tx = std::sync::Mutex::new(saw_cancel_tx);
    let handler = move |r: Request, ctx: RequestContext| -> HandlerResult {
        if r.method == "work" {
            started_tx.lock().expect("lock").send(()).expect("started");
            let cancelled = ctx.cancel_token().wait_timeout(Duration::from_secs(10));
            assert!(cancelled);
            saw_cancel_tx
                .lock()
                .expect("lock")
                .send(Instant::now())
                .expect("saw");
            // Whatever it returns now is suppressed.
            return ok(json!("too late"));
        }
        ok(json!("pong"))
    };
    let mut peer = Peer::start(ServeOptions::default(), handler);
    peer.send(request(7, "work", json!({})));
    started
        .recv_timeout(Duration::from_secs(5))
        .expect("handler started");
    let t = Instant::now();
    peer.send(cancel(7));
    let seen = saw_cancel
        .recv_timeout(Duration::from_secs(5))
        .expect("flag reached the handler");
    let latency = seen.duration_since(t);
    // G8: a second request completes, and no response for 7 comes first.
    let t = Instant::now();
    peer.send(request(8, "ping", json!({})));
    assert_eq!(
        peer.recv(),
        json!({"jsonrpc": "2.0", "id": 8, "result": "pong"})
    );
    eprintln!(
        "cancel reached the handler in {latency:?}; ping after cancel {:?}",
        t.elapsed()
    );
    let (report, rest) = peer.finish();
    assert!(rest.is_empty(), "a response after cancel: {rest:?}");
    let m = &report.metrics;
    assert_eq!(
        (m.cancels_running, m.responses_suppressed, m.responses),
        (1, 1, 1)
    );
    assert!(latency < Duration::from_secs(1), "{latency:?}");
}

#[test]
fn g7_a_handler_that_ignores_its_token_keeps_its_slot_until_it_returns() {
    let mut options = ServeOptions::default();
    options.session_mut().max_concurrent(1);
    let release = Arc::new(AtomicBool::new(false));
    let r2 = release.clone();
    let (started_tx, started) = mpsc::channel::<()>();
    let started_tx = std::sync::Mutex::new(started_tx);
    let handler = move |r: Request, _ctx: RequestContext| -> HandlerResult {
        if r.method == "stubborn" {
            started_tx.lock().expect("lock").send(()).expect("started");
            while !r2.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        ok(json!(r.method))
    };
    let mut peer = Peer::start(options, handler);
    peer.send(request(1, "stubborn", json!({})));
    started
        .recv_timeout(Duration::from_secs(5))
        .expect("handler started");
    peer.send(cancel(1));
    // The cancelled handler still runs: its slot is taken, so this is refused.
    std::thread::sleep(Duration::from_millis(50));
    peer.send(request(2, "ping", json!({})));
    let r = peer.recv();
    assert_eq!(
        (r["id"].as_u64(), r["error"]["code"].as_i64()),
        (Some(2), Some(-32000)),
        "{r}"
    );
    release.store(true, Ordering::Release);
    // Once it returns (its response suppressed), the slot is free again.
    let mut answered = None;
    for id in 3..200 {
        peer.send(request(id, "ping", json!({})));
        let r = peer.recv();
        if r.get("result").is_some() {
            answered = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = answered.expect("the slot came back");
    assert_eq!(r["result"], "ping");
    let (report, rest) = peer.finish();
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(report.metrics.responses_suppressed, 1);
    assert!(report.metrics.overload_rejects >= 1);
}

#[test]
fn g9_an_oversized_result_becomes_an_error_for_its_id() {
    let mut options = ServeOptions::default();
    options.framer_mut().max_frame(4096);
    let handler = |r: Request, ctx: RequestContext| -> HandlerResult {
        // 4096 - 1024 bytes of room for content under the limit.
        assert!(ctx.result_budget().is_some());
        ok(json!("x".repeat(if r.method == "big" {
            10_000
        } else {
            10
        })))
    };
    let mut peer = Peer::start(options, handler);
    peer.send(request(1, "big", json!({})));
    let r = peer.recv();
    assert_eq!(r["id"], 1);
    assert_eq!(r["error"]["code"], -32000);
    assert!(r["error"]["message"]
        .as_str()
        .expect("message")
        .contains("wire limit"));
    peer.send(request(2, "small", json!({})));
    assert_eq!(peer.recv()["result"], "xxxxxxxxxx");
    let (report, _) = peer.finish();
    assert_eq!(report.metrics.responses_too_large, 1);
}

#[test]
fn g5_a_blocked_writer_never_stalls_the_reader() {
    let (saw_cancel_tx, saw_cancel) = mpsc::channel::<()>();
    let saw_cancel_tx = std::sync::Mutex::new(saw_cancel_tx);
    let handler = move |r: Request, ctx: RequestContext| -> HandlerResult {
        if r.method == "wait" {
            if ctx.cancel_token().wait_timeout(Duration::from_secs(10)) {
                saw_cancel_tx.lock().expect("lock").send(()).expect("saw");
            }
            return ok(json!("late"));
        }
        ok(json!("y".repeat(256 * 1024)))
    };
    let mut peer = Peer::start(ServeOptions::default(), handler);
    // 2 MiB of responses that nobody reads: the writer blocks on the socket.
    for id in 1..=8 {
        peer.send(request(id, "big", json!({})));
    }
    std::thread::sleep(Duration::from_millis(100));
    // Still, stdin is read: this request starts and its cancel arrives.
    peer.send(request(100, "wait", json!({})));
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    peer.send(cancel(100));
    saw_cancel
        .recv_timeout(Duration::from_secs(5))
        .expect("the cancel was read while stdout was blocked");
    eprintln!(
        "cancel reached the handler in {:?} with stdout blocked",
        t.elapsed()
    );
    let mut ids = Vec::new();
    for _ in 0..8 {
        let r = peer.recv();
        assert_eq!(r["result"].as_str().map(str::len), Some(256 * 1024));
        ids.push(r["id"].as_u64().expect("id"));
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=8).collect::<Vec<_>>());
    let (report, rest) = peer.finish();
    assert!(
        rest.is_empty(),
        "no response for the cancelled request: {rest:?}"
    );
    assert_eq!(report.metrics.responses_suppressed, 1);
}

#[test]
fn drain_after_eof_is_bounded_and_abandoned_handlers_are_counted() {
    let mut options = ServeOptions::default();
    options.drain_timeout(Duration::from_millis(200));
    let (flag_tx, flag) = mpsc::channel::<bool>();
    let flag_tx = std::sync::Mutex::new(flag_tx);
    let handler = move |r: Request, ctx: RequestContext| -> HandlerResult {
        if r.method == "forever" {
            ctx.cancel_token().cancelled();
            flag_tx
                .lock()
                .expect("lock")
                .send(ctx.cancel_token().is_cancelled())
                .expect("flag");
        }
        ok(json!("done"))
    };
    let mut peer = Peer::start(options, handler);
    peer.send(request(1, "forever", json!({})));
    peer.send(request(2, "quick", json!({})));
    assert_eq!(peer.recv()["id"], 2);
    let t = Instant::now();
    let (report, rest) = peer.finish();
    let took = t.elapsed();
    eprintln!("serve returned {took:?} after EOF with one handler stuck (drain 200 ms)");
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(report.aborted_at_exit, 1);
    // The abandoned request was answered with an error, not left hanging.
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(
        (rest[0]["id"].as_u64(), rest[0]["error"]["code"].as_i64()),
        (Some(1), Some(-32603))
    );
    // The handler's flag was set, so it returned on its own.
    assert_eq!(flag.recv_timeout(Duration::from_secs(5)), Ok(true));
}
