//! The network allowlist: which hosts and ports a sandboxed command may
//! reach through the runner's proxy (docs/sandbox.md, "Network").
//!
//! Pure: parsing allow entries, classifying addresses and deciding a
//! request. Names are resolved elsewhere ([`super::proxy`]), and every
//! address a name resolves to comes back here ([`Policy::permits_resolved`])
//! before anything connects to it.
//!
//! An entry is one of
//! - a name, matched exactly (`pypi.org`; case and a trailing dot ignored);
//! - `*.suffix`, matching any name below the suffix but not the suffix
//!   itself (`*.pythonhosted.org` matches `files.pythonhosted.org`, not
//!   `pythonhosted.org`);
//! - an IP literal (`203.0.113.7`, `[2001:db8::1]`) or a CIDR block
//!   (`203.0.113.0/24`, `[2001:db8::]/32`);
//!
//! optionally followed by `:port`; without one, ports 80 and 443 only.
//!
//! Invariants:
//! - an IP literal in a request matches only IP and CIDR entries, never a
//!   name, and a name only name entries;
//! - an address that is loopback, private, link-local, multicast,
//!   unspecified, shared (CGNAT) or broadcast, in v4, v6 or v4-mapped v6
//!   form, is refused, unless the request named it as an IP literal that
//!   an IP or CIDR entry matches, or the job set `private` (and the runner
//!   allows it);
//! - a request the job's allowlist admits must also be admitted by the
//!   runner's own allowlist when one is set (the daemon's cap).

#![forbid(unsafe_code)]

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Most entries an allowlist may hold.
pub const MAX_ENTRIES: usize = 256;
/// Ports of an entry that names none.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];
/// Longest name (RFC 1035).
const MAX_NAME: usize = 253;

/// What an entry matches, besides the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Exactly this name (lowercase, without a trailing dot).
    Name(String),
    /// Any name ending in `.` and this suffix, not the suffix itself.
    Suffix(String),
    /// An address block; a single address is a /32 or /128.
    Block(Cidr),
}

/// An address block: the address with its host bits zero, and the prefix
/// length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in the block (v4-mapped v6 addresses count as v4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_v4(u32::from(ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask_v6(u128::from(ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.addr, self.prefix) {
            (IpAddr::V4(a), 32) => write!(f, "{a}"),
            (IpAddr::V6(a), 128) => write!(f, "[{a}]"),
            (IpAddr::V4(a), p) => write!(f, "{a}/{p}"),
            (IpAddr::V6(a), p) => write!(f, "[{a}]/{p}"),
        }
    }
}

fn mask_v4(v: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        v & (u32::MAX << (32 - prefix))
    }
}

fn mask_v6(v: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        v & (u128::MAX << (128 - prefix))
    }
}

/// One allow entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub pattern: Pattern,
    /// `None`: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Pattern::Name(n) => write!(f, "{n}")?,
            Pattern::Suffix(s) => write!(f, "*.{s}")?,
            Pattern::Block(c) => write!(f, "{c}")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Why an allow entry was refused; each says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("is empty; write a name, *.suffix, an IP address or a CIDR block")]
    Empty,
    #[error("contains whitespace or a control character")]
    Whitespace,
    #[error("has port {0:?}, which is not a number from 1 to 65535")]
    Port(String),
    #[error("is not a valid host name ({0}); write names as letters, digits and dashes between dots, e.g. pypi.org")]
    Name(&'static str),
    #[error("has a wildcard that is not a leading \"*.\"; write *.example.org for any name below example.org")]
    Wildcard,
    #[error("has prefix length {0:?}; use 0-32 for IPv4 and 0-128 for IPv6")]
    Prefix(String),
    #[error("has host bits set below its prefix; write the block's first address, {0}")]
    HostBits(String),
    #[error("is not an IP address before its prefix length; write e.g. 10.0.0.0/8 or [fd00::]/8")]
    BlockAddress,
    #[error("is an IPv6 address with a port but without brackets; write [2001:db8::1]:443")]
    Brackets,
    #[error("looks like a number but is not an IP address in dotted form; write IPv4 addresses as four decimal numbers, e.g. 10.0.0.1")]
    Numeric,
}

