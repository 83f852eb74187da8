//! The daemon's HTTP layer, in process: the input is the raw bytes a client
//! writes on a connection (one or more pipelined HTTP/1.1 requests). They
//! reach the daemon's own router (runner/src/daemon/routes.rs, sessions.rs:
//! auth guard, body limits, job, bundle and session parsing, routing)
//! through hyper's HTTP/1 server, configured as `server.rs` configures it,
//! over an in-memory pipe instead of a socket. What is not driven: the
//! accept loop, connection limits and signals (server.rs), and launching:
//! the runner's sandbox is marked unavailable, so an admitted execution
//! stops at the launch check (503).
//!
//! Invariants: no panic or hang; every response the router makes to bad
//! input is a 4xx or 503 (never a 500) and, when it has a body, is JSON
//! with `error.kind` and a one-line `error.message`.
use std::sync::{Arc, OnceLock};

use crate::{one_line, Fixture};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use skill_runner::daemon::config::Config;
use skill_runner::daemon::routes;
use skill_runner::exec::Runner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Harness {
    fixture: Fixture,
    runner: Arc<Runner>,
    config: Config,
    rt: tokio::runtime::Runtime,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let fixture = Fixture::new("http");
        let (runner, config) = fixture.runner();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        Harness {
            fixture,
            runner,
            config,
            rt,
        }
    })
}

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    let h = harness();
    let app = h.fixture.app(&h.runner, &h.config);
    let out =
        h.rt.block_on(exchange(&h.config, routes::router(app), data));
    if std::env::var_os("SKILL_RUNNER_FUZZ_SHOW").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&out));
    }
    check(&out, &methods(data));
    h.fixture.reset();
}

/// Writes `input` on a connection served as the daemon serves one, closes
/// the write side, and returns everything the server wrote back.
async fn exchange(config: &Config, router: axum::Router, input: &[u8]) -> Vec<u8> {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true)
        // The client below shuts its write side after the last request and
        // waits for the answers (the daemon would close at once instead).
        .half_close(true);
    let conn = http.serve_connection(TokioIo::new(server), TowerToHyperService::new(router));
    let served = tokio::spawn(async move {
        let _ = conn.await;
    });
    let (mut rd, mut wr) = tokio::io::split(client);
    let input = input.to_vec();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&input).await;
        let _ = wr.shutdown().await;
    });
    let mut out = Vec::new();
    let _ = rd.read_to_end(&mut out).await;
    // A panic in the server's task (a handler's) is the target's panic:
    // libFuzzer's hook aborts on it in any thread, and the corpus replay
    // must not see it as a connection that merely closed.
    for task in [writer.await, served.await] {
        if let Err(e) = task {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    out
}

/// The method of each request in `input`, in order, as far as they parse
/// (a request's body is skipped by its `Content-Length`).
fn methods(mut input: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(n)) = req.parse(input) else {
            return found;
        };
        let len = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| {
                std::str::from_utf8(h.value)
                    .ok()?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0);
        found.push(req.method.unwrap_or_default().to_owned());
        input = &input[(n + len).min(input.len())..];
    }
}

/// Checks every response with a length (all the router makes here). The
/// answer to a `HEAD` has its length but no body; past the requests whose
/// methods are known, nothing is checked.
fn check(mut out: &[u8], methods: &[String]) {
    let mut index = 0;
    while !out.is_empty() {
        let Some(method) = methods.get(index) else {
            return;
        };
        index += 1;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(out) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!("the server wrote something that is not a response: {other:?}"),
        };
        let code = resp.code.expect("a status");
        let header = |name: &str| {
            resp.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) else {
            return; // chunked or until close: not made by this router
        };
        let len = if method == "HEAD" { 0 } else { len };
        let body = &out[head..(head + len).min(out.len())];
        assert_ne!(
            code,
            500,
            "bad input answered 500: {}",
            String::from_utf8_lossy(body)
        );
        if code >= 400 && len > 0 {
            let ct = header("content-type").unwrap_or_default();
            assert!(
                ct.starts_with("application/json"),
                "a {code} error that is not JSON ({ct}): {:?}",
                String::from_utf8_lossy(body)
            );
            let doc: serde_json::Value = serde_json::from_slice(body).expect("JSON error body");
            let err = &doc["error"];
            if code == 503 && err.is_null() {
                // GET /v1/health: the health document, with the reason.
                assert!(doc["status"].is_string(), "{doc}");
            } else {
                assert!(err["kind"].is_string(), "no error.kind: {doc}");
                one_line("http", err["message"].as_str().expect("error.message"));
            }
        }
        out = &out[(head + len).min(out.len())..];
    }
}
