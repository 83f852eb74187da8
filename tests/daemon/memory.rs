//! The daemon's memory and retention stay bounded whatever a job or a client
//! does: floods of tiny writes, readers that stall, output with no
//! character boundary, one large result read by many, bodies held open, and
//! one execution's output against everyone else's retained results.

use std::io::{BufReader, Read, Write};
use std::path::Path;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A job that writes `size` bytes of `\x01` to stdout and to stderr,
/// `piece` bytes per write, alternating.
fn flood_job(id: &str, piece: usize, size: usize, output_bytes: usize) -> Value {
    json!({
        "execution_id": id,
        "argv": ["python3", "-c", format!(
            "import os\nb=b'\\x01'*{piece}\nfor i in range({}):\n  os.write(1,b)\n  os.write(2,b)",
            size / piece
        )],
        "limits": {"timeout_ms": 120000, "output_bytes": output_bytes},
    })
}

#[test]
fn a_flood_of_tiny_writes_keeps_the_daemon_memory_bounded() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let pid = d.pid();
    assert_eq!(d.get("/v1/health").status, 200);
    let (base, _) = memory_kib(pid);
    // 1 MiB per stream, one byte per write: once an event each.
    let r = d.post(
        "/v1/executions?wait=false",
        &flood_job("flood-1", 1, 1 << 20, 1 << 20),
    );
    assert_eq!(r.status, 202, "{:#}", r.json());
    // Readers that re-attach and then read nothing.
    let stalled: Vec<Conn> = (0..20)
        .map(|_| {
            let mut c = d.connect();
            send(
                &mut c,
                "GET",
                "/v1/executions/flood-1/events",
                &[],
                b"",
                None,
            );
            c
        })
        .collect();
    let r = d.get("/v1/executions/flood-1?wait=60s");
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["stdout"].as_str().unwrap().len(), 1 << 20);
    // The whole log, read back: every byte once, seq numbers contiguous.
    let mut all = Lines::open(&d, "GET", "/v1/executions/flood-1/events", &[], b"");
    let events = all.rest();
    let seq = seqs(&events);
    assert_eq!(seq, (1..=seq.len() as u64).collect::<Vec<_>>());
    for stream in ["stdout", "stderr"] {
        let text: usize = events
            .iter()
            .filter(|e| e["event"] == stream)
            .map(|e| e["data"].as_str().unwrap().len())
            .sum();
        assert_eq!(text, 1 << 20, "{stream}");
    }
    let (rss, hwm) = memory_kib(pid);
    drop(stalled);
    // Before the fix: 587,626 events and +134 MB for 2 MiB of output.
    let bound = 64 * 1024;
    assert!(
        hwm < base + bound,
        "daemon peak memory {hwm} KiB, {} KiB over its {base} KiB start (now {rss} KiB); events {}",
        hwm - base,
        events.len()
    );
    eprintln!(
        "flood-1: base {base} KiB, peak {hwm} KiB, now {rss} KiB, {} events",
        events.len()
    );
}

