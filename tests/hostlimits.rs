//! Limits the host's own resources depend on: what a `SKILL.md` may cost
//! the parser and the catalog, and a `memory_bytes` that no cgroup holds
//! (docs/formats.md, "Skill packages"; docs/containers.md, "How limits
//! behave").
//!
//! The no-cgroup cases start the runner in a private mount namespace with
//! `/sys/fs/cgroup` unmounted, as in a container whose cgroupfs the runner
//! cannot write: memory then falls back to `RLIMIT_AS` per process. They
//! need root and `unshare`, and are counted as skipped without them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use skill_runner_tests::*;

// --- front matter and the catalog -------------------------------------------

/// `skill-runner catalog list` in `world/proj`, with `HOME` in the world.
fn catalog_list(world: &World, log: bool) -> Output {
    let mut c = world.cmd();
    c.env("HOME", world.path().join("home"))
        .current_dir(world.path().join("proj"))
        .args(["catalog", "list"]);
    if log {
        c.env("SKILL_RUNNER_LOG", "skill_runner::skillhost::catalog=debug");
    }
    output_within(&mut c, HANG_GUARD)
}

fn write_skill_md(dir: &Path, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

/// Sets the modification time of `path` an hour back, so that the catalog
/// index trusts its stamp at once (a stamp within 2 s of a scan is racy).
fn age(path: &Path) {
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(path)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
}

#[test]
fn deeply_nested_front_matter_is_refused_with_the_limit_named() {
    let world = World::new();
    let skills = world.path().join("proj/skills");
    // 60 KiB of nested brackets: under the size limit, parsed it took
    // seconds of CPU (512 KiB took minutes).
    let n = 30_000;
    write_skill_md(
        &skills.join("deep"),
        &format!(
            "---\nname: deep\ndescription: d\nmetadata: {}{}\n---\nbody\n",
            "[".repeat(n),
            "]".repeat(n)
        ),
    );
    write_skill_md(
        &skills.join("fine"),
        "---\nname: fine\ndescription: An ordinary skill.\nmetadata: {tags: [a, b]}\n---\nbody\n",
    );
    let out = catalog_list(&world, false);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("deep/SKILL.md: SKILL.md front matter: it nests collections")
            && stderr.contains("over the limit of 32; flatten the front matter"),
        "{}",
        show(&out)
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("fine") && !stdout.contains("deep "),
        "{}",
        show(&out)
    );
}

#[test]
fn front_matter_over_64_kib_is_refused_with_the_limit_named() {
    let world = World::new();
    let skills = world.path().join("proj/skills");
    write_skill_md(
        &skills.join("big"),
        &format!(
            "---\nname: big\ndescription: \"{}\"\n---\nbody\n",
            "x".repeat(70_000)
        ),
    );
    let out = catalog_list(&world, false);
    assert!(
        text(&out.stderr).contains("over the limit of 65536; keep long text in the body"),
        "{}",
        show(&out)
    );
}

/// The counts the catalog logs for one load.
fn load_counts(out: &Output) -> String {
    // Without the colours the log may carry.
    let mut stderr = String::new();
    let mut rest = text(&out.stderr);
    while let Some(at) = rest.find('\u{1b}') {
        stderr.push_str(&rest[..at]);
        rest = rest[at..]
            .find('m')
            .map_or(String::new(), |m| rest[at + m + 1..].to_owned());
    }
    stderr.push_str(&rest);
    let line = stderr
        .lines()
        .find(|l| l.contains("catalog loaded"))
        .unwrap_or_else(|| panic!("no 'catalog loaded' debug line:{}", show(out)));
    let fields: Vec<&str> = line
        .split_whitespace()
        .filter(|w| w.starts_with("scanned=") || w.starts_with("parsed="))
        .collect();
    fields.join(" ")
}

