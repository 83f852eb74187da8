//! The command line (README, docs/formats.md) as a user meets it: the bundled
//! example, plain and `--json` runs, clear refusals of bad input, `explain`,
//! `hash`, `pack`, `store`, `doctor`, and running inside a nested
//! unprivileged user namespace (as inside a container).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use skill_runner_tests::*;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Runs `cmd` under the hang guard.
fn output(cmd: &mut Command) -> Output {
    output_within(cmd, HANG_GUARD)
}

/// `skill-runner ARGS` with the world's data dir.
fn runner(world: &World, args: &[&str]) -> Output {
    output(world.cmd().args(args))
}

/// The package hash of the bundled example, as its job file pins it.
fn example_job() -> (PathBuf, Value) {
    let path = project_dir().join("examples/hello-job.json");
    let job: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    (path, job)
}

const GREETING: &str = "Hello, world!";

/// `job` (a file already written) is refused in both modes: exit 125, one
/// line on stderr naming `needle` (plain), status `rejected` with `kind`
/// (when given) and a message naming `needle` (`--json`); and nothing is
/// left in `<data>/executions`.
fn assert_refused(world: &World, job: &Path, needle: &str, kind: Option<&str>) {
    let job = job.to_str().unwrap();
    let out = runner(world, &["run", job]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(out.stdout.is_empty(), "{}", show(&out));
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line:{}",
        show(&out)
    );
    assert!(
        stderr.contains(needle),
        "does not name {needle:?}:{}",
        show(&out)
    );

    let out = runner(world, &["run", "--json", job]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no result document ({e}):{}", show(&out)));
    assert_eq!(doc["status"], "rejected", "{}", show(&out));
    if let Some(kind) = kind {
        assert_eq!(doc["error"]["kind"], kind, "{}", show(&out));
    }
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "does not name {needle:?}:{}",
        show(&out)
    );

    assert_eq!(
        world.executions_left(),
        Vec::<String>::new(),
        "a refused job left state behind"
    );
}

/// A job file running `true` with `extra` merged in.
fn job_with(world: &World, extra: Value) -> PathBuf {
    let mut job = json!({"argv": ["true"]});
    for (k, v) in extra.as_object().unwrap() {
        job[k] = v.clone();
    }
    world.job("job", &job)
}

// ---------------------------------------------------------------------------
// The bundled example and the two output modes
// ---------------------------------------------------------------------------

