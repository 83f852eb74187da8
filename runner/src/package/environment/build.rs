//! Building an environment from a lock, and the base it is built for
//! (docs/environments.md, "Building from a lock").
//!
//! A build has two steps, each in a private staging folder of the store:
//!
//! 1. **fetch** ([`fetch_command`]): `pip download --require-hashes
//!    --no-deps --only-binary=:all: -r LOCK -d WHEELS`, with pip's own
//!    index configuration (its environment and `pip.conf`); no registry
//!    host is written anywhere by the runner. Binary wheels only: nothing
//!    of a package runs while it is fetched.
//! 2. **install** ([`install`]): `pip install --no-index --find-links
//!    WHEELS --require-hashes --no-deps --target TREE/python -r LOCK`,
//!    which must run in the runner's sandbox with no network at all. This
//!    module does not know sandboxes: [`install`] takes the sandbox as a
//!    [`SandboxRun`] callback (the exec room provides it), and builds only
//!    the argv and the folders it needs.
//!
//! The base ([`probe_python`], [`check_base`]) is the interpreter the
//! environment is built for, named by its path, its version and the
//! SHA-256 of its binary; a use checks the binary's bytes again.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::package::environment::{Base, Family, PYTHON_DIR};

/// The interpreter environments are built for by default: Debian's, with
/// pip, inside the sandbox's read-only `/usr`.
pub const DEFAULT_PYTHON: &str = "/usr/bin/python3";

/// Why a build step or a base check failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "interpreter {path} must be an absolute path under /usr (the sandbox's read-only system)"
    )]
    InterpreterPath { path: String },
    #[error("cannot read interpreter {path}: {source}")]
    ReadInterpreter { path: PathBuf, source: io::Error },
    #[error("cannot run {path} to ask its version: {reason}")]
    ProbeInterpreter { path: String, reason: String },
    #[error("the environment was built for {path} with SHA-256 {want}, but that binary is now {got}; rebuild the environment for this host's interpreter")]
    BaseChanged {
        path: String,
        want: String,
        got: String,
    },
    #[error("cannot run pip ({argv}): {source}")]
    SpawnPip { argv: String, source: io::Error },
    #[error("pip {step} failed ({status}): {stderr}")]
    Pip {
        step: &'static str,
        status: String,
        stderr: String,
    },
    #[error("the install step failed in the sandbox: {reason}")]
    Install { reason: String },
    #[error("cannot prepare {path}: {source}")]
    Prepare { path: PathBuf, source: io::Error },
}

/// The binary a path resolves to, and its SHA-256.
fn binary_sha256(path: &str) -> Result<String, BuildError> {
    let read_err = |source| BuildError::ReadInterpreter {
        path: PathBuf::from(path),
        source,
    };
    let real = fs::canonicalize(path).map_err(read_err)?;
    let bytes = fs::read(&real).map_err(read_err)?;
    Ok(crate::package::hash::file_hash(&bytes))
}

fn check_interpreter_path(path: &str) -> Result<(), BuildError> {
    let ok = path.starts_with("/usr/")
        && !path
            .split('/')
            .skip(1)
            .any(|s| matches!(s, "" | "." | ".."));
    if ok {
        Ok(())
    } else {
        Err(BuildError::InterpreterPath {
            path: path.to_owned(),
        })
    }
}

/// Names the Python interpreter at `path`: its version (asked of it) and
/// the SHA-256 of its binary.
pub fn probe_python(path: &str) -> Result<Base, BuildError> {
    check_interpreter_path(path)?;
    let sha256 = binary_sha256(path)?;
    let probe_err = |reason: String| BuildError::ProbeInterpreter {
        path: path.to_owned(),
        reason,
    };
    let out = Command::new(path)
        .args([
            "-I",
            "-c",
            "import sys; print('.'.join(map(str, sys.version_info[:3])))",
        ])
        .env_clear()
        .output()
        .map_err(|e| probe_err(e.to_string()))?;
    if !out.status.success() {
        return Err(probe_err(format!("it exited with {}", out.status)));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(probe_err(format!("it printed {version:?}")));
    }
    Ok(Base {
        family: Family::Python,
        path: path.to_owned(),
        version,
        sha256,
    })
}

/// Checks that the base's binary is still the one the environment was
/// built for.
pub fn check_base(base: &Base) -> Result<(), BuildError> {
    let got = binary_sha256(&base.path)?;
    if got != base.sha256 {
        return Err(BuildError::BaseChanged {
            path: base.path.clone(),
            want: base.sha256.clone(),
            got,
        });
    }
    Ok(())
}

