//! The tiers below memory (disk, remote) as one abstraction: what a lookup finds and a write
//! takes ([`LowerHit`], [`Payload`]), the [`LowerTier`] trait each tier implements (get, put,
//! remove, flush, close), and [`LowerTiers`], the chain of them in lookup order, which asks each
//! in turn and promotes a hit into the tiers above the one that held it.
//!
//! Memory is not a lower tier: what memory keeps is `fill.rs`'s (Seneca's fill order); this
//! chain is what lies behind it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::form::Origin;
use prepfs_pixels::rgb::Rgb;
use prepfs_source::catalog::FileId;
use prepfs_source::Identity;

/// What a lookup in a lower tier found.
pub enum LowerHit {
    /// Full-resolution pixels.
    Pixels(Rgb),
    /// The source bytes.
    Bytes(Vec<u8>),
}

/// A payload queued for writing to a lower tier (shared with the memory tier: nothing is copied
/// until the writer runs).
#[derive(Clone)]
pub(crate) enum Payload {
    Bytes(Arc<[u8]>),
    Pixels(Arc<Rgb>),
}

impl Payload {
    /// The bytes written.
    pub fn data(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b,
            Payload::Pixels(p) => &p.pixels,
        }
    }

    /// Width and height of pixels; (0, 0) for source bytes.
    pub(crate) fn dims(&self) -> (u32, u32) {
        match self {
            Payload::Bytes(_) => (0, 0),
            Payload::Pixels(p) => (p.width, p.height),
        }
    }
}

impl From<LowerHit> for Payload {
    fn from(hit: LowerHit) -> Payload {
        match hit {
            LowerHit::Pixels(p) => Payload::Pixels(Arc::new(p)),
            LowerHit::Bytes(b) => Payload::Bytes(b.into()),
        }
    }
}

/// Which version of which sample a lower tier is asked about: its catalog id (the same on every
/// mount of the dataset), its path relative to the source root, and the version resolved. Each
/// tier makes its own key of it.
#[derive(Clone, Copy)]
pub struct LowerKey<'a> {
    pub id: FileId,
    pub rel: &'a Path,
    pub version: &'a Identity,
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// Queued for writing.
    Queued,
    /// The tier holds (or is writing) an entry of this form already.
    Held,
    /// No room for it (the tier's size, or its queue): a smaller payload may fit.
    NoRoom,
    /// The tier takes nothing now (down, closed, or stopped by a write error).
    Off,
}

