//! The disk tier of the sample cache: encoded bytes and decoded pixels spilled to a local
//! directory (for example an NVMe) within a byte budget. It survives an unmount and remount, and
//! checks every entry it reads back.
//!
//! It owns the on-disk layout, the index of what is held, the budget, and the background writer.
//!
//! - **Layout.** One file per entry: `DIR/encoded/<kk>/<key>.bin` and `DIR/decoded/<kk>/<key>.bin`,
//!   `key` the 16 hex digits of [`key_of`] and `kk` its first two. The key hashes (FNV-1a 64) the
//!   source file's path relative to the source root and its version (inode, size, mtime and
//!   ctime), so it is the same after a remount and a changed source file never finds its stale
//!   entry, even when a replacement keeps the size and the mtime.
//! - **File format**: the entry codec's 40-byte header (`super::entry`: magic `PFDC`,
//!   version 1, the key itself in the key field) then the payload, the source bytes (encoded)
//!   or packed RGB rows (decoded).
//! - **Reads** check the header against the file's name and length and the CRC over the whole
//!   payload, every time, by the codec's damage rules. A damaged, truncated or unreadable file
//!   is deleted, counted (`corrupt_dropped`), logged, and answered as a miss: never served.
//! - **Writes** go to an unpredictable temporary name beside the entry (made new, 0600, through
//!   no link), then `rename` (atomic): a crash leaves a temporary file (removed by the next
//!   scan), never a half entry under a real name. `DIR` and its kind and prefix directories are
//!   [`PrivateDir`]s: the daemon's user's, 0700, refused if another user could write to them or
//!   put a link in their place, so the decoded pixels of a private source stay private. They run
//!   on the tier's write queue (`super::queue`: bounded by jobs and by bytes, one writer thread,
//!   `prepfs-disk-writer`); a write that does not fit the queue is dropped (counted), never
//!   waited for.
//! - **Budget.** Each entry is charged its file length rounded up to 4 KiB blocks, reserved
//!   atomically before the write is queued, so `used` never passes `size`. Entries stay once
//!   written (Seneca's keep rule). Any write error (`ENOSPC` included) stops admission for the
//!   rest of the mount (logged once, counted in `write_errors`); requests never fail for it.
//! - **Warm restart.** Opening the store scans `DIR`, checks each entry's header and length, and
//!   rebuilds the index and the bytes used; files with bad headers are deleted.
//! - **Crashes.** Nothing the tier needs lives only in memory: the index is rebuilt from the
//!   files at open, so every entry whose rename happened before the serving process died (a
//!   panic, `SIGKILL`, the OOM killer; no drop, no flush) is served by the next instance over the
//!   same `DIR`. What a crash can leave is dropped, never served: a write in progress is only
//!   its temporary file (removed by the scan, never indexed, never charged); and an entry whose
//!   bytes never all reached the disk (entries are not fsynced: after a machine crash a renamed
//!   file may be short or zero-filled) fails its length at the scan or its CRC at its first
//!   read, and is deleted and counted in `corrupt_dropped` (`cache.disk.corrupt_dropped` in
//!   `stats.json`) like any other damage.
//!
//! No lock is held across I/O: index shards are locked only to find, insert or remove a key.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::entry::{self, Damage, Dropped, Format, Header};
use crate::form::Origin;
use crate::lower::{LowerHit, LowerKey, LowerTier, Payload, Put};
use crate::queue::{self, Jobs, WriteQueue};
use prepfs_base::private_dir::PrivateDir;
use prepfs_pixels::rgb::Rgb;
use prepfs_base::hash::fnv1a64;
use prepfs_base::sync::{LockExt, Mutex, MutexGuard};

/// Bytes of the header before every payload.
pub const HEADER_LEN: usize = entry::HEADER_LEN;
/// The disk tier's header: magic and format version.
const FORMAT: Format = Format { magic: *b"PFDC", version: 1 };
/// Entries are charged in whole blocks of this many bytes (what a filesystem allocates).
pub const BLOCK: u64 = 4096;
const SHARDS: usize = 16;
/// The writer's queue: at most this many jobs ...
const QUEUE_JOBS: usize = 256;
/// ... holding at most this many payload bytes (memory pinned by queued writes).
const QUEUE_BYTES: u64 = 64 << 20;

/// A store that could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("disk cache {}: {source}", prepfs_base::escape::escaped(path))]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The two forms the disk tier holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskKind {
    Encoded,
    Decoded,
}

impl DiskKind {
    pub const ALL: [DiskKind; 2] = [DiskKind::Encoded, DiskKind::Decoded];

    /// Its kind in the entry header.
    fn entry(self) -> entry::Kind {
        match self {
            DiskKind::Encoded => entry::Kind::Encoded,
            DiskKind::Decoded => entry::Kind::Decoded,
        }
    }
    fn index(self) -> usize {
        match self {
            DiskKind::Encoded => 0,
            DiskKind::Decoded => 1,
        }
    }
    /// The subdirectory of the store holding this kind.
    pub fn dir_name(self) -> &'static str {
        match self {
            DiskKind::Encoded => "encoded",
            DiskKind::Decoded => "decoded",
        }
    }
}



