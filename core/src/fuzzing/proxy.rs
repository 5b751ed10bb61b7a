//! The fuzz harness of `guard/proxy`.

use crate::time::Stamp;
use crate::wire::message::{Id, Message};
/// Fuzz entry point: drives a proxy with an arbitrary sequence of host and
/// server traffic (structured messages split anywhere, raw bytes, EOFs),
/// write progress, write errors and the end of the session, and checks its
/// invariants. Panics on a violated invariant.
pub fn fuzz_proxy(data: &[u8]) {
    run(data);
}

use crate::guard::proxy::*;
use crate::guard::GuardConfig;
use crate::records::call::CallState;
use crate::wire::frame::MIN_MAX_FRAME;
use arbitrary::{Arbitrary, Unstructured};
use std::collections::HashSet;
use std::time::{Duration, Instant};

#[derive(Arbitrary, Debug)]
enum Op {
    HostRequest {
        id: u8,
        tool: bool,
        pad: u16,
        split: u16,
    },
    HostCancel {
        id: u8,
        split: u16,
    },
    HostRaw(Vec<u8>),
    HostEof,
    ServerResult {
        id: u8,
        pad: u16,
        split: u16,
    },
    ServerError {
        id: u8,
    },
    ServerNotification {
        pad: u16,
    },
    ServerRaw(Vec<u8>),
    ServerEof,
    TakeHost(u8),
    HostWritten(u16),
    TakeServer(u8),
    ServerWritten(u16),
    HostWriteError,
    ServerInputClosed,
    Finish,
}

struct Harness {
    p: Proxy,
    base: Instant,
    step: u64,
    max_frame: usize,
    max_buffered: usize,
    max_tracked: usize,
    /// The host's recent cancels, oldest first (the proxy's own limit).
    cancelled: Vec<u8>,
    max_cancelled: usize,
    /// Bytes handed out and not yet reported written.
    host_taken: usize,
    server_taken: usize,
    events: usize,
    /// Call ids with a terminal record.
    ended: HashSet<String>,
    /// Call ids with a dispatched record.
    dispatched: HashSet<String>,
}

pub(super) fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let max_frame = u.int_in_range(MIN_MAX_FRAME..=512).unwrap_or(128);
    let max_buffered = u.int_in_range(0..=4096usize).unwrap_or(1024);
    let max_tracked = u.int_in_range(0..=8usize).unwrap_or(4);
    let max_cancelled = u.int_in_range(0..=8usize).unwrap_or(4);
    let max_notes = u.int_in_range(0..=4usize).unwrap_or(2);
    let noise = u.int_in_range(0..=256u64).unwrap_or(64);
    let mut config = GuardConfig::default();
    config.framer_mut().max_frame(max_frame);
    config
        .proxy_mut()
        .max_buffered(max_buffered)
        .max_tracked(max_tracked)
        .max_cancelled(max_cancelled)
        .max_notes(max_notes)
        .noise_budget(noise);
    let mut h = Harness {
        p: Proxy::new(&config),
        base: Instant::now(),
        step: 0,
        max_frame,
        max_buffered,
        max_tracked,
        cancelled: Vec::new(),
        max_cancelled,
        host_taken: 0,
        server_taken: 0,
        events: 0,
        ended: HashSet::new(),
        dispatched: HashSet::new(),
    };
    for _ in 0..256 {
        let Ok(op) = u.arbitrary::<Op>() else { break };
        h.apply(op);
        h.check();
    }
}

fn split_push(bytes: &[u8], split: u16, mut push: impl FnMut(&[u8])) {
    let at = usize::from(split) % (bytes.len() + 1);
    push(&bytes[..at]);
    push(&bytes[at..]);
}

impl Harness {
    fn at(&mut self) -> Stamp {
        self.step += 1;
        Stamp::new(self.base + Duration::from_millis(self.step), self.step)
    }