impl Entry {
    /// Parses one allow entry.
    pub fn parse(text: &str) -> Result<Entry, EntryError> {
        if text.is_empty() {
            return Err(EntryError::Empty);
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(EntryError::Whitespace);
        }
        let (host, port) = split_port(text)?;
        let port = port.map(parse_port).transpose()?;
        let pattern = if let Some(rest) = host.strip_prefix("*.") {
            if rest.contains('*') {
                return Err(EntryError::Wildcard);
            }
            Pattern::Suffix(check_name(rest)?)
        } else if host.contains('*') {
            return Err(EntryError::Wildcard);
        } else if let Some((addr, prefix)) = host.split_once('/') {
            let addr = strip_brackets(addr);
            let addr: IpAddr = addr.parse().map_err(|_| EntryError::BlockAddress)?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max && !prefix.starts_with('+'))
                .ok_or_else(|| EntryError::Prefix(prefix.to_owned()))?;
            let masked = match addr {
                IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(mask_v4(u32::from(a), prefix))),
                IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(mask_v6(u128::from(a), prefix))),
            };
            if masked != addr {
                let first = Cidr {
                    addr: masked,
                    prefix,
                };
                return Err(EntryError::HostBits(first.to_string()));
            }
            Pattern::Block(Cidr { addr, prefix })
        } else if let Ok(ip) = strip_brackets(host).parse::<IpAddr>() {
            Pattern::Block(single(ip))
        } else {
            Pattern::Name(check_name(host)?)
        };
        Ok(Entry { pattern, port })
    }

    fn port_matches(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    fn host_matches(&self, host: &Host) -> bool {
        match (&self.pattern, host) {
            (Pattern::Name(n), Host::Name(h)) => n == h,
            (Pattern::Suffix(s), Host::Name(h)) => h
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (Pattern::Block(c), Host::Ip(ip)) => c.contains(*ip),
            _ => false,
        }
    }
}

/// A single address as a block (v4-mapped v6 becomes v4).
fn single(ip: IpAddr) -> Cidr {
    match ip.to_canonical() {
        ip @ IpAddr::V4(_) => Cidr {
            addr: ip,
            prefix: 32,
        },
        ip @ IpAddr::V6(_) => Cidr {
            addr: ip,
            prefix: 128,
        },
    }
}

fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s)
}

/// Splits `host[:port]`, where an IPv6 host with a port is bracketed.
fn split_port(text: &str) -> Result<(&str, Option<&str>), EntryError> {
    if text.starts_with('[') {
        // [v6], [v6]:port, [v6]/len, [v6]/len:port
        let close = text.find(']').ok_or(EntryError::BlockAddress)?;
        let after = &text[close + 1..];
        let (block_end, port) = match after.find(':') {
            Some(i) => (close + 1 + i, Some(&after[i + 1..])),
            None => (text.len(), None),
        };
        return Ok((&text[..block_end], port));
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (h, p) = text.split_once(':').unwrap_or((text, ""));
            Ok((h, Some(p)))
        }
        // A bare IPv6 address or block: no port possible.
        _ => {
            let addr = text.split('/').next().unwrap_or(text);
            if addr.parse::<Ipv6Addr>().is_ok() {
                Ok((text, None))
            } else {
                Err(EntryError::Brackets)
            }
        }
    }
}

fn parse_port(p: &str) -> Result<u16, EntryError> {
    p.parse::<u16>()
        .ok()
        .filter(|n| *n != 0 && !p.starts_with('+') && !p.starts_with('0'))
        .ok_or_else(|| EntryError::Port(p.to_owned()))
}

