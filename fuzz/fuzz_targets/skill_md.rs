//! The `skill_md` target: its body and invariants are
//! `skill_runner_fuzz::targets::skill_md`, which the corpus replay
//! (fuzz/tests/corpus.rs) runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skill_runner_fuzz::targets::skill_md::run(data));
