//! Spawning and watching one process tree, and the operating-system
//! mechanisms that bound it (docs/sandbox.md, "Supervision").
//!
//! Invariants of the room:
//! - [`process`] is the only place that spawns; one `poll` loop per
//!   execution enforces the timeout, cancellation and output caps, and
//!   reaps the launcher only after it stops signalling it;
//! - [`cgroup`] and [`diskwatch`] enforce memory, process and disk limits
//!   and report which one was hit;
//! - [`sys`] is the only module allowed `unsafe` (the crate denies it
//!   everywhere else), each block with a SAFETY comment naming the
//!   invariant;
//! - [`report`] reads the exec shim's report pipe: whether the command was
//!   executed at all.

pub mod cgroup;
pub mod diskwatch;
pub mod process;
pub mod report;
#[allow(unsafe_code)]
pub mod sys;

pub use process::{
    start, supervise, Cancel, Captured, ForwardSink, NoSink, Outcome, OutputPolicy, Sink, Spawn,
    Started, Stream,
};
pub use report::ExecReport;
