//! The seeded mix: which adapter, which server misbehaviour, which host
//! action, all drawn from one seed so a failing wave replays exactly.

use std::time::Duration;

use serde_json::{json, Value};

/// splitmix64: tiny, seedable, good enough to pick behaviours.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// The generator of one session: independent of how many numbers other
    /// sessions drew, so a session's plan depends only on (seed, wave, index).
    pub(crate) fn for_session(seed: u64, wave: u64, index: u64) -> Self {
        let mut r = Self(seed ^ wave.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index.rotate_left(32));
        r.next();
        r
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// The wire limit every soak session runs with (host and guard).
pub(crate) const MAX_FRAME: usize = 1 << 20;
/// The stderr tail every soak session keeps.
pub(crate) const STDERR_TAIL: usize = 16 * 1024;
/// The deadline of an ordinary request.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long past its deadline a request may take to end before the run
/// fails: the driver's timer, a cancel and a wake on a loaded 2-core machine.
pub(crate) const DEADLINE_SLACK: Duration = Duration::from_secs(2);
/// The deadline of the ping that proves recovery after a cancel (G8).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Graces of the shutdown sequence (stdin close → TERM → KILL) in the soak.
pub(crate) const GRACE: Duration = Duration::from_millis(500);
/// Reader drain deadline after the server's exit (an escaped grandchild
/// holds stderr longer than this).
pub(crate) const DRAIN: Duration = Duration::from_millis(500);
/// Bound on a whole shutdown: both graces, two drains, and slack.
pub(crate) const SHUTDOWN_BOUND: Duration = Duration::from_secs(6);
/// How long an escaped grandchild lives: longer than [`DRAIN`], shorter than
/// the checkpoint's settle time.
pub(crate) const GRANDCHILD_SECONDS: f64 = 1.5;

/// Who hosts the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Host {
    Tokio,
    AsyncStd,
    Blocking,
    /// Our raw host speaking to `mcp-stdio guard` over its stdio.
    Guard,
}

impl Host {
    pub(crate) const ALL: [Self; 4] = [Self::Tokio, Self::AsyncStd, Self::Blocking, Self::Guard];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Tokio => "tokio",
            Self::AsyncStd => "async-std",
            Self::Blocking => "blocking",
            Self::Guard => "guard",
        }
    }
}

/// A server behaviour, as one `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Echo,
    /// A response under the wire limit.
    Big(usize),
    /// A response over the wire limit, id first (serde order) or last.
    Oversized {
        bytes: usize,
        id_last: bool,
    },
    /// A result, then a notification flood.
    ResultThenFlood(usize),
    /// Notifications, then the result.
    NotifyThenResult(u64),
    StderrFlood(usize),
    /// The response line written one byte per `write()`.
    ByteAtATime(usize),
    StdoutNoise(u64),
    InvalidUtf8(u64),
    /// Work that ends before its deadline.
    Slow(u64),
    /// A blocking read that ends before its deadline.
    SlowIo(u64),
    /// Work that outlives its deadline: the host times it out.
    SlowPastDeadline,
    EscapeGrandchild,
    /// Part of a response line, then the server aborts.
    CrashMidResponse(usize),
}

/// How a request may end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Ending {
    Result,
    /// The server's JSON-RPC error (the guard's oversized error included).
    ServerError,
    /// Our host's wire-limit error (G3).
    TooLarge,
    Cancelled,
    Timeout,
    /// The session closed first (the server crashed).
    Closed,
    /// The application dropped the request (a cancel).
    Dropped,
    /// Anything else (malformed response, send error).
    Other,
}

impl Ending {
    pub(crate) const ALL: [Self; 8] = [
        Self::Result,
        Self::ServerError,
        Self::TooLarge,
        Self::Cancelled,
        Self::Timeout,
        Self::Closed,
        Self::Dropped,
        Self::Other,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Result => "result",
            Self::ServerError => "server error",
            Self::TooLarge => "wire-limit error",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::Closed => "session closed",
            Self::Dropped => "dropped (cancel)",
            Self::Other => "other",
        }
    }
}

/// What the host does with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Wait for it.
    Await,
    /// Stay busy elsewhere for a while (the guard host: stop reading its
    /// stdout), then wait.
    StopReading(Duration),
    /// Cancel it after a while.
    Cancel(Duration),
    /// Drop it after a while.
    Drop(Duration),
}

/// One request of a session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) call: Call,
    pub(crate) action: Action,
    pub(crate) timeout: Duration,
}

impl Step {
    /// The `tools/call` params.
    pub(crate) fn params(&self) -> Value {
        let (name, args) = match self.call {
            Call::Echo => ("echo", json!({"text": "soak"})),
            Call::Big(bytes) => ("big", json!({ "bytes": bytes })),
            Call::Oversized { bytes, id_last } => {
                let name = if id_last { "big_id_last" } else { "big" };
                (name, json!({ "bytes": bytes }))
            }
            Call::ResultThenFlood(bytes) => (
                "result_then_flood",
                json!({"bytes": 1024, "notify_bytes": bytes, "each": 512}),
            ),
            Call::NotifyThenResult(count) => ("notify_then_result", json!({ "count": count })),
            Call::StderrFlood(bytes) => ("stderr_flood", json!({ "bytes": bytes })),
            Call::ByteAtATime(bytes) => (
                "stream_then_result",
                json!({"bytes": bytes, "chunk": 1, "delay_ms": 0}),
            ),
            Call::StdoutNoise(lines) => ("stdout_noise", json!({ "lines": lines })),
            Call::InvalidUtf8(lines) => ("stdout_invalid_utf8", json!({ "lines": lines })),
            Call::Slow(ms) => (
                "slow",
                json!({"chunks": ms / 20, "delay_ms": 20, "honour_cancel": true}),
            ),
            Call::SlowIo(ms) => ("slow_io", json!({ "ms": ms })),
            Call::SlowPastDeadline => (
                "slow",
                json!({"chunks": 100, "delay_ms": 100, "honour_cancel": true}),
            ),
            Call::EscapeGrandchild => ("escape_grandchild", json!({"seconds": GRANDCHILD_SECONDS})),
            Call::CrashMidResponse(bytes) => ("crash_mid_response", json!({ "bytes": bytes })),
        };
        json!({"name": name, "arguments": args})
    }

