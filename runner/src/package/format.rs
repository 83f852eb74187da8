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
    let yaml = &rest[..yaml_end];
    if yaml.len() > MAX_FRONT_MATTER_BYTES {
        return Err(fail(format!(
            "it is {} bytes, over the limit of {MAX_FRONT_MATTER_BYTES}; keep long text in the body below the closing '---' line",
            yaml.len()
        )));
    }
    let depth = yaml_depth(yaml);
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
    let mut deepest = 0;
    // Columns of the block nodes open, innermost last, and whether each
    // is a mapping key (whose value may be a `- ` sequence at its own
    // column, as `key:\n- item`).
    let mut columns: Vec<(usize, bool)> = Vec::new();
    let mut flow = 0usize;
    // Lines of a block scalar are skipped while indented past this column.
    let mut block_scalar: Option<usize> = None;
    for line in yaml.lines() {
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
                    .map_or(true, |&n| n == b' ' || n == b'\t' || n == b'\r');
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
                .map_or(true, |&n| n == b' ' || n == b'\t' || n == b'\r');
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
    deepest
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
            max_bundle_skills: 1,
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

    /// Front matter around `yaml`, with the required keys.
    fn skill_md(yaml: &str) -> Vec<u8> {
        format!("---\nname: x\ndescription: d\n{yaml}\n---\nbody\n").into_bytes()
    }

    fn refusal(bytes: &[u8]) -> String {
        parse_skill_md(bytes).unwrap_err().to_string()
    }

    #[test]
    fn deeply_nested_front_matter_is_refused_before_it_is_parsed() {
        // Each of these made the YAML parser's time grow with the square
        // of the size: 512 KiB of flow nesting took minutes of CPU.
        let flow = format!("a: {}{}", "[".repeat(30_000), "]".repeat(30_000));
        let maps = format!("a: {}1{}", "{b: ".repeat(10_000), "}".repeat(10_000));
        let dashes = format!("a:\n{}x", "- ".repeat(1_000));
        let mut block = String::from("a:\n");
        for level in 1..=40 {
            block.push_str(&format!("{}k{level}:\n", " ".repeat(level)));
        }
        block.push_str(&format!("{}end: 1", " ".repeat(41)));
        for yaml in [flow, maps, dashes, block] {
            let e = refusal(&skill_md(&yaml));
            assert!(
                e.contains(&format!("over the limit of {MAX_FRONT_MATTER_DEPTH}"))
                    && e.contains("flatten the front matter"),
                "{e}"
            );
        }
    }

    #[test]
    fn nesting_hidden_after_a_quote_or_a_bracket_in_text_still_counts() {
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        for yaml in [
            // A quote that does not close on its line is text.
            format!("a: [it's, {deep}]"),
            // An anchor or a tag before the collection.
            format!("a: &anchor {deep}"),
            format!("a: !!seq {deep}"),
            format!("a:\n- &x !tag {deep}"),
            format!("a: &x{deep}"),
            format!("a: [&x{deep}]"),
            format!("a: 'open\n  {deep}'"),
            // Closing brackets in a plain scalar cannot cancel real ones.
            format!("a: text ]]]]]]\nb: {deep}"),
            format!("a: [b, {deep}]\nc: d"),
        ] {
            assert!(yaml_depth(&yaml) > MAX_FRONT_MATTER_DEPTH, "{yaml}");
        }
    }

    #[test]
    fn ordinary_front_matter_nests_shallowly() {
        let yaml = "name: csv-report\n\
            description: \"Summarize [a CSV] file: {rows} and [[links]]\"\n\
            license: 'It''s MIT [see LICENSE]'\n\
            allowed-tools: [bash, python3]\n\
            metadata:\n  category: data\n  version: \"1.2\"\n  tags:\n    - csv\n    - {kind: report, deep: [1, 2]}\n\
            compatibility: >\n  [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ folded\n  text\n\
            notes: |\n  {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n";
        let depth = yaml_depth(yaml);
        assert!((4..=8).contains(&depth), "depth {depth}");
        let doc = parse_skill_md(format!("---\n{yaml}---\nbody\n").as_bytes()).unwrap();
        assert_eq!(doc.front.name, "csv-report");
    }

    #[test]
    fn the_depth_count_is_never_below_the_real_nesting() {
        use serde_yaml_ng::{Mapping, Value};
        fn depth(v: &Value) -> usize {
            match v {
                Value::Sequence(s) => 1 + s.iter().map(depth).max().unwrap_or(0),
                Value::Mapping(m) => 1 + m.values().map(depth).max().unwrap_or(0),
                _ => 0,
            }
        }
        // A small deterministic generator of nested values whose strings
        // hold quotes, brackets, colons and hashes.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        const TEXT: [&str; 6] = ["it's", "[x", "a: b", "# no", "}]", "\"q\" 'r'"];
        fn build(next: &mut dyn FnMut(u64) -> u64, level: usize) -> Value {
            match next(if level > 12 { 1 } else { 4 }) {
                0 => Value::String(TEXT[next(6) as usize].repeat(1 + next(3) as usize)),
                1 => Value::Sequence((0..1 + next(3)).map(|_| build(next, level + 1)).collect()),
                _ => {
                    let mut m = Mapping::new();
                    for k in 0..1 + next(3) {
                        m.insert(Value::String(format!("k{k}")), build(next, level + 1));
                    }
                    Value::Mapping(m)
                }
            }
        }
        for _ in 0..300 {
            let value = build(&mut next, 0);
            // Block style, and flow style (JSON is YAML), packed and spread.
            let json = serde_json::to_value(&value).unwrap();
            for text in [
                serde_yaml_ng::to_string(&value).unwrap(),
                format!("a: {json}"),
                format!("a: {}", serde_json::to_string_pretty(&json).unwrap()),
            ] {
                assert!(
                    yaml_depth(&text) >= depth(&value),
                    "counted {} for depth {}:\n{text}",
                    yaml_depth(&text),
                    depth(&value)
                );
            }
        }
    }

    #[test]
    fn front_matter_over_its_size_limit_is_refused() {
        let yaml = format!(
            "metadata:\n  notes: \"{}\"",
            "x".repeat(MAX_FRONT_MATTER_BYTES)
        );
        let e = refusal(&skill_md(&yaml));
        assert!(
            e.contains(&format!("over the limit of {MAX_FRONT_MATTER_BYTES}"))
                && e.contains("keep long text in the body"),
            "{e}"
        );
        // The body may be longer: it is not YAML.
        let long_body = format!("---\nname: x\ndescription: d\n---\n{}", "[".repeat(200_000));
        assert!(parse_skill_md(long_body.as_bytes()).is_ok());
    }
}
