//! G11 for a `Client` dropped while its inbox holds messages the
//! application never read (server notifications): the server's group is
//! killed, the driver reaps it (no zombie) and goes quiet (no busy loop).
//! Found by the soak (`mcp-stdio-bench soak`, SOAK.md): the tokio driver
//! spun at 100% CPU on the closed incoming channel and never reaped the
//! server, freezing the runtime's other sessions.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use mcp_stdio_core::to_raw;
use mcp_stdio_core::ClientOptions;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_tests::{fixture_server_path, proc_stat, wait_until};
use serde_json::json;

/// Generous: a kill and a reap take milliseconds.
const REAPED_WITHIN: Duration = Duration::from_secs(5);
/// How long the process's CPU time is watched after the drop.
const QUIET_WINDOW: Duration = Duration::from_secs(1);
/// CPU this process may use in [`QUIET_WINDOW`]: a busy loop uses all of it.
const QUIET_CPU: Duration = Duration::from_millis(300);
/// Notifications sent before the result: more than the channel holds, so
/// the core's inbox keeps some.
const NOTIFICATIONS: u64 = 20;

fn params() -> Option<Box<mcp_stdio_core::RawValue>> {
    Some(
        to_raw(&json!({"name": "notify_then_result", "arguments": {"count": NOTIFICATIONS}}))
            .expect("params serialize"),
    )
}

/// CPU time of this process (user + system) from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let rest = &stat[stat.rfind(')').expect("comm ends") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are 11 and 12 after the state.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

/// After the drop: the server is reaped (gone from /proc, not a zombie)
/// and this process is not spinning. `Err` says which failed.
fn reaped_and_quiet(adapter: &str, pid: u32) -> Result<(), String> {
    let start = Instant::now();
    let reaped = wait_until(REAPED_WITHIN, Duration::from_millis(10), || {
        proc_stat(pid).is_none()
    });
    if reaped.is_none() {
        return Err(format!(
            "{adapter}: server {pid} not reaped {REAPED_WITHIN:?} after the drop: {:?}",
            proc_stat(pid)
        ));
    }
    let cpu = cpu_time();
    std::thread::sleep(QUIET_WINDOW);
    let used = cpu_time().saturating_sub(cpu);
    eprintln!(
        "{adapter}: server reaped {:?} after the drop; {used:?} of CPU in the next {QUIET_WINDOW:?}",
        start.elapsed()
    );
    if used >= QUIET_CPU {
        return Err(format!(
            "{adapter}: {used:?} of CPU in {QUIET_WINDOW:?} after the drop: a busy loop"
        ));
    }
    Ok(())
}

#[test]
fn g11_tokio_client_dropped_with_unread_notifications_reaps_its_server() {
    // One worker: a driver that never yields then starves the I/O driver
    // that would see the exit (with two, it took two such drivers at once).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let client = rt.block_on(async {
        let client = mcp_stdio_tokio::Client::spawn(
            &CommandSpec::new(fixture_server_path()),
            ClientOptions::default(),
        )
        .expect("spawn");
        client.initialize().await.expect("initialize");
        client
            .request("tools/call", params())
            .await
            .expect("notify_then_result");
        client
    });
    let pid = client.pid();
    drop(client);
    // The runtime lives on, as a host's does: its driver task must end by itself.
    if let Err(e) = reaped_and_quiet("tokio", pid) {
        // Dropping a runtime whose worker never yields would hang the test.
        std::mem::forget(rt);
        panic!("{e}");
    }
    drop(rt);
}

#[test]
fn g11_async_std_client_dropped_with_unread_notifications_reaps_its_server() {
    let client = async_std::task::block_on(async {
        let client = mcp_stdio_async_std::Client::spawn(
            &CommandSpec::new(fixture_server_path()),
            ClientOptions::default(),
        )
        .expect("spawn");
        client.initialize().await.expect("initialize");
        client
            .request("tools/call", params())
            .await
            .expect("notify_then_result");
        client
    });
    let pid = client.pid();
    drop(client);
    reaped_and_quiet("async-std", pid).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn g11_blocking_client_dropped_with_unread_notifications_reaps_its_server() {
    let client = mcp_stdio_blocking::Client::spawn(
        &CommandSpec::new(fixture_server_path()),
        ClientOptions::default(),
    )
    .expect("spawn");
    client.initialize().expect("initialize");
    client
        .request("tools/call", params())
        .expect("notify_then_result");
    let pid = client.pid();
    drop(client);
    reaped_and_quiet("blocking", pid).unwrap_or_else(|e| panic!("{e}"));
}
