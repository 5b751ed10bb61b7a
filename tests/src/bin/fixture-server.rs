//! `fixture-server` — a deliberately misbehaving MCP server for the conformance suite.
//!
//! An independent peer: it speaks newline-delimited JSON-RPC 2.0 over stdin/stdout with
//! nothing but `serde_json`, and shares no code with `mcp-stdio-core` (a fixture that shared
//! our framer could share our bugs).
//!
//! ```text
//! USAGE: fixture-server [FLAGS]
//!
//! Protocol behaviour (always on)
//!   initialize                 echoes the client's protocolVersion, capabilities {tools:{}},
//!                              serverInfo {name:"fixture-server", version}
//!   notifications/initialized  accepted (logged)
//!   ping                       {} — answered from its own thread, so a slow tool never delays it
//!                              (it still waits for the one stdout writer lock, see below)
//!   tools/list                 the tools below
//!   tools/call {name, arguments}
//!     echo {text}                          content [{type:"text", text}]
//!     big {bytes}                          one text block of `bytes` 'x' (line ≈ bytes + ~70)
//!     big_exact {line_bytes}               response line EXACTLY line_bytes bytes (excluding \n)
//!     big_id_last {bytes}                  like `big`, members in the TypeScript SDK's order
//!                                          {result, jsonrpc, id}: the id comes last
//!     big_no_id {bytes}                    like `big_id_last` without the id: the call gets
//!                                          no usable answer (a broken server)
//!     huge_field {bytes}                   one text field: the unit  a"b\c é€😀<LF><TAB>  repeated,
//!                                          cut at a char boundary to <= bytes UTF-8 bytes
//!                                          (same text as `mcp_stdio_tests::huge_field_text`)
//!     many_blocks {count, size}            `count` text blocks of `size` bytes ('b') each
//!     slow {chunks, delay_ms, honour_cancel}
//!                                          chunks × delay_ms of work; with honour_cancel it
//!                                          checks the cancel flag between chunks and stops
//!     slow_io {ms}                         blocks in read() on a socketpair for `ms`; a cancel
//!                                          writes to the pair, so it wakes at once
//!     meta {}                              the request's `params._meta` as JSON text (what a
//!                                          server that traces itself would read)
//!     subprocess {seconds}                 spawns `fixture-helper sleep S` (or `sleep S`) in the
//!                                          server's process group and waits; on cancel kills
//!                                          and reaps it
//!     stream_then_result {bytes, chunk, delay_ms}
//!                                          writes ONE response line of exactly `bytes` bytes in
//!                                          `chunk`-byte pieces with delay_ms pauses (flushing);
//!                                          holds the writer lock meanwhile
//!     stderr_flood {bytes}                 writes exactly `bytes` bytes to stderr, then returns
//!     notify_then_result {count}           sends `count` notifications/message, then the result
//!     progress_past_cancel {count, delay_ms}
//!                                          sends `count` notifications/progress with the
//!                                          request's `_meta.progressToken`, one per delay_ms,
//!                                          NOT stopping at a cancel (a server that breaks the
//!                                          2026-07-28 rule), then the result
//!     progress {chunks, delay_ms}          like `slow` (honours cancel), with a
//!                                          notifications/progress for the request's
//!                                          `_meta.progressToken` before each chunk
//!     server_request {}                    sends a `ping` request to the client (id
//!                                          "fixture-srv-N") and returns once the client answers
//!     stop_reading {ms, every_ms}          answered at once from the READ LOOP, which then stops
//!                                          reading stdin for `ms` (a stalled peer: the client's
//!                                          writes fill the pipe), while a thread writes
//!                                          notifications/message "chatter N" to stdout and
//!                                          `fixture: chatter N` to stderr every `every_ms`
//!     result_then_flood {bytes, notify_bytes, each, delay_ms}
//!                                          answers with one text block of `bytes` 'x', waits
//!                                          `delay_ms` (default 0), then
//!                                          sends notifications/message of about `each` bytes
//!                                          until `notify_bytes` bytes went out, one write per
//!                                          message; logs `request <id> flood done <n> bytes`
//!     stdout_noise {lines}                 writes `lines` non-JSON lines of about 200 bytes to
//!                                          stdout, then returns
//!     stdout_invalid_utf8 {lines}          writes `lines` lines of invalid UTF-8 to stdout (one
//!                                          bare, one inside a JSON string), then returns
//!     bad_utf8_result {id_last, broken}    answers with one text block holding the bytes
//!                                          `\xff\xfe` (not UTF-8); `id_last` puts the id
//!                                          last, `broken` also cuts the line's JSON after
//!                                          the text (not JSON once repaired)
//!     escape_grandchild {seconds}          runs `fixture-helper escaped-grandchild S`: a
//!                                          grandchild in its own session holds this server's
//!                                          stderr for S seconds after the call returns
//!     crash_mid_response {bytes}           writes the first `bytes` bytes of a response line for
//!                                          this id (no newline), then aborts (SIGABRT)
//!     exit {code, notify_bytes}            writes notifications/message (about 4 KiB each) until
//!                                          `notify_bytes` went out, then exits with `code` at
//!                                          once, leaving this request (and any other) unanswered
//!     respond_then_exit {code, bytes, notify_bytes}
//!                                          answers with one text block of `bytes` 'x', then the
//!                                          notifications of `exit` (default none), then exits
//!                                          with `code` at once: the answer is the last message
//!                                          or comes just before a burst, and the exit follows
//!                                          the last write with nothing in between
//!     env {names}                          text: JSON {values: {NAME: value or null}, count}:
//!                                          the named variables and how many the server has
//!     print_env {name, stream, split_ms}   writes `<name>=<value>` as one line: to stderr in
//!                                          two writes cut in the value's middle, split_ms apart
//!                                          (stream "stderr", the default), or as a non-JSON
//!                                          stdout line (stream "stdout")
//!     change_tools {}                      appends " (changed mid-session)" to echo's description
//!                                          from now on and sends notifications/tools/list_changed,
//!                                          then returns
//!     <NAME> {}                            a tool added with --extra-tool NAME: returns
//!                                          "extra tool NAME"
//!   notifications/cancelled {requestId, reason}
//!                              sets the cancel flag of that in-flight request; the request then
//!                              gets NO response. A cancel after the response began writing is
//!                              logged and otherwise ignored. Unknown ids are logged and ignored.
//!   unknown method             JSON-RPC error -32601 (`server/discover` included, unless
//!                              --modern); bad params / unknown tool: -32602
//!   stdin EOF                  waits for in-flight requests (at most --eof-grace-ms), exits 0
//!
//! Misbehaviour flags
//!   --stdout-log-before          a non-JSON log line on stdout before anything else
//!   --stdout-log-between         a non-JSON log line on stdout between every two messages
//!   --malformed-after-init       a malformed JSON line right after the initialize response
//!   --oversized-on-init BYTES    after the initialize response, an unsolicited
//!                                notifications/message line of exactly BYTES bytes
//!   --respond-unknown-id         after every response except initialize's, an extra response
//!                                {"jsonrpc":"2.0","id":987654321,"result":{}}
//!   --late-response-after-cancel cancels are logged but ignored: the work finishes and the
//!                                response is sent anyway (violates the spec on purpose)
//!   --noisy-stderr BYTES_PER_SEC continuous stderr noise from a thread (10 bursts a second)
//!   --stderr-at-start BYTES      BYTES of stderr before reading stdin
//!   --ignore-stdin-eof           keep running after stdin EOF (until killed)
//!   --ignore-sigterm             SIGTERM is blocked and consumed by a sigwait thread, which logs
//!                                `fixture: SIGTERM received and ignored`; SIGKILL still works
//!   --exit-code N                exit status on stdin EOF (default 0)
//!   --ignore-unknown             unknown methods (`server/discover` included) get no answer at
//!                                all (logged as `request N ignored`), as some servers do
//!
//! Tool list flags (for the guard's pinned tool definitions)
//!   --tool-description-suffix TEXT  echo's description ends with TEXT
//!   --extra-tool NAME            one more tool NAME (repeatable), described "an extra tool"
//!   --tools-list-reordered       tools/list written with every object's keys in reverse order
//!                                and spaces around `:` and `,` (the same definitions)
//!   --tools-page-size N          tools/list in pages of N tools (`nextCursor`: the next index)
//!
//! Revision flag
//!   --modern                     speaks protocol 2026-07-28 only: `server/discover` lists it,
//!                                `initialize` is refused -32022, and any other request whose
//!                                `params._meta` lacks the protocol version 2026-07-28, the client
//!                                capabilities (an object) or the client info (an object) is
//!                                refused -32602 ("missing _meta: …", logged as
//!                                `request N missing _meta`)
//!   --eof-grace-ms MS            bound on waiting for in-flight work at stdin EOF (default 5000)
//!   --help                       this text (on stdout)
//!
//! stderr log lines (all start with `fixture: `; tests match on them)
//!   fixture: started pid <pid>
//!   fixture: request <id> received <method>[ tool <name>]
//!   fixture: request <id> cancel received
//!   fixture: request <id> cancel after response began (recorded, ignored)
//!   fixture: request <id> cancel ignored (--late-response-after-cancel)
//!   fixture: cancel for unknown request <id> ignored
//!   fixture: request <id> cancelled after <n> chunks           (slow)
//!   fixture: request <id> slow_io cancelled after <ms> ms      (slow_io)
//!   fixture: request <id> subprocess <pid> started             (subprocess)
//!   fixture: subprocess <pid> killed on cancel                 (subprocess)
//!   fixture: request <id> cancel observed <us> us after the notification
//!   fixture: request <id> response suppressed (cancelled)
//!   fixture: request <id> late response after cancel
//!   fixture: request <id> flood done <n> bytes                   (result_then_flood)
//!   fixture: request <id> exiting with <code> after <n> bytes    (exit, respond_then_exit)
//!   fixture: response <id> writing <bytes> bytes
//!   fixture: response <id> written
//!   fixture: stopped reading stdin for <ms> ms                  (stop_reading)
//!   fixture: chatter <n>                                       (stop_reading)
//!   fixture: resumed reading stdin                             (stop_reading)
//!   fixture: stdin EOF ...
//! `<id>` is the request id as JSON: `5`, or `"abc"` with the quotes.
//! ```
//!
//! Stdout is written only through one writer lock, one `write_all` + flush per message.
//! A response that blocks in `write()` (the host stopped reading) therefore blocks every
//! later message too — that is the failure G1 exists to prevent, made visible.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The tool list flags and `change_tools` (for the guard's pinned tool definitions).
#[path = "fixture-server/tool_list.rs"]
mod tool_list;

