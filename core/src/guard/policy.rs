//! The guard's policies on tools (issue "the guard's policies", the
//! design's F4: a policy says what it did), sans-IO: which tools a host may
//! use (`--tools`, `--deny-tool`), how often a tool may run
//! (`--rate-limit [TOOL=]N/PERIOD`), and a brake on an agent that loops
//! (`--repeat-limit N`). Each takes what the host asked and the time, and
//! says allowed or refused with the reason; the proxy answers a refusal with
//! a JSON-RPC error of [`POLICY_REFUSED`] that names the policy.
//!
//! # Limits
//!
//! - Patterns: at most [`MAX_TOOL_PATTERNS`] in `--tools` and `--deny-tool`
//!   together, each at most [`MAX_PATTERN_BYTES`]; matching is linear in
//!   the name and the pattern (no backtracking blow-up).
//! - Rate limits: at most [`MAX_RATE_LIMITS`] rules; one token bucket per
//!   rule (a rule for all tools shares one bucket).
//! - The loop brake keeps one digest (the last call's) and a count.

use std::time::{Duration, Instant};

mod content;

pub(crate) use content::offset_in;

pub use content::{ContentLimit, CutSummary, Keep, ResultEdit, TRUNCATED_META_KEY};

/// JSON-RPC error code of a refusal by a policy of the guard's (a tool
/// outside `--tools` / `--deny-tool`, a call over `--rate-limit`, a loop
/// caught by `--repeat-limit`): -32031, beside the pins' -32030 in the
/// implementation-defined server error range.
pub const POLICY_REFUSED: i64 = -32031;
/// Patterns in `--tools` and `--deny-tool` together, at most.
pub const MAX_TOOL_PATTERNS: usize = 256;
/// Bytes of one pattern, at most.
pub const MAX_PATTERN_BYTES: usize = 256;
/// `--rate-limit` rules, at most.
pub const MAX_RATE_LIMITS: usize = 64;

/// Why a policy setting was refused (a usage error, exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// More patterns, or a longer one, than the limits allow.
    #[error("at most {MAX_TOOL_PATTERNS} tool patterns of at most {MAX_PATTERN_BYTES} bytes each")]
    TooManyPatterns,
    /// An empty pattern.
    #[error("an empty tool name or pattern")]
    EmptyPattern,
    /// A rate limit that does not parse.
    #[error(
        "`{0}` is not a rate limit: give N/PERIOD or TOOL=N/PERIOD, N a whole number from 1, \
         PERIOD a duration (`1s`, `500ms`, `1m`, `1h`; `s`, `m`, `h` alone mean one of them)"
    )]
    BadRate(String),
    /// More rate rules than [`MAX_RATE_LIMITS`].
    #[error("at most {MAX_RATE_LIMITS} rate limits")]
    TooManyRates,
    /// `--repeat-limit 0`.
    #[error("--repeat-limit is at least 1")]
    ZeroRepeat,
    /// `--max-result-text 0`.
    #[error("--max-result-text is at least 1")]
    ZeroResultText,
}

/// A tool name pattern: `*` stands for any run of characters, `?` for one;
/// anything else stands for itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPattern(String);

impl ToolPattern {
    /// The pattern `text`.
    ///
    /// # Errors
    /// It is empty or longer than [`MAX_PATTERN_BYTES`].
    pub fn new(text: &str) -> Result<Self, PolicyError> {
        if text.is_empty() {
            return Err(PolicyError::EmptyPattern);
        }
        if text.len() > MAX_PATTERN_BYTES {
            return Err(PolicyError::TooManyPatterns);
        }
        Ok(Self(text.to_owned()))
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `name` matches: the classic two-pointer wildcard match,
    /// linear in both lengths (a `*` retried from its last place only).
    pub fn matches(&self, name: &str) -> bool {
        let p: Vec<char> = self.0.chars().collect();
        let n: Vec<char> = name.chars().collect();
        let (mut i, mut j) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while j < n.len() {
            if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
                i += 1;
                j += 1;
            } else if i < p.len() && p[i] == '*' {
                star = Some((i, j));
                i += 1;
            } else if let Some((si, sj)) = star {
                i = si + 1;
                j = sj + 1;
                star = Some((si, sj + 1));
            } else {
                return false;
            }
        }
        p[i..].iter().all(|&c| c == '*')
    }
}

