//! `mcp-stdio builtin-server` (hidden): a deliberately misbehaving MCP
//! server, so that `mcp-stdio check` with no server command has something
//! real to find on a fresh machine.
//!
//! It is a peer, not a user of our core: plain `serde_json`, one line per
//! message, blocking std I/O on one thread — the way many quick servers are
//! written. Its faults are the common ones, each caught by a row of `check`:
//!
//! | behaviour | row |
//! | --- | --- |
//! | prints a start-up banner on **stdout** | stdout hygiene: FAIL |
//! | **exits** (code 1) on a line it cannot parse, instead of answering -32700 | malformed line: FAIL |
//! | starts a background worker at `initialize` that outlives a crash | leftover processes: FAIL |
//! | `slow` runs inline: it blocks the read loop and **ignores cancels**, answering anyway | cancel: WARN |
//! | **ignores stdin EOF** (keeps running until `SIGTERM`) | stdin EOF: WARN |
//! | logs every response body to stderr (`big`: megabytes) | stderr volume: WARN |
//! | `big {bytes}`: one text block of `bytes` × `x`, written with a blocking `write_all` | large response, slow reader: PASS |
//! | exits on `SIGTERM` (default disposition) | SIGTERM: PASS |
//!
//! stdout carries only its (mis)behaviour; its own log lines go to stderr,
//! each starting with `builtin-server: `.

use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The large tool `check` calls on the built-in server.
pub(crate) const LARGE_TOOL: &str = "big";
/// Its arguments: 20 MiB of text, over the default 16 MiB wire limit.
pub(crate) const LARGE_ARGS: &str = r#"{"bytes":20971520}"#;
/// The slow tool `check` cancels on the built-in server.
pub(crate) const SLOW_TOOL: &str = "slow";
/// Its arguments: 800 ms of work that no cancel interrupts.
pub(crate) const SLOW_ARGS: &str = r#"{"ms":800}"#;

/// Most bytes `big` produces (it is a test server, not a memory hog).
const MAX_BIG: u64 = 64 * 1024 * 1024;
/// Longest `slow` sleeps.
const MAX_SLOW_MS: u64 = 60_000;
/// How long the background worker lives (it needs no longer to be caught).
const WORKER_LIFETIME: Duration = Duration::from_secs(30);
/// Protocol versions it accepts from the client; anything else gets the second.
const VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Arguments of the hidden `builtin-server` subcommand.
#[derive(Debug, clap::Args)]
pub(crate) struct BuiltinArgs {
    /// Run as the background worker the server starts (internal).
    #[arg(long, hide = true)]
    background_worker: bool,
}

/// Runs the built-in server on this process's stdin and stdout.
pub(crate) fn run(args: &BuiltinArgs) -> ExitCode {
    if args.background_worker {
        // Sleeps with all three streams closed: nothing holds a pipe, so only
        // a scan of the process group finds it after the server is gone.
        std::thread::sleep(WORKER_LIFETIME);
        return ExitCode::SUCCESS;
    }
    let mut server = Server {
        out: io::stdout().lock(),
        worker_started: false,
    };
    log(&format!("started pid {}", std::process::id()));
    // Fault: a banner on stdout, where only protocol messages belong.
    server.raw(
        format!(
            "mcp-stdio builtin-server {} ready on stdio\n",
            env!("CARGO_PKG_VERSION")
        )
        .as_bytes(),
    );
    let mut stdin = io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                log(&format!("stdin read failed: {e}"));
                break;
            }
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(msg) => server.handle(&msg),
            Err(e) => {
                // Fault: a parse error takes the whole server down (a JSON-RPC
                // server answers -32700 with a null id and goes on).
                log(&format!("fatal: cannot parse input line: {e}"));
                return ExitCode::from(1);
            }
        }
    }
    // Fault: stdin EOF means the host is done, but this server stays up.
    log("stdin closed; staying up to keep the cache warm (ignoring EOF)");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// One log line on stderr.
fn log(msg: &str) {
    let _ = writeln!(io::stderr().lock(), "builtin-server: {msg}");
}

struct Server {
    out: io::StdoutLock<'static>,
    worker_started: bool,
}

