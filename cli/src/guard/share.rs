//! `guard --share`: one server for many host sessions (the design's F2:
//! sessions never see each other). The first guard of a share key starts a
//! hub, a process of its own (its own session, not a child of any host),
//! that runs the server and serves every guard of that key over a Unix
//! socket in the user's runtime folder (`share/<key>.sock`: the folder
//! `0700`, the socket `0600`, same-uid peers only). Each guard relays its
//! host's stdio to the hub. Every routing decision is the core's
//! `Hub`'s; this side moves bytes.
//!
//! The hub never waits for one session on behalf of another (G1 per
//! session): each connection has a reader and a writer of its own, the
//! core bounds what waits for each session and closes a session whose host
//! stopped reading, and the server's stdout is always read. When the last
//! session has gone and `--share-linger` passed with none attaching, the
//! hub stops the server and exits; when the server ends, every session
//! gets the crash error for what it waits for and is closed.

use std::collections::{BTreeSet, HashMap};
use std::future::Future as _;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mcp_stdio_core::hub::{Hub, HubEvent, SessionId};
use mcp_stdio_core::{CommandSpec, ErrorObject, FrameEvent, Framer, FramerConfig};
use mcp_stdio_tokio::driver::stdio::{Stdin, Stdout};
use mcp_stdio_tokio::driver::{Pipe, Runtime as _, Sink, Source};
use mcp_stdio_tokio::leader::Leader;
use mcp_stdio_tokio::runtime::Tokio;
use sha2::{Digest, Sha256};

use super::audit_log::AuditLog;
use super::log_file::{LogFile, LogFileSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::Notify;

/// `--share-linger`'s default: how long a hub with no session waits for
/// one before it stops the server and exits.
pub(crate) const DEFAULT_LINGER: Duration = Duration::from_secs(10);

/// How long a relay whose hub is done waits for a host that takes none of
/// what is left for it, before it says the host stopped reading (exit 75).
const HOST_STALL: Duration = Duration::from_secs(2);

/// Bytes of the hub's log (`<key>.log`) before it is rotated, and the
/// files kept: the server's stderr and the hub's notes, like `--log-file`'s
/// defaults.
const HUB_LOG_MAX: u64 = 10 * 1024 * 1024;
const HUB_LOG_FILES: u32 = 3;

/// The server's newest stderr a hub keeps for `mcp-stdio logs`.
const HUB_STDERR_TAIL: usize = 64 * 1024;

/// How long a guard waits for the hub it started to listen.
const HUB_START_WAIT: Duration = Duration::from_secs(10);

/// Bytes waiting for the server past which the hub stops reading its
/// sessions until the server takes them.
const SERVER_BACKLOG_PAUSE: usize = 16 * 1024 * 1024;

/// One read, from a session or the server.
const READ_CHUNK: usize = 64 * 1024;

/// How long the server gets to end after its stdin closes, then after
/// SIGTERM, when the hub stops.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(2);

/// The first line a hub sends a session it cannot serve: its guard runs a
/// server of its own and gives it the host's `initialize` again.
const PRIVATE_KEY: &str = "mcp-stdio-hub/private";

/// The first line a guard sends its hub: the share key it computed. A hub
/// of another key (a stale or tampered socket at the path) answers with
/// the private-server line, and the guard runs a server of its own.
const HELLO_KEY: &str = "mcp-stdio-hub/hello";

/// The share key a hub socket's path names (its file stem).
fn key_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A guard's hello to the hub at `path`.
fn hello(path: &Path) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({ HELLO_KEY: { "key": key_of(path) } }))
        .unwrap_or_default();
    line.push(b'\n');
    line
}

