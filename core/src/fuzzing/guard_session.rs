//! The fuzz harness of `guard`.

use crate::process::supervisor::ExitStatus;
use crate::time::Stamp;
use std::time::{Duration, Instant};
/// Fuzz entry point: drives a guard session (the oversized policy `discard`
/// or `close`) with arbitrary inputs in any order (host and server traffic,
/// EOFs, write progress and errors, exit, signals, timeouts, time moving
/// forward) and checks its invariants.
/// Panics on a violated invariant.
pub fn fuzz_guard_session(data: &[u8]) {
    run(data);
}

use crate::guard::*;
use arbitrary::{Arbitrary, Unstructured};

#[derive(Arbitrary, Debug)]
enum Op {
    Host(Vec<u8>),
    /// A `tools/call` of one of a few tools (the policies' subjects).
    HostToolCall {
        id: u8,
        tool: u8,
        arg: u8,
    },
    HostRequest {
        id: u8,
    },
    HostEof,
    HostWritten(u16),
    HostWriteError,
    ServerStdout(Vec<u8>),
    ServerNotification {
        pad: u16,
    },
    /// A tool result for the request `id`: a text block and an image of
    /// `text`, sometimes `structuredContent` (the content limit's subject).
    ServerToolResult {
        id: u8,
        text: String,
        structured: bool,
    },
    ServerStdoutEof,
    ServerStderr(Vec<u8>),
    ServerStderrEof,
    ServerWritten(u16),
    ServerStdinError,
    Exited(i8),
    /// A signal from the host: `SIGINT`, `SIGTERM` or `SIGHUP` by its value.
    Signal(u8),
    Advance(u16),
    Timeout,
    TakeHost,
    TakeServer,
    /// A status request (`mcp-stdio ps`): built from whatever state the session is in.
    Status,
}

