//! The HTTP routes of docs/daemon.md: JSON in, JSON (or NDJSON) out.
//!
//! | route | does |
//! |---|---|
//! | `GET /v1/health` | liveness, sandbox availability, counts (no token needed) |
//! | `POST /v1/skill-packages` | verify and publish a bundle; its set identity and bindings |
//! | `GET /v1/skill-packages/{identity}` | the bindings of a published set, or 404 |
//! | `POST /v1/executions` | run a job; the result, or NDJSON events with `Accept: application/x-ndjson` |
//! | `GET /v1/executions/{id}` | a retained result (200), or 202 while queued or running |
//! | `DELETE /v1/executions/{id}` | cancel a queued or running execution |
//! | `GET /metrics` | Prometheus text |
//! | `/v1/sessions…` | the skill host, docs/skill-host.md ([`super::sessions`]) |
//!
//! Invariants:
//! - every error is `{"error": {"kind", "message"}}` with a fitting status,
//!   and the message says what to do; a job refused before launch answers
//!   with the result document itself (which carries the same `error`);
//! - bodies are read under a size limit and a time limit, only after the
//!   request holds an admission slot, so neither a huge body nor a slow
//!   client can pin unbounded memory;
//! - a job is parsed with unknown fields refused, may name only built-in
//!   profiles, and its host paths are confined to the roots before it is
//!   admitted;
//! - a client that goes away cancels its execution (the handler or the
//!   response body is dropped, and with it a [`CancelOnDrop`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};
use tracing::Instrument;

use super::config::Config;
use super::metrics::{Metrics, Refusal};
use super::registry::{Lookup, Registry, RegistryError, Ticket};
use super::roots::{Roots, RootsError};
use super::stream::{CancelOnDrop, DaemonSink, Event, NdjsonBody, CHANNEL_EVENTS};
use crate::bundle::{self, BundleError};
use crate::exec::{OutputMode, RunOptions, Runner};
use crate::hash::Binding;
use crate::job::{Job, JobError, RawJob};
use crate::result::{ErrorInfo, ExecResult, Status};
use crate::store::StoreError;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct App(Arc<AppInner>);

#[derive(Debug)]
pub struct AppInner {
    pub runner: Arc<Runner>,
    /// The cached verdict of a real job's sandbox (health answers from it).
    pub selfcheck: Arc<super::selfcheck::SelfCheck>,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub config: Config,
    pub roots: Roots,
    pub uploads: Arc<Semaphore>,
    /// The skill host (sessions, catalog), docs/skill-host.md.
    pub sessions: Arc<crate::session::SessionHost>,
}

impl App {
    pub fn new(inner: AppInner) -> App {
        App(Arc::new(inner))
    }
}

