//! The file routes of a managed session workspace (docs/workspaces.md):
//!
//! | route | does |
//! |---|---|
//! | `PUT /v1/sessions/{id}/files/{*path}` | upload one file (`application/octet-stream`), atomically |
//! | `GET /v1/sessions/{id}/files/{*path}` | the bytes of one regular file, streamed |
//! | `DELETE /v1/sessions/{id}/files/{*path}` | delete one file |
//! | `GET /v1/sessions/{id}/files?prefix=` | the regular files, bounded |
//!
//! Invariants:
//! - an upload or a deletion holds the workspace's lane ([`super::workspace`])
//!   for its whole length, and is refused (409) while a job of the session
//!   is admitted; reads and listings are not (a read may then see a file a
//!   job is writing);
//! - an upload's body is bounded by `file_body_limit` (413, read and
//!   discarded as every too-large body is) and streamed to a temporary
//!   file; whatever stops it before its last byte (too
//!   large, too slow, a broken connection, the workspace's `workspace_bytes`)
//!   removes what it wrote;
//! - an upload is written, and a download read, asynchronously as the
//!   client sends or takes it (a download 64 KiB at a time, at most the
//!   size the file had when it was opened), so a slow client holds no
//!   blocking thread, which executions need, and at most one chunk of
//!   memory;
//! - at most `max_downloads` downloads are streamed at once, across all
//!   sessions: each holds a permit until its last byte is sent, its
//!   client leaves, or its client takes no 64 KiB chunk for
//!   `stall_timeout` (then its connection is closed), and one more is
//!   refused `429 busy` with `Retry-After` before its file is opened;
//! - every path and every file met is handled by
//!   [`crate::skillhost::session::workspace`]: no link is followed, only
//!   regular files with one link are read.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http_body::Frame;
use http_body_util::BodyExt;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::app::{check_length, params, refuse_unread, ApiError, App, Connection, UrlPath};
use super::sessions::use_session;
use super::workspace::{Holder, LaneError};
use crate::skillhost::session::workspace::{check_path, Workspace, WorkspaceError};
use crate::skillhost::session::SessionError;

/// The file routes, to be merged into the main router.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/v1/sessions/{id}/files", get(list))
        .route(
            "/v1/sessions/{id}/files/{*path}",
            get(download).put(upload).delete(remove),
        )
}

/// Bytes read from a file per chunk of a download.
const CHUNK: usize = 64 << 10;

/// `PUT`'s answer.
#[derive(Debug, Serialize)]
struct Written {
    session: String,
    path: String,
    size: u64,
    sha256: String,
}

/// `DELETE`'s answer.
#[derive(Debug, Serialize)]
struct Deleted {
    session: String,
    path: String,
    deleted: bool,
}

fn thread_failed(e: tokio::task::JoinError) -> ApiError {
    ApiError::Internal(format!("the workspace thread failed: {e}"))
}

/// Opens session `id`'s workspace after checking the session is in use
/// (not expired) and, with `lane`, takes its lane for a write.
fn open(
    app: &App,
    id: &str,
    path: Option<&str>,
    lane: bool,
) -> Result<(Workspace, Option<super::workspace::Place>), ApiError> {
    if let Some(path) = path {
        check_path(path).map_err(SessionError::from)?;
    }
    use_session(app, id)?;
    let workspace = app.sessions.workspace(id)?;
    let place = match lane {
        true => Some(app.lanes.try_join(id, Holder::Files)?),
        false => None,
    };
    Ok((workspace, place))
}

/// `application/octet-stream`, or no `Content-Type` at all.
fn octet_stream(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = v.to_str().unwrap_or("").split(';').next().unwrap_or("");
    if essence
        .trim()
        .eq_ignore_ascii_case("application/octet-stream")
    {
        return Ok(());
    }
    Err(ApiError::FileMediaType(crate::text::single_line(
        &String::from_utf8_lossy(v.as_bytes()),
    )))
}