/// Which tools a host may use: `--tools` (only these; none given: all) and
/// `--deny-tool` (never these), each a list of [`ToolPattern`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    allow: Option<Vec<ToolPattern>>,
    deny: Vec<ToolPattern>,
}

/// Why a tool is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRefusal {
    /// Not in `--tools`.
    NotAllowed,
    /// Matched by this `--deny-tool` pattern.
    Denied(String),
}

impl ToolRefusal {
    /// The sentence the error and the record carry.
    pub fn describe(&self, tool: &str) -> String {
        self.describe_as(Listed::Tools, tool)
    }

    /// The sentence for `name` of the kind `listed`.
    pub fn describe_as(&self, listed: Listed, name: &str) -> String {
        let (what, allow, deny) = listed.words();
        match self {
            Self::NotAllowed => {
                format!("mcp-stdio guard: the {what} `{name}` is not in the guard's {allow} list")
            }
            Self::Denied(p) => {
                format!("mcp-stdio guard: the {what} `{name}` is denied by the guard's {deny} {p}")
            }
        }
    }
}

/// What a filter is about: tools by name, prompts by name, resources by
/// URI (each with its own `--tools` / `--deny-tool` pair of flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// `--tools`, `--deny-tool`: `tools/list`, `tools/call`.
    Tools,
    /// `--prompts`, `--deny-prompt`: `prompts/list`, `prompts/get`.
    Prompts,
    /// `--resources`, `--deny-resource`: `resources/list`,
    /// `resources/read`, `resources/subscribe`, matched on the URI.
    Resources,
}

impl Listed {
    /// The kind a list method lists, or a request method names one of.
    pub fn of_method(method: &str) -> Option<(Self, bool)> {
        Some(match method {
            "tools/list" => (Self::Tools, true),
            "tools/call" => (Self::Tools, false),
            "prompts/list" => (Self::Prompts, true),
            "prompts/get" => (Self::Prompts, false),
            "resources/list" => (Self::Resources, true),
            "resources/read" | "resources/subscribe" => (Self::Resources, false),
            _ => return None,
        })
    }

    /// The list's array member and the field that names an item in it
    /// (and in a request's params).
    pub fn keys(self) -> (&'static str, &'static str) {
        match self {
            Self::Tools => ("tools", "name"),
            Self::Prompts => ("prompts", "name"),
            Self::Resources => ("resources", "uri"),
        }
    }

    /// The policy's name in an error's `data` and the metrics.
    pub fn policy(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources => "resources",
        }
    }

    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Tools => ("tool", "--tools", "--deny-tool"),
            Self::Prompts => ("prompt", "--prompts", "--deny-prompt"),
            Self::Resources => ("resource", "--resources", "--deny-resource"),
        }
    }
}

impl ToolFilter {
    /// Only `allow` (when given), never `deny`.
    ///
    /// # Errors
    /// Too many patterns, or a bad one.
    pub fn new(allow: Option<&[String]>, deny: &[String]) -> Result<Self, PolicyError> {
        let count = allow.map_or(0, <[String]>::len) + deny.len();
        if count > MAX_TOOL_PATTERNS {
            return Err(PolicyError::TooManyPatterns);
        }
        let parse = |v: &[String]| v.iter().map(|t| ToolPattern::new(t)).collect();
        Ok(Self {
            allow: allow.map(parse).transpose()?,
            deny: parse(deny)?,
        })
    }

    /// Whether the filter lets every tool through.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// Whether the host may use `tool`, or why not.
    pub fn check(&self, tool: &str) -> Result<(), ToolRefusal> {
        if let Some(p) = self.deny.iter().find(|p| p.matches(tool)) {
            return Err(ToolRefusal::Denied(p.as_str().to_owned()));
        }
        match &self.allow {
            Some(allow) if !allow.iter().any(|p| p.matches(tool)) => Err(ToolRefusal::NotAllowed),
            _ => Ok(()),
        }
    }

