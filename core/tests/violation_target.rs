//! The WARN events about a peer's protocol violations carry a stable target,
//! whatever module emits them (README: Logging): a filter such as
//! `RUST_LOG=mcp_stdio_core::client=warn` keeps working when the core's files
//! move.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mcp_stdio_core::{
    ClientConfig, ClientSession, FramerConfig, ServerConfig, ServerSession,
    CLIENT_VIOLATION_TARGET, SERVER_VIOLATION_TARGET,
};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Records the target of every WARN event.
struct Targets(Arc<Mutex<Vec<String>>>, AtomicU64);

impl Subscriber for Targets {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.1.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            let mut seen = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.push(event.metadata().target().to_owned());
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn warn_targets(f: impl FnOnce()) -> Vec<String> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::with_default(Targets(seen.clone(), AtomicU64::new(0)), f);
    let seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.clone()
}

#[test]
fn g2_a_servers_garbage_is_warned_under_the_client_target() {
    let targets = warn_targets(|| {
        let mut session = ClientSession::new(ClientConfig::default(), FramerConfig::default());
        session.handle_stdout(Instant::now(), b"not json\n");
    });
    assert!(!targets.is_empty(), "no WARN for a line that is not JSON");
    assert!(
        targets.iter().all(|t| t == CLIENT_VIOLATION_TARGET),
        "targets: {targets:?}"
    );
    assert_eq!(CLIENT_VIOLATION_TARGET, "mcp_stdio_core::client");
}

#[test]
fn g2_a_clients_garbage_is_warned_under_the_server_target() {
    let targets = warn_targets(|| {
        let mut session = ServerSession::new(ServerConfig::default(), FramerConfig::default());
        session.handle_stdin(Instant::now(), b"not json\n");
    });
    assert!(!targets.is_empty(), "no WARN for a line that is not JSON");
    assert!(
        targets.iter().all(|t| t == SERVER_VIOLATION_TARGET),
        "targets: {targets:?}"
    );
    assert_eq!(SERVER_VIOLATION_TARGET, "mcp_stdio_core::server");
}
