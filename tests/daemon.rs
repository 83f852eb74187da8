//! The daemon (`skill-runner serve`, docs/daemon.md) driven over its real
//! Unix socket or loopback TCP, running real bubblewrap sandboxes (issue:
//! "skill-runner serve").
//!
//! Each test starts its own daemon with a private data dir and stops it.
//! The HTTP client is a few lines of std code, so that tests can also
//! misbehave on purpose (slow-loris, disconnects). No test asserts on
//! timing; waits have generous hang-protection limits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use skill_runner_tests::*;

/// Hang protection for every wait.
const PATIENCE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// A daemon under test

struct Daemon {
    child: Option<Child>,
    socket: PathBuf,
    tcp: Option<SocketAddr>,
    token: Option<String>,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `skill-runner serve` for `world` with `args`, and waits until
    /// it listens.
    fn start(world: &World, args: &[&str]) -> Daemon {
        Self::try_start(world, args).unwrap_or_else(|log| panic!("daemon did not start:\n{log}"))
    }

    fn command(world: &World, args: &[&str]) -> Command {
        let mut c = runner_command();
        c.arg("--data-dir")
            .arg(world.data_dir())
            .arg("serve")
            .args(args)
            .env("SKILL_RUNNER_LOG", "info")
            .env_remove("SKILL_RUNNER_TOKEN")
            .env_remove("SKILL_RUNNER_SOCKET")
            .env_remove("SKILL_RUNNER_LISTEN")
            .env_remove("SKILL_RUNNER_CONFIG")
            .env_remove("SKILL_RUNNER_ROOTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    fn try_start(world: &World, args: &[&str]) -> Result<Daemon, String> {
        let mut child = Self::command(world, args)
            .spawn()
            .expect("spawn skill-runner serve");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let start = Instant::now();
        let address = loop {
            if let Some(addr) = log.lock().unwrap().lines().find_map(listening_address) {
                break addr;
            }
            if let Ok(Some(_)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                return Err(log.lock().unwrap().clone());
            }
            assert!(start.elapsed() < PATIENCE, "daemon never listened");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (socket, tcp) = match address.strip_prefix("http://") {
            Some(a) => (PathBuf::new(), Some(a.trim().parse().unwrap())),
            None => (
                PathBuf::from(address.trim().trim_start_matches("unix:")),
                None,
            ),
        };
        Ok(Daemon {
            child: Some(child),
            socket,
            tcp,
            token: None,
            log,
        })
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn connect(&self) -> Conn {
        let c = match self.tcp {
            Some(addr) => Conn::Tcp(TcpStream::connect(addr).unwrap()),
            None => Conn::Unix(UnixStream::connect(&self.socket).unwrap()),
        };
        c.set_timeout(PATIENCE);
        c
    }

    /// One request on a fresh connection (`Connection: close`).
    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut conn = self.connect();
        send(
            &mut conn,
            method,
            path,
            headers,
            body,
            self.token.as_deref(),
        );
        read_response(BufReader::new(conn))
    }

    fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], b"")
    }

    fn delete(&self, path: &str) -> Resp {
        self.request("DELETE", path, &[], b"")
    }

    fn post(&self, path: &str, body: &Value) -> Resp {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            &serde_json::to_vec(body).unwrap(),
        )
    }

    /// Sends a signal and waits for the daemon to exit.
    fn signal_and_wait(&mut self, signal: i32) -> ExitStatus {
        let mut child = self.child.take().expect("daemon already stopped");
        kill(child.id() as i32, signal);
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "daemon did not exit after signal {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) -> ExitStatus {
        self.signal_and_wait(libc::SIGTERM)
    }
}

/// The address in the daemon's "listening on ADDR" log line (human or
/// JSON).
fn listening_address(line: &str) -> Option<String> {
    let rest = line.split("listening on ").nth(1)?;
    if !(rest.starts_with("unix:") || rest.starts_with("http://")) {
        return None;
    }
    Some(
        rest.split(|c: char| c.is_whitespace() || c == '"')
            .next()?
            .to_owned(),
    )
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `signal` to `pid` with kill(1).
fn kill(pid: i32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

// ---------------------------------------------------------------------------
// A small HTTP/1.1 client

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    /// Whether the daemon has answered on it (or closed it), waiting a
    /// millisecond at most. Reads what came, if anything.
    fn answered(&mut self) -> bool {
        self.set_timeout(Duration::from_millis(1));
        let got = self.read(&mut [0u8; 1]);
        self.set_timeout(PATIENCE);
        !matches!(got, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    }

    fn set_timeout(&self, t: Duration) {
        match self {
            Conn::Unix(s) => {
                s.set_read_timeout(Some(t)).unwrap();
                s.set_write_timeout(Some(t)).unwrap();
            }
            Conn::Tcp(s) => {
                s.set_read_timeout(Some(t)).unwrap();
                s.set_write_timeout(Some(t)).unwrap();
            }
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.flush(),
            Conn::Tcp(s) => s.flush(),
        }
    }
}

fn send(
    conn: &mut Conn,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    token: Option<&str>,
) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).unwrap();
    // The daemon may answer (413) and close before taking all of a body.
    let _ = conn.write_all(body);
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}), status {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts an error response of this status and kind.
    fn assert_error(&self, status: u16, kind: &str) -> String {
        let doc = self.json();
        assert_eq!(self.status, status, "{doc:#}");
        assert_eq!(doc["error"]["kind"], kind, "{doc:#}");
        let msg = doc["error"]["message"].as_str().unwrap().to_owned();
        assert!(!msg.is_empty());
        msg
    }
}

fn read_response<R: BufRead>(mut r: R) -> Resp {
    let (status, headers) = read_head(&mut r);
    let mut body = Vec::new();
    if is_chunked(&headers) {
        Chunked::new(r).read_to_end(&mut body).unwrap();
    } else if let Some(len) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse::<usize>().unwrap())
    {
        body.resize(len, 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Resp {
        status,
        headers,
        body,
    }
}

// ---------------------------------------------------------------------------
// Helpers

/// Polls `cond` until true; panics after [`PATIENCE`].
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Pids of processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// A `sleep` argument unique to one test, so its processes can be found.
fn marker(n: u32) -> String {
    format!("{}.{:03}{}", 300 + n, std::process::id() % 1000, n)
}

/// Entries of the daemon's per-execution folder.
fn execution_leftovers(world: &World) -> Vec<String> {
    match std::fs::read_dir(world.data_dir().join("executions")) {
        Ok(d) => d
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A bundle (docs/formats.md) of one skill folder, and its binding.
fn bundle_of(id: &str, dir: &Path) -> (Value, Value) {
    let limits = skill_runner::package::format::PackageLimits::default();
    let files = skill_runner::package::source::read_dir_files(dir, &limits).unwrap();
    let binding = skill_runner::package::hash::Binding {
        id: id.to_owned(),
        revision: 1,
        version: "1.0.0".to_owned(),
        hash: hash_of(dir),
    };
    let text = skill_runner::package::bundle::render(&[(binding.clone(), files)]);
    (
        serde_json::from_str(&text).unwrap(),
        serde_json::to_value(&binding).unwrap(),
    )
}

/// A world whose skills folder is a root of the daemon.
/// A private token file (0600) holding `token`, for `--token-file`.
fn token_file(w: &World, token: &str) -> PathBuf {
    let file = w.path().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

fn world_with_roots() -> (World, String) {
    let w = World::new();
    let roots = w.path().join("roots");
    std::fs::create_dir_all(&roots).unwrap();
    std::fs::create_dir_all(w.path().join("skills")).unwrap();
    let arg = format!("{}:{}", roots.display(), w.path().join("skills").display());
    (w, arg)
}

// ---------------------------------------------------------------------------
// Tests

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
    let second = Daemon::try_start(&w, &[])
        .err()
        .expect("second daemon started");
    assert!(second.contains("another skill-runner daemon"), "{second}");
    assert_eq!(d.get("/v1/health").status, 200);

    let status = d.stop();
    assert!(status.success(), "{status:?}\n{}", d.log());
    assert!(!d.socket.exists(), "socket left behind");
}

#[test]
fn a_published_bundle_runs_by_binding_alone() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let dir = w.skill("hello", &[("scripts/greet.sh", b"echo \"hello, $1\"\n")]);
    let (bundle, binding) = bundle_of("hello", &dir);
    let d = Daemon::start(&w, &[]);

    let r = d.post("/v1/skill-packages", &bundle);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let doc = r.json();
    let identity = doc["identity"].as_str().unwrap().to_owned();
    assert_eq!(identity.len(), 64);
    assert_eq!(doc["skills"], json!([binding]));

    let r = d.get(&format!("/v1/skill-packages/{identity}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["skills"], json!([binding]));
    d.get(&format!("/v1/skill-packages/{}", "0".repeat(64)))
        .assert_error(404, "not_found");

    let r = d.post(
        "/v1/executions",
        &json!({
            "argv": ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "daemon"],
            "skills": [binding],
        }),
    );
    assert_eq!(r.status, 200);
    let result = r.json();
    assert_eq!(result["status"], "exited", "{result:#}");
    assert_eq!(result["stdout"], "hello, daemon\n");
    assert_eq!(result["skills"]["identity"], identity.as_str());

    // The result stays retrievable by id.
    let id = result["execution_id"].as_str().unwrap();
    let again = d.get(&format!("/v1/executions/{id}"));
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["stdout"], "hello, daemon\n");

    // A bundle whose bytes do not match its hash is refused, naming it.
    let mut bad = bundle.clone();
    bad["skills"][0]["hash"] = json!("a".repeat(64));
    let msg = d
        .post("/v1/skill-packages", &bad)
        .assert_error(422, "hash_mismatch");
    assert!(msg.contains("hello"), "{msg}");
}

#[test]
fn fifty_parallel_executions_are_correct_and_isolated() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let dir = w.skill("iso", &[("data.txt", b"shared bytes\n")]);
    let (bundle, binding) = bundle_of("iso", &dir);
    let d = Daemon::start(&w, &["--root", &roots, "--max-queued", "64"]);
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    let by_path = skill_ref("iso", &dir);

    let script = "echo $TAG > /tmp/mine; echo $TAG > /workspace/mine; \
                  echo $TAG > /skill-extensions/mine; sleep 0.2; \
                  ls -A /tmp; ls /workspace; ls -A /skill-extensions; \
                  cat /tmp/mine /workspace/mine /skill-extensions/mine /skills/iso/data.txt";
    let d = Arc::new(d);
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let d = d.clone();
            // Half name the skill by binding alone, half by path.
            let skill = if i % 2 == 0 {
                binding.clone()
            } else {
                by_path.clone()
            };
            std::thread::spawn(move || {
                let r = d.post(
                    "/v1/executions",
                    &json!({
                        "execution_id": format!("par-{i}"),
                        "argv": ["sh", "-c", script],
                        "env": {"TAG": format!("tag{i}")},
                        "skills": [skill],
                    }),
                );
                (i, r.status, r.json())
            })
        })
        .collect();
    for h in handles {
        let (i, status, doc) = h.join().unwrap();
        assert_eq!(status, 200, "{doc:#}");
        assert_eq!(doc["status"], "exited", "{i}: {doc:#}");
        assert_eq!(doc["execution_id"], format!("par-{i}"));
        assert_eq!(
            doc["stdout"].as_str().unwrap(),
            format!("mine\nmine\nmine\ntag{i}\ntag{i}\ntag{i}\nshared bytes\n"),
            "{i}: {doc:#}"
        );
    }
    let metrics = String::from_utf8(d.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("skill_runner_executions_total{status=\"exited\"} 50\n"),
        "{metrics}"
    );
}

