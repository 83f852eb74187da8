//! The environment store under the runner's data dir.
//!
//! Layout (all below `<data-dir>/environments/`):
//!
//! ```text
//! trees/<hash>/tree/…          the sealed tree: files 0444 (0555 when
//!                              executable), folders 0555, symlinks as made
//! trees/<hash>/manifest.json   every entry, with each file's SHA-256
//! trees/<hash>/stamp.bin       the per-use fingerprint of the sealed tree
//! records/<id>/<hash>.json     the record of {id, hash}
//! leases/<hash>.lock           shared flock while in use or being published
//! tmp/<random>/ + .lock        publishes in progress
//! ```
//!
//! Invariants:
//! - a tree is hashed from the very bytes written into a private folder as
//!   they are copied, sealed, and renamed into `trees/<hash>/` in one step:
//!   a reader never finds a partial tree, and a hash has one copy;
//! - every refusal (a FIFO, a device, a socket, a symlink that could leave
//!   the tree, an inadmissible path, a limit passed) happens while listing
//!   the source, before anything is written; an error later removes the
//!   private folder, so nothing is left half-written;
//! - a record is created with `link(2)` and never replaced;
//! - a tree is removed only when no record names it and nobody holds its
//!   lease ([`EnvStore::gc`]); a publish holds the lease from before its
//!   tree is renamed in until its record exists.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ErrorKind;
use crate::fsx;
use crate::package::environment::stamp;
use crate::package::environment::tree::{self, Entry, EntryKind, TreeError, TreeHasher};
use crate::package::environment::{Base, EnvRef, LockRef, Record};
use crate::package::format;
use crate::package::hash::is_hex_digest;
use crate::package::store::{sweep_locked_dirs, PrivateDir, DATA_DIR_HINT};

/// Bounds on one tree, checked while it is listed (before any copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvLimits {
    /// Files, folders and symlinks.
    pub max_entries: u64,
    /// Bytes of one file.
    pub max_file_bytes: u64,
    /// Bytes of all files.
    pub max_bytes: u64,
}

impl Default for EnvLimits {
    fn default() -> Self {
        EnvLimits {
            max_entries: 200_000,
            max_file_bytes: 1 << 30,
            max_bytes: 4 << 30,
        }
    }
}

/// Why an environment operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("cannot create the environment store at {path}: {source}; {hint}", hint = DATA_DIR_HINT)]
    Open { path: PathBuf, source: io::Error },
    #[error("environment store {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot read {path}: {source}")]
    ReadSource { path: PathBuf, source: io::Error },
    #[error("{path} is not a folder; give the folder that holds the environment's tree")]
    NotFolder { path: PathBuf },
    #[error(
        "{path} is a {kind}; an environment may hold only regular files, folders and symlinks"
    )]
    NotAdmissible { path: PathBuf, kind: &'static str },
    #[error("{path} has a name that is not UTF-8; rename it")]
    NotUtf8 { path: PathBuf },
    #[error("{path}: {source}")]
    Tree { path: PathBuf, source: TreeError },
    #[error(
        "the tree has more than {limit} entries (files, folders and symlinks); raise --max-entries or make it smaller"
    )]
    TooManyEntries { limit: u64 },
    #[error("{path} is {size} bytes, over the limit of {limit} for one file; raise --max-file-bytes or leave it out")]
    FileTooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("the tree holds more than {limit} bytes; raise --max-bytes or make it smaller")]
    TooLarge { limit: u64 },
    #[error("{path} holds no file; an environment needs at least one")]
    Empty { path: PathBuf },
    #[error("{path} has {links} hard links; an environment's files must have one each, so that no file outside the tree can be published through it: copy the tree (cp -r, or uv's --link-mode=copy) and add the copy")]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{path} changed while it was copied; publish a tree nothing is writing to")]
    Changed { path: PathBuf },
    #[error("environment id {id:?} is not admissible: ids match ^[a-z0-9]+(-[a-z0-9]+)*$")]
    BadId { id: String },
    #[error(
        "no environment {what} is in the store; add it first (skill-runner env add or env build)"
    )]
    NotFound { what: String },
    #[error("environment store record {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("environment {hash} changed on disk: {change}; remove it (skill-runner env remove, then env gc) and publish it again")]
    Tampered { hash: String, change: String },
}

