//! Sessions: one agent's frozen selection of skills, and the tool routes
//! that serve it (docs/skill-host.md, the skill host).
//!
//! A session is created from a list of skills (frozen bindings already in
//! the store, or catalog names) and the agent's enabled tools. Creating it
//!
//! 1. resolves every skill to exact bytes: a binding must be in the store;
//!    a catalog name is read from its folder now and hashed; when the store
//!    already holds a binding of that id with that hash (published by
//!    `store add`, a bundle or an earlier session), that binding is frozen
//!    as it is, revision and version included; otherwise the bytes are
//!    published under the skill's next revision, so the revision grows
//!    only when the bytes change;
//! 2. decides the delivery mode from the tools and the skills' kinds, or
//!    refuses the composition ([`delivery`]); a refusal publishes nothing;
//! 3. renders the prompt block and the tool schemas, and writes the session
//!    record `<data-dir>/sessions/<id>.json` once (a private file linked
//!    into place; never rewritten).
//!
//! Invariants:
//! - a session only ever serves the bytes of its bindings, from the
//!   store's sealed trees, each file checked against its pinned hash when
//!   read; later edits to a catalog folder never reach an existing session;
//! - the delivery mode, prompt and tool schemas are fixed in the record at
//!   creation: nothing re-derives them, and no route changes a session;
//! - a resource read stays inside the session's packages: the three path
//!   aliases of docs/formats.md are accepted, anything else (another root, a
//!   `..` that climbs out, a skill not selected, a file not in the
//!   package) is refused, and binary files are refused, never executed;
//! - every load and read that returns content is first recorded as an
//!   event in `<data-dir>/sessions/<id>.events.ndjson` (activation
//!   evidence); if it cannot be recorded, nothing is returned.
//!
//! [`SessionHost`] has one method per route and returns serializable
//! values; its methods block on file I/O (call them from a blocking task in
//! async code). An execution names a session with the job's `session`
//! field, and [`Sessions::bindings`] gives the runner its frozen skills.

pub mod delivery;
pub mod resource;
pub mod tools;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::package::format::{self, Limits, PackageError, SKILL_MD};
use crate::package::hash::{self, Binding};
use crate::package::store::{IndexEntry, Store, StoreError, StoredPackage};
use crate::sandbox::paths::{self, AliasError, Root};
use crate::skillhost::catalog::rank::{self, Doc, FindResult, Hit, RankIndex, Rankable};
use crate::skillhost::catalog::{self, Catalog, CatalogConfig, CatalogError, Layer, SkillKind};
use crate::text::single_line;
pub use delivery::{Delivery, Prompt, PromptSkill, FILE_TOOLS};
pub use resource::{Chunk, ReadRange, DEFAULT_READ_LIMIT, MAX_READ_LIMIT};

/// Bumped when the record's shape changes.
const FORMAT: u32 = 1;

/// How many times a freeze retries when another process published a
/// different package under the revision it chose.
const FREEZE_TRIES: usize = 8;

/// Why a session request or route failed. [`SessionError::kind`] and
/// [`SessionError::status`] give the error document's kind and HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the session request is not valid: {}", single_line(&.0.to_string()))]
    Request(serde_json::Error),
    #[error("{0:?} is not a skill: give a catalog name, ID@REVISION of a stored binding, or a JSON binding")]
    SkillArg(String),
    #[error("tool name {0:?} is not admissible: use 1 to 64 printable characters")]
    ToolName(String),
    #[error("skill {0:?} is selected twice; select each skill once")]
    DuplicateSkill(String),
    #[error("session id {0:?} is not admissible: session ids are ses- and 32 lowercase hex digits, as POST /v1/sessions returns them")]
    BadId(String),
    #[error("session {0} does not exist here; create one with POST /v1/sessions or skill-runner session create")]
    NotFound(String),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("skill {id:?} in the store: {source}")]
    Package { id: String, source: PackageError },
    #[error("skill {name:?} is not part of session {session}; its skills are: {known}")]
    UnknownSkill {
        session: String,
        name: String,
        known: String,
    },
    #[error("section {section:?} is not admissible: {source}")]
    BadSection {
        section: String,
        source: PackageError,
    },
    #[error("skill {skill:?} has no section {section:?}; its sections are: {known}")]
    UnknownSection {
        skill: String,
        section: String,
        known: String,
    },
    #[error("section {section:?} of skill {skill:?} matches {candidates}; give the full path")]
    AmbiguousSection {
        skill: String,
        section: String,
        candidates: String,
    },
    #[error("{path:?} is not a package path: name a file as ${var}/<skill>/<file>, ${{{var}}}/<skill>/<file> or /skills/<skill>/<file>", var = paths::SKILLS_VAR)]
    NotPackagePath { path: String },
    #[error(transparent)]
    Escape(#[from] AliasError),
    #[error("{path:?} names a folder, not a file; files of skill {skill:?}: {files}")]
    NotAFile {
        path: String,
        skill: String,
        files: String,
    },
    #[error("{path:?} is not a file of skill {skill:?}; its files are: {files}")]
    NoSuchFile {
        path: String,
        skill: String,
        files: String,
    },
    #[error(
        "{} is a binary file ({reason}); read_skill_resource returns UTF-8 text only",
        single_line(path)
    )]
    Binary { path: String, reason: String },
    #[error(
        "offset {offset} is past the end of {} ({size} bytes)",
        single_line(path)
    )]
    OffsetPastEnd {
        path: String,
        offset: u64,
        size: u64,
    },
    #[error("offset {offset} falls inside a UTF-8 character of {}; that character starts at offset {boundary}", single_line(path))]
    OffsetSplitsChar {
        path: String,
        offset: u64,
        boundary: u64,
    },
    #[error("limit {limit} is smaller than the UTF-8 character at offset {offset} of {}; use a limit of at least 4", single_line(path))]
    LimitSplitsChar {
        path: String,
        offset: u64,
        limit: u64,
    },
    #[error("limit must be between 1 and {max}, got {limit}")]
    BadLimit { limit: u64, max: u64 },
    #[error("{} need{} files besides SKILL.md, but this session has no file tool ({}); enable a file tool ({}) or select only instruction-only skills",
        list_names(skills), if skills.len() == 1 { "s" } else { "" }, enabled(tools), FILE_TOOLS.join(", "))]
    CompositionRejected {
        skills: Vec<String>,
        tools: Vec<String>,
    },
    #[error("skill {id:?}: other bytes were published under each new revision {FREEZE_TRIES} times in a row; try again")]
    FreezeRace { id: String },
    #[error("skill {id:?} is stored at the last revision there is ({}); freeze these bytes under another skill name", u64::MAX)]
    LastRevision { id: String },
    #[error("{path} differs from the bytes pinned in the store; the store is damaged, republish the skill")]
    Tampered { path: PathBuf },
    #[error("session file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("session record {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

