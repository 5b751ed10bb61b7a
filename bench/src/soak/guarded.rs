//! Sessions through `mcp-stdio guard`: a raw host that writes JSON lines to
//! the guard's stdin and reads its stdout on a thread it can pause (a host
//! that stops reading). Every line the guard writes must be JSON (G13), and
//! its audit log must verify.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::adapters::check_step;
use super::plan::{
    Action, End, Ending, SessionPlan, DEADLINE_SLACK, MAX_FRAME, PROBE_TIMEOUT, SHUTDOWN_BOUND,
};
use super::SessionLog;

/// What the reader thread saw.
enum Seen {
    Message(Value),
    /// A line that is not JSON: a G13 breach.
    NotJson(String),
    Eof,
}

/// One guard with its pipes.
struct GuardHost {
    child: Child,
    stdin: Option<ChildStdin>,
    seen: Receiver<Seen>,
    /// The reader does not read before this instant (a host that stopped reading).
    paused_until: Arc<Mutex<Option<Instant>>>,
    eof: bool,
}

impl GuardHost {
    fn spawn(guard: &Path, server: &Path, flags: &[String], audit: &Path) -> std::io::Result<Self> {
        let mut child = Command::new(guard)
            .arg("guard")
            .args([
                "--max-frame",
                &MAX_FRAME.to_string(),
                "--shutdown-grace",
                "1",
            ])
            .arg("--audit")
            .arg(audit)
            .arg("--")
            .arg(server)
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        // The guard's own stderr (its bounded copy of the server's): drained and dropped.
        thread::spawn(move || {
            let mut buf = [0_u8; 16 * 1024];
            while matches!(stderr.read(&mut buf), Ok(n) if n > 0) {}
        });
        let paused_until = Arc::new(Mutex::new(None::<Instant>));
        let (tx, seen) = mpsc::channel();
        let pause = paused_until.clone();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                let until = *pause
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(until) = until {
                    thread::sleep(until.saturating_duration_since(Instant::now()));
                }
                line.clear();
                // A line is at most the guard's wire limit (G2 outgoing), so this is bounded.
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Seen::Eof);
                        return;
                    }
                    Ok(_) => {}
                }
                let seen = match serde_json::from_slice::<Value>(&line) {
                    Ok(v) => Seen::Message(v),
                    Err(_) => Seen::NotJson(
                        String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned(),
                    ),
                };
                if tx.send(seen).is_err() {
                    return;
                }
            }
        });
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            seen,
            paused_until,
            eof: false,
        })
    }

    fn send(&mut self, v: &Value) {
        if let Some(stdin) = self.stdin.as_mut() {
            let mut line = serde_json::to_vec(v).expect("a Value serializes");
            line.push(b'\n');
            // A failed write means the guard is gone; the read side reports it.
            let _ = stdin.write_all(&line).and_then(|()| stdin.flush());
        }
    }

    /// Waits for the response to `id` until `deadline`; `Ok(None)` at the deadline.
    fn response(&mut self, id: u64, deadline: Instant) -> Result<Option<Value>, String> {
        loop {
            if self.eof {
                return Ok(Some(json!({"eof": true})));
            }
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.seen.recv_timeout(wait) {
                Ok(Seen::Message(v)) => {
                    if v.get("id").and_then(Value::as_u64) == Some(id) && v.get("method").is_none()
                    {
                        return Ok(Some(v));
                    }
                }
                Ok(Seen::NotJson(line)) => {
                    return Err(format!("guard wrote a non-JSON line (G13): {line:?}"))
                }
                Ok(Seen::Eof) | Err(RecvTimeoutError::Disconnected) => self.eof = true,
                Err(RecvTimeoutError::Timeout) => return Ok(None),
            }
        }
    }

    fn cancel(&mut self, id: u64, reason: &str) {
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId": id, "reason": reason}}));
    }

    /// Waits for the guard to exit, at most `bound`.
    fn wait_exit(&mut self, bound: Duration) -> Result<std::process::ExitStatus, String> {
        let until = Instant::now() + bound;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!("the guard did not exit within {bound:?}"));
                }
                Err(e) => return Err(format!("wait for the guard: {e}")),
            }
        }
    }
}

fn ending_of(v: &Value) -> Ending {
    if v.get("eof").is_some() {
        Ending::Closed
    } else if v.get("result").is_some() {
        Ending::Result
    } else if v.get("error").is_some() {
        Ending::ServerError
    } else {
        Ending::Other
    }
}