impl EnvError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EnvError::NotFound { .. } => ErrorKind::NotInStore,
            EnvError::Tampered { .. } => ErrorKind::HashMismatch,
            EnvError::Open { .. } | EnvError::Io { .. } | EnvError::Corrupt { .. } => {
                ErrorKind::StoreFailed
            }
            _ => ErrorKind::BadPackage,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> EnvError + '_ {
    move |source| EnvError::Io {
        path: path.to_owned(),
        source,
    }
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> EnvError {
    EnvError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// One entry of a stored tree's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    pub path: String,
    /// `file`, `exec` (an executable file) or `symlink`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// The manifest of a stored tree: its hash and every entry in hash order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub hash: String,
    pub entries: Vec<ManifestEntry>,
}

/// What a publish did.
#[derive(Debug, Clone)]
pub struct Published {
    pub record: Record,
    /// False when the store held the same tree already.
    pub new_tree: bool,
}

/// What a collection removed and what it left.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub removed: Vec<String>,
    /// Unreferenced trees left because someone holds their lease.
    pub in_use: Vec<String>,
}

/// A held shared lease on a stored tree: [`EnvStore::gc`] leaves it be.
#[derive(Debug)]
pub struct Lease {
    pub hash: String,
    /// The sealed tree.
    pub tree: PathBuf,
    _lock: File,
}

/// Handle on `<data-dir>/environments`.
#[derive(Debug, Clone)]
pub struct EnvStore {
    root: PathBuf,
}

