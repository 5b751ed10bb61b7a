//! G1 with a stalled log: the process's `tracing` subscriber blocks forever
//! on every event it would write (as one writing to a stderr nobody reads
//! does once the pipe is full). A chatty server's stderr lines are forwarded
//! to the logs, yet every adapter's `Client` keeps reading stdout and
//! answering: the lines go through the log relay, which drops and counts
//! them instead of waiting.
//!
//! Its own test binary: the subscriber is global to the process.

use std::sync::Once;
use std::time::{Duration, Instant};

use mcp_stdio_tests::adapter::{Adapter, SuiteClient};
use mcp_stdio_tests::async_std_adapter::AsyncStd;
use mcp_stdio_tests::blocking_adapter::Blocking;
use mcp_stdio_tests::suite::{
    bounded, first_text, options, shutdown_within, start, tool, LeakCheck, LONG, PROMPT,
};
use mcp_stdio_tests::tokio_adapter::Tokio;
use serde_json::json;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Writes nothing and never returns from an INFO-or-above event.
struct StuckLog;

impl Subscriber for StuckLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {
        loop {
            std::thread::park();
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        tracing::subscriber::set_global_default(StuckLog).expect("the only subscriber");
    });
}

fn g1_client_keeps_reading_while_the_log_subscriber_is_stuck<A: Adapter>() {
    install();
    let mut leaks = LeakCheck::new::<A>("g1_stuck_log");
    let mut opts = options(1 << 20);
    // Enough forwarded lines to pass the relay's queue many times over.
    opts.stderr_forward_mut()
        .max_total_bytes(4 << 20)
        .max_queued_lines(4096);
    let client = start::<A>(&mut leaks, &["--noisy-stderr", "400000"], opts);
    let t = Instant::now();
    let mut calls = 0_u32;
    let mut slowest = Duration::ZERO;
    while t.elapsed() < Duration::from_secs(2) {
        let text = format!("call {calls}");
        let c = Instant::now();
        let r = client
            .request(
                "tools/call",
                tool("echo", json!({ "text": text })),
                Some(PROMPT),
            )
            .unwrap_or_else(|e| panic!("{}: call {calls}: {e}", A::NAME));
        assert_eq!(first_text(&r), text);
        slowest = slowest.max(c.elapsed());
        calls += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let dropped = mcp_stdio_sys::log_relay::server_stderr_lines_dropped();
    let (record, took) = shutdown_within::<A>(client, LONG);
    assert!(
        dropped > 0,
        "{}: the relay dropped nothing: the subscriber was never reached",
        A::NAME
    );
    eprintln!(
        "{}: log subscriber stuck: {calls} calls in 2 s, slowest {slowest:?}; {} stderr lines \
         forwarded by the session, {dropped} dropped by the relay so far; shutdown {took:?}",
        A::NAME,
        record.stderr_lines_forwarded
    );
    leaks.assert_none_left();
}

/// Runs `f` bounded, so a stalled loop fails instead of hanging the run.
fn run(f: fn()) {
    bounded(Duration::from_secs(60), "the case", f);
}

#[test]
fn g1_tokio_client_keeps_reading_while_the_log_subscriber_is_stuck() {
    run(g1_client_keeps_reading_while_the_log_subscriber_is_stuck::<Tokio>);
}

#[test]
fn g1_async_std_client_keeps_reading_while_the_log_subscriber_is_stuck() {
    run(g1_client_keeps_reading_while_the_log_subscriber_is_stuck::<AsyncStd>);
}

#[test]
fn g1_blocking_client_keeps_reading_while_the_log_subscriber_is_stuck() {
    run(g1_client_keeps_reading_while_the_log_subscriber_is_stuck::<Blocking>);
}
