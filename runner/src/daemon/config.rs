//! Daemon settings: flags, environment variables and an optional TOML file,
//! parsed raw and then validated into a [`Config`] before anything listens.
//!
//! Precedence, per setting: the flag, else its environment variable (clap
//! reads both into [`ServeArgs`]), else the config file, else the default.
//! Relative paths in the config file resolve against the file's folder.
//!
//! Invariants of a [`Config`]:
//! - it listens on exactly one address: a Unix socket (the default) or TCP;
//! - TCP always has a bearer token;
//! - every root exists, is a folder and is canonical (symlinks resolved),
//!   and none is `/`;
//! - every count, size and duration is within its documented bounds.
//!
//! Every error names the setting and says what to change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;

use super::auth::{AuthError, Token};

/// Flags of `skill-runner serve`; each also reads an environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML config file; flags and environment variables override its settings.
    #[arg(long, env = "SKILL_RUNNER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Unix socket to listen on [default: DATA_DIR/run/skill-runner.sock].
    #[arg(long, env = "SKILL_RUNNER_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Listen on TCP at ADDR (e.g. 127.0.0.1:8787) instead of a Unix socket;
    /// needs a bearer token.
    #[arg(long, env = "SKILL_RUNNER_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// File holding the bearer token (SKILL_RUNNER_TOKEN may hold the token
    /// itself instead). Required with --listen; enforced on the socket too
    /// when given.
    #[arg(long, env = "SKILL_RUNNER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Host folder under which jobs may name workspace, extensions_dir and
    /// skill paths; repeat it, or separate folders with ':' in the
    /// variable [default: DATA_DIR/roots].
    #[arg(
        long = "root",
        env = "SKILL_RUNNER_ROOTS",
        value_name = "DIR",
        value_delimiter = ':'
    )]
    pub roots: Vec<PathBuf>,
    /// Executions running at once [default: twice the CPUs, at least 4].
    #[arg(long, env = "SKILL_RUNNER_MAX_RUNNING", value_name = "N")]
    pub max_running: Option<usize>,
    /// Executions waiting for a free slot; past it, 429 [default: 64].
    #[arg(long, env = "SKILL_RUNNER_MAX_QUEUED", value_name = "N")]
    pub max_queued: Option<usize>,
    /// Open client connections [default: 256].
    #[arg(long, env = "SKILL_RUNNER_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Package uploads verified at once [default: 2].
    #[arg(long, env = "SKILL_RUNNER_MAX_UPLOADS", value_name = "N")]
    pub max_uploads: Option<usize>,
    /// Largest job body, e.g. 4MiB [default: 4MiB].
    #[arg(long, env = "SKILL_RUNNER_JOB_BODY_LIMIT", value_name = "SIZE", value_parser = parse_size)]
    pub job_body_limit: Option<u64>,
    /// Largest `limits.output_bytes` a job may ask for, per stream; output
    /// is held in memory [default: 16MiB].
    #[arg(long, env = "SKILL_RUNNER_MAX_OUTPUT_BYTES", value_name = "SIZE", value_parser = parse_size)]
    pub max_output_bytes: Option<u64>,
    /// Largest bundle body [default: 64MiB].
    #[arg(long, env = "SKILL_RUNNER_PACKAGE_BODY_LIMIT", value_name = "SIZE", value_parser = parse_size)]
    pub package_body_limit: Option<u64>,
    /// Time a client has to send a request's headers, e.g. 10s [default: 10s].
    #[arg(long, env = "SKILL_RUNNER_HEADER_TIMEOUT", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub header_timeout: Option<Duration>,
    /// Time a client has to send a request's body [default: 30s].
    #[arg(long, env = "SKILL_RUNNER_BODY_TIMEOUT", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub body_timeout: Option<Duration>,
    /// A streaming client that reads nothing for this long is treated as
    /// gone and its execution cancelled [default: 30s].
    #[arg(long, env = "SKILL_RUNNER_STALL_TIMEOUT", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub stall_timeout: Option<Duration>,
    /// On SIGTERM/SIGINT, time running executions get to finish before
    /// they are cancelled [default: 10s].
    #[arg(long, env = "SKILL_RUNNER_GRACE", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub grace: Option<Duration>,
    /// Finished results kept for GET /v1/executions/{id} [default: 1000].
    #[arg(long, env = "SKILL_RUNNER_RETAIN", value_name = "N")]
    pub retain: Option<usize>,
    /// Total size of the kept results [default: 64MiB].
    #[arg(long, env = "SKILL_RUNNER_RETAIN_BYTES", value_name = "SIZE", value_parser = parse_size)]
    pub retain_bytes: Option<u64>,
    /// How long a finished result is kept [default: 15m].
    #[arg(long, env = "SKILL_RUNNER_RETAIN_FOR", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub retain_for: Option<Duration>,
    /// A stream quiet for this long gets a heartbeat event [default: 10s].
    #[arg(long, env = "SKILL_RUNNER_HEARTBEAT", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub heartbeat: Option<Duration>,
    /// A session no request has used for this long is deleted [default: 24h].
    #[arg(long, env = "SKILL_RUNNER_SESSION_IDLE", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub session_idle: Option<Duration>,
    /// Log format [default: human].
    #[arg(long, env = "SKILL_RUNNER_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Whether jobs with a network allowlist may reach loopback, private,
    /// link-local and other non-public addresses ("private": true, or an
    /// entry naming such an address) [default: true].
    #[arg(long, env = "SKILL_RUNNER_NETWORK_PRIVATE", value_name = "BOOL")]
    pub network_private: Option<bool>,
    /// An allow entry every request of every job must also match (a cap on
    /// jobs' allowlists); repeat it, or separate entries with ',' in the
    /// variable [default: no cap].
    #[arg(
        long = "network-allow",
        env = "SKILL_RUNNER_NETWORK_ALLOW",
        value_name = "ENTRY",
        value_delimiter = ','
    )]
    pub network_allow: Vec<String>,
}

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
            Listen::Tcp(a) => write!(f, "http://{a}"),
        }
    }
}

