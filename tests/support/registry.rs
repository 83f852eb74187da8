//! Registries for the distribution tests: a real one (Debian's
//! `docker-registry`, the CNCF `distribution` server, on a free loopback
//! port with a temporary storage folder) and a tiny fake one in a thread,
//! which answers as a tampered registry would (it may lie about sizes,
//! serve endless bytes, or serve another manifest than the one asked for).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The registry binary the Debian package installs.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// A real registry, stopped when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Registry {
    /// Starts one, or `None` (after [`crate::skip`]) when the binary is not
    /// installed (`apt-get install docker-registry`).
    pub fn start() -> Option<Registry> {
        Registry::start_with("")
    }

    /// [`Registry::start`] with more lines for its `http:` section
    /// (indented two spaces), e.g. a `tls:` block; readiness is then a
    /// listening port.
    pub fn start_with(http_extra: &str) -> Option<Registry> {
        if !Path::new(REGISTRY_BIN).exists() {
            crate::skip(format!(
                "{REGISTRY_BIN} is not installed (apt-get install docker-registry)"
            ));
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("sr-registry-")
            .tempdir()
            .unwrap();
        let mut reg = Registry {
            child: None,
            port: 0,
            _dir: dir,
        };
        for _ in 0..5 {
            reg.port = free_port();
            let config = reg._dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{}\n{http_extra}",
                    reg._dir.path().join("storage").display(),
                    reg.port
                ),
            )
            .unwrap();
            reg.child = Some(
                Command::new(REGISTRY_BIN)
                    .arg("serve")
                    .arg(&config)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start docker-registry"),
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                let ready = if http_extra.is_empty() {
                    matches!(http(&reg.host(), "GET", "/v2/", &[], b""), Ok((200, _, _)))
                } else {
                    TcpStream::connect(reg.host()).is_ok()
                };
                if ready {
                    return Some(reg);
                }
                if let Some(Ok(Some(_))) = reg.child.as_mut().map(|c| c.try_wait()) {
                    break; // the port was taken meanwhile: try another
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            reg.stop();
        }
        panic!("docker-registry did not start on a free loopback port");
    }

    /// `127.0.0.1:PORT`
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops it (a later request finds nothing listening).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A status, headers (lowercase names) and body.
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// One plain HTTP/1.1 request.
pub fn http(
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut r = BufReader::new(s);
    let (status, headers) = crate::read_head(&mut r);
    let mut out = Vec::new();
    if crate::is_chunked(&headers) {
        let mut c = crate::Chunked::new(r);
        c.read_to_end(&mut out)?;
    } else if method != "HEAD" {
        let len = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<u64>().ok());
        match len {
            Some(n) => {
                r.take(n).read_to_end(&mut out)?;
            }
            None => {
                r.read_to_end(&mut out)?;
            }
        }
    }
    Ok((status, headers, out))
}

/// What a fake registry answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status and body (`application/octet-stream` unless `content_type`).
    Body {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// 200 and bytes without end (the connection closes when the client
    /// goes away).
    Endless,
    /// 401 with this `WWW-Authenticate` challenge.
    Challenge(String),
}

impl Reply {
    pub fn ok(body: Vec<u8>) -> Reply {
        Reply::Body {
            status: 200,
            content_type: "application/octet-stream",
            body,
        }
    }
    pub fn manifest(body: Vec<u8>) -> Reply {
        Reply::Body {
            status: 200,
            content_type: "application/vnd.oci.image.manifest.v1+json",
            body,
        }
    }
    pub fn not_found() -> Reply {
        Reply::Body {
            status: 404,
            content_type: "application/json",
            body: b"{\"errors\":[{\"code\":\"NOT_FOUND\"}]}".to_vec(),
        }
    }
}

/// A fake registry in a thread: every request's method, path and header
/// lines go to `answer`; it counts the requests and the body bytes it sent.
pub struct FakeRegistry {
    port: u16,
    stop: Arc<AtomicBool>,
    pub requests: Arc<AtomicU64>,
    pub sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeRegistry(127.0.0.1:{})", self.port)
    }
}

impl FakeRegistry {
    pub fn start(answer: impl Fn(&str, &str, &[String]) -> Reply + Send + 'static) -> FakeRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let (s2, r2, b2) = (stop.clone(), requests.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        r2.fetch_add(1, Ordering::SeqCst);
                        let _ = serve_one(conn, &answer, &b2);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FakeRegistry {
            port,
            stop,
            requests,
            sent,
            thread: Some(thread),
        }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(
    conn: TcpStream,
    answer: &dyn Fn(&str, &str, &[String]) -> Reply,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut r = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let path = parts.next().unwrap_or("").to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        headers.push(h.trim_end().to_owned());
    }
    let mut w = conn;
    match answer(&method, &path, &headers) {
        Reply::Challenge(c) => {
            write!(
                w,
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: {c}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )?;
        }
        Reply::Body {
            status,
            content_type,
            body,
        } => {
            write!(
                w,
                "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            if method != "HEAD" {
                w.write_all(&body)?;
                sent.fetch_add(body.len() as u64, Ordering::SeqCst);
            }
        }
        Reply::Endless => {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
            )?;
            let chunk = vec![b'x'; 64 * 1024];
            loop {
                w.write_all(&chunk)?;
                sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
        }
    }
    Ok(())
}
