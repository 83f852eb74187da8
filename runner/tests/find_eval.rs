//! The find-ranking quality gate: on the evaluation set in
//! `runner/benches/eval/` (50 skills, one query a line with the skill that
//! should win), the ranking of `catalog find` and `find_skills` must do at
//! least as well as a plain BM25 over name and description, on top-1 and
//! on mean reciprocal rank. A check of quality, not of time
//! (`scripts/bench-find` prints the figures and the speed).

#[path = "../benches/eval/harness.rs"]
mod harness;

#[test]
fn catalog_find_ranks_at_least_as_well_as_bm25_on_the_eval_set() {
    let skills = harness::skills();
    let cases = harness::cases(&skills);
    assert!(skills.len() >= 40, "{} skills", skills.len());
    assert!(cases.len() >= 60, "{} queries", cases.len());
    let ranking = harness::evaluate(&skills, &cases, harness::product(&skills));
    let bm25 = harness::Bm25::new(&skills);
    let baseline = harness::evaluate(&skills, &cases, |q| bm25.rank(q));
    let table = format!(
        "{}\n{}",
        harness::row("catalog find", &ranking),
        harness::row("BM25 baseline", &baseline)
    );
    assert!(ranking.top1 >= baseline.top1, "top-1 below BM25:\n{table}");
    assert!(ranking.mrr >= baseline.mrr, "MRR below BM25:\n{table}");
}