/// How many finished results are kept, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub count: usize,
    pub bytes: u64,
    pub age: Duration,
}

/// Validated daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub listen: Listen,
    pub token: Option<Token>,
    /// Canonical root folders.
    pub roots: Vec<PathBuf>,
    pub max_running: usize,
    pub max_queued: usize,
    pub max_connections: usize,
    pub max_uploads: usize,
    pub job_body_limit: u64,
    pub package_body_limit: u64,
    pub max_output_bytes: u64,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub stall_timeout: Duration,
    pub grace: Duration,
    pub retention: Retention,
    /// Quiet time after which a stream sends a heartbeat event.
    pub heartbeat: Duration,
    /// Idle time after which a session expires.
    pub session_idle: Duration,
    pub log_format: LogFormat,
    /// What jobs' network allowlists may reach (docs/daemon.md).
    pub network: crate::sandbox::net::RunnerNetwork,
    /// Findings worth a warning in the log once logging is up.
    pub warnings: Vec<String>,
}

/// The config file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    socket: Option<PathBuf>,
    listen: Option<String>,
    token_file: Option<PathBuf>,
    roots: Option<Vec<PathBuf>>,
    max_running: Option<usize>,
    max_queued: Option<usize>,
    max_connections: Option<usize>,
    max_uploads: Option<usize>,
    job_body_limit: Option<SizeText>,
    package_body_limit: Option<SizeText>,
    max_output_bytes: Option<SizeText>,
    header_timeout: Option<String>,
    body_timeout: Option<String>,
    stall_timeout: Option<String>,
    grace: Option<String>,
    retain: Option<usize>,
    retain_bytes: Option<SizeText>,
    retain_for: Option<String>,
    heartbeat: Option<String>,
    session_idle: Option<String>,
    log_format: Option<LogFormat>,
    network_private: Option<bool>,
    network_allow: Option<Vec<String>>,
}

/// A size in a config file: a number of bytes or a text like `"64MiB"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