async fn upload(
    State(app): State<App>,
    UrlPath((id, path)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (limit, timeout) = (app.config.file_body_limit, app.config.body_timeout);
    if let Err(e) = octet_stream(&headers) {
        return Err(refuse_unread(&headers, body, timeout, e).await);
    }
    let body = check_length(&headers, body, limit, timeout).await?;
    let worker = app.clone();
    let (sid, spath) = (id.clone(), path.clone());
    let opened = tokio::task::spawn_blocking(move || {
        let (ws, place) = open(&worker, &sid, Some(&spath), true)?;
        let mut up = ws.upload(&spath).map_err(SessionError::from)?;
        let handle = up
            .handle()
            .map_err(|e| ApiError::Internal(format!("opening an upload: {e}")))?;
        Ok::<_, ApiError>((ws, place, up, handle))
    })
    .await
    .map_err(thread_failed)?;
    let (ws, place, up, handle) = match opened {
        Ok(v) => v,
        Err(e) => return Err(refuse_unread(&headers, body, timeout, e).await),
    };
    // Written asynchronously: a slow client holds no blocking thread,
    // only its lane and the upload (removed if this future is dropped).
    let mut out = tokio::fs::File::from_std(handle);
    let mut sha = Sha256::new();
    let received = receive(body, limit, timeout, &mut out, &mut sha).await;
    drop(out);
    let size = match received {
        Ok(n) => n,
        Err(e) => {
            drop(up);
            return Err(e);
        }
    };
    let root = app.sessions.sessions().workspace_path(&id);
    let bound = app.config.workspace_bytes;
    let session = id.clone();
    tokio::task::spawn_blocking(move || {
        let _place = place;
        up.commit(|| {
            let would = ws.usage(&root)?;
            if would > bound {
                return Err(WorkspaceError::Full {
                    session,
                    would,
                    limit: bound,
                });
            }
            Ok(())
        })
    })
    .await
    .map_err(thread_failed)?
    .map_err(SessionError::from)?;
    tracing::info!(session = %id, path = %path.escape_debug(), size, "file uploaded");
    Ok(Json(Written {
        session: id,
        path,
        size,
        sha256: crate::text::to_hex(&sha.finalize()),
    })
    .into_response())
}

/// Writes `body` to `out` under `limit` bytes and `timeout`; how many
/// bytes it held.
async fn receive(
    body: Body,
    limit: u64,
    timeout: std::time::Duration,
    out: &mut tokio::fs::File,
    sha: &mut Sha256,
) -> Result<u64, ApiError> {
    use tokio::io::AsyncWriteExt;
    let mut body = body;
    let mut seen: u64 = 0;
    let receiving = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ApiError::BadBody(e.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            seen += data.len() as u64;
            if seen > limit {
                return Err(ApiError::TooLarge { limit });
            }
            sha.update(&data);
            out.write_all(&data)
                .await
                .map_err(|e| ApiError::Internal(format!("writing an upload: {e}")))?;
        }
        out.flush()
            .await
            .map_err(|e| ApiError::Internal(format!("writing an upload: {e}")))?;
        Ok(seen)
    };
    match tokio::time::timeout(timeout, receiving).await {
        Err(_) => Err(ApiError::BodyTimeout {
            secs: timeout.as_secs().max(1),
        }),
        Ok(Err(e @ ApiError::TooLarge { .. })) => {
            // The rest is read and dropped so the client sees the 413.
            let _ = super::app::read_body(body, 0, timeout).await;
            Err(e)
        }
        Ok(r) => r,
    }
}

