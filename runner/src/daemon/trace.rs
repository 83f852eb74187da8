//! OpenTelemetry traces of executions, exported over OTLP/HTTP as JSON,
//! off unless `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) names
//! a collector.
//!
//! Each execution the daemon runs is one trace (or joins the caller's):
//!
//! | span | from | to |
//! |---|---|---|
//! | `execution` (server) | the request's arrival | the result |
//! | `admission` | the request's arrival | the runner starts it (body read, checks, queue wait) |
//! | `stage` | the skills' root leased (staged or published) | |
//! | `launch` | limits, cgroup, launcher prepared | the sandbox spawned |
//! | `wait` | the sandbox spawned | it is gone |
//!
//! A valid W3C `traceparent` header on the request makes the execution
//! span a child of the caller's span (same trace id, its span id as
//! parent); a missing or malformed one starts a new trace and is never an
//! error (logged at DEBUG).
//!
//! How: the runner's `execution` span and its `stage`, `launch` and
//! `wait` spans (TRACE level, so they add nothing to log lines) are timed
//! by [`SpanLayer`], a `tracing` layer installed only when export is on.
//! The route registers the execution ([`begin`], with the traceparent),
//! the layer records its spans' times, and the route's [`finish`] turns
//! them into OTLP spans for the exporter task, which posts them in
//! batches with the hyper client already in the tree (no OpenTelemetry
//! SDK: see docs/daemon.md, "Why these libraries"). A full queue or a
//! collector that is down drops spans, with a WARN line once; the
//! daemon never waits on its collector.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::exec::result::{ExecResult, Status};

/// Spans queued for export; more are dropped.
const QUEUE: usize = 4096;
/// Executions posted in one request at most.
const BATCH: usize = 256;
/// Registered executions whose spans never came (refused before the
/// runner started them) are forgotten past this many.
const PENDING_MAX: usize = 65_536;
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The runner's spans this layer times.
const EXECUTION: &str = "execution";
const CHILDREN: [&str; 3] = ["stage", "launch", "wait"];

/// Where traces go: `http://HOST:PORT[/PREFIX]`, posted to
/// `PREFIX/v1/traces`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// The request path, `…/v1/traces`.
    pub path: String,
}

impl Endpoint {
    /// Parses the base URL; the error is the setting's reason.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        if url.starts_with("https://") {
            return Err(format!("{url:?} uses https, which the daemon does not speak; export to a collector on this host or network over http:// (an OpenTelemetry Collector can forward over TLS)"));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url:?} is not an http:// URL; give the collector's base URL, e.g. http://127.0.0.1:4318")
        })?;
        let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bad = || format!("{url:?} has no HOST:PORT; give e.g. http://127.0.0.1:4318");
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => (h, p.parse::<u16>().map_err(|_| bad())?),
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || authority.contains('@') {
            return Err(bad());
        }
        let prefix = prefix.trim_end_matches('/');
        Ok(Endpoint {
            host: host.to_owned(),
            port,
            path: if prefix.is_empty() {
                "/v1/traces".to_owned()
            } else {
                format!("/{prefix}/v1/traces")
            },
        })
    }
}

/// A W3C trace context: the caller's trace id and span id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl TraceParent {
    /// Parses a `traceparent` header value (W3C Trace Context):
    /// `VERSION-TRACEID-PARENTID-FLAGS`, lowercase hex, ids not all zero,
    /// version `ff` invalid; a later version may carry more fields after
    /// these. `None` for anything else.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let parent = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2) || version == "ff" || !hex(flags, 2) {
            return None;
        }
        if version == "00" && rest.is_some() {
            return None;
        }
        if !hex(trace, 32) || !hex(parent, 16) {
            return None;
        }
        let mut t = TraceParent {
            trace_id: [0; 16],
            span_id: [0; 8],
        };
        decode(trace, &mut t.trace_id);
        decode(parent, &mut t.span_id);
        if t.trace_id == [0; 16] || t.span_id == [0; 8] {
            return None;
        }
        Some(t)
    }
}

