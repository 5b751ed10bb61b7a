//! The verdicts of `check`'s rows: what a row observed goes in, the row
//! (PASS / WARN / FAIL / SKIP, its value, its hint, its measures) comes out.
//!
//! No processes and no clock here: the battery (`battery.rs`) runs the
//! sessions and hands over what they showed, so each decision, and each
//! hint's words, is tested on its own (`rows/tests.rs`).

use std::time::Duration;

use mcp_stdio_core::{CaptureSummary, Implementation};
use mcp_stdio_core::{
    ClientMetrics, EndedBy, ErrorObject, ExitStatus, Negotiated, NegotiatedVia, ProcessOutcome,
    RawResult, SessionRecord, DISCOVER, INITIALIZE, WIRE_LIMIT_EXCEEDED,
};
use serde_json::json;

use super::procs::Leftover;
use super::report::{fmt_bytes, fmt_duration, Row, RowSpec, Status};

pub(super) const HANDSHAKE_ROW: RowSpec = RowSpec {
    id: "initialize",
    title: "initialize handshake",
};
pub(super) const STDOUT_HYGIENE: RowSpec = RowSpec {
    id: "stdout_hygiene",
    title: "stdout hygiene",
};
pub(super) const MALFORMED: RowSpec = RowSpec {
    id: "malformed_line",
    title: "survives a malformed line",
};
pub(super) const LARGE: RowSpec = RowSpec {
    id: "large_response",
    title: "large response",
};
pub(super) const SLOW_READER: RowSpec = RowSpec {
    id: "slow_reader",
    title: "slow reader",
};
pub(super) const CANCEL: RowSpec = RowSpec {
    id: "cancel",
    title: "cancel + second request",
};
pub(super) const STDIN_EOF: RowSpec = RowSpec {
    id: "stdin_eof",
    title: "exits on stdin EOF",
};
pub(super) const SIGTERM: RowSpec = RowSpec {
    id: "sigterm",
    title: "exits on SIGTERM",
};
pub(super) const STDERR_VOLUME: RowSpec = RowSpec {
    id: "stderr_volume",
    title: "stderr volume",
};
pub(super) const LEFTOVERS: RowSpec = RowSpec {
    id: "leftover_processes",
    title: "leftover processes",
};

/// A second request slower than this after a cancel is not "prompt" (G8).
pub(super) const PROMPT: Duration = Duration::from_millis(500);
/// How long the cancel row watches for a late response to the cancelled id.
pub(super) const LATE_WINDOW: Duration = Duration::from_secs(1);
/// Why a request failed when the server went away; row 1 replaces it with
/// what the session's record shows.
pub(super) const SESSION_CLOSED: &str =
    "the session closed (the server closed its stdout or exited)";

/// What one session's end showed, for rows 9 and 10.
#[derive(Debug)]
pub(super) struct SessionNote {
    pub(super) label: &'static str,
    pub(super) pid: u32,
    pub(super) stderr_seen: u64,
    pub(super) stderr_note: Option<String>,
    /// `None` where process groups cannot be scanned.
    pub(super) leftovers: Option<Vec<Leftover>>,
}

/// How a server ended and what it left on stderr, from a session's record.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerEnd<'a> {
    pub(super) process: &'a ProcessOutcome,
    /// The retained stderr, as the record renders it.
    pub(super) stderr_tail: &'a str,
    pub(super) stderr: CaptureSummary,
}

impl<'a> ServerEnd<'a> {
    pub(super) fn of(record: &'a SessionRecord) -> Self {
        Self {
            process: &record.process,
            stderr_tail: &record.stderr_tail,
            stderr: record.stderr,
        }
    }

    /// The end of its stderr, bounded (see [`crate::diagnose::StderrExcerpt`]).
    fn excerpt(&self) -> Option<crate::diagnose::StderrExcerpt> {
        crate::diagnose::StderrExcerpt::of(
            self.stderr_tail,
            self.stderr.seen,
            self.stderr.truncated,
        )
    }
}

/// `no answer within 10 s`.
pub(super) fn no_answer(timeout: Duration) -> String {
    format!("no answer within {}", fmt_duration(timeout))
}

