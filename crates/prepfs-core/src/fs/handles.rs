//! Open file handles: what a handle serves ([`HandleData`]) and pins against the open budget, the
//! sharded table of them, and read and release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::open_budget::Lease;
use super::passthrough::Backing;
use super::tree::Listing;
use super::{Caller, Filesystem};
use crate::error::{Error, Result};
use prepfs_sampling::Job;
use prepfs_pixels::served::ServedBytes;
use prepfs_cache::form::Form;
use prepfs_source::catalog::FileId;
use prepfs_source::SourceFile;
use crate::stats::bump;
use prepfs_base::sync::{LockExt, Mutex};

/// How the kernel should cache an opened file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachePolicy {
    /// Immutable content: keep the page cache across opens (`FOPEN_KEEP_CACHE`).
    KeepCache,
    /// Content differs per open: bypass the page cache (`FOPEN_DIRECT_IO`).
    DirectIo,
    /// Immutable content whose source changed since the kernel may have cached it: drop the
    /// page cache at this open (neither flag), keep it again from the next open on.
    Refresh,
}

/// What `open` returns.
#[derive(Debug)]
pub struct Opened {
    pub fh: u64,
    pub cache: CachePolicy,
    /// What the kernel may read the file from instead of asking (passthrough), if anything.
    pub backing: Option<Backing>,
}

/// An open handle: what it serves, and the bytes it pins leased from the open budget.
pub(super) struct Handle {
    pub(super) data: HandleData,
    _lease: Option<Lease>,
    /// The opens of the kernel's that hold it: 1 from its making, one more for each open that
    /// shares it, one less at each release. Others may hold the handle a moment longer (a reply
    /// being sent, the backing id), so whether an open may share it is this count, not whether
    /// it is alive. Changed under the shares' lock only (`HandleTable::shared`, `share`, `unshare_released`).
    opens: AtomicUsize,
}

/// What an open handle serves.
pub(super) enum HandleData {
    /// A source file read through on demand (the top-level `encoded` view).
    Source { file: Arc<dyn SourceFile> },
    /// Bytes produced at open and pinned to the handle; in a job's view, the sample served.
    Bytes { content: Content, form: Form, served: Option<Served> },
    /// A directory listing snapshotted at `opendir`.
    Listing(Listing),
    /// The control files' text.
    Control(Arc<[u8]>),
}

/// Where a handle's produced bytes are: in memory, or in an output file the kernel reads
/// them from (passthrough), shared with the cache while it keeps them.
pub(super) type Content = ServedBytes;

impl Handle {
    /// Whether an open of the kernel's still holds it.
    pub(super) fn is_open(&self) -> bool {
        self.opens.load(Ordering::Acquire) > 0
    }

    /// One more open shares it.
    pub(super) fn join(&self) {
        self.opens.fetch_add(1, Ordering::AcqRel);
    }

    /// One open released it; whether that was the last.
    fn leave(&self) -> bool {
        self.opens.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

impl HandleData {
    /// Produced bytes, where they were made until [`Filesystem::pin`] decides where they live.
    pub(super) fn bytes(bytes: impl Into<ServedBytes>, form: Form, served: Option<Served>) -> HandleData {
        HandleData::Bytes { content: bytes.into(), form, served }
    }
}

/// The sample a job-view handle serves. It counts as served to the job at its first read;
/// dropped unread (the last handle sharing it released), it gives its claim back.
pub(super) struct Served {
    pub(super) job: Arc<Job>,
    pub(super) sample: FileId,
    pub(super) claimed: bool,
    pub(super) read: AtomicBool,
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.claimed && !self.read.load(Ordering::Relaxed) {
            self.job.unclaim(self.sample);
        }
    }
}

impl HandleData {
    /// Bytes of memory the handle pins while open.
    fn pinned_bytes(&self) -> u64 {
        match self {
            HandleData::Source { .. } => 0,
            HandleData::Bytes { content, .. } => content.len() as u64,
            HandleData::Control(bytes) => bytes.len() as u64,
            HandleData::Listing(listing) => listing.pinned_bytes(),
        }
    }
}

/// Open handles, sharded so that many FUSE threads rarely meet on one lock.
pub(super) struct HandleTable {
    next: AtomicU64,
    /// The first number this server gave: those below are an earlier server's (issue 53).
    first: AtomicU64,
    shards: Vec<Mutex<HashMap<u64, Arc<Handle>>>>,
    /// Open handles by inode that later opens of the inode share while one is open: in a job's
    /// view always (PIL opens a PPM twice to try mmap: both see the same sample), everywhere
    /// while passthrough is on (the kernel takes one backing file per inode).
    shares: Mutex<HashMap<u64, Weak<Handle>>>,
}

const HANDLE_SHARDS: usize = 16;

impl HandleTable {
    pub(super) fn new() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            first: AtomicU64::new(1),
            shards: (0..HANDLE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            shares: Mutex::new(HashMap::new()),
        }
    }
    fn shard(&self, fh: u64) -> &Mutex<HashMap<u64, Arc<Handle>>> {
        &self.shards[fh as usize % HANDLE_SHARDS]
    }
    /// Numbers the next handles from `first` on.
    pub(super) fn number_from(&self, first: u64) {
        self.next.fetch_max(first, Ordering::Relaxed);
        self.first.store(first, Ordering::Relaxed);
    }

