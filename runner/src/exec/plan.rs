//! The launch plan: a job and its prepared folders become everything the
//! launcher is given (program, argv, environment, and what it finds on
//! each descriptor, by the table of [`crate::sandbox::fds`]). Pure: it
//! opens nothing and writes nothing.
//!
//! A launch ([`crate::exec::launch`]) and `explain` ([`crate::exec::explain`])
//! both make their plan here, with the same inputs but for the folders
//! (real ones at a launch, shown ones such as `<data-dir>/published/…` in
//! an explanation), so what `explain` prints and what `explain --fds-dir`
//! writes are what a launch hands over: the same argv and the same
//! seccomp programs, compiled for the same identity.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::exec::error::ExecError;
use crate::exec::job::Job;
use crate::sandbox::bwrap::{self, BwrapFeatures};
use crate::sandbox::fds::{FD_ENVIRONMENT, FD_ETC, FD_EXTENSIONS, FD_NET, FD_SKILLS, FD_WORKSPACE};
use crate::sandbox::fds::{FD_EXEC_REPORT, FD_GROUP, FD_PASSWD, FD_SHIM, FD_STDERR};
use crate::sandbox::identity::Identity;
use crate::sandbox::paths::{self, Spelling};
use crate::sandbox::profile::Mount;
use crate::sandbox::shim::ShimKind;

/// What the runner hands over on a descriptor that is no folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// These bytes, in a sealed memfd.
    Bytes(Vec<u8>),
    /// The exec shim ([`crate::sandbox::shim::executable`]).
    Shim(ShimKind),
}

/// Everything the launcher is given besides limits.
#[derive(Debug, Clone)]
pub struct Plan {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The launcher's whole environment.
    pub env: Vec<(String, String)>,
    /// What the runner hands over on descriptors, by child fd, in the
    /// table's order.
    pub files: Vec<(i32, Content)>,
    /// The host folders the runner opens at launch, by child fd (a
    /// launch's real paths, an explanation's shown ones).
    pub folders: Vec<(i32, PathBuf)>,
    /// Child fd of the exec shim's report, when the launcher runs it.
    pub report_fd: Option<i32>,
    /// Child fd of the command's stderr, when apart from the launcher's.
    pub stderr_fd: Option<i32>,
    /// The child is started in a new session (bwrap makes its own).
    pub new_session: bool,
}

/// The host folders of a bubblewrap sandbox.
#[derive(Debug, Clone)]
pub struct Folders {
    /// The published snapshot root (`/skills`).
    pub skills: PathBuf,
    /// A host workspace; `None`: a fresh tmpfs.
    pub workspace: Option<PathBuf>,
    /// A host extensions dir (named, or the default in a host workspace);
    /// `None`: inside the fresh workspace.
    pub extensions: Option<PathBuf>,
    /// The execution's network folder (a job with an allowlist).
    pub net: Option<PathBuf>,
    /// The prepared `/etc`, when the profile's `/etc` can be one.
    pub etc: Option<PathBuf>,
    /// The job's environment, when it names one.
    pub environment: Option<EnvMount>,
}

/// A job's environment as the plan binds it: the sealed tree on the host
/// (bound read-only at `/opt/skill-env`, never copied) and the path
/// variables it sets there (`PYTHONPATH` for a Python base).
#[derive(Debug, Clone)]
pub struct EnvMount {
    pub tree: PathBuf,
    pub variables: Vec<(String, String)>,
}

impl EnvMount {
    /// The mount of a stored environment's record whose tree is `tree`.
    pub fn of(record: &crate::package::environment::Record, tree: PathBuf) -> EnvMount {
        use crate::package::environment::resolve::{variables, MOUNT_POINT};
        EnvMount {
            tree,
            variables: variables(record, MOUNT_POINT)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }
}

/// A stored environment as a Seatbelt plan names it (no mount namespace):
/// the tree's host path, read-only in the profile, and its path variables
/// as suffixes of that path (`PYTHONPATH` = the tree's `python/`).
pub fn seatbelt_environment(
    record: &crate::package::environment::Record,
    tree: PathBuf,
) -> crate::sandbox::macos::EnvFolder {
    crate::sandbox::macos::EnvFolder {
        tree,
        variables: crate::package::environment::resolve::variables(record, "")
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    }
}

/// `PATH` in a sandbox with an environment: its `bin/` first, then the
/// baseline's.
fn environment_path(env: &mut [(String, String)]) {
    use crate::package::environment::resolve::{Ready, MOUNT_POINT};
    for (k, v) in env.iter_mut() {
        if k == "PATH" {
            *v = format!("{}:{v}", Ready::path_prefix(MOUNT_POINT));
        }
    }
}

/// The prepared state a bubblewrap plan is made from.
#[derive(Debug, Clone, Copy)]
pub struct Sandbox<'a> {
    /// The bwrap binary and what it supports.
    pub program: &'a std::path::Path,
    pub features: BwrapFeatures,
    /// The profile's mounts, as resolved on the host.
    pub mounts: &'a [Mount],
    pub folders: &'a Folders,
    /// Who the command is on the host: a root-mapped uid gets more
    /// seccomp refusals ([`Identity::root_mapped`]).
    pub identity: &'a Identity,
    /// The `pids` limit as `RLIMIT_NPROC`, when no cgroup enforces it.
    pub nproc: Option<u64>,
}

