//! Records: the lifecycle of one call and its record, and the hash-chained
//! audit log.

pub mod audit;
pub(crate) mod call;
