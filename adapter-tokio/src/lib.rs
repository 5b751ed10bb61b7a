//! mcp-stdio tokio adapter (issue 4): not built yet; this crate is an empty placeholder.
