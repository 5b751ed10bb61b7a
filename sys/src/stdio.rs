//! This process's stdin and stdout as non-blocking descriptors, for the
//! adapters' `serve` loops: written as the pipe accepts bytes, read when it
//! has some, so a client that stops reading never stalls the loop (G1).
//!
//! Only pipes and Unix sockets are switched to non-blocking mode: a terminal or a
//! file shares its open file description with other processes (the shell),
//! and a regular file cannot be polled. For those, [`NonBlockingStdio::stdin`]
//! and [`NonBlockingStdio::stdout`] answer `None` and the adapter keeps its
//! blocking path (a thread that owns the blocking call behind a bounded queue).

use std::io;
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A duplicate of this process's stdin or stdout in non-blocking mode. The
/// descriptor's original flags are put back on drop, so whatever reads or
/// writes it after `serve` (or a child that inherited it) sees what it saw
/// before.
///
/// Stdin and stdout may be one open file description (a host that gives its
/// child one socket for both, as `socat EXEC:` does): the flags are the
/// description's, not the descriptor's. So a stream switched twice is
/// restored only when the last of its `NonBlockingStdio`s is dropped, to
/// what it was before the first: closing stdin never turns a stdout that
/// is still being written back to blocking.
#[derive(Debug)]
pub struct NonBlockingStdio {
    #[cfg(unix)]
    fd: OwnedFd,
    /// The stream, as `SWITCHED` knows it.
    #[cfg(unix)]
    stream: StreamId,
    kind: StdioKind,
}

/// A pipe or socket, by device, inode and access mode: two standard
/// descriptors that agree on all three are taken to share their flags (a
/// pipe's read and write ends are two descriptions, told apart by mode).
#[cfg(unix)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StreamId {
    dev: u64,
    ino: u64,
    mode: rustix::fs::OFlags,
}

/// A stream switched to non-blocking mode and not yet restored.
#[cfg(unix)]
#[derive(Debug)]
struct Switched {
    stream: StreamId,
    /// `NonBlockingStdio`s alive for it.
    holders: usize,
    /// Each switch's own descriptor and the flags it found, in the order
    /// they were taken; put back in reverse once `holders` is 0.
    originals: Vec<(OwnedFd, rustix::fs::OFlags)>,
}

/// The streams switched now. Its limit is the number of `NonBlockingStdio`s
/// alive (an adapter holds at most one per standard stream), and entries
/// leave as their last holder drops.
#[cfg(unix)]
static SWITCHED: std::sync::Mutex<Vec<Switched>> = std::sync::Mutex::new(Vec::new());

#[cfg(unix)]
fn switched() -> std::sync::MutexGuard<'static, Vec<Switched>> {
    SWITCHED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a [`NonBlockingStdio`] is, for an adapter that wraps it in its
/// runtime's pipe or socket type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StdioKind {
    /// A pipe (anonymous or FIFO).
    Pipe,
    /// A Unix stream socket (some hosts use a socket pair).
    Socket,
}

/// This process's stdout as a file of its own (a duplicate of its
/// descriptor), for the blocking write path of `serve` and the guard.
///
/// Not `std::io::Stdout`: std takes `EBADF` on stdout for success, so a
/// closed or read-only stdout would swallow every message while the loop
/// counts it written (G12: no invented facts). A `File` reports the error:
/// at once here for a closed stdout, at the first write for a read-only one.
///
/// # Errors
/// Stdout is closed, or its descriptor cannot be duplicated.
pub fn stdout_file() -> io::Result<std::fs::File> {
    #[cfg(unix)]
    let owned = io::stdout().as_fd().try_clone_to_owned();
    #[cfg(windows)]
    let owned = {
        use std::os::windows::io::AsHandle;
        io::stdout().as_handle().try_clone_to_owned()
    };
    owned
        .map(std::fs::File::from)
        .map_err(|e| io::Error::new(e.kind(), format!("stdout cannot be written: {e}")))
}

#[cfg(unix)]
impl NonBlockingStdio {
    /// Stdin, when it is a pipe or a socket; `None` otherwise.
    pub fn stdin() -> io::Result<Option<Self>> {
        Self::from_borrowed(io::stdin().as_fd())
    }

    /// Stdout, when it is a pipe or a socket; `None` otherwise.
    pub fn stdout() -> io::Result<Option<Self>> {
        Self::from_borrowed(io::stdout().as_fd())
    }

