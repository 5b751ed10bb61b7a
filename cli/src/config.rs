//! Limits for `guard`: flags, and an optional TOML file with the same names.
//!
//! ```toml
//! # mcp-stdio guard --config guard.toml -- SERVER …
//! max_frame_bytes = 16777216                # wire limit, both directions
//! id_scan_limit_bytes = 256                 # an oversized line's bytes scanned for its id at once; 0: no id recovery
//! oversized_policy = "discard"              # or "close": after a line past the wire limit
//! invalid_utf8 = "repair"                   # or "refuse": lines that are not UTF-8
//! max_buffered_bytes = 33554432             # bytes waiting for a host that stopped reading
//! stderr_forward_bytes = 1048576            # server stderr passed through to ours
//! stderr_retained_per_call_bytes = 16384    # stderr tail kept for the record
//! stderr_head_bytes = 0                     # with retain = "head_and_tail": first bytes kept too
//! retain = "tail"                           # or "head_and_tail"
//! stderr_agent_excerpt_bytes = 4096         # excerpt size in the record
//! stderr_redact = true                      # fallback redaction of kept stderr (headers, keys, tokens)
//! shutdown_grace_seconds = 2                # stdin close → TERM, and TERM → KILL
//! reader_drain_seconds = 1                  # after exit or KILL, wait this long for pipes
//! restart = "on-failure"                    # or "never" (default), "always": a crashed server is started again
//! restart_max = 5                           # restarts in a row before giving up
//! idle_stop = "5m"                          # stop the server when idle this long (`--idle-stop`)
//! restart_backoff_seconds = 0.25            # wait before the first restart, doubled each time (at most 8 s)
//! env_clear = true                          # the server starts with an empty environment
//! env_pass = ["PATH", "HOME"]               # passed from the guard's environment when set there
//! env = { LOG_LEVEL = "info" }              # set for the server
//! env_file = { API_TOKEN = "api_token.txt" } # set to the file's contents (a secret: masked)
//! pin_file = "pins.json"                    # pinned tool definitions (relative to this file's folder)
//! pin_policy = "warn"                       # or "hide", "block": a changed or added tool
//! name = "weather"                          # the server's name in `mcp-stdio ps`, `logs`, `top`
//! announce = true                           # false: no status socket (`--no-announce`)
//! log_file = "logs/weather.log"             # the server's whole stderr, timestamped (relative to this file's folder)
//! log_file_max_bytes = 10485760             # rotated before it passes this
//! log_file_count = 3                        # files kept, the current one included
//! otel = true                               # spans and metrics over OTLP/HTTP (`--otel`)
//! share = true                              # one server for every host session (`--share`; or a key)
//! share_linger = "10s"                      # how long a hub with no session waits
//! tools = ["read_*", "list_directory"]      # only these tools (`--tools`; patterns with * and ?)
//! deny_tools = ["write_*"]                  # never these (`--deny-tool`)
//! rate_limits = ["search=10/1m", "5/1s"]    # at most N calls per PERIOD (`--rate-limit`)
//! repeat_limit = 3                          # the same call more than 3 times in a row is refused
//! max_result_text_bytes = 65536             # a tool result's text cut to 64 KiB, with a marker
//! keep = "head-and-tail"                    # which part of a cut text stays (head, tail)
//! deny_resources = ["file:///etc/*"]        # resources by URI (`--resources`, `--deny-resource`)
//! prompts = ["review_*"]                    # prompts by name (`--prompts`, `--deny-prompt`)
//!
//! [sandbox]                                 # run the server in a sandbox (Linux; see guard::sandbox)
//! profile = "npx"                           # or "base", "uvx"
//! read = ["data"]                           # relative to this file's folder
//! exec = []
//! write = ["/home/me/project"]
//! network = "none"                          # or "unrestricted"; connect = [443], bind = [8080]: these ports
//! memory_bytes = 1073741824                 # also address_space_bytes, file_size_bytes,
//! processes = 64                            #   cpu_seconds, open_files
//! allow_ipc = false                         # signals and abstract sockets outside the sandbox
//! best_effort = false                       # run with what the kernel enforces, recording the rest
//! ```
//!
//! Flags override the file; the file overrides the defaults. The server's
//! environment (`--env-clear`, `--env-pass`, `--env`, `--env-file`): either
//! `env_clear` or the flag turns it on; a name set by a flag overrides the
//! file's entry for it; `env_file` paths start from the file's folder (see
//! `crate::guard::server_env`).

use std::path::PathBuf;
use std::time::Duration;

