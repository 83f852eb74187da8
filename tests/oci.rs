//! Packages and environments through OCI registries (docs/distribution.md):
//! a real registry round trip into another data dir, the same digests
//! from the same package, a held digest pulled with the registry gone,
//! tags only through --resolve-tag, and tampered registries (a layer that
//! is another package's, sizes that lie, a tag moved, a 10 GB or endless
//! blob) that never get a package into the store.

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use skill_runner::package::hash::Binding;
use skill_runner::package::oci::artifact::{self, Entry, Kind};
use skill_runner::package::oci::{self, NoProgress, Reference, RegistryConfig};
use skill_runner_tests::registry::{http, FakeRegistry, Registry, Reply};
use skill_runner_tests::*;

/// `skill-runner --data-dir DATA ARGS… --insecure-registry HOST`.
fn sr(data: &Path, host: &str, args: &[&str]) -> Output {
    let out = runner_command()
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .args(["--insecure-registry", host])
        .output()
        .unwrap();
    out
}

fn last_line(out: &Output) -> String {
    text(&out.stdout).lines().last().unwrap_or("").to_owned()
}

/// Publishes skill `id` (revision 1) into `data`; returns its binding.
fn publish(w: &World, data: &Path, id: &str, files: &[(&str, &[u8])]) -> Binding {
    let dir = w.skill(id, files);
    let out = runner_command()
        .arg("--data-dir")
        .arg(data)
        .args(["store", "add"])
        .arg(&dir)
        .args(["--id", id, "--revision", "1", "--version", "1.0.0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn push(data: &Path, host: &str, src: &str, target: &str) -> String {
    let out = sr(data, host, &["store", "push", src, target]);
    assert!(out.status.success(), "{}", show(&out));
    let digest_ref = last_line(&out);
    assert!(digest_ref.contains("@sha256:"), "{}", show(&out));
    digest_ref
}

/// The store of `data` holds no package and no binding, and no staging
/// folder was left.
fn store_is_empty(data: &Path) {
    for sub in ["packages", "bindings", "tmp"] {
        let p = data.join("store").join(sub);
        let left: Vec<_> = std::fs::read_dir(&p)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{} holds {left:?}", p.display());
    }
}

fn refused(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(125), "{}", show(out));
    let err = text(&out.stderr);
    let line = err.lines().last().unwrap_or("");
    assert!(
        line.contains(says),
        "wanted {says:?} in the last line: {}",
        show(out)
    );
    assert!(out.stdout.is_empty(), "{}", show(out));
}

#[test]
fn a_package_pushed_is_pulled_into_another_data_dir_byte_for_byte() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    let binding = publish(&w, &a, "round", &[("scripts/run.sh", b"echo hi\n")]);
    let host = reg.host();
    let digest_ref = push(
        &a,
        &host,
        "round@1",
        &format!("oci://{host}/skills/round:v1"),
    );
    let out = sr(&b, &host, &["store", "pull", &digest_ref]);
    assert!(out.status.success(), "{}", show(&out));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(
        lines.last().unwrap(),
        &digest_ref,
        "the digest reference is the last line"
    );
    let pulled: Binding = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(pulled, binding);
    let tree = b.join("store/packages").join(&binding.hash).join("tree");
    assert_eq!(
        std::fs::read(tree.join("scripts/run.sh")).unwrap(),
        b"echo hi\n"
    );
    assert_eq!(hash_of(&tree), binding.hash);
    // Piped: one plain line per blob on stderr.
    let err = text(&out.stderr);
    for role in ["manifest", "config", "layer"] {
        assert!(
            err.contains(&format!("skill-runner: pull {role} sha256:"))
                && err.contains("fetched and verified"),
            "{err}"
        );
    }
}

#[test]
fn the_same_package_always_gives_the_same_manifest_digest() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    publish(&w, &a, "same", &[("x.txt", b"x")]);
    // The same folder published into another store, at another time.
    publish(&w, &b, "same", &[("x.txt", b"x")]);
    let first = push(&a, &host, "same@1", &format!("oci://{host}/skills/same:v1"));
    let again = push(&a, &host, "same@1", &format!("oci://{host}/skills/same:v1"));
    let other = push(&b, &host, "same@1", &format!("oci://{host}/skills/other"));
    assert_eq!(first, again);
    let digest = |r: &str| r.rsplit_once('@').unwrap().1.to_owned();
    assert_eq!(digest(&first), digest(&other));
}

