//! Listening, connections and shutdown.
//!
//! The socket: `<dir>/<name>` with the folder private to this user (0700,
//! created so when missing, refused when looser) and the socket 0600. A
//! `<name>.lock` file held for the daemon's lifetime makes a second daemon
//! on the same socket fail at start; with it held, a leftover socket file
//! is stale by construction and is replaced. The socket is removed when
//! the daemon stops.
//!
//! Connections: HTTP/1.1 served by hyper, at most `max_connections` open
//! (the accept loop waits for a free place, so the kernel's backlog queues
//! the rest), each with a header read timeout that also bounds idle
//! keep-alive connections. On TCP with a token, a connection that has not
//! yet made a request with the valid token is *unproven*: when every place
//! is taken, the oldest unproven connection is closed to make room, so
//! clients without the token cannot starve those with it by holding
//! connections open. Otherwise (the Unix socket, TCP without a token, or
//! every unproven connection already busy) the oldest *idle* connection
//! is closed: one with no request in flight and no response being sent
//! (a keep-alive connection between requests, or one that has not sent
//! its headers), so idle connections cannot stall requests until the
//! header timeout either.
//!
//! Shutdown on SIGTERM or SIGINT (or SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM:
//! no catchable signal ends the daemon without a log line and a drain;
//! SIGHUP is logged and ignored): refuse new executions (503 with
//! `Retry-After`) while still accepting connections, so results, events
//! and health (503 `draining`) are answered; let running ones finish for
//! the grace period, then cancel the rest and wait for their sandboxes to
//! be gone (each runner removes its per-execution folder, each result is
//! recorded); then stop accepting, commit the store, let responses in
//! flight complete and remove the socket.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::app::App;
use super::config::Listen;
use super::routes;
use crate::fsx::{self, LockFile};

/// After the grace period, how long cancelled executions get to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(30);
/// How long responses in flight get once every execution has ended.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Why the daemon could not listen or serve.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("the socket folder {path} {reason}; chmod 700 it, or pick another --socket")]
    SocketDir { path: PathBuf, reason: String },
    #[error("cannot prepare the socket folder {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("another skill-runner daemon is serving {0}; stop it, or pick another --socket")]
    SocketInUse(PathBuf),
    #[error("{0} exists and is not a socket; remove it, or pick another --socket")]
    NotASocket(PathBuf),
    #[error("cannot listen on {address}: {source}")]
    Bind { address: String, source: io::Error },
    #[error("cannot install the signal handlers: {0}")]
    Signals(io::Error),
}

/// The socket file; removed on drop.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    _lock: LockFile,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Listener {
    /// Where we listen, for people.
    pub fn describe(&self) -> String {
        match self {
            Listener::Unix(l) => match l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(Path::to_path_buf))
            {
                Some(p) => format!("unix:{}", p.display()),
                None => "unix socket".into(),
            },
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("http://{a}"),
                Err(_) => "tcp".into(),
            },
        }
    }

    async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
        }
    }
}

/// Binds the listener; for a Unix socket, also returns the socket file,
/// which removes the socket when dropped. Call inside the runtime.
pub fn bind(listen: &Listen) -> Result<(Listener, Option<SocketFile>), ServerError> {
    match listen {
        Listen::Tcp(addr) => {
            let bind_err = |source| ServerError::Bind {
                address: addr.to_string(),
                source,
            };
            let l = std::net::TcpListener::bind(addr).map_err(bind_err)?;
            l.set_nonblocking(true).map_err(bind_err)?;
            Ok((
                Listener::Tcp(TcpListener::from_std(l).map_err(bind_err)?),
                None,
            ))
        }
        Listen::Unix(path) => {
            let lock = prepare_socket(path)?;
            let bind_err = |source| ServerError::Bind {
                address: format!("unix:{}", path.display()),
                source,
            };
            let l = std::os::unix::net::UnixListener::bind(path).map_err(bind_err)?;
            let file = SocketFile {
                path: path.clone(),
                _lock: lock,
            };
            // The folder is 0700, so nobody else could reach the socket
            // between bind and this chmod.
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(bind_err)?;
            l.set_nonblocking(true).map_err(bind_err)?;
            Ok((
                Listener::Unix(UnixListener::from_std(l).map_err(bind_err)?),
                Some(file),
            ))
        }
    }
}

