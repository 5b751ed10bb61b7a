//! The per-user runtime folder and the status sockets in it: every running
//! `guard` listens on a socket there, and `mcp-stdio ps` finds them.
//!
//! # The rule
//!
//! Only the user who runs the guard may reach its socket. Three layers say so:
//!
//! - the folder ([`runtime_dir`]) is `$XDG_RUNTIME_DIR/mcp-stdio/`, or
//!   `mcp-stdio-<uid>/` in the temporary folder, created `0700`; a folder
//!   found there is used only if it is a real directory (not a symlink),
//!   owned by our effective uid and closed to group and others. Anything
//!   else is refused with a [`RuntimeDirError`] that says what is wrong;
//!   nothing is ever `chmod`ed or removed to make it fit;
//! - the socket ([`bind_listener`]) is `0600`;
//! - the listener compares each connection's [`peer_uid`] with its own
//!   effective uid (Linux) before it answers.
//!
//! A socket whose guard died stays behind; [`probe`] tells it from a live one
//! and [`bind_listener`] replaces it.
//!
//! # Limits
//!
//! - Only the leaf folder is checked. Its parent must not let others rename
//!   entries in it: the temporary folder has the sticky bit, and
//!   `$XDG_RUNTIME_DIR` is the user's own. A `TMPDIR` writable by others
//!   without the sticky bit defeats the check.
//! - Another user may create `mcp-stdio-<uid>` in a shared temporary folder
//!   first: the folder is then refused ([`RuntimeDirError::WrongOwner`]);
//!   the name is not varied to work around it.
//! - [`peer_uid`] is `SO_PEERCRED`, Linux only: elsewhere it returns
//!   `Unsupported` (`getpeereid` needs `libc`, which this crate does not
//!   use), and the folder's and the socket's modes are the only guards.
//! - A socket path holds at most 107 bytes on Linux, 103 on macOS and the
//!   BSDs; a longer one fails to bind (`InvalidInput`).
//! - macOS and the BSDs refuse a connection (`ECONNREFUSED`) when a
//!   listener's backlog is full, so there a busy guard's socket can
//!   [`probe`] as stale (Linux answers `EAGAIN`: live).
//! - Two processes replacing the same stale socket at the same moment can
//!   leave one of them listening on an unlinked file: give each process its
//!   own socket name (its pid).

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The leaf under `$XDG_RUNTIME_DIR`; under the temporary folder it is
/// `mcp-stdio-<uid>`.
pub const DIR_NAME: &str = "mcp-stdio";

/// Why the runtime folder is not used.
#[derive(Debug)]
#[non_exhaustive]
pub enum RuntimeDirError {
    /// Creating or reading the folder failed.
    Io {
        /// The folder.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// Something other than a directory is there.
    NotADirectory {
        /// The folder.
        path: PathBuf,
    },
    /// A symbolic link is there (to anything).
    Symlink {
        /// The folder.
        path: PathBuf,
    },
    /// The folder belongs to another user.
    WrongOwner {
        /// The folder.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        uid: u32,
    },
    /// Group or others have permissions on the folder.
    OpenToOthers {
        /// The folder.
        path: PathBuf,
        /// Its permission bits (`mode & 0o7777`).
        mode: u32,
    },
}

impl RuntimeDirError {
    /// The folder refused.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. }
            | Self::NotADirectory { path }
            | Self::Symlink { path }
            | Self::WrongOwner { path, .. }
            | Self::OpenToOthers { path, .. } => path,
        }
    }
}

impl fmt::Display for RuntimeDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => {
                write!(f, "{}: {source}: not used", path.display())
            }
            Self::NotADirectory { path } => {
                write!(f, "{} is not a directory: not used", path.display())
            }
            Self::Symlink { path } => {
                write!(f, "{} is a symbolic link: not used", path.display())
            }
            Self::WrongOwner { path, owner, uid } => write!(
                f,
                "{} is owned by uid {owner}, not by this user (uid {uid}): not used",
                path.display()
            ),
            Self::OpenToOthers { path, mode } => write!(
                f,
                "{} is open to others (mode {mode:04o}): not used",
                path.display()
            ),
        }
    }
}

impl std::error::Error for RuntimeDirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// This user's runtime folder, created if missing and checked
/// ([`ensure_private_dir`]): `$XDG_RUNTIME_DIR/mcp-stdio/` when
/// `XDG_RUNTIME_DIR` names an absolute, existing directory, else
/// `mcp-stdio-<euid>/` in [`std::env::temp_dir`].
///
/// # Errors
/// The folder cannot be created, or what is there is not private to us.
pub fn runtime_dir() -> Result<PathBuf, RuntimeDirError> {
    runtime_dir_at(
        std::env::var_os("XDG_RUNTIME_DIR")
            .as_deref()
            .map(Path::new),
        &std::env::temp_dir(),
    )
}

