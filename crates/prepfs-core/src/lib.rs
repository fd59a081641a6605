//! prepfs-core: the filesystem that serves decoded and augmented training samples, without FUSE.
//! The `prepfs` crate (crates/prepfs) puts it behind the kernel: the FUSE adapter, the mount's
//! lifecycle, the command.
//!
//! Where things live (the hot path is open -> `fs` -> `producer` -> `prepfs_pixels::pipeline`
//! -> read; `docs/ARCHITECTURE.md` walks it; the crates below this one own the source, the
//! pixels, the cache, the planner's models and the jobs' sampling):
//! - [`fs`]: the filesystem core (inodes, views, handles, job views, control files), called by
//!   the FUSE adapter and by tests directly, and the bound on what open handles pin.
//! - [`producer`]: a resolved sample's bytes in one form by the cheapest path, composed of the
//!   reader, the tiers and the pixel work; the refill's and prefetch's unit of work.
//! - [`sample_reader`]: a sample resolved once per open, its reads and bad-sample marks.
//! - [`pixel_work`]: the mount's draws and timed decodes and augmentations.
//! - [`plan`]: calibration at mount and the controller that owns the cache split while serving.
//! - [`loader`]: the loader socket (`prepfs.Loader`).
//! - [`config`]: the one typed configuration, validated once.
//! - [`stats`] and [`metrics`]: live counters, latency histograms, `.prepfs/stats.json` and the
//!   Prometheus text.
//! - `remote_work`: what this mount asked `prepfs worker`s for, and whether to ask
//!   (`placement`); [`worker`]: `prepfs worker`'s core.
//! - [`drain`]: the drain of a stopping mount; [`machine_memory`]: the machine-wide registry of
//!   the mounts' cache memory; [`progress`]: long steps' progress lines; [`error`]: the core's
//!   error type, each layer's errno beside it.

// The public API is what the binary crate, the integration tests and the fuzz targets use; everything
// else is `pub(crate)`, and this lint keeps it so.
#![warn(unreachable_pub)]

pub mod config;
pub mod drain;
pub mod error;
pub mod fs;
pub mod loader;
pub mod machine_memory;
pub mod pixel_work;
pub mod plan;
pub mod progress;
mod remote_work;
pub mod worker;
pub mod producer;
pub mod sample_reader;
pub mod stats;
pub mod metrics;
