#![no_main]
//! Fuzz target `serve`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_serve`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_serve(data));
