//! One benchmark case, run in a fresh process: `mcp-stdio-bench case SCENARIO CLIENT`.
//!
//! The case prints one JSON [`CaseResult`] line on stdout. Each scenario has
//! fixed parameters (the constants below), so every client of a scenario does
//! the same work against the same server binary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::mem::Measured;

mod ours;
mod raw;
mod rmcp_client;

/// The `big` response of the large-response scenario: 8 MiB of text.
pub(crate) const LARGE_BYTES: usize = 8 * 1024 * 1024;
/// Calls per process in the large-response scenario (the first is reported
/// apart: it pays the buffers' first allocation).
pub(crate) const LARGE_CALLS: usize = 10;
/// The `text5` scenario's result: 5 MiB of text (the content limit's case).
pub(crate) const TEXT5_BYTES: usize = 5 * 1024 * 1024;
/// The wire limit our clients get in the large-response and cancel
/// scenarios: rmcp's default line limit (16 MiB), above the 8 MiB response.
pub(crate) const LARGE_LIMIT: usize = 16 * 1024 * 1024;
/// Pings measured per process, after [`PING_WARMUP`] unmeasured ones.
pub(crate) const PINGS: usize = 10_000;
/// Pings before measuring.
pub(crate) const PING_WARMUP: usize = 500;
/// stderr written by the server in the flood scenario: 1 GiB.
pub(crate) const FLOOD_BYTES: usize = 1024 * 1024 * 1024;
/// Cancel trials per process.
pub(crate) const CANCEL_TRIALS: usize = 12;
/// Uncancelled 8 MiB calls before the cancel trials (buffers allocated).
pub(crate) const CANCEL_WARMUP: usize = 2;
/// In the `cancel` scenario, the cancel is issued once this much of the
/// response has reached the host's stdout reader: the response is then
/// surely being written (the fixture can no longer suppress it).
pub(crate) const IN_FLIGHT_BYTES: u64 = 1024 * 1024;
/// Polling interval while waiting for those bytes.
pub(crate) const POLL: Duration = Duration::from_micros(100);
/// In the `cancel-early` scenario, the work `bench-peer` does before it
/// would answer the cancelled call (a sleep: no CPU taken from the host).
pub(crate) const CANCEL_WORK_MS: u64 = 50;
/// Quiet time between cancel trials.
pub(crate) const SETTLE: Duration = Duration::from_millis(20);
/// In the oversized scenario, the `ping` follows the huge request after this
/// pause, so that it is written after it (rmcp may otherwise write a later
/// request first). The 512 MiB line takes far longer to arrive.
pub(crate) const PING_AFTER: Duration = Duration::from_millis(50);
/// The single line of the oversized scenario: 512 MiB.
pub(crate) const OVERSIZED_LINE: usize = 512 * 1024 * 1024;
/// The wire limit in the oversized scenario.
pub(crate) const OVERSIZED_LIMIT: usize = 4 * 1024 * 1024;
/// How long any single awaited response may take before the case gives up.
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);
/// The wire limit in the id-last scenarios (ours, `LinesCodec`, `rmcp-1mib`).
pub(crate) const ID_LAST_LIMIT: usize = 1024 * 1024;
/// Requests per process in the id-last scenarios (a client stops at its
/// first trial that times out or loses the connection: the others would
/// end alike, or could not be sent).
pub(crate) const ID_LAST_TRIALS: usize = 10;
/// How long each id-last request may wait for its outcome, from sending.
pub(crate) const ID_LAST_WAIT: Duration = Duration::from_secs(5);
/// How long a client waits for `bench-peer` to write a frame-end stamp.
const STAMP_WAIT: Duration = Duration::from_secs(2);

/// The response line of an id-last scenario (`id_last {line_bytes}`), bytes
/// before the newline: 4 MiB, or 16 MiB for `id-last-16mib`.
pub(crate) fn id_last_line(scenario: &str) -> Option<usize> {
    match scenario {
        "id-last" => Some(4 * 1024 * 1024),
        "id-last-16mib" => Some(16 * 1024 * 1024),
        _ => None,
    }
}

