//! Peak resident memory and CPU time of this process.
//!
//! Memory comes from `/proc/self/status`.
//! `VmHWM` is the peak of `VmRSS`; writing `5` to `/proc/self/clear_refs`
//! resets it to the current RSS (Linux ≥ 4.0), so each measured operation
//! gets its own peak: `growth = VmHWM after − VmRSS before`.

use std::time::{Duration, Instant};

/// A field of `/proc/self/status` in bytes (the file gives kB).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// Current resident set size, bytes.
pub(crate) fn rss() -> u64 {
    status_bytes("VmRSS")
}

/// Peak resident set size since the last [`reset_peak`], bytes.
pub(crate) fn peak() -> u64 {
    status_bytes("VmHWM")
}

/// Resets the peak to the current RSS.
pub(crate) fn reset_peak() {
    // Without it (not Linux, or no permission) the peak covers the whole
    // process life: still an upper bound.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// CPU time used by this process so far, all threads (user + system).
pub(crate) fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// One measured operation: wall time, CPU time and peak RSS growth.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    /// Wall time.
    pub(crate) time: Duration,
    /// CPU time of this process (every thread) during the operation.
    pub(crate) cpu: Duration,
    /// Peak RSS during the operation minus RSS before it, bytes.
    pub(crate) growth: u64,
}

/// Starts a measurement: resets the peak, notes the RSS and the time.
pub(crate) struct Probe {
    rss_before: u64,
    cpu_before: Duration,
    start: Instant,
}

impl Probe {
    pub(crate) fn start() -> Self {
        reset_peak();
        let rss_before = rss();
        Self {
            rss_before,
            cpu_before: cpu_time(),
            start: Instant::now(),
        }
    }

    /// Time since the start, the measurement still running.
    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    pub(crate) fn stop(self) -> Measured {
        let time = self.start.elapsed();
        Measured {
            time,
            cpu: cpu_time().saturating_sub(self.cpu_before),
            growth: peak().saturating_sub(self.rss_before),
        }
    }
}
