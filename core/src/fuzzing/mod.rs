//! Fuzz-only entry points (private feature `fuzzing`; not a public API).
//!
//! The logic of every cargo-fuzz target lives here so ordinary builds and
//! tests compile it and a checked-in seed corpus replays through it in
//! `cargo test`. Each function panics only when an invariant breaks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};

use crate::session::client::{ClientConfig, ClientEvent, ClientSession, Incoming, OverloadPolicy};
use crate::session::server::{ServerConfig, ServerEvent, ServerSession};
use crate::wire::frame::{
    FrameError, FrameEvent, Framer, FramerConfig, InvalidUtf8Policy, OversizedPolicy, MIN_MAX_FRAME,
};
use crate::wire::message::{ErrorObject, Id, Message, RawValue};

mod capture;
mod guard_session;
mod helper_run;
mod hub;
mod json_edit;
mod proxy;
mod serve;
mod status_port;
mod supervisor;

pub use capture::fuzz_capture;
pub use guard_session::fuzz_guard_session;
pub use helper_run::fuzz_helper_run;
pub use hub::fuzz_hub;
pub use json_edit::fuzz_json_edit;
pub use proxy::fuzz_proxy;
pub use serve::fuzz_serve;
pub use status_port::fuzz_status_port;
pub use supervisor::fuzz_supervisor;

/// Runs `target` on the empty input, then on `runs` pseudo-random inputs of
/// up to `max_len` bytes (xorshift64 from `seed`): the unit-test form of a
/// fuzz target, so ordinary `cargo test` exercises its invariants.
pub fn run_random_inputs(seed: u64, runs: usize, max_len: u64, target: fn(&[u8])) {
    let mut state = seed.max(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    target(&[]);
    for _ in 0..runs {
        let len = usize::try_from(next() % max_len.max(1)).unwrap_or(0);
        let data: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[0]).collect();
        target(&data);
    }
}

/// An owned copy of a framer event, for comparing runs.
#[derive(Debug, PartialEq, Eq)]
enum Owned {
    Frame(String),
    /// A frame that came as invalid UTF-8, repaired.
    Repaired(String),
    Error(FrameError),
}

fn run_framer(config: &FramerConfig, input: &[u8], cuts: &[usize]) -> Vec<Owned> {
    let mut framer = Framer::new(config.clone());
    let mut out = Vec::new();
    let mut push = |ev: FrameEvent<'_>| {
        out.push(match ev {
            FrameEvent::Frame(s) if s.repair().is_some() => Owned::Repaired(s.to_owned()),
            FrameEvent::Frame(s) => Owned::Frame(s.to_owned()),
            FrameEvent::Error(e) => Owned::Error(e),
        })
    };
    let mut start = 0;
    for &cut in cuts {
        let end = cut.clamp(start, input.len());
        framer.push(&input[start..end], &mut push);
        assert!(
            framer.buffered_len() <= config.get_max_frame(),
            "G2: framer buffered {} bytes with max_frame {}",
            framer.buffered_len(),
            config.get_max_frame()
        );
        start = end;
    }
    framer.push(&input[start..], &mut push);
    framer.finish(&mut push);
    out
}

/// Reads `input` into the framer's room, cut at `cuts` (and by the room's
/// size), filling it by appending or by writing into zeroed bytes, taking
/// lent frames or not.
fn run_framer_reads(
    config: &FramerConfig,
    input: &[u8],
    cuts: &[usize],
    zeroed: bool,
    take: bool,
) -> Vec<Owned> {
    let mut framer = Framer::new(config.clone());
    let mut out = Vec::new();
    let mut start = 0;
    let mut cuts = cuts.iter().copied().chain(std::iter::repeat(usize::MAX));
    while start < input.len() {
        let end = cuts
            .next()
            .unwrap_or(usize::MAX)
            .clamp(start + 1, input.len());
        let mut at = start;
        while at < end {
            let room = framer.read_room();
            let n = room.len().min(end - at);
            assert!(n > 0, "the read room is never empty");
            if zeroed {
                room.zeroed()[..n].copy_from_slice(&input[at..at + n]);
            } else {
                room.vec().extend_from_slice(&input[at..at + n]);
            }
            at += n;
            framer.filled(n, |ev| {
                out.push(match ev {
                    FrameEvent::Frame(s) if s.repair().is_some() => {
                        Owned::Repaired(if take { s.into_string() } else { s.to_owned() })
                    }
                    FrameEvent::Frame(s) if take => Owned::Frame(s.into_string()),
                    FrameEvent::Frame(s) => Owned::Frame(s.to_owned()),
                    FrameEvent::Error(e) => Owned::Error(e),
                })
            });
            assert!(
                framer.buffer_capacity() <= config.get_max_frame() + 1,
                "G2: framer holds {} bytes with max_frame {}",
                framer.buffer_capacity(),
                config.get_max_frame()
            );
        }
        start = end;
    }
    framer.finish(|ev| {
        out.push(match ev {
            FrameEvent::Frame(s) if s.repair().is_some() => Owned::Repaired(s.to_owned()),
            FrameEvent::Frame(s) => Owned::Frame(s.to_owned()),
            FrameEvent::Error(e) => Owned::Error(e),
        })
    });
    out
}