use mcp_stdio_core::SupervisorConfig;
use mcp_stdio_core::{
    CaptureConfig, PoolConfig, SharedRetentionPool, DEFAULT_EXCERPT, DEFAULT_TAIL,
};
use mcp_stdio_core::{
    FramerConfig, InvalidUtf8Policy, OversizedPolicy, DEFAULT_ID_SCAN_LIMIT, MIN_MAX_FRAME,
};
use mcp_stdio_core::{RestartConfig, RestartPolicy, DEFAULT_MAX_RESTARTS};
use serde::Deserialize;

use mcp_stdio_core::{
    ContentLimit, Keep, RateLimiter, RateRule, RepeatBrake, ToolFilter, ToolPolicy,
};
use mcp_stdio_core::{ProxyConfig, DEFAULT_MAX_BUFFERED};

use crate::guard::sandbox::{FileSandbox, SandboxArgs, SandboxSettings};
use crate::guard::server_env::{EnvArgs, FileEnv, ServerEnv};
use crate::pin::{PinPolicyArg, PinSettings};

/// What to keep of the server's stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Retain {
    /// The newest bytes.
    Tail,
    /// The first bytes and the newest bytes.
    HeadAndTail,
}

/// What to do after a line passes the wire limit (either direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Oversized {
    /// Drop the line up to its newline (its id, when found, gets the
    /// wire-limit error) and go on with the next one.
    Discard,
    /// Answer its id when found in the first bytes, then close the session:
    /// the server is shut down and the guard exits 75.
    Close,
}

/// What to do with a line that is not valid UTF-8 (either direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum InvalidUtf8 {
    /// Replace each invalid sequence with U+FFFD and forward the line, noted
    /// and recorded (what the TypeScript SDK does when it reads such a line).
    Repair,
    /// Drop the line; a response among them becomes an error for its id.
    Refuse,
}

/// When the guard starts a crashed server again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Restart {
    /// Never: the server's end is the session's end.
    Never,
    /// When it ends on its own with a failure (non-zero exit, a signal).
    OnFailure,
    /// Whenever it ends on its own while the host is still there.
    Always,
}

