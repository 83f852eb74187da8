//! Unit tests of `diskwatch.rs` (included from there as its `tests` module).

use super::*;

use std::fs;

#[test]
fn counts_blocks_entries_and_links_once() {
    let d = tempfile::tempdir().unwrap();
    let empty = usage(&[d.path().to_owned()]).unwrap();
    assert_eq!(empty, 0);
    fs::write(d.path().join("a"), vec![1u8; 100_000]).unwrap();
    let one = usage(&[d.path().to_owned()]).unwrap();
    assert!(one >= 100_000, "{one}");
    fs::hard_link(d.path().join("a"), d.path().join("b")).unwrap();
    assert_eq!(usage(&[d.path().to_owned()]).unwrap(), one);
    for i in 0..10 {
        fs::write(d.path().join(format!("e{i}")), b"").unwrap();
    }
    assert_eq!(usage(&[d.path().to_owned()]).unwrap(), one + 10 * MIN_ENTRY);
    std::os::unix::fs::symlink("/usr", d.path().join("l")).unwrap();
    assert_eq!(usage(&[d.path().to_owned()]).unwrap(), one + 11 * MIN_ENTRY);
}

#[test]
fn flips_the_switch_past_the_limit_and_only_then() {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("before"), vec![1u8; 1 << 20]).unwrap();
    let cancel = Cancel::new().unwrap();
    let w = DiskWatch::start(vec![d.path().to_owned()], 512 << 10, cancel.clone());
    // Under the limit over the baseline: nothing happens.
    std::thread::sleep(MIN_INTERVAL * 3);
    fs::write(d.path().join("small"), vec![1u8; 100 << 10]).unwrap();
    std::thread::sleep(MIN_INTERVAL * 3);
    assert_eq!(w.concluded(), Verdict::Within);
    fs::write(d.path().join("big"), vec![1u8; 1 << 20]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while w.concluded() == Verdict::Within && Instant::now() < deadline {
        std::thread::sleep(MIN_INTERVAL);
    }
    assert_eq!(
        w.stop(),
        Verdict::Over,
        "the watcher did not see 1 MiB over a 512 KiB limit"
    );
}

#[test]
fn a_last_measurement_is_taken_when_the_command_ends() {
    let d = tempfile::tempdir().unwrap();
    let cancel = Cancel::new().unwrap();
    let w = DiskWatch::start(vec![d.path().to_owned()], 512 << 10, cancel);
    std::thread::sleep(MIN_INTERVAL / 2);
    fs::write(d.path().join("big"), vec![1u8; 1 << 20]).unwrap();
    // Stopped before the next periodic measurement could see it.
    assert_eq!(w.stop(), Verdict::Over);
}

#[test]
fn deep_trees_are_walked_and_unreadable_folders_fail_closed() {
    let d = tempfile::tempdir().unwrap();
    // 25 levels of 200-byte names: deeper than PATH_MAX in total, so
    // made (and walked) relative to directory handles.
    let name = "x".repeat(200);
    let mut dir = File::open(d.path()).unwrap();
    for _ in 0..25 {
        nix::sys::stat::mkdirat(dir.as_fd(), name.as_str(), Mode::from_bits_truncate(0o755))
            .unwrap();
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        dir = File::from(openat(dir.as_fd(), name.as_str(), flags, Mode::empty()).unwrap());
    }
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT;
    let big = openat(dir.as_fd(), "big", flags, Mode::from_bits_truncate(0o644)).unwrap();
    std::io::Write::write_all(&mut File::from(big), &vec![1u8; 1 << 20]).unwrap();
    let used = usage(&[d.path().to_owned()]).unwrap();
    assert!(used >= 1 << 20, "{used}");
    // A folder the walker cannot read is not "empty": no answer.
    // (Root reads it anyway: the check needs an ordinary user.)
    if !nix::unistd::geteuid().is_root() {
        let hidden = d.path().join("hidden");
        fs::create_dir(&hidden).unwrap();
        fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o0)).unwrap();
        assert!(matches!(
            usage(&[d.path().to_owned()]),
            Err(WalkError::Hidden {
                errno: Errno::EACCES,
                ..
            })
        ));
    }
}

