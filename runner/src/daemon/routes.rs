//! The HTTP routes of docs/daemon.md: JSON in, JSON (or NDJSON) out. The
//! bodies they answer with are the types of [`super::wire`].
//!
//! | route | does |
//! |---|---|
//! | `GET /v1/health` | liveness, sandbox availability, counts (no token needed) |
//! | `POST /v1/skill-packages` | verify and publish a bundle; its set identity and bindings |
//! | `GET /v1/skill-packages/{identity}` | the bindings of a published set, or 404 |
//! | `GET /v1/version` | name, version, API version, capabilities |
//! | `GET /v1/openapi.json` | the OpenAPI document (`docs/openapi.json`) |
//! | `GET /v1/skill-packages` | every published binding |
//! | `POST /v1/executions` | run a job; the result, NDJSON events with `Accept: application/x-ndjson`, or 202 at once with `?wait=false` |
//! | `GET /v1/executions` | live and retained executions, newest first, paged |
//! | `GET /v1/executions/{id}` | a retained result (200), or 202 while queued or running; `?wait=` long-polls |
//! | `GET /v1/executions/{id}/events` | re-attach: the NDJSON events from the start or `?after=` |
//! | `DELETE /v1/executions/{id}` | cancel a queued or running execution |
//! | `GET /v1/executions/{id}/outputs/{path}` | a kept output file's bytes ([`super::outputs`]) |
//! | `GET /metrics` | Prometheus text |
//! | `/v1/sessions…` | the skill host, docs/skill-host.md ([`super::sessions`]) |
//! | `/v1/sessions/{id}/files…` | a managed session workspace's files, docs/workspaces.md ([`super::session_files`]) |
//! | `/v1/environments…` | the environment store, docs/environments.md ([`super::environments`]) |
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
//!   response body is dropped, and with it a [`CancelOnDrop`]), except a
//!   detached one (`?wait=false`), a retry answered with an existing
//!   execution, and a re-attached reader;
//! - a body refused as too large is read and discarded first (bounded by
//!   [`DRAIN_MAX`] and the body timeout), so a client that writes its whole
//!   body before reading sees the 413.
//!
//! [`DRAIN_MAX`]: super::app::DRAIN_MAX

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tracing::Instrument;

use super::app::{
    check_length, json_content, params, read_body, refuse_unread, status, ApiError, App, UrlPath,
};
use super::events::{exit_line, Chunks, Encoded};
use super::metrics::Refusal;
use super::registry::{
    status_name, Admitted, Done, Lookup, RegistryError, StatusFilter, Ticket, Unread,
};
use super::stream::{attach, own_stream, CancelOnDrop, DaemonSink, Progress};
use super::wire::{self, HealthStatus, Phase};
use crate::error::ErrorKind;
use crate::exec::confine::AdmitError;
use crate::exec::job::{Job, JobError, RawJob};
use crate::exec::result::{ErrorInfo, ExecResult, Status};
use crate::exec::{OutputMode, RunOptions};
use crate::package::bundle::{self};
use crate::package::hash::Binding;

/// The router with every route, auth and response metrics.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/version", get(version))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/skill-packages", get(list_packages).post(post_package))
        .route("/v1/skill-packages/{identity}", get(get_package))
        .route("/v1/executions", get(list_executions).post(post_execution))
        .route(
            "/v1/executions/{id}",
            get(get_execution).delete(delete_execution),
        )
        .route("/v1/executions/{id}/events", get(execution_events))
        .merge(super::sessions::routes())
        .merge(super::mcp::routes(
            &app,
            Arc::new(|app, headers, body| {
                Box::pin(post_execution(
                    State(app),
                    Ok(Query(BTreeMap::new())),
                    headers,
                    body,
                ))
            }),
        ))
        .merge(super::session_files::routes())
        .merge(super::environments::routes())
        .merge(super::outputs::routes())
        .merge(super::receipts::routes())
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
            ApiError::Unauthorized.into_response()
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
    let checked_at = crate::text::rfc3339(verdict.checked_at);
    let reason = match (&host.bwrap, &host.userns, &verdict.result) {
        (Ok(_), Ok(()), Ok(())) => None,
        (Err(e), _, _) | (_, Err(e), _) => Some(e.to_string()),
        (_, _, Err(m)) => Some(m.clone()),
    };
    let sandbox = wire::Sandbox {
        available: reason.is_none(),
        bwrap: match (&host.bwrap, &reason) {
            (Ok(b), None) => Some(&b.version),
            _ => None,
        },
        checked_at,
        reason: reason.as_deref(),
    };
    let available = host.bwrap.is_ok() && host.userns.is_ok();
    let space = data_dir_space(&app);
    let full = space.free_bytes.is_some_and(|b| b < DISK_LOW);
    let (status, code) = if app.registry.is_draining() {
        (HealthStatus::Draining, StatusCode::SERVICE_UNAVAILABLE)
    } else if !available {
        (
            HealthStatus::SandboxUnavailable,
            StatusCode::SERVICE_UNAVAILABLE,
        )
    } else if verdict.result.is_err() {
        (HealthStatus::SandboxFailed, StatusCode::SERVICE_UNAVAILABLE)
    } else if full {
        (HealthStatus::DiskFull, StatusCode::SERVICE_UNAVAILABLE)
    } else {
        (HealthStatus::Ok, StatusCode::OK)
    };
    let body = wire::Health {
        executions: wire::Executions { queued, running },
        sandbox,
        data_dir: space,
        status,
        version: env!("CARGO_PKG_VERSION"),
    };
    (code, Json(body)).into_response()
}

