//! Catalog benchmark, in one run:
//!
//! 1. `find` latency on a generated catalog of 10,000 skills: median and
//!    worst of each query kind (target: under 5 ms a query), after the
//!    ranking index is built (its build time is printed first: once per
//!    catalog, on the first find);
//! 2. a cold scan of 2,000 skill folders (no index: every folder listed,
//!    every `SKILL.md` read and parsed) side by side with a warm start from
//!    the user-level index (every folder and `SKILL.md` stat'ed against its
//!    stamp, nothing read); target: warm at least 10× faster.
//!
//! Both sides run on a warm page cache: "cold" means "no index", not "not
//! in memory". A warm start is mostly one `stat` per folder and per
//! `SKILL.md` (split over two threads past 2,048 stamps), so the ratio
//! depends on how expensive system calls are on the host. Fixture times are set an hour back so the index is outside
//! its racy window, as a folder untouched for a while is.
//!
//! Run: `cargo bench -p skill-runner --bench catalog` (ITER=N to change the
//! number of rounds). Prints medians and ratios; asserts nothing.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use skill_runner::skillhost::catalog::{Catalog, CatalogConfig, Doc, RankIndex};

const WORDS: &[&str] = &[
    "csv",
    "pdf",
    "report",
    "chart",
    "image",
    "audio",
    "video",
    "json",
    "yaml",
    "sql",
    "graph",
    "text",
    "table",
    "summary",
    "translate",
    "search",
    "index",
    "backup",
    "deploy",
    "test",
    "lint",
    "format",
    "parse",
    "render",
    "invoice",
    "email",
    "calendar",
    "weather",
    "finance",
    "genome",
    "protein",
    "spectra",
    "climate",
    "survey",
    "notebook",
    "slides",
    "diagram",
    "map",
    "archive",
    "crypto",
    "compress",
    "scrape",
    "label",
    "cluster",
    "forecast",
    "anomaly",
    "audit",
    "review",
    "refactor",
    "docs",
];

/// Deterministic pseudo-random numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as usize
    }

    fn word(&mut self) -> &'static str {
        WORDS[self.next() % WORDS.len()]
    }
}

/// Writes `n` skill folders under `root`, a quarter of them with a script.
fn generate(root: &Path, n: usize) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for i in 0..n {
        let name = format!("{}-{}-{i}", rng.word(), rng.word());
        let dir = root.join(&name);
        fs::create_dir_all(&dir).unwrap();
        let description: Vec<&str> = (0..12).map(|_| rng.word()).collect();
        fs::write(
            dir.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: Work with {} files and tools.\nmetadata:\n  version: \"1.{i}.0\"\n---\n# {name}\n\nSteps.\n",
                description.join(" ")
            ),
        )
        .unwrap();
        if i % 4 == 0 {
            fs::create_dir_all(dir.join("scripts")).unwrap();
            fs::write(dir.join("scripts/run.sh"), "echo run\n").unwrap();
        }
    }
}

fn backdate(root: &Path) {
    let t = SystemTime::now() - Duration::from_secs(3600);
    fn walk(p: &Path, t: SystemTime) {
        let meta = fs::symlink_metadata(p).unwrap();
        if meta.is_dir() {
            for e in fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), t);
            }
        }
        let f = fs::File::open(p).unwrap();
        f.set_times(fs::FileTimes::new().set_modified(t)).unwrap();
    }
    walk(root, t);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn config(root: &Path, index: &Path) -> CatalogConfig {
    CatalogConfig {
        builtin: true,
        user_dirs: vec![root.to_owned()],
        project_dirs: Vec::new(),
        index: Some(index.to_owned()),
        ..CatalogConfig::default()
    }
}

fn main() {
    let iter: usize = std::env::var("ITER")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let tmp = tempfile::Builder::new()
        .prefix("sr-bench-catalog-")
        .tempdir()
        .unwrap();

    // 1. find on 10,000 skills.
    let big = tmp.path().join("big");
    generate(&big, 10_000);
    let catalog = Catalog::load(&config(&big, &tmp.path().join("big-index.json")));
    assert!(
        catalog.warnings().is_empty(),
        "{:?}",
        &catalog.warnings()[..1]
    );
    println!(
        "find on a catalog of {} skills (median and worst of {} rounds, limit 10):",
        catalog.entries().len(),
        iter * 10
    );
    let mut builds = Vec::new();
    for _ in 0..iter {
        let t = Instant::now();
        let index = RankIndex::new(catalog.entries().iter().map(|e| Doc {
            name: &e.name,
            description: &e.description,
            headings: &e.headings,
        }));
        builds.push(t.elapsed());
        assert_eq!(index.len(), catalog.entries().len());
    }
    println!(
        "  {:<57} median {:>10}  (once per catalog, on its first find)",
        "building the ranking index",
        ms(median(builds))
    );
    catalog.find("warm up", 1);
    let queries = [
        ("one common word", "csv"),
        ("two words", "csv report"),
        ("three words", "protein spectra forecast"),
        ("a sentence", "make a chart of the survey data"),
        ("an exact name", "pdf-chart-4242"),
        ("a word prefix", "gen"),
        ("no match (suggestions)", "pdfchrat"),
        ("empty (list by name)", ""),
    ];
    for (what, q) in queries {
        let mut times = Vec::new();
        let mut hits = 0;
        for _ in 0..iter * 10 {
            let t = Instant::now();
            let r = catalog.find(q, 10);
            times.push(t.elapsed());
            hits = r.hits.len();
        }
        let worst = *times.iter().max().unwrap();
        println!(
            "  {what:<24} {q:<32} median {:>10}  worst {:>10}  ({hits} hits)",
            ms(median(times)),
            ms(worst)
        );
    }

    // 2. cold scan vs warm start, 2,000 folders.
    let root = tmp.path().join("two-thousand");
    generate(&root, 2_000);
    backdate(&root);
    let index = tmp.path().join("index.json");
    let cfg = config(&root, &index);
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut entries = 0;
    for _ in 0..iter {
        let _ = fs::remove_file(&index);
        let t = Instant::now();
        let c = Catalog::load(&cfg);
        cold.push(t.elapsed());
        assert_eq!(c.stats().scanned, 1);
        entries = c.entries().len();

        for _ in 0..3 {
            let t = Instant::now();
            let c = Catalog::load(&cfg);
            warm.push(t.elapsed());
            assert_eq!(c.stats().from_index, 1, "the warm start must use the index");
            assert_eq!(c.entries().len(), entries);
        }
    }
    let (cold, warm) = (median(cold), median(warm));
    println!(
        "catalog load of 2,000 skill folders ({entries} skills with the built-ins), median of {iter} cold and {} warm:",
        iter * 3
    );
    println!("  cold scan (no index)        {:>10}", ms(cold));
    println!("  warm start (index, stat)    {:>10}", ms(warm));
    println!(
        "  warm is {:.1}x faster",
        cold.as_secs_f64() / warm.as_secs_f64()
    );
}
