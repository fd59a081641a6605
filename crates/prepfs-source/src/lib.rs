//! The source dataset's I/O: every byte and every `stat` prepfs takes from the source goes
//! through here.
//!
//! - [`SourceIo`] is the seam: [`LocalSource`] is the real one (regular files only, opened
//!   without blocking on FIFOs or devices, symlinks followed only to files inside the source);
//!   [`FaultySource`] wraps it for tests and injects errors, delays, hangs and growth.
//! - [`Source`] is what the rest of prepfs calls: whole-file reads bounded by
//!   `source.max_file_size`, run on [`IoPool`]'s own threads with a timeout (never on the
//!   decode pool, so a hung file costs one I/O thread, not a decoder), within the read limit;
//!   `statvfs` too, and `stat` where asked (`bounded_metadata`; an open's `stat` runs in place).
//! - [`Sample`]: a sample resolved once per open (id, path, version); prepfs-core's
//!   `sample_reader` resolves it, reads it, probes its size and marks bad samples.
//! - [`settings`]: shards' and object stores' settings as plain data; [`catalog`]: the scanned
//!   dataset; [`s3`] and [`shards`]: the object-store and WebDataset sources.
//! - [`Freshness`] remembers each file's [`Identity`] (device, inode, size, mtime, ctime) so an
//!   open notices a changed file and nothing stale is served.
//!
//! Its errors are `io::Error`s (the kind, and the OS error where there was one, kept as they
//! came); which errno a reader gets for one is decided here too ([`ToErrno`] for `io::Error`).

// `FileMeta::len` is a file's size, never asked whether it is empty.
#![allow(clippy::len_without_is_empty)]

pub mod catalog;
pub mod settings;
#[cfg(any(test, feature = "faults"))]
mod faults;
mod freshness;
mod kept;
mod local;
mod pool;
pub mod s3;
pub mod shards;
pub mod throttle;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog::FileId;

#[cfg(any(test, feature = "faults"))]
pub use faults::{Fault, FaultySource};
pub use freshness::{Freshness, Observed};
pub use local::LocalSource;
pub use pool::IoPool;

use prepfs_base::thread_time::thread_sched_nanos;
use throttle::ReadLimit;

/// A sample resolved once for one open: its catalog id, its source path, and the version `stat`
/// found. Every step of the open after the resolution takes it as it is.
#[derive(Debug, Clone)]
pub struct Sample {
    pub id: FileId,
    pub path: PathBuf,
    pub meta: FileMeta,
}

/// Who a file belongs to and what it is, as `stat` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub identity: Identity,
    pub uid: u32,
    pub gid: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub is_dir: bool,
    pub mtime: std::time::SystemTime,
}

impl FileMeta {
    /// The metadata `stat` returned, as std gives it.
    pub fn of(meta: &std::fs::Metadata) -> FileMeta {
        use std::os::unix::fs::MetadataExt;
        FileMeta::of_fields(StatFields {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        })
    }

    /// The metadata `stat` returned, as libc gives it (a `fstatat` relative to a directory).
    pub(crate) fn of_stat(st: &libc::stat) -> FileMeta {
        FileMeta::of_fields(StatFields {
            dev: st.st_dev,
            ino: st.st_ino,
            len: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode,
        })
    }

    fn of_fields(f: StatFields) -> FileMeta {
        let ns = |(secs, nsec): (i64, i64)| secs as i128 * 1_000_000_000 + nsec as i128;
        FileMeta {
            identity: Identity { dev: f.dev, ino: f.ino, len: f.len, mtime_ns: ns(f.mtime), ctime_ns: ns(f.ctime) },
            uid: f.uid,
            gid: f.gid,
            mode: f.mode & 0o7777,
            is_dir: f.mode & libc::S_IFMT == libc::S_IFDIR,
            mtime: system_time(f.mtime),
        }
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.identity.len
    }
}

/// What a `stat` says that [`FileMeta`] keeps, whichever call gave it.
struct StatFields {
    dev: u64,
    ino: u64,
    len: u64,
    /// Seconds and nanoseconds since the epoch.
    mtime: (i64, i64),
    ctime: (i64, i64),
    uid: u32,
    gid: u32,
    /// `st_mode`: the type and the permission bits.
    mode: u32,
}

