//! The small exec shim: what bubblewrap executes in a sandbox without a
//! network allowlist, in place of the runner's own binary.
//!
//! It does what `runner/src/sandbox/shim.rs` describes, for the mode
//! `--skill-runner-exec-shim [--nproc N] -- COMMAND…`, with the same
//! argv, descriptors, report bytes and exit codes, but as a program of its
//! own: no C library, no Rust runtime, not position-independent. The
//! runner's binary is a 50 MB static PIE linked with glibc; starting it
//! costs the relocation of ~11,000 entries, glibc's CPU feature and cache
//! probing (CPUID, a trap to the hypervisor in a virtual machine, dozens of
//! times) and the Rust runtime's set-up, about 1.7 ms of CPU per sandbox
//! here. This one is a few kilobytes, makes only the system calls below
//! and is mapped as it is.
//!
//! Built by `runner/build.rs` with the same `rustc` (`panic=abort`, no
//! standard library, `-nostdlib -static`), carried inside the runner and
//! handed to bubblewrap as a sealed memfd (`crate::sandbox::shim::executable`).
//!
//! Steps: parse the arguments (anything unexpected: a message on stderr,
//! which is bubblewrap's, and exit 125 before the report: a sandbox that
//! was not finished); set `RLIMIT_NPROC` if asked; write the report byte on
//! fd 7; move fd 9 to fd 2; restore SIGPIPE's default action; mark every
//! descriptor above 2 close-on-exec; execute the command as `execvp` does
//! (a `PATH` search, `/bin/sh` for a file without a known format); if that
//! fails, write the errno (4 bytes, little-endian) on fd 7 and exit 127
//! (not found) or 126.

#![no_std]
#![no_main]
// Keeps LLVM from turning the byte loops of memcpy and friends below into
// calls to themselves.
#![no_builtins]

use core::arch::{asm, global_asm};

// The numbers of the sandbox's table, runner/src/sandbox/fds.rs (a test
// there checks these copies).
const FD_REPORT: usize = 7;
const FD_STDERR: usize = 9;
const STARTED: u8 = b'S';
const MODE: &[u8] = b"--skill-runner-exec-shim";
const NPROC: &[u8] = b"--nproc";
const EXIT_UNFINISHED: usize = 125;

const ENOENT: isize = 2;
const EINTR: isize = 4;
const ENOEXEC: isize = 8;
const EACCES: isize = 13;
const ENOTDIR: isize = 20;
const EINVAL: isize = 22;
const E2BIG: isize = 7;
const ENAMETOOLONG: isize = 36;

const RLIMIT_NPROC: usize = 6;
const SIGPIPE: usize = 13;
const F_GETFD: usize = 1;
const F_SETFD: usize = 2;
const FD_CLOEXEC: usize = 1;
const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const WRITE: usize = 1;
    pub const CLOSE: usize = 3;
    pub const RT_SIGACTION: usize = 13;
    pub const EXECVE: usize = 59;
    pub const FCNTL: usize = 72;
    pub const EXIT_GROUP: usize = 231;
    pub const DUP3: usize = 292;
    pub const PRLIMIT64: usize = 302;
    pub const CLOSE_RANGE: usize = 436;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub const WRITE: usize = 64;
    pub const CLOSE: usize = 57;
    pub const RT_SIGACTION: usize = 134;
    pub const EXECVE: usize = 221;
    pub const FCNTL: usize = 25;
    pub const EXIT_GROUP: usize = 94;
    pub const DUP3: usize = 24;
    pub const PRLIMIT64: usize = 261;
    pub const CLOSE_RANGE: usize = 436;
}

// The entry point: the kernel leaves argc, argv and envp on the stack.
#[cfg(target_arch = "x86_64")]
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {main}",
    "ud2",
    main = sym main,
);

#[cfg(target_arch = "aarch64")]
global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x0, sp",
    "bl {main}",
    "brk #0",
    main = sym main,
);

#[cfg(target_arch = "x86_64")]
unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY (caller): the arguments are valid for system call n.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY (caller): the arguments are valid for system call n.
    unsafe {
        asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            in("x3") d,
            options(nostack),
        );
    }
    ret
}

fn exit(code: usize) -> ! {
    // SAFETY: exit_group takes an integer and does not return.
    unsafe {
        syscall(nr::EXIT_GROUP, code, 0, 0, 0);
    }
    loop {}
}

fn write_all(fd: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live buffer of the given length.
        let n = unsafe { syscall(nr::WRITE, fd, bytes.as_ptr() as usize, bytes.len(), 0) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n != -EINTR {
            return;
        }
    }
}

