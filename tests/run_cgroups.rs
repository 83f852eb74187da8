//! The `run`s of one data dir share their cgroups (docs/sandbox.md, "`run`s
//! share their cgroups"), proven with the real binary: one after another
//! they lease the same slot, two at once never the same one, and each has
//! its own job's limits. Where no cgroup can be used it is skipped.

use std::time::{Duration, Instant};

use serde_json::json;
use skill_runner_tests::*;

/// The slot lock files `<data>/cgroups/run-<n>`, sorted.
fn slots(w: &World) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(w.data_dir().join("cgroups"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("run-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn runs_one_after_another_share_one_cgroup_and_runs_at_once_never_one() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (code, doc, _) = w.run_json(&json!({"argv": ["/bin/true"], "limits": {"pids": 32}}));
    assert_eq!(code, 0, "{doc:#}");
    let by = doc["limits"]["pids"]["enforced_by"].as_str().unwrap_or("");
    if !by.starts_with("cgroup") {
        skip(format!("no cgroup here (pids held by {by:?})"));
        return;
    }
    let (code, doc, _) = w.run_json(&json!({"argv": ["/bin/true"], "limits": {"pids": 64}}));
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        slots(&w),
        ["run-0"],
        "a second run made a cgroup of its own"
    );

    // A run that holds its slot until told to end.
    let ws = w.sandbox_folder("ws");
    let held = w.job(
        "held",
        &json!({
            "argv": ["sh", "-c", "touch /workspace/started; while [ ! -e /workspace/go ]; do sleep 0.02; done"],
            "workspace": ws,
        }),
    );
    let mut first = w
        .cmd()
        .args(["run", "--json"])
        .arg(&held)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let since = Instant::now();
    while !ws.join("started").exists() {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the held run never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Meanwhile another run, with other limits: another slot, its limits.
    let (code, doc, _) =
        w.run_json(&json!({"argv": ["sh", "-c", "echo ok"], "limits": {"pids": 8}}));
    std::fs::write(ws.join("go"), b"").unwrap();
    let status = first.wait().unwrap();
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["stdout"], "ok\n");
    assert_eq!(doc["limits"]["pids"]["value"], 8);
    assert!(status.success(), "the held run failed: {status}");
    assert_eq!(
        slots(&w),
        ["run-0", "run-1"],
        "two runs at once leased one cgroup, or a third was made"
    );
}