#[test]
fn errors_of_the_commands_making_fail_closed_and_the_watchers_own_are_its_own() {
    for e in [Errno::EACCES, Errno::EPERM, Errno::ELOOP, Errno::ENOTDIR] {
        assert!(
            matches!(WalkError::of(e, "w".into()), WalkError::Hidden { .. }),
            "{e}"
        );
    }
    for e in [Errno::EMFILE, Errno::ENFILE, Errno::ENOMEM, Errno::EIO] {
        assert!(
            matches!(WalkError::of(e, "w".into()), WalkError::Own { .. }),
            "{e}"
        );
    }
    // The watcher out of descriptors mid-run: its failure, not the
    // command's limit (a false limit_exceeded before).
    let mut calls = 0;
    let own: Measure = Box::new(move |_: &[PathBuf]| {
        calls += 1;
        if calls == 1 {
            Ok(0)
        } else {
            Err(WalkError::of(Errno::EMFILE, "/ws".into()))
        }
    });
    let w = DiskWatch::start_with(vec![], 1 << 20, Cancel::new().unwrap(), own);
    let deadline = Instant::now() + Duration::from_secs(20);
    while w.concluded() == Verdict::Within && Instant::now() < deadline {
        std::thread::sleep(MIN_INTERVAL);
    }
    match w.stop() {
        Verdict::Failed(why) => assert!(why.contains("/ws") && why.contains("EMFILE"), "{why}"),
        v => panic!("{v:?}"),
    }
    // A part of the tree the command hid is over the limit.
    let mut calls = 0;
    let hidden: Measure = Box::new(move |_: &[PathBuf]| {
        calls += 1;
        if calls == 1 {
            Ok(0)
        } else {
            Err(WalkError::of(Errno::EACCES, "/ws/x".into()))
        }
    });
    let w = DiskWatch::start_with(vec![], 1 << 20, Cancel::new().unwrap(), hidden);
    assert_eq!(w.stop(), Verdict::Over);
}

/// Set in the child of the test below, which walks under a small
/// descriptor limit.
const NOFILE_CHILD: &str = "SKILL_RUNNER_TEST_DISKWATCH_NOFILE";

/// The walk's descriptors do not grow with a folder's width or depth:
/// 3,000 empty folders side by side gave a false limit_exceeded at a
/// 1024 descriptor limit. A child test process walks them with only a
/// few descriptors above what it holds already.
#[test]
fn wide_and_deep_trees_are_walked_with_a_few_descriptors() {
    if std::env::var_os(NOFILE_CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "supervise::diskwatch::tests::wide_and_deep_trees_are_walked_with_a_few_descriptors",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(NOFILE_CHILD, "1")
                .output()
                .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains("walked 3424 folders"), "{said}");
        return;
    }
    // On a tmpfs where there is one: making 3,000 folders on a disk
    // takes seconds.
    let d = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    for i in 0..3000 {
        fs::create_dir(d.path().join(format!("w{i}"))).unwrap();
    }
    // A comb 200 deep: a folder and a file beside each level.
    let mut dir = d.path().join("deep");
    for i in 0..200 {
        fs::create_dir_all(dir.join("side")).unwrap();
        fs::write(dir.join("f"), b"x").unwrap();
        dir = dir.join(format!("d{i}"));
    }
    fs::create_dir(&dir).unwrap();
    // 3000 side by side; `deep`, its 200 levels and a side folder at
    // each; 23 below the last: 3424 folders, and 200 files.
    for i in 0..23 {
        fs::create_dir(dir.join(format!("x{i}"))).unwrap();
    }
    let folders = 3000 + 1 + 200 + 200 + 23;
    let files = 200;
    let highest = fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap();
    let allowed = highest + 1 + MAX_OPEN as u64;
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        allowed,
        allowed,
    )
    .unwrap();
    let used = usage(&[d.path().to_owned()]).unwrap();
    assert_eq!(used, (folders + files) * MIN_ENTRY);
    println!("walked {folders} folders");
}

/// `..` is trusted only when it is the folder the cursor came from: a
/// folder moved mid-walk sends the cursor back to the root, never
/// somewhere else (above the root, say).
#[test]
fn the_cursor_climbs_only_to_the_folder_it_came_from() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("a/b")).unwrap();
    fs::create_dir_all(d.path().join("c")).unwrap();
    let root = crate::fsx::open_dir_nofollow(d.path()).unwrap();
    let mut t = Tree::new(root, "root".into()).unwrap();
    let id = |p: &str| {
        let m = fs::symlink_metadata(d.path().join(p)).unwrap();
        (
            std::os::unix::fs::MetadataExt::dev(&m),
            std::os::unix::fs::MetadataExt::ino(&m),
        )
    };
    let node = |parent: &Rc<Node>, name: &str, path: &str| {
        Rc::new(Node {
            parent: Some(parent.clone()),
            name: name.into(),
            depth: parent.depth + 1,
            id: id(path),
        })
    };
    let top = t.cur.clone();
    let a = node(&top, "a", "a");
    let b = node(&a, "b", "a/b");
    assert!(t.reach(&b).unwrap());
    assert!(t.up().unwrap(), "a/b's .. is a");
    assert!(Rc::ptr_eq(&t.cur, &a));
    assert!(t.reach(&b).unwrap());
    fs::rename(d.path().join("a/b"), d.path().join("c/b")).unwrap();
    assert!(!t.up().unwrap(), "b's .. is now c, not a");
    assert_eq!(t.cur.depth, 0);
    assert!(t.cur_fd.is_none());
    assert!(t.reach(&a).unwrap());
    assert_eq!(t.path_of(&b), "root/a/b");
    // b is gone from a: reaching it again finds nothing.
    assert!(!t.reach(&b).unwrap());
}
