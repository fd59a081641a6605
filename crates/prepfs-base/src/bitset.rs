//! A fixed-size set of ids (samples by catalog id), one atomic bit each: the seen and claimed
//! bits of opportunistic sampling, the remote tier's waiting set. Its atomics are `sync`'s, so
//! the shuttle model checks switch threads at each.

use std::sync::atomic::Ordering;

use crate::sync::atomic::AtomicU64 as SyncAtomicU64;

/// A fixed-size set of sample ids, one atomic bit each.
pub struct Bitset {
    words: Vec<SyncAtomicU64>,
}

impl Bitset {
    /// `n` bits, all clear.
    pub fn new(n: usize) -> Bitset {
        Bitset { words: (0..n.div_ceil(64)).map(|_| SyncAtomicU64::new(0)).collect() }
    }
    fn at(i: u32) -> (usize, u64) {
        (i as usize / 64, 1u64 << (i % 64))
    }
    /// Whether bit `i` is set.
    pub fn get(&self, i: u32) -> bool {
        let (w, m) = Self::at(i);
        self.words.get(w).is_some_and(|x| x.load(Ordering::Relaxed) & m != 0)
    }
    /// Sets bit `i`; returns whether it was clear.
    pub fn set(&self, i: u32) -> bool {
        let (w, m) = Self::at(i);
        self.words.get(w).is_some_and(|x| x.fetch_or(m, Ordering::Relaxed) & m == 0)
    }
    /// Clears bit `i`; returns whether it was set.
    pub fn clear(&self, i: u32) -> bool {
        let (w, m) = Self::at(i);
        self.words.get(w).is_some_and(|x| x.fetch_and(!m, Ordering::Relaxed) & m != 0)
    }
    /// How many bits are set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.load(Ordering::Relaxed).count_ones() as usize).sum()
    }
    /// Clears every bit.
    pub fn clear_all(&self) {
        for w in &self.words {
            w.store(0, Ordering::Relaxed);
        }
    }
    /// Bytes of memory the bits take.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}
