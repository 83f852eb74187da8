//! What every route shares: the daemon's state ([`App`]), the API error
//! type with its one mapping to HTTP statuses and error kinds
//! ([`ApiError`]), and the request readers (bodies under a size and a time
//! limit, path and query parameters). The routes ([`super::routes`],
//! [`super::sessions`]) are built on these and never on each other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Query};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;

use super::config::Config;
use super::metrics::Metrics;
use super::registry::{Registry, RegistryError};
use crate::error::ErrorKind;
use crate::exec::confine::{AdmitError, Confinement};
use crate::exec::Runner;
use crate::package::bundle::BundleError;
use crate::package::store::StoreError;

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
    pub roots: Confinement,
    pub uploads: Arc<Semaphore>,
    /// Session requests whose body is read at once (creation, tool calls).
    pub session_bodies: Arc<Semaphore>,
    /// The skill host (sessions, catalog), docs/skill-host.md.
    pub sessions: Arc<crate::skillhost::session::SessionHost>,
    /// The order of each managed session workspace (docs/workspaces.md).
    pub lanes: Arc<super::workspace::Lanes>,
    /// Session file downloads being streamed (`max_downloads`).
    pub downloads: Arc<Semaphore>,
    /// Sandboxes prepared for sessions' next commands (docs/prepared.md).
    #[cfg(target_os = "linux")]
    pub prepared: Arc<super::prepared::Pool>,
    /// Live MCP sessions, bounded (docs/mcp.md).
    pub mcp: Arc<super::mcp_sessions::Sessions>,
    /// Pulls from registries under way, one per digest (docs/daemon.md, "Pulls from registries").
    pub pulls: Arc<super::pulls::Pulls>,
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
    #[error("limits.output_bytes {asked} is over this daemon's maximum of {max} (output is held in memory); ask for less, or raise --max-output-bytes")]
    OutputLimit { asked: u64, max: u64 },
    #[error("network.private is forbidden by this daemon (network_private = false): its jobs may reach public addresses only; drop \"private\": true")]
    NetworkPrivate,
    #[error(transparent)]
    Admit(#[from] AdmitError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Admission(#[from] RegistryError),
    #[error("too many package uploads at once; retry after a moment")]
    UploadsBusy,
    #[error("too many session requests with a body at once; retry after a moment")]
    SessionsBusy,
    #[error("too many session file downloads at once (max_downloads {0}); retry after a moment")]
    DownloadsBusy(usize),
    #[error("too many MCP sessions live ({0}); close one (DELETE with its Mcp-Session-Id) or retry after a moment")]
    McpSessionsBusy(String),
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
    #[error("the result of execution {id:?} ({status}, exit code {code}) was dropped from retention to bound the daemon's memory; its id stays taken until it expires")]
    Dropped {
        id: String,
        status: String,
        code: String,
    },
    #[error("the stored result of execution {id:?} is damaged ({reason}); it cannot be answered as it was: see the daemon's log, and resubmit the job under a new execution_id if it must run again")]
    ResultDamaged { id: String, reason: String },
    #[error("after={after} is past the last event of execution {id:?} (seq {last}); give the seq of the last event you have (0 for all)")]
    AfterTheEnd { id: String, after: u64, last: u64 },
    #[error("execution {0:?} has already finished; GET /v1/executions/{0} for its result")]
    NotRunning(String),
    #[error("execution {0:?} has not finished: its outputs are collected when its command ends; GET /v1/executions/{0}?wait=30s first")]
    OutputsPending(String),
    #[error("no route {method} {path}; see docs/daemon.md for the routes")]
    NoRoute { method: String, path: String },
    #[error("method {method} is not allowed on {path}; see docs/daemon.md for the routes")]
    Method { method: String, path: String },
    #[error("{0}; this is a bug in the daemon, see its log")]
    Internal(String),
    #[error(transparent)]
    Pull(#[from] super::pulls::PullError),
    #[error("{0}")]
    BadQuery(String),
    #[error("the body's Content-Type {0:?} is not JSON; send it as application/json")]
    MediaType(String),
    #[error("{0}")]
    UnknownTool(String),
    #[error("the body's Content-Type {0:?} is not application/octet-stream; send the file's bytes as application/octet-stream")]
    FileMediaType(String),
    #[error("{0}")]
    WorkspaceBusy(String),
    #[error(
        "this daemon signs no receipts (started with --receipts false), so it has no receipt key"
    )]
    ReceiptsOff,
    #[error(transparent)]
    Session(#[from] crate::skillhost::session::SessionError),
    #[error(transparent)]
    Environment(#[from] super::env_error::EnvApiError),
}

impl ApiError {
    /// The error kind of the document; [`status`] gives its HTTP status.
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            ApiError::Unauthorized => K::Unauthorized,
            ApiError::OutputLimit { .. } | ApiError::NetworkPrivate => K::BadJob,
            ApiError::Admit(e) => e.kind(),
            ApiError::Bundle(e) => e.kind(),
            ApiError::Store(e) => e.kind(),
            ApiError::Session(e) => e.kind(),
            ApiError::Environment(e) => e.kind(),
            ApiError::Admission(RegistryError::Busy { .. } | RegistryError::Switch(_))
            | ApiError::UploadsBusy
            | ApiError::SessionsBusy
            | ApiError::DownloadsBusy(_)
            | ApiError::McpSessionsBusy(_) => K::Busy,
            ApiError::Admission(RegistryError::Draining) => K::ShuttingDown,
            ApiError::Admission(RegistryError::InUse { .. }) => K::ExecutionIdInUse,
            ApiError::Admission(RegistryError::Record(e)) => super::store::kind(e),
            ApiError::Internal(_) => K::Internal,
            ApiError::TooLarge { .. } => K::BodyTooLarge,
            ApiError::BodyTimeout { .. } => K::BodyTimeout,
            ApiError::BadBody(_)
            | ApiError::BadUrl(_)
            | ApiError::BadQuery(_)
            | ApiError::AfterTheEnd { .. } => K::BadRequest,
            ApiError::NotFound { .. }
            | ApiError::NoRoute { .. }
            | ApiError::UnknownTool(_)
            | ApiError::ReceiptsOff => K::NotFound,
            ApiError::NotRunning(_) => K::NotRunning,
            ApiError::OutputsPending(_) => K::Conflict,
            ApiError::Dropped { .. } => K::ResultDropped,
            ApiError::ResultDamaged { .. } => K::StoreCorrupted,
            ApiError::Method { .. } => K::MethodNotAllowed,
            ApiError::MediaType(_) | ApiError::FileMediaType(_) => K::UnsupportedMediaType,
            ApiError::WorkspaceBusy(_) => K::Conflict,
            ApiError::Pull(e) => e.kind(),
        }
    }
}

