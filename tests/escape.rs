//! The escape suite: every isolation and supervision promise of
//! the README's threat model, shown by attempting the forbidden thing inside a real
//! bubblewrap sandbox and watching it fail.
//!
//! Each test copies the `probe` helper (`tests/probe`) into a fresh
//! workspace, stages one small skill `t`, and runs
//! `/workspace/probe <subcommand>` through `skill-runner run --json`. The
//! probe prints `DENIED <reason>` (exit 0) when the attempt failed and
//! `ALLOWED <details>` (exit 1) when it happened; reports print data for the
//! test to judge. Positive controls make the same attempt where it is
//! allowed, so that a denial is never an accident of a broken probe or a
//! wrong path (hence also the errno checks: `ENOENT` under `/skills` would
//! only prove the test named a missing file).
//!
//! The suite runs twice: as it is (`escape::`), and with every command
//! handed to a sandbox prepared ahead (`escape_prepared::`, the path of a
//! daemon session's next command, docs/prepared.md), each result checked
//! to say it ran in one.
//!
//! Liveness is judged from the host without timing assertions: the
//! long-running probes rewrite a heartbeat file every 100 ms, and
//! [`processes_in`] finds any process whose current directory is the
//! workspace, whatever pid namespace it is in.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use skill_runner_tests::*;

// ---------------------------------------------------------------------------
// Fixture and helpers
// ---------------------------------------------------------------------------

/// The files of the staged skill `t`, besides its `SKILL.md`.
const SKILL_FILES: &[(&str, &[u8])] = &[
    ("scripts/run.sh", b"echo run\n"),
    ("references/data.txt", b"package data\n"),
];

/// How long liveness checks wait for processes to disappear: hang
/// protection, not a performance expectation.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// One test's sandbox: its own [`World`] (data dir), a workspace holding the
/// probe, and the skill `t` staged at `/skills/t`.
struct Fixture {
    world: World,
    workspace: PathBuf,
    skill: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let world = World::new();
        let workspace = world.workspace_with_probe();
        let skill = world.skill("t", SKILL_FILES);
        Fixture {
            world,
            workspace,
            skill,
        }
    }

    /// The job running `/workspace/probe ARGS` with `limits`.
    fn probe_job(&self, args: &[&str], limits: Value) -> Value {
        let mut argv = vec!["/workspace/probe"];
        argv.extend_from_slice(args);
        json!({
            "argv": argv,
            "workspace": self.workspace,
            "skills": [skill_ref("t", &self.skill)],
            "limits": limits,
        })
    }

    /// Runs `/workspace/probe ARGS` with `limits`.
    fn run(&self, args: &[&str], limits: Value) -> Run {
        self.run_job(&self.probe_job(args, limits))
    }

    fn run_job(&self, job: &Value) -> Run {
        let (code, doc, out) = self.world.run_json_env(job, prepared_env());
        Run::new(code, doc, &out)
    }

    /// The host side of `/skill-extensions` (the default under the workspace).
    fn extensions(&self) -> PathBuf {
        self.workspace.join(".sciencediscovery/skill-extensions")
    }
}

/// The environment of `run` that makes it hand each command to a sandbox
/// prepared ahead, when this copy of the suite is the prepared one.
fn prepared_env() -> &'static [(&'static str, &'static str)] {
    if super::PREPARED {
        &[
            ("SKILL_RUNNER_RUN_PREPARED", "1"),
            ("SKILL_RUNNER_RUN_TEMPLATE", "1"),
        ]
    } else {
        &[]
    }
}

/// One finished `run --json`: the runner's exit code and result document.
struct Run {
    code: i32,
    doc: Value,
    runner_stderr: String,
}

impl Run {
    fn new(code: i32, doc: Value, out: &Output) -> Run {
        let runner_stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // Every command that started ran in its prepared sandbox, and that
        // sandbox started in a template mount namespace as the daemon's
        // do, where this process may make one.
        if super::PREPARED && doc["status"] != "rejected" {
            assert_eq!(
                doc["prepared_sandbox"], true,
                "not in a prepared sandbox: {doc:#}"
            );
            if may_make_mount_namespaces() {
                assert!(
                    runner_stderr
                        .contains("in the template mount namespace: 1, in the runner's own: 0"),
                    "the sandbox did not start in a template mount namespace: {runner_stderr}"
                );
            }
        }
        Run {
            code,
            doc,
            runner_stderr,
        }
    }

