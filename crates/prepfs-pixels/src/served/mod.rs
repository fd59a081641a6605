//! A produced output's bytes as they are kept and served ([`ServedBytes`]): in memory, or in a
//! file of their own ([`OutputFile`]) that the kernel reads directly when an open of it passes
//! through (`fs::passthrough`).
//!
//! With passthrough on, the pixel work writes each output straight into such a file, once, so
//! the cache holds it there and an open of it costs no copy: the file is handed to the kernel as
//! it is. The mount's [`OutputFiles`] makes them and owns what they share: where they are made
//! (`tmpfs.rs`), how many are alive against the descriptor budget (`limits.rs`), and the list
//! of spent files its closer thread closes (`closer.rs`).
//!
//! - `files.rs`: [`OutputFiles`] and [`OutputFile`].
//! - `tmpfs.rs`: the tmpfs instance of the mount's own the files are made in.
//! - `closer.rs`: spent files closed off the request path.
//! - `limits.rs`: the descriptor limit and the budget it gives.

mod closer;
mod files;
mod limits;
mod tmpfs;

use std::sync::Arc;

pub use files::OutputFiles;
pub use files::OutputFile;
pub use limits::raise_fd_limit;

/// A produced output's bytes: see the module documentation.
#[derive(Clone)]
pub enum ServedBytes {
    /// In memory.
    Memory(Arc<[u8]>),
    /// In a file of their own, never changed, shared by every holder (cache entry, open handles).
    File(Arc<OutputFile>),
}

impl ServedBytes {
    /// The number of bytes.
    pub fn len(&self) -> usize {
        match self {
            ServedBytes::Memory(b) => b.len(),
            ServedBytes::File(f) => f.len() as usize,
        }
    }


    /// Copies the last `dst.len()` bytes into `dst` (an output's pixels, past its header, into
    /// a loader's ring slot): one copy, read from the file where it is in one.
    pub fn copy_tail_into(&self, dst: &mut [u8]) -> std::io::Result<()> {
        let len = self.len();
        let at = len.checked_sub(dst.len()).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        match self {
            ServedBytes::Memory(b) => dst.copy_from_slice(&b[at..]),
            ServedBytes::File(f) => std::os::unix::fs::FileExt::read_exact_at(f.file(), dst, at as u64)?,
        }
        Ok(())
    }

    /// The bytes, read back where they are in a file (an output offered to other mounts;
    /// tests).
    pub fn to_vec(&self) -> std::io::Result<Vec<u8>> {
        match self {
            ServedBytes::Memory(b) => Ok(b.to_vec()),
            ServedBytes::File(f) => {
                let mut buf = vec![0; f.len() as usize];
                std::os::unix::fs::FileExt::read_exact_at(f.file(), &mut buf, 0)?;
                Ok(buf)
            }
        }
    }
}

impl From<Arc<[u8]>> for ServedBytes {
    fn from(bytes: Arc<[u8]>) -> Self {
        ServedBytes::Memory(bytes)
    }
}
