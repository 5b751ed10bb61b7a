//! The host-config snippets and CI example of the README and of the guide's
//! "In MCP hosts and in CI" page: every JSON block parses, has its host's shape, and puts
//! `mcp-stdio guard` in front of a server with flags the guard knows, launched
//! as the installed binary (`"command": "mcp-stdio"`: nothing is published
//! yet, so `npx -y mcp-stdio` and `uvx --from mcp-stdio-cli mcp-stdio`, whose
//! names are checked against `packaging/`, are for after the first release);
//! so does the `claude mcp add` line; the CI example installs with cargo from
//! the repository and uses flags `check` knows.
//!
//! The README's Rust quick starts: each is a file of `examples/` that CI
//! builds, shown whole where the README says "A whole `src/main.rs`", else as
//! lines of it in order; every crate the file uses is in the `[dependencies]`
//! lines shown before it, tokio with the features `#[tokio::main]` needs, our
//! crates from the repository the workspace names.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-stdio");
/// The version a snippet may pin (`mcp-stdio@V`, `mcp-stdio-cli==V`): the packages carry the crate's.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The npm package that launches the binary (`packaging/npm/mcp-stdio/package.json`).
const NPM_PACKAGE: &str = "mcp-stdio";
/// The PyPI distribution that carries it (`packaging/python/pyproject.toml`).
const PYPI_PACKAGE: &str = "mcp-stdio-cli";
/// How every host config launches the guard until the first release: the
/// binary `cargo install` put on the `PATH`.
const INSTALLED: &str = "mcp-stdio";

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
        [INSTALLED],
        "until the first release, every host config runs the installed binary"
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
        assert_eq!(*command, INSTALLED, "the installed binary: {line}");
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
    assert_installs_from_the_repository("the guide's workflow", yaml);
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
        assert_eq!(assert_guarded("README", entry, &guard_help), INSTALLED);
    }
    // The CI lines install with cargo and run `check` with flags it knows.
    let check_help = help("check");
    let ci = section_of(&text, "### Run `check` in CI");
    assert_installs_from_the_repository("the README's CI quick start", &ci);
    let line = ci
        .lines()
        .find(|l| l.starts_with("mcp-stdio check ") && l.contains("--junit"))
        .expect("a check line with --junit");
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
            assert_eq!(assert_guarded(&name, server, &guard_help), INSTALLED);
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
        .split("mcp-stdio check")
        .last()
        .expect("split yields a part")
        .split(" -- ")
        .next()
        .expect("split yields a part")
        .split_whitespace()
        .filter(|w| w.starts_with("--") && *w != "--")
        .collect();
    assert!(flags.contains(&"--junit"), "{flags:?}");
    for flag in flags {
        assert!(check_help.contains(flag), "check has no {flag}");
    }
    assert_installs_from_the_repository("examples/ci/mcp-check.yml", &text);
}

/// The workspace's `repository` (`Cargo.toml`): the URL every install line names.
fn repository() -> String {
    quoted_value("Cargo.toml", "repository")
}

