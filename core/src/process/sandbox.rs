//! A sandbox for a spawned process: what it may touch, as pure data.
//!
//! [`Sandbox`] says which paths the child may read, write or execute, what
//! network it may use, its resource limits, and whether signals and abstract
//! Unix sockets outside the sandbox are out of its reach. It is validated here
//! ([`Sandbox::validate`]) and planned against what the kernel offers
//! ([`Sandbox::plan`]); `mcp-stdio-sys` applies the plan in the child between
//! `fork` and `exec`, so the parent stays unconfined.
//!
//! # What enforces what (Linux)
//!
//! | asked for | enforced by | needs |
//! |---|---|---|
//! | paths | Landlock filesystem rules | Landlock ABI 1 (truncation: 3) |
//! | network `none` / `ports` | Landlock TCP bind and connect rules | ABI 4 |
//! | `isolate_ipc` | Landlock scopes: signals, abstract Unix sockets | ABI 6 |
//! | limits | `setrlimit` | always |
//! | a process count per sandbox | a user namespace of its own | unprivileged user namespaces |
//! | no network beyond TCP | an empty network namespace | unprivileged user namespaces |
//!
//! Landlock filters TCP by port, not by address: `ports` allows those ports on
//! every host. UDP and Unix sockets are outside Landlock's network rules: with
//! network `none` the child also gets an empty network namespace where the
//! kernel allows one, which leaves it no interface at all. That namespace is
//! recorded, not required (it is refused on some distributions by policy).
//!
//! # When the kernel cannot
//!
//! [`Sandbox::plan`] lists every part of the request the kernel cannot enforce
//! as a [`SandboxGap`]. Under [`Enforcement::Required`] (the default) a plan
//! with gaps must not run: the spawn fails with the gaps in the message. Under
//! [`Enforcement::BestEffort`] it runs with what the kernel offers, and the
//! gaps are recorded.
//!
//! # Worst case
//!
//! At most [`MAX_SANDBOX_PATHS`] path rules and [`MAX_SANDBOX_PORTS`] ports:
//! the plan is linear in them, and the child's setup opens one descriptor per
//! path rule (in the parent, before the `fork`).

use std::fmt;
use std::path::{Path, PathBuf};

/// Path rules a sandbox may hold. Each one costs an open descriptor while the
/// child is being spawned, and the ruleset is copied into the kernel.
pub const MAX_SANDBOX_PATHS: usize = 256;

/// TCP ports a sandbox may list (connect and bind together).
pub const MAX_SANDBOX_PORTS: usize = 64;

/// The newest Landlock ABI this crate plans for: 7 (Linux 6.15). A newer
/// kernel is used at this level.
pub const LANDLOCK_ABI_KNOWN: u32 = 7;

/// What a path rule allows beneath its path. Reading is always allowed; the
/// rest is added. Rules for the same path (or nested paths) add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathAccess {
    write: bool,
    exec: bool,
}

impl PathAccess {
    /// Read files and list directories.
    pub const READ: Self = Self {
        write: false,
        exec: false,
    };
    /// Read, and execute files (a program, an interpreter, a shared library).
    pub const READ_EXEC: Self = Self {
        write: false,
        exec: true,
    };
    /// Read, write, create, rename, truncate and remove; no executing.
    pub const WRITE: Self = Self {
        write: true,
        exec: false,
    };
    /// Everything: read, write and execute (a package cache that installs
    /// programs and runs them).
    pub const WRITE_EXEC: Self = Self {
        write: true,
        exec: true,
    };

    /// Whether writing is allowed.
    pub fn writes(self) -> bool {
        self.write
    }

    /// Whether executing is allowed.
    pub fn executes(self) -> bool {
        self.exec
    }

    /// Both rules' rights.
    #[must_use]
    pub fn union(self, other: Self) -> Self {
        Self {
            write: self.write || other.write,
            exec: self.exec || other.exec,
        }
    }

    /// `read`, `read+exec`, `write` or `write+exec`.
    pub fn as_str(self) -> &'static str {
        match (self.write, self.exec) {
            (false, false) => "read",
            (false, true) => "read+exec",
            (true, false) => "write",
            (true, true) => "write+exec",
        }
    }
}