    /// `--tools` names that match no tool of `names` (a warning on the
    /// first `tools/list`, not an error: a pattern with a wildcard is never
    /// reported).
    pub fn unmatched<'a>(&'a self, names: &'a [String]) -> impl Iterator<Item = &'a str> + 'a {
        self.allow
            .iter()
            .flatten()
            .filter(|p| !p.as_str().contains(['*', '?']))
            .filter(move |p| !names.iter().any(|n| p.matches(n)))
            .map(ToolPattern::as_str)
    }

    /// A `tools/list` result with the tools outside the policy taken out
    /// (everything else, `nextCursor` included, kept as it came); `None`
    /// when it is not a tools list or nothing is taken out. Also gives the
    /// names taken out.
    pub fn filter_list(&self, result: &str) -> Option<(String, Vec<String>)> {
        self.filter_items(result, Listed::Tools)
    }

    /// [`filter_list`](Self::filter_list) for a list of `listed`: a
    /// `prompts/list` by name, a `resources/list` by URI.
    pub fn filter_items(&self, result: &str, listed: Listed) -> Option<(String, Vec<String>)> {
        if self.is_open() {
            return None;
        }
        let (array, field) = listed.keys();
        let mut v: serde_json::Value = serde_json::from_str(result).ok()?;
        let tools = v.get_mut(array)?.as_array_mut()?;
        let mut removed = Vec::new();
        tools.retain(|t| {
            let Some(name) = t.get(field).and_then(serde_json::Value::as_str) else {
                return true;
            };
            let keep = self.check(name).is_ok();
            if !keep {
                removed.push(name.to_owned());
            }
            keep
        });
        if removed.is_empty() {
            return None;
        }
        Some((v.to_string(), removed))
    }
}

/// One `--rate-limit` rule: `calls` per `period`, for one tool or all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateRule {
    /// The tool (`None`: every tool, one bucket for all).
    pub tool: Option<String>,
    /// Calls allowed per period (the bucket's size).
    pub calls: u32,
    /// The period over which `calls` come back.
    pub period: Duration,
}

impl RateRule {
    /// Parses `[TOOL=]N/PERIOD` (`5/1s`, `search=10/1m`, `3/s`).
    ///
    /// # Errors
    /// [`PolicyError::BadRate`], naming the accepted forms.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let bad = || PolicyError::BadRate(text.to_owned());
        let (tool, rate) = match text.rsplit_once('=') {
            Some((t, r)) if !t.is_empty() => (Some(t.to_owned()), r),
            Some(_) => return Err(bad()),
            None => (None, text),
        };
        let (n, period) = rate.split_once('/').ok_or_else(bad)?;
        let calls: u32 = n.trim().parse().map_err(|_| bad())?;
        if calls == 0 {
            return Err(bad());
        }
        let period = parse_period(period.trim()).ok_or_else(bad)?;
        if period.is_zero() {
            return Err(bad());
        }
        Ok(Self {
            tool,
            calls,
            period,
        })
    }
}

/// `1s`, `500ms`, `2m`, `1h`, or a unit alone (`s`, `m`, `h`: one of it).
fn parse_period(text: &str) -> Option<Duration> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(digits);
    let n: u64 = if n.is_empty() { 1 } else { n.parse().ok()? };
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

/// A token bucket: full at the start, one token back every
/// `period / calls`.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at: Option<Instant>,
}

/// The rate limits: a bucket per rule.
#[derive(Debug, Clone, Default)]
pub struct RateLimiter {
    rules: Vec<(RateRule, Bucket)>,
}

impl RateLimiter {
    /// The rules given.
    ///
    /// # Errors
    /// More than [`MAX_RATE_LIMITS`].
    pub fn new(rules: Vec<RateRule>) -> Result<Self, PolicyError> {
        if rules.len() > MAX_RATE_LIMITS {
            return Err(PolicyError::TooManyRates);
        }
        Ok(Self {
            rules: rules
                .into_iter()
                .map(|r| {
                    let tokens = f64::from(r.calls);
                    (r, Bucket { tokens, at: None })
                })
                .collect(),
        })
    }

    /// Whether there are rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// A call of `tool` at `now`: taken from every bucket that applies, or
    /// refused (nothing taken) with how long until it would pass.
    pub fn take(&mut self, tool: &str, now: Instant) -> Result<(), Duration> {
        let applies = |r: &RateRule| r.tool.as_deref().is_none_or(|t| t == tool);
        let mut wait = Duration::ZERO;
        for (rule, bucket) in self.rules.iter_mut().filter(|(r, _)| applies(r)) {
            refill(rule, bucket, now);
            if bucket.tokens < 1.0 {
                let per_token = rule.period.as_secs_f64() / f64::from(rule.calls);
                let left = (1.0 - bucket.tokens) * per_token;
                wait = wait.max(Duration::from_secs_f64(left.max(0.0)));
            }
        }
        if !wait.is_zero() {
            return Err(wait);
        }
        for (_, bucket) in self.rules.iter_mut().filter(|(r, _)| applies(r)) {
            bucket.tokens -= 1.0;
        }
        Ok(())
    }
}

