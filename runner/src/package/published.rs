//! Published snapshot roots: one verified, immutable snapshot root per set
//! identity, shared read-only by every execution of that selection.
//!
//! Anything shared between concurrent executions must be immutable once
//! published or private to one execution (docs/packages.md). Staging the same selection again for every
//! execution costs a copy, a full re-hash and a dozen inode operations each
//! time (and for large packages, most of the execution's time), so roots are
//! published and reused:
//!
//! ```text
//! <data>/published/<identity>/skills/…      the snapshot root and manifest, sealed
//! <data>/published/<identity>/meta.json     bytes and staging warnings
//! <data>/published/<identity>/stamp         the stamps of skills/ and meta.json
//! <data>/published/.staging/<random>[.lock] roots being staged (private)
//! ```
//!
//! Nothing here is ever a job's folder: the runner refuses a workspace,
//! extensions dir or skill path inside its data dir (but for the daemon's
//! job root `<data>/roots`) or above it (see `exec`), and mounts a root
//! read-only from a descriptor. Still, the folder is treated as hostile
//! input: only names the runner makes (64 hex digits) count as roots, the
//! record is opened without following symlinks and only as a regular file
//! of bounded size, trees are deleted through directory handles
//! ([`fsx::remove_tree`]) so no rename race can redirect a deletion, and a
//! root shares no inode with the store (files are copied, not linked), so
//! a damaged root could never damage the store.
//!
//! - A root is staged and verified by [`crate::package::stage::stage`] in a private
//!   folder, exactly as before, and only then renamed to its identity: a
//!   crash at any moment leaves a private folder the next sweep removes,
//!   never a partial root under a published name (invariant 5).
//! - The identity covers every pin (id, revision, version, hash), so a root
//!   holds exactly the pinned bytes; a source folder is not read again once
//!   its pinned bytes are published (invariant 4 holds trivially).
//! - Files are 0444 and folders 0555 on the host, and the sandbox sees the
//!   root through a read-only bind (invariant 3), so no execution can change
//!   what the next one sees.
//! - An execution holds a shared `flock` on its root's folder from lookup
//!   until it ends. Eviction takes the exclusive lock without waiting,
//!   renames the root away, then deletes it, so a root in use is never
//!   removed, and a lookup that races with an eviction notices (the name no
//!   longer leads to the folder it locked) and stages afresh.
//! - At most [`KEEP_ROOTS`] idle roots are kept; the oldest go first.
//! - A root is checked before every use: when it is published, the stamps
//!   of every folder and file of `skills/` and of `meta.json` (device,
//!   inode, size, mode, modification and change time: [`fsx::tree_stamp`])
//!   are written beside them, and every lookup takes them again. A byte
//!   flipped, a file removed, added or replaced, a `chmod`, or a record
//!   that no longer parses means the root is no longer what was verified:
//!   it is logged at ERROR, moved out of the published namespace, and
//!   staged afresh from its sources (the store), every byte verified
//!   again; a store copy that is bad too refuses the execution as
//!   `store_corrupted`. A running sandbox that has the old root bound
//!   keeps its inodes; the moved folder is deleted once nobody holds it.
//!
//! Sharing needs a read-only view the command cannot get around. Linux
//! gives one (a read-only bind in a mount namespace); Seatbelt only denies
//! writes by policy to a process of the runner's own user, so on macOS every
//! execution still stages a private copy ([`stage_private`]), and a policy
//! gap could only ever damage that copy.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::datadir::DataDir;
use crate::fsx;
use crate::package::format::PackageLimits;
use crate::package::stage::{self, Selected, Selection, Snapshot, StageError};
use crate::package::store::PrivateDir;

/// How many published roots are kept; older idle ones are evicted.
pub const KEEP_ROOTS: usize = 128;

const STAGING: &str = ".staging";
/// The largest record a root may have.
const META_LIMIT: u64 = 64 << 10;
const META: &str = "meta.json";
const STAMP: &str = "stamp";
const SKILLS: &str = "skills";

/// The published roots of one data dir.
#[derive(Debug, Clone)]
pub struct Roots {
    dir: PathBuf,
}

/// A root in use by one execution: the shared lock (of a published root)
/// is held until dropped.
#[derive(Debug)]
pub struct Lease {
    _lock: Option<File>,
    pub snapshot: Snapshot,
    /// True when this call staged the root (it was not published yet).
    pub staged: bool,
}

/// What a root records besides its tree.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    identity: String,
    bytes: u64,
    warnings: Vec<String>,
}

