//! `mcp-stdio check` end to end, with real processes: the built-in
//! misbehaving server, the suite's fixture server (healthy, and ignoring
//! stdin EOF), a server that never answers, `--help` and usage errors.

use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/built.rs"]
mod built;
use built::fixture_server;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-stdio");

/// Every row id, in order.
const ROW_IDS: [&str; 10] = [
    "initialize",
    "stdout_hygiene",
    "malformed_line",
    "large_response",
    "slow_reader",
    "cancel",
    "stdin_eof",
    "sigterm",
    "stderr_volume",
    "leftover_processes",
];

fn check(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(BIN)
        .arg("check")
        .args(args)
        .output()
        .expect("mcp-stdio runs");
    (out, start.elapsed())
}

/// Runs `check --json` and returns the document and the exit code.
fn check_json(args: &[&str]) -> (Value, i32) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (out, _) = check(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, out.status.code().expect("exited, not signalled"))
}

/// Rows by id, after checking each has a status and a value.
/// A row's name in the run: its id, and `@revision` at 2026-07-28.
fn key(r: &Value) -> String {
    let id = r["id"].as_str().expect("every row has an id");
    match r["revision"].as_str() {
        Some(v) if v >= "2026-07-28" => format!("{id}@{v}"),
        _ => id.to_owned(),
    }
}

/// The rows by [`key`], checked: rows 1–8 once per revision run (in the
/// order the revisions ran), then the two rows over every session.
fn rows(doc: &Value) -> HashMap<String, Value> {
    let rows = doc["rows"].as_array().expect("rows is an array");
    let mut revisions: Vec<&str> = Vec::new();
    for r in rows {
        if let Some(v) = r["revision"].as_str() {
            if !revisions.contains(&v) {
                revisions.push(v);
            }
        }
    }
    assert!(!revisions.is_empty(), "at least one revision ran: {doc}");
    let mut want: Vec<String> = Vec::new();
    for v in &revisions {
        for id in &ROW_IDS[..8] {
            want.push(key(&json!({"id": id, "revision": v})));
        }
    }
    want.extend(ROW_IDS[8..].iter().map(|id| (*id).to_owned()));
    let keys: Vec<String> = rows.iter().map(key).collect();
    assert_eq!(keys, want, "every row, in order");
    for r in rows {
        assert!(
            ["PASS", "WARN", "FAIL", "SKIP"].contains(&r["status"].as_str().unwrap_or("")),
            "{r}"
        );
        assert!(!r["value"].as_str().unwrap_or("").is_empty(), "{r}");
        assert!(r["measured"].is_object(), "{r}");
    }
    rows.iter().map(|r| (key(r), r.clone())).collect()
}

fn status(rows: &HashMap<String, Value>, id: &str) -> String {
    rows[id]["status"]
        .as_str()
        .expect("every row has a status")
        .to_owned()
}

fn fixture_flags() -> Vec<String> {
    vec![
        "--large-tool".into(),
        "big".into(),
        "--large-args".into(),
        r#"{"bytes":2000000}"#.into(),
        "--slow-tool".into(),
        "slow".into(),
        "--slow-args".into(),
        r#"{"chunks":100,"delay_ms":50,"honour_cancel":true}"#.into(),
        "--".into(),
        fixture_server().to_string_lossy().into_owned(),
    ]
}

