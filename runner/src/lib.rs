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
pub mod sys;
