//! One pass over the dataset, as opportunistic sampling keeps it: [`Pass`] (one pass over the dataset: the samples served in it, and which pass it is; a job's
//! epochs are passes, and so is what the top-level readers have read).

use std::sync::atomic::Ordering;

use prepfs_base::bitset::Bitset;

use prepfs_source::catalog::FileId;
use prepfs_base::sync::atomic::AtomicU64 as SyncAtomicU64;

/// One pass over the dataset: the samples served in it, and which pass it is. When every sample
/// has been served, the next pass begins (the bits clear). A job's epochs are passes; so is what
/// the top-level readers have read, which the refill works ahead of.
pub struct Pass {
    seen: Bitset,
    served: SyncAtomicU64,
    number: SyncAtomicU64,
    samples: u64,
}

impl Pass {
    /// The first pass over `samples` samples with ids below `ids`.
    pub fn new(ids: usize, samples: u64) -> Pass {
        Pass { seen: Bitset::new(ids), served: SyncAtomicU64::new(0), number: SyncAtomicU64::new(0), samples }
    }
    /// Whether `sample` was served in this pass.
    pub fn has_seen(&self, sample: FileId) -> bool {
        self.seen.get(sample)
    }
    /// Marks `sample` served; returns whether it was new in this pass. The last sample of a
    /// pass begins the next one.
    pub fn mark(&self, sample: FileId) -> bool {
        let new = self.seen.set(sample);
        if new && self.served.fetch_add(1, Ordering::Relaxed) + 1 >= self.samples {
            self.next();
        }
        new
    }
    /// Marks `sample` taken in this pass without ever beginning the next one (a shared job's
    /// mirror, whose passes the shared store begins); returns whether it was new.
    pub fn note(&self, sample: FileId) -> bool {
        let new = self.seen.set(sample);
        if new {
            self.served.fetch_add(1, Ordering::Relaxed);
        }
        new
    }
    /// Unmarks `sample` (a shared job's claim given back unread).
    pub(crate) fn unnote(&self, sample: FileId) {
        if self.seen.clear(sample) {
            self.served.fetch_sub(1, Ordering::Relaxed);
        }
    }
    /// Begins pass `number` (a shared job's, as its store reports it): every sample unseen.
    pub(crate) fn restart_at(&self, number: u64) {
        self.seen.clear_all();
        self.served.store(0, Ordering::Relaxed);
        self.number.store(number, Ordering::Relaxed);
    }
    /// Begins the next pass: every sample unseen again.
    pub fn next(&self) {
        self.seen.clear_all();
        self.served.store(0, Ordering::Relaxed);
        self.number.fetch_add(1, Ordering::Relaxed);
    }
    /// Which pass this is, from 0.
    pub fn number(&self) -> u64 {
        self.number.load(Ordering::Relaxed)
    }
    /// Samples served in this pass.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
    /// Bytes of its bits.
    pub fn bytes(&self) -> usize {
        self.seen.bytes()
    }
}
