//! The epoch ledger ([`EpochLedger`]): the jobs' place in their epochs, kept in a file that
//! outlives the serving process, so a server restarted on the same FUSE connection (after a
//! SIGKILL or a panic) goes on where the last one stopped. In production the file is a memfd the
//! supervisor holds and hands to every server it starts; in tests a tempfile or a memfd.
//!
//! It owns the file's layout and every write to it; `replay.rs` reads it back into a registry.
//!
//! # Layout
//!
//! - **Header page** (4 KiB at offset 0): magic, format version, the mount's seed, the number of
//!   file ids and of samples the ledger was made for, its layout (slots, views, region size) and a
//!   checksum of all of it. A ledger made for another catalog, of another version or whose
//!   header does not check is refused ([`LedgerError`]) and left as it is; an all-zero header
//!   (a new memfd) is initialised.
//! - **One region per (slot, view)**, at `PAGE + (slot * VIEWS + view) * region_size`: view 0 is
//!   the job's own sampling state, view `r` its state in recipe `r`'s view. A region is a header
//!   page (a valid mark, the job's name, owner, slot generation and shared flag under a checksum,
//!   then the epoch number under a checksum of its own) followed by **one byte per file id**: the
//!   tag of the epoch the sample was served in (`epoch % 255 + 1`; 0: never). The file is sparse:
//!   only the pages a job has touched take memory.
//!
//! # Writes
//!
//! Every write is a `pwrite` at a computed offset ([`std::os::unix::fs::FileExt::write_at`]).
//! - A sample served: one byte, its epoch's tag. Idempotent, no read-modify-write, and made
//!   after the job's lock is released (no lock is held across it).
//! - An epoch's end: its region header's epoch number (16 bytes, number and checksum), nothing
//!   cleared: the bytes of the epoch just ended no longer equal the current tag. Written under the
//!   job's lock (once per epoch), so two ends never land out of order. Every 255 epochs the tag
//!   wraps: the tag bytes are cleared first (a hole punched), the header saying so meanwhile
//!   (a replay that finds it so finishes the clearing), after the marks still in flight in that
//!   view have landed.
//! - A job made: its region header, under the registry's lock. A job retired (rmdir, reset, idle):
//!   its regions' holes punched, after its marks in flight have landed; its marks from then on
//!   are not written (a retired job's handle may still be read).
//!
//! # What a crash costs
//!
//! A process that dies between a sample's mark in memory and its byte's `pwrite` has served the
//! sample without the ledger knowing: after the restart it may be served once more in that
//! epoch, at most one sample per thread that was marking. An epoch's end is written under the
//! job's lock, before any mark of the next epoch begins: a death between the last mark of an
//! epoch and the header's new epoch number is seen at replay (the tags cover every sample) and
//! the epoch is ended then; a death between an epoch ended early (a directory found exhausted,
//! a loader's walk given up) and its header leaves the job in the epoch that ended, with what
//! it was served there, which the next such open ends again. Shared jobs (`jobs.shared`) keep their epochs in the store:
//! only their identity is kept here (their recipes' views, which are this mount's alone, fully).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use prepfs_base::hash::fnv1a64;
use prepfs_base::sync::Arc;
use prepfs_source::catalog::FileId;

use super::MAX_JOBS;

/// The ledger's page: its header's size, a region header's, and the alignment of regions.
const PAGE: u64 = 4096;
const MAGIC: [u8; 8] = *b"PREPFSEL";
/// The layout's version: a ledger of another is refused.
const VERSION: u32 = 1;
/// Slots a ledger has room for: every slot a mount may have.
const SLOTS: u64 = MAX_JOBS as u64;
/// Views per slot: the job's own (0) and each recipe's (1 to 255).
const VIEWS: u64 = 256;
/// Tags an epoch's marks take in turn: `epoch % TAGS + 1`.
const TAGS: u64 = 255;
/// A valid region header begins with this.
const REGION_MAGIC: u32 = u32::from_le_bytes(*b"PJOB");
/// Longest name a region keeps (names are checked to be far shorter).
const NAME_MAX: usize = 255;
/// Where a region header's identity checksum is; the epoch word and its checksum follow.
const IDENT_CHECK_AT: usize = 288;
const EPOCH_AT: usize = IDENT_CHECK_AT + 8;
const REGION_HEADER_LEN: usize = EPOCH_AT + 16;
/// The epoch word's bit saying the tag bytes are being cleared (a wrap in progress).
const CLEARING: u64 = 1 << 63;
/// Region flag: the job's epochs are a shared store's (only its identity is kept here).
const SHARED: u32 = 1;
/// Bytes of tags read at once at replay.
const READ_CHUNK: usize = 1 << 20;

