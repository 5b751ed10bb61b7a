//! What the invariants look at: this process's descriptors, threads and
//! memory, its children and zombies (all from `/proc`), and the retention
//! pool's counters.

use std::path::Path;

use mcp_stdio_core::SharedRetentionPool;

/// Entries of a `/proc` directory (0 where it cannot be read).
fn entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, Iterator::count)
}

/// Open descriptors of this process.
pub(crate) fn fds() -> usize {
    entries("/proc/self/fd")
}

/// Threads of this process.
pub(crate) fn threads() -> usize {
    entries("/proc/self/task")
}

/// Names of this process's threads, counted (for a breach message).
pub(crate) fn thread_names() -> String {
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for task in dir.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            *names.entry(comm.trim().to_owned()).or_default() += 1;
        }
    }
    names
        .iter()
        .map(|(name, n)| format!("{name} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resident set size now, bytes.
pub(crate) fn rss() -> u64 {
    crate::mem::rss()
}

/// Peak resident set size of the process life (the soak never resets it), bytes.
pub(crate) fn hwm() -> u64 {
    crate::mem::peak()
}

/// A process of ours, seen in `/proc`.
#[derive(Debug, Clone)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) state: char,
    pub(crate) name: String,
}

/// `(ppid, state, comm)` of a process, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(u32, char, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: it ends at the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text[open + 1..close].to_owned();
    let mut rest = text[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((ppid, state, name))
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Our direct children (zombies included).
pub(crate) fn children() -> Vec<Proc> {
    let me = std::process::id();
    all_pids()
        .into_iter()
        .filter_map(|pid| {
            let (ppid, state, name) = stat(pid)?;
            (ppid == me).then_some(Proc { pid, state, name })
        })
        .collect()
}

/// Every live process started from one of the binaries in `dir` (the
/// fixtures, the guard) other than this one: children, their children, and
/// grandchildren that escaped to another session or parent.
pub(crate) fn ours(dir: &Path) -> Vec<Proc> {
    let me = std::process::id();
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            if exe.parent() != Some(dir) {
                return None;
            }
            let (_, state, name) = stat(pid)?;
            Some(Proc { pid, state, name })
        })
        .collect()
}

/// One look at everything the checkpoints compare.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub(crate) fds: usize,
    pub(crate) threads: usize,
    /// Direct children, zombies included.
    pub(crate) children: usize,
    pub(crate) zombies: Vec<u32>,
    /// Live processes of our binaries (escaped grandchildren included).
    pub(crate) ours: usize,
    pub(crate) rss: u64,
    pub(crate) pool_in_use: u64,
    pub(crate) pool_outstanding: u64,
}

impl Snapshot {
    pub(crate) fn take(dir: &Path) -> Self {
        let children = children();
        let pool = SharedRetentionPool::process().stats();
        Self {
            fds: fds(),
            threads: threads(),
            zombies: children
                .iter()
                .filter(|p| p.state == 'Z')
                .map(|p| p.pid)
                .collect(),
            children: children.len(),
            ours: ours(dir).iter().filter(|p| p.state != 'Z').count(),
            rss: rss(),
            pool_in_use: pool.in_use,
            pool_outstanding: pool.outstanding,
        }
    }

    /// What is still above `baseline`, if anything.
    pub(crate) fn excess(&self, baseline: &Self) -> Option<String> {
        let mut what = Vec::new();
        if self.fds > baseline.fds {
            what.push(format!(
                "descriptors {} > baseline {}",
                self.fds, baseline.fds
            ));
        }
        if self.threads > baseline.threads {
            what.push(format!(
                "threads {} > baseline {} ({})",
                self.threads,
                baseline.threads,
                thread_names()
            ));
        }
        if self.children > 0 {
            what.push(format!("{} child processes left", self.children));
        }
        if !self.zombies.is_empty() {
            what.push(format!("zombies {:?}", self.zombies));
        }
        if self.ours > 0 {
            what.push(format!("{} processes of our binaries alive", self.ours));
        }
        if self.pool_in_use > 0 || self.pool_outstanding > 0 {
            what.push(format!(
                "retention pool: {} bytes in {} grants still in use",
                self.pool_in_use, self.pool_outstanding
            ));
        }
        (!what.is_empty()).then(|| what.join("; "))
    }
}
