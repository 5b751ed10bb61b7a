//! The guard's status socket (F3): `<runtime folder>/<guard pid>.sock`, served
//! by the guard's own loop on the driver's pieces (a `Listener`, a `Pipe`
//! per client). Every decision is the core's `StatusPort`'s (who is served,
//! what is asked, who is dropped: G1); this side accepts, reads, writes
//! what a socket takes now, closes, and measures the server's group in
//! `/proc` when the status is asked for.

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::task::{Context, Poll};
use std::time::Instant;

use mcp_stdio_core::StatusPortCounters;
use mcp_stdio_core::{Admission, GuardSession, ProcessStats, StatusIdentity, StatusOutput};
use mcp_stdio_core::{StatusConn, StatusPort, StatusRequest, MAX_STATUS_REQUEST};
use mcp_stdio_tokio::driver::{Listener, Pipe};
use mcp_stdio_tokio::runtime::Tokio;

/// Connections accepted per turn (more wait for the next turn).
const ACCEPTS_PER_TURN: usize = 8;

/// Reads of one client per turn (1 KiB each, the request's bound).
const READS_PER_CLIENT: usize = 4;

/// Bytes a closing client may have sent unread that are read and dropped.
const UNREAD_DISCARDED: usize = 64 * 1024;

/// The status socket and its clients.
pub(super) struct Announced {
    rt: Tokio,
    listener: Listener<Tokio>,
    path: PathBuf,
    port: StatusPort,
    clients: Vec<(StatusConn, Pipe<Tokio>)>,
    identity: StatusIdentity,
    uid: u32,
    buf: Vec<u8>,
}

impl Drop for Announced {
    fn drop(&mut self) {
        // Gone with the guard: `ps` lists live guards only.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Opens the status socket; `None` (with one line on stderr saying why)
/// when the runtime folder or the socket cannot be had: the guard then runs
/// unannounced.
pub(super) fn announce(rt: &Tokio, identity: StatusIdentity) -> Option<Announced> {
    let opened = (|| {
        let dir = mcp_stdio_sys::runtime_dir::runtime_dir().map_err(|e| e.to_string())?;
        let path = dir.join(format!("{}.sock", identity.guard_pid));
        let listener = mcp_stdio_sys::runtime_dir::bind_listener(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let listener = Listener::new(rt, listener).map_err(|e| e.to_string())?;
        Ok::<_, String>((listener, path))
    })();
    match opened {
        Ok((listener, path)) => {
            tracing::debug!(path = %path.display(), "status socket");
            Some(Announced {
                rt: rt.clone(),
                listener,
                path,
                port: StatusPort::new(),
                clients: Vec::new(),
                identity,
                uid: rustix::process::geteuid().as_raw(),
                buf: vec![0; MAX_STATUS_REQUEST],
            })
        }
        Err(e) => {
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: not announced (`mcp-stdio ps` will not list it): {e}"
            ));
            None
        }
    }
}

/// What a status socket tells: a guard's session, or a hub.
pub(super) trait StatusSource {
    /// The status document (JSON, schema `STATUS_SCHEMA`).
    fn status(
        &mut self,
        identity: &StatusIdentity,
        process: ProcessStats,
        port: StatusPortCounters,
    ) -> Vec<u8>;
    /// The server's newest stderr, at most `bytes`.
    fn stderr_newest(&self, bytes: usize) -> String;
    /// Whether a client follows the logs (the log copy runs while one does).
    fn set_log_copy(&mut self, on: bool);
}

/// A guard's session (and what `--otel` did) as a status source.
pub(super) struct GuardSource<'a> {
    pub(super) session: &'a mut GuardSession,
    pub(super) otel: Option<&'a super::otel::Otel>,
}

impl StatusSource for GuardSource<'_> {
    fn status(
        &mut self,
        identity: &StatusIdentity,
        process: ProcessStats,
        port: StatusPortCounters,
    ) -> Vec<u8> {
        serde_json::to_vec(&StatusAnswer {
            status: self.session.status(identity, process, port),
            otel: self.otel.map(super::otel::Otel::summary),
        })
        .unwrap_or_default()
    }

    fn stderr_newest(&self, bytes: usize) -> String {
        self.session.stderr_newest(bytes)
    }

    fn set_log_copy(&mut self, on: bool) {
        self.session.set_log_copy(on);
    }
}

/// The status as the socket gives it: the core's, and what `--otel` did.
#[derive(serde::Serialize)]
struct StatusAnswer {
    #[serde(flatten)]
    status: mcp_stdio_core::GuardStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    otel: Option<super::otel::OtelSummary>,
}

