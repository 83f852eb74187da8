//! The catalog index: one file caching the scan of each user and project
//! root, so that a start does not re-read thousands of `SKILL.md` files.
//!
//! Unlike a cache that is rebuilt only when it is missing, a cached root is
//! used only while it is provably current. Its entry records a stamp
//! (device, inode, size, modification time) of every folder the scan
//! walked (the root, category folders, each skill folder and every folder
//! inside it) and of every `SKILL.md`. Adding, removing or renaming
//! anything changes the stamp of the folder that holds it; editing
//! `SKILL.md` in place changes its own stamp; so a cached root is used only
//! when every stamp still matches. Editing another file in place (a script)
//! changes nothing the catalog reports (name, description, kind), and the
//! bytes of a skill are never taken from the catalog: a session reads and
//! hashes the folder again when it freezes the skill.
//!
//! A root that is not current is scanned again, but a skill whose
//! `SKILL.md` still has the stamp its entry recorded (and was not racy
//! then) is taken from the entry rather than parsed again
//! ([`super::scan::Prior`]): editing one skill re-reads that one.
//!
//! Racy stamps: a file changed in the same clock tick as the scan read it
//! keeps an equal stamp. So a stamp whose time is within the racy window
//! (default 2 s) before the scan started is not trusted, and that root is
//! scanned again next time (as git does with its index).
//!
//! The file is written to a private name and renamed into place, so a
//! reader sees the old index or the new one, never half of one. An
//! unreadable or foreign index is ignored and rewritten.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::scan::{Found, RootScan, Stamp};
use super::Warning;

/// Bumped when the file's shape or the meaning of its entries changes
/// (2: skills keep their body's headings, for ranking).
const FORMAT: u32 = 2;

/// The cached scan of one root.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedRoot {
    pub root: PathBuf,
    /// The scan settings it was made with; other settings scan again.
    pub settings: String,
    /// When the scan started, in nanoseconds since the Unix epoch.
    pub scanned_at: i128,
    pub stamps: Vec<Stamp>,
    pub found: Vec<Found>,
    pub warnings: Vec<Warning>,
}

impl CachedRoot {
    pub fn new(root: &Path, settings: String, scan: RootScan) -> CachedRoot {
        CachedRoot {
            root: root.to_owned(),
            settings,
            scanned_at: nanos_since_epoch(scan.started),
            stamps: scan.stamps,
            found: scan.found,
            warnings: scan.warnings,
        }
    }

    /// True when every stamp still matches and none is racy.
    pub fn is_current(&self, racy_window: Duration) -> bool {
        let trusted_before = self.scanned_at - racy_window.as_nanos() as i128;
        if self.stamps.iter().any(|s| s.nanos() >= trusted_before) {
            return false;
        }
        let Ok(root) = fs::File::open(&self.root) else {
            return false;
        };
        // Thousands of stats: split them over two threads when there are
        // enough to pay for a thread (a warm start is mostly these stats).
        const SPLIT_AT: usize = 2048;
        let two = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        if self.stamps.len() < SPLIT_AT || !two {
            return self.stamps.iter().all(|s| s.still(&root));
        }
        let (a, b) = self.stamps.split_at(self.stamps.len() / 2);
        std::thread::scope(|scope| {
            let root = &root;
            let other = scope.spawn(move || b.iter().all(|s| s.still(root)));
            let mine = a.iter().all(|s| s.still(root));
            other.join().unwrap_or(false) && mine
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexFile {
    format: u32,
    roots: Vec<CachedRoot>,
}

fn nanos_since_epoch(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// Reads the index; a missing, unreadable or foreign file is an empty one.
pub fn load(path: &Path) -> Vec<CachedRoot> {
    let Ok(bytes) = fs::read(path) else {
        return Vec::new();
    };
    match serde_json::from_slice::<IndexFile>(&bytes) {
        Ok(f) if f.format == FORMAT => f.roots,
        _ => Vec::new(),
    }
}

/// Writes the index atomically (private file, then rename).
pub fn save(path: &Path, roots: &[CachedRoot]) -> io::Result<()> {
    #[derive(Serialize)]
    struct Out<'a> {
        format: u32,
        roots: &'a [CachedRoot],
    }
    let bytes = serde_json::to_vec(&Out {
        format: FORMAT,
        roots,
    })
    .map_err(io::Error::other)?;
    crate::fsx::write_replace(path, &bytes)
}
