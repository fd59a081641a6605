//! Each source file's identity as last seen, so that an open notices a file replaced or
//! changed since, and the forms made of the old version are dropped rather than served.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Identity;
use crate::catalog::FileId;

/// What observing a file's identity found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The first time this file was seen.
    First,
    /// The same version as last time.
    Same,
    /// A different version: what was made of the old one is stale.
    Changed,
}

/// One identity fingerprint per file (8 bytes a file; 0: not seen yet).
pub struct Freshness {
    seen: Vec<AtomicU64>,
}

impl Freshness {
    /// `files` files, none seen.
    pub fn new(files: usize) -> Freshness {
        Freshness { seen: (0..files).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Records `identity` as `file`'s current version and says how it compares.
    pub fn observe(&self, file: FileId, identity: &Identity) -> Observed {
        let Some(slot) = self.seen.get(file as usize) else { return Observed::First };
        let now = identity.fingerprint();
        match slot.swap(now, Ordering::AcqRel) {
            0 => Observed::First,
            before if before == now => Observed::Same,
            _ => Observed::Changed,
        }
    }

    /// Whether `identity` is the version last observed of `file`.
    pub fn is_current(&self, file: FileId, identity: &Identity) -> bool {
        self.seen.get(file as usize).is_some_and(|s| s.load(Ordering::Acquire) == identity.fingerprint())
    }
}
