//! This process's stdin and stdout for [`serve`](crate::serve): pipes and
//! sockets non-blocking in the runtime's reactor (a write never waits for
//! the client to read, G1; their flags come back on drop); anything else (a
//! terminal, a file, which cannot be polled) through a thread that owns the
//! blocking call behind a capacity-1 channel ([`ThreadReader`],
//! [`ThreadWriter`], which serve any blocking reader or writer the same way).

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use async_channel::{Receiver, Sender};
use futures_lite::Stream;
use mcp_stdio_core::ReadResult;
use mcp_stdio_sys::NonBlockingStdio;

use crate::io::{Sink, Source};
use crate::pipe::Pipe;
use crate::runtime::Runtime;

/// Bytes one blocking read of stdin takes.
const BLOCKING_READ: usize = 64 * 1024;

/// Stdin, as `serve` reads it.
pub struct Stdin<R: Runtime> {
    kind: InputKind<R>,
    /// Restores the descriptor's flags on drop, after `kind` is gone.
    _flags: Option<NonBlockingStdio>,
}

enum InputKind<R: Runtime> {
    Pipe(Pipe<R>),
    Thread(ThreadReader),
}

/// A blocking reader as a [`Source`]: a thread of its own owns the blocking
/// `read` (64 KiB at a time) and hands each chunk over a channel of
/// capacity 1. The thread stays blocked in `read` until the next chunk or
/// the end, also after the reader is dropped (as any reader of a terminal
/// would be).
pub struct ThreadReader {
    /// Chunks from the reader thread, and what is left of the last one.
    chunks: Pin<Box<Receiver<io::Result<Vec<u8>>>>>,
    rest: Vec<u8>,
    at: usize,
}

impl fmt::Debug for ThreadReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadReader").finish_non_exhaustive()
    }
}

impl ThreadReader {
    /// Starts the thread (named `name`) that reads `reader`.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn new<Rd: Read + Send + 'static>(mut reader: Rd, name: &str) -> io::Result<Self> {
        let (tx, rx) = async_channel::bounded(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                let mut chunk = vec![0; BLOCKING_READ];
                let r = reader.read(&mut chunk);
                // The core's rule: an interrupted read is read again; the
                // machine takes what the read came to, the thread only stops
                // at what ends the stream.
                let end = ReadResult::ends_stream(&r);
                let r = r.map(|n| {
                    chunk.truncate(n);
                    chunk
                });
                if tx.send_blocking(r).is_err() || end {
                    return;
                }
            })?;
        Ok(Self {
            chunks: Box::pin(rx),
            rest: Vec::new(),
            at: 0,
        })
    }
}

impl Source for ThreadReader {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        if self.at == self.rest.len() {
            match self.chunks.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                // The thread ended after the end or an error.
                Poll::Ready(None) => return Poll::Ready(Ok(0)),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(chunk))) => {
                    self.rest = chunk;
                    self.at = 0;
                }
            }
        }
        let n = buf.len().min(self.rest.len() - self.at);
        buf[..n].copy_from_slice(&self.rest[self.at..self.at + n]);
        self.at += n;
        Poll::Ready(Ok(n))
    }
}

/// Stdout, as `serve` writes it.
pub struct Stdout<R: Runtime> {
    kind: OutputKind<R>,
    /// Restores the descriptor's flags on drop, after `kind` is gone.
    _flags: Option<NonBlockingStdio>,
}

enum OutputKind<R: Runtime> {
    Pipe(Pipe<R>),
    Thread(ThreadWriter),
}

impl<R: Runtime> fmt::Debug for Stdin<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            InputKind::Pipe(_) => "Stdin(pipe)",
            InputKind::Thread { .. } => "Stdin(thread)",
        })
    }
}

impl<R: Runtime> fmt::Debug for Stdout<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            OutputKind::Pipe(_) => "Stdout(pipe)",
            OutputKind::Thread(_) => "Stdout(thread)",
        })
    }
}

impl<R: Runtime> Stdin<R> {
    /// This process's stdin, non-blocking when it is a pipe or a socket.
    ///
    /// # Errors
    /// Duplicating the descriptor, setting its flags or starting the thread failed.
    pub fn new(rt: &R) -> io::Result<Self> {
        if let Some(flags) = NonBlockingStdio::stdin()? {
            return Ok(Self {
                kind: InputKind::Pipe(Pipe::new(rt, flags.try_clone_fd()?)?),
                _flags: Some(flags),
            });
        }
        let file = File::from(std::os::fd::AsFd::as_fd(&io::stdin()).try_clone_to_owned()?);
        Ok(Self {
            kind: InputKind::Thread(ThreadReader::new(file, "mcp-stdio-stdin")?),
            _flags: None,
        })
    }
}

