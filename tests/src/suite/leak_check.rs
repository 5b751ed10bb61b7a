//! "No leftovers", checked exactly: every process a case starts carries a tag
//! in its environment, which every descendant inherits — including one that
//! left the process group or the session (`setsid`), which a process-group
//! check cannot see. A case ends with [`LeakCheck::assert_none_left`]; a case
//! that fails earlier still kills what it started, from `Drop`.

use std::fs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_stdio_core::CommandSpec;

use crate::adapter::Adapter;
use crate::{group_members, pid_alive, signal_group, signal_pid, wait_until, Signal};

/// The environment variable that carries a case's tag.
pub const TAG_VAR: &str = "MCP_STDIO_SUITE_TAG";

/// How long processes may take to disappear after a case is done with them.
const LEFTOVER_BOUND: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// The processes one case started: a unique environment tag plus the process
/// groups it watches. Dropping it unchecked (a failed assertion) SIGKILLs
/// every tagged process and watched group.
#[derive(Debug)]
pub struct LeakCheck {
    tag: String,
    groups: Vec<u32>,
    checked: bool,
}

impl LeakCheck {
    /// A fresh tag for one case of adapter `A`.
    #[must_use]
    pub fn new<A: Adapter>(case: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self {
            tag: format!("{}/{case}/{}/{n}", A::NAME, std::process::id()),
            groups: Vec::new(),
            checked: false,
        }
    }

    /// Tags a command this case is about to spawn through an adapter.
    pub fn tag(&self, spec: &mut CommandSpec) {
        spec.env(TAG_VAR, &self.tag);
    }

    /// Tags a command this case spawns itself.
    pub fn tag_std(&self, cmd: &mut std::process::Command) {
        cmd.env(TAG_VAR, &self.tag);
    }

    /// Also checks (and on failure kills) process group `pgid`.
    pub fn watch_group(&mut self, pgid: u32) {
        self.groups.push(pgid);
    }

    /// Live processes carrying this case's tag.
    #[must_use]
    pub fn tagged(&self) -> Vec<u32> {
        let wanted = format!("{TAG_VAR}={}", self.tag).into_bytes();
        let me = std::process::id();
        let Ok(dir) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me)
            .filter(|&pid| {
                // Unreadable (another user) or gone: not ours.
                fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == wanted))
            })
            .filter(|&pid| pid_alive(pid))
            .collect()
    }

    /// Live tagged processes whose command line contains `needle`.
    #[must_use]
    pub fn tagged_running(&self, needle: &str) -> Vec<u32> {
        self.tagged()
            .into_iter()
            .filter(|&pid| cmdline(pid).contains(needle))
            .collect()
    }

    /// Everything of this case still alive: tagged processes and members of
    /// watched groups.
    #[must_use]
    pub fn leftovers(&self) -> Vec<u32> {
        let mut all = self.tagged();
        for &g in &self.groups {
            for pid in group_members(g) {
                if !all.contains(&pid) {
                    all.push(pid);
                }
            }
        }
        all
    }

    /// Waits (bounded) until nothing of this case is left; panics naming the
    /// survivors (after killing them). Returns how long the wait took.
    pub fn assert_none_left(mut self) -> Duration {
        self.checked = true;
        if let Some(took) = wait_until(LEFTOVER_BOUND, POLL, || self.leftovers().is_empty()) {
            return took;
        }
        let left: Vec<String> = self
            .leftovers()
            .into_iter()
            .map(|p| format!("{p} ({})", cmdline(p)))
            .collect();
        self.kill_all();
        panic!(
            "processes left {LEFTOVER_BOUND:?} after the case ended: {left:?} (groups {:?})",
            self.groups
        );
    }

    /// SIGKILLs every watched group and tagged process.
    pub fn kill_all(&self) {
        for &g in &self.groups {
            let _ = signal_group(g, Signal::SIGKILL);
        }
        for pid in self.tagged() {
            let _ = signal_pid(pid, Signal::SIGKILL);
        }
    }
}

impl Drop for LeakCheck {
    fn drop(&mut self) {
        if !self.checked {
            self.kill_all();
        }
    }
}

/// The command line of `pid`, arguments joined by spaces ("" when gone).
#[must_use]
pub fn cmdline(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\0')
                .replace('\0', " ")
        })
        .unwrap_or_default()
}
