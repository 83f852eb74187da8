//! TCP needs a bearer token: refused at start without one, 401 for a wrong
//! or missing token, and idle connections without the token cannot starve
//! clients that have it.

use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

#[test]
fn tcp_needs_a_valid_bearer_token() {
    let w = World::new();
    // No token: refused at start with a clear message.
    let err = Daemon::try_start(&w, &["--listen", "127.0.0.1:0"])
        .expect_err("TCP without a token started");
    assert!(err.contains("bearer token"), "{err}");

    let token = "test-token-0123456789abcdef";
    let file = token_file(&w, token);
    let mut d = Daemon::start(
        &w,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
        ],
    );
    assert!(d.tcp.is_some());
    // Health needs no token; everything else does.
    assert!(matches!(d.get("/v1/health").status, 200 | 503));
    let r = d.get("/metrics");
    r.assert_error(401, "unauthorized");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    d.token = Some("test-token-0123456789abcdeX".into());
    d.get("/metrics").assert_error(401, "unauthorized");
    d.token = Some("short".into());
    d.post("/v1/executions", &json!({"argv": ["true"]}))
        .assert_error(401, "unauthorized");
    let r = d.request(
        "GET",
        "/metrics",
        &[("Authorization", &format!("Basic {token}"))],
        b"",
    );
    assert_eq!(r.status, 401);
    d.token = Some(token.into());
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body)
        .contains("skill_runner_http_responses_total{code=\"401\"}"));
}

#[test]
fn idle_connections_without_the_token_do_not_starve_clients_with_it() {
    let w = World::new();
    let token = "test-token-0123456789abcdef";
    let file = token_file(&w, token);
    let mut d = Daemon::start(
        &w,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
            "--max-connections",
            "8",
            "--header-timeout",
            "120s",
        ],
    );
    let addr = d.tcp.unwrap();
    // Twice as many idle connections as places: they send nothing.
    let idle: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    d.token = Some(token.into());
    // Without eviction this would wait for the 120 s header timeout; the
    // client's own timeout (PATIENCE) is the hang guard.
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    drop(idle);
}
