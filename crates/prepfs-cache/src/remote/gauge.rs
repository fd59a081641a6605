//! What the tier measured, in the planner's terms ([`RemoteGauge`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Inner, Network};

/// What the tier measured, in the planner's terms; the plan's controller keeps one.
#[derive(Clone)]
pub struct RemoteGauge(pub(super) Arc<Inner>);

impl RemoteGauge {
    /// The network to the server (mounts sharing the tier, the link's rate, what else it
    /// carries); none while the tier is down or before the link was measured.
    pub fn network(&self) -> Option<Network> {
        self.0.network()
    }

    /// What the tier keeps of a sample: the mean bytes of the samples' entries this mount
    /// wrote or was served, and the share of them that were decoded pixels (the rest encoded
    /// bytes); none before the first.
    pub fn entries(&self) -> Option<(f64, f64)> {
        let i = &self.0;
        let seen = i.entries_seen.load(Ordering::Relaxed);
        (seen > 0).then(|| {
            let decoded = i.decoded_seen.load(Ordering::Relaxed) as f64 / seen as f64;
            (i.entry_bytes.load(Ordering::Relaxed) as f64 / seen as f64, decoded.min(1.0))
        })
    }

    /// The tier's size, bytes.
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Seconds a lookup that hit took on average (its round trip and transfer); none before
    /// the first.
    pub fn hit_seconds(&self) -> Option<f64> {
        let hits = self.0.hits.load(Ordering::Relaxed).saturating_sub(self.0.claims.load(Ordering::Relaxed));
        (hits > 0).then(|| self.0.hit_nanos.load(Ordering::Relaxed) as f64 / 1e9 / hits as f64)
    }
}
