#![no_main]
//! Fuzz target `helper_run`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_helper_run`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_helper_run(data));
