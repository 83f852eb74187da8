//! Each refusal of the beneath primitives, tried on a real folder.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use super::*;

fn root() -> (tempfile::TempDir, File) {
    let t = tempfile::tempdir().unwrap();
    let f = File::open(t.path()).unwrap();
    (t, f)
}

#[test]
fn inadmissible_paths_are_refused_before_any_call() {
    for bad in [
        "",
        "/etc/passwd",
        "a/../b",
        "..",
        "a/./b",
        ".",
        "a//b",
        "a/",
        "a\0b",
    ] {
        let e = check(bad).unwrap_err();
        assert!(matches!(e, BeneathError::Path { .. }), "{bad:?}: {e}");
    }
    assert_eq!(check("a/..b/c..").unwrap(), vec!["a", "..b", "c.."]);
    let (t, r) = root();
    for bad in ["../x", "/tmp/x", "x\0"] {
        assert!(write_atomic(&r, bad, b"x", &Create::default()).is_err());
        assert!(open_regular(&r, bad).is_err());
    }
    assert_eq!(fs::read_dir(t.path()).unwrap().count(), 0);
}

#[test]
fn a_write_creates_parents_sets_the_mode_and_leaves_no_temporary_file() {
    let (t, r) = root();
    let create = Create {
        mode: 0o640,
        dir_mode: 0o750,
        owner: None,
        durable: true,
    };
    write_atomic(&r, "in/deep/data.csv", b"a,b\n", &create).unwrap();
    let f = t.path().join("in/deep/data.csv");
    assert_eq!(fs::read(&f).unwrap(), b"a,b\n");
    assert_eq!(
        fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    let d = fs::metadata(t.path().join("in/deep")).unwrap();
    assert_eq!(d.permissions().mode() & 0o7777, 0o750);
    write_atomic(&r, "in/deep/data.csv", b"new", &create).unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"new");
    let names: Vec<_> = fs::read_dir(t.path().join("in/deep")).unwrap().collect();
    assert_eq!(names.len(), 1, "a temporary file was left: {names:?}");
}

#[test]
fn a_write_through_a_planted_symlink_folder_is_refused() {
    let (t, r) = root();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), t.path().join("in")).unwrap();
    let e = write_atomic(&r, "in/x", b"x", &Create::default()).unwrap_err();
    assert!(matches!(e, BeneathError::Symlink { .. }), "{e}");
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_write_over_a_symlink_replaces_the_link_not_its_target() {
    let (t, r) = root();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    symlink(&victim, t.path().join("f")).unwrap();
    write_atomic(&r, "f", b"mine", &Create::default()).unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    assert!(fs::symlink_metadata(t.path().join("f")).unwrap().is_file());
}

#[test]
fn a_write_over_a_folder_is_refused_and_leaves_nothing() {
    let (t, r) = root();
    fs::create_dir(t.path().join("d")).unwrap();
    fs::write(t.path().join("d/keep"), "k").unwrap();
    let e = write_atomic(&r, "d", b"x", &Create::default()).unwrap_err();
    assert!(matches!(e, BeneathError::NotRegular { .. }), "{e}");
    let names: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("d")]);
}

#[test]
fn a_write_with_a_file_on_the_way_is_refused() {
    let (t, r) = root();
    fs::write(t.path().join("a"), "file").unwrap();
    let e = write_atomic(&r, "a/b", b"x", &Create::default()).unwrap_err();
    assert!(matches!(e, BeneathError::NotFolder { .. }), "{e}");
}

#[test]
fn an_oversized_stream_writes_nothing() {
    let (t, r) = root();
    let mut src: &[u8] = b"0123456789";
    let got = write_atomic_from(&r, "f", &mut src, 4, &Create::default()).unwrap();
    assert_eq!(got, None);
    assert_eq!(fs::read_dir(t.path()).unwrap().count(), 0);
    let mut src: &[u8] = b"0123";
    let got = write_atomic_from(&r, "f", &mut src, 4, &Create::default()).unwrap();
    assert_eq!(got, Some(4));
}

#[test]
fn reading_refuses_symlinks_at_the_end_and_on_the_way() {
    let (t, r) = root();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "s").unwrap();
    symlink(outside.path().join("secret"), t.path().join("link")).unwrap();
    symlink(outside.path(), t.path().join("dir")).unwrap();
    let e = open_regular(&r, "link").unwrap_err();
    assert!(matches!(e, BeneathError::Symlink { .. }), "{e}");
    let e = open_regular(&r, "dir/secret").unwrap_err();
    assert!(matches!(e, BeneathError::Symlink { .. }), "{e}");
    let e = open_regular(&r, "missing").unwrap_err();
    assert!(matches!(e, BeneathError::Missing { .. }), "{e}");
}

