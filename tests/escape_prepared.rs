//! The escape suite (`tests/escape.rs`) again, every command handed to a
//! sandbox prepared ahead of it (docs/prepared.md): the same attempts must
//! fail in the same way, and each result says it ran in one.

/// Read by the suite: hand every command to a prepared sandbox.
const PREPARED: bool = true;

// The same file as `escape`, on purpose: compiled again with `PREPARED`.
#[allow(clippy::duplicate_mod)]
#[path = "escape.rs"]
mod suite;