    /// Parses the output of a `run --json` started by hand.
    fn from_output(out: &Output) -> Run {
        let code = out.status.code().unwrap_or(-1);
        let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "run --json printed no JSON ({e}); exit {code}; stdout: {}; stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        Run::new(code, doc, out)
    }

    fn stdout(&self) -> &str {
        self.doc["stdout"].as_str().unwrap_or_default()
    }

    fn status(&self) -> &str {
        self.doc["status"].as_str().unwrap_or_default()
    }

    fn exit_code(&self) -> Option<i64> {
        self.doc["exit_code"].as_i64()
    }

    fn signal(&self) -> Option<i64> {
        self.doc["signal"].as_i64()
    }

    fn error_message(&self) -> &str {
        self.doc["error"]["message"].as_str().unwrap_or_default()
    }

    /// The probe's verdict: its last line of output (fill-file prints a
    /// `WROTE n` line first).
    fn verdict(&self) -> &str {
        self.stdout().lines().last().unwrap_or_default()
    }

    /// How a limit was enforced (`cgroup v1`, `rlimit`, `none`, …).
    fn enforced_by(&self, limit: &str) -> &str {
        self.doc["limits"][limit]["enforced_by"]
            .as_str()
            .unwrap_or_default()
    }
}

/// Everything a failing assertion needs to show.
impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut stdout = self.stdout().to_owned();
        if stdout.len() > 2000 {
            let cut = (0..=2000).rev().find(|&i| stdout.is_char_boundary(i));
            stdout.truncate(cut.unwrap_or(0));
            stdout.push('…');
        }
        write!(
            f,
            "\n  runner exit {}; status {:?}, exit_code {:?}, signal {:?}, error {}\n  stdout: {:?}\n  stderr: {:?}\n  runner stderr: {:?}",
            self.code,
            self.status(),
            self.exit_code(),
            self.signal(),
            self.doc["error"],
            stdout,
            self.doc["stderr"].as_str().unwrap_or_default(),
            self.runner_stderr,
        )
    }
}

/// The probe ran to the end and reports the attempt failed: status exited,
/// exit 0, `DENIED …`. Returns the reason.
fn assert_denied(run: &Run) -> String {
    assert!(
        run.status() == "exited" && run.exit_code() == Some(0) && run.code == 0,
        "the probe did not end normally with exit 0:{run}"
    );
    let reason = run
        .verdict()
        .strip_prefix("DENIED ")
        .unwrap_or_else(|| panic!("expected DENIED:{run}"));
    reason.to_owned()
}

/// [`assert_denied`], and the reason names one of `errnos`.
fn assert_denied_by(run: &Run, errnos: &[&str]) {
    let reason = assert_denied(run);
    assert!(
        errnos.iter().any(|e| reason.contains(e)),
        "denied, but not by {errnos:?} (a wrong path in the test?):{run}"
    );
}

/// A positive control: the attempt succeeded (`ALLOWED …`, exit 1).
fn assert_allowed(run: &Run) -> String {
    assert!(
        run.status() == "exited" && run.exit_code() == Some(1),
        "the positive control did not run to its end:{run}"
    );
    run.verdict()
        .strip_prefix("ALLOWED ")
        .unwrap_or_else(|| panic!("the positive control was refused:{run}"))
        .to_owned()
}

/// Errnos that show a change was refused by the read-only mount or by
/// permissions, not by a path the test got wrong.
const READ_ONLY: &[&str] = &["EROFS", "EACCES", "EPERM"];

