//! Host paths a daemon job may name: only folders under the configured
//! roots (docs/daemon.md, "Security").
//!
//! A socket caller is trusted to choose skills and limits, not host paths:
//! `workspace`, `extensions_dir` and each skill `path` must resolve, after
//! following symlinks, to a place under one of the roots. The job is then
//! rewritten to carry the resolved paths, so the runner mounts what was
//! checked.
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

use crate::exec::job::Job;

/// The canonical root folders.
#[derive(Debug, Clone)]
pub struct Confinement {
    roots: Vec<PathBuf>,
}

/// Why a job's path was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("{field} {path} is outside the daemon's roots ({roots}); name a folder under one of them (skill-runner serve --root)")]
    Outside {
        field: &'static str,
        path: PathBuf,
        roots: String,
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
    /// `roots` must be canonical folders.
    pub fn new(roots: Vec<PathBuf>) -> Confinement {
        Confinement { roots }
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
            })
        }
    }

    /// Checks every host path of a job and rewrites it to its resolved form.
    pub fn confine(&self, job: &mut Job) -> Result<(), ConfineError> {
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

    fn setup() -> (tempfile::TempDir, Confinement) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("ws")).unwrap();
        let roots = Confinement::new(vec![root.canonicalize().unwrap()]);
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
        let mut job = Job::from_json(
            format!(r#"{{"argv":["true"],"workspace":{:?}}}"#, ws.display()).as_bytes(),
            None,
        )
        .unwrap();
        let e = roots.confine(&mut job).unwrap_err();
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
}