const USAGE: &str = "\
USAGE: fixture-server [FLAGS]   (an MCP server over stdio that misbehaves on demand)
  --stdout-log-before          non-JSON log line on stdout before anything
  --stdout-log-between         non-JSON log line on stdout between every two messages
  --malformed-after-init       malformed JSON line after the initialize response
  --oversized-on-init BYTES    unsolicited line of exactly BYTES bytes after initialize
  --respond-unknown-id         extra response with id 987654321 after each response
  --late-response-after-cancel ignore cancels and respond anyway
  --noisy-stderr BYTES_PER_SEC continuous stderr noise
  --stderr-at-start BYTES      BYTES of stderr before reading stdin
  --ignore-stdin-eof           keep running after stdin EOF
  --ignore-sigterm             SIGTERM is blocked and consumed (logged), SIGKILL still works
  --exit-code N                exit status on stdin EOF (default 0)
  --eof-grace-ms MS            bound on in-flight work at stdin EOF (default 5000)
  --modern                     speak protocol 2026-07-28 only (server/discover; _meta required)
  --ignore-unknown             never answer unknown methods
  --tool-description-suffix T  echo's description ends with T
  --extra-tool NAME            one more tool NAME (repeatable)
  --tools-list-reordered       tools/list keys in reverse order, with spaces
  --tools-page-size N          tools/list in pages of N tools
Tools: echo big big_exact big_id_last big_no_id huge_field many_blocks slow slow_io subprocess stop_reading
       stream_then_result stderr_flood notify_then_result progress server_request
       result_then_flood stdout_noise stdout_invalid_utf8 bad_utf8_result escape_grandchild
       crash_mid_response exit respond_then_exit env print_env change_tools
See the doc comment of tests/src/bin/fixture-server.rs for details.
";

/// The id used by `--respond-unknown-id`.
const UNKNOWN_ID: u64 = 987_654_321;

/// The line written by `--malformed-after-init`.
const MALFORMED_LINE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":, this is not JSON\n";

/// Command-line options.
#[derive(Debug, Default, Clone)]
struct Opts {
    stdout_log_before: bool,
    stdout_log_between: bool,
    malformed_after_init: bool,
    oversized_on_init: Option<usize>,
    respond_unknown_id: bool,
    late_response_after_cancel: bool,
    noisy_stderr: Option<u64>,
    stderr_at_start: Option<usize>,
    ignore_stdin_eof: bool,
    ignore_sigterm: bool,
    exit_code: i32,
    eof_grace: Duration,
    modern: bool,
    ignore_unknown: bool,
    description_suffix: Option<String>,
    extra_tools: Vec<String>,
    tools_reordered: bool,
    tools_page_size: Option<usize>,
}

fn parse_opts() -> Opts {
    let mut opts = Opts {
        eof_grace: Duration::from_millis(5000),
        ..Opts::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> u64 {
            let v = args
                .next()
                .unwrap_or_else(|| usage_error(&format!("{name} needs a value")));
            v.parse()
                .unwrap_or_else(|_| usage_error(&format!("{name}: not a number: {v}")))
        };
        match arg.as_str() {
            "--stdout-log-before" => opts.stdout_log_before = true,
            "--stdout-log-between" => opts.stdout_log_between = true,
            "--malformed-after-init" => opts.malformed_after_init = true,
            "--modern" => opts.modern = true,
            "--ignore-unknown" => opts.ignore_unknown = true,
            "--oversized-on-init" => opts.oversized_on_init = Some(to_usize(value(&arg))),
            "--respond-unknown-id" => opts.respond_unknown_id = true,
            "--late-response-after-cancel" => opts.late_response_after_cancel = true,
            "--noisy-stderr" => opts.noisy_stderr = Some(value(&arg)),
            "--stderr-at-start" => opts.stderr_at_start = Some(to_usize(value(&arg))),
            "--ignore-stdin-eof" => opts.ignore_stdin_eof = true,
            "--ignore-sigterm" => opts.ignore_sigterm = true,
            "--exit-code" => {
                opts.exit_code = i32::try_from(value(&arg))
                    .unwrap_or_else(|_| usage_error("--exit-code: out of range"));
            }
            "--eof-grace-ms" => opts.eof_grace = Duration::from_millis(value(&arg)),
            "--tools-list-reordered" => opts.tools_reordered = true,
            "--tools-page-size" => opts.tools_page_size = Some(to_usize(value(&arg)).max(1)),
            "--tool-description-suffix" | "--extra-tool" => {
                let v = args
                    .next()
                    .unwrap_or_else(|| usage_error(&format!("{arg} needs a value")));
                if arg == "--extra-tool" {
                    opts.extra_tools.push(v);
                } else {
                    opts.description_suffix = Some(v);
                }
            }
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => usage_error(&format!("unknown argument {other:?}")),
        }
    }
    opts
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or_else(|_| usage_error("value out of range"))
}