/// The audit log path of one guarded session.
pub(crate) fn audit_path(dir: &Path, wave: u64, index: usize) -> PathBuf {
    dir.join(format!("audit-w{wave}-s{index}.jsonl"))
}

/// Runs one planned session through the guard; `Err` names the first breach.
pub(crate) fn run(
    plan: &SessionPlan,
    guard: &Path,
    server: &Path,
    audit: &Path,
) -> Result<SessionLog, String> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut log = SessionLog::default();
    let mut host = GuardHost::spawn(guard, server, &plan.flags, audit)
        .map_err(|e| format!("spawn the guard: {e}"))?;
    host.send(
        &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"mcp-stdio-soak","version":"0"}}}),
    );
    match host.response(0, Instant::now() + PROBE_TIMEOUT + DEADLINE_SLACK)? {
        Some(v) if v.get("result").is_some() => {}
        other => return Err(format!("initialize through the guard: {other:?}")),
    }
    host.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let mut crashed = false;
    for (n, step) in plan.steps.iter().enumerate() {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        host.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":step.params()}));
        let deadline = start + step.timeout;
        let answer = match step.action {
            Action::Await => host.response(id, deadline)?,
            Action::StopReading(d) => {
                *host
                    .paused_until
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(start + d);
                host.response(id, deadline + d)?
            }
            Action::Cancel(d) | Action::Drop(d) => match host.response(id, start + d)? {
                Some(v) => Some(v),
                None => {
                    host.cancel(id, "soak: host cancel");
                    // The guard enforces "no message after cancel": nothing more for this id.
                    Some(json!({"cancelled": true}))
                }
            },
        };
        let ending = match &answer {
            None => {
                // The host's own deadline: a timeout is a cancel (G6).
                host.cancel(id, "soak: host timeout");
                Ending::Timeout
            }
            Some(v) if v.get("cancelled").is_some() => Ending::Cancelled,
            Some(v) => ending_of(v),
        };
        check_step(
            plan,
            n,
            step,
            ending,
            start.elapsed(),
            &format!("{answer:?}"),
        )?;
        log.endings.push(ending);
        if step.ends_session() || ending == Ending::Closed {
            crashed = true;
            break;
        }
        if matches!(ending, Ending::Cancelled | Ending::Timeout) {
            let ping = NEXT.fetch_add(1, Ordering::Relaxed);
            let start = Instant::now();
            host.send(&json!({"jsonrpc":"2.0","id":ping,"method":"ping"}));
            match host.response(ping, start + PROBE_TIMEOUT + DEADLINE_SLACK)? {
                Some(v) if v.get("result").is_some() => log.probes.push(start.elapsed()),
                other => {
                    return Err(format!(
                        "step {n}: ping after {ending:?} through the guard: {other:?}"
                    ))
                }
            }
        }
    }
    let start = Instant::now();
    let pid =
        rustix::process::Pid::from_raw(host.child.id() as i32).expect("a child pid is positive");
    match plan.end {
        End::Kill if !crashed => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        // The wrapper vanishes: no seal, and its server must die with it
        // (checked at the wave's checkpoint: no live process of ours).
        End::Drop if !crashed => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        _ => drop(host.stdin.take()),
    }
    // Guard shutdown: its own graces (1 s each) and drains, within the bound.
    let status = host.wait_exit(SHUTDOWN_BOUND)?;
    log.shutdown = Some(start.elapsed());
    log.guard_exit = status.code();
    Ok(log)
}

/// Verifies one guard audit log with mcp-stdio-audit's verifier: the number of
/// entries and whether a seal ends it. `killed`: the guard was SIGKILLed, so
/// an unsealed end (a cut last line included) is what it leaves; otherwise
/// the log must be sealed.
pub(crate) fn verify_audit(path: &Path, killed: bool) -> Result<(u64, bool), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let summary = mcp_stdio_audit::verify(&bytes, None)
        .map_err(|e| format!("audit log {} does not verify: {e}", path.display()))?;
    let sealed = summary.is_sealed();
    if !sealed && !killed {
        return Err(format!(
            "audit log {} is not sealed: {summary:?}",
            path.display()
        ));
    }
    Ok((summary.entries, sealed))
}
