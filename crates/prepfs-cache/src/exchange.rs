//! Augmented outputs handed between mounts ([`OutputExchange`]): a fresh output one mount made
//! and nobody there used is offered, and the next miss of that sample on any mount sharing the
//! store claims it, so the work is not done twice and no output is served twice (a claim takes
//! it: use-once across machines).
//!
//! The remote tier is today's store (`remote/`: the waiting set and `GETDEL` claims); the
//! producer sees only this trait, through [`crate::Tiers::exchange`], so another store (or a
//! fake in tests) takes its place without the producer knowing.

use std::sync::Arc;

use crate::lower::LowerKey;

/// Where augmented outputs are offered and claimed across mounts.
pub trait OutputExchange: Send + Sync {
    /// Whether offers can be made now (the store answers).
    fn is_open(&self) -> bool;
    /// Takes the output of `key` (its version) waiting for a claimer, if one waits: no other
    /// reader anywhere gets it.
    fn claim(&self, key: &LowerKey<'_>) -> Option<Arc<[u8]>>;
    /// Offers `out`, an output of `key` no one has used, to the next claimer anywhere (queued,
    /// never waited on); whether it was queued.
    fn offer(&self, key: &LowerKey<'_>, out: Arc<[u8]>) -> bool;
}
