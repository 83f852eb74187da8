//! Environments built once per test binary run, for the tests that run
//! real skills with them (`tests/env_skills.rs`): a build of NumPy +
//! Pillow + imageio takes seconds, so each lock is built once, into one
//! data dir the whole run shares, the first time a test asks for it.
//!
//! The data dir is `$TMPDIR/sr-envs-<random>/data`; the folder holds
//! `owner.lock`, locked for as long as the test binary lives. A later run
//! removes every such folder whose lock it can take (its owner died or
//! ended): statics are never dropped, so this is the cleanup.
//!
//! Each environment is built the way a user builds one, `skill-runner env
//! build --python LOCK --id ID` through the real binary, with pip's own
//! index configuration. A runner that is root of a user namespace mapping
//! no other uid cannot build (its sandbox refuses the mode changes pip
//! makes; `env build` says so), so there, and only there, the tree is
//! installed from the same hash-pinned lock with the host's pip and
//! published with `env add --python LOCK` (docs/environments.md): the
//! tests then still prove the use of the environment, and the host pass
//! of `scripts/test` proves the build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::{output_within, project_dir, runner_command, show, text, World};

/// The interpreter every lock here is for.
pub const PYTHON: &str = "/usr/bin/python3";

/// How long one build may take before the test fails: hang protection
/// only (a cold build of NumPy + Pillow + imageio is seconds).
const BUILD_GUARD: std::time::Duration = std::time::Duration::from_secs(900);

/// One environment of the shared data dir.
#[derive(Debug, Clone)]
pub struct SharedEnv {
    /// The shared data dir holding it.
    pub data_dir: PathBuf,
    /// `{id, hash}` as a job names it.
    pub env: Value,
    /// The record `env build` (or `env add`) printed.
    pub record: Value,
    /// `env build`, or `env add` where the runner cannot build.
    pub built_by: &'static str,
}

impl SharedEnv {
    /// `skill-runner run --json JOB` on the shared data dir.
    pub fn run_json(&self, world: &World, job: &Value) -> (i32, Value, Output) {
        let path = world.job("job", job);
        let out = output_within(
            runner_command()
                .env("SKILL_RUNNER_DATA_DIR", &self.data_dir)
                .stdin(Stdio::null())
                .args(["run", "--json"])
                .arg(&path),
            crate::HANG_GUARD,
        );
        let code = out.status.code().unwrap_or(-1);
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("run --json printed no JSON ({e}):{}", show(&out)));
        (code, doc, out)
    }

    /// The sealed tree on the host.
    pub fn tree(&self) -> PathBuf {
        self.data_dir
            .join("environments/trees")
            .join(self.env["hash"].as_str().unwrap())
            .join("tree")
    }
}

/// The lock of NumPy, Pillow, imageio and PyYAML (`scripts/locks/`).
pub fn gif_lock() -> PathBuf {
    project_dir().join("scripts/locks/pillow-numpy-imageio.txt")
}

/// The lock of pypdf, openpyxl, et-xmlfile and defusedxml.
pub fn office_lock() -> PathBuf {
    project_dir().join("scripts/locks/pypdf-openpyxl-defusedxml.txt")
}

/// The environment of [`gif_lock`], built once per run.
pub fn gif_env() -> Result<&'static SharedEnv, String> {
    static ENV: OnceLock<Result<SharedEnv, String>> = OnceLock::new();
    ENV.get_or_init(|| build_shared(&gif_lock(), "gif-tools"))
        .as_ref()
        .map_err(Clone::clone)
}

/// The environment of [`office_lock`], built once per run.
pub fn office_env() -> Result<&'static SharedEnv, String> {
    static ENV: OnceLock<Result<SharedEnv, String>> = OnceLock::new();
    ENV.get_or_init(|| build_shared(&office_lock(), "office-tools"))
        .as_ref()
        .map_err(Clone::clone)
}

/// The shared data dir of this run (made, and earlier runs' swept, once).
pub fn shared_data_dir() -> &'static Path {
    static DIR: OnceLock<(PathBuf, skill_runner::fsx::LockFile)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        sweep(&tmp);
        let dir = tmp.join(format!("sr-envs-{}", skill_runner::fsx::random_hex()));
        std::fs::create_dir(&dir).expect("create the shared environments folder");
        // The sandbox user of a root runner passes through it.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod the shared environments folder");
        let lock = skill_runner::fsx::LockFile::acquire(&dir.join("owner.lock"))
            .expect("lock the shared environments folder");
        (dir.join("data"), lock)
    })
    .0
}

/// Removes the shared folders of test runs that have ended.
fn sweep(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("sr-envs-") {
            continue;
        }
        let dir = entry.path();
        if let Ok(lock) = skill_runner::fsx::LockFile::acquire(&dir.join("owner.lock")) {
            let _ = skill_runner::fsx::remove_tree(&dir);
            drop(lock);
        }
    }
}