/// Validates a host name: lowercased, without a trailing dot.
fn check_name(name: &str) -> Result<String, EntryError> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err(EntryError::Name("it is empty"));
    }
    if name.len() > MAX_NAME {
        return Err(EntryError::Name("longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(EntryError::Name("an empty label"));
        }
        if label.len() > 63 {
            return Err(EntryError::Name("a label longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(EntryError::Name(
                "a character other than a-z, 0-9, '-' and '_' (write internationalized names in their xn-- form)",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(EntryError::Name("a label starting or ending with '-'"));
        }
    }
    // A numeric last label would make getaddrinfo read the name as an
    // address (`2130706433`, `127.1`): only dotted quads are addresses.
    if name
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(EntryError::Numeric);
    }
    Ok(name)
}

/// The host of a request: a name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Parses the host of a request's authority (`[v6]` bracketed).
    pub fn parse(text: &str) -> Result<Host, EntryError> {
        if text.is_empty() {
            return Err(EntryError::Empty);
        }
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or(EntryError::Brackets)?;
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip).to_canonical()))
                .map_err(|_| EntryError::BlockAddress);
        }
        if let Ok(ip) = text.parse::<Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(ip)));
        }
        check_name(text).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => write!(f, "{n}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// What an address is, for the private-address rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Loopback,
    Private,
    LinkLocal,
    Multicast,
    Unspecified,
    /// 100.64.0.0/10, carrier-grade NAT (and some clouds' metadata).
    Shared,
    Broadcast,
}

impl AddressClass {
    pub fn name(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Multicast => "multicast",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Shared => "shared (CGNAT)",
            AddressClass::Broadcast => "broadcast",
        }
    }
}

/// Classifies an address; v4-mapped and NAT64 (`64:ff9b::/96`) v6
/// addresses are classified by the v4 address they carry.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip.to_canonical() {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
                return classify_v4(Ipv4Addr::from(bits as u32));
            }
            let first = v6.segments()[0];
            if v6.is_unspecified() {
                AddressClass::Unspecified
            } else if v6.is_loopback() {
                AddressClass::Loopback
            } else if first & 0xff00 == 0xff00 {
                AddressClass::Multicast
            } else if first & 0xffc0 == 0xfe80 {
                AddressClass::LinkLocal
            } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
                // Unique local, and the deprecated site-local.
                AddressClass::Private
            } else if bits >> 32 == 0 {
                // IPv4-compatible (deprecated) ::a.b.c.d: as its v4.
                classify_v4(Ipv4Addr::from(bits as u32))
            } else {
                AddressClass::Public
            }
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let o = ip.octets();
    if o[0] == 0 {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() {
        AddressClass::Private
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if ip.is_broadcast() {
        AddressClass::Broadcast
    } else if o[0] == 100 && (64..128).contains(&o[1]) {
        AddressClass::Shared
    } else {
        AddressClass::Public
    }
}

/// A job's allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    pub entries: Vec<Entry>,
    /// Names may resolve to non-public addresses.
    pub private: bool,
}

/// How the allowlist matched a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Matched {
    Host,
    HostAndPort,
    Nothing,
}

fn matched(entries: &[Entry], host: &Host, port: u16) -> Matched {
    let mut host_only = false;
    for e in entries.iter().filter(|e| e.host_matches(host)) {
        if e.port_matches(port) {
            return Matched::HostAndPort;
        }
        host_only = true;
    }
    if host_only {
        Matched::Host
    } else {
        Matched::Nothing
    }
}

/// Why a request was refused; [`Refusal::code`] is the proxy's reason
/// header and the result's `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No entry names the host.
    HostNotAllowed,
    /// An entry names the host, none with this port.
    PortNotAllowed,
    /// The job allows it, the runner's own allowlist does not.
    NotAllowedByRunner,
    /// The address (given, or resolved) is not public.
    PrivateAddress { addr: IpAddr, class: AddressClass },
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::HostNotAllowed => "host_not_allowed",
            Refusal::PortNotAllowed => "port_not_allowed",
            Refusal::NotAllowedByRunner => "not_allowed_by_runner",
            Refusal::PrivateAddress { .. } => "private_address",
        }
    }

    /// One sentence for the response body.
    pub fn message(&self, host: &Host, port: u16) -> String {
        match self {
            Refusal::HostNotAllowed => format!("{host} is not in the job's network allowlist"),
            Refusal::PortNotAllowed => format!(
                "{host} is in the job's network allowlist, but not with port {port} (an entry without a port allows 80 and 443)"
            ),
            Refusal::NotAllowedByRunner => {
                format!("{host}:{port} is not in the runner's own network allowlist")
            }
            Refusal::PrivateAddress { addr, class } => format!(
                "{host} is {addr}, a {} address: only allowed when the job sets \"private\": true, or names that address or block itself",
                class.name()
            ),
        }
    }
}

