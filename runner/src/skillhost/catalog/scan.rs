//! Scanning one catalog root for skill folders, within bounds.
//!
//! A skill folder is a folder holding `SKILL.md`; the scan does not look
//! inside it for more skills. Other folders are categories and are walked
//! down to `max_depth` levels below the root. Hidden entries (names
//! starting with `.`) and plain files are ignored. A symlink to a folder is
//! followed at the catalog level (skills are often linked into
//! `~/.agents/skills`), never inside a package, where it makes the package
//! invalid as it does everywhere else (docs/formats.md).
//!
//! Every problem is a [`Warning`] naming the file and the reason, and the
//! skill is skipped: a bad `SKILL.md`, a name that is not a valid skill
//! name, a package the store would refuse (a symlink, a FIFO, a limit), a
//! bound reached. Every folder walked and every `SKILL.md` read is stamped
//! for the index ([`super::index`]).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{metadata_str, Warning};
use crate::package::format::{self, PackageLimits, SKILL_MD};
use crate::package::source;

/// How far a scan may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Skill folders may sit at most this many levels below the root.
    pub max_depth: usize,
    /// Folders visited per root, inside packages included.
    pub max_folders: usize,
    /// Skills per root.
    pub max_skills: usize,
    /// Package limits a skill must fit.
    pub limits: PackageLimits,
}

impl Bounds {
    /// The settings as text, so a cached scan made with others is not used.
    pub fn fingerprint(&self) -> String {
        let l = self.limits;
        format!(
            "depth={} folders={} skills={} files={} skill_md={} file={} package={}",
            self.max_depth,
            self.max_folders,
            self.max_skills,
            l.max_files,
            l.max_skill_md_bytes,
            l.max_file_bytes,
            l.max_package_bytes
        )
    }
}

/// A skill as a scan found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Found {
    pub name: String,
    pub description: String,
    pub category: Option<String>,
    pub version: Option<String>,
    /// Number of files, `SKILL.md` included.
    pub files: usize,
    pub dir: PathBuf,
    /// The headings of the `SKILL.md` body, one a line (for ranking).
    pub headings: String,
}

/// The outcome of scanning one root.
#[derive(Debug, Clone)]
pub struct RootScan {
    pub started: SystemTime,
    pub found: Vec<Found>,
    pub warnings: Vec<Warning>,
    pub stamps: Vec<Stamp>,
    /// `SKILL.md` files parsed (the others were taken from [`Prior`]).
    pub parsed: usize,
}

/// The skills of an earlier scan of the same root with the same bounds,
/// by the stamp of their `SKILL.md`: a skill whose `SKILL.md` still has
/// that stamp (and had it well before that scan, so not racy) is taken
/// from there instead of being parsed again.
#[derive(Debug, Default)]
pub struct Prior {
    by_md: HashMap<String, (Stamp, Found)>,
}

impl Prior {
    /// From an earlier scan of `root`: its stamps and skills, and when it
    /// started (nanoseconds since the epoch, as the index keeps it).
    pub fn new(
        root: &Path,
        stamps: &[Stamp],
        found: &[Found],
        scanned_at: i128,
        racy: Duration,
    ) -> Prior {
        let trusted_before = scanned_at - racy.as_nanos() as i128;
        let stamps: HashMap<&str, &Stamp> = stamps
            .iter()
            .filter(|s| s.nanos() < trusted_before)
            .map(|s| (s.0.as_str(), s))
            .collect();
        let by_md = found
            .iter()
            .filter_map(|f| {
                let stamp = *stamps.get(rel_to(root, &f.dir.join(SKILL_MD)).as_str())?;
                Some((stamp.0.clone(), (stamp.clone(), f.clone())))
            })
            .collect();
        Prior { by_md }
    }
}

/// How a stamp names `path`: relative to the root, or absolute outside it.
fn rel_to(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(r) => r.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

struct Walk<'a> {
    bounds: &'a Bounds,
    root: &'a Path,
    prior: &'a Prior,
    folders: usize,
    stopped: bool,
    out: RootScan,
}

