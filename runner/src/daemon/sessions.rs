//! The skill-host routes (docs/skill-host.md) under `/v1/sessions`.
//!
//! | route | `SessionHost` method |
//! |---|---|
//! | `POST /v1/sessions` | `create_json` |
//! | `GET /v1/sessions` | `Sessions::list` |
//! | `GET /v1/sessions/{id}` | `show` |
//! | `DELETE /v1/sessions/{id}` | `Sessions::delete` |
//! | `POST /v1/sessions/{id}/tools/{tool}` | `session::tools::call` |
//! | `GET /v1/sessions/{id}/skills?query=&limit=&category=` | `skills` |
//! | `GET /v1/sessions/{id}/skills/{name}` | `load` |
//! | `GET /v1/sessions/{id}/skills/{name}/sections/{*section}` | `section` |
//! | `GET /v1/sessions/{id}/resources?path=&offset=&limit=` | `resource` |
//! | `GET /v1/sessions/{id}/events` | `events` |
//! | `…/files…` | the managed workspace's files (`session_files.rs`) |
//!
//! Each handler reads its input (the body under the job body limit and
//! timeout), runs the blocking file work on a blocking thread and answers
//! JSON; a [`SessionError`] keeps its own status and kind (422
//! `composition_rejected`, 404, 415 for binary files, …). A caller names
//! skills only by catalog name or binding, never by host path.
//!
//! Expiry: every route that names a session first checks that it was used
//! within `session_idle` (else deletes it and answers 404) and records the
//! use; [`sweep`] deletes the expired ones every minute. A session whose
//! managed workspace a job holds or waits for is in use: it neither
//! expires nor is deleted (`DELETE` answers 409).

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use std::time::{Duration, SystemTime};

use super::app::{check_length, params, read_body, refuse_unread, ApiError, App, UrlPath};
use super::wire;
use super::workspace::Holder;
use crate::skillhost::session::tools::{self, ToolError};
use crate::skillhost::session::{ReadRange, ResourceQuery, SessionError, SessionHost, SkillsQuery};

/// The session routes, to be merged into the main router.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/v1/sessions", get(list).post(create))
        .route("/v1/sessions/{id}", get(show).delete(delete))
        .route("/v1/sessions/{id}/tools/{tool}", post(tool))
        .route("/v1/sessions/{id}/skills", get(skills))
        .route("/v1/sessions/{id}/skills/{name}", get(load))
        .route(
            "/v1/sessions/{id}/skills/{name}/sections/{*section}",
            get(section),
        )
        .route("/v1/sessions/{id}/resources", get(resource))
        .route("/v1/sessions/{id}/events", get(events))
}

/// Whether a session last used at `used` has expired.
fn expired(used: SystemTime, idle: Duration) -> bool {
    SystemTime::now()
        .duration_since(used)
        .is_ok_and(|age| age > idle)
}

/// Ends what lives with session `id` besides its record: its prepared
/// sandboxes and its MCP sessions (deleted, or expired).
pub(super) fn ended(app: &App, id: &str) {
    #[cfg(target_os = "linux")]
    app.prepared.end_session(id);
    app.mcp.end_session(id);
}

/// Checks that session `id` has not expired (else deletes it: 404) and
/// records this use of it. An id that names no session is left to the
/// handler's own error.
pub(super) fn use_session(app: &App, id: &str) -> Result<(), SessionError> {
    let sessions = app.sessions.sessions();
    let Some(used) = sessions.last_used(id) else {
        return Ok(());
    };
    // A session whose workspace a job holds or waits for is in use.
    if expired(used, app.config.session_idle) && !app.lanes.busy(id) {
        tracing::info!(session = %id, "session expired (idle); deleting it");
        let _ = sessions.delete(id);
        ended(app, id);
        return Err(SessionError::NotFound(id.to_owned()));
    }
    // A record that went away meanwhile is the handler's 404.
    match sessions.touch(id) {
        Err(SessionError::NotFound(_)) | Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes every session idle for longer than `session_idle` (but those
/// whose workspace a job holds or waits for), with what lives with them,
/// and workspace folders a crash left without their session; returns how
/// many sessions.
pub fn sweep(app: &App) -> usize {
    let (host, lanes, idle) = (&app.sessions, &app.lanes, app.config.session_idle);
    let orphans = host.sessions().sweep_workspaces();
    if orphans > 0 {
        tracing::info!(orphans, "removed workspaces without a session");
    }
    let Ok(all) = host.sessions().list() else {
        return 0;
    };
    all.iter()
        .filter(|(_, used)| expired(*used, idle))
        .filter(|(r, _)| {
            // Held while deleting: no job can start in it meanwhile.
            let Ok(_place) = lanes.try_join(&r.id, Holder::Delete) else {
                return false;
            };
            let deleted = host.sessions().delete(&r.id).is_ok();
            if deleted {
                ended(app, &r.id);
            }
            deleted
        })
        .count()
}

/// Sweeps expired sessions now and then, for as long as the runtime runs
/// (docs/daemon.md, Sessions).
pub(super) fn spawn_sweep(app: App) {
    let every = app
        .config
        .session_idle
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let app = app.clone();
            if let Ok(n) = tokio::task::spawn_blocking(move || sweep(&app)).await {
                if n > 0 {
                    tracing::info!(expired = n, "deleted idle sessions");
                }
            }
        }
    });
}