/// Why the settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {reason}")]
    ParseFile { path: PathBuf, reason: String },
    #[error("setting {name}: {reason}")]
    Invalid { name: &'static str, reason: String },
    #[error("give either a socket or a TCP listen address, not both")]
    SocketAndListen,
    #[error("listen address {0:?} is not HOST:PORT with an IP address, e.g. 127.0.0.1:8787")]
    ListenAddr(String),
    #[error("listening on TCP needs a bearer token: write one (32+ random characters) to a file and pass --token-file FILE, or set SKILL_RUNNER_TOKEN")]
    TokenRequired,
    #[error(transparent)]
    Token(#[from] AuthError),
    #[error("socket path {0} is longer than 107 bytes, the limit of Unix sockets; pick a shorter --socket")]
    SocketPathTooLong(PathBuf),
    #[error("root {path} cannot be used: {source}; create the folder or fix --root")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("root {0} is not a folder; name folders with --root")]
    RootNotDir(PathBuf),
    #[error("cannot create the data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("root {root} overlaps the data dir {data_dir} (jobs could mount the store writable); name a folder outside it, or under {data_dir}/roots")]
    RootOverlapsData { root: PathBuf, data_dir: PathBuf },
    #[error("root / would let callers mount any host folder; name narrower folders with --root")]
    RootIsSlash,
}

/// Parses a size: bytes, or a number with K, KiB, M, MiB, G or GiB (all
/// powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size; write e.g. 1048576, 512KiB or 64MiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "{text:?} has unknown unit {other:?}; use KiB, MiB or GiB"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn invalid(name: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name,
        reason: reason.into(),
    }
}

