//! The helper gates of the conformance suite against the tokio adapter.

mcp_stdio_tests::helper_suite!(mcp_stdio_tests::tokio_adapter::Tokio);
