//! The runner's HTTP proxy: the only way out of a sandbox whose job gives
//! a network allowlist.
//!
//! One [`Session`] per execution, listening on that execution's own socket
//! (a Unix socket bound into its sandbox on Linux, a loopback TCP port on
//! macOS) and deciding with that execution's own [`Policy`]: a connection
//! can only ever be judged by the policy of the listener it arrived on, so
//! concurrent executions never see each other's allowlists. Sessions share
//! one small tokio runtime per runner process (`runtime`).
//!
//! Per connection: one request head (at most [`http::MAX_HEAD`], within
//! [`Limits::head`]), either `CONNECT host:port` (a tunnel) or an
//! absolute-form `http://` request (forwarded in origin form with
//! `Connection: close`, so one request per connection). The host is decided
//! by the policy; a name is resolved here, never in the sandbox, each
//! address it resolves to is checked, and the connection goes to a checked
//! address (no second lookup, so DNS rebinding gains nothing). Refusals are
//! HTTP 403 with the reason in [`http::REASON_HEADER`]; failures to reach
//! an allowed host are 502 or 504 with the same header.
//!
//! Bounds: at most [`Limits::open`] connections open at once (more get 429
//! and are counted as dropped), at most [`Limits::listed`] requests listed
//! in the result (more are counted as dropped), resolving plus connecting
//! within [`Limits::connect`], and a connection with no byte either way for
//! [`Limits::idle`] is closed. Ending the session aborts every connection.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::timeout;
use tracing::Instrument;

use super::http::{self, Target};
use super::policy::{Decision, Host, Policy, Refusal};

/// Bounds of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub open: usize,
    /// Requests listed in the result.
    pub listed: usize,
    /// Time a client has to send its request head.
    pub head: Duration,
    /// Time to resolve a name and connect to it.
    pub connect: Duration,
    /// A connection with no byte either way for this long is closed.
    pub idle: Duration,
}

impl Limits {
    /// The default of [`Limits::open`].
    pub const DEFAULT_OPEN: usize = 64;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            open: Limits::DEFAULT_OPEN,
            listed: 256,
            head: Duration::from_secs(10),
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(120),
        }
    }
}

/// One request, as the result lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestInfo {
    pub host: String,
    pub port: u16,
    /// Whether the policy let it through.
    pub allowed: bool,
    /// Why it was refused or failed; `null` when it was served.
    pub reason: Option<String>,
    /// Bytes the command sent to the host.
    pub sent_bytes: u64,
    /// Bytes the host sent to the command.
    pub received_bytes: u64,
}

/// The result's `network`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkInfo {
    pub requests: Vec<RequestInfo>,
    /// Requests not listed: past the bound, too many open at once, or not
    /// understood as a proxy request.
    pub dropped: u64,
}

/// Where a session listens.
#[derive(Debug)]
pub enum Listener {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

/// The proxy runtime shared by every session of this process.
fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("skill-runner-proxy")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| io::Error::other(format!("cannot start the proxy's runtime: {e}")))
}

/// One request being served.
#[derive(Debug)]
struct Record {
    host: String,
    port: u16,
    /// (allowed, reason)
    outcome: Mutex<(bool, Option<&'static str>)>,
    sent: AtomicU64,
    received: AtomicU64,
}

impl Record {
    fn set(&self, allowed: bool, reason: Option<&'static str>) {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = (allowed, reason);
    }

    fn info(&self) -> RequestInfo {
        let (allowed, reason) = *self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        RequestInfo {
            host: self.host.clone(),
            port: self.port,
            allowed,
            reason: reason.map(str::to_owned),
            sent_bytes: self.sent.load(Ordering::Relaxed),
            received_bytes: self.received.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    listed: Vec<Arc<Record>>,
    dropped: u64,
}

#[derive(Debug)]
struct Shared {
    policy: Policy,
    limits: Limits,
    log: Mutex<Log>,
    open: Arc<Semaphore>,
}

impl Shared {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, host: String, port: u16) -> Arc<Record> {
        let r = Arc::new(Record {
            host,
            port,
            outcome: Mutex::new((false, None)),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
        });
        let mut log = self.log();
        if log.listed.len() < self.limits.listed {
            log.listed.push(r.clone());
        } else {
            log.dropped += 1;
        }
        r
    }

    fn dropped(&self) {
        self.log().dropped += 1;
    }
}

/// The proxy of one execution. Dropping it (or [`Session::finish`]) ends
/// every connection.
#[derive(Debug)]
pub struct Session {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Session {
    /// Starts serving `listener` with `policy`.
    pub fn start(
        listener: Listener,
        policy: Policy,
        limits: Limits,
        execution_id: &str,
    ) -> io::Result<Session> {
        let rt = runtime()?;
        match &listener {
            Listener::Unix(l) => l.set_nonblocking(true)?,
            Listener::Tcp(l) => l.set_nonblocking(true)?,
        }
        let shared = Arc::new(Shared {
            policy,
            limits,
            log: Mutex::new(Log::default()),
            open: Arc::new(Semaphore::new(limits.open)),
        });
        let span = tracing::info_span!("proxy", execution = %execution_id);
        let task = rt.spawn(accept_loop(listener, shared.clone()).instrument(span));
        Ok(Session { shared, task })
    }