pub(super) fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut config = GuardConfig::default();
    config
        .framer_mut()
        .max_frame(u.int_in_range(64..=512usize).unwrap_or(128));
    config
        .proxy_mut()
        .max_buffered(u.int_in_range(0..=4096usize).unwrap_or(1024))
        .max_notes(4);
    let grace = Duration::from_millis(u.int_in_range(0..=50u64).unwrap_or(10));
    config
        .supervisor_mut()
        .stdin_close_grace(grace)
        .term_grace(grace)
        .reader_drain_deadline(grace);
    let forward = u.int_in_range(0..=64u64).unwrap_or(16);
    config.stderr_forward(forward);
    config.log_copy(u.arbitrary::<bool>().unwrap_or(false));
    if u.arbitrary::<bool>().unwrap_or(false) {
        config.trace(Some(u.arbitrary::<u64>().unwrap_or(1)));
    }
    // Sometimes an idle server sleeps (`--idle-stop`).
    if u.arbitrary::<bool>().unwrap_or(false) {
        let ms = u.int_in_range(1..=200u64).unwrap_or(50);
        config.idle_stop(Some(Duration::from_millis(ms)));
    }
    // Sometimes the tool policies are on (`--tools`, `--deny-tool`,
    // `--rate-limit`, `--repeat-limit`).
    if u.arbitrary::<bool>().unwrap_or(false) {
        let filter = crate::guard::policy::ToolFilter::new(
            Some(&["a*".to_owned(), "b".to_owned()]),
            &["ab".to_owned()],
        )
        .ok()
        .unwrap_or_default();
        let rates = crate::guard::policy::RateLimiter::new(vec![crate::guard::policy::RateRule {
            tool: None,
            calls: u.int_in_range(1..=4u32).unwrap_or(2),
            period: Duration::from_millis(100),
        }])
        .unwrap_or_default();
        let repeat = crate::guard::policy::RepeatBrake::new(2).ok();
        let keep = [
            crate::guard::policy::Keep::Head,
            crate::guard::policy::Keep::Tail,
            crate::guard::policy::Keep::HeadAndTail,
        ][u.int_in_range(0..=2usize).unwrap_or(2)];
        let content =
            crate::guard::policy::ContentLimit::new(u.int_in_range(1..=64u64).unwrap_or(16), keep)
                .ok();
        config.proxy_mut().tool_policy(Some(
            crate::guard::policy::ToolPolicy::new(filter, rates, repeat).content_limit(content),
        ));
    }
    // Sometimes an oversized line closes the session (the guard's
    // `--oversized-policy close`).
    if u.arbitrary::<bool>().unwrap_or(false) {
        config
            .framer_mut()
            .oversized_policy(crate::wire::frame::OversizedPolicy::Close);
    }
    let mut s = GuardSession::new(config);
    let base = Instant::now();
    let mut ms = 0u64;
    let stamp = |ms: u64| Stamp::new(base + Duration::from_millis(ms), ms);
    s.handle_spawned(stamp(ms));
    let (mut host_taken, mut server_taken) = (0usize, 0usize);
    let (mut host_closed, mut stdin_closed, mut finished) = (false, false, false);
    let mut first_exit: Option<i8> = None;
    let mut first_signal: Option<crate::Signal> = None;
    for _ in 0..256 {
        let Ok(op) = u.arbitrary::<Op>() else { break };
        let at = stamp(ms);
        match op {
            Op::Host(b) => s.handle_host(at, &b),
            Op::HostToolCall { id, tool, arg } => {
                let tool = ["a", "ab", "abc", "b", "c"][usize::from(tool) % 5];
                s.handle_host(
                    at,
                    format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\"arguments\":{{\"x\":{}}}}}}}\n",
                        arg % 3
                    )
                    .as_bytes(),
                );
            }
            Op::HostRequest { id } => s.handle_host(
                at,
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"m\"}}\n").as_bytes(),
            ),
            Op::HostEof => s.handle_host_eof(at),
            Op::HostWritten(n) => {
                let n = usize::from(n).min(host_taken);
                host_taken -= n;
                s.handle_host_written(n);
            }
            Op::HostWriteError => s.handle_host_write_error(at),
            Op::ServerStdout(b) => s.handle_server_stdout(at, &b),
            Op::ServerNotification { pad } => s.handle_server_stdout(
                at,
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}\n",
                    "n".repeat(usize::from(pad % 400))
                )
                .as_bytes(),
            ),
            Op::ServerToolResult {
                id,
                text,
                structured,
            } => {
                let text = serde_json::Value::from(text).to_string();
                let sc = if structured {
                    format!(",\"structuredContent\":{{\"t\":{text}}}")
                } else {
                    String::new()
                };
                s.handle_server_stdout(
                    at,
                    format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":{text}}},{{\"type\":\"image\",\"data\":{text}}}]{sc}}}}}\n"
                    )
                    .as_bytes(),
                );
            }
            Op::ServerStdoutEof => s.handle_server_stdout_eof(at),
            Op::ServerStderr(b) => s.handle_server_stderr(at, &b),
            Op::ServerStderrEof => s.handle_server_stderr_eof(at),
            Op::ServerWritten(n) => {
                let n = usize::from(n).min(server_taken);
                server_taken -= n;
                s.handle_server_written(n);
            }
            Op::ServerStdinError => {
                server_taken = 0;
                s.handle_server_stdin_error();
            }
            Op::Exited(code) => {
                first_exit.get_or_insert(code);
                s.handle_exited(at, ExitStatus::Code(i32::from(code)));
            }
            Op::Signal(n) => {
                let signal = match n % 3 {
                    0 => crate::Signal::Interrupt,
                    1 => crate::Signal::Term,
                    _ => crate::Signal::Hangup,
                };
                first_signal.get_or_insert(signal);
                s.handle_signal(at, signal);
            }
            Op::Advance(d) => ms += u64::from(d),
            Op::Timeout => {
                if let Some(t) = s.poll_timeout() {
                    let due = u64::try_from(t.saturating_duration_since(base).as_millis())
                        .unwrap_or(u64::MAX);
                    ms = ms.max(due);
                }
                s.handle_timeout(stamp(ms));
            }
            Op::TakeHost => {
                if let Some(b) = s.poll_to_host() {
                    assert!(!host_closed, "host bytes after CloseHostOutput");
                    // Every line the host gets is JSON (an edited result too).
                    for line in b.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
                        let text = std::str::from_utf8(line).expect("UTF-8 to the host");
                        assert!(
                            serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok(),
                            "not JSON to the host: {text}"
                        );
                    }
                    host_taken += b.len();
                }
            }
            Op::TakeServer => {
                if let Some(b) = s.poll_to_server(u64::MAX) {
                    assert!(!stdin_closed, "server bytes after CloseServerStdin");
                    server_taken += b.len();
                }
            }
            Op::Status => {
                let identity = crate::StatusIdentity::default();
                let st = s.status(
                    &identity,
                    crate::ProcessStats::default(),
                    Default::default(),
                );
                let json = serde_json::to_vec(&st).expect("a status is JSON");
                assert!(json.len() < crate::MAX_STATUS_REPLY, "{} bytes", json.len());
                let _ = s.stderr_newest(crate::MAX_STATUS_LOG_BYTES);
            }
        }
        while let Some(action) = s.poll_action() {
            assert!(!finished, "an action after Finished: {action:?}");
            match action {
                GuardAction::CloseHostOutput => {
                    assert!(!host_closed, "the host side closes once");
                    host_closed = true;
                    host_taken = 0;
                }
                GuardAction::CloseServerStdin => {
                    assert!(!stdin_closed, "stdin closes once");
                    stdin_closed = true;
                    server_taken = 0;
                }
                GuardAction::RespawnServer => {
                    // An idle server wakes: a new server, its own stdin.
                    stdin_closed = false;
                    server_taken = 0;
                    first_exit = None;
                    s.handle_spawned(stamp(ms));
                }
                GuardAction::Finished { exit_code, .. } => {
                    finished = true;
                    let expected = if s.closed_by_guard().is_some() {
                        EXIT_GUARD_CLOSED
                    } else if s.ended_asleep() {
                        first_signal.map_or(0, |g| u8::try_from(128 + g.number()).unwrap_or(255))
                    } else {
                        first_exit.map_or(EXIT_UNKNOWN, |c| u8::try_from(c).unwrap_or(EXIT_UNKNOWN))
                    };
                    assert_eq!(exit_code, expected);
                    assert_eq!(s.proxy().tracked(), 0, "every call ended");
                }
                _ => {}
            }
        }
        while s.poll_record().is_some() {}
        while s.poll_stderr().is_some() {}
        while s.poll_log().is_some() {}
        while let Some(span) = s.poll_span() {
            assert!(span.end_unix_ms >= span.start_unix_ms, "{span:?}");
            assert_ne!(span.context.span_id, [0; 8]);
            if let Some(parent) = span.parent {
                assert_eq!(
                    span.context.trace_id, parent.trace_id,
                    "a child keeps its trace"
                );
            }
            // A code is an error's; a target is bounded; the name is the method's.
            assert!(
                span.status_code.is_none() || span.error_type.is_some(),
                "{span:?}"
            );
            if let Some(
                crate::guard::trace::SpanTarget::Prompt(t)
                | crate::guard::trace::SpanTarget::Resource(t),
            ) = &span.target
            {
                assert!(t.len() <= crate::guard::trace::MAX_SPAN_TARGET_BYTES);
            }
            assert!(span.name.starts_with(&span.method), "{span:?}");
        }
        // Forwarded server stderr stays within its budget.
        assert!(s.stderr_forwarded <= forward);
        if !host_closed && s.proxy().host_closed().is_none() {
            assert!(s.proxy().host_backlog() <= s.config.get_proxy().get_max_buffered());
        }
        if finished {
            break;
        }
    }
}
