//! The little HTTP the proxy speaks: reading a request head, the two
//! request forms a forward proxy serves (`CONNECT host:port` and an
//! absolute-form `GET http://host[:port]/path`), the head forwarded to the
//! origin, and the proxy's own answers.
//!
//! Pure: bytes in, bytes out. Anything the proxy does not understand is
//! refused (400), never guessed at: obsolete line folding, a request
//! without a host, a scheme other than `http` (a client wanting TLS sends
//! `CONNECT`), user info in the authority.

#![forbid(unsafe_code)]

/// Largest request head the proxy reads.
pub const MAX_HEAD: usize = 16 * 1024;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel.
    Connect { host: String, port: u16 },
    /// An absolute-form `http://` request, forwarded in origin form.
    Http {
        host: String,
        port: u16,
        /// Path and query, at least `/`.
        path: String,
    },
}

impl Target {
    pub fn host(&self) -> &str {
        match self {
            Target::Connect { host, .. } | Target::Http { host, .. } => host,
        }
    }
    pub fn port(&self) -> u16 {
        match self {
            Target::Connect { port, .. } | Target::Http { port, .. } => *port,
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: Target,
    pub version: String,
    /// As received, in order.
    pub headers: Vec<(String, String)>,
}

/// Why a request head was refused (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the request line is not METHOD TARGET HTTP/1.x")]
    RequestLine,
    #[error("a header line is malformed")]
    Header,
    #[error("the request is not for a proxy: send CONNECT host:port, or an absolute http:// URL")]
    NotProxy,
    #[error("the scheme {0:?} is not served; use http:// URLs, or CONNECT for TLS")]
    Scheme(String),
    #[error("the authority {0:?} is not host:port")]
    Authority(String),
}

/// Where the head ends (the index just past its blank line), if it does.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses a request head (up to and including its blank line).
pub fn parse_request(head: &[u8]) -> Result<Request, HeadError> {
    let text = std::str::from_utf8(head).map_err(|_| HeadError::RequestLine)?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().ok_or(HeadError::RequestLine)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::RequestLine);
    };
    // A control byte in the target would reach the origin's request line.
    if !token(method)
        || !matches!(version, "HTTP/1.1" | "HTTP/1.0")
        || target.is_empty()
        || target.bytes().any(|b| b < 0x21 || b == 0x7f)
    {
        return Err(HeadError::RequestLine);
    }
    let mut headers = Vec::new();
    for l in lines {
        if l.is_empty() {
            break;
        }
        if l.starts_with([' ', '\t']) {
            return Err(HeadError::Header);
        }
        let (name, value) = l.split_once(':').ok_or(HeadError::Header)?;
        if !token(name) || value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(HeadError::Header);
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let target = if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        Target::Connect { host, port }
    } else {
        let Some((scheme, rest)) = target.split_once("://") else {
            return Err(HeadError::NotProxy);
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(HeadError::Scheme(scheme.to_owned()));
        }
        let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (auth, path) = rest.split_at(split);
        let (host, port) = authority(auth, Some(80))?;
        let path = path.split('#').next().unwrap_or("");
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        Target::Http { host, port, path }
    };
    Ok(Request {
        method: method.to_owned(),
        target,
        version: version.to_owned(),
        headers,
    })
}

