//! The remote tier's value authentication: the key every mount of a deployment shares, read
//! from `cache.remote.secret_file`, and the keyed MAC each value carries.
//!
//! Anyone who can write to the Redis server can write a value whose CRC-32 and key hash are
//! right (they are public functions), so those only catch accidents. The MAC is keyed BLAKE3
//! (`blake3::keyed_hash`) under a 32-byte key derived from the secret file's bytes
//! (`blake3::derive_key` under [`KEY_CONTEXT`]); its input is a domain and version tag, the
//! Redis key the value is stored under (length-prefixed), the value's header and its payload.
//! So a value forged without the secret, written with another deployment's secret, or moved to
//! another key fails, and is never served.
//!
//! The secret file is refused, like an ssh key, when it is missing, not a regular file, empty,
//! shorter than [`MIN_SECRET`] bytes, or readable or writable by group or others.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Bytes of a MAC in a value's header.
pub const MAC_LEN: usize = 32;
/// The context the MAC key is derived under (BLAKE3's `derive_key`): fixed, unique to this use.
const KEY_CONTEXT: &str = "prepfs remote cache tier 2026-11 value MAC key";
/// The first bytes of every MAC's input: what is authenticated, and its format's version.
const DOMAIN: &[u8] = b"prepfs-remote-value-v2\0";
/// A secret shorter than this is refused (32 random bytes are what the docs make).
pub(crate) const MIN_SECRET: usize = 16;
/// A secret file longer than this is refused (it is not a key file).
const MAX_SECRET: u64 = 64 << 10;

/// How to make a secret file, for errors.
pub const HOW_TO_MAKE: &str = "make one with `head -c 32 /dev/urandom > /etc/prepfs/redis.secret && chmod 600 /etc/prepfs/redis.secret`, copy it to every machine sharing the tier, and name it in `cache.remote.secret_file`";

/// A secret file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read {}: {source}", prepfs_base::escape::escaped(path))]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is not a regular file", prepfs_base::escape::escaped(path))]
    NotFile { path: PathBuf },
    #[error("{} holds {len} bytes; a secret needs at least {MIN_SECRET} ({HOW_TO_MAKE})", prepfs_base::escape::escaped(path))]
    Short { path: PathBuf, len: u64 },
    #[error("{} holds more than {MAX_SECRET} bytes: not a secret file", prepfs_base::escape::escaped(path))]
    Long { path: PathBuf },
    #[error("{} is not UTF-8 text", prepfs_base::escape::escaped(path))]
    NotText { path: PathBuf },
    #[error("{} has mode {mode:04o}: a secret must not be readable or writable by group or others (chmod 600 {})", prepfs_base::escape::escaped(path), prepfs_base::escape::escaped(path))]
    Open { path: PathBuf, mode: u32 },
}

/// The key values are authenticated with (derived from the deployment's secret). Its `Debug`
/// shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct ValueKey([u8; 32]);

impl std::fmt::Debug for ValueKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ValueKey(..)")
    }
}

impl ValueKey {
    /// The key of a secret's bytes.
    pub fn from_secret(secret: &[u8]) -> ValueKey {
        ValueKey(blake3::derive_key(KEY_CONTEXT, secret))
    }

    /// Reads and checks the secret file at `path` (see the module documentation): its bytes,
    /// exactly (a trailing newline is part of the secret).
    pub fn load(path: &Path) -> Result<ValueKey, SecretError> {
        let mut secret = read_private(path)?;
        if secret.len() < MIN_SECRET {
            return Err(SecretError::Short { path: path.to_path_buf(), len: secret.len() as u64 });
        }
        let key = ValueKey::from_secret(&secret);
        secret.fill(0);
        Ok(key)
    }

    /// The MAC of a value stored under `key` with `header` (the header's bytes before the MAC)
    /// and `payload`.
    pub fn mac(&self, key: &[u8], header: &[u8], payload: &[u8]) -> [u8; MAC_LEN] {
        *self.hash(key, header, payload).as_bytes()
    }

    /// The one definition of what the MAC covers: the domain, the key name (length first),
    /// the header, the payload.
    fn hash(&self, key: &[u8], header: &[u8], payload: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(DOMAIN);
        h.update(&(key.len() as u64).to_le_bytes());
        h.update(key);
        h.update(header);
        h.update(payload);
        h.finalize()
    }

