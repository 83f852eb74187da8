//! The fetch step of an environment build in a sandbox that shares only
//! the host's network (docs/environments.md, "The fetch sandbox").
//!
//! [`SandboxFetcher`] is the [`SandboxFetch`] the build asks for. It reads
//! what pip is configured with ([`pip_setup`]: the `PIP_*` variables, the
//! proxy and CA variables pip honours, pip's configuration files and the
//! paths they name) and runs the fetch under bubblewrap as
//! [`crate::sandbox::fetchbox`] describes: the host's network, the
//! read-only system, those files read-only, and a private staging folder
//! as the only writable place. The runner writes no registry host
//! anywhere: pip finds its index in its own configuration.
//!
//! A root runner runs bubblewrap as the sandbox user
//! ([`crate::sandbox::identity`]), who owns the staging folder; the build
//! then reads the wheels out of it without following links
//! ([`crate::package::environment::build::take_wheels`]).
//!
//! `SKILL_RUNNER_FETCH_PROGRAM` ([`PROGRAM_VAR`]) is for tests only: a
//! program run in the fetch sandbox in place of `PYTHON -I -m pip`, with
//! pip's arguments, to show what the sandbox lets a fetch do.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exec::runner::Runner;
use crate::package::environment::build::{
    last_lines, FetchFailed, FetchFolders, SandboxFetch, FETCH_PROGRAM_WORDS, WHEELS,
};
use crate::sandbox::fetchbox::{
    fetch_args, FetchPlan, FD_CONFIG_BASE, FD_PROGRAM, FD_STAGING, PROGRAM_PATH,
};
use crate::sandbox::profile::{Mount, Profile};
use crate::supervise::{NoSink, OutputPolicy, Spawn};

/// The test-only variable naming a program to run instead of pip.
pub const PROGRAM_VAR: &str = "SKILL_RUNNER_FETCH_PROGRAM";

