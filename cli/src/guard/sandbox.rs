//! The guard's sandbox for its server (Linux): flags, the `[sandbox]` table
//! of `--config`, and the profiles a user starts from.
//!
//! The sandbox is on when `--sandbox PROFILE` is given, when any other
//! `--sandbox-*` flag is (the profile is then `base`), or when the config
//! file has a `[sandbox]` table. Every profile starts from `base`:
//!
//! - the system's programs and libraries, read and execute: `/usr`, `/bin`,
//!   `/sbin`, `/lib`, `/lib32`, `/lib64`, `/libx32`, `/nix/store` (those
//!   that exist); `/etc`, `/proc`, `/sys` and `/run/systemd/resolve` read;
//!   `/dev/null`, `/dev/zero`, `/dev/full` written, `/dev/random` and
//!   `/dev/urandom` read;
//! - the server program's installation, read and execute: the folder it is
//!   in (the folder above, when that is a `bin`), for the program as found in
//!   `PATH` and for the file it resolves to;
//! - the folder of every argument that names an existing file (the server's
//!   own script: `node /srv/server.js`), read; folders given as arguments are
//!   not added (a server's allow-list is the user's to grant);
//! - a private temporary folder, written, which the server gets as `TMPDIR`
//!   (unless its environment sets one), removed when the guard exits;
//! - network `none`.
//!
//! `npx` adds Node's installation (`node` as found in `PATH`), the npm cache
//! `~/.npm` (written and executed: npx installs packages there and runs
//! them; created when missing), `~/.npmrc` read, and TCP connections to
//! port 443 (the registry). `uvx` adds uv's and Python's installations
//! (`uv`, `python3`), `~/.cache/uv` and `~/.local/share/uv` (written and
//! executed; created when missing), `~/.config/uv` read, and port 443.
//!
//! Flags and the table add to the profile: `--sandbox-read`, `-exec`,
//! `-write PATH` (relative paths start from the guard's working folder, or
//! the config file's folder), `--sandbox-network none|unrestricted`,
//! `--sandbox-connect PORT` and `--sandbox-bind PORT` (which make the
//! network "these ports"), limits (`--sandbox-memory`, `-address-space`,
//! `-file-size` in bytes with an optional K, M or G; `--sandbox-processes`,
//! `-open-files`; `--sandbox-cpu` in seconds), `--sandbox-allow-ipc`, and
//! `--sandbox-best-effort`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use mcp_stdio_core::{
    CommandSpec, Enforcement, PathAccess, ResourceLimits, Sandbox, SandboxNetwork,
};
use serde::Deserialize;

/// A profile to start the sandbox from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Profile {
    /// The system, the server's program and script, a private temp folder; no network.
    Base,
    /// `base`, plus Node and the npm cache, and HTTPS connections (a server run by `npx`).
    Npx,
    /// `base`, plus uv, Python and uv's caches, and HTTPS connections (a server run by `uvx`).
    Uvx,
}

/// The network, as a flag gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NetworkArg {
    /// No TCP connections or listeners (and no interface, where the kernel allows).
    None,
    /// No network rule.
    Unrestricted,
}

