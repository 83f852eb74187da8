//! Managed session workspaces (docs/workspaces.md), through the daemon
//! alone: no folder is shared between the client and the daemon's host.
//! Files go in and out over HTTP, jobs of one session run in its
//! workspace one at a time in order of admission, and what an attacker
//! would try (traversal paths, oversized uploads, links and FIFOs planted
//! by a command, concurrent jobs, deleting a busy session) is refused or
//! bounded with a sentence and leaves nothing behind.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::*;

/// The report script of the fixture skill: counts the rows of a CSV and
/// sums its second column into a Markdown report.
const REPORT: &[u8] = b"set -e\nin=$1; out=$2\nmkdir -p \"$(dirname \"$out\")\"\nrows=$(tail -n +2 \"$in\" | wc -l)\nsum=$(tail -n +2 \"$in\" | awk -F, '{s+=$2} END {print s}')\nprintf '# Report\\n\\nrows: %s\\nsum: %s\\n' \"$rows\" \"$sum\" > \"$out\"\necho wrote \"$out\"\n";

/// A daemon with the csv-report skill published, and a managed session
/// of it; the session id.
fn managed(w: &World, args: &[&str]) -> (Daemon, String) {
    let d = Daemon::start(w, args);
    let dir = w.skill("csv-report", &[("scripts/report.sh", REPORT)]);
    let (bundle, binding) = bundle_of("csv-report", &dir);
    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{:#}", r.json());
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [binding], "tools": ["bash"], "workspace": "managed"}),
    );
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["workspace"], "managed", "{doc:#}");
    (d, doc["id"].as_str().unwrap().to_owned())
}

fn put(d: &Daemon, id: &str, path: &str, bytes: &[u8]) -> Resp {
    d.request(
        "PUT",
        &format!("/v1/sessions/{id}/files/{path}"),
        &[("Content-Type", "application/octet-stream")],
        bytes,
    )
}

fn folder(w: &World, id: &str) -> PathBuf {
    w.data_dir().join("workspaces").join(id)
}

/// Every entry below `dir`, relative, sorted.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            let path = e.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

fn run(d: &Daemon, job: Value) -> Value {
    let r = d.post("/v1/executions", &job);
    let res = r.json();
    assert_eq!(r.status, 200, "{res:#}");
    res
}

