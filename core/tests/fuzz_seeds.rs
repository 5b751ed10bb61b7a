//! Replays the checked-in fuzz seed corpus (`fuzz/seeds/<target>/`) through
//! the fuzz entry points, so ordinary `cargo test` runs every fuzz target's
//! invariants on known-interesting inputs, crash regressions included.

use std::fs;
use std::path::PathBuf;

use mcp_stdio_core::fuzzing;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("readable dir entry").path();
        let data = fs::read(&path).expect("readable seed");
        run(&data);
        n += 1;
    }
    assert!(n > 0, "no seeds in {}", dir.display());
    eprintln!("{target}: replayed {n} seeds");
}

#[test]
fn framer_seeds() {
    replay("framer", fuzzing::fuzz_framer);
}

#[test]
fn id_scan_seeds() {
    replay("id_scan", fuzzing::fuzz_id_scan);
}

#[test]
fn message_seeds() {
    replay("message", fuzzing::fuzz_message);
}

#[test]
fn session_pair_seeds() {
    replay("session_pair", fuzzing::fuzz_session_pair);
}

#[test]
fn capture_seeds() {
    replay("capture", fuzzing::fuzz_capture);
}

#[test]
fn supervisor_seeds() {
    replay("supervisor", fuzzing::fuzz_supervisor);
}

#[test]
fn helper_run_seeds() {
    replay("helper_run", fuzzing::fuzz_helper_run);
}

#[test]
fn serve_seeds() {
    replay("serve", fuzzing::fuzz_serve);
}

#[test]
fn proxy_seeds() {
    replay("proxy", fuzzing::fuzz_proxy);
}

#[test]
fn guard_session_seeds() {
    replay("guard_session", fuzzing::fuzz_guard_session);
}

#[test]
fn json_edit_seeds() {
    replay("json_edit", fuzzing::fuzz_json_edit);
}

#[test]
fn json_edit_random_inputs() {
    fuzzing::run_random_inputs(0x2026_0728, 2000, 96, fuzzing::fuzz_json_edit);
}