impl std::ops::Deref for App {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

/// Why a request failed; each maps to a status and an error kind.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("a valid bearer token is required: send the header Authorization: Bearer <token>")]
    Unauthorized,
    #[error("{0}")]
    BadJob(String),
    #[error("the daemon runs only built-in profiles; name one (e.g. \"default\") instead of a file path")]
    ProfilePath,
    #[error("limits.output_bytes {asked} is over this daemon's maximum of {max} (output is held in memory); ask for less, or raise --max-output-bytes")]
    OutputLimit { asked: u64, max: u64 },
    #[error("network.private is forbidden by this daemon (network_private = false): its jobs may reach public addresses only; drop \"private\": true")]
    NetworkPrivate,
    #[error(transparent)]
    Path(#[from] RootsError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Admission(#[from] RegistryError),
    #[error("too many package uploads at once; retry after a moment")]
    UploadsBusy,
    #[error("the request body is larger than the limit of {limit} bytes; send less, or raise the daemon's body limit")]
    TooLarge { limit: u64 },
    #[error(
        "the request body did not arrive within {secs} s; send it faster, or raise --body-timeout"
    )]
    BodyTimeout { secs: u64 },
    #[error("cannot read the request body ({0}); send it again")]
    BadBody(String),
    #[error("the URL path cannot be read ({0}); percent-encode it as UTF-8")]
    BadUrl(String),
    #[error(
        "{what} {id:?} is not known here; it may never have existed or its result has expired"
    )]
    NotFound { what: &'static str, id: String },
    #[error("execution {0:?} has already finished; GET /v1/executions/{0} for its result")]
    NotRunning(String),
    #[error("no route {method} {path}; see docs/daemon.md for the routes")]
    NoRoute { method: String, path: String },
    #[error("method {method} is not allowed on {path}; see docs/daemon.md for the routes")]
    Method { method: String, path: String },
    #[error("{0}; this is a bug in the daemon, see its log")]
    Internal(String),
    #[error("{0} is not built yet; see the README's limitations")]
    NotBuilt(&'static str),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str) {
        use StatusCode as S;
        match self {
            ApiError::Unauthorized => (S::UNAUTHORIZED, "unauthorized"),
            ApiError::BadJob(_)
            | ApiError::ProfilePath
            | ApiError::OutputLimit { .. }
            | ApiError::NetworkPrivate => (S::BAD_REQUEST, "bad_job"),
            ApiError::Path(_) => (S::FORBIDDEN, "path_not_allowed"),
            ApiError::Bundle(e) => match e.kind() {
                "hash_mismatch" => (S::UNPROCESSABLE_ENTITY, "hash_mismatch"),
                _ => (S::BAD_REQUEST, "bad_bundle"),
            },
            ApiError::Store(e) => (status_for_kind(e.kind()), e.kind()),
            ApiError::Admission(RegistryError::Busy { .. }) | ApiError::UploadsBusy => {
                (S::TOO_MANY_REQUESTS, "busy")
            }
            ApiError::Admission(RegistryError::Draining) => {
                (S::SERVICE_UNAVAILABLE, "shutting_down")
            }
            ApiError::Admission(RegistryError::InUse { .. }) => {
                (S::CONFLICT, "execution_id_in_use")
            }
            ApiError::Admission(RegistryError::Cancel(_)) | ApiError::Internal(_) => {
                (S::INTERNAL_SERVER_ERROR, "internal")
            }
            ApiError::TooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BodyTimeout { .. } => (S::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::BadBody(_) | ApiError::BadUrl(_) => (S::BAD_REQUEST, "bad_request"),
            ApiError::NotFound { .. } | ApiError::NoRoute { .. } => (S::NOT_FOUND, "not_found"),
            ApiError::NotRunning(_) => (S::CONFLICT, "not_running"),
            ApiError::Method { .. } => (S::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::NotBuilt(_) => (S::NOT_IMPLEMENTED, "not_implemented"),
            ApiError::Session(e) => (
                S::from_u16(e.status()).unwrap_or(S::INTERNAL_SERVER_ERROR),
                e.kind(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind) = self.parts();
        if status.is_server_error()
            && status != StatusCode::SERVICE_UNAVAILABLE
            && status != StatusCode::NOT_IMPLEMENTED
        {
            tracing::error!(kind, "{}", self.to_string().escape_debug());
        }
        let body = json!({"error": {"kind": kind, "message": self.to_string()}});
        let mut resp = (status, Json(body)).into_response();
        let retry = match self {
            ApiError::Admission(RegistryError::Busy { .. }) | ApiError::UploadsBusy => Some("1"),
            ApiError::Admission(RegistryError::Draining) => Some("5"),
            _ => None,
        };
        if let Some(secs) = retry {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// The parameters in a route's path: axum's `Path`, except that a path
/// that does not decode (`%FF` is not UTF-8) answers the error document
/// like every other refusal, not axum's plain-text rejection.
#[derive(Debug)]
pub(super) struct UrlPath<T>(pub T);

impl<T, S> FromRequestParts<S> for UrlPath<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(UrlPath(v)),
            Err(e) => Err(ApiError::BadUrl(crate::result::single_line(&e.body_text()))),
        }
    }
}

/// The HTTP status of a refusal kind (of a rejected result or a store
/// error).
fn status_for_kind(kind: &str) -> StatusCode {
    match kind {
        "bad_job" | "bad_package" | "bad_bundle" => StatusCode::BAD_REQUEST,
        "hash_mismatch" => StatusCode::UNPROCESSABLE_ENTITY,
        "not_in_store" => StatusCode::NOT_FOUND,
        "conflict" => StatusCode::CONFLICT,
        "sandbox_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The router with every route, auth and response metrics.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/skill-packages", post(post_package))
        .route("/v1/skill-packages/{identity}", get(get_package))
        .route("/v1/executions", post(post_execution))
        .route(
            "/v1/executions/{id}",
            get(get_execution).delete(delete_execution),
        )
        .merge(super::sessions::routes())
        .fallback(no_route)
        .method_not_allowed_fallback(bad_method)
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Checks the token (except for health) and counts responses.
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let resp = match &app.config.token {
        Some(token)
            if req.uri().path() != "/v1/health"
                && !token.verify(
                    req.headers()
                        .get(header::AUTHORIZATION)
                        .map(HeaderValue::as_bytes),
                ) =>
        {
            tracing::info!(path = %req.uri().path(), "refused a request without a valid token");
            ApiError::Unauthorized.into_response()
        }
        // The contract's detached runs and long-polls are not built yet:
        // say so rather than ignore the parameter and block.
        _ if req.uri().path().starts_with("/v1/executions")
            && req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("wait="))) =>
        {
            ApiError::NotBuilt("?wait= (detached runs and long-polls)").into_response()
        }
        _ => next.run(req).await,
    };
    app.metrics.response(resp.status().as_u16());
    resp
}

async fn no_route(req: Request) -> ApiError {
    ApiError::NoRoute {
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
    }
}

async fn bad_method(req: Request) -> ApiError {
    ApiError::Method {
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
    }
}

async fn health(State(app): State<App>) -> Response {
    let (running, queued) = app.registry.counts();
    let host = &app.runner.host;
    // The cached verdict of a real job's sandbox (selfcheck.rs).
    let verdict = app.selfcheck.verdict();
    let checked_at = crate::result::rfc3339(verdict.checked_at);
    let sandbox = match (&host.bwrap, &host.userns, &verdict.result) {
        (Ok(b), Ok(()), Ok(())) => {
            json!({"available": true, "bwrap": b.version, "checked_at": checked_at})
        }
        (Err(m), _, _) | (_, Err(m), _) | (_, _, Err(m)) => {
            json!({"available": false, "reason": m, "checked_at": checked_at})
        }
    };
    let available = host.bwrap.is_ok() && host.userns.is_ok();
    let (status, code) = if app.registry.is_draining() {
        ("shutting_down", StatusCode::SERVICE_UNAVAILABLE)
    } else if !available {
        ("sandbox_unavailable", StatusCode::SERVICE_UNAVAILABLE)
    } else if verdict.result.is_err() {
        ("sandbox_failed", StatusCode::SERVICE_UNAVAILABLE)
    } else {
        ("ok", StatusCode::OK)
    };
    let body = json!({
        "status": status,
        "version": env!("CARGO_PKG_VERSION"),
        "sandbox": sandbox,
        "executions": {"running": running, "queued": queued},
    });
    (code, Json(body)).into_response()
}

async fn metrics(State(app): State<App>) -> Response {
    let (running, queued) = app.registry.counts();
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        app.metrics.render(running, queued),
    )
        .into_response()
}

/// Refuses a body whose declared length is over `limit` before reading it.
pub(super) fn check_length(headers: &HeaderMap, limit: u64) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit => Err(ApiError::TooLarge { limit }),
        _ => Ok(()),
    }
}

