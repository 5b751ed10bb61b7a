//! A raw pipe session with a server, for the rows our `Client` cannot play:
//! writing a malformed line, and *not* reading stdout for a while.
//!
//! The `Client` never stops reading stdout (G1) and only sends well-formed
//! messages, which is the point of the library. To show what a server does
//! when a host misbehaves, `check` spawns it with plain `tokio::process`
//! pipes, writes bytes itself and frames stdout with the core's [`Framer`]
//! (so the wire limit still applies before any parse, G2) — reading only when
//! the row says so. stderr is always drained by a task of its own, so the
//! server never blocks on it. Spawning goes through `mcp-stdio-sys`, the
//! exit and the group's signals through the tokio adapter's `Leader`
//! (observed without reaping, reaped when the session ends, never signalled
//! after), and the end of a session is the core's
//! [`ProcessSupervisor`] cancel sequence, as in every adapter.
//!
//! [`Framer`]: https://docs.rs/mcp-stdio-core/latest/mcp_stdio_core/struct.Framer.html
//! [`ProcessSupervisor`]: https://docs.rs/mcp-stdio-core/latest/mcp_stdio_core/struct.ProcessSupervisor.html

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_stdio_core::{ChildPipes, EndedBy, ProcessAction, ProcessSupervisor, SupervisorConfig};
use mcp_stdio_core::{CommandSpec, ExitStatus};
use mcp_stdio_core::{FrameError, FrameEvent, Framer, FramerConfig};
use mcp_stdio_core::{Id, Message};
use mcp_stdio_tokio::driver::Runtime;
use mcp_stdio_tokio::leader::Leader;
use mcp_stdio_tokio::runtime::Tokio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

/// Bytes read from stdout per read call.
const READ_CHUNK: usize = 64 * 1024;
/// Events read while a write waits and not yet taken by `next_event`. Past
/// it the write keeps reading (G1) but sheds what no row waits for:
/// notifications, server requests and non-protocol lines are dropped and
/// counted; responses (and oversized lines, which may be one) are kept up to
/// [`MAX_QUEUED_RESPONSES`] more.
const MAX_QUEUED_EVENTS: usize = 1024;
/// Responses kept past [`MAX_QUEUED_EVENTS`] while a write waits; past both
/// every event read is shed. One read adds at most `READ_CHUNK / 2` events
/// before shedding runs, so the queue never holds more than
/// 1,024 + 1,024 + 32,768 events.
const MAX_QUEUED_RESPONSES: usize = 1024;
/// Frames larger than this are not parsed as a `serde_json::Value` to look
/// for an error object (only decoded with the core's raw-value decoder).
const SMALL_FRAME: usize = 64 * 1024;

/// Something the server wrote on stdout.
#[derive(Debug)]
pub(crate) enum RawEvent {
    /// A JSON-RPC message, and the size of its line in bytes.
    Message(Message, u64),
    /// An error response whose id is `null` (the JSON-RPC answer to a line
    /// that could not be parsed), with its error code.
    NullIdError(i64),
    /// A line that is not a protocol message, with the decoder's error kind.
    NotProtocol(&'static str),
    /// A line over the wire limit (discarded unparsed), with its id: found in
    /// its first bytes (reported as the limit is crossed) or by the whole-line
    /// scan (reported at its end); `None` when it has no usable id.
    Oversized(Option<Id>),
}

/// Why waiting for the server's output ended without what was wanted.
#[derive(Debug)]
pub(crate) enum RawError {
    /// The deadline passed.
    Timeout,
    /// stdout reached end-of-file (the server closed it or exited).
    Eof,
    /// Reading or writing a pipe failed.
    Io(std::io::Error),
}

impl std::fmt::Display for RawError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("no answer before the deadline"),
            Self::Eof => f.write_str("the server closed its stdout"),
            Self::Io(e) => write!(f, "pipe error: {e}"),
        }
    }
}

/// How a raw session ended.
#[derive(Debug)]
pub(crate) struct RawEnd {
    /// The exit status observed, if one was.
    pub(crate) exit_status: Option<ExitStatus>,
    /// The last shutdown step taken before the exit.
    pub(crate) ended_by: EndedBy,
    /// stderr bytes seen over the session.
    pub(crate) stderr_bytes: u64,
}

