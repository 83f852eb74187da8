//! Find-ranking quality: top-1, top-3 and mean reciprocal rank
//! of `catalog find` / `find_skills` on the evaluation set in `eval/`,
//! side by side with a plain BM25 baseline over name and description.
//!
//! Run: `scripts/bench-find` (this, then the find speed benchmark), or
//! `cargo bench -p skill-runner --bench find_eval`; `MISSES=1` lists every
//! query whose skill did not come first. Prints; asserts nothing (the
//! quality gate is `runner/tests/find_eval.rs`).

#[path = "eval/harness.rs"]
mod harness;

use harness::{evaluate, Bm25};

fn main() {
    let skills = harness::skills();
    let cases = harness::cases(&skills);
    let ranking = evaluate(&skills, &cases, harness::product(&skills));
    let bm25 = Bm25::new(&skills);
    let baseline = evaluate(&skills, &cases, |q| bm25.rank(q));
    println!(
        "find ranking on the evaluation set: {} skills, {} queries",
        skills.len(),
        cases.len()
    );
    println!("| ranking          | top-1          | top-3          | MRR   |");
    println!("|------------------|----------------|----------------|-------|");
    println!("{}", harness::row("catalog find", &ranking));
    println!("{}", harness::row("BM25 baseline", &baseline));
    if std::env::var_os("MISSES").is_some() {
        for (name, s) in [("catalog find", &ranking), ("BM25 baseline", &baseline)] {
            println!("\n{name}: not first");
            for (q, want, at, top) in &s.misses {
                let at = at.map_or("-".to_owned(), |p| p.to_string());
                println!(
                    "  {q:<70} want {want:<22} at {at:<3} got {}",
                    top.join(", ")
                );
            }
        }
    }
}