fn decode(hex: &str, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    while b == [0u8; N] {
        let _ = getrandom::fill(&mut b);
    }
    b
}

fn nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        .to_string()
}

/// One of the runner's child spans, timed.
#[derive(Debug, Clone)]
struct Child {
    name: &'static str,
    start: SystemTime,
    end: SystemTime,
}

/// What the layer keeps on a timed span.
#[derive(Debug)]
struct Timing {
    start: SystemTime,
    children: Vec<Child>,
}

/// An execution the route registered, until its result.
#[derive(Debug)]
struct Pending {
    parent: Option<TraceParent>,
    received: SystemTime,
    /// The runner's `execution` span, once it closed.
    ran: Option<(SystemTime, SystemTime, Vec<Child>)>,
}

/// The export state, set once at start when export is on.
#[derive(Debug)]
pub struct Tracer {
    pending: Mutex<HashMap<String, Pending>>,
    queue: tokio::sync::mpsc::Sender<Value>,
    receiver: Mutex<Option<tokio::sync::mpsc::Receiver<Value>>>,
    endpoint: Endpoint,
    warned: std::sync::atomic::AtomicBool,
}

static TRACER: OnceLock<Arc<Tracer>> = OnceLock::new();

/// Turns export on: returns the layer to install with the logging
/// subscriber. Call [`spawn_exporter`] once the runtime runs.
pub fn enable(endpoint: Endpoint) -> SpanLayer {
    let (queue, receiver) = tokio::sync::mpsc::channel(QUEUE);
    let tracer = TRACER.get_or_init(|| {
        Arc::new(Tracer {
            pending: Mutex::new(HashMap::new()),
            queue,
            receiver: Mutex::new(Some(receiver)),
            endpoint,
            warned: Default::default(),
        })
    });
    SpanLayer {
        tracer: tracer.clone(),
    }
}

fn tracer() -> Option<&'static Arc<Tracer>> {
    TRACER.get()
}

impl Tracer {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn warn_once(&self, what: &str) {
        if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!("{what}; execution traces are being dropped");
        }
    }
}

/// Registers an admitted execution with the request's `traceparent`
/// header, if any, and its arrival. Does nothing when export is off.
pub fn begin(execution_id: &str, traceparent: Option<&[u8]>, received: SystemTime) {
    let Some(t) = tracer() else {
        return;
    };
    let parent = traceparent.and_then(|v| {
        let parsed = std::str::from_utf8(v).ok().and_then(TraceParent::parse);
        if parsed.is_none() {
            tracing::debug!(id = %execution_id, "ignored a malformed traceparent header: a new trace is started");
        }
        parsed
    });
    let mut pending = t.lock();
    if pending.len() >= PENDING_MAX {
        pending.clear();
    }
    pending.insert(
        execution_id.to_owned(),
        Pending {
            parent,
            received,
            ran: None,
        },
    );
}

/// Exports the execution's spans with its result. Does nothing when
/// export is off or the execution was not registered.
pub fn finish(result: &ExecResult) {
    let Some(t) = tracer() else {
        return;
    };
    let Some(p) = t.lock().remove(&result.execution_id) else {
        return;
    };
    let spans = spans(&p, result, SystemTime::now());
    if t.queue.try_send(spans).is_err() {
        t.warn_once("the trace export queue is full");
    }
}

