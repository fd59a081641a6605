//! The mount's output files: [`OutputFiles`] makes each [`OutputFile`] (in the mount's own
//! tmpfs, `tmpfs.rs`), counts those alive against the descriptor budget (`limits.rs`: outputs
//! are made into files ahead of an open only while fewer than the budget are alive; past it
//! they stay in memory and are put in a file at open), and takes those spent for its closer
//! (`closer.rs`). The mount makes one, the pixel work and the handles make files through it,
//! and its closer runs on the mount's closer thread.

use std::fs::File;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::closer::Spent;
use super::limits::fd_budget;
use super::tmpfs::{sealed_memfd, OutputFs};

/// See the module documentation.
pub struct OutputFiles {
    /// The tmpfs, made at the first file (`None` inside: it could not be).
    tmpfs: OnceLock<Option<OutputFs>>,
    /// Files alive.
    live: AtomicUsize,
    /// How many files may be made ahead of an open (`limits::fd_budget`, read at the start).
    budget: usize,
    spent: Spent,
}

impl std::fmt::Debug for OutputFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFiles").field("in", &self.kind()).field("live", &self.live()).finish()
    }
}

impl OutputFiles {
    /// None made yet; the descriptor budget read now (after the mount raised the limit).
    pub fn new() -> Arc<OutputFiles> {
        let budget = fd_budget();
        Arc::new(OutputFiles { tmpfs: OnceLock::new(), live: AtomicUsize::new(0), budget, spent: Spent::new(budget) })
    }

    /// A file holding `bytes`: in the tmpfs when it could be made, else a sealed memory file.
    pub fn make(self: &Arc<Self>, bytes: &[u8]) -> std::io::Result<OutputFile> {
        let file = match self.tmpfs() {
            Some(fs) => fs.file_with(bytes)?,
            None => sealed_memfd(bytes)?,
        };
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(OutputFile { file: ManuallyDrop::new(file), len: bytes.len() as u64, owner: Arc::clone(self) })
    }

    /// [`OutputFiles::make`], or `None` when no file can be made (said in the log, at most once
    /// a minute): the bytes then stay in memory and their reads come to the daemon.
    pub fn try_make(self: &Arc<Self>, bytes: &[u8]) -> Option<OutputFile> {
        match self.make(bytes) {
            Ok(file) => Some(file),
            Err(e) => {
                prepfs_base::warn_limited!("memfd", "cannot make a file for passthrough ({e}); the daemon serves this output's reads");
                None
            }
        }
    }

    /// The tmpfs, made at the first call; `None` when it cannot be made (said in the log once,
    /// with why).
    fn tmpfs(&self) -> Option<&OutputFs> {
        self.tmpfs
            .get_or_init(|| match OutputFs::mount() {
                Ok(fs) => Some(fs),
                Err(e) => {
                    tracing::info!(error = %e, "outputs for passthrough go into sealed memory files: no tmpfs of our own");
                    None
                }
            })
            .as_ref()
    }

    /// Where files are made, for `stats.json` (nothing is made to say it).
    pub fn kind(&self) -> &'static str {
        match self.tmpfs.get() {
            Some(Some(_)) => "tmpfs (huge=within_size)",
            Some(None) => "memfd",
            None => "none made yet",
        }
    }

    /// Files alive now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Whether an output made now may be made into a file ahead of an open (the budget has
    /// room).
    pub fn may_make_ahead(&self) -> bool {
        self.live() < self.budget
    }

    /// The closer: closes spent files until `stop` is set (`closer.rs`). The mount runs it on
    /// its closer thread.
    pub fn run_closer(&self, stop: &AtomicBool) {
        self.spent.run_closer(stop);
    }
}

/// A file holding one output, written once and never changed, and its length: a file of the
/// mount's tmpfs, else a memory file sealed so that nothing can change or resize it. Counted
/// alive by the [`OutputFiles`] that made it, and handed to its closer when dropped.
pub struct OutputFile {
    /// Taken out only by `drop`.
    file: ManuallyDrop<File>,
    len: u64,
    owner: Arc<OutputFiles>,
}