fn list_names(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("skill {n:?}")).collect();
    quoted.join(", ")
}

fn enabled(tools: &[String]) -> String {
    if tools.is_empty() {
        "no tool is enabled".to_owned()
    } else {
        format!("enabled: {}", tools.join(", "))
    }
}

impl SessionError {
    /// The error kind of the error document.
    pub fn kind(&self) -> ErrorKind {
        use SessionError as E;
        match self {
            E::Request(_)
            | E::SkillArg(_)
            | E::ToolName(_)
            | E::DuplicateSkill(_)
            | E::BadId(_)
            | E::BadSection { .. }
            | E::AmbiguousSection { .. }
            | E::NotPackagePath { .. }
            | E::Escape(_)
            | E::OffsetPastEnd { .. }
            | E::OffsetSplitsChar { .. }
            | E::LimitSplitsChar { .. }
            | E::BadLimit { .. } => ErrorKind::BadRequest,
            E::NotFound(_)
            | E::UnknownSkill { .. }
            | E::UnknownSection { .. }
            | E::NotAFile { .. }
            | E::NoSuchFile { .. } => ErrorKind::NotFound,
            E::Binary { .. } => ErrorKind::BinaryFile,
            E::CompositionRejected { .. } => ErrorKind::CompositionRejected,
            E::FreezeRace { .. } | E::LastRevision { .. } => ErrorKind::Conflict,
            E::Catalog(e) => e.kind(),
            E::Store(e) => e.kind(),
            E::Package { .. } => ErrorKind::BadPackage,
            E::Tampered { .. } => ErrorKind::HashMismatch,
            E::Io { .. } | E::Corrupt { .. } => ErrorKind::Internal,
        }
    }

    /// `{"error": {"kind", "message"}}`.
    pub fn document(&self) -> Value {
        serde_json::json!({"error": {"kind": self.kind(), "message": self.to_string()}})
    }
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// `POST /v1/sessions` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    pub skills: Vec<SkillSpec>,
    pub tools: Vec<String>,
}

/// One requested skill: a frozen binding, or a catalog name to freeze now.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawSpec")]
pub enum SkillSpec {
    Binding(Binding),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Option<String>,
    id: Option<String>,
    revision: Option<u64>,
    version: Option<String>,
    hash: Option<String>,
}

impl TryFrom<RawSpec> for SkillSpec {
    type Error = String;

    fn try_from(r: RawSpec) -> Result<SkillSpec, String> {
        match (r.name, r.id, r.revision, r.version, r.hash) {
            (Some(name), None, None, None, None) => Ok(SkillSpec::Name(name)),
            (None, Some(id), Some(revision), Some(version), Some(hash)) => {
                Ok(SkillSpec::Binding(Binding {
                    id,
                    revision,
                    version,
                    hash,
                }))
            }
            (Some(_), ..) => Err("a skill is either {\"name\"} (a catalog name) or a binding {\"id\", \"revision\", \"version\", \"hash\"}, not both".into()),
            _ => Err("a binding needs all of \"id\", \"revision\", \"version\" and \"hash\" (or give {\"name\"} for a catalog skill)".into()),
        }
    }
}

