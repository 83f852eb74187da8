//! Cancellation: a client that disconnects cancels its execution, and DELETE
//! cancels by id; either way no sandboxed process and no execution folder
//! is left.

use std::sync::Arc;

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn a_client_that_disconnects_cancels_its_execution() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    for (n, stream) in [(1, false), (2, true)] {
        let m = marker(n);
        let id = format!("leaver-{n}");
        let mut conn = d.connect();
        let accept: &[(&str, &str)] = if stream {
            &[("Accept", "application/x-ndjson")]
        } else {
            &[]
        };
        send(
            &mut conn,
            "POST",
            "/v1/executions",
            accept,
            &serde_json::to_vec(&json!({"execution_id": id, "argv": ["sleep", m]})).unwrap(),
            None,
        );
        wait_until("the sandbox to start", || !processes_with(&m).is_empty());
        drop(conn);
        wait_until("the sandbox to be killed", || processes_with(&m).is_empty());
        wait_until("the result to be retained", || {
            d.get(&format!("/v1/executions/{id}")).status == 200
        });
        let doc = d.get(&format!("/v1/executions/{id}")).json();
        assert_eq!(doc["status"], "cancelled", "{doc:#}");
    }
    wait_until("execution folders to be removed", || {
        w.executions_left().is_empty()
    });
}

#[test]
fn delete_cancels_by_id_and_leaves_no_process() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Arc::new(Daemon::start(&w, &[]));
    let m = marker(3);
    let client = {
        let d = d.clone();
        let m = m.clone();
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"execution_id": "victim", "argv": ["sh", "-c", format!("sleep {m}; echo never")]}),
            )
        })
    };
    wait_until("the sandbox to start", || !processes_with(&m).is_empty());
    let r = d.get("/v1/executions/victim");
    assert_eq!(r.status, 202);
    assert_eq!(r.json()["status"], "running");

    let r = d.delete("/v1/executions/victim");
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let answer = client.join().unwrap();
    assert_eq!(answer.status, 200);
    let doc = answer.json();
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    assert_eq!(doc["stdout"], "");
    wait_until("the sandbox to be gone", || processes_with(&m).is_empty());
    assert_eq!(d.get("/v1/executions/victim").json()["status"], "cancelled");
    d.delete("/v1/executions/victim")
        .assert_error(409, "not_running");
    d.delete("/v1/executions/nobody")
        .assert_error(404, "not_found");
    d.get("/v1/executions/nobody")
        .assert_error(404, "not_found");
    wait_until("execution folders to be removed", || {
        w.executions_left().is_empty()
    });
}
