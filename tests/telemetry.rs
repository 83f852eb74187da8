//! The logs of both front ends (`runner/src/telemetry.rs`): the CLI's
//! carry no ANSI escape codes when stderr is not a terminal, and the
//! daemon's JSON lines carry values as the API spells them (`"exited"`,
//! `3`), never Rust `Debug` text (`"Exited"`, `"Some(3)"`).

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn the_cli_logs_plain_text_to_a_piped_stderr() {
    let w = World::new();
    // A binding never published: rejected before any sandbox, and the
    // rejection is logged at info.
    let job = w.job(
        "missing",
        &json!({"argv": ["true"], "skills": [{"id": "nowhere", "revision": 1, "version": "1",
            "hash": "b5bcc438dc1139bc1aadc8ad73d72b6717577bf8b39c13207e5f9f583582227b"}]}),
    );
    let out = w
        .cmd()
        .env("SKILL_RUNNER_LOG", "info")
        .args(["run", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let stderr = text(&out.stderr);
    let logged = stderr.lines().find(|l| l.contains("rejected"));
    assert!(logged.is_some(), "no log line: {stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "ANSI codes in a piped log: {stderr:?}"
    );
    // The log line names its level and target as plain words.
    let line = logged.unwrap();
    assert!(
        line.contains(" INFO ") && line.contains("kind=not_in_store"),
        "{line}"
    );
}

#[test]
fn the_daemon_logs_a_finished_execution_as_the_api_spells_it() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--log-format", "json"]);
    let (status, result) = d.call(
        "POST",
        "/v1/executions",
        Some(&json!({"execution_id": "log-3", "argv": ["sh", "-c", "exit 3"]})),
    );
    assert_eq!(status, 200, "{result:#}");
    assert_eq!(result["exit_code"], 3, "{result:#}");
    let line = d.wait_for_line("the finished execution log-3", |l| {
        l.contains("\"finished\"") && l.contains("log-3")
    });
    assert!(!line.contains('\x1b'), "{line:?}");
    let doc: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(doc["span"]["id"], "log-3", "{doc:#}");
    let fields = &doc["fields"];
    assert_eq!(fields["message"], "finished", "{doc:#}");
    // Exactly the result's own values.
    assert_eq!(fields["status"], result["status"], "{doc:#}");
    assert_eq!(fields["status"], "exited", "{doc:#}");
    assert_eq!(fields["code"], json!(3), "{doc:#}");
    assert!(fields["ms"].is_u64(), "{doc:#}");
    // Every line of the log is JSON.
    for l in d.log().lines() {
        assert!(
            serde_json::from_str::<Value>(l).is_ok(),
            "not a JSON line: {l}"
        );
    }
}
