//! # mcp-stdio-core
//!
//! The sans-IO core of mcp-stdio: pure, allocation-bounded state machines for
//! the Model Context Protocol over stdio.
//!
//! ## What this crate does not do
//!
//! - **No I/O.** It never reads or writes a pipe, a file or a socket. It takes
//!   byte chunks and gives back bytes to write.
//! - **No clock.** It never calls `Instant::now()`. Time is an argument
//!   (`handle_timeout(now)`, `poll_timeout() -> Option<Instant>`); a spurious
//!   timeout call does nothing.
//! - **No processes, no threads, no signals.** It decides *when* to close stdin,
//!   send `SIGTERM` or `SIGKILL`; the adapters make the system calls.
//! - **No unbounded growth.** Every buffer, queue and map has a named limit,
//!   documented on its config setter with its default and the worst-case memory
//!   it allows.
//!
//! The adapters (`mcp-stdio-tokio`, `mcp-stdio-async-std`,
//! `mcp-stdio-blocking`) own every system call; this crate owns every decision,
//! so all three behave identically.
//!
//! ## The run loop
//!
//! The machines the loops drive — the client driver
//! ([`driver::ClientDriver`]), the serve lifecycle
//! ([`serve::ServeLifecycle`]), the helper run ([`helper::HelperRun`]) and
//! the guard's session ([`guard::GuardSession`]) — have one shape (after
//! str0m): **one input** through `handle_input(now, Input)` and **one output
//! stream** through `poll_output()`, which ends with `Timeout(next)`. Every
//! loop that drives one — the async driver of `mcp-stdio-async`, the
//! blocking adapter's loops, the guard — follows one rule, a turn at a time:
//!
//! 1. **read the clock once**;
//! 2. **feed what is ready**, in a fixed order: cancels, the child's exit,
//!    the pipes, the application's commands, the timer. A read or write goes
//!    in as it came (an `io::Result`), and the machine applies
//!    [`io_result`]'s one rule (a 0-byte read or a read error is the end and
//!    the loop is told to close that pipe, a 0-byte write is a failure,
//!    `EINTR` is nothing, a write's `WouldBlock` parks that pipe until the
//!    loop says it is writable) and takes a child's exit before the end of
//!    stream it caused, through the loop's non-reaping look at the exit
//!    ([`driver::LookForExit`]). An early `Timeout` input does nothing;
//! 3. **after each input, drain `poll_output()`** until `Timeout(next)`:
//!    actions (signals, pipes to close, notes to log, the end), bytes to
//!    write — written as far as the pipe takes them now — in the order the
//!    machine gives;
//! 4. **sleep until `next`** or the next input, never on a write alone.
//!
//! Two things are pulled rather than pushed, because the other side's room
//! decides them: stdout is read straight into the framer's buffer
//! (`stdout_room`), and messages for the application leave the client
//! driver's bounded inbox (`poll_incoming`) only when the application has
//! room (G5). Notes a machine wants logged come out as an action
//! (`DriverAction::Note`, `ServeAction::Note`) for the loop to hand to
//! something that cannot block it.
//!
//! ## Configuration
//!
//! Every option and config type in the workspace (`ClientOptions`,
//! `ServeOptions`, `HelperOptions` and the `*Config` types they hold) follows
//! one style, after `std::process::Command` and quinn's `TransportConfig`:
//!
//! - **Build from [`Default`]**, then call setters; fields are private and the
//!   types are `#[non_exhaustive]`, so a new knob is never a breaking change.
//! - **A setter is named after its knob** and chains:
//!   `fn name(&mut self, value) -> &mut Self`. Its doc line gives the default
//!   and, when the knob bounds memory, the worst case it allows.
//! - **A getter is `get_name(&self)`**, where callers need to read the value
//!   back (the bare name is the setter). State machines keep plain getters
//!   (`config()`, `metrics()`): they have no setters to clash with.
//! - **A nested config is edited in place** with `name_mut(&mut self) ->
//!   &mut Sub` and read with `get_name(&self) -> &Sub`; there is no third
//!   accessor. To replace one whole, assign through it:
//!   `*options.config_mut().supervisor_mut() = graces`.
//! - **The knobs set most often are on the options type itself**
//!   ([`ClientOptions::max_frame`](host::ClientOptions::max_frame),
//!   [`default_timeout`](host::ClientOptions::default_timeout),
//!   [`stderr_tail`](host::ClientOptions::stderr_tail);
//!   [`ServeOptions::max_frame`](serve::ServeOptions::max_frame),
//!   [`max_concurrent`](serve::ServeOptions::max_concurrent)). Such a
//!   shortcut has the name of the knob it sets one level down, so one knob
//!   never has two names.
//! - **Shared handles are values**: a retention pool or a record sink is set
//!   with `name(Option<Handle>)`; `None` turns it off.
//!
//! ```
//! use std::time::Duration;
//! use mcp_stdio_core::host::ClientOptions;
//!
//! let mut options = ClientOptions::default();
//! options
//!     .max_frame(1 << 20)
//!     .default_timeout(None) // requests that ask for the default get no deadline
//!     .stderr_tail(4096);
//! options
//!     .config_mut()
//!     .session_mut()
//!     .max_in_flight(32)
//!     .inbox_capacity(64);
//! assert_eq!(options.get_config().get_session().get_max_frame(), 1 << 20);
//! ```
//!
//! ## Modules
//!
//! | module | what it decides |
//! | --- | --- |
//! | [`frame`] | newline framing with a byte limit, discard-to-newline recovery, bounded id recovery |
//! | `codec` | (feature `tokio-util`) the framer as tokio-util's `Decoder`, framing errors as items |
//! | [`message`] | JSON-RPC 2.0 messages with raw payloads; encoding under the wire limit |
//! | [`client`] | host side of a session: ids, pending map, deadlines, cancel, inbox, overload |
//! | [`host`] | a session with a spawned server: protocol, process and stderr as one machine |
//! | [`driver`] | the client driver around a host session: commands, waiters, the write slot, lossless cancels |
//! | [`helper`] | one run of a command-line helper inside a tool: approval, spawn, budgeted captures, cancel, outcome |
//! | [`handshake`] | the MCP initialize request and protocol version negotiation |
//! | [`basics`] | the protocol basics `serve` answers itself: `initialize` with version negotiation, `ping`, method-not-found, `tools/list` |
//! | [`command`] | what to spawn: a program and its arguments, never a shell line |
//! | [`serve`] | the serve loop's lifecycle: handler start/cancel/abort, the write in progress, drain after EOF, write-error policy |
//! | [`server`] | server side: in-flight registry, cancel → abort, response suppression, outgoing limit |
//! | [`capture`] | bounded head/tail capture of a byte stream and the process-wide retention pool |
//! | [`redact`] | the fallback redactor of retained diagnostics: headers, private keys, obvious tokens |
//! | [`process`] | the shutdown/cancel supervisor of one child process |
//! | [`call`] | operation lifecycle and its call record |
//! | [`duration_ms`] | durations in records and metrics as JSON numbers of milliseconds |
//! | [`audit`] | hash-chained JSON-lines audit log and its offline verification |
//! | [`budget`] | content budget for tool results |
//! | [`proxy`] | the guard's decisions: a host session and a server session joined, limits both ways, cancel enforcement, records, the host that stopped reading |
//! | [`guard`] | the guard's whole session: proxy, server supervisor and stderr budget joined; exit status |
//! | [`id_scan`] | the streaming, constant-memory scan of a whole oversized frame for its top-level id |
//! | [`io_result`] | the one rule for what a read or a write of a pipe came to (end, failure, again), and the notes machines ask their loops to log |
//! | [`idset`] | the bounded, insertion-ordered set of remembered request ids |
//! | [`violation_log`] | the rate limit of the WARN events about a peer's protocol violations |
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod process;
mod records;
mod session;
mod wire;