/// Why a ledger file is not used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("epoch ledger: {0}")]
    Io(#[from] io::Error),
    #[error("epoch ledger: the file's header is not a ledger's (bad magic or checksum); it is left as it is and not used")]
    NotALedger,
    #[error("epoch ledger: format version {found}, this build reads {VERSION}; it is left as it is and not used")]
    Version { found: u32 },
    #[error("epoch ledger: made for {files} file ids and {samples} samples, this catalog has {our_files} and {our_samples}; it is left as it is and not used")]
    OtherCatalog { files: u64, samples: u64, our_files: u64, our_samples: u64 },
    #[error("epoch ledger: its layout ({slots} slots, {views} views, regions of {region_size} bytes) is not this build's; it is left as it is and not used")]
    Layout { slots: u32, views: u32, region_size: u64 },
    #[error("epoch ledger: attached after jobs were made; attach it before serving")]
    JobsExist,
    #[error("epoch ledger: one is attached already")]
    AlreadyAttached,
}

/// The tag of epoch `number` (from 0): 1 to 255.
pub(crate) fn tag(number: u64) -> u8 {
    (number % TAGS + 1) as u8
}

/// The ledger file: see the module documentation.
pub(crate) struct EpochLedger {
    file: File,
    files: u64,
    samples: u64,
    region_size: u64,
    /// Writes that failed (each logged, at most once a second).
    failures: AtomicU64,
}

/// What [`EpochLedger::open`] found.
pub(crate) struct Opened {
    pub ledger: EpochLedger,
    /// The file was empty (or all zeros) and was initialised.
    pub fresh: bool,
    /// The seed the ledger was made with.
    pub seed: u64,
}

/// A region's header as read back.
#[derive(Debug, Clone)]
pub(crate) struct RegionHeader {
    pub slot: usize,
    pub view: u8,
    pub name: String,
    pub owner: u32,
    pub generation: u32,
    pub shared: bool,
    ident_check: u64,
    /// The epoch number, from 0.
    pub epoch: u64,
    /// The tag bytes were being cleared (a wrap) when the header was last written.
    pub clearing: bool,
}

