//! The guard's loop, on the async driver's pieces: the server's pipes are
//! the driver's `Pipe`s, its exit is the driver's `Leader`, the host is
//! the driver's `Stdin` and `Stdout` (non-blocking pipes and sockets, a
//! thread for a terminal or a file), and the one timer is the driver's
//! `DeadlineTimer`. So a fix in the driver's I/O reaches the guard too.
//!
//! The loop follows the driver's run-loop rule (see `mcp_stdio_async`):
//! each turn reads the clock once, polls the inputs in a fixed order — the
//! server's exit, its stdout, its stderr, the host's stdin, the audit
//! writer, signals, the timer — and after each input drains the session's
//! outputs and writes what the pipes take now. Nothing waits for a write, a
//! flush or the disk while it could read (G1).
//!
//! Two queues stay here, each bounded by the proxy (which counts bytes until
//! they are written): the messages for the server, each behind the audit
//! batch that must be on disk first (G12), and the host's next message (the
//! session gives one at a time).

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mcp_stdio_core::ChildStream;
use mcp_stdio_core::ProcessOutcome;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::{GuardAction, GuardInput, GuardOutput, GuardSession};
use mcp_stdio_sys::stamp_at as stamp;
use mcp_stdio_tokio::driver::stdio::{Stdin, Stdout};
use mcp_stdio_tokio::driver::{DeadlineTimer, Pipe, Sink, Source};
use mcp_stdio_tokio::leader::Leader;
use mcp_stdio_tokio::runtime::Tokio;

use super::audit_log::{AuditLog, MAX_PENDING_LINES};

/// How long the audit log may take to reach the disk at exit.
pub(super) const AUDIT_CLOSE: Duration = Duration::from_secs(5);

/// Turns per poll before the loop yields to the runtime (it is woken again
/// at once): a server that never stops writing cannot starve the signals.
const TURNS_PER_POLL: usize = 16;

/// Reads of the server's stdout per turn while bytes keep coming (64 KiB
/// each at most: a 4 MiB burst), then the other inputs get their turn.
const SERVER_READS_PER_TURN: usize = 64;

/// Reads of the server's stderr per turn (16 KiB each).
const STDERR_READS_PER_TURN: usize = 16;

/// Reads of the host's stdin per turn (64 KiB each).
const HOST_READS_PER_TURN: usize = 16;

/// Bytes one read of the server's stderr takes.
const STDERR_READ: usize = 16 * 1024;

/// Bytes one read of the host's stdin takes.
const HOST_READ: usize = 64 * 1024;

/// The server's three pipes, in the runtime's reactor.
pub(super) struct ServerPipes {
    pub(super) stdin: Option<Pipe<Tokio>>,
    pub(super) stdout: Option<Pipe<Tokio>>,
    pub(super) stderr: Option<Pipe<Tokio>>,
}

impl ServerPipes {
    /// The std pipes of a spawned child, non-blocking in `rt`'s reactor.
    pub(super) fn new(
        rt: &Tokio,
        (stdin, stdout, stderr): (
            Option<std::process::ChildStdin>,
            Option<std::process::ChildStdout>,
            Option<std::process::ChildStderr>,
        ),
    ) -> io::Result<Self> {
        Ok(Self {
            stdin: stdin.map(|p| Pipe::new(rt, p)).transpose()?,
            stdout: stdout.map(|p| Pipe::new(rt, p)).transpose()?,
            stderr: stderr.map(|p| Pipe::new(rt, p)).transpose()?,
        })
    }
}

/// Messages taken from the session, written one after another as the pipe
/// accepts them. Bounded by the proxy, which counts them until written.
/// Each message may carry a gate: the audit batch that must be on disk first.
#[derive(Default)]
struct Outbox {
    queue: VecDeque<(u64, Vec<u8>)>,
    offset: usize,
}

