//! The skill host on a real file system (docs/skill-host.md):
//! the delivery-mode decision table, freezing, catalog precedence
//! and shadowing, index invalidation, ranking, name validation, bounded
//! reads, binary refusal, path aliases and escapes, activation events.
//!
//! Every test builds its own catalog folders and data dir in a tempdir;
//! nothing reads the real home.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::json;
use skill_runner::datadir::DataDir;
use skill_runner::package::format::PackageLimits;
use skill_runner::package::hash::Binding;
use skill_runner::skillhost::catalog::{Catalog, CatalogConfig, Layer, SkillKind};
use skill_runner::skillhost::session::delivery::{self, FILE_TOOLS};
use skill_runner::skillhost::session::Delivery;
use skill_runner::skillhost::session::{
    EventKind, ReadRange, ResourceQuery, SessionError, SessionHost, SessionRequest, SkillSpec,
    SkillsQuery, DEFAULT_READ_LIMIT, MAX_READ_LIMIT,
};

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// One test's folders: `user/`, `project/`, `data/`.
struct Fx {
    dir: tempfile::TempDir,
}

impl Fx {
    fn new() -> Fx {
        Fx {
            dir: tempfile::Builder::new()
                .prefix("sr-host-")
                .tempdir()
                .unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn user(&self) -> PathBuf {
        self.path().join("user")
    }

    fn project(&self) -> PathBuf {
        self.path().join("project")
    }

    fn data(&self) -> PathBuf {
        self.path().join("data")
    }

    /// No built-ins, one user and one project folder, the index in the
    /// data dir.
    fn config(&self) -> CatalogConfig {
        CatalogConfig {
            builtin: false,
            user_dirs: vec![self.user()],
            project_dirs: vec![self.project()],
            index: Some(self.data().join("cache/catalog-index.json")),
            ..CatalogConfig::default()
        }
    }

    fn host(&self) -> SessionHost {
        SessionHost::open(&DataDir::open(&self.data(), None).unwrap(), self.config()).unwrap()
    }
}

/// Writes `<root>/<dir>/SKILL.md` (name, description, body) and `extra`.
fn skill(
    root: &Path,
    dir: &str,
    name: &str,
    description: &str,
    extra: &[(&str, &[u8])],
) -> PathBuf {
    let d = root.join(dir);
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\nBody of {name}.\n"),
    )
    .unwrap();
    for (p, b) in extra {
        let p = d.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, b).unwrap();
    }
    d
}

/// Sets every modification time under `root` (and `root`) one hour back,
/// files first, so the index can trust them (they are outside the racy
/// window) and any later edit shows.
fn backdate(root: &Path) {
    let t = SystemTime::now() - Duration::from_secs(3600);
    fn walk(p: &Path, t: SystemTime) {
        let meta = fs::symlink_metadata(p).unwrap();
        if meta.is_dir() {
            for e in fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), t);
            }
        }
        if !meta.file_type().is_symlink() {
            let f = fs::File::open(p).unwrap();
            f.set_times(fs::FileTimes::new().set_modified(t)).unwrap();
        }
    }
    walk(root, t);
}

fn names(spec: &[&str]) -> Vec<SkillSpec> {
    spec.iter().map(|n| SkillSpec::Name((*n).into())).collect()
}

fn tools(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| (*s).to_owned()).collect()
}

fn req(skills: &[&str], t: &[&str]) -> SessionRequest {
    SessionRequest {
        skills: names(skills),
        tools: tools(t),
        workspace: None,
        environment: None,
    }
}

/// `/skills/<skill>/<file>` read with default range.
fn read(host: &SessionHost, id: &str, path: &str) -> Result<String, SessionError> {
    host.resource(
        id,
        &ResourceQuery {
            path: path.into(),
            offset: None,
            limit: None,
        },
    )
    .map(|c| c.content)
}

fn kind_of<T: std::fmt::Debug>(r: Result<T, SessionError>) -> (&'static str, u16, String) {
    let e = r.expect_err("expected an error");
    (
        e.kind().as_str(),
        skill_runner::daemon::app::status(e.kind()).as_u16(),
        e.to_string(),
    )
}

// ---------------------------------------------------------------------------
// Delivery mode
// ---------------------------------------------------------------------------

