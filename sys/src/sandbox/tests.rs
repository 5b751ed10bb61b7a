//! Real children in real sandboxes (issue 24).

use super::*;
use mcp_stdio_core::{PathAccess, ResourceLimits, SandboxNetwork};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// What `sh` and the coreutils need to start on a Linux distribution.
fn system(sb: &mut Sandbox) -> &mut Sandbox {
    for dir in ["/usr", "/bin", "/lib", "/lib64", "/etc"] {
        if Path::new(dir).exists() {
            sb.read_exec(dir);
        }
    }
    sb.allow("/dev/null", PathAccess::WRITE)
}

fn run(sandbox: &Sandbox, script: &str) -> Output {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    apply(&mut cmd, sandbox).expect("sandbox applies");
    cmd.stdin(Stdio::null()).output().expect("sh runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn needs_landlock(min_abi: u32) -> bool {
    let abi = kernel_support().landlock_abi;
    if abi < min_abi {
        eprintln!("skipped: this kernel has Landlock ABI {abi}, the test needs {min_abi}");
        return false;
    }
    true
}

struct Dirs {
    _tmp: tempfile::TempDir,
    allowed: PathBuf,
    outside: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().expect("tempdir");
    let allowed = tmp.path().join("allowed");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&allowed).expect("mkdir");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(allowed.join("a.txt"), "visible-content").expect("write");
    std::fs::write(outside.join("secret.txt"), "secret-content").expect("write");
    Dirs {
        _tmp: tmp,
        allowed,
        outside,
    }
}

#[test]
fn sandbox_a_child_reads_what_it_was_given_and_nothing_beside_it() {
    if !needs_landlock(1) {
        return;
    }
    let d = dirs();
    let mut sb = Sandbox::new();
    system(&mut sb).read(&d.allowed);
    let out = run(
        &sb,
        &format!(
            "cat {0}/a.txt; echo; cat {1}/secret.txt; echo status=$?",
            d.allowed.display(),
            d.outside.display()
        ),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    eprintln!("stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("visible-content"), "{stdout}");
    assert!(!stdout.contains("secret-content"), "{stdout}");
    assert!(stdout.contains("status=1"), "{stdout}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
}

#[test]
fn sandbox_a_child_writes_only_where_it_may_and_the_parent_stays_free() {
    if !needs_landlock(1) {
        return;
    }
    let d = dirs();
    let mut sb = Sandbox::new();
    system(&mut sb).write(&d.allowed).read(&d.outside);
    let out = run(
        &sb,
        &format!(
            "echo one > {0}/new.txt && echo wrote; echo two > {1}/new.txt || echo refused",
            d.allowed.display(),
            d.outside.display()
        ),
    );
    let stdout = text(&out.stdout);
    eprintln!("stdout: {stdout}\nstderr: {}", text(&out.stderr));
    assert!(
        stdout.contains("wrote") && stdout.contains("refused"),
        "{stdout}"
    );
    assert!(d.allowed.join("new.txt").exists());
    assert!(!d.outside.join("new.txt").exists());
    // The sandbox was the child's only: this process still writes anywhere.
    std::fs::write(d.outside.join("parent.txt"), "free").expect("parent writes");
}

#[test]
fn sandbox_network_none_refuses_tcp_and_unrestricted_allows_it() {
    if !needs_landlock(4) || !Path::new("/bin/bash").exists() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let connect = |network: SandboxNetwork| {
        let mut sb = Sandbox::new();
        system(&mut sb).network(network);
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &script]);
        apply(&mut cmd, &sb).expect("sandbox applies");
        let out = cmd.stdin(Stdio::null()).output().expect("bash runs");
        eprintln!("{}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout).contains("connected")
    };
    assert!(
        !connect(SandboxNetwork::None),
        "connected under network none"
    );
    assert!(!connect(SandboxNetwork::Ports {
        connect: vec![port.wrapping_add(1)],
        bind: vec![],
    }));
    assert!(connect(SandboxNetwork::Ports {
        connect: vec![port],
        bind: vec![],
    }));
    assert!(connect(SandboxNetwork::Unrestricted));
}

#[test]
fn sandbox_limits_reach_the_child_soft_and_hard() {
    let mut sb = Sandbox::new();
    system(&mut sb)
        .network(SandboxNetwork::Unrestricted)
        .enforcement(mcp_stdio_core::Enforcement::BestEffort)
        .limits(ResourceLimits {
            open_files: Some(77),
            file_size: Some(1 << 20),
            ..ResourceLimits::default()
        });
    let out = run(&sb, "ulimit -n; ulimit -Hn; ulimit -f");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // `ulimit -f` counts 512-byte blocks in POSIX sh.
    assert_eq!(lines, ["77", "77", "2048"], "{stdout}");
}

#[test]
fn sandbox_a_missing_path_or_an_invalid_sandbox_fails_before_the_spawn() {
    let mut sb = Sandbox::new();
    sb.read("/definitely/not/here")
        .enforcement(mcp_stdio_core::Enforcement::BestEffort);
    let mut cmd = Command::new("true");
    let err = apply(&mut cmd, &sb);
    if kernel_support().landlock_abi > 0 {
        let err = err.expect_err("missing path refused");
        assert!(err.to_string().contains("/definitely/not/here"), "{err}");
    }
    let mut sb = Sandbox::new();
    sb.read("relative");
    let err = apply(&mut Command::new("true"), &sb).expect_err("relative path refused");
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("not absolute"), "{err}");
}

#[test]
fn sandbox_the_probe_reports_this_kernel() {
    let kernel = kernel_support();
    eprintln!("kernel support: {kernel:?}");
    // Whatever the kernel, the plan of an empty sandbox agrees with it.
    let plan = plan(&Sandbox::new());
    assert_eq!(plan.kernel_landlock_abi, kernel.landlock_abi);
}

#[test]
fn sandbox_signals_to_processes_outside_the_sandbox_are_refused() {
    if !needs_landlock(6) {
        return;
    }
    // The test process is outside the child's sandbox: `kill -0` asks
    // whether it may be signalled, without signalling it.
    let me = std::process::id();
    let probe = format!("kill -0 {me} && echo may-signal || echo refused");
    let mut sb = Sandbox::new();
    system(&mut sb);
    let out = run(&sb, &probe);
    let stdout = text(&out.stdout);
    eprintln!("isolated: {stdout}{}", text(&out.stderr));
    assert!(stdout.contains("refused"), "{stdout}");
    sb.isolate_ipc(false);
    let out = run(&sb, &probe);
    assert!(
        text(&out.stdout).contains("may-signal"),
        "{}",
        text(&out.stdout)
    );
}
