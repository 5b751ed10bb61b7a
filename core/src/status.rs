//! The status port (F3): a guard answers `mcp-stdio ps` and `mcp-stdio
//! logs` on a Unix socket of its user's, one request and one answer per
//! connection. Sans-IO: the adapter accepts, reads, writes and closes; this
//! machine decides who is served, what a request asks, what goes back and
//! who is dropped, within named bounds (G1): at most
//! [`MAX_STATUS_CLIENTS`] connections, a request of at most
//! [`MAX_STATUS_REQUEST`] bytes, an answer of at most [`MAX_STATUS_REPLY`]
//! bytes, and [`STATUS_CLIENT_DEADLINE`] for the whole exchange: a client
//! that sends nothing or does not read its answer is dropped then. Nothing
//! here waits, and the session never waits for a client.
//!
//! The protocol: one JSON line in (`{"request":"status"}`, or
//! `{"request":"logs","bytes":N}`), one JSON line out (the answer, or
//! `{"schema":1,"error":"…"}`), then the guard closes. A `logs` request
//! with `"follow":true` stays open after its answer and gets the log
//! copy's lines as they come ([`StatusPort::follow`]), until the client
//! closes, or falls [`MAX_FOLLOW_BUFFER`] bytes behind and is dropped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The version of the status answers' shape; a reader refuses a newer one
/// it does not know.
pub const STATUS_SCHEMA: u32 = 1;

/// Connections served at once; one more is refused (closed at once).
pub const MAX_STATUS_CLIENTS: usize = 8;

/// Bytes of one request line, its newline included.
pub const MAX_STATUS_REQUEST: usize = 1024;

/// Bytes of one answer (the status, or a stderr tail of at most
/// [`MAX_STATUS_LOG_BYTES`] with its escaping).
pub const MAX_STATUS_REPLY: usize = 512 * 1024;

/// Bytes of the server's stderr a `logs` request may ask for.
pub const MAX_STATUS_LOG_BYTES: usize = 64 * 1024;

/// Bytes a following client (`logs -f`) may fall behind before it is dropped.
pub const MAX_FOLLOW_BUFFER: usize = 256 * 1024;

/// The time a client has for the whole exchange: its request in, the
/// answer taken. Past it, it is dropped.
pub const STATUS_CLIENT_DEADLINE: Duration = Duration::from_secs(2);

/// One connection of the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatusConn(u64);

impl StatusConn {
    /// A connection id no port gave (the fuzz harness asks about those too).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn for_fuzzing(n: u64) -> Self {
        Self(u64::MAX - n)
    }
}

/// What a client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusRequest {
    /// The guard's status ([`GuardStatus`](crate::GuardStatus)).
    Status,
    /// The newest `bytes` of the server's kept stderr (at most
    /// [`MAX_STATUS_LOG_BYTES`]).
    Logs {
        /// Bytes asked for, already capped.
        bytes: usize,
        /// Stay open for the lines that come next.
        follow: bool,
    },
}

/// Whether a new connection is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Served: read it, and feed what comes to the port.
    Served(StatusConn),
    /// Close it at once: `full` ([`MAX_STATUS_CLIENTS`] are served) or
    /// `other_user` (its peer is not of the guard's uid, or that could not
    /// be read).
    Refused(&'static str),
}

/// The adapter's next step.
#[derive(Debug, PartialEq, Eq)]
pub enum StatusOutput<'a> {
    /// A client asked this: build the answer and hand it to
    /// [`StatusPort::reply`].
    Request(StatusConn, StatusRequest),
    /// Write what the socket takes of these bytes now, then report it with
    /// [`StatusPort::handle_written`].
    Write(StatusConn, &'a [u8]),
    /// Close the connection (its exchange is over, or it is dropped).
    Close(StatusConn),
}

/// The port's counters, shown in the status itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusPortCounters {
    /// Answers written whole.
    pub answered: u64,
    /// Connections refused because [`MAX_STATUS_CLIENTS`] were served.
    pub refused_full: u64,
    /// Connections refused because the peer was of another uid.
    pub refused_other_user: u64,
    /// Requests that were not valid (answered with an error).
    pub bad_requests: u64,
    /// Clients dropped at [`STATUS_CLIENT_DEADLINE`] or on a failed read or write.
    pub dropped: u64,
    /// Following clients dropped because they fell [`MAX_FOLLOW_BUFFER`] behind.
    pub dropped_behind: u64,
}

#[derive(Debug)]
enum Phase {
    /// Reading the request line.
    Reading(Vec<u8>),
    /// The request was given out; waiting for [`StatusPort::reply`].
    Asked,
    /// Writing the answer from this offset (a follower: and the lines after it).
    Writing(Vec<u8>, usize),
    /// Over: its `Close` is queued.
    Closing,
}

