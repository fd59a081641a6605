//! The tiers behind one another and their fill order: a sample looked up in memory (decoded
//! pixels, then encoded bytes: [`Tiers::in_memory`]), else in the tiers below memory
//! (`lower::LowerTiers`: disk, then remote: [`Tiers::below_memory`]); a miss in all is the
//! caller's to fill (it reads the source, once however many requests miss together, and hands
//! back what it made); and what a read from the source is kept as. Nothing here calls back into
//! the caller.
//!
//! The fill order is Seneca's: a spare fresh augmentation while augmented has room (when the
//! pixels are in hand anyway), the pixels while decoded has room, else the bytes while encoded
//! has room; the pixels, or else the bytes, also spill to the disk tier and go to the remote tier
//! (both queued, not written, here: a remote write never waits on a request). [`Tiers::admission`] says what a read should make; [`Tiers::keep`] keeps it. Reading
//! and decoding are the caller's: this module does no pixel work and no source I/O.

use std::path::PathBuf;
use std::sync::Arc;

use crate::form::Origin;
use crate::disk::DiskCache;
use crate::lower::{LowerKey, LowerTier, LowerTiers, Payload};
use crate::exchange::OutputExchange;
use crate::remote::RemoteTier;
use crate::{AugmentedEntry, SampleCache, ENTRY_OVERHEAD};
use prepfs_pixels::served::ServedBytes;
use prepfs_pixels::rgb::Rgb;
use prepfs_pixels::rgb::Size2;
use prepfs_source::Sample;
use prepfs_source::FileMeta;

/// A sample in the cheapest form at hand.
#[derive(Clone)]
pub enum PixelsOrBytes {
    /// Full-resolution pixels: augmenting is a crop and a resize.
    Pixels(Arc<Rgb>),
    /// Source bytes: augmenting decodes (the fast path). `size`: the image's width and height
    /// where the caller probed its header already (the cache never parses an image).
    Bytes { bytes: Arc<[u8]>, size: Option<Size2> },
}

impl PixelsOrBytes {
    /// Source bytes whose header nobody probed yet.
    pub fn bytes(bytes: Arc<[u8]>) -> PixelsOrBytes {
        PixelsOrBytes::Bytes { bytes, size: None }
    }
}

/// What a miss should admit besides what it returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Admit {
    /// Full pixels are wanted (the `decoded` view).
    Pixels,
    /// Anything to augment; `spare`: also keep a fresh augmentation while augmented has room.
    Augmented { spare: bool },
    /// Nothing is served: fill decoded, else encoded (prefetch without augmented room).
    Fill,
}

/// What a read from the source should make before it is kept.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Admission {
    /// Decode in full (rather than the region fast path later): the pixels are kept or wanted.
    pub decode: bool,
    /// Also make a spare fresh augmentation of the pixels for augmented's free room.
    pub spare: bool,
}

/// The memory tiers and the tiers below memory (disk, remote).
pub struct Tiers {
    memory: Arc<SampleCache>,
    /// The tiers below memory in lookup order.
    lower: LowerTiers,
    /// Where augmented outputs are offered to and claimed from other mounts (the remote tier).
    exchange: Option<Arc<dyn OutputExchange>>,
    /// The source's root: disk keys name files by their path relative to it.
    root: PathBuf,
}

impl Tiers {
    pub fn new(memory: Arc<SampleCache>, disk: Option<DiskCache>, root: PathBuf) -> Tiers {
        let lower = LowerTiers::default().then(disk.map(|d| Arc::new(d) as Arc<dyn LowerTier>));
        Tiers { memory, lower, exchange: None, root }
    }

    /// The same tiers with a remote tier behind the disk tier.
    pub fn with_remote(mut self, remote: Option<RemoteTier>) -> Tiers {
        let remote = remote.map(Arc::new);
        self.lower = std::mem::take(&mut self.lower).then(remote.clone().map(|r| r as Arc<dyn LowerTier>));
        self.exchange = remote.map(|r| r as Arc<dyn OutputExchange>);
        self
    }

    /// The memory tiers.
    pub fn memory(&self) -> &SampleCache {
        &self.memory
    }

    /// The sample in the cheapest form memory holds: decoded pixels, then encoded bytes.
    pub fn in_memory(&self, sample: &Sample) -> Option<(PixelsOrBytes, Origin)> {
        if let Some(p) = self.memory.decoded.get(sample.id) {
            return Some((PixelsOrBytes::Pixels(p), Origin::Decoded));
        }
        self.memory.encoded.get(sample.id).map(|b| (PixelsOrBytes::bytes(b), Origin::Encoded))
    }

    /// The encoded bytes held in memory.
    pub fn encoded(&self, sample: &Sample) -> Option<Arc<[u8]>> {
        self.memory.encoded.get(sample.id)
    }

