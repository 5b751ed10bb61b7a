//! `bench-peer` — a minimal MCP server over stdio for the oversized-frame
//! benchmark: it writes one huge response line at pipe speed.
//!
//! The conformance fixture's `big_exact {line_bytes}` builds the whole line
//! in memory first (a 512 MiB line takes it about 8 s and 1.5 GiB), which
//! would measure the fixture, not the host. This peer streams the line from
//! a 1 MiB buffer instead.
//!
//! ```text
//! initialize                 echoes protocolVersion; capabilities {tools:{}}
//! notifications/*            ignored
//! ping                       {}
//! tools/list                 big and huge (the Python SDK lists tools after a first call)
//! tools/call big {bytes}   one text block of `bytes` 'x', like the fixture's `big`
//!                            (the same line, streamed instead of built)
//! tools/call slow_big {bytes, delay_ms}
//!                            like big, after delay_ms of work (a sleep, so it takes no CPU
//!                            from the host) on a thread of its own; a notifications/cancelled
//!                            for it during the work suppresses the response
//! tools/call huge {line_bytes}
//!                            a response line of exactly line_bytes bytes (before the \n):
//!                            {"jsonrpc":"2.0","id":ID,"result":{"content":[{"type":"text","text":"xxx…"}]}}
//! tools/call id_last {line_bytes}
//!                            the same line with the members in the TypeScript SDK's order,
//!                            the id last:
//!                            {"result":{"content":[{"type":"text","text":"xxx…"}]},"jsonrpc":"2.0","id":ID}
//! anything else              JSON-RPC error -32601
//! ```
//!
//! Requests other than `slow_big` are answered one by one, in order, on the
//! reading thread: a request sent after `huge` is answered after the whole
//! huge line. `slow_big` is the cancel benchmark's "work before the
//! response": while it works, pings are answered at once and cancels are
//! read, with no CPU of the host's taken (the fixture's `big` builds its
//! result on a core the host would need).
//!
//! `bench-peer --stamps FILE` appends one line `START END` to FILE per
//! `id_last` response: `CLOCK_MONOTONIC` nanoseconds just before its first
//! byte was written and just after `write(2)` returned for its final newline
//! (the frame is then wholly in the pipe). Rust's `Instant`, node's
//! `process.hrtime` and Python's `time.monotonic_ns` read the same clock on
//! Linux, so a client can time its request's outcome from the frame's end.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};

type Out = Arc<Mutex<io::BufWriter<io::Stdout>>>;
/// `slow_big` calls at work, by id, each with its cancel flag.
type Working = Arc<Mutex<HashMap<String, Arc<AtomicBool>>>>;

/// `CLOCK_MONOTONIC`, nanoseconds.
fn monotonic_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u128::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u128::try_from(t.tv_nsec).unwrap_or(0)
}

fn stamps_path() -> io::Result<Option<PathBuf>> {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next()) {
        (None, _) => Ok(None),
        (Some(flag), Some(path)) if flag == "--stamps" => Ok(Some(PathBuf::from(path))),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "usage: bench-peer [--stamps FILE]",
        )),
    }
}

