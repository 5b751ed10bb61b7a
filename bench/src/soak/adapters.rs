//! Sessions hosted by our three adapters' `Client`s. The tokio and async-std
//! sessions are one async body (a macro over the adapter crate, its `sleep`
//! and its `timeout`); the blocking adapter gets the same steps with plain
//! calls.

use std::time::{Duration, Instant};

use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Outcome;
use mcp_stdio_core::{to_raw, RawValue};
use mcp_stdio_core::{ClientOptions, RequestError};
use mcp_stdio_core::{RequestFailure, SendError};

use super::plan::{
    Action, End, Ending, SessionPlan, Step, DEADLINE_SLACK, DRAIN, GRACE, MAX_FRAME, PROBE_TIMEOUT,
    SHUTDOWN_BOUND, STDERR_TAIL,
};
use super::SessionLog;

/// The options every adapter session runs with.
pub(crate) fn options() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(MAX_FRAME);
    options.stderr_mut().tail(STDERR_TAIL);
    options
        .supervisor_mut()
        .stdin_close_grace(GRACE)
        .term_grace(GRACE)
        .reader_drain_deadline(DRAIN);
    options
}

fn params(step: &Step) -> Box<RawValue> {
    to_raw(&step.params()).expect("params serialize")
}

/// How an outcome ended.
pub(crate) fn ending(outcome: &Outcome) -> Ending {
    match outcome {
        Ok(_) => Ending::Result,
        Err(RequestError::Failed(f)) => match f {
            RequestFailure::Server(_) => Ending::ServerError,
            RequestFailure::ResponseTooLarge { .. } => Ending::TooLarge,
            RequestFailure::Cancelled { .. } => Ending::Cancelled,
            RequestFailure::TimedOut { .. } => Ending::Timeout,
            RequestFailure::SessionClosed => Ending::Closed,
            _ => Ending::Other,
        },
        Err(RequestError::Send(SendError::Closed)) => Ending::Closed,
        Err(_) => Ending::Other,
    }
}

/// Checks one finished step: its ending is allowed and it ended in time.
pub(crate) fn check_step(
    plan: &SessionPlan,
    n: usize,
    step: &Step,
    ending: Ending,
    elapsed: Duration,
    detail: &str,
) -> Result<(), String> {
    let bound = step.timeout + extra_wait(step) + DEADLINE_SLACK;
    if elapsed > bound {
        return Err(format!(
            "step {n} ({:?}, {:?}) ended after {elapsed:?}, past its deadline {:?} + slack \
             (bound {bound:?})",
            step.call, step.action, step.timeout
        ));
    }
    if !step.allows(plan.host, ending) {
        return Err(format!(
            "step {n} ({:?}, {:?}) ended as {:?}: {detail}",
            step.call, step.action, ending
        ));
    }
    Ok(())
}

/// Time the host spends away before it waits (counted into the deadline
/// only where the host, not the server, holds the request back).
fn extra_wait(step: &Step) -> Duration {
    match step.action {
        Action::StopReading(d) => d,
        _ => Duration::ZERO,
    }
}

macro_rules! async_session {
    ($adapter:ident, $sleep:path, $timeout:path) => {
        use $adapter::Client;

        /// Runs one planned session; `Err` names the first breach.
        pub(crate) async fn run(
            plan: &SessionPlan,
            server: &CommandSpec,
        ) -> Result<SessionLog, String> {
            let mut log = SessionLog::default();
            let client = Client::spawn(server, options()).map_err(|e| format!("spawn: {e}"))?;
            match $timeout(PROBE_TIMEOUT + DEADLINE_SLACK, client.initialize()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("initialize failed: {e}")),
                Err(_) => return Err("initialize did not end".to_owned()),
            }
            for (n, step) in plan.steps.iter().enumerate() {
                let start = Instant::now();
                let pending = client
                    .start_request("tools/call", Some(params(step)), Some(step.timeout))
                    .await
                    .map_err(|e| format!("step {n}: start_request: {e}"))?;
                let bound = step.timeout + DEADLINE_SLACK;
                let (ending, detail) = match step.action {
                    Action::Await | Action::StopReading(_) => {
                        if let Action::StopReading(d) = step.action {
                            // The application is busy; the driver keeps draining (G1).
                            $sleep(d).await;
                        }
                        match $timeout(bound, pending).await {
                            Ok(outcome) => (ending(&outcome), format!("{outcome:?}")),
                            Err(_) => {
                                return Err(format!("step {n} ({:?}) never ended", step.call))
                            }
                        }
                    }
                    Action::Cancel(d) => {
                        $sleep(d).await;
                        pending.cancel("soak: host cancel");
                        match $timeout(bound, pending).await {
                            Ok(outcome) => (ending(&outcome), format!("{outcome:?}")),
                            Err(_) => {
                                return Err(format!(
                                    "step {n} ({:?}) never ended after cancel",
                                    step.call
                                ))
                            }
                        }
                    }
                    Action::Drop(d) => {
                        $sleep(d).await;
                        drop(pending);
                        (Ending::Dropped, String::new())
                    }
                };
                let elapsed = start.elapsed();
                check_step(plan, n, step, ending, elapsed, &detail)?;
                log.endings.push(ending);
                if step.ends_session() {
                    break;
                }
                if matches!(
                    ending,
                    Ending::Cancelled | Ending::Dropped | Ending::Timeout
                ) {
                    // G8: a small request right after the cancel completes promptly.
                    let start = Instant::now();
                    let probe = $timeout(
                        PROBE_TIMEOUT + DEADLINE_SLACK,
                        client.request_with_timeout("ping", None, Some(PROBE_TIMEOUT)),
                    )
                    .await;
                    match probe {
                        Ok(Ok(_)) => log.probes.push(start.elapsed()),
                        Ok(Err(e)) => {
                            return Err(format!("step {n}: ping after {ending:?} failed: {e}"))
                        }
                        Err(_) => {
                            return Err(format!("step {n}: ping after {ending:?} never ended"))
                        }
                    }
                }
            }
            let start = Instant::now();
            match plan.end {
                End::Shutdown | End::Kill => {
                    let record = if plan.end == End::Shutdown {
                        $timeout(SHUTDOWN_BOUND, client.shutdown()).await
                    } else {
                        $timeout(SHUTDOWN_BOUND, client.kill()).await
                    };
                    let record = record.map_err(|_| {
                        format!("{:?} did not end within {SHUTDOWN_BOUND:?}", plan.end)
                    })?;
                    log.stderr_seen = record.stderr.seen;
                    log.shutdown = Some(start.elapsed());
                }
                End::Drop => drop(client),
            }
            Ok(log)
        }
    };
}

