//! Pinned tool definitions: the guard remembers what each tool the server
//! lists looks like, and notices when that changes between sessions or
//! within one (the "rug pull": a tool approved as harmless whose
//! description or schema the server later rewrites).
//!
//! Sans-IO like the rest of the core: the caller (the CLI, which owns the
//! pin file) gives the accepted definitions at construction ([`ToolPins`]);
//! the guard's proxy asks this module at three points — a host's
//! `tools/call` (refused?), a server's answer to `tools/list` (checked,
//! filtered or refused) and a server's `notifications/tools/list_changed` —
//! and what it saw and did not accept goes out as [`PinUpdate`]s, for the
//! caller to keep in the file's `pending` section.
//!
//! # What a digest covers
//!
//! A tool's digest is the caller's [`DigestFn`] (the CLI's is SHA-256) over
//! the **canonical JSON** of the object made of the tool's [`PINNED_FIELDS`]
//! that are present: `name`, `title`, `description`, `inputSchema`,
//! `outputSchema`, `annotations`. Canonical: object keys sorted by their
//! UTF-8 bytes at every depth, no whitespace, strings escaped as
//! `serde_json` writes them (so `"\u00e9"` and `"é"` are the same text),
//! numbers exactly as written (so `1`, `1.0` and `1e0` differ; nothing is
//! rounded through a float), and, for a key that repeats, the last value
//! (as `JSON.parse` takes it). So key order and spacing are never a
//! change. Each field also has a digest of its own, so a report names the
//! fields that changed. Nesting deeper than [`MAX_DEFINITION_DEPTH`] makes
//! a definition unreadable.
//!
//! Not covered: `_meta`, `icons`, `execution` and any other member; a
//! change there is not reported. A field present as `null` differs from the
//! field absent.
//!
//! # What counts as a change
//!
//! - **changed**: a tool the pins know, listed with another digest;
//! - **added**: a tool the pins do not know;
//! - **removed**: a pinned tool not listed. Only told once a listing was
//!   seen whole: from a `tools/list` without a cursor to the answer without
//!   a `nextCursor` (a host that starts paging in the middle, or a listing
//!   of more than [`MAX_PINNED_TOOLS`] names, never reports one);
//! - with no pin file yet ([`ToolPins::first_use`]), the first whole
//!   listing is pinned as it is (trust on first use), and changes after it
//!   in the same session are caught.
//!
//! A difference is reported once per session for each definition seen (a
//! tool that changes again is reported again), under every policy.
//!
//! # Policies ([`PinPolicy`])
//!
//! - `warn`: answers go to the host as they came;
//! - `hide`: changed and added tools are taken out of the `tools/list`
//!   result, and a `tools/call` of one is refused by the guard
//!   ([`TOOL_NOT_ACCEPTED`]) without reaching the server;
//! - `block`: a `tools/list` page with a changed or added tool becomes an
//!   error listing the changes, and every `tools/call` is refused while a
//!   tool is not accepted. The session goes on: the host sees errors that
//!   say what changed and how to accept, not a dead server. A later listing
//!   that matches the pins (the server went back) lifts it.
//!
//! Refusals name the caller's accept hint ([`ToolPins::accept_hint`]).
//!
//! # Bounds
//!
//! At most [`MAX_PINNED_TOOLS`] names in each set the session keeps: the
//! accepted tools, what the pin file has pending, the tools not accepted,
//! the last definition reported per tool, the tools reported removed, and
//! the names of the listing under way. A name longer than
//! [`MAX_PIN_NAME_BYTES`] is never pinned (under `hide` such a tool is
//! hidden and its calls refused); a name listed twice on one page with two
//! definitions is not accepted, whichever comes first. A definition is given
//! out with its canonical text when that is at most
//! [`MAX_PINNED_DEFINITION_BYTES`], else by digest only. A `tools/list`
//! answer is bounded by the guard's wire limit before it gets here; reading
//! it costs a few times its size while it is checked, and the update it
//! gives (at most its definitions) is drained by the loop at once. Worst
//! case kept between answers: `6 × MAX_PINNED_TOOLS × (name + ≈ 300 B)` ≈
//! 13 MiB with 256-byte names; a few hundred KiB for a real server.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;

use serde::Serialize;

use crate::wire::message::{ErrorObject, RawValue};
use crate::wire::object::members;

mod canonical;

use canonical::push_string;
pub use canonical::MAX_DEFINITION_DEPTH;

/// The members of a tool definition a digest covers, in the order a
/// [`ToolDigest`] keeps their own digests.
pub const PINNED_FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// Bound of the tools pinned, pending, and remembered per session (each
/// set): 4096.
pub const MAX_PINNED_TOOLS: usize = 4096;

/// Bound of a definition's canonical text given out to be kept in the pin
/// file: 64 KiB. A larger one is pinned by its digests only (a report can
/// still name the fields that changed; `pin show` cannot print it).
pub const MAX_PINNED_DEFINITION_BYTES: usize = 64 * 1024;

/// Bound of a tool name that can be pinned, in bytes: 256. A longer name
/// is reported as added, never pinned.
pub const MAX_PIN_NAME_BYTES: usize = 256;