/// The limit flags of `guard` (each also settable in `--config`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SettingsArgs {
    /// A TOML file with the limits below (same names, with `_bytes`/`_seconds`).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Wire limit in bytes, both directions [default: 16777216].
    #[arg(long, value_name = "BYTES", help_heading = "Wire limits")]
    pub(crate) max_frame: Option<usize>,
    /// Bytes of an oversized line scanned for its id at once, and the longest string id
    /// recovered from the whole line; 0 turns id recovery off [default: 256].
    #[arg(
        long,
        value_name = "BYTES",
        help_heading = "Wire limits",
        hide_short_help = true
    )]
    pub(crate) id_scan_limit: Option<usize>,
    /// After a line passes the wire limit: drop it and go on, or close the session [default: discard].
    #[arg(long, value_enum, value_name = "POLICY", help_heading = "Wire limits")]
    pub(crate) oversized_policy: Option<Oversized>,
    /// Lines that are not valid UTF-8 [default: repair].
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        help_heading = "Wire limits",
        hide_short_help = true
    )]
    pub(crate) invalid_utf8: Option<InvalidUtf8>,
    /// Bytes that may wait for a host that stopped reading before the session is closed [default: 33554432].
    #[arg(long, value_name = "BYTES", help_heading = "Wire limits")]
    pub(crate) max_buffered: Option<usize>,
    /// Bytes of the server's stderr passed through to ours [default: 1048576].
    #[arg(long, value_name = "BYTES", help_heading = "Server stderr")]
    pub(crate) stderr_budget: Option<u64>,
    /// Bytes of the server's stderr tail kept for the record [default: 16384].
    #[arg(long, value_name = "BYTES", help_heading = "Server stderr")]
    pub(crate) stderr_tail: Option<usize>,
    /// What of stderr to keep [default: tail].
    #[arg(
        long,
        value_enum,
        help_heading = "Server stderr",
        hide_short_help = true
    )]
    pub(crate) retain: Option<Retain>,
    /// Seconds from closing the server's stdin to SIGTERM, and from SIGTERM to SIGKILL [default: 2].
    #[arg(long, value_name = "SECONDS", help_heading = "Shutdown and restart")]
    pub(crate) shutdown_grace: Option<f64>,
    /// Start the server again when it ends on its own while the host is still there,
    /// keeping the host's session (its handshake is replayed) [default: never].
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        help_heading = "Shutdown and restart"
    )]
    pub(crate) restart: Option<Restart>,
    /// Restarts in a row before the guard gives up [default: 5].
    #[arg(
        long,
        value_name = "N",
        help_heading = "Shutdown and restart",
        hide_short_help = true
    )]
    pub(crate) restart_max: Option<u32>,
    /// Seconds before the first restart in a row, doubled for each next one (at most 8) [default: 0.25].
    #[arg(
        long,
        value_name = "SECONDS",
        help_heading = "Shutdown and restart",
        hide_short_help = true
    )]
    pub(crate) restart_backoff: Option<f64>,
    /// Stop the server after DURATION with no request in flight, no subscription and no task
    /// open (`300`, `90s`, `5m`, `1h`); the host's next message starts it again, its
    /// handshake replayed first [default: never].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Shutdown and restart")]
    pub(crate) idle_stop: Option<Duration>,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// Pin the server's tool definitions in FILE (created on first use) and check every
    /// tools/list answer against them; review and accept changes with `mcp-stdio pin`.
    #[arg(long, value_name = "FILE", help_heading = "Pinned tools")]
    pub(crate) pin: Option<PathBuf>,
    /// What to do with a tool whose definition is not the pinned one [default: warn].
    #[arg(long, value_enum, value_name = "POLICY", help_heading = "Pinned tools")]
    pub(crate) pin_policy: Option<PinPolicyArg>,
    /// Only these tools (comma-separated names or patterns with `*` and `?`): others are taken
    /// out of tools/list and a call of one is refused [default: every tool].
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        help_heading = "Policies"
    )]
    pub(crate) tools: Option<Vec<String>>,
    /// Never this tool (a name or a pattern with `*` and `?`; repeatable).
    #[arg(
        long = "deny-tool",
        value_name = "NAME",
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) deny_tool: Vec<String>,
    /// Only these prompts (comma-separated names or patterns): others are taken out of
    /// prompts/list and a prompts/get of one is refused [default: every prompt].
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) prompts: Option<Vec<String>>,
    /// Never this prompt (a name or a pattern; repeatable).
    #[arg(
        long = "deny-prompt",
        value_name = "NAME",
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) deny_prompt: Vec<String>,
    /// Only these resources (comma-separated URIs or patterns, `file:///home/me/project/*`):
    /// others are taken out of resources/list and a read or subscribe is refused
    /// [default: every resource].
    #[arg(
        long,
        value_name = "URIS",
        value_delimiter = ',',
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) resources: Option<Vec<String>>,
    /// Never this resource (a URI or a pattern; repeatable).
    #[arg(
        long = "deny-resource",
        value_name = "URI",
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) deny_resource: Vec<String>,
    /// At most N calls per PERIOD, of TOOL or of every tool (`5/1s`, `search=10/1m`;
    /// repeatable); a call over it is refused with `retryAfterMs`.
    #[arg(long = "rate-limit", value_name = "[TOOL=]N/PERIOD", value_parser = parse_rate, help_heading = "Policies")]
    pub(crate) rate_limit: Vec<mcp_stdio_core::RateRule>,
    /// Refuse the same tool with the same arguments more than N times in a row (an agent
    /// that loops), until a different call comes.
    #[arg(
        long,
        value_name = "N",
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) repeat_limit: Option<u32>,
    /// Cut a tool result's text to at most BYTES (with a marker saying how much was
    /// omitted, in the text and in `_meta`); an image or audio block over it is replaced
    /// [default: no limit].
    #[arg(long, value_name = "BYTES", help_heading = "Policies")]
    pub(crate) max_result_text: Option<u64>,
    /// Which part of a cut text stays [default: head-and-tail].
    #[arg(
        long,
        value_enum,
        value_name = "PART",
        help_heading = "Policies",
        hide_short_help = true
    )]
    pub(crate) keep: Option<KeepArg>,
}

/// `--keep`: which part of a text cut by `--max-result-text` stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum KeepArg {
    /// The beginning.
    Head,
    /// The end.
    Tail,
    /// Half each, the marker between.
    HeadAndTail,
}