#[test]
fn a_held_digest_is_pulled_again_with_the_registry_stopped() {
    let Some(mut reg) = Registry::start() else {
        return;
    };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    let binding = publish(&w, &a, "held", &[]);
    let digest_ref = push(&a, &host, "held@1", &format!("oci://{host}/skills/held:v1"));
    assert!(sr(&b, &host, &["store", "pull", &digest_ref])
        .status
        .success());
    reg.stop();
    assert!(
        http(&host, "GET", "/v2/", &[], b"").is_err(),
        "the registry is gone"
    );
    let out = sr(&b, &host, &["store", "pull", &digest_ref]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(last_line(&out), digest_ref);
    assert!(
        text(&out.stderr).contains("held already, not fetched"),
        "{}",
        show(&out)
    );
    // The library says so too, with no request made.
    let store = skill_runner::package::store::Store::open(
        &skill_runner::datadir::DataDir::open(&b, None).unwrap(),
    )
    .unwrap();
    let r = Reference::parse(&digest_ref).unwrap();
    let pulled = oci::pull_package(&RegistryConfig::default(), &r, &store, &NoProgress).unwrap();
    assert_eq!((pulled.binding, pulled.fetched.len()), (binding, 0));
}

#[test]
fn a_tag_is_pulled_only_with_resolve_tag_which_prints_the_digest() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    publish(&w, &a, "tagged", &[]);
    let tag = format!("oci://{host}/skills/tagged:v1");
    let digest_ref = push(&a, &host, "tagged@1", &tag);
    let out = sr(&b, &host, &["store", "pull", &tag]);
    refused(&out, "names a tag, not a digest");
    store_is_empty(&b);
    let out = sr(&b, &host, &["store", "pull", &tag, "--resolve-tag"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(last_line(&out), digest_ref);
    assert!(
        text(&out.stderr).contains(&format!("resolved to {digest_ref}")),
        "{}",
        show(&out)
    );
    // Anything but the documented form is refused with it.
    let out = sr(&b, &host, &["store", "pull", "docker://x/y"]);
    refused(&out, "oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]");
}

fn manifest_of(host: &str, repo: &str, name: &str) -> (Vec<u8>, Value) {
    let (status, _, body) = http(
        host,
        "GET",
        &format!("/v2/{repo}/manifests/{name}"),
        &[("Accept", artifact::MANIFEST_MEDIA_TYPE)],
        b"",
    )
    .unwrap();
    assert_eq!(status, 200, "{}", text(&body));
    let v = serde_json::from_slice(&body).unwrap();
    (body, v)
}

/// Puts a manifest of `repo` with tag `good`'s config and tag `evil`'s
/// layer (every digest in it right, only the package or environment hash
/// wrong) as tag `forged`, and returns its digest reference.
fn forge_swapped_layer(host: &str, repo: &str) -> String {
    let (_, good) = manifest_of(host, repo, "good");
    let (_, evil) = manifest_of(host, repo, "evil");
    let mut forged = good.clone();
    forged["layers"] = evil["layers"].clone();
    let body = serde_json::to_vec(&forged).unwrap();
    let (status, _, _) = http(
        host,
        "PUT",
        &format!("/v2/{repo}/manifests/forged"),
        &[("Content-Type", artifact::MANIFEST_MEDIA_TYPE)],
        &body,
    )
    .unwrap();
    assert_eq!(status, 201);
    format!("oci://{host}/{repo}@{}", artifact::digest_of(&body))
}

#[test]
fn a_layer_that_is_another_packages_under_a_valid_manifest_never_reaches_the_store() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    publish(&w, &a, "good", &[("x.txt", b"good")]);
    publish(&w, &a, "evil", &[("x.txt", b"evil")]);
    push(&a, &host, "good@1", &format!("oci://{host}/skills/t:good"));
    push(&a, &host, "evil@1", &format!("oci://{host}/skills/t:evil"));
    // A manifest whose config claims good's hash and whose layer is evil's:
    // every digest in it is right, only the package hash is not.
    let digest_ref = forge_swapped_layer(&host, "skills/t");
    let out = sr(&b, &host, &["store", "pull", &digest_ref]);
    refused(&out, "does not verify");
    assert!(
        text(&out.stderr).contains("nothing was stored"),
        "{}",
        show(&out)
    );
    store_is_empty(&b);
}

/// A real artifact's bytes, for a fake registry to serve (and lie about).
struct Artifact {
    config: Vec<u8>,
    layer: Vec<u8>,
}

fn artifact_of(w: &World, id: &str) -> Artifact {
    let dir = w.skill(id, &[("data.bin", &[7u8; 4096])]);
    let binding = Binding {
        id: id.into(),
        revision: 1,
        version: "1.0.0".into(),
        hash: hash_of(&dir),
    };
    let files: Vec<(&str, Vec<u8>)> = ["SKILL.md", "data.bin"]
        .iter()
        .map(|p| (*p, std::fs::read(dir.join(p)).unwrap()))
        .collect();
    let layer = artifact::write_layer(
        Vec::new(),
        files.iter().map(|(p, b)| Entry::File {
            path: p,
            exec: false,
            size: b.len() as u64,
            reader: Box::new(&b[..]),
        }),
    )
    .unwrap();
    Artifact {
        config: oci::package_config(&binding),
        layer,
    }
}

/// A manifest for `art` declaring `size` for its layer.
fn lying_manifest(art: &Artifact, size: u64) -> Vec<u8> {
    artifact::manifest(
        Kind::Package,
        &art.config,
        &artifact::digest_of(&art.layer),
        size,
    )
}

/// A fake registry serving `manifest` for every manifest request and the
/// config; the layer as `layer`.
fn fake(manifest: Vec<u8>, art: &Artifact, layer: Reply) -> FakeRegistry {
    let config_path = format!("/v2/skills/f/blobs/{}", artifact::digest_of(&art.config));
    let layer_path = format!("/v2/skills/f/blobs/{}", artifact::digest_of(&art.layer));
    let config = art.config.clone();
    FakeRegistry::start(move |_, path, _| match path {
        "/v2/" => Reply::ok(b"{}".to_vec()),
        p if p.starts_with("/v2/skills/f/manifests/") => Reply::manifest(manifest.clone()),
        p if p == config_path => Reply::ok(config.clone()),
        p if p == layer_path => layer.clone(),
        _ => Reply::not_found(),
    })
}

#[test]
fn a_manifest_that_lies_about_a_blobs_size_never_gets_it_stored() {
    let w = World::new();
    let art = artifact_of(&w, "sized");
    let real = art.layer.len() as u64;
    for (declared, says) in [
        (real - 512, "sent more bytes than the"),
        (real + 512, "ended after"),
    ] {
        let manifest = lying_manifest(&art, declared);
        let reg = fake(manifest.clone(), &art, Reply::ok(art.layer.clone()));
        let host = reg.host();
        let data = w.path().join(format!("d{declared}"));
        let r = format!("oci://{host}/skills/f@{}", artifact::digest_of(&manifest));
        let out = sr(&data, &host, &["store", "pull", &r]);
        refused(&out, says);
        store_is_empty(&data);
    }
}

#[test]
fn a_tag_moved_between_resolve_and_pull_pulls_what_was_resolved() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    let first = publish(&w, &a, "one", &[]);
    publish(&w, &a, "two", &[]);
    let tag = format!("oci://{host}/skills/moving:latest");
    push(&a, &host, "one@1", &tag);
    let resolved = oci::resolve_tag(&insecure(&host), &Reference::parse(&tag).unwrap()).unwrap();
    push(&a, &host, "two@1", &tag);
    let out = sr(
        &b,
        &host,
        &["store", "pull", &resolved.digest_form().unwrap()],
    );
    assert!(out.status.success(), "{}", show(&out));
    let got: Binding = serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(
        got, first,
        "the digest resolved, not what the tag names now"
    );
}

