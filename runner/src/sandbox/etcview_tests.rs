//! Unit tests of `etcview.rs` (included from there as its `tests` module).

use super::*;

struct Host {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    views: PathBuf,
}

fn host() -> Host {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("host");
    fs::create_dir_all(root.join("certs/sub")).unwrap();
    fs::write(root.join("cache"), b"loader cache").unwrap();
    fs::write(root.join("certs/bundle.crt"), b"CERTS 1").unwrap();
    fs::write(root.join("certs/sub/deep.pem"), b"deep").unwrap();
    std::os::unix::fs::symlink("/usr/share/x.pem", root.join("certs/abcd.0")).unwrap();
    let views = tmp.path().join("views");
    Host {
        _tmp: tmp,
        root,
        views,
    }
}

fn pieces_of(h: &Host) -> Vec<Piece> {
    vec![
        Piece {
            src: h.root.join("cache"),
            dest: "/etc/ld.so.cache".into(),
        },
        Piece {
            src: h.root.join("certs"),
            dest: "/etc/ssl/certs".into(),
        },
    ]
}

const EXTRA: &[Extra<'static>] = &[("passwd", b"sandbox:x:1000\n"), ("group", b"g\n")];

/// A copy of `pieces` with no settling time.
fn try_prep(h: &Host, pieces: &[Piece]) -> io::Result<PathBuf> {
    prepare_with(&h.views, pieces, EXTRA, Duration::ZERO)
}

fn prep(h: &Host) -> PathBuf {
    try_prep(h, &pieces_of(h)).unwrap()
}

/// The copy `explain` names.
fn explained(h: &Host) -> PathBuf {
    h.views
        .join(expected(&h.views, &pieces_of(h), EXTRA).unwrap())
}

#[test]
fn the_copy_holds_the_same_bytes_links_and_account_files_read_only() {
    let h = host();
    let etc = prep(&h);
    assert_eq!(fs::read(etc.join("ld.so.cache")).unwrap(), b"loader cache");
    assert_eq!(
        fs::read(etc.join("ssl/certs/bundle.crt")).unwrap(),
        b"CERTS 1"
    );
    assert_eq!(
        fs::read(etc.join("ssl/certs/sub/deep.pem")).unwrap(),
        b"deep"
    );
    assert_eq!(
        fs::read_link(etc.join("ssl/certs/abcd.0")).unwrap(),
        Path::new("/usr/share/x.pem")
    );
    assert_eq!(fs::read(etc.join("passwd")).unwrap(), b"sandbox:x:1000\n");
    assert_eq!(fs::read(etc.join("group")).unwrap(), b"g\n");
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&etc), 0o555);
    assert_eq!(mode(&etc.join("ssl/certs/sub")), 0o555);
    assert_eq!(mode(&etc.join("ld.so.cache")), 0o444);
    assert_eq!(mode(&etc.join("passwd")), 0o444);
    // Nothing else: the listing is exactly the pieces and the files.
    let mut names: Vec<_> = fs::read_dir(&etc)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["group", "ld.so.cache", "passwd", "ssl"]);
    // What explain names is what was made.
    assert_eq!(explained(&h), etc);
}

#[test]
fn an_unchanged_host_reuses_the_copy_and_a_change_makes_a_new_one() {
    let h = host();
    let first = prep(&h);
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    let first_ino = ino(&first);
    assert_eq!(prep(&h), first);
    assert_eq!(ino(&prep(&h)), first_ino, "reused, not rebuilt");

    // A file rewritten in place, deep in a folder.
    fs::write(h.root.join("certs/sub/deep.pem"), b"changed").unwrap();
    let second = prep(&h);
    assert_ne!(second, first);
    assert_eq!(
        fs::read(second.join("ssl/certs/sub/deep.pem")).unwrap(),
        b"changed"
    );
    // The old generation is left for a sandbox that may have it bound.
    assert_eq!(
        fs::read(first.join("ssl/certs/sub/deep.pem")).unwrap(),
        b"deep"
    );

    // An entry added, one replaced by a link, one removed.
    fs::write(h.root.join("certs/new.crt"), b"new").unwrap();
    let third = prep(&h);
    assert_eq!(fs::read(third.join("ssl/certs/new.crt")).unwrap(), b"new");
    fs::remove_file(h.root.join("certs/bundle.crt")).unwrap();
    std::os::unix::fs::symlink("elsewhere", h.root.join("certs/bundle.crt")).unwrap();
    let fourth = prep(&h);
    assert_eq!(
        fs::read_link(fourth.join("ssl/certs/bundle.crt")).unwrap(),
        Path::new("elsewhere")
    );
    fs::remove_file(h.root.join("certs/new.crt")).unwrap();
    let fifth = prep(&h);
    assert!(!fifth.join("ssl/certs/new.crt").exists());
    // A single file piece replaced by rename.
    fs::write(h.root.join("cache.new"), b"new cache").unwrap();
    fs::rename(h.root.join("cache.new"), h.root.join("cache")).unwrap();
    assert_eq!(
        fs::read(prep(&h).join("ld.so.cache")).unwrap(),
        b"new cache"
    );
}

