//! The helper gates of the conformance suite against the blocking adapter.

mcp_stdio_tests::helper_suite!(mcp_stdio_tests::blocking_adapter::Blocking);