    /// Whether `fh` was given by an earlier server of this mount.
    pub(super) fn is_earlier(&self, fh: u64) -> bool {
        fh < self.first.load(Ordering::Relaxed)
    }

    /// Moves the handle numbered `from` to number `to` (a handle remade for an earlier
    /// server's number).
    fn renumber(&self, from: u64, to: u64) -> Result<()> {
        let handle = self.remove(from).ok_or(Error::BadHandle)?;
        self.shard(to).lock_or_recover().insert(to, handle);
        Ok(())
    }

    pub(super) fn insert(&self, data: Arc<Handle>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh).lock_or_recover().insert(fh, data);
        fh
    }
    pub(super) fn get(&self, fh: u64) -> Result<Arc<Handle>> {
        let shard = self.shard(fh).lock_or_recover();
        shard.get(&fh).cloned().ok_or(Error::BadHandle)
    }
    pub(super) fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        self.shard(fh).lock_or_recover().remove(&fh)
    }

    /// The handle of another open of `ino` still open, if one shares its content; taken for
    /// this open (it joins the handle).
    pub(super) fn shared(&self, ino: u64) -> Option<Arc<Handle>> {
        let shares = self.shares.lock_or_recover();
        let live = shares.get(&ino).and_then(Weak::upgrade).filter(|h| h.is_open())?;
        live.join();
        Some(live)
    }

    /// Makes `handle` the one later opens of `ino` share while it is open; if another open of
    /// `ino` got there first, its handle is shared instead (and `handle` dropped).
    pub(super) fn share(&self, ino: u64, handle: Arc<Handle>) -> Arc<Handle> {
        let mut shares = self.shares.lock_or_recover();
        if let Some(live) = shares.get(&ino).and_then(Weak::upgrade).filter(|h| h.is_open()) {
            live.join();
            drop(shares);
            drop(handle); // gives its claim back, outside the lock
            return live;
        }
        shares.retain(|_, w| w.upgrade().is_some_and(|h| h.is_open()));
        shares.insert(ino, Arc::downgrade(&handle));
        handle
    }

    /// Inodes whose open handle later opens share now.
    #[cfg(test)]
    pub(super) fn share_count(&self) -> usize {
        self.shares.lock_or_recover().len()
    }

    /// Forgets `ino`'s share if `data`, being released, was its last file handle (under the
    /// lock, where opens look it up). Counted by file handles, not references: a reply being
    /// sent or a backing id may still hold the content a moment, and an open made after this
    /// release must get content of its own.
    pub(super) fn unshare_released(&self, ino: u64, data: &Arc<Handle>) {
        let mut shares = self.shares.lock_or_recover();
        if data.leave() && shares.get(&ino).is_some_and(|w| w.as_ptr() == Arc::as_ptr(data)) {
            shares.remove(&ino);
        }
    }
}

impl Filesystem {
    /// A handle for `data`, its bytes leased from the open budget (waiting a moment for
    /// releases when the budget is spent, then refused).
    pub(super) fn pin(&self, data: HandleData, caller: Caller) -> Result<Arc<Handle>> {
        let bytes = data.pinned_bytes();
        let lease = if bytes == 0 {
            None
        } else {
            match self.open_budget.lease(caller.uid, self.is_privileged(caller), bytes) {
                Some(lease) => Some(lease),
                None => {
                    bump(&self.stats().opens_refused, 1);
                    prepfs_base::warn_limited!("open-budget", uid = caller.uid, "open refused: open files pin max_open_bytes");
                    return Err(Error::TooManyOpen);
                }
            }
        };
        // With passthrough the kernel reads a memory file: bytes made in memory move there (an
        // output the pixel work made sealed is there already).
        let data = match data {
            HandleData::Bytes { content: Content::Memory(bytes), form, served } => {
                let content = match self.output_file_for(&bytes) {
                    Some(file) => Content::File(Arc::new(file)),
                    None => Content::Memory(bytes),
                };
                HandleData::Bytes { content, form, served }
            }
            other => other,
        };
        Ok(Arc::new(Handle { data, _lease: lease, opens: AtomicUsize::new(1) }))
    }