/// Runs `work` against the session host on a blocking thread, after
/// [`use_session`] of `id`.
async fn blocking<T: Serialize + Send + 'static>(
    app: &App,
    id: Option<&str>,
    work: impl FnOnce(&SessionHost) -> Result<T, SessionError> + Send + 'static,
) -> Result<Response, ApiError> {
    let app = app.clone();
    let id = id.map(str::to_owned);
    let value = tokio::task::spawn_blocking(move || {
        if let Some(id) = &id {
            use_session(&app, id)?;
        }
        work(&app.sessions)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the session thread failed: {e}")))??;
    Ok(Json(value).into_response())
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v).map_err(|e| {
        let text = crate::text::single_line(&e.body_text());
        ApiError::BadQuery(format!("bad query parameters: {text}"))
    })
}

/// A session request's body (creation, tool calls), read only while one
/// of [`super::SESSION_BODIES`] places is held; with none free the
/// request is refused at once (429), like a full run queue.
async fn read_request_body(app: &App, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let (limit, timeout) = (app.config.job_body_limit, app.config.body_timeout);
    let body = check_length(headers, body, limit, timeout).await?;
    let Ok(_place) = app.session_bodies.clone().try_acquire_owned() else {
        return Err(refuse_unread(headers, body, timeout, ApiError::SessionsBusy).await);
    };
    read_body(body, limit, timeout).await
}

async fn create(
    State(app): State<App>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_request_body(&app, &headers, body).await?;
    blocking(&app, None, move |host| host.create_json(&bytes)).await
}

async fn show(State(app): State<App>, UrlPath(id): UrlPath<String>) -> Result<Response, ApiError> {
    blocking(&app, Some(&id.clone()), move |host| host.show(&id)).await
}

/// `GET /v1/sessions`: newest first, expired ones left out.
async fn list(
    State(app): State<App>,
    q: Result<Query<std::collections::BTreeMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    params(q, &[])?;
    let idle = app.config.session_idle;
    blocking(&app, None, move |host| {
        let sessions = host
            .sessions()
            .list()?
            .into_iter()
            .filter(|(_, used)| !expired(*used, idle))
            .map(|(r, used)| wire::SessionSummary {
                last_used_at: crate::text::rfc3339(used),
                skills: r.skills.iter().map(|s| s.binding.id.clone()).collect(),
                id: r.id,
                delivery: r.delivery,
                created_at: r.created_at,
            })
            .collect();
        Ok(wire::SessionList { sessions })
    })
    .await
}

/// `DELETE /v1/sessions/{id}`.
///
/// A session whose workspace a job holds or waits for is not deleted
/// (409): cancel the job first, or wait until it ends.
async fn delete(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let place = match app.lanes.try_join(&id, Holder::Delete) {
        Ok(p) => p,
        Err(e) => {
            return Err(ApiError::WorkspaceBusy(format!(
                "{e}; or cancel its executions (DELETE /v1/executions/ID) first"
            )))
        }
    };
    let ends = app.clone();
    blocking(&app, None, move |host| {
        let _place = place;
        host.sessions().delete(&id)?;
        ended(&ends, &id);
        tracing::info!(session = %id, "session deleted");
        Ok(wire::SessionDeleted { deleted: true, id })
    })
    .await
}

/// `POST /v1/sessions/{id}/tools/{tool}`: the model's tool input, as is.
async fn tool(
    State(app): State<App>,
    UrlPath((id, name)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_request_body(&app, &headers, body).await?;
    let input: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::BadBody(format!(
            "the tool input is not JSON: {}; send the model's tool input object as the body",
            crate::text::single_line(&e.to_string())
        ))
    })?;
    let app = app.clone();
    let answer = tokio::task::spawn_blocking(move || {
        use_session(&app, &id).map_err(ToolError::Session)?;
        tools::call(&app.sessions, &id, &name, &input)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the session thread failed: {e}")))?;
    match answer {
        Ok(a) => Ok(Json(a).into_response()),
        Err(ToolError::Session(e)) => Err(e.into()),
        Err(e @ ToolError::UnknownTool { .. }) => Err(ApiError::UnknownTool(e.to_string())),
    }
}

async fn skills(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<SkillsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    blocking(&app, Some(&id.clone()), move |host| host.skills(&id, &q)).await
}

async fn load(
    State(app): State<App>,
    UrlPath((id, name)): UrlPath<(String, String)>,
) -> Result<Response, ApiError> {
    blocking(&app, Some(&id.clone()), move |host| host.load(&id, &name)).await
}

async fn section(
    State(app): State<App>,
    UrlPath((id, name, section)): UrlPath<(String, String, String)>,
    q: Result<Query<ReadRange>, QueryRejection>,
) -> Result<Response, ApiError> {
    let range = query(q)?;
    blocking(&app, Some(&id.clone()), move |host| {
        host.section(&id, &name, &section, range)
    })
    .await
}

async fn resource(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<ResourceQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    blocking(&app, Some(&id.clone()), move |host| host.resource(&id, &q)).await
}

async fn events(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    blocking(&app, Some(&id.clone()), move |host| host.events(&id)).await
}
