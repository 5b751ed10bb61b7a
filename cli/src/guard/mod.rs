//! `mcp-stdio guard [OPTIONS] -- SERVER_COMMAND [ARGS…]`: a drop-in wrapper
//! for any MCP server.
//!
//! The host launches the guard where it launched the server. The guard
//! spawns the server in its own process group and stands between the two:
//! it reads the server's stdout continuously whatever the host does (G1),
//! enforces the wire limit both ways (G2/G3), moves non-protocol stdout
//! lines to stderr (G13), forwards the server's stderr within a budget and
//! keeps its tail (G10), drops anything for a cancelled id (G6), runs the
//! shutdown sequence (G11), and can write a hash-chained audit log (G12).

mod announce;
mod audit_log;
mod drive;
mod ended;
mod log_file;
mod otel;
pub(crate) mod sandbox;
pub(crate) mod server_env;
mod share;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcp_stdio_core::{CommandSpec, SandboxRecord};
use mcp_stdio_core::{GuardConfig, GuardReport, GuardSession, DEFAULT_MAX_WAITING_RECORDS};
use mcp_stdio_sys::stamp_at as stamp;
use mcp_stdio_tokio::driver::Runtime;
use mcp_stdio_tokio::leader::Leader;
use mcp_stdio_tokio::runtime::Tokio;
use serde::Serialize;

use crate::config::{GuardSettings, SettingsArgs};
use audit_log::AuditLog;
use drive::{ServerPipes, AUDIT_CLOSE};

/// Exit status for the guard's own usage errors (a bad flag, an unreadable
/// config or key file, an audit log that cannot be opened), before any server starts.
pub(crate) const EXIT_USAGE: u8 = 2;

/// How long the pin file's last write may take at exit.
const PIN_CLOSE: std::time::Duration = std::time::Duration::from_secs(5);

