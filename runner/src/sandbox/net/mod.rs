//! A job's network: none (the default), or an allowlist served through the
//! runner's proxy (docs/sandbox.md, "Network").
//!
//! | module | concept |
//! |---|---|
//! | [`policy`] | allow entries, address classes, decisions (pure) |
//! | [`http`] | the proxy's request heads and answers (pure) |
//! | [`proxy`] | the runner's proxy, one session per execution |
//! | [`forward`] | the sandbox's forwarder (Linux), started by the exec shim |
//!
//! With an allowlist the sandbox still has its own network namespace with
//! only loopback. The four proxy variables point at the forwarder on
//! [`FORWARDER_ADDR`] inside it, which relays each connection over the Unix
//! socket [`SANDBOX_SOCKET`] to the runner's proxy outside. That socket
//! lives in the execution's private folder (`<execution>/net/proxy.sock`),
//! the only socket of the runner's bound into that sandbox; the folder
//! reaches bubblewrap as a descriptor ([`crate::sandbox::bwrap::FD_NET`]).

#[cfg(target_os = "linux")]
pub mod forward;
pub mod http;
pub mod policy;
pub mod proxy;

use std::io;
use std::path::{Path, PathBuf};

pub use policy::{Allowlist, Policy, RunnerNetwork};
pub use proxy::{NetworkInfo, RequestInfo};

/// Where the forwarder listens inside the sandbox.
pub const FORWARDER_ADDR: &str = "127.0.0.1:3128";
/// The value of the proxy variables on Linux.
pub const PROXY_URL: &str = "http://127.0.0.1:3128";
/// The folder holding the runner's socket, inside the sandbox.
pub const SANDBOX_SOCKET_DIR: &str = "/run/skill-runner";
/// The runner's socket, inside the sandbox.
pub const SANDBOX_SOCKET: &str = "/run/skill-runner/proxy.sock";
/// The socket's name in the execution's `net` folder.
pub const SOCKET_NAME: &str = "proxy.sock";
/// The variables that point clients at the proxy (both spellings: curl
/// reads only the lower-case `http_proxy`, other tools only upper case).
pub const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];

/// A cap on proxy connections across every execution of a runner process
/// (the daemon's, sized from its descriptor limit, see
/// `crate::daemon::descriptors`): each connection holds one permit besides
/// one of its execution's own, so no number of executions can take every
/// descriptor. The default has none (a `run` serves one execution, bounded
/// by its own cap). Clones share the permits.
///
/// Each execution's own cap is then its share of the whole, so the first
/// executions of a busy daemon cannot take every permit from the later
/// ones (see [`ConnectionCap::shared`]).
#[derive(Debug, Clone, Default)]
pub struct ConnectionCap(Option<(std::sync::Arc<tokio::sync::Semaphore>, usize, usize)>);

impl ConnectionCap {
    /// A cap of `max` connections open at once, each execution's own cap
    /// left at the proxy's default.
    pub fn new(max: usize) -> ConnectionCap {
        ConnectionCap::shared(max, 1)
    }

    /// A cap of `max` connections across `executions` running at once:
    /// each execution may hold its share, `max / executions` (at least
    /// one, at most the proxy's default), so every running execution can
    /// always open some.
    pub fn shared(max: usize, executions: usize) -> ConnectionCap {
        let share = (max / executions.max(1)).clamp(1, proxy::Limits::DEFAULT_OPEN);
        ConnectionCap(Some((
            std::sync::Arc::new(tokio::sync::Semaphore::new(max)),
            max,
            share,
        )))
    }

    /// How many connections one execution may hold at once.
    pub fn per_execution(&self) -> usize {
        self.0
            .as_ref()
            .map_or(proxy::Limits::DEFAULT_OPEN, |(_, _, share)| *share)
    }

    /// The cap, if any.
    pub fn max(&self) -> Option<usize> {
        self.0.as_ref().map(|(_, max, _)| *max)
    }

    /// A permit held while a connection is open: `Ok(None)` without a cap,
    /// `Err(max)` when every permit is taken.
    pub fn try_take(&self) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, usize> {
        match &self.0 {
            None => Ok(None),
            Some((sem, max, _)) => sem.clone().try_acquire_owned().map(Some).map_err(|_| *max),
        }
    }
}

/// Two caps are equal when they are one (share their permits), or both none.
impl PartialEq for ConnectionCap {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some((a, ..)), Some((b, ..))) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for ConnectionCap {}

/// A job's network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// An empty network namespace; sockets other than `AF_UNIX` refused.
    #[default]
    None,
    /// Loopback only, and the proxy with this allowlist.
    Allow(Allowlist),
}

impl Network {
    /// The sandbox's socket rules for this network (see
    /// [`crate::sandbox::seccomp`]).
    pub fn mode(&self) -> crate::sandbox::profile::Network {
        match self {
            Network::None => crate::sandbox::profile::Network::None,
            Network::Allow(_) => crate::sandbox::profile::Network::Proxy,
        }
    }