/// Bound of the pin notes on one `tools/list` record (one per change); past
/// it one note counts the rest: 8.
pub const MAX_PIN_NOTES: usize = 8;

/// Bound of the changes listed in one refusal's message and `data`: 32.
pub const MAX_CHANGES_IN_ERROR: usize = 32;

/// JSON-RPC error code of a refusal by the pin policy (a `tools/call` of a
/// tool not accepted, or a `tools/list` page under `block`): -32030, in the
/// implementation-defined server error range.
pub const TOOL_NOT_ACCEPTED: i64 = -32030;

/// The notification a server sends when its tool list changed.
pub(crate) const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";

/// Longest tool name shown in a message, in characters.
const SHOWN_NAME_CHARS: usize = 64;

/// The digest function of the pins: 32 bytes of the canonical text. The
/// core has none of its own (it compiles no cryptography); the CLI passes
/// SHA-256, and the pin file says so.
pub type DigestFn = fn(&[u8]) -> [u8; 32];

/// What the guard does with a tool whose definition is not the accepted one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PinPolicy {
    /// Report it; the host gets what the server sent.
    #[default]
    Warn,
    /// Report it, take it out of `tools/list` results and refuse its calls.
    Hide,
    /// Report it; `tools/list` pages with it become errors, and every
    /// `tools/call` is refused while a tool is not accepted.
    Block,
}

impl PinPolicy {
    /// The policy's name: `warn`, `hide` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warn => "warn",
            Self::Hide => "hide",
            Self::Block => "block",
        }
    }
}

/// A 32-byte digest, shown as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PinDigest([u8; 32]);

impl PinDigest {
    /// The digest as it is.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 hex digits (`None` for anything else, upper case included).
    pub fn from_hex(hex: &str) -> Option<Self> {
        let hex = hex.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(Self(out))
    }
}

impl fmt::Display for PinDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for PinDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PinDigest({self})")
    }
}

/// A tool definition's digests: the whole (what is compared) and each of
/// its [`PINNED_FIELDS`] present (what a report names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDigest {
    whole: PinDigest,
    fields: [Option<PinDigest>; 6],
}

impl ToolDigest {
    /// Digests kept elsewhere (the pin file): the whole and each field's,
    /// by name; a name not in [`PINNED_FIELDS`] is an error.
    pub fn from_parts<'a>(
        whole: PinDigest,
        fields: impl IntoIterator<Item = (&'a str, PinDigest)>,
    ) -> Result<Self, PinError> {
        let mut out = [None; 6];
        for (name, digest) in fields {
            let i = PINNED_FIELDS
                .iter()
                .position(|f| *f == name)
                .ok_or_else(|| PinError::UnknownField(name.chars().take(64).collect()))?;
            out[i] = Some(digest);
        }
        Ok(Self { whole, fields: out })
    }

    /// The digest of the whole definition.
    pub fn whole(&self) -> PinDigest {
        self.whole
    }

    /// Each field present, with its digest, in [`PINNED_FIELDS`] order.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, PinDigest)> + '_ {
        PINNED_FIELDS
            .iter()
            .zip(self.fields.iter())
            .filter_map(|(name, d)| d.map(|d| (*name, d)))
    }

    /// The fields whose digest differs from `other`'s (one present and the
    /// other absent included), in [`PINNED_FIELDS`] order.
    pub fn changed_fields(&self, other: &Self) -> Vec<&'static str> {
        PINNED_FIELDS
            .iter()
            .zip(self.fields.iter().zip(other.fields.iter()))
            .filter(|(_, (a, b))| a != b)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// One tool as a server lists it, reduced to what a digest covers.
#[derive(Debug, Clone)]
pub struct ToolDefinition {
    name: String,
    canonical: String,
    digest: ToolDigest,
}

impl ToolDefinition {
    /// Reads a tool definition (a JSON object with a string `name`) and
    /// digests its canonical form with `digest`.
    pub fn parse(tool: &str, digest: DigestFn) -> Result<Self, PinError> {
        let node = canonical::parse(tool)?;
        if !matches!(node, canonical::Node::Object(_)) {
            return Err(PinError::NotAnObject);
        }
        let mut canonical_fields: [Option<String>; 6] = Default::default();
        for (slot, field) in canonical_fields.iter_mut().zip(PINNED_FIELDS) {
            if let Some(value) = node.member(field) {
                let mut text = String::new();
                value.write(&mut text);
                *slot = Some(text);
            }
        }
        let name = node
            .member("name")
            .and_then(canonical::Node::as_str)
            .ok_or(PinError::NoName)?
            .to_owned();
        // The object's keys in sorted order: PINNED_FIELDS sorted by bytes.
        let mut order: Vec<usize> = (0..PINNED_FIELDS.len()).collect();
        order.sort_by_key(|&i| PINNED_FIELDS[i].as_bytes());
        let mut canonical = String::from("{");
        for i in order {
            if let Some(text) = &canonical_fields[i] {
                if canonical.len() > 1 {
                    canonical.push(',');
                }
                push_string(PINNED_FIELDS[i], &mut canonical);
                canonical.push(':');
                canonical.push_str(text);
            }
        }
        canonical.push('}');
        let mut fields = [None; 6];
        for (slot, text) in fields.iter_mut().zip(canonical_fields.iter()) {
            *slot = text.as_deref().map(|t| PinDigest(digest(t.as_bytes())));
        }
        let digest = ToolDigest {
            whole: PinDigest(digest(canonical.as_bytes())),
            fields,
        };
        Ok(Self {
            name,
            canonical,
            digest,
        })
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The canonical JSON of the covered fields (what the digest is of).
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// Its digests.
    pub fn digest(&self) -> &ToolDigest {
        &self.digest
    }
}

/// What is wrong with a tool definition or a pin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// The definition is not one JSON object.
    #[error("a tool definition is not a JSON object")]
    NotAnObject,
    /// The definition is not valid JSON (or nests deeper than
    /// [`MAX_DEFINITION_DEPTH`]).
    #[error("a tool definition is not valid JSON: {0}")]
    Json(String),
    /// The definition has no string `name`.
    #[error("a tool definition has no string `name`")]
    NoName,
    /// The name is longer than [`MAX_PIN_NAME_BYTES`].
    #[error("a tool name of {0} bytes is longer than {MAX_PIN_NAME_BYTES}")]
    NameTooLong(usize),
    /// More than [`MAX_PINNED_TOOLS`] tools.
    #[error("more than {MAX_PINNED_TOOLS} tools")]
    TooManyTools,
    /// A field digest names a field not in [`PINNED_FIELDS`].
    #[error("{0:?} is not a pinned field")]
    UnknownField(String),
}

