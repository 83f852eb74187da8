//! The snapshot-root invariants (docs/packages.md) proven with the real binary
//! and real bubblewrap (invariants 2 and 3 are also covered by the
//! library tests and the escape suite).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use skill_runner_tests::*;

fn listing_inside(world: &World, skills: Vec<serde_json::Value>) -> Vec<String> {
    let (code, doc, _) = world.run_json(&json!({
        "argv": ["find", "/skills", "-printf", "%y %m %p\n"],
        "skills": skills,
    }));
    assert_eq!(code, 0, "{doc:#}");
    let mut lines: Vec<String> = doc["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// Invariant 1: exactly the selected packages and the manifest, no
/// unselected skill, no extra file, no symlink.
#[test]
fn sandbox_sees_exactly_the_selection() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let a = w.skill("alpha", &[("scripts/a.sh", b"echo a\n")]);
    let _unselected = w.skill("beta", &[("scripts/b.sh", b"echo b\n")]);
    let c = w.skill("gamma", &[("references/r.md", b"# r\n")]);
    let got = listing_inside(&w, vec![skill_ref("alpha", &a), skill_ref("gamma", &c)]);
    assert_eq!(
        got,
        [
            "d 555 /skills",
            "d 555 /skills/alpha",
            "d 555 /skills/alpha/scripts",
            "d 555 /skills/gamma",
            "d 555 /skills/gamma/references",
            "f 444 /skills/.sciencediscovery-snapshot.json",
            "f 444 /skills/alpha/SKILL.md",
            "f 444 /skills/alpha/scripts/a.sh",
            "f 444 /skills/gamma/SKILL.md",
            "f 444 /skills/gamma/references/r.md",
        ]
    );
}

/// Invariant 5: a runner killed at any moment leaves nothing a later
/// execution could use; the next start sweeps it.
#[test]
fn killed_runner_leaves_nothing_usable_and_is_swept() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let s = w.skill("slow", &[("assets/blob", &vec![7u8; 4 << 20])]);
    let job = w.job(
        "sleep",
        &json!({"argv": ["sleep", "30"], "skills": [skill_ref("slow", &s)]}),
    );
    let executions = w.data_dir().join("executions");
    for delay_ms in [0u64, 5, 20, 300] {
        let mut child = w
            .cmd()
            .arg("run")
            .arg(&job)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        // Whatever is left is unlocked, so the next runner removes it.
        let (code, doc, _) = w.run_json(&json!({"argv": ["true"]}));
        assert_eq!(code, 0, "{doc:#}");
        let left: Vec<_> = std::fs::read_dir(&executions).unwrap().collect();
        assert!(left.is_empty(), "after kill at {delay_ms} ms: {left:?}");
    }
}

