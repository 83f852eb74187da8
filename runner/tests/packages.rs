//! Package layer on a real file system: bad inputs are refused with a clear
//! error and leave nothing behind; staging and the store keep the
//! snapshot-root invariants of docs/packages.md.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use skill_runner::datadir::DataDir;
use skill_runner::package::bundle;
use skill_runner::package::format::PackageLimits;
use skill_runner::package::hash::{self, Binding};
use skill_runner::package::stage::{self, Selected, Selection, SkillSource, MANIFEST_NAME};
use skill_runner::package::store::Store;
use skill_runner::package::verify;

const SKILL_MD: &str = "---\nname: demo\ndescription: A demo skill.\n---\n# Demo\n";

fn write_skill(root: &Path, files: &[(&str, &[u8])]) -> PathBuf {
    fs::create_dir_all(root).unwrap();
    for (p, b) in files {
        let path = root.join(p);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b).unwrap();
    }
    root.to_owned()
}

fn demo(root: &Path) -> PathBuf {
    write_skill(
        root,
        &[
            ("SKILL.md", SKILL_MD.as_bytes()),
            ("scripts/run.sh", b"echo hi\n"),
            ("assets/data.bin", &[0u8, 1, 2, 255]),
        ],
    )
}

fn binding(id: &str, hash: &str) -> Binding {
    Binding {
        id: id.into(),
        revision: 1,
        version: "1.0.0".into(),
        hash: hash.into(),
    }
}

fn stage_dir(
    src: &Path,
    id: &str,
    hash: &str,
    root: &Path,
) -> Result<stage::Snapshot, stage::StageError> {
    stage_all(
        &[Selected {
            binding: binding(id, hash),
            source: SkillSource::Dir(src.to_owned()),
        }],
        root,
        &PackageLimits::default(),
    )
}

/// Checks `selected` and stages it, as publishing does.
fn stage_all(
    selected: &[Selected],
    root: &Path,
    limits: &PackageLimits,
) -> Result<stage::Snapshot, stage::StageError> {
    stage::stage(&Selection::check(selected)?, root, limits)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

// ---- staging ------------------------------------------------------------

#[test]
fn staged_root_is_exact_sealed_and_verified() {
    let t = tempfile::tempdir().unwrap();
    let src = demo(&t.path().join("src/demo"));
    let pin = verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let root = t.path().join("root");
    let snap = stage_dir(&src, "demo", &pin, &root).unwrap();
    // Exactly the selected package and the manifest.
    assert_eq!(entries(&root), [MANIFEST_NAME, "demo"]);
    assert_eq!(
        entries(&root.join("demo")),
        ["SKILL.md", "assets", "scripts"]
    );
    // Files 0444, folders 0555.
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&root), 0o555);
    assert_eq!(mode(&root.join("demo/scripts")), 0o555);
    assert_eq!(mode(&root.join("demo/scripts/run.sh")), 0o444);
    assert_eq!(mode(&root.join(MANIFEST_NAME)), 0o444);
    // The manifest, byte for byte.
    let manifest = fs::read_to_string(root.join(MANIFEST_NAME)).unwrap();
    assert_eq!(
        manifest,
        format!(
            "{{\n  \"schemaVersion\": 1,\n  \"skills\": [\n    {{\n      \"hash\": \"{pin}\",\n      \"id\": \"demo\",\n      \"path\": \"/skills/demo\",\n      \"revision\": 1,\n      \"version\": \"1.0.0\"\n    }}\n  ]\n}}\n"
        )
    );
    assert_eq!(snap.identity, hash::set_identity(&[binding("demo", &pin)]));
    // The staged copy re-hashes to the pin.
    assert_eq!(
        verify::hash_dir(&root.join("demo"), &PackageLimits::default()).unwrap(),
        pin
    );
}

