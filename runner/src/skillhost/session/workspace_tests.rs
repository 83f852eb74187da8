use super::*;
use std::os::unix::fs::symlink;

fn ws() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ses-w");
    make(&path, None).unwrap();
    let ws = Workspace::open("ses-w", &path, None).unwrap();
    (dir, ws)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in walkdir(dir) {
        out.push(e.strip_prefix(dir).unwrap().display().to_string());
    }
    out.sort();
    out
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.clone());
        if e.file_type().unwrap().is_dir() {
            out.extend(walkdir(&p));
        }
    }
    out
}

#[test]
fn inadmissible_paths_are_refused_with_the_reason() {
    for (path, reason) in [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/./b", "'.'"),
        ("a//b", "empty segment"),
        ("a/", "empty segment"),
        ("a\0b", "NUL"),
        ("a\\b", "backslash"),
        ("a\nb", "control"),
    ] {
        let e = check_path(path).unwrap_err();
        assert!(e.to_string().contains(reason), "{path:?}: {e}");
        assert_eq!(e.kind(), ErrorKind::BadRequest);
    }
    assert!(check_path(&"a".repeat(MAX_PATH + 1)).is_err());
    assert!(check_path(&"a".repeat(256)).is_err());
    check_path("data/in.csv").unwrap();
    check_path(".hidden/..x/…").unwrap();
}

#[test]
fn an_upload_lands_whole_and_a_dropped_one_leaves_nothing() {
    let (dir, ws) = ws();
    let root = dir.path().join("ses-w");
    let mut up = ws.upload("in/deep/data.csv").unwrap();
    up.write(b"a,b\n").unwrap();
    // Not there until committed.
    assert!(!root.join("in/deep/data.csv").exists());
    assert_eq!(up.commit(|| Ok(())).unwrap(), 4);
    assert_eq!(
        std::fs::read(root.join("in/deep/data.csv")).unwrap(),
        b"a,b\n"
    );
    assert_eq!(entries(&root), ["in", "in/deep", "in/deep/data.csv"]);

    // Dropped (a broken or oversized body): no temp file, no new folder.
    let mut up = ws.upload("new/folder/x").unwrap();
    up.write(b"partial").unwrap();
    drop(up);
    // Refused at commit (the size bound): the same.
    let up = ws.upload("other/y").unwrap();
    let e = up
        .commit(|| {
            Err(WorkspaceError::Full {
                session: "ses-w".into(),
                would: 2,
                limit: 1,
            })
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BodyTooLarge);
    assert_eq!(entries(&root), ["in", "in/deep", "in/deep/data.csv"]);

    // Replacing keeps one file; a folder in the way is refused.
    let mut up = ws.upload("in/deep/data.csv").unwrap();
    up.write(b"new").unwrap();
    up.commit(|| Ok(())).unwrap();
    assert_eq!(
        std::fs::read(root.join("in/deep/data.csv")).unwrap(),
        b"new"
    );
    let e = ws.upload("in").unwrap().commit(|| Ok(())).unwrap_err();
    assert!(e.to_string().contains("is a folder"), "{e}");
    assert_eq!(entries(&root), ["in", "in/deep", "in/deep/data.csv"]);
}

#[test]
fn links_fifos_and_folders_are_never_followed_or_read() {
    let (dir, ws) = ws();
    let root = dir.path().join("ses-w");
    let host = dir.path().join("host-secret");
    std::fs::write(&host, b"secret").unwrap();
    symlink(&host, root.join("link")).unwrap();
    symlink(dir.path(), root.join("dirlink")).unwrap();
    std::fs::hard_link(&host, root.join("hard")).unwrap();
    nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("plain"), b"ok").unwrap();

    let refused = |p: &str| ws.open_file(p).unwrap_err().to_string();
    assert!(
        refused("link").contains("is a symlink"),
        "{}",
        refused("link")
    );
    assert!(refused("dirlink/host-secret").contains("passes through a symlink"));
    assert!(refused("hard").contains("2 hard links"));
    assert!(refused("fifo").contains("is a FIFO"));
    assert!(refused("sub").contains("is a folder"));
    assert!(refused("plain/x").contains("passes through a regular file"));
    assert!(refused("none").contains("does not exist"));
    let (mut f, size) = ws.open_file("plain").unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut f, &mut text).unwrap();
    assert_eq!((text.as_str(), size), ("ok", 2));

    // An upload through a planted folder link is refused, nothing written.
    let e = ws.upload("dirlink/planted").unwrap_err();
    assert!(e.to_string().contains("passes through a symlink"), "{e}");
    assert!(!dir.path().join("planted").exists());
    // An upload onto a symlink replaces the link, not its target.
    let mut up = ws.upload("link").unwrap();
    up.write(b"mine").unwrap();
    up.commit(|| Ok(())).unwrap();
    assert_eq!(std::fs::read(&host).unwrap(), b"secret");
    // Delete removes a link itself, refuses a folder.
    ws.delete("dirlink").unwrap();
    assert!(dir.path().exists());
    assert!(ws.delete("sub").unwrap_err().to_string().contains("folder"));
    ws.delete("hard").unwrap();
    assert_eq!(std::fs::read(&host).unwrap(), b"secret");
}

#[test]
fn a_listing_is_bounded_and_filtered_by_prefix() {
    let (dir, ws) = ws();
    let root = dir.path().join("ses-w");
    std::fs::create_dir_all(root.join("out/img")).unwrap();
    std::fs::write(root.join("out/report.md"), b"12345").unwrap();
    std::fs::write(root.join("out/img/a.png"), b"1").unwrap();
    std::fs::write(root.join("in.csv"), b"1").unwrap();
    symlink("/etc/passwd", root.join("out/link")).unwrap();
    let all = ws.list("").unwrap();
    let paths: Vec<&str> = all.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["in.csv", "out/img/a.png", "out/report.md"]);
    assert!(!all.truncated);
    let some = ws.list("out/rep").unwrap();
    assert_eq!(some.files.len(), 1);
    assert_eq!(some.files[0].size, 5);
    assert!(ws.list("missing/x").unwrap().files.is_empty());
    assert!(ws.list("/etc").is_err());

    for i in 0..(MAX_LISTED + 5) {
        std::fs::write(root.join(format!("f{i:05}")), b"").unwrap();
    }
    let many = ws.list("").unwrap();
    assert!(many.truncated);
    assert_eq!(many.files.len(), MAX_LISTED);
}
