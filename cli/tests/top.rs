//! `mcp-stdio top` in a real terminal (tmux): it lists the running guards,
//! sorts on a key, shows a server's stderr on Enter, and quits on `q`.
#![cfg(target_os = "linux")]

#[path = "support/guarded.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{fixture_server, guard_bin, guard_command, tmp, Guarded};

/// A tmux server of the test's own (`-L`), one session running `top`.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux")
    }

    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Waits until the pane shows what `done` wants; returns it.
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            let pane = self.pane();
            if done(&pane) {
                return pane;
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "{what}; the pane:\n{pane}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success());
    }

    fn alive(&self) -> bool {
        self.run(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

#[test]
fn f3_top_lists_sorts_shows_stderr_and_quits() {
    let tmux = Command::new("tmux")
        .arg("-V")
        .output()
        .map_err(|e| format!("tmux: {e}"));
    let test = "f3_top_lists_sorts_shows_stderr_and_quits";
    if mcp_stdio_tests::interop::require(test, tmux).is_none() {
        return;
    }
    let base = tmp("xdg");
    std::fs::create_dir(base.path()).expect("base");
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).expect("0700");
    let xdg = base.path().to_str().expect("utf-8").to_owned();
    let start = |name: &str| {
        let cmd = guard_command(
            &["--name", name],
            &[&fixture_server()],
            &[("XDG_RUNTIME_DIR", &xdg)],
        );
        let mut g = Guarded::spawn(cmd);
        g.initialize();
        g
    };
    let alpha = start("alpha");
    let mut beta = start("beta");
    for id in 1..=5 {
        beta.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        beta.reply(id);
    }
    let sock = |g: &Guarded| base.path().join(format!("mcp-stdio/{}.sock", g.child.id()));
    let t = Instant::now();
    while !(sock(&alpha).exists() && sock(&beta).exists()) {
        assert!(t.elapsed() < Duration::from_secs(10), "status sockets");
        std::thread::sleep(Duration::from_millis(20));
    }

    let tmux = Tmux {
        socket: format!("mcp-stdio-top-{}", std::process::id()),
    };
    let command = format!(
        "env XDG_RUNTIME_DIR={xdg} {} top --interval 0.2",
        guard_bin()
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "160",
        "-y",
        "30",
        &command,
    ]);
    assert!(started.status.success(), "{started:?}");
    let t = Instant::now();
    let pane = tmux.wait_for("both guards listed", |p| {
        p.contains("alpha") && p.contains("beta")
    });
    eprintln!(
        "top listed 2 guards {:.0} ms after it started",
        t.elapsed().as_secs_f64() * 1e3
    );
    assert!(pane.contains("2 guard(s)"), "{pane}");
    assert!(pane.contains("NAME") && pane.contains("CPU%"), "{pane}");

    let row = |pane: &str, name: &str| {
        pane.lines()
            .position(|l| l.contains(name))
            .unwrap_or(usize::MAX)
    };
    tmux.keys(&["a"]);
    let pane = tmux.wait_for("sorted by name", |p| p.contains("sorted by name"));
    assert!(row(&pane, "alpha") < row(&pane, "beta"), "{pane}");
    tmux.keys(&["n"]);
    let pane = tmux.wait_for("sorted by calls", |p| p.contains("sorted by calls"));
    assert!(
        row(&pane, "beta") < row(&pane, "alpha"),
        "beta has more calls:\n{pane}"
    );

    // The first row (beta) is selected: Enter shows its stderr.
    tmux.keys(&["Enter"]);
    let pane = tmux.wait_for("beta's stderr", |p| p.contains("beta (guard"));
    assert!(pane.contains("fixture: started pid"), "{pane}");
    tmux.keys(&["Escape"]);
    tmux.wait_for("the table again", |p| p.contains("CPU%"));

    tmux.keys(&["q"]);
    let t = Instant::now();
    while tmux.alive() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "top did not quit on q"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    alpha.close();
    beta.close();
}
