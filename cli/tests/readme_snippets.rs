//! The host-config snippets and CI example of the README and of the guide's
//! "In MCP hosts and in CI" page: every JSON block parses, has its host's shape, and puts
//! `mcp-stdio guard` in front of a server with flags the guard knows, launched
//! the ways the packages install it (the binary on the `PATH`, `npx -y
//! mcp-stdio`, `uvx --from mcp-stdio-cli mcp-stdio`: names checked against
//! `packaging/`); so does the `claude mcp add` line; the CI example uses flags
//! `check` knows.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-stdio");
/// The version a snippet may pin (`mcp-stdio@V`, `mcp-stdio-cli==V`): the packages carry the crate's.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The npm package that launches the binary (`packaging/npm/mcp-stdio/package.json`).
const NPM_PACKAGE: &str = "mcp-stdio";
/// The PyPI distribution that carries it (`packaging/python/pyproject.toml`).
const PYPI_PACKAGE: &str = "mcp-stdio-cli";

/// The guide's "In MCP hosts and in CI" page.
fn section() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../guide/src/hosts-and-ci.md");
    std::fs::read_to_string(path).expect("the guide's page is readable")
}

/// The README (the front page).
fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).expect("the README is readable")
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

/// The arguments from `guard` on, past the launcher's own: none for `mcp-stdio`
/// itself, `-y mcp-stdio[@VERSION]` for npx, `--from mcp-stdio-cli[==VERSION]
/// mcp-stdio` for uvx.
fn after_launcher<'a>(host: &str, command: &str, args: &'a [&'a str]) -> &'a [&'a str] {
    let pkg = args.get(1).copied().unwrap_or_default();
    let prefix: Vec<&str> = match command {
        "mcp-stdio" => vec![],
        "npx" => {
            assert!(
                pkg == NPM_PACKAGE || pkg == format!("{NPM_PACKAGE}@{VERSION}"),
                "{host}: npx runs {NPM_PACKAGE} (or {NPM_PACKAGE}@{VERSION}): {args:?}"
            );
            vec!["-y", pkg]
        }
        "uvx" => {
            assert!(
                pkg == PYPI_PACKAGE || pkg == format!("{PYPI_PACKAGE}=={VERSION}"),
                "{host}: uvx takes the command from {PYPI_PACKAGE} (or {PYPI_PACKAGE}=={VERSION}): {args:?}"
            );
            vec!["--from", pkg, "mcp-stdio"]
        }
        other => panic!("{host}: the guard is launched by mcp-stdio, npx or uvx, not `{other}`"),
    };
    assert!(
        args.starts_with(&prefix),
        "{host}: `{command}` args begin {prefix:?}: {args:?}"
    );
    &args[prefix.len()..]
}

/// Checks one launch: `COMMAND [launcher args] guard [flags known to guard] -- SERVER …`.
fn assert_guarded_argv(host: &str, command: &str, args: &[&str], guard_help: &str) {
    let args = after_launcher(host, command, args);
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
            names_flag(guard_help, flag),
            "{host}: `{flag}` is not a guard flag"
        );
    }
}

/// Whether `help` lists `flag` as a whole word (followed by a space, a
/// newline, `=` or `,`, not by more of a longer flag's name).
fn names_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        help[i + flag.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '-' || c == '_'))
    })
}

/// Checks one server entry of a host's JSON; returns its command.
fn assert_guarded(host: &str, entry: &Value, guard_help: &str) -> String {
    let command = entry["command"]
        .as_str()
        .unwrap_or_else(|| panic!("{host}: command is a string: {entry:#}"));
    let args: Vec<&str> = entry["args"]
        .as_array()
        .unwrap_or_else(|| panic!("{host}: args is an array: {entry:#}"))
        .iter()
        .map(|a| a.as_str().expect("every arg is a string"))
        .collect();
    assert_guarded_argv(host, command, &args, guard_help);
    command.to_owned()
}

/// The value of `key = "…"` in a TOML or JSON file of the repository (first match).
fn quoted_value(path: &str, key: &str) -> String {
    let text = std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .map(str::trim)
        .find_map(|l| {
            let rest = l.strip_prefix(key)?.trim_start();
            let rest = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':'))?;
            Some(
                rest.trim()
                    .trim_end_matches(',')
                    .trim_matches('"')
                    .to_owned(),
            )
        })
        .unwrap_or_else(|| panic!("{path} has {key}"))
}

#[test]
fn readme_launch_names_are_the_packages_names() {
    assert_eq!(
        quoted_value("packaging/npm/mcp-stdio/package.json", "\"name\""),
        NPM_PACKAGE
    );
    assert_eq!(
        quoted_value("packaging/python/pyproject.toml", "name"),
        PYPI_PACKAGE
    );
}