/// A time `stat` gave (seconds and nanoseconds since the epoch, before it when negative).
fn system_time((secs, nsec): (i64, i64)) -> std::time::SystemTime {
    let epoch = std::time::UNIX_EPOCH;
    let nsec = std::time::Duration::from_nanos(nsec.clamp(0, 999_999_999) as u64);
    let at = if secs >= 0 {
        epoch.checked_add(std::time::Duration::from_secs(secs as u64))
    } else {
        epoch.checked_sub(std::time::Duration::from_secs(secs.unsigned_abs()))
    };
    at.and_then(|t| t.checked_add(nsec)).unwrap_or(epoch)
}

/// What tells one version of a file from another: a replacement (rename over it) changes the
/// inode, a write changes the size or the times, a `touch` changes mtime and ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Identity {
    /// A 64-bit fingerprint of the identity, never 0 (0 means "not seen yet" in [`Freshness`]).
    pub fn fingerprint(&self) -> u64 {
        let (dev, ino, len) = (self.dev.to_le_bytes(), self.ino.to_le_bytes(), self.len.to_le_bytes());
        let (mtime, ctime) = (self.mtime_ns.to_le_bytes(), self.ctime_ns.to_le_bytes());
        prepfs_base::hash::fnv1a64(&[&dev, &ino, &len, &mtime, &ctime]).max(1)
    }
}

/// The size and use of the file system the source lies on (`statvfs`), which `df` shows for
/// the mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Space {
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_available: u64,
    pub files: u64,
    pub files_free: u64,
    pub block_size: u32,
    pub fragment_size: u32,
    pub name_max: u32,
}

/// The source's file system, as prepfs uses it.
pub trait SourceIo: Send + Sync {
    /// `statvfs` of the file system the source's root lies on.
    fn space(&self) -> io::Result<Space>;
    /// `stat` of a path (symlinks followed).
    fn metadata(&self, path: &Path) -> io::Result<FileMeta>;
    /// Opens a regular file for reading. Refuses anything else (a FIFO, a device, a
    /// directory) without blocking, and a file reached through a symlink leaving the source.
    fn open(&self, path: &Path) -> io::Result<Box<dyn SourceFile>>;
}

/// An open source file.
pub trait SourceFile: Send + Sync {
    /// The file's metadata at open (`fstat`: the version this handle reads).
    fn meta(&self) -> &FileMeta;
    /// Reads at `offset`; 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The open file itself, where the kernel may read it directly (passthrough); `None` where
    /// every read must come through [`SourceFile::read_at`] (a fault-injecting source).
    fn as_file(&self) -> Option<&std::fs::File> {
        None
    }
}

/// What a whole-file read cost on the I/O thread that ran it, from its open to its last byte
/// (not its wait for the read limit or for a free thread): its CPU, and its time blocked (off a
/// core and not waiting for one: the storage's own time). The planner takes a read's CPU and
/// the storage's rate from these. The caller's clock counted both the queue for an I/O thread
/// (with three jobs, 5.6 ms a read against 0.2-0.5 ms with one, on the same files) and, on a
/// busy machine, the wait for a core (22 ms a read from the page cache) as the storage's.
#[derive(Debug, Clone, Copy)]
pub struct ReadCost {
    pub cpu_nanos: u64,
    pub blocked_nanos: u64,
}

/// Source reads with their bounds: see the module documentation.
pub struct Source {
    io: Arc<dyn SourceIo>,
    pool: IoPool,
    max_file_size: u64,
    read_limit: Option<Arc<ReadLimit>>,
}

/// The error of a file larger than `source.max_file_size`.
pub fn too_large(len: u64, max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("{len} bytes, more than source.max_file_size ({max} bytes); not read"),
    )
}

impl Source {
    /// Source I/O through `io`, on `threads` I/O threads that give up on a call after
    /// `timeout`.
    pub fn new(
        io: Arc<dyn SourceIo>,
        threads: usize,
        timeout: Duration,
        max_file_size: u64,
        read_limit: Option<u64>,
    ) -> io::Result<Source> {
        Ok(Source {
            io,
            pool: IoPool::new(threads, timeout)?,
            max_file_size,
            read_limit: read_limit.map(|r| Arc::new(ReadLimit::new(r))),
        })
    }

    /// The read limit, if one is set.
    pub fn read_limit(&self) -> Option<&ReadLimit> {
        self.read_limit.as_deref()
    }


