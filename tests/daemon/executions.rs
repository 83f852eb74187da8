//! Executions: many at once stay correct and isolated, a reused cgroup
//! starts every execution afresh (and one removed while idle is replaced),
//! a detached run outlives its client and is long-polled, and executions
//! are listed newest first, filtered and paged.

use std::io::BufReader;
use std::sync::Arc;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn fifty_parallel_executions_are_correct_and_isolated() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let dir = w.skill("iso", &[("data.txt", b"shared bytes\n")]);
    let (bundle, binding) = bundle_of("iso", &dir);
    let d = Daemon::start(&w, &["--root", &roots, "--max-queued", "64"]);
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    let by_path = skill_ref("iso", &dir);

    let script = "echo $TAG > /tmp/mine; echo $TAG > /workspace/mine; \
                  echo $TAG > /skill-extensions/mine; sleep 0.2; \
                  ls -A /tmp; ls /workspace; ls -A /skill-extensions; \
                  cat /tmp/mine /workspace/mine /skill-extensions/mine /skills/iso/data.txt";
    let d = Arc::new(d);
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let d = d.clone();
            // Half name the skill by binding alone, half by path.
            let skill = if i % 2 == 0 {
                binding.clone()
            } else {
                by_path.clone()
            };
            std::thread::spawn(move || {
                let r = d.post(
                    "/v1/executions",
                    &json!({
                        "execution_id": format!("par-{i}"),
                        "argv": ["sh", "-c", script],
                        "env": {"TAG": format!("tag{i}")},
                        "skills": [skill],
                    }),
                );
                (i, r.status, r.json())
            })
        })
        .collect();
    for h in handles {
        let (i, status, doc) = h.join().unwrap();
        assert_eq!(status, 200, "{doc:#}");
        assert_eq!(doc["status"], "exited", "{i}: {doc:#}");
        assert_eq!(doc["execution_id"], format!("par-{i}"));
        assert_eq!(
            doc["stdout"].as_str().unwrap(),
            format!("mine\nmine\nmine\ntag{i}\ntag{i}\ntag{i}\nshared bytes\n"),
            "{i}: {doc:#}"
        );
    }
    let metrics = String::from_utf8(d.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("skill_runner_executions_total{status=\"exited\"} 50\n"),
        "{metrics}"
    );
}

#[test]
fn reused_cgroups_start_every_execution_afresh() {
    // The daemon keeps execution cgroups for reuse. With one execution at a
    // time, each of these gets the cgroup the previous one used: a limit
    // hit must not be blamed on the next execution, limits must be the
    // job's own, and the reported peak must be the execution's own.
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let ws = w.path().join("roots/ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::copy(probe_bin(), ws.join("probe")).unwrap();
    give_to_sandbox(&ws);
    let d = Daemon::start(&w, &["--root", &roots, "--max-running", "1"]);
    let run = |args: &[&str], limits: Value| -> Value {
        let mut argv = vec!["/workspace/probe"];
        argv.extend_from_slice(args);
        let r = d.post(
            "/v1/executions",
            &json!({"argv": argv, "workspace": ws, "limits": limits}),
        );
        assert_eq!(r.status, 200, "{:#}", r.json());
        r.json()
    };
    let first = run(&["exit", "0"], json!({"pids": 64}));
    for limit in ["memory_bytes", "pids"] {
        let by = first["limits"][limit]["enforced_by"].as_str().unwrap_or("");
        assert_cgroup_mechanism(by, &format!("{first:#}"));
    }
    if first["limits"]["pids"]["enforced_by"] == "none" {
        skip("no cgroup enforces the pids limit here");
        return;
    }
    let bomb = run(
        &["fork-bomb", "3"],
        json!({"pids": 64, "timeout_ms": 20000}),
    );
    assert_eq!(bomb["status"], "limit_exceeded", "{bomb:#}");
    let after_bomb = run(&["exit", "0"], json!({"pids": 64}));
    assert_eq!(after_bomb["status"], "exited", "{after_bomb:#}");

    let hog = run(
        &["mem-bomb", "2048"],
        json!({"memory_bytes": 128 << 20, "timeout_ms": 20000}),
    );
    assert_eq!(hog["status"], "limit_exceeded", "{hog:#}");
    assert!(
        hog["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory_bytes"),
        "{hog:#}"
    );
    let after_hog = run(&["exit", "0"], json!({"memory_bytes": 1 << 30}));
    assert_eq!(after_hog["status"], "exited", "{after_hog:#}");
    let peak = after_hog["usage"]["max_rss_bytes"].as_u64().unwrap();
    assert!(
        peak < 64 << 20,
        "the peak of the hog carried over: {after_hog:#}"
    );

    // The job's own (lower) limit holds in a cgroup that had a higher one.
    let low = run(
        &["mem-bomb", "2048"],
        json!({"memory_bytes": 64 << 20, "timeout_ms": 20000}),
    );
    assert_eq!(low["status"], "limit_exceeded", "{low:#}");
}

/// The folders of the pooled cgroup `name` (`<owner>+<n>`) in every
/// mounted hierarchy.
fn pooled_cgroup(owner: &str, name: &str) -> Vec<std::path::PathBuf> {
    pooled_cgroups(&[owner.to_owned()])
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == name))
        .collect()
}