fn refill(rule: &RateRule, bucket: &mut Bucket, now: Instant) {
    let size = f64::from(rule.calls);
    if let Some(at) = bucket.at {
        let back = now.saturating_duration_since(at).as_secs_f64() / rule.period.as_secs_f64();
        bucket.tokens = (bucket.tokens + back * size).min(size);
    }
    bucket.at = Some(now);
}

/// The loop brake (`--repeat-limit N`): the same tool with the same
/// arguments more than `N` times in a row is refused until a different call
/// comes.
#[derive(Debug, Clone)]
pub struct RepeatBrake {
    limit: u32,
    last: Option<u64>,
    count: u32,
}

impl RepeatBrake {
    /// At most `limit` identical calls in a row.
    ///
    /// # Errors
    /// `limit` is 0.
    pub fn new(limit: u32) -> Result<Self, PolicyError> {
        if limit == 0 {
            return Err(PolicyError::ZeroRepeat);
        }
        Ok(Self {
            limit,
            last: None,
            count: 0,
        })
    }

    /// A call of `tool` with `arguments` (raw JSON, or none): allowed, or
    /// refused with how many identical calls came in a row (this one
    /// counted). Arguments are compared as JSON values (member order and
    /// spacing do not matter).
    pub fn check(&mut self, tool: &str, arguments: Option<&str>) -> Result<(), u32> {
        let digest = call_digest(tool, arguments);
        if self.last == Some(digest) {
            self.count = self.count.saturating_add(1);
        } else {
            self.last = Some(digest);
            self.count = 1;
        }
        if self.count > self.limit {
            Err(self.count)
        } else {
            Ok(())
        }
    }

    /// The limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

/// A digest of a call: the tool and its arguments as a canonical JSON text
/// (object members sorted), so that two encodings of one call are one.
fn call_digest(tool: &str, arguments: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let canonical = arguments
        .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok())
        .map_or_else(|| arguments.unwrap_or("").to_owned(), |v| v.to_string());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tool.hash(&mut h);
    canonical.hash(&mut h);
    h.finish()
}

/// Tools counted one by one in [`PolicyMetrics::refused`]; later ones
/// share `(other)`.
pub const MAX_POLICY_TOOLS: usize = 256;

/// What the policies did, for `--metrics` and the status.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyMetrics {
    /// Requests refused, by tool (or prompt, or resource URI; at most
    /// [`MAX_POLICY_TOOLS`] names).
    pub refused: std::collections::BTreeMap<String, u64>,
    /// Refusals by policy: `tools`, `prompts`, `resources`, `rate-limit`,
    /// `repeat-limit`.
    pub refused_by: std::collections::BTreeMap<&'static str, u64>,
    /// Tools taken out of `tools/list` answers (counted per answer).
    pub tools_hidden: u64,
    /// Prompts taken out of `prompts/list` answers.
    pub prompts_hidden: u64,
    /// Resources taken out of `resources/list` answers.
    pub resources_hidden: u64,
    /// Results the content limit edited (`--max-result-text`).
    pub results_cut: u64,
    /// Bytes of text and media those results did not pass on.
    pub bytes_omitted: u64,
    /// Image, audio and blob blocks replaced by a text block.
    pub media_replaced: u64,
    /// Results withheld for a `structuredContent` over the limit.
    pub structured_withheld: u64,
}

impl PolicyMetrics {
    /// Adds `other`'s counts (a hub's sessions together); tools past
    /// [`MAX_POLICY_TOOLS`] count under `(other)`.
    pub fn add(&mut self, other: &Self) {
        for (tool, n) in &other.refused {
            let key = if self.refused.len() < MAX_POLICY_TOOLS || self.refused.contains_key(tool) {
                tool.clone()
            } else {
                "(other)".to_owned()
            };
            *self.refused.entry(key).or_default() += n;
        }
        for (policy, n) in &other.refused_by {
            *self.refused_by.entry(policy).or_default() += n;
        }
        self.tools_hidden += other.tools_hidden;
        self.prompts_hidden += other.prompts_hidden;
        self.resources_hidden += other.resources_hidden;
        self.results_cut += other.results_cut;
        self.bytes_omitted += other.bytes_omitted;
        self.media_replaced += other.media_replaced;
        self.structured_withheld += other.structured_withheld;
    }
}

