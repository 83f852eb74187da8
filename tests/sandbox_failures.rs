//! A sandbox that bubblewrap cannot finish is `failed`, `sandbox_failed`,
//! exit 125, with bubblewrap's reason and the fix, never the command's own
//! exit code; and `doctor` fails exactly there.
//!
//! The container failures of docs/containers.md, emulated on the host in
//! well under a second each, driving the real binary:
//! - namespaces refused: a seccomp filter that refuses `unshare`, `clone`
//!   with namespace flags and `clone3`, as Docker's default profile does;
//! - masked `/proc`: a new mount and pid namespace whose `/proc/sys` is
//!   read-only, as container engines mount it;
//! - no user namespaces: a user namespace whose `user.max_user_namespaces`
//!   is 0.
//!
//! And the other side: what the command does itself (exit 1 with `bwrap:`
//! on its stderr, a missing or non-executable argv[0]) is reported as the
//! command's, decided by the exec shim's report and not by any text.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use skill_runner_tests::daemon::Daemon;
use skill_runner_tests::*;

/// Whether this process is root (the emulations need it).
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Skips (or fails under `SKILL_RUNNER_MUST_WORK`) a test that needs root
/// and a working sandbox.
fn require_root_sandbox() -> bool {
    if !require_sandbox() {
        return false;
    }
    if !root() {
        skip("the emulation needs root");
        return false;
    }
    true
}

/// The bundled example job.
fn example_job() -> PathBuf {
    project_dir().join("examples/hello-job.json")
}

/// `sh -c SCRIPT` where `$SR` is the runner and `$DATA` the world's data
/// dir, under the hang guard.
fn sh(world: &World, script: &str, prefix: &[&str]) -> Command {
    let mut cmd = Command::new(prefix.first().copied().unwrap_or("sh"));
    if prefix.is_empty() {
        cmd.arg("-c");
    } else {
        cmd.args(&prefix[1..]).args(["sh", "-c"]);
    }
    cmd.arg(script)
        .env("SR", runner_bin())
        .env("DATA", world.data_dir())
        .env("SKILL_RUNNER_DATA_DIR", world.data_dir())
        .env_remove("SKILL_RUNNER_LOG")
        .current_dir(project_dir())
        .stdin(Stdio::null());
    cmd
}

/// Asserts a `run --json` output is an honest setup failure whose message
/// contains every one of `needles`, and returns the result.
fn assert_setup_failure(out: &Output, needles: &[&str]) -> Value {
    assert_eq!(out.status.code(), Some(125), "{}", show(out));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no result document ({e}):{}", show(out)));
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["exit_code"], 125, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "sandbox_failed", "{doc:#}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains("bwrap: "), "bubblewrap's reason: {doc:#}");
    assert!(message.contains("to fix: "), "the fix: {doc:#}");
    for n in needles {
        assert!(message.contains(n), "{n:?} missing: {doc:#}");
    }
    // bubblewrap's lines are never the command's output.
    assert_eq!(doc["stderr"], "", "{doc:#}");
    assert_eq!(doc["stdout"], "", "{doc:#}");
    doc
}

/// Asserts `doctor` failed on the trial sandbox with `needle` in its report.
fn assert_doctor_fails(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(125), "{}", show(out));
    let report = text(&out.stdout);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("FAIL trial sandbox") && l.contains(needle)),
        "{}",
        show(out)
    );
}

/// The classic-BPF program of a filter that refuses namespaces as
/// Docker's default seccomp profile does for a container without
/// CAP_SYS_ADMIN: `unshare` and `clone` with a namespace flag get EPERM,
/// `clone3` ENOSYS; everything else is allowed.
fn deny_namespaces_program() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    const NAMESPACE_FLAGS: u32 = 0x7e02_0000; // CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JEQ_K, 0, 1, libc::SYS_unshare as u32),
        op(RET_K, 0, 0, ERRNO | libc::EPERM as u32),
        op(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        op(RET_K, 0, 0, ERRNO | libc::ENOSYS as u32),
        op(JEQ_K, 0, 3, libc::SYS_clone as u32),
        op(LD_W_ABS, 0, 0, 16), // the low half of args[0], the flags
        op(JSET_K, 0, 1, NAMESPACE_FLAGS),
        op(RET_K, 0, 0, ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, ALLOW),
    ]
}

