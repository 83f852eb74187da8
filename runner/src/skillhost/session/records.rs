//! Records and answers: the session record, the events of its activation
//! log, and the documents the routes answer with.
//!
//! The record holds everything a session serves (its bindings, delivery
//! mode, prompt and tool schemas), fixed when it is created; the answers
//! are views of a record or of what a route read. [`FORMAT`] names the
//! record's shape: a record of another format is refused as corrupt, not
//! guessed at.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::workspace::WorkspaceKind;
use crate::package::hash::Binding;
use crate::skillhost::catalog::rank::FindResult;
use crate::skillhost::catalog::SkillKind;

/// Bumped when the record's shape changes.
pub(super) const FORMAT: u32 = 1;

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

/// How a session's skills are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The agent reads staged packages with its file tools; the prompt
    /// lists `package_path` and `package_hash` per skill.
    ManagedFilesystem,
    /// The agent has no file tool: instruction-only skills are served by
    /// `list_skills` and `Skill`.
    SemanticTools,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::ManagedFilesystem => "managed_filesystem",
            Delivery::SemanticTools => "semantic_tools",
        }
    }
}

/// One skill as the prompt lists it: never the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptSkill {
    pub name: String,
    pub description: String,
    pub version: String,
    pub revision: u64,
    pub package_path: String,
    pub package_hash: String,
}

/// The prompt metadata block: as JSON, and rendered as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    pub skills: Vec<PromptSkill>,
    pub text: String,
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
    /// `managed`: the session keeps a workspace under the data dir that
    /// its jobs run in (absent: each job gets its own, as without a
    /// session). A plain field: the folder is found from the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceKind>,
    /// The environment every job of the session runs with (the one named
    /// or declared when it was created); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::package::environment::EnvRef>,
}

/// The tools that give an agent the file system, spelled exactly so
/// (docs/skill-host.md, "Delivery mode").
pub const FILE_TOOLS: [&str; 6] = ["bash", "read", "write", "edit", "glob", "grep"];

/// The enabled tools that count as file tools, in their order.
pub fn file_tools(tools: &[String]) -> Vec<String> {
    tools
        .iter()
        .filter(|t| FILE_TOOLS.contains(&t.as_str()))
        .cloned()
        .collect()
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
    /// The enabled tools that counted as file tools (they decided the
    /// delivery mode).
    pub file_tools: Vec<String>,
    pub provenance: Vec<Provenance>,
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceKind>,
    /// The session's environment, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::package::environment::EnvRef>,
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
            file_tools: file_tools(&r.enabled_tools),
            provenance: r.skills.iter().map(|s| s.provenance.clone()).collect(),
            warnings: r.warnings.clone(),
            workspace: r.workspace,
            environment: r.environment.clone(),
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

/// The answer of `GET /v1/sessions/{id}/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventLog {
    pub session: String,
    pub events: Vec<Event>,
}
