//! Session file downloads are bounded: at most `max_downloads` are
//! streamed at once, across all sessions, and one more is refused `429
//! busy` with `Retry-After` instead of taking another file descriptor
//! and buffer (docs/workspaces.md, "Bounds").

use std::io::{BufReader, Read};

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

/// A client that stops reading holds its download's place; the next
/// download is refused with `Retry-After` and the JSON sentence; once the
/// first is read to its end, downloads are served again.
#[test]
fn a_download_past_max_downloads_is_refused_until_one_ends() {
    let w = World::new();
    let d = Daemon::start(&w, &["--max-downloads", "1"]);
    let dir = w.skill("tiny", &[("scripts/hi.sh", b"echo hi\n")]);
    let (bundle, binding) = bundle_of("tiny", &dir);
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{:#}", r.json());
    let (path, big) = big_file(&d, &[binding]);
    let (mut slow, headers) = slow_download(&d, &path);

    let r = d.get(&path);
    let msg = r.assert_error(429, "busy");
    assert!(msg.contains("max_downloads 1"), "{msg}");
    assert_eq!(r.header("retry-after"), Some("1"));

    // Read to its end, the first gives its place back.
    let mut got = Vec::new();
    if is_chunked(&headers) {
        Chunked::new(slow).read_to_end(&mut got).unwrap();
    } else {
        slow.read_to_end(&mut got).unwrap();
    }
    assert!(got == big, "the held download was served whole");
    wait_until("a download is served again", || d.get(&path).status == 200);
    assert_eq!(d.get(&path).body, big);
}

/// A client that takes nothing of its download for `stall_timeout` is
/// treated as gone: its connection is closed and its place given back, so
/// it cannot hold `max_downloads` (or the file and buffers) while it
/// lingers, and what it reads later is cut short, never passed off as the
/// whole file.
#[test]
fn a_stalled_download_gives_its_place_back_and_is_cut_off() {
    let w = World::new();
    let d = Daemon::start(&w, &["--max-downloads", "1", "--stall-timeout", "1s"]);
    let (path, big) = big_file(&d, &[]);
    let (mut slow, headers) = slow_download(&d, &path);
    d.get(&path).assert_error(429, "busy");

    // It reads nothing: within a few stall timeouts the next is served,
    // and the daemon has closed the stalled connection (it counts only
    // the connection that asks).
    wait_until("the stalled download's place is given back", || {
        d.get(&path).status == 200
    });
    wait_until("the stalled download's connection is closed", || {
        d.metric("skill_runner_connections_open") <= 1.0
    });
    // The daemon closed its connection: what is buffered is read, then
    // the stream ends (a connection left open would time this read out,
    // after the connection's PATIENCE).
    let mut got = Vec::new();
    let read = if is_chunked(&headers) {
        Chunked::new(slow).read_to_end(&mut got)
    } else {
        slow.read_to_end(&mut got)
    };
    if let Err(e) = &read {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the stalled download's connection was left open: {e}"
        );
    }
    assert!(
        got.len() < big.len(),
        "a stalled download was served whole ({} bytes)",
        got.len()
    );
}

/// A managed session with `skills` and a file of 8 MiB in its workspace
/// (larger than any socket buffer: a download of it stays open while its
/// client does not read); the file's route and its bytes.
fn big_file(d: &Daemon, skills: &[serde_json::Value]) -> (String, Vec<u8>) {
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": skills, "tools": ["bash"], "workspace": "managed"}),
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let path = format!("/v1/sessions/{id}/files/big.bin");
    let r = d.request(
        "PUT",
        &path,
        &[("Content-Type", "application/octet-stream")],
        &big,
    );
    assert_eq!(r.status, 200, "{:#}", r.json());
    (path, big)
}

/// A download of `path` whose head is read and whose body is not (yet).
fn slow_download(d: &Daemon, path: &str) -> (BufReader<Conn>, Vec<(String, String)>) {
    let mut slow = d.connect();
    send(&mut slow, "GET", path, &[], b"", None);
    let mut slow = BufReader::new(slow);
    let (status, headers) = read_head(&mut slow);
    assert_eq!(status, 200);
    (slow, headers)
}