/// The tool policies from the flags, else the config file's keys
/// (`tools`, `deny_tools`, `prompts`, `deny_prompts`, `resources`,
/// `deny_resources`, `rate_limits`, `repeat_limit`,
/// `max_result_text_bytes`, `keep`).
fn tool_policy(args: &SettingsArgs, file: &FileSettings) -> Result<ToolPolicy, String> {
    let allow = args.tools.clone().or_else(|| file.tools.clone());
    let deny = if args.deny_tool.is_empty() {
        file.deny_tools.clone().unwrap_or_default()
    } else {
        args.deny_tool.clone()
    };
    let filter = ToolFilter::new(allow.as_deref(), &deny)
        .map_err(|e| format!("--tools / --deny-tool: {e}"))?;
    let listed = |allow: &Option<Vec<String>>,
                  file_allow: &Option<Vec<String>>,
                  deny: &[String],
                  file_deny: &Option<Vec<String>>,
                  flags: &str| {
        let allow = allow.clone().or_else(|| file_allow.clone());
        let deny = if deny.is_empty() {
            file_deny.clone().unwrap_or_default()
        } else {
            deny.to_vec()
        };
        ToolFilter::new(allow.as_deref(), &deny).map_err(|e| format!("{flags}: {e}"))
    };
    let prompts = listed(
        &args.prompts,
        &file.prompts,
        &args.deny_prompt,
        &file.deny_prompts,
        "--prompts / --deny-prompt",
    )?;
    let resources = listed(
        &args.resources,
        &file.resources,
        &args.deny_resource,
        &file.deny_resources,
        "--resources / --deny-resource",
    )?;
    let rules = if args.rate_limit.is_empty() {
        file.rate_limits
            .iter()
            .flatten()
            .map(|r| RateRule::parse(r).map_err(|e| format!("rate_limits: {e}")))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        args.rate_limit.clone()
    };
    let rates = RateLimiter::new(rules).map_err(|e| format!("--rate-limit: {e}"))?;
    let repeat = args
        .repeat_limit
        .or(file.repeat_limit)
        .map(RepeatBrake::new)
        .transpose()
        .map_err(|e| e.to_string())?;
    let keep = match args.keep.or(file.keep).unwrap_or(KeepArg::HeadAndTail) {
        KeepArg::Head => Keep::Head,
        KeepArg::Tail => Keep::Tail,
        KeepArg::HeadAndTail => Keep::HeadAndTail,
    };
    let content = args
        .max_result_text
        .or(file.max_result_text_bytes)
        .map(|max| ContentLimit::new(max, keep))
        .transpose()
        .map_err(|e| e.to_string())?;
    Ok(ToolPolicy::new(filter, rates, repeat)
        .listed_filters(prompts, resources)
        .content_limit(content))
}

/// `--rate-limit`'s value.
fn parse_rate(text: &str) -> Result<mcp_stdio_core::RateRule, String> {
    mcp_stdio_core::RateRule::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    max_frame_bytes: Option<usize>,
    id_scan_limit_bytes: Option<usize>,
    oversized_policy: Option<Oversized>,
    invalid_utf8: Option<InvalidUtf8>,
    max_buffered_bytes: Option<usize>,
    stderr_forward_bytes: Option<u64>,
    stderr_retained_per_call_bytes: Option<usize>,
    stderr_retained_process_bytes: Option<usize>,
    stderr_head_bytes: Option<usize>,
    retain: Option<Retain>,
    stderr_agent_excerpt_bytes: Option<usize>,
    stderr_redact: Option<bool>,
    shutdown_grace_seconds: Option<f64>,
    reader_drain_seconds: Option<f64>,
    restart: Option<Restart>,
    restart_max: Option<u32>,
    restart_backoff_seconds: Option<f64>,
    idle_stop: Option<String>,
    env_clear: Option<bool>,
    env_pass: Option<Vec<String>>,
    env: Option<std::collections::BTreeMap<String, String>>,
    env_file: Option<std::collections::BTreeMap<String, PathBuf>>,
    pin_file: Option<PathBuf>,
    pin_policy: Option<PinPolicyArg>,
    name: Option<String>,
    announce: Option<bool>,
    log_file: Option<PathBuf>,
    log_file_max_bytes: Option<u64>,
    log_file_count: Option<u32>,
    otel: Option<bool>,
    share: Option<ShareFile>,
    share_linger: Option<String>,
    sandbox: Option<FileSandbox>,
    tools: Option<Vec<String>>,
    deny_tools: Option<Vec<String>>,
    rate_limits: Option<Vec<String>>,
    repeat_limit: Option<u32>,
    max_result_text_bytes: Option<u64>,
    keep: Option<KeepArg>,
    prompts: Option<Vec<String>>,
    deny_prompts: Option<Vec<String>>,
    resources: Option<Vec<String>>,
    deny_resources: Option<Vec<String>>,
}