/// Why the fetch sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EnvFetchError {
    #[error("the fetch step needs bubblewrap, which is not usable here: {reason}; run `skill-runner doctor`, or build elsewhere and publish the tree with env add")]
    Unavailable { reason: String },
    #[error("cannot prepare the fetch staging folder {}: {source}", path.display())]
    Prepare { path: PathBuf, source: io::Error },
    #[error("env build runs on Linux only: its fetch step needs bubblewrap; build elsewhere and publish the tree with env add")]
    LinuxOnly,
    #[error("env build cannot install here: this runner is root of a user namespace that maps no other uid, whose sandbox refuses the mode changes pip makes; build as root of the host or as an unprivileged user, or build elsewhere and publish the tree with env add")]
    RootMapped,
    #[error(transparent)]
    BuildDir(#[from] crate::exec::envbuild::EnvBuildError),
    #[error(transparent)]
    Build(#[from] crate::package::environment::build::BuildError),
    #[error(transparent)]
    Config(#[from] crate::sandbox::fetchbox::FetchboxError),
}

/// One build from a lock, as both front ends ask for it.
#[derive(Debug, Clone)]
pub struct BuildRequest<'a> {
    pub lock: &'a Path,
    pub id: &'a str,
    /// The interpreter (default [`crate::package::environment::base::DEFAULT_PYTHON`]).
    pub python: &'a str,
    pub fetch_timeout: Duration,
    pub install_timeout: Duration,
    pub limits: crate::package::environment::store::EnvLimits,
}

/// Builds an environment from a lock with both of its sandboxes: the fetch
/// here, the install as a job of `runner` ([`crate::exec::envbuild`]),
/// saying each step to `progress`. A loose lock is refused before the host
/// is looked at.
pub fn build(
    runner: &Runner,
    req: &BuildRequest<'_>,
    progress: &mut dyn FnMut(crate::package::environment::build::Step),
) -> Result<crate::package::environment::build::Built, EnvFetchError> {
    use crate::exec::envbuild::{BuildDir, SandboxInstall};
    use crate::package::environment::build::{self, BuildError, Sandboxes};
    let bytes = fs::read(req.lock).map_err(|source| BuildError::ReadLock {
        path: req.lock.to_owned(),
        source,
    })?;
    crate::package::environment::lock::parse_python(&bytes).map_err(|source| BuildError::Lock {
        path: req.lock.to_owned(),
        source,
    })?;
    let identity = runner
        .host
        .identity
        .clone()
        .map_err(|e| EnvFetchError::Unavailable {
            reason: e.to_string(),
        })?;
    if identity.root_mapped {
        // pip sets the modes of what it installs; such a sandbox refuses
        // every mode change (docs/sandbox.md).
        return Err(EnvFetchError::RootMapped);
    }
    let owner = identity.switch_to();
    let mut fetch = SandboxFetcher::new(runner, req.fetch_timeout)?;
    let dir = BuildDir::create(owner)?;
    let mut install = SandboxInstall {
        runner,
        timeout_ms: u64::try_from(req.install_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
        owner,
        disk_bytes: req.limits.max_bytes,
    };
    let built = build::build_python_in(
        &runner.environments,
        req.lock,
        req.id,
        req.python,
        &dir.folders(),
        Sandboxes {
            fetch: &mut fetch,
            install: &mut install,
        },
        &req.limits,
        progress,
    )?;
    Ok(built)
}

/// Variables pip (and the HTTP and TLS libraries it vendors) reads for
/// its index, proxies and certificates, passed through besides every
/// `PIP_*` one.
pub const PASSED_VARS: &[&str] = &[
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NETRC",
];

/// Variables whose value is a host path pip reads (or a list of index
/// locations, of which local ones are paths).
const PATH_VARS: &[&str] = &[
    "PIP_CONFIG_FILE",
    "PIP_CERT",
    "PIP_CLIENT_CERT",
    "PIP_FIND_LINKS",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NETRC",
];

/// Keys of a pip configuration file whose value names host paths.
const PATH_KEYS: &[&str] = &[
    "cert",
    "client-cert",
    "find-links",
    "index-url",
    "extra-index-url",
];

/// What the fetch sandbox passes of pip's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PipSetup {
    /// The passed variables, as the runner has them.
    pub env: Vec<(String, String)>,
    /// Host paths pip would read: its configuration files (where it looks
    /// for them, whether or not they exist) and the paths they and the
    /// variables name.
    pub paths: Vec<PathBuf>,
}

/// The absolute host path in an index or certificate setting, if any: a
/// plain absolute path or a `file://` URL.
fn local_path(value: &str) -> Option<PathBuf> {
    let p = value.strip_prefix("file://").unwrap_or(value);
    (p.starts_with('/') && !p.contains("..")).then(|| PathBuf::from(p))
}

/// The configuration files pip reads on Linux, in its own order: global
/// (`XDG_CONFIG_DIRS`, default `/etc/xdg`, then `/etc`), user (legacy
/// `~/.pip`, then `XDG_CONFIG_HOME`, default `~/.config`), the file
/// `PIP_CONFIG_FILE` names, and `~/.netrc` (read for index credentials).
pub fn pip_config_files(var: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let dirs = var("XDG_CONFIG_DIRS").unwrap_or_else(|| "/etc/xdg".into());
    for d in dirs.split(':').filter(|d| d.starts_with('/')) {
        files.push(Path::new(d).join("pip/pip.conf"));
    }
    files.push("/etc/pip.conf".into());
    if let Some(home) = var("HOME").filter(|h| h.starts_with('/')) {
        let home = PathBuf::from(home);
        files.push(home.join(".pip/pip.conf"));
        let config = var("XDG_CONFIG_HOME")
            .filter(|c| c.starts_with('/'))
            .map_or_else(|| home.join(".config"), PathBuf::from);
        files.push(config.join("pip/pip.conf"));
        files.push(home.join(".netrc"));
    }
    files.extend(var("PIP_CONFIG_FILE").as_deref().and_then(local_path));
    files
}

/// Reads what pip is configured with: `vars` is the runner's environment,
/// `read` a configuration file's text (None when it is missing). Pure.
pub fn pip_setup(vars: &[(String, String)], read: &dyn Fn(&Path) -> Option<String>) -> PipSetup {
    let var = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let env: Vec<(String, String)> = vars
        .iter()
        .filter(|(k, _)| k.starts_with("PIP_") || PASSED_VARS.contains(&k.as_str()))
        .cloned()
        .collect();
    let mut paths = pip_config_files(&var);
    for name in PATH_VARS {
        if let Some(v) = var(name) {
            paths.extend(v.split_whitespace().filter_map(local_path));
        }
    }
    for file in pip_config_files(&var) {
        let Some(text) = read(&file) else { continue };
        // INI: `key = value`, a value may go on over indented lines.
        let mut in_path_key = false;
        for line in text.lines() {
            let continued = line.starts_with([' ', '\t']) && in_path_key;
            let value = if continued {
                line.trim()
            } else if let Some((k, v)) = line.split_once(['=', ':']) {
                let key = k.trim().replace('_', "-");
                in_path_key = PATH_KEYS.contains(&key.as_str());
                if !in_path_key {
                    continue;
                }
                v.trim()
            } else {
                in_path_key = false;
                continue;
            };
            paths.extend(value.split_whitespace().filter_map(local_path));
        }
    }
    paths.sort();
    paths.dedup();
    PipSetup { env, paths }
}

/// Runs an environment build's fetch step in its sandbox; its staging
/// folder is removed when it is dropped.
#[derive(Debug)]
pub struct SandboxFetcher {
    bwrap: PathBuf,
    features: crate::sandbox::bwrap::BwrapFeatures,
    mounts: Vec<Mount>,
    setup: PipSetup,
    /// The paths of `setup` that exist, as the runner resolved them.
    config: Vec<PathBuf>,
    staging: PathBuf,
    program: Option<PathBuf>,
    identity: Option<(u32, u32)>,
    timeout: Duration,
}

impl SandboxFetcher {
    /// Makes the fetch's private staging folder (`<tmp>/skill-runner-fetch-<random>/`,
    /// owned by the sandbox user of a root runner) and reads pip's
    /// configuration from this process's environment. Refused with a
    /// sentence where bubblewrap or user namespaces are not usable, and
    /// off Linux, where there is no bubblewrap (docs/seatbelt.md).
    pub fn new(runner: &Runner, timeout: Duration) -> Result<SandboxFetcher, EnvFetchError> {
        if cfg!(not(target_os = "linux")) {
            return Err(EnvFetchError::LinuxOnly);
        }
        let unavailable = |reason: String| EnvFetchError::Unavailable { reason };
        let bwrap = runner
            .host
            .bwrap
            .clone()
            .map_err(|e| unavailable(e.to_string()))?;
        runner
            .host
            .userns
            .clone()
            .map_err(|e| unavailable(e.to_string()))?;
        let identity = runner
            .host
            .identity
            .clone()
            .map_err(|e| unavailable(e.to_string()))?
            .switch_to();
        let profile =
            Profile::load("default", Path::new("/")).map_err(|e| unavailable(e.to_string()))?;
        let vars: Vec<(String, String)> = std::env::vars().collect();
        let setup = pip_setup(&vars, &|p| {
            // A configuration file is small; a FIFO or a device is not one.
            let meta = fs::metadata(p).ok()?;
            (meta.is_file() && meta.len() <= 1 << 20)
                .then(|| fs::read_to_string(p).ok())
                .flatten()
        });
        let config: Vec<PathBuf> = setup.paths.iter().filter(|p| p.exists()).cloned().collect();
        // Before anything is made: the runner's state is never bound, by
        // pip's configuration or by the sandbox's own system binds.
        let mounts = profile.resolve_mounts(crate::sandbox::profile::host_entry);
        let (data, keys) = (
            runner.data_dir(),
            runner.signer().map_or(&[][..], |s| s.places()),
        );
        crate::sandbox::fetchbox::check_config(&config, data, keys)?;
        crate::sandbox::fetchbox::check_binds(&mounts, data, keys)?;
        let program = std::env::var_os(PROGRAM_VAR).map(PathBuf::from);
        let staging =
            std::env::temp_dir().join(format!("skill-runner-fetch-{}", crate::fsx::random_hex()));
        let err = |path: &Path| {
            let path = path.to_owned();
            move |source| EnvFetchError::Prepare { path, source }
        };
        fs::create_dir(&staging).map_err(err(&staging))?;
        let fetcher = SandboxFetcher {
            bwrap: bwrap.path,
            features: bwrap.features,
            mounts,
            setup,
            config,
            staging,
            program,
            identity,
            timeout,
        };
        let wheels = fetcher.staging.join(WHEELS);
        fs::create_dir(&wheels).map_err(err(&wheels))?;
        for p in [&fetcher.staging, &wheels] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o700)).map_err(err(p))?;
            if let Some((uid, gid)) = identity {
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).map_err(err(p))?;
            }
        }
        Ok(fetcher)
    }

    /// The environment of the fetch: pip's passed variables, then a fixed
    /// `PATH`, the staging folder as `TMPDIR`, no bytecode written.
    fn env(&self) -> Vec<(String, String)> {
        let mut env = self.setup.env.clone();
        env.retain(|(k, _)| !matches!(k.as_str(), "PATH" | "TMPDIR"));
        env.push(("PATH".into(), "/usr/bin:/bin".into()));
        env.push(("TMPDIR".into(), self.staging.display().to_string()));
        env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        env
    }

    /// The bwrap argv of one fetch `argv` (without the program name).
    pub fn args(&self, argv: &[OsString]) -> Vec<OsString> {
        let argv: Vec<OsString> = match &self.program {
            Some(_) => std::iter::once(OsString::from(PROGRAM_PATH))
                .chain(argv.iter().skip(FETCH_PROGRAM_WORDS).cloned())
                .collect(),
            None => argv.to_vec(),
        };
        let env = self.env();
        fetch_args(&FetchPlan {
            mounts: &self.mounts,
            config: &self.config,
            staging: &self.staging,
            env: &env,
            program: self.program.is_some(),
            features: self.features,
            argv: &argv,
        })
    }
}