/// Health answers `disk_full` (503) with less than this free on the data
/// dir's file system: a job's folder, a result or a published package
/// would no longer fit.
pub const DISK_LOW: u64 = 16 << 20;

/// The free space of the data dir's file system (also recorded for
/// `/metrics`).
// The statvfs field types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn data_dir_space(app: &App) -> wire::DataDirSpace {
    let dir = app.config.data.path();
    let free = nix::sys::statvfs::statvfs(dir)
        .map(|v| (v.blocks_available() as u64).saturating_mul(v.fragment_size() as u64));
    app.metrics.data_dir_free(free.as_ref().ok().copied());
    match free {
        Ok(b) => wire::DataDirSpace {
            free_bytes: Some(b),
            reason: (b < DISK_LOW).then(|| {
                format!(
                    "the data dir {} has {b} bytes free, under {DISK_LOW}; free space on its file system",
                    dir.display()
                )
            }),
        },
        Err(e) => wire::DataDirSpace {
            free_bytes: None,
            reason: Some(format!(
                "cannot read the free space of the data dir {}: {e}",
                dir.display()
            )),
        },
    }
}

/// Refuses new work while the data dir's disk is under [`DISK_LOW`] free
/// (503 `disk_full`, `Retry-After`): an execution could not be recorded,
/// nor its folders made. Reads go on.
// The statvfs field types differ between platforms.
#[allow(clippy::unnecessary_cast)]
fn room_for_work(app: &App) -> Result<(), ApiError> {
    let free = nix::sys::statvfs::statvfs(app.config.data.path())
        .map(|v| (v.blocks_available() as u64).saturating_mul(v.fragment_size() as u64));
    match free {
        Ok(b) if b < DISK_LOW => Err(ApiError::Admission(RegistryError::Record(
            super::store::StoreError::Full {
                path: app.config.data.state(),
            },
        ))),
        _ => Ok(()),
    }
}

async fn metrics(State(app): State<App>) -> Response {
    let (running, queued) = app.registry.counts();
    data_dir_space(&app);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(super::metrics::CONTENT_TYPE),
        )],
        app.metrics.render(running, queued),
    )
        .into_response()
}

