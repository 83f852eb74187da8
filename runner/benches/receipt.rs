//! Receipt benchmark: what sealing adds to one execution, in-process and
//! precise (the end-to-end comparison, `scripts/bench-receipts`, is
//! within the noise of a process start):
//!
//! 1. the facts of a job (its canonical digest, the profile's digest and
//!    its seccomp programs compiled and hashed, the versions);
//! 2. sealing a `/bin/true` result (serialize, statement, canonical JSON,
//!    ed25519 signature);
//! 3. verifying that result, and one with 1 MiB of stdout.
//!
//! Run: `cargo bench -p skill-runner --bench receipt` (ITER=N). Prints
//! medians in µs; asserts nothing.

use std::time::Instant;

use serde_json::{json, Value};
use skill_runner::exec::attest;
use skill_runner::exec::job::{Job, RawJob};
use skill_runner::exec::result::{ErrorInfo, ExecResult, Status};
use skill_runner::receipt::{verify, Signer};

fn median_us(iter: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..iter)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    t[t.len() / 2]
}

fn main() {
    let iter: usize = std::env::var("ITER")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::load_or_create(&dir.path().join("keys").join("k.pem")).unwrap();
    let host = skill_runner::sandbox::host::Host::probe(dir.path());
    let raw: RawJob = serde_json::from_value(json!({"argv": ["/bin/true"]})).unwrap();
    let job = Job::validate(raw, None).unwrap();
    let facts_us = median_us(iter, || {
        std::hint::black_box(attest::facts(Some(&job), &host));
    });
    let facts = attest::facts(Some(&job), &host);
    let mut result = ExecResult::rejected(
        &job.execution_id,
        "bubblewrap",
        ErrorInfo::new(skill_runner::error::ErrorKind::Internal, "x"),
    );
    result.status = Status::Exited;
    result.error = None;
    result.exit_code = Some(0);
    let seal_us = median_us(iter, || attest::seal(&mut result, &facts, &signer));
    let trusted = [signer.public().clone()];
    let bytes = serde_json::to_vec(&result).unwrap();
    let verify_us = median_us(iter, || {
        verify::verify(&bytes, &trusted).unwrap();
    });
    result.stdout = "x".repeat(1 << 20);
    attest::seal(&mut result, &facts, &signer);
    let big = serde_json::to_vec(&result).unwrap();
    let seal_big_us = median_us(iter / 10 + 1, || attest::seal(&mut result, &facts, &signer));
    let verify_big_us = median_us(iter / 10 + 1, || {
        verify::verify(&big, &trusted).unwrap();
    });
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    println!("receipt benchmark (median of {iter}; release build)");
    println!("facts of a job (digests, seccomp compiled and hashed): {facts_us:8.1} us");
    println!("seal a /bin/true result:                              {seal_us:8.1} us");
    println!("seal a result with 1 MiB of stdout:                   {seal_big_us:8.1} us");
    println!("verify a /bin/true result:                            {verify_us:8.1} us");
    println!("verify a result with 1 MiB of stdout:                 {verify_big_us:8.1} us");
    println!(
        "sizes: result {} bytes, its receipt {} bytes",
        bytes.len(),
        serde_json::to_vec(&v["receipt"]).unwrap().len()
    );
}
