//! Bundles (runner/src/package/bundle.rs), as `POST /v1/skill-packages` and
//! `pack` verify them, under the default package limits.
//!
//! Invariants: no panic; a refusal is one line of kind `bad_bundle` or
//! `hash_mismatch`; an accepted bundle holds only admissible, unique,
//! sorted paths whose bytes hash to the pins, with a parsed `SKILL.md`;
//! and parse → render → parse gives the same skills, with render a fixed
//! point.
use crate::one_line;
use skill_runner::package::bundle::{self, BundleSkill, Files};
use skill_runner::package::format::{self, PackageLimits, SKILL_MD};
use skill_runner::package::hash::{self, Binding};

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    let limits = PackageLimits::default();
    let skills = match bundle::parse(data, &limits) {
        Err(e) => {
            one_line("bundle", &e.to_string());
            assert!(matches!(e.kind().as_str(), "bad_bundle" | "hash_mismatch"));
            return;
        }
        Ok(s) => s,
    };
    assert!(!skills.is_empty());
    for (i, s) in skills.iter().enumerate() {
        check(s);
        assert!(skills[..i].iter().all(|o| o.binding.id != s.binding.id));
    }
    let as_files: Vec<(Binding, Files)> = skills
        .iter()
        .map(|s| {
            let files = s
                .files
                .iter()
                .map(|f| (f.path.clone(), f.bytes.clone()))
                .collect();
            (s.binding.clone(), files)
        })
        .collect();
    let text = bundle::render(&as_files);
    let again = bundle::parse(text.as_bytes(), &limits).expect("a rendered bundle parses");
    assert_eq!(again.len(), skills.len());
    for (a, b) in skills.iter().zip(&again) {
        assert_eq!(a.binding, b.binding);
        assert_eq!(a.files, b.files);
        assert_eq!(a.doc, b.doc);
    }
    assert_eq!(text, bundle::render(&as_files));
}

fn check(s: &BundleSkill) {
    format::check_binding(&s.binding).expect("a verified binding");
    for w in s.files.windows(2) {
        assert_eq!(
            hash::utf16_cmp(&w[0].path, &w[1].path),
            std::cmp::Ordering::Less,
            "files sorted and unique"
        );
    }
    for f in &s.files {
        format::check_path(&f.path).expect("an admissible path");
        assert_eq!(hash::file_hash(&f.bytes), f.hash);
    }
    let actual = hash::package_hash(s.files.iter().map(|f| (&f.path[..], &f.bytes[..])))
        .expect("verified files hash");
    assert_eq!(actual, s.binding.hash);
    let md = s
        .files
        .iter()
        .find(|f| f.path == SKILL_MD)
        .expect("SKILL.md");
    assert_eq!(
        format::parse_skill_md(&md.bytes).expect("parsed once"),
        s.doc
    );
    for w in s.doc.warnings(Some(&s.binding.id)) {
        one_line("bundle warning", &w);
    }
}