/// [`runtime_dir`] with the two bases given instead of read from the
/// environment: `xdg_runtime_dir` if absolute and an existing directory
/// (leaf [`DIR_NAME`]), else `temp_dir` (leaf `mcp-stdio-<euid>`).
///
/// # Errors
/// As [`ensure_private_dir`].
pub fn runtime_dir_at(
    xdg_runtime_dir: Option<&Path>,
    temp_dir: &Path,
) -> Result<PathBuf, RuntimeDirError> {
    let path = match xdg_runtime_dir {
        Some(base) if base.is_absolute() && base.is_dir() => base.join(DIR_NAME),
        _ => temp_dir.join(format!("{DIR_NAME}-{}", euid())),
    };
    ensure_private_dir(&path)?;
    Ok(path)
}

/// Creates `path` (the leaf only, mode `0700`) if nothing is there, then
/// checks it without following a symlink: a directory, owned by our
/// effective uid, no permission for group or others. An existing folder is
/// never changed.
///
/// # Errors
/// The first thing found wrong, one variant each.
pub fn ensure_private_dir(path: &Path) -> Result<(), RuntimeDirError> {
    let io_err = |source| RuntimeDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        // Someone (maybe us, earlier) made it: the checks below decide.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(e)),
    }
    let meta = fs::symlink_metadata(path).map_err(io_err)?;
    let path = path.to_path_buf();
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Err(RuntimeDirError::Symlink { path });
    }
    if !kind.is_dir() {
        return Err(RuntimeDirError::NotADirectory { path });
    }
    let uid = euid();
    if meta.uid() != uid {
        return Err(RuntimeDirError::WrongOwner {
            path,
            owner: meta.uid(),
            uid,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(RuntimeDirError::OpenToOthers {
            path,
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The effective uid the peer of a connected Unix stream socket had when it
/// connected (or when the pair was made), mapped into our user namespace
/// (an unmapped uid reads as the overflow uid, usually 65534).
///
/// # Errors
/// `getsockopt(SO_PEERCRED)` failed (not a Unix socket, not connected).
#[cfg(target_os = "linux")]
pub fn peer_uid(fd: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(fd)?.uid.as_raw())
}

/// The peer's uid is read on Linux only (`SO_PEERCRED`).
///
/// # Errors
/// Always `Unsupported` here.
#[cfg(not(target_os = "linux"))]
pub fn peer_uid(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let _ = fd;
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the peer's uid is read on Linux only",
    ))
}

/// One connection from a listening socket's queue: non-blocking and
/// close-on-exec (`WouldBlock` when none waits).
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use rustix::net::{accept_with, SocketFlags};
    Ok(accept_with(
        listener,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
    )?)
}

/// What is at a socket path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// A socket that accepted a connection, or whose backlog is full.
    Live,
    /// A socket nobody listens on (`ECONNREFUSED`), or a file that is not a
    /// socket: safe to remove.
    Stale,
    /// Nothing there.
    Missing,
    /// The connection failed otherwise (e.g. `EACCES`): neither live nor
    /// known stale; leave it alone.
    Unknown(io::ErrorKind),
}

/// Looks at `path` without following a symlink and, if it is a socket,
/// connects to it without blocking and closes at once (the listener sees a
/// connection that sends nothing).
pub fn probe(path: &Path) -> Probe {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => connect_probe(path),
        Ok(_) => Probe::Stale,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Probe::Missing,
        Err(e) => Probe::Unknown(e.kind()),
    }
}

/// Whether [`probe`] finds `path` stale.
pub fn is_stale(path: &Path) -> bool {
    probe(path) == Probe::Stale
}

fn connect_probe(path: &Path) -> Probe {
    use rustix::io::Errno;
    let attempt = (|| {
        let addr = rustix::net::SocketAddrUnix::new(path)?;
        let fd = unix_stream_socket()?;
        rustix::net::connect(&fd, &addr)
    })();
    match attempt {
        Ok(()) => Probe::Live,
        // Non-blocking, backlog full: someone listens, slowly.
        Err(Errno::AGAIN | Errno::INPROGRESS) => Probe::Live,
        Err(Errno::CONNREFUSED) => Probe::Stale,
        Err(Errno::NOENT) => Probe::Missing,
        Err(e) => Probe::Unknown(io::Error::from(e).kind()),
    }
}

/// A non-blocking, close-on-exec Unix stream socket, in one call.
#[cfg(target_os = "linux")]
fn unix_stream_socket() -> rustix::io::Result<std::os::fd::OwnedFd> {
    use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};
    socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
}

/// A non-blocking, close-on-exec Unix stream socket: not every system takes
/// the flags at creation, so they are set after.
#[cfg(not(target_os = "linux"))]
fn unix_stream_socket() -> rustix::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    use rustix::net::{socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::UNIX, SocketType::STREAM, None)?;
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
    fcntl_setfl(&fd, fcntl_getfl(&fd)? | OFlags::NONBLOCK)?;
    Ok(fd)
}

