//! The content-addressed package store under the runner's data dir.
//!
//! Layout (all below `<data-dir>/store/`):
//!
//! ```text
//! packages/<package hash>/tree/…        sealed files (0444) and folders (0555)
//! packages/<package hash>/index.json    [{"path","size","hash"}] in hash order
//! bindings/<id>/<revision>.json         {"id","revision","version","hash"}
//! sets/<set identity>.json              the bindings of a published selection
//! tmp/<random>/ + tmp/<random>.lock     publishes in progress
//! ```
//!
//! Invariants:
//! - a package folder appears under `packages/` only by an atomic `rename`
//!   of a private folder whose tree was re-hashed and matched its name, so
//!   a lookup never finds a partial or unverified package; two concurrent
//!   publishes of the same bytes both succeed and leave one tree;
//! - a binding record is created with `link(2)`, which fails if one exists:
//!   a published `(id, revision)` never changes; republishing the same
//!   binding is a no-op, a different hash or version under the same
//!   revision is a conflict;
//! - a private folder in `tmp/` is protected by an `flock` on its `.lock`
//!   file; [`Store::open`] sweeps folders whose lock nobody holds (their
//!   publisher died).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::datadir::DataDir;
use crate::error::ErrorKind;
use crate::fsx::{self, LockFile};
use crate::package::format::{self, PackageError, PackageLimits, SKILL_MD};
use crate::package::hash::{self, Binding};
use crate::package::source::ListError;
use crate::package::verify::{self, StageError};

/// The hint every data-dir error carries.
pub use crate::datadir::HINT as DATA_DIR_HINT;

/// One file of a stored package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    pub path: String,
    pub size: u64,
    pub hash: String,
}

/// A package held by the store.
#[derive(Debug, Clone)]
pub struct StoredPackage {
    pub hash: String,
    /// The sealed tree.
    pub tree: PathBuf,
    /// Its files, in package-hash order.
    pub files: Vec<IndexEntry>,
}

