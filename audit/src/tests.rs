use super::*;
use serde_json::json;
use std::time::Instant as TestClock;

const KEY_BYTES: &[u8] = b"audit-key-for-tests-0123456789";

fn key() -> AuditKey {
    AuditKey::new(KEY_BYTES).expect("non-empty")
}

fn other_key(bytes: &[u8]) -> AuditKey {
    AuditKey::new(bytes).expect("non-empty")
}

fn record(i: usize) -> serde_json::Value {
    json!({"call_id": format!("c_{i:04}"), "state": "completed", "n": i})
}

fn build(n: usize, key: Option<&AuditKey>) -> Vec<u8> {
    let mut chain = match key {
        Some(k) => AuditChain::with_key(k.clone()),
        None => AuditChain::new(),
    };
    let mut log = Vec::new();
    for i in 0..n {
        log.extend(chain.append(record(i)).expect("append"));
    }
    log
}

/// A session: its start, `n` records, its seal.
fn build_sealed(n: usize, key: Option<&AuditKey>) -> Vec<u8> {
    let mut chain = match key {
        Some(k) => AuditChain::with_key(k.clone()),
        None => AuditChain::new(),
    };
    let mut log = chain.begin_session("s-1").expect("start");
    for i in 0..n {
        log.extend(chain.append(record(i)).expect("append"));
    }
    log.extend(chain.seal().expect("seal"));
    log
}

fn lines(log: &[u8]) -> Vec<&[u8]> {
    log.split_inclusive(|&b| b == b'\n').collect()
}

#[test]
fn audit_line_shape_and_hash_definition() {
    let mut chain = AuditChain::new();
    let line = chain.append(json!({"a": 1, "b": "x"})).expect("append");
    let record = br#"{"a":1,"b":"x"}"#;
    let mut h = Sha256::new();
    Digest::update(&mut h, [0u8; 32]);
    Digest::update(&mut h, record);
    let mut want = [0u8; 32];
    want.copy_from_slice(&h.finalize());
    let expected = format!(
        "{{\"seq\":1,\"alg\":\"sha256\",\"prev\":\"{GENESIS_PREV}\",\"record\":{{\"a\":1,\"b\":\"x\"}},\"hash\":\"{}\"}}\n",
        hex32(&want)
    );
    assert_eq!(String::from_utf8(line).expect("utf8"), expected);
    assert_eq!(chain.last_hash(), hex32(&want));
    assert_eq!(chain.next_seq(), 2);
}

#[test]
fn audit_keyed_line_uses_hmac_and_kid() {
    let mut chain = AuditChain::with_key(key());
    let line = chain.append(json!([1, 2])).expect("append");
    let mut m = HmacSha256::new_from_slice(KEY_BYTES).expect("any length");
    m.update(&[0u8; 32]);
    m.update(b"[1,2]");
    let mut want = [0u8; 32];
    want.copy_from_slice(&m.finalize().into_bytes());
    let mut k = HmacSha256::new_from_slice(KEY_BYTES).expect("any length");
    k.update(KEY_ID_LABEL);
    let kid = hex32(&{
        let mut a = [0u8; 32];
        a.copy_from_slice(&k.finalize().into_bytes());
        a
    })[..16]
        .to_owned();
    let expected = format!(
        "{{\"seq\":1,\"alg\":\"hmac-sha256\",\"kid\":\"{kid}\",\"prev\":\"{GENESIS_PREV}\",\"record\":[1,2],\"hash\":\"{}\"}}\n",
        hex32(&want)
    );
    assert_eq!(String::from_utf8(line).expect("utf8"), expected);
    assert!(!format!("{chain:?}").contains("audit-key"));
}

#[test]
fn audit_valid_log_verifies() {
    let log = build(100, None);
    let summary = verify(&log, None).expect("valid");
    assert_eq!(summary.entries, 100);
    assert_eq!(summary.alg, Alg::Sha256);
    let keyed = build(100, Some(&key()));
    assert_eq!(verify(&keyed, Some(&key())).expect("valid").entries, 100);
    let empty = verify(b"", None).expect("empty log");
    assert_eq!(empty.entries, 0);
    assert_eq!(empty.last_hash, GENESIS_PREV);
    assert!(!empty.is_sealed(), "an empty log has no seal");
    assert!(!summary.is_sealed(), "a log without a seal is not sealed");
}