fn usage_error(msg: &str) -> ! {
    eprint!("fixture: {msg}\n{USAGE}");
    std::process::exit(2);
}

/// One log line on stderr, written with a single `write_all` under the stderr lock.
fn log(msg: &str) {
    let line = format!("fixture: {msg}\n");
    let _ = io::stderr().lock().write_all(line.as_bytes());
}

/// The request id as JSON text: the registry key and the form used in log lines.
fn id_key(id: &Value) -> String {
    serde_json::to_string(id).expect("a serde_json::Value always serializes")
}

/// Lifecycle of one in-flight request (G7 from the server side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Cancelled,
    Responding,
}

/// Registry entry of an in-flight request.
struct Inflight {
    state: Mutex<(State, Option<Instant>)>,
    /// Written to on cancel so a worker blocked in `read()` wakes at once (`slow_io`).
    waker: Mutex<Option<UnixStream>>,
}

impl Inflight {
    fn new() -> Self {
        Self {
            state: Mutex::new((State::Running, None)),
            waker: Mutex::new(None),
        }
    }

    fn is_cancelled(&self) -> bool {
        lock(&self.state).0 == State::Cancelled
    }

    fn cancelled_at(&self) -> Option<Instant> {
        lock(&self.state).1
    }
}

/// The single stdout writer.
struct Out {
    file: File,
    messages_written: u64,
    log_between: bool,
}

impl Out {
    /// Writes one message line (`line` excludes the `\n`) with one `write_all` + flush.
    fn write_line(&mut self, line: &[u8]) {
        self.before_message();
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line);
        buf.push(b'\n');
        self.raw(&buf);
    }

    /// Bookkeeping before a message: the `--stdout-log-between` line.
    fn before_message(&mut self) {
        if self.log_between && self.messages_written > 0 {
            let note = format!(
                "fixture stdout log: between messages {} and {} (not JSON)\n",
                self.messages_written,
                self.messages_written + 1
            );
            self.raw(note.as_bytes());
        }
        self.messages_written += 1;
    }

    fn raw(&mut self, bytes: &[u8]) {
        if let Err(e) = self.file.write_all(bytes).and_then(|()| self.file.flush()) {
            log(&format!("stdout write failed: {e}"));
        }
    }
}

struct Server {
    opts: Opts,
    out: Mutex<Out>,
    inflight: Mutex<HashMap<String, Arc<Inflight>>>,
    /// Signalled whenever an in-flight entry is removed (EOF drain waits on it).
    inflight_done: Condvar,
    /// Answers to our own server→client requests, keyed by id text.
    client_answers: Mutex<HashMap<String, mpsc::Sender<Value>>>,
    next_server_request: AtomicU64,
    helper: Option<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking worker must not take the whole fixture down with it.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a tool produced.
enum Outcome {
    Result(Value),
    Error(i64, String),
    /// Stopped because of a cancel: send nothing for this id.
    Cancelled,
    /// The tool already wrote (or deliberately suppressed) its own response.
    Done,
}

fn text_result(text: impl Into<String>) -> Value {
    json!({ "content": [ { "type": "text", "text": text.into() } ] })
}

fn main() {
    let opts = parse_opts();
    if opts.ignore_sigterm {
        ignore_sigterm();
    }
    let stdout = io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .expect("fd 1 must be open to dup it");
    let mut out = Out {
        file: File::from(stdout),
        messages_written: 0,
        log_between: opts.stdout_log_between,
    };
    log(&format!("started pid {}", std::process::id()));
    if opts.stdout_log_before {
        out.raw(b"fixture stdout log: starting up (this line is not JSON)\n");
    }
    if let Some(bytes) = opts.stderr_at_start {
        write_stderr_bytes(bytes, "start");
    }
    if let Some(rate) = opts.noisy_stderr {
        thread::spawn(move || noise(rate));
    }
    let helper = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("fixture-helper")))
        .filter(|p| p.is_file());
    let server = Arc::new(Server {
        opts,
        out: Mutex::new(out),
        inflight: Mutex::new(HashMap::new()),
        inflight_done: Condvar::new(),
        client_answers: Mutex::new(HashMap::new()),
        next_server_request: AtomicU64::new(1),
        helper,
    });
    read_loop(&server);
    stdin_eof(&server);
}

/// Blocks SIGTERM in this (still only) thread — every later thread inherits the mask — and
/// consumes it on a `sigwait` thread. nix's `signal(SIGTERM, SigIgn)` is `unsafe fn` and the
/// workspace forbids unsafe code; a blocked + consumed signal has the same observable effect
/// for a host (the process survives TERM, only KILL ends it). `std::process::Command` resets
/// the mask in children, so spawned subprocesses are not affected.
fn ignore_sigterm() {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.thread_block()
        .expect("pthread_sigmask(SIG_BLOCK, SIGTERM)");
    thread::spawn(move || loop {
        match set.wait() {
            Ok(sig) => log(&format!("{sig} received and ignored")),
            Err(e) => {
                log(&format!("sigwait failed: {e}"));
                return;
            }
        }
    });
    log("ignoring SIGTERM");
}

fn noise(bytes_per_sec: u64) {
    let burst = usize::try_from(bytes_per_sec / 10).unwrap_or(usize::MAX);
    loop {
        write_stderr_bytes(burst, "noise");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Writes exactly `total` bytes to stderr as lines `fixture: <what> xxxx…\n` (64 bytes each,
/// the last one shorter; may end without `\n` when `total` is not a multiple of 64).
fn write_stderr_bytes(total: usize, what: &str) {
    let mut line = format!("fixture: {what} ").into_bytes();
    line.resize(63, b'x');
    line.push(b'\n');
    let mut block = Vec::with_capacity(64 * 1024);
    while block.len() + line.len() <= 64 * 1024 {
        block.extend_from_slice(&line);
    }
    let mut err = io::stderr().lock();
    let mut left = total;
    while left > 0 {
        let n = left.min(block.len());
        if err.write_all(&block[..n]).is_err() {
            return;
        }
        left -= n;
    }
}

fn read_loop(server: &Arc<Server>) {
    let mut stdin = io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                log(&format!("stdin read failed: {e}"));
                return;
            }
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(msg) => handle_message(server, msg),
            Err(e) => {
                log(&format!(
                    "unparsable input line ({} bytes): {e}",
                    line.len()
                ));
                let err = json!({"jsonrpc":"2.0","id":null,
                    "error":{"code":-32700,"message":format!("parse error: {e}")}});
                lock(&server.out).write_line(&to_line(&err));
            }
        }
    }
}

