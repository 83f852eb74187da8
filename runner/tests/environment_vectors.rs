//! The environment-hash vectors of `runner/tests/vectors/environment-hash.json`,
//! computed by `runner/tests/vectors/environment_hash.py`, an implementation
//! independent of the runner's (docs/formats.md, "Environments"): every
//! hash and order must match byte for byte, in memory and from a tree on
//! disk, and every refused case must be refused.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;
use skill_runner::package::environment::store::{self, EnvLimits, EnvStore};
use skill_runner::package::environment::tree::{self, Content, Entry, EntryKind};

fn vectors() -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/environment-hash.json");
    let text = fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_slice(&text).expect("vectors are JSON")
}

/// (path, kind, bytes or target, exec) of each entry of a case.
struct Raw {
    path: String,
    kind: String,
    bytes: Vec<u8>,
    target: String,
    exec: bool,
}

fn entries(case: &Value) -> Vec<Raw> {
    case["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Raw {
            path: e["path"].as_str().unwrap().to_owned(),
            kind: e["kind"].as_str().unwrap().to_owned(),
            bytes: e["content_base64"]
                .as_str()
                .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
                .unwrap_or_default(),
            target: e["target"].as_str().unwrap_or_default().to_owned(),
            exec: e["exec"].as_bool().unwrap_or(false),
        })
        .collect()
}

fn in_memory(raw: &[Raw]) -> Option<Vec<(&str, Content<'_>)>> {
    raw.iter()
        .map(|r| {
            let content = match r.kind.as_str() {
                "file" => Content::File {
                    bytes: &r.bytes,
                    exec: r.exec,
                },
                "symlink" => Content::Symlink { target: &r.target },
                _ => return None,
            };
            Some((r.path.as_str(), content))
        })
        .collect()
}

/// Writes a case as a tree on disk.
fn materialize(root: &Path, raw: &[Raw]) {
    fs::create_dir_all(root).unwrap();
    for r in raw {
        let p = root.join(&r.path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        match r.kind.as_str() {
            "file" => {
                fs::write(&p, &r.bytes).unwrap();
                let mode = if r.exec { 0o755 } else { 0o644 };
                fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            }
            "symlink" => symlink(&r.target, &p).unwrap(),
            "fifo" => nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap(),
            other => panic!("unknown kind {other}"),
        }
    }
}

/// A case can be written to disk when its paths are real paths.
fn materializable(raw: &[Raw]) -> bool {
    raw.iter().all(|r| tree::check_path(&r.path).is_ok())
        && raw.iter().all(|r| {
            !raw.iter()
                .any(|o| o.path.starts_with(&format!("{}/", r.path)))
        })
}

#[test]
fn environment_hashes_and_order_match_the_independent_implementation() {
    let v = vectors();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 6, "expected the six vector trees");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let want = case["hash"].as_str().unwrap();
        let raw = entries(case);

        let memory = in_memory(&raw).unwrap();
        assert_eq!(tree::tree_hash(memory).unwrap(), want, "{name} in memory");

        let mut sorted: Vec<Entry> = raw
            .iter()
            .map(|r| Entry {
                path: r.path.clone(),
                kind: EntryKind::File {
                    size: 0,
                    exec: false,
                },
            })
            .collect();
        tree::sort_entries(&mut sorted);
        let order: Vec<&str> = sorted.iter().map(|e| e.path.as_str()).collect();
        let want_order: Vec<&str> = case["order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(order, want_order, "{name} order");

        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("tree");
        materialize(&root, &raw);
        let manifest = store::hash_dir(&root, &EnvLimits::default()).unwrap();
        assert_eq!(manifest.hash, want, "{name} on disk");
        let env = EnvStore::open(&skill_runner::datadir::DataDir::unchecked(
            &t.path().join("data"),
        ))
        .unwrap();
        let published = env
            .add(&root, "vector", vec![], vec![], &EnvLimits::default())
            .unwrap();
        assert_eq!(published.record.hash, want, "{name} published");
        env.verify(want).unwrap();
    }
}

#[test]
fn refused_vectors_are_refused_in_memory_and_on_disk() {
    let v = vectors();
    let cases = v["refused"].as_array().unwrap();
    assert!(cases.len() >= 8, "expected the eight refused trees");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let raw = entries(case);
        if let Some(memory) = in_memory(&raw) {
            assert!(tree::tree_hash(memory).is_err(), "{name} hashed in memory");
        }
        if materializable(&raw) {
            let t = tempfile::tempdir().unwrap();
            let root = t.path().join("tree");
            materialize(&root, &raw);
            assert!(
                store::hash_dir(&root, &EnvLimits::default()).is_err(),
                "{name} hashed on disk"
            );
            let env = EnvStore::open(&skill_runner::datadir::DataDir::unchecked(
                &t.path().join("data"),
            ))
            .unwrap();
            assert!(
                env.add(&root, "vector", vec![], vec![], &EnvLimits::default())
                    .is_err(),
                "{name} published"
            );
            assert!(env.list().unwrap().is_empty(), "{name} left a record");
        }
    }
}

/// The worked example of `docs/formats.md` ("Environments") is the
/// vectors' own: the page shows the exact stream that is hashed, and its
/// SHA-256 is the vector's hash.
#[test]
fn the_worked_example_of_the_formats_page_holds() {
    let page_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/formats.md");
    let page = fs::read_to_string(&page_path).unwrap();
    let v = vectors();
    let case = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "worked-example")
        .expect("the worked-example vector");
    let mut raw = entries(case);
    raw.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let mut stream = Vec::new();
    for r in &raw {
        match r.kind.as_str() {
            "file" => {
                let kind = if r.exec { 'x' } else { 'f' };
                stream.extend(
                    format!("{kind}:{}:{}:{}:", r.path.len(), r.path, r.bytes.len()).bytes(),
                );
                stream.extend(&r.bytes);
            }
            _ => stream.extend(
                format!(
                    "l:{}:{}:{}:{}",
                    r.path.len(),
                    r.path,
                    r.target.len(),
                    r.target
                )
                .bytes(),
            ),
        }
    }
    let shown = String::from_utf8(stream.clone())
        .unwrap()
        .replace('\n', "\\n");
    assert!(page.contains(&shown), "the page lacks the stream {shown:?}");
    let want = case["hash"].as_str().unwrap();
    assert_eq!(skill_runner::package::hash::file_hash(&stream), want);
    assert!(page.contains(want), "the page lacks the hash {want}");
}
