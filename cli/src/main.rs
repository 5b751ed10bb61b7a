//! `mcp-stdio`, the command-line tool (issue 6): not built yet.

fn main() {
    eprintln!(
        "mcp-stdio: the command-line tool is not built yet (see the README's status section)"
    );
    std::process::exit(2);
}