async fn post_package(
    State(app): State<App>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let timeout = app.config.body_timeout;
    if app.registry.is_draining() {
        return Err(refuse_unread(&headers, body, timeout, RegistryError::Draining.into()).await);
    }
    if let Err(e) = json_content(&headers) {
        return Err(refuse_unread(&headers, body, timeout, e).await);
    }
    let body = check_length(&headers, body, app.config.package_body_limit, timeout).await?;
    // Bundles are large: only a few are held in memory at once.
    let permit = match tokio::time::timeout(timeout, app.uploads.clone().acquire_owned()).await {
        Ok(Ok(p)) => p,
        _ => return Err(refuse_unread(&headers, body, timeout, ApiError::UploadsBusy).await),
    };
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
fn publish(app: &App, bytes: &[u8]) -> Result<wire::Published, ApiError> {
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
    Ok(wire::Published {
        identity,
        new_packages,
        skills: wire::bindings(bindings),
        warnings,
    })
}

async fn get_package(
    State(app): State<App>,
    UrlPath(identity): UrlPath<String>,
) -> Result<Response, ApiError> {
    match app.runner.store.set(&identity)? {
        Some(skills) => Ok(Json(wire::SkillSet {
            identity,
            skills: wire::bindings(skills),
        })
        .into_response()),
        None => Err(ApiError::NotFound {
            what: "skill set",
            id: identity,
        }),
    }
}

/// Admits a daemon job: unknown fields, relative paths and profile
/// files refused (a profile can mount any host path), host paths confined
/// to the roots ([`crate::exec::confine`]), output held in memory and
/// private addresses within this daemon's settings.
fn admit(app: &App, bytes: &[u8]) -> Result<Job, ApiError> {
    let raw: RawJob =
        serde_json::from_slice(bytes).map_err(|e| AdmitError::Job(JobError::Json(e)))?;
    let job = app.roots.admit(raw, None)?;
    if job.limits.output_bytes > app.config.max_output_bytes {
        return Err(ApiError::OutputLimit {
            asked: job.limits.output_bytes,
            max: app.config.max_output_bytes,
        });
    }
    if job.network.allowlist().is_some_and(|a| a.private) && !app.config.network.private {
        return Err(ApiError::NetworkPrivate);
    }
    Ok(job)
}

/// Resolves the session a job names into its frozen bindings, before the
/// job is queued: a job naming a session is a use of it (idle expiry),
/// and an unknown or expired one answers 404 with nothing queued.
async fn resolve_session(app: &App, mut job: Job) -> Result<Job, ApiError> {
    let Some(session) = job.session.clone() else {
        return Ok(job);
    };
    let app = app.clone();
    tokio::task::spawn_blocking(move || {
        super::sessions::use_session(&app, &session)?;
        let host = &app.sessions;
        // A managed session workspace becomes the job's (docs/workspaces.md).
        let owner = host.workspace_owner();
        host.sessions().resolve_managed(&mut job, owner)?;
        Ok(job)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("resolving a session: {e}")))?
}

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/x-ndjson"))
}

/// The digest of a job document after parsing: key order and whitespace
/// do not change it.
fn job_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    // serde_json's maps are sorted, so this is a canonical form.
    let canonical = serde_json::from_slice::<serde_json::Value>(bytes)
        .and_then(|v| serde_json::to_vec(&v))
        .unwrap_or_else(|_| bytes.to_vec());
    let digest = Sha256::digest(&canonical);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// 202 with the `Location` of an execution and its status.
