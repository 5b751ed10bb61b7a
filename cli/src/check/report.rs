//! The result of a `check` run: rows of PASS / WARN / FAIL / SKIP with the
//! measured value, printed as a table for people or as one JSON document.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

/// The verdict of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Status {
    /// The server behaves as a release needs.
    Pass,
    /// Not fatal, but a host or a user will notice (or the row could not fully run).
    Warn,
    /// A release blocker.
    Fail,
    /// Not run; the value says why.
    Skip,
}

impl Status {
    /// The word shown in the table.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
            Self::Skip => "SKIP",
        }
    }
}

/// What a row checks: its stable id (JSON key) and its title (table).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowSpec {
    /// Stable machine name, used in `--json`.
    pub(crate) id: &'static str,
    /// What a person reads in the table.
    pub(crate) title: &'static str,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// Position in the battery, from 1.
    pub(crate) number: usize,
    /// Stable machine name.
    pub(crate) id: &'static str,
    /// Title.
    pub(crate) title: &'static str,
    /// The protocol revision the row ran at (rows 1–8); `None` for the rows
    /// that add up every session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<&'static str>,
    /// The verdict.
    pub(crate) status: Status,
    /// The measured value, for people (latency, bytes, exit path, or why skipped).
    pub(crate) value: String,
    /// Why the verdict is what it is, for WARN / FAIL / SKIP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// The measured values, for machines (milliseconds, bytes, counts).
    pub(crate) measured: Map<String, Value>,
    /// Wall time the row took (`time` in `--junit`); rows run on one session share it.
    #[serde(skip)]
    pub(crate) elapsed: Duration,
}

impl Row {
    /// A row with a verdict and its value.
    pub(crate) fn new(spec: RowSpec, status: Status, value: impl Into<String>) -> Self {
        Self {
            number: 0,
            id: spec.id,
            title: spec.title,
            revision: None,
            status,
            value: value.into(),
            detail: None,
            measured: Map::new(),
            elapsed: Duration::ZERO,
        }
    }

    /// Marks the protocol revision the row ran at.
    pub(crate) fn at_revision(mut self, version: &'static str) -> Self {
        self.revision = Some(version);
        self
    }

    /// The title with the revision, for people: `cancel + second request
    /// (2026-07-28)`.
    pub(crate) fn label(&self) -> String {
        match self.revision {
            Some(v) => format!("{} ({v})", self.title),
            None => self.title.to_owned(),
        }
    }

    /// A name unique in the run: the id, and at a revision other than the
    /// handshake one, `@` and the revision (`cancel@2026-07-28`).
    pub(crate) fn key(&self) -> String {
        match self.revision {
            Some(v) if mcp_stdio_core::is_modern(v) => format!("{}@{v}", self.id),
            _ => self.id.to_owned(),
        }
    }

    /// Sets the wall time the row took.
    pub(crate) fn timed(mut self, elapsed: Duration) -> Self {
        self.elapsed = elapsed;
        self
    }

    /// Adds the explanation shown under the row.
    pub(crate) fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds a machine-readable measurement.
    pub(crate) fn measure(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.measured.insert(key.to_owned(), value.into());
        self
    }

    /// Adds a duration measurement in milliseconds (3 decimals).
    pub(crate) fn measure_ms(self, key: &str, d: Duration) -> Self {
        let ms = (d.as_secs_f64() * 1e6).round() / 1e3;
        self.measure(key, ms)
    }
}

/// The whole run.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// The server command as run, or the built-in server's description.
    pub(crate) server: String,
    /// True when the built-in misbehaving server was checked.
    pub(crate) builtin: bool,
    /// Every row, in order.
    pub(crate) rows: Vec<Row>,
    /// Count of rows per status.
    pub(crate) summary: Summary,
    /// False when any row failed (the exit status is then 1).
    pub(crate) ok: bool,
    /// Wall time of the whole battery, in milliseconds.
    pub(crate) elapsed_ms: u64,
}

/// Count of rows per status.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Summary {
    /// Rows that passed.
    pub(crate) pass: usize,
    /// Rows that warned.
    pub(crate) warn: usize,
    /// Rows that failed.
    pub(crate) fail: usize,
    /// Rows not run.
    pub(crate) skip: usize,
}

