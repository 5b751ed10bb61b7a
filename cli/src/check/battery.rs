//! The rows of `check`, run in order against fresh server processes.
//!
//! Rows 1–2 share one session (handshake, a few requests); rows 3–8 each get
//! a fresh process; rows 9–10 add up what every session's end showed. Every
//! wait is bounded by `--timeout` (a little slack is added around the
//! client's own deadlines), and every session ends with the supervisor's
//! sequence, so a hung server costs time only up to those bounds.

use std::time::{Duration, Instant};

use mcp_stdio_core::{
    initialize_params, is_modern, Implementation, Negotiated, NegotiatedVia, RequestStamp,
    VersionPolicy, DISCOVER, INITIALIZE, INITIALIZED, LATEST_HANDSHAKE_VERSION,
    MODERN_PROTOCOL_VERSIONS, PING, TOOLS_CALL, TOOLS_LIST,
};
use mcp_stdio_core::{to_raw, Id, Message, RawResult, RawValue};
use mcp_stdio_core::{ClientMetrics, RequestFailure};
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError};
use mcp_stdio_core::{CommandSpec, ExitStatus, SessionRecord};
use mcp_stdio_core::{EndedBy, Signal};
use mcp_stdio_tokio::Client;
use serde_json::{json, Value};

use super::procs::{self, Leftover};
use super::raw::{RawError, RawEvent, RawServer};
use super::report::{fmt_bytes, fmt_duration, Report, Row, RowSpec, Status};

/// A tool and its arguments, named on the command line.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    /// The tool's name.
    pub(crate) name: String,
    /// Its arguments (a JSON object).
    pub(crate) arguments: Value,
}

impl ToolCall {
    fn params(&self) -> Box<RawValue> {
        to_raw(&json!({"name": self.name, "arguments": self.arguments}))
            .expect("a serde_json::Value always serializes")
    }
}

/// Everything a run needs, resolved from the flags.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) spec: CommandSpec,
    pub(crate) server: String,
    pub(crate) builtin: bool,
    pub(crate) timeout: Duration,
    pub(crate) max_frame: usize,
    pub(crate) large: Option<ToolCall>,
    pub(crate) slow: Option<ToolCall>,
    pub(crate) cancel_after: Duration,
    pub(crate) stall: Duration,
    pub(crate) grace: Duration,
    pub(crate) stderr_warn: u64,
    pub(crate) quiet: bool,
}

const HANDSHAKE_ROW: RowSpec = RowSpec {
    id: "initialize",
    title: "initialize handshake",
};
const STDOUT_HYGIENE: RowSpec = RowSpec {
    id: "stdout_hygiene",
    title: "stdout hygiene",
};
const MALFORMED: RowSpec = RowSpec {
    id: "malformed_line",
    title: "survives a malformed line",
};
const LARGE: RowSpec = RowSpec {
    id: "large_response",
    title: "large response",
};
const SLOW_READER: RowSpec = RowSpec {
    id: "slow_reader",
    title: "slow reader",
};
const CANCEL: RowSpec = RowSpec {
    id: "cancel",
    title: "cancel + second request",
};
const STDIN_EOF: RowSpec = RowSpec {
    id: "stdin_eof",
    title: "exits on stdin EOF",
};
const SIGTERM: RowSpec = RowSpec {
    id: "sigterm",
    title: "exits on SIGTERM",
};
const STDERR_VOLUME: RowSpec = RowSpec {
    id: "stderr_volume",
    title: "stderr volume",
};
const LEFTOVERS: RowSpec = RowSpec {
    id: "leftover_processes",
    title: "leftover processes",
};
const ROW_COUNT: usize = 10;

/// A second request slower than this after a cancel is not "prompt" (G8).
const PROMPT: Duration = Duration::from_millis(500);
/// How long the cancel row watches for a late response to the cancelled id.
const LATE_WINDOW: Duration = Duration::from_secs(1);
/// Slack around the client's own deadlines, so they fire first.
const SLACK: Duration = Duration::from_secs(1);
/// Sampling period of the stdout pipe while it is left unread.
const SAMPLE: Duration = Duration::from_millis(10);
/// Why a request failed when the server went away; row 1 replaces it with
/// what the session's record shows.
const SESSION_CLOSED: &str = "the session closed (the server closed its stdout or exited)";
/// The malformed line of row 3: an object cut off after `"id":`.
const MALFORMED_LINE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\",\"id\":\n";

/// The protocol revision one pass of rows 1–8 runs at: the `initialize`
/// handshake at 2025-11-25 (`LATEST_HANDSHAKE_VERSION`), or a 2026-07-28 session
/// (`server/discover`, every request carrying its `_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Revision(&'static str);

impl Revision {
    /// The handshake revision (2025-11-25).
    pub(crate) const HANDSHAKE: Self = Self(LATEST_HANDSHAKE_VERSION);
    /// The newest modern revision (2026-07-28).
    pub(crate) const MODERN: Self = Self(MODERN_PROTOCOL_VERSIONS[0]);

    /// The version string.
    pub(crate) fn version(self) -> &'static str {
        self.0
    }

    fn is_modern(self) -> bool {
        is_modern(self.0)
    }

    /// The liveness probe: `ping`, removed at 2026-07-28, where
    /// `server/discover` (answerable at any time) takes its place.
    fn probe(self) -> &'static str {
        if self.is_modern() {
            DISCOVER
        } else {
            PING
        }
    }

    /// A raw request in this revision's shape: at 2026-07-28 its params
    /// carry the `_meta` every request must, set by the core's
    /// `RequestStamp` as our `Client` does.
    fn stamp(self, mut request: Value) -> Value {
        if self.is_modern() {
            let params = request.get("params").map(Value::to_string);
            let stamped = RequestStamp::new(self.0, &check_client(), None)
                .apply(params.as_deref())
                .and_then(|p| serde_json::from_str(p.get()).ok());
            if let Some(p) = stamped {
                request["params"] = p;
            }
        }
        request
    }
}

/// Who `check` says it is, on every session.
fn check_client() -> Implementation {
    Implementation::new("mcp-stdio-check", env!("CARGO_PKG_VERSION"))
}

/// What one session's end showed, for rows 9 and 10.
#[derive(Debug)]
struct SessionNote {
    label: &'static str,
    pid: u32,
    stderr_seen: u64,
    stderr_note: Option<String>,
    /// `None` where process groups cannot be scanned.
    leftovers: Option<Vec<Leftover>>,
}

/// How a `Client` session is ended.
#[derive(Debug, Clone, Copy)]
enum End {
    /// `SIGTERM` at once (sessions whose end is not what the row measures).
    Kill,
    /// Close stdin, then escalate (the stdin EOF row).
    Shutdown,
    /// Wait for the exit already under way.
    Wait,
}