impl Outbox {
    fn push(&mut self, bytes: Vec<u8>, gate: u64) {
        self.queue.push_back((gate, bytes));
    }
    /// The front, if its gate is passed (`done` is the last batch on disk).
    fn front_after(&self, done: u64) -> Option<&[u8]> {
        match self.queue.front() {
            Some((gate, b)) if *gate <= done => Some(&b[self.offset..]),
            _ => None,
        }
    }
    fn advance(&mut self, n: usize) {
        self.offset += n;
        if self
            .queue
            .front()
            .is_some_and(|(_, b)| self.offset >= b.len())
        {
            self.queue.pop_front();
            self.offset = 0;
        }
    }
    fn clear(&mut self) {
        self.queue.clear();
        self.offset = 0;
    }
}

/// The host's side of our stdout, and what reached it. A pipe or a socket
/// takes bytes at once (written when taken); the writer thread for a
/// terminal or a file takes them into its queue, and they count as written
/// when a flush after them answers.
enum HostOut {
    Open {
        out: Stdout<Tokio>,
        /// Taken since the last flush began.
        unflushed: usize,
        /// Covered by the flush in flight (0: none).
        flushing: usize,
    },
    /// Stdout could not be opened: the first write fails with this.
    Failed(Option<io::Error>),
}

impl HostOut {
    fn open(rt: &Tokio) -> Self {
        match Stdout::new(rt) {
            Ok(out) => {
                tracing::debug!(stdout = ?out, "host output");
                Self::Open {
                    out,
                    unflushed: 0,
                    flushing: 0,
                }
            }
            Err(e) => Self::Failed(Some(e)),
        }
    }

    /// One write of what the output takes of `bytes` now.
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            Self::Open { out, unflushed, .. } => {
                let r = std::task::ready!(out.poll_write(cx, bytes));
                if let Ok(n) = r {
                    *unflushed += n;
                }
                Poll::Ready(r)
            }
            Self::Failed(e) => Poll::Ready(Err(e
                .take()
                .unwrap_or_else(|| io::ErrorKind::BrokenPipe.into()))),
        }
    }

    /// Bytes that reached the descriptor since the last answer: flushes what
    /// was taken, `Pending` while a flush is under way or nothing is owed.
    fn poll_written(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Self::Open {
            out,
            unflushed,
            flushing,
        } = self
        else {
            return Poll::Pending;
        };
        if *flushing == 0 {
            *flushing = std::mem::take(unflushed);
        }
        if *flushing == 0 {
            return Poll::Pending;
        }
        std::task::ready!(out.poll_flush(cx))?;
        Poll::Ready(Ok(std::mem::take(flushing)))
    }

    /// Bytes taken and not yet known to have reached the descriptor.
    fn in_flight(&self) -> bool {
        matches!(self, Self::Open { unflushed, flushing, .. } if unflushed + flushing > 0)
    }
}

/// SIGTERM, SIGINT or SIGHUP sent to the guard.
struct Terminate {
    #[cfg(unix)]
    signals: Vec<tokio::signal::unix::Signal>,
}

impl Terminate {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signals = [
                SignalKind::terminate(),
                SignalKind::interrupt(),
                SignalKind::hangup(),
            ]
            .into_iter()
            .filter_map(|k| signal(k).ok())
            .collect();
            Self { signals }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// `Ready` once one of the signals came (each registers its waker).
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        #[cfg(unix)]
        for s in &mut self.signals {
            if s.poll_recv(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        #[cfg(not(unix))]
        let _ = cx;
        Poll::Pending
    }
}

/// Waiting for the audit writer to put a batch on disk.
type AuditWait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What `Finished` said, for the end of the session.
struct Ending {
    outcome: ProcessOutcome,
    exit_code: u8,
    flush_for: Duration,
}

/// The loop's state: the session, the pipes, the queues, the timer.
struct GuardLoop<'a> {
    session: &'a mut GuardSession,
    leader: &'a mut Leader,
    server_in: Option<Pipe<Tokio>>,
    server_out: Option<Pipe<Tokio>>,
    server_err: Option<Pipe<Tokio>>,
    host_in: Option<Stdin<Tokio>>,
    host_out: Option<HostOut>,
    to_server: Outbox,
    to_host: Outbox,
    host_buf: Vec<u8>,
    err_buf: Vec<u8>,
    audit: Option<AuditLog>,
    audit_wait: Option<AuditWait>,
    terminate: Terminate,
    timer: DeadlineTimer<Tokio>,
    /// The session's next deadline, from its last drained output.
    deadline: Option<Instant>,
    ending: Option<Ending>,
}