    /// Ends every connection and returns what was requested.
    pub fn finish(self) -> NetworkInfo {
        self.task.abort();
        let log = self.shared.log();
        NetworkInfo {
            requests: log.listed.iter().map(|r| r.info()).collect(),
            dropped: log.dropped,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: Listener, shared: Arc<Shared>) {
    // Dropping the set (when this task is aborted) aborts every connection.
    let mut conns = JoinSet::new();
    match listener {
        Listener::Unix(l) => match tokio::net::UnixListener::from_std(l) {
            Ok(l) => {
                admit_all(&mut conns, &shared, || async {
                    l.accept().await.map(|(s, _)| s)
                })
                .await
            }
            Err(e) => tracing::warn!(error = %e, "proxy cannot listen"),
        },
        Listener::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
            Ok(l) => {
                admit_all(&mut conns, &shared, || async {
                    l.accept().await.map(|(s, _)| s)
                })
                .await
            }
            Err(e) => tracing::warn!(error = %e, "proxy cannot listen"),
        },
    }
}

/// Admits every connection `accept` yields, reaping finished ones.
async fn admit_all<S, F, Fut>(conns: &mut JoinSet<()>, shared: &Arc<Shared>, mut accept: F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = io::Result<S>>,
{
    loop {
        tokio::select! {
            r = accept() => match r {
                Ok(s) => admit(conns, shared, s),
                Err(e) => pause(e).await,
            },
            Some(_) = conns.join_next() => {}
        }
    }
}

/// After a failed accept (out of descriptors): wait a little, not spin.
async fn pause(e: io::Error) {
    tracing::debug!(error = %e, "proxy accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn admit<S>(conns: &mut JoinSet<()>, shared: &Arc<Shared>, client: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The runner's cap across all its executions (the daemon's descriptor
    // budget, see `super::ConnectionCap`), then this execution's own.
    let across = match shared.policy.runner.connections.try_take() {
        Ok(permit) => permit,
        Err(max) => {
            let why = format!(
                "the runner already has {max} connections open through the proxy across its executions; retry later"
            );
            return too_many(conns, shared, client, why);
        }
    };
    match shared.open.clone().try_acquire_owned() {
        Ok(permit) => {
            let shared = shared.clone();
            conns.spawn(async move {
                serve(&shared, client).await;
                drop(permit);
                drop(across);
            });
        }
        Err(_) => {
            let open = shared.limits.open;
            let why =
                format!("this execution already has {open} connections open through the proxy");
            too_many(conns, shared, client, why)
        }
    }
}

/// Answers 429 and counts the connection as dropped.
fn too_many<S>(conns: &mut JoinSet<()>, shared: &Arc<Shared>, mut client: S, why: String)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    shared.dropped();
    conns.spawn(async move {
        let answer = http::answer(429, "too_many_connections", &why);
        let _ = timeout(Duration::from_secs(1), client.write_all(&answer)).await;
    });
}

/// Reads until the end of the request head; `Ok(None)` at EOF or when the
/// head is too large.
async fn read_head<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
) -> io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = http::head_end(buf) {
            return Ok(Some(end));
        }
        if buf.len() >= http::MAX_HEAD {
            return Ok(None);
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Why an allowed request could not be connected.
enum Failure {
    Refused(Refusal),
    Resolve(io::Error),
    Connect(io::Error),
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(shared: &Shared, mut client: S) {
    let limits = shared.limits;
    let mut buf = Vec::with_capacity(4096);
    let end = match timeout(limits.head, read_head(&mut client, &mut buf)).await {
        Ok(Ok(Some(end))) => end,
        Ok(Ok(None)) if buf.len() >= http::MAX_HEAD => {
            shared.dropped();
            let msg = format!("the request head is larger than {} bytes", http::MAX_HEAD);
            return reply(&mut client, 400, "bad_request", &msg).await;
        }
        Ok(_) => return shared.dropped(),
        Err(_) => {
            shared.dropped();
            let msg = "the request head did not arrive in time";
            return reply(&mut client, 408, "head_timeout", msg).await;
        }
    };
    let req = match http::parse_request(&buf[..end]) {
        Ok(r) => r,
        Err(e) => {
            shared.dropped();
            return reply(&mut client, 400, "bad_request", &e.to_string()).await;
        }
    };
    let rest = buf.split_off(end);
    let port = req.target.port();
    let host = match Host::parse(req.target.host()) {
        Ok(h) => h,
        Err(e) => {
            let shown: String = req.target.host().chars().take(255).collect();
            let rec = shared.record(shown.to_ascii_lowercase(), port);
            rec.set(false, Some("bad_host"));
            let msg = format!("the host {shown:?} {e}");
            return reply(&mut client, 400, "bad_host", &msg).await;
        }
    };
    let rec = shared.record(host.to_string(), port);
    let decision = match shared.policy.decide(&host, port) {
        Ok(d) => d,
        Err(r) => return refuse(&mut client, &rec, &r, &host, port).await,
    };
    let upstream = match timeout(limits.connect, connect(&shared.policy, decision, port)).await {
        Ok(Ok(s)) => s,
        Ok(Err(Failure::Refused(r))) => return refuse(&mut client, &rec, &r, &host, port).await,
        Ok(Err(Failure::Resolve(e))) => {
            rec.set(true, Some("resolve_failed"));
            let msg = format!("cannot resolve {host}: {e}");
            return reply(&mut client, 502, "resolve_failed", &msg).await;
        }
        Ok(Err(Failure::Connect(e))) => {
            rec.set(true, Some("connect_failed"));
            let msg = format!("cannot connect to {host}:{port}: {e}");
            return reply(&mut client, 502, "connect_failed", &msg).await;
        }
        Err(_) => {
            rec.set(true, Some("connect_timeout"));
            let msg = format!(
                "{host}:{port} could not be resolved and connected within {} s",
                limits.connect.as_secs()
            );
            return reply(&mut client, 504, "connect_timeout", &msg).await;
        }
    };
    rec.set(true, None);
    tracing::debug!(%host, port, "proxy connected");
    let _ = upstream.set_nodelay(true);
    let (mut up_read, mut up_write) = upstream.into_split();
    let first = match &req.target {
        Target::Connect { .. } => {
            if client.write_all(http::CONNECTED).await.is_err() {
                return;
            }
            rest
        }
        Target::Http { .. } => {
            let mut head = http::origin_head(&req);
            head.extend_from_slice(&rest);
            head
        }
    };
    if !first.is_empty() {
        if up_write.write_all(&first).await.is_err() {
            return;
        }
        rec.sent.fetch_add(first.len() as u64, Ordering::Relaxed);
    }
    let (mut c_read, mut c_write) = tokio::io::split(client);
    let activity = Activity::new();
    let to_host = pump(
        &mut c_read,
        &mut up_write,
        &rec.sent,
        &activity,
        limits.idle,
    );
    let to_client = pump(
        &mut up_read,
        &mut c_write,
        &rec.received,
        &activity,
        limits.idle,
    );
    tokio::pin!(to_host, to_client);
    let (mut a, mut b) = (None, None);
    // Each direction ends at its EOF (passed on as a shutdown); an error
    // or an idle timeout in either ends both.
    while a.is_none() || b.is_none() {
        tokio::select! {
            r = &mut to_host, if a.is_none() => a = Some(r),
            r = &mut to_client, if b.is_none() => b = Some(r),
        }
        if let Some(Err(End::Idle)) | Some(Err(End::Error)) = a.or(b) {
            break;
        }
    }
    if matches!(a, Some(Err(End::Idle))) || matches!(b, Some(Err(End::Idle))) {
        rec.set(true, Some("idle_timeout"));
    }
}

async fn refuse<S: AsyncWrite + Unpin>(
    client: &mut S,
    rec: &Record,
    r: &Refusal,
    host: &Host,
    port: u16,
) {
    rec.set(false, Some(r.code()));
    tracing::debug!(%host, port, reason = r.code(), "proxy refused");
    reply(client, 403, r.code(), &r.message(host, port)).await;
}

async fn reply<S: AsyncWrite + Unpin>(client: &mut S, status: u16, reason: &str, message: &str) {
    let answer = http::answer(status, reason, message);
    let _ = timeout(Duration::from_secs(5), async {
        client.write_all(&answer).await?;
        client.shutdown().await
    })
    .await;
}

/// Resolves (when the decision says so), keeps the addresses the policy
/// permits and connects to the first that answers.
async fn connect(policy: &Policy, decision: Decision, port: u16) -> Result<TcpStream, Failure> {
    let addrs: Vec<IpAddr> = match decision {
        Decision::Connect(ip) => vec![ip],
        Decision::Resolve(name) => {
            let resolved = tokio::net::lookup_host((name.as_str(), port))
                .await
                .map_err(Failure::Resolve)?;
            let mut permitted: Vec<IpAddr> = Vec::new();
            let mut refusal = None;
            for addr in resolved {
                let ip = addr.ip().to_canonical();
                match policy.permits_resolved(ip) {
                    Ok(()) if !permitted.contains(&ip) => permitted.push(ip),
                    Ok(()) => {}
                    Err(r) => {
                        refusal.get_or_insert(r);
                    }
                }
            }
            if permitted.is_empty() {
                return Err(match refusal {
                    Some(r) => Failure::Refused(r),
                    None => Failure::Resolve(io::Error::other("no address")),
                });
            }
            permitted
        }
    };
    let mut last = None;
    for ip in addrs {
        // The address just checked, never the name again.
        match TcpStream::connect(SocketAddr::new(ip, port)).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(Failure::Connect(
        last.unwrap_or_else(|| io::Error::other("no address")),
    ))
}

/// The last time a byte moved either way on a connection.
struct Activity {
    base: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    fn touch(&self) {
        self.last_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        self.base
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Idle,
    Error,
}

/// Copies one direction until EOF, counting bytes; `End::Idle` once
/// neither direction moved for `idle`.
async fn pump<R, W>(
    r: &mut R,
    w: &mut W,
    count: &AtomicU64,
    activity: &Activity,
    idle: Duration,
) -> Result<(), End>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match timeout(idle, r.read(&mut buf)).await {
            Ok(Ok(0)) => {
                let _ = w.shutdown().await;
                return Ok(());
            }
            Ok(Ok(n)) => n,
            Ok(Err(_)) => return Err(End::Error),
            Err(_) if activity.idle_for() >= idle => return Err(End::Idle),
            Err(_) => continue,
        };
        activity.touch();
        match timeout(idle, w.write_all(&buf[..n])).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(End::Error),
            Err(_) => return Err(End::Idle),
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::net::policy::{Allowlist, Entry, RunnerNetwork};
    use std::io::{Read, Write};

    fn session(entries: &[&str], private: bool, limits: Limits) -> (Session, SocketAddr) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let policy = Policy {
            job: Allowlist {
                entries: entries.iter().map(|e| Entry::parse(e).unwrap()).collect(),
                private,
            },
            runner: RunnerNetwork::default(),
        };
        (
            Session::start(Listener::Tcp(l), policy, limits, "test").unwrap(),
            addr,
        )
    }

    /// A one-shot origin: answers every connection with `body`.
    fn origin(body: &'static str) -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let mut s = s.unwrap();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while http::head_end(&buf).is_none() {
                    let n = s.read(&mut chunk).unwrap();
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}{}",
                    body.len() + head.lines().next().unwrap_or("").len(),
                    head.lines().next().unwrap_or("")
                );
                let _ = s.write_all(answer.as_bytes());
            }
        });
        port
    }