/// The fetch step's argv: the pinned wheels of `lock` into `wheels`, with
/// pip's own index configuration.
pub fn fetch_command(python: &str, lock: &Path, wheels: &Path) -> Vec<OsString> {
    let mut argv: Vec<OsString> = [
        python,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-input",
        "--require-hashes",
        "--no-deps",
        "--only-binary=:all:",
        "-r",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    argv.push(lock.into());
    argv.push("-d".into());
    argv.push(wheels.into());
    argv
}

/// Runs the fetch step on the host (pip needs the network and its own
/// configuration; it runs no package code with binary wheels only).
pub fn fetch(python: &str, lock: &Path, wheels: &Path) -> Result<(), BuildError> {
    let argv = fetch_command(python, lock, wheels);
    let shown = argv
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|source| BuildError::SpawnPip {
            argv: shown,
            source,
        })?;
    if !out.status.success() {
        return Err(BuildError::Pip {
            step: "download",
            status: out.status.to_string(),
            stderr: last_lines(&out.stderr, 5),
        });
    }
    Ok(())
}

fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// The folders the install step needs, as the sandbox will see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallFolders {
    /// Host folder of the fetched wheels and the lock: read-only.
    pub wheels: PathBuf,
    /// Host folder the tree is installed into: the only writable one.
    pub tree: PathBuf,
}

/// One sandboxed run the install step asks for: `argv` with the given
/// folders bound, no network at all. Returns Ok when it exited 0, else a
/// sentence saying what happened.
pub trait SandboxRun {
    fn run_offline(&mut self, argv: &[OsString], folders: &InstallFolders) -> Result<(), String>;
}

/// The install step's argv: the fetched wheels, offline, into the tree's
/// `python/` folder.
pub fn install_command(python: &str, lock: &Path, folders: &InstallFolders) -> Vec<OsString> {
    let mut argv: Vec<OsString> = [
        python,
        "-I",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--no-cache-dir",
        "--no-compile",
        "--no-index",
        "--find-links",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    argv.push(folders.wheels.clone().into());
    for a in ["--require-hashes", "--no-deps", "--target"] {
        argv.push(a.into());
    }
    argv.push(folders.tree.join(PYTHON_DIR).into());
    argv.push("-r".into());
    argv.push(lock.into());
    argv
}

/// Runs the install step through `sandbox`, which must give it no network.
pub fn install(
    sandbox: &mut dyn SandboxRun,
    python: &str,
    lock: &Path,
    folders: &InstallFolders,
) -> Result<(), BuildError> {
    let target = folders.tree.join(PYTHON_DIR);
    fs::create_dir_all(&target).map_err(|source| BuildError::Prepare {
        path: target.clone(),
        source,
    })?;
    let argv = install_command(python, lock, folders);
    sandbox
        .run_offline(&argv, folders)
        .map_err(|reason| BuildError::Install { reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_must_lie_in_the_read_only_system() {
        for bad in [
            "python3",
            "/root/.pyenv/shims/python3",
            "/usr/../root/python",
            "/usr//bin/python3",
        ] {
            assert!(matches!(
                check_interpreter_path(bad),
                Err(BuildError::InterpreterPath { .. })
            ));
        }
        assert!(check_interpreter_path("/usr/bin/python3").is_ok());
    }

    #[test]
    fn the_base_names_the_binary_and_notices_a_change() {
        if !Path::new(DEFAULT_PYTHON).exists() {
            eprintln!("skipped: no {DEFAULT_PYTHON}");
            return;
        }
        let base = probe_python(DEFAULT_PYTHON).unwrap();
        assert!(base.version.starts_with("3."), "{base:?}");
        check_base(&base).unwrap();
        let other = Base {
            sha256: "0".repeat(64),
            ..base
        };
        assert!(matches!(
            check_base(&other),
            Err(BuildError::BaseChanged { .. })
        ));
    }

    /// The install step asks for no index and writes only into the tree.
    #[test]
    fn install_argv_is_offline_and_targets_the_tree() {
        let folders = InstallFolders {
            wheels: "/w".into(),
            tree: "/t".into(),
        };
        let argv: Vec<String> =
            install_command("/usr/bin/python3", Path::new("/w/lock.txt"), &folders)
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect();
        assert_eq!(
            argv.join(" "),
            "/usr/bin/python3 -I -m pip install --disable-pip-version-check --no-input \
             --no-cache-dir --no-compile --no-index --find-links /w --require-hashes --no-deps \
             --target /t/python -r /w/lock.txt"
        );
        struct Recorder(Vec<Vec<OsString>>);
        impl SandboxRun for Recorder {
            fn run_offline(&mut self, argv: &[OsString], _: &InstallFolders) -> Result<(), String> {
                self.0.push(argv.to_vec());
                Err("exit status 1".into())
            }
        }
        let t = tempfile::tempdir().unwrap();
        let folders = InstallFolders {
            wheels: t.path().join("w"),
            tree: t.path().join("t"),
        };
        let mut rec = Recorder(Vec::new());
        let err = install(
            &mut rec,
            "/usr/bin/python3",
            &t.path().join("lock"),
            &folders,
        )
        .unwrap_err();
        assert!(err.to_string().contains("exit status 1"), "{err}");
        assert_eq!(rec.0.len(), 1);
        assert!(t.path().join("t/python").is_dir());
    }
}
