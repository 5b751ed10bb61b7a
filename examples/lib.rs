//! The examples of mcp-stdio, one per persona; see `examples/README.md`.
//! Nothing here: the examples are the package's `[[example]]` targets.