/// The command's whole environment in a bubblewrap sandbox (what the
/// plan passes as `--setenv`, and a prepared sandbox's hand-over).
pub fn command_env(job: &Job, f: &Folders) -> Vec<(String, String)> {
    let mut env = bwrap::environment(&job.env);
    if job.network.allowlist().is_some() {
        env.extend(crate::sandbox::net::proxy_environment(
            crate::sandbox::net::PROXY_URL,
        ));
    }
    if let Some(e) = &f.environment {
        environment_path(&mut env);
        env.extend(e.variables.iter().cloned());
    }
    env
}

/// The plan of a bubblewrap sandbox.
pub fn bwrap(job: &Job, s: Sandbox<'_>) -> Result<Plan, ExecError> {
    let argv = paths::rewrite_argv(&job.argv, Spelling::Sandbox)?;
    let env = command_env(job, s.folders);
    let proxy = job.network.allowlist().is_some();
    let f = s.folders;
    let workspace = match f.workspace {
        Some(_) => bwrap::Workspace::Host,
        None => bwrap::Workspace::Fresh {
            bytes: job.limits.disk_bytes,
        },
    };
    let extensions = match f.extensions {
        Some(_) => bwrap::Extensions::Host,
        None => bwrap::Extensions::InFreshWorkspace,
    };
    let args = bwrap::bwrap_args(&bwrap::Plan {
        mounts: s.mounts,
        workspace,
        extensions,
        cwd: &job.cwd,
        env: &env,
        argv: &argv,
        tmp_bytes: job.limits.tmp_bytes,
        features: s.features,
        proxy,
        nproc: s.nproc,
        etc_view: f.etc.is_some(),
        environment: f.environment.is_some(),
    });
    let mut files = seccomp(job, s.identity)?;
    // The account files, unless they are in the prepared /etc.
    if f.etc.is_none() {
        files.push((FD_PASSWD, Content::Bytes(bwrap::PASSWD.as_bytes().to_vec())));
        files.push((FD_GROUP, Content::Bytes(bwrap::GROUP.as_bytes().to_vec())));
    }
    // What bwrap executes as the exec shim: the small shim, or with a
    // network allowlist the runner's own binary (crate::sandbox::shim).
    let shim = match (proxy, crate::sandbox::shim::small_shim()) {
        (false, Some(_)) => ShimKind::Small,
        _ => ShimKind::Runner,
    };
    files.push((FD_SHIM, Content::Shim(shim)));
    let folders = [
        (FD_SKILLS, Some(&f.skills)),
        (FD_WORKSPACE, f.workspace.as_ref()),
        // The default one of a host workspace too: a folder fixed for
        // the whole run, which no concurrent job on the same workspace
        // can redirect by renaming it.
        (FD_EXTENSIONS, f.extensions.as_ref()),
        (FD_NET, f.net.as_ref()),
        (FD_ETC, f.etc.as_ref()),
        (FD_ENVIRONMENT, f.environment.as_ref().map(|e| &e.tree)),
    ]
    .into_iter()
    .filter_map(|(fd, path)| path.map(|p| (fd, p.clone())))
    .collect();
    Ok(Plan {
        program: s.program.to_owned(),
        args,
        env: Vec::new(),
        files,
        folders,
        report_fd: Some(FD_EXEC_REPORT),
        stderr_fd: Some(FD_STDERR),
        new_session: false, // bwrap --new-session
    })
}

/// The seccomp programs, compiled for the sandbox's identity: a uid that
/// is root of the parent user namespace gets the root-mapped refusals.
#[cfg(target_os = "linux")]
fn seccomp(job: &Job, identity: &Identity) -> Result<Vec<(i32, Content)>, ExecError> {
    use crate::sandbox::fds::FD_SECCOMP_RULES;
    let filters =
        crate::sandbox::seccomp::compiled(&job.profile, job.network.mode(), identity.root_mapped)?;
    Ok(vec![(
        FD_SECCOMP_RULES,
        Content::Bytes(filters.rules.clone()),
    )])
}

/// Elsewhere a bubblewrap plan is only shown, never launched, and has no
/// seccomp programs to show (`explain --fds-dir` needs a Linux build).
#[cfg(not(target_os = "linux"))]
fn seccomp(_job: &Job, _identity: &Identity) -> Result<Vec<(i32, Content)>, ExecError> {
    Ok(Vec::new())
}

/// The Seatbelt profile and the `sandbox-exec` argv of a job in these
/// folders.
pub fn seatbelt(
    job: &Job,
    folders: &crate::sandbox::macos::Folders,
) -> Result<(seatbelt::Rendered, Vec<String>), ExecError> {
    Ok(crate::sandbox::macos::plan(
        &job.seatbelt_request(),
        folders,
    )?)
}