impl SandboxFetch for SandboxFetcher {
    fn folders(&self) -> FetchFolders {
        FetchFolders {
            staging: self.staging.clone(),
        }
    }

    fn run_fetch(&mut self, argv: &[OsString]) -> Result<(), FetchFailed> {
        // Opened by the runner (following links, as pip would), passed as
        // descriptors: the sandbox user need not reach them by path.
        #[cfg(target_os = "linux")]
        let open = |p: &Path| {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
                .open(p)
                .map(std::os::fd::OwnedFd::from)
                .map_err(|e| FetchFailed::Sandbox {
                    reason: format!("cannot open {} for the fetch sandbox: {e}", p.display()),
                })
        };
        // No bubblewrap to hand them to (`new` already refuses there).
        #[cfg(not(target_os = "linux"))]
        let open = |_: &Path| -> Result<std::os::fd::OwnedFd, FetchFailed> {
            Err(FetchFailed::Sandbox {
                reason: EnvFetchError::LinuxOnly.to_string(),
            })
        };
        let mut fds = vec![(open(&self.staging)?, FD_STAGING)];
        if let Some(program) = &self.program {
            fds.push((open(program)?, FD_PROGRAM));
        }
        for (i, p) in self.config.iter().enumerate() {
            fds.push((open(p)?, FD_CONFIG_BASE + i as i32));
        }
        let spawn = Spawn {
            program: self.bwrap.clone(),
            args: self.args(argv),
            env: Vec::new(),
            fds,
            rlimits: Vec::new(),
            cgroup_procs: Vec::new(),
            stdin: None,
            report_fd: None,
            stderr_fd: None,
            new_session: false,
            identity: self.identity,
            mount_ns: None,
        };
        let policy = OutputPolicy {
            cap: 1 << 20,
            capture: true,
        };
        let outcome = crate::supervise::supervise(spawn, self.timeout, policy, &mut NoSink, None)
            .map_err(|e| FetchFailed::Sandbox {
            reason: format!("cannot start bubblewrap: {e}"),
        })?;
        if outcome.timed_out {
            return Err(FetchFailed::Pip {
                status: format!("killed after {} s", self.timeout.as_secs()),
                stderr: last_lines(&outcome.stderr.tail, 3),
            });
        }
        if outcome.status == Ok(0) {
            return Ok(());
        }
        let stderr = last_lines(&outcome.stderr.tail, 5);
        if stderr.starts_with("bwrap:") {
            return Err(FetchFailed::Sandbox {
                reason: format!(
                    "{stderr}; run `skill-runner doctor`, or build elsewhere and publish the tree with env add"
                ),
            });
        }
        Err(FetchFailed::Pip {
            status: match outcome.status {
                Ok(code) => format!("exit status: {code}"),
                Err(signal) => format!("signal: {signal}"),
            },
            stderr,
        })
    }
}

