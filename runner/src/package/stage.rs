//! Staging: building a per-execution snapshot root and proving its bytes.
//!
//! A snapshot root holds one folder per selected skill id and the manifest
//! `.sciencediscovery-snapshot.json` (docs/formats.md). It is built inside the
//! runner's private execution folder, never shared, and it is returned only
//! after the staged copy itself was hashed and matched the pins:
//!
//! - from a host folder, the copy runs in the kernel (`copy_file_range`)
//!   while a second thread hashes the *staged* bytes right behind it, so
//!   each source byte is read once, both cores work, and what is verified
//!   is what the sandbox will see (invariants 2 and 4: an edit during the
//!   copy gives a mix that cannot match the pin, so it is refused);
//! - from the store or a bundle, the files are copied or written, then the
//!   staged tree is walked and re-hashed ([`verify_tree`]).
//!
//! Either way the exact file set is checked (no extra file, no symlink), the
//! tree is sealed (files 0444, folders 0555) and on any error the partial
//! root is removed before the error is returned (invariant 5).

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

use crate::fsx;
use crate::package::bundle::BundleSkill;
use crate::package::format::{self, PackageLimits, SKILL_MD};
use crate::package::hash::{set_identity, Binding, PackageHasher};
use crate::package::source::{self, ListedFile};
use crate::package::store::StoredPackage;
pub use crate::package::verify::StageError;
use crate::package::verify::{read_buffer, verify_tree, HashBehindError, Staged};

/// File name of the manifest inside the snapshot root.
pub const MANIFEST_NAME: &str = ".sciencediscovery-snapshot.json";
/// Where the snapshot root appears inside the Linux sandbox.
pub const SANDBOX_SKILLS_DIR: &str = "/skills";

/// Where one selected skill's bytes come from.
#[derive(Debug, Clone)]
pub enum SkillSource {
    /// A package folder on the host, hashed as it is copied.
    Dir(PathBuf),
    /// A verified bundle held in memory.
    Bundle(std::sync::Arc<BundleSkill>),
    /// A package published in the store.
    Store(StoredPackage),
}

/// One entry of a selection: the pin, and where to get the bytes.
#[derive(Debug, Clone)]
pub struct Selected {
    pub binding: Binding,
    pub source: SkillSource,
}

/// The manifest (docs/formats.md). Field order is the serialized key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub schema_version: u32,
    pub skills: Vec<ManifestSkill>,
}

/// One skill in the manifest; field order is the serialized key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSkill {
    pub hash: String,
    pub id: String,
    pub path: String,
    pub revision: u64,
    pub version: String,
}

impl Manifest {
    /// The manifest for a selection: skills sorted by id, logical paths.
    pub fn for_bindings(bindings: &[Binding]) -> Manifest {
        let mut skills: Vec<ManifestSkill> = bindings
            .iter()
            .map(|b| ManifestSkill {
                hash: b.hash.clone(),
                id: b.id.clone(),
                path: format!("{SANDBOX_SKILLS_DIR}/{}", b.id),
                revision: b.revision,
                version: b.version.clone(),
            })
            .collect();
        skills.sort_by(|a, b| a.id.as_bytes().cmp(b.id.as_bytes()));
        Manifest {
            schema_version: 1,
            skills,
        }
    }

    /// Exact text: two-space indent, one trailing newline.
    pub fn to_text(&self) -> String {
        // Strings and integers always serialize.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// A staged, verified snapshot root.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Host path of the snapshot root (sealed, 0555).
    pub root: PathBuf,
    pub manifest: Manifest,
    /// Set identity of the selection.
    pub identity: String,
    /// Non-fatal findings (front matter name ≠ id, unknown keys).
    pub warnings: Vec<String>,
    /// Bytes staged, all skills together.
    pub bytes: u64,
}

/// A selection whose pins were checked (valid bindings, no id twice),
/// with its set identity and manifest, computed once: publishing looks a
/// root up by them and staging writes them, so the two cannot disagree.
#[derive(Debug, Clone)]
pub struct Selection<'a> {
    selected: &'a [Selected],
    bindings: Vec<Binding>,
    identity: String,
    manifest: Manifest,
}

