//! Unit tests of `store.rs` (included from there as its `tests` module).

use std::os::unix::fs::symlink;

use super::*;

fn small_tree(dir: &Path) {
    fs::create_dir_all(dir.join("python/pkg")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("python/pkg/__init__.py"), "X = 1\n").unwrap();
    fs::write(dir.join("python/pkg/empty.txt"), "").unwrap();
    fs::write(dir.join("bin/tool"), "#!/bin/sh\necho hi\n").unwrap();
    fsx::chmod(&dir.join("bin/tool"), 0o755).unwrap();
    symlink("../python/pkg/__init__.py", dir.join("bin/init")).unwrap();
    symlink("/usr/bin/python3", dir.join("bin/python3")).unwrap();
}

/// Nothing but the lock files and empty folders may remain in `tmp/`.
fn assert_nothing_half_written(store: &EnvStore) {
    let tmp = store.root().join("tmp");
    let left: Vec<_> = fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in tmp: {left:?}");
    let trees: Vec<_> = fs::read_dir(store.root().join("trees")).unwrap().collect();
    assert!(trees.is_empty(), "a tree was published");
    let records: Vec<_> = fs::read_dir(store.root().join("records"))
        .unwrap()
        .collect();
    assert!(records.is_empty(), "a record was written");
}

#[test]
fn add_publishes_a_sealed_tree_once_per_hash() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    let store =
        EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
    let a = store
        .add(&src, "tools", vec![], vec![], &EnvLimits::default())
        .unwrap();
    assert!(a.new_tree);
    assert_eq!((a.record.files, a.record.symlinks), (3, 2));
    let b = store
        .add(&src, "other", vec![], vec![], &EnvLimits::default())
        .unwrap();
    assert!(!b.new_tree);
    assert_eq!(a.record.hash, b.record.hash);
    let again = store
        .add(&src, "tools", vec![], vec![], &EnvLimits::default())
        .unwrap();
    assert_eq!(again.record, a.record, "the first record stays");

    let tree = store.tree_path(&a.record.hash);
    let mode = |p: &str| fs::symlink_metadata(tree.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("bin/tool"), 0o555);
    assert_eq!(mode("python/pkg/__init__.py"), 0o444);
    assert_eq!(mode("python/pkg"), 0o555);
    assert_eq!(mode(""), 0o555);
    assert_eq!(
        fs::read_link(tree.join("bin/python3")).unwrap(),
        Path::new("/usr/bin/python3")
    );
    store.verify(&a.record.hash).unwrap();
    assert!(store.stamp_matches(&a.record.hash).unwrap());
    assert_eq!(store.list().unwrap().len(), 2);
    assert_eq!(store.show("tools").unwrap(), vec![a.record.clone()]);
}

#[test]
fn verify_names_what_changed_and_the_stamp_notices() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    let store =
        EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
    let hash = store
        .add(&src, "tools", vec![], vec![], &EnvLimits::default())
        .unwrap()
        .record
        .hash;
    let file = store.tree_path(&hash).join("python/pkg/__init__.py");
    fsx::chmod(&file, 0o644).unwrap();
    fs::write(&file, "X = 2\n").unwrap();
    fsx::chmod(&file, 0o444).unwrap();
    assert!(!store.stamp_matches(&hash).unwrap());
    let err = store.verify(&hash).unwrap_err().to_string();
    assert!(
        err.contains("the bytes of \"python/pkg/__init__.py\" changed"),
        "{err}"
    );

    fsx::chmod(&file, 0o644).unwrap();
    let err = store.verify(&hash).unwrap_err().to_string();
    assert!(err.contains("not the sealed 444"), "{err}");
}

