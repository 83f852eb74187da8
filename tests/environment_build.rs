//! `skill-runner env build --python LOCK --id ID` (docs/environments.md,
//! "Building from a lock"): a one-wheel lock fetched with pip's own index
//! configuration, installed in the runner's sandbox, published, and
//! imported by a job; the same lock built again is served from the store
//! without reaching any index; the install step's sandbox has no network
//! at all and a read-only input.

use std::ffi::OsString;
use std::fs;
use std::path::Path;

use serde_json::{json, Value};
use skill_runner::exec::envbuild::{BuildDir, SandboxInstall};
use skill_runner::package::environment::build::SandboxRun;
use skill_runner_tests::envs::{
    env_build, install_runner, pip_usable, skipped_without_index, PYTHON, SIX,
};
use skill_runner_tests::*;

#[test]
fn a_built_environment_is_imported_by_a_job_and_a_second_build_is_served_from_the_store() {
    if !pip_usable() {
        return;
    }
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, SIX).unwrap();
    let out = env_build(&world, &lock, "six-env", &[]);
    if skipped_without_index(&out) {
        return;
    }
    assert!(out.status.success(), "{}", show(&out));
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stderr = text(&out.stderr);
    let steps: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("skill-runner: env build six-env: "))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(
        steps,
        ["lock", "fetch", "install", "hash", "publish"],
        "{stderr}"
    );
    assert_eq!(rec["id"], "six-env");
    assert_eq!(rec["base"][0]["path"], PYTHON);
    assert_eq!(
        rec["locks"][0]["sha256"],
        skill_runner::package::hash::file_hash(SIX.as_bytes())
    );
    let env = json!({"id": rec["id"], "hash": rec["hash"]});

    let ws = world.sandbox_folder("ws");
    let (code, doc, out) = world.run_json(&json!({
        "argv": ["python3", "-c", "import six; print(six.__version__, six.__file__)"],
        "workspace": ws,
        "environment": env,
    }));
    assert_eq!(code, 0, "{}", show(&out));
    assert_eq!(
        doc["stdout"], "1.17.0 /opt/skill-env/python/six.py\n",
        "{doc}"
    );
    assert_eq!(doc["skills"]["environment"], env);

    // Again, with pip pointed at an index that answers nobody: served
    // from the store, so nothing was fetched.
    let nowhere = [
        ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
        ("PIP_RETRIES", "0"),
    ];
    let again = env_build(&world, &lock, "six-env", &nowhere);
    assert!(again.status.success(), "{}", show(&again));
    let rec2: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(rec2, rec, "the same record");
    let stderr = text(&again.stderr);
    assert!(stderr.contains("served from the store"), "{stderr}");
    assert!(!stderr.contains(": fetch:"), "{stderr}");
    // Under another id: the same tree, a new record, still no fetch.
    let other = env_build(&world, &lock, "six-copy", &nowhere);
    assert!(other.status.success(), "{}", show(&other));
    let rec3: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert_eq!(rec3["hash"], rec["hash"]);
    assert_eq!(rec3["id"], "six-copy");
}

#[test]
fn a_loose_lock_is_refused_before_anything_is_fetched() {
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, "six==1.17.0\n").unwrap();
    let out = env_build(&world, &lock, "six-env", &[]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(err.contains("a requirement without --hash"), "{err}");
    assert!(!err.contains(": fetch:"), "{err}");
    assert!(out.stdout.is_empty());
}

/// The install step's sandbox, driven directly with commands of our own
/// instead of pip: a socket to any address fails, the input folder is
/// read-only, the tree is writable, and a command that does none of that
/// succeeds (so a failure is the denial, not the sandbox).
#[test]
fn the_install_step_has_no_network_and_a_read_only_input() {
    if !pip_usable() {
        return;
    }
    let world = World::new();
    let Some(runner) = install_runner(&world) else {
        return;
    };
    let owner = runner.host.identity.clone().unwrap().switch_to();
    let dir = BuildDir::create(owner).unwrap();
    let folders = dir.folders();
    fs::write(folders.input.join("wheel.txt"), "input").unwrap();
    let mut sandbox = SandboxInstall {
        runner: &runner,
        timeout_ms: 60_000,
        owner,
        disk_bytes: 1 << 30,
    };
    let py = |code: &str, args: &[&Path]| -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![PYTHON.into(), "-I".into(), "-c".into(), code.into()];
        argv.extend(args.iter().map(|p| p.as_os_str().to_owned()));
        argv
    };
    // Writable tree, readable input: the control.
    let ok = py(
        "import sys; open(sys.argv[1] + '/made', 'w').write(open(sys.argv[2] + '/wheel.txt').read())",
        &[&folders.tree, &folders.input],
    );
    sandbox.run_offline(&ok, &folders).unwrap();
    assert_eq!(
        fs::read_to_string(folders.tree.join("made")).unwrap(),
        "input"
    );
    // No socket of a network family can even be made (seccomp refuses
    // every family but AF_UNIX, in an empty network namespace), though
    // making one needs no network at all: on the host the same line works.
    for family in ["AF_INET", "AF_INET6", "AF_NETLINK"] {
        let code = format!(
            "import socket\nsocket.socket(socket.{family}, socket.SOCK_DGRAM)\nprint('made')"
        );
        let host = std::process::Command::new(PYTHON)
            .args(["-I", "-c", &code])
            .output()
            .unwrap();
        let made_on_host = host.status.success();
        let err = sandbox
            .run_offline(&py(&code, &[]), &folders)
            .expect_err("a network socket was made in the install step");
        assert!(err.contains("PermissionError"), "{family}: {err}");
        if family.starts_with("AF_INET") {
            assert!(made_on_host, "{family} on the host: {}", show(&host));
        }
    }
    // The input is read-only, whatever its modes.
    let write_input = py(
        "import sys; open(sys.argv[1] + '/planted', 'w')",
        &[&folders.input],
    );
    let err = sandbox.run_offline(&write_input, &folders).unwrap_err();
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!folders.input.join("planted").exists());
}