/// Every tool set against every mix of skill kinds.
#[test]
fn delivery_decision_table() {
    let tool_sets: Vec<Vec<&str>> = {
        let mut v: Vec<Vec<&str>> = vec![vec![], vec!["web_search"], vec!["web_search", "todo"]];
        for f in FILE_TOOLS {
            v.push(vec![f]);
            v.push(vec!["web_search", f]);
        }
        v.push(FILE_TOOLS.to_vec());
        v
    };
    let skill_sets: Vec<Vec<(&str, SkillKind)>> = vec![
        vec![],
        vec![("a", SkillKind::InstructionOnly)],
        vec![
            ("a", SkillKind::InstructionOnly),
            ("b", SkillKind::InstructionOnly),
        ],
        vec![("c", SkillKind::WithFiles)],
        vec![
            ("a", SkillKind::InstructionOnly),
            ("c", SkillKind::WithFiles),
        ],
        vec![("c", SkillKind::WithFiles), ("d", SkillKind::WithFiles)],
    ];
    let mut rows = 0;
    for t in &tool_sets {
        let has_file_tool = t.iter().any(|x| FILE_TOOLS.contains(x));
        for s in &skill_sets {
            let needs_files = s.iter().any(|(_, k)| *k == SkillKind::WithFiles);
            let got = delivery::decide(&tools(t), s);
            rows += 1;
            match (has_file_tool, needs_files) {
                (true, _) => assert_eq!(got.unwrap(), Delivery::ManagedFilesystem, "{t:?} {s:?}"),
                (false, false) => {
                    assert_eq!(got.unwrap(), Delivery::SemanticTools, "{t:?} {s:?}")
                }
                (false, true) => {
                    let e = got.expect_err("a skill with files and no file tool is refused");
                    assert_eq!(e.kind().as_str(), "composition_rejected");
                    assert_eq!(skill_runner::daemon::app::status(e.kind()).as_u16(), 422);
                    let m = e.to_string();
                    for (n, k) in s {
                        assert_eq!(
                            m.contains(&format!("{n:?}")),
                            *k == SkillKind::WithFiles,
                            "{m}"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(rows, tool_sets.len() * skill_sets.len());
}

/// The same table through `create`, with real skills; a refusal publishes
/// nothing and writes no session.
#[test]
fn sessions_get_the_mode_their_tools_and_skills_call_for() {
    let fx = Fx::new();
    skill(&fx.user(), "plain", "plain", "Instruction only.", &[]);
    skill(
        &fx.user(),
        "tooled",
        "tooled",
        "Has a script.",
        &[("scripts/run.sh", b"echo run\n")],
    );
    let host = fx.host();

    let s = host.create(req(&["plain"], &[])).unwrap();
    assert_eq!(s.delivery, Delivery::SemanticTools);
    let s = host.create(req(&["plain"], &["web_search"])).unwrap();
    assert_eq!(s.delivery, Delivery::SemanticTools);
    let s = host.create(req(&["plain", "tooled"], &["grep"])).unwrap();
    assert_eq!(s.delivery, Delivery::ManagedFilesystem);
    let s = host.create(req(&["plain"], &["bash"])).unwrap();
    assert_eq!(s.delivery, Delivery::ManagedFilesystem);

    let fresh = Fx::new();
    skill(&fresh.user(), "plain", "plain", "Instruction only.", &[]);
    skill(
        &fresh.user(),
        "tooled",
        "tooled",
        "Has a script.",
        &[("scripts/run.sh", b"echo run\n")],
    );
    let host = fresh.host();
    let (kind, status, msg) = kind_of(host.create(req(&["plain", "tooled"], &["web_search"])));
    assert_eq!((kind, status), ("composition_rejected", 422));
    assert!(msg.contains("skill \"tooled\" needs files"), "{msg}");
    assert!(!msg.contains("\"plain\""), "{msg}");
    assert!(msg.contains("enabled: web_search"), "{msg}");
    assert!(
        host.store().bindings().unwrap().is_empty(),
        "nothing published"
    );
    let sessions: Vec<_> = fs::read_dir(fresh.data().join("sessions"))
        .unwrap()
        .collect();
    assert!(sessions.is_empty(), "no session written");
}

#[test]
fn tool_schemas_follow_the_mode_with_names_as_enum() {
    let fx = Fx::new();
    skill(&fx.user(), "alpha", "alpha", "First.", &[]);
    let beta = skill(&fx.user(), "beta", "beta", "Second.", &[]);
    fs::write(
        beta.join("SKILL.md"),
        "---\nname: beta\ndescription: Second.\nmetadata:\n  category: data\n---\nB\n",
    )
    .unwrap();
    let host = fx.host();

    let s = host.create(req(&["alpha", "beta"], &[])).unwrap();
    let schema_names: Vec<&str> = s
        .tools
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(schema_names, ["list_skills", "Skill"]);
    assert_eq!(
        s.tools[1]["input_schema"]["properties"]["skill"]["enum"],
        json!(["alpha", "beta"])
    );
    assert_eq!(s.tools[1]["input_schema"]["required"], json!(["skill"]));
    assert_eq!(
        s.tools[0]["input_schema"]["properties"]["category"]["enum"],
        json!(["data"])
    );

    let s = host.create(req(&["beta"], &["read"])).unwrap();
    let schema_names: Vec<&str> = s
        .tools
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        schema_names,
        [
            "find_skills",
            "load_skill",
            "load_skill_section",
            "read_skill_resource"
        ]
    );
    assert_eq!(
        s.tools[1]["input_schema"]["properties"]["name"]["enum"],
        json!(["beta"])
    );
}

#[test]
fn prompt_lists_metadata_and_never_the_body() {
    let fx = Fx::new();
    let d = skill(&fx.user(), "hello", "hello", "Says hi.\n  Politely.", &[]);
    fs::write(
        d.join("SKILL.md"),
        "---\nname: hello\ndescription: |\n  Says hi.\n  Politely.\nmetadata:\n  version: \"2.1.0\"\n---\nSECRET-BODY-TEXT\n",
    )
    .unwrap();
    let host = fx.host();
    let s = host.create(req(&["hello"], &["bash"])).unwrap();
    let p = &s.prompt.skills[0];
    assert_eq!(p.name, "hello");
    assert_eq!(p.description, "Says hi. Politely.", "one line");
    assert_eq!(p.version, "2.1.0");
    assert_eq!(p.revision, 1);
    assert_eq!(p.package_path, "$SCIENCEDISCOVERY_SKILLS_DIR/hello");
    assert_eq!(p.package_hash, s.skills[0].hash);
    assert_eq!(
        p.package_hash,
        skill_runner::package::verify::hash_dir(&d, &Default::default()).unwrap()
    );
    let doc = serde_json::to_value(&s).unwrap();
    assert!(!doc.to_string().contains("SECRET-BODY-TEXT"));
    assert!(s
        .prompt
        .text
        .contains("package_path: $SCIENCEDISCOVERY_SKILLS_DIR/hello"));
    assert!(s.prompt.text.contains(&p.package_hash));
    assert_eq!(
        s.identity,
        skill_runner::package::hash::set_identity(&s.skills)
    );

    let s = host.create(req(&["hello"], &[])).unwrap();
    assert!(
        s.prompt.text.contains("call the Skill tool"),
        "{}",
        s.prompt.text
    );
    assert!(!s.prompt.text.contains("SECRET-BODY-TEXT"));
}

// ---------------------------------------------------------------------------
// Freezing
// ---------------------------------------------------------------------------

/// Edits to a catalog folder after a session starts never reach it; a new
/// session freezes the new bytes under the next revision; unchanged bytes
/// reuse their revision.
#[test]
fn sessions_keep_the_bytes_they_froze() {
    let fx = Fx::new();
    let d = skill(
        &fx.user(),
        "report",
        "report",
        "Writes a report.",
        &[("scripts/run.sh", b"echo v1\n")],
    );
    let host = fx.host();
    let s1 = host.create(req(&["report"], &["bash"])).unwrap();
    let b1 = s1.skills[0].clone();
    assert_eq!(b1.revision, 1);
    assert!(s1.provenance[0].published);
    assert_eq!(s1.provenance[0].from, "user");

    // Edit every kind of file, add one, and drop the folder's old bytes.
    fs::write(
        d.join("SKILL.md"),
        "---\nname: report\ndescription: Writes a better report.\n---\nNEW BODY\n",
    )
    .unwrap();
    fs::write(d.join("scripts/run.sh"), b"echo v2\n").unwrap();
    fs::write(d.join("scripts/extra.sh"), b"echo extra\n").unwrap();

    let loaded = host.load(&s1.id, "report").unwrap();
    assert_eq!(loaded.body, "# report\nBody of report.\n");
    assert_eq!(loaded.package_hash, b1.hash);
    assert_eq!(loaded.description, "Writes a report.");
    assert_eq!(
        read(&host, &s1.id, "/skills/report/scripts/run.sh").unwrap(),
        "echo v1\n"
    );
    let (kind, ..) = kind_of(read(&host, &s1.id, "/skills/report/scripts/extra.sh"));
    assert_eq!(kind, "not_found");
    // A new host on the same data dir (another process) sees the same.
    let again = SessionHost::open(&DataDir::open(&fx.data(), None).unwrap(), fx.config()).unwrap();
    assert_eq!(again.show(&s1.id).unwrap().skills, vec![b1.clone()]);
    assert_eq!(again.sessions().bindings(&s1.id).unwrap(), vec![b1.clone()]);

    let s2 = host.create(req(&["report"], &["bash"])).unwrap();
    let b2 = s2.skills[0].clone();
    assert_eq!(b2.revision, 2, "new bytes, next revision");
    assert_ne!(b2.hash, b1.hash);
    assert_eq!(
        b2.hash,
        skill_runner::package::verify::hash_dir(&d, &Default::default()).unwrap()
    );
    assert_eq!(host.load(&s2.id, "report").unwrap().body, "NEW BODY\n");

    let s3 = host.create(req(&["report"], &["bash"])).unwrap();
    assert_eq!(s3.skills[0], b2, "same bytes, same revision");
    assert!(!s3.provenance[0].published);
    // The first session still answers as created.
    assert_eq!(host.show(&s1.id).unwrap().skills[0], b1);
}

#[test]
fn bindings_from_the_store_are_served_as_pinned() {
    let fx = Fx::new();
    let src = skill(
        &fx.path().join("src"),
        "pinned",
        "pinned",
        "Pinned.",
        &[("references/r.md", b"R\n")],
    );
    let host = fx.host();
    let published = host
        .store()
        .publish_dir(&src, "pinned", 7, "3.0.0", &Default::default())
        .unwrap();
    let s = host
        .create(SessionRequest {
            skills: vec![SkillSpec::Binding(published.binding.clone())],
            tools: tools(&["read"]),
            workspace: None,
            environment: None,
        })
        .unwrap();
    assert_eq!(s.skills, vec![published.binding.clone()]);
    assert_eq!(s.provenance[0].from, "store");
    assert_eq!(
        read(&host, &s.id, "/skills/pinned/references/r.md").unwrap(),
        "R\n"
    );

    let missing = Binding {
        revision: 8,
        ..published.binding.clone()
    };
    let r = host.create(SessionRequest {
        skills: vec![SkillSpec::Binding(missing)],
        tools: vec![],
        workspace: None,
        environment: None,
    });
    let (kind, status, _) = kind_of(r);
    assert_eq!((kind, status), ("not_in_store", 404));
    let wrong = Binding {
        hash: "0".repeat(64),
        ..published.binding.clone()
    };
    let (kind, ..) = kind_of(host.create(SessionRequest {
        skills: vec![SkillSpec::Binding(wrong)],
        tools: vec![],
        workspace: None,
        environment: None,
    }));
    assert_eq!(kind, "hash_mismatch");
    // `ID@REV` on the command line names the same binding.
    assert_eq!(
        SkillSpec::from_arg("pinned@7", host.store()).unwrap(),
        SkillSpec::Binding(published.binding)
    );
}

#[test]
fn bad_session_requests_are_refused() {
    let fx = Fx::new();
    skill(&fx.user(), "a", "a", "A.", &[]);
    let host = fx.host();
    let cases = [
        (
            r#"{"skills":[{"name":"a"}],"tools":[],"extra":1}"#,
            "unknown field",
        ),
        (r#"{"skills":[{"name":"a"}]}"#, "missing field `tools`"),
        (
            r#"{"skills":[{"name":"a","id":"a"}],"tools":[]}"#,
            "not both",
        ),
        (
            r#"{"skills":[{"id":"a","revision":1}],"tools":[]}"#,
            "needs all of",
        ),
        (
            r#"{"skills":[{"name":"a"},{"name":"a"}],"tools":[]}"#,
            "selected twice",
        ),
        (
            r#"{"skills":[{"name":"A"}],"tools":[]}"#,
            "not a valid skill name",
        ),
        (
            r#"{"skills":[{"name":"nope"}],"tools":[]}"#,
            "no skill named \"nope\"",
        ),
        (r#"{"skills":[],"tools":[""]}"#, "tool name"),
        ("not json", "not valid"),
    ];
    for (body, needle) in cases {
        let e = host.create_json(body.as_bytes()).expect_err(body);
        assert!(e.to_string().contains(needle), "{body}: {e}");
        let want = if needle.starts_with("no skill") {
            404
        } else {
            400
        };
        assert_eq!(
            skill_runner::daemon::app::status(e.kind()).as_u16(),
            want,
            "{body}: {e}"
        );
    }
}

// ---------------------------------------------------------------------------
// Catalog
// ---------------------------------------------------------------------------

#[test]
fn later_sources_shadow_earlier_ones() {
    let fx = Fx::new();
    let user_a = fx.path().join("user-a");
    let user_b = fx.path().join("user-b");
    let proj = fx.project();
    skill(
        &user_a,
        "sandbox-basics",
        "sandbox-basics",
        "User A's copy.",
        &[],
    );
    skill(&user_a, "only-a", "only-a", "Only in A.", &[]);
    skill(&user_a, "shared", "shared", "A's shared.", &[]);
    skill(&user_b, "shared", "shared", "B's shared.", &[]);
    skill(&proj, "shared", "shared", "Project's shared.", &[]);
    skill(
        &proj,
        "sandbox-basics",
        "sandbox-basics",
        "Project's copy.",
        &[],
    );
    let cfg = CatalogConfig {
        builtin: true,
        user_dirs: vec![user_a.clone(), user_b.clone()],
        project_dirs: vec![proj.clone()],
        index: None,
        ..CatalogConfig::default()
    };
    let c = Catalog::load(&cfg);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    let names: Vec<&str> = c.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["only-a", "sandbox-basics", "shared", "skill-authoring"]
    );

    let sb = c.get("sandbox-basics").unwrap();
    assert_eq!(sb.source, Layer::Project);
    assert_eq!(sb.description, "Project's copy.");
    let shadowed: Vec<(Layer, Option<PathBuf>)> = sb
        .shadows
        .iter()
        .map(|s| (s.source, s.path.clone()))
        .collect();
    assert_eq!(
        shadowed,
        [
            (Layer::Builtin, None),
            (Layer::User, Some(user_a.join("sandbox-basics")))
        ]
    );
    let shared = c.get("shared").unwrap();
    assert_eq!(shared.description, "Project's shared.");
    let shadowed: Vec<Option<PathBuf>> = shared.shadows.iter().map(|s| s.path.clone()).collect();
    assert_eq!(
        shadowed,
        [Some(user_a.join("shared")), Some(user_b.join("shared"))],
        "the later user folder beat the earlier one"
    );
    assert_eq!(c.get("skill-authoring").unwrap().source, Layer::Builtin);
    assert_eq!(c.get("only-a").unwrap().source, Layer::User);

    // A session freezes the winner's bytes.
    let host = SessionHost::open(&DataDir::open(&fx.data(), None).unwrap(), cfg).unwrap();
    let s = host
        .create(req(&["shared", "skill-authoring"], &["read"]))
        .unwrap();
    assert_eq!(
        host.load(&s.id, "shared").unwrap().description,
        "Project's shared."
    );
    assert_eq!(s.provenance[0].from, "project");
    assert_eq!(s.provenance[1].from, "builtin");
    let r = read(
        &host,
        &s.id,
        "/skills/skill-authoring/references/front-matter.md",
    )
    .unwrap();
    assert!(r.starts_with("# SKILL.md front matter"));
}

#[test]
fn invalid_skills_are_skipped_with_a_warning_naming_the_file() {
    let fx = Fx::new();
    let u = fx.user();
    skill(&u, "good", "good", "Fine.", &[]);
    let bad_yaml = u.join("bad-yaml");
    fs::create_dir_all(&bad_yaml).unwrap();
    fs::write(bad_yaml.join("SKILL.md"), "---\nname: [unclosed\n---\n").unwrap();
    let no_desc = u.join("no-desc");
    fs::create_dir_all(&no_desc).unwrap();
    fs::write(no_desc.join("SKILL.md"), "---\nname: no-desc\n---\n").unwrap();
    skill(&u, "Bad_Name", "Bad_Name", "Bad name.", &[]);
    let linked = skill(&u, "linked", "linked", "Has a symlink.", &[]);
    std::os::unix::fs::symlink("/etc/passwd", linked.join("passwd")).unwrap();
    skill(&u, "folder-x", "named-y", "Name differs from folder.", &[]);
    // A twin of "good" deeper in the same source.
    skill(&u.join("zz"), "good", "good", "Twin.", &[]);

    let c = Catalog::load(&fx.config());
    let names: Vec<&str> = c.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["good", "named-y"]);
    assert_eq!(c.get("good").unwrap().description, "Fine.");
    let w: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
    let has = |path: &Path, needle: &str| {
        assert!(
            c.warnings()
                .iter()
                .any(|x| x.path == path && x.reason.contains(needle)),
            "no warning for {} containing {needle:?} in {w:#?}",
            path.display()
        )
    };
    has(&bad_yaml.join("SKILL.md"), "not valid YAML");
    has(&no_desc.join("SKILL.md"), "'description' is missing");
    has(&u.join("Bad_Name/SKILL.md"), "not a valid skill name");
    has(&linked, "symlink");
    has(&u.join("folder-x/SKILL.md"), "differs from its folder name");
    has(&u.join("zz/good/SKILL.md"), "already defined");
    assert_eq!(w.len(), 6, "{w:#?}");
}

#[test]
fn scans_are_bounded() {
    let fx = Fx::new();
    let u = fx.user();
    skill(&u, "top", "top", "Top level.", &[]);
    skill(&u.join("data"), "csv", "csv", "Nested one level.", &[]);
    skill(&u.join("a/b/c"), "deep", "deep", "Too deep.", &[]);
    let cfg = CatalogConfig {
        max_depth: 2,
        ..fx.config()
    };
    let c = Catalog::load(&cfg);
    let names: Vec<&str> = c.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["csv", "top"]);
    assert_eq!(c.get("csv").unwrap().category.as_deref(), Some("data"));
    assert_eq!(c.get("top").unwrap().category, None);
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.path == u.join("a/b") && w.reason.contains("max_depth 2")));

    let cfg = CatalogConfig {
        max_skills: 1,
        ..fx.config()
    };
    let c = Catalog::load(&cfg);
    assert_eq!(c.entries().len(), 1);
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.path == u && w.reason.contains("max_skills")));

    let cfg = CatalogConfig {
        max_folders: 2,
        ..fx.config()
    };
    let c = Catalog::load(&cfg);
    assert!(c.entries().len() < 3);
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.reason.contains("max_folders")));
}