/// The share key: a digest of everything that makes two servers the same
/// (the command line, the environment it gets, its working folder, its
/// sandbox, the wire limit, its idle stop, the tool policies, the audit log,
/// metrics file and log file), or of the key `--share KEY` names.
pub(crate) fn key(
    server: &CommandSpec,
    max_frame: usize,
    parts: KeyParts<'_>,
    named: Option<&str>,
) -> String {
    let KeyParts {
        idle_stop,
        policy,
        otel,
        files,
    } = parts;
    let mut h = Sha256::new();
    match named {
        Some(name) => {
            h.update(b"named\0");
            h.update(name.as_bytes());
        }
        None => {
            h.update(format!("{server:?}").as_bytes());
            h.update(
                format!("\0max_frame={max_frame}\0idle_stop={idle_stop:?}\0otel={otel}\0")
                    .as_bytes(),
            );
            // Sessions under other policies have a hub of their own.
            h.update(format!("policy={policy}\0").as_bytes());
            // One audit log, metrics file and log file per hub: sessions
            // writing elsewhere (or not at all) have a hub of their own.
            for file in files {
                let file = file.map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
                h.update(format!("file={file:?}\0").as_bytes());
            }
            if server.get_current_dir().is_none() {
                if let Ok(cwd) = std::env::current_dir() {
                    h.update(cwd.as_os_str().as_encoded_bytes());
                }
            }
        }
    }
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// `<runtime folder>/share/`, created `0700` and checked like the runtime
/// folder.
fn share_dir() -> Result<PathBuf, String> {
    let dir = mcp_stdio_sys::runtime_dir::runtime_dir()
        .map_err(|e| e.to_string())?
        .join("share");
    mcp_stdio_sys::runtime_dir::ensure_private_dir(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The hub socket of `key`.
pub(crate) fn socket_path(key: &str) -> Result<PathBuf, String> {
    Ok(share_dir()?.join(format!("{key}.sock")))
}

/// What attaching gave.
pub(crate) enum Attached {
    /// The guard's host now talks to the hub through this relay.
    Relay(UnixStream),
    /// No hub could be had (why): the guard runs its own server.
    Unshared(String),
}

/// Connects to the hub at `path`, starting one (`start`) when none
/// listens.
pub(crate) async fn attach(path: &Path, start: impl FnOnce() -> io::Result<()>) -> Attached {
    if let Ok(s) = connect(path).await {
        return Attached::Relay(s);
    }
    if let Err(e) = start() {
        return Attached::Unshared(format!("the hub could not be started: {e}"));
    }
    let t = Instant::now();
    loop {
        match connect(path).await {
            Ok(s) => return Attached::Relay(s),
            Err(e) if t.elapsed() > HUB_START_WAIT => {
                return Attached::Unshared(format!(
                    "the hub did not listen within {} s: {e}",
                    HUB_START_WAIT.as_secs()
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn connect(path: &Path) -> io::Result<UnixStream> {
    let s = UnixStream::connect(path).await?;
    // Same uid only, both ways: a socket of another user's is not ours.
    let uid = mcp_stdio_sys::runtime_dir::peer_uid(s.as_fd())?;
    if uid != rustix::process::geteuid().as_raw() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the hub socket's peer is uid {uid}, not ours"),
        ));
    }
    Ok(s)
}

/// Starts a hub for `path`: this program again, as `guard --hub-socket
/// PATH` with the guard's own arguments (the same settings, the same
/// server), in a session of its own, its stderr to `<key>.log` beside the
/// socket.
pub(crate) fn start_hub(path: &Path) -> io::Result<()> {
    let exe = std::env::current_exe()?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // `guard` first, then the hub's socket, then the guard's own arguments.
    let at = args.iter().position(|a| a == "guard").map_or(0, |i| i + 1);
    args.splice(at..at, ["--hub-socket".into(), path.as_os_str().to_owned()]);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path.with_extension("log"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    // Not waited for: it outlives this guard (init reaps it). It leaves
    // the guard's session itself, first thing (`serve_hub`).
    cmd.spawn().map(drop)
}

/// How a relay ended.
pub(crate) enum RelayEnd {
    /// The session is over: the guard's exit status.
    Done(u8),
    /// The hub cannot serve this host as it serves the first: the guard
    /// runs its own server, given this `initialize` line first.
    Private(Vec<u8>),
}

/// The host's first line, read a byte at a time (nothing past it is taken
/// from stdin, so a private server's guard reads the rest itself); `None`
/// at the end of input or past `max` bytes.
async fn first_host_line(max: usize) -> Option<Vec<u8>> {
    tokio::task::spawn_blocking(move || {
        let stdin = std::io::stdin();
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            match rustix::io::read(&stdin, &mut byte) {
                Ok(0) => return None,
                Ok(_) => {
                    line.push(byte[0]);
                    if byte[0] == b'\n' {
                        return Some(line);
                    }
                    if line.len() > max {
                        return None;
                    }
                }
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(_) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// The ids of the host's requests the hub has not answered: when the hub
/// goes, each gets the crash error at once. At most
/// `mcp_stdio_core::hub::MAX_HUB_IN_FLIGHT` (the hub
/// holds no more for a session).
#[derive(Default)]
struct Open {
    ids: BTreeSet<mcp_stdio_core::Id>,
    /// The host's `notifications/initialized`, for a replay to a new hub.
    initialized: Option<Vec<u8>>,
}

impl Open {
    /// Lines from the hub: the requests they answer (their top-level ids,
    /// streamed: a large result is neither buffered nor parsed here).
    fn answered(&mut self, ids: &mut mcp_stdio_core::LineIds, chunk: &[u8]) {
        let open = &mut self.ids;
        ids.push(chunk, |id| {
            if let Some(id) = id {
                open.remove(&id);
            }
        });
    }

    /// Frames from the host: requests opened, cancels.
    fn see(&mut self, framer: &mut Framer, chunk: &[u8]) {
        let (open, initialized) = (&mut self.ids, &mut self.initialized);
        framer.push(chunk, |ev: FrameEvent<'_>| {
            let FrameEvent::Frame(text) = ev else { return };
            match mcp_stdio_core::Message::decode(&text) {
                Ok(mcp_stdio_core::Message::Request(r))
                    if open.len() < mcp_stdio_core::hub::MAX_HUB_IN_FLIGHT =>
                {
                    open.insert(r.id);
                }
                // A request the host cancelled is answered by no one.
                Ok(mcp_stdio_core::Message::Notification(n))
                    if n.method == "notifications/cancelled" =>
                {
                    let id = n
                        .params
                        .as_deref()
                        .and_then(|p| mcp_stdio_core::member(p.get(), "requestId"))
                        .and_then(|v| serde_json::from_str(v.get()).ok());
                    if let Some(id) = id {
                        open.remove(&id);
                    }
                }
                Ok(mcp_stdio_core::Message::Notification(n))
                    if n.method == "notifications/initialized" && initialized.is_none() =>
                {
                    let mut line = text.as_bytes().to_vec();
                    line.push(b'\n');
                    *initialized = Some(line);
                }
                _ => {}
            }
        });
    }
}

/// Relays the host's stdio to the hub until either ends: one loop on the
/// driver's pieces (stdin, stdout and the socket non-blocking in the
/// reactor), one system call per ready direction, the two directions never
/// waiting for each other. The host's first line goes alone and the hub's
/// first answer is looked at (a private-server answer); the rest goes as
/// it comes. When the hub goes while the host is still there, the host's
/// open requests get the crash error. A host that stops reading while more
/// than `mcp_stdio_core::hub::MAX_SESSION_QUEUE` and
/// one frame wait for it loses its session (exit 75), as a guard of its
/// own would close it (G1).
pub(crate) async fn relay(stream: UnixStream, framer: &FramerConfig, rejoin: &Rejoin) -> RelayEnd {
    let max_frame = framer.get_max_frame();
    let mut host_framer = Framer::new(framer.clone());
    let Some(first) = first_host_line(max_frame).await else {
        return RelayEnd::Done(0);
    };
    let mut open = Open::default();
    open.see(&mut host_framer, &first);
    let mut stream = stream;
    if stream.write_all(&hello(&rejoin.path)).await.is_err() {
        crate::stderr_sink::line("mcp-stdio guard: --share: the hub closed the connection at once");
        return RelayEnd::Done(mcp_stdio_core::EXIT_UNKNOWN);
    }
    let pieces = (|| {
        let rt = Tokio::current()?;
        let (half, hub) = hub_pipe(&rt, stream.into_std()?)?;
        let (stdin, stdout) = (Stdin::new(&rt)?, Stdout::new(&rt)?);
        Ok::<_, io::Error>((rt, half, hub, stdin, stdout))
    })();
    let (rt, half, hub, stdin, stdout) = match pieces {
        Ok(p) => p,
        Err(e) => {
            crate::stderr_sink::line(&format!("mcp-stdio guard: --share: the relay: {e}"));
            return RelayEnd::Done(mcp_stdio_core::EXIT_UNKNOWN);
        }
    };
    let initialize = first.clone();
    let mut relay = Relay {
        hub,
        half,
        stdin,
        stdout,
        host_framer,
        open,
        hub_ids: mcp_stdio_core::LineIds::new(mcp_stdio_core::DEFAULT_ID_SCAN_LIMIT),
        up: first,
        up_at: 0,
        down: std::collections::VecDeque::new(),
        first_answer: Some(Vec::new()),
        revision: None,
        host_in: true,
        hub_in: true,
        max_frame,
        buf: vec![0; READ_CHUNK],
        stall: None,
    };
    let mut restarts = 0;
    let mut joined = Instant::now();
    loop {
        let end = std::future::poll_fn(|cx| relay.poll(cx)).await;
        // A terminal or a file behind a writer thread: what it holds goes out.
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            std::future::poll_fn(|cx| relay.stdout.poll_flush(cx)),
        )
        .await;
        match end {
            Ended::Private => return RelayEnd::Private(initialize),
            Ended::Done(code) => return RelayEnd::Done(code),
            Ended::HostStoppedReading(waiting) => {
                crate::stderr_sink::line(&format!(
                    "mcp-stdio guard: --share: the host stopped reading stdout ({waiting} bytes waiting); closing the session"
                ));
                return RelayEnd::Done(mcp_stdio_core::EXIT_GUARD_CLOSED);
            }
            Ended::HubGone => {}
        }
        // The hub went: a server crash for this host.
        let lost = crash_open(&relay.open, &mut relay.stdout).await;
        if joined.elapsed() >= mcp_stdio_core::RESTART_RESET_AFTER {
            restarts = 0;
        }
        restarts += 1;
        if !rejoin.restart.allows_after_failure(restarts) {
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: --share: the hub closed this session (the shared server or the hub is gone); {lost} open request(s) got an error"
            ));
            return RelayEnd::Done(mcp_stdio_core::EXIT_UNKNOWN);
        }
        crate::stderr_sink::line(&format!(
            "mcp-stdio guard: --share: the hub closed this session; {lost} open request(s) got an error; joining a new hub (restart {restarts} of {})",
            rejoin.restart.get_max_restarts()
        ));
        tokio::time::sleep(rejoin.restart.backoff_for(restarts)).await;
        let replayed = replay(
            rejoin,
            &initialize,
            relay.open.initialized.as_deref(),
            relay.revision.as_deref(),
            max_frame,
        )
        .await;
        let joined_again = replayed.and_then(|(stream, rest)| {
            let (half, hub) = hub_pipe(&rt, stream).map_err(|e| e.to_string())?;
            relay.rejoined(half, hub, &rest);
            Ok(())
        });
        if let Err(why) = joined_again {
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: --share: no new hub: {why}; closing the session"
            ));
            return RelayEnd::Done(mcp_stdio_core::EXIT_UNKNOWN);
        }
        crate::stderr_sink::line(
            "mcp-stdio guard: --share: joined a new hub; the handshake was replayed",
        );
        joined = Instant::now();
    }
}

/// `--restart` for a shared session: where the hub was (a new one is
/// started or joined there) and the policy.
pub(crate) struct Rejoin {
    pub(crate) path: PathBuf,
    pub(crate) restart: mcp_stdio_core::RestartConfig,
}

/// The hub's socket as the relay's: a descriptor kept for the half close
/// (shutdown acts on the socket, whichever descriptor names it), and the
/// non-blocking pipe in the reactor.
fn hub_pipe(
    rt: &Tokio,
    socket: std::os::unix::net::UnixStream,
) -> io::Result<(std::os::unix::net::UnixStream, Pipe<Tokio>)> {
    let half = socket.try_clone()?;
    Ok((half, Pipe::new(rt, std::os::fd::OwnedFd::from(socket))?))
}

/// Joins a hub at the rejoin path (starting one when none listens) and
/// replays the host's handshake to it: its `initialize` under an id of the
/// guard's own, whose answer must be a result of the same revision (and
/// goes no further), then its `notifications/initialized`. Gives the socket
/// and what came after the answer.
async fn replay(
    rejoin: &Rejoin,
    initialize: &[u8],
    initialized: Option<&[u8]>,
    revision: Option<&str>,
    max_frame: usize,
) -> Result<(std::os::unix::net::UnixStream, Vec<u8>), String> {
    let text = std::str::from_utf8(initialize).map_err(|e| e.to_string())?;
    let Ok(mcp_stdio_core::Message::Request(r)) = mcp_stdio_core::Message::decode(text) else {
        return Err("the host's first message is not a request".into());
    };
    let own = format!("{}share", mcp_stdio_core::REPLAY_ID_PREFIX);
    let id = mcp_stdio_core::Id::String(own.clone());
    let line = mcp_stdio_core::encode_request(&id, &r.method, r.params.as_deref(), max_frame)
        .map_err(|e| e.to_string())?;
    let path = rejoin.path.clone();
    let mut stream = match attach(&rejoin.path, move || start_hub(&path)).await {
        Attached::Relay(s) => s,
        Attached::Unshared(why) => return Err(why),
    };
    let exchange = async {
        stream.write_all(&hello(&rejoin.path)).await?;
        stream.write_all(&line).await?;
        let mut got = Vec::new();
        let mut buf = vec![0; READ_CHUNK];
        let end = loop {
            if let Some(end) = got.iter().position(|&b| b == b'\n') {
                break end;
            }
            if got.len() > max_frame {
                return Err(io::Error::other("an answer past the wire limit"));
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(io::Error::other("the new hub closed the session"));
            }
            got.extend_from_slice(&buf[..n]);
        };
        Ok::<_, io::Error>((got, end))
    };
    let (got, end) = tokio::time::timeout(mcp_stdio_core::REPLAY_TIMEOUT, exchange)
        .await
        .map_err(|_| "no answer to the replayed initialize in time".to_owned())?
        .map_err(|e| e.to_string())?;
    let answer: serde_json::Value =
        serde_json::from_slice(&got[..end]).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if answer.get(PRIVATE_KEY).is_some() {
        return Err("the new hub cannot serve this host as it serves the first".into());
    }
    if answer.get("id").and_then(|v| v.as_str()) != Some(own.as_str()) {
        return Err(format!("an answer to another request: {}", answer["id"]));
    }
    let Some(result) = answer.get("result") else {
        return Err(format!(
            "the replayed initialize failed: {}",
            answer["error"]
        ));
    };
    let now = result.get("protocolVersion").and_then(|v| v.as_str());
    if revision.is_some() && now != revision {
        return Err(format!(
            "the new server speaks {} where the session speaks {}",
            now.unwrap_or("(none)"),
            revision.unwrap_or("(none)")
        ));
    }
    if let Some(line) = initialized {
        stream.write_all(line).await.map_err(|e| e.to_string())?;
    }
    let stream = stream.into_std().map_err(|e| e.to_string())?;
    Ok((stream, got[end + 1..].to_vec()))
}

/// How the relay's loop ended.
enum Ended {
    Done(u8),
    Private,
    HubGone,
    HostStoppedReading(usize),
}

/// The relay's loop: bytes each way, the host's way one pending chunk at a
/// time, the hub's way a backlog bounded by `MAX_SESSION_QUEUE` and a frame.
struct Relay {
    hub: Pipe<Tokio>,
    half: std::os::unix::net::UnixStream,
    stdin: Stdin<Tokio>,
    stdout: Stdout<Tokio>,
    host_framer: Framer,
    open: Open,
    hub_ids: mcp_stdio_core::LineIds,
    /// Host bytes not yet taken by the hub (at first: the host's first
    /// line, kept whole for a private server).
    up: Vec<u8>,
    up_at: usize,
    /// Hub bytes not yet taken by the host.
    down: std::collections::VecDeque<u8>,
    /// The hub's first answer, gathered until its end of line; `None` once
    /// seen. Stdin is not read before it.
    first_answer: Option<Vec<u8>>,
    /// The session's protocol revision, from that answer.
    revision: Option<String>,
    host_in: bool,
    hub_in: bool,
    max_frame: usize,
    buf: Vec<u8>,
    /// Runs while the hub is done and the host has not taken the rest.
    stall: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Relay {
    /// A new hub after the old one went: the host's bytes that were on
    /// their way to the old one are gone (their requests got the crash
    /// error), and `rest` (what the new hub sent after the replayed
    /// handshake's answer) goes to the host first.
    fn rejoined(&mut self, half: std::os::unix::net::UnixStream, hub: Pipe<Tokio>, rest: &[u8]) {
        self.half = half;
        self.hub = hub;
        self.hub_ids = mcp_stdio_core::LineIds::new(mcp_stdio_core::DEFAULT_ID_SCAN_LIMIT);
        self.open.ids.clear();
        self.up.clear();
        self.up_at = 0;
        self.hub_in = true;
        self.stall = None;
        self.open.answered(&mut self.hub_ids, rest);
        self.down.extend(rest);
    }

    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Ended> {
        use std::task::Poll;
        loop {
            let mut progress = false;
            // Host → hub.
            if self.up_at < self.up.len() {
                match self.hub.poll_write(cx, &self.up[self.up_at..]) {
                    Poll::Ready(Ok(n)) => {
                        self.up_at += n;
                        progress = true;
                        if self.up_at == self.up.len() && self.first_answer.is_none() {
                            self.up.clear();
                            self.up_at = 0;
                        }
                    }
                    // The hub's end is gone: what it still sent is read
                    // below, then its end of input ends the relay.
                    Poll::Ready(Err(_)) => {
                        self.up.clear();
                        self.up_at = 0;
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            } else if self.host_in && self.first_answer.is_none() {
                match self.stdin.poll_read(cx, &mut self.buf) {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        self.open.see(&mut self.host_framer, &self.buf[..n]);
                        self.up.extend_from_slice(&self.buf[..n]);
                        progress = true;
                    }
                    Poll::Ready(_) => {
                        // The host's end of input: the hub ends its session.
                        self.host_in = false;
                        let _ = self.half.shutdown(std::net::Shutdown::Write);
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }
            // Hub → host.
            if !self.down.is_empty() {
                let (bytes, _) = self.down.as_slices();
                match self.stdout.poll_write(cx, bytes) {
                    Poll::Ready(Ok(n)) => {
                        self.down.drain(..n);
                        self.stall = None;
                        progress = true;
                    }
                    // The host no longer reads: its session is over.
                    Poll::Ready(Err(_)) => return Poll::Ready(Ended::Done(0)),
                    Poll::Pending => {}
                }
            }
            // Read on while the host is slow (bounded), so that a hub
            // closing this session is seen.
            let waiting = self.down.len();
            if self.hub_in && waiting > mcp_stdio_core::hub::MAX_SESSION_QUEUE + self.max_frame {
                return Poll::Ready(Ended::HostStoppedReading(waiting));
            }
            if self.hub_in {
                match self.hub.poll_read(cx, &mut self.buf) {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        progress = true;
                        if let Some(end) = self.pass_hub(cx, n) {
                            return Poll::Ready(end);
                        }
                    }
                    Poll::Ready(_) => {
                        self.hub_in = false;
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }
            if !self.hub_in && !self.down.is_empty() {
                // The hub is done; the host gets what is left while it
                // takes it, and no longer than HOST_STALL past its last byte.
                let stall = self
                    .stall
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(HOST_STALL)));
                if stall.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ended::HostStoppedReading(self.down.len()));
                }
            }
            if !self.hub_in && self.down.is_empty() {
                return Poll::Ready(if self.host_in {
                    Ended::HubGone
                } else {
                    Ended::Done(0)
                });
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// `n` bytes read from the hub: the first answer looked at, the
    /// answered requests struck off, the bytes queued for the host.
    fn take_hub(&mut self, n: usize) -> Option<Ended> {
        let chunk = &self.buf[..n];
        if let Some(answer) = &mut self.first_answer {
            answer.extend_from_slice(chunk);
            let Some(end) = answer.iter().position(|&b| b == b'\n') else {
                if answer.len() > self.max_frame {
                    // Not an answer of a hub's: the session cannot go on.
                    self.hub_in = false;
                    self.first_answer = None;
                }
                return None;
            };
            let first = serde_json::from_slice::<serde_json::Value>(&answer[..end]).ok();
            if first.as_ref().is_some_and(|v| v.get(PRIVATE_KEY).is_some()) {
                return Some(Ended::Private);
            }
            self.revision = first.as_ref().and_then(|v| {
                v.pointer("/result/protocolVersion")
                    .and_then(|r| r.as_str())
                    .map(str::to_owned)
            });
            let answer = self.first_answer.take().unwrap_or_default();
            // The first line went whole: stdin may be read now.
            self.up.clear();
            self.up_at = 0;
            self.open.answered(&mut self.hub_ids, &answer);
            self.down.extend(&answer);
            return None;
        }
        self.open.answered(&mut self.hub_ids, chunk);
        self.down.extend(chunk);
        None
    }

    /// Bytes just read from the hub, past its first answer, while nothing
    /// waits for the host: written from the read buffer at once, only what
    /// the host does not take now is kept.
    fn pass_hub(&mut self, cx: &mut std::task::Context<'_>, n: usize) -> Option<Ended> {
        if self.first_answer.is_some() || !self.down.is_empty() {
            return self.take_hub(n);
        }
        let chunk = &self.buf[..n];
        self.open.answered(&mut self.hub_ids, chunk);
        let written = match self.stdout.poll_write(cx, chunk) {
            std::task::Poll::Ready(Ok(w)) => w,
            std::task::Poll::Ready(Err(_)) => return Some(Ended::Done(0)),
            std::task::Poll::Pending => 0,
        };
        if written > 0 {
            self.stall = None;
        }
        self.down.extend(&chunk[written..]);
        None
    }
}

/// The hub went while the host is still there: its open requests get the
/// crash error (a host that does not read gets a second, not more). Gives
/// how many.
async fn crash_open(open: &Open, stdout: &mut Stdout<Tokio>) -> usize {
    let err = ErrorObject::new(
        mcp_stdio_core::SERVER_CRASHED,
        "the shared MCP server is gone (mcp-stdio hub closed the session)",
    );
    let mut out = Vec::new();
    for id in &open.ids {
        if let Ok(b) = mcp_stdio_core::encode_error(Some(id), &err, 64 * 1024) {
            out.extend_from_slice(&b);
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut at = 0;
        while at < out.len() {
            at += std::future::poll_fn(|cx| stdout.poll_write(cx, &out[at..])).await?;
        }
        std::future::poll_fn(|cx| stdout.poll_flush(cx)).await
    })
    .await;
    open.ids.len()
}

/// The hub's state, shared by its tasks (never held across an await).
struct Shared {
    hub: Hub,
    /// Sessions to close once their bytes are written.
    closing: BTreeSet<SessionId>,
    /// Sessions to send a private-server answer, then close.
    private: HashMap<SessionId, Vec<u8>>,
    wake: HashMap<SessionId, Arc<Notify>>,
    /// The server's stdin has nothing more coming (the hub stops).
    server_closing: bool,
    /// The server ended.
    server_done: bool,
    /// The core asked for the server to be started again (after a sleep).
    start_wanted: bool,
    /// The core asked for the server to be stopped (it sat idle).
    stop_wanted: bool,
    /// An idle deadline was set at the last look (the main loop, told when
    /// one appears, sleeps until it).
    idle_due: bool,
    /// `--audit`: the hub's log, a record per call, each naming its host
    /// session; appended as calls end, written by its own thread.
    audit: Option<AuditLog>,
    /// `--otel`: the exporter (spans handed over, never waited for).
    otel: Option<super::otel::Otel>,
    /// The running server's pid.
    server_pid: Option<u32>,
    /// The server's newest stderr, at most HUB_STDERR_TAIL bytes (what
    /// `mcp-stdio logs` shows of a hub).
    stderr_tail: std::collections::VecDeque<u8>,
}

struct HubState {
    shared: Mutex<Shared>,
    /// The hub's log (`<key>.log`): the server's stderr and the hub's
    /// notes, size-rotated, written by a thread of its own (None: stderr).
    log: Mutex<Option<LogFile>>,
    /// The running server's process group, for the shutdown ladder.
    group: Mutex<Option<mcp_stdio_tokio::leader::ProcessGroup>>,
    server_wake: Notify,
    /// Sessions came or went, or the server ended.
    changed: Notify,
    /// The server took bytes: paused session readers may go on.
    drained: Notify,
}

impl HubState {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes for the log, never waited for (a slow disk drops them).
    fn log(&self, bytes: Vec<u8>) {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        match &*log {
            Some(l) => {
                l.push(bytes);
            }
            None => crate::stderr_sink::line(String::from_utf8_lossy(&bytes).trim_end()),
        }
    }

    /// One line of the hub's own.
    fn say(&self, text: &str) {
        self.log(format!("mcp-stdio hub: {text}\n").into_bytes());
    }

    /// The log's last bytes written (at most a second).
    fn close_log(&self) {
        let log = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(l) = log {
            l.close(Duration::from_secs(1));
        }
    }

    /// After a change: the core's events acted on, the writers woken.
    fn pump(&self, s: &mut Shared) {
        while let Some(e) = s.hub.poll_event() {
            match e {
                HubEvent::Close { session, reason } => {
                    self.say(&format!("session {} closed: {reason}", session.0));
                    s.closing.insert(session);
                }
                HubEvent::PrivateServer {
                    session,
                    initialize,
                    reason,
                } => {
                    let mut line = serde_json::to_vec(&serde_json::json!({
                        PRIVATE_KEY: {"initialize": initialize, "reason": reason}
                    }))
                    .unwrap_or_default();
                    line.push(b'\n');
                    s.private.insert(session, line);
                }
                HubEvent::Note(text) => self.say(&text),
                HubEvent::StopServer => {
                    s.stop_wanted = true;
                    self.changed.notify_one();
                }
                HubEvent::StartServer => {
                    s.start_wanted = true;
                    self.changed.notify_one();
                }
            }
        }
        for w in s.wake.values() {
            w.notify_one();
        }
        if s.hub.server_backlog() > 0 || s.server_closing {
            self.server_wake.notify_one();
        }
        // Ended calls to the audit log's writer (never waited for here).
        if let Some(audit) = s.audit.as_mut() {
            let mut appended = false;
            while let Some(record) = s.hub.poll_record() {
                audit.append(&record);
                appended = true;
            }
            if appended {
                audit.commit();
            }
        }
        // Ended calls' spans to the exporter's thread (never waited for).
        if let Some(otel) = s.otel.as_ref() {
            let mut spans = Vec::new();
            while let Some(span) = s.hub.poll_span() {
                spans.push(span);
            }
            for span in spans {
                otel.span(span, mcp_stdio_core::GuardCounters::default());
            }
        }
        // An idle deadline appeared: the main loop sleeps until it.
        let due = s.hub.idle_deadline().is_some();
        if due && !s.idle_due {
            self.changed.notify_one();
        }
        s.idle_due = due;
    }
}

/// The guard's options, besides the server's command, that make two
/// servers different: a hub is one of each.
pub(crate) struct KeyParts<'a> {
    /// `--idle-stop`.
    pub(crate) idle_stop: Option<Duration>,
    /// The tool policies, as text (`--tools`, `--rate-limit`, …; empty: none).
    pub(crate) policy: String,
    /// `--otel`.
    pub(crate) otel: bool,
    /// `--audit`, `--metrics`, `--log-file`.
    pub(crate) files: [Option<&'a Path>; 3],
}

/// What a hub runs with besides its server.
pub(crate) struct HubSettings {
    /// `--share-linger`.
    pub(crate) linger: Duration,
    /// `--idle-stop`.
    pub(crate) idle_stop: Option<Duration>,
    /// `--audit`: the log, opened, and the hub's session id in it.
    pub(crate) audit: Option<(AuditLog, String)>,
    /// `--log-file`: the hub's log there instead of `share/<key>.log`.
    pub(crate) log: Option<LogFileSettings>,
    /// `--metrics`: the hub's figures, written when it stops.
    pub(crate) metrics: Option<PathBuf>,
    /// `--otel`: a span per call at the server, exported from the hub.
    pub(crate) otel: Option<super::otel::Otel>,
    /// The server's name (`--name`, or its program's), for `ps`.
    pub(crate) name: String,
    /// A status socket for `ps` (not with `--no-announce`).
    pub(crate) announce: bool,
    /// The tool policies: each session gets a copy (`Hub::tool_policy`).
    pub(crate) policy: Option<mcp_stdio_core::ToolPolicy>,
}

/// Runs the hub at `path` in front of `server` until the last session has
/// gone for `linger` (or the server ends). With `idle_stop`, a server with
/// nothing open for that long is stopped and started again at the next
/// message (the core's `Hub::idle_stop`). Returns the process's status.
pub(crate) async fn serve_hub(
    path: &Path,
    server: &CommandSpec,
    framer: &FramerConfig,
    settings: HubSettings,
) -> ExitCode {
    let HubSettings {
        linger,
        idle_stop,
        audit,
        log,
        metrics,
        otel,
        name,
        announce,
        policy,
    } = settings;
    let started = Instant::now();
    // A session of its own: no host's terminal or group signal reaches it.
    let _ = rustix::process::setsid();
    let listener = match mcp_stdio_sys::runtime_dir::bind_listener(path)
        .and_then(tokio::net::UnixListener::from_std)
    {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            // Another guard's hub got there first: it serves.
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("mcp-stdio hub: {}: {e}", path.display());
            return ExitCode::from(crate::diagnose::EXIT_NOT_STARTED);
        }
    };
    let socket = RemoveOnDrop::new(path);
    // The log: what the server writes on stderr and the hub's notes, in
    // the file the hub's own stderr already appends to (where a hub that
    // cannot start says why), rotated at HUB_LOG_MAX.
    let log = LogFile::open(log.unwrap_or_else(|| LogFileSettings {
        path: path.with_extension("log"),
        max_bytes: HUB_LOG_MAX,
        files: HUB_LOG_FILES,
    }))
    .map_err(|e| eprintln!("mcp-stdio hub: no log file ({e}); stderr instead"))
    .ok();
    let mut hub = Hub::new(framer.get_max_frame());
    hub.idle_stop(idle_stop).tool_policy(policy);
    let audit = audit.map(|(log, hub_session)| {
        hub.record_calls(&hub_session, &server.display().to_string());
        log
    });
    if otel.is_some() {
        let seed = u64::from(std::process::id())
            ^ mcp_stdio_sys::stamp_at(Instant::now())
                .unix_ms
                .rotate_left(17);
        hub.trace_calls(seed);
    }
    let state = Arc::new(HubState {
        shared: Mutex::new(Shared {
            hub,
            closing: BTreeSet::new(),
            private: HashMap::new(),
            wake: HashMap::new(),
            server_closing: false,
            server_done: false,
            start_wanted: false,
            stop_wanted: false,
            idle_due: false,
            audit,
            otel,
            server_pid: None,
            stderr_tail: std::collections::VecDeque::new(),
        }),
        log: Mutex::new(log),
        group: Mutex::new(None),
        server_wake: Notify::new(),
        changed: Notify::new(),
        drained: Notify::new(),
    });
    if let Err(e) = start_server(&state, server, framer) {
        state.say(&e);
        state.close_log();
        return ExitCode::from(crate::diagnose::EXIT_NOT_STARTED);
    }
    // A status socket for `ps`, served in this loop (G1: the core's
    // `StatusPort` decides who is served and dropped).
    let key = key_of(path);
    let mut status = if announce {
        Tokio::current().ok().and_then(|rt| {
            super::announce::announce(
                &rt,
                mcp_stdio_core::StatusIdentity {
                    name: name.clone(),
                    guard_pid: std::process::id(),
                    host_pid: None,
                    host_program: None,
                    command: std::iter::once(server.get_program())
                        .chain(server.get_args().iter().map(|a| a.as_os_str()))
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect(),
                    started_unix_ms: mcp_stdio_sys::stamp_at(Instant::now()).unix_ms,
                    audit_log: None,
                    log_file: Some(path.with_extension("log").display().to_string()),
                    sandbox: None,
                    pins: None,
                },
            )
        })
    } else {
        None
    };

    let uid = rustix::process::geteuid().as_raw();
    let mut empty_since = Some(Instant::now());
    loop {
        let (sessions, gone, start, stop, idle_due) = {
            let mut s = state.lock();
            let sleeping = s.hub.is_asleep() || s.hub.is_stopping();
            (
                s.hub.sessions() + s.wake.len(),
                s.server_done && !sleeping,
                std::mem::take(&mut s.start_wanted),
                std::mem::take(&mut s.stop_wanted),
                s.hub.idle_deadline(),
            )
        };
        if start {
            if let Err(e) = start_server(&state, server, framer) {
                state.say(&e);
                let mut s = state.lock();
                s.hub.handle_server_gone(&ErrorObject::new(
                    mcp_stdio_core::SERVER_CRASHED,
                    format!("the shared MCP server could not be started again: {e}"),
                ));
                s.server_done = true;
                state.pump(&mut s);
            }
            continue;
        }
        if stop {
            tokio::spawn(stop_server(Arc::clone(&state)));
        }
        if gone && sessions == 0 {
            break;
        }
        if sessions == 0 {
            empty_since.get_or_insert_with(Instant::now);
        } else {
            empty_since = None;
        }
        let linger_left = empty_since.map(|t| linger.saturating_sub(t.elapsed()));
        if linger_left == Some(Duration::ZERO) && !gone {
            break;
        }
        let linger_sleep = async {
            match linger_left {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let idle_sleep = async {
            match idle_due {
                Some(due) => tokio::time::sleep_until(due.into()).await,
                None => std::future::pending().await,
            }
        };
        let status_due = status.as_ref().and_then(|a| a.deadline());
        let status_sleep = async {
            match status_due {
                Some(due) => tokio::time::sleep_until(due.into()).await,
                None => std::future::pending().await,
            }
        };
        let served = std::future::poll_fn(|cx| {
            let Some(a) = status.as_mut() else {
                return std::task::Poll::Pending;
            };
            let pid = state.lock().server_pid.unwrap_or(0);
            let mut source = HubSource {
                state: &state,
                key: &key,
            };
            if a.poll(cx, Instant::now(), &mut source, pid) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        });
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let ok = mcp_stdio_sys::runtime_dir::peer_uid(stream.as_fd()).is_ok_and(|p| p == uid);
                if !ok || gone {
                    continue;
                }
                let opened = state.lock().hub.open_session();
                match opened {
                    Ok(id) => {
                        empty_since = None;
                        spawn_session(&state, id, stream, framer.clone(), key_of(path));
                    }
                    Err(e) => state.say(&format!("a session refused: {e}")),
                }
            }
            () = state.changed.notified() => {}
            () = linger_sleep => {}
            () = idle_sleep => {
                let mut s = state.lock();
                s.hub.handle_time(Instant::now());
                state.pump(&mut s);
            }
            () = served => {}
            () = status_sleep => {
                if let Some(a) = status.as_mut() {
                    a.handle_timeout(Instant::now());
                }
            }
        }
    }
    drop(status);
    stop_ladder(&state).await;
    state.say(&format!(
        "no session for {:.1} s; stopped",
        linger.as_secs_f64()
    ));
    let (audit, figures) = {
        let mut s = state.lock();
        state.pump(&mut s);
        let figures = serde_json::json!({
            "hub": {
                "key": key,
                "pid": std::process::id(),
                "server": server.display().to_string(),
                "sessions_now": s.hub.sessions(),
                "metrics": s.hub.metrics(),
            },
            "own_stderr_dropped_bytes": crate::stderr_sink::dropped(),
        });
        (s.audit.take(), figures)
    };
    let otel = state.lock().otel.take();
    if let Some(otel) = otel {
        let end = super::otel::SessionEnd {
            duration: started.elapsed(),
            protocol_version: None,
            exit_code: 0,
            counters: mcp_stdio_core::GuardCounters::default(),
        };
        otel.close(end, Duration::from_secs(1));
    }
    if let Some(path) = &metrics {
        let json = serde_json::to_vec_pretty(&figures).unwrap_or_default();
        if let Err(e) = std::fs::write(path, json) {
            state.say(&format!("writing metrics to {}: {e}", path.display()));
        }
    }
    if let Some(audit) = audit {
        audit.close(Duration::from_secs(2)).await;
    }
    state.close_log();
    drop(socket);
    ExitCode::SUCCESS
}

/// Stops the server: its stdin closes, then SIGTERM, then SIGKILL to its
/// group, each after SERVER_STOP_GRACE without its end.
async fn stop_ladder(state: &HubState) {
    {
        let mut s = state.lock();
        s.server_closing = true;
        state.pump(&mut s);
    }
    let group = state
        .group
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let ended = |st: &HubState| st.lock().server_done;
    for signal in [
        None,
        Some(mcp_stdio_core::Signal::Term),
        Some(mcp_stdio_core::Signal::Kill),
    ] {
        if let (Some(sig), Some(group)) = (signal, &group) {
            group.signal(sig);
        }
        let t = Instant::now();
        while !ended(state) && t.elapsed() < SERVER_STOP_GRACE {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if ended(state) {
            break;
        }
    }
}

/// The idle stop: the server is stopped; its end is a sleep.
async fn stop_server(state: Arc<HubState>) {
    stop_ladder(&state).await;
}

/// Starts the server (the first time, or after a sleep) with its four
/// tasks: its stdout read always (G1) and framed to the core, its stderr to
/// the log, its stdin written at the pace it reads, its end watched through
/// the driver's `Leader` (no signal goes out after the reap).
fn start_server(
    state: &Arc<HubState>,
    server: &CommandSpec,
    framer: &FramerConfig,
) -> Result<(), String> {
    let mut child = mcp_stdio_sys::spawn_piped(server)
        .map_err(|e| format!("cannot start {}: {e}", server.display()))?;
    let pgid = child.id();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("the server's pipes are missing".into());
    };
    let (mut stdin, mut stdout, mut stderr) = (|| {
        Ok::<_, io::Error>((
            tokio::process::ChildStdin::from_std(stdin)?,
            tokio::process::ChildStdout::from_std(stdout)?,
            tokio::process::ChildStderr::from_std(stderr)?,
        ))
    })()
    .map_err(|e| format!("the server's pipes: {e}"))?;
    let rt = Tokio::current().map_err(|e| e.to_string())?;
    state.say(&format!("serving {} (pid {pgid})", server.display()));
    {
        let mut s = state.lock();
        s.server_closing = false;
        s.server_done = false;
        s.server_pid = Some(pgid);
    }
    let st = Arc::clone(state);
    let config = framer.clone();
    tokio::spawn(async move {
        let mut framer = Framer::new(config);
        // Read straight into the framer's buffer: a large result is
        // gathered in place, not copied from a read buffer.
        while let Ok(n) = stdout.read(framer.read_room().zeroed()).await {
            if n == 0 {
                break;
            }
            let mut s = st.lock();
            s.hub.busy(mcp_stdio_sys::stamp_at(Instant::now()));
            framer.filled(n, |ev: FrameEvent<'_>| {
                if let FrameEvent::Frame(text) = ev {
                    s.hub.handle_server_line(&text);
                }
            });
            st.pump(&mut s);
        }
    });
    let st = Arc::clone(state);
    tokio::spawn(async move {
        let mut buf = vec![0; READ_CHUNK];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            {
                let mut s = st.lock();
                let tail = &mut s.stderr_tail;
                tail.extend(&buf[..n]);
                let over = tail.len().saturating_sub(HUB_STDERR_TAIL);
                tail.drain(..over);
            }
            st.log(buf[..n].to_vec());
        }
    });
    let st = Arc::clone(state);
    tokio::spawn(async move {
        loop {
            // A server being stopped is given nothing more: what comes
            // meanwhile waits for the next one.
            let bytes = {
                let mut s = st.lock();
                if s.server_closing {
                    break;
                }
                s.hub.poll_to_server().unwrap_or_default()
            };
            if !bytes.is_empty() {
                st.drained.notify_waiters();
                if stdin.write_all(&bytes).await.is_err() {
                    break;
                }
                continue;
            }
            st.server_wake.notified().await;
        }
        drop(stdin);
    });
    let mut leader = Leader::new(&rt, child);
    *state.group.lock().unwrap_or_else(PoisonError::into_inner) = Some(leader.group().clone());
    let st = Arc::clone(state);
    tokio::spawn(async move {
        let status = leader.exited().await;
        leader.reap();
        let how = match status {
            Ok(mcp_stdio_core::ExitStatus::Code(c)) => format!("exit code {c}"),
            Ok(mcp_stdio_core::ExitStatus::Signal(n)) => format!("signal {n}"),
            Err(e) => format!("no exit status: {e}"),
        };
        let mut s = st.lock();
        let closing = s.server_closing;
        if s.hub.is_stopping() {
            s.hub.handle_server_slept();
            drop(s);
            st.say(&format!("the server sleeps ({how})"));
            s = st.lock();
        } else {
            s.hub.handle_server_gone(&ErrorObject::new(
                mcp_stdio_core::SERVER_CRASHED,
                format!("the shared MCP server ended ({how}); mcp-stdio hub closes its sessions"),
            ));
            if !closing {
                drop(s);
                st.say(&format!("the server ended ({how})"));
                s = st.lock();
            }
        }
        s.server_done = true;
        s.server_pid = None;
        st.pump(&mut s);
        drop(s);
        st.changed.notify_one();
    });
    Ok(())
}

/// A hub as `mcp-stdio ps` sees it: a row of its own (state `running` or
/// `sleeping`, its sessions as its host), the shared server's figures.
struct HubSource<'a> {
    state: &'a HubState,
    key: &'a str,
}

impl super::announce::StatusSource for HubSource<'_> {
    fn status(
        &mut self,
        identity: &mcp_stdio_core::StatusIdentity,
        process: mcp_stdio_core::ProcessStats,
        port: mcp_stdio_core::StatusPortCounters,
    ) -> Vec<u8> {
        let s = self.state.lock();
        let hub = &s.hub;
        let state = if hub.is_asleep() {
            "sleeping"
        } else if hub.is_stopping() {
            "stopping"
        } else if s.server_done {
            "stopped"
        } else {
            "running"
        };
        let process = if s.server_pid.is_some() {
            serde_json::to_value(process).unwrap_or_default()
        } else {
            serde_json::Value::Null
        };
        let m = hub.metrics();
        serde_json::to_vec(&serde_json::json!({
            "schema": mcp_stdio_core::STATUS_SCHEMA,
            "name": identity.name,
            "guard_pid": identity.guard_pid,
            "host_program": format!("hub: {} session(s)", hub.sessions()),
            "command": identity.command,
            "started_unix_ms": identity.started_unix_ms,
            "state": state,
            "requests": {"total": m.requests, "in_flight": hub.in_flight()},
            "process": process,
            "restarts": 0,
            "audit_log": identity.audit_log,
            "status_port": port,
            "share": {
                "key": self.key,
                "sessions": hub.sessions(),
                "subscriptions": hub.subscriptions(),
                "metrics": m,
            },
        }))
        .unwrap_or_default()
    }

    fn stderr_newest(&self, bytes: usize) -> String {
        let s = self.state.lock();
        let tail = &s.stderr_tail;
        let from = tail.len().saturating_sub(bytes);
        let newest: Vec<u8> = tail.iter().skip(from).copied().collect();
        String::from_utf8_lossy(&newest).into_owned()
    }

    fn set_log_copy(&mut self, _on: bool) {}
}

/// Removes the hub's socket when the hub ends: its own only. When its
/// folder was deleted under it, a later guard started another hub whose
/// socket now has the path; that one is left alone.
struct RemoveOnDrop {
    path: PathBuf,
    /// The socket file's device and inode, read after the bind.
    file: Option<(u64, u64)>,
}

impl RemoveOnDrop {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            file: Self::identity(path),
        }
    }

    fn identity(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.file.is_some() && Self::identity(&self.path) == self.file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One session: a reader (framed lines to the core) and a writer (what the
/// core has for it), neither waiting for the other.
fn spawn_session(
    state: &Arc<HubState>,
    id: SessionId,
    stream: UnixStream,
    config: FramerConfig,
    key: String,
) {
    let wake = Arc::new(Notify::new());
    state.lock().wake.insert(id, Arc::clone(&wake));
    let (mut read, mut write) = stream.into_split();
    let st = Arc::clone(state);
    let reader = tokio::spawn(async move {
        let mut framer = Framer::new(config);
        let mut buf = vec![0; READ_CHUNK];
        let mut greeted = false;
        loop {
            // The server is behind: wait for it before reading more.
            loop {
                let drained = st.drained.notified();
                if st.lock().hub.server_backlog() <= SERVER_BACKLOG_PAUSE {
                    break;
                }
                drained.await;
            }
            let n = match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut s = st.lock();
            s.hub.busy(mcp_stdio_sys::stamp_at(Instant::now()));
            let mut refused = None;
            framer.push(&buf[..n], |ev: FrameEvent<'_>| {
                let FrameEvent::Frame(text) = ev else { return };
                if refused.is_some() {
                    return;
                }
                if !greeted {
                    // The guard's hello first: a guard of another key is
                    // served by a server of its own.
                    let theirs = serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| v.get(HELLO_KEY)?.get("key")?.as_str().map(str::to_owned));
                    greeted = true;
                    if theirs.as_deref() != Some(key.as_str()) {
                        refused = Some(format!(
                            "the guard's share key is {}, this hub's {key}",
                            theirs.as_deref().unwrap_or("(none)")
                        ));
                    }
                    return;
                }
                s.hub.handle_session_line(id, &text);
            });
            if let Some(reason) = refused {
                st.say(&format!("session {}: refused: {reason}", id.0));
                let mut line = serde_json::to_vec(&serde_json::json!({
                    PRIVATE_KEY: {"initialize": null, "reason": reason}
                }))
                .unwrap_or_default();
                line.push(b'\n');
                s.private.insert(id, line);
                s.hub.close_session(id);
                st.pump(&mut s);
                return;
            }
            st.pump(&mut s);
        }
        let mut s = st.lock();
        s.hub.close_session(id);
        s.closing.insert(id);
        st.pump(&mut s);
    });
    let st = Arc::clone(state);
    tokio::spawn(async move {
        loop {
            let (bytes, private, closing) = {
                let mut s = st.lock();
                let out = s.hub.poll_to_session(id).unwrap_or_default();
                // Its private-server answer goes after what was queued before it.
                let private = if out.is_empty() {
                    s.private.remove(&id)
                } else {
                    None
                };
                (out, private, s.closing.contains(&id))
            };
            if !bytes.is_empty() {
                if write.write_all(&bytes).await.is_err() {
                    break;
                }
                continue;
            }
            if let Some(line) = private {
                let _ = write.write_all(&line).await;
                break;
            }
            if closing {
                break;
            }
            wake.notified().await;
        }
        let _ = write.shutdown().await;
        reader.abort();
        let mut s = st.lock();
        s.hub.close_session(id);
        s.closing.remove(&id);
        s.wake.remove(&id);
        st.pump(&mut s);
        drop(s);
        st.changed.notify_one();
    });
}
