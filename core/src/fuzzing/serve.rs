//! The fuzz harness of `serve`.

use crate::session::basics::ServerBasics;
use crate::wire::message::{ErrorObject, Id};
use std::collections::HashSet;
use std::time::{Duration, Instant};
/// Fuzz entry point (private feature `fuzzing`): see the harness below.
pub fn fuzz_serve(data: &[u8]) {
    run(data);
}

/// `ServeLifecycle` under any order of inputs: requests, cancels, junk,
/// partial writes, flushes, write failures, handler ends for known and
/// unknown ids, notifications, EOF and time. Invariants after every step:
/// no more handlers than `max_concurrent`, the outgoing queue within its
/// bound, every started handler ends in exactly one way, nothing starts
/// after the end, a finished loop stays finished. At the end, with a client
/// that reads and handlers that answer, the loop always finishes (G1).
// The harness.
use arbitrary::{Arbitrary, Unstructured};

use crate::serve::*;
use crate::wire::message::to_raw;

const MAX_FRAME: usize = 4096;
const MAX_CONCURRENT: usize = 4;
const MAX_OUTGOING: usize = 2048;

#[derive(Debug, Arbitrary)]
enum Op {
    Request(u8),
    Cancel(u8),
    Junk(Vec<u8>),
    Written(u16),
    Flushed,
    WriteFailed,
    Finished(u8, u16),
    Aborted(u8),
    Notify(u16),
    Eof,
    Advance(u16),
}

fn id(i: u8) -> Id {
    Id::Number(i64::from(i % 8))
}

/// A request with id `i % 8` and, by `i / 8`, a method the handler
/// serves, a basic the lifecycle answers, or one nobody serves.
fn request(i: u8) -> String {
    let (method, params) = match (i / 8) % 8 {
        0 | 1 => ("m", "{}"),
        2 => ("ping", "{}"),
        3 => ("initialize", r#"{"protocolVersion":"2025-06-18"}"#),
        4 => ("tools/list", "{}"),
        5 => ("tools/call", r#"{"name":"t"}"#),
        6 => ("tools/call", r#"{"name":"unknown"}"#),
        _ => ("no/such", "{}"),
    };
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{method}\",\"params\":{params}}}\n",
        id(i)
    )
}

/// Polls every action; tracks which handlers the adapter has running.
fn act(s: &mut ServeLifecycle, running: &mut HashSet<Id>, finished: bool) {
    while let Some(a) = s.poll_action() {
        match a {
            ServeAction::Start(r) => {
                assert!(!finished, "started {} after the end", r.id);
                // The basics are answered by the lifecycle, never by a handler.
                assert!(
                    matches!(r.method.as_str(), "m" | "tools/call"),
                    "{}",
                    r.method
                );
                assert!(running.insert(r.id.clone()), "started {} twice", r.id);
            }
            ServeAction::Cancel { id, .. } => {
                assert!(running.contains(&id), "cancel for {id}, not running");
            }
            ServeAction::Abort(id) => {
                assert!(running.remove(&id), "abort for {id}, not running");
            }
            ServeAction::Notification(_) | ServeAction::Note(_) => {}
        }
    }
    assert!(running.len() <= MAX_CONCURRENT);
    assert_eq!(running.len(), s.running());
}

pub(super) fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let t0 = Instant::now();
    let mut now = t0;
    let mut options = ServeOptions::default();
    options.drain_timeout(Duration::from_millis(1500));
    let mut basics = ServerBasics::default();
    basics
        .method("m")
        .and_then(|b| b.tool(&serde_json::json!({"name": "t", "inputSchema": {}})))
        .expect("valid basics");
    *options.basics_mut() = basics;
    options.framer_mut().max_frame(MAX_FRAME);
    options
        .session_mut()
        .max_concurrent(MAX_CONCURRENT)
        .max_outgoing_bytes(MAX_OUTGOING);
    let mut s = ServeLifecycle::new(&options);
    let mut running: HashSet<Id> = HashSet::new();
    let mut was_finished = false;
    for _ in 0..200 {
        let Ok(op) = u.arbitrary::<Op>() else { break };
        match op {
            Op::Request(i) => s.handle_stdin(now, request(i).as_bytes()),
            Op::Cancel(i) => s.handle_stdin(
                now,
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{}}}}}\n",
                    id(i)
                )
                .as_bytes(),
            ),
            Op::Junk(b) => s.handle_stdin(now, &b),
            Op::Written(n) => {
                let n = usize::from(n).min(s.pending_len());
                s.handle_written(now, n);
            }
            Op::Flushed => s.handle_flushed(now),
            Op::WriteFailed => s.handle_write_failed(now),
            Op::Finished(i, n) => {
                let id = id(i);
                running.remove(&id);
                let v = to_raw(&"r".repeat(usize::from(n) % 6000)).expect("a string encodes");
                s.handler_finished(now, &id, Ok(&v));
            }
            Op::Aborted(i) => {
                let id = id(i);
                running.remove(&id);
                s.handler_aborted(now, &id);
            }
            Op::Notify(n) => {
                let v = to_raw(&"n".repeat(usize::from(n) % 900)).expect("a string encodes");
                let _ = s.notify(now, "notifications/progress", Some(&v));
            }
            Op::Eof => s.handle_input_eof(now),
            Op::Advance(ms) => {
                now += Duration::from_millis(u64::from(ms) % 4000);
                s.handle_timeout(now);
            }
        }
        act(&mut s, &mut running, was_finished);
        // One response per admitted request, the control queue, one frame of slack.
        assert!(
            s.outgoing_bytes() <= MAX_CONCURRENT * MAX_FRAME + MAX_OUTGOING + MAX_FRAME,
            "outgoing {}",
            s.outgoing_bytes()
        );
        if was_finished {
            assert!(s.is_finished(), "a finished loop came back");
        }
        was_finished = s.is_finished();
    }
    // The client closes stdin. Whether the handlers ever answer and the
    // client ever reads again comes from the input: the loop must end in
    // every case, at its deadlines if nobody helps.
    let answer = u.arbitrary::<bool>().unwrap_or(true);
    let read = u.arbitrary::<bool>().unwrap_or(true);
    s.handle_input_eof(now);
    let eof_at = now;
    let err = ErrorObject::new(-1, "late");
    for _ in 0..10_000 {
        act(&mut s, &mut running, was_finished);
        if s.is_finished() {
            if !answer || !read {
                // Never later than the drain deadline plus the exit grace.
                let bound = options.get_drain_timeout() + EXIT_WRITE_GRACE;
                assert!(now.saturating_duration_since(eof_at) <= bound);
            }
            return;
        }
        if let Some(id) = running.iter().next().cloned().filter(|_| answer) {
            running.remove(&id);
            s.handler_finished(now, &id, Err(&err));
        } else if let Some(n) = Some(s.pending_len()).filter(|&n| n > 0 && read) {
            s.handle_written(now, n);
        } else if s.flush_due() && read {
            s.handle_flushed(now);
        } else if let Some(d) = s.poll_timeout() {
            now = now.max(d);
            s.handle_timeout(now);
        } else {
            panic!(
                "stuck: no timer, not finished (answer {answer}, read {read}): {:?}",
                s.report()
            );
        }
    }
    panic!("never finished: {:?}", s.report());
}
