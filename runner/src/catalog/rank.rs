//! Ranking skills against a query: `find_skills {query, limit}` and
//! `skill-runner catalog find`.
//!
//! The score is a pure, deterministic function of the query and a skill's
//! name and description ([`score`] is its definition); ties are broken by
//! name, so one catalog and one query always give the same order. For each
//! query term:
//!
//! | the skill's name … | points | the description … | points |
//! |---|---|---|---|
//! | equals the term | 100 | has the term as a word | 15 |
//! | has it as a `-` segment | 60 | contains it | 5 |
//! | starts with it | 40 | | |
//! | contains it | 25 | | |
//!
//! plus 20 when every term scored, and 200 when the name equals the whole
//! query with its terms joined by `-`. A skill that scores 0 is not a hit.
//! When nothing matches, the answer says so and suggests the names closest
//! to the query by edit distance, so an agent with a typo gets a way on.
//!
//! Speed: a [`RankIndex`] keeps every name and description lowercased in
//! one text, built once per catalog; a query searches that text once per
//! term and scores only the skills where a term occurs, instead of calling
//! a substring search per skill and term.
//!
//! Pure code: no I/O.

use serde::Serialize;

/// Every skill's name and description, lowercased, in one text:
/// `name \n description \n` per skill, with where each part starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankIndex {
    text: String,
    /// (name start, description start, description end) per skill.
    docs: Vec<(usize, usize, usize)>,
}

impl RankIndex {
    /// Indexes `(name, description)` pairs; positions are the skills'
    /// indices in the caller's slice.
    pub fn new<'a>(docs: impl IntoIterator<Item = (&'a str, &'a str)>) -> RankIndex {
        let mut text = String::new();
        let mut spans = Vec::new();
        for (name, description) in docs {
            let name_start = text.len();
            text.push_str(&name.to_lowercase());
            text.push('\n');
            let desc_start = text.len();
            text.push_str(&description.to_lowercase());
            spans.push((name_start, desc_start, text.len()));
            text.push('\n');
        }
        RankIndex { text, docs: spans }
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The lowercased name of skill `i`.
    pub fn name(&self, i: usize) -> &str {
        let (n, d, _) = self.docs[i];
        &self.text[n..d - 1]
    }

    fn description(&self, i: usize) -> &str {
        let (_, d, e) = self.docs[i];
        &self.text[d..e]
    }

    /// [`score`] of skill `i`.
    pub fn score(&self, q: &Query, i: usize) -> u32 {
        score(q, self.name(i), self.description(i))
    }

    /// Skills with a positive score, best first (ties by name), at most
    /// `limit`: `(score, index)`.
    ///
    /// Equal to ranking by [`score`]: the search (`memchr::memmem`, SIMD)
    /// finds non-overlapping occurrences, and an occurrence that scores more than another (at the
    /// start of the name, after a `-`, after a non-alphanumeric) cannot
    /// overlap an earlier one, because terms are alphanumeric only.
    pub fn rank(&self, q: &Query, limit: usize) -> Vec<(u32, usize)> {
        let n = self.docs.len();
        let mut total = vec![0u32; n];
        let mut matched = vec![0u32; n];
        let mut name_best = vec![0u32; n];
        let mut desc_best = vec![0u32; n];
        let mut touched: Vec<usize> = Vec::new();
        let mut hits: Vec<usize> = Vec::new();
        let bytes = self.text.as_bytes();
        for t in &q.terms {
            touched.clear();
            let mut cur = 0;
            let len = t.len();
            for pos in memchr::memmem::find_iter(bytes, t.as_bytes()) {
                while self.docs[cur].2 < pos {
                    cur += 1;
                }
                let (name_start, desc_start, _) = self.docs[cur];
                let end = pos + len;
                if name_best[cur] == 0 && desc_best[cur] == 0 {
                    touched.push(cur);
                }
                if pos < desc_start {
                    let name_end = desc_start - 1;
                    let first = pos == name_start;
                    let s = if first && end == name_end {
                        100
                    } else if (first || bytes[pos - 1] == b'-')
                        && (end == name_end || bytes[end] == b'-')
                    {
                        60
                    } else if first {
                        40
                    } else {
                        25
                    };
                    name_best[cur] = name_best[cur].max(s);
                } else {
                    let s = if word_at(&self.text, pos, len) { 15 } else { 5 };
                    desc_best[cur] = desc_best[cur].max(s);
                }
            }
            for &i in &touched {
                if total[i] == 0 {
                    hits.push(i);
                }
                total[i] += name_best[i] + desc_best[i];
                matched[i] += 1;
                name_best[i] = 0;
                desc_best[i] = 0;
            }
        }
        let mut scored: Vec<(u32, usize)> = hits
            .into_iter()
            .map(|i| {
                let mut s = total[i];
                if matched[i] as usize == q.terms.len() {
                    s += 20;
                }
                if self.name(i) == q.joined {
                    s += 200;
                }
                (s, i)
            })
            .collect();
        self.top(&mut scored, limit);
        scored
    }