    /// `stat` of a source path, on the calling thread: every open resolves its sample with one,
    /// a cached hit too, and an I/O thread's round trip for each cost cached serving a fifth of
    /// its rate on 2 cores (a whole-cache second epoch of the generator's set at 4,149-5,018
    /// samples/s, against 5,562-6,449 inline). A `stat` that hangs (a hung network share) holds
    /// the thread that asked; [`Source::bounded_metadata`] is the bounded one.
    pub fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        self.io.metadata(path)
    }

    /// [`Source::metadata`] on an I/O thread within the timeout, as reads are: a `stat` that
    /// hangs costs one I/O thread, and fails its caller with `TimedOut` (`EIO`).
    pub(crate) fn bounded_metadata(&self, path: &Path) -> io::Result<FileMeta> {
        let io = Arc::clone(&self.io);
        let path = path.to_path_buf();
        self.pool.run(move || io.metadata(&path))
    }

    /// `statvfs` of the source's file system, bounded as [`Source::metadata`] is.
    pub fn space(&self) -> io::Result<Space> {
        let io = Arc::clone(&self.io);
        self.pool.run(move || io.space())
    }

    /// Reads a whole file (at most `max_file_size` bytes, else refused unread), with the
    /// metadata of the version read.
    pub fn read_whole(&self, path: &Path) -> io::Result<(Vec<u8>, FileMeta)> {
        let meta = self.bounded_metadata(path)?;
        let (bytes, meta, _) = self.read_with(path, meta.len(), |file, max| read_bounded(file, max, usize::MAX))?;
        Ok((bytes, meta))
    }

    /// [`Source::read_whole`] of a file a `stat` just found `len` bytes long (a resolved
    /// sample), into the shared bytes the sample is kept and decoded as (`read_shared`): no
    /// second `stat`, no copy; with what the read cost its I/O thread.
    pub fn read_sized(&self, path: &Path, len: u64) -> io::Result<(Arc<[u8]>, FileMeta, ReadCost)> {
        self.read_with(path, len, read_shared)
    }

    /// Reads a whole file of `len` bytes by `read` on an I/O thread, with the metadata of the
    /// version read (the opened file's own) and what the read cost that thread; refused unread
    /// past `max_file_size`, and refused by `read` if it grew past it since.
    fn read_with<T: Send + 'static>(
        &self,
        path: &Path,
        len: u64,
        read: fn(&dyn SourceFile, u64) -> io::Result<T>,
    ) -> io::Result<(T, FileMeta, ReadCost)> {
        let max = self.max_file_size;
        if len > max {
            return Err(too_large(len, max));
        }
        self.throttle(len)?;
        let io = Arc::clone(&self.io);
        let path = path.to_path_buf();
        self.pool.run(move || {
            let (started, (cpu, waited)) = (Instant::now(), thread_sched_nanos());
            let (file, bytes) = read_current(&*io, &path, |file| read(file, max))?;
            let meta = *file.meta();
            let (wall, (cpu_now, waited_now)) = (started.elapsed().as_nanos() as u64, thread_sched_nanos());
            let cpu_nanos = cpu_now.saturating_sub(cpu);
            let blocked_nanos = wall.saturating_sub(cpu_nanos + waited_now.saturating_sub(waited));
            Ok((bytes, meta, ReadCost { cpu_nanos, blocked_nanos }))
        })
    }

    /// Reads at most `n` bytes from the start of a file (a header), with its metadata.
    pub fn read_head(&self, path: &Path, n: usize) -> io::Result<(Vec<u8>, FileMeta)> {
        let io = Arc::clone(&self.io);
        let path = path.to_path_buf();
        self.throttle(n as u64)?;
        self.pool.run(move || {
            let (file, bytes) = read_current(&*io, &path, |file| read_bounded(file, u64::MAX, n))?;
            Ok((bytes, *file.meta()))
        })
    }

    /// Opens a file to read through it (the top-level `encoded` view).
    pub fn open(&self, path: &Path) -> io::Result<Arc<dyn SourceFile>> {
        let io = Arc::clone(&self.io);
        let path = path.to_path_buf();
        self.pool.run(move || io.open(&path).map(Arc::from))
    }

    /// Reads up to `size` bytes at `offset` of an open file, within the read limit.
    pub fn read_at(&self, file: &Arc<dyn SourceFile>, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let left = file.meta().len().saturating_sub(offset).min(u64::from(size));
        self.throttle(left)?;
        let file = Arc::clone(file);
        self.pool.run(move || {
            let mut buf = vec![0u8; size as usize];
            let filled = fill(&*file, &mut buf, offset)?;
            buf.truncate(filled);
            Ok(buf)
        })
    }

    fn throttle(&self, bytes: u64) -> io::Result<()> {
        if throttle::take(self.read_limit.as_deref(), bytes) {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::Interrupted, "unmounting: throttled read abandoned"))
        }
    }

    /// Makes throttled reads return at once, and later ones not wait.
    pub fn interrupt(&self) {
        if let Some(limit) = &self.read_limit {
            limit.stop();
        }
    }

    /// Stops: throttled reads return at once, the I/O threads finish what they run and are
    /// joined (a thread stuck in a hung read is waited for at most `grace`).
    pub fn shutdown(&self, grace: Duration) {
        self.interrupt();
        self.pool.shutdown(grace);
    }
}

