//! What the fuzz targets share: scratch data dirs, the invariants every
//! target checks, and a fixed skill host for the stateful targets
//! (`session`, `http`).
//!
//! The fixture is a data dir with a store, a catalog folder and two
//! sessions under known ids ([`SESSION_FILES`], [`SESSION_SEMANTIC`]), so
//! seeds can name them. [`Fixture::reset`] puts the store and the sessions
//! folder back as they were after every input: an input cannot leave state
//! for the next one, and a crash replays from its input alone.

pub mod targets {
    //! Each fuzz target's body: the input it takes, the runner's entry
    //! point it calls and the invariants it checks (docs/fuzzing.md). The
    //! libFuzzer binaries of `fuzz_targets/` call them, and so does the
    //! corpus replay, an ordinary test (`fuzz/tests/corpus.rs`).
    pub mod bundle;
    pub mod http;
    pub mod job;
    pub mod profile;
    pub mod python_lock;
    pub mod session;
    pub mod skill_md;
}

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use skill_runner::daemon::config::{Config, ServeArgs};
use skill_runner::daemon::{app, metrics, registry, selfcheck};
use skill_runner::datadir::DataDir;
use skill_runner::exec::confine::{Confinement, Gate};
use skill_runner::exec::{self, Runner};
use skill_runner::package::format::PackageLimits;
use skill_runner::skillhost::catalog::CatalogConfig;
use skill_runner::skillhost::session::{SessionHost, SessionRequest, SkillSpec};

/// A `managed_filesystem` session (tools `bash`, `read`) of `hello` and
/// `oddities`.
pub const SESSION_FILES: &str = "ses-0123456789abcdef0123456789abcdef";
/// A `semantic_tools` session (no tools) of `sandbox-basics` and `lonely`.
pub const SESSION_SEMANTIC: &str = "ses-fedcba9876543210fedcba9876543210";

/// An ordinary (not root-mapped) sandbox identity, for launch plans.
pub fn identity() -> skill_runner::sandbox::identity::Identity {
    skill_runner::sandbox::identity::Identity {
        uid: 1000,
        gid: 1000,
        mode: "runner_user",
        root_mapped: false,
        note: None,
    }
}

/// Panics unless `msg` is one non-empty line: every refusal the runner
/// prints or returns is one sentence.
pub fn one_line(what: &str, msg: &str) {
    assert!(!msg.is_empty(), "{what}: empty error message");
    assert!(
        !msg.contains(['\n', '\r']),
        "{what}: error message is not one line: {msg:?}"
    );
}

/// A fresh folder `<tmp>/skill-runner-fuzz/<name>-<pid>`, beside a lock
/// file (`<name>-<pid>.lock`) this process holds until it ends. Folders
/// whose lock nobody holds (their process is gone) are removed first: a
/// held `flock` tells a live folder from a dead one on every system, where
/// a pid under `/proc` only does on Linux (and a reused pid lies).
pub fn scratch_dir(name: &str) -> PathBuf {
    static HELD: std::sync::Mutex<Vec<skill_runner::fsx::LockFile>> =
        std::sync::Mutex::new(Vec::new());
    let base = std::env::temp_dir().join("skill-runner-fuzz");
    fs::create_dir_all(&base).expect("create the scratch base");
    let dir = base.join(format!("{name}-{}", std::process::id()));
    // Locked before the folder is made, so no sweep takes it in between.
    let lock = skill_runner::fsx::LockFile::acquire(&dir.with_extension("lock"))
        .expect("lock the scratch dir");
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
    for e in fs::read_dir(&base).into_iter().flatten().flatten() {
        // A folder and its lock, whichever of the two this entry is.
        let path = e.path();
        let (folder, lock) = (path.with_extension(""), path.with_extension("lock"));
        if !skill_runner::fsx::is_locked(&lock) {
            let _ = skill_runner::fsx::remove_tree(&folder);
            let _ = fs::remove_file(&lock);
        }
    }
    let _ = skill_runner::fsx::remove_tree(&dir);
    fs::create_dir_all(&dir).expect("create the scratch dir");
    dir
}

