//! A produced output's bytes as they are kept and served ([`ServedBytes`]): in memory, or in a
//! file of their own ([`SealedFile`]) that the kernel reads directly when an open of it passes
//! through (`fs::passthrough`).
//!
//! With passthrough on, the pixel work writes each output straight into such a file, once, so
//! the cache holds it there and an open of it costs no copy: the file is handed to the kernel as
//! it is. Each such file is a descriptor, and descriptors are bounded (`RLIMIT_NOFILE`): outputs
//! are made into files ahead only while fewer than [`fd_budget`] are alive; past it they stay in
//! memory and are put in a file at open, as before.
//!
//! The files are made in a tmpfs instance of the process's own ([`OutputFs`]): mounted nowhere
//! (a detached mount of the new mount API, reachable only through its descriptor), with
//! `huge=within_size`, so a 150 KB output is a 128 KB folio and a few small ones rather than 37
//! pages, and freeing one costs a third of what it costs in pages (the closer's CPU per output
//! 25 → 10 µs; the warm pass of `make bench-floor` 0.74x → 0.99x of the plain floor,
//! docs/COLD_PATH.md). Each is an unnamed file (`O_TMPFILE`), written once and never again. Where such
//! a tmpfs cannot be made (no `CAP_SYS_ADMIN`, a kernel without `fsopen`), an anonymous memory file
//! (`memfd`) sealed against every change is made instead.
//!
//! A file no holder needs any more (its output served and released) is closed off the request
//! path: closing it frees its pages, which costs a release about what the rest of it costs (in a
//! warm pass over cached outputs, 13% of the FUSE threads' CPU when a release closed it). Up to
//! [`SPENT_MAX`] wait in a list for the mount's closer thread ([`run_closer`]), woken once
//! [`SPENT_WAKE`] wait; past the list's room (the closer starved of CPU), the last holder closes
//! it. Files are never reused: with passthrough a reader's `mmap` maps the file itself and its
//! `splice`/`sendfile` hands its pages on to pipes and sockets, both of which can outlive the
//! release, so a rewritten file could change bytes a reader still holds.

use std::fs::File;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// A produced output's bytes: see the module documentation.
#[derive(Clone)]
pub enum ServedBytes {
    /// In memory.
    Memory(Arc<[u8]>),
    /// In a file of their own, never changed, shared by every holder (cache entry, open handles).
    Sealed(Arc<SealedFile>),
}

