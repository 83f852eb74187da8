//! The Skill package format: admissible paths, ids, limits and `SKILL.md`
//! front matter (docs/formats.md, "Skill packages").
//!
//! A package is a folder of regular files with `SKILL.md` at its root. This
//! module decides what is admissible; it does not read folders (see
//! [`crate::package::source`]) or write them (see [`crate::package::stage`]). Everything here
//! is pure and works on names, sizes and bytes already in memory.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The file every package must have at its root.
pub const SKILL_MD: &str = "SKILL.md";

/// Size and count limits of one package, with the defaults of docs/formats.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PackageLimits {
    pub max_files: usize,
    pub max_skill_md_bytes: u64,
    pub max_file_bytes: u64,
    pub max_package_bytes: u64,
}

impl Default for PackageLimits {
    fn default() -> Self {
        PackageLimits {
            max_files: 500,
            max_skill_md_bytes: 512 * 1024,
            max_file_bytes: 10 * 1024 * 1024,
            max_package_bytes: 50 * 1024 * 1024,
        }
    }
}

/// Why a package (or one of its paths) is not admissible.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PackageError {
    #[error("path {path:?} is not admissible: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error("skill id {id:?} is not admissible: ids match ^[a-z0-9]+(-[a-z0-9]+)*$")]
    BadId { id: String },
    #[error("revision must be an integer >= 1, got {revision}")]
    BadRevision { revision: u64 },
    #[error("hash {hash:?} is not admissible: a package hash is 64 lowercase hex digits")]
    BadHash { hash: String },
    #[error("the package has no SKILL.md at its root")]
    MissingSkillMd,
    #[error("the package has more than {limit} files")]
    TooManyFiles { limit: usize },
    #[error("file {path:?} is {size} bytes, over the limit of {limit}")]
    FileTooLarge { path: String, size: u64, limit: u64 },
    #[error("the package is {size} bytes, over the limit of {limit}")]
    PackageTooLarge { size: u64, limit: u64 },
    #[error("path {path:?} appears twice")]
    DuplicatePath { path: String },
    #[error("the files cannot be hashed: {0}")]
    Hash(#[from] crate::package::hash::HashError),
    #[error("SKILL.md front matter: {reason}")]
    FrontMatter { reason: String },
}

