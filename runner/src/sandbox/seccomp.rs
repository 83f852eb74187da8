//! Seccomp filters compiled from a profile.
//!
//! Two classic-BPF programs are produced and handed to bubblewrap on file
//! descriptors (`--add-seccomp-fd`, stacked by the kernel, the strictest
//! answer wins):
//!
//! 1. **rules**: a foreign architecture kills the process; each syscall of
//!    the profile's deny list returns `EPERM`; `socket(2)` for any family
//!    but `AF_UNIX` returns `EPERM` while the network is off, and with a
//!    job's allowlist ([`Network::Proxy`]) for any family but `AF_UNIX`
//!    and stream sockets of `AF_INET`/`AF_INET6` (the sandbox's network
//!    namespace has only loopback, where the proxy's forwarder listens;
//!    netlink, packet, raw and datagram sockets stay refused); `ioctl`
//!    `TIOCSTI`/`TIOCLINUX` returns `EPERM`; `clone(2)` with a namespace flag
//!    returns `EPERM`. The syscall number is found by binary search, so any
//!    syscall is decided in about ten instructions. That matters at load
//!    time: for every syscall number the kernel runs the filter to learn
//!    which ones it may allow without running it again (the seccomp action
//!    cache), and it JIT-compiles it. The linear program `seccompiler` makes
//!    for the same rules (304 instructions; ~100 run per allowed syscall)
//!    cost each sandbox 0.3-0.8 ms to load here; this one is a third the
//!    size and a tenth the work. The tests check, over every syscall number
//!    and a grid of arguments, that both programs decide alike, so
//!    `seccompiler` stays the reference.
//! 2. **guard** (hand-written, a few instructions): x32-ABI syscall numbers
//!    (bit 30 set on x86-64) return `EPERM`, because the rules filter matches
//!    exact numbers and would let the x32 alias of a denied call through;
//!    `clone3` and `openat2` return `ENOSYS`, since their flags and modes
//!    live in memory a filter cannot read, and libc then falls back to
//!    `clone` and `openat`, which are checked.
//!
//! Programs are immutable bytes once compiled; each execution writes them
//! into its own sealed memfd, so concurrent executions share nothing.
//!
//! Pure code: no I/O.

// ioctl request constants are u64 on glibc but not on every libc.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;

use crate::sandbox::profile::{Network, Profile};
use crate::sandbox::syscalls::syscall_number;

/// Why a filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filters are not supported on the {arch} architecture")]
    Arch { arch: &'static str },
    #[error("unknown syscall {name:?}")]
    UnknownSyscall { name: String },
    #[error("the seccomp filter is too large ({0} instructions; a jump cannot reach)")]
    TooLarge(usize),
}

/// One classic-BPF instruction, as the kernel's `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// When a syscall of the rules is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
enum When {
    Always,
    /// The low 32 bits of argument `arg` differ from `value`.
    ArgNe {
        arg: u8,
        value: u32,
    },
    /// The low 32 bits of argument `arg` equal one of `values`.
    ArgIn {
        arg: u8,
        values: Vec<u32>,
    },
    /// The low 32 bits of argument `arg` have a bit of `mask` set.
    ArgAnyBit {
        arg: u8,
        mask: u32,
    },
    /// `socket(family, type, …)` with a family outside `any_type`, or one
    /// of `stream` with a type other than `SOCK_STREAM` (flags aside).
    Socket {
        any_type: Vec<u32>,
        stream: Vec<u32>,
    },
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

/// The setuid and setgid mode bits, refused in every mode argument.
const SETID_BITS: u32 = (libc::S_ISUID | libc::S_ISGID) as u32;

/// `fchmodat2`, `setxattrat`, `removexattrat` and `file_setattr`:
/// numbered alike on every architecture we build for, newer than some libc
/// releases.
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;
const SYS_FILE_SETATTR: i64 = 469;

/// Calls that take a file mode, with the index of the mode argument. A
/// mode with the setuid or setgid bit is refused, whatever the identity:
/// a set-id file left in a workspace would hand its owner's uid to anyone
/// who can reach it.
fn mode_calls() -> Vec<(i64, u8)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    calls
}