// ---- rows 1 and 2 ----

/// Row 1 when the handshake succeeded in `took`, `proposed` being the
/// revision asked for.
pub(super) fn handshake_passed(init: &Negotiated, took: Duration, proposed: &str) -> Row {
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
    .measure("proposed_version", proposed)
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

/// Row 1 when the handshake failed with `error`.
pub(super) fn handshake_failed(error: String) -> Row {
    Row::new(HANDSHAKE_ROW, Status::Fail, error)
        .detail("a host cannot start a session: every other row that needs one is skipped")
}

/// Row 2 from the handshake session's counters, the probes' latencies, the
/// tools listed, and what went wrong on the way; `init_ok` whether row 1
/// passed.
pub(super) fn hygiene_row(
    m: &ClientMetrics,
    pings: &[Duration],
    tools: Option<usize>,
    problems: &[String],
    init_ok: bool,
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
    } else if !init_ok && m.frames == 0 {
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

/// What followed the malformed line.
#[derive(Debug)]
pub(super) enum MalformedSeen {
    /// The probe sent after it was answered in `took`; `reply` is the error
    /// code the bad line got (an error with id `null`), `junk` the kinds of
    /// non-protocol lines seen meanwhile.
    Answered {
        took: Duration,
        reply: Option<i64>,
        junk: Vec<&'static str>,
    },
    /// No answer to the probe before the deadline; `alive` whether the
    /// server still ran.
    NoAnswer { alive: bool },
    /// Waiting ended otherwise (`error`); `exit` how the server ended, if
    /// it did.
    Lost {
        exit: Option<ExitStatus>,
        error: String,
    },
}

/// Row 3 from what followed the malformed line.
pub(super) fn malformed_row(seen: MalformedSeen, timeout: Duration) -> Row {
    match seen {
        MalformedSeen::Answered { took, reply, junk } => {
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
        MalformedSeen::NoAnswer { alive } => Row::new(
            MALFORMED,
            Status::Fail,
            format!(
                "no ping answer within {} after the malformed line",
                fmt_duration(timeout)
            ),
        )
        .detail(if alive {
            "the server is still running but stopped answering: one bad line must not end a session"
        } else {
            "the server exited: one bad line must not end a session"
        }),
        MalformedSeen::Lost { exit, error } => {
            let what = match exit {
                Some(s) => format!(
                    "the server exited ({}) after the malformed line",
                    fmt_status(Some(s))
                ),
                None => format!("after the malformed line: {error}"),
            };
            Row::new(MALFORMED, Status::Fail, what).detail(
                "answer an unparsable line with JSON-RPC error -32700 (id null) and keep reading",
            )
        }
    }
}

// ---- row 4 ----

/// How the large call ended.
#[derive(Debug)]
pub(super) enum LargeOutcome {
    /// A result of `bytes` bytes (the result alone), `is_error` whether it
    /// was `isError: true`.
    Result { bytes: u64, is_error: bool },
    /// Refused at our wire limit, discarded unparsed.
    Refused,
    /// The server answered a JSON-RPC error: `text` as the client words it.
    ServerError { text: String, error: ErrorObject },
    /// The call failed otherwise, described.
    Failed(String),
    /// No outcome before our own backstop.
    NoAnswer,
}

/// What row 4 observed.
#[derive(Debug)]
pub(super) struct LargeSeen<'a> {
    pub(super) tool: &'a str,
    pub(super) outcome: LargeOutcome,
    /// How long the call took.
    pub(super) took: Duration,
    /// The call ran to a deadline (the client's or ours).
    pub(super) timed_out: bool,
    /// The probe after the call: its latency, or why it failed.
    pub(super) ping: Result<Duration, String>,
    /// The session's counters after the probe.
    pub(super) metrics: &'a ClientMetrics,
    /// Our wire limit (`--max-frame`).
    pub(super) max_frame: usize,
    /// `--timeout`.
    pub(super) timeout: Duration,
}

/// Row 4 from what the large call and the probe after it showed.
pub(super) fn large_row(seen: LargeSeen<'_>) -> Row {
    let LargeSeen {
        tool,
        outcome,
        took,
        timed_out,
        ping,
        metrics: m,
        max_frame,
        timeout,
    } = seen;
    let limit = fmt_bytes(max_frame as u64);
    let failed = || {
        Some("a large result must complete or fail cleanly; the session must survive it".to_owned())
    };
    let mut result_bytes = None;
    let mut server_limit = None;
    let (mut status, mut value, mut detail) = match outcome {
        LargeOutcome::Result { bytes, is_error } => {
            result_bytes = Some(bytes);
            let flag = if is_error { " (isError: true)" } else { "" };
            (
                Status::Pass,
                format!(
                    "{} result in {}{flag}, under the {limit} limit",
                    fmt_bytes(bytes),
                    fmt_duration(took)
                ),
                None,
            )
        }
        LargeOutcome::Refused => {
            // A sequential server ends the oversized line before answering
            // the ping, so its full size is usually known by now.
            let size = match m.oversized_bytes_discarded {
                0 => "a ".to_owned(),
                n => format!("{} ", fmt_bytes(n)),
            };
            (
                Status::Pass,
                format!(
                    "{size}response refused at the {limit} wire limit after {} (discarded unparsed)",
                    fmt_duration(took)
                ),
                None,
            )
        }
        LargeOutcome::ServerError { text, error } => match own_limit(&error) {
            // The server's setting refused, not the arguments: say so.
            Some(theirs) => {
                server_limit = Some(theirs);
                (
                    Status::Warn,
                    format!("{} refused the result: {text}", theirs.words()),
                    Some(theirs.hint(max_frame)),
                )
            }
            None => (
                Status::Warn,
                format!("the tool answered an error: {text}"),
                Some(
                    "the large path was not exercised: check --large-tool and --large-args"
                        .to_owned(),
                ),
            ),
        },
        LargeOutcome::Failed(e) => (Status::Fail, format!("{tool}: {e}"), failed()),
        LargeOutcome::NoAnswer => (
            Status::Fail,
            format!("{tool}: {}", no_answer(timeout)),
            failed(),
        ),
    };
    if timed_out && m.oversized_ids_missing > 0 {
        // The server did answer, over the limit, in a frame whose id we
        // could not recover: our blind spot, not the server's fault.
        status = Status::Warn;
        value = format!(
            "the server sent {} over the {limit} wire limit (discarded unparsed) without a usable top-level id, so it could not be tied to the call",
            fmt_bytes(m.oversized_bytes_discarded)
        );
        detail = Some(
            "raise --max-frame to see the result; the request itself ran to its timeout".to_owned(),
        );
    }
    match &ping {
        Ok(p) => value.push_str(&format!("; then ping {}", fmt_duration(*p))),
        Err(e) => {
            status = Status::Fail;
            value.push_str(&format!("; then no ping answer ({e})"));
            detail.get_or_insert_with(|| "the session must survive a large response".to_owned());
        }
    }
    let mut row = Row::new(LARGE, status, value)
        .measure_ms("call_ms", took)
        .measure("largest_frame_bytes", m.largest_frame)
        .measure("oversized_frames", m.oversized_frames)
        .measure("oversized_bytes_discarded", m.oversized_bytes_discarded)
        .measure("max_frame", max_frame as u64);
    if let Ok(p) = ping {
        row = row.measure_ms("ping_ms", p);
    }
    if let Some(n) = result_bytes {
        row = row.measure("result_bytes", n);
    }
    if let Some(theirs) = server_limit {
        row = theirs.measure(row);
    }
    row.detail = detail;
    row
}

/// The server refused its own result at its own wire limit, as the error
/// it answered shows: our `serve`, the guard and the rmcp transports answer
/// `WIRE_LIMIT_EXCEEDED` (-32000) with `data: {"limit": N, "seen": M}` (G9), and
/// any error whose message names a "wire limit" counts too. The cause is
/// then the server's setting, not the arguments: the tool ran, and its
/// result never reached this client's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OwnLimit {
    /// The server's limit in bytes, when its error gave it.
    pub(super) limit: Option<u64>,
    /// The error's code.
    pub(super) code: i64,
}

/// The server's own limit behind `error`; `None` for any other error (the
/// tool's own).
pub(super) fn own_limit(error: &ErrorObject) -> Option<OwnLimit> {
    #[derive(serde::Deserialize)]
    struct Data {
        limit: u64,
    }
    let limit = error
        .data
        .as_ref()
        .and_then(|d| serde_json::from_str::<Data>(d.get()).ok())
        .map(|d| d.limit);
    let ours = error.code == WIRE_LIMIT_EXCEEDED && limit.is_some();
    let named = error.message.to_ascii_lowercase().contains("wire limit");
    (ours || named).then_some(OwnLimit {
        limit,
        code: error.code,
    })
}

impl OwnLimit {
    /// `the server's own 1.0 MiB wire limit`.
    fn words(self) -> String {
        match self.limit {
            Some(l) => format!("the server's own {} wire limit", fmt_bytes(l)),
            None => "the server's own wire limit".to_owned(),
        }
    }

    /// What was measured and what to do, for a row whose large result the
    /// server would not send.
    fn hint(self, max_frame: usize) -> String {
        let under = match self.limit {
            Some(l) => format!(" under {}", fmt_bytes(l)),
            None => String::new(),
        };
        format!(
            "the tool ran, but {} (or that of a proxy in front of it) refused to send its \
             result: the arguments are not the cause, and this client's --max-frame ({}) was \
             never reached; raise the server's limit (its error names the setting), or choose \
             --large-args for a result{under}",
            self.words(),
            fmt_bytes(max_frame as u64)
        )
    }

    /// Adds `server_error_code` and, when known, `server_limit_bytes`.
    fn measure(self, row: Row) -> Row {
        let row = row.measure("server_error_code", self.code);
        match self.limit {
            Some(l) => row.measure("server_limit_bytes", l),
            None => row,
        }
    }
}

// ---- row 5 ----

/// Row 5 when no response came once reading resumed (`error`): `exit` how
/// the server ended, if it did; `stall` how long stdout was left unread.
pub(super) fn slow_reader_lost(exit: Option<ExitStatus>, error: &str, stall: Duration) -> Row {
    let what = match exit {
        Some(s) => format!(
            "the server exited ({}) while its stdout was unread",
            fmt_status(Some(s))
        ),
        None => format!("no response after reading resumed: {error}"),
    };
    Row::new(SLOW_READER, Status::Fail, what)
        .detail("a server blocked by a slow reader must resume when reading resumes")
        .measure_ms("stall_ms", stall)
}

/// What row 5 observed once the response came.
#[derive(Debug)]
pub(super) struct SlowSeen {
    /// The response passed our wire limit (refused, its size known).
    pub(super) oversized: bool,
    /// The response line's size in bytes.
    pub(super) size: u64,
    /// The error the tool answered, if it did.
    pub(super) tool_error: Option<ErrorObject>,
    /// The probe after the response: its latency, or why it failed.
    pub(super) ping: Result<Duration, String>,
    /// The most bytes seen waiting in the stdout pipe while it was unread;
    /// `None` where the pipe cannot be measured.
    pub(super) in_pipe: Option<u64>,
    /// The stdout pipe's capacity, where known.
    pub(super) capacity: Option<u64>,
    /// From the pipe's last growth to the end of the stall.
    pub(super) stalled: Duration,
    /// From the end of the stall to the response.
    pub(super) drained: Duration,
    /// How long stdout was left unread (`--stall`).
    pub(super) stall: Duration,
    /// Bytes read from stdout in all.
    pub(super) stdout_bytes: u64,
    /// Our wire limit (`--max-frame`).
    pub(super) max_frame: usize,
}

/// Row 5 from what the stall showed.
pub(super) fn slow_reader_row(seen: SlowSeen) -> Row {
    let SlowSeen {
        oversized,
        size,
        tool_error,
        ping,
        in_pipe,
        capacity,
        stalled,
        drained,
        stall,
        stdout_bytes,
        max_frame,
    } = seen;
    let size_text = if oversized {
        format!("{} response (refused at the wire limit)", fmt_bytes(size))
    } else {
        format!("{} response", fmt_bytes(size))
    };
    let mut row = match (ping, tool_error) {
        (Err(e), _) => Row::new(
            SLOW_READER,
            Status::Fail,
            format!("{size_text} arrived, then no ping answer: {e}"),
        )
        .detail("after a stall the session must answer the next request"),
        (Ok(p), Some(e)) => {
            let error = format!("{}: {}", e.code, e.message);
            let ping = fmt_duration(p);
            match own_limit(&e) {
                // The server's setting refused, not the arguments: say so.
                Some(theirs) => theirs.measure(
                    Row::new(
                        SLOW_READER,
                        Status::Warn,
                        format!(
                            "{} refused the result ({error}); ping {ping}",
                            theirs.words()
                        ),
                    )
                    .detail(format!("nothing was exercised: {}", theirs.hint(max_frame))),
                ),
                None => Row::new(
                    SLOW_READER,
                    Status::Warn,
                    format!("the tool answered an error ({error}); ping {ping}"),
                )
                .detail("nothing was exercised: check --large-tool and --large-args"),
            }
            .measure_ms("ping_ms", p)
        }
        (Ok(p), None) => {
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
                        fmt_duration(stall),
                        fmt_duration(drained),
                        fmt_duration(p)
                    ),
                ),
                None => Row::new(
                    SLOW_READER,
                    Status::Pass,
                    format!(
                        "stdout unread {}; resumed: {size_text} in {}, ping {}",
                        fmt_duration(stall),
                        fmt_duration(drained),
                        fmt_duration(p)
                    ),
                ),
            }
            .measure_ms("ping_ms", p)
        }
    };
    row = row
        .measure_ms("unread_ms", stall)
        .measure_ms("drain_ms", drained)
        .measure("response_bytes", size)
        .measure("stdout_bytes", stdout_bytes)
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