/// The accepted tool definitions and the policy: what the guard starts
/// with (from the pin file), given to the guard through
/// `ProxyConfig::tool_pins`.
///
/// ```
/// use mcp_stdio_core::{PinPolicy, ToolDefinition, ToolPins};
///
/// // Any 32-byte digest function; the CLI's is SHA-256.
/// fn digest(bytes: &[u8]) -> [u8; 32] {
///     let mut out = [0u8; 32];
///     for (i, b) in bytes.iter().enumerate() {
///         out[i % 32] = out[i % 32].wrapping_mul(31).wrapping_add(*b);
///     }
///     out
/// }
/// let echo = ToolDefinition::parse(
///     r#"{"name":"echo","description":"returns its text","inputSchema":{"type":"object"}}"#,
///     digest,
/// )
/// .unwrap();
/// let mut pins = ToolPins::new(digest);
/// pins.policy(PinPolicy::Hide).accept_hint("run `mcp-stdio pin accept pins.json`");
/// pins.pin(echo.name(), echo.digest().clone()).unwrap();
/// assert_eq!(pins.pinned_count(), 1);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ToolPins {
    digest: DigestFn,
    policy: PinPolicy,
    accepted: HashMap<String, ToolDigest>,
    pending: HashMap<String, Option<ToolDigest>>,
    first_use: bool,
    accept_hint: String,
}

impl fmt::Debug for ToolPins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolPins")
            .field("policy", &self.policy)
            .field("pinned", &self.accepted.len())
            .field("pending", &self.pending.len())
            .field("first_use", &self.first_use)
            .finish_non_exhaustive()
    }
}

impl ToolPins {
    /// No tool pinned, policy `warn`, digests made with `digest`.
    pub fn new(digest: DigestFn) -> Self {
        Self {
            digest,
            policy: PinPolicy::Warn,
            accepted: HashMap::new(),
            pending: HashMap::new(),
            first_use: false,
            accept_hint: "accept the new definitions in the pin file".to_owned(),
        }
    }

    /// Sets the policy (default [`PinPolicy::Warn`]).
    pub fn policy(&mut self, policy: PinPolicy) -> &mut Self {
        self.policy = policy;
        self
    }

    /// Sets whether there is no pin file yet (default false): the first
    /// whole listing of the session is then pinned as it is, given out in
    /// [`PinUpdate::pinned`], and not reported.
    pub fn first_use(&mut self, first_use: bool) -> &mut Self {
        self.first_use = first_use;
        self
    }

    /// Sets how a person accepts changed definitions, said in every refusal
    /// (default: "accept the new definitions in the pin file").
    pub fn accept_hint(&mut self, hint: &str) -> &mut Self {
        hint.clone_into(&mut self.accept_hint);
        self
    }

    /// Pins `name` to `digest` (replacing a pin of that name); at most
    /// [`MAX_PINNED_TOOLS`] tools, names of at most [`MAX_PIN_NAME_BYTES`].
    pub fn pin(&mut self, name: &str, digest: ToolDigest) -> Result<&mut Self, PinError> {
        check_room(&self.accepted, name)?;
        self.accepted.insert(name.to_owned(), digest);
        Ok(self)
    }

    /// A difference seen before and not accepted yet (the pin file's
    /// `pending`): `Some(digest)` for a definition seen changed or added
    /// (under `hide` and `block` the tool is not accepted from the start),
    /// `None` for a tool seen removed. Same bounds as [`pin`](Self::pin).
    pub fn pending(
        &mut self,
        name: &str,
        digest: Option<ToolDigest>,
    ) -> Result<&mut Self, PinError> {
        check_room(&self.pending, name)?;
        self.pending.insert(name.to_owned(), digest);
        Ok(self)
    }