/// Framer: any chunking gives the events of the one-chunk run (G4), and so
/// does reading straight into the framer's room; the buffer never passes
/// `max_frame` (G2); nothing panics.
pub fn fuzz_framer(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let max_frame = u
        .int_in_range(MIN_MAX_FRAME..=MIN_MAX_FRAME + 96)
        .unwrap_or(MIN_MAX_FRAME);
    let scan = u.int_in_range(0..=64usize).unwrap_or(16);
    let close = u.arbitrary::<bool>().unwrap_or(false);
    let refuse = u.arbitrary::<bool>().unwrap_or(false);
    let ncuts = u.int_in_range(0..=16usize).unwrap_or(0);
    let mut cuts: Vec<usize> = (0..ncuts)
        .map(|_| u.int_in_range(0..=4096usize).unwrap_or(0))
        .collect();
    cuts.sort_unstable();
    let input = u.take_rest();
    let mut config = FramerConfig::default();
    config
        .max_frame(max_frame)
        .id_scan_limit(scan)
        .oversized_policy(if close {
            OversizedPolicy::Close
        } else {
            OversizedPolicy::Discard
        })
        .invalid_utf8(if refuse {
            InvalidUtf8Policy::Refuse
        } else {
            InvalidUtf8Policy::Repair
        });
    let one_shot = run_framer(&config, input, &[]);
    let chunked = run_framer(&config, input, &cuts);
    assert_eq!(one_shot, chunked, "G4: chunking changed the events");
    let (zeroed, take) = (cuts.len().is_multiple_of(2), cuts.len().is_multiple_of(3));
    assert_eq!(
        one_shot,
        run_framer_reads(&config, input, &cuts, zeroed, take),
        "G4: reads into the room changed the events"
    );
    let bytewise: Vec<usize> = (1..input.len().min(512)).collect();
    if input.len() <= 512 {
        assert_eq!(
            one_shot,
            run_framer(&config, input, &bytewise),
            "G4: byte-wise"
        );
    }
    for ev in &one_shot {
        match ev {
            Owned::Frame(f) | Owned::Repaired(f) => {
                assert!(f.len() <= max_frame, "G2: frame over the limit handed out");
                assert!(!f.is_empty() && !f.contains('\n'));
            }
            Owned::Error(FrameError::InvalidUtf8 {
                len, valid_up_to, ..
            }) => {
                assert!(valid_up_to < len, "an invalid frame has an invalid byte");
            }
            Owned::Error(_) => {}
        }
        if refuse {
            assert!(!matches!(ev, Owned::Repaired(_)), "Refuse never repairs");
        }
    }
}

/// Message decoding: never panics; whatever decodes re-encodes to one line
/// that decodes to the same envelope.
pub fn fuzz_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Decoding a frame taken whole agrees with decoding it borrowed, and a
    // failure gives the frame back unchanged.
    let owned = Message::decode_owned(text.to_owned());
    let Ok(msg) = Message::decode(text) else {
        let (_, back) = owned.expect_err("decode_owned agrees with decode");
        assert_eq!(back, text);
        return;
    };
    let owned = owned.expect("decode_owned agrees with decode");
    assert_eq!(format!("{msg:?}"), format!("{owned:?}"));
    let bytes = msg.encode(usize::MAX).expect("no limit");
    assert_eq!(bytes.last(), Some(&b'\n'));
    assert!(memchr::memchr(b'\n', &bytes[..bytes.len() - 1]).is_none());
    let again = std::str::from_utf8(&bytes[..bytes.len() - 1]).expect("encoder writes UTF-8");
    let back = Message::decode(again).expect("re-encoded message decodes");
    assert_eq!(msg.id(), back.id());
    match (&msg, &back) {
        (Message::Request(a), Message::Request(b)) => assert_eq!(a.method, b.method),
        (Message::Notification(a), Message::Notification(b)) => assert_eq!(a.method, b.method),
        (Message::Response(a), Message::Response(b)) => {
            assert_eq!(a.result.is_ok(), b.result.is_ok())
        }
        _ => panic!("shape changed on re-encode"),
    }
    // A limit one byte short of the encoding is refused, never exceeded.
    let body = bytes.len() - 1;
    if body > 0 {
        assert!(msg.encode(body - 1).is_err());
    }
}