fn build_shared(lock: &Path, id: &str) -> Result<SharedEnv, String> {
    let data_dir = shared_data_dir().to_owned();
    let cmd = || {
        let mut c = runner_command();
        c.env("SKILL_RUNNER_DATA_DIR", &data_dir)
            .stdin(Stdio::null());
        c
    };
    let out = output_within(
        cmd()
            .args(["env", "build", "--python"])
            .arg(lock)
            .args(["--id", id]),
        BUILD_GUARD,
    );
    let (out, built_by) = if out.status.code() == Some(125)
        && text(&out.stderr).contains("env build cannot install here")
    {
        let tree = install_on_host(lock, &data_dir)?;
        let add = output_within(
            cmd()
                .args(["env", "add"])
                .arg(&tree)
                .args(["--id", id, "--python"])
                .arg(lock),
            BUILD_GUARD,
        );
        let _ = skill_runner::fsx::remove_tree(tree.parent().unwrap());
        (add, "env add")
    } else {
        (out, "env build")
    };
    if !out.status.success() {
        return Err(format!("{built_by} of {}:{}", lock.display(), show(&out)));
    }
    let record: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{built_by} printed no record ({e}):{}", show(&out)))?;
    Ok(SharedEnv {
        data_dir,
        env: json!({"id": record["id"], "hash": record["hash"]}),
        record,
        built_by,
    })
}

/// The lock's wheels fetched and installed with the host's pip (its own
/// index configuration), as `env build` would in its sandbox; returns the
/// tree (`python/`, and `bin/` for console scripts).
fn install_on_host(lock: &Path, data_dir: &Path) -> Result<PathBuf, String> {
    let work = data_dir
        .parent()
        .unwrap()
        .join(format!("host-build-{}", skill_runner::fsx::random_hex()));
    let wheels = work.join("wheels");
    let tree = work.join("tree");
    let run = |args: &[&std::ffi::OsStr]| -> Result<(), String> {
        let out = Command::new(PYTHON)
            .args(["-I", "-m", "pip"])
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {PYTHON} -m pip: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pip {} failed:{}",
                args[0].to_string_lossy(),
                show(&out)
            ))
        }
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    run(&[
        os("download"),
        os("--disable-pip-version-check"),
        os("--no-input"),
        os("--require-hashes"),
        os("--no-deps"),
        os("--only-binary=:all:"),
        os("-r"),
        lock.as_os_str(),
        os("-d"),
        wheels.as_os_str(),
    ])?;
    let target = tree.join("python");
    run(&[
        os("install"),
        os("--disable-pip-version-check"),
        os("--no-input"),
        os("--no-cache-dir"),
        os("--no-compile"),
        os("--no-index"),
        os("--find-links"),
        wheels.as_os_str(),
        os("--require-hashes"),
        os("--no-deps"),
        os("--target"),
        target.as_os_str(),
        os("-r"),
        lock.as_os_str(),
    ])?;
    if target.join("bin").is_dir() {
        std::fs::rename(target.join("bin"), tree.join("bin")).map_err(|e| e.to_string())?;
    }
    Ok(tree)
}

/// A one-wheel lock (`six`, pure Python, pinned by hash) for the tests of
/// the build itself.
pub const SIX: &str = "six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n";

/// `skill-runner env build --python LOCK --id ID` in `world`, with
/// `env` set, bounded by the hang guard.
pub fn env_build(world: &World, lock: &Path, id: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = world.cmd();
    cmd.args(["env", "build", "--python"])
        .arg(lock)
        .args(["--id", id]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, crate::HANG_GUARD)
}

/// Whether a build's failure is only that pip cannot reach its index
/// here; then the test is skipped (and `true` returned).
pub fn skipped_without_index(out: &Output) -> bool {
    let offline =
        out.status.code() == Some(125) && text(&out.stderr).contains("pip download failed");
    if offline {
        crate::skip(format!(
            "pip cannot fetch from its index here: {}",
            show(out)
        ));
    }
    offline
}

/// The host has a sandbox and [`PYTHON`] with pip; else skipped.
pub fn pip_usable() -> bool {
    if !crate::require_sandbox() {
        return false;
    }
    let pip = Command::new(PYTHON)
        .args(["-I", "-m", "pip", "--version"])
        .output();
    if !pip.is_ok_and(|o| o.status.success()) {
        crate::skip(format!("{PYTHON} has no pip here"));
        return false;
    }
    true
}

/// An in-process runner over `world`'s data dir, for driving the install
/// step's sandbox directly; `None` (skipped) where the build has no small
/// exec shim, which an in-process runner needs.
pub fn install_runner(world: &World) -> Option<skill_runner::exec::Runner> {
    if skill_runner::sandbox::shim::small_shim().is_none() {
        crate::skip("this build has no small exec shim, which an in-process runner needs");
        return None;
    }
    let config = skill_runner::exec::RunnerConfig {
        data_dir: world.data_dir(),
        package_limits: Default::default(),
        keep: false,
        reuse_cgroups: false,
        strict_limits: false,
        network: Default::default(),
        files: Default::default(),
    };
    Some(skill_runner::exec::Runner::new(config).unwrap())
}