/// Runs the session until it is over, then its end (audit seal, the host's
/// last bytes within the session's bound). Returns the exit status.
pub(super) async fn drive(
    rt: &Tokio,
    session: &mut GuardSession,
    leader: &mut Leader,
    pipes: ServerPipes,
    audit: Option<AuditLog>,
) -> u8 {
    let mut first_read = None;
    let host_in = match Stdin::new(rt) {
        Ok(input) => {
            tracing::debug!(stdin = ?input, "host input");
            Some(input)
        }
        // The session hears it as a failed read: the host's input ended.
        Err(e) => {
            first_read = Some(Err(e));
            None
        }
    };
    let mut run = GuardLoop {
        session,
        leader,
        server_in: pipes.stdin,
        server_out: pipes.stdout,
        server_err: pipes.stderr,
        host_in,
        host_out: Some(HostOut::open(rt)),
        to_server: Outbox::default(),
        to_host: Outbox::default(),
        host_buf: vec![0; HOST_READ],
        err_buf: vec![0; STDERR_READ],
        audit,
        audit_wait: None,
        terminate: Terminate::new(),
        timer: DeadlineTimer::new(rt),
        deadline: None,
        ending: None,
    };
    let at = stamp(Instant::now());
    run.session.handle_input(at, GuardInput::Spawned);
    if let Some(result) = first_read {
        let buf = &run.host_buf;
        run.session
            .handle_input(at, GuardInput::HostRead { result, buf });
    }
    std::future::poll_fn(|cx| run.poll_run(cx)).await;
    run.finish().await
}

