//! Interop with real MCP peers (server-everything, the Python `mcp` package)
//! through the blocking adapter; `serve-blocking` is its `serve` binary. Install the
//! peers first: `tests/interop/setup.sh`.

mcp_stdio_tests::interop_suite!(
    mcp_stdio_tests::blocking_adapter::Blocking,
    "serve-blocking"
);