impl<'a> Selection<'a> {
    /// Checks the pins of `selected`.
    pub fn check(selected: &'a [Selected]) -> Result<Selection<'a>, StageError> {
        let mut bindings: Vec<Binding> = Vec::with_capacity(selected.len());
        for s in selected {
            format::check_binding(&s.binding).map_err(|source| StageError::Binding {
                id: s.binding.id.clone(),
                source,
            })?;
            if bindings.iter().any(|b| b.id == s.binding.id) {
                return Err(StageError::DuplicateId {
                    id: s.binding.id.clone(),
                });
            }
            bindings.push(s.binding.clone());
        }
        Ok(Selection {
            selected,
            identity: set_identity(&bindings),
            manifest: Manifest::for_bindings(&bindings),
            bindings,
        })
    }

    /// The skills and where their bytes come from, in the job's order.
    pub fn selected(&self) -> &'a [Selected] {
        self.selected
    }

    /// The pins, in the job's order.
    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// The set identity ([`set_identity`]).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The manifest the snapshot root carries.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// Stages a checked selection into a new snapshot root at `root` (which
/// must not exist). On error nothing is left at `root`.
pub fn stage(
    selection: &Selection<'_>,
    root: &Path,
    limits: &PackageLimits,
) -> Result<Snapshot, StageError> {
    let result = stage_inner(selection, root, limits);
    if result.is_err() {
        let _ = fsx::remove_tree(root);
    }
    result
}

fn stage_inner(
    selection: &Selection<'_>,
    root: &Path,
    limits: &PackageLimits,
) -> Result<Snapshot, StageError> {
    let root_err = |source| StageError::Root {
        path: root.to_owned(),
        source,
    };
    fs::create_dir(root).map_err(root_err)?;
    fsx::chmod(root, 0o700).map_err(root_err)?;

    let mut warnings = Vec::new();
    let mut bytes = 0;
    for s in selection.selected() {
        let id = &s.binding.id;
        let dst = root.join(id);
        let staged = match &s.source {
            SkillSource::Dir(src) => stage_dir(src, &dst, &s.binding, limits)?,
            SkillSource::Bundle(b) => {
                write_files(
                    id,
                    &dst,
                    b.files.iter().map(|f| (&f.path[..], &f.bytes[..])),
                )?;
                verify_tree(&dst, &s.binding, limits, Some(&b.file_hashes()))?
            }
            // The store verified these bytes when it took them: a copy
            // that no longer matches is the host's fault, not the pin's.
            SkillSource::Store(p) => copy_tree(id, &p.tree, &dst, &p.files)
                .and_then(|()| verify_tree(&dst, &s.binding, limits, Some(&p.file_hashes())))
                .map_err(|e| store_corrupted(e, &p.hash))?,
        };
        bytes += staged.bytes;
        let md = fs::read(dst.join(SKILL_MD)).map_err(|source| StageError::Io {
            id: id.clone(),
            path: SKILL_MD.into(),
            source,
        })?;
        let doc = format::parse_skill_md(&md).map_err(|source| StageError::List {
            id: id.clone(),
            source: source.into(),
        })?;
        warnings.extend(
            doc.warnings(Some(id))
                .into_iter()
                .map(|w| format!("skill {id:?}: {w}")),
        );
    }

    let manifest_path = root.join(MANIFEST_NAME);
    fs::write(&manifest_path, selection.manifest().to_text()).map_err(root_err)?;
    fsx::seal_tree(root).map_err(root_err)?;
    Ok(Snapshot {
        root: root.to_owned(),
        manifest: selection.manifest().clone(),
        identity: selection.identity().to_owned(),
        warnings,
        bytes,
    })
}

/// A failure to stage a stored package, as the store's fault where it is:
/// bytes or files that no longer match what the store verified, or a file
/// of its index missing from its tree.
fn store_corrupted(e: StageError, hash: &str) -> StageError {
    match e {
        StageError::HashMismatch { id, file, .. } => StageError::StoreCorrupted {
            id,
            hash: hash.to_owned(),
            reason: match file {
                Some(f) => format!("file {f:?} changed"),
                None => "its bytes changed".into(),
            },
        },
        StageError::FileSet { id, reason } | StageError::Changed { id, path: reason } => {
            StageError::StoreCorrupted {
                id,
                hash: hash.to_owned(),
                reason,
            }
        }
        StageError::Io { id, path, source } if source.kind() == io::ErrorKind::NotFound => {
            StageError::StoreCorrupted {
                id,
                hash: hash.to_owned(),
                reason: format!("file {path:?} is missing"),
            }
        }
        other => other,
    }
}

/// Progress events from the copying thread to the hashing thread.
enum Copied {
    /// File `index` of the listing now exists in the staging folder with
    /// this size (as `fstat` saw the source when it was opened).
    Begin { index: usize, size: u64 },
    /// The first `upto` bytes of the current file are in place.
    Upto(u64),
}

/// Copies a package folder into `dst` while hashing the staged bytes.
fn stage_dir(
    src: &Path,
    dst: &Path,
    binding: &Binding,
    limits: &PackageLimits,
) -> Result<Staged, StageError> {
    let id = &binding.id;
    let listing = source::list_dir(src, limits).map_err(|source| StageError::List {
        id: id.clone(),
        source,
    })?;
    let src_root = fsx::open_dir_nofollow(src).map_err(|source| StageError::Io {
        id: id.clone(),
        path: src.display().to_string(),
        source,
    })?;
    fs::create_dir(dst).map_err(|source| StageError::Io {
        id: id.clone(),
        path: String::new(),
        source,
    })?;

    let total: u64 = listing.iter().map(|f| f.size).sum();
    let (bytes, actual) = if total < INLINE_HASH_BYTES {
        // Small packages: a second thread costs more than it saves.
        let (tx, rx) = mpsc::channel::<Copied>();
        let bytes = copy_listing(id, &src_root, dst, &listing, |e| tx.send(e).is_ok())?;
        drop(tx);
        let actual = hash_behind(dst, &listing, rx).map_err(|e| e.for_skill(id))?;
        (bytes, actual)
    } else {
        let (tx, rx) = mpsc::sync_channel::<Copied>(256);
        let (copy_result, hash_result) = std::thread::scope(|scope| {
            let hasher = scope.spawn(|| hash_behind(dst, &listing, rx));
            let copied = copy_listing(id, &src_root, dst, &listing, |e| tx.send(e).is_ok());
            drop(tx);
            (copied, hasher.join())
        });
        let bytes = copy_result?;
        let actual = match hash_result {
            Ok(r) => r.map_err(|e| e.for_skill(id))?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (bytes, actual)
    };
    if actual != binding.hash {
        return Err(StageError::HashMismatch {
            id: id.clone(),
            expected: binding.hash.clone(),
            actual,
            file: None,
        });
    }
    check_file_set(id, dst, &listing, limits)?;
    Ok(Staged { bytes })
}

/// Below this many bytes a package is copied, then hashed, on one thread.
const INLINE_HASH_BYTES: u64 = 4 << 20;

/// Copies the listed files, reporting progress through `send` (false: the
/// hasher has stopped, so stop copying).
fn copy_listing(
    id: &str,
    src_root: &File,
    dst: &Path,
    listing: &[ListedFile],
    mut send: impl FnMut(Copied) -> bool,
) -> Result<u64, StageError> {
    let io_err = |path: &str, source| StageError::Io {
        id: id.to_owned(),
        path: path.to_owned(),
        source,
    };
    let mut total = 0;
    for (index, f) in listing.iter().enumerate() {
        let src = fsx::open_beneath(src_root, &f.path).map_err(|e| io_err(&f.path, e))?;
        let meta = src.metadata().map_err(|e| io_err(&f.path, e))?;
        if !meta.is_file() || meta.len() != f.size {
            return Err(StageError::Changed {
                id: id.to_owned(),
                path: f.path.clone(),
            });
        }
        let target = dst.join(&f.path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err(&f.path, e))?;
        }
        let out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&target)
            .map_err(|e| io_err(&f.path, e))?;
        // A hasher that stopped early has an error to report; keep copying
        // is pointless then, so a send failure ends the copy quietly.
        if !send(Copied::Begin {
            index,
            size: f.size,
        }) {
            break;
        }
        let copied = fsx::copy_fd(&src, &out, f.size, |upto| {
            send(Copied::Upto(upto));
        })
        .map_err(|e| io_err(&f.path, e))?;
        if copied != f.size {
            return Err(StageError::Changed {
                id: id.to_owned(),
                path: f.path.clone(),
            });
        }
        total += copied;
    }
    Ok(total)
}

