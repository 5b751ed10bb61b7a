//! Our three adapters. The tokio and async-std cases are one async body
//! (a macro over the adapter crate and its runtime's `sleep`); the blocking
//! adapter gets the same steps written with plain calls.

use std::time::Instant;

use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Outcome;
use mcp_stdio_core::RequestFailure;
use mcp_stdio_core::{to_raw, RawResult, RawValue};
use mcp_stdio_core::{ClientOptions, RequestError};

use super::{
    bench_peer, big_params, cancel_setup, command_for, fixture, flood_params, huge_params,
    id_last_params, monotonic_ns, server_for, CaseResult, Stamps, Trial, CANCEL_TRIALS,
    CANCEL_WARMUP, FLOOD_BYTES, ID_LAST_LIMIT, ID_LAST_TRIALS, ID_LAST_WAIT, IN_FLIGHT_BYTES,
    LARGE_BYTES, LARGE_CALLS, LARGE_LIMIT, OVERSIZED_LIMIT, OVERSIZED_LINE, PINGS, PING_AFTER,
    PING_WARMUP, POLL, SETTLE, TEXT5_BYTES,
};
use crate::mem::Probe;

/// Client options: the given wire limit, everything else default (stderr:
/// the last 16 KiB kept).
fn options(max_frame: usize) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(max_frame);
    options
}

fn raw(v: &serde_json::Value) -> Box<RawValue> {
    to_raw(v).expect("params serialize")
}

/// A process's peak RSS (`VmHWM`), KiB, from `/proc` (Linux).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A process's CPU time so far (user and system), ms, from `/proc` (Linux).
fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // `/proc` counts in USER_HZ, 100 a second on Linux.
    Some(ticks as f64 * 10.0)
}

/// Checks a `big` result: one text block of `bytes` bytes. With `decode`,
/// parses it into a `serde_json::Value` first (what a host that wants the
/// text does), as rmcp and the SDKs do.
fn check_big(result: &RawResult, bytes: usize, decode: bool) {
    if decode {
        let value: serde_json::Value = serde_json::from_str(result.get()).expect("result is JSON");
        let text = value
            .pointer("/content/0/text")
            .and_then(serde_json::Value::as_str)
            .expect("a text block");
        assert_eq!(text.len(), bytes);
    } else {
        assert!(result.get().len() > bytes, "the whole result arrived");
    }
}

/// How an id-last request of ours ended: the wire-limit error is the
/// expected `error`; the request's own deadline ([`ID_LAST_WAIT`]) is a `timeout`.
fn id_last_trial(outcome: &Outcome, sent_ns: u64, done_ns: u64, end_ns: Option<u64>) -> Trial {
    let (kind, detail) = match outcome {
        Ok(result) => ("result", format!("{} bytes", result.get().len())),
        Err(e @ RequestError::Failed(_)) if e.is_timeout() => ("timeout", e.to_string()),
        Err(e @ RequestError::Failed(RequestFailure::SessionClosed)) => ("closed", e.to_string()),
        Err(e) => ("error", e.to_string()),
    };
    Trial::new(kind, sent_ns, done_ns, end_ns, detail)
}

