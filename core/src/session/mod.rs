//! Sessions: the client and server sides of JSON-RPC over one stdio pair,
//! the handshake, the basics `serve` answers itself, the result budget and
//! the rate limit of violation warnings.

pub(crate) mod basics;
pub(crate) mod budget;
pub(crate) mod calls;
pub(crate) mod client;
pub(crate) mod handshake;
pub(crate) mod negotiate;
pub(crate) mod progress;
pub(crate) mod server;
pub(crate) mod violation_log;
