//! Processes: what to spawn, the shutdown supervisor of one child, bounded
//! capture of its output, the sandbox it runs in, redaction of what is kept and masking of
//! configured secrets.

pub(crate) mod capture;
pub(crate) mod command;
pub(crate) mod redact;
pub(crate) mod sandbox;
pub(crate) mod secrets;
pub(crate) mod supervisor;
