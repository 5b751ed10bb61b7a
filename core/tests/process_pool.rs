//! G10: by default every capture in the process draws on one retention pool
//! of 256 KiB — a `Client`'s stderr and both streams of every helper run.

use mcp_stdio_core::ClientOptions;
use mcp_stdio_core::HelperOptions;
use mcp_stdio_core::{SharedRetentionPool, DEFAULT_POOL_LIMIT};

#[test]
fn g10_clients_and_helpers_share_the_process_pool_by_default() {
    let client = ClientOptions::default()
        .get_stderr_pool()
        .cloned()
        .expect("a pool by default");
    let helper = HelperOptions::default()
        .get_pool()
        .cloned()
        .expect("a pool by default");
    let process = SharedRetentionPool::process();
    assert_eq!(process.stats().limit, DEFAULT_POOL_LIMIT as u64);
    // One pool: a grant from the client's is in use in the helper's.
    let before = helper.stats().in_use;
    let grant = client.grant(4096);
    assert_eq!(helper.stats().in_use, before + 4096);
    assert_eq!(process.stats().in_use, before + 4096);
    client.release(grant).expect("its own pool");
    assert_eq!(helper.stats().in_use, before);
}