fn to_line(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a serde_json::Value always serializes")
}

fn handle_message(server: &Arc<Server>, msg: Value) {
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = msg.get("id").cloned();
    match (method, id) {
        (Some(method), Some(id)) => handle_request(server, method, id, msg),
        (Some(method), None) => handle_notification(server, &method, &msg),
        (None, Some(id)) => {
            // A response to one of our server→client requests.
            let key = id_key(&id);
            match lock(&server.client_answers).remove(&key) {
                Some(tx) => {
                    let _ = tx.send(msg);
                }
                None => log(&format!(
                    "response from client for unknown id {key} ignored"
                )),
            }
        }
        (None, None) => log("message with neither method nor id ignored"),
    }
}

fn handle_notification(server: &Server, method: &str, msg: &Value) {
    match method {
        "notifications/initialized" => log("initialized"),
        "notifications/cancelled" => {
            let Some(id) = msg.pointer("/params/requestId") else {
                log("notifications/cancelled without requestId ignored");
                return;
            };
            let key = id_key(id);
            let reason = msg
                .pointer("/params/reason")
                .and_then(Value::as_str)
                .unwrap_or("");
            let entry = lock(&server.inflight).get(&key).cloned();
            let Some(entry) = entry else {
                log(&format!("cancel for unknown request {key} ignored"));
                return;
            };
            if server.opts.late_response_after_cancel {
                log(&format!(
                    "request {key} cancel ignored (--late-response-after-cancel)"
                ));
                return;
            }
            let mut state = lock(&entry.state);
            match state.0 {
                State::Running => {
                    *state = (State::Cancelled, Some(Instant::now()));
                    drop(state);
                    log(&format!(
                        "request {key} cancel received (reason {reason:?})"
                    ));
                    if let Some(w) = lock(&entry.waker).as_mut() {
                        let _ = w.write_all(b"c");
                    }
                }
                State::Responding => log(&format!(
                    "request {key} cancel after response began (recorded, ignored)"
                )),
                State::Cancelled => log(&format!("request {key} cancel repeated, ignored")),
            }
        }
        other => log(&format!("notification {other} ignored")),
    }
}

fn handle_request(server: &Arc<Server>, method: String, id: Value, msg: Value) {
    let key = id_key(&id);
    let tool = msg.pointer("/params/name").and_then(Value::as_str);
    match tool {
        Some(tool) if method == "tools/call" => {
            log(&format!("request {key} received {method} tool {tool}"));
        }
        _ => log(&format!("request {key} received {method}")),
    }
    if server.opts.modern {
        if let Some(error) = modern_refusal(&method, &msg) {
            log(&format!("request {key} {}", error.1));
            let line = to_line(&json!({"jsonrpc":"2.0","id":id,"error":error.0}));
            lock(&server.out).write_line(&line);
            return;
        }
    }
    if method == "initialize" {
        // Inline: the initialize response must precede the init misbehaviours and everything else.
        initialize(server, &id, &msg);
        return;
    }
    if method == "tools/call" && tool == Some("stop_reading") {
        // Inline: the read loop itself stops reading.
        stop_reading(server, &id, &msg);
        return;
    }
    let entry = Arc::new(Inflight::new());
    {
        let mut inflight = lock(&server.inflight);
        if inflight.contains_key(&key) {
            log(&format!("request {key} duplicates an in-flight id"));
        }
        inflight.insert(key.clone(), Arc::clone(&entry));
    }
    // Every request runs on its own thread, so the reader never blocks: a slow tool or a
    // response stuck in write() does not stop cancels from being read.
    let server = Arc::clone(server);
    thread::spawn(move || {
        let outcome = match method.as_str() {
            "ping" => Outcome::Result(json!({})),
            "server/discover" if server.opts.modern => Outcome::Result(discover_result()),
            "tools/list" => tool_list::listed_tools(&server, &id, &key, &entry, &msg),
            "tools/call" => call_tool(&server, &id, &key, &entry, &msg),
            _ if server.opts.ignore_unknown => {
                log(&format!("request {key} ignored"));
                lock(&server.inflight).remove(&key);
                return;
            }
            other => Outcome::Error(-32601, format!("method not found: {other}")),
        };
        finish(&server, &id, &key, &entry, outcome);
    });
}

/// The only version `--modern` speaks.
const MODERN: &str = "2026-07-28";

/// Under `--modern`: the error (and a log line) for `initialize`, and for a
/// request without the `_meta` every 2026-07-28 request carries; `None`: go on.
fn modern_refusal(method: &str, msg: &Value) -> Option<(Value, String)> {
    if method == "initialize" {
        let error = json!({"code": -32022, "message": "unsupported protocol version",
            "data": {"requested": msg.pointer("/params/protocolVersion"), "supported": [MODERN]}});
        return Some((error, "initialize refused: modern only".to_owned()));
    }
    let meta = msg.pointer("/params/_meta");
    let field = |k: &str| meta.and_then(|m| m.get(k));
    let missing = if field("io.modelcontextprotocol/protocolVersion") != Some(&json!(MODERN)) {
        "io.modelcontextprotocol/protocolVersion"
    } else if !field("io.modelcontextprotocol/clientCapabilities").is_some_and(Value::is_object) {
        "io.modelcontextprotocol/clientCapabilities"
    } else if !field("io.modelcontextprotocol/clientInfo").is_some_and(Value::is_object) {
        "io.modelcontextprotocol/clientInfo"
    } else {
        return None;
    };
    let error = json!({"code": -32602, "message": format!("missing _meta: {missing}")});
    Some((error, "missing _meta".to_owned()))
}

fn discover_result() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": [MODERN],
        "capabilities": { "tools": {} },
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo":
            { "name": "fixture-server", "version": env!("CARGO_PKG_VERSION") }},
    })
}

fn initialize(server: &Server, id: &Value, msg: &Value) {
    let version = msg
        .pointer("/params/protocolVersion")
        .cloned()
        .unwrap_or_else(|| json!("2025-06-18"));
    let result = json!({
        "protocolVersion": version,
        "capabilities": { "tools": {} },
        "serverInfo": { "name": "fixture-server", "version": env!("CARGO_PKG_VERSION") },
    });
    let line = to_line(&json!({"jsonrpc":"2.0","id":id,"result":result}));
    let key = id_key(id);
    let mut out = lock(&server.out);
    log(&format!("response {key} writing {} bytes", line.len()));
    out.write_line(&line);
    log(&format!("response {key} written"));
    if server.opts.malformed_after_init {
        out.before_message();
        out.raw(MALFORMED_LINE);
        log("malformed line written");
    }
    if let Some(bytes) = server.opts.oversized_on_init {
        let base = to_line(&json!({"jsonrpc":"2.0","method":"notifications/message",
            "params":{"level":"info","data":""}}));
        let pad = bytes.saturating_sub(base.len());
        let line = to_line(&json!({"jsonrpc":"2.0","method":"notifications/message",
            "params":{"level":"info","data":"o".repeat(pad)}}));
        out.write_line(&line);
        log(&format!("oversized line written ({} bytes)", line.len()));
    }
}