/// A server on raw pipes.
#[derive(Debug)]
pub(crate) struct RawServer {
    leader: Leader,
    pid: u32,
    spawned_at: Instant,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    framer: Framer,
    events: VecDeque<RawEvent>,
    /// Events dropped by [`shed_past_cap`] while a write waited.
    shed: u64,
    buf: Vec<u8>,
    stderr_bytes: Arc<AtomicU64>,
    stderr_task: Option<JoinHandle<()>>,
    exit: Option<ExitStatus>,
}

impl RawServer {
    /// Spawns `spec` (no shell; its own process group; tied to our life like
    /// a `Client`'s server) with all three streams piped; frames stdout under
    /// `max_frame`. Must run inside tokio.
    pub(crate) fn spawn(spec: &CommandSpec, max_frame: usize) -> std::io::Result<Self> {
        let mut child = mcp_stdio_sys::spawn_piped(spec)?;
        let spawned_at = Instant::now();
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // Owns the child from here: an error below kills and reaps it.
        let leader = Leader::new(&Tokio::current()?, child);
        let stdin = stdin.map(ChildStdin::from_std).transpose()?;
        let stdout = stdout.map(ChildStdout::from_std).transpose()?;
        let stderr = stderr
            .map(tokio::process::ChildStderr::from_std)
            .transpose()?;
        let pid = leader.pid();
        let stderr_bytes = Arc::new(AtomicU64::new(0));
        let stderr_task = stderr.map(|mut err| {
            let count = stderr_bytes.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = err.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    count.fetch_add(n as u64, Ordering::Relaxed);
                }
            })
        });
        let mut framer_config = FramerConfig::default();
        framer_config.max_frame(max_frame);
        Ok(Self {
            stdin,
            stdout,
            leader,
            pid,
            spawned_at,
            framer: Framer::new(framer_config),
            events: VecDeque::new(),
            shed: 0,
            buf: vec![0u8; READ_CHUNK],
            stderr_bytes,
            stderr_task,
            exit: None,
        })
    }

    /// The server's pid (also its process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Bytes of stdout framed so far.
    pub(crate) fn stdout_bytes(&self) -> u64 {
        self.framer.stats().bytes
    }

    /// Events read while a write waited and dropped because the queue was
    /// past [`MAX_QUEUED_EVENTS`] (notifications and the like first).
    #[cfg(test)]
    pub(crate) fn shed_events(&self) -> u64 {
        self.shed
    }

    /// Bytes of oversized lines discarded so far.
    pub(crate) fn discarded_bytes(&self) -> u64 {
        self.framer.stats().discarded_bytes
    }

    /// Writes `bytes` to the server's stdin, within `deadline`, reading its
    /// stdout meanwhile (G1): a server that reads stdin only once its own
    /// output is taken must not stall the write. What is read is framed and
    /// queued for [`next_event`](Self::next_event); past
    /// [`MAX_QUEUED_EVENTS`] the write still reads, shedding what no row
    /// waits for (counted, and logged at debug). Rows that
    /// leave stdout unread on purpose stop reading only after their small
    /// writes are done.
    pub(crate) async fn write(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), RawError> {
        let Self {
            stdin,
            stdout,
            framer,
            events,
            buf,
            shed,
            ..
        } = self;
        let Some(stdin) = stdin.as_mut() else {
            return Err(RawError::Io(std::io::ErrorKind::BrokenPipe.into()));
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        let write = async {
            stdin.write_all(bytes).await?;
            stdin.flush().await
        };
        tokio::pin!(write);
        loop {
            tokio::select! {
                r = &mut write => return r.map_err(RawError::Io),
                r = read_opt(stdout, buf), if stdout.is_some() => {
                    match r {
                        Ok(0) | Err(_) => {
                            *stdout = None;
                            framer.finish(|ev| push_event(events, ev));
                        }
                        Ok(n) => framer.push(&buf[..n], |ev| push_event(events, ev)),
                    }
                    let dropped = shed_past_cap(events);
                    if dropped > 0 {
                        *shed += dropped;
                        tracing::debug!(dropped, total = *shed, "queue full while writing: events shed");
                    }
                }
                () = tokio::time::sleep_until(deadline) => return Err(RawError::Timeout),
            }
        }
    }

    /// Writes one JSON message and its newline.
    pub(crate) async fn send(
        &mut self,
        message: &serde_json::Value,
        deadline: Instant,
    ) -> Result<(), RawError> {
        let mut line = serde_json::to_vec(message).expect("a serde_json::Value always serializes");
        line.push(b'\n');
        self.write(&line, deadline).await
    }

    /// The next thing the server wrote on stdout, reading only as needed.
    pub(crate) async fn next_event(&mut self, deadline: Instant) -> Result<RawEvent, RawError> {
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Ok(ev);
            }
            let Some(stdout) = self.stdout.as_mut() else {
                return Err(RawError::Eof);
            };
            let deadline = tokio::time::Instant::from_std(deadline);
            let n = match tokio::time::timeout_at(deadline, stdout.read(&mut self.buf)).await {
                Err(_) => return Err(RawError::Timeout),
                Ok(Err(e)) => {
                    self.stdout = None;
                    return Err(RawError::Io(e));
                }
                Ok(Ok(0)) => {
                    self.stdout = None;
                    let events = &mut self.events;
                    self.framer.finish(|ev| push_event(events, ev));
                    continue;
                }
                Ok(Ok(n)) => n,
            };
            let events = &mut self.events;
            self.framer
                .push(&self.buf[..n], |ev| push_event(events, ev));
        }
    }

    /// Reads until the response to `id` (or an oversized line carrying `id`,
    /// or with no recoverable id) arrives; everything read before it is
    /// handed to `seen`. Returns the event that ended the wait.
    pub(crate) async fn wait_for(
        &mut self,
        id: &Id,
        deadline: Instant,
        mut seen: impl FnMut(&RawEvent),
    ) -> Result<RawEvent, RawError> {
        loop {
            let ev = self.next_event(deadline).await?;
            let hit = match &ev {
                RawEvent::Message(Message::Response(r), _) => &r.id == id,
                RawEvent::Oversized(hint) => hint.as_ref().is_none_or(|h| h == id),
                _ => false,
            };
            if hit {
                return Ok(ev);
            }
            seen(&ev);
        }
    }

    /// Bytes waiting unread in the stdout pipe right now (`FIONREAD`).
    #[cfg(unix)]
    pub(crate) fn unread_stdout(&self) -> Option<u64> {
        rustix::io::ioctl_fionread(self.stdout.as_ref()?).ok()
    }

    /// Bytes waiting unread in the stdout pipe: not known on this OS.
    #[cfg(not(unix))]
    pub(crate) fn unread_stdout(&self) -> Option<u64> {
        None
    }

    /// The capacity of the stdout pipe, where the OS tells it.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn stdout_pipe_capacity(&self) -> Option<u64> {
        rustix::pipe::fcntl_getpipe_size(self.stdout.as_ref()?)
            .ok()
            .map(|n| n as u64)
    }

    /// The capacity of the stdout pipe: not known on this OS.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn stdout_pipe_capacity(&self) -> Option<u64> {
        None
    }

    /// The exit status, if the server has exited (does not wait, does not reap).
    pub(crate) fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            if let Ok(Some(status)) = self.leader.try_exited() {
                self.exit = Some(status);
            }
        }
        self.exit
    }

    /// Waits up to `within` for the server to exit (does not reap).
    pub(crate) async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        if self.exit.is_none() {
            if let Ok(Ok(status)) = tokio::time::timeout(within, self.leader.exited()).await {
                self.exit = Some(status);
            }
        }
        self.exit
    }

    /// Ends the session like `Client::kill`: the core's cancel sequence (close
    /// stdin and `SIGTERM` to the group at once, `SIGKILL` after `grace`, the
    /// exit awaited 1 s more), with stdout no longer read; the observed exit.
    /// (These sessions' ends are not what their rows measure.)
    ///
    /// stderr is drained by its own task and not handed to the supervisor:
    /// the supervisor would `SIGKILL` the group when a grandchild holds stderr
    /// after the server's exit, and the leftover-processes row must still see
    /// what the server left behind.
    pub(crate) async fn finish(mut self, grace: Duration) -> RawEnd {
        let mut config = SupervisorConfig::default();
        config
            .term_grace(grace)
            .reader_drain_deadline(Duration::from_secs(1));
        let mut supervisor = ProcessSupervisor::new(config);
        let stdin_only = ChildPipes {
            stdin: true,
            stdout: false,
            stderr: false,
        };
        supervisor.handle_spawned(self.spawned_at, stdin_only);
        self.stdout = None;
        if let Some(status) = self.try_exit() {
            supervisor.handle_exited(Instant::now(), status);
        }
        supervisor.cancel(Instant::now());
        let ended_by = self.supervise(&mut supervisor).await;
        // The session is over: reaped, its group never signalled again (the
        // leftover sweep then looks at members only, by pid).
        self.leader.reap();
        if let Some(mut task) = self.stderr_task.take() {
            // An escaped grandchild can hold stderr open: bound the wait.
            if tokio::time::timeout(Duration::from_secs(1), &mut task)
                .await
                .is_err()
            {
                tracing::debug!(pid = self.pid, "stderr still open; not waiting for it");
                task.abort();
            }
        }
        RawEnd {
            exit_status: self.exit,
            ended_by,
            stderr_bytes: self.stderr_bytes.load(Ordering::Relaxed),
        }
    }

    /// Carries out `supervisor`'s actions until it finishes, feeding it the
    /// exit and its deadlines; how the server ended.
    async fn supervise(&mut self, supervisor: &mut ProcessSupervisor) -> EndedBy {
        let mut can_wait = true;
        loop {
            match supervisor.poll_action() {
                Some(ProcessAction::CloseStdin) => self.stdin = None,
                Some(ProcessAction::SignalGroup(signal)) => {
                    let _ = self.leader.signal(signal);
                }
                // No reader is handed to the supervisor (see `finish`).
                Some(ProcessAction::AbandonReaders) => {}
                Some(ProcessAction::Finished(outcome)) => return outcome.ended_by,
                // A step this loop does not carry out; the supervisor's deadlines still end it.
                Some(_) => {}
                None => {
                    let deadline = supervisor.poll_timeout();
                    if deadline.is_none() && !can_wait {
                        // Nothing left to wait for: the exit cannot be observed.
                        return EndedBy::ExitNotObserved;
                    }
                    let timer = async {
                        match deadline {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        status = self.leader.exited(), if can_wait => match status {
                            Ok(status) => {
                                self.exit = Some(status);
                                supervisor.handle_exited(Instant::now(), status);
                            }
                            Err(e) => {
                                tracing::debug!(pid = self.pid, error = %e, "waiting for the server failed");
                                can_wait = false;
                            }
                        },
                        () = timer => supervisor.handle_timeout(Instant::now()),
                    }
                }
            }
        }
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        if self.exit.is_some() {
            // It ended by itself: what it left behind is for the leftover
            // sweep to find, so reap without a signal.
            self.leader.reap();
        }
        // Otherwise the `Leader`'s own drop kills the group (one syscall,
        // never a task: a dropped session must not outlive us), then reaps.
        if let Some(task) = self.stderr_task.take() {
            task.abort();
        }
    }
}