#[test]
fn an_unchanged_project_catalog_is_not_parsed_again() {
    let world = World::new();
    let skills = world.path().join("proj/skills");
    for name in ["alpha", "beta"] {
        let dir = skills.join(name);
        write_skill_md(
            &dir,
            &format!("---\nname: {name}\ndescription: The {name} skill.\n---\nbody\n"),
        );
        age(&dir.join("SKILL.md"));
        age(&dir);
    }
    age(&skills);

    let first = catalog_list(&world, true);
    assert_eq!(
        load_counts(&first),
        "scanned=1 parsed=2",
        "{}",
        show(&first)
    );
    // `./skills` did not change: taken from the index, nothing parsed.
    let again = catalog_list(&world, true);
    assert_eq!(
        load_counts(&again),
        "scanned=0 parsed=0",
        "{}",
        show(&again)
    );
    assert!(text(&again.stdout).contains("alpha") && text(&again.stdout).contains("beta"));

    // One skill edited: its folder is scanned again, and only it is parsed.
    let alpha = skills.join("alpha/SKILL.md");
    std::fs::write(
        &alpha,
        "---\nname: alpha\ndescription: The alpha skill, edited.\n---\nbody\n",
    )
    .unwrap();
    age(&alpha);
    let edited = catalog_list(&world, true);
    assert_eq!(
        load_counts(&edited),
        "scanned=1 parsed=1",
        "{}",
        show(&edited)
    );
    assert!(text(&edited.stdout).contains("The alpha skill, edited."));
}

// --- memory no cgroup holds --------------------------------------------------