/// Arguments of `guard`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: the server's (128+N when killed by signal N); 75 when the guard \
closed the session; 2 for a usage error. -h shows the main options, --help all of them and more.",
    after_long_help = "Everything from the first argument that is not an option of the guard's is \
the server's command (as env and timeout take theirs); a `--` before it is allowed and never \
needed.\n\n\
Exit status mirrors the server's: its own exit code, or 128+N when it was \
killed by signal N (as a shell reports it); 1 when no exit of the server was observed. The guard's \
own outcomes: 75 when it closed the session because the host stopped reading, or because a line \
passed the wire limit under --oversized-policy close; 126 when the server \
command is not executable; 127 when it cannot be started otherwise (not found, ...); 2 for a usage \
error (bad flag, unreadable --config or key file, an --audit log that cannot be opened, a --pin \
file that cannot be read), before any server starts. A server that ends on its own, with a failure status, or only after a signal \
gets one line on stderr saying so, with the end of its stderr.\n\n\
Signals: the host's first SIGINT, SIGTERM or SIGHUP goes to the server's process group at once \
(as the server would have got it directly) and the audit log is sealed at once; each further \
signal climbs (SIGTERM, then SIGKILL). Without one, SIGTERM follows --shutdown-grace later, then \
SIGKILL. A closed stdin closes the server's, then waits --shutdown-grace before SIGTERM.\n\n\
--audit FILE: missing folders on its path are created.\n\n\
--env-clear: the server starts with an empty environment, plus --env-pass NAME, --env NAME=VALUE \
and --env-file NAME=PATH (the file's contents: a secret, masked in the guard's stderr, --audit \
log and --metrics). The server program is still found through the guard's PATH; the server gets \
a PATH only with --env-pass PATH (needed by `#!/usr/bin/env` scripts and npx). An --env-file \
that cannot be read, is empty or larger than 64 KiB is a usage error (2).\n\n\
Example (a desktop host's JSON config):\n  \"command\": \"mcp-stdio\",\n  \
\"args\": [\"guard\", \"--audit\", \"audit.jsonl\", \"npx\", \"-y\", \"some-mcp-server\"]"
)]
pub(crate) struct GuardArgs {
    #[command(flatten)]
    pub(crate) settings: SettingsArgs,
    /// Write a hash-chained audit record per request to FILE (appends, fsync per batch;
    /// missing folders are created).
    #[arg(long, value_name = "FILE", help_heading = "Audit and metrics")]
    pub(crate) audit: Option<PathBuf>,
    /// HMAC-SHA256 key for the audit chain (the file's bytes; a trailing newline is ignored).
    #[arg(
        long,
        value_name = "FILE",
        requires = "audit",
        help_heading = "Audit and metrics",
        hide_short_help = true
    )]
    pub(crate) audit_key_file: Option<PathBuf>,
    /// Write the session's metrics as JSON to FILE at exit.
    #[arg(long, value_name = "FILE", help_heading = "Audit and metrics")]
    pub(crate) metrics: Option<PathBuf>,
    /// The server's name in `mcp-stdio ps` and `logs` (default: the server program's file
    /// name).
    #[arg(long, value_name = "NAME", help_heading = "Status and logs")]
    pub(crate) name: Option<String>,
    /// Open no status socket: `mcp-stdio ps` and `logs` do not see this guard.
    #[arg(long, help_heading = "Status and logs")]
    pub(crate) no_announce: bool,
    /// Also write the server's whole stderr and the guard's notes, timestamped, to FILE
    /// (appended, mode 0600, size-rotated; a slow or full disk drops lines, never the session).
    #[arg(long, value_name = "FILE", help_heading = "Status and logs")]
    pub(crate) log_file: Option<PathBuf>,
    /// Rotate the log file before it passes BYTES (FILE.1, FILE.2, …; at least 65536)
    /// [default: 10485760].
    #[arg(
        long,
        value_name = "BYTES",
        help_heading = "Status and logs",
        hide_short_help = true
    )]
    pub(crate) log_file_max: Option<u64>,
    /// Log files kept, the current one included [default: 3].
    #[arg(
        long,
        value_name = "N",
        help_heading = "Status and logs",
        hide_short_help = true
    )]
    pub(crate) log_file_count: Option<u32>,
    /// Export a span per request and the MCP metrics over OTLP/HTTP (protobuf) to the
    /// collector the OTEL_EXPORTER_OTLP_* variables name (default http://localhost:4318);
    /// requests carry the guard's `traceparent` to the server. A collector that is down or
    /// slow drops spans (counted), never delays a message.
    #[arg(long, help_heading = "Status and logs")]
    pub(crate) otel: bool,
    /// Share one server among every host session started with the same server and options
    /// (or the same `--share=KEY`): the first starts a hub that runs the server; the others
    /// attach. For servers that keep no per-session state (see the guide).
    #[arg(long, value_name = "KEY", num_args = 0..=1, require_equals = true, default_missing_value = "", help_heading = "Sharing")]
    pub(crate) share: Option<String>,
    /// How long a hub with no session waits for one before it stops the server [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = crate::config::parse_duration, help_heading = "Sharing", hide_short_help = true)]
    pub(crate) share_linger: Option<Duration>,
    /// Run as the hub at PATH (started by the first `--share` guard).
    #[arg(long, value_name = "PATH", hide = true)]
    pub(crate) hub_socket: Option<PathBuf>,
    /// The server command and its arguments: everything from the first argument that is not
    /// an option of the guard's (a `--` before it is allowed). No shell is involved.
    #[arg(
        trailing_var_arg = true,
        required = true,
        num_args = 1..,
        value_name = "SERVER_COMMAND"
    )]
    pub(crate) command: Vec<std::ffi::OsString>,
}

/// What the guard writes to `--metrics` at exit.
#[derive(Debug, Serialize)]
struct MetricsFile {
    #[serde(flatten)]
    session: GuardReport,
    /// Bytes of our own stderr dropped because nobody read it.
    own_stderr_dropped_bytes: u64,
    /// Bytes of the log file (`--log-file`) dropped: the disk was slow or full.
    #[serde(skip_serializing_if = "Option::is_none")]
    log_file_dropped_bytes: Option<u64>,
    /// What `--otel` exported and dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    otel: Option<otel::OtelSummary>,
    /// The server's sandbox as enforced (`--sandbox…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxRecord>,
}

