//! Processes left behind in a server's process group, found in `/proc`.
//!
//! Every server `check` spawns leads its own process group (pgid = its pid),
//! and so do its children unless they move away. Once the leader's exit has
//! been observed and reaped, any live member of that group is something the
//! server left behind. Linux only: elsewhere the scan reports "not supported"
//! and the row is skipped.
//!
//! The leftovers are killed one by one through a pidfd each, never with a
//! `killpg` of the group id: the leader is reaped by then, so the id is held
//! only by members that may die at any moment, after which it could be
//! reused by an unrelated program's group (and a bare pid likewise).

use std::time::{Duration, Instant};

/// A live process found in a server's group.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Leftover {
    /// Its pid.
    pub(crate) pid: u32,
    /// Its command name (`/proc/<pid>/comm`).
    pub(crate) name: String,
}

/// How long members that were just signalled get to finish dying before
/// they count as left behind.
const SETTLE: Duration = Duration::from_millis(300);

/// Kill passes over the group after the settle time: a member that forks
/// while it is killed leaves a child the next pass finds.
const KILL_PASSES: usize = 3;

/// Live members of process group `pgid` after a short settle time, each then
/// killed (see the module doc); `None` where `/proc` cannot answer (not Linux).
pub(crate) async fn sweep(pgid: u32) -> Option<Vec<Leftover>> {
    if pgid == 0 {
        return Some(Vec::new());
    }
    let start = Instant::now();
    loop {
        let found = group_members(pgid)?;
        if found.is_empty() {
            return Some(found);
        }
        if start.elapsed() >= SETTLE {
            for _ in 0..KILL_PASSES {
                let Some(now) = group_members(pgid) else {
                    break;
                };
                if now.is_empty() {
                    break;
                }
                kill_members(pgid, &now);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return Some(found);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `SIGKILL` to each of `members` that is still in group `pgid`, through a
/// pidfd opened first and checked after: the pidfd names one process for
/// good, and the check (made once it is open) says that process is still a
/// member, not a stranger that got a freed pid.
#[cfg(target_os = "linux")]
fn kill_members(pgid: u32, members: &[Leftover]) {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    for m in members {
        let Some(pid) = i32::try_from(m.pid).ok().and_then(Pid::from_raw) else {
            continue;
        };
        // Gone already: nothing to kill.
        let Ok(fd) = pidfd_open(pid, PidfdFlags::empty()) else {
            continue;
        };
        let member = std::fs::read_to_string(format!("/proc/{}/stat", m.pid))
            .ok()
            .and_then(|stat| parse_stat(&stat))
            .is_some_and(|(_, state, pgrp)| pgrp == pgid && !matches!(state, 'Z' | 'X'));
        if member {
            if let Err(e) = pidfd_send_signal(&fd, Signal::KILL) {
                tracing::debug!(pid = m.pid, error = %e, "killing a leftover failed");
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn kill_members(_pgid: u32, _members: &[Leftover]) {}

/// Every process's pid and `/proc/<pid>/stat` line, as far as they can be
/// read (processes come and go while we read: a vanished one is skipped);
/// `None` when `/proc` cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn proc_stats() -> Option<impl Iterator<Item = (u32, String)>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(dir.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some((pid, stat))
    }))
}

/// Live (not zombie) members of process group `pgid`.
#[cfg(target_os = "linux")]
pub(crate) fn group_members(pgid: u32) -> Option<Vec<Leftover>> {
    let mut found = Vec::new();
    for (pid, stat) in proc_stats()? {
        if let Some((name, state, pgrp)) = parse_stat(&stat) {
            if pgrp == pgid && !matches!(state, 'Z' | 'X') {
                found.push(Leftover { pid, name });
            }
        }
    }
    found.sort_by_key(|l| l.pid);
    Some(found)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn group_members(_pgid: u32) -> Option<Vec<Leftover>> {
    None
}

/// The command name, state letter and process group of a `/proc/<pid>/stat`
/// line. The name is in parentheses and may itself hold spaces and
/// parentheses, so the fixed fields are read after the last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_stat(line: &str) -> Option<(String, char, u32)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line.get(open + 1..close)?.to_owned();
    let mut fields = line.get(close + 1..)?.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((name, state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = "4242 (a (weird) name) S 1 4200 4200 0 -1 4194560";
        assert_eq!(
            parse_stat(line),
            Some(("a (weird) name".to_owned(), 'S', 4200))
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn our_own_group_is_found() {
        let me = std::process::id();
        let pgrp = u32::try_from(rustix::process::getpgrp().as_raw_nonzero().get())
            .expect("pgids are positive");
        let members = group_members(pgrp).expect("Linux has /proc");
        assert!(members.iter().any(|l| l.pid == me), "{members:?}");
    }
}
