//! The same client as the tokio example, with plain blocking calls.
//!
//! `cargo run -p mcp-stdio-blocking --example blocking_client -- SERVER_COMMAND [ARGS…]`

use std::time::Duration;

use mcp_stdio_blocking::core::to_raw;
use mcp_stdio_blocking::{Client, ClientOptions, CommandSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let command = CommandSpec::from_argv(&argv).ok_or("usage: client SERVER_COMMAND [ARGS…]")?;
    let client = Client::spawn(&command, ClientOptions::default())?;
    let init = client.initialize()?;
    let name = init.server_info.as_ref().map_or("?", |i| i.name.as_str());
    eprintln!("connected to {name} (protocol {})", init.protocol_version);
    let params = to_raw(&serde_json::json!({"name": "echo", "arguments": {"text": "hi"}}))?;
    match client.request_with_timeout("tools/call", Some(params), Some(Duration::from_secs(5))) {
        Ok(result) => eprintln!("echo: {}", result.get()),
        Err(e) => eprintln!("echo failed: {e}"),
    }
    // Cancel from another thread while this one waits.
    let pending = client.start_request("ping", None, None)?;
    let cancel = pending.cancel_handle();
    std::thread::spawn(move || cancel.cancel("no longer needed"));
    let _ = pending.wait();
    let record = client.shutdown();
    eprintln!(
        "exit {:?} via {:?}",
        record.exit_status(),
        record.process.ended_by
    );
    Ok(())
}
