//! The G1 baseline: a "host" that spawns the fixture server with plain
//! `std::process::Command` and never reads its stdout. It exists to show
//! that the G1 test can fail: with this host, the server sticks in `write()`.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::LeakCheck;
use crate::{fixture_server_path, wait_until, ProcessGroupGuard};

/// A fixture server whose stdout nobody reads; its stderr is read on a thread.
#[derive(Debug)]
pub struct UnreadStdoutHost {
    guard: ProcessGroupGuard,
    stdin: ChildStdin,
    /// Held open and never read.
    _stdout: ChildStdout,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl UnreadStdoutHost {
    /// Spawns the fixture server in its own process group, tagged for `leaks`.
    ///
    /// # Panics
    /// When the spawn fails.
    pub fn spawn(leaks: &mut LeakCheck) -> Self {
        let mut cmd = Command::new(fixture_server_path());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        leaks.tag_std(&mut cmd);
        let mut child = cmd.spawn().expect("spawn the fixture server");
        leaks.watch_group(child.id());
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut buf = [0_u8; 16 * 1024];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                sink.lock()
                    .expect("stderr lock")
                    .extend_from_slice(&buf[..n]);
            }
        });
        Self {
            guard: ProcessGroupGuard::new(child),
            stdin,
            _stdout: stdout,
            stderr,
        }
    }

    /// The server's pid (= its process group).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.guard.pgid()
    }

    /// Writes one message line to the server's stdin.
    ///
    /// # Panics
    /// When the write fails.
    pub fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).expect("a Value serializes");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("write to the server");
        self.stdin.flush().expect("flush");
    }

    /// Whether the server's stderr so far contains `needle`.
    #[must_use]
    pub fn stderr_has(&self, needle: &str) -> bool {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock")).contains(needle)
    }

    /// Waits until stderr contains `needle`.
    ///
    /// # Panics
    /// On timeout, with the stderr text.
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) -> Duration {
        wait_until(timeout, Duration::from_millis(5), || {
            self.stderr_has(needle)
        })
        .unwrap_or_else(|| {
            panic!(
                "stderr lacks {needle:?} after {timeout:?}:\n{}",
                String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock"))
            )
        })
    }

    /// Whether the server is still running.
    ///
    /// # Panics
    /// When `waitpid` fails.
    pub fn is_running(&mut self) -> bool {
        self.guard.child().try_wait().expect("try_wait").is_none()
    }

    /// What each of the server's threads waits in (`/proc/<pid>/task/*/wchan`);
    /// informational, since some kernels hide it (`0`).
    #[must_use]
    pub fn thread_wchans(&self) -> Vec<String> {
        std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .map(|d| {
                d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("wchan")).ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}