impl EnvStore {
    /// Opens (creating) the store and sweeps publishes whose owner died.
    pub fn open(data: &crate::datadir::DataDir) -> Result<EnvStore, EnvError> {
        let root = data.environments();
        for sub in ["trees", "records", "leases", "tmp", "builds"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).map_err(|source| EnvError::Open {
                path: p.clone(),
                source,
            })?;
        }
        sweep_locked_dirs(&root.join("tmp")).map_err(io_err(&root))?;
        Ok(EnvStore { root })
    }

    fn build_path(&self, lock_sha: &str, base: &crate::package::environment::Base) -> PathBuf {
        let key = crate::package::hash::file_hash(
            format!("{lock_sha}\n{}\n{}", base.path, base.sha256).as_bytes(),
        );
        self.root.join("builds").join(format!("{key}.json"))
    }

    /// Remembers that `env build` made `env` from the lock of digest
    /// `lock_sha` for `base` (replacing what an earlier build left).
    pub fn record_build(
        &self,
        lock_sha: &str,
        base: &crate::package::environment::Base,
        env: &EnvRef,
    ) -> Result<(), EnvError> {
        let path = self.build_path(lock_sha, base);
        let bytes = serde_json::to_vec(env).map_err(|e| corrupt(&path, e))?;
        fsx::write_replace(&path, &bytes).map_err(io_err(&path))
    }

    /// What `env build` made from that lock for that base, if it said so
    /// (the caller checks the environment is still held and sound).
    pub fn built(
        &self,
        lock_sha: &str,
        base: &crate::package::environment::Base,
    ) -> Option<EnvRef> {
        let bytes = fs::read(self.build_path(lock_sha, base)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The store of `data` as it is, creating and sweeping nothing (for
    /// reading a record, or showing where a tree would be).
    pub fn at(data: &crate::datadir::DataDir) -> EnvStore {
        EnvStore {
            root: data.environments(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn tree_dir(&self, hash: &str) -> PathBuf {
        self.root.join("trees").join(hash)
    }

    /// The sealed tree of `hash` (whether or not it is held).
    pub fn tree_path(&self, hash: &str) -> PathBuf {
        self.tree_dir(hash).join("tree")
    }

    fn record_path(&self, id: &str, hash: &str) -> PathBuf {
        self.root
            .join("records")
            .join(id)
            .join(format!("{hash}.json"))
    }

    /// A private folder under `tmp/` for a build's inputs and tree: removed
    /// when dropped, swept if its owner dies.
    pub fn staging(&self) -> io::Result<PrivateDir> {
        PrivateDir::create_named(&self.root.join("tmp"), "build-")
    }

    /// Publishes the tree at `src` as `id`, recording `base` and `locks`.
    /// Publishing the same tree under the same id again returns the record
    /// made the first time.
    pub fn add(
        &self,
        src: &Path,
        id: &str,
        base: Vec<Base>,
        locks: Vec<LockRef>,
        limits: &EnvLimits,
    ) -> Result<Published, EnvError> {
        self.add_checked(src, id, base, locks, limits, None)
    }

    /// [`EnvStore::add`], refusing (as [`EnvError::Tampered`], before
    /// anything is renamed into the store) a tree whose hash is not
    /// `expected`: a pulled tree must be the one its record names.
    pub fn add_expecting(
        &self,
        src: &Path,
        id: &str,
        base: Vec<Base>,
        locks: Vec<LockRef>,
        limits: &EnvLimits,
        expected: &str,
    ) -> Result<Published, EnvError> {
        self.add_checked(src, id, base, locks, limits, Some(expected))
    }

    fn add_checked(
        &self,
        src: &Path,
        id: &str,
        base: Vec<Base>,
        locks: Vec<LockRef>,
        limits: &EnvLimits,
        expected: Option<&str>,
    ) -> Result<Published, EnvError> {
        format::check_id(id).map_err(|_| EnvError::BadId { id: id.to_owned() })?;
        let entries = list_tree(src, limits)?;
        if !entries
            .iter()
            .any(|e| matches!(e.kind, EntryKind::File { .. }))
        {
            return Err(EnvError::Empty {
                path: src.to_owned(),
            });
        }
        let private = PrivateDir::create(&self.root.join("tmp")).map_err(io_err(&self.root))?;
        let staged = private.path.join("tree");
        fs::create_dir(&staged).map_err(io_err(&staged))?;
        let manifest = copy_hashing(src, &entries, &staged)?;
        let hash = manifest.hash.clone();
        if let Some(want) = expected.filter(|w| *w != hash) {
            return Err(EnvError::Tampered {
                hash: want.to_owned(),
                change: format!("its bytes hash to {hash}"),
            });
        }
        let lease = self.lock_lease(&hash)?;
        let dest = self.tree_dir(&hash);
        let new_tree = if dest.join("manifest.json").exists() {
            false
        } else {
            seal(&staged, &entries)?;
            let stamp = take_stamp(&staged, entries.iter().map(|e| e.path.as_str()))?;
            write_json(&private.path.join("manifest.json"), &manifest)?;
            let stamp_path = private.path.join(stamp::FILE);
            fs::write(&stamp_path, stamp).map_err(io_err(&stamp_path))?;
            for name in ["manifest.json", stamp::FILE] {
                let p = private.path.join(name);
                fsx::chmod(&p, 0o444).map_err(io_err(&p))?;
            }
            fsx::chmod(&private.path, 0o555).map_err(io_err(&private.path))?;
            match fs::rename(&private.path, &dest) {
                Ok(()) => true,
                // Published by someone else meanwhile: theirs is the same.
                Err(_) if dest.join("manifest.json").exists() => false,
                Err(e) => return Err(io_err(&dest)(e)),
            }
        };
        drop(private);
        let (files, symlinks, bytes) = counts(&entries);
        let record = Record {
            id: id.to_owned(),
            hash: hash.clone(),
            base,
            locks,
            files,
            symlinks,
            bytes,
            created: crate::text::rfc3339(std::time::SystemTime::now()),
        };
        let path = self.record_path(id, &hash);
        let text = serde_json::to_vec_pretty(&record).map_err(|e| corrupt(&path, e))?;
        match fsx::write_new(&path, &text, 0o644) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        let record = read_record(&path)?;
        drop(lease);
        Ok(Published { record, new_tree })
    }

    /// Every record, sorted by id then creation time.
    pub fn list(&self) -> Result<Vec<Record>, EnvError> {
        let dir = self.root.join("records");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            out.extend(self.records_in(&entry.path())?);
        }
        out.sort_by(|a, b| (&a.id, &a.created, &a.hash).cmp(&(&b.id, &b.created, &b.hash)));
        Ok(out)
    }

    fn records_in(&self, dir: &Path) -> Result<Vec<Record>, EnvError> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry.map_err(io_err(dir))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                out.push(read_record(&path)?);
            }
        }
        Ok(out)
    }

    /// The records of `id`, oldest first; `NotFound` when there is none.
    pub fn show(&self, id: &str) -> Result<Vec<Record>, EnvError> {
        let not_found = || EnvError::NotFound {
            what: format!("with id {id:?}"),
        };
        format::check_id(id).map_err(|_| not_found())?;
        let mut out = self.records_in(&self.root.join("records").join(id))?;
        if out.is_empty() {
            return Err(not_found());
        }
        out.sort_by(|a, b| (&a.created, &a.hash).cmp(&(&b.created, &b.hash)));
        Ok(out)
    }

    /// The record of exactly `{id, hash}`.
    pub fn record(&self, env: &EnvRef) -> Result<Record, EnvError> {
        let not_found = || EnvError::NotFound {
            what: format!("{{id {:?}, hash {}}}", env.id, env.hash),
        };
        if format::check_id(&env.id).is_err() || !is_hex_digest(&env.hash) {
            return Err(not_found());
        }
        let path = self.record_path(&env.id, &env.hash);
        if !path.exists() {
            return Err(not_found());
        }
        read_record(&path)
    }

    /// Removes the record of `{id, hash}`; its tree stays until [`gc`](Self::gc).
    pub fn remove(&self, env: &EnvRef) -> Result<Record, EnvError> {
        let record = self.record(env)?;
        let path = self.record_path(&env.id, &env.hash);
        fs::remove_file(&path).map_err(io_err(&path))?;
        Ok(record)
    }

    /// Re-hashes the stored tree of `hash` byte by byte and checks its seal;
    /// a difference is [`EnvError::Tampered`] naming the first change.
    pub fn verify(&self, hash: &str) -> Result<Manifest, EnvError> {
        let not_found = || EnvError::NotFound {
            what: format!("with hash {hash}"),
        };
        if !is_hex_digest(hash) {
            return Err(not_found());
        }
        let dir = self.tree_dir(hash);
        let manifest_path = dir.join("manifest.json");
        let text = match fs::read(&manifest_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(io_err(&manifest_path)(e)),
        };
        let want: Manifest =
            serde_json::from_slice(&text).map_err(|e| corrupt(&manifest_path, e))?;
        let tampered = |change: String| EnvError::Tampered {
            hash: hash.to_owned(),
            change,
        };
        let tree = dir.join("tree");
        // Bounded by what was published, whatever limits it was added under.
        let folders = folders_of(want.entries.iter().map(|e| e.path.as_str())).len();
        let limits = EnvLimits {
            max_entries: (want.entries.len() + folders) as u64,
            max_file_bytes: u64::MAX,
            max_bytes: want.entries.iter().filter_map(|e| e.size).sum(),
        };
        let entries = match list_tree(&tree, &limits) {
            Ok(e) => e,
            Err(EnvError::TooManyEntries { .. }) => {
                return Err(tampered("entries were added".into()))
            }
            Err(EnvError::TooLarge { .. }) => return Err(tampered("bytes were added".into())),
            Err(e) => return Err(tampered(e.to_string())),
        };
        check_seal(&tree, &entries).map_err(tampered)?;
        let got = match hash_tree(&tree, &entries) {
            Ok(m) => m,
            Err(e) => return Err(tampered(e.to_string())),
        };
        if got.hash != hash || want.hash != hash {
            return Err(tampered(first_change(&want, &got)));
        }
        Ok(got)
    }

    /// The per-use check of a stored tree ([`stamp`]): the device, inode,
    /// mode, owner, size and change time of its root, every folder and
    /// every entry, as sealed. Any write, truncation, `chmod`, added,
    /// removed or replaced entry changes it, without reading a byte or a
    /// listing; it proves nothing against someone who can set the clock,
    /// which only [`verify`](Self::verify) does.
    pub fn stamp_matches(&self, hash: &str) -> Result<bool, EnvError> {
        let path = self.tree_dir(hash).join(stamp::FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            // A tree sealed before this stamp existed: re-hashed, then stamped.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let tree = self.tree_path(hash);
        let Ok(root) = fsx::open_dir_nofollow(&tree) else {
            return Ok(false);
        };
        Ok(stamp::holds(&root, &bytes))
    }

    /// [`verify`](Self::verify), and when the tree is sound, a new stamp
    /// for it, taken before its bytes were re-hashed (so a change made
    /// meanwhile shows at the next use): a tree whose stamp no longer
    /// matched but whose bytes did (a `chmod` set back, a tree sealed by
    /// an older runner) is cheap to check again. Failing to write the
    /// stamp is not an error: the next use re-hashes.
    pub fn verify_and_restamp(&self, hash: &str) -> Result<Manifest, EnvError> {
        let fresh = self.read_manifest(hash).ok().and_then(|m| {
            let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
            take_stamp(&self.tree_path(hash), paths.into_iter()).ok()
        });
        let manifest = self.verify(hash)?;
        if let Some(stamp) = fresh {
            if let Err(e) = self.save_stamp(hash, &stamp) {
                tracing::debug!(%hash, error = %e, "could not record the environment's new stamp");
            }
        }
        Ok(manifest)
    }

    fn read_manifest(&self, hash: &str) -> Result<Manifest, EnvError> {
        let path = self.tree_dir(hash).join("manifest.json");
        let text = fs::read(&path).map_err(io_err(&path))?;
        serde_json::from_slice(&text).map_err(|e| corrupt(&path, e))
    }

    /// Replaces `trees/<hash>/stamp.bin` (the folder is 0555: opened for
    /// the write, sealed again after).
    fn save_stamp(&self, hash: &str, stamp: &[u8]) -> io::Result<()> {
        let dir = self.tree_dir(hash);
        let path = dir.join(stamp::FILE);
        let tmp = dir.join(format!(".{}.{}", stamp::FILE, fsx::random_hex()));
        fsx::chmod(&dir, 0o755)?;
        let written = fs::write(&tmp, stamp)
            .and_then(|()| fsx::chmod(&tmp, 0o444))
            .and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        let sealed = fsx::chmod(&dir, 0o555);
        written.and(sealed)
    }

    /// Takes a shared lease on a held tree.
    pub fn lease(&self, hash: &str) -> Result<Lease, EnvError> {
        if !is_hex_digest(hash) {
            return Err(EnvError::NotFound {
                what: format!("with hash {hash}"),
            });
        }
        let lock = self.lock_lease(hash)?;
        let tree = self.tree_path(hash);
        if !self.tree_dir(hash).join("manifest.json").exists() {
            return Err(EnvError::NotFound {
                what: format!("with hash {hash}"),
            });
        }
        Ok(Lease {
            hash: hash.to_owned(),
            tree,
            _lock: lock,
        })
    }

    /// Opens `leases/<hash>.lock` and holds a shared lock on it; retries
    /// when a collection unlinked the file between the open and the lock.
    fn lock_lease(&self, hash: &str) -> Result<File, EnvError> {
        let path = self.root.join("leases").join(format!("{hash}.lock"));
        loop {
            let file = open_lock(&path)?;
            fsx::lock_shared(&file).map_err(io_err(&path))?;
            if same_file(&file, &path) {
                return Ok(file);
            }
        }
    }

    /// Removes every tree no record names and nobody leases.
    pub fn gc(&self) -> Result<GcReport, EnvError> {
        let mut report = GcReport::default();
        let trees = self.root.join("trees");
        let referenced: HashSet<String> = self.list()?.into_iter().map(|r| r.hash).collect();
        let mut held = Vec::new();
        for entry in fs::read_dir(&trees).map_err(io_err(&trees))? {
            let name = entry.map_err(io_err(&trees))?.file_name();
            if let Some(name) = name.to_str().filter(|n| is_hex_digest(n)) {
                held.push(name.to_owned());
            }
        }
        held.sort();
        for hash in held {
            if referenced.contains(&hash) {
                continue;
            }
            let path = self.root.join("leases").join(format!("{hash}.lock"));
            let file = open_lock(&path)?;
            match fsx::try_flock(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    report.in_use.push(hash);
                    continue;
                }
                Err(e) => return Err(io_err(&path)(e)),
            }
            if !same_file(&file, &path) {
                continue; // another collection removed it meanwhile
            }
            // A publish that finished while we looked holds no lease any
            // more but has written its record: look again under the lock.
            if self.is_referenced(&hash)? {
                continue;
            }
            let doomed = self
                .root
                .join("tmp")
                .join(format!("gc-{}", fsx::random_hex()));
            let dir = self.tree_dir(&hash);
            fs::rename(&dir, &doomed).map_err(io_err(&dir))?;
            fsx::remove_tree(&doomed).map_err(io_err(&doomed))?;
            fs::remove_file(&path).map_err(io_err(&path))?;
            report.removed.push(hash);
        }
        self.sweep_leases()?;
        Ok(report)
    }

    /// Removes lease files of trees that are not held (a lease asked for a
    /// missing hash leaves one), unless someone holds them.
    fn sweep_leases(&self) -> Result<(), EnvError> {
        let dir = self.root.join("leases");
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let path = entry.map_err(io_err(&dir))?.path();
            let Some(hash) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".lock"))
                .filter(|h| is_hex_digest(h))
            else {
                continue;
            };
            if self.tree_dir(hash).exists() {
                continue;
            }
            let file = open_lock(&path)?;
            if fsx::try_flock(&file).is_ok()
                && same_file(&file, &path)
                && !self.tree_dir(hash).exists()
            {
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
        Ok(())
    }

    fn is_referenced(&self, hash: &str) -> Result<bool, EnvError> {
        let dir = self.root.join("records");
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let sub = entry.map_err(io_err(&dir))?.path();
            if sub.join(format!("{hash}.json")).exists() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn open_lock(path: &Path) -> Result<File, EnvError> {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))
}

