//! The tokio adapter's `run_helper` behind the suite's interface.

use std::time::Instant;

use mcp_stdio_tokio::{run_helper_with_approval, ApprovalRequest, CancelToken};

use crate::helper_adapter::{HelperAdapter, HelperJob, HelperRunReport, RunClock};
use crate::tokio_adapter::Tokio;

async fn run_one(job: HelperJob) -> HelperRunReport {
    tokio::time::sleep(job.start_after).await;
    let cancel = CancelToken::new();
    let clock = RunClock::default();
    let canceller = job.cancel_after.map(|d| {
        let cancel = cancel.clone();
        let clock = clock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            clock.cancelled();
            cancel.cancel();
        })
    });
    let script = job.approval;
    let approver = |request: ApprovalRequest| {
        clock.approval_requested(request.deadline);
        async move {
            match script {
                Some(s) => {
                    tokio::time::sleep(s.after).await;
                    s.approve
                }
                None => false,
            }
        }
    };
    let start = Instant::now();
    let outcome = run_helper_with_approval(&job.command, &job.options, &cancel, &approver).await;
    let end = Instant::now();
    if let Some(c) = canceller {
        c.abort();
    }
    HelperRunReport::new(outcome, start, end, &clock)
}

impl HelperAdapter for Tokio {
    const NAME: &'static str = "tokio";

    fn run_helpers(jobs: Vec<HelperJob>) -> Vec<HelperRunReport> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        rt.block_on(async {
            let handles: Vec<_> = jobs.into_iter().map(|j| tokio::spawn(run_one(j))).collect();
            let mut out = Vec::with_capacity(handles.len());
            for h in handles {
                out.push(h.await.expect("a helper run never panics"));
            }
            out
        })
    }
}
