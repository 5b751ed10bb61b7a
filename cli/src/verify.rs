//! `mcp-stdio verify FILE [--key-file K] [--require-seal] [--expect E]`:
//! offline audit-chain verification, then (with `--expect`) a comparison of
//! the calls it records with an expected lifecycle.
//!
//! Exit status: [`EXIT_OK`] intact and sealed (and as expected);
//! [`EXIT_FAIL`] tampered (a changed, removed, inserted or moved entry, a
//! seal that does not match), an `--expect-entries`/`--expect-head` anchor
//! missed, or unsealed with `--require-seal`; [`EXIT_USAGE`] bad arguments or
//! unreadable files; [`EXIT_UNSEALED`] intact but not sealed (cut, still
//! open, or a writer that died); [`EXIT_MISMATCH`] intact, but not what
//! `--expect` says; [`EXIT_NOT_AUDIT_LOG`] the file was never an audit log.
//! Tampering outranks a mismatch, which outranks an unsealed end.
//!
//! "Not an audit log" is narrow on purpose, so that damage cannot pass for
//! it: verification fails *and* no byte of the file names a chain field
//! (`"seq"` or `"prev"`, see [`ChainFieldScan`]). Every audit entry starts
//! with `{"seq":`, so a log with any entry left, however mangled the rest
//! (its first line included), stays `tampered`.

mod expect;

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use mcp_stdio_audit::{AuditKey, AuditVerifier, LogEnd, VerifySummary};

use expect::{Expectation, Observed, MAX_EXPECT_FILE_BYTES};

/// Intact and sealed (and as expected).
pub(crate) const EXIT_OK: u8 = 0;
/// Tampered, an anchor missed, or unsealed under `--require-seal`.
pub(crate) const EXIT_FAIL: u8 = 1;
/// Bad arguments or unreadable files.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Intact, but the log does not end with a seal (or a session in it does not).
pub(crate) const EXIT_UNSEALED: u8 = 3;
/// Intact, but different from `--expect`.
pub(crate) const EXIT_MISMATCH: u8 = 4;
/// Not an audit log at all: verification fails and no line names a chain field.
pub(crate) const EXIT_NOT_AUDIT_LOG: u8 = 5;

/// The audit chain's own member names as a line holds them. A file that
/// mentions neither anywhere never held an audit entry.
const CHAIN_FIELDS: [&[u8]; 2] = [b"\"seq\"", b"\"prev\""];

/// Finds [`CHAIN_FIELDS`] anywhere in a byte stream fed in chunks, in
/// constant memory (the few bytes a name can straddle between chunks).
#[derive(Debug, Default)]
struct ChainFieldScan {
    found: bool,
    /// The stream's last bytes, shorter than the longest field name.
    carry: Vec<u8>,
}