/// The HTTP status of every error kind: of an API error, of a rejected
/// execution's result, of a store, bundle or session error. The one place
/// kinds become statuses.
pub fn status(kind: ErrorKind) -> StatusCode {
    use ErrorKind as K;
    use StatusCode as S;
    match kind {
        K::BadJob | K::BadPackage | K::BadBundle | K::BadRequest => S::BAD_REQUEST,
        K::Unauthorized => S::UNAUTHORIZED,
        K::PathNotAllowed | K::RegistryNotAllowed => S::FORBIDDEN,
        K::NotInStore | K::NotFound => S::NOT_FOUND,
        K::MethodNotAllowed => S::METHOD_NOT_ALLOWED,
        K::BodyTimeout => S::REQUEST_TIMEOUT,
        K::Conflict | K::ExecutionIdInUse | K::NotRunning => S::CONFLICT,
        K::ResultDropped => S::GONE,
        K::BodyTooLarge => S::PAYLOAD_TOO_LARGE,
        K::BinaryFile | K::UnsupportedMediaType => S::UNSUPPORTED_MEDIA_TYPE,
        K::HashMismatch | K::CompositionRejected => S::UNPROCESSABLE_ENTITY,
        K::Busy => S::TOO_MANY_REQUESTS,
        K::SandboxUnavailable | K::ShuttingDown | K::DiskFull => S::SERVICE_UNAVAILABLE,
        // The registry failed or sent what does not verify: the daemon is
        // the gateway that got a bad answer.
        K::PullFailed => S::BAD_GATEWAY,
        K::StagingFailed | K::StoreFailed | K::StoreCorrupted | K::RunnerFailed | K::Internal => {
            S::INTERNAL_SERVER_ERROR
        }
        // Outcomes of an execution that ran: its result answers 200, so
        // these pick no status; if one ever reaches here it is our bug.
        K::SandboxFailed
        | K::NotExecutable
        | K::TimedOut
        | K::LimitExceeded
        | K::Cancelled
        | K::Interrupted => S::INTERNAL_SERVER_ERROR,
    }
}

