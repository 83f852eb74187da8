//! The environment routes of docs/daemon.md ("Environments"): the
//! daemon's face of the environment store (docs/environments.md).
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/environments` | an upload (a tree, its claimed hash, verified before it is published), or, with `--env-builds true`, a build from a lock |
//! | `GET /v1/environments` | every record |
//! | `GET /v1/environments/{id}/{hash}` | one record, or 404 |
//!
//! Invariants:
//! - an upload is read under the package body limit, holding one of the
//!   upload permits, like a bundle; every path and target is checked and
//!   the environment hash recomputed from the decoded bytes before
//!   anything is written, and a hash other than the claimed one publishes
//!   nothing (422 `hash_mismatch`);
//! - the tree is written into a private folder of the store and published
//!   by [`crate::package::environment::store::EnvStore::add`], which lists,
//!   copies, hashes and seals it as for `env add`; the published hash is
//!   compared with the claim once more;
//! - a build runs only where the operator turned builds on, one at a time
//!   (another is 429 `busy` at once), on a blocking thread, with the same
//!   two sandboxes as `env build` ([`crate::exec::envfetch::build`]).

use std::fs;
use std::io;
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use serde::Deserialize;

use super::app::{check_length, json_content, read_body, refuse_unread, ApiError, App, UrlPath};
pub use super::env_error::EnvApiError;
use crate::exec::envfetch::BuildRequest;
use crate::package::environment::store::{EnvError, EnvLimits};
use crate::package::environment::tree::{self, Content};
use crate::package::environment::{base, lock, EnvRef, LockRef, Record};

/// The environment routes, merged into the daemon's router.
pub fn routes() -> Router<App> {
    Router::new()
        .route(
            "/v1/environments",
            get(list_environments).post(post_environment),
        )
        .route("/v1/environments/{id}/{hash}", get(get_environment))
}

/// `POST /v1/environments`: one of two bodies, told apart by their fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvRequest {
    id: String,
    /// An upload: the claimed environment hash.
    hash: Option<String>,
    /// An upload: the tree's regular files.
    files: Option<Vec<RawEnvFile>>,
    /// An upload: the tree's symlinks.
    #[serde(default)]
    symlinks: Vec<RawEnvSymlink>,
    /// A build: the lock's text; an upload: the lock it was built from
    /// (checked to be strict, its digest recorded).
    python: Option<String>,
    /// The interpreter the tree is (to be) built for, under `/usr`.
    interpreter: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvFile {
    path: String,
    /// Standard base64 of the bytes.
    content: String,
    #[serde(default)]
    executable: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvSymlink {
    path: String,
    target: String,
}

/// A checked upload: entries decoded, the hash recomputed and equal to
/// the claim.
#[derive(Debug)]
struct Upload {
    id: String,
    hash: String,
    files: Vec<(String, Vec<u8>, bool)>,
    symlinks: Vec<(String, String)>,
    base: Vec<crate::package::environment::Base>,
    locks: Vec<LockRef>,
}

fn bad(reason: impl Into<String>) -> EnvApiError {
    EnvApiError::Upload {
        reason: reason.into(),
    }
}

/// Decodes and checks an upload before anything is written.
fn check_upload(raw: RawEnvRequest, limits: &EnvLimits) -> Result<Upload, EnvApiError> {
    let claimed = raw
        .hash
        .ok_or_else(|| bad("an upload names its \"hash\" (the environment hash of the tree)"))?;
    if !crate::package::hash::is_hex_digest(&claimed) {
        return Err(bad("\"hash\" is not 64 lowercase hex digits"));
    }
    let raw_files = raw.files.unwrap_or_default();
    let entries = raw_files.len() as u64 + raw.symlinks.len() as u64;
    if entries > limits.max_entries {
        return Err(EnvError::TooManyEntries {
            limit: limits.max_entries,
        }
        .into());
    }
    let mut files = Vec::with_capacity(raw_files.len());
    let mut total = 0u64;
    for f in raw_files {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&f.content)
            .map_err(|e| {
                bad(format!(
                    "the content of {:?} is not standard base64: {e}",
                    f.path
                ))
            })?;
        total += bytes.len() as u64;
        if bytes.len() as u64 > limits.max_file_bytes {
            return Err(EnvError::FileTooLarge {
                path: f.path.clone().into(),
                size: bytes.len() as u64,
                limit: limits.max_file_bytes,
            }
            .into());
        }
        if total > limits.max_bytes {
            return Err(EnvError::TooLarge {
                limit: limits.max_bytes,
            }
            .into());
        }
        files.push((f.path, bytes, f.executable));
    }
    if files.is_empty() {
        return Err(bad(
            "the tree holds no file; an environment needs at least one",
        ));
    }
    let symlinks: Vec<(String, String)> = raw
        .symlinks
        .into_iter()
        .map(|s| (s.path, s.target))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for path in files
        .iter()
        .map(|f| &f.0)
        .chain(symlinks.iter().map(|s| &s.0))
    {
        if !seen.insert(path.as_str()) {
            return Err(bad(format!("{path:?} is listed twice")));
        }
    }
    let actual = tree::tree_hash(
        files
            .iter()
            .map(|(p, b, x)| (p.as_str(), Content::File { bytes: b, exec: *x }))
            .chain(
                symlinks
                    .iter()
                    .map(|(p, t)| (p.as_str(), Content::Symlink { target: t })),
            ),
    )?;
    if actual != claimed {
        return Err(EnvApiError::ClaimedHash { claimed, actual });
    }
    let (base, locks) = provenance(raw.interpreter.as_deref(), raw.python.as_deref())?;
    Ok(Upload {
        id: raw.id,
        hash: actual,
        files,
        symlinks,
        base,
        locks,
    })
}

/// The base and lock an upload records, as `env add --python
/// --interpreter` does: the lock must be strict, the interpreter exist.
type Provenance = (Vec<crate::package::environment::Base>, Vec<LockRef>);

