//! The environment the guard's server gets, and the secrets read from files.
//!
//! Flags (also settable in `--config`, see `crate::config`):
//!
//! - `--env-clear`: the server starts with an empty environment;
//! - `--env-pass NAME`: the guard's own `NAME` is passed on (a name the
//!   guard's environment does not have is not passed, and the guard says so
//!   once on stderr: a host that dropped a variable is the usual cause);
//! - `--env NAME=VALUE`: sets `NAME`;
//! - `--env-file NAME=PATH`: sets `NAME` to the file's bytes, one trailing
//!   newline (`\n` or `\r\n`) removed. The value is a secret: the guard masks
//!   it wherever it writes (its stderr, the audit log, the metrics file; see
//!   `mcp_stdio_core::Secrets`). A file that cannot be read, is empty, is
//!   larger than [`MAX_ENV_FILE_BYTES`] or holds a NUL byte, and a value
//!   shorter than `MIN_SECRET_BYTES` (4), are usage errors.
//!
//! Names must be non-empty, without `=` or NUL. A name given by two
//! different flags (`--env X=1 --env-file X=…`), or two keys of the file, is
//! a usage error; repeated with the same flag, the last one wins; a flag
//! overrides the file's entry for the same name.
//!
//! Finding the program: with `--env-clear` and no `PATH` passed or set, the
//! server program is looked up in the *guard's* `PATH`, so
//! `--env-clear -- node server.js` starts the same `node` as without it;
//! the server itself then has no `PATH` (a `#!/usr/bin/env node` script,
//! `npx`, or a server that starts other programs needs `--env-pass PATH`).
//! Otherwise the program is looked up in the `PATH` the server gets, as
//! `std::process::Command` does.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use mcp_stdio_core::{CommandSpec, Secrets, SecretsError, MAX_SECRET_BYTES, MIN_SECRET_BYTES};

/// Largest `--env-file` file: 64 KiB (the longest secret the guard masks,
/// `mcp_stdio_core::MAX_SECRET_BYTES`).
pub(crate) const MAX_ENV_FILE_BYTES: usize = MAX_SECRET_BYTES;

/// The environment flags of `guard`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct EnvArgs {
    /// Start the server with an empty environment (then --env-pass, --env and --env-file add to
    /// it). The server program is still found through the guard's PATH.
    #[arg(long, help_heading = "Server environment")]
    pub(crate) env_clear: bool,
    /// Pass NAME from the guard's environment to the server (repeatable; not set there: not
    /// passed, and said on stderr).
    #[arg(long, value_name = "NAME", help_heading = "Server environment")]
    pub(crate) env_pass: Vec<OsString>,
    /// Set NAME to VALUE for the server (repeatable).
    #[arg(long, value_name = "NAME=VALUE", help_heading = "Server environment")]
    pub(crate) env: Vec<OsString>,
    /// Set NAME to the contents of the file at PATH, one trailing newline removed (repeatable; at
    /// most 64 KiB). A secret: masked in everything the guard writes.
    #[arg(long, value_name = "NAME=PATH", help_heading = "Server environment")]
    pub(crate) env_file: Vec<OsString>,
}

/// The same settings from a `--config` file (`env_clear`, `env_pass`,
/// `env`, `env_file`); relative paths start from the file's folder.
#[derive(Debug, Default)]
pub(crate) struct FileEnv<'a> {
    pub(crate) config: Option<&'a Path>,
    pub(crate) clear: Option<bool>,
    pub(crate) pass: Option<Vec<String>>,
    pub(crate) set: Option<BTreeMap<String, String>>,
    pub(crate) files: Option<BTreeMap<String, PathBuf>>,
}