impl Roots {
    /// The published roots of an opened data dir; their staging folder
    /// is made (0700) if missing.
    pub fn open(data: &DataDir) -> io::Result<Roots> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = data.published();
        match fs::DirBuilder::new().mode(0o700).create(dir.join(STAGING)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        Ok(Roots { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The published root for `selected`, staging and publishing it first
    /// when it is not there yet. Every staged byte is verified against its
    /// pin before the root is published.
    pub fn acquire(
        &self,
        selected: &[Selected],
        limits: &PackageLimits,
    ) -> Result<Lease, StageError> {
        let selection = Selection::check(selected)?;
        let path = self.dir.join(selection.identity());
        // Two rounds cover a lookup racing with an eviction; a third
        // failure means something keeps removing roots under us.
        for _ in 0..3 {
            if let Some(lease) = self.lookup(&path, &selection)? {
                return Ok(lease);
            }
            match self.publish(&selection, &path, limits)? {
                Published::Ours => {
                    // Bounded: evict only when a new root was added.
                    self.evict(KEEP_ROOTS);
                    if let Some(mut lease) = self.lookup(&path, &selection)? {
                        lease.staged = true;
                        return Ok(lease);
                    }
                }
                Published::Theirs => {}
            }
        }
        Err(StageError::Root {
            path,
            source: io::Error::other("the published root kept disappearing while it was locked"),
        })
    }

    /// Locks and returns the root at `path` if it is published.
    fn lookup(&self, path: &Path, selection: &Selection<'_>) -> Result<Option<Lease>, StageError> {
        let identity = selection.identity();
        let root_err = |source| StageError::Root {
            path: path.to_owned(),
            source,
        };
        let dir = match fsx::open_dir_nofollow(path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(root_err(e)),
        };
        // Blocking: an eviction holds the exclusive lock only for a rename
        // and a delete.
        fsx::lock_shared(&dir).map_err(root_err)?;
        // An eviction may have renamed it away between open and lock.
        let locked = dir.metadata().map_err(root_err)?;
        match fs::symlink_metadata(path) {
            Ok(now) if now.dev() == locked.dev() && now.ino() == locked.ino() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(root_err(e)),
        }
        let meta = match self.check(&dir, path, identity) {
            Ok(meta) => meta,
            Err(Unchecked::Unstamped) => {
                tracing::warn!(
                    root = %path.display(),
                    "the published root has no stamps (published by an older runner); \
                     staging it again from its sources"
                );
                self.discard(dir, path, &locked);
                return Ok(None);
            }
            Err(Unchecked::Changed(why)) => {
                tracing::error!(
                    root = %path.display(),
                    "the published root is no longer what was verified ({why}); \
                     moving it away and staging it again from its sources"
                );
                self.discard(dir, path, &locked);
                return Ok(None);
            }
        };
        Ok(Some(Lease {
            _lock: Some(dir),
            snapshot: Snapshot {
                root: path.join(SKILLS),
                manifest: selection.manifest().clone(),
                identity: identity.to_owned(),
                warnings: meta.warnings,
                bytes: meta.bytes,
            },
            staged: false,
        }))
    }

    /// Whether the root at `path` (open as `dir`) is still exactly what was
    /// published: its record parses and names `identity`, and the stamps
    /// of its tree and record are those taken when it was published.
    fn check(&self, dir: &File, path: &Path, identity: &str) -> Result<Meta, Unchecked> {
        let changed = Unchecked::Changed;
        let text = read_record(dir, META).map_err(|e| changed(format!("its record: {e}")))?;
        let meta: Meta = serde_json::from_slice(&text)
            .map_err(|e| changed(format!("its record does not parse: {e}")))?;
        if meta.identity != identity {
            return Err(changed("its record names another identity".into()));
        }
        let want = match read_record(dir, STAMP) {
            Ok(w) => w,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Unchecked::Unstamped),
            Err(e) => return Err(changed(format!("its stamps: {e}"))),
        };
        let now = stamps(path).map_err(|e| changed(format!("cannot take its stamps: {e}")))?;
        if want != now.as_bytes() {
            return Err(changed(
                "a file or folder changed since it was published".into(),
            ));
        }
        Ok(meta)
    }

    /// Moves a root that failed its check out of the published namespace
    /// (unless another lookup already did) and deletes it once nobody
    /// else holds it; otherwise the next sweep does.
    fn discard(&self, dir: File, path: &Path, locked: &fs::Metadata) {
        let away = self.dir.join(STAGING).join(fsx::random_hex());
        let same = fs::symlink_metadata(path)
            .is_ok_and(|now| now.dev() == locked.dev() && now.ino() == locked.ino());
        // Moving a folder to another parent needs write access to it.
        if !same || fsx::chmod(path, 0o755).is_err() || fs::rename(path, &away).is_err() {
            return;
        }
        drop(dir);
        if let Ok(moved) = fsx::open_dir_nofollow(&away) {
            if fsx::try_flock(&moved).is_ok() {
                let _ = fsx::remove_tree(&away);
            }
        }
    }

    /// Stages `selection` privately, then renames it to `path`.
    fn publish(
        &self,
        selection: &Selection<'_>,
        path: &Path,
        limits: &PackageLimits,
    ) -> Result<Published, StageError> {
        let staging = self.dir.join(STAGING);
        let private = PrivateDir::create(&staging).map_err(|source| StageError::Root {
            path: staging.clone(),
            source,
        })?;
        let snapshot = stage::stage(selection, &private.path.join(SKILLS), limits)?;
        let root_err = |source| StageError::Root {
            path: private.path.clone(),
            source,
        };
        let meta = Meta {
            identity: snapshot.identity.clone(),
            bytes: snapshot.bytes,
            warnings: snapshot.warnings,
        };
        let text = serde_json::to_vec_pretty(&meta).map_err(io::Error::other);
        fs::write(private.path.join(META), text.map_err(root_err)?).map_err(root_err)?;
        fsx::chmod(&private.path.join(META), 0o444).map_err(root_err)?;
        let stamp = stamps(&private.path).map_err(root_err)?;
        fs::write(private.path.join(STAMP), stamp).map_err(root_err)?;
        fsx::chmod(&private.path.join(STAMP), 0o444).map_err(root_err)?;
        match fs::rename(&private.path, path) {
            Ok(()) => {}
            // Another execution published the same selection first: use
            // theirs; ours is removed with the private folder.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST) | Some(libc::ENOTEMPTY)) => {
                return Ok(Published::Theirs)
            }
            Err(e) => return Err(root_err(e)),
        }
        // Sealed like the tree inside it (the rename needed it writable).
        fsx::chmod(path, 0o555).map_err(|source| StageError::Root {
            path: path.to_owned(),
            source,
        })?;
        Ok(Published::Ours)
    }

    /// Removes roots of crashed stagings and evicts idle roots beyond
    /// `keep`, oldest first. Returns how many folders were removed.
    pub fn sweep(&self, keep: usize) -> usize {
        let staging = self.dir.join(STAGING);
        let swept = crate::package::store::sweep_locked_dirs(&staging).unwrap_or(0);
        swept + self.evict(keep)
    }

    /// Evicts idle roots beyond `keep`, oldest first; roots in use stay.
    fn evict(&self, keep: usize) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return 0;
        };
        // Only names the runner makes; never followed (lstat).
        let mut roots: Vec<(i64, PathBuf)> = entries
            .flatten()
            .filter(|e| is_identity(&e.file_name().to_string_lossy()))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                meta.is_dir().then(|| (meta.mtime(), e.path()))
            })
            .collect();
        if roots.len() <= keep {
            return 0;
        }
        roots.sort();
        let excess = roots.len() - keep;
        let mut removed = 0;
        for (_, path) in roots.into_iter().take(excess) {
            let Ok(dir) = fsx::open_dir_nofollow(&path) else {
                continue;
            };
            if fsx::try_flock(&dir).is_err() {
                continue; // in use
            }
            // Out of the published namespace first, then deleted; a
            // folder in `.staging` without a lock is swept if we die here.
            let away = self.dir.join(STAGING).join(fsx::random_hex());
            if fs::rename(&path, &away).is_ok() && fsx::remove_tree(&away).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// A set identity as the runner names roots: 64 lowercase hex digits.
fn is_identity(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The stamps of a root's tree and record (see the module docs): what
/// its `stamp` file holds. Neither changes when the root is renamed into
/// place or its own folder sealed.
fn stamps(root: &Path) -> io::Result<String> {
    Ok(format!(
        "{}\n{}\n",
        fsx::tree_stamp(&root.join(SKILLS))?,
        fsx::tree_stamp(&root.join(META))?
    ))
}

/// Reads a root's record `name` below its open folder: no symlink followed, no
/// FIFO or device opened (which could block), at most [`META_LIMIT`] bytes.
fn read_record(root: &File, name: &str) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = fsx::open_beneath(root, name)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > META_LIMIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a small regular file",
        ));
    }
    let mut text = Vec::new();
    file.take(META_LIMIT).read_to_end(&mut text)?;
    Ok(text)
}

/// Stages `selected` into `root`, private to one execution (macOS).
pub fn stage_private(
    selected: &[Selected],
    root: &Path,
    limits: &PackageLimits,
) -> Result<Lease, StageError> {
    Ok(Lease {
        _lock: None,
        snapshot: stage::stage(&Selection::check(selected)?, root, limits)?,
        staged: true,
    })
}

enum Published {
    Ours,
    Theirs,
}

/// Why a published root cannot be used as it is.
enum Unchecked {
    /// Published before roots carried stamps.
    Unstamped,
    /// Changed since it was published, or its record is broken.
    Changed(String),
}
