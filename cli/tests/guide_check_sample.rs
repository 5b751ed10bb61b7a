//! The sample output on the guide's `mcp-stdio check` page is what `check`
//! prints today: the built-in server's table (`$ mcp-stdio check`) and the
//! fixture server's (the `--large-tool big … -- target/release/fixture-server`
//! command above it) are run and compared line by line, with what changes from
//! run to run normalised: timings, pids, the exact byte count of a cut stderr,
//! and which of two equally large sessions wrote the most stderr.
//!
//! When `check`'s output changes on purpose, rewrite the samples from a real
//! run: `MCP_STDIO_BLESS_GUIDE=1 cargo test -p mcp-stdio-cli --test guide_check_sample`.

use std::process::{Child, Command, Stdio};

#[path = "support/built.rs"]
mod built;
use built::fixture_server;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-stdio");
/// The guide's page, from the cli crate.
const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guide/src/check.md");
/// How the page names the fixture server (the suite's release build).
const FIXTURE_AS_SHOWN: &str = "target/release/fixture-server";
/// The fixture server's arguments as the page's command gives them.
const FIXTURE_ARGS: [&str; 8] = [
    "--large-tool",
    "big",
    "--large-args",
    r#"{"bytes":2000000}"#,
    "--slow-tool",
    "slow",
    "--slow-args",
    r#"{"chunks":100,"delay_ms":50,"honour_cancel":true}"#,
];

/// The body of the first fenced ```text block at or after `marker` on the
/// page (a block that begins with `marker` is found too), and where it starts.
fn sample_at(page: &str, marker: &str) -> (usize, String) {
    let open = "```text\n";
    let from = page
        .find(&format!("{open}{marker}"))
        .or_else(|| page.find(marker))
        .unwrap_or_else(|| panic!("the page has `{marker}`"));
    let start = from
        + page[from..]
            .find(open)
            .unwrap_or_else(|| panic!("a text block at `{marker}`"))
        + open.len();
    let len = page[start..].find("\n```").expect("the block is closed") + 1;
    (start, page[start..start + len].to_owned())
}

