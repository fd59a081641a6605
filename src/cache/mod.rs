//! The sample cache: the memory tiers every view, job and reader of the mount shares, and the
//! disk tier behind them.
//!
//! - `tiers` (private; its types re-exported here): the three memory forms (encoded bytes,
//!   decoded pixels, augmented outputs) with their byte budgets, eviction, the per-sample status
//!   byte opportunistic sampling reads, and single-flight for concurrent misses.
//! - [`disk`]: the disk tier (encoded and decoded entries, checked on read).
//!
//! What fills the tiers, and in which order, is the producer's (`crate::producer`); how much
//! memory each form gets is the planner's (`crate::planner`).

pub mod disk;
mod tiers;

pub use tiers::{
    AugmentedEntry, FormStore, SampleCache, SampleStatus, SingleFlight, Weighed, ENTRY_OVERHEAD, HELD_AUGMENTED,
    HELD_DECODED, HELD_ENCODED,
};
