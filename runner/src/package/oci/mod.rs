//! Packages and environments to and from OCI registries
//! (docs/distribution.md; the artifact format in docs/formats.md, "OCI
//! artifacts").
//!
//! Invariants:
//! - a pull names a manifest by digest ([`Reference::digest`]); a tag is
//!   only ever turned into a digest by [`resolve_tag`], which the caller
//!   shows;
//! - every byte read from a registry is counted against a bound before it
//!   is kept: the manifest's digest is checked, then each blob's declared
//!   size (never more than [`RegistryConfig::max_package_bytes`] or
//!   [`RegistryConfig::max_env_bytes`]) and digest while it streams
//!   (reading stops at the first byte past the declared size);
//! - what was read then goes through the same publish a local upload does
//!   ([`Store::publish_files`], [`EnvStore::add_expecting`]), which checks
//!   the package hash (or environment hash) the config claims: nothing
//!   unverified reaches a store, and a failed pull leaves only a private
//!   staging folder, removed;
//! - a manifest digest pulled once is recorded beside the store
//!   (`oci/<hex>.json`): pulling it again while the package is held makes
//!   no network request at all.
//!
//! The functions block (each runs its own single-threaded runtime): from
//! async code, call them on a blocking thread.

pub mod artifact;
pub mod client;
pub mod reference;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use hyper::Method;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ErrorKind;
use crate::fsx;
use crate::package::environment::store::{EnvError, EnvLimits, EnvStore};
use crate::package::environment::{Base, EnvRef, LockRef, Record};
use crate::package::format::{self, PackageLimits};
use crate::package::hash::Binding;
use crate::package::store::{PrivateDir, Store, StoreError};

pub use artifact::Kind;
use artifact::{Descriptor, LayerError, Manifest};
use client::{ReqBody, Session};
pub use reference::{Reference, ReferenceError};

/// Most bytes a manifest may hold.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Most bytes a config blob may hold.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why a push or a pull failed: one sentence naming what to do.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("{reference} names a tag, not a digest; pull by digest (oci://…@sha256:…), or give --resolve-tag to resolve the tag and print the digest it names")]
    TagOnly { reference: String },
    #[error("{reference} names a digest; push to a tag (…/REPO:TAG) or to the repository alone")]
    PushDigest { reference: String },
    #[error("cannot reach registry {registry}: {reason}")]
    Connect { registry: String, reason: String },
    #[error("TLS with registry {registry} failed: {reason}; for a registry with its own CA give --registry-ca FILE, for a plain-HTTP one --insecure-registry {registry}")]
    Tls { registry: String, reason: String },
    #[error("registry {registry} wants credentials; put them in the Docker-style config (--registry-config FILE or $DOCKER_CONFIG/config.json, auths.\"{registry}\".auth)")]
    NeedsCredentials { registry: String },
    #[error("registry {registry} refused the login: {reason}")]
    Auth { registry: String, reason: String },
    #[error("refused to send a request to {url}: the registry named a plain-HTTP location, which is allowed only for a host given as --insecure-registry and never after TLS with that host; nothing was sent there")]
    PlainHttp { url: String },
    #[error("{url} answered {status} while {doing}")]
    Status {
        url: String,
        status: u16,
        doing: &'static str,
    },
    #[error("{reference} is not in the registry (404)")]
    NotFound { reference: String },
    #[error("the registry's manifest for {digest} has digest {actual}: the registry is not serving what was asked for; nothing was stored")]
    ManifestDigest { digest: String, actual: String },
    #[error("manifest {digest} is not a skill-runner artifact: {reason}")]
    NotOurs { digest: String, reason: String },
    #[error("manifest {digest} holds {found}, not {wanted}; use `skill-runner {command} pull`")]
    WrongKind {
        digest: String,
        found: &'static str,
        wanted: &'static str,
        command: &'static str,
    },
    #[error("{what} declares {size} bytes, over the bound of {limit}; nothing was fetched (raise the bound if the artifact is meant to be that big)")]
    Declared { what: String, size: u64, limit: u64 },
    #[error("{what} is over {limit} bytes; reading stopped there")]
    TooBig { what: String, limit: u64 },
    #[error("blob {digest} sent more bytes than the {declared} its manifest declares; reading stopped there and nothing was stored")]
    Longer { digest: String, declared: u64 },
    #[error("blob {digest} ended after {got} of the {declared} bytes its manifest declares; nothing was stored")]
    Shorter {
        digest: String,
        got: u64,
        declared: u64,
    },
    #[error("blob {digest} arrived with digest {actual}; nothing was stored")]
    BlobDigest { digest: String, actual: String },
    #[error("{what} stalled: no byte for {secs} s")]
    Stalled { what: String, secs: u64 },
    #[error("the pull of {reference} took longer than {secs} s; stopped, nothing was stored")]
    Timeout { reference: String, secs: u64 },
    #[error("the config of {digest} is not a {noun} config: {reason}")]
    Config {
        digest: String,
        noun: &'static str,
        reason: String,
    },
    #[error("the layer of {digest}: {source}; nothing was stored")]
    Layer { digest: String, source: LayerError },
    #[error("the {noun} of {digest} does not verify: {reason}; nothing was stored")]
    Verify {
        digest: String,
        noun: &'static str,
        reason: String,
    },
    #[error("registry config {path}: {reason}")]
    RegistryConfig { path: PathBuf, reason: String },
    #[error("registry CA {path}: {reason}")]
    Ca { path: PathBuf, reason: String },
    #[error("staging {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Env(#[from] EnvError),
}

