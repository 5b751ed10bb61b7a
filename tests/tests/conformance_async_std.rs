//! The conformance suite against the async-std adapter.

mcp_stdio_tests::conformance_suite!(mcp_stdio_tests::async_std_adapter::AsyncStd);
