//! The conformance suite against the tokio adapter.

mcp_stdio_tests::conformance_suite!(mcp_stdio_tests::tokio_adapter::Tokio);