#[test]
fn a_generation_is_named_by_its_bytes_too() {
    // Same stamps, other bytes (a write through a shared mapping moves
    // no time): another generation, never the older copy.
    assert_ne!(generation("m", "bytes one"), generation("m", "bytes two"));
    let h = host();
    let etc = prep(&h);
    let gen = etc.parent().unwrap().file_name().unwrap();
    let content = copy_or_hash(&pieces_of(&h), EXTRA, None).unwrap();
    let manifest = scan(&pieces_of(&h)).unwrap();
    assert_eq!(gen.to_str().unwrap(), generation(&manifest.text, &content));
    let other = copy_or_hash(&pieces_of(&h), &[("passwd", b"x")], None).unwrap();
    assert_ne!(content, other);
}

#[test]
fn a_closed_folder_above_a_recorded_copy_makes_it_not_current() {
    let h = host();
    let etc = prep(&h);
    let keydir = etc.parent().unwrap().parent().unwrap().to_owned();
    assert_eq!(current(&keydir).unwrap(), Some(etc.clone()));
    // The folders above are recorded: closing one is a change, and the
    // next look refuses the copy (the pieces are then bound).
    crate::fsx::chmod(&h.root, 0o700).unwrap();
    assert_eq!(current(&keydir).unwrap(), None);
    assert!(try_prep(&h, &pieces_of(&h)).is_err());
    // explain names what an execution would use: the current copy.
    crate::fsx::chmod(&h.root, 0o755).unwrap();
    let etc = prep(&h);
    assert_eq!(explained(&h), etc);
}

#[test]
fn a_copy_of_just_changed_files_is_not_recorded_as_current() {
    let h = host();
    // Sources changed just now: with the real settling time, the copy is
    // used but `current` is not written, so the next execution looks
    // again instead of trusting times that may not have moved.
    let etc = prepare(&h.views, &pieces_of(&h), EXTRA).unwrap();
    assert!(etc.join("ld.so.cache").is_file());
    let keydir = etc.parent().unwrap().parent().unwrap();
    assert!(!keydir.join("current").exists());
    // Settled (a zero settling time): recorded.
    prep(&h);
    assert!(keydir.join("current").is_file());
}

#[test]
fn a_forged_current_or_manifest_is_not_trusted() {
    let h = host();
    let etc = prep(&h);
    let keydir = etc.parent().unwrap().parent().unwrap().to_owned();
    // A current that is no generation name is not followed, even to a
    // folder whose (empty) manifest would match anything.
    fs::create_dir_all(h.views.join("elsewhere/etc")).unwrap();
    fs::write(h.views.join("elsewhere/manifest"), "").unwrap();
    fs::write(keydir.join("current"), "../elsewhere").unwrap();
    assert_eq!(current(&keydir).unwrap(), None);
    assert_eq!(prep(&h), etc);
    // A manifest whose stamps do not match the host means a rebuild
    // (which lands on the same generation name when nothing changed).
    let gen = etc.parent().unwrap();
    crate::fsx::chmod(gen, 0o755).unwrap();
    crate::fsx::chmod(&gen.join("manifest"), 0o644).unwrap();
    fs::write(gen.join("manifest"), "d 1 2 3 4.0 5.0\t/nonexistent\n").unwrap();
    assert!(current(&keydir).unwrap().is_none());
}

