//! What every prepfs layer stands on, and nothing above it: no image, no source, no cache.
//!
//! - [`tasks`]: every thread prepfs starts, named, at its priority, owned, stopped and joined.
//! - [`sync`]: every lock and the synchronising atomics (shuttle's under `--features shuttle`).
//! - [`private_dir`]: every file the mount writes, where no other user can redirect or read it.
//! - [`escape`]: the one rule for printing a name (and a URL's password hidden).
//! - [`errno`]: [`errno::ToErrno`], which each layer implements for its own errors.
//! - [`log`]: the log's filter and file, and lines that cannot flood it.
//! - [`alloc`]: the daemon's allocator for large buffers.
//! - [`bitset`]: a fixed-size set of ids, one atomic bit each.
//! - [`hash`], [`thread_time`], [`human`], [`yaml`]: the stable hash, a thread's clocks, bytes
//!   for people, YAML errors with their line.

#![warn(unreachable_pub)]

pub mod alloc;
pub mod bitset;
pub mod errno;
pub mod escape;
pub mod hash;
pub mod human;
pub mod log;
pub mod private_dir;
pub mod sync;
pub mod tasks;
pub mod thread_time;
pub mod yaml;
