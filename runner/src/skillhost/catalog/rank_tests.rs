//! Unit tests of `rank.rs` (included from there as its `tests` module).

use super::*;

struct S(&'static str);

impl Rankable for S {
    fn hit(&self, score: u32) -> Hit {
        Hit {
            name: self.0.to_owned(),
            description: String::new(),
            category: None,
            score,
            explain: None,
        }
    }
}

fn index(docs: &[(&'static str, &'static str)]) -> RankIndex {
    RankIndex::new(docs.iter().map(|d| Doc {
        name: d.0,
        description: d.1,
        headings: "",
    }))
}

fn run(docs: &[(&'static str, &'static str)], q: &str, limit: usize) -> FindResult {
    let items: Vec<S> = docs.iter().map(|d| S(d.0)).collect();
    find(&items, &index(docs), q, limit)
}

fn names(r: &FindResult) -> Vec<&str> {
    r.hits.iter().map(|h| h.name.as_str()).collect()
}

fn norm(w: &str) -> String {
    let mut s = w.to_owned();
    normalize(&mut s);
    s
}

#[test]
fn query_terms_are_normalised_unique_and_without_stop_words() {
    let q = Query::parse("  Create a CSV, csv reports for the team's e-book!");
    let terms: Vec<&str> = q.terms.iter().map(|t| t.term.as_str()).collect();
    assert_eq!(
        terms,
        ["creat", "csv", "report", "team", "e", "book", "ebook"]
    );
    assert_eq!(q.terms[0].word, "create");
    assert_eq!(q.left_out, ["a", "for", "the"]);
    assert_eq!(q.joined, "create-a-csv-csv-reports-for-the-team-e-book");
    assert_eq!(Query::parse("PDF merges").norm_joined, "pdf-merg");
    assert!(Query::parse(" -- ").is_empty());
    // Stop words alone are a query, with no term.
    let q = Query::parse("for the");
    assert!(!q.is_empty() && q.terms.is_empty());
}

#[test]
fn stop_words_are_lowercase_short_and_unique() {
    let mut seen = HashSet::new();
    for w in STOP_WORDS {
        assert!(w.len() <= STOP_MAX_LEN, "{w}");
        assert!(w.bytes().all(|b| b.is_ascii_lowercase()), "{w}");
        assert!(seen.insert(w), "{w} twice");
        assert!(is_stop(w));
    }
    assert!(!is_stop("spreadsheet") && !is_stop("create"));
}

#[test]
fn words_lose_apostrophes_and_split_at_hyphens() {
    let mut got = Vec::new();
    each_word("Team's E-Book, don't ‘x’ -y- end-to-end", |w, c| {
        got.push((w.to_owned(), c))
    });
    let want = [
        ("team", false),
        ("e", false),
        ("book", false),
        ("ebook", true),
        ("dont", false),
        ("x", false),
        ("y", false),
        ("end", false),
        ("to", false),
        ("end", false),
        ("endtoend", true),
    ];
    let want: Vec<(String, bool)> = want.iter().map(|(w, c)| ((*w).to_owned(), *c)).collect();
    assert_eq!(got, want);
}

/// Plurals and common suffixes meet; short, non-ASCII and numeric
/// words are left alone; unrelated words stay apart.
#[test]
fn normalisation_joins_plurals_and_suffixes() {
    let same: &[&[&str]] = &[
        &["formula", "formulas"],
        &["library", "libraries"],
        &["query", "queries"],
        &["copy", "copies", "copied", "copying"],
        &["format", "formats", "formatting", "formatted"],
        &[
            "create", "creates", "creating", "created", "creation", "creator",
        ],
        &[
            "deploy",
            "deploys",
            "deploying",
            "deployment",
            "deployments",
        ],
        &[
            "visualize",
            "visualizing",
            "visualization",
            "visualise",
            "visualisation",
        ],
        &["build", "builds", "building", "builder", "builders"],
        &["test", "tests", "testing", "tested", "tester"],
        &["match", "matches", "matching"],
        &["box", "boxes"],
        &["process", "processes", "processing", "processor"],
        &["present", "presentation", "presentations"],
        &["configure", "configuration", "configuring"],
        &["image", "images"],
        &["edit", "editor", "editing"],
    ];
    for group in same {
        let first = norm(group[0]);
        for w in &group[1..] {
            assert_eq!(norm(w), first, "{w} vs {}", group[0]);
        }
    }
    for w in [
        "css", "bus", "api", "straße", "mp4s", "k8s", "analysis", "status", "sing",
    ] {
        assert_eq!(norm(w), w, "{w}");
    }
    for (a, b) in [("analysis", "analyze"), ("use", "us"), ("sing", "song")] {
        assert_ne!(norm(a), norm(b), "{a} vs {b}");
    }
}

/// Common words ('create', 'make', 'a', 'for') carried as much weight
/// as the words that decide; they must not.
#[test]
fn rare_words_outrank_common_ones() {
    let docs = [
        (
            "art",
            "Create art, not text. Create animations and create images.",
        ),
        ("builder", "Create new skills and create tools."),
        ("deck", "Create slides for a pitch."),
        ("sheets", "Edit spreadsheets with formulas."),
        ("notes", "Create notes for a meeting."),
    ];
    assert_eq!(
        names(&run(&docs, "create a spreadsheet with formulas", 3))[0],
        "sheets"
    );
    assert_eq!(
        names(&run(&docs, "create a slide deck for my pitch", 3))[0],
        "deck"
    );
    // Stop words alone match nothing.
    let r = run(&docs, "for a", 3);
    assert!(r.hits.is_empty());
    assert_eq!(r.total, 0);
    // Stop words are not indexed: "notes" does not find "not".
    assert_eq!(names(&run(&docs, "notes", 3)), ["notes"]);
}

/// A name that is the query wins, then names that start with it, over
/// any amount of matching text.
#[test]
fn exact_name_then_name_prefix_win() {
    let docs = [
        (
            "readme",
            "Write docs: docs, docs and more docs for docs sites.",
        ),
        ("docs", "Tools."),
        ("docs-site", "Publish a website."),
        ("pdf-merge", "Join documents."),
        ("merge-tool", "Merge PDF files: merge PDF, merge, merge."),
    ];
    assert_eq!(
        names(&run(&docs, "docs", 5)),
        ["docs", "docs-site", "readme"]
    );
    assert_eq!(names(&run(&docs, "Docs Site", 5))[0], "docs-site");
    // Normalised: "pdf merges" names pdf-merge.
    assert_eq!(names(&run(&docs, "pdf merges", 5))[0], "pdf-merge");
    // Words of a name weigh most, in any order.
    assert_eq!(names(&run(&docs, "merge pdf", 5))[0], "pdf-merge");
    // A prefix of a word of the name counts too.
    assert_eq!(names(&run(&docs, "rea", 5)), ["readme"]);
}

#[test]
fn headings_count_but_less_than_the_description() {
    let docs = [
        Doc {
            name: "one",
            description: "Charts for reports.",
            headings: "Intro",
        },
        Doc {
            name: "two",
            description: "Plots for reports.",
            headings: "Charts",
        },
        Doc {
            name: "three",
            description: "Other things.",
            headings: "Intro",
        },
    ];
    let ix = RankIndex::new(docs);
    let r = ix.rank(&Query::parse("charts"), 10);
    assert_eq!(r.hits.iter().map(|h| h.1).collect::<Vec<_>>(), [0, 1]);
    assert!(r.hits[0].0 > r.hits[1].0);
}

/// One catalog and one query give one order, ties by name, and the
/// total is the number of matches (it was the number of skills
/// searched).
#[test]
fn ranking_is_deterministic_with_ties_by_name() {
    let docs = [
        ("b-tool", "Same text."),
        ("a-tool", "Same text."),
        ("c-tool", "Same text."),
        ("d", "Other."),
    ];
    let r = run(&docs, "same", 2);
    assert_eq!(names(&r), ["a-tool", "b-tool"]);
    assert_eq!(r.hits[0].score, r.hits[1].score);
    assert_eq!(r.total, 3);
    assert!(r.message.is_none());
    for _ in 0..3 {
        assert_eq!(run(&docs, "same", 2), r);
    }
    assert_eq!(run(&docs, "text same d", 10).hits.len(), 4);
}

/// The index ranks exactly as BM25F computed directly from each
/// skill's terms.
#[test]
fn the_index_agrees_with_a_direct_bm25f() {
    let docs = [
        ("csv", "Read and write CSV files.", "Reading\nWriting"),
        (
            "csv-report",
            "Summarize a CSV file into a report; csv, CSV!",
            "Report",
        ),
        ("aaa-aa", "aa aaa aaaa", ""),
        ("x-csv-y", "csvcsv csv", "CSV files"),
        ("report", "\nmulti\nline csv\n", ""),
        ("pdf", "Nothing here.", "Merging PDFs"),
        ("straße", "Groß ÉTÉ csv", ""),
    ];
    let ix = RankIndex::new(docs.iter().map(|d| Doc {
        name: d.0,
        description: d.1,
        headings: d.2,
    }));
    let fields: Vec<[Vec<String>; 3]> = docs
        .iter()
        .map(|d| {
            let terms = |t: &str| {
                let mut v = Vec::new();
                each_term(t, |x| v.push(x.to_owned()));
                v
            };
            [terms(d.0), terms(d.1), terms(d.2)]
        })
        .collect();
    let n = docs.len() as f64;
    let avg: Vec<f64> = (0..3)
        .map(|f| fields.iter().map(|d| d[f].len()).sum::<usize>() as f64 / n)
        .collect();
    for q in [
        "csv",
        "aa",
        "csv report",
        "report csv pdf",
        "été",
        "straße",
        "zzz",
        "merge",
        "files",
    ] {
        let query = Query::parse(q);
        let mut want: Vec<(u32, usize)> = Vec::new();
        for (i, d) in fields.iter().enumerate() {
            let mut total = 0u32;
            for t in &query.terms {
                let df = fields
                    .iter()
                    .filter(|d| d.iter().flatten().any(|x| *x == t.term))
                    .count();
                if df == 0 {
                    continue;
                }
                let idf = (1.0 + (n - df as f64 + 0.5) / (df as f64 + 0.5)).ln();
                let mut w = 0.0;
                for f in 0..3 {
                    let tf = d[f].iter().filter(|x| **x == t.term).count() as f64;
                    if tf > 0.0 {
                        let len = d[f].len() as f64;
                        w += WEIGHTS[f] * tf / (1.0 - B[f] + B[f] * len / avg[f].max(1.0));
                    }
                }
                if w > 0.0 {
                    let s = idf * w * (K1 + 1.0) / (w + K1);
                    total += ((100.0 * s).round() as u32).max(1);
                }
            }
            let name_match =
                if docs[i].0 == query.joined || normalized_name(docs[i].0) == query.norm_joined {
                    2
                } else if docs[i].0.starts_with(&query.joined) {
                    1
                } else {
                    0
                };
            total += name_match * ix.bonus(&query);
            if total > 0 {
                want.push((total, i));
            }
        }
        want.sort_by(|a, b| b.0.cmp(&a.0).then(docs[a.1].0.cmp(docs[b.1].0)));
        let got = ix.rank(&query, 100);
        assert_eq!(got.hits, want, "{q:?}");
        assert_eq!(got.matches, want.len(), "{q:?}");
    }
}

/// What `--explain` shows adds up to the score.
#[test]
fn explanations_add_up_to_the_score() {
    let docs = [
        ("csv", "Read and write CSV files."),
        ("csv-report", "Summarize a CSV file into a Markdown report."),
        ("report-writer", "Write reports from notes."),
    ];
    let items: Vec<S> = docs.iter().map(|d| S(d.0)).collect();
    let ix = index(&docs);
    let r = find_explained(&items, &ix, "reports for me", 10);
    assert_eq!(r.explain.unwrap().left_out, ["for", "me"]);
    let r = find_explained(&items, &ix, "CSV reports", 10);
    let q = r.explain.as_ref().unwrap();
    assert!(q.left_out.is_empty());
    assert_eq!(q.skills, 3);
    let terms: Vec<(&str, &str, usize)> = q
        .terms
        .iter()
        .map(|t| (t.word.as_str(), t.term.as_str(), t.skills))
        .collect();
    assert_eq!(terms, [("csv", "csv", 2), ("reports", "report", 2)]);
    for h in &r.hits {
        let e = h.explain.as_ref().unwrap();
        let bonus = e.name_match.map_or(0, |m| q.name_bonus * m as u32);
        let sum: u32 = e.terms.iter().map(|t| t.points).sum();
        assert_eq!(sum + bonus, h.score, "{}", h.name);
    }
    let top = r.hits[0].explain.as_ref().unwrap();
    assert_eq!(r.hits[0].name, "csv-report");
    assert_eq!(top.name_match, Some(NameMatch::Exact));
    assert!(
        top.text(q.name_bonus).starts_with("= exact name "),
        "{}",
        top.text(q.name_bonus)
    );
    assert!(
        q.text().starts_with("terms: csv (in 2 of 3 skills, idf "),
        "{}",
        q.text()
    );
    assert!(
        q.text().contains(", report from \"reports\" (in 2 of 3"),
        "{}",
        q.text()
    );
    // Not asked for: not there.
    assert!(run(&docs, "csv", 10).explain.is_none());
    assert!(run(&docs, "csv", 10)
        .hits
        .iter()
        .all(|h| h.explain.is_none()));
}

#[test]
fn headings_are_atx_headings_outside_code() {
    let body = "# Title\n\nText # not a heading\n## Section two ##\n   ### Indented\n    #### Code by indent\n#hashtag\n```sh\n# a comment\n```\n~~~\n# also code\n~~~\n###### Six\n####### Seven\n#\n";
    assert_eq!(headings(body), "Title\nSection two\nIndented\nSix");
    let long: String = (0..500)
        .map(|i| format!("## Heading number {i}\n"))
        .collect();
    let h = headings(&long);
    assert!(
        h.len() <= MAX_HEADINGS_BYTES && h.ends_with(char::is_numeric),
        "{}",
        h.len()
    );
}

#[test]
fn no_match_suggests_close_names() {
    let docs = [("pdf-merge", "Merge PDF files"), ("csv-report", "")];
    let r = run(&docs, "pdfmergr", 5);
    assert!(r.hits.is_empty());
    assert_eq!(r.total, 0);
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
    assert_eq!(r.total, 2);
}

#[test]
fn edit_distance_basics() {
    let a: Vec<char> = "kitten".chars().collect();
    assert_eq!(edit_distance(&a, "sitting"), 3);
    assert_eq!(edit_distance(&a, "kitten"), 0);
}