/// Reads a whole body under a size limit and a time limit.
pub(super) async fn read_body(
    body: Body,
    limit: u64,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match tokio::time::timeout(timeout, limited.collect()).await {
        Err(_) => Err(ApiError::BodyTimeout {
            secs: timeout.as_secs().max(1),
        }),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::TooLarge { limit })
        }
        Ok(Err(e)) => Err(ApiError::BadBody(e.to_string())),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

async fn post_package(
    State(app): State<App>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if app.registry.is_draining() {
        return Err(RegistryError::Draining.into());
    }
    check_length(&headers, app.config.package_body_limit)?;
    // Bundles are large: only a few are held in memory at once.
    let permit = tokio::time::timeout(app.config.body_timeout, app.uploads.clone().acquire_owned())
        .await
        .map_err(|_| ApiError::UploadsBusy)?
        .map_err(|_| ApiError::UploadsBusy)?;
    let bytes = read_body(body, app.config.package_body_limit, app.config.body_timeout).await?;
    let worker = app.clone();
    let published = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        publish(&worker, &bytes)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the publishing thread failed: {e}")))??;
    Ok(Json(published).into_response())
}

/// Verifies a bundle and publishes its skills and their set.
fn publish(app: &App, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    let limits = app.runner.config.package_limits;
    let skills = bundle::parse(bytes, &limits)?;
    let mut bindings: Vec<Binding> = Vec::with_capacity(skills.len());
    let mut warnings: Vec<String> = Vec::new();
    let mut new_packages = 0u64;
    for skill in skills {
        let files: Vec<(String, Vec<u8>)> =
            skill.files.into_iter().map(|f| (f.path, f.bytes)).collect();
        let p = app
            .runner
            .store
            .publish_files(&skill.binding, &files, &limits)?;
        warnings.extend(p.warnings);
        new_packages += u64::from(p.new_package);
        bindings.push(skill.binding);
    }
    bindings.sort_by(|a, b| a.id.cmp(&b.id));
    let identity = app.runner.store.put_set(&bindings)?;
    app.metrics.published(bindings.len() as u64);
    tracing::info!(%identity, skills = bindings.len(), new_packages, "published a skill set");
    Ok(json!({
        "identity": identity,
        "skills": bindings,
        "new_packages": new_packages,
        "warnings": warnings,
    }))
}

