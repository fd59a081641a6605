//! The object store's listing kept between mounts, and the rule that says when a kept one is
//! used: one file per store and prefix, `<dir>/<hash of the store>.listing`, holding what the
//! listing found (each served key's name below the prefix, size, ETag and last-modified time,
//! and the counts of keys listed and skipped) and when it was listed.
//!
//! The rule ([`load`]): a kept listing is used only if it is whole (its CRC holds, its format
//! is this version's, it fits [`MAX_FILE_BYTES`]), of this very store (endpoint, region, bucket
//! and prefix, written inside and compared, not only hashed into the name), and younger than
//! `source.listing_max_age` (listed at most that long ago, and not in the future). Anything else
//! lists the store again and rewrites the file; a damaged file is said in a warning. An object
//! replaced since is found by its read (`If-Match` its kept ETag fails), as within a mount.
//!
//! Format (little-endian, framed by `source::kept`): magic `PFSLST01`; the store; when listed
//! (ns since the epoch); keys listed and skipped; the objects (name, size, ETag or none, mtime).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::io::Object;
use crate::settings::ObjectStoreConfig;
use crate::kept::{self, put_bytes, Reader};

const MAGIC: &[u8; 8] = b"PFSLST01";

/// The largest listing file read (some 20 million keys): a larger one is not used.
const MAX_FILE_BYTES: u64 = 2 << 30;

/// The fewest bytes one object takes in the file (an empty name, no ETag).
const MIN_OBJECT_BYTES: usize = 4 + 8 + 1 + 16;

/// A listing, as kept.
#[derive(Debug, Clone)]
pub(super) struct KeptListing {
    pub(super) listed_at: SystemTime,
    pub(super) keys: usize,
    pub(super) skipped: usize,
    /// The keys served, as [`Object`]s (names below the prefix, in the order listed).
    pub(super) objects: Vec<Object>,
}

/// Why a kept listing was not used (for the log).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum NotUsed {
    /// No file (the first mount, or nowhere to keep it).
    Missing,
    /// Damaged, cut, of another version, too large, or for another store.
    Damaged(String),
    /// Listed longer ago than the rule allows (or in the future).
    Stale { age_s: f64 },
}

/// Tells one store and prefix from any other: endpoint (as the client resolves it), region,
/// bucket and prefix.
pub(super) fn store_of(config: &ObjectStoreConfig) -> String {
    let endpoint = config.endpoint.clone().or_else(|| std::env::var("AWS_ENDPOINT_URL").ok()).unwrap_or_else(|| "aws".to_string());
    let region = config.region.clone().or_else(|| std::env::var("AWS_REGION").ok()).unwrap_or_default();
    format!("{endpoint}\n{region}\n{}\n{}", config.bucket, config.prefix)
}

/// Where the listing of `store` is kept in `dir`.
pub(super) fn file_for(dir: &Path, store: &str) -> PathBuf {
    dir.join(format!("{:016x}.listing", prepfs_base::hash::fnv1a64(&[store.as_bytes()])))
}

/// The listing of `store` kept in `dir`, if the rule (module documentation) lets it be used now.
pub(super) fn load(dir: &Path, store: &str, strip: &str, max_age: Duration) -> Result<KeptListing, NotUsed> {
    let bytes = match kept::read_bounded(&file_for(dir, store), MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(NotUsed::Missing),
        Err(e) => return Err(NotUsed::Damaged(e.to_string())),
    };
    let listing = decode(&bytes, store, strip).ok_or_else(|| NotUsed::Damaged("damaged, cut, of another version or of another store".to_string()))?;
    match SystemTime::now().duration_since(listing.listed_at) {
        Ok(age) if age <= max_age => Ok(listing),
        Ok(age) => Err(NotUsed::Stale { age_s: age.as_secs_f64() }),
        Err(ahead) => Err(NotUsed::Stale { age_s: -ahead.duration().as_secs_f64() }),
    }
}

/// Keeps `listing` of `store` in `dir` (made if missing), replacing the file whole.
pub(super) fn save(dir: &Path, store: &str, listing: &KeptListing) -> std::io::Result<u64> {
    let bytes = encode(store, listing);
    kept::write_atomically(&file_for(dir, store), &bytes)?;
    Ok(bytes.len() as u64)
}

fn encode(store: &str, listing: &KeptListing) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + listing.objects.len() * 64);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, store.as_bytes());
    let ns = listing.listed_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
    out.extend_from_slice(&ns.to_le_bytes());
    out.extend_from_slice(&(listing.keys as u64).to_le_bytes());
    out.extend_from_slice(&(listing.skipped as u64).to_le_bytes());
    out.extend_from_slice(&(listing.objects.len() as u64).to_le_bytes());
    for o in &listing.objects {
        put_bytes(&mut out, o.rel.as_bytes());
        out.extend_from_slice(&o.size.to_le_bytes());
        match o.etag() {
            None => out.push(0),
            Some(etag) => {
                out.push(1);
                put_bytes(&mut out, etag.as_bytes());
            }
        }
        out.extend_from_slice(&i128::from(o.modified_ns).to_le_bytes());
    }
    kept::seal(&mut out);
    out
}