/// Scans `root`; `None` when it does not exist (the usual case for most
/// of the default roots). Skills `prior` holds unchanged are not parsed
/// again.
pub fn scan_root(root: &Path, bounds: &Bounds, prior: &Prior) -> Option<RootScan> {
    let started = SystemTime::now();
    let meta = fs::metadata(root).ok()?;
    let mut walk = Walk {
        bounds,
        root,
        prior,
        folders: 0,
        stopped: false,
        out: RootScan {
            started,
            found: Vec::new(),
            warnings: Vec::new(),
            stamps: Vec::new(),
            parsed: 0,
        },
    };
    if meta.is_dir() {
        walk.visit(root, "", 0);
    } else {
        walk.warn(
            root,
            "is not a folder; a catalog source must be a folder of skill folders",
        );
    }
    Some(walk.out)
}

impl Walk<'_> {
    fn warn(&mut self, path: &Path, reason: impl Into<String>) {
        self.out.warnings.push(Warning {
            path: path.to_owned(),
            reason: reason.into(),
        });
    }

    /// Records the stamp of `path`; returns it (`None`: unreadable).
    fn stamp(&mut self, path: &Path) -> Option<Stamp> {
        let s = Stamp::take(path, rel_to(self.root, path))?;
        self.out.stamps.push(s.clone());
        Some(s)
    }

    /// Counts a folder; false once the bound is reached (warned once).
    fn count_folder(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        self.folders += 1;
        if self.folders > self.bounds.max_folders {
            self.stopped = true;
            let reason = format!(
                "the scan stopped after {} folders (max_folders); skills past that point are not listed",
                self.bounds.max_folders
            );
            let root = self.root.to_owned();
            self.warn(&root, reason);
            return false;
        }
        true
    }

    fn visit(&mut self, dir: &Path, rel: &str, depth: usize) {
        if !self.count_folder() {
            return;
        }
        self.stamp(dir);
        if fs::symlink_metadata(dir.join(SKILL_MD)).is_ok() {
            self.skill(dir, rel);
            return;
        }
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.warn(dir, format!("cannot be read: {e}"));
                return;
            }
        };
        let mut subdirs: Vec<(String, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let Ok(ty) = entry.file_type() else { continue };
            let path = entry.path();
            let is_dir = ty.is_dir() || (ty.is_symlink() && path.is_dir());
            if is_dir {
                subdirs.push((name, path));
            }
        }
        if subdirs.is_empty() {
            return;
        }
        if depth >= self.bounds.max_depth {
            self.warn(
                dir,
                format!(
                    "is {depth} levels below the source; folders below it are not scanned (max_depth {})",
                    self.bounds.max_depth
                ),
            );
            return;
        }
        subdirs.sort();
        for (name, path) in subdirs {
            if self.stopped {
                return;
            }
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            self.visit(&path, &child, depth + 1);
        }
    }

    /// Reads one skill folder; warns and skips it when it is not valid.
    fn skill(&mut self, dir: &Path, rel: &str) {
        if self.out.found.len() >= self.bounds.max_skills {
            if !self.stopped {
                self.stopped = true;
                let reason = format!(
                    "the scan stopped after {} skills (max_skills); skills past that point are not listed",
                    self.bounds.max_skills
                );
                let root = self.root.to_owned();
                self.warn(&root, reason);
            }
            return;
        }
        // A symlinked skill folder is read through its target: packages
        // are opened without following a symlink at their root.
        let real;
        let dir = if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            match dir.canonicalize() {
                Ok(p) => {
                    real = p;
                    real.as_path()
                }
                Err(e) => {
                    self.warn(dir, format!("cannot be resolved: {e}"));
                    return;
                }
            }
        } else {
            dir
        };
        let md_path = dir.join(SKILL_MD);
        let md_stamp = self.stamp(&md_path);
        let (files, folders) = match source::list_dir_with_folders(dir, &self.bounds.limits) {
            Ok(x) => x,
            Err(e) => {
                self.stamp_folders(dir, 0);
                self.warn(dir, format!("is not a valid skill package: {e}"));
                return;
            }
        };
        for f in &folders {
            if !self.count_folder() {
                return;
            }
            self.stamp(&dir.join(f));
        }
        let unchanged = md_stamp.as_ref().and_then(|now| {
            let (then, found) = self.prior.by_md.get(&now.0)?;
            (then == now && found.dir == dir).then(|| found.clone())
        });
        if let Some(mut found) = unchanged {
            // Parsed before, with this very `SKILL.md`: what it said is
            // kept; the package's files were listed again above.
            found.files = files.len();
            self.name_differs(dir, &md_path, &found.name);
            self.out.found.push(found);
            return;
        }
        self.out.parsed += 1;
        let doc = match fs::read(&md_path)
            .map_err(|e| e.to_string())
            .and_then(|b| format::parse_skill_md(&b).map_err(|e| e.to_string()))
        {
            Ok(d) => d,
            Err(reason) => {
                self.warn(&md_path, reason);
                return;
            }
        };
        let name = doc.front.name.trim().to_owned();
        if format::check_id(&name).is_err() {
            self.warn(
                &md_path,
                format!("name {name:?} is not a valid skill name (lowercase letters and digits in words joined by single hyphens, e.g. \"csv-report\"); the skill is skipped"),
            );
            return;
        }
        self.name_differs(dir, &md_path, &name);
        let category = metadata_str(&doc.front.metadata, "category").or_else(|| {
            rel.rsplit_once('/')
                .map(|(parent, _)| parent.to_owned())
                .filter(|p| !p.is_empty())
        });
        self.out.found.push(Found {
            name,
            description: doc.front.description.trim().to_owned(),
            category,
            version: metadata_str(&doc.front.metadata, "version"),
            files: files.len(),
            dir: dir.to_owned(),
            headings: super::rank::headings(&doc.body),
        });
    }

    /// Warns when a skill's name is not its folder's.
    fn name_differs(&mut self, dir: &Path, md_path: &Path, name: &str) {
        let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if folder != name {
            self.warn(
                md_path,
                format!("name {name:?} differs from its folder name {folder:?}; it is listed as {name:?}"),
            );
        }
    }

    /// Stamps the folders of a package that failed to list, so that
    /// fixing it invalidates the index (without following symlinks).
    fn stamp_folders(&mut self, dir: &Path, depth: usize) {
        if depth > source::MAX_DEPTH {
            return;
        }
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if !self.count_folder() {
                    return;
                }
                let path = entry.path();
                self.stamp(&path);
                self.stamp_folders(&path, depth + 1);
            }
        }
    }
}