#[test]
fn builtin_server_fails_and_warns_where_it_misbehaves() {
    let (doc, code) = check_json(&["--quiet"]);
    assert_eq!(code, 1, "a FAIL row means exit 1: {doc:#}");
    assert_eq!(doc["builtin"], true);
    assert_eq!(doc["ok"], false);
    let rows = rows(&doc);
    let expected = [
        ("initialize", "PASS"),
        ("stdout_hygiene", "FAIL"),
        ("malformed_line", "FAIL"),
        ("large_response", "PASS"),
        ("slow_reader", "PASS"),
        ("cancel", "WARN"),
        ("stdin_eof", "WARN"),
        ("sigterm", "PASS"),
        ("stderr_volume", "WARN"),
    ];
    for (id, want) in expected {
        assert_eq!(status(&rows, id), want, "{id}: {:#}", rows[id]);
    }
    let leftovers = if cfg!(target_os = "linux") {
        "FAIL"
    } else {
        "SKIP"
    };
    assert_eq!(
        status(&rows, "leftover_processes"),
        leftovers,
        "{:#}",
        rows["leftover_processes"]
    );
    // The reasons, not just the verdicts.
    assert_eq!(rows["stdout_hygiene"]["measured"]["non_protocol_lines"], 1);
    assert_eq!(rows["malformed_line"]["measured"]["exit_status"], "code 1");
    assert_eq!(rows["cancel"]["measured"]["late_responses"], 1);
    assert!(rows["stdin_eof"]["value"]
        .as_str()
        .unwrap()
        .contains("SIGTERM"));
    assert_eq!(
        rows["stdin_eof"]["measured"]["ended_by"],
        "exited_after_term"
    );
    assert_eq!(rows["large_response"]["measured"]["oversized_frames"], 1);
    assert!(
        rows["slow_reader"]["measured"]["blocked_ms"]
            .as_f64()
            .unwrap()
            > 1000.0
    );
    assert!(
        rows["stderr_volume"]["measured"]["stderr_bytes"]
            .as_u64()
            .unwrap()
            > 1024 * 1024
    );
}

#[test]
fn builtin_server_table_goes_to_stdout_and_progress_to_stderr() {
    let (out, _) = check(&[]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("RESULT  VALUE"), "{stdout}");
    for title in [
        "initialize handshake",
        "stdout hygiene",
        "survives a malformed line",
        "large response",
        "slow reader",
        "cancel + second request",
        "exits on stdin EOF",
        "exits on SIGTERM",
        "stderr volume",
        "leftover processes",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.contains(title))
            .unwrap_or_else(|| panic!("no row {title:?} in\n{stdout}"));
        assert!(
            ["PASS", "WARN", "FAIL", "SKIP"]
                .iter()
                .any(|s| line.contains(s)),
            "{line}"
        );
    }
    assert!(stdout.contains("-> FAILED"), "{stdout}");
    assert!(stderr.contains("[1/10] initialize handshake"), "{stderr}");
    assert!(!stdout.contains("[1/10]"), "progress belongs on stderr");
}

#[test]
fn fixture_server_passes_every_row() {
    let flags = fixture_flags();
    let args: Vec<&str> = std::iter::once("--quiet")
        .chain(flags.iter().map(String::as_str))
        .collect();
    let (doc, code) = check_json(&args);
    let rows = rows(&doc);
    for id in ROW_IDS {
        assert_eq!(status(&rows, id), "PASS", "{id}: {:#}", rows[id]);
    }
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["ok"], true);
    assert_eq!(
        rows["stdin_eof"]["measured"]["ended_by"],
        "exited_after_stdin_close"
    );
    assert_eq!(rows["large_response"]["measured"]["oversized_frames"], 0);
    assert!(
        rows["large_response"]["measured"]["result_bytes"]
            .as_u64()
            .unwrap()
            > 2_000_000
    );
    assert_eq!(rows["cancel"]["measured"]["late_responses"], 0);
    assert_eq!(
        rows["malformed_line"]["measured"]["error_reply_code"],
        -32700
    );
}

#[test]
fn fixture_ignoring_stdin_eof_warns_that_sigterm_was_needed() {
    let mut flags = fixture_flags();
    flags.push("--ignore-stdin-eof".into());
    let args: Vec<&str> = std::iter::once("--quiet")
        .chain(flags.iter().map(String::as_str))
        .collect();
    let (doc, code) = check_json(&args);
    let rows = rows(&doc);
    assert_eq!(
        status(&rows, "stdin_eof"),
        "WARN",
        "{:#}",
        rows["stdin_eof"]
    );
    assert_eq!(
        rows["stdin_eof"]["measured"]["ended_by"],
        "exited_after_term"
    );
    assert!(rows["stdin_eof"]["value"]
        .as_str()
        .unwrap()
        .contains("SIGTERM"));
    // With stdin left open, SIGTERM alone ends it.
    assert_eq!(status(&rows, "sigterm"), "PASS", "{:#}", rows["sigterm"]);
    assert_eq!(code, 0, "WARN alone exits 0: {doc:#}");
}

