//! `guard --otel`: the core's spans (`mcp_stdio_core::CallSpan`) and the guard's counters
//! as OpenTelemetry spans and metrics, by the MCP semantic conventions (the
//! guard is the server's client), exported over OTLP/HTTP (protobuf).
//!
//! Where: the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `…_METRICS_ENDPOINT`, `…_HEADERS`,
//! `…_TIMEOUT`), read by the OTLP exporter; `OTEL_SERVICE_NAME` (default
//! [`DEFAULT_SERVICE_NAME`]) and `OTEL_RESOURCE_ATTRIBUTES` by the SDK.
//!
//! The loop never waits for a collector (G1): a span goes into one bounded
//! channel ([`OTEL_QUEUE`]) to the exporter's own thread, which sends
//! batches of at most [`OTEL_BATCH`]. A full channel drops the span and
//! counts it; an export that fails (a collector down, slow or answering
//! errors) drops its batch and counts it; one line on stderr says so the
//! first time. Metrics are recorded on the exporter's thread and sent by the
//! SDK's periodic reader (its own thread, `OTEL_METRIC_EXPORT_INTERVAL`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mcp_stdio_core::{CallSpan, GuardCounters, SpanTarget};
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use opentelemetry_sdk::Resource;

/// Spans that may wait for the exporter's thread; past it they are dropped
/// and counted.
pub(crate) const OTEL_QUEUE: usize = 2048;

/// Spans in one export request, at most.
pub(crate) const OTEL_BATCH: usize = 512;

/// How long a span may wait for its batch (`OTEL_BSP_SCHEDULE_DELAY`, in
/// ms, sets it).
pub(crate) const OTEL_DELAY: Duration = Duration::from_secs(5);

/// How long the exit waits for the collector when the last export failed.
pub(crate) const OTEL_CLOSE_FAILING: Duration = Duration::from_millis(200);

/// The service name when `OTEL_SERVICE_NAME` is not set.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "mcp-stdio-guard";

/// The instrumentation scope's name.
const SCOPE: &str = "mcp-stdio";

/// The conventions' buckets for `mcp.*.duration`, in seconds.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Whom the telemetry is about: the guard's `--name` and pid.
#[derive(Debug, Clone)]
pub(crate) struct OtelIdentity {
    pub(crate) name: String,
    pub(crate) guard_pid: u32,
}

/// How the session ended, for `mcp.client.session.duration`.
#[derive(Debug, Clone)]
pub(crate) struct SessionEnd {
    pub(crate) duration: Duration,
    pub(crate) protocol_version: Option<String>,
    /// The guard's exit code, when not 0 (`error.type`).
    pub(crate) exit_code: u8,
    pub(crate) counters: GuardCounters,
}

/// What the exporter did, for the metrics file.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct OtelSummary {
    /// Spans sent to the collector and accepted.
    pub(crate) spans_exported: u64,
    /// Spans dropped: the channel full, an export failed, or still waiting
    /// when the guard had to go.
    pub(crate) spans_dropped: u64,
    /// Spans handed to the exporter's thread and not yet sent (0 at exit:
    /// what was left is dropped).
    pub(crate) spans_waiting: u64,
    /// Export requests that failed.
    pub(crate) export_failures: u64,
}

enum Item {
    Span(Box<CallSpan>, GuardCounters),
    End(SessionEnd),
}

#[derive(Default)]
struct Shared {
    /// Spans handed to the exporter's thread.
    handed: AtomicU64,
    /// Spans lost: the channel full, or their export failed.
    dropped: AtomicU64,
    /// Whether the last export failed (the exit then does not wait for the
    /// collector).
    failing: std::sync::atomic::AtomicBool,
    exported: AtomicU64,
    /// Of `dropped`, those lost in a failed export.
    lost_in_export: AtomicU64,
    failures: AtomicU64,
    warned: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// One line on stderr, the first time anything is lost.
    fn warn_once(&self, why: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            crate::stderr_sink::line(&format!(
                "mcp-stdio guard: --otel: {why}; spans are dropped and counted, the session goes on"
            ));
        }
    }
}

/// The exporter's channel and thread.
pub(crate) struct Otel {
    tx: Option<SyncSender<Item>>,
    shared: Arc<Shared>,
    done: Receiver<()>,
}