impl<R: Runtime> Source for Stdin<R> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match &mut self.kind {
            InputKind::Pipe(p) => p.poll_read(cx, buf),
            InputKind::Thread(t) => t.poll_read(cx, buf),
        }
    }
}

impl<R: Runtime> Stdout<R> {
    /// This process's stdout, non-blocking when it is a pipe or a socket.
    ///
    /// # Errors
    /// Duplicating the descriptor, setting its flags or starting the thread failed.
    pub fn new(rt: &R) -> io::Result<Self> {
        if let Some(flags) = NonBlockingStdio::stdout()? {
            return Ok(Self {
                kind: OutputKind::Pipe(Pipe::new(rt, flags.try_clone_fd()?)?),
                _flags: Some(flags),
            });
        }
        // Not `std::io::Stdout`: it takes EBADF for success.
        let file = mcp_stdio_sys::stdout_file()?;
        Ok(Self {
            kind: OutputKind::Thread(ThreadWriter::new(file, "mcp-stdio-stdout")?),
            _flags: None,
        })
    }
}

impl<R: Runtime> Sink for Stdout<R> {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.kind {
            OutputKind::Pipe(p) => p.poll_write(cx, bytes),
            OutputKind::Thread(t) => t.poll_write(cx, bytes),
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.kind {
            OutputKind::Pipe(_) => Poll::Ready(Ok(())),
            OutputKind::Thread(t) => t.poll_flush(cx),
        }
    }
}

/// What the writer thread is asked to do.
enum Job {
    Write(Vec<u8>),
    /// Answered once every earlier write is out (or failed).
    Flush(Sender<io::Result<()>>),
}

type Handover = Pin<Box<dyn Future<Output = Result<(), async_channel::SendError<Job>>> + Send>>;

/// A blocking writer as a [`Sink`]: a thread of its own owns the blocking
/// writes; bytes are accepted once handed over (at most one job in the
/// channel and one in flight), and a flush answers when the thread has
/// written them. A writer the client never reads leaves the thread blocked,
/// never the loop (G1).
pub struct ThreadWriter {
    jobs: Sender<Job>,
    /// The job being handed over while the channel is full.
    handover: Option<Handover>,
    flushed: Option<Pin<Box<Receiver<io::Result<()>>>>>,
}

impl fmt::Debug for ThreadWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadWriter").finish_non_exhaustive()
    }
}

impl ThreadWriter {
    /// Starts the thread (named `name`) that writes to `file`.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn new<W: Write + Send + 'static>(mut file: W, name: &str) -> io::Result<Self> {
        let (jobs, rx) = async_channel::bounded::<Job>(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // The first failure, answered to every flush after it.
                let mut failed: Option<io::Error> = None;
                while let Ok(job) = rx.recv_blocking() {
                    match job {
                        Job::Write(bytes) if failed.is_none() => {
                            failed = file.write_all(&bytes).err();
                        }
                        Job::Write(_) => {}
                        Job::Flush(answer) => {
                            let r = match &failed {
                                Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
                                None => file.flush(),
                            };
                            let _ = answer.try_send(r);
                        }
                    }
                }
            })?;
        Ok(Self {
            jobs,
            handover: None,
            flushed: None,
        })
    }

    /// Finishes the handover in flight, if any.
    fn poll_handover(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(h) = self.handover.as_mut() {
            let r = std::task::ready!(h.as_mut().poll(cx));
            self.handover = None;
            if r.is_err() {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    fn hand_over(&mut self, cx: &mut Context<'_>, job: Job) {
        let jobs = self.jobs.clone();
        let mut h: Handover = Box::pin(async move { jobs.send(job).await });
        // Polled once now, so the waker is registered if the channel is full.
        if h.as_mut().poll(cx).is_pending() {
            self.handover = Some(h);
        }
    }
}

impl Sink for ThreadWriter {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_handover(cx))?;
        self.hand_over(cx, Job::Write(bytes.to_vec()));
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_handover(cx))?;
        if self.flushed.is_none() {
            let (tx, rx) = async_channel::bounded(1);
            self.hand_over(cx, Job::Flush(tx));
            self.flushed = Some(Box::pin(rx));
            std::task::ready!(self.poll_handover(cx))?;
        }
        let rx = self.flushed.as_mut().expect("set just above");
        let r = std::task::ready!(rx.as_mut().poll_next(cx));
        self.flushed = None;
        Poll::Ready(r.unwrap_or_else(|| Err(io::ErrorKind::BrokenPipe.into())))
    }
}
