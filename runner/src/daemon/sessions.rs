//! The skill-host routes (docs/skill-host.md) under `/v1/sessions`.
//!
//! | route | `SessionHost` method |
//! |---|---|
//! | `POST /v1/sessions` | `create_json` |
//! | `GET /v1/sessions/{id}` | `show` |
//! | `GET /v1/sessions/{id}/skills?query=&limit=&category=` | `skills` |
//! | `GET /v1/sessions/{id}/skills/{name}` | `load` |
//! | `GET /v1/sessions/{id}/skills/{name}/sections/{*section}` | `section` |
//! | `GET /v1/sessions/{id}/resources?path=&offset=&limit=` | `resource` |
//! | `GET /v1/sessions/{id}/events` | `events` |
//!
//! Each handler reads its input (the body under the job body limit and
//! timeout), runs the blocking file work on a blocking thread and answers
//! JSON; a [`SessionError`] keeps its own status and kind (422
//! `composition_rejected`, 404, 415 for binary files, …). A caller names
//! skills only by catalog name or binding, never by host path.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::routes::{check_length, read_body, ApiError, App, UrlPath};
use crate::session::{ReadRange, ResourceQuery, SessionError, SessionHost, SkillsQuery};

/// The session routes, to be merged into the main router.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/v1/sessions", axum::routing::post(create))
        .route("/v1/sessions/{id}", get(show))
        .route("/v1/sessions/{id}/skills", get(skills))
        .route("/v1/sessions/{id}/skills/{name}", get(load))
        .route(
            "/v1/sessions/{id}/skills/{name}/sections/{*section}",
            get(section),
        )
        .route("/v1/sessions/{id}/resources", get(resource))
        .route("/v1/sessions/{id}/events", get(events))
}

/// Runs `work` against the session host on a blocking thread.
async fn blocking<T: Serialize + Send + 'static>(
    app: &App,
    work: impl FnOnce(&SessionHost) -> Result<T, SessionError> + Send + 'static,
) -> Result<Response, ApiError> {
    let host = app.sessions.clone();
    let value = tokio::task::spawn_blocking(move || work(&host))
        .await
        .map_err(|e| ApiError::Internal(format!("the session thread failed: {e}")))??;
    Ok(Json(value).into_response())
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v).map_err(|e| {
        let text = crate::result::single_line(&e.body_text());
        ApiError::BadBody(format!("bad query parameters: {text}"))
    })
}

async fn create(
    State(app): State<App>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_length(&headers, app.config.job_body_limit)?;
    let bytes = read_body(body, app.config.job_body_limit, app.config.body_timeout).await?;
    blocking(&app, move |host| host.create_json(&bytes)).await
}

async fn show(State(app): State<App>, UrlPath(id): UrlPath<String>) -> Result<Response, ApiError> {
    blocking(&app, move |host| host.show(&id)).await
}

async fn skills(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<SkillsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    blocking(&app, move |host| host.skills(&id, &q)).await
}

async fn load(
    State(app): State<App>,
    UrlPath((id, name)): UrlPath<(String, String)>,
) -> Result<Response, ApiError> {
    blocking(&app, move |host| host.load(&id, &name)).await
}

async fn section(
    State(app): State<App>,
    UrlPath((id, name, section)): UrlPath<(String, String, String)>,
    q: Result<Query<ReadRange>, QueryRejection>,
) -> Result<Response, ApiError> {
    let range = query(q)?;
    blocking(&app, move |host| host.section(&id, &name, &section, range)).await
}

async fn resource(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<ResourceQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    blocking(&app, move |host| host.resource(&id, &q)).await
}

async fn events(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    blocking(&app, move |host| host.events(&id)).await
}
