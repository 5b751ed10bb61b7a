//! The fixture server of the tests crate, built for tests that cannot rely
//! on it being built already (`#[path]`-included by the test files that
//! need it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The fixture server of the tests crate. Cargo builds only this package's
/// binaries for its tests, so it is built here (once), then located.
/// `MCP_STDIO_FIXTURE_SERVER` overrides both steps.
pub(crate) fn fixture_server() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("MCP_STDIO_FIXTURE_SERVER") {
            return PathBuf::from(p);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the cli crate lives inside the workspace");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let built = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "mcp-stdio-tests",
                "--bin",
                "fixture-server",
            ])
            .current_dir(root)
            .status();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map_or_else(|| root.join("target"), |t| root.join(t));
        let path = target.join("debug").join("fixture-server");
        assert!(
            path.is_file(),
            "fixture-server not found at {} (building it: {built:?}); run \
             `cargo build -p mcp-stdio-tests --bins` or set MCP_STDIO_FIXTURE_SERVER",
            path.display()
        );
        path
    })
    .clone()
}