#[test]
fn audit_chunking_does_not_matter() {
    let log = build(20, Some(&key()));
    let whole = verify(&log, Some(&key())).expect("valid");
    for size in [1, 2, 3, 7, 64, 199, 4096] {
        let mut v = AuditVerifier::new(Some(&key()));
        for chunk in log.chunks(size) {
            v.push(chunk).expect("valid");
        }
        assert_eq!(v.finish().expect("valid"), whole, "chunk size {size}");
    }
}

/// The line (1-based) holding byte `pos`.
fn line_of(log: &[u8], pos: usize) -> u64 {
    1 + log[..pos].iter().filter(|&&b| b == b'\n').count() as u64
}

/// Every single-byte flip (XOR 0x01) anywhere in an `n`-entry log is
/// reported, at the line that holds the flipped byte.
///
/// A flip in line k leaves lines 1..k-1 byte-identical, so verification
/// resumes from a snapshot of the streaming verifier taken at the start of
/// line k and feeds everything from there to the end, then `finish`: the
/// same work a whole-log `verify` does after the prefix (cross-checked
/// against a full `verify` every 37th position). This keeps the ~23 000
/// verifications fast in debug builds.
fn every_flip_detected(key: Option<&AuditKey>, n: usize) {
    let log = build_sealed(n, key);
    let original = verify(&log, key).expect("valid");
    assert!(original.is_sealed());
    let mut snapshots = Vec::new();
    let mut v = AuditVerifier::new(key);
    let mut start = 0;
    for l in lines(&log) {
        snapshots.push((v.clone(), start));
        v.push(l).expect("valid");
        start += l.len();
    }
    let started = TestClock::now();
    let mut copy = log.clone();
    for pos in 0..log.len() {
        let line = line_of(&log, pos);
        let (snapshot, start) = &snapshots[line as usize - 1];
        copy[pos] ^= 0x01;
        let mut v = snapshot.clone();
        let result = match v.push(&copy[*start..]) {
            Err(e) => Err(e),
            Ok(()) => v.finish(),
        };
        if pos % 37 == 0 {
            assert_eq!(
                verify(&copy, key),
                result,
                "flip at {pos}: streaming vs whole"
            );
        }
        copy[pos] ^= 0x01;
        match result {
            Err(e) => assert_eq!(e.line, line, "flip at {pos}: {e}"),
            Ok(s) => panic!("flip at byte {pos} not detected: {s:?} vs {original:?}"),
        }
    }
    eprintln!(
        "{} single-byte flips of a {n}-entry log detected in {:?}",
        log.len(),
        started.elapsed()
    );
}

#[test]
fn audit_every_byte_flip_is_detected() {
    every_flip_detected(None, 100);
}

#[test]
fn audit_every_byte_flip_is_detected_keyed() {
    every_flip_detected(Some(&key()), 100);
}

#[test]
fn audit_deleting_any_line_is_detected() {
    let log = build(100, None);
    let original = verify(&log, None).expect("valid");
    let ls = lines(&log);
    for k in 0..ls.len() {
        let cut: Vec<u8> = ls
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != k)
            .flat_map(|(_, l)| l.iter().copied())
            .collect();
        match verify(&cut, None) {
            Err(e) => {
                assert_eq!(e.line, k as u64 + 1);
                assert_eq!(
                    e.kind,
                    VerifyErrorKind::SequenceGap {
                        expected: k as u64 + 1,
                        found: k as u64 + 2
                    }
                );
            }
            // Only the last line's removal leaves a valid chain; the
            // summary (checked against an anchor) shows it.
            Ok(s) => {
                assert_eq!(k, ls.len() - 1);
                assert_eq!(s.entries, 99);
                assert_ne!(s.last_hash, original.last_hash);
                assert!(!s.is_sealed());
            }
        }
    }
}

