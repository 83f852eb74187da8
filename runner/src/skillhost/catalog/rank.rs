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
                let name_match = if docs[i].0 == query.joined
                    || normalized_name(docs[i].0) == query.norm_joined
                {
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
}
