//! The real source: the local (or network-mounted) directory tree of the dataset.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};

use super::{FileMeta, SourceFile, SourceIo, Space};

/// The source directory on this machine's file system.
pub struct LocalSource {
    /// The root, canonical: where every opened file must really lie.
    root: PathBuf,
    /// The root as given (the catalog's paths begin with it).
    given: PathBuf,
    /// The root directory, held open (`O_PATH`): a path inside it is looked up from here, not
    /// walked from `/` at every open (the walk was two thirds of a `stat`, and a `stat` 15% of
    /// the FUSE threads' time on cached opens).
    dir: OwnedFd,
}

impl LocalSource {
    /// A source rooted at `root` (made canonical here).
    pub fn new(root: &Path) -> io::Result<LocalSource> {
        let canonical = root.canonicalize()?;
        let dir = File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&canonical)?;
        Ok(LocalSource { root: canonical, given: root.to_path_buf(), dir: dir.into() })
    }
}

/// The refusal of something that is not a regular file.
fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file (a FIFO, device or directory); not read")
}

impl LocalSource {
    /// Where to look `path` up from: a path below the root from the held root (not walked
    /// from `/` at every call), any other as it is given.
    fn lookup<'a>(&self, path: &'a Path) -> (Option<RawFd>, &'a Path) {
        match path.strip_prefix(&self.given) {
            Ok(rel) if !rel.as_os_str().is_empty() => (Some(self.dir.as_raw_fd()), rel),
            _ => (None, path),
        }
    }
}

impl SourceIo for LocalSource {
    fn space(&self) -> io::Result<Space> {
        // On the root held open: no walk from `/`.
        let st = nix::sys::statvfs::fstatvfs(&self.dir)?;
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Space {
            blocks: st.blocks(),
            blocks_free: st.blocks_free(),
            blocks_available: st.blocks_available(),
            files: st.files(),
            files_free: st.files_free(),
            block_size: narrow(st.block_size()),
            fragment_size: narrow(st.fragment_size()),
            name_max: narrow(st.name_max()),
        })
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        // Symlinks followed, as `std::fs::metadata` does.
        let (dir, path) = self.lookup(path);
        fstatat(dir, path, AtFlags::empty()).map(|st| FileMeta::of_stat(&st)).map_err(io::Error::from)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SourceFile>> {
        // Refuse FIFOs and devices before opening them (opening may block or have effects),
        // and open without blocking in case the path was swapped for one meanwhile.
        let (dir, rel) = self.lookup(path);
        if fstatat(dir, rel, AtFlags::empty())?.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(not_regular());
        }
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        // SAFETY: `openat` returned a descriptor nothing else owns.
        let file = unsafe { File::from_raw_fd(openat(dir, rel, flags, Mode::empty())?) };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(not_regular());
        }
        // Where the open really landed: a symlink may lead only to a file inside the source.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        if !real.starts_with(&self.root) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("leads outside the source (to {}); not served", prepfs_base::escape::escaped(&real)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_from_the_held_root_says_what_a_stat_by_the_whole_path_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("train");
        std::fs::create_dir_all(root.join("c0")).expect("mkdir");
        std::fs::write(root.join("c0/a.jpg"), b"0123456789").expect("write");
        std::os::unix::fs::symlink("a.jpg", root.join("c0/link.jpg")).expect("symlink");
        let source = LocalSource::new(&root).expect("source");
        for rel in ["c0/a.jpg", "c0/link.jpg", "c0"] {
            let path = root.join(rel);
            let by_path = FileMeta::of(&std::fs::metadata(&path).expect("stat"));
            assert_eq!(source.metadata(&path).expect("stat from the root"), by_path, "{rel}");
        }
        assert!(source.metadata(&root.join("c0")).expect("dir").is_dir);
        assert_eq!(source.metadata(&root.join("c0/a.jpg")).expect("file").len(), 10);
        let gone = source.metadata(&root.join("c0/gone.jpg")).expect_err("missing");
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        // The root itself, and a path not under it, are looked up by path.
        assert!(source.metadata(&root).expect("root").is_dir);
        assert!(source.metadata(dir.path()).expect("outside").is_dir);
    }

    #[test]
    fn times_before_the_epoch_and_after_it_keep_their_nanoseconds() {
        let t = |secs, nsec| crate::system_time((secs, nsec));
        let epoch = std::time::UNIX_EPOCH;
        assert_eq!(t(5, 7), epoch + std::time::Duration::new(5, 7));
        assert_eq!(t(-5, 7), epoch - std::time::Duration::from_secs(5) + std::time::Duration::from_nanos(7));
    }
}