fn provenance(
    interpreter: Option<&str>,
    lock_text: Option<&str>,
) -> Result<Provenance, EnvApiError> {
    let Some(text) = lock_text else {
        if interpreter.is_some() {
            return Err(bad(
                "\"interpreter\" goes with \"python\" (the lock the tree was built from)",
            ));
        }
        return Ok((Vec::new(), Vec::new()));
    };
    let lock = lock::parse_python(text.as_bytes()).map_err(|e| bad(format!("python: {e}")))?;
    let base = base::probe_python(interpreter.unwrap_or(base::DEFAULT_PYTHON))
        .map_err(|e| bad(e.to_string()))?;
    Ok((
        vec![base],
        vec![LockRef {
            kind: lock::PYTHON_REQUIREMENTS.into(),
            sha256: lock.sha256,
        }],
    ))
}

/// Writes a checked upload into `dir` (a fresh private folder): folders
/// made as needed, files created new, symlinks last.
fn write_upload(up: &Upload, dir: &Path) -> Result<(), EnvApiError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| EnvApiError::Write { path, source }
    };
    for (rel, bytes, exec) in &up.files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(err(parent))?;
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if *exec { 0o755 } else { 0o644 })
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(err(&path))?;
        io::Write::write_all(&mut f, bytes).map_err(err(&path))?;
    }
    for (rel, target) in &up.symlinks {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(err(parent))?;
        }
        std::os::unix::fs::symlink(target, &path).map_err(err(&path))?;
    }
    Ok(())
}

/// Publishes a checked upload through the store's own path.
fn publish_upload(app: &App, up: Upload, limits: &EnvLimits) -> Result<Record, EnvApiError> {
    let store = &app.runner.environments;
    let staging = store.staging().map_err(|source| EnvApiError::Write {
        path: store.root().to_owned(),
        source,
    })?;
    let tree = staging.path.join("tree");
    fs::create_dir(&tree).map_err(|source| EnvApiError::Write {
        path: tree.clone(),
        source,
    })?;
    write_upload(&up, &tree)?;
    let published = store.add(&tree, &up.id, up.base, up.locks, limits)?;
    if published.record.hash != up.hash {
        // The store hashed what was written: this would be our bug.
        let _ = store.remove(&published.record.env_ref());
        return Err(EnvApiError::ClaimedHash {
            claimed: up.hash,
            actual: published.record.hash,
        });
    }
    tracing::info!(id = %published.record.id, hash = %published.record.hash, new_tree = published.new_tree, "published an environment");
    Ok(published.record)
}

/// One build at a time in a daemon.
static BUILDS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Builds from the lock text of a build request, as `env build` does.
fn build(app: &App, raw: RawEnvRequest, lock_text: String) -> Result<Record, EnvApiError> {
    let file = tempfile_in_tmp(&lock_text)?;
    let req = BuildRequest {
        lock: &file.0,
        id: &raw.id,
        python: raw.interpreter.as_deref().unwrap_or(base::DEFAULT_PYTHON),
        fetch_timeout: Duration::from_secs(600),
        install_timeout: Duration::from_secs(600),
        limits: EnvLimits::default(),
    };
    let id = raw.id.clone();
    let built = crate::exec::envfetch::build(&app.runner, &req, &mut |step| {
        tracing::info!(id = %id, step = step.as_str(), "environment build");
    })?;
    Ok(built.published.record)
}

/// A private file holding `text`, removed when dropped.
struct TempLock(std::path::PathBuf);