/// The key of a source file's entries: its path relative to the source root and its version
/// (inode, size, mtime and ctime to the nanosecond; not the device number, which may change
/// across reboots), hashed. A rewritten or replaced source file gets a new key.
pub fn key_of(rel_path: &Path, version: &prepfs_source::Identity) -> u64 {
    fnv1a64(&[
        rel_path.as_os_str().as_bytes(),
        &[0],
        &version.ino.to_le_bytes(),
        &version.len.to_le_bytes(),
        &version.mtime_ns.to_le_bytes(),
        &version.ctime_ns.to_le_bytes(),
    ])
}

struct WriteJob {
    kind: DiskKind,
    key: u64,
    gen: u64,
    payload: Payload,
}

impl queue::Job for WriteJob {
    fn bytes(&self) -> u64 {
        self.payload.data().len() as u64
    }
}

/// One index entry: its charge, whether its file is written, and a generation that tells a
/// later entry for the same key from this one.
#[derive(Clone, Copy)]
struct Slot {
    charge: u64,
    ready: bool,
    gen: u64,
}

type Shard = Mutex<HashMap<u64, Slot>>;

/// The state shared with the writer thread.
struct Inner {
    dir: PathBuf,
    /// `DIR/encoded` and `DIR/decoded`, checked private ([`PrivateDir`]) at open.
    kind_dirs: [PrivateDir; 2],
    size: u64,
    used: AtomicU64,
    index: [Vec<Shard>; 2],
    entries: [AtomicU64; 2],
    next_gen: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    corrupt_dropped: Dropped,
    write_errors: AtomicU64,
    dropped_writes: AtomicU64,
    admitting: AtomicBool,
}

/// The disk tier: see the module documentation.
pub struct DiskCache {
    inner: Arc<Inner>,
    queue: WriteQueue<WriteJob>,
}

fn charge_of(file_len: u64) -> u64 {
    file_len.div_ceil(BLOCK) * BLOCK
}

fn parse_key(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".bin")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok()).flatten()
}

/// Reads an entry's header and checks it against where the file lies (kind, key) and the
/// file's length.
fn read_header(f: &mut File, kind: DiskKind, key: u64) -> Result<([u8; HEADER_LEN], Header), Damage> {
    let file_len = f.metadata().map_err(Damage::Io)?.len();
    let mut h = [0u8; HEADER_LEN];
    f.read_exact(&mut h).map_err(|e| if e.kind() == io::ErrorKind::UnexpectedEof { Damage::Short } else { Damage::Io(e) })?;
    let header = entry::check_header(&h, FORMAT, kind.entry(), key, file_len.saturating_sub(HEADER_LEN as u64))?;
    Ok((h, header))
}

/// Opens an entry file for reading, through no link.
fn open_entry(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// Reads one entry file whole and checks it. `Ok(None)`: the file is gone.
fn read_entry(path: &Path, kind: DiskKind, key: u64) -> Result<Option<(Header, Vec<u8>)>, Damage> {
    let mut f = match open_entry(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Damage::Io(e)),
    };
    let (h, header) = read_header(&mut f, kind, key)?;
    let mut payload = Vec::with_capacity(header.len as usize);
    f.take(header.len + 1).read_to_end(&mut payload).map_err(Damage::Io)?;
    header.check_payload(&h, &payload)?;
    Ok(Some((header, payload)))
}

/// Checks an entry's header and length only (the scan at open; reads check the payload).
fn probe_entry(path: &Path, kind: DiskKind, key: u64) -> Result<u64, Damage> {
    let mut f = open_entry(path).map_err(Damage::Io)?;
    let (_, header) = read_header(&mut f, kind, key)?;
    Ok(HEADER_LEN as u64 + header.len)
}

impl Inner {
    fn entry_path(&self, kind: DiskKind, key: u64) -> PathBuf {
        let name = format!("{key:016x}");
        self.dir.join(kind.dir_name()).join(&name[..2]).join(format!("{name}.bin"))
    }

