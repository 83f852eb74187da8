//! The artifact format (docs/formats.md, "OCI artifacts"): an OCI image
//! manifest with the project's `artifactType`, a config blob that is the
//! binding (or the environment's record), and the content as ONE
//! deterministic tar layer: entries in hash order, mtime 0, uid/gid 0,
//! modes 0644 (0755 for an executable file), no user or group names, so
//! the same package always gives the same three digests. Pure but for the
//! tar reader, which writes only below a folder it is given.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's media type (an OCI image manifest).
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// `artifactType` of a package.
pub const PACKAGE_ARTIFACT: &str = "application/vnd.skill-runner.package.v1";
/// The config blob of a package: its binding as JSON.
pub const PACKAGE_CONFIG: &str = "application/vnd.skill-runner.package.config.v1+json";
/// The layer of a package: a tar of its files.
pub const PACKAGE_LAYER: &str = "application/vnd.skill-runner.package.layer.v1.tar";
/// `artifactType` of an environment.
pub const ENV_ARTIFACT: &str = "application/vnd.skill-runner.environment.v1";
/// The config blob of an environment: `{id, hash, base, locks}`.
pub const ENV_CONFIG: &str = "application/vnd.skill-runner.environment.config.v1+json";
/// The layer of an environment: a tar of its files and symlinks.
pub const ENV_LAYER: &str = "application/vnd.skill-runner.environment.layer.v1.tar";
/// The annotation naming the layer's file (what `oras pull` writes).
pub const TITLE: &str = "org.opencontainers.image.title";

/// What an artifact carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Package,
    Environment,
}

impl Kind {
    pub fn artifact_type(self) -> &'static str {
        match self {
            Kind::Package => PACKAGE_ARTIFACT,
            Kind::Environment => ENV_ARTIFACT,
        }
    }
    pub fn config_type(self) -> &'static str {
        match self {
            Kind::Package => PACKAGE_CONFIG,
            Kind::Environment => ENV_CONFIG,
        }
    }
    pub fn layer_type(self) -> &'static str {
        match self {
            Kind::Package => PACKAGE_LAYER,
            Kind::Environment => ENV_LAYER,
        }
    }
    pub fn layer_title(self) -> &'static str {
        match self {
            Kind::Package => "package.tar",
            Kind::Environment => "environment.tar",
        }
    }
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Package => "package",
            Kind::Environment => "environment",
        }
    }
    /// The kind a config media type names.
    pub fn of_config(media_type: &str) -> Option<Kind> {
        match media_type {
            PACKAGE_CONFIG => Some(Kind::Package),
            ENV_CONFIG => Some(Kind::Environment),
            _ => None,
        }
    }
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// An OCI image manifest, as much of it as an artifact uses (unknown
/// fields are ignored, as the image spec asks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// `sha256:` and the hex SHA-256 of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// The manifest of an artifact of `kind` with this config and layer.
pub fn manifest(kind: Kind, config: &[u8], layer_digest: &str, layer_size: u64) -> Vec<u8> {
    let m = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        artifact_type: Some(kind.artifact_type().into()),
        config: Descriptor {
            media_type: kind.config_type().into(),
            digest: digest_of(config),
            size: config.len() as u64,
            annotations: None,
        },
        layers: vec![Descriptor {
            media_type: kind.layer_type().into(),
            digest: layer_digest.into(),
            size: layer_size,
            annotations: Some(BTreeMap::from([(
                TITLE.to_owned(),
                kind.layer_title().to_owned(),
            )])),
        }],
    };
    serde_json::to_vec(&m).expect("a manifest serializes")
}

/// One entry a layer is written from.
#[allow(missing_debug_implementations)]
pub enum Entry<'a> {
    File {
        path: &'a str,
        exec: bool,
        size: u64,
        reader: Box<dyn Read + 'a>,
    },
    Symlink {
        path: &'a str,
        target: &'a str,
    },
}

