//! The host suite: the sandboxed command is never host root,
//! host-global state is out of its reach whatever uid it has, and every
//! limit holds or the job is refused.
//!
//! Each test attempts the forbidden thing inside a real bubblewrap sandbox
//! started by the real binary, next to a positive control that shows the
//! attempt would have been seen. As root they run twice in CI: as host
//! root (the runner switches to the sandbox user) and inside a user
//! namespace that maps uid 0 alone (the runner cannot switch; the
//! identity-independent measures must hold on their own).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

use serde_json::{json, Value};
use skill_runner_tests::*;

/// Runs `sh -c SCRIPT` with `extra` merged into the job.
fn sh(world: &World, script: &str, extra: Value) -> (i32, Value) {
    let mut job = json!({"argv": ["sh", "-c", script]});
    for (k, v) in extra.as_object().unwrap() {
        job[k] = v.clone();
    }
    let (code, doc, _) = world.run_json(&job);
    (code, doc)
}

fn stdout(doc: &Value) -> &str {
    doc["stdout"].as_str().unwrap_or("")
}

/// Prints `WRITABLE <f>` for each file that opens for appending.
const TRY_OPEN: &str = r#"for f in "$@"; do if [ -e "$f" ]; then if (: >> "$f") 2>/dev/null; then echo "WRITABLE $f"; else echo "refused $f"; fi; fi; done"#;

#[test]
fn host_global_proc_files_cannot_be_opened_for_writing() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    // Opening is enough; nothing is ever written.
    let files = [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/modprobe",
        "/proc/sys/vm/dirty_writeback_centisecs",
        "/proc/sys/vm/drop_caches",
        "/proc/sys/fs/file-max",
        "/proc/sys/kernel/hostname",
        "/proc/sysrq-trigger",
        "/proc/self/oom_score_adj",
    ];
    // Positive control: the same loop sees a writable file.
    let script = format!("touch /tmp/control; {TRY_OPEN}");
    let mut argv = vec!["sh", "-c", &script, "sh"];
    argv.extend(files);
    argv.push("/tmp/control");
    let job = json!({ "argv": argv });
    let (code, doc, _) = world.run_json(&job);
    assert_eq!(code, 0, "{doc}");
    let out = stdout(&doc);
    assert!(out.contains("WRITABLE /tmp/control"), "no control: {out}");
    assert!(
        out.contains("refused /proc/sys/kernel/core_pattern"),
        "{out}"
    );
    let leaks: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("WRITABLE /proc"))
        .collect();
    assert!(leaks.is_empty(), "writable host-global files: {leaks:?}");
}

#[test]
fn host_device_nodes_cannot_be_changed_or_added() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let before = std::fs::metadata("/dev/null").unwrap().mode();
    let (code, doc) = sh(
        &world,
        r#"for d in /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty; do
             if chmod 600 "$d" 2>/dev/null; then echo "CHMOD $d"; fi
             if chmod 666 "$d" 2>/dev/null; then echo "CHMOD $d"; fi
             if touch -d @0 "$d" 2>/dev/null; then echo "TOUCHED $d"; fi
           done
           if touch /dev/planted 2>/dev/null; then echo PLANTED; fi
           if mkdir /dev/dir 2>/dev/null; then echo PLANTED; fi
           echo control > /dev/null && echo WROTE-NULL
           head -c 4 /dev/zero | wc -c"#,
        json!({}),
    );
    assert_eq!(code, 0, "{doc}");
    let out = stdout(&doc);
    assert!(out.contains("WROTE-NULL"), "control: {out}");
    assert!(
        !out.contains("CHMOD"),
        "a host device node changed mode: {out}"
    );
    assert!(
        !out.contains("TOUCHED"),
        "a host device node changed times: {out}"
    );
    assert!(
        !out.contains("PLANTED"),
        "a file was planted in /dev: {out}"
    );
    assert_eq!(std::fs::metadata("/dev/null").unwrap().mode(), before);
}