    fn shard(&self, kind: DiskKind, key: u64) -> MutexGuard<'_, HashMap<u64, Slot>> {
        self.index[kind.index()][(key % SHARDS as u64) as usize].lock_or_recover()
    }

    fn reserve(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                (used.saturating_add(bytes) <= self.size).then_some(used + bytes)
            })
            .is_ok()
    }

    /// Takes the slot of `key` out of the index if it is still generation `gen`, releasing its
    /// charge. Returns whether it did.
    fn forget(&self, kind: DiskKind, key: u64, gen: u64) -> bool {
        let removed = {
            let mut shard = self.shard(kind, key);
            match shard.get(&key) {
                Some(slot) if slot.gen == gen => shard.remove(&key),
                _ => None,
            }
        };
        match removed {
            Some(slot) => {
                self.used.fetch_sub(slot.charge, Ordering::AcqRel);
                if slot.ready {
                    self.entries[kind.index()].fetch_sub(1, Ordering::Relaxed);
                }
                true
            }
            None => false,
        }
    }

    /// Writes one queued entry: an unpredictable temporary file (0600), then rename, inside
    /// the private kind directory ([`PrivateDir::write_atomically`]).
    fn write(&self, job: &WriteJob) -> io::Result<()> {
        let name = format!("{:016x}", job.key);
        let prefix = self.kind_dirs[job.kind.index()].subdir(&name[..2])?;
        let data = job.payload.data();
        let head = entry::header(FORMAT, job.kind.entry(), job.key, data, job.payload.dims());
        prefix.write_atomically(&format!("{name}.bin"), &[&head, data])
    }

    fn run_writer(&self, jobs: Jobs<WriteJob>) {
        while let Some(job) = jobs.recv() {
            match self.write(&job) {
                Ok(()) => {
                    let mut shard = self.shard(job.kind, job.key);
                    if let Some(slot) = shard.get_mut(&job.key).filter(|s| s.gen == job.gen) {
                        slot.ready = true;
                        self.entries[job.kind.index()].fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    self.forget(job.kind, job.key, job.gen);
                    self.write_errors.fetch_add(1, Ordering::Relaxed);
                    if self.admitting.swap(false, Ordering::AcqRel) {
                        tracing::warn!(
                            dir = %prepfs_base::escape::escaped(&self.dir),
                            error = %e,
                            "disk cache write failed; the disk tier stops admitting for this mount"
                        );
                    }
                }
            }
        }
    }

    /// Rebuilds the index from the files under `dir`; returns (entries, corrupt files dropped).
    fn scan(&self) -> Result<(), DiskError> {
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DiskError::Io { path, source }
        };
        for kind in DiskKind::ALL {
            let kind_dir = self.kind_dirs[kind.index()].path();
            for prefix in fs::read_dir(kind_dir).map_err(io_err(kind_dir))? {
                let prefix = prefix.map_err(io_err(kind_dir))?;
                if !prefix.file_type().map_err(io_err(kind_dir))?.is_dir() {
                    continue; // not ours (a link is not followed): left alone
                }
                let prefix = prefix.path();
                for file in fs::read_dir(&prefix).map_err(io_err(&prefix))? {
                    let path = file.map_err(io_err(&prefix))?.path();
                    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    if name.starts_with('.') && name.ends_with(".tmp") {
                        let _ = fs::remove_file(&path); // an interrupted write
                        continue;
                    }
                    let Some(key) = parse_key(&name) else { continue }; // not ours: left alone
                    match probe_entry(&path, kind, key) {
                        Ok(file_len) => {
                            let charge = charge_of(file_len);
                            if !self.reserve(charge) {
                                // Over a smaller `size` than the last mount's.
                                let _ = fs::remove_file(&path);
                                continue;
                            }
                            let gen = self.next_gen.fetch_add(1, Ordering::Relaxed);
                            self.shard(kind, key).insert(key, Slot { charge, ready: true, gen });
                            self.entries[kind.index()].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => {
                            tracing::warn!(file = %prepfs_base::escape::escaped(&path), "disk cache entry dropped at scan: {why}");
                            self.corrupt_dropped.count(&why);
                            let _ = fs::remove_file(&path);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl DiskCache {
    /// Opens (creating if missing) the store at `dir` with `size` bytes, rebuilding its index
    /// from the entries already there, and starts its writer thread.
    pub fn open(dir: &Path, size: u64) -> Result<DiskCache, DiskError> {
        let io_err = |source| DiskError::Io { path: dir.to_path_buf(), source };
        let root = PrivateDir::open(dir).map_err(io_err)?;
        let kind_dirs = DiskKind::ALL.map(|kind| root.subdir(kind.dir_name()));
        let [encoded, decoded] = kind_dirs;
        let kind_dirs = [encoded.map_err(io_err)?, decoded.map_err(io_err)?];
        let shards = || (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect::<Vec<_>>();
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            kind_dirs,
            size,
            used: AtomicU64::new(0),
            index: [shards(), shards()],
            entries: [AtomicU64::new(0), AtomicU64::new(0)],
            next_gen: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            corrupt_dropped: Dropped::default(),
            write_errors: AtomicU64::new(0),
            dropped_writes: AtomicU64::new(0),
            admitting: AtomicBool::new(true),
        });
        let started = Instant::now();
        inner.scan()?;
        tracing::info!(
            dir = %prepfs_base::escape::escaped(dir),
            encoded = inner.entries[0].load(Ordering::Relaxed),
            decoded = inner.entries[1].load(Ordering::Relaxed),
            bytes_used = inner.used.load(Ordering::Relaxed),
            size,
            scan_ms = started.elapsed().as_millis() as u64,
            "disk cache ready"
        );
        let for_writer = Arc::clone(&inner);
        let queue = WriteQueue::start("prepfs-disk-writer", QUEUE_JOBS, QUEUE_BYTES, move |jobs| for_writer.run_writer(jobs))
            .map_err(|source| DiskError::Io { path: dir.to_path_buf(), source })?;
        Ok(DiskCache { inner, queue })
    }

    /// The entry for `key`, decoded pixels first, then encoded bytes; counts one hit or miss.
    /// A damaged entry is deleted and counted, and the lookup goes on as if it were absent.
    pub fn get(&self, key: u64) -> Option<LowerHit> {
        for kind in [DiskKind::Decoded, DiskKind::Encoded] {
            let slot = self.inner.shard(kind, key).get(&key).copied();
            let Some(slot) = slot.filter(|s| s.ready) else { continue };
            let path = self.inner.entry_path(kind, key);
            match read_entry(&path, kind, key) {
                Ok(Some((header, payload))) => {
                    self.inner.hits.fetch_add(1, Ordering::Relaxed);
                    return Some(match kind {
                        DiskKind::Encoded => LowerHit::Bytes(payload),
                        DiskKind::Decoded => {
                            LowerHit::Pixels(Rgb { width: header.width, height: header.height, pixels: payload })
                        }
                    });
                }
                Ok(None) => {
                    // Deleted under us (by hand, or by a reader that found it damaged).
                    self.inner.forget(kind, key, slot.gen);
                }
                Err(why) => {
                    if self.inner.forget(kind, key, slot.gen) {
                        self.inner.corrupt_dropped.count(&why);
                        tracing::warn!(file = %prepfs_base::escape::escaped(&path), "disk cache entry dropped: {why}");
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
        self.inner.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Whether an entry of `kind` is held or being written for `key`.
    pub fn contains(&self, kind: DiskKind, key: u64) -> bool {
        self.inner.shard(kind, key).contains_key(&key)
    }

    /// Queues the source bytes of `key` for writing if the budget allows. Returns whether they
    /// were queued.
    pub fn admit_encoded(&self, key: u64, bytes: Arc<[u8]>) -> bool {
        self.admit(key, Payload::Bytes(bytes)) == Put::Queued
    }

    /// Queues the decoded pixels of `key` for writing if the budget allows.
    pub fn admit_decoded(&self, key: u64, pixels: Arc<Rgb>) -> bool {
        self.admit(key, Payload::Pixels(pixels)) == Put::Queued
    }

    /// Queues `payload` (pixels: a decoded entry; bytes: an encoded one) for `key`.
    fn admit(&self, key: u64, payload: Payload) -> Put {
        let inner = &self.inner;
        let kind = match payload {
            Payload::Bytes(_) => DiskKind::Encoded,
            Payload::Pixels(_) => DiskKind::Decoded,
        };
        if !inner.admitting.load(Ordering::Acquire) {
            return Put::Off;
        }
        let len = payload.data().len() as u64;
        let charge = charge_of(HEADER_LEN as u64 + len);
        if charge > inner.size {
            return Put::NoRoom;
        }
        let gen = inner.next_gen.fetch_add(1, Ordering::Relaxed);
        let reserved = {
            let mut shard = inner.shard(kind, key);
            match shard.entry(key) {
                Entry::Occupied(_) => Put::Held,
                Entry::Vacant(slot) if inner.reserve(charge) => {
                    slot.insert(Slot { charge, ready: false, gen });
                    Put::Queued
                }
                Entry::Vacant(_) => Put::NoRoom,
            }
        };
        if reserved != Put::Queued {
            return reserved;
        }
        match self.queue.push(WriteJob { kind, key, gen, payload }) {
            Ok(()) => Put::Queued,
            Err(why) => {
                inner.forget(kind, key, gen);
                inner.dropped_writes.fetch_add(1, Ordering::Relaxed);
                match why {
                    queue::Refused::Full => Put::NoRoom,
                    queue::Refused::Closed => Put::Off,
                }
            }
        }
    }

    /// Drops the entries of `key` (both kinds): out of the index, their files deleted.
    pub fn remove(&self, key: u64) {
        for kind in DiskKind::ALL {
            let slot = self.inner.shard(kind, key).get(&key).copied();
            if let Some(slot) = slot {
                if self.inner.forget(kind, key, slot.gen) {
                    let _ = fs::remove_file(self.inner.entry_path(kind, key));
                }
            }
        }
    }

    /// Waits (up to `limit`) until every queued write is done; returns whether it is.
    pub fn flush(&self, limit: Duration) -> bool {
        self.queue.flush(limit)
    }

    /// Bytes charged now (entries written and being written).
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// The byte budget.
    #[cfg(test)]
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Entries of `kind` written.
    pub fn entries(&self, kind: DiskKind) -> u64 {
        self.inner.entries[kind.index()].load(Ordering::Relaxed)
    }

    /// Whether the tier still admits (false after a write error).
    pub fn admitting(&self) -> bool {
        self.inner.admitting.load(Ordering::Relaxed)
    }

    /// Damaged entries dropped so far (at scan and on reads).
    pub fn corrupt_dropped(&self) -> u64 {
        self.inner.corrupt_dropped.damaged()
    }

    /// The path of the file that holds (or would hold) an entry.
    pub fn entry_path(&self, kind: DiskKind, key: u64) -> PathBuf {
        self.inner.entry_path(kind, key)
    }

    /// Figures for stats.
    pub fn stats(&self) -> serde_json::Value {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let i = &self.inner;
        json!({
            "path": i.dir,
            "bytes_used": self.used(),
            "size": i.size,
            "entries": { "encoded": self.entries(DiskKind::Encoded), "decoded": self.entries(DiskKind::Decoded) },
            "hits": get(&i.hits),
            "misses": get(&i.misses),
            "corrupt_dropped": i.corrupt_dropped.damaged(),
            "write_errors": get(&i.write_errors),
            "dropped_writes": get(&i.dropped_writes),
            "pending_writes": self.queue.pending(),
            "admitting": self.admitting(),
        })
    }
}

/// The disk tier in the chain below memory: keyed by the sample's relative path and version
/// ([`key_of`]); a sample it holds as pixels is not also written as bytes.
impl LowerTier for DiskCache {
    fn origin(&self) -> Origin {
        Origin::Disk
    }

    fn name(&self) -> &'static str {
        "disk"
    }

    fn get(&self, key: &LowerKey<'_>) -> Option<LowerHit> {
        DiskCache::get(self, key_of(key.rel, key.version))
    }

    fn put(&self, key: &LowerKey<'_>, payload: Payload) -> Put {
        let key = key_of(key.rel, key.version);
        if matches!(payload, Payload::Bytes(_)) && self.contains(DiskKind::Decoded, key) {
            return Put::Held;
        }
        self.admit(key, payload)
    }

    fn remove(&self, key: &LowerKey<'_>) {
        DiskCache::remove(self, key_of(key.rel, key.version));
    }

    fn flush(&self, limit: Duration) -> bool {
        DiskCache::flush(self, limit)
    }

    fn close(&self) {
        self.queue.close();
    }

    fn stats(&self) -> serde_json::Value {
        DiskCache::stats(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const WAIT: Duration = Duration::from_secs(10);

    fn bytes(n: usize, seed: u8) -> Arc<[u8]> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<_>>().into()
    }

    fn pixels(w: u32, h: u32) -> Arc<Rgb> {
        Arc::new(Rgb { width: w, height: h, pixels: (0..w * h * 3).map(|i| (i % 251) as u8).collect() })
    }

    fn flip_byte(path: &Path, at: u64) {
        let mut data = fs::read(path).expect("read entry");
        data[at as usize] ^= 0x40;
        fs::write(path, data).expect("write entry");
    }

    #[test]
    fn keys_hash_the_path_and_the_version_with_the_standard_fnv1a() {
        // FNV-1a 64 reference values.
        assert_eq!(fnv1a64(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(&[b"foo", b"bar"]), fnv1a64(&[b"foobar"]));
        let v = prepfs_source::Identity { dev: 1, ino: 7, len: 100, mtime_ns: 1_700_000_000_000_000_005, ctime_ns: 9 };
        let k = key_of(Path::new("c0/a.jpg"), &v);
        assert_eq!(k, key_of(Path::new("c0/a.jpg"), &v), "stable");
        assert_eq!(k, key_of(Path::new("c0/a.jpg"), &prepfs_source::Identity { dev: 2, ..v }), "the device may change");
        assert_ne!(k, key_of(Path::new("c0/a.jpg"), &prepfs_source::Identity { mtime_ns: v.mtime_ns + 1, ..v }), "mtime counts");
        assert_ne!(k, key_of(Path::new("c0/a.jpg"), &prepfs_source::Identity { len: 101, ..v }), "size counts");
        assert_ne!(k, key_of(Path::new("c0/a.jpg"), &prepfs_source::Identity { ino: 8, ..v }), "inode counts");
        assert_ne!(k, key_of(Path::new("c0/a.jpg"), &prepfs_source::Identity { ctime_ns: 10, ..v }), "ctime counts");
        assert_ne!(k, key_of(Path::new("c0/b.jpg"), &v), "path counts");
    }

    #[test]
    fn round_trip_of_both_kinds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = DiskCache::open(dir.path(), 1 << 30).expect("open");
        assert!(store.get(1).is_none());
        assert!(store.admit_encoded(1, bytes(10_000, 1)));
        assert!(store.admit_decoded(2, pixels(33, 17)));
        assert!(!store.admit_encoded(1, bytes(10, 1)), "already held");
        assert!(store.flush(WAIT));
        match store.get(1) {
            Some(LowerHit::Bytes(b)) => assert_eq!(&b[..], &bytes(10_000, 1)[..]),
            _ => panic!("encoded entry missing"),
        }
        match store.get(2) {
            Some(LowerHit::Pixels(p)) => {
                assert_eq!((p.width, p.height), (33, 17));
                assert_eq!(p.pixels, pixels(33, 17).pixels);
            }
            _ => panic!("decoded entry missing"),
        }
        assert_eq!((store.entries(DiskKind::Encoded), store.entries(DiskKind::Decoded)), (1, 1));
        assert_eq!(store.used(), charge_of(10_040) + charge_of(40 + 33 * 17 * 3));
        let stats = store.stats();
        assert_eq!((stats["hits"].as_u64(), stats["misses"].as_u64()), (Some(2), Some(1)));
        let path = store.entry_path(DiskKind::Encoded, 1);
        assert!(path.ends_with("encoded/00/0000000000000001.bin"), "{}", path.display());
    }

    #[test]
    fn a_flipped_byte_or_a_truncated_file_is_dropped_never_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = DiskCache::open(dir.path(), 1 << 30).expect("open");
        for key in 1..=4 {
            assert!(store.admit_encoded(key, bytes(50_000, key as u8)));
        }
        assert!(store.flush(WAIT));
        let path = |k| store.entry_path(DiskKind::Encoded, k);
        flip_byte(&path(1), 25_000); // payload
        flip_byte(&path(2), 20); // header: the payload length
        let f = fs::OpenOptions::new().write(true).open(path(3)).expect("open");
        f.set_len(30_000).expect("truncate");
        for key in 1..=3 {
            assert!(store.get(key).is_none(), "entry {key} was served");
            assert!(!path(key).exists(), "entry {key} was not deleted");
        }
        assert!(store.get(4).is_some(), "an intact entry still serves");
        assert_eq!(store.corrupt_dropped(), 3);
        assert_eq!(store.entries(DiskKind::Encoded), 1);
        assert_eq!(store.used(), charge_of(50_040));
        // The dropped key can be admitted again (a refetch).
        assert!(store.admit_encoded(1, bytes(50_000, 1)));
        assert!(store.flush(WAIT));
        assert!(store.get(1).is_some());
    }

    #[test]
    fn the_budget_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let size = 10 * BLOCK * 3; // room for ten 3-block entries
        let store = Arc::new(DiskCache::open(dir.path(), size).expect("open"));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..50 {
                        store.admit_encoded(t * 1000 + i, bytes(2 * BLOCK as usize + 100, i as u8));
                        assert!(store.used() <= store.size());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert!(store.flush(WAIT));
        assert_eq!(store.entries(DiskKind::Encoded), 10);
        assert_eq!(store.used(), size);
        let on_disk: u64 = walk(dir.path()).iter().map(|p| charge_of(fs::metadata(p).expect("stat").len())).sum();
        assert_eq!(on_disk, store.used(), "what is charged is what is on disk");
        assert!(!store.admit_encoded(99_999, bytes(10, 0)), "full");
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).expect("list") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn reopening_rebuilds_the_index_and_drops_bad_headers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let used = {
            let store = DiskCache::open(dir.path(), 1 << 30).expect("open");
            for key in 0..6 {
                assert!(store.admit_encoded(key, bytes(5_000, key as u8)));
            }
            assert!(store.admit_decoded(100, pixels(20, 10)));
            assert!(store.flush(WAIT));
            store.used()
        };
        // A bad magic, a leftover temporary file and a stranger's file.
        let store_path = |kind, key| {
            let name = format!("{key:016x}");
            dir.path().join(DiskKind::dir_name(kind)).join(&name[..2]).join(format!("{name}.bin"))
        };
        flip_byte(&store_path(DiskKind::Encoded, 5), 0);
        let tmp = store_path(DiskKind::Encoded, 0).with_file_name(".0000000000000009.7.tmp");
        fs::write(&tmp, b"half").expect("tmp");
        let stranger = dir.path().join("encoded/notes.txt");
        fs::write(&stranger, b"mine").expect("stranger");

        let store = DiskCache::open(dir.path(), 1 << 30).expect("reopen");
        assert_eq!(store.entries(DiskKind::Encoded), 5);
        assert_eq!(store.entries(DiskKind::Decoded), 1);
        assert_eq!(store.used(), used - charge_of(5_040));
        assert_eq!(store.corrupt_dropped(), 1);
        assert!(!tmp.exists() && stranger.exists());
        assert!(matches!(store.get(3), Some(LowerHit::Bytes(b)) if b[..] == bytes(5_000, 3)[..]));
        assert!(matches!(store.get(100), Some(LowerHit::Pixels(p)) if p.width == 20));
        assert!(store.get(5).is_none());
        // A smaller size on the next mount drops entries past it.
        drop(store);
        let store = DiskCache::open(dir.path(), 2 * charge_of(5_040)).expect("reopen small");
        assert!(store.used() <= store.size());
        assert_eq!(walk(dir.path()).len() - 1, store.entries(DiskKind::Encoded) as usize + store.entries(DiskKind::Decoded) as usize);
    }

    /// The test binary's own name for a test of this module (as `--exact` takes it).
    fn test_name(name: &str) -> String {
        let module = module_path!().split_once("::").map_or(module_path!(), |(_, m)| m);
        format!("{module}::{name}")
    }

    /// Set in the child a crash test starts: the directory it writes its tier in.
    const CRASH_CHILD: &str = "PREPFS_DISK_CRASH_CHILD";

    /// Entries the crashing child writes and waits for, and those it only queues.
    const WRITTEN: std::ops::RangeInclusive<u64> = 1..=8;
    const QUEUED: std::ops::RangeInclusive<u64> = 100..=131;

    /// The bytes of entry `key` in the crash test (large queued ones, so the kill is likely to
    /// land in the middle of a write).
    fn crash_payload(key: u64) -> Arc<[u8]> {
        if WRITTEN.contains(&key) {
            bytes(30_000 + key as usize * 1000, key as u8)
        } else {
            bytes(2 << 20, key as u8)
        }
    }

    /// The crashing child: writes [`WRITTEN`] (waiting until each is on disk), queues
    /// [`QUEUED`], and is killed by SIGKILL at once: no drop, no flush, no close.
    fn crash_child(dir: &Path) -> ! {
        let store = DiskCache::open(dir, 1 << 30).expect("open");
        for key in WRITTEN {
            assert!(store.admit_encoded(key, crash_payload(key)));
        }
        assert!(store.admit_decoded(9, pixels(64, 48)));
        assert!(store.flush(WAIT));
        // Made first, so the writes are queued faster than the writer takes them.
        let queued: Vec<_> = QUEUED.map(|key| (key, crash_payload(key))).collect();
        for (key, payload) in queued {
            store.admit_encoded(key, payload);
        }
        // Killed once one of them is written and the next one's temporary file is seen: most
        // likely in the middle of a write.
        let started = Instant::now();
        while store.entries(DiskKind::Encoded) <= WRITTEN.count() as u64 && started.elapsed() < WAIT {
            std::hint::spin_loop();
        }
        while !walk(dir).iter().any(|p| p.extension().is_some_and(|e| e == "tmp")) && started.elapsed() < WAIT {}
        // SAFETY: kill(2) of this very process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL ends the process");
    }

    #[test]
    fn entries_written_before_a_crash_are_served_whole_by_the_next_instance_and_nothing_half_written_is() {
        if let Some(dir) = std::env::var_os(CRASH_CHILD) {
            crash_child(Path::new(&dir));
        }
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let name = test_name("entries_written_before_a_crash_are_served_whole_by_the_next_instance_and_nothing_half_written_is");
        let child = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(CRASH_CHILD, dir.path())
            .output()
            .expect("run the child");
        assert_eq!(child.status.signal(), Some(libc::SIGKILL), "the child was killed: {child:?}");

        let store = DiskCache::open(dir.path(), 1 << 30).expect("reopen after the crash");
        for key in WRITTEN {
            match store.get(key) {
                Some(LowerHit::Bytes(b)) => assert_eq!(&b[..], &crash_payload(key)[..], "entry {key} served whole"),
                _ => panic!("entry {key}, written before the crash, is not served"),
            }
        }
        assert!(matches!(store.get(9), Some(LowerHit::Pixels(p)) if p.pixels == pixels(64, 48).pixels));
        // What was only queued is there whole or not at all; a kill leaves no torn entry.
        let mut whole = 0;
        for key in QUEUED {
            match store.get(key) {
                Some(LowerHit::Bytes(b)) => {
                    assert_eq!(&b[..], &crash_payload(key)[..], "queued entry {key} is whole");
                    whole += 1;
                }
                Some(LowerHit::Pixels(_)) => panic!("entry {key} as pixels"),
                None => {}
            }
        }
        assert_eq!(store.corrupt_dropped(), 0);
        assert_eq!(store.entries(DiskKind::Encoded), WRITTEN.count() as u64 + whole);
        // The kill most often lands in a write, whose temporary file the reopen removed.
        let leftovers: Vec<_> = walk(dir.path()).into_iter().filter(|p| p.extension().is_some_and(|e| e == "tmp")).collect();
        assert!(leftovers.is_empty(), "temporary files left after the reopen: {leftovers:?}");
        assert_eq!(walk(dir.path()).len() as u64, store.entries(DiskKind::Encoded) + store.entries(DiskKind::Decoded));
    }

    #[test]
    fn a_torn_entry_found_after_a_restart_is_dropped_counted_and_never_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let payload = |key: u64| bytes(20_000, key as u8);
        let first = DiskCache::open(dir.path(), 1 << 30).expect("open");
        for key in 1..=9 {
            assert!(first.admit_encoded(key, payload(key)));
        }
        assert!(first.admit_decoded(10, pixels(40, 30)));
        assert!(first.flush(WAIT));
        let path = |kind: DiskKind, key: u64| {
            let name = format!("{key:016x}");
            dir.path().join(kind.dir_name()).join(&name[..2]).join(format!("{name}.bin"))
        };
        assert_eq!(path(DiskKind::Encoded, 1), first.entry_path(DiskKind::Encoded, 1));
        let (enc, dec) = (DiskKind::Encoded, DiskKind::Decoded);
        // The first instance is gone without a word (what a crash leaves of it: its files).
        std::mem::forget(first);
        let cut = |p: PathBuf, len: u64| fs::OpenOptions::new().write(true).open(p).expect("open").set_len(len).expect("cut");
        let overwrite = |p: PathBuf, at: u64, garbage: &[u8]| {
            use std::os::unix::fs::FileExt;
            fs::OpenOptions::new().write(true).open(p).expect("open").write_all_at(garbage, at).expect("overwrite");
        };
        cut(path(enc, 1), 0); // nothing of it reached the disk
        cut(path(enc, 2), 17); // cut inside the header
        cut(path(enc, 3), HEADER_LEN as u64 + 12_345); // cut inside the payload
        overwrite(path(enc, 4), HEADER_LEN as u64 + 4096, &[0u8; 4096]); // a block never written: zeros
        overwrite(path(enc, 5), HEADER_LEN as u64 + 19_000, b"garbage garbage garbage"); // garbage in the payload
        overwrite(path(enc, 6), 16, &[0xff; 8]); // garbage in the header's length
        fs::OpenOptions::new().append(true).open(path(enc, 7)).expect("open").write_all(b"tail").expect("append"); // a longer file
        overwrite(path(dec, 10), HEADER_LEN as u64, &[1, 2, 3]); // decoded pixels changed
        let torn = [1, 2, 3, 4, 5, 6, 7];

        let second = DiskCache::open(dir.path(), 1 << 30).expect("reopen");
        // Header and length damage is found at the scan: those files are gone already.
        for key in [1, 2, 3, 6, 7] {
            assert!(!path(enc, key).exists(), "entry {key} dropped at the scan");
        }
        for key in torn {
            assert!(second.get(key).is_none(), "torn entry {key} was served");
            assert!(!path(enc, key).exists(), "torn entry {key} still on disk");
        }
        assert!(second.get(10).is_none(), "torn decoded entry was served");
        assert!(!path(dec, 10).exists());
        for key in [8, 9] {
            assert!(matches!(second.get(key), Some(LowerHit::Bytes(b)) if b[..] == payload(key)[..]), "intact entry {key} still served");
        }
        assert_eq!(second.corrupt_dropped(), torn.len() as u64 + 1, "each torn entry counted once");
        assert_eq!(second.stats()["corrupt_dropped"], torn.len() as u64 + 1);
        assert_eq!((second.entries(enc), second.entries(dec)), (2, 0));
        assert_eq!(second.used(), 2 * charge_of(HEADER_LEN as u64 + 20_000));
        // Each is asked again and missed again, never served, never counted twice.
        for key in torn {
            assert!(second.get(key).is_none());
        }
        assert_eq!(second.corrupt_dropped(), torn.len() as u64 + 1);
        // A dropped key is written again whole.
        assert!(second.admit_encoded(5, payload(5)));
        assert!(second.flush(WAIT));
        assert!(matches!(second.get(5), Some(LowerHit::Bytes(b)) if b[..] == payload(5)[..]));
    }

    #[test]
    fn a_temporary_file_left_by_an_interrupted_write_is_removed_at_open_and_never_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = DiskCache::open(dir.path(), 1 << 30).expect("open");
        assert!(store.admit_encoded(0x42, bytes(9_000, 1)));
        assert!(store.flush(WAIT));
        let held = store.entry_path(DiskKind::Encoded, 0x42);
        let (new_key, new_path) = (0x4243, store.entry_path(DiskKind::Encoded, 0x4243));
        drop(store);
        // Named as `PrivateDir::write_atomically` names them: `.NAME.RANDOM.tmp` beside NAME.
        let tmp_of = |p: &Path, random: &str| p.with_file_name(format!(".{}.{random}.tmp", p.file_name().expect("name").to_string_lossy()));
        // A new entry's write cut short: a valid header, half its payload.
        let payload = bytes(8_000, 2);
        let head = entry::header(FORMAT, entry::Kind::Encoded, new_key, &payload, (0, 0));
        let half_new = tmp_of(&new_path, "0123456789abcdef");
        fs::write(&half_new, [&head[..], &payload[..4_000]].concat()).expect("tmp");
        // The same entry's, whole but never renamed; and a rewrite of a held entry's.
        let whole_new = tmp_of(&new_path, "fedcba9876543210");
        fs::write(&whole_new, [&head[..], &payload[..]].concat()).expect("tmp");
        let over_held = tmp_of(&held, "00000000000000ff");
        fs::write(&over_held, b"half of something").expect("tmp");

        let store = DiskCache::open(dir.path(), 1 << 30).expect("reopen");
        for tmp in [&half_new, &whole_new, &over_held] {
            assert!(!tmp.exists(), "{} left", tmp.display());
        }
        assert!(store.get(new_key).is_none(), "a write never renamed is no entry");
        assert!(matches!(store.get(0x42), Some(LowerHit::Bytes(b)) if b[..] == bytes(9_000, 1)[..]), "the held entry is untouched");
        assert_eq!(store.entries(DiskKind::Encoded), 1);
        assert_eq!(store.used(), charge_of(HEADER_LEN as u64 + 9_000), "no temporary file is charged");
        assert_eq!(store.corrupt_dropped(), 0, "an interrupted write is not damage");
    }

    #[test]
    fn a_changed_source_file_misses_its_stale_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("a.jpg");
        fs::write(&src, b"first").expect("write");
        let key = |p: &Path| {
            let m = fs::metadata(p).expect("stat");
            key_of(Path::new("a.jpg"), &prepfs_source::FileMeta::of(&m).identity)
        };
        let store = DiskCache::open(&dir.path().join("cache"), 1 << 20).expect("open");
        let before = key(&src);
        assert!(store.admit_encoded(before, b"first".to_vec().into()));
        assert!(store.flush(WAIT));
        // Same size, new mtime.
        fs::write(&src, b"secnd").expect("rewrite");
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        File::options().write(true).open(&src).expect("open").set_modified(later).expect("set mtime");
        let after = key(&src);
        assert_ne!(before, after);
        assert!(store.get(after).is_none(), "the stale entry was served");
    }

    #[test]
    fn a_write_error_stops_admission_without_failing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = DiskCache::open(dir.path(), 1 << 30).expect("open");
        assert!(store.admit_encoded(1, bytes(100, 1)));
        assert!(store.flush(WAIT));
        // The encoded directory becomes a regular file: creating any entry's directory fails
        // (ENOTDIR), as ENOSPC or EIO would fail a write.
        fs::remove_dir_all(dir.path().join("encoded")).expect("rm");
        fs::write(dir.path().join("encoded"), b"").expect("file");
        assert!(store.admit_encoded(0x1234, bytes(100, 2)), "queued before the failure is known");
        assert!(store.flush(WAIT));
        assert!(!store.admitting());
        assert!(!store.admit_decoded(7, pixels(4, 4)), "no admission after a write error");
        let stats = store.stats();
        assert_eq!(stats["write_errors"], 1);
        assert_eq!(stats["admitting"], false);
        assert!(store.get(0x1234).is_none());
        assert_eq!(store.used(), charge_of(140), "the failed write's reservation is released");
    }
}