/// The sandbox flags of `guard`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SandboxArgs {
    /// Run the server in a sandbox (Linux, Landlock) starting from PROFILE: base, npx or uvx.
    /// Any other --sandbox-* flag turns the sandbox on with the base profile.
    #[arg(
        long,
        value_enum,
        value_name = "PROFILE",
        help_heading = "Sandbox (Linux)"
    )]
    pub(crate) sandbox: Option<Profile>,
    /// Let the server read beneath PATH (repeatable).
    #[arg(long, value_name = "PATH", help_heading = "Sandbox (Linux)")]
    pub(crate) sandbox_read: Vec<PathBuf>,
    /// Let the server read and execute beneath PATH (repeatable).
    #[arg(
        long,
        value_name = "PATH",
        help_heading = "Sandbox (Linux)",
        hide_short_help = true
    )]
    pub(crate) sandbox_exec: Vec<PathBuf>,
    /// Let the server read and write beneath PATH (repeatable).
    #[arg(long, value_name = "PATH", help_heading = "Sandbox (Linux)")]
    pub(crate) sandbox_write: Vec<PathBuf>,
    /// The server's network: none or unrestricted [default: the profile's].
    #[arg(
        long,
        value_enum,
        value_name = "NETWORK",
        help_heading = "Sandbox (Linux)"
    )]
    pub(crate) sandbox_network: Option<NetworkArg>,
    /// Let the server make TCP connections to PORT, on any host (repeatable).
    #[arg(
        long,
        value_name = "PORT",
        help_heading = "Sandbox (Linux)",
        hide_short_help = true
    )]
    pub(crate) sandbox_connect: Vec<u16>,
    /// Let the server listen on TCP PORT (repeatable).
    #[arg(
        long,
        value_name = "PORT",
        help_heading = "Sandbox (Linux)",
        hide_short_help = true
    )]
    pub(crate) sandbox_bind: Vec<u16>,
    /// Memory (heap and private writable mappings) the server may use, in bytes (K, M, G).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = "Sandbox (Linux)", hide_short_help = true)]
    pub(crate) sandbox_memory: Option<u64>,
    /// Virtual address space the server may use, in bytes (K, M, G); too strict for Node.
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = "Sandbox (Linux)", hide_short_help = true)]
    pub(crate) sandbox_address_space: Option<u64>,
    /// Processes and threads the server may run (counted inside the sandbox where the kernel
    /// allows a user namespace).
    #[arg(
        long,
        value_name = "N",
        help_heading = "Sandbox (Linux)",
        hide_short_help = true
    )]
    pub(crate) sandbox_processes: Option<u64>,
    /// CPU seconds the server may use.
    #[arg(
        long,
        value_name = "SECONDS",
        help_heading = "Sandbox (Linux)",
        hide_short_help = true
    )]
    pub(crate) sandbox_cpu: Option<u64>,
    /// Largest file the server may write, in bytes (K, M, G).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, help_heading = "Sandbox (Linux)", hide_short_help = true)]
    pub(crate) sandbox_file_size: Option<u64>,
    /// File descriptors the server may hold open.
    #[arg(
        long,
        value_name = "N",
        help_heading = "Sandbox (Linux)",
        hide_short_help = true
    )]
    pub(crate) sandbox_open_files: Option<u64>,
    /// Let the server signal processes and reach abstract Unix sockets outside its sandbox.
    #[arg(long, help_heading = "Sandbox (Linux)", hide_short_help = true)]
    pub(crate) sandbox_allow_ipc: bool,
    /// Run with what the kernel can enforce, recording the rest, instead of refusing to start.
    #[arg(long, help_heading = "Sandbox (Linux)", hide_short_help = true)]
    pub(crate) sandbox_best_effort: bool,
}

impl SandboxArgs {
    fn any(&self) -> bool {
        self.sandbox.is_some()
            || !self.sandbox_read.is_empty()
            || !self.sandbox_exec.is_empty()
            || !self.sandbox_write.is_empty()
            || self.sandbox_network.is_some()
            || !self.sandbox_connect.is_empty()
            || !self.sandbox_bind.is_empty()
            || self.sandbox_memory.is_some()
            || self.sandbox_address_space.is_some()
            || self.sandbox_processes.is_some()
            || self.sandbox_cpu.is_some()
            || self.sandbox_file_size.is_some()
            || self.sandbox_open_files.is_some()
            || self.sandbox_allow_ipc
            || self.sandbox_best_effort
    }
}

/// The `[sandbox]` table of `--config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSandbox {
    profile: Option<Profile>,
    #[serde(default)]
    read: Vec<PathBuf>,
    #[serde(default)]
    exec: Vec<PathBuf>,
    #[serde(default)]
    write: Vec<PathBuf>,
    network: Option<NetworkArg>,
    #[serde(default)]
    connect: Vec<u16>,
    #[serde(default)]
    bind: Vec<u16>,
    memory_bytes: Option<u64>,
    address_space_bytes: Option<u64>,
    processes: Option<u64>,
    cpu_seconds: Option<u64>,
    file_size_bytes: Option<u64>,
    open_files: Option<u64>,
    allow_ipc: Option<bool>,
    best_effort: Option<bool>,
}

/// The sandbox settings as resolved, before the server command is known.
#[derive(Debug, Clone)]
pub(crate) struct SandboxSettings {
    profile: Profile,
    /// Extra rules, absolute.
    rules: Vec<(PathBuf, PathAccess)>,
    network: Option<SandboxNetwork>,
    limits: ResourceLimits,
    allow_ipc: bool,
    best_effort: bool,
}