/// Why the environment settings were refused (exit 2). Never shows a value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnvError {
    /// A name that is empty, or holds `=` or NUL.
    #[error("{origin}: {name:?} is not a variable name ({why})")]
    BadName {
        origin: String,
        name: String,
        why: &'static str,
    },
    /// `--env`/`--env-file` without `NAME=`.
    #[error("{origin} expects NAME={what}; {arg:?} has no `=`")]
    NoEquals {
        origin: &'static str,
        what: &'static str,
        arg: String,
    },
    /// One name from two different settings of the same level.
    #[error("{name} is given by both {first} and {second}; give it once")]
    Conflict {
        name: String,
        first: String,
        second: String,
    },
    /// A value holding a NUL byte, which no environment variable can hold.
    #[error(
        "{origin}: the value of {name} holds a NUL byte, which an environment variable cannot"
    )]
    Nul { origin: String, name: String },
    /// The file could not be read.
    #[error("{origin}: cannot read {path} for {name}: {error}")]
    Unreadable {
        origin: String,
        name: String,
        path: String,
        error: io::Error,
    },
    /// The file is empty (after its trailing newline).
    #[error("{origin}: {path} (for {name}) is empty")]
    Empty {
        origin: String,
        name: String,
        path: String,
    },
    /// The file is larger than [`MAX_ENV_FILE_BYTES`].
    #[error("{origin}: {path} (for {name}) is larger than {MAX_ENV_FILE_BYTES} bytes")]
    TooLarge {
        origin: String,
        name: String,
        path: String,
    },
    /// The value is not UTF-8 (only where the OS needs it).
    #[cfg(not(unix))]
    #[error("{origin}: {path} (for {name}) is not UTF-8")]
    NotUtf8 {
        origin: String,
        name: String,
        path: String,
    },
    /// The value cannot be masked (too short, too many or too much).
    #[error("{origin}: {path} (for {name}): {why}")]
    Secret {
        origin: String,
        name: String,
        path: String,
        why: String,
    },
}

/// What a name is set from.
#[derive(Debug, Clone)]
enum Source {
    Pass,
    Value(OsString),
    File(PathBuf),
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Value(_) => "env",
            Self::File(_) => "file",
        }
    }
}

/// One entry with where it was written.
struct Entry {
    name: String,
    source: Source,
    origin: String,
}

/// The resolved environment of the server. Its `Debug` shows names only.
#[derive(Clone, Default)]
pub(crate) struct ServerEnv {
    clear: bool,
    /// Every variable set, by name.
    vars: Vec<(OsString, OsString)>,
    /// Names of the values read from files.
    from_files: Vec<String>,
    secrets: Secrets,
    /// `--env-pass` names the guard's environment does not have.
    missing: Vec<String>,
}

impl std::fmt::Debug for ServerEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerEnv")
            .field("clear", &self.clear)
            .field(
                "names",
                &self.vars.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("from_files", &self.from_files)
            .field("secrets", &self.secrets)
            .field("missing", &self.missing)
            .finish()
    }
}

