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

mod host_io;

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcp_stdio_core::audit::{AuditChain, AuditKey};
use mcp_stdio_core::capture::OutputCapture;
use mcp_stdio_core::process::{
    ChildPipes, ExitStatus, ProcessAction, ProcessOutcome, ProcessSupervisor,
};
use mcp_stdio_core::CommandSpec;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{GuardSettings, SettingsArgs};
use host_io::{HostInput, HostOutput};
use mcp_stdio_core::call::Stamp;
use mcp_stdio_core::proxy::{Proxy, ProxyEvent, ProxyMetrics};

/// Exit status when the guard itself closed the session (host stopped
/// reading, or the guard could not run the server).
pub(crate) const EXIT_GUARD_CLOSED: u8 = 75;
/// Exit status when the server could not be spawned.
pub(crate) const EXIT_SPAWN_FAILED: u8 = 127;

/// Arguments of `guard`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: the server's own (128+N when it was killed by signal N); \
75 when the guard closed the session because the host stopped reading; 127 when the server \
could not be started.\n\nExample (a desktop host's JSON config):\n  \"command\": \"mcp-stdio\",\n  \
\"args\": [\"guard\", \"--max-frame\", \"4194304\", \"--\", \"npx\", \"-y\", \"some-mcp-server\"]"
)]
pub(crate) struct GuardArgs {
    #[command(flatten)]
    pub(crate) settings: SettingsArgs,
    /// Write a hash-chained audit record per request to FILE (appends, fsync per batch).
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
struct GuardReport<'a> {
    proxy: &'a ProxyMetrics,
    process: &'a ProcessOutcome,
    stderr: mcp_stdio_core::capture::CaptureSummary,
    stderr_tail: String,
    stderr_excerpt: String,
    stderr_forwarded_bytes: u64,
    /// Bytes of our own stderr dropped because nobody read it.
    own_stderr_dropped_bytes: u64,
    guard_closed_session: Option<&'a str>,
}

/// The audit log: a chain appended to a file, fsynced after each batch.
struct AuditLog {
    chain: AuditChain,
    file: File,
    path: PathBuf,
}

impl AuditLog {
    fn open(path: &Path, key: Option<AuditKey>) -> Result<Self, String> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let last = last_line(&mut file).map_err(|e| format!("{}: {e}", path.display()))?;
        let chain = AuditChain::resume(&last, key.as_ref())
            .map_err(|e| format!("{}: cannot continue this log: {e}", path.display()))?;
        Ok(Self {
            chain,
            file,
            path: path.to_owned(),
        })
    }

    fn append(&mut self, record: &impl Serialize) {
        match self.chain.append(record) {
            Ok(line) => {
                if let Err(e) = self.file.write_all(&line) {
                    tracing::error!(path = %self.path.display(), error = %e, "audit write failed");
                }
            }
            Err(e) => tracing::error!(error = %e, "audit record not appended"),
        }
    }

    fn sync(&mut self) {
        if let Err(e) = self.file.sync_data() {
            tracing::error!(path = %self.path.display(), error = %e, "audit fsync failed");
        }
    }
}

/// The last line of a file (with its newline), read from the end.
fn last_line(file: &mut File) -> std::io::Result<Vec<u8>> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(Vec::new());
    }
    // Records are small; read a generous tail and take its last line.
    let start = len.saturating_sub(2 * 1024 * 1024);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    let from = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    Ok(tail[from..].to_vec())
}

