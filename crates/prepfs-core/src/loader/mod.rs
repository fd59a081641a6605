//! The loader socket: batches of a job's samples for frameworks that do not read files
//! (`prepfs.Loader` in Python, `python/`), without a FUSE round trip per sample.
//!
//! It owns the socket (`server.rs`: its path in a directory only the daemon's user may write,
//! its permissions, removing it at unmount if it is still the one made), the connections (one
//! thread each, the peer's uid and gid taken from the socket, a hello due within seconds), what
//! connections may hold (`admission.rs`: places and ring memory, per user and in all), and each
//! connection's ring of slots in one anonymous memory file that the loader maps, sealed at its
//! size. What goes into a slot is the core's (`fs::loader`): the same sampling, cache and pixel
//! work as `jobs/<job>/augmented/`. The protocol is the `prepfs-wire` crate's, shared with the extension.

mod admission;
mod server;
use prepfs_wire as wire;

pub use server::{default_path, LoaderServer, LoaderSocketError};
