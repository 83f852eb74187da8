//! Converts the built-in sandbox profiles (`profiles/*.toml`) to JSON,
//! which a process reads at start faster than it parses TOML (see
//! `src/sandbox/profile.rs`, which checks both read the same).
//!
//! Builds the small exec shim (`exec-shim/shim.rs`) that the runner
//! carries and hands to bubblewrap (see `src/sandbox/shim.rs`): a program
//! without a C library or the Rust runtime, not position-independent, so
//! that starting it in every sandbox costs next to nothing.
//!
//! Only for Linux on x86_64 and aarch64 (its system calls are written for
//! those); elsewhere, and for a job with a network allowlist, bubblewrap
//! executes the runner's own binary as the shim. On those targets a shim
//! that does not build fails the build: a runner quietly without it would
//! measure differently from the one we ship.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    builtin_profiles();
    println!("cargo::rerun-if-changed=exec-shim/shim.rs");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    println!("cargo::rustc-check-cfg=cfg(small_exec_shim)");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    // The shim uses no C library, so the target's (glibc or musl) does not
    // matter to it.
    if os != "linux"
        || !matches!(arch.as_str(), "x86_64" | "aarch64")
        || !matches!(env.as_str(), "gnu" | "musl")
    {
        return;
    }
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let exe = out.join("exec-shim");
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition=2021",
        "--crate-type=bin",
        "--crate-name=skill_runner_exec_shim",
        "--target",
        &target,
        "-Cpanic=abort",
        "-Copt-level=2",
        "-Cdebuginfo=0",
        "-Cstrip=symbols",
        "-Crelocation-model=static",
        "-Ctarget-feature=+crt-static",
        "-Clink-arg=-nostdlib",
        "-Clink-arg=-static",
        "-Clink-arg=-Wl,--build-id=none",
        "-o",
    ]);
    cmd.arg(&exe).arg("exec-shim/shim.rs");
    if env == "musl" {
        // The musl target links its own start files unless told not to;
        // the shim has its own `_start`.
        cmd.arg("-Clink-self-contained=no");
    }
    // The linker cargo uses for this target (cross builds), if one is set.
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        let mut arg = std::ffi::OsString::from("-Clinker=");
        arg.push(linker);
        cmd.arg(arg);
    }
    // The shim is built for itself alone: no flags meant for the runner
    // (sanitizers, coverage) reach it.
    cmd.env_remove("CARGO_ENCODED_RUSTFLAGS");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run rustc for the exec shim: {e}"));
    assert!(
        status.success(),
        "the exec shim (exec-shim/shim.rs) does not build"
    );
    println!("cargo::rustc-cfg=small_exec_shim");
    println!("cargo::rustc-env=SKILL_RUNNER_EXEC_SHIM={}", exe.display());
}

/// `profiles/NAME.toml` as `$OUT_DIR/profile-NAME.json`, for each
/// built-in profile. A profile that is not TOML fails the build; one that
/// is not a valid profile fails the profile tests.
fn builtin_profiles() {
    /// The names of `src/sandbox/profile.rs`'s `BUILTIN`, in its order.
    const BUILTIN: &[&str] = &["default"];
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in BUILTIN {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        let src = format!("{dir}/../profiles/{name}.toml");
        println!("cargo::rerun-if-changed={src}");
        let text =
            std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("cannot read {src}: {e}"));
        let value: serde_json::Value =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{src} is not TOML: {e}"));
        std::fs::write(out.join(format!("profile-{name}.json")), value.to_string())
            .unwrap_or_else(|e| panic!("cannot write the JSON of {src}: {e}"));
    }
}
