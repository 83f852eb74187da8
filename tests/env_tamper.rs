//! A stored environment changed on disk is refused before the command
//! starts, whatever the change (docs/environments.md, "The per-use
//! check"): a flipped byte, a removed, added or renamed-over file, a
//! changed mode. Each is made as the store's owner could, sealing modes
//! back where the change needed them open; the job is `rejected` (exit
//! 125, `hash_mismatch`) naming the change, and its command never runs.
//! A change that leaves every byte and mode as sealed (a `chmod` set back)
//! is re-hashed, found sound, and runs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use skill_runner_tests::*;

/// A small tree published with `env add`; `{id, hash}` and the stored tree.
fn published(world: &World) -> (Value, PathBuf) {
    let dir = world.path().join("src");
    fs::create_dir_all(dir.join("python/greet")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("python/greet/__init__.py"), "WORD = 'hello'\n").unwrap();
    fs::write(dir.join("python/greet/py.typed"), "").unwrap();
    fs::write(dir.join("bin/greet"), "#!/bin/sh\necho hello\n").unwrap();
    fs::set_permissions(dir.join("bin/greet"), fs::Permissions::from_mode(0o755)).unwrap();
    let out = output_within(
        world
            .cmd()
            .args(["env", "add"])
            .arg(&dir)
            .args(["--id", "greet"]),
        HANG_GUARD,
    );
    assert!(out.status.success(), "{}", show(&out));
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tree = world
        .data_dir()
        .join("environments/trees")
        .join(rec["hash"].as_str().unwrap())
        .join("tree");
    (json!({"id": rec["id"], "hash": rec["hash"]}), tree)
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `change` with `folder` (of the stored tree) opened for writing
/// and sealed again afterwards, as the store's owner would.
fn in_open_folder(folder: &Path, change: impl FnOnce()) {
    set_mode(folder, 0o755);
    change();
    set_mode(folder, 0o555);
}

type Tamper = fn(&Path);

const TAMPERS: &[(&str, Tamper, &str)] = &[
    (
        "a flipped byte",
        |t| {
            let f = t.join("python/greet/__init__.py");
            set_mode(&f, 0o644);
            let mut bytes = fs::read(&f).unwrap();
            bytes[3] ^= 1;
            fs::write(&f, bytes).unwrap();
            set_mode(&f, 0o444);
        },
        "the bytes of \"python/greet/__init__.py\" changed",
    ),
    (
        "a removed file",
        |t| {
            let folder = t.join("python/greet");
            in_open_folder(&folder, || {
                fs::remove_file(folder.join("py.typed")).unwrap()
            });
        },
        "\"python/greet/py.typed\" is missing",
    ),
    (
        "an added file",
        |t| {
            let folder = t.join("python/greet");
            in_open_folder(&folder, || {
                fs::write(folder.join("evil.py"), "import os\n").unwrap();
                set_mode(&folder.join("evil.py"), 0o444);
            });
        },
        "were added",
    ),
    (
        "a file replaced by rename",
        |t| {
            let folder = t.join("python/greet");
            in_open_folder(&folder, || {
                let new = folder.join(".new");
                fs::write(&new, "WORD = 'hellp'\n").unwrap();
                set_mode(&new, 0o444);
                fs::rename(&new, folder.join("__init__.py")).unwrap();
            });
        },
        "the bytes of \"python/greet/__init__.py\" changed",
    ),
    (
        "a file made writable",
        |t| set_mode(&t.join("python/greet/__init__.py"), 0o644),
        "\"python/greet/__init__.py\" has mode 644, not the sealed 444",
    ),
    (
        "an executable bit taken away",
        |t| set_mode(&t.join("bin/greet"), 0o444),
        "\"bin/greet\" was an executable file and is now a file",
    ),
];

#[test]
fn every_kind_of_change_to_a_stored_environment_is_refused_before_the_command_starts() {
    if !require_sandbox() {
        return;
    }
    for (what, tamper, needle) in TAMPERS {
        let world = World::new();
        let (env, tree) = published(&world);
        let ws = world.sandbox_folder("ws");
        let job = json!({
            "argv": ["/bin/sh", "-c", "echo ran > /workspace/ran"],
            "workspace": ws,
            "environment": env,
        });
        // Sound first: the job runs (so a refusal below is the change's).
        let (code, doc, out) = world.run_json(&job);
        assert_eq!(code, 0, "{what}: {}", show(&out));
        assert_eq!(doc["status"], "exited", "{what}: {doc}");
        fs::remove_file(ws.join("ran")).unwrap();

        tamper(&tree);
        let (code, doc, out) = world.run_json(&job);
        assert_eq!(code, 125, "{what}: {}", show(&out));
        assert_eq!(doc["status"], "rejected", "{what}: {doc}");
        assert_eq!(doc["error"]["kind"], "hash_mismatch", "{what}: {doc}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{what}: {needle:?} not in {message}"
        );
        assert!(!ws.join("ran").exists(), "{what}: the command ran");
    }
}

#[test]
fn a_mode_changed_and_set_back_is_re_hashed_and_runs() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let (env, tree) = published(&world);
    let ws = world.sandbox_folder("ws");
    let f = tree.join("python/greet/__init__.py");
    set_mode(&f, 0o644);
    set_mode(&f, 0o444);
    let (code, doc, out) = world.run_json(&json!({
        "argv": ["/bin/sh", "-c", "cat /opt/skill-env/python/greet/__init__.py"],
        "workspace": ws,
        "environment": env,
    }));
    assert_eq!(code, 0, "{}", show(&out));
    assert_eq!(doc["stdout"], "WORD = 'hello'\n", "{doc}");
}
