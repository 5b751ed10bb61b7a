//! The rmcp client on the adversarial cases, side by side: through our
//! [`ClientTransport`] and through rmcp's own `TokioChildProcess`, against
//! the conformance suite's fixture server (a real process; built by
//! `cargo build -p mcp-stdio-tests --bins` or any workspace build).
//!
//! Ours is asserted. Theirs is recorded in the test output ("theirs: …"),
//! every step bounded by a timeout so nothing hangs, and asserted only
//! where the outcome is deterministic.

use std::process::Stdio;
use std::time::{Duration, Instant};

use mcp_stdio_rmcp::{ClientOptions, ClientTransport, CommandSpec};
use mcp_stdio_tests::{
    descendants, fixture_server_path, group_members, pid_alive, signal_pid, Signal,
};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;

/// Ours: "at once" is milliseconds; CI machines are slow, never this slow.
const PROMPT: Duration = Duration::from_secs(10);
/// Theirs: how long a step may take before it is recorded as hanging.
const THEIRS_BOUND: Duration = Duration::from_secs(10);
/// Above rmcp's own line limit (16 MiB) and our default wire limit (4 MiB).
const OVERSIZED: usize = 20 * 1024 * 1024;

type Service = RunningService<RoleClient, ()>;

fn call(tool: &str, args: serde_json::Value) -> CallToolRequestParams {
    let serde_json::Value::Object(map) = args else {
        panic!("tool arguments are an object")
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(map)
}

/// Outcome of a call, as one line for the record.
fn describe<T: std::fmt::Debug, E: std::fmt::Display>(
    outcome: &Result<Result<T, E>, tokio::time::error::Elapsed>,
    took: Duration,
) -> String {
    let what = match outcome {
        Ok(Ok(_)) => "succeeded".to_owned(),
        Ok(Err(e)) => format!("failed: {:.160}", e.to_string()),
        Err(_) => format!("no outcome within {THEIRS_BOUND:?} (hang)"),
    };
    format!("{what} after {took:?}")
}

/// rmcp's own transport, the fixture in a process group of its own only so
/// the test can clean up what rmcp leaves (rmcp signals the child alone).
fn theirs_spawn(
    args: &[&str],
    stderr: Stdio,
) -> (TokioChildProcess, Option<tokio::process::ChildStderr>) {
    let mut command = tokio::process::Command::new(fixture_server_path());
    command.args(args).process_group(0);
    TokioChildProcess::builder(command)
        .stderr(stderr)
        .spawn()
        .expect("spawn the fixture under TokioChildProcess")
}

async fn echo_works(client: &Service, bound: Duration) -> bool {
    let call = client.call_tool(call("echo", serde_json::json!({"text": "still here"})));
    matches!(tokio::time::timeout(bound, call).await, Ok(Ok(_)))
}

/// Kills what is left of group `pgid` (the test's own processes) and says who it was.
fn clean_up_group(pgid: u32) -> Vec<u32> {
    let left = group_members(pgid);
    for &pid in &left {
        let _ = signal_pid(pid, Signal::SIGKILL);
    }
    left
}

async fn oversized_response_side_by_side(tool: &str) {
    // Ours: the request fails at once with an error for its id; the session goes on.
    let transport = ClientTransport::spawn(
        &CommandSpec::new(fixture_server_path()),
        ClientOptions::default(),
    )
    .expect("spawn the fixture");
    let mut session = transport.session();
    let client = ().serve(transport).await.expect("rmcp initializes");
    let t = Instant::now();
    let outcome = tokio::time::timeout(
        PROMPT,
        client.call_tool(call(tool, serde_json::json!({"bytes": OVERSIZED}))),
    )
    .await;
    let took = t.elapsed();
    eprintln!("{tool} 20 MiB, ours: {}", describe(&outcome, took));
    let error = outcome
        .expect("ours: no hang")
        .expect_err("ours: the response passed the wire limit");
    assert!(error.to_string().contains("wire limit"), "{error}");
    assert!(
        echo_works(&client, PROMPT).await,
        "ours: the session goes on"
    );
    client.cancel().await.expect("close");
    let record = session.record().await.expect("closed, not dropped");
    assert_eq!(
        record.metrics.oversized_ids_missing, 0,
        "the id was recovered"
    );

    // Theirs.
    let (transport, _) = theirs_spawn(&[], Stdio::null());
    let pgid = transport.id().expect("a pid");
    let client = ().serve(transport).await.expect("rmcp initializes");
    let t = Instant::now();
    let outcome = tokio::time::timeout(
        THEIRS_BOUND,
        client.call_tool(call(tool, serde_json::json!({"bytes": OVERSIZED}))),
    )
    .await;
    let took = t.elapsed();
    let alive = echo_works(&client, Duration::from_secs(5)).await;
    eprintln!(
        "{tool} 20 MiB, theirs: {}; session usable afterwards: {alive}",
        describe(&outcome, took)
    );
    let _ = tokio::time::timeout(THEIRS_BOUND, client.cancel()).await;
    clean_up_group(pgid);
}

/// G3 side by side, the id first: ours fails that request at once.
#[tokio::test]
async fn g3_side_by_side_oversized_response_id_first() {
    oversized_response_side_by_side("big").await;
}

/// G3 side by side, the id last (found only at the frame's end): ours fails
/// that request at once.
#[tokio::test]
async fn g3_side_by_side_oversized_response_id_last() {
    oversized_response_side_by_side("big_id_last").await;
}

/// G10 side by side: 16 MiB of stderr that nobody reads. Ours drains it
/// within the budget and the session works; theirs (stderr piped, unread)
/// blocks the server once the pipe is full — deterministic, since 16 MiB is
/// far above any pipe's capacity.
#[tokio::test]
async fn g10_side_by_side_unread_stderr_flood() {
    let flood: u64 = 16 * 1024 * 1024;
    let args = serde_json::json!({"bytes": flood});

    let transport = ClientTransport::spawn(
        &CommandSpec::new(fixture_server_path()),
        ClientOptions::default(),
    )
    .expect("spawn the fixture");
    let mut session = transport.session();
    let client = ().serve(transport).await.expect("rmcp initializes");
    let t = Instant::now();
    let outcome =
        tokio::time::timeout(PROMPT, client.call_tool(call("stderr_flood", args.clone()))).await;
    eprintln!(
        "stderr flood 16 MiB, ours: {}",
        describe(&outcome, t.elapsed())
    );
    outcome
        .expect("ours: no hang")
        .expect("ours: the flood went through");
    assert!(
        echo_works(&client, PROMPT).await,
        "ours: the session still works"
    );
    client.cancel().await.expect("close");
    let record = session.record().await.expect("closed, not dropped");
    eprintln!(
        "ours: stderr seen {} retained {}",
        record.stderr.seen, record.stderr.retained
    );
    assert!(record.stderr.seen >= flood, "every byte was read");
    assert!(record.stderr.retained < flood / 4, "memory stayed bounded");

    let (transport, stderr) = theirs_spawn(&[], Stdio::piped());
    let pgid = transport.id().expect("a pid");
    let client = ().serve(transport).await.expect("rmcp initializes");
    let t = Instant::now();
    let outcome =
        tokio::time::timeout(THEIRS_BOUND, client.call_tool(call("stderr_flood", args))).await;
    eprintln!(
        "stderr flood 16 MiB, theirs (stderr piped, unread): {}",
        describe(&outcome, t.elapsed())
    );
    assert!(
        outcome.is_err(),
        "theirs: a full stderr pipe blocks the server"
    );
    let t = Instant::now();
    let closed = tokio::time::timeout(THEIRS_BOUND, client.cancel()).await;
    eprintln!(
        "theirs: close {:?} after {:?}",
        closed.map(|_| ()),
        t.elapsed()
    );
    drop(stderr);
    clean_up_group(pgid);
}

/// G11 side by side: a server that ignores stdin EOF and SIGTERM, with a
/// grandchild in its process group. Ours: stdin close → TERM → KILL to the
/// group; nothing of the group is left. Theirs: recorded (rmcp waits, sends
/// TERM, then kills the child alone).
#[tokio::test]
async fn g11_side_by_side_server_ignoring_eof_and_term() {
    let args = ["--ignore-stdin-eof", "--ignore-sigterm"];
    let grandchild = serde_json::json!({"seconds": 60});

    let mut options = ClientOptions::default();
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(500))
        .term_grace(Duration::from_millis(500));
    let mut command = CommandSpec::new(fixture_server_path());
    command.args(args);
    let transport = ClientTransport::spawn(&command, options).expect("spawn the fixture");
    let mut session = transport.session();
    let pgid = session.pid();
    let client = ().serve(transport).await.expect("rmcp initializes");
    let peer = client.peer().clone();
    let sleeper = grandchild.clone();
    let running = tokio::spawn(async move { peer.call_tool(call("subprocess", sleeper)).await });
    let spawned = wait_for(|| !descendants(pgid).is_empty()).await;
    assert!(spawned, "ours: the fixture started its grandchild");
    let t = Instant::now();
    tokio::time::timeout(PROMPT, client.cancel())
        .await
        .expect("ours: close does not hang")
        .expect("close");
    let closed = t.elapsed();
    let record = session.record().await.expect("closed, not dropped");
    let left = group_members(pgid);
    eprintln!(
        "stubborn server, ours: closed in {closed:?}, ended by {:?}, group left {left:?}",
        record.process.ended_by
    );
    running.abort();
    assert!(left.is_empty(), "ours: the process group is gone");
    assert_eq!(
        record.process.ended_by,
        mcp_stdio_core::EndedBy::ExitedAfterKill
    );

    let (transport, _) = theirs_spawn(&args, Stdio::null());
    let pid = transport.id().expect("a pid");
    let client = ().serve(transport).await.expect("rmcp initializes");
    let peer = client.peer().clone();
    let running = tokio::spawn(async move { peer.call_tool(call("subprocess", grandchild)).await });
    let spawned = wait_for(|| !descendants(pid).is_empty()).await;
    let kids = descendants(pid);
    let t = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(20), client.cancel()).await;
    let closed = t.elapsed();
    let server_alive = pid_alive(pid);
    let kids_alive: Vec<u32> = kids.iter().copied().filter(|&k| pid_alive(k)).collect();
    eprintln!(
        "stubborn server, theirs: close {} after {closed:?}; server alive: {server_alive}; \
         grandchild started: {spawned}, still alive: {kids_alive:?}",
        if outcome.is_ok() {
            "returned"
        } else {
            "timed out"
        }
    );
    running.abort();
    let cleaned = clean_up_group(pid);
    eprintln!("theirs: the test killed what was left: {cleaned:?}");
}

/// Polls `cond` for up to [`PROMPT`].
async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < PROMPT {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}
