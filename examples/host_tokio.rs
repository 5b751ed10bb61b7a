//! A host on tokio: spawn any MCP server, list its tools, call one while its
//! progress comes in, call others from tasks of their own through a handle,
//! look at the live stderr tail, shut down and read the record.
//!
//! ```sh
//! cargo run -p mcp-stdio-examples --example host_tokio -- npx -y @modelcontextprotocol/server-everything
//! ```
//!
//! With server-everything, `trigger-long-running-operation` reports
//! progress; with another server, name a tool of it: `--tool NAME` and
//! `--args JSON` (before the server command).

use mcp_stdio_tokio::{Client, ClientOptions, CommandSpec};
use serde_json::{json, Value};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    let mut tool = "trigger-long-running-operation".to_owned();
    let mut args = json!({"duration": 2, "steps": 4});
    while argv.first().is_some_and(|a| a.starts_with("--")) {
        let flag = argv.remove(0);
        let value = if argv.is_empty() {
            return Err(format!("{flag} needs a value").into());
        } else {
            argv.remove(0)
        };
        match flag.as_str() {
            "--tool" => tool = value,
            "--args" => args = serde_json::from_str(&value)?,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    let server = CommandSpec::from_argv(&argv)
        .ok_or("usage: host_tokio [--tool NAME] [--args JSON] SERVER_COMMAND [ARGS…]")?;
    let client = Client::spawn(&server, ClientOptions::default())?;
    let negotiated = client.initialize().await?;
    eprintln!(
        "connected: protocol {} via {:?}",
        negotiated.protocol_version, negotiated.via
    );

    // The tools, raw: typed models are rmcp's job.
    let listed: Value = serde_json::from_str(client.list_tools(None).await?.get())?;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    eprintln!("{} tools: {}", names.len(), names.join(", "));

    // A call's progress, on a stream of its own; it ends with the call.
    let (call, mut progress) = client.call_tool_with_progress(&tool, &args).await?;
    while let Some(p) = progress.next().await {
        eprintln!(
            "  progress {} of {:?} {}",
            p.progress,
            p.total,
            p.message.unwrap_or_default()
        );
    }
    eprintln!("{tool}: {}", call.await?.get());

    // Handles go into tasks; the session is the client's.
    let mut tasks = Vec::new();
    for i in 0..3 {
        let handle = client.handle();
        tasks.push(tokio::spawn(async move {
            handle
                .call_tool("echo", &json!({"message": format!("from task {i}")}))
                .await
        }));
    }
    for t in tasks {
        match t.await? {
            Ok(r) => eprintln!("echo: {}", r.get()),
            Err(e) => eprintln!("echo failed: {e}"),
        }
    }

    if let Some(live) = client.snapshot(512).await {
        eprintln!(
            "live: {} requests sent, {} stderr bytes so far; tail:\n{}",
            live.metrics.requests_sent, live.stderr_seen, live.stderr_tail
        );
    }
    let record = client.shutdown().await;
    eprintln!(
        "exit {:?}, ended {:?}, stderr {} bytes seen",
        record.exit_status(),
        record.process.ended_by,
        record.stderr.seen
    );
    Ok(())
}
