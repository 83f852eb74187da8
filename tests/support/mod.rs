//! Shared helpers for the integration tests: where the real binaries are,
//! a private data dir per test, skill folders and job files, running
//! `skill-runner` as a user would, and (in [`daemon`]) the one daemon
//! harness.
//!
//! Every runner a test starts comes from [`runner_command`], which clears
//! the caller's `SKILL_RUNNER_*` variables: a test sets what it needs and
//! nothing leaks in from the shell that ran `cargo test`.
//!
//! A test that cannot run on this host calls [`skip`] (or returns when
//! [`require_sandbox`] says no sandbox can start here): it prints
//! `SKIPPED: <test>: <reason>` and is counted as skipped by `scripts/test`,
//! or fails under `SKILL_RUNNER_MUST_WORK` (CI sets it).

pub mod daemon;
pub mod envs;
pub mod registry;

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// `target/<profile>/` of the running test binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_owned()
}

/// The real `skill-runner` binary (built by `cargo test --workspace`).
pub fn runner_bin() -> PathBuf {
    let p = target_dir().join("skill-runner");
    assert!(
        p.exists(),
        "{} is missing: run cargo build --workspace first",
        p.display()
    );
    p
}

/// The escape-suite probe binary.
pub fn probe_bin() -> PathBuf {
    let p = target_dir().join("probe");
    assert!(
        p.exists(),
        "{} is missing: run cargo build --workspace first",
        p.display()
    );
    p
}

/// The project root.
pub fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A command starting the real `skill-runner`: directly, or, when
/// `SKILL_RUNNER_TEST_LAUNCHER` names a program, through it (it gets the
/// binary and its arguments, and must exec them in the same process).
/// `scripts/test-cgroup2` uses one to start every runner as a service
/// manager or a container engine would: alone in a cgroup of its own.
///
/// The runner inherits none of the caller's `SKILL_RUNNER_*` variables
/// (settings such as `SKILL_RUNNER_TOKEN` or `SKILL_RUNNER_ROOTS` would
/// change what a test sees); the test sets those it means.
pub fn runner_command() -> Command {
    let mut c = match std::env::var_os("SKILL_RUNNER_TEST_LAUNCHER").filter(|l| !l.is_empty()) {
        Some(launcher) => {
            let mut c = Command::new(launcher);
            c.arg(runner_bin());
            c
        }
        None => Command::new(runner_bin()),
    };
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SKILL_RUNNER_") {
            c.env_remove(name);
        }
    }
    c
}

/// `cmd` run by `wrapper` with `args` before it (`unshare --mount …`):
/// its program and arguments follow them, and its changes to the
/// environment are kept.
pub fn wrapped(wrapper: &str, args: &[&std::ffi::OsStr], cmd: &Command) -> Command {
    let mut c = Command::new(wrapper);
    c.args(args).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Runs `cmd` in a mount namespace of its own in which each `(src,
/// at)` of `binds` is bind-mounted (`unshare --mount`, private
/// propagation): the host's mounts are left as they were. `None` when no
/// mount namespace can be made here (not root, no `unshare`).
pub fn output_with_binds(binds: &[(&Path, &Path)], cmd: &Command) -> Option<Output> {
    // `unshare` that cannot make the namespace (not root, no user
    // namespace) exits 1, as the command might: asked once, alone.
    static MOUNT_NS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let usable = *MOUNT_NS.get_or_init(|| {
        let probe = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "true"])
            .stdin(Stdio::null())
            .output();
        match probe {
            Ok(out) if out.status.success() => true,
            Ok(out) => {
                eprintln!("no mount namespace here: {}", text(&out.stderr));
                false
            }
            Err(e) => {
                eprintln!("no unshare here: {e}");
                false
            }
        }
    });
    if !usable {
        return None;
    }
    let mut script = String::new();
    for i in 0..binds.len() {
        let (src, at) = (2 * i + 1, 2 * i + 2);
        script.push_str(&format!("mount --bind \"${src}\" \"${at}\" || exit 99; "));
    }
    script.push_str(&format!("shift {}; exec \"$@\"", 2 * binds.len()));
    let head = [
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ];
    let mut args: Vec<&std::ffi::OsStr> = head.iter().map(std::ffi::OsStr::new).collect();
    for (src, at) in binds {
        args.extend([src.as_os_str(), at.as_os_str()]);
    }
    let mut c = wrapped("unshare", &args, cmd);
    c.stdin(Stdio::null());
    let out = c.output().ok()?;
    if out.status.code() == Some(99) {
        eprintln!("no mount namespace here: {}", text(&out.stderr));
        return None;
    }
    Some(out)
}

