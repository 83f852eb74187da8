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
//! - an address is public only if the IANA special-purpose registries
//!   mark it globally reachable ([`IPV4`], [`IPV6`]; an IPv6 form that
//!   carries an IPv4 address counts as that address); any other is
//!   refused, unless the request named it as an IP literal that an IP or
//!   CIDR entry matches, or the job set `private` (and the runner allows
//!   it);
//! - a refusal names the request's host and the class of the address,
//!   never an address a name resolved to.
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

/// A registry's "Globally Reachable" flag for a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// `True`: a destination beyond any one administrative domain.
    Global,
    /// `False`.
    NotGlobal,
    /// `N/A` (6to4, Teredo, the deprecated 6to4 relay anycast): what the
    /// block means depends on what it carries; with nothing carried, not
    /// global.
    NotApplicable,
}

/// How an IPv6 block carries an IPv4 address; such an address is
/// classified as the IPv4 address(es) it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Embed {
    None,
    /// The last 32 bits: v4-mapped `::ffff:a.b.c.d`, the deprecated
    /// v4-compatible `::a.b.c.d`, and NAT64's well-known prefix (RFC 6052).
    Low32,
    /// 6to4 `2002:V4::/48` (RFC 3056): bits 16-47.
    SixToFour,
    /// Teredo `2001:0:SERVER:flags:port:CLIENT` (RFC 4380): the server's
    /// address in bits 32-63 and the client's, inverted, in the last 32.
    Teredo,
}

/// An address block: its first address as bits, and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    V4(u32, u8),
    V6(u128, u8),
}

impl Net {
    fn contains(self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Net::V4(net, p), IpAddr::V4(ip)) => mask_v4(u32::from(ip), p) == net,
            (Net::V6(net, p), IpAddr::V6(ip)) => mask_v6(u128::from(ip), p) == net,
            _ => false,
        }
    }

    fn prefix(self) -> u8 {
        match self {
            Net::V4(_, p) | Net::V6(_, p) => p,
        }
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Net::V4(a, p) => write!(f, "{}/{p}", Ipv4Addr::from(a)),
            Net::V6(a, p) => write!(f, "{}/{p}", Ipv6Addr::from(a)),
        }
    }
}

const fn v4(o: [u8; 4], prefix: u8) -> Net {
    Net::V4(u32::from_be_bytes(o), prefix)
}

const fn v6(s: [u16; 8], prefix: u8) -> Net {
    let mut bits = 0u128;
    let mut i = 0;
    while i < 8 {
        bits = (bits << 16) | s[i] as u128;
        i += 1;
    }
    Net::V6(bits, prefix)
}

/// One row of an address table: a block, what it is, where it is defined
/// and whether the registry calls it globally reachable.
#[derive(Debug, PartialEq, Eq)]
pub struct Special {
    pub block: Net,
    /// The registry's name of the block.
    pub name: &'static str,
    /// The RFC that defines it.
    pub rfc: &'static str,
    pub reach: Reach,
    /// A word for the kind of address, for refusal messages ("a loopback
    /// address").
    pub kind: &'static str,
    embed: Embed,
}

const fn row(
    block: Net,
    name: &'static str,
    rfc: &'static str,
    reach: Reach,
    kind: &'static str,
) -> Special {
    Special {
        block,
        name,
        rfc,
        reach,
        kind,
        embed: Embed::None,
    }
}

const fn carrier(
    block: Net,
    name: &'static str,
    rfc: &'static str,
    reach: Reach,
    embed: Embed,
) -> Special {
    Special {
        block,
        name,
        rfc,
        reach,
        kind: "",
        embed,
    }
}

use Reach::{Global, NotApplicable, NotGlobal};

