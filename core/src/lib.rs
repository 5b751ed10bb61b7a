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
//! - **No waiting.** It never sleeps or waits on a condition variable: what
//!   crosses threads (a request's [`ProgressQueue`]) is pushed and polled,
//!   and tells its reader through a wake the adapter gives.
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
//! ([`ClientDriver`]), the serve lifecycle
//! ([`ServeLifecycle`]), the helper run ([`HelperRun`]) and
//! the guard's session ([`GuardSession`]) — have one shape (after
//! str0m): **one input** through `handle_input(now, Input)` and **one output
//! stream** through `poll_output()`, which ends with `Timeout(next)`. Every
//! loop that drives one — the async driver of `mcp-stdio-async`, the
//! blocking adapter's loops, the guard — follows one rule, a turn at a time:
//!
//! 1. **read the clock once**;
//! 2. **feed what is ready**, in a fixed order: cancels, the child's exit,
//!    the pipes, the application's commands, the timer. A read or write goes
//!    in as it came (an `io::Result`), and the machine applies
//!    one rule ([`ReadResult`], [`WriteResult`]) (a 0-byte read or a read error is the end and
//!    the loop is told to close that pipe, a 0-byte write is a failure,
//!    `EINTR` is nothing, a write's `WouldBlock` parks that pipe until the
//!    loop says it is writable) and takes a child's exit before the end of
//!    stream it caused, through the loop's non-reaping look at the exit
//!    ([`LookForExit`]). An early `Timeout` input does nothing;
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
//! Every option and config type in the workspace follows one style, after
//! `std::process::Command` and quinn's `TransportConfig`:
//!
//! - **Two levels at most.** An options type ([`ClientOptions`],
//!   [`ServeOptions`], [`HelperOptions`], [`GuardConfig`]) holds knobs of its
//!   own and sub-configs; a sub-config ([`ClientConfig`], [`ServerConfig`],
//!   [`FramerConfig`], [`SupervisorConfig`], [`CaptureConfig`],
//!   [`CallConfig`], [`ProxyConfig`], [`StderrForwardConfig`], …) holds
//!   knobs only. So every knob is `options.knob(v)` or
//!   `options.part_mut().knob(v)`. The framing of a stream — the wire limit
//!   `max_frame`, the id scan, the oversized and invalid UTF-8 policies — is
//!   a sub-config of its own ([`FramerConfig`]), beside the session's: the
//!   sans-IO sessions take both
//!   (`ClientSession::new(ClientConfig, FramerConfig)`,
//!   `ServerSession::new(ServerConfig, FramerConfig)`).
//! - **One knob, one setter.** A knob is set only on the config that holds
//!   it; the options types have no shortcuts into their sub-configs, so
//!   `max_frame` has one setter in the workspace, [`FramerConfig::max_frame`],
//!   and one rule for its minimum there: a value below [`MIN_MAX_FRAME`]
//!   (64 bytes) is raised to it, for every machine.
//! - **Build from [`Default`]**, then call setters; fields are private and the
//!   types are `#[non_exhaustive]`, so a new knob is never a breaking change.
//!   A preset is a constructor ([`HelperOptions::discovery`]).
//! - **A setter is named after its knob** and chains:
//!   `fn name(&mut self, value) -> &mut Self`. Its doc line gives the default
//!   and, when the knob bounds memory, the worst case it allows.
//! - **A getter is `get_name(&self)`**, where callers need to read the value
//!   back (the bare name is the setter). State machines keep plain getters
//!   (`config()`, `metrics()`): they have no setters to clash with.
//! - **A sub-config is edited in place** with `name_mut(&mut self) ->
//!   &mut Sub` and read with `get_name(&self) -> &Sub`; there is no third
//!   accessor. To replace one whole, assign through it:
//!   `*options.supervisor_mut() = graces`.
//! - **Shared handles are values**: a retention pool or a record sink is set
//!   with `name(Option<Handle>)`; `None` turns it off.
//!
//! ```
//! use std::time::Duration;
//! use mcp_stdio_core::ClientOptions;
//!
//! let mut options = ClientOptions::default();
//! options.framer_mut().max_frame(1 << 20); // the wire limit, both directions
//! options
//!     .session_mut()
//!     .default_timeout(None) // requests that ask for the default get no deadline
//!     .max_in_flight(32)
//!     .inbox_capacity(64);
//! options.stderr_mut().tail(4096);
//! assert_eq!(options.get_framer().get_max_frame(), 1 << 20);
//! assert_eq!(options.get_session().get_default_timeout(), None);
//! ```
//!
//! ## Example: a session without I/O
//!
//! The core's main use: the decisions of a session, with bytes and time
//! passed in and bytes and events taken out. An adapter is this plus pipes.
//!
//! ```
//! use std::time::Instant;
//! use mcp_stdio_core::{ClientConfig, ClientEvent, ClientSession, FramerConfig};
//!
//! let now = Instant::now();
//! let mut session = ClientSession::new(ClientConfig::default(), FramerConfig::default());
//! let id = session.request(now, "ping", None, None).expect("room to send");
//! // What the server's stdin gets: one JSON-RPC line.
//! let line = session.poll_transmit().expect("a line to write");
//! assert!(line.ends_with(b"\n"));
//! // What the server's stdout gave, in any chunks (G4): the answer.
//! session.handle_stdout(now, br#"{"jsonrpc":"2.0","id":1,"#);
//! session.handle_stdout(now, b"\"result\":{}}\n");
//! match session.poll_event() {
//!     Some(ClientEvent::Completed { id: done, outcome }) => {
//!         assert_eq!(done, id);
//!         assert_eq!(outcome.expect("a result").get(), "{}");
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```
//!
//! ## Layout
//!
//! The modules are private; every type has one public path, at the crate
//! root. The source folders follow the layers, each using only the ones
//! above it in this table:
//!
//! | folder | what it decides | main types |
//! | --- | --- | --- |
//! | `time` | one reading of both clocks; durations in records as milliseconds | [`Stamp`] |
//! | `wire` | newline framing with a byte limit, discard-to-newline recovery, the constant-memory id scan of an oversized frame; JSON-RPC 2.0 messages with raw payloads, encoded under the wire limit; the bounded set of remembered ids; JSON serialized under a byte limit and compacted | [`Framer`], [`Message`], [`RecentIds`], [`LimitedWriter`] |
//! | `session` | the client and server sides of a session (ids, pending map, deadlines, cancel, inbox, overload; in-flight registry, cancel → abort, response suppression); the `initialize` handshake; the basics `serve` answers itself; the result budget; the rate limit of violation warnings | [`ClientSession`], [`ServerSession`], [`ServerBasics`], [`ResultBudget`] |
//! | `process` | what to spawn (never a shell line); the shutdown supervisor of one child; bounded head/tail capture and the process-wide retention pool; redaction of kept diagnostics | [`CommandSpec`], [`ProcessSupervisor`], [`OutputCapture`], [`RetentionPool`] |
//! | `records` | the operation lifecycle and its call record (the hash-chained audit log they go to is the crate `mcp-stdio-audit`) | [`CallLifecycle`], [`CallRecord`] |
//! | `io_result` | the one rule for what a read or a write of a pipe came to, and the notes machines ask their loops to log | [`ReadResult`], [`WriteResult`], [`Note`] |
//! | `driver` | the client driver: a session with a spawned server (protocol, supervisor, stderr), commands, waiters, lossless cancels | [`ClientDriver`], [`ClientOptions`] |
//! | `serve` | the serve loop's lifecycle: handlers started, cancelled, aborted; the write in progress; drain after EOF | [`ServeLifecycle`], [`ServeOptions`] |
//! | `helper` | one run of a command-line helper inside a tool: approval, spawn, budgeted captures, cancel, outcome | [`HelperRun`], [`HelperOptions`] |
//! | `guard` | the guard: a host session and a server session joined (limits both ways, cancel enforcement, records), with the server's supervisor and stderr budget; pinned tool definitions (changed, added, removed tools; warn, hide, block) | [`GuardSession`], [`GuardConfig`], [`ToolPins`] |
//! | `fuzzing` | (private feature) the fuzz harnesses, replayed by `cargo test` | — |
//!
//! With the feature `tokio-util`, `codec` puts the framer behind
//! tokio-util's `Decoder`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unnameable_types)]

mod driver;
mod guard;
mod helper;
pub mod hub;
mod io_result;
mod outbox;
mod process;
mod records;
mod serve;
mod session;
mod status;
mod time;
mod wire;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

// ---- The public surface: one path per type. ----

#[cfg(feature = "tokio-util")]
pub use wire::codec;

// The wire.
pub use wire::frame::{
    FrameError, FrameEvent, FrameText, Framer, FramerConfig, FramerStats, InvalidUtf8Policy,
    OversizedPolicy, ReadRoom, Utf8Repair, DEFAULT_ID_SCAN_LIMIT, DEFAULT_MAX_FRAME, MIN_MAX_FRAME,
    READ_ROOM,
};
pub use wire::id_scan::{IdRecovery, LineIds};
pub use wire::idset::RecentIds;
pub use wire::json::{compact_json_in_place, LimitedWriter};
pub use wire::message::{
    encode_error, encode_notification, encode_request, encode_result, to_raw, wire_limit_error,
    wire_limit_message, DecodeError, EncodeError, ErrorObject, Id, IdError, Message, Notification,
    Oversized, RawResult, RawValue, Request, Response, CLIENT_MAX_FRAME_KNOB, INTERNAL_ERROR,
    INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, SERVER_ERROR,
    SERVE_MAX_FRAME_KNOB, WIRE_LIMIT_EXCEEDED,
};
pub use wire::object::{insert_missing, member, merge_meta};

// Sessions.
pub use session::basics::{
    BasicsError, BasicsMetrics, ClientHello, ServerBasics, CACHEABLE_METHODS,
    MAX_CAPABILITIES_BYTES, MAX_ECHOED_VERSION_BYTES, MAX_EXTRA_METHODS, MAX_INSTRUCTIONS_BYTES,
    MAX_METHOD_NAME_BYTES, MAX_SERVER_INFO_BYTES, MAX_TOOLS, MAX_TOOL_LIST_BYTES,
    MAX_TOOL_NAME_BYTES, PING,
};
pub use session::budget::{
    BudgetConfig, BudgetError, BudgetedResult, FinishError, PushError, ResultBudget,
    DEFAULT_MAX_CURSOR_BYTES,
};
pub use session::calls::{tools_call_params, tools_list_params, TOOLS_CALL, TOOLS_LIST};
pub use session::client::{
    CancelError, ClientConfig, ClientEvent, ClientMetrics, ClientSession, CloseReason, Deadline,
    Incoming, OverloadPolicy, RequestError, RequestFailure, SendError, CANCELLED, INITIALIZE,
};
pub use session::handshake::initialize_params_at;
pub use session::handshake::{
    check_initialize_result, discover_params, initialize_params, is_modern, negotiate_version,
    HandshakeError, Implementation, InitializeResult, RequestStamp, DISCOVER,
    LATEST_HANDSHAKE_VERSION, LATEST_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO,
    META_LOG_LEVEL, META_PROTOCOL_VERSION, META_SERVER_INFO, MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION,
};
pub use session::negotiate::{
    FallbackReason, InitializeError, Negotiated, NegotiatedVia, Negotiation, NegotiationStep,
    VersionPolicy, DEFAULT_DISCOVER_TIMEOUT, INITIALIZED, MAX_OFFERED_VERSIONS,
};
pub use session::progress::{
    Progress, ProgressPoll, ProgressQueue, MAX_PROGRESS_QUEUED, PROGRESS_METHOD,
};
pub use session::server::{
    NotifyError, RequestState, RespondError, Responded, ServerConfig, ServerEvent, ServerMetrics,
    ServerSession,
};
pub use session::violation_log::{
    CLIENT_VIOLATION_TARGET, SERVER_VIOLATION_TARGET, VIOLATION_WARNINGS_PER_INTERVAL,
    VIOLATION_WARNING_INTERVAL,
};

// Processes.
pub use process::capture::{
    CaptureConfig, CaptureSummary, Captured, DebugMark, DebugMode, DebugModeError, Grant,
    OutputCapture, PoolConfig, PoolStats, ReleaseError, RetainedPart, RetentionPool,
    SharedRetentionPool, DEFAULT_EXCERPT, DEFAULT_HEAD, DEFAULT_MIN_GRANT, DEFAULT_POOL_LIMIT,
    DEFAULT_POOL_RESERVE, DEFAULT_TAIL, MAX_DEBUG_MULTIPLIER, MAX_DEBUG_WINDOW,
};
pub use process::command::CommandSpec;
pub use process::redact::redact_in_place;
pub use process::sandbox::{
    Enforcement, KernelSupport, PathAccess, PathRule, ResourceLimits, Sandbox, SandboxError,
    SandboxGap, SandboxGapRecord, SandboxNetwork, SandboxPathRecord, SandboxPlan, SandboxRecord,
    LANDLOCK_ABI_KNOWN, MAX_SANDBOX_PATHS, MAX_SANDBOX_PORTS,
};
pub use process::secrets::{
    SecretStream, Secrets, SecretsError, MAX_SECRETS, MAX_SECRETS_TOTAL_BYTES, MAX_SECRET_BYTES,
    MIN_SECRET_BYTES, SECRET_MARKER,
};
pub use process::supervisor::{
    ChildPipes, EndedBy, ExitStatus, ProcessAction, ProcessOutcome, ProcessSupervisor, Signal,
    StreamEnd, SupervisorConfig, DEFAULT_READER_DRAIN_DEADLINE, DEFAULT_STDIN_CLOSE_GRACE,
    DEFAULT_TERM_GRACE,
};

// Records and time.
pub use records::call::{
    CallConfig, CallError, CallEvent, CallEventKind, CallIdentity, CallKind, CallLifecycle,
    CallOutcome, CallRecord, CallState, CancelReason, Decision, DecisionReason, DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_TEXT_BYTES, MIN_MAX_EVENTS, MIN_MAX_TEXT_BYTES,
};
pub use time::Stamp;

// The machines the loops drive, and the one rule for read and write results.
pub use driver::spawned::{ClientOptions, LiveSnapshot, SessionRecord, StderrForwardConfig};
pub use driver::{
    CallCancel, CancelHandle, CancelRegistry, ClientDriver, Command, DriverAction, DriverInput,
    DriverOutput, LookForExit, Outcome, ReplyChannel, StartReply, Started, ABANDONED,
};
pub use guard::log_copy::{MAX_LOG_LINE, MAX_LOG_PENDING};
pub use guard::pin::{
    DigestFn, PinChange, PinChangeKind, PinDigest, PinError, PinMetrics, PinPolicy, PinUpdate,
    PinnedDefinition, ToolDefinition, ToolDigest, ToolPins, MAX_CHANGES_IN_ERROR,
    MAX_DEFINITION_DEPTH, MAX_PINNED_DEFINITION_BYTES, MAX_PINNED_TOOLS, MAX_PIN_NAME_BYTES,
    MAX_PIN_NOTES, PINNED_FIELDS, TOOL_NOT_ACCEPTED,
};
pub use guard::policy::{
    ContentLimit, CutSummary, Keep, Listed, PolicyError, PolicyMetrics, RateLimiter, RateRule,
    RepeatBrake, ResultEdit, ToolFilter, ToolPattern, ToolPolicy, ToolRefusal, MAX_PATTERN_BYTES,
    MAX_POLICY_TOOLS, MAX_RATE_LIMITS, MAX_TOOL_PATTERNS, POLICY_REFUSED, TRUNCATED_META_KEY,
};
pub use guard::proxy::{
    ProxyConfig, ProxyMetrics, DEFAULT_MAX_BUFFERED, DEFAULT_MAX_CANCELLED, DEFAULT_MAX_NOTES,
    DEFAULT_MAX_TRACKED, DEFAULT_NOISE_BUDGET, MAX_NOTE_LINE, MAX_TASK_ID_BYTES, MAX_VERSION_BYTES,
};
pub use guard::restart::{
    GuardPhase, RestartConfig, RestartPolicy, CRASH_TAIL_BYTES, DEFAULT_MAX_RESTARTS,
    DEFAULT_RESTART_BACKOFF, MAX_REPLAY_BYTES, MAX_RESTART_BACKOFF, MAX_SUBSCRIPTIONS,
    MAX_SUBSCRIPTION_URI_BYTES, REPLAY_ID_PREFIX, REPLAY_TIMEOUT, RESTART_RESET_AFTER,
    SERVER_CRASHED,
};
pub use guard::status::{
    ByteCounts, GuardCounters, GuardStatus, OperationLatency, ProcessStats, RequestCounts,
    ServerName, StatusIdentity, StderrCounts, StreamCounts, MAX_STATUS_OPERATIONS,
};
pub use guard::trace::{
    CallSpan, SpanTarget, TraceContext, MAX_SPANS_WAITING, MAX_SPAN_TARGET_BYTES, UNREAD_METHOD,
};
pub use guard::{
    GuardAction, GuardConfig, GuardInput, GuardOutput, GuardReport, GuardSession,
    DEFAULT_FINAL_FLUSH, DEFAULT_MAX_WAITING_RECORDS, DEFAULT_STDERR_FORWARD, EXIT_GUARD_CLOSED,
    EXIT_UNKNOWN,
};
pub use helper::{
    ApprovalError, ApprovalRequest, CapturedOutput, HelperAction, HelperInput, HelperOptions,
    HelperOutcome, HelperOutput, HelperRun, RecordSink, RecordTap, DEFAULT_MAX_DURATION,
    DEFAULT_STDOUT_TAIL, DISCOVERY_EXCERPT, DISCOVERY_MAX_DURATION, DISCOVERY_STDERR_TAIL,
    DISCOVERY_STDOUT_TAIL,
};
pub use io_result::{ChildStream, Note, NoteLevel, ReadResult, WriteResult};
pub use outbox::Outgoing;
pub use serve::{
    result_budget, ServeAction, ServeEnd, ServeInput, ServeLifecycle, ServeOptions, ServeOutput,
    ServeReport, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HELPER_GRACE, EXIT_WRITE_GRACE,
    RESULT_ENVELOPE_HEADROOM,
};
pub use status::{
    Admission, StatusConn, StatusOutput, StatusPort, StatusPortCounters, StatusRequest,
    MAX_FOLLOW_BUFFER, MAX_STATUS_CLIENTS, MAX_STATUS_LOG_BYTES, MAX_STATUS_REPLY,
    MAX_STATUS_REQUEST, STATUS_CLIENT_DEADLINE, STATUS_SCHEMA,
};
