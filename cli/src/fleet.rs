//! `mcp-stdio ps` and `mcp-stdio logs`: the running guards of this user,
//! asked on their status sockets (`<runtime folder>/<guard pid>.sock`, see
//! the guard's `announce`). Each guard is asked on a thread of its own with
//! a deadline, so one that hangs costs its deadline, not the others'; the
//! socket of a guard that is gone (nobody listens, its pid is dead) is
//! removed.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcp_stdio_core::{MAX_STATUS_REPLY, STATUS_SCHEMA};
use mcp_stdio_sys::runtime_dir::{probe, runtime_dir, Probe};
use serde_json::Value;

/// How long one guard has to answer.
const ASK_DEADLINE: Duration = Duration::from_secs(2);

/// List the running guards of this user.
#[derive(Debug, clap::Args)]
pub(crate) struct PsArgs {
    /// One JSON array of the guards' status objects (the schema is in the guide).
    #[arg(long)]
    json: bool,
}

/// Print a guarded server's kept stderr.
#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    /// The server's name (`guard --name`, or its program's) or its guard's pid.
    target: String,
    /// The last N lines.
    #[arg(short = 'n', long = "lines", value_name = "N", default_value_t = 50)]
    lines: usize,
    /// Then the lines as they come (timestamped), until the guard ends or Ctrl-C; a reader
    /// that falls 256 KiB behind is dropped by the guard, never waited for.
    #[arg(short = 'f', long)]
    follow: bool,
}

/// A guard's socket, and its pid (from the file name).
pub(crate) struct Socket {
    pub(crate) path: PathBuf,
    pub(crate) pid: u32,
}

/// What a guard answered.
pub(crate) enum Asked {
    Answer(Value),
    /// Its socket is there but nobody listens: the guard is gone.
    Gone,
    /// It did not answer in time, or not with a status.
    Failed(String),
}

pub(crate) fn ps(args: &PsArgs) -> ExitCode {
    let sockets = match sockets() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio ps: {e}");
            return ExitCode::from(1);
        }
    };
    let asked = ask_all(&sockets, r#"{"request":"status"}"#);
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (socket, asked) in sockets.iter().zip(asked) {
        match asked {
            Asked::Answer(v) => rows.push(v),
            Asked::Gone => forget(socket),
            Asked::Failed(why) => failed.push(format!("guard {}: {why}", socket.pid)),
        }
    }
    rows.sort_by_key(|v| {
        (
            v["name"].as_str().map(str::to_owned),
            v["guard_pid"].as_u64(),
        )
    });
    if args.json {
        println!("{}", Value::Array(rows));
    } else {
        print!("{}", table(&rows, now_ms()));
    }
    for f in &failed {
        eprintln!("mcp-stdio ps: {f}");
    }
    ExitCode::SUCCESS
}

pub(crate) fn logs(args: &LogsArgs) -> ExitCode {
    let sockets = match sockets() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio logs: {e}");
            return ExitCode::from(1);
        }
    };
    let by_pid = args.target.parse::<u32>().ok();
    let chosen: Vec<&Socket> = match by_pid {
        Some(pid) => sockets.iter().filter(|s| s.pid == pid).collect(),
        None => {
            // By name: ask each for its status to learn its name.
            let asked = ask_all(&sockets, r#"{"request":"status"}"#);
            sockets
                .iter()
                .zip(asked)
                .filter(|(_, a)| matches!(a, Asked::Answer(v) if v["name"] == args.target.as_str()))
                .map(|(s, _)| s)
                .collect()
        }
    };
    let socket = match chosen.as_slice() {
        [one] => *one,
        [] => {
            eprintln!(
                "mcp-stdio logs: no running guard is {} (see `mcp-stdio ps`)",
                args.target
            );
            return ExitCode::from(1);
        }
        many => {
            let pids: Vec<String> = many.iter().map(|s| s.pid.to_string()).collect();
            eprintln!(
                "mcp-stdio logs: {} guards are named {}: give a pid ({})",
                many.len(),
                args.target,
                pids.join(", ")
            );
            return ExitCode::from(2);
        }
    };
    if args.follow {
        return follow(socket, args.lines);
    }
    match ask(&socket.path, r#"{"request":"logs"}"#) {
        Asked::Answer(v) => {
            print_tail(&v, args.lines);
            ExitCode::SUCCESS
        }
        Asked::Gone => {
            forget(socket);
            eprintln!("mcp-stdio logs: guard {} has exited", socket.pid);
            ExitCode::from(1)
        }
        Asked::Failed(why) => {
            eprintln!("mcp-stdio logs: guard {}: {why}", socket.pid);
            ExitCode::from(1)
        }
    }
}