#[derive(Debug)]
struct Conn {
    id: StatusConn,
    /// `None` for a follower once its request came.
    deadline: Option<Instant>,
    /// A `logs` request with `follow`: open after its answer.
    follow: bool,
    phase: Phase,
    /// A write returned `WouldBlock`: not offered again until it is writable.
    parked: bool,
}

/// The status port's machine; see the module docs.
#[derive(Debug, Default)]
pub struct StatusPort {
    conns: Vec<Conn>,
    next: u64,
    /// Requests to give out, and closes to give, in order.
    events: VecDeque<StatusOutput<'static>>,
    counters: StatusPortCounters,
}

impl StatusPort {
    /// A port serving no one yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A connection was accepted whose peer has `peer_uid` (an error when
    /// it could not be read); `own_uid` is the guard's.
    pub fn admit(
        &mut self,
        now: Instant,
        peer_uid: std::io::Result<u32>,
        own_uid: u32,
    ) -> Admission {
        if !matches!(peer_uid, Ok(uid) if uid == own_uid) {
            self.counters.refused_other_user += 1;
            return Admission::Refused("other_user");
        }
        if self.conns.len() >= MAX_STATUS_CLIENTS {
            self.counters.refused_full += 1;
            return Admission::Refused("full");
        }
        let id = StatusConn(self.next);
        self.next += 1;
        self.conns.push(Conn {
            id,
            deadline: Some(now + STATUS_CLIENT_DEADLINE),
            follow: false,
            phase: Phase::Reading(Vec::new()),
            parked: false,
        });
        Admission::Served(id)
    }

    /// Whether `id` is to be read: its request, or a follower's end.
    pub fn wants_read(&self, id: StatusConn) -> bool {
        self.conn(id).is_some_and(|c| match c.phase {
            Phase::Reading(_) => true,
            Phase::Writing(..) => c.follow,
            _ => false,
        })
    }

    /// Following clients now: while there are any, feed them the log
    /// copy's lines with [`follow`](Self::follow).
    pub fn followers(&self) -> usize {
        self.conns
            .iter()
            .filter(|c| c.follow && matches!(c.phase, Phase::Writing(..)))
            .count()
    }