/// Upload a CSV, run the skill's script on it, run a second command that
/// reads the first one's output, download the result: the whole round
/// through the daemon, in a workspace the runner made and owns.
#[test]
fn a_client_uploads_runs_twice_and_downloads_through_the_daemon_alone() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    // The runner made it, for the sandbox user: no chown by anyone.
    let meta = std::fs::symlink_metadata(folder(&w, &id)).unwrap();
    assert!(meta.is_dir());
    if let Some(uid) = sandbox_uid() {
        assert_eq!(meta.uid(), uid, "the workspace is the sandbox user's");
    }

    let r = put(&d, &id, "in/data.csv", b"name,amount\na,3\nb,4\n");
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["size"], 20);
    assert_eq!(doc["path"], "in/data.csv");
    assert_eq!(doc["sha256"].as_str().unwrap().len(), 64);

    let res = run(
        &d,
        json!({"session": id, "argv": ["sh", "/skills/csv-report/scripts/report.sh", "in/data.csv", "out/report.md"]}),
    );
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["exit_code"], 0, "{res:#}");
    let res = run(
        &d,
        json!({"session": id, "argv": ["sh", "-c", "grep sum: out/report.md > out/summary.txt && cat out/summary.txt"]}),
    );
    assert_eq!(res["stdout"], "sum: 7\n", "{res:#}");

    let r = d.get(&format!("/v1/sessions/{id}/files/out/summary.txt"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body, b"sum: 7\n");
    let r = d.get(&format!("/v1/sessions/{id}/files?prefix=out/"));
    let listing = r.json();
    assert_eq!(r.status, 200, "{listing:#}");
    let paths: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["out/report.md", "out/summary.txt"], "{listing:#}");
    assert_eq!(listing["truncated"], false);

    // A file the command made can be replaced by the client, and the
    // next command sees it (the runner gave it to the sandbox user).
    let r = put(&d, &id, "out/summary.txt", b"replaced\n");
    assert_eq!(r.status, 200);
    let res = run(
        &d,
        json!({"session": id, "argv": ["sh", "-c", "cat out/summary.txt; echo more >> out/summary.txt"]}),
    );
    assert_eq!(res["stdout"], "replaced\n", "{res:#}");
    assert_eq!(res["exit_code"], 0, "{res:#}");

    let r = d.delete(&format!("/v1/sessions/{id}/files/out/summary.txt"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    let r = d.get(&format!("/v1/sessions/{id}/files/out/summary.txt"));
    r.assert_error(404, "not_found");

    // Deleted with its session.
    let r = d.delete(&format!("/v1/sessions/{id}"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert!(
        !folder(&w, &id).exists(),
        "the workspace outlived its session"
    );
    let r = d.get(&format!("/v1/sessions/{id}/files?prefix="));
    r.assert_error(404, "not_found");
}

/// `..`, absolute, NUL, empty and percent-encoded traversal paths are
/// refused with a sentence, and nothing is written anywhere.
#[test]
fn traversal_paths_are_refused_and_nothing_is_written() {
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    for path in [
        "../escape",
        "a/../../escape",
        "%2E%2E/escape",
        "..%2Fescape",
        "a%2F..%2F..%2Fescape",
        "%2Fetc%2Fpasswd",
        "a%00b",
        "a//b",
        "./a",
        "a%5Cb",
    ] {
        let r = put(&d, &id, path, b"x");
        let msg = r.assert_error(400, "bad_request");
        assert!(
            msg.contains("not an admissible workspace path"),
            "{path}: {msg}"
        );
        let r = d.get(&format!("/v1/sessions/{id}/files/{path}"));
        r.assert_error(400, "bad_request");
        let r = d.delete(&format!("/v1/sessions/{id}/files/{path}"));
        r.assert_error(400, "bad_request");
    }
    // An empty path names no route: refused with a sentence too.
    let r = put(&d, &id, "", b"x");
    assert_eq!(r.status, 404, "{:#}", r.json());
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no route"));
    let r = d.get(&format!("/v1/sessions/{id}/files?prefix=/etc"));
    r.assert_error(400, "bad_request");
    assert!(
        tree(&folder(&w, &id)).is_empty(),
        "{:?}",
        tree(&folder(&w, &id))
    );
    let workspaces = tree(&w.data_dir().join("workspaces"));
    assert_eq!(workspaces, std::slice::from_ref(&id));
    assert!(!w.data_dir().join("escape").exists());
    assert!(!w.path().join("escape").exists());
    // A session without a managed workspace has no files.
    let r = d.post("/v1/sessions", &json!({"skills": [], "tools": []}));
    let plain = r.json()["id"].as_str().unwrap().to_owned();
    let msg = put(&d, &plain, "a", b"x").assert_error(404, "not_found");
    assert!(msg.contains("no managed workspace"), "{msg}");
    // Not a file's bytes: refused before the body is read.
    let r = d.request(
        "PUT",
        &format!("/v1/sessions/{id}/files/a.json"),
        &[("Content-Type", "application/json")],
        b"{}",
    );
    r.assert_error(415, "unsupported_media_type");
}

/// An upload over the file limit, or one that would take the workspace
/// past `workspace_bytes`, is 413 with a sentence and leaves no file, no
/// temporary file and no folder behind.
#[test]
fn an_upload_over_a_limit_leaves_nothing_behind() {
    let w = World::new();
    let (d, id) = managed(
        &w,
        &["--file-body-limit", "8KiB", "--workspace-bytes", "64KiB"],
    );
    let r = put(&d, &id, "deep/new/big.bin", &[7u8; 9000]);
    let msg = r.assert_error(413, "body_too_large");
    assert!(msg.contains("8192"), "{msg}");
    assert!(
        tree(&folder(&w, &id)).is_empty(),
        "{:?}",
        tree(&folder(&w, &id))
    );

    // Within the file limit, but not within the workspace's.
    let mut refused = None;
    for i in 0..20 {
        let r = put(&d, &id, &format!("f{i}"), &[1u8; 8000]);
        if r.status != 200 {
            refused = Some((i, r));
            break;
        }
    }
    let (i, r) = refused.expect("workspace_bytes never refused an upload");
    let msg = r.assert_error(413, "body_too_large");
    assert!(msg.contains("workspace_bytes"), "{msg}");
    let left = tree(&folder(&w, &id));
    assert_eq!(left.len(), i, "{left:?}");
    assert!(!left.contains(&format!("f{i}")), "{left:?}");
    assert!(left.iter().all(|f| !f.ends_with(".part")), "{left:?}");
}

/// What a command plants in its workspace (a symlink or a hard link to
/// another file, a FIFO, a folder link) is refused when a client fetches
/// it, with a sentence, and a FIFO never blocks the daemon.
#[test]
fn links_and_fifos_a_command_plants_are_refused_to_clients() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    let res = run(
        &d,
        json!({"session": id, "argv": ["sh", "-c", "ln -s /etc/passwd passwd; ln -s / root; echo mine > a; ln a twin; ln /etc/hostname host 2>/dev/null; mkfifo pipe; echo planted"]}),
    );
    assert_eq!(res["stdout"], "planted\n", "{res:#}");
    for (path, says) in [
        ("passwd", "is a symlink"),
        ("root/etc/passwd", "passes through a symlink"),
        ("twin", "hard links"),
        ("a", "hard links"),
        ("pipe", "is a FIFO"),
    ] {
        let r = d.get(&format!("/v1/sessions/{id}/files/{path}"));
        let msg = r.assert_error(409, "conflict");
        assert!(msg.contains(says), "{path}: {msg}");
    }
    // A folder the command locked: served (a root daemon) or refused with a
    // sentence (the daemon's own user), never a host fault.
    run(
        &d,
        json!({"session": id, "argv": ["sh", "-c", "mkdir locked; echo x > locked/f; chmod 000 locked"]}),
    );
    let r = d.get(&format!("/v1/sessions/{id}/files/locked/f"));
    assert!(
        r.status == 200 || r.status == 409,
        "{}: {:?}",
        r.status,
        r.body
    );
    // No link reached a host file across the workspace's mount.
    assert!(!folder(&w, &id).join("host").exists());
    // Still answering, and the listing holds regular files only.
    assert_eq!(d.get("/v1/health").status, 200);
    let listing = d.get(&format!("/v1/sessions/{id}/files")).json();
    let paths: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths == ["a", "twin"] || paths == ["a", "locked/f", "twin"],
        "{listing:#}"
    );
    let r = d.get(&format!("/v1/sessions/{id}/files?prefix=root/etc/"));
    let msg = r.assert_error(409, "conflict");
    assert!(msg.contains("passes through a symlink"), "{msg}");
    // An upload through the planted folder link is refused; the link is
    // replaced, never followed, by an upload onto it.
    let r = put(&d, &id, "root/tmp/planted", b"x");
    r.assert_error(409, "conflict");
    assert!(!std::path::Path::new("/tmp/planted").exists());
    let before = std::fs::read("/etc/passwd").unwrap();
    assert_eq!(put(&d, &id, "passwd", b"mine").status, 200);
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), before);
}

