#![no_main]
//! Fuzz target `hub`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_hub`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_hub(data));
