//! The fuzz harness of `process/capture`.

#[allow(unused_imports)]
use crate::process::capture::*;
use std::cmp::min;

/// Fuzz entry point: arbitrary pool limits, captures with arbitrary limits
/// (zero included), pooled or not, fed arbitrary chunks, finished and released
/// in arbitrary order. Panics on any broken invariant.
pub fn fuzz_capture(data: &[u8]) {
    let mut u = arbitrary::Unstructured::new(data);
    // Running out of fuzz data just ends the run.
    let _ = fuzz_run(&mut u);
}

struct FuzzCapture {
    capture: OutputCapture,
    input: Vec<u8>,
    granted: Option<usize>,
}

fn fuzz_run(u: &mut arbitrary::Unstructured<'_>) -> arbitrary::Result<()> {
    const MAX_LIMIT: usize = 512;
    const MAX_LIVE: usize = 32;
    let mut config = PoolConfig::default();
    config
        .limit(u.int_in_range(0..=4 * MAX_LIMIT)?)
        .reserve(u.int_in_range(0..=2 * MAX_LIMIT)?)
        .min_grant(u.int_in_range(0..=MAX_LIMIT)?);
    let mut pool = RetentionPool::new(&config);
    let mut live: Vec<FuzzCapture> = Vec::new();
    while !u.is_empty() {
        match u.int_in_range(0..=3u8)? {
            0 if live.len() < MAX_LIVE => {
                let mut limits = CaptureConfig::default();
                limits
                    .head(u.int_in_range(0..=MAX_LIMIT)?)
                    .tail(u.int_in_range(0..=MAX_LIMIT)?)
                    .redact(u.arbitrary::<bool>()?);
                let (capture, granted) = if u.arbitrary::<bool>()? {
                    let before = pool.in_use();
                    let grant = pool.grant(limits.wanted());
                    let bytes = grant.bytes();
                    assert!(bytes <= limits.wanted(), "never more than asked");
                    assert_eq!(pool.in_use(), before + bytes);
                    (OutputCapture::with_grant(&limits, grant), Some(bytes))
                } else {
                    (OutputCapture::new(&limits), None)
                };
                let allowed = granted.unwrap_or(limits.wanted());
                assert!(capture.head_limit() + capture.tail_limit() <= allowed);
                assert!(capture.head_limit() <= limits.get_head());
                assert!(capture.tail_limit() <= limits.get_tail());
                live.push(FuzzCapture {
                    capture,
                    input: Vec::new(),
                    granted,
                });
            }
            1 if !live.is_empty() => {
                let index = u.choose_index(live.len())?;
                let len = u.int_in_range(0..=3 * MAX_LIMIT)?;
                let chunk = u.bytes(min(len, u.len()))?;
                let entry = &mut live[index];
                entry.capture.push(chunk);
                entry.input.extend_from_slice(chunk);
                assert_eq!(entry.capture.seen(), entry.input.len() as u64);
            }
            2 if !live.is_empty() => {
                let index = u.choose_index(live.len())?;
                let max = u.int_in_range(0..=4 * MAX_LIMIT)?;
                let entry = live.swap_remove(index);
                fuzz_finish(&mut pool, entry, max);
            }
            _ => {}
        }
        fuzz_check_pool(&pool, &live);
    }
    for entry in live {
        fuzz_finish(&mut pool, entry, MAX_LIMIT);
    }
    assert_eq!(pool.in_use(), 0, "every byte came back");
    assert_eq!(pool.outstanding(), 0);
    Ok(())
}

fn fuzz_finish(pool: &mut RetentionPool, entry: FuzzCapture, max_excerpt: usize) {
    let (head, tail) = (entry.capture.head_limit(), entry.capture.tail_limit());
    let captured = entry.capture.finish();
    check_captured(&captured, &entry.input, head, tail);
    if !captured.summary().redaction {
        check_excerpt(&captured, &entry.input, max_excerpt);
    }
    match (captured.into_grant(), entry.granted) {
        (Some(grant), Some(bytes)) => {
            let before = pool.in_use();
            assert_eq!(pool.release(grant), Ok(bytes));
            assert_eq!(pool.in_use(), before - bytes);
        }
        (None, None) => {}
        _ => panic!("a capture's grant must come back with it"),
    }
}

fn fuzz_check_pool(pool: &RetentionPool, live: &[FuzzCapture]) {
    assert!(pool.in_use() <= pool.limit(), "pool over its limit");
    assert!(pool.peak() <= pool.limit());
    let granted: usize = live.iter().filter_map(|e| e.granted).sum();
    assert_eq!(granted, pool.in_use(), "in_use is the sum of live grants");
    let retained: u64 = live
        .iter()
        .filter(|e| e.granted.is_some())
        .map(|e| e.capture.retained())
        .sum();
    assert!(retained <= pool.in_use() as u64, "retained within grants");
}