/// `stop_reading`: answers, then blocks the read loop for `ms` while a thread keeps writing
/// a notification to stdout and a line to stderr every `every_ms`.
fn stop_reading(server: &Arc<Server>, id: &Value, msg: &Value) {
    let empty = json!({});
    let args = msg.pointer("/params/arguments").unwrap_or(&empty);
    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(60_000);
    let every = args
        .get("every_ms")
        .and_then(Value::as_u64)
        .unwrap_or(20)
        .max(1);
    let result = text_result(format!("not reading stdin for {ms} ms"));
    lock(&server.out).write_line(&to_line(&json!({"jsonrpc":"2.0","id":id,"result":result})));
    log(&format!("stopped reading stdin for {ms} ms"));
    let until = Instant::now() + Duration::from_millis(ms);
    let chatter = Arc::clone(server);
    thread::spawn(move || {
        let mut n = 0_u64;
        while Instant::now() < until {
            let note = json!({"jsonrpc":"2.0","method":"notifications/message",
                "params":{"level":"info","data":format!("chatter {n}")}});
            lock(&chatter.out).write_line(&to_line(&note));
            log(&format!("chatter {n}"));
            n += 1;
            thread::sleep(Duration::from_millis(every));
        }
    });
    thread::sleep(until.saturating_duration_since(Instant::now()));
    log("resumed reading stdin");
}

/// Sends the response (or nothing) for a finished request, honouring the registry state.
fn finish(server: &Server, id: &Value, key: &str, entry: &Inflight, outcome: Outcome) {
    let msg = match outcome {
        Outcome::Result(result) => Some(json!({"jsonrpc":"2.0","id":id,"result":result})),
        Outcome::Error(code, message) => Some(json!({"jsonrpc":"2.0","id":id,
            "error":{"code":code,"message":message}})),
        Outcome::Cancelled => {
            log(&format!("request {key} response suppressed (cancelled)"));
            None
        }
        Outcome::Done => None,
    };
    if let Some(msg) = msg {
        let line = to_line(&msg);
        let mut out = lock(&server.out);
        if begin_response(server, key, entry) {
            log(&format!("response {key} writing {} bytes", line.len()));
            out.write_line(&line);
            log(&format!("response {key} written"));
            after_response(server, &mut out);
        }
    }
    remove_inflight(server, key);
}

/// Moves the request to `Responding` unless it was cancelled; false means send nothing.
fn begin_response(server: &Server, key: &str, entry: &Inflight) -> bool {
    let mut state = lock(&entry.state);
    match state.0 {
        State::Cancelled if !server.opts.late_response_after_cancel => {
            drop(state);
            log(&format!("request {key} response suppressed (cancelled)"));
            false
        }
        State::Cancelled => {
            drop(state);
            log(&format!("request {key} late response after cancel"));
            true
        }
        State::Running | State::Responding => {
            state.0 = State::Responding;
            true
        }
    }
}

fn after_response(server: &Server, out: &mut Out) {
    if server.opts.respond_unknown_id {
        out.write_line(&to_line(
            &json!({"jsonrpc":"2.0","id":UNKNOWN_ID,"result":{}}),
        ));
        log(&format!("response {UNKNOWN_ID} (unknown id) written"));
    }
}

fn remove_inflight(server: &Server, key: &str) {
    lock(&server.inflight).remove(key);
    server.inflight_done.notify_all();
}

fn stdin_eof(server: &Server) {
    if server.opts.ignore_stdin_eof {
        log("stdin EOF, ignored (--ignore-stdin-eof)");
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
    log("stdin EOF, draining in-flight requests");
    let deadline = Instant::now() + server.opts.eof_grace;
    let mut inflight = lock(&server.inflight);
    while !inflight.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            log(&format!(
                "stdin EOF, {} requests still in flight after grace, exiting",
                inflight.len()
            ));
            break;
        }
        inflight = server
            .inflight_done
            .wait_timeout(inflight, deadline - now)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
    drop(inflight);
    log(&format!("exiting with {}", server.opts.exit_code));
    std::process::exit(server.opts.exit_code);
}

fn tools_list() -> Value {
    fn tool(name: &str, description: &str, props: Value) -> Value {
        json!({"name":name,"description":description,
            "inputSchema":{"type":"object","properties":props}})
    }
    let int = json!({"type":"integer","minimum":0});
    json!({"tools":[
        tool("echo", "returns its text", json!({"text":{"type":"string"}})),
        tool("big", "one text block of N 'x'", json!({"bytes":int})),
        tool("big_exact", "a response line of exactly N bytes", json!({"line_bytes":int})),
        tool("big_id_last", "like big, with the id as the last member", json!({"bytes":int})),
        tool("big_no_id", "like big_id_last, without the id", json!({"bytes":int})),
        tool("huge_field", "one huge string with quotes, backslashes, multi-byte chars",
            json!({"bytes":int})),
        tool("many_blocks", "many small text blocks", json!({"count":int,"size":int})),
        tool("slow", "chunks x delay_ms of work", json!({"chunks":int,"delay_ms":int,
            "honour_cancel":{"type":"boolean"}})),
        tool("slow_io", "blocking read for ms, cancellable", json!({"ms":int})),
        tool("subprocess", "waits for a child process", json!({"seconds":{"type":"number"}})),
        tool("stream_then_result", "one response line written slowly in chunks",
            json!({"bytes":int,"chunk":int,"delay_ms":int})),
        tool("stderr_flood", "writes N bytes to stderr", json!({"bytes":int})),
        tool("notify_then_result", "notifications then a result", json!({"count":int})),
        tool("progress_past_cancel", "progress notifications that go on after a cancel",
            json!({"count":int,"delay_ms":int})),
        tool("progress", "like slow, a progress notification before each chunk",
            json!({"chunks":int,"delay_ms":int})),
        tool("server_request", "pings the client and waits for its answer", json!({})),
        tool("stop_reading", "stops reading stdin for ms while writing stdout and stderr",
            json!({"ms":int,"every_ms":int})),
        tool("stdout_noise", "N non-JSON lines on stdout", json!({"lines":int})),
        tool("stdout_invalid_utf8", "N invalid UTF-8 lines on stdout", json!({"lines":int})),
        tool("bad_utf8_result", "a result with bytes that are not UTF-8",
            json!({"id_last":{"type":"boolean"},"broken":{"type":"boolean"}})),
        tool("escape_grandchild", "a grandchild in its own session holds stderr",
            json!({"seconds":{"type":"number"}})),
        tool("crash_mid_response", "part of a response line, then abort", json!({"bytes":int})),
        tool("exit", "notifications of N bytes, then exit with a code, unanswered",
            json!({"code":int,"notify_bytes":int})),
        tool("respond_then_exit", "a result of N bytes, notifications, then exit with a code",
            json!({"code":int,"bytes":int,"notify_bytes":int})),
        tool("result_then_flood", "a result of N bytes, then M bytes of notifications",
            json!({"bytes":int,"notify_bytes":int,"each":int,"delay_ms":int})),
        tool("env", "values of the named variables, and how many there are",
            json!({"names":{"type":"array","items":{"type":"string"}}})),
        tool("print_env", "a variable's value on stderr (in two writes) or as a stdout line",
            json!({"name":{"type":"string"},"stream":{"type":"string"},"split_ms":int})),
        tool("read_file", "a file's contents, or the error reading it gave",
            json!({"path":{"type":"string"}})),
        tool("meta", "the request's params._meta, as JSON text", json!({})),
    ]})
}