/// A listing of a host folder: path, mode and contents (or link target) of
/// every entry, sorted, to compare before and after.
fn tree(dir: &Path) -> Vec<(String, u32, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u32, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                out.push((rel, mode, Vec::new()));
                walk(root, &path, out);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.push((rel, mode, target.into_os_string().into_encoded_bytes()));
            } else {
                out.push((rel, mode, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The counter of a heartbeat file, `None` while it does not exist.
fn heartbeat(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Nothing of the sandbox is alive: no process works in the workspace
/// (waits up to [`GONE_WITHIN`] for the kernel to finish killing), and the
/// heartbeat, if the probe wrote one, stands still.
fn assert_nothing_alive(fx: &Fixture, heartbeat_file: Option<&Path>, run: &dyn fmt::Display) {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let left = processes_in(&fx.workspace);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the sandbox still alive after the runner returned: {left:?}{run}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(file) = heartbeat_file {
        let before = heartbeat(file);
        assert!(
            before.is_some(),
            "the probe never wrote {}{run}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(500));
        let after = heartbeat(file);
        assert_eq!(before, after, "the heartbeat still advances{run}");
    }
}

// ---------------------------------------------------------------------------
// /skills is read-only (snapshot-root invariant 3, docs/packages.md)
// ---------------------------------------------------------------------------

/// Runs each attempt under `/skills`, expects a read-only denial for each,
/// and then checks on the host that the skill's source folder is unchanged.
fn assert_skills_unchanged_after(fx: &Fixture, attempts: &[&[&str]]) {
    let before = tree(&fx.skill);
    for args in attempts {
        let run = fx.run(args, json!({}));
        assert_denied_by(&run, READ_ONLY);
    }
    assert_eq!(
        tree(&fx.skill),
        before,
        "the staged skill's source folder changed on the host"
    );
}

#[test]
fn skills_are_read_only_write() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    assert_skills_unchanged_after(
        &fx,
        &[
            &["write-file", "/skills/t/references/data.txt"],
            &["append", "/skills/t/references/data.txt"],
            &["write-file", "/skills/t/new.txt"],
            &["write-file", "/skills/new.txt"],
            &["write-file", "/skills/.sciencediscovery-snapshot.json"],
            &["append", "/skills/.sciencediscovery-snapshot.json"],
        ],
    );
    // Positive controls: the writable binds take the same write.
    assert_allowed(&fx.run(&["write-file", "/workspace/new.txt"], json!({})));
    assert_allowed(&fx.run(&["write-file", "/skill-extensions/new.txt"], json!({})));
    assert!(fx.workspace.join("new.txt").is_file());
    assert!(fx.extensions().join("new.txt").is_file());
}

#[test]
fn skills_are_read_only_rename() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    assert_skills_unchanged_after(
        &fx,
        &[
            &[
                "rename",
                "/skills/t/references/data.txt",
                "/skills/t/moved.txt",
            ],
            &["rename", "/skills/t", "/skills/u"],
            &[
                "rename",
                "/skills/.sciencediscovery-snapshot.json",
                "/skills/m.json",
            ],
        ],
    );
    // Moving a package file out of /skills fails too (EXDEV: another mount).
    let run = fx.run(
        &[
            "rename",
            "/skills/t/references/data.txt",
            "/workspace/stolen.txt",
        ],
        json!({}),
    );
    assert_denied_by(&run, &["EXDEV", "EROFS"]);
    // Positive control.
    std::fs::write(fx.workspace.join("a.txt"), "a").unwrap();
    assert_allowed(&fx.run(
        &["rename", "/workspace/a.txt", "/workspace/b.txt"],
        json!({}),
    ));
    assert!(fx.workspace.join("b.txt").is_file());
}

#[test]
fn skills_are_read_only_chmod() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    assert_skills_unchanged_after(
        &fx,
        &[
            &["chmod", "/skills/t/references/data.txt", "666"],
            &["chmod", "/skills/t/scripts/run.sh", "755"],
            &["chmod", "/skills/t", "777"],
            &["chmod", "/skills", "777"],
            &["chmod", "/skills/.sciencediscovery-snapshot.json", "666"],
        ],
    );
    // Positive control.
    std::fs::write(fx.workspace.join("own.txt"), "own").unwrap();
    give_to_sandbox(&fx.workspace.join("own.txt"));
    let control = fx.run(&["chmod", "/workspace/own.txt", "600"], json!({}));
    if control.doc["identity"]["root_mapped"] == true {
        // Such a sandbox may change no mode at all (see tests/host.rs).
        assert_denied_by(&control, &["EPERM"]);
        return;
    }
    assert_allowed(&control);
    let mode = std::fs::metadata(fx.workspace.join("own.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn skills_are_read_only_unlink() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    assert_skills_unchanged_after(
        &fx,
        &[
            &["unlink", "/skills/t/references/data.txt"],
            &["unlink", "/skills/t/SKILL.md"],
            &["unlink", "/skills/.sciencediscovery-snapshot.json"],
            &["rmdir", "/skills/t/references"],
            &["rmdir", "/skills/t"],
            &["rmdir", "/skills"],
        ],
    );
    // Positive control.
    std::fs::write(fx.workspace.join("own.txt"), "own").unwrap();
    give_to_sandbox(&fx.workspace.join("own.txt"));
    assert_allowed(&fx.run(&["unlink", "/workspace/own.txt"], json!({})));
    assert!(!fx.workspace.join("own.txt").exists());
}

#[test]
fn skills_are_read_only_mkdir() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    assert_skills_unchanged_after(
        &fx,
        &[
            &["mkdir", "/skills/new"],
            &["mkdir", "/skills/t/new"],
            &["mkdir", "/skills/t/references/new"],
        ],
    );
    // Positive control.
    assert_allowed(&fx.run(&["mkdir", "/skill-extensions/t"], json!({})));
    assert!(fx.extensions().join("t").is_dir());
}

#[test]
fn skills_are_read_only_symlink() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    assert_skills_unchanged_after(
        &fx,
        &[
            &["symlink", "/workspace/probe", "/skills/t/link"],
            &["symlink", "/etc/passwd", "/skills/link"],
        ],
    );
    // Positive control.
    assert_allowed(&fx.run(
        &["symlink", "/workspace/probe", "/workspace/link"],
        json!({}),
    ));
}

// ---------------------------------------------------------------------------
// Host files
// ---------------------------------------------------------------------------

#[test]
fn host_file_outside_the_binds_is_not_readable() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let secret = fx.world.path().join("host-secret.txt");
    std::fs::write(&secret, "host secret\n").unwrap();
    let run = fx.run(&["read-file", secret.to_str().unwrap()], json!({}));
    assert_denied_by(&run, &["ENOENT"]);
    // Positive controls: package files and the workspace are readable.
    let run = fx.run(&["read-file", "/skills/t/references/data.txt"], json!({}));
    assert_eq!(assert_allowed(&run), "package data", "{run}");
    std::fs::write(fx.workspace.join("input.txt"), "workspace input\n").unwrap();
    let run = fx.run(&["read-file", "/workspace/input.txt"], json!({}));
    assert_eq!(assert_allowed(&run), "workspace input", "{run}");
}