/// The guard's tool policies together: the filter, the rate limits, the
/// loop brake, the content limit. Set with `ProxyConfig::tool_policy`.
#[derive(Debug, Clone, Default)]
pub struct ToolPolicy {
    filter: ToolFilter,
    /// `--prompts` / `--deny-prompt`.
    prompts: ToolFilter,
    /// `--resources` / `--deny-resource`, on URIs.
    resources: ToolFilter,
    rates: RateLimiter,
    repeat: Option<RepeatBrake>,
    content: Option<ContentLimit>,
    metrics: PolicyMetrics,
    warned_unmatched: bool,
}

impl ToolPolicy {
    /// The policies given (each may be empty).
    pub fn new(filter: ToolFilter, rates: RateLimiter, repeat: Option<RepeatBrake>) -> Self {
        Self {
            filter,
            prompts: ToolFilter::default(),
            resources: ToolFilter::default(),
            rates,
            repeat,
            content: None,
            metrics: PolicyMetrics::default(),
            warned_unmatched: false,
        }
    }

    /// With the content limit on tool results (`None`: off).
    #[must_use]
    pub fn content_limit(mut self, limit: Option<ContentLimit>) -> Self {
        self.content = limit;
        self
    }

    /// The content limit, when set.
    pub fn get_content_limit(&self) -> Option<&ContentLimit> {
        self.content.as_ref()
    }

    /// With filters on prompts (by name) and resources (by URI), as
    /// `--tools` / `--deny-tool` are on tools.
    #[must_use]
    pub fn listed_filters(mut self, prompts: ToolFilter, resources: ToolFilter) -> Self {
        self.prompts = prompts;
        self.resources = resources;
        self
    }

    fn filter_of(&self, listed: Listed) -> &ToolFilter {
        match listed {
            Listed::Tools => &self.filter,
            Listed::Prompts => &self.prompts,
            Listed::Resources => &self.resources,
        }
    }

    /// Whether no policy is set.
    pub fn is_empty(&self) -> bool {
        self.filter.is_open()
            && self.prompts.is_open()
            && self.resources.is_open()
            && self.rates.is_empty()
            && self.repeat.is_none()
            && self.content.is_none()
    }

    /// A `tools/call` result edited by the content limit (`None`: as it
    /// came), counted in the metrics.
    pub(crate) fn edit_result(&mut self, result: &str) -> Option<ResultEdit> {
        let edit = self.content.as_ref()?.edit(result)?;
        let s = edit.summary();
        self.metrics.results_cut += 1;
        self.metrics.bytes_omitted += s.omitted_bytes;
        self.metrics.media_replaced += s.media_replaced;
        self.metrics.structured_withheld += u64::from(s.structured_withheld.is_some());
        Some(edit)
    }

    /// What the policies did.
    pub fn metrics(&self) -> &PolicyMetrics {
        &self.metrics
    }

    /// Whether answers to the list request `method` (`tools/list`,
    /// `prompts/list`, `resources/list`) are filtered.
    pub(crate) fn filters_list(&self, method: &str) -> Option<Listed> {
        Listed::of_method(method)
            .filter(|(listed, list)| *list && !self.filter_of(*listed).is_open())
            .map(|(listed, _)| listed)
    }

    /// A `prompts/get`, `resources/read` or `resources/subscribe` (`params`
    /// as JSON text): allowed, or the error the host gets, naming the
    /// filter (`--prompts`, `--deny-resource`, …). Other methods pass.
    pub(crate) fn check_request(
        &mut self,
        method: &str,
        params: Option<&str>,
    ) -> Result<(), crate::wire::message::ErrorObject> {
        let Some((listed, false)) = Listed::of_method(method) else {
            return Ok(());
        };
        if listed == Listed::Tools {
            return Ok(());
        }
        let (_, field) = listed.keys();
        let Some(name) = params
            .and_then(|p| crate::wire::object::member(p, field))
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        else {
            return Ok(());
        };
        let Err(r) = self.filter_of(listed).check(&name) else {
            return Ok(());
        };
        let policy = listed.policy();
        Err(self.refuse(
            policy,
            &name,
            r.describe_as(listed, &name),
            &serde_json::json!({"policy": policy}),
        ))
    }