    /// The policy.
    pub fn get_policy(&self) -> PinPolicy {
        self.policy
    }
    /// Whether there is no pin file yet.
    pub fn get_first_use(&self) -> bool {
        self.first_use
    }
    /// The accept hint.
    pub fn get_accept_hint(&self) -> &str {
        &self.accept_hint
    }
    /// The digest function.
    pub fn get_digest(&self) -> DigestFn {
        self.digest
    }
    /// How many tools are pinned.
    pub fn pinned_count(&self) -> usize {
        self.accepted.len()
    }
    /// How many differences are pending.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }
}

fn check_room<V>(map: &HashMap<String, V>, name: &str) -> Result<(), PinError> {
    if name.len() > MAX_PIN_NAME_BYTES {
        return Err(PinError::NameTooLong(name.len()));
    }
    if map.len() >= MAX_PINNED_TOOLS && !map.contains_key(name) {
        return Err(PinError::TooManyTools);
    }
    Ok(())
}

/// What kind of difference a [`PinChange`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PinChangeKind {
    /// A pinned tool listed with another definition.
    Changed,
    /// A tool listed that is not pinned.
    Added,
    /// A pinned tool not listed (a whole listing was seen).
    Removed,
}

impl PinChangeKind {
    /// `changed`, `added` or `removed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Added => "added",
            Self::Removed => "removed",
        }
    }
}

/// A difference between what the server lists and the pins, seen by the
/// guard and not accepted: for the pin file's `pending` section.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinChange {
    /// The tool's name.
    pub tool: String,
    /// What kind of difference.
    pub kind: PinChangeKind,
    /// For `changed`: the fields whose digest differs.
    pub fields: Vec<&'static str>,
    /// The digests of the definition seen (`None` for `removed`).
    pub digest: Option<ToolDigest>,
    /// The canonical text of the definition seen, when at most
    /// [`MAX_PINNED_DEFINITION_BYTES`] (`None` for `removed`, or larger).
    pub definition: Option<String>,
}

/// A tool pinned on first use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinnedDefinition {
    /// The tool's name.
    pub tool: String,
    /// Its digests.
    pub digest: ToolDigest,
    /// Its canonical text, when at most [`MAX_PINNED_DEFINITION_BYTES`].
    pub definition: Option<String>,
}

/// What the pin file should now hold, from one `tools/list` answer: given
/// out by the guard (`GuardOutput::Pins`) when it differs from what the
/// file held, for the caller to write at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinUpdate {
    /// When the answer came, ms since the Unix epoch (the caller's clock).
    pub seen_unix_ms: u64,
    /// Tools pinned on first use (no pin file yet): accepted as they are.
    pub pinned: Vec<PinnedDefinition>,
    /// Differences to keep as pending (replacing one of the same tool).
    pub pending: Vec<PinChange>,
    /// Tools whose pending difference is gone (listed as pinned again, or
    /// no longer listed after being added).
    pub cleared: Vec<String>,
}

/// Counters of the pins in a session (`--metrics`: `proxy.pins`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PinMetrics {
    /// The policy.
    pub policy: PinPolicy,
    /// Tools pinned when the session started.
    pub pinned_at_start: u64,
    /// `tools/list` answers checked.
    pub lists_checked: u64,
    /// Tools pinned on first use.
    pub first_use_pinned: u64,
    /// Changed definitions reported (once per definition seen).
    pub changed: u64,
    /// Added tools reported.
    pub added: u64,
    /// Removed tools reported.
    pub removed: u64,
    /// Tools listed as pinned again after a reported difference.
    pub restored: u64,
    /// Tool entries taken out of `tools/list` results (`hide`).
    pub hidden: u64,
    /// `tools/list` answers turned into errors (`block`, or unreadable
    /// under `hide`/`block`).
    pub lists_refused: u64,
    /// `tools/call` requests refused by the guard.
    pub calls_refused: u64,
    /// `notifications/tools/list_changed` from the server.
    pub list_changed_notifications: u64,
    /// Tool entries or results that could not be read (no name, not JSON).
    pub unreadable: u64,
    /// Names not remembered because a set was full ([`MAX_PINNED_TOOLS`]).
    pub not_remembered: u64,
    /// Updates given out for the pin file.
    pub updates: u64,
}

/// A `tools/list` request in flight: whether it asks for the first page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListRequest {
    first_page: bool,
}

impl ListRequest {
    /// The request's params: no `cursor` (or `null`) asks for the first page.
    pub(crate) fn of(params: Option<&RawValue>) -> Self {
        #[derive(serde::Deserialize)]
        struct P<'a> {
            #[serde(default, borrow)]
            cursor: Option<&'a RawValue>,
        }
        let cursor = params
            .and_then(|p| serde_json::from_str::<P<'_>>(p.get()).ok())
            .and_then(|p| p.cursor)
            .is_some_and(|c| c.get() != "null");
        Self {
            first_page: !cursor,
        }
    }
}

/// What the host gets for a `tools/list` answer.
#[derive(Debug, PartialEq)]
pub(crate) enum ListAnswer {
    /// The answer as it came.
    Forward,
    /// This result instead (tools taken out), with the same id.
    Replace(String),
    /// This error instead, with the same id.
    Refuse(ErrorObject),
}

