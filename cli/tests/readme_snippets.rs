//! The README's host-config snippets and CI example: every JSON block of the
//! "In MCP hosts and in CI" section parses, has its host's shape, and puts
//! `mcp-stdio guard` in front of a server with flags the guard knows; the CI
//! example uses flags `check` knows.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-stdio");
const SECTION: &str = "## In MCP hosts and in CI";

/// The README section's text, up to the next top-level (`## `) heading.
fn section() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("the README is readable");
    let start = readme
        .find(&format!("\n{SECTION}\n"))
        .unwrap_or_else(|| panic!("the README has a `{SECTION}` section"));
    let body = &readme[start + 1 + SECTION.len()..];
    let end = body.find("\n## ").unwrap_or(body.len());
    body[..end].to_owned()
}

/// The fenced blocks of `lang` in `text`, in order.
fn fenced(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let end = after
            .find("\n```")
            .unwrap_or_else(|| panic!("an unclosed ```{lang} block: {after}"));
        blocks.push(after[..end + 1].to_owned());
        rest = &after[end + 4..];
    }
    blocks
}

fn help(sub: &str) -> String {
    let out = Command::new(BIN)
        .args([sub, "--help"])
        .output()
        .expect("mcp-stdio runs");
    assert!(out.status.success(), "{sub} --help");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// Checks one server entry: `mcp-stdio guard [flags known to guard] -- SERVER …`.
fn assert_guarded(host: &str, entry: &Value, guard_help: &str) {
    assert_eq!(entry["command"], "mcp-stdio", "{host}: {entry:#}");
    let args: Vec<&str> = entry["args"]
        .as_array()
        .unwrap_or_else(|| panic!("{host}: args is an array: {entry:#}"))
        .iter()
        .map(|a| a.as_str().expect("every arg is a string"))
        .collect();
    assert_eq!(args.first(), Some(&"guard"), "{host}: {args:?}");
    let dashes = args
        .iter()
        .position(|a| *a == "--")
        .unwrap_or_else(|| panic!("{host}: the server command follows `--`: {args:?}"));
    assert!(
        dashes + 1 < args.len(),
        "{host}: a server command after `--`"
    );
    for flag in args[1..dashes].iter().filter(|a| a.starts_with("--")) {
        assert!(
            guard_help.contains(&format!("{flag} ")),
            "{host}: `{flag}` is not a guard flag"
        );
    }
}

#[test]
fn readme_host_snippets_are_valid_json_with_each_hosts_shape() {
    let text = section();
    let blocks = fenced(&text, "json");
    assert_eq!(blocks.len(), 3, "Claude Desktop, VS Code, Cursor: {text}");
    let guard_help = help("guard");
    let docs: Vec<Value> = blocks
        .iter()
        .map(|b| serde_json::from_str(b).unwrap_or_else(|e| panic!("not valid JSON ({e}):\n{b}")))
        .collect();
    let hosts = [
        ("claude_desktop_config.json", "mcpServers"),
        (".vscode/mcp.json", "servers"),
        (".cursor/mcp.json", "mcpServers"),
    ];
    for ((host, key), doc) in hosts.iter().zip(&docs) {
        assert!(text.contains(host), "the section names {host}");
        let servers = doc[key]
            .as_object()
            .unwrap_or_else(|| panic!("{host}: `{key}` is an object: {doc:#}"));
        assert!(!servers.is_empty(), "{host}");
        for entry in servers.values() {
            if *key == "servers" {
                assert_eq!(entry["type"], "stdio", "{host}: {entry:#}");
            }
            assert_guarded(host, entry, &guard_help);
        }
    }
    eprintln!("{} host snippets checked", docs.len());
}

#[test]
fn readme_ci_example_runs_check_with_flags_it_knows() {
    let text = section();
    let blocks = fenced(&text, "yaml");
    assert_eq!(blocks.len(), 1, "one CI workflow: {text}");
    let yaml = &blocks[0];
    let check_help = help("check");
    assert!(
        yaml.contains("mcp-stdio check") && yaml.contains(">> \"$GITHUB_STEP_SUMMARY\""),
        "{yaml}"
    );
    let command: String = yaml
        .split("mcp-stdio check")
        .last()
        .expect("found above")
        .split(" -- ")
        .next()
        .expect("split yields a part")
        .to_owned();
    let flags: Vec<&str> = command
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .collect();
    for needed in ["--junit", "--markdown"] {
        assert!(flags.contains(&needed), "{needed} in {command}");
    }
    for flag in flags {
        assert!(
            check_help.contains(&format!("{flag} ")) || check_help.contains(&format!("{flag}\n")),
            "`{flag}` is not a check flag"
        );
    }
}