#[test]
fn readme_host_snippets_are_valid_json_with_each_hosts_shape() {
    let text = section();
    let blocks = fenced(&text, "json");
    assert_eq!(
        blocks.len(),
        5,
        "Claude Desktop (plain and sandboxed), Claude Code, VS Code, Cursor: {text}"
    );
    let guard_help = help("guard");
    let docs: Vec<Value> = blocks
        .iter()
        .map(|b| serde_json::from_str(b).unwrap_or_else(|e| panic!("not valid JSON ({e}):\n{b}")))
        .collect();
    let hosts = [
        ("claude_desktop_config.json", "mcpServers"),
        ("claude_desktop_config.json", "mcpServers"),
        (".mcp.json", "mcpServers"),
        (".vscode/mcp.json", "servers"),
        (".cursor/mcp.json", "mcpServers"),
    ];
    let mut launchers = std::collections::BTreeSet::new();
    for ((host, key), doc) in hosts.iter().zip(&docs) {
        assert!(text.contains(host), "the section names {host}");
        let servers = doc[key]
            .as_object()
            .unwrap_or_else(|| panic!("{host}: `{key}` is an object: {doc:#}"));
        assert!(!servers.is_empty(), "{host}");
        for entry in servers.values() {
            if *key == "servers" || entry.get("type").is_some() {
                assert_eq!(entry["type"], "stdio", "{host}: {entry:#}");
            }
            launchers.insert(assert_guarded(host, entry, &guard_help));
        }
    }
    assert_eq!(
        launchers.into_iter().collect::<Vec<_>>(),
        ["mcp-stdio", "npx", "uvx"],
        "each way of launching the guard has a snippet"
    );
    eprintln!("{} host snippets checked", docs.len());
}

#[test]
fn readme_claude_code_line_adds_the_guard() {
    let text = section();
    let lines: Vec<String> = fenced(&text, "sh")
        .iter()
        .flat_map(|b| b.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.starts_with("claude mcp add "))
        .collect();
    assert!(!lines.is_empty(), "a `claude mcp add` line: {text}");
    let guard_help = help("guard");
    for line in &lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let dashes = words
            .iter()
            .position(|w| *w == "--")
            .unwrap_or_else(|| panic!("the server's command follows `--`: {line}"));
        assert!(dashes >= 4, "`claude mcp add NAME -- …`: {line}");
        let command = words
            .get(dashes + 1)
            .unwrap_or_else(|| panic!("a command after `--`: {line}"));
        assert_guarded_argv("claude mcp add", command, &words[dashes + 2..], &guard_help);
    }
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

#[test]
fn readme_front_page_host_config_puts_the_guard_in_front_with_flags_it_knows() {
    let text = readme();
    let blocks = fenced(&text, "json");
    assert_eq!(blocks.len(), 1, "the README has one host config");
    let doc: Value = serde_json::from_str(&blocks[0]).expect("valid JSON");
    let guard_help = help("guard");
    let servers = doc["mcpServers"].as_object().expect("mcpServers");
    for entry in servers.values() {
        assert_guarded("README", entry, &guard_help);
    }
    // The CI line runs `check` with flags it knows.
    let check_help = help("check");
    let line = text
        .lines()
        .find(|l| l.starts_with("mcp-stdio check "))
        .expect("a check line");
    for flag in line
        .split_whitespace()
        .filter(|w| w.starts_with("--") && *w != "--")
    {
        assert!(check_help.contains(flag), "check has no {flag}");
    }
}

/// The persona examples' host configs (`examples/host-config/*.json`): each
/// host's shape, the guard in front with flags it knows.
#[test]
fn examples_host_configs_put_the_guard_in_front_with_flags_it_knows() {
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/host-config");
    let guard_help = help("guard");
    let mut checked = 0;
    for entry in std::fs::read_dir(folder).expect("the examples' host-config folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.display().to_string();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("readable"))
            .unwrap_or_else(|e| panic!("{name}: not valid JSON ({e})"));
        let (key, stdio_type) = if doc.get("servers").is_some() {
            ("servers", true)
        } else {
            ("mcpServers", false)
        };
        let servers = doc[key]
            .as_object()
            .unwrap_or_else(|| panic!("{name}: no {key}"));
        for server in servers.values() {
            if stdio_type {
                assert_eq!(server["type"], "stdio", "{name}");
            }
            assert_guarded(&name, server, &guard_help);
            checked += 1;
        }
    }
    assert!(checked >= 5, "{checked} entries checked");
}

/// The persona example's CI workflow runs `check` with flags it knows.
#[test]
fn examples_ci_workflow_runs_check_with_flags_it_knows() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/ci/mcp-check.yml");
    let text = std::fs::read_to_string(path).expect("the workflow is readable");
    let guide = section();
    assert!(
        guide.contains(text.trim()),
        "examples/ci/mcp-check.yml and the guide's workflow differ"
    );
    let check_help = help("check");
    let flags: Vec<&str> = text
        .split_whitespace()
        .filter(|w| w.starts_with("--") && *w != "--")
        .collect();
    assert!(flags.contains(&"--junit"), "{flags:?}");
    for flag in flags {
        assert!(check_help.contains(flag), "check has no {flag}");
    }
}