fn insecure(host: &str) -> RegistryConfig {
    RegistryConfig {
        insecure: vec![host.to_owned()],
        ..RegistryConfig::default()
    }
}

#[test]
fn a_registry_serving_another_manifest_for_a_digest_is_refused() {
    let w = World::new();
    let art = artifact_of(&w, "asked");
    let other = artifact_of(&w, "moved");
    let asked = lying_manifest(&art, art.layer.len() as u64);
    // The tag moved, and the registry answers the old digest with the new
    // manifest.
    let now = lying_manifest(&other, other.layer.len() as u64);
    let reg = fake(now, &other, Reply::ok(other.layer.clone()));
    let host = reg.host();
    let data = w.path().join("d");
    let r = format!("oci://{host}/skills/f@{}", artifact::digest_of(&asked));
    let out = sr(&data, &host, &["store", "pull", &r]);
    refused(&out, "the registry is not serving what was asked for");
    store_is_empty(&data);
}

#[test]
fn a_ten_gigabyte_blob_is_never_read_and_an_endless_blob_or_manifest_is_cut_at_its_bound() {
    let w = World::new();
    let art = artifact_of(&w, "huge");
    // Declared 10 GB: refused by the bound before a byte of it is asked for.
    let manifest = lying_manifest(&art, 10_000_000_000);
    let reg = fake(manifest.clone(), &art, Reply::Endless);
    let host = reg.host();
    let data = w.path().join("d1");
    let r = format!("oci://{host}/skills/f@{}", artifact::digest_of(&manifest));
    let out = sr(&data, &host, &["store", "pull", &r]);
    refused(&out, "declares 10000000000 bytes, over the bound of");
    store_is_empty(&data);
    let served = reg.sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(served < 1 << 20, "the fake sent {served} bytes");
    drop(reg);
    // Declared truthfully small, served without end: reading stops at
    // the first byte past the declared size.
    let manifest = lying_manifest(&art, art.layer.len() as u64);
    let reg = fake(manifest.clone(), &art, Reply::Endless);
    let host = reg.host();
    let data = w.path().join("d2");
    let r = format!("oci://{host}/skills/f@{}", artifact::digest_of(&manifest));
    let out = sr(&data, &host, &["store", "pull", &r]);
    refused(&out, "sent more bytes than the");
    store_is_empty(&data);
    let served = reg.sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        served < 64 << 20,
        "the pull read on: the fake sent {served} bytes"
    );
    drop(reg);
    // A manifest without end: read up to its bound, then refused.
    let reg = FakeRegistry::start(|_, path, _| match path {
        "/v2/" => Reply::ok(b"{}".to_vec()),
        _ => Reply::Endless,
    });
    let host = reg.host();
    let data = w.path().join("d3");
    let r = format!("oci://{host}/skills/f@sha256:{}", "0".repeat(64));
    let out = sr(&data, &host, &["store", "pull", &r]);
    refused(&out, "is over 4194304 bytes; reading stopped there");
    store_is_empty(&data);
    let served = reg.sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(served < 64 << 20, "the fake sent {served} bytes");
}

