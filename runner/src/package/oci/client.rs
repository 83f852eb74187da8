//! A small client of the OCI distribution API over hyper: one connection
//! per request (plain TCP only for a host given as insecure, TLS with the
//! system roots and the configured CAs otherwise), Basic or Bearer-token
//! authentication from the Docker-style credentials, redirects followed
//! (never carrying the registry's credentials to another host), and
//! bodies read only up to a bound the caller gives (docs/distribution.md).
//! Every request URL, whichever answer named it, is https unless its host
//! is listed insecure and was not reached over https; the credentials go
//! only to the registry's own scheme and host.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{OciError, RegistryConfig};

/// A request body: nothing, bytes in memory, or a file streamed.
#[derive(Debug)]
pub enum ReqBody {
    Empty,
    Bytes(Bytes),
    File { file: tokio::fs::File, left: u64 },
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match &mut *self {
            ReqBody::Empty => Poll::Ready(None),
            ReqBody::Bytes(b) if b.is_empty() => Poll::Ready(None),
            ReqBody::Bytes(b) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(b))))),
            ReqBody::File { left, .. } if *left == 0 => Poll::Ready(None),
            ReqBody::File { file, left } => {
                let mut buf = vec![0u8; (*left).min(1 << 20) as usize];
                let mut rb = ReadBuf::new(&mut buf);
                match Pin::new(file).poll_read(cx, &mut rb) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            return Poll::Ready(Some(
                                Err(std::io::ErrorKind::UnexpectedEof.into()),
                            ));
                        }
                        *left -= n as u64;
                        buf.truncate(n);
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
                    }
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Empty => SizeHint::with_exact(0),
            ReqBody::Bytes(b) => SizeHint::with_exact(b.len() as u64),
            ReqBody::File { left, .. } => SizeHint::with_exact(*left),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Empty => true,
            ReqBody::Bytes(b) => b.is_empty(),
            ReqBody::File { left, .. } => *left == 0,
        }
    }
}

/// An absolute URL, split as a request needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// `host[:port]`
    pub authority: String,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    pub fn parse(text: &str) -> Option<Url> {
        let (https, rest) = if let Some(r) = text.strip_prefix("https://") {
            (true, r)
        } else {
            (false, text.strip_prefix("http://")?)
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_owned()),
        };
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        Some(Url {
            https,
            authority: authority.to_ascii_lowercase(),
            path,
        })
    }

    /// `Location` resolved against this URL.
    pub fn join(&self, location: &str) -> Option<Url> {
        if location.starts_with("http://") || location.starts_with("https://") {
            Url::parse(location)
        } else if location.starts_with('/') {
            Some(Url {
                path: location.to_owned(),
                ..self.clone()
            })
        } else {
            None
        }
    }

    fn host(&self) -> &str {
        match self.authority.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => &self.authority,
        }
    }

    fn port(&self) -> u16 {
        match self.authority.rsplit_once(':') {
            Some((_, p)) if p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse().unwrap_or(if self.https { 443 } else { 80 })
            }
            _ if self.https => 443,
            _ => 80,
        }
    }
}

/// A session with one registry for one repository: the base URL and the
/// authorization its requests carry.
#[derive(Debug)]
pub struct Session<'c> {
    cfg: &'c RegistryConfig,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    pub registry: String,
    pub repository: String,
    https: bool,
    auth: Option<String>,
    /// Requests sent (tests and the fleet count them).
    pub requests: u64,
}

const PULL: &str = "pull";
const PUSH: &str = "pull,push";

impl<'c> Session<'c> {
    /// Opens a session: `GET /v2/`, and on a 401 the credentials (Basic) or
    /// a token for the repository (`pull`, or `pull,push` when `push`).
    pub async fn open(
        cfg: &'c RegistryConfig,
        registry: &str,
        repository: &str,
        push: bool,
    ) -> Result<Session<'c>, OciError> {
        let https = !cfg.is_insecure(registry);
        let mut s = Session {
            cfg,
            tls: if https { Some(cfg.tls()?) } else { None },
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            https,
            auth: None,
            requests: 0,
        };
        let probe = s.url("/v2/");
        let resp = s
            .send_url(Method::GET, &probe, &[], ReqBody::Empty, &[])
            .await?;
        match resp.status() {
            s2 if s2.is_success() => {}
            StatusCode::UNAUTHORIZED => {
                let challenge = resp
                    .headers()
                    .get(hyper::header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                s.auth = Some(
                    s.authorize(&challenge, if push { PUSH } else { PULL })
                        .await?,
                );
            }
            other => {
                return Err(OciError::Status {
                    url: probe_display(&probe),
                    status: other.as_u16(),
                    doing: "checking that it speaks the OCI distribution API",
                })
            }
        }
        Ok(s)
    }

