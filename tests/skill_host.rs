//! The skill host from the command line (docs/skill-host.md):
//! `skill-runner catalog list|find|show` over built-in, user and
//! project folders; `skill-runner session create|load|resource|events`;
//! and a `run` job that names a session and gets its frozen skills, even
//! after the catalog folder changed.
//!
//! Each test gives the runner its own `HOME` and current folder, so the
//! real home is never scanned.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use skill_runner_tests::*;

/// A world with `home/.agents/skills` (user) and `proj/skills` (project).
struct Host {
    world: World,
}

impl Host {
    fn new() -> Host {
        let world = World::new();
        std::fs::create_dir_all(world.path().join("proj")).unwrap();
        Host { world }
    }

    fn home(&self) -> PathBuf {
        self.world.path().join("home")
    }

    fn user(&self) -> PathBuf {
        self.home().join(".agents/skills")
    }

    fn project(&self) -> PathBuf {
        self.world.path().join("proj/skills")
    }

    /// `skill-runner ARGS` with this world's data dir, HOME and cwd.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.world.cmd();
        c.env("HOME", self.home())
            .current_dir(self.world.path().join("proj"))
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        output_within(&mut self.cmd(args), HANG_GUARD)
    }

    /// Runs and expects exit 0 and JSON on stdout.
    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}{}", show(&out));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: no JSON ({e}){}", show(&out)))
    }
}

fn write_skill(root: &Path, name: &str, description: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n"),
    )
    .unwrap();
    for (p, t) in files {
        let p = dir.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, t).unwrap();
    }
    dir
}

