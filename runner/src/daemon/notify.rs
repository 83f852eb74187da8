//! systemd's service notification protocol (`sd_notify`), written by
//! hand: one datagram per state change to the Unix socket named by
//! `NOTIFY_SOCKET` (a path, or an abstract name spelled `@name`).
//!
//! - `READY=1` once the daemon listens (the unit's `Type=notify` waits for
//!   it, so units ordered after ours start only when requests are served);
//! - `WATCHDOG=1` every half of `WATCHDOG_USEC` (set by `WatchdogSec=`)
//!   while the daemon's async runtime is healthy: the pings come from a
//!   task on that runtime that also checks the registry answers, so a
//!   runtime whose workers are all stuck, or a registry lock that never
//!   comes free, stops them and systemd restarts the service;
//! - `STOPPING=1` when a drain begins.
//!
//! Without `NOTIFY_SOCKET` every call does nothing. A send that fails is
//! logged at WARN once and never stops the daemon: notification is a
//! courtesy to the service manager, not a condition of serving.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why a notification could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET {0:?} is neither an absolute path nor an abstract name (@name)")]
    BadAddress(String),
    #[error("cannot send {state:?} to NOTIFY_SOCKET {socket:?}: {source}")]
    Send {
        state: String,
        socket: String,
        source: io::Error,
    },
}

/// Where notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Path(PathBuf),
    /// An abstract socket name, without its leading `@`.
    Abstract(Vec<u8>),
}

impl Target {
    /// Reads `NOTIFY_SOCKET`'s value; `None` when it is empty.
    pub fn parse(value: &str) -> Result<Option<Target>, NotifyError> {
        if value.is_empty() {
            return Ok(None);
        }
        if let Some(name) = value.strip_prefix('@') {
            return Ok(Some(Target::Abstract(name.as_bytes().to_vec())));
        }
        if value.starts_with('/') {
            return Ok(Some(Target::Path(PathBuf::from(value))));
        }
        Err(NotifyError::BadAddress(value.to_owned()))
    }

    fn send(&self, state: &str) -> io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        match self {
            Target::Path(p) => socket.send_to(state.as_bytes(), p).map(|_| ()),
            Target::Abstract(name) => send_abstract(&socket, name, state),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn send_abstract(socket: &UnixDatagram, name: &[u8], state: &str) -> io::Result<()> {
    #[cfg(target_os = "android")]
    use std::os::android::net::SocketAddrExt;
    #[cfg(target_os = "linux")]
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    socket.send_to_addr(state.as_bytes(), &addr).map(|_| ())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn send_abstract(_: &UnixDatagram, _: &[u8], _: &str) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract socket names exist on Linux only",
    ))
}

/// Logged once: later failures are the same failure.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the service
/// manager, if there is one.
pub fn send(state: &str) {
    let Ok(value) = std::env::var("NOTIFY_SOCKET") else {
        return;
    };
    let sent = Target::parse(&value).and_then(|t| match t {
        None => Ok(()),
        Some(t) => t.send(state).map_err(|source| NotifyError::Send {
            state: state.to_owned(),
            socket: value.clone(),
            source,
        }),
    });
    if let Err(e) = sent {
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!("{e}; the service manager is not told of this daemon's state");
        }
    }
}

/// `READY=1`, with a status line saying where the daemon listens.
pub fn ready(listening: &str) {
    send(&format!(
        "READY=1\nSTATUS=listening on {}",
        crate::text::single_line(listening)
    ));
}

/// `STOPPING=1`, when the drain begins.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=draining");
}

/// The watchdog interval systemd asked for: `WATCHDOG_USEC`, when
/// `WATCHDOG_PID` is unset or names this process.
pub fn watchdog_interval() -> Option<Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Pings the watchdog at half its interval for as long as `healthy`
/// answers within the interval. Runs on the daemon's runtime: when that
/// runtime stops scheduling tasks, the pings stop too.
pub async fn watchdog<F, Fut>(interval: Duration, healthy: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let every = interval / 2;
    loop {
        match tokio::time::timeout(interval, healthy()).await {
            Ok(true) => send("WATCHDOG=1"),
            Ok(false) | Err(_) => tracing::error!(
                "the daemon's health check did not answer in {} ms; not pinging the watchdog",
                interval.as_millis()
            ),
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_paths_and_abstract_names_and_refuses_the_rest() {
        assert_eq!(Target::parse("").unwrap(), None);
        assert_eq!(
            Target::parse("/run/systemd/notify").unwrap(),
            Some(Target::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            Target::parse("@sd-notify/1").unwrap(),
            Some(Target::Abstract(b"sd-notify/1".to_vec()))
        );
        assert!(Target::parse("relative/sock").is_err());
    }

    #[test]
    fn sends_one_datagram_per_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        Target::Path(path).send("READY=1\nSTATUS=x").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x");
    }
}
