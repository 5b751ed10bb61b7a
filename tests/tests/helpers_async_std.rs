//! The helper gates of the conformance suite against the async-std adapter.

mcp_stdio_tests::helper_suite!(mcp_stdio_tests::async_std_adapter::AsyncStd);
