//! What this host offers a sandbox, probed once per process: the
//! bubblewrap binary (found on PATH, refused unless only root or the
//! runner's user may change it, its options checked by running it, the
//! answer cached per binary in `bwrap-probe.json`), user namespaces,
//! cgroups, and the identity the command runs as.
//!
//! What is missing is a [`HostError`], one variant per failed check, each
//! saying what to change; the exec room refuses executions with it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sandbox::bwrap::BwrapFeatures;
use crate::sandbox::identity::{Identity, IdentityError};
use crate::supervise::cgroup::Support;

/// Why this host offers no sandbox: each says what to change.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    #[error("bubblewrap (bwrap) is not installed or not on PATH; install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)")]
    FindBwrap,
    #[error("cannot stat {}: {source}", path.display())]
    StatBwrap {
        path: PathBuf,
        source: Arc<io::Error>,
    },
    #[error("{} belongs to uid {owner}, neither root nor the runner's user ({euid}), who could replace what the sandbox is; install bubblewrap from the system's packages", path.display())]
    BwrapOwner {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
    #[error("{} is writable by its group or by everyone (mode {mode:o}), who could replace what the sandbox is; fix it with chmod go-w {}", path.display(), path.display())]
    BwrapWritable { path: PathBuf, mode: u32 },
    #[error("cannot run {}: {source}", path.display())]
    RunBwrap {
        path: PathBuf,
        source: Arc<io::Error>,
    },
    #[error("{} ({version}) lacks {}; install bubblewrap 0.5 or newer", path.display(), missing.join(", "))]
    BwrapOptions {
        path: PathBuf,
        version: String,
        missing: Vec<&'static str>,
    },
    #[error("user namespaces are disabled (user.max_user_namespaces = 0); enable them with sysctl -w user.max_user_namespaces=15000")]
    UsernsDisabled,
    #[error("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0); enable them or run as root")]
    UnprivilegedUsernsDisabled,
    #[error("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); allow bwrap in an AppArmor profile or run as root")]
    UsernsRestricted,
}

/// The bubblewrap found on this host.
#[derive(Debug, Clone)]
pub struct Bwrap {
    pub path: PathBuf,
    pub version: String,
    pub features: BwrapFeatures,
}

/// Options bwrap must support for our argv.
pub const REQUIRED_BWRAP_OPTIONS: &[&str] = &[
    "--add-seccomp-fd",
    "--file",
    "--size",
    "--perms",
    "--clearenv",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "--remount-ro",
];

impl Bwrap {
    /// Finds bwrap on PATH and checks its options by running it.
    pub fn find() -> Result<Bwrap, HostError> {
        Bwrap::probe(&Bwrap::locate()?)
    }

    /// The bwrap on PATH, refused unless only its owner may change it.
    fn locate() -> Result<PathBuf, HostError> {
        let path = which::which("bwrap").map_err(|_| HostError::FindBwrap)?;
        Bwrap::trusted(&path)?;
        Ok(path)
    }

    /// Whoever can write the bwrap binary runs code as the runner (root,
    /// for a daemon), and decides what the sandbox is. So it must belong to
    /// root or to the runner's own user, and be writable by its owner
    /// alone; the file a symlink names is checked. In a user namespace a
    /// host owner that is not mapped there (root's, seen from a runner in
    /// `unshare --map-root-user` as an ordinary user) shows as the overflow
    /// uid, which is accepted: nobody in the namespace can write the file.
    pub fn trusted(path: &Path) -> Result<(), HostError> {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(path).map_err(|e| stat_failed(path, e))?;
        let euid = nix::unistd::geteuid().as_raw();
        let overflow = fs::read_to_string("/proc/sys/kernel/overflowuid")
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .unwrap_or(65534);
        if ![0, euid, overflow].contains(&meta.uid()) {
            return Err(HostError::BwrapOwner {
                path: path.to_owned(),
                owner: meta.uid(),
                euid,
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err(HostError::BwrapWritable {
                path: path.to_owned(),
                mode: meta.mode() & 0o7777,
            });
        }
        Ok(())
    }

    /// Like [`Bwrap::find`], but remembers the answer in `cache_dir` for
    /// as long as the binary at that path is the same file (inode, size,
    /// modification time): probing costs two process starts per run.
    pub fn find_cached(cache_dir: &Path) -> Result<Bwrap, HostError> {
        use std::os::unix::fs::MetadataExt;
        let path = Bwrap::locate()?;
        let meta = fs::metadata(&path).map_err(|e| stat_failed(&path, e))?;
        let key = ProbeKey {
            path: path.clone(),
            inode: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        };
        let cache = cache_dir.join("bwrap-probe.json");
        let cached = fs::read(&cache)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<ProbeCache>(&bytes).ok());
        if let Some(c) = cached.filter(|c| c.key == key) {
            return Ok(Bwrap {
                path,
                version: c.version,
                features: BwrapFeatures {
                    disable_userns: c.disable_userns,
                },
            });
        }
        let found = Bwrap::probe(&path)?;
        let entry = ProbeCache {
            key,
            version: found.version.clone(),
            disable_userns: found.features.disable_userns,
        };
        // Best effort: without a cache the next run probes again.
        if let Ok(bytes) = serde_json::to_vec(&entry) {
            let _ = crate::fsx::write_replace(&cache, &bytes);
        }
        Ok(found)
    }

    fn probe(path: &Path) -> Result<Bwrap, HostError> {
        let path = path.to_owned();
        let run = |arg: &str| -> Result<String, HostError> {
            let out = std::process::Command::new(&path)
                .arg(arg)
                .output()
                .map_err(|e| HostError::RunBwrap {
                    path: path.clone(),
                    source: Arc::new(e),
                })?;
            Ok(String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr))
        };
        let version = run("--version")?.trim().to_owned();
        let help = run("--help")?;
        let has = |opt: &str| help.split_whitespace().any(|w| w == opt);
        let missing: Vec<&str> = REQUIRED_BWRAP_OPTIONS
            .iter()
            .copied()
            .filter(|o| !has(o))
            .collect();
        if !missing.is_empty() {
            return Err(HostError::BwrapOptions {
                path,
                version,
                missing,
            });
        }
        Ok(Bwrap {
            version,
            features: BwrapFeatures {
                disable_userns: has("--disable-userns"),
            },
            path,
        })
    }
}

