//! A job that names an environment (docs/environments.md, "Use"), through
//! the real binary under real bubblewrap: the tree published with `env
//! add` is imported at `/opt/skill-env`, read-only, with its `bin/` first
//! on `PATH`, and the result names it; a changed tree, an unknown
//! environment or a base that no longer matches the host's interpreter is
//! refused (`rejected`, exit 125) before the command starts.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use skill_runner_tests::*;

const PYTHON: &str = "/usr/bin/python3";
const HASH_A: &str = "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";

/// A tree with a pure-Python module and a program, published with `env
/// add --python LOCK` (so its base is this host's interpreter); returns
/// `{id, hash}` as a job names it, or `None` (skipped) without a sandbox
/// or an interpreter.
fn published(world: &World) -> Option<Value> {
    if !require_sandbox() {
        return None;
    }
    if !Path::new(PYTHON).exists() {
        skip(format!("no {PYTHON} on this host"));
        return None;
    }
    let dir = world.path().join("tree");
    fs::create_dir_all(dir.join("python/greet")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("python/greet/__init__.py"), "WORD = 'hello'\n").unwrap();
    fs::write(dir.join("bin/greet"), "#!/bin/sh\necho greet from bin\n").unwrap();
    fs::set_permissions(dir.join("bin/greet"), fs::Permissions::from_mode(0o755)).unwrap();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, format!("greet==1.0 --hash={HASH_A}\n")).unwrap();
    let out = output_within(
        world.cmd().args(["env", "add"]).arg(&dir).args([
            "--id",
            "greet-tools",
            "--python",
            lock.to_str().unwrap(),
        ]),
        HANG_GUARD,
    );
    assert!(out.status.success(), "{}", show(&out));
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(json!({"id": rec["id"], "hash": rec["hash"]}))
}

fn stored_tree(world: &World, env: &Value) -> PathBuf {
    world
        .data_dir()
        .join("environments/trees")
        .join(env["hash"].as_str().unwrap())
        .join("tree")
}

/// A job running `script` with `sh -c` in `workspace`, naming `env`.
fn job(workspace: &Path, env: &Value, script: &str) -> Value {
    json!({
        "argv": ["/bin/sh", "-c", script],
        "workspace": workspace,
        "environment": env,
    })
}

/// Refused before the command ran: rejected, exit 125, `kind`, and a
/// message holding `needle`; the marker the command would have written is
/// absent.
fn assert_refused(world: &World, job: &Value, kind: &str, needle: &str, marker: &Path) {
    let (code, doc, out) = world.run_json(job);
    assert_eq!(code, 125, "{}", show(&out));
    assert_eq!(doc["status"], "rejected", "{doc}");
    assert_eq!(doc["error"]["kind"], kind, "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message}");
    assert!(!message.contains('\n'), "one sentence: {message}");
    assert!(!marker.exists(), "the command ran: {}", marker.display());
}

#[test]
fn a_job_imports_from_its_environment_and_the_result_names_it() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    let script = "echo PATH=$PATH; echo PYTHONPATH=$PYTHONPATH; greet; \
                  python3 -c 'import greet; print(greet.WORD, greet.__file__)'";
    let (code, doc, out) = world.run_json(&job(&ws, &env, script));
    assert_eq!(code, 0, "{}", show(&out));
    let stdout = doc["stdout"].as_str().unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "PATH=/opt/skill-env/bin:/usr/bin:/bin",
            "PYTHONPATH=/opt/skill-env/python",
            "greet from bin",
            "hello /opt/skill-env/python/greet/__init__.py",
        ],
        "{doc}"
    );
    assert_eq!(doc["skills"]["environment"], env, "{doc}");
}

#[test]
fn the_environment_is_read_only_in_the_sandbox() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    // mkdir asks the mount for a write before any permission check: a
    // read-only bind answers EROFS whatever the folders' modes.
    let check = r#"
import errno, os
for attempt in (
    lambda: os.mkdir("/opt/skill-env/new"),
    lambda: os.mkdir("/opt/skill-env/python/new"),
    lambda: os.symlink("x", "/opt/skill-env/bin/new"),
):
    try:
        attempt()
        print("written")
    except OSError as e:
        print(errno.errorcode[e.errno])
try:
    open("/opt/skill-env/python/greet/__init__.py", "a").write("X = 2")
    print("written")
except OSError as e:
    print("denied", errno.errorcode[e.errno])