/// Checks a package-relative path against the path rules.
pub fn check_path(path: &str) -> Result<(), PackageError> {
    let bad = |reason| {
        Err(PackageError::BadPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("it is empty");
    }
    if path.starts_with('/') {
        return bad("it is absolute");
    }
    if path.contains('\\') {
        return bad("it contains a backslash");
    }
    if path.contains('\0') {
        return bad("it contains a NUL byte");
    }
    for segment in path.split('/') {
        match segment {
            "" => return bad("it has an empty segment"),
            "." => return bad("it has a '.' segment"),
            ".." => return bad("it has a '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a skill id: `^[a-z0-9]+(?:-[a-z0-9]+)*$`.
pub fn check_id(id: &str) -> Result<(), PackageError> {
    let ok = !id.is_empty()
        && id.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(PackageError::BadId { id: id.to_owned() })
    }
}

/// Checks a frozen binding's fields (not the bytes it names).
pub fn check_binding(b: &crate::package::hash::Binding) -> Result<(), PackageError> {
    check_id(&b.id)?;
    if b.revision < 1 {
        return Err(PackageError::BadRevision {
            revision: b.revision,
        });
    }
    if !crate::package::hash::is_hex_digest(&b.hash) {
        return Err(PackageError::BadHash {
            hash: b.hash.clone(),
        });
    }
    Ok(())
}

/// Running tally of a package's files against [`PackageLimits`]; feed every file.
#[derive(Debug, Clone)]
pub struct LimitTally {
    limits: PackageLimits,
    files: usize,
    bytes: u64,
}

impl LimitTally {
    pub fn new(limits: PackageLimits) -> Self {
        LimitTally {
            limits,
            files: 0,
            bytes: 0,
        }
    }

    /// Accounts one file; fails as soon as a limit is passed.
    pub fn add(&mut self, path: &str, size: u64) -> Result<(), PackageError> {
        self.files += 1;
        if self.files > self.limits.max_files {
            return Err(PackageError::TooManyFiles {
                limit: self.limits.max_files,
            });
        }
        let limit = if path == SKILL_MD {
            self.limits.max_skill_md_bytes
        } else {
            self.limits.max_file_bytes
        };
        if size > limit {
            return Err(PackageError::FileTooLarge {
                path: path.to_owned(),
                size,
                limit,
            });
        }
        self.bytes += size;
        if self.bytes > self.limits.max_package_bytes {
            return Err(PackageError::PackageTooLarge {
                size: self.bytes,
                limit: self.limits.max_package_bytes,
            });
        }
        Ok(())
    }
}

/// The parsed front matter of `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrontMatter {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<serde_yaml_ng::Value>,
    pub metadata: Option<serde_yaml_ng::Value>,
    #[serde(rename = "allowed-tools")]
    pub allowed_tools: Option<serde_yaml_ng::Value>,
    /// Keys the format does not define: kept, and reported as warnings.
    pub unknown: BTreeMap<String, serde_yaml_ng::Value>,
}

/// `SKILL.md` split into its front matter and its Markdown body.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillDoc {
    pub front: FrontMatter,
    pub body: String,
}

impl SkillDoc {
    /// Warnings a publisher should see: unknown keys, and a `name` that
    /// differs from the id the package is bound to.
    pub fn warnings(&self, id: Option<&str>) -> Vec<String> {
        let mut out: Vec<String> = self
            .front
            .unknown
            .keys()
            .map(|k| format!("SKILL.md front matter has an unknown key {k:?} (kept)"))
            .collect();
        if let Some(id) = id {
            if self.front.name != id {
                out.push(format!(
                    "SKILL.md name {:?} differs from the skill id {id:?}",
                    self.front.name
                ));
            }
        }
        out
    }
}

/// Parses `SKILL.md`: `---` line, YAML mapping, `---` line, body.
pub fn parse_skill_md(bytes: &[u8]) -> Result<SkillDoc, PackageError> {
    let fail = |reason: String| PackageError::FrontMatter { reason };
    let text = std::str::from_utf8(bytes).map_err(|_| fail("SKILL.md is not UTF-8".into()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(|| fail("SKILL.md must start with a '---' line".into()))?;
    let mut yaml_len = None;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end_matches(['\n', '\r']) == "---" {
            yaml_len = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let (yaml_end, body_start) =
        yaml_len.ok_or_else(|| fail("the front matter has no closing '---' line".into()))?;
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rest[..yaml_end])
        .map_err(|e| fail(format!("it is not valid YAML ({e})")))?;
    let serde_yaml_ng::Value::Mapping(map) = value else {
        return Err(fail("it is not a YAML mapping".into()));
    };
    const KNOWN: [&str; 6] = [
        "name",
        "description",
        "license",
        "compatibility",
        "metadata",
        "allowed-tools",
    ];
    let mut known: BTreeMap<String, serde_yaml_ng::Value> = BTreeMap::new();
    let mut unknown = BTreeMap::new();
    for (k, v) in map {
        let serde_yaml_ng::Value::String(key) = k else {
            return Err(fail("a key is not a string".into()));
        };
        if KNOWN.contains(&key.as_str()) {
            known.insert(key, v);
        } else {
            unknown.insert(key, v);
        }
    }
    let required =
        |known: &mut BTreeMap<String, serde_yaml_ng::Value>, key: &str| match known.remove(key) {
            Some(serde_yaml_ng::Value::String(s)) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(fail(format!("'{key}' must be a non-empty string"))),
            None => Err(fail(format!("the required key '{key}' is missing"))),
        };
    let name = required(&mut known, "name")?;
    let description = required(&mut known, "description")?;
    let license = match known.remove("license") {
        None => None,
        Some(serde_yaml_ng::Value::String(s)) => Some(s),
        Some(_) => return Err(fail("'license' must be a string".into())),
    };
    Ok(SkillDoc {
        front: FrontMatter {
            name,
            description,
            license,
            compatibility: known.remove("compatibility"),
            metadata: known.remove("metadata"),
            allowed_tools: known.remove("allowed-tools"),
            unknown,
        },
        body: rest[body_start..].to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_rules() {
        for ok in [
            "SKILL.md",
            "a/b",
            "scripts/x.sh",
            "été/日本.txt",
            "..a",
            "a..b",
        ] {
            assert_eq!(check_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/abs",
            "../escape",
            "a/../b",
            "a//b",
            "a/./b",
            "./a",
            "a/",
            "a\\b",
            "a\0b",
            ".",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn id_rules() {
        for ok in ["hello", "a", "alpha-tools", "x1-2y"] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Hello", "-a", "a-", "a--b", "a_b", "a.b", "é"] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_are_enforced_in_order() {
        let limits = PackageLimits {
            max_files: 2,
            max_skill_md_bytes: 10,
            max_file_bytes: 100,
            max_package_bytes: 150,
        };
        let mut t = LimitTally::new(limits);
        assert!(matches!(
            t.add(SKILL_MD, 11),
            Err(PackageError::FileTooLarge { .. })
        ));
        let mut t = LimitTally::new(limits);
        t.add(SKILL_MD, 10).unwrap();
        t.add("a", 100).unwrap();
        assert!(matches!(
            t.add("b", 1),
            Err(PackageError::TooManyFiles { limit: 2 })
        ));
        let mut t = LimitTally::new(PackageLimits {
            max_files: 9,
            ..limits
        });
        t.add("a", 100).unwrap();
        assert!(matches!(
            t.add("b", 60),
            Err(PackageError::PackageTooLarge { .. })
        ));
    }

    #[test]
    fn front_matter_parses_known_and_keeps_unknown() {
        let doc = parse_skill_md(
            b"---\nname: hello\ndescription: Says hi.\nlicense: MIT\nallowed-tools: [bash]\nfancy: 1\n---\n# Body\n",
        )
        .unwrap();
        assert_eq!(doc.front.name, "hello");
        assert_eq!(doc.front.description, "Says hi.");
        assert_eq!(doc.front.license.as_deref(), Some("MIT"));
        assert!(doc.front.allowed_tools.is_some());
        assert_eq!(doc.body, "# Body\n");
        assert_eq!(doc.warnings(Some("other")).len(), 2);
    }

    #[test]
    fn front_matter_errors() {
        for bad in [
            &b"no front matter"[..],
            b"---\nname: x\n",
            b"---\nname: [unclosed\n---\n",
            b"---\n- a list\n---\n",
            b"---\ndescription: d\n---\n",
            b"---\nname: x\n---\n",
            b"---\nname: 3\ndescription: d\n---\n",
            b"\xff\xfe",
        ] {
            assert!(
                parse_skill_md(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
