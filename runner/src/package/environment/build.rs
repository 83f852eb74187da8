//! Building an environment from a lock, and the base it is built for
//! (docs/environments.md, "Building from a lock").
//!
//! A build has two steps, each through a sandbox the caller provides (this
//! room knows no sandbox: the exec room does):
//!
//! 1. **fetch** ([`fetch_command`], run through a [`SandboxFetch`]): `pip
//!    download --require-hashes --no-deps --only-binary=:all: -r LOCK -d
//!    WHEELS` into a private staging folder, with pip's own index
//!    configuration; no registry host is written anywhere by the runner.
//!    Binary wheels only: nothing of a package runs while it is fetched.
//!    The sandbox shares only the host's network; the staging folder is
//!    the only thing it may write. What it left is then read by the
//!    runner ([`take_wheels`]): regular files only, one wheel per
//!    requirement with a SHA-256 the lock lists, copied from the very
//!    bytes that were hashed.
//! 2. **install** ([`install`], through a [`SandboxRun`]): `pip install
//!    --no-index --find-links WHEELS --require-hashes --no-deps --target
//!    TREE/python -r LOCK`, which must run in the runner's sandbox with no
//!    network at all.
//!
//! The base the build records is named by [`crate::package::environment::base`].

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::package::environment::base::{probe_python, BaseError};
use crate::package::environment::lock::{self, PythonLock};
use crate::package::environment::store::{EnvError, EnvLimits, EnvStore, Published};
use crate::package::environment::{LockRef, BIN_DIR, PYTHON_DIR};

/// Why a build step failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Base(#[from] BaseError),
    #[error("pip {step} failed ({status}): {stderr}")]
    Pip {
        step: &'static str,
        status: String,
        stderr: String,
    },
    #[error("the fetch step's sandbox cannot be built here: {reason}")]
    FetchSandbox { reason: String },
    #[error("the install step failed in the sandbox: {reason}")]
    Install { reason: String },
    #[error("cannot prepare {path}: {source}")]
    Prepare { path: PathBuf, source: io::Error },
    #[error("cannot read the lock {path}: {source}")]
    ReadLock { path: PathBuf, source: io::Error },
    #[error("lock {path}: {source}")]
    Lock {
        path: PathBuf,
        source: lock::LockError,
    },
    #[error("fetched file {name:?}: {reason}; the index served other bytes than the lock pins")]
    Wheel { name: String, reason: String },
    #[error(transparent)]
    Publish(#[from] EnvError),
}

/// The fetch step's argv: the pinned wheels of `lock` into `wheels`, with
/// pip's own index configuration (its environment and its configuration
/// files, which the fetch sandbox passes through), and no cache: the
/// sandbox may write nothing but its staging folder.
pub fn fetch_command(python: &str, lock: &Path, wheels: &Path) -> Vec<OsString> {
    let mut argv: Vec<OsString> = [
        python,
        "-I",
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-input",
        "--no-cache-dir",
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

/// The words of [`fetch_command`] that name the program (`PYTHON -I -m
/// pip`), before pip's own arguments.
pub const FETCH_PROGRAM_WORDS: usize = 4;

/// The fetch step's private staging folder: it exists and is empty but
/// for [`WHEELS`] (where pip saves the wheels), and it is the only folder
/// the fetch may write. The build writes the lock into it as
/// [`LOCK_FILE`] before the fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchFolders {
    pub staging: PathBuf,
}

impl FetchFolders {
    pub fn wheels(&self) -> PathBuf {
        self.staging.join(WHEELS)
    }
    pub fn lock(&self) -> PathBuf {
        self.staging.join(LOCK_FILE)
    }
}

/// How a sandboxed fetch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchFailed {
    /// pip ran and failed (`status`, the last lines of its stderr).
    Pip { status: String, stderr: String },
    /// The sandbox could not be made: a sentence saying why and what to do.
    Sandbox { reason: String },
}

/// The sandbox the fetch step runs in: it shares only the host's network;
/// nothing but [`SandboxFetch::folders`]' staging folder is writable.
pub trait SandboxFetch {
    fn folders(&self) -> FetchFolders;
    fn run_fetch(&mut self, argv: &[OsString]) -> Result<(), FetchFailed>;
}

