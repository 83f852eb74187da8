//! The crate's architecture, checked: rooms form a ladder (a room uses
//! only the rooms below it, `package` and `sandbox` never each other), no
//! two modules import each other (directly or around a loop), and
//! `unsafe` is allowed in `supervise::sys` alone. See the table in
//! `runner/src/lib.rs`.
//!
//! The module graph is read from the sources: every `crate::…` path and
//! every `super::…` path in code (comments, the `#[cfg(test)]` module at
//! the end of a file, and the sibling `x_tests.rs` that holds the unit tests
//! of `x.rs` are skipped) is an edge to the deepest module it names.
//! `cargo test -p skill-runner --test library architecture -- --nocapture`
//! prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The rooms, lowest first; rooms of equal rank must not use each other.
const ROOMS: &[(&str, u32)] = &[
    ("text", 0),
    ("memo", 0),
    ("error", 0),
    ("telemetry", 0),
    ("fsx", 1),
    ("supervise", 2),
    ("datadir", 2),
    ("package", 3),
    ("sandbox", 3),
    ("receipt", 3),
    ("exec", 4),
    ("skillhost", 5),
    ("daemon", 6),
];

type Module = String;

struct Crate {
    /// Module path (`exec::runner`, `` for lib.rs) → source without
    /// comments and tests.
    modules: BTreeMap<Module, String>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut modules = BTreeMap::new();
        let mut files = Vec::new();
        walk(src, &mut files);
        for file in files {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            if parts == ["main"]
                || parts == ["cli"]
                || parts == ["progress"]
                || parts == ["completions"]
                || parts == ["distribute"]
            {
                continue; // the binary, above every room
            }
            if parts.last().is_some_and(|p| p.ends_with("_tests")) {
                // The unit tests of the sibling file, which includes them as
                // `#[cfg(test)] #[path = "x_tests.rs"] mod tests;`: like a
                // `#[cfg(test)]` module at the end of a file, not a room's code.
                continue;
            }
            let text = fs::read_to_string(&file).unwrap();
            modules.insert(parts.join("::"), code_only(&text));
        }
        Crate { modules }
    }

    /// The deepest module `path` (segments from the crate root) names.
    fn resolve(&self, segments: &[&str]) -> Option<Module> {
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|m| self.modules.contains_key(m))
    }

    /// The absolute segments of `path` as written in `module`: `crate::…`,
    /// `super::…`, `self::…`, or a child of `module` named bare (`use
    /// child::Item`); `None` for anything else (std, other crates).
    fn absolute<'a>(&self, module: &'a str, path: &'a str) -> Option<Vec<&'a str>> {
        let own = || module.split("::").filter(|s| !s.is_empty());
        let mut rest = path.split("::").peekable();
        let mut segments: Vec<&str> = Vec::new();
        match rest.peek().copied()? {
            "crate" => {
                rest.next();
            }
            // `super` is the parent of the module, whatever file holds it.
            "super" => {
                segments.extend(own());
                while rest.peek() == Some(&"super") {
                    rest.next();
                    segments.pop();
                }
            }
            "self" => {
                rest.next();
                segments.extend(own());
            }
            first => {
                let child = if module.is_empty() {
                    first.to_owned()
                } else {
                    format!("{module}::{first}")
                };
                if !self.modules.contains_key(&child) {
                    return None;
                }
                segments.extend(own());
            }
        }
        segments.extend(rest);
        Some(segments)
    }

    /// The module `segments` name, seen through the faces' re-exports: an
    /// item a face re-exports from one of its children (`pub use
    /// child::Item`) belongs to that child, so `super::Item` cannot hide a
    /// dependency on a sibling.
    fn target(
        &self,
        segments: &[&str],
        reexports: &BTreeMap<(Module, String), Module>,
    ) -> Option<Module> {
        let found = self.resolve(segments)?;
        let depth = found.split("::").count();
        match segments.get(depth) {
            Some(item) => Some(
                reexports
                    .get(&(found.clone(), (*item).to_owned()))
                    .cloned()
                    .unwrap_or(found),
            ),
            None => Some(found),
        }
    }

    /// (face, item) → the child module the face re-exports the item from.
    fn reexports(&self) -> BTreeMap<(Module, String), Module> {
        let mut map = BTreeMap::new();
        for (module, code) in &self.modules {
            for (path, public) in uses(code) {
                let Some(segments) = self.absolute(module, &path).filter(|_| public) else {
                    continue;
                };
                let (Some(item), Some(child)) = (segments.last(), self.resolve(&segments)) else {
                    continue;
                };
                if child.starts_with(&format!("{module}::")) || module.is_empty() {
                    map.insert((module.clone(), (*item).to_owned()), child);
                }
            }
        }
        map
    }

    /// Module → the modules its code names.
    fn edges(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let reexports = self.reexports();
        let mut edges = BTreeMap::new();
        for (module, code) in &self.modules {
            let mut to = BTreeSet::new();
            let used = uses(code).into_iter().map(|(p, _)| p);
            for path in paths(code).into_iter().chain(used) {
                let Some(segments) = self.absolute(module, &path) else {
                    continue;
                };
                if let Some(target) = self.target(&segments, &reexports) {
                    if &target != module && !module.starts_with(&format!("{target}::")) {
                        to.insert(target);
                    }
                }
            }
            edges.insert(module.clone(), to);
        }
        edges
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source as code: comments gone, string and char literals emptied
/// (so neither `"http://x"` nor `"crate::x"` reads as anything), and
/// every `#[cfg(test)]` module cut out wherever it stands.
fn code_only(text: &str) -> String {
    let stripped = strip(text);
    let mut code = stripped.as_str().to_owned();
    while let Some(at) = code.find("#[cfg(test)]") {
        let after = &code[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        // A body only: `#[cfg(test)] mod tests;` declares a file, and the
        // next `{` would be some other item's.
        let body = item.find('{').filter(|&open| {
            item.starts_with("mod ") && item.find(';').is_none_or(|semi| open < semi)
        });
        let Some(open) = body else {
            // `#[cfg(test)]` on something else: keep it, minus the attribute.
            code.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        };
        let start = code.len() - item.len() + open;
        let mut depth = 0;
        let mut end = code.len();
        for (i, c) in code[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = start + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        code.replace_range(at..end, "");
    }
    code
}

/// Removes comments and the contents of string and char literals.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + hashes + 2 + usize::from(rest.starts_with('b'));
            i = text[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            out.push_str("\"\"");
        } else if rest.starts_with('"') || rest.starts_with("b\"") {
            i += if rest.starts_with('b') { 2 } else { 1 };
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if let Some(after) = rest.strip_prefix('\'') {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime.
            let lit = if let Some(escaped) = after.strip_prefix('\\') {
                escaped.get(1..).and_then(|e| e.find('\'')).map(|n| n + 4)
            } else {
                after.chars().next().and_then(|c| {
                    let n = 1 + c.len_utf8();
                    rest[n..].starts_with('\'').then_some(n + 1)
                })
            };
            match lit {
                Some(n) => {
                    i += n;
                    out.push_str("' '");
                }
                None => {
                    i += 1;
                    out.push('\'');
                }
            }
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `Some(number of #)` when `text` starts a raw string (`r"`, `r#"`,
/// `br#"`).
fn raw_string_start(text: &str) -> Option<usize> {
    let t = text.strip_prefix('b').unwrap_or(text).strip_prefix('r')?;
    let hashes = t.len() - t.trim_start_matches('#').len();
    t[hashes..].starts_with('"').then_some(hashes)
}

/// Every `crate::a::b` and `super::a` path in `code`, with `use` groups
/// (`crate::a::{b, c::d}`) expanded.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            // `self::super::x` is `super::x`; any other `…::super` or
            // `…::crate` is part of a path already read.
            let head = code[..at].trim_end_matches("self::");
            let before = head.chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            expand(&code[at..], "", &mut out);
        }
    }
    out
}

/// The paths of every `use` statement in `code` (groups expanded), and
/// whether it is a `pub use` (a re-export).
fn uses(code: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("use ") {
        let line_start = code[..i].rfind('\n').map_or(0, |n| n + 1);
        let head = code[line_start..i].trim();
        let public = head.starts_with("pub");
        if !(head.is_empty() || public) {
            continue;
        }
        let mut found = Vec::new();
        expand(&code[i + 4..], "", &mut found);
        out.extend(found.into_iter().map(|p| (p, public)));
    }
    out
}

/// Reads one path (and its group, if any) at the start of `text`.
fn expand(text: &str, prefix: &str, out: &mut Vec<String>) {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let path = format!("{prefix}{}", &text[..end]);
    if text[end..].starts_with('{') && path.ends_with("::") {
        let group = &text[end + 1..];
        let mut depth = 0;
        let mut item_start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand(group[item_start..i].trim_start(), &path, out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(group[item_start..i].trim_start(), &path, out);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
    } else {
        let path = path.trim_end_matches("::").trim_end_matches("::self");
        out.push(path.to_owned());
    }
}

fn room(module: &str) -> &str {
    module.split("::").next().unwrap()
}

fn rank(room: &str) -> Option<u32> {
    ROOMS.iter().find(|(r, _)| *r == room).map(|(_, n)| *n)
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn rooms_use_only_the_rooms_below_them() {
    let krate = Crate::read(&src());
    let edges = krate.edges();
    let mut wrong = Vec::new();
    println!("module graph (module -> what its code names):");
    for (from, tos) in &edges {
        let list: Vec<&str> = tos.iter().map(String::as_str).collect();
        println!(
            "  {} -> {}",
            if from.is_empty() { "lib" } else { from },
            list.join(", ")
        );
        if from.is_empty() {
            continue;
        }
        let Some(from_rank) = rank(room(from)) else {
            wrong.push(format!("{from} is in no room of ROOMS"));
            continue;
        };
        for to in tos {
            if room(to) == room(from) {
                continue;
            }
            match rank(room(to)) {
                Some(r) if r < from_rank => {}
                _ => wrong.push(format!("{from} uses {to}, which is not below it")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the ladder is broken:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_modules_import_each_other() {
    let krate = Crate::read(&src());
    let edges = krate.edges();
    // A child naming its own parent (`super::Item`) is the module tree,
    // not an import, and is left out of the graph (see `edges`); a parent
    // naming a child, or siblings naming each other, are edges.
    let mut cycles = Vec::new();
    let mut state: BTreeMap<&str, u8> = BTreeMap::new(); // 1 on stack, 2 done
    fn visit<'a>(
        m: &'a str,
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
        cycles: &mut Vec<String>,
    ) {
        state.insert(m, 1);
        stack.push(m);
        for to in edges.get(m).into_iter().flatten() {
            match state.get(to.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == to).unwrap();
                    let mut ring: Vec<&str> = stack[from..].to_vec();
                    ring.push(to);
                    cycles.push(ring.join(" -> "));
                }
                Some(_) => {}
                None => visit(to, edges, state, stack, cycles),
            }
        }
        stack.pop();
        state.insert(m, 2);
    }
    for m in edges.keys() {
        if !state.contains_key(m.as_str()) {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut cycles);
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn unsafe_is_allowed_in_supervise_sys_alone() {
    // Every mention of the lint in code (not comments): lib.rs denies it,
    // main.rs forbids it, and one attribute allows it on `sys`. Any other
    // (`allow`, `expect`, `warn`, in a list or not) fails here; and a blanket
    // `allow(warnings)` is refused too.
    let mut files = Vec::new();
    walk(&src(), &mut files);
    let mut found = Vec::new();
    for file in files {
        let code = strip(&fs::read_to_string(&file).unwrap());
        let name = file.strip_prefix(src()).unwrap().display().to_string();
        let lines: Vec<&str> = code.lines().map(str::trim).collect();
        for (n, line) in lines.iter().enumerate() {
            // Forbidding it is always fine (main.rs must, below).
            if line.contains("unsafe_code")
                && (name == "main.rs" || !line.starts_with("#![forbid(unsafe_code)]"))
            {
                let next = lines[n + 1..].iter().find(|l| !l.is_empty()).unwrap_or(&"");
                found.push(format!("{name}: {line} {next}"));
            }
            assert!(!line.contains("allow(warnings"), "{name}: {line}");
        }
    }
    found.sort();
    assert_eq!(
        found,
        [
            "lib.rs: #![deny(unsafe_code)] pub mod daemon;",
            "main.rs: #![forbid(unsafe_code)] mod cli;",
            "supervise/mod.rs: #[allow(unsafe_code)] pub mod sys;",
        ],
        "unsafe_code may be allowed on supervise::sys only"
    );
}

#[test]
fn the_crate_root_only_declares_rooms() {
    // A `pub use` in lib.rs would let a room name another's item as
    // `crate::Item`, which the graph cannot place.
    let lib = code_only(&fs::read_to_string(src().join("lib.rs")).unwrap());
    for line in lib.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            line.starts_with("pub mod ") || line.starts_with("#!["),
            "lib.rs may only declare rooms: {line}"
        );
    }
    let rooms: BTreeSet<&str> = ROOMS.iter().map(|(r, _)| *r).collect();
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .collect();
    assert_eq!(declared, rooms, "every room is in ROOMS, and only rooms");
}

#[test]
fn no_macro_is_used_outside_its_module() {
    // A macro expands where it is invoked, so its paths would be the
    // caller's imports without appearing in the caller's source.
    let mut files = Vec::new();
    walk(&src(), &mut files);
    let code: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let c = code_only(&fs::read_to_string(&f).unwrap());
            (f, c)
        })
        .collect();
    for (file, text) in &code {
        assert!(!text.contains("macro_export"), "{}", file.display());
        for (i, _) in text.match_indices("macro_rules!") {
            let name: String = text[i + "macro_rules!".len()..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            for (other, other_text) in &code {
                if other != file {
                    assert!(
                        !other_text.contains(&format!("{name}!")),
                        "{} uses macro {name}! of {}",
                        other.display(),
                        file.display()
                    );
                }
            }
        }
    }
}

#[test]
fn the_reader_sees_through_strings_comments_and_late_tests() {
    let text = r##"
let a = ("http://x", crate::daemon::X);
let b = r#"crate::fake"#;
let c = '"'; let d: &'static str = "/* not a comment";
/* crate::also_fake */
#[cfg(test)]
mod tests { use crate::test_only; }
fn after() { self::super::late::Y; }
"##;
    let got = paths(&code_only(text));
    assert_eq!(got, ["crate::daemon::X", "super::late::Y"]);
    let declared = "#[cfg(test)]\nmod tests;\nfn f() { crate::daemon::Z; }\n";
    assert_eq!(paths(&code_only(declared)), ["crate::daemon::Z"]);
}

#[test]
fn a_face_cannot_hide_a_sibling_import() {
    let krate = Crate {
        modules: [
            ("r", "pub mod a;\npub mod b;\npub use b::Thing;\n"),
            ("r::a", "use super::Thing;\n"),
            ("r::b", "use super::a::Other;\n"),
        ]
        .into_iter()
        .map(|(m, c)| (m.to_owned(), c.to_owned()))
        .collect(),
    };
    let edges = krate.edges();
    assert!(edges["r::a"].contains("r::b"), "{edges:?}");
    assert!(edges["r"].contains("r::b"), "{edges:?}");
}

#[test]
fn the_graph_reader_sees_groups_and_super() {
    let got = paths(&code_only(
        "use crate::a::{b, c::{d, E}};\nlet x = super::f::g(); // crate::z\n",
    ));
    assert_eq!(
        got,
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::E",
            "super::f::g"
        ]
    );
    assert_eq!(
        code_only("a // crate::x\n#[cfg(test)]\nmod tests {}"),
        "a \n"
    );
}
