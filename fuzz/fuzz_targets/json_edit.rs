#![no_main]
//! Fuzz target `json_edit`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_json_edit`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_json_edit(data));
