//! Nothing acknowledged is lost at a restart, even after `kill -9`
//! (docs/durability.md): a finished execution answers with the same bytes
//! and its events re-attach; one that was queued or running answers
//! `failed` / `interrupted` saying whether its command had started; a
//! retry of an acknowledged id never runs the command again; a damaged
//! store stops the start with the way out; a full disk refuses new work
//! and still serves reads.

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::{gated_job, open_gate, workspace_in, world_with_roots, SmallDataDisk};

/// A job that appends a line to `ran` in its workspace (one line per run
/// of its command), then prints two lines.
fn counted_job(id: &str, ws: &std::path::Path) -> Value {
    json!({
        "execution_id": id,
        "workspace": ws,
        "argv": ["sh", "-c", "echo run >> ran; echo one; echo two >&2"],
    })
}

/// The sentence of an `interrupted` result (asserted to be one).
fn interrupted(doc: &Value) -> &str {
    assert_eq!(doc["error"]["kind"], "interrupted", "{doc:#}");
    doc["error"]["message"].as_str().unwrap()
}

/// How many times the commands of `ws` ran.
fn runs(ws: &std::path::Path) -> usize {
    std::fs::read_to_string(ws.join("ran"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_finished_execution_answers_the_same_bytes_and_events_after_kill_9() {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let mut d = Daemon::start(&w, &["--root", &root]);
    let ws = workspace_in(&w, "finished");
    let job = counted_job("kept", &ws);
    let r = d.post("/v1/executions", &job);
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["stdout"], "one\n");
    let before = d.get("/v1/executions/kept");
    let events_before = d.get("/v1/executions/kept/events");
    assert_eq!(events_before.status, 200);
    // A large result and event log are kept as files beside the store.
    let big = json!({"execution_id": "big", "argv": ["sh", "-c", "seq 1 40000; seq 1 20000 >&2"]});
    assert_eq!(d.post("/v1/executions", &big).status, 200);
    let big_before = d.get("/v1/executions/big");
    let big_events = d.get("/v1/executions/big/events");
    assert!(big_before.body.len() > 200_000);
    d.signal_and_wait(libc::SIGKILL);

    let mut d = Daemon::start(&w, &["--root", &root]);
    let after = d.get("/v1/executions/kept");
    assert_eq!(after.status, 200, "{:#}", after.json());
    assert_eq!(after.body, before.body, "the same bytes after the restart");
    let events_after = d.get("/v1/executions/kept/events");
    assert_eq!(events_after.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&events_after.body),
        String::from_utf8_lossy(&events_before.body),
        "the same events after the restart"
    );
    let blobs = std::fs::read_dir(w.data_dir().join("state/blobs")).unwrap();
    assert_eq!(blobs.count(), 2, "the big result and its events");
    assert_eq!(d.get("/v1/executions/big").body, big_before.body);
    assert!(d.get("/v1/executions/big/events").body == big_events.body);
    // Resuming after the first event gives the rest.
    let resumed = d.get("/v1/executions/kept/events?after=1");
    let text = String::from_utf8_lossy(&resumed.body);
    assert!(
        !text.contains("\"started\"") && text.contains("\"exit\""),
        "{text}"
    );
    // Listed as it was.
    let list = d.get("/v1/executions").json();
    assert_eq!(list["executions"][1]["execution_id"], "kept", "{list:#}");
    assert_eq!(list["executions"][1]["status"], "exited", "{list:#}");

    // A retry of the same job is answered from the record, never run.
    let retry = d.post("/v1/executions", &job);
    assert_eq!(retry.status, 200);
    assert_eq!(retry.body, before.body);
    let detached = d.post("/v1/executions?wait=false", &job);
    assert_eq!(detached.status, 200, "{:#}", detached.json());
    assert_eq!(runs(&ws), 1, "the command ran again");
    // Another job under the id is still a conflict.
    let mut other = job.clone();
    other["argv"] = json!(["true"]);
    d.post("/v1/executions", &other)
        .assert_error(409, "execution_id_in_use");
    assert!(d.stop().success());
}

/// What retention dropped stays dropped after a restart, and an id it
/// dropped runs again as a new execution whose result is the one kept:
/// the store removes and replaces records by the admission order the
/// daemon gave them. (A drop is not waited for: `kill -9` may undo the
/// last ones, which the restart's own retention then makes again.)
#[test]
fn what_retention_dropped_stays_dropped_after_a_restart_and_a_reused_id_keeps_its_new_result() {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let args = ["--root", root.as_str(), "--retain", "2"];
    let mut d = Daemon::start(&w, &args);
    let ws = workspace_in(&w, "retained");
    let echo =
        |id: &str, text: &str| json!({"execution_id": id, "workspace": ws, "argv": ["echo", text]});
    for id in ["e1", "e2", "e3"] {
        assert_eq!(d.post("/v1/executions", &echo(id, id)).status, 200);
    }
    // e1 was dropped: its id is free, and a new job under it runs.
    assert_eq!(d.get("/v1/executions/e1").status, 404);
    let again = d.post("/v1/executions", &echo("e1", "again"));
    assert_eq!(again.status, 200, "{:#}", again.json());
    assert_eq!(again.json()["stdout"], "again\n");
    assert_eq!(d.post("/v1/executions", &echo("e4", "e4")).status, 200);
    assert!(d.stop().success());

    // Restarted with room for more: only what the store kept can show.
    let mut d = Daemon::start(&w, &["--root", root.as_str(), "--retain", "10"]);
    let list = d.get("/v1/executions").json();
    assert_eq!(listed_ids(&list), ["e4", "e1"], "{list:#}");
    for gone in ["e2", "e3"] {
        assert_eq!(
            d.get(&format!("/v1/executions/{gone}")).status,
            404,
            "{gone}"
        );
    }
    let e1 = d.get("/v1/executions/e1");
    assert_eq!(e1.status, 200);
    assert_eq!(
        e1.json()["stdout"],
        "again\n",
        "the first e1's result came back"
    );
    assert!(d.stop().success());
}

#[test]
fn queued_and_running_executions_become_interrupted_and_never_run_again() {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let args = ["--root", root.as_str(), "--max-running", "1"];
    let mut d = Daemon::start(&w, &args);
    let ws = workspace_in(&w, "interrupted");
    let m = marker(26);
    let mut running = gated_job("was-running", &ws);
    running["argv"] = json!([
        "sh",
        "-c",
        format!("echo run >> ran; while [ ! -e go ]; do sleep 0.05; done; sleep {m}")
    ]);
    let queued = counted_job("was-queued", &ws);
    assert_eq!(d.post("/v1/executions?wait=false", &running).status, 202);
    wait_until("the first job runs", || runs(&ws) == 1);
    assert_eq!(d.post("/v1/executions?wait=false", &queued).status, 202);
    assert_eq!(
        d.get("/v1/executions/was-queued").json()["status"],
        "queued"
    );
    d.signal_and_wait(libc::SIGKILL);
    wait_until("the sandbox to die with the daemon", || {
        processes_with(&m).is_empty()
    });

    let mut d = Daemon::start(&w, &args);
    assert!(
        w.executions_left().is_empty(),
        "not swept: {:?}",
        w.executions_left()
    );
    let was_running = d.get("/v1/executions/was-running");
    assert_eq!(was_running.status, 200, "{:#}", was_running.json());
    let doc = was_running.json();
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let message = interrupted(&doc);
    assert!(message.contains("had started"), "{message}");
    let was_queued = d.get("/v1/executions/was-queued").json();
    let message = interrupted(&was_queued);
    assert!(message.contains("never started"), "{message}");
    // Its events end with the exit that says so.
    let events = String::from_utf8(d.get("/v1/executions/was-running/events").body).unwrap();
    assert!(events.contains("\"interrupted\""), "{events}");

    // The orchestrator resubmits both: neither command runs again.
    open_gate(&ws);
    for job in [&running, &queued] {
        let r = d.post("/v1/executions", job);
        assert_eq!(r.status, 200, "{:#}", r.json());
        assert_eq!(r.json()["error"]["kind"], "interrupted");
    }
    assert_eq!(runs(&ws), 1, "a command ran twice");
    assert!(processes_with(&m).is_empty());
    // The log says how many it found.
    assert!(d.log().contains("interrupted=2"), "{}", d.log());
    assert!(d.stop().success());
}

#[test]
fn a_damaged_store_stops_the_start_with_the_way_out() {
    let w = World::new();
    let mut d = Daemon::start(&w, &[]);
    let r = d.post("/v1/executions", &json!({"argv": ["true"]}));
    assert_eq!(r.status, 200);
    assert!(d.stop().success());
    let file = w.data_dir().join("state/executions.redb");
    assert!(file.exists());
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[..16].fill(0);
    std::fs::write(&file, &bytes).unwrap();

    let out = Daemon::command(&w, &[]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot open the execution store") && err.contains("move it aside"),
        "{err}"
    );
    // Left as it was, for whoever looks at it.
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    // The documented way out: move it aside; the daemon starts afresh.
    std::fs::rename(&file, file.with_extension("redb.broken")).unwrap();
    let mut d = Daemon::start(&w, &[]);
    assert_eq!(d.get("/v1/health").status, 200);
    assert!(d.stop().success());
}

#[test]
fn a_full_disk_refuses_new_work_and_keeps_serving_reads() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let Some(disk) = SmallDataDisk::mount(&w) else {
        return;
    };
    let data = disk.0.clone();
    let mut d = Daemon::start(&w, &[]);
    let job = json!({"execution_id": "before", "argv": ["echo", "kept"]});
    let done = d.post("/v1/executions", &job);
    assert_eq!(done.status, 200, "{:#}", done.json());

    let fill = data.join("fill");
    let mut f = std::fs::File::create(&fill).unwrap();
    let block = vec![0u8; 1 << 20];
    use std::io::Write;
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..4096]).is_ok() {}
    drop(f);

    for path in ["/v1/executions", "/v1/executions?wait=false"] {
        let r = d.post(path, &json!({"argv": ["echo", "new"]}));
        let message = r.assert_error(503, "disk_full");
        assert!(message.contains("free space"), "{message}");
        assert!(r.header("retry-after").is_some(), "no Retry-After");
    }
    // Reads go on.
    let again = d.get("/v1/executions/before");
    assert_eq!(again.status, 200);
    assert_eq!(again.body, done.body);
    assert_eq!(d.get("/v1/executions").status, 200);
    assert_eq!(d.get("/v1/health").json()["status"], "disk_full");

    std::fs::remove_file(&fill).unwrap();
    let r = d.post("/v1/executions", &json!({"argv": ["echo", "new"]}));
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert!(d.stop().success());
}

