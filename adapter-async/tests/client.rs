//! The generic `Client` over the async-io runtime, against `cat` (which
//! echoes every request back as a server→client request).

use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future::or;
use mcp_stdio_async::{AsyncIo, Client, IncomingMessage};
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Implementation;
use mcp_stdio_core::RawValue;
use mcp_stdio_core::{ClientOptions, RequestError};
use mcp_stdio_core::{Deadline, RequestFailure};

/// The client declares its capabilities and info in `initialize`: the test
/// reads what `cat` got.
#[test]
fn initialize_declares_the_client_capabilities_and_info() {
    let mut options = ClientOptions::default();
    options
        .client_info(Implementation::new("my-host", "1.0.0"))
        .client_capabilities(Some(
            RawValue::from_string(r#"{"roots":{"listChanged":true},"sampling":{}}"#.into())
                .expect("JSON"),
        ));
    let client = Client::<AsyncIo>::spawn(&CommandSpec::new("cat"), options).expect("cat");
    async_io::block_on(async {
        let seen = async {
            loop {
                if let Some(IncomingMessage::Request(r, _)) = client.next_incoming().await {
                    if r.method == "initialize" {
                        return r.params.expect("params");
                    }
                }
            }
        };
        let init = async {
            let r = client.initialize().await;
            panic!("cat cannot answer initialize: {r:?}");
        };
        let params = or(seen, init).await;
        let v: serde_json::Value = serde_json::from_str(params.get()).expect("JSON");
        assert_eq!(v["capabilities"]["roots"]["listChanged"], true, "{v}");
        assert!(v["capabilities"]["sampling"].is_object(), "{v}");
        assert_eq!(v["clientInfo"]["name"], "my-host", "{v}");
        let _ = client.kill().await;
    });
}

/// G6: an explicit deadline. `After` times out at its duration, `None`
/// outlives a short session default, `Default` takes it.
#[test]
fn g6_request_deadline_after_none_and_default() {
    let mut options = ClientOptions::default();
    options
        .session_mut()
        .default_timeout(Some(Duration::from_millis(200)));
    let client = Client::<AsyncIo>::spawn(&CommandSpec::new("cat"), options).expect("cat");
    async_io::block_on(async {
        let t = Instant::now();
        let r = client
            .request_with_deadline("slow", None, Deadline::After(Duration::from_millis(50)))
            .await;
        let took = t.elapsed();
        assert!(
            matches!(
                r,
                Err(RequestError::Failed(RequestFailure::TimedOut { .. }))
            ),
            "{r:?}"
        );
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(5),
            "{took:?}"
        );
        let t = Instant::now();
        let r = client
            .request_with_deadline("slow", None, Deadline::Default)
            .await;
        assert!(
            matches!(
                r,
                Err(RequestError::Failed(RequestFailure::TimedOut { .. }))
            ),
            "{r:?}"
        );
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        let none = async {
            let r = client
                .request_with_deadline("slow", None, Deadline::None)
                .await;
            panic!("no deadline, yet it ended: {r:?}");
        };
        let waited = async {
            Timer::after(Duration::from_millis(600)).await;
        };
        or(none, waited).await;
        eprintln!("async-io: After(50 ms) timed out after {took:?}; None still waiting at 600 ms");
        let _ = client.kill().await;
    });
}

/// No hang at the session's end: a command queued just as the driver
/// finishes gets its answer (`None`, `SessionClosed`) at once instead of
/// waiting forever (an async-channel keeps its buffer, and the reply senders
/// in it, until the last sender is gone — the `Client` holds one). Many
/// short sessions (`sh -c 'exit 0'`), each asked for its metrics and a
/// request in a tight loop across the exit, hit the race.
#[test]
fn g11_commands_racing_the_end_of_a_session_are_answered() {
    let bound = Duration::from_secs(10);
    async_io::block_on(async {
        let t = Instant::now();
        for round in 0..40 {
            let client = Client::<AsyncIo>::spawn(
                &CommandSpec::from_argv(["sh", "-c", "exit 0"]).expect("argv"),
                ClientOptions::default(),
            )
            .expect("sh");
            let asks = async {
                let mut n = 0u32;
                loop {
                    n += 1;
                    let metrics = client.metrics().await;
                    let request = client
                        .request_with_deadline("tools/list", None, Deadline::None)
                        .await;
                    if metrics.is_none() && request.is_err() {
                        return n;
                    }
                }
            };
            let timeout = async {
                Timer::after(bound).await;
                panic!("round {round}: a command got no answer within {bound:?}");
            };
            or(asks, timeout).await;
            let record = client.wait().await;
            assert!(record.process.exit_status.is_some(), "round {round}");
        }
        eprintln!(
            "40 sessions ended with commands racing their end: {:?}",
            t.elapsed()
        );
    });
}