async fn get_package(
    State(app): State<App>,
    UrlPath(identity): UrlPath<String>,
) -> Result<Response, ApiError> {
    match app.runner.store.set(&identity)? {
        Some(skills) => Ok(Json(json!({"identity": identity, "skills": skills})).into_response()),
        None => Err(ApiError::NotFound {
            what: "skill set",
            id: identity,
        }),
    }
}

/// Parses a daemon job: unknown fields refused, relative paths refused,
/// profile files refused (a profile can mount any host path).
fn parse_job(bytes: &[u8]) -> Result<Job, ApiError> {
    let raw: RawJob = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadJob(JobError::Json(e).to_string()))?;
    if raw.profile.as_deref().is_some_and(|p| p.contains('/')) {
        return Err(ApiError::ProfilePath);
    }
    Job::validate(raw, None).map_err(|e| ApiError::BadJob(e.to_string()))
}

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/x-ndjson"))
}

async fn post_execution(
    State(app): State<App>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let stream = wants_ndjson(&headers);
    let slot = app.registry.slot().inspect_err(|e| refused(&app, e))?;
    check_length(&headers, app.config.job_body_limit)?;
    let bytes = read_body(body, app.config.job_body_limit, app.config.body_timeout).await?;
    let mut job = parse_job(&bytes)?;
    if job.limits.output_bytes > app.config.max_output_bytes {
        return Err(ApiError::OutputLimit {
            asked: job.limits.output_bytes,
            max: app.config.max_output_bytes,
        });
    }
    if job.network.allowlist().is_some_and(|a| a.private) && !app.config.network.private {
        return Err(ApiError::NetworkPrivate);
    }
    app.roots.confine(&mut job)?;
    let ticket = slot
        .admit(&job.execution_id)
        .inspect_err(|e| refused(&app, e))?;
    let span = tracing::info_span!("execution", id = %job.execution_id);
    execute(app, job, ticket, stream).instrument(span).await
}

fn refused(app: &App, e: &RegistryError) {
    match e {
        RegistryError::Busy { .. } => app.metrics.refused(Refusal::Busy),
        RegistryError::Draining => app.metrics.refused(Refusal::Draining),
        _ => {}
    }
}