/// A launcher that starts the runner with no cgroup file system, or `None`
/// (and the test is skipped) where that cannot be arranged.
fn without_cgroups(world: &World) -> Option<PathBuf> {
    let root = nix_is_root();
    let unshare = Path::new("/usr/bin/unshare").exists();
    if !root || !unshare {
        skip("needs root and /usr/bin/unshare to hide the cgroup file system");
        return None;
    }
    let launcher = world.path().join("no-cgroups");
    std::fs::write(
        &launcher,
        "#!/bin/sh\nexec /usr/bin/unshare --mount --propagation private /bin/sh -c \
         'umount -R -l /sys/fs/cgroup 2>/dev/null; exec \"$0\" \"$@\"' \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    // In a user namespace the mounts it inherited are locked together and
    // cannot be unmounted: then there is no such view to be had here.
    let hidden = Command::new(&launcher)
        .args([
            "/bin/sh",
            "-c",
            "! grep -q ' - cgroup' /proc/self/mountinfo",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !hidden {
        skip("/sys/fs/cgroup cannot be unmounted here (a user namespace's inherited mounts are locked)");
        return None;
    }
    Some(launcher)
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `skill-runner ARGS` through `launcher` (or directly), with the world's
/// data dir; `run --json` results are parsed.
fn runner(world: &World, launcher: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = match launcher {
        Some(l) => {
            let mut c = Command::new(l);
            c.arg(runner_bin());
            c
        }
        None => runner_command(),
    };
    c.env("SKILL_RUNNER_DATA_DIR", world.data_dir())
        .env_remove("SKILL_RUNNER_LOG")
        .stdin(Stdio::null())
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    output_within(&mut c, HANG_GUARD)
}

fn run_job(world: &World, launcher: Option<&Path>, job: &Value, flags: &[&str]) -> (Output, Value) {
    let path = world.job("job", job);
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(flags);
    let path = path.to_str().unwrap().to_owned();
    args.push(&path);
    let out = runner(world, launcher, &args, &[]);
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("run --json printed no JSON ({e}):{}", show(&out)));
    (out, doc)
}

/// Holds `mib` MiB in memfd files (not mapped, so outside `RLIMIT_AS`),
/// then prints `held`.
fn memfd_hog(mib: u64, memory_bytes: u64) -> Value {
    let script = format!(
        "import os\nchunk = b'x' * (1 << 20)\nfds = []\nfor i in range({}):\n    fd = os.memfd_create('hog')\n    for _ in range(16):\n        os.write(fd, chunk)\n    fds.append(fd)\nprint('held', flush=True)\n",
        mib / 16
    );
    json!({"argv": ["/usr/bin/python3", "-c", script], "limits": {"memory_bytes": memory_bytes}})
}

fn warnings(doc: &Value) -> String {
    doc["warnings"].to_string()
}

#[test]
fn memory_only_an_rlimit_holds_is_said_in_the_result() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let Some(launcher) = without_cgroups(&world) else {
        return;
    };
    // 128 MiB of memfds under a 64 MiB RLIMIT_AS: the hole the warning
    // names (a cgroup would end it, see below).
    let job = memfd_hog(128, 64 << 20);
    let (out, doc) = run_job(&world, Some(&launcher), &job, &[]);
    assert_eq!(doc["status"], "exited", "{}", show(&out));
    assert!(
        doc["stdout"].as_str().unwrap_or_default().contains("held"),
        "{doc:#}"
    );
    assert_eq!(
        doc["limits"]["memory_bytes"]["enforced_by"], "rlimit",
        "{doc:#}"
    );
    let w = warnings(&doc);
    assert!(
        w.contains("memory_bytes (67108864 bytes) is bounded per process only")
            && w.contains("memfd files"),
        "{doc:#}"
    );
    // Where a cgroup holds it, no such warning.
    let (_, held) = run_job(&world, None, &job, &[]);
    if held["limits"]["memory_bytes"]["enforced_by"]
        .as_str()
        .is_some_and(|m| m.starts_with("cgroup"))
    {
        assert!(
            !warnings(&held).contains("bounded per process only"),
            "{held:#}"
        );
    }
}

#[test]
fn strict_limits_refuse_a_job_whose_memory_no_cgroup_would_hold() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let Some(launcher) = without_cgroups(&world) else {
        return;
    };
    let (out, doc) = run_job(
        &world,
        Some(&launcher),
        &memfd_hog(64, 32 << 20),
        &["--strict-limits"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert_eq!(doc["error"]["kind"], "sandbox_unavailable", "{doc:#}");
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "strict limits are set, and memory_bytes would be held per process by an rlimit"
        ) && message.contains("writable cgroup"),
        "{doc:#}"
    );
    assert!(!doc["stdout"].as_str().unwrap_or_default().contains("held"));
}

#[test]
fn a_memfd_hog_does_not_end_exited_under_a_memory_cgroup() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    // 256 MiB of memfds under a 96 MiB limit.
    let (out, doc) = run_job(&world, None, &memfd_hog(256, 96 << 20), &[]);
    let by = doc["limits"]["memory_bytes"]["enforced_by"]
        .as_str()
        .unwrap_or_default();
    if !by.starts_with("cgroup") {
        skip(format!("memory is held by {by} here"));
        return;
    }
    assert_eq!(doc["status"], "limit_exceeded", "{}", show(&out));
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("memory_bytes"),
        "{doc:#}"
    );
    assert!(
        !doc["stdout"].as_str().unwrap_or_default().contains("held"),
        "{doc:#}"
    );
}

