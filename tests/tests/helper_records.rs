//! A real helper's record on every adapter (G10, G12): the part of stderr that
//! was kept, the debug window, redaction before the record and the excerpt,
//! and durations as milliseconds.

use std::time::{Duration, Instant};

use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::HelperOptions;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::{DebugMode, RetainedPart};
use mcp_stdio_tests::async_std_adapter::AsyncStd;
use mcp_stdio_tests::blocking_adapter::Blocking;
use mcp_stdio_tests::helper_adapter::{HelperAdapter, HelperJob};
use mcp_stdio_tests::tokio_adapter::Tokio;

const TOKEN: &str = "ghp_Q1w2E3r4T5y6U7i8O9p0AsDfGhJkLzXc";
const KEY_LINE: &str = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2Vx0BODYOFAKEYTHATMUSTNOTLEAK";

/// A helper that prints a private key (whose BEGIN line the tail will drop),
/// an authorization header, and a last line, all to stderr, then exits 3.
fn noisy_helper() -> CommandSpec {
    let script = format!(
        "printf '%s\\n' '-----BEGIN RSA PRIVATE KEY-----' >&2; \
         i=0; while [ $i -lt 40 ]; do printf '%s\\n' '{KEY_LINE}' >&2; i=$((i+1)); done; \
         printf '%s\\n' '-----END RSA PRIVATE KEY-----' >&2; \
         printf 'retrying: Authorization: Bearer %s\\n' '{TOKEN}' >&2; \
         printf 'giving up\\n' >&2; exit 3"
    );
    let mut spec = CommandSpec::new("/bin/sh");
    spec.args(["-c", script.as_str()]);
    spec
}

fn records_on<A: HelperAdapter>() {
    let now = Stamp::new(Instant::now(), 1_700_000_000_000);
    let mut debug = DebugMode::default();
    let mark = debug
        .open(now, Duration::from_secs(60), 2)
        .expect("within limits");
    let mut options = HelperOptions::default();
    options
        .operation("deploy.upload")
        .target("test")
        .call_id("call-records")
        .session_id("records")
        // Its own budgets: the process-wide pool is shared with the other
        // adapters' runs of this test, which may run at the same time.
        .pool(None);
    options.stderr_mut().tail(512);
    options.debug(debug.active(now.instant));
    let started = Instant::now();
    let report = A::run_helper(HelperJob {
        command: noisy_helper(),
        options,
        cancel_after: None,
        approval: None,
        start_after: Duration::ZERO,
    });
    let took = started.elapsed();
    let outcome = report.outcome;
    let record = &outcome.record;
    eprintln!(
        "{}: helper finished in {took:?}; stderr seen {} kept {} ({:?}), redactions {}",
        A::NAME,
        record.stderr_bytes_seen(),
        record.stderr_bytes_retained(),
        record.stderr_retained_part(),
        record.stderr_redactions()
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        outcome.exit_status,
        Some(mcp_stdio_core::ExitStatus::Code(3))
    );
    // The debug window doubled the 512-byte tail, and the record says so.
    assert_eq!(record.debug(), Some(mark));
    assert_eq!(record.stderr_retained_part(), RetainedPart::Tail);
    assert_eq!(
        (record.stderr_head_bytes(), record.stderr_tail_bytes()),
        (0, 1024)
    );
    assert!(record.stderr_truncated());
    // The cut key block and the bearer token, each replaced once.
    assert_eq!(record.stderr_redactions(), 2);
    let json = serde_json::to_string(&outcome).expect("serializable");
    for secret in [TOKEN, &TOKEN[..10], KEY_LINE, &KEY_LINE[..20]] {
        assert!(
            !json.contains(secret),
            "{}: {secret} in the outcome",
            A::NAME
        );
        assert!(
            !outcome.stderr.excerpt.contains(secret),
            "{}: excerpt",
            A::NAME
        );
    }
    assert!(
        outcome
            .stderr
            .excerpt
            .ends_with("[REDACTED]\nretrying: Authorization: Bearer [REDACTED]\ngiving up\n"),
        "{}: {:?}",
        A::NAME,
        outcome.stderr.excerpt
    );
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(value["record"]["debug"]["multiplier"], 2);
    assert_eq!(value["record"]["stderr_retained_part"], "tail");
    let process = &value["process"];
    assert!(process["exited_at_ms"].is_f64(), "{process}");
    assert!(process["finished_at_ms"].is_f64(), "{process}");
    assert!(!json.contains("\"secs\""), "no serde Duration objects");
}

#[test]
fn g10_g12_helper_record_fields_tokio() {
    records_on::<Tokio>();
}

#[test]
fn g10_g12_helper_record_fields_async_std() {
    records_on::<AsyncStd>();
}

#[test]
fn g10_g12_helper_record_fields_blocking() {
    records_on::<Blocking>();
}