/// Splits `host[:port]` (`[v6]:port` for IPv6); `default` is the port when
/// none is given (CONNECT requires one).
fn authority(a: &str, default: Option<u16>) -> Result<(String, u16), HeadError> {
    let bad = || HeadError::Authority(a.chars().take(300).collect());
    if a.contains('@') || a.is_empty() {
        return Err(bad());
    }
    let (host, port) = if a.starts_with('[') {
        let close = a.find(']').ok_or_else(bad)?;
        match &a[close + 1..] {
            "" => (&a[..=close], None),
            rest => (&a[..=close], Some(rest.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match a.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|n| *n != 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(bad)?,
        None => default.ok_or_else(bad)?,
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

/// Headers that concern one connection only (RFC 9110 7.6.1), dropped
/// when forwarding, with those the `Connection` header names.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The head sent to the origin for an absolute-form request: origin form,
/// `Host` set to the URL's authority, hop-by-hop headers dropped and
/// `Connection: close` (one request per proxied connection).
pub fn origin_head(req: &Request) -> Vec<u8> {
    let Target::Http { host, port, path } = &req.target else {
        return Vec::new();
    };
    let named: Vec<String> = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .collect();
    let mut out = format!("{} {path} {}\r\n", req.method, req.version);
    let host_value = if *port == 80 {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    out.push_str(&format!("Host: {host_value}\r\n"));
    for (name, value) in &req.headers {
        let lower = name.to_ascii_lowercase();
        if lower == "host" || HOP_BY_HOP.contains(&lower.as_str()) || named.contains(&lower) {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

/// Name of the header carrying the proxy's reason code.
pub const REASON_HEADER: &str = "X-Skill-Runner-Reason";

/// A complete answer of the proxy itself, closing the connection.
pub fn answer(status: u16, reason: &str, message: &str) -> Vec<u8> {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("{message}\n");
    format!(
        "HTTP/1.1 {status} {phrase}\r\n{REASON_HEADER}: {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to an admitted `CONNECT`.
pub const CONNECTED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn req(head: &str) -> Result<Request, HeadError> {
        parse_request(head.as_bytes())
    }

    #[test]
    fn connect_and_absolute_forms_parse() {
        let r = req("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert_eq!(
            r.target,
            Target::Connect {
                host: "pypi.org".into(),
                port: 443
            }
        );
        let r = req("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.target.host(), "[2001:db8::1]");
        assert_eq!(r.target.port(), 8443);
        let r = req("GET http://example.org/a?b=c#frag HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            r.target,
            Target::Http {
                host: "example.org".into(),
                port: 80,
                path: "/a?b=c".into()
            }
        );
        let r = req("POST HTTP://localhost:8080 HTTP/1.0\n\n").unwrap();
        assert_eq!(
            r.target,
            Target::Http {
                host: "localhost".into(),
                port: 8080,
                path: "/".into()
            }
        );
        let r = req("GET http://h?q HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.target.port(), 80);
        assert!(matches!(r.target, Target::Http { ref path, .. } if path == "/?q"));
    }

    #[test]
    fn what_a_proxy_does_not_serve_is_refused() {
        for (head, want) in [
            ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", HeadError::NotProxy),
            (
                "GET https://x/ HTTP/1.1\r\n\r\n",
                HeadError::Scheme("https".into()),
            ),
            (
                "CONNECT pypi.org HTTP/1.1\r\n\r\n",
                HeadError::Authority("pypi.org".into()),
            ),
            (
                "CONNECT a:0 HTTP/1.1\r\n\r\n",
                HeadError::Authority("a:0".into()),
            ),
            (
                "CONNECT a:+1 HTTP/1.1\r\n\r\n",
                HeadError::Authority("a:+1".into()),
            ),
            (
                "GET http://u:p@h/ HTTP/1.1\r\n\r\n",
                HeadError::Authority("u:p@h".into()),
            ),
            ("GET http://h/ HTTP/2\r\n\r\n", HeadError::RequestLine),
            ("GET  http://h/ HTTP/1.1\r\n\r\n", HeadError::RequestLine),
            ("GET http://h/a\rb HTTP/1.1\r\n\r\n", HeadError::RequestLine),
            (
                "GET http://h/a\x00 HTTP/1.1\r\n\r\n",
                HeadError::RequestLine,
            ),
            (
                "GET http://h/ HTTP/1.1\r\n folded\r\n\r\n",
                HeadError::Header,
            ),
            (
                "GET http://h/ HTTP/1.1\r\nNo colon\r\n\r\n",
                HeadError::Header,
            ),
            (
                "GET http://h/ HTTP/1.1\r\nA: b\x01\r\n\r\n",
                HeadError::Header,
            ),
        ] {
            assert_eq!(req(head), Err(want), "{head:?}");
        }
    }

    #[test]
    fn the_origin_gets_origin_form_without_hop_by_hop_headers() {
        let r = req("GET http://example.org:8080/p HTTP/1.1\r\nHost: evil.org\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nProxy-Authorization: Basic x\r\nAccept: */*\r\n\r\n").unwrap();
        assert_eq!(
            String::from_utf8(origin_head(&r)).unwrap(),
            "GET /p HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn heads_end_at_the_blank_line() {
        assert_eq!(head_end(b"GET x HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET x HTTP/1.1\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET x HTTP/1.1\r\n"), None);
    }

    #[test]
    fn answers_carry_the_reason_header() {
        let a = String::from_utf8(answer(403, "host_not_allowed", "no")).unwrap();
        assert!(a.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert!(a.contains("\r\nX-Skill-Runner-Reason: host_not_allowed\r\n"));
        assert!(a.ends_with("\r\n\r\nno\n"));
    }
}
