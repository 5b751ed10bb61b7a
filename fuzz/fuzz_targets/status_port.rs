#![no_main]
//! Fuzz target `status_port`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_status_port`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_status_port(data));