#[test]
fn no_setuid_or_setgid_file_can_be_left_in_a_workspace() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    let (code, doc) = sh(
        &world,
        r#"cp /bin/sh ./s && echo COPIED
           chmod 755 ./s && echo CHMOD-755
           chmod u+s ./s 2>/dev/null && echo SETUID
           chmod g+s ./s 2>/dev/null && echo SETGID
           chmod 4755 ./s 2>/dev/null && echo SETUID
           install -m 4755 /bin/sh ./t 2>/dev/null && echo SETUID-INSTALL
           mkdir d && chmod g+s d 2>/dev/null && echo SETGID-DIR
           true"#,
        json!({"workspace": ws}),
    );
    assert_eq!(code, 0, "{doc}");
    let out = stdout(&doc);
    assert!(out.contains("COPIED"), "{out}");
    // A sandbox whose uid is the parent namespace's root may change no
    // mode at all (crate::sandbox::identity); any other may change ordinary bits.
    let root_mapped = doc["identity"]["root_mapped"] == true;
    assert_eq!(out.contains("CHMOD-755"), !root_mapped, "{doc}");
    assert!(!out.contains("SETUID") && !out.contains("SETGID"), "{out}");
    // And from the host: nothing set-id below the workspace.
    let mut stack = vec![ws.clone()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(meta.mode() & 0o6000, 0, "{} is set-id", p.display());
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
}

#[test]
fn the_command_is_never_host_root() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    let (code, doc) = sh(&world, "id -u > made-here", json!({"workspace": ws}));
    assert_eq!(code, 0, "{doc}");
    let owner = std::fs::metadata(ws.join("made-here")).unwrap().uid();
    let identity = &doc["identity"];
    match sandbox_uid() {
        Some(uid) => {
            // A root runner: the command ran as the sandbox user.
            assert_eq!(owner, uid, "{doc}");
            assert_eq!(identity["mode"], "sandbox_user", "{doc}");
            assert_eq!(identity["uid"], uid, "{doc}");
            assert_eq!(identity["root_mapped"], false, "{doc}");
        }
        // SAFETY: geteuid has no preconditions.
        None if unsafe { libc::geteuid() } == 0 => {
            // Root of a namespace mapping uid 0 alone: it says so.
            assert_eq!(identity["mode"], "runner_root_only", "{doc}");
            assert!(
                identity["note"].as_str().unwrap().contains("65533"),
                "{doc}"
            );
        }
        None => {
            // SAFETY: geteuid has no preconditions.
            assert_eq!(owner, unsafe { libc::geteuid() }, "{doc}");
            assert_eq!(identity["mode"], "runner_user", "{doc}");
        }
    }
}

#[test]
fn a_workspace_the_sandbox_user_cannot_write_is_refused_with_the_fix() {
    if !require_sandbox() {
        return;
    }
    let Some(uid) = sandbox_uid() else {
        skip("the runner keeps its own uid here");
        return;
    };
    let world = World::new();
    let ws = world.path().join("roots-own");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, doc) = sh(&world, "touch x", json!({"workspace": ws}));
    assert_eq!(code, 125, "{doc}");
    assert_eq!(doc["status"], "rejected", "{doc}");
    let msg = doc["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&uid.to_string()) && msg.contains("chown"),
        "{msg}"
    );
    assert!(!ws.join("x").exists());
    // A fresh default workspace just works.
    let (code, doc) = sh(&world, "touch x && echo ok", json!({}));
    assert_eq!((code, stdout(&doc)), (0, "ok\n"), "{doc}");
}

#[test]
fn a_fresh_workspace_is_bounded_by_disk_bytes() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    // Many files, each far below file_size_bytes.
    let (code, doc) = sh(
        &world,
        r#"i=0; while [ $i -lt 64 ]; do
             head -c 1048576 /dev/zero > f$i 2>/dev/null || { echo "FULL at $i"; exit 7; }
             i=$((i+1))
           done; echo "WROTE 64 MiB""#,
        json!({"limits": {"disk_bytes": 8 << 20, "file_size_bytes": 4 << 20}}),
    );
    assert_eq!(code, 7, "{doc}");
    assert!(stdout(&doc).starts_with("FULL at "), "{doc}");
    assert_eq!(doc["limits"]["disk_bytes"]["enforced_by"], "tmpfs", "{doc}");
    // The extensions dir shares the bound: it lives in the workspace.
    let (code, doc) = sh(
        &world,
        r#"head -c 16777216 /dev/zero > /skill-extensions/big 2>/dev/null || exit 7"#,
        json!({"limits": {"disk_bytes": 8 << 20}}),
    );
    assert_eq!(code, 7, "{doc}");
}