impl Report {
    /// Builds the report; numbers the rows.
    pub(crate) fn new(
        server: String,
        builtin: bool,
        mut rows: Vec<Row>,
        elapsed: Duration,
    ) -> Self {
        let mut summary = Summary::default();
        for (i, row) in rows.iter_mut().enumerate() {
            row.number = i + 1;
            match row.status {
                Status::Pass => summary.pass += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
                Status::Skip => summary.skip += 1,
            }
        }
        Self {
            server,
            builtin,
            ok: summary.fail == 0,
            rows,
            summary,
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The JSON document.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report is plain data and always serializes")
    }

    /// The table for people.
    pub(crate) fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "mcp-stdio check: {}", self.server);
        let _ = writeln!(out);
        let title_w = self
            .rows
            .iter()
            .map(|r| r.label().len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(out, " #  {:<title_w$}  RESULT  VALUE", "CHECK");
        for row in &self.rows {
            let _ = writeln!(
                out,
                "{:>2}  {:<title_w$}  {:<6}  {}",
                row.number,
                row.label(),
                row.status.label(),
                row.value
            );
            if let Some(detail) = &row.detail {
                let indent = " ".repeat(4 + title_w + 2 + 6 + 2);
                // Later lines (a stderr excerpt) line up under the first.
                let mut lines = detail.lines();
                let _ = writeln!(out, "{indent}-> {}", lines.next().unwrap_or_default());
                for line in lines {
                    let _ = writeln!(out, "{indent}   {line}");
                }
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", self.verdict("->"));
        out
    }

    /// The closing line: counts, time and the verdict after `arrow`.
    pub(crate) fn verdict(&self, arrow: &str) -> String {
        let s = &self.summary;
        format!(
            "{} checks in {:.1} s: {} PASS, {} WARN, {} FAIL, {} SKIP {arrow} {}",
            self.rows.len(),
            self.elapsed_ms as f64 / 1000.0,
            s.pass,
            s.warn,
            s.fail,
            s.skip,
            if self.ok { "OK" } else { "FAILED" }
        )
    }
}

/// A duration for people: `0.42 ms`, `12.3 ms`, `2.04 s`.
pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// A byte count for people: `812 B`, `64.0 KiB`, `6.0 MiB`.
pub(crate) fn fmt_bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if n < 1024 {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{:.1} MiB", f / (KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_well() {
        assert_eq!(fmt_duration(Duration::from_micros(420)), "0.42 ms");
        assert_eq!(fmt_duration(Duration::from_millis(123)), "123 ms");
        assert_eq!(fmt_duration(Duration::from_millis(2040)), "2.04 s");
        assert_eq!(fmt_bytes(812), "812 B");
        assert_eq!(fmt_bytes(64 * 1024), "64.0 KiB");
        assert_eq!(fmt_bytes(6 * 1024 * 1024), "6.0 MiB");
    }

    #[test]
    fn rows_name_their_revision_and_only_2026_rows_change_their_key() {
        let spec = RowSpec {
            id: "cancel",
            title: "cancel + second request",
        };
        let plain = Row::new(spec, Status::Pass, "ok");
        assert_eq!(
            (plain.key(), plain.label()),
            ("cancel".to_owned(), spec.title.to_owned())
        );
        let old = Row::new(spec, Status::Pass, "ok").at_revision("2025-11-25");
        assert_eq!(old.key(), "cancel");
        assert_eq!(old.label(), "cancel + second request (2025-11-25)");
        let new = Row::new(spec, Status::Pass, "ok").at_revision("2026-07-28");
        assert_eq!(new.key(), "cancel@2026-07-28");
        let json = serde_json::to_value(&new).unwrap();
        assert_eq!(json["revision"], "2026-07-28");
        assert_eq!(json["id"], "cancel");
    }

    #[test]
    fn any_fail_makes_the_report_not_ok() {
        let spec = RowSpec {
            id: "x",
            title: "x",
        };
        let rows = vec![
            Row::new(spec, Status::Pass, "a"),
            Row::new(spec, Status::Warn, "b").detail("why"),
            Row::new(spec, Status::Skip, "c"),
        ];
        let ok = Report::new("s".into(), false, rows.clone(), Duration::ZERO);
        assert!(ok.ok);
        assert!(ok.to_table().contains("-> why"));
        let mut rows = rows;
        rows.push(Row::new(spec, Status::Fail, "d"));
        let bad = Report::new("s".into(), false, rows, Duration::ZERO);
        assert!(!bad.ok);
        let v: Value = serde_json::from_str(&bad.to_json()).unwrap();
        assert_eq!(v["rows"][3]["status"], "FAIL");
        assert_eq!(v["rows"][3]["number"], 4);
        assert_eq!(v["summary"]["fail"], 1);
    }
}
