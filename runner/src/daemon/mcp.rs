//! `/v1/sessions/{id}/mcp`: the session's MCP server
//! (`skillhost::mcp`, docs/mcp.md) over Streamable HTTP, behind the
//! daemon's bearer-token guard like every route.
//!
//! - `POST` carries JSON-RPC messages, `GET` opens the server's event
//!   stream, `DELETE` ends an MCP session (`Mcp-Session-Id`); rmcp's
//!   `StreamableHttpService` speaks the transport.
//! - MCP sessions are bounded in all and per session
//!   ([`super::mcp_sessions`]): an `initialize` beyond is 429 `busy`; a
//!   session's MCP sessions close when it is deleted or expires.
//! - Before a request reaches it, the session in the path is checked
//!   (idle expiry, [`super::sessions::use_session`]): an unknown or
//!   expired session is 404 with the daemon's error document.
//! - A `run` is a job posted to `POST /v1/executions` in this process
//!   (the router hands its `post_execution` in as a [`PostJob`], so this
//!   module needs nothing of `routes`; as NDJSON events when the client
//!   asked for progress, else for the result document): the same
//!   slots, admission, session resolution, registry, metrics and
//!   receipts as any execution; the output events become progress
//!   notifications, and a client's cancellation cancels the execution
//!   through the registry, after which the stream is read to its `exit`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http_body_util::BodyExt;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use super::app::{ApiError, App, UrlPath};
use super::mcp_sessions::{Full, RESERVED};
use super::registry::Lookup;
use crate::error::ErrorKind;
use crate::skillhost::mcp::{Execute, Execution, McpServer, ProgressFn, RunProgress, SessionOf};

/// The session of a request: the `{id}` of its path, checked by
/// [`handle`] before the request reached the server.
struct PathSession;

/// The session id in `/v1/sessions/{id}/mcp`.
fn session_in(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/sessions/")?
        .strip_suffix("/mcp")
        .filter(|id| !id.is_empty() && !id.contains('/'))
}

impl SessionOf for PathSession {
    fn session(&self, context: &RequestContext<RoleServer>) -> Result<String, McpError> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| session_in(p.uri.path()))
            .map(str::to_owned)
            .ok_or_else(|| McpError::internal_error("the request names no session", None))
    }
}

/// Runs a `run` through the daemon's own execution route.
struct DaemonExec {
    app: App,
    post: PostJob,
}

/// `POST /v1/executions` of this daemon: the request's headers and body,
/// answered as the route answers them.
pub type PostJob = Arc<
    dyn Fn(
            App,
            HeaderMap,
            Body,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Response, ApiError>> + Send>,
        > + Send
        + Sync,
>;

impl std::fmt::Debug for DaemonExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DaemonExec")
    }
}

/// The sentence of a refusal answered without a result document.
async fn refusal(resp: Response) -> String {
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            Some(format!(
                "{}: {}",
                e.get("kind")?.as_str()?,
                e.get("message")?.as_str()?
            ))
        })
        .unwrap_or_else(|| format!("the execution was refused ({status})"))
}

