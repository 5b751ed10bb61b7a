//! `mcp-stdio guard [OPTIONS] -- SERVER_COMMAND [ARGS…]`: a drop-in wrapper
//! for any MCP server.
//!
//! The host launches the guard where it launched the server. The guard
//! spawns the server in its own process group and stands between the two:
//! it reads the server's stdout continuously whatever the host does (G1),
//! enforces the wire limit both ways (G2/G3), moves non-protocol stdout
//! lines to stderr (G13), forwards the server's stderr within a budget and
//! keeps its tail (G10), drops anything for a cancelled id (G6), runs the
//! shutdown sequence (G11), and can write a hash-chained audit log (G12).

mod audit_log;
mod ended;
mod host_io;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use mcp_stdio_core::call::Stamp;
use mcp_stdio_core::frame::ReadRoom;
use mcp_stdio_core::guard::{
    GuardAction, GuardConfig, GuardInput, GuardOutput, GuardReport, GuardSession,
};
use mcp_stdio_core::io_result::ChildStream;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_tokio::driver::Runtime;
use mcp_stdio_tokio::leader::Leader;
use mcp_stdio_tokio::runtime::Tokio;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{GuardSettings, SettingsArgs};
use audit_log::{AuditLog, MAX_PENDING_LINES};
use host_io::{HostInput, HostOutput};

pub(crate) use host_io::restore_stdio;

/// Exit status for the guard's own usage errors (a bad flag, an unreadable
/// config or key file, an audit log that cannot be opened), before any server starts.
pub(crate) const EXIT_USAGE: u8 = 2;

/// Arguments of `guard`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status mirrors the server's: its own exit code, or 128+N when it was \
killed by signal N (as a shell reports it); 1 when no exit of the server was observed. The guard's \
own outcomes: 75 when it closed the session because the host stopped reading; 126 when the server \
command is not executable; 127 when it cannot be started otherwise (not found, ...); 2 for a usage \
error (bad flag, unreadable --config or key file, an --audit log that cannot be opened), before \
any server starts. A server that ends on its own, with a failure status, or only after a signal \
gets one line on stderr saying so, with the end of its stderr.\n\n\
--audit FILE: missing folders on its path are created.\n\n\
Example (a desktop host's JSON config):\n  \"command\": \"mcp-stdio\",\n  \
\"args\": [\"guard\", \"--max-frame\", \"8388608\", \"--\", \"npx\", \"-y\", \"some-mcp-server\"]"
)]
pub(crate) struct GuardArgs {
    #[command(flatten)]
    pub(crate) settings: SettingsArgs,
    /// Write a hash-chained audit record per request to FILE (appends, fsync per batch;
    /// missing folders are created).
    #[arg(long, value_name = "FILE")]
    pub(crate) audit: Option<PathBuf>,
    /// HMAC-SHA256 key for the audit chain (the file's bytes; a trailing newline is ignored).
    #[arg(long, value_name = "FILE", requires = "audit")]
    pub(crate) audit_key_file: Option<PathBuf>,
    /// Write the session's metrics as JSON to FILE at exit.
    #[arg(long, value_name = "FILE")]
    pub(crate) metrics: Option<PathBuf>,
    /// The server command and its arguments (after `--`). No shell is involved.
    #[arg(last = true, required = true, value_name = "SERVER_COMMAND")]
    pub(crate) command: Vec<std::ffi::OsString>,
}

/// What the guard writes to `--metrics` at exit.
#[derive(Debug, Serialize)]
struct MetricsFile {
    #[serde(flatten)]
    session: GuardReport,
    /// Bytes of our own stderr dropped because nobody read it.
    own_stderr_dropped_bytes: u64,
}