/// Calls refused outright when the sandbox's uid is root of the parent
/// user namespace: host-root files (device nodes, anything of the
/// runner's) would pass the owner check of `chmod` and of ACL changes.
fn root_mapped_denials() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        SYS_FCHMODAT2,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
        // The inode flags and project id of FS_IOC_FSSETXATTR, as a call
        // (its read side, `file_getattr`, changes nothing and stays).
        SYS_FILE_SETATTR,
        // Times too: the host's device nodes are binds of its own.
        libc::SYS_utimensat,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_chmod,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    calls
}

/// Compiles the filters of `profile` for the running architecture, for a
/// sandbox whose uid is not root of the parent user namespace.
pub fn compile(profile: &Profile, network: Network) -> Result<Filters, SeccompError> {
    compile_for(profile, network, false)
}

/// Compiles the filters of `profile`; `root_mapped` adds the refusals of
/// `root_mapped_denials` (see [`crate::sandbox::identity`]).
pub fn compile_for(
    profile: &Profile,
    network: Network,
    root_mapped: bool,
) -> Result<Filters, SeccompError> {
    let arch = std::env::consts::ARCH;
    let audit_arch = audit_arch(arch).ok_or(SeccompError::Arch { arch })?;
    let mut rules = rules_of(profile, network)?;
    if root_mapped {
        for nr in root_mapped_denials() {
            rules.insert(nr as u32, When::Always);
        }
    }
    Ok(Filters {
        rules: to_bytes(&rules_program(audit_arch, &rules)?),
        guard: to_bytes(&guard_program(arch)),
    })
}

/// `AUDIT_ARCH_*` of the architectures we build filters for.
fn audit_arch(arch: &str) -> Option<u32> {
    match arch {
        "x86_64" => Some(0xC000_003E),
        "aarch64" => Some(0xC000_00B7),
        "riscv64" => Some(0xC000_00F3),
        _ => None,
    }
}

/// The refusals of the rules filter, by syscall number.
fn rules_of(profile: &Profile, network: Network) -> Result<BTreeMap<u32, When>, SeccompError> {
    let mut rules = BTreeMap::new();
    let nr = |name: &str| {
        syscall_number(name)
            .map(|n| n as u32)
            .ok_or_else(|| SeccompError::UnknownSyscall {
                name: name.to_owned(),
            })
    };
    match network {
        Network::None => {
            rules.insert(
                nr("socket")?,
                When::ArgNe {
                    arg: 0,
                    value: libc::AF_UNIX as u32,
                },
            );
        }
        Network::Proxy => {
            rules.insert(
                nr("socket")?,
                When::Socket {
                    any_type: vec![libc::AF_UNIX as u32],
                    stream: vec![libc::AF_INET as u32, libc::AF_INET6 as u32],
                },
            );
        }
    }
    // The kernel reads the request as 32 bits; compare only those, so high
    // garbage bits cannot dodge the rule.
    rules.insert(
        nr("ioctl")?,
        When::ArgIn {
            arg: 1,
            values: vec![libc::TIOCSTI as u32, libc::TIOCLINUX as u32],
        },
    );
    // Every namespace flag lives in the low 32 bits of the flags word.
    let mask = CLONE_NS_FLAGS.iter().fold(0u64, |m, f| m | f);
    rules.insert(
        nr("clone")?,
        When::ArgAnyBit {
            arg: clone_flags_arg(),
            mask: mask as u32,
        },
    );
    for (nr, arg) in mode_calls() {
        rules.insert(
            nr as u32,
            When::ArgAnyBit {
                arg,
                mask: SETID_BITS,
            },
        );
    }
    // FALLOC_FL_KEEP_SIZE allocates blocks past the file's size, where
    // RLIMIT_FSIZE does not look: a single call could fill the host disk
    // before the disk watcher's next measurement.
    rules.insert(
        libc::SYS_fallocate as u32,
        When::ArgAnyBit {
            arg: 1,
            mask: libc::FALLOC_FL_KEEP_SIZE as u32,
        },
    );
    // An unconditional denial of the same call wins over a rule above.
    for name in &profile.seccomp.deny {
        rules.insert(nr(name)?, When::Always);
    }
    Ok(rules)
}