/// Bytes with an optional binary suffix: `1048576`, `64K`, `512M`, `2G`.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("{s:?}: the suffix must be K, M or G")),
            };
            (&t[..i], mult)
        }
        _ => (t, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a number of bytes (like 1048576, 64K, 512M, 2G)"))
}

fn absolute(path: &Path, base: Option<&Path>) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    match base {
        Some(base) => base.join(path),
        None => std::path::absolute(path).unwrap_or_else(|_| path.to_owned()),
    }
}

impl SandboxSettings {
    /// The flags over the file's table; `None` when neither asks for a
    /// sandbox. `config` is the config file's path (its folder is where the
    /// table's relative paths start).
    pub(crate) fn resolve(
        args: &SandboxArgs,
        file: Option<&FileSandbox>,
        config: Option<&Path>,
    ) -> Result<Option<Self>, String> {
        if !args.any() && file.is_none() {
            return Ok(None);
        }
        let empty = FileSandbox::default();
        let file = file.unwrap_or(&empty);
        let folder = config.and_then(Path::parent);
        let mut rules = Vec::new();
        for (paths, access) in [
            (&file.read, PathAccess::READ),
            (&file.exec, PathAccess::READ_EXEC),
            (&file.write, PathAccess::WRITE),
        ] {
            rules.extend(paths.iter().map(|p| (absolute(p, folder), access)));
        }
        for (paths, access) in [
            (&args.sandbox_read, PathAccess::READ),
            (&args.sandbox_exec, PathAccess::READ_EXEC),
            (&args.sandbox_write, PathAccess::WRITE),
        ] {
            rules.extend(paths.iter().map(|p| (absolute(p, None), access)));
        }
        let connect: Vec<u16> = file
            .connect
            .iter()
            .chain(&args.sandbox_connect)
            .copied()
            .collect();
        let bind: Vec<u16> = file
            .bind
            .iter()
            .chain(&args.sandbox_bind)
            .copied()
            .collect();
        let network = match (
            args.sandbox_network.or(file.network),
            connect.is_empty() && bind.is_empty(),
        ) {
            (Some(NetworkArg::Unrestricted), _) => Some(SandboxNetwork::Unrestricted),
            (Some(NetworkArg::None), true) => Some(SandboxNetwork::None),
            (Some(NetworkArg::None), false) => return Err(
                "--sandbox-network none and --sandbox-connect/--sandbox-bind contradict each other"
                    .to_owned(),
            ),
            (None, false) => Some(SandboxNetwork::Ports { connect, bind }),
            (None, true) => None,
        };
        let limits = ResourceLimits {
            memory: args.sandbox_memory.or(file.memory_bytes),
            address_space: args.sandbox_address_space.or(file.address_space_bytes),
            processes: args.sandbox_processes.or(file.processes),
            file_size: args.sandbox_file_size.or(file.file_size_bytes),
            cpu_seconds: args.sandbox_cpu.or(file.cpu_seconds),
            open_files: args.sandbox_open_files.or(file.open_files),
        };
        Ok(Some(Self {
            profile: args.sandbox.or(file.profile).unwrap_or(Profile::Base),
            rules,
            network,
            limits,
            allow_ipc: args.sandbox_allow_ipc || file.allow_ipc.unwrap_or(false),
            best_effort: args.sandbox_best_effort || file.best_effort.unwrap_or(false),
        }))
    }