/// The OTLP spans of one execution, as JSON objects.
fn spans(p: &Pending, result: &ExecResult, end: SystemTime) -> Value {
    let trace_id = p.parent.map_or_else(random::<16>, |t| t.trace_id);
    let root = random::<8>();
    let attr = |k: &str, v: Value| json!({"key": k, "value": v});
    let mut attributes = vec![
        attr("execution.id", json!({"stringValue": result.execution_id})),
        attr(
            "execution.status",
            json!({"stringValue": result.status.as_str()}),
        ),
    ];
    if let Some(code) = result.exit_code {
        attributes.push(attr(
            "process.exit.code",
            json!({"intValue": code.to_string()}),
        ));
    }
    if let Some(signal) = result.signal {
        attributes.push(attr(
            "process.signal",
            json!({"intValue": signal.to_string()}),
        ));
    }
    let mut status = json!({"code": 0});
    if let Some(e) = &result.error {
        attributes.push(attr("error.type", json!({"stringValue": e.kind.as_str()})));
        if matches!(result.status, Status::Rejected | Status::Failed) {
            status = json!({"code": 2, "message": e.message});
        }
    }
    let mut execution = json!({
        "traceId": hex(&trace_id),
        "spanId": hex(&root),
        "name": "execution",
        "kind": 2,
        "startTimeUnixNano": nanos(p.received),
        "endTimeUnixNano": nanos(end),
        "attributes": attributes,
        "status": status,
    });
    if let Some(parent) = p.parent {
        execution["parentSpanId"] = json!(hex(&parent.span_id));
    }
    let child = |name: &str, start: SystemTime, end: SystemTime| {
        json!({
            "traceId": hex(&trace_id),
            "spanId": hex(&random::<8>()),
            "parentSpanId": hex(&root),
            "name": name,
            "kind": 1,
            "startTimeUnixNano": nanos(start),
            "endTimeUnixNano": nanos(end),
        })
    };
    let mut all = vec![execution];
    if let Some((start, _, children)) = &p.ran {
        all.push(child("admission", p.received, *start));
        all.extend(children.iter().map(|c| child(c.name, c.start, c.end)));
    }
    Value::Array(all)
}

/// The request body of one export: the spans of several executions.
fn request(batch: Vec<Value>) -> Value {
    let spans: Vec<Value> = batch
        .into_iter()
        .flat_map(|v| match v {
            Value::Array(a) => a,
            other => vec![other],
        })
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "skill-runner"}},
            {"key": "service.version", "value": {"stringValue": env!("CARGO_PKG_VERSION")}},
        ]},
        "scopeSpans": [{
            "scope": {"name": "skill-runner", "version": env!("CARGO_PKG_VERSION")},
            "spans": spans,
        }],
    }]})
}

/// Starts the exporter task on the current runtime (once; a no-op when
/// export is off).
pub fn spawn_exporter() {
    let Some(t) = tracer() else {
        return;
    };
    let Some(mut rx) = t.receiver.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return;
    };
    let t = t.clone();
    tokio::spawn(async move {
        let mut conn: Option<
            hyper::client::conn::http1::SendRequest<http_body_util::Full<axum::body::Bytes>>,
        > = None;
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(v) => batch.push(v),
                    Err(_) => break,
                }
            }
            let body = serde_json::to_vec(&request(batch)).unwrap_or_default();
            let sent =
                tokio::time::timeout(EXPORT_TIMEOUT, post(&t.endpoint, &mut conn, body)).await;
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    conn = None;
                    t.warn_once(&format!(
                        "cannot export traces to http://{}:{}{}: {e}",
                        t.endpoint.host, t.endpoint.port, t.endpoint.path
                    ));
                }
                Err(_) => {
                    conn = None;
                    t.warn_once("the trace collector did not answer within 10 s");
                }
            }
        }
    });
}