/// The user-level index is used while nothing changed, and dropped as soon
/// as a folder or a SKILL.md changes (not only when it is missing).
#[test]
fn the_user_index_is_invalidated_when_a_folder_changes() {
    let fx = Fx::new();
    let u = fx.user();
    let d = skill(&u, "one", "one", "First description.", &[]);
    skill(
        &u.join("cat"),
        "two",
        "two",
        "Second.",
        &[("scripts/x.sh", b"x\n")],
    );
    backdate(&u);
    let cfg = CatalogConfig {
        project_dirs: vec![],
        ..fx.config()
    };
    let index = cfg.index.clone().unwrap();
    let load = || Catalog::load(&cfg);

    let c = load();
    assert_eq!((c.stats().scanned, c.stats().from_index), (1, 0));
    assert!(c.stats().index_written && index.exists());
    let c = load();
    assert_eq!(
        (c.stats().scanned, c.stats().from_index),
        (0, 1),
        "warm start"
    );
    assert!(!c.stats().index_written, "a warm start writes nothing");
    assert_eq!(c.entries().len(), 2);

    // Edit SKILL.md in place: its folder's stamp does not change, its own
    // does.
    fs::write(
        d.join("SKILL.md"),
        "---\nname: one\ndescription: Edited in place.\n---\n",
    )
    .unwrap();
    let c = load();
    assert_eq!(c.stats().scanned, 1, "an edited SKILL.md invalidates");
    assert_eq!(c.get("one").unwrap().description, "Edited in place.");
    // Just written: inside the racy window, so not trusted yet.
    assert_eq!(load().stats().scanned, 1, "racy stamps are not trusted");
    backdate(&u);
    assert_eq!(load().stats().scanned, 1);
    assert_eq!(load().stats().from_index, 1);

    // A file added deep inside a package (only scripts/ changes).
    fs::write(u.join("cat/two/scripts/y.sh"), b"y\n").unwrap();
    let c = load();
    assert_eq!(c.stats().scanned, 1);
    assert_eq!(c.get("two").unwrap().files, 3);
    backdate(&u);
    load();
    assert_eq!(load().stats().from_index, 1);

    // A new skill folder, then a removed one.
    skill(&u, "three", "three", "Third.", &[]);
    let c = load();
    assert_eq!(c.stats().scanned, 1);
    assert!(c.get("three").is_some());
    backdate(&u);
    load();
    assert_eq!(load().stats().from_index, 1);
    fs::remove_dir_all(u.join("three")).unwrap();
    let c = load();
    assert_eq!(c.stats().scanned, 1);
    assert!(c.get("three").is_none());
    backdate(&u);
    load();
    assert_eq!(load().stats().from_index, 1);

    // Other scan settings do not use the index.
    let other = CatalogConfig {
        max_depth: 1,
        ..cfg.clone()
    };
    assert_eq!(Catalog::load(&other).stats().scanned, 1);
    assert!(Catalog::load(&other).get("two").is_none());

    // A damaged index is rebuilt, never trusted.
    fs::write(&index, b"{\"format\":1,\"roots\":[{}]}").unwrap();
    let c = load();
    assert_eq!(c.stats().scanned, 1);
    assert_eq!(c.entries().len(), 2);
    assert_eq!(load().stats().from_index, 1);
}