fn accepted(id: &str, running: bool) -> Response {
    let status = if running {
        Phase::Running
    } else {
        Phase::Queued
    };
    let mut resp = (
        StatusCode::ACCEPTED,
        Json(wire::Accepted {
            execution_id: id,
            status,
        }),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/executions/{id}")) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

async fn post_execution(
    State(app): State<App>,
    q: Result<Query<BTreeMap<String, String>>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = std::time::SystemTime::now();
    // Refused before its body is read: the body is read and dropped
    // first, so the client sees the answer (and its Retry-After).
    let before = || -> Result<_, ApiError> {
        let q = params(q, &["wait", "session_wait"])?;
        let detached = match q.get("wait").map(String::as_str) {
            None | Some("true") => false,
            Some("false") => true,
            Some(other) => {
                return Err(ApiError::BadQuery(format!(
                    "wait={:?} is not true or false; use wait=false for a detached run",
                    crate::text::single_line(other)
                )))
            }
        };
        let queue = super::session_files::session_wait(q.get("session_wait"))?;
        json_content(&headers)?;
        room_for_work(&app)?;
        let slot = app.registry.slot().inspect_err(|e| refused(&app, e))?;
        Ok((detached, queue, slot))
    };
    let (detached, queue, slot) = match before() {
        Ok(v) => v,
        Err(e) => return Err(refuse_unread(&headers, body, app.config.body_timeout, e).await),
    };
    let stream = wants_ndjson(&headers) && !detached;
    let body = check_length(
        &headers,
        body,
        app.config.job_body_limit,
        app.config.body_timeout,
    )
    .await?;
    let bytes = read_body(body, app.config.job_body_limit, app.config.body_timeout).await?;
    let mut job = admit(&app, &bytes)?;
    super::pulls::admit(&app.pulls, &job)?;
    // A retry of an execution this daemon knows answers with that
    // execution below, even if its session has expired since; any other
    // job's session is resolved before it is queued.
    if matches!(app.registry.lookup(&job.execution_id), Lookup::Unknown) {
        job = resolve_session(&app, job).await?;
    }
    let digest = job_digest(&bytes);
    // A blocking answer is the first place its id appears: until then no
    // one can ask for it, so its records wait for no fsync of their own.
    let unannounced = !detached && !stream && job.generated_id;
    let ticket = match slot
        .unannounced(unannounced)
        .admit(&job.execution_id, &digest)
        .inspect_err(|e| refused(&app, e))?
    {
        // Known a moment ago, gone now (evicted): resolved here, and an
        // unknown session drops the ticket, which removes the entry.
        Admitted::New(t) if job.unresolved_session().is_some() => {
            job = resolve_session(&app, job).await?;
            t
        }
        Admitted::New(t) => t,
        Admitted::Existing(found) => {
            tracing::info!(id = %job.execution_id, "a retry of the same job: answering with its execution");
            return existing(&app, found, stream, detached).await;
        }
    };
    // Its place in the session workspace's order, taken now: admission
    // order is run order (a refusal drops the ticket, and its entry).
    let place = super::session_files::place(&app, &job, queue, unannounced)?;
    let traceparent = headers.get("traceparent").map(|v| v.as_bytes());
    super::trace::begin(&job.execution_id, traceparent, received);
    let span = tracing::info_span!("execution", id = %job.execution_id);
    if detached {
        // A 202 promises the execution: it is in the store first.
        ticket.recorded().await?;
        let live = ticket.live();
        let id = job.execution_id.clone();
        tokio::spawn(execute(app, job, ticket, place, false, true).instrument(span));
        return Ok(accepted(&id, live.is_running()));
    }
    execute(app, job, ticket, place, stream, false)
        .instrument(span)
        .await
}

/// Answers a retry with the execution it names: its result, its events
/// or its status. Never cancels it.
async fn existing(
    app: &App,
    found: Lookup,
    stream: bool,
    detached: bool,
) -> Result<Response, ApiError> {
    let live = match found {
        Lookup::Done(d) => {
            let result = kept(app, &d).await?;
            return Ok(if stream {
                let log = app.registry.events(&d).await.map_err(|e| unread(&d, e))?;
                ndjson_response(Body::new(attach(log, 0, app.config.heartbeat)))
            } else {
                result_response(&result)
            });
        }
        Lookup::Live(l) => l,
        Lookup::Unknown => return Err(ApiError::Internal("a retry found no execution".into())),
    };
    if detached {
        return Ok(accepted(&live.id, live.is_running()));
    }
    if stream {
        return Ok(ndjson_response(Body::new(attach(
            live.log.clone(),
            0,
            app.config.heartbeat,
        ))));
    }
    live.log.closed().await;
    match app.registry.lookup(&live.id) {
        Lookup::Done(d) => Ok(result_response(&kept(app, &d).await?)),
        _ => Err(ApiError::NotFound {
            what: "execution",
            id: live.id.clone(),
        }),
    }
}

/// The result document of a retained execution (read from the store
/// when it is not in memory), unless it was dropped.
async fn kept(app: &App, done: &Done) -> Result<Encoded, ApiError> {
    app.registry.result(done).await.map_err(|e| unread(done, e))
}

/// The answer to a result that cannot be read.
fn unread(done: &Done, e: Unread) -> ApiError {
    match e {
        Unread::Damaged(reason) => ApiError::ResultDamaged {
            id: done.id.clone(),
            reason,
        },
        Unread::Dropped => ApiError::Dropped {
            id: done.id.clone(),
            status: status_name(done.status),
            code: done
                .exit_code()
                .map_or_else(|| "none".to_owned(), |c| c.to_string()),
        },
    }
}

fn refused(app: &App, e: &RegistryError) {
    match e {
        RegistryError::Busy { .. } => app.metrics.refused(Refusal::Busy),
        RegistryError::Draining => app.metrics.refused(Refusal::Draining),
        _ => {}
    }
}

/// Queues, runs and answers one admitted execution.
async fn execute(
    app: App,
    job: Job,
    ticket: Ticket,
    place: Option<super::workspace::Place>,
    stream: bool,
    detached: bool,
) -> Result<Response, ApiError> {
    let live = ticket.live();
    let mut guard = CancelOnDrop::new(live.clone());
    if detached {
        // Nobody waits on this future: a disconnect cannot cancel it.
        guard.disarm();
    }
    let admitted = Instant::now();
    tracing::info!(
        // Escaped: a newline or escape code in job text forges no log line.
        argv0 = %job.argv[0].escape_debug(),
        skills = job.skills.len(),
        stream,
        "admitted"
    );
    // The session workspace's turn first, then a run slot: a job waiting
    // for its workspace holds no slot.
    if let Some(place) = &place {
        tokio::select! {
            () = place.turn() => {}
            () = live.cancelled() => {}
        }
    }
    // What the job needs from a registry, before it takes a run slot.
    if let Some(result) =
        super::pulls::before_run(&app.pulls, &job, &live.log, live.cancelled()).await
    {
        drop(place);
        super::app::log_rejection(&result);
        app.metrics.execution(result.status, Duration::ZERO);
        let result = ticket.finish_async(result).await;
        live.log.exit(result.clone());
        guard.disarm();
        return Ok(if stream {
            ndjson_response(Body::new(attach(live.log.clone(), 0, app.config.heartbeat)))
        } else {
            result_response(&result)
        });
    }
    let Some(permit) = ticket.wait_turn().await else {
        drop(place);
        let mut result = ExecResult::rejected(
            &job.execution_id,
            "bubblewrap",
            ErrorInfo::new(
                ErrorKind::Cancelled,
                "the execution was cancelled while it waited for a run slot; nothing ran",
            ),
        );
        result.status = Status::Cancelled;
        app.runner.seal(&mut result, Some(&job));
        app.metrics.execution(Status::Cancelled, Duration::ZERO);
        let result = ticket.finish_async(result).await;
        live.log.exit(result.clone());
        guard.disarm();
        tracing::info!("cancelled while queued");
        return Ok(if stream {
            ndjson_exit_only(&result, live.log.last_seq())
        } else {
            result_response(&result)
        });
    };
    app.metrics.queue_wait.observe(admitted.elapsed());

    let progress = stream.then(|| Arc::new(Progress::default()));
    // Taken before it can finish: its own stream's record stays whole.
    let pin = stream.then(|| live.log.pin());
    let rt = tokio::runtime::Handle::current();
    let worker = app.clone();
    let sink_live = live.clone();
    let sink_progress = progress.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let live = sink_live;
        // Its commit overlaps the preparation; waited for at the launch.
        live.start_running();
        let mut sink = match sink_progress {
            Some(progress) => DaemonSink::streaming(
                worker.metrics.clone(),
                live.clone(),
                progress,
                rt,
                worker.config.stall_timeout,
            ),
            None => DaemonSink::quiet(worker.metrics.clone(), live.clone()),
        };
        let refused = super::session_files::over_disk(&job).map(|mut r| {
            worker.runner.seal(&mut r, Some(&job));
            r
        });
        let result = refused.unwrap_or_else(|| {
            let opts = RunOptions {
                output: OutputMode::Capture,
                sink: &mut sink,
                cancel: Some(live.switch()),
            };
            #[cfg(target_os = "linux")]
            let result = worker.prepared.run(&job, opts);
            #[cfg(not(target_os = "linux"))]
            let result = worker.runner.run(&job, opts);
            result
        });
        // Held until the command is gone, and given up before its result
        // is: a client that has the result finds the workspace free.
        drop(place);
        super::app::log_rejection(&result);
        worker
            .metrics
            .execution(result.status, Duration::from_millis(result.duration_ms));
        if let Some(network) = &result.network {
            worker.metrics.network(network);
        }
        // Held-back output first, so the stored events are all of them.
        sink.flush();
        let result = ticket.finish(result);
        // Its spans go out once the result is durable: a crash between
        // leaves no trace of a result the daemon no longer knows.
        super::trace::finish(&result.result);
        sink.finish(result.clone());
        result
    });

    let (Some(progress), Some(pin)) = (progress, pin) else {
        let result = task
            .await
            .map_err(|e| ApiError::Internal(format!("the execution thread failed: {e}")))?;
        guard.disarm();
        return Ok(result_response(&result));
    };
    // The first event decides the answer: a job refused before its launch
    // is answered with its result document alone.
    live.log.changed_after(0).await;
    if live.log.last_seq() == 0 {
        return Err(ApiError::Internal(
            "the execution ended without a result".into(),
        ));
    }
    if live.log.last_seq() == 1 {
        if let Some(result) = live.log.exit_result() {
            guard.disarm();
            return Ok(if result.result.status == Status::Rejected {
                result_response(&result)
            } else {
                ndjson_response(Body::new(exit_line(1, &result.json)))
            });
        }
    }
    Ok(ndjson_response(Body::new(own_stream(
        live.log.clone(),
        guard,
        progress,
        pin,
        app.config.heartbeat,
    ))))
}