impl ServedBytes {
    /// The number of bytes.
    pub fn len(&self) -> usize {
        match self {
            ServedBytes::Memory(b) => b.len(),
            ServedBytes::Sealed(f) => f.len as usize,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the last `dst.len()` bytes into `dst` (an output's pixels, past its header, into
    /// a loader's ring slot): one copy, read from the memory file where it is in one.
    pub(crate) fn copy_tail_into(&self, dst: &mut [u8]) -> std::io::Result<()> {
        let len = self.len();
        let at = len.checked_sub(dst.len()).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        match self {
            ServedBytes::Memory(b) => dst.copy_from_slice(&b[at..]),
            ServedBytes::Sealed(f) => std::os::unix::fs::FileExt::read_exact_at(&*f.file, dst, at as u64)?,
        }
        Ok(())
    }

    /// The bytes, read back where they are in a memory file (an output offered to other
    /// mounts; tests).
    pub(crate) fn to_vec(&self) -> std::io::Result<Vec<u8>> {
        match self {
            ServedBytes::Memory(b) => Ok(b.to_vec()),
            ServedBytes::Sealed(f) => {
                let mut buf = vec![0; f.len as usize];
                std::os::unix::fs::FileExt::read_exact_at(&*f.file, &mut buf, 0)?;
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

/// A file holding one output, written once and never changed, and its length: a file of the
/// process's tmpfs ([`OutputFs`]), else a memory file sealed so that nothing can change or resize
/// it. Alive files are counted against [`fd_budget`].
pub struct SealedFile {
    /// Taken out only by `drop`.
    file: ManuallyDrop<File>,
    len: u64,
}

impl SealedFile {
    /// A file holding `bytes`: in the process's tmpfs when it could be made, else a sealed
    /// memory file.
    pub fn new(bytes: &[u8]) -> std::io::Result<SealedFile> {
        let file = match OutputFs::get() {
            Some(fs) => fs.file_with(bytes)?,
            None => sealed_memfd(bytes)?,
        };
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(SealedFile { file: ManuallyDrop::new(file), len: bytes.len() as u64 })
    }

    /// The file, to hand to the kernel or to read.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An anonymous memory file holding `bytes`, sealed so that nothing can change or resize it.
fn sealed_memfd(bytes: &[u8]) -> std::io::Result<File> {
    // SAFETY: a valid C string and flags; the descriptor returned is ours alone.
    let fd = unsafe { libc::memfd_create(c"prepfs".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    let file = file_holding(fd, bytes)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// The tmpfs instance outputs are made in: see the module documentation. Made once, at the first
/// output; it lasts as long as the process (a detached mount ends with its last descriptor).
pub(crate) struct OutputFs {
    /// The root of the detached mount.
    root: OwnedFd,
}

/// The process's output tmpfs once the first output was made (`None` inside: it could not be).
static OUTPUT_FS: OnceLock<Option<OutputFs>> = OnceLock::new();

// The new mount API's numbers (linux/mount.h; ABI, not in every libc release).
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;
const MOUNT_ATTR_NOEXEC: libc::c_uint = 0x8;

impl OutputFs {
    /// The process's output tmpfs, made at the first call; `None` when it cannot be made (said
    /// in the log once, with why).
    pub(crate) fn get() -> Option<&'static OutputFs> {
        OUTPUT_FS.get_or_init(|| match OutputFs::mount() {
            Ok(fs) => Some(fs),
            Err(e) => {
                tracing::info!(error = %e, "outputs for passthrough go into sealed memory files: no tmpfs of our own");
                None
            }
        })
        .as_ref()
    }

    /// Where outputs are made, for `stats.json` (nothing is made to say it).
    pub(crate) fn kind() -> &'static str {
        match OUTPUT_FS.get() {
            Some(Some(_)) => "tmpfs (huge=within_size)",
            Some(None) => "memfd",
            None => "none made yet",
        }
    }

    /// A tmpfs mounted nowhere: `fsopen`, its options, `fsmount` (not `move_mount`).
    fn mount() -> std::io::Result<OutputFs> {
        let last = std::io::Error::last_os_error;
        // SAFETY: fsopen with a valid C string and flags; the descriptor is ours alone.
        let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
        if fs < 0 {
            return Err(last());
        }
        // SAFETY: `fs` was just opened and nothing else owns it.
        let fs = unsafe { OwnedFd::from_raw_fd(fs as i32) };
        // No size or inode limit (the cache's budgets bound what is kept), only its owner may look
        // in, and large folios within each file's size.
        let options: [(&std::ffi::CStr, &std::ffi::CStr); 4] =
            [(c"huge", c"within_size"), (c"size", c"0"), (c"nr_inodes", c"0"), (c"mode", c"0700")];
        for (key, value) in options {
            // SAFETY: fsconfig on our descriptor with valid C strings.
            if unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0) } < 0 {
                return Err(last());
            }
        }
        // SAFETY: fsconfig's create command takes no key or value.
        if unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), FSCONFIG_CMD_CREATE, std::ptr::null::<u8>(), std::ptr::null::<u8>(), 0) } < 0 {
            return Err(last());
        }
        let attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
        // SAFETY: fsmount on our configured context; the descriptor returned is ours alone.
        let root = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) };
        if root < 0 {
            return Err(last());
        }
        // SAFETY: `root` was just opened and nothing else owns it.
        let fs = OutputFs { root: unsafe { OwnedFd::from_raw_fd(root as i32) } };
        // One file made and dropped, so a tmpfs that takes no files (or no O_TMPFILE) is found
        // here, not at the first output.
        fs.file_with(b"")?;
        Ok(fs)
    }

    /// A new unnamed file holding `bytes`.
    fn file_with(&self, bytes: &[u8]) -> std::io::Result<File> {
        // SAFETY: openat on our root descriptor with a valid C string; the descriptor returned is
        // ours alone.
        let fd = unsafe { libc::openat(self.root.as_raw_fd(), c".".as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o600) };
        file_holding(fd, bytes)
    }
}

/// The file of `fd`, a descriptor just opened (negative: the call failed) that nothing else owns,
/// once `bytes` are written into it.
fn file_holding(fd: libc::c_int, bytes: &[u8]) -> std::io::Result<File> {
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(bytes)?;
    Ok(file)
}

impl Drop for SealedFile {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: `file` is taken once, here, and `self` is not used after.
        let file = unsafe { ManuallyDrop::take(&mut self.file) };
        let mut spent = SPENT.lock_or_recover();
        if spent.len() < spent_room() {
            spent.push(file);
            if spent.len() == SPENT_WAKE {
                SPENT_WAITING.notify_one();
            }
        }
        // Else `file` is closed here, after the lock: the list is full.
    }
}

/// How many spent memory files may wait to be closed (about 38 MB of 224x224 outputs), and at
/// most a quarter of [`fd_budget`].
pub const SPENT_MAX: usize = 256;

/// How many spent memory files may wait now: [`SPENT_MAX`], and at most a quarter of
/// [`fd_budget`].
fn spent_room() -> usize {
    SPENT_MAX.min(fd_budget() / 4)
}

/// How many spent memory files wake the closer (about 5 MB of 224x224 outputs): few enough that
/// they never wait long, enough that the closer does not run once per release.
pub const SPENT_WAKE: usize = 32;

/// How long the closer sleeps at most before it closes what waits, however few.
const CLOSER_NAP: Duration = Duration::from_millis(50);

/// Memory files no holder needs any more, waiting for [`close_spent`].
static SPENT: Mutex<Vec<File>> = Mutex::new(Vec::new());
/// Signalled when [`SPENT_WAKE`] files wait.
static SPENT_WAITING: Condvar = Condvar::new();

/// Closes the memory files that wait (their pages freed); returns how many.
pub fn close_spent() -> usize {
    let spent = std::mem::take(&mut *SPENT.lock_or_recover());
    spent.len()
    // closed here, as `spent` drops, outside the lock
}

/// The closer: until `stop` is set, closes the spent memory files whenever [`SPENT_WAKE`] wait,
/// and at least every [`CLOSER_NAP`] whatever waits; then once more. Run on a thread of its own
/// (`mount::Workers` owns it, below the priority of requests).
pub fn run_closer(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let spent = {
            let mut waiting = SPENT.lock_or_recover();
            if waiting.len() < SPENT_WAKE {
                // Woken early or not, what waits then is closed: a few files early costs nothing.
                waiting = SPENT_WAITING.wait_timeout_or_recover(waiting, CLOSER_NAP);
            }
            std::mem::take(&mut *waiting)
        };
        drop(spent); // closed outside the lock
    }
    close_spent();
}

