//! Published snapshot roots on a real file system: a selection is staged
//! and verified once, then shared read-only; nothing unverified is ever
//! published; a root in use is never evicted.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use skill_runner::datadir::DataDir;
use skill_runner::package::format::PackageLimits;
use skill_runner::package::hash::{self, Binding};
use skill_runner::package::published::Roots;
use skill_runner::package::stage::{Selected, SkillSource, StageError, MANIFEST_NAME};

fn skill(dir: &Path, body: &str) -> PathBuf {
    fs::create_dir_all(dir.join("scripts")).unwrap();
    fs::write(
        dir.join("SKILL.md"),
        "---\nname: demo\ndescription: A demo skill.\n---\n# Demo\n",
    )
    .unwrap();
    fs::write(dir.join("scripts/run.sh"), body).unwrap();
    dir.to_owned()
}

fn selected(id: &str, src: &Path, hash: &str) -> Vec<Selected> {
    vec![Selected {
        binding: Binding {
            id: id.into(),
            revision: 1,
            version: "1.0.0".into(),
            hash: hash.into(),
        },
        source: SkillSource::Dir(src.to_owned()),
    }]
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_selection_is_staged_once_then_shared_sealed() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = skill(&t.path().join("demo"), "echo hi\n");
    let h = skill_runner::package::verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let sel = selected("demo", &src, &h);

    let first = roots.acquire(&sel, &PackageLimits::default()).unwrap();
    assert!(first.staged);
    let second = roots.acquire(&sel, &PackageLimits::default()).unwrap();
    assert!(!second.staged, "the second execution must reuse the root");
    assert_eq!(first.snapshot.root, second.snapshot.root);
    assert_eq!(first.snapshot.identity, second.snapshot.identity);
    assert_eq!(first.snapshot.bytes, second.snapshot.bytes);
    assert_eq!(first.snapshot.manifest, second.snapshot.manifest);

    // Exactly the package and the manifest, sealed; the published folder
    // is named by the set identity.
    let root = &first.snapshot.root;
    assert_eq!(
        root.parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap(),
        hash::set_identity(&[sel[0].binding.clone()])
    );
    assert_eq!(names(root), [MANIFEST_NAME, "demo"]);
    assert_eq!(names(&root.join("demo")), ["SKILL.md", "scripts"]);
    for (p, m) in [
        (root.clone(), 0o555),
        (root.parent().unwrap().to_owned(), 0o555),
        (root.join(MANIFEST_NAME), 0o444),
        (root.join("demo/scripts"), 0o555),
        (root.join("demo/scripts/run.sh"), 0o444),
    ] {
        assert_eq!(mode(&p), m, "{}", p.display());
    }
    // Nothing is left in the private staging area.
    assert!(names(&roots.dir().join(".staging")).is_empty());
}

#[test]
fn a_published_root_keeps_the_pinned_bytes_when_the_source_changes() {
    // The pin names the bytes; the folder is only where to find them the
    // first time. An edit after publication is never observed.
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = skill(&t.path().join("demo"), "echo original\n");
    let h = skill_runner::package::verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let sel = selected("demo", &src, &h);
    drop(roots.acquire(&sel, &PackageLimits::default()).unwrap());
    fs::write(src.join("scripts/run.sh"), "echo edited\n").unwrap();
    let lease = roots.acquire(&sel, &PackageLimits::default()).unwrap();
    assert!(!lease.staged);
    assert_eq!(
        fs::read_to_string(lease.snapshot.root.join("demo/scripts/run.sh")).unwrap(),
        "echo original\n"
    );
}

#[test]
fn a_lying_hash_is_never_published() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = skill(&t.path().join("demo"), "echo hi\n");
    let sel = selected("demo", &src, &"ab".repeat(32));
    let e = roots.acquire(&sel, &PackageLimits::default()).unwrap_err();
    assert!(matches!(e, StageError::HashMismatch { .. }), "{e}");
    assert_eq!(names(roots.dir()), [".staging"]);
    assert!(names(&roots.dir().join(".staging")).is_empty());
    // Still refused the second time: nothing was remembered.
    assert!(roots.acquire(&sel, &PackageLimits::default()).is_err());
}

#[test]
fn concurrent_first_executions_publish_one_root() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = skill(&t.path().join("demo"), &"x".repeat(1 << 20));
    let h = skill_runner::package::verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let sel = selected("demo", &src, &h);
    let leases: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| roots.acquire(&sel, &PackageLimits::default()).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = &leases[0].snapshot.root;
    assert!(leases.iter().all(|l| &l.snapshot.root == first));
    assert!(leases.iter().any(|l| l.staged));
    assert_eq!(names(roots.dir()).len(), 2, "{:?}", names(roots.dir()));
    assert!(names(&roots.dir().join(".staging")).is_empty());
}

#[test]
fn eviction_keeps_roots_in_use_and_removes_idle_ones() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let a = skill(&t.path().join("a"), "echo a\n");
    let b = skill(&t.path().join("b"), "echo b\n");
    let ha = skill_runner::package::verify::hash_dir(&a, &PackageLimits::default()).unwrap();
    let hb = skill_runner::package::verify::hash_dir(&b, &PackageLimits::default()).unwrap();
    let in_use = roots
        .acquire(&selected("a", &a, &ha), &PackageLimits::default())
        .unwrap();
    let idle = roots
        .acquire(&selected("b", &b, &hb), &PackageLimits::default())
        .unwrap();
    let idle_root = idle.snapshot.root.clone();
    drop(idle);

    assert_eq!(roots.sweep(0), 1);
    assert!(in_use.snapshot.root.join("a/SKILL.md").exists());
    assert!(!idle_root.exists());
    // Once released, it goes too; the next execution stages it again.
    drop(in_use);
    assert_eq!(roots.sweep(0), 1);
    assert_eq!(names(roots.dir()), [".staging"]);
    let again = roots
        .acquire(&selected("a", &a, &ha), &PackageLimits::default())
        .unwrap();
    assert!(again.staged);
}