/// A result as JSON: 200, or the refusal's status for a rejected job.
fn result_response(result: &Encoded) -> Response {
    let status = match (&result.result.status, &result.result.error) {
        (Status::Rejected, Some(e)) => status(e.kind),
        (Status::Rejected, None) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::OK,
    };
    (status, document(result)).into_response()
}

/// The result document from its shared buffer, a slice at a time: a
/// reader costs no copy of it.
fn document(result: &Encoded) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::new(Chunks::new([result.json.clone()])),
    )
        .into_response()
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

fn ndjson_exit_only(result: &Encoded, seq: u64) -> Response {
    ndjson_response(Body::new(exit_line(seq, &result.json)))
}

/// The longest `?wait=` of a long-poll; longer ones wait this long.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// `?wait=`: `500ms`, `30s`, `1m`, or a plain number of seconds.
fn parse_wait(text: &str) -> Result<Duration, ApiError> {
    let t = text.trim();
    let parsed = match t.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(t),
    };
    parsed.map(|d| d.min(MAX_WAIT)).map_err(|_| {
        ApiError::BadQuery(format!(
            "wait={:?} is not a duration; write e.g. wait=30s or wait=500ms (at most 60s)",
            crate::text::single_line(text)
        ))
    })
}

async fn get_execution(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = params(q, &["wait"])?;
    let wait = q.get("wait").map(|w| parse_wait(w)).transpose()?;
    let mut found = app.registry.lookup(&id);
    if let (Lookup::Live(live), Some(wait)) = (&found, wait) {
        if tokio::time::timeout(wait, live.log.closed()).await.is_ok() {
            found = app.registry.lookup(&id);
        }
    }
    match found {
        Lookup::Live(live) => {
            shown(live.announce()).await;
            Ok(accepted(&id, live.is_running()))
        }
        Lookup::Done(done) => Ok(document(&kept(&app, &done).await?)),
        Lookup::Unknown => Err(ApiError::NotFound {
            what: "execution",
            id,
        }),
    }
}