impl OciError {
    /// The error kind an execution refused for this pull carries.
    pub fn kind(&self) -> ErrorKind {
        match self {
            OciError::Reference(_)
            | OciError::TagOnly { .. }
            | OciError::PushDigest { .. }
            | OciError::RegistryConfig { .. }
            | OciError::Ca { .. } => ErrorKind::BadRequest,
            OciError::NotFound { .. } => ErrorKind::NotInStore,
            OciError::ManifestDigest { .. }
            | OciError::BlobDigest { .. }
            | OciError::Longer { .. }
            | OciError::Shorter { .. } => ErrorKind::HashMismatch,
            OciError::Verify { .. } => ErrorKind::HashMismatch,
            OciError::NotOurs { .. }
            | OciError::WrongKind { .. }
            | OciError::Config { .. }
            | OciError::Layer { .. }
            | OciError::Declared { .. }
            | OciError::TooBig { .. } => ErrorKind::BadPackage,
            OciError::Store(e) => e.kind(),
            OciError::Env(e) => e.kind(),
            OciError::Io { .. } => ErrorKind::StoreFailed,
            OciError::Connect { .. }
            | OciError::Tls { .. }
            | OciError::PlainHttp { .. }
            | OciError::NeedsCredentials { .. }
            | OciError::Auth { .. }
            | OciError::Status { .. }
            | OciError::Stalled { .. }
            | OciError::Timeout { .. } => ErrorKind::StagingFailed,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OciError + '_ {
    move |source| OciError::Io {
        path: path.to_owned(),
        source,
    }
}

/// How to reach registries, and the bounds of what is read from them.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// `host[:port]`s spoken to in plain HTTP (`--insecure-registry`).
    pub insecure: Vec<String>,
    /// Extra CA certificates (PEM, DER inside) trusted beside the system's.
    pub ca_certs: Vec<Vec<u8>>,
    /// `host[:port]` → (user, password), from the Docker-style config.
    pub auths: HashMap<String, (String, String)>,
    /// Most bytes a package layer may declare (default 1 GiB).
    pub max_package_bytes: u64,
    /// Most bytes an environment layer may declare (default 16 GiB).
    pub max_env_bytes: u64,
    /// Most time one push or pull may take (default 30 min).
    pub timeout: Duration,
    /// Most time without a byte (default 60 s).
    pub idle_timeout: Duration,
    pub package_limits: PackageLimits,
    pub env_limits: EnvLimits,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            insecure: Vec::new(),
            ca_certs: Vec::new(),
            auths: HashMap::new(),
            max_package_bytes: 1 << 30,
            max_env_bytes: 16 << 30,
            timeout: Duration::from_secs(30 * 60),
            idle_timeout: Duration::from_secs(60),
            package_limits: PackageLimits::default(),
            env_limits: EnvLimits::default(),
        }
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: HashMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl RegistryConfig {
    /// The settings of the command line and the daemon: credentials from
    /// `config_file` (or `$DOCKER_CONFIG/config.json`, or
    /// `~/.docker/config.json`, when present), CAs from `ca_files`,
    /// plain HTTP for `insecure`.
    pub fn load(
        config_file: Option<&Path>,
        ca_files: &[PathBuf],
        insecure: &[String],
    ) -> Result<RegistryConfig, OciError> {
        let mut cfg = RegistryConfig {
            insecure: insecure.iter().map(|h| h.to_ascii_lowercase()).collect(),
            ..RegistryConfig::default()
        };
        let implicit = std::env::var_os("DOCKER_CONFIG")
            .map(|d| PathBuf::from(d).join("config.json"))
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
            });
        let path = match config_file {
            Some(p) => Some(p.to_owned()),
            None => implicit.filter(|p| p.exists()),
        };
        if let Some(path) = path {
            cfg.auths = read_docker_config(&path)?;
        }
        for path in ca_files {
            let bytes = std::fs::read(path).map_err(|e| OciError::Ca {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            cfg.ca_certs.push(bytes);
        }
        // A bad CA file is refused now, not at the first TLS registry.
        if !cfg.ca_certs.is_empty() {
            cfg.tls_with(ca_files)?;
        }
        Ok(cfg)
    }

    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure.iter().any(|h| h == registry)
    }

    pub fn credentials(&self, registry: &str) -> Option<(String, String)> {
        self.auths.get(registry).cloned()
    }

    fn tls(&self) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, OciError> {
        self.tls_with(&[])
    }