/// A store of an earlier layout is moved to this version's at the start,
/// which needs about its size free: on a disk without that room the start
/// says the disk is full (not that the store is damaged, whose way out
/// is to move it aside and lose what it holds), and once space is freed
/// the move is made and nothing is lost.
#[test]
fn a_store_the_full_disk_has_no_room_to_move_is_said_so_and_left_as_it_was() {
    use skill_runner::daemon::store::Record;
    let w = World::new();
    let Some(disk) = SmallDataDisk::mount(&w) else {
        return;
    };
    let data = disk.0.clone();
    let mut d = Daemon::start(&w, &[]);
    assert!(d.stop().success());
    let file = data.join("state/executions.redb");
    std::fs::remove_file(&file).unwrap();
    // The second layout: a table per part, keyed by admission order.
    const RECORDS: redb::TableDefinition<u64, (&str, &[u8])> =
        redb::TableDefinition::new("records");
    const RESULTS: redb::TableDefinition<u64, &[u8]> =
        redb::TableDefinition::new("results-by-order");
    let ids: Vec<String> = (1..=40).map(|i| format!("exec-old-{i}")).collect();
    {
        let db = redb::Database::create(&file).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut records = txn.open_table(RECORDS).unwrap();
            let mut results = txn.open_table(RESULTS).unwrap();
            let result = vec![b'r'; 256 << 10];
            for (order, id) in (1..).zip(&ids) {
                let record = Record::queued("digest", order, std::time::SystemTime::now())
                    .finished("exited".into(), Some(0), "2026-01-01T00:00:00Z".into());
                let json = serde_json::to_vec(&record).unwrap();
                records
                    .insert(order, (id.as_str(), json.as_slice()))
                    .unwrap();
                results.insert(order, result.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 8 << 20, "{size}");
    // Leave less room than the store's size.
    let fill = data.join("fill");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&fill).unwrap();
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        f.set_len(f.metadata().unwrap().len() - (4 << 20)).unwrap();
    }
    let out = Daemon::command(&w, &[]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("disk is full") && err.contains("cannot move the execution store"),
        "{err}"
    );
    assert!(!err.contains("move it aside"), "{err}");

    std::fs::remove_file(&fill).unwrap();
    let mut d = Daemon::start(&w, &[]);
    let listed = d.get("/v1/executions?limit=100").json();
    let mut got: Vec<&str> = listed_ids(&listed);
    got.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(got, want, "{listed:#}");
    let one = d.get("/v1/executions/exec-old-7");
    assert_eq!(one.status, 200, "{}", text(&one.body));
    assert!(d.stop().success());
}

