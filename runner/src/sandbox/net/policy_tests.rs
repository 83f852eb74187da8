//! Unit tests of `policy.rs` (included from there as its `tests` module).

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

/// Every row of both tables: its first and last address and the
    /// addresses just outside it, with the kind of address each is.
    #[rustfmt::skip]
    const EVERY_ROW: &[(&str, &str)] = &[
        // IPv4
        ("0.0.0.0", "unspecified"), ("255.255.255.255", "broadcast"),
        ("0.255.255.255", "this-network"), ("1.0.0.0", "public"), ("0.0.0.1", "this-network"),
        ("10.0.0.0", "private"), ("10.255.255.255", "private"),
        ("9.255.255.255", "public"), ("11.0.0.0", "public"),
        ("100.64.0.0", "shared (CGNAT)"), ("100.127.255.255", "shared (CGNAT)"),
        ("100.63.255.255", "public"), ("100.128.0.0", "public"),
        ("127.0.0.0", "loopback"), ("127.255.255.255", "loopback"),
        ("126.255.255.255", "public"), ("128.0.0.0", "public"),
        ("169.254.0.0", "link-local"), ("169.254.255.255", "link-local"),
        ("169.253.255.255", "public"), ("169.255.0.0", "public"),
        ("172.16.0.0", "private"), ("172.31.255.255", "private"),
        ("172.15.255.255", "public"), ("172.32.0.0", "public"),
        ("192.0.0.0", "protocol-assignment"), ("192.0.0.255", "protocol-assignment"),
        ("191.255.255.255", "public"), ("192.0.1.0", "public"),
        ("192.0.0.7", "protocol-assignment"), ("192.0.0.8", "protocol-assignment"),
        ("192.0.0.9", "public"), ("192.0.0.10", "public"), ("192.0.0.11", "protocol-assignment"),
        ("192.0.0.169", "protocol-assignment"), ("192.0.0.170", "protocol-assignment"),
        ("192.0.0.171", "protocol-assignment"), ("192.0.0.172", "protocol-assignment"),
        // A cloud's metadata address: no row of its own, inside the /24.
        ("192.0.0.192", "protocol-assignment"),
        ("192.0.2.0", "documentation"), ("192.0.2.255", "documentation"),
        ("192.0.1.255", "public"), ("192.0.3.0", "public"),
        ("192.31.196.0", "public"), ("192.31.196.255", "public"),
        ("192.31.195.255", "public"), ("192.31.197.0", "public"),
        ("192.52.193.0", "public"), ("192.52.193.255", "public"),
        ("192.52.192.255", "public"), ("192.52.194.0", "public"),
        ("192.88.99.0", "deprecated"), ("192.88.99.255", "deprecated"),
        ("192.88.98.255", "public"), ("192.88.100.0", "public"),
        ("192.168.0.0", "private"), ("192.168.255.255", "private"),
        ("192.167.255.255", "public"), ("192.169.0.0", "public"),
        ("192.175.48.0", "public"), ("192.175.48.255", "public"),
        ("192.175.47.255", "public"), ("192.175.49.0", "public"),
        ("198.18.0.0", "benchmarking"), ("198.19.255.255", "benchmarking"),
        ("198.17.255.255", "public"), ("198.20.0.0", "public"),
        ("198.51.100.0", "documentation"), ("198.51.100.255", "documentation"),
        ("198.51.99.255", "public"), ("198.51.101.0", "public"),
        ("203.0.113.0", "documentation"), ("203.0.113.255", "documentation"),
        ("203.0.112.255", "public"), ("203.0.114.0", "public"),
        ("224.0.0.0", "multicast"), ("239.255.255.255", "multicast"),
        ("223.255.255.255", "public"),
        ("240.0.0.0", "reserved"), ("255.255.255.254", "reserved"),
        // IPv6
        ("::", "unspecified"), ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast"),
        ("2000::", "public"), ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "non-global"), ("4000::", "non-global"),
        ("::1", "loopback"), ("::2", "this-network"),
        ("::255.255.255.255", "broadcast"), ("::1:0:0", "non-global"),
        ("::ffff:0.0.0.0", "unspecified"), ("::ffff:255.255.255.255", "broadcast"),
        ("::fffe:ffff:ffff", "non-global"), ("::1:0:0:0", "non-global"),
        ("64:ff9b::", "unspecified"), ("64:ff9b::ffff:ffff", "broadcast"),
        ("64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "non-global"), ("64:ff9b::1:0:0", "non-global"),
        ("64:ff9b:1::", "local-use NAT64"), ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "local-use NAT64"),
        ("64:ff9b:0:ffff:ffff:ffff:ffff:ffff", "non-global"), ("64:ff9b:2::", "non-global"),
        ("100::", "discard-only"), ("100::ffff:ffff:ffff:ffff", "discard-only"),
        ("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "non-global"),
        ("100:0:0:1::", "dummy"), ("100::1:ffff:ffff:ffff:ffff", "dummy"), ("100:0:0:2::", "non-global"),
        ("2001::", "unspecified"), ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "protocol-assignment"),
        ("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"), ("2001:200::", "public"),
        ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "broadcast"), ("2001:1::", "protocol-assignment"),
        ("2001:1::1", "public"), ("2001:1::2", "public"), ("2001:1::3", "public"),
        ("2001:1::4", "protocol-assignment"),
        ("2001:2::", "benchmarking"), ("2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking"),
        ("2001:1:ffff:ffff:ffff:ffff:ffff:ffff", "protocol-assignment"), ("2001:2:1::", "protocol-assignment"),
        ("2001:3::", "public"), ("2001:3:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2001:2:ffff:ffff:ffff:ffff:ffff:ffff", "protocol-assignment"), ("2001:4::", "protocol-assignment"),
        ("2001:4:112::", "public"), ("2001:4:112:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2001:4:111:ffff:ffff:ffff:ffff:ffff", "protocol-assignment"), ("2001:4:113::", "protocol-assignment"),
        ("2001:10::", "deprecated"), ("2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "deprecated"),
        ("2001:f:ffff:ffff:ffff:ffff:ffff:ffff", "protocol-assignment"),
        ("2001:20::", "public"), ("2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2001:30::", "public"), ("2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2001:40::", "protocol-assignment"),
        ("2001:db8::", "documentation"), ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "public"), ("2001:db9::", "public"),
        ("2002::", "unspecified"), ("2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "broadcast"),
        ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"), ("2003::", "public"),
        ("2620:4f:8000::", "public"), ("2620:4f:8000:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", "public"), ("2620:4f:8001::", "public"),
        ("3fff::", "documentation"), ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
        ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"), ("3fff:1000::", "public"),
        ("5f00::", "segment-routing"), ("5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "segment-routing"),
        ("5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "non-global"), ("5f01::", "non-global"),
        ("fc00::", "unique-local"), ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "unique-local"),
        ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "non-global"), ("fe00::", "non-global"),
        ("fe80::", "link-local"), ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local"),
        ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "non-global"),
        ("fec0::", "site-local"), ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "site-local"),
        ("ff00::", "multicast"),
    ];

