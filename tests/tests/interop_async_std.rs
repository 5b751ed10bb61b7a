//! Interop with real MCP peers (server-everything, the Python `mcp` package)
//! through the async-std adapter; `serve-async-std` is its `serve` binary. Install the
//! peers first: `tests/interop/setup.sh`.

mcp_stdio_tests::interop_suite!(
    mcp_stdio_tests::async_std_adapter::AsyncStd,
    "serve-async-std"
);
