//! The loader socket: batches of a job's samples for frameworks that do not read files
//! (`prepfs.Loader` in Python, `python/`), without a FUSE round trip per sample.
//!
//! It owns the socket (its path, its permissions, removing it at unmount), the connections (one
//! thread each, at most [`server::MAX_CONNECTIONS`], the peer's uid and gid taken from the
//! socket), and each connection's ring of slots in one anonymous memory file that the loader
//! maps. What goes into a slot is the core's (`fs::loader`): the same sampling, cache and pixel
//! work as `jobs/<job>/augmented/`. The protocol is `wire.rs`'s, shared with the extension.

mod server;
pub mod wire;

pub(crate) use server::{default_path, LoaderServer};