impl Config {
    /// Merges flags/environment (`args`, `data_dir` from the global flag)
    /// with the config file and defaults, and validates the result.
    /// `env_token` is the value of `SKILL_RUNNER_TOKEN`. Creates the default
    /// root folder when it is missing.
    pub fn build(
        args: ServeArgs,
        data_dir: Option<PathBuf>,
        env_token: Option<String>,
    ) -> Result<Config, ConfigError> {
        let (file, file_dir) = match &args.config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
                        path: path.clone(),
                        source,
                    })?;
                let file: FileConfig =
                    toml::from_str(&text).map_err(|e| ConfigError::ParseFile {
                        path: path.clone(),
                        reason: e.message().to_owned(),
                    })?;
                let dir = path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("."));
                (file, dir)
            }
            None => (FileConfig::default(), PathBuf::from(".")),
        };
        let from_file = |p: PathBuf| {
            if p.is_absolute() {
                p
            } else {
                file_dir.join(p)
            }
        };
        let size = |name: &'static str, s: Option<SizeText>| -> Result<Option<u64>, ConfigError> {
            match s {
                None => Ok(None),
                Some(SizeText::Bytes(n)) => Ok(Some(n)),
                Some(SizeText::Text(t)) => parse_size(&t).map(Some).map_err(|r| invalid(name, r)),
            }
        };
        let duration =
            |name: &'static str, s: Option<String>| -> Result<Option<Duration>, ConfigError> {
                s.map(|t| {
                    humantime::parse_duration(&t).map_err(|e| {
                        invalid(
                            name,
                            format!("{t:?} is not a duration ({e}); write e.g. 10s or 2m"),
                        )
                    })
                })
                .transpose()
            };

        let data_dir = data_dir
            .or(file.data_dir.map(from_file))
            .unwrap_or_else(crate::exec::default_data_dir);
        let data_dir = absolute(&data_dir);

        let socket = args.socket.or(file.socket.map(from_file));
        let listen_text = args.listen.or(file.listen);
        let listen = match (socket, listen_text) {
            (Some(_), Some(_)) => return Err(ConfigError::SocketAndListen),
            (None, Some(addr)) => Listen::Tcp(
                addr.trim()
                    .parse()
                    .map_err(|_| ConfigError::ListenAddr(addr.clone()))?,
            ),
            (socket, None) => {
                let path = absolute(
                    &socket.unwrap_or_else(|| data_dir.join("run").join("skill-runner.sock")),
                );
                if path.as_os_str().len() > 107 {
                    return Err(ConfigError::SocketPathTooLong(path));
                }
                Listen::Unix(path)
            }
        };

        let mut warnings = Vec::new();
        let token_file = args.token_file.or(file.token_file.map(from_file));
        let token = match (token_file, env_token.filter(|t| !t.is_empty())) {
            (Some(path), _) => {
                use std::os::unix::fs::PermissionsExt;
                let token = Token::from_file(&path)?;
                if std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
                    warnings.push(format!(
                        "token file {} can be read by other users; chmod 600 it",
                        path.display()
                    ));
                }
                Some(token)
            }
            (None, Some(text)) => Some(Token::from_text(&text, "SKILL_RUNNER_TOKEN")?),
            (None, None) => None,
        };
        if let Listen::Tcp(addr) = &listen {
            if token.is_none() {
                return Err(ConfigError::TokenRequired);
            }
            if !addr.ip().is_loopback() {
                warnings.push(format!(
                    "listening on {addr}, beyond loopback, without TLS: the token and jobs travel in clear; put a TLS proxy in front or listen on 127.0.0.1"
                ));
            }
        }

        let roots = if !args.roots.is_empty() {
            args.roots
        } else if let Some(r) = file.roots {
            r.into_iter().map(from_file).collect()
        } else {
            let default = data_dir.join("roots");
            std::fs::create_dir_all(&default).map_err(|source| ConfigError::Root {
                path: default.clone(),
                source,
            })?;
            vec![default]
        };
        let roots = roots
            .iter()
            .filter(|r| !r.as_os_str().is_empty())
            .map(|r| canonical_root(r))
            .collect::<Result<Vec<_>, _>>()?;
        if roots.is_empty() {
            return Err(invalid(
                "roots",
                "no root folder given; name one with --root DIR",
            ));
        }
        // A root must not expose the store or the execution folders.
        std::fs::create_dir_all(&data_dir).map_err(|source| ConfigError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let data_real = data_dir
            .canonicalize()
            .map_err(|source| ConfigError::DataDir {
                path: data_dir.clone(),
                source,
            })?;
        if let Some(r) = roots.iter().find(|r| {
            data_real.starts_with(r)
                || (r.starts_with(&data_real) && !r.starts_with(data_real.join("roots")))
        }) {
            return Err(ConfigError::RootOverlapsData {
                root: r.clone(),
                data_dir: data_real,
            });
        }

        let network_allow = if !args.network_allow.is_empty() {
            Some(args.network_allow)
        } else {
            file.network_allow
        };
        let network = crate::sandbox::net::RunnerNetwork {
            private: args
                .network_private
                .or(file.network_private)
                .unwrap_or(true),
            allow: network_allow
                .map(|entries| {
                    entries
                        .iter()
                        .filter(|e| !e.is_empty())
                        .map(|e| {
                            crate::sandbox::net::policy::Entry::parse(e)
                                .map_err(|err| invalid("network_allow", format!("{e:?} {err}")))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()?,
        };

        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let count =
            |name: &'static str, v: Option<usize>, default: usize, min: usize, max: usize| {
                let v = v.unwrap_or(default);
                if v < min || v > max {
                    Err(invalid(
                        name,
                        format!("{v} is out of range; use {min} to {max}"),
                    ))
                } else {
                    Ok(v)
                }
            };
        let bytes = |name: &'static str, v: Option<u64>, default: u64, min: u64| {
            let v = v.unwrap_or(default);
            if v < min {
                Err(invalid(
                    name,
                    format!("{v} bytes is too small; use at least {min}"),
                ))
            } else {
                Ok(v)
            }
        };
        let time = |name: &'static str, v: Option<Duration>, default: Duration| {
            let v = v.unwrap_or(default);
            if v.is_zero() {
                Err(invalid(name, "must be longer than zero"))
            } else {
                Ok(v)
            }
        };

        let config = Config {
            listen,
            token,
            roots,
            max_running: count(
                "max_running",
                args.max_running.or(file.max_running),
                (2 * cpus).max(4),
                1,
                4096,
            )?,
            max_queued: count(
                "max_queued",
                args.max_queued.or(file.max_queued),
                64,
                0,
                100_000,
            )?,
            max_connections: count(
                "max_connections",
                args.max_connections.or(file.max_connections),
                256,
                1,
                100_000,
            )?,
            max_uploads: count(
                "max_uploads",
                args.max_uploads.or(file.max_uploads),
                2,
                1,
                64,
            )?,
            job_body_limit: bytes(
                "job_body_limit",
                args.job_body_limit
                    .or(size("job_body_limit", file.job_body_limit)?),
                4 << 20,
                1024,
            )?,
            package_body_limit: bytes(
                "package_body_limit",
                args.package_body_limit
                    .or(size("package_body_limit", file.package_body_limit)?),
                64 << 20,
                1024,
            )?,
            max_output_bytes: bytes(
                "max_output_bytes",
                args.max_output_bytes
                    .or(size("max_output_bytes", file.max_output_bytes)?),
                16 << 20,
                1024,
            )?,
            header_timeout: time(
                "header_timeout",
                args.header_timeout
                    .or(duration("header_timeout", file.header_timeout)?),
                Duration::from_secs(10),
            )?,
            body_timeout: time(
                "body_timeout",
                args.body_timeout
                    .or(duration("body_timeout", file.body_timeout)?),
                Duration::from_secs(30),
            )?,
            stall_timeout: time(
                "stall_timeout",
                args.stall_timeout
                    .or(duration("stall_timeout", file.stall_timeout)?),
                Duration::from_secs(30),
            )?,
            grace: time(
                "grace",
                args.grace.or(duration("grace", file.grace)?),
                Duration::from_secs(10),
            )?,
            retention: Retention {
                count: count("retain", args.retain.or(file.retain), 1000, 1, 1_000_000)?,
                bytes: args
                    .retain_bytes
                    .or(size("retain_bytes", file.retain_bytes)?)
                    .unwrap_or(64 << 20),
                age: time(
                    "retain_for",
                    args.retain_for.or(duration("retain_for", file.retain_for)?),
                    Duration::from_secs(15 * 60),
                )?,
            },
            heartbeat: time(
                "heartbeat",
                args.heartbeat.or(duration("heartbeat", file.heartbeat)?),
                Duration::from_secs(10),
            )?,
            session_idle: time(
                "session_idle",
                args.session_idle
                    .or(duration("session_idle", file.session_idle)?),
                Duration::from_secs(24 * 3600),
            )?,
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            network,
            data_dir,
            warnings,
        };
        // A job that sets no output_bytes gets its profile's default: a
        // cap under it would refuse every such job.
        let default_output = crate::sandbox::profile::BUILTIN
            .iter()
            .filter_map(|(name, _)| {
                crate::sandbox::profile::Profile::load(name, Path::new("/")).ok()
            })
            .map(|p| p.limits.output_bytes)
            .max()
            .unwrap_or(0);
        if config.max_output_bytes < default_output {
            return Err(invalid(
                "max_output_bytes",
                format!(
                    "{} bytes is below the built-in profiles' default output_bytes ({default_output} bytes), so every job that does not set limits.output_bytes would be refused; raise it to at least {default_output}",
                    config.max_output_bytes
                ),
            ));
        }
        // One execution's captured output (both streams) must fit in the
        // retention budget, or its detached result could never be fetched.
        if config.retention.bytes < 2 * config.max_output_bytes {
            return Err(invalid(
                "retain_bytes",
                format!(
                    "{} bytes is less than twice max_output_bytes ({} bytes), so one execution's output could not be retained; raise retain_bytes or lower max_output_bytes",
                    config.retention.bytes, config.max_output_bytes
                ),
            ));
        }
        Ok(config)
    }
}

