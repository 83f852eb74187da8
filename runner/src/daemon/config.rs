//! Daemon settings: flags, environment variables and an optional TOML file,
//! declared once in a table, merged, and validated into a [`Config`]
//! before anything listens.
//!
//! Precedence, per setting: the flag, else its environment variable (clap
//! reads both into [`ServeArgs`]), else the config file, else the default.
//! Relative paths in the config file resolve against the file's folder.
//!
//! Each setting is one row of the `settings!` table below: its `--help`
//! text, flag, variable, file key, default and check. The flags
//! ([`ServeArgs`]), the file's keys and one merge per setting (precedence,
//! default, check) all come from that row, so whichever way a value
//! arrives it meets the same default and the same check.
//! What spans settings (one listen address, the token, the roots against
//! the data dir, output against retention) is checked in [`Config::build`].
//! `SKILL_RUNNER_TOKEN`, the token itself, is the one setting outside the
//! table: it is a secret with neither flag nor file key, read by the caller
//! and handed to [`Config::build`].
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
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::auth::{AuthError, Token};
use super::descriptors::{self, Budget, Demand, DescriptorError};
use crate::datadir::{DataDir, DataDirError};

/// Declares the settings, one row each:
///
/// ```text
/// name: FlagType {
///     /// `--help` text
///     flag: "long-name" <"VALUE"> [more clap `arg` attributes],
///     global: "long-name",   // instead of `flag`: a flag of the whole command
///     env: "SKILL_RUNNER_…",
///     file: "key",           // absent: the file cannot set it
///     default: expr,         // absent: the setting stays an `Option`
///     check: fn(&'static str, value) -> Result<value, ConfigError>,
/// }
/// ```
///
/// A row with a `flag` becomes a [`ServeArgs`] field, one with a `file` key
/// a `FileConfig` field, and every row a `Layers` method of its name that
/// merges the flag (or variable) with the file, then applies the default
/// and the check. Rows stand in the order of the file's keys, which its
/// "unknown field" error lists; `--help` lists the flags in the same order
/// unless a row says otherwise.
macro_rules! settings {
    (
        $(
            $name:ident: $ty:ty {
                $(
                    $(#[doc = $doc:literal])*
                    flag: $flag:literal <$value:literal> $([$($clap:tt)*])?,
                )?
                $(global: $global:literal,)?
                env: $env:literal,
                $(file: $file:literal,)?
                $(default: $default:expr,)?
                $(check: $check:expr,)?
            }
        )*
    ) => {
        /// Flags of `skill-runner serve`; each also reads an environment variable.
        #[derive(Debug, Clone, Default, Args)]
        pub struct ServeArgs {
            $($(
                $(#[doc = $doc])*
                #[arg(long = $flag, env = $env, value_name = $value $(, $($clap)*)?)]
                pub $name: $ty,
            )?)*
        }

        /// The config file as written.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileConfig {
            $($(
                #[serde(rename = $file)]
                $name: Option<<$ty as Layered>::File>,
            )?)*
        }

        impl Layers {
            $(
                fn $name(&self) -> Result<settings!(@value $ty $(, $default)?), ConfigError> {
                    let name = stringify!($name);
                    let flag: $ty = settings!(@flag
                        [self.args.$name.clone()] [self.global.$name.clone()]
                        $($flag)? $(global $global)?);
                    let file = settings!(@file [self.file.$name.clone()] $($file)?);
                    let value = Layered::merge(flag, file, name, &self.dir)?;
                    $(let value = value.unwrap_or_else(|| $default);)?
                    $(let value = ($check)(name, value)?;)?
                    Ok(value)
                }
            )*
        }

        /// The table as data, for the tests that hold it to `--help`, the
        /// file and docs/daemon.md.
        #[cfg(test)]
        const SETTINGS: &[Setting] = &[$(
            Setting {
                name: stringify!($name),
                flag: settings!(@some $($flag)?),
                global: settings!(@some $($global)?),
                env: $env,
                file: settings!(@some $($file)?),
            },
        )*];
    };
    (@value $ty:ty) => { Option<<$ty as Layered>::Value> };
    (@value $ty:ty, $default:expr) => { <$ty as Layered>::Value };
    (@flag [$($args:tt)*] [$($global:tt)*] $flag:literal) => { $($args)* };
    (@flag [$($args:tt)*] [$($global:tt)*] global $name:literal) => { $($global)* };
    (@file [$($file:tt)*] $key:literal) => { $($file)* };
    (@file [$($file:tt)*]) => { None };
    (@some $text:literal) => { Some($text) };
    (@some) => { None };
}

settings! {
    config: Option<PathBuf> {
        /// TOML config file; flags and environment variables override its settings.
        flag: "config" <"FILE">,
        env: "SKILL_RUNNER_CONFIG",
    }
    // The global `--data-dir` (main.rs), which `Config::build` is given.
    data_dir: Option<PathBuf> {
        global: "data-dir",
        env: "SKILL_RUNNER_DATA_DIR",
        file: "data_dir",
        default: crate::exec::default_data_dir(),
    }
    socket: Option<PathBuf> {
        /// Unix socket to listen on [default: DATA_DIR/run/skill-runner.sock].
        flag: "socket" <"PATH">,
        env: "SKILL_RUNNER_SOCKET",
        file: "socket",
    }
    listen: Option<String> {
        /// Listen on TCP at ADDR (e.g. 127.0.0.1:8787) instead of a Unix socket;
        /// needs a bearer token.
        flag: "listen" <"ADDR">,
        env: "SKILL_RUNNER_LISTEN",
        file: "listen",
    }
    token_file: Option<PathBuf> {
        /// File holding the bearer token (SKILL_RUNNER_TOKEN may hold the token
        /// itself instead). Required with --listen; enforced on the socket too
        /// when given.
        flag: "token-file" <"FILE">,
        env: "SKILL_RUNNER_TOKEN_FILE",
        file: "token_file",
    }
    // No default here: the default folder depends on the data dir and is
    // created, so `Config::build` supplies it.
    roots: Vec<PathBuf> {
        /// Host folder under which jobs may name workspace, extensions_dir and
        /// skill paths; repeat it, or separate folders with ':' in the
        /// variable [default: DATA_DIR/roots].
        flag: "root" <"DIR"> [value_delimiter = ':'],
        env: "SKILL_RUNNER_ROOTS",
        file: "roots",
    }
    max_running: Option<usize> {
        /// Executions running at once [default: twice the CPUs, at least 4].
        flag: "max-running" <"N">,
        env: "SKILL_RUNNER_MAX_RUNNING",
        file: "max_running",
        default: (2 * cpus()).max(4),
        check: within(1, 4096),
    }
    max_queued: Option<usize> {
        /// Executions waiting for a free slot; past it, 429 [default: 64].
        flag: "max-queued" <"N">,
        env: "SKILL_RUNNER_MAX_QUEUED",
        file: "max_queued",
        default: 64,
        check: within(0, 100_000),
    }
    max_connections: Option<usize> {
        /// Open client connections [default: 256].
        flag: "max-connections" <"N">,
        env: "SKILL_RUNNER_MAX_CONNECTIONS",
        file: "max_connections",
        default: 256,
        check: within(1, 100_000),
    }
    max_uploads: Option<usize> {
        /// Package uploads verified at once [default: 2].
        flag: "max-uploads" <"N">,
        env: "SKILL_RUNNER_MAX_UPLOADS",
        file: "max_uploads",
        default: 2,
        check: within(1, 64),
    }
    // No default here: what the descriptor limit leaves (`Config::build`).
    max_proxy_connections: Option<usize> {
        /// Connections open through the network proxy at once, across all
        /// executions (each holds two file descriptors) [default: what
        /// RLIMIT_NOFILE leaves, at most 64 per running execution].
        flag: "max-proxy-connections" <"N">,
        env: "SKILL_RUNNER_MAX_PROXY_CONNECTIONS",
        file: "max_proxy_connections",
    }
    job_body_limit: Option<u64> {
        /// Largest job body, e.g. 4MiB [default: 4MiB].
        flag: "job-body-limit" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_JOB_BODY_LIMIT",
        file: "job_body_limit",
        default: 4 << 20,
        check: at_least(1024),
    }
    // `--help` has always listed this flag after --max-output-bytes.
    package_body_limit: Option<u64> {
        /// Largest bundle body [default: 64MiB].
        flag: "package-body-limit" <"SIZE"> [value_parser = parse_size, display_order = 11],
        env: "SKILL_RUNNER_PACKAGE_BODY_LIMIT",
        file: "package_body_limit",
        default: 64 << 20,
        check: at_least(1024),
    }
    max_bundle_skills: Option<usize> {
        /// Skills one bundle upload may hold; past it, 400 bad_bundle [default: 256].
        flag: "max-bundle-skills" <"N">,
        env: "SKILL_RUNNER_MAX_BUNDLE_SKILLS",
        file: "max_bundle_skills",
        default: crate::package::format::PackageLimits::default().max_bundle_skills,
        check: within(1, 100_000),
    }
    strict_limits: Option<bool> {
        /// Refuse jobs whose memory or pids limit would be held per process by
        /// an rlimit, not by a cgroup (503 sandbox_unavailable) [default: false].
        flag: "strict-limits" <"BOOL">,
        env: "SKILL_RUNNER_STRICT_LIMITS",
        file: "strict_limits",
        default: false,
    }
    env_builds: Option<bool> {
        /// Let `POST /v1/environments` build from a lock (pip's fetch and
        /// install in their sandboxes, one build at a time); off, only
        /// uploads of a built tree are taken [default: false].
        flag: "env-builds" <"BOOL">,
        env: "SKILL_RUNNER_ENV_BUILDS",
        file: "env_builds",
        default: false,
    }
    receipts: Option<bool> {
        /// Sign every result with a receipt (docs/receipts.md) [default: true].
        flag: "receipts" <"BOOL">,
        env: "SKILL_RUNNER_RECEIPTS",
        file: "receipts",
        default: true,
    }
    receipt_key: Option<PathBuf> {
        /// The ed25519 PKCS#8 PEM key receipts are signed with (0600, the
        /// runner's) [default: DATA_DIR/keys/receipt-ed25519.pem, made on first use].
        flag: "receipt-key" <"FILE">,
        env: "SKILL_RUNNER_RECEIPT_KEY",
        file: "receipt_key",
    }
    max_output_bytes: Option<u64> {
        /// Largest `limits.output_bytes` a job may ask for, per stream; output
        /// is held in memory [default: 16MiB].
        flag: "max-output-bytes" <"SIZE"> [value_parser = parse_size, display_order = 10],
        env: "SKILL_RUNNER_MAX_OUTPUT_BYTES",
        file: "max_output_bytes",
        default: 16 << 20,
        check: at_least(1024),
    }
    max_files: Option<usize> {
        /// Files a job's `files` may hold [default: 1000].
        flag: "max-files" <"N">,
        env: "SKILL_RUNNER_MAX_FILES",
        file: "max_files",
        default: crate::exec::files::FileBounds::default().input_files,
        check: within(0, 1_000_000),
    }
    max_file_bytes: Option<u64> {
        /// Largest file of a job's `files`, decoded [default: 16MiB].
        flag: "max-file-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_MAX_FILE_BYTES",
        file: "max_file_bytes",
        default: crate::exec::files::FileBounds::default().input_file_bytes,
    }
    max_files_bytes: Option<u64> {
        /// Bytes of all of a job's `files`, decoded; the job body limit bounds
        /// them too [default: 64MiB].
        flag: "max-files-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_MAX_FILES_BYTES",
        file: "max_files_bytes",
        default: crate::exec::files::FileBounds::default().input_bytes,
    }
    max_outputs: Option<usize> {
        /// Output files kept per execution [default: 1000].
        flag: "max-outputs" <"N">,
        env: "SKILL_RUNNER_MAX_OUTPUTS",
        file: "max_outputs",
        default: crate::exec::files::FileBounds::default().output_files,
        check: within(0, 1_000_000),
    }
    max_output_file_bytes: Option<u64> {
        /// Largest output file kept [default: 256MiB].
        flag: "max-output-file-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_MAX_OUTPUT_FILE_BYTES",
        file: "max_output_file_bytes",
        default: crate::exec::files::FileBounds::default().output_file_bytes,
    }
    max_kept_outputs_bytes: Option<u64> {
        /// Bytes of kept output files of all retained executions together, on
        /// disk in the data dir; past it, outputs are listed `truncated`
        /// [default: 4GiB].
        flag: "max-kept-outputs-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_MAX_KEPT_OUTPUTS_BYTES",
        file: "max_kept_outputs_bytes",
        default: crate::exec::files::FileBounds::default().kept_bytes,
    }
    max_outputs_bytes: Option<u64> {
        /// Bytes of output files kept per execution, on disk in the data dir
        /// while its result is retained [default: 1GiB].
        flag: "max-outputs-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_MAX_OUTPUTS_BYTES",
        file: "max_outputs_bytes",
        default: crate::exec::files::FileBounds::default().output_bytes,
    }
    header_timeout: Option<Duration> {
        /// Time a client has to send a request's headers, e.g. 10s [default: 10s].
        flag: "header-timeout" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_HEADER_TIMEOUT",
        file: "header_timeout",
        default: Duration::from_secs(10),
        check: longer_than_zero,
    }
    body_timeout: Option<Duration> {
        /// Time a client has to send a request's body [default: 30s].
        flag: "body-timeout" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_BODY_TIMEOUT",
        file: "body_timeout",
        default: Duration::from_secs(30),
        check: longer_than_zero,
    }
    stall_timeout: Option<Duration> {
        /// A streaming client that reads nothing for this long is treated as
        /// gone: its execution cancelled, its file download cut off
        /// [default: 30s].
        flag: "stall-timeout" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_STALL_TIMEOUT",
        file: "stall_timeout",
        default: Duration::from_secs(30),
        check: longer_than_zero,
    }
    grace: Option<Duration> {
        /// On SIGTERM/SIGINT, time running executions get to finish before
        /// they are cancelled [default: 10s].
        flag: "grace" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_GRACE",
        file: "grace",
        default: Duration::from_secs(10),
        check: longer_than_zero,
    }
    retain: Option<usize> {
        /// Finished results kept for GET /v1/executions/{id} [default: 1000].
        flag: "retain" <"N">,
        env: "SKILL_RUNNER_RETAIN",
        file: "retain",
        default: 1000,
        check: within(1, 1_000_000),
    }
    // Its bound (twice max_output_bytes) spans two settings: `Config::build`.
    retain_bytes: Option<u64> {
        /// Total size of the kept results [default: 64MiB].
        flag: "retain-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_RETAIN_BYTES",
        file: "retain_bytes",
        default: 64 << 20,
    }
    retain_for: Option<Duration> {
        /// How long a finished result is kept [default: 15m].
        flag: "retain-for" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_RETAIN_FOR",
        file: "retain_for",
        default: Duration::from_secs(15 * 60),
        check: longer_than_zero,
    }
    heartbeat: Option<Duration> {
        /// A stream quiet for this long gets a heartbeat event [default: 10s].
        flag: "heartbeat" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_HEARTBEAT",
        file: "heartbeat",
        default: Duration::from_secs(10),
        check: longer_than_zero,
    }
    session_idle: Option<Duration> {
        /// A session no request has used for this long is deleted [default: 24h].
        flag: "session-idle" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_SESSION_IDLE",
        file: "session_idle",
        default: Duration::from_secs(24 * 3600),
        check: longer_than_zero,
    }
    prepared_sandboxes: Option<usize> {
        /// Sandboxes kept prepared for each session's next command; 0 turns
        /// prepared sandboxes off [default: 0].
        flag: "prepared-sandboxes" <"N">,
        env: "SKILL_RUNNER_PREPARED_SANDBOXES",
        file: "prepared_sandboxes",
        default: 0,
        check: within(0, 16),
    }
    prepared_total: Option<usize> {
        /// Prepared sandboxes the daemon keeps in all sessions together
        /// [default: 64].
        flag: "prepared-total" <"N">,
        env: "SKILL_RUNNER_PREPARED_TOTAL",
        file: "prepared_total",
        default: 64,
        check: within(1, 1024),
    }
    prepared_memory: Option<u64> {
        /// Host memory (PSS) the prepared sandboxes of all sessions may
        /// hold together; a refill past it stops [default: 256MiB].
        flag: "prepared-memory" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_PREPARED_MEMORY",
        file: "prepared_memory",
        default: 256 << 20,
        check: at_least(1 << 20),
    }
    prepared_idle: Option<Duration> {
        /// A prepared sandbox no command took for this long is discarded
        /// [default: 60s].
        flag: "prepared-idle" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_PREPARED_IDLE",
        file: "prepared_idle",
        default: Duration::from_secs(60),
        check: longer_than_zero,
    }
    mcp_sessions: Option<usize> {
        /// MCP sessions (`/v1/sessions/{id}/mcp`) live at once in the
        /// daemon; an `initialize` beyond is 429 busy [default: 256].
        flag: "mcp-sessions" <"N">,
        env: "SKILL_RUNNER_MCP_SESSIONS",
        file: "mcp_sessions",
        default: 256,
        check: within(1, 65536),
    }
    mcp_sessions_per_session: Option<usize> {
        /// MCP sessions live at once for one session [default: 16].
        flag: "mcp-sessions-per-session" <"N">,
        env: "SKILL_RUNNER_MCP_SESSIONS_PER_SESSION",
        file: "mcp_sessions_per_session",
        default: 16,
        check: within(1, 65536),
    }
    file_body_limit: Option<u64> {
        /// Largest file uploaded into a session workspace in one PUT [default: 64MiB].
        flag: "file-body-limit" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_FILE_BODY_LIMIT",
        file: "file_body_limit",
        default: 64 << 20,
        check: at_least(1),
    }
    max_downloads: Option<usize> {
        /// Session workspace files streamed to clients at once; more get 429 [default: 16].
        flag: "max-downloads" <"N">,
        env: "SKILL_RUNNER_MAX_DOWNLOADS",
        file: "max_downloads",
        default: 16,
        check: within(1, 4096),
    }
    workspace_bytes: Option<u64> {
        /// Most a managed session workspace may hold after an upload [default: 1GiB].
        flag: "workspace-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_WORKSPACE_BYTES",
        file: "workspace_bytes",
        default: 1 << 30,
        check: at_least(4096),
    }
    otlp_endpoint: Option<String> {
        /// Export a trace of each execution over OTLP/HTTP (JSON) to this base
        /// URL (http://HOST:PORT; spans go to <URL>/v1/traces) [default: off].
        flag: "otlp-endpoint" <"URL">,
        env: "OTEL_EXPORTER_OTLP_ENDPOINT",
        file: "otlp_endpoint",
    }
    log_format: Option<LogFormat> {
        /// Log format [default: human].
        flag: "log-format" <"FORMAT">,
        env: "SKILL_RUNNER_LOG_FORMAT",
        file: "log_format",
        default: LogFormat::default(),
    }
    network_private: Option<bool> {
        /// Whether jobs with a network allowlist may reach loopback, private,
        /// link-local and other non-public addresses ("private": true, or an
        /// entry naming such an address) [default: true].
        flag: "network-private" <"BOOL">,
        env: "SKILL_RUNNER_NETWORK_PRIVATE",
        file: "network_private",
        default: true,
    }
    // Registries are checked and loaded in `Config::build` (`super::pulls`).
    registries: Vec<String> {
        /// A registry (HOST[:PORT]) jobs' `source` may pull packages and
        /// environments from; repeat it, or separate them with ',' in the
        /// variable [default: none, no pulls].
        flag: "registry" <"HOST[:PORT]"> [value_delimiter = ','],
        env: "SKILL_RUNNER_REGISTRIES",
        file: "registries",
    }
    registry_config: Option<PathBuf> {
        /// Docker-style config.json with the registries' credentials
        /// (auths."HOST".auth) [default: $DOCKER_CONFIG/config.json or
        /// ~/.docker/config.json when present].
        flag: "registry-config" <"FILE">,
        env: "SKILL_RUNNER_REGISTRY_CONFIG",
        file: "registry_config",
    }
    insecure_registries: Vec<String> {
        /// A registry (HOST[:PORT], also given to --registry) spoken to in
        /// plain HTTP, without TLS; repeat it [default: none, TLS for all].
        flag: "insecure-registry" <"HOST[:PORT]"> [value_delimiter = ','],
        env: "SKILL_RUNNER_INSECURE_REGISTRIES",
        file: "insecure_registries",
    }
    registry_ca: Vec<PathBuf> {
        /// A PEM file of CA certificates trusted for registries beside the
        /// system's; repeat it [default: the system's roots only].
        flag: "registry-ca" <"FILE"> [value_delimiter = ':'],
        env: "SKILL_RUNNER_REGISTRY_CA",
        file: "registry_ca",
    }
    pull_max_bytes: Option<u64> {
        /// Largest package layer a pull reads [default: 1GiB].
        flag: "pull-max-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_PULL_MAX_BYTES",
        file: "pull_max_bytes",
        default: 1 << 30,
        check: at_least(1024),
    }
    pull_max_env_bytes: Option<u64> {
        /// Largest environment layer a pull reads [default: 16GiB].
        flag: "pull-max-env-bytes" <"SIZE"> [value_parser = parse_size],
        env: "SKILL_RUNNER_PULL_MAX_ENV_BYTES",
        file: "pull_max_env_bytes",
        default: 16 << 30,
        check: at_least(1024),
    }
    pull_timeout: Option<Duration> {
        /// Most time one pull may take; past it the jobs waiting for it are
        /// refused with pull_failed [default: 10m].
        flag: "pull-timeout" <"DURATION"> [value_parser = humantime::parse_duration],
        env: "SKILL_RUNNER_PULL_TIMEOUT",
        file: "pull_timeout",
        default: Duration::from_secs(600),
        check: longer_than_zero,
    }
    // Each entry is parsed in `Config::build`, into the sandbox's policy type.
    network_allow: Vec<String> {
        /// An allow entry every request of every job must also match (a cap on
        /// jobs' allowlists); repeat it, or separate entries with ',' in the
        /// variable [default: no cap].
        flag: "network-allow" <"ENTRY"> [value_delimiter = ','],
        env: "SKILL_RUNNER_NETWORK_ALLOW",
        file: "network_allow",
    }
}

/// One setting's sources before its default: the flag or its variable
/// (clap read them into `args`, main.rs into `global`) and the config file.
struct Layers {
    args: ServeArgs,
    global: GlobalArgs,
    file: FileConfig,
    /// The config file's folder: relative paths in the file resolve here.
    dir: PathBuf,
}

/// Flags of the whole command that are also daemon settings.
struct GlobalArgs {
    data_dir: Option<PathBuf>,
}

impl Layers {
    /// Reads the config file that `--config` (or its variable) names, if any.
    fn read(args: ServeArgs, global: GlobalArgs) -> Result<Layers, ConfigError> {
        let mut layers = Layers {
            args,
            global,
            file: FileConfig::default(),
            dir: PathBuf::from("."),
        };
        if let Some(path) = layers.config()? {
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::ReadFile {
                path: path.clone(),
                source,
            })?;
            layers.file = toml::from_str(&text).map_err(|e| ConfigError::ParseFile {
                path: path.clone(),
                reason: e.message().to_owned(),
            })?;
            layers.dir = path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
        }
        Ok(layers)
    }
}