/// Jobs of one session run one at a time in order of admission: a second
/// waits (queued) while the first runs, a third with
/// `session_wait=false` is refused (409) and never queued, and uploads,
/// file deletions and the session's deletion are refused while a job
/// holds the workspace.
#[test]
fn jobs_of_one_session_take_turns_in_order_of_admission() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    let first = json!({"execution_id": "first", "session": id,
        "argv": ["sh", "-c", "echo first >> order; while [ ! -e go ]; do sleep 0.05; done"]});
    let second = json!({"execution_id": "second", "session": id,
        "argv": ["sh", "-c", "echo second >> order"]});
    assert_eq!(d.post("/v1/executions?wait=false", &first).status, 202);
    wait_until("the first job started", || {
        folder(&w, &id).join("order").exists()
    });
    assert_eq!(d.post("/v1/executions?wait=false", &second).status, 202);
    let r = d.get("/v1/executions/second");
    assert_eq!(r.status, 202);
    assert_eq!(r.json()["status"], "queued", "the second job did not wait");

    let third = json!({"execution_id": "third", "session": id, "argv": ["true"]});
    let r = d.post("/v1/executions?session_wait=false", &third);
    let msg = r.assert_error(409, "conflict");
    assert!(msg.contains("execution \"first\""), "{msg}");
    assert!(msg.contains("GET /v1/executions/first?wait=30s"), "{msg}");
    d.get("/v1/executions/third").assert_error(404, "not_found");
    let msg = put(&d, &id, "late.txt", b"x").assert_error(409, "conflict");
    assert!(msg.contains("in use by"), "{msg}");
    d.delete(&format!("/v1/sessions/{id}/files/order"))
        .assert_error(409, "conflict");
    let msg = d
        .delete(&format!("/v1/sessions/{id}"))
        .assert_error(409, "conflict");
    assert!(msg.contains("cancel its executions"), "{msg}");
    // Reads are not refused meanwhile.
    assert_eq!(d.get(&format!("/v1/sessions/{id}/files/order")).status, 200);

    // The host releases the first job (a test's gate, not a client's way).
    std::fs::write(folder(&w, &id).join("go"), b"").unwrap();
    let r = d.get("/v1/executions/second?wait=60s");
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["status"], "exited");
    let order = d.get(&format!("/v1/sessions/{id}/files/order"));
    assert_eq!(order.body, b"first\nsecond\n");
    assert!(!folder(&w, &id).join("late.txt").exists());
    // Idle again: writes and the deletion go through.
    assert_eq!(put(&d, &id, "late.txt", b"x").status, 200);
    assert_eq!(d.delete(&format!("/v1/sessions/{id}")).status, 200);
    assert!(!folder(&w, &id).exists());
}