/// Reads an unsigned integer argument.
fn arg_u64(args: &Value, name: &str) -> Result<u64, Outcome> {
    args.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| Outcome::Error(-32602, format!("argument {name:?}: unsigned integer")))
}

fn arg_usize(args: &Value, name: &str) -> Result<usize, Outcome> {
    usize::try_from(arg_u64(args, name)?)
        .map_err(|_| Outcome::Error(-32602, format!("argument {name:?} too large")))
}

fn call_tool(server: &Server, id: &Value, key: &str, entry: &Inflight, msg: &Value) -> Outcome {
    let name = msg
        .pointer("/params/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let empty = json!({});
    let args = msg.pointer("/params/arguments").unwrap_or(&empty);
    let run = || -> Result<Outcome, Outcome> {
        Ok(match name {
            "echo" => {
                let text = args.get("text").and_then(Value::as_str).ok_or_else(|| {
                    Outcome::Error(-32602, "argument \"text\": string".to_owned())
                })?;
                Outcome::Result(text_result(text))
            }
            "meta" => Outcome::Result(text_result(
                msg.pointer("/params/_meta")
                    .unwrap_or(&Value::Null)
                    .to_string(),
            )),
            "big" => Outcome::Result(text_result("x".repeat(arg_usize(args, "bytes")?))),
            "big_exact" => Outcome::Result(exact_line_result(id, arg_usize(args, "line_bytes")?)?),
            "huge_field" => {
                Outcome::Result(text_result(huge_field_text(arg_usize(args, "bytes")?)))
            }
            "many_blocks" => {
                let count = arg_usize(args, "count")?;
                let block = json!({"type":"text","text":"b".repeat(arg_usize(args, "size")?)});
                Outcome::Result(json!({"content": vec![block; count]}))
            }
            "slow" => slow(
                key,
                entry,
                arg_u64(args, "chunks")?,
                arg_u64(args, "delay_ms")?,
                args.get("honour_cancel")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            ),
            "slow_io" => slow_io(key, entry, arg_u64(args, "ms")?),
            "progress" => progress(
                server,
                key,
                entry,
                msg.pointer("/params/_meta/progressToken"),
                arg_u64(args, "chunks")?,
                arg_u64(args, "delay_ms")?,
            ),
            "subprocess" => {
                let seconds = args.get("seconds").and_then(Value::as_f64).ok_or_else(|| {
                    Outcome::Error(-32602, "argument \"seconds\": number".to_owned())
                })?;
                subprocess(server, key, entry, seconds)
            }
            "big_id_last" => big_id_last(server, Some(id), key, entry, arg_usize(args, "bytes")?),
            "big_no_id" => big_id_last(server, None, key, entry, arg_usize(args, "bytes")?),
            "stream_then_result" => stream_then_result(
                server,
                id,
                key,
                entry,
                arg_usize(args, "bytes")?,
                arg_usize(args, "chunk")?.max(1),
                arg_u64(args, "delay_ms")?,
            )?,
            "stderr_flood" => {
                let bytes = arg_usize(args, "bytes")?;
                write_stderr_bytes(bytes, "flood");
                Outcome::Result(text_result(format!("wrote {bytes} bytes to stderr")))
            }
            "notify_then_result" => {
                let count = arg_u64(args, "count")?;
                for i in 0..count {
                    let note = json!({"jsonrpc":"2.0","method":"notifications/message",
                        "params":{"level":"info","data":format!("fixture notification {i}")}});
                    lock(&server.out).write_line(&to_line(&note));
                }
                Outcome::Result(text_result(format!("sent {count} notifications")))
            }
            "progress_past_cancel" => {
                let count = arg_u64(args, "count")?;
                let delay = Duration::from_millis(arg_u64(args, "delay_ms")?);
                let token = msg
                    .pointer("/params/_meta/progressToken")
                    .cloned()
                    .unwrap_or_else(|| json!("fixture"));
                for i in 0..count {
                    let note = json!({"jsonrpc":"2.0","method":"notifications/progress",
                        "params":{"progressToken":token,"progress":i,"total":count}});
                    lock(&server.out).write_line(&to_line(&note));
                    std::thread::sleep(delay);
                }
                Outcome::Result(text_result(format!("sent {count} progress notifications")))
            }
            "server_request" => server_request(server, key),
            "stdout_noise" => {
                let lines = arg_u64(args, "lines")?;
                for i in 0..lines {
                    let text = format!("fixture stdout noise {i} {}\n", "n".repeat(180));
                    lock(&server.out).raw(text.as_bytes());
                }
                Outcome::Result(text_result(format!("wrote {lines} noise lines")))
            }
            "stdout_invalid_utf8" => {
                let lines = arg_u64(args, "lines")?;
                for _ in 0..lines {
                    // A bare line, then one that looks like a notification with a bad byte inside.
                    lock(&server.out).raw(b"fixture \xff\xfe not utf-8 \xc3\x28\n");
                    lock(&server.out).raw(
                        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"\xff\"}}\n",
                    );
                }
                Outcome::Result(text_result(format!(
                    "wrote {lines} invalid UTF-8 line pairs"
                )))
            }
            "bad_utf8_result" => {
                let flag = |name| args.get(name).and_then(Value::as_bool).unwrap_or(false);
                let text = br#"{"content":[{"type":"text","text":"bad "#;
                let mut result = text.to_vec();
                result.extend_from_slice(b"\xff\xfe byte\"");
                if !flag("broken") {
                    result.extend_from_slice(b"}]}");
                }
                let mut line = Vec::new();
                if flag("id_last") {
                    line.extend_from_slice(b"{\"result\":");
                    line.extend_from_slice(&result);
                    line.extend_from_slice(
                        format!(",\"jsonrpc\":\"2.0\",\"id\":{id}}}\n").as_bytes(),
                    );
                } else {
                    line.extend_from_slice(
                        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":").as_bytes(),
                    );
                    line.extend_from_slice(&result);
                    line.extend_from_slice(b"}\n");
                }
                let mut out = lock(&server.out);
                if !begin_response(server, key, entry) {
                    return Ok(Outcome::Done);
                }
                out.before_message();
                out.raw(&line);
                log(&format!(
                    "response {key} written with bytes that are not UTF-8"
                ));
                after_response(server, &mut out);
                Outcome::Done
            }
            "escape_grandchild" => {
                let seconds = args.get("seconds").and_then(Value::as_f64).ok_or_else(|| {
                    Outcome::Error(-32602, "argument \"seconds\": number".to_owned())
                })?;
                escape_grandchild(server, key, seconds)
            }
            "crash_mid_response" => crash_mid_response(server, id, key, arg_usize(args, "bytes")?),
            "result_then_flood" => result_then_flood(server, id, key, entry, args)?,
            "exit" => exit_after(server, id, key, args, None)?,
            "respond_then_exit" => {
                let result = text_result("x".repeat(arg_usize(args, "bytes")?));
                exit_after(server, id, key, args, Some(result))?
            }
            "env" => env_values(args),
            "print_env" => print_env(server, args)?,
            "read_file" => {
                let path = args.get("path").and_then(Value::as_str).unwrap_or_default();
                match std::fs::read_to_string(path) {
                    Ok(text) => Outcome::Result(text_result(text)),
                    Err(e) => Outcome::Error(-32603, format!("reading {path}: {e}")),
                }
            }
            "change_tools" => tool_list::change_tools(server),
            extra if server.opts.extra_tools.iter().any(|t| t == extra) => {
                Outcome::Result(text_result(format!("extra tool {extra}")))
            }
            other => Outcome::Error(-32602, format!("unknown tool: {other}")),
        })
    };
    run().unwrap_or_else(|e| e)
}