impl SkillSpec {
    /// Parses a command-line word: a JSON binding (`{"id":…}`), `ID@REV`
    /// (a binding already in the store), or a catalog name.
    pub fn from_arg(arg: &str, store: &Store) -> Result<SkillSpec, SessionError> {
        if arg.trim_start().starts_with('{') {
            return serde_json::from_str(arg).map_err(SessionError::Request);
        }
        if let Some((id, rev)) = arg.split_once('@') {
            let revision: u64 = rev
                .parse()
                .map_err(|_| SessionError::SkillArg(arg.to_owned()))?;
            let found = store
                .bindings_of(id)?
                .into_iter()
                .find(|b| b.revision == revision);
            return found.map(SkillSpec::Binding).ok_or_else(|| {
                SessionError::Store(StoreError::NotFound {
                    id: id.to_owned(),
                    revision,
                    hash: "(any)".to_owned(),
                })
            });
        }
        Ok(SkillSpec::Name(arg.to_owned()))
    }
}

/// `GET /v1/sessions/{id}/skills?query=&limit=&category=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsQuery {
    pub query: Option<String>,
    pub limit: Option<usize>,
    pub category: Option<String>,
}

/// `GET /v1/sessions/{id}/resources?path=&offset=&limit=`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceQuery {
    pub path: String,
    pub offset: Option<u64>,
    pub limit: Option<u64>,
}

// ---------------------------------------------------------------------------
// Records and answers
// ---------------------------------------------------------------------------

/// Where a session's skill came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub id: String,
    /// `store` for a binding given as such; else the catalog layer.
    pub from: String,
    /// The catalog folder it was read from.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub path: Option<PathBuf>,
    /// True when this session published a new revision.
    pub published: bool,
}

/// One skill of a session record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSkill {
    pub binding: Binding,
    pub description: String,
    #[serde(default)]
    pub category: Option<String>,
    pub kind: SkillKind,
    pub provenance: Provenance,
    /// The headings of its `SKILL.md` body, one a line: what
    /// `find_skills` ranks besides name and description. Absent from
    /// records made before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub headings: String,
}

/// What `<data-dir>/sessions/<id>.json` holds; written once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    pub format: u32,
    pub id: String,
    pub created_at: String,
    pub delivery: Delivery,
    /// The enabled tools, as given.
    pub enabled_tools: Vec<String>,
    pub skills: Vec<SessionSkill>,
    pub identity: String,
    pub prompt: Prompt,
    pub tools: Vec<Value>,
    pub warnings: Vec<String>,
}

/// The answer of `POST /v1/sessions` and `GET /v1/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionDoc {
    pub id: String,
    pub delivery: Delivery,
    /// The frozen bindings, in request order.
    pub skills: Vec<Binding>,
    pub prompt: Prompt,
    pub tools: Vec<Value>,
    /// Set identity of the bindings (docs/formats.md).
    pub identity: String,
    pub created_at: String,
    pub enabled_tools: Vec<String>,
    pub provenance: Vec<Provenance>,
    pub warnings: Vec<String>,
}

impl From<&SessionRecord> for SessionDoc {
    fn from(r: &SessionRecord) -> SessionDoc {
        SessionDoc {
            id: r.id.clone(),
            delivery: r.delivery,
            skills: r.skills.iter().map(|s| s.binding.clone()).collect(),
            prompt: r.prompt.clone(),
            tools: r.tools.clone(),
            identity: r.identity.clone(),
            created_at: r.created_at.clone(),
            enabled_tools: r.enabled_tools.clone(),
            provenance: r.skills.iter().map(|s| s.provenance.clone()).collect(),
            warnings: r.warnings.clone(),
        }
    }
}

/// The answer of `GET /v1/sessions/{id}/skills`: the session's skills,
/// ranked when a query is given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkillList {
    pub session: String,
    pub delivery: Delivery,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(flatten)]
    pub result: FindResult,
}

/// A supplementary file of a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Section {
    pub name: String,
    pub size: u64,
}

/// The answer of `GET /v1/sessions/{id}/skills/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadedSkill {
    pub name: String,
    pub description: String,
    pub version: String,
    pub revision: u64,
    pub package_hash: String,
    pub package_path: String,
    /// `SKILL.md` after its front matter.
    pub body: String,
    /// Every file besides `SKILL.md`, for `load_skill_section`.
    pub sections: Vec<Section>,
}

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    LoadSkill,
    LoadSection,
    ReadResource,
}

/// One activation: a load or a read that returned content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub at: String,
    pub kind: EventKind,
    pub skill: String,
    pub revision: u64,
    pub package_hash: String,
    /// The file read: `SKILL.md` for a load.
    pub file: String,
    /// Where the read started; absent for a load (the whole body).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub offset: Option<u64>,
    /// Bytes returned.
    pub bytes: u64,
    pub truncated: bool,
}

/// What an activation returned, for its event.
struct Returned<'a> {
    file: &'a str,
    offset: Option<u64>,
    bytes: u64,
    truncated: bool,
}