/// The workspace counts whole against a job's `disk_bytes`: a job whose
/// limit is below what the workspace already holds is refused before it
/// starts, saying what to do; a job naming a workspace of its own besides
/// the session's is refused.
#[test]
fn disk_bytes_bounds_the_whole_workspace() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    assert_eq!(put(&d, &id, "big.bin", &[0u8; 64 << 10]).status, 200);
    let r = d.post(
        "/v1/executions",
        &json!({"session": id, "argv": ["true"], "limits": {"disk_bytes": 16384}}),
    );
    let msg = r.assert_error(400, "bad_job");
    assert!(
        msg.contains("already holds") && msg.contains("disk_bytes"),
        "{msg}"
    );
    let res = run(
        &d,
        json!({"session": id, "argv": ["sh", "-c", "head -c 300000 /dev/zero > more.bin"], "limits": {"disk_bytes": 200000}}),
    );
    assert_eq!(res["status"], "limit_exceeded", "{res:#}");
    let ws = w.data_dir().join("roots/own");
    std::fs::create_dir_all(&ws).unwrap();
    let r = d.post(
        "/v1/executions",
        &json!({"session": id, "argv": ["true"], "workspace": ws}),
    );
    let msg = r.assert_error(400, "bad_job");
    assert!(msg.contains("drop the job's workspace"), "{msg}");
}

/// An idle session's workspace is deleted with it when it expires.
#[test]
fn an_expired_session_takes_its_workspace_with_it() {
    let w = World::new();
    let (d, id) = managed(&w, &["--session-idle", "1s"]);
    assert_eq!(put(&d, &id, "a.txt", b"x").status, 200);
    wait_until("the idle session expired", || !folder(&w, &id).exists());
    d.get(&format!("/v1/sessions/{id}"))
        .assert_error(404, "not_found");
}

