//! The message the guard writes to stderr when its server ended in a way
//! the user should hear about: on its own (its stdin still open), with
//! a failure status, or only after a signal.
//!
//! Silent when the host closed the session (stdin EOF or a signal to the
//! guard) and the server then exited with code 0, and when the guard closed
//! the session itself (the proxy already said why).

use mcp_stdio_core::EndedBy;
use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::GuardReport;

use crate::diagnose::{ended_on_its_own, status_short, status_words, StderrExcerpt};

/// The message, or `None` when the end was the ordinary one. `server` is
/// the command as the user wrote it.
pub(crate) fn end_message(report: &GuardReport, server: &str) -> Option<String> {
    if report.guard_closed_session.is_some() {
        return None;
    }
    let p = report.process.as_ref()?;
    let m = &report.proxy;
    let answered = match (m.requests, m.responses) {
        (0, _) => "before any request".to_owned(),
        (n, 0) => format!("before answering any of {n} request{}", plural(n)),
        (n, r) => format!("after answering {r} of {n} request{}", plural(n)),
    };
    let on_own = ended_on_its_own(p);
    let clean = p.exit_status == Some(ExitStatus::Code(0));
    let status = status_words(p.exit_status);
    let short = status_short(p.exit_status);
    let exit_on_eof = "a stdio server should exit when its stdin closes";
    // How a shutdown that needed signals began.
    let lead = || {
        if on_own {
            format!("closed its stdout {answered} with its stdin still open, but kept running")
        } else {
            match (p.stdin_closed_at, p.term_sent_at) {
                (Some(c), Some(t)) => format!(
                    "did not exit within {:.1} s of its stdin closing",
                    t.saturating_sub(c).as_secs_f64()
                ),
                _ => "did not exit when its stdin closed".to_owned(),
            }
        }
    };
    // (what happened, a hint shown always, a hint shown when stderr is empty)
    let (what, always, without_stderr) = match p.ended_by {
        EndedBy::ExitedByItself | EndedBy::ExitedAfterStdinClose if on_own => (
            format!("{status} {answered}, with its stdin still open"),
            clean.then_some("a stdio server should run until its stdin closes"),
            (!clean).then_some("run the command by itself to see why"),
        ),
        EndedBy::ExitedByItself | EndedBy::ExitedAfterStdinClose => {
            if clean {
                return None;
            }
            (
                format!("{status} after its stdin closed, {answered}"),
                None,
                None,
            )
        }
        // The host stopped it with a signal, passed on as it came: its end,
        // whatever its status, is the one it would have had directly.
        EndedBy::ExitedAfterForwardedSignal => return None,
        EndedBy::ExitedAfterTerm if p.forwarded_signal.is_some() => return None,
        EndedBy::ExitedAfterTerm => (
            format!("{}; SIGTERM stopped it ({short})", lead()),
            Some(exit_on_eof),
            None,
        ),
        EndedBy::ExitedAfterKill => (
            format!(
                "{}; it ignored SIGTERM too, and SIGKILL stopped it ({short})",
                lead()
            ),
            Some(exit_on_eof),
            None,
        ),
        EndedBy::Crashed => (
            format!("crashed: {status} {answered}"),
            None,
            Some("run the command by itself to see why"),
        ),
        EndedBy::ExitNotObserved => (
            format!("{}; no exit was observed even after SIGKILL", lead()),
            Some("it may be stuck in the kernel (uninterruptible sleep): look at it with `ps`"),
            None,
        ),
    };
    let mut out = format!("mcp-stdio guard: the server {what} (command: {server})");
    if let Some(hint) = always {
        out.push_str("; ");
        out.push_str(hint);
    }
    let s = &report.stderr;
    match StderrExcerpt::of(&report.stderr_tail, s.seen, s.truncated) {
        Some(excerpt) => {
            out.push_str("; ");
            out.push_str(&excerpt.header());
            out.push('\n');
            out.push_str(&excerpt.indented("  | "));
        }
        None => {
            out.push_str("; it wrote nothing to stderr");
            if let Some(hint) = without_stderr {
                out.push_str(": ");
                out.push_str(hint);
            }
        }
    }
    out.push('\n');
    Some(out)
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