#[test]
fn one_execution_cannot_empty_retention() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(
        &w,
        &["--retain-bytes", "32MiB", "--max-output-bytes", "8MiB"],
    );
    let victim = json!({"execution_id": "victim-1", "argv": ["echo", "important result"]});
    assert_eq!(d.post("/v1/executions?wait=false", &victim).status, 202);
    let r = d.get("/v1/executions/victim-1?wait=60s");
    assert_eq!(r.status, 200, "{:#}", r.json());
    for id in ["flood-1", "flood-2"] {
        let job = flood_job(id, 65536, 8 << 20, 8 << 20);
        assert_eq!(d.post("/v1/executions?wait=false", &job).status, 202);
        let r = d.get(&format!("/v1/executions/{id}?wait=60s"));
        let doc = r.json();
        // The newest result is kept whole, however large.
        assert_eq!(r.status, 200, "{id}: {}", doc["error"]);
        assert_eq!(doc["stdout"].as_str().unwrap().len(), 8 << 20);
    }
    // The small result stays with its record.
    let r = d.get("/v1/executions/victim-1");
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["stdout"], "important result\n");
    // The older flood lost its bulk but not its id: 410, never a rerun.
    let msg = d
        .get("/v1/executions/flood-1")
        .assert_error(410, "result_dropped");
    assert!(msg.contains("exited"), "{msg}");
    d.post(
        "/v1/executions",
        &flood_job("flood-1", 65536, 8 << 20, 8 << 20),
    )
    .assert_error(410, "result_dropped");
    d.post(
        "/v1/executions",
        &json!({"execution_id": "flood-1", "argv": ["true"]}),
    )
    .assert_error(409, "execution_id_in_use");
    d.get("/v1/executions/flood-1/events")
        .assert_error(410, "result_dropped");
    let listed = d.get("/v1/executions").json();
    assert_eq!(
        listed_ids(&listed),
        ["flood-2", "flood-1", "victim-1"],
        "{listed:#}"
    );
    // A budget that could not hold one execution's output is refused.
    let err = Daemon::try_start(
        &w,
        &["--retain-bytes", "16MiB", "--max-output-bytes", "16MiB"],
    )
    .expect_err("a too small retain_bytes started");
    assert!(err.contains("retain_bytes"), "{err}");
    let err = Daemon::try_start(&w, &["--retain", "0"]).expect_err("--retain 0 started");
    assert!(err.contains("retain"), "{err}");
}

#[test]
fn session_bodies_are_read_only_under_a_bounded_number_of_places() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // The holders keep their places until their body times out: long
    // enough that a loaded machine cannot end the window before the check.
    let d = Daemon::start(&w, &["--body-timeout", "10m"]);
    // Clients that announce a body and send only its start.
    let hold = || {
        let mut c = d.connect();
        write!(
            c,
            "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"skills\": ["
        )
        .unwrap();
        c.flush().unwrap();
        c
    };
    let mut holders: Vec<Conn> = (0..4).map(|_| hold()).collect();
    // Once they hold every place, another body is refused at once. A holder
    // that reached the daemon while a check held the last place was itself
    // refused (answered): it is replaced, so the four places end up held.
    wait_until("a session body is refused while others are read", || {
        for h in holders.iter_mut() {
            if h.answered() {
                *h = hold();
            }
        }
        d.request("POST", "/v1/sessions", &[], b"not json").status == 429
    });
    let r = d.request("POST", "/v1/sessions/nope/tools/read", &[], b"{}");
    r.assert_error(429, "busy");
    assert!(r.header("retry-after").is_some());
    drop(holders);
    wait_until("places come back", || {
        d.request("POST", "/v1/sessions", &[], b"not json").status == 400
    });
}

/// A gated job that then prints `n` bytes of `byte` on stdout.
fn gated_flood(id: &str, ws: &Path, byte: u8, n: usize) -> Value {
    let script = format!(
        "while [ ! -e go ]; do sleep 0.05; done; exec perl -e 'print STDOUT qq(\\x{byte:02x}) x {n}'"
    );
    json!({
        "execution_id": id,
        "workspace": ws,
        "argv": ["sh", "-c", script],
    })
}

#[test]
fn output_with_no_character_boundary_is_cut_into_full_events() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "cont");
    let n = 1 << 20;
    // Only UTF-8 continuation bytes: no character boundary anywhere.
    let r = d.post(
        "/v1/executions?wait=false",
        &gated_flood("cont-1", &ws, 0x80, n),
    );
    assert_eq!(r.status, 202, "{:#}", r.json());
    let mut readers: Vec<Lines> = (0..6)
        .map(|_| Lines::open(&d, "GET", "/v1/executions/cont-1/events", &[], b""))
        .collect();
    open_gate(&ws);
    // The readers are attached and take nothing yet: the daemon answers.
    let r = d.get("/v1/executions/cont-1?wait=60s");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(d.get("/v1/health").status, 200);
    for reader in &mut readers {
        let events = reader.rest();
        let out: Vec<&str> = events
            .iter()
            .filter(|e| e["event"] == "stdout")
            .map(|e| e["data"].as_str().unwrap())
            .collect();
        // Every byte is one U+FFFD; events are about 16 KiB of output each
        // (64 for 1 MiB), not 4 bytes each (262144).
        let chars: usize = out.iter().map(|s| s.chars().count()).sum();
        assert_eq!(chars, n);
        assert!(out.iter().all(|s| s.chars().all(|c| c == '\u{FFFD}')));
        assert!(
            (n / (16 * 1024)..=4 * n / (16 * 1024)).contains(&out.len()),
            "{} stdout events for {n} bytes",
            out.len()
        );
        assert_eq!(events.last().unwrap()["event"], "exit");
    }
    assert_eq!(d.get("/v1/health").status, 200);
}

