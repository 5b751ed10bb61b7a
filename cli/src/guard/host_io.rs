//! The guard's own stdin and stdout, used so that the loop never waits on a
//! write while it could read (G1).
//!
//! When stdout is a pipe or a socket (what an MCP host gives us), it is made
//! non-blocking and written with readiness: a write takes what the pipe
//! accepts now and the loop goes on. Where it cannot be (a terminal, whose
//! file description the shell shares, or a regular file), one writer thread
//! owns the blocking write behind a bounded queue, and reports the bytes that
//! actually went out. Tokio's `Stdout` is never used: its `flush` waits for
//! the whole buffered write, and a write stuck on its blocking thread would
//! also hold up runtime shutdown.
//!
//! stdin gets the same treatment, so no blocking thread sits in `read` while
//! a host keeps stdin open; on a terminal tokio's `Stdin` is used, and
//! `main` shuts the runtime down without waiting for its thread.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(unix)]
use std::os::fd::OwnedFd;

#[cfg(unix)]
use mcp_stdio_sys::{NonBlockingStdio, StdioKind};
#[cfg(unix)]
use tokio::net::{unix::pipe, UnixStream};

use tokio::io::AsyncReadExt;

/// Chunks (whole messages) that may wait for the writer thread. Bytes are
/// bounded by the proxy's `max_buffered`, which counts them until written.
const WRITER_QUEUE_CHUNKS: usize = 64;

/// Our stdin and stdout switched to non-blocking mode (`mcp_stdio_sys`),
/// kept until [`restore_stdio`]: dropping them puts the original flags back.
#[cfg(unix)]
static SWITCHED: std::sync::Mutex<Vec<NonBlockingStdio>> = std::sync::Mutex::new(Vec::new());

/// Puts stdin and stdout back the way they were (blocking), for whoever
/// shares their file descriptions after we exit. Call after the runtime is
/// shut down.
pub(crate) fn restore_stdio() {
    #[cfg(unix)]
    SWITCHED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
}

/// What kind of stream one of our standard fds is.
#[cfg(unix)]
enum StreamKind {
    Fifo(OwnedFd),
    UnixSocket(std::os::unix::net::UnixStream),
    Other,
}

/// A non-blocking duplicate of stdin or stdout when it is a pipe or a Unix
/// socket (the fds an MCP host gives us), which can be made non-blocking
/// without touching anyone's terminal; `Other` for a terminal, a file,
/// another socket or a closed fd.
#[cfg(unix)]
fn stream_kind(switched: io::Result<Option<NonBlockingStdio>>) -> StreamKind {
    let Ok(Some(stdio)) = switched else {
        return StreamKind::Other;
    };
    let Ok(fd) = stdio.try_clone_fd() else {
        return StreamKind::Other;
    };
    let kind = match stdio.kind() {
        StdioKind::Pipe => StreamKind::Fifo(fd),
        _ => StreamKind::UnixSocket(std::os::unix::net::UnixStream::from(fd)),
    };
    SWITCHED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(stdio);
    kind
}

/// The host's side of our stdin.
pub(crate) enum HostInput {
    /// A non-blocking pipe, read with readiness.
    #[cfg(unix)]
    Pipe(pipe::Receiver),
    /// A non-blocking Unix socket, read with readiness.
    #[cfg(unix)]
    Socket(UnixStream),
    /// A terminal or file: tokio's blocking-thread stdin.
    Std(tokio::io::Stdin),
}

impl HostInput {
    /// Our stdin, in the best form it allows. Must run inside the runtime.
    pub(crate) fn open() -> Self {
        #[cfg(unix)]
        {
            let opened = match stream_kind(NonBlockingStdio::stdin()) {
                StreamKind::Fifo(fd) => pipe::Receiver::from_owned_fd(fd).map(Self::Pipe),
                StreamKind::UnixSocket(s) => UnixStream::from_std(s).map(Self::Socket),
                StreamKind::Other => Ok(Self::Std(tokio::io::stdin())),
            };
            match opened {
                Ok(input) => {
                    tracing::debug!(kind = input.kind(), "stdin");
                    return input;
                }
                Err(e) => tracing::debug!(error = %e, "stdin: no readiness; using a thread"),
            }
        }
        Self::Std(tokio::io::stdin())
    }

    fn kind(&self) -> &'static str {
        match self {
            #[cfg(unix)]
            Self::Pipe(_) => "non-blocking pipe",
            #[cfg(unix)]
            Self::Socket(_) => "non-blocking unix socket",
            Self::Std(_) => "blocking, on tokio's stdin thread",
        }
    }

    /// Reads what is there (0 at end of input). Cancel-safe.
    pub(crate) async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            #[cfg(unix)]
            Self::Pipe(p) => p.read(buf).await,
            #[cfg(unix)]
            Self::Socket(s) => s.read(buf).await,
            Self::Std(s) => s.read(buf).await,
        }
    }
}

/// The host's side of our stdout.
pub(crate) enum HostOutput {
    /// A non-blocking pipe or Unix socket, written with readiness.
    #[cfg(unix)]
    Ready {
        /// The stream.
        stream: ReadyStream,
        /// Bytes written and not yet reported.
        written: usize,
    },
    /// A terminal or file: a writer thread behind a bounded queue.
    Thread(ThreadWriter),
}

/// A stdout that tokio writes with readiness.
#[cfg(unix)]
pub(crate) enum ReadyStream {
    /// A pipe.
    Pipe(pipe::Sender),
    /// A Unix socket (Node-based hosts give their children socket pairs).
    Socket(UnixStream),
}

