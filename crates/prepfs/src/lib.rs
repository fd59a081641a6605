//! prepfs: the filesystem core (`prepfs_core`) behind the kernel, and the command's parts that
//! the integration tests reach too.
//!
//! - `fuse`: the thin adapter from `fuser` callbacks onto the core's `Filesystem`.
//! - [`mount`]: mounting, stale-mount recovery, the background workers; `stop`: the signals,
//!   the drain before an unmount, the forced unmount.
//! - `detach`: a mountpoint taken down, only if unused or at once (the mount and `stop` use it).
//! - [`unmount`]: `prepfs unmount`: a mount's daemon asked to drain and stop, and waited for.
//! - [`plan_placement`]: `prepfs plan`'s placement flags, made into the planner's placement
//!   model's inputs.
//! - [`worker`]: `prepfs worker`: this machine's CPUs lent to the mounts sharing a remote tier.
//! - [`job`]: `prepfs job reset`: a job's state ended over the loader socket (read-only mounts too).
//! - [`supervisor`]: the `prepfs mount` process holding the mount's FUSE connection and
//!   starting its server again after a crash or for `prepfs upgrade`; `takeover`: the server's
//!   side of it (what it is given, what it hands back).
//! - [`summary`]: `prepfs stats`: the mount found from a path inside it, its figures as a
//!   readable summary.
//!
//! The command itself (`src/main.rs`) parses the arguments and calls these.

// The public API is what the command and the mounted tests use; this lint keeps the rest private.
#![warn(unreachable_pub)]

mod detach;
mod fuse;
pub mod job;
pub mod mount;
pub mod plan_placement;
mod stop;
pub mod summary;
pub mod supervisor;
mod takeover;
pub mod unmount;
pub mod worker;