#[test]
fn a_host_workspace_filled_past_disk_bytes_ends_the_run() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    // Files below file_size_bytes, then a wait the watcher must cut.
    let (code, doc) = sh(
        &world,
        r#"i=0; while [ $i -lt 24 ]; do
             head -c 1048576 /dev/zero > f$i || exit 3
             i=$((i+1))
           done; sleep 60"#,
        json!({"workspace": ws, "limits": {"disk_bytes": 8 << 20, "file_size_bytes": 4 << 20, "timeout_ms": 50000}}),
    );
    assert_eq!(doc["status"], "limit_exceeded", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disk_bytes"),
        "{doc}"
    );
    assert_eq!(
        doc["limits"]["disk_bytes"]["enforced_by"], "watcher",
        "{doc}"
    );
    assert_ne!(code, 0);
    // Under the limit, the same host workspace is fine.
    let (code, doc) = sh(
        &world,
        "rm -f f*; head -c 1048576 /dev/zero > small && echo ok",
        json!({"workspace": ws, "limits": {"disk_bytes": 8 << 20}}),
    );
    assert_eq!((code, stdout(&doc)), (0, "ok\n"), "{doc}");
}

#[test]
fn a_host_extensions_dir_beside_a_fresh_workspace_is_watched_too() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let ext = world.sandbox_folder("ext");
    let (_, doc) = sh(
        &world,
        r#"i=0; while [ $i -lt 24 ]; do
             head -c 1048576 /dev/zero > /skill-extensions/f$i || exit 3
             i=$((i+1))
           done; sleep 60"#,
        json!({"extensions_dir": ext, "limits": {"disk_bytes": 8 << 20, "file_size_bytes": 4 << 20, "timeout_ms": 50000}}),
    );
    assert_eq!(doc["status"], "limit_exceeded", "{doc}");
    assert_eq!(
        doc["limits"]["disk_bytes"]["enforced_by"], "watcher",
        "{doc}"
    );
}

#[test]
fn space_allocated_past_the_file_size_is_refused() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    // fallocate --keep-size allocates blocks RLIMIT_FSIZE never sees.
    let (code, doc) = sh(
        &world,
        "touch keep && fallocate -n -l 64M keep 2>/dev/null && echo ALLOCATED; fallocate -l 1M plain && echo PLAIN",
        json!({"workspace": ws, "limits": {"file_size_bytes": 4 << 20}}),
    );
    assert_eq!(code, 0, "{doc}");
    assert!(stdout(&doc).contains("PLAIN"), "control: {doc}");
    assert!(!stdout(&doc).contains("ALLOCATED"), "{doc}");
    let blocks = std::fs::metadata(ws.join("keep")).unwrap().blocks();
    assert!(blocks * 512 < 1 << 20, "{blocks} blocks allocated");
}

#[test]
fn dev_shm_is_bounded() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let (code, doc) = sh(
        &world,
        r#"head -c 1048576 /dev/zero > /dev/shm/small || exit 3
           head -c 67108864 /dev/zero > /dev/shm/big 2>/dev/null || exit 7"#,
        json!({"limits": {"tmp_bytes": 8 << 20}}),
    );
    assert_eq!(code, 7, "/dev/shm took 64 MiB with tmp_bytes 8 MiB: {doc}");
}

/// The probe's `fork-bomb` report in a result: the forks it made, and
/// the whole line (`FORKS n first_error=…`).
fn fork_report(doc: &Value) -> (u64, String) {
    let report = stdout(doc).trim().to_owned();
    let forks = report
        .strip_prefix("FORKS ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fork report: {doc}"));
    (forks, report)
}

/// Processes of the sandbox user that belong to no execution.
struct Squatters(Vec<std::process::Child>);

impl Squatters {
    fn spawn(uid: u32, n: usize) -> Squatters {
        use std::os::unix::process::CommandExt;
        Squatters(
            (0..n)
                .map(|_| {
                    Command::new("sleep")
                        .arg("60")
                        .uid(uid)
                        .gid(uid)
                        .spawn()
                        .expect("spawn sleep as the sandbox user")
                })
                .collect(),
        )
    }
}

