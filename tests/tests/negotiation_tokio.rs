//! Protocol negotiation (2026-07-28 probe, fallback, pins) through the tokio adapter.

mcp_stdio_tests::negotiation_suite!(mcp_stdio_tests::tokio_adapter::Tokio);
