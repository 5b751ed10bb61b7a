//! A host on plain threads: spawn a server, call a tool from two threads
//! through handles, follow a long call's progress (an iterator that ends
//! with the call), and shut down. The front page of `mcp-stdio-blocking`
//! shows this file.
//!
//! `cargo run -p mcp-stdio-blocking --example threads_host`

use mcp_stdio_blocking::{Client, ClientOptions, CommandSpec};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = CommandSpec::from_argv(["npx", "-y", "@modelcontextprotocol/server-everything"])
        .ok_or("no command")?;
    let client = Client::spawn(&server, ClientOptions::default())?;
    client.initialize()?;
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let handle = client.handle();
            std::thread::spawn(move || {
                handle.call_tool("echo", &json!({"message": format!("from {i}")}))
            })
        })
        .collect();
    for w in workers {
        eprintln!("{}", w.join().expect("thread")?.get());
    }
    let (call, progress) = client.call_tool_with_progress(
        "trigger-long-running-operation",
        &json!({"duration": 2, "steps": 4}),
    )?;
    for p in progress {
        eprintln!("progress {} of {:?}", p.progress, p.total);
    }
    eprintln!("result: {}", call.wait()?.get());
    let record = client.shutdown();
    eprintln!("exit {:?}", record.exit_status());
    Ok(())
}