/// The part of `text` under `heading` (a whole line), up to the next heading of the
/// same or a higher level.
fn section_of(text: &str, heading: &str) -> String {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("no heading `{heading}`"));
    text.lines()
        .skip(start + 1)
        .take_while(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            !(hashes > 0 && hashes <= level && l[hashes..].starts_with(' '))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` installs `mcp-stdio` with cargo from the workspace's repository.
fn assert_installs_from_the_repository(what: &str, text: &str) {
    let line = format!(
        "cargo install --locked --git {} mcp-stdio-cli",
        repository()
    );
    assert!(text.contains(&line), "{what} installs by `{line}`:\n{text}");
    for registry in ["npm install -g mcp-stdio", "pip install mcp-stdio-cli"] {
        assert!(
            !text.contains(registry),
            "{what}: `{registry}` does not work before the first release"
        );
    }
}

/// The install lines of the README, the guide and the packages name one repository.
#[test]
fn readme_install_lines_name_the_workspace_repository() {
    let repo = repository();
    assert!(repo.starts_with("https://github.com/"), "{repo}");
    let install = section_of(&readme(), "## Install");
    assert!(
        install.contains(&format!("git clone {repo} && cd mcp-stdio")),
        "the README clones {repo}:\n{install}"
    );
    assert!(
        install.contains("cargo install --locked --path cli"),
        "{install}"
    );
    assert!(
        install.contains(&format!(
            "cargo install --locked --git {repo} mcp-stdio-cli"
        )),
        "{install}"
    );
    // The registries' lines come after the checkout's, marked as the first release's.
    let registries = install
        .find("npx -y mcp-stdio")
        .expect("the npm line is kept");
    let release = install
        .find("After the first release")
        .expect("the registries' lines are marked");
    assert!(
        release < registries && install.find("--path cli").is_some_and(|c| c < release),
        "the README leads with what works today:\n{install}"
    );
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../guide/src/install.md"
    ))
    .expect("the guide's install page");
    assert!(guide.contains(&format!("git clone {repo} && cd mcp-stdio")));
    assert!(
        !guide.contains("<repository URL>"),
        "the guide names the URL"
    );
    let npm = quoted_value("packaging/npm/mcp-stdio/package.json", "\"url\"");
    assert_eq!(
        npm,
        format!("git+{repo}.git"),
        "the npm package's repository"
    );
    assert_eq!(
        quoted_value("packaging/python/pyproject.toml", "Repository"),
        repo,
        "the wheel's repository"
    );
}

/// A fenced block of the README and what precedes it since the block before.
struct Block {
    lang: String,
    body: String,
    prose: String,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut prose = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(lang) = line.strip_prefix("```") {
            let mut body = String::new();
            for l in lines.by_ref() {
                if l.starts_with("```") {
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            out.push(Block {
                lang: lang.to_owned(),
                body,
                prose: std::mem::take(&mut prose),
            });
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    out
}

/// The crates a Rust file names by path (`name::…`), but the standard library's.
fn crates_used(code: &str) -> std::collections::BTreeSet<String> {
    let mut used = std::collections::BTreeSet::new();
    for (i, _) in code.match_indices("::") {
        let name: String = code[..i]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let before = code[..i - name.len()].chars().next_back();
        let first_segment = before.is_none_or(|c| c != ':');
        if first_segment
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !["std", "core", "alloc", "crate", "self", "super"].contains(&name.as_str())
        {
            used.insert(name.replace('_', "-"));
        }
    }
    used
}

/// `[dependencies]` lines: each crate's name and the rest of its line.
fn dependencies(toml: &str) -> std::collections::BTreeMap<String, String> {
    toml.lines()
        .filter(|l| !l.starts_with('[') && !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (name, spec) = l.split_once('=')?;
            // Cargo takes `serde_json` and `serde-json` alike.
            Some((name.trim().replace('_', "-"), spec.trim().to_owned()))
        })
        .collect()
}

/// The README's Rust quick starts are the compiled `examples/quickstart_*.rs`.
#[test]
fn readme_rust_quick_starts_are_the_compiled_examples() {
    let text = section_of(&readme(), "## Quick starts");
    let repo = repository();
    let rmcp_version = quoted_value("adapter-rmcp/Cargo.toml", "rmcp = { version")
        .split('"')
        .next()
        .expect("a version")
        .to_owned();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut shown = std::collections::BTreeSet::new();
    let mut deps = None;
    // The prose since the last Rust block: a quick start's link may come before its toml.
    let mut prose = String::new();
    for block in blocks(&text) {
        prose.push_str(&block.prose);
        if block.lang == "toml" {
            deps = Some(dependencies(&block.body));
            continue;
        }
        if block.lang != "rust" {
            continue;
        }
        let prose = std::mem::take(&mut prose);
        let name = prose
            .split("(examples/")
            .skip(1)
            .find_map(|s| s.split(')').next().filter(|f| f.starts_with("quickstart_")))
            .unwrap_or_else(|| {
                panic!("a Rust quick start links its examples/quickstart_*.rs:\n{prose}")
            });
        let file = std::fs::read_to_string(format!("{examples}/{name}"))
            .unwrap_or_else(|e| panic!("examples/{name}: {e}"));
        if prose.contains("A whole `src/main.rs`") {
            assert_eq!(
                block.body, file,
                "the README shows examples/{name} whole: copy the file into the README"
            );
        } else {
            // Lines of the file, in order (indentation aside).
            let mut rest = file.lines().map(str::trim);
            for line in block.body.lines().map(str::trim).filter(|l| !l.is_empty()) {
                assert!(
                    rest.any(|l| l == line),
                    "the README's `{line}` is not (in this order) in examples/{name}"
                );
            }
            assert!(block.body.lines().count() >= 5, "{}", block.body);
        }
        let deps = deps
            .as_ref()
            .unwrap_or_else(|| panic!("[dependencies] lines before examples/{name}"));
        for krate in crates_used(&file) {
            let spec = deps.get(&krate).unwrap_or_else(|| {
                panic!(
                    "examples/{name} uses {krate}: the README's [dependencies] lack it: {deps:?}"
                )
            });
            if krate.starts_with("mcp-stdio") {
                assert!(
                    spec.contains(&format!("git = \"{repo}\"")),
                    "{krate} from the repository: {spec}"
                );
            }
            if krate == "rmcp" {
                assert!(spec.contains(&format!("\"{rmcp_version}\"")), "{spec}");
                if file.contains("#[tool_router]") {
                    assert!(spec.contains("\"macros\""), "rmcp's macros: {spec}");
                }
            }
        }
        if file.contains("#[tokio::main]") {
            let tokio = &deps["tokio"];
            for feature in ["\"macros\"", "\"rt-multi-thread\""] {
                assert!(tokio.contains(feature), "tokio needs {feature}: {tokio}");
            }
        }
        shown.insert(name.to_owned());
    }
    let mut files: Vec<String> = std::fs::read_dir(examples)
        .expect("examples/")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|f| f.starts_with("quickstart_") && f.ends_with(".rs"))
        .collect();
    files.sort();
    assert_eq!(
        shown.into_iter().collect::<Vec<_>>(),
        files,
        "the README shows every quick start, each once"
    );
}