#[test]
fn a_fresh_folder_is_not_trusted_from_the_index() {
    let fx = Fx::new();
    skill(&fx.user(), "new", "new", "Just made.", &[]);
    let cfg = fx.config();
    // The user folder; the project folder does not exist, so is not read.
    assert_eq!(Catalog::load(&cfg).stats().scanned, 1);
    // Modified less than racy_window (2 s) before the scan.
    assert_eq!(Catalog::load(&cfg).stats().from_index, 0);
    let trusting = CatalogConfig {
        racy_window: Duration::ZERO,
        ..cfg
    };
    Catalog::load(&trusting);
    assert_eq!(Catalog::load(&trusting).stats().from_index, 1);
}

/// A fixed catalog, fixed queries, exact order and scores (BM25F with
/// name bonuses; docs/skill-host.md, "Ranking").
#[test]
fn ranking_is_deterministic_on_a_fixed_catalog() {
    let fx = Fx::new();
    let u = fx.user();
    for (name, desc) in [
        ("csv", "Read and write CSV files."),
        ("csv-report", "Summarize a CSV file into a Markdown report."),
        ("csvkit", "Command-line tools for CSV."),
        ("report-writer", "Write reports from notes."),
        ("pdf-merge", "Merge several PDF files into one."),
        ("spreadsheet", "Edit spreadsheets; exports csvs."),
        ("weather", "Forecasts."),
    ] {
        skill(&u, name, name, desc, &[]);
    }
    let c = Catalog::load(&fx.config());
    let ranked = |q: &str, limit: usize| -> Vec<(String, u32)> {
        c.find(q, limit)
            .hits
            .into_iter()
            .map(|h| (h.name, h.score))
            .collect()
    };
    let own = |v: &[(&str, u32)]| -> Vec<(String, u32)> {
        v.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
    };
    // "csv" is in 4 of 7 skills: a name bonus of 128 a step; the exact
    // name first, then the names that start with it, then the rest.
    assert_eq!(
        ranked("csv", 10),
        own(&[
            ("csv", 104 + 2 * 128),
            ("csv-report", 94 + 128),
            ("csvkit", 51 + 128),
            ("spreadsheet", 57),
        ])
    );
    // "report" is rarer than "csv": it weighs more.
    assert_eq!(
        ranked("CSV report", 3),
        own(&[("csv-report", 1052), ("report-writer", 195), ("csv", 104)])
    );
    assert_eq!(ranked("merge pdf", 10), own(&[("pdf-merge", 546)]));
    // Same query, same answer, every time.
    assert_eq!(ranked("csv report", 10), ranked("csv report", 10));
    // A word glued from the name's words finds it ("pdf-merge" gives
    // "pdfmerge" too).
    assert_eq!(ranked("pdfmerg", 10)[0].0, "pdf-merge");

    let none = c.find("pdfmergr", 5);
    assert!(none.hits.is_empty());
    assert_eq!(none.total, 0);
    assert_eq!(none.suggestions, ["pdf-merge"]);
    assert!(none.message.unwrap().contains("did you mean pdf-merge?"));
    let none = c.find("astrophysics", 5);
    assert!(none
        .message
        .unwrap()
        .contains("no skill matches \"astrophysics\" among 7 skills"));

    // The session routes rank the same way over the session's skills.
    let host = fx.host();
    let s = host
        .create(req(&["csv", "csv-report", "weather"], &[]))
        .unwrap();
    let list = host
        .skills(
            &s.id,
            &SkillsQuery {
                query: Some("csv".into()),
                limit: Some(1),
                category: None,
            },
        )
        .unwrap();
    assert_eq!(list.result.hits.len(), 1);
    assert_eq!(list.result.hits[0].name, "csv");
    // `total` counts the matches (csv, csv-report), not the session's
    // skills (it was the session's skill count even with a query).
    assert_eq!(list.result.total, 2);
    let all = host.skills(&s.id, &SkillsQuery::default()).unwrap();
    let names: Vec<&str> = all.result.hits.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["csv", "csv-report", "weather"]);
    let (kind, ..) = kind_of(host.skills(
        &s.id,
        &SkillsQuery {
            limit: Some(0),
            ..Default::default()
        },
    ));
    assert_eq!(kind, "bad_request");
}