    fn tls_with(
        &self,
        names: &[PathBuf],
    ) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, OciError> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::CertificateDer;
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        for (i, pem) in self.ca_certs.iter().enumerate() {
            let path = names
                .get(i)
                .cloned()
                .unwrap_or_else(|| PathBuf::from("--registry-ca"));
            let mut any = false;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| OciError::Ca {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                roots.add(cert).map_err(|e| OciError::Ca {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                any = true;
            }
            if !any {
                return Err(OciError::Ca {
                    path,
                    reason: "it holds no PEM certificate".into(),
                });
            }
        }
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| OciError::Tls {
                registry: String::new(),
                reason: e.to_string(),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }
}

fn read_docker_config(path: &Path) -> Result<HashMap<String, (String, String)>, OciError> {
    let bad = |reason: String| OciError::RegistryConfig {
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let doc: DockerConfig = serde_json::from_slice(&bytes)
        .map_err(|e| bad(format!("not a Docker config.json: {e}")))?;
    let mut out = HashMap::new();
    for (key, a) in doc.auths {
        // Keys are `host[:port]` or a URL of it.
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let pair = match (a.auth, a.username, a.password) {
            (Some(b64), _, _) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|_| bad(format!("auths.{key}.auth is not base64")))?;
                let text = String::from_utf8(raw)
                    .map_err(|_| bad(format!("auths.{key}.auth is not UTF-8")))?;
                let (u, p) = text
                    .split_once(':')
                    .ok_or_else(|| bad(format!("auths.{key}.auth is not user:password")))?;
                (u.to_owned(), p.to_owned())
            }
            (None, Some(u), Some(p)) => (u, p),
            _ => continue,
        };
        out.insert(host, pair);
    }
    Ok(out)
}

/// A blob's part in an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Manifest,
    Config,
    Layer,
}

/// What happened to one blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Read from the registry and verified.
    Fetched,
    /// Not read: what it carries is already held.
    Held,
    /// Sent to the registry.
    Pushed,
    /// Not sent: the registry has it.
    Present,
}

/// What a push or pull reports as it goes (bytes per blob).
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    Start {
        role: Role,
        digest: &'a str,
        size: u64,
    },
    Bytes {
        role: Role,
        digest: &'a str,
        done: u64,
        size: u64,
    },
    Done {
        role: Role,
        digest: &'a str,
        size: u64,
        outcome: Outcome,
    },
}

/// A receiver of [`Event`]s.
pub trait Progress {
    fn event(&self, event: Event<'_>);
}

/// Progress nobody watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn event(&self, _: Event<'_>) {}
}

/// What a pull of a package did.
#[derive(Debug, Clone, Serialize)]
pub struct PulledPackage {
    pub binding: Binding,
    /// The manifest digest pulled.
    pub digest: String,
    /// Blob digests read from the registry (manifest included); empty when
    /// the digest was held and no request was made.
    pub fetched: Vec<String>,
}

/// What a pull of an environment did.
#[derive(Debug, Clone, Serialize)]
pub struct PulledEnvironment {
    pub record: Record,
    pub digest: String,
    pub fetched: Vec<String>,
}

/// The config blob of an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvConfig {
    pub id: String,
    pub hash: String,
    pub base: Vec<Base>,
    pub locks: Vec<LockRef>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeldPackage {
    binding: Binding,
}

fn held_path(root: &Path, digest: &str) -> PathBuf {
    root.join("oci")
        .join(format!("{}.json", digest.trim_start_matches("sha256:")))
}