/// A file holding `bytes` ([`SealedFile`]), or `None` when none can be made (said in the log, at
/// most once a minute): the bytes then stay in memory and their reads come to the daemon.
pub(crate) fn seal(bytes: &[u8]) -> Option<SealedFile> {
    match SealedFile::new(bytes) {
        Ok(file) => Some(file),
        Err(e) => {
            crate::warn_limited!("memfd", "cannot make a file for passthrough ({e}); the daemon serves this output's reads");
            None
        }
    }
}

/// Sealed memory files alive in this process.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Sealed memory files alive now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// How many sealed files outputs may be made into ahead of an open: half the descriptors the
/// process may open (`RLIMIT_NOFILE`'s soft limit, read once; the mount raises it to the hard
/// limit before serving), the other half left for source files, handles and sockets.
pub fn fd_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| nofile_limits().map_or(0, |(soft, _)| (soft / 2) as usize))
}

/// Whether an output made now may be sealed ahead (the budget has room).
pub fn may_seal_ahead() -> bool {
    live() < fd_budget()
}

/// Raises the soft limit on open descriptors to the hard limit, so the cache may hold outputs in
/// memory files. Returns the soft limit now.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let (soft, hard) = nofile_limits()?;
    if soft < hard {
        let raised = libc::rlimit { rlim_cur: hard, rlim_max: hard };
        // SAFETY: setrlimit with a valid, initialised struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        return Ok(hard);
    }
    Ok(soft)
}