/// Runs the guard; returns the process exit status.
pub(crate) async fn run(args: GuardArgs) -> ExitCode {
    let settings = match GuardSettings::resolve(&args.settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio guard: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(spec) = CommandSpec::from_argv(&args.command) else {
        eprintln!("mcp-stdio guard: no server command given (put it after `--`)");
        return ExitCode::from(2);
    };
    let mut audit = match &args.audit {
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
                    return ExitCode::from(2);
                }
            };
            match AuditLog::open(path, key) {
                Ok(a) => Some(a),
                Err(e) => {
                    eprintln!("mcp-stdio guard: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None => None,
    };
    let mut cmd = tokio::process::Command::from(mcp_stdio_sys::command(&spec));
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-stdio guard: cannot start {}: {e}", spec.display());
            return ExitCode::from(EXIT_SPAWN_FAILED);
        }
    };
    let pid = child.id().unwrap_or(0);
    let session = Session {
        proxy: Proxy::new({
            let mut proxy = settings.proxy.clone();
            proxy
                .target(&spec.display().to_string())
                .session_id(&format!(
                    "{}-{}",
                    std::process::id(),
                    stamp(Instant::now()).unix_ms
                ));
            proxy
        }),
        supervisor: ProcessSupervisor::new(settings.supervisor),
        stderr_capture: OutputCapture::new(&settings.stderr_capture),
        stderr_budget: settings.stderr_forward_bytes,
        stderr_forwarded: 0,
        stderr_marker_shown: false,
        pid,
        closed_by_guard: None,
    };
    let (outcome, session) = session.drive(&mut child, audit.as_mut()).await;
    let captured = session.stderr_capture.finish();
    if let Some(path) = &args.metrics {
        let report = GuardReport {
            proxy: session.proxy.metrics(),
            process: &outcome,
            stderr: captured.summary(),
            stderr_tail: captured.render("stderr"),
            stderr_excerpt: captured.excerpt("stderr", settings.stderr_excerpt_bytes),
            stderr_forwarded_bytes: session.stderr_forwarded,
            own_stderr_dropped_bytes: crate::stderr_sink::dropped(),
            guard_closed_session: session.closed_by_guard,
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
    if session.closed_by_guard.is_some() {
        return ExitCode::from(EXIT_GUARD_CLOSED);
    }
    match outcome.exit_status {
        Some(ExitStatus::Code(c)) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        Some(ExitStatus::Signal(s)) => ExitCode::from(u8::try_from(128 + s).unwrap_or(255)),
        None => ExitCode::from(1),
    }
}

struct Session {
    proxy: Proxy,
    supervisor: ProcessSupervisor,
    stderr_capture: OutputCapture,
    stderr_budget: u64,
    stderr_forwarded: u64,
    stderr_marker_shown: bool,
    pid: u32,
    closed_by_guard: Option<&'static str>,
}

enum Wake {
    Host(std::io::Result<usize>),
    ServerOut(std::io::Result<usize>),
    ServerErr(std::io::Result<usize>),
    WroteServer(std::io::Result<usize>),
    WroteHost(std::io::Result<usize>),
    HostProgress(std::io::Result<()>),
    Exited(std::io::Result<std::process::ExitStatus>),
    Timer,
    Terminate,
}

/// Messages taken from the proxy, written one after another as the pipe
/// accepts them. Bounded by the proxy, which counts them until written.
#[derive(Default)]
struct Outbox {
    queue: VecDeque<Vec<u8>>,
    offset: usize,
}

impl Outbox {
    fn front(&self) -> Option<&[u8]> {
        self.queue.front().map(|b| &b[self.offset..])
    }
    fn advance(&mut self, n: usize) {
        self.offset += n;
        if self.queue.front().is_some_and(|b| self.offset >= b.len()) {
            self.queue.pop_front();
            self.offset = 0;
        }
    }
    fn clear(&mut self) {
        self.queue.clear();
        self.offset = 0;
    }
}

/// Both clocks, read once.
fn stamp(now: Instant) -> Stamp {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Stamp::new(now, unix_ms)
}

/// How long the host may take to read what it is owed once the server is gone.
const FINAL_FLUSH: Duration = Duration::from_secs(2);

impl Session {
    /// The I/O loop. It waits on every source at once (server stdout and
    /// stderr, host stdin, write readiness both ways, child exit, the
    /// supervisor's timer, signals) and never on a write finishing (G1); every
    /// decision is the proxy's or the supervisor's.
    async fn drive(
        mut self,
        child: &mut tokio::process::Child,
        mut audit: Option<&mut AuditLog>,
    ) -> (ProcessOutcome, Self) {
        let mut server_in = child.stdin.take();
        let mut server_out = child.stdout.take();
        let mut server_err = child.stderr.take();
        let mut host_in = Some(HostInput::open());
        let mut host_out = Some(HostOutput::open());
        let mut to_server = Outbox::default();
        let mut to_host = Outbox::default();
        let mut exited = false;
        let mut host_buf = vec![0u8; 64 * 1024];
        let mut out_buf = vec![0u8; 64 * 1024];
        let mut err_buf = vec![0u8; 16 * 1024];
        let mut terminate = terminate_signal();
        self.supervisor
            .handle_spawned(Instant::now(), ChildPipes::ALL);
        loop {
            let now = Instant::now();
            // Poll the proxy in its documented order, then the supervisor.
            while let Some(event) = self.proxy.poll_event() {
                match event {
                    ProxyEvent::HostStoppedReading { .. } => {
                        self.closed_by_guard = Some("host_stopped_reading");
                    }
                    ProxyEvent::HostOutputClosed => {
                        tracing::debug!("host stdout closed");
                    }
                    _ => {}
                }
                host_out = None;
                to_host.clear();
                self.supervisor.shutdown(now);
            }
            let mut wrote_audit = false;
            while let Some(record) = self.proxy.poll_record() {
                if let Some(a) = audit.as_deref_mut() {
                    a.append(&record);
                    wrote_audit = true;
                }
            }
            if wrote_audit {
                if let Some(a) = audit.as_deref_mut() {
                    a.sync();
                }
            }
            while let Some(b) = self.proxy.poll_to_server() {
                if server_in.is_some() {
                    to_server.queue.push_back(b);
                } else {
                    self.proxy.handle_server_written(b.len());
                }
            }
            // One message at a time: a cancel can still withdraw a response
            // the proxy holds, but not one the pipe has started to take.
            if to_host.queue.is_empty() {
                if let Some(b) = self.proxy.poll_to_host() {
                    to_host.queue.push_back(b);
                }
            }
            while let Some(note) = self.proxy.poll_note() {
                crate::stderr_sink::line(&note);
            }
            while let Some(action) = self.supervisor.poll_action() {
                match action {
                    ProcessAction::CloseStdin => {
                        server_in = None;
                        to_server.clear();
                        self.proxy.handle_server_input_closed();
                    }
                    ProcessAction::SignalGroup(sig) => signal_group(self.pid, sig),
                    ProcessAction::AbandonReaders => {
                        crate::stderr_sink::line("mcp-stdio guard: server pipes still open past the drain deadline (an escaped grandchild?); abandoning them");
                        server_out = None;
                        server_err = None;
                    }
                    ProcessAction::Finished(outcome) => {
                        let at = stamp(Instant::now());
                        self.proxy.handle_server_eof(at);
                        self.proxy.finish(at, outcome.exit_status);
                        while let Some(record) = self.proxy.poll_record() {
                            if let Some(a) = audit.as_deref_mut() {
                                a.append(&record);
                            }
                        }
                        if let Some(a) = audit.as_deref_mut() {
                            a.append(
                                &serde_json::json!({"phase": "session_end", "process": &outcome}),
                            );
                            a.sync();
                        }
                        while let Some(note) = self.proxy.poll_note() {
                            crate::stderr_sink::line(&note);
                        }
                        // What the host is still owed, within a bound: the
                        // server is gone, so there is nothing left to read.
                        if let Some(out) = host_out.as_mut() {
                            while let Some(b) = self.proxy.poll_to_host() {
                                to_host.queue.push_back(b);
                            }
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
                            let _ = tokio::time::timeout(FINAL_FLUSH, flush).await;
                        }
                        return (outcome, self);
                    }
                }
            }
            let deadline = self
                .supervisor
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            let read_host = host_in.is_some() && self.proxy.wants_host_input();
            let host_front = if host_out.is_some() {
                to_host.front()
            } else {
                None
            };
            // An owned future, so it can wait beside a write on the same output.
            let host_progress = host_out.as_ref().map(HostOutput::progress);
            let wake = tokio::select! {
                r = read_opt(&mut server_out, &mut out_buf) => Wake::ServerOut(r),
                r = read_opt(&mut server_err, &mut err_buf) => Wake::ServerErr(r),
                r = read_host_opt(&mut host_in, &mut host_buf), if read_host => Wake::Host(r),
                r = write_opt(&mut server_in, to_server.front()), if to_server.front().is_some() => Wake::WroteServer(r),
                r = write_host_opt(&mut host_out, host_front), if host_front.is_some() => Wake::WroteHost(r),
                r = opt_future(host_progress) => Wake::HostProgress(r),
                s = child.wait(), if !exited => Wake::Exited(s),
                () = sleep_opt(deadline) => Wake::Timer,
                () = terminate.recv() => Wake::Terminate,
            };
            let now = Instant::now();
            let at = stamp(now);
            match wake {
                Wake::Host(Ok(n)) if n > 0 => self.proxy.handle_host(at, &host_buf[..n]),
                Wake::Host(r) => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "reading stdin failed");
                    }
                    // The host closed our stdin: the shutdown sequence starts.
                    host_in = None;
                    self.proxy.handle_host_eof(at);
                    self.supervisor.shutdown(now);
                }
                Wake::ServerOut(Ok(n)) if n > 0 => self.proxy.handle_server(at, &out_buf[..n]),
                Wake::ServerOut(_) => {
                    server_out = None;
                    self.proxy.handle_server_eof(at);
                    self.supervisor.handle_stdout_eof(now);
                    self.supervisor.shutdown(now);
                }
                Wake::ServerErr(Ok(n)) if n > 0 => self.on_stderr(&err_buf[..n]),
                Wake::ServerErr(_) => {
                    server_err = None;
                    self.supervisor.handle_stderr_eof(now);
                }
                Wake::WroteServer(Ok(n)) => {
                    to_server.advance(n);
                    self.proxy.handle_server_written(n);
                }
                Wake::WroteServer(Err(e)) => {
                    tracing::debug!(error = %e, "server stdin closed");
                    server_in = None;
                    to_server.clear();
                    self.proxy.handle_server_input_closed();
                }
                Wake::WroteHost(Ok(n)) => to_host.advance(n),
                Wake::WroteHost(Err(e)) | Wake::HostProgress(Err(e)) => {
                    tracing::debug!(error = %e, "writing stdout failed");
                    self.proxy.handle_host_write_error();
                }
                Wake::HostProgress(Ok(())) => {}
                Wake::Exited(s) => {
                    exited = true;
                    match s {
                        Ok(s) => self.supervisor.handle_exited(now, exit_status(s)),
                        Err(e) => tracing::warn!(error = %e, "waiting for the server failed"),
                    }
                }
                Wake::Timer => self.supervisor.handle_timeout(now),
                Wake::Terminate => {
                    // The host is stopping us: stop the server the same way.
                    self.supervisor.shutdown(now);
                }
            }
            // Write progress, whichever wake-up brought it.
            if let Some(out) = host_out.as_mut() {
                let n = out.take_written();
                if n > 0 {
                    self.proxy.handle_host_written(n);
                }
            }
        }
    }

    /// Forwards server stderr within the budget and keeps its tail (G10).
    fn on_stderr(&mut self, chunk: &[u8]) {
        self.stderr_capture.push(chunk);
        let room = self.stderr_budget.saturating_sub(self.stderr_forwarded);
        let take = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if take > 0 {
            crate::stderr_sink::write(&chunk[..take]);
            self.stderr_forwarded += take as u64;
        }
        if take < chunk.len() && !self.stderr_marker_shown {
            self.stderr_marker_shown = true;
            crate::stderr_sink::line(&format!(
                "\n[mcp-stdio guard: server stderr passed its budget of {} bytes; the rest is counted, its tail kept for the record]",
                self.stderr_budget
            ));
        }
    }
}

use mcp_stdio_sys::{exit_status, signal_group};

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