/// IPv6 forms that carry an IPv4 address: classified as what they
    /// carry.
    #[rustfmt::skip]
    const CARRIERS: &[(&str, &str)] = &[
        ("::ffff:8.8.8.8", "public"), ("::ffff:127.0.0.1", "loopback"),
        ("::8.8.8.8", "public"), ("::127.0.0.1", "loopback"), ("::169.254.169.254", "link-local"),
        ("64:ff9b::8.8.8.8", "public"), ("64:ff9b::10.0.0.1", "private"),
        ("64:ff9b::169.254.169.254", "link-local"), ("64:ff9b::192.0.0.192", "protocol-assignment"),
        // Local-use NAT64 stays local whatever sits where a /48 prefix
        // would put 8.8.8.8.
        ("64:ff9b:1:808:8:800::", "local-use NAT64"),
        ("2002:808:808::", "public"), ("2002:808:808:1:2:3:4:5", "public"),
        ("2002:a9fe:a9fe::", "link-local"), ("2002:c000:c0::1", "protocol-assignment"),
        ("2002:7f00:1::", "loopback"), ("2002:c612:1::", "benchmarking"),
        ("2002:f000:1::", "reserved"), ("2002:c058:6301::", "deprecated"),
        // Teredo: server 65.54.227.120; client 8.8.8.8 (inverted f7f7:f7f7).
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "public"),
        // The client of RFC 4380's own example is 192.0.2.45.
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "documentation"),
        // The server, or the client, 169.254.169.254.
        ("2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7", "link-local"),
        ("2001:0:4136:e378:8000:63bf:5601:5601", "link-local"),
        ("2001:0:4136:e378:0:0:80ff:fffe", "loopback"),
    ];

