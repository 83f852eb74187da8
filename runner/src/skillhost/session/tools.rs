//! Tool calls: the model's input for one of a session's advertised tools
//! (its `tools` schemas, [`super::delivery::tool_schemas`]), dispatched to
//! the [`SessionHost`] method that serves it, and answered as text for the
//! model: `{"content": "…", "is_error": false}`.
//!
//! | tool | input | method |
//! |---|---|---|
//! | `list_skills` | `{query?, category?}` | [`SessionHost::skills`] |
//! | `Skill` | `{skill}` | [`SessionHost::load`] |
//! | `find_skills` | `{query, limit?}` | [`SessionHost::skills`] |
//! | `load_skill` | `{name}` | [`SessionHost::load`] |
//! | `load_skill_section` | `{name, section}` | [`SessionHost::section`] |
//! | `read_skill_resource` | `{path, offset?, limit?}` | [`SessionHost::resource`] |
//!
//! Invariants:
//! - only a tool the session advertises is dispatched ([`ToolError::UnknownTool`]);
//! - input is parsed strictly (unknown fields refused), as its schema says;
//! - a fault the model can fix (bad input, an unknown skill, section or
//!   file, a binary file) is an answer with `is_error: true` and a sentence
//!   saying what to change, never an HTTP error: the model must see it;
//!   only a missing session or a host failure is a [`ToolError`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::resource::{Chunk, ReadRange};
use super::{LoadedSkill, ResourceQuery, SessionError, SessionHost, SkillList, SkillsQuery};

/// The answer handed back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolAnswer {
    pub content: String,
    pub is_error: bool,
}

/// Why a tool call could not be answered at all.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("session {session} has no tool {tool:?}; its tools are: {known}")]
    UnknownTool {
        session: String,
        tool: String,
        known: String,
    },
    #[error(transparent)]
    Session(SessionError),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListInput {
    query: Option<String>,
    category: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillInput {
    skill: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FindInput {
    query: String,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameInput {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionInput {
    name: String,
    section: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceInput {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

/// An error of the session itself (missing, unreadable), not of the call.
fn session_level(e: &SessionError) -> bool {
    matches!(
        e,
        SessionError::NotFound(_)
            | SessionError::BadId(_)
            | SessionError::Io { .. }
            | SessionError::Corrupt { .. }
    ) || e.kind().is_host_fault()
}

fn error(content: String) -> ToolAnswer {
    ToolAnswer {
        content,
        is_error: true,
    }
}

/// Calls `tool` of session `id` with the model's `input`.
pub fn call(
    host: &SessionHost,
    id: &str,
    tool: &str,
    input: &Value,
) -> Result<ToolAnswer, ToolError> {
    let record = host.sessions().read(id).map_err(ToolError::Session)?;
    let names: Vec<&str> = record
        .tools
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .collect();
    if !names.contains(&tool) {
        return Err(ToolError::UnknownTool {
            session: id.to_owned(),
            tool: crate::text::single_line(tool),
            known: names.join(", "),
        });
    }
    let parse_error = |e: serde_json::Error| {
        let schema = record
            .tools
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))
            .and_then(|t| t.get("input_schema"))
            .map(Value::to_string)
            .unwrap_or_default();
        error(format!(
            "the input of {tool} is not valid ({}); give an object matching its input schema: {schema}",
            crate::text::single_line(&e.to_string())
        ))
    };
    macro_rules! input {
        ($t:ty) => {
            match <$t>::deserialize(input) {
                Ok(v) => v,
                Err(e) => return Ok(parse_error(e)),
            }
        };
    }
    let answer = match tool {
        "list_skills" => {
            let i = input!(ListInput);
            let q = SkillsQuery {
                query: i.query,
                limit: None,
                category: i.category,
            };
            host.skills(id, &q).map(|l| listing(&l))
        }
        "find_skills" => {
            let i = input!(FindInput);
            let q = SkillsQuery {
                query: Some(i.query),
                limit: i.limit,
                category: None,
            };
            host.skills(id, &q).map(|l| listing(&l))
        }
        "Skill" => {
            let i = input!(SkillInput);
            host.load(id, &i.skill).map(|s| loaded(&s))
        }
        "load_skill" => {
            let i = input!(NameInput);
            host.load(id, &i.name).map(|s| loaded(&s))
        }
        "load_skill_section" => {
            let i = input!(SectionInput);
            host.section(id, &i.name, &i.section, ReadRange::default())
                .map(|c| chunk(&c))
        }
        "read_skill_resource" => {
            let i = input!(ResourceInput);
            let q = ResourceQuery {
                path: i.path,
                offset: i.offset,
                limit: i.limit,
            };
            host.resource(id, &q).map(|c| chunk(&c))
        }
        other => {
            // Advertised by the session but not served here: a record of
            // a newer runner. Say so to the caller, not the model.
            return Err(ToolError::UnknownTool {
                session: id.to_owned(),
                tool: crate::text::single_line(other),
                known: "list_skills, Skill, find_skills, load_skill, load_skill_section, read_skill_resource".into(),
            });
        }
    };
    match answer {
        Ok(content) => Ok(ToolAnswer {
            content,
            is_error: false,
        }),
        Err(e) if session_level(&e) => Err(ToolError::Session(e)),
        Err(e) => Ok(error(e.to_string())),
    }
}

/// `list_skills` / `find_skills`: how many match, then one line a skill.
fn listing(l: &SkillList) -> String {
    let r = &l.result;
    let mut out = String::new();
    if r.hits.is_empty() {
        out.push_str(r.message.as_deref().unwrap_or("No skill matches."));
        if !r.suggestions.is_empty() {
            out.push_str(&format!(" Did you mean: {}?", r.suggestions.join(", ")));
        }
        out.push('\n');
        return out;
    }
    let skills = if r.total == 1 { "skill" } else { "skills" };
    if r.query.trim().is_empty() {
        out.push_str(&format!("{} {skills}:\n", r.total));
    } else {
        out.push_str(&format!(
            "{} {skills} match{} {:?}{}:\n",
            r.total,
            if r.total == 1 { "es" } else { "" },
            r.query,
            if r.hits.len() < r.total {
                format!(" (the best {})", r.hits.len())
            } else {
                String::new()
            }
        ));
    }
    for h in &r.hits {
        let desc = crate::text::single_line(&h.description);
        match &h.category {
            Some(c) => out.push_str(&format!("- {} [{}]: {desc}\n", h.name, c)),
            None => out.push_str(&format!("- {}: {desc}\n", h.name)),
        }
    }
    out
}

/// `Skill` / `load_skill`: the instructions, then the other files.
fn loaded(s: &LoadedSkill) -> String {
    let mut out = s.body.clone();
    if !s.sections.is_empty() {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "\nFiles of {} besides SKILL.md (package path {}):\n",
            s.name, s.package_path
        ));
        for f in &s.sections {
            out.push_str(&format!("- {} ({} bytes)\n", f.name, f.size));
        }
    }
    out
}

/// A file's text, and how to read on when it was cut.
fn chunk(c: &Chunk) -> String {
    let mut out = c.content.clone();
    if c.truncated {
        if let Some(next) = c.next_offset {
            out.push_str(&format!(
                "\n[{} of {} bytes shown; call read_skill_resource with path {} and offset {next} for the rest]",
                c.returned, c.size, c.path
            ));
        }
    }
    out
}