/// A non-blocking, close-on-exec Unix stream listener at `path`, its socket
/// file set to `0600`. A stale socket there ([`Probe::Stale`]) is removed
/// and the bind tried once more. Accepted streams are blocking.
///
/// # Errors
/// `AddrInUse` when something listens at `path` (or cannot be told from
/// it), `AlreadyExists` when a file that is not a socket is there (never
/// removed), else what `bind` or `chmod` said.
pub fn bind_listener(path: &Path) -> io::Result<UnixListener> {
    let listener = match UnixListener::bind(path) {
        Ok(listener) => listener,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => replace_stale(path)?,
        Err(e) => return Err(e),
    };
    listener.set_nonblocking(true)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn replace_stale(path: &Path) -> io::Result<UnixListener> {
    let is_socket = fs::symlink_metadata(path).map(|m| m.file_type().is_socket());
    if let Ok(false) = is_socket {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket: not removed", path.display()),
        ));
    }
    match probe(path) {
        Probe::Stale => match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        },
        Probe::Missing => {}
        Probe::Live => {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: another process listens there", path.display()),
            ))
        }
        Probe::Unknown(kind) => {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{}: cannot tell whether anyone listens there ({kind})",
                    path.display()
                ),
            ))
        }
    }
    UnixListener::bind(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).expect("lstat").mode() & 0o7777
    }

    #[test]
    fn a_fresh_folder_is_created_0700_and_accepted_twice() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("rt");
        ensure_private_dir(&dir).expect("created and accepted");
        assert_eq!(mode(&dir), 0o700);
        ensure_private_dir(&dir).expect("accepted again");
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn the_xdg_base_is_used_only_when_absolute_and_a_directory() {
        let xdg = tempfile::tempdir().expect("tempdir");
        let temp = tempfile::tempdir().expect("tempdir");
        let fallback = temp.path().join(format!("mcp-stdio-{}", euid()));

        let dir = runtime_dir_at(Some(xdg.path()), temp.path()).expect("xdg");
        assert_eq!(dir, xdg.path().join("mcp-stdio"));
        assert_eq!(mode(&dir), 0o700);

        for bad in [PathBuf::from("relative/run"), xdg.path().join("missing")] {
            let dir = runtime_dir_at(Some(&bad), temp.path()).expect("fallback");
            assert_eq!(dir, fallback, "{} is not a usable base", bad.display());
        }
        let file = xdg.path().join("file");
        fs::write(&file, b"").expect("file");
        assert_eq!(
            runtime_dir_at(Some(&file), temp.path()).expect("fallback"),
            fallback
        );
        assert_eq!(runtime_dir_at(None, temp.path()).expect("no xdg"), fallback);
        assert_eq!(mode(&fallback), 0o700);
    }

    #[test]
    fn a_folder_open_to_others_is_refused_and_left_unchanged() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("rt");
        fs::create_dir(&dir).expect("mkdir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = ensure_private_dir(&dir).expect_err("refused");
        assert!(
            matches!(err, RuntimeDirError::OpenToOthers { mode: 0o755, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("{} is open to others (mode 0755): not used", dir.display())
        );
        assert_eq!(mode(&dir), 0o755, "not chmodded");
        // Group bits alone are enough to refuse.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o710)).expect("chmod");
        assert!(matches!(
            ensure_private_dir(&dir),
            Err(RuntimeDirError::OpenToOthers { mode: 0o710, .. })
        ));
    }

    #[test]
    fn a_symlink_to_a_private_folder_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        ensure_private_dir(&real).expect("private");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err = ensure_private_dir(&link).expect_err("refused");
        assert!(matches!(err, RuntimeDirError::Symlink { .. }), "{err:?}");
        assert_eq!(err.path(), link);
        assert!(err.to_string().ends_with("is a symbolic link: not used"));
        // A dangling one too (mkdir does not follow it).
        let dangling = tmp.path().join("dangling");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).expect("symlink");
        assert!(matches!(
            ensure_private_dir(&dangling),
            Err(RuntimeDirError::Symlink { .. })
        ));
        assert!(
            !tmp.path().join("nowhere").exists(),
            "nothing created behind it"
        );
    }

    #[test]
    fn a_regular_file_in_place_of_the_folder_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("rt");
        fs::write(&file, b"x").expect("file");
        let err = ensure_private_dir(&file).expect_err("refused");
        assert!(
            matches!(err, RuntimeDirError::NotADirectory { .. }),
            "{err:?}"
        );
        assert!(err.to_string().ends_with("is not a directory: not used"));
    }

    #[test]
    fn a_folder_with_a_missing_parent_is_an_io_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("no").join("rt");
        let err = ensure_private_dir(&dir).expect_err("leaf only");
        assert!(matches!(&err, RuntimeDirError::Io { source, .. }
            if source.kind() == io::ErrorKind::NotFound));
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn a_folder_owned_by_another_user_is_refused() {
        let uid = euid();
        if uid != 0 {
            eprintln!("skipped: not root (uid {uid}), cannot chown a folder to another user");
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("rt");
        ensure_private_dir(&dir).expect("private");
        std::os::unix::fs::chown(&dir, Some(65534), None).expect("chown");
        let err = ensure_private_dir(&dir).expect_err("refused");
        assert!(
            matches!(
                err,
                RuntimeDirError::WrongOwner {
                    owner: 65534,
                    uid: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{} is owned by uid 65534, not by this user (uid 0): not used",
                dir.display()
            )
        );
        assert_eq!(mode(&dir), 0o700);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peer_uid_of_a_socket_pair_is_our_euid() {
        let (a, b) = UnixStream::pair().expect("pair");
        assert_eq!(peer_uid(a.as_fd()).expect("SO_PEERCRED"), euid());
        assert_eq!(peer_uid(b.as_fd()).expect("SO_PEERCRED"), euid());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peer_uid_of_an_accepted_connection_is_our_euid() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("s.sock");
        let listener = bind_listener(&path).expect("bind");
        let _client = UnixStream::connect(&path).expect("connect");
        listener.set_nonblocking(false).expect("blocking accept");
        let (server, _) = listener.accept().expect("accept");
        assert_eq!(peer_uid(server.as_fd()).expect("SO_PEERCRED"), euid());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peer_uid_of_a_pipe_is_an_error() {
        let (r, _w) = rustix::pipe::pipe().expect("pipe");
        assert!(peer_uid(r.as_fd()).is_err());
    }

    #[test]
    fn bind_listener_makes_a_0600_non_blocking_socket_and_replaces_only_a_stale_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("rt");
        ensure_private_dir(&dir).expect("private");
        let path = dir.join("1234.sock");
        assert_eq!(probe(&path), Probe::Missing);
        assert!(!is_stale(&path));

        let first = bind_listener(&path).expect("bind");
        assert!(fs::symlink_metadata(&path)
            .expect("lstat")
            .file_type()
            .is_socket());
        assert_eq!(mode(&path), 0o600);
        let err = first.accept().expect_err("non-blocking: nobody connected");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let flags = rustix::io::fcntl_getfd(&first).expect("getfd");
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));

        assert_eq!(probe(&path), Probe::Live);
        assert!(!is_stale(&path));
        let err = bind_listener(&path).expect_err("someone listens");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(mode(&path), 0o600, "the live socket is left alone");

        drop(first);
        assert!(path.exists(), "the socket file is left behind");
        // Another test of this process may have forked in between: its
        // child holds a copy of the listener until its exec closes it.
        let t = std::time::Instant::now();
        while probe(&path) == Probe::Live && t.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(probe(&path), Probe::Stale);
        assert!(is_stale(&path));

        let second = bind_listener(&path).expect("the stale socket is replaced");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(probe(&path), Probe::Live);
        let _client = UnixStream::connect(&path).expect("the new listener answers");
        drop(second);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_listener_with_a_full_backlog_probes_live_not_stale() {
        use rustix::net::{bind, listen, SocketAddrUnix};
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("busy.sock");
        let addr = SocketAddrUnix::new(&path).expect("addr");
        let listener = unix_stream_socket().expect("socket");
        bind(&listener, &addr).expect("bind");
        // Backlog 0: one queued connection fills it; the next gets `EAGAIN`.
        listen(&listener, 0).expect("listen");
        let mut queued = Vec::new();
        let full = loop {
            let fd = unix_stream_socket().expect("socket");
            match rustix::net::connect(&fd, &addr) {
                Ok(()) => queued.push(fd),
                Err(e) => break e,
            }
            assert!(queued.len() < 16, "the backlog never filled");
        };
        assert_eq!(full, rustix::io::Errno::AGAIN);
        assert_eq!(probe(&path), Probe::Live);
        let err = bind_listener(&path).expect_err("someone listens");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_stale_but_never_removed_by_bind() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("1234.sock");
        fs::write(&path, b"not a socket").expect("file");
        assert_eq!(probe(&path), Probe::Stale);
        assert!(is_stale(&path));
        let err = bind_listener(&path).expect_err("not removed");
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).expect("still there"), b"not a socket");
    }

    #[test]
    fn probe_does_not_follow_a_symlink_to_a_live_socket() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("live.sock");
        let _listener = bind_listener(&path).expect("bind");
        let link = tmp.path().join("link.sock");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert_eq!(probe(&link), Probe::Stale, "the link is not a socket");
        assert_eq!(probe(&path), Probe::Live);
    }
}
