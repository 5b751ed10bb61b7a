//! Hand-written hosts: the limits and the naive framings.
//!
//! - `raw`: spawn the server, write the request line, read until the newline
//!   (64 KiB reads, `memchr` over each new chunk only, into a reused `Vec`).
//!   No parse: the limit for any client.
//! - `raw-rawvalue`: the same plus what a client minimally must do: check
//!   UTF-8 and parse the response into `{id, result: &RawValue}` borrowed
//!   from the line. The reference of the "within 1.1×" goal.
//! - `lines-codec` / `lines-codec-unbounded` (oversized): tokio-util's
//!   `LinesCodec` (`new_with_max_length(4 MiB)` / `new()`) decoding the
//!   server's stdout the way `FramedRead` does (8 KiB initial buffer,
//!   `reserve(1)` + `read_buf` per read). Driven by hand rather than through
//!   `FramedRead`, whose stream ends at the first decode error: a host must
//!   keep decoding after `MaxLineLengthExceeded` to recover.
//! - `lines-codec` (id-last): the same reader with `new_with_max_length(1 MiB)`,
//!   waiting for its request's answer: the codec's error carries no id, so a
//!   host on it can tie the discarded line to no request.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use bytes::BytesMut;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};

use super::{
    bench_peer, big_params, huge_params, id_last_line, id_last_params, monotonic_ns, server_for,
    CaseResult, Stamps, Trial, ID_LAST_LIMIT, ID_LAST_TRIALS, ID_LAST_WAIT, LARGE_BYTES,
    LARGE_CALLS, OVERSIZED_LIMIT, OVERSIZED_LINE, PINGS, PING_WARMUP,
};
use crate::mem::Probe;

const INITIALIZE: &str = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\
    \"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\
    \"clientInfo\":{\"name\":\"mcp-stdio-bench-raw\",\"version\":\"0\"}}}\n";
const INITIALIZED: &str = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

fn request_line(id: u64, method: &str, params: Option<&serde_json::Value>) -> Vec<u8> {
    let mut msg = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(p) = params {
        msg["params"] = p.clone();
    }
    let mut line = serde_json::to_vec(&msg).expect("a request serializes");
    line.push(b'\n');
    line
}

/// A server on plain pipes with a minimal line reader.
struct RawServer {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RawServer {
    fn spawn(program: std::path::PathBuf) -> Self {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the server");
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut server = Self {
            child,
            stdin,
            stdout,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
        };
        server.send(INITIALIZE.as_bytes());
        let mut line = Vec::new();
        server.read_line(&mut line);
        server.send(INITIALIZED.as_bytes());
        server
    }

    fn send(&mut self, line: &[u8]) {
        self.stdin.write_all(line).expect("write to the server");
    }

    /// Appends the next line (without its `\n`) to `line`. Each byte is
    /// scanned once.
    fn read_line(&mut self, line: &mut Vec<u8>) {
        loop {
            if self.start < self.end {
                let avail = &self.buf[self.start..self.end];
                if let Some(i) = memchr::memchr(b'\n', avail) {
                    line.extend_from_slice(&avail[..i]);
                    self.start += i + 1;
                    return;
                }
                line.extend_from_slice(avail);
                self.start = self.end;
            }
            let n = self
                .stdout
                .read(&mut self.buf)
                .expect("read the server's stdout");
            assert!(n > 0, "the server closed stdout");
            self.start = 0;
            self.end = n;
        }
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The least a client must do with a response: its id, its result borrowed.
#[derive(Deserialize)]
struct Response<'a> {
    id: u64,
    #[serde(borrow)]
    result: &'a RawValue,
}

fn large(program: std::path::PathBuf, parse: bool) -> CaseResult {
    let mut server = RawServer::spawn(program);
    let params = big_params(LARGE_BYTES);
    let mut line = Vec::new();
    let mut out = CaseResult::default();
    for id in 1..=LARGE_CALLS as u64 {
        let request = request_line(id, "tools/call", Some(&params));
        let probe = Probe::start();
        server.send(&request);
        line.clear();
        server.read_line(&mut line);
        if parse {
            let text = std::str::from_utf8(&line).expect("UTF-8");
            let response: Response<'_> = serde_json::from_str(text).expect("a response");
            assert_eq!(response.id, id);
            assert!(response.result.get().len() > LARGE_BYTES);
        } else {
            assert!(line.len() > LARGE_BYTES);
        }
        out.push(probe.stop());
    }
    out
}

fn ping(program: std::path::PathBuf) -> CaseResult {
    let mut server = RawServer::spawn(program);
    let mut line = Vec::new();
    let mut out = CaseResult::default();
    for i in 0..PING_WARMUP + PINGS {
        let request = request_line(i as u64 + 1, "ping", None);
        let start = Instant::now();
        server.send(&request);
        line.clear();
        server.read_line(&mut line);
        if i >= PING_WARMUP {
            out.push_time(start.elapsed());
        }
    }
    out
}

async fn lines_codec_oversized(limit: Option<usize>) -> CaseResult {
    let mut child = tokio::process::Command::new(bench_peer())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bench-peer");
    let mut stdin = child.stdin.take().expect("stdin piped");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut codec = limit.map_or_else(LinesCodec::new, LinesCodec::new_with_max_length);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out = CaseResult::default();

    let probe = Probe::start();
    let mut requests = request_line(1, "tools/call", Some(&huge_params(OVERSIZED_LINE)));
    requests.extend(request_line(2, "ping", None));
    stdin.write_all(&requests).await.expect("write requests");
    let mut recovered = false;
    let mut huge_note = "huge request: still pending after the ping returned (no error \
                         delivered to the request; the codec reported MaxLineLengthExceeded)";
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(line)) => {
                let id = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64));
                match id {
                    Some(2) => {
                        recovered = true;
                        break;
                    }
                    Some(1) => huge_note = "huge request: delivered whole (no limit)",
                    _ => {}
                }
            }
            Ok(None) => {
                buf.reserve(1);
                let n = stdout.read_buf(&mut buf).await.expect("read stdout");
                if n == 0 {
                    break;
                }
            }
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                if !out.values.contains_key("error_after_ms") {
                    out.value("error_after_ms", probe.elapsed().as_secs_f64() * 1e3);
                }
            }
            Err(e) => panic!("LinesCodec: {e}"),
        }
    }
    out.push(probe.stop());
    out.value("recovered", f64::from(u8::from(recovered)));
    out.note(huge_note);
    out
}

