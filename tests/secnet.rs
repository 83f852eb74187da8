//! What a sandbox can reach of the runner's disk, network and accounting,
//! proven by trying it: every writable mount is bounded by a limit, the
//! disk watcher survives a wide tree and a small descriptor limit, a proxy
//! refusal tells the sandbox nothing of the runner's network, and the
//! result's CPU time counts the whole process tree.

use std::path::PathBuf;

use serde_json::{json, Value};
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// The bwrap argv `explain --json` prints for `job`.
fn explained_argv(world: &World, job: &Value) -> Vec<String> {
    let path = world.job("explain", job);
    let out = world
        .cmd()
        .args(["explain", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// The sandbox paths an argv mounts writable: bwrap's root and every bind,
/// tmpfs or device folder that no later `--remount-ro` names. An option
/// this reader does not know fails the test, so a new kind of mount
/// cannot slip past it.
fn writable_mounts(argv: &[String]) -> Vec<String> {
    // (option, how many arguments, the index of the mount point if it
    // mounts something writable).
    let known: &[(&str, usize, Option<usize>)] = &[
        ("--unshare-all", 0, None),
        ("--unshare-user", 0, None),
        ("--disable-userns", 0, None),
        ("--die-with-parent", 0, None),
        ("--new-session", 0, None),
        ("--clearenv", 0, None),
        ("--cap-drop", 1, None),
        ("--uid", 1, None),
        ("--gid", 1, None),
        ("--hostname", 1, None),
        ("--chdir", 1, None),
        ("--add-seccomp-fd", 1, None),
        ("--size", 1, None),
        ("--perms", 1, None),
        ("--remount-ro", 1, None),
        ("--dir", 1, None),
        ("--setenv", 2, None),
        ("--symlink", 2, None),
        ("--ro-bind", 2, None),
        ("--ro-bind-try", 2, None),
        ("--ro-bind-fd", 2, None),
        ("--file", 2, None),
        ("--ro-bind-data", 2, None),
        ("--proc", 1, Some(0)),
        ("--dev", 1, Some(0)),
        ("--tmpfs", 1, Some(0)),
        ("--bind", 2, Some(1)),
        ("--bind-try", 2, Some(1)),
        ("--bind-fd", 2, Some(1)),
        ("--dev-bind", 2, Some(1)),
        ("--dev-bind-try", 2, Some(1)),
        ("--bind-data", 2, Some(1)),
    ];
    let mut writable = vec!["/".to_owned()];
    let mut i = 0;
    while i < argv.len() && argv[i] != "--" {
        let opt = argv[i].as_str();
        let &(_, n, at) = known.iter().find(|k| k.0 == opt).unwrap_or_else(|| {
            panic!(
                "bwrap option {opt} is new to this test: say whether it mounts something writable"
            )
        });
        let args = &argv[i + 1..i + 1 + n];
        if opt == "--remount-ro" {
            writable.retain(|w| w != &args[0]);
        }
        if let Some(at) = at {
            writable.push(args[at].clone());
        }
        i += 1 + n;
    }
    writable
}

/// A folder on a tmpfs when the host has one (`/dev/shm`), else in the
/// world: making thousands of folders on a disk takes seconds.
fn fast_folder(world: &World, name: &str) -> (Option<tempfile::TempDir>, PathBuf) {
    if let Ok(d) = tempfile::Builder::new()
        .prefix("sr-test-")
        .tempdir_in("/dev/shm")
    {
        std::fs::set_permissions(
            d.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let dir = d.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        give_to_sandbox(&dir);
        return (Some(d), dir);
    }
    (None, world.sandbox_folder(name))
}

/// Writes 48 MiB, 4 MiB a file, below `dir` inside the sandbox, past
/// limits of 16 MiB; `wrote` only if every write succeeded.
fn fill_script(dir: &str) -> String {
    format!(
        "i=0; while [ $i -lt 12 ]; do head -c 4194304 /dev/zero > {dir}/fill$i || exit 3; i=$((i+1)); done; sleep 1; echo wrote"
    )
}

#[test]
fn every_writable_mount_is_bounded_by_a_limit() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let workspace = world.sandbox_folder("ws");
    let extensions = world.sandbox_folder("ext");
    // Every kind of writable folder a plan has: host workspace and
    // extensions dir with an allowlist (the proxy's folder), and a fresh
    // workspace holding its own extensions dir.
    let plans = [
        json!({"workspace": workspace, "extensions_dir": extensions,
               "network": {"allow": ["localhost:9"], "private": true}}),
        json!({}),
    ];
    let mut tried = Vec::new();
    for plan in plans {
        let mut job = plan.clone();
        job["argv"] = json!(["true"]);
        let mounts = writable_mounts(&explained_argv(&world, &job));
        assert!(mounts.contains(&"/workspace".to_owned()), "{mounts:?}");
        for mount in mounts {
            let mut job = plan.clone();
            job["argv"] = json!(["sh", "-c", fill_script(&mount)]);
            job["limits"] = json!({
                "disk_bytes": 16 << 20, "tmp_bytes": 16 << 20,
                "file_size_bytes": 64 << 20, "memory_bytes": 512 << 20,
                "timeout_ms": 60000,
            });
            let (_, doc, _) = world.run_json_env(&job, &[]);
            let bounded = match doc["status"].as_str().unwrap() {
                "limit_exceeded" => doc["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("disk_bytes"),
                "exited" => {
                    doc["exit_code"] != 0 && !doc["stdout"].as_str().unwrap().contains("wrote")
                }
                _ => false,
            };
            assert!(
                bounded,
                "48 MiB went into {mount} past 16 MiB limits: {doc:#}"
            );
            tried.push(mount);
        }
    }
    // The proxy's folder is on the data dir's disk and nothing watches it:
    // it must not be among the writable mounts at all.
    assert!(
        !tried.contains(&"/run/skill-runner".to_owned()),
        "{tried:?}"
    );
    assert!(tried.contains(&"/skill-extensions".to_owned()), "{tried:?}");
}

/// The proxy's folder is read-only to the command, and its socket still
/// serves (the allowlist tests reach origins through it).
#[test]
fn the_proxy_folder_is_read_only() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let job = json!({
        "argv": ["sh", "-c", "echo x > /run/skill-runner/f && echo wrote; mkdir /run/skill-runner/d && echo made; test -S /run/skill-runner/proxy.sock && echo socket"],
        "network": {"allow": ["localhost:9"], "private": true},
    });
    let (_, doc, _) = world.run_json_env(&job, &[]);
    assert_eq!(doc["stdout"], "socket\n", "{doc:#}");
    assert!(
        doc["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{doc:#}"
    );
}

/// 3,000 empty folders side by side gave a false `limit_exceeded` at a
/// 1024 descriptor limit: the watcher held a descriptor per folder. Here
/// the runner has 256.
#[test]
fn a_wide_workspace_is_watched_under_a_small_descriptor_limit() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let (_keep, workspace) = fast_folder(&world, "ws");
    for i in 0..3000 {
        std::fs::create_dir(workspace.join(format!("d{i}"))).unwrap();
    }
    give_to_sandbox(&workspace);
    let job = world.job(
        "job",
        &json!({"argv": ["sleep", "0.5"], "workspace": workspace,
                "limits": {"disk_bytes": 1 << 30}}),
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "ulimit -Sn 256 && exec \"$@\"", "sh"])
        .arg(runner_bin())
        .args(["run", "--json"])
        .arg(&job)
        .env("SKILL_RUNNER_DATA_DIR", world.data_dir())
        .env_remove("SKILL_RUNNER_LOG")
        .stdin(std::process::Stdio::null());
    let out = output_within(&mut cmd, std::time::Duration::from_secs(120));
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&out)));
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
}

