#![no_main]
//! Fuzz target `supervisor`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_supervisor`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_supervisor(data));
