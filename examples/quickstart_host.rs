//! A host on tokio: spawn a server, list its tools, call one with its progress, shut down.
use mcp_stdio_tokio::{Client, ClientOptions, CommandSpec};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut server = CommandSpec::new("npx");
    server.args(["-y", "@modelcontextprotocol/server-everything"]);
    let client = Client::spawn(&server, ClientOptions::default())?;
    client.initialize().await?; // server/discover or initialize, negotiated
    let tools = client.list_tools(None).await?; // raw JSON; typed models are rmcp's job
    eprintln!("tools: {}", tools.get());
    let args = json!({"duration": 2, "steps": 4});
    let (call, mut progress) = client
        .call_tool_with_progress("trigger-long-running-operation", &args)
        .await?;
    while let Some(p) = progress.next().await {
        eprintln!("progress: {} of {:?}", p.progress, p.total);
    }
    eprintln!("result: {}", call.await?.get());
    let record = client.shutdown().await; // exit status, stderr tail, counters
    eprintln!("exit status {:?}", record.exit_status());
    Ok(())
}
