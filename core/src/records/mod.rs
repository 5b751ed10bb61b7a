//! Records: the lifecycle of one call and its record. The hash-chained
//! audit log they are written to is the `mcp-stdio-audit` crate.

pub(crate) mod call;