    fn apply(&mut self, op: Op) {
        let at = self.at();
        match op {
            Op::HostRequest {
                id,
                tool,
                pad,
                split,
            } => {
                let params = if tool {
                    format!(
                        ",\"params\":{{\"name\":\"t{}\"}}",
                        "x".repeat(usize::from(pad % 600))
                    )
                } else {
                    format!(",\"params\":\"{}\"", "y".repeat(usize::from(pad % 600)))
                };
                let method = if tool { "tools/call" } else { "m" };
                let line = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"{params}}}\n"
                );
                let before = self.p.tracked();
                split_push(line.as_bytes(), split, |b| self.p.handle_host(at, b));
                if self.p.tracked() > before {
                    // A tracked request makes its id live again.
                    self.cancelled.retain(|&c| c != id);
                }
            }
            Op::HostCancel { id, split } => {
                let line = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{id}}}}}\n");
                // An oversized cancel is refused, so it cancels nothing.
                let fits = line.len() - 1 <= self.max_frame;
                if fits && self.max_cancelled > 0 && !self.cancelled.contains(&id) {
                    self.cancelled.push(id);
                    if self.cancelled.len() > self.max_cancelled {
                        self.cancelled.remove(0);
                    }
                }
                split_push(line.as_bytes(), split, |b| self.p.handle_host(at, b));
            }
            Op::HostRaw(bytes) => {
                // Raw bytes may form any request or cancel: the model of
                // cancelled ids no longer holds, so stop checking it.
                self.cancelled.clear();
                self.max_cancelled = 0;
                self.p.handle_host(at, &bytes);
            }
            Op::HostEof => self.p.handle_host_eof(at),
            Op::ServerResult { id, pad, split } => {
                let line = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":\"{}\"}}\n",
                    "r".repeat(usize::from(pad % 600))
                );
                split_push(line.as_bytes(), split, |b| self.p.handle_server(at, b));
            }
            Op::ServerError { id } => {
                let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-1,\"message\":\"e\"}}}}\n");
                self.p.handle_server(at, line.as_bytes());
            }
            Op::ServerNotification { pad } => {
                let line = format!(
                    "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}\n",
                    "n".repeat(usize::from(pad % 2000))
                );
                self.p.handle_server(at, line.as_bytes());
            }
            Op::ServerRaw(bytes) => self.p.handle_server(at, &bytes),
            Op::ServerEof => self.p.handle_server_eof(at),
            Op::TakeHost(n) => {
                for _ in 0..n {
                    let Some(b) = self.p.poll_to_host() else {
                        break;
                    };
                    self.check_host_message(&b);
                    self.host_taken += b.len();
                }
            }
            Op::HostWritten(n) => {
                let n = usize::from(n).min(self.host_taken);
                self.host_taken -= n;
                self.p.handle_host_written(n);
            }
            Op::TakeServer(n) => {
                for _ in 0..n {
                    let Some(b) = self.p.poll_to_server(u64::MAX) else {
                        break;
                    };
                    assert!(
                        b.len() <= self.max_frame + 1,
                        "G2: {} bytes to the server",
                        b.len()
                    );
                    assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), 1);
                    assert_eq!(b.last(), Some(&b'\n'));
                    self.server_taken += b.len();
                }
            }
            Op::ServerWritten(n) => {
                let n = usize::from(n).min(self.server_taken);
                self.server_taken -= n;
                self.p.handle_server_written(n);
            }
            Op::HostWriteError => self.p.handle_host_write_error(),
            Op::ServerInputClosed => {
                self.server_taken = 0;
                self.p.handle_server_input_closed();
            }
            Op::Finish => {
                self.p.finish(at, None);
                assert_eq!(self.p.tracked(), 0);
            }
        }
    }

    fn check_host_message(&self, b: &[u8]) {
        assert!(
            b.len() <= self.max_frame.max(1024) + 1,
            "G2: {} bytes to the host",
            b.len()
        );
        assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), 1);
        assert_eq!(b.last(), Some(&b'\n'));
        assert!(self.p.host_closed().is_none(), "handed out after close");
        let text = std::str::from_utf8(b).expect("frames are UTF-8");
        if let Ok(Message::Response(r)) = Message::decode(&text[..text.len() - 1]) {
            if let (Id::Number(n), Ok(_)) = (&r.id, &r.result) {
                let cancelled = u8::try_from(*n).is_ok_and(|n| self.cancelled.contains(&n));
                assert!(
                    !cancelled,
                    "G6: a result for cancelled id {n} reached the host"
                );
            }
        }
    }

    fn check(&mut self) {
        while let Some(ev) = self.p.poll_event() {
            self.events += 1;
            assert_eq!(self.events, 1, "the host side closes once: {ev:?}");
            if let ProxyEvent::HostStoppedReading { waiting, limit } = ev {
                assert!(waiting > limit && limit == self.max_buffered);
            }
        }
        if self.p.host_closed().is_none() {
            assert!(
                self.p.host_backlog() <= self.max_buffered,
                "G1: {} bytes wait for the host, limit {}",
                self.p.host_backlog(),
                self.max_buffered
            );
        } else {
            assert!(self.p.poll_to_host().is_none(), "handed out after close");
            assert!(self.events == 1);
        }
        assert!(self.p.host_backlog() >= self.host_taken);
        assert!(self.p.tracked() <= self.max_tracked);
        while let Some(r) = self.p.poll_record() {
            let id = r.call_id().to_owned();
            assert!(
                !self.ended.contains(&id),
                "G12: a record after the end of {id}"
            );
            if r.state() == CallState::Dispatched {
                assert!(self.dispatched.insert(id), "dispatched twice");
            } else {
                assert!(r.state().is_terminal(), "{:?}", r.state());
                assert!(
                    self.dispatched.contains(&id),
                    "G12: ended before dispatched"
                );
                self.ended.insert(id);
            }
        }
        let mut notes = 0;
        while self.p.poll_note().is_some() {
            notes += 1;
        }
        assert!(notes <= self.p.config().get_max_notes());
    }
}