pub(crate) mod with_tokio {
    use super::*;
    async_session!(mcp_stdio_tokio, tokio::time::sleep, tokio::time::timeout);
}

pub(crate) mod with_async_std {
    use super::*;
    async_session!(
        mcp_stdio_async_std,
        async_std::task::sleep,
        async_std::future::timeout
    );
}

/// The blocking adapter: the same steps with plain calls.
pub(crate) fn run_blocking(plan: &SessionPlan, server: &CommandSpec) -> Result<SessionLog, String> {
    use mcp_stdio_blocking::Client;
    let mut log = SessionLog::default();
    let client = Client::spawn(server, options()).map_err(|e| format!("spawn: {e}"))?;
    // `initialize` runs under the session's default timeout (30 s): measured.
    let start = Instant::now();
    client
        .initialize()
        .map_err(|e| format!("initialize failed: {e}"))?;
    if start.elapsed() > PROBE_TIMEOUT + DEADLINE_SLACK {
        return Err(format!("initialize took {:?}", start.elapsed()));
    }
    for (n, step) in plan.steps.iter().enumerate() {
        let start = Instant::now();
        let mut pending = client
            .start_request("tools/call", Some(params(step)), Some(step.timeout))
            .map_err(|e| format!("step {n}: start_request: {e}"))?;
        let bound = step.timeout + DEADLINE_SLACK;
        let (ending, detail) = match step.action {
            Action::Await | Action::StopReading(_) => {
                if let Action::StopReading(d) = step.action {
                    std::thread::sleep(d);
                }
                let outcome = pending
                    .wait_timeout(bound)
                    .ok_or_else(|| format!("step {n} ({:?}) never ended", step.call))?;
                (ending(&outcome), format!("{outcome:?}"))
            }
            Action::Cancel(d) => {
                std::thread::sleep(d);
                pending.cancel("soak: host cancel");
                let outcome = pending.wait_timeout(bound).ok_or_else(|| {
                    format!("step {n} ({:?}) never ended after cancel", step.call)
                })?;
                (ending(&outcome), format!("{outcome:?}"))
            }
            Action::Drop(d) => {
                std::thread::sleep(d);
                drop(pending);
                (Ending::Dropped, String::new())
            }
        };
        check_step(plan, n, step, ending, start.elapsed(), &detail)?;
        log.endings.push(ending);
        if step.ends_session() {
            break;
        }
        if matches!(
            ending,
            Ending::Cancelled | Ending::Dropped | Ending::Timeout
        ) {
            let start = Instant::now();
            let mut probe = client
                .start_request("ping", None, Some(PROBE_TIMEOUT))
                .map_err(|e| format!("step {n}: ping after {ending:?}: {e}"))?;
            match probe.wait_timeout(PROBE_TIMEOUT + DEADLINE_SLACK) {
                Some(Ok(_)) => log.probes.push(start.elapsed()),
                Some(Err(e)) => return Err(format!("step {n}: ping after {ending:?} failed: {e}")),
                None => return Err(format!("step {n}: ping after {ending:?} never ended")),
            }
        }
    }
    let start = Instant::now();
    match plan.end {
        End::Shutdown | End::Kill => {
            let record = if plan.end == End::Shutdown {
                client.shutdown()
            } else {
                client.kill()
            };
            let took = start.elapsed();
            if took > SHUTDOWN_BOUND {
                return Err(format!(
                    "{:?} took {took:?} (bound {SHUTDOWN_BOUND:?})",
                    plan.end
                ));
            }
            log.stderr_seen = record.stderr.seen;
            log.shutdown = Some(took);
        }
        End::Drop => drop(client),
    }
    Ok(log)
}