    fn from_borrowed(fd: BorrowedFd<'_>) -> io::Result<Option<Self>> {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, fstat, FileType, OFlags};
        let stat = fstat(fd)?;
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Fifo => StdioKind::Pipe,
            FileType::Socket => StdioKind::Socket,
            _ => return Ok(None),
        };
        let fd = fd.try_clone_to_owned()?;
        if kind == StdioKind::Socket {
            // A Unix stream socket (Node-based hosts give their children
            // socket pairs); `getsockname` parses only an AF_UNIX address, so
            // this also checks the family. Anything else keeps the blocking path.
            let probe = std::os::unix::net::UnixStream::from(fd.try_clone()?);
            if probe.local_addr().is_err() {
                return Ok(None);
            }
        }
        let kept = fd.try_clone()?;
        let mut all = switched();
        let original_flags = fcntl_getfl(&fd)?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let stream = StreamId {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            mode: original_flags & OFlags::RWMODE,
        };
        fcntl_setfl(&fd, original_flags | OFlags::NONBLOCK)?;
        match all.iter_mut().find(|s| s.stream == stream) {
            Some(s) => {
                s.holders += 1;
                s.originals.push((kept, original_flags));
            }
            None => all.push(Switched {
                stream,
                holders: 1,
                originals: vec![(kept, original_flags)],
            }),
        }
        Ok(Some(Self { fd, stream, kind }))
    }

    /// A pipe or a socket.
    pub fn kind(&self) -> StdioKind {
        self.kind
    }

    /// Another descriptor for the same pipe or socket, already non-blocking,
    /// for a runtime type that takes ownership (tokio's pipe types, a
    /// `File` under async-io). Keep `self` alive longer: its drop restores
    /// the flags.
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }
}

#[cfg(not(unix))]
impl NonBlockingStdio {
    /// Not available off Unix: always `None`.
    pub fn stdin() -> io::Result<Option<Self>> {
        Ok(None)
    }

    /// Not available off Unix: always `None`.
    pub fn stdout() -> io::Result<Option<Self>> {
        Ok(None)
    }
}

#[cfg(unix)]
impl Drop for NonBlockingStdio {
    fn drop(&mut self) {
        let mut all = switched();
        let Some(at) = all.iter().position(|s| s.stream == self.stream) else {
            return;
        };
        all[at].holders -= 1;
        if all[at].holders > 0 {
            // Another holder still uses the stream (maybe the same description).
            return;
        }
        let done = all.swap_remove(at);
        // Best effort: the description is shared with whatever holds fd 0/1.
        for (fd, flags) in done.originals.iter().rev() {
            let _ = rustix::fs::fcntl_setfl(fd, *flags);
        }
    }
}

#[cfg(unix)]
impl AsFd for NonBlockingStdio {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(unix)]
impl std::os::fd::AsRawFd for NonBlockingStdio {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }
}

/// Reads return `WouldBlock` when nothing is waiting.
#[cfg(unix)]
impl io::Read for &NonBlockingStdio {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::io::read(&self.fd, buf)?)
    }
}

/// Writes return `WouldBlock` when the pipe is full; short writes are normal.
#[cfg(unix)]
impl io::Write for &NonBlockingStdio {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(rustix::io::write(&self.fd, buf)?)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(unix)]
impl io::Read for NonBlockingStdio {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

#[cfg(unix)]
impl io::Write for NonBlockingStdio {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn g1_a_full_pipe_answers_would_block_and_flags_come_back() {
        let (r, w) = rustix::pipe::pipe().expect("pipe");
        let before = rustix::fs::fcntl_getfl(&w).expect("flags");
        let wr = NonBlockingStdio::from_borrowed(w.as_fd())
            .expect("fstat")
            .expect("a pipe qualifies");
        let chunk = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        let err = loop {
            match (&wr).write(&chunk) {
                Ok(n) => total += n,
                Err(e) => break e,
            }
            assert!(total < 64 * 1024 * 1024, "the pipe never filled");
        };
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let rd = NonBlockingStdio::from_borrowed(r.as_fd()).unwrap().unwrap();
        let mut buf = vec![0u8; 1024];
        assert_eq!((&rd).read(&mut buf).expect("data waits"), 1024);
        drop(wr);
        assert_eq!(rustix::fs::fcntl_getfl(&w).expect("flags"), before);
    }

    #[test]
    fn a_unix_socket_pair_qualifies() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let s = NonBlockingStdio::from_borrowed(a.as_fd()).unwrap().unwrap();
        assert_eq!(s.kind(), StdioKind::Socket);
        let mut buf = [0u8; 8];
        assert_eq!(
            (&s).read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    /// One socket as both stdin and stdout: dropping the first switch leaves
    /// the stream non-blocking for the second; dropping the second puts back
    /// what was there before the first, whichever goes first.
    #[test]
    fn g1_one_description_switched_twice_is_restored_after_the_last() {
        let nonblocking = |fd: BorrowedFd<'_>| {
            rustix::fs::fcntl_getfl(fd)
                .expect("flags")
                .contains(rustix::fs::OFlags::NONBLOCK)
        };
        for stdin_goes_first in [true, false] {
            let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
            assert!(!nonblocking(a.as_fd()));
            let stdin = NonBlockingStdio::from_borrowed(a.as_fd()).unwrap().unwrap();
            let stdout = NonBlockingStdio::from_borrowed(a.as_fd()).unwrap().unwrap();
            let (first, second) = if stdin_goes_first {
                (stdin, stdout)
            } else {
                (stdout, stdin)
            };
            drop(first);
            assert!(nonblocking(a.as_fd()), "still written by the other");
            drop(second);
            assert!(!nonblocking(a.as_fd()), "back to what the host gave");
        }
    }

    #[test]
    fn a_regular_file_is_left_alone() {
        let f = std::fs::File::open("/dev/null").expect("open");
        // A character device, like a terminal: not switched.
        assert!(NonBlockingStdio::from_borrowed(f.as_fd())
            .unwrap()
            .is_none());
    }
}
