//! F3, `guard --otel`: a span per request and the MCP metrics, by the
//! OpenTelemetry MCP conventions, sent over OTLP/HTTP to a real receiver
//! that decodes them with the official `opentelemetry-proto` package
//! (`tests/interop/otlp_receiver.py`). The trace goes host → guard →
//! server; a collector that is down, failing or stuck never delays a
//! message (G1) and never holds the guard's exit, and what it cost is
//! counted.
#![cfg(target_os = "linux")]

#[path = "support/guarded.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use mcp_stdio_tests::interop::{python, require, scripts_dir};
use serde_json::{json, Value};
use support::{call, fixture_server, guard_command, ping, tmp, Guarded};

/// The receiver: its port and the JSON lines it prints.
struct Collector {
    child: Child,
    port: u16,
    lines: Receiver<Value>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    fn start(test: &str, mode: &str) -> Option<Self> {
        let (py, _) = require(test, python())?;
        let mut child = Command::new(py)
            .arg("-u")
            .arg(scripts_dir().join("otlp_receiver.py"))
            .arg(mode)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP receiver");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).expect("the receiver prints JSON");
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the receiver's port");
        let port = u16::try_from(first["port"].as_u64().expect("port")).expect("a port");
        Some(Self { child, port, lines })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything it printed until `done` holds of what it has, or `within`.
    fn until(&self, within: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let t = Instant::now();
        let mut got = Vec::new();
        while !done(&got) {
            let left = within.saturating_sub(t.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(v) => got.push(v),
                Err(_) => panic!("the receiver did not get it all within {within:?}: {got:#?}"),
            }
        }
        got
    }
}

fn spans(got: &[Value]) -> Vec<&Value> {
    got.iter().filter(|v| v["signal"] == "span").collect()
}

fn metric<'a>(got: &'a [Value], name: &str) -> Vec<&'a Value> {
    got.iter()
        .filter(|v| v["signal"] == "metric" && v["name"] == name)
        .collect()
}

fn span_named<'a>(got: &'a [Value], name: &str) -> &'a Value {
    got.iter()
        .find(|v| v["signal"] == "span" && v["name"] == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {got:#?}"))
}

fn initialize(g: &mut Guarded) {
    g.send(
        &json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":"otel-test","version":"1"}}}),
    );
    let r = g.reply("init");
    assert!(r.get("result").is_some(), "{r}");
    g.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
}

const HOST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HOST_SPAN: &str = "00f067aa0ba902b7";

/// The `meta` tool's answer: the `_meta` the server got, parsed.
fn meta_seen(g: &mut Guarded, id: i64, meta: Value) -> Value {
    g.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"meta","arguments":{},"_meta":meta}}));
    let r = g.reply(id);
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    serde_json::from_str(text).expect("the server's _meta")
}

