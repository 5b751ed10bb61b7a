//! mcp-stdio async-std adapter (issue 5): not built yet; this crate is an empty placeholder.
