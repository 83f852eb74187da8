//! The hash vectors of `runner/tests/vectors/package-hash.json`, computed
//! by an independent implementation of the formats in `docs/formats.md`
//! (those of the ScienceDiscovery runner): every package hash, file hash,
//! UTF-16 order and set identity must match byte for byte.

use std::path::PathBuf;

use base64::Engine as _;
use serde_json::Value;
use skill_runner::package::hash::{self, Binding};

fn vectors() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/package-hash.json");
    let text =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_slice(&text).expect("vectors are JSON")
}

fn files(case: &Value) -> Vec<(String, Vec<u8>)> {
    case["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(f["content_base64"].as_str().unwrap())
                .unwrap();
            (f["path"].as_str().unwrap().to_owned(), bytes)
        })
        .collect()
}

#[test]
fn package_hashes_file_hashes_and_order_match() {
    let v = vectors();
    let cases = v["packages"].as_array().unwrap();
    assert!(cases.len() >= 5, "expected the five vector packages");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let files = files(case);
        for (f, raw) in files.iter().zip(case["files"].as_array().unwrap()) {
            assert_eq!(
                f.1.len() as u64,
                raw["size"].as_u64().unwrap(),
                "{name} {}",
                f.0
            );
            assert_eq!(
                hash::file_hash(&f.1),
                raw["hash"].as_str().unwrap(),
                "{name} {}",
                f.0
            );
        }
        let mut order: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
        hash::sort_utf16(&mut order, |p| p);
        let want: Vec<&str> = case["utf16_order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(order, want, "{name}: order");
        let got =
            hash::package_hash(files.iter().map(|(p, b)| (p.as_str(), b.as_slice()))).unwrap();
        assert_eq!(
            got,
            case["package_hash"].as_str().unwrap(),
            "{name}: package hash"
        );
    }
}

#[test]
fn valid_vector_packages_verify_as_bundles_and_folders() {
    let v = vectors();
    for case in v["packages"].as_array().unwrap() {
        if !case["valid_package"].as_bool().unwrap() {
            continue;
        }
        let name = case["name"].as_str().unwrap();
        let files = files(case);
        let binding = Binding {
            id: name.to_owned(),
            revision: 1,
            version: "1.0.0".into(),
            hash: case["package_hash"].as_str().unwrap().to_owned(),
        };
        // As a bundle: render, parse, verify.
        let text = skill_runner::package::bundle::render(&[(binding.clone(), files.clone())]);
        let parsed = skill_runner::package::bundle::parse(text.as_bytes(), &Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(parsed[0].binding, binding);
        // As a folder on disk: the same hash.
        let dir = tempfile::tempdir().unwrap();
        for (p, b) in &files {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b).unwrap();
        }
        let got = skill_runner::package::verify::hash_dir(dir.path(), &Default::default()).unwrap();
        assert_eq!(got, binding.hash, "{name}: folder hash");
    }
}

#[test]
fn unicode_vector_hashes_from_a_folder_too() {
    // Non-ASCII and astral-plane file names on disk sort by UTF-16 units.
    let v = vectors();
    let case = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ordering-unicode")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (p, b) in files(case) {
        std::fs::write(dir.path().join(p), b).unwrap();
    }
    // The folder is a valid package only in layout (SKILL.md has no front
    // matter), which hashing does not look at.
    let got = skill_runner::package::verify::hash_dir(dir.path(), &Default::default()).unwrap();
    assert_eq!(got, case["package_hash"].as_str().unwrap());
}

#[test]
fn set_identities_match() {
    let v = vectors();
    for set in v["sets"].as_array().unwrap() {
        let bindings: Vec<Binding> = serde_json::from_value(set["bindings"].clone()).unwrap();
        assert_eq!(
            hash::set_identity(&bindings),
            set["identity"].as_str().unwrap(),
            "{}",
            set["name"]
        );
    }
}