    /// The sample's path relative to the source root (what disk and remote keys name).
    fn rel<'a>(&self, sample: &'a Sample) -> &'a std::path::Path {
        sample.path.strip_prefix(&self.root).unwrap_or(&sample.path)
    }

    /// What the tiers below memory (and the exchange) are asked about: the sample, the version
    /// `meta`.
    pub fn lower_key<'a>(&self, sample: &'a Sample, meta: &'a FileMeta) -> LowerKey<'a> {
        LowerKey { id: sample.id, rel: self.rel(sample), version: &meta.identity }
    }

    /// The sample from the first tier below memory that holds the version resolved (decoded
    /// pixels first, then encoded bytes; promoted into the tiers above that one), promoted into
    /// memory while it has room. A damaged entry, or a tier down, reads as a miss. A hit is a
    /// miss outside memory that read no source; the tiers' own hits are in their stats.
    pub fn below_memory(&self, sample: &Sample) -> Option<(PixelsOrBytes, Origin)> {
        let (payload, origin) = self.lower.get(&self.lower_key(sample, &sample.meta))?;
        let loaded = match payload {
            Payload::Pixels(pixels) => {
                self.memory.decoded.admit(sample.id, Arc::clone(&pixels));
                PixelsOrBytes::Pixels(pixels)
            }
            Payload::Bytes(bytes) => {
                self.memory.encoded.admit(sample.id, Arc::clone(&bytes));
                PixelsOrBytes::bytes(bytes)
            }
        };
        Some((loaded, origin))
    }

    /// Drops what the tiers below memory hold of the sample's version resolved (a sample the
    /// pixel work cannot use: its entries would only fill their budgets).
    pub fn forget_lower(&self, sample: &Sample) {
        self.lower.remove(&self.lower_key(sample, &sample.meta));
    }

    /// Where augmented outputs are offered to and claimed from other mounts, if anywhere.
    pub fn exchange(&self) -> Option<&dyn OutputExchange> {
        self.exchange.as_deref()
    }

    /// What a read of a sample should make for `want`, given the room each form has now,
    /// `decoded_len` (the bytes of its full pixels, from the header the caller probed; 0:
    /// unknown, never kept as pixels) and `out_len` (the bytes of one augmented output). A
    /// version older than one seen meanwhile (`current` false), or a mount without a cache,
    /// keeps nothing.
    pub fn admission(&self, decoded_len: u64, want: Admit, current: bool, out_len: u64) -> Admission {
        if !self.memory.enabled() || !current {
            return Admission { decode: false, spare: false };
        }
        // A full decode (rather than the region fast path) only when the pixels are kept; a spare
        // augmentation only when the pixels are in hand anyway (it then costs a resample, not a
        // second decode). Otherwise the refill fills augmented room, off the request path.
        // An augmented open keeps pixels where the plan gives decoded a share, or where the plan
        // over the run says a full decode at the first touch pays (another epoch is expected:
        // `planner::controller`); otherwise room that only flowed to decoded (memory another
        // form cannot use) is the background's to fill, and a cold open costs a region decode.
        let pixels_planned = !matches!(want, Admit::Augmented { .. }) || self.memory.split().d() > 0 || self.memory.keeps_pixels_at_first_touch();
        // With several jobs (LRU), a decoded share the plan gives that holds more samples than
        // the augmented share holds outputs is the window the jobs share decodes in: a decode is
        // kept, evicting what no job needs first, else the least recently used. (Kept only with
        // room, pixels every job had clogged it once full: three jobs over 0-100-0 with a fifth
        // of the set's pixels behind 10 MB/s kept 3,398 of 16,714 decodes, 0.62 a sample
        // served, and took 71.0 s; as a window 0.28, and 34.9 s.) Beside a larger augmented
        // window, and in room that only flowed to decoded, the pixels are a stock, kept while
        // there is room: a full decode there shares nothing the outputs do not (as a window,
        // 34-33-33's runs were 10-16% slower than earlier ones, though within the drift of
        // auto's own runs between the two).
        let entries = |store_budget: u64, len: u64| store_budget / (len + ENTRY_OVERHEAD);
        let window = self.memory.split().d() > 0
            && entries(self.memory.decoded.budget(), decoded_len) > entries(self.memory.augmented.budget(), out_len);
        let room = self.memory.decoded.has_room_for(decoded_len) || (window && self.memory.decoded.evicts_for(decoded_len));
        let keep_pixels = pixels_planned && decoded_len > 0 && room;
        let spare = want == (Admit::Augmented { spare: true })
            && keep_pixels
            && self.memory.augmented.has_room_for(out_len);
        Admission { decode: spare || keep_pixels || want == Admit::Pixels, spare }
    }

    /// Keeps what a read of `sample` (the version `meta`) made: a spare output in augmented, the
    /// pixels in decoded while it has room, else the bytes in encoded (the bytes as well where
    /// the plan gives encoded room for every sample: `SampleCache::keeps_bytes_beside_pixels`); the pixels, or else the
    /// bytes, go to each tier below memory (queued, not written, here; augmented outputs never
    /// do). A version older than one seen meanwhile (`current` false) goes to the tiers below
    /// memory only, under its own key.
    pub fn keep(&self, sample: &Sample, meta: &FileMeta, current: bool, made: MissOutputs) {
        if current && self.memory.enabled() {
            if let Some(spare) = made.spare {
                self.memory.augmented.admit(sample.id, AugmentedEntry::fresh(spare));
            }
            let pixels_kept = made.pixels.as_ref().is_some_and(|p| self.memory.decoded.admit(sample.id, Arc::clone(p)));
            let bytes_wanted = !pixels_kept || self.memory.keeps_bytes_beside_pixels();
            if bytes_wanted && !self.memory.encoded.admit(sample.id, Arc::clone(&made.bytes)) && !pixels_kept {
                self.memory.note_unkept(made.bytes.len());
            }
        }
        self.lower.keep(&self.lower_key(sample, meta), made.pixels.as_ref(), &made.bytes);
    }

    /// Keeps `pixels` of a sample memory held as bytes (background work decoded them while
    /// decoded had room), and then drops the bytes, unless encoded has room for every sample's:
    /// as [`Tiers::keep`] does.
    pub fn promote(&self, sample: &Sample, pixels: Arc<Rgb>) {
        if self.memory.decoded.admit(sample.id, pixels) && !self.memory.keeps_bytes_beside_pixels() {
            self.memory.encoded.remove(sample.id);
        }
    }

    /// Writes out the queued entries of the tiers below memory (each within its bounds) and
    /// joins their writers: the end of a mount.
    pub fn flush(&self) {
        self.lower.close();
    }

    /// The memory tiers' figures, with each tier's below memory under its name (`disk`,
    /// `remote`; null without one).
    pub fn stats(&self) -> serde_json::Value {
        let mut stats = self.memory.stats();
        if let Some(obj) = stats.as_object_mut() {
            obj.insert("disk".into(), serde_json::Value::Null);
            obj.insert("remote".into(), serde_json::Value::Null);
            self.lower.stats_into(obj);
        }
        stats
    }
}

