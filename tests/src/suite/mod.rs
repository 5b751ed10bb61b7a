//! The conformance suite: every release gate of the design, written once,
//! generic over the adapter ([`crate::adapter::Adapter`]), run through real
//! process spawns. `tests/tests/conformance_<adapter>.rs` instantiates it
//! with [`conformance_suite!`](crate::conformance_suite).
//!
//! Bounds are generous (seconds) so a loaded CI machine never flakes; each
//! test prints what it measured.

use std::time::{Duration, Instant};

use mcp_stdio_core::host::{ClientOptions, RequestError};
use mcp_stdio_core::message::{to_raw, RawValue};
use mcp_stdio_core::CommandSpec;
use serde_json::{json, Value};

use crate::adapter::{Adapter, SuiteClient};
use crate::fixture_server_path;

mod cases;
pub use cases::*;

/// The fixture server with these flags.
pub fn fixture_server(flags: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_server_path());
    spec.args(flags);
    spec
}

/// Options with a wire limit and short shutdown graces, so tests are quick.
pub fn options(max_frame: usize) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.config.session_mut().max_frame(max_frame);
    options
        .config
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(500))
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    options
}

/// Spawns the fixture server and runs the handshake.
pub fn start<A: Adapter>(flags: &[&str], options: ClientOptions) -> Box<A::Client> {
    let client = A::spawn(&fixture_server(flags), options)
        .unwrap_or_else(|e| panic!("{}: spawning the fixture server: {e}", A::NAME));
    let init = client
        .initialize()
        .unwrap_or_else(|e| panic!("{}: initialize: {e}", A::NAME));
    assert_eq!(init.server_info.name, "fixture-server");
    Box::new(client)
}

/// `tools/call` params for `name` with `arguments`.
pub fn tool(name: &str, arguments: Value) -> Option<Box<RawValue>> {
    Some(to_raw(&json!({ "name": name, "arguments": arguments })).expect("JSON serializes"))
}

/// A `ping` that must complete within `within`; returns its latency.
pub fn ping_within<C: SuiteClient + ?Sized>(client: &C, within: Duration) -> Duration {
    let t = Instant::now();
    let r = client.request("ping", None, Some(within));
    let took = t.elapsed();
    assert!(r.is_ok(), "ping failed after {took:?}: {r:?}");
    took
}

/// The text of the first content block of a tool result.
pub fn first_text(result: &RawValue) -> String {
    let v: Value = serde_json::from_str(result.get()).expect("a result is JSON");
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "no text content in {}",
                &result.get()[..result.get().len().min(200)]
            )
        })
        .to_owned()
}

/// Asserts a request failed with `ResponseTooLarge`.
pub fn assert_too_large(r: &Result<Box<RawValue>, RequestError>, limit: usize) {
    match r {
        Err(RequestError::Failed(mcp_stdio_core::client::RequestFailure::ResponseTooLarge {
            limit: l,
            ..
        })) => assert_eq!(*l, limit),
        other => panic!(
            "expected ResponseTooLarge, got {:?}",
            other.as_ref().map(|v| v.get().len())
        ),
    }
}

/// Instantiates every conformance test for one adapter type.
#[macro_export]
macro_rules! conformance_suite {
    ($adapter:ty) => {
        $crate::conformance_suite!(@each $adapter;
            g1_handshake_ping_echo_and_shutdown_record,
            g1_8_mib_response_completes_while_the_application_is_busy,
            g2_g3_response_just_under_the_limit_passes_just_over_fails_at_once,
            g8_cancel_during_slow_work_then_ping_completes_promptly,
        );
    };
    (@each $adapter:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::suite::$name::<$adapter>();
            }
        )*
    };
}
