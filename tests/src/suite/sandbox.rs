//! Issue 24: a server a `Client` spawns in a [`Sandbox`] touches only
//! what it was given (Linux, Landlock), and a sandbox that cannot be used
//! fails the spawn before anything runs.

use std::path::Path;

use mcp_stdio_core::{ExitStatus, Sandbox};
use serde_json::json;

use super::{fixture_server, options, shutdown_within, spawn, tool, LeakCheck, LONG};
use crate::adapter::{Adapter, SuiteClient};

/// What a program linked against the system's C library needs to start:
/// the system's folders read and executed, `/etc` read, `/dev/null` written.
pub fn system_sandbox() -> Sandbox {
    let mut sb = Sandbox::new();
    for dir in ["/usr", "/bin", "/sbin", "/lib", "/lib64"] {
        if Path::new(dir).exists() {
            sb.read_exec(dir);
        }
    }
    sb.read("/etc").write("/dev/null");
    sb
}

/// Two folders side by side in a temporary one: `allowed/a.txt` holds
/// `visible-content`, `outside/secret.txt` holds `secret-content`. A sandbox
/// test grants the first and proves the second out of reach.
pub struct TwoFolders {
    /// Removed with everything in it when dropped.
    pub tmp: tempfile::TempDir,
    /// The folder the sandbox grants.
    pub allowed: std::path::PathBuf,
    /// The folder beside it.
    pub outside: std::path::PathBuf,
}

impl TwoFolders {
    /// Makes both, with their files.
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let allowed = tmp.path().join("allowed");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&allowed).expect("mkdir");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(allowed.join("a.txt"), "visible-content").expect("write");
        std::fs::write(outside.join("secret.txt"), "secret-content").expect("write");
        Self {
            tmp,
            allowed,
            outside,
        }
    }
}

impl Default for TwoFolders {
    fn default() -> Self {
        Self::new()
    }
}

/// The kernel's Landlock ABI, or `None` (said on stderr) when the test needs
/// more than it has.
pub fn landlock_at_least(test: &str, abi: u32) -> bool {
    let have = mcp_stdio_sys::sandbox::kernel_support().landlock_abi;
    if have < abi {
        eprintln!("{test}: skipped: the kernel has Landlock ABI {have}, the test needs {abi}");
    }
    have >= abi
}

/// The fixture server spawned by the client in a sandbox that lets it
/// read one folder reads a file there and is refused one beside it, and the
/// session goes on; a sandbox with a relative path fails the spawn.
pub fn sandbox_a_server_reads_only_what_it_was_given<A: Adapter>() {
    if !landlock_at_least("sandbox_a_server", 1) {
        return;
    }
    let TwoFolders {
        tmp: _tmp,
        allowed,
        outside,
    } = TwoFolders::new();
    let mut leaks = LeakCheck::new::<A>("sandbox_sandboxed_server");
    let mut spec = fixture_server(&[]);
    let folder = Path::new(spec.get_program())
        .parent()
        .expect("the fixture's folder")
        .to_owned();
    let mut sb = system_sandbox();
    sb.read_exec(&folder).read(&allowed);
    spec.sandbox(sb);
    let client = spawn::<A>(&mut leaks, spec, options(4 << 20));
    client.initialize().expect("initialize in the sandbox");
    let read = |file: &Path| {
        client.request(
            "tools/call",
            tool("read_file", json!({"path": file.display().to_string()})),
            Some(LONG),
        )
    };
    let inside = read(&allowed.join("a.txt")).expect("read inside");
    assert_eq!(super::first_text(&inside), "visible-content");
    let beside = read(&outside.join("secret.txt")).expect_err("refused beside");
    let said = format!("{beside:?}");
    eprintln!("{}: reading beside the folder: {said}", A::NAME);
    assert!(said.contains("Permission denied"), "{said}");
    assert!(!said.contains("secret-content"), "{said}");
    let again = read(&allowed.join("a.txt")).expect("the session goes on");
    assert_eq!(super::first_text(&again), "visible-content");
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    leaks.assert_none_left();

    let mut spec = fixture_server(&[]);
    let mut bad = Sandbox::new();
    bad.read("relative/path");
    spec.sandbox(bad);
    match A::spawn(&spec, options(4 << 20)) {
        Ok(_) => panic!("{}: a sandbox with a relative path was spawned", A::NAME),
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains("not absolute"), "{e}");
        }
    }
}