/// The last `n` non-empty lines of a program's output, joined with ` / `.
pub fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// The folders the install step needs. The argv names them by their host
/// paths: the sandbox binds each at the same path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallFolders {
    /// The fetched wheels ([`WHEELS`]) and the lock ([`LOCK_FILE`]):
    /// bound read-only.
    pub input: PathBuf,
    /// The tree the packages are installed into: the only writable folder.
    pub tree: PathBuf,
}

/// The folder of [`InstallFolders::input`] holding the fetched wheels.
pub const WHEELS: &str = "wheels";
/// The lock's name in [`InstallFolders::input`].
pub const LOCK_FILE: &str = "requirements.txt";

/// One sandboxed run the install step asks for: `argv` with the given
/// folders bound, no network at all. Returns Ok when it exited 0, else a
/// sentence saying what happened.
pub trait SandboxRun {
    fn run_offline(&mut self, argv: &[OsString], folders: &InstallFolders) -> Result<(), String>;
}

/// The install step's argv: the fetched wheels, offline, into the tree's
/// `python/` folder.
pub fn install_command(python: &str, folders: &InstallFolders) -> Vec<OsString> {
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
    argv.push(folders.input.join(WHEELS).into());
    for a in ["--require-hashes", "--no-deps", "--target"] {
        argv.push(a.into());
    }
    argv.push(folders.tree.join(PYTHON_DIR).into());
    argv.push("-r".into());
    argv.push(folders.input.join(LOCK_FILE).into());
    argv
}

/// Runs the install step through `sandbox`, which must give it no network.
pub fn install(
    sandbox: &mut dyn SandboxRun,
    python: &str,
    folders: &InstallFolders,
) -> Result<(), BuildError> {
    let target = folders.tree.join(PYTHON_DIR);
    fs::create_dir_all(&target).map_err(|source| BuildError::Prepare {
        path: target.clone(),
        source,
    })?;
    let argv = install_command(python, folders);
    sandbox
        .run_offline(&argv, folders)
        .map_err(|reason| BuildError::Install { reason })?;
    // pip --target puts console scripts in python/bin; programs go in bin/.
    let scripts = target.join(BIN_DIR);
    if fs::symlink_metadata(&scripts).is_ok_and(|m| m.is_dir()) {
        let bin = folders.tree.join(BIN_DIR);
        fs::rename(&scripts, &bin).map_err(|source| BuildError::Prepare { path: bin, source })?;
    }
    Ok(())
}

/// Takes what the fetch step left in `fetched` into `wheels`: exactly one
/// wheel per requirement, a regular file (opened without following a
/// symlink) of at most `max_bytes`, named for it, whose SHA-256 the lock
/// lists. pip checked the hashes too; this is the runner's own word, and
/// the copy is written from the very bytes that were hashed, so what the
/// fetch sandbox could change afterwards is never installed.
pub fn take_wheels(
    lock: &PythonLock,
    fetched: &Path,
    wheels: &Path,
    max_bytes: u64,
) -> Result<(), BuildError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read_err = |source| BuildError::Prepare {
        path: fetched.to_owned(),
        source,
    };
    let mut seen = std::collections::BTreeSet::new();
    for entry in fs::read_dir(fetched).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let bad = |reason: &str| BuildError::Wheel {
            name: name.clone(),
            reason: reason.to_owned(),
        };
        if !entry.file_type().map_err(read_err)?.is_file() || !name.ends_with(".whl") {
            return Err(bad("it is not a wheel file"));
        }
        let project = lock::normalize(name.split('-').next().unwrap_or_default());
        let Some(req) = lock.requirements.iter().find(|r| r.normalized == project) else {
            return Err(bad("no requirement of the lock names it"));
        };
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(entry.path())
            .map_err(read_err)?;
        if !file.metadata().map_err(read_err)?.is_file() {
            return Err(bad("it is not a wheel file"));
        }
        let mut bytes = Vec::new();
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > max_bytes {
            return Err(bad(&format!("it is larger than {max_bytes} bytes")));
        }
        let sha = format!("sha256:{}", crate::package::hash::file_hash(&bytes));
        if !req.hashes.contains(&sha) {
            return Err(bad("its SHA-256 is not among the lock's hashes for it"));
        }
        if !seen.insert(project) {
            return Err(bad("a second wheel for the same requirement"));
        }
        let dest = wheels.join(&name);
        crate::fsx::write_new(&dest, &bytes, 0o644)
            .map_err(|source| BuildError::Prepare { path: dest, source })?;
    }
    if let Some(missing) = lock
        .requirements
        .iter()
        .find(|r| !seen.contains(&r.normalized))
    {
        return Err(BuildError::Wheel {
            name: missing.name.clone(),
            reason: "no wheel was fetched for it".into(),
        });
    }
    Ok(())
}

