//! The seatbelt crate's tests, one test binary (`cargo test -p
//! skill-runner-seatbelt --test integration`): the whole rendered profile against golden
//! files, the structural checks every profile must pass, and the refusals.
//! Each module proves one part:

mod canonicalize; // the macOS canonical form of a host path, computed without the disk
mod common; // fixtures, and the checks every rendered profile must pass
mod render; // whole profiles and parameter lists against golden files; what never appears
mod render_errors; // what render cannot make safe it refuses, saying what to do
