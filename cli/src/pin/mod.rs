//! Pinned tool definitions: `mcp-stdio guard --pin FILE` and `mcp-stdio pin
//! accept|show FILE`.
//!
//! The guard's core decides (see `mcp_stdio_core::ToolPins`); this module
//! owns the file: reading it at the guard's start (a file that cannot be
//! read is a usage error, exit 2), writing what the guard saw off its loop
//! ([`writer`]), and the two commands a person runs: `show` prints the
//! pinned tools and the pending differences, `accept` makes the pending
//! definitions the pinned ones.

mod file;
mod writer;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mcp_stdio_core::{PinPolicy, ToolPins};
use serde::Deserialize;
use serde_json::Value;

use file::{utc, Change, PinFile};
pub(crate) use writer::PinWriter;

/// Exit status of `pin` for a file that cannot be read or written, or a
/// tool named that is not pending.
const EXIT_USAGE: u8 = 2;

/// Longest description shown by `pin show`, in characters.
const SHOWN_DESCRIPTION_CHARS: usize = 160;

/// What the guard does with a tool whose definition is not the pinned one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PinPolicyArg {
    /// Report it on stderr, in the audit log and the metrics; forward it.
    Warn,
    /// Report it; take changed and added tools out of tools/list and refuse their calls.
    Hide,
    /// Report it; tools/list answers with changes become errors, every tools/call is refused.
    Block,
}

impl From<PinPolicyArg> for PinPolicy {
    fn from(p: PinPolicyArg) -> Self {
        match p {
            PinPolicyArg::Warn => Self::Warn,
            PinPolicyArg::Hide => Self::Hide,
            PinPolicyArg::Block => Self::Block,
        }
    }
}

/// The guard's pin settings (`--pin`, `--pin-policy`, or the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PinSettings {
    pub(crate) path: PathBuf,
    pub(crate) policy: PinPolicy,
}

