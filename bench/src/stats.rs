//! Medians, ranges and percentiles, and their formatting.

/// Median and range of a sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Summary {
    /// `None` for an empty sample.
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    /// `median (min–max)` with `digits` decimals.
    pub(crate) fn show(&self, digits: usize) -> String {
        format!(
            "{:.d$} ({:.d$}–{:.d$})",
            self.median,
            self.min,
            self.max,
            d = digits
        )
    }
}

/// The `p`-th percentile (0–100) by nearest rank.
pub(crate) fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// A ratio as `0.42×`.
pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 || !a.is_finite() || !b.is_finite() {
        return "–".to_owned();
    }
    format!("{:.2}×", a / b)
}

/// Bytes as MiB with one decimal.
pub(crate) fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}
