//! Issue 24: the guard's sandbox for its server (`--sandbox PROFILE` and the
//! `--sandbox-*` flags; Linux, Landlock), with real processes and real MCP
//! peers: `@modelcontextprotocol/server-filesystem`, a Python `mcp` server,
//! server-everything driven by the TypeScript SDK's client, and plain shell
//! and Python programs for the limits (a server touches only what it was
//! given).
//!
//! Each test that needs Landlock says so and returns when the kernel lacks it
//! (CI's kernels have ABI 7). The interop peers come from
//! `tests/interop/setup.sh`.
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_stdio_tests::interop::{
    interop_dir, node, python, require, scripts_dir, server_everything_entry,
    server_filesystem_entry,
};
use mcp_stdio_tests::suite::TwoFolders;
use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{guard_bin, guard_command, Guarded};

const WITHIN: Duration = Duration::from_secs(30);

fn landlock(test: &str, min_abi: u32) -> bool {
    let abi = mcp_stdio_sys::sandbox::kernel_support().landlock_abi;
    if abi < min_abi {
        eprintln!("{test}: skipped: the kernel has Landlock ABI {abi}, the test needs {min_abi}");
        return false;
    }
    true
}

/// The first text block of a tool result, or the error's message.
fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"]
        .as_str()
        .or_else(|| r["error"]["message"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("file written")).expect("JSON")
}