/// `path` as one shell word (quoted when it needs to be), for the commands
/// a message tells a person to run.
fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./-+:@%=,".contains(&b));
    if plain {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The pins a guard starts with, and the writer of what it sees. A file
/// that exists and cannot be read, or a missing file whose folder does not
/// exist, is an error (the guard's usage error); a missing file is first
/// use.
pub(crate) fn for_guard(settings: &PinSettings) -> Result<(ToolPins, PinWriter), String> {
    let path = &settings.path;
    let mut pins = match PinFile::read(path)? {
        Some(file) => file.to_pins(path, settings.policy)?,
        None => {
            let folder = path
                .parent()
                .filter(|f| !f.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !folder.is_dir() {
                return Err(format!(
                    "pin file {}: its folder {} does not exist",
                    path.display(),
                    folder.display()
                ));
            }
            let mut pins = ToolPins::new(file::sha256);
            pins.policy(settings.policy).first_use(true);
            pins
        }
    };
    let word = shell_word(path);
    pins.accept_hint(&format!(
        "review with `mcp-stdio pin show {word}`, accept with `mcp-stdio pin accept {word}`, then restart the server"
    ));
    let writer = PinWriter::start(path.clone())?;
    Ok((pins, writer))
}

/// Arguments of `pin`.
#[derive(Debug, clap::Args)]
pub(crate) struct PinArgs {
    #[command(subcommand)]
    command: PinCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PinCommand {
    /// Accept what guards saw and did not accept: the pending definitions become the pinned
    /// ones (a removed tool is unpinned). Prints what it accepted.
    Accept {
        /// The pin file (`guard --pin FILE`).
        file: PathBuf,
        /// Accept only these tools [default: every pending difference].
        #[arg(value_name = "TOOL")]
        tools: Vec<String>,
    },
    /// Print the pinned tools and the pending differences.
    Show {
        /// The pin file (`guard --pin FILE`).
        file: PathBuf,
    },
}

/// Runs `pin`; returns the exit status.
pub(crate) fn run(args: &PinArgs) -> ExitCode {
    let result = match &args.command {
        PinCommand::Accept { file, tools } => accept(file, tools),
        PinCommand::Show { file } => show(file),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcp-stdio pin: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn read_existing(path: &Path) -> Result<PinFile, String> {
    let file =
        PinFile::read(path)?.ok_or_else(|| format!("pin file {}: not found", path.display()))?;
    // Every entry must be sound before anything is changed or shown as pinned.
    file.to_pins(path, PinPolicy::Warn)?;
    Ok(file)
}

/// Moves the pending entries (all, or those of `only`) into the pinned
/// tools; the text says what was accepted.
fn accept(path: &Path, only: &[String]) -> Result<String, String> {
    let mut file = read_existing(path)?;
    if let Some(missing) = only.iter().find(|t| !file.pending.contains_key(*t)) {
        return Err(format!(
            "pin file {}: nothing pending for tool {missing:?}",
            path.display()
        ));
    }
    let chosen: Vec<String> = file
        .pending
        .keys()
        .filter(|t| only.is_empty() || only.contains(t))
        .cloned()
        .collect();
    if chosen.is_empty() {
        return Ok(format!("nothing pending in {}\n", path.display()));
    }
    let mut out = format!("accepted in {}:\n", path.display());
    for tool in chosen {
        let Some(entry) = file.pending.remove(&tool) else {
            continue;
        };
        match (entry.change, entry.tool()) {
            (Change::Removed, _) => {
                file.tools.remove(&tool);
                out.push_str(&format!("  {tool}: removed (no longer pinned)\n"));
            }
            (change, Some(t)) => {
                file.tools.insert(tool.clone(), t);
                let fields = if entry.fields.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", entry.fields.join(", "))
                };
                out.push_str(&format!("  {tool}: {}{fields}\n", change.as_str()));
            }
            // `read_existing` checked that every change but a removal has a sha256.
            (_, None) => {}
        }
    }
    file.write(path)?;
    out.push_str("a guard running now keeps the pins it started with: restart the server\n");
    Ok(out)
}

/// The pinned tools and the pending differences, for a person.
fn show(path: &Path) -> Result<String, String> {
    let file = read_existing(path)?;
    let mut out = format!(
        "pin file {}: {} tool(s) pinned, {} difference(s) pending (digest {}, covering {})\n",
        path.display(),
        file.tools.len(),
        file.pending.len(),
        file.digest,
        file.covers.join(", ")
    );
    let width = file
        .tools
        .keys()
        .chain(file.pending.keys())
        .map(|t| t.chars().count())
        .max()
        .unwrap_or(0)
        .min(40);
    if !file.tools.is_empty() {
        out.push_str("pinned:\n");
    }
    for (tool, entry) in &file.tools {
        let what = match &entry.definition {
            Some(d) => description(d),
            None => "(definition not kept: too large; pinned by its digests)".to_owned(),
        };
        out.push_str(&format!(
            "  {tool:width$}  sha256 {}…  {what}\n",
            entry.sha256.get(..12).unwrap_or(&entry.sha256)
        ));
    }
    if !file.pending.is_empty() {
        out.push_str(&format!(
            "pending (accept with `mcp-stdio pin accept {}`):\n",
            shell_word(path)
        ));
    }
    for (tool, entry) in &file.pending {
        let seen = entry
            .seen_unix_ms
            .map(|ms| format!(", seen {}", utc(ms)))
            .unwrap_or_default();
        let fields = if entry.fields.is_empty() {
            String::new()
        } else {
            format!(" ({})", entry.fields.join(", "))
        };
        out.push_str(&format!(
            "  {tool:width$}  {}{fields}{seen}\n",
            entry.change.as_str()
        ));
        let pad = " ".repeat(width + 4);
        if entry.change == Change::Changed && entry.fields.iter().any(|f| f == "description") {
            if let Some(old) = file.tools.get(tool).and_then(|t| t.definition.as_ref()) {
                out.push_str(&format!("{pad}pinned: {}\n", description(old)));
            }
        }
        match &entry.definition {
            Some(d) if entry.change != Change::Removed => {
                out.push_str(&format!("{pad}now:    {}\n", description(d)));
            }
            None if entry.change != Change::Removed => {
                out.push_str(&format!("{pad}now:    (definition not kept: too large)\n"));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A definition's description, quoted and cut, for one line.
fn description(definition: &Value) -> String {
    match definition.get("description").and_then(Value::as_str) {
        Some(d) => {
            let cut: String = d.chars().take(SHOWN_DESCRIPTION_CHARS).collect();
            let more = if cut.len() < d.len() { "…" } else { "" };
            format!("{cut:?}{more}")
        }
        None => "(no description)".to_owned(),
    }
}
