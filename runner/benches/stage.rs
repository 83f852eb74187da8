//! Staging benchmark, side by side with the naive pipelines it
//! must beat, in one run on warm page cache:
//!
//! 1. stage + verify a 40 MiB selection (one 40 MiB asset, 200 files of
//!    4 KiB) vs `cp -r` then `openssl dgst -sha256` over the copy, and vs
//!    `cp -r` alone (the floor);
//! 2. verify-only of an already staged 50 MiB selection vs `cat` of the
//!    files into `openssl dgst -sha256`;
//! 3. stage + verify 500 files of 1 KiB vs `cp -r` alone;
//! 4. the stamp check a published root gets before every use
//!    (`fsx::tree_stamp`), for the example skill and for 500 files, in µs.
//!
//! Run: `cargo bench -p skill-runner --bench stage` (ITER=N to change the
//! number of rounds). Prints medians and ratios; asserts nothing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use skill_runner::package::format::PackageLimits;
use skill_runner::package::hash::Binding;
use skill_runner::package::stage::{self, Selected, Selection, SkillSource};
use skill_runner::package::verify;

const MIB: usize = 1 << 20;

fn write_pkg(dir: &Path, files: &[(String, usize)]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(
        dir.join("SKILL.md"),
        "---\nname: bench\ndescription: Benchmark package.\n---\n# Bench\n",
    )
    .unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    for (path, size) in files {
        let p = dir.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        // Incompressible, distinct bytes (xorshift).
        let mut bytes = vec![0u8; *size];
        for chunk in bytes.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let b = seed.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        fs::write(p, bytes).unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time(iter: usize, mut f: impl FnMut(usize)) -> Duration {
    f(usize::MAX); // warm-up
    median(
        (0..iter)
            .map(|i| {
                let t = Instant::now();
                f(i);
                t.elapsed()
            })
            .collect(),
    )
}

fn sh(script: &str) {
    let st = Command::new("sh").arg("-c").arg(script).status().unwrap();
    assert!(st.success(), "{script}");
}

fn files_of(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(files_of(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

struct Case {
    name: &'static str,
    src: PathBuf,
    binding: Binding,
}

fn case(
    base: &Path,
    name: &'static str,
    files: Vec<(String, usize)>,
    limits: &PackageLimits,
) -> Case {
    let src = base.join(name);
    write_pkg(&src, &files);
    let hash = verify::hash_dir(&src, limits).unwrap();
    Case {
        name,
        src,
        binding: Binding {
            id: "bench".into(),
            revision: 1,
            version: "1".into(),
            hash,
        },
    }
}

/// Stages the package folder `src` into `<base>/kept-<name>` and returns
/// the staged tree.
fn stage_kept(base: &Path, name: &str, src: &Path, limits: &PackageLimits) -> PathBuf {
    let binding = Binding {
        id: "bench".into(),
        revision: 1,
        version: "1.0.0".into(),
        hash: verify::hash_dir(src, limits).unwrap(),
    };
    let root = base.join(format!("kept-{name}"));
    stage::stage(
        &Selection::check(&[Selected {
            binding,
            source: SkillSource::Dir(src.to_owned()),
        }])
        .unwrap(),
        &root,
        limits,
    )
    .unwrap();
    root
}

fn main() {
    let iter: usize = std::env::var("ITER")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let base = std::env::var_os("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("skill-runner-bench-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).unwrap();
    let big_limits = PackageLimits {
        max_file_bytes: 64 * MIB as u64,
        max_package_bytes: 128 * MIB as u64,
        ..PackageLimits::default()
    };

    let mut mixed: Vec<(String, usize)> = vec![("assets/big.bin".into(), 40 * MIB)];
    mixed.extend((0..200).map(|i| (format!("references/r{i:03}.md"), 4096)));
    let c40 = case(&base, "mixed-40MiB", mixed, &big_limits);
    let c50 = case(
        &base,
        "verify-50MiB",
        (0..5)
            .map(|i| (format!("assets/part{i}.bin"), 10 * MIB))
            .collect(),
        &big_limits,
    );
    let small = case(
        &base,
        "small-500x1KiB",
        (0..499).map(|i| (format!("f/{i:03}.txt"), 1024)).collect(),
        &big_limits,
    );

    let stage_once = |c: &Case, i: usize| {
        let root = base.join(format!("staged-{}-{i}", c.name));
        stage::stage(
            &Selection::check(&[Selected {
                binding: c.binding.clone(),
                source: SkillSource::Dir(c.src.clone()),
            }])
            .unwrap(),
            &root,
            &big_limits,
        )
        .unwrap();
        skill_runner::fsx::remove_tree(&root).unwrap();
    };
    // Removal is outside the measured part for every contender.
    let timed_stage = |c: &Case| {
        time(iter, |i| {
            let root = base.join(format!("staged-{}-{i}", c.name));
            let _ = skill_runner::fsx::remove_tree(&root);
            stage_once(c, i)
        })
    };
    let cp_only = |c: &Case| {
        let dst = base.join(format!("cp-{}", c.name));
        time(iter, |_| {
            let _ = fs::remove_dir_all(&dst);
            sh(&format!("cp -r '{}' '{}'", c.src.display(), dst.display()));
        })
    };
    let cp_openssl = |c: &Case| {
        let dst = base.join(format!("cpo-{}", c.name));
        time(iter, |_| {
            let _ = fs::remove_dir_all(&dst);
            sh(&format!(
                "cp -r '{0}' '{1}' && find '{1}' -type f -print0 | xargs -0 openssl dgst -sha256 >/dev/null",
                c.src.display(),
                dst.display()
            ));
        })
    };

    println!("skill-runner staging benchmark: median of {iter} runs, warm page cache");
    println!("{:<44} {:>10}", "measurement", "ms");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;

    // 1. 40 MiB selection.
    let ours = timed_stage(&c40);
    let naive = cp_openssl(&c40);
    let floor = cp_only(&c40);
    println!("{:<44} {:>10.2}", "stage+verify 40 MiB (ours)", ms(ours));
    println!("{:<44} {:>10.2}", "cp -r + openssl dgst -sha256", ms(naive));
    println!("{:<44} {:>10.2}", "cp -r alone", ms(floor));

    // 2. Verify-only of a staged 50 MiB selection.
    let staged = base.join("verify-root");
    stage::stage(
        &Selection::check(&[Selected {
            binding: c50.binding.clone(),
            source: SkillSource::Dir(c50.src.clone()),
        }])
        .unwrap(),
        &staged,
        &big_limits,
    )
    .unwrap();
    let pkg = staged.join("bench");
    let verify = time(iter, |_| {
        verify::verify_tree(&pkg, &c50.binding, &big_limits, None).unwrap();
    });
    let mut files = files_of(&pkg);
    files.sort();
    let list = files
        .iter()
        .map(|f| format!("'{}'", f.display()))
        .collect::<Vec<_>>()
        .join(" ");
    let cat_openssl = time(iter, |_| {
        sh(&format!("cat {list} | openssl dgst -sha256 >/dev/null"))
    });
    println!("{:<44} {:>10.2}", "verify staged 50 MiB (ours)", ms(verify));
    println!(
        "{:<44} {:>10.2}",
        "cat | openssl dgst -sha256",
        ms(cat_openssl)
    );

    // 3. 500 small files.
    let ours_small = timed_stage(&small);
    let cp_small = cp_only(&small);
    println!(
        "{:<44} {:>10.2}",
        "stage+verify 500 x 1 KiB (ours)",
        ms(ours_small)
    );
    println!("{:<44} {:>10.2}", "cp -r alone (500 x 1 KiB)", ms(cp_small));

    // 4. The stamp check of a published root before each use.
    let example = stage_kept(
        &base,
        "example",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/skills/hello"),
        &big_limits,
    );
    let many = stage_kept(&base, "many", &small.src, &big_limits);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (what, root) in [("example skill", &example), ("500 files", &many)] {
        let check = time(iter.max(200), |_| {
            skill_runner::fsx::tree_stamp(root).unwrap();
        });
        println!(
            "{:<44} {:>10.1}",
            format!("stamp check, {what} (us)"),
            us(check)
        );
    }

    println!();
    println!("ratios (target in brackets)");
    println!(
        "  stage+verify 40 MiB / (cp -r + openssl)   {:>6.2}x  [<= 1.0]",
        ours.as_secs_f64() / naive.as_secs_f64()
    );
    println!(
        "  stage+verify 40 MiB / cp -r               {:>6.2}x  [aim < 1.5]",
        ours.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "  verify 50 MiB / (cat | openssl)           {:>6.2}x  [<= 1.2]",
        verify.as_secs_f64() / cat_openssl.as_secs_f64()
    );
    println!(
        "  stage+verify 500 files / cp -r            {:>6.2}x  [< 2.0]",
        ours_small.as_secs_f64() / cp_small.as_secs_f64()
    );
    let _ = skill_runner::fsx::remove_tree(&base);
}