/// A writer that hashes and counts what passes through it.
#[derive(Debug)]
pub struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    pub written: u64,
}

impl<W: Write> Hashing<W> {
    pub fn new(inner: W) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }
    /// The digest and size of what was written.
    pub fn finish(mut self) -> io::Result<(String, u64)> {
        self.inner.flush()?;
        Ok((format!("sha256:{:x}", self.hasher.finalize()), self.written))
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// Writes the deterministic tar of `entries` (already in hash order) to
/// `out`.
pub fn write_layer<'a, W: Write>(
    out: W,
    entries: impl IntoIterator<Item = Entry<'a>>,
) -> io::Result<W> {
    let mut b = tar::Builder::new(out);
    b.mode(tar::HeaderMode::Deterministic);
    for e in entries {
        match e {
            Entry::File {
                path,
                exec,
                size,
                reader,
            } => {
                let mut h = header(
                    tar::EntryType::Regular,
                    if exec { 0o755 } else { 0o644 },
                    size,
                );
                b.append_data(&mut h, path, reader.take(size))?;
            }
            Entry::Symlink { path, target } => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                b.append_link(&mut h, path, target)?;
            }
        }
    }
    b.into_inner()
}

/// Why a layer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("the layer is not a readable tar: {0}")]
    Tar(#[from] io::Error),
    #[error("the layer's entry {path:?} is a {kind}; a {noun} layer holds only {allowed}")]
    EntryKind {
        path: String,
        kind: String,
        noun: &'static str,
        allowed: &'static str,
    },
    #[error("the layer's entry {path:?} is not a relative UTF-8 path inside the tree")]
    BadPath { path: String },
    #[error("the layer holds {path:?} twice, or below a symlink")]
    Duplicate { path: String },
    #[error("the layer holds more than {limit} entries")]
    TooMany { limit: u64 },
    #[error("the layer's files hold more than {limit} bytes")]
    TooLarge { limit: u64 },
}

/// A file of a package layer.
pub type PackageFile = (String, Vec<u8>);

/// The files of a package layer, read into memory within `max_files` and
/// `max_bytes` (the package limits; their exact checks, and the hash,
/// are the store's on publish).
pub fn read_package_layer<R: Read>(
    layer: R,
    max_files: u64,
    max_bytes: u64,
) -> Result<Vec<PackageFile>, LayerError> {
    let mut archive = tar::Archive::new(layer);
    let mut files = Vec::new();
    let mut seen = HashSet::new();
    let mut total = 0u64;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry_path(&entry)?;
        match entry.header().entry_type() {
            tar::EntryType::Directory => continue,
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            other => {
                return Err(LayerError::EntryKind {
                    path,
                    kind: format!("{other:?}").to_lowercase(),
                    noun: "package",
                    allowed: "regular files",
                })
            }
        }
        if files.len() as u64 >= max_files {
            return Err(LayerError::TooMany { limit: max_files });
        }
        if !seen.insert(path.clone()) {
            return Err(LayerError::Duplicate { path });
        }
        let size = entry.header().size()?;
        total = total.saturating_add(size);
        if total > max_bytes {
            return Err(LayerError::TooLarge { limit: max_bytes });
        }
        let mut bytes = Vec::with_capacity(size.min(1 << 20) as usize);
        (&mut entry).take(size).read_to_end(&mut bytes)?;
        files.push((path, bytes));
    }
    Ok(files)
}