#[test]
fn reused_cgroups_start_every_execution_afresh() {
    // The daemon keeps execution cgroups for reuse. With one execution at a
    // time, each of these gets the cgroup the previous one used: a limit
    // hit must not be blamed on the next execution, limits must be the
    // job's own, and the reported peak must be the execution's own.
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let ws = w.path().join("roots/ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::copy(probe_bin(), ws.join("probe")).unwrap();
    give_to_sandbox(&ws);
    let d = Daemon::start(&w, &["--root", &roots, "--max-running", "1"]);
    let run = |args: &[&str], limits: Value| -> Value {
        let mut argv = vec!["/workspace/probe"];
        argv.extend_from_slice(args);
        let r = d.post(
            "/v1/executions",
            &json!({"argv": argv, "workspace": ws, "limits": limits}),
        );
        assert_eq!(r.status, 200, "{:#}", r.json());
        r.json()
    };
    let first = run(&["exit", "0"], json!({"pids": 64}));
    for limit in ["memory_bytes", "pids"] {
        let by = first["limits"][limit]["enforced_by"].as_str().unwrap_or("");
        assert_cgroup_mechanism(by, &format!("{first:#}"));
    }
    if first["limits"]["pids"]["enforced_by"] == "none" {
        eprintln!("SKIPPED reused_cgroups_start_every_execution_afresh: no pids cgroup:{first:#}");
        return;
    }
    let bomb = run(
        &["fork-bomb", "3"],
        json!({"pids": 64, "timeout_ms": 20000}),
    );
    assert_eq!(bomb["status"], "limit_exceeded", "{bomb:#}");
    let after_bomb = run(&["exit", "0"], json!({"pids": 64}));
    assert_eq!(after_bomb["status"], "exited", "{after_bomb:#}");

    let hog = run(
        &["mem-bomb", "2048"],
        json!({"memory_bytes": 128 << 20, "timeout_ms": 20000}),
    );
    assert_eq!(hog["status"], "limit_exceeded", "{hog:#}");
    assert!(
        hog["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory_bytes"),
        "{hog:#}"
    );
    let after_hog = run(&["exit", "0"], json!({"memory_bytes": 1 << 30}));
    assert_eq!(after_hog["status"], "exited", "{after_hog:#}");
    let peak = after_hog["usage"]["max_rss_bytes"].as_u64().unwrap();
    assert!(
        peak < 64 << 20,
        "the peak of the hog carried over: {after_hog:#}"
    );

    // The job's own (lower) limit holds in a cgroup that had a higher one.
    let low = run(
        &["mem-bomb", "2048"],
        json!({"memory_bytes": 64 << 20, "timeout_ms": 20000}),
    );
    assert_eq!(low["status"], "limit_exceeded", "{low:#}");
}

#[test]
fn streamed_events_arrive_in_order() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let script = "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; sleep 0.2; printf 'caf\\303'; sleep 0.2; printf '\\251\\n'";
    let mut conn = d.connect();
    send(
        &mut conn,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&json!({"argv": ["sh", "-c", script]})).unwrap(),
        None,
    );
    let mut r = BufReader::new(conn);
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    assert!(is_chunked(&headers));
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v == "application/x-ndjson"));
    let events: Vec<Value> = BufReader::new(Chunked::new(r))
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"started"), "{events:#?}");
    assert_eq!(kinds.last(), Some(&"exit"), "{events:#?}");
    let text = |stream: &str| -> String {
        events
            .iter()
            .filter(|e| e["event"] == stream)
            .map(|e| e["data"].as_str().unwrap())
            .collect()
    };
    assert_eq!(text("stdout"), "one\nthree\ncafé\n");
    assert_eq!(text("stderr"), "two\n");
    // Across streams, the order the command wrote in (with pauses between).
    let order: Vec<String> = events
        .iter()
        .filter(|e| e["event"] == "stdout" || e["event"] == "stderr")
        .map(|e| e["data"].as_str().unwrap().to_owned())
        .collect();
    let first = |s: &str| order.iter().position(|d| d.contains(s)).unwrap();
    assert!(
        first("one") < first("two") && first("two") < first("three"),
        "{order:?}"
    );
    let result = &events.last().unwrap()["result"];
    assert_eq!(result["status"], "exited");
    assert_eq!(result["stdout"], "one\nthree\ncafé\n");
    assert_eq!(events[0]["execution_id"], result["execution_id"]);
}

#[test]
fn a_client_that_disconnects_cancels_its_execution() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    for (n, stream) in [(1, false), (2, true)] {
        let m = marker(n);
        let id = format!("leaver-{n}");
        let mut conn = d.connect();
        let accept: &[(&str, &str)] = if stream {
            &[("Accept", "application/x-ndjson")]
        } else {
            &[]
        };
        send(
            &mut conn,
            "POST",
            "/v1/executions",
            accept,
            &serde_json::to_vec(&json!({"execution_id": id, "argv": ["sleep", m]})).unwrap(),
            None,
        );
        wait_until("the sandbox to start", || !processes_with(&m).is_empty());
        drop(conn);
        wait_until("the sandbox to be killed", || processes_with(&m).is_empty());
        wait_until("the result to be retained", || {
            d.get(&format!("/v1/executions/{id}")).status == 200
        });
        let doc = d.get(&format!("/v1/executions/{id}")).json();
        assert_eq!(doc["status"], "cancelled", "{doc:#}");
    }
    wait_until("execution folders to be removed", || {
        execution_leftovers(&w).is_empty()
    });
}

#[test]
fn delete_cancels_by_id_and_leaves_no_process() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Arc::new(Daemon::start(&w, &[]));
    let m = marker(3);
    let client = {
        let d = d.clone();
        let m = m.clone();
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"execution_id": "victim", "argv": ["sh", "-c", format!("sleep {m}; echo never")]}),
            )
        })
    };
    wait_until("the sandbox to start", || !processes_with(&m).is_empty());
    let r = d.get("/v1/executions/victim");
    assert_eq!(r.status, 202);
    assert_eq!(r.json()["status"], "running");

    let r = d.delete("/v1/executions/victim");
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let answer = client.join().unwrap();
    assert_eq!(answer.status, 200);
    let doc = answer.json();
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    assert_eq!(doc["stdout"], "");
    wait_until("the sandbox to be gone", || processes_with(&m).is_empty());
    assert_eq!(d.get("/v1/executions/victim").json()["status"], "cancelled");
    d.delete("/v1/executions/victim")
        .assert_error(409, "not_running");
    d.delete("/v1/executions/nobody")
        .assert_error(404, "not_found");
    d.get("/v1/executions/nobody")
        .assert_error(404, "not_found");
    wait_until("execution folders to be removed", || {
        execution_leftovers(&w).is_empty()
    });
}

#[test]
fn a_reused_execution_id_with_another_job_is_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Arc::new(Daemon::start(&w, &[]));
    let r = d.post(
        "/v1/executions",
        &json!({"execution_id": "once", "argv": ["true"]}),
    );
    assert_eq!(r.status, 200);
    let msg = d
        .post(
            "/v1/executions",
            &json!({"execution_id": "once", "argv": ["false"]}),
        )
        .assert_error(409, "execution_id_in_use");
    assert!(
        msg.contains("once") && msg.contains("different job"),
        "{msg}"
    );

    // Also while the first is still running.
    let m = marker(4);
    let first = {
        let d = d.clone();
        let m = m.clone();
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"execution_id": "busy-id", "argv": ["sleep", m]}),
            )
        })
    };
    wait_until("the sandbox to start", || !processes_with(&m).is_empty());
    d.post(
        "/v1/executions",
        &json!({"execution_id": "busy-id", "argv": ["true"]}),
    )
    .assert_error(409, "execution_id_in_use");
    assert_eq!(d.delete("/v1/executions/busy-id").status, 202);
    assert_eq!(first.join().unwrap().json()["status"], "cancelled");
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
    assert!(!execution_leftovers(&w).is_empty());

    d.signal_and_wait(libc::SIGKILL);
    // bwrap --die-with-parent: every sandboxed process dies with the daemon.
    wait_until("the sandboxed processes to die with the daemon", || {
        processes_with(&m).is_empty()
    });
    drop(conn);
    // The crash left its execution folder (and a stale socket) behind.
    assert!(!execution_leftovers(&w).is_empty());
    assert!(d.socket.exists());

    let mut d2 = Daemon::start(&w, &[]);
    assert!(
        execution_leftovers(&w).is_empty(),
        "not swept: {:?}",
        execution_leftovers(&w)
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
    assert!(
        execution_leftovers(&w).is_empty(),
        "{:?}",
        execution_leftovers(&w)
    );
    assert!(!socket.exists());
    assert!(d.log().contains("grace period over"), "{}", d.log());
}

