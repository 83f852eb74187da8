//! The skill catalog: the skills this host offers by name, before any of
//! them is frozen.
//!
//! Sources, merged by precedence (later wins when two define one name):
//!
//! | order | layer | folders (see [`CatalogConfig::from_env`]) |
//! |---|---|---|
//! | 1 | built-in | compiled into the binary from `runner/skills/` |
//! | 2 | user | `~/.agents/skills`, then `<data-dir>/skills` |
//! | 3 | project | `./.agents/skills`, then `./skills` |
//!
//! Within a layer, later folders win too. The entry that wins lists the
//! ones it shadows. Inside one folder a name defined twice keeps the first
//! (in path order) and warns about the second.
//!
//! Invariants:
//! - scans are bounded: depth, folders visited and skills per source
//!   ([`CatalogConfig`]); reaching a bound is a warning, never a hang;
//! - an invalid skill is skipped with a [`Warning`] naming the file and the
//!   reason, never silently;
//! - the user and project layers are cached in an index file, a source
//!   used only while every folder it saw is unchanged, and a skill whose
//!   `SKILL.md` is unchanged not parsed again when its source is rescanned
//!   ([`index`]);
//! - the catalog only points at skills: [`Catalog::read_files`] reads a
//!   skill's bytes when a session freezes it, and the session hashes and
//!   publishes exactly what was read (see [`crate::skillhost::session`]). Nothing the
//!   scan saw earlier is trusted for the bytes.

pub mod index;
pub mod rank;
pub mod render;
mod scan;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ErrorKind;
use crate::package::format::{self, PackageError, PackageLimits};
use crate::package::source::ListError;
pub use rank::{Doc, FindResult, Hit, RankIndex, Rankable};
pub use scan::{Bounds, Found};

/// A problem found while scanning: the file, and why the skill was skipped
/// (or, for a name that differs from its folder, what was done).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Warning {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// Where a catalog source sits in the precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Builtin,
    User,
    Project,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Builtin => "builtin",
            Layer::User => "user",
            Layer::Project => "project",
        }
    }
}

/// Whether a skill is `SKILL.md` alone, or needs more files (and so a
/// session with file tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillKind {
    InstructionOnly,
    WithFiles,
}

impl SkillKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SkillKind::InstructionOnly => "instruction_only",
            SkillKind::WithFiles => "with_files",
        }
    }

    /// The kind of a package with `files` files (`SKILL.md` included).
    pub fn of(files: usize) -> SkillKind {
        if files > 1 {
            SkillKind::WithFiles
        } else {
            SkillKind::InstructionOnly
        }
    }
}

/// A skill shipped inside the binary.
#[derive(Debug)]
pub struct BuiltinSkill {
    /// Its folder under `runner/skills/`.
    pub dir: &'static str,
    /// `(path, text)`; all built-in files are UTF-8.
    pub files: &'static [(&'static str, &'static str)],
}

/// The built-in skills, compiled in from `runner/skills/`.
pub static BUILTIN: &[BuiltinSkill] = &[
    BuiltinSkill {
        dir: "sandbox-basics",
        files: &[(
            "SKILL.md",
            include_str!("../../../skills/sandbox-basics/SKILL.md"),
        )],
    },
    BuiltinSkill {
        dir: "skill-authoring",
        files: &[
            (
                "SKILL.md",
                include_str!("../../../skills/skill-authoring/SKILL.md"),
            ),
            (
                "references/front-matter.md",
                include_str!("../../../skills/skill-authoring/references/front-matter.md"),
            ),
        ],
    },
];

/// Where the catalog looks, and how far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogConfig {
    /// Include the built-in skills.
    pub builtin: bool,
    /// User folders, lowest precedence first. Cached in `index`.
    pub user_dirs: Vec<PathBuf>,
    /// Project folders, lowest precedence first. Cached in `index` too.
    pub project_dirs: Vec<PathBuf>,
    /// Skill folders may sit at most this many levels below a source.
    pub max_depth: usize,
    /// Folders visited per source.
    pub max_folders: usize,
    /// Skills per source.
    pub max_skills: usize,
    /// Package limits each skill must fit (docs/formats.md).
    pub limits: PackageLimits,
    /// The index file caching the user and project layers; `None`: no cache.
    pub index: Option<PathBuf>,
    /// Stamps this close before a scan are not trusted ([`index`]).
    pub racy_window: Duration,
}

