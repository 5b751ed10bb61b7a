#![no_main]
//! Fuzz target `guard_session`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_guard_session`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_guard_session(data));