#[test]
fn etc_shadow_is_not_visible() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["read-file", "/etc/shadow"], json!({}));
    assert_denied_by(&run, &["ENOENT"]);
    // Positive control: /etc/passwd is there, and it is the synthetic one.
    let run = fx.run(&["read-file", "/etc/passwd"], json!({}));
    assert_eq!(
        assert_allowed(&run),
        "sandbox:x:1000:1000:sandbox:/tmp:/bin/sh",
        "{run}"
    );
}

// ---------------------------------------------------------------------------
// Network
// ---------------------------------------------------------------------------

#[test]
fn host_loopback_listener_is_unreachable() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let run = fx.run(&["connect", &addr], json!({}));
    assert_denied(&run);
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host listener saw a connection: {other:?}{run}"),
    }
}

#[test]
fn inet_sockets_are_refused() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["socket-inet"], json!({}));
    assert_denied(&run);
}

#[test]
fn unix_sockets_still_work() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["socket-unix"], json!({}));
    assert!(
        run.exit_code() == Some(0) && run.verdict() == "OK unix socket",
        "AF_UNIX sockets must keep working:{run}"
    );
}

// ---------------------------------------------------------------------------
// System calls refused outright
// ---------------------------------------------------------------------------

/// One test per probe subcommand that must print `DENIED`.
macro_rules! refused {
    ($($(#[$doc:meta])* $name:ident => $subcommand:literal;)*) => {$(
        $(#[$doc])*
        #[test]
        fn $name() {
            if !require_sandbox() {
                return;
            }
            let fx = Fixture::new();
            assert_denied(&fx.run(&[$subcommand], json!({})));
        }
    )*};
}

refused! {
    /// PTRACE_ATTACH, PTRACE_TRACEME and process_vm_readv.
    ptrace_is_refused => "ptrace";
    /// Mounting a tmpfs, unmounting /skills, pivot_root.
    mount_is_refused => "mount";
    /// unshare and clone(3) into new user and mount namespaces.
    new_user_namespaces_are_refused => "unshare-user";
    io_uring_is_refused => "io-uring";
    /// Keystroke injection into the caller's terminal.
    tiocsti_is_refused => "tiocsti";
    tioclinux_is_refused => "tioclinux";
    bpf_is_refused => "bpf";
    perf_event_open_is_refused => "perf-event-open";
    userfaultfd_is_refused => "userfaultfd";
    keyctl_is_refused => "keyctl";
    setns_is_refused => "setns";
    /// clone3 and openat2 carry their flags in memory the filter cannot
    /// read: both must end before the kernel (ENOSYS, so libc falls back
    /// to calls the filter can judge).
    clone3_never_reaches_the_kernel => "clone3";
    openat2_never_reaches_the_kernel => "openat2";
    open_by_handle_at_is_refused => "open-by-handle-at";
    kexec_is_refused => "kexec";
    kernel_modules_cannot_be_loaded => "init-module";
}

/// A foreign syscall ABI may be refused (`DENIED`) or kill the process
/// (seccomp's SIGSYS), but it must never work.
fn assert_foreign_abi_refused(subcommand: &str) {
    let fx = Fixture::new();
    let run = fx.run(&[subcommand], json!({}));
    let killed_by_sigsys = run.status() == "signaled"
        && run.signal() == Some(i64::from(libc::SIGSYS))
        && run.code == 128 + libc::SIGSYS;
    if !killed_by_sigsys {
        assert_denied(&run);
    }
    assert!(!run.stdout().contains("ALLOWED"), "{run}");
}

#[test]
fn x32_syscalls_are_refused() {
    if !require_sandbox() {
        return;
    }
    assert_foreign_abi_refused("x32-syscall");
}

#[test]
fn i386_syscalls_are_refused() {
    if !require_sandbox() {
        return;
    }
    assert_foreign_abi_refused("i386-syscall");
}

// ---------------------------------------------------------------------------
// What the command sees of itself
// ---------------------------------------------------------------------------

#[test]
fn no_host_process_is_visible() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["procs"], json!({}));
    assert_eq!(run.exit_code(), Some(0), "{run}");
    let mut lines = run.stdout().lines();
    let count: usize = lines
        .next()
        .and_then(|l| l.strip_prefix("PIDS "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no PIDS line:{run}"));
    assert!(count <= 5, "{count} processes visible:{run}");
    let processes: Vec<(u32, &str)> = lines
        .map(|l| {
            let (pid, comm) = l.split_once(' ').unwrap();
            (pid.parse().unwrap(), comm)
        })
        .collect();
    assert!(
        matches!(processes.first(), Some((1, "bwrap" | "probe"))),
        "pid 1 is neither bwrap nor the probe:{run}"
    );
    assert!(processes.iter().any(|(_, comm)| *comm == "probe"), "{run}");
}

#[test]
fn no_capabilities_and_a_seccomp_filter() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["caps"], json!({}));
    assert_eq!(run.exit_code(), Some(0), "{run}");
    let field = |key: &str| -> String {
        run.stdout()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} line:{run}"))
            .trim()
            .to_owned()
    };
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(cap), "0000000000000000", "{cap}:{run}");
    }
    assert_eq!(field("NoNewPrivs"), "1", "{run}");
    assert_eq!(field("Seccomp"), "2", "filter mode expected:{run}");
}

