//! The tiered sample cache: encoded bytes, decoded pixels and augmented outputs, each form with
//! its own byte budget, shared by every view and reader of the mount.
//!
//! - [`FormStore`] holds one form: a sharded map from sample to entry with a byte budget that
//!   admission reserves atomically, so `used` never passes `budget`. Each entry is charged its
//!   payload plus [`ENTRY_OVERHEAD`] bytes (map slot, `Arc` header, allocator slack), so the
//!   budget bounds the cache's resident memory. Encoded and decoded entries stay once admitted
//!   (`policy: keep`, Seneca's rule: no thrashing under random access), or make room by LRU
//!   within their shard (`policy: lru`). A new split shrinks forms before it grows any, each
//!   shrinking form evicting down to its new budget, so the forms together never hold more
//!   than the cache's memory, plan changes included.
//! - Augmented outputs are taken, not read: each records which jobs used it (a 64-bit mask, one
//!   bit per job slot) and is dropped once every active job has (with no jobs: at its first
//!   use, and the top-level view always takes it whole). The free room is refilled in the
//!   background (see `crate::fs`) with fresh augmentations.
//! - [`SampleStatus`] is the dataset-wide status byte per sample that opportunistic sampling
//!   reads: which forms hold the sample, and how many jobs used its augmented output. The stores
//!   keep it in step with their maps, under the same shard lock.
//! - [`SingleFlight`] makes concurrent misses of one sample do the work once.
//!
//! No lock is held across decoding or I/O: shards are locked only to find, insert or remove.

use std::collections::HashMap;
use prepfs_base::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use prepfs_base::sync::{Arc, LockExt, Mutex, MutexGuard, OnceLock};

use lru::LruCache;
use serde_json::json;

use prepfs_source::catalog::FileId;
use crate::settings::EvictionPolicy;
use prepfs_planner::Split;
use crate::form::Rank;
use prepfs_pixels::served::ServedBytes;
use crate::form::Form;

use super::outputs::RecipeOutputs;

/// Bytes charged per entry on top of its payload: the map slot, the `Arc` header and the
/// allocator's rounding, measured as about 60 bytes on x86-64 glibc, rounded up.
pub const ENTRY_OVERHEAD: u64 = 96;

pub(super) const SHARDS: usize = 16;

/// A payload whose size the cache charges.
pub trait ChargedSize {
    fn charged_bytes(&self) -> u64;
}

impl ChargedSize for Arc<[u8]> {
    fn charged_bytes(&self) -> u64 {
        self.len() as u64
    }
}

impl ChargedSize for Arc<prepfs_pixels::rgb::Rgb> {
    fn charged_bytes(&self) -> u64 {
        self.pixels.len() as u64 + std::mem::size_of::<prepfs_pixels::rgb::Rgb>() as u64
    }
}

/// Status bit: the encoded form holds the sample.
pub const HELD_ENCODED: u8 = 1;
/// Status bit: the decoded form holds the sample.
pub const HELD_DECODED: u8 = 2;
/// Status bit: the augmented form holds an output of the sample.
pub const HELD_AUGMENTED: u8 = 4;
/// Status bit: the remote tier (shared by other mounts) is known to hold the sample's decoded
/// pixels or encoded bytes: some mount wrote them (`cache::remote`). Never cleared: Redis may have
/// evicted them since, and a stale bit costs one remote miss.
pub const HELD_REMOTE: u8 = 8;
const HELD_MASK: u8 = 0x0f;
const REFS_SHIFT: u32 = 4;

/// One status byte per sample: the low bits say which forms hold it ([`HELD_ENCODED`],
/// [`HELD_DECODED`], [`HELD_AUGMENTED`], and the remote tier: [`HELD_REMOTE`]), the high four bits how many jobs have used its current
/// augmented output (saturating at 15). 1.3 MB for 1.3 million samples.
pub struct SampleStatus {
    bytes: Vec<AtomicU8>,
}

impl SampleStatus {
    /// `n` samples, none held.
    pub fn new(n: usize) -> SampleStatus {
        SampleStatus { bytes: (0..n).map(|_| AtomicU8::new(0)).collect() }
    }
    /// How many samples it has a byte for.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    /// The forms holding `id` (a combination of the `HELD_*` bits).
    pub fn held(&self, id: FileId) -> u8 {
        self.bytes.get(id as usize).map_or(0, |b| b.load(Ordering::Relaxed) & HELD_MASK)
    }
    /// Jobs that have used the current augmented output of `id`.
    pub fn refs(&self, id: FileId) -> u8 {
        self.bytes.get(id as usize).map_or(0, |b| b.load(Ordering::Relaxed) >> REFS_SHIFT)
    }
    /// Samples whose status has `bit`.
    pub(crate) fn count_held(&self, bit: u8) -> usize {
        self.bytes.iter().filter(|b| b.load(Ordering::Relaxed) & bit != 0).count()
    }