/// The example skill of the repository (`examples/skills/hello`).
pub fn hello_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/skills/hello")
}

/// The data dir and skill host the stateful targets run against.
pub struct Fixture {
    pub data: PathBuf,
    pub host: Arc<SessionHost>,
    /// Entries of the watched folders after setup (relative paths).
    baseline: BTreeSet<PathBuf>,
}

/// Folders an input may add to; `store/bindings` two levels deep.
const WATCHED: &[(&str, usize)] = &[
    ("store/packages", 1),
    ("store/bindings", 2),
    ("store/sets", 1),
    ("store/tmp", 1),
    ("sessions", 1),
];

fn write(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("create a fixture folder");
    fs::write(path, bytes).expect("write a fixture file");
}

impl Fixture {
    /// Builds the fixture in a scratch dir named after `target`.
    pub fn new(target: &str) -> Fixture {
        let data = scratch_dir(target);
        let catalog = data.join("catalog");
        // `oddities`: what tool inputs trip over — two files with one stem,
        // a binary file, a file that is not UTF-8, multi-byte text, odd
        // names (admissible paths may hold spaces and newlines).
        let odd = catalog.join("oddities");
        write(
            &odd.join("SKILL.md"),
            b"---\nname: oddities\ndescription: Files that test the skill tools.\nmetadata:\n  category: testing\n  version: 2.1.0\n---\n# Oddities\n\nSee references/notes.md.\n",
        );
        write(
            &odd.join("references/notes.md"),
            "h\u{e9}llo w\u{f6}rld \u{2713} \u{65e5}\u{672c}\u{8a9e} \u{1f600}\n"
                .repeat(8)
                .as_bytes(),
        );
        write(&odd.join("references/notes.txt"), b"plain notes\n");
        write(&odd.join("data/blob.bin"), b"\x7fELF\x00\x01\x02");
        write(&odd.join("data/latin1.txt"), b"caf\xe9\n");
        write(&odd.join("docs/read me.md"), b"spaces\n");
        write(&odd.join("docs/line\nbreak.md"), b"newline in the name\n");
        write(&odd.join("empty.txt"), b"");
        write(
            &catalog.join("lonely/SKILL.md"),
            b"---\nname: lonely\ndescription: An instruction-only skill.\n---\nJust text.\n",
        );
        let hello = catalog.join("hello");
        for f in ["SKILL.md", "references/template.txt", "scripts/greet.sh"] {
            write(
                &hello.join(f),
                &fs::read(hello_dir().join(f)).expect("read examples/skills/hello"),
            );
        }

        let config = CatalogConfig {
            project_dirs: vec![catalog],
            index: None,
            ..CatalogConfig::default()
        };
        let opened = DataDir::open(&data, None).expect("open the data dir");
        let host = SessionHost::open(&opened, config).expect("open the session host");
        // The binding of examples/hello-job.json, as `store add` makes it.
        host.store()
            .publish_dir(&hello_dir(), "hello", 1, "1.0.0", &PackageLimits::default())
            .expect("publish hello");
        let sessions = [
            (
                SESSION_FILES,
                &["hello", "oddities"][..],
                &["bash", "read"][..],
            ),
            (SESSION_SEMANTIC, &["sandbox-basics", "lonely"][..], &[][..]),
        ];
        for (id, skills, tools) in sessions {
            let doc = host
                .create(SessionRequest {
                    skills: skills
                        .iter()
                        .map(|s| SkillSpec::Name((*s).into()))
                        .collect(),
                    tools: tools.iter().map(|t| (*t).into()).collect(),
                    workspace: None,
                    environment: None,
                })
                .expect("create a fixture session");
            // The record names its own id: rewrite it under the known one.
            let dir = data.join("sessions");
            let made = dir.join(format!("{}.json", doc.id));
            let mut record: serde_json::Value =
                serde_json::from_slice(&fs::read(&made).expect("read the record"))
                    .expect("parse the record");
            record["id"] = id.into();
            write(
                &dir.join(format!("{id}.json")),
                &serde_json::to_vec_pretty(&record).expect("render the record"),
            );
            fs::remove_file(&made).expect("remove the random-id record");
        }
        let mut fixture = Fixture {
            data,
            host: Arc::new(host),
            baseline: BTreeSet::new(),
        };
        fixture.baseline = fixture.entries();
        fixture
    }