/// The cgroup version that must enforce memory and pids limits here, from
/// `SKILL_RUNNER_EXPECT_CGROUP`: `v1` or `v2`, or `none` (no usable cgroup:
/// a limit must then be refused or enforced otherwise, and say why). Unset:
/// whatever the host offers.
pub fn expected_cgroup() -> Option<String> {
    std::env::var("SKILL_RUNNER_EXPECT_CGROUP")
        .ok()
        .filter(|v| !v.is_empty())
}

/// Checks the mechanism a result names for a memory or pids limit against
/// [`expected_cgroup`].
pub fn assert_cgroup_mechanism(enforced_by: &str, result: &dyn std::fmt::Display) {
    match expected_cgroup().as_deref() {
        Some(v @ ("v1" | "v2")) => assert_eq!(
            enforced_by,
            format!("cgroup {v}"),
            "SKILL_RUNNER_EXPECT_CGROUP={v}:{result}"
        ),
        Some("none") => assert!(
            !enforced_by.starts_with("cgroup") && enforced_by != "none",
            "SKILL_RUNNER_EXPECT_CGROUP=none: a cgroup, or nothing, enforced it:{result}"
        ),
        Some(other) => panic!("SKILL_RUNNER_EXPECT_CGROUP={other}: want v1, v2 or none"),
        None => {}
    }
}

/// The running test's name: libtest names each test's thread after it
/// (`daemon::streams::streamed_events_arrive_in_order`).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_owned()
}

/// Records that the running test cannot run on this host, and why; the
/// caller returns right after. Prints `SKIPPED: <test>: <reason>` on
/// stdout (libtest shows it with `--nocapture` or `--show-output`) and,
/// when `SKILL_RUNNER_SKIP_LOG` names a file, appends the same line to it:
/// `scripts/test` counts those lines as skipped, not passed. Under
/// `SKILL_RUNNER_MUST_WORK` (CI sets it) a skip is a failure instead.
pub fn skip(reason: impl std::fmt::Display) {
    let line = format!(
        "SKIPPED: {}: {}",
        test_name(),
        one_line(&reason.to_string())
    );
    if std::env::var_os("SKILL_RUNNER_MUST_WORK").is_some() {
        panic!("{line}\n(SKILL_RUNNER_MUST_WORK is set: nothing may be skipped)");
    }
    println!("{line}");
    if let Some(log) = std::env::var_os("SKILL_RUNNER_SKIP_LOG").filter(|l| !l.is_empty()) {
        use std::io::Write;
        // One write of one line, appended: lines of tests running at the
        // same time never mix.
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open SKILL_RUNNER_SKIP_LOG {log:?}: {e}"));
        file.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("cannot append to SKILL_RUNNER_SKIP_LOG {log:?}: {e}"));
    }
}

/// `text` on one line, for a skip reason that quotes a command's output.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// True when sandboxes can run here; otherwise [`skip`]s the test (which
/// fails it under `SKILL_RUNNER_MUST_WORK`). The verdict is
/// `skill-runner doctor`'s (the real binary, which runs a real job in a
/// throwaway data dir), asked once per test binary.
pub fn require_sandbox() -> bool {
    // (works, doctor's FAIL lines, doctor's whole report)
    static VERDICT: std::sync::OnceLock<(bool, String, String)> = std::sync::OnceLock::new();
    let (ok, why, report) = VERDICT.get_or_init(|| {
        let world = World::new();
        let out = world
            .cmd()
            .arg("doctor")
            .output()
            .expect("run skill-runner doctor");
        let stdout = text(&out.stdout);
        let why: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("FAIL "))
            .collect();
        (out.status.success(), why.join("; "), show(&out))
    });
    if *ok {
        return true;
    }
    if std::env::var_os("SKILL_RUNNER_MUST_WORK").is_some() {
        panic!(
            "{}: no sandbox can start here, but SKILL_RUNNER_MUST_WORK is set; skill-runner doctor:{report}",
            test_name()
        );
    }
    skip(format!(
        "no sandbox can start here: skill-runner doctor: {why}"
    ));
    false
}

