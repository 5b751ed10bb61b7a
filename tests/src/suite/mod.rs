//! The conformance suite: every release gate of the design, written once,
//! generic over the adapter ([`crate::adapter::Adapter`]), run through real
//! process spawns. `tests/tests/conformance_<adapter>.rs` instantiates it
//! with [`conformance_suite!`](crate::conformance_suite).
//!
//! Bounds are generous (seconds) so a loaded CI machine never flakes; each
//! test prints what it measured, adapter name first. Every case tags the
//! processes it starts ([`LeakCheck`]) and ends by checking that none is
//! left. Calls that must never hang (shutdown, waiting for a result) run
//! under [`bounded`], so a hang is a failure, not a stuck test run.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::StreamEnd;
use mcp_stdio_core::{to_raw, Id, RawResult, RawValue};
use mcp_stdio_core::{ClientMetrics, RequestFailure};
use mcp_stdio_core::{ClientOptions, RequestError, SessionRecord};
use serde_json::{json, Value};

use crate::adapter::{Adapter, SuiteClient, SuitePending};
use crate::{fixture_helper_path, fixture_server_path};

mod cancel;
mod cases;
mod conveniences;
mod drift;
mod incoming;
mod leak_check;
mod payloads;
mod sandbox;
mod shutdown;
mod stalled_peer;
mod stderr;
mod unread_stdout_host;

pub use cancel::*;
pub use cases::*;
pub use conveniences::*;
pub use drift::*;
pub use incoming::*;
pub use leak_check::{cmdline, LeakCheck, TAG_VAR};
pub use payloads::*;
pub use sandbox::*;
pub use shutdown::*;
pub use stalled_peer::*;
pub use stderr::*;
pub use unread_stdout_host::UnreadStdoutHost;

/// The bound for anything that should take milliseconds but may take seconds
/// on a loaded 2-core CI machine.
pub const PROMPT: Duration = Duration::from_secs(5);
/// The bound for things that must merely end (never hang).
pub const LONG: Duration = Duration::from_secs(30);
/// Poll interval of [`crate::wait_until`] in the suite.
pub const POLL: Duration = Duration::from_millis(5);

/// The fixture server with these flags.
pub fn fixture_server(flags: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_server_path());
    spec.args(flags);
    spec
}

/// The fixture helper with these arguments.
pub fn fixture_helper(args: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_helper_path());
    spec.args(args);
    spec
}

/// Options with a wire limit, short shutdown graces (so tests are quick) and
/// a 20 s default request timeout (so a stuck `initialize` fails in
/// reasonable time instead of the default minute).
pub fn options(max_frame: usize) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(max_frame);
    options
        .session_mut()
        .default_timeout(Some(Duration::from_secs(20)));
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(500))
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    options
}

/// [`options`] for cases that read the server's log from the record after
/// shutdown: a 5 s stdin grace lets the fixture finish its in-flight work
/// (it does so at stdin EOF) and write its last lines before any SIGTERM.
/// The fixture exits as soon as that work is done, so this costs nothing
/// when things go well; on a loaded machine it keeps the log complete.
pub fn options_keeping_the_log(max_frame: usize) -> ClientOptions {
    let mut options = options(max_frame);
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_secs(5));
    options
}

/// Spawns `spec` (tagged for `leaks`, its group watched) without a handshake.
pub fn spawn<A: Adapter>(
    leaks: &mut LeakCheck,
    mut spec: CommandSpec,
    options: ClientOptions,
) -> Box<A::Client> {
    leaks.tag(&mut spec);
    let client = A::spawn(&spec, options)
        .unwrap_or_else(|e| panic!("{}: spawning {}: {e}", A::NAME, spec.display()));
    leaks.watch_group(client.pid());
    Box::new(client)
}

/// Spawns the fixture server (tagged for `leaks`) and runs the handshake.
pub fn start<A: Adapter>(
    leaks: &mut LeakCheck,
    flags: &[&str],
    options: ClientOptions,
) -> Box<A::Client> {
    let client = spawn::<A>(leaks, fixture_server(flags), options);
    let init = client
        .initialize()
        .unwrap_or_else(|e| panic!("{}: initialize: {e}", A::NAME));
    assert_eq!(
        init.server_info.as_ref().expect("serverInfo").name,
        "fixture-server"
    );
    // The fixture speaks the handshake only: the probe was refused, -32601.
    assert_eq!(init.via, mcp_stdio_core::NegotiatedVia::Initialize);
    assert!(
        matches!(&init.fallback, Some(mcp_stdio_core::FallbackReason::ProbeRejected(e)) if e.code == mcp_stdio_core::METHOD_NOT_FOUND),
        "{:?}",
        init.fallback
    );
    client
}

