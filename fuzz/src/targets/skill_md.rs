//! `SKILL.md` front matter (runner/src/package/format.rs), and what the catalog
//! and the session code make of it: the name check, `metadata.category`
//! and `metadata.version`, the publisher warnings, the body's headings
//! (ranked by `find_skills`), and the prompt block and tool schemas of both
//! delivery modes.
//!
//! Invariants: no panic; a refusal is one line; an accepted document has a
//! non-empty name and description and its body is the tail of the input;
//! each skill adds a fixed number of lines to the prompt, whatever its
//! front matter holds (nothing in it can add structure to the prompt).
use crate::one_line;
use skill_runner::package::format;
use skill_runner::package::hash::Binding;
use skill_runner::skillhost::catalog::{self, SkillKind};
use skill_runner::skillhost::session::{self, Delivery, Provenance, SessionSkill};

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    let doc = match format::parse_skill_md(data) {
        Err(e) => return one_line("SKILL.md", &e.to_string()),
        Ok(d) => d,
    };
    assert!(!doc.front.name.trim().is_empty());
    assert!(!doc.front.description.trim().is_empty());
    let text = std::str::from_utf8(data).expect("accepted, so UTF-8");
    assert!(text.ends_with(&doc.body));
    for w in doc.warnings(Some("fuzz")) {
        one_line("SKILL.md warning", &w);
    }

    // The headings `find_skills` ranks (catalog/rank.rs).
    let headings = catalog::rank::headings(&doc.body);
    assert!(headings.len() <= catalog::rank::MAX_HEADINGS_BYTES);
    assert!(headings.is_empty() || headings.split('\n').all(|h| !h.trim().is_empty()));
    assert!(headings.split('\n').count() <= doc.body.lines().count().max(1));

    // As the catalog and a session freeze it (catalog.rs, session.rs).
    let name = doc.front.name.trim();
    let id = if catalog::check_name(name).is_ok() {
        name.to_owned()
    } else {
        "fuzz".to_owned()
    };
    let version =
        catalog::metadata_str(&doc.front.metadata, "version").unwrap_or_else(|| "0.0.0".to_owned());
    let category = catalog::metadata_str(&doc.front.metadata, "category");
    let skill = SessionSkill {
        binding: Binding {
            id: id.clone(),
            revision: 1,
            version,
            hash: "0".repeat(64),
        },
        description: doc.front.description.trim().to_owned(),
        category,
        kind: SkillKind::WithFiles,
        provenance: Provenance {
            id,
            from: "project".into(),
            path: None,
            published: true,
        },
        headings,
    };
    let skills = [skill.clone(), skill];
    for (delivery, lines_each) in [
        (Delivery::ManagedFilesystem, 4),
        (Delivery::SemanticTools, 1),
    ] {
        let one = session::delivery::prompt(delivery, &skills[..1]);
        let two = session::delivery::prompt(delivery, &skills);
        let lines = |t: &str| t.matches('\n').count();
        assert_eq!(
            lines(&two.text) - lines(&one.text),
            lines_each,
            "a skill adds {lines_each} prompt lines:\n{}",
            two.text
        );
        let tools = session::delivery::tool_schemas(delivery, &skills);
        serde_json::to_string(&tools).expect("tool schemas serialize");
    }
}
