//! Each row's decisions, from what it observed: the verdict, the value, the
//! hint and the measures, with no server running.

use std::time::Duration;

use mcp_stdio_core::{ClientMetrics, RawValue};
use serde_json::{json, Value};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A process outcome as a record gives it: `ended_by`, the exit status
/// (`{"code": N}` or `{"signal": N}`) and the times in ms (`*_at_ms`).
fn outcome(ended_by: &str, exit: Value, times: Value) -> ProcessOutcome {
    let mut v = json!({
        "exit_status": exit,
        "ended_by": ended_by,
        "stdout": "eof_after_shutdown",
        "stderr": "eof_after_shutdown",
        "finished_at_ms": 1000.0,
    });
    for (k, t) in times.as_object().expect("times is an object") {
        v[k] = t.clone();
    }
    serde_json::from_value(v).expect("a process outcome")
}

fn detail(row: &Row) -> &str {
    row.detail.as_deref().unwrap_or_default()
}

// ---- rows 1 and 2 ----

#[test]
fn row1_a_failed_handshake_fails_and_says_the_other_rows_are_skipped() {
    let row = handshake_failed("no answer within 10 s".to_owned());
    assert_eq!((row.id, row.status), ("initialize", Status::Fail));
    assert_eq!(row.value, "no answer within 10 s");
    assert!(detail(&row).contains("every other row that needs one is skipped"));
}

fn metrics(frames: u64) -> ClientMetrics {
    let mut m = ClientMetrics::default();
    m.frames = frames;
    m.stdout_bytes = 2048;
    m
}

/// G13, asked of the server: any non-protocol line on stdout fails
/// row 2, counted by kind; problems on the way are added to the hint.
#[test]
fn g13_row2_fails_on_non_protocol_lines_and_names_their_kinds() {
    let mut m = metrics(7);
    m.parse_errors.insert("json", 2);
    m.parse_errors.insert("batch", 1);
    let row = hygiene_row(&m, &[ms(1)], Some(3), &[], true);
    assert_eq!(row.status, Status::Fail);
    assert_eq!(
        row.value,
        "3 of 7 lines on stdout are not protocol messages (a batch array: 1, not JSON: 2)"
    );
    assert!(detail(&row).contains("send logs and banners to stderr"));
    assert_eq!(row.measured["non_protocol_lines"], 3);
    assert_eq!(row.measured["parse_errors"], json!({"batch": 1, "json": 2}));
    let also = hygiene_row(&m, &[], None, &["ping: no answer".to_owned()], true);
    assert!(
        detail(&also).ends_with("; also: ping: no answer"),
        "{also:?}"
    );
}

#[test]
fn row2_warns_on_responses_to_unsent_ids_then_on_problems() {
    let mut m = metrics(5);
    m.unknown_id_responses = 2;
    let row = hygiene_row(&m, &[], None, &["tools/list: x".to_owned()], true);
    assert_eq!(row.status, Status::Warn);
    assert_eq!(row.value, "2 responses to ids never sent, in 5 messages");
    let m = metrics(5);
    let problems = ["ping: a".to_owned(), "tools/list: b".to_owned()];
    let row = hygiene_row(&m, &[], None, &problems, true);
    assert_eq!(row.status, Status::Warn);
    assert_eq!(row.value, "0 non-protocol lines in 5 messages");
    assert_eq!(detail(&row), "ping: a; tools/list: b");
}

#[test]
fn row2_passes_a_clean_stdout_with_the_fastest_ping_and_skips_an_empty_one() {
    let row = hygiene_row(&metrics(6), &[ms(3), ms(1), ms(2)], Some(4), &[], true);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "0 non-protocol lines in 6 messages (2.0 KiB); ping 1.00 ms"
    );
    assert_eq!(row.measured["ping_ms"], 1.0);
    assert_eq!(row.measured["tools"], 4);
    let row = hygiene_row(&metrics(0), &[], None, &[], false);
    assert_eq!(row.status, Status::Skip);
    // Frames seen though the handshake failed are still judged.
    assert_eq!(
        hygiene_row(&metrics(2), &[], None, &[], false).status,
        Status::Pass
    );
}