impl RegionHeader {
    /// Whether `other` is the same job (a recipe view's header against its job's).
    pub fn same_job(&self, other: &RegionHeader) -> bool {
        self.slot == other.slot && self.name == other.name && self.owner == other.owner && self.generation == other.generation
    }
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

fn epoch_check(ident_check: u64, word: u64) -> u64 {
    fnv1a64(&[&ident_check.to_le_bytes(), &word.to_le_bytes()])
}

/// The 16 bytes of an epoch word and its checksum.
fn epoch_bytes(ident_check: u64, number: u64, clearing: bool) -> [u8; 16] {
    let word = number & !CLEARING | if clearing { CLEARING } else { 0 };
    let mut out = [0u8; 16];
    put_u64(&mut out, 0, word);
    put_u64(&mut out, 8, epoch_check(ident_check, word));
    out
}

/// Bytes of one region for `files` file ids: a header page, then the tags, whole pages.
fn region_size(files: u64) -> u64 {
    PAGE + files.div_ceil(PAGE) * PAGE
}

/// Header page field offsets.
mod head {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const SEED: usize = 16;
    pub const FILES: usize = 24;
    pub const SAMPLES: usize = 32;
    pub const SLOTS: usize = 40;
    pub const VIEWS: usize = 44;
    pub const REGION_SIZE: usize = 48;
    pub const CHECK: usize = 56;
    pub const LEN: usize = 64;
}

impl EpochLedger {
    /// Opens the ledger in `file` for a catalog of `files` file ids and `samples` samples: an
    /// empty or all-zero file is initialised (with `seed`); one made for another catalog, of
    /// another version or with a header that does not check is refused and left untouched.
    pub fn open(file: File, files: usize, samples: u64, seed: u64) -> Result<Opened, LedgerError> {
        let files = files as u64;
        let mut page = vec![0u8; PAGE as usize];
        let len = file.metadata()?.len();
        let got = read_full(&file, &mut page, 0)?;
        let ours = region_size(files);
        if got == 0 || page.iter().all(|&b| b == 0) {
            let ledger = EpochLedger { file, files, samples, region_size: ours, failures: AtomicU64::new(0) };
            // Whatever lies past an all-zero header is no ledger's: cleared before use.
            if len > 0 {
                ledger.punch(0, len)?;
            }
            ledger.file.set_len(PAGE + SLOTS * VIEWS * ours)?;
            let mut head = [0u8; head::LEN];
            head[head::MAGIC..head::MAGIC + 8].copy_from_slice(&MAGIC);
            put_u32(&mut head, head::VERSION, VERSION);
            put_u64(&mut head, head::SEED, seed);
            put_u64(&mut head, head::FILES, files);
            put_u64(&mut head, head::SAMPLES, samples);
            put_u32(&mut head, head::SLOTS, SLOTS as u32);
            put_u32(&mut head, head::VIEWS, VIEWS as u32);
            put_u64(&mut head, head::REGION_SIZE, ours);
            let check = fnv1a64(&[&head[..head::CHECK]]);
            put_u64(&mut head, head::CHECK, check);
            ledger.file.write_all_at(&head, 0)?;
            return Ok(Opened { ledger, fresh: true, seed });
        }
        if got < head::LEN || page[head::MAGIC..head::MAGIC + 8] != MAGIC || get_u64(&page, head::CHECK) != fnv1a64(&[&page[..head::CHECK]]) {
            return Err(LedgerError::NotALedger);
        }
        let version = get_u32(&page, head::VERSION);
        if version != VERSION {
            return Err(LedgerError::Version { found: version });
        }
        let (their_files, their_samples) = (get_u64(&page, head::FILES), get_u64(&page, head::SAMPLES));
        if their_files != files || their_samples != samples {
            return Err(LedgerError::OtherCatalog { files: their_files, samples: their_samples, our_files: files, our_samples: samples });
        }
        let (slots, views, size) = (get_u32(&page, head::SLOTS), get_u32(&page, head::VIEWS), get_u64(&page, head::REGION_SIZE));
        if u64::from(slots) != SLOTS || u64::from(views) != VIEWS || size != ours {
            return Err(LedgerError::Layout { slots, views, region_size: size });
        }
        let ledger = EpochLedger { file, files, samples, region_size: ours, failures: AtomicU64::new(0) };
        Ok(Opened { ledger, fresh: false, seed: get_u64(&page, head::SEED) })
    }

    /// Samples of the catalog the ledger is for.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Bytes of the file that hold data (the pages written: `st_blocks * 512`).
    pub fn bytes_in_use(&self) -> u64 {
        self.file.metadata().map(|m| m.blocks() * 512).unwrap_or(0)
    }

    /// Writes that failed since the ledger was opened.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn region(&self, slot: usize, view: u8) -> u64 {
        PAGE + (slot as u64 * VIEWS + u64::from(view)) * self.region_size
    }

