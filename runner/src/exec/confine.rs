//! Job admission: what a job from a front end that does not trust its
//! caller with host paths may name (docs/daemon.md, "Security";
//! docs/formats.md, `run --confine`).
//!
//! Both front ends admit such a job here, with the same sentences: the
//! daemon (its `--root` folders) and `skill-runner run --confine DIR`.
//! [`Confinement::admit`] takes the job as written, refuses a profile
//! file before anything reads it (a profile can bind any host path into
//! the sandbox), validates the job, and confines its host paths: a caller
//! is trusted to choose skills and limits, not host paths, so
//! `workspace`, `extensions_dir` and each skill `path` must resolve, after
//! following symlinks, to a place under one of the roots. The job is then
//! rewritten to carry the resolved paths, so the runner mounts what was
//! checked. Which front end admits ([`Gate`]) only picks the words that
//! name its roots and the option that sets them; the checks are one.
//!
//! Invariants:
//! - a path is absolute and has no `..` segment; the longest existing
//!   prefix is resolved with `realpath`, the missing rest is appended as
//!   plain names (the runner then refuses a named folder that does not
//!   exist, and creates only its own default extensions dir), and a
//!   dangling symlink on the way is refused (creating through it would
//!   leave the roots);
//! - when a job names a workspace but no extensions dir, the default
//!   `<workspace>/.sciencediscovery/skill-extensions` is resolved and
//!   checked the same way, because an earlier command could have planted a
//!   symlink there; it stays the runner's default, which the runner creates
//!   without following symlinks (`exec::default_extensions_dir`).
//!
//! Limit: the check and the runner's mount are two moments. A process that
//! can write inside a root (a sandboxed command whose workspace is there)
//! could swap a checked folder for a symlink in between; name folders that
//! no concurrently running command can write, or give each execution its
//! own workspace.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::ErrorKind;
use crate::exec::job::{Job, JobError, RawJob};

/// The front end that admits a job: it names the roots and the option
/// that sets them in the refusals, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `skill-runner serve --root DIR`.
    Daemon,
    /// `skill-runner run --confine DIR`.
    Cli,
}

impl Gate {
    /// The roots, as a refusal names them.
    fn roots(self) -> &'static str {
        match self {
            Gate::Daemon => "the daemon's roots",
            Gate::Cli => "the --confine folder",
        }
    }

    /// The option that sets the roots.
    fn option(self) -> &'static str {
        match self {
            Gate::Daemon => "skill-runner serve --root",
            Gate::Cli => "skill-runner run --confine",
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.roots())
    }
}

/// The canonical root folders, and who confines to them.
#[derive(Debug, Clone)]
pub struct Confinement {
    roots: Vec<PathBuf>,
    gate: Gate,
}

/// Why a job was not admitted. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("profile {profile:?} is a file, and a job admitted under {gate} may name only built-in profiles (a profile file can bind any host path into the sandbox); name one, e.g. \"default\" ({})", gate.option())]
    ProfileFile { profile: String, gate: Gate },
    #[error(transparent)]
    Path(#[from] ConfineError),
    #[error("the root {path} cannot be resolved: {source}; name an existing folder ({})", gate.option())]
    Root {
        path: PathBuf,
        gate: Gate,
        source: io::Error,
    },
}

impl AdmitError {
    /// The error kind of the refusal: a host path outside the roots is
    /// `path_not_allowed`, anything else a bad job. (The CLI reports every
    /// refusal of a job as `bad_job`, as it always has.)
    pub fn kind(&self) -> ErrorKind {
        match self {
            AdmitError::Job(_) | AdmitError::ProfileFile { .. } | AdmitError::Root { .. } => {
                ErrorKind::BadJob
            }
            AdmitError::Path(_) => ErrorKind::PathNotAllowed,
        }
    }
}