impl ChainFieldScan {
    fn push(&mut self, chunk: &[u8]) {
        if self.found {
            return;
        }
        let longest = CHAIN_FIELDS.iter().map(|f| f.len()).max().unwrap_or(0);
        let mut window = std::mem::take(&mut self.carry);
        window.extend_from_slice(chunk);
        self.found = CHAIN_FIELDS
            .iter()
            .any(|f| window.windows(f.len()).any(|w| w == *f));
        let keep = window.len().min(longest - 1);
        self.carry = window.split_off(window.len() - keep);
    }
}

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 intact and sealed (and as expected); 1 tampered, an \
anchor missed, or unsealed with --require-seal; 2 bad arguments or unreadable files; 3 intact \
but unsealed (cut, still being written, or its writer died); 4 intact but not as --expect says; \
5 not an audit log at all (verification fails and no line of the file has the chain's fields \
\"seq\" or \"prev\": e.g. a --metrics file). A log with any entry left, however damaged, is 1, \
never 5. Only 0 means verified."
)]
pub(crate) struct VerifyArgs {
    /// The audit log (JSON lines written by `mcp-stdio guard --audit`).
    pub(crate) file: PathBuf,
    /// The HMAC key file, for logs written with `--audit-key-file`.
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: Option<PathBuf>,
    /// Fail unless the log holds exactly this many entries (detects lines cut from the end).
    #[arg(long, value_name = "N")]
    pub(crate) expect_entries: Option<u64>,
    /// Fail unless the last entry's hash is this (hex; detects lines cut from the end).
    #[arg(long, value_name = "HASH")]
    pub(crate) expect_head: Option<String>,
    /// Fail (exit 1) when the log, or a session in it, is not sealed, instead of exit 3.
    #[arg(long)]
    pub(crate) require_seal: bool,
    /// Compare the verified log with the lifecycle in FILE (its format: the guide's page
    /// guide/src/verify.md, "--expect FILE: the expected lifecycle").
    #[arg(long, value_name = "FILE")]
    pub(crate) expect: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Reads an HMAC key file: its bytes, with one trailing newline removed.
pub(crate) fn read_key(path: &PathBuf) -> Result<AuditKey, String> {
    let mut bytes = std::fs::read(path).map_err(|e| format!("key file {}: {e}", path.display()))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    AuditKey::new(&bytes).map_err(|e| format!("key file {}: {e}", path.display()))
}

fn read_expectation(path: &PathBuf) -> Result<Expectation, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_EXPECT_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_EXPECT_FILE_BYTES {
        return Err(format!(
            "{}: longer than {MAX_EXPECT_FILE_BYTES} bytes",
            path.display()
        ));
    }
    Expectation::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `verify`; see the module docs for the exit status.
pub(crate) fn run(args: &VerifyArgs) -> ExitCode {
    let usage = |e: String| {
        eprintln!("mcp-stdio verify: {e}");
        ExitCode::from(EXIT_USAGE)
    };
    let key = match args.key_file.as_ref().map(read_key).transpose() {
        Ok(k) => k,
        Err(e) => return usage(e),
    };
    let expectation = match args.expect.as_ref().map(read_expectation).transpose() {
        Ok(x) => x,
        Err(e) => return usage(e),
    };
    let mut file = match File::open(&args.file) {
        Ok(f) => f,
        Err(e) => return usage(format!("{}: {e}", args.file.display())),
    };
    let mut verifier = AuditVerifier::new(key.as_ref());
    let mut observed = Observed::default();
    let mut scan = ChainFieldScan::default();
    let mut buf = vec![0u8; 64 * 1024];
    let result = loop {
        match file.read(&mut buf) {
            Ok(0) => break verifier.finish(),
            Ok(n) => {
                scan.push(&buf[..n]);
                let pushed = if expectation.is_some() {
                    verifier.push_entries(&buf[..n], |_, record| observed.on_entry(record))
                } else {
                    verifier.push(&buf[..n])
                };
                if let Err(e) = pushed {
                    break Err(e);
                }
            }
            Err(e) => return usage(format!("reading {}: {e}", args.file.display())),
        }
    };
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            // Damage or a file of another kind: the rest of the file decides.
            while !scan.found {
                match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => scan.push(&buf[..n]),
                    Err(e) => return usage(format!("reading {}: {e}", args.file.display())),
                }
            }
            let (status, code) = if scan.found {
                ("tampered", EXIT_FAIL)
            } else {
                ("not_an_audit_log", EXIT_NOT_AUDIT_LOG)
            };
            if args.json {
                let v = serde_json::json!({
                    "ok": false,
                    "status": status,
                    "line": e.line,
                    "error": e.kind.to_string(),
                });
                println!("{v}");
            } else if scan.found {
                println!("FAIL: line {}: {}", e.line, e.kind);
            } else {
                println!(
                    "NOT AN AUDIT LOG: {}: line {}: {}, and no line of it has the audit \
                     chain's fields (\"seq\", \"prev\"); give verify the file that `mcp-stdio guard \
                     --audit` writes",
                    args.file.display(),
                    e.line,
                    e.kind
                );
            }
            return ExitCode::from(code);
        }
    };
    let mut problems = Vec::new();
    if let Some(n) = args.expect_entries {
        if summary.entries != n {
            problems.push(format!("expected {n} entries, found {}", summary.entries));
        }
    }
    if let Some(h) = &args.expect_head {
        if !summary.last_hash.eq_ignore_ascii_case(h) {
            problems.push(format!(
                "expected last hash {h}, found {}",
                summary.last_hash
            ));
        }
    }
    let unsealed = unsealed_description(&summary);
    if let (Some(u), true) = (&unsealed, args.require_seal) {
        problems.push(format!("unsealed: {u}"));
    }
    let mismatches = expectation
        .as_ref()
        .map(|x| x.compare(&observed))
        .unwrap_or_default();
    let (status, code) = if !problems.is_empty() {
        ("fail", EXIT_FAIL)
    } else if !mismatches.is_empty() {
        ("mismatch", EXIT_MISMATCH)
    } else if unsealed.is_some() {
        ("unsealed", EXIT_UNSEALED)
    } else {
        ("ok", EXIT_OK)
    };
    if args.json {
        let end = match summary.end {
            LogEnd::Sealed => serde_json::json!("sealed"),
            LogEnd::Unsealed {
                first_seq,
                entries,
                partial_line,
            } => serde_json::json!({
                "unsealed_from": first_seq,
                "unsealed_entries": entries,
                "partial_line": partial_line,
            }),
            _ => serde_json::json!("unknown"),
        };
        let v = serde_json::json!({
            "ok": code == EXIT_OK,
            "status": status,
            "entries": summary.entries,
            "last_hash": summary.last_hash,
            "sealed": summary.is_sealed(),
            "seals": summary.seals,
            "end": end,
            "unsealed_sessions": summary.unsealed_sessions,
            "problems": problems,
            "expect": expectation.as_ref().map(|x| serde_json::json!({
                "sessions": x.sessions(),
                "calls": x.calls(),
                "mismatches": mismatches,
            })),
        });
        println!("{v}");
    } else {
        match &unsealed {
            None => println!(
                "OK: {} entries, sealed ({} seal{}), last hash {}",
                summary.entries,
                summary.seals,
                if summary.seals == 1 { "" } else { "s" },
                summary.last_hash
            ),
            Some(u) if !args.require_seal => println!(
                "UNSEALED: {} entr{}, chain intact, but {u}; last hash {}",
                summary.entries,
                if summary.entries == 1 { "y" } else { "ies" },
                summary.last_hash
            ),
            Some(_) => {}
        }
        for p in &problems {
            println!("FAIL: {p}");
        }
        for m in &mismatches {
            println!("MISMATCH: {m}");
        }
        if let Some(x) = &expectation {
            if mismatches.is_empty() {
                println!(
                    "EXPECT: as expected ({} call{} in {} session{})",
                    x.calls(),
                    if x.calls() == 1 { "" } else { "s" },
                    x.sessions(),
                    if x.sessions() == 1 { "" } else { "s" }
                );
            } else {
                println!("EXPECT: {} mismatch(es)", mismatches.len());
            }
        }
    }
    ExitCode::from(code)
}

