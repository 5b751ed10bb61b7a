//! `mcp-stdio check [--json] [OPTIONS] [-- SERVER_COMMAND …]`: the release-gate
//! battery against any MCP server, as a table of PASS / WARN / FAIL rows with
//! the measured value on each row (`--json`: one JSON document on stdout).
//!
//! Each row that needs isolation gets a fresh server process, so one row's
//! damage does not show up in the next; every step is bounded by
//! `--timeout`, so a hung server gives FAIL rows, never a hung `check`.
//! Progress lines go to stderr. With no server command, the built-in
//! misbehaving server ([`builtin`]) is checked.

mod battery;
pub(crate) mod builtin;
mod ci;
pub(crate) mod procs;
mod raw;
mod report;
mod rows;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::DEFAULT_MAX_FRAME;
use serde_json::Value;

use battery::{Settings, ToolCall};

/// Exit status when a row failed.
const EXIT_FAILED: u8 = 1;
/// Exit status for a usage error (bad flag value, server cannot be started).
const EXIT_USAGE: u8 = 2;

/// Largest file `--large-args @FILE` / `--slow-args @FILE` reads: 16 MiB.
pub(crate) const MAX_ARGS_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Characters of a bad `--large-args`/`--slow-args` value echoed in an error.
const ECHO_CHARS: usize = 80;

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run the release-gate battery against an MCP server over stdio and print a \
table of PASS / WARN / FAIL / SKIP rows, each with its measured value. Rows that need \
isolation get a fresh server process; every step is bounded by --timeout.\n\n\
With no SERVER_COMMAND, a built-in deliberately misbehaving server is checked (it uses \
its tools `big` and `slow` for the large, slow-reader and cancel rows), so the command \
shows real findings on a fresh machine.",
    after_long_help = ROWS_HELP,
    after_help = "Rows: initialize, stdout hygiene, malformed line, large response, slow reader, \
cancel, stdin EOF, SIGTERM, stderr volume, leftover processes (see --help for each rule). \
Rows 1-8 run once per protocol revision the server speaks (2025-11-25, then 2026-07-28): 10 rows \
for a server that speaks one, 18 for one that speaks both.\n\
Exit status: 0 when no row FAILs (PASS/WARN/SKIP only), 1 when any row FAILs, 2 on usage errors \
or when the --junit file cannot be written.\n\n\
Example:\n  mcp-stdio check -- node build/index.js\n  mcp-stdio check --json --large-tool search \
--large-args '{\"query\":\"*\"}' -- python -m my_server"
)]
pub(crate) struct CheckArgs {
    /// Print the result as one JSON document on stdout instead of the table.
    #[arg(long, conflicts_with = "markdown")]
    pub(crate) json: bool,
    /// Print the result as a Markdown summary on stdout instead of the table
    /// (for a CI job page, e.g. `>> "$GITHUB_STEP_SUMMARY"`).
    #[arg(long)]
    pub(crate) markdown: bool,
    /// Also write the result as JUnit XML to FILE: one test case per row; FAIL is a
    /// failure, SKIP is skipped, WARN passes with a note in its system-out.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<std::path::PathBuf>,
    /// Bound on every step (spawn to answer, each request, each wait), in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub(crate) timeout: f64,
    /// Wire limit for one message from the server, in bytes (larger responses are refused unparsed).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_FRAME)]
    pub(crate) max_frame: usize,
    /// A tool that returns a large result, for the large-response and slow-reader rows.
    #[arg(long, value_name = "NAME")]
    pub(crate) large_tool: Option<String>,
    /// The JSON arguments object for --large-tool, or @FILE to read it from FILE
    /// (at most 16 MiB; for values too large for a command line).
    #[arg(
        long,
        value_name = "JSON|@FILE",
        requires = "large_tool",
        default_value = "{}"
    )]
    pub(crate) large_args: String,
    /// A tool that takes a while (a second or more), for the cancel row.
    #[arg(long, value_name = "NAME")]
    pub(crate) slow_tool: Option<String>,
    /// The JSON arguments object for --slow-tool, or @FILE to read it from FILE (at most 16 MiB).
    #[arg(
        long,
        value_name = "JSON|@FILE",
        requires = "slow_tool",
        default_value = "{}"
    )]
    pub(crate) slow_args: String,
    /// Milliseconds after starting --slow-tool at which it is cancelled.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub(crate) cancel_after_ms: u64,
    /// Seconds the slow-reader row leaves the server's stdout unread.
    #[arg(long, value_name = "SECONDS", default_value_t = 3.0)]
    pub(crate) stall: f64,
    /// Seconds from closing stdin to SIGTERM, and from SIGTERM to SIGKILL.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub(crate) shutdown_grace: f64,
    /// stderr bytes over the whole battery above which the stderr row WARNs.
    #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024)]
    pub(crate) stderr_warn: u64,
    /// No progress lines on stderr, and of our own log only errors (no WARN lines).
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// The server command and its arguments (after `--`; no shell is involved).
    /// Without it, the built-in misbehaving server is checked.
    #[arg(last = true, value_name = "SERVER_COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// The rows and their rules, for `check --help`.
