//! What a person reads when a server cannot start or ends: the spawn
//! failure with what to check, the exit status in words, and a bounded
//! excerpt of the server's stderr. Shared by `guard` and `check`.

use std::io;
use std::path::Path;

use mcp_stdio_core::{CommandSpec, ExitStatus, ProcessOutcome};
use mcp_stdio_core::{EndedBy, StreamEnd};

/// Lines of the server's stderr shown in a message: the last 5.
pub(crate) const EXCERPT_LINES: usize = 5;
/// Bytes of the server's stderr shown in a message: at most 1 KiB.
pub(crate) const EXCERPT_BYTES: usize = 1024;

/// Exit status of `guard` when the server command is not executable
/// (permission denied, not a program): 126, as a shell reports it.
pub(crate) const EXIT_NOT_EXECUTABLE: u8 = 126;
/// Exit status of `guard` when the server command cannot be started for any
/// other reason (not found, …): 127, as a shell reports it.
pub(crate) const EXIT_NOT_STARTED: u8 = 127;

/// A spawn that failed: what to tell the user and the exit status it maps to.
#[derive(Debug)]
pub(crate) struct SpawnFailure {
    /// One line: what failed, with the program's name, and what to check.
    pub(crate) message: String,
    /// [`EXIT_NOT_EXECUTABLE`] or [`EXIT_NOT_STARTED`].
    pub(crate) exit: u8,
}

/// Explains why `spec` could not be spawned in a sandbox (`sandboxed`), or
/// without one.
pub(crate) fn spawn_failure_in(spec: &CommandSpec, e: &io::Error, sandboxed: bool) -> SpawnFailure {
    if sandboxed && !e.to_string().starts_with("sandbox") && e.raw_os_error().is_some() {
        // The error may come from the sandbox's setup in the child (a namespace
        // refused) or from `exec` inside it (a program outside its rules).
        let program = spec.get_program().to_string_lossy();
        return SpawnFailure {
            message: format!(
                "cannot start the server in its sandbox: `{program}`: {e}; check that the \
                 program's folder is readable and executable in the sandbox (--sandbox-exec), \
                 and that it starts without the sandbox"
            ),
            exit: if e.kind() == io::ErrorKind::PermissionDenied {
                EXIT_NOT_EXECUTABLE
            } else {
                EXIT_NOT_STARTED
            },
        };
    }
    if sandboxed && e.raw_os_error().is_none() {
        // The sandbox's own refusal (a path that cannot be opened, a ruleset
        // the kernel refused): its message says it all.
        return SpawnFailure {
            message: format!("cannot start the server: {e}"),
            exit: EXIT_NOT_STARTED,
        };
    }
    spawn_failure(spec, e)
}

/// Explains why `spec` could not be spawned.
pub(crate) fn spawn_failure(spec: &CommandSpec, e: &io::Error) -> SpawnFailure {
    let program = spec.get_program().to_string_lossy().into_owned();
    let path = Path::new(spec.get_program());
    let has_slash = program.contains('/') || program.contains(std::path::MAIN_SEPARATOR);
    let not_a_program = is_exec_format_error(e);
    let (what, hint, exit) = match e.kind() {
        io::ErrorKind::NotFound if !has_slash => (
            format!("`{program}` was not found in PATH"),
            "check the spelling, install it, or give its full path (no shell is involved: \
             aliases and shell functions do not count)"
                .to_owned(),
            EXIT_NOT_STARTED,
        ),
        io::ErrorKind::NotFound if path.exists() => (
            format!("`{program}` exists, but the interpreter on its `#!` line was not found"),
            "check its first line, or run it through its interpreter (`-- node FILE`, `-- python3 FILE`)"
                .to_owned(),
            EXIT_NOT_STARTED,
        ),
        io::ErrorKind::NotFound => (
            format!("`{program}` does not exist"),
            format!("check the path (a relative path starts from {})", cwd()),
            EXIT_NOT_STARTED,
        ),
        io::ErrorKind::PermissionDenied if path.is_dir() => (
            format!("`{program}` is a folder, not a program"),
            "name the server's executable inside it".to_owned(),
            EXIT_NOT_EXECUTABLE,
        ),
        io::ErrorKind::PermissionDenied => (
            format!("`{program}` is not executable (permission denied)"),
            format!(
                "make it executable (`chmod +x {program}`), or run it through its interpreter \
                 (`-- node {program}`)"
            ),
            EXIT_NOT_EXECUTABLE,
        ),
        _ if not_a_program => (
            format!("`{program}` is not a program this system can run ({e})"),
            "a script needs a `#!` line, or run it through its interpreter".to_owned(),
            EXIT_NOT_EXECUTABLE,
        ),
        _ => (
            format!("`{program}` could not be started: {e}"),
            "check the command and the system's limits (processes, open files)".to_owned(),
            EXIT_NOT_STARTED,
        ),
    };
    SpawnFailure {
        message: format!("cannot start the server: {what}; {hint}"),
        exit,
    }
}

