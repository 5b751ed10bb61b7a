//! Rate limit for the WARN events about a peer's protocol violations.
//!
//! A peer that writes garbage can break the protocol on every line; a WARN
//! per line would let it flood the log. Each session lets through at most
//! [`VIOLATION_WARNINGS_PER_INTERVAL`] warnings per
//! [`VIOLATION_WARNING_INTERVAL`]; the rest are counted, and the next warning
//! that gets through carries that count as its `suppressed` field. The
//! session's metrics still count every violation. The core has no clock: the
//! interval is measured on the `now` given to the session's `handle_*` call.
//! Memory: a few words per session, whatever the peer sends.

use std::time::{Duration, Instant};

/// Protocol-violation warnings a session emits per
/// [`VIOLATION_WARNING_INTERVAL`] at most; the rest are counted.
pub const VIOLATION_WARNINGS_PER_INTERVAL: u32 = 10;

/// The window of [`VIOLATION_WARNINGS_PER_INTERVAL`].
pub const VIOLATION_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// The `tracing` target of the WARN events about a server's protocol
/// violations, seen by a client session (and the guard's server side): a
/// stable name to filter on, whatever module emits them.
pub const CLIENT_VIOLATION_TARGET: &str = "mcp_stdio_core::client";

/// The `tracing` target of the WARN events about a client's protocol
/// violations, seen by a server session (and the guard's host side).
pub const SERVER_VIOLATION_TARGET: &str = "mcp_stdio_core::server";

/// Lets through at most `max` warnings per `interval` and counts the rest.
#[derive(Debug, Clone)]
pub(crate) struct ViolationLog {
    max: u32,
    interval: Duration,
    /// Start of the current window; `None` before the first warning.
    window_start: Option<Instant>,
    /// Warnings let through in the current window.
    emitted: u32,
    /// Warnings held back since the last one let through.
    suppressed: u64,
}

impl Default for ViolationLog {
    fn default() -> Self {
        Self::new(VIOLATION_WARNINGS_PER_INTERVAL, VIOLATION_WARNING_INTERVAL)
    }
}

impl ViolationLog {
    pub(crate) const fn new(max: u32, interval: Duration) -> Self {
        Self {
            max,
            interval,
            window_start: None,
            emitted: 0,
            suppressed: 0,
        }
    }

    /// Whether a warning at `now` may be emitted. `Some(n)`: emit it, noting
    /// that `n` warnings were held back before it; `None`: it was counted.
    #[must_use]
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        let expired = match self.window_start {
            None => true,
            // A `now` earlier than the window start (an out-of-order caller)
            // stays in the current window.
            Some(start) => now.saturating_duration_since(start) >= self.interval,
        };
        if expired {
            self.window_start = Some(now);
            self.emitted = 0;
        }
        if self.emitted < self.max {
            self.emitted += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            None
        }
    }
}

