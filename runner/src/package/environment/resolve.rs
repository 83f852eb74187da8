//! Making a stored environment ready for one use: the record, a lease for
//! as long as the use lasts, the tree checked, the base checked, and the
//! paths the sandbox gives the command (docs/environments.md, "Use").
//!
//! The exec room calls [`prepare`] before a command starts and keeps the
//! [`Ready`] (its lease) until the command is done; a refusal here is a
//! refusal of the job. The tree is checked by its stamp when the stamp
//! still matches (no byte read), and re-hashed byte by byte when it does
//! not; a tree that fails that is refused naming what changed. The base's
//! interpreter binary is re-hashed only when its fingerprint changed
//! ([`crate::package::environment::base::check_base_cached`]).

use std::path::PathBuf;

use crate::error::ErrorKind;
use crate::package::environment::base::{check_base_cached, BaseError};
use crate::package::environment::store::{EnvError, EnvStore, Lease};
use crate::package::environment::{EnvRef, Family, Record, BIN_DIR, PYTHON_DIR};

/// Where an environment's tree appears in the sandbox (Linux), read-only.
pub const MOUNT_POINT: &str = "/opt/skill-env";

/// How the tree was found intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Its stamp matched: nothing was changed since it was sealed.
    Stamp,
    /// Its stamp did not match, and every byte was re-hashed.
    Rehashed,
}

/// A stored environment ready for one use; its lease keeps
/// [`EnvStore::gc`] away until it is dropped.
#[derive(Debug)]
pub struct Ready {
    pub record: Record,
    pub lease: Lease,
    pub checked: Checked,
}

impl Ready {
    /// The tree on the host (what is bound at [`MOUNT_POINT`], and the
    /// Seatbelt profile's read-only parameter on macOS).
    pub fn host_tree(&self) -> &PathBuf {
        &self.lease.tree
    }

    /// The folder to put first on `PATH`, as the sandbox sees it.
    pub fn path_prefix(mount_point: &str) -> String {
        format!("{mount_point}/{BIN_DIR}")
    }

    /// The interpreters' path variables, as the sandbox sees them:
    /// `PYTHONPATH=<mount>/python` when the environment has a Python base.
    pub fn variables(&self, mount_point: &str) -> Vec<(&'static str, String)> {
        variables(&self.record, mount_point)
    }
}

/// The path variables of `record`'s environment mounted at `mount_point`
/// (pure: `explain` shows them from the record alone).
pub fn variables(record: &Record, mount_point: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if record.base.iter().any(|b| b.family == Family::Python) {
        out.push(("PYTHONPATH", format!("{mount_point}/{PYTHON_DIR}")));
    }
    out
}

/// Why an environment cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("environment {{id {id:?}, hash {hash}}}: {source}")]
    Store {
        id: String,
        hash: String,
        source: Box<EnvError>,
    },
    #[error("environment {{id {id:?}, hash {hash}}}: {source}")]
    Base {
        id: String,
        hash: String,
        source: BaseError,
    },
}

impl ResolveError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ResolveError::Store { source, .. } => source.kind(),
            ResolveError::Base { .. } => ErrorKind::HashMismatch,
        }
    }
}

