use super::*;
use std::io::{Error, ErrorKind};

fn served(port: &mut StatusPort, now: Instant) -> StatusConn {
    match port.admit(now, Ok(1000), 1000) {
        Admission::Served(id) => id,
        other => panic!("{other:?}"),
    }
}

fn read(port: &mut StatusPort, id: StatusConn, bytes: &[u8]) {
    port.handle_read(id, Ok(bytes.len()), bytes);
}

/// Everything the port gives now, as owned values.
fn drain(port: &mut StatusPort) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(o) = port.poll_output() {
        let (text, written) = match o {
            StatusOutput::Request(id, r) => (format!("request {} {r:?}", id.0), None),
            StatusOutput::Write(id, b) => (
                format!("write {} {}", id.0, String::from_utf8_lossy(b).trim_end()),
                Some((id, b.len())),
            ),
            StatusOutput::Close(id) => (format!("close {}", id.0), None),
        };
        out.push(text);
        if let Some((id, n)) = written {
            port.handle_written(id, Ok(n));
        }
    }
    out
}

#[test]
fn f3_a_request_is_answered_once_then_closed() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let id = served(&mut port, t);
    read(&mut port, id, b"{\"request\":");
    assert!(drain(&mut port).is_empty(), "half a line asks nothing");
    read(&mut port, id, b"\"status\"}\ntrailing");
    assert_eq!(drain(&mut port), ["request 0 Status"]);
    port.reply(id, b"{\"schema\":1}".to_vec());
    assert_eq!(drain(&mut port), ["write 0 {\"schema\":1}", "close 0"]);
    assert_eq!(port.clients(), 0);
    assert_eq!(port.counters().answered, 1);
}

#[test]
fn f3_logs_asks_for_at_most_the_cap() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let id = served(&mut port, t);
    read(
        &mut port,
        id,
        b"{\"request\":\"logs\",\"bytes\":99999999999}\n",
    );
    assert_eq!(
        drain(&mut port),
        [format!(
            "request 0 Logs {{ bytes: {MAX_STATUS_LOG_BYTES}, follow: false }}"
        )]
    );
    let id = served(&mut port, t);
    read(&mut port, id, b"{\"request\":\"logs\"}\r\n");
    assert_eq!(
        drain(&mut port),
        [format!(
            "request 1 Logs {{ bytes: {MAX_STATUS_LOG_BYTES}, follow: false }}"
        )]
    );
}

/// Bad input gets a typed error answer and the connection closes; the port
/// serves the next client.
#[test]
fn f3_a_bad_request_gets_an_error_and_a_close() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    for bad in [
        &b"status\n"[..],
        b"{\"request\":\"shutdown\"}\n",
        b"{\"request\":\"status\",\"bytes\":5}\n",
        b"{\"request\":\"status\",\"x\":1}\n",
        b"\xff\xfe\n",
    ] {
        let id = served(&mut port, t);
        read(&mut port, id, bad);
        let out = drain(&mut port);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].contains("\"error\""), "{out:?}");
        assert!(out[1].starts_with("close"), "{out:?}");
    }
    assert_eq!(port.counters().bad_requests, 5);
    assert_eq!(port.clients(), 0);
}

/// G1: a request line is bounded; one longer is refused without keeping it.
#[test]
fn g1_a_request_longer_than_its_limit_is_refused() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let id = served(&mut port, t);
    let long = vec![b' '; MAX_STATUS_REQUEST];
    read(&mut port, id, &long);
    let out = drain(&mut port);
    assert!(out[0].contains("longer than 1024 bytes"), "{out:?}");
    assert!(out[1].starts_with("close"), "{out:?}");
}

/// G1: a bounded number of clients; one more is refused at once, and a
/// peer of another uid (or one whose uid could not be read) never is served.
#[test]
fn g1_clients_are_bounded_and_only_the_same_uid_is_served() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    for _ in 0..MAX_STATUS_CLIENTS {
        served(&mut port, t);
    }
    assert_eq!(port.admit(t, Ok(1000), 1000), Admission::Refused("full"));
    assert_eq!(port.admit(t, Ok(0), 1000), Admission::Refused("other_user"));
    assert_eq!(
        port.admit(t, Err(Error::from(ErrorKind::Unsupported)), 1000),
        Admission::Refused("other_user")
    );
    let c = port.counters();
    assert_eq!((c.refused_full, c.refused_other_user), (1, 2));
}

/// G1: a client that does not read its answer (or sends nothing) is dropped
/// at its deadline; the port never waits for it.
#[test]
fn g1_a_client_that_does_not_read_is_dropped_at_its_deadline() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let slow = served(&mut port, t);
    let silent = served(&mut port, t);
    read(&mut port, slow, b"{\"request\":\"status\"}\n");
    assert_eq!(drain_requests(&mut port), [slow]);
    port.reply(slow, vec![b'x'; 100_000]);
    // The socket takes 4 KiB, then nothing.
    match port.poll_output() {
        Some(StatusOutput::Write(id, b)) => {
            assert_eq!((id, b.len()), (slow, 100_001));
        }
        other => panic!("{other:?}"),
    }
    port.handle_written(slow, Ok(4096));
    match port.poll_output() {
        Some(StatusOutput::Write(_, b)) => assert_eq!(b.len(), 100_001 - 4096),
        other => panic!("{other:?}"),
    }
    port.handle_written(slow, Err(ErrorKind::WouldBlock.into()));
    assert_eq!(port.poll_output(), None, "parked until writable");
    assert_eq!(port.poll_timeout(), Some(t + STATUS_CLIENT_DEADLINE));
    port.handle_timeout(t + STATUS_CLIENT_DEADLINE - Duration::from_millis(1));
    assert_eq!(port.clients(), 2);
    port.handle_timeout(t + STATUS_CLIENT_DEADLINE);
    let mut closed = drain(&mut port);
    closed.sort();
    assert_eq!(closed, ["close 0", "close 1"]);
    assert_eq!(port.counters().dropped, 2);
    assert_eq!(port.poll_timeout(), None);
    let _ = silent;
}