/// Emits a WARN about a peer's protocol violation with target `$target`
/// ([`CLIENT_VIOLATION_TARGET`] or [`SERVER_VIOLATION_TARGET`]) through
/// `$log`, a [`ViolationLog`], at `$now`; the event carries `suppressed`, the
/// warnings held back before it.
macro_rules! warn_violation {
    ($target:expr, $log:expr, $now:expr, $($rest:tt)+) => {
        if let Some(suppressed) = $log.admit($now) {
            tracing::warn!(target: $target, suppressed, $($rest)+);
        }
    };
}
pub(crate) use warn_violation;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_per_interval_then_the_count_of_suppressed() {
        let t0 = Instant::now();
        let mut log = ViolationLog::new(3, Duration::from_secs(10));
        let in_window: Vec<_> = (0..10)
            .map(|i| log.admit(t0 + Duration::from_millis(i)))
            .collect();
        assert_eq!(
            in_window,
            [
                Some(0),
                Some(0),
                Some(0),
                None,
                None,
                None,
                None,
                None,
                None,
                None
            ]
        );
        // Still inside the window: counted, not emitted.
        assert_eq!(log.admit(t0 + Duration::from_millis(9_999)), None);
        // The next window lets one through with the 8 held back before it.
        assert_eq!(log.admit(t0 + Duration::from_secs(10)), Some(8));
        assert_eq!(log.admit(t0 + Duration::from_secs(11)), Some(0));
        assert_eq!(log.admit(t0 + Duration::from_secs(12)), Some(0));
        assert_eq!(log.admit(t0 + Duration::from_secs(13)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(25)), Some(1));
    }

    #[test]
    fn a_flood_of_a_million_violations_emits_a_bounded_number() {
        let t0 = Instant::now();
        let mut log = ViolationLog::default();
        // One violation per microsecond for one second: one window.
        let emitted = (0..1_000_000u64)
            .filter(|&i| log.admit(t0 + Duration::from_micros(i)).is_some())
            .count();
        assert_eq!(emitted, VIOLATION_WARNINGS_PER_INTERVAL as usize);
        let next = t0 + VIOLATION_WARNING_INTERVAL + Duration::from_secs(1);
        assert_eq!(
            log.admit(next),
            Some(1_000_000 - u64::from(VIOLATION_WARNINGS_PER_INTERVAL))
        );
    }

    /// Counts the WARN events of the thread it is the default for, and the
    /// largest `suppressed` among them.
    #[derive(Default)]
    struct WarnCount {
        warns: std::sync::atomic::AtomicU64,
        max_suppressed: std::sync::atomic::AtomicU64,
    }

    struct Suppressed(u64);
    impl tracing::field::Visit for Suppressed {
        fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
            if field.name() == "suppressed" {
                self.0 = value;
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for &'static WarnCount {
        fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
            *m.level() <= tracing::Level::WARN
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            use std::sync::atomic::Ordering::Relaxed;
            let mut s = Suppressed(0);
            e.record(&mut s);
            self.warns.fetch_add(1, Relaxed);
            self.max_suppressed.fetch_max(s.0, Relaxed);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_server_session_fed_garbage_warns_at_the_limit_then_reports_the_rest() {
        use crate::session::server::{ServerConfig, ServerSession};
        use crate::wire::frame::FramerConfig;
        use std::sync::atomic::Ordering::Relaxed;
        let count: &'static WarnCount = Box::leak(Box::default());
        let t0 = Instant::now();
        let mut s = ServerSession::new(ServerConfig::default(), FramerConfig::default());
        tracing::subscriber::with_default(count, || {
            for i in 0..1000u64 {
                s.handle_stdin(t0 + Duration::from_millis(i), b"not json\n");
            }
        });
        assert_eq!(
            count.warns.load(Relaxed),
            u64::from(VIOLATION_WARNINGS_PER_INTERVAL)
        );
        assert_eq!(count.max_suppressed.load(Relaxed), 0);
        let later = t0 + VIOLATION_WARNING_INTERVAL + Duration::from_secs(1);
        tracing::subscriber::with_default(count, || {
            s.handle_stdin(later, b"{\"jsonrpc\":\"2.0\"\n");
        });
        assert_eq!(
            count.warns.load(Relaxed),
            u64::from(VIOLATION_WARNINGS_PER_INTERVAL) + 1
        );
        assert_eq!(
            count.max_suppressed.load(Relaxed),
            1000 - u64::from(VIOLATION_WARNINGS_PER_INTERVAL)
        );
        // Every violation is still counted in the metrics.
        let parse_errors: u64 = s.metrics().parse_errors.values().sum();
        assert_eq!(parse_errors, 1001);
    }

    #[test]
    fn a_clock_going_backwards_stays_in_the_window() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut log = ViolationLog::new(1, Duration::from_secs(10));
        assert_eq!(log.admit(t0), Some(0));
        assert_eq!(log.admit(t0 - Duration::from_secs(50)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(10)), Some(1));
    }
}