/// Spans and metrics by the conventions reach a real OTLP receiver: names,
/// kind, attributes, the host's trace continued by the guard's span and by
/// the server (its request carries the guard's `traceparent`, the host's
/// `tracestate` kept), the conventions' histograms, the guard's counters,
/// the service name and the headers from the standard variables. Without
/// `--otel` the server gets the host's `_meta` untouched.
#[test]
fn f3_otel_spans_and_metrics_reach_a_real_otlp_receiver() {
    let Some(rx) = Collector::start("f3_otel_spans_and_metrics_reach_a_real_otlp_receiver", "ok")
    else {
        return;
    };
    let endpoint = rx.endpoint();
    let metrics = tmp("otel-metrics.json");
    let metrics_path = metrics.path().to_str().expect("utf-8").to_owned();
    let xdg = tmp("otel-xdg");
    std::fs::create_dir(xdg.path()).expect("runtime base");
    std::fs::set_permissions(xdg.path(), std::fs::Permissions::from_mode(0o700)).expect("0700");
    let xdg_path = xdg.path().to_str().expect("utf-8").to_owned();
    let cmd = guard_command(
        &["--otel", "--name", "weather", "--metrics", &metrics_path],
        &[&fixture_server()],
        &[
            ("XDG_RUNTIME_DIR", &xdg_path),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20test-token",
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut g = Guarded::spawn(cmd);
    initialize(&mut g);
    let host_meta = json!({
        "traceparent": format!("00-{HOST_TRACE}-{HOST_SPAN}-01"),
        "tracestate": "vendor=abc",
        "progressToken": 5,
    });
    let seen = meta_seen(&mut g, 2, host_meta.clone());
    let sent = seen["traceparent"]
        .as_str()
        .expect("a traceparent")
        .to_owned();
    assert!(
        sent.starts_with(&format!("00-{HOST_TRACE}-")) && sent.ends_with("-01"),
        "the host's trace, the guard's span: {sent}"
    );
    assert_eq!(
        seen["tracestate"], "vendor=abc",
        "the host's tracestate kept"
    );
    assert_eq!(seen["progressToken"], 5);
    g.send(&call(3, "no_such_tool", json!({})));
    let r = g.reply(3);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    for id in 10..15 {
        ping(&mut g, id);
    }
    let got = rx.until(Duration::from_secs(20), |got| spans(got).len() >= 8);
    // The live status says what the exporter did.
    let t = Instant::now();
    loop {
        let out = Command::new(support::guard_bin())
            .args(["ps", "--json"])
            .env("XDG_RUNTIME_DIR", &xdg_path)
            .output()
            .expect("ps");
        let ps: Value = serde_json::from_slice(&out.stdout).expect("ps --json");
        let otel = &ps[0]["otel"];
        if otel["spans_exported"] == 8 {
            assert_eq!(otel["spans_dropped"], 0, "{otel}");
            assert_eq!(otel["spans_waiting"], 0, "{otel}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "ps: {ps}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");
    // The metrics flushed at exit: the session's duration, then the rest
    // of that request.
    let tail = rx.until(Duration::from_secs(20), |got| {
        got.iter()
            .skip_while(|v| v["name"] != "mcp.client.session.duration")
            .any(|v| v["signal"] == "request" && v["path"] == "/v1/metrics")
    });
    let all: Vec<Value> = got.into_iter().chain(tail).collect();

    let tool = span_named(&all, "tools/call meta");
    assert_eq!(tool["kind"], 3, "SPAN_KIND_CLIENT");
    assert_eq!(tool["trace_id"], HOST_TRACE);
    assert_eq!(
        tool["parent_span_id"], HOST_SPAN,
        "a child of the host's span"
    );
    assert_eq!(
        sent,
        format!(
            "00-{HOST_TRACE}-{}-01",
            tool["span_id"].as_str().expect("id")
        ),
        "the server's parent is the guard's span"
    );
    let a = &tool["attributes"];
    assert_eq!(a["mcp.method.name"], "tools/call");
    assert_eq!(a["gen_ai.tool.name"], "meta");
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["jsonrpc.request.id"], "2");
    assert_eq!(a["network.transport"], "pipe");
    assert_eq!(a["mcp.protocol.version"], "2025-11-25");
    assert!(a["mcp_stdio.request.bytes"].as_i64().expect("bytes") > 100);
    assert!(a.get("error.type").is_none(), "{a}");
    assert_eq!(tool["status"]["code"], 0, "unset");
    let r = &tool["resource"];
    assert_eq!(r["service.name"], "mcp-stdio-guard");
    assert_eq!(r["mcp_stdio.server.name"], "weather");
    assert_eq!(tool["scope"], "mcp-stdio");

    let init = span_named(&all, "initialize");
    assert_eq!(init["attributes"]["jsonrpc.request.id"], "init");
    assert_eq!(init["parent_span_id"], "", "a root span");
    let failed = span_named(&all, "tools/call no_such_tool");
    assert_eq!(failed["attributes"]["error.type"], "-32602");
    assert_eq!(failed["attributes"]["rpc.response.status_code"], "-32602");
    assert_eq!(failed["status"]["code"], 2, "STATUS_CODE_ERROR");
    let span_ms = |s: &Value| {
        (s["end_ns"].as_u64().expect("end") - s["start_ns"].as_u64().expect("start")) / 1_000_000
    };
    assert!(span_ms(tool) < 10_000, "{tool}");

    let ops = metric(&all, "mcp.client.operation.duration");
    let pings: u64 = ops
        .iter()
        .filter(|m| m["attributes"]["mcp.method.name"] == "ping")
        .map(|m| m["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(pings, 5, "{ops:#?}");
    assert_eq!(ops[0]["unit"], "s");
    assert_eq!(
        ops[0]["bounds"],
        json!([0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0])
    );
    assert!(ops
        .iter()
        .any(|m| m["attributes"]["error.type"] == "-32602"));
    let session = metric(&all, "mcp.client.session.duration");
    assert_eq!(session[0]["count"], 1);
    assert_eq!(
        session[0]["attributes"]["mcp.protocol.version"],
        "2025-11-25"
    );
    let requests = metric(&all, "mcp_stdio.requests");
    assert_eq!(
        requests.last().expect("requests")["value"],
        8,
        "{requests:?}"
    );
    assert!(all
        .iter()
        .filter(|v| v["signal"] == "request")
        .all(|v| v["authorization"] == "Bearer test-token"));
    assert!(
        !all.iter().any(|v| v["signal"] == "bad"),
        "protobuf to /v1/traces and /v1/metrics only: {all:#?}"
    );
    let file: Value =
        serde_json::from_slice(&std::fs::read(metrics.path()).expect("metrics")).expect("JSON");
    assert_eq!(file["otel"]["spans_exported"], 8, "{}", file["otel"]);
    assert_eq!(file["otel"]["spans_dropped"], 0);

    // Without --otel the server gets the host's _meta as it was sent.
    let mut plain = Guarded::start(&["--no-announce"], &[]);
    initialize(&mut plain);
    assert_eq!(meta_seen(&mut plain, 2, host_meta.clone()), host_meta);
    plain.close();
}

/// A collector that is down, answers errors or never answers: every
/// message goes through as promptly as without one, the guard exits
/// within its bound, the spans lost are counted, one line says so.
#[test]
fn f3_a_collector_down_failing_or_stuck_never_delays_a_message() {
    let test = "f3_a_collector_down_failing_or_stuck_never_delays_a_message";
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port())
    };
    let Some(failing) = Collector::start(test, "fail") else {
        return;
    };
    let Some(stuck) = Collector::start(test, "hang") else {
        return;
    };
    for (what, endpoint) in [
        ("down", down),
        ("failing", failing.endpoint()),
        ("stuck", stuck.endpoint()),
    ] {
        let metrics = tmp("otel-down.json");
        let path = metrics.path().to_str().expect("utf-8").to_owned();
        let cmd = guard_command(
            &["--otel", "--no-announce", "--metrics", &path],
            &[&fixture_server()],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY", "20"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "30000"),
            ],
        );
        let mut g = Guarded::spawn(cmd);
        initialize(&mut g);
        let t = Instant::now();
        let mut slowest = Duration::ZERO;
        for id in 0..200 {
            slowest = slowest.max(ping(&mut g, id));
        }
        let took = t.elapsed();
        let (code, stderr, exit) = g.finish(Duration::from_secs(15));
        eprintln!(
            "collector {what}: 200 pings in {took:?} (slowest {slowest:?}), exit {exit:?} after EOF"
        );
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            slowest < Duration::from_secs(2),
            "{what}: a ping took {slowest:?}"
        );
        assert!(
            exit < Duration::from_secs(8),
            "{what}: the exit waited {exit:?}"
        );
        assert_eq!(
            stderr.matches("mcp-stdio guard: --otel:").count(),
            1,
            "{what}: one line: {stderr}"
        );
        let file: Value =
            serde_json::from_slice(&std::fs::read(metrics.path()).expect("metrics")).expect("JSON");
        let o = &file["otel"];
        assert_eq!(o["spans_exported"], 0, "{what}: {o}");
        assert!(
            o["spans_dropped"].as_u64().expect("dropped") > 0,
            "{what}: {o}"
        );
    }
}

/// Settings that do not parse are usage errors (exit 2) that name the
/// variable; nothing is started.
#[test]
fn f3_otel_settings_that_do_not_parse_are_usage_errors() {
    for (var, value) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://[::1"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
    ] {
        let out = guard_command(
            &["--otel", "--no-announce"],
            &[&fixture_server()],
            &[(var, value)],
        )
        .stdin(Stdio::null())
        .output()
        .expect("run the guard");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert!(stderr.contains(var), "{var}: {stderr}");
        assert!(!stderr.contains("fixture: started"), "{stderr}");
    }
}

/// `--otel` with `--share`: the hub makes a span per call at the shared
/// server, a child of each session's own trace, and the server gets the
/// hub's span as its parent; two sessions, two traces, one receiver.
#[test]
fn f2_f3_otel_with_share_gives_each_sessions_calls_spans_in_its_own_trace() {
    let test = "f2_f3_otel_with_share_gives_each_sessions_calls_spans_in_its_own_trace";
    let Some(rx) = Collector::start(test, "ok") else {
        return;
    };
    let endpoint = rx.endpoint();
    let xdg = tmp("otel-share-xdg");
    std::fs::create_dir(xdg.path()).expect("runtime base");
    std::fs::set_permissions(xdg.path(), std::fs::Permissions::from_mode(0o700)).expect("0700");
    let xdg_path = xdg.path().to_str().expect("utf-8").to_owned();
    let guard = || {
        Guarded::spawn(guard_command(
            &[
                "--otel",
                "--share",
                "--share-linger",
                "1s",
                "--no-announce",
                "--name",
                "shared",
            ],
            &[&fixture_server()],
            &[
                ("XDG_RUNTIME_DIR", &xdg_path),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ],
        ))
    };
    let mut a = guard();
    let mut b = guard();
    initialize(&mut a);
    initialize(&mut b);
    let traces = ["0af7651916cd43dd8448eb211c80319c", HOST_TRACE];
    for (k, g) in [&mut a, &mut b].into_iter().enumerate() {
        let meta = json!({"traceparent": format!("00-{}-{HOST_SPAN}-01", traces[k])});
        let seen = meta_seen(g, 2, meta);
        let sent = seen["traceparent"].as_str().expect("a traceparent");
        assert!(sent.starts_with(&format!("00-{}-", traces[k])), "{sent}");
    }
    a.close();
    b.close();
    let got = rx.until(Duration::from_secs(20), |got| {
        spans(got)
            .iter()
            .filter(|s| s["name"] == "tools/call meta")
            .count()
            >= 2
    });
    for trace in traces {
        let span = spans(&got)
            .into_iter()
            .find(|s| s["name"] == "tools/call meta" && s["trace_id"] == trace)
            .unwrap_or_else(|| panic!("no span in trace {trace}: {got:#?}"));
        assert_eq!(span["parent_span_id"], HOST_SPAN, "{span}");
        eprintln!("the hub's span in the session's trace: {span}");
    }
}