    /// Whether `tag` is the MAC of the value (compared in constant time).
    pub fn verify(&self, key: &[u8], header: &[u8], payload: &[u8], tag: &[u8]) -> bool {
        let Ok(tag) = <[u8; MAC_LEN]>::try_from(tag) else { return false };
        // blake3::Hash's equality is constant time.
        self.hash(key, header, payload) == blake3::Hash::from_bytes(tag)
    }
}

/// A private file's bytes: refused when missing, not a regular file, longer than
/// [`MAX_SECRET`], or readable or writable by group or others.
fn read_private(path: &Path) -> Result<Vec<u8>, SecretError> {
    let read = |source| SecretError::Read { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(read)?;
    // The opened file's own metadata: what is read is what was checked.
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(SecretError::NotFile { path: path.to_path_buf() });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Open { path: path.to_path_buf(), mode });
    }
    let mut bytes = Vec::with_capacity(meta.len().min(MAX_SECRET) as usize);
    file.take(MAX_SECRET + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > MAX_SECRET {
        return Err(SecretError::Long { path: path.to_path_buf() });
    }
    Ok(bytes)
}

/// The Redis password in `cache.remote.password_file`: a private file (as the secret's), UTF-8,
/// one trailing newline taken off; an empty one is refused.
pub(crate) fn read_password(path: &Path) -> Result<String, SecretError> {
    let bytes = read_private(path)?;
    let text = String::from_utf8(bytes).map_err(|_| SecretError::NotText { path: path.to_path_buf() })?;
    let password = text.strip_suffix('\n').map_or(&text[..], |t| t.strip_suffix('\r').unwrap_or(t)).to_string();
    if password.is_empty() {
        return Err(SecretError::Short { path: path.to_path_buf(), len: 0 });
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn a_secret_file_is_refused_unless_private_regular_and_long_enough() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = write(dir.path(), "good", &[7; 32], 0o600);
        assert_eq!(ValueKey::load(&good).expect("good"), ValueKey::from_secret(&[7; 32]));
        let r = write(dir.path(), "r", &[7; 32], 0o400);
        assert!(ValueKey::load(&r).is_ok());
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            let p = write(dir.path(), &format!("m{mode:o}"), &[7; 32], mode);
            let err = ValueKey::load(&p).expect_err("open mode").to_string();
            assert!(err.contains("group or others") && err.contains("chmod 600"), "{err}");
        }
        let err = ValueKey::load(&write(dir.path(), "empty", b"", 0o600)).expect_err("empty").to_string();
        assert!(err.contains("0 bytes") && err.contains("head -c 32 /dev/urandom"), "{err}");
        assert!(matches!(ValueKey::load(&write(dir.path(), "short", b"short", 0o600)), Err(SecretError::Short { .. })));
        assert!(matches!(ValueKey::load(&dir.path().join("missing")), Err(SecretError::Read { .. })));
        let sub = dir.path().join("d");
        std::fs::create_dir(&sub).expect("mkdir");
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(matches!(ValueKey::load(&sub), Err(SecretError::NotFile { .. })));
        assert!(!format!("{:?}", ValueKey::from_secret(&[7; 32])).contains('7'));
        assert_eq!(read_password(&write(dir.path(), "pw", b"hunter2\n", 0o600)).expect("pw"), "hunter2");
        assert!(matches!(read_password(&write(dir.path(), "pw-open", b"hunter2\n", 0o644)), Err(SecretError::Open { .. })));
        assert!(read_password(&write(dir.path(), "pw-empty", b"\n", 0o600)).is_err());
    }

    #[test]
    fn a_mac_binds_the_key_name_the_header_the_payload_and_the_secret() {
        let k = ValueKey::from_secret(b"0123456789abcdef0123");
        let tag = k.mac(b"key", b"header", b"payload");
        assert!(k.verify(b"key", b"header", b"payload", &tag));
        assert!(!k.verify(b"other", b"header", b"payload", &tag), "moved to another key");
        assert!(!k.verify(b"key", b"headex", b"payload", &tag));
        assert!(!k.verify(b"key", b"header", b"payloae", &tag));
        // The key's length is bound: bytes cannot move between the key name and the header.
        assert!(!k.verify(b"keyh", b"eader", b"payload", &tag));
        assert!(!ValueKey::from_secret(b"0123456789abcdef0124").verify(b"key", b"header", b"payload", &tag), "another secret");
        assert!(!k.verify(b"key", b"header", b"payload", &tag[..31]));
    }
}