#[test]
fn sandbox_server_filesystem_sandboxed_to_its_folder_serves_it_and_cannot_read_beside_it() {
    let test =
        "sandbox_server_filesystem_sandboxed_to_its_folder_serves_it_and_cannot_read_beside_it";
    let Some((node, _)) = require(test, node()) else {
        return;
    };
    let Some(entry) = require(test, server_filesystem_entry()) else {
        return;
    };
    if !landlock(test, 1) {
        return;
    }
    let TwoFolders {
        tmp,
        allowed,
        outside,
    } = TwoFolders::new();
    let read = |g: &mut Guarded, id: i64, file: &Path| {
        g.call_tool(
            id,
            "read_text_file",
            json!({"path": file.display().to_string()}),
        )
    };
    // The server's own allow-list holds both folders: unsandboxed, it reads
    // the secret (what makes the sandboxed refusal below the sandbox's doing).
    let server: [&Path; 4] = [&node, &entry, &allowed, &outside];
    let mut g = Guarded::spawn(guard_command(&[], &server, &[])).bounded(WITHIN);
    g.initialize_as("2025-06-18");
    let r = read(&mut g, 1, &outside.join("secret.txt"));
    assert!(text(&r).contains("secret-content"), "{r}");
    g.close();

    let npm = interop_dir().join("npm");
    let metrics = tmp.path().join("metrics.json");
    let audit = tmp.path().join("audit.log");
    let args = [
        "--sandbox",
        "base",
        "--sandbox-read",
        npm.to_str().expect("utf-8"),
        "--sandbox-read",
        allowed.to_str().expect("utf-8"),
        "--metrics",
        metrics.to_str().expect("utf-8"),
        "--audit",
        audit.to_str().expect("utf-8"),
    ];
    let mut g = Guarded::spawn(guard_command(&args, &server, &[])).bounded(WITHIN);
    let t = Instant::now();
    let init = g.initialize_as("2025-06-18");
    eprintln!(
        "sandboxed server-filesystem answered initialize in {:?}",
        t.elapsed()
    );
    assert!(init.get("result").is_some(), "{init}");
    let r = read(&mut g, 1, &allowed.join("a.txt"));
    assert_eq!(text(&r), "visible-content", "{r}");
    let r = read(&mut g, 2, &outside.join("secret.txt"));
    let said = text(&r);
    eprintln!("reading beside the folder: {said}");
    assert!(!r.to_string().contains("secret-content"), "{r}");
    assert!(
        said.contains("EACCES") || said.to_lowercase().contains("permission denied"),
        "{r}"
    );
    // The session goes on.
    let r = read(&mut g, 3, &allowed.join("a.txt"));
    assert_eq!(text(&r), "visible-content", "{r}");
    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");

    let m = read_json(&metrics);
    let sb = &m["sandbox"];
    assert!(sb["landlock_abi"].as_u64() >= Some(1), "{sb}");
    assert_eq!(sb["filesystem_enforced"], true, "{sb}");
    assert_eq!(sb["gaps"], json!([]), "{sb}");
    let paths = sb["paths"].as_array().expect("paths");
    let rule = |p: &Path| {
        paths
            .iter()
            .find(|r| r["path"] == p.display().to_string())
            .map(|r| r["access"].clone())
    };
    assert_eq!(rule(&allowed), Some(json!("read")), "{sb}");
    assert_eq!(rule(&outside), None, "{sb}");
    let log = std::fs::read_to_string(&audit).expect("audit log");
    assert!(log.contains(r#""phase":"sandbox""#), "{log}");
    let verify = Command::new(guard_bin())
        .arg("verify")
        .arg(&audit)
        .output()
        .expect("verify runs");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

#[test]
fn sandbox_a_python_server_cannot_connect_under_network_none_and_can_when_unrestricted() {
    let test =
        "sandbox_a_python_server_cannot_connect_under_network_none_and_can_when_unrestricted";
    let Some((py, _)) = require(test, python()) else {
        return;
    };
    if !landlock(test, 4) {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    let script = scripts_dir().join("py_net_server.py");
    let try_connect = |network: &str| {
        let args = ["--sandbox", "base", "--sandbox-network", network];
        let server: [&Path; 2] = [&py, &script];
        let mut g = Guarded::spawn(guard_command(&args, &server, &[])).bounded(WITHIN);
        g.initialize_as("2025-06-18");
        let r = g.call_tool(1, "connect", json!({ "port": port }));
        let (code, stderr) = g.close();
        assert_eq!(code, Some(0), "{stderr}");
        let said = text(&r);
        eprintln!("network {network}: {said}");
        said
    };
    let none = try_connect("none");
    assert!(none.starts_with("refused"), "{none}");
    let unrestricted = try_connect("unrestricted");
    assert_eq!(unrestricted, "connected");
}

/// A folder everyone may enter, with a copy of the guard in it: a guard run
/// as another user (the fork-bomb test as root) must reach its binary.
fn open_folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    // Writable by all too: the guard run as `nobody` writes its metrics here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let guard = dir.path().join("mcp-stdio");
    std::fs::copy(guard_bin(), &guard).expect("copy the guard");
    (dir, guard)
}

#[test]
fn sandbox_a_fork_bomb_stops_at_the_process_limit_and_the_guard_says_how_the_server_ended() {
    let test =
        "sandbox_a_fork_bomb_stops_at_the_process_limit_and_the_guard_says_how_the_server_ended";
    if !landlock(test, 1) {
        return;
    }
    // The kernel exempts root from the process limit: as root, the guard runs
    // as `nobody` (setpriv), as a user runs it.
    let root = rustix::process::geteuid().is_root();
    let (dir, guard) = open_folder();
    let metrics = dir.path().join("metrics.json");
    let limit = 24;
    let bomb = "i=0; while :; do sleep 30 & i=$((i+1)); echo \"started $i\" >&2; done";
    let guard_args = [
        "guard".to_owned(),
        "--sandbox".to_owned(),
        "base".to_owned(),
        "--sandbox-processes".to_owned(),
        limit.to_string(),
        "--sandbox-write".to_owned(),
        dir.path().display().to_string(),
        "--metrics".to_owned(),
        metrics.display().to_string(),
        "--shutdown-grace".to_owned(),
        "0.5".to_owned(),
        "--".to_owned(),
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        bomb.to_owned(),
    ];
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&guard);
        c
    } else {
        Command::new(&guard)
    };
    cmd.args(&guard_args).current_dir(dir.path());
    let t = Instant::now();
    let g = Guarded::spawn(cmd).bounded(WITHIN);
    let (code, stderr) = g.exits_by_itself(WITHIN);
    eprintln!(
        "the fork bomb ended after {:?}; guard exit {code:?}; stderr tail:\n{}",
        t.elapsed(),
        stderr.lines().rev().take(4).collect::<Vec<_>>().join("\n")
    );
    let started = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("started "))
        .filter_map(|n| n.trim().parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    assert!(started > 0, "the bomb never forked: {stderr}");
    assert!(
        started < limit,
        "{started} processes started under a limit of {limit}"
    );
    // The shell's own message, forwarded, and the guard's line on the end.
    assert!(stderr.contains("fork"), "{stderr}");
    assert!(stderr.contains("exited with code"), "{stderr}");
    assert_ne!(code, Some(0), "{stderr}");
    let m = read_json(&metrics);
    assert_eq!(m["sandbox"]["limits"]["processes"], limit, "{m}");
    eprintln!(
        "user namespace: {} (processes counted inside the sandbox)",
        m["sandbox"]["user_namespace"]
    );
}

#[test]
fn sandbox_a_memory_hog_stops_at_the_memory_limit_and_the_guard_says_how_the_server_ended() {
    let test =
        "sandbox_a_memory_hog_stops_at_the_memory_limit_and_the_guard_says_how_the_server_ended";
    if !landlock(test, 1) || !Path::new("/usr/bin/python3").exists() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let metrics = tmp.path().join("metrics.json");
    let hog = "import sys\nx = []\nwhile True:\n    x.append(bytearray(1 << 20))\n    if len(x) % 64 == 0: print(f'held {len(x)} MiB', file=sys.stderr, flush=True)\n";
    let args = [
        "--sandbox",
        "base",
        "--sandbox-memory",
        "256M",
        "--metrics",
        metrics.to_str().expect("utf-8"),
    ];
    let mut cmd = guard_command(&args, &[Path::new("/usr/bin/python3")], &[]);
    cmd.args(["-c", hog]);
    let t = Instant::now();
    let g = Guarded::spawn(cmd).bounded(WITHIN);
    let (code, stderr) = g.exits_by_itself(WITHIN);
    eprintln!(
        "the memory hog ended after {:?}; guard exit {code:?}; stderr tail:\n{}",
        t.elapsed(),
        stderr.lines().rev().take(4).collect::<Vec<_>>().join("\n")
    );
    assert!(stderr.contains("MemoryError"), "{stderr}");
    assert!(stderr.contains("exited with code 1"), "{stderr}");
    assert_eq!(code, Some(1), "{stderr}");
    let held = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("held "))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(held < 256, "held {held} MiB under a 256 MiB limit");
    let m = read_json(&metrics);
    assert_eq!(m["sandbox"]["limits"]["memory"], 256u64 << 20, "{m}");
}