#[test]
fn a_blocking_call_is_durable_before_it_starts_when_the_caller_chose_its_id_and_said_unknown_when_not(
) {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let args = ["--root", root.as_str()];
    let mut d = Daemon::start(&w, &args);
    let quiet_ws = workspace_in(&w, "unannounced");
    let named_ws = workspace_in(&w, "named");
    let m = marker(26);
    let gated = |ws: &std::path::Path| {
        json!({
            "workspace": ws,
            "argv": ["sh", "-c", format!("echo run >> ran; while [ ! -e go ]; do sleep 0.05; done; sleep {m}")],
        })
    };
    // Blocking calls whose answers never come: the daemon dies first.
    let call = |job: &Value| d.post_unanswered("/v1/executions", job);
    // The daemon chooses the first one's id: it is in no answer yet (and
    // nobody lists it: a listing would announce it).
    let _quiet = call(&gated(&quiet_ws));
    wait_until("the unannounced job runs", || runs(&quiet_ws) == 1);
    // The caller chose the second one's id, and can retry with it: its
    // move to running is durable before its command starts (and with it
    // everything committed before, the first one's records too).
    let mut named = gated(&named_ws);
    named["execution_id"] = json!("named-blocking");
    let _named = call(&named);
    wait_until("the named job runs", || runs(&named_ws) == 1);
    d.signal_and_wait(libc::SIGKILL);
    wait_until("the sandboxes to die with the daemon", || {
        processes_with(&m).is_empty()
    });

    let mut d = Daemon::start(&w, &args);
    let doc = d.get("/v1/executions/named-blocking").json();
    let message = interrupted(&doc);
    assert!(message.contains("had started"), "{message}");
    // The retry gets that execution; the command does not run again.
    open_gate(&named_ws);
    let r = d.post("/v1/executions", &named);
    assert_eq!(r.json()["error"]["kind"], "interrupted", "{:#}", r.json());
    assert_eq!(runs(&named_ws), 1, "a command ran twice");
    // The unannounced one's record does not claim to know.
    let listed = d.get("/v1/executions").json();
    let quiet_id = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_owned())
        .find(|id| id != "named-blocking")
        .expect("the unannounced execution is in the store");
    let doc = d.get(&format!("/v1/executions/{quiet_id}")).json();
    let message = interrupted(&doc);
    assert!(message.contains("was not recorded"), "{message}");
    assert!(!message.contains("never started"), "{message}");
    assert!(d.stop().success());
}

