//! The shutdown/cancel supervisor of one child process (G11).
//!
//! SKELETON — the supervisor is being written. The shared outcome types below
//! are final: other modules (`call`) use them.

use serde::{Deserialize, Serialize};

/// How a process ended, as actually observed by `waitpid` (never invented).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// Exited by itself with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

/// How one output stream (stdout or stderr) of a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// Read to end-of-file.
    Eof,
    /// Read to end-of-file after a cancel or shutdown was requested.
    EofAfterCancel,
    /// Still open when the reader drain deadline passed; the reader was abandoned
    /// (an escaped grandchild can hold a pipe forever).
    AbandonedAfterDeadline,
}
