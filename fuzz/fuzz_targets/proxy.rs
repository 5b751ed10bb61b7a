#![no_main]
//! Fuzz target `proxy`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_proxy`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_proxy(data));