/// Posts one body, reusing the keep-alive connection when it is still up.
async fn post(
    e: &Endpoint,
    conn: &mut Option<
        hyper::client::conn::http1::SendRequest<http_body_util::Full<axum::body::Bytes>>,
    >,
    body: Vec<u8>,
) -> Result<(), String> {
    if !matches!(conn, Some(c) if !c.is_closed()) {
        let tcp = tokio::net::TcpStream::connect((e.host.as_str(), e.port))
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let (send, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        *conn = Some(send);
    }
    let Some(send) = conn.as_mut() else {
        return Err("no connection".into());
    };
    send.ready().await.map_err(|e| e.to_string())?;
    let host = if e.host.contains(':') {
        format!("[{}]:{}", e.host, e.port)
    } else {
        format!("{}:{}", e.host, e.port)
    };
    let req = hyper::Request::post(e.path.as_str())
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(axum::body::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    // The answer's body is read so the connection can be reused.
    let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the collector answered {status}"))
    }
}

/// Times the runner's `execution` span (of registered executions) and
/// its `stage`, `launch` and `wait` spans.
#[derive(Debug, Clone)]
pub struct SpanLayer {
    tracer: Arc<Tracer>,
}

impl SpanLayer {
    /// The only spans this layer wants: with this filter, installing it
    /// enables no other span or event.
    pub fn wants(meta: &tracing::Metadata<'_>) -> bool {
        meta.is_span() && (meta.name() == EXECUTION || CHILDREN.contains(&meta.name()))
    }
}

/// Reads the `id` field of an `execution` span.
struct IdField(Option<String>);

impl tracing::field::Visit for IdField {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "id" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "id" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

/// The execution id a span is timed under, kept in its extensions.
struct ExecutionId(String);

impl<S> tracing_subscriber::Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let name = attrs.metadata().name();
        if name == EXECUTION {
            let mut field = IdField(None);
            attrs.record(&mut field);
            let Some(exec) = field.0 else {
                return;
            };
            // Only the runner's span of a registered execution not yet
            // run (the route's own span of the same name is not timed).
            let wanted = self
                .tracer
                .lock()
                .get(&exec)
                .is_some_and(|p| p.ran.is_none());
            if wanted && span.parent().is_none() {
                let mut ext = span.extensions_mut();
                ext.insert(ExecutionId(exec));
                ext.insert(Timing {
                    start: SystemTime::now(),
                    children: Vec::new(),
                });
            }
        } else if CHILDREN.contains(&name) {
            let timed = span
                .scope()
                .skip(1)
                .find(|s| s.name() == EXECUTION)
                .is_some_and(|s| s.extensions().get::<Timing>().is_some());
            if timed {
                span.extensions_mut().insert(Timing {
                    start: SystemTime::now(),
                    children: Vec::new(),
                });
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(timing) = span.extensions_mut().remove::<Timing>() else {
            return;
        };
        let end = SystemTime::now();
        if span.name() == EXECUTION {
            let Some(ExecutionId(exec)) = span.extensions_mut().remove::<ExecutionId>() else {
                return;
            };
            if let Some(p) = self.tracer.lock().get_mut(&exec) {
                // The route's span of the same name has no children: it
                // never replaces the runner's.
                if p.ran.is_none() || !timing.children.is_empty() {
                    p.ran = Some((timing.start, end, timing.children));
                }
            }
            return;
        }
        let name = CHILDREN
            .iter()
            .copied()
            .find(|c| *c == span.name())
            .unwrap_or("span");
        if let Some(parent) = span.scope().skip(1).find(|s| s.name() == EXECUTION) {
            if let Some(t) = parent.extensions_mut().get_mut::<Timing>() {
                t.children.push(Child {
                    name,
                    start: timing.start,
                    end,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_valid_traceparents_and_ignores_the_rest() {
        let t =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(hex(&t.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&t.span_id), "00f067aa0ba902b7");
        // A later version may add fields.
        assert!(TraceParent::parse(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"
        )
        .is_some());
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_endpoints_and_refuses_what_it_cannot_reach() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:4318").unwrap(),
            Endpoint {
                host: "127.0.0.1".into(),
                port: 4318,
                path: "/v1/traces".into()
            }
        );
        let e = Endpoint::parse("http://collector/otlp/").unwrap();
        assert_eq!((e.port, e.path.as_str()), (80, "/otlp/v1/traces"));
        let e = Endpoint::parse("http://[::1]:4318").unwrap();
        assert_eq!(e.host, "::1");
        for bad in [
            "https://x:4318",
            "x:4318",
            "http://:4318",
            "http://h:port",
            "http://u@h:1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