    fn exchange(proxy: SocketAddr, request: &str) -> String {
        let mut s = std::net::TcpStream::connect(proxy).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn allowed_requests_pass_and_refusals_say_why() {
        let port = origin("hello ");
        let (session, proxy) = session(
            &[&format!("localhost:{port}"), &format!("127.0.0.1:{port}")],
            true,
            Limits::default(),
        );
        let got = exchange(
            proxy,
            &format!("GET http://localhost:{port}/x HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        );
        assert!(got.ends_with("hello GET /x HTTP/1.1"), "{got}");
        let got = exchange(
            proxy,
            &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /t HTTP/1.1\r\n\r\n"),
        );
        assert!(got.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"));
        assert!(got.ends_with("hello GET /t HTTP/1.1"), "{got}");
        let got = exchange(proxy, "CONNECT example.org:443 HTTP/1.1\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{got}");
        assert!(
            got.contains("X-Skill-Runner-Reason: host_not_allowed\r\n"),
            "{got}"
        );
        let got = exchange(proxy, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(got.contains("X-Skill-Runner-Reason: bad_request"), "{got}");
        let info = session.finish();
        assert_eq!(info.dropped, 1, "{info:?}");
        let hosts: Vec<(&str, bool, Option<&str>)> = info
            .requests
            .iter()
            .map(|r| (r.host.as_str(), r.allowed, r.reason.as_deref()))
            .collect();
        assert_eq!(
            hosts,
            [
                ("localhost", true, None),
                ("127.0.0.1", true, None),
                ("example.org", false, Some("host_not_allowed")),
            ]
        );
        assert!(info.requests[0].sent_bytes > 0 && info.requests[0].received_bytes > 0);
        assert!(info.requests[1].received_bytes > 0);
    }

    #[test]
    fn a_name_resolving_to_loopback_needs_private() {
        let port = origin("x");
        let (session, proxy) = session(&[&format!("localhost:{port}")], false, Limits::default());
        let got = exchange(
            proxy,
            &format!("GET http://localhost:{port}/ HTTP/1.1\r\n\r\n"),
        );
        assert!(
            got.contains("X-Skill-Runner-Reason: private_address"),
            "{got}"
        );
        assert_eq!(
            session.finish().requests[0].reason.as_deref(),
            Some("private_address")
        );
    }

    /// Twelve executions of 64 tunnels each filled a daemon's 1024
    /// descriptors: the runner's cap across executions holds before them.
    #[test]
    fn the_cap_across_executions_is_shared_by_their_sessions() {
        let cap = crate::sandbox::net::ConnectionCap::new(1);
        let start = |cap: &crate::sandbox::net::ConnectionCap| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let policy = Policy {
                job: Allowlist {
                    entries: vec![Entry::parse("example.org").unwrap()],
                    private: false,
                },
                runner: RunnerNetwork {
                    connections: cap.clone(),
                    ..RunnerNetwork::default()
                },
            };
            let s = Session::start(Listener::Tcp(l), policy, Limits::default(), "t").unwrap();
            (s, addr)
        };
        // A refused connection may be reset once the answer is sent.
        let exchange = |proxy: SocketAddr, request: &str| {
            let mut s = std::net::TcpStream::connect(proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let _ = s.write_all(request.as_bytes());
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        };
        let (a, a_addr) = start(&cap);
        let (b, b_addr) = start(&cap);
        // One connection of A holds the only permit while its head is
        // incomplete; B's are refused once A's was accepted.
        let mut held = std::net::TcpStream::connect(a_addr).unwrap();
        held.write_all(b"CONNECT ").unwrap();
        let refusal = (0..200)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                exchange(b_addr, "CONNECT other.org:443 HTTP/1.1\r\n\r\n")
            })
            .find(|got| got.starts_with("HTTP/1.1 429"))
            .expect("B was never refused while A held the cap");
        assert!(refusal.contains("across its executions"), "{refusal}");
        drop(held);
        let served = (0..200)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                exchange(b_addr, "CONNECT other.org:443 HTTP/1.1\r\n\r\n")
            })
            .find(|got| !got.starts_with("HTTP/1.1 429"))
            .expect("the permit came back when A's connection closed");
        assert!(served.starts_with("HTTP/1.1 403"), "{served}");
        assert!(b.finish().dropped >= 1);
        drop(a);
    }

    #[test]
    fn requests_past_the_bounds_are_counted_not_listed() {
        let limits = Limits {
            listed: 2,
            ..Limits::default()
        };
        let (session, proxy) = session(&["example.org"], false, limits);
        for _ in 0..5 {
            exchange(proxy, "CONNECT other.org:443 HTTP/1.1\r\n\r\n");
        }
        let info = session.finish();
        assert_eq!(info.requests.len(), 2);
        assert_eq!(info.dropped, 3);
    }
}
