//! `store push|pull` and `env push|pull`: packages and environments to and
//! from OCI registries (docs/distribution.md). Progress goes to stderr
//! (bars on a terminal, plain lines otherwise); stdout carries the binding
//! or record and, as its last line, the digest reference.

use anyhow::anyhow;
use skill_runner::package::environment::store::EnvStore;
use skill_runner::package::environment::EnvRef;
use skill_runner::package::oci::{self, Reference, RegistryConfig};
use skill_runner::package::store::Store;

use crate::cli::{EnvCommand, RegistryArgs, StoreCommand};
use crate::emit;
use crate::progress::BlobProgress;

fn settings(args: &RegistryArgs) -> anyhow::Result<RegistryConfig> {
    Ok(RegistryConfig::load(
        args.registry_config.as_deref(),
        &args.registry_ca,
        &args.insecure_registry,
    )?)
}

/// The reference a pull takes: its digest, or with `--resolve-tag` the
/// digest its tag names now (said on stderr).
fn pull_target(cfg: &RegistryConfig, text: &str, resolve: bool) -> anyhow::Result<Reference> {
    let r = Reference::parse(text)?;
    if r.digest.is_some() {
        return Ok(r);
    }
    if !resolve {
        return Err(oci::OciError::TagOnly {
            reference: r.to_string(),
        }
        .into());
    }
    let resolved = oci::resolve_tag(cfg, &r)?;
    eprintln!(
        "skill-runner: {r} resolved to {}",
        resolved.digest_form().unwrap_or_default()
    );
    Ok(resolved)
}

/// Runs `f` with a per-blob progress display on stderr, cleared before
/// the caller prints its outcome.
fn with_progress<T>(verb: &'static str, f: impl FnOnce(&BlobProgress) -> T) -> T {
    let progress = BlobProgress::new(verb);
    let out = f(&progress);
    progress.finish();
    out
}

/// What a push prints: the digest reference it pushed.
fn print_pushed(pushed: &Reference) -> anyhow::Result<()> {
    emit(&format!("{}\n", pushed.digest_form().unwrap_or_default()))
}

/// What a pull prints: the binding or record, then the digest reference
/// as the last line.
fn print_pulled(record: &impl serde::Serialize, r: &Reference) -> anyhow::Result<()> {
    emit(&format!(
        "{}\n{}\n",
        serde_json::to_string(record)?,
        r.digest_form().unwrap_or_default()
    ))
}

/// `store push` and `store pull`.
pub fn store(cmd: StoreCommand, store: &Store) -> anyhow::Result<i32> {
    match cmd {
        StoreCommand::Push {
            src,
            reference,
            registry,
        } => {
            let cfg = settings(&registry)?;
            let target = Reference::parse(&reference)?;
            let (id, revision) = src
                .rsplit_once('@')
                .and_then(|(i, r)| Some((i, r.parse::<u64>().ok()?)))
                .ok_or_else(|| anyhow!("{src:?} is not ID@REVISION; name a stored binding (skill-runner store list)"))?;
            let binding = store
                .bindings_of(id)?
                .into_iter()
                .find(|b| b.revision == revision)
                .ok_or_else(|| anyhow!("no binding {id}@{revision} is in the store; publish it first (skill-runner store add)"))?;
            let pushed = with_progress("push", |p| {
                oci::push_package(&cfg, &target, store, &binding, p)
            })?;
            print_pushed(&pushed)?;
        }
        StoreCommand::Pull {
            reference,
            resolve_tag,
            registry,
        } => {
            let cfg = settings(&registry)?;
            let r = pull_target(&cfg, &reference, resolve_tag)?;
            let pulled = with_progress("pull", |p| oci::pull_package(&cfg, &r, store, p))?;
            print_pulled(&pulled.binding, &r)?;
        }
        _ => {}
    }
    Ok(0)
}

/// `env push` and `env pull`.
pub fn env(cmd: EnvCommand, envs: &EnvStore) -> anyhow::Result<i32> {
    match cmd {
        EnvCommand::Push {
            src,
            reference,
            registry,
        } => {
            let cfg = settings(&registry)?;
            let target = Reference::parse(&reference)?;
            let (id, hash) = src.split_once('@').ok_or_else(|| {
                anyhow!("{src:?} is not ID@HASH; name a stored environment (skill-runner env list)")
            })?;
            let env = EnvRef {
                id: id.to_owned(),
                hash: hash.to_owned(),
            };
            let pushed = with_progress("push", |p| {
                oci::push_environment(&cfg, &target, envs, &env, p)
            })?;
            print_pushed(&pushed)?;
        }
        EnvCommand::Pull {
            reference,
            resolve_tag,
            registry,
        } => {
            let cfg = settings(&registry)?;
            let r = pull_target(&cfg, &reference, resolve_tag)?;
            let pulled = with_progress("pull", |p| oci::pull_environment(&cfg, &r, envs, p))?;
            print_pulled(&pulled.record, &r)?;
        }
        _ => {}
    }
    Ok(0)
}
