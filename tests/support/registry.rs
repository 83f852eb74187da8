//! Registries for the distribution tests: a real one (Debian's
//! `docker-registry`, the CNCF `distribution` server, on a free loopback
//! port with a temporary storage folder) and a tiny fake one in a thread,
//! which answers as a tampered registry would (it may lie about sizes,
//! serve endless bytes, or serve another manifest than the one asked for),
//! over plain TCP or behind TLS.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// A status with no body and these headers (e.g. a `Location`).
    Headers {
        status: u16,
        headers: Vec<(String, String)>,
    },
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
    /// For one behind TLS: the head lines (request line and headers) of
    /// every request that arrived in plain HTTP instead of a TLS handshake
    /// (none is answered).
    pub plain: Arc<Mutex<Vec<Vec<String>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeRegistry(127.0.0.1:{})", self.port)
    }
}

impl FakeRegistry {
    pub fn start(answer: impl Fn(&str, &str, &[String]) -> Reply + Send + 'static) -> FakeRegistry {
        FakeRegistry::serve(None, answer)
    }

    /// [`FakeRegistry::start`] behind TLS with the PEM certificate chain
    /// `cert` and key `key`.
    pub fn start_tls(
        cert: &Path,
        key: &Path,
        answer: impl Fn(&str, &str, &[String]) -> Reply + Send + 'static,
    ) -> FakeRegistry {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        FakeRegistry::serve(Some(Arc::new(config)), answer)
    }

    fn serve(
        tls: Option<Arc<rustls::ServerConfig>>,
        answer: impl Fn(&str, &str, &[String]) -> Reply + Send + 'static,
    ) -> FakeRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let plain = Arc::new(Mutex::new(Vec::new()));
        let (s2, r2, b2, p2) = (stop.clone(), requests.clone(), sent.clone(), plain.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                        r2.fetch_add(1, Ordering::SeqCst);
                        let Some(config) = &tls else {
                            let _ = serve_one(conn, &answer, &b2);
                            continue;
                        };
                        // A TLS handshake opens with a record of type 22.
                        let mut first = [0u8; 1];
                        if matches!(conn.peek(&mut first), Ok(1) if first[0] != 0x16) {
                            let mut r = BufReader::new(conn);
                            let (line, headers) = read_request_head(&mut r).unwrap_or_default();
                            let mut head = vec![line];
                            head.extend(headers);
                            p2.lock().unwrap().push(head);
                            continue;
                        }
                        let Ok(server) = rustls::ServerConnection::new(config.clone()) else {
                            continue;
                        };
                        let mut stream = rustls::StreamOwned::new(server, conn);
                        let _ = serve_one(&mut stream, &answer, &b2);
                        stream.conn.send_close_notify();
                        let _ = stream.flush();
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
            plain,
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

/// The request line and the header lines of one request.
fn read_request_head(r: &mut impl BufRead) -> std::io::Result<(String, Vec<String>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        headers.push(h.trim_end().to_owned());
    }
    Ok((line.trim_end().to_owned(), headers))
}

fn serve_one(
    conn: impl Read + Write,
    answer: &dyn Fn(&str, &str, &[String]) -> Reply,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut r = BufReader::new(conn);
    let (line, headers) = read_request_head(&mut r)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let path = parts.next().unwrap_or("").to_owned();
    // The body (an upload) is read before the answer.
    let len = headers
        .iter()
        .filter_map(|h| h.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    std::io::copy(&mut (&mut r).take(len), &mut std::io::sink())?;
    let w = r.get_mut();
    match answer(&method, &path, &headers) {
        Reply::Headers { status, headers } => {
            write!(w, "HTTP/1.1 {status} X\r\n")?;
            for (k, v) in headers {
                write!(w, "{k}: {v}\r\n")?;
            }
            write!(w, "Content-Length: 0\r\nConnection: close\r\n\r\n")?;
        }
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
