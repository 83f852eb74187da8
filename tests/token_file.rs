//! `serve --token-file` takes only a private regular file of the daemon's
//! user: a FIFO hung the start, `/dev/zero` was read until memory ran out,
//! and a file readable by everyone was only warned about.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use skill_runner_tests::*;

/// `serve --token-file FILE` on a socket: it must stop at once (exit 125)
/// with a sentence naming the file.
fn refused(w: &World, file: &Path, says: &str) {
    let mut cmd = w.cmd();
    cmd.arg("serve")
        .arg("--socket")
        .arg(w.data_dir().join("run/s.sock"))
        .arg("--token-file")
        .arg(file);
    let out = output_within(&mut cmd, HANG_GUARD);
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}: {}",
        file.display(),
        show(&out)
    );
    let said = text(&out.stderr);
    assert!(
        said.contains(&file.display().to_string()) && said.contains(says),
        "{}: {said}",
        file.display()
    );
    assert!(!said.contains("listening on"), "{said}");
}

fn file(w: &World, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
    let p = w.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

const TOKEN: &[u8] = b"0123456789abcdef0123456789abcdef\n";

#[test]
fn a_fifo_or_a_device_as_token_file_is_refused_at_once() {
    let w = World::new();
    let fifo = w.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    refused(&w, &fifo, "not a regular file");
    refused(&w, Path::new("/dev/zero"), "not a regular file");
}

#[test]
fn a_token_file_others_may_read_is_refused() {
    let w = World::new();
    refused(&w, &file(&w, "t644", TOKEN, 0o644), "chmod 600");
    refused(&w, &file(&w, "t640", TOKEN, 0o640), "chmod 600");
}

#[test]
fn a_token_file_larger_than_a_line_is_refused() {
    let w = World::new();
    refused(
        &w,
        &file(&w, "big", &vec![b'a'; 1 << 20], 0o600),
        "larger than",
    );
}

#[test]
fn a_token_file_of_another_user_is_refused() {
    let w = World::new();
    let p = file(&w, "theirs", TOKEN, 0o600);
    if std::os::unix::fs::chown(&p, Some(65534), Some(65534)).is_err() {
        skip("cannot give a file to another user here");
        return;
    }
    refused(&w, &p, "not by the daemon's user");
}

#[test]
fn a_private_token_file_is_taken() {
    let w = World::new();
    let p = file(&w, "token", TOKEN, 0o600);
    let log = w.path().join("serve.log");
    let mut child = w
        .cmd()
        .arg("serve")
        .arg("--token-file")
        .arg(&p)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("listening on")
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        assert!(started.elapsed() < HANG_GUARD, "serve did not listen");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    assert!(!std::fs::read_to_string(&log)
        .unwrap()
        .contains("can be read by other users"));
}