impl ServerEnv {
    /// The file's settings, then the flags'; `guard_env` reads the guard's
    /// own environment. Reads the `--env-file` files.
    pub(crate) fn resolve(
        args: &EnvArgs,
        file: FileEnv<'_>,
        guard_env: impl Fn(&OsStr) -> Option<OsString>,
    ) -> Result<Self, EnvError> {
        let shown = file
            .config
            .map(|p| format!("config file {}", p.display()))
            .unwrap_or_default();
        let folder = file.config.and_then(Path::parent).unwrap_or(Path::new(""));
        let mut from_file = Vec::new();
        for name in file.pass.unwrap_or_default() {
            from_file.push(Entry {
                origin: format!("{shown}: env_pass"),
                name,
                source: Source::Pass,
            });
        }
        for (name, value) in file.set.unwrap_or_default() {
            from_file.push(Entry {
                origin: format!("{shown}: env.{name}"),
                name,
                source: Source::Value(value.into()),
            });
        }
        for (name, path) in file.files.unwrap_or_default() {
            from_file.push(Entry {
                origin: format!("{shown}: env_file.{name}"),
                name,
                source: Source::File(folder.join(path)),
            });
        }
        let mut from_flags = Vec::new();
        for name in &args.env_pass {
            from_flags.push(Entry {
                name: name.to_string_lossy().into_owned(),
                source: Source::Pass,
                origin: "--env-pass".to_owned(),
            });
        }
        for arg in &args.env {
            let (name, value) = split_arg(arg, "--env", "VALUE")?;
            from_flags.push(Entry {
                name,
                source: Source::Value(value),
                origin: "--env".to_owned(),
            });
        }
        for arg in &args.env_file {
            let (name, path) = split_arg(arg, "--env-file", "PATH")?;
            from_flags.push(Entry {
                name,
                source: Source::File(path.into()),
                origin: "--env-file".to_owned(),
            });
        }
        let mut chosen: BTreeMap<String, Entry> = BTreeMap::new();
        // The file's entries, then the flags': a flag overrides the file.
        for entries in [from_file, from_flags] {
            let mut kinds: BTreeMap<String, (&'static str, String)> = BTreeMap::new();
            for entry in entries {
                check_name(&entry.name, &entry.origin)?;
                let kind = entry.source.kind();
                if let Some((first, origin)) = kinds.get(&entry.name) {
                    if *first != kind {
                        return Err(EnvError::Conflict {
                            name: entry.name,
                            first: origin.clone(),
                            second: entry.origin,
                        });
                    }
                }
                kinds.insert(entry.name.clone(), (kind, entry.origin.clone()));
                chosen.insert(entry.name.clone(), entry);
            }
        }
        let mut env = Self {
            clear: args.env_clear || file.clear.unwrap_or(false),
            ..Self::default()
        };
        let mut secret_values = Vec::new();
        let mut secret_origins = Vec::new();
        for (name, entry) in chosen {
            let value = match entry.source {
                Source::Pass => match guard_env(OsStr::new(&name)) {
                    Some(v) => v,
                    None => {
                        env.missing.push(name);
                        continue;
                    }
                },
                Source::Value(v) => v,
                Source::File(path) => {
                    let bytes = read_value(&name, &path, &entry.origin)?;
                    secret_values.push(bytes.clone());
                    secret_origins.push((entry.origin.clone(), name.clone(), path.clone()));
                    env.from_files.push(name.clone());
                    to_os_string(bytes, &name, &path, &entry.origin)?
                }
            };
            if has_nul(&value) {
                return Err(EnvError::Nul {
                    origin: entry.origin,
                    name,
                });
            }
            env.vars.push((name.into(), value));
        }
        env.secrets = Secrets::new(&secret_values).map_err(|e| {
            // The value named by the error, or the last one (too many, too much).
            let index = match &e {
                SecretsError::TooShort { index, .. } | SecretsError::TooLong { index, .. } => {
                    *index
                }
                _ => secret_origins.len().saturating_sub(1),
            };
            let (origin, name, path) = secret_origins.get(index).cloned().unwrap_or_default();
            let why = match e {
                SecretsError::TooShort { len, .. } => format!(
                    "the value is {len} bytes; a secret from a file must be at least {} bytes \
                     to be masked (give a value that is not secret with --env)",
                    MIN_SECRET_BYTES
                ),
                other => other.to_string(),
            };
            EnvError::Secret {
                origin,
                name,
                path: path.display().to_string(),
                why,
            }
        })?;
        Ok(env)
    }

    /// The secrets read from files, to mask.
    pub(crate) fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// `--env-pass` names the guard's environment does not have.
    pub(crate) fn missing(&self) -> &[String] {
        &self.missing
    }

    /// The command to spawn for `spec`: its environment as resolved, and,
    /// with `--env-clear` and no `PATH` for the server, its program found in
    /// the guard's `PATH` (`guard_path`). A program found nowhere is a
    /// `NotFound` error, as a spawn would give.
    pub(crate) fn command(
        &self,
        spec: &CommandSpec,
        guard_path: Option<&OsStr>,
    ) -> io::Result<CommandSpec> {
        let server_has_path = self.vars.iter().any(|(k, _)| k == "PATH");
        let program = match guard_path {
            Some(path) if self.clear && !server_has_path => {
                find_program(spec.get_program(), path)?.into_os_string()
            }
            _ => spec.get_program().to_owned(),
        };
        let mut out = CommandSpec::new(program);
        out.args(spec.get_args());
        if self.clear || spec.get_env_clear() {
            out.env_clear();
        }
        for (k, v) in spec.get_envs() {
            match v {
                Some(v) => out.env(k, v),
                None => out.env_remove(k),
            };
        }
        for (k, v) in &self.vars {
            out.env(k, v);
        }
        if let Some(dir) = spec.get_current_dir() {
            out.current_dir(dir);
        }
        Ok(out)
    }
}

/// `NAME=REST` of a flag's argument (a name that is not UTF-8 is refused).
fn split_arg(
    arg: &OsStr,
    origin: &'static str,
    what: &'static str,
) -> Result<(String, OsString), EnvError> {
    let bytes = arg.as_encoded_bytes();
    let Some(eq) = bytes.iter().position(|&b| b == b'=') else {
        return Err(EnvError::NoEquals {
            origin,
            what,
            arg: arg.to_string_lossy().into_owned(),
        });
    };
    let name = std::str::from_utf8(&bytes[..eq]).map_err(|_| EnvError::BadName {
        origin: origin.to_owned(),
        name: String::from_utf8_lossy(&bytes[..eq]).into_owned(),
        why: "not UTF-8",
    })?;
    Ok((name.to_owned(), rest_os(arg, eq + 1)))
}

/// The bytes of `arg` from `from` on (after an ASCII `=`), as an `OsString`.
fn rest_os(arg: &OsStr, from: usize) -> OsString {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        OsStr::from_bytes(&arg.as_bytes()[from..]).to_owned()
    }
    #[cfg(not(unix))]
    {
        OsString::from(String::from_utf8_lossy(&arg.as_encoded_bytes()[from..]).into_owned())
    }
}

