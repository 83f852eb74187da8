//! Tests of the data dir checks, on folders a test makes (the attacks of
//! another local user are in `tests/datadir.rs`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A scratch folder the checks accept on the way (tempfile's is 0700 in
/// the sticky /tmp).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn creates_the_data_dir_and_its_layout_private() {
    let t = scratch();
    let path = t.path().join("a/b/data");
    let dd = DataDir::open(&path, None).unwrap();
    assert_eq!(dd.path(), t.path().canonicalize().unwrap().join("a/b/data"));
    assert_eq!(mode(&path), 0o700);
    for (name, _) in LAYOUT {
        assert_eq!(mode(&path.join(name)), 0o700, "{name}");
    }
    // Folders above it that were missing: made as create_dir_all would.
    assert_eq!(mode(&t.path().join("a")) & 0o700, 0o700);
    // Opening again changes nothing and succeeds.
    DataDir::open(&path, None).unwrap();
}

#[test]
fn the_folder_methods_name_the_layout() {
    let dd = DataDir::unchecked(Path::new("/d"));
    let named = [
        dd.store(),
        dd.published(),
        dd.executions(),
        dd.system_views(),
        dd.environments(),
        dd.job_root(),
        dd.cgroups(),
        dd.sessions(),
        dd.workspaces(),
        dd.cache(),
        dd.run(),
        dd.outputs(),
        dd.state(),
        dd.keys(),
    ];
    let layout: Vec<PathBuf> = LAYOUT.iter().map(|(n, _)| dd.path().join(n)).collect();
    assert_eq!(named.to_vec(), layout);
}

/// `session create` and `store add` left the data dir 0755 (records
/// readable by others): an existing loose layout is made private.
#[test]
fn an_existing_readable_layout_is_made_private() {
    let t = scratch();
    let path = t.path().join("data");
    std::fs::create_dir(&path).unwrap();
    chmod(&path, 0o755);
    std::fs::create_dir(path.join("sessions")).unwrap();
    chmod(&path.join("sessions"), 0o755);
    DataDir::open(&path, None).unwrap();
    assert_eq!(mode(&path), 0o700);
    assert_eq!(mode(&path.join("sessions")), 0o700);
}

#[test]
fn a_root_runner_lets_the_sandbox_group_pass_where_bubblewrap_binds_from() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to give folders to another group");
        return;
    }
    let t = scratch();
    let path = t.path().join("data");
    DataDir::open(&path, Some(65533)).unwrap();
    assert_eq!(mode(&path), 0o710);
    assert_eq!(std::fs::metadata(&path).unwrap().gid(), 65533);
    for (name, access) in LAYOUT {
        let p = path.join(name);
        let (want, gid) = match access {
            Access::Sandbox => (0o710, 65533),
            Access::Private => (0o700, 0),
        };
        assert_eq!(mode(&p), want, "{name}");
        assert_eq!(std::fs::metadata(&p).unwrap().gid(), gid, "{name}");
    }
}

#[test]
fn a_symlinked_data_dir_is_refused_and_its_target_untouched() {
    let t = scratch();
    let target = t.path().join("target");
    std::fs::create_dir(&target).unwrap();
    chmod(&target, 0o755);
    let link = t.path().join("data");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = DataDir::open(&link, None).unwrap_err();
    assert!(matches!(e, DataDirError::Symlink { .. }), "{e}");
    assert!(e.to_string().contains("--data-dir"), "{e}");
    assert_eq!(mode(&target), 0o755);
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

#[test]
fn a_symlink_of_ours_above_the_data_dir_is_followed() {
    let t = scratch();
    std::fs::create_dir(t.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", t.path().join("via")).unwrap();
    let dd = DataDir::open(&t.path().join("via/./x/../data"), None).unwrap();
    assert_eq!(
        dd.path(),
        t.path().canonicalize().unwrap().join("real/data")
    );
    assert!(t.path().join("real/data/store").is_dir());
}

#[test]
fn a_folder_above_that_others_may_write_is_refused_unless_sticky() {
    let t = scratch();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    let e = DataDir::open(&shared.join("data"), None).unwrap_err();
    assert!(matches!(e, DataDirError::WritableByOthers { .. }), "{e}");
    assert!(!shared.join("data").exists(), "nothing is made under it");
    chmod(&shared, 0o1777);
    DataDir::open(&shared.join("data"), None).unwrap();
}

#[test]
fn a_data_dir_others_may_write_is_refused_unchanged() {
    let t = scratch();
    let path = t.path().join("data");
    std::fs::create_dir(&path).unwrap();
    for m in [0o777, 0o1777, 0o775, 0o757] {
        chmod(&path, m);
        let e = DataDir::open(&path, None).unwrap_err();
        assert!(
            matches!(e, DataDirError::DataDirWritable { .. }),
            "{m:o}: {e}"
        );
        assert!(e.to_string().contains("chmod 700"), "{e}");
        assert_eq!(mode(&path), m, "left as it was");
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
    }
}

#[test]
fn a_file_in_place_of_a_folder_is_refused() {
    let t = scratch();
    std::fs::write(t.path().join("file"), "x").unwrap();
    let e = DataDir::open(&t.path().join("file/data"), None).unwrap_err();
    assert!(matches!(e, DataDirError::NotAFolder { .. }), "{e}");
    let e = DataDir::open(&t.path().join("file"), None).unwrap_err();
    assert!(matches!(e, DataDirError::NotAFolder { .. }), "{e}");
}

#[test]
fn a_symlink_in_place_of_a_layout_folder_is_refused() {
    let t = scratch();
    let path = t.path().join("data");
    std::fs::create_dir(&path).unwrap();
    chmod(&path, 0o700);
    let victim = t.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    chmod(&victim, 0o755);
    std::os::unix::fs::symlink(&victim, path.join("published")).unwrap();
    let e = DataDir::open(&path, None).unwrap_err();
    assert!(matches!(e, DataDirError::Symlink { .. }), "{e}");
    assert_eq!(mode(&victim), 0o755);
}

#[test]
fn no_default_without_home_and_never_slash() {
    assert!(matches!(
        DataDir::open(Path::new(""), None),
        Err(DataDirError::NoDefault)
    ));
    assert!(matches!(
        DataDir::open(Path::new("/"), None),
        Err(DataDirError::Slash)
    ));
    assert!(DataDirError::NoDefault.to_string().contains("HOME"));
}

/// By what its folders are (device and inode), whatever the name: a
/// folder inside the data dir but its job root is its state, one above it
/// too, and the job root, a managed workspace's way aside, and folders
/// elsewhere are not.
#[test]
fn the_data_dirs_folders_are_known_by_what_they_are() {
    let t = scratch();
    let dd = DataDir::open(&t.path().join("data"), None).unwrap();
    let data = dd.path().to_owned();
    for sub in ["store/x", "state", "keys", "published/p/q", ""] {
        let p = data.join(sub);
        std::fs::create_dir_all(&p).unwrap();
        assert_eq!(dd.marks.state_at(&p), Some(true), "{sub}");
    }
    let jobs = data.join("roots/ws/deep");
    std::fs::create_dir_all(&jobs).unwrap();
    assert_eq!(dd.marks.state_at(&jobs), None);
    assert_eq!(dd.marks.state_at(&data.join("roots")), None);
    assert_eq!(dd.marks.state_at(t.path()), Some(false));
    assert_eq!(dd.marks.state_at(Path::new("/")), Some(false));
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    assert_eq!(dd.marks.state_at(&elsewhere), None);
    // A data dir seen only through its path knows nothing of the kind.
    assert_eq!(DataDir::unchecked(&data).marks.state_at(&data), None);
}