/// Runs the guard; returns the process exit status.
pub(crate) async fn run(args: GuardArgs) -> ExitCode {
    let settings = match GuardSettings::resolve(&args.settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio guard: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let Some(spec) = CommandSpec::from_argv(&args.command) else {
        eprintln!("mcp-stdio guard: no server command given (put it after `--`)");
        return ExitCode::from(EXIT_USAGE);
    };
    let session_id = format!("{}-{}", std::process::id(), stamp(Instant::now()).unix_ms);
    let audit = match &args.audit {
        Some(path) => {
            let key = match args
                .audit_key_file
                .as_ref()
                .map(crate::verify::read_key)
                .transpose()
            {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("mcp-stdio guard: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            match AuditLog::open(path, key, &session_id) {
                Ok(a) => Some(a),
                Err(e) => {
                    eprintln!("mcp-stdio guard: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            }
        }
        None => None,
    };
    // Tied to the guard (G11): a SIGKILLed guard leaves no server (Linux).
    let spawned = mcp_stdio_sys::spawn_piped(&spec);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let failure = crate::diagnose::spawn_failure(&spec, &e);
            eprintln!("mcp-stdio guard: {}", failure.message);
            if let Some(mut a) = audit {
                a.append(
                    &serde_json::json!({"phase": "session_end", "spawn_failed": e.to_string()}),
                );
                a.close(AUDIT_CLOSE).await;
            }
            return ExitCode::from(failure.exit);
        }
    };
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    // Observed without reaping, reaped at `Finished`: the server's group id
    // is never signalled once it could be someone else's.
    let watched = Tokio::current().map(|rt| Leader::new(&rt, child));
    let pipes = watched.and_then(|leader| Ok((leader, ServerPipes::new(pipes)?)));
    let (mut leader, pipes) = match pipes {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "mcp-stdio guard: started {} but cannot watch its exit: {e}",
                spec.display()
            );
            return ExitCode::from(crate::diagnose::EXIT_NOT_STARTED);
        }
    };
    let mut config = GuardConfig::default();
    config
        .stderr_pool(Some(settings.stderr_pool.clone()))
        .stderr_forward(settings.stderr_forward_bytes);
    *config.proxy_mut() = settings.proxy.clone();
    config
        .proxy_mut()
        .target(&spec.display().to_string())
        .session_id(&session_id);
    *config.supervisor_mut() = settings.supervisor;
    *config.stderr_capture_mut() = settings.stderr_capture.clone();
    let mut session = GuardSession::new(config);
    let code = drive(&mut session, &mut leader, pipes, audit).await;
    let report = session.report(settings.stderr_excerpt_bytes);
    if let Some(message) = ended::end_message(&report, &spec.display()) {
        // Through the sink: a blocking write could hang an exit on an unread stderr.
        crate::stderr_sink::write(message.as_bytes());
    }
    if let Some(path) = &args.metrics {
        let report = MetricsFile {
            session: report,
            own_stderr_dropped_bytes: crate::stderr_sink::dropped(),
        };
        let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, json) {
            // Through the sink: a blocking eprintln could hang an exit on an unread stderr.
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: writing metrics to {}: {e}",
                path.display()
            ));
        }
    }
    ExitCode::from(code)
}

/// The server's three pipes, taken from its child before the `Leader` owns it.
struct ServerPipes {
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
}

impl ServerPipes {
    /// The std pipes, in tokio's reactor.
    fn new(
        (stdin, stdout, stderr): (
            Option<std::process::ChildStdin>,
            Option<std::process::ChildStdout>,
            Option<std::process::ChildStderr>,
        ),
    ) -> std::io::Result<Self> {
        Ok(Self {
            stdin: stdin
                .map(tokio::process::ChildStdin::from_std)
                .transpose()?,
            stdout: stdout
                .map(tokio::process::ChildStdout::from_std)
                .transpose()?,
            stderr: stderr
                .map(tokio::process::ChildStderr::from_std)
                .transpose()?,
        })
    }
}