impl Default for CatalogConfig {
    /// Built-in skills only; no folders, no index.
    fn default() -> Self {
        CatalogConfig {
            builtin: true,
            user_dirs: Vec::new(),
            project_dirs: Vec::new(),
            max_depth: 3,
            max_folders: 100_000,
            max_skills: 20_000,
            limits: PackageLimits::default(),
            index: None,
            racy_window: Duration::from_secs(2),
        }
    }
}

impl CatalogConfig {
    /// The standard sources: built-in; user `<home>/.agents/skills` and
    /// `<data-dir>/skills`; project `<cwd>/.agents/skills` and
    /// `<cwd>/skills`; index at `<data-dir>/cache/catalog-index.json`.
    pub fn from_env(
        cwd: &Path,
        home: Option<&Path>,
        data: &crate::datadir::DataDir,
    ) -> CatalogConfig {
        let mut user_dirs = Vec::new();
        if let Some(home) = home {
            user_dirs.push(home.join(".agents/skills"));
        }
        user_dirs.push(data.skills());
        CatalogConfig {
            user_dirs,
            project_dirs: vec![cwd.join(".agents/skills"), cwd.join("skills")],
            index: Some(data.cache().join("catalog-index.json")),
            ..CatalogConfig::default()
        }
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            max_depth: self.max_depth,
            max_folders: self.max_folders,
            max_skills: self.max_skills,
            limits: self.limits,
        }
    }
}

/// Where a shadowed definition was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub source: Layer,
    /// The skill folder; `None` for a built-in skill.
    pub path: Option<PathBuf>,
}

/// One skill of the merged catalog.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// `metadata.version` of its `SKILL.md`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub kind: SkillKind,
    /// Files in the package, `SKILL.md` included.
    pub files: usize,
    pub source: Layer,
    /// The skill folder; `None` for a built-in skill.
    pub path: Option<PathBuf>,
    /// Definitions of the same name this one overrides, lowest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<Location>,
    /// The compiled-in files of a built-in skill.
    #[serde(skip)]
    pub builtin: Option<&'static BuiltinSkill>,
    /// The headings of its `SKILL.md` body, one a line, for ranking.
    #[serde(skip)]
    pub headings: String,
}

impl Rankable for Entry {
    fn hit(&self, score: u32) -> Hit {
        Hit {
            name: self.name.clone(),
            description: self.description.clone(),
            category: self.category.clone(),
            score,
            explain: None,
        }
    }
}

/// What a load did: how many sources were scanned or taken from the index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    /// Sources read from disk this time (a missing folder is not counted).
    pub scanned: usize,
    /// Sources taken from the index.
    pub from_index: usize,
    /// Whether the index file was rewritten.
    pub index_written: bool,
    /// `SKILL.md` files parsed this time (an unchanged skill of a source
    /// scanned again is taken from the index instead).
    pub parsed: usize,
}

/// Why a catalog lookup or read failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{name:?} is not a valid skill name: names are lowercase letters and digits in words joined by single hyphens (e.g. \"csv-report\")")]
    BadName { name: String },
    #[error("no skill named {name:?} in the catalog{hint}; run skill-runner catalog list to see the names")]
    NotFound { name: String, hint: String },
    #[error("skill {name:?} ({path}) cannot be read as a package: {source}")]
    ReadSkill {
        name: String,
        path: PathBuf,
        source: ListError,
    },
}

impl CatalogError {
    /// The error kind of the error documents (docs/formats.md).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CatalogError::BadName { .. } => ErrorKind::BadRequest,
            CatalogError::NotFound { .. } => ErrorKind::NotFound,
            CatalogError::ReadSkill { .. } => ErrorKind::BadPackage,
        }
    }
}

/// The merged catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: Vec<Entry>,
    /// `entries` for [`Catalog::find`], in the same order; built on the
    /// first find (a load that only lists or looks up does not pay).
    index: std::sync::OnceLock<RankIndex>,
    warnings: Vec<Warning>,
    stats: ScanStats,
}