#[test]
fn sandbox_without_landlock_the_guard_refuses_and_under_best_effort_records_what_is_not_enforced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let marker = tmp.path().join("started");
    let script = format!("touch {}", marker.display());
    let env = [(mcp_stdio_sys::sandbox::SIMULATE_ABI_ENV, "0")];
    let mut cmd = guard_command(&["--sandbox", "base"], &[Path::new("/bin/sh")], &env);
    cmd.args(["-c", &script]);
    let g = Guarded::spawn(cmd);
    let (code, stderr) = g.exits_by_itself(WITHIN);
    eprintln!("{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no Landlock"), "{stderr}");
    assert!(stderr.contains("--sandbox-best-effort"), "{stderr}");
    assert!(!marker.exists(), "the server was started");

    // An older kernel: ABI 3 has no network rules; network none is refused…
    let env3 = [(mcp_stdio_sys::sandbox::SIMULATE_ABI_ENV, "3")];
    let mut cmd = guard_command(&["--sandbox", "base"], &[Path::new("/bin/sh")], &env3);
    cmd.args(["-c", &script]);
    let (code, stderr) = Guarded::spawn(cmd).exits_by_itself(WITHIN);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("below ABI 4"), "{stderr}");
    assert!(!marker.exists(), "the server was started");

    // …and runs under best effort, with the gaps on stderr, in the metrics
    // and in the audit log.
    let metrics = tmp.path().join("metrics.json");
    let audit = tmp.path().join("audit.log");
    let args = [
        "--sandbox",
        "base",
        "--sandbox-write",
        tmp.path().to_str().expect("utf-8"),
        "--sandbox-best-effort",
        "--metrics",
        metrics.to_str().expect("utf-8"),
        "--audit",
        audit.to_str().expect("utf-8"),
    ];
    let mut cmd = guard_command(&args, &[Path::new("/bin/sh")], &env);
    cmd.args(["-c", &script]);
    let (code, stderr) = Guarded::spawn(cmd).exits_by_itself(WITHIN);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(marker.exists(), "the server did not run");
    assert!(
        stderr.contains("sandbox (best effort): not enforced"),
        "{stderr}"
    );
    let sb = &read_json(&metrics)["sandbox"];
    assert_eq!(sb["enforcement"], "best_effort", "{sb}");
    assert_eq!(sb["landlock_abi"], 0, "{sb}");
    assert_eq!(sb["filesystem_enforced"], false, "{sb}");
    assert_eq!(sb["gaps"][0]["gap"], "landlock", "{sb}");
    let log = std::fs::read_to_string(&audit).expect("audit log");
    let entry: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["record"]["phase"] == "sandbox")
        .unwrap_or_else(|| panic!("no sandbox entry in {log}"));
    assert!(
        entry.to_string().contains("\"gap\":\"landlock\""),
        "{entry}"
    );
}