#[test]
fn malformed_requests_get_json_errors() {
    let w = World::new();
    let d = Daemon::start(&w, &["--job-body-limit", "64KiB"]);
    let post_raw = |body: &[u8]| {
        d.request(
            "POST",
            "/v1/executions",
            &[("Content-Type", "application/json")],
            body,
        )
    };
    let msg = post_raw(b"{not json").assert_error(400, "bad_job");
    assert!(msg.contains("not valid JSON"), "{msg}");
    let msg = post_raw(br#"{"argv":["true"],"argz":1}"#).assert_error(400, "bad_job");
    assert!(msg.contains("unknown field"), "{msg}");
    let msg =
        post_raw(br#"{"argv":["true"],"workspace":"relative/ws"}"#).assert_error(400, "bad_job");
    assert!(msg.contains("absolute"), "{msg}");
    let msg =
        post_raw(br#"{"argv":["true"],"profile":"/etc/passwd"}"#).assert_error(400, "bad_job");
    assert!(msg.contains("built-in"), "{msg}");
    post_raw(br#"{"argv":["true"],"execution_id":"no spaces"}"#).assert_error(400, "bad_job");
    // Output is held in memory: a job may not ask for an unbounded cap.
    let msg = post_raw(br#"{"argv":["true"],"limits":{"output_bytes":1099511627776}}"#)
        .assert_error(400, "bad_job");
    assert!(msg.contains("max-output-bytes"), "{msg}");

    // Too large, declared up front.
    let big = vec![b' '; 200 * 1024];
    post_raw(&big).assert_error(413, "body_too_large");
    // Too large, streamed without a length.
    let mut conn = d.connect();
    conn.write_all(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    for _ in 0..4 {
        let chunk = vec![b' '; 32 * 1024];
        if conn
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .is_err()
            || conn.write_all(&chunk).is_err()
            || conn.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let _ = conn.write_all(b"0\r\n\r\n");
    read_response(BufReader::new(conn)).assert_error(413, "body_too_large");

    d.get("/v2/nothing").assert_error(404, "not_found");
    d.request("PUT", "/v1/executions", &[], b"")
        .assert_error(405, "method_not_allowed");
    d.post("/v1/skill-packages", &json!({"skills": "no"}))
        .assert_error(400, "bad_bundle");
    // Issue 11 (fuzzing, target `http`): a path that does not decode gets
    // the error document too (not axum's plain text), and a query key
    // with a newline comes back on one line.
    d.get("/v1/executions/%FF").assert_error(400, "bad_request");
    d.get("/v1/sessions/%FF%FE/events")
        .assert_error(400, "bad_request");
    let msg = d
        .get("/v1/sessions/ses-0123456789abcdef0123456789abcdef/skills?wut%0A=1")
        .assert_error(400, "bad_request");
    assert!(!msg.contains('\n'), "{msg:?}");
    // The daemon is still fine.
    assert!(d.get("/v1/health").status == 200 || d.get("/v1/health").status == 503);
}

#[test]
fn slow_clients_are_cut_off() {
    let w = World::new();
    let d = Daemon::start(&w, &["--header-timeout", "1s", "--body-timeout", "1s"]);
    // Headers that never finish: the connection is closed.
    let mut conn = d.connect();
    conn.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = conn.read_to_end(&mut buf); // returns at EOF (or a reset)
    assert!(
        buf.is_empty() || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf)
    );

    // A body that never finishes: 408 with a JSON error.
    let mut conn = d.connect();
    conn.write_all(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"argv\":",
    )
    .unwrap();
    read_response(BufReader::new(conn)).assert_error(408, "body_timeout");

    // A connection that sends nothing is closed too.
    let mut conn = d.connect();
    let mut buf = Vec::new();
    let _ = conn.read_to_end(&mut buf);
    assert!(buf.is_empty() || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408"));
    // And the daemon still serves.
    assert!(matches!(d.get("/v1/health").status, 200 | 503));
}

#[test]
fn tcp_needs_a_valid_bearer_token() {
    let w = World::new();
    // No token: refused at start with a clear message.
    let err = Daemon::try_start(&w, &["--listen", "127.0.0.1:0"])
        .err()
        .expect("TCP without a token started");
    assert!(err.contains("bearer token"), "{err}");

    let token = "test-token-0123456789abcdef";
    let file = token_file(&w, token);
    let mut d = Daemon::start(
        &w,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
        ],
    );
    assert!(d.tcp.is_some());
    // Health needs no token; everything else does.
    assert!(matches!(d.get("/v1/health").status, 200 | 503));
    let r = d.get("/metrics");
    r.assert_error(401, "unauthorized");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    d.token = Some("test-token-0123456789abcdeX".into());
    d.get("/metrics").assert_error(401, "unauthorized");
    d.token = Some("short".into());
    d.post("/v1/executions", &json!({"argv": ["true"]}))
        .assert_error(401, "unauthorized");
    let r = d.request(
        "GET",
        "/metrics",
        &[("Authorization", &format!("Basic {token}"))],
        b"",
    );
    assert_eq!(r.status, 401);
    d.token = Some(token.into());
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body)
        .contains("skill_runner_http_responses_total{code=\"401\"}"));
}

#[test]
fn host_paths_outside_the_roots_are_refused() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let outside = w.skill("outside", &[]);
    // Skills outside the roots: move this one out of the skills root.
    let elsewhere = w.path().join("elsewhere");
    std::fs::rename(&outside, &elsewhere).unwrap();
    let d = Daemon::start(&w, &["--root", &roots]);
    let root = w.path().join("roots").canonicalize().unwrap();
    let refused = |job: Value| -> String {
        d.post("/v1/executions", &job)
            .assert_error(403, "path_not_allowed")
    };
    let msg = refused(json!({"argv": ["true"], "workspace": "/etc"}));
    assert!(msg.contains("/etc") && msg.contains("roots"), "{msg}");
    refused(json!({"argv": ["true"], "extensions_dir": "/etc"}));
    refused(json!({"argv": ["true"], "skills": [skill_ref("outside", &elsewhere)]}));
    // A symlink under a root that leads out of it.
    std::os::unix::fs::symlink("/etc", root.join("sneaky")).unwrap();
    refused(json!({"argv": ["true"], "workspace": root.join("sneaky")}));
    refused(json!({"argv": ["true"], "workspace": root.join("sneaky/sub")}));
    // `..` is refused outright.
    let msg = d
        .post(
            "/v1/executions",
            &json!({"argv": ["true"], "workspace": format!("{}/../../etc", root.display())}),
        )
        .assert_error(403, "path_not_allowed");
    assert!(msg.contains(".."), "{msg}");
    // A workspace where an earlier command planted a symlink at the
    // default extensions dir.
    let ws = root.join("planted");
    std::fs::create_dir_all(ws.join(".sciencediscovery")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.join(".sciencediscovery/skill-extensions")).unwrap();
    let msg = refused(json!({"argv": ["true"], "workspace": ws}));
    assert!(msg.contains("extensions_dir"), "{msg}");
    assert!(!Path::new("/etc/skill-extensions").exists());

    // Under the roots, a named workspace must exist (issue 14): refused,
    // not created.
    let missing = root.join("missing/ws");
    let msg = d
        .post(
            "/v1/executions",
            &json!({"argv": ["true"], "workspace": missing}),
        )
        .assert_error(400, "bad_job");
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(!root.join("missing").exists());

    // Under the roots, it runs and writes where it was told.
    let ws = root.join("ok/ws");
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&ws);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "-c", "echo hi > /workspace/out"], "workspace": ws}),
    );
    assert_eq!(r.json()["status"], "exited", "{:#}", r.json());
    assert_eq!(std::fs::read_to_string(ws.join("out")).unwrap(), "hi\n");
}

#[test]
fn a_full_daemon_answers_429_with_retry_after() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Arc::new(Daemon::start(
        &w,
        &["--max-running", "1", "--max-queued", "1"],
    ));
    let m = marker(7);
    let spawn = |id: &'static str| {
        let d = d.clone();
        let m = m.clone();
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"execution_id": id, "argv": ["sleep", m]}),
            )
        })
    };
    let running = spawn("first");
    wait_until("the first to run", || !processes_with(&m).is_empty());
    let queued = spawn("second");
    wait_until("the second to queue", || {
        d.get("/v1/executions/second").status == 202
    });
    assert_eq!(d.get("/v1/executions/second").json()["status"], "queued");
    let r = d.post("/v1/executions", &json!({"argv": ["true"]}));
    r.assert_error(429, "busy");
    assert_eq!(r.header("retry-after"), Some("1"));
    let metrics = String::from_utf8(d.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("skill_runner_executions_queued 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("skill_runner_executions_running 1\n"),
        "{metrics}"
    );

    // Cancel the queued one first: it never runs.
    assert_eq!(d.delete("/v1/executions/second").status, 202);
    let doc = queued.join().unwrap().json();
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    assert_eq!(d.delete("/v1/executions/first").status, 202);
    assert_eq!(running.join().unwrap().json()["status"], "cancelled");
    wait_until("the sandboxes to be gone", || processes_with(&m).is_empty());
}

#[test]
fn a_job_with_a_lying_hash_is_422_and_names_the_skill() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let dir = w.skill("liar", &[("scripts/x.sh", b"echo x\n")]);
    let d = Daemon::start(&w, &["--root", &roots]);
    let mut skill = skill_ref("liar", &dir);
    skill["hash"] = json!("b".repeat(64));
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["true"], "skills": [skill]}),
    );
    let msg = r.assert_error(422, "hash_mismatch");
    assert!(msg.contains("liar"), "{msg}");
    // The refusal is a result document, retained like any other.
    assert_eq!(r.json()["status"], "rejected");
    let id = r.json()["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(
        d.get(&format!("/v1/executions/{id}")).json()["status"],
        "rejected"
    );
    // A skill that was never published: 404 with a hint to publish it.
    let mut unknown = skill_ref("liar", &dir);
    unknown.as_object_mut().unwrap().remove("path");
    let msg = d
        .post(
            "/v1/executions",
            &json!({"argv": ["true"], "skills": [unknown]}),
        )
        .assert_error(404, "not_in_store");
    assert!(msg.contains("publish"), "{msg}");
}

#[test]
fn metrics_use_the_prometheus_text_format() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let dir = w.skill("m", &[("f.txt", b"12345")]);
    let (bundle, binding) = bundle_of("m", &dir);
    let d = Daemon::start(&w, &["--log-format", "json"]);
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["true"], "skills": [binding]}),
    );
    assert_eq!(r.json()["status"], "exited");
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = String::from_utf8(r.body).unwrap();
    for name in [
        "skill_runner_executions_total{status=\"exited\"} 1",
        "skill_runner_execution_duration_seconds_count 1",
        "skill_runner_staging_seconds_count 1",
        "skill_runner_queue_wait_seconds_count 1",
        "skill_runner_executions_running 0",
        "skill_runner_executions_queued 0",
        "skill_runner_packages_published_total 1",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let staged: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("skill_runner_staging_bytes_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(staged >= 5, "{text}");
    // JSON logs: one object a line, with the execution's span.
    let log = d.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    assert!(lines
        .iter()
        .any(|l| l["span"]["name"] == "execution" && l["span"]["id"].is_string()));
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
fn a_stream_reader_that_stalls_has_its_execution_cancelled() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &["--stall-timeout", "1s"]);
    let m = marker(8);
    // A command that floods output while its client reads nothing.
    let mut conn = d.connect();
    send(
        &mut conn,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&json!({
            "execution_id": "flood",
            "argv": ["sh", "-c", format!("yes {m}")],
            "limits": {"output_bytes": 16u64 << 20, "timeout_ms": 600_000},
        }))
        .unwrap(),
        None,
    );
    wait_until("the stalled execution to be cancelled", || {
        d.get("/v1/executions/flood").status == 200
    });
    let doc = d.get("/v1/executions/flood").json();
    assert_eq!(doc["status"], "cancelled", "{:#}", doc["error"]);
    wait_until("the sandbox to be gone", || processes_with(&m).is_empty());
    assert!(d.log().contains("stopped reading"), "{}", d.log());
    drop(conn);
}

