//! `explain --fds-dir` writes what a launch hands the sandbox on its
//! descriptors, byte for byte: the seccomp programs (compiled for the
//! host identity a launch has, root-mapped or not) and the account files.
//!
//! What a launch loads is seen through `run --keep`: the runner then also
//! writes the bytes of every memfd it hands bubblewrap, read back from
//! the memfd itself, into `<data>/executions/<id>.<random>/fds/`, under
//! the names `explain --fds-dir` uses (docs/sandbox.md). `scripts/test`
//! runs this binary as root and again inside `unshare --user
//! --map-root-user`, where the sandbox's uid is root of the parent user
//! namespace and the seccomp rules carry the root-mapped denials.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use skill_runner_tests::*;

/// The files of `dir`, by name (the shim left out: a launch hands over
/// the binary it carries, which `--keep` does not copy).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(name, _)| name != "8-shim")
        .map(|(name, path)| (name, std::fs::read(path).unwrap()))
        .collect()
}

/// The `fds` folder of the one kept execution of `world`.
fn kept_fds(world: &World) -> std::path::PathBuf {
    let kept: Vec<_> = std::fs::read_dir(world.data_dir().join("executions"))
        .unwrap()
        .map(|e| e.unwrap().path().join("fds"))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(kept.len(), 1, "one kept execution: {kept:?}");
    kept.into_iter().next().unwrap()
}

/// Runs `job` with `--keep`, explains it with `--fds-dir`, and compares.
fn launch_and_explanation_agree(job: Value) {
    let world = World::new();
    let path = world.job("job", &job);
    let path = path.to_str().unwrap();
    let ran = output(world.cmd().args(["run", "--keep", path]));
    assert_eq!(ran.status.code(), Some(0), "{}", show(&ran));
    let launched = files(&kept_fds(&world));

    let dir = world.path().join("explained");
    let explained = output(world.cmd().args([
        "explain",
        "--json",
        "--fds-dir",
        dir.to_str().unwrap(),
        path,
    ]));
    assert_eq!(explained.status.code(), Some(0), "{}", show(&explained));
    let doc: Value = serde_json::from_slice(&explained.stdout).unwrap();
    let explained = files(&dir);

    let names: Vec<&String> = launched.keys().collect();
    // One seccomp program, the guard merged into the rules.
    assert!(
        names.iter().any(|n| *n == "3-seccomp-rules.bpf")
            && !names.iter().any(|n| n.starts_with("4-")),
        "the launch's seccomp program: {names:?}"
    );
    assert_eq!(
        launched.keys().collect::<Vec<_>>(),
        explained.keys().collect::<Vec<_>>(),
        "the same descriptors"
    );
    for (name, bytes) in &launched {
        assert!(
            explained[name] == *bytes,
            "{name} differs between the launch and explain --fds-dir"
        );
    }
    // explain names each file it wrote among the descriptors.
    for name in launched.keys() {
        let fd = name.split('-').next().unwrap();
        assert!(
            doc["fds"].get(fd).is_some(),
            "fd {fd} not explained: {doc:#}"
        );
    }

    // On a root-mapped host (the nested run) the programs are not those
    // of an ordinary identity: the comparison above proves the root-mapped
    // denials are explained.
    let identity = skill_runner::sandbox::identity::detect().unwrap();
    let parsed =
        skill_runner::exec::job::Job::from_json(&serde_json::to_vec(&job).unwrap(), None).unwrap();
    let ordinary =
        skill_runner::sandbox::seccomp::compile(&parsed.profile, parsed.network.mode()).unwrap();
    assert_eq!(
        launched["3-seccomp-rules.bpf"] == ordinary.rules,
        !identity.root_mapped,
        "root_mapped = {}: the rules must carry the root-mapped denials exactly then",
        identity.root_mapped
    );
}

fn output(cmd: &mut std::process::Command) -> std::process::Output {
    cmd.output().expect("run skill-runner")
}

#[test]
fn explain_fds_dir_writes_the_seccomp_programs_a_launch_loads() {
    if !require_sandbox() {
        return;
    }
    launch_and_explanation_agree(json!({"argv": ["true"]}));
}

#[test]
fn explain_fds_dir_agrees_with_a_launch_with_a_network_allowlist() {
    // Another seccomp program (the allowlist's socket rules), another shim.
    if !require_sandbox() {
        return;
    }
    launch_and_explanation_agree(json!({
        "argv": ["true"],
        "network": {"allow": ["example.org"]},
    }));
}