    /// A refusal by `policy` of `name`: counted, and the error.
    fn refuse(
        &mut self,
        policy: &'static str,
        name: &str,
        message: String,
        data: &serde_json::Value,
    ) -> crate::wire::message::ErrorObject {
        *self.metrics.refused_by.entry(policy).or_default() += 1;
        let key = if self.metrics.refused.len() < MAX_POLICY_TOOLS
            || self.metrics.refused.contains_key(name)
        {
            name.to_owned()
        } else {
            "(other)".to_owned()
        };
        *self.metrics.refused.entry(key).or_default() += 1;
        let mut err = crate::wire::message::ErrorObject::new(POLICY_REFUSED, message);
        err.data = serde_json::value::RawValue::from_string(data.to_string()).ok();
        err
    }

    /// A `tools/call` of `tool` with `arguments` at `now`: allowed, or the
    /// error the host gets (naming the policy; `data` says which, and for a
    /// rate limit `retryAfterMs`). With no time known yet (`None`), the
    /// rate limits let the call through.
    pub(crate) fn check_call(
        &mut self,
        tool: &str,
        arguments: Option<&str>,
        now: Option<Instant>,
    ) -> Result<(), crate::wire::message::ErrorObject> {
        let refusal = if let Err(r) = self.filter.check(tool) {
            Some((
                "tools",
                r.describe(tool),
                serde_json::json!({"policy": "tools"}),
            ))
        } else if let Some(Err(wait)) = now.map(|now| self.rates.take(tool, now)) {
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
            Some((
                "rate-limit",
                format!(
                    "mcp-stdio guard: the tool `{tool}` is over the guard's --rate-limit; retry in {ms} ms"
                ),
                serde_json::json!({"policy": "rate-limit", "retryAfterMs": ms}),
            ))
        } else if let Some(Err(n)) = self.repeat.as_mut().map(|b| b.check(tool, arguments)) {
            let limit = self.repeat.as_ref().map_or(0, RepeatBrake::limit);
            Some((
                "repeat-limit",
                format!(
                    "mcp-stdio guard: the agent seems to loop: `{tool}` with the same arguments {n} times in a row (--repeat-limit {limit}); a different call goes through"
                ),
                serde_json::json!({"policy": "repeat-limit", "repeats": n}),
            ))
        } else {
            None
        };
        let Some((policy, message, data)) = refusal else {
            return Ok(());
        };
        Err(self.refuse(policy, tool, message, &data))
    }

    /// A result of a list of `listed`: the items outside the
    /// policy taken out (`None`: as it came), and for `tools/list` a
    /// warning, once, for `--tools` names the server has none of.
    pub(crate) fn filter_list(
        &mut self,
        listed: Listed,
        result: &str,
    ) -> (Option<String>, Option<String>) {
        if listed != Listed::Tools {
            let filtered =
                self.filter_of(listed)
                    .filter_items(result, listed)
                    .map(|(out, removed)| {
                        let n = removed.len() as u64;
                        match listed {
                            Listed::Prompts => self.metrics.prompts_hidden += n,
                            _ => self.metrics.resources_hidden += n,
                        }
                        out
                    });
            return (filtered, None);
        }
        let mut warning = None;
        // Only a whole list (no further page) can say a name is missing.
        if !self.warned_unmatched && !result.contains("\"nextCursor\"") {
            let names: Vec<String> = serde_json::from_str::<serde_json::Value>(result)
                .ok()
                .and_then(|v| {
                    v.get("tools")?.as_array().map(|t| {
                        t.iter()
                            .filter_map(|t| t.get("name")?.as_str().map(str::to_owned))
                            .collect()
                    })
                })
                .unwrap_or_default();
            let missing: Vec<&str> = self.filter.unmatched(&names).collect();
            if !missing.is_empty() {
                warning = Some(format!(
                    "mcp-stdio guard: --tools names tools the server does not list: {}",
                    missing.join(", ")
                ));
            }
            self.warned_unmatched = true;
        }
        let filtered = self.filter.filter_list(result).map(|(out, removed)| {
            self.metrics.tools_hidden += removed.len() as u64;
            out
        });
        (filtered, warning)
    }
}

#[cfg(test)]
mod tests;
