//! Job admission by both front ends (`skill-runner run` and `POST
//! /v1/executions`): a job naming a session that does not exist, or no
//! longer does, is refused as `not_found` before it is queued or staged;
//! a job's host paths and profile are checked by one admission with one
//! set of sentences.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// A session id of the right form that names no session.
const UNKNOWN: &str = "ses-00000000000000000000000000000000";

/// Publishes a skill and creates a session of it with the CLI, as an
/// operator would before starting the daemon; returns the session id.
fn session_of_one_skill(w: &World) -> String {
    let dir = w.skill("greet", &[("scripts/greet.sh", b"echo hi\n")]);
    let out = w
        .cmd()
        .args(["store", "add", "--id", "greet", "--revision", "1"])
        .args(["--version", "1.0.0"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = w
        .cmd()
        .args(["session", "create", "--skill", "greet@1", "--tool", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_cli_job_naming_an_unknown_session_is_not_found_before_anything_is_staged() {
    let w = World::new();
    let (code, doc, out) = w.run_json(&json!({"argv": ["true"], "session": UNKNOWN}));
    assert_eq!(code, 125, "{}", show(&out));
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert_eq!(doc["error"]["kind"], "not_found", "{doc:#}");
    let msg = doc["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(UNKNOWN) && msg.contains("does not exist") && msg.contains("session create"),
        "{msg}"
    );
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());

    // Without --json: the one sentence on stderr, the same exit code.
    let job = w.job("plain", &json!({"argv": ["true"], "session": UNKNOWN}));
    let out = w.cmd().arg("run").arg(&job).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("skill-runner: session ") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

#[test]
fn a_cli_job_naming_a_deleted_session_is_not_found() {
    let w = World::new();
    let id = session_of_one_skill(&w);
    std::fs::remove_file(w.data_dir().join("sessions").join(format!("{id}.json"))).unwrap();
    let (code, doc, out) = w.run_json(&json!({"argv": ["true"], "session": id}));
    assert_eq!(code, 125, "{}", show(&out));
    assert_eq!(doc["error"]["kind"], "not_found", "{doc:#}");
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());
}

/// What the daemon lists and answers about executions: nothing was left
/// behind by a refused job.
fn assert_nothing_queued(d: &Daemon, id: &str) {
    let (status, list) = d.call("GET", "/v1/executions", None);
    assert_eq!(status, 200, "{list:#}");
    assert_eq!(list["executions"], json!([]), "{list:#}");
    assert_nothing_queued_under(d, id);
}

/// `id` answers nothing, and nothing is queued or running.
fn assert_nothing_queued_under(d: &Daemon, id: &str) {
    let (status, doc) = d.call("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(status, 404, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "not_found", "{doc:#}");
    let (status, doc) = d.call("GET", &format!("/v1/executions/{id}/events"), None);
    assert_eq!(status, 404, "{doc:#}");
    let (_, health) = d.call("GET", "/v1/health", None);
    assert_eq!(
        health["executions"],
        json!({"queued": 0, "running": 0}),
        "{health:#}"
    );
}

#[test]
fn a_daemon_job_naming_an_unknown_session_is_404_and_nothing_is_queued() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    for detached in ["", "?wait=false"] {
        let (status, doc) = d.call(
            "POST",
            &format!("/v1/executions{detached}"),
            Some(&json!({"execution_id": "adm-unknown", "argv": ["true"], "session": UNKNOWN})),
        );
        assert_eq!(status, 404, "{detached}: {doc:#}");
        assert_eq!(doc["error"]["kind"], "not_found", "{doc:#}");
        let msg = doc["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(UNKNOWN) && msg.contains("does not exist"),
            "{msg}"
        );
        assert_nothing_queued(&d, "adm-unknown");
    }
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());
}

#[test]
fn a_daemon_job_naming_an_expired_session_is_404_and_the_session_is_gone() {
    let w = World::new();
    let id = session_of_one_skill(&w);
    let d = Daemon::start(&w, &["--session-idle", "1h"]);
    // Last used two hours ago: idle for longer than the daemon keeps it.
    let record = w.data_dir().join("sessions").join(format!("{id}.json"));
    let long_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::open(&record)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let (status, doc) = d.call(
        "POST",
        "/v1/executions",
        Some(&json!({"execution_id": "adm-expired", "argv": ["true"], "session": id})),
    );
    assert_eq!(status, 404, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "not_found", "{doc:#}");
    assert_nothing_queued(&d, "adm-expired");
    assert!(!record.exists(), "the expired session was kept");
}

#[test]
fn a_daemon_job_naming_a_live_session_is_admitted() {
    // The positive control of the 404s above: the same job with a
    // session that exists is queued and runs the session's skill.
    let w = World::new();
    let id = session_of_one_skill(&w);
    let d = Daemon::start(&w, &[]);
    let (status, doc) = d.call(
        "POST",
        "/v1/executions",
        Some(&json!({
            "execution_id": "adm-live",
            "argv": ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/greet/scripts/greet.sh"],
            "session": id,
        })),
    );
    assert_ne!(status, 404, "{doc:#}");
    if require_sandbox() {
        let (_, list) = d.call("GET", "/v1/executions", None);
        assert_eq!(
            list["executions"][0]["execution_id"], "adm-live",
            "{list:#}"
        );
        assert_eq!(status, 200, "{doc:#}");
        assert_eq!(doc["exit_code"], 0, "{doc:#}");
        assert_eq!(doc["stdout"], "hi\n", "{doc:#}");
    }
}

#[test]
fn both_front_ends_refuse_a_path_outside_their_roots_with_one_sentence() {
    let w = World::new();
    let roots = w.sandbox_folder("roots");
    let job = json!({"execution_id": "adm-etc", "argv": ["true"], "workspace": "/etc"});
    let out = w
        .cmd()
        .args(["run", "--json", "--confine"])
        .arg(&roots)
        .arg(w.job("etc", &job))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cli = cli["error"]["message"].as_str().unwrap().to_owned();

    let d = Daemon::start(&w, &["--root", roots.to_str().unwrap()]);
    let (status, doc) = d.call("POST", "/v1/executions", Some(&job));
    assert_eq!(status, 403, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "path_not_allowed", "{doc:#}");
    let daemon = doc["error"]["message"].as_str().unwrap().to_owned();
    assert_nothing_queued(&d, "adm-etc");

    // The same sentence; only the words naming the roots differ.
    assert_eq!(
        cli.replace("the --confine folder", "ROOTS")
            .replace("skill-runner run --confine", "OPTION"),
        daemon
            .replace("the daemon's roots", "ROOTS")
            .replace("skill-runner serve --root", "OPTION"),
    );
    assert!(cli.starts_with("workspace /etc is outside"), "{cli}");
}

#[test]
fn both_front_ends_refuse_a_profile_file_with_one_sentence() {
    let w = World::new();
    let roots = w.sandbox_folder("roots");
    let job = json!({"argv": ["true"], "profile": "/etc/passwd"});
    let out = w
        .cmd()
        .args(["run", "--json", "--confine"])
        .arg(&roots)
        .arg(w.job("profile", &job))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli["error"]["kind"], "bad_job", "{cli:#}");
    let cli = cli["error"]["message"].as_str().unwrap().to_owned();

    let d = Daemon::start(&w, &["--root", roots.to_str().unwrap()]);
    let (status, doc) = d.call("POST", "/v1/executions", Some(&job));
    assert_eq!(status, 400, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "bad_job", "{doc:#}");
    let daemon = doc["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        cli.replace("the --confine folder", "ROOTS")
            .replace("skill-runner run --confine", "OPTION"),
        daemon
            .replace("the daemon's roots", "ROOTS")
            .replace("skill-runner serve --root", "OPTION"),
    );
    assert!(cli.contains("only built-in profiles"), "{cli}");
}

#[test]
fn a_retry_after_its_session_was_deleted_answers_with_its_execution() {
    // The 404 is for jobs about to be queued: a retry of an execution the
    // daemon retains answers with that execution, as every retry does.
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let id = session_of_one_skill(&w);
    let d = Daemon::start(&w, &[]);
    let job = json!({
        "execution_id": "adm-retry",
        "argv": ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/greet/scripts/greet.sh"],
        "session": id,
    });
    let (status, first) = d.call("POST", "/v1/executions", Some(&job));
    assert_eq!(status, 200, "{first:#}");
    let (status, doc) = d.call("DELETE", &format!("/v1/sessions/{id}"), None);
    assert_eq!(status, 200, "{doc:#}");
    let (status, again) = d.call("POST", "/v1/executions", Some(&job));
    assert_eq!(status, 200, "{again:#}");
    assert_eq!(again, first);
    // A new execution naming the deleted session is refused.
    let (status, doc) = d.call(
        "POST",
        "/v1/executions",
        Some(&json!({"execution_id": "adm-new", "argv": ["true"], "session": id})),
    );
    assert_eq!(status, 404, "{doc:#}");
    assert_nothing_queued_under(&d, "adm-new");
}
