#![no_main]
//! Fuzz target `session_pair`: the logic lives in `mcp_stdio_core::fuzzing::fuzz_session_pair`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mcp_stdio_core::fuzzing::fuzz_session_pair(data));
