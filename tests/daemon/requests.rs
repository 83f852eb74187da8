//! Requests the daemon refuses: malformed, unknown or oversized bodies and
//! paths get a JSON error saying what to change, slow clients are cut off,
//! and a full daemon answers 429 with Retry-After.

use std::io::{BufReader, Read, Write};
use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn malformed_requests_get_json_errors() {
    let w = World::new();
    let d = Daemon::start(&w, &["--job-body-limit", "64KiB"]);
    let post_raw = |body: &[u8]| {
        d.request(
            "POST",
            "/v1/executions",
            &[("Content-Type", "application/json")],
            body,
        )
    };
    let msg = post_raw(b"{not json").assert_error(400, "bad_job");
    assert!(msg.contains("not valid JSON"), "{msg}");
    let msg = post_raw(br#"{"argv":["true"],"argz":1}"#).assert_error(400, "bad_job");
    assert!(msg.contains("unknown field"), "{msg}");
    let msg =
        post_raw(br#"{"argv":["true"],"workspace":"relative/ws"}"#).assert_error(400, "bad_job");
    assert!(msg.contains("absolute"), "{msg}");
    let msg =
        post_raw(br#"{"argv":["true"],"profile":"/etc/passwd"}"#).assert_error(400, "bad_job");
    assert!(msg.contains("built-in"), "{msg}");
    post_raw(br#"{"argv":["true"],"execution_id":"no spaces"}"#).assert_error(400, "bad_job");
    // Output is held in memory: a job may not ask for an unbounded cap.
    let msg = post_raw(br#"{"argv":["true"],"limits":{"output_bytes":1099511627776}}"#)
        .assert_error(400, "bad_job");
    assert!(msg.contains("max-output-bytes"), "{msg}");

    // Too large, declared up front.
    let big = vec![b' '; 200 * 1024];
    post_raw(&big).assert_error(413, "body_too_large");
    // Too large, streamed without a length.
    let mut conn = d.connect();
    conn.write_all(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    for _ in 0..4 {
        let chunk = vec![b' '; 32 * 1024];
        if conn
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .is_err()
            || conn.write_all(&chunk).is_err()
            || conn.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let _ = conn.write_all(b"0\r\n\r\n");
    read_response(BufReader::new(conn)).assert_error(413, "body_too_large");

    d.get("/v2/nothing").assert_error(404, "not_found");
    d.request("PUT", "/v1/executions", &[], b"")
        .assert_error(405, "method_not_allowed");
    d.post("/v1/skill-packages", &json!({"skills": "no"}))
        .assert_error(400, "bad_bundle");
    // Found by fuzzing (target `http`): a path that does not decode got
    // axum's plain text, not the error document; and a query key with a
    // newline must come back on one line.
    d.get("/v1/executions/%FF").assert_error(400, "bad_request");
    d.get("/v1/sessions/%FF%FE/events")
        .assert_error(400, "bad_request");
    let msg = d
        .get("/v1/sessions/ses-0123456789abcdef0123456789abcdef/skills?wut%0A=1")
        .assert_error(400, "bad_request");
    assert!(!msg.contains('\n'), "{msg:?}");
    // The daemon is still fine.
    assert!(d.get("/v1/health").status == 200 || d.get("/v1/health").status == 503);
}

#[test]
fn slow_clients_are_cut_off() {
    let w = World::new();
    let d = Daemon::start(&w, &["--header-timeout", "1s", "--body-timeout", "1s"]);
    // Headers that never finish: the connection is closed.
    let mut conn = d.connect();
    conn.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = conn.read_to_end(&mut buf); // returns at EOF (or a reset)
    assert!(
        buf.is_empty() || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf)
    );

    // A body that never finishes: 408 with a JSON error.
    let mut conn = d.connect();
    conn.write_all(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"argv\":",
    )
    .unwrap();
    read_response(BufReader::new(conn)).assert_error(408, "body_timeout");

    // A connection that sends nothing is closed too.
    let mut conn = d.connect();
    let mut buf = Vec::new();
    let _ = conn.read_to_end(&mut buf);
    assert!(buf.is_empty() || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408"));
    // And the daemon still serves.
    assert!(matches!(d.get("/v1/health").status, 200 | 503));
}

#[test]
fn a_full_daemon_answers_429_with_retry_after() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Arc::new(Daemon::start(
        &w,
        &["--max-running", "1", "--max-queued", "1"],
    ));
    let m = marker(7);
    let spawn = |id: &'static str| {
        let d = d.clone();
        let m = m.clone();
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"execution_id": id, "argv": ["sleep", m]}),
            )
        })
    };
    let running = spawn("first");
    wait_until("the first to run", || !processes_with(&m).is_empty());
    let queued = spawn("second");
    wait_until("the second to queue", || {
        d.get("/v1/executions/second").status == 202
    });
    assert_eq!(d.get("/v1/executions/second").json()["status"], "queued");
    let r = d.post("/v1/executions", &json!({"argv": ["true"]}));
    r.assert_error(429, "busy");
    assert_eq!(r.header("retry-after"), Some("1"));
    let metrics = String::from_utf8(d.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("skill_runner_executions_queued 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("skill_runner_executions_running 1\n"),
        "{metrics}"
    );

    // Cancel the queued one first: it never runs.
    assert_eq!(d.delete("/v1/executions/second").status, 202);
    let doc = queued.join().unwrap().json();
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    assert_eq!(d.delete("/v1/executions/first").status, 202);
    assert_eq!(running.join().unwrap().json()["status"], "cancelled");
    wait_until("the sandboxes to be gone", || processes_with(&m).is_empty());
}

#[test]
fn faults_of_the_request_are_4xx_with_what_to_change() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let post = |job: &Value| d.post("/v1/executions", job);
    let msg = post(&json!({"argv": ["true"], "limits": {"memory_bytes": 1}}))
        .assert_error(400, "bad_job");
    assert!(
        msg.contains("memory_bytes") && msg.contains("minimum"),
        "{msg}"
    );
    let msg = post(&json!({"argv": ["true"], "limits": {"pids": 2}})).assert_error(400, "bad_job");
    assert!(msg.contains("pids"), "{msg}");
    // One 3 MB argument: over the kernel's per-argument limit.
    let msg = post(&json!({"argv": ["echo", "a".repeat(3 << 20)]})).assert_error(400, "bad_job");
    assert!(msg.contains("per argument"), "{msg}");
    // 200k small arguments: over bubblewrap's argument cap.
    let msg = post(&json!({"argv": vec!["x"; 200_000]})).assert_error(400, "bad_job");
    assert!(msg.contains("bubblewrap"), "{msg}");
    // Many arguments that fit one by one but not together: over ARG_MAX.
    let msg = post(&json!({"argv": vec!["b".repeat(100_000); 30]})).assert_error(400, "bad_job");
    assert!(msg.contains("ARG_MAX"), "{msg}");
    // The CLI refuses the same job the same way.
    let job = w.path().join("tiny.json");
    std::fs::write(&job, r#"{"argv": ["true"], "limits": {"memory_bytes": 1}}"#).unwrap();
    let out = Command::new(runner_bin())
        .arg("--data-dir")
        .arg(w.data_dir())
        .args(["run", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "bad_job", "{doc:#}");
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn an_oversized_body_sent_whole_is_answered_413() {
    let w = World::new();
    let d = Daemon::start(&w, &["--job-body-limit", "64KiB"]);
    // A stdlib-like client: writes every byte, then reads.
    let body = vec![b' '; 1 << 20];
    let mut conn = d.connect();
    let head = format!(
        "POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(&body)
        .expect("the daemon reads the whole body before answering");
    read_response(BufReader::new(conn)).assert_error(413, "body_too_large");
    // With Expect: 100-continue the answer comes before any body byte.
    let mut conn = d.connect();
    let head = format!(
        "POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    read_response(BufReader::new(conn)).assert_error(413, "body_too_large");
}