/// The last `n` lines of a `logs` answer's stderr.
fn print_tail(answer: &Value, n: usize) {
    let text = answer["stderr"].as_str().unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    let mut out = io::stdout().lock();
    for line in &lines[from..] {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// `logs -f`: the tail, then the lines as the guard sends them.
fn follow(socket: &Socket, n: usize) -> ExitCode {
    let stream = match UnixStream::connect(&socket.path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-stdio logs: guard {}: {e}", socket.pid);
            return ExitCode::from(1);
        }
    };
    let _ = stream.set_write_timeout(Some(ASK_DEADLINE));
    if let Err(e) = (&stream).write_all(b"{\"request\":\"logs\",\"follow\":true}\n") {
        eprintln!("mcp-stdio logs: guard {}: {e}", socket.pid);
        return ExitCode::from(1);
    }
    let _ = stream.set_read_timeout(Some(ASK_DEADLINE));
    let mut reader = io::BufReader::new(&stream);
    let mut first = String::new();
    if let Err(e) = io::BufRead::read_line(&mut reader, &mut first) {
        eprintln!("mcp-stdio logs: guard {}: no answer: {e}", socket.pid);
        return ExitCode::from(1);
    }
    match serde_json::from_str::<Value>(&first) {
        Ok(v) if v["error"].is_null() => print_tail(&v, n),
        Ok(v) => {
            eprintln!(
                "mcp-stdio logs: guard {} refused: {}",
                socket.pid, v["error"]
            );
            return ExitCode::from(1);
        }
        Err(_) => {
            eprintln!("mcp-stdio logs: guard {} did not answer", socket.pid);
            return ExitCode::from(1);
        }
    }
    // Live: as long as it takes.
    let _ = stream.set_read_timeout(None);
    let mut out = io::stdout().lock();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                if out.write_all(&buf[..k]).and_then(|()| out.flush()).is_err() {
                    // Our reader went away (a closed pipe): done.
                    return ExitCode::SUCCESS;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("mcp-stdio logs: guard {}: {e}", socket.pid);
                return ExitCode::from(1);
            }
        }
    }
    eprintln!(
        "mcp-stdio logs: guard {} closed the stream (it ended, or this reader fell behind)",
        socket.pid
    );
    ExitCode::SUCCESS
}

/// The status sockets in this user's runtime folder; those of guards that
/// are gone are removed on the way.
pub(crate) fn sockets() -> Result<Vec<Socket>, String> {
    let dir = runtime_dir().map_err(|e| e.to_string())?;
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        found.push(Socket { path, pid });
    }
    found.sort_by_key(|s| s.pid);
    Ok(found)
}

/// Removes the socket of a guard that is gone (nobody listens, its pid
/// is dead); `probe` makes sure it was not replaced meanwhile.
fn forget(socket: &Socket) {
    if !pid_alive(socket.pid) && probe(&socket.path) == Probe::Stale {
        let _ = std::fs::remove_file(&socket.path);
    }
}

/// Asks every socket at once, each on a thread of its own.
pub(crate) fn ask_all(sockets: &[Socket], request: &str) -> Vec<Asked> {
    std::thread::scope(|scope| {
        let asks: Vec<_> = sockets
            .iter()
            .map(|s| scope.spawn(move || ask(&s.path, request)))
            .collect();
        asks.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Asked::Failed("the ask panicked".into()))
            })
            .collect()
    })
}

