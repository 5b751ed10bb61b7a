//! `client-host` — a host process that runs one `Client` of the adapter it is
//! told, for the tests of G11's "a host crash leaves nothing behind": the
//! tests SIGKILL this process and look for its server.
//!
//! ```text
//! USAGE: client-host ADAPTER [--from-exiting-thread]
//!
//!   ADAPTER                 tokio | async-std | blocking
//!   --from-exiting-thread   Client::spawn runs on a thread that exits right after;
//!                           the client then pings its server from the main thread
//! ```
//!
//! The server is `fixture-server --ignore-stdin-eof`: it outlives the end of
//! its stdin, so only a signal ends it. stdout lines, in order:
//!
//! - `server pid N` once the handshake is done;
//! - with `--from-exiting-thread`: `spawning thread exited`, then
//!   `ping answered after the spawning thread exited` (the server is alive
//!   and serving).
//!
//! Then the host waits until its stdin reaches EOF, kills the server's group
//! (`Client::kill`) and exits 0. Errors go to stderr, exit status 1.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use mcp_stdio_core::ClientOptions;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_tests::fixture_server_path;

/// How long the host waits after the spawning thread exited before it pings:
/// long enough for a parent-death signal tied to that thread to have landed.
const AFTER_THREAD_EXIT: Duration = Duration::from_millis(300);

fn server() -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_server_path());
    spec.arg("--ignore-stdin-eof");
    spec
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The test reads these lines; a closed stdout just ends the conversation.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Blocks until stdin reaches EOF (or fails).
fn wait_for_stdin_eof() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

fn tokio_host(from_thread: bool) -> Result<(), String> {
    use mcp_stdio_tokio::Client;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let client = if from_thread {
        let handle = rt.handle().clone();
        let client = std::thread::spawn(move || {
            let _entered = handle.enter();
            Client::spawn(&server(), ClientOptions::default())
        })
        .join()
        .map_err(|_| "the spawning thread panicked".to_owned())?
        .map_err(|e| format!("spawn: {e}"))?;
        say("spawning thread exited");
        client
    } else {
        let _entered = rt.enter();
        Client::spawn(&server(), ClientOptions::default()).map_err(|e| format!("spawn: {e}"))?
    };
    rt.block_on(async {
        client
            .initialize()
            .await
            .map_err(|e| format!("initialize: {e}"))?;
        say(&format!("server pid {}", client.pid()));
        if from_thread {
            tokio::time::sleep(AFTER_THREAD_EXIT).await;
            client
                .request("ping", None)
                .await
                .map_err(|e| format!("ping: {e}"))?;
            say("ping answered after the spawning thread exited");
        }
        Ok::<_, String>(())
    })?;
    wait_for_stdin_eof();
    rt.block_on(client.kill());
    Ok(())
}

fn async_std_host(from_thread: bool) -> Result<(), String> {
    use mcp_stdio_async_std::Client;
    let client = if from_thread {
        let client = std::thread::spawn(|| Client::spawn(&server(), ClientOptions::default()))
            .join()
            .map_err(|_| "the spawning thread panicked".to_owned())?
            .map_err(|e| format!("spawn: {e}"))?;
        say("spawning thread exited");
        client
    } else {
        Client::spawn(&server(), ClientOptions::default()).map_err(|e| format!("spawn: {e}"))?
    };
    async_std::task::block_on(async {
        client
            .initialize()
            .await
            .map_err(|e| format!("initialize: {e}"))?;
        say(&format!("server pid {}", client.pid()));
        if from_thread {
            async_std::task::sleep(AFTER_THREAD_EXIT).await;
            client
                .request("ping", None)
                .await
                .map_err(|e| format!("ping: {e}"))?;
            say("ping answered after the spawning thread exited");
        }
        Ok::<_, String>(())
    })?;
    wait_for_stdin_eof();
    async_std::task::block_on(client.kill());
    Ok(())
}

fn blocking_host(from_thread: bool) -> Result<(), String> {
    use mcp_stdio_blocking::Client;
    let client = if from_thread {
        let client = std::thread::spawn(|| Client::spawn(&server(), ClientOptions::default()))
            .join()
            .map_err(|_| "the spawning thread panicked".to_owned())?
            .map_err(|e| format!("spawn: {e}"))?;
        say("spawning thread exited");
        client
    } else {
        Client::spawn(&server(), ClientOptions::default()).map_err(|e| format!("spawn: {e}"))?
    };
    client
        .initialize()
        .map_err(|e| format!("initialize: {e}"))?;
    say(&format!("server pid {}", client.pid()));
    if from_thread {
        std::thread::sleep(AFTER_THREAD_EXIT);
        client
            .request("ping", None)
            .map_err(|e| format!("ping: {e}"))?;
        say("ping answered after the spawning thread exited");
    }
    wait_for_stdin_eof();
    client.kill();
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let from_thread = args.iter().any(|a| a == "--from-exiting-thread");
    let result = match args.first().map(String::as_str) {
        Some("tokio") => tokio_host(from_thread),
        Some("async-std") => async_std_host(from_thread),
        Some("blocking") => blocking_host(from_thread),
        _ => Err("usage: client-host tokio|async-std|blocking [--from-exiting-thread]".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("client-host: {e}");
            ExitCode::FAILURE
        }
    }
}