#[test]
fn manifest_sorts_skills_by_id() {
    let t = tempfile::tempdir().unwrap();
    let a = demo(&t.path().join("zeta"));
    let b = demo(&t.path().join("alpha"));
    let ha = verify::hash_dir(&a, &PackageLimits::default()).unwrap();
    let root = t.path().join("root");
    let snap = stage_all(
        &[
            Selected {
                binding: binding("zeta", &ha),
                source: SkillSource::Dir(a),
            },
            Selected {
                binding: binding("alpha", &ha),
                source: SkillSource::Dir(b),
            },
        ],
        &root,
        &PackageLimits::default(),
    )
    .unwrap();
    let ids: Vec<&str> = snap.manifest.skills.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["alpha", "zeta"]);
    assert!(snap
        .warnings
        .iter()
        .any(|w| w.contains("differs from the skill id")));
}

#[test]
fn lying_hash_is_refused_and_nothing_is_left() {
    let t = tempfile::tempdir().unwrap();
    let src = demo(&t.path().join("demo"));
    let root = t.path().join("root");
    let lie = "0".repeat(64);
    let e = stage_dir(&src, "demo", &lie, &root).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("\"demo\"") && msg.contains(&lie), "{msg}");
    assert_eq!(e.kind().as_str(), "hash_mismatch");
    assert!(!root.exists(), "partial root left behind");
}

#[test]
fn bad_folders_are_refused_naming_the_path() {
    type Mutation = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "missing SKILL.md",
            Box::new(|d: &Path| fs::remove_file(d.join("SKILL.md")).unwrap()),
            "no SKILL.md",
        ),
        (
            "not YAML",
            Box::new(|d: &Path| fs::write(d.join("SKILL.md"), "---\nname: [x\n---\n").unwrap()),
            "not valid YAML",
        ),
        (
            "no name",
            Box::new(|d: &Path| {
                fs::write(d.join("SKILL.md"), "---\ndescription: d\n---\n").unwrap()
            }),
            "'name' is missing",
        ),
        (
            "symlink inside",
            Box::new(|d: &Path| std::os::unix::fs::symlink("SKILL.md", d.join("link")).unwrap()),
            "link is a symlink",
        ),
        (
            "symlink outside",
            Box::new(|d: &Path| {
                std::os::unix::fs::symlink("/etc/passwd", d.join("scripts/pw")).unwrap()
            }),
            "pw is a symlink",
        ),
        (
            "fifo",
            Box::new(|d: &Path| {
                nix::unistd::mkfifo(&d.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap()
            }),
            "pipe is a FIFO",
        ),
        (
            "file over limit",
            Box::new(|d: &Path| fs::write(d.join("big"), vec![0u8; 10 * 1024 * 1024 + 1]).unwrap()),
            "over the limit",
        ),
        (
            "501 files",
            Box::new(|d: &Path| {
                fs::create_dir(d.join("many")).unwrap();
                for i in 0..498 {
                    fs::write(d.join(format!("many/{i}")), "x").unwrap();
                }
            }),
            "more than 500 files",
        ),
        (
            "backslash",
            Box::new(|d: &Path| fs::write(d.join("a\\b"), "x").unwrap()),
            "backslash",
        ),
    ];
    for (name, mutate, needle) in cases {
        let t = tempfile::tempdir().unwrap();
        let src = demo(&t.path().join("demo"));
        mutate(&src);
        let root = t.path().join("root");
        // Pin the true hash where the folder can be hashed at all, so the
        // refusal is about the package, not the pin.
        let pin =
            verify::hash_dir(&src, &PackageLimits::default()).unwrap_or_else(|_| "a".repeat(64));
        let e = stage_dir(&src, "demo", &pin, &root).unwrap_err();
        assert!(e.to_string().contains(needle), "{name}: {e}");
        assert!(!root.exists(), "{name}: partial root left behind");
    }
}

#[test]
fn bad_bindings_and_duplicates_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let src = demo(&t.path().join("demo"));
    let pin = verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    for (b, needle) in [
        (binding("demo", &pin.to_uppercase()), "64 lowercase hex"),
        (binding("demo", &pin[..63]), "64 lowercase hex"),
        (binding("Demo", &pin), "ids match"),
        (
            Binding {
                revision: 0,
                ..binding("demo", &pin)
            },
            "revision",
        ),
    ] {
        let root = t.path().join("root");
        let e = stage_all(
            &[Selected {
                binding: b,
                source: SkillSource::Dir(src.clone()),
            }],
            &root,
            &PackageLimits::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
        assert!(!root.exists());
    }
    let root = t.path().join("root");
    let sel = Selected {
        binding: binding("demo", &pin),
        source: SkillSource::Dir(src.clone()),
    };
    let e = stage_all(&[sel.clone(), sel], &root, &PackageLimits::default()).unwrap_err();
    assert!(e.to_string().contains("selected twice"), "{e}");
    assert!(!root.exists());
}

