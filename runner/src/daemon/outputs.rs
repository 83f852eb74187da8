//! `GET /v1/executions/{id}/outputs/{path}`: the bytes of one collected
//! output of a retained execution (docs/files.md).
//!
//! Invariants:
//! - only a path the result lists as kept (with a `sha256`) is served, and
//!   it is looked up by exact match in the execution's [`OutputStore`],
//!   never joined to a folder: a `..` or a stranger path is simply not
//!   found;
//! - the bytes are streamed from the kept file in 64 KiB chunks, never
//!   read whole into memory; a download under way holds its open file, so
//!   an eviction meanwhile does not cut it;
//! - the store lives as long as the execution's record
//!   ([`super::registry::Done`]), also when its result document was dropped
//!   to bound memory.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncRead, ReadBuf};

use super::app::{ApiError, App, UrlPath};
use super::registry::Lookup;
use crate::exec::files::OutputStore;

/// The route, merged into the daemon's router.
pub fn routes() -> Router<App> {
    Router::new().route("/v1/executions/{id}/outputs/{*path}", get(get_output))
}

async fn get_output(
    State(app): State<App>,
    UrlPath((id, path)): UrlPath<(String, String)>,
) -> Result<Response, ApiError> {
    let store: Option<Arc<OutputStore>> = match app.registry.lookup(&id) {
        Lookup::Done(done) => done.outputs.clone(),
        Lookup::Live(_) => return Err(ApiError::OutputsPending(id)),
        Lookup::Unknown => {
            return Err(ApiError::NotFound {
                what: "execution",
                id,
            })
        }
    };
    let missing = || ApiError::NotFound {
        what: "kept output",
        id: format!("{id}/{path}"),
    };
    let store = store.ok_or_else(missing)?;
    let (file, size) = match store.open(&path) {
        None => return Err(missing()),
        Some(Ok(found)) => found,
        Some(Err(e)) => {
            return Err(ApiError::Internal(format!(
                "cannot open the kept output {path:?}: {e}"
            )))
        }
    };
    let sha = store
        .files()
        .find(|(p, _, _)| *p == path)
        .map(|(_, sha, _)| sha.to_owned())
        .unwrap_or_default();
    let body = FileBody {
        file: tokio::fs::File::from_std(file),
        left: size,
        buf: vec![0; CHUNK].into_boxed_slice(),
        _store: store,
    };
    let mut resp = Body::new(body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    if let Ok(v) = HeaderValue::from_str(&format!("\"{sha}\"")) {
        headers.insert(header::ETAG, v);
    }
    Ok(resp)
}

/// Bytes read from the kept file at a time.
const CHUNK: usize = 64 << 10;

/// A kept file as a response body, read a chunk at a time.
struct FileBody {
    file: tokio::fs::File,
    /// Bytes still to send: the kept size, which the file never outgrows
    /// (the store is the daemon's own).
    left: u64,
    buf: Box<[u8]>,
    /// Holds the store (and its folder) while the download lasts.
    _store: Arc<OutputStore>,
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let want = this.buf.len().min(this.left as usize);
        let mut rb = ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the kept output is shorter than its recorded size",
                    ))));
                }
                this.left -= n as u64;
                let chunk = Bytes::copy_from_slice(rb.filled());
                Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}