    /// Keeps the best `limit` of `scored`, sorted.
    fn top(&self, scored: &mut Vec<(u32, usize)>, limit: usize) {
        let order = |a: &(u32, usize), b: &(u32, usize)| {
            b.0.cmp(&a.0)
                .then_with(|| self.name(a.1).cmp(self.name(b.1)))
        };
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, order);
            scored.truncate(limit);
        }
        scored.sort_unstable_by(order);
    }
}

/// A parsed query: lowercase terms split on anything that is not a letter
/// or a digit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    text: String,
    terms: Vec<String>,
    joined: String,
}

impl Query {
    pub fn parse(text: &str) -> Query {
        let lower = text.to_lowercase();
        let mut terms: Vec<String> = Vec::new();
        for t in lower.split(|c: char| !c.is_alphanumeric()) {
            if !t.is_empty() && !terms.iter().any(|x| x == t) {
                terms.push(t.to_owned());
            }
        }
        let joined = terms.join("-");
        Query {
            text: text.trim().to_owned(),
            terms,
            joined,
        }
    }

    /// True when the query has no term (then every skill is listed).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// True when `hay[at..at+len]` is not glued to letters or digits.
fn word_at(hay: &str, at: usize, len: usize) -> bool {
    let before = hay[..at].chars().next_back();
    let after = hay[at + len..].chars().next();
    !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
}

/// The score of one skill (lowercased `name` and `description`); 0 means
/// no match. This is the definition; [`RankIndex::rank`] computes the
/// same faster.
pub fn score(q: &Query, name: &str, description: &str) -> u32 {
    if q.terms.is_empty() {
        return 0;
    }
    let mut total = 0;
    let mut all = true;
    for t in &q.terms {
        let name_points = if name == t {
            100
        } else if name.split('-').any(|seg| seg == t) {
            60
        } else if name.starts_with(t.as_str()) {
            40
        } else if name.contains(t.as_str()) {
            25
        } else {
            0
        };
        let description_points = if !description.contains(t.as_str()) {
            0
        } else if description
            .match_indices(t.as_str())
            .any(|(at, m)| word_at(description, at, m.len()))
        {
            15
        } else {
            5
        };
        if name_points + description_points == 0 {
            all = false;
        }
        total += name_points + description_points;
    }
    if total == 0 {
        return 0;
    }
    if all {
        total += 20;
    }
    if name == q.joined {
        total += 200;
    }
    total
}

/// One ranked skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hit {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// 0 when the query was empty (a plain listing).
    pub score: u32,
}

/// The answer to a find: the best hits first, and when nothing matched, a
/// sentence saying what to try instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindResult {
    pub query: String,
    /// How many skills were searched.
    pub total: usize,
    pub hits: Vec<Hit>,
    /// Present when there is no hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Names closest to the query when nothing matched (typos).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
}

/// Something that can be ranked: a catalog entry, a session's skill.
pub trait Rankable {
    fn hit(&self, score: u32) -> Hit;
}

/// Largest `limit` the routes and the CLI accept; larger ones are clamped
/// to it.
pub const MAX_LIMIT: usize = 100;
/// `limit` when none is given.
pub const DEFAULT_LIMIT: usize = 10;

/// Ranks `items` (indexed in that order by `index`) against `query` and
/// keeps the best `limit` (at least 1; callers bound it, see
/// [`MAX_LIMIT`]). An empty query lists the first `limit` by name.
pub fn find<T: Rankable>(items: &[T], index: &RankIndex, query: &str, limit: usize) -> FindResult {
    debug_assert_eq!(items.len(), index.len());
    let limit = limit.max(1);
    let q = Query::parse(query);
    let scored = if q.is_empty() {
        let mut all: Vec<(u32, usize)> = (0..items.len()).map(|i| (0, i)).collect();
        index.top(&mut all, limit);
        all
    } else {
        index.rank(&q, limit)
    };
    let hits: Vec<Hit> = scored.iter().map(|&(s, i)| items[i].hit(s)).collect();
    let (message, suggestions) = if !hits.is_empty() {
        (None, Vec::new())
    } else if items.is_empty() {
        (Some("there are no skills to search".to_owned()), Vec::new())
    } else {
        let suggestions = suggest(&q, (0..index.len()).map(|i| index.name(i)));
        let hint = if suggestions.is_empty() {
            String::new()
        } else {
            format!("; did you mean {}?", suggestions.join(", "))
        };
        (
            Some(format!(
                "no skill matches {:?} among {} skills{hint}; try one distinctive word from the task, or list every skill",
                q.text,
                items.len()
            )),
            suggestions,
        )
    };
    FindResult {
        query: q.text,
        total: items.len(),
        hits,
        message,
        suggestions,
    }
}