/// Requests answered with a `line_bytes` response whose id comes last, read
/// through `LinesCodec::new_with_max_length(ID_LAST_LIMIT)`. A request ends
/// when a line carrying its id decodes (an answer or an error response), or
/// at [`ID_LAST_WAIT`]; `MaxLineLengthExceeded` is noted with its time.
async fn lines_codec_id_last(line_bytes: usize) -> CaseResult {
    let stamps = Stamps::new();
    let mut child = tokio::process::Command::new(bench_peer())
        .arg("--stamps")
        .arg(stamps.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bench-peer");
    let mut stdin = child.stdin.take().expect("stdin piped");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut codec = LinesCodec::new_with_max_length(ID_LAST_LIMIT);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let params = id_last_params(line_bytes);
    let mut out = CaseResult::default();
    for n in 0..ID_LAST_TRIALS {
        let id = n as u64 + 1;
        let sent = monotonic_ns();
        let deadline = tokio::time::Instant::now() + ID_LAST_WAIT;
        stdin
            .write_all(&request_line(id, "tools/call", Some(&params)))
            .await
            .expect("write the request");
        let mut codec_error_ns = None;
        let answer = loop {
            match codec.decode(&mut buf) {
                Ok(Some(line)) => {
                    let msg = serde_json::from_str::<serde_json::Value>(&line).ok();
                    if msg.as_ref().and_then(|m| m.get("id")) == Some(&id.into()) {
                        break Some(msg.is_some_and(|m| m.get("error").is_some()));
                    }
                }
                Ok(None) => {
                    buf.reserve(1);
                    match tokio::time::timeout_at(deadline, stdout.read_buf(&mut buf)).await {
                        Ok(Ok(0)) => panic!("bench-peer closed stdout"),
                        Ok(r) => {
                            r.expect("read stdout");
                        }
                        Err(_) => break None,
                    }
                }
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    codec_error_ns.get_or_insert_with(monotonic_ns);
                }
                Err(e) => panic!("LinesCodec: {e}"),
            }
        };
        let done = monotonic_ns();
        let end = stamps.end_ns(n);
        let codec_said = match (codec_error_ns, end) {
            (Some(at), Some(end)) => format!(
                "; the codec reported MaxLineLengthExceeded {:.1} ms before the frame's end, \
                 with no id",
                (end as f64 - at as f64) / 1e6
            ),
            _ => String::new(),
        };
        let (kind, detail) = match answer {
            Some(true) => ("error", format!("an error response{codec_said}")),
            Some(false) => ("result", format!("a result{codec_said}")),
            None => (
                "timeout",
                format!("no answer within {} s{codec_said}", ID_LAST_WAIT.as_secs()),
            ),
        };
        out.trials.push(Trial::new(kind, sent, done, end, detail));
        if answer.is_none() {
            break;
        }
    }
    out
}

pub(super) fn case(scenario: &str, client: &str) -> Option<CaseResult> {
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    };
    Some(match (scenario, client) {
        ("large" | "large-fast", "raw") => large(server_for(scenario), false),
        ("large" | "large-fast", "raw-rawvalue") => large(server_for(scenario), true),
        ("ping" | "ping-quiet", "raw") => ping(server_for(scenario)),
        ("oversized", "lines-codec") => rt().block_on(lines_codec_oversized(Some(OVERSIZED_LIMIT))),
        ("oversized", "lines-codec-unbounded") => rt().block_on(lines_codec_oversized(None)),
        (s, "lines-codec") if id_last_line(s).is_some() => {
            rt().block_on(lines_codec_id_last(id_last_line(s)?))
        }
        _ => return None,
    })
}