impl GuardLoop<'_> {
    /// Turns until nothing is ready (every input registered for a wake) or
    /// the session is over.
    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..TURNS_PER_POLL {
            // The one clock read of this turn.
            let at = stamp(Instant::now());
            let mut busy = self.pump(cx, at);
            for step in [
                Self::poll_exit,
                Self::poll_server_stdout,
                Self::poll_server_stderr,
                Self::poll_host_stdin,
                Self::poll_audit,
                Self::poll_terminate,
                Self::poll_timer,
            ] {
                busy |= step(self, cx, at);
                busy |= self.pump(cx, at);
                if self.ending.is_some() {
                    return Poll::Ready(());
                }
            }
            if !busy {
                return Poll::Pending;
            }
        }
        // Busy for a whole poll: let the runtime run the signal driver, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_exit(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        if self.session.exit_seen() {
            return false;
        }
        match self.leader.poll_exited(cx) {
            // Seen without reaping: the zombie keeps the group id ours until `Finished`.
            Poll::Ready(r) => {
                self.session.handle_input(at, GuardInput::Exited(r));
                true
            }
            Poll::Pending => false,
        }
    }

    /// Reads the server's stdout straight into the proxy's framer while
    /// bytes are ready: a large response is read once and goes to the host
    /// as it landed.
    fn poll_server_stdout(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut busy = false;
        for _ in 0..SERVER_READS_PER_TURN {
            let Some(pipe) = self.server_out.as_ref() else {
                break;
            };
            let room = self.session.server_stdout_room().zeroed();
            let Poll::Ready(result) = pipe.poll_read(cx, room) else {
                break;
            };
            busy = true;
            // What a read came to is the session's to decide; at the end of
            // a server stream it takes a non-reaping look at the exit.
            let leader = &mut *self.leader;
            let look = &mut || leader.try_exited();
            let read = GuardInput::ServerRead {
                stream: ChildStream::Stdout,
                result,
                buf: &[],
                look,
            };
            self.session.handle_input(at, read);
            // The host gets what was framed before the next read; a
            // `CloseServerReader` at the end drops the pipe.
            self.pump(cx, at);
        }
        busy
    }

    fn poll_server_stderr(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut busy = false;
        for _ in 0..STDERR_READS_PER_TURN {
            let Some(pipe) = self.server_err.as_ref() else {
                break;
            };
            let Poll::Ready(result) = pipe.poll_read(cx, &mut self.err_buf) else {
                break;
            };
            busy = true;
            let leader = &mut *self.leader;
            let look = &mut || leader.try_exited();
            let read = GuardInput::ServerRead {
                stream: ChildStream::Stderr,
                result,
                buf: &self.err_buf,
                look,
            };
            self.session.handle_input(at, read);
            self.pump(cx, at);
        }
        busy
    }

    /// Reads the host while the session wants input and the audit writer
    /// keeps up (past [`MAX_PENDING_LINES`] the host waits for the disk).
    fn poll_host_stdin(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut busy = false;
        for _ in 0..HOST_READS_PER_TURN {
            let audit_behind = self
                .audit
                .as_ref()
                .is_some_and(|a| a.pending_lines() >= MAX_PENDING_LINES);
            if !self.session.wants_host_input() || audit_behind {
                break;
            }
            let Some(input) = self.host_in.as_mut() else {
                break;
            };
            let Poll::Ready(result) = input.poll_read(cx, &mut self.host_buf) else {
                break;
            };
            busy = true;
            let buf = &self.host_buf;
            self.session
                .handle_input(at, GuardInput::HostRead { result, buf });
            self.pump(cx, at);
        }
        busy
    }

    /// The audit writer's progress: a batch on disk may free a request for
    /// the server, or room to read the host.
    fn poll_audit(&mut self, cx: &mut Context<'_>, _at: Stamp) -> bool {
        let Some(audit) = self.audit.as_ref() else {
            return false;
        };
        if !audit.in_flight() {
            self.audit_wait = None;
            return false;
        }
        let wait = self
            .audit_wait
            .get_or_insert_with(|| Box::pin(audit.progress()));
        match wait.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.audit_wait = None;
                true
            }
            Poll::Pending => false,
        }
    }

    fn poll_terminate(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        match self.terminate.poll(cx) {
            Poll::Ready(()) => {
                self.session.handle_input(at, GuardInput::Terminate);
                true
            }
            Poll::Pending => false,
        }
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>, _at: Stamp) -> bool {
        match self.timer.poll(cx, self.deadline) {
            Poll::Ready(now) => {
                self.session.handle_input(stamp(now), GuardInput::Timeout);
                true
            }
            Poll::Pending => false,
        }
    }

    /// Drains the session's outputs in its order, then writes what the
    /// pipes take now (never waiting for them, G1), until neither makes
    /// progress. `true` if a write did.
    fn pump(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut busy = false;
        while self.ending.is_none() {
            self.drain();
            if self.ending.is_some() {
                break;
            }
            let wrote = self.write_server(cx, at) | self.write_host(cx, at);
            if !wrote {
                break;
            }
            busy = true;
        }
        busy
    }

    /// The session's outputs until its next deadline (or its end).
    fn drain(&mut self) {
        loop {
            match self.session.poll_output() {
                GuardOutput::Action(GuardAction::Finished {
                    outcome,
                    exit_code,
                    flush_for,
                }) => {
                    // Supervision over: reaped, and never signalled again.
                    self.leader.reap();
                    self.ending = Some(Ending {
                        outcome,
                        exit_code,
                        flush_for,
                    });
                    return;
                }
                GuardOutput::Action(action) => self.act(action),
                GuardOutput::Record(record) => {
                    if let Some(a) = self.audit.as_mut() {
                        a.append(&record);
                    }
                }
                GuardOutput::ToServer(bytes) => {
                    // A request waits for the batch holding its record (the
                    // records come first) to be on disk (G12).
                    let gate = self.audit.as_mut().map_or(0, AuditLog::commit);
                    self.to_server.push(bytes, gate);
                }
                GuardOutput::ToHost(bytes) => self.to_host.push(bytes, 0),
                GuardOutput::Stderr(bytes) => {
                    crate::stderr_sink::write(&bytes);
                }
                GuardOutput::Timeout(deadline) => {
                    // The turn's records go to the writer in one batch.
                    if let Some(a) = self.audit.as_mut() {
                        a.commit();
                    }
                    self.deadline = deadline;
                    return;
                }
            }
        }
    }

    fn act(&mut self, action: GuardAction) {
        match action {
            // Dropping a pipe closes it, mid-message if need be.
            GuardAction::CloseServerStdin => {
                self.server_in = None;
                self.to_server.clear();
            }
            GuardAction::CloseServerReader(ChildStream::Stdout) => self.server_out = None,
            GuardAction::CloseServerReader(ChildStream::Stderr) => self.server_err = None,
            GuardAction::CloseHostInput => self.host_in = None,
            GuardAction::SignalServerGroup(sig) => {
                let _ = self.leader.signal(sig);
            }
            GuardAction::AbandonServerReaders => {
                self.server_out = None;
                self.server_err = None;
            }
            GuardAction::CloseHostOutput => {
                self.host_out = None;
                self.to_host.clear();
            }
            _ => {}
        }
    }

    /// Writes the messages for the server whose audit gate has passed, as
    /// far as the pipe takes them now. `true` if bytes moved or failed.
    fn write_server(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let done = self.audit.as_ref().map_or(u64::MAX, AuditLog::done);
        let (Some(pipe), Some(front)) = (self.server_in.as_ref(), self.to_server.front_after(done))
        else {
            return false;
        };
        let Poll::Ready(r) = pipe.poll_write(cx, front) else {
            return false;
        };
        if let Ok(n) = r {
            self.to_server.advance(n);
        }
        // A 0-byte write or an error is the session's to judge.
        self.session.handle_input(at, GuardInput::ServerWritten(r));
        true
    }

    /// Writes the host's next message as far as the output takes it now,
    /// and reports what reached the descriptor. `true` if anything moved.
    fn write_host(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let Some(out) = self.host_out.as_mut() else {
            return false;
        };
        let mut moved = false;
        if let Some(front) = self.to_host.front_after(0) {
            if let Poll::Ready(r) = out.poll_write(cx, front) {
                moved = true;
                match r {
                    Ok(n) => {
                        self.to_host.advance(n);
                        self.session.handle_input(at, GuardInput::HostTaken(n));
                    }
                    Err(e) => {
                        self.session
                            .handle_input(at, GuardInput::HostWriteFailed(e));
                        return true;
                    }
                }
            }
        }
        if let Poll::Ready(r) = out.poll_written(cx) {
            moved = true;
            let input = match r {
                Ok(n) => GuardInput::HostWritten(n),
                Err(e) => GuardInput::HostWriteFailed(e),
            };
            self.session.handle_input(at, input);
        }
        moved
    }

    /// The session is over: the audit log's last records and its end, our
    /// stderr's last bytes, and what the host is still owed, within the
    /// session's bound (the server is gone, so there is nothing left to read).
    async fn finish(mut self) -> u8 {
        let Ending {
            outcome,
            exit_code,
            flush_for,
        } = self.ending.take().expect("the loop ends at Finished");
        let at = stamp(Instant::now());
        loop {
            match self.session.poll_output() {
                GuardOutput::Record(record) => {
                    if let Some(a) = self.audit.as_mut() {
                        a.append(&record);
                    }
                }
                GuardOutput::Stderr(bytes) => {
                    crate::stderr_sink::write(&bytes);
                }
                GuardOutput::ToHost(bytes) => {
                    if self.host_out.is_some() {
                        self.to_host.push(bytes, 0);
                    }
                }
                GuardOutput::Timeout(_) => break,
                GuardOutput::Action(_) | GuardOutput::ToServer(_) => {}
            }
        }
        if let Some(mut a) = self.audit.take() {
            a.append(&serde_json::json!({"phase": "session_end", "process": outcome}));
            a.close(AUDIT_CLOSE).await;
        }
        let Some(mut out) = self.host_out.take() else {
            return exit_code;
        };
        let (session, to_host) = (&mut *self.session, &mut self.to_host);
        let flush = std::future::poll_fn(|cx| loop {
            if let Some(front) = to_host.front_after(0) {
                let n = std::task::ready!(out.poll_write(cx, front))?;
                to_host.advance(n);
                session.handle_input(at, GuardInput::HostTaken(n));
                continue;
            }
            if !out.in_flight() {
                return Poll::Ready(Ok::<(), io::Error>(()));
            }
            let n = std::task::ready!(out.poll_written(cx))?;
            session.handle_input(at, GuardInput::HostWritten(n));
        });
        let _ = tokio::time::timeout(flush_for, flush).await;
        exit_code
    }
}