/// The skill host over HTTP (issue 6, docs/skill-host.md): a session created
/// from published bindings in both delivery modes, its tools as routes,
/// the refusal of a file-needing skill in a session without file tools,
/// bounded resource reads, and an execution naming the session.
#[test]
fn session_routes_serve_the_skill_host() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let tool = w.skill("tooly", &[("scripts/run.sh", b"echo from-tooly\n")]);
    let plain = w.skill("plain", &[]);
    let mut bindings = Vec::new();
    for (id, dir) in [("tooly", &tool), ("plain", &plain)] {
        let (bundle, binding) = bundle_of(id, dir);
        let r = d.post("/v1/skill-packages", &bundle);
        assert_eq!(r.status, 200, "{:#}", r.json());
        bindings.push(binding);
    }

    // File tools on: managed filesystem, prompt metadata without bodies.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[0], bindings[1]], "tools": ["bash", "read"]}),
    );
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["delivery"], "managed_filesystem");
    let id = doc["id"].as_str().unwrap().to_owned();
    let prompt = doc["prompt"]["skills"].as_array().unwrap();
    assert!(prompt
        .iter()
        .any(|s| s["package_path"] == "$SCIENCEDISCOVERY_SKILLS_DIR/tooly"));
    assert!(
        !doc["prompt"]["text"].as_str().unwrap().contains("# tooly"),
        "a body leaked into the prompt"
    );

    // Tools as routes.
    let r = d.get(&format!("/v1/sessions/{id}/skills?query=tooly"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    let r = d.get(&format!("/v1/sessions/{id}/skills/tooly"));
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert!(r.json().to_string().contains("# tooly"));
    let r = d.get(&format!(
        "/v1/sessions/{id}/resources?path=/skills/tooly/scripts/run.sh&limit=4"
    ));
    let chunk = r.json();
    assert_eq!(r.status, 200, "{chunk:#}");
    assert!(chunk.to_string().contains("echo"), "{chunk:#}");
    let r = d.get(&format!(
        "/v1/sessions/{id}/resources?path=/skills/tooly/../../etc/passwd"
    ));
    assert!(
        r.status >= 400 && r.status < 500,
        "escape allowed: {}",
        r.status
    );
    let r = d.get(&format!("/v1/sessions/{id}/resources?nope=1"));
    r.assert_error(400, "bad_request");
    let r = d.get(&format!("/v1/sessions/{id}/skills/unknown"));
    assert_eq!(r.status, 404);
    let r = d.get(&format!("/v1/sessions/{id}/events"));
    assert_eq!(r.status, 200);
    assert!(
        r.json().to_string().contains("tooly"),
        "loads are recorded as events"
    );

    // No file tools + a skill that needs files: refused, 422.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[0]], "tools": ["web_search"]}),
    );
    r.assert_error(422, "composition_rejected");
    // No file tools + instruction-only skill: semantic tools with schemas.
    let r = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[1]], "tools": []}),
    );
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["delivery"], "semantic_tools");
    assert!(
        doc["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{doc:#}"
    );

    // An execution naming the session gets its frozen skills.
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "/skills/tooly/scripts/run.sh"], "session": id}),
    );
    let res = r.json();
    assert_eq!(res["status"], "exited", "{res:#}");
    assert_eq!(res["stdout"], "from-tooly\n", "{res:#}");
}

// ---------------------------------------------------------------------------
// Issue 11: nothing shared is reachable from a job

/// The published root of a fresh one-skill selection, after one run.
fn publish_one(d: &Daemon, w: &World) -> (Value, PathBuf) {
    let skill = w.skill("p", &[("scripts/run.sh", b"echo pinned\n")]);
    let mut pin = skill_ref("p", &skill);
    pin.as_object_mut().unwrap().remove("path");
    let bundle = Command::new(runner_bin())
        .args([
            "pack",
            skill.to_str().unwrap(),
            "--id",
            "p",
            "--revision",
            "1",
            "--version",
            "1.0.0",
        ])
        .output()
        .unwrap();
    let bundle: Value = serde_json::from_slice(&bundle.stdout).unwrap();
    assert_eq!(d.post("/v1/skill-packages", &bundle).status, 200);
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "/skills/p/scripts/run.sh"], "skills": [pin]}),
    );
    let doc = r.json();
    assert_eq!(doc["stdout"], "pinned\n", "{doc:#}");
    let identity = doc["skills"]["identity"].as_str().unwrap().to_owned();
    let root = w.data_dir().join("published").join(identity);
    assert!(
        root.join("skills/p/scripts/run.sh").is_file(),
        "{}",
        root.display()
    );
    (pin, root)
}

#[test]
fn a_daemon_job_can_name_no_piece_of_the_runner_state() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (_, root) = publish_one(&d, &w);
    let data = w.data_dir().canonicalize().unwrap();
    let state = [
        root.join("skills"),
        root.clone(),
        data.join("published"),
        data.join("store"),
        data.join("executions"),
        data.clone(),
        data.parent().unwrap().to_owned(),
    ];
    for dir in &state {
        for field in ["workspace", "extensions_dir"] {
            let msg = d
                .post("/v1/executions", &json!({"argv": ["true"], field: dir}))
                .assert_error(403, "path_not_allowed");
            assert!(
                msg.contains("outside the daemon's roots"),
                "{field} {}: {msg}",
                dir.display()
            );
        }
    }
    // The published root is as it was published.
    let script = std::fs::read_to_string(root.join("skills/p/scripts/run.sh")).unwrap();
    assert_eq!(script, "echo pinned\n");
    // A root overlapping the state is refused at start.
    for bad in [
        data.clone(),
        data.join("published"),
        data.join("store"),
        data.parent().unwrap().to_owned(),
    ] {
        let err = Daemon::try_start(
            &w,
            &[
                "--root",
                bad.to_str().unwrap(),
                "--socket",
                w.path().join("x.sock").to_str().unwrap(),
            ],
        )
        .err()
        .unwrap_or_else(|| panic!("started with root {}", bad.display()));
        assert!(err.contains("overlaps the data dir"), "{err}");
    }
}

#[test]
fn a_root_forged_under_the_job_root_is_never_used() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let (pin, root) = publish_one(&d, &w);
    let identity = root.file_name().unwrap().to_str().unwrap().to_owned();
    // The job root is the workspace: forge a root for the identity there,
    // and one whose skills folder leads to the host's /.
    let jobs = w.data_dir().join("roots");
    give_to_sandbox(&jobs);
    let forge = format!(
        "mkdir -p {identity}/skills/p/scripts && echo 'echo forged' > {identity}/skills/p/scripts/run.sh && echo '{{}}' > {identity}/meta.json && mkdir -p x && ln -s / x/skills && echo done"
    );
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "-c", forge], "workspace": jobs}),
    );
    assert_eq!(r.json()["stdout"], "done\n", "{:#}", r.json());
    // Evict everything idle, then run the selection again.
    std::fs::remove_dir_all(&root).ok();
    let r = d.post(
        "/v1/executions",
        &json!({"argv": ["sh", "/skills/p/scripts/run.sh"], "skills": [pin]}),
    );
    assert_eq!(r.json()["stdout"], "pinned\n", "{:#}", r.json());
    assert!(jobs
        .join(&identity)
        .join("skills/p/scripts/run.sh")
        .exists());
}

#[test]
fn a_folder_swapped_while_its_job_is_queued_is_not_mounted() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let root = w.path().join("roots").canonicalize().unwrap();
    let ws = root.join("b/x");
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&root.join("b"));
    let outside = w.path().join("outside/x");
    std::fs::create_dir_all(&outside).unwrap();
    give_to_sandbox(&w.path().join("outside"));
    let d = Arc::new(Daemon::start(&w, &["--root", &roots, "--max-running", "1"]));
    // The first job holds the only run slot while the second waits.
    let first = {
        let d = d.clone();
        std::thread::spawn(move || d.post("/v1/executions", &json!({"argv": ["sleep", "3"]})))
    };
    std::thread::sleep(Duration::from_millis(500));
    let second = {
        let (d, ws) = (d.clone(), ws.clone());
        std::thread::spawn(move || {
            d.post(
                "/v1/executions",
                &json!({"argv": ["sh", "-c", "echo planted > /workspace/planted"], "workspace": ws}),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // Checked and admitted; now `b` becomes a symlink out of the roots.
    std::fs::rename(root.join("b"), root.join("b-real")).unwrap();
    std::os::unix::fs::symlink(w.path().join("outside"), root.join("b")).unwrap();
    assert_eq!(first.join().unwrap().status, 200);
    let r = second.join().unwrap();
    let doc = r.json();
    assert!(
        !outside.join("planted").exists(),
        "mounted a folder outside the roots: {doc:#}"
    );
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed since it was checked"),
        "{doc:#}"
    );
}

#[test]
fn idle_connections_without_the_token_do_not_starve_clients_with_it() {
    let w = World::new();
    let token = "test-token-0123456789abcdef";
    let file = token_file(&w, token);
    let mut d = Daemon::start(
        &w,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
            "--max-connections",
            "8",
            "--header-timeout",
            "120s",
        ],
    );
    let addr = d.tcp.unwrap();
    // Twice as many idle connections as places: they send nothing.
    let idle: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    d.token = Some(token.into());
    // Without eviction this would wait for the 120 s header timeout; the
    // client's own timeout (PATIENCE) is the hang guard.
    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    drop(idle);
}

#[test]
fn job_text_cannot_forge_daemon_log_lines() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let forged = "x\n2026-01-01T00:00:00.000000Z  INFO forged: \u{1b}[31mred";
    let r = d.post(
        "/v1/executions",
        &json!({"argv": [forged], "workspace": format!("/nonexistent\n{forged}")}),
    );
    assert!(matches!(r.status, 400 | 403), "{}", r.status);
    let r = d.post("/v1/executions", &json!({"argv": [forged]}));
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(200));
    let log = d.log();
    assert!(log.contains("argv0"), "{log}");
    assert!(!log.lines().any(|l| l.starts_with("2026-01-01")), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
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

// ---------------------------------------------------------------------------
// Issue 14: what an orchestrator needs

/// A folder under the daemon's roots, for a job's workspace.
fn workspace_in(w: &World, name: &str) -> PathBuf {
    let ws = w.path().join("roots").join(name);
    std::fs::create_dir_all(&ws).unwrap();
    give_to_sandbox(&ws);
    ws
}

/// A job that waits until the host creates `go` in its workspace, then
/// prints `released`: no timing is involved in when it finishes.
fn gated_job(id: &str, ws: &Path) -> Value {
    json!({
        "execution_id": id,
        "workspace": ws,
        "argv": ["sh", "-c", "echo waiting; while [ ! -e go ]; do sleep 0.05; done; echo released"],
    })
}

fn open_gate(ws: &Path) {
    std::fs::write(ws.join("go"), b"").unwrap();
}

/// A streamed response: its lines, read one by one as they come.
struct Lines {
    lines: std::io::Lines<BufReader<Chunked<BufReader<Conn>>>>,
    status: u16,
}

impl Lines {
    fn open(d: &Daemon, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Lines {
        let mut conn = d.connect();
        send(&mut conn, method, path, headers, body, d.token.as_deref());
        let mut r = BufReader::new(conn);
        let (status, headers) = read_head(&mut r);
        assert!(is_chunked(&headers), "status {status}, not a stream");
        Lines {
            lines: BufReader::new(Chunked::new(r)).lines(),
            status,
        }
    }

    fn next_event(&mut self) -> Option<Value> {
        let line = self.lines.next()?.unwrap();
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Every event up to and with `exit`, heartbeats left out.
    fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(e) = self.next_event() {
            let exit = e["event"] == "exit";
            if e["event"] != "heartbeat" {
                out.push(e);
            }
            if exit {
                break;
            }
        }
        out
    }
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

#[test]
fn a_detached_run_survives_its_client_and_is_long_polled() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "detached");
    // The client leaves as soon as the answer begins.
    let mut conn = d.connect();
    send(
        &mut conn,
        "POST",
        "/v1/executions?wait=false",
        &[],
        &serde_json::to_vec(&gated_job("detached-1", &ws)).unwrap(),
        None,
    );
    let mut r = BufReader::new(conn);
    assert_eq!(read_head(&mut r).0, 202);
    drop(r);
    let r = d.post("/v1/executions?wait=false", &gated_job("detached-2", &ws));
    assert_eq!(r.status, 202, "{:#}", r.json());
    assert_eq!(r.header("location"), Some("/v1/executions/detached-2"));
    let doc = r.json();
    assert_eq!(doc["execution_id"], "detached-2");
    assert!(
        doc["status"] == "queued" || doc["status"] == "running",
        "{doc:#}"
    );
    // While the gate is shut, a long-poll times out with the status.
    let r = d.get("/v1/executions/detached-1?wait=200ms");
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["status"] == "running" || r.json()["status"] == "queued");
    open_gate(&ws);
    for id in ["detached-1", "detached-2"] {
        let r = d.get(&format!("/v1/executions/{id}?wait=60s"));
        let doc = r.json();
        assert_eq!(r.status, 200, "{doc:#}");
        assert_eq!(doc["status"], "exited", "{doc:#}");
        assert_eq!(doc["stdout"], "waiting\nreleased\n", "{doc:#}");
    }
    d.get("/v1/executions/detached-1?wait=soon")
        .assert_error(400, "bad_request");
    d.post("/v1/executions?wait=maybe", &json!({"argv": ["true"]}))
        .assert_error(400, "bad_request");
}

