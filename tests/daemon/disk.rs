//! A full data-dir disk is reported: health answers 503 `disk_full` with
//! a reason, `/metrics` shows the data dir's free bytes, and health is
//! `ok` again once space is freed.

use std::io::Write;

use super::SmallDataDisk;
use skill_runner_tests::daemon::*;
use skill_runner_tests::*;

/// The free bytes `/metrics` reports for the data dir.
fn free_in_metrics(d: &Daemon) -> i64 {
    let text = String::from_utf8(d.get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("skill_runner_data_dir_free_bytes "))
        .unwrap_or_else(|| panic!("no data dir free bytes in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn health_reports_a_full_data_dir_disk_and_metrics_its_free_bytes() {
    let w = World::new();
    let Some(disk) = SmallDataDisk::mount(&w) else {
        return;
    };
    let data = disk.0.clone();
    let d = Daemon::start(&w, &[]);
    let r = d.get("/v1/health");
    assert_eq!(r.status, 200, "{:#}", r.json());
    let free = r.json()["data_dir"]["free_bytes"].as_u64().unwrap();
    assert!(free > 16 << 20 && free <= 64 << 20, "{free}");
    assert!(free_in_metrics(&d) > 16 << 20);

    // Fill the disk to the last byte.
    let fill = data.join("fill");
    let mut f = std::fs::File::create(&fill).unwrap();
    let block = vec![0u8; 1 << 20];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..4096]).is_ok() {}
    drop(f);
    let r = d.get("/v1/health");
    assert_eq!(r.status, 503, "{:#}", r.json());
    let doc = r.json();
    assert_eq!(doc["status"], "disk_full", "{doc:#}");
    let reason = doc["data_dir"]["reason"].as_str().unwrap();
    assert!(reason.contains("free space"), "{reason}");
    assert!(doc["data_dir"]["free_bytes"].as_u64().unwrap() < 16 << 20);
    assert!((0..16 << 20).contains(&free_in_metrics(&d)));

    std::fs::remove_file(&fill).unwrap();
    let r = d.get("/v1/health");
    assert_eq!(r.status, 200, "{:#}", r.json());
}
