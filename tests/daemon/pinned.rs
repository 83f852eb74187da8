//! A live NDJSON stream always ends with its `exit` event, whatever
//! retention does meanwhile: the result is pinned until its own stream
//! has sent it, even when the retained bytes run over budget while its
//! reader lags behind.

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// A job printing `n` bytes of text.
fn printing(id: &str, n: u64) -> serde_json::Value {
    json!({
        "execution_id": id,
        "argv": ["sh", "-c", format!("yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {n}")],
        "limits": {"output_bytes": 1_000_000},
    })
}

#[test]
fn a_lagging_stream_ends_with_its_exit_when_retention_sheds_its_result() {
    let w = World::new();
    let d = Daemon::start(
        &w,
        &["--max-output-bytes", "1MiB", "--retain-bytes", "2MiB"],
    );
    // Less than the back-pressure allowance plus the socket's buffers:
    // the command finishes while its reader has not read the rest.
    let mut lines = Lines::open(
        &d,
        "POST",
        "/v1/executions",
        &[
            ("Accept", "application/x-ndjson"),
            ("Content-Type", "application/json"),
        ],
        &serde_json::to_vec(&printing("lagging", 400_000)).unwrap(),
    );
    let first = lines.next_event().unwrap();
    let mut bytes = first["data"].as_str().map_or(0, str::len);
    wait_until("the lagging execution finishes", || {
        d.get("/v1/executions/lagging").status != 202
    });
    // Other results push the retained bytes far over the budget: the
    // oldest, the lagging one, is the first to be shed.
    for i in 0..4 {
        let r = d.post("/v1/executions", &printing(&format!("filler-{i}"), 900_000));
        assert_eq!(
            r.status,
            200,
            "{}",
            String::from_utf8_lossy(&r.body[..200.min(r.body.len())])
        );
    }
    let mut last = first;
    while let Some(e) = lines.next_event() {
        if e["event"] == "stdout" {
            bytes += e["data"].as_str().unwrap().len();
        }
        last = e;
    }
    assert_eq!(
        last["event"], "exit",
        "the stream ended without its exit, after event {} ({})",
        last["seq"], last["event"]
    );
    assert_eq!(last["result"]["exit_code"], 0, "{last}");
    assert_eq!(bytes, 400_000, "the stream lost output");
}