/// Runs `f` on a watchdog thread and fails the test if it has not returned
/// within `limit` (a hang becomes a failure). Returns its value and duration.
pub fn bounded<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => (v, t.elapsed()),
        Err(RecvTimeoutError::Timeout) => panic!("{what} did not return within {limit:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what} panicked (see above)"),
    }
}

/// Graceful shutdown, bounded by `limit`; returns the record and its duration.
pub fn shutdown_within<A: Adapter>(
    client: Box<A::Client>,
    limit: Duration,
) -> (SessionRecord, Duration) {
    bounded(limit, &format!("{}: shutdown", A::NAME), move || {
        client.shutdown()
    })
}

/// Waits for a pending request's outcome, bounded by `limit`.
pub fn wait_within(
    pending: Box<dyn SuitePending>,
    limit: Duration,
) -> (Result<RawResult, RequestError>, Duration) {
    bounded(limit, "waiting for a request", move || pending.wait())
}

/// `tools/call` params for `name` with `arguments`.
pub fn tool(name: &str, arguments: Value) -> Option<Box<RawValue>> {
    Some(to_raw(&json!({ "name": name, "arguments": arguments })).expect("JSON serializes"))
}

/// A `ping` that must complete within `within`; returns its latency.
pub fn ping_within<C: SuiteClient + ?Sized>(client: &C, within: Duration) -> Duration {
    let t = Instant::now();
    let r = client.request("ping", None, Some(within));
    let took = t.elapsed();
    assert!(r.is_ok(), "ping failed after {took:?}: {r:?}");
    took
}

/// The live session's counters.
pub fn metrics<C: SuiteClient + ?Sized>(client: &C) -> ClientMetrics {
    client.metrics().expect("the session is live")
}

/// Total parse errors of any kind.
pub fn parse_errors(m: &ClientMetrics) -> u64 {
    m.parse_errors.values().sum()
}

/// The text of the first content block of a tool result.
pub fn first_text(result: &RawResult) -> String {
    let v: Value = serde_json::from_str(result.get()).expect("a result is JSON");
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "no text content in {}",
                &result.get()[..result.get().len().min(200)]
            )
        })
        .to_owned()
}

/// Asserts a request failed with `ResponseTooLarge`.
pub fn assert_too_large(r: &Result<RawResult, RequestError>, limit: usize) {
    match r {
        Err(RequestError::Failed(RequestFailure::ResponseTooLarge { limit: l, .. })) => {
            assert_eq!(*l, limit);
        }
        other => panic!(
            "expected ResponseTooLarge, got {:?}",
            other.as_ref().map(|v| v.get().len())
        ),
    }
}

/// Asserts a request ended `Cancelled { cancel_sent: true }`.
pub fn assert_cancelled_and_sent(r: &Result<RawResult, RequestError>) {
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::Cancelled {
                cancel_sent: true
            }))
        ),
        "expected Cancelled {{ cancel_sent: true }}, got {r:?}"
    );
}

/// Asserts both output streams were read to EOF (not abandoned).
pub fn assert_streams_ended(record: &SessionRecord) {
    for (name, end) in [
        ("stdout", record.process.stdout),
        ("stderr", record.process.stderr),
    ] {
        assert!(
            matches!(
                end,
                Some(StreamEnd::Eof | StreamEnd::EofAfterShutdown | StreamEnd::EofAfterCancel)
            ),
            "{name} ended {end:?}"
        );
    }
}