impl Drop for TempLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn tempfile_in_tmp(text: &str) -> Result<TempLock, EnvApiError> {
    let path = std::env::temp_dir().join(format!(
        "skill-runner-lock-{}.txt",
        crate::fsx::random_hex()
    ));
    crate::fsx::write_new(&path, text.as_bytes(), 0o600).map_err(|source| EnvApiError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(TempLock(path))
}

async fn post_environment(
    State(app): State<App>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let timeout = app.config.body_timeout;
    if let Err(e) = json_content(&headers) {
        return Err(refuse_unread(&headers, body, timeout, e).await);
    }
    let limit = app.config.package_body_limit;
    let body = check_length(&headers, body, limit, timeout).await?;
    // Trees are large: they share the bundles' few upload permits.
    let permit = match tokio::time::timeout(timeout, app.uploads.clone().acquire_owned()).await {
        Ok(Ok(p)) => p,
        _ => return Err(refuse_unread(&headers, body, timeout, ApiError::UploadsBusy).await),
    };
    let bytes = read_body(body, limit, timeout).await?;
    let raw: RawEnvRequest = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::from(bad(format!("the body is not an environment request: {e}"))))?;
    drop(bytes);
    let worker = app.clone();
    let record = match (raw.python.clone(), raw.files.is_some() || raw.hash.is_some()) {
        (Some(lock_text), false) => {
            drop(permit);
            if !app.config.env_builds {
                return Err(EnvApiError::BuildsOff.into());
            }
            let Ok(build_permit) = BUILDS.try_acquire() else {
                return Err(EnvApiError::BuildBusy.into());
            };
            let record = tokio::task::spawn_blocking(move || build(&worker, raw, lock_text))
                .await
                .map_err(|e| ApiError::Internal(format!("the build thread failed: {e}")))?;
            drop(build_permit);
            record?
        }
        (_, true) => tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let limits = EnvLimits::default();
            check_upload(raw, &limits).and_then(|up| publish_upload(&worker, up, &limits))
        })
        .await
        .map_err(|e| ApiError::Internal(format!("the publishing thread failed: {e}")))??,
        (None, false) => {
            return Err(bad(
                "send either an upload ({\"id\", \"hash\", \"files\", \"symlinks\"}) or a build ({\"id\", \"python\": LOCK TEXT})",
            )
            .into())
        }
    };
    Ok((StatusCode::CREATED, Json(record)).into_response())
}

async fn list_environments(State(app): State<App>) -> Result<Response, ApiError> {
    let records = app.runner.environments.list().map_err(EnvApiError::from)?;
    Ok(Json(serde_json::json!({ "environments": records })).into_response())
}

async fn get_environment(
    State(app): State<App>,
    UrlPath((id, hash)): UrlPath<(String, String)>,
) -> Result<Response, ApiError> {
    let env = EnvRef { id, hash };
    match app.runner.environments.record(&env) {
        Ok(record) => Ok(Json(record).into_response()),
        Err(EnvError::NotFound { .. }) => Err(ApiError::NotFound {
            what: "environment",
            id: format!("{}@{}", env.id, env.hash),
        }),
        Err(e) => Err(EnvApiError::from(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: serde_json::Value) -> RawEnvRequest {
        serde_json::from_value(json).unwrap()
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// An upload is taken only with the tree's own hash, admissible paths
    /// and targets, and within the bounds; each refusal says why.
    #[test]
    fn an_upload_is_checked_before_anything_is_written() {
        let good = tree::tree_hash([
            (
                "python/x.py",
                Content::File {
                    bytes: b"X = 1\n",
                    exec: false,
                },
            ),
            (
                "bin/x",
                Content::Symlink {
                    target: "../python/x.py",
                },
            ),
        ])
        .unwrap();
        let files = serde_json::json!([{"path": "python/x.py", "content": b64(b"X = 1\n")}]);
        let links = serde_json::json!([{"path": "bin/x", "target": "../python/x.py"}]);
        let limits = EnvLimits::default();
        let up = check_upload(
            raw(serde_json::json!({"id": "x", "hash": good, "files": files, "symlinks": links})),
            &limits,
        )
        .unwrap();
        assert_eq!(up.hash, good);
        let cases = [
            (
                serde_json::json!({"id": "x", "hash": "0".repeat(64), "files": files, "symlinks": links}),
                "not the claimed",
            ),
            (
                serde_json::json!({"id": "x", "hash": good, "files": [{"path": "../x", "content": ""}]}),
                "..",
            ),
            (
                serde_json::json!({"id": "x", "hash": good, "files": files,
                    "symlinks": [{"path": "bin/x", "target": "/etc/shadow"}]}),
                "may point only inside the tree",
            ),
            (
                serde_json::json!({"id": "x", "hash": good, "files": [{"path": "a", "content": "%%"}]}),
                "not standard base64",
            ),
            (
                serde_json::json!({"id": "x", "hash": good, "files": []}),
                "holds no file",
            ),
            (
                serde_json::json!({"id": "x", "hash": "ABC", "files": files}),
                "64 lowercase hex",
            ),
            (
                serde_json::json!({"id": "x", "hash": good, "files": [
                    {"path": "a", "content": ""}, {"path": "a", "content": ""}]}),
                "listed twice",
            ),
        ];
        for (body, want) in cases {
            let err = check_upload(raw(body.clone()), &limits).unwrap_err();
            assert!(err.to_string().contains(want), "{body}: {err}");
        }
        let small = EnvLimits {
            max_file_bytes: 2,
            ..limits
        };
        let err = check_upload(
            raw(serde_json::json!({"id": "x", "hash": good, "files": files})),
            &small,
        )
        .unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
    }
}
