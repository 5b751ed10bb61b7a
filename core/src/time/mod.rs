//! Time as the core takes it: [`Stamp`], one reading of both clocks made by
//! the caller, and [`duration_ms`], durations in records and metrics as JSON
//! numbers of milliseconds. The core reads no clock itself.

use std::time::Instant;

pub(crate) mod duration_ms;

/// One reading of both clocks, taken by the caller at one moment.
///
/// `instant` drives deadlines; `unix_ms` (milliseconds since the Unix epoch)
/// only timestamps the record. The core never reads a clock itself, so a test
/// can drive a call with a fake base `Instant` plus durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Monotonic time, for deadlines.
    pub instant: Instant,
    /// Wall-clock time in milliseconds since the Unix epoch, for the record.
    pub unix_ms: u64,
}

impl Stamp {
    /// A reading of both clocks.
    pub fn new(instant: Instant, unix_ms: u64) -> Self {
        Self { instant, unix_ms }
    }
}