macro_rules! async_cases {
    ($adapter:ident, $sleep:path) => {
        use $adapter::Client;

        pub(super) async fn large(server: CommandSpec, decode: bool) -> CaseResult {
            let client = Client::spawn(&server, options(LARGE_LIMIT)).expect("spawn the fixture");
            client.initialize().await.expect("initialize");
            let params = raw(&big_params(LARGE_BYTES));
            let mut out = CaseResult::default();
            for _ in 0..LARGE_CALLS {
                let probe = Probe::start();
                let result = client
                    .request_with_timeout("tools/call", Some(params.clone()), None)
                    .await
                    .expect("big");
                check_big(&result, LARGE_BYTES, decode);
                out.push(probe.stop());
                drop(result);
            }
            client.shutdown().await;
            out
        }

        /// `text5`: calls of a 5 MiB text result, behind a guard that
        /// forwards it whole or cuts it (`--max-result-text` in
        /// `MCP_STDIO_BENCH_GUARD_FLAGS`); also the spawned process's peak RSS.
        pub(super) async fn text5(server: CommandSpec) -> CaseResult {
            let client = Client::spawn(&server, options(LARGE_LIMIT)).expect("spawn the guard");
            client.initialize().await.expect("initialize");
            let params = raw(&big_params(TEXT5_BYTES));
            let mut out = CaseResult::default();
            let mut cut = 0;
            for _ in 0..LARGE_CALLS {
                let probe = Probe::start();
                let result = client
                    .request_with_timeout("tools/call", Some(params.clone()), None)
                    .await
                    .expect("big");
                out.push(probe.stop());
                if result.get().contains("io.mcp-stdio/truncated") {
                    cut += 1;
                } else {
                    check_big(&result, TEXT5_BYTES, false);
                }
            }
            out.value("results_cut", f64::from(cut));
            // The process the client spawned: the guard, when guarded.
            if let Some(kib) = peak_rss_kib(client.pid()) {
                out.value("spawned_peak_rss_kib", kib as f64);
            }
            if let Some(ms) = cpu_ms(client.pid()) {
                out.value("spawned_cpu_ms", ms);
            }
            client.shutdown().await;
            out
        }

        pub(super) async fn ping(server: CommandSpec) -> CaseResult {
            let client = Client::spawn(&server, options(LARGE_LIMIT)).expect("spawn the fixture");
            client.initialize().await.expect("initialize");
            let mut out = CaseResult::default();
            for i in 0..PING_WARMUP + PINGS {
                let start = Instant::now();
                client.request("ping", None).await.expect("ping");
                if i >= PING_WARMUP {
                    out.push_time(start.elapsed());
                }
            }
            client.shutdown().await;
            out
        }

        pub(super) async fn flood() -> CaseResult {
            let client = Client::spawn(&CommandSpec::new(fixture()), options(LARGE_LIMIT))
                .expect("spawn the fixture");
            client.initialize().await.expect("initialize");
            let params = raw(&flood_params(FLOOD_BYTES));
            let probe = Probe::start();
            client
                .request_with_timeout("tools/call", Some(params), None)
                .await
                .expect("stderr_flood");
            let mut out = CaseResult::default();
            out.push(probe.stop());
            let record = client.shutdown().await;
            out.value("stderr_seen", record.stderr.seen as f64);
            out.value("stderr_retained", record.stderr.retained as f64);
            out
        }

        /// `cancel`: cancel once 1 MiB of the response has arrived;
        /// `cancel-early`: right after sending (see [`cancel_setup`]).
        pub(super) async fn cancel(scenario: &str) -> CaseResult {
            let in_flight = scenario == "cancel";
            let (server, call) = cancel_setup(scenario);
            let client = Client::spawn(&CommandSpec::new(server), options(LARGE_LIMIT))
                .expect("spawn the server");
            client.initialize().await.expect("initialize");
            let params = raw(&call);
            for _ in 0..CANCEL_WARMUP {
                client
                    .request_with_timeout("tools/call", Some(params.clone()), None)
                    .await
                    .expect("big");
            }
            let stdout_bytes =
                || async { client.metrics().await.map_or(u64::MAX, |m| m.stdout_bytes) };
            let mut out = CaseResult::default();
            for _ in 0..CANCEL_TRIALS {
                let base = stdout_bytes().await;
                let pending = client
                    .start_request("tools/call", Some(params.clone()), None)
                    .await
                    .expect("start big");
                if in_flight {
                    while stdout_bytes().await < base + IN_FLIGHT_BYTES {
                        $sleep(POLL).await;
                    }
                }
                let start = Instant::now();
                pending.cancel("bench: cancel under load");
                client
                    .request("ping", None)
                    .await
                    .expect("ping after cancel");
                out.push_time(start.elapsed());
                let _ = pending.await;
                $sleep(SETTLE).await;
            }
            let record = client.shutdown().await;
            out.value("late_responses", record.metrics.late_responses as f64);
            out
        }

        pub(super) async fn oversized() -> CaseResult {
            let client = Client::spawn(&CommandSpec::new(bench_peer()), options(OVERSIZED_LIMIT))
                .expect("spawn bench-peer");
            client.initialize().await.expect("initialize");
            let params = raw(&huge_params(OVERSIZED_LINE));
            let probe = Probe::start();
            let huge = client
                .start_request("tools/call", Some(params), None)
                .await
                .expect("start huge");
            // Ours fails the huge request as soon as the limit is passed;
            // the ping then goes out at the same moment as rmcp's.
            let huge_result = huge.await;
            let huge_at = probe.elapsed();
            $sleep(PING_AFTER.saturating_sub(huge_at)).await;
            let ping = client
                .start_request("ping", None, None)
                .await
                .expect("start ping");
            let mut out = CaseResult::default();
            let ping_result = ping.await;
            out.push(probe.stop());
            out.value("error_after_ms", huge_at.as_secs_f64() * 1e3);
            out.note(match huge_result {
                Ok(_) => "huge request: succeeded (unexpected)".to_owned(),
                Err(e) => format!("huge request: {e}"),
            });
            out.value("recovered", f64::from(u8::from(ping_result.is_ok())));
            let record = client.shutdown().await;
            out.value(
                "discarded_bytes",
                record.metrics.oversized_bytes_discarded as f64,
            );
            out
        }

        /// Requests answered with a `line_bytes` response whose id comes
        /// last, over [`ID_LAST_LIMIT`]: each must fail with the wire-limit
        /// error once the frame's end is seen.
        pub(super) async fn id_last(line_bytes: usize) -> CaseResult {
            let stamps = Stamps::new();
            let client = Client::spawn(&stamps.peer_command(), options(ID_LAST_LIMIT))
                .expect("spawn bench-peer");
            client.initialize().await.expect("initialize");
            let params = raw(&id_last_params(line_bytes));
            let mut out = CaseResult::default();
            for n in 0..ID_LAST_TRIALS {
                let sent = monotonic_ns();
                let outcome = client
                    .request_with_timeout("tools/call", Some(params.clone()), Some(ID_LAST_WAIT))
                    .await;
                let done = monotonic_ns();
                let trial = id_last_trial(&outcome, sent, done, stamps.end_ns(n));
                let answered = trial.outcome == "error" || trial.outcome == "result";
                out.trials.push(trial);
                if !answered {
                    break;
                }
            }
            let record = client.shutdown().await;
            out.value(
                "oversized_ids_missing",
                record.metrics.oversized_ids_missing as f64,
            );
            out
        }
    };
}