/// A step of a build, as its progress shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The lock and interpreter were read; the store is asked first.
    Lock,
    /// Fetching the pinned wheels with pip's own index configuration.
    Fetch,
    /// Installing them offline in the sandbox.
    Install,
    /// Hashing and sealing the tree.
    Hash,
    /// The record was published.
    Publish,
    /// The same lock was built for the same interpreter before: the tree
    /// in the store is used, nothing is downloaded.
    FromStore,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Lock => "lock",
            Step::Fetch => "fetch",
            Step::Install => "install",
            Step::Hash => "hash",
            Step::Publish => "publish",
            Step::FromStore => "from-store",
        }
    }
}

/// The two sandboxes of a build: the fetch (the host's network, only its
/// staging folder writable) and the install (no network at all).
#[allow(missing_debug_implementations)] // holds trait objects
pub struct Sandboxes<'a> {
    pub fetch: &'a mut dyn SandboxFetch,
    pub install: &'a mut dyn SandboxRun,
}

/// Runs the fetch step of `lock` (its bytes) through `sandbox`: the lock
/// is written into its staging folder, and pip saves the wheels there.
pub fn fetch(sandbox: &mut dyn SandboxFetch, python: &str, lock: &[u8]) -> Result<(), BuildError> {
    let folders = sandbox.folders();
    let lock_path = folders.lock();
    fs::write(&lock_path, lock).map_err(|source| BuildError::Prepare {
        path: lock_path.clone(),
        source,
    })?;
    let argv = fetch_command(python, &lock_path, &folders.wheels());
    sandbox.run_fetch(&argv).map_err(|failed| match failed {
        FetchFailed::Pip { status, stderr } => BuildError::Pip {
            step: "download",
            status,
            stderr,
        },
        FetchFailed::Sandbox { reason } => BuildError::FetchSandbox { reason },
    })
}

/// What a build gave: the record, and whether it was served from the
/// store (a build of the same lock for the same interpreter before).
#[derive(Debug, Clone)]
pub struct Built {
    pub published: Published,
    pub from_store: bool,
}

/// Builds environment `id` from the Python lock at `lock_path`: checks the
/// lock, names the base, fetches the wheels into a private staging folder
/// of the store, installs them through `sandbox` (no network), and
/// publishes the tree with its base and the lock's digest.
pub fn build_python(
    store: &EnvStore,
    lock_path: &Path,
    id: &str,
    python: &str,
    sandboxes: Sandboxes<'_>,
    limits: &EnvLimits,
) -> Result<Published, BuildError> {
    let staging = store.staging().map_err(|source| BuildError::Prepare {
        path: store.root().to_owned(),
        source,
    })?;
    let folders = InstallFolders {
        input: staging.path.join("input"),
        tree: staging.path.join("tree"),
    };
    let built = build_python_in(
        store,
        lock_path,
        id,
        python,
        &folders,
        sandboxes,
        limits,
        &mut |_| {},
    )?;
    drop(staging);
    Ok(built.published)
}