/// Hashes the staged files as the copier reports progress.
fn hash_behind(
    dst: &Path,
    listing: &[ListedFile],
    rx: mpsc::Receiver<Copied>,
) -> Result<String, HashBehindError> {
    let mut hasher = PackageHasher::new();
    let mut buf = read_buffer(listing);
    let mut current: Option<(File, u64, &str)> = None;
    for event in rx {
        match event {
            Copied::Begin { index, size } => {
                let path = &listing[index].path;
                let file =
                    File::open(dst.join(path)).map_err(|e| HashBehindError::Io(path.clone(), e))?;
                hasher
                    .begin_file(path, size)
                    .map_err(HashBehindError::Hash)?;
                current = Some((file, 0, path));
            }
            Copied::Upto(upto) => {
                let Some((file, done, path)) = current.as_mut() else {
                    continue;
                };
                while *done < upto {
                    let want = ((upto - *done) as usize).min(buf.len());
                    let n = file
                        .read(&mut buf[..want])
                        .map_err(|e| HashBehindError::Io(path.to_string(), e))?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]).map_err(HashBehindError::Hash)?;
                    *done += n as u64;
                }
            }
        }
    }
    hasher.finish().map_err(HashBehindError::Hash)
}

/// Checks that the staged folder holds exactly the listed files, all
/// regular, with their listed sizes: nothing extra, nothing missing.
fn check_file_set(
    id: &str,
    dst: &Path,
    expected: &[ListedFile],
    limits: &PackageLimits,
) -> Result<(), StageError> {
    let staged = source::list_dir(dst, limits).map_err(|e| StageError::FileSet {
        id: id.to_owned(),
        reason: e.to_string(),
    })?;
    if staged != expected {
        let extra = staged.iter().find(|f| !expected.contains(f));
        let missing = expected.iter().find(|f| !staged.contains(f));
        return Err(StageError::FileSet {
            id: id.to_owned(),
            reason: match (extra, missing) {
                (Some(f), _) => format!("unexpected file {:?}", f.path),
                (_, Some(f)) => format!("missing file {:?}", f.path),
                _ => "the file lists differ".into(),
            },
        });
    }
    Ok(())
}