#[cfg(unix)]
impl ReadyStream {
    fn kind(&self) -> &'static str {
        match self {
            Self::Pipe(_) => "pipe",
            Self::Socket(_) => "unix socket",
        }
    }

    /// One write of what the stream accepts now, waiting only for readiness.
    async fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let r = match self {
                Self::Pipe(p) => {
                    p.writable().await?;
                    p.try_write(buf)
                }
                Self::Socket(s) => {
                    s.writable().await?;
                    s.try_write(buf)
                }
            };
            match r {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                r => return r,
            }
        }
    }
}

impl HostOutput {
    /// Our stdout, in the best form it allows. Must run inside the runtime.
    pub(crate) fn open() -> Self {
        #[cfg(unix)]
        {
            let opened = match stream_kind(NonBlockingStdio::stdout()) {
                StreamKind::Fifo(fd) => pipe::Sender::from_owned_fd(fd).map(ReadyStream::Pipe),
                StreamKind::UnixSocket(s) => UnixStream::from_std(s).map(ReadyStream::Socket),
                StreamKind::Other => Err(io::ErrorKind::Unsupported.into()),
            };
            match opened {
                Ok(stream) => {
                    tracing::debug!(kind = stream.kind(), "stdout: written with readiness");
                    return Self::Ready { stream, written: 0 };
                }
                Err(e) => tracing::debug!(error = %e, "stdout: no readiness; using a thread"),
            }
        }
        tracing::debug!("stdout: a writer thread owns the blocking write");
        Self::Thread(ThreadWriter::spawn())
    }

    /// Takes bytes from the front of `buf`: writes what the pipe accepts now,
    /// or queues them for the writer thread. Waits only for room, never for
    /// a write to finish; cancel-safe (nothing is taken unless it returns).
    pub(crate) async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            #[cfg(unix)]
            Self::Ready { stream, written } => {
                let n = stream.write_some(buf).await?;
                *written += n;
                Ok(n)
            }
            Self::Thread(t) => t.queue(buf).await,
        }
    }

    /// Bytes that reached the fd since the last call.
    pub(crate) fn take_written(&mut self) -> usize {
        match self {
            #[cfg(unix)]
            Self::Ready { written, .. } => std::mem::take(written),
            Self::Thread(t) => t.take_written(),
        }
    }

    /// True while bytes taken by [`write`](Self::write) have not reached the fd.
    pub(crate) fn in_flight(&self) -> bool {
        match self {
            #[cfg(unix)]
            Self::Ready { .. } => false,
            Self::Thread(t) => t.in_flight(),
        }
    }

    /// A future that completes when the writer thread made progress or
    /// failed; it never completes for a readiness stream (whose progress
    /// [`write`](Self::write) reports) or while nothing is in flight. It owns
    /// what it needs, so it can wait beside a `write` on the same output.
    pub(crate) fn progress(&self) -> impl std::future::Future<Output = io::Result<()>> + 'static {
        let shared = match self {
            Self::Thread(t) if t.in_flight() => Some(t.shared.clone()),
            _ => None,
        };
        async move {
            let Some(shared) = shared else {
                return std::future::pending().await;
            };
            shared.wake.notified().await;
            if shared.failed.load(Ordering::Acquire) {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            Ok(())
        }
    }
}

/// What the writer thread shares with the loop.
#[derive(Default)]
struct Shared {
    written: AtomicU64,
    failed: AtomicBool,
    wake: tokio::sync::Notify,
}

/// One thread owning the blocking write, fed by a bounded queue.
pub(crate) struct ThreadWriter {
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
    shared: Arc<Shared>,
    taken: u64,
    reported: u64,
}

impl ThreadWriter {
    fn spawn() -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(WRITER_QUEUE_CHUNKS);
        let shared = Arc::new(Shared::default());
        let seen = shared.clone();
        // Detached on purpose: a write blocked forever must not keep the guard
        // from exiting (the process ends when `main` returns).
        let spawned = std::thread::Builder::new()
            .name("mcp-stdio-stdout".into())
            .spawn(move || {
                use std::io::Write;
                // Not `io::stdout()`: std takes EBADF on stdout for success,
                // and the guard would count messages written that went nowhere.
                let mut out = match mcp_stdio_sys::stdout_file() {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::debug!(error = %e, "host stdout cannot be written");
                        seen.failed.store(true, Ordering::Release);
                        seen.wake.notify_one();
                        return;
                    }
                };
                while let Some(chunk) = rx.blocking_recv() {
                    let r = out.write_all(&chunk).and_then(|()| out.flush());
                    match r {
                        Ok(()) => {
                            seen.written
                                .fetch_add(chunk.len() as u64, Ordering::Release);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "host stdout write failed");
                            seen.failed.store(true, Ordering::Release);
                        }
                    }
                    seen.wake.notify_one();
                    if seen.failed.load(Ordering::Acquire) {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            // No thread: the receiver is gone and the first write fails.
            tracing::error!(error = %e, "cannot start the stdout writer thread");
            shared.failed.store(true, Ordering::Release);
        }
        Self {
            tx,
            shared,
            taken: 0,
            reported: 0,
        }
    }

    async fn queue(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let permit = self
            .tx
            .reserve()
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        permit.send(buf.to_vec());
        self.taken += buf.len() as u64;
        Ok(buf.len())
    }

    fn take_written(&mut self) -> usize {
        let now = self.shared.written.load(Ordering::Acquire);
        let delta = now.saturating_sub(self.reported);
        self.reported = now;
        usize::try_from(delta).unwrap_or(usize::MAX)
    }

    fn in_flight(&self) -> bool {
        self.shared.written.load(Ordering::Acquire) < self.taken
    }
}
