//! pip's configuration is the runner's own setting, but the fetch
//! sandbox of `env build` still refuses to bind a path it names that is
//! the runner's state: the data dir, a folder inside or above it, or `/`
//! (docs/environments.md, "The fetch sandbox"). The build stops before
//! the fetch with one sentence naming the path.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use skill_runner_tests::envs::{env_build, SIX};
use skill_runner_tests::*;

#[test]
fn a_pip_configuration_naming_the_data_dir_or_the_root_is_refused_before_the_fetch() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let lock = world.path().join("requirements.txt");
    fs::write(&lock, SIX).unwrap();
    // A stand-in for pip that would say it ran.
    let program = world.path().join("fake-pip");
    fs::write(&program, "#!/bin/sh\necho FETCH-RAN >&2\nexit 3\n").unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let _ = world.cmd().args(["env", "list"]).output().unwrap();
    let data = world.data_dir();
    let inside = data.join("store");
    for (named, said) in [
        (data.to_str().unwrap(), "inside the runner's data dir"),
        (inside.to_str().unwrap(), "inside the runner's data dir"),
        ("/", "the root of the file system"),
    ] {
        let out = env_build(
            &world,
            &lock,
            "probe",
            &[
                ("SKILL_RUNNER_FETCH_PROGRAM", program.to_str().unwrap()),
                ("PIP_FIND_LINKS", named),
            ],
        );
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{}", show(&out));
        assert!(!err.contains("FETCH-RAN"), "the fetch ran: {}", show(&out));
        assert!(err.contains(said) && err.contains(named), "{}", show(&out));
        assert!(err.contains("pip's configuration"), "{}", show(&out));
    }
}