/// The fixture's stderr log lines about request `id` (`fixture: request <id> …`).
pub fn log_lines_for(record: &SessionRecord, id: &Id) -> Vec<String> {
    let prefix = format!("fixture: request {id} ");
    record
        .stderr_tail
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// The number right after `prefix` in the first line of `text` containing it.
pub fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let at = text.find(prefix)? + prefix.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Instantiates every conformance test for one adapter type.
#[macro_export]
macro_rules! conformance_suite {
    ($adapter:ty) => {
        $crate::conformance_suite!(@each $adapter;
            // G1 (and the baseline that proves the G1 test can fail)
            g1_baseline_a_host_that_does_not_read_stdout_leaves_the_server_stuck_in_write,
            g1_handshake_ping_echo_and_shutdown_record,
            g1_8_mib_response_completes_while_the_application_is_busy,
            g1_g3_8_mib_response_over_a_1_mib_limit_fails_while_the_application_is_busy,
            // G1/G6/G9/G11 with a stalled peer (it stops reading our writes)
            g1_client_keeps_reading_when_the_server_stops_reading_after_a_small_message,
            g1_client_keeps_reading_when_the_server_stops_reading_after_a_large_message,
            // G2/G3/G4: payload shapes, limits and garbage on stdout
            g2_g3_response_just_under_the_limit_passes_just_over_fails_at_once,
            g3_id_last_oversized_response_fails_at_its_end_not_at_the_timeout,
            g2_huge_single_field_with_escapes_round_trips_exactly,
            g2_twenty_thousand_small_content_blocks_arrive_whole,
            g2_g4_long_strings_without_separators_round_trip_exactly,
            g3_malformed_line_after_init_is_counted_and_ping_still_works,
            g3_stdout_log_lines_are_counted_and_every_request_completes,
            g3_an_invalid_utf8_response_gets_its_outcome_at_once,
            g2_a_5_mib_result_passes_at_the_default_limit,
            // G5: server→client messages and the overload policy
            g5_server_notifications_arrive_in_order_before_the_result,
            g5_server_request_is_answered_through_the_responder,
            g5_full_inbox_drops_notifications_and_the_request_still_completes,
            // G6/G8: cancel in every state, timeout, late response
            g8_cancel_during_slow_work_then_ping_completes_promptly,
            g8_cancel_racing_the_send_then_ping_completes_promptly,
            g8_cancel_sent_at_once_stops_the_work_within_its_first_chunk_then_ping_completes,
            g8_cancel_during_slow_io_then_ping_completes_promptly,
            g8_cancel_during_a_subprocess_kills_it_then_ping_completes_promptly,
            g8_cancel_after_the_response_began_then_ping_completes,
            g6_g8_timeout_sends_a_cancel_that_reaches_the_work,
            g6_request_deadline_is_the_default_none_or_after_a_duration,
            g6_late_response_after_cancel_is_ignored_and_counted,
            // G6: a deadline that moves later or goes away (each loop's timer)
            g6_a_deadline_that_moves_later_fires_at_its_own_time,
            g6_a_removed_deadline_leaves_no_timer_to_fail_a_request_without_one,
            g6_an_explicit_deadline_later_than_the_default_is_kept,
            // G10: stderr flood
            g10_stderr_flood_is_budgeted_while_requests_keep_completing,
            // G11: shutdown paths, grandchildren, dropped clients, no leftovers
            g11_server_that_exits_on_stdin_close_is_not_signalled,
            g11_server_ignoring_stdin_eof_is_ended_by_sigterm,
            g11_server_ignoring_sigterm_is_ended_by_sigkill,
            g11_exit_code_is_the_observed_one,
            g11_grandchild_in_the_group_dies_with_the_group_kill,
            g11_escaped_grandchild_holding_stderr_is_abandoned_after_the_deadline,
            g11_leader_stays_a_zombie_while_its_group_may_be_signalled,
            g11_dropping_the_client_mid_request_kills_the_process_group,
            g11_twenty_clients_shut_down_or_dropped_leave_no_process,
            // G11/G12: an exit and the last reads in one turn, 20 sessions each
            g12_a_server_exiting_by_itself_after_a_burst_is_recorded_exited_by_itself,
            g12_a_server_exiting_by_itself_with_requests_pending_fails_them_with_session_closed,
            g12_a_last_response_written_just_before_the_exit_is_delivered,
            // The conveniences (issue 25)
            conveniences_tools_are_listed_and_called_without_method_names,
            conveniences_a_calls_progress_arrives_in_order_on_its_own_stream,
            conveniences_the_live_stderr_tail_and_counters_of_a_running_session,
            conveniences_handles_cloned_into_threads_share_one_session,
            // A server in a sandbox (issue 24; beside the guarantees)
            sandbox_a_server_reads_only_what_it_was_given,
        );
    };
    (@each $adapter:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                // One case at a time, each failing if it leaves a descriptor open.
                $crate::descriptors::run_checked(
                    concat!(stringify!($name), " (", stringify!($adapter), ")"),
                    $crate::suite::g1_handshake_ping_echo_and_shutdown_record::<$adapter>,
                    $crate::suite::$name::<$adapter>,
                );
            }
        )*
    };
}