#[test]
fn reattached_readers_get_the_same_numbered_events_with_heartbeats() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots, "--heartbeat", "100ms"]);
    let ws = workspace_in(&w, "attach");
    let job = serde_json::to_vec(&gated_job("attach-1", &ws)).unwrap();
    // The POST's own stream.
    let mut own = Lines::open(
        &d,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &job,
    );
    assert_eq!(own.status, 200);
    let started = own.next_event().unwrap();
    assert_eq!(started["event"], "started");
    assert_eq!(started["seq"], 1);
    // A quiet stream gets heartbeats (the gate stays shut until one came),
    // on the POST's stream and on a re-attached one alike.
    let mut live = Lines::open(&d, "GET", "/v1/executions/attach-1/events", &[], b"");
    let mut live_events = Vec::new();
    loop {
        let e = live.next_event().unwrap();
        if e["event"] == "heartbeat" {
            assert!(e["seq"].as_u64().unwrap() >= 1, "{e}");
            break;
        }
        live_events.push(e);
    }
    let mut own_events = vec![started];
    loop {
        let e = own.next_event().unwrap();
        if e["event"] == "heartbeat" {
            break;
        }
        own_events.push(e);
    }
    open_gate(&ws);
    own_events.extend(own.rest());
    live_events.extend(live.rest());
    // From the start after the end, and after a seq.
    let all = Lines::open(&d, "GET", "/v1/executions/attach-1/events", &[], b"").rest();
    assert_eq!(all, own_events);
    assert_eq!(all, live_events);
    assert_eq!(seqs(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.last().unwrap()["event"], "exit");
    let out: String = all
        .iter()
        .filter(|e| e["event"] == "stdout")
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(out, "waiting\nreleased\n");
    assert_eq!(all.last().unwrap()["result"]["stdout"], out);
    let tail = Lines::open(
        &d,
        "GET",
        "/v1/executions/attach-1/events?after=2",
        &[],
        b"",
    )
    .rest();
    assert_eq!(tail, all[2..].to_vec());
    d.get("/v1/executions/attach-1/events?after=x")
        .assert_error(400, "bad_request");
    d.get("/v1/executions/nobody/events")
        .assert_error(404, "not_found");
}

#[test]
fn a_retry_with_the_same_job_gets_the_same_execution() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Arc::new(Daemon::start(&w, &["--root", &roots]));
    let ws = workspace_in(&w, "retry");
    let job = gated_job("retry-1", &ws);
    let first = {
        let (d, job) = (d.clone(), job.clone());
        std::thread::spawn(move || d.post("/v1/executions", &job))
    };
    wait_until("the execution to run", || {
        d.get("/v1/executions/retry-1").json()["status"] == "running"
    });
    // The same job, keys in another order: waits for the same execution.
    let reordered = format!(
        r#"{{"argv": {}, "workspace": {}, "execution_id": "retry-1"}}"#,
        job["argv"], job["workspace"]
    );
    let second = {
        let d = d.clone();
        std::thread::spawn(move || {
            d.request(
                "POST",
                "/v1/executions",
                &[("Content-Type", "application/json")],
                reordered.as_bytes(),
            )
        })
    };
    let mut streamed = Lines::open(
        &d,
        "POST",
        "/v1/executions",
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&job).unwrap(),
    );
    let detached = d.post("/v1/executions?wait=false", &job);
    assert_eq!(detached.status, 202);
    // A different job under the id is refused.
    let mut other = job.clone();
    other["argv"] = json!(["true"]);
    d.post("/v1/executions", &other)
        .assert_error(409, "execution_id_in_use");
    open_gate(&ws);
    let a = first.join().unwrap().json();
    let b = second.join().unwrap().json();
    assert_eq!(a["status"], "exited", "{a:#}");
    assert_eq!(a, b, "one execution, not two");
    let events = streamed.rest();
    assert_eq!(events.first().unwrap()["event"], "started");
    assert_eq!(events.last().unwrap()["result"], a);
    // After it finished: the retained result.
    let again = d.post("/v1/executions", &job);
    assert_eq!(again.status, 200);
    assert_eq!(again.json(), a);
    let listed = d.get("/v1/executions").json();
    let n = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["execution_id"] == "retry-1")
        .count();
    assert_eq!(n, 1, "{listed:#}");
}