/// Runs every row; `Err` only when the server cannot be started at all.
///
/// A first session asks the server which revisions it offers (our
/// `Client`'s probe: `server/discover`, else `initialize`); rows 1–8 then run
/// once per revision offered — the handshake one first, as a host of
/// 2025-11-25 sees the server, then 2026-07-28 — each row saying its
/// revision; rows 9–10 add up every session. A server that answers neither
/// gets the handshake pass, whose row 1 says why it failed.
pub(crate) async fn run(settings: &Settings) -> Result<Report, String> {
    let start = Instant::now();
    let mut b = Battery {
        s: settings,
        notes: Vec::new(),
        step: 0,
        steps: ROW_COUNT,
        init_ok: false,
        rev: Revision::HANDSHAKE,
    };
    let revisions = b.revisions().await?;
    b.steps = 8 * revisions.len() + 2;
    let mut rows = Vec::with_capacity(b.steps);
    for rev in revisions {
        b.rev = rev;
        b.init_ok = false;
        let mut t = Instant::now();
        let mut pass = Vec::with_capacity(8);
        // Both rows come from one session: the first carries its time.
        let [init, hygiene] = b.handshake().await?;
        pass.push(init.timed(lap(&mut t)));
        pass.push(hygiene);
        pass.push(b.malformed().await.timed(lap(&mut t)));
        pass.push(b.large().await.timed(lap(&mut t)));
        pass.push(b.slow_reader().await.timed(lap(&mut t)));
        pass.push(b.cancel().await.timed(lap(&mut t)));
        pass.push(b.stdin_eof().await.timed(lap(&mut t)));
        pass.push(b.sigterm().await.timed(lap(&mut t)));
        rows.extend(pass.into_iter().map(|r| r.at_revision(rev.version())));
    }
    let mut t = Instant::now();
    b.progress(STDERR_VOLUME);
    rows.push(b.stderr_volume().timed(lap(&mut t)));
    b.progress(LEFTOVERS);
    rows.push(b.leftovers().timed(lap(&mut t)));
    Ok(Report::new(
        settings.server.clone(),
        settings.builtin,
        rows,
        start.elapsed(),
    ))
}

/// The time since `*t`, restarting the clock for the next row.
fn lap(t: &mut Instant) -> Duration {
    let now = Instant::now();
    let d = now.duration_since(*t);
    *t = now;
    d
}

struct Battery<'a> {
    s: &'a Settings,
    notes: Vec<SessionNote>,
    step: usize,
    /// Rows in this run (8 per revision, plus 2).
    steps: usize,
    /// Whether row 1's handshake succeeded; rows that need a session skip otherwise.
    init_ok: bool,
    /// The revision the rows now running are at.
    rev: Revision,
}

