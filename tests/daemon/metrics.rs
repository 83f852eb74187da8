//! Metrics and logs: `/metrics` in the Prometheus text format, JSON logs
//! with the execution's span, and job text that cannot forge log lines.

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn metrics_use_the_prometheus_text_format() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let dir = w.skill("m", &[("f.txt", b"12345")]);
    let (bundle, binding) = bundle_of("m", &dir);
    let d = Daemon::start(&w, &["--log-format", "json"]);
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["true"], "skills": [binding]}),
    );
    assert_eq!(r.json()["status"], "exited");
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8(r.body).unwrap();
    for name in [
        "skill_runner_executions_total{status=\"exited\"} 1",
        "skill_runner_execution_duration_seconds_count 1",
        "skill_runner_staging_seconds_count 1",
        "skill_runner_queue_wait_seconds_count 1",
        "skill_runner_executions_running 0",
        "skill_runner_executions_queued 0",
        "skill_runner_packages_published_total 1",
        "skill_runner_build_info{version=\"",
        "\nprocess_resident_memory_bytes ",
        "\nprocess_open_fds ",
        "\nprocess_start_time_seconds ",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let staged: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("skill_runner_staging_bytes_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(staged >= 5, "{text}");
    // JSON logs: one object a line, with the execution's span.
    let log = d.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    assert!(lines
        .iter()
        .any(|l| l["span"]["name"] == "execution" && l["span"]["id"].is_string()));
}

#[test]
fn job_text_cannot_forge_daemon_log_lines() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let forged = "x\n2026-01-01T00:00:00.000000Z  INFO forged: \u{1b}[31mred";
    let r = d.post(
        "/v1/executions",
        &json!({"argv": [forged], "workspace": format!("/nonexistent\n{forged}")}),
    );
    assert!(matches!(r.status, 400 | 403), "{}", r.status);
    let r = d.post("/v1/executions", &json!({"argv": [forged]}));
    assert_eq!(r.status, 200);
    // The line that quotes the job's argv0 (where a forged line would be).
    d.wait_for_line("the execution's argv0", |l| l.contains("argv0"));
    let log = d.log();
    assert!(!log.lines().any(|l| l.starts_with("2026-01-01")), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
}
