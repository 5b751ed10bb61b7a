//! Processes: what to spawn, the shutdown supervisor of one child, bounded
//! capture of its output and redaction of what is kept.

pub(crate) mod capture;
pub(crate) mod command;
pub(crate) mod redact;
pub(crate) mod supervisor;