async fn download(
    State(app): State<App>,
    UrlPath((id, path)): UrlPath<(String, String)>,
    connection: Option<axum::Extension<Connection>>,
) -> Result<Response, ApiError> {
    let permit = app
        .downloads
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::DownloadsBusy(app.config.max_downloads))?;
    let worker = app.clone();
    let file = tokio::task::spawn_blocking(move || {
        let (ws, _) = open(&worker, &id, Some(&path), false)?;
        Ok::<_, ApiError>(ws.open_file(&path).map_err(SessionError::from)?)
    })
    .await
    .map_err(thread_failed)??;
    let (file, size) = file;
    let watch = Arc::new(Watch {
        taken: AtomicU64::new(0),
        permit: std::sync::Mutex::new(Some(permit)),
        stalled: AtomicBool::new(false),
        started: std::time::Instant::now(),
    });
    let watcher = tokio::spawn(watch_stall(
        Arc::downgrade(&watch),
        app.config.stall_timeout,
        connection.map(|axum::Extension(c)| c),
    ));
    let body = FileBody {
        file: tokio::fs::File::from_std(file),
        left: size,
        buf: vec![0u8; CHUNK],
        watch,
        watcher: watcher.abort_handle(),
    };
    let mut resp = Body::new(body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

/// A download's body: read from the file a chunk at a time as the client
/// takes it (no thread waits on a slow client), and at most the size the
/// file had when it was opened.
struct FileBody {
    file: tokio::fs::File,
    left: u64,
    buf: Vec<u8>,
    /// Its place among `max_downloads` and when the client last took a
    /// chunk ([`watch_stall`]).
    watch: Arc<Watch>,
    /// The task watching it, stopped when the body goes.
    watcher: tokio::task::AbortHandle,
}

impl Drop for FileBody {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// What a download shares with the task that watches it for a stall.
struct Watch {
    /// Milliseconds after `started` at which the client last took a chunk.
    taken: AtomicU64,
    /// Its place among `max_downloads`: given back when the body goes, or
    /// by the watcher when the client stalls.
    permit: std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    /// The watcher gave its place away: the body ends with an error.
    stalled: AtomicBool,
    started: std::time::Instant,
}

impl Watch {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

/// A client that takes no chunk (`CHUNK`, 64 KiB) of its download for
/// `stall` is treated as gone, as a stalled stream is: its connection is
/// closed, which drops the body with its file and buffers, and its place
/// among `max_downloads` is given back. (hyper polls a body only when the
/// client reads, so the body alone would hold all of them while the
/// connection lives.) Without a connection to close (a request served
/// outside the daemon's accept loop) the place is given back and the body
/// ends with an error the next time it is asked for a chunk.
async fn watch_stall(
    watch: std::sync::Weak<Watch>,
    stall: Duration,
    connection: Option<Connection>,
) {
    let stall_ms = (stall.as_millis() as u64).max(1);
    let mut wait = stall;
    loop {
        tokio::time::sleep(wait).await;
        let Some(w) = watch.upgrade() else { return };
        let idle = w.now_ms().saturating_sub(w.taken.load(Ordering::Relaxed));
        if idle < stall_ms {
            wait = Duration::from_millis(stall_ms - idle);
            continue;
        }
        w.stalled.store(true, Ordering::Relaxed);
        let freed = w.permit.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(w);
        if freed.is_some() {
            tracing::info!(
                stall_ms,
                "a session file download took nothing for stall_timeout: its connection is closed and its place given back"
            );
        }
        if let Some(c) = connection {
            c.close();
        }
        return;
    }
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        use tokio::io::AsyncRead;
        let this = self.get_mut();
        if this.watch.stalled.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took nothing of this download for stall_timeout",
            ))));
        }
        this.watch
            .taken
            .store(this.watch.now_ms(), Ordering::Relaxed);
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let want = (this.left as usize).min(this.buf.len());
        let mut buf = tokio::io::ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            // Shorter than it was: it ends here.
            Poll::Ready(Ok(())) if buf.filled().is_empty() => Poll::Ready(None),
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                this.left -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(
                    &this.buf[..n],
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }
}

