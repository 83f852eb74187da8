//! The sandbox of an environment build's fetch step, as data
//! (docs/environments.md, "The fetch sandbox").
//!
//! [`fetch_args`] is a pure function from a [`FetchPlan`] to the argument
//! vector of `bwrap`. The fetch runs pip, which needs the host's network
//! and its own configuration, and nothing else:
//!
//! - every namespace new but the network one (`--unshare-all
//!   --share-net`): the host's network, and nothing else of the host's
//!   processes, IPC or hostname; no capabilities, no nested user
//!   namespaces, killed with the runner, no controlling terminal, nothing
//!   of the runner's environment but what the plan names;
//! - the profile's read-only system view (`/usr`, the `/bin`-style links,
//!   the loader cache), name resolution and the CA certificates
//!   ([`NET_FILES`]), and the files pip's configuration names (its
//!   configuration files, certificate bundles, a local index), each
//!   read-only at its own path; those are opened by the runner and reach
//!   bubblewrap as descriptors ([`FD_CONFIG_BASE`] on), since a root
//!   runner starts bubblewrap as the sandbox user, who may not be able to
//!   pass the folders above them (`/root`);
//! - a fresh `/proc` and `/dev`, read-only;
//! - the staging folder, writable, at its own path (from the descriptor
//!   [`FD_STAGING`]): the only writable
//!   folder (no `/tmp`, no home; `--remount-ro /` makes the root
//!   read-only, with every folder bubblewrap made in it);
//! - the argv run directly (no exec shim: no package code runs here, and
//!   the runner reads the staging folder's contents, not an exit report).
//!
//! Later operations win, in this order: namespaces and flags, the system
//! view, the network files, the configuration files, `/proc`, `/dev`, an
//! optional program, the staging folder, the read-only root.
//!
//! The configuration paths are the runner's own setting, but they are
//! still checked before they are bound ([`check_config`]): never `/`,
//! never the data dir, a folder inside it or above it, and never the
//! receipt key or a folder above it, each refused with a sentence.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::datadir::DataDir;
use crate::sandbox::bwrap::BwrapFeatures;
use crate::sandbox::profile::Mount;

/// The host files name resolution and TLS need, bound read-only when
/// they exist (a symlink such as a `resolv.conf` into `/run` is followed).
pub const NET_FILES: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
];

/// Where a test-only replacement of pip appears in the fetch sandbox.
pub const PROGRAM_PATH: &str = "/opt/skill-fetch-program";

/// The descriptor of the staging folder, in bubblewrap (bound at its own
/// path: the sandbox user need not pass the folders above it).
pub const FD_STAGING: i32 = 3;
/// The descriptor of the test-only program, in bubblewrap.
pub const FD_PROGRAM: i32 = 4;
/// The descriptor of the first of [`FetchPlan::config`], in bubblewrap;
/// the others follow in order.
pub const FD_CONFIG_BASE: i32 = 5;

/// Why a path pip's configuration names is not bound into the fetch
/// sandbox.
#[derive(Debug, thiserror::Error)]
pub enum FetchboxError {
    #[error("pip's configuration names {path} ({real}), which is {what}; the fetch sandbox binds every path pip's configuration names next to the network, so it refuses it: point pip's configuration (PIP_CONFIG_FILE, pip.conf, the PIP_* variables) elsewhere", path = path.display(), real = real.display())]
    ConfigPath {
        path: PathBuf,
        real: PathBuf,
        what: String,
    },
    #[error("the fetch sandbox would bind {path} (really {real}), which is {what}; keep the runner's data dir and receipt key out of the system folders the fetch sandbox binds (the default profile's mounts and the name-resolution and TLS files)", path = path.display(), real = real.display())]
    Bind {
        path: PathBuf,
        real: PathBuf,
        what: String,
    },
}

/// Refuses a configuration path that would put the runner's state in the
/// fetch sandbox: `/`, the data dir `data` (under any of its names),
/// anything inside it or above it, and the receipt key (`keys`: each path
/// it is visible at, as the signer found them) or a folder above it. Each
/// path is resolved first (pip follows links, and so does the bind).
pub fn check_config(
    paths: &[PathBuf],
    data: &DataDir,
    keys: &[PathBuf],
) -> Result<(), FetchboxError> {
    for path in paths {
        let real = path.canonicalize().unwrap_or_else(|_| path.clone());
        if let Some(what) = state_at(&real, data, keys) {
            return Err(FetchboxError::ConfigPath {
                path: path.clone(),
                real,
                what,
            });
        }
    }
    Ok(())
}