/// What a read from the source made: its bytes, the full pixels when the admission asked for
/// them, and a spare augmentation.
pub struct MissOutputs {
    pub bytes: Arc<[u8]>,
    pub pixels: Option<Arc<Rgb>>,
    pub spare: Option<ServedBytes>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiers::SHARDS;
    use crate::SampleCache;
    use crate::settings::EvictionPolicy;
    use prepfs_planner::Split;
    use prepfs_source::catalog::FileId;

    fn sample(dir: &std::path::Path, id: FileId, bytes: usize) -> (Sample, Arc<[u8]>) {
        let path = dir.join(format!("{id}.jpg"));
        std::fs::write(&path, vec![0u8; bytes]).expect("write");
        let meta = FileMeta::of(&std::fs::metadata(&path).expect("stat"));
        (Sample { id, path, meta }, vec![0u8; bytes].into())
    }

    #[test]
    fn reads_memory_keeps_in_no_form_are_counted_with_their_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Room for one small sample as bytes, none as pixels or outputs.
        let cache = Arc::new(SampleCache::new(1000 + ENTRY_OVERHEAD, "100-0-0".parse::<Split>().expect("split"), EvictionPolicy::Keep, 3));
        let tiers = Tiers::new(Arc::clone(&cache), None, dir.path().to_path_buf());
        assert_eq!(cache.unkept_mean_bytes(), None);
        for (id, len) in [(0, 900), (1, 4000), (2, 2000)] {
            let (s, bytes) = sample(dir.path(), id, len);
            tiers.keep(&s, &s.meta, true, MissOutputs { bytes, pixels: None, spare: None });
        }
        // The first fits; the other two do not, and their mean size is what the next epoch reads.
        assert_eq!(cache.encoded.entries(), 1);
        assert_eq!(cache.unkept_mean_bytes(), Some(3000.0));
    }

    #[test]
    fn with_several_jobs_a_full_decoded_share_that_is_their_window_keeps_new_pixels_and_evicts_what_no_job_needs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let split = "0-100-0".parse::<Split>().expect("split");
        let cache = Arc::new(SampleCache::new(1 << 20, split, EvictionPolicy::Keep, 4));
        // Room for three 2x2 images' pixels (12 bytes each, with the entry's own weight).
        let one = 12 + std::mem::size_of::<Rgb>() as u64 + ENTRY_OVERHEAD;
        cache.set_split_budgets(split, [0, 3 * one, 0]);
        cache.set_lru(true);
        let tiers = Tiers::new(Arc::clone(&cache), None, dir.path().to_path_buf());
        let want = Admit::Augmented { spare: false };
        // Ids in one shard of the store (eviction picks within a shard).
        let id = |k: FileId| k * SHARDS as FileId;
        let keep = |k: FileId| {
            let (s, bytes) = sample(dir.path(), id(k), 100);
            let pixels = Some(Arc::new(Rgb { width: 2, height: 2, pixels: vec![7; 12] }));
            tiers.keep(&s, &s.meta, true, MissOutputs { bytes, pixels, spare: None });
        };
        keep(0);
        keep(1);
        // Every job has had sample 0 while the share had room: it stays, next to go.
        cache.done_with(id(0));
        keep(2);
        assert!((0..3).all(|k| cache.decoded.contains(id(k))), "full now");
        // One job (no eviction): a cold open region-decodes and keeps nothing.
        cache.set_lru(false);
        assert!(!tiers.admission(12, want, true, 4).decode);
        // Several (LRU): the next decode is kept, and the retired pixels make room (they
        // clogged the share before: every later cold open a region decode, its pixels dropped).
        cache.set_lru(true);
        assert!(tiers.admission(12, want, true, 4).decode);
        keep(3);
        assert!(!cache.decoded.contains(id(0)) && (1..4).all(|k| cache.decoded.contains(id(k))));
        // Room that only flowed to decoded (the plan gives it no share) is a stock: kept while
        // it has room, never evicted for a newer decode.
        cache.set_split_budgets("100-0-0".parse::<Split>().expect("split"), [0, 3 * one, 0]);
        assert!(!tiers.admission(12, Admit::Fill, true, 4).decode);
        // So is a share of its own beside an augmented share holding more outputs than it
        // holds pixels (the outputs are then the jobs' window).
        cache.set_split_budgets("0-50-50".parse::<Split>().expect("split"), [0, 3 * one, 4 * (4 + ENTRY_OVERHEAD)]);
        assert!(!tiers.admission(12, Admit::Fill, true, 4).decode);
        cache.set_split_budgets("0-50-50".parse::<Split>().expect("split"), [0, 3 * one, 2 * (4 + ENTRY_OVERHEAD)]);
        assert!(tiers.admission(12, Admit::Fill, true, 4).decode);
    }

    #[test]
    fn where_encoded_has_room_for_every_sample_pixels_kept_keep_their_bytes_and_outlive_an_eviction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Arc::new(SampleCache::new(1 << 20, "50-50-0".parse::<Split>().expect("split"), EvictionPolicy::Keep, 4));
        let tiers = Tiers::new(Arc::clone(&cache), None, dir.path().to_path_buf());
        let pixels = || Some(Arc::new(Rgb { width: 2, height: 2, pixels: vec![7; 12] }));
        // One form: pixels kept, bytes not.
        let (s, bytes) = sample(dir.path(), 0, 100);
        tiers.keep(&s, &s.meta, true, MissOutputs { bytes, pixels: pixels(), spare: None });
        assert!(cache.decoded.contains(0) && !cache.encoded.contains(0));
        // Encoded planned to hold every sample: both, and the pixels' eviction leaves the bytes.
        cache.set_bytes_beside_pixels(true);
        let (s, bytes) = sample(dir.path(), 1, 100);
        tiers.keep(&s, &s.meta, true, MissOutputs { bytes, pixels: pixels(), spare: None });
        assert!(cache.decoded.contains(1) && cache.encoded.contains(1));
        cache.decoded.remove(1);
        assert_eq!(cache.status.held(1), crate::HELD_ENCODED);
        // A promotion keeps the bytes too.
        let (s, bytes) = sample(dir.path(), 2, 100);
        tiers.keep(&s, &s.meta, true, MissOutputs { bytes, pixels: None, spare: None });
        tiers.promote(&s, Arc::new(Rgb { width: 1, height: 1, pixels: vec![1; 3] }));
        assert!(cache.decoded.contains(2) && cache.encoded.contains(2));
        cache.set_bytes_beside_pixels(false);
        let (s, bytes) = sample(dir.path(), 3, 100);
        tiers.keep(&s, &s.meta, true, MissOutputs { bytes, pixels: None, spare: None });
        tiers.promote(&s, Arc::new(Rgb { width: 1, height: 1, pixels: vec![1; 3] }));
        assert!(cache.decoded.contains(3) && !cache.encoded.contains(3));
    }
}