#[rustfmt::skip]
/// IPv4: the IANA IPv4 Special-Purpose Address Registry, row by row, plus
/// two rows of the IPv4 Address Space registry (multicast, and the rest:
/// unicast space allocated to the regional registries). The most specific
/// row that holds an address decides.
pub static IPV4: &[Special] = &[
    row(v4([0, 0, 0, 0], 0), "Unicast (allocated to the regional registries)", "RFC 7020", Global, "public"),
    row(v4([0, 0, 0, 0], 8), "\"This network\"", "RFC 791", NotGlobal, "this-network"),
    row(v4([0, 0, 0, 0], 32), "\"This host on this network\"", "RFC 1122", NotGlobal, "unspecified"),
    row(v4([10, 0, 0, 0], 8), "Private-Use", "RFC 1918", NotGlobal, "private"),
    row(v4([100, 64, 0, 0], 10), "Shared Address Space", "RFC 6598", NotGlobal, "shared (CGNAT)"),
    row(v4([127, 0, 0, 0], 8), "Loopback", "RFC 1122", NotGlobal, "loopback"),
    row(v4([169, 254, 0, 0], 16), "Link Local", "RFC 3927", NotGlobal, "link-local"),
    row(v4([172, 16, 0, 0], 12), "Private-Use", "RFC 1918", NotGlobal, "private"),
    row(v4([192, 0, 0, 0], 24), "IETF Protocol Assignments", "RFC 6890", NotGlobal, "protocol-assignment"),
    row(v4([192, 0, 0, 0], 29), "IPv4 Service Continuity Prefix", "RFC 7335", NotGlobal, "protocol-assignment"),
    row(v4([192, 0, 0, 8], 32), "IPv4 dummy address", "RFC 7600", NotGlobal, "protocol-assignment"),
    row(v4([192, 0, 0, 9], 32), "Port Control Protocol Anycast", "RFC 7723", Global, "public"),
    row(v4([192, 0, 0, 10], 32), "Traversal Using Relays around NAT Anycast", "RFC 8155", Global, "public"),
    row(v4([192, 0, 0, 170], 32), "NAT64/DNS64 Discovery", "RFC 8880", NotGlobal, "protocol-assignment"),
    row(v4([192, 0, 0, 171], 32), "NAT64/DNS64 Discovery", "RFC 8880", NotGlobal, "protocol-assignment"),
    row(v4([192, 0, 2, 0], 24), "Documentation (TEST-NET-1)", "RFC 5737", NotGlobal, "documentation"),
    row(v4([192, 31, 196, 0], 24), "AS112-v4", "RFC 7535", Global, "public"),
    row(v4([192, 52, 193, 0], 24), "AMT", "RFC 7450", Global, "public"),
    row(v4([192, 88, 99, 0], 24), "Deprecated (6to4 Relay Anycast)", "RFC 7526", NotApplicable, "deprecated"),
    row(v4([192, 168, 0, 0], 16), "Private-Use", "RFC 1918", NotGlobal, "private"),
    row(v4([192, 175, 48, 0], 24), "Direct Delegation AS112 Service", "RFC 7534", Global, "public"),
    row(v4([198, 18, 0, 0], 15), "Benchmarking", "RFC 2544", NotGlobal, "benchmarking"),
    row(v4([198, 51, 100, 0], 24), "Documentation (TEST-NET-2)", "RFC 5737", NotGlobal, "documentation"),
    row(v4([203, 0, 113, 0], 24), "Documentation (TEST-NET-3)", "RFC 5737", NotGlobal, "documentation"),
    row(v4([224, 0, 0, 0], 4), "Multicast", "RFC 5771", NotGlobal, "multicast"),
    row(v4([240, 0, 0, 0], 4), "Reserved", "RFC 1112", NotGlobal, "reserved"),
    row(v4([255, 255, 255, 255], 32), "Limited Broadcast", "RFC 919", NotGlobal, "broadcast"),
];

#[rustfmt::skip]
/// IPv6: the IANA IPv6 Special-Purpose Address Registry, row by row, plus
/// the address architecture's own blocks (RFC 4291): global unicast is
/// `2000::/3` only, everything outside it that no row names is not global.
/// Rows that carry an IPv4 address are decided by what they carry.
pub static IPV6: &[Special] = &[
    row(v6([0; 8], 0), "Outside global unicast (unassigned or reserved)", "RFC 4291", NotGlobal, "non-global"),
    row(v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3), "Global Unicast", "RFC 4291", Global, "public"),
    row(v6([0; 8], 128), "Unspecified Address", "RFC 4291", NotGlobal, "unspecified"),
    row(v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "Loopback Address", "RFC 4291", NotGlobal, "loopback"),
    carrier(v6([0; 8], 96), "IPv4-compatible (deprecated)", "RFC 4291", NotApplicable, Embed::Low32),
    carrier(v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), "IPv4-mapped Address", "RFC 4291", NotGlobal, Embed::Low32),
    carrier(v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), "IPv4-IPv6 Translat.", "RFC 6052", Global, Embed::Low32),
    // Where the v4 sits depends on the prefix length the local operator
    // chose, and the translator is that network's: never public.
    row(v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "IPv4-IPv6 Translat. (local use)", "RFC 8215", NotGlobal, "local-use NAT64"),
    row(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "Discard-Only Address Block", "RFC 6666", NotGlobal, "discard-only"),
    row(v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64), "Dummy IPv6 Prefix", "RFC 9780", NotGlobal, "dummy"),
    row(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), "IETF Protocol Assignments", "RFC 2928", NotGlobal, "protocol-assignment"),
    carrier(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "TEREDO", "RFC 4380", NotApplicable, Embed::Teredo),
    row(v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128), "Port Control Protocol Anycast", "RFC 7723", Global, "public"),
    row(v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128), "Traversal Using Relays around NAT Anycast", "RFC 8155", Global, "public"),
    row(v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128), "DNS-SD Service Registration Protocol Anycast", "RFC 9665", Global, "public"),
    row(v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48), "Benchmarking", "RFC 5180", NotGlobal, "benchmarking"),
    row(v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32), "AMT", "RFC 7450", Global, "public"),
    row(v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48), "AS112-v6", "RFC 7535", Global, "public"),
    row(v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28), "Deprecated (previously ORCHID)", "RFC 4843", NotApplicable, "deprecated"),
    row(v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28), "ORCHIDv2", "RFC 7343", Global, "public"),
    row(v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28), "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", Global, "public"),
    row(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "Documentation", "RFC 3849", NotGlobal, "documentation"),
    carrier(v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4", "RFC 3056", NotApplicable, Embed::SixToFour),
    row(v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48), "Direct Delegation AS112 Service", "RFC 7534", Global, "public"),
    row(v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "Documentation", "RFC 9637", NotGlobal, "documentation"),
    row(v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), "Segment Routing (SRv6) SIDs", "RFC 9602", NotGlobal, "segment-routing"),
    row(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "Unique-Local", "RFC 4193", NotGlobal, "unique-local"),
    row(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "Link-Local Unicast", "RFC 4291", NotGlobal, "link-local"),
    row(v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "Site-Local (deprecated)", "RFC 3879", NotGlobal, "site-local"),
    row(v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "Multicast", "RFC 4291", NotGlobal, "multicast"),
];