/// Refuses a fetch sandbox whose own binds would hold the runner's state,
/// as [`check_config`] refuses pip's paths: the profile's read-only
/// system (`mounts`) and [`NET_FILES`], each that exists, resolved. A job
/// sandbox checks its profile's mounts the same way; the fetch sandbox
/// has the network besides.
pub fn check_binds(
    mounts: &[Mount],
    data: &DataDir,
    keys: &[PathBuf],
) -> Result<(), FetchboxError> {
    let sources = mounts
        .iter()
        .filter_map(|m| match m {
            Mount::RoBind { src, .. } | Mount::RoBindTry { src, .. } => Some(src.clone()),
            Mount::Symlink { .. } => None,
        })
        .chain(NET_FILES.iter().map(PathBuf::from));
    for path in sources {
        let Ok(real) = path.canonicalize() else {
            continue; // not there: not bound
        };
        if let Some(what) = state_at(&real, data, keys) {
            return Err(FetchboxError::Bind { path, real, what });
        }
    }
    Ok(())
}

/// What of the runner's state a bind of `real` (canonical) would show:
/// the root, the data dir `data` (under any of its names) from inside or
/// above, or the receipt key (at any of the paths `keys`) from its folder
/// or above.
fn state_at(real: &Path, data: &DataDir, keys: &[PathBuf]) -> Option<String> {
    if real == Path::new("/") {
        return Some("the root of the file system".to_owned());
    }
    for (data, _) in data.places() {
        if real.starts_with(data) {
            return Some(format!("inside the runner's data dir {}", data.display()));
        }
        if data.starts_with(real) {
            return Some(format!("above the runner's data dir {}", data.display()));
        }
    }
    keys.iter()
        .find(|k| k.starts_with(real))
        .map(|k| format!("the receipt key {} or a folder above it", k.display()))
}

/// What the fetch sandbox is made of.
#[derive(Debug, Clone)]
pub struct FetchPlan<'a> {
    /// The profile's system view, as resolved on this host.
    pub mounts: &'a [Mount],
    /// Host paths pip's configuration names (files or folders) that
    /// exist, bound read-only at their own paths from the descriptors
    /// [`FD_CONFIG_BASE`], `FD_CONFIG_BASE + 1`, … in this order.
    pub config: &'a [PathBuf],
    /// The staging folder: the only writable one, at its own path.
    pub staging: &'a Path,
    /// The whole environment of the command.
    pub env: &'a [(String, String)],
    /// A program bound read-only at [`PROGRAM_PATH`] from [`FD_PROGRAM`]
    /// (tests only).
    pub program: bool,
    pub features: BwrapFeatures,
    pub argv: &'a [OsString],
}

