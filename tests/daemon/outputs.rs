//! Files in and out through the daemon alone: a job's `files` reach its
//! command, its kept outputs are served at
//! `GET /v1/executions/{id}/outputs/{path}` as bytes while its record is
//! retained and removed with it; only listed, kept paths are served; files
//! over the daemon's bounds are refused and leave nothing.

use base64::Engine;
use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn kept_folders(w: &World) -> usize {
    std::fs::read_dir(w.data_dir().join("outputs"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn kept_outputs_are_served_as_bytes_and_nothing_else_is() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let script = "mkdir out && sort in.txt > out/sorted.txt && cat big.bin > out/big.bin \
                  && ln -s /etc/passwd out/pw";
    let r = d.post(
        "/v1/executions",
        &json!({
            "execution_id": "files-1",
            "argv": ["/bin/sh", "-c", script],
            "files": [{"path": "in.txt", "content": b64(b"b\na\n")},
                      {"path": "big.bin", "content": b64(&big)}],
            "outputs": ["out/*"],
        }),
    );
    let doc = r.json();
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let list = doc["outputs"].as_array().unwrap();
    let sorted = list.iter().find(|o| o["path"] == "out/sorted.txt").unwrap();
    assert_eq!(sorted["content"], b64(b"a\nb\n"));
    let big_out = list.iter().find(|o| o["path"] == "out/big.bin").unwrap();
    assert_eq!(big_out["truncated"], true);
    assert_eq!(
        big_out["sha256"],
        skill_runner::package::hash::file_hash(&big)
    );

    let got = d.get("/v1/executions/files-1/outputs/out/big.bin");
    assert_eq!(got.status, 200);
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    assert_eq!(got.body, big);
    let got = d.get("/v1/executions/files-1/outputs/out/sorted.txt");
    assert_eq!(got.body, b"a\nb\n");
    // Listed but not kept (a symlink), never listed, or leaving the store.
    for path in [
        "out/pw",
        "in.txt",
        "out/../in.txt",
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
    ] {
        let r = d.get(&format!("/v1/executions/files-1/outputs/{path}"));
        assert_eq!(r.status, 404, "{path}: {:?}", text(&r.body));
        r.assert_error(404, "not_found");
    }
    d.get("/v1/executions/nope/outputs/x")
        .assert_error(404, "not_found");
    assert_eq!(kept_folders(&w), 1);
}

/// The kept bytes go with the execution's record: once retention drops
/// it, its outputs are 404 and their folder is gone.
#[test]
fn kept_outputs_are_removed_with_their_record() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--retain", "1"]);
    for id in ["first", "second"] {
        let r = d.post(
            "/v1/executions",
            &json!({"execution_id": id, "argv": ["/bin/sh", "-c", "echo $0 > o.txt", id],
                    "outputs": ["o.txt"]}),
        );
        assert_eq!(r.json()["exit_code"], 0, "{:#}", r.json());
    }
    d.get("/v1/executions/first/outputs/o.txt")
        .assert_error(404, "not_found");
    assert_eq!(
        d.get("/v1/executions/second/outputs/o.txt").body,
        b"second\n"
    );
    assert_eq!(
        kept_folders(&w),
        1,
        "the first execution's outputs are left"
    );
}

/// The daemon's bounds on `files` are its flags; a job over them is
/// refused before its workspace exists.
#[test]
fn files_over_the_daemons_bounds_are_refused_and_leave_nothing() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--max-files", "1", "--max-file-bytes", "4"]);
    let file = |p: &str, c: &[u8]| json!({"path": p, "content": b64(c)});
    for (files, want) in [
        (vec![file("a", b"1"), file("b", b"2")], "at most 1"),
        (vec![file("a", b"12345")], "at most 4 bytes per file"),
    ] {
        let r = d.post(
            "/v1/executions",
            &json!({"argv": ["/bin/true"], "files": files}),
        );
        let doc = r.json();
        assert_eq!(doc["status"], "rejected", "{doc:#}");
        assert_eq!(doc["error"]["kind"], "bad_job");
        assert!(
            doc["error"]["message"].as_str().unwrap().contains(want),
            "{doc:#}"
        );
    }
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());
    assert_eq!(kept_folders(&w), 0);
}

/// Kept outputs outlive a `kill -9` of the daemon with their record: the
/// restarted daemon serves the same bytes; a folder no record holds is
/// swept at the start (unless it is fresh: a command-line run sharing the
/// data dir may be filling it).
#[test]
fn kept_outputs_are_served_after_a_restart_and_orphans_swept() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let mut d = Daemon::start(&w, &[]);
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let r = d.post(
        "/v1/executions",
        &json!({
            "execution_id": "kept-across",
            "argv": ["/bin/sh", "-c", "mkdir out && cp big.bin out/big.bin"],
            "files": [{"path": "big.bin", "content": b64(&big)}],
            "outputs": ["out/*"],
        }),
    );
    assert_eq!(r.json()["exit_code"], 0, "{:#}", r.json());
    assert_eq!(kept_folders(&w), 1);
    let outputs = w.data_dir().join("outputs");
    let stale = outputs.join("left-by-a-crash");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("x"), b"x").unwrap();
    let aged = std::process::Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(aged.success());
    let fresh = outputs.join("being-filled");
    std::fs::create_dir(&fresh).unwrap();
    d.signal_and_wait(libc::SIGKILL);

    let d = Daemon::start(&w, &[]);
    let got = d.get("/v1/executions/kept-across/outputs/out/big.bin");
    assert_eq!(got.status, 200, "{:?}", text(&got.body));
    assert_eq!(got.body, big, "the same bytes after the restart");
    assert!(!stale.exists(), "a folder no record holds is swept");
    assert!(fresh.exists(), "a fresh folder is left to its run");
    assert_eq!(kept_folders(&w), 2);
}