impl Drop for SandboxFetcher {
    fn drop(&mut self) {
        let _ = crate::fsx::remove_tree(&self.staging);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Only pip's own variables pass, and every path pip's configuration
    /// names (in a variable or a configuration file, a `file://` index
    /// too) is bound; another variable of the runner is not passed.
    #[test]
    fn pip_configuration_is_read_as_pip_reads_it() {
        let vars = vars(&[
            ("HOME", "/home/u"),
            ("PIP_CERT", "/srv/ca.pem"),
            (
                "PIP_FIND_LINKS",
                "/opt/wheels file:///opt/more https://x.invalid/w",
            ),
            ("PIP_DEFAULT_TIMEOUT", "60"),
            ("https_proxy", "http://127.0.0.1:3128"),
            ("AWS_SECRET_ACCESS_KEY", "not pip's"),
            ("PATH", "/home/u/bin:/usr/bin"),
        ]);
        let read = |p: &Path| match p.to_str()? {
            "/etc/pip.conf" => Some(
                "[global]\ncert = /etc/ssl/certs/ca.crt\nindex_url = https://x.invalid/simple\n\
                 timeout = 3\nextra-index-url =\n    file:///srv/index\n    https://y.invalid\n"
                    .to_owned(),
            ),
            _ => None,
        };
        let setup = pip_setup(&vars, &read);
        let names: Vec<&str> = setup.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "HOME",
                "PIP_CERT",
                "PIP_FIND_LINKS",
                "PIP_DEFAULT_TIMEOUT",
                "https_proxy"
            ]
        );
        let paths: Vec<String> = setup
            .paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "/etc/pip.conf",
                "/etc/ssl/certs/ca.crt",
                "/etc/xdg/pip/pip.conf",
                "/home/u/.config/pip/pip.conf",
                "/home/u/.netrc",
                "/home/u/.pip/pip.conf",
                "/opt/more",
                "/opt/wheels",
                "/srv/ca.pem",
                "/srv/index",
            ]
        );
    }
}