#[test]
fn catalog_lists_finds_and_shows_across_sources() {
    let h = Host::new();
    write_skill(&h.user(), "hello", "Greets people.", &[]);
    write_skill(&h.user(), "notes", "Takes notes.", &[]);
    write_skill(&h.project(), "hello", "Greets the project.", &[]);
    write_skill(
        &h.project(),
        "csv-report",
        "Summarize a CSV file into a report.",
        &[("scripts/report.sh", "echo report\n")],
    );
    let broken = h.project().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("SKILL.md"), "no front matter\n").unwrap();

    let out = h.run(&["catalog", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().take(3).collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["csv-report", "project", "with_files"],
            ["hello", "project", "instruction_only"],
            ["notes", "user", "instruction_only"],
            ["sandbox-basics", "builtin", "instruction_only"],
            ["skill-authoring", "builtin", "with_files"],
        ],
        "{}",
        show(&out)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: {}: SKILL.md front matter: SKILL.md must start with a '---' line",
            broken.join("SKILL.md").display()
        )),
        "{}",
        show(&out)
    );

    let found = h.json(&["catalog", "find", "csv report", "--json"]);
    assert_eq!(found["hits"][0]["name"], "csv-report");
    assert!(found["hits"][0].get("explain").is_none(), "{found}");
    // --explain: the terms' weights, then per skill what each
    // term and the name added.
    let out = h.run(&["catalog", "find", "CSV reports for me", "--explain"]);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("terms: csv (in 1 of 5 skills, idf ")
            && lines[0].ends_with("; left out: for, me"),
        "{}",
        show(&out)
    );
    assert!(lines[1].contains("csv-report"), "{}", show(&out));
    assert!(
        lines[2].trim_start().starts_with("= csv ") && lines[2].contains("(name 1, description 1"),
        "{}",
        show(&out)
    );
    let found = h.json(&["catalog", "find", "csv reports", "--json", "--explain"]);
    assert_eq!(
        found["hits"][0]["explain"]["name_match"], "exact",
        "{found}"
    );
    assert_eq!(found["explain"]["skills"], 5, "{found}");
    let out = h.run(&["catalog", "find", "spreadsheet"]);
    assert!(
        text(&out.stdout).contains("no skill matches \"spreadsheet\" among 5 skills"),
        "{}",
        show(&out)
    );

    let shown = h.json(&["catalog", "show", "hello", "--json"]);
    assert_eq!(shown["source"], "project");
    assert_eq!(shown["description"], "Greets the project.");
    assert_eq!(
        shown["shadows"],
        json!([{"source": "user", "path": h.user().join("hello")}])
    );
    assert!(shown["skill_md"]
        .as_str()
        .unwrap()
        .contains("Greets the project."));

    let out = h.run(&["catalog", "show", "Hello"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("not a valid skill name"),
        "{}",
        show(&out)
    );
    let out = h.run(&["catalog", "show", "helo"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("(close: hello)"),
        "{}",
        show(&out)
    );
}

#[test]
fn sessions_from_the_command_line() {
    let h = Host::new();
    write_skill(&h.user(), "hello", "Greets people.", &[]);
    write_skill(
        &h.project(),
        "csv-report",
        "Summarize a CSV file into a report.",
        &[("scripts/report.sh", "echo report\n")],
    );

    // No file tool, a skill with files: refused with the kind and reason.
    let out = h.run(&[
        "session",
        "create",
        "--skill",
        "hello",
        "--skill",
        "csv-report",
        "--tool",
        "web_search",
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("composition_rejected: skill \"csv-report\" needs files"),
        "{}",
        show(&out)
    );

    let semantic = h.json(&["session", "create", "--skill", "hello"]);
    assert_eq!(semantic["delivery"], "semantic_tools");
    assert_eq!(semantic["tools"][1]["name"], "Skill");

    let s = h.json(&[
        "session",
        "create",
        "--skill",
        "hello",
        "--skill",
        "csv-report",
        "--tool",
        "bash",
    ]);
    assert_eq!(s["delivery"], "managed_filesystem");
    let id = s["id"].as_str().unwrap();
    assert_eq!(s["prompt"]["skills"][1]["name"], "csv-report");
    assert_eq!(
        s["prompt"]["skills"][1]["package_path"],
        "$SCIENCEDISCOVERY_SKILLS_DIR/csv-report"
    );
    assert_eq!(h.json(&["session", "show", id])["skills"], s["skills"]);

    let loaded = h.json(&["session", "load", id, "csv-report"]);
    assert_eq!(loaded["body"], "# csv-report\n");
    assert_eq!(loaded["sections"][0]["name"], "scripts/report.sh");
    let r = h.json(&[
        "session",
        "resource",
        id,
        "${SCIENCEDISCOVERY_SKILLS_DIR}/csv-report/scripts/report.sh",
        "--limit",
        "4",
    ]);
    assert_eq!(r["content"], "echo");
    assert_eq!(r["truncated"], true);
    assert_eq!(r["next_offset"], 4);
    let out = h.run(&["session", "resource", id, "/skills/../etc/passwd"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(text(&out.stderr).contains("bad_request"), "{}", show(&out));

    let ranked = h.json(&["session", "skills", id, "--query", "csv"]);
    assert_eq!(ranked["hits"][0]["name"], "csv-report");
    let events = h.json(&["session", "events", id]);
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["load_skill", "read_resource"]);

    // A binding already in the store, by ID@REV.
    let again = h.json(&[
        "session",
        "create",
        "--skill",
        "csv-report@1",
        "--tool",
        "read",
    ]);
    assert_eq!(again["skills"][0], s["skills"][1]);
    let out = h.run(&["session", "show", "ses-nope"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
}

/// A job that names a session runs the session's frozen bytes: the script
/// edited after the session was created is not what runs.
#[test]
fn a_job_naming_a_session_runs_its_frozen_skills() {
    if !require_sandbox() {
        return;
    }
    let h = Host::new();
    let dir = write_skill(
        &h.project(),
        "greet",
        "Greets.",
        &[("scripts/greet.sh", "echo frozen-v1\n")],
    );
    let s = h.json(&["session", "create", "--skill", "greet", "--tool", "bash"]);
    let id = s["id"].as_str().unwrap();
    std::fs::write(dir.join("scripts/greet.sh"), "echo edited-v2\n").unwrap();

    let (code, result, out) = h.world.run_json(&json!({
        "argv": ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/greet/scripts/greet.sh"],
        "session": id,
    }));
    assert_eq!(code, 0, "{}", show(&out));
    assert_eq!(result["stdout"], "frozen-v1\n");
    assert_eq!(result["skills"]["identity"], s["identity"]);
    assert_eq!(
        result["skills"]["manifest"]["skills"][0]["hash"],
        s["skills"][0]["hash"]
    );

    // Naming a session and listing skills is refused; so is an unknown session.
    let (code, result, _) = h.world.run_json(&json!({
        "argv": ["true"],
        "session": id,
        "skills": [s["skills"][0].clone()],
    }));
    assert_eq!(code, 125);
    assert!(result["error"]["message"]
        .as_str()
        .unwrap()
        .contains("one or the other"));
    let (code, result, _) = h.world.run_json(&json!({
        "argv": ["true"],
        "session": "ses-00000000000000000000000000000000",
    }));
    assert_eq!(code, 125);
    assert_eq!(result["error"]["kind"], "not_found");
    assert!(result["error"]["message"]
        .as_str()
        .unwrap()
        .contains("does not exist"));
}
