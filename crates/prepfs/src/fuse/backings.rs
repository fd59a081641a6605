//! Kernel backing ids, the adapter's half of passthrough: one id per backing file the core
//! offers ([`Backing`]), registered at the first open that uses it
//! (`FUSE_DEV_IOC_BACKING_OPEN`), held by every handle answered with it, and closed at the last
//! of their releases (`FUSE_DEV_IOC_BACKING_CLOSE`, as the id drops). None outlives the mount.
//!
//! Opens sharing a core handle share its backing file, so they must share one id: the kernel
//! takes one backing per inode, and two ids of one file are two backings to it. The ioctls run
//! outside the table's lock; an id made meanwhile by a concurrent open of the same file wins,
//! and the spare one is closed.
//!
//! Under a supervisor (issue 53) the ids outlive a server that dies: the kernel keeps each
//! registered file until its id is closed or the connection ends. So the table writes the
//! lowest id that may still be registered to a memory file the supervisor holds
//! ([`LowestLive`]), and the next server closes every id from there up to its first
//! ([`close_left_behind`]): a crash leaks none of the outputs it held open.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Weak};

use fuser::{BackingId, ReplyOpen};

use prepfs_core::fs::{Backing, Filesystem};
use prepfs_core::stats::bump;
use prepfs_base::sync::{LockExt, Mutex};

/// A registered backing id and what keeps its key meaningful.
pub(super) struct Held {
    pub(super) id: BackingId,
    /// Keeps the backing file (and so [`Backing::key`]) alive while the id is.
    backing: Backing,
    fs: Arc<Filesystem>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // `id` closes itself as it drops, right after this.
        bump(&self.fs.stats().passthrough.backing_ids_closed, 1);
    }
}

#[derive(Default)]
struct Table {
    /// Ids by backing file, while some handle holds them.
    by_key: HashMap<usize, Weak<Held>>,
    /// The id each open handle holds, until its release.
    by_fh: HashMap<u64, Arc<Held>>,
}

/// The backing ids the open handles hold.
pub(super) struct Backings {
    table: Mutex<Table>,
    fs: Arc<Filesystem>,
    lowest: Option<LowestLive>,
}

/// Where the lowest backing id that may be registered is kept for the next server: the first
/// 4 bytes of a memory file the supervisor holds (0: none was ever registered).
pub(crate) struct LowestLive {
    file: std::fs::File,
    written: std::sync::atomic::AtomicU32,
}

impl LowestLive {
    pub(crate) fn new(file: std::fs::File) -> LowestLive {
        LowestLive { file, written: std::sync::atomic::AtomicU32::new(0) }
    }

    /// Records `id` as the lowest that may be registered, if it is not already.
    fn record(&self, id: u32) {
        use std::sync::atomic::Ordering;
        if self.written.swap(id, Ordering::Relaxed) != id {
            let _ = std::os::unix::fs::FileExt::write_at(&self.file, &id.to_le_bytes(), 0);
        }
    }

    /// The lowest id an earlier server recorded (0: none).
    pub(crate) fn read(file: &std::fs::File) -> u32 {
        let mut bytes = [0u8; 4];
        match std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, 0) {
            Ok(()) => u32::from_le_bytes(bytes),
            Err(_) => 0,
        }
    }
}

nix::ioctl_write_ptr!(fuse_dev_ioc_backing_close, 229, 2, u32);

/// The most ids [`close_left_behind`] tries: a server that held one file open for a very long
/// time leaves a long range.
const MOST_TO_CLOSE: u32 = 1 << 24;

/// Closes the backing ids an earlier server of this connection left registered: every id from
/// the lowest it recorded up to a fresh one (ids are given in increasing order). Called by a
/// server taking the connection over, before it serves. Returns how many were closed.
pub(crate) fn close_left_behind(fuse: &impl std::os::fd::AsFd, lowest: u32) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    if lowest == 0 {
        return Ok(0);
    }
    // A fresh id tells where the ids are now; it is closed with the rest.
    let probe = nix::sys::memfd::memfd_create(c"prepfs-backing-probe", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)?;
    let fresh = BackingId::create_raw(fuse, &probe)?;
    let end = fresh.min(lowest.saturating_add(MOST_TO_CLOSE));
    let mut closed = 0;
    for id in lowest..=end {
        // SAFETY: the ioctl reads one u32; an id that is not registered is refused (ENOENT).
        if unsafe { fuse_dev_ioc_backing_close(fuse.as_fd().as_raw_fd(), &id) }.is_ok() && id != fresh {
            closed += 1;
        }
    }
    Ok(closed)
}

impl Backings {
    pub(super) fn new(fs: Arc<Filesystem>, lowest: Option<LowestLive>) -> Self {
        Backings { table: Mutex::new(Table::default()), fs, lowest }
    }

    /// The lowest id still held (or, none held, the one after `last`), read under the table's
    /// lock, to record for the next server once the lock is let go.
    fn lowest_now(&self, t: &Table, last: u32) -> Option<u32> {
        self.lowest.as_ref()?;
        Some(t.by_fh.values().map(|h| h.id.raw()).min().unwrap_or(last.saturating_add(1)))
    }

    fn record_lowest(&self, lowest: Option<u32>) {
        if let (Some(file), Some(id)) = (&self.lowest, lowest) {
            file.record(id);
        }
    }

    /// The id handle `fh` is answered with: the one already registered for its backing file,
    /// or a new one. An error is the kernel's refusal of the backing file.
    pub(super) fn hold(&self, fh: u64, backing: Backing, reply: &ReplyOpen) -> io::Result<Arc<Held>> {
        let key = backing.key();
        let live = |t: &Table| t.by_key.get(&key).and_then(Weak::upgrade);
        {
            let mut t = self.table.lock_or_recover();
            if let Some(held) = live(&t) {
                t.by_fh.insert(fh, Arc::clone(&held));
                return Ok(held);
            }
        }
        let file = backing.file().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let id = reply.open_backing(file)?;
        bump(&self.fs.stats().passthrough.backing_ids_opened, 1);
        let new = Arc::new(Held { id, backing, fs: Arc::clone(&self.fs) });
        let mut t = self.table.lock_or_recover();
        let (held, spare) = match live(&t) {
            Some(held) => (held, Some(new)),
            None => {
                t.by_key.retain(|_, w| w.strong_count() > 0);
                t.by_key.insert(key, Arc::downgrade(&new));
                (new, None)
            }
        };
        t.by_fh.insert(fh, Arc::clone(&held));
        let lowest = self.lowest_now(&t, held.id.raw());
        drop(t);
        self.record_lowest(lowest);
        drop(spare); // closed outside the lock
        Ok(held)
    }

    /// Drops handle `fh`'s hold; its id is closed when no other handle holds it.
    pub(super) fn release(&self, fh: u64) {
        let (held, lowest) = {
            let mut t = self.table.lock_or_recover();
            let Some(held) = t.by_fh.remove(&fh) else { return };
            let mut lowest = None;
            if Arc::strong_count(&held) == 1 {
                t.by_key.remove(&held.backing.key());
                lowest = self.lowest_now(&t, held.id.raw());
            }
            (held, lowest)
        };
        self.record_lowest(lowest);
        drop(held); // the ioctl runs outside the lock
    }
}