    /// Whether `ending` is one this step may have. Every step must end; an
    /// ending outside this set is a breach too.
    pub(crate) fn allows(&self, host: Host, ending: Ending) -> bool {
        use Ending as E;
        let awaited = match self.call {
            Call::Oversized { .. } if host == Host::Guard => &[E::ServerError][..],
            Call::Oversized { .. } => &[E::TooLarge],
            Call::SlowPastDeadline => &[E::Timeout],
            // The guard may still answer the cut request with its own error.
            Call::CrashMidResponse(_) => &[E::Closed, E::ServerError],
            _ => &[E::Result],
        };
        match self.action {
            Action::Await | Action::StopReading(_) => awaited.contains(&ending),
            // Whatever came first: the answer or the cancel.
            Action::Cancel(_) => awaited.contains(&ending) || ending == E::Cancelled,
            Action::Drop(_) => awaited.contains(&ending) || ending == E::Dropped,
        }
    }

    /// Whether the session is over after this step.
    pub(crate) fn ends_session(&self) -> bool {
        matches!(self.call, Call::CrashMidResponse(_))
    }
}

/// How the host ends the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Graceful shutdown (close stdin, graces).
    Shutdown,
    /// `SIGTERM` first (the adapters' `kill`; the guard: SIGTERM to the guard).
    Kill,
    /// Drop the client (a group kill from `Drop`). The guard host kills the
    /// guard with `SIGKILL` — a wrapper that vanishes: its server must die
    /// with it, and its audit log must still verify (unsealed).
    Drop,
}

/// One session's plan.
#[derive(Debug, Clone)]
pub(crate) struct SessionPlan {
    pub(crate) host: Host,
    pub(crate) flags: Vec<String>,
    pub(crate) steps: Vec<Step>,
    pub(crate) end: End,
}

impl SessionPlan {
    /// Draws a plan.
    pub(crate) fn draw(rng: &mut Rng, host: Host) -> Self {
        let mut flags = Vec::new();
        if rng.chance(30) {
            flags.extend(["--noisy-stderr".to_owned(), "200000".to_owned()]);
        }
        if rng.chance(15) {
            flags.extend(["--stderr-at-start".to_owned(), "100000".to_owned()]);
        }
        if rng.chance(25) {
            flags.push("--ignore-stdin-eof".to_owned());
        }
        if rng.chance(20) {
            flags.push("--ignore-sigterm".to_owned());
        }
        if rng.chance(10) {
            flags.push("--stdout-log-between".to_owned());
        }
        let count = 2 + rng.below(4);
        let mut steps = Vec::new();
        for _ in 0..count {
            let step = Self::draw_step(rng, host);
            let last = step.ends_session();
            steps.push(step);
            if last {
                break;
            }
        }
        let end = match rng.below(10) {
            0..=5 => End::Shutdown,
            6..=7 => End::Kill,
            _ => End::Drop,
        };
        Self {
            host,
            flags,
            steps,
            end,
        }
    }

    fn draw_step(rng: &mut Rng, host: Host) -> Step {
        let call = match rng.below(15) {
            0 => Call::Echo,
            1 => Call::Big(64 * 1024 + rng.below(512 * 1024) as usize),
            2 => Call::Oversized {
                bytes: MAX_FRAME + rng.below(3 * MAX_FRAME as u64) as usize,
                id_last: false,
            },
            3 => Call::Oversized {
                bytes: MAX_FRAME + rng.below(3 * MAX_FRAME as u64) as usize,
                id_last: true,
            },
            4 => Call::ResultThenFlood(256 * 1024 + rng.below(1 << 20) as usize),
            5 => Call::NotifyThenResult(100 + rng.below(2000)),
            6 => Call::StderrFlood(256 * 1024 + rng.below(4 << 20) as usize),
            7 => Call::ByteAtATime(200 + rng.below(4000) as usize),
            8 => Call::StdoutNoise(1 + rng.below(200)),
            9 => Call::InvalidUtf8(1 + rng.below(50)),
            10 => Call::Slow(100 + rng.below(1500)),
            11 => Call::SlowIo(100 + rng.below(1500)),
            12 => Call::SlowPastDeadline,
            13 => Call::EscapeGrandchild,
            _ if rng.chance(50) => Call::CrashMidResponse(10 + rng.below(4000) as usize),
            _ => Call::Echo,
        };
        let action = match rng.below(10) {
            0..=4 => Action::Await,
            5 => Action::StopReading(rng.ms(100, 1500)),
            6..=7 => Action::Cancel(rng.ms(0, 800)),
            _ if host == Host::Guard => Action::Cancel(rng.ms(0, 800)),
            _ => Action::Drop(rng.ms(0, 800)),
        };
        let timeout = match call {
            Call::SlowPastDeadline => rng.ms(300, 1500),
            _ => REQUEST_TIMEOUT,
        };
        Step {
            call,
            action,
            timeout,
        }
    }
}
