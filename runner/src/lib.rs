//! skill-runner: run one command of an AI-agent Skill in a sandbox, with
//! exactly the package bytes that were pinned.
//!
//! The crate is a ladder of rooms; a room may use the rooms below it and
//! never one above (`runner/tests/architecture.rs` checks this, and that
//! the modules of a room import each other in no cycle; a child naming its
//! own parent's items is the module tree, not a cycle):
//!
//! | room | what it holds | may use |
//! |---|---|---|
//! | [`daemon`] | `skill-runner serve`: the HTTP API, its settings, registry and streams | everything below |
//! | [`skillhost`] | the skill catalog and sessions (frozen selections and their tool routes) | `exec` and below |
//! | [`exec`] | one execution end to end: job, limits, runner, outcome, result and its receipt, replay, diagnosis, doctor | `package`, `sandbox`, `receipt` and below |
//! | [`package`] | package bytes: hash, format, bundle, source, store, staging, published roots | `supervise`, `datadir`, `fsx`, `text`, `error` |
//! | [`receipt`] | signed receipts: canonical JSON, DSSE envelopes, in-toto statements, the runner's key, verification | `fsx`, `text`, `error` |
//! | [`sandbox`] | the isolation: profile, seccomp, bubblewrap argv, Seatbelt plan, identity, exec shim, network | `supervise`, `datadir`, `fsx`, `text`, `error` |
//! | [`supervise`] | spawning and watching one process tree; cgroups; the only `unsafe` ([`supervise::sys`]) | `fsx`, `text`, `error` |
//! | [`datadir`] | the runner's data dir: its folders, their owners and modes, opened without following planted links | `fsx`, `text`, `error` |
//! | [`fsx`] | file-system primitives: no-follow opens, copies, locks | `text`, `error` |
//! | [`text`] | small pure formatting helpers | nothing |
//! | [`memo`] | a cache of the last few values computed from equal keys | nothing |
//! | [`telemetry`] | the one `tracing` set-up of the CLI and the daemon | nothing |
//! | [`error`] | the error kinds of every error document | nothing |
//!
//! `package`, `sandbox` and `receipt` stand side by side: none uses
//! another, only `exec` brings package bytes and a sandbox together, and
//! `exec` seals each result with a receipt (the daemon serves its key). The CLI
//! (`main.rs`, with its argument structs in `cli.rs`) sits on top.
//!
//! `unsafe` is denied in the whole crate but [`supervise::sys`], which
//! holds every system call that needs it, each with a SAFETY comment
//! naming the invariant. (The exec shim in `exec-shim/` is a program of
//! its own, without a C library: its raw system calls are its whole
//! point.)

#![deny(unsafe_code)]

pub mod daemon;
pub mod datadir;
pub mod error;
pub mod exec;
pub mod fsx;
pub mod memo;
pub mod package;
pub mod receipt;
pub mod sandbox;
pub mod skillhost;
pub mod supervise;
pub mod telemetry;
pub mod text;
