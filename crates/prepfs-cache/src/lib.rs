//! The sample cache: the memory tiers every view, job and reader of the mount shares, and the
//! tiers below memory (disk, remote) behind them.
//!
//! - `tiers` (private; its types re-exported here): the three memory forms (encoded bytes,
//!   decoded pixels, augmented outputs) with their byte budgets, eviction, the per-sample status
//!   byte opportunistic sampling reads, and single-flight for concurrent misses.
//! - `outputs` (private): each recipe's kept outputs beside `augmented/`'s, and the augmented
//!   budget's split between the pipelines by their reads.
//! - `entry` (crate-private): the entry codec of the tiers below memory (the header, its CRC, the
//!   damage rules), shared by the disk and remote tiers.
//! - `queue` (private): the bounded write queue and writer thread both tiers below memory write
//!   through.
//! - [`lower`]: the tiers below memory as one abstraction: the `LowerTier` trait (get, put,
//!   remove, flush, close) the disk and remote tiers implement, and `LowerTiers`, the chain of
//!   them in lookup order with its one lookup-and-promote.
//! - [`disk`]: the disk tier (encoded and decoded entries, checked on read).
//! - [`remote`]: the remote tier on Redis, shared by every mount naming it
//!   (encoded, decoded and augmented entries keyed by the dataset's fingerprint, checked on
//!   read; down, it is a miss at no cost and reconnects by itself).
//! - `fill` (private): the tiers behind one another ([`Tiers`]): lookup in memory, then the
//!   tiers below memory, then the caller's read of the source, single-flighted; and Seneca's fill order for what a
//!   read is kept as.
//!
//! - [`exchange`]: augmented outputs offered and claimed across mounts (`OutputExchange`; the
//!   remote tier implements it).
//! - [`form`]: the three forms a sample is served in, and a sample's rank in a view.
//! - [`shared_jobs`]: the seam to jobs' state shared by several mounts (prepfs-core's sampling
//!   uses it; `remote/jobs.rs` keeps it on the remote tier's server).
//! - [`settings`]: the eviction policy and the remote tier's server, as plain data.
//!
//! Reading the source and pixel work are the serving path's (prepfs-core's `producer`); how much
//! memory each form gets is the planner's (prepfs-planner, driven by prepfs-core's `plan`).

// `SampleStatus::len` is the number of samples it covers, never asked whether it is empty.
#![allow(clippy::len_without_is_empty)]

pub mod disk;
pub mod exchange;
pub mod form;
pub mod settings;
pub mod shared_jobs;
pub mod entry;
mod fill;
pub mod lower;
mod queue;
mod outputs;
pub mod remote;
mod tiers;

pub use form::Origin;
pub use fill::{Admit, PixelsOrBytes, MissOutputs, Tiers};
pub use tiers::{
    AugmentedEntry, FormStore, SampleCache, MAX_JOBS, SampleStatus, SingleFlight, ChargedSize, ENTRY_OVERHEAD, HELD_AUGMENTED, HELD_REMOTE,
    HELD_DECODED, HELD_ENCODED,
};