#[test]
fn what_a_copy_cannot_hold_is_refused() {
    let h = host();
    nix::unistd::mkfifo(&h.root.join("certs/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let e = try_prep(&h, &pieces_of(&h)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    fs::remove_file(h.root.join("certs/fifo")).unwrap();
    // A piece that is itself a symlink: bwrap would follow it; a copy
    // could not say when its target changes.
    let link = Piece {
        src: h.root.join("link"),
        dest: "/etc/link".into(),
    };
    std::os::unix::fs::symlink(h.root.join("cache"), &link.src).unwrap();
    let e = try_prep(&h, &[link]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    // A file or folder closed to others (a bind keeps it closed to the
    // sandbox user, a copy readable by it would not); a folder someone
    // else could change, inside a piece or on the way to it (an entry
    // could be swapped for a symlink between the look and the copy).
    let (deep, sub) = (h.root.join("certs/sub/deep.pem"), h.root.join("certs/sub"));
    let (closed, changeable) = ("not readable by everyone", "someone else may change");
    for (path, mode, back, why) in [
        (deep.clone(), 0o600, 0o644, closed),
        (deep, 0o604, 0o644, closed),
        (sub.clone(), 0o750, 0o755, closed),
        (sub, 0o777, 0o755, changeable),
        (h.root.clone(), 0o775, 0o755, changeable),
    ] {
        crate::fsx::chmod(&path, mode).unwrap();
        let e = try_prep(&h, &pieces_of(&h)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains(why), "{e}");
        crate::fsx::chmod(&path, back).unwrap();
    }
    // An ACL denying one user what the mode bits allow everyone: the
    // sandbox user could be that user.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX), // owner rw
        (0x02, 0, 65533),          // user 65533: nothing
        (0x04, 4, u32::MAX),       // group r
        (0x10, 4, u32::MAX),       // mask r
        (0x20, 4, u32::MAX),       // others r
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    let file = h.root.join("certs/bundle.crt");
    crate::supervise::sys::set_xattr(&file, c"system.posix_acl_access", &acl)
        .expect("this file system takes ACLs");
    let e = try_prep(&h, &pieces_of(&h)).unwrap_err();
    assert!(e.to_string().contains("not readable by everyone"), "{e}");
    fs::remove_file(&file).unwrap();
    fs::write(&file, b"CERTS 1").unwrap();
    // Pieces where one lies below another: binds would hide the first,
    // a copy would merge them (and could write through its links).
    for dest in ["/etc/ssl/certs/x", "/etc/ssl/certs", "/etc/ssl"] {
        let mut overlapping = pieces_of(&h);
        overlapping.push(Piece {
            src: h.root.join("cache"),
            dest: dest.into(),
        });
        let e = try_prep(&h, &overlapping).unwrap_err();
        assert!(e.to_string().contains("where another piece is too"), "{e}");
    }
    // A folder above a piece that not everyone may pass: a bind would
    // fail for the sandbox user; a copy must not make it readable.
    crate::fsx::chmod(&h.root, 0o711).unwrap();
    assert!(try_prep(&h, &pieces_of(&h)).is_ok());
    crate::fsx::chmod(&h.root, 0o700).unwrap();
    let e = try_prep(&h, &pieces_of(&h)).unwrap_err();
    assert!(e.to_string().contains("not everyone may pass"), "{e}");
    crate::fsx::chmod(&h.root, 0o755).unwrap();
    // A file system whose files may read differently to root.
    let proc = Piece {
        src: "/proc/version".into(),
        dest: "/etc/status".into(),
    };
    let e = try_prep(&h, &[proc]).unwrap_err();
    assert!(e.to_string().contains("not copied"), "{e}");
    // A tree beyond what a copy holds.
    let big = Piece {
        src: h.root.join("big"),
        dest: "/etc/big".into(),
    };
    fs::create_dir(&big.src).unwrap();
    fs::File::create(big.src.join("f"))
        .unwrap()
        .set_len(MAX_BYTES + 1)
        .unwrap();
    let e = try_prep(&h, &[big]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    assert!(try_prep(&h, &pieces_of(&h)).is_ok());
    // Nothing half-made is left behind.
    let left = fs::read_dir(h.views.join(".staging")).map_or(0, |d| d.count());
    assert_eq!(left, 0);
}

#[test]
fn only_a_profile_whose_etc_is_read_only_binds_is_folded() {
    let bind = |s: &str, d: &str| Mount::RoBindTry {
        src: s.into(),
        dest: d.into(),
    };
    let usr = Mount::RoBind {
        src: "/usr".into(),
        dest: "/usr".into(),
    };
    assert_eq!(pieces(std::slice::from_ref(&usr)), None);
    let got = pieces(&[usr.clone(), bind("/etc/ssl/certs", "/etc/ssl/certs")]).unwrap();
    assert_eq!(got.len(), 1);
    assert!(!folded(&usr) && folded(&bind("/x", "/etc/x")));
    let link = Mount::Symlink {
        target: "x".into(),
        dest: "/etc/y".into(),
    };
    assert_eq!(pieces(&[bind("/etc/a", "/etc/a"), link]), None);
    assert_eq!(pieces(&[bind("/etc", "/etc")]), None);
}
