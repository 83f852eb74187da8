//! Unit tests of `seccomp.rs` (included from there as its `tests` module).

use super::*;

/// A tiny classic-BPF interpreter, enough for our filters, so the
/// decisions can be checked without loading anything into the kernel.
fn run(program: &[u8], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    run_counting(program, arch, nr, args).0
}

/// Like [`run`], also counting the instructions executed.
fn run_counting(program: &[u8], arch: u32, nr: u32, args: [u64; 6]) -> (u32, usize) {
    let ins: Vec<Insn> = program
        .chunks(8)
        .map(|c| Insn {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let load = |off: u32| -> u32 {
        match off {
            0 => nr,
            4 => arch,
            16..=63 => {
                let i = ((off - 16) / 8) as usize;
                let v = args[i];
                if (off - 16).is_multiple_of(8) {
                    v as u32
                } else {
                    (v >> 32) as u32
                }
            }
            _ => 0,
        }
    };
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let mut mem = [0u32; 16];
    let mut steps = 0;
    loop {
        let i = &ins[pc];
        pc += 1;
        steps += 1;
        match i.code {
            0x20 => a = load(i.k),
            0x00 => a = i.k,
            0x01 => x = i.k,
            0x02 => mem[i.k as usize] = a,
            0x03 => mem[i.k as usize] = x,
            0x60 => a = mem[i.k as usize],
            0x61 => x = mem[i.k as usize],
            0x54 => a &= i.k,
            0x05 => pc += i.k as usize,
            0x15 => pc += if a == i.k { i.jt } else { i.jf } as usize,
            0x25 => pc += if a > i.k { i.jt } else { i.jf } as usize,
            0x35 => pc += if a >= i.k { i.jt } else { i.jf } as usize,
            0x45 => pc += if a & i.k != 0 { i.jt } else { i.jf } as usize,
            0x06 => return (i.k, steps),
            0x16 => return (a, steps),
            c => panic!("opcode {c:#x} not interpreted"),
        }
    }
}

const X86_64: u32 = 0xC000_003E;
const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

fn filters() -> Filters {
    let p = Profile::load("default", std::path::Path::new("/")).unwrap();
    compile(&p, Network::None).unwrap()
}

fn decide(f: &Filters, arch: u32, nr: i64, args: [u64; 6]) -> u32 {
    run(&f.rules, arch, nr as u32, args)
}

/// The rules part alone, as the program of its own it once was.
fn rules_alone(p: &Profile, network: Network, root_mapped: bool) -> Vec<u8> {
    let rules = refusals(p, network, root_mapped).unwrap();
    to_bytes(&rules_program(X86_64, &rules, Guard::Without).unwrap())
}

/// What the kernel answered for the rules and the guard stacked as two
/// programs, the guard installed last: it runs the newest filter first
/// and takes another's answer only when its action is strictly lower
/// (KILL < ERRNO < ALLOW for what we use), so among refusals of equal
/// strength the guard's errno wins.
fn stacked(rules: &[u8], guard: &[u8], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    let g = run(guard, arch, nr, args);
    let r = run(rules, arch, nr, args);
    let rank = |v: u32| v & libc::SECCOMP_RET_ACTION_FULL;
    if rank(r) < rank(g) {
        r
    } else {
        g
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn denials_and_allowances() {
    let f = filters();
    let allow = libc::SECCOMP_RET_ALLOW;
    let z = [0u64; 6];
    assert_eq!(decide(&f, X86_64, libc::SYS_ptrace, z), EPERM);
    assert_eq!(decide(&f, X86_64, libc::SYS_io_uring_setup, z), EPERM);
    assert_eq!(decide(&f, X86_64, libc::SYS_read, z), allow);
    assert_eq!(decide(&f, X86_64, libc::SYS_getpid, z), allow);
    // socket: AF_UNIX allowed, AF_INET / AF_INET6 / AF_NETLINK refused.
    let sock = |fam: i32| decide(&f, X86_64, libc::SYS_socket, [fam as u64, 1, 0, 0, 0, 0]);
    assert_eq!(sock(libc::AF_UNIX), allow);
    assert_eq!(sock(libc::AF_INET), EPERM);
    assert_eq!(sock(libc::AF_INET6), EPERM);
    assert_eq!(sock(libc::AF_NETLINK), EPERM);
    // AF_UNIX with high garbage bits is still AF_UNIX to the kernel.
    assert_eq!(
        decide(
            &f,
            X86_64,
            libc::SYS_socket,
            [(1u64 << 32) | 1, 1, 0, 0, 0, 0]
        ),
        allow
    );
    // ioctl: TIOCSTI refused even with high bits set; others allowed.
    let ioctl = |req: u64| decide(&f, X86_64, libc::SYS_ioctl, [0, req, 0, 0, 0, 0]);
    assert_eq!(ioctl(libc::TIOCSTI as u64), EPERM);
    assert_eq!(ioctl((1u64 << 40) | libc::TIOCSTI as u64), EPERM);
    assert_eq!(ioctl(libc::TIOCLINUX as u64), EPERM);
    assert_eq!(ioctl(libc::TCGETS as u64), allow);
    // clone: threads and fork allowed, namespaces refused; clone3 ENOSYS.
    let clone = |flags: u64| decide(&f, X86_64, libc::SYS_clone, [flags, 0, 0, 0, 0, 0]);
    assert_eq!(clone(libc::SIGCHLD as u64), allow);
    assert_eq!(clone((libc::CLONE_VM | libc::CLONE_THREAD) as u64), allow);
    assert_eq!(
        clone(libc::CLONE_NEWUSER as u64 | libc::SIGCHLD as u64),
        EPERM
    );
    assert_eq!(clone(libc::CLONE_NEWNS as u64), EPERM);
    assert_eq!(
        decide(&f, X86_64, libc::SYS_clone3, z),
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
    assert_eq!(
        decide(&f, X86_64, libc::SYS_openat2, z),
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
    // Modes: ordinary ones allowed, setuid and setgid refused in every
    // call that takes one, high garbage bits ignored as the kernel does.
    let at = |nr: i64, pos: usize, mode: u64| {
        let mut args = [0u64; 6];
        args[pos] = mode;
        decide(&f, X86_64, nr, args)
    };
    for (nr, pos) in [
        (libc::SYS_chmod, 1),
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_open, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
        (libc::SYS_mknodat, 2),
    ] {
        assert_eq!(at(nr, pos, 0o755), allow, "{nr}");
        assert_eq!(at(nr, pos, 0o1777), allow, "{nr}");
        assert_eq!(at(nr, pos, 0o4755), EPERM, "{nr}");
        assert_eq!(at(nr, pos, 0o2755), EPERM, "{nr}");
        assert_eq!(at(nr, pos, (1 << 40) | 0o4000), EPERM, "{nr}");
    }
    // Only for a root-mapped sandbox: every mode and xattr change.
    assert_eq!(decide(&f, X86_64, libc::SYS_fsetxattr, z), allow);
    let p = Profile::load("default", std::path::Path::new("/")).unwrap();
    let root = compile_for(&p, Network::None, true).unwrap();
    for nr in [
        libc::SYS_chmod,
        libc::SYS_fchmodat,
        libc::SYS_fsetxattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
        SYS_FILE_SETATTR,
    ] {
        assert_eq!(decide(&root, X86_64, nr, z), EPERM, "{nr}");
        assert_eq!(decide(&f, X86_64, nr, z), allow, "{nr}");
    }
    // Reading the attributes (`file_getattr`) changes nothing.
    assert_eq!(decide(&root, X86_64, SYS_FILE_SETATTR - 1, z), allow);
    assert_eq!(decide(&root, X86_64, libc::SYS_openat, z), allow);
    assert_eq!(decide(&root, X86_64, libc::SYS_utimensat, z), EPERM);
    assert_eq!(decide(&f, X86_64, libc::SYS_utimensat, z), allow);
    // fallocate: plain allocation allowed (RLIMIT_FSIZE bounds it),
    // FALLOC_FL_KEEP_SIZE (and hole punching, which needs it) refused.
    let falloc = |mode: u64| decide(&f, X86_64, libc::SYS_fallocate, [3, mode, 0, 1 << 30, 0, 0]);
    assert_eq!(falloc(0), allow);
    assert_eq!(falloc(libc::FALLOC_FL_KEEP_SIZE as u64), EPERM);
    assert_eq!(
        falloc((libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE) as u64),
        EPERM
    );
    // x32 alias of an allowed call: refused.
    assert_eq!(decide(&f, X86_64, 0x4000_0000 | libc::SYS_getpid, z), EPERM);
    // i386: killed.
    assert_eq!(
        decide(&f, 0x4000_0003, 20, z),
        libc::SECCOMP_RET_KILL_PROCESS
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn with_an_allowlist_only_stream_sockets_of_ip_are_added() {
    let p = Profile::load("default", std::path::Path::new("/")).unwrap();
    let f = compile(&p, Network::Proxy).unwrap();
    let allow = libc::SECCOMP_RET_ALLOW;
    let sock =
        |fam: i32, ty: u64| decide(&f, X86_64, libc::SYS_socket, [fam as u64, ty, 0, 0, 0, 0]);
    let stream = libc::SOCK_STREAM as u64;
    let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
    for fam in [libc::AF_INET, libc::AF_INET6] {
        assert_eq!(sock(fam, stream), allow, "{fam}");
        assert_eq!(sock(fam, stream | flags), allow, "{fam}");
        // High garbage bits: the kernel reads an int.
        assert_eq!(sock(fam, (1 << 32) | stream), allow, "{fam}");
        for ty in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_SEQPACKET, 10] {
            assert_eq!(sock(fam, ty as u64), EPERM, "{fam} {ty}");
            assert_eq!(sock(fam, ty as u64 | flags), EPERM, "{fam} {ty}");
        }
    }
    assert_eq!(sock(libc::AF_UNIX, libc::SOCK_DGRAM as u64), allow);
    for fam in [
        libc::AF_NETLINK,
        libc::AF_PACKET,
        libc::AF_BLUETOOTH,
        libc::AF_VSOCK,
    ] {
        assert_eq!(sock(fam, stream), EPERM, "{fam}");
        assert_eq!(sock(fam, libc::SOCK_RAW as u64), EPERM, "{fam}");
    }
    // Everything else is as without a network.
    let none = filters();
    for nr in 0..1024 {
        if nr != libc::SYS_socket {
            assert_eq!(
                decide(&f, X86_64, nr, [0; 6]),
                decide(&none, X86_64, nr, [0; 6]),
                "{nr}"
            );
        }
    }
}

/// The same rules built with `seccompiler` (a linear program): the
/// reference the compact program must agree with.
fn reference_rules(profile: &Profile, network: Network, root_mapped: bool) -> Vec<u8> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen as ArgLen, SeccompCmpOp as CmpOp,
        SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let fam = |op, f: i32| Cond::new(0, ArgLen::Dword, op, f as u64).unwrap();
    let socket = match network {
        Network::None => vec![SeccompRule::new(vec![fam(CmpOp::Ne, libc::AF_UNIX)]).unwrap()],
        Network::Proxy => {
            // Refused: a family of none of the three; or an IP family
            // with any type but SOCK_STREAM.
            let mut rules = vec![SeccompRule::new(vec![
                fam(CmpOp::Ne, libc::AF_UNIX),
                fam(CmpOp::Ne, libc::AF_INET),
                fam(CmpOp::Ne, libc::AF_INET6),
            ])
            .unwrap()];
            for f in [libc::AF_INET, libc::AF_INET6] {
                for ty in (0..16u64).filter(|t| *t != libc::SOCK_STREAM as u64) {
                    let t = Cond::new(1, ArgLen::Dword, CmpOp::MaskedEq(0xf), ty).unwrap();
                    rules.push(SeccompRule::new(vec![fam(CmpOp::Eq, f), t]).unwrap());
                }
            }
            rules
        }
    };
    rules.insert(libc::SYS_socket, socket);
    let ioctl = [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|req| {
            let c = Cond::new(1, ArgLen::Dword, CmpOp::Eq, req as u64).unwrap();
            SeccompRule::new(vec![c]).unwrap()
        })
        .collect();
    rules.insert(libc::SYS_ioctl, ioctl);
    let clone = CLONE_NS_FLAGS
        .iter()
        .map(|&flag| {
            let c = Cond::new(0, ArgLen::Qword, CmpOp::MaskedEq(flag), flag).unwrap();
            SeccompRule::new(vec![c]).unwrap()
        })
        .collect();
    rules.insert(libc::SYS_clone, clone);
    for (nr, arg) in mode_calls() {
        let setid = [libc::S_ISUID, libc::S_ISGID]
            .into_iter()
            .map(|bit| {
                let c =
                    Cond::new(arg, ArgLen::Dword, CmpOp::MaskedEq(bit as u64), bit as u64).unwrap();
                SeccompRule::new(vec![c]).unwrap()
            })
            .collect();
        rules.insert(nr, setid);
    }
    let keep = libc::FALLOC_FL_KEEP_SIZE as u64;
    let c = Cond::new(1, ArgLen::Dword, CmpOp::MaskedEq(keep), keep).unwrap();
    rules.insert(
        libc::SYS_fallocate,
        vec![SeccompRule::new(vec![c]).unwrap()],
    );
    for name in &profile.seccomp.deny {
        rules.insert(syscall_number(name).unwrap(), Vec::new());
    }
    if root_mapped {
        for nr in root_mapped_denials() {
            rules.insert(nr, Vec::new());
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::try_from(std::env::consts::ARCH).unwrap(),
    )
    .unwrap();
    let program: BpfProgram = filter.try_into().unwrap();
    let mut out = Vec::new();
    for i in program {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.extend_from_slice(&[i.jt, i.jf]);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

/// Argument values around every boundary the rules test.
fn argument_grid() -> Vec<u64> {
    let mut v: Vec<u64> = vec![
        0,
        1,
        2,
        10,
        16,
        u32::MAX as u64,
        u64::MAX,
        1 << 32,
        (1 << 32) | libc::AF_UNIX as u64,
        (1 << 32) | libc::AF_INET as u64,
        libc::TIOCSTI as u64,
        libc::TIOCLINUX as u64,
        (1 << 40) | libc::TIOCSTI as u64,
        libc::TCGETS as u64,
        libc::SIGCHLD as u64,
        (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_FS) as u64,
        0o644,
        0o755,
        0o1777,
        0o2755,
        0o4755,
        0o6777,
        (1 << 32) | 0o755,
        (1 << 32) | 0o4755,
        3,
        5,
        17,
        0x801,
        0x80001,
        0x80002,
        0x80803,
        (1 << 32) | libc::AF_INET6 as u64,
    ];
    for f in CLONE_NS_FLAGS {
        v.extend([f, f | libc::SIGCHLD as u64, f << 32, !f]);
    }
    v
}

/// Runs both programs over every syscall number with arguments that
/// would trip a rule of another call, and the whole grid, in every
/// argument position, for the calls that have rules.
fn agree_everywhere(ours: &[u8], reference: &[u8]) {
    let grid = argument_grid();
    let few: Vec<u64> = vec![
        0,
        u64::MAX,
        libc::AF_INET as u64,
        libc::TIOCSTI as u64,
        libc::CLONE_NEWUSER as u64,
        0o4755,
    ];
    let mut conditional = vec![libc::SYS_socket, libc::SYS_ioctl, libc::SYS_clone];
    conditional.extend(mode_calls().into_iter().map(|(nr, _)| nr));
    conditional.push(libc::SYS_fallocate);
    let conditional: Vec<u32> = conditional.into_iter().map(|n| n as u32).collect();
    let arches = [
        X86_64,
        0x4000_0003, /* i386 */
        0xC000_00B7, /* aarch64 */
    ];
    let mut checked = 0;
    for arch in arches {
        for nr in (0..1024u32).chain([0x4000_0000 | 39, 0x4000_0000 | 101, u32::MAX]) {
            let cond = conditional.contains(&nr);
            let values = if cond { &grid } else { &few };
            for &a0 in values {
                for &a1 in values {
                    let args = [a0, a1, 0, 0, 0, 0];
                    assert_eq!(
                        run(ours, arch, nr, args),
                        run(reference, arch, nr, args),
                        "arch {arch:#x} nr {nr} args {args:x?}"
                    );
                    checked += 1;
                }
            }
            if cond {
                for pos in 2..6 {
                    for &v in values {
                        let mut args = [0u64; 6];
                        args[pos] = v;
                        assert_eq!(
                            run(ours, arch, nr, args),
                            run(reference, arch, nr, args),
                            "arch {arch:#x} nr {nr} args {args:x?}"
                        );
                    }
                }
            }
        }
    }
    assert!(checked > 70_000, "{checked}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_compact_program_decides_like_seccompiler_everywhere() {
    let p = Profile::load("default", std::path::Path::new("/")).unwrap();
    // The socket rule of an allowlist does not meet the root-mapped
    // refusals (other calls): one pass for it is enough.
    for (network, root_mapped) in [
        (Network::None, false),
        (Network::None, true),
        (Network::Proxy, false),
    ] {
        let ours = rules_alone(&p, network, root_mapped);
        let reference = reference_rules(&p, network, root_mapped);
        agree_everywhere(&ours, &reference);
    }
    let ours = rules_alone(&p, Network::None, false);
    let reference = reference_rules(&p, Network::None, false);
    // What the kernel pays at load: the program is small and no
    // syscall takes more than a dozen instructions to decide.
    let worst = (0..1024u32)
        .map(|nr| run_counting(&ours, X86_64, nr, [0; 6]).1)
        .max()
        .unwrap();
    assert!(worst <= 14, "worst case {worst} instructions");
    // The program loaded: the guard's part adds three to every call.
    let loaded = compile(&p, Network::None).unwrap().rules;
    let len = loaded.len() / 8;
    assert!(len < 150, "{len} instructions");
    let loaded_worst = (0..1024u32)
        .map(|nr| run_counting(&loaded, X86_64, nr, [0; 6]).1)
        .max()
        .unwrap();
    assert!(
        loaded_worst <= worst + 3,
        "worst case {loaded_worst} instructions"
    );
    let reference_worst = (0..1024u32)
        .map(|nr| run_counting(&reference, X86_64, nr, [0; 6]).1)
        .max()
        .unwrap();
    assert!(reference_worst > 5 * worst, "{reference_worst} vs {worst}");
}

/// The loaded program is the rules and the guard merged: it must answer
/// every call as the two stacked did, for every syscall number, x32
/// aliases and foreign architectures, the argument grid, each network
/// mode and identity, and a profile that denies a call the guard answers
/// itself (where stacking gave the guard's `ENOSYS`).
#[cfg(target_arch = "x86_64")]
#[test]
fn the_one_program_decides_like_the_rules_and_the_guard_stacked() {
    let default = Profile::load("default", std::path::Path::new("/")).unwrap();
    let mut denying = default.clone();
    denying.seccomp.deny.push("clone3".to_owned());
    let guard = to_bytes(&guard_program("x86_64"));
    let grid = argument_grid();
    let few: Vec<u64> = vec![0, u64::MAX, libc::AF_INET as u64, 0o4755, 1 << 32, 3];
    let mut conditional = vec![libc::SYS_socket, libc::SYS_ioctl, libc::SYS_clone];
    conditional.extend(mode_calls().into_iter().map(|(nr, _)| nr));
    conditional.push(libc::SYS_fallocate);
    let conditional: Vec<u32> = conditional.into_iter().map(|n| n as u32).collect();
    let arches = [
        X86_64,
        0x4000_0003, /* i386 */
        0xC000_00B7, /* aarch64 */
    ];
    let mut checked = 0;
    for p in [&default, &denying] {
        for (network, root_mapped) in [
            (Network::None, false),
            (Network::None, true),
            (Network::Proxy, false),
        ] {
            let merged = compile_for(p, network, root_mapped).unwrap().rules;
            let rules = rules_alone(p, network, root_mapped);
            for arch in arches {
                let numbers = (0..1024u32)
                    .chain((0..1024u32).map(|n| n | X32_SYSCALL_BIT))
                    .chain([u32::MAX]);
                for nr in numbers {
                    let cond = conditional.contains(&(nr & !X32_SYSCALL_BIT));
                    for &a0 in if cond { &grid } else { &few } {
                        for a1 in [0, u64::MAX, libc::SOCK_DGRAM as u64, 0o4755] {
                            let args = [a0, a1, a0, a0, 0, 0];
                            assert_eq!(
                                run(&merged, arch, nr, args),
                                stacked(&rules, &guard, arch, nr, args),
                                "arch {arch:#x} nr {nr:#x} args {args:x?}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 500_000, "{checked}");
    // The guard's answers themselves, in the merged program.
    let f = filters();
    let nosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    assert_eq!(decide(&f, X86_64, libc::SYS_clone3, [0; 6]), nosys);
    assert_eq!(decide(&f, X86_64, libc::SYS_openat2, [0; 6]), nosys);
    let x32_read = (libc::SYS_read as u32 | X32_SYSCALL_BIT) as i64;
    assert_eq!(decide(&f, X86_64, x32_read, [0; 6]), EPERM);
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    assert_eq!(decide(&f, 0x4000_0003, libc::SYS_read, [0; 6]), kill);
    let denied = compile_for(&denying, Network::None, false).unwrap();
    assert_eq!(decide(&denied, X86_64, libc::SYS_clone3, [0; 6]), nosys);
}

#[test]
fn a_program_too_large_to_jump_across_is_refused() {
    let mut rules = BTreeMap::new();
    for nr in 0..200u32 {
        rules.insert(
            nr,
            When::ArgIn {
                arg: 1,
                values: (0..8).collect(),
            },
        );
    }
    assert!(matches!(
        rules_program(X86_64, &rules, Guard::of("x86_64")),
        Err(SeccompError::TooLarge(_))
    ));
}

#[test]
fn every_deny_name_resolves() {
    let p = Profile::load("default", std::path::Path::new("/")).unwrap();
    for n in &p.seccomp.deny {
        assert!(syscall_number(n).is_some(), "{n}");
    }
}

/// The cache answers each profile, network and identity with that one's
/// own program, asked in any order, for two profiles that differ in a
/// single denied call.
#[test]
fn the_cached_program_is_the_one_compiled_for_the_same_inputs() {
    let default = Profile::load("default", std::path::Path::new("/")).unwrap();
    // One denied call fewer.
    let mut fewer = default.clone();
    fewer.seccomp.deny.pop();
    let combos = [
        (Network::None, false),
        (Network::None, true),
        (Network::Proxy, false),
    ];
    for _ in 0..2 {
        for p in [&default, &fewer] {
            for (network, root_mapped) in combos {
                let cached = compiled(p, network, root_mapped).unwrap();
                assert_eq!(
                    *cached,
                    compile_for(p, network, root_mapped).unwrap(),
                    "{} {network:?} root_mapped={root_mapped}",
                    p.seccomp.deny.len()
                );
            }
        }
    }
    assert_ne!(
        compiled(&default, Network::None, false).unwrap().rules,
        compiled(&fewer, Network::None, false).unwrap().rules
    );
    assert_ne!(
        compiled(&default, Network::None, false).unwrap().rules,
        compiled(&default, Network::None, true).unwrap().rules
    );
}
