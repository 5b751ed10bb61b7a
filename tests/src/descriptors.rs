//! Descriptor-leak checks: a case that leaves a pipe (or any descriptor)
//! open in the test process fails, by name.
//!
//! Cases of one test binary run in threads of one process, so a descriptor
//! opened by one case cannot be told from another's. [`run_checked`] runs
//! the checked cases of a binary one at a time: it compares the process's
//! open descriptors (`/proc/self/fd`, with what each points to) before and
//! after its case. Descriptors that live for the whole process — a runtime's
//! reactor, a signal pipe, opened lazily by the first session — are opened
//! first by a warm-up that runs once, unchecked.
//!
//! Off Linux (no `/proc/self/fd`) the check is skipped, and says so.

use std::collections::BTreeMap;
use std::fs;
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use crate::wait_until;

/// How long descriptors a case closed late (a reader thread ending, a task
/// dropping its pipe after the case returned) may take to go.
pub const SETTLE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// One checked case at a time, per process.
static TURN: Mutex<()> = Mutex::new(());

/// The open descriptors of this process: number → what it points to
/// (`pipe:[123]`, `anon_inode:[eventpoll]`, a path). `None` where
/// `/proc/self/fd` cannot be read.
#[must_use]
pub fn open_descriptors() -> Option<BTreeMap<i32, String>> {
    let dir = fs::read_dir("/proc/self/fd").ok()?;
    let own = std::path::PathBuf::from(format!("/proc/{}/fd", std::process::id()));
    let mut open = BTreeMap::new();
    for entry in dir.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // Gone since the listing (no link to read), or the listing's own
        // descriptor (`/proc/<pid>/fd`): not the process's.
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        if target == own {
            continue;
        }
        open.insert(fd, target.to_string_lossy().into_owned());
    }
    Some(open)
}

/// Descriptors open in `after` that were not in `before` (same number and
/// same target).
fn opened(before: &BTreeMap<i32, String>, after: &BTreeMap<i32, String>) -> Vec<(i32, String)> {
    after
        .iter()
        .filter(|(fd, target)| before.get(fd) != Some(target))
        .map(|(fd, target)| (*fd, target.clone()))
        .collect()
}

/// Runs `case` alone among the checked cases of this process, after
/// `warm_up` (once per process, unchecked), and panics naming `name` and the
/// descriptors it left open past [`SETTLE`].
pub fn run_checked(name: &str, warm_up: impl FnOnce(), case: impl FnOnce()) {
    static WARM: Once = Once::new();
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    WARM.call_once(warm_up);
    let Some(before) = open_descriptors() else {
        eprintln!("{name}: descriptor check skipped (no /proc/self/fd)");
        case();
        return;
    };
    case();
    let ended = Instant::now();
    let settled = wait_until(SETTLE, POLL, || {
        open_descriptors().is_some_and(|now| opened(&before, &now).is_empty())
    });
    let left = open_descriptors().map_or_else(Vec::new, |now| opened(&before, &now));
    match settled {
        Some(took) if left.is_empty() => eprintln!(
            "{name}: no descriptor left ({} open before and after; settled in {took:?})",
            before.len()
        ),
        _ => panic!(
            "{name} left {} descriptor(s) open {:?} after it ended: {left:?}",
            left.len(),
            ended.elapsed()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_left_open_is_named_and_a_closed_one_is_not() {
        use std::os::fd::AsRawFd;
        let before = open_descriptors().expect("/proc/self/fd");
        let (r, w) = std::io::pipe().expect("pipe");
        let ours = [r.as_raw_fd(), w.as_raw_fd()];
        let after = open_descriptors().expect("/proc/self/fd");
        let new = opened(&before, &after);
        for fd in ours {
            let hit = new.iter().find(|(n, _)| *n == fd);
            assert!(
                hit.is_some_and(|(_, t)| t.starts_with("pipe:")),
                "{fd} in {new:?}"
            );
        }
        let targets: Vec<String> = ours.iter().map(|fd| after[fd].clone()).collect();
        drop((r, w));
        let closed = open_descriptors().expect("/proc/self/fd");
        for (fd, target) in ours.iter().zip(&targets) {
            assert_ne!(closed.get(fd), Some(target), "fd {fd} still open");
        }
    }
}
