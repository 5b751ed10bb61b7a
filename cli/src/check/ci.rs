//! The report in the formats CI systems show: JUnit XML (`--junit FILE`),
//! read by most CI test-report views, and a Markdown table (`--markdown`),
//! fit for a job page such as GitHub's step summary.
//!
//! JUnit mapping, one `<testcase>` per row, named by the row id, with class
//! name `mcp-stdio check`: FAIL is a `<failure>`; SKIP is `<skipped>`; WARN
//! passes (a release is not blocked by it, as with the exit status) and
//! says so in its `<system-out>`, which every row carries with its value.

use std::fmt::Write as _;

use super::report::{Report, Row, Status};

/// The `classname` of every test case, and the name of the test suite.
const SUITE: &str = "mcp-stdio check";

/// `s` escaped for XML text and attribute values (either quote). Characters
/// XML 1.0 forbids (most C0 controls) become U+FFFD, so a server's odd
/// output cannot make the document unreadable.
pub(crate) fn xml_escape(s: &str) -> String {
    rewrite(s, |c| match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        '\'' => Some("&apos;"),
        '\t' | '\n' | '\r' => None,
        c if u32::from(c) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => Some("\u{FFFD}"),
        _ => None,
    })
}

/// `s` made safe for one cell of a Markdown table: no line breaks, no column
/// separators, no HTML.
fn md_cell(s: &str) -> String {
    rewrite(s, |c| match c {
        '|' => Some("\\|"),
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '\n' | '\r' | '\t' => Some(" "),
        c if c.is_control() => Some("\u{FFFD}"),
        _ => None,
    })
}

/// `s` with every character `map` names replaced by its text.
fn rewrite(s: &str, map: impl Fn(char) -> Option<&'static str>) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match map(c) {
            Some(text) => out.push_str(text),
            None => out.push(c),
        }
    }
    out
}