/// One test's private world: data dir, scratch folder.
#[derive(Debug)]
pub struct World {
    pub dir: tempfile::TempDir,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("sr-test-")
            .tempdir()
            .expect("tempdir");
        // A root runner's bubblewrap runs as the sandbox user, which must
        // pass through the folders above what it binds (the data dir is
        // made passable to its group by the runner itself).
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod tempdir");
        World { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.path().join("data")
    }

    /// Writes a skill folder `skills/<id>` with `SKILL.md` and `files`;
    /// returns its path.
    pub fn skill(&self, id: &str, files: &[(&str, &[u8])]) -> PathBuf {
        let dir = self.path().join("skills").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {id}\ndescription: Test skill {id}.\n---\n# {id}\n"),
        )
        .unwrap();
        for (path, bytes) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        dir
    }

    /// A workspace folder holding a copy of the probe binary at
    /// `/workspace/probe`.
    pub fn workspace_with_probe(&self) -> PathBuf {
        let ws = self.path().join("workspace");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::copy(probe_bin(), ws.join("probe")).unwrap();
        give_to_sandbox(&ws);
        ws
    }

    /// A new folder below this world that the sandbox may write (see
    /// [`give_to_sandbox`]).
    pub fn sandbox_folder(&self, rel: &str) -> PathBuf {
        let dir = self.path().join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        give_to_sandbox(&dir);
        dir
    }

    /// Writes a job file and returns its path.
    pub fn job(&self, name: &str, job: &Value) -> PathBuf {
        let p = self.path().join(format!("{name}.json"));
        std::fs::write(&p, serde_json::to_vec_pretty(job).unwrap()).unwrap();
        p
    }

    /// A command running the real binary with this world's data dir.
    pub fn cmd(&self) -> Command {
        let mut c = runner_command();
        c.env("SKILL_RUNNER_DATA_DIR", self.data_dir())
            .stdin(Stdio::null());
        c
    }

    /// `skill-runner run --json JOB`: the exit code and the result document.
    pub fn run_json(&self, job: &Value) -> (i32, Value, Output) {
        let path = self.job("job", job);
        let out = self
            .cmd()
            .args(["run", "--json"])
            .arg(&path)
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "run --json printed no JSON ({e}); stdout: {}; stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, doc, out)
    }
}

/// Package hash of a folder, via the library.
pub fn hash_of(dir: &Path) -> String {
    skill_runner::package::verify::hash_dir(dir, &Default::default()).expect("hash")
}

/// A skill entry for a job: `{id, revision 1, version "1.0.0", hash, path}`.
pub fn skill_ref(id: &str, dir: &Path) -> Value {
    serde_json::json!({
        "id": id, "revision": 1, "version": "1.0.0", "hash": hash_of(dir), "path": dir,
    })
}

/// How long one `skill-runner` process may run before a test kills it and
/// fails. Hang protection only, far above what any test needs; never a
/// timing assertion.
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(90);