/// An idle cgroup of the pool can be removed from outside (another data
/// dir's daemon sweeps empty cgroups it takes for abandoned): the next
/// execution gets a new one and runs, instead of joining folders that are
/// gone and failing with `sandbox_unavailable`.
#[test]
fn a_pooled_cgroup_removed_while_idle_is_replaced() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--max-running", "1"]);
    let run = || {
        let r = d.post(
            "/v1/executions",
            &json!({"argv": ["/bin/true"], "limits": {"pids": 64}}),
        );
        assert_eq!(r.status, 200, "{:#}", r.json());
        r.json()
    };
    let first = run();
    assert_eq!(first["status"], "exited", "{first:#}");
    let by = first["limits"]["pids"]["enforced_by"]
        .as_str()
        .unwrap_or("");
    assert_cgroup_mechanism(by, &format!("{first:#}"));
    if !by.starts_with("cgroup") {
        skip("no cgroup enforces the pids limit here");
        return;
    }
    // The pool names its cgroups `<owner>+<n>` after its folder in
    // `<data>/cgroups/`.
    let owner = cgroup_owners(&w)
        .pop()
        .expect("the daemon's cgroup owner folder");
    let folders = pooled_cgroup(&owner, &format!("{owner}+0"));
    assert!(!folders.is_empty(), "no pooled cgroup {owner}+0 found");
    for f in &folders {
        std::fs::remove_dir(f).unwrap_or_else(|e| panic!("rmdir {}: {e}", f.display()));
    }
    for _ in 0..2 {
        let next = run();
        assert_eq!(next["status"], "exited", "{next:#}");
        assert!(
            next["limits"]["pids"]["enforced_by"]
                .as_str()
                .unwrap_or("")
                .starts_with("cgroup"),
            "{next:#}"
        );
    }
    assert!(
        !pooled_cgroup(&owner, &format!("{owner}+1")).is_empty(),
        "no new cgroup was made in place of the removed one"
    );
}

#[test]
fn a_detached_run_survives_its_client_and_is_long_polled() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "detached");
    // The client leaves as soon as the answer begins.
    let mut conn = d.connect();
    send(
        &mut conn,
        "POST",
        "/v1/executions?wait=false",
        &[],
        &serde_json::to_vec(&gated_job("detached-1", &ws)).unwrap(),
        None,
    );
    let mut r = BufReader::new(conn);
    assert_eq!(read_head(&mut r).0, 202);
    drop(r);
    let r = d.post("/v1/executions?wait=false", &gated_job("detached-2", &ws));
    assert_eq!(r.status, 202, "{:#}", r.json());
    assert_eq!(r.header("location"), Some("/v1/executions/detached-2"));
    let doc = r.json();
    assert_eq!(doc["execution_id"], "detached-2");
    assert!(
        doc["status"] == "queued" || doc["status"] == "running",
        "{doc:#}"
    );
    // While the gate is shut, a long-poll times out with the status.
    let r = d.get("/v1/executions/detached-1?wait=200ms");
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["status"] == "running" || r.json()["status"] == "queued");
    open_gate(&ws);
    for id in ["detached-1", "detached-2"] {
        let r = d.get(&format!("/v1/executions/{id}?wait=60s"));
        let doc = r.json();
        assert_eq!(r.status, 200, "{doc:#}");
        assert_eq!(doc["status"], "exited", "{doc:#}");
        assert_eq!(doc["stdout"], "waiting\nreleased\n", "{doc:#}");
    }
    d.get("/v1/executions/detached-1?wait=soon")
        .assert_error(400, "bad_request");
    d.post("/v1/executions?wait=maybe", &json!({"argv": ["true"]}))
        .assert_error(400, "bad_request");
}

#[test]
fn executions_are_listed_newest_first_filtered_and_paged() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    for (id, code) in [("l-1", 0), ("l-2", 3), ("l-3", 0)] {
        let r = d.post(
            "/v1/executions",
            &json!({"execution_id": id, "argv": ["sh", "-c", format!("exit {code}")]}),
        );
        assert_eq!(r.status, 200);
    }
    let ids = |v: &Value| -> Vec<String> {
        v["executions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["execution_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = d.get("/v1/executions").json();
    assert_eq!(ids(&all), ["l-3", "l-2", "l-1"]);
    assert_eq!(all["next_cursor"], Value::Null);
    assert_eq!(all["executions"][1]["exit_code"], 3);
    assert_eq!(all["executions"][1]["status"], "exited");
    let page = d.get("/v1/executions?limit=2").json();
    assert_eq!(ids(&page), ["l-3", "l-2"]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let next = d
        .get(&format!("/v1/executions?limit=2&cursor={cursor}"))
        .json();
    assert_eq!(ids(&next), ["l-1"]);
    assert_eq!(next["next_cursor"], Value::Null);
    assert_eq!(ids(&d.get("/v1/executions?status=exited").json()).len(), 3);
    assert!(ids(&d.get("/v1/executions?status=running").json()).is_empty());
    assert!(ids(&d.get("/v1/executions?status=cancelled").json()).is_empty());
    for bad in [
        "status=done",
        "limit=0",
        "limit=x",
        "cursor=abc",
        "colour=red",
    ] {
        d.get(&format!("/v1/executions?{bad}"))
            .assert_error(400, "bad_request");
    }
}