/// Reads `stdout` if it is still open (else waits forever: a disabled
/// branch of the caller's select).
async fn read_opt(stdout: &mut Option<ChildStdout>, buf: &mut [u8]) -> std::io::Result<usize> {
    match stdout {
        Some(out) => out.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Drops, from the events past [`MAX_QUEUED_EVENTS`], those no row waits
/// for (everything but responses and oversized lines), and past
/// [`MAX_QUEUED_RESPONSES`] more, everything; returns how many were dropped.
fn shed_past_cap(events: &mut VecDeque<RawEvent>) -> u64 {
    if events.len() <= MAX_QUEUED_EVENTS {
        return 0;
    }
    let before = events.len();
    let mut index = 0usize;
    let mut kept_past_cap = 0usize;
    events.retain(|ev| {
        index += 1;
        if index <= MAX_QUEUED_EVENTS {
            return true;
        }
        let wanted = matches!(
            ev,
            RawEvent::Message(Message::Response(_), _) | RawEvent::Oversized(_)
        );
        if wanted && kept_past_cap < MAX_QUEUED_RESPONSES {
            kept_past_cap += 1;
            true
        } else {
            false
        }
    });
    (before - events.len()) as u64
}

fn push_event(events: &mut VecDeque<RawEvent>, ev: FrameEvent<'_>) {
    match ev {
        FrameEvent::Frame(text) => events.push_back(classify(&text)),
        // An id among the line's first bytes: reported as the limit is crossed.
        FrameEvent::Error(FrameError::Oversized {
            id_hint: Some(id), ..
        }) => {
            events.push_back(RawEvent::Oversized(Some(id)));
        }
        // Otherwise at the line's end, with the id the whole-line scan found
        // wherever it sat (G3), or none; the size is in the framer's stats.
        FrameEvent::Error(FrameError::Oversized { id_hint: None, .. }) => {}
        FrameEvent::Error(FrameError::OversizedEnded {
            recovered, hinted, ..
        }) => {
            if !hinted {
                events.push_back(RawEvent::Oversized(recovered.id().cloned()));
            }
        }
        FrameEvent::Error(FrameError::InvalidUtf8 { .. }) => {
            events.push_back(RawEvent::NotProtocol("invalid_utf8"));
        }
        FrameEvent::Error(_) => events.push_back(RawEvent::NotProtocol("truncated_at_eof")),
    }
}

fn classify(text: &str) -> RawEvent {
    match Message::decode(text) {
        Ok(m) => RawEvent::Message(m, text.len() as u64),
        Err(e) => {
            if text.len() <= SMALL_FRAME {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
                    if v.get("id") == Some(&serde_json::Value::Null) {
                        if let Some(code) = v.pointer("/error/code").and_then(|c| c.as_i64()) {
                            return RawEvent::NullIdError(code);
                        }
                    }
                }
            }
            RawEvent::NotProtocol(e.kind())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// G1: a server that reads stdin only once its own (large) output was
    /// taken: the write reads stdout meanwhile and completes, where a write
    /// awaited alone would wait for the deadline with both pipes full.
    #[tokio::test]
    async fn g1_a_write_reads_stdout_meanwhile() {
        let script = "head -c 1048576 /dev/zero | tr '\\0' a; echo; cat > /dev/null";
        let spec = CommandSpec::from_argv(["sh", "-c", script]).expect("argv");
        let mut raw = RawServer::spawn(&spec, 4 << 20).expect("spawn sh");
        let payload = vec![b'x'; 1 << 20];
        let t = Instant::now();
        let wrote = raw.write(&payload, t + Duration::from_secs(20)).await;
        eprintln!("1 MiB written while 1 MiB was read, in {:?}", t.elapsed());
        assert!(wrote.is_ok(), "{wrote:?}");
        match raw.next_event(t + Duration::from_secs(20)).await {
            Ok(RawEvent::NotProtocol(_)) => {}
            other => panic!("expected the long line as one non-protocol frame, got {other:?}"),
        }
        assert_eq!(raw.stdout_bytes(), (1 << 20) + 1);
        let _ = raw.finish(Duration::from_millis(500)).await;
    }

    /// G1: a server that floods notifications before it reads stdin does not
    /// stall a write once the queue is full: the write keeps reading, sheds
    /// the notifications past the cap and keeps the response a row waits for.
    #[tokio::test]
    async fn g1_a_write_past_the_queue_cap_sheds_notifications_and_keeps_reading() {
        let script = r#"awk 'BEGIN { for (i = 0; i < 100000; i++) print "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}"; print "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}" }'; cat > /dev/null"#;
        let spec = CommandSpec::from_argv(["sh", "-c", script]).expect("argv");
        let mut raw = RawServer::spawn(&spec, 1 << 20).expect("spawn sh");
        let payload = vec![b'x'; 1 << 20];
        let t = Instant::now();
        let wrote = raw.write(&payload, t + Duration::from_secs(30)).await;
        eprintln!(
            "1 MiB written while 100,000 notifications were read, in {:?}; {} shed",
            t.elapsed(),
            raw.shed_events()
        );
        assert!(wrote.is_ok(), "{wrote:?}");
        let mut seen = 0u64;
        let end = raw
            .wait_for(&Id::Number(7), t + Duration::from_secs(30), |_| seen += 1)
            .await;
        assert!(
            matches!(end, Ok(RawEvent::Message(Message::Response(_), _))),
            "{end:?}"
        );
        assert!(raw.shed_events() > 0, "the flood was larger than the cap");
        assert_eq!(
            seen + raw.shed_events(),
            100_000,
            "every notification seen or shed"
        );
        let _ = raw.finish(Duration::from_millis(500)).await;
    }
}