/// The `huge_field` text: the unit repeated, cut at a char boundary to at most `bytes` bytes.
/// Kept identical to `mcp_stdio_tests::huge_field_text` (duplicated so the fixture stays a
/// standalone peer; a lib test compares the two through the wire).
fn huge_field_text(bytes: usize) -> String {
    const UNIT: &str = "a\"b\\c é€😀\n\t";
    let mut s = String::with_capacity(bytes);
    for ch in UNIT.chars().cycle() {
        if s.len() + ch.len_utf8() > bytes {
            break;
        }
        s.push(ch);
    }
    s
}

/// A result whose complete response line (without `\n`) is exactly `line_bytes` bytes.
fn exact_line_result(id: &Value, line_bytes: usize) -> Result<Value, Outcome> {
    let base = to_line(&json!({"jsonrpc":"2.0","id":id,"result":text_result("")})).len();
    if line_bytes < base {
        return Err(Outcome::Error(
            -32602,
            format!("line_bytes {line_bytes} below the minimum {base} for this id"),
        ));
    }
    // 'x' needs no escaping, so each padding byte adds exactly one byte to the line.
    Ok(text_result("x".repeat(line_bytes - base)))
}

fn log_cancel_latency(key: &str, entry: &Inflight) {
    if let Some(at) = entry.cancelled_at() {
        log(&format!(
            "request {key} cancel observed {} us after the notification",
            at.elapsed().as_micros()
        ));
    }
}

fn slow(key: &str, entry: &Inflight, chunks: u64, delay_ms: u64, honour_cancel: bool) -> Outcome {
    for done in 0..chunks {
        if honour_cancel && entry.is_cancelled() {
            log_cancel_latency(key, entry);
            log(&format!("request {key} cancelled after {done} chunks"));
            return Outcome::Cancelled;
        }
        thread::sleep(Duration::from_millis(delay_ms));
    }
    if honour_cancel && entry.is_cancelled() {
        log_cancel_latency(key, entry);
        log(&format!("request {key} cancelled after {chunks} chunks"));
        return Outcome::Cancelled;
    }
    Outcome::Result(text_result(format!("slow done after {chunks} chunks")))
}

fn progress(
    server: &Server,
    key: &str,
    entry: &Inflight,
    token: Option<&Value>,
    chunks: u64,
    delay_ms: u64,
) -> Outcome {
    for done in 0..chunks {
        if entry.is_cancelled() {
            log_cancel_latency(key, entry);
            log(&format!(
                "request {key} cancelled after {done} progress chunks"
            ));
            return Outcome::Cancelled;
        }
        if let Some(token) = token {
            let note = json!({"jsonrpc":"2.0","method":"notifications/progress",
                "params":{"progressToken":token,"progress":done,"total":chunks}});
            lock(&server.out).write_line(&to_line(&note));
        }
        thread::sleep(Duration::from_millis(delay_ms));
    }
    Outcome::Result(text_result(format!("progress done after {chunks} chunks")))
}

fn slow_io(key: &str, entry: &Inflight, ms: u64) -> Outcome {
    let (mut reader, writer) = UnixStream::pair().expect("socketpair");
    *lock(&entry.waker) = Some(writer);
    let start = Instant::now();
    let deadline = start + Duration::from_millis(ms);
    let mut buf = [0_u8; 16];
    loop {
        // Checked before each read: a cancel that came before the waker was installed.
        if entry.is_cancelled() {
            log_cancel_latency(key, entry);
            log(&format!(
                "request {key} slow_io cancelled after {} ms",
                start.elapsed().as_millis()
            ));
            return Outcome::Cancelled;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        reader
            .set_read_timeout(Some(deadline - now))
            .expect("nonzero read timeout");
        match reader.read(&mut buf) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Outcome::Error(-32603, format!("slow_io read failed: {e}")),
        }
    }
    Outcome::Result(text_result(format!("slow_io done after {ms} ms")))
}

fn subprocess(server: &Server, key: &str, entry: &Inflight, seconds: f64) -> Outcome {
    let mut cmd = match &server.helper {
        Some(helper) => {
            let mut c = Command::new(helper);
            c.arg("sleep");
            c
        }
        None => Command::new("sleep"),
    };
    // stdout must never reach the protocol stream; stderr is inherited like a real tool's.
    let spawned = cmd
        .arg(seconds.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::Error(-32603, format!("spawn failed: {e}")),
    };
    let pid = child.id();
    log(&format!("request {key} subprocess {pid} started"));
    let status: ExitStatus = loop {
        if entry.is_cancelled() {
            let _ = child.kill();
            let status = child.wait();
            log_cancel_latency(key, entry);
            log(&format!("subprocess {pid} killed on cancel ({status:?})"));
            return Outcome::Cancelled;
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(e) => return Outcome::Error(-32603, format!("wait failed: {e}")),
        }
    };
    Outcome::Result(text_result(format!("subprocess {pid} exited: {status}")))
}

fn stream_then_result(
    server: &Server,
    id: &Value,
    key: &str,
    entry: &Inflight,
    bytes: usize,
    chunk: usize,
    delay_ms: u64,
) -> Result<Outcome, Outcome> {
    let line = to_line(&json!({"jsonrpc":"2.0","id":id,"result":exact_line_result(id, bytes)?}));
    let mut out = lock(&server.out);
    if !begin_response(server, key, entry) {
        return Ok(Outcome::Done);
    }
    log(&format!(
        "response {key} writing {} bytes in chunks of {chunk}",
        line.len()
    ));
    out.before_message();
    let mut pieces = line.chunks(chunk).peekable();
    while let Some(piece) = pieces.next() {
        out.raw(piece);
        if pieces.peek().is_some() {
            thread::sleep(Duration::from_millis(delay_ms));
        }
    }
    out.raw(b"\n");
    log(&format!("response {key} written"));
    after_response(server, &mut out);
    Ok(Outcome::Done)
}