    /// Notes a failed write: counted, logged (at most once a second), never fatal: serving goes
    /// on, the ledger knows less.
    fn failed(&self, what: &str, e: &io::Error) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        prepfs_base::warn_limited!("epoch-ledger", "epoch ledger: cannot write {what} ({e}); a restart may serve some samples again");
    }

    /// Zeroes `len` bytes at `at`: a hole punched (the pages freed), or zeros written where the
    /// file cannot have holes.
    fn punch(&self, at: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: fallocate on a file descriptor this value owns; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                at as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) {
            return Err(e);
        }
        let zeros = vec![0u8; (1 << 16).min(len) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], at + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Writes a fresh region header for (slot, view) at epoch 0, its old contents cleared first;
    /// returns the identity's checksum (what its epoch words are checked with).
    fn write_region(&self, slot: usize, view: u8, name: &str, owner: u32, generation: u32, shared: bool) -> io::Result<u64> {
        let at = self.region(slot, view);
        self.punch(at, self.region_size)?;
        let mut head = [0u8; REGION_HEADER_LEN];
        put_u32(&mut head, 0, REGION_MAGIC);
        put_u32(&mut head, 4, slot as u32);
        put_u32(&mut head, 8, u32::from(view));
        put_u32(&mut head, 12, owner);
        put_u32(&mut head, 16, generation);
        put_u32(&mut head, 20, if shared { SHARED } else { 0 });
        let name = &name.as_bytes()[..name.len().min(NAME_MAX)];
        put_u32(&mut head, 24, name.len() as u32);
        head[28..28 + name.len()].copy_from_slice(name);
        let ident_check = fnv1a64(&[&head[..IDENT_CHECK_AT]]);
        put_u64(&mut head, IDENT_CHECK_AT, ident_check);
        head[EPOCH_AT..].copy_from_slice(&epoch_bytes(ident_check, 0, false));
        self.file.write_all_at(&head, at)?;
        Ok(ident_check)
    }

    /// The header of region (slot, view), if it is valid: marked so, its identity and epoch
    /// checked, its slot and view its place's.
    pub fn read_region(&self, slot: usize, view: u8) -> io::Result<Option<RegionHeader>> {
        let mut head = [0u8; REGION_HEADER_LEN];
        if read_full(&self.file, &mut head, self.region(slot, view))? < REGION_HEADER_LEN {
            return Ok(None);
        }
        let ident_check = get_u64(&head, IDENT_CHECK_AT);
        let word = get_u64(&head, EPOCH_AT);
        let name_len = get_u32(&head, 24) as usize;
        let valid = get_u32(&head, 0) == REGION_MAGIC
            && ident_check == fnv1a64(&[&head[..IDENT_CHECK_AT]])
            && get_u64(&head, EPOCH_AT + 8) == epoch_check(ident_check, word)
            && get_u32(&head, 4) as usize == slot
            && get_u32(&head, 8) == u32::from(view)
            && name_len <= NAME_MAX;
        if !valid {
            return Ok(None);
        }
        let Ok(name) = std::str::from_utf8(&head[28..28 + name_len]) else { return Ok(None) };
        Ok(Some(RegionHeader {
            slot,
            view,
            name: name.to_owned(),
            owner: get_u32(&head, 12),
            generation: get_u32(&head, 16),
            shared: get_u32(&head, 20) & SHARED != 0,
            ident_check,
            epoch: word & !CLEARING,
            clearing: word & CLEARING != 0,
        }))
    }

    /// Whether region (slot, view) holds anything at all (a valid header or not).
    pub fn region_touched(&self, slot: usize, view: u8) -> io::Result<bool> {
        let mut head = [0u8; REGION_HEADER_LEN];
        read_full(&self.file, &mut head, self.region(slot, view))?;
        Ok(head.iter().any(|&b| b != 0))
    }

    /// Clears region (slot, view): its header and tags (holes punched).
    pub fn clear_region(&self, slot: usize, view: u8) -> io::Result<()> {
        self.punch(self.region(slot, view), self.region_size)
    }

    /// Clears the tag bytes of region (slot, view), keeping its header.
    fn clear_tags(&self, slot: usize, view: u8) -> io::Result<()> {
        self.punch(self.region(slot, view) + PAGE, self.region_size - PAGE)
    }

    /// Calls `each` with every file id whose tag in region (slot, view) is `tag`.
    pub fn tagged(&self, slot: usize, view: u8, tag: u8, mut each: impl FnMut(FileId)) -> io::Result<()> {
        let base = self.region(slot, view) + PAGE;
        let mut buf = vec![0u8; READ_CHUNK.min(self.files as usize)];
        let mut done = 0u64;
        while done < self.files {
            let n = (self.files - done).min(buf.len() as u64) as usize;
            let got = read_full(&self.file, &mut buf[..n], base + done)?;
            for (i, _) in buf[..got].iter().enumerate().filter(|(_, &b)| b == tag) {
                each((done + i as u64) as FileId);
            }
            done += n as u64;
        }
        Ok(())
    }
}

/// Reads into `buf` at `at` until it is full or the file ends; returns the bytes read.
fn read_full(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// One job view's handle on the ledger (a [`crate::Job`]'s, its top level or a recipe's): where
/// its region is, and the marks it has in flight.
pub(crate) struct LedgerView {
    ledger: Arc<EpochLedger>,
    slot: usize,
    view: u8,
    /// The slot's generation when the job was made (its recipes' views are written with it).
    generation: u32,
    /// The region header identity's checksum: what the epoch words are checked with.
    ident_check: u64,
    /// Marks begun and not yet written: an epoch's wrap and the job's retirement wait for them.
    in_flight: AtomicUsize,
    /// The job was retired: nothing more is written. One flag for all the job's views.
    retired: Arc<AtomicBool>,
}

/// A write in flight in a view (see [`LedgerView::begin`]).
pub(crate) struct InFlight<'a>(&'a LedgerView);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LedgerView {
    /// The view (slot, view) of a job just made: its region written afresh, at epoch 0.
    pub fn create(ledger: &Arc<EpochLedger>, slot: usize, view: u8, name: &str, owner: u32, generation: u32, shared: bool) -> LedgerView {
        let retired = Arc::new(AtomicBool::new(false));
        LedgerView::made(ledger, slot, view, name, owner, generation, shared, retired)
    }

