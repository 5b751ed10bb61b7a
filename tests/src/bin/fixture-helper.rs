//! `fixture-helper` — a command-line helper (not MCP) for `run_helper` tests.
//!
//! ```text
//! USAGE: fixture-helper MODE [ARGS]
//!   flood-stderr SECONDS       writes "helper-diagnostic\n" to stderr as fast as it can for
//!                              SECONDS (like `yes helper-diagnostic 1>&2`), then exits 0
//!   flood-stdout SECONDS       the same on stdout
//!   flood-both SECONDS         the same on both streams (two threads)
//!   invalid-utf8               writes invalid UTF-8 bytes to stdout and stderr, exits 0
//!   long-line BYTES            one line of BYTES 'L' bytes (+ "\n") to stderr, exits 0
//!   exit CODE                  "helper stdout line\n" to stdout, "helper stderr line\n" to
//!                              stderr, exits with CODE
//!   sleep SECONDS              sleeps (fractional seconds allowed), exits 0
//!   ignore-term SECONDS        SIGTERM blocked and consumed (stderr: "helper: ignoring SIGTERM",
//!                              then "helper: SIGTERM received and ignored" per signal); sleeps
//!                              SECONDS, exits 0; only SIGKILL ends it early
//!   wrapper-grandchild SECONDS starts a grandchild (`grandchild-stderr SECONDS`) in the SAME
//!                              process group, inheriting stderr; waits until it runs, prints
//!                              "grandchild <pid>\n" on stdout and exits 0 at once
//!   escaped-grandchild SECONDS the same, but the grandchild calls setsid() (new session and
//!                              group) before it reports ready: a group kill misses it, it holds
//!                              stderr open and exits by itself after SECONDS
//!   stderr-then-exit BYTES CODE  BYTES bytes of stderr, then exit CODE
//!   succeed-then-flood SECONDS "helper: operation succeeded\n" on stdout (the external
//!                              operation is done), then flood-stderr SECONDS, exits 0
//!   invalid-utf8-long-line BYTES  an invalid UTF-8 line, one line of BYTES 'L' bytes, and
//!                              the invalid UTF-8 line again, all on stderr; exits 0
//!   grandchild-stderr SECONDS  (internal) writes "helper-grandchild: alive N\n" to stderr every
//!                              50 ms for SECONDS; prints "ready\n" on stdout once started
//!   escaped-grandchild-stderr SECONDS  (internal) setsid(), then as grandchild-stderr
//! ```
//!
//! Bad usage exits 2 with a message on stderr. In both grandchild modes the grandchild's stdout
//! is a private pipe to the wrapper (used for the ready handshake), so it holds only the
//! host's **stderr** (and not stdout) after the wrapper exits.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

fn usage_error(msg: &str) -> ! {
    eprintln!("fixture-helper: {msg} (see the doc comment of tests/src/bin/fixture-helper.rs)");
    std::process::exit(2);
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    let raw = args
        .get(i)
        .unwrap_or_else(|| usage_error(&format!("missing {what}")));
    raw.parse()
        .unwrap_or_else(|_| usage_error(&format!("{what}: cannot parse {raw:?}")))
}

