//! A helper run's records, appended to an audit chain as they are made.

use std::sync::{Arc, Mutex, PoisonError};

use mcp_stdio_core::RecordSink;

use crate::AuditChain;

/// A [`RecordSink`] that appends every record to `chain` (G12) and hands
/// each resulting line — the record with its sequence number and hash, plus
/// `\n` — to `write_line`, which puts it on disk (the chain does no I/O). An
/// append that fails (the chain was refused a line before) is logged and the
/// record dropped from the chain.
///
/// Give it to [`HelperOptions::records`]: the attempt (`authorized`) is on
/// record before the helper is spawned.
///
/// [`RecordSink`]: https://docs.rs/mcp-stdio-core/latest/mcp_stdio_core/struct.RecordSink.html
/// [`HelperOptions::records`]: https://docs.rs/mcp-stdio-core/latest/mcp_stdio_core/struct.HelperOptions.html#method.records
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use mcp_stdio_audit::{record_sink, AuditChain};
/// use mcp_stdio_core::HelperOptions;
///
/// let chain = Arc::new(Mutex::new(AuditChain::new()));
/// let log = Arc::new(Mutex::new(Vec::<u8>::new()));
/// let out = log.clone();
/// let mut options = HelperOptions::default();
/// options
///     .call_id("c_1")
///     .operation("deploy.upload")
///     .records(Some(record_sink(chain.clone(), move |line| {
///         // a log file's `write_all(&line)` in a real program
///         out.lock().expect("not poisoned").extend(line);
///     })));
/// ```
pub fn record_sink(
    chain: Arc<Mutex<AuditChain>>,
    write_line: impl Fn(Vec<u8>) + Send + Sync + 'static,
) -> RecordSink {
    RecordSink::new(move |record| {
        let line = chain
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(record);
        match line {
            Ok(line) => write_line(line),
            Err(e) => {
                tracing::warn!(error = %e, "helper record not appended to the audit chain")
            }
        }
    })
}
