//! An rmcp server written with rmcp's macros, served over mcp-stdio's stdio.
use mcp_stdio_rmcp::ServerTransport;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

struct Echo;

#[tool_router]
impl Echo {
    #[tool(description = "Send the text back")]
    fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.text
    }
}

#[tool_handler(name = "echo-server", version = "0.1.0")] // the rest of `ServerHandler`
impl ServerHandler for Echo {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let running = Echo.serve(ServerTransport::stdio()?).await?; // where rmcp's `stdio()` was
    running.waiting().await?; // until the client closes stdin
    Ok(())
}