#[test]
fn own_ordering_traps() {
    // a-b (0x2d) < a.b (0x2e) < a/b (0x2f) < a_b (0x5f); astral plane before
    // U+E000..U+FFFF although its UTF-8 bytes are larger.
    let files: Vec<(&str, &[u8])> = vec![
        ("SKILL.md", b"x"),
        ("a/b", b"1"),
        ("a-b", b"2"),
        ("\u{1F600}", b"3"),
        ("\u{FF21}", b"4"),
        ("\u{E000}", b"5"),
    ];
    let mut order: Vec<&str> = files.iter().map(|f| f.0).collect();
    hash::sort_utf16(&mut order, |p| p);
    assert_eq!(
        order,
        [
            "SKILL.md",
            "a-b",
            "a/b",
            "\u{1F600}",
            "\u{E000}",
            "\u{FF21}"
        ]
    );
    // The hash depends on that order: feeding in UTF-8 order is refused.
    let mut h = hash::PackageHasher::new();
    h.begin_file("\u{E000}", 1).unwrap();
    h.update(b"5").unwrap();
    assert!(h.begin_file("\u{1F600}", 1).is_err());
}

/// The worked examples of `docs/formats.md` are the vectors' own: the
/// page shows the exact bytes that are hashed and the exact bundle text,
/// and this test keeps them true.
#[test]
fn the_worked_examples_of_the_formats_page_hold() {
    let page_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/formats.md");
    let page = std::fs::read_to_string(&page_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", page_path.display()));
    let v = vectors();
    let case = |name: &str| -> Value {
        v["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no vector {name}"))
            .clone()
    };

    // Package hash: header, bytes, header of the next file, no separator.
    let empty = case("empty-file");
    let empty_files = files(&empty);
    let mut stream = Vec::new();
    for (path, bytes) in &empty_files {
        let header = format!("{}:{path}:{}:", path.len(), bytes.len());
        assert!(page.contains(&header), "the page lacks {header:?}");
        stream.extend_from_slice(header.as_bytes());
        stream.extend_from_slice(bytes);
    }
    let shown = String::from_utf8(stream.clone())
        .unwrap()
        .replace('\n', "\\n");
    assert!(page.contains(&shown), "the page lacks the stream {shown:?}");
    let want = empty["package_hash"].as_str().unwrap();
    assert_eq!(hash::file_hash(&stream), want);
    assert!(page.contains(want));
    // Lengths count UTF-8 bytes.
    assert!(files(&case("ordering-unicode"))
        .iter()
        .any(|(p, b)| p == "été.md" && format!("{}:{p}:{}:", p.len(), b.len()) == "8:été.md:2:"));
    assert!(page.contains("8:été.md:2:"));

    // Set identity: the compact JSON text shown, and its SHA-256.
    let one = v["sets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "one")
        .unwrap();
    let b = &one["bindings"][0];
    let text = format!(
        r#"[{{"hash":"{}","id":"{}","revision":{},"version":"{}"}}]"#,
        b["hash"].as_str().unwrap(),
        b["id"].as_str().unwrap(),
        b["revision"],
        b["version"].as_str().unwrap()
    );
    assert!(page.contains(&text), "the page lacks {text}");
    let identity = one["identity"].as_str().unwrap();
    assert_eq!(hash::file_hash(text.as_bytes()), identity);
    assert!(page.contains(identity));

    // The smallest bundle, exactly as rendered.
    let minimal = case("minimal");
    let binding = Binding {
        id: "minimal".into(),
        revision: 1,
        version: "1.0.0".into(),
        hash: minimal["package_hash"].as_str().unwrap().to_owned(),
    };
    let text = skill_runner::package::bundle::render(&[(binding, files(&minimal))]);
    assert!(page.contains(&text), "the page lacks the bundle {text}");
    skill_runner::package::bundle::parse(text.as_bytes(), &Default::default()).unwrap();
}
