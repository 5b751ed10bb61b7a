//! Processes: what to spawn, the shutdown supervisor of one child, bounded
//! capture of its output and redaction of what is kept.

pub mod capture;
pub mod command;
pub mod redact;
pub mod supervisor;

pub use supervisor::*;