fn drain_requests(port: &mut StatusPort) -> Vec<StatusConn> {
    let mut ids = Vec::new();
    while let Some(StatusOutput::Request(id, _)) = port.poll_output() {
        ids.push(id);
    }
    ids
}

/// An answer over its limit becomes an error; an EOF or a failed read
/// before the request ends the connection; an interrupted read does not.
#[test]
fn f3_limits_and_failures() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let id = served(&mut port, t);
    read(&mut port, id, b"{\"request\":\"status\"}\n");
    drain_requests(&mut port);
    port.reply(id, vec![b'x'; MAX_STATUS_REPLY]);
    let out = drain(&mut port);
    assert!(out[0].contains("larger than its limit"), "{out:?}");

    let id = served(&mut port, t);
    port.handle_read(id, Err(ErrorKind::Interrupted.into()), &[]);
    assert!(port.wants_read(id));
    port.handle_read(id, Ok(0), &[]);
    assert_eq!(drain(&mut port), [format!("close {}", id.0)]);

    let id = served(&mut port, t);
    port.handle_read(id, Err(ErrorKind::ConnectionReset.into()), &[]);
    assert_eq!(drain(&mut port), [format!("close {}", id.0)]);
    // Inputs for a closed connection are ignored.
    port.handle_read(id, Ok(3), b"abc");
    port.reply(id, b"{}".to_vec());
    port.handle_written(id, Ok(2));
    assert!(drain(&mut port).is_empty());
}

/// `logs -f`: the answer, then the lines as they come, until the client
/// closes; nothing is owed to a client that has not asked to follow.
#[test]
fn f3_a_follower_gets_the_lines_as_they_come() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let once = served(&mut port, t);
    let id = served(&mut port, t);
    read(
        &mut port,
        id,
        b"{\"request\":\"logs\",\"bytes\":10,\"follow\":true}\n",
    );
    assert_eq!(
        drain(&mut port),
        [format!(
            "request {} Logs {{ bytes: 10, follow: true }}",
            id.0
        )]
    );
    assert_eq!(port.followers(), 0, "not before its answer");
    port.reply(id, b"{\"stderr\":\"tail\"}".to_vec());
    assert_eq!(port.followers(), 1);
    assert_eq!(
        drain(&mut port),
        [format!("write {} {{\"stderr\":\"tail\"}}", id.0)]
    );
    port.follow(b"line one\n");
    port.follow(b"line two\n");
    assert_eq!(
        drain(&mut port),
        [format!("write {} line one\nline two", id.0)]
    );
    assert!(port.wants_read(id), "read for its end");
    assert!(!port.wants_read(StatusConn(99)));
    // No deadline for a follower; the other client still has its own.
    assert_eq!(port.poll_timeout(), Some(t + STATUS_CLIENT_DEADLINE));
    port.handle_timeout(t + STATUS_CLIENT_DEADLINE * 10);
    let closed = drain(&mut port);
    assert_eq!(closed, [format!("close {}", once.0)]);
    assert_eq!(port.followers(), 1);
    port.handle_read(id, Ok(0), &[]);
    assert_eq!(drain(&mut port), [format!("close {}", id.0)]);
    assert_eq!(port.followers(), 0);
    assert_eq!(port.counters().answered, 1);
}

/// G1: a follower that does not read is dropped once it falls
/// `MAX_FOLLOW_BUFFER` behind; the lines never wait for it.
#[test]
fn g1_a_follower_that_falls_behind_is_dropped() {
    let t = Instant::now();
    let mut port = StatusPort::new();
    let id = served(&mut port, t);
    read(&mut port, id, b"{\"request\":\"logs\",\"follow\":true}\n");
    drain_requests(&mut port);
    port.reply(id, b"{}".to_vec());
    port.handle_written(id, Err(ErrorKind::WouldBlock.into()));
    let line = vec![b'l'; 1000];
    let mut fed = 0;
    while port.followers() == 1 {
        port.follow(&line);
        fed += 1;
        assert!(fed < 1000, "never dropped");
    }
    assert_eq!(fed, MAX_FOLLOW_BUFFER / 1000 + 1);
    assert_eq!(port.counters().dropped_behind, 1);
    assert_eq!(drain(&mut port), [format!("close {}", id.0)]);
}

/// The fuzz harness's invariants over random inputs (the campaign runs it
/// for longer: `fuzz/campaign 60 status_port`).
#[test]
fn fuzz_status_port_random_inputs() {
    crate::fuzzing::run_random_inputs(0x5EED_57A7, 2000, 1024, crate::fuzzing::fuzz_status_port);
}
