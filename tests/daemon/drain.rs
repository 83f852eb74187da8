//! A SIGTERM drains (docs/durability.md): the listener stays open, so
//! results, events and health (503 `draining`) are still answered while
//! new executions get 503 `shutting_down` with `Retry-After`; a running
//! execution that finishes within `--grace` has its result recorded and
//! fetchable after the restart; one still running past the grace is
//! cancelled, and that is recorded too.

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::{gated_job, open_gate, workspace_in, world_with_roots};

#[test]
fn a_drain_answers_reads_refuses_admissions_and_records_what_finishes() {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let args = ["--root", root.as_str(), "--grace", "60s"];
    let mut d = Daemon::start(&w, &args);
    let earlier = d.post(
        "/v1/executions",
        &json!({"execution_id": "earlier", "argv": ["echo", "before"]}),
    );
    assert_eq!(earlier.status, 200);
    let ws = workspace_in(&w, "drain");
    let job = gated_job("in-grace", &ws);
    assert_eq!(d.post("/v1/executions?wait=false", &job).status, 202);
    wait_until("the job runs", || {
        d.get("/v1/executions/in-grace").json()["status"] == "running"
    });
    let pid = d.pid() as i32;
    kill(pid, libc::SIGTERM);
    d.wait_for_line("the drain", |l| l.contains("shutting down"));

    // Health says it is draining.
    let health = d.get("/v1/health");
    assert_eq!(health.status, 503, "{:#}", health.json());
    assert_eq!(health.json()["status"], "draining");
    // Admissions are refused with a Retry-After, detached or not.
    for path in ["/v1/executions", "/v1/executions?wait=false"] {
        let r = d.post(path, &json!({"argv": ["true"]}));
        r.assert_error(503, "shutting_down");
        assert!(r.header("retry-after").is_some(), "no Retry-After");
    }
    // Reads are answered: a result, the running one's status and events.
    let again = d.get("/v1/executions/earlier");
    assert_eq!(again.status, 200);
    assert_eq!(again.body, earlier.body);
    assert_eq!(d.get("/v1/executions/in-grace").status, 202);
    let mut events = Lines::open(&d, "GET", "/v1/executions/in-grace/events", &[], b"");
    assert_eq!(events.next_event().unwrap()["event"], "started");

    // It finishes within the grace: its stream ends with its exit.
    open_gate(&ws);
    let rest = events.rest();
    let exit = rest.last().unwrap();
    assert_eq!(exit["event"], "exit", "{rest:?}");
    assert_eq!(exit["result"]["status"], "exited");
    let status = d.signal_and_wait(0);
    assert!(status.success(), "{status:?}\n{}", d.log());
    assert!(!d.log().contains("grace period over"), "{}", d.log());

    // Recorded before the exit: the next daemon answers with it.
    let mut d = Daemon::start(&w, &args);
    let r = d.get("/v1/executions/in-grace");
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["status"], "exited");
    assert_eq!(r.json()["stdout"], "waiting\nreleased\n");
    assert!(d.stop().success());
}

#[test]
fn past_the_grace_a_running_execution_is_cancelled_and_recorded() {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let args = ["--root", root.as_str(), "--grace", "1s"];
    let mut d = Daemon::start(&w, &args);
    let ws = workspace_in(&w, "past-grace");
    assert_eq!(
        d.post("/v1/executions?wait=false", &gated_job("too-long", &ws))
            .status,
        202
    );
    wait_until("the job runs", || {
        d.get("/v1/executions/too-long").json()["status"] == "running"
    });
    let status = d.stop();
    assert!(status.success(), "{status:?}");
    assert!(d.log().contains("grace period over"), "{}", d.log());
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());

    let mut d = Daemon::start(&w, &args);
    let r = d.get("/v1/executions/too-long");
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["status"], "cancelled", "{:#}", r.json());
    // Not interrupted: the drain recorded how it ended.
    assert!(!d.log().contains("interrupted=1"), "{}", d.log());
    assert!(d.stop().success());
}