    /// Samples by what memory holds of them: with an augmented output; else as pixels; else
    /// as bytes alone; and all those held as pixels.
    pub fn held_counts(&self) -> HeldCounts {
        let mut c = HeldCounts::default();
        for b in &self.bytes {
            let held = b.load(Ordering::Relaxed);
            if held & HELD_DECODED != 0 {
                c.decoded += 1;
            }
            if held & HELD_AUGMENTED != 0 {
                c.spares += 1;
            } else if held & HELD_DECODED != 0 {
                c.pixels += 1;
            } else if held & HELD_ENCODED != 0 {
                c.bytes += 1;
            }
        }
        c
    }

    /// Marks `id` as held by the remote tier.
    pub(crate) fn mark_remote(&self, id: FileId) {
        self.set(id, HELD_REMOTE);
    }
    fn set(&self, id: FileId, bit: u8) {
        if let Some(b) = self.bytes.get(id as usize) {
            b.fetch_or(bit, Ordering::Relaxed);
        }
    }
    fn clear(&self, id: FileId, bit: u8) {
        if let Some(b) = self.bytes.get(id as usize) {
            // Dropping the augmented output also drops its reference count.
            let keep = if bit == HELD_AUGMENTED { !bit & HELD_MASK } else { !bit };
            b.fetch_and(keep, Ordering::Relaxed);
        }
    }
    fn set_refs(&self, id: FileId, refs: u32) {
        if let Some(b) = self.bytes.get(id as usize) {
            let refs = refs.min(15) as u8;
            let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v & HELD_MASK | refs << REFS_SHIFT));
        }
    }
    /// Bytes the status takes.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// What memory holds, sample by sample ([`SampleStatus::held_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldCounts {
    /// Samples with an augmented output.
    pub spares: u64,
    /// Samples without one, held as pixels.
    pub pixels: u64,
    /// Samples without either, held as bytes.
    pub bytes: u64,
    /// Samples held as pixels, with an output or not.
    pub decoded: u64,
}

/// Job slots an augmented output records as having used it: one bit each of
/// [`AugmentedEntry::used_by`], so at most this many jobs are active at once.
pub const MAX_JOBS: usize = u64::BITS as usize;

/// An augmented output in the cache (in memory, or in an output file ready to pass
/// through), and the jobs (one bit per job slot, at most [`MAX_JOBS`]) that have used it.
#[derive(Clone)]
pub struct AugmentedEntry {
    pub bytes: ServedBytes,
    pub used_by: u64,
}

impl AugmentedEntry {
    /// An output no job has used yet.
    pub fn fresh(bytes: impl Into<ServedBytes>) -> Self {
        AugmentedEntry { bytes: bytes.into(), used_by: 0 }
    }
}

impl ChargedSize for AugmentedEntry {
    fn charged_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// One form's store.
pub struct FormStore<V> {
    shards: Vec<Mutex<LruCache<FileId, V>>>,
    /// The status table and this form's bit in it.
    status: Option<(Arc<SampleStatus>, u8)>,
    used: AtomicU64,
    budget: AtomicU64,
    entries: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Whether a full store evicts its least recently used entry to admit (else it keeps).
    lru: std::sync::atomic::AtomicBool,
}

impl<V: Clone + ChargedSize> FormStore<V> {
    /// An empty store with `budget` bytes.
    pub fn new(budget: u64, policy: EvictionPolicy) -> Self {
        FormStore {
            shards: (0..SHARDS).map(|_| Mutex::new(LruCache::unbounded())).collect(),
            used: AtomicU64::new(0),
            budget: AtomicU64::new(budget),
            entries: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            lru: std::sync::atomic::AtomicBool::new(policy == EvictionPolicy::Lru),
            status: None,
        }
    }

    /// The same store, keeping `bit` of `status` in step with what it holds.
    pub(crate) fn with_status(mut self, status: Arc<SampleStatus>, bit: u8) -> Self {
        self.status = Some((status, bit));
        self
    }

    fn mark(&self, id: FileId, held: bool) {
        if let Some((status, bit)) = &self.status {
            if held {
                status.set(id, *bit);
            } else {
                status.clear(id, *bit);
            }
        }
    }

    /// Sets how many jobs have used `id`'s entry in the status table, where this store keeps
    /// one (`augmented/`'s outputs; a recipe's store keeps none).
    pub(super) fn set_refs(&self, id: FileId, refs: u32) {
        if let Some((status, _)) = &self.status {
            status.set_refs(id, refs);
        }
    }

    fn shard(&self, id: FileId) -> MutexGuard<'_, LruCache<FileId, V>> {
        self.shards[id as usize % SHARDS].lock_or_recover()
    }

    fn charge(v: &V) -> u64 {
        v.charged_bytes() + ENTRY_OVERHEAD
    }