    /// The sandbox for `server` (its program already found, its environment
    /// resolved), with `tmp` as its private temporary folder. `env` reads the
    /// guard's environment (`HOME`, `PATH`).
    pub(crate) fn sandbox(
        &self,
        server: &CommandSpec,
        tmp: &Path,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Sandbox, String> {
        let mut sb = Sandbox::new();
        let path_var = env("PATH");
        let home = env("HOME").map(PathBuf::from);
        // base: the system.
        for dir in [
            "/usr",
            "/bin",
            "/sbin",
            "/lib",
            "/lib32",
            "/lib64",
            "/libx32",
            "/nix/store",
        ] {
            add_existing(&mut sb, Path::new(dir), PathAccess::READ_EXEC);
        }
        for dir in [
            "/etc",
            "/proc",
            "/sys",
            "/run/systemd/resolve",
            "/dev/random",
            "/dev/urandom",
        ] {
            add_existing(&mut sb, Path::new(dir), PathAccess::READ);
        }
        for dev in ["/dev/null", "/dev/zero", "/dev/full"] {
            add_existing(&mut sb, Path::new(dev), PathAccess::WRITE);
        }
        // The server's program, and its script.
        for prefix in install_prefixes(server.get_program(), path_var.as_deref()) {
            add_existing(&mut sb, &prefix, PathAccess::READ_EXEC);
        }
        let cwd = server
            .get_current_dir()
            .map(Path::to_owned)
            .or_else(|| std::env::current_dir().ok());
        for arg in server.get_args() {
            let p = Path::new(arg);
            let p = match (&cwd, p.is_absolute()) {
                (_, true) => p.to_owned(),
                (Some(cwd), false) => cwd.join(p),
                (None, false) => continue,
            };
            if p.is_file() {
                if let Some(folder) = p
                    .parent()
                    .filter(|f| Some(*f) != home.as_deref() && *f != Path::new("/"))
                {
                    add_existing(&mut sb, folder, PathAccess::READ);
                }
            }
        }
        sb.write(tmp);
        let mut network = SandboxNetwork::None;
        match self.profile {
            Profile::Base => {}
            Profile::Npx => {
                for prefix in install_prefixes(OsStr::new("node"), path_var.as_deref()) {
                    add_existing(&mut sb, &prefix, PathAccess::READ_EXEC);
                }
                if let Some(home) = &home {
                    cache(&mut sb, &home.join(".npm"))?;
                    add_existing(&mut sb, &home.join(".npmrc"), PathAccess::READ);
                }
                network = SandboxNetwork::Ports {
                    connect: vec![443],
                    bind: vec![],
                };
            }
            Profile::Uvx => {
                for program in ["uv", "uvx", "python3"] {
                    for prefix in install_prefixes(OsStr::new(program), path_var.as_deref()) {
                        add_existing(&mut sb, &prefix, PathAccess::READ_EXEC);
                    }
                }
                if let Some(home) = &home {
                    cache(&mut sb, &home.join(".cache/uv"))?;
                    cache(&mut sb, &home.join(".local/share/uv"))?;
                    add_existing(&mut sb, &home.join(".config/uv"), PathAccess::READ);
                }
                network = SandboxNetwork::Ports {
                    connect: vec![443],
                    bind: vec![],
                };
            }
        }
        for (path, access) in &self.rules {
            sb.allow(path, *access);
        }
        sb.network(self.network.clone().unwrap_or(network))
            .limits(self.limits)
            .isolate_ipc(!self.allow_ipc)
            .enforcement(if self.best_effort {
                Enforcement::BestEffort
            } else {
                Enforcement::Required
            });
        sb.validate().map_err(|e| e.to_string())?;
        Ok(sb)
    }
}

fn add_existing(sb: &mut Sandbox, path: &Path, access: PathAccess) {
    if path.exists() {
        sb.allow(path, access);
    }
}

/// A cache folder a profile writes and executes in, created when missing.
fn cache(sb: &mut Sandbox, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("sandbox profile: creating {}: {e}", dir.display()))?;
    sb.allow(dir, PathAccess::WRITE_EXEC);
    Ok(())
}

/// Where `program` is installed: for the program as found in `path` and for
/// the file it resolves to, its folder, or the folder above when that is a
/// `bin`. The system's own folders (already in `base`) and `/` are left out.
fn install_prefixes(program: &OsStr, path: Option<&OsStr>) -> Vec<PathBuf> {
    let found = if Path::new(program).components().count() > 1 {
        Some(PathBuf::from(program))
    } else {
        path.and_then(|p| super::server_env::find_program(program, p).ok())
    };
    let Some(found) = found else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let real = std::fs::canonicalize(&found).ok();
    for file in std::iter::once(found).chain(real) {
        let Some(folder) = file.parent() else {
            continue;
        };
        let prefix = if folder.file_name() == Some(OsStr::new("bin")) {
            folder.parent().unwrap_or(folder)
        } else {
            folder
        };
        let system = ["/", "/usr", "/usr/local/bin", "/bin", "/sbin", "/usr/bin"];
        if !system.iter().any(|s| prefix == Path::new(s)) && !out.iter().any(|p| p == prefix) {
            out.push(prefix.to_owned());
        }
    }
    out
}

/// The server's private temporary folder: made before the first spawn,
/// removed when the guard exits.
pub(crate) struct PrivateTmp(PathBuf);