/// Row 6 when the probe after the cancel got no answer (`error`).
pub(super) fn cancel_without_ping(error: &str) -> Row {
    Row::new(
        CANCEL,
        Status::Fail,
        format!("no answer to a ping after the cancel: {error}"),
    )
    .detail("after a cancel, a second request must complete promptly (G8)")
}

/// What row 6 observed, the probe answered.
#[derive(Debug)]
pub(super) struct CancelSeen {
    /// When the cancel was due (`--cancel-after`).
    pub(super) cancel_after: Duration,
    /// The slow call ended before the cancel was due: after how long, and
    /// whether with a result (else an error).
    pub(super) ended_early: Option<(Duration, bool)>,
    /// The probe's latency after the cancel.
    pub(super) ping: Duration,
    /// Responses to the cancelled id within [`LATE_WINDOW`].
    pub(super) late: u64,
    /// `notifications/cancelled` sent.
    pub(super) cancels_sent: u64,
}

/// Row 6 from what the cancel showed.
pub(super) fn cancel_row(seen: &CancelSeen) -> Row {
    let CancelSeen {
        cancel_after,
        ended_early,
        ping,
        late,
        cancels_sent,
    } = *seen;
    let mut problems = Vec::new();
    let mut status = Status::Pass;
    if let Some((took, with_result)) = ended_early {
        status = Status::Warn;
        problems.push(format!(
            "the slow tool ended in {} ({}), before the cancel at {}: nothing was \
             cancelled; choose slower --slow-args",
            fmt_duration(took),
            if with_result { "result" } else { "error" },
            fmt_duration(cancel_after)
        ));
    }
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
            fmt_duration(cancel_after),
            fmt_duration(ping),
            fmt_duration(LATE_WINDOW)
        ),
    )
    .measure_ms("cancel_after_ms", cancel_after)
    .measure_ms("ping_ms", ping)
    .measure("late_responses", late)
    .measure("cancels_sent", cancels_sent);
    if !problems.is_empty() {
        row = row.detail(problems.join("; "));
    }
    row
}