/// `GET /v1/executions/{id}/events[?after=SEQ]`: re-attach.
async fn execution_events(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = params(q, &["after"])?;
    let after = match q.get("after") {
        None => 0,
        Some(a) => a.trim().parse::<u64>().map_err(|_| {
            ApiError::BadQuery(format!(
                "after={:?} is not a number; give the seq of the last event you have (0 for all)",
                crate::text::single_line(a)
            ))
        })?,
    };
    let log = match app.registry.lookup(&id) {
        Lookup::Live(l) => {
            shown(l.announce()).await;
            l.log.clone()
        }
        Lookup::Done(d) => {
            kept(&app, &d).await?;
            app.registry.events(&d).await.map_err(|e| unread(&d, e))?
        }
        Lookup::Unknown => {
            return Err(ApiError::NotFound {
                what: "execution",
                id,
            })
        }
    };
    let last = log.last_seq();
    if after > last {
        return Err(ApiError::AfterTheEnd { id, after, last });
    }
    Ok(ndjson_response(Body::new(attach(
        log,
        after,
        app.config.heartbeat,
    ))))
}

/// `GET /v1/executions?status=&limit=&cursor=`.
async fn list_executions(
    State(app): State<App>,
    q: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = params(q, &["status", "limit", "cursor"])?;
    let filter = match q.get("status").map(String::as_str) {
        None => StatusFilter::Any,
        Some("queued") => StatusFilter::Queued,
        Some("running") => StatusFilter::Running,
        Some("finished") => StatusFilter::Finished,
        Some(other) => [
            Status::Exited,
            Status::Signaled,
            Status::TimedOut,
            Status::LimitExceeded,
            Status::Cancelled,
            Status::Rejected,
            Status::Failed,
        ]
        .into_iter()
        .find(|st| super::registry::status_name(*st) == other)
        .map(StatusFilter::Result)
            .ok_or_else(|| {
                ApiError::BadQuery(format!(
                    "status={:?} is not a state; use queued, running, finished, or a result status (exited, signaled, timed_out, limit_exceeded, cancelled, rejected, failed)",
                    crate::text::single_line(other)
                ))
            })?,
    };
    let limit = match q.get("limit") {
        None => 100,
        Some(l) => l
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                ApiError::BadQuery(format!(
                    "limit={:?} is not a number from 1 to 1000",
                    crate::text::single_line(l)
                ))
            })?,
    };
    let cursor = match q.get("cursor") {
        None => None,
        Some(c) => Some(c.trim().parse::<u64>().map_err(|_| {
            ApiError::BadQuery(format!(
                "cursor={:?} is not a cursor; pass next_cursor of the previous page as it is",
                crate::text::single_line(c)
            ))
        })?),
    };
    let page = app.registry.list(filter, limit, cursor);
    let listed = page.executions.iter().map(|s| s.execution_id.as_str());
    for ack in app.registry.announce(listed) {
        shown(Some(ack)).await;
    }
    Ok(Json(page).into_response())
}