// ---- row 3 ----

#[test]
fn row3_passes_when_the_probe_is_answered_after_the_bad_line() {
    let seen = MalformedSeen::Answered {
        took: ms(2),
        reply: Some(-32700),
        junk: vec![],
    };
    let row = malformed_row(seen, ms(5000));
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "ping answered in 2.00 ms after the malformed line; it answered the bad line with error -32700"
    );
    assert_eq!(row.measured["error_reply_code"], -32700);
    let seen = MalformedSeen::Answered {
        took: ms(2),
        reply: None,
        junk: vec!["json"],
    };
    let row = malformed_row(seen, ms(5000));
    assert!(row.value.ends_with("no error reply to the bad line"));
    assert_eq!(row.measured["non_protocol_lines"], json!(["json"]));
}

#[test]
fn row3_fails_a_server_that_stops_answering_or_exits() {
    let hung = malformed_row(MalformedSeen::NoAnswer { alive: true }, ms(5000));
    assert_eq!(hung.status, Status::Fail);
    assert_eq!(
        hung.value,
        "no ping answer within 5.00 s after the malformed line"
    );
    assert!(detail(&hung).contains("still running but stopped answering"));
    let gone = malformed_row(MalformedSeen::NoAnswer { alive: false }, ms(5000));
    assert!(detail(&gone).starts_with("the server exited"));
    let exited = MalformedSeen::Lost {
        exit: Some(ExitStatus::Code(1)),
        error: "the server closed its stdout".to_owned(),
    };
    let row = malformed_row(exited, ms(5000));
    assert_eq!(
        row.value,
        "the server exited (code 1) after the malformed line"
    );
    assert!(detail(&row).contains("-32700"));
    let closed = MalformedSeen::Lost {
        exit: None,
        error: "the server closed its stdout".to_owned(),
    };
    assert_eq!(
        malformed_row(closed, ms(5000)).value,
        "after the malformed line: the server closed its stdout"
    );
}

// ---- row 4 ----

fn large(outcome: LargeOutcome, m: &ClientMetrics) -> Row {
    large_row(LargeSeen {
        tool: "big",
        outcome,
        took: ms(40),
        timed_out: false,
        ping: Ok(ms(1)),
        metrics: m,
        max_frame: 1 << 20,
        timeout: ms(10_000),
    })
}

#[test]
fn row4_passes_a_result_under_the_limit_and_flags_is_error() {
    let m = ClientMetrics::default();
    let row = large(
        LargeOutcome::Result {
            bytes: 512 * 1024,
            is_error: false,
        },
        &m,
    );
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "512.0 KiB result in 40 ms, under the 1.0 MiB limit; then ping 1.00 ms"
    );
    assert_eq!(row.measured["result_bytes"], 512 * 1024);
    assert_eq!(row.measured["max_frame"], 1 << 20);
    let row = large(
        LargeOutcome::Result {
            bytes: 10,
            is_error: true,
        },
        &m,
    );
    assert!(row.value.contains("(isError: true)"), "{}", row.value);
}

/// G3: a refusal at our limit passes, with the
/// discarded size once it is known.
#[test]
fn g3_row4_passes_a_refusal_at_our_limit_with_its_size_when_known() {
    let mut m = ClientMetrics::default();
    let row = large(LargeOutcome::Refused, &m);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "a response refused at the 1.0 MiB wire limit after 40 ms (discarded unparsed); \
         then ping 1.00 ms"
    );
    m.oversized_bytes_discarded = 3 << 20;
    let row = large(LargeOutcome::Refused, &m);
    assert!(
        row.value
            .starts_with("3.0 MiB response refused at the 1.0 MiB wire limit"),
        "{}",
        row.value
    );
}

