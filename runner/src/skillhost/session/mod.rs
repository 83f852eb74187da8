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
//!
//! A session created with `"workspace": "managed"` also keeps a folder
//! under `<data-dir>/workspaces` that every job naming it runs in
//! ([`workspace`]); it is deleted with the session.
//!
//! The files: `request.rs` (what the routes accept), `records.rs` (the
//! record, its events and the answers), `disk.rs` (the files under
//! `<data-dir>/sessions`), `freeze.rs` (creating a session), `host.rs`
//! (the routes), and [`delivery`], [`resource`], [`tools`] and
//! [`workspace`].

pub mod delivery;
mod disk;
pub mod environment;
mod freeze;
mod host;
mod records;
mod request;
pub mod resource;
pub mod tools;
pub mod workspace;

use std::io;
use std::path::PathBuf;

use serde_json::Value;

use crate::error::ErrorKind;
use crate::package::format::PackageError;
use crate::package::store::StoreError;
use crate::sandbox::paths::{self, AliasError};
use crate::skillhost::catalog::CatalogError;
use crate::text::single_line;
use freeze::FREEZE_TRIES;

pub use delivery::FILE_TOOLS;
pub use disk::{new_session_id, Sessions};
pub use host::SessionHost;
pub use records::{
    Delivery, Event, EventKind, EventLog, LoadedSkill, Prompt, PromptSkill, Provenance, Section,
    SessionDoc, SessionRecord, SessionSkill, SkillList,
};
pub use request::{ResourceQuery, SessionRequest, SkillSpec, SkillsQuery};
pub use resource::{Chunk, ReadRange, DEFAULT_READ_LIMIT, MAX_READ_LIMIT};
pub use workspace::{WorkspaceError, WorkspaceKind};

/// Why a session request or route failed. [`SessionError::kind`] gives the
/// error document's kind; [`crate::daemon::app::status`] maps kinds to HTTP
/// statuses.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("skills {first_skill:?} and {other_skill:?} declare different environments ({first} and {other}); a session runs with one: select skills that agree")]
    EnvironmentsDiffer {
        first_skill: String,
        first: String,
        other_skill: String,
        other: String,
    },
    #[error("the session names environment {named}, but skill {skill:?} declares {declared}; name that one, or none")]
    EnvironmentNotDeclared {
        named: String,
        skill: String,
        declared: String,
    },
    #[error("session {session} runs with environment {frozen}, and the job names {asked}; drop the job's environment, or create a session with that one")]
    JobEnvironment {
        session: String,
        frozen: String,
        asked: String,
    },
    #[error("skill {skill:?}: {source}")]
    Declaration {
        skill: String,
        source: crate::package::environment::declare::DeclareError,
    },
    #[error("the session request is not valid: {}", single_line(&.0.to_string()))]
    Request(serde_json::Error),
    #[error("{0:?} is not a skill: give a catalog name, ID@REVISION of a stored binding, or a JSON binding")]
    SkillArg(String),
    #[error("tool name {0:?} is not admissible: use 1 to 64 printable characters")]
    ToolName(String),
    #[error("tool name {tool:?} is not a file tool, but {meant:?} spelled differently; file tools are named exactly {}: write {meant:?} for the file tool, or give your own tool another name", FILE_TOOLS.join(", "))]
    NearFileTool { tool: String, meant: &'static str },
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
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("the job names a workspace, and session {0} keeps a managed workspace its jobs run in; drop the job's workspace")]
    WorkspaceGiven(String),
    #[error("session {0} keeps a managed workspace, whose jobs only the daemon runs (in order, one at a time); send the job to POST /v1/executions")]
    ManagedByDaemon(String),
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
            | E::NearFileTool { .. }
            | E::DuplicateSkill(_)
            | E::BadId(_)
            | E::BadSection { .. }
            | E::AmbiguousSection { .. }
            | E::NotPackagePath { .. }
            | E::Escape(_)
            | E::OffsetPastEnd { .. }
            | E::OffsetSplitsChar { .. }
            | E::LimitSplitsChar { .. }
            | E::BadLimit { .. }
            | E::EnvironmentsDiffer { .. }
            | E::EnvironmentNotDeclared { .. } => ErrorKind::BadRequest,
            E::JobEnvironment { .. } => ErrorKind::BadJob,
            E::Declaration { .. } => ErrorKind::BadPackage,
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
            E::Workspace(e) => e.kind(),
            E::WorkspaceGiven(_) | E::ManagedByDaemon(_) => ErrorKind::BadJob,
        }
    }

    /// `{"error": {"kind", "message"}}`.
    pub fn document(&self) -> Value {
        serde_json::json!({"error": {"kind": self.kind(), "message": self.to_string()}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