#[test]
fn audit_swapping_adjacent_lines_is_detected() {
    let log = build(100, None);
    let ls = lines(&log);
    for k in 0..ls.len() - 1 {
        let mut swapped = ls.clone();
        swapped.swap(k, k + 1);
        let bytes: Vec<u8> = swapped.concat();
        let e = verify(&bytes, None).expect_err("swap detected");
        assert_eq!(e.line, k as u64 + 1);
        assert_eq!(
            e.kind,
            VerifyErrorKind::SequenceGap {
                expected: k as u64 + 1,
                found: k as u64 + 2
            }
        );
    }
}

#[test]
fn audit_cut_last_line_is_reported_as_truncated() {
    let log = build(10, None);
    let last_start = log[..log.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .expect("10 lines")
        + 1;
    // A write cut short: an intact chain of 9 entries and a partial line.
    for end in last_start + 1..log.len() {
        let s = verify(&log[..end], None).expect("a cut write");
        assert_eq!(s.entries, 9, "cut at {end}");
        assert_eq!(
            s.end,
            LogEnd::Unsealed {
                first_seq: 1,
                entries: 9,
                partial_line: true
            },
            "cut at {end}"
        );
    }
    // A partial line that is not the start of an entry is bad.
    let junk = log[..last_start].to_vec();
    for bad in [
        &b"{\"seq\":10,\"alg\":\"md5\""[..],
        b"{\"seq\":11,",
        b"{\"se ",
    ] {
        let mut junk = junk.clone();
        junk.extend_from_slice(bad);
        assert_eq!(
            verify(&junk, None).expect_err("junk"),
            VerifyError {
                line: 10,
                kind: VerifyErrorKind::NotCanonical
            }
        );
    }
    // A whole entry without its `\n` must link to the one before.
    let mut unlinked = log[..lines(&log)[0].len()].to_vec();
    unlinked.extend_from_slice(&lines(&log)[2][..lines(&log)[2].len() - 1]);
    assert_eq!(
        verify(&unlinked, None).expect_err("unlinked").kind,
        VerifyErrorKind::SequenceGap {
            expected: 2,
            found: 3
        }
    );
    // Cut JSON followed by a newline at the end of the file.
    let mut cut = log[..last_start + 30].to_vec();
    cut.push(b'\n');
    let e = verify(&cut, None).expect_err("cut");
    assert_eq!(e.kind, VerifyErrorKind::TruncatedLastLine);
    assert_eq!(e.line, 10);
    // The same cut line in the middle of the file is bad JSON.
    let mut middle = cut.clone();
    middle.extend_from_slice(lines(&log)[9]);
    let e = verify(&middle, None).expect_err("bad");
    assert_eq!(
        e,
        VerifyError {
            line: 10,
            kind: VerifyErrorKind::BadJson
        }
    );
}

#[test]
fn audit_keyed_chain_recomputed_without_key_fails() {
    let keyed = build(5, Some(&key()));
    // Recomputed as a plain chain over the same records.
    let plain = build(5, None);
    assert_eq!(
        verify(&plain, Some(&key())).expect_err("no key"),
        VerifyError {
            line: 1,
            kind: VerifyErrorKind::AlgorithmMismatch {
                expected: Alg::HmacSha256,
                found: Alg::Sha256
            }
        }
    );
    // Recomputed with another key.
    let other = build(5, Some(&other_key(b"another key")));
    assert_eq!(
        verify(&other, Some(&key())).expect_err("wrong key").kind,
        VerifyErrorKind::WrongKey
    );
    // Recomputed with another key and the right `kid` pasted in.
    let good_kid = key().kid().to_owned();
    let bad_kid = other_key(b"another key").kid().to_owned();
    let forged = String::from_utf8(other)
        .expect("utf8")
        .replace(&bad_kid, &good_kid);
    assert_eq!(
        verify(forged.as_bytes(), Some(&key())).expect_err("forged"),
        VerifyError {
            line: 1,
            kind: VerifyErrorKind::HashMismatch
        }
    );
    // A keyed log checked without the key.
    assert_eq!(
        verify(&keyed, None).expect_err("needs key").kind,
        VerifyErrorKind::AlgorithmMismatch {
            expected: Alg::Sha256,
            found: Alg::HmacSha256
        }
    );
    assert!(verify(&keyed, Some(&key())).is_ok());
}

#[test]
fn audit_empty_key_is_refused() {
    assert_eq!(AuditKey::new(b"").err(), Some(KeyError::Empty));
    assert!(AuditKey::new(b"k").is_ok());
}

#[test]
fn audit_resume_continues_the_same_chain() {
    let k = key();
    for key in [None, Some(&k)] {
        let full = build(100, key);
        let ls = lines(&full);
        let mut chain = AuditChain::resume(ls[49], key).expect("resume");
        assert_eq!(chain.next_seq(), 51);
        let mut log: Vec<u8> = ls[..50].concat();
        for i in 50..100 {
            log.extend(chain.append(record(i)).expect("append"));
        }
        assert_eq!(log, full);
        assert_eq!(verify(&log, key).expect("valid").entries, 100);
    }
    let fresh = AuditChain::resume(b"", None).expect("empty file");
    assert_eq!(fresh.next_seq(), 1);
    assert_eq!(fresh.last_hash(), GENESIS_PREV);
}

#[test]
fn audit_resume_refuses_a_bad_last_line() {
    let log = build(3, Some(&key()));
    let last = lines(&log)[2];
    assert_eq!(
        AuditChain::resume(&last[..last.len() - 1], Some(&key())).err(),
        Some(ResumeError::InvalidLine(VerifyErrorKind::TruncatedLastLine))
    );
    let mut tampered = last.to_vec();
    let at = tampered.len() - 90; // inside the record
    tampered[at] ^= 0x01;
    assert!(AuditChain::resume(&tampered, Some(&key())).is_err());
    assert_eq!(
        AuditChain::resume(last, None).err(),
        Some(ResumeError::InvalidLine(
            VerifyErrorKind::AlgorithmMismatch {
                expected: Alg::Sha256,
                found: Alg::HmacSha256
            }
        ))
    );
    assert_eq!(
        AuditChain::resume(last, Some(&other_key(b"other"))).err(),
        Some(ResumeError::InvalidLine(VerifyErrorKind::WrongKey))
    );
}

#[test]
fn audit_raw_records_are_compacted_to_one_line() {
    let raw = RawValue::from_string("{ \"a\" :\n [1, 2],\r\n \"s\": \"x y\\n\" }".to_owned())
        .expect("valid");
    let mut chain = AuditChain::new();
    let line = chain.append_raw(&raw).expect("append");
    let text = String::from_utf8(line.clone()).expect("utf8");
    assert!(
        text.contains(r#""record":{"a":[1,2],"s":"x y\n"},"#),
        "{text}"
    );
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    assert!(verify(&line, None).is_ok());
}

#[test]
fn audit_non_canonical_lines_are_refused() {
    let log = build(2, None);
    let text = String::from_utf8(log).expect("utf8");
    let spaced = text.replacen("\"seq\":1,", "\"seq\": 1,", 1);
    assert_eq!(
        verify(spaced.as_bytes(), None).expect_err("spaces").kind,
        VerifyErrorKind::NotCanonical
    );
    let crlf = text.replace('\n', "\r\n");
    assert_eq!(
        verify(crlf.as_bytes(), None).expect_err("crlf"),
        VerifyError {
            line: 1,
            kind: VerifyErrorKind::NotCanonical
        }
    );
    let blank = format!("\n{text}");
    assert_eq!(
        verify(blank.as_bytes(), None).expect_err("blank"),
        VerifyError {
            line: 1,
            kind: VerifyErrorKind::BadJson
        }
    );
}

#[test]
fn audit_line_limit_is_enforced_on_both_sides() {
    let mut chain = AuditChain::new();
    chain.max_line_bytes(300);
    let before = chain.last_hash();
    let err = chain
        .append(json!({"big": "x".repeat(400)}))
        .expect_err("too big");
    assert!(matches!(err, AppendError::TooLarge { limit: 300 }));
    assert_eq!(chain.next_seq(), 1);
    assert_eq!(chain.last_hash(), before);

    let log = build(3, None);
    let longest = lines(&log)
        .iter()
        .map(|l| l.len() - 1)
        .max()
        .expect("lines");
    let mut v = AuditVerifier::new(None);
    v.max_line_bytes(longest);
    v.push(&log).expect("fits exactly");
    let mut v = AuditVerifier::new(None);
    v.max_line_bytes(longest - 1);
    let e = v.push(&log).expect_err("too long");
    assert!(matches!(e.kind, VerifyErrorKind::LineTooLong { .. }));
    // A line with no end is refused once it passes the limit, unbuffered.
    let mut v = AuditVerifier::new(None);
    v.max_line_bytes(100);
    v.push(&[b'x'; 60]).expect("under the limit");
    let e = v.push(&[b'x'; 60]).expect_err("over");
    assert_eq!(e.line, 1);
    assert!(v.partial.len() <= 100);
    assert_eq!(v.push(b"\n").expect_err("sticky"), e);
}

#[test]
fn audit_call_record_round_trips_through_the_chain() {
    use mcp_stdio_core::{CallConfig, CallIdentity, CallLifecycle};
    let c = CallLifecycle::new(
        &CallConfig::default(),
        CallIdentity {
            call_id: "c_1",
            session_id: "s",
            operation: "op \"quoted\" \u{1F600}",
            target: "t",
        },
        1,
    );
    let mut chain = AuditChain::with_key(key());
    let line = chain.append(c.record()).expect("append");
    assert!(verify(&line, Some(&key())).is_ok());
}

#[test]
fn audit_seal_counts_the_session_and_verifies() {
    let k = key();
    for key in [None, Some(&k)] {
        let log = build_sealed(5, key);
        let s = verify(&log, key).expect("valid");
        assert_eq!(s.entries, 7);
        assert_eq!(s.seals, 1);
        assert_eq!(s.end, LogEnd::Sealed);
        assert!(s.is_sealed());
        let last: serde_json::Value = serde_json::from_slice(lines(&log)[6]).expect("json");
        let prev: serde_json::Value = serde_json::from_slice(lines(&log)[5]).expect("json");
        assert_eq!(
            last["record"],
            json!({"phase": "seal", "first_seq": 1, "entries": 6,
                   "kinds": {"call.completed": 5, "phase.session_start": 1},
                   "last_hash": prev["hash"]})
        );
    }
    // A seal of nothing, and sessions one after another.
    let mut chain = AuditChain::new();
    let mut log = chain.seal().expect("empty seal");
    log.extend(chain.begin_session("s-2").expect("start"));
    log.extend(chain.append(record(1)).expect("append"));
    log.extend(chain.seal().expect("seal"));
    let s = verify(&log, None).expect("valid");
    assert_eq!((s.entries, s.seals, s.end), (4, 2, LogEnd::Sealed));
}

#[test]
fn audit_cutting_any_tail_of_a_sealed_log_is_unsealed() {
    let log = build_sealed(20, None);
    let ls = lines(&log);
    let mut end = 0;
    for (k, l) in ls.iter().enumerate().take(ls.len() - 1) {
        end += l.len();
        let s = verify(&log[..end], None).expect("an intact prefix");
        assert_eq!(s.entries, k as u64 + 1);
        assert_eq!(
            s.end,
            LogEnd::Unsealed {
                first_seq: 1,
                entries: k as u64 + 1,
                partial_line: false
            },
            "{} of {} lines",
            k + 1,
            ls.len()
        );
        assert!(!s.is_sealed());
    }
    // Every byte prefix: intact or cut, never sealed, never an error.
    for cut in 0..log.len() {
        let s = verify(&log[..cut], None).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(!s.is_sealed(), "cut at {cut}");
    }
    assert!(verify(&log, None).expect("whole").is_sealed());
}

/// A seal that does not match the entries before it, in a chain whose
/// hashes are all valid (plain chains can be recomputed by anyone).
#[test]
fn audit_a_seal_that_does_not_match_is_tampering() {
    let forge = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut chain = AuditChain::new();
        let mut log = chain.begin_session("s").expect("start");
        for i in 0..3 {
            log.extend(chain.append(record(i)).expect("append"));
        }
        let mut honest = chain.clone();
        let line = honest.seal().expect("seal");
        let entry: serde_json::Value = serde_json::from_slice(&line).expect("json");
        let mut seal = entry["record"].clone();
        edit(&mut seal);
        log.extend(chain.append(&seal).expect("append"));
        verify(&log, None)
    };
    assert!(forge(&|_| {}).expect("honest").is_sealed());
    type Edit<'a> = &'a dyn Fn(&mut serde_json::Value);
    let cases: [(Edit<'_>, VerifyErrorKind); 6] = [
        (
            &|s| s["entries"] = json!(3),
            VerifyErrorKind::SealMismatch(SealField::Entries),
        ),
        (
            &|s| s["kinds"]["call.completed"] = json!(2),
            VerifyErrorKind::SealMismatch(SealField::Kinds),
        ),
        (
            &|s| {
                s["kinds"]["call.completed"] = json!(2);
                s["kinds"]["other"] = json!(1);
            },
            VerifyErrorKind::SealMismatch(SealField::Kinds),
        ),
        (
            &|s| s["first_seq"] = json!(2),
            VerifyErrorKind::SealMismatch(SealField::FirstSeq),
        ),
        (
            &|s| s["last_hash"] = json!(GENESIS_PREV),
            VerifyErrorKind::SealMismatch(SealField::LastHash),
        ),
        (&|s| s["note"] = json!("x"), VerifyErrorKind::BadSeal),
    ];
    for (i, (edit, kind)) in cases.iter().enumerate() {
        assert_eq!(
            forge(*edit),
            Err(VerifyError {
                line: 5,
                kind: *kind
            }),
            "case {i}"
        );
    }
}

#[test]
fn audit_a_session_that_died_unsealed_is_reported_after_the_next_one() {
    let mut chain = AuditChain::new();
    let mut log = chain.begin_session("s-1").expect("start");
    log.extend(chain.append(record(0)).expect("append"));
    log.extend(chain.append(record(1)).expect("append"));
    // The writer dies; another resumes the log.
    let mut next = AuditChain::resume(lines(&log)[2], None).expect("resume");
    assert!(matches!(next.seal(), Err(AppendError::SessionNotStarted)));
    log.extend(next.begin_session("s-2").expect("start"));
    log.extend(next.append(record(2)).expect("append"));
    log.extend(next.seal().expect("seal"));
    let s = verify(&log, None).expect("valid");
    assert_eq!(s.end, LogEnd::Sealed);
    assert_eq!(s.unsealed_sessions, 1);
    assert_eq!(s.first_unsealed_session, Some((1, 3)));
    assert!(!s.is_sealed());
    // Resuming right after a seal needs no new start.
    let mut after = AuditChain::resume(lines(&log)[5], None).expect("resume");
    log.extend(after.append(record(3)).expect("append"));
    log.extend(after.seal().expect("seal"));
    let s = verify(&log, None).expect("valid");
    assert_eq!((s.seals, s.end), (2, LogEnd::Sealed));
}

#[test]
fn audit_entry_kinds_and_their_bound() {
    assert_eq!(
        entry_kind(br#"{"phase":"session_end"}"#),
        "phase.session_end"
    );
    assert_eq!(
        entry_kind(br#"{"call_id":"1/0","state":"dispatched","x":[1]}"#),
        "call.dispatched"
    );
    assert_eq!(entry_kind(br#"{"call_id":"1/0"}"#), "other");
    assert_eq!(entry_kind(br#"{"phase":"Bad Name"}"#), "other");
    assert_eq!(entry_kind(b"[1,2]"), "other");
    assert_eq!(entry_kind(br#"{"phase":"a\u0062"}"#), "phase.ab");
    let mut counts = EntryCounts::default();
    for i in 0..MAX_SEAL_KINDS + 10 {
        counts.add(format!("phase.p{i}"));
    }
    assert_eq!(counts.iter().count(), MAX_SEAL_KINDS + 1);
    assert_eq!(counts.get("other"), 10);
    assert_eq!(counts.total(), (MAX_SEAL_KINDS + 10) as u64);
}