/// Makes `cmd` start under [`deny_namespaces_program`].
fn under_namespace_denial(cmd: &mut Command) {
    let program = deny_namespaces_program();
    // SAFETY: between fork and exec only two prctl calls, which read the
    // program (owned by the closure, alive for the calls).
    unsafe {
        cmd.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn refused_namespaces_are_a_sandbox_failure_and_doctor_says_so() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let mut run = world.cmd();
    run.args(["run", "--json"]).arg(example_job());
    under_namespace_denial(&mut run);
    let out = output_within(&mut run, HANG_GUARD);
    assert_setup_failure(&out, &["No permissions to creat", "seccomp"]);

    let mut doctor = world.cmd();
    doctor.arg("doctor");
    under_namespace_denial(&mut doctor);
    assert_doctor_fails(&output_within(&mut doctor, HANG_GUARD), "sandbox_failed");

    // Plain mode: one sentence on stderr, bubblewrap's line once, no
    // command output.
    let mut plain = world.cmd();
    plain.arg("run").arg(example_job());
    under_namespace_denial(&mut plain);
    let out = output_within(&mut plain, HANG_GUARD);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(out.stdout.is_empty(), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{}", show(&out));
    assert_eq!(stderr.matches("No permissions to creat").count(), 1);
}

/// `unshare` with a fresh pid namespace and `/proc` whose `/proc/sys` is
/// read-only, as container engines mount it, then `SCRIPT`.
const MASKED_PROC: &[&str] = &["unshare", "--mount", "--pid", "--fork", "--mount-proc"];
const MAKE_PROC_SYS_READ_ONLY: &str =
    "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && ";

#[test]
fn a_masked_proc_is_a_sandbox_failure_and_doctor_says_so() {
    if !require_root_sandbox() {
        return;
    }
    let world = World::new();
    let run = format!("{MAKE_PROC_SYS_READ_ONLY} exec \"$SR\" run --json examples/hello-job.json");
    let out = output_within(&mut sh(&world, &run, MASKED_PROC), HANG_GUARD);
    assert_setup_failure(&out, &["/proc"]);

    let doctor = format!("{MAKE_PROC_SYS_READ_ONLY} exec \"$SR\" doctor");
    let out = output_within(&mut sh(&world, &doctor, MASKED_PROC), HANG_GUARD);
    assert_doctor_fails(&out, "/proc");
}

#[test]
fn no_user_namespaces_left_is_refused_with_the_sysctl_to_change() {
    if !require_root_sandbox() {
        return;
    }
    let world = World::new();
    let prefix = &["unshare", "--user", "--map-root-user", "--mount", "--fork"];
    let script = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$SR\" run --json examples/hello-job.json";
    let out = output_within(&mut sh(&world, script, prefix), HANG_GUARD);
    if out.status.code() == Some(1) && text(&out.stderr).contains("max_user_namespaces") {
        skip("cannot set user.max_user_namespaces here");
        return;
    }
    // Refused before anything starts (the runner reads the sysctl) or by
    // bubblewrap: either way 125, with the sysctl to change.
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        matches!(
            doc["error"]["kind"].as_str(),
            Some("sandbox_unavailable" | "sandbox_failed")
        ),
        "{doc:#}"
    );
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("user.max_user_namespaces"),
        "{doc:#}"
    );
}

#[test]
fn the_commands_own_bwrap_lines_and_exit_1_are_its_own() {
    // Text never decides: a command that prints what bubblewrap would and
    // exits 1 exited 1.
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let (code, doc, out) = world.run_json(&json!({
        "argv": ["sh", "-c", "echo 'bwrap: Can'\\''t mount proc on /newroot/proc: Operation not permitted' >&2; echo 'bwrap: execvp x: No such file or directory' >&2; exit 1"]
    }));
    assert_eq!(code, 1, "{}", show(&out));
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["exit_code"], 1, "{doc:#}");
    assert!(doc["error"].is_null(), "{doc:#}");
    assert!(doc["stderr"]
        .as_str()
        .unwrap()
        .starts_with("bwrap: Can't mount proc"));
}

