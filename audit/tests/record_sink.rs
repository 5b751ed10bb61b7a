//! G12: a helper run's records, appended to an audit chain through
//! `record_sink`, verify — and the chain holds the attempt (`authorized`)
//! before the dispatch and the final record last.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_stdio_audit::{record_sink, AuditChain, AuditVerifier};
use mcp_stdio_core::ChildStream;
use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::{HelperAction, HelperInput, HelperOptions, HelperOutput, RecordTap};

#[test]
fn g12_helper_records_go_to_the_audit_chain_and_verify() {
    let chain = Arc::new(Mutex::new(AuditChain::new()));
    let lines = Arc::new(Mutex::new(Vec::<u8>::new()));
    let out = lines.clone();
    lines
        .lock()
        .unwrap()
        .extend(chain.lock().unwrap().begin_session("s").unwrap());
    let sink = record_sink(chain.clone(), move |line| {
        out.lock().unwrap().extend(line);
    });
    let mut options = HelperOptions::default();
    options
        .call_id("c1")
        .operation("build")
        .pool(None)
        .records(Some(sink.clone()));
    // The adapter's loop, on a virtual clock.
    let t0 = Instant::now();
    let at = |ms: u64| Stamp::new(t0 + Duration::from_millis(ms), 1_700_000_000_000 + ms);
    let mut run = options.start(at(0));
    let mut tap = RecordTap::default();
    let mut finished = None;
    for step in 0..10u64 {
        while let HelperOutput::Action(action) = run.poll_output() {
            tap.observe(&run, Some(&sink));
            match action {
                HelperAction::Spawn => run.handle_input(at(1), HelperInput::Spawned),
                HelperAction::Finished(outcome) => {
                    tap.finish(&outcome.record, Some(&sink));
                    finished = Some(outcome);
                }
                _ => {}
            }
        }
        tap.observe(&run, Some(&sink));
        if finished.is_some() {
            break;
        }
        match step {
            0 => {
                for stream in [ChildStream::Stdout, ChildStream::Stderr] {
                    let look = &mut || Ok(None);
                    let end = HelperInput::Read {
                        stream,
                        result: Ok(0),
                        buf: &[],
                        look,
                    };
                    run.handle_input(at(2), end);
                }
                run.handle_input(at(3), HelperInput::Exited(Ok(ExitStatus::Code(0))));
            }
            _ => run.handle_input(at(10 + step * 1000), HelperInput::Timeout),
        }
    }
    assert!(finished.is_some(), "the run finished");
    lines
        .lock()
        .unwrap()
        .extend(chain.lock().unwrap().seal().unwrap());
    let bytes = lines.lock().unwrap().clone();
    let mut verifier = AuditVerifier::new(None);
    verifier.push(&bytes).expect("the chain verifies");
    let summary = verifier.finish().expect("complete");
    assert!(summary.is_sealed(), "{summary:?}");
    let text = String::from_utf8(bytes).unwrap();
    let states: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("\"state\":\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    let authorized = states.iter().position(|s| *s == "authorized");
    let dispatched = states.iter().position(|s| *s == "dispatched");
    assert!(
        authorized.is_some() && authorized < dispatched,
        "the attempt is on record before the dispatch: {states:?}"
    );
    assert_eq!(states.last(), Some(&"completed"), "{states:?}");
}