#[test]
fn list_skills_filters_by_category() {
    let fx = Fx::new();
    skill(&fx.user().join("data"), "csv", "csv", "CSV.", &[]);
    skill(&fx.user().join("docs"), "pdf", "pdf", "PDF.", &[]);
    let host = fx.host();
    let s = host.create(req(&["csv", "pdf"], &[])).unwrap();
    let only = host
        .skills(
            &s.id,
            &SkillsQuery {
                category: Some("docs".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let names: Vec<&str> = only.result.hits.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["pdf"]);
    assert_eq!(only.result.hits[0].category.as_deref(), Some("docs"));
}

// ---------------------------------------------------------------------------
// Routes: names, sections, reads, events
// ---------------------------------------------------------------------------

fn session_with_files(fx: &Fx) -> (SessionHost, String) {
    let mut big = String::new();
    while big.len() < 100 * 1024 {
        big.push_str("line of text é\n");
    }
    skill(
        &fx.user(),
        "kit",
        "kit",
        "A kit.",
        &[
            ("scripts/run.sh", b"echo run\n"),
            ("references/api.md", b"# API\n"),
            ("references/guide.md", b"# Guide\n"),
            ("docs/guide.txt", b"guide text\n"),
            ("references/big.md", big.as_bytes()),
            ("assets/blob.bin", b"\x00\x01\x02"),
            ("assets/latin1.txt", b"caf\xe9\n"),
            ("assets/utf8.txt", "aé€😀".as_bytes()),
        ],
    );
    skill(
        &fx.user(),
        "other",
        "other",
        "Another.",
        &[("notes.md", b"notes\n")],
    );
    skill(&fx.user(), "unselected", "unselected", "Not selected.", &[]);
    let host = fx.host();
    let s = host.create(req(&["kit", "other"], &["bash"])).unwrap();
    (host, s.id)
}

#[test]
fn names_are_validated_and_only_known_names_load() {
    let fx = Fx::new();
    let (host, id) = session_with_files(&fx);
    for bad in ["../kit", "Kit", "kit/", "", "a_b", "kit--x"] {
        let (kind, status, msg) = kind_of(host.load(&id, bad));
        assert_eq!((kind, status), ("bad_request", 400), "{bad:?}: {msg}");
        assert!(msg.contains("not a valid skill name"), "{msg}");
    }
    let (kind, status, msg) = kind_of(host.load(&id, "unselected"));
    assert_eq!((kind, status), ("not_found", 404));
    assert!(msg.contains("its skills are: kit, other"), "{msg}");
    let loaded = host.load(&id, "kit").unwrap();
    assert_eq!(loaded.body, "# kit\nBody of kit.\n");
    let sections: Vec<&str> = loaded.sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        sections,
        [
            "assets/blob.bin",
            "assets/latin1.txt",
            "assets/utf8.txt",
            "docs/guide.txt",
            "references/api.md",
            "references/big.md",
            "references/guide.md",
            "scripts/run.sh"
        ]
    );
    // Session ids are checked too.
    let (kind, ..) = kind_of(host.load("../../etc", "kit"));
    assert_eq!(kind, "bad_request");
    let (kind, status, _) = kind_of(host.load("ses-00000000000000000000000000000000", "kit"));
    assert_eq!((kind, status), ("not_found", 404));
}

#[test]
fn sections_by_path_or_unique_name() {
    let fx = Fx::new();
    let (host, id) = session_with_files(&fx);
    let all = ReadRange::default();
    let sec = |s: &str| host.section(&id, "kit", s, all);
    assert_eq!(sec("references/api.md").unwrap().content, "# API\n");
    assert_eq!(sec("api.md").unwrap().content, "# API\n");
    assert_eq!(sec("api").unwrap().content, "# API\n");
    let (kind, _, msg) = kind_of(sec("guide"));
    assert_eq!(kind, "bad_request");
    assert!(
        msg.contains("docs/guide.txt") && msg.contains("references/guide.md"),
        "{msg}"
    );
    assert_eq!(sec("guide.md").unwrap().content, "# Guide\n");
    let (kind, _, msg) = kind_of(sec("SKILL.md"));
    assert_eq!(
        kind, "not_found",
        "SKILL.md is the body, not a section: {msg}"
    );
    let (kind, ..) = kind_of(sec("nope"));
    assert_eq!(kind, "not_found");
    for bad in ["../other/notes.md", "/etc/passwd", "a//b"] {
        let (kind, ..) = kind_of(sec(bad));
        assert_eq!(kind, "bad_request", "{bad}");
    }
    let (kind, status, _) = kind_of(sec("assets/blob.bin"));
    assert_eq!((kind, status), ("binary_file", 415));
}

#[test]
fn resource_reads_are_bounded_and_report_truncation() {
    let fx = Fx::new();
    let (host, id) = session_with_files(&fx);
    let q = |path: &str, offset: Option<u64>, limit: Option<u64>| {
        host.resource(
            &id,
            &ResourceQuery {
                path: path.into(),
                offset,
                limit,
            },
        )
    };
    let big = "/skills/kit/references/big.md";
    let first = q(big, None, None).unwrap();
    assert!(first.size > DEFAULT_READ_LIMIT);
    assert!(first.truncated);
    assert!(first.returned <= DEFAULT_READ_LIMIT && first.returned > DEFAULT_READ_LIMIT - 4);
    assert_eq!(first.next_offset, Some(first.returned));
    // Reading on from next_offset until the end gives the whole file.
    let mut text = first.content.clone();
    let mut next = first.next_offset;
    while let Some(off) = next {
        let c = q(big, Some(off), Some(MAX_READ_LIMIT)).unwrap();
        text.push_str(&c.content);
        next = c.next_offset;
    }
    let on_disk = fs::read_to_string(fx.user().join("kit/references/big.md")).unwrap();
    assert_eq!(text, on_disk);

    // "aé€😀": a(1) é(2) €(3) 😀(4) = 10 bytes.
    let u = "/skills/kit/assets/utf8.txt";
    let c = q(u, Some(0), Some(2)).unwrap();
    assert_eq!(
        (c.content.as_str(), c.returned, c.next_offset),
        ("a", 1, Some(1))
    );
    let c = q(u, Some(1), Some(5)).unwrap();
    assert_eq!((c.content.as_str(), c.truncated), ("é€", true));
    let c = q(u, Some(6), None).unwrap();
    assert_eq!(
        (c.content.as_str(), c.truncated, c.next_offset),
        ("😀", false, None)
    );
    let c = q(u, Some(10), None).unwrap();
    assert_eq!((c.content.as_str(), c.truncated), ("", false));
    let (kind, _, msg) = kind_of(q(u, Some(2), None));
    assert_eq!(kind, "bad_request");
    assert!(msg.contains("starts at offset 1"), "{msg}");
    let (kind, _, msg) = kind_of(q(u, Some(6), Some(2)));
    assert_eq!(kind, "bad_request");
    assert!(msg.contains("at least 4"), "{msg}");
    for (offset, limit) in [
        (Some(11), None),
        (None, Some(0)),
        (None, Some(MAX_READ_LIMIT + 1)),
    ] {
        let (kind, ..) = kind_of(q(u, offset, limit));
        assert_eq!(kind, "bad_request", "{offset:?} {limit:?}");
    }
}

#[test]
fn binary_files_are_refused_clearly() {
    let fx = Fx::new();
    let (host, id) = session_with_files(&fx);
    let (kind, status, msg) = kind_of(read(&host, &id, "/skills/kit/assets/blob.bin"));
    assert_eq!((kind, status), ("binary_file", 415));
    assert!(
        msg.contains("binary file (a NUL byte at offset 0)"),
        "{msg}"
    );
    assert!(msg.contains("UTF-8 text only"), "{msg}");
    let (kind, _, msg) = kind_of(read(&host, &id, "/skills/kit/assets/latin1.txt"));
    assert_eq!(kind, "binary_file");
    assert!(msg.contains("not UTF-8 from offset 3"), "{msg}");
}

#[test]
fn resource_paths_take_the_three_aliases_and_nothing_outside_the_packages() {
    let fx = Fx::new();
    let (host, id) = session_with_files(&fx);
    for p in [
        "$SCIENCEDISCOVERY_SKILLS_DIR/kit/scripts/run.sh",
        "${SCIENCEDISCOVERY_SKILLS_DIR}/kit/scripts/run.sh",
        "/skills/kit/scripts/run.sh",
        "/skills//kit/./scripts/run.sh",
        "/skills/other/../kit/scripts/run.sh",
    ] {
        assert_eq!(read(&host, &id, p).unwrap(), "echo run\n", "{p}");
    }
    assert_eq!(
        read(&host, &id, "/skills/kit/../other/notes.md").unwrap(),
        "notes\n",
        "another selected package is inside the session"
    );
    let cases = [
        ("/skills/../etc/passwd", "bad_request", "leaves /skills"),
        (
            "/skills/kit/../../etc/passwd",
            "bad_request",
            "leaves /skills",
        ),
        (
            "$SCIENCEDISCOVERY_SKILLS_DIR/kit/../../x",
            "bad_request",
            "leaves /skills",
        ),
        ("/etc/passwd", "bad_request", "not a package path"),
        ("kit/scripts/run.sh", "bad_request", "not a package path"),
        ("/skillsx/kit/SKILL.md", "bad_request", "not a package path"),
        (
            "/skill-extensions/kit/x",
            "bad_request",
            "not a package path",
        ),
        (
            "$SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/kit/x",
            "bad_request",
            "not a package path",
        ),
        ("/skills", "bad_request", "not a package path"),
        (
            "/skills/.sciencediscovery-snapshot.json",
            "bad_request",
            "not a valid skill name",
        ),
        ("/skills/kit", "not_found", "names a folder"),
        ("/skills/kit/scripts", "not_found", "names a folder"),
        (
            "/skills/kit/scripts/missing.sh",
            "not_found",
            "is not a file of skill \"kit\"",
        ),
        (
            "/skills/unselected/SKILL.md",
            "not_found",
            "not part of session",
        ),
        ("/skills/nope/SKILL.md", "not_found", "not part of session"),
    ];
    for (p, kind, needle) in cases {
        let (k, _, msg) = kind_of(read(&host, &id, p));
        assert_eq!(k, kind, "{p}: {msg}");
        assert!(msg.contains(needle), "{p}: {msg}");
    }
    assert!(read(&host, &id, "/skills/kit/SKILL.md")
        .unwrap()
        .starts_with("---\nname: kit"));
}

#[test]
fn loads_and_reads_are_recorded_as_events() {
    let fx = Fx::new();
    let (host, id) = session_with_files(&fx);
    assert!(host.events(&id).unwrap().events.is_empty());
    host.load(&id, "kit").unwrap();
    host.section(&id, "kit", "api", ReadRange::default())
        .unwrap();
    host.resource(
        &id,
        &ResourceQuery {
            path: "/skills/kit/references/big.md".into(),
            offset: Some(15),
            limit: Some(100),
        },
    )
    .unwrap();
    // Refusals and listings are not activations.
    let _ = read(&host, &id, "/skills/kit/assets/blob.bin");
    let _ = host.load(&id, "unselected");
    host.skills(&id, &SkillsQuery::default()).unwrap();

    let kit = host.show(&id).unwrap().skills[0].clone();
    let events = host.events(&id).unwrap().events;
    let seen: Vec<(EventKind, &str, Option<u64>, u64, bool)> = events
        .iter()
        .map(|e| (e.kind, e.file.as_str(), e.offset, e.bytes, e.truncated))
        .collect();
    assert_eq!(
        seen,
        [
            (EventKind::LoadSkill, "SKILL.md", None, 19, false),
            (
                EventKind::LoadSection,
                "references/api.md",
                Some(0),
                6,
                false
            ),
            (
                EventKind::ReadResource,
                "references/big.md",
                Some(15),
                100,
                true
            ),
        ]
    );
    for e in &events {
        assert_eq!((e.skill.as_str(), e.revision), ("kit", kit.revision));
        assert_eq!(e.package_hash, kit.hash);
    }
}

#[test]
fn session_records_are_written_once_and_read_back_unchanged() {
    let fx = Fx::new();
    skill(&fx.user(), "a", "a", "A.", &[]);
    let host = fx.host();
    let created = host.create(req(&["a"], &["read", "read", "web"])).unwrap();
    assert_eq!(created.enabled_tools, ["read", "web"]);
    assert_eq!(created.file_tools, ["read"]);
    let record = fx.data().join(format!("sessions/{}.json", created.id));
    let mode = fs::metadata(&record).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o400);
    let shown = SessionHost::open(&DataDir::open(&fx.data(), None).unwrap(), fx.config())
        .unwrap()
        .show(&created.id)
        .unwrap();
    assert_eq!(
        serde_json::to_value(&shown).unwrap(),
        serde_json::to_value(&created).unwrap()
    );
    // Nothing but the record itself and no temporary files.
    let left: Vec<String> = fs::read_dir(fx.data().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, [format!("{}.json", created.id)]);
}

