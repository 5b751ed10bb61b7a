#![no_main]
//! Fuzz target `id_scan`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_id_scan`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_id_scan(data));
