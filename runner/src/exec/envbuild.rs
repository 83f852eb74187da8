//! The install step of an environment build in the runner's own sandbox
//! (docs/environments.md, "Building from a lock").
//!
//! [`SandboxInstall`] is the [`SandboxRun`] the build asks for: the
//! install argv runs as a job of this runner, with `network: "none"` (an
//! empty network namespace, and every socket family but `AF_UNIX`
//! refused by seccomp), the build's input folder (wheels and lock) bound
//! read-only at [`INPUT_DIR`], and the tree folder as the job's
//! workspace, the only writable folder besides the private `/tmp`. A
//! package's build step is untrusted code: it gets the sandbox of a job.
//!
//! The build's folders live in a private folder outside the data dir (a
//! job may not bind the runner's state), made reachable by the sandbox
//! user of a root runner: the input readable, the tree writable by it.
//! The store copies the tree when it publishes it, so what the sandbox
//! user wrote is never the stored tree.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::exec::job::Job;
use crate::exec::runner::{OutputMode, RunOptions, Runner};
use crate::package::environment::build::{InstallFolders, SandboxRun};
use crate::sandbox::paths::WORKSPACE_DIR;
use crate::sandbox::profile::MountRule;

/// Why the build's folders could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EnvBuildError {
    #[error("cannot prepare the build folder {}: {source}", path.display())]
    Prepare { path: PathBuf, source: io::Error },
}

/// A build's private folders outside the data dir, removed when dropped.
#[derive(Debug)]
pub struct BuildDir {
    pub path: PathBuf,
}

impl BuildDir {
    /// Makes `<tmp>/skill-runner-build-<random>/` with `input/` and
    /// `tree/`, passable by the sandbox user; `tree/` is given to it when
    /// `owner` is set (a root runner's sandbox user).
    pub fn create(owner: Option<(u32, u32)>) -> Result<BuildDir, EnvBuildError> {
        let path =
            std::env::temp_dir().join(format!("skill-runner-build-{}", crate::fsx::random_hex()));
        let err = |path: &Path| {
            let path = path.to_owned();
            move |source| EnvBuildError::Prepare { path, source }
        };
        fs::create_dir(&path).map_err(err(&path))?;
        let dir = BuildDir { path };
        let tree = dir.folders().tree;
        for p in [&dir.path, &dir.folders().input, &tree] {
            if p != &dir.path {
                fs::create_dir(p).map_err(err(p))?;
            }
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).map_err(err(p))?;
        }
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&tree, Some(uid), Some(gid)).map_err(err(&tree))?;
        }
        Ok(dir)
    }

    pub fn folders(&self) -> InstallFolders {
        InstallFolders {
            input: self.path.join("input"),
            tree: self.path.join("tree"),
        }
    }
}

impl Drop for BuildDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Where the build's input (wheels, lock) appears in the install's
/// sandbox, read-only (not below `/tmp`, which is the sandbox's own).
pub const INPUT_DIR: &str = "/opt/skill-build-input";

/// `arg` with the folder `from` at its start replaced by `to`.
fn rebase(arg: &str, from: &str, to: &str) -> Option<String> {
    let rest = arg.strip_prefix(from)?;
    (rest.is_empty() || rest.starts_with('/')).then(|| format!("{to}{rest}"))
}

/// Runs the install step as a job of `runner`, with no network.
#[allow(missing_debug_implementations)] // holds a Runner reference
pub struct SandboxInstall<'a> {
    pub runner: &'a Runner,
    /// The install's wall-clock limit, in milliseconds.
    pub timeout_ms: u64,
    /// The sandbox user of a root runner, who must own what it writes
    /// into (the build made the tree's folders as the runner).
    pub owner: Option<(u32, u32)>,
    /// What the install may write (the tree's byte bound, `--max-bytes`):
    /// a wheel that unpacks past it is stopped while it is installed,
    /// before it fills the host's temporary folder.
    pub disk_bytes: u64,
}

/// Gives `dir` and the folders below it to `uid:gid` (nothing but folders
/// is there before the install).
fn give(dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            give(&entry.path(), uid, gid)?;
        }
    }
    Ok(())
}

impl SandboxInstall<'_> {
    /// The job of one install argv: host paths under the tree rewritten
    /// to `/workspace`, the input bound read-only at its own path.
    pub fn job(&self, argv: &[OsString], folders: &InstallFolders) -> Result<Job, String> {
        let tree = folders.tree.to_string_lossy().into_owned();
        let input = folders.input.to_string_lossy().into_owned();
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                let a = a.to_string_lossy().into_owned();
                rebase(&a, &tree, WORKSPACE_DIR)
                    .or_else(|| rebase(&a, &input, INPUT_DIR))
                    .unwrap_or(a)
            })
            .collect();
        let doc = serde_json::json!({
            "execution_id": format!("env-build-{}", crate::fsx::random_hex()),
            "argv": argv,
            "workspace": folders.tree,
            "network": "none",
            "limits": {
                "timeout_ms": self.timeout_ms,
                "memory_bytes": 4u64 << 30,
                "disk_bytes": self.disk_bytes.max(1),
                "output_bytes": 1u64 << 20,
            },
        });
        let mut job =
            Job::from_json(doc.to_string().as_bytes(), None).map_err(|e| e.to_string())?;
        job.profile.linux.mounts.push(MountRule::RoBind {
            src: folders.input.clone(),
            dest: INPUT_DIR.into(),
        });
        Ok(job)
    }
}

impl SandboxRun for SandboxInstall<'_> {
    fn run_offline(&mut self, argv: &[OsString], folders: &InstallFolders) -> Result<(), String> {
        let job = self.job(argv, folders)?;
        if let Some((uid, gid)) = self.owner {
            give(&folders.tree, uid, gid).map_err(|e| {
                format!(
                    "cannot give {} to the sandbox user: {e}",
                    folders.tree.display()
                )
            })?;
        }
        let mut sink = crate::supervise::NoSink;
        let result = self.runner.run(
            &job,
            RunOptions {
                output: OutputMode::Capture,
                sink: &mut sink,
                cancel: None,
            },
        );
        if result.status == crate::exec::result::Status::Exited && result.exit_code == Some(0) {
            return Ok(());
        }
        let why = match &result.error {
            Some(e) => e.message.clone(),
            None => {
                let lines: Vec<&str> = result
                    .stderr
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .collect();
                lines[lines.len().saturating_sub(3)..].join(" / ")
            }
        };
        Err(format!(
            "{} (exit {}): {why}",
            result.status.as_str(),
            result
                .exit_code
                .map_or_else(|| "none".to_owned(), |c| c.to_string())
        ))
    }
}
