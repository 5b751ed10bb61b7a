//! The record fields of a helper run (G10, G12): which part of stderr was
//! kept, the debug window, redaction before anything reaches a record or an
//! excerpt, and durations as milliseconds. Driven through the public API only,
//! as an adapter drives it.

use std::time::{Duration, Instant};

use mcp_stdio_core::ChildStream;
use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::{DebugMode, RetainedPart, DEFAULT_TAIL};
use mcp_stdio_core::{
    HelperAction, HelperInput, HelperOptions, HelperOutcome, HelperOutput, HelperRun,
};

const T0_MS: u64 = 1_700_000_000_000;

struct Clock(Instant);

impl Clock {
    fn at(&self, ms: u64) -> Stamp {
        Stamp::new(self.0 + Duration::from_millis(ms), T0_MS + ms)
    }
}

/// The default options with this test's call identity.
fn options() -> HelperOptions {
    let mut options = HelperOptions::default();
    options
        .call_id("c_1")
        .session_id("s_1")
        .operation("deploy.upload")
        .target("deploy@example.org");
    options
}

/// Spawns the run, feeds `stderr` in the given chunks, lets it exit 0 (or be
/// cancelled first), and returns the outcome.
fn run_helper(
    config: HelperOptions,
    clock: &Clock,
    stderr: &[&[u8]],
    cancel: bool,
) -> HelperOutcome {
    let mut run = HelperRun::new(&config, None, None, clock.at(0));
    assert!(matches!(
        run.poll_output(),
        HelperOutput::Action(HelperAction::Spawn)
    ));
    run.handle_input(clock.at(1), HelperInput::Spawned);
    for chunk in stderr {
        let read = HelperInput::Read {
            stream: ChildStream::Stderr,
            result: Ok(chunk.len()),
            buf: chunk,
            look: &mut || Ok(None),
        };
        run.handle_input(clock.at(2), read);
    }
    if cancel {
        run.handle_input(clock.at(3), HelperInput::Cancel);
        while let HelperOutput::Action(_) = run.poll_output() {}
    }
    let exited = HelperInput::Exited(Ok(ExitStatus::Code(0)));
    run.handle_input(clock.at(2_009), exited);
    for stream in [ChildStream::Stdout, ChildStream::Stderr] {
        let end = HelperInput::Read {
            stream,
            result: Ok(0),
            buf: &[],
            look: &mut || Ok(None),
        };
        run.handle_input(clock.at(2_010), end);
    }
    let mut last = None;
    while let HelperOutput::Action(action) = run.poll_output() {
        last = Some(action);
    }
    match last {
        Some(HelperAction::Finished(outcome)) => *outcome,
        other => panic!("expected Finished, got {other:?}"),
    }
}

const TOKEN: &str = "sk-proj-Z9yX8wV7uT6sR5qP4oN3mL2k";
const AWS: &str = "AKIAZ7Q2W3E4R5T6Y7U8";
const KEY_LINE: &str = "MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQDEXAMPLEKEYDATA";

