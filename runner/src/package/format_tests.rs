//! Unit tests of `format.rs` (included from there as its `tests` module).

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

/// A 3-level front matter of aliases to aliases (45 KB, within the size
/// and depth bounds) made the YAML parser copy a 30,000-byte string out
/// 500,000 times: one upload aborted the daemon on memory.
#[test]
fn aliases_in_front_matter_are_refused_before_they_are_parsed() {
    let mut yaml = format!(
        "name: x\ndescription: y\nmetadata:\n  a: &a \"{}\"\n  b: &b [",
        "x".repeat(3000)
    );
    yaml.push_str(&vec!["*a"; 3000].join(", "));
    yaml.push_str("]\n  c: [");
    yaml.push_str(&vec!["*b"; 100].join(", "));
    yaml.push_str("]\n");
    assert!(yaml.len() < MAX_FRONT_MATTER_BYTES);
    assert!(yaml_depth(&yaml) <= MAX_FRONT_MATTER_DEPTH);
    let text = format!("---\n{yaml}---\nbody\n");
    let e = parse_skill_md(text.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("line 5") && e.contains("YAML alias"), "{e}");
    for (yaml, line) in [
        ("name: x\ndescription: *d\n", Some(2)),
        ("name: x\nmetadata:\n  - *a\n", Some(3)),
        ("name: x\nmetadata: {k: *a}\n", Some(2)),
        ("*a : x\n", Some(1)),
        // Not a node start: text, quoted text, a comment, a block scalar.
        ("name: x\ndescription: uses *bold* words\n", None),
        ("name: x\ndescription: \"*quoted*\"\n", None),
        ("name: x # *not an alias\n", None),
        ("name: x\ndescription: |\n  *a line of text\n", None),
    ] {
        assert_eq!(yaml_scan(yaml).alias_line, line, "{yaml}");
    }
}

/// YAML's own messages quote keys, and a key may hold line breaks: the
/// refusal is still one line (found by the `skill_md` fuzz target).
#[test]
fn a_yaml_error_quoting_a_key_with_line_breaks_is_one_line() {
    // A duplicate below a key that is a plain scalar over two lines:
    // the message names the path to it.
    let e = refusal(&skill_md("k: {? a\n\n  b: {x: 1, x: 2}}"));
    assert!(e.contains("not valid YAML"), "{e}");
    assert!(!e.contains(['\n', '\r']), "{e:?}");
}
