//! The conformance suite against the blocking adapter.

mcp_stdio_tests::conformance_suite!(mcp_stdio_tests::blocking_adapter::Blocking);
