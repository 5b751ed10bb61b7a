//! An rmcp client over mcp-stdio's hardened stdio: rmcp's typed client API
//! where `TokioChildProcess` was, and the session's record at the end.
//!
//! ```sh
//! cargo run -p mcp-stdio-rmcp --example rmcp_client -- npx -y @modelcontextprotocol/server-everything
//! ```

use mcp_stdio_rmcp::{ClientOptions, ClientTransport, CommandSpec};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let server =
        CommandSpec::from_argv(&argv).ok_or("usage: rmcp_client SERVER_COMMAND [ARGS…]")?;
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(8 * 1024 * 1024); // the wire limit, both ways
    let transport = ClientTransport::spawn(&server, options)?;
    // Kept: the record comes back through it once rmcp is done.
    let mut session = transport.session();
    let client = ().serve(transport).await?; // rmcp does the handshake
    let tools = client.list_all_tools().await?;
    eprintln!(
        "{} tools: {}",
        tools.len(),
        tools
            .iter()
            .map(|t| t.name.as_ref())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if tools.iter().any(|t| t.name == "echo") {
        let mut args = serde_json::Map::new();
        args.insert("message".into(), "hello over mcp-stdio".into());
        let result = client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await?;
        eprintln!("echo: {:?}", result.content);
    }
    // stdin close → SIGTERM → SIGKILL to the group (G11), whatever the server does.
    client.cancel().await?;
    if let Some(record) = session.record().await {
        eprintln!(
            "exit {:?}, ended {:?}, stderr {} bytes seen",
            record.exit_status(),
            record.process.ended_by,
            record.stderr.seen
        );
    }
    Ok(())
}