/// How one setting's flag value and file value merge: the flag (or its
/// variable) wins when given; a flag that repeats (`Vec`) counts as given
/// when it has at least one value.
trait Layered {
    /// The setting's value once merged.
    type Value;
    /// The value as the config file spells it.
    type File: DeserializeOwned;
    /// The file's value is converted, and refused if bad, even when the
    /// flag wins.
    fn merge(
        self,
        file: Option<Self::File>,
        name: &'static str,
        dir: &Path,
    ) -> Result<Option<Self::Value>, ConfigError>;
}

impl<T: FileValue> Layered for Option<T> {
    type Value = T;
    type File = T::Raw;
    fn merge(
        self,
        file: Option<T::Raw>,
        name: &'static str,
        dir: &Path,
    ) -> Result<Option<T>, ConfigError> {
        let file = file.map(|raw| T::from_file(raw, name, dir)).transpose()?;
        Ok(self.or(file))
    }
}

impl<T: FileValue> Layered for Vec<T> {
    type Value = Vec<T>;
    type File = Vec<T::Raw>;
    fn merge(
        self,
        file: Option<Vec<T::Raw>>,
        name: &'static str,
        dir: &Path,
    ) -> Result<Option<Vec<T>>, ConfigError> {
        let file = file
            .map(|raws| {
                raws.into_iter()
                    .map(|raw| T::from_file(raw, name, dir))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(if self.is_empty() { file } else { Some(self) })
    }
}

/// A value as the config file holds it, made into what the flag would give.
trait FileValue: Sized {
    type Raw: DeserializeOwned;
    fn from_file(raw: Self::Raw, name: &'static str, dir: &Path) -> Result<Self, ConfigError>;
}

/// Values the file holds exactly as a flag gives them.
macro_rules! as_written {
    ($($t:ty),*) => {$(
        impl FileValue for $t {
            type Raw = $t;
            fn from_file(raw: $t, _: &'static str, _: &Path) -> Result<$t, ConfigError> {
                Ok(raw)
            }
        }
    )*};
}
as_written!(String, usize, bool, LogFormat);

/// A relative path in the file resolves against the file's folder.
impl FileValue for PathBuf {
    type Raw = PathBuf;
    fn from_file(raw: PathBuf, _: &'static str, dir: &Path) -> Result<PathBuf, ConfigError> {
        Ok(if raw.is_absolute() {
            raw
        } else {
            dir.join(raw)
        })
    }
}

/// Every `u64` setting is a size: bytes, or a text such as `"64MiB"`.
impl FileValue for u64 {
    type Raw = SizeText;
    fn from_file(raw: SizeText, name: &'static str, _: &Path) -> Result<u64, ConfigError> {
        match raw {
            SizeText::Bytes(n) => Ok(n),
            SizeText::Text(t) => parse_size(&t).map_err(|r| invalid(name, r)),
        }
    }
}

/// A duration is a text such as `"10s"`, as for the flag.
impl FileValue for Duration {
    type Raw = String;
    fn from_file(raw: String, name: &'static str, _: &Path) -> Result<Duration, ConfigError> {
        humantime::parse_duration(&raw).map_err(|e| {
            invalid(
                name,
                format!("{raw:?} is not a duration ({e}); write e.g. 10s or 2m"),
            )
        })
    }
}

/// A check: the count is in `min..=max`.
fn within(min: usize, max: usize) -> impl Fn(&'static str, usize) -> Result<usize, ConfigError> {
    move |name, v| {
        if v < min || v > max {
            Err(invalid(
                name,
                format!("{v} is out of range; use {min} to {max}"),
            ))
        } else {
            Ok(v)
        }
    }
}

/// A check: the size is at least `min` bytes.
fn at_least(min: u64) -> impl Fn(&'static str, u64) -> Result<u64, ConfigError> {
    move |name, v| {
        if v < min {
            Err(invalid(
                name,
                format!("{v} bytes is too small; use at least {min}"),
            ))
        } else {
            Ok(v)
        }
    }
}

/// A check: the duration is longer than zero.
fn longer_than_zero(name: &'static str, v: Duration) -> Result<Duration, ConfigError> {
    if v.is_zero() {
        Err(invalid(name, "must be longer than zero"))
    } else {
        Ok(v)
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// One row of the table, as the tests read it.
#[cfg(test)]
struct Setting {
    name: &'static str,
    flag: Option<&'static str>,
    global: Option<&'static str>,
    env: &'static str,
    file: Option<&'static str>,
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
/// The bounds of prepared sandboxes (docs/prepared.md): three rows of
/// the settings table.
#[derive(Debug, Clone, Copy)]
pub struct PreparedBounds {
    /// Per session; 0 turns prepared sandboxes off.
    pub per_session: usize,
    pub total: usize,
    /// Host memory (PSS, bytes) they may hold in all.
    pub memory: u64,
    /// Unused for this long: discarded.
    pub idle: Duration,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The opened data dir.
    pub data: DataDir,
    pub listen: Listen,
    pub token: Option<Token>,
    /// Canonical root folders.
    pub roots: Vec<PathBuf>,
    pub max_running: usize,
    pub max_queued: usize,
    pub max_connections: usize,
    /// The descriptor limit and the proxy cap sized from it.
    pub descriptors: Budget,
    pub max_uploads: usize,
    pub job_body_limit: u64,
    pub package_body_limit: u64,
    /// Skills one bundle may hold.
    pub max_bundle_skills: usize,
    /// Refuse jobs whose memory or pids limit no cgroup would hold.
    pub strict_limits: bool,
    /// `POST /v1/environments` may build from a lock.
    pub env_builds: bool,
    /// Sign results with a receipt, with this key file (`None`: the data
    /// dir's own).
    pub receipts: bool,
    pub receipt_key: Option<PathBuf>,
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
    /// Prepared sandboxes per session (0: off), in all, and their idle
    /// bound (docs/prepared.md).
    pub prepared: PreparedBounds,
    /// MCP sessions live at once, in all and per session.
    pub mcp_sessions: super::mcp_sessions::Caps,
    /// Largest single upload into a managed workspace.
    pub file_body_limit: u64,
    /// Most a managed workspace may hold after an upload.
    pub workspace_bytes: u64,
    /// Session file downloads streamed at once.
    pub max_downloads: usize,
    pub log_format: LogFormat,
    /// Where execution traces are exported (OTLP/HTTP), when at all.
    pub otlp: Option<super::trace::Endpoint>,
    /// What jobs' network allowlists may reach (docs/daemon.md).
    pub network: crate::sandbox::net::RunnerNetwork,
    /// Findings worth a warning in the log once logging is up.
    pub warnings: Vec<String>,
    /// Bounds on jobs' `files` and `outputs` (docs/files.md).
    pub files: crate::exec::files::FileBounds,
    /// The registries jobs' `source` may pull from, and how (docs/daemon.md, "Pulls from registries").
    pub pulls: PullSettings,
}

/// The registries jobs may pull from, and how to reach them.
#[derive(Clone)]
pub struct PullSettings {
    /// `host[:port]`s, lowercase: the only registries spoken to.
    pub allowed: Vec<String>,
    pub registry: crate::package::oci::RegistryConfig,
}

// By hand: the credentials are never printed.
impl std::fmt::Debug for PullSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSettings")
            .field("allowed", &self.allowed)
            .field("insecure", &self.registry.insecure)
            .field(
                "credentials_for",
                &self.registry.auths.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl PullSettings {
    /// The daemon's settings: each registry checked as a reference's host
    /// is, an insecure one only if it is also allowed, the credentials
    /// file and CAs read now (a bad one refuses the start).
    pub fn build(
        registries: Vec<String>,
        config_file: Option<PathBuf>,
        insecure: Vec<String>,
        ca_files: Vec<PathBuf>,
        max_package_bytes: u64,
        max_env_bytes: u64,
        timeout: Duration,
    ) -> Result<PullSettings, String> {
        let mut allowed = Vec::new();
        for r in registries.iter().filter(|r| !r.is_empty()) {
            let host = r.to_ascii_lowercase();
            crate::package::oci::Reference::parse(&format!("oci://{host}/x")).map_err(|_| {
                format!("--registry {r:?} is not HOST or HOST:PORT (e.g. registry.example:5000)")
            })?;
            allowed.push(host);
        }
        let insecure: Vec<String> = insecure
            .iter()
            .filter(|h| !h.is_empty())
            .map(|h| h.to_ascii_lowercase())
            .collect();
        if let Some(h) = insecure.iter().find(|h| !allowed.contains(h)) {
            return Err(format!(
                "--insecure-registry {h} is not one of the --registry hosts; give it to --registry too"
            ));
        }
        let ca_files: Vec<PathBuf> = ca_files
            .into_iter()
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        let mut registry =
            crate::package::oci::RegistryConfig::load(config_file.as_deref(), &ca_files, &insecure)
                .map_err(|e| e.to_string())?;
        registry.max_package_bytes = max_package_bytes;
        registry.max_env_bytes = max_env_bytes;
        registry.timeout = timeout;
        Ok(PullSettings { allowed, registry })
    }

    pub fn allows(&self, reference: &crate::package::oci::Reference) -> bool {
        self.allowed.contains(&reference.registry)
    }
}

/// A size in a config file: a number of bytes or a text like `"64MiB"`.
#[derive(Debug, Clone, Deserialize)]
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
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error(transparent)]
    Descriptors(#[from] DescriptorError),
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
    ///
    /// Settings are read in a fixed order, so of several bad ones the same
    /// one is always reported.
    pub fn build(
        args: ServeArgs,
        data_dir: Option<PathBuf>,
        env_token: Option<String>,
    ) -> Result<Config, ConfigError> {
        let s = Layers::read(args, GlobalArgs { data_dir })?;
        // Empty: no default (DataDir::open says what to set).
        let data_dir = s.data_dir()?;
        let data_dir = if data_dir.as_os_str().is_empty() {
            data_dir
        } else {
            absolute(&data_dir)
        };

        let listen = match (s.socket()?, s.listen()?) {
            (Some(_), Some(_)) => return Err(ConfigError::SocketAndListen),
            (None, Some(addr)) => Listen::Tcp(
                addr.trim()
                    .parse()
                    .map_err(|_| ConfigError::ListenAddr(addr.clone()))?,
            ),
            (socket, None) => {
                let path = absolute(&socket.unwrap_or_else(|| {
                    DataDir::unchecked(&data_dir)
                        .run()
                        .join("skill-runner.sock")
                }));
                if path.as_os_str().len() > 107 {
                    return Err(ConfigError::SocketPathTooLong(path));
                }
                Listen::Unix(path)
            }
        };

        let mut warnings = Vec::new();
        let token = match (s.token_file()?, env_token.filter(|t| !t.is_empty())) {
            (Some(path), _) => Some(Token::from_file(&path)?),
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

        let max_running = s.max_running()?;
        let max_queued = s.max_queued()?;
        let max_connections = s.max_connections()?;
        let max_proxy_connections = s.max_proxy_connections()?;
        if max_proxy_connections == Some(0) {
            return Err(invalid(
                "max_proxy_connections",
                "0 would refuse every proxy connection; give 1 or more, or leave it unset",
            ));
        }
        let prepared = PreparedBounds {
            per_session: s.prepared_sandboxes()?,
            total: s.prepared_total()?,
            memory: s.prepared_memory()?,
            idle: s.prepared_idle()?,
        };
        let descriptors = Budget::fit(
            Demand {
                max_running,
                max_queued,
                max_connections,
                max_proxy_connections,
                prepared: if prepared.per_session > 0 {
                    prepared.total
                } else {
                    0
                },
            },
            descriptors::current(),
        )?;
        // The data dir and its layout (the default job root among it),
        // checked and made private before anything is read from it.
        let data = DataDir::open(&data_dir, crate::sandbox::identity::data_dir_group())?;
        let roots = match s.roots()? {
            Some(roots) => roots,
            None => vec![data.job_root()],
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
        // Under any of the data dir's names (a bind mount of it too).
        if let Some((r, (place, _))) = roots
            .iter()
            .find_map(|r| data.state_at(r).map(|found| (r, found)))
        {
            return Err(ConfigError::RootOverlapsData {
                root: r.clone(),
                data_dir: place.to_owned(),
            });
        }

        let network = crate::sandbox::net::RunnerNetwork {
            connections: crate::sandbox::net::ConnectionCap::shared(
                descriptors.proxy_connections,
                max_running,
            ),
            private: s.network_private()?,
            allow: s
                .network_allow()?
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

        let config = Config {
            listen,
            token,
            roots,
            max_running,
            max_queued,
            max_connections,
            descriptors,
            max_uploads: s.max_uploads()?,
            job_body_limit: s.job_body_limit()?,
            package_body_limit: s.package_body_limit()?,
            max_bundle_skills: s.max_bundle_skills()?,
            strict_limits: s.strict_limits()?,
            env_builds: s.env_builds()?,
            receipts: s.receipts()?,
            receipt_key: s.receipt_key()?,
            max_output_bytes: s.max_output_bytes()?,
            header_timeout: s.header_timeout()?,
            body_timeout: s.body_timeout()?,
            stall_timeout: s.stall_timeout()?,
            grace: s.grace()?,
            retention: Retention {
                count: s.retain()?,
                bytes: s.retain_bytes()?,
                age: s.retain_for()?,
            },
            heartbeat: s.heartbeat()?,
            session_idle: s.session_idle()?,
            prepared,
            mcp_sessions: super::mcp_sessions::Caps {
                total: s.mcp_sessions()?,
                per_session: s.mcp_sessions_per_session()?,
            },
            file_body_limit: s.file_body_limit()?,
            workspace_bytes: s.workspace_bytes()?,
            max_downloads: s.max_downloads()?,
            log_format: s.log_format()?,
            otlp: s
                .otlp_endpoint()?
                .filter(|u| !u.is_empty())
                .map(|u| super::trace::Endpoint::parse(&u))
                .transpose()
                .map_err(|reason| ConfigError::Invalid {
                    name: "otlp_endpoint",
                    reason,
                })?,
            network,
            data,
            warnings,
            files: crate::exec::files::FileBounds {
                input_files: s.max_files()?,
                input_file_bytes: s.max_file_bytes()?,
                input_bytes: s.max_files_bytes()?,
                output_files: s.max_outputs()?,
                output_file_bytes: s.max_output_file_bytes()?,
                output_bytes: s.max_outputs_bytes()?,
                kept_bytes: s.max_kept_outputs_bytes()?,
                ..crate::exec::files::FileBounds::default()
            },
            pulls: PullSettings::build(
                s.registries()?.unwrap_or_default(),
                s.registry_config()?,
                s.insecure_registries()?.unwrap_or_default(),
                s.registry_ca()?.unwrap_or_default(),
                s.pull_max_bytes()?,
                s.pull_max_env_bytes()?,
                s.pull_timeout()?,
            )
            .map_err(|reason| invalid("registries", reason))?,
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
#[path = "config_tests.rs"]
mod tests;