#[test]
fn an_environment_pushed_is_pulled_verified_into_another_data_dir() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    let tree = w.path().join("tree");
    std::fs::create_dir_all(tree.join("python/pkg")).unwrap();
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    std::fs::write(tree.join("python/pkg/__init__.py"), b"X = 1\n").unwrap();
    std::fs::write(tree.join("bin/tool"), b"#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(
        tree.join("bin/tool"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("pkg/__init__.py", tree.join("python/alias.py")).unwrap();
    let out = runner_command()
        .arg("--data-dir")
        .arg(&a)
        .args(["env", "add"])
        .arg(&tree)
        .args(["--id", "tools"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hash = record["hash"].as_str().unwrap().to_owned();
    let out = sr(
        &a,
        &host,
        &[
            "env",
            "push",
            &format!("tools@{hash}"),
            &format!("oci://{host}/envs/tools:v1"),
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let digest_ref = last_line(&out);
    let out = sr(&b, &host, &["env", "pull", &digest_ref]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(last_line(&out), digest_ref);
    let pulled: Value = serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(
        (&pulled["id"], &pulled["hash"]),
        (&record["id"], &record["hash"])
    );
    let verify = runner_command()
        .arg("--data-dir")
        .arg(&b)
        .args(["env", "verify", &hash])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", show(&verify));
    // A package pull of an environment says which command to use.
    let out = sr(&w.path().join("c"), &host, &["store", "pull", &digest_ref]);
    refused(&out, "use `skill-runner env pull`");
}

#[test]
fn credentials_from_a_docker_config_buy_a_token_that_every_request_carries() {
    use base64::Engine;
    let w = World::new();
    let art = artifact_of(&w, "private");
    let manifest = lying_manifest(&art, art.layer.len() as u64);
    let (config_digest, layer_digest) = (
        artifact::digest_of(&art.config),
        artifact::digest_of(&art.layer),
    );
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
    let me = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (me2, manifest2, config, layer, basic2) = (
        me.clone(),
        manifest.clone(),
        art.config.clone(),
        art.layer.clone(),
        basic.clone(),
    );
    let reg = FakeRegistry::start(move |_, path, headers| {
        let auth = headers
            .iter()
            .find(|h| h.to_ascii_lowercase().starts_with("authorization:"))
            .map(|h| h["authorization:".len()..].trim().to_owned());
        if path.starts_with("/token?") {
            let good = auth == Some(format!("Basic {basic2}"))
                && path.contains("service=fake")
                && path.contains("scope=repository%3Askills%2Ff%3Apull");
            return if good {
                Reply::ok(br#"{"token":"tok-1"}"#.to_vec())
            } else {
                Reply::Body {
                    status: 401,
                    content_type: "application/json",
                    body: b"{}".to_vec(),
                }
            };
        }
        if auth.as_deref() != Some("Bearer tok-1") {
            let host = me2.lock().unwrap().clone();
            return Reply::Challenge(format!(
                "Bearer realm=\"http://{host}/token\",service=\"fake\""
            ));
        }
        match path {
            "/v2/" => Reply::ok(b"{}".to_vec()),
            p if p.starts_with("/v2/skills/f/manifests/") => Reply::manifest(manifest2.clone()),
            p if p.ends_with(&config_digest) => Reply::ok(config.clone()),
            p if p.ends_with(&layer_digest) => Reply::ok(layer.clone()),
            _ => Reply::not_found(),
        }
    });
    let host = reg.host();
    *me.lock().unwrap() = host.clone();
    let r = format!("oci://{host}/skills/f@{}", artifact::digest_of(&manifest));
    // No credentials: the token service refuses, and the pull says so.
    let empty = w.path().join("empty.json");
    std::fs::write(&empty, br#"{"auths":{}}"#).unwrap();
    let data = w.path().join("d");
    let out = sr(
        &data,
        &host,
        &[
            "store",
            "pull",
            &r,
            "--registry-config",
            empty.to_str().unwrap(),
        ],
    );
    refused(&out, "refused the login");
    store_is_empty(&data);
    let config_file = w.path().join("config.json");
    std::fs::write(
        &config_file,
        serde_json::to_vec(&serde_json::json!({"auths": {(host.clone()): {"auth": basic}}}))
            .unwrap(),
    )
    .unwrap();
    let out = sr(
        &data,
        &host,
        &[
            "store",
            "pull",
            &r,
            "--registry-config",
            config_file.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(last_line(&out), r);
}

#[test]
fn tls_registries_are_trusted_through_registry_ca_and_refused_without_it() {
    let w = World::new();
    let d = w.path();
    if !test_ca(d) {
        return;
    }
    let tls = format!(
        "  tls:\n    certificate: {}\n    key: {}\n",
        d.join("leaf.pem").display(),
        d.join("leaf.key").display()
    );
    let Some(reg) = Registry::start_with(&tls) else {
        return;
    };
    let host = reg.host();
    let a = d.join("a");
    publish(&w, &a, "secure", &[]);
    let target = format!("oci://{host}/skills/secure:v1");
    let run = |args: &[&str]| {
        runner_command()
            .arg("--data-dir")
            .arg(&a)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["store", "push", "secure@1", &target]);
    refused(&out, "--registry-ca FILE");
    let ca = d.join("ca.pem");
    let out = run(&[
        "store",
        "push",
        "secure@1",
        &target,
        "--registry-ca",
        ca.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let digest_ref = last_line(&out);
    let b = d.join("b");
    let out = runner_command()
        .arg("--data-dir")
        .arg(&b)
        .args([
            "store",
            "pull",
            &digest_ref,
            "--registry-ca",
            ca.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn an_environment_layer_that_is_another_trees_never_reaches_the_store() {
    let Some(reg) = Registry::start() else { return };
    let w = World::new();
    let host = reg.host();
    let (a, b) = (w.path().join("a"), w.path().join("b"));
    let mut refs = Vec::new();
    for (id, body) in [("good", "G = 1\n"), ("evil", "import os\n")] {
        let tree = w.path().join(id);
        std::fs::create_dir_all(tree.join("python")).unwrap();
        std::fs::write(tree.join("python/m.py"), body).unwrap();
        let out = runner_command()
            .arg("--data-dir")
            .arg(&a)
            .args(["env", "add"])
            .arg(&tree)
            .args(["--id", id])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        let hash = serde_json::from_slice::<Value>(&out.stdout).unwrap()["hash"]
            .as_str()
            .unwrap()
            .to_owned();
        let out = sr(
            &a,
            &host,
            &[
                "env",
                "push",
                &format!("{id}@{hash}"),
                &format!("oci://{host}/envs/t:{id}"),
            ],
        );
        assert!(out.status.success(), "{}", show(&out));
        refs.push(last_line(&out));
    }
    let r = forge_swapped_layer(&host, "envs/t");
    let out = sr(&b, &host, &["env", "pull", &r]);
    refused(&out, "does not verify");
    for sub in ["trees", "records", "tmp"] {
        let p = b.join("environments").join(sub);
        let left: Vec<_> = std::fs::read_dir(&p)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{} holds {left:?}", p.display());
    }
}

/// Writes `ca.pem` and a leaf for 127.0.0.1 it signs (`leaf.pem`,
/// `leaf.key`) into `d`; false (after [`skip`]) without openssl.
fn test_ca(d: &Path) -> bool {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(d)
            .output();
        match out {
            Ok(o) if o.status.success() => true,
            Ok(o) => panic!("openssl {args:?}: {}", show(&o)),
            Err(_) => false,
        }
    };
    if !openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
    ]) {
        skip("openssl is not installed");
        return false;
    }
    std::fs::write(
        d.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    assert!(openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=127.0.0.1"
    ]));
    assert!(openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext"
    ]));
    true
}

/// The value of the `authorization` header among `headers`, if any.
fn authorization(headers: &[String]) -> Option<String> {
    headers
        .iter()
        .filter_map(|h| h.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_owned())
}

#[test]
fn a_tls_registry_cannot_send_the_credentials_or_the_upload_into_plain_http() {
    use base64::Engine as _;
    let w = World::new();
    let d = w.path();
    if !test_ca(d) {
        return;
    }
    let a = d.join("a");
    publish(&w, &a, "secure", &[]);
    let userpass = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
    let basic = format!("Basic {userpass}");
    // The upload location the TLS registry answers a POST with.
    let location = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (loc2, basic2) = (location.clone(), basic);
    let reg = FakeRegistry::start_tls(
        &d.join("leaf.pem"),
        &d.join("leaf.key"),
        move |method, _, headers| {
            if authorization(headers).as_deref() != Some(basic2.as_str()) {
                return Reply::Challenge("Basic realm=\"fake\"".into());
            }
            match method {
                "HEAD" => Reply::not_found(),
                "POST" => Reply::Headers {
                    status: 202,
                    headers: vec![("Location".into(), loc2.lock().unwrap().clone())],
                },
                _ => Reply::Body {
                    status: 201,
                    content_type: "application/json",
                    body: Vec::new(),
                },
            }
        },
    );
    // A plain-HTTP host elsewhere: it keeps the authorization of every
    // request it gets.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let other = FakeRegistry::start(move |_, _, headers| {
        seen2.lock().unwrap().push(authorization(headers));
        Reply::Body {
            status: 201,
            content_type: "application/json",
            body: Vec::new(),
        }
    });
    let host = reg.host();
    let config = d.join("config.json");
    std::fs::write(
        &config,
        serde_json::to_vec(&serde_json::json!({"auths": {(host.clone()): {"auth": userpass}}}))
            .unwrap(),
    )
    .unwrap();
    let ca = d.join("ca.pem");
    let target = format!("oci://{host}/skills/secure:v1");
    let push = |extra: &[&str]| {
        runner_command()
            .arg("--data-dir")
            .arg(&a)
            .args(["store", "push", "secure@1", &target, "--registry-ca"])
            .arg(&ca)
            .arg("--registry-config")
            .arg(&config)
            .args(extra)
            .output()
            .unwrap()
    };
    // Plain HTTP on the registry's own authority: refused, and no
    // request arrived there in the clear.
    let own = format!("http://{host}/v2/skills/secure/blobs/uploads/u1");
    *location.lock().unwrap() = format!("{own}?_state=x");
    let out = push(&[]);
    assert!(
        reg.plain.lock().unwrap().is_empty(),
        "{:?}",
        reg.plain.lock().unwrap()
    );
    refused(
        &out,
        &format!("refused to send a request to {own}: the registry named a plain-HTTP location"),
    );
    // Plain HTTP to another host not named insecure: refused, nothing sent.
    let elsewhere = format!("http://{}/v2/skills/secure/blobs/uploads/u2", other.host());
    *location.lock().unwrap() = elsewhere.clone();
    let out = push(&[]);
    assert_eq!(other.requests.load(std::sync::atomic::Ordering::SeqCst), 0);
    refused(&out, &format!("refused to send a request to {elsewhere}: "));
    // Named insecure, that host gets the uploads, never the credentials.
    let out = push(&["--insecure-registry", &other.host()]);
    assert!(out.status.success(), "{}", show(&out));
    let seen = seen.lock().unwrap();
    assert!(
        !seen.is_empty() && seen.iter().all(Option::is_none),
        "{seen:?}"
    );
    assert!(reg.plain.lock().unwrap().is_empty());
}
