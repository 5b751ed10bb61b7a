//! mcp-stdio benchmarks (issue 7): not built yet; this crate is an empty placeholder.
