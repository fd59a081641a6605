//! prepfs: a FUSE filesystem that serves decoded and augmented training samples.
//!
//! Where things live (the hot path is open -> `filesystem` -> `producer` -> `pipeline` -> read):
//! - [`config`]: the one typed configuration, validated once.
//! - [`catalog`]: the scanned source tree, compact, with lazily probed image sizes.
//! - [`augment`]: torchvision's operations, their random draws, the geometry they fold into.
//! - [`jpeg`]: TurboJPEG header probing and the region/DCT-scaled decode.
//! - [`cache`]: the tiered sample cache (encoded, decoded, augmented), budgets, single-flight.
//! - [`disk_cache`]: the cache's disk tier (encoded and decoded entries, checked on read).
//! - [`producer`]: a sample's bytes in one form by the cheapest path: cache tiers, source reads,
//!   decode/augment, admission in Seneca's fill order; refill, prefetch and the cache plan.
//! - [`sampling`]: opportunistic sampling for concurrent jobs: the job registry, seen bits,
//!   epochs, substitution at open, listing order.
//! - [`source`]: every read of the source dataset: bounded, timed out, regular files inside
//!   the source only; each file's version, so nothing stale is served.
//! - [`throttle`]: the source read limit.
//! - [`log`]: log lines that cannot flood or fail.
//! - [`planner`]: Seneca's throughput model (pure functions) and the best split.
//! - [`calibrate`]: measures the model's inputs on the running machine.
//! - [`pipeline`]: source bytes to output pixels (fast path and reference path).
//! - [`output`]: PPM / npy encoding with sizes known up front.
//! - [`filesystem`]: the filesystem core (inodes, views, handles), called by tests directly.
//! - [`open_budget`]: the bound on the output bytes open file handles pin.
//! - [`fuse`]: the thin adapter from `fuser` callbacks onto the core.
//! - [`mount`]: mounting, stale-mount recovery, signals.
//! - [`stats`]: live counters served as `.prepfs/stats.json`.
//! - [`error`]: the core's error type, and [`error::ToErrno`], by which each layer's typed error
//!   (source, sampling, jpeg, pipeline, producer) says its errno beside it.

pub mod augment;
pub mod cache;
pub mod calibrate;
pub mod catalog;
pub mod config;
pub mod disk_cache;
pub mod error;
pub mod filesystem;
pub mod fuse;
pub mod jpeg;
pub mod log;
pub mod mount;
pub mod open_budget;
pub mod output;
pub mod pipeline;
pub mod planner;
pub mod producer;
pub mod sampling;
pub mod source;
pub mod stats;
mod sync;
pub mod throttle;