async fn remove(
    State(app): State<App>,
    UrlPath((id, path)): UrlPath<(String, String)>,
) -> Result<Response, ApiError> {
    let worker = app.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let (ws, _place) = open(&worker, &id, Some(&path), true)?;
        ws.delete(&path).map_err(SessionError::from)?;
        tracing::info!(session = %id, path = %path.escape_debug(), "file deleted");
        Ok::<_, ApiError>(Deleted {
            session: id,
            path,
            deleted: true,
        })
    })
    .await
    .map_err(thread_failed)??;
    Ok(Json(answer).into_response())
}

async fn list(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = params(q, &["prefix"])?;
    let prefix = q.get("prefix").cloned().unwrap_or_default();
    let worker = app.clone();
    let listing = tokio::task::spawn_blocking(move || {
        let (ws, _) = open(&worker, &id, None, false)?;
        Ok::<_, ApiError>(ws.list(&prefix).map_err(SessionError::from)?)
    })
    .await
    .map_err(thread_failed)??;
    Ok((StatusCode::OK, Json(listing)).into_response())
}

impl From<LaneError> for ApiError {
    fn from(e: LaneError) -> ApiError {
        ApiError::WorkspaceBusy(e.to_string())
    }
}

/// `session_wait=` of `POST /v1/executions`: `true` (the default) queues a
/// job behind the others of its session; `false` refuses it (409) when
/// its workspace is in use.
pub fn session_wait(value: Option<&String>) -> Result<bool, ApiError> {
    match value.map(String::as_str) {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(ApiError::BadQuery(format!(
            "session_wait={:?} is not true or false; use session_wait=false to refuse the job (409) rather than queue it while its session's workspace is in use",
            crate::text::single_line(other)
        ))),
    }
}

/// The place of an admitted job in its session workspace's order, if it
/// runs in one: the last place, or with `queue` false, the workspace at
/// once or a refusal (409).
///
/// An unannounced execution ([`super::registry::Slot::unannounced`])
/// holds its place without its id: a refusal naming it would hand its id
/// to another client before its own answer does.
pub fn place(
    app: &App,
    job: &crate::exec::job::Job,
    queue: bool,
    unannounced: bool,
) -> Result<Option<super::workspace::Place>, ApiError> {
    let Some(session) = job.session.as_deref().filter(|_| job.managed_workspace) else {
        return Ok(None);
    };
    let holder = if unannounced {
        Holder::Unannounced
    } else {
        Holder::Job(job.execution_id.clone())
    };
    Ok(Some(match queue {
        true => app.lanes.join(session, holder),
        false => app.lanes.try_join(session, holder)?,
    }))
}

/// A job in a managed workspace that already holds more than the job's
/// `disk_bytes` is rejected before it starts, with what to do; `None`
/// for any other job (the disk watcher bounds the whole workspace while
/// the command runs).
pub fn over_disk(job: &crate::exec::job::Job) -> Option<crate::exec::result::ExecResult> {
    use crate::exec::result::{ErrorInfo, ExecResult};
    let (Some(session), Some(ws)) = (job.session.as_deref(), job.workspace.as_deref()) else {
        return None;
    };
    if !job.managed_workspace {
        return None;
    }
    let held = crate::supervise::diskwatch::usage(&[ws.to_owned()]).ok()?;
    let limit = job.limits.disk_bytes;
    if held <= limit {
        return None;
    }
    let result = ExecResult::rejected(
        &job.execution_id,
        crate::exec::SANDBOX,
        ErrorInfo::new(
            crate::error::ErrorKind::BadJob,
            format!("the workspace of session {session} already holds {held} bytes, more than this job's limits.disk_bytes of {limit} (a managed workspace counts whole); raise limits.disk_bytes, or delete files (DELETE /v1/sessions/{session}/files/PATH)"),
        ),
    );
    tracing::info!(
        kind = "bad_job",
        "rejected: {}",
        result
            .error
            .as_ref()
            .map_or("", |e| e.message.as_str())
            .escape_debug()
    );
    Some(result)
}
