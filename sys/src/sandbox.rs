//! Applying a `mcp_stdio_core::Sandbox` to a child between `fork` and `exec` (Linux).
//!
//! The parent plans the sandbox against the kernel ([`kernel_support`],
//! [`plan`]), opens every path and builds the Landlock ruleset — everything
//! that allocates or can fail for a reason worth a message — and the child
//! only makes the few calls that confine it: `unshare` into a user (and
//! network) namespace of its own, `setrlimit`, and `landlock_restrict_self`
//! with `no_new_privs`. The parent is never confined.
//!
//! Landlock is used through the `landlock` crate (rules built at exactly the
//! ABI planned, as hard requirements, so nothing is silently dropped); limits
//! and namespaces through rustix.
//!
//! # Simulating an older kernel
//!
//! [`SIMULATE_ABI_ENV`] makes this process plan as if the kernel offered at
//! most that Landlock ABI (`0`: none). It can only lower what is used, never
//! pretend more; it exists so the refusal and best-effort paths are tested on
//! kernels that have everything.
//!
//! Elsewhere than Linux, a sandbox with enforcement required is refused at the
//! spawn; a best-effort one runs unconfined with every gap recorded.

use std::io;

use mcp_stdio_core::{KernelSupport, Sandbox, SandboxError, SandboxPlan};

/// Environment variable: plan as if the kernel offered at most this Landlock
/// ABI (`0`: no Landlock). Read at every plan; only lowers what is used.
pub const SIMULATE_ABI_ENV: &str = "MCP_STDIO_SANDBOX_LANDLOCK_ABI";

/// What this kernel offers for sandboxing (probed once per process), capped
/// by [`SIMULATE_ABI_ENV`].
pub fn kernel_support() -> KernelSupport {
    let mut kernel = imp::probe();
    if let Some(cap) = std::env::var_os(SIMULATE_ABI_ENV)
        .and_then(|v| v.to_str().and_then(|s| s.trim().parse::<u32>().ok()))
    {
        kernel.landlock_abi = kernel.landlock_abi.min(cap);
    }
    kernel
}

/// `sandbox` planned against this kernel.
pub fn plan(sandbox: &Sandbox) -> SandboxPlan {
    sandbox.plan(&kernel_support())
}

/// A sandbox that cannot be applied: its own error, or a path that cannot be
/// opened, as an `io::Error` (what a spawn returns).
fn refused(e: SandboxError) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, e)
}

