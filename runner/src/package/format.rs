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

/// The largest front matter (the YAML between the `---` lines) parsed, in
/// bytes. The YAML parser's time grows with size times nesting, so both
/// are bounded before it runs (docs/formats.md, "Skill packages").
pub const MAX_FRONT_MATTER_BYTES: usize = 64 * 1024;

/// The deepest nesting of collections a front matter may have, counted by
/// [`yaml_depth`] before the YAML is parsed.
pub const MAX_FRONT_MATTER_DEPTH: usize = 32;

/// Size and count limits of one package, with the defaults of docs/formats.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PackageLimits {
    pub max_files: usize,
    pub max_skill_md_bytes: u64,
    pub max_file_bytes: u64,
    pub max_package_bytes: u64,
    /// Skills one bundle may hold (docs/formats.md, "Bundles"): each costs
    /// a verification and store entries, so an upload is bounded in count
    /// as well as in bytes.
    pub max_bundle_skills: usize,
}

impl Default for PackageLimits {
    fn default() -> Self {
        PackageLimits {
            max_files: 500,
            max_skill_md_bytes: 512 * 1024,
            max_file_bytes: 10 * 1024 * 1024,
            max_package_bytes: 50 * 1024 * 1024,
            max_bundle_skills: 256,
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
    // One line whatever the reason quotes (YAML's messages quote keys,
    // which may hold line breaks).
    let fail = |reason: String| PackageError::FrontMatter {
        reason: crate::text::single_line(&reason),
    };
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
    let yaml = &rest[..yaml_end];
    if yaml.len() > MAX_FRONT_MATTER_BYTES {
        return Err(fail(format!(
            "it is {} bytes, over the limit of {MAX_FRONT_MATTER_BYTES}; keep long text in the body below the closing '---' line",
            yaml.len()
        )));
    }
    let scan = yaml_scan(yaml);
    if let Some(line) = scan.alias_line {
        return Err(fail(format!(
            "line {line} of it uses a YAML alias (`*name`), which the parser would copy out in full at every use; write the value out instead (or quote text that starts with '*')"
        )));
    }
    let depth = scan.depth;
    if depth > MAX_FRONT_MATTER_DEPTH {
        return Err(fail(format!(
            "it nests collections {depth} levels deep, over the limit of {MAX_FRONT_MATTER_DEPTH}; flatten the front matter"
        )));
    }
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(yaml).map_err(|e| fail(format!("it is not valid YAML ({e})")))?;
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

/// An upper bound on how deeply `yaml` nests collections, found in one
/// pass over the text without parsing it (the parser's time grows with
/// nesting, so it runs only on text this bounds).
///
/// Counted: block nesting, as the stack of indentation columns of the
/// nodes open on the current line (a key, a `- ` or `? ` entry, each one
/// column further right than the last), plus flow nesting (`[` and `{`
/// where a value may start or inside another flow collection). Skipped:
/// comments, block scalars (`|`, `>`) and quoted scalars that close on the
/// line they open on; a quote that does not close there is counted as
/// text, so brackets after it count. The count errs high, never low: valid
/// YAML nests at most as deep as this says.
pub fn yaml_depth(yaml: &str) -> usize {
    yaml_scan(yaml).depth
}

/// What one pass over front matter finds before it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YamlScan {
    /// An upper bound on the nesting depth ([`yaml_depth`]).
    pub depth: usize,
    /// The first line (from 1) where an alias (`*name`) may start a node.
    /// An alias makes the parser copy the anchored value out in full at
    /// each use, so a few kilobytes of aliases to aliases expand to
    /// gigabytes: front matter has no use for them, and any `*` where a
    /// node may start is taken for one (erring towards refusal).
    pub alias_line: Option<usize>,
}

/// [`yaml_depth`]'s pass, which also finds aliases.
pub fn yaml_scan(yaml: &str) -> YamlScan {
    let mut deepest = 0;
    let mut alias_line = None;
    // Columns of the block nodes open, innermost last, and whether each
    // is a mapping key (whose value may be a `- ` sequence at its own
    // column, as `key:\n- item`).
    let mut columns: Vec<(usize, bool)> = Vec::new();
    let mut flow = 0usize;
    // Lines of a block scalar are skipped while indented past this column.
    let mut block_scalar: Option<usize> = None;
    for (number, line) in yaml.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        let blank = bytes[indent..]
            .iter()
            .all(|&b| b == b' ' || b == b'\t' || b == b'\r');
        if let Some(parent) = block_scalar {
            if blank || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        if blank {
            continue;
        }
        if flow == 0 {
            let entry = bytes[indent] == b'-'
                && bytes
                    .get(indent + 1)
                    .is_none_or(|&n| n == b' ' || n == b'\t' || n == b'\r');
            while let Some(&(c, key)) = columns.last() {
                if c < indent || (c == indent && key && entry) {
                    break;
                }
                columns.pop();
            }
        }
        // Whether a node may start here (after indentation, `- `, `? `,
        // `: ` or, in flow, `[`, `{` and `,`).
        let mut value_start = true;
        // The column of a scalar begun on this line (a key, if `: ` follows).
        let mut node_column = None;
        let mut i = indent;
        while i < bytes.len() {
            let b = bytes[i];
            let spaced = bytes
                .get(i + 1)
                .is_none_or(|&n| n == b' ' || n == b'\t' || n == b'\r');
            match b {
                b' ' | b'\t' | b'\r' => {}
                b'#' if i == 0 || matches!(bytes[i - 1], b' ' | b'\t') => break,
                // A node's anchor or tag comes before the node itself:
                // skipped, and a node may still start after it.
                b'&' | b'!' if value_start => {
                    // Its name ends at a space or a flow indicator.
                    while i + 1 < bytes.len()
                        && !matches!(
                            bytes[i + 1],
                            b' ' | b'\t' | b'\r' | b'[' | b']' | b'{' | b'}' | b','
                        )
                    {
                        i += 1;
                    }
                }
                b'\'' | b'"' if value_start => {
                    node_column.get_or_insert(i);
                    value_start = false;
                    if let Some(end) = quoted_end(bytes, i) {
                        i = end;
                    }
                }
                b'[' | b'{' if value_start || flow > 0 => {
                    flow += 1;
                    value_start = true;
                    let open = columns.len() + usize::from(node_column.is_some()) + flow;
                    deepest = deepest.max(open);
                }
                b']' | b'}' if flow > 0 => {
                    flow -= 1;
                    value_start = false;
                }
                b',' if flow > 0 => value_start = true,
                b'-' | b'?' if flow == 0 && value_start && spaced => {
                    columns.push((i, false));
                    node_column = None;
                }
                b':' if spaced => {
                    if flow == 0 {
                        if let Some(c) = node_column.take() {
                            columns.push((c, true));
                        }
                    }
                    value_start = true;
                }
                b'*' if value_start => {
                    alias_line.get_or_insert(number + 1);
                    node_column.get_or_insert(i);
                    value_start = false;
                }
                b'|' | b'>' if flow == 0 && value_start => {
                    block_scalar = Some(columns.last().map_or(0, |&(c, _)| c).min(indent));
                    break;
                }
                _ => {
                    node_column.get_or_insert(i);
                    value_start = false;
                }
            }
            i += 1;
        }
        deepest = deepest.max(columns.len() + usize::from(node_column.is_some()) + flow);
    }
    YamlScan {
        depth: deepest,
        alias_line,
    }
}

/// The index of the quote closing the quoted scalar opened at `start` on
/// this line, if it closes on it.
fn quoted_end(line: &[u8], start: usize) -> Option<usize> {
    let q = line[start];
    let mut i = start + 1;
    while i < line.len() {
        match line[i] {
            b'\\' if q == b'"' => i += 1,
            b'\'' if q == b'\'' && line.get(i + 1) == Some(&b'\'') => i += 1,
            c if c == q => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