#[test]
fn an_unannounced_execution_a_client_was_shown_is_not_forgotten_after_kill_9() {
    if !require_sandbox() {
        return;
    }
    let (w, root) = world_with_roots();
    let args = ["--root", root.as_str()];
    let mut d = Daemon::start(&w, &args);
    let ws = workspace_in(&w, "shown");
    let m = marker(26);
    let job = json!({
        "workspace": ws,
        "argv": ["sh", "-c", format!("echo run >> ran; sleep {m}")],
    });
    // A blocking call whose id the daemon chose, and whose answer never
    // comes.
    let _conn = d.post_unanswered("/v1/executions", &job);
    wait_until("the command runs", || runs(&ws) == 1);
    // Another client lists it and is told it is running, as a 202 would.
    let listed = d.get("/v1/executions?status=running").json();
    let id = listed["executions"][0]["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = d.get(&format!("/v1/executions/{id}"));
    assert_eq!(shown.status, 202, "{:#}", shown.json());
    // No other durable commit happens before the crash.
    d.signal_and_wait(libc::SIGKILL);
    wait_until("the sandbox to die with the daemon", || {
        processes_with(&m).is_empty()
    });
    let mut d = Daemon::start(&w, &args);
    let after = d.get(&format!("/v1/executions/{id}"));
    assert_eq!(
        after.status,
        200,
        "an id answered 202 is unknown after the crash, and its command ran: {:#}",
        after.json()
    );
    let doc = after.json();
    let message = interrupted(&doc);
    assert!(message.contains("had started"), "{message}");
    assert!(d.stop().success());
}