/// The listing in `bytes`, if they are a whole, undamaged listing of `store`; each object's
/// key is `strip` (the prefix and its `/`) and its name.
fn decode(bytes: &[u8], store: &str, strip: &str) -> Option<KeptListing> {
    let mut r = Reader::open(bytes, MAGIC)?;
    if r.bytes_field()? != store.as_bytes() {
        return None;
    }
    let ns = u64::try_from(r.i128()?).ok()?;
    let listed_at = UNIX_EPOCH.checked_add(Duration::from_nanos(ns))?;
    let keys = usize::try_from(r.u64()?).ok()?;
    let skipped = usize::try_from(r.u64()?).ok()?;
    let count = usize::try_from(r.u64()?).ok()?;
    let mut objects = Vec::with_capacity(count.min(r.left() / MIN_OBJECT_BYTES));
    for _ in 0..count {
        let rel = std::str::from_utf8(r.bytes_field()?).ok()?;
        let size = r.u64()?;
        let etag = match r.u8()? {
            0 => None,
            1 => Some(std::str::from_utf8(r.bytes_field()?).ok()?),
            _ => return None,
        };
        let modified_ns = i64::try_from(r.i128()?).ok()?;
        // Its key must be one the store can name.
        object_store::path::Path::parse(format!("{strip}{rel}")).ok()?;
        objects.push(Object::kept(rel, size, etag, modified_ns));
    }
    (r.left() == 0 && objects.len() <= keys).then_some(KeptListing { listed_at, keys, skipped, objects })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing() -> KeptListing {
        let object = |rel: &str, size, etag: Option<&str>| {
            Object::kept(rel, size, etag, 1_700_000_000_123_456_789)
        };
        KeptListing {
            listed_at: SystemTime::now() - Duration::from_secs(5),
            keys: 4,
            skipped: 1,
            objects: vec![object("c0/a.jpg", 100, Some("\"e1\"")), object("c0/md5.jpg", 9, Some("\"0123456789abcdef0fedcba987654321\"")), object("c1/deep/b.png", 0, None), object("top.jpg", 7, Some("\"e3\""))],
        }
    }

    fn same(a: &KeptListing, b: &KeptListing) -> bool {
        let key = |o: &Object| (o.rel.clone(), o.location("data/").map(|l| l.to_string()).ok(), o.size, o.etag(), o.modified_ns);
        a.listed_at == b.listed_at && a.keys == b.keys && a.skipped == b.skipped && a.objects.iter().map(key).eq(b.objects.iter().map(key))
    }

    #[test]
    fn a_kept_listing_reads_back_as_it_was_while_young_enough_for_its_store_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = "http://127.0.0.1:9000\nus-east-1\ntrain\ndata";
        let kept = listing();
        save(dir.path(), store, &kept).expect("save");
        let back = load(dir.path(), store, "data/", Duration::from_secs(60)).expect("young enough");
        assert!(same(&back, &kept), "{back:?}");
        assert!(matches!(load(dir.path(), store, "data/", Duration::from_secs(1)), Err(NotUsed::Stale { age_s }) if age_s >= 5.0));
        // Another store's name: no file; another store's file under this one's name: not used.
        let other = "http://127.0.0.1:9000\nus-east-1\ntrain\nval";
        assert_eq!(load(dir.path(), other, "val/", Duration::from_secs(60)).err(), Some(NotUsed::Missing));
        std::fs::copy(file_for(dir.path(), store), file_for(dir.path(), other)).expect("copy");
        assert!(matches!(load(dir.path(), other, "val/", Duration::from_secs(60)), Err(NotUsed::Damaged(_))));
        // Listed in the future (a clock set back): not used.
        save(dir.path(), store, &KeptListing { listed_at: SystemTime::now() + Duration::from_secs(600), ..kept }).expect("save");
        assert!(matches!(load(dir.path(), store, "data/", Duration::from_secs(3600)), Err(NotUsed::Stale { age_s }) if age_s < 0.0));
    }

    #[test]
    fn a_damaged_or_cut_listing_file_is_not_used() {
        let store = "aws\n\nb\n";
        let bytes = encode(store, &listing());
        assert!(decode(&bytes, store, "").is_some());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert!(decode(&bad, store, "").is_none(), "byte {i} flipped");
        }
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n], store, "").is_none(), "cut at {n}");
        }
    }
}
