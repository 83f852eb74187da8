//! One execution end to end: a job is parsed and validated ([`job`]) and,
//! from an untrusting front end, admitted ([`confine`]); its limits are
//! given their mechanisms ([`limits`]), the [`runner`] checks its
//! [`folders`], stages its packages, makes its launch [`plan`] (which
//! [`explain`] shows, from the same function) and starts it through the
//! platform's [`launch`]er, supervises it (with what [`watch`]es beside
//! it), and how it ended is classified ([`outcome`]) into a [`result`]; a
//! refusal is an [`error::ExecError`], made the result's `error` once, at
//! the edge; [`diagnose`] turns a launcher's failure into a fix,
//! [`doctor`] checks a host, [`envbuild`] runs an environment build's
//! install step as a job, [`envfetch`] its fetch step in a sandbox that
//! shares only the host's network; [`attest`] seals each result with its
//! signed receipt and [`replay`] runs a receipted job again to compare.
//!
//! Invariants of the room:
//! - fail closed: anything that cannot be set up as asked rejects the
//!   execution before anything runs, with one sentence and a typed
//!   [`crate::error::ErrorKind`];
//! - a result names the exact package bytes the command saw (the manifest
//!   of the snapshot root it was launched with);
//! - the runner never reaches up into the skill host: a job naming a
//!   session is resolved into its frozen bindings by the front end (the
//!   CLI, the daemon) before it is admitted ([`job::Job::resolve_session`]);
//! - a front end that does not trust its caller with host paths admits
//!   the job through [`confine::Confinement::admit`], one check for both.

pub mod attest;
pub mod confine;
pub mod diagnose;
pub mod doctor;
pub mod envbuild;
pub mod envfetch;
pub mod error;
pub mod explain;
pub mod files;
pub mod folders;
pub mod job;
pub mod launch;
pub mod limits;
pub mod outcome;
pub mod plan;
#[cfg(target_os = "linux")]
pub mod prepared;
pub mod replay;
pub mod result;
pub mod runner;
pub mod watch;

pub use runner::{
    default_data_dir, OutputMode, RunOptions, Runner, RunnerConfig, RunnerError, JOB_ROOT, SANDBOX,
};