/// One path rule: `access` beneath `path` (the path itself and everything
/// under it, when it is a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    /// An absolute path. It must exist when the child is spawned.
    pub path: PathBuf,
    /// What is allowed beneath it.
    pub access: PathAccess,
}

/// The network a sandboxed child may use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SandboxNetwork {
    /// No TCP connections and no TCP listeners (Landlock); no interface at all
    /// where an empty network namespace can be made.
    None,
    /// TCP connections to these ports and listeners on these ports only, on
    /// any address (Landlock filters ports, not addresses).
    Ports {
        /// Ports the child may connect to.
        connect: Vec<u16>,
        /// Ports the child may listen on.
        bind: Vec<u16>,
    },
    /// No network rule.
    #[default]
    Unrestricted,
}

impl SandboxNetwork {
    /// `none`, `ports` or `unrestricted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Ports { .. } => "ports",
            Self::Unrestricted => "unrestricted",
        }
    }
}

/// Resource limits (`setrlimit`, soft and hard alike, so the child cannot
/// raise them). `None` leaves the limit the parent has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceLimits {
    /// Bytes of data: heap and private writable mappings (`RLIMIT_DATA`).
    /// What "memory" means for most programs; runtimes that reserve large
    /// address ranges up front (V8, Go) still start.
    pub memory: Option<u64>,
    /// Bytes of virtual address space (`RLIMIT_AS`): stricter than `memory`,
    /// and too strict for runtimes that reserve address space up front.
    pub address_space: Option<u64>,
    /// Processes (and threads) of the child's user (`RLIMIT_NPROC`): counted
    /// inside the sandbox when it has a user namespace of its own, else
    /// across everything the user runs. The kernel exempts root.
    pub processes: Option<u64>,
    /// Bytes of the largest file the child may write (`RLIMIT_FSIZE`).
    pub file_size: Option<u64>,
    /// Seconds of CPU time (`RLIMIT_CPU`): `SIGXCPU`, then `SIGKILL`.
    pub cpu_seconds: Option<u64>,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
}

impl ResourceLimits {
    /// Each limit set, by name (as in the records), in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        [
            ("memory", self.memory),
            ("address_space", self.address_space),
            ("processes", self.processes),
            ("file_size", self.file_size),
            ("cpu_seconds", self.cpu_seconds),
            ("open_files", self.open_files),
        ]
        .into_iter()
        .filter_map(|(name, v)| Some((name, v?)))
    }
}

/// What happens when the kernel cannot enforce everything asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enforcement {
    /// Refuse to spawn, naming what cannot be enforced (the default).
    #[default]
    Required,
    /// Spawn with what the kernel offers, and record the gaps.
    BestEffort,
}

/// A sandbox for one spawned child. Build it with the setters, then
/// [`validate`](Self::validate); spawning validates again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sandbox {
    paths: Vec<PathRule>,
    network: SandboxNetwork,
    limits: ResourceLimits,
    isolate_ipc: bool,
    enforcement: Enforcement,
}

impl Sandbox {
    /// A sandbox that allows nothing on the filesystem, no network, no limits
    /// and IPC isolation on: add what the child needs.
    pub fn new() -> Self {
        Self {
            paths: Vec::new(),
            network: SandboxNetwork::None,
            limits: ResourceLimits::default(),
            isolate_ipc: true,
            enforcement: Enforcement::Required,
        }
    }

    /// Allows `access` beneath `path`.
    pub fn allow(&mut self, path: impl AsRef<Path>, access: PathAccess) -> &mut Self {
        self.paths.push(PathRule {
            path: path.as_ref().to_owned(),
            access,
        });
        self
    }

    /// Allows reading beneath `path`.
    pub fn read(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.allow(path, PathAccess::READ)
    }

    /// Allows reading and executing beneath `path`.
    pub fn read_exec(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.allow(path, PathAccess::READ_EXEC)
    }

    /// Allows reading and writing beneath `path`.
    pub fn write(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.allow(path, PathAccess::WRITE)
    }