    /// Lines for the following clients; one that would fall more than
    /// [`MAX_FOLLOW_BUFFER`] bytes behind is dropped instead (never waited for).
    pub fn follow(&mut self, lines: &[u8]) {
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            let (true, Phase::Writing(buf, at)) = (c.follow, &mut c.phase) else {
                continue;
            };
            if buf.len() - *at + lines.len() > MAX_FOLLOW_BUFFER {
                self.counters.dropped_behind += 1;
                self.close_at(i);
            } else {
                buf.drain(..*at);
                *at = 0;
                buf.extend_from_slice(lines);
            }
        }
    }

    /// A read of `id` returned this (`buf` holds the bytes read).
    pub fn handle_read(&mut self, id: StatusConn, result: std::io::Result<usize>, buf: &[u8]) {
        let Some(i) = self.index(id) else { return };
        let n = match result {
            // A follower's client closing is its ordinary end.
            Ok(0) if self.conns[i].follow => {
                self.counters.answered += 1;
                return self.close_at(i);
            }
            Ok(0) => return self.drop_at(i),
            Ok(n) => n.min(buf.len()),
            Err(e) if is_transient(&e) => return,
            Err(_) => return self.drop_at(i),
        };
        let Phase::Reading(line) = &mut self.conns[i].phase else {
            // Bytes after the request: ignored.
            return;
        };
        let chunk = &buf[..n];
        let end = chunk.iter().position(|&b| b == b'\n');
        let take = end.map_or(n, |e| e + 1);
        // Without its newline yet, a line at the limit can only pass it.
        let room = MAX_STATUS_REQUEST - usize::from(end.is_none());
        if line.len() + take > room {
            return self.refuse(i, "the request is longer than 1024 bytes");
        }
        line.extend_from_slice(&chunk[..take]);
        if end.is_none() {
            return;
        }
        match parse_request(line) {
            Ok(request) => {
                let conn = &mut self.conns[i];
                conn.phase = Phase::Asked;
                if let StatusRequest::Logs { follow: true, .. } = request {
                    conn.follow = true;
                    conn.deadline = None;
                }
                self.events.push_back(StatusOutput::Request(id, request));
            }
            Err(why) => self.refuse(i, why),
        }
    }

    /// The answer to `id`'s request (one JSON value; the newline is added).
    /// An answer over [`MAX_STATUS_REPLY`] is replaced by an error.
    pub fn reply(&mut self, id: StatusConn, mut answer: Vec<u8>) {
        let Some(i) = self.index(id) else { return };
        if !matches!(self.conns[i].phase, Phase::Asked) {
            return;
        }
        if answer.len() >= MAX_STATUS_REPLY {
            answer = error_line("the answer is larger than its limit");
        } else {
            answer.push(b'\n');
        }
        self.conns[i].phase = Phase::Writing(answer, 0);
    }

    /// A write of `id`'s answer returned this.
    pub fn handle_written(&mut self, id: StatusConn, result: std::io::Result<usize>) {
        let Some(i) = self.index(id) else { return };
        let conn = &mut self.conns[i];
        let Phase::Writing(bytes, at) = &mut conn.phase else {
            return;
        };
        match result {
            Ok(0) => self.drop_at(i),
            Ok(n) => {
                *at = (*at + n).min(bytes.len());
                // A follower stays, waiting for the next lines.
                if *at == bytes.len() && !conn.follow {
                    self.counters.answered += 1;
                    self.close_at(i);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => conn.parked = true,
            Err(e) if is_transient(&e) => {}
            Err(_) => self.drop_at(i),
        }
    }

    /// `id`'s socket can take bytes again after a write returned `WouldBlock`.
    pub fn handle_writable(&mut self, id: StatusConn) {
        if let Some(i) = self.index(id) {
            self.conns[i].parked = false;
        }
    }

    /// Time passed: clients past their deadline are dropped.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(i) = self.conns.iter().position(|c| {
            c.deadline.is_some_and(|d| d <= now) && !matches!(c.phase, Phase::Closing)
        }) {
            self.drop_at(i);
        }
    }

    /// The next step for the adapter: the requests and closes in order,
    /// then the answers to write (each until its socket takes nothing).
    pub fn poll_output(&mut self) -> Option<StatusOutput<'_>> {
        if let Some(event) = self.events.pop_front() {
            if let StatusOutput::Close(id) = event {
                self.conns.retain(|c| c.id != id);
            }
            return Some(event);
        }
        self.conns.iter().find_map(|c| match &c.phase {
            Phase::Writing(bytes, at) if !c.parked && *at < bytes.len() => {
                Some(StatusOutput::Write(c.id, &bytes[*at..]))
            }
            _ => None,
        })
    }

    /// The earliest client deadline (`None`: no client).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .iter()
            .filter(|c| !matches!(c.phase, Phase::Closing))
            .filter_map(|c| c.deadline)
            .min()
    }

    /// Connections served now.
    pub fn clients(&self) -> usize {
        self.conns.len()
    }

    /// The port's counters.
    pub fn counters(&self) -> StatusPortCounters {
        self.counters
    }

    fn conn(&self, id: StatusConn) -> Option<&Conn> {
        self.conns.iter().find(|c| c.id == id)
    }

    fn index(&self, id: StatusConn) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.id == id && !matches!(c.phase, Phase::Closing))
    }

    /// Answers with an error, then closes.
    fn refuse(&mut self, i: usize, why: &str) {
        self.counters.bad_requests += 1;
        self.conns[i].phase = Phase::Writing(error_line(why), 0);
    }

    fn drop_at(&mut self, i: usize) {
        self.counters.dropped += 1;
        self.close_at(i);
    }

    fn close_at(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        conn.phase = Phase::Closing;
        self.events.push_back(StatusOutput::Close(conn.id));
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
    )
}

/// `{"schema":1,"error":"…"}` and its newline.
fn error_line(why: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({"schema": STATUS_SCHEMA, "error": why}))
        .unwrap_or_default();
    line.push(b'\n');
    line
}

/// One request line: `{"request":"status"}` or `{"request":"logs","bytes":N}`.
fn parse_request(line: &[u8]) -> Result<StatusRequest, &'static str> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wire {
        request: String,
        #[serde(default)]
        bytes: Option<u64>,
        #[serde(default)]
        follow: bool,
    }
    let wire: Wire = serde_json::from_slice(line).map_err(|_| {
        "not a request: send one JSON line, {\"request\":\"status\"} or {\"request\":\"logs\",\"bytes\":N}"
    })?;
    match (wire.request.as_str(), wire.bytes) {
        ("status", None) if !wire.follow => Ok(StatusRequest::Status),
        ("logs", bytes) => Ok(StatusRequest::Logs {
            bytes: bytes.map_or(MAX_STATUS_LOG_BYTES, |b| {
                usize::try_from(b)
                    .unwrap_or(usize::MAX)
                    .min(MAX_STATUS_LOG_BYTES)
            }),
            follow: wire.follow,
        }),
        ("status", _) => Err("`bytes` and `follow` belong to a logs request"),
        _ => Err("unknown request: this guard knows status and logs"),
    }
}

#[cfg(test)]
mod tests;
