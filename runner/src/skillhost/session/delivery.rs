//! How a session's skills reach the agent: the delivery mode, the prompt
//! metadata block, and the tool schemas (docs/skill-host.md).
//!
//! The mode is a function of the session's enabled tools and the kinds of
//! its skills, decided once when the session is created:
//!
//! | enabled tools | skills | delivery |
//! |---|---|---|
//! | at least one file tool | any | `managed_filesystem` |
//! | no file tool | all instruction-only (or none) | `semantic_tools` |
//! | no file tool | at least one needs files | refused: `composition_rejected` |
//!
//! File tools are `bash`, `read`, `write`, `edit`, `glob` and `grep`,
//! spelled exactly so. Any other name is the agent's own tool
//! (`web_search`), but one that is a file tool's name only after case
//! folding or trimming (`Bash`, `read `) is refused when the session is
//! made ([`near_file_tool`]): counted as a file tool it could hide that
//! the agent has none, and not counted it would silently change the
//! delivery mode, so the caller must say which it meant. A skill needs files
//! when its package holds any file besides `SKILL.md`: its scripts and
//! references are useless to an agent that cannot read or run them, so the
//! composition is refused rather than silently served without them.
//!
//! Pure code: no I/O.

use serde_json::{json, Value};

use super::records::{Delivery, Prompt, PromptSkill, SessionSkill};
use super::SessionError;
use crate::sandbox::paths::SKILLS_VAR;
use crate::skillhost::catalog::SkillKind;

/// The tools that give an agent the file system (kept with the session
/// documents, which list them).
pub use super::records::{file_tools, FILE_TOOLS};

/// True when `tool` is one of [`FILE_TOOLS`], spelled exactly.
pub fn is_file_tool(tool: &str) -> bool {
    FILE_TOOLS.contains(&tool)
}

/// The file tool `tool` names once case-folded and trimmed, when it is not
/// spelled exactly so (`"Bash"`, `"read "`, `" GREP"`).
pub fn near_file_tool(tool: &str) -> Option<&'static str> {
    if is_file_tool(tool) {
        return None;
    }
    let folded = tool.trim().to_lowercase();
    FILE_TOOLS.iter().copied().find(|f| *f == folded)
}

/// Decides the delivery mode, or refuses the composition.
pub fn decide(tools: &[String], skills: &[(&str, SkillKind)]) -> Result<Delivery, SessionError> {
    if tools.iter().any(|t| is_file_tool(t)) {
        return Ok(Delivery::ManagedFilesystem);
    }
    let needing: Vec<String> = skills
        .iter()
        .filter(|(_, k)| *k == SkillKind::WithFiles)
        .map(|(n, _)| (*n).to_owned())
        .collect();
    if needing.is_empty() {
        Ok(Delivery::SemanticTools)
    } else {
        Err(SessionError::CompositionRejected {
            skills: needing,
            tools: tools.to_vec(),
        })
    }
}

/// `$SCIENCEDISCOVERY_SKILLS_DIR/<id>`, the logical package path.
pub fn package_path(id: &str) -> String {
    format!("${SKILLS_VAR}/{id}")
}

/// One line: whitespace (newlines included) collapsed, so a description
/// (or, in the text, a version) cannot add structure to the prompt.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Builds the prompt block for `skills` under `delivery`.
pub fn prompt(delivery: Delivery, skills: &[SessionSkill]) -> Prompt {
    let listed: Vec<PromptSkill> = skills
        .iter()
        .map(|s| PromptSkill {
            name: s.binding.id.clone(),
            description: one_line(&s.description),
            version: s.binding.version.clone(),
            revision: s.binding.revision,
            package_path: package_path(&s.binding.id),
            package_hash: s.binding.hash.clone(),
        })
        .collect();
    let mut text = String::from("## Skills\n\n");
    if listed.is_empty() {
        text.push_str("No skills are available in this session.\n");
        return Prompt {
            skills: listed,
            text,
        };
    }
    match delivery {
        Delivery::ManagedFilesystem => {
            text.push_str(
                "Each skill below is a read-only folder at its package_path. When a task matches a \
                 skill's description, read <package_path>/SKILL.md with your file tools before acting, \
                 then the files it points to. Run a skill's scripts through their interpreter \
                 (sh, python3). If a package file cannot be reached, use read_skill_resource.\n\n",
            );
            for s in &listed {
                text.push_str(&format!(
                    "- {}: {}\n  version {} (revision {})\n  package_path: {}\n  package_hash: {}\n",
                    s.name,
                    s.description,
                    one_line(&s.version),
                    s.revision,
                    s.package_path,
                    s.package_hash
                ));
            }
        }
        Delivery::SemanticTools => {
            text.push_str(
                "When a task matches a skill's description, call the Skill tool with its name to \
                 load its instructions, then follow them. list_skills lists the skills again.\n\n",
            );
            for s in &listed {
                text.push_str(&format!(
                    "- {}: {} (version {}, revision {})\n",
                    s.name,
                    s.description,
                    one_line(&s.version),
                    s.revision
                ));
            }
        }
    }
    Prompt {
        skills: listed,
        text,
    }
}