    /// Sets the network.
    pub fn network(&mut self, network: SandboxNetwork) -> &mut Self {
        self.network = network;
        self
    }

    /// Sets the resource limits.
    pub fn limits(&mut self, limits: ResourceLimits) -> &mut Self {
        self.limits = limits;
        self
    }

    /// Whether signals to processes outside the sandbox and connections to
    /// abstract Unix sockets made outside it are refused (default: yes).
    pub fn isolate_ipc(&mut self, on: bool) -> &mut Self {
        self.isolate_ipc = on;
        self
    }

    /// What happens when the kernel cannot enforce everything.
    pub fn enforcement(&mut self, enforcement: Enforcement) -> &mut Self {
        self.enforcement = enforcement;
        self
    }

    /// The path rules, in the order given.
    pub fn get_paths(&self) -> &[PathRule] {
        &self.paths
    }

    /// The network.
    pub fn get_network(&self) -> &SandboxNetwork {
        &self.network
    }

    /// The resource limits.
    pub fn get_limits(&self) -> &ResourceLimits {
        &self.limits
    }

    /// Whether IPC outside the sandbox is out of reach.
    pub fn get_isolate_ipc(&self) -> bool {
        self.isolate_ipc
    }

    /// What happens when the kernel cannot enforce everything.
    pub fn get_enforcement(&self) -> Enforcement {
        self.enforcement
    }

    /// Checks the sandbox's own consistency (not the filesystem: a path's
    /// existence is checked when the child is spawned).
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), SandboxError> {
        if self.paths.len() > MAX_SANDBOX_PATHS {
            return Err(SandboxError::TooManyPaths {
                count: self.paths.len(),
            });
        }
        if let Some(rule) = self.paths.iter().find(|r| !r.path.is_absolute()) {
            return Err(SandboxError::RelativePath {
                path: rule.path.clone(),
            });
        }
        if let SandboxNetwork::Ports { connect, bind } = &self.network {
            let count = connect.len() + bind.len();
            if count > MAX_SANDBOX_PORTS {
                return Err(SandboxError::TooManyPorts { count });
            }
        }
        if let Some((name, _)) = self.limits.iter().find(|(_, v)| *v == 0) {
            return Err(SandboxError::ZeroLimit { limit: name });
        }
        Ok(())
    }

    /// The path rules merged: one rule per distinct path, its rights the union
    /// of every rule naming it, in the order each path first appears.
    pub fn merged_paths(&self) -> Vec<PathRule> {
        let mut merged: Vec<PathRule> = Vec::with_capacity(self.paths.len());
        for rule in &self.paths {
            match merged.iter_mut().find(|m| m.path == rule.path) {
                Some(m) => m.access = m.access.union(rule.access),
                None => merged.push(rule.clone()),
            }
        }
        merged
    }

    /// What of this sandbox `kernel` can enforce, and what it cannot.
    pub fn plan(&self, kernel: &KernelSupport) -> SandboxPlan {
        let abi = kernel.landlock_abi.min(LANDLOCK_ABI_KNOWN);
        let mut gaps = Vec::new();
        if abi == 0 {
            gaps.push(SandboxGap::Filesystem);
        } else {
            if abi < 3 {
                gaps.push(SandboxGap::Truncate);
            }
        }
        // Without Landlock at all, `Filesystem` says it for the network and
        // IPC rules too.
        let network_rules = self.network != SandboxNetwork::Unrestricted;
        if network_rules && (1..4).contains(&abi) {
            gaps.push(SandboxGap::Network);
        }
        if self.isolate_ipc && (1..6).contains(&abi) {
            gaps.push(SandboxGap::IpcScope);
        }
        // A user namespace of its own: for a process count per sandbox, and
        // for an empty network namespace under network `none`.
        let wants_userns = self.limits.processes.is_some() || self.network == SandboxNetwork::None;
        let user_namespace = wants_userns && kernel.user_namespaces;
        if self.limits.processes.is_some() && kernel.privileged {
            gaps.push(SandboxGap::ProcessLimitPrivileged);
        }
        SandboxPlan {
            landlock_abi: abi,
            kernel_landlock_abi: kernel.landlock_abi,
            filesystem: abi >= 1,
            network_rules: network_rules && abi >= 4,
            ipc_scope: self.isolate_ipc && abi >= 6,
            user_namespace,
            network_namespace: user_namespace && self.network == SandboxNetwork::None,
            gaps,
            enforcement: self.enforcement,
        }
    }
}