/// A jump target while assembling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Label(usize),
}

/// A tiny assembler: jumps name labels, resolved to the 8-bit forward
/// offsets of classic BPF at the end.
#[derive(Default)]
struct Asm {
    code: Vec<(u16, To, To, u32)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn place(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push((code, To::Next, To::Next, k));
    }
    fn jump(&mut self, code: u16, k: u32, t: To, f: To) {
        self.code.push((code, t, f, k));
    }
    fn finish(self) -> Result<Vec<Insn>, SeccompError> {
        let len = self.code.len();
        let offset = |at: usize, to: To| -> u32 {
            match to {
                To::Next => 0,
                To::Label(l) => {
                    let target = self.labels[l].expect("every label is placed");
                    (target - at - 1) as u32
                }
            }
        };
        let short = |o: u32| u8::try_from(o).map_err(|_| SeccompError::TooLarge(len));
        self.code
            .iter()
            .enumerate()
            .map(|(at, &(code, t, f, k))| {
                if code == BPF_JMP_JA {
                    return Ok(stmt(code, offset(at, t)));
                }
                Ok(jump(code, k, short(offset(at, t))?, short(offset(at, f))?))
            })
            .collect()
    }
}

/// The rules filter: arch check, a binary search on the syscall number,
/// then the argument checks of the few conditional rules.
fn rules_program(audit_arch: u32, rules: &BTreeMap<u32, When>) -> Result<Vec<Insn>, SeccompError> {
    let mut a = Asm::default();
    let (allow, deny, native) = (a.label(), a.label(), a.label());
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jump(BPF_JMP_JEQ_K, audit_arch, To::Label(native), To::Next);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    a.place(native);
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);

    // Where each syscall goes once found: `deny`, or its argument check.
    let mut bodies = Vec::new();
    let entries: Vec<(u32, To)> = rules
        .iter()
        .map(|(&nr, when)| {
            if *when == When::Always {
                (nr, To::Label(deny))
            } else {
                let l = a.label();
                bodies.push((l, when.clone()));
                (nr, To::Label(l))
            }
        })
        .collect();
    search(&mut a, &entries, allow);

    for (l, when) in bodies {
        a.place(l);
        match when {
            When::Always => unreachable!("unconditional rules jump to `deny`"),
            When::ArgNe { arg, value } => {
                a.stmt(BPF_LD_W_ABS, arg_low(arg));
                a.jump(BPF_JMP_JEQ_K, value, To::Label(allow), To::Label(deny));
            }
            When::ArgIn { arg, values } => {
                a.stmt(BPF_LD_W_ABS, arg_low(arg));
                for v in values {
                    a.jump(BPF_JMP_JEQ_K, v, To::Label(deny), To::Next);
                }
                a.jump(BPF_JMP_JA, 0, To::Label(allow), To::Next);
            }
            When::ArgAnyBit { arg, mask } => {
                a.stmt(BPF_LD_W_ABS, arg_low(arg));
                a.jump(BPF_JMP_JSET_K, mask, To::Label(deny), To::Label(allow));
            }
            When::Socket { any_type, stream } => {
                let check_type = a.label();
                a.stmt(BPF_LD_W_ABS, arg_low(0));
                for f in any_type {
                    a.jump(BPF_JMP_JEQ_K, f, To::Label(allow), To::Next);
                }
                for f in stream {
                    a.jump(BPF_JMP_JEQ_K, f, To::Label(check_type), To::Next);
                }
                a.jump(BPF_JMP_JA, 0, To::Label(deny), To::Next);
                a.place(check_type);
                // The type word carries SOCK_NONBLOCK and SOCK_CLOEXEC
                // above the type itself.
                a.stmt(BPF_LD_W_ABS, arg_low(1));
                a.stmt(BPF_ALU_AND_K, SOCK_TYPE_MASK);
                a.jump(
                    BPF_JMP_JEQ_K,
                    libc::SOCK_STREAM as u32,
                    To::Label(allow),
                    To::Label(deny),
                );
            }
        }
    }
    a.place(allow);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    a.place(deny);
    a.stmt(BPF_RET_K, errno(libc::EPERM));
    a.finish()
}