/// A listed name that resolves to an internal address is refused, and the
/// refusal says what kind of address it is, never which.
#[test]
fn a_proxy_refusal_does_not_tell_the_resolved_address() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let workspace = world.workspace_with_probe();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = listener.local_addr().unwrap().port();
    let job = json!({
        "argv": ["sh", "-c", format!("/workspace/probe proxy-get http://localhost:{p}/; /workspace/probe proxy-connect localhost:{p} /")],
        "workspace": workspace,
        "network": {"allow": [format!("localhost:{p}")]},
    });
    let (_, doc, _) = world.run_json_env(&job, &[]);
    let stdout = doc["stdout"].as_str().unwrap();
    assert_eq!(stdout.lines().count(), 2, "{doc:#}");
    for line in stdout.lines() {
        assert!(
            line.starts_with("HTTP 403 private_address localhost is listed, but resolves to a loopback address (127.0.0.0/8 Loopback, RFC 1122)"),
            "{line}"
        );
        for address in ["127.0.0.1", "::1"] {
            assert!(!line.contains(address), "{line} names {address}");
        }
    }
}

/// `usage.cpu_ms` counts the whole process tree: a command whose child
/// spun ~200 ms reported 1 ms (bwrap's own rusage, which misses its pid 1
/// and everything below). The child reads its own utime + stime from
/// `/proc/self/stat` and prints it; the result must be within 20% of it,
/// over what the same tree costs when its child does not spin (measured
/// alongside: bwrap, the shim and two shells, a few ms on a real machine,
/// hundreds and varying in an emulated guest, where the child spins longer
/// and the rest may cost twice what the control took).
#[test]
fn cpu_time_counts_the_whole_process_tree() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let spin = |ticks: u32| {
        let script = format!(
            "while :; do read -r a b c d e f g h i j k l m ut st rest < /proc/self/stat; \
             [ $((ut+st)) -ge {ticks} ] && break; n=0; while [ $n -lt 2000 ]; do n=$((n+1)); done; done; \
             echo $((ut+st))"
        );
        let job = json!({"argv": ["sh", "-c", format!("sh -c '{script}'")]});
        let (_, doc, _) = world.run_json_env(&job, &[]);
        assert_eq!(doc["status"], "exited", "{doc:#}");
        doc
    };
    // SAFETY: sysconf has no preconditions.
    let tick_ms = 1000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let control = spin(0);
    let by = control["limits"]["memory_bytes"]["enforced_by"]
        .as_str()
        .unwrap();
    assert_cgroup_mechanism(by, &control);
    if !by.starts_with("cgroup") {
        // Without a cgroup nothing counts the tree (docs/sandbox.md).
        skip("no cgroup here");
        return;
    }
    let overhead = control["usage"]["cpu_ms"].as_u64().unwrap();
    let doc = spin((200.max(2 * overhead) / tick_ms) as u32);
    let child_ms = doc["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap()
        * tick_ms;
    let reported = doc["usage"]["cpu_ms"].as_u64().unwrap();
    assert!(
        reported * 10 >= child_ms * 8 && reported * 10 <= (child_ms + 2 * overhead) * 12,
        "the child used {child_ms} ms of CPU, the tree without it {overhead} ms, the result says {reported}: {doc:#}"
    );
}