impl Drop for Squatters {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn the_pids_rlimit_counts_only_the_executions_own_processes() {
    if !require_sandbox() {
        return;
    }
    let Some(uid) = sandbox_uid() else {
        skip("needs a root runner with a sandbox user");
        return;
    };
    if !can_unshare_mounts() {
        skip("needs root to hide the cgroup file systems");
        return;
    }
    // More processes of the sandbox's host uid than the job's limit, as
    // other executions would have: they must not use up its budget, nor
    // keep bubblewrap from creating the sandbox.
    let _others = Squatters::spawn(uid, 30);
    let world = World::new();
    let ws = world.workspace_with_probe();
    let job = json!({
        "argv": ["/workspace/probe", "fork-bomb", "1"],
        "workspace": ws,
        "limits": {"pids": 20, "timeout_ms": 20000},
    });
    let (code, doc) = run_without_cgroups(&world, &job);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["limits"]["pids"]["enforced_by"], "rlimit", "{doc}");
    let (forks, report) = fork_report(&doc);
    // 20 counts bubblewrap's pid 1 and the probe, and each fork-bomb child
    // forks once more: about 9 forks use the whole budget. Counted with
    // the 30 other processes, there would be none (or no sandbox at all).
    assert!(
        (5..20).contains(&forks),
        "{forks} forks under pids 20: {doc}"
    );
    assert!(report.contains("first_error=EAGAIN"), "{doc}");
}

/// Runs the runner inside a private mount namespace whose
/// `/sys/fs/cgroup` is an empty read-only tmpfs: no writable cgroup.
fn run_without_cgroups(world: &World, job: &Value) -> (i32, Value) {
    let path = world.job("nocg", job);
    let script = r#"mount -t tmpfs -o ro,size=4k none /sys/fs/cgroup && exec "$0" run --json "$1""#;
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
        ])
        .arg(runner_bin())
        .arg(&path)
        .env("SKILL_RUNNER_DATA_DIR", world.data_dir())
        .env_remove("SKILL_RUNNER_LOG")
        .output()
        .expect("run unshare");
    let code = out.status.code().unwrap_or(-1);
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", show(&out)));
    (code, doc)
}

fn can_unshare_mounts() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("unshare")
        .args([
            "--mount", "--", "mount", "-t", "tmpfs", "-o", "ro", "none", "/mnt",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn without_writable_cgroups_a_fork_bomb_is_bounded_or_the_job_refused() {
    if !require_sandbox() {
        return;
    }
    if !can_unshare_mounts() {
        skip("needs root to hide the cgroup file systems");
        return;
    }
    let world = World::new();
    let ws = world.workspace_with_probe();
    let job = json!({
        "argv": ["/workspace/probe", "fork-bomb", "2"],
        "workspace": ws,
        "limits": {"pids": 20, "timeout_ms": 20000},
    });
    let (code, doc) = run_without_cgroups(&world, &job);
    let pids = &doc["limits"]["pids"];
    let identity_root_mapped = {
        let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        sandbox_uid().is_none() && skill_runner::sandbox::identity::outside(&map, 0) == Some(0)
    };
    if identity_root_mapped {
        // RLIMIT_NPROC does not bind host root: refused, never dropped.
        assert_eq!(code, 125, "{doc}");
        assert_eq!(doc["status"], "rejected", "{doc}");
        let msg = doc["error"]["message"].as_str().unwrap();
        assert!(msg.contains("pids limit cannot be enforced"), "{msg}");
    } else {
        assert_eq!(pids["enforced_by"], "rlimit", "{doc}");
        let (forks, report) = fork_report(&doc);
        assert!(forks < 20, "{forks} forks under pids 20: {doc}");
        assert!(report.contains("first_error=EAGAIN"), "{doc}");
    }
    // The memory limit falls back to RLIMIT_AS, and says so.
    let (_, doc) = run_without_cgroups(&world, &json!({"argv": ["true"], "limits": {"pids": 20}}));
    if doc["status"] != "rejected" {
        assert_eq!(
            doc["limits"]["memory_bytes"]["enforced_by"], "rlimit",
            "{doc}"
        );
    }
}

/// The default extensions dir of a host workspace is bound for the whole
/// run: renaming it and planting a link in its place (as another job on
/// the same workspace could, at any moment) does not move where
/// `/skill-extensions` writes.
#[test]
fn the_default_extensions_dir_cannot_be_redirected_during_a_run() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let ws = world.sandbox_folder("ws");
    let (code, doc) = sh(
        &world,
        "cd /workspace/.sciencediscovery && mv skill-extensions moved && ln -s /workspace skill-extensions && echo x > /skill-extensions/state",
        json!({"workspace": ws}),
    );
    assert_eq!(code, 0, "{doc}");
    assert!(
        ws.join(".sciencediscovery/moved/state").is_file(),
        "the write left the bound folder: {doc}"
    );
    assert!(!ws.join("state").exists(), "the link redirected it: {doc}");
}