/// `big`'s result written as `{result, jsonrpc, id}` (serde_json would sort the keys), or
/// without its id.
fn big_id_last(
    server: &Server,
    id: Option<&Value>,
    key: &str,
    entry: &Inflight,
    bytes: usize,
) -> Outcome {
    let result = text_result("x".repeat(bytes));
    let line = match id {
        Some(id) => format!(r#"{{"result":{result},"jsonrpc":"2.0","id":{id}}}"#),
        None => format!(r#"{{"result":{result},"jsonrpc":"2.0"}}"#),
    };
    let mut out = lock(&server.out);
    if !begin_response(server, key, entry) {
        return Outcome::Done;
    }
    out.before_message();
    out.raw(line.as_bytes());
    out.raw(b"\n");
    log(&format!("response {key} written with its id last"));
    after_response(server, &mut out);
    Outcome::Done
}

/// A result of `bytes`, then notifications until `notify_bytes` went out. Each message is
/// written on its own (the writer lock is released between them), so the server blocks in
/// `write()` exactly when its reader stops draining.
fn result_then_flood(
    server: &Server,
    id: &Value,
    key: &str,
    entry: &Inflight,
    args: &Value,
) -> Result<Outcome, Outcome> {
    let bytes = arg_usize(args, "bytes")?;
    let notify_bytes = arg_usize(args, "notify_bytes")?;
    let each = arg_usize(args, "each")?.max(1);
    let delay_ms = args.get("delay_ms").and_then(Value::as_u64).unwrap_or(0);
    let line = to_line(&json!({"jsonrpc":"2.0","id":id,"result":text_result("x".repeat(bytes))}));
    {
        let mut out = lock(&server.out);
        if !begin_response(server, key, entry) {
            return Ok(Outcome::Done);
        }
        log(&format!("response {key} writing {} bytes", line.len()));
        out.write_line(&line);
        log(&format!("response {key} written"));
    }
    thread::sleep(Duration::from_millis(delay_ms));
    let mut sent = 0;
    let mut n = 0u64;
    while sent < notify_bytes {
        let note = to_line(&json!({"jsonrpc":"2.0","method":"notifications/message",
            "params":{"level":"info","data":format!("flood {n} {}", "f".repeat(each))}}));
        lock(&server.out).write_line(&note);
        sent += note.len() + 1;
        n += 1;
    }
    log(&format!("request {key} flood done {sent} bytes"));
    Ok(Outcome::Done)
}

/// `exit` and `respond_then_exit`: the answer (if any), then notifications until
/// `notify_bytes` went out, then `exit(code)` while still holding the writer lock, so the last
/// write and the exit come as close together as a process can make them.
fn exit_after(
    server: &Server,
    id: &Value,
    key: &str,
    args: &Value,
    result: Option<Value>,
) -> Result<Outcome, Outcome> {
    let code = i32::try_from(arg_u64(args, "code")?)
        .map_err(|_| Outcome::Error(-32602, "argument \"code\" out of range".to_owned()))?;
    let notify_bytes = match args.get("notify_bytes") {
        Some(_) => arg_usize(args, "notify_bytes")?,
        None => 0,
    };
    // Built first so nothing but writes lies between the first byte and the exit.
    let mut lines = Vec::new();
    if let Some(result) = result {
        lines.push(to_line(&json!({"jsonrpc":"2.0","id":id,"result":result})));
    }
    let mut notified = 0;
    while notified < notify_bytes {
        let note = to_line(&json!({"jsonrpc":"2.0","method":"notifications/message",
            "params":{"level":"info","data":format!("burst {} {}", lines.len(), "b".repeat(4096))}}));
        notified += note.len() + 1;
        lines.push(note);
    }
    let sent: usize = lines.iter().map(|l| l.len() + 1).sum();
    log(&format!(
        "request {key} exiting with {code} after {sent} bytes"
    ));
    let mut out = lock(&server.out);
    for line in &lines {
        out.write_line(line);
    }
    std::process::exit(code);
}

/// `escape_grandchild`: the helper's wrapper exits at once; its setsid'ed grandchild keeps
/// our stderr open for `seconds`, out of reach of a kill of our process group.
fn escape_grandchild(server: &Server, key: &str, seconds: f64) -> Outcome {
    let Some(helper) = &server.helper else {
        return Outcome::Error(
            -32603,
            "fixture-helper not found next to the server".to_owned(),
        );
    };
    // stdout carries the wrapper's "grandchild <pid>" report, never the protocol stream.
    let output = Command::new(helper)
        .arg("escaped-grandchild")
        .arg(seconds.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .output();
    match output {
        Ok(out) => {
            let report = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            log(&format!("request {key} started an escaped {report}"));
            Outcome::Result(text_result(report))
        }
        Err(e) => Outcome::Error(-32603, format!("spawn failed: {e}")),
    }
}

/// `crash_mid_response`: part of this id's response line, then `abort()` under the writer
/// lock, so the cut line is the last thing on stdout.
fn crash_mid_response(server: &Server, id: &Value, key: &str, bytes: usize) -> Outcome {
    let line = to_line(&json!({"jsonrpc":"2.0","id":id,
        "result":text_result("x".repeat(bytes.saturating_mul(2)))}));
    let mut out = lock(&server.out);
    out.before_message();
    out.raw(&line[..bytes.min(line.len() - 1)]);
    log(&format!(
        "request {key} crashing mid-response after {bytes} bytes"
    ));
    std::process::abort();
}

fn server_request(server: &Server, key: &str) -> Outcome {
    let n = server.next_server_request.fetch_add(1, Ordering::Relaxed);
    let req_id = json!(format!("fixture-srv-{n}"));
    let (tx, rx) = mpsc::channel();
    lock(&server.client_answers).insert(id_key(&req_id), tx);
    lock(&server.out).write_line(&to_line(
        &json!({"jsonrpc":"2.0","id":req_id,"method":"ping"}),
    ));
    log(&format!(
        "request {key} sent server request {}",
        id_key(&req_id)
    ));
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(answer) => Outcome::Result(text_result(format!("client answered: {answer}"))),
        Err(_) => {
            lock(&server.client_answers).remove(&id_key(&req_id));
            Outcome::Error(
                -32603,
                "client did not answer the server request".to_owned(),
            )
        }
    }
}

/// `env`: the named variables' values (null when unset) and the number of variables.
fn env_values(args: &Value) -> Outcome {
    let names = args
        .get("names")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let values: serde_json::Map<String, Value> = names
        .iter()
        .filter_map(Value::as_str)
        .map(|n| {
            (
                n.to_owned(),
                std::env::var_os(n).map(|v| json!(v.to_string_lossy())),
            )
        })
        .map(|(n, v)| (n, v.unwrap_or(Value::Null)))
        .collect();
    let count = std::env::vars_os().count();
    Outcome::Result(text_result(
        json!({"values": values, "count": count}).to_string(),
    ))
}

/// `print_env`: `<name>=<value>` on stderr in two writes (cut in the value's middle, `split_ms`
/// apart), or as one non-JSON stdout line.
fn print_env(server: &Server, args: &Value) -> Result<Outcome, Outcome> {
    let name = args.get("name").and_then(Value::as_str).unwrap_or("");
    let value = std::env::var(name)
        .map_err(|_| Outcome::Error(-32602, format!("{name:?} is not set (or not UTF-8)")))?;
    let line = format!("fixture: {name}={value} (printed)\n");
    if args.get("stream").and_then(Value::as_str) == Some("stdout") {
        lock(&server.out).raw(line.as_bytes());
    } else {
        let cut = line.len() - value.len() / 2 - " (printed)\n".len();
        let mut err = io::stderr().lock();
        let _ = err
            .write_all(&line.as_bytes()[..cut])
            .and_then(|()| err.flush());
        thread::sleep(Duration::from_millis(
            arg_u64(args, "split_ms").unwrap_or(0),
        ));
        let _ = err
            .write_all(&line.as_bytes()[cut..])
            .and_then(|()| err.flush());
    }
    Ok(Outcome::Result(text_result("printed")))
}