/// One blocking execution through the daemon: its result document.
fn run_through(daemon: &Daemon, job: &Value) -> Value {
    let resp = daemon.post("/v1/executions", job);
    let doc = resp.json();
    assert_eq!(resp.status, 200, "{doc:#}");
    doc
}

/// The daemon's cgroup pool carried one tenant's memory charge to the
/// next: a job left 200 MB of files in a workspace on a tmpfs of the host
/// and exited 0, its pooled cgroup stayed charged with no process in it,
/// and the next job, under the same 256 MiB limit, failed on memory_bytes
/// at its first 100 MB.
#[test]
fn a_pooled_cgroup_carries_no_memory_charge_to_the_next_execution() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let Ok(shm) = tempfile::Builder::new()
        .prefix("sr-test-")
        .tempdir_in("/dev/shm")
    else {
        skip("no /dev/shm");
        return;
    };
    std::fs::set_permissions(
        shm.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let workspace = shm.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    give_to_sandbox(&workspace);
    let root = shm.path().to_str().unwrap();
    let daemon = Daemon::start(&world, &["--root", root, "--max-running", "1"]);
    let limits = json!({"memory_bytes": 256 << 20, "tmp_bytes": 128 << 20,
                        "disk_bytes": 1 << 30, "timeout_ms": 60000});
    let leave = run_through(
        &daemon,
        &json!({
            "argv": ["sh", "-c", "head -c 209715200 /dev/zero > /workspace/left-behind"],
            "workspace": workspace, "limits": limits,
        }),
    );
    assert_eq!(leave["status"], "exited", "{leave:#}");
    let by = leave["limits"]["memory_bytes"]["enforced_by"]
        .as_str()
        .unwrap();
    assert_cgroup_mechanism(by, &leave);
    if !by.starts_with("cgroup") {
        skip("no memory cgroup");
        return;
    }
    for _ in 0..2 {
        let next = run_through(
            &daemon,
            &json!({
                "argv": ["sh", "-c", "head -c 104857600 /dev/zero > /tmp/x && echo ok"],
                "limits": limits,
            }),
        );
        assert_eq!(next["status"], "exited", "{next:#}");
        assert_eq!(next["stdout"], "ok\n", "{next:#}");
    }
    // The files are still there: nothing of the tenant's was deleted.
    assert_eq!(
        std::fs::metadata(workspace.join("left-behind"))
            .unwrap()
            .len(),
        209715200
    );
}

/// With `pidfd_getfd` a command could copy a descriptor of bubblewrap's
/// pid 1, among them the one it reports the command's exit code on, and
/// end its run with a code of its choosing while it still ran. The call
/// is refused; `pidfd_open` itself (asyncio uses it) still works.
#[test]
fn a_command_cannot_copy_descriptors_of_the_sandbox_init() {
    if !require_sandbox() {
        return;
    }
    if !std::path::Path::new("/usr/bin/python3").exists() {
        skip("no python3");
        return;
    }
    let world = World::new();
    let script = "import ctypes, os\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        pidfd = libc.syscall(434, 1, 0)\n\
        print('pidfd_open', 'ok' if pidfd >= 0 else os.strerror(ctypes.get_errno()))\n\
        got = [n for n in range(64) if libc.syscall(438, pidfd, n, 0) >= 0]\n\
        print('pidfd_getfd', got, os.strerror(ctypes.get_errno()))\n";
    let job = json!({"argv": ["python3", "-c", script]});
    let (_, doc, _) = world.run_json_env(&job, &[]);
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(
        doc["stdout"], "pidfd_open ok\npidfd_getfd [] Operation not permitted\n",
        "{doc:#}"
    );
}