/// The TypeScript SDK's client through a whole session (host_session.mjs).
fn ts_session(client_cwd: &Path, server: &[String]) -> Value {
    let test = "ts_session";
    let (node, _) = require(test, node()).expect("node");
    let entry = require(test, server_everything_entry()).expect("server-everything");
    let sdk = entry
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "server-everything"))
        .and_then(Path::parent)
        .expect("in node_modules/@modelcontextprotocol")
        .join("sdk");
    let calls = json!([
        ["echo", {"message": "sandboxed?"}],
        ["get-sum", {"a": 2, "b": 3}],
        ["get-tiny-image", {}]
    ]);
    let out = Command::new(node)
        .arg(scripts_dir().join("host_session.mjs"))
        .arg(sdk)
        .arg("--calls")
        .arg(calls.to_string())
        .arg("--")
        .args(server)
        .current_dir(client_cwd)
        .output()
        .expect("node runs");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no session: {}; stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn sandbox_server_everything_by_npx_behaves_the_same_in_the_npx_profile_as_without_a_sandbox() {
    let test =
        "sandbox_server_everything_by_npx_behaves_the_same_in_the_npx_profile_as_without_a_sandbox";
    if require(test, node()).is_none() || require(test, server_everything_entry()).is_none() {
        return;
    }
    if !landlock(test, 4) {
        return;
    }
    // npx finds the pinned package in the interop folder's node_modules
    // (never the network): the folder is the session's working folder, and
    // the project the sandbox lets it read and run (npx runs the package's
    // `node_modules/.bin` entry).
    let npm = interop_dir().join("npm");
    let npx = ["npx", "--no-install", "mcp-server-everything", "stdio"].map(String::from);
    let guard = |extra: &[&str]| {
        let mut cmd = vec![guard_bin().to_owned(), "guard".to_owned()];
        cmd.extend(extra.iter().map(|s| (*s).to_owned()));
        cmd.push("--".to_owned());
        cmd.extend(npx.iter().cloned());
        cmd
    };
    let t = Instant::now();
    let plain = ts_session(&npm, &guard(&[]));
    let plain_took = t.elapsed();
    let tmp = tempfile::tempdir().expect("tempdir");
    let metrics = tmp.path().join("metrics.json");
    let t = Instant::now();
    let sandboxed = ts_session(
        &npm,
        &guard(&[
            "--sandbox",
            "npx",
            "--sandbox-exec",
            npm.to_str().expect("utf-8"),
            "--metrics",
            metrics.to_str().expect("utf-8"),
        ]),
    );
    eprintln!(
        "session without a sandbox {plain_took:?}, in the npx profile {:?}",
        t.elapsed()
    );
    assert!(
        plain["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{plain}"
    );
    assert_eq!(plain, sandboxed);
    let sb = &read_json(&metrics)["sandbox"];
    assert_eq!(sb["network"], "ports", "{sb}");
    assert_eq!(sb["connect_ports"], json!([443]), "{sb}");
    assert_eq!(sb["gaps"], json!([]), "{sb}");
}