/// The resolved limits of a guard run.
#[derive(Debug, Clone)]
pub(crate) struct GuardSettings {
    /// Both directions' framing: the wire limit and its policies.
    pub(crate) framer: FramerConfig,
    pub(crate) proxy: ProxyConfig,
    pub(crate) supervisor: SupervisorConfig,
    pub(crate) stderr_capture: CaptureConfig,
    /// The process's retention pool: `stderr_retained_process_bytes` (default
    /// 256 KiB), which the stderr capture draws its budget from.
    pub(crate) stderr_pool: SharedRetentionPool,
    pub(crate) stderr_forward_bytes: u64,
    pub(crate) stderr_excerpt_bytes: usize,
    /// Restart on crash.
    pub(crate) restart: RestartConfig,
    /// `--idle-stop`: how long the server may sit idle.
    pub(crate) idle_stop: Option<Duration>,
    /// The server's environment, and the secrets read from files.
    pub(crate) server_env: ServerEnv,
    /// Pinned tool definitions (`--pin`, `pin_file`), if on.
    pub(crate) pin: Option<PinSettings>,
    /// The server's sandbox (`--sandbox…`, `[sandbox]`), if on.
    pub(crate) sandbox: Option<SandboxSettings>,
    /// The config file's status and log keys (the guard's flags override them).
    pub(crate) status: FileStatus,
}

/// `name`, `announce`, `log_file` (relative to the config file's folder),
/// `log_file_max_bytes`, `log_file_count`, `otel` from a config file.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileStatus {
    pub(crate) name: Option<String>,
    pub(crate) announce: Option<bool>,
    pub(crate) log_file: Option<PathBuf>,
    pub(crate) log_file_max_bytes: Option<u64>,
    pub(crate) log_file_count: Option<u32>,
    /// `otel = true`: as `--otel`.
    pub(crate) otel: Option<bool>,
    /// `share = true` (the key computed) or `share = "KEY"`: as `--share`.
    pub(crate) share: Option<ShareFile>,
    /// `share_linger = "10s"`: as `--share-linger`.
    pub(crate) share_linger: Option<Duration>,
}

/// `framer` with the wire limit `bytes`, which `setting` gave. The core
/// raises a limit below its minimum (`MIN_MAX_FRAME`) to it; a command
/// line refuses it instead, so that nobody runs with a limit they did not
/// ask for. The rule is the framer config's: a value it would change is
/// refused.
pub(crate) fn wire_limit(
    framer: &mut FramerConfig,
    setting: &str,
    bytes: usize,
) -> Result<(), String> {
    if framer.max_frame(bytes).get_max_frame() == bytes {
        Ok(())
    } else {
        Err(format!(
            "{setting}: a wire limit of {bytes} bytes is too small (at least {MIN_MAX_FRAME})"
        ))
    }
}

/// `share` in a config file: `true` (the key computed from the server) or
/// a key of one's own.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum ShareFile {
    On(bool),
    Key(String),
}

/// A duration as `--idle-stop` takes it: seconds (`300`, `1.5`), or a
/// number with `ms`, `s`, `m` or `h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => f64::NAN,
    };
    number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|n| scale.is_finite() && *n > 0.0)
        .and_then(|n| Duration::try_from_secs_f64(n * scale).ok())
        .ok_or_else(|| {
            format!("{text:?}: a duration greater than 0: seconds (`300`), or with ms, s, m or h (`90s`, `5m`, `1h`)")
        })
}

fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| format!("{name} must be a non-negative number of seconds, not {v}"))
}