#[derive(Arbitrary, Debug)]
enum PairOp {
    Request {
        method: u8,
        timeout_ms: Option<u16>,
        size: u16,
    },
    Cancel {
        nth: u8,
    },
    Advance {
        ms: u16,
    },
    Deliver {
        c2s: u16,
        s2c: u16,
    },
    Respond {
        nth: u8,
        size: u16,
    },
    RespondError {
        nth: u8,
    },
    HandlerEnded {
        nth: u8,
    },
    ServerNotify {
        size: u16,
    },
    InjectToClient(Vec<u8>),
    InjectToServer(Vec<u8>),
    TakeIncoming,
    ClientEof,
    ServerEof,
}

const METHODS: [&str; 4] = ["initialize", "tools/call", "ping", "resources/read"];

/// A client and a server under arbitrary operations: the bounds hold
/// (pending ≤ `max_in_flight`, inbox ≤ capacity, in flight ≤
/// `max_concurrent`) and nothing panics.
pub fn fuzz_session_pair(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let max_in_flight = u.int_in_range(1..=8usize).unwrap_or(4);
    let inbox = u.int_in_range(0..=4usize).unwrap_or(2);
    let max_concurrent = u.int_in_range(1..=8usize).unwrap_or(4);
    let cmax = u.int_in_range(MIN_MAX_FRAME..=2048usize).unwrap_or(512);
    let smax = u.int_in_range(MIN_MAX_FRAME..=2048usize).unwrap_or(512);
    let close_on_overload = u.arbitrary::<bool>().unwrap_or(false);
    let mut ccfg = ClientConfig::default();
    ccfg.max_in_flight(max_in_flight)
        .inbox_capacity(inbox)
        .max_outgoing_bytes(4096)
        .control_reserve_bytes(512)
        .max_cancelled_remembered(4)
        .overload_policy(if close_on_overload {
            OverloadPolicy::CloseSession
        } else {
            OverloadPolicy::RejectRequests
        });
    let mut scfg = ServerConfig::default();
    scfg.max_concurrent(max_concurrent)
        .max_outgoing_bytes(4096)
        .max_queued_notifications(4)
        .max_finished_remembered(4);
    let mut cframer = FramerConfig::default();
    cframer.max_frame(cmax);
    let mut sframer = FramerConfig::default();
    sframer.max_frame(smax);
    let mut client = ClientSession::new(ccfg, cframer);
    let mut server = ServerSession::new(scfg, sframer);
    let start = Instant::now();
    let mut now = start;
    let mut c2s: VecDeque<u8> = VecDeque::new();
    let mut s2c: VecDeque<u8> = VecDeque::new();
    let mut client_ids: Vec<Id> = Vec::new();
    let mut server_reqs: Vec<Id> = Vec::new();
    let mut completed: std::collections::HashSet<Id> = std::collections::HashSet::new();

    for _ in 0..256 {
        let Ok(op) = u.arbitrary::<PairOp>() else {
            break;
        };
        match op {
            PairOp::Request {
                method,
                timeout_ms,
                size,
            } => {
                let m = METHODS[method as usize % METHODS.len()];
                let params = crate::wire::message::to_raw(&"p".repeat(size as usize % 4096))
                    .expect("a string serializes");
                let timeout = timeout_ms.map(|ms| Duration::from_millis(ms.into()));
                if let Ok(id) = client.request(now, m, Some(&params), timeout) {
                    client_ids.push(id);
                }
            }
            PairOp::Cancel { nth } => {
                if !client_ids.is_empty() {
                    let id = client_ids[nth as usize % client_ids.len()].clone();
                    let _ = client.cancel(&id, Some("fuzz"));
                }
            }
            PairOp::Advance { ms } => {
                now += Duration::from_millis(ms.into());
                client.handle_timeout(now);
            }
            PairOp::Deliver { c2s: a, s2c: b } => {
                let n = (a as usize).min(c2s.len());
                let chunk: Vec<u8> = c2s.drain(..n).collect();
                server.handle_stdin(now, &chunk);
                let n = (b as usize).min(s2c.len());
                let chunk: Vec<u8> = s2c.drain(..n).collect();
                client.handle_stdout(now, &chunk);
            }
            PairOp::Respond { nth, size } => {
                if !server_reqs.is_empty() {
                    let id = server_reqs[nth as usize % server_reqs.len()].clone();
                    let v = crate::wire::message::to_raw(&"r".repeat(size as usize % 4096))
                        .expect("a string serializes");
                    let _ = server.respond(&id, Ok(&v));
                }
            }
            PairOp::RespondError { nth } => {
                if !server_reqs.is_empty() {
                    let id = server_reqs[nth as usize % server_reqs.len()].clone();
                    let _ = server.respond(&id, Err(&ErrorObject::new(-1, "fuzz")));
                }
            }
            PairOp::HandlerEnded { nth } => {
                if !server_reqs.is_empty() {
                    let id = server_reqs[nth as usize % server_reqs.len()].clone();
                    server.handler_ended(&id);
                }
            }
            PairOp::ServerNotify { size } => {
                let v = crate::wire::message::to_raw(&"n".repeat(size as usize % 4096))
                    .expect("a string serializes");
                let _ = server.notify("notifications/progress", Some(&v));
            }
            PairOp::InjectToClient(bytes) => client.handle_stdout(now, &bytes),
            PairOp::InjectToServer(bytes) => server.handle_stdin(now, &bytes),
            PairOp::TakeIncoming => {
                if let Some(Incoming::Request(r)) = client.poll_incoming(now) {
                    let _ = client.respond(&r.id, Ok(RawValue::NULL));
                }
            }
            PairOp::ClientEof => client.handle_stdout_eof(now),
            PairOp::ServerEof => server.handle_stdin_eof(now),
        }
        // Poll everything, as an adapter would.
        while let Some(b) = client.poll_transmit() {
            assert!(b.len() <= cmax + 1, "client wrote past its wire limit");
            c2s.extend(b);
        }
        while let Some(ev) = client.poll_event() {
            if let ClientEvent::Completed { id, .. } = ev {
                assert!(completed.insert(id), "a request completed twice");
            }
        }
        while let Some(ev) = server.poll_event() {
            if let ServerEvent::Request(r) = ev {
                server_reqs.push(r.id);
            }
        }
        while let Some(b) = server.poll_transmit() {
            assert!(b.len() <= smax + 1, "server wrote past its wire limit");
            s2c.extend(b);
        }
        assert!(client.pending_len() <= max_in_flight);
        assert!(client.inbox_len() <= inbox);
        assert!(server.in_flight() <= max_concurrent);
        if let Some(t) = client.poll_timeout() {
            assert!(t >= start);
        }
        // Keep the simulated pipes bounded so a long run stays cheap.
        if c2s.len() > 1 << 20 {
            c2s.clear();
        }
        if s2c.len() > 1 << 20 {
            s2c.clear();
        }
    }
}