/// What the running kernel offers for sandboxing, as the sys layer found it
/// (or was told to pretend, in tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelSupport {
    /// The Landlock ABI version; 0 without Landlock.
    pub landlock_abi: u32,
    /// Whether an unprivileged user namespace (and a network namespace in it)
    /// can be made.
    pub user_namespaces: bool,
    /// Whether the child runs as root, which the kernel exempts from the
    /// process limit.
    pub privileged: bool,
}

/// A part of the request the kernel cannot enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SandboxGap {
    /// No Landlock: no path rule, network rule or IPC scope is enforced.
    Filesystem,
    /// Landlock below ABI 3: files may still be truncated.
    Truncate,
    /// Landlock below ABI 4: TCP connections and listeners are not restricted.
    Network,
    /// Landlock below ABI 6: signals and abstract Unix sockets outside the
    /// sandbox are reachable.
    IpcScope,
    /// The child runs as root, which the kernel exempts from the process limit.
    ProcessLimitPrivileged,
}

impl SandboxGap {
    /// A short name, as in the records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Filesystem => "landlock",
            Self::Truncate => "truncate",
            Self::Network => "network",
            Self::IpcScope => "ipc_scope",
            Self::ProcessLimitPrivileged => "process_limit_root",
        }
    }

    /// What is not enforced, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Filesystem => {
                "the kernel has no Landlock: no path, network or IPC rule can be enforced"
            }
            Self::Truncate => "Landlock below ABI 3: files may still be truncated",
            Self::Network => "Landlock below ABI 4: TCP connections and listeners are not restricted",
            Self::IpcScope => {
                "Landlock below ABI 6: signals and abstract Unix sockets outside the sandbox are reachable"
            }
            Self::ProcessLimitPrivileged => {
                "the server runs as root, which the kernel exempts from the process limit"
            }
        }
    }
}

impl fmt::Display for SandboxGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// What a sandbox becomes on one kernel: the parts enforced and the gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// The Landlock ABI the rules are written for (the kernel's, at most
    /// [`LANDLOCK_ABI_KNOWN`]); 0 without Landlock.
    pub landlock_abi: u32,
    /// The Landlock ABI the kernel reported (or was said to have).
    pub kernel_landlock_abi: u32,
    /// Path rules enforced.
    pub filesystem: bool,
    /// TCP rules enforced.
    pub network_rules: bool,
    /// Signal and abstract-socket scopes enforced.
    pub ipc_scope: bool,
    /// The child gets a user namespace of its own.
    pub user_namespace: bool,
    /// The child gets an empty network namespace.
    pub network_namespace: bool,
    /// What cannot be enforced.
    pub gaps: Vec<SandboxGap>,
    /// Whether gaps refuse the spawn.
    pub enforcement: Enforcement,
}

impl SandboxPlan {
    /// Whether the child may be spawned: no gaps, or best effort.
    pub fn may_spawn(&self) -> bool {
        self.gaps.is_empty() || self.enforcement == Enforcement::BestEffort
    }

    /// The refusal, when the plan may not spawn.
    pub fn refusal(&self) -> Option<SandboxError> {
        (!self.may_spawn()).then(|| SandboxError::NotEnforceable {
            gaps: self.gaps.clone(),
        })
    }
}