#[test]
fn row4_warns_on_a_tool_error_and_fails_a_call_that_failed() {
    let m = ClientMetrics::default();
    let row = large(
        LargeOutcome::ServerError {
            text: "server error -32602: unknown tool".to_owned(),
            error: ErrorObject::new(-32602, "unknown tool"),
        },
        &m,
    );
    assert_eq!(row.status, Status::Warn);
    assert_eq!(
        row.value,
        "the tool answered an error: server error -32602: unknown tool; then ping 1.00 ms"
    );
    assert!(detail(&row).contains("--large-args"));
    let row = large(LargeOutcome::Failed(SESSION_CLOSED.to_owned()), &m);
    assert_eq!(row.status, Status::Fail);
    assert!(row.value.starts_with("big: the session closed"));
    let row = large(LargeOutcome::NoAnswer, &m);
    assert!(row.value.starts_with("big: no answer within 10.00 s"));
    assert!(detail(&row).contains("must complete or fail cleanly"));
}

/// What a server that refuses its own result at its own wire limit answers
/// (G9): -32000 with `data: {limit, seen}`, as our `serve` and guard do.
fn refused_at(limit: u64) -> ErrorObject {
    ErrorObject {
        data: Some(
            RawValue::from_string(format!(r#"{{"limit":{limit},"seen":{}}}"#, limit + 1))
                .expect("JSON"),
        ),
        ..ErrorObject::new(
            WIRE_LIMIT_EXCEEDED,
            format!(
                "response exceeded the wire limit ({limit} bytes; {} bytes seen); raise --max-frame",
                limit + 1
            ),
        )
    }
}

/// Issue 34: when the server's own wire limit refused its result (G9 on
/// its side), the hint names that limit as the cause, not the arguments.
#[test]
fn g9_row4_names_the_servers_own_limit_as_the_cause_not_the_arguments() {
    let m = ClientMetrics::default();
    let error = refused_at(1 << 20);
    let text = format!("server error -32000: {}", error.message);
    let row = large(LargeOutcome::ServerError { text, error }, &m);
    assert_eq!(row.status, Status::Warn);
    assert!(
        row.value.starts_with(
            "the server's own 1.0 MiB wire limit refused the result: server error -32000: \
             response exceeded the wire limit (1048576 bytes"
        ),
        "{}",
        row.value
    );
    let hint = detail(&row);
    assert!(
        hint.starts_with("the tool ran, but the server's own 1.0 MiB wire limit"),
        "{hint}"
    );
    assert!(hint.contains("the arguments are not the cause"), "{hint}");
    assert!(
        hint.contains("this client's --max-frame (1.0 MiB) was never reached"),
        "{hint}"
    );
    assert!(
        hint.ends_with("or choose --large-args for a result under 1.0 MiB"),
        "{hint}"
    );
    assert!(!hint.contains("check --large-tool"), "{hint}");
    assert_eq!(row.measured["server_limit_bytes"], 1 << 20);
    assert_eq!(row.measured["server_error_code"], -32000);
}

#[test]
fn g9_the_servers_own_limit_is_read_from_its_error_and_a_tools_error_is_not_one() {
    assert_eq!(
        own_limit(&refused_at(4096)),
        Some(OwnLimit {
            limit: Some(4096),
            code: -32000
        })
    );
    // Named in words only: still the server's limit, its size unknown.
    let worded = ErrorObject::new(-32603, "Result exceeds the WIRE LIMIT");
    assert_eq!(
        own_limit(&worded),
        Some(OwnLimit {
            limit: None,
            code: -32603
        })
    );
    let row = large(
        LargeOutcome::ServerError {
            text: "x".to_owned(),
            error: worded,
        },
        &ClientMetrics::default(),
    );
    assert!(row
        .value
        .starts_with("the server's own wire limit refused the result"));
    assert!(detail(&row).ends_with("for a result"), "{row:?}");
    assert!(!row.measured.contains_key("server_limit_bytes"));
    // A tool's own errors, -32000 ones included, are not the limit.
    for other in [
        ErrorObject::new(-32000, "rate limit exceeded"),
        ErrorObject::new(-32602, "unknown tool"),
        ErrorObject {
            data: Some(RawValue::from_string(r#"{"limit":"none"}"#.to_owned()).expect("JSON")),
            ..ErrorObject::new(-32000, "bad")
        },
    ] {
        assert_eq!(own_limit(&other), None, "{other:?}");
    }
}

/// G3's blind spot: an answer over the limit whose id could not be found
/// is our limit's doing, not a hang of the server's.
#[test]
fn g3_row4_warns_when_an_over_limit_answer_had_no_usable_id() {
    let mut m = ClientMetrics::default();
    m.oversized_ids_missing = 1;
    m.oversized_bytes_discarded = 4 << 20;
    let row = large_row(LargeSeen {
        tool: "big_no_id",
        outcome: LargeOutcome::Failed("no answer within 2.00 s".to_owned()),
        took: ms(2000),
        timed_out: true,
        ping: Ok(ms(1)),
        metrics: &m,
        max_frame: 1 << 20,
        timeout: ms(2000),
    });
    assert_eq!(row.status, Status::Warn);
    assert!(row.value.starts_with(
        "the server sent 4.0 MiB over the 1.0 MiB wire limit (discarded unparsed) without a usable top-level id"
    ));
    assert!(detail(&row).starts_with("raise --max-frame"));
}

/// Whatever the large call did, the session must still answer.
#[test]
fn row4_fails_when_the_session_does_not_answer_after_the_call() {
    let m = ClientMetrics::default();
    let row = large_row(LargeSeen {
        tool: "big",
        outcome: LargeOutcome::Refused,
        took: ms(40),
        timed_out: false,
        ping: Err("the session is over".to_owned()),
        metrics: &m,
        max_frame: 1 << 20,
        timeout: ms(10_000),
    });
    assert_eq!(row.status, Status::Fail);
    assert!(row
        .value
        .ends_with("; then no ping answer (the session is over)"));
    assert_eq!(detail(&row), "the session must survive a large response");
    assert!(!row.measured.contains_key("ping_ms"));
}

// ---- row 5 ----

fn slow(in_pipe: Option<u64>, capacity: Option<u64>, size: u64) -> SlowSeen {
    SlowSeen {
        oversized: false,
        size,
        tool_error: None,
        ping: Ok(ms(1)),
        in_pipe,
        capacity,
        stalled: ms(1500),
        drained: ms(30),
        stall: ms(2000),
        stdout_bytes: size + 100,
        max_frame: 8 << 20,
    }
}

/// A server blocked by a full pipe passes once it resumes; one whose
/// response fit in the pipe exercised nothing.
#[test]
fn row5_passes_a_server_blocked_by_a_full_pipe_and_warns_when_nothing_blocked() {
    let row = slow_reader_row(slow(Some(65536), Some(65536), 2_000_000));
    assert_eq!(row.status, Status::Pass);
    assert!(
        row.value
            .starts_with("blocked in write() 1.50 s with 64.0 KiB in the pipe"),
        "{}",
        row.value
    );
    assert_eq!(row.measured["blocked_ms"], 1500.0);
    assert_eq!(row.measured["pipe_capacity"], 65536);
    let row = slow_reader_row(slow(Some(1000), Some(65536), 900));
    assert_eq!(row.status, Status::Warn);
    assert!(row.value.starts_with("the 900 B response fit in the pipe"));
    let row = slow_reader_row(slow(Some(1000), Some(65536), 2_000_000));
    assert_eq!(row.status, Status::Pass);
    assert!(row
        .value
        .contains("(not full) after 2.00 s: still producing"));
    // Where the capacity is unknown, anything held counts as full.
    let row = slow_reader_row(slow(Some(1000), None, 2_000_000));
    assert!(row.value.starts_with("blocked in write()"), "{}", row.value);
    let row = slow_reader_row(slow(None, None, 2_000_000));
    assert!(row.value.starts_with("stdout unread 2.00 s; resumed"));
}

#[test]
fn row5_warns_on_a_tool_error_and_fails_without_a_ping_or_a_response() {
    let mut seen = slow(Some(65536), Some(65536), 200);
    seen.tool_error = Some(ErrorObject::new(-32602, "bad arguments"));
    let row = slow_reader_row(seen);
    assert_eq!(row.status, Status::Warn);
    assert!(row
        .value
        .starts_with("the tool answered an error (-32602: bad arguments)"));
    let mut seen = slow(Some(65536), Some(65536), 3 << 20);
    seen.oversized = true;
    seen.ping = Err("no answer before the deadline".to_owned());
    let row = slow_reader_row(seen);
    assert_eq!(row.status, Status::Fail);
    assert_eq!(
        row.value,
        "3.0 MiB response (refused at the wire limit) arrived, then no ping answer: no answer before the deadline"
    );
    // The server's own limit refused: the hint says so.
    let mut seen = slow(Some(300), Some(65536), 200);
    seen.tool_error = Some(refused_at(1 << 20));
    let row = slow_reader_row(seen);
    assert_eq!(row.status, Status::Warn);
    assert!(
        row.value
            .starts_with("the server's own 1.0 MiB wire limit refused the result (-32000: "),
        "{}",
        row.value
    );
    assert!(row.value.ends_with("; ping 1.00 ms"), "{}", row.value);
    assert!(detail(&row).starts_with("nothing was exercised: the tool ran, but"));
    assert!(detail(&row).contains("--max-frame (8.0 MiB) was never reached"));
    assert_eq!(row.measured["server_limit_bytes"], 1 << 20);
    let row = slow_reader_lost(Some(ExitStatus::Signal(13)), "x", ms(2000));
    assert_eq!(row.status, Status::Fail);
    assert_eq!(
        row.value,
        "the server exited (signal 13) while its stdout was unread"
    );
    let row = slow_reader_lost(None, "the server closed its stdout", ms(2000));
    assert_eq!(
        row.value,
        "no response after reading resumed: the server closed its stdout"
    );
}

// ---- row 6 ----

fn cancel(ended_early: Option<(Duration, bool)>, ping: Duration, late: u64) -> Row {
    cancel_row(&CancelSeen {
        cancel_after: ms(500),
        ended_early,
        ping,
        late,
        cancels_sent: 1,
    })
}

/// G6 and G8: a cancel that reached the work, no late answer and a prompt
/// second request pass; each fault is a WARN that says what it was.
#[test]
fn g6_g8_row6_passes_a_real_cancel_and_warns_on_each_fault() {
    let row = cancel(None, ms(2), 0);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "cancel at 500 ms; ping 2.00 ms; late responses in 1.00 s: 0"
    );
    assert!(row.detail.is_none());
    let row = cancel(Some((ms(100), true)), ms(2), 0);
    assert_eq!(row.status, Status::Warn);
    assert!(detail(&row).starts_with("the slow tool ended in 100 ms (result), before the cancel"));
    let row = cancel(None, ms(2), 2);
    assert!(detail(&row).contains("(2 late responses)"), "{row:?}");
    let row = cancel(None, ms(2), 1);
    assert!(detail(&row).contains("(1 late response)"), "{row:?}");
    let row = cancel(Some((ms(100), false)), ms(900), 1);
    assert_eq!(row.status, Status::Warn);
    for problem in [
        "ended in 100 ms (error)",
        "(1 late response)",
        "the second request took 900 ms",
    ] {
        assert!(detail(&row).contains(problem), "{problem}: {row:?}");
    }
    let row = cancel_without_ping("no answer within 10.00 s");
    assert_eq!(row.status, Status::Fail);
    assert!(detail(&row).contains("(G8)"));
}

// ---- row 7 ----

/// A server's end with nothing on stderr.
fn quiet(process: &ProcessOutcome) -> ServerEnd<'_> {
    ServerEnd {
        process,
        stderr_tail: "",
        stderr: CaptureSummary::default(),
    }
}

#[test]
fn row7_passes_an_exit_after_eof_and_grades_what_it_took_more() {
    let grace = ms(2000);
    let p = outcome(
        "exited_after_stdin_close",
        json!({"code": 0}),
        json!({"stdin_closed_at_ms": 300.0, "exited_at_ms": 305.0, "shutdown_to_exit_ms": 5.0}),
    );
    let row = stdin_eof_row(quiet(&p), ms(250), grace);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(row.value, "exited (code 0) 5.00 ms after stdin EOF");
    assert_eq!(row.measured["ended_by"], "exited_after_stdin_close");
    assert_eq!(row.measured["eof_to_exit_ms"], 5.0);
    let p = outcome(
        "exited_after_term",
        json!({"signal": 15}),
        json!({"stdin_closed_at_ms": 300.0, "term_sent_at_ms": 2300.0, "exited_at_ms": 2301.0}),
    );
    let row = stdin_eof_row(quiet(&p), ms(250), grace);
    assert_eq!(row.status, Status::Warn);
    assert_eq!(
        row.value,
        "ignored stdin EOF for 2.00 s; exited (signal 15) 1.00 ms after SIGTERM"
    );
    let p = outcome(
        "exited_after_kill",
        json!({"signal": 9}),
        json!({"stdin_closed_at_ms": 300.0, "exited_at_ms": 4301.0}),
    );
    let row = stdin_eof_row(quiet(&p), ms(250), grace);
    assert_eq!(row.status, Status::Fail);
    assert!(row.value.contains("ended by SIGKILL (signal 9)"));
    let p = outcome("exit_not_observed", Value::Null, json!({}));
    assert_eq!(
        stdin_eof_row(quiet(&p), ms(250), grace).status,
        Status::Fail
    );
    let p = outcome(
        "crashed",
        json!({"signal": 11}),
        json!({"stdin_closed_at_ms": 300.0, "exited_at_ms": 301.0}),
    );
    assert!(stdin_eof_row(quiet(&p), ms(250), grace)
        .value
        .starts_with("crashed (signal 11)"));
}

/// Issue 34: an exit with a failure status on stdin EOF is a WARN that
/// shows what the server wrote to stderr about it (an rmcp server at
/// 2026-07-28 exited 1 with `Error: ConnectionClosed("initialize request")`
/// and the row passed without a word).
#[test]
fn row7_warns_on_a_failure_status_after_eof_and_shows_the_stderr() {
    let p = outcome(
        "exited_after_stdin_close",
        json!({"code": 1}),
        json!({"stdin_closed_at_ms": 300.0, "exited_at_ms": 300.5, "shutdown_to_exit_ms": 0.5}),
    );
    let tail = "starting\nError: ConnectionClosed(\"initialize request\")\n";
    let end = ServerEnd {
        process: &p,
        stderr_tail: tail,
        stderr: stderr(tail.len() as u64),
    };
    let row = stdin_eof_row(end, ms(250), ms(2000));
    assert_eq!(row.status, Status::Warn);
    assert_eq!(
        row.value,
        "exited (code 1) 0.50 ms after stdin EOF: a failure status"
    );
    assert_eq!(
        detail(&row),
        "stdin EOF is the normal end of a stdio session: exit with status 0 then; a failure \
         status tells the host something went wrong; its stderr:\n| starting\n\
         | Error: ConnectionClosed(\"initialize request\")"
    );
    assert_eq!(
        row.measured["stderr_excerpt"],
        "starting\nError: ConnectionClosed(\"initialize request\")"
    );
    assert_eq!(row.measured["exit_status"], "code 1");
    // Nothing on stderr: said too.
    let row = stdin_eof_row(quiet(&p), ms(250), ms(2000));
    assert_eq!(row.status, Status::Warn);
    assert!(
        detail(&row).ends_with("; it wrote nothing to stderr"),
        "{row:?}"
    );
    // A crash on EOF shows its stderr too.
    let p = outcome(
        "crashed",
        json!({"signal": 6}),
        json!({"stdin_closed_at_ms": 300.0, "exited_at_ms": 301.0}),
    );
    let tail = "panicked at src/main.rs:3:5\n";
    let end = ServerEnd {
        process: &p,
        stderr_tail: tail,
        stderr: stderr(tail.len() as u64),
    };
    let row = stdin_eof_row(end, ms(250), ms(2000));
    assert_eq!(row.status, Status::Fail);
    assert!(
        detail(&row).ends_with("its stderr:\n| panicked at src/main.rs:3:5"),
        "{row:?}"
    );
}

#[test]
fn row7_fails_a_server_that_ended_before_stdin_was_closed() {
    let p = outcome(
        "exited_after_stdin_close",
        json!({"code": 0}),
        json!({"stdin_closed_at_ms": 100.0, "exited_at_ms": 101.0}),
    );
    let row = stdin_eof_row(quiet(&p), ms(250), ms(2000));
    assert_eq!(row.status, Status::Fail);
    assert_eq!(
        row.value,
        "ended by itself (code 0) before stdin was closed"
    );
    let p = outcome("exited_by_itself", json!({"code": 3}), json!({}));
    let row = stdin_eof_row(quiet(&p), ms(250), ms(2000));
    assert_eq!(
        row.value,
        "exited by itself (code 3) before stdin was closed"
    );
}

// ---- row 8 ----

#[test]
fn row8_passes_an_exit_on_sigterm_and_fails_one_that_needed_sigkill() {
    let seen = SigtermSeen {
        exit: Some(ExitStatus::Signal(15)),
        exited_at: Some(ms(503)),
        term_offset: ms(500),
        needed_kill: false,
        grace: ms(2000),
    };
    let row = sigterm_row(&seen);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "exited (signal 15) 3.00 ms after SIGTERM, stdin still open"
    );
    assert_eq!(row.measured["term_to_exit_ms"], 3.0);
    let row = sigterm_row(&SigtermSeen {
        exit: Some(ExitStatus::Signal(9)),
        exited_at: Some(ms(2600)),
        needed_kill: true,
        ..seen
    });
    assert_eq!(row.status, Status::Fail);
    assert!(row.value.starts_with("still running 2.00 s after SIGTERM"));
    let row = sigterm_row(&SigtermSeen {
        exit: Some(ExitStatus::Code(0)),
        exited_at: Some(ms(400)),
        term_offset: ms(500),
        needed_kill: false,
        grace: ms(2000),
    });
    assert_eq!(row.status, Status::Fail);
    assert_eq!(row.value, "exited by itself (code 0) before the signal");
    let row = sigterm_too_late(None);
    assert_eq!(
        row.value,
        "exited by itself (no exit status observed) before the signal"
    );
}

// ---- rows 9 and 10 ----

fn note(label: &'static str, stderr_seen: u64, leftovers: Option<Vec<Leftover>>) -> SessionNote {
    SessionNote {
        label,
        pid: 100,
        stderr_seen,
        stderr_note: None,
        leftovers,
    }
}

/// More stderr than the threshold warns, naming the noisiest session and
/// what a host keeps.
#[test]
fn row9_warns_above_the_threshold_and_names_the_noisiest_session() {
    let mut noisy = note("cancel", 3 << 20, Some(vec![]));
    noisy.stderr_note = Some("[stderr truncated: kept last 65536 of 3145728 bytes]".to_owned());
    let notes = [note("handshake", 100, Some(vec![])), noisy];
    let row = stderr_volume_row(&notes, 1 << 20);
    assert_eq!(row.status, Status::Warn);
    assert_eq!(
        row.value,
        "3.0 MiB over 2 sessions (most: 3.0 MiB in cancel)"
    );
    assert!(detail(&row).contains("a host keeps only a bounded tail: [stderr truncated"));
    let row = stderr_volume_row(&notes[..1], 1 << 20);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "100 B over 1 sessions (most: 100 B in handshake)"
    );
    let quiet = [note("handshake", 0, Some(vec![]))];
    assert_eq!(stderr_volume_row(&quiet, 1).value, "0 B over 1 sessions");
}

