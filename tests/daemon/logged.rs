//! Every refusal leaves a trace: a job rejected at launch is logged once
//! with its execution id, kind and sentence, and a refused request once
//! with its kind and sentence.

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn a_job_rejected_at_launch_and_a_refused_request_are_each_logged_once() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let dir = w.skill("never-published", &[]);
    let mut unknown = skill_ref("never-published", &dir);
    unknown.as_object_mut().unwrap().remove("path");
    let r = d.post(
        "/v1/executions",
        &json!({"execution_id": "rejected-1", "argv": ["true"], "skills": [unknown]}),
    );
    let sentence = r.assert_error(404, "not_in_store");
    let line = d.wait_for_line("the rejection", |l| {
        l.contains("rejected-1") && l.contains("not_in_store")
    });
    // Logged escaped: job text forges no log line.
    let escaped = sentence.escape_debug().to_string();
    assert!(line.contains(&escaped), "{line}\nwithout: {escaped}");
    let log = d.log();
    assert_eq!(
        log.lines().filter(|l| l.contains(&escaped)).count(),
        1,
        "{log}"
    );

    let r = d.request(
        "POST",
        "/v1/executions",
        &[("Content-Type", "text/plain")],
        b"{}",
    );
    let sentence = r.assert_error(415, "unsupported_media_type");
    let line = d.wait_for_line("the refusal", |l| l.contains("unsupported_media_type"));
    assert!(
        line.contains(&sentence.escape_debug().to_string()),
        "{line}"
    );
    let log = d.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("unsupported_media_type"))
            .count(),
        1,
        "{log}"
    );
}