    /// The entry for `id`, counting a hit or a miss.
    pub fn get(&self, id: FileId) -> Option<V> {
        let found = self.shard(id).get(&id).cloned();
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Looks at the entry for `id` under its shard lock, without counting or touching its LRU
    /// place.
    pub fn peek<R>(&self, id: FileId, look: impl FnOnce(&V) -> R) -> Option<R> {
        self.shard(id).peek(&id).map(look)
    }

    /// Whether `id` is held, without counting.
    pub fn contains(&self, id: FileId) -> bool {
        self.shard(id).contains(&id)
    }

    /// Removes and returns the entry (a use-once take), counting a hit or a miss.
    pub fn take(&self, id: FileId) -> Option<V> {
        let found = self.pop(id);
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Removes the entry for `id` (its status bit cleared under the shard lock, its bytes
    /// given back after it), counting nothing.
    fn pop(&self, id: FileId) -> Option<V> {
        let found = {
            let mut shard = self.shard(id);
            let found = shard.pop(&id);
            if found.is_some() {
                self.mark(id, false);
            }
            found
        };
        if let Some(v) = &found {
            self.release(Self::charge(v));
        }
        found
    }

    fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.entries.fetch_sub(1, Ordering::Relaxed);
    }

    /// Reserves `bytes` of the budget if they fit. A smaller budget set meanwhile (a new
    /// split, [`FormStore::set_budget`]) may have missed this reservation in its eviction: the
    /// budget is read again after it, and the reservation given back if it no longer fits.
    fn reserve(&self, bytes: u64) -> bool {
        let budget = self.budget.load(Ordering::SeqCst);
        let reserved = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| (used + bytes <= budget).then_some(used + bytes))
            .is_ok();
        if !reserved {
            return false;
        }
        let now = self.budget.load(Ordering::SeqCst);
        if now < budget && self.used.load(Ordering::SeqCst) > now {
            self.used.fetch_sub(bytes, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Whether an entry of `payload` bytes would fit now.
    pub fn has_room_for(&self, payload: u64) -> bool {
        self.used.load(Ordering::Relaxed) + payload + ENTRY_OVERHEAD <= self.budget.load(Ordering::Relaxed)
    }

    /// Whether an admission of an entry of `payload` bytes can make room by evicting: under
    /// LRU, with a budget it fits (what no job needs goes first: [`FormStore::retire`] moves it
    /// to the eviction end).
    pub(crate) fn evicts_for(&self, payload: u64) -> bool {
        self.lru.load(Ordering::Relaxed) && payload + ENTRY_OVERHEAD <= self.budget.load(Ordering::Relaxed)
    }

    /// Admits `value` for `id` if the budget allows (evicting least recently used entries of
    /// the same shard first under `policy: lru`). Returns whether it was admitted.
    pub fn admit(&self, id: FileId, value: V) -> bool {
        let bytes = Self::charge(&value);
        if bytes > self.budget.load(Ordering::Relaxed) {
            return false;
        }
        let mut shard = self.shard(id);
        if shard.contains(&id) {
            return false;
        }
        while !self.reserve(bytes) {
            if !self.lru.load(Ordering::Relaxed) {
                return false;
            }
            match shard.pop_lru() {
                Some((old_id, old)) => {
                    self.mark(old_id, false);
                    self.release(Self::charge(&old));
                }
                None => return false,
            }
        }
        shard.put(id, value);
        self.mark(id, true);
        self.entries.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Runs `decide` on the entry for `id` under its shard lock (never across I/O): it may
    /// change the entry, and returns what to hand back and whether to drop the entry. Counts a
    /// hit when it hands something back, else a miss.
    pub fn use_entry<R>(&self, id: FileId, decide: impl FnOnce(&mut V) -> (Option<R>, bool)) -> Option<R> {
        let (out, dropped) = {
            let mut shard = self.shard(id);
            let (out, drop) = match shard.peek_mut(&id) {
                Some(v) => decide(v),
                None => (None, false),
            };
            let dropped = if drop { shard.pop(&id) } else { None };
            if dropped.is_some() {
                self.mark(id, false);
            }
            (out, dropped)
        };
        if let Some(v) = dropped {
            self.release(Self::charge(&v));
        }
        let counter = if out.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// Drops the entry for `id`, if any, without counting a hit or a miss. Returns whether
    /// there was one.
    pub fn remove(&self, id: FileId) -> bool {
        self.pop(id).is_some()
    }

    /// Keeps only the entries for which `keep` holds (it may change them); one shard locked at
    /// a time. Returns how many were dropped.
    pub fn retain(&self, mut keep: impl FnMut(FileId, &mut V) -> bool) -> u64 {
        let mut dropped = 0;
        for shard in &self.shards {
            let mut shard = shard.lock_or_recover();
            let gone: Vec<FileId> = shard.iter_mut().filter_map(|(id, v)| (!keep(*id, v)).then_some(*id)).collect();
            for id in gone {
                if let Some(v) = shard.pop(&id) {
                    self.mark(id, false);
                    self.release(Self::charge(&v));
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Switches eviction: LRU (`true`) or keep.
    pub fn set_lru(&self, lru: bool) {
        self.lru.store(lru, Ordering::Relaxed);
    }

    /// The entry for `id` is not needed for a while: under LRU it is the next to make room, and
    /// with the store full it goes now (eviction picks within a shard, so a full store would
    /// otherwise evict a shard's oldest entry while other shards keep ones no one needs).
    pub fn retire(&self, id: FileId) {
        if !self.lru.load(Ordering::Relaxed) {
            return;
        }
        let full = self.peek(id, |v| !self.has_room_for(v.charged_bytes())).unwrap_or(false);
        if full {
            self.pop(id);
        } else {
            self.shard(id).demote(&id);
        }
    }

    /// Changes the budget (a new split). Over a smaller budget, entries are evicted, least
    /// recently used first shard by shard, until what the store holds fits: from the moment this
    /// returns, `used` is within the new budget (admissions meanwhile are held to it). Returns
    /// how many were evicted.
    pub(crate) fn set_budget(&self, budget: u64) -> u64 {
        self.budget.store(budget, Ordering::SeqCst);
        let (mut evicted, mut empty_in_a_row, mut k) = (0, 0, 0);
        while self.used.load(Ordering::SeqCst) > budget && empty_in_a_row < SHARDS {
            let popped = {
                let mut shard = self.shards[k].lock_or_recover();
                let popped = shard.pop_lru();
                if let Some((id, _)) = &popped {
                    self.mark(*id, false);
                }
                popped
            };
            match popped {
                Some((_, old)) => {
                    self.release(Self::charge(&old));
                    evicted += 1;
                    empty_in_a_row = 0;
                }
                None => empty_in_a_row += 1,
            }
            k = (k + 1) % SHARDS;
        }
        evicted
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The byte budget.
    pub fn budget(&self) -> u64 {
        self.budget.load(Ordering::Relaxed)
    }

    /// Hits counted so far: entries handed to readers.
    pub fn hit_count(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Entries held.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// This form's figures for stats.
    pub fn stats(&self) -> serde_json::Value {
        json!({
            "bytes_used": self.used(),
            "budget": self.budget(),
            "entries": self.entries(),
            "hits": self.hits.load(Ordering::Relaxed),
            "misses": self.misses.load(Ordering::Relaxed),
        })
    }

}

/// Concurrent requests for one key share one computation.
pub struct SingleFlight<T> {
    flights: Mutex<HashMap<FileId, Arc<OnceLock<T>>>>,
}

impl<T: Clone> Default for SingleFlight<T> {
    fn default() -> Self {
        SingleFlight { flights: Mutex::new(HashMap::new()) }
    }
}

impl<T: Clone> SingleFlight<T> {
    /// Whether some thread is running the work for `id` now.
    pub fn in_flight(&self, id: FileId) -> bool {
        self.flights.lock_or_recover().contains_key(&id)
    }

    /// Runs `work` for `id` unless another thread is running it; then waits for and shares that
    /// result. The map lock is held only to find or register the flight, never during `work`.
    pub fn run(&self, id: FileId, work: impl FnOnce() -> T) -> T {
        let cell = {
            let mut flights = self.flights.lock_or_recover();
            Arc::clone(flights.entry(id).or_default())
        };
        let result = cell.get_or_init(work).clone();
        let mut flights = self.flights.lock_or_recover();
        if flights.get(&id).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            flights.remove(&id);
        }
        result
    }
}

/// The three stores, with their budgets from a split of one memory size.
pub struct SampleCache {
    pub encoded: FormStore<Arc<[u8]>>,
    pub decoded: FormStore<Arc<prepfs_pixels::rgb::Rgb>>,
    pub augmented: FormStore<AugmentedEntry>,
    /// Each recipe's kept outputs, and the augmented budget's split between the pipelines
    /// (`outputs.rs`).
    pub(super) recipes: RecipeOutputs,
    /// Which forms hold each sample (kept by the stores).
    pub status: Arc<SampleStatus>,
    memory: u64,
    split: Mutex<Split>,
    /// The plan's first-touch policy: a miss decodes in full and keeps the pixels wherever
    /// decoded has room (else only where the split gives decoded a share).
    keep_pixels_at_first_touch: std::sync::atomic::AtomicBool,
    /// The plan gives encoded room for every sample's bytes: a sample kept as pixels keeps its
    /// bytes too (else memory holds a sample in one form), so pixels evicted later leave the
    /// bytes, not a sample held nowhere that the next epoch reads again.
    bytes_beside_pixels: std::sync::atomic::AtomicBool,
    /// Reads memory kept in no form (no room as pixels or as bytes), and their bytes: the
    /// samples a full cache turns away are its largest, and the next epoch reads them again.
    unkept: [AtomicU64; 2],
}

impl SampleCache {
    /// A cache of `memory` bytes split `split` among encoded, decoded, augmented
    /// ([`Split::budgets`]), for sample ids below `samples`.
    pub fn new(memory: u64, split: Split, policy: EvictionPolicy, samples: usize) -> SampleCache {
        let budget = split.budgets(memory);
        let status = Arc::new(SampleStatus::new(samples));
        SampleCache {
            encoded: FormStore::new(budget[0], policy).with_status(Arc::clone(&status), HELD_ENCODED),
            decoded: FormStore::new(budget[1], policy).with_status(Arc::clone(&status), HELD_DECODED),
            // Augmented outputs are used once per job and dropped: never evicted to admit others.
            augmented: FormStore::new(budget[2], EvictionPolicy::Keep)
                .with_status(Arc::clone(&status), HELD_AUGMENTED),
            recipes: RecipeOutputs::new(0, budget[2]),
            status,
            memory,
            split: Mutex::new(split),
            keep_pixels_at_first_touch: std::sync::atomic::AtomicBool::new(false),
            bytes_beside_pixels: std::sync::atomic::AtomicBool::new(false),
            unkept: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Drops every form of `id` (its source file changed: what was made of it is stale).
    pub fn forget_sample(&self, id: FileId) {
        self.encoded.remove(id);
        self.decoded.remove(id);
        for store in self.all_outputs() {
            store.remove(id);
        }
    }

    /// Applies a new split of the same memory ([`Split::budgets`]).
    #[cfg(test)]
    pub(crate) fn set_split(&self, split: Split) {
        self.set_split_budgets(split, split.budgets(self.memory));
    }

    /// Applies a new split with the bytes each form gets (encoded, decoded, augmented) worked
    /// out by the planner (memory a form cannot use flows to the next); never more than the
    /// cache's memory in all, at any moment: the forms that shrink evict down to their new
    /// budgets before the others grow. Returns how many entries were evicted.
    pub fn set_split_budgets(&self, split: Split, budgets: [u64; 3]) -> u64 {
        let total: u64 = budgets.iter().sum();
        let scale = |b: u64| if total > self.memory { (b as u128 * self.memory as u128 / total as u128) as u64 } else { b };
        // One split at a time: two interleaved would each grow a form the other shrinks.
        let mut current = self.split.lock_or_recover();
        let new = budgets.map(scale);
        let olds = [self.encoded.budget(), self.decoded.budget(), self.recipes.total()];
        let mut evicted = 0;
        for shrinking in [true, false] {
            for (k, (&new, &old)) in new.iter().zip(&olds).enumerate() {
                if (new < old) == shrinking {
                    evicted += match k {
                        0 => self.encoded.set_budget(new),
                        1 => self.decoded.set_budget(new),
                        _ => self.set_outputs_budget(new),
                    };
                }
            }
        }
        *current = split;
        evicted
    }

    /// Sets the plan's first-touch policy (see the field).
    pub fn set_keep_pixels_at_first_touch(&self, keep: bool) {
        self.keep_pixels_at_first_touch.store(keep, Ordering::Relaxed);
    }

    /// The plan's first-touch policy.
    pub(crate) fn keeps_pixels_at_first_touch(&self) -> bool {
        self.keep_pixels_at_first_touch.load(Ordering::Relaxed)
    }

    /// Sets whether a sample kept as pixels keeps its bytes too (see the field).
    pub fn set_bytes_beside_pixels(&self, keep: bool) {
        self.bytes_beside_pixels.store(keep, Ordering::Relaxed);
    }

    /// Whether a sample kept as pixels keeps its bytes too.
    pub(crate) fn keeps_bytes_beside_pixels(&self) -> bool {
        self.bytes_beside_pixels.load(Ordering::Relaxed)
    }

    /// Switches the encoded and decoded stores' eviction (augmented outputs are never evicted).
    pub fn set_lru(&self, lru: bool) {
        self.encoded.set_lru(lru);
        self.decoded.set_lru(lru);
    }

    /// No active job needs `id` again this epoch: under LRU its encoded bytes and decoded pixels
    /// make room before what a job still needs (see [`FormStore::retire`]).
    pub fn done_with(&self, id: FileId) {
        self.encoded.retire(id);
        self.decoded.retire(id);
    }

    /// How cheaply `id` can be served in `form`'s view now: 0 when no form that view can use
    /// holds it, up to [`Form::top_rank`] (what opportunistic sampling prefers).
    pub fn rank(&self, id: FileId, form: Form) -> Rank {
        let held = self.status.held(id);
        let has = |bit: u8| held & bit != 0;
        match form {
            Form::Augmented if has(HELD_AUGMENTED) => 3,
            Form::Augmented | Form::Decoded if has(HELD_DECODED) => 2,
            _ if has(HELD_ENCODED) => 1,
            _ => 0,
        }
    }

    /// [`SampleCache::rank`] for one job (its used-by bit `job`): an augmented output this job
    /// has used already (it waits for the other jobs) is no hit for it, so the sample ranks as
    /// the next form that holds it.
    pub fn rank_for_job(&self, id: FileId, form: Form, job: u64) -> Rank {
        let rank = self.rank(id, form);
        if form == Form::Augmented && rank == 3 && !self.output_usable_by(0, id, job) {
            let held = self.status.held(id);
            return if held & HELD_DECODED != 0 { 2 } else if held & HELD_ENCODED != 0 { 1 } else { 0 };
        }
        rank
    }

    /// What opportunistic sampling prefers a sample by, for one job: [`SampleCache::rank_for_job`]
    /// doubled, plus one for a sample no local form holds but the shared remote tier does (cached
    /// on another machine: a remote round trip rather than a source read). The best is
    /// [`SampleCache::top_preference`].
    pub fn preference(&self, id: FileId, form: Form, job: u64) -> Rank {
        let local = self.rank_for_job(id, form, job);
        2 * local + u8::from(local == 0 && self.status.held(id) & HELD_REMOTE != 0)
    }

    /// The best [`SampleCache::preference`] in `form`'s view: its own form held in memory.
    pub fn top_preference(form: Form) -> Rank {
        2 * form.top_rank()
    }

    /// The split in force.
    pub fn split(&self) -> Split {
        *self.split.lock_or_recover()
    }

    /// Counts a read memory kept in no form, of `bytes`.
    pub(crate) fn note_unkept(&self, bytes: usize) {
        self.unkept[0].fetch_add(1, Ordering::Relaxed);
        self.unkept[1].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The mean bytes of the reads memory kept in no form, if there were any.
    pub fn unkept_mean_bytes(&self) -> Option<f64> {
        let n = self.unkept[0].load(Ordering::Relaxed);
        (n > 0).then(|| self.unkept[1].load(Ordering::Relaxed) as f64 / n as f64)
    }

    /// Whether any memory is given to caching.
    pub fn enabled(&self) -> bool {
        self.memory > 0
    }

    /// Bytes charged in all forms.
    pub fn used(&self) -> u64 {
        self.encoded.used() + self.decoded.used() + self.augmented.used() + self.recipes.stores().iter().map(FormStore::used).sum::<u64>()
    }

    /// Figures for stats.
    pub fn stats(&self) -> serde_json::Value {
        json!({
            "memory": self.memory,
            "split": self.split(),
            "entry_overhead_bytes": ENTRY_OVERHEAD,
            "encoded": self.encoded.stats(),
            "decoded": self.decoded.stats(),
            "augmented": self.augmented.stats(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn bytes(n: usize) -> Arc<[u8]> {
        vec![7u8; n].into()
    }

    fn split(e: u32, d: u32, a: u32) -> Split {
        Split::new(e, d, a).expect("sums to 100")
    }

    #[test]
    fn keep_admits_while_there_is_room_and_never_evicts() {
        let store = FormStore::new(10 * (1000 + ENTRY_OVERHEAD), EvictionPolicy::Keep);
        for id in 0..100 {
            store.admit(id, bytes(1000));
        }
        assert_eq!(store.entries(), 10);
        assert!(store.used() <= store.budget());
        // The first ten stay; later ones were refused.
        assert!((0..10).all(|id| store.contains(id)));
        assert!(!store.contains(10));
        assert!(store.get(3).is_some() && store.get(50).is_none());
        assert_eq!(store.stats()["hits"], 1);
        assert_eq!(store.stats()["misses"], 1);
    }

    #[test]
    fn an_entry_no_job_needs_makes_room_before_those_they_do() {
        // One shard in play: ids that are multiples of SHARDS.
        let id = |k: u32| k * SHARDS as u32;
        let store = FormStore::new(3 * (100 + ENTRY_OVERHEAD), EvictionPolicy::Lru);
        for k in 0..2 {
            store.admit(id(k), bytes(100));
        }
        // Room left: the oldest-used entry is demoted, so the next admission past the budget
        // evicts it, though id(0) was used less recently.
        store.retire(id(1));
        assert!(store.contains(id(1)));
        store.admit(id(2), bytes(100));
        store.admit(id(3), bytes(100));
        assert!(store.contains(id(0)) && !store.contains(id(1)), "the retired entry went first");
        // Full: a retired entry goes at once.
        store.retire(id(0));
        assert!(!store.contains(id(0)));
        assert_eq!(store.entries(), 2);
        // Under keep nothing is evicted or dropped by retiring.
        let keep = FormStore::new(100 + ENTRY_OVERHEAD, EvictionPolicy::Keep);
        keep.admit(1, bytes(100));
        keep.retire(1);
        assert!(keep.contains(1));
    }

    #[test]
    fn with_several_jobs_a_new_output_evicts_the_oldest_one_kept_for_them() {
        let id = |k: u32| k * SHARDS as u32;
        let cache = SampleCache::new(100 * (250 + ENTRY_OVERHEAD), split(0, 0, 100), EvictionPolicy::Keep, 1000);
        cache.set_split_budgets(split(0, 0, 100), [0, 0, 2 * (250 + ENTRY_OVERHEAD)]);
        let output = || AugmentedEntry { bytes: bytes(250).into(), used_by: 1 };
        // One job (or none): a full room refuses the new output.
        assert!(cache.augmented.admit(id(0), output()) && cache.augmented.admit(id(1), output()));
        assert!(!cache.augmented.admit(id(2), output()));
        // Several: the oldest kept output makes room, and the status byte follows.
        cache.set_shared_outputs(true);
        assert!(cache.augmented.admit(id(2), output()));
        assert!(!cache.augmented.contains(id(0)) && cache.augmented.contains(id(1)));
        assert_eq!(cache.status.held(id(0)) & HELD_AUGMENTED, 0);
        assert_ne!(cache.status.held(id(2)) & HELD_AUGMENTED, 0);
    }

    #[test]
    fn lru_makes_room_by_evicting_the_least_recently_used() {
        // One shard in play (ids that are multiples of SHARDS) keeps the LRU order observable.
        let store = FormStore::new(3 * (100 + ENTRY_OVERHEAD), EvictionPolicy::Lru);
        let id = |k: u32| k * SHARDS as u32;
        for k in 0..3 {
            assert!(store.admit(id(k), bytes(100)));
        }
        store.get(id(0)); // 0 becomes most recent; 1 is least recent
        assert!(store.admit(id(3), bytes(100)));
        assert!(store.contains(id(0)) && !store.contains(id(1)));
        assert_eq!(store.entries(), 3);
        assert!(store.used() <= store.budget());
    }

    #[test]
    fn take_is_use_once_and_frees_the_room() {
        let store = FormStore::new(2 * (50 + ENTRY_OVERHEAD), EvictionPolicy::Keep);
        assert!(store.admit(1, bytes(50)));
        assert!(store.admit(2, bytes(50)));
        assert!(!store.admit(3, bytes(50)));
        assert!(store.take(1).is_some());
        assert!(store.take(1).is_none(), "an augmented output is served once");
        assert!(store.admit(3, bytes(50)), "the freed room is reusable");
        assert_eq!(store.used(), 2 * (50 + ENTRY_OVERHEAD));
    }

    #[test]
    fn budgets_hold_under_concurrent_admission_far_past_the_budget() {
        let store = Arc::new(FormStore::new(64 * 1024, EvictionPolicy::Lru));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        store.admit(t * 100_000 + i, bytes(100 + (i as usize % 900)));
                        assert!(store.used() <= store.budget());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert!(store.used() <= store.budget());
        // What is charged is exactly what is held.
        let held: u64 = store
            .shards
            .iter()
            .map(|s| s.lock().expect("shard").iter().map(|(_, v)| v.len() as u64 + ENTRY_OVERHEAD).sum::<u64>())
            .sum();
        assert_eq!(held, store.used());
    }

    #[test]
    fn single_flight_runs_concurrent_work_once() {
        let flights = Arc::new(SingleFlight::<u32>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (flights, runs, barrier) = (Arc::clone(&flights), Arc::clone(&runs), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    flights.run(9, || {
                        runs.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(200));
                        42
                    })
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().expect("thread"), 42);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Once finished, a later call runs again (nothing stale is kept).
        assert_eq!(flights.run(9, || 7), 7);
    }

    #[test]
    fn the_status_byte_follows_what_each_form_holds() {
        let cache = SampleCache::new(10_000, split(30, 30, 40), EvictionPolicy::Keep, 8);
        assert_eq!(cache.status.held(3), 0);
        assert!(cache.encoded.admit(3, bytes(10)));
        assert!(cache.augmented.admit(3, AugmentedEntry::fresh(bytes(10))));
        assert_eq!(cache.status.held(3), HELD_ENCODED | HELD_AUGMENTED);
        assert!(cache.augmented.take(3).is_some());
        assert_eq!(cache.status.held(3), HELD_ENCODED);
        // LRU eviction clears the bit of what it evicts.
        let lru = SampleCache::new(2 * (100 + ENTRY_OVERHEAD) * 100 / 40, split(0, 40, 60), EvictionPolicy::Lru, 64);
        let pixels = |n: u32| Arc::new(prepfs_pixels::rgb::Rgb { width: n, height: 1, pixels: vec![0; n as usize * 3] });
        let id = |k: u32| k * SHARDS as u32;
        for k in 0..3 {
            lru.decoded.admit(id(k), pixels(20));
        }
        let held: Vec<bool> = (0..3).map(|k| lru.status.held(id(k)) & HELD_DECODED != 0).collect();
        let stored: Vec<bool> = (0..3).map(|k| lru.decoded.contains(id(k))).collect();
        assert_eq!(held, stored);
        assert!(!stored[0], "the first was evicted");
        assert_eq!(cache.status.bytes(), 8);
    }

    #[test]
    fn the_held_counts_count_each_sample_once_by_the_most_served_form_it_has() {
        let cache = SampleCache::new(100_000, split(30, 30, 40), EvictionPolicy::Keep, 8);
        let pixels = || Arc::new(prepfs_pixels::rgb::Rgb { width: 2, height: 1, pixels: vec![0; 6] });
        // 0: bytes and an output; 1: pixels and an output; 2: pixels; 3: bytes; 4, 5, 6, 7: nothing.
        assert!(cache.encoded.admit(0, bytes(10)) && cache.augmented.admit(0, AugmentedEntry::fresh(bytes(10))));
        assert!(cache.decoded.admit(1, pixels()) && cache.augmented.admit(1, AugmentedEntry::fresh(bytes(10))));
        assert!(cache.decoded.admit(2, pixels()));
        assert!(cache.encoded.admit(3, bytes(10)));
        assert_eq!(cache.status.held_counts(), HeldCounts { spares: 2, pixels: 1, bytes: 1, decoded: 2 });
        // An output taken leaves what it was made from.
        assert!(cache.augmented.take(0).is_some());
        assert_eq!(cache.status.held_counts(), HeldCounts { spares: 1, pixels: 1, bytes: 2, decoded: 2 });
    }

    #[test]
    fn a_shared_output_serves_each_active_job_once_then_goes() {
        let (a, b, c) = (1u64, 2u64, 4u64);
        let cache = SampleCache::new(1 << 20, split(0, 0, 100), EvictionPolicy::Keep, 4);
        // Job a made it on a miss and used it; b and c are active.
        assert!(cache.augmented.admit(0, AugmentedEntry { bytes: bytes(50).into(), used_by: a }));
        assert!(cache.take_output_for_job(0, 0, a, a | b | c).is_none(), "a never gets its own output twice");
        assert!(cache.take_output_for_job(0, 0, b, a | b | c).is_some());
        assert_eq!(cache.status.refs(0), 2);
        assert!(cache.take_output_for_job(0, 0, b, a | b | c).is_none());
        assert!(cache.take_output_for_job(0, 0, c, a | b | c).is_some());
        assert_eq!(cache.status.held(0), 0, "dropped once every active job used it");
        assert_eq!(cache.augmented.used(), 0);
        // A job retiring lets go of outputs only it was still waiting for.
        assert!(cache.augmented.admit(1, AugmentedEntry { bytes: bytes(50).into(), used_by: a | b }));
        assert!(cache.augmented.admit(2, AugmentedEntry { bytes: bytes(50).into(), used_by: a }));
        assert!(cache.augmented.admit(3, AugmentedEntry::fresh(bytes(50))));
        assert_eq!(cache.forget_job(c, a | b), 1, "output 1 was waiting only for c");
        assert!(!cache.augmented.contains(1) && cache.augmented.contains(2) && cache.augmented.contains(3));
        assert_eq!(cache.forget_job(a, b), 0, "output 2 is unused again, so it stays for b");
        assert!(cache.take_output_for_job(0, 2, b, b).is_some());
        assert_eq!(cache.augmented.entries(), 1);
    }

    #[test]
    fn splits_set_the_budgets() {
        let cache = SampleCache::new(1000, split(20, 30, 50), EvictionPolicy::Keep, 10);
        assert_eq!((cache.encoded.budget(), cache.decoded.budget(), cache.augmented.budget()), (200, 300, 500));
        cache.set_split(split(0, 0, 100));
        assert_eq!(cache.augmented.budget(), 1000);
        assert_eq!(cache.split(), split(0, 0, 100));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, .. Default::default() })]

        /// Plans move between splits while two threads admit entries of every form as fast as
        /// they can: the forms together never hold more than the cache's memory (no slack: each
        /// entry's charge includes its overhead), whether a form shrinks under full stores or
        /// grows.
        #[test]
        fn plan_changes_under_load_keep_the_forms_within_the_memory(
            plan in proptest::collection::vec((0u32..=100, 0u32..=100, proptest::bool::ANY), 4..24),
        ) {
            use std::sync::atomic::AtomicBool;
            use std::sync::RwLock;
            const MEMORY: u64 = 64 * (1000 + ENTRY_OVERHEAD);
            let cache = SampleCache::new(MEMORY, split(34, 33, 33), EvictionPolicy::Keep, 4096);
            let done = AtomicBool::new(false);
            // Admissions take it shared; a check takes it alone, so what it reads is no more
            // than what the forms held when it began.
            let gate = RwLock::new(());
            let worst = AtomicU64::new(0);
            std::thread::scope(|scope| {
                for t in 0..2u32 {
                    let (cache, done, gate) = (&cache, &done, &gate);
                    scope.spawn(move || {
                        let mut k = t;
                        while !done.load(Ordering::Relaxed) {
                            let id = (u64::from(k) * 7919 % 4096) as FileId;
                            let size = 200 + (k as usize).wrapping_mul(37) % 1600;
                            let _admitting = gate.read().expect("gate");
                            match k % 3 {
                                0 => cache.encoded.admit(id, bytes(size)),
                                1 => cache.decoded.admit(id, Arc::new(prepfs_pixels::rgb::Rgb { width: 1, height: 1, pixels: vec![1; size] })),
                                _ => cache.augmented.admit(id, AugmentedEntry { bytes: bytes(size).into(), used_by: 0 }),
                            };
                            k += 2;
                        }
                    });
                }
                let (cache, done, gate, worst) = (&cache, &done, &gate, &worst);
                scope.spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        let _alone = gate.write().expect("gate");
                        worst.fetch_max(cache.used(), Ordering::Relaxed);
                    }
                });
                for &(e, d, lru) in &plan {
                    let e = e.min(100);
                    let d = d.min(100 - e);
                    cache.set_lru(lru);
                    cache.set_split(split(e, d, 100 - e - d));
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    worst.fetch_max(cache.used(), Ordering::Relaxed);
                }
                done.store(true, Ordering::Relaxed);
            });
            let worst = worst.load(Ordering::Relaxed);
            proptest::prop_assert!(worst <= MEMORY, "the forms held {} bytes of {}", worst, MEMORY);
            proptest::prop_assert!(cache.encoded.used() <= cache.encoded.budget());
            proptest::prop_assert!(cache.decoded.used() <= cache.decoded.budget());
            proptest::prop_assert!(cache.augmented.used() <= cache.augmented.budget());
        }
    }
}