/// The first protocol variable set to something other than OTLP/HTTP
/// with protobuf, as a usage error.
fn check_protocol() -> Result<(), String> {
    for var in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() && v != "http/protobuf" {
                return Err(format!(
                    "{var}={v}: the guard exports OTLP over HTTP with protobuf only (`http/protobuf`, port 4318 by default)"
                ));
            }
        }
    }
    Ok(())
}

impl Otel {
    /// Builds the exporters (on their own thread: the HTTP client is a
    /// blocking one) and starts it.
    ///
    /// # Errors
    /// A variable does not parse (the message names it), or no thread.
    pub(crate) fn start(identity: &OtelIdentity) -> Result<Self, String> {
        check_protocol()?;
        let delay = std::env::var("OTEL_BSP_SCHEDULE_DELAY")
            .ok()
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| {
                        format!("OTEL_BSP_SCHEDULE_DELAY={v}: not a number of milliseconds")
                    })
            })
            .transpose()?
            .unwrap_or(OTEL_DELAY);
        let (tx, rx) = std::sync::mpsc::sync_channel(OTEL_QUEUE);
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (done_tx, done) = std::sync::mpsc::sync_channel(1);
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let identity = identity.clone();
        std::thread::Builder::new()
            .name("mcp-stdio-otel".into())
            .spawn(move || {
                let exporter = match Exporter::build(&identity) {
                    Ok(e) => {
                        let _ = ready_tx.send(Ok(()));
                        e
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                exporter.run(&rx, &thread_shared, delay);
                let _ = done_tx.send(());
            })
            .map_err(|e| format!("no thread for the exporter: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                tx: Some(tx),
                shared,
                done,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the exporter's thread ended while starting".to_owned()),
        }
    }

    /// Hands a span over; never blocks (a full channel drops it, counted).
    pub(crate) fn span(&self, span: CallSpan, counters: GuardCounters) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(Item::Span(Box::new(span), counters)) {
            Ok(()) => {
                self.shared.handed.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                self.shared.warn_once("the exporter falls behind");
            }
        }
    }

    /// Sends the session's end, then waits at most `max` for what is queued
    /// to be exported and the metrics flushed (a collector that hangs does
    /// not hold the guard's exit), and only [`OTEL_CLOSE_FAILING`] when the
    /// last export failed. Spans still waiting then are counted as dropped.
    pub(crate) fn close(mut self, end: SessionEnd, max: Duration) -> OtelSummary {
        let max = if self.shared.failing.load(Ordering::Relaxed) {
            max.min(OTEL_CLOSE_FAILING)
        } else {
            max
        };
        if let Some(tx) = self.tx.take() {
            // Blocks at most until the thread takes one item: bounded by `max` below.
            let deadline = Instant::now() + max;
            let mut item = Item::End(end);
            loop {
                match tx.try_send(item) {
                    Ok(()) | Err(TrySendError::Disconnected(_)) => break,
                    Err(TrySendError::Full(back)) => {
                        if Instant::now() >= deadline {
                            break;
                        }
                        item = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
            drop(tx);
            let left = deadline.saturating_duration_since(Instant::now());
            if self.done.recv_timeout(left).is_err() {
                self.shared
                    .warn_once("the collector did not take the last spans in time");
            }
        }
        // What still waits now will not be sent: dropped.
        let mut summary = self.summary();
        summary.spans_dropped += summary.spans_waiting;
        summary.spans_waiting = 0;
        summary
    }

    /// What the exporter did so far (the live status).
    pub(crate) fn summary(&self) -> OtelSummary {
        let exported = self.shared.exported.load(Ordering::Relaxed);
        let lost = self.shared.lost_in_export.load(Ordering::Relaxed);
        let handed = self.shared.handed.load(Ordering::Relaxed);
        OtelSummary {
            spans_exported: exported,
            spans_dropped: self.shared.dropped.load(Ordering::Relaxed),
            spans_waiting: handed.saturating_sub(exported + lost),
            export_failures: self.shared.failures.load(Ordering::Relaxed),
        }
    }
}

/// One of the guard's counters: its instrument, and how to read it.
type GuardCounter = (Counter<u64>, fn(&GuardCounters) -> u64);

/// The exporter's side: the OTLP span exporter, the meter provider, the
/// instruments.
struct Exporter {
    spans: opentelemetry_otlp::SpanExporter,
    meters: SdkMeterProvider,
    scope: InstrumentationScope,
    operation: Histogram<f64>,
    session: Histogram<f64>,
    counters: [GuardCounter; 5],
    seen: GuardCounters,
}

impl Exporter {
    fn build(identity: &OtelIdentity) -> Result<Self, String> {
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
            resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
        }
        let resource = resource
            .with_attributes([
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                KeyValue::new("process.pid", i64::from(identity.guard_pid)),
                KeyValue::new("mcp_stdio.server.name", identity.name.clone()),
            ])
            .build();
        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_retry_policy(retry())
            .build()
            .map_err(|e| e.to_string())?;
        spans.set_resource(&resource);
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_retry_policy(retry())
            .build()
            .map_err(|e| e.to_string())?;
        let meters = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics).build())
            .with_resource(resource)
            .build();
        let scope = InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let meter = meters.meter_with_scope(scope.clone());
        let duration = |name: &'static str, what: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(what)
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build()
        };
        let counter = |name: &'static str, unit: &'static str, what: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(what)
                .build()
        };
        Ok(Self {
            spans,
            operation: duration(
                "mcp.client.operation.duration",
                "The duration of the MCP request or notification as observed on the sender from the time it was sent until the response or ack is received.",
            ),
            session: duration(
                "mcp.client.session.duration",
                "The duration of the MCP session as observed on the MCP client.",
            ),
            counters: [
                (
                    counter("mcp_stdio.requests", "{request}", "Requests the host sent."),
                    |c| c.requests,
                ),
                (
                    counter("mcp_stdio.restarts", "{restart}", "Times the server was started again after a crash."),
                    |c| c.restarts,
                ),
                (
                    counter("mcp_stdio.stderr.dropped", "By", "Bytes of the server's stderr seen but not kept."),
                    |c| c.stderr_dropped_bytes,
                ),
                (
                    counter("mcp_stdio.frames.refused", "{line}", "Lines refused at the wire limit, both ways."),
                    |c| c.refused_frames,
                ),
                (
                    counter("mcp_stdio.spans.dropped", "{span}", "Spans the core dropped before the exporter got them."),
                    |c| c.spans_dropped,
                ),
            ],
            meters,
            scope,
            seen: GuardCounters::default(),
        })
    }

    fn run(mut self, rx: &Receiver<Item>, shared: &Shared, delay: Duration) {
        let mut batch: Vec<SpanData> = Vec::with_capacity(OTEL_BATCH);
        let mut due: Option<Instant> = None;
        loop {
            let item = match due {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            };
            match item {
                Ok(Item::Span(span, counters)) => {
                    self.record(&span);
                    self.count(counters);
                    batch.push(span_data(&span, &self.scope));
                    due.get_or_insert_with(|| Instant::now() + delay);
                    if batch.len() >= OTEL_BATCH {
                        self.export(&mut batch, shared);
                        due = None;
                    }
                }
                Ok(Item::End(end)) => {
                    self.count(end.counters);
                    let mut attrs = vec![KeyValue::new("network.transport", "pipe")];
                    if let Some(v) = end.protocol_version {
                        attrs.push(KeyValue::new("mcp.protocol.version", v));
                    }
                    if end.exit_code != 0 {
                        attrs.push(KeyValue::new("error.type", end.exit_code.to_string()));
                    }
                    self.session.record(end.duration.as_secs_f64(), &attrs);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.export(&mut batch, shared);
                    due = None;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.export(&mut batch, shared);
        if self.meters.shutdown().is_err() {
            shared.failures.fetch_add(1, Ordering::Relaxed);
        }
        let _ = self.spans.shutdown();
    }

    fn export(&mut self, batch: &mut Vec<SpanData>, shared: &Shared) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        // The client is a blocking one: the future is done when it returns.
        match futures_lite::future::block_on(self.spans.export(std::mem::take(batch))) {
            Ok(()) => {
                shared.exported.fetch_add(n, Ordering::Relaxed);
                shared.failing.store(false, Ordering::Relaxed);
            }
            Err(e) => {
                shared.failing.store(true, Ordering::Relaxed);
                shared.failures.fetch_add(1, Ordering::Relaxed);
                shared.dropped.fetch_add(n, Ordering::Relaxed);
                shared.lost_in_export.fetch_add(n, Ordering::Relaxed);
                shared.warn_once(&format!("export failed ({e})"));
            }
        }
    }

    /// `mcp.client.operation.duration`, by the conventions' attributes.
    fn record(&self, span: &CallSpan) {
        let seconds = span.end_unix_ms.saturating_sub(span.start_unix_ms) as f64 / 1000.0;
        let mut attrs = vec![
            KeyValue::new("mcp.method.name", span.method.clone()),
            KeyValue::new("network.transport", "pipe"),
        ];
        if let Some(v) = &span.protocol_version {
            attrs.push(KeyValue::new("mcp.protocol.version", v.clone()));
        }
        if let Some(tool) = &span.tool {
            attrs.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
        }
        if let Some(SpanTarget::Prompt(p)) = &span.target {
            attrs.push(KeyValue::new("gen_ai.prompt.name", p.clone()));
        }
        if let Some(e) = &span.error_type {
            attrs.push(KeyValue::new("error.type", e.clone()));
        }
        if let Some(code) = span.status_code {
            attrs.push(KeyValue::new("rpc.response.status_code", code.to_string()));
        }
        self.operation.record(seconds, &attrs);
    }

    /// The guard's counters: what grew since the last time.
    fn count(&mut self, now: GuardCounters) {
        for (counter, read) in &self.counters {
            let grew = read(&now).saturating_sub(read(&self.seen));
            if grew > 0 {
                counter.add(grew, &[]);
            }
        }
        self.seen = now;
    }
}

/// One retry, soon: a batch that fails twice is dropped (counted) rather
/// than holding the spans behind it and the guard's exit.
fn retry() -> RetryPolicy {
    RetryPolicy::recommended()
        .with_max_retries(1)
        .with_initial_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(100))
        .with_max_jitter(Duration::from_millis(50))
}

