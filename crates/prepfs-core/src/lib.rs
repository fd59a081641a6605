//! prepfs-core: the filesystem that serves decoded and augmented training samples, without FUSE.
//! The `prepfs` crate (crates/prepfs) puts it behind the kernel: the FUSE adapter, the mount's
//! lifecycle, the command.
//!
//! Where things live, a folder per subsystem (the hot path is open -> `fs` -> `producer` ->
//! `pixels::pipeline` -> read; `docs/ARCHITECTURE.md` walks it):
//! - [`source`]: every read of the source dataset (bounded, timed out, regular files inside the
//!   source only; each file's version), the scanned [`source::catalog`], the read limit
//!   ([`source::throttle`]), and the serving path's reader (a sample resolved once per open,
//!   [`source::Sample`]; bad-sample marks).
//! - [`pixels`]: decode, augment and encode: JPEG, torchvision's operations, the pipeline, the
//!   output formats, and the mount's timed pixel work. No I/O, no cache.
//! - [`cache`]: the memory tiers (encoded, decoded, augmented), budgets, single-flight, the
//!   disk tier ([`cache::disk`]), and the tiers behind one another with Seneca's fill order.
//! - `producer`: a resolved sample's bytes in one form by the cheapest path, composed of the
//!   reader, the tiers and the pixel work; the refill's and prefetch's unit of work.
//! - [`sampling`]: opportunistic sampling for concurrent jobs: the job registry, seen bits,
//!   epochs, substitution at open, listing order.
//! - [`planner`]: the throughput models (pure functions), the best split,
//!   [`planner::calibrate`], which measures their inputs on the running machine, and the
//!   controller that owns the plan while serving.
//! - [`fs`]: the filesystem core (inodes, views, handles, job views, control files), called by
//!   the FUSE adapter and by tests directly, and the bound on what open handles pin
//!   ([`fs::open_budget`]).
//! - [`drain`]: the drain of a stopping mount: its readers' requests, who holds files, when it
//!   ends.
//! - [`config`]: the one typed configuration, validated once.
//! - [`machine_memory`]: the machine-wide registry of the mounts' cache memory, from which
//!   `cache.memory: auto` takes its share.
//! - [`private_dir`]: every directory and file the mount writes outside itself (disk tier, kept
//!   indexes and listings, the memory registry, the log), opened so no other user can redirect
//!   or read them.
//! - [`served`]: a produced output's bytes as kept and served: in memory, or in an output file
//!   the kernel reads directly (passthrough); the mount's `OutputFiles` makes them and closes
//!   them when spent.
//! - [`shared`]: the few types and helpers several subsystems use (`Form`, `Size2`, `Rgb`,
//!   the stable hash, the augmentation draw).
//! - [`stats`]: live counters served as `.prepfs/stats.json`.
//! - `metrics`: latency histograms, and the counters in Prometheus's text format
//!   (`.prepfs/metrics`).
//! - [`error`]: the core's error type, and [`error::ToErrno`], by which each layer's typed error
//!   (source, sampling, jpeg, pipeline) says its errno beside it.
//! - [`log`]: log lines that cannot flood or fail; [`escape`]: the one rule by which a name
//!   (a path, a file name, a key) is printed in them and in messages.
//! - `tasks`: every thread of a mount, named, at its priority, owned and joined: the task
//!   queues of the decode and I/O threads, the pool of batch fills, the mount's workers.

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
