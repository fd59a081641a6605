//! The tiered sample cache: encoded bytes, decoded pixels and augmented outputs, each form with
//! its own byte budget, shared by every view and reader of the mount.
//!
//! - [`FormStore`] holds one form: a sharded map from sample to entry with a byte budget that
//!   admission reserves atomically, so `used` never passes `budget`. Each entry is charged its
//!   payload plus [`ENTRY_OVERHEAD`] bytes (map slot, `Arc` header, allocator slack), so the
//!   budget bounds the cache's resident memory. Encoded and decoded entries stay once admitted
//!   (`policy: keep`, Seneca's rule: no thrashing under random access), or make room by LRU
//!   within their shard (`policy: lru`).
//! - Augmented outputs are taken, not read: each is used once and dropped, and the free room
//!   is refilled in the background (see `filesystem`) with fresh augmentations.
//! - [`SingleFlight`] makes concurrent misses of one sample do the work once.
//!
//! No lock is held across decoding or I/O: shards are locked only to find, insert or remove.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use lru::LruCache;
use serde_json::json;

use crate::catalog::FileId;
use crate::config::EvictionPolicy;

/// Bytes charged per entry on top of its payload: the map slot, the `Arc` header and the
/// allocator's rounding, measured as about 60 bytes on x86-64 glibc, rounded up.
pub const ENTRY_OVERHEAD: u64 = 96;

const SHARDS: usize = 16;

/// A payload whose size the cache charges.
pub trait Weighed {
    fn weight(&self) -> u64;
}

impl Weighed for Arc<[u8]> {
    fn weight(&self) -> u64 {
        self.len() as u64
    }
}

impl Weighed for Arc<crate::jpeg::Rgb> {
    fn weight(&self) -> u64 {
        self.pixels.len() as u64 + std::mem::size_of::<crate::jpeg::Rgb>() as u64
    }
}

/// One form's store.
pub struct FormStore<V> {
    name: &'static str,
    shards: Vec<Mutex<LruCache<FileId, V>>>,
    used: AtomicU64,
    budget: AtomicU64,
    entries: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    policy: EvictionPolicy,
}

impl<V: Clone + Weighed> FormStore<V> {
    /// An empty store with `budget` bytes.
    pub fn new(name: &'static str, budget: u64, policy: EvictionPolicy) -> Self {
        FormStore {
            name,
            shards: (0..SHARDS).map(|_| Mutex::new(LruCache::unbounded())).collect(),
            used: AtomicU64::new(0),
            budget: AtomicU64::new(budget),
            entries: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            policy,
        }
    }

    fn shard(&self, id: FileId) -> std::sync::MutexGuard<'_, LruCache<FileId, V>> {
        self.shards[id as usize % SHARDS].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn charge(v: &V) -> u64 {
        v.weight() + ENTRY_OVERHEAD
    }

    /// The entry for `id`, counting a hit or a miss.
    pub fn get(&self, id: FileId) -> Option<V> {
        let found = self.shard(id).get(&id).cloned();
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Whether `id` is held, without counting.
    pub fn contains(&self, id: FileId) -> bool {
        self.shard(id).contains(&id)
    }

    /// Removes and returns the entry (a use-once take), counting a hit or a miss.
    pub fn take(&self, id: FileId) -> Option<V> {
        let found = self.shard(id).pop(&id);
        match &found {
            Some(v) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                self.release(Self::charge(v));
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
            }
        }
        found
    }

    fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.entries.fetch_sub(1, Ordering::Relaxed);
    }

    /// Reserves `bytes` of the budget if they fit.
    fn reserve(&self, bytes: u64) -> bool {
        let budget = self.budget.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                (used + bytes <= budget).then_some(used + bytes)
            })
            .is_ok()
    }

    /// Whether an entry of `payload` bytes would fit now.
    pub fn has_room_for(&self, payload: u64) -> bool {
        self.used.load(Ordering::Relaxed) + payload + ENTRY_OVERHEAD <= self.budget.load(Ordering::Relaxed)
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
            if self.policy != EvictionPolicy::Lru {
                return false;
            }
            match shard.pop_lru() {
                Some((_, old)) => self.release(Self::charge(&old)),
                None => return false,
            }
        }
        shard.put(id, value);
        self.entries.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Changes the budget (a new split); entries over a smaller budget stay until taken.
    pub fn set_budget(&self, budget: u64) {
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The byte budget.
    pub fn budget(&self) -> u64 {
        self.budget.load(Ordering::Relaxed)
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

    /// The form's name.
    pub fn name(&self) -> &'static str {
        self.name
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
    /// Runs `work` for `id` unless another thread is running it; then waits for and shares that
    /// result. The map lock is held only to find or register the flight, never during `work`.
    pub fn run(&self, id: FileId, work: impl FnOnce() -> T) -> T {
        let cell = {
            let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(flights.entry(id).or_default())
        };
        let result = cell.get_or_init(work).clone();
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if flights.get(&id).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            flights.remove(&id);
        }
        result
    }
}

/// The three stores, with their budgets from a split of one memory size.
pub struct SampleCache {
    pub encoded: FormStore<Arc<[u8]>>,
    pub decoded: FormStore<Arc<crate::jpeg::Rgb>>,
    pub augmented: FormStore<Arc<[u8]>>,
    memory: u64,
    split: Mutex<[u32; 3]>,
}

impl SampleCache {
    /// A cache of `memory` bytes split `split` percent among encoded, decoded, augmented.
    pub fn new(memory: u64, split: [u32; 3], policy: EvictionPolicy) -> SampleCache {
        let budget = |p: u32| memory / 100 * u64::from(p);
        SampleCache {
            encoded: FormStore::new("encoded", budget(split[0]), policy),
            decoded: FormStore::new("decoded", budget(split[1]), policy),
            // Augmented outputs are used once and dropped: never evicted to admit others.
            augmented: FormStore::new("augmented", budget(split[2]), EvictionPolicy::Keep),
            memory,
            split: Mutex::new(split),
        }
    }

    /// Applies a new split of the same memory.
    pub fn set_split(&self, split: [u32; 3]) {
        let budget = |p: u32| self.memory / 100 * u64::from(p);
        self.encoded.set_budget(budget(split[0]));
        self.decoded.set_budget(budget(split[1]));
        self.augmented.set_budget(budget(split[2]));
        *self.split.lock().unwrap_or_else(|p| p.into_inner()) = split;
    }

    /// The split in force.
    pub fn split(&self) -> [u32; 3] {
        *self.split.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any memory is given to caching.
    pub fn enabled(&self) -> bool {
        self.memory > 0
    }

    /// Bytes charged in all forms.
    pub fn used(&self) -> u64 {
        self.encoded.used() + self.decoded.used() + self.augmented.used()
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

    #[test]
    fn keep_admits_while_there_is_room_and_never_evicts() {
        let store = FormStore::new("t", 10 * (1000 + ENTRY_OVERHEAD), EvictionPolicy::Keep);
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
    fn lru_makes_room_by_evicting_the_least_recently_used() {
        // One shard in play (ids that are multiples of SHARDS) keeps the LRU order observable.
        let store = FormStore::new("t", 3 * (100 + ENTRY_OVERHEAD), EvictionPolicy::Lru);
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
        let store = FormStore::new("t", 2 * (50 + ENTRY_OVERHEAD), EvictionPolicy::Keep);
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
        let store = Arc::new(FormStore::new("t", 64 * 1024, EvictionPolicy::Lru));
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
    fn splits_set_the_budgets() {
        let cache = SampleCache::new(1000, [20, 30, 50], EvictionPolicy::Keep);
        assert_eq!((cache.encoded.budget(), cache.decoded.budget(), cache.augmented.budget()), (200, 300, 500));
        cache.set_split([0, 0, 100]);
        assert_eq!(cache.augmented.budget(), 1000);
        assert_eq!(cache.split(), [0, 0, 100]);
    }
}