enum Wake {
    Host(std::io::Result<usize>),
    ServerOut(std::io::Result<usize>),
    ServerErr(std::io::Result<usize>),
    WroteServer(std::io::Result<usize>),
    WroteHost(std::io::Result<usize>),
    HostProgress(std::io::Result<()>),
    AuditProgress,
    Exited(std::io::Result<mcp_stdio_core::ExitStatus>),
    Timer,
    Terminate,
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
    fn front(&self) -> Option<&[u8]> {
        self.queue.front().map(|(_, b)| &b[self.offset..])
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

/// How long the audit log may take to reach the disk at exit.
const AUDIT_CLOSE: std::time::Duration = std::time::Duration::from_secs(5);

use mcp_stdio_sys::stamp_at as stamp;

/// The I/O loop: every decision is the session's. It waits on every source
/// at once (server stdout and stderr, host stdin, write readiness both ways,
/// child exit, the session's timer, signals) and never on a write finishing
/// (G1). Returns the exit status.
async fn drive(
    session: &mut GuardSession,
    leader: &mut Leader,
    pipes: ServerPipes,
    mut audit: Option<AuditLog>,
) -> u8 {
    let ServerPipes {
        stdin: mut server_in,
        stdout: mut server_out,
        stderr: mut server_err,
    } = pipes;
    let mut host_in = Some(HostInput::open());
    let mut host_out = Some(HostOutput::open());
    let mut to_server = Outbox::default();
    let mut to_host = Outbox::default();
    let mut host_buf = vec![0u8; 64 * 1024];
    let mut err_buf = vec![0u8; 16 * 1024];
    let mut terminate = terminate_signal();
    session.handle_input(stamp(Instant::now()), GuardInput::Spawned);
    loop {
        let next;
        // The session's outputs, in its order, until its next deadline.
        loop {
            match session.poll_output() {
                GuardOutput::Action(GuardAction::Finished {
                    outcome,
                    exit_code,
                    flush_for,
                }) => {
                    // Supervision over: reaped, and never signalled again.
                    leader.reap();
                    finish(
                        session,
                        audit.take(),
                        host_out.take(),
                        to_host,
                        &outcome,
                        flush_for,
                    )
                    .await;
                    return exit_code;
                }
                GuardOutput::Action(action) => match action {
                    GuardAction::CloseServerStdin => {
                        server_in = None;
                        to_server.clear();
                    }
                    GuardAction::CloseServerReader(ChildStream::Stdout) => server_out = None,
                    GuardAction::CloseServerReader(ChildStream::Stderr) => server_err = None,
                    GuardAction::CloseHostInput => host_in = None,
                    GuardAction::SignalServerGroup(sig) => {
                        let _ = leader.signal(sig);
                    }
                    GuardAction::AbandonServerReaders => {
                        server_out = None;
                        server_err = None;
                    }
                    GuardAction::CloseHostOutput => {
                        host_out = None;
                        to_host.clear();
                    }
                    _ => {}
                },
                GuardOutput::Record(record) => {
                    if let Some(a) = audit.as_mut() {
                        a.append(&record);
                    }
                }
                GuardOutput::ToServer(bytes) => {
                    // A request waits for the batch holding its record (the
                    // records come first) to be on disk (G12).
                    let gate = audit.as_mut().map_or(0, AuditLog::commit);
                    to_server.push(bytes, gate);
                }
                GuardOutput::ToHost(bytes) => to_host.push(bytes, 0),
                GuardOutput::Stderr(bytes) => {
                    crate::stderr_sink::write(&bytes);
                }
                GuardOutput::Timeout(deadline) => {
                    // The turn's records go to the writer in one batch.
                    if let Some(a) = audit.as_mut() {
                        a.commit();
                    }
                    next = deadline;
                    break;
                }
            }
        }
        let deadline = next.map(tokio::time::Instant::from_std);
        let audit_done = audit.as_ref().map_or(u64::MAX, AuditLog::done);
        let audit_behind = audit
            .as_ref()
            .is_some_and(|a| a.pending_lines() >= MAX_PENDING_LINES);
        let read_host = host_in.is_some() && session.wants_host_input() && !audit_behind;
        let server_front = to_server.front_after(audit_done);
        let audit_progress = audit.as_ref().map(AuditLog::progress);
        let host_front = if host_out.is_some() {
            to_host.front()
        } else {
            None
        };
        // An owned future, so it can wait beside a write on the same output.
        let host_progress = host_out.as_ref().map(HostOutput::progress);
        let wake = tokio::select! {
            // Straight into the proxy's framer: a large response is read once
            // and goes to the host as it landed.
            r = read_room(&mut server_out, session.server_stdout_room()) => Wake::ServerOut(r),
            r = read_opt(&mut server_err, &mut err_buf) => Wake::ServerErr(r),
            r = read_host_opt(&mut host_in, &mut host_buf), if read_host => Wake::Host(r),
            r = write_opt(&mut server_in, server_front), if server_front.is_some() => Wake::WroteServer(r),
            () = opt_future(audit_progress) => Wake::AuditProgress,
            r = write_host_opt(&mut host_out, host_front), if host_front.is_some() => Wake::WroteHost(r),
            r = opt_future(host_progress) => Wake::HostProgress(r),
            // Seen without reaping: the zombie keeps the group id ours.
            s = leader.exited(), if !session.exit_seen() => Wake::Exited(s),
            () = sleep_opt(deadline) => Wake::Timer,
            () = terminate.recv() => Wake::Terminate,
        };
        let at = stamp(Instant::now());
        // What a read or a write came to is the session's to decide; at the
        // end of a server stream it takes a non-reaping look at the exit.
        let mut look = || leader.try_exited();
        let input = match wake {
            Wake::Host(result) => GuardInput::HostRead {
                result,
                buf: &host_buf,
            },
            Wake::ServerOut(result) => {
                let more = matches!(result, Ok(n) if n > 0);
                let read = GuardInput::ServerRead {
                    stream: ChildStream::Stdout,
                    result,
                    buf: &[],
                    look: &mut look,
                };
                session.handle_input(at, read);
                if more {
                    drain_server_stdout(&mut server_out, session, at, &mut look);
                }
                progress(session, host_out.as_mut(), at);
                continue;
            }
            Wake::ServerErr(result) => GuardInput::ServerRead {
                stream: ChildStream::Stderr,
                result,
                buf: &err_buf,
                look: &mut look,
            },
            Wake::WroteServer(r) => {
                if let Ok(n) = r {
                    to_server.advance(n);
                }
                GuardInput::ServerWritten(r)
            }
            Wake::WroteHost(Ok(n)) => {
                to_host.advance(n);
                GuardInput::HostTaken(n)
            }
            Wake::WroteHost(Err(e)) | Wake::HostProgress(Err(e)) => GuardInput::HostWriteFailed(e),
            Wake::HostProgress(Ok(())) | Wake::AuditProgress => GuardInput::Timeout,
            Wake::Exited(r) => GuardInput::Exited(r),
            Wake::Timer => GuardInput::Timeout,
            Wake::Terminate => GuardInput::Terminate,
        };
        session.handle_input(at, input);
        progress(session, host_out.as_mut(), at);
    }
}

/// Write progress to the host, whichever wake-up brought it.
fn progress(session: &mut GuardSession, host_out: Option<&mut HostOutput>, at: Stamp) {
    if let Some(out) = host_out {
        let n = out.take_written();
        if n > 0 {
            session.handle_input(at, GuardInput::HostWritten(n));
        }
    }
}

/// The session is over: the audit log's last records and its end, our
/// stderr's last bytes, and what the host is still owed, within the
/// session's bound (the server is gone, so there is nothing left to read).
async fn finish(
    session: &mut GuardSession,
    audit: Option<AuditLog>,
    mut host_out: Option<HostOutput>,
    mut to_host: Outbox,
    outcome: &mcp_stdio_core::ProcessOutcome,
    flush_for: std::time::Duration,
) {
    let mut audit = audit;
    let at = stamp(Instant::now());
    loop {
        match session.poll_output() {
            GuardOutput::Record(record) => {
                if let Some(a) = audit.as_mut() {
                    a.append(&record);
                }
            }
            GuardOutput::Stderr(bytes) => {
                crate::stderr_sink::write(&bytes);
            }
            GuardOutput::ToHost(bytes) => {
                if host_out.is_some() {
                    to_host.push(bytes, 0);
                }
            }
            GuardOutput::Timeout(_) => break,
            GuardOutput::Action(_) | GuardOutput::ToServer(_) => {}
        }
    }
    if let Some(mut a) = audit {
        a.append(&serde_json::json!({"phase": "session_end", "process": outcome}));
        a.close(AUDIT_CLOSE).await;
    }
    if let Some(out) = host_out.as_mut() {
        let flush = async {
            while let Some(front) = to_host.front() {
                let n = out.write(front).await?;
                to_host.advance(n);
            }
            while out.in_flight() {
                out.progress().await?;
            }
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(flush_for, flush).await;
        let n = out.take_written();
        if n > 0 {
            session.handle_input(at, GuardInput::HostWritten(n));
        }
    }
}

/// SIGTERM, SIGINT or SIGHUP sent to the guard.
struct Terminate {
    #[cfg(unix)]
    signals: Vec<tokio::signal::unix::Signal>,
}

fn terminate_signal() -> Terminate {
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
        Terminate { signals }
    }
    #[cfg(not(unix))]
    Terminate {}
}

impl Terminate {
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            if self.signals.is_empty() {
                return std::future::pending().await;
            }
            let futs = self.signals.iter_mut().map(|s| Box::pin(s.recv()));
            let _ = futures_select_any(futs).await;
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await
    }
}

/// Waits for the first of several futures (a tiny `select_all`).
async fn futures_select_any<F: std::future::Future + Unpin>(futs: impl Iterator<Item = F>) {
    let mut futs: Vec<F> = futs.collect();
    std::future::poll_fn(|cx| {
        for f in futs.iter_mut() {
            if std::pin::Pin::new(f).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await;
}

/// One read of the server's stdout into the proxy's room, appended in place.
async fn read_room(
    reader: &mut Option<tokio::process::ChildStdout>,
    room: ReadRoom<'_>,
) -> std::io::Result<usize> {
    match reader {
        Some(r) => {
            let limit = room.len() as u64;
            r.take(limit).read_buf(room.vec()).await
        }
        None => std::future::pending().await,
    }
}

/// Reads of the server's stdout per wake when bytes keep coming: a 4 MiB
/// burst, then the other branches get their turn.
const SERVER_READS_PER_WAKE: usize = 64;

/// Reads on while the server's stdout has bytes ready (each read polled
/// once), without a turn through the `select` per 64 KiB.
fn drain_server_stdout(
    server_out: &mut Option<tokio::process::ChildStdout>,
    session: &mut GuardSession,
    at: Stamp,
    look: mcp_stdio_core::driver::LookForExit<'_>,
) {
    let waker = mcp_stdio_sys::poll_once::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    for _ in 1..SERVER_READS_PER_WAKE {
        let Some(r) = server_out.as_mut() else {
            return;
        };
        let polled = {
            let room = session.server_stdout_room();
            let mut limited = r.take(room.len() as u64);
            let read = limited.read_buf(room.vec());
            std::future::Future::poll(std::pin::pin!(read), &mut cx)
        };
        match polled {
            std::task::Poll::Ready(result) => {
                // Only bytes keep it reading: an end is the session's to
                // take (a `CloseServerReader` follows).
                let more = matches!(result, Ok(n) if n > 0);
                let read = GuardInput::ServerRead {
                    stream: ChildStream::Stdout,
                    result,
                    buf: &[],
                    look: &mut *look,
                };
                session.handle_input(at, read);
                if !more {
                    return;
                }
            }
            // The next `select` waits for it with the task's own waker.
            std::task::Poll::Pending => return,
        }
    }
}

async fn read_opt<R: tokio::io::AsyncRead + Unpin>(
    r: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn write_opt<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut Option<W>,
    bytes: Option<&[u8]>,
) -> std::io::Result<usize> {
    match (w, bytes) {
        (Some(w), Some(b)) => {
            let n = w.write(b).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            Ok(n)
        }
        _ => std::future::pending().await,
    }
}

async fn read_host_opt(r: &mut Option<HostInput>, buf: &mut [u8]) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn write_host_opt(
    w: &mut Option<HostOutput>,
    bytes: Option<&[u8]>,
) -> std::io::Result<usize> {
    match (w, bytes) {
        (Some(w), Some(b)) => w.write(b).await,
        _ => std::future::pending().await,
    }
}

async fn opt_future<F: std::future::Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