/// Logs a rejected execution whose answer is a 5xx at ERROR, once, with
/// its execution id and sentence: a host fault (a corrupt store, a sandbox
/// that cannot start) must leave a trace an operator finds. A drain's 503
/// is expected and logged at WARN.
pub fn log_rejection(result: &crate::exec::result::ExecResult) {
    let Some(error) = result.error.as_ref() else {
        return;
    };
    if result.status != crate::exec::result::Status::Rejected
        || !status(error.kind).is_server_error()
    {
        return;
    }
    let (id, kind, message) = (
        &result.execution_id,
        error.kind.as_str(),
        error.message.escape_debug(),
    );
    if error.kind == ErrorKind::ShuttingDown {
        tracing::warn!(id = %id, kind, "{message}");
    } else {
        tracing::error!(id = %id, kind, "{message}");
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = self.kind();
        let status = status(kind);
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(kind = kind.as_str(), "{}", self.to_string().escape_debug());
        }
        let message = self.to_string();
        // Every refusal is logged once with its sentence (5xx host faults
        // just above, at ERROR).
        if !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::info!(
                kind = kind.as_str(),
                status = status.as_u16(),
                "refused: {}",
                message.escape_debug()
            );
        }
        let body = super::wire::ErrorDocument {
            error: super::wire::ErrorBody {
                kind,
                message: &message,
            },
        };
        let mut resp = (status, Json(body)).into_response();
        let retry = match self {
            ApiError::Admission(RegistryError::Busy { .. } | RegistryError::Switch(_))
            | ApiError::UploadsBusy
            | ApiError::SessionsBusy
            | ApiError::DownloadsBusy(_)
            | ApiError::McpSessionsBusy(_) => Some("1"),
            ApiError::Admission(RegistryError::Draining) => Some("5"),
            ApiError::Admission(RegistryError::Record(_)) => Some("30"),
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

/// The connection a request came on, as a request extension: a handler
/// whose response outlives a stalled client (a download) closes it.
#[derive(Debug, Clone, Default)]
pub struct Connection(Arc<std::sync::OnceLock<tokio::task::AbortHandle>>);

impl Connection {
    /// Names the connection's task, once it is spawned.
    pub fn bind(&self, task: tokio::task::AbortHandle) {
        let _ = self.0.set(task);
    }

    /// Closes the connection: its task ends, dropping the response being
    /// sent and the socket.
    pub fn close(&self) {
        if let Some(task) = self.0.get() {
            task.abort();
        }
    }
}

/// The parameters in a route's path: axum's `Path`, except that a path
/// that does not decode (`%FF` is not UTF-8) answers the error document
/// like every other refusal, not axum's plain-text rejection.
#[derive(Debug)]
pub struct UrlPath<T>(pub T);

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
            Err(e) => Err(ApiError::BadUrl(crate::text::single_line(&e.body_text()))),
        }
    }
}