/// A child left in a server's group after its session ended fails row 10.
#[test]
fn row10_fails_on_leftovers_and_skips_where_groups_cannot_be_scanned() {
    let clean = [
        note("handshake", 0, Some(vec![])),
        note("cancel", 0, Some(vec![])),
    ];
    let row = leftovers_row(&clean);
    assert_eq!(row.status, Status::Pass);
    assert_eq!(
        row.value,
        "none in 2 process groups after each session ended"
    );
    let worker = Leftover {
        pid: 4242,
        name: "worker".to_owned(),
    };
    let left = [
        note("handshake", 0, Some(vec![worker])),
        note("cancel", 0, Some(vec![])),
    ];
    let row = leftovers_row(&left);
    assert_eq!(row.status, Status::Fail);
    assert_eq!(
        row.value,
        "1 left running: pid 4242 (worker) after handshake; killed"
    );
    assert_eq!(row.measured["leftovers"][0]["pgid"], 100);
    let unknown = [note("handshake", 0, None)];
    assert_eq!(leftovers_row(&unknown).status, Status::Skip);
}

// ---- what rows add ----

#[test]
fn a_server_that_exited_under_a_failed_row_is_named_in_it() {
    let gone = outcome("exited_by_itself", json!({"code": 2}), json!({}));
    let row = with_exit(Row::new(CANCEL, Status::Fail, "no answer"), Some(&gone));
    assert_eq!(row.value, "no answer (server exited: code 2)");
    assert_eq!(row.measured["exit_status"], "code 2");
    let row = with_exit(Row::new(CANCEL, Status::Pass, "fine"), Some(&gone));
    assert_eq!(row.value, "fine");
    let killed = outcome("exited_after_term", json!({"signal": 15}), json!({}));
    let row = with_exit(Row::new(CANCEL, Status::Fail, "x"), Some(&killed));
    assert!(row.measured.is_empty());
}

