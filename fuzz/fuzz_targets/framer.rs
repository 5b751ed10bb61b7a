#![no_main]
//! Fuzz target `framer`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_framer`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_framer(data));
