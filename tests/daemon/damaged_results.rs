//! A stored result file that is not what its record says is never
//! trusted after a restart (docs/durability.md, "Damaged files"): its
//! execution answers `500 store_corrupted` with a sentence, its id is
//! still taken (a retry never runs it), and the others answer as before.

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn a_stored_result_file_grown_after_a_kill_answers_store_corrupted() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let mut d = Daemon::start(&w, &[]);
    // Large enough to be kept as files beside the store.
    let big = json!({"execution_id": "big", "argv": ["sh", "-c", "seq 1 40000"]});
    assert_eq!(d.post("/v1/executions", &big).status, 200);
    let small = json!({"execution_id": "small", "argv": ["echo", "hi"]});
    assert_eq!(d.post("/v1/executions", &small).status, 200);
    let small_before = d.get("/v1/executions/small").body;
    d.signal_and_wait(libc::SIGKILL);

    // Someone appends to the big result's file while the daemon is down.
    let blobs = w.data_dir().join("state/blobs");
    let result = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "result"))
        .expect("the big result is a file");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&result)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"status\":\"exited\"}").unwrap();
    drop(f);

    let mut d = Daemon::start(&w, &[]);
    let msg = d
        .get("/v1/executions/big")
        .assert_error(500, "store_corrupted");
    assert!(msg.contains("damaged") && msg.contains("\"big\""), "{msg}");
    d.get("/v1/executions/big/events")
        .assert_error(500, "store_corrupted");
    // Its id is still taken: a retry is answered, never run again.
    d.post("/v1/executions", &big)
        .assert_error(500, "store_corrupted");
    assert_eq!(d.get("/v1/executions/small").body, small_before);
    let log = d.log();
    assert!(
        log.contains("ERROR") && log.contains(&result.display().to_string()),
        "logged at ERROR with its path: {log}"
    );
    assert!(d.stop().success());
}