/// `path` made absolute against the current folder (not resolved).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn canonical_root(path: &Path) -> Result<PathBuf, ConfigError> {
    let real = path.canonicalize().map_err(|source| ConfigError::Root {
        path: path.to_path_buf(),
        source,
    })?;
    if !real.is_dir() {
        return Err(ConfigError::RootNotDir(real));
    }
    if real == Path::new("/") {
        return Err(ConfigError::RootIsSlash);
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ServeArgs {
        ServeArgs::default()
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn defaults_listen_on_a_socket_under_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::build(args(), Some(dir.path().to_owned()), None).unwrap();
        assert_eq!(
            c.listen,
            Listen::Unix(dir.path().join("run/skill-runner.sock"))
        );
        assert_eq!(
            c.roots,
            vec![dir.path().join("roots").canonicalize().unwrap()]
        );
        assert!(c.token.is_none());
        assert_eq!(c.job_body_limit, 4 << 20);
        assert_eq!(c.package_body_limit, 64 << 20);
    }

    #[test]
    fn tcp_needs_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args();
        a.listen = Some("127.0.0.1:0".into());
        let e = Config::build(a.clone(), Some(dir.path().to_owned()), None).unwrap_err();
        assert!(matches!(e, ConfigError::TokenRequired), "{e}");
        let c = Config::build(
            a,
            Some(dir.path().to_owned()),
            Some("0123456789abcdef0123".into()),
        )
        .unwrap();
        assert!(c.token.is_some());
    }

    #[test]
    fn file_settings_apply_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("jobs")).unwrap();
        let file = dir.path().join("serve.toml");
        std::fs::write(
            &file,
            "roots = [\"jobs\"]\nmax_running = 3\njob_body_limit = \"8KiB\"\ngrace = \"2s\"\nlog_format = \"json\"\n",
        )
        .unwrap();
        let mut a = args();
        a.config = Some(file.clone());
        a.max_running = Some(5);
        let c = Config::build(a, Some(dir.path().join("data")), None).unwrap();
        assert_eq!(
            c.roots,
            vec![dir.path().join("jobs").canonicalize().unwrap()]
        );
        assert_eq!(c.max_running, 5);
        assert_eq!(c.job_body_limit, 8192);
        assert_eq!(c.grace, Duration::from_secs(2));
        assert_eq!(c.log_format, LogFormat::Json);
    }

    #[test]
    fn network_settings_cap_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::build(args(), Some(dir.path().to_owned()), None).unwrap();
        assert_eq!(c.network, crate::sandbox::net::RunnerNetwork::default());
        let file = dir.path().join("serve.toml");
        std::fs::write(
            &file,
            "network_private = false\nnetwork_allow = [\"pypi.org\", \"*.pythonhosted.org\"]\n",
        )
        .unwrap();
        let mut a = args();
        a.config = Some(file.clone());
        let c = Config::build(a, Some(dir.path().to_owned()), None).unwrap();
        assert!(!c.network.private);
        assert_eq!(c.network.allow.as_ref().map(Vec::len), Some(2));
        let mut a = args();
        a.config = Some(file);
        a.network_allow = vec!["a..b".into()];
        let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
        assert!(
            e.to_string().contains("setting network_allow: \"a..b\""),
            "{e}"
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("serve.toml");
        std::fs::write(&file, "max_runing = 3\n").unwrap();
        let mut a = args();
        a.config = Some(file);
        let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
        assert!(e.to_string().contains("max_runing"), "{e}");

        let mut a = args();
        a.roots = vec![PathBuf::from("/")];
        let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
        assert!(matches!(e, ConfigError::RootIsSlash), "{e}");

        let mut a = args();
        a.max_output_bytes = Some(1024);
        let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("below the built-in profiles' default output_bytes"),
            "{e}"
        );

        let mut a = args();
        a.roots = vec![dir.path().join("missing")];
        let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
        assert!(e.to_string().contains("create the folder"), "{e}");

        let mut a = args();
        a.roots = vec![dir.path().to_owned()];
        let e = Config::build(a, Some(dir.path().join("data")), None).unwrap_err();
        assert!(matches!(e, ConfigError::RootOverlapsData { .. }), "{e}");

        let mut a = args();
        a.max_running = Some(0);
        let e = Config::build(a, Some(dir.path().to_owned()), None).unwrap_err();
        assert!(e.to_string().contains("max_running"), "{e}");

        let mut a = args();
        a.listen = Some("localhost".into());
        let e = Config::build(a, Some(dir.path().to_owned()), Some("x".repeat(32))).unwrap_err();
        assert!(matches!(e, ConfigError::ListenAddr(_)), "{e}");

        let mut a = args();
        a.listen = Some("127.0.0.1:1".into());
        a.socket = Some(dir.path().join("s.sock"));
        let e = Config::build(a, Some(dir.path().to_owned()), Some("x".repeat(32))).unwrap_err();
        assert!(matches!(e, ConfigError::SocketAndListen), "{e}");
    }
}
