//! The guard's live status (F3): what `mcp-stdio ps` shows of a running
//! guard, built by the session on request ([`GuardSession::status`]) from
//! its counters, with what only the adapter knows ([`StatusIdentity`],
//! [`ProcessStats`]) handed in. Calls are counted as their records are
//! given, with a latency histogram per operation of fixed buckets, for at
//! most [`MAX_STATUS_OPERATIONS`] operations (the rest under `(other)`).

use serde::Serialize;

use super::GuardSession;
use crate::records::call::{CallOutcome, CallRecord, CallState};
use crate::StatusPortCounters;
use crate::STATUS_SCHEMA;

/// Operations (methods, or tool names for `tools/call`) with a latency
/// histogram of their own; later ones share `(other)`'s.
pub const MAX_STATUS_OPERATIONS: usize = 32;

/// The histogram's upper bounds in milliseconds; a last bucket takes the rest.
const BUCKETS_MS: [u64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];

/// What the adapter knows of the guard and not the session: given once,
/// shown as it is (the command is masked by the session).
#[derive(Debug, Clone, Default)]
pub struct StatusIdentity {
    /// The server's name (`--name`, or the server program's).
    pub name: String,
    /// The guard's process id.
    pub guard_pid: u32,
    /// The host's process id (the guard's parent), if known.
    pub host_pid: Option<u32>,
    /// The host's program name, if known.
    pub host_program: Option<String>,
    /// The server's command line as given.
    pub command: Vec<String>,
    /// When the guard started, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// The audit log's path (`--audit`).
    pub audit_log: Option<String>,
    /// The log file's path (`--log-file`).
    pub log_file: Option<String>,
    /// One line on the sandbox, when there is one.
    pub sandbox: Option<String>,
    /// One line on the pins, when they are on.
    pub pins: Option<String>,
}

/// The server process group's resources, as the adapter measured them
/// when the request came (`None` where it could not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcessStats {
    /// The server's (the group leader's) process id.
    pub pid: Option<u32>,
    /// Processes in the server's group.
    pub processes: Option<u32>,
    /// Resident memory of the group, bytes.
    pub rss_bytes: Option<u64>,
    /// CPU time of the group (user and system), ms.
    pub cpu_ms: Option<u64>,
}

/// The guard's status, as `mcp-stdio ps` reads it (schema
/// [`STATUS_SCHEMA`]). Every field is documented in the guide's status
/// page.
#[derive(Debug, Clone, Serialize)]
pub struct GuardStatus {
    /// [`STATUS_SCHEMA`].
    pub schema: u32,
    /// The server's name.
    pub name: String,
    /// The guard's process id.
    pub guard_pid: u32,
    /// The host's process id, if known.
    pub host_pid: Option<u32>,
    /// The host's program name, if known.
    pub host_program: Option<String>,
    /// The server's command line, secrets masked.
    pub command: Vec<String>,
    /// When the guard started, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// `starting` (no handshake answer yet), `running`, `sleeping` (stopped
    /// for idleness, `--idle-stop`), `restarting`, `stopping` or `stopped`.
    pub state: &'static str,
    /// The protocol revision the session runs at.
    pub protocol_version: Option<String>,
    /// The server's `serverInfo` name and version.
    pub server: Option<ServerName>,
    /// Requests from the host.
    pub requests: RequestCounts,
    /// Latency per operation, slowest p99 first.
    pub latency: Vec<OperationLatency>,
    /// Bytes each way.
    pub bytes: ByteCounts,
    /// The server's stderr.
    pub stderr: StderrCounts,
    /// Times the server was started again after a crash.
    pub restarts: u32,
    /// Why restarts stopped, when they did.
    pub restarts_stopped: Option<String>,
    /// Times the server was stopped for idleness (`--idle-stop`) and
    /// started again.
    pub idle_stops: u64,
    /// Times a sleeping server was started again.
    pub resumes: u64,
    /// The figures the stdio article asks a host to keep per server, so a
    /// stall can be told apart from a server that sends what nobody takes.
    pub stream: StreamCounts,
    /// The server process group's resources.
    pub process: ProcessStats,
    /// The audit log's path.
    pub audit_log: Option<String>,
    /// The log file's path (`--log-file`), where the server's whole stderr is.
    pub log_file: Option<String>,
    /// The sandbox, in one line.
    pub sandbox: Option<String>,
    /// The pins, in one line.
    pub pins: Option<String>,
    /// What the tool policies did so far (refusals by tool and by policy,
    /// tools hidden, results cut), when some are set.
    pub policy: Option<crate::guard::policy::PolicyMetrics>,
    /// The status port's own counters.
    pub status_port: StatusPortCounters,
}

