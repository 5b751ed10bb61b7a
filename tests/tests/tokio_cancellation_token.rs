//! The tokio adapter's cancel token is tokio-util's `CancellationToken`: a
//! token the application already holds — or a child of it — cancels a helper
//! run through the supervisor (G7).

use std::time::{Duration, Instant};

use mcp_stdio_core::CallState;
use mcp_stdio_tests::helper_adapter::{helper_command, helper_options};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g7_a_child_of_the_applications_token_cancels_a_helper_run() {
    let application = CancellationToken::new();
    let token = application.child_token();
    let run = tokio::spawn(async move {
        let spec = helper_command(&["sleep", "30"]);
        mcp_stdio_tokio::run_helper(&spec, &helper_options(1024), &token).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled_at = Instant::now();
    application.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("a cancelled run ends")
        .expect("the run's task");
    let took = cancelled_at.elapsed();
    eprintln!(
        "cancel of the parent token → outcome in {took:?}; state {:?}",
        outcome.record.state()
    );
    assert_eq!(outcome.record.state(), CallState::CancelledAfterDispatch);
    assert!(took < Duration::from_secs(10), "cancel took {took:?}");
    let process = outcome.process.as_ref().expect("the run spawned");
    eprintln!(
        "ended by {:?}, exit {:?}",
        process.ended_by, outcome.exit_status
    );
    assert!(
        outcome.exit_status.is_some(),
        "no exit observed: {process:?}"
    );
}

#[tokio::test]
async fn g7_a_token_cancelled_before_the_run_never_spawns() {
    let token = CancellationToken::new();
    token.cancel();
    let spec = helper_command(&["sleep", "30"]);
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        mcp_stdio_tokio::run_helper(&spec, &helper_options(1024), &token),
    )
    .await
    .expect("a run cancelled before it starts ends");
    eprintln!("state {:?}", outcome.record.state());
    assert!(outcome.process.is_none(), "spawned despite the cancel");
    assert_eq!(outcome.record.state(), CallState::Cancelled);
}