/// Invariant 4: an edit to the source while it is staged is either not
/// observed or refused; a mix of old and new bytes never verifies.
#[test]
fn edits_during_staging_never_produce_a_mix() {
    let t = tempfile::tempdir().unwrap();
    let src = write_skill(
        &t.path().join("demo"),
        &[
            ("SKILL.md", SKILL_MD.as_bytes()),
            ("assets/big.bin", &vec![b'a'; 8 << 20]),
        ],
    );
    let pin = verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let file = src.join("assets/big.bin");
        std::thread::spawn(move || {
            use std::io::{Seek, SeekFrom, Write};
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut f = fs::OpenOptions::new().write(true).open(&file).unwrap();
                // Rewrite one byte somewhere in the middle, then put it back.
                let at = (i * 7919) % (8 << 20);
                f.seek(SeekFrom::Start(at)).unwrap();
                f.write_all(b"b").unwrap();
                f.seek(SeekFrom::Start(at)).unwrap();
                f.write_all(b"a").unwrap();
                i += 1;
            }
        })
    };
    let (mut ok, mut refused) = (0, 0);
    for i in 0..20 {
        let root = t.path().join(format!("root{i}"));
        match stage_dir(&src, "demo", &pin, &root) {
            Ok(_) => {
                ok += 1;
                // What verified is exactly the original content.
                let staged = fs::read(root.join("demo/assets/big.bin")).unwrap();
                assert!(
                    staged.iter().all(|&b| b == b'a'),
                    "a mix was staged and verified"
                );
            }
            Err(e) => {
                refused += 1;
                assert_eq!(e.kind().as_str(), "hash_mismatch", "{e}");
                assert!(!root.exists());
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(ok + refused, 20);
}

// ---- bundles --------------------------------------------------------------

fn bundle_json(files: &[(&str, &[u8])], package_hash: Option<&str>) -> serde_json::Value {
    let owned: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(p, b)| (p.to_string(), b.to_vec()))
        .collect();
    let h = package_hash.map(str::to_owned).unwrap_or_else(|| {
        let mut sorted: Vec<(&str, &[u8])> = files.to_vec();
        hash::sort_utf16(&mut sorted, |f| f.0);
        hash::package_hash(sorted).unwrap()
    });
    serde_json::from_str(&bundle::render(&[(binding("demo", &h), owned)])).unwrap()
}

#[test]
fn bundle_bad_paths_are_refused() {
    for bad in ["../escape", "/abs", "a//b", "a/./b", "a\\b", "a\0b"] {
        let j = bundle_json(
            &[("SKILL.md", SKILL_MD.as_bytes()), (bad, b"x")],
            Some(&"a".repeat(64)),
        );
        let e = bundle::parse(j.to_string().as_bytes(), &PackageLimits::default()).unwrap_err();
        assert!(e.to_string().contains("not admissible"), "{bad:?}: {e}");
    }
}

/// Found by fuzzing (target `bundle`): serde names an unknown key as it
/// was written, so a key holding a newline made the refusal several lines;
/// it stays one line.
#[test]
fn bundle_refusals_are_one_line() {
    let e = bundle::parse(br#"{"skills":[],"wut\n":1}"#, &PackageLimits::default())
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "{e:?}");
    assert!(e.contains("unknown field `wut\\n`"), "{e}");
}

#[test]
fn bundle_tampering_is_caught() {
    let good = bundle_json(
        &[("SKILL.md", SKILL_MD.as_bytes()), ("a.txt", b"hello")],
        None,
    );
    bundle::parse(good.to_string().as_bytes(), &PackageLimits::default()).unwrap();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);

    // Tampered bytes, per-file hash and size rewritten to match, package
    // hash untouched: the package hash catches it.
    let mut j = good.clone();
    let f = &mut j["skills"][0]["files"][1];
    f["content"] = b64(b"HELLO!").into();
    f["size"] = 6.into();
    f["hash"] = hash::file_hash(b"HELLO!").into();
    let e = bundle::parse(j.to_string().as_bytes(), &PackageLimits::default()).unwrap_err();
    assert_eq!(e.kind().as_str(), "hash_mismatch");
    assert!(e.to_string().contains("package hash"), "{e}");

    // Tampered bytes alone: the file hash catches it.
    let mut j = good.clone();
    j["skills"][0]["files"][1]["content"] = b64(b"HELLO").into();
    let e = bundle::parse(j.to_string().as_bytes(), &PackageLimits::default()).unwrap_err();
    assert!(e.to_string().contains("\"a.txt\""), "{e}");

    // Non-canonical base64 (padding bits set) must not round-trip.
    let mut j = good.clone();
    j["skills"][0]["files"][1]["content"] = "aGVsbG9=".into();
    let e = bundle::parse(j.to_string().as_bytes(), &PackageLimits::default()).unwrap_err();
    assert!(e.to_string().contains("base64"), "{e}");

    // Duplicate path, duplicate skill, missing SKILL.md, unknown field.
    let dup = bundle_json(
        &[("SKILL.md", SKILL_MD.as_bytes()), ("a", b"1"), ("a", b"1")],
        Some(&"a".repeat(64)),
    );
    assert!(
        bundle::parse(dup.to_string().as_bytes(), &PackageLimits::default())
            .unwrap_err()
            .to_string()
            .contains("twice")
    );
    let mut two = good.clone();
    let s = two["skills"][0].clone();
    two["skills"].as_array_mut().unwrap().push(s);
    assert!(
        bundle::parse(two.to_string().as_bytes(), &PackageLimits::default())
            .unwrap_err()
            .to_string()
            .contains("appears twice")
    );
    let nomd = bundle_json(&[("a", b"1")], None);
    assert!(
        bundle::parse(nomd.to_string().as_bytes(), &PackageLimits::default())
            .unwrap_err()
            .to_string()
            .contains("no SKILL.md")
    );
    let mut extra = good.clone();
    extra["skills"][0]["mode"] = 420.into();
    assert!(
        bundle::parse(extra.to_string().as_bytes(), &PackageLimits::default())
            .unwrap_err()
            .to_string()
            .contains("unknown field")
    );
}