/// Up to three names within a small edit distance of the query.
fn suggest<'a>(q: &Query, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let target: Vec<char> = if q.joined.is_empty() {
        q.text.to_lowercase().chars().collect()
    } else {
        q.joined.chars().collect()
    };
    if target.is_empty() {
        return Vec::new();
    }
    let max = (target.len() / 3).max(1);
    let mut close: Vec<(usize, &str)> = names
        .filter(|n| n.len().abs_diff(target.len()) <= max)
        .filter_map(|n| {
            let d = edit_distance(&target, n);
            (d <= max).then_some((d, n))
        })
        .collect();
    close.sort();
    close
        .into_iter()
        .take(3)
        .map(|(_, n)| n.to_owned())
        .collect()
}

/// Levenshtein distance between `a` and the characters of `b`.
fn edit_distance(a: &[char], b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    struct S(&'static str);

    impl Rankable for S {
        fn hit(&self, score: u32) -> Hit {
            Hit {
                name: self.0.to_owned(),
                description: String::new(),
                category: None,
                score,
            }
        }
    }

    fn run(docs: &[(&'static str, &'static str)], q: &str, limit: usize) -> FindResult {
        let items: Vec<S> = docs.iter().map(|d| S(d.0)).collect();
        let index = RankIndex::new(docs.iter().copied());
        find(&items, &index, q, limit)
    }

    #[test]
    fn query_terms_are_lowercase_and_unique() {
        let q = Query::parse("  CSV, csv report!");
        assert_eq!(q.terms, ["csv", "report"]);
        assert_eq!(q.joined, "csv-report");
        assert!(Query::parse(" -- ").is_empty());
    }

    #[test]
    fn scores_follow_the_table() {
        let q = Query::parse("csv");
        assert_eq!(score(&q, "csv", ""), 100 + 20 + 200);
        assert_eq!(score(&q, "csv-report", ""), 60 + 20);
        assert_eq!(score(&q, "csvkit", ""), 40 + 20);
        assert_eq!(score(&q, "to-csvx", ""), 25 + 20);
        assert_eq!(score(&q, "x", "reads csv files"), 15 + 20);
        assert_eq!(score(&q, "x", "reads csvs"), 5 + 20);
        assert_eq!(score(&q, "x", "nothing"), 0);
        // Coverage bonus only when every term scores.
        let q = Query::parse("csv pdf");
        assert_eq!(score(&q, "csv-tools", ""), 60);
    }

    /// The index ranks exactly as the definition scores.
    #[test]
    fn the_index_agrees_with_the_definition() {
        let docs = [
            ("csv", "Read and write CSV files."),
            (
                "csv-report",
                "Summarize a CSV file into a report; csv, CSV!",
            ),
            ("aaa-aa", "aa aaa aaaa"),
            ("x-csv-y", "csvcsv csv"),
            ("report", "\nmulti\nline csv\n"),
            ("pdf", "Nothing here."),
            ("straße", "Groß ÉTÉ csv"),
        ];
        let index = RankIndex::new(docs.iter().copied());
        for q in [
            "csv",
            "aa",
            "a",
            "csv report",
            "report csv pdf",
            "été",
            "straße",
            "zzz",
            "e",
        ] {
            let q = Query::parse(q);
            let mut want: Vec<(u32, usize)> = (0..docs.len())
                .map(|i| (index.score(&q, i), i))
                .filter(|s| s.0 > 0)
                .collect();
            want.sort_by(|a, b| b.0.cmp(&a.0).then(index.name(a.1).cmp(index.name(b.1))));
            assert_eq!(index.rank(&q, 100), want, "{q:?}");
        }
    }

    #[test]
    fn ties_break_by_name_and_limit_applies() {
        let docs = [("b-tool", ""), ("a-tool", ""), ("c-tool", ""), ("d", "")];
        let r = run(&docs, "tool", 2);
        let names: Vec<&str> = r.hits.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a-tool", "b-tool"]);
        assert_eq!(r.total, 4);
        assert!(r.message.is_none());
    }

    #[test]
    fn no_match_suggests_close_names() {
        let docs = [("pdf-merge", "Merge PDF files"), ("csv-report", "")];
        let r = run(&docs, "pdfmerg", 5);
        assert!(r.hits.is_empty());
        assert_eq!(r.suggestions, ["pdf-merge"]);
        let m = r.message.unwrap();
        assert!(
            m.contains("no skill matches") && m.contains("pdf-merge"),
            "{m}"
        );
        let r = run(&docs, "zzzzzz", 5);
        assert!(r.suggestions.is_empty());
        assert!(r.message.unwrap().contains("among 2 skills"));
        assert_eq!(
            run(&[], "x", 5).message.as_deref(),
            Some("there are no skills to search")
        );
    }

    #[test]
    fn empty_query_lists_by_name() {
        let r = run(&[("b", ""), ("a", "")], "", 10);
        assert_eq!(r.hits[0].name, "a");
        assert_eq!(r.hits[0].score, 0);
    }

    #[test]
    fn edit_distance_basics() {
        let a: Vec<char> = "kitten".chars().collect();
        assert_eq!(edit_distance(&a, "sitting"), 3);
        assert_eq!(edit_distance(&a, "kitten"), 0);
    }
}
