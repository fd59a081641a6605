//! Output files no holder needs any more (their output served and released), closed off the
//! request path: closing one frees its pages, which costs a release about what the rest of it
//! costs (in a warm pass over cached outputs, 13% of the FUSE threads' CPU when a release
//! closed it). Up to [`SPENT_MAX`] wait in a list for the mount's closer thread
//! ([`Spent::run_closer`]), woken once [`SPENT_WAKE`] wait; past the list's room (the closer
//! starved of CPU), the last holder closes it. Files are never reused: with passthrough a
//! reader's `mmap` maps the file itself and its `splice`/`sendfile` hands its pages on to pipes
//! and sockets, both of which can outlive the release, so a rewritten file could change bytes a
//! reader still holds.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// How many spent files may wait to be closed (about 38 MB of 224x224 outputs), and at most a
/// quarter of the descriptor budget.
pub(super) const SPENT_MAX: usize = 256;

/// How many spent files wake the closer (about 5 MB of 224x224 outputs): few enough that they
/// never wait long, enough that the closer does not run once per release.
pub(super) const SPENT_WAKE: usize = 32;

/// How long the closer sleeps at most before it closes what waits, however few.
const CLOSER_NAP: Duration = Duration::from_millis(50);

/// The spent files waiting to be closed: see the module documentation.
pub(super) struct Spent {
    files: Mutex<Vec<File>>,
    /// Signalled when [`SPENT_WAKE`] files wait.
    waiting: Condvar,
    /// How many may wait: [`SPENT_MAX`], and at most a quarter of the descriptor budget.
    room: usize,
}

impl Spent {
    /// A list with room for [`SPENT_MAX`] files, at most a quarter of `fd_budget`.
    pub(super) fn new(fd_budget: usize) -> Spent {
        Spent { files: Mutex::new(Vec::new()), waiting: Condvar::new(), room: SPENT_MAX.min(fd_budget / 4) }
    }

    /// How many may wait.
    #[cfg(test)]
    pub(super) fn room(&self) -> usize {
        self.room
    }

    /// Takes `file`, no holder's any more, to be closed by the closer; closes it here, after
    /// the lock, when the list is full.
    pub(super) fn put(&self, file: File) {
        let mut files = self.files.lock_or_recover();
        if files.len() < self.room {
            files.push(file);
            if files.len() == SPENT_WAKE {
                self.waiting.notify_one();
            }
        }
    }

    /// Closes the files that wait (their pages freed); returns how many.
    pub(super) fn close_all(&self) -> usize {
        let spent = std::mem::take(&mut *self.files.lock_or_recover());
        spent.len()
        // closed here, as `spent` drops, outside the lock
    }

    /// Whether the file of device and inode `id` waits (tests).
    #[cfg(test)]
    pub(super) fn holds(&self, id: (u64, u64)) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.files.lock_or_recover().iter().any(|f| f.metadata().ok().map(|m| (m.dev(), m.ino())) == Some(id))
    }

    /// The closer: until `stop` is set, closes the spent files whenever [`SPENT_WAKE`] wait,
    /// and at least every [`CLOSER_NAP`] whatever waits; then once more. Run on a thread of its
    /// own (`tasks::Workers` owns it, below the priority of requests).
    pub(super) fn run_closer(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let spent = {
                let mut waiting = self.files.lock_or_recover();
                if waiting.len() < SPENT_WAKE {
                    // Woken early or not, what waits then is closed: a few files early costs nothing.
                    waiting = self.waiting.wait_timeout_or_recover(waiting, CLOSER_NAP);
                }
                std::mem::take(&mut *waiting)
            };
            drop(spent); // closed outside the lock
        }
        self.close_all();
    }
}