/// Queues, runs and answers one admitted execution.
async fn execute(app: App, job: Job, ticket: Ticket, stream: bool) -> Result<Response, ApiError> {
    let live = ticket.live();
    let mut guard = CancelOnDrop::new(live.clone());
    let admitted = Instant::now();
    tracing::info!(
        // Escaped: a newline or escape code in job text forges no log line.
        argv0 = %job.argv[0].escape_debug(),
        skills = job.skills.len(),
        stream,
        "admitted"
    );
    let Some(permit) = ticket.wait_turn().await else {
        let mut result = ExecResult::rejected(
            &job.execution_id,
            "bubblewrap",
            ErrorInfo::new(
                "cancelled",
                "the execution was cancelled while it waited for a run slot; nothing ran",
            ),
        );
        result.status = Status::Cancelled;
        app.metrics.execution(Status::Cancelled, Duration::ZERO);
        let result = ticket.finish(result);
        guard.disarm();
        tracing::info!("cancelled while queued");
        return Ok(if stream {
            ndjson_exit_only(&result)
        } else {
            result_response(&result)
        });
    };
    app.metrics.queue_wait.observe(admitted.elapsed());

    let (tx, rx) = if stream {
        let (tx, rx) = mpsc::channel(CHANNEL_EVENTS);
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let rt = tokio::runtime::Handle::current();
    let worker = app.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut sink = match tx {
            Some(tx) => DaemonSink::streaming(
                worker.metrics.clone(),
                live.clone(),
                tx,
                rt,
                worker.config.stall_timeout,
            ),
            None => DaemonSink::quiet(worker.metrics.clone(), live.clone()),
        };
        let result = worker.runner.run(
            &job,
            RunOptions {
                output: OutputMode::Capture,
                sink: &mut sink,
                cancel: Some(live.switch()),
            },
        );
        worker
            .metrics
            .execution(result.status, Duration::from_millis(result.duration_ms));
        if let Some(network) = &result.network {
            worker.metrics.network(network);
        }
        let result = ticket.finish(result);
        sink.finish(result.clone());
        result
    });

    let Some(mut rx) = rx else {
        let result = task
            .await
            .map_err(|e| ApiError::Internal(format!("the execution thread failed: {e}")))?;
        guard.disarm();
        return Ok(result_response(&result));
    };
    match rx.recv().await {
        Some(Event::Exit(result)) => {
            guard.disarm();
            Ok(if result.status == Status::Rejected {
                result_response(&result)
            } else {
                ndjson_exit_only(&result)
            })
        }
        Some(first) => Ok(ndjson_response(Body::new(NdjsonBody::new(
            first.to_line(),
            rx,
            guard,
        )))),
        None => Err(ApiError::Internal(
            "the execution ended without a result".into(),
        )),
    }
}

/// A result as JSON: 200, or the refusal's status for a rejected job.
fn result_response(result: &ExecResult) -> Response {
    let status = match (&result.status, &result.error) {
        (Status::Rejected, Some(e)) => status_for_kind(&e.kind),
        (Status::Rejected, None) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::OK,
    };
    (status, Json(result)).into_response()
}

fn ndjson_response(body: Body) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

fn ndjson_exit_only(result: &Arc<ExecResult>) -> Response {
    ndjson_response(Body::from(Event::Exit(result.clone()).to_line()))
}

async fn get_execution(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    match app.registry.lookup(&id) {
        Lookup::Live(live) => {
            let status = if live.is_running() {
                "running"
            } else {
                "queued"
            };
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"execution_id": id, "status": status})),
            )
                .into_response())
        }
        Lookup::Done(result) => Ok(Json(&*result).into_response()),
        Lookup::Unknown => Err(ApiError::NotFound {
            what: "execution",
            id,
        }),
    }
}

async fn delete_execution(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    match app.registry.lookup(&id) {
        Lookup::Live(live) => {
            tracing::info!(id = %id, "cancelled by DELETE");
            live.cancel();
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"execution_id": id, "status": "cancelling"})),
            )
                .into_response())
        }
        Lookup::Done(_) => Err(ApiError::NotRunning(id)),
        Lookup::Unknown => Err(ApiError::NotFound {
            what: "execution",
            id,
        }),
    }
}