// ---- store ----------------------------------------------------------------

#[test]
fn store_publish_is_atomic_idempotent_and_immutable() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = demo(&t.path().join("demo"));
    let p = store
        .publish_dir(&src, "demo", 1, "1.0.0", &PackageLimits::default())
        .unwrap();
    assert!(p.new_package);
    // Same again: no-op.
    let again = store
        .publish_dir(&src, "demo", 1, "1.0.0", &PackageLimits::default())
        .unwrap();
    assert!(!again.new_package);
    // Changed bytes under the same revision: conflict, and the record stays.
    fs::write(src.join("scripts/run.sh"), "echo changed\n").unwrap();
    let e = store
        .publish_dir(&src, "demo", 1, "1.0.0", &PackageLimits::default())
        .unwrap_err();
    assert!(e.to_string().contains("publish a new revision"), "{e}");
    assert_eq!(store.bindings().unwrap(), vec![p.binding.clone()]);
    // A new revision is fine.
    store
        .publish_dir(&src, "demo", 2, "1.0.1", &PackageLimits::default())
        .unwrap();
    assert_eq!(store.bindings().unwrap().len(), 2);
    // Stored trees are sealed and staged from the store verify.
    let pkg = store.resolve(&p.binding).unwrap();
    assert_eq!(
        fs::metadata(&pkg.tree).unwrap().permissions().mode() & 0o777,
        0o555
    );
    let root = t.path().join("root");
    stage_all(
        &[Selected {
            binding: p.binding.clone(),
            source: SkillSource::Store(pkg),
        }],
        &root,
        &PackageLimits::default(),
    )
    .unwrap();
    assert_eq!(entries(&root), [MANIFEST_NAME, "demo"]);
    // Nothing left in tmp.
    assert!(entries(&store.root().join("tmp")).is_empty());
}