/// [`build_python`] in the caller's `folders` (which must exist; the
/// sandbox must be able to read `input` and write `tree`), saying each
/// step to `progress`. A build of the same lock for the same interpreter
/// that this store published before is served from the store: its tree
/// is checked (stamp, else every byte) and no wheel is fetched.
#[allow(clippy::too_many_arguments)]
pub fn build_python_in(
    store: &EnvStore,
    lock_path: &Path,
    id: &str,
    python: &str,
    folders: &InstallFolders,
    sandboxes: Sandboxes<'_>,
    limits: &EnvLimits,
    progress: &mut dyn FnMut(Step),
) -> Result<Built, BuildError> {
    let bytes = fs::read(lock_path).map_err(|source| BuildError::ReadLock {
        path: lock_path.to_owned(),
        source,
    })?;
    let lock = lock::parse_python(&bytes).map_err(|source| BuildError::Lock {
        path: lock_path.to_owned(),
        source,
    })?;
    let base = probe_python(python)?;
    progress(Step::Lock);
    let locks = vec![LockRef {
        kind: lock::PYTHON_REQUIREMENTS.into(),
        sha256: lock.sha256.clone(),
    }];
    if let Some(published) = from_store(store, &lock.sha256, &base, id, limits)? {
        progress(Step::FromStore);
        return Ok(Built {
            published,
            from_store: true,
        });
    }
    let prepare = |path: &Path| {
        let path = path.to_owned();
        move |source| BuildError::Prepare { path, source }
    };
    let wheels = folders.input.join(WHEELS);
    fs::create_dir_all(&wheels).map_err(prepare(&wheels))?;
    fs::create_dir_all(&folders.tree).map_err(prepare(&folders.tree))?;
    let lock_copy = folders.input.join(LOCK_FILE);
    fs::write(&lock_copy, &bytes).map_err(prepare(&lock_copy))?;
    progress(Step::Fetch);
    fetch(sandboxes.fetch, python, &bytes)?;
    let fetched = sandboxes.fetch.folders().wheels();
    take_wheels(&lock, &fetched, &wheels, limits.max_file_bytes)?;
    progress(Step::Install);
    install(sandboxes.install, python, folders)?;
    progress(Step::Hash);
    let published = store.add(&folders.tree, id, vec![base.clone()], locks, limits)?;
    store.record_build(&lock.sha256, &base, &published.record.env_ref())?;
    progress(Step::Publish);
    Ok(Built {
        published,
        from_store: false,
    })
}

