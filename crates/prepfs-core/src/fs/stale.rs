//! Source files that changed under the mount: every open and getattr checks the file's source
//! version, and a changed file's inodes are queued ([`StaleInodes`]) for the mount's notifier
//! thread to tell the kernel, its next open dropping the page cache.

use std::time::Duration;

use super::{Filesystem, Node};
use prepfs_source::catalog::FileId;
use prepfs_base::bitset::Bitset;
use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// Inodes whose source changed: the kernel's cached pages and attributes of them are stale.
/// The mount's notifier thread tells the kernel (never a request thread: a notification may
/// wait on pages that a request in flight holds).
pub struct StaleInodes {
    queue: Mutex<Vec<u64>>,
    ready: Condvar,
    /// Files changed since the kernel last opened them: their next open drops the page cache.
    refresh: Bitset,
}

impl StaleInodes {
    /// Nothing stale yet, over a catalog of `files` files.
    pub(super) fn new(files: usize) -> StaleInodes {
        StaleInodes { queue: Mutex::new(Vec::new()), ready: Condvar::new(), refresh: Bitset::new(files) }
    }

    /// Whether `file` changed since the kernel last opened it (and it is opened now: the mark
    /// is taken).
    pub(super) fn take_refresh(&self, file: FileId) -> bool {
        self.refresh.clear(file)
    }

    fn push(&self, inodes: impl IntoIterator<Item = u64>) {
        self.queue.lock_or_recover().extend(inodes);
        self.ready.notify_one();
    }

    /// Wakes the notifier if it waits (at unmount: it sees the stop at once).
    pub(crate) fn wake(&self) {
        let _queue = self.queue.lock_or_recover();
        self.ready.notify_all();
    }

    /// The inodes queued so far, waiting up to `wait` for one.
    pub fn drain(&self, wait: Duration) -> Vec<u64> {
        let mut queue = self.queue.lock_or_recover();
        if queue.is_empty() && !wait.is_zero() {
            queue = self.ready.wait_timeout_or_recover(queue, wait);
        }
        std::mem::take(&mut *queue)
    }
}

impl Filesystem {
    pub(super) fn queue_stale(&self, file: FileId) {
        self.stale.refresh.set(file);
        let codes: Vec<u32> = std::iter::once(0).chain(self.jobs.active().iter().map(|j| j.code())).collect();
        let inos: Vec<u64> = codes.into_iter().flat_map(|job| self.views_in(job)).map(|(view, _)| Node::File(view, file).ino()).collect();
        self.stale.push(inos);
    }
}
