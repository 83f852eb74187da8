//! Environments: the frozen, content-addressed, read-only trees of
//! dependencies a skill's scripts import (docs/environments.md; the hash
//! and the record in docs/formats.md, "Environments").
//!
//! An environment is named `{id, hash}`: `hash` is the environment hash of
//! its tree ([`tree`]), `id` a name people use. Its [`Record`] also names
//! the interpreter(s) it was built for (its **base**) and the digest of the
//! lock it was built from ([`lock`]).
//!
//! Invariants:
//! - a tree in the store was hashed from the bytes written into it, sealed,
//!   and renamed into place under its hash: a lookup never finds a partial
//!   tree, and one hash has one copy however many ids name it ([`store`]);
//! - a symlink in a tree points inside it or into the read-only system,
//!   never elsewhere; a tree holds nothing but files, folders and such
//!   symlinks;
//! - [`tree`] and [`lock`] are pure.
//!
//! [`base`] names and re-checks the interpreter; [`build`] makes a tree
//! from a lock (its install step through a sandbox the caller provides);
//! [`resolve`] readies a stored environment for one use; [`declare`]
//! reads the one a skill declares.
//!
//! The tree's layout leaves room for more than one interpreter family:
//! Python's packages live under `python/` (the `pip install --target`
//! folder), programs under `bin/`; a later Node family takes
//! `node/node_modules/` beside them, with its own base and lock entries in
//! the same record.

pub mod base;
pub mod build;
pub mod declare;
pub mod lock;
pub mod resolve;
pub mod stamp;
pub mod store;
pub mod tree;

use serde::{Deserialize, Serialize};

/// The folder of a tree that holds Python's packages (`PYTHONPATH`).
pub const PYTHON_DIR: &str = "python";
/// The folder of a tree whose programs go first on `PATH`.
pub const BIN_DIR: &str = "bin";

/// An environment's identity, as a job will name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvRef {
    pub id: String,
    pub hash: String,
}

/// An interpreter family an environment holds packages for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Python,
}

/// The interpreter an environment was built for: checked at every use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Base {
    pub family: Family,
    /// Absolute path of the interpreter, the same on the host and in the
    /// sandbox (it lies in the read-only system), e.g. `/usr/bin/python3`.
    pub path: String,
    /// Its version as it reports it (`3.11.2`).
    pub version: String,
    /// SHA-256 of the interpreter binary (the file `path` resolves to).
    pub sha256: String,
}

/// The lock an environment was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRef {
    /// `python-requirements` ([`lock::PYTHON_REQUIREMENTS`]).
    pub kind: String,
    /// SHA-256 of the lock file's bytes.
    pub sha256: String,
}

/// What the store holds about one `{id, hash}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub id: String,
    pub hash: String,
    /// The interpreters it was built for; empty for a tree added without one.
    pub base: Vec<Base>,
    /// The locks it was built from; empty for a tree added without one.
    pub locks: Vec<LockRef>,
    /// Regular files in the tree.
    pub files: u64,
    /// Symlinks in the tree.
    pub symlinks: u64,
    /// Bytes of its regular files.
    pub bytes: u64,
    /// When this record was made (RFC 3339, UTC).
    pub created: String,
}

impl Record {
    pub fn env_ref(&self) -> EnvRef {
        EnvRef {
            id: self.id.clone(),
            hash: self.hash.clone(),
        }
    }
}