fn nofile_limits() -> std::io::Result<(u64, u64)> {
    let mut now = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((now.rlim_cur, now.rlim_max))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, SeekFrom};

    use super::*;

    fn read_back(mut f: &File) -> Vec<u8> {
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        back
    }

    #[test]
    fn a_sealed_memory_file_holds_the_bytes_and_refuses_every_change() {
        let file = sealed_memfd(b"pixels").expect("memfd");
        assert_eq!(read_back(&file), b"pixels");
        let mut f = &file;
        assert!(f.write_all(b"x").is_err(), "a write to a sealed file is refused");
        assert!(f.set_len(1).is_err(), "shrinking is refused");
        assert!(f.set_len(100).is_err(), "growing is refused");
        assert_eq!(read_back(&file), b"pixels");
    }

    #[test]
    fn an_output_file_is_an_unnamed_file_of_a_tmpfs_of_our_own_that_is_mounted_nowhere() {
        use std::os::unix::fs::MetadataExt;
        let output = SealedFile::new(b"pixels").expect("an output file");
        assert_eq!(ServedBytes::Sealed(Arc::new(SealedFile::new(b"pixels").expect("file"))).to_vec().unwrap(), b"pixels");
        assert_eq!(read_back(output.file()), b"pixels");
        assert_eq!(output.len(), 6);
        if OutputFs::get().is_none() {
            // Making a tmpfs takes CAP_SYS_ADMIN (as passthrough does): sealed memory files then.
            eprintln!("SKIPPED: no tmpfs of our own here ({}); outputs go into sealed memory files", OutputFs::kind());
            return;
        }
        assert_eq!(OutputFs::kind(), "tmpfs (huge=within_size)");
        let meta = output.file().metadata().expect("fstat");
        assert_eq!(meta.nlink(), 0, "unnamed: no path leads to it");
        assert_eq!(meta.mode() & 0o7777, 0o600);
        // SAFETY: fstatfs into a struct we own, on a descriptor we hold.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstatfs(output.file().as_raw_fd(), &mut fs) }, 0);
        assert_eq!(fs.f_type, libc::TMPFS_MAGIC, "a tmpfs");
        let dev = format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev()));
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(
            !mountinfo.lines().any(|l| l.split_whitespace().nth(2) == Some(dev.as_str())),
            "the tmpfs ({dev}) is mounted nowhere: {mountinfo}"
        );
    }

    /// Whether some descriptor of this process is open on the file with inode `ino`.
    fn open_here(ino: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir("/proc/self/fd")
            .expect("/proc/self/fd")
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .any(|m| m.ino() == ino)
    }

    /// The tests that look at the spent list, one at a time: the closer of one would empty the
    /// list under the other.
    static SPENT_TESTS: Mutex<()> = Mutex::new(());

    #[test]
    fn a_spent_memory_file_is_closed_by_close_spent_not_by_its_last_holder() {
        use std::os::unix::fs::MetadataExt;
        let _one_at_a_time = SPENT_TESTS.lock_or_recover();
        let bytes = ServedBytes::Sealed(Arc::new(SealedFile::new(b"pixels").expect("memfd")));
        let ino = match &bytes {
            ServedBytes::Sealed(f) => f.file().metadata().expect("fstat").ino(),
            ServedBytes::Memory(_) => unreachable!(),
        };
        let handle = bytes.clone();
        drop(bytes);
        assert!(open_here(ino), "a holder is left");
        drop(handle);
        if spent_room() == 0 {
            return; // no room to keep any: closed by its last holder
        }
        let (waiting, full) = {
            let spent = SPENT.lock_or_recover();
            let waiting = spent.iter().any(|f| f.metadata().ok().map(|m| m.ino()) == Some(ino));
            (waiting, spent.len() >= spent_room())
        };
        if !waiting {
            // Other tests' outputs filled the list first: then the last holder closes it.
            assert!(full && !open_here(ino), "neither waiting nor closed");
            return;
        }
        assert!(open_here(ino), "waits in the spent list, off the request path");
        assert!(close_spent() >= 1);
        assert!(!open_here(ino), "closed, its pages freed");
    }

    #[test]
    fn the_closer_closes_the_spent_memory_files_off_their_holders_threads_and_stops_when_told() {
        use std::os::unix::fs::MetadataExt;
        let _one_at_a_time = SPENT_TESTS.lock_or_recover();
        assert!(spent_room() >= SPENT_WAKE, "the list has room for a wake-up's worth");
        let stop = Arc::new(AtomicBool::new(false));
        let closer = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || run_closer(&stop))
        };
        let files: Vec<_> = (0..SPENT_WAKE).map(|_| SealedFile::new(b"pixels").expect("memfd")).collect();
        let inos: Vec<u64> = files.iter().map(|f| f.file().metadata().expect("fstat").ino()).collect();
        drop(files);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while inos.iter().any(|&ino| open_here(ino)) {
            assert!(std::time::Instant::now() < deadline, "spent memory files were not closed by the closer");
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        closer.join().expect("the closer returns once stopped");
    }

    #[test]
    fn the_descriptor_budget_is_half_the_open_file_limit() {
        let (soft, _) = nofile_limits().expect("getrlimit");
        assert_eq!(fd_budget() as u64, soft / 2);
    }
}