impl Battery<'_> {
    fn progress(&mut self, spec: RowSpec) {
        self.step += 1;
        if !self.s.quiet {
            let at = if self.step > self.steps - 2 {
                String::new()
            } else {
                format!(" ({})", self.rev.version())
            };
            eprintln!(
                "mcp-stdio check: [{}/{}] {}{at}",
                self.step, self.steps, spec.title
            );
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.s.timeout
    }

    fn options(&self) -> ClientOptions {
        let mut options = ClientOptions::default();
        options.framer_mut().max_frame(self.s.max_frame);
        options.session_mut().default_timeout(Some(self.s.timeout));
        // Each pass of rows runs at one revision (its rows say which).
        options.version_policy(VersionPolicy::Pin(self.rev.version().to_owned()));
        options.discover_timeout(self.s.timeout);
        options
            .stderr_pool(None)
            .client_info(check_client())
            .supervisor_mut()
            .stdin_close_grace(self.s.grace)
            .term_grace(self.s.grace);
        options
    }

    fn spawn(&self) -> Result<Client, String> {
        Client::spawn(&self.s.spec, self.options())
            .map_err(|e| crate::diagnose::spawn_failure(&self.s.spec, &e).message)
    }

    /// Brings a fresh session to the state the shutdown rows start from: an
    /// initialized session or, when row 1's handshake failed, a process
    /// given a moment to run (so one that exits by itself is seen to).
    async fn settle(&self, client: &Client) {
        if self.init_ok {
            // A failure here shows in the exit path the row measures.
            let _ = self.initialize(client).await;
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn skip_without_session(&self, spec: RowSpec) -> Option<Row> {
        (!self.init_ok).then(|| {
            Row::new(spec, Status::Skip, "not run: the handshake failed (row 1)")
                .detail("this row needs an initialized session")
        })
    }

    async fn initialize(&self, client: &Client) -> Result<(Negotiated, Duration), String> {
        let t = Instant::now();
        match tokio::time::timeout(self.s.timeout + SLACK, client.initialize()).await {
            Ok(Ok(r)) => Ok((r, t.elapsed())),
            Ok(Err(InitializeError::Request(e))) => Err(self.describe(&e)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(self.no_answer()),
        }
    }

    /// A ping's latency; an error answer counts as an answer (the server is
    /// alive and reading).
    async fn ping(&self, client: &Client) -> Result<Duration, String> {
        let t = Instant::now();
        let r = tokio::time::timeout(
            self.s.timeout + SLACK,
            client.request_with_timeout(self.rev.probe(), None, Some(self.s.timeout)),
        )
        .await;
        match r {
            Ok(Ok(_)) => Ok(t.elapsed()),
            Ok(Err(e)) if e.server_error().is_some() => Ok(t.elapsed()),
            Ok(Err(e)) => Err(self.describe(&e)),
            Err(_) => Err(self.no_answer()),
        }
    }

    /// The revisions the server offers, in the order their rows run: a
    /// first session with our `Client`'s probe (`server/discover`, bounded by
    /// `--timeout`, else `initialize`). When the probe settled on 2026-07-28,
    /// the handshake revision is offered too if the discover result lists a
    /// handshake version or, as many servers list only their modern ones
    /// there, if a second session's `initialize` succeeds. When the probe fell
    /// back to `initialize`, or nothing answered, the handshake revision only
    /// (its row 1 then says what went wrong).
    async fn revisions(&mut self) -> Result<Vec<Revision>, String> {
        if !self.s.quiet {
            eprintln!("mcp-stdio check: asking which protocol revisions the server offers");
        }
        let Some(n) = self.probe_session(VersionPolicy::Auto).await? else {
            return Ok(vec![Revision::HANDSHAKE]);
        };
        if n.via == NegotiatedVia::Initialize || !n.is_modern() {
            return Ok(vec![Revision::HANDSHAKE]);
        }
        let modern = MODERN_PROTOCOL_VERSIONS
            .iter()
            .find(|v| **v == n.protocol_version)
            .map_or(Revision::MODERN, |v| Revision(v));
        let listed = n
            .supported_versions
            .as_ref()
            .is_some_and(|vs| vs.iter().any(|v| !is_modern(v)));
        let handshake_too = listed
            || self
                .probe_session(VersionPolicy::Pin(LATEST_HANDSHAKE_VERSION.to_owned()))
                .await?
                .is_some();
        Ok(if handshake_too {
            vec![Revision::HANDSHAKE, modern]
        } else {
            vec![modern]
        })
    }

    /// One session that only negotiates under `policy`; what it settled on.
    async fn probe_session(&mut self, policy: VersionPolicy) -> Result<Option<Negotiated>, String> {
        let mut options = self.options();
        options.version_policy(policy);
        let client = Client::spawn(&self.s.spec, options)
            .map_err(|e| crate::diagnose::spawn_failure(&self.s.spec, &e).message)?;
        let negotiated =
            tokio::time::timeout(self.s.timeout * 2 + SLACK, client.initialize()).await;
        self.end("revision probe", client, End::Kill).await;
        Ok(negotiated.ok().and_then(Result::ok))
    }

    fn no_answer(&self) -> String {
        format!("no answer within {}", fmt_duration(self.s.timeout))
    }

    fn describe(&self, e: &RequestError) -> String {
        match e {
            RequestError::Failed(RequestFailure::TimedOut { .. }) => self.no_answer(),
            RequestError::Failed(RequestFailure::SessionClosed) => SESSION_CLOSED.to_owned(),
            other => other.to_string(),
        }
    }

    /// Ends a `Client` session, then sweeps its process group.
    async fn end(
        &mut self,
        label: &'static str,
        client: Client,
        how: End,
    ) -> Option<SessionRecord> {
        let pid = client.pid();
        // The supervisor bounds every step by itself; this is a backstop.
        let bound = self.s.grace * 2 + Duration::from_secs(3);
        let record = match how {
            End::Kill => tokio::time::timeout(bound, client.kill()).await.ok(),
            End::Shutdown => tokio::time::timeout(bound, client.shutdown()).await.ok(),
            End::Wait => tokio::time::timeout(bound, client.wait()).await.ok(),
        };
        // A timeout dropped the `Client`, whose `Drop` killed the group if
        // (and only if) its id was still the server's.
        let leftovers = procs::sweep(pid).await;
        let (stderr_seen, stderr_note) = record.as_ref().map_or((0, None), |r| {
            let s = &r.stderr;
            let note = s.truncated.then(|| {
                format!(
                    "[stderr truncated: kept last {} of {} bytes]",
                    s.retained, s.seen
                )
            });
            (s.seen, note)
        });
        self.notes.push(SessionNote {
            label,
            pid,
            stderr_seen,
            stderr_note,
            leftovers,
        });
        record
    }

    /// Ends a raw session, then sweeps its process group.
    async fn end_raw(&mut self, label: &'static str, raw: RawServer) -> super::raw::RawEnd {
        let pid = raw.pid();
        let end = raw.finish(self.s.grace).await;
        let leftovers = procs::sweep(pid).await;
        self.notes.push(SessionNote {
            label,
            pid,
            stderr_seen: end.stderr_bytes,
            stderr_note: None,
            leftovers,
        });
        end
    }

    // ---- rows 1 and 2 ----

    async fn handshake(&mut self) -> Result<[Row; 2], String> {
        self.progress(HANDSHAKE_ROW);
        let client = self.spawn()?;
        let row1 = match self.initialize(&client).await {
            Ok((init, took)) => {
                self.init_ok = true;
                // A handshake always names the server.
                let unnamed = Implementation::new("", "");
                let info = init.server_info.as_ref().unwrap_or(&unnamed);
                Row::new(
                    HANDSHAKE_ROW,
                    Status::Pass,
                    format!(
                        "{}; protocol {}; {} {}",
                        fmt_duration(took),
                        init.protocol_version,
                        info.name,
                        info.version
                    ),
                )
                .measure_ms("latency_ms", took)
                .measure("protocol_version", init.protocol_version.as_str())
                .measure("proposed_version", self.rev.version())
                .measure(
                    "handshake",
                    match init.via {
                        NegotiatedVia::Discover => DISCOVER,
                        _ => INITIALIZE,
                    },
                )
                .measure("server_name", info.name.as_str())
                .measure("server_version", info.version.as_str())
            }
            Err(e) => Row::new(HANDSHAKE_ROW, Status::Fail, e)
                .detail("a host cannot start a session: every other row that needs one is skipped"),
        };

        self.progress(STDOUT_HYGIENE);
        let mut pings = Vec::new();
        let mut problems = Vec::new();
        let mut tools = None;
        if self.init_ok {
            for _ in 0..3 {
                match self.ping(&client).await {
                    Ok(d) => pings.push(d),
                    Err(e) => {
                        problems.push(format!("ping: {e}"));
                        break;
                    }
                }
            }
            let listed = tokio::time::timeout(
                self.s.timeout + SLACK,
                client.request_with_timeout(TOOLS_LIST, None, Some(self.s.timeout)),
            )
            .await;
            match listed {
                Ok(Ok(raw)) => tools = count_tools(&raw),
                Ok(Err(e)) if e.server_error().is_some() => {}
                Ok(Err(e)) => problems.push(format!("{TOOLS_LIST}: {}", self.describe(&e))),
                Err(_) => problems.push(format!("{TOOLS_LIST}: {}", self.no_answer())),
            }
            // Give trailing junk (a log line after the last answer) a moment.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let record = self.end("handshake", client, End::Kill).await;
        let row1 = if self.init_ok {
            row1
        } else {
            with_server_end(row1, record.as_ref())
        };
        let row2 = match record {
            Some(r) => self.hygiene(&r.metrics, &pings, tools, &problems),
            None => Row::new(
                STDOUT_HYGIENE,
                Status::Fail,
                "the session did not end within its bounds",
            ),
        };
        Ok([row1, row2])
    }

    fn hygiene(
        &self,
        m: &ClientMetrics,
        pings: &[Duration],
        tools: Option<usize>,
        problems: &[String],
    ) -> Row {
        let junk: u64 = m.parse_errors.values().sum();
        let kinds = m
            .parse_errors
            .iter()
            .map(|(k, v)| format!("{}: {v}", kind_label(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let ping = pings.iter().min().copied();
        let mut row = if junk > 0 {
            Row::new(
                STDOUT_HYGIENE,
                Status::Fail,
                format!(
                    "{junk} of {} lines on stdout are not protocol messages ({kinds})",
                    m.frames
                ),
            )
            .detail(
                "stdout belongs to the protocol (the MCP spec: a server MUST NOT write anything \
                 else there); send logs and banners to stderr",
            )
        } else if m.unknown_id_responses > 0 {
            Row::new(
                STDOUT_HYGIENE,
                Status::Warn,
                format!(
                    "{} responses to ids never sent, in {} messages",
                    m.unknown_id_responses, m.frames
                ),
            )
            .detail("a response must answer a request the client sent")
        } else if !problems.is_empty() {
            Row::new(
                STDOUT_HYGIENE,
                Status::Warn,
                format!("0 non-protocol lines in {} messages", m.frames),
            )
            .detail(problems.join("; "))
        } else if !self.init_ok && m.frames == 0 {
            Row::new(
                STDOUT_HYGIENE,
                Status::Skip,
                "nothing on stdout to judge (the handshake failed)",
            )
        } else {
            let mut value = format!(
                "0 non-protocol lines in {} messages ({})",
                m.frames,
                fmt_bytes(m.stdout_bytes)
            );
            if let Some(p) = ping {
                value.push_str(&format!("; ping {}", fmt_duration(p)));
            }
            Row::new(STDOUT_HYGIENE, Status::Pass, value)
        };
        if junk > 0 && !problems.is_empty() {
            row.detail = Some(format!(
                "{}; also: {}",
                row.detail.unwrap_or_default(),
                problems.join("; ")
            ));
        }
        row = row
            .measure("non_protocol_lines", junk)
            .measure("messages", m.frames)
            .measure("stdout_bytes", m.stdout_bytes)
            .measure("unknown_id_responses", m.unknown_id_responses)
            .measure(
                "parse_errors",
                serde_json::to_value(&m.parse_errors).unwrap_or_default(),
            );
        if let Some(p) = ping {
            row = row.measure_ms("ping_ms", p);
        }
        if let Some(t) = tools {
            row = row.measure("tools", t);
        }
        row
    }

    // ---- row 3 ----

    async fn malformed(&mut self) -> Row {
        self.progress(MALFORMED);
        if let Some(skip) = self.skip_without_session(MALFORMED) {
            return skip;
        }
        let mut raw = match RawServer::spawn(&self.s.spec, self.s.max_frame) {
            Ok(r) => r,
            Err(e) => return Row::new(MALFORMED, Status::Fail, format!("cannot start: {e}")),
        };
        let row = self.malformed_on(&mut raw).await;
        let end = self.end_raw("malformed line", raw).await;
        match end.exit_status {
            Some(status) if end.ended_by == EndedBy::ExitedByItself => {
                row.measure("exit_status", fmt_status(Some(status)))
            }
            _ => row,
        }
    }

    async fn malformed_on(&self, raw: &mut RawServer) -> Row {
        if let Err(e) = raw_handshake(raw, self.rev, self.deadline()).await {
            return Row::new(
                MALFORMED,
                Status::Fail,
                format!("handshake on a raw pipe: {e}"),
            );
        }
        if let Err(e) = raw.write(MALFORMED_LINE, self.deadline()).await {
            return Row::new(
                MALFORMED,
                Status::Fail,
                format!("writing the malformed line failed: {e}"),
            );
        }
        let t = Instant::now();
        let ping = self
            .rev
            .stamp(json!({"jsonrpc": "2.0", "id": 2, "method": self.rev.probe()}));
        let mut reply = None;
        let mut junk = Vec::new();
        let sent = raw.send(&ping, self.deadline()).await;
        let answer = match sent {
            Ok(()) => {
                raw.wait_for(&Id::Number(2), self.deadline(), |ev| match ev {
                    RawEvent::NullIdError(code) => reply = Some(*code),
                    RawEvent::NotProtocol(kind) => junk.push(*kind),
                    _ => {}
                })
                .await
            }
            Err(e) => Err(e),
        };
        let took = t.elapsed();
        match answer {
            Ok(_) => {
                let replied = match reply {
                    Some(code) => format!("it answered the bad line with error {code}"),
                    None => "no error reply to the bad line".to_owned(),
                };
                Row::new(
                    MALFORMED,
                    Status::Pass,
                    format!(
                        "ping answered in {} after the malformed line; {replied}",
                        fmt_duration(took)
                    ),
                )
                .measure_ms("ping_ms", took)
                .measure("error_reply_code", reply)
                .measure("non_protocol_lines", junk)
            }
            Err(RawError::Timeout) => {
                let alive = raw.try_exit().is_none();
                Row::new(
                    MALFORMED,
                    Status::Fail,
                    format!("no ping answer within {} after the malformed line", fmt_duration(self.s.timeout)),
                )
                .detail(if alive {
                    "the server is still running but stopped answering: one bad line must not end a session"
                } else {
                    "the server exited: one bad line must not end a session"
                })
            }
            Err(e) => {
                let status = raw.wait_exit(Duration::from_secs(1)).await;
                let what = match status {
                    Some(s) => format!(
                        "the server exited ({}) after the malformed line",
                        fmt_status(Some(s))
                    ),
                    None => format!("after the malformed line: {e}"),
                };
                Row::new(MALFORMED, Status::Fail, what).detail(
                    "answer an unparsable line with JSON-RPC error -32700 (id null) and keep reading",
                )
            }
        }
    }

    // ---- row 4 ----

    async fn large(&mut self) -> Row {
        self.progress(LARGE);
        let Some(tool) = self.s.large.clone() else {
            return Row::new(LARGE, Status::Skip, "no --large-tool given")
                .detail("name a tool with a large result: --large-tool NAME --large-args JSON");
        };
        if let Some(skip) = self.skip_without_session(LARGE) {
            return skip;
        }
        let client = match self.spawn() {
            Ok(c) => c,
            Err(e) => return Row::new(LARGE, Status::Fail, e),
        };
        let row = self.large_on(&client, &tool).await;
        let record = self.end("large response", client, End::Kill).await;
        with_exit(row, record.as_ref())
    }

    async fn large_on(&self, client: &Client, tool: &ToolCall) -> Row {
        if let Err(e) = self.initialize(client).await {
            return Row::new(LARGE, Status::Fail, format!("initialize: {e}"));
        }
        let limit = fmt_bytes(self.s.max_frame as u64);
        let t = Instant::now();
        let result = tokio::time::timeout(
            self.s.timeout + SLACK,
            client.request_with_timeout(TOOLS_CALL, Some(tool.params()), Some(self.s.timeout)),
        )
        .await;
        let took = t.elapsed();
        let timed_out = matches!(
            result,
            Err(_) | Ok(Err(RequestError::Failed(RequestFailure::TimedOut { .. })))
        );
        let mut result_bytes = None;
        let mut refused = false;
        let (mut status, mut value, mut detail) = match result {
            Ok(Ok(raw)) => {
                // The result alone; its line adds a small JSON-RPC envelope.
                let size = raw.get().len() as u64;
                result_bytes = Some(size);
                let flag = if is_error_result(&raw) {
                    " (isError: true)"
                } else {
                    ""
                };
                (
                    Status::Pass,
                    format!(
                        "{} result in {}{flag}, under the {limit} limit",
                        fmt_bytes(size),
                        fmt_duration(took)
                    ),
                    None,
                )
            }
            Ok(Err(RequestError::Failed(RequestFailure::ResponseTooLarge { .. }))) => {
                // Worded once the discarded size is known (after the ping).
                refused = true;
                (Status::Pass, String::new(), None)
            }
            Ok(Err(e)) if e.server_error().is_some() => (
                Status::Warn,
                format!("the tool answered an error: {e}"),
                Some(
                    "the large path was not exercised: check --large-tool and --large-args"
                        .to_owned(),
                ),
            ),
            Ok(Err(e)) => (
                Status::Fail,
                format!("{}: {}", tool.name, self.describe(&e)),
                Some(
                    "a large result must complete or fail cleanly; the session must survive it"
                        .to_owned(),
                ),
            ),
            Err(_) => (
                Status::Fail,
                format!("{}: {}", tool.name, self.no_answer()),
                Some(
                    "a large result must complete or fail cleanly; the session must survive it"
                        .to_owned(),
                ),
            ),
        };
        // The session must still answer, whatever happened to the big one.
        let ping = if client.is_finished() {
            Err("the session is over".to_owned())
        } else {
            self.ping(client).await
        };
        let m = client.metrics().await.unwrap_or_default();
        if refused {
            // A sequential server ends the oversized line before answering
            // the ping, so its full size is usually known by now.
            let size = match m.oversized_bytes_discarded {
                0 => "a".to_owned(),
                n => format!("{} ", fmt_bytes(n)),
            };
            value = format!(
                "{size}response refused at the {limit} wire limit after {} (discarded unparsed)",
                fmt_duration(took)
            );
        }
        if timed_out && m.oversized_ids_missing > 0 {
            // The server did answer, over the limit, in a frame whose id we
            // could not recover: our blind spot, not the server's fault.
            status = Status::Warn;
            value = format!(
                "the server sent {} over the {limit} wire limit (discarded unparsed) without a usable top-level id, so it could not be tied to the call",
                fmt_bytes(m.oversized_bytes_discarded)
            );
            detail = Some(
                "raise --max-frame to see the result; the request itself ran to its timeout"
                    .to_owned(),
            );
        }
        match &ping {
            Ok(p) => value.push_str(&format!("; then ping {}", fmt_duration(*p))),
            Err(e) => {
                status = Status::Fail;
                value.push_str(&format!("; then no ping answer ({e})"));
                detail
                    .get_or_insert_with(|| "the session must survive a large response".to_owned());
            }
        }
        let mut row = Row::new(LARGE, status, value)
            .measure_ms("call_ms", took)
            .measure("largest_frame_bytes", m.largest_frame)
            .measure("oversized_frames", m.oversized_frames)
            .measure("oversized_bytes_discarded", m.oversized_bytes_discarded)
            .measure("max_frame", self.s.max_frame as u64);
        if let Ok(p) = ping {
            row = row.measure_ms("ping_ms", p);
        }
        if let Some(n) = result_bytes {
            row = row.measure("result_bytes", n);
        }
        row.detail = detail;
        row
    }

    // ---- row 5 ----

    async fn slow_reader(&mut self) -> Row {
        self.progress(SLOW_READER);
        let Some(tool) = self.s.large.clone() else {
            return Row::new(SLOW_READER, Status::Skip, "no --large-tool given")
                .detail("the stall needs a response larger than the pipe buffer (--large-tool)");
        };
        if let Some(skip) = self.skip_without_session(SLOW_READER) {
            return skip;
        }
        let mut raw = match RawServer::spawn(&self.s.spec, self.s.max_frame) {
            Ok(r) => r,
            Err(e) => return Row::new(SLOW_READER, Status::Fail, format!("cannot start: {e}")),
        };
        let row = self.slow_reader_on(&mut raw, &tool).await;
        self.end_raw("slow reader", raw).await;
        row
    }

    async fn slow_reader_on(&self, raw: &mut RawServer, tool: &ToolCall) -> Row {
        if let Err(e) = raw_handshake(raw, self.rev, self.deadline()).await {
            return Row::new(
                SLOW_READER,
                Status::Fail,
                format!("handshake on a raw pipe: {e}"),
            );
        }
        let call = self
            .rev
            .stamp(json!({"jsonrpc": "2.0", "id": 2, "method": TOOLS_CALL,
            "params": {"name": tool.name, "arguments": tool.arguments}}));
        if let Err(e) = raw.send(&call, self.deadline()).await {
            return Row::new(SLOW_READER, Status::Fail, format!("sending the call: {e}"));
        }
        // Leave stdout unread; watch the pipe fill and stop filling.
        let paused = Instant::now();
        let capacity = raw.stdout_pipe_capacity();
        let mut in_pipe: Option<u64> = None;
        let mut last_growth = paused;
        let mut died = None;
        while paused.elapsed() < self.s.stall {
            tokio::time::sleep(SAMPLE).await;
            if let Some(n) = raw.unread_stdout() {
                if n > in_pipe.unwrap_or(0) {
                    last_growth = Instant::now();
                }
                in_pipe = Some(in_pipe.unwrap_or(0).max(n));
            }
            if let Some(status) = raw.try_exit() {
                died = Some(status);
                break;
            }
        }
        let resumed = Instant::now();
        let stalled = resumed.duration_since(last_growth);
        let answer = raw.wait_for(&Id::Number(2), self.deadline(), |_| {}).await;
        let drained = resumed.elapsed();
        // The response's own size; an oversized line's size is known once its
        // newline was read, which is before the ping's answer below.
        let (oversized, mut size, tool_error) = match answer {
            Ok(RawEvent::Message(Message::Response(r), bytes)) => (false, bytes, r.result.err()),
            Ok(_) => (true, 0, None),
            Err(e) => {
                let status = match died {
                    Some(s) => Some(s),
                    None => raw.wait_exit(Duration::from_millis(200)).await,
                };
                let what = match status {
                    Some(s) => format!(
                        "the server exited ({}) while its stdout was unread",
                        fmt_status(Some(s))
                    ),
                    None => format!("no response after reading resumed: {e}"),
                };
                return Row::new(SLOW_READER, Status::Fail, what)
                    .detail("a server blocked by a slow reader must resume when reading resumes")
                    .measure_ms("stall_ms", self.s.stall);
            }
        };
        let ping_sent = Instant::now();
        let ping = self
            .rev
            .stamp(json!({"jsonrpc": "2.0", "id": 3, "method": self.rev.probe()}));
        let ping = match raw.send(&ping, self.deadline()).await {
            Ok(()) => raw
                .wait_for(&Id::Number(3), self.deadline(), |_| {})
                .await
                .map(|_| ping_sent.elapsed()),
            Err(e) => Err(e),
        };
        if oversized {
            size = raw.discarded_bytes();
        }
        let size_text = if oversized {
            format!("{} response (refused at the wire limit)", fmt_bytes(size))
        } else {
            format!("{} response", fmt_bytes(size))
        };
        let mut row = match ping {
            Err(e) => Row::new(
                SLOW_READER,
                Status::Fail,
                format!("{size_text} arrived, then no ping answer: {e}"),
            )
            .detail("after a stall the session must answer the next request"),
            Ok(p) if tool_error.is_some() => Row::new(
                SLOW_READER,
                Status::Warn,
                format!(
                    "the tool answered an error ({}); ping {}",
                    tool_error
                        .map(|e| format!("{}: {}", e.code, e.message))
                        .unwrap_or_default(),
                    fmt_duration(p)
                ),
            )
            .detail("nothing was exercised: check --large-tool and --large-args")
            .measure_ms("ping_ms", p),
            Ok(p) => {
                // Blocked in write(): the response did not fit and the pipe
                // was full (where its capacity is unknown: held anything).
                let full = |n: u64| capacity.map_or(n > 0, |c| n >= c);
                match in_pipe {
                    Some(n) if size <= n => Row::new(
                        SLOW_READER,
                        Status::Warn,
                        format!(
                            "the {size_text} fit in the pipe; the server never blocked; ping {}",
                            fmt_duration(p)
                        ),
                    )
                    .detail(
                        "nothing was exercised: choose --large-args for a result larger than \
                         the pipe buffer",
                    ),
                    Some(n) if full(n) => Row::new(
                        SLOW_READER,
                        Status::Pass,
                        format!(
                            "blocked in write() {} with {} in the pipe; resumed: {size_text} \
                             in {}, ping {}",
                            fmt_duration(stalled),
                            fmt_bytes(n),
                            fmt_duration(drained),
                            fmt_duration(p)
                        ),
                    )
                    .measure_ms("blocked_ms", stalled),
                    Some(n) => Row::new(
                        SLOW_READER,
                        Status::Pass,
                        format!(
                            "the pipe held {} (not full) after {}: still producing; resumed: \
                             {size_text} in {}, ping {}",
                            fmt_bytes(n),
                            fmt_duration(self.s.stall),
                            fmt_duration(drained),
                            fmt_duration(p)
                        ),
                    ),
                    None => Row::new(
                        SLOW_READER,
                        Status::Pass,
                        format!(
                            "stdout unread {}; resumed: {size_text} in {}, ping {}",
                            fmt_duration(self.s.stall),
                            fmt_duration(drained),
                            fmt_duration(p)
                        ),
                    ),
                }
                .measure_ms("ping_ms", p)
            }
        };
        row = row
            .measure_ms("unread_ms", self.s.stall)
            .measure_ms("drain_ms", drained)
            .measure("response_bytes", size)
            .measure("stdout_bytes", raw.stdout_bytes())
            .measure("oversized", oversized);
        if let Some(n) = in_pipe {
            row = row.measure("bytes_in_pipe", n);
        }
        if let Some(c) = capacity {
            row = row.measure("pipe_capacity", c);
        }
        row
    }

    // ---- row 6 ----

    async fn cancel(&mut self) -> Row {
        self.progress(CANCEL);
        let Some(tool) = self.s.slow.clone() else {
            return Row::new(CANCEL, Status::Skip, "no --slow-tool given").detail(
                "name a tool that takes a second or more: --slow-tool NAME --slow-args JSON",
            );
        };
        if let Some(skip) = self.skip_without_session(CANCEL) {
            return skip;
        }
        let client = match self.spawn() {
            Ok(c) => c,
            Err(e) => return Row::new(CANCEL, Status::Fail, e),
        };
        let row = self.cancel_on(&client, &tool).await;
        let record = self.end("cancel", client, End::Kill).await;
        with_exit(row, record.as_ref())
    }

    async fn cancel_on(&self, client: &Client, tool: &ToolCall) -> Row {
        if let Err(e) = self.initialize(client).await {
            return Row::new(CANCEL, Status::Fail, format!("initialize: {e}"));
        }
        let before = client.metrics().await.unwrap_or_default();
        let started = Instant::now();
        let mut pending = match client
            .start_request(TOOLS_CALL, Some(tool.params()), Some(self.s.timeout))
            .await
        {
            Ok(p) => p,
            Err(e) => return Row::new(CANCEL, Status::Fail, format!("{}: {e}", tool.name)),
        };
        let mut problems = Vec::new();
        let mut status = Status::Pass;
        match tokio::time::timeout(self.s.cancel_after, &mut pending).await {
            Ok(outcome) => {
                status = Status::Warn;
                problems.push(format!(
                    "the slow tool ended in {} ({}), before the cancel at {}: nothing was \
                     cancelled; choose slower --slow-args",
                    fmt_duration(started.elapsed()),
                    if outcome.is_ok() { "result" } else { "error" },
                    fmt_duration(self.s.cancel_after)
                ));
            }
            Err(_) => {
                pending.cancel("mcp-stdio check: cancel test");
                let _ = pending.await;
            }
        }
        let ping = self.ping(client).await;
        let ping = match ping {
            Ok(p) => p,
            Err(e) => {
                return Row::new(
                    CANCEL,
                    Status::Fail,
                    format!("no answer to a ping after the cancel: {e}"),
                )
                .detail("after a cancel, a second request must complete promptly (G8)");
            }
        };
        tokio::time::sleep(LATE_WINDOW).await;
        let after = client.metrics().await.unwrap_or_default();
        let late = after.late_responses.saturating_sub(before.late_responses);
        if late > 0 {
            status = Status::Warn;
            problems.push(format!(
                "the server answered the cancelled request anyway ({late} late response{}); \
                 the spec says it MUST NOT",
                if late == 1 { "" } else { "s" }
            ));
        }
        if ping > PROMPT {
            status = Status::Warn;
            problems.push(format!(
                "the second request took {} (more than {}): blocked behind the cancelled work?",
                fmt_duration(ping),
                fmt_duration(PROMPT)
            ));
        }
        let mut row = Row::new(
            CANCEL,
            status,
            format!(
                "cancel at {}; ping {}; late responses in {}: {late}",
                fmt_duration(self.s.cancel_after),
                fmt_duration(ping),
                fmt_duration(LATE_WINDOW)
            ),
        )
        .measure_ms("cancel_after_ms", self.s.cancel_after)
        .measure_ms("ping_ms", ping)
        .measure("late_responses", late)
        .measure(
            "cancels_sent",
            after.cancels_sent.saturating_sub(before.cancels_sent),
        );
        if !problems.is_empty() {
            row = row.detail(problems.join("; "));
        }
        row
    }

    // ---- row 7 ----

    async fn stdin_eof(&mut self) -> Row {
        self.progress(STDIN_EOF);
        let client = match self.spawn() {
            Ok(c) => c,
            Err(e) => return Row::new(STDIN_EOF, Status::Fail, e),
        };
        let spawned = Instant::now();
        self.settle(&client).await;
        let eof_offset = spawned.elapsed();
        let Some(record) = self.end("stdin EOF", client, End::Shutdown).await else {
            return Row::new(
                STDIN_EOF,
                Status::Fail,
                "the session did not end within its bounds",
            );
        };
        let p = &record.process;
        let status = fmt_status(p.exit_status);
        // The host closes stdin by itself when the server closes its stdout:
        // a close (or an exit) stamped before ours was the server's doing.
        // (The record's times run from a spawn instant a little before ours.)
        let on_its_own = p.stdin_closed_at.is_some_and(|c| c < eof_offset)
            || p.exited_at.is_some_and(|e| e < eof_offset);
        if on_its_own {
            return Row::new(
                STDIN_EOF,
                Status::Fail,
                format!("ended by itself ({status}) before stdin was closed"),
            )
            .detail("the server closed its stdout or exited on its own")
            .measure("exit_status", status);
        }
        let since = |at: Option<Duration>| {
            p.exited_at
                .zip(at)
                .map(|(e, a)| e.saturating_sub(a))
                .unwrap_or_default()
        };
        let grace = fmt_duration(self.s.grace);
        let row = match p.ended_by {
            // `check` passes no signal on: the second never comes here.
            EndedBy::ExitedAfterStdinClose | EndedBy::ExitedAfterForwardedSignal => Row::new(
                STDIN_EOF,
                Status::Pass,
                format!(
                    "exited ({status}) {} after stdin EOF",
                    fmt_duration(since(p.stdin_closed_at))
                ),
            ),
            EndedBy::ExitedAfterTerm => Row::new(
                STDIN_EOF,
                Status::Warn,
                format!(
                    "ignored stdin EOF for {grace}; exited ({status}) {} after SIGTERM",
                    fmt_duration(since(p.term_sent_at))
                ),
            )
            .detail("a stdio server should exit when its stdin closes; TERM was needed"),
            EndedBy::ExitedAfterKill => Row::new(
                STDIN_EOF,
                Status::Fail,
                format!(
                    "ignored stdin EOF and SIGTERM ({grace} each); ended by SIGKILL ({status})"
                ),
            )
            .detail("a stdio server must exit when its stdin closes"),
            EndedBy::ExitNotObserved => Row::new(
                STDIN_EOF,
                Status::Fail,
                "no exit observed, even after SIGKILL",
            ),
            EndedBy::ExitedByItself => Row::new(
                STDIN_EOF,
                Status::Fail,
                format!("exited by itself ({status}) before stdin was closed"),
            )
            .detail("the server died on its own"),
            EndedBy::Crashed => Row::new(
                STDIN_EOF,
                Status::Fail,
                format!("crashed ({status}) while its stdin was being closed"),
            )
            .detail("the server died of a signal nobody sent it"),
        };
        let mut row = row
            .measure(
                "ended_by",
                serde_json::to_value(p.ended_by).unwrap_or_default(),
            )
            .measure("exit_status", status);
        if let Some(d) = p.shutdown_to_exit {
            row = row.measure_ms("eof_to_exit_ms", d);
        }
        row
    }

    // ---- row 8 ----

    async fn sigterm(&mut self) -> Row {
        self.progress(SIGTERM);
        let client = match self.spawn() {
            Ok(c) => c,
            Err(e) => return Row::new(SIGTERM, Status::Fail, e),
        };
        let spawned = Instant::now();
        self.settle(&client).await;
        if client.is_finished() {
            let record = self.end("SIGTERM", client, End::Wait).await;
            let status = fmt_status(record.and_then(|r| r.process.exit_status));
            return Row::new(
                SIGTERM,
                Status::Fail,
                format!("exited by itself ({status}) before the signal"),
            );
        }
        let term_at = Instant::now();
        // Through the Client: never to a group id it has already reaped.
        let _ = client.signal_group(Signal::Term);
        let deadline = term_at + self.s.grace;
        while !client.is_finished() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let needed_kill = !client.is_finished();
        if needed_kill {
            let _ = client.signal_group(Signal::Kill);
        }
        let record = self.end("SIGTERM", client, End::Wait).await;
        let exit = record.as_ref().and_then(|r| r.process.exit_status);
        let exited_at = record.as_ref().and_then(|r| r.process.exited_at);
        let term_offset = term_at.duration_since(spawned);
        let took = exited_at.map(|e| e.saturating_sub(term_offset));
        let status = fmt_status(exit);
        // Spawn time is taken just after `Client::spawn`, so an exit stamped
        // before the signal's offset happened before the signal.
        let before_signal = exited_at.is_some_and(|e| e < term_offset);
        let mut row = if before_signal {
            Row::new(
                SIGTERM,
                Status::Fail,
                format!("exited by itself ({status}) before the signal"),
            )
            .detail("the server died on its own")
        } else if needed_kill {
            Row::new(
                SIGTERM,
                Status::Fail,
                format!(
                    "still running {} after SIGTERM; ended by SIGKILL ({status})",
                    fmt_duration(self.s.grace)
                ),
            )
            .detail("a server must exit on SIGTERM; hosts and supervisors rely on it")
        } else {
            Row::new(
                SIGTERM,
                Status::Pass,
                format!(
                    "exited ({status}) {} after SIGTERM, stdin still open",
                    took.map_or_else(|| "?".to_owned(), fmt_duration)
                ),
            )
        };
        row = row
            .measure("exit_status", status)
            .measure("needed_kill", needed_kill);
        if let Some(d) = took {
            row = row.measure_ms("term_to_exit_ms", d);
        }
        row
    }

    // ---- rows 9 and 10 ----

    fn stderr_volume(&self) -> Row {
        let total: u64 = self.notes.iter().map(|n| n.stderr_seen).sum();
        let noisiest = self.notes.iter().max_by_key(|n| n.stderr_seen);
        let mut value = format!("{} over {} sessions", fmt_bytes(total), self.notes.len());
        if let Some(n) = noisiest.filter(|n| n.stderr_seen > 0) {
            value.push_str(&format!(
                " (most: {} in {})",
                fmt_bytes(n.stderr_seen),
                n.label
            ));
        }
        let mut row = if total > self.s.stderr_warn {
            // The record of a `Client` session says what its bounded capture kept.
            let note = self
                .notes
                .iter()
                .filter(|n| n.stderr_note.is_some())
                .max_by_key(|n| n.stderr_seen)
                .and_then(|n| n.stderr_note.clone())
                .map(|t| format!("; a host keeps only a bounded tail: {t}"))
                .unwrap_or_default();
            Row::new(STDERR_VOLUME, Status::Warn, value).detail(format!(
                "more than {} of stderr{note}; log less, or at a lower level",
                fmt_bytes(self.s.stderr_warn)
            ))
        } else {
            Row::new(STDERR_VOLUME, Status::Pass, value)
        };
        row = row
            .measure("stderr_bytes", total)
            .measure("warn_above", self.s.stderr_warn)
            .measure(
                "per_session",
                self.notes
                    .iter()
                    .map(|n| json!({"session": n.label, "bytes": n.stderr_seen, "truncation": n.stderr_note}))
                    .collect::<Vec<_>>(),
            );
        row
    }

    fn leftovers(&self) -> Row {
        if self.notes.iter().any(|n| n.leftovers.is_none()) {
            return Row::new(
                LEFTOVERS,
                Status::Skip,
                "process groups are scanned on Linux only (/proc)",
            );
        }
        let mut found = Vec::new();
        for n in &self.notes {
            for l in n.leftovers.iter().flatten() {
                found.push((n, l));
            }
        }
        let groups = self.notes.len();
        let list = found
            .iter()
            .map(|(n, l)| json!({"session": n.label, "pgid": n.pid, "pid": l.pid, "name": l.name}))
            .collect::<Vec<_>>();
        if found.is_empty() {
            return Row::new(
                LEFTOVERS,
                Status::Pass,
                format!("none in {groups} process groups after each session ended"),
            )
            .measure("groups_scanned", groups)
            .measure("leftovers", list);
        }
        let names = found
            .iter()
            .map(|(n, l)| format!("pid {} ({}) after {}", l.pid, l.name, n.label))
            .collect::<Vec<_>>()
            .join(", ");
        Row::new(
            LEFTOVERS,
            Status::Fail,
            format!("{} left running: {names}; killed", found.len()),
        )
        .detail(
            "a server's children must end with it: stop them on exit (or keep them in the \
             server's process group so the host's signal reaches them)",
        )
        .measure("groups_scanned", groups)
        .measure("leftovers", list)
    }
}

/// `initialize` (id 1) and `notifications/initialized` on a raw pipe; at
/// 2026-07-28, `server/discover` (id 1) and its answer.
async fn raw_handshake(
    raw: &mut RawServer,
    rev: Revision,
    deadline: Instant,
) -> Result<(), RawError> {
    if rev.is_modern() {
        let discover = rev.stamp(json!({"jsonrpc": "2.0", "id": 1, "method": DISCOVER}));
        raw.send(&discover, deadline).await?;
        raw.wait_for(&Id::Number(1), deadline, |_| {}).await?;
        return Ok(());
    }
    let params: Value = serde_json::from_str(initialize_params(&check_client(), None).get())
        .expect("the core's initialize params are JSON");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": INITIALIZE, "params": params});
    raw.send(&init, deadline).await?;
    raw.wait_for(&Id::Number(1), deadline, |_| {}).await?;
    raw.send(&json!({"jsonrpc": "2.0", "method": INITIALIZED}), deadline)
        .await
}

/// Adds how the server ended when the session closed under the row.
fn with_exit(row: Row, record: Option<&SessionRecord>) -> Row {
    match record {
        Some(r) if r.process.ended_by == EndedBy::ExitedByItself => {
            let status = fmt_status(r.process.exit_status);
            let mut row = row.measure("exit_status", status.as_str());
            if row.status == Status::Fail {
                row.value.push_str(&format!(" (server exited: {status})"));
            }
            row
        }
        _ => row,
    }
}

/// Row 1 failed: adds how the server ended (when it went away first) and
/// the end of its stderr, bounded (see [`crate::diagnose::StderrExcerpt`]).
fn with_server_end(mut row: Row, record: Option<&SessionRecord>) -> Row {
    let Some(r) = record else {
        return row;
    };
    let p = &r.process;
    let went_away = row.value == SESSION_CLOSED && crate::diagnose::ended_on_its_own(p);
    if went_away {
        let ours = p.ended_by != EndedBy::ExitedByItself;
        row.value = match p.exit_status {
            // A signal after our own SIGTERM may be ours: say only what the server did.
            Some(ExitStatus::Signal(_)) | None if ours => {
                "the server closed its stdout before answering initialize".to_owned()
            }
            status => format!(
                "the server {} before answering initialize",
                crate::diagnose::status_words(status)
            ),
        };
        row = row.measure("exit_status", fmt_status(p.exit_status));
    }
    row = row.measure("stderr_bytes", r.stderr.seen);
    match crate::diagnose::StderrExcerpt::of(&r.stderr_tail, r.stderr.seen, r.stderr.truncated) {
        Some(excerpt) => {
            row.detail = Some(format!(
                "{}; {}\n{}",
                row.detail.unwrap_or_default(),
                excerpt.header(),
                excerpt.indented("| ")
            ));
            row.measure("stderr_excerpt", excerpt.lines.join("\n"))
                .measure("stderr_excerpt_cut", excerpt.cut)
        }
        None if went_away => {
            row.detail = Some(format!(
                "{}; it wrote nothing to stderr: run the command by itself to see why",
                row.detail.unwrap_or_default()
            ));
            row
        }
        None => row,
    }
}

fn fmt_status(status: Option<ExitStatus>) -> String {
    match status {
        Some(ExitStatus::Code(c)) => format!("code {c}"),
        Some(ExitStatus::Signal(s)) => format!("signal {s}"),
        None => "no exit status observed".to_owned(),
    }
}

fn count_tools(raw: &RawResult) -> Option<usize> {
    #[derive(serde::Deserialize)]
    struct Listed {
        tools: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Listed>(raw.get())
        .ok()
        .map(|l| l.tools.len())
}

fn is_error_result(raw: &RawResult) -> bool {
    #[derive(serde::Deserialize)]
    struct ToolResult {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    serde_json::from_str::<ToolResult>(raw.get()).is_ok_and(|r| r.is_error)
}

/// What a decoder error kind means, for people.
fn kind_label(kind: &str) -> &str {
    match kind {
        "json" => "not JSON",
        "not_object" => "JSON but not an object",
        "batch" => "a batch array",
        "bad_version" => "no \"jsonrpc\": \"2.0\"",
        "invalid_id" => "an invalid id",
        "bad_member" => "a malformed member",
        "shape" => "neither request, response nor notification",
        "invalid_utf8" => "invalid UTF-8",
        "truncated_at_eof" => "an unterminated last line",
        other => other,
    }
}
