//! The tier's keys and values: the dataset's and the recipe's fingerprints, the key of each
//! form of a sample's version, the shared indexes' keys, and a value's codec (the entry codec's
//! header, the MAC, the payload) with its damage rules.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::entry::{self, Damage, Format};
use prepfs_base::hash::fnv1a64;
use prepfs_source::Identity;
use prepfs_source::catalog::Catalog;

use super::auth::{self, ValueKey};

/// Bytes of the header before every payload.
pub const HEADER_LEN: usize = CHECKED_LEN + auth::MAC_LEN;
/// Bytes of the header before its MAC (the entry codec's header: what the MAC covers of it).
const CHECKED_LEN: usize = entry::HEADER_LEN;
/// The remote tier's header. Version 2: the MAC (version 1 values, unauthenticated, are refused
/// as damaged).
const FORMAT: Format = Format { magic: *b"PFRM", version: 2 };

/// The forms the remote tier holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteKind {
    Encoded,
    Decoded,
    Augmented,
}

impl RemoteKind {
    /// Its kind in the entry header.
    pub(super) fn entry(self) -> entry::Kind {
        match self {
            RemoteKind::Encoded => entry::Kind::Encoded,
            RemoteKind::Decoded => entry::Kind::Decoded,
            RemoteKind::Augmented => entry::Kind::Augmented,
        }
    }
    pub(super) fn letter(self) -> u8 {
        match self {
            RemoteKind::Encoded => b'e',
            RemoteKind::Decoded => b'd',
            RemoteKind::Augmented => b'a',
        }
    }
}

/// The dataset's fingerprint: the catalog's relative paths (directories and files, in the
/// catalog's sorted order), hashed once at mount. Sizes and mtimes enter each key instead (see
/// the module documentation), so mounting stats no file and one changed file leaves the other
/// samples' entries valid.
pub fn dataset_fingerprint(catalog: &Catalog) -> u64 {
    let root = catalog.root();
    let dirs: Vec<Vec<u8>> = (0..catalog.dir_count() as u32)
        .map(|d| {
            let path = catalog.dir_path(d);
            path.strip_prefix(root).unwrap_or(&path).as_os_str().as_bytes().to_vec()
        })
        .collect();
    let mut h: u64 = fnv1a64(&[b"prepfs-dataset-1", &(catalog.file_count() as u64).to_le_bytes()]);
    for file in 0..catalog.file_count() as u32 {
        let dir = dirs.get(catalog.file_dir(file) as usize).map_or(&[][..], |d| &d[..]);
        h = fnv1a64(&[&h.to_le_bytes(), dir, b"/", catalog.file_name(file).as_bytes(), &[0]]);
    }
    h
}

/// The key of the dataset's shared index of held samples: a bitmap by catalog id (the
/// fingerprint's hash tag puts it in one cluster slot).
pub fn held_key_of(fingerprint: u64) -> Vec<u8> {
    format!("prepfs:1:{{{fingerprint:016x}}}:held").into_bytes()
}

/// The key of the dataset's shared index of augmented outputs waiting for a claimer, made by
/// `recipe` (a bitmap by catalog id).
pub fn waiting_key_of(fingerprint: u64, recipe: u64) -> Vec<u8> {
    format!("prepfs:1:{{{fingerprint:016x}}}:waiting:{recipe:016x}").into_bytes()
}

/// The fingerprint of what an augmented output is: the augmentations and the output format.
/// Mounts whose recipes differ never take each other's outputs.
pub fn recipe_fingerprint(augment: &impl serde::Serialize, output: &impl serde::Serialize) -> u64 {
    let text = serde_json::to_vec(&(augment, output)).unwrap_or_default();
    fnv1a64(&[b"prepfs-recipe-1", &text])
}

/// The key of one form of one version of a sample (see the module documentation); an
/// augmented output's also names the `recipe` that made it.
pub fn key_of(fingerprint: u64, recipe: u64, rel_path: &Path, version: &Identity, kind: RemoteKind) -> Vec<u8> {
    let rel = rel_path.as_os_str().as_bytes();
    let mut key = Vec::with_capacity(rel.len() + 96);
    key.extend_from_slice(format!("prepfs:1:{{{fingerprint:016x}:{}:{}:", version.len, version.mtime_ns).as_bytes());
    key.extend_from_slice(rel);
    key.extend_from_slice(b"}:");
    key.push(kind.letter());
    if kind == RemoteKind::Augmented {
        key.extend_from_slice(format!(":{recipe:016x}").as_bytes());
    }
    key
}

/// A value for `key`: the header (its MAC under `mac`), then `payload`.
pub(crate) fn encode_value(mac: &ValueKey, kind: RemoteKind, key: &[u8], payload: &[u8], dims: (u32, u32)) -> Vec<u8> {
    let head = entry::header(FORMAT, kind.entry(), fnv1a64(&[key]), payload, dims);
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&head);
    v.extend_from_slice(&mac.mac(key, &head, payload));
    v.extend_from_slice(payload);
    v
}

/// Checks a value read under `key`, its MAC under `mac` last; returns its (width, height) and
/// the payload (the header taken off in place).
pub(super) fn decode_value(mac: &ValueKey, kind: RemoteKind, key: &[u8], mut value: Vec<u8>) -> Result<((u32, u32), Vec<u8>), Damage> {
    let dims = check_value(mac, kind, key, &value)?;
    value.drain(..HEADER_LEN);
    Ok((dims, value))
}

/// [`decode_value`]'s checks, on the value where it lies: its (width, height); the payload is
/// `value[HEADER_LEN..]`.
pub(super) fn check_value(mac: &ValueKey, kind: RemoteKind, key: &[u8], value: &[u8]) -> Result<(u32, u32), Damage> {
    if value.len() < HEADER_LEN {
        return Err(Damage::Short);
    }
    let (h, payload) = value.split_at(HEADER_LEN);
    let head = entry::head_of(h)?;
    let header = entry::check(head, payload, FORMAT, kind.entry(), fnv1a64(&[key]))?;
    if !mac.verify(key, head, payload, &h[CHECKED_LEN..]) {
        return Err(Damage::Forged);
    }
    Ok((header.width, header.height))
}