impl StoredPackage {
    /// `(path, file hash)` in package-hash order.
    pub fn file_hashes(&self) -> Vec<(String, String)> {
        self.files
            .iter()
            .map(|f| (f.path.clone(), f.hash.clone()))
            .collect()
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot create the store at {path}: {source}; {hint}", hint = DATA_DIR_HINT)]
    Open { path: PathBuf, source: io::Error },
    #[error("skill {id:?}: {source}")]
    Package { id: String, source: PackageError },
    #[error("skill {id:?}: {source}")]
    List { id: String, source: ListError },
    #[error(transparent)]
    Verify(#[from] StageError),
    #[error("skill {id:?} revision {revision} is already published as version {version:?} with hash {hash}; publish a new revision instead")]
    Conflict {
        id: String,
        revision: u64,
        version: String,
        hash: String,
    },
    #[error("skill {id:?} revision {revision} (hash {hash}) is not in the store; publish it first (skill-runner store add, or POST /v1/skill-packages) or give a path")]
    NotFound {
        id: String,
        revision: u64,
        hash: String,
    },
    #[error("skill {id:?} revision {revision} is in the store as version {version:?} with hash {hash}, not as the job pins it")]
    Mismatch {
        id: String,
        revision: u64,
        version: String,
        hash: String,
    },
    #[error("store record {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl StoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound { .. } => ErrorKind::NotInStore,
            StoreError::Mismatch { .. } => ErrorKind::HashMismatch,
            StoreError::Conflict { .. } => ErrorKind::Conflict,
            StoreError::Verify(e) => e.kind(),
            StoreError::Package { .. } | StoreError::List { .. } => ErrorKind::BadPackage,
            StoreError::Io { .. } | StoreError::Open { .. } | StoreError::Corrupt { .. } => {
                ErrorKind::StoreFailed
            }
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Handle on a store folder.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Published {
    pub binding: Binding,
    /// False when the same package bytes were already held.
    pub new_package: bool,
    pub warnings: Vec<String>,
}

impl Store {
    /// Opens the store of an opened data dir (its folders made 0700 when
    /// missing) and sweeps publishes left by crashed processes.
    pub fn open(data: &DataDir) -> Result<Store, StoreError> {
        use std::os::unix::fs::DirBuilderExt;
        let root = data.store();
        for sub in ["packages", "bindings", "sets", "tmp"] {
            let p = root.join(sub);
            match fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(StoreError::Open { path: p, source }),
            }
        }
        let store = Store { root };
        store.sweep()?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Removes private publish folders whose owner is gone.
    pub fn sweep(&self) -> Result<usize, StoreError> {
        sweep_locked_dirs(&self.root.join("tmp")).map_err(io_err(&self.root))
    }

    /// Publishes a package given as in-memory files under `binding`,
    /// whose hash must match them.
    pub fn publish_files(
        &self,
        binding: &Binding,
        files: &[(String, Vec<u8>)],
        limits: &PackageLimits,
    ) -> Result<Published, StoreError> {
        let id = binding.id.clone();
        let pkg = |source| StoreError::Package {
            id: id.clone(),
            source,
        };
        format::check_binding(binding).map_err(pkg)?;
        let mut tally = format::LimitTally::new(*limits);
        for (path, bytes) in files {
            format::check_path(path).map_err(pkg)?;
            tally.add(path, bytes.len() as u64).map_err(pkg)?;
        }
        let md = files
            .iter()
            .find(|f| f.0 == SKILL_MD)
            .ok_or_else(|| pkg(PackageError::MissingSkillMd))?;
        let doc = format::parse_skill_md(&md.1).map_err(pkg)?;
        let warnings = doc.warnings(Some(&binding.id));

        let new_package = match self.held_intact(binding, limits) {
            Held::Intact => false,
            Held::Missing => self.write_package(binding, files, limits)?,
            Held::Corrupt(why) => {
                tracing::error!(
                    hash = %binding.hash,
                    "the store's copy of a package no longer matches its hash ({why}); \
                     replacing it with the bytes being published"
                );
                self.write_package(binding, files, limits)?
            }
        };
        self.put_binding(binding)?;
        Ok(Published {
            binding: binding.clone(),
            new_package,
            warnings,
        })
    }

    /// Reads a folder and publishes it as `id`/`revision`/`version`; the
    /// hash is computed from the bytes read.
    pub fn publish_dir(
        &self,
        dir: &Path,
        id: &str,
        revision: u64,
        version: &str,
        limits: &PackageLimits,
    ) -> Result<Published, StoreError> {
        let files = crate::package::source::read_dir_files(dir, limits).map_err(|source| {
            StoreError::List {
                id: id.to_owned(),
                source,
            }
        })?;
        let hash =
            hash::package_hash(files.iter().map(|(p, b)| (&p[..], &b[..]))).map_err(|e| {
                StoreError::Package {
                    id: id.to_owned(),
                    source: e.into(),
                }
            })?;
        let binding = Binding {
            id: id.to_owned(),
            revision,
            version: version.to_owned(),
            hash,
        };
        self.publish_files(&binding, &files, limits)
    }

    /// Writes, verifies and renames a package into place. Returns false
    /// when another publisher won the race with the same bytes.
    fn write_package(
        &self,
        binding: &Binding,
        files: &[(String, Vec<u8>)],
        limits: &PackageLimits,
    ) -> Result<bool, StoreError> {
        let private = PrivateDir::create(&self.root.join("tmp")).map_err(io_err(&self.root))?;
        let tree = private.path.join("tree");
        let result = (|| {
            fs::create_dir(&tree).map_err(io_err(&tree))?;
            for (path, bytes) in files {
                let target = tree.join(path);
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent).map_err(io_err(parent))?;
                }
                fs::write(&target, bytes).map_err(io_err(&target))?;
            }
            // Re-hash what landed on disk, not what we meant to write.
            verify::verify_tree(&tree, binding, limits, None)?;
            let mut index: Vec<IndexEntry> = files
                .iter()
                .map(|(path, bytes)| IndexEntry {
                    path: path.clone(),
                    size: bytes.len() as u64,
                    hash: hash::file_hash(bytes),
                })
                .collect();
            hash::sort_utf16(&mut index, |e| &e.path);
            let index_path = private.path.join("index.json");
            let text = serde_json::to_vec(&index).map_err(|e| StoreError::Corrupt {
                path: index_path.clone(),
                reason: e.to_string(),
            })?;
            fs::write(&index_path, text).map_err(io_err(&index_path))?;
            fsx::seal_tree(&private.path).map_err(io_err(&private.path))?;
            let dest = self.package_dir(&binding.hash);
            if dest.exists() {
                // A held copy failed its check: swap the verified one in.
                return self.replace_package(&private.path, &dest).map(|()| true);
            }
            match fs::rename(&private.path, &dest) {
                Ok(()) => Ok(true),
                Err(e) if dest.join("index.json").exists() => {
                    // Same bytes published concurrently: theirs is as good.
                    let _ = e;
                    Ok(false)
                }
                Err(e) => Err(io_err(&dest)(e)),
            }
        })();
        drop(private);
        result
    }

    /// Whether the store holds `binding`'s package and its tree still
    /// hashes to it (every byte re-read: this runs only on a publish).
    fn held_intact(&self, binding: &Binding, limits: &PackageLimits) -> Held {
        let package = match self.package(&binding.hash) {
            Ok(Some(p)) => p,
            Ok(None) if !self.package_dir(&binding.hash).exists() => return Held::Missing,
            Ok(None) => return Held::Corrupt("its index is missing".into()),
            Err(e) => return Held::Corrupt(e.to_string()),
        };
        match verify::verify_tree(&package.tree, binding, limits, Some(&package.file_hashes())) {
            Ok(_) => Held::Intact,
            Err(e) => Held::Corrupt(e.to_string()),
        }
    }

    /// Replaces the package folder `dest` by the verified folder `fresh`
    /// in one step where the system can (`renameat2` exchange on Linux),
    /// so a reader finds the old tree or the new one, never none; the old
    /// one is then deleted.
    fn replace_package(&self, fresh: &Path, dest: &Path) -> Result<(), StoreError> {
        #[cfg(target_os = "linux")]
        {
            use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
            // Moving a folder to another parent needs write access to it.
            fsx::chmod(fresh, 0o755).map_err(io_err(fresh))?;
            fsx::chmod(dest, 0o755).map_err(io_err(dest))?;
            renameat2(
                AT_FDCWD,
                fresh,
                AT_FDCWD,
                dest,
                RenameFlags::RENAME_EXCHANGE,
            )
            .map_err(|e| io_err(dest)(e.into()))?;
            fsx::chmod(dest, 0o555).map_err(io_err(dest))?;
            // `fresh` now names the bad copy, inside the private folder
            // the caller removes.
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let away = self.root.join("tmp").join(fsx::random_hex());
            fsx::chmod(dest, 0o755).map_err(io_err(dest))?;
            fs::rename(dest, &away).map_err(io_err(dest))?;
            let renamed = fs::rename(fresh, dest).map_err(io_err(dest));
            let _ = fsx::remove_tree(&away);
            renamed
        }
    }

    fn package_dir(&self, hash: &str) -> PathBuf {
        self.root.join("packages").join(hash)
    }

    /// The stored package with this hash, if held.
    pub fn package(&self, hash: &str) -> Result<Option<StoredPackage>, StoreError> {
        if !hash::is_hex_digest(hash) {
            return Ok(None);
        }
        let dir = self.package_dir(hash);
        let index_path = dir.join("index.json");
        let text = match fs::read(&index_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&index_path)(e)),
        };
        let files: Vec<IndexEntry> =
            serde_json::from_slice(&text).map_err(|e| StoreError::Corrupt {
                path: index_path.clone(),
                reason: e.to_string(),
            })?;
        Ok(Some(StoredPackage {
            hash: hash.to_owned(),
            tree: dir.join("tree"),
            files,
        }))
    }

    fn binding_path(&self, id: &str, revision: u64) -> PathBuf {
        self.root
            .join("bindings")
            .join(id)
            .join(format!("{revision}.json"))
    }

    /// Records a binding; idempotent for the same binding, a conflict for
    /// a different one under the same `(id, revision)`.
    pub fn put_binding(&self, binding: &Binding) -> Result<(), StoreError> {
        let path = self.binding_path(&binding.id, binding.revision);
        let text = serde_json::to_vec(binding).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        create_once(&path, &text)?;
        let existing = self.read_binding(&path)?;
        if existing != *binding {
            return Err(StoreError::Conflict {
                id: existing.id,
                revision: existing.revision,
                version: existing.version,
                hash: existing.hash,
            });
        }
        Ok(())
    }

    fn read_binding(&self, path: &Path) -> Result<Binding, StoreError> {
        let text = fs::read(path).map_err(io_err(path))?;
        serde_json::from_slice(&text).map_err(|e| StoreError::Corrupt {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The stored package for a binding published earlier; the record must
    /// match the binding exactly.
    pub fn resolve(&self, binding: &Binding) -> Result<StoredPackage, StoreError> {
        let not_found = || StoreError::NotFound {
            id: binding.id.clone(),
            revision: binding.revision,
            hash: binding.hash.clone(),
        };
        if format::check_id(&binding.id).is_err() {
            return Err(not_found());
        }
        let path = self.binding_path(&binding.id, binding.revision);
        if !path.exists() {
            return Err(not_found());
        }
        let record = self.read_binding(&path)?;
        if record != *binding {
            return Err(StoreError::Mismatch {
                id: record.id,
                revision: record.revision,
                version: record.version,
                hash: record.hash,
            });
        }
        self.package(&binding.hash)?.ok_or_else(not_found)
    }

    /// Every published binding, sorted by id then revision. A record that
    /// cannot be read or does not parse (a truncated file, a stray folder)
    /// is skipped with an ERROR log line naming it and counted
    /// ([`skipped_records`]): one bad record never breaks a listing.
    pub fn bindings(&self) -> Result<Vec<Binding>, StoreError> {
        let dir = self.root.join("bindings");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let sub = entry.path();
            let records = match fs::read_dir(&sub) {
                Ok(r) => r,
                Err(e) => {
                    skip_record(&sub, &e.to_string());
                    continue;
                }
            };
            for record in records {
                let record = record.map_err(io_err(&sub))?;
                out.extend(self.listed_binding(&record.path()));
            }
        }
        out.sort_by(|a, b| (&a.id, a.revision).cmp(&(&b.id, b.revision)));
        Ok(out)
    }

    /// The published revisions of one skill, sorted by revision; empty
    /// when none is (or `id` is not an admissible id). Bad records are
    /// skipped as [`bindings`](Self::bindings) skips them.
    pub fn bindings_of(&self, id: &str) -> Result<Vec<Binding>, StoreError> {
        if format::check_id(id).is_err() {
            return Ok(Vec::new());
        }
        let dir = self.root.join("bindings").join(id);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        let mut out = Vec::new();
        for record in entries {
            let record = record.map_err(io_err(&dir))?;
            out.extend(self.listed_binding(&record.path()));
        }
        out.sort_by_key(|b| b.revision);
        Ok(out)
    }

    /// The binding a listed `<revision>.json` holds; `None` (logged and
    /// counted) when it cannot be read or does not parse.
    fn listed_binding(&self, path: &Path) -> Option<Binding> {
        if path.extension().is_none_or(|e| e != "json") {
            return None;
        }
        match self.read_binding(path) {
            Ok(b) => Some(b),
            Err(e) => {
                skip_record(path, &e.to_string());
                None
            }
        }
    }

    /// Records a published selection under its set identity.
    pub fn put_set(&self, bindings: &[Binding]) -> Result<String, StoreError> {
        let identity = hash::set_identity(bindings);
        let path = self.root.join("sets").join(format!("{identity}.json"));
        let text = serde_json::to_vec(bindings).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        create_once(&path, &text)?;
        Ok(identity)
    }

    /// The bindings of a selection published under `identity`, if held.
    pub fn set(&self, identity: &str) -> Result<Option<Vec<Binding>>, StoreError> {
        if !hash::is_hex_digest(identity) {
            return Ok(None);
        }
        let path = self.root.join("sets").join(format!("{identity}.json"));
        match fs::read(&path) {
            Ok(text) => serde_json::from_slice(&text)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    path,
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }
}

/// How many unreadable binding records listings skipped since start:
/// process-wide, as `/metrics` reports it (no unit test skips a record, so
/// the metrics test can expect zero; the integration tests count them).
static SKIPPED_RECORDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many unreadable binding records listings skipped since this
/// process started (each logged at ERROR when skipped).
pub fn skipped_records() -> u64 {
    SKIPPED_RECORDS.load(std::sync::atomic::Ordering::Relaxed)
}

fn skip_record(path: &Path, why: &str) {
    SKIPPED_RECORDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::error!(
        record = %path.display(),
        "skipped a binding record that cannot be read ({}); restore it or re-publish the skill",
        why.escape_debug()
    );
}

/// What [`Store::held_intact`] found.
enum Held {
    Intact,
    Missing,
    Corrupt(String),
}

/// Creates `path` with `text` unless it exists (an existing record is left
/// as it is; the caller compares it).
fn create_once(path: &Path, text: &[u8]) -> Result<(), StoreError> {
    match fsx::write_new(path, text, 0o644) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

/// A private folder `<parent>/<random>` guarded by `<parent>/<random>.lock`
/// for as long as this value lives; removed on drop. A reserved name
/// (`reserve_named`) is the lock alone, without the folder.
#[derive(Debug)]
pub struct PrivateDir {
    pub path: PathBuf,
    lock: Option<LockFile>,
    pub keep: bool,
    /// False for a reserved name alone ([`PrivateDir::reserve_named`]):
    /// `path` was never made.
    made: bool,
}

impl PrivateDir {
    /// Creates a fresh private folder (0700) named `<prefix><random>`.
    pub fn create(parent: &Path) -> io::Result<PrivateDir> {
        Self::create_named(parent, "")
    }

    pub fn create_named(parent: &Path, prefix: &str) -> io::Result<PrivateDir> {
        Self::named(parent, prefix, true)
    }

    /// The name `<prefix><random>` and its held lock, without the folder:
    /// for what is named after it elsewhere (a `run`'s cgroup), which the
    /// lock keeps sweeps off as the folder's lock would. No folder is
    /// made or removed: on this host's ext4 (`discard`), freeing a
    /// folder's block cost 0.2–0.4 ms per `run`, and up to 9 ms (traced).
    pub fn reserve_named(parent: &Path, prefix: &str) -> io::Result<PrivateDir> {
        Self::named(parent, prefix, false)
    }

    fn named(parent: &Path, prefix: &str, made: bool) -> io::Result<PrivateDir> {
        fs::create_dir_all(parent)?;
        loop {
            let name = format!("{prefix}{}", fsx::random_hex());
            let lock_path = parent.join(format!("{name}.lock"));
            // O_EXCL: a name is never reused, even after a sweep.
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock_path)
            {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
            let lock = match LockFile::acquire(&lock_path) {
                Ok(l) => l,
                // A sweeper took it in the instant between create and lock.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            let path = parent.join(&name);
            if made {
                fs::create_dir(&path)?;
                fsx::chmod(&path, 0o700)?;
            }
            return Ok(PrivateDir {
                path,
                lock: Some(lock),
                keep: false,
                made,
            });
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if self.keep {
            // A kept folder is marked so sweeps leave it alone; it is the
            // user's to remove.
            let mut marker = self.path.clone().into_os_string();
            marker.push(".kept");
            let _ = fs::write(marker, b"");
            if let Some(lock) = self.lock.take() {
                let _ = fs::remove_file(lock.path());
            }
            return;
        }
        if !self.made {
            if let Some(lock) = self.lock.take() {
                let _ = fs::remove_file(lock.path());
            }
            return;
        }
        if let Err(e) = fsx::remove_tree(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove private folder");
            }
        }
        if let Some(lock) = self.lock.take() {
            let _ = fs::remove_file(lock.path());
        }
    }
}

/// Sweeps `<dir>/<name>` folders whose `<name>.lock` nobody holds, taking
/// the lock first so a creator racing with the sweep backs off. Returns how
/// many were removed.
pub fn sweep_locked_dirs(dir: &Path) -> io::Result<usize> {
    let mut removed = 0;
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if name.ends_with(".kept") || dir.join(format!("{name}.kept")).exists() {
            continue; // kept on request (`run --keep`)
        }
        if let Some(stem) = name.strip_suffix(".lock") {
            let Ok(lock) = LockFile::acquire(&path) else {
                continue; // held: its owner is alive
            };
            fsx::remove_tree(&dir.join(stem))?;
            fs::remove_file(&path)?;
            drop(lock);
            removed += 1;
        } else if entry.file_type()?.is_dir() && !dir.join(format!("{name}.lock")).exists() {
            // A folder is only ever created after its lock: no lock means
            // its sweep was interrupted.
            fsx::remove_tree(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}
