//! An rmcp client over mcp-stdio's stdio: rmcp's typed API, the session's record at the end.
use mcp_stdio_rmcp::{ClientOptions, ClientTransport, CommandSpec};
use rmcp::ServiceExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut server = CommandSpec::new("npx");
    server.args(["-y", "@modelcontextprotocol/server-everything"]);
    let transport = ClientTransport::spawn(&server, ClientOptions::default())?;
    let mut session = transport.session(); // the record comes back through it
    let client = ().serve(transport).await?; // where `TokioChildProcess` was
    let tools = client.list_all_tools().await?;
    eprintln!("{} tools", tools.len());
    client.cancel().await?; // stdin close → SIGTERM → SIGKILL to the group
    let record = session.record().await.ok_or("no record")?; // exit status, stderr tail, counters
    eprintln!("exit status {:?}", record.exit_status());
    Ok(())
}
