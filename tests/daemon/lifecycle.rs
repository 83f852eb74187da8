//! Starting, stopping and crashing: the socket is private and removed at
//! a clean stop, a second daemon is refused, SIGTERM lets executions finish
//! within the grace period, a SIGKILLed daemon takes its sandboxes with it
//! and the next start sweeps what it left, bad settings stop the start, and
//! the data dir is private.

use std::io::BufReader;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use serde_json::json;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

#[test]
fn socket_is_private_health_answers_and_shutdown_removes_it() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // A stale socket left by a crashed daemon is replaced.
    let run = w.data_dir().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    drop(std::os::unix::net::UnixListener::bind(run.join("skill-runner.sock")).unwrap());
    assert!(run.join("skill-runner.sock").exists());

    let mut d = Daemon::start(&w, &[]);
    assert_eq!(d.socket, run.join("skill-runner.sock"));
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(&run).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let r = d.get("/v1/health");
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert_eq!(doc["status"], "ok");
    assert_eq!(doc["sandbox"]["available"], true);

    // A second daemon on the same socket is refused, and the first keeps it.
    let second = Daemon::try_start(&w, &[]).expect_err("second daemon started");
    assert!(second.contains("another skill-runner daemon"), "{second}");
    assert_eq!(d.get("/v1/health").status, 200);

    let status = d.stop();
    assert!(status.success(), "{status:?}\n{}", d.log());
    assert!(!d.socket.exists(), "socket left behind");
}

#[test]
fn sigkill_of_the_daemon_leaves_no_sandbox_and_a_restart_sweeps() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let mut d = Daemon::start(&w, &[]);
    let m = marker(5);
    let mut conn = d.connect();
    // A network allowlist gives the execution a folder of its own (its
    // proxy socket's); one without needs none (docs/sandbox.md).
    send(
        &mut conn,
        "POST",
        "/v1/executions",
        &[],
        &serde_json::to_vec(&json!({
            "argv": ["sh", "-c", format!("sleep {m} & sleep {m}; wait")],
            "network": {"allow": ["example.com"]},
        }))
        .unwrap(),
        None,
    );
    // bwrap, its init, sh and two sleeps.
    wait_until("the sandbox to start", || processes_with(&m).len() >= 4);
    assert!(!w.executions_left().is_empty());

    d.signal_and_wait(libc::SIGKILL);
    // bwrap --die-with-parent: every sandboxed process dies with the daemon.
    wait_until("the sandboxed processes to die with the daemon", || {
        processes_with(&m).is_empty()
    });
    drop(conn);
    // The crash left its execution folder (and a stale socket) behind.
    assert!(!w.executions_left().is_empty());
    assert!(d.socket.exists());

    let mut d2 = Daemon::start(&w, &[]);
    assert!(
        w.executions_left().is_empty(),
        "not swept: {:?}",
        w.executions_left()
    );
    let r = d2.post("/v1/executions", &json!({"argv": ["echo", "alive"]}));
    assert_eq!(r.json()["stdout"], "alive\n");
    assert!(d2.stop().success());
}

#[test]
fn sigterm_lets_executions_finish_then_cancels_after_the_grace_period() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let mut d = Daemon::start(&w, &["--grace", "1s"]);
    let m = marker(6);
    let socket = d.socket.clone();
    let client = {
        let mut conn = d.connect();
        let m = m.clone();
        std::thread::spawn(move || {
            send(
                &mut conn,
                "POST",
                "/v1/executions",
                &[],
                &serde_json::to_vec(&json!({"execution_id": "long", "argv": ["sleep", m]}))
                    .unwrap(),
                None,
            );
            read_response(BufReader::new(conn))
        })
    };
    wait_until("the sandbox to start", || !processes_with(&m).is_empty());
    let status = d.stop();
    assert!(status.success(), "{status:?}\n{}", d.log());
    let answer = client.join().unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["status"], "cancelled");
    assert!(processes_with(&m).is_empty());
    assert!(w.executions_left().is_empty(), "{:?}", w.executions_left());
    assert!(!socket.exists());
    assert!(d.log().contains("grace period over"), "{}", d.log());
}

#[test]
fn bad_settings_stop_the_start_with_a_clear_message() {
    let w = World::new();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--root".into(), "/".into()], "narrower"),
        (
            vec![
                "--root".into(),
                w.path().join("missing").display().to_string(),
            ],
            "create the folder",
        ),
        (vec!["--max-running".into(), "0".into()], "max_running"),
        (vec!["--listen".into(), "nowhere".into()], "HOST:PORT"),
        (
            vec!["--socket".into(), "/tmp/skill-runner-test.sock".into()],
            "private",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = Daemon::try_start(&w, &args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} started"));
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let file = w.path().join("serve.toml");
    std::fs::write(&file, "max_runnning = 2\n").unwrap();
    let err = Daemon::try_start(&w, &["--config", file.to_str().unwrap()])
        .err()
        .unwrap();
    assert!(err.contains("max_runnning"), "{err}");
}

#[test]
fn the_data_dir_is_private() {
    let w = World::new();
    let _d = Daemon::start(&w, &[]);
    let mode = std::fs::metadata(w.data_dir())
        .unwrap()
        .permissions()
        .mode();
    // 0710 when a root runner lets its sandbox user's group pass through.
    assert!(matches!(mode & 0o777, 0o700 | 0o710), "{mode:o}");
}