    /// The first read of a job-view handle (or its open, when the kernel reads it without us)
    /// counts its sample as served to the job.
    pub(super) fn count_served(&self, handle: &Handle) {
        if let HandleData::Bytes { served: Some(s), .. } = &handle.data {
            if !s.read.swap(true, Ordering::Relaxed) {
                s.job.mark_served(s.sample, s.claimed);
                s.job.touch(self.jobs.now_ms());
            }
        }
    }

    /// Reads up to `size` bytes at `offset` of an open file and hands them to `reply`. The first
    /// read of a job-view handle counts its sample as served to the job.
    pub fn read<R>(&self, fh: u64, offset: u64, size: u32, reply: impl FnOnce(Result<&[u8]>) -> R) -> R {
        let handle = match self.handles.get(fh) {
            Ok(h) => h,
            Err(e) => return reply(Err(e)),
        };
        match &handle.data {
            HandleData::Bytes { content, form, .. } => {
                self.count_served(&handle);
                match content {
                    Content::Memory(bytes) => {
                        let start = (offset as usize).min(bytes.len());
                        let end = start.saturating_add(size as usize).min(bytes.len());
                        bump(&self.counters(*form).read_bytes, (end - start) as u64);
                        reply(Ok(&bytes[start..end]))
                    }
                    // Read here only when the kernel refused the memory file as a backing file.
                    Content::File(file) => {
                        let want = file.len().saturating_sub(offset).min(u64::from(size)) as usize;
                        let mut buf = vec![0; want];
                        match std::os::unix::fs::FileExt::read_exact_at(file.file(), &mut buf, offset) {
                            Ok(()) => {
                                bump(&self.counters(*form).read_bytes, want as u64);
                                reply(Ok(&buf))
                            }
                            Err(e) => reply(Err(Error::MemoryFile(Arc::new(e)))),
                        }
                    }
                }
            }
            HandleData::Control(bytes) => {
                let start = (offset as usize).min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                reply(Ok(&bytes[start..end]))
            }
            HandleData::Source { file } => match self.reader.read_at(file, offset, size) {
                Ok(buf) => {
                    bump(&self.stats().encoded.read_bytes, buf.len() as u64);
                    reply(Ok(&buf))
                }
                Err(e) => reply(Err(e)),
            },
            HandleData::Listing(_) => reply(Err(Error::IsADirectory)),
        }
    }

    /// Remakes, under its own number, a handle an earlier server of this mount gave and died
    /// with (issue 53), where its content is the same at every open: a top-level `encoded/` or
    /// `decoded/` file, a directory's listing. The kernel then reads on as if nothing happened. Any other (an
    /// augmentation, a job's choice) cannot be remade and stays unknown (`EBADF`); with
    /// passthrough on (the default) the kernel reads those without us, so none is asked.
    pub fn remake_earlier_handle(&self, ino: u64, fh: u64, caller: Caller) -> Result<()> {
        if !self.handles.is_earlier(fh) || self.handles.get(fh).is_ok() {
            return Ok(());
        }
        use super::inodes::Node;
        let fresh = match Node::from_ino(ino) {
            Some(Node::File(view, _)) if view.job == 0 && view.form != Form::Augmented => self.open(ino, false, caller)?.fh,
            // A listing is made again: the same entries, in the same order (a job's is its
            // epoch's shuffle, the same for the same seed).
            Some(Node::Root | Node::ControlDir | Node::JobsDir | Node::JobRoot(_) | Node::Dir(..)) => self.opendir(ino, caller)?,
            _ => return Err(Error::BadHandle),
        };
        self.handles.renumber(fresh, fh)?;
        tracing::debug!(ino, fh, "remade a handle of the server before this one");
        Ok(())
    }

    /// Releases an open file (`ino`'s handle `fh`).
    pub fn release(&self, ino: u64, fh: u64) {
        let Some(data) = self.handles.remove(fh) else { return };
        // The last file handle open on this content: forget the share.
        self.handles.unshare_released(ino, &data);
        drop(data);
        // Counted released only now: an open that follows a release seen in `open_handles`
        // (a test's wait, a user's `prepfs stats`) gets content of its own, never this share.
        self.stats().open_handles.fetch_sub(1, Ordering::Relaxed);
    }
}
