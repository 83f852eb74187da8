//! A command ended by a signal says who sent it where the runner can know:
//! a kill of the sandbox from outside (its bubblewrap, which nothing in
//! the sandbox can reach) is `signal_sender: "outside"`, the runner's own
//! timeout is `"runner"`, and a command that kills itself carries no
//! sender, as does a host process that signals the command directly
//! (the runner cannot tell those apart: docs/formats.md).

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// (parent pid, command name) of a process.
fn stat(pid: i32) -> Option<(i32, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}

/// Starts `sleep <marker>` detached and waits until the command runs;
/// returns the execution's id and the pids of its bubblewrap (the
/// daemon's child) and of the command.
fn sleeping(d: &Daemon, n: u32) -> (String, i32, i32) {
    let m = marker(n);
    let id = format!("sleeper-{n}");
    let r = d.post(
        "/v1/executions?wait=false",
        &json!({"execution_id": id, "argv": ["sleep", m]}),
    );
    assert_eq!(r.status, 202, "{}", r.json());
    let mut found = (0, 0);
    wait_until("the command to run", || {
        let pids = processes_with(&m);
        let bwrap = pids
            .iter()
            .find(|p| stat(**p) == Some((d.pid() as i32, "bwrap".into())));
        let command = pids
            .iter()
            .find(|p| stat(**p).is_some_and(|(_, c)| c == "sleep"));
        match (bwrap, command) {
            (Some(b), Some(c)) => {
                found = (*b, *c);
                true
            }
            _ => false,
        }
    });
    (id, found.0, found.1)
}

fn result_of(d: &Daemon, id: &str) -> Value {
    let r = d.get(&format!("/v1/executions/{id}?wait=60s"));
    assert_eq!(r.status, 200, "{}", r.json());
    r.json()
}

#[test]
fn a_sandbox_killed_from_outside_says_so_and_a_command_that_kills_itself_does_not() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);

    // From the host, at the sandbox's bubblewrap.
    let (id, bwrap, _) = sleeping(&d, 1);
    kill(bwrap, libc::SIGKILL);
    let r = result_of(&d, &id);
    assert_eq!(r["status"], "signaled", "{r:#}");
    assert_eq!(r["signal"], libc::SIGKILL, "{r:#}");
    assert_eq!(r["signal_sender"], "outside", "{r:#}");

    // A SIGTERM from outside is told apart the same way.
    let (id, bwrap, _) = sleeping(&d, 2);
    kill(bwrap, libc::SIGTERM);
    let r = result_of(&d, &id);
    assert_eq!(
        (&r["signal"], &r["signal_sender"]),
        (&json!(libc::SIGTERM), &json!("outside")),
        "{r:#}"
    );

    // From the host, at the command itself: the same signal as a command
    // that kills itself reaches the runner, so no sender is claimed.
    let (id, _, command) = sleeping(&d, 3);
    kill(command, libc::SIGKILL);
    let r = result_of(&d, &id);
    assert_eq!(
        (&r["status"], &r["signal"]),
        (&json!("signaled"), &json!(libc::SIGKILL)),
        "{r:#}"
    );
    assert!(r.get("signal_sender").is_none(), "{r:#}");

    let r = d
        .post(
            "/v1/executions",
            &json!({"argv": ["sh", "-c", "kill -9 $$"]}),
        )
        .json();
    assert_eq!(
        (&r["status"], &r["signal"]),
        (&json!("signaled"), &json!(libc::SIGKILL)),
        "{r:#}"
    );
    assert!(r.get("signal_sender").is_none(), "{r:#}");

    // The runner's own timeout.
    let r = d
        .post(
            "/v1/executions",
            &json!({"argv": ["sleep", "30"], "limits": {"timeout_ms": 300}}),
        )
        .json();
    assert_eq!(r["status"], "timed_out", "{r:#}");
    assert_eq!(r["signal_sender"], "runner", "{r:#}");
}
