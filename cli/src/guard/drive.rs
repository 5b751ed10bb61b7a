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
//! No queue lives here: the session holds the message being written to each
//! side and offers it (`GuardOutput::ToServer`, `GuardOutput::ToHost`) until
//! the pipe took it; a request for the server is offered only once the
//! audit writer reports its record on disk (`GuardInput::RecordsDurable`,
//! G12), and the session stops asking for the host's input while too many
//! records wait for the disk.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mcp_stdio_core::ChildStream;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::ProcessOutcome;
use mcp_stdio_core::Signal;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::{GuardAction, GuardInput, GuardOutput, GuardSession};
use mcp_stdio_sys::stamp_at as stamp;
use mcp_stdio_tokio::driver::stdio::{Stdin, Stdout};
use mcp_stdio_tokio::driver::{DeadlineTimer, Pipe, Sink, Source};
use mcp_stdio_tokio::leader::Leader;
use mcp_stdio_tokio::runtime::Tokio;

use super::announce::Announced;
use super::audit_log::AuditLog;
use super::log_file::LogFile;
use super::otel::Otel;
use crate::pin::PinWriter;

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

/// SIGTERM, SIGINT or SIGHUP sent to the guard: the host stopping its
/// server (each is passed on, the session decides how).
struct Terminate {
    #[cfg(unix)]
    signals: Vec<(tokio::signal::unix::Signal, Signal)>,
}

impl Terminate {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signals = [
                (SignalKind::interrupt(), Signal::Interrupt),
                (SignalKind::terminate(), Signal::Term),
                (SignalKind::hangup(), Signal::Hangup),
            ]
            .into_iter()
            .filter_map(|(k, s)| Some((signal(k).ok()?, s)))
            .collect();
            Self { signals }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// `Ready` with a signal that came (each registers its waker).
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Signal> {
        #[cfg(unix)]
        for (s, which) in &mut self.signals {
            if s.poll_recv(cx).is_ready() {
                return Poll::Ready(*which);
            }
        }
        #[cfg(not(unix))]
        let _ = cx;
        Poll::Pending
    }
}

/// What a write offered to a pipe came to, as the session takes it: a
/// pending write is `WouldBlock` (and parks that pipe: the second value), a
/// pipe already dropped a broken one.
fn offered(written: Option<Poll<io::Result<usize>>>) -> (io::Result<usize>, bool) {
    let r = match written {
        Some(Poll::Ready(r)) => r,
        Some(Poll::Pending) => Err(io::ErrorKind::WouldBlock.into()),
        None => Err(io::ErrorKind::BrokenPipe.into()),
    };
    let parked = r
        .as_ref()
        .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock);
    (r, parked)
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
    rt: &'a Tokio,
    session: &'a mut GuardSession,
    /// The server that is up (or was last).
    leader: Leader,
    /// The server's command, to start it again (restart on crash).
    spec: &'a CommandSpec,
    server_in: Option<Pipe<Tokio>>,
    server_out: Option<Pipe<Tokio>>,
    server_err: Option<Pipe<Tokio>>,
    host_in: Option<Stdin<Tokio>>,
    host_out: Option<HostOut>,
    /// A write to the server's stdin was pending: say `ServerWritable` next turn.
    server_parked: bool,
    /// A write to the host was pending: say `HostWritable` next turn.
    host_parked: bool,
    /// Records reported durable to the session so far.
    durable: u64,
    host_buf: Vec<u8>,
    err_buf: Vec<u8>,
    audit: Option<AuditLog>,
    audit_wait: Option<AuditWait>,
    /// The pin file's writer (`--pin`): takes `GuardOutput::Pins` without waiting.
    pins: Option<&'a PinWriter>,
    terminate: Terminate,
    /// The status socket and its clients (none with `--no-announce`).
    status: Option<Announced>,
    /// The log file and the exporter: they take `GuardOutput::Log` and
    /// `GuardOutput::Span` without waiting.
    sinks: Sinks<'a>,
    timer: DeadlineTimer<Tokio>,
    /// The session's next deadline, from its last drained output.
    deadline: Option<Instant>,
    ending: Option<Ending>,
}

