//! Event streams (NDJSON): events arrive in the order the command wrote
//! them, a reader that stalls has its execution cancelled, re-attached
//! readers get the same numbered events with heartbeats, and re-attaching
//! past the end is refused.

use std::io::{BufRead, BufReader};

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn streamed_events_arrive_in_order() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let script = "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; sleep 0.2; printf 'caf\\303'; sleep 0.2; printf '\\251\\n'";
    let mut conn = d.connect();
    send(
        &mut conn,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&json!({"argv": ["sh", "-c", script]})).unwrap(),
        None,
    );
    let mut r = BufReader::new(conn);
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    assert!(is_chunked(&headers));
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v == "application/x-ndjson"));
    let events: Vec<Value> = BufReader::new(Chunked::new(r))
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"started"), "{events:#?}");
    assert_eq!(kinds.last(), Some(&"exit"), "{events:#?}");
    let text = |stream: &str| -> String {
        events
            .iter()
            .filter(|e| e["event"] == stream)
            .map(|e| e["data"].as_str().unwrap())
            .collect()
    };
    assert_eq!(text("stdout"), "one\nthree\ncafé\n");
    assert_eq!(text("stderr"), "two\n");
    // Across streams, the order the command wrote in (with pauses between).
    let order: Vec<String> = events
        .iter()
        .filter(|e| e["event"] == "stdout" || e["event"] == "stderr")
        .map(|e| e["data"].as_str().unwrap().to_owned())
        .collect();
    let first = |s: &str| order.iter().position(|d| d.contains(s)).unwrap();
    assert!(
        first("one") < first("two") && first("two") < first("three"),
        "{order:?}"
    );
    let result = &events.last().unwrap()["result"];
    assert_eq!(result["status"], "exited");
    assert_eq!(result["stdout"], "one\nthree\ncafé\n");
    assert_eq!(events[0]["execution_id"], result["execution_id"]);
}

#[test]
fn a_stream_reader_that_stalls_has_its_execution_cancelled() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--stall-timeout", "1s"]);
    let m = marker(8);
    // A command that floods output while its client reads nothing.
    let mut conn = d.connect();
    send(
        &mut conn,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&json!({
            "execution_id": "flood",
            "argv": ["sh", "-c", format!("yes {m}")],
            "limits": {"output_bytes": 16u64 << 20, "timeout_ms": 600_000},
        }))
        .unwrap(),
        None,
    );
    wait_until("the stalled execution to be cancelled", || {
        d.get("/v1/executions/flood").status == 200
    });
    let doc = d.get("/v1/executions/flood").json();
    assert_eq!(doc["status"], "cancelled", "{:#}", doc["error"]);
    wait_until("the sandbox to be gone", || processes_with(&m).is_empty());
    assert!(d.log().contains("stopped reading"), "{}", d.log());
    drop(conn);
}

#[test]
fn reattached_readers_get_the_same_numbered_events_with_heartbeats() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots, "--heartbeat", "100ms"]);
    let ws = workspace_in(&w, "attach");
    let job = serde_json::to_vec(&gated_job("attach-1", &ws)).unwrap();
    // The POST's own stream.
    let mut own = Lines::open(
        &d,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &job,
    );
    assert_eq!(own.status, 200);
    let started = own.next_event().unwrap();
    assert_eq!(started["event"], "started");
    assert_eq!(started["seq"], 1);
    // A quiet stream gets heartbeats (the gate stays shut until one came),
    // on the POST's stream and on a re-attached one alike.
    let mut live = Lines::open(&d, "GET", "/v1/executions/attach-1/events", &[], b"");
    let mut live_events = Vec::new();
    loop {
        let e = live.next_event().unwrap();
        if e["event"] == "heartbeat" {
            assert!(e["seq"].as_u64().unwrap() >= 1, "{e}");
            break;
        }
        live_events.push(e);
    }
    let mut own_events = vec![started];
    loop {
        let e = own.next_event().unwrap();
        if e["event"] == "heartbeat" {
            break;
        }
        own_events.push(e);
    }
    open_gate(&ws);
    own_events.extend(own.rest());
    live_events.extend(live.rest());
    // From the start after the end, and after a seq.
    let all = Lines::open(&d, "GET", "/v1/executions/attach-1/events", &[], b"").rest();
    assert_eq!(all, own_events);
    assert_eq!(all, live_events);
    assert_eq!(seqs(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.last().unwrap()["event"], "exit");
    let out: String = all
        .iter()
        .filter(|e| e["event"] == "stdout")
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(out, "waiting\nreleased\n");
    assert_eq!(all.last().unwrap()["result"]["stdout"], out);
    let tail = Lines::open(
        &d,
        "GET",
        "/v1/executions/attach-1/events?after=2",
        &[],
        b"",
    )
    .rest();
    assert_eq!(tail, all[2..].to_vec());
    d.get("/v1/executions/attach-1/events?after=x")
        .assert_error(400, "bad_request");
    d.get("/v1/executions/nobody/events")
        .assert_error(404, "not_found");
}

#[test]
fn reattaching_past_the_end_and_unknown_session_queries_are_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let r = d.post(
        "/v1/executions",
        &json!({"execution_id": "short-1", "argv": ["echo", "hi"]}),
    );
    assert_eq!(r.status, 200);
    let mut all = Lines::open(&d, "GET", "/v1/executions/short-1/events", &[], b"");
    let events = all.rest();
    let last = *seqs(&events).last().unwrap();
    assert_eq!(events.last().unwrap()["event"], "exit");
    // From the last event: nothing more, the stream just ends.
    let r = d.get(&format!("/v1/executions/short-1/events?after={last}"));
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "{}", String::from_utf8_lossy(&r.body));
    let msg = d
        .get(&format!("/v1/executions/short-1/events?after={}", last + 1))
        .assert_error(400, "bad_request");
    assert!(msg.contains(&format!("seq {last}")), "{msg}");
    d.get("/v1/sessions?x=1").assert_error(400, "bad_request");
    assert_eq!(d.get("/v1/sessions").status, 200);
}