/// What to do with a request the policy admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Connect to this address, named by the request and matched by an IP
    /// or CIDR entry.
    Connect(IpAddr),
    /// Resolve the name, then keep the addresses
    /// [`Policy::permits_resolved`] lets through.
    Resolve(String),
}

/// The runner's own network settings (the daemon's configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerNetwork {
    /// Whether a job may reach non-public addresses at all.
    pub private: bool,
    /// A cap: a request must also match one of these entries.
    pub allow: Option<Vec<Entry>>,
    /// A cap on proxy connections across all executions (the daemon's).
    pub connections: super::ConnectionCap,
}

impl Default for RunnerNetwork {
    fn default() -> Self {
        RunnerNetwork {
            private: true,
            allow: None,
            connections: super::ConnectionCap::default(),
        }
    }
}

/// The policy of one execution: the job's allowlist under the runner's
/// settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub job: Allowlist,
    pub runner: RunnerNetwork,
}

impl Policy {
    /// Decides a request for `host:port`.
    pub fn decide(&self, host: &Host, port: u16) -> Result<Decision, Refusal> {
        match matched(&self.job.entries, host, port) {
            Matched::Nothing => return Err(Refusal::HostNotAllowed),
            Matched::Host => return Err(Refusal::PortNotAllowed),
            Matched::HostAndPort => {}
        }
        if let Some(cap) = &self.runner.allow {
            if matched(cap, host, port) != Matched::HostAndPort {
                return Err(Refusal::NotAllowedByRunner);
            }
        }
        match host {
            Host::Ip(ip) => {
                // Named by the job itself: a non-public address passes
                // unless the runner forbids them altogether.
                let class = classify(*ip);
                if class != AddressClass::Public && !self.runner.private {
                    return Err(Refusal::PrivateAddress { addr: *ip, class });
                }
                Ok(Decision::Connect(*ip))
            }
            Host::Name(n) => Ok(Decision::Resolve(n.clone())),
        }
    }