/// Makes the socket's folder private, takes the lock, removes a stale
/// socket.
fn prepare_socket(path: &Path) -> Result<LockFile, ServerError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if !dir.exists() {
        fsx::create_private_dir(dir).map_err(|source| ServerError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    let meta = std::fs::metadata(dir).map_err(|source| ServerError::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    let reason = if !meta.is_dir() {
        Some("is not a folder".to_owned())
    } else if meta.uid() != me {
        Some(format!(
            "belongs to uid {}, not to this user (uid {me})",
            meta.uid()
        ))
    } else if meta.mode() & 0o077 != 0 {
        Some(format!(
            "has mode {:04o}; the socket's folder must be private (0700)",
            meta.mode() & 0o7777
        ))
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(ServerError::SocketDir {
            path: dir.to_owned(),
            reason,
        });
    }
    let lock = match LockFile::acquire(&dir.join(format!("{name}.lock"))) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            return Err(ServerError::SocketInUse(path.to_owned()))
        }
        Err(source) => {
            return Err(ServerError::CreateDir {
                path: dir.to_owned(),
                source,
            })
        }
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            tracing::info!(path = %path.display(), "replacing a stale socket");
            std::fs::remove_file(path).map_err(|source| ServerError::Bind {
                address: format!("unix:{}", path.display()),
                source,
            })?;
        }
        Ok(_) => return Err(ServerError::NotASocket(path.to_owned())),
        Err(_) => {}
    }
    Ok(lock)
}

/// Serves until a stopping signal, then shuts down gracefully.
pub async fn run(listener: Listener, app: App) -> Result<(), ServerError> {
    let mut stop = pin!(stop_signal()?);

    let router = routes::router(app.clone());
    let graceful = GracefulShutdown::new();
    let places = Arc::new(Semaphore::new(app.config.max_connections));
    let unproven = Arc::new(Unproven::default());
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(app.config.header_timeout)
        .keep_alive(true);
    let conns = Connections {
        http,
        router,
        graceful,
        app: app.clone(),
        unproven: unproven.clone(),
    };
    tracing::info!("listening on {}", listener.describe());
    super::notify::ready(&listener.describe());
    // The code only the start ran need not stay resident.
    crate::supervise::sys::release_program_pages();

    let signal = conns.serve_until(&listener, &places, stop.as_mut()).await;
    // Draining: the listener stays open, so results, events and health
    // (503 `draining`) are still answered while new executions get 503.
    super::notify::stopping();
    let drain = pin!(shutdown(&app, signal));
    conns.serve_until(&listener, &places, drain).await;
    drop(listener);
    let registry = app.registry.clone();
    if tokio::task::spawn_blocking(move || registry.close_store())
        .await
        .is_err()
    {
        tracing::error!("could not close the execution store");
    }
    if tokio::time::timeout(FLUSH_WAIT, conns.graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not close in time");
    }
    Ok(())
}

/// Resolves to the name of the first stopping signal: every catchable
/// one whose default would end the process without a word (SIGTERM,
/// SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM) drains first. SIGHUP (a
/// closed terminal, or a reload by habit) is logged and ignored: nothing
/// the daemon holds is reloadable without a restart.
fn stop_signal() -> Result<impl std::future::Future<Output = &'static str>, ServerError> {
    let on = |kind| signal(kind).map_err(ServerError::Signals);
    let mut hup = on(SignalKind::hangup())?;
    let mut term = on(SignalKind::terminate())?;
    let mut int = on(SignalKind::interrupt())?;
    let mut quit = on(SignalKind::quit())?;
    let mut usr1 = on(SignalKind::user_defined1())?;
    let mut usr2 = on(SignalKind::user_defined2())?;
    let mut alrm = on(SignalKind::alarm())?;
    Ok(async move {
        loop {
            tokio::select! {
                _ = term.recv() => return "SIGTERM",
                _ = int.recv() => return "SIGINT",
                _ = quit.recv() => return "SIGQUIT",
                _ = usr1.recv() => return "SIGUSR1",
                _ = usr2.recv() => return "SIGUSR2",
                _ = alrm.recv() => return "SIGALRM",
                _ = hup.recv() => tracing::info!(
                    signal = "SIGHUP",
                    "ignored SIGHUP: nothing is reloaded; restart the daemon to change its settings"
                ),
            }
        }
    })
}

/// What every connection needs.
struct Connections {
    http: http1::Builder,
    router: axum::Router,
    graceful: GracefulShutdown,
    app: App,
    unproven: Arc<Unproven>,
}

/// One open connection as the accept loop sees it.
struct Open {
    task: tokio::task::AbortHandle,
    /// Set by its first request with the valid token; `None` when the
    /// connection need not prove anything.
    proven: Option<Arc<AtomicBool>>,
    /// Requests in flight, responses being sent included.
    busy: Arc<AtomicUsize>,
}

/// Every open connection by age: unproven ones (TCP with a token) and
/// idle ones are closed, oldest first, when every place is taken.
#[derive(Default)]
struct Unproven {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Open>>,
}

impl Unproven {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the oldest connection still unproven, or else the oldest
    /// idle one.
    fn close_oldest(&self) {
        let mut open = self.lock();
        let unproven = open
            .iter()
            .find(|(_, o)| {
                o.proven
                    .as_ref()
                    .is_some_and(|p| !p.load(Ordering::Relaxed))
            })
            .map(|(id, _)| *id);
        let victim = unproven.or_else(|| {
            open.iter()
                .find(|(_, o)| o.busy.load(Ordering::SeqCst) == 0)
                .map(|(id, _)| *id)
        });
        if let Some(o) = victim.and_then(|id| open.remove(&id)) {
            tracing::debug!(
                unproven = unproven.is_some(),
                "closed an idle connection to make room"
            );
            o.task.abort();
        }
    }
}