"#;
    fs::write(ws.join("check.py"), check).unwrap();
    let script = "python3 check.py";
    let (code, doc, out) = world.run_json(&job(&ws, &env, script));
    assert_eq!(code, 0, "{}", show(&out));
    let stdout = doc["stdout"].as_str().unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[..3], ["EROFS", "EROFS", "EROFS"], "{doc}");
    assert!(lines[3].starts_with("denied "), "{doc}");
    // And the published tree is as it was.
    let tree = stored_tree(&world, &env);
    assert!(!tree.join("new").exists());
    assert_eq!(
        fs::read_to_string(tree.join("python/greet/__init__.py")).unwrap(),
        "WORD = 'hello'\n"
    );
    let out = output_within(
        world
            .cmd()
            .args(["env", "verify", env["hash"].as_str().unwrap()]),
        HANG_GUARD,
    );
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn a_byte_changed_in_the_published_tree_is_refused_before_the_command_starts() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    let file = stored_tree(&world, &env).join("python/greet/__init__.py");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&file, "WORD = 'HELLO'\n").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o444)).unwrap();
    let marker = ws.join("ran");
    assert_refused(
        &world,
        &job(&ws, &env, "touch /workspace/ran"),
        "hash_mismatch",
        "the bytes of \"python/greet/__init__.py\" changed",
        &marker,
    );
}

#[test]
fn an_unknown_environment_is_refused_before_the_command_starts() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    let marker = ws.join("ran");
    let unknown = json!({"id": "greet-tools", "hash": "1".repeat(64)});
    assert_refused(
        &world,
        &job(&ws, &unknown, "touch /workspace/ran"),
        "not_in_store",
        "no environment",
        &marker,
    );
    // The right hash under another id is not that environment either.
    let other = json!({"id": "other-tools", "hash": env["hash"]});
    assert_refused(
        &world,
        &job(&ws, &other, "touch /workspace/ran"),
        "not_in_store",
        "other-tools",
        &marker,
    );
}

#[test]
fn an_environment_whose_base_no_longer_matches_the_interpreter_is_refused() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    // The record says another interpreter binary: as if the host's python3
    // had been upgraded since the environment was built.
    let record = world
        .data_dir()
        .join("environments/records/greet-tools")
        .join(format!("{}.json", env["hash"].as_str().unwrap()));
    let mut doc: Value = serde_json::from_slice(&fs::read(&record).unwrap()).unwrap();
    doc["base"][0]["sha256"] = json!("0".repeat(64));
    fs::set_permissions(&record, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&record, serde_json::to_vec(&doc).unwrap()).unwrap();
    let marker = ws.join("ran");
    assert_refused(
        &world,
        &job(&ws, &env, "touch /workspace/ran"),
        "hash_mismatch",
        "rebuild the environment",
        &marker,
    );
}

#[test]
fn a_job_may_not_set_the_path_variable_its_environment_sets() {
    let world = World::new();
    let ws = world.path();
    let env = json!({"id": "greet-tools", "hash": "1".repeat(64)});
    let mut j = job(ws, &env, "true");
    j["env"] = json!({"PYTHONPATH": "/tmp"});
    let (code, doc, out) = world.run_json(&j);
    assert_eq!(code, 125, "{}", show(&out));
    assert_eq!(doc["error"]["kind"], "bad_job", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"PYTHONPATH\" is set by the runner when the job names an environment"),
        "{doc}"
    );
    let bad = json!({"id": "Greet", "hash": "xyz"});
    let (code, doc, _) = world.run_json(&job(ws, &bad, "true"));
    assert_eq!(code, 125);
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not an environment's name"),
        "{doc}"
    );
}

#[test]
fn explain_shows_the_environment_bound_read_only_and_its_variables() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let path = world.job("job", &job(world.path(), &env, "true"));
    let out = output_within(
        world.cmd().args(["explain", "--json"]).arg(&path),
        HANG_GUARD,
    );
    assert!(out.status.success(), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let argv: Vec<&str> = doc["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        argv.windows(3)
            .any(|w| w == ["--ro-bind-fd", "15", "/opt/skill-env"]),
        "{argv:?}"
    );
    assert!(
        argv.windows(3)
            .any(|w| w == ["--setenv", "PATH", "/opt/skill-env/bin:/usr/bin:/bin"]),
        "{argv:?}"
    );
    assert!(
        argv.windows(3)
            .any(|w| w == ["--setenv", "PYTHONPATH", "/opt/skill-env/python"]),
        "{argv:?}"
    );
    let tree = format!(
        "<data-dir>/environments/trees/{}/tree",
        env["hash"].as_str().unwrap()
    );
    assert_eq!(doc["folders"]["15"], tree, "{doc}");
}