/// Ends the shim before its report: bubblewrap's stderr says why.
fn unfinished(why: &[u8]) -> ! {
    write_all(2, b"skill-runner: ");
    write_all(2, why);
    write_all(2, b"\n");
    exit(EXIT_UNFINISHED);
}

/// The NUL-terminated string at `p`, without its NUL.
///
/// # Safety
/// `p` points at a NUL-terminated string that lives for the process.
unsafe fn cstr(p: *const u8) -> &'static [u8] {
    let mut n = 0;
    // SAFETY (caller): the string is NUL-terminated.
    unsafe {
        while *p.add(n) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

/// Room for a path tried during the `PATH` search (`PATH_MAX`).
const PATH_MAX: usize = 4096;
/// Room for `/bin/sh FILE ARGS…` when a file has no known format.
const SCRIPT_ARGS: usize = 1 << 16;
static mut SCRIPT_ARGV: [*const u8; SCRIPT_ARGS] = [core::ptr::null(); SCRIPT_ARGS];

/// `execve`, then, for a file without a known format, `/bin/sh FILE ARGS…`
/// as `execvp` does. Returns the errno.
///
/// # Safety
/// `path` is NUL-terminated; `argv` and `envp` are null-terminated arrays
/// of NUL-terminated strings with `argc` entries in `argv`.
unsafe fn try_exec(
    path: *const u8,
    argv: *const *const u8,
    argc: usize,
    envp: *const *const u8,
) -> isize {
    // SAFETY (caller): valid, terminated arrays and strings.
    unsafe {
        let e = -syscall(nr::EXECVE, path as usize, argv as usize, envp as usize, 0);
        if e != ENOEXEC {
            return e;
        }
        if argc + 2 > SCRIPT_ARGS {
            return E2BIG;
        }
        let script = core::ptr::addr_of_mut!(SCRIPT_ARGV);
        let script = &mut *script;
        script[0] = c"/bin/sh".as_ptr().cast();
        script[1] = path;
        for i in 1..argc {
            script[i + 1] = *argv.add(i);
        }
        script[argc + 1] = core::ptr::null();
        // As execvp: what executing the shell failed with.
        -syscall(
            nr::EXECVE,
            script[0] as usize,
            script.as_ptr() as usize,
            envp as usize,
            0,
        )
    }
}

/// `execvp`: a name with a slash is executed as it is, any other is looked
/// up in the `PATH` of the environment (`/bin:/usr/bin` without one).
/// Returns the errno of the failure that explains best why nothing ran.
///
/// # Safety
/// As [`try_exec`].
unsafe fn execvp(argv: *const *const u8, argc: usize, envp: *const *const u8) -> isize {
    // SAFETY (caller): valid, terminated arrays and strings.
    unsafe {
        let file_ptr = *argv;
        let file = cstr(file_ptr);
        if file.is_empty() {
            return ENOENT;
        }
        if file.contains(&b'/') {
            return try_exec(file_ptr, argv, argc, envp);
        }
        let mut path: &[u8] = b"/bin:/usr/bin";
        let mut e = envp;
        while !(*e).is_null() {
            let var = cstr(*e);
            if let Some(value) = var.strip_prefix(b"PATH=") {
                path = value;
                break;
            }
            e = e.add(1);
        }
        let mut buf = [0u8; PATH_MAX];
        let mut seen_eacces = false;
        let mut last = ENOENT;
        for dir in path.split(|&b| b == b':') {
            // An empty entry is the current folder.
            let len = if dir.is_empty() {
                file.len()
            } else {
                dir.len() + 1 + file.len()
            };
            if len + 1 > PATH_MAX {
                last = ENAMETOOLONG;
                continue;
            }
            let mut at = 0;
            if !dir.is_empty() {
                buf[..dir.len()].copy_from_slice(dir);
                buf[dir.len()] = b'/';
                at = dir.len() + 1;
            }
            buf[at..at + file.len()].copy_from_slice(file);
            buf[len] = 0;
            match try_exec(buf.as_ptr(), argv, argc, envp) {
                EACCES => seen_eacces = true,
                // Not here: go on looking, as execvp does.
                ENOENT | ENOTDIR | ENAMETOOLONG => {}
                // 19 ENODEV, 116 ESTALE, 110 ETIMEDOUT: likewise.
                19 | 116 | 110 => {}
                other => return other,
            }
            last = ENOENT;
        }
        if seen_eacces {
            EACCES
        } else {
            last
        }
    }
}

/// # Safety
/// Called once, from `_start`, with the initial stack pointer.
unsafe extern "C" fn main(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack: argc, argv[argc], NULL, envp…
    let (argc, argv, envp) = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const u8;
        (argc, argv, argv.add(argc + 1))
    };
    // SAFETY: i < argc indexes argv; each entry is a C string.
    let arg = |i: usize| unsafe { cstr(*argv.add(i)) };
    if argc < 2 || arg(1) != MODE {
        unfinished(b"bad shim arguments: the small exec shim takes --skill-runner-exec-shim");
    }
    let mut i = 2;
    let mut nproc = None;
    loop {
        if i >= argc {
            unfinished(b"bad shim arguments: no -- before the command");
        }
        let a = arg(i);
        i += 1;
        if a == b"--" {
            break;
        } else if a == NPROC {
            if i >= argc {
                unfinished(b"bad shim arguments: --nproc needs a number");
            }
            match parse_u64(arg(i)) {
                Some(n) => nproc = Some(n),
                None => unfinished(b"bad shim arguments: --nproc needs a number"),
            }
            i += 1;
        } else {
            unfinished(b"bad shim arguments: unknown shim option");
        }
    }
    if let Some(n) = nproc {
        let limit = [n, n];
        // SAFETY: prlimit64 on this process with a live two-word limit.
        let r = unsafe { syscall(nr::PRLIMIT64, 0, RLIMIT_NPROC, limit.as_ptr() as usize, 0) };
        if r < 0 {
            unfinished(b"cannot set RLIMIT_NPROC");
        }
    }
    write_all(FD_REPORT, &[STARTED]);
    // SAFETY: fcntl, dup3, close and rt_sigaction take integers and a
    // live, zeroed sigaction (SIG_DFL).
    unsafe {
        if syscall(nr::FCNTL, FD_STDERR, F_GETFD, 0, 0) >= 0 {
            syscall(nr::DUP3, FD_STDERR, 2, 0, 0);
            syscall(nr::CLOSE, FD_STDERR, 0, 0, 0);
        }
        let default_action = [0usize; 4];
        syscall(
            nr::RT_SIGACTION,
            SIGPIPE,
            default_action.as_ptr() as usize,
            0,
            8,
        );
        if syscall(
            nr::CLOSE_RANGE,
            3,
            u32::MAX as usize,
            CLOSE_RANGE_CLOEXEC,
            0,
        ) != 0
        {
            // Kernels before 5.11: one by one up to a generous bound.
            for fd in 3..65536 {
                syscall(nr::FCNTL, fd, F_SETFD, FD_CLOEXEC, 0);
            }
        }
    }
    let command = argc - i;
    let errno = if command == 0 {
        EINVAL
    } else {
        // SAFETY: argv[i..argc] is a null-terminated array of C strings.
        unsafe { execvp(argv.add(i), command, envp) }
    };
    write_all(FD_REPORT, &(errno as i32).to_le_bytes());
    exit(if errno == ENOENT || errno == ENOTDIR {
        127
    } else {
        126
    })
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(EXIT_UNFINISHED)
}