/// The verdict on one `tools/list` answer.
#[derive(Debug)]
pub(crate) struct ListVerdict {
    pub(crate) answer: ListAnswer,
    /// Notes for the call's record (at most [`MAX_PIN_NOTES`] + 1).
    pub(crate) notes: Vec<String>,
    /// Lines for the guard's stderr, one per tool.
    pub(crate) lines: Vec<String>,
}

/// A tool whose last definition seen is not the accepted one.
#[derive(Debug, Clone)]
struct Unaccepted {
    kind: PinChangeKind,
    fields: Vec<&'static str>,
}

/// The pins' machine in a guard session: the accepted set, what was seen,
/// what is not accepted, and the updates for the pin file.
#[derive(Debug)]
pub(crate) struct PinCheck {
    digest: DigestFn,
    policy: PinPolicy,
    hint: String,
    accepted: HashMap<String, ToolDigest>,
    /// The first whole listing is still to be pinned as it is.
    first_use: bool,
    /// What the pin file's `pending` holds for each tool, as far as this
    /// session knows: `Some(digest)` seen changed/added, `None` removed.
    pending_known: HashMap<String, Option<PinDigest>>,
    /// Tools whose last definition seen is not accepted (sorted, for stable
    /// messages).
    unaccepted: BTreeMap<String, Unaccepted>,
    /// `unaccepted` was full once: under `hide` every call is refused.
    overflow: bool,
    /// The last definition reported for each tool in this session.
    reported: HashMap<String, PinDigest>,
    /// Pinned tools reported removed in this session.
    removed_reported: HashSet<String>,
    /// Names listed since the last first page, `None` when no whole
    /// listing is under way.
    listing: Option<HashSet<String>>,
    /// `notifications/tools/list_changed` since the last answer checked.
    list_changed: u64,
    updates: VecDeque<PinUpdate>,
    metrics: PinMetrics,
}

/// What one page's tools came to, while it is checked.
#[derive(Default)]
struct PageCheck {
    /// Indexes of entries the host must not get (ascending).
    withheld: Vec<usize>,
    /// Each readable entry's index and the name it is remembered by.
    listed: Vec<(usize, String)>,
    /// Names not accepted on this page: every entry of such a name is
    /// withheld, so a name listed twice, once as pinned and once not, is
    /// not accepted whatever the order.
    unaccepted: HashSet<String>,
    notes: Vec<String>,
    lines: Vec<String>,
    update: PinUpdate,
    first_use_pinned: u64,
}

impl PinCheck {
    /// The machine for one session with `pins`.
    pub(crate) fn new(pins: ToolPins) -> Self {
        let mut unaccepted = BTreeMap::new();
        let mut pending_known = HashMap::new();
        for (name, digest) in pins.pending {
            if let Some(d) = &digest {
                let state = match pins.accepted.get(&name) {
                    Some(p) if p.whole == d.whole => None,
                    Some(p) => Some(Unaccepted {
                        kind: PinChangeKind::Changed,
                        fields: p.changed_fields(d),
                    }),
                    None => Some(Unaccepted {
                        kind: PinChangeKind::Added,
                        fields: Vec::new(),
                    }),
                };
                if let Some(state) = state {
                    unaccepted.insert(name.clone(), state);
                }
            }
            pending_known.insert(name, digest.map(|d| d.whole));
        }
        Self {
            metrics: PinMetrics {
                policy: pins.policy,
                pinned_at_start: pins.accepted.len() as u64,
                ..PinMetrics::default()
            },
            digest: pins.digest,
            policy: pins.policy,
            hint: pins.accept_hint,
            first_use: pins.first_use,
            accepted: pins.accepted,
            pending_known,
            unaccepted,
            overflow: false,
            reported: HashMap::new(),
            removed_reported: HashSet::new(),
            listing: None,
            list_changed: 0,
            updates: VecDeque::new(),
        }
    }

    /// The counters.
    pub(crate) fn metrics(&self) -> &PinMetrics {
        &self.metrics
    }

    /// The next update for the pin file.
    #[must_use]
    pub(crate) fn poll_update(&mut self) -> Option<PinUpdate> {
        self.updates.pop_front()
    }

    /// A host's `tools/call` of `tool` (its `params.name`, when it has
    /// one): the error the guard answers instead of forwarding it, if the
    /// policy refuses it.
    pub(crate) fn refuse_call(&mut self, tool: Option<&str>) -> Option<ErrorObject> {
        let err = match self.policy {
            PinPolicy::Warn => return None,
            PinPolicy::Block if !self.unaccepted.is_empty() || self.overflow => {
                self.block_error("tools/call refused")
            }
            PinPolicy::Block => return None,
            PinPolicy::Hide => {
                let tool = tool?;
                let state = if tool.len() > MAX_PIN_NAME_BYTES || self.overflow {
                    Unaccepted {
                        kind: PinChangeKind::Added,
                        fields: Vec::new(),
                    }
                } else {
                    self.unaccepted.get(tool)?.clone()
                };
                let what = match state.kind {
                    PinChangeKind::Changed => format!(
                        "its definition changed since it was pinned ({})",
                        state.fields.join(", ")
                    ),
                    _ => "it is not pinned".to_owned(),
                };
                let data = serde_json::json!({
                    "tool": cut(tool),
                    "change": state.kind.as_str(),
                    "fields": state.fields,
                });
                error(
                    format!(
                        "tool {:?} is not accepted: {what}; the guard hides it (pin policy hide); {}",
                        cut(tool),
                        self.hint
                    ),
                    &data,
                )
            }
        };
        self.metrics.calls_refused += 1;
        Some(err)
    }

