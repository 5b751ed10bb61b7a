//! Protocol negotiation (2026-07-28 probe, fallback, pins) through the async_std adapter.

mcp_stdio_tests::negotiation_suite!(mcp_stdio_tests::async_std_adapter::AsyncStd);