#[test]
fn executions_are_listed_newest_first_filtered_and_paged() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    for (id, code) in [("l-1", 0), ("l-2", 3), ("l-3", 0)] {
        let r = d.post(
            "/v1/executions",
            &json!({"execution_id": id, "argv": ["sh", "-c", format!("exit {code}")]}),
        );
        assert_eq!(r.status, 200);
    }
    let ids = |v: &Value| -> Vec<String> {
        v["executions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["execution_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = d.get("/v1/executions").json();
    assert_eq!(ids(&all), ["l-3", "l-2", "l-1"]);
    assert_eq!(all["next_cursor"], Value::Null);
    assert_eq!(all["executions"][1]["exit_code"], 3);
    assert_eq!(all["executions"][1]["status"], "exited");
    let page = d.get("/v1/executions?limit=2").json();
    assert_eq!(ids(&page), ["l-3", "l-2"]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let next = d
        .get(&format!("/v1/executions?limit=2&cursor={cursor}"))
        .json();
    assert_eq!(ids(&next), ["l-1"]);
    assert_eq!(next["next_cursor"], Value::Null);
    assert_eq!(ids(&d.get("/v1/executions?status=exited").json()).len(), 3);
    assert!(ids(&d.get("/v1/executions?status=running").json()).is_empty());
    assert!(ids(&d.get("/v1/executions?status=cancelled").json()).is_empty());
    for bad in [
        "status=done",
        "limit=0",
        "limit=x",
        "cursor=abc",
        "colour=red",
    ] {
        d.get(&format!("/v1/executions?{bad}"))
            .assert_error(400, "bad_request");
    }
}

#[test]
fn faults_of_the_request_are_4xx_with_what_to_change() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let post = |job: &Value| d.post("/v1/executions", job);
    let msg = post(&json!({"argv": ["true"], "limits": {"memory_bytes": 1}}))
        .assert_error(400, "bad_job");
    assert!(
        msg.contains("memory_bytes") && msg.contains("minimum"),
        "{msg}"
    );
    let msg = post(&json!({"argv": ["true"], "limits": {"pids": 2}})).assert_error(400, "bad_job");
    assert!(msg.contains("pids"), "{msg}");
    // One 3 MB argument: over the kernel's per-argument limit.
    let msg = post(&json!({"argv": ["echo", "a".repeat(3 << 20)]})).assert_error(400, "bad_job");
    assert!(msg.contains("per argument"), "{msg}");
    // 200k small arguments: over bubblewrap's argument cap.
    let msg = post(&json!({"argv": vec!["x"; 200_000]})).assert_error(400, "bad_job");
    assert!(msg.contains("bubblewrap"), "{msg}");
    // Many arguments that fit one by one but not together: over ARG_MAX.
    let msg = post(&json!({"argv": vec!["b".repeat(100_000); 30]})).assert_error(400, "bad_job");
    assert!(msg.contains("ARG_MAX"), "{msg}");
    // The CLI refuses the same job the same way.
    let job = w.path().join("tiny.json");
    std::fs::write(&job, r#"{"argv": ["true"], "limits": {"memory_bytes": 1}}"#).unwrap();
    let out = Command::new(runner_bin())
        .arg("--data-dir")
        .arg(w.data_dir())
        .args(["run", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "bad_job", "{doc:#}");
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn an_oversized_body_sent_whole_is_answered_413() {
    let w = World::new();
    let d = Daemon::start(&w, &["--job-body-limit", "64KiB"]);
    // A stdlib-like client: writes every byte, then reads.
    let body = vec![b' '; 1 << 20];
    let mut conn = d.connect();
    let head = format!(
        "POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(&body)
        .expect("the daemon reads the whole body before answering");
    read_response(BufReader::new(conn)).assert_error(413, "body_too_large");
    // With Expect: 100-continue the answer comes before any body byte.
    let mut conn = d.connect();
    let head = format!(
        "POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    read_response(BufReader::new(conn)).assert_error(413, "body_too_large");
}

/// A published two-skill set, one with a supplementary file.
fn publish_two(d: &Daemon, w: &World) -> Vec<Value> {
    let tool = w.skill(
        "tooly",
        &[
            ("scripts/run.sh", b"echo from-tooly\n"),
            ("references/api.md", b"# API\nCall it.\n"),
        ],
    );
    let plain = w.skill("plain", &[]);
    let mut bindings = Vec::new();
    for (id, dir) in [("tooly", &tool), ("plain", &plain)] {
        let (bundle, binding) = bundle_of(id, dir);
        let r = d.post("/v1/skill-packages", &bundle);
        assert_eq!(r.status, 200, "{:#}", r.json());
        bindings.push(binding);
    }
    bindings
}

#[test]
fn every_advertised_tool_is_dispatched() {
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let bindings = publish_two(&d, &w);
    let listed = d.get("/v1/skill-packages").json();
    assert_eq!(listed["skills"].as_array().unwrap().len(), 2, "{listed:#}");

    let call = |id: &str, tool: &str, input: Value| -> Value {
        let r = d.post(&format!("/v1/sessions/{id}/tools/{tool}"), &input);
        let doc = r.json();
        assert_eq!(r.status, 200, "{tool}: {doc:#}");
        assert!(
            doc["content"].is_string() && doc["is_error"].is_boolean(),
            "{doc:#}"
        );
        doc
    };
    // Managed filesystem: find_skills, load_skill, load_skill_section,
    // read_skill_resource.
    let s = d.post(
        "/v1/sessions",
        &json!({"skills": bindings, "tools": ["bash", "read"]}),
    );
    let doc = s.json();
    let id = doc["id"].as_str().unwrap().to_owned();
    let tools: Vec<&str> = doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "find_skills",
            "load_skill",
            "load_skill_section",
            "read_skill_resource"
        ]
    );
    let found = call(&id, "find_skills", json!({"query": "tooly"}));
    assert_eq!(found["is_error"], false);
    let text = found["content"].as_str().unwrap();
    assert!(text.contains("- tooly:"), "{text}");
    // total counts the matches, not the session's skills.
    let r = d
        .get(&format!("/v1/sessions/{id}/skills?query=tooly"))
        .json();
    let hits = r["hits"].as_array().unwrap().len();
    assert_eq!(r["total"].as_u64().unwrap() as usize, hits, "{r:#}");
    assert!(text.starts_with(&format!("{hits} skill")), "{text}");
    let loaded = call(&id, "load_skill", json!({"name": "tooly"}));
    assert!(
        loaded["content"].as_str().unwrap().contains("# tooly"),
        "{loaded:#}"
    );
    assert!(loaded["content"]
        .as_str()
        .unwrap()
        .contains("references/api.md"));
    let section = call(
        &id,
        "load_skill_section",
        json!({"name": "tooly", "section": "references/api.md"}),
    );
    assert_eq!(section["content"], "# API\nCall it.\n");
    let res = call(
        &id,
        "read_skill_resource",
        json!({"path": "/skills/tooly/scripts/run.sh", "limit": 4}),
    );
    assert_eq!(res["is_error"], false);
    assert!(
        res["content"].as_str().unwrap().starts_with("echo"),
        "{res:#}"
    );
    assert!(
        res["content"].as_str().unwrap().contains("offset 4"),
        "{res:#}"
    );
    // Faults the model can fix: is_error, 200, a sentence.
    for (tool, input, says) in [
        ("load_skill", json!({"name": "nope"}), "not part of session"),
        ("load_skill", json!({"skill": "tooly"}), "not valid"),
        ("find_skills", json!({}), "missing field"),
        (
            "load_skill_section",
            json!({"name": "tooly", "section": "missing.md"}),
            "no section",
        ),
        (
            "read_skill_resource",
            json!({"path": "/etc/passwd"}),
            "not a package path",
        ),
    ] {
        let doc = call(&id, tool, input);
        assert_eq!(doc["is_error"], true, "{tool}: {doc:#}");
        assert!(
            doc["content"].as_str().unwrap().contains(says),
            "{tool}: {doc:#}"
        );
    }
    // Not advertised by this session, or no such session: 404.
    d.post(
        &format!("/v1/sessions/{id}/tools/Skill"),
        &json!({"skill": "tooly"}),
    )
    .assert_error(404, "not_found");
    d.post(
        "/v1/sessions/ses-0123456789abcdef0123456789abcdef/tools/load_skill",
        &json!({"name": "tooly"}),
    )
    .assert_error(404, "not_found");
    d.request(
        "POST",
        &format!("/v1/sessions/{id}/tools/load_skill"),
        &[],
        b"{not json",
    )
    .assert_error(400, "bad_request");

    // Semantic tools: list_skills and Skill.
    let s = d.post(
        "/v1/sessions",
        &json!({"skills": [bindings[1]], "tools": []}),
    );
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    let list = call(&sid, "list_skills", json!({}));
    assert!(
        list["content"].as_str().unwrap().contains("- plain:"),
        "{list:#}"
    );
    let skill = call(&sid, "Skill", json!({"skill": "plain"}));
    assert_eq!(skill["is_error"], false);
    assert!(
        skill["content"].as_str().unwrap().contains("# plain"),
        "{skill:#}"
    );
    let bad = call(&sid, "Skill", json!({"skill": "tooly"}));
    assert_eq!(bad["is_error"], true, "{bad:#}");
}

#[test]
fn sessions_are_listed_deleted_and_expire_when_idle() {
    let w = World::new();
    let d = Daemon::start(&w, &["--session-idle", "2s"]);
    let bindings = publish_two(&d, &w);
    let create = || {
        let r = d.post(
            "/v1/sessions",
            &json!({"skills": [bindings[1]], "tools": []}),
        );
        assert_eq!(r.status, 200);
        r.json()["id"].as_str().unwrap().to_owned()
    };
    let a = create();
    let b = create();
    let listed = d.get("/v1/sessions").json();
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{listed:#}"
    );
    assert_eq!(listed["sessions"][0]["skills"], json!(["plain"]));
    let r = d.delete(&format!("/v1/sessions/{a}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"id": a, "deleted": true}));
    d.get(&format!("/v1/sessions/{a}"))
        .assert_error(404, "not_found");
    d.delete(&format!("/v1/sessions/{a}"))
        .assert_error(404, "not_found");
    d.delete("/v1/sessions/not-a-session")
        .assert_error(400, "bad_request");
    // A job naming a session is a use of it.
    let before = d.get("/v1/sessions").json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == b.as_str())
        .unwrap()["last_used_at"]
        .clone();
    wait_until("the clock to move on", || {
        d.post("/v1/executions", &json!({"argv": ["true"], "session": b}));
        let after = d.get("/v1/sessions").json()["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == b.as_str())
            .map(|s| s["last_used_at"].clone());
        after.is_some_and(|a| a != before)
    });
    // Left alone (listing does not count as a use), b expires.
    wait_until("the idle session to expire", || {
        !d.get("/v1/sessions").json().to_string().contains(&b)
    });
    d.get(&format!("/v1/sessions/{b}"))
        .assert_error(404, "not_found");
    let record = w.data_dir().join("sessions").join(format!("{b}.json"));
    assert!(!record.exists(), "{}", record.display());
}

// ---------------------------------------------------------------------------
// The OpenAPI document (docs/openapi.json) against the real daemon

fn openapi_doc() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// `(METHOD, /path/{param})` of every `.route(...)` in the daemon's source.
fn routes_in_source() -> std::collections::BTreeSet<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runner/src/daemon");
    let mut out = std::collections::BTreeSet::new();
    for file in ["routes.rs", "sessions.rs"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for piece in text.split(".route(").skip(1) {
            let path = piece.split('"').nth(1).unwrap().replace("{*", "{");
            // The handler expression: up to the parenthesis closing `.route(`.
            let mut depth = 1;
            let end = piece
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .unwrap()
                .0;
            let handler = &piece[..end];
            for m in ["get", "post", "delete", "put", "patch"] {
                let called = handler
                    .match_indices(&format!("{m}("))
                    .any(|(i, _)| i == 0 || !handler.as_bytes()[i - 1].is_ascii_alphanumeric());
                if called {
                    out.insert((m.to_uppercase(), path.clone()));
                }
            }
        }
    }
    out
}

/// Checks `v` against `schema`, for the part of JSON Schema the document
/// uses: `$ref`, `type` (one or a list), `enum`, `properties`, `required`,
/// `additionalProperties`, `items`, `minItems`, `minimum`, `maximum`,
/// `oneOf`, `anyOf`. (`pattern`, `prefixItems` and `propertyNames`
/// constrain requests and are not checked.)
fn check_schema(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return check_schema(doc, &doc["components"]["schemas"][name], v, at);
    }
    if let Some(options) = schema["anyOf"].as_array() {
        if !options.iter().any(|o| check_schema(doc, o, v, at).is_ok()) {
            return Err(format!("{at}: matches none of anyOf: {v}"));
        }
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let ok = options
            .iter()
            .filter(|o| check_schema(doc, o, v, at).is_ok())
            .count();
        if ok != 1 {
            return Err(format!("{at}: matches {ok} of oneOf, not 1: {v}"));
        }
    }
    let type_ok = |t: &str| match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("type {other} not handled"),
    };
    match &schema["type"] {
        Value::String(t) if !type_ok(t) => return Err(format!("{at}: not {t}: {v}")),
        Value::Array(ts) if !ts.iter().any(|t| type_ok(t.as_str().unwrap())) => {
            return Err(format!("{at}: none of {ts:?}: {v}"))
        }
        _ => {}
    }
    if let Some(e) = schema["enum"].as_array() {
        if !e.contains(v) {
            return Err(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), v.as_f64()) {
        if n < min {
            return Err(format!("{at}: {n} < {min}"));
        }
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), v.as_f64()) {
        if n > max {
            return Err(format!("{at}: {n} > {max}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            if !obj.contains_key(r.as_str().unwrap()) {
                return Err(format!("{at}: missing {r}: {v}"));
            }
        }
        let props = schema["properties"].as_object();
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check_schema(doc, s, val, &format!("{at}.{k}"))?,
                None if schema["additionalProperties"] == false => {
                    return Err(format!("{at}: unexpected {k}"))
                }
                None if schema["additionalProperties"].is_object() => check_schema(
                    doc,
                    &schema["additionalProperties"],
                    val,
                    &format!("{at}.{k}"),
                )?,
                None => {}
            }
        }
    }
    if let Some(items) = v.as_array() {
        if let Some(min) = schema["minItems"].as_u64() {
            if (items.len() as u64) < min {
                return Err(format!("{at}: fewer than {min} items"));
            }
        }
        if schema["items"].is_object() {
            for (i, item) in items.iter().enumerate() {
                check_schema(doc, &schema["items"], item, &format!("{at}[{i}]"))?;
            }
        }
    }
    Ok(())
}

/// Checks a real response of `method` on the route `template` against the
/// document: its status is listed, and its body matches the schema.
fn conforms(doc: &Value, method: &str, template: &str, r: &Resp) {
    let op = &doc["paths"][template][method.to_lowercase()];
    assert!(op.is_object(), "{method} {template} is not in the document");
    let resp = &op["responses"][r.status.to_string()];
    assert!(
        resp.is_object(),
        "{method} {template}: status {} is not documented: {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    let ctype = r
        .header("content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let media = &resp["content"][&ctype];
    assert!(
        media.is_object(),
        "{method} {template} {}: content type {ctype} is not documented",
        r.status
    );
    let schema = &media["schema"];
    let bodies: Vec<Value> = match ctype.as_str() {
        "application/json" => vec![r.json()],
        "application/x-ndjson" => String::from_utf8_lossy(&r.body)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        _ => vec![Value::String(String::from_utf8_lossy(&r.body).into_owned())],
    };
    for b in &bodies {
        if let Err(e) = check_schema(doc, schema, b, "body") {
            panic!("{method} {template} {}: {e}", r.status);
        }
    }
}

#[test]
fn the_openapi_document_matches_the_router_and_real_responses() {
    if !require_sandbox() {
        return;
    }
    let doc = openapi_doc();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every route of the router is documented, and nothing else.
    let mut documented = std::collections::BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for m in ops.as_object().unwrap().keys() {
            documented.insert((m.to_uppercase(), path.clone()));
        }
    }
    assert_eq!(routes_in_source(), documented);

    let w = World::new();
    let d = Daemon::start(&w, &["--heartbeat", "10s"]);
    // The daemon serves the same document.
    let served = d.get("/v1/openapi.json");
    assert_eq!(served.json(), doc);
    conforms(&doc, "GET", "/v1/openapi.json", &served);
    conforms(&doc, "GET", "/v1/health", &d.get("/v1/health"));
    conforms(&doc, "GET", "/v1/version", &d.get("/v1/version"));
    conforms(&doc, "GET", "/metrics", &d.get("/metrics"));

    let bindings = publish_two(&d, &w);
    let (bundle, _) = bundle_of("plain", &w.path().join("skills/plain"));
    let published = d.post("/v1/skill-packages", &bundle);
    conforms(&doc, "POST", "/v1/skill-packages", &published);
    let identity = published.json()["identity"].as_str().unwrap().to_owned();
    conforms(
        &doc,
        "GET",
        "/v1/skill-packages",
        &d.get("/v1/skill-packages"),
    );
    let set = "/v1/skill-packages/{identity}";
    conforms(
        &doc,
        "GET",
        set,
        &d.get(&format!("/v1/skill-packages/{identity}")),
    );
    conforms(
        &doc,
        "GET",
        set,
        &d.get(&format!("/v1/skill-packages/{}", "0".repeat(64))),
    );
    conforms(
        &doc,
        "POST",
        "/v1/skill-packages",
        &d.post("/v1/skill-packages", &json!({})),
    );

    let exec = "/v1/executions";
    let one = "/v1/executions/{id}";
    let r = d.post(
        exec,
        &json!({"execution_id": "oa-1", "argv": ["sh", "-c", "echo hi"]}),
    );
    conforms(&doc, "POST", exec, &r);
    conforms(&doc, "POST", exec, &d.post(exec, &json!({"argv": []})));
    // A job refused before launch answers its result document (which
    // also has an `error`): found by schemathesis, the document said
    // oneOf of the error and the result, which both match.
    let unpublished = json!({"argv": ["true"], "skills": [{"id": "ghost", "revision": 1, "version": "1", "hash": "0".repeat(64)}]});
    let refused = d.post(exec, &unpublished);
    assert_eq!(refused.status, 404);
    assert_eq!(refused.json()["status"], "rejected");
    conforms(&doc, "POST", exec, &refused);
    conforms(
        &doc,
        "POST",
        exec,
        &d.post(exec, &json!({"execution_id": "oa-1", "argv": ["x"]})),
    );
    let streamed = d.request(
        "POST",
        exec,
        &[("Accept", "application/x-ndjson")],
        &serde_json::to_vec(&json!({"argv": ["echo", "streamed"]})).unwrap(),
    );
    conforms(&doc, "POST", exec, &streamed);
    let detached = d.post(
        "/v1/executions?wait=false",
        &json!({"execution_id": "oa-2", "argv": ["sleep", marker(14)]}),
    );
    conforms(&doc, "POST", exec, &detached);
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-2"));
    conforms(&doc, "DELETE", one, &d.delete("/v1/executions/oa-2"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-2?wait=60s"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-1"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/nobody"));
    conforms(&doc, "GET", one, &d.get("/v1/executions/oa-1?wait=x"));
    conforms(&doc, "DELETE", one, &d.delete("/v1/executions/oa-1"));
    conforms(&doc, "DELETE", one, &d.delete("/v1/executions/nobody"));
    conforms(&doc, "GET", exec, &d.get("/v1/executions?limit=1"));
    conforms(&doc, "GET", exec, &d.get("/v1/executions?status=nope"));
    let events = "/v1/executions/{id}/events";
    conforms(&doc, "GET", events, &d.get("/v1/executions/oa-1/events"));
    conforms(
        &doc,
        "GET",
        events,
        &d.get("/v1/executions/oa-1/events?after=1"),
    );
    conforms(&doc, "GET", events, &d.get("/v1/executions/nobody/events"));

    let s = d.post(
        "/v1/sessions",
        &json!({"skills": bindings, "tools": ["bash", "read"]}),
    );
    conforms(&doc, "POST", "/v1/sessions", &s);
    let id = s.json()["id"].as_str().unwrap().to_owned();
    conforms(
        &doc,
        "POST",
        "/v1/sessions",
        &d.post("/v1/sessions", &json!({"skills": 1})),
    );
    conforms(&doc, "GET", "/v1/sessions", &d.get("/v1/sessions"));
    let base = format!("/v1/sessions/{id}");
    for (template, path) in [
        ("/v1/sessions/{id}", base.clone()),
        (
            "/v1/sessions/{id}/skills",
            format!("{base}/skills?query=tooly"),
        ),
        (
            "/v1/sessions/{id}/skills/{name}",
            format!("{base}/skills/tooly"),
        ),
        (
            "/v1/sessions/{id}/skills/{name}",
            format!("{base}/skills/nope"),
        ),
        (
            "/v1/sessions/{id}/skills/{name}/sections/{section}",
            format!("{base}/skills/tooly/sections/references/api.md"),
        ),
        (
            "/v1/sessions/{id}/resources",
            format!("{base}/resources?path=/skills/tooly/scripts/run.sh"),
        ),
        ("/v1/sessions/{id}/events", format!("{base}/events")),
        ("/v1/sessions/{id}", "/v1/sessions/bad-id".to_owned()),
    ] {
        conforms(&doc, "GET", template, &d.get(&path));
    }
    let tool = "/v1/sessions/{id}/tools/{tool}";
    conforms(
        &doc,
        "POST",
        tool,
        &d.post(
            &format!("{base}/tools/load_skill"),
            &json!({"name": "tooly"}),
        ),
    );
    conforms(
        &doc,
        "POST",
        tool,
        &d.post(&format!("{base}/tools/load_skill"), &json!({"nam": 1})),
    );
    conforms(
        &doc,
        "POST",
        tool,
        &d.post(&format!("{base}/tools/Skill"), &json!({})),
    );
    conforms(&doc, "DELETE", "/v1/sessions/{id}", &d.delete(&base));
    conforms(&doc, "DELETE", "/v1/sessions/{id}", &d.delete(&base));
}

// ---------------------------------------------------------------------------
// Findings of the security review of issue 14 (memory, retention, bodies)

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A job that writes `size` bytes of `\x01` to stdout and to stderr,
/// `piece` bytes per write, alternating.
fn flood_job(id: &str, piece: usize, size: usize, output_bytes: usize) -> Value {
    json!({
        "execution_id": id,
        "argv": ["python3", "-c", format!(
            "import os\nb=b'\\x01'*{piece}\nfor i in range({}):\n  os.write(1,b)\n  os.write(2,b)",
            size / piece
        )],
        "limits": {"timeout_ms": 120000, "output_bytes": output_bytes},
    })
}

#[test]
fn a_flood_of_tiny_writes_keeps_the_daemon_memory_bounded() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let pid = d.child.as_ref().unwrap().id();
    assert_eq!(d.get("/v1/health").status, 200);
    let (base, _) = memory_kib(pid);
    // 1 MiB per stream, one byte per write: once an event each.
    let r = d.post(
        "/v1/executions?wait=false",
        &flood_job("flood-1", 1, 1 << 20, 1 << 20),
    );
    assert_eq!(r.status, 202, "{:#}", r.json());
    // Readers that re-attach and then read nothing.
    let stalled: Vec<Conn> = (0..20)
        .map(|_| {
            let mut c = d.connect();
            send(
                &mut c,
                "GET",
                "/v1/executions/flood-1/events",
                &[],
                b"",
                None,
            );
            c
        })
        .collect();
    let r = d.get("/v1/executions/flood-1?wait=60s");
    let doc = r.json();
    assert_eq!(r.status, 200, "{doc:#}");
    assert_eq!(doc["status"], "exited", "{doc:#}");
    assert_eq!(doc["stdout"].as_str().unwrap().len(), 1 << 20);
    // The whole log, read back: every byte once, seq numbers contiguous.
    let mut all = Lines::open(&d, "GET", "/v1/executions/flood-1/events", &[], b"");
    let events = all.rest();
    let seq = seqs(&events);
    assert_eq!(seq, (1..=seq.len() as u64).collect::<Vec<_>>());
    for stream in ["stdout", "stderr"] {
        let text: usize = events
            .iter()
            .filter(|e| e["event"] == stream)
            .map(|e| e["data"].as_str().unwrap().len())
            .sum();
        assert_eq!(text, 1 << 20, "{stream}");
    }
    let (rss, hwm) = memory_kib(pid);
    drop(stalled);
    // Before the fix: 587,626 events and +134 MB for 2 MiB of output.
    let bound = 64 * 1024;
    assert!(
        hwm < base + bound,
        "daemon peak memory {hwm} KiB, {} KiB over its {base} KiB start (now {rss} KiB); events {}",
        hwm - base,
        events.len()
    );
    eprintln!(
        "flood-1: base {base} KiB, peak {hwm} KiB, now {rss} KiB, {} events",
        events.len()
    );
}

#[test]
fn one_execution_cannot_empty_retention() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(
        &w,
        &["--retain-bytes", "32MiB", "--max-output-bytes", "8MiB"],
    );
    let victim = json!({"execution_id": "victim-1", "argv": ["echo", "important result"]});
    assert_eq!(d.post("/v1/executions?wait=false", &victim).status, 202);
    let r = d.get("/v1/executions/victim-1?wait=60s");
    assert_eq!(r.status, 200, "{:#}", r.json());
    for id in ["flood-1", "flood-2"] {
        let job = flood_job(id, 65536, 8 << 20, 8 << 20);
        assert_eq!(d.post("/v1/executions?wait=false", &job).status, 202);
        let r = d.get(&format!("/v1/executions/{id}?wait=60s"));
        let doc = r.json();
        // The newest result is kept whole, however large.
        assert_eq!(r.status, 200, "{id}: {}", doc["error"]);
        assert_eq!(doc["stdout"].as_str().unwrap().len(), 8 << 20);
    }
    // The small result stays with its record.
    let r = d.get("/v1/executions/victim-1");
    assert_eq!(r.status, 200, "{:#}", r.json());
    assert_eq!(r.json()["stdout"], "important result\n");
    // The older flood lost its bulk but not its id: 410, never a rerun.
    let msg = d
        .get("/v1/executions/flood-1")
        .assert_error(410, "result_dropped");
    assert!(msg.contains("exited"), "{msg}");
    d.post(
        "/v1/executions",
        &flood_job("flood-1", 65536, 8 << 20, 8 << 20),
    )
    .assert_error(410, "result_dropped");
    d.post(
        "/v1/executions",
        &json!({"execution_id": "flood-1", "argv": ["true"]}),
    )
    .assert_error(409, "execution_id_in_use");
    d.get("/v1/executions/flood-1/events")
        .assert_error(410, "result_dropped");
    let listed = d.get("/v1/executions").json();
    let ids: Vec<&str> = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["flood-2", "flood-1", "victim-1"], "{listed:#}");
    // A budget that could not hold one execution's output is refused.
    let err = Daemon::try_start(
        &w,
        &["--retain-bytes", "16MiB", "--max-output-bytes", "16MiB"],
    )
    .err()
    .expect("a too small retain_bytes started");
    assert!(err.contains("retain_bytes"), "{err}");
    let err = Daemon::try_start(&w, &["--retain", "0"])
        .err()
        .expect("--retain 0 started");
    assert!(err.contains("retain"), "{err}");
}

#[test]
fn session_bodies_are_read_only_under_a_bounded_number_of_places() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    // The holders keep their places until their body times out: long
    // enough that a loaded machine cannot end the window before the check.
    let d = Daemon::start(&w, &["--body-timeout", "10m"]);
    // Clients that announce a body and send only its start.
    let hold = || {
        let mut c = d.connect();
        write!(
            c,
            "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"skills\": ["
        )
        .unwrap();
        c.flush().unwrap();
        c
    };
    let mut holders: Vec<Conn> = (0..4).map(|_| hold()).collect();
    // Once they hold every place, another body is refused at once. A holder
    // that reached the daemon while a check held the last place was itself
    // refused (answered): it is replaced, so the four places end up held.
    wait_until("a session body is refused while others are read", || {
        for h in holders.iter_mut() {
            if h.answered() {
                *h = hold();
            }
        }
        d.request("POST", "/v1/sessions", &[], b"not json").status == 429
    });
    let r = d.request("POST", "/v1/sessions/nope/tools/read", &[], b"{}");
    r.assert_error(429, "busy");
    assert!(r.header("retry-after").is_some());
    drop(holders);
    wait_until("places come back", || {
        d.request("POST", "/v1/sessions", &[], b"not json").status == 400
    });
}

#[test]
fn reattaching_past_the_end_and_unknown_session_queries_are_refused() {
    if !require_sandbox() {
        return;
    }
    let w = World::new();
    let d = Daemon::start(&w, &[]);
    let r = d.post(
        "/v1/executions",
        &json!({"execution_id": "short-1", "argv": ["echo", "hi"]}),
    );
    assert_eq!(r.status, 200);
    let mut all = Lines::open(&d, "GET", "/v1/executions/short-1/events", &[], b"");
    let events = all.rest();
    let last = *seqs(&events).last().unwrap();
    assert_eq!(events.last().unwrap()["event"], "exit");
    // From the last event: nothing more, the stream just ends.
    let r = d.get(&format!("/v1/executions/short-1/events?after={last}"));
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "{}", String::from_utf8_lossy(&r.body));
    let msg = d
        .get(&format!("/v1/executions/short-1/events?after={}", last + 1))
        .assert_error(400, "bad_request");
    assert!(msg.contains(&format!("seq {last}")), "{msg}");
    d.get("/v1/sessions?x=1").assert_error(400, "bad_request");
    assert_eq!(d.get("/v1/sessions").status, 200);
}