impl Server {
    fn raw(&mut self, bytes: &[u8]) {
        if let Err(e) = self.out.write_all(bytes).and_then(|()| self.out.flush()) {
            log(&format!("stdout write failed ({e}); exiting"));
            std::process::exit(1);
        }
    }

    fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).expect("a serde_json::Value always serializes");
        line.push(b'\n');
        self.raw(&line);
    }

    fn result(&mut self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn error(&mut self, id: &Value, code: i64, message: &str) {
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        );
    }

    fn handle(&mut self, msg: &Value) {
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id");
        match (method, id) {
            (Some(method), Some(id)) => {
                log(&format!("request {id} {method}"));
                self.request(method, id, msg.get("params"));
            }
            (Some("notifications/cancelled"), None) => {
                let target = msg.pointer("/params/requestId").cloned();
                // Fault: cancels are not tracked at all.
                log(&format!(
                    "ignoring notifications/cancelled for {}",
                    target.unwrap_or(Value::Null)
                ));
            }
            (Some(method), None) => log(&format!("notification {method}")),
            (None, _) => log("ignoring a message without a method"),
        }
    }

    fn request(&mut self, method: &str, id: &Value, params: Option<&Value>) {
        match method {
            "initialize" => {
                self.start_worker();
                let asked = params
                    .and_then(|p| p.get("protocolVersion"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let version = if VERSIONS.contains(&asked) {
                    asked
                } else {
                    VERSIONS[1]
                };
                self.result(
                    id,
                    json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {
                            "name": "mcp-stdio-builtin-server",
                            "version": env!("CARGO_PKG_VERSION"),
                        },
                    }),
                );
            }
            "ping" => self.result(id, json!({})),
            "tools/list" => self.result(id, tools()),
            "tools/call" => self.call(id, params),
            _ => self.error(id, -32601, &format!("method not found: {method}")),
        }
    }

    fn call(&mut self, id: &Value, params: Option<&Value>) {
        let name = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let args = params.and_then(|p| p.get("arguments"));
        let number = |key: &str, default: u64| {
            args.and_then(|a| a.get(key))
                .and_then(Value::as_u64)
                .unwrap_or(default)
        };
        match name {
            "big" => {
                let bytes = number("bytes", 1024 * 1024).min(MAX_BIG);
                let text = "x".repeat(usize::try_from(bytes).unwrap_or(usize::MAX));
                // Fault: the whole response body goes to the debug log too.
                let mut err = io::stderr().lock();
                let _ = err.write_all(b"builtin-server: debug: big response body: ");
                let _ = err.write_all(text.as_bytes());
                let _ = err.write_all(b"\n");
                drop(err);
                self.result(id, json!({"content": [{"type": "text", "text": text}]}));
            }
            "slow" => {
                let ms = number("ms", 800).min(MAX_SLOW_MS);
                let start = Instant::now();
                // Fault: the work runs on the read loop, so neither a cancel
                // nor the next request is even read until it is done.
                std::thread::sleep(Duration::from_millis(ms));
                log(&format!(
                    "slow done after {} ms; answering (cancels are not checked)",
                    start.elapsed().as_millis()
                ));
                self.result(
                    id,
                    json!({"content": [{"type": "text", "text": format!("slept {ms} ms")}]}),
                );
            }
            "echo" => {
                let text = args
                    .and_then(|a| a.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                self.result(id, json!({"content": [{"type": "text", "text": text}]}));
            }
            other => self.error(id, -32602, &format!("unknown tool: {other}")),
        }
    }

    /// Fault: a helper process that nothing stops when the server dies.
    fn start_worker(&mut self) {
        if self.worker_started {
            return;
        }
        self.worker_started = true;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let spawned = std::process::Command::new(exe)
            .args(["builtin-server", "--background-worker"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => log(&format!("background worker pid {} started", child.id())),
            Err(e) => log(&format!("background worker not started: {e}")),
        }
    }
}

fn tools() -> Value {
    json!({"tools": [
        {
            "name": "big",
            "description": "One text block of `bytes` bytes.",
            "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}},
        },
        {
            "name": "slow",
            "description": "Works for `ms` milliseconds, then answers.",
            "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}},
        },
        {
            "name": "echo",
            "description": "Returns `text`.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    ]})
}