/// Runs `cmd` to completion with stdout and stderr captured, like
/// [`Command::output`]; if it is still running after `limit`, kills it and
/// panics, so that a hung runner fails its test instead of the whole suite.
pub fn output_within(cmd: &mut Command, limit: std::time::Duration) -> Output {
    use std::io::Read;

    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still ran after {limit:?}: killed (hang protection)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

impl World {
    /// `skill-runner run --json JOB` like [`World::run_json`], with `env`
    /// added to the runner process's own environment and [`HANG_GUARD`] as
    /// hang protection.
    pub fn run_json_env(&self, job: &Value, env: &[(&str, &str)]) -> (i32, Value, Output) {
        let path = self.job("job", job);
        let mut cmd = self.cmd();
        cmd.args(["run", "--json"]).arg(&path);
        for (key, value) in env {
            cmd.env(key, value);
        }
        let out = output_within(&mut cmd, HANG_GUARD);
        let code = out.status.code().unwrap_or(-1);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "run --json printed no JSON ({e}); exit {code}; stdout: {}; stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, doc, out)
    }

    /// What is in `<data>/executions`: empty when no execution folder or
    /// lock file was left behind (also when the folder does not exist).
    pub fn executions_left(&self) -> Vec<String> {
        match std::fs::read_dir(self.data_dir().join("executions")) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("cannot list the executions folder: {e}"),
        }
    }
}

/// Host processes whose current directory is `dir` (compared by device and
/// inode, so a process that sees `dir` as `/workspace` through a bind mount
/// counts too), as `pid comm`. Processes this user may not inspect are
/// skipped.
pub fn processes_in(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;

    let want = std::fs::metadata(dir).expect("stat dir");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            let pid: u32 = name.to_str()?.parse().ok()?;
            let cwd = std::fs::metadata(format!("/proc/{pid}/cwd")).ok()?;
            if (cwd.dev(), cwd.ino()) != (want.dev(), want.ino()) {
                return None;
            }
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            Some(format!("{pid} {}", comm.trim_end()))
        })
        .collect()
}

/// Bytes as text, lossily, for messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `exit N; stdout: …; stderr: …` for assertion messages.
pub fn show(out: &Output) -> String {
    format!(
        "\n  exit {:?}\n  stdout: {:?}\n  stderr: {:?}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// The host uid a root runner launches sandboxes as (the default sandbox
/// user), or `None` when the runner keeps its own uid: not root, or root
/// of a user namespace that maps no other uid.
pub fn sandbox_uid() -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    skill_runner::sandbox::identity::outside(
        &map,
        skill_runner::sandbox::identity::DEFAULT_SANDBOX_ID,
    )
    .map(|_| skill_runner::sandbox::identity::DEFAULT_SANDBOX_ID)
}

/// Gives `dir` (and what is in it) to the sandbox user, as an operator
/// would for a named workspace; nothing to do when there is none.
pub fn give_to_sandbox(dir: &Path) {
    let Some(uid) = sandbox_uid() else {
        return;
    };
    let mut stack = vec![dir.to_owned()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(uid)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP/1.1 replies, read by hand (the daemon tests speak raw HTTP so that
// they can test what a library would hide).

/// Reads the status line and headers.
pub fn read_head<R: BufRead>(r: &mut R) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("bad status line {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    (status, headers)
}

pub fn is_chunked(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
}

/// Decodes a chunked body as it arrives.
#[derive(Debug)]
pub struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    pub fn new(inner: R) -> Self {
        Chunked {
            inner,
            left: 0,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            self.inner.read_line(&mut size)?;
            let size = size.trim();
            if size.is_empty() {
                self.done = true;
                return Ok(0);
            }
            self.left = usize::from_str_radix(size.split(';').next().unwrap(), 16)
                .map_err(std::io::Error::other)?;
            if self.left == 0 {
                self.done = true;
                let mut end = String::new();
                let _ = self.inner.read_line(&mut end);
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// The status and body of a whole reply, its chunks joined when it is
/// chunked (a chunk may end anywhere, inside a line or a character).
pub fn http_reply(reply: &[u8]) -> (u16, Vec<u8>) {
    use std::io::Read;
    let mut r = std::io::BufReader::new(reply);
    let (status, headers) = read_head(&mut r);
    let mut body = Vec::new();
    if is_chunked(&headers) {
        Chunked::new(r).read_to_end(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    (status, body)
}

/// Whether this process may make and join mount namespaces
/// (`CAP_SYS_ADMIN` in its user namespace: root, or root of a user
/// namespace): the runner then starts bubblewrap in a template one
/// (docs/template.md).
pub fn may_make_mount_namespaces() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}