const ROWS_HELP: &str = "\
Rows (each PASS / WARN / FAIL / SKIP with its measured value). Rows 1-8 run once per protocol
revision the server speaks (2025-11-25, then 2026-07-28; the title says which), rows 9-10 once
over every session: 10 rows for a server that speaks one revision, 18 for one that speaks both.
   1  initialize handshake
        latency, negotiated protocol version, server name and version.
        FAIL: no answer within --timeout, an error, or an unsupported version.
   2  stdout hygiene
        lines on stdout that are not JSON-RPC messages, over initialize,
        3 pings and tools/list. FAIL: any (the MCP spec says MUST NOT);
        WARN: responses to ids never sent, or a ping went unanswered.
   3  survives a malformed line
        a malformed JSON line on stdin (raw pipe), then a ping.
        PASS: the ping is answered; FAIL: the server exits or stops answering.
   4  large response
        tools/call --large-tool with --large-args; reports the response size.
        PASS: completes under --max-frame, or is refused at that limit and the
        session still answers a ping (the id is found anywhere in the refused
        line, first or last member); WARN: the tool answers with an error
        (named as such when the server's own wire limit refused the result),
        or an over-limit line without a usable id arrived instead of the answer;
        FAIL: the session dies or hangs. SKIP without --large-tool.
   5  slow reader
        raw pipe: the large call, stdout left unread for --stall seconds,
        then read; reports how long the server was blocked in write().
        PASS: the response and a ping arrive; FAIL: they do not; WARN: the
        response fit in the pipe (nothing exercised). SKIP without --large-tool.
   6  cancel + second request
        --slow-tool cancelled after --cancel-after-ms, then a ping, then 1 s
        watching for a late response to the cancelled id. PASS: prompt ping
        (< 500 ms) and no late response; WARN: a late response (the spec says
        MUST NOT) or a slow ping; FAIL: no ping answer. SKIP without --slow-tool.
   7  exits on stdin EOF
        fresh process, stdin closed. PASS: exits with status 0 within
        --shutdown-grace; WARN: exits with a failure status (the end of its
        stderr is shown), or SIGTERM was needed; FAIL: SIGKILL was needed,
        or it crashed.
   8  exits on SIGTERM
        fresh process, SIGTERM to its process group with stdin still open.
        PASS: exits within --shutdown-grace; FAIL: SIGKILL was needed.
   9  stderr volume
        stderr bytes over the whole battery. WARN: above --stderr-warn.
  10  leftover processes
        after each session, live processes still in the server's process
        group (Linux /proc). FAIL: any, with their pids (they are then killed);
        SKIP on other systems.

Exit status: 0 when no row FAILs (PASS/WARN/SKIP only), 1 when any row FAILs, 2 on usage errors \
or when the --junit file cannot be written.
The table (or --json document, or --markdown summary) goes to stdout; progress lines go to stderr
(-q: none, and of the log only errors; MCP_STDIO_LOG overrides that).
--large-args @FILE / --slow-args @FILE read the JSON object from FILE (at most 16 MiB), for values
a command line cannot hold.
Row 1 FAILs with the server's exit status and the end of its stderr when it exits first.
--junit FILE also writes JUnit XML: one test case per row, named by its id; FAIL rows are
<failure>, SKIP rows <skipped>, WARN rows pass with the warning in <system-out>.

Examples:
  mcp-stdio check
      the built-in misbehaving server: several rows FAIL or WARN on purpose
  mcp-stdio check -- node build/index.js
  mcp-stdio check --large-tool search --large-args @big-query.json -- ./my-server
  mcp-stdio check --json --large-tool big --large-args '{\"bytes\":2000000}' \\
      --slow-tool slow --slow-args '{\"ms\":5000}' -- ./target/release/my-server --stdio
  mcp-stdio check --junit report.xml --markdown -- ./my-server >> \"$GITHUB_STEP_SUMMARY\"";

/// Runs `check`; returns the exit status.
pub(crate) async fn run(args: CheckArgs) -> ExitCode {
    let settings = match resolve(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio check: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = match battery::run(&settings).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcp-stdio check: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let text = if args.json {
        report.to_json() + "\n"
    } else if args.markdown {
        report.to_markdown()
    } else {
        report.to_table()
    };
    let mut code = if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    };
    if let Some(path) = &args.junit {
        // A CI job must not pass on a report it could not keep.
        if let Err(e) = std::fs::write(path, report.to_junit()) {
            eprintln!("mcp-stdio check: writing --junit {}: {e}", path.display());
            code = ExitCode::from(EXIT_USAGE);
        }
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A reader that went away (`| head`) is not our failure to report.
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("mcp-stdio check: writing the report: {e}");
        }
    }
    code
}

fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{name}: expected a positive number of seconds, got {v}"))
}

fn tool(flag: &str, name: Option<&String>, args: &str) -> Result<Option<ToolCall>, String> {
    let Some(name) = name else {
        return Ok(None);
    };
    let (text, source) = match args.strip_prefix('@') {
        Some(path) => (
            read_args_file(flag, Path::new(path))?,
            format!("file {path}"),
        ),
        None => (args.to_owned(), format!("`{}`", echo(args))),
    };
    let arguments: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{flag}: not valid JSON ({e}) in {source}"))?;
    if !arguments.is_object() {
        return Err(format!(
            "{flag}: expected a JSON object (`{{\"key\": …}}`), got {source}"
        ));
    }
    Ok(Some(ToolCall {
        name: name.clone(),
        arguments,
    }))
}

/// The text of `--large-args @FILE`, at most [`MAX_ARGS_FILE_BYTES`].
fn read_args_file(flag: &str, path: &Path) -> Result<String, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| {
        format!("{flag} @{shown}: cannot open {shown}: {e}; give the path of a file holding the JSON object")
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_ARGS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{flag} @{shown}: reading {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_ARGS_FILE_BYTES {
        return Err(format!(
            "{flag} @{shown}: {shown} is larger than the {} MiB limit for an arguments file",
            MAX_ARGS_FILE_BYTES / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{flag} @{shown}: {shown} is not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// `s`, cut to [`ECHO_CHARS`] characters (marked) for an error message.
fn echo(s: &str) -> String {
    match s.char_indices().nth(ECHO_CHARS) {
        Some((i, _)) => format!("{}… ({} bytes)", &s[..i], s.len()),
        None => s.to_owned(),
    }
}

fn resolve(args: &CheckArgs) -> Result<Settings, String> {
    let builtin = args.command.is_empty();
    let (spec, server) = if builtin {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find our own executable for the built-in server: {e}"))?;
        let mut spec = CommandSpec::new(&exe);
        spec.arg("builtin-server");
        (
            spec,
            "built-in misbehaving server (`mcp-stdio builtin-server`); \
             give `-- SERVER_COMMAND` to check yours"
                .to_owned(),
        )
    } else {
        let spec = CommandSpec::from_argv(&args.command)
            .ok_or_else(|| "no server command given after `--`".to_owned())?;
        let server = spec.display();
        (spec, server)
    };
    let mut large = tool("--large-args", args.large_tool.as_ref(), &args.large_args)?;
    let mut slow = tool("--slow-args", args.slow_tool.as_ref(), &args.slow_args)?;
    if builtin {
        // The built-in server's own tools, unless the user named others.
        if large.is_none() {
            large = tool(
                "built-in large args",
                Some(&builtin::LARGE_TOOL.to_owned()),
                builtin::LARGE_ARGS,
            )?;
        }
        if slow.is_none() {
            slow = tool(
                "built-in slow args",
                Some(&builtin::SLOW_TOOL.to_owned()),
                builtin::SLOW_ARGS,
            )?;
        }
    }
    crate::config::wire_limit(
        &mut mcp_stdio_core::FramerConfig::default(),
        "--max-frame",
        args.max_frame,
    )?;
    Ok(Settings {
        spec,
        server,
        builtin,
        timeout: seconds("--timeout", args.timeout)?,
        max_frame: args.max_frame,
        large,
        slow,
        cancel_after: Duration::from_millis(args.cancel_after_ms),
        stall: seconds("--stall", args.stall)?,
        grace: seconds("--shutdown-grace", args.shutdown_grace)?,
        stderr_warn: args.stderr_warn,
        quiet: args.quiet,
    })
}