/// The audit log's entry for the sandbox, written once after `session_start`.
#[derive(Debug, Serialize)]
struct SandboxEntry<'a> {
    phase: &'static str,
    #[serde(flatten)]
    sandbox: &'a SandboxRecord,
}

/// The server command in its sandbox, when the settings ask for one: the
/// sandbox planned against this kernel and refused (a message, exit 2) when
/// the kernel cannot enforce it and best effort was not asked for. Returns the
/// record of what is enforced, and the private temporary folder to keep for
/// the guard's life.
fn sandboxed(
    settings: Option<&sandbox::SandboxSettings>,
    server: &mut CommandSpec,
) -> Result<Option<(SandboxRecord, sandbox::PrivateTmp)>, String> {
    let Some(settings) = settings else {
        return Ok(None);
    };
    let tmp = sandbox::PrivateTmp::new()?;
    if !server.get_envs().iter().any(|(k, _)| k == "TMPDIR") {
        server.env("TMPDIR", tmp.path());
    }
    let sb = settings.sandbox(server, tmp.path(), |k| std::env::var_os(k))?;
    let plan = mcp_stdio_sys::sandbox::plan(&sb);
    if let Some(refusal) = plan.refusal() {
        return Err(format!(
            "sandbox: {refusal} (--sandbox-best-effort, or best_effort = true in [sandbox])"
        ));
    }
    for gap in &plan.gaps {
        crate::stderr_sink::line(&format!(
            "mcp-stdio guard: sandbox (best effort): not enforced: {gap}"
        ));
    }
    let record = plan.record(&sb);
    server.sandbox(sb);
    Ok(Some((record, tmp)))
}

/// A server's name when `--name` gives none: the program's file name, or,
/// for a launcher (`npx`, `uvx`, `node`, `python`, `uv run`, `docker
/// run`…), the package or script it runs: `npx -y @scope/server-x@1.2`
/// is `server-x`, `node build/index.js` is `index`.
fn default_name(spec: &CommandSpec) -> String {
    const LAUNCHERS: &[&str] = &[
        "npx", "pnpx", "bunx", "uvx", "pipx", "uv", "node", "nodejs", "deno", "bun", "python",
        "python3", "docker", "podman",
    ];
    let base = |s: &std::ffi::OsStr| {
        std::path::Path::new(s)
            .file_name()
            .unwrap_or(s)
            .to_string_lossy()
            .into_owned()
    };
    let program = base(spec.get_program());
    if !LAUNCHERS.contains(&program.as_str()) {
        return program;
    }
    let words = spec.get_args().iter().map(|a| a.to_string_lossy());
    let Some(target) = words
        .filter(|w| !w.starts_with('-'))
        .find(|w| !matches!(w.as_ref(), "run" | "x" | "exec" | "tool" | "dlx"))
    else {
        return program;
    };
    // `@scope/name@version` → `name`; `path/to/index.js` → `index`.
    let unscoped = target.rsplit('/').next().unwrap_or(&target);
    let unversioned = match unscoped.rfind('@') {
        Some(i) if i > 0 => &unscoped[..i],
        _ => unscoped,
    };
    let name = unversioned
        .rsplit_once(':')
        .map_or(unversioned, |(image, _tag)| image);
    let name = [".js", ".mjs", ".cjs", ".ts", ".py"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .unwrap_or(name);
    if name.is_empty() {
        program
    } else {
        name.to_owned()
    }
}

/// `--log-file` and its sizes (from the flags or `--config`), checked;
/// `Err` is the usage error's exit status (said on stderr).
fn log_file_settings(
    args: &GuardArgs,
    settings: &GuardSettings,
) -> Result<Option<log_file::LogFileSettings>, ExitCode> {
    let file = &settings.status;
    let Some(path) = args.log_file.as_ref().or(file.log_file.as_ref()) else {
        return Ok(None);
    };
    let max_bytes = args
        .log_file_max
        .or(file.log_file_max_bytes)
        .unwrap_or(10 << 20);
    let files = args.log_file_count.or(file.log_file_count).unwrap_or(3);
    if max_bytes < log_file::MIN_LOG_FILE_MAX || files == 0 {
        eprintln!(
            "mcp-stdio guard: --log-file-max is at least {} bytes and --log-file-count at least 1",
            log_file::MIN_LOG_FILE_MAX
        );
        return Err(ExitCode::from(EXIT_USAGE));
    }
    Ok(Some(log_file::LogFileSettings {
        path: path.clone(),
        max_bytes,
        files,
    }))
}

/// Where a guard asked for `--share` writes a file of its own session
/// (`--audit`, `--metrics`, `--log-file`) when it runs a server of its own
/// (a private one, or no hub could be had): beside the hub's, as
/// `PATH.private-<pid>`, since the hub may be writing `PATH`.
fn own_path(path: &std::path::Path, shared: bool) -> std::path::PathBuf {
    if !shared {
        return path.to_path_buf();
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".private-{}", std::process::id()));
    path.with_file_name(name)
}