/// A stored file changed behind the store's back is refused, never served.
#[test]
fn damaged_store_bytes_are_not_served() {
    let fx = Fx::new();
    skill(&fx.user(), "a", "a", "A.", &[("notes.md", b"original\n")]);
    let host = fx.host();
    let s = host.create(req(&["a"], &["read"])).unwrap();
    let tree = fx
        .data()
        .join("store/packages")
        .join(&s.skills[0].hash)
        .join("tree");
    let file = tree.join("notes.md");
    fs::set_permissions(&tree, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&file, b"tampered\n").unwrap();
    let (kind, status, msg) = kind_of(read(&host, &s.id, "/skills/a/notes.md"));
    assert_eq!((kind, status), ("hash_mismatch", 422));
    assert!(msg.contains("differs from the bytes pinned"), "{msg}");
}

// ---------------------------------------------------------------------------
// Found by fuzzing (docs/fuzzing.md)
// ---------------------------------------------------------------------------

/// Target `session`: a package path may hold a newline (it is admissible);
/// a refusal that lists or names such a file stays one line.
#[test]
fn refusals_that_name_files_are_one_line() {
    let fx = Fx::new();
    skill(
        &fx.project(),
        "odd",
        "odd",
        "Odd file names.",
        &[
            ("docs/line\nbreak.md", b"text\n"),
            ("bin\nary.bin", b"\x00\x01"),
        ],
    );
    let host = fx.host();
    let s = host.create(req(&["odd"], &["bash"])).unwrap();
    let resource = |path: &str| ResourceQuery {
        path: path.into(),
        offset: None,
        limit: None,
    };
    let past_end = ReadRange {
        offset: Some(99),
        limit: None,
    };
    let refusals = [
        kind_of(host.section(&s.id, "odd", "nope", ReadRange::default())),
        kind_of(host.section(&s.id, "odd", "docs/line\nbreak.md", past_end)),
        kind_of(host.resource(&s.id, &resource("/skills/odd/bin\nary.bin"))),
        kind_of(host.resource(&s.id, &resource("/skills/odd/nope"))),
        kind_of(host.create_json(br#"{"skills":[],"tools":[],"wut\n":1}"#)),
    ];
    for (kind, status, msg) in refusals {
        assert!(!msg.contains(['\n', '\r']), "{kind} {status}: {msg:?}");
    }
}

/// Target `skill_md`: a version spanning lines (`metadata.version` of
/// `SKILL.md`) adds no line to the prompt; the binding keeps it as written.
#[test]
fn a_version_spanning_lines_adds_no_prompt_line() {
    let fx = Fx::new();
    let d = fx.project().join("ver");
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("SKILL.md"),
        "---\nname: ver\ndescription: Versioned.\nmetadata:\n  version: \"1\\n- injected: line\"\n---\nBody.\n",
    )
    .unwrap();
    let host = fx.host();
    for t in [&["bash"][..], &[][..]] {
        let s = host.create(req(&["ver"], t)).unwrap();
        assert_eq!(s.skills[0].version, "1\n- injected: line");
        assert_eq!(s.prompt.skills[0].version, "1\n- injected: line");
        assert!(!s.prompt.text.contains("\n- injected"), "{}", s.prompt.text);
        assert!(
            s.prompt.text.contains("1 - injected: line"),
            "{}",
            s.prompt.text
        );
    }
}

/// Target `http`: when a name's latest stored revision is `u64::MAX`,
/// freezing other bytes under it is a conflict, not an overflow.
#[test]
fn freezing_past_the_last_revision_is_a_conflict() {
    let fx = Fx::new();
    skill(&fx.project(), "top", "top", "At the top.", &[]);
    let other = skill(
        &fx.path().join("elsewhere"),
        "top",
        "top",
        "Other bytes.",
        &[],
    );
    let host = fx.host();
    host.store()
        .publish_dir(&other, "top", u64::MAX, "9", &PackageLimits::default())
        .unwrap();
    let (kind, status, msg) = kind_of(host.create(req(&["top"], &[])));
    assert_eq!((kind, status), ("conflict", 409), "{msg}");
    assert!(msg.contains("last revision"), "{msg}");
}