/// The daemon's peak resident memory (VmHWM), in bytes.
fn peak_rss(d: &Daemon) -> u64 {
    let pid = d.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    kib * 1024
}

#[test]
fn readers_of_a_large_result_share_one_document() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "big");
    // 16 MiB of \x01 per stream: each becomes "\u0001" (6 bytes) in JSON.
    let n: u64 = 16 << 20;
    let r = d.post(
        "/v1/executions?wait=false",
        &json!({
            "execution_id": "big-1",
            "workspace": ws,
            "argv": ["perl", "-e",
                format!("my $b = qq(\\x01) x 65536; for (1..{}) {{ print STDOUT $b; print STDERR $b }}", n >> 16)],
            "limits": {"output_bytes": n},
        }),
    );
    assert_eq!(r.status, 202, "{:#}", r.json());
    // Four slow readers of the result: each takes its head and 64 KiB,
    // then waits while the others take theirs.
    let mut readers: Vec<(BufReader<Conn>, u64)> = (0..4)
        .map(|_| {
            let mut conn = d.connect();
            send(
                &mut conn,
                "GET",
                "/v1/executions/big-1?wait=60s",
                &[],
                b"",
                None,
            );
            BufReader::new(conn)
        })
        .map(|mut r| {
            let (status, headers) = read_head(&mut r);
            assert_eq!(status, 200);
            let len = Resp {
                status,
                headers,
                body: Vec::new(),
            }
            .header("content-length")
            .map(|l| l.parse::<u64>().unwrap())
            .expect("a result document has a Content-Length");
            (r, len)
        })
        .collect();
    let doc = readers[0].1;
    assert!(
        doc > 12 * n,
        "a {doc}-byte document for 2 × {n} bytes of \\x01"
    );
    for (r, _) in &mut readers {
        let mut first = vec![0; 64 * 1024];
        r.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"{\""));
    }
    // And one re-attached reader of the exit event alone.
    let last = d
        .get("/v1/executions/big-1/events?after=1000000000")
        .assert_error(400, "bad_request");
    let last: u64 = last
        .split("(seq ")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no last seq in {last:?}"));
    let mut conn = d.connect();
    let path = format!("/v1/executions/big-1/events?after={}", last - 1);
    send(&mut conn, "GET", &path, &[], b"", None);
    let mut r = BufReader::new(conn);
    let (status, headers) = read_head(&mut r);
    assert!(status == 200 && is_chunked(&headers), "status {status}");
    let mut exit = Chunked::new(r);
    let want = format!("{{\"event\":\"exit\",\"seq\":{last},\"result\":{{");
    let mut head = vec![0u8; want.len()];
    exit.read_exact(&mut head).unwrap();
    assert_eq!(String::from_utf8_lossy(&head), want);
    for (r, len) in &mut readers {
        let got = std::io::copy(&mut r.take(*len - 64 * 1024), &mut std::io::sink()).unwrap();
        assert_eq!(got, *len - 64 * 1024);
    }
    // The exit line is the same document, then "}\n", and the stream ends.
    let mut rest = Vec::new();
    exit.read_to_end(&mut rest).unwrap();
    assert_eq!(
        (head.len() + rest.len()) as u64,
        want.len() as u64 - 1 + doc + 2
    );
    assert!(rest.ends_with(b"}}\n"));
    // One document plus the output held twice (log, result) and the
    // daemon itself (about 290 MiB here); a copy per reader was over 900.
    let peak = peak_rss(&d);
    eprintln!(
        "daemon VmHWM {} MiB, document {} MiB",
        peak >> 20,
        doc >> 20
    );
    assert!(
        peak < doc + (160 << 20),
        "the daemon peaked at {peak} bytes for a {doc}-byte document read 5 times"
    );
}