impl GuardSettings {
    /// Defaults, then the file, then the flags.
    pub(crate) fn resolve(args: &SettingsArgs) -> Result<Self, String> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("config file {}: {e}", path.display()))?;
                toml::from_str::<FileSettings>(&text)
                    .map_err(|e| format!("config file {}: {e}", path.display()))?
            }
            None => FileSettings::default(),
        };
        let file_env = FileEnv {
            config: args.config.as_deref(),
            clear: file.env_clear,
            pass: file.env_pass.clone(),
            set: file.env.clone(),
            files: file.env_file.clone(),
        };
        let server_env = ServerEnv::resolve(&args.env, file_env, |k: &std::ffi::OsStr| {
            std::env::var_os(k)
        })
        .map_err(|e| e.to_string())?;
        let mut framer = FramerConfig::default();
        match (args.max_frame, file.max_frame_bytes, &args.config) {
            (Some(bytes), _, _) => wire_limit(&mut framer, "--max-frame", bytes)?,
            (None, Some(bytes), Some(path)) => {
                let setting = format!("config file {}: max_frame_bytes", path.display());
                wire_limit(&mut framer, &setting, bytes)?;
            }
            _ => {}
        }
        let mut proxy = ProxyConfig::default();
        proxy.tool_policy(Some(tool_policy(args, &file)?));
        proxy
            .limit_knob("--max-frame (max_frame_bytes in a --config file)")
            .max_buffered(
                args.max_buffered
                    .or(file.max_buffered_bytes)
                    .unwrap_or(DEFAULT_MAX_BUFFERED),
            );
        framer
            .id_scan_limit(
                args.id_scan_limit
                    .or(file.id_scan_limit_bytes)
                    .unwrap_or(DEFAULT_ID_SCAN_LIMIT),
            )
            .oversized_policy(match args.oversized_policy.or(file.oversized_policy) {
                Some(Oversized::Close) => OversizedPolicy::Close,
                Some(Oversized::Discard) | None => OversizedPolicy::Discard,
            })
            .invalid_utf8(match args.invalid_utf8.or(file.invalid_utf8) {
                Some(InvalidUtf8::Refuse) => InvalidUtf8Policy::Refuse,
                Some(InvalidUtf8::Repair) | None => InvalidUtf8Policy::Repair,
            });
        let grace = seconds(
            "shutdown grace",
            args.shutdown_grace
                .or(file.shutdown_grace_seconds)
                .unwrap_or(2.0),
        )?;
        let drain = seconds("reader drain", file.reader_drain_seconds.unwrap_or(1.0))?;
        let mut supervisor = SupervisorConfig::default();
        supervisor
            .stdin_close_grace(grace)
            .term_grace(grace)
            .reader_drain_deadline(drain);
        let tail = args
            .stderr_tail
            .or(file.stderr_retained_per_call_bytes)
            .unwrap_or(DEFAULT_TAIL);
        let retain = args.retain.or(file.retain).unwrap_or(Retain::Tail);
        let head = match retain {
            Retain::Tail => 0,
            Retain::HeadAndTail => file.stderr_head_bytes.unwrap_or(1024),
        };
        let mut stderr_capture = CaptureConfig::default();
        stderr_capture
            .tail(tail)
            .head(head)
            .redact(file.stderr_redact.unwrap_or(true));
        let mut restart = RestartConfig::default();
        restart
            .policy(match args.restart.or(file.restart) {
                Some(Restart::OnFailure) => RestartPolicy::OnFailure,
                Some(Restart::Always) => RestartPolicy::Always,
                Some(Restart::Never) | None => RestartPolicy::Never,
            })
            .max_restarts(
                args.restart_max
                    .or(file.restart_max)
                    .unwrap_or(DEFAULT_MAX_RESTARTS),
            );
        if let Some(s) = args.restart_backoff.or(file.restart_backoff_seconds) {
            restart.backoff(seconds("restart backoff", s)?);
        }
        let idle_stop = match (args.idle_stop, file.idle_stop.as_deref()) {
            (Some(d), _) => Some(d),
            (None, Some(text)) => {
                Some(parse_duration(text).map_err(|e| format!("idle_stop: {e}"))?)
            }
            (None, None) => None,
        };
        let pin = pin_settings(args, &file)?;
        let sandbox =
            SandboxSettings::resolve(&args.sandbox, file.sandbox.as_ref(), args.config.as_deref())?;
        Ok(Self {
            sandbox,
            restart,
            idle_stop,
            framer,
            proxy,
            supervisor,
            stderr_capture,
            stderr_pool: {
                let mut pool = PoolConfig::default();
                if let Some(bytes) = file.stderr_retained_process_bytes {
                    pool.limit(bytes);
                }
                SharedRetentionPool::new(&pool)
            },
            stderr_forward_bytes: args
                .stderr_budget
                .or(file.stderr_forward_bytes)
                .unwrap_or(1024 * 1024),
            stderr_excerpt_bytes: file.stderr_agent_excerpt_bytes.unwrap_or(DEFAULT_EXCERPT),
            server_env,
            pin,
            status: FileStatus {
                name: file.name.clone(),
                announce: file.announce,
                log_file: file.log_file.as_ref().map(|p| match &args.config {
                    Some(config) => config.parent().map_or_else(|| p.clone(), |f| f.join(p)),
                    None => p.clone(),
                }),
                log_file_max_bytes: file.log_file_max_bytes,
                log_file_count: file.log_file_count,
                otel: file.otel,
                share: file.share.clone(),
                share_linger: file
                    .share_linger
                    .as_deref()
                    .map(|t| parse_duration(t).map_err(|e| format!("share_linger: {e}")))
                    .transpose()?,
            },
        })
    }
}

