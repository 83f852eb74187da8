//! Refusals say what is wrong: a job or bundle whose `Content-Type` is
//! not JSON is refused (415 `unsupported_media_type`) with nothing run,
//! and a bad query parameter on a session route is a bad query, not an
//! unreadable body.

use serde_json::json;
use skill_runner_tests::daemon::*;

use super::{publish_two, workspace_in, world_with_roots};

#[test]
fn a_job_or_bundle_that_is_not_sent_as_json_is_refused_and_nothing_runs() {
    let (w, root) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &root]);
    let ws = workspace_in(&w, "media");
    let job = serde_json::to_vec(&json!({
        "execution_id": "as-text",
        "workspace": ws,
        "argv": ["touch", "ran"],
    }))
    .unwrap();
    for ctype in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = d.request("POST", "/v1/executions", &[("Content-Type", ctype)], &job);
        let msg = r.assert_error(415, "unsupported_media_type");
        assert!(msg.contains("application/json"), "{msg}");
    }
    let r = d.request(
        "POST",
        "/v1/skill-packages",
        &[("Content-Type", "text/plain")],
        b"{}",
    );
    r.assert_error(415, "unsupported_media_type");
    assert!(!ws.join("ran").exists(), "a refused job ran");
    d.get("/v1/executions/as-text")
        .assert_error(404, "not_found");
    // JSON spelt with parameters or a +json type is JSON.
    let r = d.request(
        "POST",
        "/v1/executions",
        &[("Content-Type", "application/json; charset=utf-8")],
        &job,
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert!(ws.join("ran").exists());
}

#[test]
fn a_bad_query_parameter_on_a_session_route_says_it_is_the_query() {
    let (w, root) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &root]);
    let bindings = publish_two(&d, &w);
    let s = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[1]], "tools": []}),
    );
    assert_eq!(s.status, 200, "{:#}", s.json());
    let id = s.json()["id"].as_str().unwrap().to_owned();
    let msg = d
        .get(&format!("/v1/sessions/{id}/skills?limit=abc"))
        .assert_error(400, "bad_request");
    assert!(msg.contains("query"), "{msg}");
    assert!(!msg.contains("request body"), "{msg}");
}