#[test]
fn interrupted_stagings_are_swept() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let staging = roots.dir().join(".staging");
    // A crashed staging: its lock file is no longer held.
    fs::create_dir_all(staging.join("dead/skills/x")).unwrap();
    fs::write(staging.join("dead.lock"), "").unwrap();
    // An eviction interrupted between its rename and its delete.
    fs::create_dir_all(staging.join("evicted/skills")).unwrap();
    assert_eq!(roots.sweep(100), 2);
    assert!(names(&staging).is_empty());
}

/// Eviction considers only names the runner makes, in its own
/// folder; job folders, foreign names and a FIFO record are left alone.
#[test]
fn eviction_considers_only_the_runners_own_roots() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    assert_eq!(roots.dir(), t.path().join("published"));
    // The daemon's job root holds workspaces, even with root-like names.
    let jobs = t.path().join("roots");
    for i in 0..140 {
        fs::create_dir_all(jobs.join(format!("{i:064x}"))).unwrap();
    }
    fs::write(jobs.join(format!("{:064x}", 7)).join("result"), "keep").unwrap();
    // Foreign names inside the published folder are not roots.
    fs::create_dir_all(roots.dir().join("not-an-identity/skills")).unwrap();
    fs::create_dir_all(roots.dir().join("ABCDEF".repeat(10) + "ABCD")).unwrap();
    assert_eq!(roots.sweep(0), 0);
    assert_eq!(fs::read_dir(&jobs).unwrap().count(), 140);
    assert!(jobs.join(format!("{:064x}", 7)).join("result").exists());
    assert!(roots.dir().join("not-an-identity/skills").exists());
}

/// A record that is a FIFO (or a symlink) is never opened (opening a FIFO
/// record blocked the execution): the root fails its check and is staged
/// afresh, with a regular record again.
#[test]
fn a_fifo_or_symlink_record_is_never_opened_and_the_root_is_rebuilt() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = skill(&t.path().join("demo"), "echo hi\n");
    let h = skill_runner::package::verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let sel = selected("demo", &src, &h);
    let identity = roots
        .acquire(&sel, &PackageLimits::default())
        .unwrap()
        .snapshot
        .identity;
    let root = roots.dir().join(&identity);
    for bad in ["fifo", "symlink"] {
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_file(root.join("meta.json")).unwrap();
        match bad {
            "fifo" => nix::unistd::mkfifo(
                &root.join("meta.json"),
                nix::sys::stat::Mode::from_bits_truncate(0o644),
            )
            .unwrap(),
            _ => std::os::unix::fs::symlink("/etc/passwd", root.join("meta.json")).unwrap(),
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (roots2, sel2) = (roots.clone(), sel.clone());
        std::thread::spawn(move || {
            let _ = tx.send(roots2.acquire(&sel2, &PackageLimits::default()).map(|_| ()));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("a {bad} record blocked the lookup"));
        got.unwrap_or_else(|e| panic!("a {bad} record: {e}"));
        let record = fs::symlink_metadata(root.join("meta.json")).unwrap();
        assert!(record.is_file(), "a {bad} record was kept");
    }
}

/// A root is checked before every use: one published by an older runner
/// (no `stamp`) or changed since (a file replaced by one of the same size)
/// is staged afresh, and an unchanged one is reused as it is.
#[test]
fn a_root_without_its_stamps_or_changed_since_is_staged_afresh() {
    let t = tempfile::tempdir().unwrap();
    let roots = Roots::open(&DataDir::open(t.path(), None).unwrap()).unwrap();
    let src = skill(&t.path().join("demo"), "echo hi\n");
    let h = skill_runner::package::verify::hash_dir(&src, &PackageLimits::default()).unwrap();
    let sel = selected("demo", &src, &h);
    let limits = PackageLimits::default();
    let first = roots.acquire(&sel, &limits).unwrap();
    assert!(first.staged);
    let root = roots.dir().join(&first.snapshot.identity);
    drop(first);
    assert!(
        !roots.acquire(&sel, &limits).unwrap().staged,
        "an unchanged root was staged again"
    );

    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_file(root.join("stamp")).unwrap();
    assert!(
        roots.acquire(&sel, &limits).unwrap().staged,
        "a root without stamps was reused"
    );
    assert!(root.join("stamp").is_file());

    // Replaced by a file of the same size and mode (a new inode, so the
    // change shows whatever the clock's resolution: an in-place write
    // within one tick of publishing would not, see docs/packages.md).
    let md = root.join("skills/demo/SKILL.md");
    let mut bytes = fs::read(&md).unwrap();
    bytes[0] ^= 0x20;
    let dir = root.join("skills/demo");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("new"), &bytes).unwrap();
    fs::set_permissions(dir.join("new"), fs::Permissions::from_mode(0o444)).unwrap();
    fs::rename(dir.join("new"), &md).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    let lease = roots.acquire(&sel, &limits).unwrap();
    assert!(lease.staged, "a changed root was reused");
    assert_ne!(
        fs::read(&md).unwrap(),
        bytes,
        "the flipped byte is still there"
    );
}