/// Counts a request (and its response body) in flight on its connection.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(busy: &Arc<AtomicUsize>) -> InFlight {
        busy.fetch_add(1, Ordering::SeqCst);
        InFlight(busy.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its connection busy until it is sent (or
/// dropped); its size (so its `Content-Length`) is the inner body's.
struct Tracked {
    inner: axum::body::Body,
    _held: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Held by a connection's task: frees its place and counts it closed
/// however the task ends (aborted included).
struct Held {
    _place: OwnedSemaphorePermit,
    metrics: Arc<super::metrics::Metrics>,
    open: (Arc<Unproven>, u64),
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.connection_closed();
        let (open, id) = &self.open;
        open.lock().remove(id);
    }
}

impl Connections {
    /// Accepts and serves connections until `until` resolves; its output.
    async fn serve_until<T>(
        &self,
        listener: &Listener,
        places: &Arc<Semaphore>,
        mut until: std::pin::Pin<&mut impl std::future::Future<Output = T>>,
    ) -> T {
        loop {
            // Full: close the oldest connection that never showed the token.
            if places.available_permits() == 0 {
                self.unproven.close_oldest();
            }
            let place = tokio::select! {
                p = places.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return until.await,
                },
                s = &mut until => return s,
            };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                s = &mut until => return s,
            };
            match accepted {
                Ok(Stream::Unix(s)) => self.spawn(s, place, false),
                Ok(Stream::Tcp(s)) => {
                    let prove = self.app.config.token.is_some();
                    self.spawn(s, place, prove)
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Serves one connection; `prove`: it is unproven until a request
    /// carries the valid token.
    fn spawn<I>(&self, io: I, place: OwnedSemaphorePermit, prove: bool)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let proven = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicUsize::new(0));
        let token = match (&self.app.config.token, prove) {
            (Some(token), true) => Some((token.clone(), proven.clone())),
            _ => None,
        };
        let in_flight = busy.clone();
        let connection = super::app::Connection::default();
        let this_connection = connection.clone();
        let router = self.router.clone().layer(axum::middleware::from_fn(
            move |mut req: axum::extract::Request, next: axum::middleware::Next| {
                req.extensions_mut().insert(this_connection.clone());
                if let Some((token, proven)) = &token {
                    let auth = req.headers().get(hyper::header::AUTHORIZATION);
                    if token.verify(auth.map(|v| v.as_bytes())) {
                        proven.store(true, Ordering::Relaxed);
                    }
                }
                let held = InFlight::new(&in_flight);
                async move {
                    let resp = next.run(req).await;
                    // Busy until its response body has been sent.
                    resp.map(|inner| axum::body::Body::new(Tracked { inner, _held: held }))
                }
            },
        ));
        let conn = self
            .http
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
        let conn = self.graceful.watch(conn);
        let metrics = self.app.metrics.clone();
        metrics.connection_opened();
        let id = self.unproven.next.fetch_add(1, Ordering::Relaxed);
        let held = Held {
            _place: place,
            metrics,
            open: (self.unproven.clone(), id),
        };
        // Held across the spawn: the task's end (which removes its entry)
        // waits for the entry to be in.
        let mut open = self.unproven.lock();
        let task = tokio::spawn(async move {
            let _held = held;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
        connection.bind(task.abort_handle());
        if !task.is_finished() {
            open.insert(
                id,
                Open {
                    task: task.abort_handle(),
                    proven: prove.then_some(proven),
                    busy,
                },
            );
        }
    }
}

/// Drains executions: refuse new ones, wait the grace period, cancel the
/// rest and wait for them to stop (each records its result).
async fn shutdown(app: &App, signal: &str) {
    app.registry.start_draining();
    // No new command will take a prepared sandbox.
    #[cfg(target_os = "linux")]
    {
        let pool = app.prepared.clone();
        tokio::task::spawn_blocking(move || pool.close());
    }
    let (running, queued) = app.registry.counts();
    tracing::info!(
        signal,
        running,
        queued,
        grace_ms = app.config.grace.as_millis() as u64,
        "shutting down: refusing new executions, letting running ones finish, still answering reads"
    );
    if tokio::time::timeout(app.config.grace, app.registry.idle())
        .await
        .is_err()
    {
        let n = app.registry.cancel_all();
        tracing::warn!(
            cancelled = n,
            "grace period over: cancelled the remaining executions"
        );
        if tokio::time::timeout(CANCEL_WAIT, app.registry.idle())
            .await
            .is_err()
        {
            tracing::error!("executions still running after cancellation; exiting anyway");
        }
    }
}