/// Opens `path` and reads it by `read`; a file that changed between its open and its read
/// in a way the source can only tell by failing the read (`StaleNetworkFileHandle`: an
/// object store's object replaced since it was listed) is opened again, as its new version,
/// and read once more. The file read, and what was read.
fn read_current<T>(io: &dyn SourceIo, path: &Path, read: impl Fn(&dyn SourceFile) -> io::Result<T>) -> io::Result<(Box<dyn SourceFile>, T)> {
    let file = io.open(path)?;
    match read(&*file) {
        Err(e) if e.kind() == io::ErrorKind::StaleNetworkFileHandle => {
            let file = io.open(path)?;
            let bytes = read(&*file)?;
            Ok((file, bytes))
        }
        other => other.map(|bytes| (file, bytes)),
    }
}

/// Reads `file` from the start until its end, refusing it past `max` bytes and stopping at
/// `want` bytes. The buffer is sized by what `stat` found; the end is confirmed with a small
/// read, and only a file that grew since is read on in chunks (so a read of a 100 KB sample
/// zeroes and maps 100 KB, not a chunk of a megabyte).
fn read_bounded(file: &dyn SourceFile, max: u64, want: usize) -> io::Result<Vec<u8>> {
    const CHUNK: usize = 1 << 20;
    const PROBE: usize = 4096;
    let expected = (file.meta().len().min(max) as usize).min(want);
    let mut buf = vec![0u8; expected];
    let mut filled = 0;
    loop {
        // Fill what is allocated.
        filled += fill(file, &mut buf[filled..], filled as u64)?;
        if filled < buf.len() {
            buf.truncate(filled); // shrank since the stat
            return Ok(buf);
        }
        if filled >= want {
            buf.truncate(want);
            return Ok(buf);
        }
        // At the size expected: the end, unless it grew.
        let mut probe = [0u8; PROBE];
        let n = fill(file, &mut probe[..PROBE.min(want - filled)], filled as u64)?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&probe[..n]);
        filled += n;
        if filled as u64 > max {
            // It grew past the limit while we read it.
            return Err(too_large(filled as u64, max));
        }
        // Never more than one byte past `max` before the check above refuses it.
        let to_max = usize::try_from((max + 1).saturating_sub(filled as u64)).unwrap_or(usize::MAX);
        let step = CHUNK.min(want - filled).min(to_max).max(1);
        buf.resize(filled + step, 0);
    }
}