/// Replaces the number before each of `units` (e.g. ` ms`) with `mark`.
fn numbers_before(line: &str, units: &[&str], mark: char) -> String {
    let mut out = String::new();
    let mut rest = line;
    'outer: while !rest.is_empty() {
        for unit in units {
            if let Some(after) = rest.strip_prefix(unit) {
                let boundary = after.chars().next().is_none_or(|c| !c.is_alphanumeric());
                let digits = out
                    .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
                    .len();
                if boundary && digits < out.len() {
                    out.truncate(digits);
                    out.push(mark);
                    // A time's unit changes with the machine's speed (45 ms, 1.02 s).
                    out.push_str(if mark == 'T' { " t" } else { unit });
                    rest = after;
                    continue 'outer;
                }
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Each number between `before` and `after` replaced with `N`.
fn number_between(line: &str, before: &str, after: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(before) {
        out.push_str(&rest[..i + before.len()]);
        rest = &rest[i + before.len()..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && rest[digits..].starts_with(after) {
            out.push('N');
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// What changes from run to run, made the same.
fn normalise(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let mut line = numbers_before(line, &[" ms", " s", " µs"], 'T');
            // A server's own log lines (their timestamps, ids) vary in length: the
            // stderr row's small sizes with them.
            if line.contains("stderr volume") {
                line = numbers_before(&line, &[" B", " KiB"], 'S');
            }
            line = number_between(&line, "pid ", "");
            line = number_between(&line, " of ", " bytes");
            // `(most: 12.0 MiB in slow reader)`: two sessions may tie.
            if let Some(i) = line.find("(most: ") {
                if let Some(j) = line[i..].find(" in ").map(|j| i + j + 4) {
                    if let Some(k) = line[j..].find(')').map(|k| j + k) {
                        line.replace_range(j..k, "…");
                    }
                }
            }
            line.trim_end().to_owned()
        })
        .collect()
}

fn spawn_check(args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("check")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mcp-stdio runs")
}

/// `check`'s stdout, and whether it exited as `code`.
fn finish(child: Child, code: i32) -> String {
    let out = child.wait_with_output().expect("check ends");
    assert_eq!(out.status.code(), Some(code), "check's exit status");
    String::from_utf8(out.stdout).expect("UTF-8 table")
}

#[test]
fn guide_check_samples_are_what_check_prints() {
    let fixture = fixture_server();
    let fixture_str = fixture.to_str().expect("a UTF-8 path");
    // Both at once: each spends most of its time waiting on its server.
    let builtin = spawn_check(&[]);
    let mut args = FIXTURE_ARGS.to_vec();
    args.extend(["--", fixture_str]);
    let healthy = spawn_check(&args);
    let builtin = format!("$ mcp-stdio check\n{}", finish(builtin, 1));
    let healthy = finish(healthy, 0).replace(fixture_str, FIXTURE_AS_SHOWN);

    let mut page = std::fs::read_to_string(PAGE).expect("the guide's check page");
    let command = format!("-- {FIXTURE_AS_SHOWN}\n");
    for arg in FIXTURE_ARGS.iter().filter(|a| !a.starts_with('-')) {
        assert!(page.contains(arg), "the page's command has {arg}");
    }
    let samples = [
        ("$ mcp-stdio check\n", builtin),
        (command.as_str(), healthy),
    ];
    if std::env::var_os("MCP_STDIO_BLESS_GUIDE").is_some() {
        for (after, actual) in &samples {
            let (start, old) = sample_at(&page, after);
            let end = start + old.len();
            page.replace_range(start..end, actual);
        }
        std::fs::write(PAGE, &page).expect("the page is writable");
        eprintln!("guide/src/check.md: samples rewritten from this run");
        return;
    }
    for (after, actual) in &samples {
        let (_, shown) = sample_at(&page, after);
        let (shown, actual) = (normalise(&shown), normalise(actual));
        for (n, (s, a)) in shown.iter().zip(&actual).enumerate() {
            assert_eq!(
                s,
                a,
                "guide/src/check.md, the sample after `{}`, line {}: not what check prints \
                 (timings and pids aside); if the change is meant, rewrite the samples: \
                 MCP_STDIO_BLESS_GUIDE=1 cargo test -p mcp-stdio-cli --test guide_check_sample",
                after.trim(),
                n + 1
            );
        }
        assert_eq!(
            shown.len(),
            actual.len(),
            "guide/src/check.md, the sample after `{}`: {} lines, check prints {}:\n{}",
            after.trim(),
            shown.len(),
            actual.len(),
            actual.join("\n")
        );
    }
}

#[test]
fn normalise_keeps_what_does_not_change() {
    assert_eq!(
        normalise(
            " 4  large response   PASS    12.0 MiB response refused at the 8.0 MiB wire limit \
             after 45 ms (discarded unparsed); then ping 4.42 ms\n10 checks in 7.4 s: 4 PASS"
        ),
        [
            " 4  large response   PASS    12.0 MiB response refused at the 8.0 MiB wire limit \
             after T t (discarded unparsed); then ping T t",
            "10 checks in T t: 4 PASS"
        ]
    );
    assert_eq!(
        normalise("1 of 6 lines; pid 20528 (mcp-stdio); kept last 16384 of 12583201 bytes"),
        ["1 of 6 lines; pid N (mcp-stdio); kept last 16384 of N bytes"]
    );
    assert_eq!(
        normalise("24.0 MiB over 8 sessions (most: 12.0 MiB in slow reader)"),
        ["24.0 MiB over 8 sessions (most: 12.0 MiB in …)"]
    );
    assert_eq!(
        normalise("0 B over 9 sessions; 3 s"),
        ["0 B over 9 sessions; T t"]
    );
    assert_eq!(
        normalise("9  stderr volume    PASS    2.6 KiB over 8 sessions (most: 553 B in handshake)"),
        ["9  stderr volume    PASS    S KiB over 8 sessions (most: S B in …)"]
    );
    assert_eq!(
        normalise("9  stderr volume    WARN    24.0 MiB over 8 sessions"),
        ["9  stderr volume    WARN    24.0 MiB over 8 sessions"]
    );
}