/// What was enforced, for an audit log or a metrics file: the plan with the
/// sandbox's rules, each gap named and described.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxRecord {
    /// `required` or `best_effort`.
    pub enforcement: &'static str,
    /// The Landlock ABI the rules were written for (0: none).
    pub landlock_abi: u32,
    /// The Landlock ABI the kernel reported.
    pub kernel_landlock_abi: u32,
    /// Each path rule (merged), with what it allows: `read`, `read+exec`,
    /// `write`, `write+exec`.
    pub paths: Vec<SandboxPathRecord>,
    /// `none`, `ports` or `unrestricted`.
    pub network: &'static str,
    /// With `ports`: the ports the child may connect to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_ports: Vec<u16>,
    /// With `ports`: the ports the child may listen on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bind_ports: Vec<u16>,
    /// The limits set, by name.
    pub limits: std::collections::BTreeMap<&'static str, u64>,
    /// Path rules enforced (Landlock).
    pub filesystem_enforced: bool,
    /// TCP rules enforced (Landlock ABI 4).
    pub network_enforced: bool,
    /// Signals and abstract Unix sockets outside the sandbox refused
    /// (Landlock ABI 6).
    pub ipc_scoped: bool,
    /// A user namespace of the child's own.
    pub user_namespace: bool,
    /// An empty network namespace.
    pub network_namespace: bool,
    /// What was asked and is not enforced (empty unless best effort).
    pub gaps: Vec<SandboxGapRecord>,
}

/// One path rule in a [`SandboxRecord`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxPathRecord {
    /// The path (lossy UTF-8).
    pub path: String,
    /// `read`, `read+exec`, `write` or `write+exec`.
    pub access: &'static str,
}

/// One gap in a [`SandboxRecord`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxGapRecord {
    /// Its short name ([`SandboxGap::as_str`]).
    pub gap: &'static str,
    /// What is not enforced, in words.
    pub what: &'static str,
}

impl SandboxPlan {
    /// The record of `sandbox` under this plan.
    pub fn record(&self, sandbox: &Sandbox) -> SandboxRecord {
        let (connect_ports, bind_ports) = match sandbox.get_network() {
            SandboxNetwork::Ports { connect, bind } => (connect.clone(), bind.clone()),
            _ => (Vec::new(), Vec::new()),
        };
        SandboxRecord {
            enforcement: match self.enforcement {
                Enforcement::Required => "required",
                Enforcement::BestEffort => "best_effort",
            },
            landlock_abi: self.landlock_abi,
            kernel_landlock_abi: self.kernel_landlock_abi,
            paths: sandbox
                .merged_paths()
                .into_iter()
                .map(|r| SandboxPathRecord {
                    path: r.path.to_string_lossy().into_owned(),
                    access: r.access.as_str(),
                })
                .collect(),
            network: sandbox.get_network().as_str(),
            connect_ports,
            bind_ports,
            limits: sandbox.get_limits().iter().collect(),
            filesystem_enforced: self.filesystem,
            network_enforced: self.network_rules,
            ipc_scoped: self.ipc_scope,
            user_namespace: self.user_namespace,
            network_namespace: self.network_namespace,
            gaps: self
                .gaps
                .iter()
                .map(|g| SandboxGapRecord {
                    gap: g.as_str(),
                    what: g.describe(),
                })
                .collect(),
        }
    }
}

/// A sandbox that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// More than [`MAX_SANDBOX_PATHS`] path rules.
    #[error("the sandbox has {count} path rules; at most {MAX_SANDBOX_PATHS} are allowed")]
    TooManyPaths {
        /// How many were given.
        count: usize,
    },
    /// More than [`MAX_SANDBOX_PORTS`] ports.
    #[error("the sandbox lists {count} ports; at most {MAX_SANDBOX_PORTS} are allowed")]
    TooManyPorts {
        /// How many were given.
        count: usize,
    },
    /// A path rule with a relative path (relative to what, in the child?).
    #[error("sandbox path {path:?} is not absolute")]
    RelativePath {
        /// The path.
        path: PathBuf,
    },
    /// A limit of zero, which would stop the child from starting at all.
    #[error("sandbox limit {limit} is 0")]
    ZeroLimit {
        /// The limit's name.
        limit: &'static str,
    },
    /// The kernel cannot enforce what was asked, and enforcement is required.
    #[error("the kernel cannot enforce the sandbox asked for: {}; run with best effort to accept this", join_gaps(.gaps))]
    NotEnforceable {
        /// What cannot be enforced.
        gaps: Vec<SandboxGap>,
    },
}

fn join_gaps(gaps: &[SandboxGap]) -> String {
    gaps.iter()
        .map(|g| g.describe())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;