#[test]
fn reading_a_fifo_is_refused_without_blocking_and_a_folder_too() {
    let (t, r) = root();
    nix::unistd::mkfifo(&t.path().join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
    fs::create_dir(t.path().join("d")).unwrap();
    let e = open_regular(&r, "fifo").unwrap_err();
    assert!(
        matches!(e, BeneathError::NotRegular { kind: "FIFO", .. }),
        "{e}"
    );
    let e = open_regular(&r, "d").unwrap_err();
    assert!(
        matches!(e, BeneathError::NotRegular { kind: "folder", .. }),
        "{e}"
    );
}

#[test]
fn reading_a_device_is_refused() {
    // /dev/null is a character device any host has; reach it beneath /dev.
    let dev = File::open("/dev").unwrap();
    let e = open_regular(&dev, "null").unwrap_err();
    assert!(
        matches!(
            e,
            BeneathError::NotRegular {
                kind: "character device",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn reading_a_regular_file_reports_size_and_links() {
    let (t, r) = root();
    fs::create_dir(t.path().join("d")).unwrap();
    fs::write(t.path().join("d/f"), "hello").unwrap();
    fs::hard_link(t.path().join("d/f"), t.path().join("g")).unwrap();
    let mut reg = open_regular(&r, "d/f").unwrap();
    assert_eq!((reg.size, reg.nlink), (5, 2));
    let mut s = String::new();
    reg.file.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello");
}

#[test]
fn removing_refuses_folders_and_removes_a_symlink_as_a_name() {
    let (t, r) = root();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("keep"), "k").unwrap();
    symlink(outside.path().join("keep"), t.path().join("l")).unwrap();
    fs::create_dir(t.path().join("d")).unwrap();
    remove_file(&r, "l").unwrap();
    assert!(outside.path().join("keep").exists());
    assert!(matches!(
        remove_file(&r, "d"),
        Err(BeneathError::NotRegular { .. })
    ));
    assert!(matches!(
        remove_file(&r, "nope"),
        Err(BeneathError::Missing { .. })
    ));
}

#[test]
fn a_listing_does_not_follow_links_and_stops_at_its_bounds() {
    let (t, r) = root();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "s").unwrap();
    fs::create_dir_all(t.path().join("a/b/c")).unwrap();
    fs::write(t.path().join("a/f"), "12").unwrap();
    fs::write(t.path().join("a/b/c/deep"), "x").unwrap();
    symlink(outside.path(), t.path().join("a/out")).unwrap();
    nix::unistd::mkfifo(&t.path().join("p"), Mode::from_bits_truncate(0o644)).unwrap();
    let all = list(
        &r,
        "",
        Bounds {
            entries: 100,
            depth: 10,
        },
    )
    .unwrap();
    let got: Vec<_> = all
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.kind))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", Kind::Folder),
            ("a/b", Kind::Folder),
            ("a/b/c", Kind::Folder),
            ("a/b/c/deep", Kind::File),
            ("a/f", Kind::File),
            ("a/out", Kind::Symlink),
            ("p", Kind::Special),
        ]
    );
    assert!(!all.truncated);
    let few = list(
        &r,
        "",
        Bounds {
            entries: 3,
            depth: 10,
        },
    )
    .unwrap();
    assert_eq!(few.entries.len(), 3);
    assert!(few.truncated);
    let shallow = list(
        &r,
        "",
        Bounds {
            entries: 100,
            depth: 1,
        },
    )
    .unwrap();
    assert!(shallow.truncated);
    assert!(!shallow.entries.iter().any(|e| e.path == "a/b/c/deep"));
    let sub = list(
        &r,
        "a/b",
        Bounds {
            entries: 100,
            depth: 10,
        },
    )
    .unwrap();
    assert_eq!(sub.entries[0].path, "c");
    assert!(matches!(
        list(
            &r,
            "a/out",
            Bounds {
                entries: 1,
                depth: 1
            }
        ),
        Err(BeneathError::Symlink { .. })
    ));
}

/// A file swapped for a symlink to a host file again and again while it is
/// opened never yields the host file's bytes.
#[cfg(target_os = "linux")]
#[test]
fn a_file_swapped_for_a_symlink_is_never_read_through() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (t, r) = root();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "SECRET").unwrap();
    fs::write(t.path().join("f"), "mine").unwrap();
    symlink(outside.path().join("secret"), t.path().join("l")).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, dir) = (stop.clone(), t.path().to_owned());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &dir.join("f"),
                    nix::fcntl::AT_FDCWD,
                    &dir.join("l"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                );
            }
        })
    };
    let mut opened = 0;
    for _ in 0..2000 {
        if let Ok(mut reg) = open_regular(&r, "f") {
            let mut s = String::new();
            reg.file.read_to_string(&mut s).unwrap();
            assert_eq!(s, "mine");
            opened += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    assert!(fs::metadata(outside.path().join("secret")).unwrap().nlink() == 1);
    let _ = opened;
}
