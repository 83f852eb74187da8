//! The find-ranking evaluation: the skills of `skills.toml`,
//! the queries of `queries.txt`, the product ranking
//! ([`skill_runner::skillhost::catalog::rank`]) and a plain BM25 baseline, scored by
//! top-1, top-3 and mean reciprocal rank.
//!
//! Shared by `runner/benches/find_eval.rs` (`scripts/bench-find`, which
//! prints the tables) and `runner/tests/find_eval.rs` (the quality gate:
//! the ranking must do at least as well as the baseline). The baseline
//! lives here, not in the product: it is the yardstick.

// Each includer uses a part of this module.
#![allow(dead_code)]

use std::collections::HashMap;

use serde::Deserialize;
use skill_runner::skillhost::catalog::rank::{self, Doc, Query, RankIndex};

/// One skill of the set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// SKILL.md after the front matter.
    pub body: String,
}

/// One query and the skill that should come first.
#[derive(Debug)]
pub struct Case {
    pub want: String,
    pub query: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillsFile {
    skill: Vec<Skill>,
}

/// The skills of `skills.toml`.
pub fn skills() -> Vec<Skill> {
    let f: SkillsFile =
        toml::from_str(include_str!("skills.toml")).expect("eval/skills.toml is valid");
    f.skill
}

/// The queries of `queries.txt`, checked against `skills`.
pub fn cases(skills: &[Skill]) -> Vec<Case> {
    let mut out = Vec::new();
    for line in include_str!("queries.txt").lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (want, query) = line
            .split_once('|')
            .unwrap_or_else(|| panic!("eval/queries.txt: no '|' in {line:?}"));
        let want = want.trim().to_owned();
        assert!(
            skills.iter().any(|s| s.name == want),
            "eval/queries.txt: no skill named {want:?}"
        );
        out.push(Case {
            want,
            query: query.trim().to_owned(),
        });
    }
    out
}

/// How a ranking did on the set.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub queries: usize,
    pub top1: usize,
    pub top3: usize,
    /// Mean reciprocal rank of the wanted skill (0 for a query that does
    /// not rank it at all).
    pub mrr: f64,
    /// `(query, wanted, rank or None, the first three names)` of every
    /// query whose wanted skill did not come first.
    pub misses: Vec<(String, String, Option<usize>, Vec<String>)>,
}

/// Scores `rank`, which returns skill indices best first (only those it
/// considers matches).
pub fn evaluate(skills: &[Skill], cases: &[Case], rank: impl Fn(&str) -> Vec<usize>) -> Scores {
    let mut s = Scores {
        queries: cases.len(),
        top1: 0,
        top3: 0,
        mrr: 0.0,
        misses: Vec::new(),
    };
    for c in cases {
        let order = rank(&c.query);
        let at = order.iter().position(|&i| skills[i].name == c.want);
        match at {
            Some(0) => s.top1 += 1,
            _ => s.misses.push((
                c.query.clone(),
                c.want.clone(),
                at.map(|p| p + 1),
                order
                    .iter()
                    .take(3)
                    .map(|&i| skills[i].name.clone())
                    .collect(),
            )),
        }
        if at.is_some_and(|p| p < 3) {
            s.top3 += 1;
        }
        if let Some(p) = at {
            s.mrr += 1.0 / (p + 1) as f64;
        }
    }
    s.mrr /= cases.len() as f64;
    s
}

/// The product ranking over `skills`, as `catalog find` and
/// `find_skills` rank: name, description and the body's headings.
pub fn product(skills: &[Skill]) -> impl Fn(&str) -> Vec<usize> + '_ {
    let headings: Vec<String> = skills.iter().map(|s| rank::headings(&s.body)).collect();
    let index = RankIndex::new(skills.iter().zip(&headings).map(|(s, h)| Doc {
        name: &s.name,
        description: &s.description,
        headings: h,
    }));
    move |q: &str| {
        index
            .rank(&Query::parse(q), skills.len())
            .hits
            .into_iter()
            .map(|(_, i)| i)
            .collect()
    }
}

/// The baseline: Okapi BM25 (k1 1.2, b 0.75) over each skill's name and
/// description as one text; terms are lowercase runs of letters and
/// digits, no stemming, no stop words; ties by name.
pub struct Bm25 {
    postings: HashMap<String, Vec<(usize, f64)>>,
    lens: Vec<f64>,
    avg: f64,
    names: Vec<String>,
}

fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

impl Bm25 {
    pub fn new(skills: &[Skill]) -> Bm25 {
        let mut postings: HashMap<String, Vec<(usize, f64)>> = HashMap::new();
        let mut lens = Vec::new();
        for (i, s) in skills.iter().enumerate() {
            let text = format!("{} {}", s.name, s.description);
            let mut len = 0.0;
            for t in terms(&text) {
                len += 1.0;
                let list = postings.entry(t).or_default();
                match list.last_mut() {
                    Some(p) if p.0 == i => p.1 += 1.0,
                    _ => list.push((i, 1.0)),
                }
            }
            lens.push(len);
        }
        let avg = lens.iter().sum::<f64>() / lens.len() as f64;
        let names = skills.iter().map(|s| s.name.clone()).collect();
        Bm25 {
            postings,
            lens,
            avg,
            names,
        }
    }

    /// Skills with a positive score, best first.
    pub fn rank(&self, query: &str) -> Vec<usize> {
        let (k1, b) = (1.2, 0.75);
        let n = self.lens.len() as f64;
        let mut score = vec![0.0f64; self.lens.len()];
        let mut seen: Vec<String> = Vec::new();
        for t in terms(query) {
            if seen.contains(&t) {
                continue;
            }
            let Some(list) = self.postings.get(&t) else {
                seen.push(t);
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(i, tf) in list {
                let norm = 1.0 - b + b * self.lens[i] / self.avg;
                score[i] += idf * tf * (k1 + 1.0) / (tf + k1 * norm);
            }
            seen.push(t);
        }
        let mut order: Vec<usize> = (0..score.len()).filter(|&i| score[i] > 0.0).collect();
        order.sort_by(|&a, &b| {
            score[b]
                .total_cmp(&score[a])
                .then_with(|| self.names[a].cmp(&self.names[b]))
        });
        order
    }
}

/// One line of the table: `name  top-1  top-3  MRR`.
pub fn row(name: &str, s: &Scores) -> String {
    let part = |k: usize| {
        format!(
            "{k}/{} ({:.0}%)",
            s.queries,
            100.0 * k as f64 / s.queries as f64
        )
    };
    format!(
        "| {name:<16} | {:<14} | {:<14} | {:.3} |",
        part(s.top1),
        part(s.top3),
        s.mrr
    )
}
