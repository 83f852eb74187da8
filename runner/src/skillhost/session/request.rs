//! Requests: what `POST /v1/sessions` and the query strings of the
//! session routes accept, parsed strictly (unknown fields are refused).
//!
//! A requested skill is a catalog name or a complete binding, never a mix
//! of the two; [`SkillSpec::from_arg`] is the same choice as the command
//! line writes it.

use serde::Deserialize;

use super::SessionError;
use crate::package::hash::Binding;
use crate::package::store::{Store, StoreError};

/// `POST /v1/sessions` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    pub skills: Vec<SkillSpec>,
    pub tools: Vec<String>,
    /// `"managed"`: the daemon keeps a workspace for the session's jobs.
    #[serde(default)]
    pub workspace: Option<super::workspace::WorkspaceKind>,
    /// The environment every job of the session runs with; by default
    /// the one its skills declare ([`super::environment`]).
    #[serde(default)]
    pub environment: Option<crate::package::environment::EnvRef>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