impl<'a> Returned<'a> {
    fn chunk(c: &'a Chunk) -> Returned<'a> {
        Returned {
            file: &c.file,
            offset: Some(c.offset),
            bytes: c.returned,
            truncated: c.truncated,
        }
    }
}

/// The answer of `GET /v1/sessions/{id}/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventLog {
    pub session: String,
    pub events: Vec<Event>,
}

// ---------------------------------------------------------------------------
// On disk
// ---------------------------------------------------------------------------

use crate::exec::job::valid_session_id;
use crate::error::ErrorKind;

/// A fresh session id.
pub fn new_session_id() -> String {
    format!("ses-{}", crate::fsx::random_hex())
}

/// The session records and event logs under `<data-dir>/sessions`.
#[derive(Debug, Clone)]
pub struct Sessions {
    dir: PathBuf,
}

impl Sessions {
    pub fn new(data_dir: &Path) -> Sessions {
        Sessions {
            dir: data_dir.join("sessions"),
        }
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn events_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.events.ndjson"))
    }

    /// Reads a session record.
    pub fn read(&self, id: &str) -> Result<SessionRecord, SessionError> {
        if !valid_session_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        let path = self.record_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound(id.to_owned()))
            }
            Err(source) => return Err(SessionError::Io { path, source }),
        };
        let record: SessionRecord =
            serde_json::from_slice(&bytes).map_err(|e| SessionError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if record.format != FORMAT || record.id != id {
            return Err(SessionError::Corrupt {
                path,
                reason: "it is another format or another session's record".into(),
            });
        }
        Ok(record)
    }

    /// Every session record, newest first, with when it was last used.
    /// Records that cannot be read are skipped.
    pub fn list(&self) -> Result<Vec<(SessionRecord, std::time::SystemTime)>, SessionError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SessionError::Io {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if !valid_session_id(id) {
                continue;
            }
            if let (Ok(record), Some(used)) = (self.read(id), self.last_used(id)) {
                out.push((record, used));
            }
        }
        out.sort_by(|a, b| b.0.created_at.cmp(&a.0.created_at));
        Ok(out)
    }

    /// When a session was last used: the later of its record's and its
    /// event log's modification times ([`Sessions::touch`] sets the
    /// record's). `None` when there is no such session.
    pub fn last_used(&self, id: &str) -> Option<std::time::SystemTime> {
        if !valid_session_id(id) {
            return None;
        }
        let record = fs::symlink_metadata(self.record_path(id))
            .and_then(|m| m.modified())
            .ok()?;
        let events = fs::symlink_metadata(self.events_path(id))
            .and_then(|m| m.modified())
            .ok();
        Some(events.map_or(record, |e| e.max(record)))
    }

    /// Records a use of the session now (its record's modification time).
    pub fn touch(&self, id: &str) -> Result<(), SessionError> {
        if !valid_session_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        let path = self.record_path(id);
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound(id.to_owned()))
            }
            Err(source) => return Err(SessionError::Io { path, source }),
        };
        file.set_modified(std::time::SystemTime::now())
            .map_err(|source| SessionError::Io { path, source })
    }

    /// Deletes a session's record and event log.
    pub fn delete(&self, id: &str) -> Result<(), SessionError> {
        if !valid_session_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        let path = self.record_path(id);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound(id.to_owned()))
            }
            Err(source) => return Err(SessionError::Io { path, source }),
        }
        let events = self.events_path(id);
        match fs::remove_file(&events) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(SessionError::Io {
                path: events,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// The frozen bindings of a session, for an execution that names it.
    pub fn bindings(&self, id: &str) -> Result<Vec<Binding>, SessionError> {
        Ok(self
            .read(id)?
            .skills
            .into_iter()
            .map(|s| s.binding)
            .collect())
    }

    /// Writes a new record: a private file, then `link(2)` into place,
    /// which never replaces an existing record.
    fn create(&self, record: &SessionRecord) -> Result<(), SessionError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| SessionError::Io { path, source }
        };
        let path = self.record_path(&record.id);
        let mut text = serde_json::to_vec_pretty(record).map_err(|e| SessionError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        text.push(b'\n');
        crate::fsx::write_new(&path, &text, 0o444).map_err(io(&path))
    }

    /// Appends one event (one `write` of one line, `O_APPEND`).
    fn append(&self, id: &str, event: &Event) -> Result<(), SessionError> {
        let path = self.events_path(id);
        let mut line = serde_json::to_vec(event).map_err(|e| SessionError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&line))
            .map_err(|source| SessionError::Io { path, source })
    }

    /// The events of a session, oldest first. A line torn by a crash is
    /// skipped.
    pub fn events(&self, id: &str) -> Result<Vec<Event>, SessionError> {
        self.read(id)?;
        let path = self.events_path(id);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(SessionError::Io { path, source }),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}

// ---------------------------------------------------------------------------
// The host
// ---------------------------------------------------------------------------

