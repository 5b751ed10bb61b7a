//! Issue 23 (FIELD item 8): the environment `mcp-stdio guard` gives its
//! server (`--env-clear`, `--env-pass`, `--env`, `--env-file`), and the
//! secrets read from files, which must reach the server and nothing the
//! guard writes: its stderr, the `--audit` log, the `--metrics` file.
//!
//! Real processes: the guard in front of `fixture-server` (its `env` and
//! `print_env` tools). Build the fixtures first:
//! `cargo build -p mcp-stdio-tests --bins`. Unix: the fixtures are Unix programs.
#![cfg(unix)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_stdio_tests::{fixture_server_path, TempPath};
use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{guard_bin, guard_command, Guarded};

const WITHIN: Duration = Duration::from_secs(20);

/// The secret of these tests: long enough to be masked, unlike anything else.
const SECRET: &str = "s3cr3t-VALUE-0123456789-xyzzy";

/// The text block of a tool result.
fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {r}"))
}

/// What the `env` tool saw: (values by name, number of variables).
fn env_seen(g: &mut Guarded, id: i64, names: &[&str]) -> (Value, u64) {
    let r = g.call_tool(json!(id), "env", json!({ "names": names }));
    let seen: Value = serde_json::from_str(text(&r)).expect("the env tool answers JSON");
    (
        seen["values"].clone(),
        seen["count"].as_u64().expect("a count"),
    )
}

/// Issue 23 item 3: from an empty environment, the server gets exactly
/// what `--env-pass` and `--env` ask for, nothing else (the count); a name
/// the guard's environment lacks is said on stderr and not passed.
#[test]
fn issue_23_an_empty_environment_gets_exactly_the_passed_and_set_variables() {
    let cmd = guard_command(
        &[
            "--env-clear",
            "--env-pass",
            "MCP_ENV_TEST_HOME",
            "--env-pass",
            "MCP_ENV_TEST_NOWHERE",
            "--env",
            "MODE=test=1",
            "--env",
            "EMPTY=",
        ],
        &[&fixture_server_path()],
        &[
            ("MCP_ENV_TEST_HOME", "/test-home"),
            ("MCP_ENV_TEST_NOT_PASSED", "guard only"),
        ],
    );
    let mut g = Guarded::spawn(cmd).bounded(WITHIN);
    g.initialize();
    let names = [
        "MCP_ENV_TEST_HOME",
        "MODE",
        "EMPTY",
        "MCP_ENV_TEST_NOT_PASSED",
        "MCP_ENV_TEST_NOWHERE",
        "PATH",
    ];
    let (values, count) = env_seen(&mut g, 1, &names);
    assert_eq!(
        values,
        json!({"MCP_ENV_TEST_HOME": "/test-home", "MODE": "test=1", "EMPTY": "",
            "MCP_ENV_TEST_NOT_PASSED": null, "MCP_ENV_TEST_NOWHERE": null, "PATH": null})
    );
    assert_eq!(count, 3, "nothing but the three variables asked for");
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr
            .matches("--env-pass MCP_ENV_TEST_NOWHERE: not set in the guard's environment")
            .count(),
        1,
        "{stderr}"
    );
}

/// Issue 23 item 3: with `--env-clear`, a program named without a folder is
/// found through the guard's PATH, as without it; the server itself gets
/// no PATH unless it is passed. A program found nowhere: exit 127.
#[test]
fn issue_23_a_cleared_environment_finds_the_program_in_the_guards_path() {
    let dir = TempPath::new("bin");
    std::fs::create_dir(&*dir).unwrap();
    let name = "mcp-stdio-env-test-server";
    std::os::unix::fs::symlink(fixture_server_path(), dir.join(name)).unwrap();
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let program = PathBuf::from(name);
    for (pass_path, want_path) in [(false, Value::Null), (true, json!(path))] {
        let mut args = vec!["--env-clear"];
        if pass_path {
            args.extend(["--env-pass", "PATH"]);
        }
        let cmd = guard_command(&args, &[&program], &[("PATH", &path)]);
        let mut g = Guarded::spawn(cmd).bounded(WITHIN);
        g.initialize();
        let (values, count) = env_seen(&mut g, 1, &["PATH"]);
        assert_eq!(values["PATH"], want_path);
        assert_eq!(count, u64::from(pass_path));
        let (code, stderr) = g.close();
        assert_eq!(code, Some(0), "{stderr}");
    }
    let missing = PathBuf::from("mcp-stdio-env-test-no-such-server");
    let mut cmd = guard_command(&["--env-clear"], &[&missing], &[("PATH", &path)]);
    let out = cmd.stdin(Stdio::null()).output().expect("run the guard");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("`mcp-stdio-env-test-no-such-server` was not found in PATH"),
        "{stderr}"
    );
}