/// Binary search over sorted `(nr, target)` entries with the number in A;
/// falls to `allow` when the number is not among them.
fn search(a: &mut Asm, entries: &[(u32, To)], allow: usize) {
    if entries.len() <= 4 {
        for &(nr, to) in entries {
            a.jump(BPF_JMP_JEQ_K, nr, to, To::Next);
        }
        a.jump(BPF_JMP_JA, 0, To::Label(allow), To::Next);
        return;
    }
    let mid = entries.len() / 2;
    let upper = a.label();
    a.jump(BPF_JMP_JGE_K, entries[mid].0, To::Label(upper), To::Next);
    search(a, &entries[..mid], allow);
    a.place(upper);
    search(a, &entries[mid..], allow);
}

/// Offset of the low 32 bits of argument `arg` in `struct seccomp_data`.
fn arg_low(arg: u8) -> u32 {
    let base = 16 + 8 * arg as u32;
    if cfg!(target_endian = "little") {
        base
    } else {
        base + 4
    }
}

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// Which argument of `clone` carries the flags (the first everywhere we
/// build for).
fn clone_flags_arg() -> u8 {
    0
}

// Classic BPF opcodes (linux/bpf_common.h) and seccomp return values.
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
/// The bits of `socket(2)`'s type that are the type (linux/net.h).
const SOCK_TYPE_MASK: u32 = 0xf;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// The guard filter: arch check, x32 refusal, clone3 and openat2 →
/// ENOSYS (their flags and modes live in memory a filter cannot read;
/// libc falls back to `clone` and `openat`, which are checked).
fn guard_program(arch: &str) -> Vec<Insn> {
    let audit_arch = audit_arch(arch).unwrap_or(0);
    let x32 = arch == "x86_64";
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
    p.push(jump(BPF_JMP_JEQ_K, libc::SYS_clone3 as u32, 1, 0));
    p.push(jump(BPF_JMP_JEQ_K, libc::SYS_openat2 as u32, 0, 1));
    p.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
    p.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    p
}

/// Serializes a program as the kernel's `struct sock_filter` array.
fn to_bytes(program: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for ins in program {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
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
        let falloc =
            |mode: u64| decide(&f, X86_64, libc::SYS_fallocate, [3, mode, 0, 1 << 30, 0, 0]);
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
                    let c = Cond::new(arg, ArgLen::Dword, CmpOp::MaskedEq(bit as u64), bit as u64)
                        .unwrap();
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
            let ours = compile_for(&p, network, root_mapped).unwrap().rules;
            let reference = reference_rules(&p, network, root_mapped);
            agree_everywhere(&ours, &reference);
        }
        let ours = compile(&p, Network::None).unwrap().rules;
        let reference = reference_rules(&p, Network::None, false);
        // What the kernel pays at load: the program is small and no
        // syscall takes more than a dozen instructions to decide.
        let len = ours.len() / 8;
        assert!(len < 150, "{len} instructions");
        let worst = (0..1024u32)
            .map(|nr| run_counting(&ours, X86_64, nr, [0; 6]).1)
            .max()
            .unwrap();
        assert!(worst <= 14, "worst case {worst} instructions");
        let reference_worst = (0..1024u32)
            .map(|nr| run_counting(&reference, X86_64, nr, [0; 6]).1)
            .max()
            .unwrap();
        assert!(reference_worst > 5 * worst, "{reference_worst} vs {worst}");
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
            rules_program(X86_64, &rules),
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
}