/// How one id-last request ended, as seen by the client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trial {
    /// `error` (the request failed, the session alive), `closed` (it failed
    /// because the whole connection closed), `result` (the oversized result
    /// was delivered) or `timeout` (nothing within [`ID_LAST_WAIT`]).
    pub(crate) outcome: String,
    /// Frame end (bench-peer's stamp) → the outcome in the client's hands,
    /// milliseconds; absent for a timeout or when no stamp was found.
    #[serde(default)]
    pub(crate) after_end_ms: Option<f64>,
    /// Request sent → frame end: how long the server took to write it, ms.
    #[serde(default)]
    pub(crate) end_after_sent_ms: Option<f64>,
    /// The error's text, or what was delivered.
    #[serde(default)]
    pub(crate) detail: String,
}

impl Trial {
    /// A trial that ended at `done_ns` (`CLOCK_MONOTONIC`), for a request
    /// sent at `sent_ns`, whose response frame ended at `end_ns`.
    pub(crate) fn new(
        outcome: &str,
        sent_ns: u64,
        done_ns: u64,
        end_ns: Option<u64>,
        detail: String,
    ) -> Self {
        let ms = |a: u64, b: u64| (a as f64 - b as f64) / 1e6;
        Self {
            outcome: outcome.to_owned(),
            after_end_ms: end_ns
                .filter(|_| outcome != "timeout")
                .map(|e| ms(done_ns, e)),
            end_after_sent_ms: end_ns.map(|e| ms(e, sent_ns)),
            detail,
        }
    }
}

/// What one case process reports.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct CaseResult {
    /// Wall time per measured operation, nanoseconds, in order.
    #[serde(default)]
    pub(crate) times_ns: Vec<u64>,
    /// Peak RSS growth per measured operation, bytes (same order; may be
    /// empty where memory is not measured).
    #[serde(default)]
    pub(crate) growth: Vec<u64>,
    /// CPU time of the host process per measured operation, nanoseconds
    /// (same order; may be empty).
    #[serde(default)]
    pub(crate) cpu_ns: Vec<u64>,
    /// Named extra numbers (e.g. `stderr_seen`, `late_responses`).
    #[serde(default)]
    pub(crate) values: BTreeMap<String, f64>,
    /// Free-form remarks (e.g. how a request ended).
    #[serde(default)]
    pub(crate) notes: Vec<String>,
    /// The id-last scenarios: one entry per request.
    #[serde(default)]
    pub(crate) trials: Vec<Trial>,
}

impl CaseResult {
    pub(crate) fn push(&mut self, m: Measured) {
        self.times_ns.push(duration_ns(m.time));
        self.growth.push(m.growth);
        self.cpu_ns.push(duration_ns(m.cpu));
    }

    pub(crate) fn push_time(&mut self, d: Duration) {
        self.times_ns.push(duration_ns(d));
    }

    pub(crate) fn value(&mut self, name: &str, v: f64) {
        self.values.insert(name.to_owned(), v);
    }

    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }
}

pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The directory of this executable: the cargo target dir that also holds
/// `fixture-server` and `bench-peer`.
pub(crate) fn exe_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .expect("the path of the running executable")
}

/// The conformance suite's fixture server (built by `cargo build --release --workspace`).
pub(crate) fn fixture() -> PathBuf {
    exe_dir().join("fixture-server")
}

/// The huge-line peer of the oversized scenario.
pub(crate) fn bench_peer() -> PathBuf {
    exe_dir().join("bench-peer")
}

/// The server of a scenario: the fixture, except for `large-fast` and
/// `ping-quiet`, which use `bench-peer` (it streams `big` from a buffer and
/// writes nothing to stderr: the server's own cost out of the way).
/// The `mcp-stdio` binary (for the rows through `mcp-stdio guard`).
pub(crate) fn guard() -> PathBuf {
    exe_dir().join("mcp-stdio")
}

/// The server command of `scenario`, run directly or behind `mcp-stdio guard`
/// (wire limit [`LARGE_LIMIT`] both ways, so the 8 MiB response passes;
/// `MCP_STDIO_BENCH_GUARD_FLAGS` adds guard flags).
pub(crate) fn command_for(scenario: &str, guarded: bool) -> mcp_stdio_core::CommandSpec {
    let server = server_for(scenario);
    if !guarded {
        return mcp_stdio_core::CommandSpec::new(server);
    }
    let mut spec = mcp_stdio_core::CommandSpec::new(guard());
    spec.args(["guard", "--max-frame", &LARGE_LIMIT.to_string()]);
    // Extra guard flags for a side-by-side of two guard settings
    // (`--no-announce` against the default, say), split on whitespace.
    if let Some(flags) = std::env::var_os("MCP_STDIO_BENCH_GUARD_FLAGS") {
        spec.args(flags.to_string_lossy().split_whitespace());
    }
    spec.arg("--");
    spec.arg(server);
    spec
}