/// The pin settings: the flag's file, else the config file's (relative to
/// the config file's folder); a policy without a file is an error.
fn pin_settings(args: &SettingsArgs, file: &FileSettings) -> Result<Option<PinSettings>, String> {
    let path = match (&args.pin, &file.pin_file, &args.config) {
        (Some(path), _, _) => Some(path.clone()),
        (None, Some(path), Some(config)) => Some(
            config
                .parent()
                .map_or_else(|| path.clone(), |folder| folder.join(path)),
        ),
        _ => None,
    };
    let policy = args.pin_policy.or(file.pin_policy);
    match (path, policy) {
        (Some(path), policy) => Ok(Some(PinSettings {
            path,
            policy: policy.unwrap_or(PinPolicyArg::Warn).into(),
        })),
        (None, Some(_)) => Err(
            "--pin-policy (pin_policy) needs a pin file: --pin FILE (pin_file in a --config file)"
                .to_owned(),
        ),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let path = mcp_stdio_tests::TempPath::new("guard.toml");
        std::fs::write(
            &path,
            "max_frame_bytes = 1000\nstderr_retained_per_call_bytes = 2048\nshutdown_grace_seconds = 0.5\nretain = \"head_and_tail\"\nstderr_head_bytes = 100\nstderr_redact = false\n",
        )
        .unwrap();
        let args = SettingsArgs {
            config: Some(path.to_path_buf()),
            max_frame: Some(5000),
            ..SettingsArgs::default()
        };
        let s = GuardSettings::resolve(&args).unwrap();
        assert_eq!(s.framer.get_max_frame(), 5000);
        assert_eq!(s.stderr_capture.get_tail(), 2048);
        assert_eq!(s.stderr_capture.get_head(), 100);
        assert!(!s.stderr_capture.get_redact());
        assert!(GuardSettings::resolve(&SettingsArgs::default())
            .unwrap()
            .stderr_capture
            .get_redact());
        assert_eq!(s.supervisor.get_term_grace(), Duration::from_millis(500));
        assert_eq!(s.restart.get_policy(), RestartPolicy::Never);
        std::fs::write(
            &path,
            "restart = \"on-failure\"\nrestart_max = 2\nrestart_backoff_seconds = 0.5\n",
        )
        .unwrap();
        let s = GuardSettings::resolve(&SettingsArgs {
            config: Some(path.to_path_buf()),
            restart_max: Some(3),
            ..SettingsArgs::default()
        })
        .unwrap();
        assert_eq!(s.restart.get_policy(), RestartPolicy::OnFailure);
        assert_eq!(s.restart.get_max_restarts(), 3);
        assert_eq!(s.restart.get_backoff(), Duration::from_millis(500));
        std::fs::write(&path, "max_frame = 1\n").unwrap();
        let err = GuardSettings::resolve(&SettingsArgs {
            config: Some(path.to_path_buf()),
            ..SettingsArgs::default()
        })
        .unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }

    /// The policy keys of a `--config` file, and the flags over them.
    #[test]
    fn the_policies_come_from_the_file_or_the_flags() {
        let path = mcp_stdio_tests::TempPath::new("policy.toml");
        std::fs::write(
            &path,
            "tools = [\"read_*\"]\ndeny_tools = [\"read_secret\"]\nrate_limits = [\"5/1s\"]\n\
             repeat_limit = 3\nmax_result_text_bytes = 65536\nkeep = \"tail\"\n",
        )
        .unwrap();
        let from_file = SettingsArgs {
            config: Some(path.to_path_buf()),
            ..SettingsArgs::default()
        };
        let s = GuardSettings::resolve(&from_file).unwrap();
        let p = s.proxy.get_tool_policy().expect("policies");
        let limit = p.get_content_limit().expect("a content limit");
        assert_eq!((limit.max(), limit.keep()), (65536, Keep::Tail));
        let s = GuardSettings::resolve(&SettingsArgs {
            max_result_text: Some(100),
            keep: Some(KeepArg::Head),
            ..from_file
        })
        .unwrap();
        let p = s.proxy.get_tool_policy().expect("policies");
        let limit = p.get_content_limit().expect("a content limit");
        assert_eq!((limit.max(), limit.keep()), (100, Keep::Head));
        assert!(GuardSettings::resolve(&SettingsArgs::default())
            .unwrap()
            .proxy
            .get_tool_policy()
            .is_none());
        std::fs::write(&path, "keep = \"middle\"\n").unwrap();
        assert!(GuardSettings::resolve(&SettingsArgs {
            config: Some(path.to_path_buf()),
            ..SettingsArgs::default()
        })
        .is_err());
    }

    #[test]
    fn every_framer_option_comes_from_a_flag_or_the_file() {
        let defaults = GuardSettings::resolve(&SettingsArgs::default()).unwrap();
        assert_eq!(
            defaults.framer.get_max_frame(),
            mcp_stdio_core::DEFAULT_MAX_FRAME
        );
        assert_eq!(defaults.framer.get_id_scan_limit(), DEFAULT_ID_SCAN_LIMIT);
        assert_eq!(
            defaults.framer.get_oversized_policy(),
            OversizedPolicy::Discard
        );
        assert_eq!(
            defaults.framer.get_invalid_utf8(),
            InvalidUtf8Policy::Repair
        );
        let path = mcp_stdio_tests::TempPath::new("guard.toml");
        std::fs::write(
            &path,
            "id_scan_limit_bytes = 16\noversized_policy = \"close\"\ninvalid_utf8 = \"refuse\"\n",
        )
        .unwrap();
        let from_file = SettingsArgs {
            config: Some(path.to_path_buf()),
            ..SettingsArgs::default()
        };
        let s = GuardSettings::resolve(&from_file).unwrap();
        assert_eq!(s.framer.get_id_scan_limit(), 16);
        assert_eq!(s.framer.get_oversized_policy(), OversizedPolicy::Close);
        assert_eq!(s.framer.get_invalid_utf8(), InvalidUtf8Policy::Refuse);
        // Flags override the file.
        let s = GuardSettings::resolve(&SettingsArgs {
            id_scan_limit: Some(0),
            oversized_policy: Some(Oversized::Discard),
            invalid_utf8: Some(InvalidUtf8::Repair),
            ..from_file
        })
        .unwrap();
        assert_eq!(s.framer.get_id_scan_limit(), 0);
        assert_eq!(s.framer.get_oversized_policy(), OversizedPolicy::Discard);
        assert_eq!(s.framer.get_invalid_utf8(), InvalidUtf8Policy::Repair);
        std::fs::write(&path, "oversized_policy = \"truncate\"\n").unwrap();
        let err = GuardSettings::resolve(&SettingsArgs {
            config: Some(path.to_path_buf()),
            ..SettingsArgs::default()
        })
        .unwrap_err();
        assert!(err.contains("unknown variant"), "{err}");
    }

    /// The core raises a wire limit below `MIN_MAX_FRAME`; the guard refuses
    /// it, from a flag or the file, naming the minimum; the minimum itself
    /// is taken.
    #[test]
    fn an_idle_stop_reads_seconds_or_a_unit() {
        let d = |t: &str| parse_duration(t).ok();
        assert_eq!(d("300"), Some(Duration::from_secs(300)));
        assert_eq!(d("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(d("90s"), Some(Duration::from_secs(90)));
        assert_eq!(d("5m"), Some(Duration::from_secs(300)));
        assert_eq!(d("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(d("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "0", "-1", "5x", "m", "1e400", "NaN"] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_wire_limit_below_the_cores_minimum_is_refused_naming_it() {
        let err = GuardSettings::resolve(&SettingsArgs {
            max_frame: Some(MIN_MAX_FRAME - 1),
            ..SettingsArgs::default()
        })
        .unwrap_err();
        assert_eq!(
            err,
            format!(
                "--max-frame: a wire limit of {} bytes is too small (at least {MIN_MAX_FRAME})",
                MIN_MAX_FRAME - 1
            )
        );
        let path = mcp_stdio_tests::TempPath::new("guard.toml");
        std::fs::write(&path, "max_frame_bytes = 0\n").unwrap();
        let err = GuardSettings::resolve(&SettingsArgs {
            config: Some(path.to_path_buf()),
            ..SettingsArgs::default()
        })
        .unwrap_err();
        assert!(
            err.contains("max_frame_bytes: a wire limit of 0 bytes is too small (at least 64)"),
            "{err}"
        );
        let s = GuardSettings::resolve(&SettingsArgs {
            max_frame: Some(MIN_MAX_FRAME),
            ..SettingsArgs::default()
        })
        .unwrap();
        assert_eq!(s.framer.get_max_frame(), MIN_MAX_FRAME);
    }
}