/// Id scan: for any bytes cut into any chunks, the streaming scan of a whole
/// frame finds the top-level id a full `serde_json` parse finds, and never an
/// id in a text that is not one JSON object (G3, G4); the framer reports the
/// same outcome at the end of that frame when it is oversized.
pub fn fuzz_id_scan(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let max_id = u.int_in_range(0..=48usize).unwrap_or(16);
    let count = u.int_in_range(0..=6usize).unwrap_or(0);
    let mut cuts: Vec<usize> = (0..count)
        .map(|_| usize::from(u.arbitrary::<u16>().unwrap_or(0)))
        .collect();
    cuts.sort_unstable();
    let frame = u.take_rest();
    crate::wire::id_scan::check_against_parse(frame, &cuts, max_id);
    if frame.is_empty() || frame.contains(&b'\n') || max_id == 0 {
        return;
    }
    let mut whole = crate::wire::id_scan::IdScanner::new(max_id);
    whole.push(frame);
    let want = whole.finish();
    // The framer's side needs a frame past a wire limit, which is at least
    // `MIN_MAX_FRAME`: shorter frames are checked against the parse alone.
    let max_frame = (frame.len() / 2).max(MIN_MAX_FRAME);
    if frame.len() <= max_frame {
        return;
    }
    let mut config = FramerConfig::default();
    config.max_frame(max_frame).id_scan_limit(max_id);
    let mut framer = Framer::new(config);
    let mut ended = Vec::new();
    let mut on_event = |ev: FrameEvent<'_>| {
        if let FrameEvent::Error(FrameError::OversizedEnded { recovered, .. }) = ev {
            ended.push(recovered);
        }
    };
    let mut start = 0;
    for &cut in &cuts {
        let end = cut.clamp(start, frame.len());
        framer.push(&frame[start..end], &mut on_event);
        start = end;
    }
    framer.push(&frame[start..], &mut on_event);
    framer.push(b"\n", &mut on_event);
    assert_eq!(
        ended,
        [want],
        "framer's whole-line scan differs from one pass"
    );
}