#[test]
fn environment_is_the_baseline_and_the_jobs() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let canary = format!("SR_ESCAPE_CANARY_{}", std::process::id());
    let mut job = fx.probe_job(&["env"], json!({}));
    job["env"] = json!({"GREETING": "hi there", "SKILL_MODE": "test"});
    let mut env = vec![(canary.as_str(), "leaked from the host")];
    env.extend_from_slice(prepared_env());
    let (code, doc, out) = fx.world.run_json_env(&job, &env);
    let run = Run::new(code, doc, &out);
    assert_eq!(run.exit_code(), Some(0), "{run}");
    assert!(!run.stdout().contains(&canary), "host env leaked:{run}");
    // bubblewrap itself sets PWD to the directory it chdir'ed to, after its
    // own environment options; it names nothing of the host.
    let got: Vec<&str> = run
        .stdout()
        .lines()
        .filter(|l| *l != "PWD=/workspace")
        .collect();
    assert_eq!(
        got,
        [
            "GREETING=hi there",
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "PATH=/usr/bin:/bin",
            "SCIENCEDISCOVERY_SKILLS_DIR=/skills",
            "SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR=/skill-extensions",
            "SKILL_MODE=test",
        ],
        "{run}"
    );
}

#[test]
fn only_stdio_descriptors_reach_the_command() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let job = fx.world.job("fds", &fx.probe_job(&["fds"], json!({})));
    // The runner itself inherits fds 3 and 9 without close-on-exec, as from
    // a careless parent; none of them may reach the sandbox.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(r#"exec 3</dev/null 9</dev/null; exec "$@""#)
        .arg("sh")
        .arg(runner_bin())
        .args(["run", "--json"])
        .arg(&job)
        .env("SKILL_RUNNER_DATA_DIR", fx.world.data_dir())
        .envs(prepared_env().iter().copied())
        .env_remove("SKILL_RUNNER_LOG")
        .stdin(Stdio::null());
    let run = Run::from_output(&output_within(&mut cmd, HANG_GUARD));
    assert_eq!(run.exit_code(), Some(0), "{run}");
    let fds: Vec<&str> = run
        .stdout()
        .lines()
        .map(|l| l.split(" -> ").next().unwrap())
        .collect();
    assert_eq!(fds, ["0", "1", "2"], "{run}");
}

