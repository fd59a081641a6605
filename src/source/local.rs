//! The real source: the local (or network-mounted) directory tree of the dataset.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::{FileMeta, SourceFile, SourceIo};

/// The source directory on this machine's file system.
pub struct LocalSource {
    /// The root, canonical: where every opened file must really lie.
    root: PathBuf,
}

impl LocalSource {
    /// A source rooted at `root` (made canonical here).
    pub fn new(root: &Path) -> io::Result<LocalSource> {
        Ok(LocalSource { root: root.canonicalize()? })
    }
}

/// The refusal of something that is not a regular file.
fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file (a FIFO, device or directory); not read")
}

impl SourceIo for LocalSource {
    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        std::fs::metadata(path).map(|m| FileMeta::of(&m))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SourceFile>> {
        // Refuse FIFOs and devices before opening them (opening may block or have effects),
        // and open without blocking in case the path was swapped for one meanwhile.
        if !std::fs::metadata(path)?.is_file() {
            return Err(not_regular());
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(not_regular());
        }
        // Where the open really landed: a symlink may lead only to a file inside the source.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        if !real.starts_with(&self.root) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("leads outside the source (to {}); not served", real.display()),
            ));
        }
        Ok(Box::new(LocalFile { meta: FileMeta::of(&meta), file }))
    }
}

struct LocalFile {
    file: File,
    meta: FileMeta,
}

impl SourceFile for LocalFile {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn as_file(&self) -> Option<&File> {
        Some(&self.file)
    }
}