/// True when the open `file` is still the one at `path`.
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn read_record(path: &Path) -> Result<Record, EnvError> {
    let text = fs::read(path).map_err(io_err(path))?;
    serde_json::from_slice(&text).map_err(|e| corrupt(path, e))
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), EnvError> {
    let text = serde_json::to_vec_pretty(value).map_err(|e| corrupt(path, e))?;
    fs::write(path, text).map_err(io_err(path))
}

fn counts(entries: &[Entry]) -> (u64, u64, u64) {
    let (mut files, mut links, mut bytes) = (0, 0, 0);
    for e in entries {
        match e.kind {
            EntryKind::File { size, .. } => {
                files += 1;
                bytes += size;
            }
            EntryKind::Symlink { .. } => links += 1,
        }
    }
    (files, links, bytes)
}

/// Lists the tree at `root` without following symlinks: files and
/// symlinks in hash order, every path and target checked, every limit
/// counted. Anything else (FIFO, socket, device) is refused by name.
pub fn list_tree(root: &Path, limits: &EnvLimits) -> Result<Vec<Entry>, EnvError> {
    let meta = fs::symlink_metadata(root).map_err(|source| EnvError::ReadSource {
        path: root.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(EnvError::NotFolder {
            path: root.to_owned(),
        });
    }
    let mut out = Vec::new();
    let (mut bytes, mut folders) = (0u64, 0u64);
    walk(root, "", limits, &mut bytes, &mut folders, &mut out)?;
    tree::sort_entries(&mut out);
    Ok(out)
}

fn walk(
    dir: &Path,
    prefix: &str,
    limits: &EnvLimits,
    bytes: &mut u64,
    folders: &mut u64,
    out: &mut Vec<Entry>,
) -> Result<(), EnvError> {
    let read_err = |source| EnvError::ReadSource {
        path: dir.to_owned(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let path = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| EnvError::NotUtf8 { path: path.clone() })?;
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        tree::check_path(&rel).map_err(|source| EnvError::Tree {
            path: path.clone(),
            source,
        })?;
        // DirEntry::metadata does not follow symlinks.
        let meta = entry.metadata().map_err(|source| EnvError::ReadSource {
            path: path.clone(),
            source,
        })?;
        let ty = meta.file_type();
        let kind = if ty.is_dir() {
            // Folders count against the bound too: a tree of empty
            // folders is no cheaper to walk.
            *folders += 1;
            if out.len() as u64 + *folders > limits.max_entries {
                return Err(EnvError::TooManyEntries {
                    limit: limits.max_entries,
                });
            }
            walk(&path, &rel, limits, bytes, folders, out)?;
            continue;
        } else if ty.is_file() {
            // A second name elsewhere could be a file the publisher may
            // not read but the runner may (a root runner's `env add`).
            if meta.nlink() > 1 {
                return Err(EnvError::HardLinked {
                    path,
                    links: meta.nlink(),
                });
            }
            let size = meta.len();
            if size > limits.max_file_bytes {
                return Err(EnvError::FileTooLarge {
                    path,
                    size,
                    limit: limits.max_file_bytes,
                });
            }
            *bytes += size;
            if *bytes > limits.max_bytes {
                return Err(EnvError::TooLarge {
                    limit: limits.max_bytes,
                });
            }
            EntryKind::File {
                size,
                exec: meta.permissions().mode() & 0o111 != 0,
            }
        } else if ty.is_symlink() {
            let target = fs::read_link(&path).map_err(|source| EnvError::ReadSource {
                path: path.clone(),
                source,
            })?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|_| EnvError::NotUtf8 { path: path.clone() })?;
            tree::check_target(&rel, &target).map_err(|source| EnvError::Tree {
                path: path.clone(),
                source,
            })?;
            EntryKind::Symlink { target }
        } else {
            return Err(EnvError::NotAdmissible {
                path,
                kind: crate::package::source::kind_name(&ty),
            });
        };
        out.push(Entry { path: rel, kind });
        if out.len() as u64 + *folders > limits.max_entries {
            return Err(EnvError::TooManyEntries {
                limit: limits.max_entries,
            });
        }
    }
    Ok(())
}

