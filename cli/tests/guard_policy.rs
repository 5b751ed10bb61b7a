//! The guard's tool policies (F4: a policy says what it did) in front of
//! the fixture server, real processes: `--tools` / `--deny-tool`,
//! `--rate-limit`, `--repeat-limit`, `--max-result-text` / `--keep`, their
//! usage errors, their counts in `--metrics` and the audit log's records. With real servers and the hosts' clients: `host_clients.rs`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{fixture_server, guard_command, tmp, Guarded};

fn guard(args: &[&str]) -> Guarded {
    let mut all = vec!["--no-announce"];
    all.extend_from_slice(args);
    let mut g = Guarded::spawn(guard_command(&all, &[&fixture_server()], &[]));
    g.initialize();
    g
}

/// `n` with thousands separators, as the marker writes it.
fn commas(n: usize) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).expect("digits"))
        .collect();
    groups.join(",")
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

/// `--tools` and `--deny-tool`: `tools/list` holds only what the policy
/// allows; a call of another tool gets the policy's error (-32031, naming
/// the flag) and never reaches the server; an allowed call is answered.
#[test]
fn f4_tools_and_deny_tool_filter_the_list_and_refuse_the_call() {
    let mut g = guard(&["--tools", "echo,slow*,missing", "--deny-tool", "slow"]);
    let all = names(&guard(&[]).list_tools(1, None));
    let list = g.list_tools(1, None);
    // `slow*` lets `slow_io` in; `--deny-tool slow` keeps `slow` out.
    assert_eq!(names(&list), ["echo", "slow_io"], "of {all:?}");
    let r = g.call_tool(2, "slow", json!({"chunks": 1, "delay_ms": 1}));
    assert_eq!(r["error"]["code"], -32031, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--deny-tool slow"),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["policy"], "tools");
    let r = g.call_tool(3, "big", json!({"bytes": 10}));
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--tools"),
        "{r}"
    );
    let r = g.call_tool(4, "echo", json!({"text": "allowed"}));
    assert_eq!(r["result"]["content"][0]["text"], "allowed", "{r}");
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--tools names tools the server does not list: missing"),
        "{stderr}"
    );
}

/// `--rate-limit 5/1s`: twenty calls at once, fifteen refused with
/// `retryAfterMs`; after that wait a call passes again.
#[test]
fn f4_a_rate_limit_refuses_the_burst_past_it_with_when_to_retry() {
    let mut g = guard(&["--rate-limit", "5/1s"]);
    let t = Instant::now();
    let mut refused = Vec::new();
    for id in 1..=20 {
        let r = g.call_tool(id, "echo", json!({"text": id.to_string()}));
        if r.get("error").is_some() {
            assert_eq!(r["error"]["code"], -32031, "{r}");
            assert_eq!(r["error"]["data"]["policy"], "rate-limit", "{r}");
            refused.push(
                r["error"]["data"]["retryAfterMs"]
                    .as_u64()
                    .expect("retryAfterMs"),
            );
        }
    }
    let took = t.elapsed();
    eprintln!(
        "20 calls in {took:?}: {} refused, retry after {refused:?} ms",
        refused.len()
    );
    // Tokens come back at 5 a second: a slow machine may have earned some.
    let earned = usize::try_from(took.as_millis() / 200).unwrap_or(usize::MAX);
    assert!(
        refused.len() <= 15 && refused.len() + earned >= 15,
        "{refused:?}"
    );
    let wait = refused.iter().max().copied().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(wait + 50));
    let r = g.call_tool(100, "echo", json!({"text": "later"}));
    assert_eq!(r["result"]["content"][0]["text"], "later", "{r}");
    g.close();
}

/// `--repeat-limit 3`: the fourth identical call is refused (the agent
/// seems to loop) until a different call comes; `--metrics` counts the
/// refusals by tool and by policy.
#[test]
fn f4_the_loop_brake_fires_on_the_fourth_identical_call_and_metrics_count_it() {
    let metrics = tmp("policy-metrics.json");
    let path = metrics.path().to_str().expect("utf-8").to_owned();
    // Announced in a runtime folder of the test's own: `ps --json` shows it too.
    let base = guarded::RuntimeBase::new();
    let mut g = Guarded::spawn(base.guard_command(&[
        "--repeat-limit",
        "3",
        "--metrics",
        &path,
        "--name",
        "looping",
    ]));
    g.initialize();
    for id in 1..=3 {
        let r = g.call_tool(id, "echo", json!({"text": "same"}));
        assert!(r.get("result").is_some(), "call {id}: {r}");
    }
    let r = g.call_tool(4, "echo", json!({"text": "same"}));
    assert_eq!(r["error"]["data"]["policy"], "repeat-limit", "{r}");
    assert_eq!(r["error"]["data"]["repeats"], 4, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("seems to loop"),
        "{r}"
    );
    let r = g.call_tool(5, "echo", json!({"text": "different"}));
    assert!(r.get("result").is_some(), "{r}");
    let ps = Value::from(base.ps());
    let row = ps
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["name"] == "looping"))
        .unwrap_or_else(|| panic!("the guard in {ps}"));
    assert_eq!(row["policy"]["refused_by"]["repeat-limit"], 1, "{row}");
    let (code, _) = g.close();
    assert_eq!(code, Some(0));
    let m: Value =
        serde_json::from_slice(&std::fs::read(metrics.path()).expect("metrics")).expect("JSON");
    let policy = &m["proxy"]["policy"];
    assert_eq!(policy["refused"]["echo"], 1, "{m}");
    assert_eq!(policy["refused_by"]["repeat-limit"], 1, "{m}");
}

