//! Ranking skills against a query: `find_skills {query, limit}` and
//! `skill-runner catalog find`.
//!
//! **Terms.** A text is cut into words at anything that is not a letter,
//! a digit, a hyphen or an apostrophe, and lowercased. A word loses a
//! possessive `'s` and its other apostrophes; a hyphenated word gives its
//! parts and their concatenation (`e-book`: `e`, `book`, `ebook`). Common
//! English function words ([`STOP_WORDS`]: `a`, `for`, `the`, `my`, …) are
//! left out, in skills and in queries. Each remaining word is normalised
//! by [`normalize`], which removes plurals and common suffixes
//! (`formulas` → `formula`; `create`, `creating`, `creation` → `creat`;
//! `deployment` → `deploy`; `builder` → `build`).
//!
//! **Relevance** is BM25F over three fields of a skill: its name (split at
//! `-`), its description, and the headings of its `SKILL.md` body,
//! weighted 3, 1 and ½ ([`WEIGHTS`]). For each query term the skill has:
//!
//! ```text
//! idf    = ln(1 + (N - n + 0.5) / (n + 0.5))        N skills, n of them have the term
//! tf     = Σ over fields  weight × count / (1 - b + b × length / average length)
//! points = round(100 × idf × tf × (k1 + 1) / (tf + k1)), at least 1     k1 = 1.2
//! ```
//!
//! so a word that few skills have weighs more than one that most have,
//! one word said many times gains less and less, and a long description
//! does not win by length. A skill's relevance is the sum of its terms'
//! points.
//!
//! **Names win.** A skill named exactly as the query (its words joined by
//! `-`, as typed or normalised: `pdf merges` names `pdf-merge`) ranks
//! above every other, and one whose name starts with the query (`csv rep`,
//! `gen`) above every skill whose name does not: they get 2 × or 1 × a
//! bonus one point larger than the most any skill can score on the query's
//! terms ([`QueryExplain::name_bonus`]).
//!
//! A skill that scores 0 is not a hit. Ties go by name, so one catalog and
//! one query always give one order. [`find_explained`] says why: each
//! term's weight, and per skill each term's counts and points. When
//! nothing matches, the answer suggests the names closest to the query by
//! edit distance, so an agent with a typo gets a way on.
//!
//! Speed: [`RankIndex`] is an inverted index (term → the skills that have
//! it and how often, per field), built once per catalog; a query reads
//! only the lists of its own terms.
//!
//! Pure code: no I/O.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use serde::Serialize;

/// BM25's saturation constant.
const K1: f64 = 1.2;
/// Weights of the name, the description and the headings.
pub const WEIGHTS: [f64; 3] = [3.0, 1.0, 0.5];
/// Length normalisation of each field: names are short and alike in
/// length, so their length counts for less.
const B: [f64; 3] = [0.5, 0.75, 0.75];
const FIELDS: [&str; 3] = ["name", "description", "headings"];
/// At most this much heading text is indexed per skill.
pub const MAX_HEADINGS_BYTES: usize = 2048;

/// English function words, left out of skills and queries: they appear
/// in any text and tell no skill apart.
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "being", "both", "but", "by", "can", "cant", "could", "did", "didnt", "do",
    "does", "doesnt", "doing", "dont", "each", "either", "for", "from", "had", "has", "have",
    "having", "he", "help", "her", "here", "him", "his", "how", "i", "id", "if", "im", "in",
    "into", "is", "isnt", "it", "its", "ive", "just", "like", "me", "more", "most", "my", "need",
    "no", "nor", "not", "of", "off", "on", "once", "only", "onto", "or", "other", "our", "out",
    "over", "please", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "up", "us",
    "very", "want", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "why", "will", "with", "without", "would", "you", "your",
];

/// No stop word is longer.
const STOP_MAX_LEN: usize = 7;

fn is_stop(word: &str) -> bool {
    static SET: OnceLock<HashSet<&str>> = OnceLock::new();
    word.len() <= STOP_MAX_LEN
        && SET
            .get_or_init(|| STOP_WORDS.iter().copied().collect())
            .contains(word)
}

