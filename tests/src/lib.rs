//! mcp-stdio conformance suite (issue 4): not built yet; this crate is an empty placeholder.