fn unix(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// One call as an SDK span: the core's ids and times, a child of the host's
/// span when the request carried one.
fn span_data(span: &CallSpan, scope: &InstrumentationScope) -> SpanData {
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", span.method.clone()),
        KeyValue::new("jsonrpc.request.id", request_id(&span.request_id)),
        KeyValue::new("network.transport", "pipe"),
        KeyValue::new("mcp_stdio.request.bytes", span.request_bytes as i64),
    ];
    if let Some(v) = &span.protocol_version {
        attributes.push(KeyValue::new("mcp.protocol.version", v.clone()));
    }
    if let Some(tool) = &span.tool {
        attributes.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    }
    match &span.target {
        Some(SpanTarget::Prompt(p)) => {
            attributes.push(KeyValue::new("gen_ai.prompt.name", p.clone()));
        }
        Some(SpanTarget::Resource(uri)) => {
            attributes.push(KeyValue::new("mcp.resource.uri", uri.clone()));
        }
        None => {}
    }
    if span.response_bytes > 0 {
        attributes.push(KeyValue::new(
            "mcp_stdio.response.bytes",
            span.response_bytes as i64,
        ));
    }
    if span.utf8_repaired {
        attributes.push(KeyValue::new("mcp_stdio.utf8_repaired", true));
    }
    if let Some(e) = &span.error_type {
        attributes.push(KeyValue::new("error.type", e.clone()));
    }
    if let Some(code) = span.status_code {
        attributes.push(KeyValue::new("rpc.response.status_code", code.to_string()));
    }
    let flags = TraceFlags::new(span.context.flags);
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(span.context.trace_id),
            SpanId::from_bytes(span.context.span_id),
            flags,
            false,
            TraceState::NONE,
        ),
        parent_span_id: span
            .parent
            .map_or(SpanId::INVALID, |p| SpanId::from_bytes(p.span_id)),
        parent_span_is_remote: span.parent.is_some(),
        span_kind: SpanKind::Client,
        name: span.name.clone().into(),
        start_time: unix(span.start_unix_ms),
        end_time: unix(span.end_unix_ms),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match &span.error_type {
            Some(e) => Status::error(e.clone()),
            None => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    }
}

/// `jsonrpc.request.id` in its string form: a string id without its quotes.
fn request_id(json: &str) -> String {
    serde_json::from_str::<String>(json).unwrap_or_else(|_| json.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_its_string_form() {
        assert_eq!(request_id("7"), "7");
        assert_eq!(request_id("\"req-7\""), "req-7");
        assert_eq!(request_id("\"a\\\"b\""), "a\"b");
    }
}