/// A server's `serverInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerName {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// Requests from the host, by how they ended.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RequestCounts {
    /// Requests seen.
    pub total: u64,
    /// Waiting for their answer now.
    pub in_flight: u64,
    /// Answered with a result.
    pub ok: u64,
    /// Answered with an error (the server's, or the guard's for it).
    pub error: u64,
    /// Cancelled by the host.
    pub cancelled: u64,
    /// Never sent, or their answer lost (refused, the server gone).
    pub failed: u64,
    /// Lines refused at the wire limit (requests and responses).
    pub refused_at_wire_limit: u64,
}

/// One operation's calls and latency (bucket bounds, so `p50_ms: 5` reads
/// "at most 5 ms"; `null` past the last bound).
#[derive(Debug, Clone, Serialize)]
pub struct OperationLatency {
    /// The method, or the tool's name for `tools/call`.
    pub operation: String,
    /// Calls that ended.
    pub calls: u64,
    /// Of them, errors.
    pub errors: u64,
    /// The median's bucket bound, ms.
    pub p50_ms: Option<u64>,
    /// The 99th percentile's bucket bound, ms.
    pub p99_ms: Option<u64>,
}

/// Bytes each way through the guard.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ByteCounts {
    /// Read from the host.
    pub from_host: u64,
    /// Read from the server's stdout.
    pub from_server: u64,
    /// Written to the host.
    pub to_host: u64,
}

/// The server's stderr.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StderrCounts {
    /// Bytes it wrote.
    pub seen: u64,
    /// Bytes kept (the head and tail `logs` shows).
    pub kept: u64,
    /// Bytes passed on to the guard's own stderr.
    pub forwarded: u64,
}

/// What a host should keep per server session.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StreamCounts {
    /// Bytes received on the server's stdout.
    pub stdout_bytes_received: u64,
    /// The largest complete frame from the server, bytes.
    pub largest_frame: u64,
    /// Lines from the server that were not protocol messages.
    pub non_protocol_lines: u64,
    /// Lines from the host that did not parse.
    pub host_parse_errors: u64,
    /// Cancels the host sent.
    pub cancels: u64,
    /// Answers dropped because their request was cancelled.
    pub dropped_after_cancel: u64,
    /// Bytes waiting for the host now (what a host that stopped reading leaves).
    pub waiting_for_host: u64,
    /// Bytes waiting for the server's stdin now.
    pub waiting_for_server: u64,
    /// Signals sent to the server's group (passed on, SIGTERM, SIGKILL).
    pub terminations: u64,
}

/// Calls counted as their records are given.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallStats {
    ops: Vec<(String, OpStats)>,
    other: OpStats,
    ok: u64,
    error: u64,
    cancelled: u64,
    failed: u64,
}

#[derive(Debug, Clone, Default)]
struct OpStats {
    calls: u64,
    errors: u64,
    buckets: [u64; BUCKETS_MS.len() + 1],
}

impl OpStats {
    fn quantile(&self, q: f64) -> Option<u64> {
        // The rank of the q-quantile among `calls`, from 1.
        let rank = ((self.calls as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return BUCKETS_MS.get(i).copied();
            }
        }
        None
    }
}

impl CallStats {
    /// A call's record as it is given: counted once it ended.
    pub(crate) fn see(&mut self, record: &CallRecord) {
        let error = match record.state() {
            CallState::Completed => {
                let error = record.outcome() != Some(CallOutcome::Succeeded);
                if error {
                    self.error += 1;
                } else {
                    self.ok += 1;
                }
                error
            }
            CallState::Cancelled | CallState::CancelledAfterDispatch => {
                self.cancelled += 1;
                false
            }
            CallState::Denied
            | CallState::FailedBeforeDispatch
            | CallState::ForceKilled
            | CallState::Unknown => {
                self.failed += 1;
                true
            }
            _ => return,
        };
        let mut times = record.events().map(|e| e.unix_ms);
        let first = times.next().unwrap_or(0);
        let ms = times.last().unwrap_or(first).saturating_sub(first);
        let op = record.operation();
        let stats = match self.ops.iter().position(|(name, _)| name == op) {
            Some(i) => &mut self.ops[i].1,
            None if self.ops.len() < MAX_STATUS_OPERATIONS => {
                self.ops.push((op.to_owned(), OpStats::default()));
                &mut self.ops.last_mut().expect("pushed").1
            }
            None => &mut self.other,
        };
        stats.calls += 1;
        stats.errors += u64::from(error);
        let bucket = BUCKETS_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(BUCKETS_MS.len());
        stats.buckets[bucket] += 1;
    }