    /// The error of `block`: what is refused, the changes, how to accept.
    fn block_error(&self, what: &str) -> ErrorObject {
        let mut listed = Vec::new();
        let mut shown = Vec::new();
        for (name, u) in self.unaccepted.iter().take(MAX_CHANGES_IN_ERROR) {
            listed.push(serde_json::json!({
                "tool": cut(name),
                "change": u.kind.as_str(),
                "fields": u.fields,
            }));
            shown.push(match u.kind {
                PinChangeKind::Changed => {
                    format!("{:?} changed ({})", cut(name), u.fields.join(", "))
                }
                kind => format!("{:?} {}", cut(name), kind.as_str()),
            });
        }
        let more = self.unaccepted.len().saturating_sub(MAX_CHANGES_IN_ERROR);
        if more > 0 {
            shown.push(format!("and {more} more"));
        }
        if self.overflow {
            shown.push(format!("more than {MAX_PINNED_TOOLS} tools not accepted"));
        }
        if shown.is_empty() {
            shown.push("tool entries that could not be read".to_owned());
        }
        error(
            format!(
                "{what}: the server's tool definitions differ from the pinned ones (pin policy block): {}; {}",
                shown.join(", "),
                self.hint
            ),
            &serde_json::json!({"changes": listed, "more": more}),
        )
    }

    /// The server said its tool list changed: the next answer is checked
    /// as any other. The line for the guard's stderr.
    pub(crate) fn on_list_changed(&mut self) -> String {
        self.metrics.list_changed_notifications += 1;
        self.list_changed += 1;
        "mcp-stdio guard: the server says its tool list changed (notifications/tools/list_changed); its next tools/list answer is checked against the pins".to_owned()
    }

    /// A `tools/list` answer's `result` (JSON text) to `request`, at
    /// `unix_ms`: compared with the pins, reported, and what the host gets.
    pub(crate) fn check_list(
        &mut self,
        request: ListRequest,
        result: &str,
        unix_ms: u64,
    ) -> ListVerdict {
        self.metrics.lists_checked += 1;
        let mut notes = Vec::new();
        if std::mem::take(&mut self.list_changed) > 0 {
            notes.push("pin: after notifications/tools/list_changed".to_owned());
        }
        let Some(page) = read_page(result) else {
            self.metrics.unreadable += 1;
            let line = format!(
                "mcp-stdio guard: a tools/list result could not be read to check it against the pins{}",
                match self.policy {
                    PinPolicy::Warn => "; forwarded (pin policy warn)",
                    _ => "; the host gets an error",
                }
            );
            notes.push("pin: result unreadable".to_owned());
            let answer = match self.policy {
                PinPolicy::Warn => ListAnswer::Forward,
                _ => {
                    self.metrics.lists_refused += 1;
                    ListAnswer::Refuse(error(
                        format!(
                            "the server's tools/list result could not be checked against the pinned tool definitions (pin policy {})",
                            self.policy.as_str()
                        ),
                        &serde_json::json!({}),
                    ))
                }
            };
            return ListVerdict {
                answer,
                notes,
                lines: vec![line],
            };
        };
        if request.first_page {
            self.listing = Some(HashSet::new());
        }
        let mut check = PageCheck {
            update: PinUpdate {
                seen_unix_ms: unix_ms,
                ..PinUpdate::default()
            },
            ..PageCheck::default()
        };
        for (index, raw) in page.tools.iter().enumerate() {
            self.check_tool(index, raw.get(), &mut check);
        }
        for (index, name) in &check.listed {
            if check.unaccepted.contains(name) {
                check.withheld.push(*index);
            }
        }
        check.withheld.sort_unstable();
        if !page.has_next {
            self.end_of_listing(&mut check);
        }
        if check.first_use_pinned > 0 {
            check.lines.push(format!(
                "mcp-stdio guard: no pin file yet: pinned {} tool(s) as the server lists them",
                check.first_use_pinned
            ));
            notes.push(format!(
                "pin: first use, {} tool(s) pinned",
                check.first_use_pinned
            ));
        }
        let changes = check.notes.len();
        notes.extend(check.notes.into_iter().take(MAX_PIN_NOTES));
        if changes > MAX_PIN_NOTES {
            notes.push(format!("pin: and {} more", changes - MAX_PIN_NOTES));
        }
        let update = check.update;
        if !(update.pinned.is_empty() && update.pending.is_empty() && update.cleared.is_empty()) {
            self.metrics.updates += 1;
            self.updates.push_back(update);
        }
        let answer = match self.policy {
            _ if check.withheld.is_empty() => ListAnswer::Forward,
            PinPolicy::Warn => ListAnswer::Forward,
            PinPolicy::Hide => {
                self.metrics.hidden += check.withheld.len() as u64;
                notes.push(format!(
                    "pin: {} tool(s) hidden from the host",
                    check.withheld.len()
                ));
                ListAnswer::Replace(page.without(result, &check.withheld))
            }
            PinPolicy::Block => {
                self.metrics.lists_refused += 1;
                notes.push("pin: answer refused (pin policy block)".to_owned());
                ListAnswer::Refuse(self.block_error("tools/list refused"))
            }
        };
        ListVerdict {
            answer,
            notes,
            lines: check.lines,
        }
    }

