//! The core's promises about itself, checked on its source: it reads no
//! clock and never waits (the crate docs' "What this crate does not do"),
//! and a lower layer never reaches up into a higher one (`process/` does
//! not import `guard/`: what only the guard uses lives in `guard/`).
//!
//! Library code only: a file's `#[cfg(test)]` part, `tests.rs` files, the
//! fuzz harness (`fuzzing/`, which stands in for an adapter) and comments
//! are left out.

use std::fs;
use std::path::{Path, PathBuf};

/// Calls that read the clock, wait or start threads.
const FORBIDDEN: &[&str] = &[
    "Instant::now(",
    "SystemTime::now(",
    "Condvar",
    "thread::sleep",
    "thread::spawn",
    "std::process::",
];

/// Folders of the layers below the machines, and the modules above them
/// they must not import.
const LOWER: &[&str] = &["wire", "session", "process", "records", "time"];
const UPPER: &[&str] = &[
    "crate::guard",
    "crate::driver",
    "crate::serve",
    "crate::helper",
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("readable dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The library lines of a file (number, text): up to its first
/// `#[cfg(test)]`, comments left out; none for a tests file or the harness.
fn library_lines(path: &Path) -> Vec<(usize, String)> {
    let rel = path.strip_prefix(src()).expect("under src");
    if rel.starts_with("fuzzing") || path.file_name().is_some_and(|n| n == "tests.rs") {
        return Vec::new();
    }
    let text = fs::read_to_string(path).expect("readable source");
    text.lines()
        .enumerate()
        .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect()
}

fn files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    assert!(files.len() > 20, "the core's sources were not found");
    files.sort();
    files
}

#[test]
fn the_core_reads_no_clock_and_never_waits() {
    let mut found = Vec::new();
    for path in files() {
        let rel = path.strip_prefix(src()).expect("under src");
        for (n, line) in library_lines(&path) {
            for call in FORBIDDEN.iter().filter(|c| line.contains(*c)) {
                found.push(format!("src/{}:{n}: {call}", rel.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the core must stay pure:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_lower_layer_never_imports_a_higher_one() {
    let mut found = Vec::new();
    for path in files() {
        let rel = path.strip_prefix(src()).expect("under src");
        if !LOWER.iter().any(|layer| rel.starts_with(layer)) {
            continue;
        }
        for (n, line) in library_lines(&path) {
            for upper in UPPER.iter().filter(|u| line.contains(*u)) {
                found.push(format!("src/{}:{n}: {upper}", rel.display()));
            }
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}