    /// Whether a name may connect to `ip`, one of its resolved addresses.
    pub fn permits_resolved(&self, ip: IpAddr) -> Result<(), Refusal> {
        let class = classify(ip);
        if class == AddressClass::Public || (self.job.private && self.runner.private) {
            Ok(())
        } else {
            Err(Refusal::PrivateAddress {
                addr: ip.to_canonical(),
                class,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str) -> Entry {
        Entry::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn policy(entries: &[&str], private: bool) -> Policy {
        Policy {
            job: Allowlist {
                entries: entries.iter().map(|e| entry(e)).collect(),
                private,
            },
            runner: RunnerNetwork::default(),
        }
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_parse_and_print_back() {
        for (text, shown) in [
            ("pypi.org", "pypi.org"),
            ("PyPI.org.", "pypi.org"),
            ("*.pythonhosted.org", "*.pythonhosted.org"),
            ("localhost:8080", "localhost:8080"),
            ("203.0.113.7", "203.0.113.7"),
            ("203.0.113.0/24:8443", "203.0.113.0/24:8443"),
            ("[2001:db8::1]:443", "[2001:db8::1]:443"),
            ("2001:db8::1", "[2001:db8::1]"),
            ("2001:db8::/32", "[2001:db8::]/32"),
            ("[2001:db8::]/32:80", "[2001:db8::]/32:80"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
            ("0.0.0.0/0", "0.0.0.0/0"),
        ] {
            assert_eq!(entry(text).to_string(), shown, "{text}");
        }
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (text, want) in [
            ("", EntryError::Empty),
            ("a b", EntryError::Whitespace),
            ("pypi.org:0", EntryError::Port("0".into())),
            ("pypi.org:65536", EntryError::Port("65536".into())),
            ("pypi.org:http", EntryError::Port("http".into())),
            ("pypi.org:+80", EntryError::Port("+80".into())),
            ("a.*.org", EntryError::Wildcard),
            ("*", EntryError::Wildcard),
            ("*.*.org", EntryError::Wildcard),
            ("10.0.0.0/33", EntryError::Prefix("33".into())),
            ("10.0.0.0/x", EntryError::Prefix("x".into())),
            ("10.0.0.1/8", EntryError::HostBits("10.0.0.0/8".into())),
            ("example.org/8", EntryError::BlockAddress),
            ("2001:db8::1:443:x", EntryError::Brackets),
            ("2130706433", EntryError::Numeric),
            ("127.1", EntryError::Numeric),
            ("0x7f.0.0.1", EntryError::Numeric),
        ] {
            assert_eq!(Entry::parse(text), Err(want), "{text:?}");
        }
        for text in ["-a.org", "a..org", "ex ample.org", "exämple.org", ".", "*."] {
            assert!(
                matches!(
                    Entry::parse(text),
                    Err(EntryError::Name(_) | EntryError::Whitespace)
                ),
                "{text:?}: {:?}",
                Entry::parse(text)
            );
        }
        assert!(Entry::parse(&"a".repeat(64)).is_err());
        assert!(Entry::parse(&format!("{}.org", "a.".repeat(130))).is_err());
    }

    #[test]
    fn names_match_exactly_and_suffixes_only_below() {
        let p = policy(&["pypi.org", "*.pythonhosted.org"], false);
        let resolve = |n: &str| Ok(Decision::Resolve(n.into()));
        assert_eq!(p.decide(&host("pypi.org"), 443), resolve("pypi.org"));
        assert_eq!(p.decide(&host("PYPI.ORG."), 80), resolve("pypi.org"));
        assert_eq!(
            p.decide(&host("files.pythonhosted.org"), 443),
            resolve("files.pythonhosted.org")
        );
        assert_eq!(
            p.decide(&host("a.b.pythonhosted.org"), 443),
            resolve("a.b.pythonhosted.org")
        );
        for refused in [
            "pythonhosted.org",
            "evilpythonhosted.org",
            "www.pypi.org",
            "pypi.org.evil.com",
        ] {
            assert_eq!(
                p.decide(&host(refused), 443),
                Err(Refusal::HostNotAllowed),
                "{refused}"
            );
        }
    }

    #[test]
    fn ports_default_to_80_and_443() {
        let p = policy(&["pypi.org", "localhost:8080"], true);
        assert!(p.decide(&host("pypi.org"), 80).is_ok());
        assert!(p.decide(&host("pypi.org"), 443).is_ok());
        assert_eq!(
            p.decide(&host("pypi.org"), 8080),
            Err(Refusal::PortNotAllowed)
        );
        assert!(p.decide(&host("localhost"), 8080).is_ok());
        assert_eq!(
            p.decide(&host("localhost"), 443),
            Err(Refusal::PortNotAllowed)
        );
    }

    #[test]
    fn ip_literals_match_only_ip_entries() {
        let p = policy(&["10.1.0.0/16", "[fd00::1]:8443", "localhost"], false);
        assert_eq!(
            p.decide(&host("10.1.2.3"), 80),
            Ok(Decision::Connect(ip("10.1.2.3")))
        );
        // v4-mapped v6 is the same address.
        assert_eq!(
            p.decide(&host("[::ffff:10.1.2.3]"), 443),
            Ok(Decision::Connect(ip("10.1.2.3")))
        );
        assert_eq!(
            p.decide(&host("[fd00::1]"), 8443),
            Ok(Decision::Connect(ip("fd00::1")))
        );
        assert_eq!(
            p.decide(&host("10.2.0.1"), 80),
            Err(Refusal::HostNotAllowed)
        );
        // A name entry never admits an address, whatever it resolves to.
        assert_eq!(
            p.decide(&host("127.0.0.1"), 80),
            Err(Refusal::HostNotAllowed)
        );
        assert_eq!(
            p.decide(&host("10.1.2.3"), 22),
            Err(Refusal::PortNotAllowed)
        );
    }

    #[test]
    fn resolved_addresses_must_be_public_unless_private() {
        let public = policy(&["example.org"], false);
        let private = policy(&["example.org"], true);
        for (addr, class) in [
            ("127.0.0.1", AddressClass::Loopback),
            ("127.255.0.9", AddressClass::Loopback),
            ("10.0.0.1", AddressClass::Private),
            ("172.16.5.4", AddressClass::Private),
            ("192.168.1.1", AddressClass::Private),
            ("169.254.169.254", AddressClass::LinkLocal),
            ("224.0.0.1", AddressClass::Multicast),
            ("0.0.0.0", AddressClass::Unspecified),
            ("0.1.2.3", AddressClass::Unspecified),
            ("100.100.100.200", AddressClass::Shared),
            ("255.255.255.255", AddressClass::Broadcast),
            ("::1", AddressClass::Loopback),
            ("::", AddressClass::Unspecified),
            ("fe80::1", AddressClass::LinkLocal),
            ("fd12:3456::1", AddressClass::Private),
            ("fc00::1", AddressClass::Private),
            ("fec0::1", AddressClass::Private),
            ("ff02::1", AddressClass::Multicast),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("::ffff:192.168.0.1", AddressClass::Private),
            ("64:ff9b::a00:1", AddressClass::Private),
            ("::127.0.0.1", AddressClass::Loopback),
        ] {
            assert_eq!(classify(ip(addr)), class, "{addr}");
            let refused = public.permits_resolved(ip(addr)).unwrap_err();
            assert_eq!(refused.code(), "private_address", "{addr}");
            assert!(private.permits_resolved(ip(addr)).is_ok(), "{addr}");
        }
        for addr in [
            "93.184.215.14",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(classify(ip(addr)), AddressClass::Public, "{addr}");
            assert!(public.permits_resolved(ip(addr)).is_ok(), "{addr}");
        }
        // The v4 form is reported, whatever form resolved.
        let e = public.permits_resolved(ip("::ffff:127.0.0.1")).unwrap_err();
        assert!(e
            .message(&host("example.org"), 80)
            .contains("127.0.0.1, a loopback"));
    }

    #[test]
    fn an_entry_naming_a_private_address_allows_it() {
        let p = policy(&["127.0.0.1:8080", "192.168.0.0/16"], false);
        assert_eq!(
            p.decide(&host("127.0.0.1"), 8080),
            Ok(Decision::Connect(ip("127.0.0.1")))
        );
        assert!(p.decide(&host("192.168.3.4"), 443).is_ok());
    }

    #[test]
    fn the_runner_caps_the_job() {
        let mut p = policy(&["pypi.org", "*.example.org", "10.0.0.5"], true);
        p.runner = RunnerNetwork {
            private: false,
            allow: Some(vec![entry("pypi.org"), entry("10.0.0.0/8")]),
            ..RunnerNetwork::default()
        };
        assert!(p.decide(&host("pypi.org"), 443).is_ok());
        assert_eq!(
            p.decide(&host("a.example.org"), 443),
            Err(Refusal::NotAllowedByRunner)
        );
        // The runner forbids private addresses: neither private: true nor
        // an explicit entry reaches one.
        assert_eq!(
            p.decide(&host("10.0.0.5"), 443).unwrap_err().code(),
            "private_address"
        );
        assert!(p.permits_resolved(ip("10.0.0.5")).is_err());
        assert!(p.permits_resolved(ip("8.8.8.8")).is_ok());
    }

    #[test]
    fn request_hosts_parse_strictly() {
        assert_eq!(host("[::1]"), Host::Ip(ip("::1")));
        assert_eq!(host("[::ffff:1.2.3.4]"), Host::Ip(ip("1.2.3.4")));
        assert_eq!(host("Example.ORG"), Host::Name("example.org".into()));
        for bad in ["", "::1", "[::1", "2130706433", "127.1", "a b", "a_b/c"] {
            assert!(Host::parse(bad).is_err(), "{bad:?}");
        }
    }
}
