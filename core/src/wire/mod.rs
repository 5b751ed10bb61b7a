//! The wire: newline framing, the id scan of oversized frames, JSON-RPC
//! messages, the set of remembered ids, the JSON helpers under a byte limit
//! and the tokio-util codec.

#[cfg(feature = "tokio-util")]
pub mod codec;
pub(crate) mod frame;
pub(crate) mod id_scan;
pub(crate) mod idset;
pub(crate) mod json;
pub(crate) mod message;
pub(crate) mod object;