/// The first option given that a shared session cannot honour yet (the
/// guard only relays it to the hub).
fn unshareable(settings: &GuardSettings) -> Option<&'static str> {
    settings.pin.is_some().then_some("--pin")
}

/// The server's name: `--name`, the config's `name`, or the server
/// program's file name.
fn identity_name(args: &GuardArgs, spec: &CommandSpec, settings: &GuardSettings) -> String {
    (args.name.clone())
        .or_else(|| settings.status.name.clone())
        .unwrap_or_else(|| default_name(spec))
}

/// Who this guard is, for its status: `--name` (or the server program's
/// file name), the pids, the host's program, the command, the start.
fn identity(
    args: &GuardArgs,
    spec: &CommandSpec,
    sandbox: Option<&SandboxRecord>,
    settings: &GuardSettings,
) -> mcp_stdio_core::StatusIdentity {
    let name = identity_name(args, spec, settings);
    let host_pid = std::os::unix::process::parent_id();
    let host_program = std::fs::read_to_string(format!("/proc/{host_pid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_owned());
    let command = std::iter::once(spec.get_program())
        .chain(spec.get_args().iter().map(|a| a.as_os_str()))
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    mcp_stdio_core::StatusIdentity {
        name,
        guard_pid: std::process::id(),
        host_pid: Some(host_pid),
        host_program,
        command,
        started_unix_ms: stamp(Instant::now()).unix_ms,
        audit_log: args.audit.as_ref().map(|p| p.display().to_string()),
        log_file: (args.log_file.as_ref())
            .or(settings.status.log_file.as_ref())
            .map(|p| p.display().to_string()),
        sandbox: sandbox.map(|_| "on".to_owned()),
        pins: settings.pin.as_ref().map(|p| p.path.display().to_string()),
    }
}

/// How long the last spans and metrics may take to reach the collector at exit.
const OTEL_CLOSE: Duration = Duration::from_secs(1);

/// A seed for the guard's span ids: different in every guard (the hasher's
/// random keys, the pid, the time).
fn trace_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// How long the log file may take to reach the disk at exit.
const LOG_CLOSE: Duration = Duration::from_secs(1);

/// Runs the guard; returns the process exit status.
pub(crate) async fn run(args: GuardArgs) -> ExitCode {
    let settings = match GuardSettings::resolve(&args.settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio guard: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let Some(spec) = CommandSpec::from_argv(&args.command) else {
        eprintln!("mcp-stdio guard: no server command given (put it after `--`)");
        return ExitCode::from(EXIT_USAGE);
    };
    let pins = match settings.pin.as_ref().map(crate::pin::for_guard).transpose() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mcp-stdio guard: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // The command as the server gets it (its environment, its sandbox), for
    // every start: a restart on crash runs the same.
    let mut server = (settings.server_env).command(&spec, std::env::var_os("PATH").as_deref());
    let (sandbox_record, _private_tmp) = match server
        .as_mut()
        .ok()
        .map(|server| sandboxed(settings.sandbox.as_ref(), server))
    {
        Some(Ok(Some((record, tmp)))) => (Some(record), Some(tmp)),
        Some(Ok(None)) | None => (None, None),
        Some(Err(e)) => {
            eprintln!("mcp-stdio guard: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // `--share`: the hub runs the server; this guard relays its host to it.
    let share =
        args.share
            .clone()
            .map(|k| (!k.is_empty()).then_some(k))
            .or(match &settings.status.share {
                Some(crate::config::ShareFile::On(true)) => Some(None),
                Some(crate::config::ShareFile::Key(k)) => Some(Some(k.clone())),
                _ => None,
            });
    let linger = args
        .share_linger
        .or(settings.status.share_linger)
        .unwrap_or(share::DEFAULT_LINGER);
    let mut preface = Vec::new();
    if let Ok(server) = &server {
        if let Some(path) = &args.hub_socket {
            // The hub's audit log: one session of the hub's, a record per
            // call naming its host session.
            let audit = match &args.audit {
                Some(audit_path) => {
                    let hub_session = format!(
                        "hub-{}-{}",
                        std::process::id(),
                        stamp(Instant::now()).unix_ms
                    );
                    let key = args
                        .audit_key_file
                        .as_ref()
                        .map(crate::verify::read_key)
                        .transpose();
                    match key.and_then(|k| AuditLog::open(audit_path, k, &hub_session)) {
                        Ok(log) => Some((log, hub_session)),
                        Err(e) => {
                            eprintln!("mcp-stdio hub: {e}");
                            return ExitCode::from(EXIT_USAGE);
                        }
                    }
                }
                None => None,
            };
            let log = match log_file_settings(&args, &settings) {
                Ok(log) => log,
                Err(code) => return code,
            };
            let otel = if args.otel || settings.status.otel.unwrap_or(false) {
                match otel::Otel::start(&otel::OtelIdentity {
                    name: identity_name(&args, server, &settings),
                    guard_pid: std::process::id(),
                }) {
                    Ok(o) => Some(o),
                    Err(e) => {
                        eprintln!("mcp-stdio hub: --otel: {e}");
                        return ExitCode::from(EXIT_USAGE);
                    }
                }
            } else {
                None
            };
            let hub = share::HubSettings {
                linger,
                idle_stop: settings.idle_stop,
                audit,
                log,
                metrics: args.metrics.clone(),
                otel,
                name: identity_name(&args, server, &settings),
                announce: !args.no_announce && settings.status.announce.unwrap_or(true),
                policy: settings.proxy.get_tool_policy().cloned(),
            };
            return share::serve_hub(path, server, &settings.framer, hub).await;
        }
        if let Some(named) = &share {
            if let Some(flag) = unshareable(&settings) {
                eprintln!(
                    "mcp-stdio guard: --share cannot be combined with {flag} yet (a shared session is relayed to the hub as it is)"
                );
                return ExitCode::from(EXIT_USAGE);
            }
            let key = share::key(
                server,
                settings.framer.get_max_frame(),
                share::KeyParts {
                    idle_stop: settings.idle_stop,
                    policy: settings
                        .proxy
                        .get_tool_policy()
                        .map(|p| format!("{p:?}"))
                        .unwrap_or_default(),
                    otel: args.otel || settings.status.otel.unwrap_or(false),
                    files: [
                        args.audit.as_deref(),
                        args.metrics.as_deref(),
                        args.log_file
                            .as_deref()
                            .or(settings.status.log_file.as_deref()),
                    ],
                },
                named.as_deref(),
            );
            match share::socket_path(&key) {
                Ok(path) => match share::attach(&path, || share::start_hub(&path)).await {
                    share::Attached::Relay(stream) => {
                        let rejoin = share::Rejoin {
                            path: path.clone(),
                            restart: settings.restart.clone(),
                        };
                        match share::relay(stream, &settings.framer, &rejoin).await {
                            share::RelayEnd::Done(code) => return ExitCode::from(code),
                            share::RelayEnd::Private(line) => {
                                crate::stderr_sink::line(
                                    "mcp-stdio guard: --share: the shared server cannot serve this host as it serves the first; running a server of its own",
                                );
                                preface = line;
                            }
                        }
                    }
                    share::Attached::Unshared(why) => crate::stderr_sink::line(&format!(
                        "mcp-stdio guard: --share: {why}; running a server of its own"
                    )),
                },
                Err(why) => crate::stderr_sink::line(&format!(
                    "mcp-stdio guard: --share: {why}; running a server of its own"
                )),
            }
        }
    }
    let session_id = format!("{}-{}", std::process::id(), stamp(Instant::now()).unix_ms);
    // A `--share` guard here runs a server of its own (a private one, or no
    // hub could be had): the hub may be writing the shared audit log, so
    // this session's goes beside it.
    let own_audit = args
        .audit
        .as_ref()
        .map(|path| own_path(path, share.is_some()));
    let mut audit = match &own_audit {
        Some(path) => {
            let key = match args
                .audit_key_file
                .as_ref()
                .map(crate::verify::read_key)
                .transpose()
            {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("mcp-stdio guard: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            match AuditLog::open(path, key, &session_id) {
                Ok(a) => Some(a),
                Err(e) => {
                    eprintln!("mcp-stdio guard: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            }
        }
        None => None,
    };
    let file = &settings.status;
    let log_file = match log_file_settings(&args, &settings) {
        Err(code) => return code,
        Ok(None) => None,
        Ok(Some(mut settings)) => {
            let path = own_path(&settings.path, share.is_some());
            settings.path.clone_from(&path);
            match log_file::LogFile::open(settings) {
                Ok(f) => Some(f),
                Err(e) => {
                    eprintln!("mcp-stdio guard: --log-file {}: {e}", path.display());
                    return ExitCode::from(EXIT_USAGE);
                }
            }
        }
    };
    let otel = match (args.otel || file.otel.unwrap_or(false))
        .then(|| {
            otel::Otel::start(&otel::OtelIdentity {
                name: identity_name(&args, &spec, &settings),
                guard_pid: std::process::id(),
            })
        })
        .transpose()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mcp-stdio guard: --otel: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let started = Instant::now();
    if let (Some(a), Some(record)) = (audit.as_mut(), &sandbox_record) {
        a.append(&SandboxEntry {
            phase: "sandbox",
            sandbox: record,
        });
    }
    for name in settings.server_env.missing() {
        crate::stderr_sink::line(&format!(
            "mcp-stdio guard: --env-pass {name}: not set in the guard's environment; the server does not get it"
        ));
    }
    // Tied to the guard (G11): a SIGKILLed guard leaves no server (Linux).
    let spawned = server.and_then(|server| Ok((mcp_stdio_sys::spawn_piped(&server)?, server)));
    let (mut child, server_spec) = match spawned {
        Ok(c) => c,
        Err(e) => {
            let failure = crate::diagnose::spawn_failure_in(&spec, &e, sandbox_record.is_some());
            eprintln!("mcp-stdio guard: {}", failure.message);
            if let Some(mut a) = audit {
                a.append(
                    &serde_json::json!({"phase": "session_end", "spawn_failed": e.to_string()}),
                );
                a.close(AUDIT_CLOSE).await;
            }
            return ExitCode::from(failure.exit);
        }
    };
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    // Observed without reaping, reaped at `Finished`: the server's group id
    // is never signalled once it could be someone else's.
    let watched = Tokio::current().and_then(|rt| {
        let leader = Leader::new(&rt, child);
        Ok((ServerPipes::new(&rt, pipes)?, leader, rt))
    });
    let (pipes, leader, rt) = match watched {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "mcp-stdio guard: started {} but cannot watch its exit: {e}",
                spec.display()
            );
            return ExitCode::from(crate::diagnose::EXIT_NOT_STARTED);
        }
    };
    let mut config = GuardConfig::default();
    config
        .stderr_pool(Some(settings.stderr_pool.clone()))
        .stderr_forward(settings.stderr_forward_bytes);
    *config.framer_mut() = settings.framer.clone();
    *config.proxy_mut() = settings.proxy.clone();
    config
        .proxy_mut()
        .target(&spec.display().to_string())
        .session_id(&session_id);
    let (tool_pins, pin_writer) = pins.unzip();
    config.proxy_mut().tool_pins(tool_pins);
    *config.supervisor_mut() = settings.supervisor;
    *config.stderr_capture_mut() = settings.stderr_capture.clone();
    *config.restart_mut() = settings.restart.clone();
    config.idle_stop(settings.idle_stop);
    config.secrets(settings.server_env.secrets().clone());
    config.log_copy(log_file.is_some());
    config.trace(otel.as_ref().map(|_| trace_seed()));
    if audit.is_some() {
        // A request reaches the server only after its record is on disk (G12).
        config.audit_gate(Some(DEFAULT_MAX_WAITING_RECORDS));
    }
    let mut session = GuardSession::new(config);
    let announce = !args.no_announce && settings.status.announce.unwrap_or(true);
    let announced = announce
        .then(|| {
            let identity = identity(&args, &spec, sandbox_record.as_ref(), &settings);
            announce::announce(&rt, identity)
        })
        .flatten();
    let code = drive::drive(
        &rt,
        &mut session,
        (&server_spec, leader, pipes),
        (audit, pin_writer.as_ref(), announced),
        drive::Sinks {
            log: log_file.as_ref(),
            otel: otel.as_ref(),
        },
        preface,
    )
    .await;
    let log_file_dropped_bytes = log_file.map(|f| f.close(LOG_CLOSE));
    if let Some(w) = pin_writer {
        w.close(PIN_CLOSE);
    }
    let counters = session.counters();
    let report = session.report(settings.stderr_excerpt_bytes);
    let otel = otel.map(|o| {
        let end = otel::SessionEnd {
            duration: started.elapsed(),
            protocol_version: report.protocol_version.clone(),
            exit_code: code,
            counters,
        };
        o.close(end, OTEL_CLOSE)
    });
    if let Some(message) = ended::end_message(&report, &spec.display()) {
        // Through the sink: a blocking write could hang an exit on an unread stderr.
        crate::stderr_sink::write(message.as_bytes());
    }
    if let Some(path) = args.metrics.as_ref().map(|p| own_path(p, share.is_some())) {
        let path = &path;
        let report = MetricsFile {
            session: report,
            own_stderr_dropped_bytes: crate::stderr_sink::dropped(),
            log_file_dropped_bytes,
            otel,
            sandbox: sandbox_record,
        };
        let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, json) {
            // Through the sink: a blocking eprintln could hang an exit on an unread stderr.
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: writing metrics to {}: {e}",
                path.display()
            ));
        }
    }
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_default_name_is_what_a_launcher_runs() {
        let name = |argv: &[&str]| default_name(&CommandSpec::from_argv(argv).expect("argv"));
        assert_eq!(
            name(&["/usr/local/bin/weather-server", "--port", "1"]),
            "weather-server"
        );
        assert_eq!(
            name(&["npx", "-y", "@modelcontextprotocol/server-everything"]),
            "server-everything"
        );
        assert_eq!(
            name(&["npx", "-y", "@scope/server-x@1.2.3", "stdio"]),
            "server-x"
        );
        assert_eq!(name(&["uvx", "mcp-server-fetch"]), "mcp-server-fetch");
        assert_eq!(name(&["node", "build/index.js"]), "index");
        assert_eq!(name(&["python3", "-u", "srv/server.py"]), "server");
        assert_eq!(name(&["uv", "run", "server.py"]), "server");
        assert_eq!(
            name(&["docker", "run", "-i", "--rm", "mcp/github:latest"]),
            "github"
        );
        assert_eq!(name(&["npx"]), "npx");
    }
}