/// Renders the bwrap argv (without the program name).
pub fn fetch_args(plan: &FetchPlan<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |words: &[&std::ffi::OsStr]| a.extend(words.iter().map(|w| w.to_os_string()));
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    push(&[os("--unshare-all"), os("--share-net"), os("--unshare-user")]);
    if plan.features.disable_userns {
        push(&[os("--disable-userns")]);
    }
    push(&[
        os("--die-with-parent"),
        os("--new-session"),
        os("--cap-drop"),
        os("ALL"),
        os("--clearenv"),
    ]);
    for m in plan.mounts {
        match m {
            Mount::RoBind { src, dest } => {
                push(&[os("--ro-bind"), src.as_os_str(), dest.as_os_str()])
            }
            Mount::RoBindTry { src, dest } => {
                push(&[os("--ro-bind-try"), src.as_os_str(), dest.as_os_str()])
            }
            Mount::Symlink { target, dest } => {
                push(&[os("--symlink"), target.as_os_str(), dest.as_os_str()])
            }
        }
    }
    for f in NET_FILES {
        push(&[os("--ro-bind-try"), os(f), os(f)]);
    }
    for (i, p) in plan.config.iter().enumerate() {
        let fd = OsString::from((FD_CONFIG_BASE + i as i32).to_string());
        push(&[os("--ro-bind-fd"), &fd, p.as_os_str()]);
    }
    push(&[
        os("--proc"),
        os("/proc"),
        os("--remount-ro"),
        os("/proc"),
        os("--dev"),
        os("/dev"),
        os("--remount-ro"),
        os("/dev"),
    ]);
    if plan.program {
        let fd = OsString::from(FD_PROGRAM.to_string());
        push(&[os("--ro-bind-fd"), &fd, os(PROGRAM_PATH)]);
    }
    let staging = plan.staging.as_os_str();
    let fd = OsString::from(FD_STAGING.to_string());
    push(&[os("--bind-fd"), &fd, staging]);
    push(&[os("--remount-ro"), os("/"), os("--chdir"), staging]);
    for (k, v) in plan.env {
        push(&[os("--setenv"), k.as_ref(), v.as_ref()]);
    }
    push(&[os("--")]);
    a.extend(plan.argv.iter().cloned());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pip configuration that names `/`, the data dir, a file inside
    /// it, a folder above it or the receipt key is refused, naming it;
    /// an ordinary configuration file is bound.
    #[test]
    fn pip_configuration_naming_the_runners_state_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let data = top.join("data");
        std::fs::create_dir_all(data.join("store")).unwrap();
        let key = top.join("keys/receipt.key");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::write(&key, b"k").unwrap();
        let conf = top.join("pip.conf");
        std::fs::write(&conf, b"[global]\n").unwrap();
        // Through a link, as pip would follow it.
        let link = top.join("innocent");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        assert!(check_config(
            std::slice::from_ref(&conf),
            &DataDir::unchecked(&data),
            std::slice::from_ref(&key)
        )
        .is_ok());
        for (bad, said) in [
            (PathBuf::from("/"), "the root of the file system"),
            (data.clone(), "inside the runner's data dir"),
            (data.join("store"), "inside the runner's data dir"),
            (link, "inside the runner's data dir"),
            (top.clone(), "above the runner's data dir"),
            (key.clone(), "the receipt key"),
        ] {
            let e = check_config(
                &[conf.clone(), bad.clone()],
                &DataDir::unchecked(&data),
                std::slice::from_ref(&key),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(said), "{bad:?}: {e}");
            assert!(e.contains(&bad.display().to_string()), "{e}");
        }
        // The key's folder, with the data dir elsewhere.
        let other = top.join("elsewhere");
        std::fs::create_dir(&other).unwrap();
        let e = check_config(
            &[key.parent().unwrap().to_owned()],
            &DataDir::unchecked(&other),
            std::slice::from_ref(&key),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("the receipt key"), "{e}");
    }

    #[test]
    fn a_system_bind_holding_the_runners_state_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let data = top.join("data");
        let key = top.join("sys/keys/receipt.key");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::write(&key, b"k").unwrap();
        let bind = |src: &Path| Mount::RoBind {
            src: src.to_owned(),
            dest: src.to_owned(),
        };
        let elsewhere = top.join("usr");
        std::fs::create_dir(&elsewhere).unwrap();
        assert!(check_binds(
            &[bind(&elsewhere)],
            &DataDir::unchecked(&data),
            std::slice::from_ref(&key)
        )
        .is_ok());
        for (src, said) in [
            (top.join("sys"), "the receipt key"),
            (top.clone(), "above the runner's data dir"),
        ] {
            let e = check_binds(
                &[bind(&elsewhere), bind(&src)],
                &DataDir::unchecked(&data),
                std::slice::from_ref(&key),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(said) && e.contains("would bind"), "{src:?}: {e}");
        }
        // A missing source is not bound, so not refused.
        let missing = Mount::RoBindTry {
            src: top.join("none"),
            dest: "/none".into(),
        };
        assert!(check_binds(
            &[missing],
            &DataDir::unchecked(&data),
            std::slice::from_ref(&key)
        )
        .is_ok());
    }

    /// The whole argv: the network is the host's, every other namespace
    /// new, the staging folder the only writable bind, the root read-only.
    #[test]
    fn the_fetch_sandbox_shares_only_the_network_and_writes_only_staging() {
        let mounts = [
            Mount::RoBind {
                src: "/usr".into(),
                dest: "/usr".into(),
            },
            Mount::Symlink {
                target: "usr/bin".into(),
                dest: "/bin".into(),
            },
        ];
        let config = [PathBuf::from("/etc/pip.conf")];
        let env = [("PIP_CERT".to_owned(), "/etc/ssl/c.pem".to_owned())];
        let argv = [OsString::from("/usr/bin/python3"), OsString::from("-I")];
        let plan = FetchPlan {
            mounts: &mounts,
            config: &config,
            staging: Path::new("/tmp/b/fetch"),
            env: &env,
            program: false,
            features: BwrapFeatures {
                disable_userns: true,
            },
            argv: &argv,
        };
        let got: Vec<String> = fetch_args(&plan)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let net: Vec<String> = NET_FILES
            .iter()
            .map(|f| format!("--ro-bind-try {f} {f}"))
            .collect();
        let want = format!(
            "--unshare-all --share-net --unshare-user --disable-userns --die-with-parent \
             --new-session --cap-drop ALL --clearenv --ro-bind /usr /usr --symlink usr/bin /bin \
             {} --ro-bind-fd 5 /etc/pip.conf --proc /proc --remount-ro /proc \
             --dev /dev --remount-ro /dev --bind-fd 3 /tmp/b/fetch --remount-ro / \
             --chdir /tmp/b/fetch --setenv PIP_CERT /etc/ssl/c.pem -- /usr/bin/python3 -I",
            net.join(" ")
        );
        assert_eq!(got.join(" "), want);
        let binds = got.iter().filter(|a| *a == "--bind" || *a == "--bind-fd");
        assert_eq!(binds.count(), 1, "one writable bind: the staging folder");
        assert!(!got.iter().any(|a| a == "--tmpfs"), "no writable /tmp");
    }
}