    /// One entry of a page: compared, reported, remembered.
    fn check_tool(&mut self, index: usize, raw: &str, check: &mut PageCheck) {
        let def = match ToolDefinition::parse(raw, self.digest) {
            Ok(def) => def,
            Err(e) => {
                // Nameless or not JSON: nothing a host could call by name;
                // withheld under `hide` and `block` all the same.
                self.metrics.unreadable += 1;
                check.withheld.push(index);
                check.notes.push(format!("pin: entry {index} unreadable"));
                check.lines.push(format!(
                    "mcp-stdio guard: tools/list entry {index} could not be read ({e}); {}",
                    self.effect()
                ));
                return;
            }
        };
        // A name too long to pin is remembered by its first bytes (and
        // never accepted).
        let pinnable = def.name().len() <= MAX_PIN_NAME_BYTES;
        let name = if pinnable {
            def.name().to_owned()
        } else {
            format!("{}…", cut_bytes(def.name(), MAX_PIN_NAME_BYTES))
        };
        let name = name.as_str();
        check.listed.push((index, name.to_owned()));
        if let Some(listing) = &mut self.listing {
            if listing.len() < MAX_PINNED_TOOLS || listing.contains(name) {
                listing.insert(name.to_owned());
            } else {
                // Too many to tell what is missing: no removals this time.
                self.metrics.not_remembered += 1;
                self.listing = None;
            }
        }
        let seen = def.digest().whole;
        let state = match self.accepted.get(name) {
            Some(pinned) if pinned.whole == seen => None,
            Some(pinned) => Some(Unaccepted {
                kind: PinChangeKind::Changed,
                fields: pinned.changed_fields(def.digest()),
            }),
            None if self.first_use && pinnable && self.accepted.len() < MAX_PINNED_TOOLS => {
                self.accepted.insert(name.to_owned(), def.digest().clone());
                self.metrics.first_use_pinned += 1;
                check.first_use_pinned += 1;
                check.update.pinned.push(PinnedDefinition {
                    tool: name.to_owned(),
                    digest: def.digest().clone(),
                    definition: kept(&def),
                });
                return;
            }
            None => Some(Unaccepted {
                kind: PinChangeKind::Added,
                fields: Vec::new(),
            }),
        };
        let Some(state) = state else {
            if !check.unaccepted.contains(name) {
                self.matches_pin(name, check);
            }
            return;
        };
        check.unaccepted.insert(name.to_owned());
        if self.reported.get(name) != Some(&seen) {
            self.remember(name, seen);
            match state.kind {
                PinChangeKind::Changed => {
                    self.metrics.changed += 1;
                    check.notes.push(format!(
                        "pin: {:?} changed ({})",
                        cut(name),
                        state.fields.join(", ")
                    ));
                    check.lines.push(format!(
                        "mcp-stdio guard: pinned tool {:?} changed: {}; {}",
                        cut(name),
                        state.fields.join(", "),
                        self.effect()
                    ));
                }
                _ => {
                    self.metrics.added += 1;
                    check.notes.push(format!("pin: {:?} added", cut(name)));
                    check.lines.push(format!(
                        "mcp-stdio guard: tool {:?} is not pinned (added); {}",
                        cut(name),
                        self.effect()
                    ));
                }
            }
        }
        if pinnable
            && self.pending_known.get(name) != Some(&Some(seen))
            && self.know_pending(name, Some(seen))
        {
            check.update.pending.push(PinChange {
                tool: name.to_owned(),
                kind: state.kind,
                fields: state.fields.clone(),
                digest: Some(def.digest().clone()),
                definition: kept(&def),
            });
        }
        self.removed_reported.remove(name);
        if self.unaccepted.len() < MAX_PINNED_TOOLS || self.unaccepted.contains_key(name) {
            self.unaccepted.insert(name.to_owned(), state);
        } else {
            self.metrics.not_remembered += 1;
            self.overflow = true;
        }
    }

    /// A tool listed as pinned: a difference reported before is gone.
    fn matches_pin(&mut self, name: &str, check: &mut PageCheck) {
        let was_unaccepted = self.unaccepted.remove(name).is_some();
        let was_removed = self.removed_reported.remove(name);
        if self.reported.remove(name).is_some() || was_unaccepted || was_removed {
            self.metrics.restored += 1;
            check
                .notes
                .push(format!("pin: {:?} as pinned again", cut(name)));
            check.lines.push(format!(
                "mcp-stdio guard: tool {:?} is listed as pinned again",
                cut(name)
            ));
        }
        if self.pending_known.remove(name).is_some() {
            check.update.cleared.push(name.to_owned());
        }
    }