/// Reads into `buf` from `offset` until it is full or the file ends (a read a signal
/// interrupts is retried); how many bytes it holds.
fn fill(file: &dyn SourceFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A whole file as shared bytes, read straight into the `Arc` the sample is kept in (one
/// allocation, no copy out of a `Vec`) while the file has the size the open found, as nearly
/// always; one whose size changed meanwhile is read again by [`read_bounded`], with its limit.
fn read_shared(file: &dyn SourceFile, max: u64) -> io::Result<Arc<[u8]>> {
    let expected = file.meta().len().min(max) as usize;
    let mut bytes = prepfs_base::alloc::zeroed_shared(expected);
    if let Some(buf) = Arc::get_mut(&mut bytes) {
        // Full, and nothing after it: the common case, done.
        if fill(file, buf, 0)? == expected && fill(file, &mut [0u8; 1], expected as u64)? == 0 {
            return Ok(bytes);
        }
    }
    read_bounded(file, max, usize::MAX).map(Arc::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prepfs_base::errno::ToErrno;

    #[test]
    fn a_sample_read_whole_into_shared_bytes_has_the_files_bytes_whatever_its_size_did() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(dir.path().join("a.jpg"), &bytes).expect("write");
        std::fs::write(dir.path().join("empty.jpg"), b"").expect("write");
        let local = LocalSource::new(dir.path()).expect("root");
        let file = local.open(&dir.path().join("a.jpg")).expect("open");
        assert_eq!(&*read_shared(&*file, 1 << 20).expect("read"), &bytes[..]);
        let empty = local.open(&dir.path().join("empty.jpg")).expect("open");
        assert!(read_shared(&*empty, 1 << 20).expect("read").is_empty());
        // Through the source, as a resolved sample is read.
        let source = source_over(dir.path(), Arc::new(LocalSource::new(dir.path()).expect("root")), 1 << 20);
        let (read, meta, _) = source.read_sized(&dir.path().join("a.jpg"), bytes.len() as u64).expect("read");
        assert_eq!((&*read, meta.len()), (&bytes[..], bytes.len() as u64));
        // Shorter than its stat said: what is there.
        std::fs::write(dir.path().join("a.jpg"), &bytes[..1000]).expect("shrink");
        assert_eq!(&*read_shared(&*file, 1 << 20).expect("read"), &bytes[..1000]);
        // Grown past what the open found: all of it, and past the limit refused.
        let faulty = Arc::new(FaultySource::new(LocalSource::new(dir.path()).expect("root")));
        faulty.inject(&dir.path().join("a.jpg"), Fault::Grow(500));
        let grown = faulty.open(&dir.path().join("a.jpg")).expect("open");
        assert_eq!(read_shared(&*grown, 1 << 20).expect("read").len(), 1500);
        faulty.inject(&dir.path().join("a.jpg"), Fault::Grow(5 << 20));
        let huge = faulty.open(&dir.path().join("a.jpg")).expect("open");
        assert_eq!(read_shared(&*huge, 2 << 20).expect_err("grew").kind(), io::ErrorKind::FileTooLarge);
    }

    fn source_over(dir: &Path, io: Arc<dyn SourceIo>, max: u64) -> Source {
        let _ = dir;
        Source::new(io, 2, Duration::from_millis(500), max, None).expect("source")
    }

    #[test]
    fn a_file_over_the_size_limit_is_refused_without_being_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("huge.jpg");
        // Sparse: 50 GB that take no disk. Reading it would allocate all of it.
        std::fs::File::create(&path).expect("create").set_len(50 << 30).expect("set_len");
        let source = source_over(dir.path(), Arc::new(LocalSource::new(dir.path()).expect("root")), 1 << 20);
        let err = source.read_whole(&path).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge, "{err}");
        let (head, meta) = source.read_head(&path, 4096).expect("head");
        assert_eq!((head.len(), meta.len()), (4096, 50 << 30));
    }

    #[test]
    fn a_fifo_is_refused_at_once_instead_of_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.jpg");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
        let source = source_over(dir.path(), Arc::new(LocalSource::new(dir.path()).expect("root")), 1 << 20);
        let started = std::time::Instant::now();
        let err = source.read_whole(&path).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(source.open(&path).is_err());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_symlink_out_of_the_source_is_refused_and_one_inside_is_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("src");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::write(dir.path().join("secret"), b"secret").expect("write");
        std::fs::write(root.join("real.jpg"), b"inside").expect("write");
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out.jpg")).expect("symlink");
        std::os::unix::fs::symlink("real.jpg", root.join("in.jpg")).expect("symlink");
        let source = source_over(&root, Arc::new(LocalSource::new(&root).expect("root")), 1 << 20);
        let err = source.read_whole(&root.join("out.jpg")).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert_eq!(source.read_whole(&root.join("in.jpg")).expect("inside").0, b"inside");
    }

    #[test]
    fn a_hung_read_times_out_and_later_reads_still_work() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.jpg"), b"aaaa").expect("write");
        std::fs::write(dir.path().join("b.jpg"), b"bbbb").expect("write");
        let faulty = Arc::new(FaultySource::new(LocalSource::new(dir.path()).expect("root")));
        faulty.inject(&dir.path().join("a.jpg"), Fault::Hang);
        let source = source_over(dir.path(), faulty.clone(), 1 << 20);
        let err = source.read_whole(&dir.path().join("a.jpg")).expect_err("hung");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert_eq!(source.read_whole(&dir.path().join("b.jpg")).expect("b").0, b"bbbb");
        faulty.release_hangs();
        source.shutdown(Duration::from_secs(2));
    }

    #[test]
    fn a_hung_stat_times_out_and_later_stats_and_reads_still_work() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.jpg"), b"aaaa").expect("write");
        std::fs::write(dir.path().join("b.jpg"), b"bbbb").expect("write");
        let faulty = Arc::new(FaultySource::new(LocalSource::new(dir.path()).expect("root")));
        faulty.inject(&dir.path().join("a.jpg"), Fault::HangStat);
        let source = source_over(dir.path(), faulty.clone(), 1 << 20);
        let err = source.bounded_metadata(&dir.path().join("a.jpg")).expect_err("hung");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert_eq!(err.to_errno(), libc::EIO);
        let err = source.read_whole(&dir.path().join("a.jpg")).expect_err("its read stats it first");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        // Two threads are stuck in the hung stats; the pool has two: the next call waits for
        // one of them to be let go.
        faulty.release_hangs();
        assert_eq!(source.bounded_metadata(&dir.path().join("b.jpg")).expect("b").len(), 4);
        assert_eq!(source.read_whole(&dir.path().join("b.jpg")).expect("b").0, b"bbbb");
        source.shutdown(Duration::from_secs(2));
    }

    #[test]
    fn a_file_that_grows_past_the_limit_while_read_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.jpg"), vec![7u8; 1000]).expect("write");
        let faulty = Arc::new(FaultySource::new(LocalSource::new(dir.path()).expect("root")));
        faulty.inject(&dir.path().join("a.jpg"), Fault::Grow(5 << 20));
        let source = source_over(dir.path(), faulty, 2 << 20);
        let err = source.read_whole(&dir.path().join("a.jpg")).expect_err("grew");
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge, "{err}");
    }

    #[test]
    fn a_slow_storage_read_counts_as_time_blocked_and_a_fast_one_as_cpu() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = vec![7u8; 4 << 20];
        std::fs::write(dir.path().join("a.jpg"), &bytes).expect("write");
        let faulty = Arc::new(FaultySource::new(LocalSource::new(dir.path()).expect("root")));
        let source = source_over(dir.path(), faulty.clone(), 64 << 20);
        let path = dir.path().join("a.jpg");
        // From the page cache: a copy, CPU; nothing like the slow read's 80 ms blocked.
        source.read_sized(&path, bytes.len() as u64).expect("warm");
        let (_, _, fast) = source.read_sized(&path, bytes.len() as u64).expect("fast");
        assert!(fast.cpu_nanos > 0, "{fast:?}");
        assert!(fast.blocked_nanos < 40_000_000, "{fast:?}");
        // The storage answering late (a sleep: off a core, not waiting for one).
        faulty.inject(&path, Fault::Delay(Duration::from_millis(80)));
        let (read, _, slow) = source.read_sized(&path, bytes.len() as u64).expect("slow");
        assert_eq!(&read[..], &bytes[..]);
        assert!(slow.blocked_nanos >= 75_000_000, "{slow:?}");
        assert!(slow.cpu_nanos < 40_000_000, "{slow:?}");
    }

    #[test]
    fn injected_errors_and_delays_reach_the_caller() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.jpg"), b"a").expect("write");
        let faulty = Arc::new(FaultySource::new(LocalSource::new(dir.path()).expect("root")));
        let source = source_over(dir.path(), faulty.clone(), 1 << 20);
        faulty.inject(&dir.path().join("a.jpg"), Fault::Error(io::ErrorKind::PermissionDenied));
        assert_eq!(source.read_whole(&dir.path().join("a.jpg")).expect_err("err").kind(), io::ErrorKind::PermissionDenied);
        faulty.inject(&dir.path().join("a.jpg"), Fault::Delay(Duration::from_millis(50)));
        let started = std::time::Instant::now();
        assert_eq!(source.read_whole(&dir.path().join("a.jpg")).expect("slow").0, b"a");
        assert!(started.elapsed() >= Duration::from_millis(50));
        faulty.clear();
        assert_eq!(source.read_whole(&dir.path().join("a.jpg")).expect("ok").0, b"a");
    }
}
