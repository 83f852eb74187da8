//! OpenTelemetry traces over OTLP/HTTP, off by default: with
//! `--otlp-endpoint`, each execution is exported to the collector as an
//! `execution` span with its `admission`, `stage`, `launch` and `wait`
//! children; the request's W3C `traceparent` makes it a child of the
//! caller's span, and a malformed one starts a new trace without failing
//! the request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// A collector: answers 200 to every POST and hands over (path, body).
fn collector() -> (String, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut w = conn;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).unwrap();
                        if h == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                length = v.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    r.read_exact(&mut body).unwrap();
                    w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                        .unwrap();
                    let _ = tx.send((path, serde_json::from_slice(&body).unwrap()));
                }
            });
        }
    });
    (url, rx)
}

/// The spans received until those of `execution_id` are all in.
fn spans_of(rx: &mpsc::Receiver<(String, Value)>, execution_id: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let (path, body) = rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("no spans of {execution_id}: {all:#?}"));
        assert_eq!(path, "/v1/traces");
        let resource = &body["resourceSpans"][0];
        assert_eq!(
            resource["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "skill-runner"}})
        );
        all.extend(
            resource["scopeSpans"][0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .cloned(),
        );
        let root = all.iter().find(|s| {
            s["name"] == "execution"
                && s["attributes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["value"]["stringValue"] == execution_id)
        });
        if let Some(root) = root {
            let trace = root["traceId"].clone();
            return all.into_iter().filter(|s| s["traceId"] == trace).collect();
        }
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} span in {spans:#?}"))
}

fn nanos(s: &Value, field: &str) -> u128 {
    s[field].as_str().unwrap().parse().unwrap()
}

#[test]
fn an_execution_is_a_trace_under_the_callers_traceparent() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (url, rx) = collector();
    let d = Daemon::start(&w, &["--otlp-endpoint", &url]);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let job = serde_json::to_vec(&json!({"execution_id": "traced", "argv": ["true"]})).unwrap();
    let r = d.request(
        "POST",
        "/v1/executions",
        &[
            ("Content-Type", "application/json"),
            ("traceparent", &format!("00-{trace_id}-{parent}-01")),
        ],
        &job,
    );
    assert_eq!(r.json()["status"], "exited");
    let spans = spans_of(&rx, "traced");
    let root = named(&spans, "execution");
    assert_eq!(root["traceId"], trace_id, "{root:#}");
    assert_eq!(root["parentSpanId"], parent, "{root:#}");
    assert_eq!(root["kind"], 2);
    for name in ["admission", "stage", "launch", "wait"] {
        let s = named(&spans, name);
        assert_eq!(s["traceId"], trace_id, "{s:#}");
        assert_eq!(s["parentSpanId"], root["spanId"], "{s:#}");
        assert!(nanos(s, "startTimeUnixNano") >= nanos(root, "startTimeUnixNano"));
        assert!(nanos(s, "endTimeUnixNano") <= nanos(root, "endTimeUnixNano"));
    }
    // In order: admitted, staged, launched, waited on.
    let order: Vec<u128> = ["admission", "stage", "launch", "wait"]
        .iter()
        .map(|n| nanos(named(&spans, n), "startTimeUnixNano"))
        .collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{spans:#?}");
    let status = root["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "execution.status")
        .unwrap();
    assert_eq!(status["value"]["stringValue"], "exited");
}

#[test]
fn a_malformed_traceparent_starts_a_new_trace_and_fails_nothing() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (url, rx) = collector();
    let d = Daemon::start(&w, &["--otlp-endpoint", &url]);
    for (n, bad) in [
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ]
    .iter()
    .enumerate()
    {
        let id = format!("untraced-{n}");
        let job = serde_json::to_vec(&json!({"execution_id": id, "argv": ["true"]})).unwrap();
        let r = d.request(
            "POST",
            "/v1/executions",
            &[("Content-Type", "application/json"), ("traceparent", bad)],
            &job,
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["status"], "exited");
        let spans = spans_of(&rx, &id);
        let root = named(&spans, "execution");
        assert!(root.get("parentSpanId").is_none(), "{root:#}");
        let trace = root["traceId"].as_str().unwrap();
        assert_eq!(trace.len(), 32);
        assert_ne!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(trace, "00000000000000000000000000000000");
    }
}

/// A bad endpoint stops the start with a sentence naming the setting.
#[test]
fn an_https_or_malformed_endpoint_is_refused_at_start() {
    let w = World::new();
    for bad in ["https://collector:4318", "collector:4318"] {
        let log = Daemon::try_start(&w, &["--otlp-endpoint", bad]).unwrap_err();
        assert!(log.contains("setting otlp_endpoint"), "{log}");
    }
}