mod with_tokio {
    use super::*;
    async_cases!(mcp_stdio_tokio, tokio::time::sleep);
}

mod with_async_std {
    use super::*;
    async_cases!(mcp_stdio_async_std, async_std::task::sleep);
}

/// The tokio adapter on a multi-threaded runtime (`#[tokio::main]`'s default);
/// `guarded`: the server runs behind `mcp-stdio guard` (large and ping only).
pub(super) fn tokio_case(scenario: &str, decode: bool, guarded: bool) -> Option<CaseResult> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = command_for(scenario, guarded);
    if guarded
        && !matches!(
            scenario,
            "large" | "large-fast" | "ping" | "ping-quiet" | "text5"
        )
    {
        return None;
    }
    Some(match scenario {
        "large" | "large-fast" => rt.block_on(with_tokio::large(server, decode)),
        "text5" if guarded && !decode => rt.block_on(with_tokio::text5(server)),
        "ping" | "ping-quiet" if !decode => rt.block_on(with_tokio::ping(server)),
        "flood" if !decode => rt.block_on(with_tokio::flood()),
        "cancel" | "cancel-early" if !decode => rt.block_on(with_tokio::cancel(scenario)),
        "oversized" if !decode => rt.block_on(with_tokio::oversized()),
        s if !decode && super::id_last_line(s).is_some() => {
            rt.block_on(with_tokio::id_last(super::id_last_line(s)?))
        }
        _ => return None,
    })
}

/// The async-std adapter on async-std's executor.
pub(super) fn async_std_case(scenario: &str) -> Option<CaseResult> {
    let server = command_for(scenario, false);
    Some(match scenario {
        "large" | "large-fast" => async_std::task::block_on(with_async_std::large(server, false)),
        "text5" => async_std::task::block_on(with_async_std::text5(server)),
        "ping" | "ping-quiet" => async_std::task::block_on(with_async_std::ping(server)),
        "flood" => async_std::task::block_on(with_async_std::flood()),
        "cancel" | "cancel-early" => async_std::task::block_on(with_async_std::cancel(scenario)),
        "oversized" => async_std::task::block_on(with_async_std::oversized()),
        s if super::id_last_line(s).is_some() => {
            async_std::task::block_on(with_async_std::id_last(super::id_last_line(s)?))
        }
        _ => return None,
    })
}

