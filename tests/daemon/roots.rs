//! A job reaches only folders under the daemon's roots: host paths outside
//! them (also through symlinks and `..`) are refused, no piece of the
//! runner's state can be named, a root forged inside a job's folder is never
//! used, and a folder swapped for a symlink while its job waits is not
//! mounted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn host_paths_outside_the_roots_are_refused() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let outside = w.skill("outside", &[]);
    // Skills outside the roots: move this one out of the skills root.
    let elsewhere = w.path().join("elsewhere");
    std::fs::rename(&outside, &elsewhere).unwrap();
    let d = Daemon::start(&w, &["--root", &roots]);
    let root = w.path().join("roots").canonicalize().unwrap();
    let refused = |job: Value| -> String {
        d.post("/v1/executions", &job)
            .assert_error(403, "path_not_allowed")
    };
    let msg = refused(json!({"argv": ["true"], "workspace": "/etc"}));
    assert!(msg.contains("/etc") && msg.contains("roots"), "{msg}");
    refused(json!({"argv": ["true"], "extensions_dir": "/etc"}));
    refused(json!({"argv": ["true"], "skills": [skill_ref("outside", &elsewhere)]}));
    // A symlink under a root that leads out of it.
    std::os::unix::fs::symlink("/etc", root.join("sneaky")).unwrap();
    refused(json!({"argv": ["true"], "workspace": root.join("sneaky")}));
    refused(json!({"argv": ["true"], "workspace": root.join("sneaky/sub")}));
    // `..` is refused outright.
    let msg = d
        .post(
            "/v1/executions",
            &json!({"argv": ["true"], "workspace": format!("{}/../../etc", root.display())}),
        )
        .assert_error(403, "path_not_allowed");
    assert!(msg.contains(".."), "{msg}");
    // A workspace where an earlier command planted a symlink at the
    // default extensions dir.
    let ws = root.join("planted");
    std::fs::create_dir_all(ws.join(".sciencediscovery")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.join(".sciencediscovery/skill-extensions")).unwrap();
    let msg = refused(json!({"argv": ["true"], "workspace": ws}));
    assert!(msg.contains("extensions_dir"), "{msg}");
    assert!(!Path::new("/etc/skill-extensions").exists());

    // Under the roots, a named workspace must exist: refused, not
    // created.
    let missing = root.join("missing/ws");
    let msg = d
        .post(
            "/v1/executions",
            &json!({"argv": ["true"], "workspace": missing}),
        )
        .assert_error(400, "bad_job");
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(!root.join("missing").exists());

    // Under the roots, it runs and writes where it was told.
    let ws = root.join("ok/ws");
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&ws);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "-c", "echo hi > /workspace/out"], "workspace": ws}),
    );
    assert_eq!(r.json()["status"], "exited", "{:#}", r.json());
    assert_eq!(std::fs::read_to_string(ws.join("out")).unwrap(), "hi\n");
}

/// The published root of a fresh one-skill selection, after one run.
fn publish_one(d: &Daemon, w: &World) -> (Value, PathBuf) {
    let skill = w.skill("p", &[("scripts/run.sh", b"echo pinned\n")]);
    let mut pin = skill_ref("p", &skill);
    pin.as_object_mut().unwrap().remove("path");
    let bundle = Command::new(runner_bin())
        .args([
            "pack",
            skill.to_str().unwrap(),
            "--id",
            "p",
            "--revision",
            "1",
            "--version",
            "1.0.0",
        ])
        .output()
        .unwrap();
    let bundle: Value = serde_json::from_slice(&bundle.stdout).unwrap();
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "/skills/p/scripts/run.sh"], "skills": [pin]}),
    );
    let doc = r.json();
    assert_eq!(doc["stdout"], "pinned\n", "{doc:#}");
    let identity = doc["skills"]["identity"].as_str().unwrap().to_owned();
    let root = w.data_dir().join("published").join(identity);
    assert!(
        root.join("skills/p/scripts/run.sh").is_file(),
        "{}",
        root.display()
    );
    (pin, root)
}

#[test]
fn a_daemon_job_can_name_no_piece_of_the_runner_state() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (_, root) = publish_one(&d, &w);
    let data = w.data_dir().canonicalize().unwrap();
    let state = [
        root.join("skills"),
        root.clone(),
        data.join("published"),
        data.join("store"),
        data.join("executions"),
        data.clone(),
        data.parent().unwrap().to_owned(),
    ];
    for dir in &state {
        for field in ["workspace", "extensions_dir"] {
            let msg = d
                .post("/v1/executions", &json!({"argv": ["true"], field: dir}))
                .assert_error(403, "path_not_allowed");
            assert!(
                msg.contains("outside the daemon's roots"),
                "{field} {}: {msg}",
                dir.display()
            );
        }
    }
    // The published root is as it was published.
    let script = std::fs::read_to_string(root.join("skills/p/scripts/run.sh")).unwrap();
    assert_eq!(script, "echo pinned\n");
    // A root overlapping the state is refused at start.
    for bad in [
        data.clone(),
        data.join("published"),
        data.join("store"),
        data.parent().unwrap().to_owned(),
    ] {
        let err = Daemon::try_start(
            &w,
            &[
                "--root",
                bad.to_str().unwrap(),
                "--socket",
                w.path().join("x.sock").to_str().unwrap(),
            ],
        )
        .err()
        .unwrap_or_else(|| panic!("started with root {}", bad.display()));
        assert!(err.contains("overlaps the data dir"), "{err}");
    }
}