/// A tier below memory. Lookups run on the requesting thread (inside the tiers' single
/// flight); puts are queued, never waited for; neither fails a request: a fault is a miss.
pub(crate) trait LowerTier: Send + Sync {
    /// What a hit in it is ([`Origin::Disk`], [`Origin::Remote`]).
    fn origin(&self) -> Origin;
    /// The name of its figures in stats.
    fn name(&self) -> &'static str;
    /// The sample's decoded pixels, else its source bytes; a damaged entry is dropped and
    /// reads as a miss.
    fn get(&self, key: &LowerKey<'_>) -> Option<LowerHit>;
    /// Queues `payload` (the sample's pixels or its source bytes) for writing.
    fn put(&self, key: &LowerKey<'_>, payload: Payload) -> Put;
    /// Drops what the tier holds of the sample's version.
    fn remove(&self, key: &LowerKey<'_>);
    /// Waits (up to `limit`) until every queued write is done; returns whether it is.
    fn flush(&self, limit: Duration) -> bool;
    /// The end of a mount: what is queued written (within the tier's own bounds), its writer
    /// joined.
    fn close(&self);
    /// Its figures for stats.
    fn stats(&self) -> serde_json::Value;
}

/// How long the end of a mount waits for each tier's queued writes.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The tiers below memory in lookup order (disk, then remote).
#[derive(Default)]
pub(crate) struct LowerTiers {
    tiers: Vec<Arc<dyn LowerTier>>,
}

impl LowerTiers {
    /// The chain with `tier` after the tiers it has.
    pub fn then(mut self, tier: Option<Arc<dyn LowerTier>>) -> LowerTiers {
        self.tiers.extend(tier);
        self
    }

    /// The sample from the first tier that holds it, and where it came from; what it held is
    /// also put in each tier above it (queued).
    pub fn get(&self, key: &LowerKey<'_>) -> Option<(Payload, Origin)> {
        for (at, tier) in self.tiers.iter().enumerate() {
            let Some(hit) = tier.get(key) else { continue };
            let payload = Payload::from(hit);
            for above in &self.tiers[..at] {
                above.put(key, payload.clone());
            }
            return Some((payload, tier.origin()));
        }
        None
    }

    /// Keeps what a read of the source made in every tier: the pixels where they are, else the
    /// source bytes (where the pixels found no room, and the tier holds no pixels already).
    pub fn keep(&self, key: &LowerKey<'_>, pixels: Option<&Arc<Rgb>>, bytes: &Arc<[u8]>) {
        for tier in &self.tiers {
            let pixels_put = pixels.map_or(Put::NoRoom, |p| tier.put(key, Payload::Pixels(Arc::clone(p))));
            if pixels_put == Put::NoRoom {
                tier.put(key, Payload::Bytes(Arc::clone(bytes)));
            }
        }
    }

    /// Drops what every tier holds of the sample's version.
    pub fn remove(&self, key: &LowerKey<'_>) {
        for tier in &self.tiers {
            tier.remove(key);
        }
    }

    /// The end of a mount: each tier's queued writes written (each waited for up to
    /// [`CLOSE_WAIT`]), its writer joined.
    pub fn close(&self) {
        for tier in &self.tiers {
            if !tier.flush(CLOSE_WAIT) {
                tracing::warn!(tier = tier.name(), "a cache tier's queued writes did not finish within 10 s; some are lost");
            }
            tier.close();
        }
    }

    /// Each tier's figures under its name.
    pub(crate) fn stats_into(&self, obj: &mut serde_json::Map<String, serde_json::Value>) {
        for tier in &self.tiers {
            obj.insert(tier.name().into(), tier.stats());
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::disk::DiskCache;
    use prepfs_base::sync::{LockExt, Mutex};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// A lower tier in memory that faults on demand, for the chain's tests: lookups that fail
    /// (a miss, as a tier down or a damaged entry reads), and a room in payload bytes past which
    /// puts find none. Its entries are keyed by catalog id, pixels and bytes apart.
    pub(crate) struct FaultyTier {
        origin: Origin,
        entries: Mutex<HashMap<(FileId, bool), Payload>>,
        pub failing: AtomicBool,
        pub room: AtomicU64,
        pub gets: AtomicU64,
    }

    impl FaultyTier {
        pub fn new(origin: Origin) -> Arc<FaultyTier> {
            Arc::new(FaultyTier {
                origin,
                entries: Mutex::new(HashMap::new()),
                failing: AtomicBool::new(false),
                room: AtomicU64::new(u64::MAX),
                gets: AtomicU64::new(0),
            })
        }

        /// Whether it holds pixels (`true`) or bytes of sample `id`.
        pub fn holds(&self, id: FileId, pixels: bool) -> bool {
            self.entries.lock_or_recover().contains_key(&(id, pixels))
        }
    }

    impl LowerTier for FaultyTier {
        fn origin(&self) -> Origin {
            self.origin
        }
        fn name(&self) -> &'static str {
            "faulty"
        }
        fn get(&self, key: &LowerKey<'_>) -> Option<LowerHit> {
            self.gets.fetch_add(1, Ordering::Relaxed);
            if self.failing.load(Ordering::Relaxed) {
                return None;
            }
            let entries = self.entries.lock_or_recover();
            match entries.get(&(key.id, true)).or_else(|| entries.get(&(key.id, false)))? {
                Payload::Pixels(p) => Some(LowerHit::Pixels((**p).clone())),
                Payload::Bytes(b) => Some(LowerHit::Bytes(b.to_vec())),
            }
        }
        fn put(&self, key: &LowerKey<'_>, payload: Payload) -> Put {
            if self.failing.load(Ordering::Relaxed) {
                return Put::Off;
            }
            if payload.data().len() as u64 > self.room.load(Ordering::Relaxed) {
                return Put::NoRoom;
            }
            let pixels = matches!(payload, Payload::Pixels(_));
            let mut entries = self.entries.lock_or_recover();
            if entries.contains_key(&(key.id, pixels)) {
                return Put::Held;
            }
            entries.insert((key.id, pixels), payload);
            Put::Queued
        }
        fn remove(&self, key: &LowerKey<'_>) {
            self.entries.lock_or_recover().retain(|(id, _), _| *id != key.id);
        }
        fn flush(&self, _: Duration) -> bool {
            true
        }
        fn close(&self) {}
        fn stats(&self) -> serde_json::Value {
            serde_json::json!({ "entries": self.entries.lock_or_recover().len() })
        }
    }

    fn version() -> Identity {
        Identity { dev: 1, ino: 2, len: 3, mtime_ns: 4, ctime_ns: 5 }
    }

    fn pixels() -> Arc<Rgb> {
        Arc::new(Rgb { width: 4, height: 2, pixels: (0..24).collect() })
    }

    fn chain(tiers: &[&Arc<FaultyTier>]) -> LowerTiers {
        tiers.iter().fold(LowerTiers::default(), |c, t| c.then(Some(Arc::clone(t) as Arc<dyn LowerTier>)))
    }

    #[test]
    fn a_hit_in_the_second_tier_is_promoted_into_the_first() {
        let (disk, remote) = (FaultyTier::new(Origin::Disk), FaultyTier::new(Origin::Remote));
        let lower = chain(&[&disk, &remote]);
        let v = version();
        let key = LowerKey { id: 7, rel: Path::new("c/a.jpg"), version: &v };
        assert_eq!(remote.put(&key, Payload::Pixels(pixels())), Put::Queued);
        let (got, origin) = lower.get(&key).expect("a hit");
        assert_eq!(origin, Origin::Remote);
        assert!(matches!(got, Payload::Pixels(p) if p.pixels == pixels().pixels));
        assert!(disk.holds(7, true), "promoted into the first tier");
        let (_, origin) = lower.get(&key).expect("a hit");
        assert_eq!(origin, Origin::Disk, "the next lookup stops at the first tier");
        assert_eq!(remote.gets.load(Ordering::Relaxed), 1, "the second tier was not asked again");
    }

    #[test]
    fn a_failing_tier_reads_as_a_miss_and_the_next_one_is_asked() {
        let (disk, remote) = (FaultyTier::new(Origin::Disk), FaultyTier::new(Origin::Remote));
        let lower = chain(&[&disk, &remote]);
        let v = version();
        let key = LowerKey { id: 1, rel: Path::new("a.jpg"), version: &v };
        lower.keep(&key, None, &Arc::from(&b"jpeg"[..]));
        assert!(disk.holds(1, false) && remote.holds(1, false), "bytes kept in every tier");
        disk.failing.store(true, Ordering::Relaxed);
        let (got, origin) = lower.get(&key).expect("the second tier's hit");
        assert_eq!(origin, Origin::Remote);
        assert!(matches!(got, Payload::Bytes(b) if &b[..] == b"jpeg"));
        remote.failing.store(true, Ordering::Relaxed);
        assert!(lower.get(&key).is_none(), "every tier failing is a miss, not an error");
        lower.remove(&key);
        disk.failing.store(false, Ordering::Relaxed);
        remote.failing.store(false, Ordering::Relaxed);
        assert!(lower.get(&key).is_none(), "removed from every tier");
    }

    #[test]
    fn pixels_that_find_no_room_are_kept_as_bytes_and_pixels_held_take_no_bytes() {
        let (disk, remote) = (FaultyTier::new(Origin::Disk), FaultyTier::new(Origin::Remote));
        let lower = chain(&[&disk, &remote]);
        let v = version();
        let key = LowerKey { id: 3, rel: Path::new("b.jpg"), version: &v };
        remote.room.store(10, Ordering::Relaxed);
        let bytes: Arc<[u8]> = Arc::from(&b"jpeg"[..]);
        lower.keep(&key, Some(&pixels()), &bytes);
        assert!(disk.holds(3, true) && !disk.holds(3, false), "pixels where they fit, no bytes beside");
        assert!(!remote.holds(3, true) && remote.holds(3, false), "bytes where the pixels find no room");
        disk.failing.store(true, Ordering::Relaxed);
        lower.keep(&LowerKey { id: 4, ..key }, Some(&pixels()), &bytes);
        assert!(!disk.holds(4, false), "a tier that takes nothing is not offered the bytes instead");
    }

    #[test]
    fn a_hit_in_the_second_tier_is_written_to_the_real_disk_tier_and_read_back_from_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = Arc::new(DiskCache::open(dir.path(), 1 << 20).expect("open"));
        let remote = FaultyTier::new(Origin::Remote);
        let lower = LowerTiers::default()
            .then(Some(Arc::clone(&disk) as Arc<dyn LowerTier>))
            .then(Some(Arc::clone(&remote) as Arc<dyn LowerTier>));
        let v = version();
        let key = LowerKey { id: 5, rel: Path::new("c0/x.jpg"), version: &v };
        assert_eq!(remote.put(&key, Payload::Pixels(pixels())), Put::Queued);
        assert_eq!(lower.get(&key).map(|(_, o)| o), Some(Origin::Remote));
        assert!(disk.flush(Duration::from_secs(10)));
        let (got, origin) = lower.get(&key).expect("a hit");
        assert_eq!(origin, Origin::Disk);
        assert!(matches!(got, Payload::Pixels(p) if (p.width, p.height, &p.pixels) == (4, 2, &pixels().pixels)));
        assert_eq!(LowerTier::put(&*disk, &key, Payload::Bytes(Arc::from(&b"jpeg"[..]))), Put::Held, "held as pixels: no bytes beside");
        LowerTier::remove(&*disk, &key);
        assert!(LowerTier::get(&*disk, &key).is_none(), "removed");
        assert!(!disk.entry_path(crate::disk::DiskKind::Decoded, crate::disk::key_of(key.rel, key.version)).exists(), "its file deleted");
        let mut stats = serde_json::Map::new();
        lower.stats_into(&mut stats);
        assert!(stats.contains_key("disk") && stats.contains_key("faulty"));
        lower.close();
        assert_eq!(LowerTier::put(&*disk, &key, Payload::Pixels(pixels())), Put::Off, "closed at the end of a mount");
    }
}