/// The environment this store built from the same lock for the same
/// interpreter, when it is still held and sound; under another id, the
/// same tree is published under `id` too (a local copy, no download).
fn from_store(
    store: &EnvStore,
    lock_sha: &str,
    base: &crate::package::environment::Base,
    id: &str,
    limits: &EnvLimits,
) -> Result<Option<Published>, BuildError> {
    let Some(env) = store.built(lock_sha, base) else {
        return Ok(None);
    };
    // The record, the tree (stamp or re-hash) and the base, as a use checks them.
    let Ok(ready) = crate::package::environment::resolve::prepare(store, &env) else {
        return Ok(None);
    };
    if ready.record.id == id {
        return Ok(Some(Published {
            record: ready.record,
            new_tree: false,
        }));
    }
    let record = &ready.record;
    let published = store.add(
        ready.host_tree(),
        id,
        record.base.clone(),
        record.locks.clone(),
        limits,
    )?;
    store.record_build(lock_sha, base, &published.record.env_ref())?;
    Ok(Some(published))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::environment::base::DEFAULT_PYTHON;
    use std::process::Command;

    /// The install step asks for no index and writes only into the tree.
    #[test]
    fn install_argv_is_offline_and_targets_the_tree() {
        let folders = InstallFolders {
            input: "/in".into(),
            tree: "/t".into(),
        };
        let argv: Vec<String> = install_command("/usr/bin/python3", &folders)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            argv.join(" "),
            "/usr/bin/python3 -I -m pip install --disable-pip-version-check --no-input \
             --no-cache-dir --no-compile --no-index --find-links /in/wheels --require-hashes --no-deps \
             --target /t/python -r /in/requirements.txt"
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
            input: t.path().join("in"),
            tree: t.path().join("t"),
        };
        let mut rec = Recorder(Vec::new());
        let err = install(&mut rec, "/usr/bin/python3", &folders).unwrap_err();
        assert!(err.to_string().contains("exit status 1"), "{err}");
        assert_eq!(rec.0.len(), 1);
        assert!(t.path().join("t/python").is_dir());
    }

    const SIX_HASH: &str =
        "sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274";

    #[test]
    fn fetched_wheels_must_be_exactly_the_pinned_ones() {
        let t = tempfile::tempdir().unwrap();
        let wheel_sha = |bytes: &[u8]| format!("sha256:{}", crate::package::hash::file_hash(bytes));
        let lock_for = |hash: &str| {
            lock::parse_python(format!("Foo.Bar==1.0 --hash={hash}\n").as_bytes()).unwrap()
        };
        let good = wheel_sha(b"wheel bytes");
        type Files<'a> = &'a [(&'a str, &'a [u8])];
        let cases: &[(Files, &str, Option<&str>)] = &[
            (
                &[("foo_bar-1.0-py3-none-any.whl", b"wheel bytes")],
                &good,
                None,
            ),
            (
                &[("foo_bar-1.0-py3-none-any.whl", b"other bytes")],
                &good,
                Some("not among the lock's hashes"),
            ),
            (
                &[("baz-1.0-py3-none-any.whl", b"wheel bytes")],
                &good,
                Some("no requirement of the lock names it"),
            ),
            (
                &[("foo_bar-1.0.tar.gz", b"wheel bytes")],
                &good,
                Some("not a wheel file"),
            ),
            (&[], &good, Some("no wheel was fetched for it")),
            (
                &[
                    ("foo_bar-1.0-py3-none-any.whl", b"wheel bytes"),
                    ("Foo.Bar-1.0-py2-none-any.whl", b"wheel bytes"),
                ],
                &good,
                Some("a second wheel"),
            ),
        ];
        for (i, (files, hash, want)) in cases.iter().enumerate() {
            let dir = t.path().join(format!("case{i}"));
            let taken = t.path().join(format!("taken{i}"));
            fs::create_dir(&dir).unwrap();
            fs::create_dir(&taken).unwrap();
            for (name, bytes) in *files {
                fs::write(dir.join(name), bytes).unwrap();
            }
            match (take_wheels(&lock_for(hash), &dir, &taken, 1 << 20), want) {
                (Ok(()), None) => {
                    let name = files[0].0;
                    assert_eq!(fs::read(taken.join(name)).unwrap(), files[0].1);
                }
                (Err(e), Some(want)) => assert!(e.to_string().contains(want), "case {i}: {e}"),
                (got, _) => panic!("case {i}: {got:?}"),
            }
        }
    }

    /// A symlink to a file with the pinned bytes, or a wheel over the size
    /// bound, is not taken: the fetch sandbox's folder is read as what it
    /// is, never through a link.
    #[test]
    fn a_symlinked_or_oversized_fetched_wheel_is_not_taken() {
        let t = tempfile::tempdir().unwrap();
        let sha = format!("sha256:{}", crate::package::hash::file_hash(b"wheel bytes"));
        let lock = lock::parse_python(format!("foo==1.0 --hash={sha}\n").as_bytes()).unwrap();
        let (dir, taken) = (t.path().join("f"), t.path().join("w"));
        fs::create_dir(&dir).unwrap();
        fs::create_dir(&taken).unwrap();
        fs::write(t.path().join("real"), b"wheel bytes").unwrap();
        std::os::unix::fs::symlink(t.path().join("real"), dir.join("foo-1.0-py3-none-any.whl"))
            .unwrap();
        let err = take_wheels(&lock, &dir, &taken, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("not a wheel file"), "{err}");
        fs::remove_file(dir.join("foo-1.0-py3-none-any.whl")).unwrap();
        fs::write(dir.join("foo-1.0-py3-none-any.whl"), b"wheel bytes").unwrap();
        let err = take_wheels(&lock, &dir, &taken, 4).unwrap_err();
        assert!(err.to_string().contains("larger than 4 bytes"), "{err}");
        assert!(fs::read_dir(&taken).unwrap().next().is_none());
    }

    /// Stands in for the fetch sandbox: runs pip on the host, in a staging
    /// folder of its own. Only the pipeline is under test here.
    struct HostFetch(tempfile::TempDir);
    impl HostFetch {
        fn new() -> HostFetch {
            let t = tempfile::tempdir().unwrap();
            fs::create_dir(t.path().join(WHEELS)).unwrap();
            HostFetch(t)
        }
    }
    impl SandboxFetch for HostFetch {
        fn folders(&self) -> FetchFolders {
            FetchFolders {
                staging: self.0.path().to_owned(),
            }
        }
        fn run_fetch(&mut self, argv: &[OsString]) -> Result<(), FetchFailed> {
            let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
            if out.status.success() {
                return Ok(());
            }
            Err(FetchFailed::Pip {
                status: out.status.to_string(),
                stderr: last_lines(&out.stderr, 3),
            })
        }
    }

    /// Stands in for the runner's sandbox: runs the install on the host.
    /// Only the pipeline is under test here; the real callback must give
    /// the step no network.
    struct HostRun;
    impl SandboxRun for HostRun {
        fn run_offline(&mut self, argv: &[OsString], _: &InstallFolders) -> Result<(), String> {
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(last_lines(&out.stderr, 3))
            }
        }
    }

    /// A lock of one small pure-Python wheel goes through fetch, check,
    /// install and publish, twice to the same hash; a lock pinning other
    /// bytes publishes nothing. Needs pip's index (its own configuration):
    /// skipped without it unless SKILL_RUNNER_MUST_WORK is set.
    #[test]
    fn a_hash_pinned_lock_builds_the_same_environment_twice() {
        if !Path::new(DEFAULT_PYTHON).exists() {
            crate::text::skip_test(format!("no {DEFAULT_PYTHON}"));
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let lock = t.path().join("requirements.txt");
        fs::write(&lock, format!("six==1.17.0 \\\n    --hash={SIX_HASH}\n")).unwrap();
        let mut hashes = Vec::new();
        for round in 0..2 {
            let store = EnvStore::open(&crate::datadir::DataDir::unchecked(
                &t.path().join(format!("data{round}")),
            ))
            .unwrap();
            let built = build_python(
                &store,
                &lock,
                "six",
                DEFAULT_PYTHON,
                Sandboxes {
                    fetch: &mut HostFetch::new(),
                    install: &mut HostRun,
                },
                &EnvLimits::default(),
            );
            let published = match built {
                Ok(p) => p,
                Err(e @ BuildError::Pip { .. }) => {
                    crate::text::skip_test(format!("pip cannot fetch from its index here: {e}"));
                    return;
                }
                Err(e) => panic!("{e}"),
            };
            let tree = store.tree_path(&published.record.hash);
            assert!(tree.join("python/six.py").is_file());
            assert_eq!(published.record.base[0].path, DEFAULT_PYTHON);
            assert_eq!(
                published.record.locks[0].sha256,
                crate::package::hash::file_hash(&fs::read(&lock).unwrap())
            );
            store.verify(&published.record.hash).unwrap();
            let left: Vec<_> = fs::read_dir(store.root().join("tmp")).unwrap().collect();
            assert!(left.is_empty(), "staging left behind");
            hashes.push(published.record.hash);
        }
        assert_eq!(hashes[0], hashes[1], "the same lock builds the same tree");

        let store = EnvStore::open(&crate::datadir::DataDir::unchecked(
            &t.path().join("data-bad"),
        ))
        .unwrap();
        let wrong = format!("six==1.17.0 --hash=sha256:{}\n", "0".repeat(64));
        fs::write(&lock, wrong).unwrap();
        let err = build_python(
            &store,
            &lock,
            "six",
            DEFAULT_PYTHON,
            Sandboxes {
                fetch: &mut HostFetch::new(),
                install: &mut HostRun,
            },
            &EnvLimits::default(),
        )
        .unwrap_err();
        assert!(matches!(err, BuildError::Pip { .. }), "{err}");
        assert!(store.list().unwrap().is_empty());
        assert!(fs::read_dir(store.root().join("trees"))
            .unwrap()
            .next()
            .is_none());
        assert!(fs::read_dir(store.root().join("tmp"))
            .unwrap()
            .next()
            .is_none());
    }
}
