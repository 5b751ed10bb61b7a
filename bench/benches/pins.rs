//! The cost of pinned tool definitions in the guard (`guard --pin`): one
//! `tools/list` round through a `GuardSession` (the host's request in, the
//! server's answer framed, checked and handed to the host, every output
//! drained), without pins and with them.
//!
//! - `off`: no pins (the answer goes through as it came);
//! - `warn_match`: pins of every tool, all matching (each definition parsed,
//!   canonicalized and digested with SHA-256, as the CLI does);
//! - `hide_changed`: pins under `hide` with one tool in ten changed: the
//!   result is rewritten without them (a difference is reported once, so
//!   later rounds measure the check and the rewrite).
//!
//! Sizes: 25 tools (a typical server, ≈ 9 KiB) and 1,000 (≈ 360 KiB).
//! Not part of `bench/run`'s report; run with
//! `cargo bench -p mcp-stdio-bench --bench pins`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use mcp_stdio_core::{
    ChildStream, GuardConfig, GuardInput, GuardOutput, GuardSession, PinPolicy, Stamp,
    ToolDefinition, ToolPins,
};
use serde_json::json;
use sha2::Digest as _;

fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// A tool with a description and a small schema, as servers list them.
fn tool(i: usize, changed: bool) -> serde_json::Value {
    json!({
        "name": format!("tool_{i}"),
        "title": format!("Tool {i}"),
        "description": format!("Does thing number {i} to the files it is given{}", if changed { ", and more" } else { "" }),
        "inputSchema": {"type": "object", "properties": {
            "path": {"type": "string", "description": "the file"},
            "mode": {"type": "string", "enum": ["fast", "safe", "dry-run"]},
            "limit": {"type": "integer", "minimum": 0, "maximum": 1000}},
            "required": ["path"]},
        "annotations": {"readOnlyHint": i.is_multiple_of(2), "destructiveHint": false},
    })
}

fn pins(n: usize, policy: PinPolicy) -> ToolPins {
    let mut pins = ToolPins::new(sha256);
    pins.policy(policy);
    for i in 0..n {
        let d = ToolDefinition::parse(&tool(i, false).to_string(), sha256).expect("a tool");
        pins.pin(d.name(), d.digest().clone()).expect("room");
    }
    pins
}

struct Round {
    session: GuardSession,
    base: Instant,
    id: u64,
}

impl Round {
    fn new(pins: Option<ToolPins>) -> Self {
        let mut config = GuardConfig::default();
        config.proxy_mut().tool_pins(pins);
        let mut session = GuardSession::new(config);
        let base = Instant::now();
        session.handle_input(Stamp::new(base, 0), GuardInput::Spawned);
        Self {
            session,
            base,
            id: 0,
        }
    }

    fn at(&self) -> Stamp {
        Stamp::new(self.base, 1)
    }

    /// Every output; the bytes for the host, counted.
    fn drain(&mut self) -> usize {
        let at = self.at();
        let mut host = 0;
        loop {
            match self.session.poll_output() {
                GuardOutput::ToServer(out) => {
                    let n = out.bytes().len();
                    self.session
                        .handle_input(at, GuardInput::ServerWritten(Ok(n)));
                }
                GuardOutput::ToHost(out) => {
                    let n = out.bytes().len();
                    host += n;
                    self.session.handle_input(at, GuardInput::HostWrote(Ok(n)));
                    self.session.handle_input(at, GuardInput::HostWritten(n));
                }
                GuardOutput::Timeout(_) => return host,
                _ => {}
            }
        }
    }

    /// One `tools/list`: the request, then `result` as the answer.
    fn list(&mut self, result: &str) -> usize {
        self.id += 1;
        let at = self.at();
        let request = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"tools/list\"}}\n",
            self.id
        );
        let buf = request.as_bytes();
        self.session.handle_input(
            at,
            GuardInput::HostRead {
                result: Ok(buf.len()),
                buf,
            },
        );
        self.drain();
        let answer = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{result}}}\n",
            self.id
        );
        let mut rest = answer.as_bytes();
        while !rest.is_empty() {
            let room = self.session.server_stdout_room().zeroed();
            let n = room.len().min(rest.len());
            room[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            let look = &mut || Ok(None);
            self.session.handle_input(
                at,
                GuardInput::ServerRead {
                    stream: ChildStream::Stdout,
                    result: Ok(n),
                    buf: &[],
                    look,
                },
            );
        }
        self.drain()
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("pins_tools_list");
    group.measurement_time(Duration::from_secs(3));
    for n in [25usize, 1000] {
        let plain =
            json!({ "tools": (0..n).map(|i| tool(i, false)).collect::<Vec<_>>() }).to_string();
        let changed =
            json!({ "tools": (0..n).map(|i| tool(i, i.is_multiple_of(10))).collect::<Vec<_>>() })
                .to_string();
        group.throughput(Throughput::Bytes(plain.len() as u64));
        for (case, pins, result) in [
            ("off", None, &plain),
            ("warn_match", Some(pins(n, PinPolicy::Warn)), &plain),
            ("hide_changed", Some(pins(n, PinPolicy::Hide)), &changed),
        ] {
            let mut round = Round::new(pins);
            group.bench_with_input(BenchmarkId::new(case, n), result, |b, result| {
                b.iter(|| black_box(round.list(result)));
            });
        }
    }
    group.finish();
}

// `criterion_main!` would declare an undocumented `pub fn`; this is what it expands to.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
