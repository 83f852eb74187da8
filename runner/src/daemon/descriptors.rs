//! The daemon's file descriptors: how many it may open, and what its
//! settings need.
//!
//! At start the daemon raises its soft `RLIMIT_NOFILE` to the hard limit
//! ([`raise`]), then sizes what it admits from that limit ([`Budget::fit`]):
//!
//! ```text
//! need = RESERVE
//!      + max_connections                      (one per client connection)
//!      + (max_running + max_queued) × PER_SLOT (an admitted execution's switch)
//!      + max_running × PER_EXECUTION          (a running sandbox's own)
//!      + prepared × PER_PREPARED              (sandboxes prepared ahead)
//!      + max_proxy_connections × 2            (client and upstream of a tunnel)
//! ```
//!
//! `max_proxy_connections` caps proxy connections across every execution
//! (each execution also has its own cap, [`PER_EXECUTION_PROXY`]); unset,
//! it is what the limit leaves, at most `max_running ×`
//! [`PER_EXECUTION_PROXY`]. A configuration whose fixed part does not fit,
//! or leaves fewer than one execution's proxy connections, is refused at
//! start with a sentence naming the settings and the limit: the daemon
//! never finds out at run time, in another tenant's admission, that it is
//! out of descriptors.

use crate::sandbox::net::proxy;

/// Descriptors kept for the daemon itself: runtime, listener, logs, data
/// dir, locks, the selfcheck, uploads, sessions.
pub const RESERVE: u64 = 128;
/// Descriptors of one admitted execution before it runs (its cancellation
/// switch, a pipe).
pub const PER_SLOT: u64 = 2;
/// Descriptors of one running execution besides its proxy connections:
/// the sandbox's pipes, pidfd, folders, memfds, cgroup files, disk watcher
/// and proxy listener (measured, with headroom: docs/daemon.md).
pub const PER_EXECUTION: u64 = 48;
/// Descriptors a prepared sandbox holds in the daemon while it waits
/// (its pidfd, six pipe ends, the published root's lease and, with an
/// environment, the environment's; without a cgroup, its execution
/// name's lock; without pidfds, a waiter's pipe end; docs/prepared.md),
/// with one to spare.
pub const PER_PREPARED: u64 = 12;
/// The per-execution cap on proxy connections.
pub const PER_EXECUTION_PROXY: u64 = proxy::Limits::DEFAULT_OPEN as u64;

/// Why the settings cannot fit the descriptor limit.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    #[error("the daemon may open {limit} file descriptors (RLIMIT_NOFILE), but max_running {max_running}, max_queued {max_queued} and max_connections {max_connections} need {need} before any proxy connection, and {one} more for one execution's {PER_EXECUTION_PROXY} proxy connections; lower those settings, or raise the limit (LimitNOFILE= in the systemd unit, ulimit -n, docker run --ulimit nofile=N)")]
    TooFew {
        limit: u64,
        need: u64,
        one: u64,
        max_running: usize,
        max_queued: usize,
        max_connections: usize,
    },
    #[error("the daemon may open {limit} file descriptors (RLIMIT_NOFILE), but max_proxy_connections {asked} needs {need} with the other settings; lower max_proxy_connections to at most {fits}, or raise the limit (LimitNOFILE= in the systemd unit, ulimit -n)")]
    ProxyTooMany {
        limit: u64,
        asked: usize,
        need: u64,
        fits: u64,
    },
}

/// What the limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft `RLIMIT_NOFILE` in effect.
    pub limit: u64,
    /// Proxy connections open at once across executions.
    pub proxy_connections: usize,
}

/// The settings the budget depends on.
#[derive(Debug, Clone, Copy)]
pub struct Demand {
    pub max_running: usize,
    pub max_queued: usize,
    pub max_connections: usize,
    /// `None`: what the limit leaves.
    pub max_proxy_connections: Option<usize>,
    /// Sandboxes the daemon may keep prepared (0 with them off).
    pub prepared: usize,
}

impl Budget {
    /// Sizes the proxy cap from `limit`, or refuses the settings.
    pub fn fit(demand: Demand, limit: u64) -> Result<Budget, DescriptorError> {
        let d = demand;
        let fixed = RESERVE
            + d.max_connections as u64
            + (d.max_running + d.max_queued) as u64 * PER_SLOT
            + d.max_running as u64 * PER_EXECUTION
            + d.prepared as u64 * PER_PREPARED;
        let one = 2 * PER_EXECUTION_PROXY;
        if fixed + one > limit {
            return Err(DescriptorError::TooFew {
                limit,
                need: fixed,
                one,
                max_running: d.max_running,
                max_queued: d.max_queued,
                max_connections: d.max_connections,
            });
        }
        let fits = (limit - fixed) / 2;
        let proxy_connections = match d.max_proxy_connections {
            Some(asked) if asked as u64 > fits => {
                return Err(DescriptorError::ProxyTooMany {
                    limit,
                    asked,
                    need: fixed + 2 * asked as u64,
                    fits,
                })
            }
            Some(asked) => asked,
            None => fits.min(d.max_running as u64 * PER_EXECUTION_PROXY) as usize,
        };
        Ok(Budget {
            limit,
            proxy_connections,
        })
    }
}

/// The soft `RLIMIT_NOFILE` now in effect.
pub fn current() -> u64 {
    use nix::sys::resource::{getrlimit, Resource};
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft
/// limit in effect after (the old one when raising failed).
pub fn raise() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return current();
    };
    if hard > soft {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!(
                soft,
                hard,
                "cannot raise the descriptor limit to the hard limit: {e}"
            );
        }
    }
    current()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(running: usize, queued: usize, conns: usize, proxy: Option<usize>) -> Demand {
        Demand {
            prepared: 0,
            max_running: running,
            max_queued: queued,
            max_connections: conns,
            max_proxy_connections: proxy,
        }
    }

    #[test]
    fn the_proxy_cap_is_what_the_limit_leaves_at_most_every_execution_full() {
        // Plenty: every running execution may fill its own cap.
        let b = Budget::fit(demand(4, 64, 256, None), 1 << 20).unwrap();
        assert_eq!(b.proxy_connections, 4 * 64);
        // At 1024 (a systemd service without LimitNOFILE): what is left.
        let fixed = RESERVE + 256 + 68 * PER_SLOT + 4 * PER_EXECUTION;
        let b = Budget::fit(demand(4, 64, 256, None), 1024).unwrap();
        assert_eq!(b.proxy_connections as u64, (1024 - fixed) / 2);
        // Every proxy connection and everything else fits the limit.
        assert!(fixed + 2 * b.proxy_connections as u64 <= 1024);
    }

    #[test]
    fn settings_that_cannot_fit_are_refused_naming_them_and_the_limit() {
        let e = Budget::fit(demand(16, 64, 256, None), 1024).unwrap_err();
        let m = e.to_string();
        for part in [
            "1024",
            "max_running 16",
            "max_queued 64",
            "max_connections 256",
            "LimitNOFILE",
        ] {
            assert!(m.contains(part), "{part}: {m}");
        }
        let e = Budget::fit(demand(4, 64, 256, Some(10_000)), 4096).unwrap_err();
        assert!(matches!(e, DescriptorError::ProxyTooMany { .. }), "{e}");
        assert!(e.to_string().contains("max_proxy_connections 10000"), "{e}");
        let ok = Budget::fit(demand(4, 64, 256, Some(100)), 4096).unwrap();
        assert_eq!(ok.proxy_connections, 100);
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        use nix::sys::resource::{getrlimit, Resource};
        let now = raise();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!((now, soft), (hard, hard));
    }
}