/// The tool schemas the orchestrator exposes for this session. Skill
/// names are an `enum` of the selected names.
///
/// - `semantic_tools`: `list_skills {query?, category?}`, `Skill {skill}`.
/// - `managed_filesystem`: `find_skills {query, limit?}`,
///   `load_skill {name}`, `load_skill_section {name, section}` and
///   `read_skill_resource {path, offset?, limit?}` (the fallbacks for an
///   agent whose file tools cannot reach the packages).
pub fn tool_schemas(delivery: Delivery, skills: &[SessionSkill]) -> Vec<Value> {
    let names: Vec<&str> = skills.iter().map(|s| s.binding.id.as_str()).collect();
    let name_param = |what: &str| json!({"type": "string", "enum": names, "description": what});
    match delivery {
        Delivery::SemanticTools => {
            let mut categories: Vec<&str> = skills
                .iter()
                .filter_map(|s| s.category.as_deref())
                .collect();
            categories.sort_unstable();
            categories.dedup();
            let mut category = json!({
                "type": "string",
                "description": "Only skills of this category.",
            });
            if !categories.is_empty() {
                category["enum"] = json!(categories);
            }
            vec![
                json!({
                    "name": "list_skills",
                    "description": "List the skills available in this session: name, description and category. Give a query to rank them by relevance.",
                    "input_schema": {
                        "type": "object",
                        "properties": {
                            "query": {"type": "string", "description": "Words describing the task."},
                            "category": category,
                        },
                        "additionalProperties": false,
                    },
                }),
                json!({
                    "name": "Skill",
                    "description": "Load a skill's instructions. Call it before doing a task that matches the skill's description, then follow the instructions.",
                    "input_schema": {
                        "type": "object",
                        "properties": {"skill": name_param("The skill's name.")},
                        "required": ["skill"],
                        "additionalProperties": false,
                    },
                }),
            ]
        }
        Delivery::ManagedFilesystem => vec![
            json!({
                "name": "find_skills",
                "description": "Find the skills that match a task, best first, by name, description and headings.",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "Words describing the task."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": crate::skillhost::catalog::rank::MAX_LIMIT, "default": crate::skillhost::catalog::rank::DEFAULT_LIMIT},
                    },
                    "required": ["query"],
                    "additionalProperties": false,
                },
            }),
            json!({
                "name": "load_skill",
                "description": "Load a skill's instructions (its SKILL.md body) and the list of its supplementary files (sections).",
                "input_schema": {
                    "type": "object",
                    "properties": {"name": name_param("The skill's name.")},
                    "required": ["name"],
                    "additionalProperties": false,
                },
            }),
            json!({
                "name": "load_skill_section",
                "description": "Load one supplementary file of a skill, as load_skill lists them (e.g. references/api.md).",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "name": name_param("The skill's name."),
                        "section": {"type": "string", "description": "The file's path inside the skill, or its unique file name."},
                    },
                    "required": ["name", "section"],
                    "additionalProperties": false,
                },
            }),
            json!({
                "name": "read_skill_resource",
                "description": format!("Read a UTF-8 file of a skill package, at most `limit` bytes from `offset`. Name it as ${SKILLS_VAR}/<skill>/<path> or /skills/<skill>/<path>. Never runs anything."),
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "offset": {"type": "integer", "minimum": 0, "default": 0},
                        "limit": {"type": "integer", "minimum": 1, "maximum": super::resource::MAX_READ_LIMIT, "default": super::resource::DEFAULT_READ_LIMIT},
                    },
                    "required": ["path"],
                    "additionalProperties": false,
                },
            }),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_tool_is_spelled_exactly_and_a_near_miss_is_named() {
        for f in FILE_TOOLS {
            assert!(is_file_tool(f));
            assert_eq!(near_file_tool(f), None);
        }
        for (near, meant) in [
            ("Bash", "bash"),
            ("read ", "read"),
            (" GREP", "grep"),
            ("\tEdit\n", "edit"),
        ] {
            assert!(!is_file_tool(near), "{near:?}");
            assert_eq!(near_file_tool(near), Some(meant), "{near:?}");
        }
        for other in ["web_search", "bash2", "re ad", "readfile", ""] {
            assert_eq!(near_file_tool(other), None, "{other:?}");
        }
        let tools: Vec<String> = ["web_search", "read", "bash"].map(String::from).into();
        assert_eq!(file_tools(&tools), ["read", "bash"]);
    }
}
