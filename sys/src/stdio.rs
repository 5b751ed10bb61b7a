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
#[derive(Debug)]
pub struct NonBlockingStdio {
    #[cfg(unix)]
    fd: OwnedFd,
    #[cfg(unix)]
    original_flags: rustix::fs::OFlags,
    kind: StdioKind,
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
        let kind = match FileType::from_raw_mode(fstat(fd)?.st_mode) {
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
        let original_flags = fcntl_getfl(&fd)?;
        fcntl_setfl(&fd, original_flags | OFlags::NONBLOCK)?;
        Ok(Some(Self {
            fd,
            original_flags,
            kind,
        }))
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
        // Best effort: the descriptor is shared with whatever holds fd 0/1.
        let _ = rustix::fs::fcntl_setfl(&self.fd, self.original_flags);
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

    #[test]
    fn a_regular_file_is_left_alone() {
        let f = std::fs::File::open("/dev/null").expect("open");
        // A character device, like a terminal: not switched.
        assert!(NonBlockingStdio::from_borrowed(f.as_fd())
            .unwrap()
            .is_none());
    }
}