fn stat_failed(path: &Path, e: io::Error) -> HostError {
    HostError::StatBwrap {
        path: path.to_owned(),
        source: Arc::new(e),
    }
}

/// Which bwrap binary a cached probe answer is for: the same path and
/// the same file (inode, size, modification time).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct ProbeKey {
    path: PathBuf,
    inode: u64,
    size: u64,
    mtime: (i64, i64),
}

/// `<data-dir>/cache/bwrap-probe.json`: what probing that binary found.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeCache {
    key: ProbeKey,
    version: String,
    disable_userns: bool,
}

/// What this host offers, probed once.
#[derive(Debug, Clone)]
pub struct Host {
    pub bwrap: Result<Bwrap, HostError>,
    pub cgroups: Support,
    pub userns: Result<(), HostError>,
    /// Who the sandboxed command is on the host, or why no safe identity
    /// can be had.
    pub identity: Result<Identity, IdentityError>,
}

impl Host {
    /// Probes the host; the bwrap probe is cached under `cache_dir`.
    pub fn probe(cache_dir: &Path) -> Host {
        let identity = crate::sandbox::identity::detect();
        // bwrap makes its user namespace as the identity it runs as.
        let userns = match &identity {
            Ok(id) if id.switch_to().is_some() => userns_available_to(false),
            _ => userns_available(),
        };
        Host {
            bwrap: Bwrap::find_cached(cache_dir),
            cgroups: Support::detect(),
            userns,
            identity,
        }
    }
}

/// Whether this process can create user namespaces (bwrap needs one).
pub fn userns_available() -> Result<(), HostError> {
    userns_available_to(nix::unistd::geteuid().is_root())
}

/// Whether a process that is (or is not) root can create user namespaces.
fn userns_available_to(root: bool) -> Result<(), HostError> {
    let read = |p: &str| fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Err(HostError::UsernsDisabled);
    }
    if !root {
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return Err(HostError::UnprivilegedUsernsDisabled);
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            return Err(HostError::UsernsRestricted);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_bwrap_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bwrap");
        fs::write(&bin, b"#!/bin/sh\n").unwrap();
        for (mode, ok) in [(0o755, true), (0o700, true), (0o775, false), (0o757, false)] {
            fs::set_permissions(&bin, fs::Permissions::from_mode(mode)).unwrap();
            let got = Bwrap::trusted(&bin);
            assert_eq!(got.is_ok(), ok, "mode {mode:o}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().contains("chmod go-w"), "{e}");
            }
        }
    }

    #[test]
    fn a_probe_cache_for_another_file_is_not_used() {
        let key = ProbeKey {
            path: "/usr/bin/bwrap".into(),
            inode: 1,
            size: 2,
            mtime: (3, 4),
        };
        let entry = ProbeCache {
            key: key.clone(),
            version: "bubblewrap 0.8.0".into(),
            disable_userns: true,
        };
        let text = serde_json::to_string(&entry).unwrap();
        let back: ProbeCache = serde_json::from_str(&text).unwrap();
        assert_eq!(back.key, key);
        assert_ne!(back.key, ProbeKey { inode: 9, ..key });
    }
}