#[test]
fn g10_helper_secrets_never_reach_the_record_or_the_excerpt() {
    let clock = Clock(Instant::now());
    // Secrets split across reads, and a key block whose BEGIN the 1 KiB
    // tail drops: the retention boundary falls inside its body.
    let mut stream = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for _ in 0..40 {
        stream.push_str(KEY_LINE);
        stream.push('\n');
    }
    stream.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    stream.push_str(&format!("retry 3: Authorization: Bearer {TOKEN}\n"));
    stream.push_str(&format!("aws: using {AWS} for upload\n"));
    stream.push_str("upload failed: 403 Forbidden\n");
    let bytes = stream.as_bytes();
    let cut = stream.find(TOKEN).expect("token") + 5;
    let chunks: Vec<&[u8]> = vec![&bytes[..1000], &bytes[1000..cut], &bytes[cut..]];
    let mut config = options();
    config.stderr_mut().tail(1024);
    let outcome = run_helper(config, &clock, &chunks, false);

    let record = &outcome.record;
    assert_eq!(record.stderr_retained_part(), RetainedPart::Tail);
    assert_eq!(
        (record.stderr_head_bytes(), record.stderr_tail_bytes()),
        (0, 1024)
    );
    assert!(record.stderr_truncated());
    assert_eq!(
        record.stderr_redactions(),
        3,
        "cut key, bearer token, AWS key id"
    );
    assert_eq!(outcome.stderr.summary.redactions, 3);
    let json = serde_json::to_string(&outcome).expect("serializable");
    for secret in [TOKEN, &TOKEN[..12], AWS, &KEY_LINE[..24]] {
        assert!(!json.contains(secret), "{secret} in the outcome JSON");
        assert!(
            !outcome.stderr.excerpt.contains(secret),
            "{secret} in the excerpt"
        );
        assert!(
            !outcome.stderr.text.contains(secret),
            "{secret} in the text"
        );
    }
    assert!(outcome.stderr.text.starts_with(&format!(
        "[stderr truncated: kept last 1024 of {} bytes]\n[REDACTED]\n",
        bytes.len()
    )));
    assert!(outcome.stderr.excerpt.ends_with(
        "retry 3: Authorization: Bearer [REDACTED]\naws: using [REDACTED] for upload\nupload failed: 403 Forbidden\n"
    ));
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(value["record"]["stderr_retained_part"], "tail");
    assert_eq!(value["record"]["stderr_tail_bytes"], 1024);
    assert_eq!(value["record"]["stderr_redactions"], 3);
    assert_eq!(value["stderr"]["summary"]["redaction"], true);

    // Switched off in the config: the bytes as they came, and no count.
    let mut config = options();
    config.stderr_mut().tail(1024).redact(false);
    let outcome = run_helper(config, &clock, &chunks, false);
    assert!(outcome.stderr.text.contains(AWS));
    assert_eq!(outcome.record.stderr_redactions(), 0);
    assert!(!outcome.stderr.summary.redaction);
}

#[test]
fn g10_helper_record_notes_the_debug_window_and_its_budgets() {
    let clock = Clock(Instant::now());
    let flood = vec![b'x'; 200_000];
    let mut debug = DebugMode::default();
    let mark = debug
        .open(clock.at(0), Duration::from_secs(120), 4)
        .expect("within limits");

    let mut config = options();
    config.debug(debug.active(clock.at(0).instant));
    let mut run = HelperRun::new(&config, None, None, clock.at(0));
    // The record written before the spawn already carries the mark.
    assert_eq!(run.record().debug(), Some(mark));
    assert!(matches!(
        run.poll_output(),
        HelperOutput::Action(HelperAction::Spawn)
    ));
    drop(run);
    let outcome = run_helper(config, &clock, &[&flood], false);
    assert_eq!(outcome.record.debug(), Some(mark));
    assert_eq!(outcome.stderr.summary.tail_bytes, 4 * DEFAULT_TAIL as u64);
    assert_eq!(outcome.stderr.summary.debug, Some(mark));
    let json = serde_json::to_value(&outcome).expect("serializable");
    assert_eq!(json["record"]["debug"]["window"], 1);
    assert_eq!(json["record"]["debug"]["multiplier"], 4);
    assert_eq!(json["record"]["debug"]["closes_unix_ms"], T0_MS + 120_000);

    // After the window: normal budgets, `debug: null`.
    debug.handle_timeout(clock.at(120_000).instant);
    let mut config = options();
    config.debug(debug.active(clock.at(120_000).instant));
    let outcome = run_helper(config, &clock, &[&flood], false);
    assert_eq!(outcome.record.debug(), None);
    assert_eq!(outcome.stderr.summary.tail_bytes, DEFAULT_TAIL as u64);
    let json = serde_json::to_value(&outcome).expect("serializable");
    assert_eq!(json["record"]["debug"], serde_json::Value::Null);
}

#[test]
fn g12_helper_outcome_times_are_millisecond_numbers() {
    let clock = Clock(Instant::now());
    let outcome = run_helper(options(), &clock, &[b"bye\n"], true);
    let json = serde_json::to_value(&outcome).expect("serializable");
    let process = &json["process"];
    // Cancel at 3 ms, exit observed at 2009 ms: 2006 ms.
    assert_eq!(process["cancel_to_exit_ms"], 2006.0);
    assert_eq!(
        process["cancel_requested_at_ms"], 2.0,
        "since the spawn at 1 ms"
    );
    assert_eq!(process["exited_at_ms"], 2008.0);
    assert!(process["finished_at_ms"].is_f64());
    let text = json.to_string();
    assert!(
        !text.contains("\"secs\"") && !text.contains("\"nanos\""),
        "{text}"
    );
}