fn seconds(args: &[String]) -> Duration {
    let s: f64 = arg(args, 1, "SECONDS");
    Duration::try_from_secs_f64(s).unwrap_or_else(|_| usage_error("SECONDS out of range"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("", String::as_str);
    match mode {
        "flood-stderr" => flood(&mut io::stderr(), seconds(&args)),
        "flood-stdout" => flood(&mut io::stdout(), seconds(&args)),
        "flood-both" => {
            let d = seconds(&args);
            let t = thread::spawn(move || flood(&mut io::stderr(), d));
            flood(&mut io::stdout(), d);
            t.join().expect("stderr flood thread panicked");
        }
        "invalid-utf8" => {
            let bytes: &[u8] =
                b"helper invalid utf-8: \xff\xfe \xc3\x28 \xe2\x82 \xf0\x9f\x98 end\n";
            let _ = io::stdout().write_all(bytes);
            let _ = io::stderr().write_all(bytes);
        }
        "long-line" => {
            let total: usize = arg(&args, 1, "BYTES");
            let chunk = vec![b'L'; 64 * 1024];
            let mut err = io::stderr().lock();
            let mut left = total;
            while left > 0 {
                let n = left.min(chunk.len());
                if err.write_all(&chunk[..n]).is_err() {
                    std::process::exit(1);
                }
                left -= n;
            }
            let _ = err.write_all(b"\n");
        }
        "exit" => {
            let code: i32 = arg(&args, 1, "CODE");
            let _ = io::stdout().write_all(b"helper stdout line\n");
            let _ = io::stderr().write_all(b"helper stderr line\n");
            std::process::exit(code);
        }
        "sleep" => thread::sleep(seconds(&args)),
        "ignore-term" => {
            let d = seconds(&args);
            ignore_sigterm();
            thread::sleep(d);
        }
        "wrapper-grandchild" => wrapper(&args, "grandchild-stderr"),
        "escaped-grandchild" => wrapper(&args, "escaped-grandchild-stderr"),
        "grandchild-stderr" => grandchild(seconds(&args)),
        "escaped-grandchild-stderr" => {
            nix::unistd::setsid().expect("setsid in a non-leader grandchild");
            grandchild(seconds(&args));
        }
        "stderr-then-exit" => {
            let bytes: usize = arg(&args, 1, "BYTES");
            let code: i32 = arg(&args, 2, "CODE");
            let mut line = b"helper stderr ".to_vec();
            line.resize(63, b'e');
            line.push(b'\n');
            let mut err = io::stderr().lock();
            let mut left = bytes;
            while left > 0 {
                let n = left.min(line.len());
                if err.write_all(&line[..n]).is_err() {
                    break;
                }
                left -= n;
            }
            drop(err);
            std::process::exit(code);
        }
        "succeed-then-flood" => {
            let d = seconds(&args);
            {
                let mut out = io::stdout().lock();
                let _ = out.write_all(b"helper: operation succeeded\n");
                let _ = out.flush();
            }
            flood(&mut io::stderr(), d);
        }
        "invalid-utf8-long-line" => {
            let total: usize = arg(&args, 1, "BYTES");
            let invalid: &[u8] = b"helper invalid utf-8: \xff\xfe \xc3\x28 \xe2\x82 end\n";
            let mut err = io::stderr().lock();
            let mut line = invalid.to_vec();
            line.extend_from_slice(&vec![b'L'; total]);
            line.push(b'\n');
            line.extend_from_slice(invalid);
            if err.write_all(&line).is_err() {
                std::process::exit(1);
            }
        }
        "" => usage_error("missing MODE"),
        other => usage_error(&format!("unknown mode {other:?}")),
    }
}

/// Writes "helper-diagnostic\n" in 64 KiB batches until `d` has passed. Blocks (like `yes`)
/// while nobody reads; exits quietly when the reader is gone.
fn flood(w: &mut dyn Write, d: Duration) {
    let deadline = Instant::now() + d;
    let line = b"helper-diagnostic\n";
    let batch: Vec<u8> = line
        .iter()
        .copied()
        .cycle()
        .take(line.len() * 3640)
        .collect();
    while Instant::now() < deadline {
        if w.write_all(&batch).is_err() {
            return;
        }
    }
}

/// Blocks SIGTERM and consumes it on a `sigwait` thread: the safe-code equivalent of
/// `signal(SIGTERM, SIG_IGN)` (nix's `signal` is `unsafe fn`; the workspace forbids unsafe).
/// Must run before any other thread is spawned so every thread inherits the mask.
fn ignore_sigterm() {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.thread_block()
        .expect("pthread_sigmask(SIG_BLOCK, SIGTERM)");
    thread::spawn(move || {
        while let Ok(sig) = set.wait() {
            let _ = writeln!(io::stderr(), "helper: {sig} received and ignored");
        }
    });
    let _ = writeln!(io::stderr(), "helper: ignoring SIGTERM");
}

/// Starts the grandchild, waits for its "ready" line (so the test never races its setsid),
/// prints its pid and exits without waiting for it.
fn wrapper(args: &[String], grandchild_mode: &str) {
    let d: f64 = arg(args, 1, "SECONDS");
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .arg(grandchild_mode)
        .arg(d.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn grandchild");
    let mut ready = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    BufReader::new(stdout)
        .read_line(&mut ready)
        .expect("read grandchild ready line");
    if ready.trim() != "ready" {
        usage_error(&format!("grandchild did not report ready: {ready:?}"));
    }
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "grandchild {}", child.id());
    let _ = out.flush();
    // Exit at once; the grandchild is orphaned on purpose (never waited for here).
    std::process::exit(0);
}

fn grandchild(d: Duration) {
    let deadline = Instant::now() + d;
    {
        let mut out = io::stdout().lock();
        let _ = out.write_all(b"ready\n");
        let _ = out.flush();
    }
    let mut n = 0_u64;
    while Instant::now() < deadline {
        // A gone reader does not end us: keep living (holding the fd) until the deadline.
        let _ = writeln!(io::stderr(), "helper-grandchild: alive {n}");
        n += 1;
        thread::sleep(Duration::from_millis(50));
    }
}