/// The skill host: sessions over one data dir's store, plus the catalog
/// to freeze names from. Immutable; share it behind an `Arc`.
#[derive(Debug, Clone)]
pub struct SessionHost {
    store: Store,
    sessions: Sessions,
    catalog: CatalogConfig,
    limits: Limits,
}

/// A requested skill resolved to exact bytes, not yet published.
struct Pending {
    id: String,
    description: String,
    headings: String,
    category: Option<String>,
    kind: SkillKind,
    warnings: Vec<String>,
    how: PendingBytes,
}

enum PendingBytes {
    /// Already in the store.
    Stored(Binding),
    /// Read from a catalog folder just now.
    Read {
        hash: String,
        version: String,
        files: Vec<(String, Vec<u8>)>,
        layer: Layer,
        path: Option<PathBuf>,
    },
}

/// A session skill as ranked by `list_skills` / `find_skills`.
struct Listed<'a>(&'a SessionSkill);

impl Rankable for Listed<'_> {
    fn hit(&self, score: u32) -> Hit {
        Hit {
            name: self.0.binding.id.clone(),
            description: self.0.description.clone(),
            category: self.0.category.clone(),
            score,
            explain: None,
        }
    }
}

impl SessionHost {
    /// Opens the host on `data_dir` (creating its store and sessions
    /// folders); `catalog` says where catalog names are looked up.
    pub fn open(data_dir: &Path, catalog: CatalogConfig) -> Result<SessionHost, SessionError> {
        let store = Store::open(data_dir)?;
        let sessions = Sessions::new(data_dir);
        fs::create_dir_all(&sessions.dir).map_err(|source| SessionError::Io {
            path: sessions.dir.clone(),
            source,
        })?;
        Ok(SessionHost {
            store,
            sessions,
            limits: catalog.limits,
            catalog,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// `POST /v1/sessions` with the raw body.
    pub fn create_json(&self, body: &[u8]) -> Result<SessionDoc, SessionError> {
        let req: SessionRequest = serde_json::from_slice(body).map_err(SessionError::Request)?;
        self.create(req)
    }

    /// `POST /v1/sessions`: freezes the skills, decides the delivery mode,
    /// writes the record.
    pub fn create(&self, req: SessionRequest) -> Result<SessionDoc, SessionError> {
        let mut tools: Vec<String> = Vec::with_capacity(req.tools.len());
        for t in req.tools {
            if t.is_empty() || t.chars().count() > 64 || t.chars().any(char::is_control) {
                return Err(SessionError::ToolName(t));
            }
            if !tools.contains(&t) {
                tools.push(t);
            }
        }
        let mut catalog: Option<Catalog> = None;
        let mut pending: Vec<Pending> = Vec::with_capacity(req.skills.len());
        for spec in req.skills {
            let p = match spec {
                SkillSpec::Binding(b) => self.pending_binding(b)?,
                SkillSpec::Name(name) => {
                    catalog::check_name(&name)?;
                    let cat = catalog.get_or_insert_with(|| Catalog::load(&self.catalog));
                    self.pending_name(cat.lookup(&name)?)?
                }
            };
            if pending.iter().any(|q| q.id == p.id) {
                return Err(SessionError::DuplicateSkill(p.id));
            }
            pending.push(p);
        }
        let kinds: Vec<(&str, SkillKind)> =
            pending.iter().map(|p| (p.id.as_str(), p.kind)).collect();
        let delivery = delivery::decide(&tools, &kinds)?;

        let mut skills = Vec::with_capacity(pending.len());
        let mut warnings = Vec::new();
        for p in pending {
            warnings.extend(p.warnings.iter().map(|w| format!("skill {:?}: {w}", p.id)));
            let (binding, provenance) = match p.how {
                PendingBytes::Stored(b) => {
                    let prov = Provenance {
                        id: b.id.clone(),
                        from: "store".into(),
                        path: None,
                        published: false,
                    };
                    (b, prov)
                }
                PendingBytes::Read {
                    hash,
                    version,
                    files,
                    layer,
                    path,
                } => {
                    let (b, published) = self.freeze(&p.id, &hash, &version, &files)?;
                    let prov = Provenance {
                        id: p.id.clone(),
                        from: layer.as_str().into(),
                        path,
                        published,
                    };
                    (b, prov)
                }
            };
            skills.push(SessionSkill {
                binding,
                description: p.description,
                category: p.category,
                kind: p.kind,
                provenance,
                headings: p.headings,
            });
        }
        let bindings: Vec<Binding> = skills.iter().map(|s| s.binding.clone()).collect();
        let record = SessionRecord {
            format: FORMAT,
            id: new_session_id(),
            created_at: crate::text::rfc3339(std::time::SystemTime::now()),
            delivery,
            enabled_tools: tools,
            identity: hash::set_identity(&bindings),
            prompt: delivery::prompt(delivery, &skills),
            tools: delivery::tool_schemas(delivery, &skills),
            skills,
            warnings,
        };
        self.sessions.create(&record)?;
        tracing::info!(session = %record.id, delivery = delivery.as_str(), skills = record.skills.len(), "session created");
        Ok(SessionDoc::from(&record))
    }

    fn pending_binding(&self, b: Binding) -> Result<Pending, SessionError> {
        format::check_binding(&b).map_err(|source| SessionError::Package {
            id: b.id.clone(),
            source,
        })?;
        let pkg = self.store.resolve(&b)?;
        let doc = self.skill_doc(&b.id, &pkg)?;
        Ok(Pending {
            id: b.id.clone(),
            description: doc.front.description.trim().to_owned(),
            headings: rank::headings(&doc.body),
            category: catalog::metadata_str(&doc.front.metadata, "category"),
            kind: SkillKind::of(pkg.files.len()),
            warnings: Vec::new(),
            how: PendingBytes::Stored(b),
        })
    }

    fn pending_name(&self, entry: &catalog::Entry) -> Result<Pending, SessionError> {
        let files = Catalog::read_files(entry, &self.limits)?;
        let md = files
            .iter()
            .find(|f| f.0 == SKILL_MD)
            .ok_or_else(|| SessionError::Package {
                id: entry.name.clone(),
                source: PackageError::MissingSkillMd,
            })?;
        // The bytes just read are what gets frozen: describe them, not
        // what the scan saw.
        let doc = format::parse_skill_md(&md.1).map_err(|source| SessionError::Package {
            id: entry.name.clone(),
            source,
        })?;
        let hash =
            hash::package_hash(files.iter().map(|(p, b)| (&p[..], &b[..]))).map_err(|e| {
                SessionError::Package {
                    id: entry.name.clone(),
                    source: e.into(),
                }
            })?;
        let version = catalog::metadata_str(&doc.front.metadata, "version").unwrap_or_else(|| {
            if entry.source == Layer::Builtin {
                env!("CARGO_PKG_VERSION").to_owned()
            } else {
                "0.0.0".to_owned()
            }
        });
        Ok(Pending {
            id: entry.name.clone(),
            description: doc.front.description.trim().to_owned(),
            headings: rank::headings(&doc.body),
            category: catalog::metadata_str(&doc.front.metadata, "category")
                .or_else(|| entry.category.clone()),
            kind: SkillKind::of(files.len()),
            warnings: doc.warnings(Some(&entry.name)),
            how: PendingBytes::Read {
                hash,
                version,
                files,
                layer: entry.source,
                path: entry.path.clone(),
            },
        })
    }

    /// The binding the store holds for `id` with `hash` (the latest such
    /// revision, whatever its version); else publishes `files` as `id`'s
    /// next revision under `version`. Returns the binding and whether a
    /// revision was published.
    fn freeze(
        &self,
        id: &str,
        hash: &str,
        version: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<(Binding, bool), SessionError> {
        for _ in 0..FREEZE_TRIES {
            let mut stored = self.store.bindings_of(id)?;
            // Same bytes already published: that is the binding, even when
            // the catalog folder states no version (issue 14: the store's
            // hello r1 / 1.0.0 must not become r2 / 0.0.0).
            if let Some(b) = stored.iter().rev().find(|b| b.hash == hash) {
                return Ok((b.clone(), false));
            }
            // A revision past u64::MAX would wrap (or panic in a debug
            // build) instead of growing.
            let revision = match stored.pop() {
                None => 1,
                Some(latest) => latest
                    .revision
                    .checked_add(1)
                    .ok_or_else(|| SessionError::LastRevision { id: id.to_owned() })?,
            };
            let binding = Binding {
                id: id.to_owned(),
                revision,
                version: version.to_owned(),
                hash: hash.to_owned(),
            };
            match self.store.publish_files(&binding, files, &self.limits) {
                Ok(_) => return Ok((binding, true)),
                // Someone else took this revision: look again.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::FreezeRace { id: id.to_owned() })
    }

    fn skill_doc(&self, id: &str, pkg: &StoredPackage) -> Result<format::SkillDoc, SessionError> {
        let entry = pkg
            .files
            .iter()
            .find(|f| f.path == SKILL_MD)
            .ok_or_else(|| SessionError::Package {
                id: id.to_owned(),
                source: PackageError::MissingSkillMd,
            })?;
        let chunk = resource::read(
            id,
            pkg,
            entry,
            ReadRange {
                offset: None,
                limit: Some(MAX_READ_LIMIT),
            },
        )?;
        format::parse_skill_md(chunk.content.as_bytes()).map_err(|source| SessionError::Package {
            id: id.to_owned(),
            source,
        })
    }

    /// `GET /v1/sessions/{id}`: the session as created.
    pub fn show(&self, id: &str) -> Result<SessionDoc, SessionError> {
        Ok(SessionDoc::from(&self.sessions.read(id)?))
    }

    /// `GET /v1/sessions/{id}/skills`: `list_skills` without a query
    /// (every skill, by name), `find_skills` / `list_skills` with one
    /// (ranked, `limit` best, default 10, at most 100).
    pub fn skills(&self, id: &str, q: &SkillsQuery) -> Result<SkillList, SessionError> {
        let rec = self.sessions.read(id)?;
        let items: Vec<Listed<'_>> = rec
            .skills
            .iter()
            .filter(|s| {
                q.category
                    .as_deref()
                    .map_or(true, |c| s.category.as_deref() == Some(c))
            })
            .map(Listed)
            .collect();
        let index = RankIndex::new(items.iter().map(|l| Doc {
            name: &l.0.binding.id,
            description: &l.0.description,
            headings: &l.0.headings,
        }));
        let query = q.query.as_deref().unwrap_or("");
        let limit = match q.limit {
            Some(0) => {
                return Err(SessionError::BadLimit {
                    limit: 0,
                    max: rank::MAX_LIMIT as u64,
                })
            }
            Some(n) => n.min(rank::MAX_LIMIT),
            None if query.trim().is_empty() => items.len(),
            None => rank::DEFAULT_LIMIT,
        };
        Ok(SkillList {
            session: rec.id.clone(),
            delivery: rec.delivery,
            category: q.category.clone(),
            result: rank::find(&items, &index, query, limit),
        })
    }

    /// Finds a session's skill by name (validated first).
    fn skill<'a>(
        &self,
        rec: &'a SessionRecord,
        name: &str,
    ) -> Result<(&'a SessionSkill, StoredPackage), SessionError> {
        catalog::check_name(name)?;
        let s = rec
            .skills
            .iter()
            .find(|s| s.binding.id == name)
            .ok_or_else(|| SessionError::UnknownSkill {
                session: rec.id.clone(),
                name: name.to_owned(),
                known: known(rec.skills.iter().map(|s| s.binding.id.as_str())),
            })?;
        let pkg = self.store.resolve(&s.binding)?;
        Ok((s, pkg))
    }

    /// Appends the event of an activation that returned content.
    fn record(
        &self,
        rec: &SessionRecord,
        kind: EventKind,
        skill: &SessionSkill,
        returned: Returned<'_>,
    ) -> Result<(), SessionError> {
        self.sessions.append(
            &rec.id,
            &Event {
                at: crate::text::rfc3339(std::time::SystemTime::now()),
                kind,
                skill: skill.binding.id.clone(),
                revision: skill.binding.revision,
                package_hash: skill.binding.hash.clone(),
                file: returned.file.to_owned(),
                offset: returned.offset,
                bytes: returned.bytes,
                truncated: returned.truncated,
            },
        )
    }

    /// `GET /v1/sessions/{id}/skills/{name}`: `Skill`, `load_skill`,
    /// `read_skill`. Records a `load_skill` event.
    pub fn load(&self, id: &str, name: &str) -> Result<LoadedSkill, SessionError> {
        let rec = self.sessions.read(id)?;
        let (s, pkg) = self.skill(&rec, name)?;
        let doc = self.skill_doc(name, &pkg)?;
        let loaded = LoadedSkill {
            name: s.binding.id.clone(),
            description: s.description.clone(),
            version: s.binding.version.clone(),
            revision: s.binding.revision,
            package_hash: s.binding.hash.clone(),
            package_path: delivery::package_path(&s.binding.id),
            body: doc.body,
            sections: pkg
                .files
                .iter()
                .filter(|f| f.path != SKILL_MD)
                .map(|f| Section {
                    name: f.path.clone(),
                    size: f.size,
                })
                .collect(),
        };
        let returned = Returned {
            file: SKILL_MD,
            offset: None,
            bytes: loaded.body.len() as u64,
            truncated: false,
        };
        self.record(&rec, EventKind::LoadSkill, s, returned)?;
        Ok(loaded)
    }

    /// `GET /v1/sessions/{id}/skills/{name}/sections/{section}`:
    /// `load_skill_section`. `section` is a file's path in the package, or
    /// its file name (with or without extension) when that is unique.
    /// Records a `load_section` event.
    pub fn section(
        &self,
        id: &str,
        name: &str,
        section: &str,
        range: ReadRange,
    ) -> Result<Chunk, SessionError> {
        let rec = self.sessions.read(id)?;
        let (s, pkg) = self.skill(&rec, name)?;
        format::check_path(section).map_err(|source| SessionError::BadSection {
            section: section.to_owned(),
            source,
        })?;
        let sections: Vec<&IndexEntry> = pkg.files.iter().filter(|f| f.path != SKILL_MD).collect();
        let unknown = || SessionError::UnknownSection {
            skill: name.to_owned(),
            section: section.to_owned(),
            known: if sections.is_empty() {
                "none (SKILL.md alone; load the skill itself)".to_owned()
            } else {
                known(sections.iter().map(|f| f.path.as_str()))
            },
        };
        let entry = match sections.iter().find(|f| f.path == section) {
            Some(e) => *e,
            None => {
                let by_name: Vec<&IndexEntry> = sections
                    .iter()
                    .copied()
                    .filter(|f| {
                        let file = f.path.rsplit('/').next().unwrap_or(&f.path);
                        let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
                        file == section || stem == section
                    })
                    .collect();
                match by_name.as_slice() {
                    [one] => *one,
                    [] => return Err(unknown()),
                    many => {
                        return Err(SessionError::AmbiguousSection {
                            skill: name.to_owned(),
                            section: section.to_owned(),
                            candidates: known(many.iter().map(|f| f.path.as_str())),
                        })
                    }
                }
            }
        };
        let chunk = resource::read(name, &pkg, entry, range)?;
        self.record(&rec, EventKind::LoadSection, s, Returned::chunk(&chunk))?;
        Ok(chunk)
    }

    /// `GET /v1/sessions/{id}/resources?path=&offset=&limit=`:
    /// `read_skill_resource`. `path` is one of the three aliases of
    /// docs/formats.md and must name a file of one of the session's packages.
    /// Records a `read_resource` event.
    pub fn resource(&self, id: &str, q: &ResourceQuery) -> Result<Chunk, SessionError> {
        let rec = self.sessions.read(id)?;
        let not_package = || SessionError::NotPackagePath {
            path: q.path.clone(),
        };
        let logical = match paths::parse(&q.path) {
            None => return Err(not_package()),
            Some(r) => r?,
        };
        if logical.root != Root::Skills {
            return Err(not_package());
        }
        let (skill_id, rel) = logical
            .rel
            .split_once('/')
            .unwrap_or((logical.rel.as_str(), ""));
        if skill_id.is_empty() {
            return Err(not_package());
        }
        let (s, pkg) = self.skill(&rec, skill_id)?;
        let files = || known(pkg.files.iter().map(|f| f.path.as_str()));
        let Some(entry) = pkg.files.iter().find(|f| f.path == rel) else {
            let prefix = format!("{rel}/");
            if rel.is_empty() || pkg.files.iter().any(|f| f.path.starts_with(&prefix)) {
                return Err(SessionError::NotAFile {
                    path: q.path.clone(),
                    skill: skill_id.to_owned(),
                    files: files(),
                });
            }
            return Err(SessionError::NoSuchFile {
                path: q.path.clone(),
                skill: skill_id.to_owned(),
                files: files(),
            });
        };
        let chunk = resource::read(
            skill_id,
            &pkg,
            entry,
            ReadRange {
                offset: q.offset,
                limit: q.limit,
            },
        )?;
        self.record(&rec, EventKind::ReadResource, s, Returned::chunk(&chunk))?;
        Ok(chunk)
    }

    /// `GET /v1/sessions/{id}/events`: the activation evidence.
    pub fn events(&self, id: &str) -> Result<EventLog, SessionError> {
        Ok(EventLog {
            session: id.to_owned(),
            events: self.sessions.events(id)?,
        })
    }
}

/// A short list of names for a message (at most 20), on one line.
fn known<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        return "none".to_owned();
    }
    let mut s = names
        .iter()
        .take(20)
        .map(|n| single_line(n))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 20 {
        s.push_str(&format!(" and {} more", names.len() - 20));
    }
    s
}

impl crate::exec::runner::SessionBindings for Sessions {
    fn bindings(&self, session: &str) -> Result<Vec<Binding>, String> {
        Sessions::bindings(self, session).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        let id = new_session_id();
        assert!(valid_session_id(&id), "{id}");
        for bad in [
            "",
            "ses-",
            "s1",
            "ses-ABCDEF0123456789abcdef0123456789",
            "ses-0123456789abcdef0123456789abcde",
            "ses-0123456789abcdef0123456789abcdef0",
            "ses-../../../../etc/passwd0000000000",
        ] {
            assert!(!valid_session_id(bad), "{bad}");
        }
    }

    #[test]
    fn skill_specs_parse_strictly() {
        let ok: SkillSpec = serde_json::from_str(r#"{"name":"hello"}"#).unwrap();
        assert_eq!(ok, SkillSpec::Name("hello".into()));
        let ok: SkillSpec =
            serde_json::from_str(r#"{"id":"a","revision":1,"version":"1","hash":"h"}"#).unwrap();
        assert!(matches!(ok, SkillSpec::Binding(_)));
        for bad in [
            r#"{"name":"a","id":"a"}"#,
            r#"{"id":"a","revision":1}"#,
            r#"{"name":"a","extra":1}"#,
            r#"{}"#,
        ] {
            assert!(serde_json::from_str::<SkillSpec>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejection_message_names_skills_and_fix() {
        let e = SessionError::CompositionRejected {
            skills: vec!["csv".into()],
            tools: vec![],
        };
        let m = e.to_string();
        assert!(m.contains("skill \"csv\" needs files"), "{m}");
        assert!(m.contains("no tool is enabled"), "{m}");
        assert!(m.contains("bash, read"), "{m}");
        assert_eq!(e.kind(), ErrorKind::CompositionRejected);
        assert_eq!(e.document()["error"]["kind"], "composition_rejected");
    }
}
