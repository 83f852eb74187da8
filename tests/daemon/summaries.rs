//! A finished execution's result document and events are kept in the
//! store, not in the daemon's memory (docs/durability.md, "What is kept
//! where"): hundreds of retained results of 64 KiB each leave the
//! daemon's heap about where it was, and every one still answers, byte
//! for byte, with its events re-attached, before and after a restart.

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// `RssAnon` of a process (its heaps and stacks), in KiB.
fn anon_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("RssAnon in /proc/PID/status")
}

fn job(i: usize) -> Value {
    json!({
        "execution_id": format!("kept-{i}"),
        "argv": ["sh", "-c", format!("printf '%065535d\\n' {i}")],
    })
}

#[test]
fn retained_results_are_read_back_from_the_store_not_held_in_memory() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let mut d = Daemon::start(&w, &["--retain", "1000", "--retain-bytes", "512MiB"]);
    // A few first, so that what every execution needs is there already.
    for i in 0..8 {
        assert_eq!(d.post("/v1/executions", &job(i)).status, 200);
    }
    let base = anon_kib(d.pid());
    let n = 320;
    let docs: Vec<Vec<u8>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|t| {
                let d = &d;
                s.spawn(move || {
                    (8 + t..8 + n)
                        .step_by(8)
                        .map(|i| {
                            let r = d.post("/v1/executions", &job(i));
                            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                            (i, r.body)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, Vec<u8>)> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, b)| b).collect()
    });
    let grown = anon_kib(d.pid()).saturating_sub(base);
    // Held in memory, the documents and logs were 320 × (64 KiB of output
    // in the log, 64 KiB of it in the document) ≈ 40 MiB.
    let held: u64 = docs.iter().map(|b| 2 * b.len() as u64).sum::<u64>() >> 10;
    eprintln!("daemon heap grew {grown} KiB for {held} KiB of retained documents and logs");
    assert!(
        grown < held / 4,
        "the daemon's anonymous memory grew {grown} KiB over {n} retained results ({held} KiB of documents and logs)"
    );
    // Every one answers as it did, and its events re-attach.
    let check = |d: &Daemon| {
        for (k, doc) in docs.iter().enumerate().step_by(37) {
            let id = format!("kept-{}", k + 8);
            assert_eq!(&d.get(&format!("/v1/executions/{id}")).body, doc, "{id}");
            let events =
                Lines::open(d, "GET", &format!("/v1/executions/{id}/events"), &[], b"").rest();
            let out: String = events
                .iter()
                .filter(|e| e["event"] == "stdout")
                .map(|e| e["data"].as_str().unwrap())
                .collect();
            assert_eq!(out.len(), 65536, "{id}");
            let last = events.last().unwrap();
            assert_eq!(last["event"], "exit", "{id}");
            let doc: Value = serde_json::from_slice(doc).unwrap();
            assert_eq!(last["result"], doc, "{id}");
        }
    };
    check(&d);
    d.signal_and_wait(libc::SIGKILL);
    let d = Daemon::start(&w, &["--retain", "1000", "--retain-bytes", "512MiB"]);
    check(&d);
}