/// A gated job that then prints `n` bytes of `byte` on stdout.
fn gated_flood(id: &str, ws: &Path, byte: u8, n: usize) -> Value {
    let script = format!(
        "while [ ! -e go ]; do sleep 0.05; done; exec perl -e 'print STDOUT qq(\\x{byte:02x}) x {n}'"
    );
    json!({
        "execution_id": id,
        "workspace": ws,
        "argv": ["sh", "-c", script],
    })
}

#[test]
fn output_with_no_character_boundary_is_cut_into_full_events() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "cont");
    let n = 1 << 20;
    // Only UTF-8 continuation bytes: no character boundary anywhere.
    let r = d.post(
        "/v1/executions?wait=false",
        &gated_flood("cont-1", &ws, 0x80, n),
    );
    assert_eq!(r.status, 202, "{:#}", r.json());
    let mut readers: Vec<Lines> = (0..6)
        .map(|_| Lines::open(&d, "GET", "/v1/executions/cont-1/events", &[], b""))
        .collect();
    open_gate(&ws);
    // The readers are attached and take nothing yet: the daemon answers.
    let r = d.get("/v1/executions/cont-1?wait=60s");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(d.get("/v1/health").status, 200);
    for reader in &mut readers {
        let events = reader.rest();
        let out: Vec<&str> = events
            .iter()
            .filter(|e| e["event"] == "stdout")
            .map(|e| e["data"].as_str().unwrap())
            .collect();
        // Every byte is one U+FFFD; events are about 16 KiB of output each
        // (64 for 1 MiB), not 4 bytes each (262144).
        let chars: usize = out.iter().map(|s| s.chars().count()).sum();
        assert_eq!(chars, n);
        assert!(out.iter().all(|s| s.chars().all(|c| c == '\u{FFFD}')));
        assert!(
            (n / (16 * 1024)..=4 * n / (16 * 1024)).contains(&out.len()),
            "{} stdout events for {n} bytes",
            out.len()
        );
        assert_eq!(events.last().unwrap()["event"], "exit");
    }
    assert_eq!(d.get("/v1/health").status, 200);
}