/// Extracts an environment layer below `root` (an empty folder of the
/// caller's): files (0755 when the tar says executable, 0644 otherwise)
/// and symlinks, folders made as needed; nothing is ever written through a
/// symlink, and a path twice is refused. The tree's own checks (targets,
/// limits, hash) are the environment store's on publish.
pub fn extract_env_layer<R: Read>(
    layer: R,
    root: &Path,
    max_entries: u64,
) -> Result<(), LayerError> {
    use std::os::unix::fs::{symlink, OpenOptionsExt};
    let mut archive = tar::Archive::new(layer);
    let mut seen: HashSet<String> = HashSet::new();
    let mut links: HashSet<String> = HashSet::new();
    let mut count = 0u64;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry_path(&entry)?;
        count += 1;
        if count > max_entries {
            return Err(LayerError::TooMany { limit: max_entries });
        }
        let kind = entry.header().entry_type();
        if kind == tar::EntryType::Directory {
            continue;
        }
        // No entry below a symlink, and none twice.
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() {
                if links.contains(&prefix) {
                    return Err(LayerError::Duplicate { path });
                }
                prefix.push('/');
            }
            prefix.push_str(part);
        }
        if !seen.insert(path.clone()) {
            return Err(LayerError::Duplicate { path });
        }
        let target = root.join(&path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let exec = entry.header().mode()? & 0o111 != 0;
                let size = entry.header().size()?;
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(if exec { 0o755 } else { 0o644 })
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&target)?;
                io::copy(&mut (&mut entry).take(size), &mut f)?;
            }
            tar::EntryType::Symlink => {
                let to = entry
                    .link_name()?
                    .ok_or_else(|| LayerError::BadPath { path: path.clone() })?;
                symlink(&to, &target)?;
                links.insert(path);
            }
            other => {
                return Err(LayerError::EntryKind {
                    path,
                    kind: format!("{other:?}").to_lowercase(),
                    noun: "environment",
                    allowed: "regular files, folders and symlinks",
                })
            }
        }
    }
    Ok(())
}

fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> Result<String, LayerError> {
    let raw = entry.path_bytes();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let path = text.trim_end_matches('/').to_owned();
    let ok = std::str::from_utf8(&raw).is_ok()
        && !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..");
    if ok {
        Ok(path)
    } else {
        Err(LayerError::BadPath { path: text })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
        write_layer(
            Vec::new(),
            files.iter().map(|(p, b)| Entry::File {
                path: p,
                exec: false,
                size: b.len() as u64,
                reader: Box::new(*b),
            }),
        )
        .unwrap()
    }

    #[test]
    fn the_same_files_give_the_same_bytes() {
        let a = layer(&[("SKILL.md", b"---\nname: a\n---\n"), ("x/y.txt", b"y")]);
        let b = layer(&[("SKILL.md", b"---\nname: a\n---\n"), ("x/y.txt", b"y")]);
        assert_eq!(digest_of(&a), digest_of(&b));
        let files = read_package_layer(&a[..], 10, 1 << 20).unwrap();
        assert_eq!(files[1], ("x/y.txt".to_owned(), b"y".to_vec()));
    }

    #[test]
    fn a_package_layer_with_a_symlink_or_a_path_twice_is_refused() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        b.append_link(&mut h, "SKILL.md", "/etc/passwd").unwrap();
        let e = read_package_layer(&b.into_inner().unwrap()[..], 10, 100).unwrap_err();
        assert!(e.to_string().contains("only regular files"), "{e}");
        let twice = layer(&[("a", b"1"), ("a", b"2")]);
        assert!(matches!(
            read_package_layer(&twice[..], 10, 100),
            Err(LayerError::Duplicate { .. })
        ));
    }

    #[test]
    fn an_env_layer_never_writes_through_its_own_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        b.append_link(&mut h, "lib", outside.path()).unwrap();
        let mut h = header(tar::EntryType::Regular, 0o644, 1);
        b.append_data(&mut h, "lib/planted", &b"x"[..]).unwrap();
        let root = dir.path().join("tree");
        fs::create_dir(&root).unwrap();
        let e = extract_env_layer(&b.into_inner().unwrap()[..], &root, 10).unwrap_err();
        assert!(matches!(e, LayerError::Duplicate { .. }), "{e}");
        assert!(!outside.path().join("planted").exists());
    }
}
