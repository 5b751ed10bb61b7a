use super::*;

#[test]
fn g10_a_shared_grant_dropped_unreleased_gives_its_bytes_back() {
    let mut config = PoolConfig::default();
    config.limit(1000).reserve(0);
    let pool = SharedRetentionPool::new(&config);
    let g = pool.grant(600);
    let mut capture = OutputCapture::with_grant(&CaptureConfig::default(), g);
    capture.push(b"abc");
    assert_eq!(pool.stats().in_use, 600);
    drop(capture); // abandoned mid-run: never finished, never released
    assert_eq!(pool.stats().in_use, 0);
    // An explicit release still works and is not counted twice.
    let g = pool.grant(300);
    assert_eq!(pool.release(g), Ok(300));
    assert_eq!(pool.stats().in_use, 0);
}