/// One request, one answer, within [`ASK_DEADLINE`].
pub(crate) fn ask(path: &Path, request: &str) -> Asked {
    let mut stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
            ) =>
        {
            return Asked::Gone
        }
        Err(e) => return Asked::Failed(e.to_string()),
    };
    let deadline = Instant::now() + ASK_DEADLINE;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let _ = stream.set_write_timeout(Some(left()));
    if let Err(e) = stream.write_all(format!("{request}\n").as_bytes()) {
        return Asked::Failed(format!("sending the request: {e}"));
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let _ = stream.set_read_timeout(Some(left()));
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if answer.len() + n <= MAX_STATUS_REPLY + 1 => {
                answer.extend_from_slice(&buf[..n])
            }
            Ok(_) => return Asked::Failed("its answer is larger than its limit".into()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Asked::Failed(format!("no answer within {ASK_DEADLINE:?}: {e}")),
        }
    }
    let value: Value = match serde_json::from_slice(&answer) {
        Ok(v) => v,
        Err(e) => return Asked::Failed(format!("its answer is not JSON: {e}")),
    };
    if let Some(error) = value["error"].as_str() {
        return Asked::Failed(format!("it refused: {error}"));
    }
    match value["schema"].as_u64() {
        Some(s) if s <= u64::from(STATUS_SCHEMA) => Asked::Answer(value),
        other => Asked::Failed(format!(
            "its status schema {other:?} is newer than this mcp-stdio's ({STATUS_SCHEMA}): update it"
        )),
    }
}

/// Whether a process `pid` exists (a signal 0 that is not refused as `ESRCH`).
fn pid_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The `ps` table: one row per guard.
fn table(rows: &[Value], now_ms: u64) -> String {
    let header = [
        "NAME", "GUARD", "SERVER", "STATE", "UP", "CALLS", "ERR", "P99", "RSS", "CPU", "RESTARTS",
        "HOST",
    ];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    for v in rows {
        let n = |p: &str| v.pointer(p).and_then(Value::as_u64);
        let p99 =
            v["latency"]
                .as_array()
                .and_then(|l| l.first())
                .map_or("-".to_owned(), |l| match l["p99_ms"].as_u64() {
                    Some(ms) => format!("≤{ms}ms"),
                    None => ">60s".to_owned(),
                });
        let errors = n("/requests/error").unwrap_or(0) + n("/requests/failed").unwrap_or(0);
        cells.push(vec![
            v["name"].as_str().unwrap_or("?").to_owned(),
            n("/guard_pid").map_or("-".into(), |p| p.to_string()),
            n("/process/pid").map_or("-".into(), |p| p.to_string()),
            v["state"].as_str().unwrap_or("?").to_owned(),
            n("/started_unix_ms").map_or("-".into(), |s| duration(now_ms.saturating_sub(s))),
            n("/requests/total").unwrap_or(0).to_string(),
            errors.to_string(),
            p99,
            n("/process/rss_bytes").map_or("-".into(), mib),
            n("/process/cpu_ms").map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1e3)),
            n("/restarts").unwrap_or(0).to_string(),
            v["host_program"].as_str().unwrap_or("-").to_owned(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1}M", bytes as f64 / (1024.0 * 1024.0))
}

pub(crate) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_one_row_per_guard_with_its_figures() {
        let rows = [serde_json::json!({
            "name": "weather", "guard_pid": 10, "state": "running",
            "started_unix_ms": 1_000, "host_program": "claude",
            "requests": {"total": 12, "error": 1, "failed": 1},
            "latency": [{"operation": "tools/call", "p99_ms": 50}],
            "process": {"pid": 11, "rss_bytes": 3 * 1024 * 1024, "cpu_ms": 1500},
            "restarts": 2,
        })];
        let t = table(&rows, 1_000 + 125_000);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{t}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "weather", "10", "11", "running", "2m05s", "12", "2", "≤50ms", "3.0M", "1.5s", "2",
                "claude"
            ]
        );
    }
}