#[test]
fn command_runs_as_an_unprivileged_user() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["uid"], json!({}));
    assert_eq!(run.stdout(), "uid=1000 gid=1000 euid=1000\n", "{run}");
}

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

#[test]
fn fork_bomb_is_contained_by_the_pids_limit() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let limits = json!({"pids": 64, "timeout_ms": 20000});
    // A fork bomb without a working process limit would hurt the host.
    let preflight = fx.run(&["exit", "0"], limits.clone());
    if preflight.enforced_by("pids") == "none" {
        skip("no mechanism enforces the pids limit here");
        return;
    }
    let run = fx.run(&["fork-bomb", "3"], limits);
    let report = run
        .verdict()
        .strip_prefix("FORKS ")
        .unwrap_or_else(|| panic!("the fork bomb did not report:{run}"));
    let (forks, first_error) = report.split_once(' ').unwrap();
    let forks: u64 = forks.parse().unwrap();
    assert!(forks < 64, "{forks} forks with pids = 64:{run}");
    assert_eq!(first_error, "first_error=EAGAIN", "{run}");
    assert_eq!(run.status(), "limit_exceeded", "{run}");
    assert!(run.error_message().contains("pids"), "{run}");
}

#[test]
fn memory_bomb_is_killed() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(
        &["mem-bomb", "2048"],
        json!({"memory_bytes": 128 << 20, "timeout_ms": 20000}),
    );
    assert!(!run.stdout().contains("ALLOCATED"), "{run}");
    if run.enforced_by("memory_bytes").starts_with("cgroup") {
        assert_eq!(run.status(), "limit_exceeded", "{run}");
        assert!(run.error_message().contains("memory_bytes"), "{run}");
    } else {
        // RLIMIT_AS: the allocation fails inside the process instead.
        assert!(
            run.status() == "limit_exceeded" || run.verdict().starts_with("DENIED "),
            "{run}"
        );
    }
}

