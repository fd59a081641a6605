//! The mounted end-to-end tests, one binary (as mountpoint-s3 keeps its FUSE tests): each module
//! is one area's tests on real FUSE mounts of the real `prepfs` binary (`common`: the mount guard,
//! the data sets, the attacker's helpers). One binary links once, where twenty took a link each;
//! the filesystem's behaviour without the kernel is tested in-process in crates/prepfs-core.
//! Run one area with `cargo test -p prepfs --test mounted AREA::`.

mod common;

mod bad_samples;
mod cache;
mod cli;
mod disk_cache;
mod drain;
mod formats;
mod hardening;
mod jobs;
mod listing;
mod loader;
mod memory_auto;
mod metrics;
mod passthrough;
mod recipes;
mod remote;
mod restarts;
mod workers;
mod s3;
mod shards;
mod threads;
mod torchvision;
mod trust_names;
mod trust_source;
mod trust_writes;
mod views;