#[test]
fn every_registry_row_classifies_its_edges() {
    for &(addr, kind) in EVERY_ROW.iter().chain(CARRIERS) {
        let class = classify(ip(addr));
        assert_eq!(class.row.kind, kind, "{addr}: {}", class.describe());
        assert_eq!(class.is_public(), kind == "public", "{addr}");
        // Only rows the registry calls globally reachable are public.
        assert_eq!(
            class.is_public(),
            class.row.reach == Reach::Global,
            "{addr}"
        );
    }
    // The table above covers the first and last address of every row:
    // a row added without its edges tested fails here.
    let listed: Vec<IpAddr> = EVERY_ROW.iter().map(|(a, _)| ip(a)).collect();
    for r in IPV4.iter().chain(IPV6) {
        let (first, last) = match r.block {
            Net::V4(a, p) => (
                IpAddr::V4(Ipv4Addr::from(a)),
                IpAddr::V4(Ipv4Addr::from(a | !mask_v4(u32::MAX, p))),
            ),
            Net::V6(a, p) => (
                IpAddr::V6(Ipv6Addr::from(a)),
                IpAddr::V6(Ipv6Addr::from(a | !mask_v6(u128::MAX, p))),
            ),
        };
        assert!(
            listed.contains(&first),
            "{}: first address {first} untested",
            r.block
        );
        assert!(
            listed.contains(&last),
            "{}: last address {last} untested",
            r.block
        );
        assert!(r.block.contains(first) && r.block.contains(last));
        if r.embed == Embed::None {
            assert_eq!(r.kind == "public", r.reach == Reach::Global, "{}", r.block);
        }
    }
}

#[test]
fn resolved_addresses_must_be_public_unless_private() {
    let public = policy(&["example.org"], false);
    let private = policy(&["example.org"], true);
    for &(addr, kind) in EVERY_ROW.iter().chain(CARRIERS) {
        if kind == "public" {
            assert!(public.permits_resolved(ip(addr)).is_ok(), "{addr}");
        } else {
            let refused = public.permits_resolved(ip(addr)).unwrap_err();
            assert_eq!(refused.code(), "private_address", "{addr}");
        }
        assert!(private.permits_resolved(ip(addr)).is_ok(), "{addr}");
    }
}

#[test]
fn refusals_name_the_class_not_the_resolved_address() {
    let p = policy(&["metadata.internal"], false);
    for (addr, says) in [
        (
            "192.0.0.192",
            "a protocol-assignment address (192.0.0.0/24 IETF Protocol Assignments, RFC 6890)",
        ),
        (
            "::ffff:127.0.0.1",
            "a loopback address (127.0.0.0/8 Loopback, RFC 1122)",
        ),
        (
            "2002:a9fe:a9fe::",
            "a link-local address (169.254.0.0/16 Link Local, RFC 3927) inside 6to4 2002::/16",
        ),
    ] {
        let msg = p
            .permits_resolved(ip(addr))
            .unwrap_err()
            .message(&host("metadata.internal"), 80);
        assert_eq!(
                msg,
                format!("metadata.internal is listed, but resolves to {says}: only allowed when the job sets \"private\": true, or names that address or block itself")
            );
        let v4 = classify(ip(addr)).row;
        for shown in [addr.to_owned(), ip(addr).to_canonical().to_string()] {
            assert!(!msg.contains(&shown), "{msg} names {shown}");
        }
        assert!(
            !msg.contains("192.0.0.192") && !msg.contains("169.254.169.254"),
            "{msg} ({v4:?})"
        );
    }
}

#[test]
fn an_entry_naming_a_private_address_allows_it() {
    let p = policy(&["127.0.0.1:8080", "192.168.0.0/16"], false);
    assert_eq!(
        p.decide(&host("127.0.0.1"), 8080),
        Ok(Decision::Connect(ip("127.0.0.1")))
    );
    assert!(p.decide(&host("192.168.3.4"), 443).is_ok());
    // Special-purpose space too, and only what the entry itself names.
    let p = policy(
        &["192.0.0.192", "198.18.0.0/15", "[2002:a9fe:a9fe::]"],
        false,
    );
    for named in ["192.0.0.192", "198.19.255.255", "[2002:a9fe:a9fe::]"] {
        assert!(p.decide(&host(named), 443).is_ok(), "{named}");
    }
    for other in ["192.0.0.193", "[2002:a9fe:a9fe::1]", "169.254.169.254"] {
        assert_eq!(
            p.decide(&host(other), 443),
            Err(Refusal::HostNotAllowed),
            "{other}"
        );
    }
    // The runner that forbids non-public addresses refuses them all,
    // named or not, and says what kind of address each is.
    let mut p = p;
    p.runner.private = false;
    let refused = p.decide(&host("192.0.0.192"), 443).unwrap_err();
    assert_eq!(
            refused.message(&host("192.0.0.192"), 443),
            "192.0.0.192 is a protocol-assignment address (192.0.0.0/24 IETF Protocol Assignments, RFC 6890), not globally reachable, and the runner allows no such address"
        );
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