pub mod driver;
pub mod guard;
pub mod helper;
pub mod io_result;
pub mod serve;
pub mod time;

pub use driver::host;
pub use guard::proxy;
pub use process::{capture, command, redact};
pub use records::{audit, call};
pub use session::{basics, budget, client, handshake, server, violation_log};
pub use time::duration_ms;
#[cfg(feature = "tokio-util")]
pub use wire::codec;
pub use wire::{frame, id_scan, idset, message};
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub use audit::{AuditChain, AuditKey, AuditVerifier};
pub use basics::{BasicsError, ServerBasics};
pub use budget::ResultBudget;
pub use call::{CallLifecycle, CallRecord, Stamp};
pub use capture::{CaptureConfig, Captured, OutputCapture, RetentionPool};
pub use client::{ClientConfig, ClientEvent, ClientSession};
pub use command::CommandSpec;
pub use frame::{FrameError, FrameEvent, Framer, FramerConfig, InvalidUtf8Policy, OversizedPolicy};
pub use guard::{GuardAction, GuardConfig, GuardSession};
pub use helper::{HelperAction, HelperConfig, HelperOutcome, HelperRun};
pub use host::{HostConfig, HostSession, RequestError, SessionRecord};
pub use idset::RecentIds;
pub use message::{
    wire_limit_error, DecodeError, EncodeError, ErrorObject, Id, Message, Notification, Request,
    Response, WIRE_LIMIT_EXCEEDED,
};
pub use process::{ExitStatus, ProcessOutcome, ProcessSupervisor, StreamEnd, SupervisorConfig};
pub use proxy::{Proxy, ProxyConfig, ProxyEvent, ProxyMetrics};
pub use serve::{ServeAction, ServeLifecycle, ServeOptions, ServeReport};
pub use server::{ServerConfig, ServerEvent, ServerSession};
