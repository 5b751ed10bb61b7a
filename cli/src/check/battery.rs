//! The rows of `check`, run in order against fresh server processes.
//!
//! Rows 1–2 share one session (handshake, a few requests); rows 3–8 each get
//! a fresh process; rows 9–10 add up what every session's end showed. Every
//! wait is bounded by `--timeout` (a little slack is added around the
//! client's own deadlines), and every session ends with the supervisor's
//! sequence, so a hung server costs time only up to those bounds.
//!
//! This file runs the sessions and gathers what they showed; what that
//! makes of each row (the verdict, the value, the hint) is decided in
//! `rows.rs`.

use std::time::{Duration, Instant};

use mcp_stdio_core::{
    initialize_params, is_modern, Implementation, Negotiated, NegotiatedVia, RequestStamp,
    VersionPolicy, DISCOVER, INITIALIZE, INITIALIZED, LATEST_HANDSHAKE_VERSION,
    MODERN_PROTOCOL_VERSIONS, PING, TOOLS_CALL, TOOLS_LIST,
};
use mcp_stdio_core::{to_raw, Id, Message, RawValue};
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, RequestFailure};
use mcp_stdio_core::{CommandSpec, SessionRecord};
use mcp_stdio_core::{EndedBy, Signal};
use mcp_stdio_tokio::Client;
use serde_json::{json, Value};

use super::procs;
use super::raw::{RawError, RawEvent, RawServer};
use super::report::{Report, Row, RowSpec, Status};
use super::rows::{
    cancel_row, cancel_without_ping, count_tools, fmt_status, handshake_failed, handshake_passed,
    hygiene_row, is_error_result, large_row, leftovers_row, malformed_row, no_answer, sigterm_row,
    sigterm_too_late, slow_reader_lost, slow_reader_row, stderr_volume_row, stdin_eof_row,
    with_exit, with_server_end, CancelSeen, LargeOutcome, LargeSeen, MalformedSeen, ServerEnd,
    SessionNote, SigtermSeen, SlowSeen, CANCEL, HANDSHAKE_ROW, LARGE, LATE_WINDOW, LEFTOVERS,
    MALFORMED, SESSION_CLOSED, SIGTERM, SLOW_READER, STDERR_VOLUME, STDIN_EOF, STDOUT_HYGIENE,
};

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

const ROW_COUNT: usize = 10;

/// Slack around the client's own deadlines, so they fire first.
const SLACK: Duration = Duration::from_secs(1);
/// Sampling period of the stdout pipe while it is left unread.
const SAMPLE: Duration = Duration::from_millis(10);
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
        no_answer(self.s.timeout)
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
                handshake_passed(&init, took, self.rev.version())
            }
            Err(e) => handshake_failed(e),
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
            with_server_end(row1, record.as_ref().map(ServerEnd::of))
        };
        let row2 = match record {
            Some(r) => hygiene_row(&r.metrics, &pings, tools, &problems, self.init_ok),
            None => Row::new(
                STDOUT_HYGIENE,
                Status::Fail,
                "the session did not end within its bounds",
            ),
        };
        Ok([row1, row2])
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
        let seen = match answer {
            Ok(_) => MalformedSeen::Answered { took, reply, junk },
            Err(RawError::Timeout) => MalformedSeen::NoAnswer {
                alive: raw.try_exit().is_none(),
            },
            Err(e) => MalformedSeen::Lost {
                exit: raw.wait_exit(Duration::from_secs(1)).await,
                error: e.to_string(),
            },
        };
        malformed_row(seen, self.s.timeout)
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
        with_exit(row, record.as_ref().map(|r| &r.process))
    }

    async fn large_on(&self, client: &Client, tool: &ToolCall) -> Row {
        if let Err(e) = self.initialize(client).await {
            return Row::new(LARGE, Status::Fail, format!("initialize: {e}"));
        }
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
        let outcome = match result {
            Ok(Ok(raw)) => LargeOutcome::Result {
                // The result alone; its line adds a small JSON-RPC envelope.
                bytes: raw.get().len() as u64,
                is_error: is_error_result(&raw),
            },
            // Worded once the discarded size is known (after the ping).
            Ok(Err(RequestError::Failed(RequestFailure::ResponseTooLarge { .. }))) => {
                LargeOutcome::Refused
            }
            Ok(Err(e)) => match e.server_error() {
                Some(error) => LargeOutcome::ServerError {
                    error: error.clone(),
                    text: e.to_string(),
                },
                None => LargeOutcome::Failed(self.describe(&e)),
            },
            Err(_) => LargeOutcome::NoAnswer,
        };
        // The session must still answer, whatever happened to the big one.
        let ping = if client.is_finished() {
            Err("the session is over".to_owned())
        } else {
            self.ping(client).await
        };
        let metrics = client.metrics().await.unwrap_or_default();
        large_row(LargeSeen {
            tool: &tool.name,
            outcome,
            took,
            timed_out,
            ping,
            metrics: &metrics,
            max_frame: self.s.max_frame,
            timeout: self.s.timeout,
        })
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
                let exit = match died {
                    Some(s) => Some(s),
                    None => raw.wait_exit(Duration::from_millis(200)).await,
                };
                return slow_reader_lost(exit, &e.to_string(), self.s.stall);
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
        slow_reader_row(SlowSeen {
            oversized,
            size,
            tool_error,
            ping: ping.map_err(|e| e.to_string()),
            in_pipe,
            capacity,
            stalled,
            drained,
            stall: self.s.stall,
            stdout_bytes: raw.stdout_bytes(),
            max_frame: self.s.max_frame,
        })
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
        with_exit(row, record.as_ref().map(|r| &r.process))
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
        let ended_early = match tokio::time::timeout(self.s.cancel_after, &mut pending).await {
            Ok(outcome) => Some((started.elapsed(), outcome.is_ok())),
            Err(_) => {
                pending.cancel("mcp-stdio check: cancel test");
                let _ = pending.await;
                None
            }
        };
        let ping = match self.ping(client).await {
            Ok(p) => p,
            Err(e) => return cancel_without_ping(&e),
        };
        tokio::time::sleep(LATE_WINDOW).await;
        let after = client.metrics().await.unwrap_or_default();
        cancel_row(&CancelSeen {
            cancel_after: self.s.cancel_after,
            ended_early,
            ping,
            late: after.late_responses.saturating_sub(before.late_responses),
            cancels_sent: after.cancels_sent.saturating_sub(before.cancels_sent),
        })
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
        stdin_eof_row(ServerEnd::of(&record), eof_offset, self.s.grace)
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
            return sigterm_too_late(record.and_then(|r| r.process.exit_status));
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
        sigterm_row(&SigtermSeen {
            exit: record.as_ref().and_then(|r| r.process.exit_status),
            exited_at: record.as_ref().and_then(|r| r.process.exited_at),
            term_offset: term_at.duration_since(spawned),
            needed_kill,
            grace: self.s.grace,
        })
    }

    // ---- rows 9 and 10 ----

    fn stderr_volume(&self) -> Row {
        stderr_volume_row(&self.notes, self.s.stderr_warn)
    }

    fn leftovers(&self) -> Row {
        leftovers_row(&self.notes)
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
