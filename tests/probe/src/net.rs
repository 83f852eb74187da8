//! Network attempts: open sockets and connect out.
//!
//! - `connect HOST:PORT`: a non-blocking TCP connect to an IP literal, given
//!   [`CONNECT_TIMEOUT`] to finish. Any failure is a denial, the errno says
//!   which: `EPERM` (socket refused by seccomp), `ENETUNREACH` (empty network
//!   namespace), `ECONNREFUSED` (something answered: loopback only, in a
//!   sandbox), `ETIMEDOUT` (no answer in time).
//! - `socket-inet`: `socket()` for every family that reaches outside the
//!   sandbox (TCP and UDP over IPv4 and IPv6, netlink, packet). `DENIED` only
//!   if all of them fail.
//! - `socket-unix`: the positive control. `AF_UNIX` sockets must keep
//!   working, so this prints `OK unix socket` (exit 0) or `FAILED <errno>`
//!   (exit 1), not DENIED/ALLOWED.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    self, sockopt, AddressFamily, SockFlag, SockProtocol, SockType, SockaddrStorage,
};

use crate::verdict::{errno_text, verdict, Attempt, Outcome, Rule, EXIT_ALLOWED, EXIT_OK};

/// How long `connect` waits for the handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// `connect HOST:PORT`.
pub fn connect(addr: SocketAddr) -> Outcome {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let fd = match socket::socket(family, SockType::Stream, flags, None) {
        Ok(fd) => fd,
        Err(errno) => return verdict(&[Attempt::new("socket", Err(errno), Rule::AnyError)]),
    };
    let result = match socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(addr)) {
        Ok(()) => Ok(()),
        Err(Errno::EINPROGRESS) => wait_for_connect(&fd),
        Err(errno) => Err(errno),
    };
    let result = result.map(|()| format!("connected to {addr}"));
    verdict(&[Attempt::new("connect", result, Rule::AnyError)])
}

/// Wait for a non-blocking connect to finish; its result.
fn wait_for_connect(fd: &std::os::fd::OwnedFd) -> Result<(), Errno> {
    let timeout = PollTimeout::try_from(CONNECT_TIMEOUT).map_err(|_| Errno::EINVAL)?;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
    loop {
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => return Err(Errno::ETIMEDOUT),
            Ok(_) => break,
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    match socket::getsockopt(fd, sockopt::SocketError)? {
        0 => Ok(()),
        code => Err(Errno::from_raw(code)),
    }
}

/// The socket kinds `socket-inet` tries, with their labels.
const OUTSIDE_SOCKETS: &[(&str, AddressFamily, SockType, Option<SockProtocol>)] = &[
    ("inet-tcp", AddressFamily::Inet, SockType::Stream, None),
    ("inet-udp", AddressFamily::Inet, SockType::Datagram, None),
    ("inet6-tcp", AddressFamily::Inet6, SockType::Stream, None),
    ("inet6-udp", AddressFamily::Inet6, SockType::Datagram, None),
    (
        "netlink",
        AddressFamily::Netlink,
        SockType::Raw,
        Some(SockProtocol::NetlinkRoute),
    ),
    (
        "packet",
        AddressFamily::Packet,
        SockType::Raw,
        Some(SockProtocol::EthAll),
    ),
];

/// `socket-inet`.
pub fn socket_inet() -> Outcome {
    let attempts: Vec<Attempt> = OUTSIDE_SOCKETS
        .iter()
        .map(|(label, family, kind, protocol)| {
            let result = socket::socket(*family, *kind, SockFlag::SOCK_CLOEXEC, *protocol)
                .map(|_fd| String::new());
            Attempt::new(*label, result, Rule::AnyError)
        })
        .collect();
    verdict(&attempts)
}

/// `socket-unix`: `OK unix socket` or `FAILED <errno>`.
pub fn socket_unix() -> Outcome {
    match socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) {
        Ok(_fd) => Outcome::line("OK unix socket", EXIT_OK),
        Err(errno) => Outcome::line(format!("FAILED {}", errno_text(errno)), EXIT_ALLOWED),
    }
}