/// Writes in-memory files into a new folder `dst`.
fn write_files<'a>(
    id: &str,
    dst: &Path,
    files: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Result<(), StageError> {
    let io_err = |path: &str, source| StageError::Io {
        id: id.to_owned(),
        path: path.to_owned(),
        source,
    };
    fs::create_dir(dst).map_err(|e| io_err("", e))?;
    for (path, bytes) in files {
        let target = dst.join(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err(path, e))?;
        }
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&target)
            .map_err(|e| io_err(path, e))?;
        io::Write::write_all(&mut out, bytes).map_err(|e| io_err(path, e))?;
    }
    Ok(())
}

/// Copies a stored tree into `dst`. Never hard links: a published root
/// must share no inode with the store, so that nothing that could reach a
/// root's files could reach the store's (the copy is in-kernel, and a
/// reflink where the file system has them). The copies are re-hashed by
/// [`verify_tree`].
fn copy_tree(
    id: &str,
    tree: &Path,
    dst: &Path,
    files: &[crate::package::store::IndexEntry],
) -> Result<(), StageError> {
    let io_err = |path: &str, source| StageError::Io {
        id: id.to_owned(),
        path: path.to_owned(),
        source,
    };
    fs::create_dir(dst).map_err(|e| io_err("", e))?;
    for f in files {
        let from = tree.join(&f.path);
        let to = dst.join(&f.path);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err(&f.path, e))?;
        }
        fs::copy(&from, &to).map_err(|e| io_err(&f.path, e))?;
    }
    Ok(())
}