/// What a folder or file looked like when the scan saw it: path
/// (relative to the root, or absolute outside it; empty for the root),
/// device, inode, size, modification time (seconds, nanoseconds). Kept as
/// a JSON array: an index holds thousands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp(pub String, pub u64, pub u64, pub u64, pub i64, pub i64);

impl Stamp {
    /// The stamp of `path` now, following symlinks as the scan does;
    /// `None` when it cannot be read. `rel` is what the index records.
    pub fn take(path: &Path, rel: String) -> Option<Stamp> {
        let st = nix::sys::stat::stat(path).ok()?;
        Some(Stamp::of(rel, &st))
    }

    fn of(rel: String, st: &nix::sys::stat::FileStat) -> Stamp {
        let (dev, ino, size, mtime, nsec) = fields(st);
        Stamp(rel, dev, ino, size, mtime, nsec)
    }

    /// True when the file still looks the same, looked up from the
    /// root's handle (a short path walk instead of a whole absolute path).
    pub(super) fn still(&self, root: &fs::File) -> bool {
        let st = if self.0.is_empty() {
            nix::sys::stat::fstat(root)
        } else {
            nix::sys::stat::fstatat(root, self.0.as_str(), nix::fcntl::AtFlags::empty())
        };
        st.is_ok_and(|st| fields(&st) == (self.1, self.2, self.3, self.4, self.5))
    }

    pub(super) fn nanos(&self) -> i128 {
        i128::from(self.4) * 1_000_000_000 + i128::from(self.5)
    }
}

/// The stamped fields of a `stat`, in fixed types.
// The `stat` field types differ between Linux and macOS.
#[allow(clippy::unnecessary_cast)]
fn fields(st: &nix::sys::stat::FileStat) -> (u64, u64, u64, i64, i64) {
    (
        st.st_dev as u64,
        st.st_ino as u64,
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
    )
}
