//! Python requirements locks (runner/src/package/environment/lock.rs), as
//! `env add --python` and the environment build read them.
//!
//! Invariants: no panic; a refusal is one line; an accepted lock has at
//! least one requirement, each with a valid name unique after
//! normalization, one exact version and only `sha256:<64 hex>` hashes; its
//! digest is the SHA-256 of the input; and rendering the requirements one
//! per line parses back to the same names, versions and hashes.
use crate::one_line;
use skill_runner::package::environment::lock;
use skill_runner::package::hash;

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    let parsed = match lock::parse_python(data) {
        Err(e) => {
            one_line("python lock", &e.to_string());
            return;
        }
        Ok(l) => l,
    };
    assert_eq!(parsed.sha256, hash::file_hash(data));
    assert!(!parsed.requirements.is_empty());
    let mut seen = std::collections::BTreeSet::new();
    for r in &parsed.requirements {
        assert!(seen.insert(r.normalized.clone()), "unique names");
        assert_eq!(lock::normalize(&r.name), r.normalized);
        assert!(!r.version.is_empty() && !r.version.contains(['*', '=', ',', '<', '>']));
        assert!(!r.hashes.is_empty());
        for h in &r.hashes {
            let hex = h.strip_prefix("sha256:").expect("sha256 only");
            assert!(hash::is_hex_digest(hex));
        }
    }
    let text: String = parsed
        .requirements
        .iter()
        .map(|r| {
            let hashes: Vec<String> = r.hashes.iter().map(|h| format!("--hash={h}")).collect();
            format!("{}=={} {}\n", r.name, r.version, hashes.join(" "))
        })
        .collect();
    let again = lock::parse_python(text.as_bytes()).expect("a rendered lock parses");
    let key = |l: &lock::PythonLock| -> Vec<(String, String, Vec<String>)> {
        l.requirements
            .iter()
            .map(|r| (r.name.clone(), r.version.clone(), r.hashes.clone()))
            .collect()
    };
    assert_eq!(key(&parsed), key(&again));
}