    pub fn allowlist(&self) -> Option<&Allowlist> {
        match self {
            Network::None => None,
            Network::Allow(a) => Some(a),
        }
    }
}

/// The proxy variables, all set to `url`.
pub fn proxy_environment(url: &str) -> Vec<(String, String)> {
    PROXY_VARS
        .iter()
        .map(|k| ((*k).to_owned(), url.to_owned()))
        .collect()
}

/// One line per entry, for `explain`.
pub fn describe(a: &Allowlist) -> String {
    let entries: Vec<String> = a.entries.iter().map(|e| e.to_string()).collect();
    format!(
        "allow {} (ports 80 and 443 where none is given); private addresses {}",
        entries.join(", "),
        if a.private {
            "allowed (\"private\": true)"
        } else {
            "refused unless named as an IP or block"
        }
    )
}

/// Where an execution's command reaches the runner's proxy.
///
/// Linux: the folder `<execution>/net`, holding the proxy's socket, given
/// to the sandbox user (bubblewrap binds it as that user) and opened for
/// bubblewrap to bind at [`SANDBOX_SOCKET_DIR`]. macOS (no network
/// namespace): a loopback TCP port of the runner's, the only one the
/// Seatbelt profile lets the command connect to.
#[derive(Debug)]
pub struct Endpoint {
    /// Linux: the folder and its descriptor, opened without following
    /// symlinks.
    pub dir: Option<(PathBuf, std::fs::File)>,
    /// macOS: the proxy's loopback port.
    pub port: Option<u16>,
    listener: Option<proxy::Listener>,
}

impl Endpoint {
    /// Creates the execution's endpoint in `exec_dir`; `owner` is the
    /// sandbox user of a root runner: it gets the folder and the socket,
    /// and its group may pass through `exec_dir`.
    #[cfg(not(target_os = "macos"))]
    pub fn create(exec_dir: &Path, owner: Option<(u32, u32)>) -> io::Result<Endpoint> {
        use std::os::fd::{AsFd, AsRawFd};
        let path = exec_dir.join("net");
        std::fs::create_dir(&path)?;
        crate::fsx::chmod(&path, 0o700)?;
        let dir = crate::fsx::open_dir_no_symlinks(&path)?;
        // Through the descriptor: a data dir path may be longer than a
        // socket address holds (108 bytes).
        let short = format!("/proc/self/fd/{}/{SOCKET_NAME}", dir.as_raw_fd());
        let listener = std::os::unix::net::UnixListener::bind(&short)?;
        let socket = path.join(SOCKET_NAME);
        // The socket is set up by path while the folder is still the
        // runner's own (0700): nothing of the sandbox user's can be swapped
        // in for it. Only then is the folder given away, through its
        // descriptor.
        crate::fsx::chmod(&socket, 0o600)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&socket, Some(uid), Some(gid))?;
            std::os::unix::fs::chown(exec_dir, None, Some(gid))?;
            crate::fsx::chmod(exec_dir, 0o710)?;
            nix::unistd::fchown(
                dir.as_fd(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(io::Error::from)?;
        }
        Ok(Endpoint {
            dir: Some((path, dir)),
            port: None,
            listener: Some(proxy::Listener::Unix(listener)),
        })
    }

    /// Creates the execution's endpoint: a loopback port.
    #[cfg(target_os = "macos")]
    pub fn create(_exec_dir: &Path, _owner: Option<(u32, u32)>) -> io::Result<Endpoint> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        Ok(Endpoint {
            dir: None,
            port: Some(listener.local_addr()?.port()),
            listener: Some(proxy::Listener::Tcp(listener)),
        })
    }

    /// What the proxy variables hold inside the sandbox.
    pub fn proxy_url(&self) -> String {
        match self.port {
            Some(port) => format!("http://127.0.0.1:{port}"),
            None => PROXY_URL.to_owned(),
        }
    }

    /// Starts the proxy on this endpoint (once).
    pub fn start(&mut self, policy: Policy, execution_id: &str) -> io::Result<proxy::Session> {
        let listener = self
            .listener
            .take()
            .ok_or_else(|| io::Error::other("the proxy was already started"))?;
        let limits = proxy::Limits {
            open: policy.runner.connections.per_execution(),
            ..proxy::Limits::default()
        };
        proxy::Session::start(listener, policy, limits, execution_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With 156 connections across 8 running executions, the first two
    /// took 64 each and the third 28: later executions got none. Each now
    /// holds at most its share.
    #[test]
    fn each_execution_holds_at_most_its_share_of_the_daemons_connections() {
        assert_eq!(ConnectionCap::shared(156, 8).per_execution(), 19);
        assert_eq!(ConnectionCap::shared(10_000, 8).per_execution(), 64);
        assert_eq!(ConnectionCap::shared(3, 8).per_execution(), 1);
        assert_eq!(ConnectionCap::new(100).per_execution(), 64);
        assert_eq!(ConnectionCap::default().per_execution(), 64);
        let cap = ConnectionCap::shared(156, 8);
        assert!(cap.per_execution() * 8 <= cap.max().unwrap());
    }
}
