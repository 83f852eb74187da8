//! The one daemon harness: `skill-runner serve` started for a test's
//! [`World`], the few lines of HTTP/1.1 the tests speak to it (by hand, so
//! that a test can also misbehave on purpose: slow-loris, disconnects,
//! bodies that never end), and the waits they need.
//!
//! Every daemon starts from [`runner_command`], so it sees none of the
//! caller's `SKILL_RUNNER_*` variables: only its arguments and the log level
//! set here. Each test starts its own daemon with a private data dir; it is
//! killed when the [`Daemon`] is dropped. No wait here is a timing
//! assertion: each has a generous hang-protection limit ([`PATIENCE`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{is_chunked, read_head, runner_command, Chunked, World};

/// Hang protection for every wait.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A running `skill-runner serve`, its log collected as it comes.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    /// The Unix socket it listens on (empty when it listens on TCP).
    pub socket: PathBuf,
    /// The TCP address it listens on, if any.
    pub tcp: Option<SocketAddr>,
    /// The bearer token every request carries, if any.
    pub token: Option<String>,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `skill-runner serve` for `world` with `args`, and waits until
    /// it listens.
    pub fn start(world: &World, args: &[&str]) -> Daemon {
        Self::try_start(world, args).unwrap_or_else(|log| panic!("daemon did not start:\n{log}"))
    }

    /// `skill-runner --data-dir <world's> serve ARGS`, logging at `info` to
    /// a pipe, for [`Daemon::spawn`]; a test may change it first.
    pub fn command(world: &World, args: &[&str]) -> Command {
        let mut c = runner_command();
        c.arg("--data-dir")
            .arg(world.data_dir())
            .arg("serve")
            .args(args)
            .env("SKILL_RUNNER_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// Like [`Daemon::start`], but a daemon that exits before it listens
    /// is its log as the error.
    pub fn try_start(world: &World, args: &[&str]) -> Result<Daemon, String> {
        Self::spawn(Self::command(world, args))
    }

    /// Starts `command` (from [`Daemon::command`]) and waits until the
    /// daemon logs the address it listens on; if it exits first, its log
    /// is the error.
    pub fn spawn(mut command: Command) -> Result<Daemon, String> {
        let mut child = command.spawn().expect("spawn skill-runner serve");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("the daemon's stderr is piped");
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
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon never listened:\n{}", log.lock().unwrap());
            }
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

    /// One JSON request: the status and the JSON body (`null` when the
    /// body is empty).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let headers: &[(&str, &str)] = match body {
            Some(_) => &[("Content-Type", "application/json")],
            None => &[],
        };
        let resp = self.request(method, path, headers, bytes.as_bytes());
        let doc = if resp.body.is_empty() {
            Value::Null
        } else {
            resp.json()
        };
        (resp.status, doc)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon already stopped").id()
    }

    /// Starts `command` (from [`Daemon::command`]) in a mount namespace of
    /// its own (`unshare --mount --propagation private`), where a test may
    /// mount ([`Daemon::bind_in_its_namespace`]) without touching the
    /// host's; where none can be made, the daemon's log is the error.
    pub fn spawn_unshared(command: &Command) -> Result<Daemon, String> {
        let private = ["--mount", "--propagation", "private"].map(std::ffi::OsStr::new);
        let mut unshared = crate::wrapped("unshare", &private, command);
        unshared
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Daemon::spawn(unshared)
    }

    /// Binds `src` at `dst` in the daemon's mount namespace (`nsenter`).
    pub fn bind_in_its_namespace(&self, src: &std::path::Path, dst: &std::path::Path) {
        let mounted = Command::new("nsenter")
            .arg("-t")
            .arg(self.pid().to_string())
            .args(["-m", "mount", "--bind"])
            .arg(src)
            .arg(dst)
            .output()
            .unwrap();
        assert!(mounted.status.success(), "{}", crate::show(&mounted));
    }

    /// Waits until the daemon's log has a line for which `found` holds,
    /// and returns it; panics, with the log, after [`PATIENCE`].
    pub fn wait_for_line(&self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(line) = self.log().lines().find(|l| found(l)) {
                return line.to_owned();
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no log line with {what}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Sends a JSON `POST` and returns its connection unread: a blocking
    /// call whose answer the test never waits for (or reads later).
    pub fn post_unanswered(&self, path: &str, body: &Value) -> Conn {
        let mut conn = self.connect();
        send(
            &mut conn,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            &serde_json::to_vec(body).unwrap(),
            self.token.as_deref(),
        );
        conn
    }

    pub fn connect(&self) -> Conn {
        let c = match self.tcp {
            Some(addr) => Conn::Tcp(TcpStream::connect(addr).unwrap()),
            None => Conn::Unix(UnixStream::connect(&self.socket).unwrap()),
        };
        c.set_timeout(PATIENCE);
        c
    }

    /// One request on a fresh connection (`Connection: close`).
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
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

    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], b"")
    }

    /// The value of an unlabelled `/metrics` line, or one with its labels
    /// written in `name` (`family{label="x"}`).
    pub fn metric(&self, name: &str) -> f64 {
        let body = String::from_utf8(self.get("/metrics").body).unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{body}"))
    }

    pub fn delete(&self, path: &str) -> Resp {
        self.request("DELETE", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            &serde_json::to_vec(body).unwrap(),
        )
    }

    /// Sends a signal and waits for the daemon to exit.
    pub fn signal_and_wait(&mut self, signal: i32) -> ExitStatus {
        kill(self.pid() as i32, signal);
        self.wait()
    }

    /// Waits for the daemon to exit (told to by a signal sent already).
    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("daemon already stopped");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if start.elapsed() >= PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not exit:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) -> ExitStatus {
        self.signal_and_wait(libc::SIGTERM)
    }
}