fn check_name(name: &str, origin: &str) -> Result<(), EnvError> {
    let why = if name.is_empty() {
        "empty"
    } else if name.contains('=') {
        "it holds `=`"
    } else if name.contains('\0') {
        "it holds a NUL byte"
    } else {
        return Ok(());
    };
    Err(EnvError::BadName {
        origin: origin.to_owned(),
        name: name.to_owned(),
        why,
    })
}

fn has_nul(value: &OsStr) -> bool {
    value.as_encoded_bytes().contains(&0)
}

/// The file's bytes, one trailing newline removed; at most
/// [`MAX_ENV_FILE_BYTES`] read.
fn read_value(name: &str, path: &Path, origin: &str) -> Result<Vec<u8>, EnvError> {
    let shown = path.display().to_string();
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            f.take(MAX_ENV_FILE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(|error| EnvError::Unreadable {
            origin: origin.to_owned(),
            name: name.to_owned(),
            path: shown.clone(),
            error,
        })?;
    if bytes.len() > MAX_ENV_FILE_BYTES {
        return Err(EnvError::TooLarge {
            origin: origin.to_owned(),
            name: name.to_owned(),
            path: shown,
        });
    }
    if bytes.ends_with(b"\r\n") {
        bytes.truncate(bytes.len() - 2);
    } else if bytes.ends_with(b"\n") {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(EnvError::Empty {
            origin: origin.to_owned(),
            name: name.to_owned(),
            path: shown,
        });
    }
    if bytes.contains(&0) {
        return Err(EnvError::Nul {
            origin: format!("{origin} {shown}"),
            name: name.to_owned(),
        });
    }
    Ok(bytes)
}

fn to_os_string(
    bytes: Vec<u8>,
    name: &str,
    path: &Path,
    origin: &str,
) -> Result<OsString, EnvError> {
    #[cfg(unix)]
    {
        let _ = (name, path, origin);
        Ok(std::os::unix::ffi::OsStringExt::from_vec(bytes))
    }
    #[cfg(not(unix))]
    {
        String::from_utf8(bytes)
            .map(OsString::from)
            .map_err(|_| EnvError::NotUtf8 {
                origin: origin.to_owned(),
                name: name.to_owned(),
                path: path.display().to_string(),
            })
    }
}

/// `program` as `execvp` would find it in `path`: itself when it holds a
/// slash; else the first executable file of that name in a folder of
/// `path` (an empty entry is the current folder), or the first file of
/// that name when none is executable (its spawn then says why).
pub(crate) fn find_program(program: &OsStr, path: &OsStr) -> io::Result<PathBuf> {
    if program.as_encoded_bytes().contains(&b'/') || program.is_empty() {
        return Ok(PathBuf::from(program));
    }
    let mut not_executable = None;
    for folder in std::env::split_paths(path) {
        let folder = if folder.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            folder
        };
        let candidate = folder.join(program);
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if is_executable(&meta) {
            return Ok(candidate);
        }
        not_executable.get_or_insert(candidate);
    }
    not_executable.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    true
}

#[cfg(test)]
mod tests;