/// Leases and checks `env` for one use.
pub fn prepare(store: &EnvStore, env: &EnvRef) -> Result<Ready, ResolveError> {
    let store_err = |source| ResolveError::Store {
        id: env.id.clone(),
        hash: env.hash.clone(),
        source: Box::new(source),
    };
    let record = store.record(env).map_err(store_err)?;
    let lease = store.lease(&env.hash).map_err(store_err)?;
    let checked = if store.stamp_matches(&env.hash).map_err(store_err)? {
        Checked::Stamp
    } else {
        store.verify_and_restamp(&env.hash).map_err(store_err)?;
        Checked::Rehashed
    };
    for base in &record.base {
        check_base_cached(base, &store.root().join("bases")).map_err(|source| {
            ResolveError::Base {
                id: env.id.clone(),
                hash: env.hash.clone(),
                source,
            }
        })?;
    }
    Ok(Ready {
        record,
        lease,
        checked,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;
    use crate::package::environment::base::{probe_python, DEFAULT_PYTHON};
    use crate::package::environment::store::EnvLimits;
    use crate::package::environment::Base;

    fn tree(dir: &Path) {
        fs::create_dir_all(dir.join("python/pkg")).unwrap();
        fs::write(dir.join("python/pkg/__init__.py"), "X = 1\n").unwrap();
    }

    #[test]
    fn a_sound_environment_is_ready_by_its_stamp_and_a_touched_one_is_rehashed() {
        let t = tempfile::tempdir().unwrap();
        tree(&t.path().join("src"));
        let store =
            EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
        let base = if Path::new(DEFAULT_PYTHON).exists() {
            vec![probe_python(DEFAULT_PYTHON).unwrap()]
        } else {
            Vec::new()
        };
        let rec = store
            .add(
                &t.path().join("src"),
                "env",
                base,
                vec![],
                &EnvLimits::default(),
            )
            .unwrap()
            .record;
        let ready = prepare(&store, &rec.env_ref()).unwrap();
        assert_eq!(ready.checked, Checked::Stamp);
        assert_eq!(ready.host_tree(), &store.tree_path(&rec.hash));
        assert_eq!(Ready::path_prefix(MOUNT_POINT), "/opt/skill-env/bin");
        if !rec.base.is_empty() {
            assert_eq!(
                ready.variables(MOUNT_POINT),
                [("PYTHONPATH", "/opt/skill-env/python".to_owned())]
            );
        }
        // While ready, the tree is leased: gc leaves it even unreferenced.
        store.remove(&rec.env_ref()).unwrap();
        assert_eq!(store.gc().unwrap().in_use, vec![rec.hash.clone()]);
        drop(ready);
        store
            .add(
                &t.path().join("src"),
                "env",
                rec.base.clone(),
                vec![],
                &EnvLimits::default(),
            )
            .unwrap();

        // A chmod and back changes the stamp, not the bytes: re-hashed, fine.
        let file = store.tree_path(&rec.hash).join("python/pkg/__init__.py");
        crate::fsx::chmod(&file, 0o644).unwrap();
        crate::fsx::chmod(&file, 0o444).unwrap();
        assert_eq!(
            prepare(&store, &rec.env_ref()).unwrap().checked,
            Checked::Rehashed
        );
        // Sound: stamped again, so the next use is cheap again.
        assert_eq!(
            prepare(&store, &rec.env_ref()).unwrap().checked,
            Checked::Stamp
        );
        // A changed byte is refused before any use.
        crate::fsx::chmod(&file, 0o644).unwrap();
        fs::write(&file, "X = 2\n").unwrap();
        crate::fsx::chmod(&file, 0o444).unwrap();
        let err = prepare(&store, &rec.env_ref()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::HashMismatch);
        assert!(err.to_string().contains("changed on disk"), "{err}");
    }

    #[test]
    fn a_changed_base_or_an_unknown_environment_is_refused() {
        let t = tempfile::tempdir().unwrap();
        tree(&t.path().join("src"));
        let store =
            EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
        let stale = Base {
            family: Family::Python,
            path: DEFAULT_PYTHON.into(),
            version: "3.0.0".into(),
            sha256: "0".repeat(64),
        };
        let rec = store
            .add(
                &t.path().join("src"),
                "env",
                vec![stale],
                vec![],
                &EnvLimits::default(),
            )
            .unwrap()
            .record;
        let err = prepare(&store, &rec.env_ref()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::HashMismatch);
        let msg = err.to_string();
        assert!(
            msg.contains("rebuild the environment") || msg.contains("cannot read interpreter"),
            "{msg}"
        );
        let unknown = EnvRef {
            id: "env".into(),
            hash: "1".repeat(64),
        };
        let err = prepare(&store, &unknown).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotInStore);
    }
}