async fn execute(
    app: App,
    post: PostJob,
    mut job: Value,
    progress: Option<ProgressFn>,
    cancel: CancellationToken,
) -> Result<Value, String> {
    let id = format!("mcp-{}", crate::fsx::random_hex());
    if let Value::Object(o) = &mut job {
        o.insert("execution_id".into(), Value::String(id.clone()));
    }
    let bytes = serde_json::to_vec(&job).map_err(|e| format!("encoding the job: {e}"))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Events only when the client wants progress: else the result
    // document alone, as a plain POST gets it.
    if progress.is_some() {
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/x-ndjson"),
        );
    }
    let posted = post(app.clone(), headers, Body::from(bytes));
    let resp = tokio::select! {
        r = posted => r,
        () = cancel.cancelled() => {
            // Cancelled before the answer began: cancel what was admitted
            // and wait for its end below.
            return finish_cancelled(&app, &id).await;
        }
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return Err(e.to_string()),
    };
    let ndjson = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-ndjson"));
    if !ndjson {
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the result: {e}"))?
            .to_bytes();
        return match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) if v.get("execution_id").is_some() => Ok(v),
            _ => Err(refusal((status, bytes).into_response()).await),
        };
    }
    let mut body = resp.into_body();
    let mut line = Vec::new();
    let mut seen = RunProgress {
        bytes: 0,
        events: 0,
    };
    let mut cancelled = false;
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            () = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                if let Lookup::Live(l) = app.registry.lookup(&id) {
                    l.cancel();
                }
                continue;
            }
        };
        let Some(frame) = frame else {
            return Err(format!(
                "the stream of execution {id} ended without its result"
            ));
        };
        let frame = frame.map_err(|e| format!("reading execution {id}: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for piece in data.split_inclusive(|&b| b == b'\n') {
            line.extend_from_slice(piece);
            if !line.ends_with(b"\n") {
                continue;
            }
            let event: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
            line.clear();
            match event.get("event").and_then(Value::as_str) {
                Some("exit") => {
                    return event
                        .get("result")
                        .cloned()
                        .ok_or_else(|| format!("the exit of execution {id} has no result"));
                }
                Some("stdout" | "stderr") => {
                    seen.events += 1;
                    seen.bytes += event
                        .get("data")
                        .and_then(Value::as_str)
                        .map_or(0, |d| d.len() as u64);
                    if let Some(progress) = &progress {
                        progress(seen);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Cancels execution `id` and answers its result once it has ended.
async fn finish_cancelled(app: &App, id: &str) -> Result<Value, String> {
    loop {
        match app.registry.lookup(id) {
            Lookup::Live(l) => {
                l.cancel();
                l.log.closed().await;
            }
            Lookup::Done(d) => {
                let Ok(result) = app.registry.result(&d).await else {
                    return Err(format!("execution {id} was cancelled"));
                };
                return serde_json::from_slice(&result.json).map_err(|e| e.to_string());
            }
            Lookup::Unknown => {
                return Err(format!(
                    "execution {id} was cancelled before it was admitted"
                ))
            }
        }
    }
}

impl Execute for DaemonExec {
    fn execute(
        &self,
        job: Value,
        progress: Option<ProgressFn>,
        cancel: CancellationToken,
    ) -> Execution {
        Box::pin(execute(
            self.app.clone(),
            self.post.clone(),
            job,
            progress,
            cancel,
        ))
    }
}

type Mcp = StreamableHttpService<McpServer, super::mcp_sessions::Sessions>;

/// How long an MCP session lives without traffic: the session idle
/// bound, at most rmcp's default of five minutes. Not shorter: a `run`
/// without progress passes no traffic while its command runs.
pub fn keep_alive(config: &super::Config) -> std::time::Duration {
    config.session_idle.min(std::time::Duration::from_secs(300))
}

/// The MCP route, to be merged into the main router; its `run`s go to
/// `post`.
pub fn routes(app: &App, post: PostJob) -> Router<App> {
    let server = McpServer::new(
        app.sessions.clone(),
        Arc::new(DaemonExec {
            app: app.clone(),
            post,
        }),
        Arc::new(PathSession),
    );
    let config = StreamableHttpServerConfig::default()
        // The daemon's guard (bearer token on TCP) is the access check;
        // a daemon is reached by any name its operator gives it.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(app.config.job_body_limit as usize);
    let service: Mcp =
        StreamableHttpService::new(move || Ok(server.clone()), app.mcp.clone(), config);
    let to = move |state: State<App>, path: UrlPath<String>, req: Request| {
        handle(state, path, req, service.clone())
    };
    Router::new().route(
        "/v1/sessions/{id}/mcp",
        get(to.clone()).post(to.clone()).delete(to),
    )
}

async fn handle(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    req: Request,
    mut service: Mcp,
) -> Result<Response, ApiError> {
    let check = id.clone();
    let used = app.clone();
    tokio::task::spawn_blocking(move || {
        super::sessions::use_session(&used, &check)?;
        used.sessions.sessions().read(&check).map(|_| ())
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the session thread failed: {e}")))??;
    // A POST without a session id is an `initialize`: it takes a place
    // among the live MCP sessions, or is refused before any is made.
    let opens =
        req.method() == axum::http::Method::POST && !req.headers().contains_key("mcp-session-id");
    let place = match opens {
        true => Some(app.mcp.reserve(&id).map_err(|full| {
            ApiError::McpSessionsBusy(match full {
                Full::Total(n) => format!("mcp_sessions {n} in the daemon"),
                Full::PerSession(n) => format!("mcp_sessions_per_session {n} for session {id}"),
            })
        })?),
        false => None,
    };
    let ends = req.method() == axum::http::Method::DELETE;
    let resp = RESERVED
        .scope(std::cell::RefCell::new(place), service.call(req))
        .await
        .map_err(|e| ApiError::Internal(format!("the MCP transport failed: {e}")))?;
    let status = resp.status();
    // The transport answers an ended session 202; MCP's clients expect
    // 200 or 204 there (the Python SDK warns "Session termination
    // failed: 202"), and nothing is left to accept: 204.
    if ends && status == StatusCode::ACCEPTED {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if !status.is_client_error() && !status.is_server_error() {
        return Ok(resp.map(Body::new));
    }
    Ok(transport_error(status, resp.map(Body::new)).await)
}

/// A refusal of the transport (a missing `Accept`, an unknown
/// `Mcp-Session-Id`, a body that is no JSON-RPC message) as the daemon's
/// error document, with its status.
async fn transport_error(status: StatusCode, resp: Response) -> Response {
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = crate::text::single_line(&String::from_utf8_lossy(&bytes));
    let kind = match status {
        StatusCode::NOT_FOUND => ErrorKind::NotFound,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorKind::BodyTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorKind::UnsupportedMediaType,
        s if s.is_server_error() => ErrorKind::Internal,
        _ => ErrorKind::BadRequest,
    };
    let status = if status.is_server_error() {
        tracing::warn!(%status, %text, "the MCP transport failed");
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        status
    };
    let message = format!(
        "the MCP transport refused the request: {text}; speak MCP's Streamable HTTP transport (docs/mcp.md)"
    );
    (
        status,
        Json(serde_json::json!({"error": {"kind": kind.as_str(), "message": message}})),
    )
        .into_response()
}
