//! Retries and execution ids: a retry of the same job (keys in any order,
//! streamed, detached, or after it finished) gets the same execution, never
//! a second run; the id with another job is refused.

use std::sync::Arc;

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn a_reused_execution_id_with_another_job_is_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Arc::new(Daemon::start(&w, &[]));
    let r = d.post(
        "/v1/executions",
        &json!({"execution_id": "once", "argv": ["true"]}),
    );
    assert_eq!(r.status, 200);
    let msg = d
        .post(
            "/v1/executions",
            &json!({"execution_id": "once", "argv": ["false"]}),
        )
        .assert_error(409, "execution_id_in_use");
    assert!(
        msg.contains("once") && msg.contains("different job"),
        "{msg}"
    );

    // Also while the first is still running.
    let m = marker(4);
    let first = {
        let d = d.clone();
        let m = m.clone();
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"execution_id": "busy-id", "argv": ["sleep", m]}),
            )
        })
    };
    wait_until("the sandbox to start", || !processes_with(&m).is_empty());
    d.post(
        "/v1/executions",
        &json!({"execution_id": "busy-id", "argv": ["true"]}),
    )
    .assert_error(409, "execution_id_in_use");
    assert_eq!(d.delete("/v1/executions/busy-id").status, 202);
    assert_eq!(first.join().unwrap().json()["status"], "cancelled");
}

#[test]
fn a_retry_with_the_same_job_gets_the_same_execution() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Arc::new(Daemon::start(&w, &["--root", &roots]));
    let ws = workspace_in(&w, "retry");
    let job = gated_job("retry-1", &ws);
    let first = {
        let (d, job) = (d.clone(), job.clone());
        std::thread::spawn(move || d.post("/v1/executions", &job))
    };
    wait_until("the execution to run", || {
        d.get("/v1/executions/retry-1").json()["status"] == "running"
    });
    // The same job, keys in another order: waits for the same execution.
    let reordered = format!(
        r#"{{"argv": {}, "workspace": {}, "execution_id": "retry-1"}}"#,
        job["argv"], job["workspace"]
    );
    let second = {
        let d = d.clone();
        std::thread::spawn(move || {
            d.request(
                "POST",
                "/v1/executions",
                &[("Content-Type", "application/json")],
                reordered.as_bytes(),
            )
        })
    };
    let mut streamed = Lines::open(
        &d,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&job).unwrap(),
    );
    let detached = d.post("/v1/executions?wait=false", &job);
    assert_eq!(detached.status, 202);
    // A different job under the id is refused.
    let mut other = job.clone();
    other["argv"] = json!(["true"]);
    d.post("/v1/executions", &other)
        .assert_error(409, "execution_id_in_use");
    open_gate(&ws);
    let a = first.join().unwrap().json();
    let b = second.join().unwrap().json();
    assert_eq!(a["status"], "exited", "{a:#}");
    assert_eq!(a, b, "one execution, not two");
    let events = streamed.rest();
    assert_eq!(events.first().unwrap()["event"], "started");
    assert_eq!(events.last().unwrap()["result"], a);
    // After it finished: the retained result.
    let again = d.post("/v1/executions", &job);
    assert_eq!(again.status, 200);
    assert_eq!(again.json(), a);
    let listed = d.get("/v1/executions").json();
    let n = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["execution_id"] == "retry-1")
        .count();
    assert_eq!(n, 1, "{listed:#}");
}
