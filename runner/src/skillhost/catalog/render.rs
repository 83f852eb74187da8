//! The catalog as `skill-runner catalog` prints it: the text forms of a
//! listing, a search and one skill (the JSON forms are the documents'
//! own `Serialize`). Pure: the command line writes what these return.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::{Catalog, CatalogError, Entry, FindResult};
use crate::package::format::{self, PackageLimits};

/// Runs of whitespace (newlines too) as one space: one entry a line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `catalog list`: name, source, kind and description, one skill a line.
pub fn listing(entries: &[Entry]) -> String {
    let mut out = String::new();
    for e in entries {
        let desc = one_line(&e.description);
        let (name, source, kind) = (&e.name, e.source.as_str(), e.kind.as_str());
        let _ = writeln!(out, "{name:<28} {source:<8} {kind:<17} {desc}");
    }
    out
}

/// `catalog find`: the query's explanation when asked for, each hit with
/// its score (and why, when explained), and the message when none.
pub fn search(found: &FindResult) -> String {
    let mut out = String::new();
    if let Some(e) = &found.explain {
        let _ = writeln!(out, "{}", e.text());
    }
    for h in &found.hits {
        let desc = one_line(&h.description);
        let _ = writeln!(out, "{:>4}  {:<28} {desc}", h.score, h.name);
        if let (Some(e), Some(q)) = (&h.explain, &found.explain) {
            let _ = writeln!(out, "      {}", e.text(q.name_bonus));
        }
    }
    if let Some(m) = &found.message {
        let _ = writeln!(out, "{m}");
    }
    out
}

/// One skill as `catalog show` prints it: its entry, its files and its
/// `SKILL.md`.
#[derive(Debug, Serialize)]
pub struct Shown<'a> {
    #[serde(flatten)]
    pub entry: &'a Entry,
    pub file_list: Vec<String>,
    pub skill_md: String,
}

impl<'a> Shown<'a> {
    /// Reads the skill's files now ([`Catalog::read_files`]).
    pub fn read(entry: &'a Entry, limits: &PackageLimits) -> Result<Shown<'a>, CatalogError> {
        let files = Catalog::read_files(entry, limits)?;
        let skill_md = files
            .iter()
            .find(|f| f.0 == format::SKILL_MD)
            .map(|f| String::from_utf8_lossy(&f.1).into_owned())
            .unwrap_or_default();
        Ok(Shown {
            entry,
            file_list: files.into_iter().map(|f| f.0).collect(),
            skill_md,
        })
    }

    /// The text form: `name:`, `description:`, `source:` and `shadows:`
    /// lines, a `file:` line for each file, then `SKILL.md`.
    pub fn text(&self) -> String {
        let at = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| format!(" {}", p.display()))
                .unwrap_or_default()
        };
        let e = self.entry;
        let mut out = String::new();
        let _ = writeln!(out, "name: {}", e.name);
        let _ = writeln!(out, "description: {}", one_line(&e.description));
        let _ = writeln!(out, "source: {}{}", e.source.as_str(), at(&e.path));
        for s in &e.shadows {
            let _ = writeln!(out, "shadows: {}{}", s.source.as_str(), at(&s.path));
        }
        for f in &self.file_list {
            let _ = writeln!(out, "file: {f}");
        }
        let _ = write!(out, "\n{}", self.skill_md);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skillhost::catalog::CatalogConfig;

    #[test]
    fn a_description_over_lines_is_listed_on_one() {
        assert_eq!(one_line("Greets\n  the   user.\n"), "Greets the user.");
    }

    #[test]
    fn the_builtin_skills_render_as_a_table_and_a_page() {
        let catalog = Catalog::load(&CatalogConfig::default());
        let entries = catalog.entries();
        assert!(!entries.is_empty());
        let table = listing(entries);
        assert_eq!(table.lines().count(), entries.len(), "{table}");
        for (line, e) in table.lines().zip(entries) {
            assert!(line.starts_with(&e.name), "{line}");
            assert!(line.contains(e.source.as_str()), "{line}");
        }
        let shown = Shown::read(&entries[0], &PackageLimits::default()).unwrap();
        let text = shown.text();
        assert!(
            text.starts_with(&format!("name: {}\n", entries[0].name)),
            "{text}"
        );
        assert!(text.contains("file: SKILL.md\n"), "{text}");
        assert!(text.ends_with(&shown.skill_md), "{text}");
    }
}
