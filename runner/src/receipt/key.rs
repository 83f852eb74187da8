//! The runner's receipt key: ed25519, kept as PKCS#8 PEM in a file only
//! the runner's user can read (`<data>/keys/receipt-ed25519.pem`, made on
//! first use, or the file `--receipt-key` names). A key file is opened
//! without following a symlink and refused unless it is a regular file
//! owned by the runner's user with no permission for group or others, so
//! a key another user could read or swap is never used. The key id is
//! the SHA-256 (lowercase hex) of the public key's DER SubjectPublicKeyInfo
//! (RFC 8410: 44 bytes, `302a300506032b6570032100` then the 32 key bytes).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

/// The name of the default key file in the data dir's key folder.
pub const KEY_FILE: &str = "receipt-ed25519.pem"; // as `datadir::RECEIPT_KEY_FILE`

/// A key file larger than this is not a key.
const MAX_KEY_FILE: u64 = 16 * 1024;

/// Why a receipt key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot open the receipt key {}: {source}; pass --receipt-key FILE with a PKCS#8 PEM ed25519 key, or --no-receipt", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("the receipt key {} is a symlink or not a regular file; a key file must be a plain file", path.display())]
    NotAFile { path: PathBuf },
    #[error("the receipt key {} is owned by uid {owner}, not by the runner's uid {uid}; chown it or generate a new one", path.display())]
    Owner { path: PathBuf, owner: u32, uid: u32 },
    #[error("the receipt key {} has mode {mode:o}, readable or writable by others; chmod 600 it (and treat it as leaked if others could read it)", path.display())]
    Permissions { path: PathBuf, mode: u32 },
    #[error("cannot read the receipt key {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("the receipt key {} has {links} hard links, so it may be reachable under a name no check of a job's folders can see; keep it as a single link (copy it to a new file and remove the others)", path.display())]
    Links { path: PathBuf, links: u64 },
    #[error("cannot create the receipt key {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("the public key {origin} is not an ed25519 SubjectPublicKeyInfo PEM: {reason}")]
    Public { origin: String, reason: String },
}

/// The runner's signing key.
pub struct Signer {
    key: SigningKey,
    public: PublicKey,
    path: PathBuf,
    /// `path` with its symlinks resolved, once, then every other path it
    /// is visible at through another mount of its file system
    /// ([`crate::fsx::aliases`]): a job's folders are checked against
    /// each at every execution.
    places: Vec<PathBuf>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("Signer")
            .field("keyid", &self.public.keyid)
            .field("path", &self.path)
            .finish()
    }
}

/// A public key a receipt may be checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub key: VerifyingKey,
    pub keyid: String,
}

impl PublicKey {
    pub fn new(key: VerifyingKey) -> PublicKey {
        let der = key
            .to_public_key_der()
            .expect("an ed25519 key always has a DER form");
        PublicKey {
            key,
            keyid: crate::receipt::canonical::bytes_sha256_hex(der.as_bytes()),
        }
    }

    /// Reads a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(text: &str, origin: &str) -> Result<PublicKey, KeyError> {
        let key = VerifyingKey::from_public_key_pem(text.trim()).map_err(|e| KeyError::Public {
            origin: origin.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(PublicKey::new(key))
    }

    /// A trusted key from a file: a SubjectPublicKeyInfo PEM, or the
    /// `{keyid, public_key_pem}` document `receipt-key --json` prints.
    pub fn from_file(path: &Path) -> Result<PublicKey, KeyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| KeyError::Public {
            origin: origin.clone(),
            reason: format!("cannot read it ({e})"),
        })?;
        let pem = match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(doc) => match doc.get("public_key_pem").and_then(|p| p.as_str()) {
                Some(pem) => pem.to_owned(),
                None => text,
            },
            Err(_) => text,
        };
        PublicKey::from_pem(&pem, &origin)
    }

    /// The SubjectPublicKeyInfo PEM, LF line ends.
    pub fn pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .expect("an ed25519 key always has a PEM form")
    }

    /// `{keyid, public_key_pem}`: what `receipt-key --json` and
    /// `GET /v1/receipt-key` answer.
    pub fn document(&self) -> serde_json::Value {
        serde_json::json!({"keyid": self.keyid, "public_key_pem": self.pem()})
    }
}