#[test]
fn tmp_is_limited_by_tmp_bytes() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(
        &["fill-file", "/tmp/big", "64"],
        json!({"tmp_bytes": 8 << 20}),
    );
    assert_denied_by(&run, &["ENOSPC"]);
}

#[test]
fn file_size_is_limited_by_file_size_bytes() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(
        &["fill-file", "/workspace/big", "64"],
        json!({"file_size_bytes": 4 << 20}),
    );
    assert_denied_by(&run, &["EFBIG"]);
    let size = std::fs::metadata(fx.workspace.join("big")).unwrap().len();
    assert!(size <= 4 << 20, "{size} bytes written:{run}");
}

// ---------------------------------------------------------------------------
// Lifetime: nothing outlives the timeout or the runner
// ---------------------------------------------------------------------------

/// Runs a long-lived probe with a short timeout; it must be `timed_out`.
fn assert_times_out(fx: &Fixture, args: &[&str]) -> Run {
    let run = fx.run(args, json!({"timeout_ms": 1500}));
    assert!(run.stdout().starts_with("READY"), "never started:{run}");
    assert_eq!(run.status(), "timed_out", "{run}");
    assert_eq!(run.code, 124, "{run}");
    run
}

#[test]
fn timeout_kills_a_sleeping_command() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = assert_times_out(&fx, &["sleep", "60", "/workspace/sleep.alive"]);
    assert_nothing_alive(&fx, Some(&fx.workspace.join("sleep.alive")), &run);
}

#[test]
fn timeout_kills_a_command_that_ignores_sigterm() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = assert_times_out(&fx, &["ignore-term-sleep", "60"]);
    assert_nothing_alive(&fx, None, &run);
}

#[test]
fn timeout_kills_a_double_forked_daemon() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    // The daemon may die as soon as its parent exits (the sandbox's pid
    // namespace goes with bwrap's init), or at the timeout; either way
    // nothing may be left once the runner has returned.
    let run = fx.run(
        &["double-fork", "/workspace/pid", "60"],
        json!({"timeout_ms": 1500}),
    );
    assert!(run.stdout().starts_with("READY"), "never started:{run}");
    assert!(matches!(run.status(), "exited" | "timed_out"), "{run}");
    assert!(fx.workspace.join("pid").is_file(), "no pidfile:{run}");
    assert_nothing_alive(&fx, Some(&fx.workspace.join("pid.alive")), &run);
}

#[test]
fn killing_the_runner_kills_the_sandbox() {
    if !require_sandbox() {
        return;
    }
    use std::io::BufRead;

    let fx = Fixture::new();
    let alive = fx.workspace.join("sleep.alive");
    let job = fx.world.job(
        "job",
        &fx.probe_job(
            &["sleep", "60", "/workspace/sleep.alive"],
            json!({"timeout_ms": 60000}),
        ),
    );
    let mut runner = fx
        .world
        .cmd()
        .arg("run")
        .arg(&job)
        .envs(prepared_env().iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = runner.stdout.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "READY" {
                let _ = ready_tx.send(());
            }
        }
    });
    if ready_rx.recv_timeout(HANG_GUARD).is_err() {
        let _ = runner.kill();
        let _ = runner.wait();
        panic!("the probe never printed READY");
    }
    // Alive and beating before the kill, so that a still heartbeat after it
    // means something.
    let first = heartbeat(&alive);
    let deadline = Instant::now() + HANG_GUARD;
    while heartbeat(&alive) == first {
        assert!(Instant::now() < deadline, "the heartbeat never advanced");
        std::thread::sleep(Duration::from_millis(50));
    }

    runner.kill().unwrap(); // SIGKILL: no chance to clean up
    runner.wait().unwrap();

    // The heartbeat stops soon after: poll for a still half second.
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let before = heartbeat(&alive);
        std::thread::sleep(Duration::from_millis(500));
        if heartbeat(&alive) == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sandbox outlived its runner: heartbeat still advancing; processes: {:?}",
            processes_in(&fx.workspace)
        );
    }
    assert_nothing_alive(&fx, Some(&alive), &"(runner killed with SIGKILL)");
}