/// The daemon's peak resident memory (VmHWM), in bytes.
fn peak_rss(d: &Daemon) -> u64 {
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    kib * 1024
}

#[test]
fn readers_of_a_large_result_share_one_document() {
    if !require_sandbox() {
        return;
    }
    let (w, roots) = world_with_roots();
    let d = Daemon::start(&w, &["--root", &roots]);
    let ws = workspace_in(&w, "big");
    // 16 MiB of \x01 per stream: each becomes "\u0001" (6 bytes) in JSON.
    let n: u64 = 16 << 20;
    let r = d.post(
        "/v1/executions?wait=false",
        &json!({
            "execution_id": "big-1",
            "workspace": ws,
            "argv": ["perl", "-e",
                format!("my $b = qq(\\x01) x 65536; for (1..{}) {{ print STDOUT $b; print STDERR $b }}", n >> 16)],
            "limits": {"output_bytes": n},
        }),
    );
    assert_eq!(r.status, 202, "{:#}", r.json());
    // Four slow readers of the result: each takes its head and 64 KiB,
    // then waits while the others take theirs.
    let mut readers: Vec<(BufReader<Conn>, u64)> = (0..4)
        .map(|_| {
            let mut conn = d.connect();
            send(
                &mut conn,
                "GET",
                "/v1/executions/big-1?wait=60s",
                &[],
                b"",
                None,
            );
            BufReader::new(conn)
        })
        .map(|mut r| {
            let (status, headers) = read_head(&mut r);
            assert_eq!(status, 200);
            let len = Resp {
                status,
                headers,
                body: Vec::new(),
            }
            .header("content-length")
            .map(|l| l.parse::<u64>().unwrap())
            .expect("a result document has a Content-Length");
            (r, len)
        })
        .collect();
    let doc = readers[0].1;
    assert!(
        doc > 12 * n,
        "a {doc}-byte document for 2 × {n} bytes of \\x01"
    );
    for (r, _) in &mut readers {
        let mut first = vec![0; 64 * 1024];
        r.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"{\""));
    }
    // And one re-attached reader of the exit event alone.
    let last = d
        .get("/v1/executions/big-1/events?after=1000000000")
        .assert_error(400, "bad_request");
    let last: u64 = last
        .split("(seq ")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no last seq in {last:?}"));
    let mut conn = d.connect();
    let path = format!("/v1/executions/big-1/events?after={}", last - 1);
    send(&mut conn, "GET", &path, &[], b"", None);
    let mut r = BufReader::new(conn);
    let (status, headers) = read_head(&mut r);
    assert!(status == 200 && is_chunked(&headers), "status {status}");
    let mut exit = Chunked::new(r);
    let want = format!("{{\"event\":\"exit\",\"seq\":{last},\"result\":{{");
    let mut head = vec![0u8; want.len()];
    exit.read_exact(&mut head).unwrap();
    assert_eq!(String::from_utf8_lossy(&head), want);
    for (r, len) in &mut readers {
        let got = std::io::copy(&mut r.take(*len - 64 * 1024), &mut std::io::sink()).unwrap();
        assert_eq!(got, *len - 64 * 1024);
    }
    // The exit line is the same document, then "}\n", and the stream ends.
    let mut rest = Vec::new();
    exit.read_to_end(&mut rest).unwrap();
    assert_eq!(
        (head.len() + rest.len()) as u64,
        want.len() as u64 - 1 + doc + 2
    );
    assert!(rest.ends_with(b"}}\n"));
    // One document plus the output held twice (log, result) and the
    // daemon itself (about 290 MiB here); a copy per reader was over 900.
    let peak = peak_rss(&d);
    eprintln!(
        "daemon VmHWM {} MiB, document {} MiB",
        peak >> 20,
        doc >> 20
    );
    assert!(
        peak < doc + (160 << 20),
        "the daemon peaked at {peak} bytes for a {doc}-byte document read 5 times"
    );
}
