//! Sandbox profiles (runner/src/sandbox/profile.rs, TOML), as a job's
//! profile file is read, down to what each platform gets from them: the
//! mounts, the bubblewrap argv, the seccomp programs and the Seatbelt
//! profile.
//!
//! Invariants: no panic; a refusal is one line; an accepted profile mounts
//! only absolute paths without `..` and never over the runner's own
//! folders, and has positive limits; its Seatbelt profile, when it renders,
//! is well-formed and references exactly the parameters it passes.
use std::path::Path;

use crate::one_line;
use seatbelt::sexpr;
use skill_runner::exec::job::Job;
use skill_runner::exec::plan;
use skill_runner::sandbox::bwrap::BwrapFeatures;
use skill_runner::sandbox::profile::{
    self, HostEntry, Mount, MountRule, Network, Profile, RESERVED_DESTS,
};

/// One input, as the fuzzer and the corpus replay give it.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let p = match Profile::parse(text, "fuzz.toml") {
        Err(e) => return one_line("profile", &e.to_string()),
        Ok(p) => p,
    };
    check(&p);
    bubblewrap(&p);
    #[cfg(target_os = "linux")]
    if let Err(e) = skill_runner::sandbox::seccomp::compile(&p, Network::None) {
        one_line("seccomp", &e.to_string());
    }
    seatbelt(&p);
}

fn check(p: &Profile) {
    for rule in &p.linux.mounts {
        let (MountRule::RoBind { src, dest }
        | MountRule::RoBindTry { src, dest }
        | MountRule::Mirror { src, dest }) = rule;
        for path in [src, dest] {
            assert!(path.is_absolute());
            assert!(!path
                .components()
                .any(|c| c == std::path::Component::ParentDir));
        }
        for r in RESERVED_DESTS {
            assert!(dest != Path::new(r), "{}", dest.display());
            assert!(*r == "/" || !dest.starts_with(r), "{}", dest.display());
        }
    }
    let l = p.limits;
    assert!(l.timeout_ms > 0 && l.pids > 0 && l.memory_bytes > 0 && l.tmp_bytes > 0);
}

/// A host where sources are, by turns, missing, symlinks and folders:
/// the order of the rules is kept, and a rule drops only when it adds
/// nothing: a mirror or a `ro-bind-try` of a missing source, or a bind of
/// a path onto itself below an earlier kept read-only bind of a folder
/// onto itself. Then the real bubblewrap argv of a job under this
/// profile: its mounts appear in the profile's order.
fn bubblewrap(p: &Profile) {
    let host = |src: &Path| match src.as_os_str().len() % 3 {
        0 => HostEntry::Missing,
        1 => HostEntry::Symlink("usr/bin".into()),
        _ => HostEntry::Other,
    };
    let mounts = p.resolve_mounts(host);
    let dest_of = |m: &Mount| match m {
        Mount::RoBind { dest, .. }
        | Mount::RoBindTry { dest, .. }
        | Mount::Symlink { dest, .. } => dest.clone(),
    };
    let mut kept = mounts.iter().peekable();
    let mut earlier: Vec<&Mount> = Vec::new();
    for rule in &p.linux.mounts {
        let (MountRule::RoBind { src, dest }
        | MountRule::RoBindTry { src, dest }
        | MountRule::Mirror { src, dest }) = rule;
        let same = |m: &&Mount| {
            dest_of(m) == *dest
                && match (m, rule) {
                    (Mount::Symlink { .. }, MountRule::Mirror { .. }) => true,
                    (Mount::RoBind { src: s, .. } | Mount::RoBindTry { src: s, .. }, _) => s == src,
                    _ => false,
                }
        };
        if kept.peek().is_some_and(same) {
            earlier.push(kept.next().expect("peeked"));
            continue;
        }
        let missing = host(src) == HostEntry::Missing
            && matches!(rule, MountRule::RoBindTry { .. } | MountRule::Mirror { .. });
        let nested = src == dest
            && earlier.iter().any(|m| match m {
                Mount::RoBind { src: s, dest: d } | Mount::RoBindTry { src: s, dest: d } => {
                    s == d && src != s && src.starts_with(s)
                }
                Mount::Symlink { .. } => false,
            });
        assert!(
            missing || nested,
            "rule for {} dropped though it adds something",
            dest.display()
        );
    }
    assert!(kept.next().is_none(), "a mount that no rule asked for");

    let mut job = Job::from_json(br#"{"argv":["true"]}"#, None).expect("a minimal job");
    job.profile = p.clone();
    let mounts = p.resolve_mounts(profile::host_entry);
    let folders = plan::Folders {
        skills: "/data/published/x/skills".into(),
        workspace: None,
        extensions: None,
        net: None,
        etc: None,
        environment: None,
    };
    let args = plan::bwrap(
        &job,
        plan::Sandbox {
            program: Path::new("/usr/bin/bwrap"),
            features: BwrapFeatures::default(),
            mounts: &mounts,
            folders: &folders,
            identity: &crate::identity(),
            nproc: None,
        },
    )
    .expect("a job plans")
    .args;
    let mut rest = args.iter();
    for m in p.resolve_mounts(profile::host_entry) {
        let dest = match &m {
            Mount::RoBind { dest, .. }
            | Mount::RoBindTry { dest, .. }
            | Mount::Symlink { dest, .. } => dest,
        };
        assert!(
            rest.any(|a| Path::new(a) == dest),
            "mount {} is missing or out of order",
            dest.display()
        );
    }
}

fn seatbelt(p: &Profile) {
    let roots = seatbelt::Roots {
        snapshot_root: "/private/var/folders/fz/T/sr/e1/skills".into(),
        extensions_dir:
            "/private/var/folders/fz/T/sr/e1/workspace/.sciencediscovery/skill-extensions".into(),
        workspace: "/private/var/folders/fz/T/sr/e1/workspace".into(),
        tmp_dir: "/private/var/folders/fz/T/sr/e1/tmp".into(),
        environment: Some("/private/var/db/skill-runner/environments/trees/e1".into()),
    };
    let policy = seatbelt::SystemPolicy {
        read_only_subpaths: p.macos.read_only_subpaths.clone(),
        read_only_literals: p.macos.read_only_literals.clone(),
        network: seatbelt::Network::None,
    };
    match seatbelt::render(&policy, &roots) {
        Err(e) => one_line("seatbelt", &e.to_string()),
        Ok(r) => {
            let exprs = sexpr::parse(&r.profile).expect("a rendered profile is well-formed");
            let referenced = sexpr::param_references(&exprs);
            let passed: std::collections::BTreeSet<String> =
                r.params.iter().map(|(n, _)| n.clone()).collect();
            assert_eq!(referenced, passed);
        }
    }
}
