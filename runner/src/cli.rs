//! The command line's surface: every subcommand and flag of `skill-runner`,
//! parsed by clap (README "Using it"). `main.rs` dispatches what is parsed
//! here; nothing here acts.
//!
//! The doc comments on these types are the `--help` text: editing one
//! changes the CLI's output. The flags of `serve` live with the daemon's
//! other settings, in [`skill_runner::daemon::ServeArgs`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "skill-runner",
    version,
    about = "Run AI-agent Skill commands in a sandbox, with exactly the pinned package bytes"
)]
pub struct Cli {
    /// Data dir holding the store and per-execution folders.
    #[arg(long, global = true, env = "SKILL_RUNNER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a job: stage its skills, start the sandbox, stream its output,
    /// exit with its code.
    Run(RunArgs),
    /// Print what a job would run, without running it.
    Explain {
        /// The job document (JSON), as for `run`; `-` reads it from stdin.
        #[arg(value_name = "JOB")]
        job: PathBuf,
        /// Print JSON instead of a shell-quoted command.
        #[arg(long)]
        json: bool,
        /// Platform to explain for: linux (bubblewrap) or macos (Seatbelt).
        #[arg(long, default_value = "linux")]
        platform: String,
        /// Also write what the sandbox reads on fds 3-6 (seccomp programs,
        /// /etc/passwd, /etc/group) into this folder, as `3-seccomp-rules.bpf`
        /// and so on, so the printed command can be run by hand (linux).
        #[arg(long, value_name = "DIR")]
        fds_dir: Option<PathBuf>,
    },
    /// Print the package hash of a folder.
    Hash {
        /// The package folder (SKILL.md at its root).
        dir: PathBuf,
    },
    /// Print a bundle (transport JSON, docs/formats.md) of a folder, to
    /// publish with POST /v1/skill-packages.
    Pack {
        /// The package folder (SKILL.md at its root).
        dir: PathBuf,
        #[command(flatten)]
        meta: BindingArgs,
    },
    /// Publish into, or list, the local store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Report what this host supports and what that means.
    Doctor,
    /// Serve the HTTP API on a Unix socket (default) or TCP; see docs/daemon.md.
    Serve(Box<skill_runner::daemon::ServeArgs>),
    /// The skill catalog: built-in, user and project skills by name; see
    /// docs/skill-host.md.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Skill-host sessions: the command-line form of POST /v1/sessions and
    /// its routes (JSON out); see docs/skill-host.md.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Serve one session over the Model Context Protocol on stdin and
    /// stdout: its tools, a run tool, its skills as skill:// resources;
    /// see docs/mcp.md.
    Mcp(McpArgs),
    /// Environments: frozen, verified trees of the libraries skills
    /// import; see docs/environments.md.
    #[command(subcommand)]
    Env(EnvCommand),
    /// Check a result's receipt: its signature by a trusted key, then
    /// that every member of the result matches the signed statement; print
    /// what it vouches for. Exit 0, or 1 with the first mismatch.
    Verify {
        /// The result document (JSON, as `run --json` or the daemon gave it).
        #[arg(value_name = "RESULT")]
        result: PathBuf,
        /// A trusted public key: SubjectPublicKeyInfo PEM, or the JSON of
        /// `receipt-key --json`; repeat it to trust several (rotation)
        /// [default: the runner's own key].
        #[arg(long = "key", value_name = "PEM")]
        keys: Vec<PathBuf>,
        /// The runner's private key file, whose public half is trusted
        /// when no --key is given.
        #[arg(long, value_name = "FILE", env = "SKILL_RUNNER_RECEIPT_KEY")]
        receipt_key: Option<PathBuf>,
        /// Print the verified statement (JSON) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Run a receipted job again: check its digest against the result's
    /// receipt, re-run it with the same package and environment bytes,
    /// profile and limits, and say per output whether it is identical.
    /// Exit 0 only when everything is identical.
    Replay {
        /// The job document, as it was run.
        #[arg(value_name = "JOB")]
        job: PathBuf,
        /// The result document with its receipt.
        #[arg(value_name = "RESULT")]
        result: PathBuf,
        /// A trusted public key, as for `verify`; repeatable.
        #[arg(long = "key", value_name = "PEM")]
        keys: Vec<PathBuf>,
        /// Confine the job's host paths to this folder, as for `run`.
        #[arg(long, value_name = "DIR", env = "SKILL_RUNNER_CONFINE")]
        confine: Option<PathBuf>,
        /// Print the comparison and the re-run's result as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        receipts: ReceiptArgs,
    },
    /// Print the public key receipts are signed with (made on first use).
    ReceiptKey {
        /// Print `{keyid, public_key_pem}` instead of the PEM.
        #[arg(long)]
        json: bool,
        /// The private key file instead of the data dir's.
        #[arg(long, value_name = "FILE", env = "SKILL_RUNNER_RECEIPT_KEY")]
        receipt_key: Option<PathBuf>,
    },
    /// Print the completion script of a shell (bash, zsh, fish, elvish,
    /// powershell), e.g. `skill-runner completions bash >
    /// /etc/bash_completion.d/skill-runner`.
    Completions {
        /// The shell to complete for.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the man page skill-runner(1) as roff, e.g. `skill-runner man >
    /// ~/.local/share/man/man1/skill-runner.1`.
    Man {
        /// Write skill-runner.1 and a page per subcommand into this existing
        /// folder instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

// `run`'s arguments (a plain comment: a doc comment here would become
// the subcommand's `--help` text in place of the variant's).
#[derive(Args)]
pub struct RunArgs {
    /// The job document (JSON, docs/formats.md). `-` reads it from
    /// stdin; relative paths in it then resolve against the current
    /// folder instead of the job file's folder.
    #[arg(value_name = "JOB")]
    pub job: PathBuf,
    /// Print the result document instead of streaming output.
    #[arg(long)]
    pub json: bool,
    /// Keep the execution's private folder afterwards (debugging).
    #[arg(long)]
    pub keep: bool,
    /// Confine the job's host paths (workspace, extensions_dir, skill
    /// paths) to this folder and its profile to the built-in ones, for
    /// job files that are not as trusted as a command line; a path
    /// outside or a profile file is refused.
    #[arg(long, value_name = "DIR", env = "SKILL_RUNNER_CONFINE")]
    pub confine: Option<PathBuf>,
    /// Refuse the job (exit 125, sandbox_unavailable) when its memory or
    /// pids limit would be held per process by an rlimit, not by a cgroup.
    #[arg(long, env = "SKILL_RUNNER_STRICT_LIMITS")]
    pub strict_limits: bool,
    /// Write the job's collected `outputs` into this folder, at their
    /// paths; it must not exist or be empty (nothing is overwritten).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    #[command(flatten)]
    pub receipts: ReceiptArgs,
}

/// How results are signed (docs/receipts.md).
#[derive(Args, Clone)]
pub struct ReceiptArgs {
    /// Put no receipt in the result.
    #[arg(long)]
    pub no_receipt: bool,
    /// The ed25519 PKCS#8 PEM key to sign receipts with (0600, the
    /// runner's) [default: DATA_DIR/keys/receipt-ed25519.pem, made on first
    /// use].
    #[arg(long, value_name = "FILE", env = "SKILL_RUNNER_RECEIPT_KEY")]
    pub receipt_key: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum EnvCommand {
    /// Publish a tree built elsewhere as environment ID; prints its record
    /// (JSON).
    Add {
        /// The tree: files, folders and symlinks that point inside it or
        /// into /usr, /bin, /sbin, /lib or /lib64 (Python packages under
        /// python/, programs under bin/).
        dir: PathBuf,
        /// Environment id: lowercase letters and digits in dash-separated
        /// words (e.g. pdf-tools).
        #[arg(long)]
        id: String,
        /// The hash-pinned requirements lock the tree was built from
        /// (name==version --hash=sha256:… on every requirement); recorded
        /// by its SHA-256 after it is checked.
        #[arg(long, value_name = "REQUIREMENTS")]
        python: Option<PathBuf>,
        /// The interpreter the tree was built for, recorded with its
        /// version and the SHA-256 of its binary (default with --python:
        /// /usr/bin/python3).
        #[arg(long, value_name = "PATH")]
        interpreter: Option<String>,
        #[command(flatten)]
        limits: EnvLimitArgs,
    },
    /// Build environment ID from a hash-pinned requirements lock: fetch
    /// the pinned wheels with pip's own index configuration, install them
    /// offline in the runner's sandbox (no network), hash, seal and
    /// publish; prints the record (JSON) on stdout, each step on stderr.
    /// The same lock built again for the same interpreter is served from
    /// the store.
    Build {
        /// The lock, every line name==version --hash=sha256:…
        #[arg(long, value_name = "REQUIREMENTS")]
        python: PathBuf,
        /// Environment id (e.g. pdf-tools).
        #[arg(long)]
        id: String,
        /// The interpreter to build for (default /usr/bin/python3).
        #[arg(long, value_name = "PATH")]
        interpreter: Option<String>,
        /// Wall-clock limit of the install step, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        install_timeout: u64,
        /// Wall-clock limit of the fetch step, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        fetch_timeout: u64,
        #[command(flatten)]
        limits: EnvLimitArgs,
    },
    /// List the environments in the store.
    List {
        /// Print JSON (an array of records) instead of one line each.
        #[arg(long)]
        json: bool,
    },
    /// Show the records of one environment id.
    Show {
        /// The environment id.
        id: String,
        /// Print JSON (an array of records) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Re-hash stored environments byte by byte: every hash of an id, or
    /// one hash; exit 125 naming what changed.
    Verify {
        /// An environment id or a 64-hex environment hash.
        #[arg(value_name = "ID|HASH")]
        target: String,
    },
    /// Remove the record {ID, HASH}; `env gc` then removes its tree if no
    /// other record names it.
    Remove {
        /// The environment id.
        id: String,
        /// The environment hash.
        hash: String,
    },
    /// Remove every stored tree no record names and nothing is using;
    /// prints {"removed": [...], "in_use": [...]}.
    Gc,
    /// Push the stored environment ID@HASH to an OCI registry; prints the
    /// digest reference oci://…@sha256:… as the last line.
    Push {
        /// ID@HASH of a stored environment.
        #[arg(value_name = "ID@HASH")]
        src: String,
        /// oci://HOST[:PORT]/REPO[:TAG]
        #[arg(value_name = "REFERENCE")]
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Pull an environment by digest, verify every digest, size and the
    /// environment hash, and publish it; prints its record, then the
    /// digest reference as the last line.
    Pull {
        /// oci://HOST[:PORT]/REPO@sha256:HEX (a tag only with --resolve-tag)
        #[arg(value_name = "REFERENCE")]
        reference: String,
        /// Resolve a tag to the digest it names now, print it, and pull that.
        #[arg(long)]
        resolve_tag: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

/// Bounds on a tree being published.
#[derive(Args)]
pub struct EnvLimitArgs {
    /// Most entries (files, folders and symlinks) the tree may hold.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub max_entries: u64,
    /// Most bytes one file may hold.
    #[arg(long, value_name = "N", default_value_t = 1 << 30)]
    pub max_file_bytes: u64,
    /// Most bytes all files may hold together.
    #[arg(long, value_name = "N", default_value_t = 4 << 30)]
    pub max_bytes: u64,
}

#[derive(Subcommand)]
pub enum CatalogCommand {
    /// List every skill: name, source, kind, description.
    List {
        /// Print JSON instead of one line per skill.
        #[arg(long)]
        json: bool,
    },
    /// Rank the skills against a query, by name, description and the
    /// headings of SKILL.md (docs/skill-host.md, "Ranking").
    Find {
        /// Words describing the task.
        query: String,
        /// How many skills to print at most.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Print JSON instead of one line per skill.
        #[arg(long)]
        json: bool,
        /// Show why each skill ranked where it did: each query term's
        /// weight, and per skill the points of each term it has.
        #[arg(long)]
        explain: bool,
    },
    /// Show one skill: where it comes from, what it shadows, its SKILL.md.
    Show {
        /// The skill's catalog name.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum SessionCommand {
    /// Create a session: freeze the skills, derive the delivery mode.
    Create {
        /// A catalog name, ID@REVISION of a stored binding, or a JSON binding.
        #[arg(long = "skill", value_name = "SKILL")]
        skills: Vec<String>,
        /// A tool the agent has enabled (bash, read, write, edit, glob, grep, …).
        #[arg(long = "tool", value_name = "TOOL")]
        tools: Vec<String>,
        /// The environment every job of the session runs with, ID@HASH
        /// (default: the one its skills declare).
        #[arg(long, value_name = "ID@HASH")]
        environment: Option<String>,
    },
    /// Print a session as created.
    Show {
        /// The session id (ses-…), as `session create` printed it.
        id: String,
    },
    /// List a session's skills, or rank them with --query.
    Skills {
        /// The session id (ses-…).
        id: String,
        /// Rank the skills against these words instead of listing them all.
        #[arg(long)]
        query: Option<String>,
        /// How many skills to return at most.
        #[arg(long)]
        limit: Option<usize>,
        /// Only skills of this category (front matter metadata.category).
        #[arg(long)]
        category: Option<String>,
    },
    /// Load a skill's body (load_skill / Skill).
    Load {
        /// The session id (ses-…).
        id: String,
        /// The skill's name in the session (its id).
        name: String,
    },
    /// Load one supplementary file of a skill (load_skill_section).
    Section {
        /// The session id (ses-…).
        id: String,
        /// The skill's name in the session (its id).
        name: String,
        /// The file, as load_skill lists it (e.g. references/guide.md).
        section: String,
        /// First byte to return.
        #[arg(long)]
        offset: Option<u64>,
        /// How many bytes to return at most.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Read a package file by its alias path (read_skill_resource).
    Resource {
        /// The session id (ses-…).
        id: String,
        /// The file: /skills/ID/PATH, $SCIENCEDISCOVERY_SKILLS_DIR/ID/PATH
        /// or ${SCIENCEDISCOVERY_SKILLS_DIR}/ID/PATH.
        path: String,
        /// First byte to return.
        #[arg(long)]
        offset: Option<u64>,
        /// How many bytes to return at most.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print the session's activation events.
    Events {
        /// The session id (ses-…).
        id: String,
    },
}

/// The frozen binding a folder is published under; its hash is computed.
#[derive(Args)]
pub struct BindingArgs {
    /// Skill id: lowercase letters and digits in dash-separated words
    /// (e.g. hello, alpha-tools); the folder it is staged as, /skills/ID.
    #[arg(long)]
    pub id: String,
    /// Revision, an integer >= 1; a published (id, revision) never changes,
    /// so publish other bytes under a new revision.
    #[arg(long)]
    pub revision: u64,
    /// Version, any string (e.g. 1.0.0); recorded in the binding, not
    /// interpreted.
    #[arg(long)]
    pub version: String,
}

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Publish folders as packages: `store add DIR --id ID --revision N --version V`.
    Add {
        /// The package folder (SKILL.md at its root).
        dir: PathBuf,
        #[command(flatten)]
        meta: BindingArgs,
    },
    /// List published bindings.
    List,
    /// Push the stored package ID@REVISION to an OCI registry as an
    /// artifact (docs/distribution.md); prints the digest reference
    /// oci://…@sha256:… as the last line.
    Push {
        /// ID@REVISION of a stored binding.
        #[arg(value_name = "ID@REVISION")]
        src: String,
        /// oci://HOST[:PORT]/REPO[:TAG]
        #[arg(value_name = "REFERENCE")]
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Pull a package by digest (oci://…@sha256:…), verify every digest,
    /// size and the package hash, and publish it; prints its binding, then
    /// the digest reference as the last line.
    Pull {
        /// oci://HOST[:PORT]/REPO@sha256:HEX (a tag only with --resolve-tag)
        #[arg(value_name = "REFERENCE")]
        reference: String,
        /// Resolve a tag to the digest it names now, print it, and pull that.
        #[arg(long)]
        resolve_tag: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

/// How to reach an OCI registry (docs/distribution.md).
#[derive(Args, Clone)]
pub struct RegistryArgs {
    /// Speak plain HTTP to this HOST[:PORT] (as written in the reference);
    /// every other registry is TLS. Repeatable.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub insecure_registry: Vec<String>,
    /// Docker-style config.json with credentials (auths.HOST.auth, base64
    /// user:password) [default: $DOCKER_CONFIG/config.json, else
    /// ~/.docker/config.json, when present].
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// A PEM CA certificate trusted beside the system roots. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
}

/// Only `run`, with the same global flags: what `skill-runner run …` is
/// parsed with first, so that starting a sandbox does not build the
/// definition of every other subcommand (the daemon's many flags among
/// them). Anything it does not accept as is (another subcommand, a
/// mistake, `--help`, `--version`) is parsed again by [`Cli`], so what
/// the user sees is [`Cli`]'s alone.
#[derive(Parser)]
#[command(name = "skill-runner", version)]
struct RunCli {
    #[arg(long, global = true, env = "SKILL_RUNNER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: RunOnly,
}

#[derive(Subcommand)]
enum RunOnly {
    Run(RunArgs),
}

impl Cli {
    /// The command line, as [`Parser::parse`] gives it (exiting on
    /// `--help` or a mistake), `run` by the cheaper [`RunCli`].
    pub fn parse_args() -> Cli {
        Cli::parse_from_args(std::env::args_os())
    }

    fn parse_from_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Cli {
        let args: Vec<std::ffi::OsString> = args.into_iter().collect();
        if args.iter().skip(1).any(|a| a == "run") {
            if let Ok(RunCli {
                data_dir,
                command: RunOnly::Run(run),
            }) = RunCli::try_parse_from(&args)
            {
                return Cli {
                    data_dir,
                    command: Command::Run(run),
                };
            }
        }
        Cli::parse_from(args)
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// clap's own consistency checks (conflicting names, bad defaults, …)
    /// on every subcommand, not only on those a test happens to parse.
    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
        super::RunCli::command().debug_assert();
    }

    /// What `run` was parsed into, comparable.
    fn run_of(cli: &Cli) -> Option<String> {
        let super::Command::Run(r) = &cli.command else {
            return None;
        };
        Some(format!(
            "{:?} {:?} {} {} {:?} {} {:?} {} {:?}",
            cli.data_dir,
            r.job,
            r.json,
            r.keep,
            r.confine,
            r.strict_limits,
            r.output_dir,
            r.receipts.no_receipt,
            r.receipts.receipt_key
        ))
    }

    /// The cheap `run` parser gives what the whole command line gives, for
    /// every flag of `run` and the global one in either place.
    #[test]
    fn run_parses_as_the_whole_command_line_does() {
        let argvs: &[&[&str]] = &[
            &["run", "job.json"],
            &["run", "--json", "-"],
            &["--data-dir", "/d", "run", "--keep", "j"],
            &["run", "j", "--data-dir=/e", "--strict-limits"],
            &["run", "--confine", "/c", "--output-dir", "/o", "j"],
            &["run", "--no-receipt", "--receipt-key", "/k", "run"],
        ];
        for argv in argvs {
            let full: Vec<&str> = std::iter::once("skill-runner")
                .chain(argv.iter().copied())
                .collect();
            let whole = Cli::try_parse_from(&full).expect("the whole command line parses it");
            let fast = Cli::parse_from_args(full.iter().map(Into::into));
            assert!(run_of(&whole).is_some(), "{argv:?}");
            assert_eq!(run_of(&fast), run_of(&whole), "{argv:?}");
        }
    }

    /// The cheap parser's `run` is the whole command line's: the same
    /// arguments with the same flags, values and variables.
    #[test]
    fn the_run_parser_defines_what_the_whole_command_line_does() {
        let describe = |cmd: &clap::Command| -> Vec<String> {
            cmd.get_arguments()
                .map(|a| {
                    format!(
                        "{} {:?} {:?} {:?} {}",
                        a.get_id(),
                        a.get_long(),
                        a.get_env(),
                        a.get_value_names(),
                        a.is_global_set()
                    )
                })
                .collect()
        };
        let whole = Cli::command();
        let fast = super::RunCli::command();
        assert_eq!(describe(&fast), describe(&whole));
        let run = |c: &clap::Command| describe(c.find_subcommand("run").expect("a run subcommand"));
        assert_eq!(run(&fast), run(&whole));
    }
}

/// `skill-runner mcp`: the session to serve, or the skills of a new one.
#[derive(Args)]
pub struct McpArgs {
    /// The session id (ses-…) to serve.
    #[arg(long, conflicts_with_all = ["skills", "tools", "environment"])]
    pub session: Option<String>,
    /// Create a session with this skill (as `session create --skill`).
    #[arg(long = "skill", value_name = "SKILL")]
    pub skills: Vec<String>,
    /// A tool the agent has enabled (as `session create --tool`).
    #[arg(long = "tool", value_name = "TOOL")]
    pub tools: Vec<String>,
    /// The environment of the new session's jobs, ID@HASH.
    #[arg(long, value_name = "ID@HASH")]
    pub environment: Option<String>,
}