fn is_exec_format_error(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(rustix::io::Errno::NOEXEC.raw_os_error())
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

fn cwd() -> String {
    std::env::current_dir().map_or_else(
        |_| "the current folder".to_owned(),
        |d| d.display().to_string(),
    )
}

/// An exit status in words: `exited with code 1`, `was killed by signal 9
/// (SIGKILL)`, or `ended without an observed exit status`.
pub(crate) fn status_words(status: Option<ExitStatus>) -> String {
    match status {
        Some(ExitStatus::Code(c)) => format!("exited with code {c}"),
        Some(ExitStatus::Signal(s)) => match signal_name(s) {
            Some(name) => format!("was killed by signal {s} ({name})"),
            None => format!("was killed by signal {s}"),
        },
        None => "ended without an observed exit status".to_owned(),
    }
}

/// An exit status in short: `code 1`, `signal 15`, or `no exit status observed`.
pub(crate) fn status_short(status: Option<ExitStatus>) -> String {
    match status {
        Some(ExitStatus::Code(c)) => format!("code {c}"),
        Some(ExitStatus::Signal(s)) => format!("signal {s}"),
        None => "no exit status observed".to_owned(),
    }
}

/// Names of the signals whose numbers are the same on every Unix.
fn signal_name(n: i32) -> Option<&'static str> {
    Some(match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// True when the server ended before anyone asked it to: it exited, or
/// closed its stdout, before the first shutdown step.
pub(crate) fn ended_on_its_own(p: &ProcessOutcome) -> bool {
    p.ended_by == EndedBy::ExitedByItself || p.stdout == Some(StreamEnd::Eof)
}

/// The last lines of a server's stderr, bounded by [`EXCERPT_LINES`] and
/// [`EXCERPT_BYTES`], with control characters made harmless (no escape
/// sequence of the server's reaches a terminal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StderrExcerpt {
    /// The lines shown, oldest first.
    pub(crate) lines: Vec<String>,
    /// Bytes shown (after making control characters harmless).
    pub(crate) shown_bytes: usize,
    /// Bytes the server wrote to stderr in all.
    pub(crate) seen_bytes: u64,
    /// True when lines or bytes before the shown ones were left out.
    pub(crate) cut: bool,
}

impl StderrExcerpt {
    /// The excerpt of `retained` (the kept stderr, as a record renders it:
    /// after a truncation marker line when bytes were dropped); `seen` is
    /// what the server wrote in all, and `truncated` whether the record
    /// kept less than that. `None` when there is nothing to show.
    pub(crate) fn of(retained: &str, seen: u64, truncated: bool) -> Option<Self> {
        let text = retained.trim_end_matches(['\n', '\r', ' ', '\t']);
        if text.is_empty() {
            return None;
        }
        let mut lines = Vec::new();
        let mut shown = 0usize;
        let mut cut = false;
        for line in text.rsplit('\n') {
            if lines.len() == EXCERPT_LINES {
                cut = true;
                break;
            }
            let line = harmless(line.trim_end_matches('\r'));
            let room = EXCERPT_BYTES - shown;
            if line.len() > room {
                cut = true;
                // An over-long newest line: keep its end.
                if lines.is_empty() {
                    let mut start = line.len() - room;
                    while !line.is_char_boundary(start) {
                        start += 1;
                    }
                    shown += line.len() - start;
                    lines.push(line[start..].to_owned());
                }
                break;
            }
            shown += line.len();
            lines.push(line);
        }
        lines.reverse();
        // The record dropped bytes itself (its marker line may be among ours).
        cut |= truncated;
        Some(Self {
            lines,
            shown_bytes: shown,
            seen_bytes: seen,
            cut,
        })
    }

    /// A header for the lines: `its stderr ends with` or, when cut, `its
    /// stderr ends with (last 5 lines, 412 of 1331 bytes)`.
    pub(crate) fn header(&self) -> String {
        if self.cut {
            format!(
                "its stderr ends with (last {} line{}, {} of {} bytes):",
                self.lines.len(),
                if self.lines.len() == 1 { "" } else { "s" },
                self.shown_bytes,
                self.seen_bytes
            )
        } else {
            "its stderr:".to_owned()
        }
    }

    /// The lines, each after `prefix`, joined by newlines.
    pub(crate) fn indented(&self, prefix: &str) -> String {
        self.lines
            .iter()
            .map(|l| format!("{prefix}{l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `s` with control characters (escape sequences included) replaced by U+FFFD; tabs stay.
fn harmless(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_keeps_the_last_lines_and_says_when_it_cut() {
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let e = StderrExcerpt::of(&text, text.len() as u64, false).expect("some text");
        assert_eq!(
            e.lines,
            ["line 16", "line 17", "line 18", "line 19", "line 20"]
        );
        assert!(e.cut);
        assert!(
            e.header().contains("last 5 lines, 35 of 151 bytes"),
            "{}",
            e.header()
        );

        let short = StderrExcerpt::of("oops\n", 5, false).expect("some text");
        assert_eq!(short.lines, ["oops"]);
        assert!(!short.cut);
        assert_eq!(short.header(), "its stderr:");
        assert!(StderrExcerpt::of("\n\n", 2, false).is_none());
    }

    #[test]
    fn excerpt_is_bounded_in_bytes_and_harmless() {
        let long = format!("{}\n", "é".repeat(EXCERPT_BYTES));
        let e = StderrExcerpt::of(&long, long.len() as u64, false).expect("some text");
        assert!(e.shown_bytes <= EXCERPT_BYTES, "{}", e.shown_bytes);
        assert!(e.cut);
        assert_eq!(e.lines.len(), 1);
        let esc = StderrExcerpt::of("\u{1b}[31mred\u{1b}[0m\n", 12, false).expect("some text");
        assert_eq!(esc.lines, ["\u{FFFD}[31mred\u{FFFD}[0m"]);
        // Dropped by the record before us: cut even though every line fits.
        let marked = StderrExcerpt::of(
            "[stderr truncated: kept last 4 of 90 bytes]\nabc\n",
            90,
            true,
        )
        .expect("some text");
        assert!(marked.cut);
    }

    #[test]
    fn statuses_read_as_words() {
        assert_eq!(
            status_words(Some(ExitStatus::Code(1))),
            "exited with code 1"
        );
        assert_eq!(
            status_words(Some(ExitStatus::Signal(9))),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            status_words(Some(ExitStatus::Signal(40))),
            "was killed by signal 40"
        );
        assert_eq!(status_words(None), "ended without an observed exit status");
    }

    #[test]
    fn spawn_failures_name_the_program_and_what_to_check() {
        let not_found = io::Error::from(io::ErrorKind::NotFound);
        let f = spawn_failure(&CommandSpec::new("no-such-server-x"), &not_found);
        assert_eq!(f.exit, EXIT_NOT_STARTED);
        assert!(
            f.message
                .contains("`no-such-server-x` was not found in PATH"),
            "{}",
            f.message
        );
        let f = spawn_failure(&CommandSpec::new("/no/such/dir/server"), &not_found);
        assert!(f.message.contains("does not exist"), "{}", f.message);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let f = spawn_failure(&CommandSpec::new("./server.js"), &denied);
        assert_eq!(f.exit, EXIT_NOT_EXECUTABLE);
        assert!(f.message.contains("chmod +x ./server.js"), "{}", f.message);
    }
}