/// Waits until an execution about to be shown is durable
/// ([`super::registry::Live::announce`]). A failed commit is logged and
/// the answer goes out all the same: it only shows what runs.
async fn shown(ack: Option<super::store::Ack>) {
    if let Some(ack) = ack {
        if let Err(e) = ack.wait_async().await {
            tracing::error!("an execution shown by this answer could not be recorded: {e}");
        }
    }
}

/// `GET /v1/skill-packages`: every published binding.
async fn list_packages(State(app): State<App>) -> Result<Response, ApiError> {
    let worker = app.clone();
    let skills = tokio::task::spawn_blocking(move || worker.runner.store.bindings())
        .await
        .map_err(|e| ApiError::Internal(format!("the store thread failed: {e}")))??;
    Ok(Json(wire::BindingList {
        skills: wire::bindings(skills),
    })
    .into_response())
}

/// The OpenAPI document of every route.
pub const OPENAPI: &str = include_str!("../../../docs/openapi.json");

async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI,
    )
        .into_response()
}

/// The version of the HTTP API; additions keep it.
pub use super::wire::API_VERSION;

/// `GET /v1/version`: what this daemon is and can do here.
async fn version(State(app): State<App>) -> Response {
    use crate::supervise::cgroup::Support;
    let host = &app.runner.host;
    let (memory, pids) = match &host.cgroups {
        Support::V2 { .. } => ("cgroup v2", "cgroup v2"),
        Support::V1 { memory, pids, .. } => (
            if memory.is_some() {
                "cgroup v1"
            } else {
                "rlimit"
            },
            if pids.is_some() {
                "cgroup v1"
            } else {
                "rlimit"
            },
        ),
        Support::None { .. } => ("rlimit", "rlimit"),
    };
    let sandbox_kinds: &[&str] = if host.bwrap.is_ok() && host.userns.is_ok() {
        &["bubblewrap"]
    } else {
        &[]
    };
    Json(wire::Version {
        api_version: API_VERSION,
        capabilities: wire::Capabilities {
            detached_runs: true,
            heartbeat_ms: app.config.heartbeat.as_millis() as u64,
            job_body_limit: app.config.job_body_limit,
            limit_mechanisms: wire::LimitMechanisms {
                cpu_ms: "rlimit",
                disk_bytes: "tmpfs_or_watcher",
                file_size_bytes: "rlimit",
                memory_bytes: memory,
                open_files: "rlimit",
                output_bytes: "supervisor",
                pids,
                timeout_ms: "supervisor",
                tmp_bytes: "tmpfs",
            },
            max_output_bytes: app.config.max_output_bytes,
            max_wait_ms: MAX_WAIT.as_millis() as u64,
            network_modes: &["none", "allowlist"],
            network_private: app.config.network.private,
            sandbox_kinds,
            session_tools: &[
                "list_skills",
                "Skill",
                "find_skills",
                "load_skill",
                "load_skill_section",
                "read_skill_resource",
            ],
            stream_formats: &["application/x-ndjson"],
        },
        name: "skill-runner",
        version: env!("CARGO_PKG_VERSION"),
    })
    .into_response()
}

async fn delete_execution(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    match app.registry.lookup(&id) {
        Lookup::Live(live) => {
            shown(live.announce()).await;
            tracing::info!(id = %id, "cancelled by DELETE");
            live.cancel();
            Ok((
                StatusCode::ACCEPTED,
                Json(wire::Accepted {
                    execution_id: &id,
                    status: Phase::Cancelling,
                }),
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