/// What an address is, for the private-address rule: the row that decided
/// it, and, for an IPv6 form that carries an IPv4 address, that form's
/// row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressClass {
    pub row: &'static Special,
    pub carrier: Option<&'static Special>,
}

impl AddressClass {
    /// Whether the registries call the address globally reachable.
    pub fn is_public(self) -> bool {
        self.row.reach == Reach::Global
    }

    /// "a loopback address (127.0.0.0/8 Loopback, RFC 1122)", naming the
    /// class, never the address itself.
    pub fn describe(self) -> String {
        let r = self.row;
        let inside = match self.carrier {
            Some(c) => format!(" inside {} {}", c.name, c.block),
            None => String::new(),
        };
        format!(
            "{} {} address ({} {}, {}){inside}",
            article(r.kind),
            r.kind,
            r.block,
            r.name,
            r.rfc
        )
    }
}

fn article(word: &str) -> &'static str {
    match word.as_bytes().first() {
        Some(b'a' | b'e' | b'i' | b'o' | b'u') => "an",
        _ => "a",
    }
}

/// The most specific row of `table` that holds `ip` (the first row of
/// each table holds every address of its family).
fn lookup(table: &'static [Special], ip: IpAddr) -> &'static Special {
    table
        .iter()
        .filter(|r| r.block.contains(ip))
        .max_by_key(|r| r.block.prefix())
        .expect("the first row of an address table holds every address")
}

/// Classifies an address. An IPv6 address that carries an IPv4 one
/// (v4-mapped, v4-compatible, NAT64's well-known prefix, 6to4, Teredo's
/// server and client) is classified as the IPv4 address it carries; for
/// Teredo the first of the two that is not public decides.
pub fn classify(ip: IpAddr) -> AddressClass {
    // v4-mapped is the v4 address itself, in every part of the runner.
    let v6 = match ip.to_canonical() {
        ip @ IpAddr::V4(_) => {
            return AddressClass {
                row: lookup(IPV4, ip),
                carrier: None,
            }
        }
        IpAddr::V6(v6) => v6,
    };
    let outer = lookup(IPV6, IpAddr::V6(v6));
    let bits = u128::from(v6);
    let carried: Vec<Ipv4Addr> = match outer.embed {
        Embed::None => Vec::new(),
        Embed::Low32 => vec![Ipv4Addr::from(bits as u32)],
        Embed::SixToFour => vec![Ipv4Addr::from((bits >> 80) as u32)],
        Embed::Teredo => vec![
            Ipv4Addr::from((bits >> 64) as u32),
            Ipv4Addr::from(!(bits as u32)),
        ],
    };
    if carried.is_empty() {
        return AddressClass {
            row: outer,
            carrier: None,
        };
    }
    let rows = carried.into_iter().map(|v4| lookup(IPV4, IpAddr::V4(v4)));
    let mut decided = None;
    for row in rows {
        if decided.is_none() || row.reach != Reach::Global {
            decided = Some(row);
        }
        if row.reach != Reach::Global {
            break;
        }
    }
    AddressClass {
        row: decided.unwrap_or(outer),
        carrier: Some(outer),
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
    /// The address (given, or resolved) is not globally reachable. `addr`
    /// is for the runner's own log and result, never the message.
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
            // The class, never the address a name resolved to: the
            // sandbox learns nothing of the runner's network it did not
            // name itself.
            Refusal::PrivateAddress { class, .. } => match host {
                Host::Ip(_) => format!(
                    "{host} is {}, not globally reachable, and the runner allows no such address",
                    class.describe()
                ),
                Host::Name(_) => format!(
                    "{host} is listed, but resolves to {}: only allowed when the job sets \"private\": true, or names that address or block itself",
                    class.describe()
                ),
            },
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
                if !class.is_public() && !self.runner.private {
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
        if class.is_public() || (self.job.private && self.runner.private) {
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
#[path = "policy_tests.rs"]
mod tests;