/// Invariant 6: concurrent executions with the same selection never see
/// each other's extensions dir, workspace or /tmp.
#[test]
fn concurrent_executions_are_private() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let s = w.skill("shared", &[("scripts/x.sh", b"echo x\n")]);
    let script = "echo $TOKEN > /workspace/token; echo $TOKEN > /tmp/token; \
                  echo $TOKEN > $SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/token; sleep 0.3; \
                  cat /workspace/token /tmp/token $SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/token; \
                  ls /workspace /tmp $SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR | sort | tr '\\n' ' '";
    let started = Instant::now();
    let outs: Vec<(String, serde_json::Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let w = &w;
                let s = &s;
                scope.spawn(move || {
                    let token = format!("token-{i}");
                    let path = w.job(
                        &format!("job{i}"),
                        &json!({
                            "argv": ["sh", "-c", script],
                            "env": {"TOKEN": token},
                            "skills": [skill_ref("shared", s)],
                        }),
                    );
                    let out = w.cmd().args(["run", "--json"]).arg(path).output().unwrap();
                    (token, serde_json::from_slice(&out.stdout).unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(started.elapsed() < Duration::from_secs(120));
    for (token, doc) in outs {
        assert_eq!(doc["status"], "exited", "{doc:#}");
        let stdout = doc["stdout"].as_str().unwrap();
        assert_eq!(
            stdout.lines().take(3).collect::<Vec<_>>(),
            [token.as_str(); 3],
            "{doc:#}"
        );
        // Only this execution's files: the token, the .sciencediscovery
        // folder of the default extensions dir, nothing of the others.
        assert!(
            !stdout.contains("token-") || stdout.matches("token-").count() == 3,
            "{stdout}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(w.data_dir().join("executions"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Invariant 4 end to end: the source folder is edited after the job is
/// accepted; the sandbox sees the pinned bytes or the job is refused.
#[test]
fn source_edits_after_acceptance_are_not_observed() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let s = w.skill("edit", &[("data.txt", b"original\n")]);
    let pinned = skill_ref("edit", &s);
    // Edit after the pin was taken: the job must be refused, not run with
    // the new bytes.
    std::fs::write(s.join("data.txt"), "edited\n").unwrap();
    let (code, doc, _) = w.run_json(&json!({
        "argv": ["cat", "/skills/edit/data.txt"],
        "skills": [pinned],
    }));
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["status"], "rejected");
    assert_eq!(doc["error"]["kind"], "hash_mismatch");
    assert!(doc["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"edit\""));
}

/// Regression (found in the daemon's review): a command must not be able to
/// plant `.sciencediscovery/skill-extensions -> /some/host/dir` in its
/// workspace and get that host folder mounted writable by the next run.
#[test]
fn planted_extensions_symlink_is_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let ws = w.sandbox_folder("ws");
    let victim = w.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("precious"), "keep me\n").unwrap();
    // First run: the command replaces the default extensions dir with a
    // symlink to the victim folder (a path it cannot even see).
    let (code, doc, _) = w.run_json(&json!({
        "argv": ["sh", "-c", format!(
            "rm -rf /workspace/.sciencediscovery/skill-extensions && ln -s {} /workspace/.sciencediscovery/skill-extensions",
            victim.display()
        )],
        "workspace": ws,
    }));
    assert_eq!(code, 0, "{doc:#}");
    assert!(
        std::fs::symlink_metadata(ws.join(".sciencediscovery/skill-extensions"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Second run with the same workspace: refused, victim untouched.
    let (code, doc, _) = w.run_json(&json!({
        "argv": ["sh", "-c", "echo pwned > $SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/precious"],
        "workspace": ws,
    }));
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["status"], "rejected");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("symlink"),
        "{doc:#}"
    );
    assert_eq!(
        std::fs::read_to_string(victim.join("precious")).unwrap(),
        "keep me\n"
    );
}

/// A limit passed by the command itself is reported as
/// `limit_exceeded`, naming the limit (file size and CPU time, enforced by
/// rlimits, whose signals kill the command).
#[test]
fn rlimit_limits_are_reported_by_name() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (_, doc, _) = w.run_json(&json!({
        "argv": ["sh", "-c", "head -c 10485760 /dev/zero > /workspace/big"],
        "limits": {"file_size_bytes": 1048576},
    }));
    assert_eq!(doc["status"], "limit_exceeded", "{doc:#}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("file_size_bytes"),
        "{doc:#}"
    );
    assert_eq!(
        doc["limits"]["file_size_bytes"]["enforced_by"], "rlimit",
        "{doc:#}"
    );

    let (code, doc, _) = w.run_json(&json!({
        "argv": ["sh", "-c", "while :; do :; done"],
        "limits": {"cpu_ms": 1000, "timeout_ms": 20000},
    }));
    assert_eq!(doc["status"], "limit_exceeded", "{doc:#}");
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("cpu_ms"),
        "{doc:#}"
    );
    assert_ne!(
        code, 124,
        "the CPU limit, not the timeout, must end it: {doc:#}"
    );
}

/// A cwd that leaves the workspace through a symlink is refused
/// before anything runs.
#[test]
fn cwd_through_a_symlink_out_of_the_workspace_is_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let ws = w.path().join("ws");
    std::fs::create_dir_all(ws.join("inside")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.join("out")).unwrap();
    give_to_sandbox(&ws);
    let (code, doc, _) = w.run_json(&json!({"argv": ["pwd"], "workspace": ws, "cwd": "out"}));
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("leaves the workspace"),
        "{doc:#}"
    );
    // A real folder inside is fine, and is the cwd in the sandbox.
    let (code, doc, _) = w.run_json(&json!({"argv": ["pwd"], "workspace": ws, "cwd": "inside"}));
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["stdout"], "/workspace/inside\n", "{doc:#}");
}