/// Reads every listed entry below `src` (files opened without following
/// any symlink) and computes the manifest; with `dest`, writes each entry
/// there as it is hashed, so the hash is of the bytes written.
fn hash_entries(src: &Path, entries: &[Entry], dest: Option<&Path>) -> Result<Manifest, EnvError> {
    const CHUNK: usize = 1 << 20;
    let root = fsx::open_dir_nofollow(src).map_err(|source| EnvError::ReadSource {
        path: src.to_owned(),
        source,
    })?;
    let mut hasher = TreeHasher::new();
    let mut out = Vec::with_capacity(entries.len());
    let mut buf = vec![0u8; CHUNK];
    let tree_err = |path: &str| {
        let path = src.join(path);
        move |source| EnvError::Tree { path, source }
    };
    for entry in entries {
        let path = src.join(&entry.path);
        let target = dest.map(|d| d.join(&entry.path));
        if let Some(parent) = target.as_ref().and_then(|t| t.parent()) {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        match &entry.kind {
            EntryKind::File { size, exec } => {
                let read_err = |source| EnvError::ReadSource {
                    path: path.clone(),
                    source,
                };
                let mut file = fsx::open_beneath(&root, &entry.path).map_err(read_err)?;
                let meta = file.metadata().map_err(read_err)?;
                if !meta.is_file() || meta.len() != *size {
                    return Err(EnvError::Changed { path });
                }
                // Linked since it was listed: the same refusal.
                if meta.nlink() > 1 {
                    return Err(EnvError::HardLinked {
                        path,
                        links: meta.nlink(),
                    });
                }
                let mut copy = match &target {
                    Some(t) => Some(
                        fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(0o600)
                            .open(t)
                            .map_err(io_err(t))?,
                    ),
                    None => None,
                };
                hasher
                    .begin_file(&entry.path, *size, *exec)
                    .map_err(tree_err(&entry.path))?;
                let mut sha = Sha256::new();
                let mut done = 0u64;
                loop {
                    let n = file.read(&mut buf).map_err(read_err)?;
                    if n == 0 {
                        break;
                    }
                    done += n as u64;
                    if done > *size {
                        return Err(EnvError::Changed { path });
                    }
                    hasher.update(&buf[..n]).map_err(tree_err(&entry.path))?;
                    sha.update(&buf[..n]);
                    if let (Some(c), Some(t)) = (copy.as_mut(), &target) {
                        c.write_all(&buf[..n]).map_err(io_err(t))?;
                    }
                }
                if done != *size {
                    return Err(EnvError::Changed { path });
                }
                out.push(ManifestEntry {
                    path: entry.path.clone(),
                    kind: if *exec { "exec" } else { "file" }.into(),
                    size: Some(*size),
                    sha256: Some(crate::text::to_hex(&sha.finalize())),
                    target: None,
                });
            }
            EntryKind::Symlink { target: link } => {
                // Read again: what is made must be what was checked.
                let now = fs::read_link(&path).map_err(|source| EnvError::ReadSource {
                    path: path.clone(),
                    source,
                })?;
                if now.as_os_str() != link.as_str() {
                    return Err(EnvError::Changed { path });
                }
                hasher
                    .symlink(&entry.path, link)
                    .map_err(tree_err(&entry.path))?;
                if let Some(t) = &target {
                    std::os::unix::fs::symlink(link, t).map_err(io_err(t))?;
                }
                out.push(ManifestEntry {
                    path: entry.path.clone(),
                    kind: "symlink".into(),
                    size: None,
                    sha256: None,
                    target: Some(link.clone()),
                });
            }
        }
    }
    let hash = hasher.finish().map_err(tree_err(""))?;
    Ok(Manifest { hash, entries: out })
}

fn copy_hashing(src: &Path, entries: &[Entry], dest: &Path) -> Result<Manifest, EnvError> {
    hash_entries(src, entries, Some(dest))
}

fn hash_tree(root: &Path, entries: &[Entry]) -> Result<Manifest, EnvError> {
    hash_entries(root, entries, None)
}

/// Lists and hashes the tree at `root` without copying it: what `env add`
/// would publish it as.
pub fn hash_dir(root: &Path, limits: &EnvLimits) -> Result<Manifest, EnvError> {
    let entries = list_tree(root, limits)?;
    hash_tree(root, &entries)
}

/// The folders the entries imply, deepest first.
fn folders(entries: &[Entry]) -> Vec<String> {
    folders_of(entries.iter().map(|e| e.path.as_str()))
}

fn folders_of<'a>(paths: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut set = BTreeSet::new();
    for mut path in paths {
        while let Some((parent, _)) = path.rsplit_once('/') {
            set.insert(parent.to_owned());
            path = parent;
        }
    }
    let mut out: Vec<String> = set.into_iter().collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    out
}

