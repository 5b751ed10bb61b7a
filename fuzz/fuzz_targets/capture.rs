#![no_main]
//! Fuzz target `capture`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_capture`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_capture(data));