#[test]
fn concurrent_publishes_of_the_same_bytes_both_succeed_with_one_tree() {
    let t = tempfile::tempdir().unwrap();
    let src = demo(&t.path().join("demo"));
    let store = Store::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| store.publish_dir(&src, "demo", 1, "1.0.0", &PackageLimits::default()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let hashes: Vec<String> = entries(&store.root().join("packages"));
    assert_eq!(hashes.len(), 1);
    assert!(entries(&store.root().join("tmp")).is_empty());
}

#[test]
fn corrupted_store_tree_is_caught_at_staging_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = demo(&t.path().join("demo"));
    let p = store
        .publish_dir(&src, "demo", 1, "1.0.0", &PackageLimits::default())
        .unwrap();
    let pkg = store.resolve(&p.binding).unwrap();
    // Someone with root rewrites a stored file behind the store's back.
    let victim = pkg.tree.join("scripts/run.sh");
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&victim, "echo evil\n").unwrap();
    let root = t.path().join("root");
    let e = stage_all(
        &[Selected {
            binding: p.binding,
            source: SkillSource::Store(pkg),
        }],
        &root,
        &PackageLimits::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("scripts/run.sh"), "{e}");
    assert!(!root.exists());
}

#[test]
fn interrupted_publish_is_swept_and_never_found() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    // What a publisher killed mid-way leaves: a private folder whose lock
    // nobody holds any more, and no entry under packages/.
    let tmp = store.root().join("tmp");
    fs::create_dir_all(tmp.join("deadbeef/tree")).unwrap();
    fs::write(tmp.join("deadbeef/tree/SKILL.md"), SKILL_MD).unwrap();
    fs::write(tmp.join("deadbeef.lock"), "").unwrap();
    assert!(store.package(&"d".repeat(64)).unwrap().is_none());
    let store = Store::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    assert!(entries(&store.root().join("tmp")).is_empty());
    assert!(entries(&store.root().join("packages")).is_empty());
}

#[test]
fn live_private_folders_survive_a_sweep() {
    let t = tempfile::tempdir().unwrap();
    let live = skill_runner::package::store::PrivateDir::create(&t.path().join("x")).unwrap();
    skill_runner::package::store::sweep_locked_dirs(&t.path().join("x")).unwrap();
    assert!(live.path.exists());
    let path = live.path.clone();
    drop(live);
    assert!(!path.exists());
}

#[test]
fn a_reserved_name_is_locked_without_a_folder_and_survives_a_sweep() {
    let t = tempfile::tempdir().unwrap();
    let parent = t.path().join("x");
    let name = skill_runner::package::store::PrivateDir::reserve_named(&parent, "exec-1.").unwrap();
    let mut lock = name.path.clone().into_os_string();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    assert!(!name.path.exists(), "a reserved name makes no folder");
    assert!(lock.exists());
    // Held: a sweep (and the cgroup sweep, which asks the same lock)
    // leaves it alone.
    assert!(skill_runner::fsx::is_locked(&lock));
    skill_runner::package::store::sweep_locked_dirs(&parent).unwrap();
    assert!(lock.exists(), "a live reservation was swept");
    drop(name);
    assert!(!lock.exists());
    assert_eq!(fs::read_dir(&parent).unwrap().count(), 0);
}

#[test]
fn a_dead_reservation_is_swept() {
    let t = tempfile::tempdir().unwrap();
    let parent = t.path().join("x");
    fs::create_dir_all(&parent).unwrap();
    // What a runner killed mid-run leaves: the lock file, unheld.
    fs::write(parent.join("exec-1.abc.lock"), b"").unwrap();
    assert_eq!(
        skill_runner::package::store::sweep_locked_dirs(&parent).unwrap(),
        1
    );
    assert_eq!(fs::read_dir(&parent).unwrap().count(), 0);
}

#[test]
fn kept_private_folders_survive_sweeps() {
    let t = tempfile::tempdir().unwrap();
    let parent = t.path().join("x");
    // Names with dots, as execution folders have (`<id>.<random>`).
    let mut kept =
        skill_runner::package::store::PrivateDir::create_named(&parent, "exec-1.").unwrap();
    kept.keep = true;
    let path = kept.path.clone();
    drop(kept);
    skill_runner::package::store::sweep_locked_dirs(&parent).unwrap();
    assert!(path.exists(), "a kept folder was swept");
}