    /// A page without `nextCursor`: a whole listing (from a first page)
    /// tells the pinned tools that are gone; first use is over.
    fn end_of_listing(&mut self, check: &mut PageCheck) {
        self.first_use = false;
        let Some(listed) = self.listing.take() else {
            return;
        };
        let mut gone: Vec<String> = self
            .accepted
            .keys()
            .filter(|n| !listed.contains(*n))
            .cloned()
            .collect();
        gone.sort();
        for name in gone {
            // A changed tool that is gone is not waiting for acceptance.
            self.unaccepted.remove(&name);
            self.reported.remove(&name);
            if self.removed_reported.len() < MAX_PINNED_TOOLS
                && self.removed_reported.insert(name.clone())
            {
                self.metrics.removed += 1;
                check.notes.push(format!("pin: {:?} removed", cut(&name)));
                check.lines.push(format!(
                    "mcp-stdio guard: pinned tool {:?} is no longer listed (removed)",
                    cut(&name)
                ));
            }
            if self.pending_known.get(&name) != Some(&None) && self.know_pending(&name, None) {
                check.update.pending.push(PinChange {
                    tool: name,
                    kind: PinChangeKind::Removed,
                    fields: Vec::new(),
                    digest: None,
                    definition: None,
                });
            }
        }
        // Added tools no longer listed: nothing to accept any more.
        let vanished: Vec<String> = self
            .unaccepted
            .keys()
            .filter(|n| !listed.contains(*n) && !self.accepted.contains_key(*n))
            .cloned()
            .collect();
        for name in vanished {
            self.unaccepted.remove(&name);
            self.reported.remove(&name);
            if self.pending_known.remove(&name).is_some() {
                check.update.cleared.push(name);
            }
        }
    }

    /// Notes what the pin file's `pending` will hold for `name`; false
    /// when the set is full (the difference is then not kept).
    fn know_pending(&mut self, name: &str, digest: Option<PinDigest>) -> bool {
        if self.pending_known.len() >= MAX_PINNED_TOOLS && !self.pending_known.contains_key(name) {
            self.metrics.not_remembered += 1;
            return false;
        }
        self.pending_known.insert(name.to_owned(), digest);
        true
    }

    /// Remembers the definition reported for `name` (bounded).
    fn remember(&mut self, name: &str, digest: PinDigest) {
        if self.reported.len() < MAX_PINNED_TOOLS || self.reported.contains_key(name) {
            self.reported.insert(name.to_owned(), digest);
        } else {
            self.metrics.not_remembered += 1;
        }
    }

    /// What the policy does with a tool not accepted, for a stderr line.
    fn effect(&self) -> &'static str {
        match self.policy {
            PinPolicy::Warn => "forwarded (pin policy warn)",
            PinPolicy::Hide => "hidden from the host, its calls refused (pin policy hide)",
            PinPolicy::Block => "tools/list and tools/call refused (pin policy block)",
        }
    }
}

/// A definition's canonical text, when small enough to keep.
fn kept(def: &ToolDefinition) -> Option<String> {
    (def.canonical().len() <= MAX_PINNED_DEFINITION_BYTES).then(|| def.canonical().to_owned())
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary.
fn cut_bytes(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A name as shown in messages: at most [`SHOWN_NAME_CHARS`] characters.
fn cut(name: &str) -> String {
    let mut shown: String = name.chars().take(SHOWN_NAME_CHARS).collect();
    if shown.len() < name.len() {
        shown.push('…');
    }
    shown
}

/// A refusal with `message` and `data`.
fn error(message: String, data: &serde_json::Value) -> ErrorObject {
    let mut err = ErrorObject::new(TOOL_NOT_ACCEPTED, message);
    err.data = serde_json::value::to_raw_value(data).ok();
    err
}

/// One `tools/list` result, read: its tools raw, whether more pages follow.
struct Page<'a> {
    tools: Vec<&'a RawValue>,
    has_next: bool,
}

/// The result's `tools` (an array) and `nextCursor`; `None` when it is not
/// an object, has no `tools` array, or repeats `tools` (a host would take
/// the last, which must be the one checked: refused as ambiguous instead).
fn read_page(result: &str) -> Option<Page<'_>> {
    let members = members(result)?;
    let mut tools = None;
    let mut has_next = false;
    for (key, value) in &members {
        match key.as_ref() {
            "tools" if tools.is_some() => return None,
            "tools" => tools = Some(serde_json::from_str::<Vec<&RawValue>>(value.get()).ok()?),
            "nextCursor" => has_next = value.get() != "null",
            _ => {}
        }
    }
    Some(Page {
        tools: tools?,
        has_next,
    })
}

impl Page<'_> {
    /// `result` with the tools at `withheld` (indexes, ascending) taken out of its
    /// `tools`; every other member as it was, in its order. Never longer
    /// than `result` but for whitespace it had around commas.
    fn without(&self, result: &str, withheld: &[usize]) -> String {
        let mut out = String::with_capacity(result.len());
        out.push('{');
        // `read_page` accepted it: an object, so `members` reads it again.
        for (i, (key, value)) in members(result).unwrap_or_default().iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_string(key, &mut out);
            out.push(':');
            if key == "tools" {
                out.push('[');
                let mut first = true;
                for (index, tool) in self.tools.iter().enumerate() {
                    if withheld.binary_search(&index).is_ok() {
                        continue;
                    }
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    out.push_str(tool.get());
                }
                out.push(']');
            } else {
                out.push_str(value.get());
            }
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
mod tests;
