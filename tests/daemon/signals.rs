//! No catchable signal ends the daemon without a log line and a drain:
//! SIGHUP is logged and ignored, and SIGUSR1 (like SIGTERM) drains,
//! letting a running execution finish, before a clean exit.

use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

use super::{gated_job, open_gate, workspace_in, world_with_roots};

#[test]
fn sighup_is_logged_and_ignored() {
    let w = World::new();
    let mut d = Daemon::start(&w, &[]);
    kill(d.pid() as i32, libc::SIGHUP);
    d.wait_for_line("the ignored SIGHUP", |l| l.contains("ignored SIGHUP"));
    let r = d.get("/v1/health");
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert!(d.stop().success());
}

#[test]
fn sigusr1_drains_a_running_execution_and_says_so() {
    let (w, root) = world_with_roots();
    let mut d = Daemon::start(&w, &["--root", &root, "--grace", "60s"]);
    let ws = workspace_in(&w, "usr1");
    let r = d.post("/v1/executions?wait=false", &gated_job("drained", &ws));
    assert_eq!(r.status, 202, "{:#}", r.json());
    wait_until("the job runs", || {
        d.get("/v1/executions/drained").json()["status"] == "running"
    });
    let pid = d.pid() as i32;
    kill(pid, libc::SIGUSR1);
    d.wait_for_line("the drain", |l| {
        l.contains("shutting down") && l.contains("SIGUSR1")
    });
    // Still alive while its execution runs: the drain waits for it.
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    open_gate(&ws);
    let status = d.signal_and_wait(0);
    assert!(status.success(), "{status:?}");
    let log = d.log();
    assert!(!log.contains("cancelled the remaining"), "{log}");
    assert!(!d.socket.exists(), "the socket is removed");
}