fn remember(root: &Path, digest: &str, value: &impl Serialize) -> Result<(), OciError> {
    let dir = root.join("oci");
    fsx::create_private_dir(&dir)
        .or_else(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(io_err(&dir))?;
    let path = held_path(root, digest);
    let bytes = serde_json::to_vec(value).expect("a record serializes");
    fsx::write_replace(&path, &bytes).map_err(io_err(&path))
}

/// The binding `reference`'s digest was pulled as, when it was pulled
/// before and its package is still in `store`: no network.
pub fn held_package(store: &Store, reference: &Reference) -> Option<Binding> {
    let digest = reference.digest.as_deref()?;
    let bytes = std::fs::read(held_path(store.root(), digest)).ok()?;
    let held: HeldPackage = serde_json::from_slice(&bytes).ok()?;
    store.resolve(&held.binding).ok()?;
    Some(held.binding)
}

/// The environment `reference`'s digest was pulled as, when it was pulled
/// before and its record and tree are still held: no network.
pub fn held_environment(envs: &EnvStore, reference: &Reference) -> Option<Record> {
    let digest = reference.digest.as_deref()?;
    let bytes = std::fs::read(held_path(envs.root(), digest)).ok()?;
    let env: EnvRef = serde_json::from_slice(&bytes).ok()?;
    let record = envs.record(&env).ok()?;
    envs.tree_path(&env.hash).exists().then_some(record)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a single-threaded runtime starts")
}

fn with_timeout<T>(
    cfg: &RegistryConfig,
    reference: &Reference,
    fut: impl std::future::Future<Output = Result<T, OciError>>,
) -> Result<T, OciError> {
    runtime().block_on(async {
        tokio::time::timeout(cfg.timeout, fut)
            .await
            .map_err(|_| OciError::Timeout {
                reference: reference.to_string(),
                secs: cfg.timeout.as_secs(),
            })?
    })
}

/// The digest `reference`'s tag names now (the manifest read and hashed
/// here, not the registry's word for it).
pub fn resolve_tag(cfg: &RegistryConfig, reference: &Reference) -> Result<Reference, OciError> {
    let tag = reference.tag.clone().ok_or_else(|| OciError::TagOnly {
        reference: reference.to_string(),
    })?;
    with_timeout(cfg, reference, async {
        let mut s = Session::open(cfg, &reference.registry, &reference.repository, false).await?;
        let (bytes, _) = get_manifest(&mut s, cfg, reference, &tag).await?;
        Ok(reference.at_digest(&artifact::digest_of(&bytes)))
    })
}

fn require_digest(reference: &Reference) -> Result<&str, OciError> {
    reference
        .digest
        .as_deref()
        .ok_or_else(|| OciError::TagOnly {
            reference: reference.to_string(),
        })
}

async fn get_manifest(
    s: &mut Session<'_>,
    cfg: &RegistryConfig,
    reference: &Reference,
    name: &str,
) -> Result<(Vec<u8>, Manifest), OciError> {
    let url = s.repo_url(&format!("manifests/{name}"));
    let resp = s
        .send(
            Method::GET,
            &url,
            &[("accept", artifact::MANIFEST_MEDIA_TYPE.to_owned())],
            ReqBody::Empty,
        )
        .await?;
    match resp.status().as_u16() {
        200 => {}
        404 => {
            return Err(OciError::NotFound {
                reference: reference.to_string(),
            })
        }
        status => {
            return Err(OciError::Status {
                url: format!("{}/{}", reference.registry, url.path),
                status,
                doing: "fetching the manifest",
            })
        }
    }
    let bytes = client::read_capped(
        resp,
        &reference.registry,
        MAX_MANIFEST_BYTES,
        cfg.idle_timeout,
    )
    .await
    .map_err(|e| match e {
        OciError::TooBig { limit, .. } => OciError::TooBig {
            what: format!("the manifest of {reference}"),
            limit,
        },
        e => e,
    })?;
    let digest = artifact::digest_of(&bytes);
    if name.starts_with("sha256:") && digest != name {
        return Err(OciError::ManifestDigest {
            digest: name.to_owned(),
            actual: digest,
        });
    }
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| OciError::NotOurs {
        digest: digest.clone(),
        reason: format!("not an OCI image manifest ({e})"),
    })?;
    Ok((bytes, manifest))
}

/// Checks a manifest is an artifact of ours and returns its kind, config
/// and one layer.
fn ours(digest: &str, m: &Manifest) -> Result<(Kind, Descriptor, Descriptor), OciError> {
    let not = |reason: String| OciError::NotOurs {
        digest: digest.to_owned(),
        reason,
    };
    if m.schema_version != 2 {
        return Err(not(format!("schemaVersion is {}, not 2", m.schema_version)));
    }
    if let Some(t) = &m.media_type {
        if t != artifact::MANIFEST_MEDIA_TYPE {
            return Err(not(format!("its mediaType is {t:?}")));
        }
    }
    let kind = Kind::of_config(&m.config.media_type).ok_or_else(|| {
        not(format!(
            "its config's mediaType is {:?}",
            m.config.media_type
        ))
    })?;
    if let Some(t) = &m.artifact_type {
        if t != kind.artifact_type() {
            return Err(not(format!("its artifactType is {t:?}")));
        }
    }
    let [layer] = &m.layers[..] else {
        return Err(not(format!("it has {} layers, not one", m.layers.len())));
    };
    if layer.media_type != kind.layer_type() {
        return Err(not(format!(
            "its layer's mediaType is {:?}",
            layer.media_type
        )));
    }
    for d in [&m.config, layer] {
        let hex = d.digest.strip_prefix("sha256:").unwrap_or("");
        if !reference::is_hex64(hex) {
            return Err(not(format!("{:?} is not a sha256 digest", d.digest)));
        }
    }
    Ok((kind, m.config.clone(), layer.clone()))
}