impl Announced {
    /// Accepts, reads, answers and writes what the sockets take now; never
    /// waits. `true` if anything moved.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        now: Instant,
        source: &mut dyn StatusSource,
        server_pid: u32,
    ) -> bool {
        let mut busy = false;
        for _ in 0..ACCEPTS_PER_TURN {
            let Poll::Ready(accepted) = self.listener.poll_accept(cx) else {
                break;
            };
            busy = true;
            let Ok(fd) = accepted else { continue };
            let peer = peer_uid(&fd, self.uid);
            if let Admission::Served(id) = self.port.admit(now, peer, self.uid) {
                match Pipe::new(&self.rt, fd) {
                    Ok(pipe) => self.clients.push((id, pipe)),
                    // Not in the reactor: the port hears it as a closed client.
                    Err(e) => self.port.handle_read(id, Err(e), &[]),
                }
            }
        }
        for (id, pipe) in &self.clients {
            self.port.handle_writable(*id);
            // Bounded per turn: a client that keeps sending (a follower's
            // bytes are ignored) cannot hold the loop.
            for _ in 0..READS_PER_CLIENT {
                if !self.port.wants_read(*id) {
                    break;
                }
                let Poll::Ready(r) = pipe.poll_read(cx, &mut self.buf) else {
                    break;
                };
                busy = true;
                self.port.handle_read(*id, r, &self.buf);
            }
        }
        while let Some(output) = self.port.poll_output() {
            match output {
                StatusOutput::Request(id, request) => {
                    let answer = match request {
                        StatusRequest::Logs { bytes, .. } => {
                            serde_json::to_vec(&serde_json::json!({
                                "schema": mcp_stdio_core::STATUS_SCHEMA,
                                "name": self.identity.name,
                                "guard_pid": self.identity.guard_pid,
                                "stderr": source.stderr_newest(bytes),
                            }))
                            .unwrap_or_default()
                        }
                        _ => {
                            let counters = self.port.counters();
                            let process = group_usage(server_pid);
                            source.status(&self.identity, process, counters)
                        }
                    };
                    self.port.reply(id, answer);
                }
                StatusOutput::Write(id, bytes) => {
                    let Some((_, pipe)) = self.clients.iter().find(|(c, _)| *c == id) else {
                        break;
                    };
                    let r = match pipe.poll_write(cx, bytes) {
                        Poll::Ready(r) => r,
                        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                    };
                    busy |= r.is_ok();
                    self.port.handle_written(id, r);
                }
                StatusOutput::Close(id) => {
                    if let Some(i) = self.clients.iter().position(|(c, _)| *c == id) {
                        let (_, pipe) = self.clients.swap_remove(i);
                        discard_unread(cx, &pipe, &mut self.buf);
                    }
                }
            }
        }
        // The log copy runs while someone follows (and with --log-file).
        source.set_log_copy(self.port.followers() > 0);
        busy
    }

    /// The log copy's lines for the clients following the logs; `true` if
    /// any follows (their bytes are written on the loop's next turn).
    pub(super) fn follow(&mut self, lines: &[u8]) -> bool {
        self.port.follow(lines);
        self.port.followers() > 0
    }

    /// The earliest client deadline.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.port.poll_timeout()
    }

    /// Drops the clients past their deadline.
    pub(super) fn handle_timeout(&mut self, now: Instant) {
        self.port.handle_timeout(now);
    }
}

/// Reads what a client sent past its request (at most
/// [`UNREAD_DISCARDED`] bytes, what is there now), so that closing does not
/// reset the connection before the client read its answer.
fn discard_unread(cx: &mut Context<'_>, pipe: &Pipe<Tokio>, buf: &mut [u8]) {
    let mut left = UNREAD_DISCARDED;
    while left > 0 {
        match pipe.poll_read(cx, buf) {
            Poll::Ready(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
}

/// The peer's uid; where the kernel cannot say (not Linux), the folder's
/// and the socket's modes (0700, 0600) are what keeps others out.
fn peer_uid(fd: &std::os::fd::OwnedFd, own: u32) -> io::Result<u32> {
    match mcp_stdio_sys::runtime_dir::peer_uid(fd.as_fd()) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(own),
        r => r,
    }
}

/// The server's process group in `/proc`: members, resident memory, CPU
/// time (Linux; `pid` alone elsewhere).
fn group_usage(pgid: u32) -> ProcessStats {
    let mut stats = ProcessStats {
        pid: Some(pgid),
        ..ProcessStats::default()
    };
    #[cfg(target_os = "linux")]
    {
        let Some(procs) = crate::check::procs::proc_stats() else {
            return stats;
        };
        let page = rustix::param::page_size() as u64;
        let tick = rustix::param::clock_ticks_per_second().max(1);
        let (mut n, mut rss, mut ticks) = (0u32, 0u64, 0u64);
        for (_, stat) in procs {
            // The fields after the name (which may hold spaces and parentheses).
            let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 1..)) else {
                continue;
            };
            let f: Vec<&str> = rest.split_ascii_whitespace().collect();
            let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            if field(2) != Some(u64::from(pgid)) || matches!(f.first(), Some(&"Z" | &"X")) {
                continue;
            }
            n += 1;
            ticks += field(11).unwrap_or(0) + field(12).unwrap_or(0);
            rss += field(21).unwrap_or(0) * page;
        }
        stats.processes = Some(n);
        stats.rss_bytes = Some(rss);
        stats.cpu_ms = Some(ticks * 1000 / tick);
    }
    stats
}
