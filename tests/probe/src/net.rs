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
//! - `socket-outside`: what a network allowlist still refuses (UDP and raw
//!   sockets over IPv4 and IPv6, netlink, packet). `DENIED` only if all of
//!   them fail.
//! - `proxy-get URL` and `proxy-connect AUTHORITY PATH` (reports): one
//!   request through the proxy `$http_proxy` names, as an absolute-form
//!   `GET URL`, or as `CONNECT AUTHORITY` and then `GET PATH` inside the
//!   tunnel. Prints `HTTP <status> <X-Skill-Runner-Reason or -> <the
//!   body's last line or ->` (for a tunnel that opened, the status and body
//!   of the response inside it), or `FAILED <error>` (exit 1) when no
//!   answer came.

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

/// The sockets `socket-outside` tries.
const ALWAYS_REFUSED: &[(&str, AddressFamily, SockType, Option<SockProtocol>)] = &[
    ("inet-udp", AddressFamily::Inet, SockType::Datagram, None),
    ("inet6-udp", AddressFamily::Inet6, SockType::Datagram, None),
    (
        "inet-raw",
        AddressFamily::Inet,
        SockType::Raw,
        Some(SockProtocol::Icmp),
    ),
    (
        "inet6-raw",
        AddressFamily::Inet6,
        SockType::Raw,
        Some(SockProtocol::IcmpV6),
    ),
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

/// `socket-outside`.
pub fn socket_outside() -> Outcome {
    let attempts: Vec<Attempt> = ALWAYS_REFUSED
        .iter()
        .map(|(label, family, kind, protocol)| {
            let result = socket::socket(*family, *kind, SockFlag::SOCK_CLOEXEC, *protocol)
                .map(|_fd| String::new());
            Attempt::new(*label, result, Rule::AnyError)
        })
        .collect();
    verdict(&attempts)
}

/// The proxy's address from `$http_proxy` (`http://HOST:PORT[/]`).
fn proxy_addr() -> Result<SocketAddr, String> {
    let v = std::env::var("http_proxy").map_err(|_| "http_proxy is not set".to_owned())?;
    let hostport = v
        .strip_prefix("http://")
        .unwrap_or(&v)
        .trim_end_matches('/');
    hostport
        .parse()
        .map_err(|_| format!("http_proxy {v:?} is not http://IP:PORT"))
}

/// Reads a whole HTTP/1.x response (until the peer closes) and summarizes
/// it as `HTTP <status> <reason> <last body line>`.
fn summarize(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split(' ').nth(1)?.to_owned();
    let reason = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-skill-runner-reason")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| "-".to_owned());
    let last = body
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("-")
        .trim()
        .to_owned();
    Some(format!("HTTP {status} {reason} {last}"))
}

fn exchange(stream: &mut std::net::TcpStream, request: &str) -> Result<Vec<u8>, String> {
    use std::io::{Read, Write};
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    stream
        .read_to_end(&mut out)
        .map_err(|e| format!("read: {e}"))?;
    Ok(out)
}

fn report(result: Result<Vec<u8>, String>) -> Outcome {
    match result.map(|raw| summarize(&raw).ok_or(raw)) {
        Ok(Ok(line)) => Outcome::report(line),
        Ok(Err(raw)) => Outcome::line(
            format!("FAILED no HTTP answer: {:?}", String::from_utf8_lossy(&raw)),
            EXIT_ALLOWED,
        ),
        Err(e) => Outcome::line(format!("FAILED {e}"), EXIT_ALLOWED),
    }
}

fn connect_proxy() -> Result<std::net::TcpStream, String> {
    let addr = proxy_addr()?;
    let s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    Ok(s)
}

/// `proxy-get URL`.
pub fn proxy_get(url: &str) -> Outcome {
    report(connect_proxy().and_then(|mut s| {
        exchange(
            &mut s,
            &format!("GET {url} HTTP/1.1\r\nHost: ignored\r\nConnection: close\r\n\r\n"),
        )
    }))
}

/// `proxy-connect AUTHORITY PATH`.
pub fn proxy_connect(authority: &str, path: &str) -> Outcome {
    use std::io::{Read, Write};
    let result = connect_proxy().and_then(|mut s| {
        s.write_all(
            format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
        )
        .map_err(|e| format!("write: {e}"))?;
        // The tunnel's answer: a head alone when it opened.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut byte) {
                Ok(0) => return Ok(head),
                Ok(_) => head.push(byte[0]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        if !head.starts_with(b"HTTP/1.1 200") {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            head.extend(rest);
            return Ok(head);
        }
        exchange(
            &mut s,
            &format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"),
        )
    });
    report(result)
}
