//! Sessions: the client and server sides of JSON-RPC over one stdio pair,
//! the handshake, the basics `serve` answers itself, the result budget and
//! the rate limit of violation warnings.

pub mod basics;
pub mod budget;
pub mod client;
pub mod handshake;
pub mod server;
pub mod violation_log;
