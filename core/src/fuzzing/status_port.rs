//! The fuzz harness of `status` (the guard's status port, F3): arbitrary
//! clients (any uid), bytes, replies, write results, lines to follow and
//! time, in any order. Invariants: at most [`MAX_STATUS_CLIENTS`] served;
//! a connection is closed at most once and nothing is offered for it
//! after; an offered write is never longer than an answer or a follower's
//! bound allows; requests are given once per connection, and only for
//! a connection that sent a whole line; every client but a follower is
//! gone by its deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};

use crate::status::{
    Admission, StatusConn, StatusOutput, StatusPort, StatusRequest, MAX_FOLLOW_BUFFER,
    MAX_STATUS_CLIENTS, MAX_STATUS_REPLY, STATUS_CLIENT_DEADLINE,
};

/// Fuzz entry point; panics on a violated invariant.
pub fn fuzz_status_port(data: &[u8]) {
    run(data);
}

#[derive(Arbitrary, Debug)]
enum Op {
    Admit { same_uid: bool, uid_error: bool },
    Read { conn: u8, bytes: Vec<u8> },
    ReadRequest { conn: u8, which: u8 },
    ReadEof { conn: u8 },
    ReadError { conn: u8, kind: u8 },
    Reply { conn: u8, len: u16 },
    Written { conn: u8, n: u16 },
    WriteError { conn: u8, kind: u8 },
    Writable { conn: u8 },
    Follow { len: u16 },
    Advance { ms: u16 },
}

fn kind(k: u8) -> ErrorKind {
    match k % 5 {
        0 => ErrorKind::WouldBlock,
        1 => ErrorKind::Interrupted,
        2 => ErrorKind::BrokenPipe,
        3 => ErrorKind::ConnectionReset,
        _ => ErrorKind::Other,
    }
}

const REQUESTS: [&[u8]; 5] = [
    b"{\"request\":\"status\"}\n",
    b"{\"request\":\"logs\",\"bytes\":100}\n",
    b"{\"request\":\"logs\",\"follow\":true}\n",
    b"{\"request\":\"nope\"}\n",
    b"\n",
];

pub(super) fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut port = StatusPort::new();
    let mut now = Instant::now();
    let mut open: Vec<StatusConn> = Vec::new();
    let mut closed: BTreeSet<StatusConn> = BTreeSet::new();
    let mut asked: BTreeSet<StatusConn> = BTreeSet::new();
    let mut admitted_at: BTreeMap<StatusConn, Instant> = BTreeMap::new();
    let mut following: BTreeSet<StatusConn> = BTreeSet::new();
    let pick = |open: &[StatusConn], i: u8| -> StatusConn {
        open.get(usize::from(i) % open.len().max(1))
            .copied()
            .unwrap_or(StatusConn::for_fuzzing(u64::from(i)))
    };
    for _ in 0..256 {
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        match op {
            Op::Admit {
                same_uid,
                uid_error,
            } => {
                let uid = if uid_error {
                    Err(ErrorKind::Unsupported.into())
                } else {
                    Ok(if same_uid { 1000 } else { 0 })
                };
                let full = port.clients() >= MAX_STATUS_CLIENTS;
                match port.admit(now, uid, 1000) {
                    Admission::Served(id) => {
                        assert!(same_uid && !uid_error && !full);
                        open.push(id);
                        admitted_at.insert(id, now);
                    }
                    Admission::Refused(_) => assert!(!same_uid || uid_error || full),
                }
            }
            Op::Read { conn, bytes } => {
                let id = pick(&open, conn);
                port.handle_read(id, Ok(bytes.len()), &bytes);
            }
            Op::ReadRequest { conn, which } => {
                let id = pick(&open, conn);
                let r = REQUESTS[usize::from(which) % REQUESTS.len()];
                port.handle_read(id, Ok(r.len()), r);
            }
            Op::ReadEof { conn } => port.handle_read(pick(&open, conn), Ok(0), &[]),
            Op::ReadError { conn, kind: k } => {
                port.handle_read(pick(&open, conn), Err(kind(k).into()), &[]);
            }
            Op::Reply { conn, len } => {
                port.reply(pick(&open, conn), vec![b'a'; usize::from(len)]);
            }
            Op::Written { conn, n } => {
                port.handle_written(pick(&open, conn), Ok(usize::from(n)));
            }
            Op::WriteError { conn, kind: k } => {
                port.handle_written(pick(&open, conn), Err(kind(k).into()));
            }
            Op::Writable { conn } => port.handle_writable(pick(&open, conn)),
            Op::Follow { len } => port.follow(&vec![b'l'; usize::from(len)]),
            Op::Advance { ms } => {
                now += Duration::from_millis(u64::from(ms));
                if port.poll_timeout().is_some_and(|t| t <= now) {
                    port.handle_timeout(now);
                }
            }
        }
        while let Some(out) = port.poll_output() {
            match out {
                StatusOutput::Request(id, request) => {
                    assert!(!closed.contains(&id), "a request for a closed {id:?}");
                    assert!(asked.insert(id), "two requests for {id:?}");
                    if let StatusRequest::Logs { follow: true, .. } = request {
                        following.insert(id);
                    }
                }
                StatusOutput::Write(id, bytes) => {
                    assert!(!closed.contains(&id), "a write for a closed {id:?}");
                    assert!(!bytes.is_empty());
                    assert!(bytes.len() <= MAX_STATUS_REPLY + MAX_FOLLOW_BUFFER);
                    // The socket takes nothing now: it parks until writable.
                    port.handle_written(id, Err(ErrorKind::WouldBlock.into()));
                    break;
                }
                StatusOutput::Close(id) => {
                    assert!(closed.insert(id), "{id:?} closed twice");
                    open.retain(|c| *c != id);
                }
            }
        }
        assert!(port.clients() <= MAX_STATUS_CLIENTS);
        // Past its deadline, only a follower is still served.
        for (id, at) in &admitted_at {
            if open.contains(id)
                && now >= *at + STATUS_CLIENT_DEADLINE
                && port.poll_timeout().is_none_or(|t| t > now)
            {
                assert!(following.contains(id), "{id:?} outlived its deadline");
            }
        }
    }
}