    fn latency(&self) -> Vec<OperationLatency> {
        let named = self.ops.iter().map(|(n, s)| (n.as_str(), s));
        let other = (self.other.calls > 0).then_some(("(other)", &self.other));
        let mut out: Vec<_> = named
            .chain(other)
            .map(|(operation, s)| OperationLatency {
                operation: operation.to_owned(),
                calls: s.calls,
                errors: s.errors,
                p50_ms: s.quantile(0.5),
                p99_ms: s.quantile(0.99),
            })
            .collect();
        // Slowest first; past the last bound (`None`) is the slowest.
        out.sort_by_key(|l| std::cmp::Reverse(l.p99_ms.unwrap_or(u64::MAX)));
        out
    }
}

/// The guard's running totals for a telemetry exporter: a few numbers,
/// taken without allocating, that only grow during a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuardCounters {
    /// Requests the host sent.
    pub requests: u64,
    /// Times the server was started again after a crash.
    pub restarts: u64,
    /// Bytes of the server's stderr seen but not kept (past the pool).
    pub stderr_dropped_bytes: u64,
    /// Lines refused at the wire limit, both ways.
    pub refused_frames: u64,
    /// Spans dropped before the exporter got them.
    pub spans_dropped: u64,
}

impl GuardSession {
    /// The guard's running totals (see [`GuardCounters`]).
    pub fn counters(&self) -> GuardCounters {
        let m = self.proxy.metrics();
        GuardCounters {
            requests: m.requests,
            restarts: u64::from(self.lives.restarts()),
            stderr_dropped_bytes: self.stderr.seen().saturating_sub(self.stderr.retained()),
            refused_frames: m.oversized_requests + m.oversized_responses,
            spans_dropped: self.proxy.spans_dropped(),
        }
    }

    /// The guard's status now, with what the adapter knows handed in.
    pub fn status(
        &mut self,
        identity: &StatusIdentity,
        process: ProcessStats,
        status_port: StatusPortCounters,
    ) -> GuardStatus {
        let state = if self.finished.is_some() {
            "stopped"
        } else if self.ending {
            "stopping"
        } else if self.lives.is_asleep() || self.idle.stopping {
            "sleeping"
        } else if !self.lives.is_up() {
            "restarting"
        } else if self.proxy.protocol_version().is_none() {
            "starting"
        } else {
            "running"
        };
        let m = self.proxy.metrics().clone();
        let protocol_version = self.proxy.protocol_version().map(str::to_owned);
        let server = self.proxy.server_info().map(|(n, v)| ServerName {
            name: self.secrets.text(n),
            version: self.secrets.text(v),
        });
        let command = identity
            .command
            .iter()
            .map(|a| self.secrets.text(a))
            .collect();
        let calls = &self.calls;
        let terminations = self.signals_sent;
        GuardStatus {
            schema: STATUS_SCHEMA,
            name: identity.name.clone(),
            guard_pid: identity.guard_pid,
            host_pid: identity.host_pid,
            host_program: identity.host_program.clone(),
            command,
            started_unix_ms: identity.started_unix_ms,
            state,
            protocol_version,
            server,
            requests: RequestCounts {
                total: m.requests,
                in_flight: self.proxy.tracked() as u64,
                ok: calls.ok,
                error: calls.error,
                cancelled: calls.cancelled,
                failed: calls.failed,
                refused_at_wire_limit: m.oversized_requests + m.oversized_responses,
            },
            latency: calls.latency(),
            bytes: ByteCounts {
                from_host: m.host_bytes,
                from_server: m.server_bytes,
                to_host: m.host_written_bytes,
            },
            stderr: StderrCounts {
                seen: self.stderr.seen(),
                kept: self.stderr.retained(),
                forwarded: self.stderr_forwarded,
            },
            restarts: self.lives.restarts(),
            restarts_stopped: self.lives.stopped().map(str::to_owned),
            idle_stops: self.idle.stops,
            resumes: self.idle.resumes,
            stream: StreamCounts {
                stdout_bytes_received: m.server_bytes,
                largest_frame: m.largest_server_frame,
                non_protocol_lines: m.non_protocol_lines,
                host_parse_errors: m.host_parse_errors,
                cancels: m.cancels,
                dropped_after_cancel: m.dropped_after_cancel,
                waiting_for_host: self.proxy.host_backlog() as u64,
                waiting_for_server: self.proxy.server_backlog() as u64,
                terminations,
            },
            process,
            audit_log: identity.audit_log.clone(),
            log_file: identity.log_file.clone(),
            sandbox: identity.sandbox.clone(),
            pins: identity.pins.clone(),
            policy: m.policy.clone(),
            status_port,
        }
    }

    /// The newest `bytes` of the server's kept stderr (secrets masked as
    /// they came in), as text.
    pub fn stderr_newest(&self, bytes: usize) -> String {
        String::from_utf8_lossy(&self.stderr.newest(bytes)).into_owned()
    }
}
