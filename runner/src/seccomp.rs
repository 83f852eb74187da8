//! Seccomp filters compiled from a profile.
//!
//! Two classic-BPF programs are produced and handed to bubblewrap on file
//! descriptors (`--add-seccomp-fd`, stacked by the kernel, the strictest
//! answer wins):
//!
//! 1. **rules** (built with `seccompiler`): a foreign architecture kills the
//!    process; each syscall of the profile's deny list returns `EPERM`;
//!    `socket(2)` for any family but `AF_UNIX` returns `EPERM` while the
//!    network is off; `ioctl` `TIOCSTI`/`TIOCLINUX` returns `EPERM`;
//!    `clone(2)` with a namespace flag returns `EPERM`.
//! 2. **guard** (hand-written, a few instructions): x32-ABI syscall numbers
//!    (bit 30 set on x86-64) return `EPERM`, because the rules filter matches
//!    exact numbers and would let the x32 alias of a denied call through;
//!    `clone3` returns `ENOSYS`, since its flags live in memory a filter
//!    cannot read, and libc then falls back to `clone`, which is checked.
//!
//! Programs are immutable bytes once compiled; each execution writes them
//! into its own sealed memfd, so concurrent executions share nothing.
//!
//! Pure code: no I/O.

// ioctl request constants are u64 on glibc but not on every libc.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen as ArgLen, SeccompCmpOp as CmpOp,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

use crate::profile::{Network, Profile};

/// Why a filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filters are not supported on the {arch} architecture")]
    Arch { arch: &'static str },
    #[error("unknown syscall {name:?}")]
    UnknownSyscall { name: String },
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
}

/// The compiled filters, in the order they are installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filters {
    pub rules: Vec<u8>,
    pub guard: Vec<u8>,
}

/// Namespace flags refused in `clone(2)`.
const CLONE_NS_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// Compiles the filters of `profile` for the running architecture.
pub fn compile(profile: &Profile, network: Network) -> Result<Filters, SeccompError> {
    let arch = std::env::consts::ARCH;
    let target: TargetArch = arch.try_into().map_err(|_| SeccompError::Arch { arch })?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for name in &profile.seccomp.deny {
        let nr = syscall_number(name)
            .ok_or_else(|| SeccompError::UnknownSyscall { name: name.clone() })?;
        // An empty rule list matches the syscall unconditionally.
        rules.insert(nr, Vec::new());
    }
    match network {
        Network::None => {
            let not_unix = Cond::new(0, ArgLen::Dword, CmpOp::Ne, libc::AF_UNIX as u64)?;
            rules.insert(libc::SYS_socket, vec![SeccompRule::new(vec![not_unix])?]);
        }
    }
    let ioctl_rules = [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|req| {
            // The kernel reads the request as 32 bits; compare only those,
            // so high garbage bits cannot dodge the rule.
            SeccompRule::new(vec![Cond::new(1, ArgLen::Dword, CmpOp::Eq, req as u64)?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    let clone_rules = CLONE_NS_FLAGS
        .iter()
        .map(|&flag| {
            SeccompRule::new(vec![Cond::new(
                clone_flags_arg(),
                ArgLen::Qword,
                CmpOp::MaskedEq(flag),
                flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);

    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target,
    )?;
    let program: BpfProgram = filter.try_into()?;
    Ok(Filters {
        rules: to_bytes(&program),
        guard: to_bytes(&guard_program(arch)),
    })
}

/// Which argument of `clone` carries the flags (the first everywhere we
/// build for).
fn clone_flags_arg() -> u8 {
    0
}

// Classic BPF opcodes (linux/bpf_common.h) and seccomp return values.
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The guard filter: arch check, x32 refusal, clone3 → ENOSYS.
fn guard_program(arch: &str) -> BpfProgram {
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA);
    let (audit_arch, x32) = match arch {
        "x86_64" => (0xC000_003E_u32, true),
        "aarch64" => (0xC000_00B7_u32, false),
        _ => (0xC000_00F3_u32, false), // riscv64
    };
    let mut p = vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JMP_JEQ_K, audit_arch, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
    ];
    if x32 {
        p.push(jump(BPF_JMP_JSET_K, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    p.push(jump(BPF_JMP_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    p.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
    p.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    p
}

/// Serializes a program as the kernel's `struct sock_filter` array.
fn to_bytes(program: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for ins in program {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

/// Syscall number of `name` on the running architecture, for the names a
/// profile may deny.
pub fn syscall_number(name: &str) -> Option<i64> {
    let table: &[(&str, i64)] = &[
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("move_mount", libc::SYS_move_mount),
        ("open_tree", libc::SYS_open_tree),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("acct", libc::SYS_acct),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("reboot", libc::SYS_reboot),
        ("settimeofday", libc::SYS_settimeofday),
        ("clock_settime", libc::SYS_clock_settime),
        ("clock_adjtime", libc::SYS_clock_adjtime),
        ("adjtimex", libc::SYS_adjtimex),
        ("syslog", libc::SYS_syslog),
        ("quotactl", libc::SYS_quotactl),
        ("lookup_dcookie", libc::SYS_lookup_dcookie),
        ("vhangup", libc::SYS_vhangup),
        ("personality", libc::SYS_personality),
        ("clone", libc::SYS_clone),
        ("clone3", libc::SYS_clone3),
        ("socket", libc::SYS_socket),
        ("ioctl", libc::SYS_ioctl),
    ];
    table.iter().find(|(n, _)| *n == name).map(|(_, nr)| *nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny classic-BPF interpreter, enough for our filters, so the
    /// decisions can be checked without loading anything into the kernel.
    fn run(program: &[u8], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let ins: Vec<sock_filter> = program
            .chunks(8)
            .map(|c| sock_filter {
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
                    if (off - 16) % 8 == 0 {
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
        loop {
            let i = &ins[pc];
            pc += 1;
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
                0x06 => return i.k,
                0x16 => return a,
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
        // Stacked filters: the lowest action value wins, as in the kernel
        // (KILL < ERRNO < ALLOW for what we use).
        let a = run(&f.rules, arch, nr as u32, args);
        let b = run(&f.guard, arch, nr as u32, args);
        let rank = |v: u32| v & libc::SECCOMP_RET_ACTION_FULL;
        if rank(a) <= rank(b) {
            a
        } else {
            b
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
        // x32 alias of an allowed call: refused.
        assert_eq!(decide(&f, X86_64, 0x4000_0000 | libc::SYS_getpid, z), EPERM);
        // i386: killed.
        assert_eq!(
            decide(&f, 0x4000_0003, 20, z),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn every_deny_name_resolves() {
        let p = Profile::load("default", std::path::Path::new("/")).unwrap();
        for n in &p.seccomp.deny {
            assert!(syscall_number(n).is_some(), "{n}");
        }
    }
}