fn stderr(seen: u64) -> CaptureSummary {
    let mut s = CaptureSummary::default();
    s.seen = seen;
    s.retained = seen;
    s
}

#[test]
fn row1_says_how_the_server_went_away_and_shows_its_stderr() {
    let p = outcome(
        "exited_by_itself",
        json!({"code": 1}),
        json!({"exited_at_ms": 20.0}),
    );
    let tail = "Traceback (most recent call last):\nImportError: no module named x\n";
    let end = ServerEnd {
        process: &p,
        stderr_tail: tail,
        stderr: stderr(tail.len() as u64),
    };
    let row = with_server_end(handshake_failed(SESSION_CLOSED.to_owned()), Some(end));
    assert_eq!(
        row.value,
        "the server exited with code 1 before answering initialize"
    );
    assert!(
        detail(&row).ends_with(
            "its stderr:\n| Traceback (most recent call last):\n| ImportError: no module named x"
        ),
        "{}",
        detail(&row)
    );
    assert_eq!(row.measured["exit_status"], "code 1");
    let silent = ServerEnd {
        process: &p,
        stderr_tail: "",
        stderr: stderr(0),
    };
    let row = with_server_end(handshake_failed(SESSION_CLOSED.to_owned()), Some(silent));
    assert!(
        detail(&row).ends_with("it wrote nothing to stderr: run the command by itself to see why")
    );
    // Another failure keeps its words; the stderr still comes along.
    let row = with_server_end(
        handshake_failed("no answer within 1 s".to_owned()),
        Some(end),
    );
    assert_eq!(row.value, "no answer within 1 s");
    assert!(detail(&row).contains("ImportError"));
}

// ---- words ----

#[test]
fn results_are_read_for_their_tools_and_their_error_flag() {
    let raw = |s: &str| RawResult::new(RawValue::from_string(s.to_owned()).expect("JSON"));
    assert_eq!(count_tools(&raw(r#"{"tools":[{"name":"a"},{}]}"#)), Some(2));
    assert_eq!(count_tools(&raw(r#"{"tools":{}}"#)), None);
    assert!(is_error_result(&raw(r#"{"content":[],"isError":true}"#)));
    assert!(!is_error_result(&raw(r#"{"content":[]}"#)));
    assert!(!is_error_result(&raw("[]")));
    assert_eq!(kind_label("batch"), "a batch array");
    assert_eq!(kind_label("something_new"), "something_new");
}