#[test]
fn a_missing_or_unexecutable_command_is_known_from_the_shim() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    for (argv, code, kind, reason) in [
        (
            json!(["no-such-command"]),
            127,
            "not_found",
            "No such file or directory",
        ),
        (
            json!(["/etc/passwd"]),
            126,
            "not_executable",
            "Permission denied",
        ),
    ] {
        let (got, doc, out) = world.run_json(&json!({ "argv": argv }));
        assert_eq!(got, code, "{}", show(&out));
        assert_eq!(doc["status"], "failed", "{doc:#}");
        assert_eq!(doc["exit_code"], code, "{doc:#}");
        assert_eq!(doc["error"]["kind"], kind, "{doc:#}");
        assert!(
            doc["error"]["message"].as_str().unwrap().contains(reason),
            "{doc:#}"
        );
        assert_eq!(
            doc["stderr"], "",
            "nothing of the shim's or bwrap's: {doc:#}"
        );
    }
}

#[test]
fn an_unwritable_data_dir_names_the_setting_to_change() {
    let world = World::new();
    let file = world.path().join("not-a-folder");
    std::fs::write(&file, b"").unwrap();
    let bad = file.join("data");
    let run = world
        .cmd()
        .env("SKILL_RUNNER_DATA_DIR", &bad)
        .args(["run", "--json"])
        .arg(example_job())
        .output()
        .unwrap();
    let doctor = world
        .cmd()
        .env("SKILL_RUNNER_DATA_DIR", &bad)
        .arg("doctor")
        .output()
        .unwrap();
    for out in [run, doctor] {
        assert_eq!(out.status.code(), Some(125), "{}", show(&out));
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(all.contains("--data-dir"), "{}", show(&out));
        assert!(all.contains("SKILL_RUNNER_DATA_DIR"), "{}", show(&out));
    }
}

#[test]
fn the_daemon_says_so_at_start_and_health_answers_503() {
    // The daemon runs a real job's sandbox before it listens: where
    // namespaces are refused, it warns at start and health is 503
    // sandbox_failed with bubblewrap's reason, not "ok".
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let mut serve = Daemon::command(&world, &[]);
    under_namespace_denial(&mut serve);
    let mut daemon =
        Daemon::spawn(serve).unwrap_or_else(|log| panic!("the daemon did not start:\n{log}"));
    let health = daemon.get("/v1/health");
    let (code, body) = (health.status, health.json());
    let streamed = daemon.request(
        "POST",
        "/v1/executions",
        &[
            ("Accept", "application/x-ndjson"),
            ("Content-Type", "application/json"),
        ],
        br#"{"argv": ["true"]}"#,
    );
    let events: Vec<Value> = String::from_utf8(streamed.body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    daemon.stop();
    let log = daemon.log();
    assert_eq!(code, 503, "{body:#}\n{log}");
    assert_eq!(body["status"], "sandbox_failed", "{body:#}");
    assert_eq!(body["sandbox"]["available"], false, "{body:#}");
    let reason = body["sandbox"]["reason"].as_str().unwrap();
    assert!(reason.contains("No permissions to creat"), "{body:#}");
    assert!(reason.contains("to fix: "), "{body:#}");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("every execution will fail")),
        "{log}"
    );
    // Streamed, the failed sandbox is an exit event with sandbox_failed,
    // and no output event carries bubblewrap's lines.
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["started", "exit"], "{events:#?}");
    let result = &events[1]["result"];
    assert_eq!(result["error"]["kind"], "sandbox_failed", "{result:#}");
    assert_eq!(result["exit_code"], 125, "{result:#}");
    assert_eq!(result["stderr"], "", "{result:#}");
}
