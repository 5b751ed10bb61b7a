//! Malformed input, thrown at every entry point that takes bytes from a peer.
//!
//! Policy: a panic here is a bug in the core, never "bad input". Bad input
//! gets a typed error or a counter, and the session keeps working: after
//! each barrage a well-formed request/response still completes.

use std::time::Instant;

use mcp_stdio_core::{ClientConfig, ClientEvent, ClientSession};
use mcp_stdio_core::{FramerConfig, Message, RawValue};
use mcp_stdio_core::{ServerConfig, ServerEvent, ServerSession};
use proptest::prelude::*;

/// Fragments that stress the framer, the id scanner and the decoder.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"\"id\":".to_vec()),
        Just(b"{\"jsonrpc\":\"2.0\",".to_vec()),
        Just(b"\"result\":{}".to_vec()),
        Just(b"\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}".to_vec()),
        Just(b"\"error\":{\"code\":1,\"message\":\"m\"}".to_vec()),
        Just("é€😀".as_bytes().to_vec()),
        Just(vec![0xff, 0xfe, 0xc3]),
        Just(vec![0]),
        Just(b"1".repeat(40)),
        Just(b"x".repeat(300)),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

fn junk() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    (
        proptest::collection::vec(fragment(), 0..64).prop_map(|v| v.concat()),
        proptest::collection::vec(1usize..64, 0..16),
    )
}

fn chunks<'a>(data: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    for &n in sizes {
        let n = n.min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out.push(rest);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn client_survives_any_stdout((data, sizes) in junk()) {
        let mut cfg = ClientConfig::default();
        cfg.inbox_capacity(4);
        let mut framer = FramerConfig::default();
        framer.max_frame(128);
        let mut c = ClientSession::new(cfg, framer);
        let now = Instant::now();
        let before = c.request(now, "before", None, None).expect("fresh session");
        for chunk in chunks(&data, &sizes) {
            c.handle_stdout(now, chunk);
            while c.poll_transmit().is_some() {}
            while c.poll_event().is_some() {}
            while c.poll_incoming(now).is_some() {}
            prop_assert!(c.inbox_len() <= 4);
        }
        // End the junk with a newline, then a real response still completes,
        // unless the junk itself closed the session (oversized-close is off,
        // so only a response can have completed `before`).
        c.handle_stdout(now, b"\n");
        while c.poll_event().is_some() {}
        if let Ok(id) = c.request(now, "after", None, None) {
            let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}}}}\n");
            c.handle_stdout(now, line.as_bytes());
            let mut ok = false;
            while let Some(ev) = c.poll_event() {
                if let ClientEvent::Completed { id: got, outcome } = ev {
                    ok |= got == id && outcome.is_ok();
                }
            }
            prop_assert!(ok, "a valid response after junk did not complete");
        }
        let _ = before;
    }

    #[test]
    fn server_survives_any_stdin((data, sizes) in junk()) {
        let mut cfg = ServerConfig::default();
        cfg.max_concurrent(4);
        let mut framer = FramerConfig::default();
        framer.max_frame(128);
        let mut s = ServerSession::new(cfg, framer);
        let now = Instant::now();
        for chunk in chunks(&data, &sizes) {
            s.handle_stdin(now, chunk);
            while let Some(ev) = s.poll_event() {
                if let ServerEvent::Request(r) = ev {
                    let _ = s.respond(&r.id, Ok(RawValue::NULL));
                }
            }
            while let Some(b) = s.poll_transmit() {
                prop_assert!(b.len() <= 129);
                prop_assert_eq!(memchr::memchr(b'\n', &b), Some(b.len() - 1));
            }
            prop_assert!(s.in_flight() <= 4);
        }
        // A valid request after the junk (and a newline) is still served.
        s.handle_stdin(now, b"\n{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"ping\"}\n");
        let mut saw = false;
        while let Some(ev) = s.poll_event() {
            if let ServerEvent::Request(r) = ev {
                saw |= r.method == "ping";
                let _ = s.respond(&r.id, Ok(RawValue::NULL));
            }
        }
        prop_assert!(saw || s.input_closed());
    }

    #[test]
    fn decoder_never_panics(data in proptest::collection::vec(fragment(), 0..32)) {
        if let Ok(text) = std::str::from_utf8(&data.concat()) {
            let _ = Message::decode(text);
        }
    }
}
