//! Seccomp filters compiled from a profile.
//!
//! One classic-BPF program is produced and handed to bubblewrap on a file
//! descriptor (`--add-seccomp-fd`). It is made of two parts, which were
//! once two programs stacked by the kernel (the strictest answer wins);
//! bubblewrap loads its programs twice (into its own pid 1 and into the
//! command's process), and each load runs the program for every syscall
//! number to fill the kernel's action cache and JIT-compiles it, so one
//! program is cheaper to load than two. The guard's checks come first:
//! stacked, the kernel ran the guard (installed last) first and kept its
//! answer unless the rules' was stricter, and the rules were never
//! stricter where the guard refuses (they kill only a foreign
//! architecture, which the merged program checks before anything). The
//! tests run the merged program against the stacked pair, as the kernel
//! decides between them, over every syscall number and a grid of
//! arguments:
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
//! The guard part's arch check is the rules' own. The program is immutable
//! bytes once compiled; each execution writes it into its own sealed
//! memfd, so concurrent executions share nothing.
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

/// The compiled filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filters {
    /// The one program loaded: the guard's refusals, then the rules.
    pub rules: Vec<u8>,
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

/// The programs of the profiles in use: a daemon compiles the same one
/// for each execution, twice (its sandbox's and its receipt's digest).
static COMPILED: crate::memo::Recent<(Profile, Network, bool), std::sync::Arc<Filters>> =
    crate::memo::Recent::new(8);

/// [`compile_for`], made once for each profile, network and identity
/// among the last few used.
pub fn compiled(
    profile: &Profile,
    network: Network,
    root_mapped: bool,
) -> Result<std::sync::Arc<Filters>, SeccompError> {
    COMPILED.get_or_try(
        |(p, n, r)| *n == network && *r == root_mapped && p == profile,
        || (profile.clone(), network, root_mapped),
        || compile_for(profile, network, root_mapped).map(std::sync::Arc::new),
    )
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
    let rules = refusals(profile, network, root_mapped)?;
    Ok(Filters {
        rules: to_bytes(&rules_program(audit_arch, &rules, Guard::of(arch))?),
    })
}

/// The refusals of the rules part, with the root-mapped ones when asked.
fn refusals(
    profile: &Profile,
    network: Network,
    root_mapped: bool,
) -> Result<BTreeMap<u32, When>, SeccompError> {
    let mut rules = rules_of(profile, network)?;
    if root_mapped {
        for nr in root_mapped_denials() {
            rules.insert(nr as u32, When::Always);
        }
    }
    Ok(rules)
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

/// The guard's part of the program, after the arch check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// None: the rules alone (what the tests compare with `seccompiler`).
    #[cfg(test)]
    Without,
    /// x32-ABI numbers refused (x86-64 only), `clone3` and `openat2` →
    /// `ENOSYS`.
    With { x32: bool },
}

impl Guard {
    fn of(arch: &str) -> Guard {
        Guard::With {
            x32: arch == "x86_64",
        }
    }
}

/// The filter: arch check, the guard's refusals, a binary search on the
/// syscall number, then the argument checks of the few conditional rules.
fn rules_program(
    audit_arch: u32,
    rules: &BTreeMap<u32, When>,
    guard: Guard,
) -> Result<Vec<Insn>, SeccompError> {
    let mut a = Asm::default();
    let (allow, deny, native) = (a.label(), a.label(), a.label());
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jump(BPF_JMP_JEQ_K, audit_arch, To::Label(native), To::Next);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    a.place(native);
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    // `Guard::Without` exists only in the tests.
    #[allow(irrefutable_let_patterns)]
    if let Guard::With { x32 } = guard {
        // Returns right here, not through labels at the end, so the
        // guard adds no long jump.
        if x32 {
            let native_abi = a.label();
            a.jump(
                BPF_JMP_JSET_K,
                X32_SYSCALL_BIT,
                To::Next,
                To::Label(native_abi),
            );
            a.stmt(BPF_RET_K, errno(libc::EPERM));
            a.place(native_abi);
        }
        let (nosys, checked) = (a.label(), a.label());
        a.jump(
            BPF_JMP_JEQ_K,
            libc::SYS_clone3 as u32,
            To::Label(nosys),
            To::Next,
        );
        a.jump(
            BPF_JMP_JEQ_K,
            libc::SYS_openat2 as u32,
            To::Label(nosys),
            To::Label(checked),
        );
        a.place(nosys);
        a.stmt(BPF_RET_K, errno(libc::ENOSYS));
        a.place(checked);
    }

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

/// The guard as the program of its own it once was: arch check, x32
/// refusal, clone3 and openat2 → ENOSYS (their flags and modes live in
/// memory a filter cannot read; libc falls back to `clone` and `openat`,
/// which are checked). The tests stack it on the rules alone as the
/// reference the merged program must decide like.
#[cfg(test)]
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
#[path = "seccomp_tests.rs"]
mod tests;
