//! Package bytes, from a folder or a bundle to a verified, published
//! snapshot root (docs/packages.md).
//!
//! Invariants of the room:
//! - a package is named by its hash, and every byte an execution sees was
//!   checked against that hash after it was written where the execution
//!   reads it ([`stage`], [`verify`]); nothing trusts a name, a size or a
//!   timestamp instead;
//! - what is published is read-only and never written again: the store's
//!   entries ([`store`]) and the snapshot roots executions lease
//!   ([`published`]) are created beside their final place and renamed in;
//! - reads of host folders never follow a symlink ([`source`], through
//!   [`crate::fsx`]);
//! - [`hash`], [`format`](mod@format) and [`bundle`] are pure.
//!
//! The room knows nothing of sandboxes: [`crate::exec`] hands a published
//! root to [`crate::sandbox`].

pub mod bundle;
pub mod environment;
pub mod format;
pub mod hash;
pub mod oci;
pub mod published;
pub mod source;
pub mod stage;
pub mod store;
pub mod verify;