/// Light English normalisation of one lowercase word, in place. Only
/// words of ASCII letters longer than three are changed:
///
/// 1. plurals: `-sses` → `-ss`, `-ies` → `-i`, `-xes`/`-ches`/`-shes`/`-zes`
///    lose `es`, else a final `s` goes (not from `-ss`, `-us`, `-is`);
/// 2. `-ied` → `-i`; `-ing`, `-ed` go (`formatting` → `format`);
/// 3. one of `-ization`/`-isation` → `-iz`, `-entation` → `-ent`,
///    `-uration` → `-ur`, `-ion`, `-ment`, `-er`, `-or`;
/// 4. a final `e` goes, a final `y` after a consonant becomes `i`;
/// 5. a changed word ending in `-is` ends in `-iz` (`organise` = `organize`).
///
/// Each step keeps at least three letters (`-ment`, `-er`, `-or`: more),
/// so `string` → `str` but `sing` stays. It conflates less than a full
/// stemmer: `analysis` and `analyze` stay apart.
pub fn normalize(w: &mut String) {
    if w.len() <= 3 || !w.bytes().all(|b| b.is_ascii_lowercase()) {
        return;
    }
    let before = w.len();
    // 1. Plurals and the third person.
    if w.len() >= 5
        && ["sses", "ies", "xes", "ches", "shes", "zes"]
            .iter()
            .any(|s| w.ends_with(s))
    {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !(w.ends_with("ss") || w.ends_with("us") || w.ends_with("is")) {
        w.truncate(w.len() - 1);
    }
    // 2. Inflections.
    if w.ends_with("ied") && w.len() >= 5 {
        w.truncate(w.len() - 2);
    } else if strip(w, "ing", 3) || strip(w, "ed", 3) {
        let b = w.as_bytes();
        let n = b.len();
        if n >= 4 && b[n - 1] == b[n - 2] && !b"aeioulsz".contains(&b[n - 1]) {
            w.truncate(n - 1);
        }
    }
    // 3. Derivations: the first suffix that ends the word decides.
    for (suffix, with, min) in [
        ("ization", "iz", 3),
        ("isation", "iz", 3),
        ("entation", "ent", 3),
        ("uration", "ur", 3),
        ("ion", "", 3),
        ("ment", "", 5),
        ("er", "", 4),
        ("or", "", 4),
    ] {
        if w.ends_with(suffix) {
            if w.len() - suffix.len() >= min {
                w.truncate(w.len() - suffix.len());
                w.push_str(with);
            }
            break;
        }
    }
    // 4. A final e or y.
    if w.ends_with('e') && w.len() >= 4 {
        w.pop();
    } else if w.ends_with('y') && w.len() >= 4 && !b"aeiou".contains(&w.as_bytes()[w.len() - 2]) {
        w.pop();
        w.push('i');
    }
    // 5. British -ise.
    if w.len() != before && w.len() >= 5 && w.ends_with("is") {
        w.pop();
        w.push('z');
    }
}

/// Removes `suffix` when at least `min` letters stay.
fn strip(w: &mut String, suffix: &str, min: usize) -> bool {
    if w.ends_with(suffix) && w.len() - suffix.len() >= min {
        w.truncate(w.len() - suffix.len());
        true
    } else {
        false
    }
}

/// Calls `f(part, compound)` for each word of `text`, lowercased: the
/// parts of a hyphenated word, then (`compound` true) their
/// concatenation. Apostrophes are dropped, a possessive `'s` with them.
fn each_word(text: &str, mut f: impl FnMut(&str, bool)) {
    let mut word = String::new();
    let mut joined = String::new();
    let mut flush = |word: &mut String| {
        let mut w = word.trim_matches(|c| c == '-' || c == '\'' || c == '’');
        for s in ["'s", "’s"] {
            w = w.strip_suffix(s).unwrap_or(w);
        }
        let mut parts = 0;
        joined.clear();
        for part in w.split('-') {
            let part: Cow<str> = if part.contains(['\'', '’']) {
                Cow::Owned(part.replace(['\'', '’'], ""))
            } else {
                Cow::Borrowed(part)
            };
            if part.is_empty() {
                continue;
            }
            f(&part, false);
            joined.push_str(&part);
            parts += 1;
        }
        if parts > 1 {
            f(&joined, true);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii() {
            if c.is_ascii_alphanumeric() || c == '-' || c == '\'' {
                word.push(c.to_ascii_lowercase());
            } else if !word.is_empty() {
                flush(&mut word);
            }
        } else if c.is_alphanumeric() || c == '’' {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            flush(&mut word);
        }
    }
    if !word.is_empty() {
        flush(&mut word);
    }
}

/// Calls `f` with each term of `text`: its words less stop words,
/// normalised.
fn each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut buf = String::new();
    each_word(text, |w, _| {
        if !is_stop(w) {
            buf.clear();
            buf.push_str(w);
            normalize(&mut buf);
            f(&buf);
        }
    });
}

/// A name with each `-` segment normalised: `pdf-merges` → `pdf-merg`.
fn normalized_name(name: &str) -> String {
    let mut out = String::new();
    let mut buf = String::new();
    for (i, seg) in name.split('-').enumerate() {
        if i > 0 {
            out.push('-');
        }
        buf.clear();
        buf.push_str(seg);
        normalize(&mut buf);
        out.push_str(&buf);
    }
    out
}

/// The headings of a `SKILL.md` body, one a line: ATX headings (`#` to
/// `######`) outside fenced code blocks, at most [`MAX_HEADINGS_BYTES`].
pub fn headings(body: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<(u8, usize)> = None;
    for line in body.lines() {
        let t = line.trim_start_matches(' ');
        if line.len() - t.len() > 3 {
            continue;
        }
        let first = t.bytes().next();
        if let Some(c @ (b'`' | b'~')) = first {
            let n = t.bytes().take_while(|&b| b == c).count();
            if n >= 3 {
                match fence {
                    None => fence = Some((c, n)),
                    Some((fc, fnum)) if fc == c && n >= fnum && t[n..].trim().is_empty() => {
                        fence = None
                    }
                    Some(_) => {}
                }
                continue;
            }
        }
        if fence.is_some() {
            continue;
        }
        let hashes = t.bytes().take_while(|&b| b == b'#').count();
        if hashes == 0 || hashes > 6 {
            continue;
        }
        let rest = &t[hashes..];
        if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            continue;
        }
        let text = rest.trim().trim_end_matches('#').trim();
        if text.is_empty() {
            continue;
        }
        if out.len() + 1 + text.len() > MAX_HEADINGS_BYTES {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(text);
    }
    out
}

/// What is ranked of one skill.
#[derive(Debug, Clone, Copy)]
pub struct Doc<'a> {
    pub name: &'a str,
    pub description: &'a str,
    /// The body's headings, one a line ([`headings`]).
    pub headings: &'a str,
}