    #[allow(clippy::too_many_arguments)]
    fn made(ledger: &Arc<EpochLedger>, slot: usize, view: u8, name: &str, owner: u32, generation: u32, shared: bool, retired: Arc<AtomicBool>) -> LedgerView {
        let ident_check = match ledger.write_region(slot, view, name, owner, generation, shared) {
            Ok(check) => check,
            Err(e) => {
                ledger.failed("a job's region", &e);
                0
            }
        };
        LedgerView { ledger: Arc::clone(ledger), slot, view, generation, ident_check, in_flight: AtomicUsize::new(0), retired }
    }

    /// The view of a job restored from `header` (nothing written). `retired`: the flag the job's
    /// views share (a fresh one for its top level, its top level's for a recipe's).
    pub fn restored(ledger: &Arc<EpochLedger>, header: &RegionHeader, retired: Option<&Arc<AtomicBool>>) -> LedgerView {
        LedgerView {
            ledger: Arc::clone(ledger),
            slot: header.slot,
            view: header.view,
            generation: header.generation,
            ident_check: header.ident_check,
            in_flight: AtomicUsize::new(0),
            retired: retired.map(Arc::clone).unwrap_or_default(),
        }
    }

    /// The view of the same job in recipe `recipe`'s view, its region written afresh (nothing,
    /// if the job was retired meanwhile).
    pub fn for_recipe(&self, recipe: u8, name: &str, owner: u32) -> LedgerView {
        let retired = Arc::clone(&self.retired);
        let Some(_writing) = self.begin() else {
            let (ledger, slot, generation) = (Arc::clone(&self.ledger), self.slot, self.generation);
            return LedgerView { ledger, slot, view: recipe, generation, ident_check: 0, in_flight: AtomicUsize::new(0), retired };
        };
        LedgerView::made(&self.ledger, self.slot, recipe, name, owner, self.generation, false, retired)
    }

    /// The flag the job's views share.
    pub fn retired_flag(&self) -> &Arc<AtomicBool> {
        &self.retired
    }

    /// A write begins (`None`: the job was retired, write nothing). Counted before the flag is
    /// looked at, as retirement sets the flag before it waits for the count: one of the two sees
    /// the other.
    pub fn begin(&self) -> Option<InFlight<'_>> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(self);
        (!self.retired.load(Ordering::SeqCst)).then_some(guard)
    }

    /// Waits for the writes begun in this view to land (they hold no lock: a pwrite each).
    fn settle(&self) {
        let mut spins = 0u32;
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Writes that `sample` was served in epoch `number` (from 0), under a write begun with
    /// [`LedgerView::begin`].
    pub fn mark(&self, _writing: &InFlight<'_>, sample: FileId, number: u64) {
        if u64::from(sample) >= self.ledger.files {
            return;
        }
        let at = self.ledger.region(self.slot, self.view) + PAGE + u64::from(sample);
        if let Err(e) = self.ledger.file.write_all_at(&[tag(number)], at) {
            self.ledger.failed("a sample's mark", &e);
        }
    }

    /// Writes that the view is in epoch `number` (from 0). Called under the job's lock, so no
    /// mark of this view begins meanwhile. When the tag wraps, the marks in flight land first,
    /// then the tags are cleared, the header saying so until they are.
    pub fn rolled(&self, number: u64) {
        let wraps = tag(number) == 1;
        if wraps {
            self.settle();
        }
        let Some(_writing) = self.begin() else { return };
        let at = self.ledger.region(self.slot, self.view) + EPOCH_AT as u64;
        let result = if wraps {
            self.ledger
                .file
                .write_all_at(&epoch_bytes(self.ident_check, number, true), at)
                .and_then(|()| self.ledger.clear_tags(self.slot, self.view))
                .and_then(|()| self.ledger.file.write_all_at(&epoch_bytes(self.ident_check, number, false), at))
        } else {
            self.ledger.file.write_all_at(&epoch_bytes(self.ident_check, number, false), at)
        };
        if let Err(e) = result {
            self.ledger.failed("an epoch's end", &e);
        }
    }

    /// The job is retired: nothing more is written in any of its views, and this view's region
    /// is cleared once its writes in flight have landed.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.settle();
        if let Err(e) = self.ledger.clear_region(self.slot, self.view) {
            self.ledger.failed("a retired job's region", &e);
        }
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<EpochLedger> {
        &self.ledger
    }
}