/// The execution ids of a `GET /v1/executions` answer, in its order
/// (newest first).
pub fn listed_ids(list: &Value) -> Vec<&str> {
    list["executions"]
        .as_array()
        .expect("a listing of executions")
        .iter()
        .map(|e| e["execution_id"].as_str().expect("an execution id"))
        .collect()
}

/// The address in the daemon's "listening on ADDR" log line (human or
/// JSON).
pub fn listening_address(line: &str) -> Option<String> {
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

/// How long a daemon a test leaves running is given to stop on SIGTERM
/// before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Drop for Daemon {
    /// Stops the daemon as an operator would, SIGTERM first: killed
    /// outright, it cannot clean up (a prepared sandbox being made when it
    /// dies may leave a process waiting for ever, which only its next
    /// start on the same data dir would sweep, and a test's data dir has
    /// none). Killed if it does not stop within [`STOP_WAIT`].
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Never a panic here (this may run while a test unwinds): a
            // daemon already gone is fine.
            signal(c.id() as i32, libc::SIGTERM);
            let start = Instant::now();
            while start.elapsed() < STOP_WAIT {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `sig` to `pid`; whether it was delivered.
fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Sends `signal` to `pid`; panics if it cannot be sent.
pub fn kill(pid: i32, sig: i32) {
    assert!(
        signal(pid, sig),
        "kill -{sig} {pid} failed: {}",
        std::io::Error::last_os_error()
    );
}

/// A connection to the daemon, over its socket or TCP.
#[derive(Debug)]
pub enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    /// Whether the daemon has answered on it (or closed it), waiting a
    /// millisecond at most. Reads what came, if anything.
    pub fn answered(&mut self) -> bool {
        self.set_timeout(Duration::from_millis(1));
        let got = self.read(&mut [0u8; 1]);
        self.set_timeout(PATIENCE);
        !matches!(got, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    }

    pub fn set_timeout(&self, t: Duration) {
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

/// Writes one request with `Connection: close` (and the bearer `token`,
/// if any) on `conn`.
pub fn send(
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

/// A whole response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}), status {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts an error response of this status and kind.
    pub fn assert_error(&self, status: u16, kind: &str) -> String {
        let doc = self.json();
        assert_eq!(self.status, status, "{doc:#}");
        assert_eq!(doc["error"]["kind"], kind, "{doc:#}");
        let msg = doc["error"]["message"].as_str().unwrap().to_owned();
        assert!(!msg.is_empty());
        msg
    }
}

/// Reads a whole response: by its length, its chunks, or to the end.
pub fn read_response<R: BufRead>(mut r: R) -> Resp {
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

/// Polls `cond` until true; panics after [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Pids of processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
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
pub fn marker(n: u32) -> String {
    format!("{}.{:03}{}", 300 + n, std::process::id() % 1000, n)
}

/// A streamed response: its lines, read one by one as they come.
#[derive(Debug)]
pub struct Lines {
    lines: std::io::Lines<BufReader<Chunked<BufReader<Conn>>>>,
    pub status: u16,
}

impl Lines {
    pub fn open(
        d: &Daemon,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Lines {
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

    pub fn next_event(&mut self) -> Option<Value> {
        let line = self.lines.next()?.unwrap();
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Every event up to and with `exit`, heartbeats left out.
    pub fn rest(&mut self) -> Vec<Value> {
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

/// The `seq` of each event.
pub fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// The names of the cgroup owners of `w`'s data dir now (the folders of
/// `<data>/cgroups/` that daemons make, `run`'s slot files left out): a
/// daemon's pooled cgroups are `<owner>+<n>`.
pub fn cgroup_owners(w: &World) -> Vec<String> {
    std::fs::read_dir(w.data_dir().join("cgroups"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("run-"))
        .collect()
}

/// The cgroup folders, in every mounted hierarchy, of the pools of
/// `owners` (`<owner>+<n>`).
pub fn pooled_cgroups(owners: &[String]) -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, owners: &[String], depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let pooled = owners.iter().any(|o| {
                name.strip_prefix(o.as_str())
                    .and_then(|n| n.strip_prefix('+'))
                    .is_some_and(|n| n.parse::<u64>().is_ok())
            });
            if pooled {
                out.push(e.path());
            } else if depth > 0 {
                walk(&e.path(), owners, depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    if !owners.is_empty() {
        walk(std::path::Path::new("/sys/fs/cgroup"), owners, 32, &mut out);
    }
    out
}