/// Bad settings are usage errors (exit 2) that say what is accepted.
#[test]
fn f4_bad_policy_settings_are_usage_errors() {
    for (args, says) in [
        (&["--rate-limit", "5/1d"][..], "N/PERIOD"),
        (&["--rate-limit", "five/1s"], "N/PERIOD"),
        (&["--repeat-limit", "0"], "at least 1"),
        (&["--max-result-text", "0"], "at least 1"),
        (&["--max-result-text", "64KiB"], "--max-result-text"),
        (
            &["--max-result-text", "100", "--keep", "middle"],
            "head-and-tail",
        ),
    ] {
        let out = guard_command(args, &[&fixture_server()], &[])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// `--max-result-text` with `--keep tail`: a 1 MiB result comes to the host
/// as its last bytes after the marker, `_meta` says what was omitted, the
/// call's audit record says what was cut, `--metrics` counts it; a result
/// within the limit and a result that is not a tool result go on as they
/// came, and the session goes on.
#[test]
fn f4_the_content_limit_cuts_a_result_and_the_record_says_so() {
    let dir = tmp("content-limit");
    std::fs::create_dir_all(dir.path()).expect("dir");
    let audit = dir.path().join("audit.jsonl");
    let metrics = dir.path().join("metrics.json");
    let (a, m) = (audit.display().to_string(), metrics.display().to_string());
    let mut g = guard(&[
        "--max-result-text",
        "4096",
        "--keep",
        "tail",
        "--audit",
        &a,
        "--metrics",
        &m,
    ]);
    let r = g.call_tool(1, "big", json!({"bytes": 1 << 20}));
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.len() <= 4096, "{} bytes", text.len());
    let (marker, tail) = text.split_once("]\n").expect("the marker first");
    assert!(
        tail.bytes().all(|b| b == b'x') && tail.len() > 3900,
        "{}",
        tail.len()
    );
    let omitted = (1 << 20) - tail.len();
    assert_eq!(
        format!("{marker}]"),
        format!(
            "[mcp-stdio: {} of 1,048,576 bytes omitted (--max-result-text 4096)]",
            commas(omitted)
        )
    );
    assert_eq!(
        r["result"]["_meta"]["io.mcp-stdio/truncated"],
        json!({"omittedBytes": omitted, "totalBytes": 1 << 20, "limit": 4096})
    );
    let r = g.call_tool(2, "big", json!({"bytes": 4000}));
    assert_eq!(
        r["result"]["content"][0]["text"].as_str().map(str::len),
        Some(4000)
    );
    assert!(r["result"].get("_meta").is_none(), "{r}");
    let list = g.list_tools(3, None);
    assert!(!names(&list).is_empty());
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");
    let details = guarded::audit_notes(&audit, "big");
    assert!(
        details.iter().any(
            |d| d.contains("--max-result-text 4096: 1 text block(s) cut")
                && d.contains(&format!("{} of 1,048,576 bytes omitted", commas(omitted)))
        ),
        "{details:?}"
    );
    let m: Value =
        serde_json::from_slice(&std::fs::read(&metrics).expect("metrics")).expect("JSON");
    assert_eq!(m["proxy"]["policy"]["results_cut"], 1, "{m}");
    assert_eq!(m["proxy"]["policy"]["bytes_omitted"], omitted, "{m}");
}

/// `--prompts` and `--deny-resource` in front of server-everything (the
/// same code as `--tools`): `prompts/list` holds only the allowed prompts
/// and a `prompts/get` of another is refused; `resources/list` loses the
/// denied URIs (its documents whose names start with `a`) and a
/// `resources/read` of one is refused; the others are answered by the
/// server. Needs the interop peers.
#[test]
fn f4_prompts_and_resources_are_filtered_like_tools_with_server_everything() {
    let test = "f4_prompts_and_resources_are_filtered_like_tools_with_server_everything";
    use mcp_stdio_tests::interop::{node, require, server_everything_entry};
    let (Some((node, _)), Some(entry)) = (
        require(test, node()),
        require(test, server_everything_entry()),
    ) else {
        return;
    };
    let stdio = std::path::Path::new("stdio");
    let mut g = Guarded::spawn(guard_command(
        &[
            "--no-announce",
            "--prompts",
            "simple-*,args-*",
            "--deny-resource",
            "demo://resource/static/document/a*",
        ],
        &[&node, &entry, stdio],
        &[],
    ));
    g.initialize_as("2025-11-25");
    let request = |g: &mut Guarded, id: i64, method: &str, params: Value| {
        g.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        g.reply(id)
    };
    let prompts = request(&mut g, 1, "prompts/list", json!({}));
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["simple-prompt", "args-prompt"], "{prompts}");
    let r = request(&mut g, 2, "prompts/get", json!({"name": "resource-prompt"}));
    assert_eq!(r["error"]["code"], -32031, "{r}");
    assert_eq!(r["error"]["data"]["policy"], "prompts", "{r}");
    let r = request(&mut g, 3, "prompts/get", json!({"name": "simple-prompt"}));
    assert!(r["result"]["messages"].is_array(), "{r}");
    let resources = request(&mut g, 4, "resources/list", json!({}));
    let uris: Vec<&str> = resources["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|p| p["uri"].as_str())
        .collect();
    assert!(
        !uris.is_empty()
            && uris
                .iter()
                .all(|u| !u.starts_with("demo://resource/static/document/a")),
        "{uris:?}"
    );
    let r = request(
        &mut g,
        5,
        "resources/read",
        json!({"uri": "demo://resource/static/document/architecture.md"}),
    );
    assert_eq!(r["error"]["data"]["policy"], "resources", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--deny-resource demo://resource/static/document/a*"),
        "{r}"
    );
    let r = request(&mut g, 6, "resources/read", json!({"uri": uris[0]}));
    assert!(r["result"]["contents"].is_array(), "{r}");
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");
}