#[test]
fn doctor_in_a_container_says_when_memory_is_bounded_per_process_only() {
    let world = World::new();
    let Some(launcher) = without_cgroups(&world) else {
        return;
    };
    let out = runner(
        &world,
        Some(&launcher),
        &["doctor"],
        &[("container", "test-engine")],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("warn container")
            && stdout.contains("memory_bytes is bounded per process only")
            && stdout.contains("--memory and --pids-limit")
            && stdout.contains("--strict-limits"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_sandboxed_command_is_the_first_the_oom_killer_takes() {
    // Under a container's --memory, a memfd hog got the runner killed
    // instead of itself, and the run had no result.
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let job = json!({"argv": ["sh", "-c", "cat /proc/self/oom_score_adj; echo 0 > /proc/self/oom_score_adj && echo lowered"]});
    let (out, doc) = run_job(&world, None, &job, &[]);
    assert_eq!(doc["status"], "exited", "{}", show(&out));
    let stdout = doc["stdout"].as_str().unwrap_or_default();
    assert!(stdout.starts_with("1000\n"), "{doc:#}");
    // A root runner raised it with CAP_SYS_RESOURCE, which makes 1000 the
    // floor: the command cannot lower it again.
    if nix_is_root() {
        assert!(!stdout.contains("lowered"), "{doc:#}");
    }
}

// --- the daemon's settings ---------------------------------------------------

/// `skill-runner serve` on a socket below the world, started through
/// `launcher` (or directly); killed when dropped.
struct Serve {
    child: std::process::Child,
    socket: PathBuf,
}

impl Serve {
    fn start(world: &World, launcher: Option<&Path>, args: &[&str]) -> Serve {
        let socket = world.path().join("sock/skill-runner.sock");
        let mut c = match launcher {
            Some(l) => {
                let mut c = Command::new(l);
                c.arg(runner_bin());
                c
            }
            None => runner_command(),
        };
        let child = c
            .arg("--data-dir")
            .arg(world.data_dir())
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env_remove("SKILL_RUNNER_TOKEN")
            .env_remove("SKILL_RUNNER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn skill-runner serve");
        let mut serve = Serve { child, socket };
        let start = std::time::Instant::now();
        while !serve.socket.exists() {
            assert!(
                serve.child.try_wait().unwrap().is_none(),
                "serve exited before it listened"
            );
            assert!(start.elapsed() < HANG_GUARD, "serve never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        serve
    }

    fn post(&self, path: &str, body: &[u8]) -> (u16, Value) {
        use std::io::{Read, Write};
        let mut conn = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        conn.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).unwrap();
        conn.write_all(body).unwrap();
        let mut reply = Vec::new();
        conn.read_to_end(&mut reply).unwrap();
        let (status, body) = http_reply(&reply);
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bundle of `n` one-file skills.
fn bundle_of(n: usize) -> Vec<u8> {
    use skill_runner::package::{bundle, hash};
    let skills: Vec<(hash::Binding, bundle::Files)> = (0..n)
        .map(|i| {
            let id = format!("capped-{i}");
            let md = format!("---\nname: {id}\ndescription: d\n---\n").into_bytes();
            let files = vec![("SKILL.md".to_owned(), md)];
            let hash = hash::package_hash(files.iter().map(|(p, b)| (&p[..], &b[..]))).unwrap();
            let binding = hash::Binding {
                id,
                revision: 1,
                version: "1.0.0".into(),
                hash,
            };
            (binding, files)
        })
        .collect();
    bundle::render(&skills).into_bytes()
}

#[test]
fn the_daemon_refuses_a_bundle_over_max_bundle_skills() {
    // 3,000 skills in one 0.9 MB upload took seconds and thousands of
    // store entries: the count is capped, as the bytes are.
    let world = World::new();
    let serve = Serve::start(&world, None, &["--max-bundle-skills", "2"]);
    let (status, doc) = serve.post("/v1/skill-packages", &bundle_of(3));
    assert_eq!(status, 400, "{doc:#}");
    assert_eq!(doc["error"]["kind"], "bad_bundle", "{doc:#}");
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the bundle holds 3 skills, over the limit of 2"),
        "{doc:#}"
    );
    let (status, doc) = serve.post("/v1/skill-packages", &bundle_of(2));
    assert!((200..300).contains(&status), "{status} {doc:#}");
}

#[test]
fn a_strict_daemon_refuses_jobs_whose_memory_no_cgroup_would_hold() {
    if !require_sandbox() {
        return;
    }
    let world = World::new();
    let Some(launcher) = without_cgroups(&world) else {
        return;
    };
    let serve = Serve::start(&world, Some(&launcher), &["--strict-limits", "true"]);
    let (status, doc) = serve.post("/v1/executions", br#"{"argv": ["true"]}"#);
    assert_eq!(status, 503, "{doc:#}");
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert_eq!(doc["error"]["kind"], "sandbox_unavailable", "{doc:#}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("strict limits are set"),
        "{doc:#}"
    );
}