#[test]
fn bad_trees_are_refused_and_leave_nothing() {
    type Make<'a> = &'a dyn Fn(&Path);
    let cases: &[(&str, Make, &str)] = &[
        (
            "escaping symlink",
            &|d| symlink("../../etc/passwd", d.join("python/link")).unwrap(),
            "a target that leaves the tree",
        ),
        (
            "symlink to /etc",
            &|d| symlink("/etc/shadow", d.join("link")).unwrap(),
            "outside the read-only system",
        ),
        (
            "fifo",
            &|d| nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap(),
            "is a FIFO",
        ),
        (
            "socket",
            &|d| {
                std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
            },
            "is a socket",
        ),
        (
            "hard link to a file outside the tree",
            &|d| {
                let outside = d.parent().unwrap().join("secret");
                fs::write(&outside, "secret\n").unwrap();
                fs::hard_link(&outside, d.join("python/secret")).unwrap();
            },
            "has 2 hard links",
        ),
        (
            "two names for one file inside the tree",
            &|d| {
                fs::hard_link(d.join("python/pkg/__init__.py"), d.join("python/again.py")).unwrap()
            },
            "has 2 hard links",
        ),
        (
            "backslash name",
            &|d| fs::write(d.join("a\\b"), "").unwrap(),
            "backslash",
        ),
    ];
    for (name, make, want) in cases {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        small_tree(&src);
        make(&src);
        let store =
            EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
        let err = store
            .add(&src, "tools", vec![], vec![], &EnvLimits::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{name}: {err}");
        assert_nothing_half_written(&store);
    }
}

#[test]
fn limits_are_refused_before_anything_is_written() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    let store =
        EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
    for (limits, want) in [
        (
            EnvLimits {
                max_entries: 4,
                ..EnvLimits::default()
            },
            "more than 4 entries",
        ),
        (
            EnvLimits {
                max_bytes: 20,
                ..EnvLimits::default()
            },
            "more than 20 bytes",
        ),
        (
            EnvLimits {
                max_file_bytes: 10,
                ..EnvLimits::default()
            },
            "over the limit of 10 for one file",
        ),
    ] {
        let err = store
            .add(&src, "tools", vec![], vec![], &limits)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
        assert_nothing_half_written(&store);
    }
    let empty = t.path().join("empty");
    fs::create_dir_all(empty.join("a/b")).unwrap();
    let err = store
        .add(&empty, "tools", vec![], vec![], &EnvLimits::default())
        .unwrap_err();
    assert!(matches!(err, EnvError::Empty { .. }), "{err}");
    assert!(matches!(
        store.add(&src, "Bad_Id", vec![], vec![], &EnvLimits::default()),
        Err(EnvError::BadId { .. })
    ));
    assert_nothing_half_written(&store);
}

#[test]
fn gc_removes_unreferenced_trees_but_never_a_leased_one() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    let store =
        EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
    let rec = store
        .add(&src, "tools", vec![], vec![], &EnvLimits::default())
        .unwrap()
        .record;
    assert_eq!(store.gc().unwrap(), GcReport::default(), "referenced");
    store.remove(&rec.env_ref()).unwrap();
    let lease = store.lease(&rec.hash).unwrap();
    assert_eq!(
        store.gc().unwrap(),
        GcReport {
            removed: vec![],
            in_use: vec![rec.hash.clone()]
        }
    );
    assert!(lease.tree.join("bin/tool").exists());
    drop(lease);
    assert_eq!(store.gc().unwrap().removed, vec![rec.hash.clone()]);
    assert!(!store.tree_path(&rec.hash).exists());
    assert!(matches!(
        store.lease(&rec.hash),
        Err(EnvError::NotFound { .. })
    ));
    store.gc().unwrap();
    let leases = fs::read_dir(store.root().join("leases")).unwrap().count();
    assert_eq!(leases, 0, "lease files of missing trees are swept");
    assert!(matches!(
        store.verify(&rec.hash),
        Err(EnvError::NotFound { .. })
    ));
}

/// A file swapped for a symlink between the listing and the copy is
/// not followed: the copy opens every component with `O_NOFOLLOW`.
#[test]
fn a_file_swapped_for_a_symlink_after_listing_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    let secret = t.path().join("secret");
    fs::write(&secret, "X = 1\n").unwrap(); // the same size as the listed file
    let entries = list_tree(&src, &EnvLimits::default()).unwrap();
    let victim = src.join("python/pkg/__init__.py");
    fs::remove_file(&victim).unwrap();
    symlink(&secret, &victim).unwrap();
    let dest = t.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let err = copy_hashing(&src, &entries, &dest).unwrap_err();
    assert!(matches!(err, EnvError::ReadSource { .. }), "{err}");
    // A folder swapped for a symlink on the way is not followed either.
    let pkg = src.join("python/pkg");
    fsx::remove_tree(&pkg).unwrap();
    fs::create_dir_all(t.path().join("elsewhere")).unwrap();
    fs::write(t.path().join("elsewhere/__init__.py"), "X = 1\n").unwrap();
    symlink(t.path().join("elsewhere"), &pkg).unwrap();
    let dest = t.path().join("dest2");
    fs::create_dir(&dest).unwrap();
    let err = copy_hashing(&src, &entries, &dest).unwrap_err();
    assert!(matches!(err, EnvError::ReadSource { .. }), "{err}");
}

/// Two publishes of the same tree at once both succeed and leave one copy.
#[test]
fn concurrent_publishes_of_one_tree_leave_one_copy() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    let store =
        EnvStore::open(&crate::datadir::DataDir::unchecked(&t.path().join("data"))).unwrap();
    let records: Vec<Record> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (store, src) = (&store, &src);
                s.spawn(move || {
                    store
                        .add(
                            src,
                            &format!("id{}", i % 2),
                            vec![],
                            vec![],
                            &EnvLimits::default(),
                        )
                        .unwrap()
                        .record
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(records.iter().all(|r| r.hash == records[0].hash));
    assert_eq!(fs::read_dir(store.root().join("trees")).unwrap().count(), 1);
    assert_eq!(store.list().unwrap().len(), 2);
    assert!(fs::read_dir(store.root().join("tmp"))
        .unwrap()
        .next()
        .is_none());
    store.verify(&records[0].hash).unwrap();
}