/// A skill folder whose `SKILL.md` declares `env` (or nothing).
fn declaring_skill(world: &World, id: &str, env: Option<&Value>) -> PathBuf {
    let metadata = match env {
        Some(e) => format!(
            "metadata:\n  environment: \"{}@{}\"\n",
            e["id"].as_str().unwrap(),
            e["hash"].as_str().unwrap()
        ),
        None => String::new(),
    };
    let md = format!("---\nname: {id}\ndescription: Test skill {id}.\n{metadata}---\n# {id}\n");
    world.skill(id, &[("SKILL.md", md.as_bytes())])
}

#[test]
fn a_skill_that_declares_its_environment_gets_it_without_the_job_naming_it() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    let skill = declaring_skill(&world, "greeter", Some(&env));
    let plain = declaring_skill(&world, "plain", None);
    let (code, doc, out) = world.run_json(&json!({
        "argv": ["python3", "-c", "import greet; print(greet.WORD)"],
        "workspace": ws,
        "skills": [skill_ref("greeter", &skill), skill_ref("plain", &plain)],
    }));
    assert_eq!(code, 0, "{}", show(&out));
    assert_eq!(doc["stdout"], "hello\n", "{doc}");
    assert_eq!(doc["skills"]["environment"], env, "{doc}");
}

#[test]
fn skills_declaring_different_environments_or_another_than_the_job_names_are_refused() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let ws = world.sandbox_folder("ws");
    let marker = ws.join("ran");
    let other = json!({"id": "other-tools", "hash": "2".repeat(64)});
    let a = declaring_skill(&world, "uses-greet", Some(&env));
    let b = declaring_skill(&world, "uses-other", Some(&other));
    let mut both = job(&ws, &env, "touch /workspace/ran");
    both.as_object_mut().unwrap().remove("environment");
    both["skills"] = json!([skill_ref("uses-greet", &a), skill_ref("uses-other", &b)]);
    assert_refused(
        &world,
        &both,
        "bad_job",
        &format!(
            "skill \"uses-greet\" declares environment {{id greet-tools, hash {}}} and skill \"uses-other\" declares {{id other-tools, hash {}}}",
            env["hash"].as_str().unwrap(),
            "2".repeat(64)
        ),
        &marker,
    );
    let mut named = job(&ws, &other, "touch /workspace/ran");
    named["skills"] = json!([skill_ref("uses-greet", &a)]);
    assert_refused(
        &world,
        &named,
        "bad_job",
        "but skill \"uses-greet\" declares",
        &marker,
    );
    // A declaration that is no ID@HASH is the skill's fault.
    let bad = world.skill(
        "bad-decl",
        &[(
            "SKILL.md",
            b"---\nname: bad-decl\ndescription: Bad.\nmetadata:\n  environment: greet-tools\n---\n",
        )],
    );
    let mut j = job(&ws, &env, "touch /workspace/ran");
    j.as_object_mut().unwrap().remove("environment");
    j["skills"] = json!([skill_ref("bad-decl", &bad)]);
    assert_refused(&world, &j, "bad_package", "is not ID@HASH", &marker);
}

#[test]
fn a_daemon_job_names_an_environment_like_a_command_line_one() {
    let world = World::new();
    let Some(env) = published(&world) else {
        return;
    };
    let d = skill_runner_tests::daemon::Daemon::start(&world, &[]);
    let (status, doc) = d.call(
        "POST",
        "/v1/executions",
        Some(&json!({
            "argv": ["python3", "-c", "import greet; print(greet.WORD)"],
            "environment": env,
        })),
    );
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["status"], "exited", "{doc}");
    assert_eq!(doc["stdout"], "hello\n", "{doc}");
    assert_eq!(doc["skills"]["environment"], env, "{doc}");
}

#[test]
fn a_daemon_job_naming_an_unknown_environment_is_refused_as_not_in_store() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let d = skill_runner_tests::daemon::Daemon::start(&world, &[]);
    let (status, doc) = d.call(
        "POST",
        "/v1/executions",
        Some(&json!({
            "argv": ["true"],
            "environment": {"id": "nothing-here", "hash": "3".repeat(64)},
        })),
    );
    assert_eq!(status, 404, "{doc}");
    assert_eq!(doc["status"], "rejected", "{doc}");
    assert_eq!(doc["error"]["kind"], "not_in_store", "{doc}");
}
