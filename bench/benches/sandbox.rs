//! What a sandbox costs at the spawn: `true` spawned and waited for through
//! `mcp_stdio_sys::command`, the path every `Client`, `run_helper` and the
//! guard take, without a sandbox and with the ones the guard uses. A session
//! pays it once per server start; nothing in the session's I/O changes.
//!
//! Cases (Linux; each spawn plans against the kernel, opens the rule paths,
//! builds the Landlock ruleset in the parent, and confines the child):
//!
//! - `plain`: no sandbox;
//! - `landlock`: the system's folders, network unrestricted, no namespace;
//! - `landlock+netns`: the same with network none, so the child also gets a
//!   user and network namespace of its own (where the kernel allows);
//! - `landlock+limits`: `landlock` with every resource limit set.
//!
//! Not part of `bench/run`'s report; run it with
//! `cargo bench -p mcp-stdio-bench --bench sandbox`.

use std::path::Path;
use std::time::Duration;

use criterion::Criterion;
use mcp_stdio_core::{CommandSpec, ResourceLimits, Sandbox, SandboxNetwork};

fn system() -> Sandbox {
    let mut sb = Sandbox::new();
    for dir in ["/usr", "/bin", "/sbin", "/lib", "/lib64"] {
        if Path::new(dir).exists() {
            sb.read_exec(dir);
        }
    }
    sb.read("/etc").write("/dev/null");
    sb
}

fn spawn_true(spec: &CommandSpec) {
    let status = mcp_stdio_sys::command(spec)
        .expect("the sandbox applies")
        .stdin(std::process::Stdio::null())
        .status()
        .expect("true runs");
    assert!(status.success());
}

fn bench(c: &mut Criterion) {
    let kernel = mcp_stdio_sys::sandbox::kernel_support();
    eprintln!("kernel: {kernel:?}");
    let mut group = c.benchmark_group("sandbox_spawn");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    let plain = CommandSpec::new("true");
    let mut landlock = plain.clone();
    let mut sb = system();
    sb.network(SandboxNetwork::Unrestricted);
    landlock.sandbox(sb.clone());
    let mut netns = plain.clone();
    netns.sandbox(system());
    let mut limits = plain.clone();
    sb.limits(ResourceLimits {
        memory: Some(1 << 30),
        address_space: Some(8 << 30),
        processes: None,
        file_size: Some(1 << 30),
        cpu_seconds: Some(3600),
        open_files: Some(1024),
    });
    limits.sandbox(sb);
    let cases: Vec<(&str, &CommandSpec)> = if kernel.landlock_abi == 0 {
        eprintln!("no Landlock: only `plain` is measured");
        vec![("plain", &plain)]
    } else {
        vec![
            ("plain", &plain),
            ("landlock", &landlock),
            ("landlock+netns", &netns),
            ("landlock+limits", &limits),
        ]
    };
    for (name, spec) in cases {
        group.bench_function(name, |b| b.iter(|| spawn_true(spec)));
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
