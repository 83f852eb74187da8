//! skill-runner: run one command of an AI-agent Skill in a sandbox, with
//! exactly the package bytes that were pinned.
//!
//! The crate is layered; each module is one concept:
//!
//! | module | concept |
//! |---|---|
//! | [`hash`] | package hash, file hash, set identity (pure) |
//! | [`package`] | what a package may contain; `SKILL.md` front matter (pure) |
//! | [`bundle`] | the transport JSON (pure) |
//! | [`source`] | listing a package folder on the host |
//! | [`store`] | the content-addressed store |
//! | [`stage`] | building and verifying a snapshot root |
//! | [`fsx`] | file-system primitives (no-follow opens, copies, locks) |
//! | [`catalog`] | the skills offered by name: built-in, user, project |
//! | [`session`] | the skill host: frozen sessions and their tool routes |
//! | [`net`] | a job's network allowlist: policy, the proxy, the sandbox's forwarder |
//!
//! `unsafe` is denied in the whole crate but [`sys`], which holds every
//! system call that needs it, each with a SAFETY comment naming the
//! invariant. (The exec shim in `exec-shim/` is a program of its own,
//! without a C library: its raw system calls are its whole point.)

#![deny(unsafe_code)]

pub mod alias;
pub mod bundle;
pub mod catalog;
pub mod cgroup;
pub mod daemon;
pub mod diagnose;
pub mod diskwatch;
pub mod doctor;
pub mod exec;
pub mod fsx;
pub mod hash;
pub mod identity;
pub mod job;
pub mod launch;
pub mod macos;
pub mod net;
pub mod package;
pub mod profile;
pub mod result;
pub mod roots;
#[cfg(target_os = "linux")]
pub mod seccomp;
pub mod session;
pub mod shim;
pub mod source;
pub mod stage;
pub mod store;
pub mod supervise;
#[allow(unsafe_code)]
pub mod sys;