/// The most bytes of a refused body read and discarded before answering.
pub const DRAIN_MAX: u64 = 64 << 20;

/// The body of a request whose declared length is over `limit` is not
/// read; it is drained and the request refused (413).
pub async fn check_length(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    timeout: Duration,
) -> Result<Body, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit => {
            if !expects_continue(headers) && n <= limit.saturating_add(DRAIN_MAX) {
                drain(body, timeout).await;
            }
            Err(ApiError::TooLarge { limit })
        }
        _ => Ok(body),
    }
}

/// Refuses a request whose body was not read (busy, draining, a bad
/// query or content type): the body is read and discarded first, bounded
/// by [`DRAIN_MAX`] and `timeout`, so a client that writes its whole body
/// before reading sees the status (and `Retry-After`), not a broken pipe.
pub async fn refuse_unread(
    headers: &HeaderMap,
    body: Body,
    timeout: Duration,
    e: ApiError,
) -> ApiError {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if !expects_continue(headers) && !matches!(declared, Some(n) if n > DRAIN_MAX) {
        drain(body, timeout).await;
    }
    e
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// Reads and discards at most [`DRAIN_MAX`] bytes of `body` within
/// `timeout`, so a client that sends its whole body before reading gets
/// the answer instead of a broken pipe. Past either bound, the connection
/// is closed after the answer (hyper does that for an unread body).
async fn drain(body: Body, timeout: Duration) {
    let mut body = body;
    let mut left = DRAIN_MAX;
    let _ = tokio::time::timeout(timeout, async {
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len() as u64);
            if n >= left {
                break;
            }
            left -= n;
        }
    })
    .await;
}

/// Reads a whole body under a size limit and a time limit.
pub async fn read_body(body: Body, limit: u64, timeout: Duration) -> Result<Bytes, ApiError> {
    let mut body = body;
    let read = tokio::time::timeout(timeout, async {
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ApiError::BadBody(e.to_string()))?;
            if let Some(d) = frame.data_ref() {
                if (buf.len() + d.len()) as u64 > limit {
                    return Err(ApiError::TooLarge { limit });
                }
                buf.extend_from_slice(d);
            }
        }
        Ok(buf)
    })
    .await;
    match read {
        Err(_) => Err(ApiError::BodyTimeout {
            secs: timeout.as_secs().max(1),
        }),
        Ok(Err(e @ ApiError::TooLarge { .. })) => {
            // The rest of a chunked body: read and dropped, so the client
            // that is still sending sees the 413.
            drain(body, timeout).await;
            Err(e)
        }
        Ok(Err(e)) => Err(e),
        Ok(Ok(buf)) => Ok(Bytes::from(buf)),
    }
}

/// Query parameters of a route, refusing those it does not know.
pub fn params(
    q: Result<Query<BTreeMap<String, String>>, QueryRejection>,
    known: &[&str],
) -> Result<BTreeMap<String, String>, ApiError> {
    let Query(map) = q.map_err(|e| {
        ApiError::BadQuery(format!(
            "bad query parameters: {}",
            crate::text::single_line(&e.body_text())
        ))
    })?;
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::BadQuery(format!(
            "unknown query parameter {:?}; this route takes {}",
            crate::text::single_line(k),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    Ok(map)
}

/// A body with a `Content-Type` must say JSON (`application/json` or a
/// `+json` type); one without is read as JSON.
pub fn json_content(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = v
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        return Ok(());
    }
    Err(ApiError::MediaType(crate::text::single_line(
        &String::from_utf8_lossy(v.as_bytes()),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_fault_is_a_server_error_and_nothing_else_is() {
        use ErrorKind as K;
        for &k in ErrorKind::ALL {
            let outcome = matches!(
                k,
                K::SandboxFailed | K::NotExecutable | K::TimedOut | K::LimitExceeded | K::Cancelled
            );
            if !outcome {
                assert_eq!(status(k).is_server_error(), k.is_host_fault(), "{k}");
            }
        }
    }
}