#[test]
fn a_root_forged_under_the_job_root_is_never_used() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (pin, root) = publish_one(&d, &w);
    let identity = root.file_name().unwrap().to_str().unwrap().to_owned();
    // The job root is the workspace: forge a root for the identity there,
    // and one whose skills folder leads to the host's /.
    let jobs = w.data_dir().join("roots");
    give_to_sandbox(&jobs);
    let forge = format!(
        "mkdir -p {identity}/skills/p/scripts && echo 'echo forged' > {identity}/skills/p/scripts/run.sh && echo '{{}}' > {identity}/meta.json && mkdir -p x && ln -s / x/skills && echo done"
    );
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "-c", forge], "workspace": jobs}),
    );
    assert_eq!(r.json()["stdout"], "done\n", "{:#}", r.json());
    // Evict everything idle, then run the selection again.
    std::fs::remove_dir_all(&root).ok();
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "/skills/p/scripts/run.sh"], "skills": [pin]}),
    );
    assert_eq!(r.json()["stdout"], "pinned\n", "{:#}", r.json());
    assert!(jobs
        .join(&identity)
        .join("skills/p/scripts/run.sh")
        .exists());
}

#[test]
fn a_folder_swapped_while_its_job_is_queued_is_not_mounted() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let root = w.path().join("roots").canonicalize().unwrap();
    let ws = root.join("b/x");
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&root.join("b"));
    let outside = w.path().join("outside/x");
    std::fs::create_dir_all(&outside).unwrap();
    give_to_sandbox(&w.path().join("outside"));
    let d = Arc::new(Daemon::start(&w, &["--root", &roots, "--max-running", "1"]));
    // The first job holds the only run slot while the second waits.
    let first = {
        let d = d.clone();
        std::thread::spawn(move || d.post("/v1/executions", &json!({"argv": ["sleep", "3"]})))
    };
    std::thread::sleep(Duration::from_millis(500));
    let second = {
        let (d, ws) = (d.clone(), ws.clone());
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"argv": ["sh", "-c", "echo planted > /workspace/planted"], "workspace": ws}),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // Checked and admitted; now `b` becomes a symlink out of the roots.
    std::fs::rename(root.join("b"), root.join("b-real")).unwrap();
    std::os::unix::fs::symlink(w.path().join("outside"), root.join("b")).unwrap();
    assert_eq!(first.join().unwrap().status, 200);
    let r = second.join().unwrap();
    let doc = r.json();
    assert!(
        !outside.join("planted").exists(),
        "mounted a folder outside the roots: {doc:#}"
    );
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed since it was checked"),
        "{doc:#}"
    );
}

/// A name of the data dir made after the daemon opened it (a bind mount
/// of it under a root, as a volume mounted later would be) is no name
/// the daemon's views know: the folders are known by what they are, so
/// its store, its state and the data dir itself are refused as job
/// folders all the same, and the job root under that name is not.
#[test]
fn the_data_dir_under_a_name_mounted_after_the_start_is_refused_as_a_job_folder() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    // The daemon in a mount namespace of its own, where the test mounts.
    let daemon = Daemon::command(&w, &["--root", &roots]);
    let d = match Daemon::spawn_unshared(&daemon) {
        Ok(d) => d,
        Err(log) => {
            skip(format!("no mount namespace for the daemon here: {log}"));
            return;
        }
    };
    let data = w.data_dir().canonicalize().unwrap();
    let mirror = w.path().join("roots").join("mirror");
    std::fs::create_dir(&mirror).unwrap();
    d.bind_in_its_namespace(&data, &mirror);
    for sub in ["", "store", "state", "keys"] {
        let ws = mirror.join(sub);
        let msg = d
            .post("/v1/executions", &json!({"argv": ["ls"], "workspace": ws}))
            .assert_error(400, "bad_job");
        assert!(
            msg.contains("is inside the runner's data dir"),
            "{sub}: {msg}"
        );
    }
    // Its job root is for jobs, under any name.
    let jobs = data.join("roots").join("ws");
    std::fs::create_dir_all(&jobs).unwrap();
    give_to_sandbox(&jobs);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["true"], "workspace": mirror.join("roots/ws")}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["status"], "exited", "{:#}", r.json());
}