/// The precompiled `core` refers to an unwinding personality; with
/// `panic=abort` nothing ever unwinds, so it is never called.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

// What the compiler may call for copies and comparisons (no C library).

/// # Safety
/// As C's memcpy.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY (caller): n bytes valid at both, not overlapping.
    unsafe {
        for i in 0..n {
            *dst.add(i) = *src.add(i);
        }
    }
    dst
}

/// # Safety
/// As C's memmove.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY (caller): n bytes valid at both.
    unsafe {
        if (dst as usize) < (src as usize) {
            for i in 0..n {
                *dst.add(i) = *src.add(i);
            }
        } else {
            for i in (0..n).rev() {
                *dst.add(i) = *src.add(i);
            }
        }
    }
    dst
}

/// # Safety
/// As C's memset.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY (caller): n bytes valid at dst.
    unsafe {
        for i in 0..n {
            *dst.add(i) = c as u8;
        }
    }
    dst
}

/// # Safety
/// As C's memcmp.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY (caller): n bytes valid at both.
    unsafe {
        for i in 0..n {
            let (x, y) = (*a.add(i), *b.add(i));
            if x != y {
                return i32::from(x) - i32::from(y);
            }
        }
    }
    0
}

/// # Safety
/// As C's bcmp.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY (caller): as memcmp.
    unsafe { memcmp(a, b, n) }
}
