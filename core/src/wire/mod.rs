//! The wire: newline framing, the id scan of oversized frames, JSON-RPC
//! messages, the set of remembered ids and the tokio-util codec.

#[cfg(feature = "tokio-util")]
pub mod codec;
pub mod frame;
pub mod id_scan;
pub mod idset;
pub mod message;