/// A chunked upload past the file limit (no `Content-Length` to refuse it
/// by) is 413, and an upload whose client goes away mid-body frees the
/// workspace: neither leaves a byte behind.
#[test]
fn a_chunked_or_abandoned_upload_leaves_nothing_behind() {
    use std::io::{BufReader, Write};
    let w = World::new();
    let (d, id) = managed(&w, &["--file-body-limit", "4KiB"]);
    let mut conn = d.connect();
    let head = format!(
        "PUT /v1/sessions/{id}/files/deep/chunked.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).unwrap();
    for _ in 0..8 {
        let _ = conn.write_all(format!("{:x}\r\n{}\r\n", 1024, "x".repeat(1024)).as_bytes());
    }
    let _ = conn.write_all(b"0\r\n\r\n");
    let r = read_response(BufReader::new(conn));
    r.assert_error(413, "body_too_large");
    assert!(
        tree(&folder(&w, &id)).is_empty(),
        "{:?}",
        tree(&folder(&w, &id))
    );

    // Gone after 100 of its 3000 bytes.
    let mut conn = d.connect();
    let head = format!(
        "PUT /v1/sessions/{id}/files/left/half.bin HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nContent-Length: 3000\r\n\r\n{}",
        "y".repeat(100)
    );
    conn.write_all(head.as_bytes()).unwrap();
    drop(conn);
    wait_until("the abandoned upload freed the workspace", || {
        put(&d, &id, "after.txt", b"ok").status == 200
    });
    assert_eq!(tree(&folder(&w, &id)), ["after.txt"]);
}

/// `skill-runner run` refuses a job naming a session with a managed
/// workspace: only the daemon orders that workspace's jobs.
#[test]
fn the_cli_refuses_a_job_of_a_managed_session() {
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    drop(d);
    let job = w.path().join("job.json");
    std::fs::write(&job, json!({"argv": ["true"], "session": id}).to_string()).unwrap();
    let out = runner_command()
        .arg("--data-dir")
        .arg(w.data_dir())
        .args(["run", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["error"]["kind"], "bad_job", "{result:#}");
    let msg = result["error"]["message"].as_str().unwrap();
    assert!(msg.contains("only the daemon"), "{msg}");
}

/// A workspace folder a crash left without its session is removed by the
/// sweep; anything not named like a session is kept.
#[test]
fn a_workspace_without_its_session_is_swept_and_others_kept() {
    let w = World::new();
    let orphan = w
        .data_dir()
        .join("workspaces/ses-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(orphan.join("sub")).unwrap();
    std::fs::write(orphan.join("sub/left.txt"), b"x").unwrap();
    let other = w.data_dir().join("workspaces/not-a-session");
    std::fs::create_dir_all(&other).unwrap();
    // The sweep runs every second with this idle time.
    let _d = Daemon::start(&w, &["--session-idle", "1s"]);
    wait_until("the orphan workspace was swept", || !orphan.exists());
    assert!(other.exists());
}

/// A blocking call whose id the daemon chose holds its session's
/// workspace without giving its id out: the refusal another client gets
/// names no execution (its id first leaves the daemon in its answer).
#[test]
fn a_refusal_does_not_give_out_the_id_of_an_unannounced_execution() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let (d, id) = managed(&w, &[]);
    let blocking = json!({"session": id,
        "argv": ["sh", "-c", "echo started >> order; while [ ! -e go ]; do sleep 0.05; done"]});
    let conn = d.post_unanswered("/v1/executions", &blocking);
    wait_until("the blocking job started", || {
        folder(&w, &id).join("order").exists()
    });
    let msg = put(&d, &id, "late.txt", b"x").assert_error(409, "conflict");
    assert!(msg.contains("a blocking execution"), "{msg}");
    assert!(!msg.contains("exec-"), "the refusal gave out its id: {msg}");
    // Nothing to wait for by id: no GET of an id it may not name.
    assert!(!msg.contains("GET /v1/executions/"), "{msg}");
    let third = json!({"session": id, "argv": ["true"]});
    let msg = d
        .post("/v1/executions?session_wait=false", &third)
        .assert_error(409, "conflict");
    assert!(!msg.contains("exec-"), "the refusal gave out its id: {msg}");
    std::fs::write(folder(&w, &id).join("go"), b"").unwrap();
    let r = read_response(std::io::BufReader::new(conn));
    assert_eq!(r.status, 200);
}