/// A string value of `metadata.<key>` (numbers are spelled as text).
pub fn metadata_str(metadata: &Option<serde_yaml_ng::Value>, key: &str) -> Option<String> {
    use serde_yaml_ng::Value;
    match metadata.as_ref()?.get(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn builtin_found(b: &'static BuiltinSkill) -> Result<Found, Warning> {
    let warn = |reason: String| Warning {
        path: PathBuf::from(format!("builtin:{}/SKILL.md", b.dir)),
        reason,
    };
    let md = b
        .files
        .iter()
        .find(|f| f.0 == format::SKILL_MD)
        .ok_or_else(|| warn("has no SKILL.md".into()))?;
    let doc = format::parse_skill_md(md.1.as_bytes()).map_err(|e| warn(e.to_string()))?;
    Ok(Found {
        name: doc.front.name.clone(),
        description: doc.front.description.trim().to_owned(),
        category: metadata_str(&doc.front.metadata, "category"),
        version: metadata_str(&doc.front.metadata, "version"),
        headings: rank::headings(&doc.body),
        files: b.files.len(),
        dir: PathBuf::from(b.dir),
    })
}

/// One definition of a name, before the merge.
struct Candidate {
    /// Position of its source in precedence order (later wins).
    source_no: usize,
    layer: Layer,
    builtin: Option<&'static BuiltinSkill>,
    found: Found,
}

impl Candidate {
    fn location(&self) -> Location {
        Location {
            source: self.layer,
            path: self.builtin.is_none().then(|| self.found.dir.clone()),
        }
    }
}

/// Merges definitions by name: sorted by (name, source), the last source
/// wins and lists the others as shadowed; a second definition in the same
/// source is skipped with a warning.
fn merge(mut all: Vec<Candidate>, warnings: &mut Vec<Warning>) -> Vec<Entry> {
    // Stable: within one source, walk order is kept.
    all.sort_by(|a, b| {
        a.found
            .name
            .cmp(&b.found.name)
            .then(a.source_no.cmp(&b.source_no))
    });
    let mut entries = Vec::with_capacity(all.len());
    let mut shadows: Vec<Location> = Vec::new();
    let mut all = all.into_iter().peekable();
    while let Some(mut winner) = all.next() {
        shadows.clear();
        while let Some(next) = all.next_if(|n| n.found.name == winner.found.name) {
            if next.source_no == winner.source_no {
                warnings.push(Warning {
                    path: next.found.dir.join(format::SKILL_MD),
                    reason: format!(
                        "name {:?} is already defined by {} in the same source; this one is skipped",
                        next.found.name,
                        winner.found.dir.display()
                    ),
                });
                continue;
            }
            shadows.push(winner.location());
            winner = next;
        }
        let f = winner.found;
        entries.push(Entry {
            kind: SkillKind::of(f.files),
            name: f.name,
            description: f.description,
            category: f.category,
            version: f.version,
            files: f.files,
            source: winner.layer,
            path: winner.builtin.is_none().then_some(f.dir),
            shadows: shadows.clone(),
            builtin: winner.builtin,
            headings: f.headings,
        });
    }
    entries
}

impl Catalog {
    /// Scans (or takes from the index) every source of `cfg` and merges
    /// them. Never fails: unreadable sources and invalid skills become
    /// warnings; a failure to write the index is a warning too.
    pub fn load(cfg: &CatalogConfig) -> Catalog {
        let bounds = cfg.bounds();
        let mut stats = ScanStats::default();
        let mut warnings = Vec::new();
        // Every definition found, in precedence order of its source.
        let mut found: Vec<Candidate> = Vec::new();
        let mut source_no = 0;

        if cfg.builtin {
            for b in BUILTIN {
                match builtin_found(b) {
                    Ok(f) => found.push(Candidate {
                        source_no,
                        layer: Layer::Builtin,
                        builtin: Some(b),
                        found: f,
                    }),
                    Err(w) => warnings.push(w),
                }
            }
        }

        let mut cached = cfg.index.as_deref().map(index::load).unwrap_or_default();
        let settings = bounds.fingerprint();
        let roots = cfg
            .user_dirs
            .iter()
            .map(|r| (Layer::User, r))
            .chain(cfg.project_dirs.iter().map(|r| (Layer::Project, r)));
        let mut scanned: Vec<(Layer, index::CachedRoot)> = Vec::new();
        let mut dirty = false;
        for (layer, root) in roots {
            let mine = |c: &index::CachedRoot| c.root == *root && c.settings == settings;
            let hit = cached
                .iter()
                .position(|c| mine(c) && c.is_current(cfg.racy_window));
            match hit {
                Some(i) => {
                    stats.from_index += 1;
                    scanned.push((layer, cached.swap_remove(i)));
                }
                None => {
                    // Skills of the stale entry whose SKILL.md is unchanged
                    // are taken from it, not parsed again.
                    let prior = cached
                        .iter()
                        .find(|c| mine(c))
                        .map(|c| {
                            scan::Prior::new(
                                root,
                                &c.stamps,
                                &c.found,
                                c.scanned_at,
                                cfg.racy_window,
                            )
                        })
                        .unwrap_or_default();
                    if let Some(s) = scan::scan_root(root, &bounds, &prior) {
                        stats.scanned += 1;
                        dirty = true;
                        stats.parsed += s.parsed;
                        scanned.push((layer, index::CachedRoot::new(root, settings.clone(), s)));
                    }
                }
            }
        }
        // Left over: stale entries, roots gone or no longer configured.
        dirty |= !cached.is_empty();
        if let (Some(path), true) = (&cfg.index, dirty) {
            let keep: Vec<index::CachedRoot> = scanned.iter().map(|(_, c)| c.clone()).collect();
            match index::save(path, &keep) {
                Ok(()) => stats.index_written = true,
                Err(e) => warnings.push(Warning {
                    path: path.clone(),
                    reason: format!(
                        "the catalog index cannot be written ({e}); the next start scans again"
                    ),
                }),
            }
        }
        for (layer, c) in scanned {
            warnings.extend(c.warnings);
            source_no += 1;
            found.extend(c.found.into_iter().map(|f| Candidate {
                source_no,
                layer,
                builtin: None,
                found: f,
            }));
        }
        tracing::debug!(
            scanned = stats.scanned,
            from_index = stats.from_index,
            parsed = stats.parsed,
            index_written = stats.index_written,
            "catalog loaded"
        );
        let entries = merge(found, &mut warnings);
        Catalog {
            entries,
            index: std::sync::OnceLock::new(),
            warnings,
            stats,
        }
    }

    fn rank_index(&self) -> &RankIndex {
        self.index.get_or_init(|| {
            RankIndex::new(self.entries.iter().map(|e| Doc {
                name: &e.name,
                description: &e.description,
                headings: &e.headings,
            }))
        })
    }

    /// Every skill, sorted by name.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Problems met while scanning.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    pub fn stats(&self) -> &ScanStats {
        &self.stats
    }

    /// The skill named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Like [`Catalog::get`], with a clear error for a malformed or
    /// unknown name (suggesting close names).
    pub fn lookup(&self, name: &str) -> Result<&Entry, CatalogError> {
        if format::check_id(name).is_err() {
            return Err(CatalogError::BadName {
                name: name.to_owned(),
            });
        }
        self.get(name).ok_or_else(|| {
            let r = rank::find(&self.entries, self.rank_index(), name, 3);
            let close: Vec<String> = if r.suggestions.is_empty() {
                r.hits.into_iter().map(|h| h.name).collect()
            } else {
                r.suggestions
            };
            CatalogError::NotFound {
                name: name.to_owned(),
                hint: if close.is_empty() {
                    String::new()
                } else {
                    format!(" (close: {})", close.join(", "))
                },
            }
        })
    }

    /// Ranks the catalog against `query` ([`rank`]); `limit` is clamped
    /// to 1..=[`rank::MAX_LIMIT`].
    pub fn find(&self, query: &str, limit: usize) -> FindResult {
        rank::find(
            &self.entries,
            self.rank_index(),
            query,
            limit.clamp(1, rank::MAX_LIMIT),
        )
    }

    /// [`Catalog::find`], with why each skill ranked where it did
    /// (`catalog find --explain`).
    pub fn find_explained(&self, query: &str, limit: usize) -> FindResult {
        rank::find_explained(
            &self.entries,
            self.rank_index(),
            query,
            limit.clamp(1, rank::MAX_LIMIT),
        )
    }

    /// Reads a skill's files now, in package-hash order, for freezing.
    /// A folder is read without following symlinks and must be a valid
    /// package (docs/formats.md).
    pub fn read_files(
        entry: &Entry,
        limits: &PackageLimits,
    ) -> Result<Vec<(String, Vec<u8>)>, CatalogError> {
        if let Some(b) = entry.builtin {
            let mut files: Vec<(String, Vec<u8>)> = b
                .files
                .iter()
                .map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec()))
                .collect();
            crate::package::hash::sort_utf16(&mut files, |f| &f.0);
            return Ok(files);
        }
        let dir = entry.path.as_deref().unwrap_or(Path::new("."));
        crate::package::source::read_dir_files(dir, limits).map_err(|source| {
            CatalogError::ReadSkill {
                name: entry.name.clone(),
                path: dir.to_owned(),
                source,
            }
        })
    }
}