/// Issue 34: a server that exits with a failure status on stdin EOF gets a
/// WARN that shows the end of its stderr, not a silent PASS.
#[test]
fn fixture_exiting_with_a_failure_status_on_eof_warns_with_its_stderr() {
    let server = fixture_server().to_string_lossy().into_owned();
    let (doc, code) = check_json(&["--quiet", "--", &server, "--exit-code", "1"]);
    let rows = rows(&doc);
    let row = &rows["stdin_eof"];
    assert_eq!(status(&rows, "stdin_eof"), "WARN", "{row:#}");
    assert!(
        row["value"]
            .as_str()
            .unwrap_or_default()
            .ends_with("after stdin EOF: a failure status"),
        "{row:#}"
    );
    assert_eq!(row["measured"]["exit_status"], "code 1", "{row:#}");
    let hint = row["detail"].as_str().unwrap_or_default();
    assert!(hint.contains("| fixture: exiting with 1"), "{row:#}");
    assert!(
        row["measured"]["stderr_excerpt"]
            .as_str()
            .unwrap_or_default()
            .contains("fixture: stdin EOF"),
        "{row:#}"
    );
    assert_eq!(code, 0, "a WARN alone exits 0: {doc:#}");
}

#[test]
fn fixture_ignoring_sigterm_fails_the_signal_rows() {
    let server = fixture_server();
    let server = server.to_string_lossy();
    let (doc, code) = check_json(&[
        "--quiet",
        "--shutdown-grace",
        "0.5",
        "--",
        &server,
        "--ignore-sigterm",
        "--ignore-stdin-eof",
        "--stdout-log-before",
    ]);
    let rows = rows(&doc);
    assert_eq!(code, 1);
    assert_eq!(status(&rows, "sigterm"), "FAIL", "{:#}", rows["sigterm"]);
    assert_eq!(rows["sigterm"]["measured"]["needed_kill"], true);
    assert_eq!(
        status(&rows, "stdin_eof"),
        "FAIL",
        "{:#}",
        rows["stdin_eof"]
    );
    assert_eq!(status(&rows, "stdout_hygiene"), "FAIL");
    // Without tools named, the tool rows say why they did not run.
    for id in ["large_response", "slow_reader", "cancel"] {
        assert_eq!(status(&rows, id), "SKIP", "{id}");
        assert!(
            rows[id]["value"].as_str().unwrap().contains("no --"),
            "{id}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_server_that_never_answers_gives_fail_rows_not_a_hung_check() {
    // `sleep` reads nothing and writes nothing; it ends on SIGTERM.
    let (out, took) = check(&["--json", "--quiet", "--timeout", "1", "--", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows = rows(&doc);
    assert_eq!(status(&rows, "initialize"), "FAIL");
    assert!(rows["initialize"]["value"]
        .as_str()
        .unwrap()
        .contains("no answer"));
    assert_eq!(status(&rows, "malformed_line"), "SKIP");
    assert_eq!(status(&rows, "stdin_eof"), "WARN");
    assert_eq!(status(&rows, "sigterm"), "PASS");
}

#[test]
fn help_documents_every_flag_with_an_example() {
    let out = Command::new(BIN)
        .args(["check", "--help"])
        .output()
        .expect("mcp-stdio runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--json",
        "--timeout",
        "--max-frame",
        "--large-tool",
        "--large-args",
        "--slow-tool",
        "--slow-args",
        "--cancel-after-ms",
        "--stall",
        "--shutdown-grace",
        "--stderr-warn",
        "--quiet",
        "SERVER_COMMAND",
        "Exit status",
        "Examples:",
        "mcp-stdio check -- ",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    // The built-in server is an implementation detail, not a command to list.
    let top = Command::new(BIN).arg("--help").output().expect("runs");
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(top.contains("check"), "{top}");
    assert!(!top.contains("builtin-server"), "{top}");
}

#[test]
fn usage_errors_exit_2() {
    let (out, _) = check(&[
        "--large-tool",
        "x",
        "--large-args",
        "not json",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--large-args"));
    let (out, _) = check(&["--slow-tool", "x", "--slow-args", "[1]", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    // A wire limit below the core's minimum is refused, naming it.
    let (out, _) = check(&["--max-frame", "10", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--max-frame: a wire limit of 10 bytes is too small (at least 64)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _) = check(&["--", "/nonexistent/mcp-server"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start"));
    assert!(out.stdout.is_empty());
}

#[cfg(unix)]
#[test]
fn a_server_that_exits_at_once_fails_the_exit_rows() {
    // `true` exits before anyone asks: that is not "exits on EOF / on TERM".
    let (out, _) = check(&["--json", "--quiet", "--timeout", "2", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows = rows(&doc);
    assert_eq!(status(&rows, "initialize"), "FAIL");
    assert_eq!(
        status(&rows, "stdin_eof"),
        "FAIL",
        "{:#}",
        rows["stdin_eof"]
    );
    assert_eq!(status(&rows, "sigterm"), "FAIL", "{:#}", rows["sigterm"]);
}

/// `check` against the official `server-everything` (npm): a healthy server.
/// Fails without the interop peers, or is skipped with `MCP_STDIO_SKIP_INTEROP=1`.
#[test]
fn server_everything_passes_the_rows_it_can() {
    use mcp_stdio_tests::interop::{node, require, server_everything_entry};
    let test = "server_everything_passes_the_rows_it_can";
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_everything_entry()) else {
        return;
    };
    // One argument may hold at most 128 KiB on Linux; 100 KB still overflows the pipe.
    let big = format!("{{\"message\":\"{}\"}}", "e".repeat(100_000));
    let (node, entry) = (node.display().to_string(), entry.display().to_string());
    let (doc, code) = check_json(&[
        "--large-tool",
        "echo",
        "--large-args",
        &big,
        "--slow-tool",
        "trigger-long-running-operation",
        "--slow-args",
        r#"{"duration":5,"steps":5}"#,
        "--",
        &node,
        &entry,
        "stdio",
    ]);
    let rows = rows(&doc);
    for id in [
        "initialize",
        "stdout_hygiene",
        "malformed_line",
        "large_response",
        "slow_reader",
        "cancel",
        "leftover_processes",
    ] {
        assert_eq!(status(&rows, id), "PASS", "{id}: {}", rows[id]);
    }
    assert_eq!(code, 0, "{doc}");
}

/// `check` against a server written with the Python `mcp` package.
#[test]
fn python_sdk_server_passes_the_rows_it_can() {
    use mcp_stdio_tests::interop::{python, require, scripts_dir};
    let test = "python_sdk_server_passes_the_rows_it_can";
    let Some((python, _)) = require(test, python()) else {
        return;
    };
    let script = scripts_dir().join("py_server.py");
    let (python, script) = (python.display().to_string(), script.display().to_string());
    let (doc, code) = check_json(&[
        "--large-tool",
        "big",
        "--large-args",
        r#"{"bytes":1000000}"#,
        "--slow-tool",
        "slow",
        "--slow-args",
        r#"{"seconds":5}"#,
        "--",
        &python,
        &script,
    ]);
    let rows = rows(&doc);
    // The Python package's server offers both revisions: both are checked.
    for at in ["", "@2026-07-28"] {
        for id in [
            "initialize",
            "stdout_hygiene",
            "malformed_line",
            "large_response",
            "slow_reader",
            "cancel",
            "stdin_eof",
        ] {
            let id = format!("{id}{at}");
            assert_eq!(status(&rows, &id), "PASS", "{id}: {}", rows[&id]);
        }
    }
    assert_eq!(
        rows["initialize"]["measured"]["protocol_version"],
        "2025-11-25"
    );
    assert_eq!(
        rows["initialize@2026-07-28"]["measured"]["protocol_version"],
        "2026-07-28"
    );
    assert_eq!(status(&rows, "leftover_processes"), "PASS");
    assert_eq!(code, 0, "{doc}");
}

/// A server that offers only 2026-07-28 (rmcp's, with `--modern-only`):
/// every row runs at that revision and `check` passes it; one that offers
/// both gets both revisions' rows.
#[test]
fn a_server_offering_only_2026_07_28_passes_and_one_offering_both_gets_both() {
    use mcp_stdio_tests::interop::require;
    use mcp_stdio_tests::negotiation::rmcp_example_server;
    let test = "a_server_offering_only_2026_07_28_passes_and_one_offering_both_gets_both";
    let Some(server) = require(test, rmcp_example_server()) else {
        return;
    };
    let server = server.display().to_string();
    let tools = [
        "--slow-tool",
        "slow",
        "--slow-args",
        r#"{"seconds":3}"#,
        "--large-tool",
        "big",
        "--large-args",
        r#"{"bytes":1000000}"#,
    ];
    let mut args: Vec<&str> = tools.to_vec();
    args.extend(["--", &server, "--modern-only"]);
    let (doc, code) = check_json(&args);
    let modern = rows(&doc);
    assert!(
        modern
            .keys()
            .all(|k| !k.starts_with("initialize") || k == "initialize@2026-07-28"),
        "2026-07-28 rows only: {doc}"
    );
    for (k, r) in &modern {
        assert!(
            r["status"] == "PASS",
            "{k}: every row passes a well-behaved 2026-07-28 server: {r}"
        );
    }
    assert_eq!(
        modern["initialize@2026-07-28"]["measured"]["handshake"],
        "server/discover"
    );
    assert_eq!(code, 0, "{doc}");

    let mut args: Vec<&str> = tools.to_vec();
    args.extend(["--", &server]);
    let (doc, code) = check_json(&args);
    let both = rows(&doc);
    assert_eq!(both.len(), 18, "both revisions' rows: {doc}");
    assert_eq!(
        both["initialize"]["measured"]["protocol_version"],
        "2025-11-25"
    );
    assert_eq!(status(&both, "cancel@2026-07-28"), "PASS", "{doc}");
    assert_eq!(code, 0, "{doc}");
}

/// Row 4 with a server that writes its id last (`{result, jsonrpc, id}`, the
/// TypeScript SDK's order) and a result over `--max-frame`: the refusal is
/// tied to the call when the line ends, never reported as the server's hang.
#[test]
fn g3_large_response_row_ties_an_id_last_refusal_to_its_call() {
    let server = fixture_server().to_string_lossy().into_owned();
    let t = Instant::now();
    let (doc, _) = check_json(&[
        "--quiet",
        "--timeout",
        "30",
        "--max-frame",
        "1048576",
        "--large-tool",
        "big_id_last",
        "--large-args",
        r#"{"bytes":8000000}"#,
        "--",
        &server,
    ]);
    let rows = rows(&doc);
    let row = &rows["large_response"];
    assert_eq!(status(&rows, "large_response"), "PASS", "{row:#}");
    assert_eq!(row["measured"]["oversized_frames"], 1, "{row:#}");
    let call_ms = row["measured"]["call_ms"].as_f64().expect("call_ms");
    eprintln!(
        "row 4, id last: refused after {call_ms:.1} ms (timeout 30 s); check took {:?}",
        t.elapsed()
    );
    assert!(call_ms < 10_000.0, "{row:#}");
}

/// Row 4 when the over-limit answer carries no id at all: the call runs to
/// its timeout, and the row says what arrived (WARN) instead of blaming the
/// server for a hang (FAIL).
#[test]
fn g3_large_response_row_warns_on_an_over_limit_answer_without_an_id() {
    let server = fixture_server().to_string_lossy().into_owned();
    let (doc, _) = check_json(&[
        "--quiet",
        "--timeout",
        "2",
        "--max-frame",
        "1048576",
        "--large-tool",
        "big_no_id",
        "--large-args",
        r#"{"bytes":4000000}"#,
        "--",
        &server,
    ]);
    let rows = rows(&doc);
    let row = &rows["large_response"];
    assert_eq!(status(&rows, "large_response"), "WARN", "{row:#}");
    let value = row["value"].as_str().unwrap_or_default();
    assert!(value.contains("without a usable top-level id"), "{row:#}");
    assert!(value.contains("then ping"), "{row:#}");
}

/// Issue 34: a server whose own wire limit refuses the large result (here a
/// guard at 1 MiB in front of the fixture, as the guard's default once
/// refused a 9 MiB result) gets rows 4 and 5 that name that limit as the
/// cause, not the arguments.
#[test]
fn g9_large_rows_name_the_servers_own_limit_when_it_refused_the_result() {
    let server = fixture_server().to_string_lossy().into_owned();
    let (doc, _) = check_json(&[
        "--quiet",
        "--timeout",
        "5",
        "--stall",
        "0.5",
        "--large-tool",
        "big",
        "--large-args",
        r#"{"bytes":2000000}"#,
        "--",
        BIN,
        "guard",
        "--max-frame",
        "1048576",
        "--",
        &server,
    ]);
    let rows = rows(&doc);
    for id in ["large_response", "slow_reader"] {
        let row = &rows[id];
        assert_eq!(status(&rows, id), "WARN", "{row:#}");
        let value = row["value"].as_str().unwrap_or_default();
        assert!(
            value.starts_with("the server's own 1.0 MiB wire limit refused the result"),
            "{row:#}"
        );
        let hint = row["detail"].as_str().unwrap_or_default();
        assert!(hint.contains("the arguments are not the cause"), "{row:#}");
        assert!(!hint.contains("check --large-tool"), "{row:#}");
        assert_eq!(row["measured"]["server_limit_bytes"], 1_048_576, "{row:#}");
    }
}

/// A fresh path for one test's report file, in a temporary folder removed when the test ends.
fn temp_report(name: &str) -> mcp_stdio_tests::TempPath {
    mcp_stdio_tests::TempPath::new(&format!("check-{name}.xml"))
}

/// The `name` attribute of every `<testcase>`, in order, and the element's text up to its end.
fn junit_cases(xml: &str) -> Vec<(String, String)> {
    xml.split("<testcase ")
        .skip(1)
        .map(|case| {
            let name = case
                .strip_prefix("name=\"")
                .and_then(|rest| rest.split('"').next())
                .expect("every testcase starts with its name");
            let body = case
                .split("</testcase>")
                .next()
                .expect("split yields at least one part");
            assert!(case.contains("</testcase>"), "unclosed testcase: {case}");
            (name.to_owned(), body.to_owned())
        })
        .collect()
}

#[test]
fn junit_has_one_testcase_per_row_matching_the_json_verdicts() {
    let path = temp_report("json");
    let path_s = path.to_string_lossy().into_owned();
    let flags = fixture_flags();
    let args: Vec<&str> = ["--quiet", "--junit", path_s.as_str()]
        .into_iter()
        .chain(flags.iter().map(String::as_str))
        .collect();
    let start = Instant::now();
    let (doc, code) = check_json(&args);
    eprintln!("check --json --junit: {:?}", start.elapsed());
    let xml = std::fs::read_to_string(&path).expect("--junit wrote its file");
    let rows = rows(&doc);
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"),
        "{xml}"
    );
    assert_eq!(xml.matches("<testsuites ").count(), 1, "{xml}");
    assert!(xml.trim_end().ends_with("</testsuites>"), "{xml}");
    let cases = junit_cases(&xml);
    let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ROW_IDS, "{xml}");
    let mut fails = 0;
    for (id, body) in &cases {
        let status = status(&rows, id);
        assert_eq!(body.contains("<failure "), status == "FAIL", "{id}: {body}");
        assert_eq!(body.contains("<skipped "), status == "SKIP", "{id}: {body}");
        assert!(
            body.contains(&format!("<system-out>{status} ")),
            "{id}: {body}"
        );
        let time: f64 = body
            .split("time=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{id}: no time in seconds: {body}"));
        assert!((0.0..60.0).contains(&time), "{id}: time {time}");
        fails += usize::from(status == "FAIL");
    }
    assert!(
        xml.contains(&format!("tests=\"10\" failures=\"{fails}\"")),
        "{xml}"
    );
    assert_eq!(code, if fails == 0 { 0 } else { 1 }, "{doc:#}");
}

#[test]
fn markdown_has_one_line_per_row_and_agrees_with_the_junit_file() {
    let path = temp_report("md");
    let path_s = path.to_string_lossy().into_owned();
    let start = Instant::now();
    // The built-in server: rows FAIL and WARN on purpose, so both formats have something to say.
    let (out, _) = check(&["--quiet", "--markdown", "--junit", path_s.as_str()]);
    eprintln!("check --markdown --junit: {:?}", start.elapsed());
    let xml = std::fs::read_to_string(&path).expect("--junit wrote its file");
    assert_eq!(out.status.code(), Some(1), "the built-in server fails rows");
    let md = String::from_utf8(out.stdout).expect("UTF-8 markdown");
    let row_lines: Vec<&str> = md
        .lines()
        .filter(|l| {
            l.strip_prefix("| ")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .collect();
    assert_eq!(row_lines.len(), ROW_IDS.len(), "{md}");
    for (i, line) in row_lines.iter().enumerate() {
        assert!(line.starts_with(&format!("| {} | ", i + 1)), "{line}");
        assert_eq!(line.replace("\\|", "").matches('|').count(), 6, "{line}");
    }
    let md_fails = row_lines.iter().filter(|l| l.contains(" FAIL |")).count();
    let md_skips = row_lines.iter().filter(|l| l.contains(" SKIP |")).count();
    assert!(md_fails > 0, "{md}");
    assert_eq!(xml.matches("<failure ").count(), md_fails, "{xml}\n{md}");
    assert_eq!(xml.matches("<skipped ").count(), md_skips, "{xml}\n{md}");
    assert_eq!(junit_cases(&xml).len(), ROW_IDS.len(), "{xml}");
    assert!(md.contains("→ FAILED**"), "{md}");
}

#[test]
fn an_unwritable_junit_file_exits_2_after_printing_the_report() {
    let (out, _) = check(&[
        "--quiet",
        "--timeout",
        "2",
        "--junit",
        "/nonexistent-dir/report.xml",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--junit /nonexistent-dir/report.xml"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("mcp-stdio check: true"));
}

/// `--large-args @FILE`: a 3 MB arguments object, too large for one
/// command-line argument (Linux caps one at 128 KiB), read from a file; a
/// missing or over-limit file is refused naming the file.
#[test]
fn large_args_from_a_file_reach_the_tool_and_bad_files_are_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let args = dir.path().join("large-args.json");
    let pad = "p".repeat(3_000_000);
    std::fs::write(&args, format!(r#"{{"bytes":2000000,"pad":"{pad}"}}"#)).expect("write");
    let at = format!("@{}", args.display());
    let server = fixture_server().to_string_lossy().into_owned();
    let t = Instant::now();
    let (doc, _) = check_json(&[
        "--quiet",
        "--stall",
        "0.5",
        "--large-tool",
        "big",
        "--large-args",
        &at,
        "--",
        &server,
    ]);
    eprintln!(
        "check with 3 MB of arguments from a file: {:?}",
        t.elapsed()
    );
    let rows = rows(&doc);
    let row = &rows["large_response"];
    assert_eq!(status(&rows, "large_response"), "PASS", "{row:#}");
    // The tool saw the file's `bytes`: its result is that big.
    let got = row["measured"]["result_bytes"]
        .as_u64()
        .expect("result_bytes");
    assert!((2_000_000..2_100_000).contains(&got), "{row:#}");

    let missing = dir.path().join("missing.json");
    let (out, _) = check(&[
        "--large-tool",
        "big",
        "--large-args",
        &format!("@{}", missing.display()),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--large-args @{0}: cannot open {0}: ",
            missing.display()
        )),
        "{err}"
    );

    // One byte over the 16 MiB limit (a sparse file: no 16 MiB written).
    let huge = dir.path().join("huge.json");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(16 * 1024 * 1024 + 1))
        .expect("a sparse file");
    let (out, _) = check(&[
        "--large-tool",
        "big",
        "--large-args",
        &format!("@{}", huge.display()),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{} is larger than the 16 MiB limit for an arguments file",
            huge.display()
        )),
        "{err}"
    );

    // A file that is not a JSON object: the file is named, its bytes are not echoed.
    std::fs::write(&args, "[1, 2]").expect("write");
    let (out, _) = check(&["--large-tool", "big", "--large-args", &at, "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "expected a JSON object (`{{\"key\": …}}`), got file {}",
            args.display()
        )),
        "{err}"
    );

    let (out, _) = check(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--large-args <JSON|@FILE>"), "{help}");
    assert!(help.contains("at most 16 MiB"), "{help}");
}