fn secs(d: std::time::Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

/// What the row measured, for `<system-out>` and failure bodies.
fn row_text(row: &Row) -> String {
    let mut text = format!("{} {}: {}", row.status.label(), row.label(), row.value);
    if let Some(detail) = &row.detail {
        let _ = write!(text, "\n{detail}");
    }
    text
}

impl Report {
    /// The JUnit XML document, one `<testcase>` per row (mapping in the module doc).
    pub(crate) fn to_junit(&self) -> String {
        let s = &self.summary;
        let total = secs(std::time::Duration::from_millis(self.elapsed_ms));
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        // The one suite and its wrapper carry the same counts.
        for (indent, tag) in [("", "testsuites"), ("  ", "testsuite")] {
            let _ = writeln!(
                out,
                "{indent}<{tag} name=\"{SUITE}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{total}\">",
                self.rows.len(),
                s.fail,
                s.skip
            );
        }
        let _ = writeln!(out, "    <properties>");
        let _ = writeln!(
            out,
            "      <property name=\"server\" value=\"{}\"/>",
            xml_escape(&self.server)
        );
        let _ = writeln!(out, "    </properties>");
        for row in &self.rows {
            let _ = writeln!(
                out,
                "    <testcase name=\"{}\" classname=\"{SUITE}\" time=\"{}\">",
                xml_escape(&row.key()),
                secs(row.elapsed)
            );
            match row.status {
                Status::Fail => {
                    let _ = writeln!(
                        out,
                        "      <failure message=\"{}\" type=\"FAIL\">{}</failure>",
                        xml_escape(&row.value),
                        xml_escape(row.detail.as_deref().unwrap_or(&row.value))
                    );
                }
                Status::Skip => {
                    let _ = writeln!(
                        out,
                        "      <skipped message=\"{}\"/>",
                        xml_escape(&row.value)
                    );
                }
                Status::Pass | Status::Warn => {}
            }
            let _ = writeln!(
                out,
                "      <system-out>{}</system-out>",
                xml_escape(&row_text(row))
            );
            let _ = writeln!(out, "    </testcase>");
        }
        let _ = writeln!(out, "  </testsuite>");
        let _ = writeln!(out, "</testsuites>");
        out
    }

    /// The Markdown summary: a heading, one table line per row, a verdict line.
    pub(crate) fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "### mcp-stdio check: {}", md_cell(&self.server));
        let _ = writeln!(out);
        let _ = writeln!(out, "| # | Check | Result | Value | Why |");
        let _ = writeln!(out, "|---:|---|---|---|---|");
        for row in &self.rows {
            let mark = match row.status {
                Status::Pass => "✅",
                Status::Warn => "⚠️",
                Status::Fail => "❌",
                Status::Skip => "⏭️",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {mark} {} | {} | {} |",
                row.number,
                md_cell(&row.label()),
                row.status.label(),
                md_cell(&row.value),
                md_cell(row.detail.as_deref().unwrap_or(""))
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "**{}**", self.verdict("→"));
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::check::report::RowSpec;

    fn report() -> Report {
        let spec = RowSpec {
            id: "a<&\"'>b",
            title: "x | y",
        };
        let rows = vec![
            Row::new(spec, Status::Pass, "1 ms").timed(Duration::from_millis(1500)),
            Row::new(spec, Status::Warn, "w").detail("why <warn>"),
            Row::new(spec, Status::Fail, "bad \"quote\" & 'apos'").detail("line1\nline2 | x"),
            Row::new(spec, Status::Skip, "no --large-tool given"),
        ];
        Report::new(
            "srv --flag='<x>'".into(),
            false,
            rows,
            Duration::from_secs(2),
        )
    }

    #[test]
    fn xml_escape_covers_markup_quotes_and_forbidden_controls() {
        assert_eq!(
            xml_escape(r#"<a href="x">&'y'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;y&apos;&lt;/a&gt;"
        );
        assert_eq!(xml_escape("a\tb\nc\rd"), "a\tb\nc\rd");
        assert_eq!(xml_escape("nul\0bell\u{7}"), "nul\u{FFFD}bell\u{FFFD}");
        assert_eq!(xml_escape("plain é ✓"), "plain é ✓");
    }

    #[test]
    fn junit_has_one_testcase_per_row_and_counts_that_match() {
        let xml = report().to_junit();
        assert_eq!(xml.matches("<testcase ").count(), 4, "{xml}");
        assert_eq!(xml.matches("</testcase>").count(), 4, "{xml}");
        assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
        assert_eq!(xml.matches("<skipped ").count(), 1, "{xml}");
        assert!(xml.contains("tests=\"4\" failures=\"1\" errors=\"0\" skipped=\"1\""));
        assert!(xml.contains("time=\"1.500\""), "{xml}");
        assert!(
            xml.contains("name=\"a&lt;&amp;&quot;&apos;&gt;b\""),
            "{xml}"
        );
        assert!(
            xml.contains("message=\"bad &quot;quote&quot; &amp; &apos;apos&apos;\""),
            "{xml}"
        );
        assert!(xml.contains("WARN x | y: w\nwhy &lt;warn&gt;"), "{xml}");
        assert!(
            xml.contains("value=\"srv --flag=&apos;&lt;x&gt;&apos;\""),
            "{xml}"
        );
        // No raw markup from the rows leaked: every `<` opens one of our elements.
        for tag in xml.split('<').skip(1) {
            let name: String = tag
                .trim_start_matches(['/', '?'])
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            assert!(
                [
                    "xml",
                    "testsuites",
                    "testsuite",
                    "properties",
                    "property",
                    "testcase",
                    "failure",
                    "skipped",
                    "system-out"
                ]
                .contains(&name.as_str()),
                "unexpected element {name:?} in {xml}"
            );
        }
    }

    #[test]
    fn markdown_has_one_table_line_per_row_and_no_broken_cells() {
        let md = report().to_markdown();
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
        // The header and one line per row; the separator starts with `|-`.
        assert_eq!(lines.len(), 1 + 4, "{md}");
        for line in &lines[1..] {
            let unescaped = line.replace("\\|", "");
            assert_eq!(unescaped.matches('|').count(), 6, "{line}");
        }
        assert!(md.contains("❌ FAIL"), "{md}");
        assert!(md.contains("line1 line2 \\| x"), "{md}");
        assert!(md.contains("why &lt;warn&gt;"), "{md}");
        assert!(md.contains("1 FAIL, 1 SKIP → FAILED**"), "{md}");
    }
}