/// The blocking adapter: the same steps as [`async_cases`], with plain calls.
pub(super) fn blocking_case(scenario: &str) -> Option<CaseResult> {
    use mcp_stdio_blocking::Client;
    let spawn = |program, limit| {
        let client = Client::spawn(&CommandSpec::new(program), options(limit)).expect("spawn");
        client.initialize().expect("initialize");
        client
    };
    let mut out = CaseResult::default();
    match scenario {
        "large" | "large-fast" => {
            let client = spawn(server_for(scenario), LARGE_LIMIT);
            let params = raw(&big_params(LARGE_BYTES));
            for _ in 0..LARGE_CALLS {
                let probe = Probe::start();
                let result = client
                    .request_with_timeout("tools/call", Some(params.clone()), None)
                    .expect("big");
                check_big(&result, LARGE_BYTES, false);
                out.push(probe.stop());
                drop(result);
            }
            client.shutdown();
        }
        "ping" | "ping-quiet" => {
            let client = spawn(server_for(scenario), LARGE_LIMIT);
            for i in 0..PING_WARMUP + PINGS {
                let start = Instant::now();
                client.request("ping", None).expect("ping");
                if i >= PING_WARMUP {
                    out.push_time(start.elapsed());
                }
            }
            client.shutdown();
        }
        "flood" => {
            let client = spawn(fixture(), LARGE_LIMIT);
            let probe = Probe::start();
            client
                .request_with_timeout("tools/call", Some(raw(&flood_params(FLOOD_BYTES))), None)
                .expect("stderr_flood");
            out.push(probe.stop());
            let record = client.shutdown();
            out.value("stderr_seen", record.stderr.seen as f64);
            out.value("stderr_retained", record.stderr.retained as f64);
        }
        "cancel" | "cancel-early" => {
            let (server, call) = cancel_setup(scenario);
            let client = spawn(server, LARGE_LIMIT);
            let params = raw(&call);
            for _ in 0..CANCEL_WARMUP {
                client
                    .request_with_timeout("tools/call", Some(params.clone()), None)
                    .expect("big");
            }
            let stdout_bytes = || client.metrics().map_or(u64::MAX, |m| m.stdout_bytes);
            for _ in 0..CANCEL_TRIALS {
                let base = stdout_bytes();
                let pending = client
                    .start_request("tools/call", Some(params.clone()), None)
                    .expect("start big");
                if scenario == "cancel" {
                    while stdout_bytes() < base + IN_FLIGHT_BYTES {
                        std::thread::sleep(POLL);
                    }
                }
                let start = Instant::now();
                pending.cancel("bench: cancel under load");
                client.request("ping", None).expect("ping after cancel");
                out.push_time(start.elapsed());
                let _ = pending.wait();
                std::thread::sleep(SETTLE);
            }
            let record = client.shutdown();
            out.value("late_responses", record.metrics.late_responses as f64);
        }
        "oversized" => {
            let client = spawn(bench_peer(), OVERSIZED_LIMIT);
            let probe = Probe::start();
            let huge = client
                .start_request("tools/call", Some(raw(&huge_params(OVERSIZED_LINE))), None)
                .expect("start huge");
            let huge_result = huge.wait();
            let huge_at = probe.elapsed();
            std::thread::sleep(PING_AFTER.saturating_sub(huge_at));
            let ping = client
                .start_request("ping", None, None)
                .expect("start ping");
            let ping_result = ping.wait();
            out.push(probe.stop());
            out.value("error_after_ms", huge_at.as_secs_f64() * 1e3);
            out.note(match huge_result {
                Ok(_) => "huge request: succeeded (unexpected)".to_owned(),
                Err(e) => format!("huge request: {e}"),
            });
            out.value("recovered", f64::from(u8::from(ping_result.is_ok())));
            let record = client.shutdown();
            out.value(
                "discarded_bytes",
                record.metrics.oversized_bytes_discarded as f64,
            );
        }
        s if super::id_last_line(s).is_some() => {
            let line_bytes = super::id_last_line(s)?;
            let stamps = Stamps::new();
            let client = Client::spawn(&stamps.peer_command(), options(ID_LAST_LIMIT))
                .expect("spawn bench-peer");
            client.initialize().expect("initialize");
            let params = raw(&id_last_params(line_bytes));
            for n in 0..ID_LAST_TRIALS {
                let sent = monotonic_ns();
                let outcome = client.request_with_timeout(
                    "tools/call",
                    Some(params.clone()),
                    Some(ID_LAST_WAIT),
                );
                let done = monotonic_ns();
                let trial = id_last_trial(&outcome, sent, done, stamps.end_ns(n));
                let answered = trial.outcome == "error" || trial.outcome == "result";
                out.trials.push(trial);
                if !answered {
                    break;
                }
            }
            let record = client.shutdown();
            out.value(
                "oversized_ids_missing",
                record.metrics.oversized_ids_missing as f64,
            );
        }
        _ => return None,
    }
    Some(out)
}