fn main() -> io::Result<()> {
    let stamps = stamps_path()?;
    let stdin = io::stdin().lock();
    let out: Out = Arc::new(Mutex::new(io::BufWriter::with_capacity(
        64 * 1024,
        io::stdout(),
    )));
    let working: Working = Arc::default();
    let fill = Arc::new(vec![b'x'; 1 << 20]);
    for line in stdin.lines() {
        let line = line?;
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            if msg.get("method") == Some(&json!("notifications/cancelled")) {
                if let Some(id) = msg.pointer("/params/requestId") {
                    if let Some(flag) = lock(&working).get(&id.to_string()) {
                        flag.store(true, Ordering::Release);
                    }
                }
            }
            continue; // other notifications are ignored
        };
        if msg.get("method") == Some(&json!("tools/call"))
            && msg.pointer("/params/name") == Some(&json!("slow_big"))
        {
            let cancelled = Arc::new(AtomicBool::new(false));
            lock(&working).insert(id.to_string(), cancelled.clone());
            let (out, working, fill) = (out.clone(), working.clone(), fill.clone());
            let bytes = arg(&msg, "bytes");
            let delay = Duration::from_millis(arg(&msg, "delay_ms") as u64);
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                lock(&working).remove(&id.to_string());
                if !cancelled.load(Ordering::Acquire) {
                    let line_bytes = bytes + head(&id).len() + TAIL.len();
                    let mut out = lock(&out);
                    let _ = write_huge(&mut *out, &id, line_bytes, &fill);
                    let _ = out.flush();
                }
            });
            continue;
        }
        let mut out = lock(&out);
        let out = &mut *out;
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match method {
            "initialize" => {
                let version = msg
                    .pointer("/params/protocolVersion")
                    .cloned()
                    .unwrap_or_else(|| json!("2025-06-18"));
                let result = json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "bench-peer", "version": env!("CARGO_PKG_VERSION")},
                });
                write_line(out, &json!({"jsonrpc": "2.0", "id": id, "result": result}))?;
            }
            "ping" => write_line(out, &json!({"jsonrpc": "2.0", "id": id, "result": {}}))?,
            "tools/list" => {
                write_line(out, &json!({"jsonrpc": "2.0", "id": id, "result": tools()}))?
            }
            "tools/call" if msg.pointer("/params/name") == Some(&json!("huge")) => {
                let bytes = arg(&msg, "line_bytes");
                write_huge(out, &id, bytes, &fill)?;
            }
            "tools/call" if msg.pointer("/params/name") == Some(&json!("id_last")) => {
                let bytes = arg(&msg, "line_bytes");
                out.flush()?;
                let start = monotonic_ns();
                write_id_last(out, &id, bytes, &fill)?;
                // The stamp is taken once the final newline is in the pipe.
                out.flush()?;
                let end = monotonic_ns();
                if let Some(path) = &stamps {
                    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
                    writeln!(file, "{start} {end}")?;
                }
            }
            "tools/call" if msg.pointer("/params/name") == Some(&json!("big")) => {
                let bytes = arg(&msg, "bytes");
                let line_bytes = bytes + head(&id).len() + TAIL.len();
                write_huge(out, &id, line_bytes, &fill)?;
            }
            other => write_line(
                out,
                &json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": format!("not supported: {other}")}}),
            )?,
        }
        out.flush()?;
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tools() -> Value {
    let tool = |name: &str, arg: &str| {
        json!({"name": name, "inputSchema": {"type": "object",
               "properties": {arg: {"type": "integer"}}, "required": [arg]}})
    };
    json!({"tools": [tool("big", "bytes"), tool("slow_big", "bytes"), tool("huge", "line_bytes"), tool("id_last", "line_bytes")]})
}

fn arg(msg: &Value, name: &str) -> usize {
    msg.pointer(&format!("/params/arguments/{name}"))
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

const TAIL: &str = "\"}]}}";

/// The start of an `id_last` line: the result first.
const ID_LAST_HEAD: &str = "{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"";

fn id_last_tail(id: &Value) -> String {
    format!("\"}}]}},\"jsonrpc\":\"2.0\",\"id\":{id}}}")
}

fn head(id: &Value) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\""
    )
}

fn write_line(out: &mut impl Write, msg: &Value) -> io::Result<()> {
    serde_json::to_writer(&mut *out, msg)?;
    out.write_all(b"\n")
}

/// One response line of exactly `line_bytes` bytes (at least the bytes of
/// the empty text result).
fn write_huge(out: &mut impl Write, id: &Value, line_bytes: usize, fill: &[u8]) -> io::Result<()> {
    let head = head(id);
    out.write_all(head.as_bytes())?;
    let mut pad = line_bytes.saturating_sub(head.len() + TAIL.len());
    while pad > 0 {
        let n = pad.min(fill.len());
        out.write_all(&fill[..n])?;
        pad -= n;
    }
    out.write_all(TAIL.as_bytes())?;
    out.write_all(b"\n")
}

/// One response line of exactly `line_bytes` bytes (at least the bytes of
/// the empty text result) whose `id` member comes last.
fn write_id_last(
    out: &mut impl Write,
    id: &Value,
    line_bytes: usize,
    fill: &[u8],
) -> io::Result<()> {
    let tail = id_last_tail(id);
    out.write_all(ID_LAST_HEAD.as_bytes())?;
    let mut pad = line_bytes.saturating_sub(ID_LAST_HEAD.len() + tail.len());
    while pad > 0 {
        let n = pad.min(fill.len());
        out.write_all(&fill[..n])?;
        pad -= n;
    }
    out.write_all(tail.as_bytes())?;
    out.write_all(b"\n")
}
