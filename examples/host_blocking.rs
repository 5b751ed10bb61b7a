//! A host on plain threads (no async runtime): spawn any MCP server, call
//! tools from several threads through handles, follow a long call's
//! progress, shut down.
//!
//! ```sh
//! cargo run -p mcp-stdio-examples --example host_blocking -- npx -y @modelcontextprotocol/server-everything
//! ```

use mcp_stdio_blocking::{Client, ClientOptions, CommandSpec};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let server =
        CommandSpec::from_argv(&argv).ok_or("usage: host_blocking SERVER_COMMAND [ARGS…]")?;
    let client = Client::spawn(&server, ClientOptions::default())?;
    client.initialize()?;
    eprintln!("tools: {}", client.list_tools(None)?.get());

    let workers: Vec<_> = (0..3)
        .map(|i| {
            let handle = client.handle();
            std::thread::spawn(move || {
                handle.call_tool("echo", &json!({"message": format!("from thread {i}")}))
            })
        })
        .collect();
    for w in workers {
        match w.join() {
            Ok(Ok(r)) => eprintln!("echo: {}", r.get()),
            Ok(Err(e)) => eprintln!("echo failed: {e}"),
            Err(_) => eprintln!("a worker panicked"),
        }
    }

    let (call, progress) = client.call_tool_with_progress(
        "trigger-long-running-operation",
        &json!({"duration": 2, "steps": 4}),
    )?;
    for p in progress {
        eprintln!("  progress {} of {:?}", p.progress, p.total);
    }
    eprintln!("result: {}", call.wait()?.get());

    let record = client.shutdown();
    eprintln!(
        "exit {:?}, ended {:?}",
        record.exit_status(),
        record.process.ended_by
    );
    Ok(())
}