/// Regression: a runner starting with another data dir swept the cgroups of
/// every execution it did not know and SIGKILLed running sandboxes
/// (`cgroup::sweep` looked for lock files in its own data dir only).
#[test]
fn a_runner_with_another_data_dir_leaves_running_sandboxes_alone() {
    if !require_sandbox() {
        return;
    }
    let long = Fixture::new();
    let alive = long.workspace.join("sleep.alive");
    let job = long.probe_job(
        &["sleep", "2", "/workspace/sleep.alive"],
        json!({"timeout_ms": 30000}),
    );
    let running = std::thread::spawn(move || (long.run_job(&job), long));
    let deadline = Instant::now() + HANG_GUARD;
    while heartbeat(&alive).is_none() {
        assert!(Instant::now() < deadline, "the long job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let other = Fixture::new();
    let run = other.run(&["exit", "0"], json!({}));
    assert_eq!(run.status(), "exited", "{run}");
    let (run, _long) = running.join().unwrap();
    assert_eq!(
        run.status(),
        "exited",
        "the other runner killed this sandbox:{run}"
    );
    assert_eq!(run.exit_code(), Some(0), "{run}");
}

// ---------------------------------------------------------------------------
// Input, output and how the command ended
// ---------------------------------------------------------------------------

#[test]
fn stdin_reaches_the_command() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let mut job = fx.probe_job(&["echo-stdin"], json!({}));
    job["stdin"] = json!("hello\n");
    let run = fx.run_job(&job);
    assert_eq!(run.status(), "exited", "{run}");
    assert_eq!(run.stdout(), "hello\n", "{run}");
}

#[test]
fn output_is_capped_at_output_bytes() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["flood", "10000000"], json!({"output_bytes": 65536}));
    assert_eq!(run.status(), "exited", "{run}");
    assert_eq!(run.exit_code(), Some(0), "{run}");
    assert_eq!(run.stdout().len(), 65536, "{run}");
    assert!(run.stdout().bytes().all(|b| b == b'x'), "{run}");
    assert_eq!(run.doc["stdout_truncated"], true, "{run}");
    assert_eq!(run.doc["stderr_truncated"], false, "{run}");
}

#[test]
fn exit_code_is_passed_through() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let run = fx.run(&["exit", "7"], json!({}));
    assert_eq!(run.status(), "exited", "{run}");
    assert_eq!(run.exit_code(), Some(7), "{run}");
    assert_eq!(run.code, 7, "{run}");
}

/// Kills itself with `signal`; the result must say so, and `run` exit 128+N.
fn assert_killed_by(signal: i32) {
    let fx = Fixture::new();
    let run = fx.run(&["kill-self", &signal.to_string()], json!({}));
    assert_eq!(run.status(), "signaled", "{run}");
    assert_eq!(run.signal(), Some(i64::from(signal)), "{run}");
    assert_eq!(run.exit_code(), None, "{run}");
    assert_eq!(run.code, 128 + signal, "{run}");
}

#[test]
fn death_by_sigterm_is_reported() {
    if !require_sandbox() {
        return;
    }
    assert_killed_by(libc::SIGTERM);
}

#[test]
fn death_by_sigkill_is_reported() {
    if !require_sandbox() {
        return;
    }
    assert_killed_by(libc::SIGKILL);
}

#[test]
fn missing_command_exits_127() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let mut job = fx.probe_job(&[], json!({}));
    job["argv"] = json!(["/workspace/nope"]);
    let run = fx.run_job(&job);
    assert_eq!(run.code, 127, "{run}");
    assert_eq!(run.exit_code(), Some(127), "{run}");
}

#[test]
fn non_executable_command_exits_126() {
    if !require_sandbox() {
        return;
    }
    let fx = Fixture::new();
    let file = fx.workspace.join("not-executable");
    std::fs::write(&file, "#!/bin/sh\necho should not run\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut job = fx.probe_job(&[], json!({}));
    job["argv"] = json!(["/workspace/not-executable"]);
    let run = fx.run_job(&job);
    assert_eq!(run.code, 126, "{run}");
    assert_eq!(run.exit_code(), Some(126), "{run}");
    assert!(!run.stdout().contains("should not run"), "{run}");
}
