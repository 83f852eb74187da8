//! The isolation: what a sandbox may see and do, as data, and the exact
//! launcher command for it (docs/sandbox.md, docs/seatbelt.md).
//!
//! Invariants of the room:
//! - a [`profile`] is parsed and checked once; [`bwrap`] and [`macos`]
//!   turn a plan into an argv or a Seatbelt profile and spawn nothing, so
//!   `explain` prints exactly what runs;
//! - the sandbox-side paths (`/skills`, `/skill-extensions`, `/workspace`)
//!   and their environment variables have one definition ([`paths`]), and
//!   so does what the sandbox finds on each file descriptor ([`fds`]);
//! - the seccomp program is built from the syscall name table
//!   ([`syscalls`]) and the profile, and checked against seccompiler in the
//!   tests ([`seccomp`]);
//! - the command runs as an unprivileged user ([`identity`]) behind the
//!   exec shim ([`shim`]), which alone tells a finished sandbox from a
//!   failed setup;
//! - a job with a network allowlist reaches only the runner's proxy
//!   ([`net`]);
//! - `/etc` is one read-only bind of a copy of the profile's `/etc`
//!   pieces ([`etcview`]), used only while the host's files are as they
//!   were copied, else the pieces are bound one by one.
//!
//! The room knows nothing of packages: it takes the folder to bind at
//! `/skills` as a descriptor.

pub mod bwrap;
pub mod etcview;
pub mod fds;
pub mod fetchbox;
pub mod handover;
pub mod host;
pub mod identity;
pub mod macos;
pub mod net;
pub mod paths;
pub mod profile;
#[cfg(target_os = "linux")]
pub mod seccomp;
pub mod shim;
#[cfg(target_os = "linux")]
pub mod syscalls;
#[cfg(target_os = "linux")]
pub mod template;