/// Why the log is not sealed, or `None` when it is.
fn unsealed_description(s: &VerifySummary) -> Option<String> {
    let mut parts = Vec::new();
    if let LogEnd::Unsealed {
        first_seq,
        entries,
        partial_line,
    } = s.end
    {
        let mut p = if entries == 0 && s.entries == 0 {
            "the log has no seal (it is empty)".to_owned()
        } else if entries == 0 {
            "the log does not end with a seal".to_owned()
        } else {
            format!(
                "no seal covers the last {entries} entr{} (from entry {first_seq}): the log was \
                 cut, is still being written, or its writer died",
                if entries == 1 { "y" } else { "ies" }
            )
        };
        if partial_line {
            p.push_str("; a partial line follows the last entry (a write cut short)");
        }
        parts.push(p);
    }
    if let Some((from, to)) = s.first_unsealed_session {
        parts.push(format!(
            "{} session{} ended without a seal (the first: entries {from}–{to})",
            s.unsealed_sessions,
            if s.unsealed_sessions == 1 { "" } else { "s" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&[u8]]) -> bool {
        let mut s = ChainFieldScan::default();
        for c in chunks {
            s.push(c);
        }
        s.found
    }

    #[test]
    fn chain_fields_are_found_across_chunk_boundaries() {
        assert!(scan(&[b"{\"seq\":1}"]));
        assert!(scan(&[b"{\"se", b"q\":1}"]));
        assert!(scan(&[b"x\"", b"p", b"r", b"e", b"v", b"\": 1"]));
        assert!(!scan(&[
            b"{\"requests\": 3, \"sequence\": 2}\n",
            b"{\"previous\":1}"
        ]));
        assert!(!scan(&[b"", b"\"se"]));
    }
}
