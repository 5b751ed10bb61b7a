//! `ServeLifecycle` under any order of inputs: requests, cancels, junk,
//! partial writes, flushes, write failures, handler ends for known and
//! unknown ids, notifications, EOF and time.
//!
//! Policy: a panic is a bug, never bad input. Invariants checked after every
//! step: no more handlers than `max_concurrent`, the outgoing queue within
//! its bound, every started handler ends in exactly one way, nothing is
//! started after the end, and a finished loop stays finished. And at the
//! end: with a client that reads and handlers that answer, the loop always
//! finishes after EOF — by itself or at its deadlines (G1).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mcp_stdio_core::message::{to_raw, ErrorObject, Id};
use mcp_stdio_core::serve::{ServeAction, ServeLifecycle, ServeOptions, EXIT_WRITE_GRACE};
use proptest::prelude::*;

const MAX_FRAME: usize = 4096;
const MAX_CONCURRENT: usize = 4;
const MAX_OUTGOING: usize = 2048;

#[derive(Debug, Clone)]
enum Op {
    Request(u8),
    Cancel(u8),
    Junk(Vec<u8>),
    Written(usize),
    Flushed,
    WriteFailed,
    Finished(u8, usize),
    Aborted(u8),
    Notify(usize),
    Eof,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8).prop_map(Op::Request),
        2 => (0u8..8).prop_map(Op::Cancel),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Junk),
        3 => (0usize..600).prop_map(Op::Written),
        1 => Just(Op::Flushed),
        1 => Just(Op::WriteFailed),
        3 => ((0u8..8), (0usize..6000)).prop_map(|(i, n)| Op::Finished(i, n)),
        1 => (0u8..8).prop_map(Op::Aborted),
        2 => (0usize..900).prop_map(Op::Notify),
        1 => Just(Op::Eof),
        2 => (0u64..4000).prop_map(Op::Advance),
    ]
}

fn options() -> ServeOptions {
    let mut o = ServeOptions {
        drain_timeout: Duration::from_millis(1500),
        ..ServeOptions::default()
    };
    o.config
        .max_frame(MAX_FRAME)
        .max_concurrent(MAX_CONCURRENT)
        .max_outgoing_bytes(MAX_OUTGOING);
    o
}

/// Polls every action; tracks which handlers the adapter would have running.
fn act(s: &mut ServeLifecycle, running: &mut HashSet<Id>, finished: bool) {
    while let Some(a) = s.poll_action() {
        match a {
            ServeAction::Start(r) => {
                assert!(!finished, "started {} after the end", r.id);
                assert!(running.insert(r.id.clone()), "started {} twice", r.id);
            }
            ServeAction::Cancel { id, .. } => {
                assert!(running.contains(&id), "cancel for {id}, not running");
            }
            ServeAction::Abort(id) => {
                assert!(running.remove(&id), "abort for {id}, not running");
            }
            _ => {}
        }
    }
    assert!(running.len() <= MAX_CONCURRENT);
    assert_eq!(running.len(), s.running());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_order_of_inputs_keeps_the_bounds_and_always_ends(ops in proptest::collection::vec(op(), 0..80)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut s = ServeLifecycle::new(&options());
        let mut running: HashSet<Id> = HashSet::new();
        let mut was_finished = false;
        for op in ops {
            match op {
                Op::Request(i) => s.handle_input(now, format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"m\"}}\n").as_bytes()),
                Op::Cancel(i) => s.handle_input(now, format!(
                    "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{i}}}}}\n").as_bytes()),
                Op::Junk(b) => s.handle_input(now, &b),
                Op::Written(n) => {
                    let n = n.min(s.pending_write().map_or(0, <[u8]>::len));
                    s.handle_written(now, n);
                }
                Op::Flushed => s.handle_flushed(now),
                Op::WriteFailed => s.handle_write_failed(now),
                Op::Finished(i, n) => {
                    let id = Id::Number(i.into());
                    running.remove(&id);
                    let v = to_raw(&"r".repeat(n)).expect("json");
                    s.handler_finished(now, &id, Ok(&v));
                }
                Op::Aborted(i) => {
                    let id = Id::Number(i.into());
                    running.remove(&id);
                    s.handler_aborted(now, &id);
                }
                Op::Notify(n) => {
                    let v = to_raw(&"n".repeat(n)).expect("json");
                    let _ = s.notify(now, "notifications/progress", Some(&v));
                }
                Op::Eof => s.handle_input_eof(now),
                Op::Advance(ms) => {
                    now += Duration::from_millis(ms);
                    s.handle_timeout(now);
                }
            }
            act(&mut s, &mut running, was_finished);
            // One response per admitted request, plus the control queue, plus one frame of slack.
            prop_assert!(s.outgoing_bytes() <= MAX_CONCURRENT * MAX_FRAME + MAX_OUTGOING + MAX_FRAME,
                "outgoing {}", s.outgoing_bytes());
            if was_finished {
                prop_assert!(s.is_finished(), "a finished loop came back");
            }
            was_finished = s.is_finished();
        }
        // The client closes stdin and reads everything; handlers answer.
        s.handle_input_eof(now);
        let err = ErrorObject::new(-1, "late");
        for step in 0..10_000 {
            act(&mut s, &mut running, was_finished);
            if s.is_finished() {
                break;
            }
            prop_assert!(step < 9_999, "never finished");
            if let Some(id) = running.iter().next().cloned() {
                running.remove(&id);
                s.handler_finished(now, &id, Err(&err));
            } else if let Some(b) = s.pending_write() {
                let n = b.len();
                s.handle_written(now, n);
            } else if s.flush_due() {
                s.handle_flushed(now);
            } else if let Some(d) = s.poll_timeout() {
                now = now.max(d);
                s.handle_timeout(now);
            } else {
                prop_assert!(false, "stuck: nothing to write, no timer, not finished: {:?}", s.report());
            }
        }
        prop_assert!(s.is_finished());
        prop_assert!(now <= t0 + Duration::from_secs(400) + EXIT_WRITE_GRACE);
    }
}