impl Signer {
    /// The key in `path`, made first when there is none (the data dir's
    /// default key). `keys` is the folder that holds it: made 0700.
    pub fn load_or_create(path: &Path) -> Result<Signer, KeyError> {
        match Signer::load(path) {
            Err(KeyError::Open { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            // The private sibling of another runner's new key, linked
            // and not yet removed (or left by a crash in between): removed
            // here, or by that runner since the load (so none is found),
            // and the key read again. A second link that is no sibling of
            // ours stays and refuses the key.
            Err(KeyError::Links { .. }) => {
                remove_new_siblings(path);
                return Signer::load(path);
            }
            other => return other,
        }
        if let Some(dir) = path.parent() {
            crate::fsx::create_private_dir(dir).map_err(|source| KeyError::Create {
                path: dir.to_owned(),
                source,
            })?;
        }
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Create {
            path: path.to_owned(),
            source: io::Error::other(e.to_string()),
        })?;
        let key = SigningKey::from_bytes(&seed);
        let pem = key
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| KeyError::Create {
                path: path.to_owned(),
                source: io::Error::other(e.to_string()),
            })?;
        match write_new_private(path, pem.as_bytes()) {
            Ok(()) => {}
            // Another runner made it first: use theirs, once its
            // private sibling is gone.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                remove_new_siblings(path);
            }
            Err(source) => {
                return Err(KeyError::Create {
                    path: path.to_owned(),
                    source,
                })
            }
        }
        Signer::load(path)
    }

    /// The key in `path`, which must be a private regular file of ours.
    pub fn load(path: &Path) -> Result<Signer, KeyError> {
        let open = |source| KeyError::Open {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => KeyError::NotAFile {
                    path: path.to_owned(),
                },
                _ => open(e),
            })?;
        Signer::from_opened(file, path)
    }

    /// The key in `file`, opened as `path` by [`Signer::load`].
    fn from_opened(mut file: File, path: &Path) -> Result<Signer, KeyError> {
        check_private(&file, path)?;
        let mut text = String::new();
        (&mut file)
            .take(MAX_KEY_FILE)
            .read_to_string(&mut text)
            .map_err(|e| KeyError::Read {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
        let key = SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| KeyError::Read {
            path: path.to_owned(),
            reason: format!("not a PKCS#8 PEM ed25519 private key ({e})"),
        })?;
        let public = PublicKey::new(key.verifying_key());
        let real = real_path_of(&file, path).map_err(|reason| KeyError::Read {
            path: path.to_owned(),
            reason: format!("cannot tell where it really is ({reason}), so no job folder could be checked against it"),
        })?;
        let mut places = vec![real.clone()];
        if let Ok(meta) = file.metadata() {
            places.extend(crate::fsx::aliases::aliases(&real, &meta));
        }
        Ok(Signer {
            key,
            public,
            path: path.to_owned(),
            places,
        })
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// The key file, its symlinks resolved when it was loaded: a job's
    /// folders must never hold it.
    pub fn real_path(&self) -> &Path {
        &self.places[0]
    }

    /// Every path the key file was visible at when it was loaded: its
    /// [`Signer::real_path`] first, then the same file through other
    /// mounts (a bind of a folder above it). A job's folders must hold
    /// none of them.
    pub fn places(&self) -> &[PathBuf] {
        &self.places
    }

    /// The ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

/// Where the opened key file `file` (opened as `path`) is, its links
/// resolved: on Linux the kernel's path of the open descriptor, so it is
/// the file that was read, not whatever `path` names by now (elsewhere,
/// or without `/proc`, `path` resolved); either way checked to name that
/// same file (device and inode), which a key renamed or removed since its
/// open is not.
fn real_path_of(file: &File, path: &Path) -> Result<PathBuf, String> {
    #[cfg(target_os = "linux")]
    let real = {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .or_else(|_| path.canonicalize())
    };
    #[cfg(not(target_os = "linux"))]
    let real = path.canonicalize();
    let real = real.map_err(|e| e.to_string())?;
    let opened = file.metadata().map_err(|e| e.to_string())?;
    // Both sides from an open file (`fstat`), never one from a path's
    // `stat`: on overlayfs before Linux 4.19 the two can differ for the
    // same file.
    let found = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&real)
        .and_then(|f| f.metadata());
    match found {
        Ok(m) if m.dev() == opened.dev() && m.ino() == opened.ino() => Ok(real),
        Ok(_) => Err(format!("{} is another file by now", real.display())),
        Err(e) => Err(format!("{}: {e}", real.display())),
    }
}

/// A regular file owned by this process's user, no bits for group or
/// others.
fn check_private(file: &File, path: &Path) -> Result<(), KeyError> {
    let meta = file.metadata().map_err(|source| KeyError::Open {
        path: path.to_owned(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(KeyError::NotAFile {
            path: path.to_owned(),
        });
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(KeyError::Owner {
            path: path.to_owned(),
            owner: meta.uid(),
            uid,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: path.to_owned(),
            mode: meta.mode() & 0o7777,
        });
    }
    // A second name in the file system is in no mount table: it could be
    // inside a folder a job is given, and no check could tell.
    if meta.nlink() > 1 {
        return Err(KeyError::Links {
            path: path.to_owned(),
            links: meta.nlink(),
        });
    }
    Ok(())
}

/// Creates `path` holding `bytes`, mode 0600 from its first byte: a
/// private sibling made with `O_EXCL | O_NOFOLLOW`, synced, then
/// `link(2)`ed into place, which never replaces (an existing `path` is
/// `AlreadyExists`) nor follows a link.
fn write_new_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", crate::fsx::random_hex()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    written
}

/// Removes the private siblings [`write_new_private`] makes for `path`
/// (`.<name>.<hex>.tmp`) that are the key file itself, a second link of
/// it: whether one was removed.
fn remove_new_siblings(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let Ok(key) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let mut removed = false;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if !(file.starts_with(&prefix) && file.ends_with(".tmp")) {
            continue;
        }
        let same = entry
            .metadata()
            .is_ok_and(|m| m.dev() == key.dev() && m.ino() == key.ino());
        if same && std::fs::remove_file(entry.path()).is_ok() {
            removed = true;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_made_private_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys").join(KEY_FILE);
        let a = Signer::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let keys = std::fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(keys.permissions().mode() & 0o777, 0o700);
        let b = Signer::load_or_create(&path).unwrap();
        assert_eq!(a.public(), b.public());
        assert_eq!(a.public().keyid.len(), 64);
        let again = PublicKey::from_pem(&a.public().pem(), "test").unwrap();
        assert_eq!(&again, a.public());
        // The documented key id: SHA-256 of the 44-byte DER SPKI.
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(a.public().key.as_bytes());
        assert_eq!(
            a.public().keyid,
            crate::receipt::canonical::bytes_sha256_hex(&der)
        );
    }

    /// A key with a second name in its file system is refused; the one
    /// second name a key is made with (its private sibling, left by a
    /// crash between its link and its removal) is removed by
    /// `load_or_create`, a file that merely looks like one is not.
    #[test]
    fn a_key_with_a_second_hard_link_is_refused_but_its_own_sibling_is_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        Signer::load_or_create(&path).unwrap();
        let elsewhere = dir.path().join("copy.pem");
        std::fs::hard_link(&path, &elsewhere).unwrap();
        for e in [Signer::load(&path), Signer::load_or_create(&path)] {
            let e = e.unwrap_err().to_string();
            assert!(
                e.contains("has 2 hard links") && e.contains("single link"),
                "{e}"
            );
        }
        std::fs::remove_file(&elsewhere).unwrap();
        let sibling = dir.path().join(format!(".{KEY_FILE}.0123abcd.tmp"));
        std::fs::hard_link(&path, &sibling).unwrap();
        let lookalike = dir.path().join(format!(".{KEY_FILE}.ffff.tmp"));
        std::fs::write(&lookalike, b"not the key").unwrap();
        assert!(matches!(
            Signer::load(&path),
            Err(KeyError::Links { links: 2, .. })
        ));
        let signer = Signer::load_or_create(&path).unwrap();
        assert_eq!(signer.places()[0], path.canonicalize().unwrap());
        assert!(!sibling.exists());
        assert!(lookalike.exists());
    }

    /// Runners that start at once on a data dir with no key all end with
    /// the one key that was made first: none refuses it for the second
    /// link a maker holds a moment (its private sibling, which another
    /// runner may remove first).
    #[test]
    fn runners_that_make_the_key_at_once_all_use_the_one_made_first() {
        for _ in 0..100 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("keys").join(KEY_FILE);
            let barrier = std::sync::Barrier::new(6);
            let keys: Vec<String> = std::thread::scope(|s| {
                let started: Vec<_> = (0..6)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            match Signer::load_or_create(&path) {
                                Ok(k) => k.public().keyid.clone(),
                                Err(e) => format!("refused: {e}"),
                            }
                        })
                    })
                    .collect();
                started.into_iter().map(|t| t.join().unwrap()).collect()
            });
            assert!(keys.iter().all(|k| *k == keys[0]), "{keys:#?}");
            assert!(!keys[0].starts_with("refused"), "{keys:#?}");
        }
    }

    #[test]
    fn a_keys_real_path_is_the_file_that_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        let path = real.join(KEY_FILE);
        Signer::load_or_create(&path).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let signer = Signer::load(&dir.path().join("link").join(KEY_FILE)).unwrap();
        assert_eq!(signer.real_path(), path.canonicalize().unwrap());

        // Moved after it was opened: where the opened file is now (on
        // Linux), never what the old name holds by then.
        let file = File::open(&path).unwrap();
        let moved = real.join("moved.pem");
        std::fs::rename(&path, &moved).unwrap();
        std::fs::write(&path, b"another file").unwrap();
        let found = Signer::from_opened(file, &path);
        if cfg!(target_os = "linux") {
            assert_eq!(found.unwrap().real_path(), moved.canonicalize().unwrap());
        } else {
            let refused = found.err().unwrap().to_string();
            assert!(refused.contains("another file by now"), "{refused}");
        }
        // Removed after it was opened: no path names it, so it is refused.
        let file = File::open(&moved).unwrap();
        std::fs::remove_file(&moved).unwrap();
        let refused = Signer::from_opened(file, &moved).err().unwrap().to_string();
        assert!(
            refused.contains("cannot tell where it really is"),
            "{refused}"
        );
    }

    #[test]
    fn loose_symlinked_or_foreign_key_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        Signer::load_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = Signer::load(&path).unwrap_err();
        assert!(matches!(e, KeyError::Permissions { .. }), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.pem");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = Signer::load(&link).unwrap_err();
        assert!(matches!(e, KeyError::NotAFile { .. }), "{e}");
        // A symlink planted where the default key goes is not followed
        // nor replaced.
        let e = Signer::load_or_create(&link).unwrap_err();
        assert!(matches!(e, KeyError::NotAFile { .. }), "{e}");
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            let e = Signer::load(&path).unwrap_err();
            assert!(matches!(e, KeyError::Owner { .. }), "{e}");
        }
    }
}
