//! The environment a skill declares in its `SKILL.md` front matter
//! (docs/environments.md, "Declared by a skill"): `metadata.environment`,
//! the string `ID@HASH`. Pure.
//!
//! The declaration is part of the skill's pinned bytes, so a session that
//! freezes the skill freezes the environment with it.

use crate::package::environment::EnvRef;

/// The `metadata` key a skill declares its environment under.
pub const METADATA_KEY: &str = "environment";

/// Why a declaration cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclareError {
    #[error("metadata.environment {value:?} is not ID@HASH (an environment id, '@', and its 64 lowercase hex digit hash, as env list prints them)")]
    Malformed { value: String },
}

/// The environment `metadata` declares, if any.
pub fn declared(metadata: Option<&serde_yaml_ng::Value>) -> Result<Option<EnvRef>, DeclareError> {
    let Some(value) = metadata.and_then(|m| m.get(METADATA_KEY)) else {
        return Ok(None);
    };
    let text = match value {
        serde_yaml_ng::Value::String(s) => s.clone(),
        other => {
            return Err(DeclareError::Malformed {
                value: serde_yaml_ng::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            })
        }
    };
    parse(&text).map(Some)
}

/// `ID@HASH`, as a skill declares it and `env list` prints it.
pub fn parse(text: &str) -> Result<EnvRef, DeclareError> {
    let malformed = || DeclareError::Malformed {
        value: text.to_owned(),
    };
    let (id, hash) = text.split_once('@').ok_or_else(malformed)?;
    if crate::package::format::check_id(id).is_err() || !crate::package::hash::is_hex_digest(hash) {
        return Err(malformed());
    }
    Ok(EnvRef {
        id: id.to_owned(),
        hash: hash.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(yaml: &str) -> serde_yaml_ng::Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn a_declaration_is_id_at_hash_and_anything_else_is_refused() {
        let h = "a".repeat(64);
        assert_eq!(declared(None), Ok(None));
        assert_eq!(declared(Some(&meta("version: '1'"))), Ok(None));
        assert_eq!(
            declared(Some(&meta(&format!("environment: pdf-tools@{h}")))),
            Ok(Some(EnvRef {
                id: "pdf-tools".into(),
                hash: h.clone()
            }))
        );
        for bad in [
            "environment: pdf-tools".to_owned(),
            format!("environment: Pdf@{h}"),
            "environment: pdf@abc".to_owned(),
            format!("environment: {{id: pdf, hash: {h}}}"),
        ] {
            assert!(declared(Some(&meta(&bad))).is_err(), "{bad}");
        }
    }
}