    fn entries(&self) -> BTreeSet<PathBuf> {
        let mut out = BTreeSet::new();
        for (dir, depth) in WATCHED {
            list(&self.data, Path::new(dir), *depth, &mut out);
        }
        out
    }

    /// Removes whatever an input added to the store and sessions folders.
    pub fn reset(&self) {
        for rel in self.entries().difference(&self.baseline) {
            // A folder is removed with what it holds; its entries follow.
            let _ = skill_runner::fsx::remove_tree(&self.data.join(rel));
        }
    }

    /// A daemon app over this fixture whose runner never launches: the
    /// sandbox is marked unavailable, so executions stop at the launch
    /// check (503) after everything the HTTP layer does. Build one app per
    /// input with [`Fixture::app`]; the runner is shared.
    pub fn runner(&self) -> (Arc<Runner>, Config) {
        let mut runner = Runner::new(exec::RunnerConfig {
            data_dir: self.data.clone(),
            package_limits: PackageLimits::default(),
            keep: false,
            reuse_cgroups: false,
            strict_limits: false,
            network: Default::default(),
            files: Default::default(),
        })
        .expect("open the runner");
        // The fuzz harness never launches a sandbox.
        runner.host.bwrap = Err(skill_runner::sandbox::host::HostError::FindBwrap);
        let mut config =
            Config::build(ServeArgs::default(), Some(self.data.clone()), None).expect("config");
        config.body_timeout = Duration::from_secs(2);
        config.retention.count = 16;
        (Arc::new(runner), config)
    }

    /// A fresh app (registry, metrics, upload slots) over shared parts.
    pub fn app(&self, runner: &Arc<Runner>, config: &Config) -> app::App {
        let verdict = selfcheck::Verdict {
            result: Err("the fuzz harness never launches a sandbox".into()),
            checked_at: std::time::SystemTime::now(),
        };
        let metrics = Arc::new(metrics::Metrics::default());
        app::App::new(app::AppInner {
            runner: runner.clone(),
            selfcheck: selfcheck::SelfCheck::new(verdict),
            registry: registry::Registry::new(
                config.max_running,
                config.max_queued,
                config.retention,
            ),
            metrics: metrics.clone(),
            roots: Confinement::new(config.roots.clone(), Gate::Daemon),
            uploads: Arc::new(tokio::sync::Semaphore::new(config.max_uploads)),
            session_bodies: Arc::new(tokio::sync::Semaphore::new(
                skill_runner::daemon::SESSION_BODIES,
            )),
            sessions: self.host.clone(),
            lanes: skill_runner::daemon::workspace::Lanes::new(),
            downloads: Arc::new(tokio::sync::Semaphore::new(config.max_downloads)),
            prepared: skill_runner::daemon::prepared::Pool::new(
                config.prepared,
                runner.clone(),
                metrics.clone(),
            ),
            pulls: Arc::new(skill_runner::daemon::pulls::Pulls::new(
                runner.clone(),
                config.pulls.clone(),
                metrics,
            )),
            mcp: skill_runner::daemon::mcp_sessions::Sessions::new(
                config.mcp_sessions,
                skill_runner::daemon::mcp::keep_alive(config),
            ),
            config: config.clone(),
        })
    }
}

fn list(data: &Path, rel: &Path, depth: usize, out: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = fs::read_dir(data.join(rel)) else {
        return;
    };
    for e in entries.flatten() {
        let child = rel.join(e.file_name());
        if depth > 1 && e.file_type().is_ok_and(|t| t.is_dir()) {
            list(data, &child, depth - 1, out);
        }
        out.insert(child);
    }
}