/// Issue 23 items 1 and 2: a secret from `--env-file` reaches the server
/// (which returns it to the host: the server's business) and appears
/// nowhere in what the guard writes — its stderr (the server's stderr
/// forwarded, here in two writes with a pause between them, and a stdout
/// noise line moved there), the audit log (a record naming the secret),
/// the metrics file (the retained tail) — where it is `[SECRET]`, counted.
#[test]
fn issue_23_a_secret_from_a_file_reaches_the_server_and_nothing_the_guard_writes() {
    let secret_file = TempPath::new("api-token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let audit = TempPath::new("audit.jsonl");
    let metrics = TempPath::new("metrics.json");
    let file_arg = format!("API_TOKEN={}", secret_file.display());
    let cmd = guard_command(
        &[
            "--env-file",
            &file_arg,
            "--audit",
            audit.to_str().unwrap(),
            "--metrics",
            metrics.to_str().unwrap(),
        ],
        &[&fixture_server_path()],
        &[],
    );
    let mut g = Guarded::spawn(cmd).bounded(WITHIN);
    g.initialize();
    let (values, _) = env_seen(&mut g, 1, &["API_TOKEN"]);
    assert_eq!(
        values["API_TOKEN"], SECRET,
        "the server gets the file's value"
    );
    let t = Instant::now();
    let args = json!({"name": "API_TOKEN", "stream": "stderr", "split_ms": 300});
    let r = g.call_tool(json!(2), "print_env", args);
    assert_eq!(text(&r), "printed");
    eprintln!(
        "printed in two writes 300 ms apart, answered after {:?}",
        t.elapsed()
    );
    let r = g.call_tool(
        json!(3),
        "print_env",
        json!({"name": "API_TOKEN", "stream": "stdout"}),
    );
    assert_eq!(text(&r), "printed");
    // A host naming the secret: the server's error echoes it to the host;
    // the guard's record of the call must not.
    let r = g.call_tool(json!(format!("id-{SECRET}")), SECRET, json!({}));
    assert!(
        r["error"]["message"].as_str().unwrap().contains(SECRET),
        "{r}"
    );
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");

    assert!(
        !stderr.contains(SECRET),
        "the secret on the guard's stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("fixture: API_TOKEN=[SECRET] (printed)\n"),
        "the split stderr line, masked:\n{stderr}"
    );
    assert!(
        stderr.contains("[server stdout, not protocol] fixture: API_TOKEN=[SECRET] (printed)"),
        "the stdout noise line, masked:\n{stderr}"
    );
    let log = std::fs::read_to_string(&audit).expect("the audit log");
    assert!(!log.contains(SECRET), "the secret in the audit log:\n{log}");
    assert!(log.contains(r#""operation":"[SECRET]""#), "{log}");
    let verified = Command::new(guard_bin())
        .arg("verify")
        .arg(&*audit)
        .output()
        .expect("run verify");
    assert!(verified.status.success(), "the masked log still verifies");
    let m = std::fs::read_to_string(&metrics).expect("the metrics file");
    assert!(!m.contains(SECRET), "the secret in the metrics:\n{m}");
    let m: Value = serde_json::from_str(&m).unwrap();
    assert!(
        m["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("API_TOKEN=[SECRET] (printed)"),
        "{m}"
    );
    // The stderr line, the noise note, and the record's operation and call id.
    let masked = m["secrets_masked"].as_u64().unwrap();
    assert!(masked >= 4, "secrets_masked = {masked}");
    eprintln!("secrets_masked = {masked}");
}

/// Issue 23 item 1: what cannot be used is a usage error (exit 2) before
/// any server starts, naming the variable and the path, never the value.
#[test]
fn issue_23_usage_errors_name_the_variable_and_path_never_the_value() {
    let short = TempPath::new("short");
    std::fs::write(&short, "Q7z\n").unwrap();
    let missing = TempPath::new("missing");
    let config = TempPath::new("guard.toml");
    std::fs::write(&config, "env_file = { FROM_TOML = \"nope.txt\" }\n").unwrap();
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (
            vec!["--env-file".into(), format!("TOKEN={}", missing.display())],
            vec![
                "TOKEN".into(),
                missing.display().to_string(),
                "cannot read".into(),
            ],
        ),
        (
            vec!["--env-file".into(), format!("PIN={}", short.display())],
            vec![
                "PIN".into(),
                short.display().to_string(),
                "at least 4 bytes".into(),
            ],
        ),
        (
            vec!["--env-pass".into(), "A=B".into()],
            vec!["\"A=B\" is not a variable name".into()],
        ),
        (
            vec!["--env".into(), "=value-Q7z".into()],
            vec!["is not a variable name (empty)".into()],
        ),
        (
            vec!["--config".into(), config.display().to_string()],
            vec!["env_file.FROM_TOML".into(), "nope.txt".into()],
        ),
    ];
    for (args, wanted) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = guard_command(&args, &[&fixture_server_path()], &[])
            .stdin(Stdio::null())
            .output()
            .expect("run the guard");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for w in &wanted {
            assert!(
                stderr.contains(w.as_str()),
                "{args:?}: {w:?} not in {stderr}"
            );
        }
        assert!(!stderr.contains("Q7z"), "{args:?}: a value shown: {stderr}");
        assert!(
            !stderr.contains("fixture: started"),
            "{args:?}: no server starts: {stderr}"
        );
    }
}

/// The guide's host config for this feature parses, and puts `mcp-stdio
/// guard` with flags it knows in front of the server.
#[test]
fn issue_23_the_guides_example_uses_flags_the_guard_knows() {
    let body = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../guide/src/guard-environment.md"
    ))
    .expect("the guide's page is readable");
    let json = body
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a JSON example");
    let config: Value = serde_json::from_str(json).expect("the example is JSON");
    let entry = &config["mcpServers"]["github"];
    assert_eq!(entry["command"], "mcp-stdio");
    let args: Vec<&str> = entry["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string args"))
        .collect();
    assert_eq!(args[0], "guard");
    let help = Command::new(guard_bin())
        .args(["guard", "--help"])
        .output()
        .expect("guard --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let dashes = args.iter().position(|a| *a == "--").expect("a `--`");
    for flag in args[1..dashes].iter().filter(|a| a.starts_with("--")) {
        // `  --flag <VALUE>` or `  --flag` alone on its line.
        let known = help
            .lines()
            .any(|l| l.split_whitespace().next() == Some(*flag));
        assert!(known, "{flag} is not a guard flag");
    }
    assert!(args[..dashes].contains(&"--env-file"));
}
