//! Kernel backing ids, the adapter's half of passthrough: one id per backing file the core
//! offers ([`Backing`]), registered at the first open that uses it
//! (`FUSE_DEV_IOC_BACKING_OPEN`), held by every handle answered with it, and closed at the last
//! of their releases (`FUSE_DEV_IOC_BACKING_CLOSE`, as the id drops). None outlives the mount.
//!
//! Opens sharing a core handle share its backing file, so they must share one id: the kernel
//! takes one backing per inode, and two ids of one file are two backings to it. The ioctls run
//! outside the table's lock; an id made meanwhile by a concurrent open of the same file wins,
//! and the spare one is closed.

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
}

impl Backings {
    pub(super) fn new(fs: Arc<Filesystem>) -> Self {
        Backings { table: Mutex::new(Table::default()), fs }
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
        drop(t);
        drop(spare); // closed outside the lock
        Ok(held)
    }

    /// Drops handle `fh`'s hold; its id is closed when no other handle holds it.
    pub(super) fn release(&self, fh: u64) {
        let held = {
            let mut t = self.table.lock_or_recover();
            let Some(held) = t.by_fh.remove(&fh) else { return };
            if Arc::strong_count(&held) == 1 {
                t.by_key.remove(&held.backing.key());
            }
            held
        };
        drop(held); // the ioctl runs outside the lock
    }
}