pub(crate) fn server_for(scenario: &str) -> PathBuf {
    match scenario {
        "large-fast" | "ping-quiet" | "text5" => bench_peer(),
        _ => fixture(),
    }
}

/// `tools/call` params for the bench peer's `id_last` tool.
pub(crate) fn id_last_params(line_bytes: usize) -> serde_json::Value {
    serde_json::json!({"name": "id_last", "arguments": {"line_bytes": line_bytes}})
}

/// `CLOCK_MONOTONIC`, nanoseconds: the clock of bench-peer's stamps.
pub(crate) fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// The side file where `bench-peer --stamps` records when each `id_last`
/// response frame ended; removed on drop.
pub(crate) struct Stamps {
    path: PathBuf,
}

impl Stamps {
    pub(crate) fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "mcp-stdio-bench-stamps-{}-{}",
            std::process::id(),
            monotonic_ns()
        ));
        Self { path }
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// `bench-peer --stamps FILE`.
    pub(crate) fn peer_command(&self) -> mcp_stdio_core::CommandSpec {
        let mut spec = mcp_stdio_core::CommandSpec::new(bench_peer());
        spec.arg("--stamps").arg(&self.path);
        spec
    }

    /// The frame-end stamp of the `n`-th `id_last` response (from 0), once
    /// bench-peer has written it (it stamps after its final write returns,
    /// so a fast client may look before it is there).
    pub(crate) fn end_ns(&self, n: usize) -> Option<u64> {
        let give_up = std::time::Instant::now() + STAMP_WAIT;
        loop {
            let text = std::fs::read_to_string(&self.path).unwrap_or_default();
            let end = text
                .lines()
                .nth(n)
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|e| e.parse().ok());
            if end.is_some() || std::time::Instant::now() > give_up {
                return end;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Stamps {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `tools/call` params for the `big` tool (fixture and bench-peer).
pub(crate) fn big_params(bytes: usize) -> serde_json::Value {
    serde_json::json!({"name": "big", "arguments": {"bytes": bytes}})
}

/// The server and the cancelled call of a cancel scenario: `cancel` (the
/// response in flight) runs against the fixture's `big`; `cancel-early` (the
/// cancel before the response) against `bench-peer`'s `slow_big`, whose
/// work sleeps, so that the time measured is the host's, not the server's
/// work competing for the host's cores.
pub(crate) fn cancel_setup(scenario: &str) -> (PathBuf, serde_json::Value) {
    match scenario {
        "cancel-early" => (
            bench_peer(),
            serde_json::json!({"name": "slow_big",
                "arguments": {"bytes": LARGE_BYTES, "delay_ms": CANCEL_WORK_MS}}),
        ),
        _ => (fixture(), big_params(LARGE_BYTES)),
    }
}

/// `tools/call` params for the fixture's `stderr_flood` tool.
pub(crate) fn flood_params(bytes: usize) -> serde_json::Value {
    serde_json::json!({"name": "stderr_flood", "arguments": {"bytes": bytes}})
}

/// `tools/call` params for the bench peer's `huge` tool.
pub(crate) fn huge_params(line_bytes: usize) -> serde_json::Value {
    serde_json::json!({"name": "huge", "arguments": {"line_bytes": line_bytes}})
}

/// Runs `scenario` with `client` in this process and prints its result.
pub(crate) fn run(scenario: &str, client: &str) -> Result<(), String> {
    let result = match (scenario, client) {
        (_, "tokio" | "tokio-value") => ours::tokio_case(scenario, client == "tokio-value", false),
        (_, "tokio-guard") => ours::tokio_case(scenario, false, true),
        (_, "async-std") => ours::async_std_case(scenario),
        (_, "blocking") => ours::blocking_case(scenario),
        (_, c) if c.starts_with("rmcp") => rmcp_client::case(scenario, c),
        (_, c) if c.starts_with("raw") || c.starts_with("lines-codec") => raw::case(scenario, c),
        _ => None,
    };
    let result = result.ok_or_else(|| format!("no case {scenario} for client {client}"))?;
    let line = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    println!("{line}");
    Ok(())
}
