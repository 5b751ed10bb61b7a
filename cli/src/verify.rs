//! `mcp-stdio verify FILE [--key-file K]`: offline audit-chain verification.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use mcp_stdio_core::audit::{AuditKey, AuditVerifier};

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
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
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Reads an HMAC key file: its bytes, with one trailing newline removed.
pub(crate) fn read_key(path: &PathBuf) -> Result<AuditKey, String> {
    let mut bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    AuditKey::new(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `verify`: exit 0 when the chain is intact, 1 when it is not, 2 on usage errors.
pub(crate) fn run(args: &VerifyArgs) -> ExitCode {
    let key = match args.key_file.as_ref().map(read_key).transpose() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("mcp-stdio verify: {e}");
            return ExitCode::from(2);
        }
    };
    let mut file = match File::open(&args.file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mcp-stdio verify: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let mut verifier = AuditVerifier::new(key.as_ref());
    let mut buf = vec![0u8; 64 * 1024];
    let result = loop {
        match file.read(&mut buf) {
            Ok(0) => break verifier.finish(),
            Ok(n) => {
                if let Err(e) = verifier.push(&buf[..n]) {
                    break Err(e);
                }
            }
            Err(e) => {
                eprintln!("mcp-stdio verify: reading {}: {e}", args.file.display());
                return ExitCode::from(2);
            }
        }
    };
    match result {
        Ok(summary) => {
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
            if args.json {
                let v = serde_json::json!({
                    "ok": problems.is_empty(),
                    "entries": summary.entries,
                    "last_hash": summary.last_hash,
                    "problems": problems,
                });
                println!("{v}");
            } else if problems.is_empty() {
                println!(
                    "OK: {} entries, last hash {}",
                    summary.entries, summary.last_hash
                );
            } else {
                for p in &problems {
                    println!("FAIL: {p}");
                }
            }
            if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            if args.json {
                let v = serde_json::json!({
                    "ok": false,
                    "line": e.line,
                    "error": e.kind.to_string(),
                });
                println!("{v}");
            } else {
                println!("FAIL: line {}: {}", e.line, e.kind);
            }
            ExitCode::from(1)
        }
    }
}
