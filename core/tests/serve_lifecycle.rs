//! `ServeLifecycle` under any order of inputs, from random bytes: the op
//! model and its invariants are the `serve` fuzz target's
//! (`mcp_stdio_core::fuzz_serve`; see its docs). Policy: a panic is a
//! bug, never bad input.

use mcp_stdio_core::fuzzing::fuzz_serve;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn g1_any_order_of_inputs_keeps_the_bounds_and_always_ends(
        data in proptest::collection::vec(any::<u8>(), 0..4096)
    ) {
        fuzz_serve(&data);
    }
}