/// Streams blob `d` into `sink`, stopping at the first byte past its
/// declared size, and checks its digest.
async fn fetch_blob(
    s: &mut Session<'_>,
    cfg: &RegistryConfig,
    role: Role,
    d: &Descriptor,
    limit: u64,
    sink: &mut dyn Write,
    progress: &dyn Progress,
) -> Result<(), OciError> {
    use http_body_util::BodyExt;
    if d.size > limit {
        return Err(OciError::Declared {
            what: format!("blob {}", d.digest),
            size: d.size,
            limit,
        });
    }
    progress.event(Event::Start {
        role,
        digest: &d.digest,
        size: d.size,
    });
    let url = s.repo_url(&format!("blobs/{}", d.digest));
    let resp = s.send(Method::GET, &url, &[], ReqBody::Empty).await?;
    if !resp.status().is_success() {
        return Err(OciError::Status {
            url: format!("{}{}", s.registry, url.path),
            status: resp.status().as_u16(),
            doing: "fetching a blob",
        });
    }
    let mut body = resp.into_body();
    let mut hasher = Sha256::new();
    let mut got = 0u64;
    let mut shown = 0u64;
    loop {
        let frame = tokio::time::timeout(cfg.idle_timeout, body.frame())
            .await
            .map_err(|_| OciError::Stalled {
                what: format!("blob {}", d.digest),
                secs: cfg.idle_timeout.as_secs(),
            })?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| OciError::Connect {
            registry: s.registry.clone(),
            reason: e.to_string(),
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if got + data.len() as u64 > d.size {
            return Err(OciError::Longer {
                digest: d.digest.clone(),
                declared: d.size,
            });
        }
        got += data.len() as u64;
        hasher.update(&data);
        sink.write_all(&data)
            .map_err(io_err(Path::new("the staging folder")))?;
        if got - shown >= 1 << 20 || got == d.size {
            shown = got;
            progress.event(Event::Bytes {
                role,
                digest: &d.digest,
                done: got,
                size: d.size,
            });
        }
    }
    if got < d.size {
        return Err(OciError::Shorter {
            digest: d.digest.clone(),
            got,
            declared: d.size,
        });
    }
    let actual = format!("sha256:{:x}", hasher.finalize());
    if actual != d.digest {
        return Err(OciError::BlobDigest {
            digest: d.digest.clone(),
            actual,
        });
    }
    progress.event(Event::Done {
        role,
        digest: &d.digest,
        size: d.size,
        outcome: Outcome::Fetched,
    });
    Ok(())
}

struct Fetched {
    digest: String,
    config_bytes: Vec<u8>,
    layer: Descriptor,
    fetched: Vec<String>,
}

/// Says blob `digest` was not fetched: its bytes are held.
fn report_held(progress: &dyn Progress, role: Role, digest: &str, size: u64) {
    progress.event(Event::Done {
        role,
        digest,
        size,
        outcome: Outcome::Held,
    });
}

/// Streams `head`'s layer into `dir/layer.tar` (within `limit` bytes and
/// checked by digest), records it as fetched, and returns the file.
async fn fetch_layer(
    s: &mut Session<'_>,
    cfg: &RegistryConfig,
    head: &mut Fetched,
    limit: u64,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<std::fs::File, OciError> {
    let path = dir.join("layer.tar");
    let mut file = std::fs::File::create(&path).map_err(io_err(&path))?;
    fetch_blob(s, cfg, Role::Layer, &head.layer, limit, &mut file, progress).await?;
    head.fetched.push(head.layer.digest.clone());
    std::fs::File::open(&path).map_err(io_err(&path))
}

/// The manifest and config of `reference`'s digest, verified.
async fn fetch_head(
    s: &mut Session<'_>,
    cfg: &RegistryConfig,
    reference: &Reference,
    wanted: Kind,
    progress: &dyn Progress,
) -> Result<Fetched, OciError> {
    let digest = require_digest(reference)?.to_owned();
    progress.event(Event::Start {
        role: Role::Manifest,
        digest: &digest,
        size: 0,
    });
    let (bytes, manifest) = get_manifest(s, cfg, reference, &digest).await?;
    progress.event(Event::Done {
        role: Role::Manifest,
        digest: &digest,
        size: bytes.len() as u64,
        outcome: Outcome::Fetched,
    });
    let (kind, config, layer) = ours(&digest, &manifest)?;
    if kind != wanted {
        return Err(OciError::WrongKind {
            digest,
            found: kind.noun(),
            wanted: wanted.noun(),
            command: if kind == Kind::Package {
                "store"
            } else {
                "env"
            },
        });
    }
    let mut config_bytes = Vec::new();
    fetch_blob(
        s,
        cfg,
        Role::Config,
        &config,
        MAX_CONFIG_BYTES,
        &mut config_bytes,
        progress,
    )
    .await?;
    Ok(Fetched {
        fetched: vec![digest.clone(), config.digest.clone()],
        digest,
        config_bytes,
        layer,
    })
}

/// Pulls the package `reference` names by digest into `store`: the
/// manifest's digest, each blob's size and digest, then the package hash
/// as `store publish` checks it. A digest pulled before whose package is
/// held makes no request. Blocks.
pub fn pull_package(
    cfg: &RegistryConfig,
    reference: &Reference,
    store: &Store,
    progress: &dyn Progress,
) -> Result<PulledPackage, OciError> {
    let digest = require_digest(reference)?.to_owned();
    if let Some(binding) = held_package(store, reference) {
        report_held(progress, Role::Manifest, &digest, 0);
        return Ok(PulledPackage {
            binding,
            digest,
            fetched: Vec::new(),
        });
    }
    with_timeout(cfg, reference, async {
        let mut s = Session::open(cfg, &reference.registry, &reference.repository, false).await?;
        let mut head = fetch_head(&mut s, cfg, reference, Kind::Package, progress).await?;
        let binding: Binding =
            serde_json::from_slice(&head.config_bytes).map_err(|e| OciError::Config {
                digest: head.digest.clone(),
                noun: "package",
                reason: e.to_string(),
            })?;
        format::check_binding(&binding).map_err(|e| OciError::Config {
            digest: head.digest.clone(),
            noun: "package",
            reason: e.to_string(),
        })?;
        if store.package(&binding.hash).ok().flatten().is_some() {
            // The package's bytes are held (verified when they were
            // published): the layer is not read again.
            report_held(progress, Role::Layer, &head.layer.digest, head.layer.size);
            store.put_binding(&binding)?;
        } else {
            let staging =
                PrivateDir::create(&store.root().join("tmp")).map_err(io_err(store.root()))?;
            let file = fetch_layer(
                &mut s,
                cfg,
                &mut head,
                cfg.max_package_bytes,
                &staging.path,
                progress,
            )
            .await?;
            let limits = &cfg.package_limits;
            let files = artifact::read_package_layer(
                io::BufReader::new(file),
                limits.max_files as u64,
                limits.max_package_bytes,
            )
            .map_err(|source| OciError::Layer {
                digest: head.digest.clone(),
                source,
            })?;
            store
                .publish_files(&binding, &files, limits)
                .map_err(|e| match e {
                    StoreError::Verify(v) => OciError::Verify {
                        digest: head.digest.clone(),
                        noun: "package",
                        reason: v.to_string(),
                    },
                    e => OciError::Store(e),
                })?;
        }
        remember(
            store.root(),
            &head.digest,
            &HeldPackage {
                binding: binding.clone(),
            },
        )?;
        Ok(PulledPackage {
            binding,
            digest: head.digest,
            fetched: head.fetched,
        })
    })
}

/// Pulls the environment `reference` names by digest into `envs`: the
/// manifest's digest, each blob's size and digest, then the environment
/// hash as `env add` computes it. Blocks.
pub fn pull_environment(
    cfg: &RegistryConfig,
    reference: &Reference,
    envs: &EnvStore,
    progress: &dyn Progress,
) -> Result<PulledEnvironment, OciError> {
    let digest = require_digest(reference)?.to_owned();
    if let Some(record) = held_environment(envs, reference) {
        report_held(progress, Role::Manifest, &digest, 0);
        return Ok(PulledEnvironment {
            record,
            digest,
            fetched: Vec::new(),
        });
    }
    with_timeout(cfg, reference, async {
        let mut s = Session::open(cfg, &reference.registry, &reference.repository, false).await?;
        let mut head = fetch_head(&mut s, cfg, reference, Kind::Environment, progress).await?;
        let config: EnvConfig =
            serde_json::from_slice(&head.config_bytes).map_err(|e| OciError::Config {
                digest: head.digest.clone(),
                noun: "environment",
                reason: e.to_string(),
            })?;
        if !reference::is_hex64(&config.hash) {
            return Err(OciError::Config {
                digest: head.digest.clone(),
                noun: "environment",
                reason: format!("hash {:?} is not 64 lowercase hex digits", config.hash),
            });
        }
        let env = EnvRef {
            id: config.id.clone(),
            hash: config.hash.clone(),
        };
        let record = match envs.record(&env) {
            Ok(r) if envs.tree_path(&env.hash).exists() => {
                report_held(progress, Role::Layer, &head.layer.digest, head.layer.size);
                r
            }
            _ => {
                let staging = envs.staging().map_err(io_err(envs.root()))?;
                let file = fetch_layer(
                    &mut s,
                    cfg,
                    &mut head,
                    cfg.max_env_bytes,
                    &staging.path,
                    progress,
                )
                .await?;
                let tree = staging.path.join("tree");
                std::fs::create_dir(&tree).map_err(io_err(&tree))?;
                artifact::extract_env_layer(
                    io::BufReader::new(file),
                    &tree,
                    cfg.env_limits.max_entries,
                )
                .map_err(|source| OciError::Layer {
                    digest: head.digest.clone(),
                    source,
                })?;
                // The tar is not needed once extracted: free its space first.
                let _ = std::fs::remove_file(staging.path.join("layer.tar"));
                envs.add_expecting(
                    &tree,
                    &config.id,
                    config.base.clone(),
                    config.locks.clone(),
                    &cfg.env_limits,
                    &config.hash,
                )
                .map_err(|e| match e {
                    EnvError::Tampered { change, .. } => OciError::Verify {
                        digest: head.digest.clone(),
                        noun: "environment",
                        reason: change,
                    },
                    e => OciError::Env(e),
                })?
                .record
            }
        };
        remember(envs.root(), &head.digest, &env)?;
        Ok(PulledEnvironment {
            record,
            digest: head.digest,
            fetched: head.fetched,
        })
    })
}

/// Sends a blob unless the registry has it.
async fn push_blob(
    s: &mut Session<'_>,
    role: Role,
    digest: &str,
    size: u64,
    body: impl FnOnce() -> Result<ReqBody, OciError>,
    progress: &dyn Progress,
) -> Result<(), OciError> {
    let url = s.repo_url(&format!("blobs/{digest}"));
    let head = s.send(Method::HEAD, &url, &[], ReqBody::Empty).await?;
    if head.status().is_success() {
        progress.event(Event::Done {
            role,
            digest,
            size,
            outcome: Outcome::Present,
        });
        return Ok(());
    }
    progress.event(Event::Start { role, digest, size });
    let start = s.repo_url("blobs/uploads/");
    let resp = s.send(Method::POST, &start, &[], ReqBody::Empty).await?;
    if resp.status().as_u16() != 202 {
        return Err(OciError::Status {
            url: format!("{}{}", s.registry, start.path),
            status: resp.status().as_u16(),
            doing: "starting a blob upload",
        });
    }
    let location = resp
        .headers()
        .get(hyper::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|l| start.join(l))
        .ok_or_else(|| OciError::Status {
            url: format!("{}{}", s.registry, start.path),
            status: 202,
            doing: "starting a blob upload (no usable Location)",
        })?;
    let sep = if location.path.contains('?') {
        '&'
    } else {
        '?'
    };
    let put = client::Url {
        path: format!(
            "{}{sep}digest={}",
            location.path,
            digest.replace(':', "%3A")
        ),
        ..location
    };
    let resp = s
        .send(
            Method::PUT,
            &put,
            &[("content-type", "application/octet-stream".to_owned())],
            body()?,
        )
        .await?;
    if resp.status().as_u16() != 201 {
        return Err(OciError::Status {
            url: format!("{}/v2/{}/blobs/uploads/…", s.registry, s.repository),
            status: resp.status().as_u16(),
            doing: "finishing a blob upload",
        });
    }
    progress.event(Event::Done {
        role,
        digest,
        size,
        outcome: Outcome::Pushed,
    });
    Ok(())
}

/// A layer written to a staging file: its path, digest and size.
struct Layer {
    path: PathBuf,
    digest: String,
    size: u64,
}

#[allow(clippy::too_many_arguments)]
async fn push_artifact(
    cfg: &RegistryConfig,
    reference: &Reference,
    kind: Kind,
    config: Vec<u8>,
    layer: &Layer,
    progress: &dyn Progress,
) -> Result<Reference, OciError> {
    let mut s = Session::open(cfg, &reference.registry, &reference.repository, true).await?;
    let manifest = artifact::manifest(kind, &config, &layer.digest, layer.size);
    let manifest_digest = artifact::digest_of(&manifest);
    let config_digest = artifact::digest_of(&config);
    let size = config.len() as u64;
    push_blob(
        &mut s,
        Role::Config,
        &config_digest,
        size,
        || Ok(ReqBody::Bytes(config.into())),
        progress,
    )
    .await?;
    push_blob(
        &mut s,
        Role::Layer,
        &layer.digest,
        layer.size,
        || {
            let file = std::fs::File::open(&layer.path).map_err(io_err(&layer.path))?;
            Ok(ReqBody::File {
                file: tokio::fs::File::from_std(file),
                left: layer.size,
            })
        },
        progress,
    )
    .await?;
    let name = reference
        .tag
        .clone()
        .unwrap_or_else(|| manifest_digest.clone());
    let url = s.repo_url(&format!("manifests/{name}"));
    let size = manifest.len() as u64;
    progress.event(Event::Start {
        role: Role::Manifest,
        digest: &manifest_digest,
        size,
    });
    let resp = s
        .send(
            Method::PUT,
            &url,
            &[("content-type", artifact::MANIFEST_MEDIA_TYPE.to_owned())],
            ReqBody::Bytes(manifest.into()),
        )
        .await?;
    if resp.status().as_u16() != 201 {
        return Err(OciError::Status {
            url: format!("{}{}", s.registry, url.path),
            status: resp.status().as_u16(),
            doing: "putting the manifest",
        });
    }
    progress.event(Event::Done {
        role: Role::Manifest,
        digest: &manifest_digest,
        size,
        outcome: Outcome::Pushed,
    });
    Ok(reference.at_digest(&manifest_digest))
}

fn push_target(reference: &Reference) -> Result<(), OciError> {
    if reference.digest.is_some() {
        return Err(OciError::PushDigest {
            reference: reference.to_string(),
        });
    }
    Ok(())
}

/// Writes the layer of `entries` into `dir/layer.tar`, hashing it.
fn stage_layer<'a>(
    dir: &Path,
    entries: impl IntoIterator<Item = artifact::Entry<'a>>,
) -> Result<Layer, OciError> {
    let path = dir.join("layer.tar");
    let file = std::fs::File::create(&path).map_err(io_err(&path))?;
    let out = artifact::write_layer(artifact::Hashing::new(io::BufWriter::new(file)), entries)
        .map_err(io_err(&path))?;
    let (digest, size) = out.finish().map_err(io_err(&path))?;
    Ok(Layer { path, digest, size })
}

/// The config blob of a package: its binding, fields in a fixed order.
pub fn package_config(binding: &Binding) -> Vec<u8> {
    serde_json::to_vec(binding).expect("a binding serializes")
}

/// Pushes the stored package `binding` to `reference` (a tag, or the
/// repository alone); returns the reference by manifest digest. The
/// package is re-checked against its hash first: a changed store copy is
/// never sent. Blocks.
pub fn push_package(
    cfg: &RegistryConfig,
    reference: &Reference,
    store: &Store,
    binding: &Binding,
    progress: &dyn Progress,
) -> Result<Reference, OciError> {
    push_target(reference)?;
    let package = store.resolve(binding)?;
    crate::package::verify::verify_tree(
        &package.tree,
        binding,
        &cfg.package_limits,
        Some(&package.file_hashes()),
    )
    .map_err(StoreError::Verify)?;
    let staging = PrivateDir::create(&store.root().join("tmp")).map_err(io_err(store.root()))?;
    let mut readers = Vec::new();
    for f in &package.files {
        let p = package.tree.join(&f.path);
        readers.push(std::fs::File::open(&p).map_err(io_err(&p))?);
    }
    let entries = package
        .files
        .iter()
        .zip(readers)
        .map(|(f, r)| artifact::Entry::File {
            path: &f.path,
            exec: false,
            size: f.size,
            reader: Box::new(r) as Box<dyn Read>,
        });
    let layer = stage_layer(&staging.path, entries)?;
    with_timeout(
        cfg,
        reference,
        push_artifact(
            cfg,
            reference,
            Kind::Package,
            package_config(binding),
            &layer,
            progress,
        ),
    )
}

/// Pushes the stored environment `env` to `reference`; returns the
/// reference by manifest digest. The tree is re-hashed first. Blocks.
pub fn push_environment(
    cfg: &RegistryConfig,
    reference: &Reference,
    envs: &EnvStore,
    env: &EnvRef,
    progress: &dyn Progress,
) -> Result<Reference, OciError> {
    push_target(reference)?;
    let record = envs.record(env)?;
    let manifest = envs.verify(&env.hash)?;
    let tree = envs.tree_path(&env.hash);
    let staging = envs.staging().map_err(io_err(envs.root()))?;
    let mut entries = Vec::new();
    for e in &manifest.entries {
        if e.kind == "symlink" {
            entries.push(artifact::Entry::Symlink {
                path: &e.path,
                target: e.target.as_deref().unwrap_or(""),
            });
        } else {
            let p = tree.join(&e.path);
            let f = std::fs::File::open(&p).map_err(io_err(&p))?;
            entries.push(artifact::Entry::File {
                path: &e.path,
                exec: e.kind == "exec",
                size: e.size.unwrap_or(0),
                reader: Box::new(f),
            });
        }
    }
    let layer = stage_layer(&staging.path, entries)?;
    let config = EnvConfig {
        id: record.id.clone(),
        hash: record.hash.clone(),
        base: record.base.clone(),
        locks: record.locks.clone(),
    };
    let config = serde_json::to_vec(&config).expect("a config serializes");
    with_timeout(
        cfg,
        reference,
        push_artifact(cfg, reference, Kind::Environment, config, &layer, progress),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_configs_are_read_by_host_from_auth_or_username_and_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:pa:ss");
        std::fs::write(
            &path,
            format!(
                r#"{{"auths":{{"https://Reg.Example/v1/":{{"auth":"{b64}"}},
                   "127.0.0.1:5000":{{"username":"bob","password":"pw"}},
                   "helper.example":{{}}}},"credsStore":"desktop"}}"#
            ),
        )
        .unwrap();
        let cfg = RegistryConfig::load(Some(&path), &[], &["127.0.0.1:5000".into()]).unwrap();
        assert_eq!(
            cfg.credentials("reg.example"),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(
            cfg.credentials("127.0.0.1:5000"),
            Some(("bob".into(), "pw".into()))
        );
        assert_eq!(cfg.credentials("helper.example"), None);
        assert!(cfg.is_insecure("127.0.0.1:5000") && !cfg.is_insecure("reg.example"));
        std::fs::write(&path, r#"{"auths":{"h":{"auth":"not base64!"}}}"#).unwrap();
        let e = RegistryConfig::load(Some(&path), &[], &[]).unwrap_err();
        assert!(e.to_string().contains("auths.h.auth is not base64"), "{e}");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let e = RegistryConfig::load(Some(&path), &[ca], &[]).unwrap_err();
        assert!(e.to_string().starts_with("registry"), "{e}");
    }
}