/// Checks a skill name as the catalog and the session routes accept it.
pub fn check_name(name: &str) -> Result<(), CatalogError> {
    format::check_id(name).map_err(|_: PackageError| CatalogError::BadName {
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_skills_are_valid_packages() {
        for b in BUILTIN {
            let f = builtin_found(b).unwrap_or_else(|w| panic!("{w}"));
            assert_eq!(f.name, b.dir, "a built-in skill's name is its folder");
            format::check_id(&f.name).unwrap();
            let mut tally = format::LimitTally::new(PackageLimits::default());
            for (p, t) in b.files {
                format::check_path(p).unwrap();
                tally.add(p, t.len() as u64).unwrap();
            }
        }
        let c = Catalog::load(&CatalogConfig::default());
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let names: Vec<&str> = c.entries().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["sandbox-basics", "skill-authoring"]);
        assert_eq!(
            c.get("sandbox-basics").unwrap().kind,
            SkillKind::InstructionOnly
        );
        assert_eq!(c.get("skill-authoring").unwrap().kind, SkillKind::WithFiles);
    }

    #[test]
    fn kind_of() {
        assert_eq!(SkillKind::of(1), SkillKind::InstructionOnly);
        assert_eq!(SkillKind::of(2), SkillKind::WithFiles);
    }

    #[test]
    fn lookup_validates_then_suggests() {
        let c = Catalog::load(&CatalogConfig::default());
        assert!(matches!(
            c.lookup("../x"),
            Err(CatalogError::BadName { .. })
        ));
        assert!(matches!(
            c.lookup("Sandbox"),
            Err(CatalogError::BadName { .. })
        ));
        let e = c.lookup("sandbox-basic").unwrap_err().to_string();
        assert!(e.contains("sandbox-basics"), "{e}");
        assert_eq!(c.lookup("sandbox-basics").unwrap().source, Layer::Builtin);
    }

    fn write_skill(root: &Path, name: &str, description: &str) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format::SKILL_MD),
            format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n"),
        )
        .unwrap();
    }

    #[test]
    fn an_unchanged_project_source_is_not_parsed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("skills");
        write_skill(&project, "alpha", "First.");
        write_skill(&project, "beta", "Second.");
        let cfg = CatalogConfig {
            builtin: false,
            project_dirs: vec![project.clone()],
            index: Some(tmp.path().join("cache/catalog-index.json")),
            // The files were written just now: trust their stamps at once.
            racy_window: Duration::ZERO,
            ..CatalogConfig::default()
        };
        let first = Catalog::load(&cfg);
        assert_eq!(
            (first.stats().scanned, first.stats().parsed),
            (1, 2),
            "{:?}",
            first.stats()
        );
        let again = Catalog::load(&cfg);
        assert_eq!(
            again.stats(),
            &ScanStats {
                scanned: 0,
                from_index: 1,
                index_written: false,
                parsed: 0
            }
        );
        assert_eq!(again.entries().len(), 2);
        assert_eq!(again.get("alpha").unwrap().source, Layer::Project);

        // One skill edited: the source is scanned again, and only that
        // skill's SKILL.md is parsed.
        write_skill(&project, "alpha", "First, and now longer.");
        let edited = Catalog::load(&cfg);
        assert_eq!(
            (edited.stats().scanned, edited.stats().parsed),
            (1, 1),
            "{:?}",
            edited.stats()
        );
        assert_eq!(
            edited.get("alpha").unwrap().description,
            "First, and now longer."
        );
        assert_eq!(edited.get("beta").unwrap().description, "Second.");
        // A new skill is parsed, the others are not.
        write_skill(&project, "gamma", "Third.");
        let added = Catalog::load(&cfg);
        assert_eq!(added.stats().parsed, 1, "{:?}", added.stats());
        assert_eq!(added.entries().len(), 3);
    }

    #[test]
    fn a_skill_changed_in_the_racy_window_is_parsed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("skills");
        write_skill(&project, "alpha", "First.");
        let cfg = CatalogConfig {
            builtin: false,
            project_dirs: vec![project.clone()],
            index: Some(tmp.path().join("index.json")),
            racy_window: Duration::from_secs(3600),
            ..CatalogConfig::default()
        };
        assert_eq!(Catalog::load(&cfg).stats().parsed, 1);
        // Written within the window before the scan: its stamp could hide
        // a change made in the same clock tick, so it is read again.
        let again = Catalog::load(&cfg);
        assert_eq!((again.stats().scanned, again.stats().parsed), (1, 1));
    }
}