/// Files 0444 (0555 when executable), folders 0555, deepest first; the
/// staged tree is private, so paths are safe to use here.
fn seal(root: &Path, entries: &[Entry]) -> Result<(), EnvError> {
    for e in entries {
        if let EntryKind::File { exec, .. } = e.kind {
            let p = root.join(&e.path);
            fsx::chmod(&p, if exec { 0o555 } else { 0o444 }).map_err(io_err(&p))?;
        }
    }
    for f in folders(entries) {
        let p = root.join(f);
        fsx::chmod(&p, 0o555).map_err(io_err(&p))?;
    }
    fsx::chmod(root, 0o555).map_err(io_err(root))
}

/// Checks a stored tree is still sealed: no entry or folder writable.
fn check_seal(root: &Path, entries: &[Entry]) -> Result<(), String> {
    let mode_of = |rel: &str| -> Result<u32, String> {
        let p = if rel.is_empty() {
            root.to_owned()
        } else {
            root.join(rel)
        };
        fs::symlink_metadata(&p)
            .map(|m| m.permissions().mode() & 0o7777)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    for e in entries {
        if let EntryKind::File { exec, .. } = e.kind {
            let want = if exec { 0o555 } else { 0o444 };
            let got = mode_of(&e.path)?;
            if got != want {
                return Err(format!(
                    "{:?} has mode {got:o}, not the sealed {want:o}",
                    e.path
                ));
            }
        }
    }
    for f in folders(entries).iter().map(String::as_str).chain([""]) {
        let got = mode_of(f)?;
        if got != 0o555 {
            return Err(format!(
                "folder {:?} has mode {got:o}, not the sealed 555",
                if f.is_empty() { "." } else { f }
            ));
        }
    }
    Ok(())
}

/// Names the first difference between what was published and what is there.
fn first_change(want: &Manifest, got: &Manifest) -> String {
    let mut w = want.entries.iter().peekable();
    let mut g = got.entries.iter().peekable();
    loop {
        match (w.peek(), g.peek()) {
            (None, None) => return "its manifest does not match its name".into(),
            (Some(a), None) => return format!("{:?} is missing", a.path),
            (None, Some(b)) => return format!("{:?} was added", b.path),
            (Some(a), Some(b)) => {
                match a.path.as_bytes().cmp(b.path.as_bytes()) {
                    std::cmp::Ordering::Less => return format!("{:?} is missing", a.path),
                    std::cmp::Ordering::Greater => return format!("{:?} was added", b.path),
                    std::cmp::Ordering::Equal => {}
                }
                if a.kind != b.kind {
                    return format!(
                        "{:?} was {} and is now {}",
                        a.path,
                        describe(&a.kind),
                        describe(&b.kind)
                    );
                }
                if a != b {
                    return match a.kind.as_str() {
                        "symlink" => format!("symlink {:?} points elsewhere", a.path),
                        _ => format!("the bytes of {:?} changed", a.path),
                    };
                }
                w.next();
                g.next();
            }
        }
    }
}

/// A person's words for a manifest kind.
fn describe(kind: &str) -> &'static str {
    match kind {
        "exec" => "an executable file",
        "symlink" => "a symlink",
        _ => "a file",
    }
}

/// The stamp of the sealed tree at `tree` over its root, every folder the
/// entries imply and every entry.
fn take_stamp<'a>(tree: &Path, paths: impl Iterator<Item = &'a str>) -> Result<Vec<u8>, EnvError> {
    let paths: Vec<&str> = paths.collect();
    let mut all = folders_of(paths.iter().copied());
    all.extend(paths.iter().map(|p| (*p).to_owned()));
    let root = fsx::open_dir_nofollow(tree).map_err(io_err(tree))?;
    stamp::take(&root, all.iter().map(String::as_str)).map_err(io_err(tree))
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