/// Validates and plans `sandbox`, and sets `cmd` up to apply it in the
/// child. Returns the plan (what is enforced, and the gaps accepted under
/// best effort).
///
/// # Errors
/// The sandbox is invalid, the kernel cannot enforce it and enforcement is
/// required (`PermissionDenied`, with the gaps in the message), a path rule's
/// path cannot be opened, or the kernel refused the ruleset.
pub fn apply(cmd: &mut std::process::Command, sandbox: &Sandbox) -> io::Result<SandboxPlan> {
    sandbox.validate().map_err(refused)?;
    let plan = plan(sandbox);
    if let Some(refusal) = plan.refusal() {
        return Err(refused(refusal));
    }
    imp::install(cmd, sandbox, &plan)?;
    tracing::debug!(
        landlock_abi = plan.landlock_abi,
        gaps = ?plan.gaps,
        user_namespace = plan.user_namespace,
        "sandbox set up for the child"
    );
    Ok(plan)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::sync::OnceLock;

    use landlock::{
        Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
        Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, Scope, ABI,
    };
    use mcp_stdio_core::{KernelSupport, PathAccess, Sandbox, SandboxNetwork, SandboxPlan};
    use rustix::process::{Resource, Rlimit};

    pub(super) fn probe() -> KernelSupport {
        static PROBED: OnceLock<KernelSupport> = OnceLock::new();
        *PROBED.get_or_init(|| KernelSupport {
            landlock_abi: landlock_abi(),
            user_namespaces: user_namespaces(),
            privileged: rustix::process::geteuid().is_root(),
        })
    }

    /// A ruleset builder that fails on anything the kernel lacks.
    fn strict() -> Ruleset {
        Ruleset::default().set_compatibility(CompatLevel::HardRequirement)
    }

    /// The Landlock ABI, found by asking for each version's first feature as
    /// a hard requirement (the crate keeps the raw version to itself).
    fn landlock_abi() -> u32 {
        let ok = |r: Result<Ruleset, RulesetError>| r.is_ok();
        let steps: [&dyn Fn() -> bool; 6] = [
            &|| ok(strict().handle_access(AccessFs::from_all(ABI::V1))),
            &|| ok(strict().handle_access(AccessFs::Refer)),
            &|| ok(strict().handle_access(AccessFs::Truncate)),
            &|| ok(strict().handle_access(AccessNet::BindTcp)),
            &|| ok(strict().handle_access(AccessFs::IoctlDev)),
            &|| ok(strict().scope(Scope::Signal)),
        ];
        let mut abi = 0;
        for step in steps {
            if !step() {
                return abi;
            }
            abi += 1;
        }
        // ABI 7 added only logging flags: ask for one on a real ruleset.
        let v7 = strict()
            .handle_access(AccessFs::ReadFile)
            .and_then(Ruleset::create)
            .and_then(|r| r.log_same_exec(false));
        if v7.is_ok() {
            abi = 7;
        }
        abi
    }

    /// Whether this user may make a user namespace (and a network namespace
    /// in it): the kernel's switches as the distributions set them.
    fn user_namespaces() -> bool {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        if read("/proc/sys/user/max_user_namespaces").is_some_and(|n| n <= 0) {
            return false;
        }
        if !std::path::Path::new("/proc/self/ns/user").exists() {
            return false;
        }
        // Debian's switch, and Ubuntu's AppArmor restriction (namespaces are
        // made but without rights, so the uid map cannot be written).
        let root = rustix::process::geteuid().is_root();
        if !root
            && (read("/proc/sys/kernel/unprivileged_userns_clone") == Some(0)
                || read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1))
        {
            return false;
        }
        // A container's seccomp profile or a security module may still refuse:
        // ask the kernel once, with a child that does what a sandboxed one does.
        probe_user_namespace()
    }

    /// Spawns `true` in a user and network namespace of its own, its ids
    /// mapped as a sandboxed child maps them: whether that works here.
    fn probe_user_namespace() -> bool {
        let maps = id_maps();
        let mut cmd = std::process::Command::new("true");
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let enter = move || {
            enter_namespaces(
                rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNET,
                &maps,
            )
        };
        // SAFETY: as in `install`: system calls on data prepared before the
        // fork, no allocation, no lock.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(enter);
        }
        let ok = cmd.status().is_ok_and(|s| s.success());
        tracing::debug!(ok, "probed for unprivileged user and network namespaces");
        ok
    }

    /// In the child: `unshare` into new namespaces, then map its ids to
    /// themselves.
    fn enter_namespaces(flags: rustix::thread::UnshareFlags, maps: &IdMaps) -> io::Result<()> {
        // SAFETY (of `unshare_unsafe`): the flags hold no `CLONE_FILES`; the
        // child has a single thread.
        #[allow(unsafe_code)]
        unsafe {
            rustix::thread::unshare_unsafe(flags)?;
        }
        write_proc(c"/proc/self/setgroups", b"deny")?;
        write_proc(c"/proc/self/uid_map", &maps.uid)?;
        write_proc(c"/proc/self/gid_map", &maps.gid)
    }

    fn abi_enum(abi: u32) -> ABI {
        ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
    }

    fn open_error(path: &Path, e: impl std::fmt::Display) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("sandbox path {}: {e}", path.display()),
        )
    }

    fn ruleset_error(e: RulesetError) -> io::Error {
        io::Error::other(format!("the kernel refused the sandbox's ruleset: {e}"))
    }

    /// The Landlock ruleset for `plan`, built and filled in the parent.
    fn ruleset(sandbox: &Sandbox, plan: &SandboxPlan) -> io::Result<Option<RulesetCreated>> {
        if !plan.filesystem {
            return Ok(None);
        }
        let abi = abi_enum(plan.landlock_abi);
        let mut rs = strict()
            .handle_access(AccessFs::from_all(abi))
            .map_err(ruleset_error)?;
        if plan.network_rules {
            rs = rs
                .handle_access(AccessNet::from_all(abi))
                .map_err(ruleset_error)?;
        }
        if plan.ipc_scope {
            rs = rs.scope(Scope::from_all(abi)).map_err(ruleset_error)?;
        }
        let mut created = rs.create().map_err(ruleset_error)?.no_new_privs(true);
        for rule in sandbox.merged_paths() {
            let fd = PathFd::new(&rule.path).map_err(|e| open_error(&rule.path, e))?;
            let is_dir = std::fs::metadata(&rule.path)
                .map_err(|e| open_error(&rule.path, e))?
                .is_dir();
            let mut access = fs_access(rule.access, abi);
            if !is_dir {
                access &= AccessFs::from_file(abi);
            }
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(ruleset_error)?;
        }
        if let SandboxNetwork::Ports { connect, bind } = sandbox.get_network() {
            if plan.network_rules {
                for &port in connect {
                    created = created
                        .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                        .map_err(ruleset_error)?;
                }
                for &port in bind {
                    created = created
                        .add_rule(NetPort::new(port, AccessNet::BindTcp))
                        .map_err(ruleset_error)?;
                }
            }
        }
        Ok(Some(created))
    }

    fn fs_access(access: PathAccess, abi: ABI) -> landlock::BitFlags<AccessFs> {
        let mut bits = AccessFs::ReadFile | AccessFs::ReadDir;
        if access.executes() {
            bits |= AccessFs::Execute;
        }
        if access.writes() {
            bits |= AccessFs::from_write(abi);
        }
        bits
    }

    /// The limits as `setrlimit` arguments, each no higher than the hard
    /// limit this process has (raising it would fail without privilege).
    fn rlimits(sandbox: &Sandbox) -> Vec<(Resource, u64)> {
        let limits = sandbox.get_limits();
        [
            (Resource::Data, limits.memory),
            (Resource::As, limits.address_space),
            (Resource::Nproc, limits.processes),
            (Resource::Fsize, limits.file_size),
            (Resource::Cpu, limits.cpu_seconds),
            (Resource::Nofile, limits.open_files),
        ]
        .into_iter()
        .filter_map(|(resource, value)| {
            let value = value?;
            let hard = rustix::process::getrlimit(resource).maximum;
            Some((resource, hard.map_or(value, |h| h.min(value))))
        })
        .collect()
    }

    /// What the child writes to its own maps after `unshare`: its ids mapped
    /// to themselves, so files keep their owners and `getuid` its answer.
    struct IdMaps {
        uid: Vec<u8>,
        gid: Vec<u8>,
    }

    fn id_maps() -> IdMaps {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        IdMaps {
            uid: format!("{uid} {uid} 1\n").into_bytes(),
            gid: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Writes `bytes` to the `/proc/self` file `path`, in the child: open,
    /// one write, close; no allocation.
    fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        let n = rustix::io::write(&fd, bytes)?;
        if n != bytes.len() {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::IO.raw_os_error(),
            ));
        }
        Ok(())
    }

    pub(super) fn install(
        cmd: &mut std::process::Command,
        sandbox: &Sandbox,
        plan: &SandboxPlan,
    ) -> io::Result<()> {
        let mut ruleset = ruleset(sandbox, plan)?;
        let limits = rlimits(sandbox);
        let namespaces = if plan.user_namespace {
            let mut flags = rustix::thread::UnshareFlags::NEWUSER;
            if plan.network_namespace {
                flags |= rustix::thread::UnshareFlags::NEWNET;
            }
            Some((flags, id_maps()))
        } else {
            None
        };
        let in_child = move || -> io::Result<()> {
            // 1. Namespaces first: the process limit counts inside the new
            //    user namespace only when it is set after entering it.
            if let Some((flags, maps)) = &namespaces {
                enter_namespaces(*flags, maps)?;
            }
            // 2. Limits, soft and hard alike.
            for &(resource, value) in &limits {
                rustix::process::setrlimit(
                    resource,
                    Rlimit {
                        current: Some(value),
                        maximum: Some(value),
                    },
                )?;
            }
            // 3. Landlock last (it would deny the writes above), with
            //    `no_new_privs`; without Landlock, `no_new_privs` alone.
            match ruleset.take() {
                Some(rs) => {
                    if rs.restrict_self().is_err() {
                        return Err(io::Error::last_os_error());
                    }
                }
                None => rustix::thread::set_no_new_privs(true)?,
            }
            Ok(())
        };
        // SAFETY: the closure runs in the child between `fork` and `exec`.
        // It makes system calls only (`unshare`, `open`/`write`/`close` on
        // `/proc/self`, `setrlimit`, `prctl`, `landlock_restrict_self`) on
        // data prepared before the fork, and allocates nothing on success;
        // an error is read from `errno` without allocating. It takes no lock
        // shared with other threads.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(in_child);
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;

    use mcp_stdio_core::{KernelSupport, Sandbox, SandboxPlan};

    pub(super) fn probe() -> KernelSupport {
        KernelSupport::default()
    }

    /// Nothing to apply: the plan (no Landlock) has every gap, and it got
    /// here only under best effort.
    pub(super) fn install(
        _cmd: &mut std::process::Command,
        _sandbox: &Sandbox,
        _plan: &SandboxPlan,
    ) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