impl OutputFile {
    /// The file, to hand to the kernel or to read.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

}

impl Drop for OutputFile {
    fn drop(&mut self) {
        self.owner.live.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: `file` is taken once, here, and `self` is not used after.
        let file = unsafe { ManuallyDrop::take(&mut self.file) };
        self.owner.spent.put(file);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use super::super::closer::SPENT_WAKE;
    use super::super::tmpfs::tests::read_back;
    use super::super::ServedBytes;
    use super::*;

    #[test]
    fn an_output_file_is_an_unnamed_file_of_a_tmpfs_of_our_own_that_is_mounted_nowhere() {
        use std::os::unix::fs::MetadataExt;
        let files = OutputFiles::new();
        let output = files.make(b"pixels").expect("an output file");
        assert_eq!(ServedBytes::File(Arc::new(files.make(b"pixels").expect("file"))).to_vec().unwrap(), b"pixels");
        assert_eq!(read_back(output.file()), b"pixels");
        assert_eq!(output.len(), 6);
        if files.tmpfs().is_none() {
            // Making a tmpfs takes CAP_SYS_ADMIN (as passthrough does): sealed memory files then.
            eprintln!("SKIPPED: no tmpfs of our own here ({}); outputs go into sealed memory files", files.kind());
            return;
        }
        assert_eq!(files.kind(), "tmpfs (huge=within_size)");
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

    /// A file's identity: its device and inode (each mount's tmpfs numbers its own inodes).
    fn id_of(file: &File) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().expect("fstat");
        (meta.dev(), meta.ino())
    }

    /// Whether some descriptor of this process is open on the file `id` ([`id_of`]).
    fn open_here(id: (u64, u64)) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir("/proc/self/fd")
            .expect("/proc/self/fd")
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .any(|m| (m.dev(), m.ino()) == id)
    }

    #[test]
    fn a_spent_output_file_is_closed_by_the_closer_not_by_its_last_holder_and_files_are_counted_alive() {
        let files = OutputFiles::new();
        assert!(files.spent.room() > 0, "the descriptor limit leaves room for spent files");
        let bytes = ServedBytes::File(Arc::new(files.make(b"pixels").expect("file")));
        assert_eq!(files.live(), 1);
        let id = match &bytes {
            ServedBytes::File(f) => id_of(f.file()),
            ServedBytes::Memory(_) => unreachable!(),
        };
        let handle = bytes.clone();
        drop(bytes);
        assert!(open_here(id), "a holder is left");
        drop(handle);
        assert_eq!(files.live(), 0);
        // Each mount's files are its own: no other test's fill this list.
        assert!(files.spent.holds(id) && open_here(id), "waits in the spent list, off the request path");
        assert_eq!(files.spent.close_all(), 1);
        assert!(!open_here(id), "closed, its pages freed");
    }

    #[test]
    fn the_closer_closes_the_spent_output_files_off_their_holders_threads_and_stops_when_told() {
        let files = OutputFiles::new();
        assert!(files.spent.room() >= SPENT_WAKE, "the list has room for a wake-up's worth");
        let stop = Arc::new(AtomicBool::new(false));
        let closer = {
            let (stop, files) = (Arc::clone(&stop), Arc::clone(&files));
            std::thread::spawn(move || files.run_closer(&stop))
        };
        let made: Vec<_> = (0..SPENT_WAKE).map(|_| files.make(b"pixels").expect("file")).collect();
        let ids: Vec<(u64, u64)> = made.iter().map(|f| id_of(f.file())).collect();
        drop(made);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while ids.iter().any(|&id| open_here(id)) {
            assert!(std::time::Instant::now() < deadline, "spent output files were not closed by the closer");
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        closer.join().expect("the closer returns once stopped");
    }
}