impl PrivateTmp {
    /// A new folder `mcp-stdio-sandbox-<pid>-<n>` in the guard's temp folder,
    /// readable by its owner only.
    pub(crate) fn new() -> Result<Self, String> {
        let base = std::env::temp_dir();
        for n in 0..100u32 {
            let dir = base.join(format!("mcp-stdio-sandbox-{}-{n}", std::process::id()));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(format!(
                        "sandbox: creating a temporary folder in {}: {e}",
                        base.display()
                    ))
                }
            }
        }
        Err(format!(
            "sandbox: no free temporary folder name in {}",
            base.display()
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("12T").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    fn settings(args: &SandboxArgs) -> SandboxSettings {
        SandboxSettings::resolve(args, None, None)
            .expect("resolves")
            .expect("on")
    }

    #[test]
    fn no_flag_no_table_no_sandbox_and_any_flag_turns_it_on() {
        assert!(
            SandboxSettings::resolve(&SandboxArgs::default(), None, None)
                .expect("resolves")
                .is_none()
        );
        let s = settings(&SandboxArgs {
            sandbox_processes: Some(10),
            ..SandboxArgs::default()
        });
        assert_eq!(s.profile, Profile::Base);
        assert_eq!(s.limits.processes, Some(10));
    }

    #[test]
    fn the_base_profile_grants_the_system_the_program_and_its_script_but_not_argument_folders() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let script = tmp.path().join("srv/server.sh");
        std::fs::create_dir_all(script.parent().expect("parent")).expect("mkdir");
        std::fs::write(&script, "").expect("write");
        let data = tmp.path().join("data");
        std::fs::create_dir(&data).expect("mkdir");
        let mut server = CommandSpec::new("/bin/sh");
        server.arg(&script).arg(&data);
        let private = tmp.path().join("private");
        std::fs::create_dir(&private).expect("mkdir");
        let sb = settings(&SandboxArgs {
            sandbox: Some(Profile::Base),
            sandbox_write: vec![tmp.path().join("out")],
            ..SandboxArgs::default()
        })
        .sandbox(&server, &private, |k| std::env::var_os(k))
        .expect("sandbox");
        let rules = sb.merged_paths();
        let has = |p: &Path, a: PathAccess| rules.iter().any(|r| r.path == p && r.access == a);
        assert!(has(Path::new("/usr"), PathAccess::READ_EXEC));
        assert!(has(Path::new("/etc"), PathAccess::READ));
        assert!(has(&tmp.path().join("srv"), PathAccess::READ));
        assert!(has(&private, PathAccess::WRITE));
        assert!(has(&tmp.path().join("out"), PathAccess::WRITE));
        assert!(!rules.iter().any(|r| r.path == data), "{rules:?}");
        assert_eq!(sb.get_network(), &SandboxNetwork::None);
        assert_eq!(sb.get_enforcement(), Enforcement::Required);
    }

    #[test]
    fn ports_make_the_network_ports_and_contradictions_are_refused() {
        let s = settings(&SandboxArgs {
            sandbox_connect: vec![443],
            ..SandboxArgs::default()
        });
        assert_eq!(
            s.network,
            Some(SandboxNetwork::Ports {
                connect: vec![443],
                bind: vec![]
            })
        );
        let err = SandboxSettings::resolve(
            &SandboxArgs {
                sandbox_network: Some(NetworkArg::None),
                sandbox_bind: vec![8080],
                ..SandboxArgs::default()
            },
            None,
            None,
        )
        .expect_err("contradiction");
        assert!(err.contains("contradict"), "{err}");
    }

    #[test]
    fn the_table_resolves_relative_paths_from_the_config_folder_and_flags_win() {
        let file: FileSandbox = toml::from_str(
            "profile = \"npx\"\nread = [\"data\"]\nnetwork = \"none\"\nmemory_bytes = 1000\nbest_effort = true\n",
        )
        .expect("parses");
        let s = SandboxSettings::resolve(
            &SandboxArgs {
                sandbox_memory: Some(2000),
                ..SandboxArgs::default()
            },
            Some(&file),
            Some(Path::new("/etc/mcp/guard.toml")),
        )
        .expect("resolves")
        .expect("on");
        assert_eq!(s.profile, Profile::Npx);
        assert_eq!(
            s.rules,
            [(PathBuf::from("/etc/mcp/data"), PathAccess::READ)]
        );
        assert_eq!(s.network, Some(SandboxNetwork::None));
        assert_eq!(s.limits.memory, Some(2000));
        assert!(s.best_effort);
        assert!(toml::from_str::<FileSandbox>("bogus = 1\n").is_err());
    }
}