/// The plan of a Seatbelt sandbox: `/usr/bin/sandbox-exec` with the
/// rendered profile; the environment holds host paths.
pub fn seatbelt_launch(
    job: &Job,
    folders: &crate::sandbox::macos::Folders,
) -> Result<Plan, ExecError> {
    let (_, argv) = seatbelt(job, folders)?;
    let env = crate::sandbox::macos::environment(&job.seatbelt_request(), folders)?;
    let mut argv = argv.into_iter();
    let program = PathBuf::from(argv.next().unwrap_or_default());
    Ok(Plan {
        program,
        args: argv.map(Into::into).collect(),
        env,
        files: Vec::new(),
        folders: Vec::new(),
        report_fd: None,
        stderr_fd: None,
        new_session: true,
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn job(json: &str) -> Job {
        Job::from_json(json.as_bytes(), None).unwrap()
    }

    fn identity(root_mapped: bool) -> Identity {
        Identity {
            uid: 1000,
            gid: 1000,
            mode: "runner_user",
            root_mapped,
            note: None,
        }
    }

    fn plan(job: &Job, folders: &Folders, id: &Identity) -> Plan {
        let mounts = job
            .profile
            .resolve_mounts(crate::sandbox::profile::host_entry);
        bwrap(
            job,
            Sandbox {
                program: std::path::Path::new("/usr/bin/bwrap"),
                features: BwrapFeatures::default(),
                mounts: &mounts,
                folders,
                identity: id,
                nproc: None,
            },
        )
        .unwrap()
    }

    fn folders() -> Folders {
        Folders {
            skills: "/s".into(),
            workspace: Some("/w".into()),
            extensions: Some("/w/e".into()),
            net: None,
            etc: None,
            environment: None,
        }
    }

    #[test]
    fn a_root_mapped_identity_gets_its_own_seccomp_rules() {
        let j = job(r#"{"argv": ["true"]}"#);
        let plain = plan(&j, &folders(), &identity(false));
        let mapped = plan(&j, &folders(), &identity(true));
        assert_eq!(plain.args, mapped.args);
        let rules = |p: &Plan| p.files[0].clone();
        assert_eq!(rules(&plain).0, crate::sandbox::fds::FD_SECCOMP_RULES);
        assert_ne!(rules(&plain), rules(&mapped), "the root-mapped denials");
        let compiled =
            crate::sandbox::seccomp::compile_for(&j.profile, j.network.mode(), true).unwrap();
        assert_eq!(rules(&mapped).1, Content::Bytes(compiled.rules));
    }

    #[test]
    fn the_descriptors_follow_the_folders() {
        let j = job(r#"{"argv": ["true"]}"#);
        let p = plan(&j, &folders(), &identity(false));
        let fds: Vec<i32> = p.files.iter().map(|(fd, _)| *fd).collect();
        assert_eq!(fds, [3, 5, 6, 8]);
        let folders_fds: Vec<i32> = p.folders.iter().map(|(fd, _)| *fd).collect();
        assert_eq!(folders_fds, [10, 12, 11]);
        // A prepared /etc carries the account files: no fds 5 and 6.
        let mut f = folders();
        f.etc = Some("/etc-copy".into());
        f.workspace = None;
        f.extensions = None;
        let p = plan(&j, &f, &identity(false));
        let fds: Vec<i32> = p.files.iter().map(|(fd, _)| *fd).collect();
        assert_eq!(fds, [3, 8]);
        let folders_fds: Vec<i32> = p.folders.iter().map(|(fd, _)| *fd).collect();
        assert_eq!(folders_fds, [10, 14]);
        let args: Vec<String> = p
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.windows(3).any(|w| w == ["--ro-bind-fd", "14", "/etc"]));
    }

    #[test]
    fn an_environment_is_bound_read_only_with_its_bin_first_on_path() {
        let j = job(r#"{"argv": ["true"]}"#);
        let mut f = folders();
        f.environment = Some(EnvMount {
            tree: "/data/environments/trees/h/tree".into(),
            variables: vec![("PYTHONPATH".into(), "/opt/skill-env/python".into())],
        });
        let p = plan(&j, &f, &identity(false));
        assert_eq!(
            p.folders.last(),
            Some(&(FD_ENVIRONMENT, "/data/environments/trees/h/tree".into()))
        );
        let args: Vec<String> = p
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let has = |w: [&str; 3]| args.windows(3).any(|x| x == w);
        assert!(has(["--ro-bind-fd", "15", "/opt/skill-env"]), "{args:?}");
        assert!(has([
            "--setenv",
            "PATH",
            "/opt/skill-env/bin:/usr/bin:/bin"
        ]));
        assert!(has(["--setenv", "PYTHONPATH", "/opt/skill-env/python"]));
        assert_eq!(
            crate::sandbox::paths::ENVIRONMENT_DIR,
            crate::package::environment::resolve::MOUNT_POINT
        );
        // Without one: no bind, the baseline PATH.
        let p = plan(&j, &folders(), &identity(false));
        let args: Vec<String> = p
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(!args.iter().any(|a| a == "/opt/skill-env"));
        assert!(args
            .windows(3)
            .any(|x| x == ["--setenv", "PATH", "/usr/bin:/bin"]));
    }
}