#[test]
fn example_job_prints_the_greeting() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let out = output(
        world
            .cmd()
            .current_dir(project_dir())
            .args(["run", "examples/hello-job.json"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(text(&out.stdout).contains(GREETING), "{}", show(&out));
}

#[test]
fn example_job_json_reports_the_manifest() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let (_, job) = example_job();
    let out = output(world.cmd().current_dir(project_dir()).args([
        "run",
        "--json",
        "examples/hello-job.json",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["status"], "exited", "{}", show(&out));
    assert!(
        doc["stdout"].as_str().unwrap().contains(GREETING),
        "{doc:#}"
    );
    let manifest = &doc["skills"]["manifest"];
    assert_eq!(manifest["schemaVersion"], 1, "{doc:#}");
    assert_eq!(
        manifest["skills"],
        json!([{
            "hash": job["skills"][0]["hash"],
            "id": "hello",
            "path": "/skills/hello",
            "revision": 1,
            "version": "1.0.0",
        }]),
        "{doc:#}"
    );
}

#[test]
fn plain_mode_streams_stdout_and_stderr_separately() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let job = world.job(
        "job",
        &json!({"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}),
    );
    let out = runner(&world, &["run", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    assert_eq!(text(&out.stdout), "out\n", "{}", show(&out));
    assert!(text(&out.stderr).contains("err"), "{}", show(&out));
}

// ---------------------------------------------------------------------------
// Bad input: exit 125, one line, nothing left behind
// ---------------------------------------------------------------------------

#[test]
fn malformed_json_is_refused() {
    let world = World::new();
    let job = world.path().join("job.json");
    std::fs::write(&job, "{\"argv\": [\"true\"],").unwrap();
    assert_refused(&world, &job, "not valid JSON", Some("bad_job"));
}

#[test]
fn unknown_field_is_refused() {
    let world = World::new();
    let job = job_with(&world, json!({"walltime": 5}));
    assert_refused(&world, &job, "unknown field `walltime`", Some("bad_job"));
}

#[test]
fn missing_job_file_is_refused() {
    let world = World::new();
    let job = world.path().join("no-such-job.json");
    assert_refused(&world, &job, "no-such-job.json", Some("bad_job"));
}

#[test]
fn reserved_env_name_is_refused() {
    let world = World::new();
    let job = job_with(&world, json!({"env": {"LD_PRELOAD": "/workspace/evil.so"}}));
    assert_refused(&world, &job, "LD_PRELOAD", Some("bad_job"));
}

#[test]
fn cwd_outside_the_workspace_is_refused() {
    let world = World::new();
    let job = job_with(&world, json!({"cwd": "../x"}));
    assert_refused(&world, &job, "../x", Some("bad_job"));
}

#[test]
fn lying_hash_is_refused() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let dir = world.skill("liar", &[("scripts/run.sh", b"echo honest\n")]);
    let pinned = skill_ref("liar", &dir);
    // The bytes change after the hash was pinned.
    std::fs::write(dir.join("scripts/run.sh"), "echo changed\n").unwrap();
    let job = job_with(&world, json!({"skills": [pinned]}));
    assert_refused(&world, &job, "liar", Some("hash_mismatch"));
}

#[test]
fn missing_skill_folder_is_refused() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let dir = world.skill("gone", &[]);
    let entry = skill_ref("gone", &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let job = job_with(&world, json!({"skills": [entry]}));
    assert_refused(&world, &job, "gone", None);
}

#[test]
fn duplicate_skill_is_refused() {
    let world = World::new();
    let dir = world.skill("twice", &[]);
    let entry = skill_ref("twice", &dir);
    let job = job_with(&world, json!({"skills": [entry, entry]}));
    assert_refused(&world, &job, "twice", Some("bad_job"));
}

#[test]
fn upper_case_hash_is_refused() {
    let world = World::new();
    let dir = world.skill("upper", &[]);
    let mut entry = skill_ref("upper", &dir);
    entry["hash"] = json!(hash_of(&dir).to_uppercase());
    let job = job_with(&world, json!({"skills": [entry]}));
    assert_refused(&world, &job, "lowercase", Some("bad_job"));
}

#[test]
fn skill_folder_with_a_symlink_is_refused() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let dir = world.skill("linked", &[]);
    let entry = skill_ref("linked", &dir);
    let link = dir.join("passwd");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let job = job_with(&world, json!({"skills": [entry]}));
    assert_refused(&world, &job, link.to_str().unwrap(), None);
}

// ---------------------------------------------------------------------------
// explain
// ---------------------------------------------------------------------------

/// A job with a workspace, one skill and every alias spelling in argv.
fn alias_job(world: &World) -> (PathBuf, PathBuf) {
    let workspace = world.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let dir = world.skill("t", &[("scripts/run.sh", b"echo run\n")]);
    let job = world.job(
        "job",
        &json!({
            "argv": [
                "sh",
                "$SCIENCEDISCOVERY_SKILLS_DIR/t/scripts/run.sh",
                "${SCIENCEDISCOVERY_SKILLS_DIR}/t/SKILL.md",
                "/skills/t/x",
            ],
            "workspace": workspace,
            "skills": [skill_ref("t", &dir)],
        }),
    );
    (job, workspace)
}

#[test]
fn explain_prints_the_bwrap_argv() {
    let world = World::new();
    let (job, _) = alias_job(&world);
    let out = runner(&world, &["explain", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let argv = text(&out.stdout);
    for word in ["--unshare-all", "--ro-bind", "/skills", "--disable-userns"] {
        assert!(
            argv.split_whitespace().any(|w| w == word),
            "{word} missing:{}",
            show(&out)
        );
    }
}

#[test]
fn the_explained_command_runs_by_hand_like_run() {
    // `explain --fds-dir` gives everything needed to run the printed argv
    // without the runner: the same output as `run` proves the explanation
    // is the whole truth (once `run` has published the snapshot root).
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let workspace = world.sandbox_folder("ws");
    let dir = world.skill("t", &[("scripts/run.sh", b"echo from the package\n")]);
    let job = world.job(
        "job",
        &json!({
            "argv": ["sh", "-c", "sh /skills/t/scripts/run.sh; id -un; echo $SCIENCEDISCOVERY_SKILLS_DIR; cat /proc/self/status | grep ^Seccomp:"],
            "workspace": workspace,
            "skills": [skill_ref("t", &dir)],
        }),
    );
    let ran = runner(&world, &["run", job.to_str().unwrap()]);
    assert_eq!(ran.status.code(), Some(0), "{}", show(&ran));
    assert_eq!(
        text(&ran.stdout),
        "from the package\nsandbox\n/skills\nSeccomp:\t2\n"
    );

    let fds = world.path().join("fds");
    let out = runner(
        &world,
        &[
            "explain",
            "--json",
            "--fds-dir",
            fds.to_str().unwrap(),
            job.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let data_dir = world.data_dir();
    let argv: Vec<String> = doc["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("<data-dir>", data_dir.to_str().unwrap())
        })
        .collect();
    let open = |name: &str| std::fs::File::open(fds.join(name)).unwrap();
    let mut cmd = std::process::Command::new(doc["program"].as_str().unwrap());
    cmd.args(&argv);
    let mut files = vec![
        (open("3-seccomp-rules.bpf"), 3),
        (std::fs::File::create("/dev/null").unwrap(), 7),
    ];
    // The account files have descriptors of their own only where they are
    // not in the prepared /etc (fd 14, one of the folders below).
    if doc["fds"].get("5").is_some() {
        files.push((open("5-passwd"), 5));
        files.push((open("6-group"), 6));
    }
    if let Some(shim) = doc["shim"].as_str() {
        files.push((std::fs::File::open(shim).unwrap(), 8));
        files.push((std::fs::File::create("/dev/null").unwrap(), 9));
    }
    // The host folders the runner opens at launch.
    for (fd, path) in doc["folders"].as_object().unwrap() {
        let path = path
            .as_str()
            .unwrap()
            .replace("<data-dir>", data_dir.to_str().unwrap());
        files.push((std::fs::File::open(path).unwrap(), fd.parse().unwrap()));
    }
    let raw: Vec<(i32, i32)> = files
        .iter()
        .map(|(f, n)| (std::os::fd::AsRawFd::as_raw_fd(f), *n))
        .collect();
    // SAFETY: between fork and exec, only fcntl and dup2 on descriptors
    // we own: first out of the way (a source may sit on a target number),
    // then onto their numbers (dup2 clears close-on-exec on the copies).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            let mut high = [0; 16];
            for (i, (fd, _)) in raw.iter().enumerate() {
                high[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 100);
                if high[i] < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (i, (_, target)) in raw.iter().enumerate() {
                if libc::dup2(high[i], *target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let by_hand = cmd.output().unwrap();
    assert_eq!(by_hand.status.code(), Some(0), "{}", show(&by_hand));
    assert_eq!(text(&by_hand.stdout), text(&ran.stdout));
}

#[test]
fn explain_json_ends_with_the_rewritten_argv() {
    let world = World::new();
    let (job, _) = alias_job(&world);
    let out = runner(&world, &["explain", "--json", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):{}", show(&out)));
    let argv = argv_of(&doc);
    assert!(
        argv.ends_with(&[
            "--",
            "/proc/self/fd/8",
            "--skill-runner-exec-shim",
            "--",
            "sh",
            "/skills/t/scripts/run.sh",
            "/skills/t/SKILL.md",
            "/skills/t/x",
        ]),
        "{argv:?}"
    );
}

#[test]
fn explain_for_macos_keeps_host_paths_out_of_the_profile() {
    let world = World::new();
    let (job, workspace) = alias_job(&world);
    let out = runner(
        &world,
        &["explain", "--platform", "macos", job.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let all = text(&out.stdout);
    let (profile, params) = all
        .split_once(";; parameters")
        .unwrap_or_else(|| panic!("no parameters section:{}", show(&out)));
    assert!(profile.contains("(deny default)"), "{}", show(&out));
    assert!(profile.contains("(param \"WORKSPACE\")"), "{}", show(&out));
    let host = workspace.to_str().unwrap();
    assert!(
        !profile.contains(host) && !profile.contains(world.path().to_str().unwrap()),
        "a host path is pasted into the profile:{}",
        show(&out)
    );
    let workspace_param = params
        .lines()
        .find_map(|l| l.strip_prefix(";; WORKSPACE="))
        .unwrap_or_else(|| panic!("no WORKSPACE parameter:{}", show(&out)));
    assert!(workspace_param.ends_with(host), "{}", show(&out));
}

// ---------------------------------------------------------------------------
// hash, pack, store
// ---------------------------------------------------------------------------

#[test]
fn hash_prints_the_package_hash() {
    let world = World::new();
    let dir = world.skill("x", &[("references/data.txt", b"bytes\n")]);
    let out = runner(&world, &["hash", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(
        text(&out.stdout),
        format!("{}\n", hash_of(&dir)),
        "{}",
        show(&out)
    );
}

#[test]
fn pack_prints_a_bundle_of_the_folder() {
    let world = World::new();
    let dir = world.skill("x", &[("references/data.txt", b"bytes\n")]);
    let dir = dir.to_str().unwrap();
    let out = runner(
        &world,
        &[
            "pack",
            dir,
            "--id",
            "x",
            "--revision",
            "1",
            "--version",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let bundle: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):{}", show(&out)));
    let skills = bundle["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1, "{bundle:#}");
    let hash = text(&runner(&world, &["hash", dir]).stdout);
    assert_eq!(skills[0]["hash"], hash.trim(), "{bundle:#}");
    assert_eq!(skills[0]["id"], "x");
    assert_eq!(skills[0]["revision"], 1);
    assert_eq!(skills[0]["version"], "1");
    let paths: Vec<&str> = skills[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["SKILL.md", "references/data.txt"], "{bundle:#}");
}

#[test]
fn stored_skill_runs_without_a_path() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let dir = world.skill("x", &[("references/data.txt", b"stored bytes\n")]);
    let hash = hash_of(&dir);
    let out = runner(
        &world,
        &[
            "store",
            "add",
            dir.to_str().unwrap(),
            "--id",
            "x",
            "--revision",
            "1",
            "--version",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));

    let out = runner(&world, &["store", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let listed: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let binding = json!({"id": "x", "revision": 1, "version": "1", "hash": hash});
    assert!(listed.contains(&binding), "{}", show(&out));

    // The source changes after publishing: the store's copy is what runs.
    std::fs::write(dir.join("references/data.txt"), "edited later\n").unwrap();
    let (code, doc, _) = world.run_json_env(
        &json!({"argv": ["cat", "/skills/x/references/data.txt"], "skills": [binding]}),
        &[],
    );
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["stdout"], "stored bytes\n", "{doc:#}");
}

#[test]
fn binding_not_in_the_store_is_refused() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let dir = world.skill("unpublished", &[]);
    let mut entry = skill_ref("unpublished", &dir);
    entry.as_object_mut().unwrap().remove("path");
    let job = job_with(&world, json!({"skills": [entry]}));
    assert_refused(&world, &job, "publish", None);
}

// ---------------------------------------------------------------------------
// doctor
// ---------------------------------------------------------------------------

#[test]
fn doctor_reports_bubblewrap() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let out = runner(&world, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(text(&out.stdout).contains("bubblewrap"), "{}", show(&out));
}

// ---------------------------------------------------------------------------
// Inside a nested unprivileged user namespace (as inside a container)
// ---------------------------------------------------------------------------

const NESTED: &[&str] = &["--user", "--map-root-user", "--mount", "--fork"];

/// `unshare --user --map-root-user --mount --fork PROGRAM ARGS`.
fn nested(program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(NESTED)
        .arg(program)
        .args(args)
        .env_remove("SKILL_RUNNER_LOG")
        .stdin(Stdio::null());
    cmd
}

/// Whether bubblewrap itself can build a sandbox in the nested namespace:
/// `Some(true)` yes, `Some(false)` no (the runner must then refuse), `None`
/// when `unshare` is missing or cannot make the namespace at all, so the
/// case cannot be tested here.
fn nested_bwrap_works() -> Option<bool> {
    let unshare_works = Command::new("unshare")
        .args(NESTED)
        .arg("/bin/true")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        return None;
    }
    let bwrap = Command::new("sh")
        .args(["-c", "command -v bwrap"])
        .output()
        .ok()?;
    let bwrap = PathBuf::from(text(&bwrap.stdout).trim());
    let out = output(&mut nested(
        &bwrap,
        &[
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--",
            "/bin/true",
        ],
    ));
    Some(out.status.success())
}

/// The result of `run --json JOB` in the nested namespace, or `None` when
/// the runner refused clearly, as it must where bwrap cannot work nested.
fn run_nested(world: &World, job: &Path, current_dir: &Path, bwrap_works: bool) -> Option<Value> {
    let out = output(
        nested(&runner_bin(), &["run", "--json", job.to_str().unwrap()])
            .current_dir(current_dir)
            .env("SKILL_RUNNER_DATA_DIR", world.data_dir()),
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no result document ({e}):{}", show(&out)));
    if bwrap_works {
        return Some(doc);
    }
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        matches!(doc["status"].as_str(), Some("rejected" | "failed")),
        "{}",
        show(&out)
    );
    assert!(
        matches!(
            doc["error"]["kind"].as_str(),
            Some("sandbox_unavailable" | "sandbox_failed")
        ),
        "{}",
        show(&out)
    );
    None
}

#[test]
fn nested_user_namespace_runs_the_example_or_refuses_clearly() {
    if !require_sandbox() {
        return;
    }
    let Some(bwrap_works) = nested_bwrap_works() else {
        skip("unshare cannot make a user namespace here");
        return;
    };
    let world = World::new();
    let (job, _) = example_job();
    let Some(doc) = run_nested(&world, &job, &project_dir(), bwrap_works) else {
        return;
    };
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert!(
        doc["stdout"].as_str().unwrap().contains(GREETING),
        "{doc:#}"
    );
}

#[test]
fn nested_user_namespace_keeps_the_escape_probes_denied() {
    if !require_sandbox() {
        return;
    }
    let Some(bwrap_works) = nested_bwrap_works() else {
        skip("unshare cannot make a user namespace here");
        return;
    };
    let world = World::new();
    let workspace = world.workspace_with_probe();
    // The nested runner maps uid 0 alone and keeps it (crate::sandbox::identity):
    // the workspace is its own, not the sandbox user's.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&workspace, Some(0), Some(0)).unwrap();
    }
    let skill = world.skill("t", &[("references/data.txt", b"data\n")]);
    let probes: &[&[&str]] = &[
        &["socket-inet"],
        &["write-file", "/skills/t/x"],
        &["unshare-user"],
        &["caps"],
    ];
    for args in probes {
        let mut argv = vec!["/workspace/probe"];
        argv.extend_from_slice(args);
        let job = world.job(
            "job",
            &json!({"argv": argv, "workspace": workspace, "skills": [skill_ref("t", &skill)]}),
        );
        let Some(doc) = run_nested(&world, &job, world.path(), bwrap_works) else {
            return;
        };
        let stdout = doc["stdout"].as_str().unwrap_or_default();
        assert_eq!(doc["exit_code"], 0, "{args:?}: {doc:#}");
        if args[0] == "caps" {
            for cap in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                let line = format!("{cap}:\t0000000000000000");
                assert!(stdout.lines().any(|l| l == line), "{cap}: {doc:#}");
            }
            assert!(stdout.lines().any(|l| l == "NoNewPrivs:\t1"), "{doc:#}");
            assert!(stdout.lines().any(|l| l == "Seccomp:\t2"), "{doc:#}");
        } else {
            assert!(stdout.starts_with("DENIED "), "{args:?}: {doc:#}");
        }
    }
}

// ---------------------------------------------------------------------------
// The job from stdin, named folders, --help, freezing stored bytes
// ---------------------------------------------------------------------------

/// `run -` reads the job from stdin; its relative paths resolve against
/// the current folder.
#[test]
fn run_dash_reads_the_job_from_stdin() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let dir = world.skill("t", &[("references/data.txt", b"from the package\n")]);
    let ws = world.sandbox_folder("ws");
    std::fs::write(ws.join("mark"), "from the workspace\n").unwrap();
    let mut skill = skill_ref("t", &dir);
    skill["path"] = json!("skills/t");
    // Kept outside the current folder, so only stdin can bring it.
    let job = world.job(
        "elsewhere",
        &json!({
            "argv": ["cat", "/skills/t/references/data.txt", "/workspace/mark"],
            "workspace": "ws",
            "skills": [skill],
        }),
    );
    for mode in [&["run", "-"][..], &["run", "--json", "-"][..]] {
        let out = output(
            world
                .cmd()
                .current_dir(world.path())
                .stdin(std::fs::File::open(&job).unwrap())
                .args(mode),
        );
        assert_eq!(out.status.code(), Some(0), "{mode:?}{}", show(&out));
        let stdout = if mode.contains(&"--json") {
            let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
            doc["stdout"].as_str().unwrap().to_owned()
        } else {
            text(&out.stdout)
        };
        assert_eq!(
            stdout,
            "from the package\nfrom the workspace\n",
            "{mode:?}{}",
            show(&out)
        );
    }
    // Bad JSON on stdin is refused like a bad job file.
    let out = output(
        world
            .cmd()
            .stdin(std::fs::File::open(dir.join("SKILL.md")).unwrap())
            .args(["run", "-"]),
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("not valid JSON"),
        "{}",
        show(&out)
    );
}

/// A workspace or extensions dir the job names must exist: it is refused
/// in one sentence, never created.
#[test]
fn a_named_folder_that_does_not_exist_is_refused_not_created() {
    let world = World::new();
    let missing = world.path().join("no/such/ws");
    let job = job_with(&world, json!({"workspace": missing}));
    assert_refused(&world, &job, "does not exist", Some("bad_job"));
    let job = job_with(&world, json!({"extensions_dir": missing}));
    assert_refused(&world, &job, "extensions_dir", Some("bad_job"));
    assert!(!world.path().join("no").exists(), "a folder was created");

    let file = world.path().join("file");
    std::fs::write(&file, "").unwrap();
    let job = job_with(&world, json!({"workspace": file}));
    assert_refused(&world, &job, "is not a folder", Some("bad_job"));
}

/// Every subcommand's `--help` says what each positional argument and
/// each option is (walking `help` down every level).
#[test]
fn help_describes_every_argument_of_every_subcommand() {
    let world = World::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = runner(&world, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}{}", show(&out));
        seen += 1;
        let help = text(&out.stdout);
        let mut section = "";
        let mut lines = help.lines().peekable();
        while let Some(line) = lines.next() {
            if !line.starts_with(' ') {
                section = line.trim_end_matches(':');
                continue;
            }
            let item = line.trim_start();
            match section {
                "Commands" => {
                    let name = item.split_whitespace().next().unwrap();
                    if name != "help" {
                        let mut sub = path.clone();
                        sub.push(name.to_owned());
                        todo.push(sub);
                    }
                }
                // `<NAME>  text` or `-x, --flag <V>  text`: two spaces
                // separate the name from its description (long
                // descriptions wrap onto indented lines); when a page's
                // descriptions are too wide, clap puts each on the next
                // line, indented deeper than its name.
                "Arguments" | "Options" if item.starts_with(['<', '-']) => {
                    let inline = item
                        .split_once("  ")
                        .is_some_and(|(_, d)| !d.trim().is_empty());
                    let indent = line.len() - item.len();
                    let below = lines.peek().is_some_and(|next| {
                        let text = next.trim_start();
                        next.len() - text.len() > indent && !text.is_empty()
                    });
                    assert!(
                        inline || below,
                        "{args:?}: {item:?} has no description:\n{help}"
                    );
                }
                _ => {}
            }
        }
    }
    assert!(seen >= 20, "walked only {seen} help pages");
    // pack names what --id, --revision and --version are.
    let help = text(&runner(&world, &["pack", "--help"]).stdout);
    for needle in [
        "<DIR>",
        "--id <ID>",
        "--revision <REVISION>",
        "--version <VERSION>",
    ] {
        assert!(help.contains(needle), "{needle}:\n{help}");
    }
    assert!(help.contains("integer >= 1"), "{help}");
}

/// `session create --skill NAME` freezes the binding the store already
/// holds for the folder's bytes (here revision 1, version 1.0.0 from
/// `store add`), not a new revision with the catalog's default version.
#[test]
fn session_create_freezes_the_stored_binding_of_the_same_bytes() {
    let world = World::new();
    let dir = world.skill("hello", &[("scripts/greet.sh", b"echo hi\n")]);
    let hash = hash_of(&dir);
    let store_add = runner(
        &world,
        &[
            "store",
            "add",
            dir.to_str().unwrap(),
            "--id",
            "hello",
            "--revision",
            "1",
            "--version",
            "1.0.0",
        ],
    );
    assert_eq!(store_add.status.code(), Some(0), "{}", show(&store_add));
    // The world's `skills/` folder is the project catalog of its cwd.
    let out = output(
        world
            .cmd()
            .env("HOME", world.path().join("home"))
            .current_dir(world.path())
            .args(["session", "create", "--skill", "hello", "--tool", "bash"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stored = json!({"id": "hello", "revision": 1, "version": "1.0.0", "hash": hash});
    assert_eq!(doc["skills"], json!([stored]), "{doc:#}");
    let list = runner(&world, &["store", "list"]);
    assert_eq!(
        text(&list.stdout).lines().count(),
        1,
        "nothing new was published:{}",
        show(&list)
    );
}

// ---------------------------------------------------------------------------
// The runner's state is never a job's folder; --confine
// ---------------------------------------------------------------------------

#[test]
fn a_cli_job_can_name_no_piece_of_the_runner_state() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let skill = world.skill("t", &[("references/data.txt", b"data\n")]);
    let (code, doc) = {
        let (c, d, _) =
            world.run_json(&json!({"argv": ["true"], "skills": [skill_ref("t", &skill)]}));
        (c, d)
    };
    assert_eq!(code, 0, "{doc:#}");
    let identity = doc["skills"]["identity"].as_str().unwrap();
    let data = world.data_dir().canonicalize().unwrap();
    let root = data.join("published").join(identity);
    let state = [
        root.join("skills"),
        root.join("skills/t"),
        root.clone(),
        data.join("published"),
        data.join("store"),
        data.join("executions"),
        data.clone(),
        world.path().to_owned(),
        PathBuf::from("/"),
    ];
    for dir in &state {
        for field in ["workspace", "extensions_dir"] {
            let (code, doc, _) = world.run_json(&json!({"argv": ["true"], field: dir}));
            assert_eq!(code, 125, "{field} {}: {doc:#}", dir.display());
            let msg = doc["error"]["message"].as_str().unwrap();
            assert!(msg.contains("data dir"), "{field} {}: {msg}", dir.display());
        }
    }
    // A skill packaged from inside the state is refused too.
    let inside = root.join("skills/t");
    let mut pin = skill_ref("t", &skill);
    pin["path"] = json!(inside);
    let (code, doc, _) = world.run_json(&json!({"argv": ["true"], "skills": [pin]}));
    assert_eq!(code, 125, "{doc:#}");
    // The job root of the data dir is for jobs.
    let jobs = data.join("roots/w");
    std::fs::create_dir_all(&jobs).unwrap();
    give_to_sandbox(&jobs);
    let (code, doc, _) = world.run_json(&json!({"argv": ["true"], "workspace": jobs}));
    assert_eq!(code, 0, "{doc:#}");
    // And the data dir is private.
    let mode = std::fs::metadata(&data).unwrap().permissions();
    let mode = std::os::unix::fs::PermissionsExt::mode(&mode);
    // 0710 when a root runner lets its sandbox user's group pass through.
    assert!(matches!(mode & 0o777, 0o700 | 0o710), "{mode:o}");
}

#[test]
fn confine_keeps_a_job_files_paths_in_one_folder() {
    let world = World::new();
    let inside = world.sandbox_folder("jobs/ws");
    let job_in = world.job("in", &json!({"argv": ["true"], "workspace": inside}));
    let confine = world.path().join("jobs");
    let run = |job: &Path, extra: &[&str]| {
        let mut c = world.cmd();
        c.args(["run", "--json", "--confine", confine.to_str().unwrap()]);
        c.args(extra).arg(job);
        output(&mut c)
    };
    for (name, job) in [
        ("etc", json!({"argv": ["true"], "workspace": "/etc"})),
        (
            "ext",
            json!({"argv": ["true"], "extensions_dir": "/etc/ssl"}),
        ),
        ("dots", json!({"argv": ["true"], "workspace": "jobs/../.."})),
        (
            "profile",
            json!({"argv": ["true"], "profile": "/etc/passwd"}),
        ),
        (
            "profile2",
            json!({"argv": ["true"], "profile": "../../../../etc/shadow"}),
        ),
    ] {
        let path = world.job(name, &job);
        let out = run(&path, &[]);
        assert_eq!(out.status.code(), Some(125), "{name}:{}", show(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let msg = doc["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("--confine") || msg.contains("'..'"),
            "{name}: {msg}"
        );
    }
    if require_sandbox() {
        let out = run(&job_in, &[]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    }
}

/// A profile file may bind host folders, but never the runner's state.
#[test]
fn a_profile_cannot_bind_the_runners_state() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let (code, doc, _) = world.run_json(&json!({"argv": ["true"]}));
    assert_eq!(code, 0, "{doc:#}");
    let data = world.data_dir().canonicalize().unwrap();
    for src in [
        data.join("store"),
        data.clone(),
        data.parent().unwrap().to_owned(),
    ] {
        let profile = default_profile_with("ro-bind", &src, "/data");
        std::fs::write(world.path().join("evil.toml"), profile).unwrap();
        let (code, doc, _) =
            world.run_json(&json!({"argv": ["ls", "/data"], "profile": "./evil.toml"}));
        assert_eq!(code, 125, "{}: {doc:#}", src.display());
        let msg = doc["error"]["message"].as_str().unwrap();
        assert!(msg.contains("data dir"), "{msg}");
    }
}

/// A profile that is a device or a FIFO is refused at once, never read
/// until memory runs out (found in the review of the fuzz targets).
#[test]
fn a_profile_that_is_not_a_small_regular_file_is_refused() {
    let world = World::new();
    let job = world.job("job", &json!({"argv": ["true"], "profile": "/dev/zero"}));
    let out = output(world.cmd().args(["run", "--json"]).arg(&job));
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("not a regular file"),
        "{}",
        show(&out)
    );
}

/// `/etc` is one read-only bind of a copy of the profile's `/etc`
/// pieces and the account files. The sandbox must see what binds showed,
/// nothing more, read-only, and never a stale copy: each change of the host's
/// files shows in the next run, even several changes within one second.
#[test]
fn the_sandbox_s_etc_is_a_read_only_copy_that_follows_the_host() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let conf = world.path().join("conf");
    std::fs::create_dir_all(conf.join("sub")).unwrap();
    std::fs::write(conf.join("sub/value"), "one\n").unwrap();
    let profile = default_profile_with("ro-bind-try", &conf, "/etc/skill-test");
    std::fs::write(world.path().join("etc-test.toml"), profile).unwrap();
    let script = "cat /etc/skill-test/sub/value /etc/skill-test/new 2>/dev/null; \
                  ls /etc | tr '\\n' ' '; echo; \
                  sha256sum /etc/ld.so.cache | cut -d' ' -f1; \
                  touch /etc/planted 2>/dev/null || echo read-only; \
                  touch /etc/skill-test/planted 2>/dev/null || echo read-only";
    let run = || {
        let (code, doc, _) = world.run_json(&json!({
            "argv": ["sh", "-c", script],
            "profile": "./etc-test.toml",
        }));
        assert_eq!(code, 0, "{doc:#}");
        doc["stdout"].as_str().unwrap().to_owned()
    };
    let host_cache = {
        let out = Command::new("sha256sum")
            .arg("/etc/ld.so.cache")
            .output()
            .unwrap();
        text(&out.stdout).split(' ').next().unwrap().to_owned()
    };
    let mut listing: Vec<&str> = vec!["group", "passwd", "skill-test"];
    for piece in ["ld.so.cache", "alternatives", "ssl"] {
        if Path::new("/etc").join(piece).exists() {
            listing.push(piece);
        }
    }
    listing.sort();
    let expect = |value: &str| {
        format!(
            "{value}{} \n{}read-only\nread-only\n",
            listing.join(" "),
            if Path::new("/etc/ld.so.cache").exists() {
                format!("{host_cache}\n")
            } else {
                String::new()
            }
        )
    };
    // A copy of files changed within the last two seconds is used but not
    // recorded as current; once they are older, it is, and later runs take
    // the recorded copy after checking the files' times.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(run(), expect("one\n"));
    assert_eq!(run(), expect("one\n"));
    // Rewritten in place with the same size, twice within a second.
    std::fs::write(conf.join("sub/value"), "two\n").unwrap();
    assert_eq!(run(), expect("two\n"));
    std::fs::write(conf.join("sub/value"), "six\n").unwrap();
    assert_eq!(run(), expect("six\n"));
    // An entry added, then removed.
    std::fs::write(conf.join("new"), "new\n").unwrap();
    assert_eq!(run(), expect("six\nnew\n"));
    std::fs::remove_file(conf.join("new")).unwrap();
    assert_eq!(run(), expect("six\n"));
    // And explain names the copy it binds.
    let job = world.job(
        "explain",
        &json!({"argv": ["true"], "profile": "./etc-test.toml"}),
    );
    let out = runner(&world, &["explain", "--json", job.to_str().unwrap()]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let etc = doc["folders"]["14"].as_str().unwrap();
    assert!(etc.starts_with("<data-dir>/system-views/"), "{etc}");
    let argv = argv_of(&doc);
    assert!(
        argv.windows(3).any(|w| w == ["--ro-bind-fd", "14", "/etc"]),
        "{argv:?}"
    );
    let on_disk = etc.replace("<data-dir>", world.data_dir().to_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(Path::new(&on_disk).join("skill-test/sub/value")).unwrap(),
        "six\n"
    );

    // A file closed to others is not copied (a copy would let the sandbox
    // user read it): the pieces are bound one by one, where the file stays
    // closed to it, and explain says so too.
    std::fs::set_permissions(
        conf.join("sub/value"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let identity = world.run_json(&json!({"argv": ["true"]})).1["identity"]["mode"].clone();
    if identity == "sandbox_user" {
        assert_eq!(run(), expect(""));
    }
    let out = runner(&world, &["explain", "--json", job.to_str().unwrap()]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["folders"].get("14").is_none(), "{doc:#}");
    assert!(doc["fds"].get("5").is_some(), "{doc:#}");
    let argv = argv_of(&doc);
    let piece = conf.to_str().unwrap();
    assert!(
        argv.windows(3)
            .any(|w| w == ["--ro-bind-try", piece, "/etc/skill-test"]),
        "{argv:?}"
    );
}

/// The built-in profile's text with one more mount first in its list.
fn default_profile_with(op: &str, src: &Path, dest: &str) -> String {
    let base = std::fs::read_to_string(project_dir().join("profiles/default.toml")).unwrap();
    base.replacen(
        "mounts = [",
        &format!(
            "mounts = [\n  {{ op = \"{op}\", src = \"{}\", dest = \"{dest}\" }},",
            src.display()
        ),
        1,
    )
}

/// The argv of an `explain --json` document.
fn argv_of(doc: &Value) -> Vec<&str> {
    doc["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}