/// One skill in one term's list: how often the term occurs in its name,
/// description and headings.
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    tf: [u16; 3],
}

/// The inverted index of a set of skills: for each term, the skills that
/// have it (in index order) with its counts per field; per skill, its
/// field lengths (in terms) and its name.
#[derive(Clone, Default)]
pub struct RankIndex {
    /// Lowercase names, in the caller's order.
    names: Vec<String>,
    /// Names with each segment normalised.
    norm_names: Vec<String>,
    /// Indices sorted by name, and by normalised name.
    by_name: Vec<u32>,
    by_norm_name: Vec<u32>,
    terms: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    lens: Vec<[u32; 3]>,
    avg: [f64; 3],
}

impl fmt::Debug for RankIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RankIndex")
            .field("skills", &self.names.len())
            .field("terms", &self.terms.len())
            .finish_non_exhaustive()
    }
}

/// The outcome of [`RankIndex::rank`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranking {
    /// How many skills matched.
    pub matches: usize,
    /// The best `limit` of them, best first: `(score, index)`.
    pub hits: Vec<(u32, usize)>,
}

/// How a skill's name matched the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NameMatch {
    /// The name starts with the query.
    Prefix = 1,
    /// The name is the query.
    Exact = 2,
}

impl RankIndex {
    /// Indexes `docs`; positions are the skills' indices in the caller's
    /// slice.
    pub fn new<'a>(docs: impl IntoIterator<Item = Doc<'a>>) -> RankIndex {
        let mut ix = RankIndex::default();
        // Per term: the skill it was last seen in, and where in `counts`.
        let mut last: Vec<(u32, u32)> = Vec::new();
        let mut counts: Vec<(u32, [u16; 3])> = Vec::new();
        for (i, d) in docs.into_iter().enumerate() {
            let doc = i as u32;
            let name = d.name.to_lowercase();
            counts.clear();
            let mut lens = [0u32; 3];
            for (f, text) in [name.as_str(), d.description, d.headings]
                .into_iter()
                .enumerate()
            {
                each_term(text, |t| {
                    lens[f] += 1;
                    let id = match ix.terms.get(t) {
                        Some(&id) => id,
                        None => {
                            let id = ix.postings.len() as u32;
                            ix.terms.insert(t.to_owned(), id);
                            ix.postings.push(Vec::new());
                            last.push((u32::MAX, 0));
                            id
                        }
                    };
                    let slot = &mut last[id as usize];
                    if slot.0 != doc {
                        *slot = (doc, counts.len() as u32);
                        counts.push((id, [0; 3]));
                    }
                    let tf = &mut counts[slot.1 as usize].1[f];
                    *tf = tf.saturating_add(1);
                });
            }
            for &(id, tf) in &counts {
                ix.postings[id as usize].push(Posting { doc, tf });
            }
            ix.lens.push(lens);
            ix.norm_names.push(normalized_name(&name));
            ix.names.push(name);
        }
        let n = ix.names.len().max(1) as f64;
        for f in 0..3 {
            let total: u64 = ix.lens.iter().map(|l| u64::from(l[f])).sum();
            ix.avg[f] = (total as f64 / n).max(1.0);
        }
        ix.by_name = (0..ix.names.len() as u32).collect();
        ix.by_name
            .sort_by(|&a, &b| ix.names[a as usize].cmp(&ix.names[b as usize]));
        ix.by_norm_name = (0..ix.names.len() as u32).collect();
        ix.by_norm_name
            .sort_by(|&a, &b| ix.norm_names[a as usize].cmp(&ix.norm_names[b as usize]));
        ix
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The lowercased name of skill `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    fn idf(&self, df: usize) -> f64 {
        let (n, df) = (self.names.len() as f64, df as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// The points of one term of weight `idf` in skill `doc`.
    fn points(&self, idf: f64, tf: [u16; 3], doc: usize) -> u32 {
        let mut w = 0.0;
        for f in 0..3 {
            if tf[f] > 0 {
                let norm = 1.0 - B[f] + B[f] * f64::from(self.lens[doc][f]) / self.avg[f];
                w += WEIGHTS[f] * f64::from(tf[f]) / norm;
            }
        }
        let s = idf * w * (K1 + 1.0) / (w + K1);
        ((100.0 * s).round() as u32).max(1)
    }

    /// The query's terms that some skill has: `(term, its list, idf)`.
    fn known<'q>(&self, q: &'q Query) -> impl Iterator<Item = (&'q Term, &[Posting], f64)> {
        q.terms.iter().filter_map(|t| {
            let list = &self.postings[*self.terms.get(&t.term)? as usize];
            Some((t, list.as_slice(), self.idf(list.len())))
        })
    }

    /// One more than the most any skill can score on `q`'s terms.
    fn bonus(&self, q: &Query) -> u32 {
        self.known(q)
            .map(|(_, _, idf)| (100.0 * idf * (K1 + 1.0)).ceil() as u32)
            .fold(1u32, u32::saturating_add)
    }

    /// Skills whose name is the query, or starts with it.
    fn named(&self, q: &Query) -> Vec<(usize, NameMatch)> {
        let mut out = Vec::new();
        if q.joined.is_empty() {
            return out;
        }
        let from = self
            .by_name
            .partition_point(|&i| self.names[i as usize].as_str() < q.joined.as_str());
        for &i in &self.by_name[from..] {
            let name = self.names[i as usize].as_str();
            if !name.starts_with(q.joined.as_str()) {
                break;
            }
            let m = if name == q.joined {
                NameMatch::Exact
            } else {
                NameMatch::Prefix
            };
            out.push((i as usize, m));
        }
        let from = self
            .by_norm_name
            .partition_point(|&i| self.norm_names[i as usize].as_str() < q.norm_joined.as_str());
        for &i in &self.by_norm_name[from..] {
            if self.norm_names[i as usize] != q.norm_joined {
                break;
            }
            match out.iter_mut().find(|(j, _)| *j == i as usize) {
                Some(m) => m.1 = NameMatch::Exact,
                None => out.push((i as usize, NameMatch::Exact)),
            }
        }
        out
    }

    /// Skills with a positive score, best first (ties by name), at most
    /// `limit` of them; and how many matched in all.
    pub fn rank(&self, q: &Query, limit: usize) -> Ranking {
        let mut points = vec![0u32; self.names.len()];
        let mut hits: Vec<usize> = Vec::new();
        for (_, list, idf) in self.known(q) {
            for p in list {
                let d = p.doc as usize;
                if points[d] == 0 {
                    hits.push(d);
                }
                points[d] = points[d].saturating_add(self.points(idf, p.tf, d));
            }
        }
        let named = self.named(q);
        if !named.is_empty() {
            let bonus = self.bonus(q);
            for (d, m) in named {
                if points[d] == 0 {
                    hits.push(d);
                }
                points[d] = points[d].saturating_add(bonus.saturating_mul(m as u32));
            }
        }
        let mut scored: Vec<(u32, usize)> = hits.into_iter().map(|d| (points[d], d)).collect();
        let matches = scored.len();
        self.top(&mut scored, limit);
        Ranking {
            matches,
            hits: scored,
        }
    }

    /// Why skill `i` scored what it did on `q`.
    pub fn explain(&self, q: &Query, i: usize) -> HitExplain {
        let mut terms = Vec::new();
        for (t, list, idf) in self.known(q) {
            if let Ok(at) = list.binary_search_by_key(&(i as u32), |p| p.doc) {
                let p = list[at];
                terms.push(TermHit {
                    term: t.term.clone(),
                    name: p.tf[0],
                    description: p.tf[1],
                    headings: p.tf[2],
                    points: self.points(idf, p.tf, i),
                });
            }
        }
        HitExplain {
            name_match: self
                .named(q)
                .into_iter()
                .find(|&(d, _)| d == i)
                .map(|(_, m)| m),
            terms,
        }
    }

    /// The query's terms and what each weighs here.
    pub fn explain_query(&self, q: &Query) -> QueryExplain {
        QueryExplain {
            terms: q
                .terms
                .iter()
                .map(|t| {
                    let df = self
                        .terms
                        .get(&t.term)
                        .map_or(0, |&id| self.postings[id as usize].len());
                    TermWeight {
                        word: t.word.clone(),
                        term: t.term.clone(),
                        skills: df,
                        idf: if df == 0 {
                            0.0
                        } else {
                            (self.idf(df) * 1000.0).round() / 1000.0
                        },
                    }
                })
                .collect(),
            left_out: q.left_out.clone(),
            skills: self.names.len(),
            name_bonus: self.bonus(q),
        }
    }

    /// Keeps the best `limit` of `scored`, sorted.
    fn top(&self, scored: &mut Vec<(u32, usize)>, limit: usize) {
        let order = |a: &(u32, usize), b: &(u32, usize)| {
            b.0.cmp(&a.0)
                .then_with(|| self.names[a.1].cmp(&self.names[b.1]))
        };
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, order);
            scored.truncate(limit);
        }
        scored.sort_unstable_by(order);
    }
}

/// A query term: normalised, and the word it came from first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    term: String,
    word: String,
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    text: String,
    /// The words as typed (stop words too), lowercase, joined by `-`.
    joined: String,
    /// The same words normalised.
    norm_joined: String,
    /// Distinct terms, stop words left out.
    terms: Vec<Term>,
    /// The stop words left out, once each.
    left_out: Vec<String>,
}

impl Query {
    pub fn parse(text: &str) -> Query {
        let mut words: Vec<String> = Vec::new();
        let mut terms: Vec<Term> = Vec::new();
        let mut left_out: Vec<String> = Vec::new();
        each_word(text, |w, compound| {
            if !compound {
                words.push(w.to_owned());
            }
            if is_stop(w) {
                if !compound && !left_out.iter().any(|x| x == w) {
                    left_out.push(w.to_owned());
                }
                return;
            }
            let mut term = w.to_owned();
            normalize(&mut term);
            if !terms.iter().any(|t| t.term == term) {
                terms.push(Term {
                    term,
                    word: w.to_owned(),
                });
            }
        });
        let joined = words.join("-");
        Query {
            text: text.trim().to_owned(),
            norm_joined: normalized_name(&joined),
            joined,
            terms,
            left_out,
        }
    }

    /// True when the query has no word (then every skill is listed).
    pub fn is_empty(&self) -> bool {
        self.joined.is_empty()
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// One ranked skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// 0 when the query was empty (a plain listing).
    pub score: u32,
    /// Why it scored so: only when asked for ([`find_explained`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<HitExplain>,
}

/// Why one skill scored what it did: the name bonus (if any) plus the
/// points of each query term it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HitExplain {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_match: Option<NameMatch>,
    pub terms: Vec<TermHit>,
}

/// One query term in one skill: its counts per field and its points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TermHit {
    pub term: String,
    pub name: u16,
    pub description: u16,
    pub headings: u16,
    pub points: u32,
}

/// The query's side of an explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryExplain {
    pub terms: Vec<TermWeight>,
    /// Words left out as too common to tell skills apart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Skills searched.
    pub skills: usize,
    /// What a name that starts with the query adds; the exact name adds
    /// twice as much.
    pub name_bonus: u32,
}

/// One query term: the word it came from, how many skills have it, and
/// its inverse document frequency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TermWeight {
    pub word: String,
    pub term: String,
    pub skills: usize,
    pub idf: f64,
}

impl QueryExplain {
    /// One line: `terms: spreadsheet (in 1 of 50 skills, idf 3.52), …`.
    pub fn text(&self) -> String {
        let mut out = String::from("terms:");
        for (i, t) in self.terms.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            let from = if t.word == t.term {
                String::new()
            } else {
                format!(" from {:?}", t.word)
            };
            let _ = if t.skills == 0 {
                write!(out, "{sep}{}{from} (in no skill)", t.term)
            } else {
                write!(
                    out,
                    "{sep}{}{from} (in {} of {} skills, idf {:.2})",
                    t.term, t.skills, self.skills, t.idf
                )
            };
        }
        if self.terms.is_empty() {
            out.push_str(" none");
        }
        if !self.left_out.is_empty() {
            let _ = write!(out, "; left out: {}", self.left_out.join(", "));
        }
        out
    }
}

impl HitExplain {
    /// One line: `= name prefix 1201 + csv 830 (name 1, description 2) + …`.
    pub fn text(&self, name_bonus: u32) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(m) = self.name_match {
            let what = match m {
                NameMatch::Exact => "exact name",
                NameMatch::Prefix => "name prefix",
            };
            parts.push(format!("{what} {}", name_bonus.saturating_mul(m as u32)));
        }
        for t in &self.terms {
            let counts: Vec<String> = [t.name, t.description, t.headings]
                .iter()
                .zip(FIELDS)
                .filter(|(n, _)| **n > 0)
                .map(|(n, f)| format!("{f} {n}"))
                .collect();
            parts.push(format!("{} {} ({})", t.term, t.points, counts.join(", ")));
        }
        format!("= {}", parts.join(" + "))
    }
}

/// The answer to a find: the best hits first, and when nothing matched, a
/// sentence saying what to try instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindResult {
    pub query: String,
    /// How many skills matched (`hits` holds the best `limit` of them);
    /// with an empty query, how many were listed from.
    pub total: usize,
    pub hits: Vec<Hit>,
    /// Present when there is no hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Names closest to the query when nothing matched (typos).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
    /// The query's terms and weights: only when asked for
    /// ([`find_explained`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<QueryExplain>,
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
    find_with(items, index, query, limit, false)
}

/// [`find`], with why each hit scored what it did.
pub fn find_explained<T: Rankable>(
    items: &[T],
    index: &RankIndex,
    query: &str,
    limit: usize,
) -> FindResult {
    find_with(items, index, query, limit, true)
}

fn find_with<T: Rankable>(
    items: &[T],
    index: &RankIndex,
    query: &str,
    limit: usize,
    explain: bool,
) -> FindResult {
    debug_assert_eq!(items.len(), index.len());
    let limit = limit.max(1);
    let q = Query::parse(query);
    let ranking = if q.is_empty() {
        let mut all: Vec<(u32, usize)> = (0..items.len()).map(|i| (0, i)).collect();
        index.top(&mut all, limit);
        Ranking {
            matches: items.len(),
            hits: all,
        }
    } else {
        index.rank(&q, limit)
    };
    let explain = explain && !q.is_empty();
    let hits: Vec<Hit> = ranking
        .hits
        .iter()
        .map(|&(s, i)| {
            let mut hit = items[i].hit(s);
            if explain {
                hit.explain = Some(index.explain(&q, i));
            }
            hit
        })
        .collect();
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
        explain: explain.then(|| index.explain_query(&q)),
        query: q.text,
        total: ranking.matches,
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
#[path = "rank_tests.rs"]
mod tests;