/// Why a job's path was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("{field} {path} is outside {gate} ({roots}); name a folder under one of them ({})", gate.option())]
    Outside {
        field: &'static str,
        path: PathBuf,
        roots: String,
        gate: Gate,
    },
    #[error("{field} {path} must be an absolute path without '..' segments")]
    NotNormal { field: &'static str, path: PathBuf },
    #[error("{field} {path} passes through the dangling symlink {link}; remove it or name another folder")]
    DanglingSymlink {
        field: &'static str,
        path: PathBuf,
        link: PathBuf,
    },
    #[error("{field} {path} cannot be resolved: {source}")]
    Resolve {
        field: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl Confinement {
    /// `roots` must be canonical folders; `gate` is the front end that
    /// confines to them.
    pub fn new(roots: Vec<PathBuf>, gate: Gate) -> Confinement {
        Confinement { roots, gate }
    }

    /// A confinement to one folder, which must exist (`run --confine`).
    pub fn under(dir: &Path, gate: Gate) -> Result<Confinement, AdmitError> {
        let root = dir.canonicalize().map_err(|source| AdmitError::Root {
            path: dir.to_owned(),
            gate,
            source,
        })?;
        Ok(Confinement::new(vec![root], gate))
    }

    /// Admits a job as written: a profile file is refused before anything
    /// reads it, then the job is validated (relative paths resolve against
    /// `base`) and its host paths confined.
    pub fn admit(&self, raw: RawJob, base: Option<&Path>) -> Result<Job, AdmitError> {
        if let Some(profile) = raw.profile.as_deref().filter(|p| p.contains('/')) {
            return Err(AdmitError::ProfileFile {
                profile: profile.to_owned(),
                gate: self.gate,
            });
        }
        let mut job = Job::validate(raw, base)?;
        self.confine(&mut job)?;
        Ok(job)
    }

    pub fn list(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Resolves `path` and checks that it lies under a root.
    pub fn resolve(&self, field: &'static str, path: &Path) -> Result<PathBuf, ConfineError> {
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(ConfineError::NotNormal {
                field,
                path: path.to_owned(),
            });
        }
        let mut existing = path.to_path_buf();
        let mut missing: Vec<OsString> = Vec::new();
        let real = loop {
            match existing.canonicalize() {
                Ok(real) => break real,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if existing.symlink_metadata().is_ok() {
                        return Err(ConfineError::DanglingSymlink {
                            field,
                            path: path.to_owned(),
                            link: existing,
                        });
                    }
                    let Some(name) = existing.file_name() else {
                        return Err(ConfineError::Resolve {
                            field,
                            path: path.to_owned(),
                            source: e,
                        });
                    };
                    missing.push(name.to_owned());
                    existing.pop();
                }
                Err(source) => {
                    return Err(ConfineError::Resolve {
                        field,
                        path: path.to_owned(),
                        source,
                    })
                }
            }
        };
        let full = missing.iter().rev().fold(real, |p, name| p.join(name));
        if self.roots.iter().any(|r| full.starts_with(r)) {
            Ok(full)
        } else {
            Err(ConfineError::Outside {
                field,
                path: path.to_owned(),
                roots: self
                    .roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                gate: self.gate,
            })
        }
    }

    /// Checks every host path of a job and rewrites it to its resolved form.
    fn confine(&self, job: &mut Job) -> Result<(), ConfineError> {
        if let Some(ws) = &job.workspace {
            job.workspace = Some(self.resolve("workspace", ws)?);
        }
        match (&job.extensions_dir, &job.workspace) {
            (Some(e), _) => job.extensions_dir = Some(self.resolve("extensions_dir", e)?),
            // Checked, but left to the runner, which creates the default
            // without following symlinks; naming it explicitly here would
            // turn that into a plain, symlink-following path.
            (None, Some(ws)) => {
                self.resolve(
                    "extensions_dir",
                    &ws.join(".sciencediscovery/skill-extensions"),
                )?;
            }
            // A fresh private workspace: its default is private too.
            (None, None) => {}
        }
        for skill in &mut job.skills {
            if let Some(p) = &skill.path {
                skill.path = Some(self.resolve("skill path", p)?);
            }
        }
        job.confined = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn raw(json: &str) -> RawJob {
        serde_json::from_str(json).unwrap()
    }

    fn setup() -> (tempfile::TempDir, Confinement) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("ws")).unwrap();
        let roots = Confinement::new(vec![root.canonicalize().unwrap()], Gate::Daemon);
        (dir, roots)
    }

    #[test]
    fn paths_under_a_root_resolve() {
        let (dir, roots) = setup();
        let root = dir.path().join("root").canonicalize().unwrap();
        assert_eq!(
            roots.resolve("workspace", &root.join("ws")).unwrap(),
            root.join("ws")
        );
        // Missing folders resolve (the runner decides what may be missing).
        assert_eq!(
            roots.resolve("workspace", &root.join("new/sub")).unwrap(),
            root.join("new/sub")
        );
        assert_eq!(roots.resolve("workspace", &root).unwrap(), root);
    }

    #[test]
    fn paths_outside_or_escaping_are_refused() {
        let (dir, roots) = setup();
        let root = dir.path().join("root");
        let outside = |p: &Path| roots.resolve("workspace", p).unwrap_err();
        assert!(matches!(
            outside(Path::new("/etc")),
            ConfineError::Outside { .. }
        ));
        assert!(matches!(
            outside(&root.join("../root/ws")),
            ConfineError::NotNormal { .. }
        ));
        assert!(matches!(
            outside(Path::new("ws")),
            ConfineError::NotNormal { .. }
        ));
        symlink("/etc", root.join("ws/link")).unwrap();
        assert!(matches!(
            outside(&root.join("ws/link")),
            ConfineError::Outside { .. }
        ));
        assert!(matches!(
            outside(&root.join("ws/link/new")),
            ConfineError::Outside { .. }
        ));
        symlink("/nonexistent-sr-test/x", root.join("ws/dangling")).unwrap();
        assert!(matches!(
            outside(&root.join("ws/dangling/sub")),
            ConfineError::DanglingSymlink { .. }
        ));
        // A prefix that is not a path prefix.
        std::fs::create_dir_all(dir.path().join("root2")).unwrap();
        assert!(matches!(
            outside(&dir.path().join("root2")),
            ConfineError::Outside { .. }
        ));
    }

    #[test]
    fn a_planted_extensions_symlink_is_refused() {
        let (dir, roots) = setup();
        let ws = dir.path().join("root/ws");
        std::fs::create_dir_all(ws.join(".sciencediscovery")).unwrap();
        symlink("/etc", ws.join(".sciencediscovery/skill-extensions")).unwrap();
        let e = roots
            .admit(
                raw(&format!(
                    r#"{{"argv":["true"],"workspace":{:?}}}"#,
                    ws.display()
                )),
                None,
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PathNotAllowed);
        let AdmitError::Path(e) = e else {
            panic!("{e}")
        };
        assert!(
            matches!(
                e,
                ConfineError::Outside {
                    field: "extensions_dir",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_profile_file_is_refused_before_it_is_read() {
        let (dir, _) = setup();
        let root = dir.path().join("root").canonicalize().unwrap();
        // A FIFO nobody writes: reading it would block the admission.
        let fifo = root.join("profile.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (gate, says) in [
            (Gate::Daemon, "skill-runner serve --root"),
            (Gate::Cli, "skill-runner run --confine"),
        ] {
            let roots = Confinement::new(vec![root.clone()], gate);
            let job = format!(r#"{{"argv":["true"],"profile":{:?}}}"#, fifo.display());
            let e = roots.admit(raw(&job), None).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadJob);
            let msg = e.to_string();
            assert!(
                msg.contains("only built-in profiles") && msg.contains(says),
                "{msg}"
            );
        }
    }

    #[test]
    fn both_gates_refuse_with_the_same_sentence_but_their_own_roots() {
        let (dir, _) = setup();
        let root = dir.path().join("root").canonicalize().unwrap();
        let refusal = |gate| {
            Confinement::new(vec![root.clone()], gate)
                .admit(raw(r#"{"argv":["true"],"workspace":"/etc"}"#), None)
                .unwrap_err()
                .to_string()
        };
        let (daemon, cli) = (refusal(Gate::Daemon), refusal(Gate::Cli));
        assert_eq!(
            daemon
                .replace("the daemon's roots", "ROOTS")
                .replace("skill-runner serve --root", "OPTION"),
            cli.replace("the --confine folder", "ROOTS")
                .replace("skill-runner run --confine", "OPTION"),
        );
        assert!(
            daemon.starts_with("workspace /etc is outside the daemon's roots"),
            "{daemon}"
        );
        // A job that passes is validated and carries the resolved paths.
        let ws = root.join("ws");
        let job = Confinement::new(vec![root.clone()], Gate::Cli)
            .admit(
                raw(&format!(
                    r#"{{"argv":["true"],"workspace":{:?}}}"#,
                    dir.path().join("root/ws").display()
                )),
                None,
            )
            .unwrap();
        assert_eq!(job.workspace.as_deref(), Some(ws.as_path()));
        assert!(job.confined);
    }
}