    pub fn url(&self, path: &str) -> Url {
        Url {
            https: self.https,
            authority: self.registry.clone(),
            path: path.to_owned(),
        }
    }

    /// `/v2/REPO/<rest>`
    pub fn repo_url(&self, rest: &str) -> Url {
        self.url(&format!("/v2/{}/{rest}", self.repository))
    }

    async fn authorize(&mut self, challenge: &str, actions: &str) -> Result<String, OciError> {
        let basic = self.cfg.credentials(&self.registry).map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        });
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(|| OciError::NeedsCredentials {
                registry: self.registry.clone(),
            });
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(OciError::Auth {
                registry: self.registry.clone(),
                reason: format!("it asks for {scheme:?} authentication, which is not supported"),
            });
        }
        let params = challenge_params(params);
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .and_then(|(_, v)| Url::parse(v))
            .ok_or_else(|| OciError::Auth {
                registry: self.registry.clone(),
                reason: "its Bearer challenge names no http(s) realm".into(),
            })?;
        if !realm.https && !self.cfg.is_insecure(&realm.authority) {
            return Err(OciError::Auth {
                registry: self.registry.clone(),
                reason: format!(
                    "its token service {} is plain HTTP; give --insecure-registry {} to allow it",
                    realm.authority, realm.authority
                ),
            });
        }
        let mut query = Vec::new();
        if let Some((_, service)) = params.iter().find(|(k, _)| k == "service") {
            query.push(format!("service={}", encode(service)));
        }
        query.push(format!(
            "scope={}",
            encode(&format!("repository:{}:{actions}", self.repository))
        ));
        let sep = if realm.path.contains('?') { '&' } else { '?' };
        let url = Url {
            path: format!("{}{sep}{}", realm.path, query.join("&")),
            ..realm
        };
        let mut headers = Vec::new();
        if let Some(b) = &basic {
            headers.push(("authorization", b.clone()));
        }
        let resp = self
            .send_url(Method::GET, &url, &headers, ReqBody::Empty, &[])
            .await?;
        if !resp.status().is_success() {
            return Err(OciError::Auth {
                registry: self.registry.clone(),
                reason: format!(
                    "its token service answered {} (check the credentials in the registry config)",
                    resp.status().as_u16()
                ),
            });
        }
        let body = read_capped(resp, &self.registry, 64 * 1024, self.cfg.idle_timeout).await?;
        let doc: serde_json::Value = serde_json::from_slice(&body).map_err(|_| OciError::Auth {
            registry: self.registry.clone(),
            reason: "its token service answered something that is not JSON".into(),
        })?;
        let token = doc
            .get("token")
            .or_else(|| doc.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| OciError::Auth {
                registry: self.registry.clone(),
                reason: "its token service gave no token".into(),
            })?;
        Ok(format!("Bearer {token}"))
    }

    /// Sends a request to the registry with its authorization, following
    /// redirects of GET and HEAD. The authorization goes only to the
    /// session's own scheme and authority; every URL passes
    /// [`plain_http_refused`] first (with the URLs its redirects came
    /// from).
    pub async fn send(
        &mut self,
        method: Method,
        url: &Url,
        headers: &[(&'static str, String)],
        body: ReqBody,
    ) -> Result<Response<Incoming>, OciError> {
        let mut url = url.clone();
        // The URLs this request's redirects came from.
        let mut chain: Vec<Url> = Vec::new();
        let mut body = Some(body);
        for _ in 0..5 {
            let mut h = headers.to_vec();
            if url.authority == self.registry && url.https == self.https {
                if let Some(a) = &self.auth {
                    h.push(("authorization", a.clone()));
                }
            }
            let b = body.take().unwrap_or(ReqBody::Empty);
            let resp = self.send_url(method.clone(), &url, &h, b, &chain).await?;
            let redirect = matches!(resp.status().as_u16(), 301 | 302 | 303 | 307 | 308)
                && (method == Method::GET || method == Method::HEAD);
            if !redirect {
                return Ok(resp);
            }
            let next = resp
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| url.join(l));
            let Some(next) = next else {
                return Err(OciError::Status {
                    url: probe_display(&url),
                    status: resp.status().as_u16(),
                    doing: "following a redirect with no usable Location",
                });
            };
            chain.push(std::mem::replace(&mut url, next));
        }
        Err(OciError::Status {
            url: probe_display(&url),
            status: 310,
            doing: "following more than five redirects",
        })
    }

    async fn send_url(
        &mut self,
        method: Method,
        url: &Url,
        headers: &[(&'static str, String)],
        body: ReqBody,
        chain: &[Url],
    ) -> Result<Response<Incoming>, OciError> {
        let base = self.url("/");
        let came_from: Vec<&Url> = std::iter::once(&base).chain(chain).collect();
        if plain_http_refused(url, &came_from, |a| self.cfg.is_insecure(a)) {
            return Err(OciError::PlainHttp {
                url: probe_display(url),
            });
        }
        self.requests += 1;
        let connect_err = |reason: String| OciError::Connect {
            registry: url.authority.clone(),
            reason,
        };
        let tcp = tokio::time::timeout(
            self.cfg.idle_timeout,
            TcpStream::connect((url.host(), url.port())),
        )
        .await
        .map_err(|_| connect_err("no connection within the idle timeout".into()))?
        .map_err(|e| connect_err(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        // An upload's answer comes after its whole body: bounded by the
        // push's own time-out, not by the idle one.
        let answer_within = if matches!(body, ReqBody::File { .. }) {
            self.cfg.timeout
        } else {
            self.cfg.idle_timeout
        };
        let mut req = Request::builder()
            .method(method)
            .uri(&url.path)
            .header(hyper::header::HOST, &url.authority)
            .header(
                hyper::header::USER_AGENT,
                concat!("skill-runner/", env!("CARGO_PKG_VERSION")),
            );
        if let ReqBody::File { left, .. } = &body {
            req = req.header(hyper::header::CONTENT_LENGTH, left.to_string());
        } else if let ReqBody::Bytes(b) = &body {
            req = req.header(hyper::header::CONTENT_LENGTH, b.len().to_string());
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let req = req.body(body).map_err(|e| connect_err(e.to_string()))?;
        let tls = if url.https {
            match &self.tls {
                Some(t) => Some(t.clone()),
                None => Some(self.cfg.tls()?),
            }
        } else {
            None
        };
        let fut = async {
            match tls {
                Some(config) => {
                    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(
                        url.host().to_owned(),
                    )
                    .map_err(|e| connect_err(e.to_string()))?;
                    let stream = tokio_rustls::TlsConnector::from(config)
                        .connect(name, tcp)
                        .await
                        .map_err(|e| OciError::Tls {
                            registry: url.authority.clone(),
                            reason: e.to_string(),
                        })?;
                    roundtrip(stream, req).await
                }
                None => roundtrip(tcp, req).await,
            }
            .map_err(|e| connect_err(e.to_string()))
        };
        tokio::time::timeout(answer_within, fut)
            .await
            .map_err(|_| connect_err(format!("no answer within {} s", answer_within.as_secs())))?
    }
}

async fn roundtrip<S>(stream: S, req: Request<ReqBody>) -> Result<Response<Incoming>, hyper::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send.send_request(req).await
}

/// Whether plain HTTP to `url` is refused: every request is https unless
/// its authority was given as `--insecure-registry`, and even then not
/// when one of `came_from` (the session's registry, the URLs a redirect
/// chain came from) reached that same authority over https, so that a registry
/// spoken to over TLS cannot send a request (its credentials, a package's
/// bytes) into the clear.
fn plain_http_refused(url: &Url, came_from: &[&Url], insecure: impl Fn(&str) -> bool) -> bool {
    if url.https {
        return false;
    }
    let downgrade = came_from
        .iter()
        .any(|f| f.https && f.authority == url.authority);
    downgrade || !insecure(&url.authority)
}

fn probe_display(url: &Url) -> String {
    let path = url.path.split('?').next().unwrap_or("");
    format!(
        "{}://{}{path}",
        if url.https { "https" } else { "http" },
        url.authority
    )
}

/// The `key="value"` pairs of a challenge.
fn challenge_params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq]
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        rest = &rest[eq + 1..];
        let value;
        if let Some(r) = rest.strip_prefix('"') {
            let end = r.find('"').unwrap_or(r.len());
            value = r[..end].to_owned();
            rest = r.get(end + 1..).unwrap_or("");
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_owned();
            rest = &rest[end..];
        }
        rest = rest.trim_start_matches([',', ' ']);
        out.push((key, value));
    }
    out
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads a whole body of at most `cap` bytes (manifests, tokens, errors).
pub async fn read_capped(
    resp: Response<Incoming>,
    registry: &str,
    cap: u64,
    idle: Duration,
) -> Result<Vec<u8>, OciError> {
    let mut out = Vec::new();
    let mut body = resp.into_body();
    loop {
        let frame = tokio::time::timeout(idle, body.frame())
            .await
            .map_err(|_| OciError::Stalled {
                what: "a response".into(),
                secs: idle.as_secs(),
            })?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| OciError::Connect {
            registry: registry.to_owned(),
            reason: e.to_string(),
        })?;
        if let Ok(data) = frame.into_data() {
            if out.len() as u64 + data.len() as u64 > cap {
                return Err(OciError::TooBig {
                    what: "a response".into(),
                    limit: cap,
                });
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_and_urls_are_read_as_registries_write_them() {
        let p = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        );
        assert_eq!(p[0], ("realm".into(), "https://auth.example/token".into()));
        assert_eq!(p[1].1, "registry.example");
        assert_eq!(p[2].1, "repository:a/b:pull");
        let u = Url::parse("http://127.0.0.1:5000/v2/a/blobs/uploads/x?_state=y").unwrap();
        assert_eq!((u.host(), u.port()), ("127.0.0.1", 5000));
        assert_eq!(u.join("/v2/b").unwrap().path, "/v2/b");
        assert_eq!(Url::parse("https://h").unwrap().port(), 443);
        assert!(Url::parse("ftp://h/").is_none());
        assert!(Url::parse("https://user@h/").is_none());
    }

    #[test]
    fn plain_http_goes_only_to_an_insecure_authority_never_reached_over_https() {
        let u = |t: &str| Url::parse(t).unwrap();
        let insecure = |a: &str| a == "plain:5000" || a == "both:5000";
        let tls_registry = u("https://reg.example/");
        let plain_registry = u("http://plain:5000/");
        // https is always allowed, whoever answered with it.
        assert!(!plain_http_refused(
            &u("https://cdn.example/b"),
            &[&tls_registry],
            insecure
        ));
        assert!(!plain_http_refused(
            &u("https://plain:5000/b"),
            &[&plain_registry],
            insecure
        ));
        // A TLS registry's upload location in plain HTTP on its own
        // authority, or on a host not named insecure, is refused.
        assert!(plain_http_refused(
            &u("http://reg.example/v2/a/blobs/uploads/u1"),
            &[&tls_registry],
            insecure
        ));
        assert!(plain_http_refused(
            &u("http://localhost:5443/v2/a/blobs/uploads/u1"),
            &[&tls_registry],
            insecure
        ));
        // A host named insecure may be spoken to in plain HTTP...
        assert!(!plain_http_refused(
            &u("http://plain:5000/v2/"),
            &[&plain_registry],
            insecure
        ));
        assert!(!plain_http_refused(
            &u("http://plain:5000/u"),
            &[&tls_registry],
            insecure
        ));
        // ...but not after it was reached over https (a downgrade).
        let over_tls = u("https://both:5000/v2/a/blobs/x");
        assert!(plain_http_refused(
            &u("http://both:5000/v2/a/blobs/x"),
            &[&tls_registry, &over_tls],
            insecure
        ));
        assert!(!plain_http_refused(
            &u("http://both:5000/v2/a/blobs/x"),
            &[&tls_registry],
            insecure
        ));
    }
}
