//! mcp-stdio blocking threads + mio adapter (issue 5): not built yet; this crate is an empty placeholder.