// ---- row 7 ----

/// Row 7 from how the server ended: `eof_offset` is when our shutdown
/// began (from our spawn instant), `grace` each step's grace. An exit on
/// EOF with a failure status is a WARN, and a crash a FAIL, each with the
/// end of the server's stderr (what it said about it).
pub(super) fn stdin_eof_row(end: ServerEnd<'_>, eof_offset: Duration, grace: Duration) -> Row {
    let p = end.process;
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
    let grace = fmt_duration(grace);
    let row = match p.ended_by {
        EndedBy::ExitedAfterStdinClose if p.exit_status == Some(ExitStatus::Code(0)) => Row::new(
            STDIN_EOF,
            Status::Pass,
            format!(
                "exited ({status}) {} after stdin EOF",
                fmt_duration(since(p.stdin_closed_at))
            ),
        ),
        // `check` passes no signal on: the second never comes here.
        EndedBy::ExitedAfterStdinClose | EndedBy::ExitedAfterForwardedSignal => with_stderr(
            Row::new(
                STDIN_EOF,
                Status::Warn,
                format!(
                    "exited ({status}) {} after stdin EOF: a failure status",
                    fmt_duration(since(p.stdin_closed_at))
                ),
            )
            .detail(
                "stdin EOF is the normal end of a stdio session: exit with status 0 then; \
                 a failure status tells the host something went wrong",
            ),
            &end,
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
            format!("ignored stdin EOF and SIGTERM ({grace} each); ended by SIGKILL ({status})"),
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
        EndedBy::Crashed => with_stderr(
            Row::new(
                STDIN_EOF,
                Status::Fail,
                format!("crashed ({status}) while its stdin was being closed"),
            )
            .detail("the server died of a signal nobody sent it"),
            &end,
        ),
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

/// Row 8 when the server was gone before the signal was sent.
pub(super) fn sigterm_too_late(exit: Option<ExitStatus>) -> Row {
    Row::new(
        SIGTERM,
        Status::Fail,
        format!("exited by itself ({}) before the signal", fmt_status(exit)),
    )
}

/// What row 8 observed.
#[derive(Debug)]
pub(super) struct SigtermSeen {
    /// The exit status observed, if one was.
    pub(super) exit: Option<ExitStatus>,
    /// When the exit was observed, from the record's spawn instant.
    pub(super) exited_at: Option<Duration>,
    /// When `SIGTERM` was sent, from our spawn instant (taken just after
    /// the record's).
    pub(super) term_offset: Duration,
    /// The server still ran a grace after `SIGTERM`: `SIGKILL` was sent.
    pub(super) needed_kill: bool,
    /// `--grace`.
    pub(super) grace: Duration,
}

/// Row 8 from how the server met `SIGTERM`.
pub(super) fn sigterm_row(seen: &SigtermSeen) -> Row {
    let took = seen.exited_at.map(|e| e.saturating_sub(seen.term_offset));
    let status = fmt_status(seen.exit);
    // Spawn time is taken just after `Client::spawn`, so an exit stamped
    // before the signal's offset happened before the signal.
    let before_signal = seen.exited_at.is_some_and(|e| e < seen.term_offset);
    let mut row = if before_signal {
        Row::new(
            SIGTERM,
            Status::Fail,
            format!("exited by itself ({status}) before the signal"),
        )
        .detail("the server died on its own")
    } else if seen.needed_kill {
        Row::new(
            SIGTERM,
            Status::Fail,
            format!(
                "still running {} after SIGTERM; ended by SIGKILL ({status})",
                fmt_duration(seen.grace)
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
        .measure("needed_kill", seen.needed_kill);
    if let Some(d) = took {
        row = row.measure_ms("term_to_exit_ms", d);
    }
    row
}

// ---- rows 9 and 10 ----

/// Row 9 from every session's stderr, warning above `warn_above` bytes.
pub(super) fn stderr_volume_row(notes: &[SessionNote], warn_above: u64) -> Row {
    let total: u64 = notes.iter().map(|n| n.stderr_seen).sum();
    let noisiest = notes.iter().max_by_key(|n| n.stderr_seen);
    let mut value = format!("{} over {} sessions", fmt_bytes(total), notes.len());
    if let Some(n) = noisiest.filter(|n| n.stderr_seen > 0) {
        value.push_str(&format!(
            " (most: {} in {})",
            fmt_bytes(n.stderr_seen),
            n.label
        ));
    }
    let mut row = if total > warn_above {
        // The record of a `Client` session says what its bounded capture kept.
        let note = notes
            .iter()
            .filter(|n| n.stderr_note.is_some())
            .max_by_key(|n| n.stderr_seen)
            .and_then(|n| n.stderr_note.clone())
            .map(|t| format!("; a host keeps only a bounded tail: {t}"))
            .unwrap_or_default();
        Row::new(STDERR_VOLUME, Status::Warn, value).detail(format!(
            "more than {} of stderr{note}; log less, or at a lower level",
            fmt_bytes(warn_above)
        ))
    } else {
        Row::new(STDERR_VOLUME, Status::Pass, value)
    };
    row = row
        .measure("stderr_bytes", total)
        .measure("warn_above", warn_above)
        .measure(
            "per_session",
            notes
                .iter()
                .map(|n| json!({"session": n.label, "bytes": n.stderr_seen, "truncation": n.stderr_note}))
                .collect::<Vec<_>>(),
        );
    row
}

/// Row 10 from every session's sweep of its process group.
pub(super) fn leftovers_row(notes: &[SessionNote]) -> Row {
    if notes.iter().any(|n| n.leftovers.is_none()) {
        return Row::new(
            LEFTOVERS,
            Status::Skip,
            "process groups are scanned on Linux only (/proc)",
        );
    }
    let mut found = Vec::new();
    for n in notes {
        for l in n.leftovers.iter().flatten() {
            found.push((n, l));
        }
    }
    let groups = notes.len();
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

// ---- what rows add ----

/// Adds how the server ended when the session closed under the row.
pub(super) fn with_exit(row: Row, process: Option<&ProcessOutcome>) -> Row {
    match process {
        Some(p) if p.ended_by == EndedBy::ExitedByItself => {
            let status = fmt_status(p.exit_status);
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
pub(super) fn with_server_end(mut row: Row, end: Option<ServerEnd<'_>>) -> Row {
    let Some(end) = end else {
        return row;
    };
    let p = end.process;
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
    row = row.measure("stderr_bytes", end.stderr.seen);
    match end.excerpt() {
        Some(excerpt) => with_excerpt(row, &excerpt),
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

/// Adds the end of the server's stderr to the row's hint (or that it
/// wrote none), and its bytes to the measures.
fn with_stderr(row: Row, end: &ServerEnd<'_>) -> Row {
    let row = row.measure("stderr_bytes", end.stderr.seen);
    match end.excerpt() {
        Some(excerpt) => with_excerpt(row, &excerpt),
        None => {
            let mut row = row;
            row.detail = Some(match row.detail.take() {
                Some(d) => format!("{d}; it wrote nothing to stderr"),
                None => "it wrote nothing to stderr".to_owned(),
            });
            row
        }
    }
}

/// Adds `excerpt` under the row's hint, and to the measures.
fn with_excerpt(mut row: Row, excerpt: &crate::diagnose::StderrExcerpt) -> Row {
    let lines = format!("{}\n{}", excerpt.header(), excerpt.indented("| "));
    row.detail = Some(match row.detail.take() {
        Some(d) => format!("{d}; {lines}"),
        None => lines,
    });
    row.measure("stderr_excerpt", excerpt.lines.join("\n"))
        .measure("stderr_excerpt_cut", excerpt.cut)
}

// ---- words ----

/// `code 1`, `signal 15`, or `no exit status observed`.
pub(super) fn fmt_status(status: Option<ExitStatus>) -> String {
    match status {
        Some(ExitStatus::Code(c)) => format!("code {c}"),
        Some(ExitStatus::Signal(s)) => format!("signal {s}"),
        None => "no exit status observed".to_owned(),
    }
}

/// The number of tools in a `tools/list` result; `None` when it has no
/// `tools` array.
pub(super) fn count_tools(raw: &RawResult) -> Option<usize> {
    #[derive(serde::Deserialize)]
    struct Listed {
        tools: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Listed>(raw.get())
        .ok()
        .map(|l| l.tools.len())
}

/// Whether a `tools/call` result says `isError: true`.
pub(super) fn is_error_result(raw: &RawResult) -> bool {
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

#[cfg(test)]
mod tests;