/// Where the session's copies go, none of them waited for: the log file
/// (`--log-file`) and the exporter (`--otel`).
#[derive(Clone, Copy)]
pub(super) struct Sinks<'a> {
    pub(super) log: Option<&'a LogFile>,
    pub(super) otel: Option<&'a Otel>,
}

impl Sinks<'_> {
    fn lines(self, lines: Vec<u8>) {
        if let Some(log) = self.log {
            log.push(lines);
        }
    }

    fn span(self, session: &GuardSession, span: mcp_stdio_core::CallSpan) {
        if let Some(otel) = self.otel {
            otel.span(span, session.counters());
        }
    }
}

/// Runs the session until it is over, then its end (audit seal, the host's
/// last bytes within the session's bound). Returns the exit status.
pub(super) async fn drive(
    rt: &Tokio,
    session: &mut GuardSession,
    (spec, leader, pipes): (&CommandSpec, Leader, ServerPipes),
    (audit, pins, status): (Option<AuditLog>, Option<&PinWriter>, Option<Announced>),
    sinks: Sinks<'_>,
    preface: Vec<u8>,
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
        rt,
        session,
        leader,
        spec,
        server_in: pipes.stdin,
        server_out: pipes.stdout,
        server_err: pipes.stderr,
        host_in,
        host_out: Some(HostOut::open(rt)),
        server_parked: false,
        host_parked: false,
        durable: 0,
        host_buf: vec![0; HOST_READ],
        err_buf: vec![0; STDERR_READ],
        audit,
        audit_wait: None,
        pins,
        terminate: Terminate::new(),
        status,
        sinks,
        timer: DeadlineTimer::new(rt),
        deadline: None,
        ending: None,
    };
    let at = stamp(Instant::now());
    run.session.handle_input(at, GuardInput::Spawned);
    if !preface.is_empty() {
        // What the host sent before this guard took the session over (a
        // hub's private-server answer gave it back).
        run.session.handle_input(
            at,
            GuardInput::HostRead {
                result: Ok(preface.len()),
                buf: &preface,
            },
        );
    }
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
            // A pending write registered its pipe's waker: offer it again.
            if std::mem::take(&mut self.server_parked) {
                self.session.handle_input(at, GuardInput::ServerWritable);
            }
            if std::mem::take(&mut self.host_parked) {
                self.session.handle_input(at, GuardInput::HostWritable);
            }
            let mut busy = self.pump(cx, at);
            for step in [
                Self::poll_exit,
                Self::poll_server_stdout,
                Self::poll_server_stderr,
                Self::poll_host_stdin,
                Self::poll_audit,
                Self::poll_status,
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
            let leader = &mut self.leader;
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
            let leader = &mut self.leader;
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

    /// Reads the host while the session wants input (it does not while the
    /// server or the audit writer is behind).
    fn poll_host_stdin(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut busy = false;
        for _ in 0..HOST_READS_PER_TURN {
            if !self.session.wants_host_input() {
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

    /// The audit writer's progress, told to the session: records on disk
    /// may free a request for the server, or room to read the host.
    fn poll_audit(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let Some(audit) = self.audit.as_ref() else {
            return false;
        };
        // Wait for the writer while a batch is out: a wake for one batch
        // that leaves another out registers for that one too.
        self.audit_wait = loop {
            if !audit.in_flight() {
                break None;
            }
            let mut wait = self
                .audit_wait
                .take()
                .unwrap_or_else(|| Box::pin(audit.progress()));
            if wait.as_mut().poll(cx).is_pending() {
                break Some(wait);
            }
        };
        let done = audit.records_done();
        if done <= self.durable {
            return false;
        }
        self.durable = done;
        self.session
            .handle_input(at, GuardInput::RecordsDurable(done));
        true
    }

    fn poll_terminate(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        match self.terminate.poll(cx) {
            Poll::Ready(signal) => {
                tracing::debug!(?signal, "signal from the host");
                self.session.handle_input(at, GuardInput::Signal(signal));
                true
            }
            Poll::Pending => false,
        }
    }

    /// The status socket's clients: accepted, read, answered, written as
    /// far as each takes now (a client never slows the session: G1).
    fn poll_status(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let Some(status) = self.status.as_mut() else {
            return false;
        };
        let mut source = super::announce::GuardSource {
            session: self.session,
            otel: self.sinks.otel,
        };
        status.poll(cx, at.instant, &mut source, self.leader.pid())
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>, _at: Stamp) -> bool {
        let clients = self.status.as_ref().and_then(Announced::deadline);
        let deadline = match (self.deadline, clients) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match self.timer.poll(cx, deadline) {
            Poll::Ready(now) => {
                if let Some(status) = self.status.as_mut() {
                    status.handle_timeout(now);
                }
                self.session.handle_input(stamp(now), GuardInput::Timeout);
                true
            }
            Poll::Pending => false,
        }
    }

    /// Drains the session's outputs in its order, writing what the pipes
    /// take now (never waiting for them, G1), then reports what reached the
    /// host, until neither makes progress. `true` if a write did.
    fn pump(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut busy = false;
        while self.ending.is_none() {
            busy |= self.drain(cx, at);
            if self.ending.is_some() || !self.host_flushed(cx, at) {
                break;
            }
            busy = true;
        }
        busy
    }

    /// The session's outputs until its next deadline (or its end); the
    /// bytes it offers are written as far as the pipes take them now.
    /// `true` if bytes moved (or a write failed).
    fn drain(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let mut moved = false;
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
                    return moved;
                }
                GuardOutput::Action(action) => self.act(action, at),
                GuardOutput::Record(record) => {
                    if let Some(a) = self.audit.as_mut() {
                        a.append(&record);
                    }
                }
                GuardOutput::Phase(phase) => {
                    if let Some(a) = self.audit.as_mut() {
                        a.append(&phase);
                    }
                }
                GuardOutput::Seal => {
                    if let Some(a) = self.audit.as_mut() {
                        a.seal();
                    }
                }
                GuardOutput::Pins(update) => {
                    if let Some(w) = self.pins {
                        w.send(update);
                    }
                }
                GuardOutput::ToServer(out) => {
                    let written = self.server_in.as_ref();
                    let (r, parked) = offered(written.map(|p| p.poll_write(cx, out.bytes())));
                    self.server_parked |= parked;
                    moved |= !parked;
                    // A 0-byte write or an error is the session's to judge.
                    self.session.handle_input(at, GuardInput::ServerWritten(r));
                }
                GuardOutput::ToHost(out) => {
                    let written = self.host_out.as_mut();
                    let (r, parked) = offered(written.map(|h| h.poll_write(cx, out.bytes())));
                    self.host_parked |= parked;
                    moved |= !parked;
                    // What the write came to is the session's to judge.
                    self.session.handle_input(at, GuardInput::HostWrote(r));
                }
                GuardOutput::Stderr(bytes) => {
                    crate::stderr_sink::write(&bytes);
                }
                GuardOutput::Span(span) => self.sinks.span(self.session, span),
                GuardOutput::Log(lines) => {
                    if let Some(status) = self.status.as_mut() {
                        moved |= status.follow(&lines);
                    }
                    self.sinks.lines(lines);
                }
                GuardOutput::Timeout(deadline) => {
                    // The turn's records go to the writer in one batch.
                    if let Some(a) = self.audit.as_mut() {
                        a.commit();
                    }
                    self.deadline = deadline;
                    return moved;
                }
            }
        }
    }

    fn act(&mut self, action: GuardAction, at: Stamp) {
        match action {
            // Restart on crash: the old server is reaped and never signalled
            // again; its pipes go with it.
            GuardAction::ReapServer => {
                self.leader.reap();
                self.server_in = None;
                self.server_out = None;
                self.server_err = None;
                self.server_parked = false;
            }
            GuardAction::RespawnServer => {
                let input = match self.respawn() {
                    Ok(()) => GuardInput::Spawned,
                    Err(e) => GuardInput::SpawnFailed(e),
                };
                self.session.handle_input(at, input);
            }
            // Dropping a pipe closes it, mid-message if need be.
            GuardAction::CloseServerStdin => self.server_in = None,
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
            GuardAction::CloseHostOutput => self.host_out = None,
            _ => {}
        }
    }

    /// Starts the server again (the same command, in a group of its own,
    /// tied to the guard like the first).
    fn respawn(&mut self) -> io::Result<()> {
        let mut child = mcp_stdio_sys::spawn_piped(self.spec)?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let leader = Leader::new(self.rt, child);
        let pipes = ServerPipes::new(self.rt, pipes)?;
        // The old leader was reaped at `ReapServer`.
        self.leader = leader;
        self.server_in = pipes.stdin;
        self.server_out = pipes.stdout;
        self.server_err = pipes.stderr;
        tracing::debug!(pid = self.leader.pid(), "server started again");
        Ok(())
    }

    /// Reports what reached the host's descriptor (a writer thread's flush
    /// answered). `true` if anything did, or the flush failed.
    fn host_flushed(&mut self, cx: &mut Context<'_>, at: Stamp) -> bool {
        let Some(out) = self.host_out.as_mut() else {
            return false;
        };
        let Poll::Ready(r) = out.poll_written(cx) else {
            return false;
        };
        let input = match r {
            Ok(n) => GuardInput::HostWritten(n),
            Err(e) => GuardInput::HostWriteFailed(e),
        };
        self.session.handle_input(at, input);
        true
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
        // The records come before the host's last messages in the session's
        // order: all of them are out once it offers one.
        loop {
            match self.session.poll_output() {
                GuardOutput::Record(record) => {
                    if let Some(a) = self.audit.as_mut() {
                        a.append(&record);
                    }
                }
                GuardOutput::Phase(phase) => {
                    if let Some(a) = self.audit.as_mut() {
                        a.append(&phase);
                    }
                }
                GuardOutput::Stderr(bytes) => {
                    crate::stderr_sink::write(&bytes);
                }
                GuardOutput::Span(span) => self.sinks.span(self.session, span),
                GuardOutput::Log(lines) => self.sinks.lines(lines),
                GuardOutput::Pins(update) => {
                    if let Some(w) = self.pins {
                        w.send(update);
                    }
                }
                GuardOutput::ToHost(_) | GuardOutput::Timeout(_) => break,
                // `close` seals what is left.
                GuardOutput::Seal | GuardOutput::Action(_) | GuardOutput::ToServer(_) => {}
            }
        }
        if let Some(mut a) = self.audit.take() {
            a.append(&serde_json::json!({"phase": "session_end", "process": outcome}));
            a.close(AUDIT_CLOSE).await;
        }
        let Some(mut out) = self.host_out.take() else {
            return exit_code;
        };
        let session = &mut *self.session;
        let sinks = self.sinks;
        let flush = std::future::poll_fn(|cx| loop {
            match session.poll_output() {
                GuardOutput::ToHost(message) => {
                    let n = match std::task::ready!(out.poll_write(cx, message.bytes()))? {
                        0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                        n => n,
                    };
                    session.handle_input(at, GuardInput::HostWrote(Ok(n)));
                }
                GuardOutput::Stderr(bytes) => {
                    crate::stderr_sink::write(&bytes);
                }
                GuardOutput::Span(span) => sinks.span(session, span),
                GuardOutput::Log(lines) => sinks.lines(lines),
                GuardOutput::Timeout(_) => {
                    if !out.in_flight() {
                        return Poll::Ready(Ok::<(), io::Error>(()));
                    }
                    let n = std::task::ready!(out.poll_written(cx))?;
                    session.handle_input(at, GuardInput::HostWritten(n));
                }
                GuardOutput::Record(_)
                | GuardOutput::Phase(_)
                | GuardOutput::Seal
                | GuardOutput::Pins(_)
                | GuardOutput::Action(_)
                | GuardOutput::ToServer(_) => {}
            }
        });
        let _ = tokio::time::timeout(flush_for, flush).await;
        exit_code
    }
}
