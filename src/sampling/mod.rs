//! Opportunistic sampling (ODS) for concurrent training jobs: the job registry, each job's
//! per-sample state, and the two decisions ODS makes — which sample an open in a job's view is
//! served, and in what order a job's directory is listed.
//!
//! It owns no pixels and does no I/O: the filesystem core asks it to choose, then produces the
//! chosen sample itself. What it keeps, per job, is what the paper sizes (Seneca, FAST '26 §6):
//! one *seen* bit per sample (served to this job in its current epoch) and an epoch counter, plus
//! one *claimed* bit per sample (chosen for an open handle that has not read it yet). The
//! dataset-wide status byte per sample (which forms hold it) is the cache's
//! ([`crate::cache::SampleStatus`]); a [`Rank`] function turns it into a preference here.
//!
//! # The rules
//!
//! - **Substitution at open** ([`Job::choose`]): the requested sample is served if it is unseen
//!   and cached in the best form the view can use. Otherwise the best-cached unseen sample of
//!   the same directory (so the same class label) is served in its place; failing that, the
//!   requested one if unseen (a miss); failing that, any unseen one of the directory. A sample
//!   is marked seen when its bytes are first read ([`Job::mark_served`]), not at open: PIL opens
//!   a PPM twice per sample. A chosen sample is *claimed* from open to its first read, so no two
//!   handles of a job are handed the same sample.
//! - **Epochs**: a job's epoch ends when it has been served every sample; or, for jobs that read
//!   only part of the data per pass, when it opens a file in a directory of which it has been
//!   served every sample (it has started its next pass). The seen bits are then cleared.
//! - **Listing order** ([`Job::listing_order`]): a fresh shuffle per (job, epoch, directory), with
//!   the samples that are cached and unseen by the job first. The order is remembered (for the
//!   most recent directories) so prefetch can run along it ([`Job::prefetch_candidates`]).
//!
//! A job lives in a slot (at most [`MAX_JOBS`] at once, so that an augmented output can record
//! which jobs used it in a 64-bit mask); its inode code adds a generation to the slot, so a
//! retired job's stale inodes never reach its successor. A name or a job refused is a
//! [`JobError`], whose errno is decided beside it.

use std::collections::HashMap;
// Statistics and the registry's counters are std's atomics (`stats::bump` takes them); the seen
// and claimed bits and the pass counters, which synchronise, are crate::sync's (shuttle's under
// `--features shuttle`; in `pass`), as are the locks.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{Arc, LockExt, Mutex, MutexGuard, RwLock, RwLockExt, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::Rng;

use crate::shared::draw_rng;
use crate::source::catalog::{DirId, FileId};

mod pass;
pub use pass::{Bitset, Pass};

/// Jobs that can be active at once (each is a bit of an augmented output's used-by mask).
pub const MAX_JOBS: usize = 64;
/// Longest job name, bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Substitution looks at most this many samples of a directory per open.
pub const SCAN_LIMIT: usize = 4096;
/// Listing orders remembered per job for prefetch.
const LISTINGS_KEPT: usize = 64;

/// A preference for a sample in some view: 0 not cached, higher is cheaper to serve.
pub type Rank = u8;

/// Why a job name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("job name `{0}`: use letters, digits, `.`, `_` and `-`, not starting with `.`")]
    BadName(String),
    #[error("job name longer than {MAX_NAME_LEN} bytes")]
    NameTooLong,
    #[error("{0} jobs are active, the most this mount allows (jobs.max); retire one (rmdir) or wait for one to go idle")]
    TooMany(usize),
    #[error("user {uid} holds {held} jobs, the most one user may (jobs.per_user); retire one (rmdir) or wait for one to go idle")]
    TooManyForUser { uid: u32, held: usize },
}

impl crate::error::ToErrno for JobError {
    fn to_errno(&self) -> libc::c_int {
        match self {
            JobError::BadName(_) => libc::EINVAL,
            JobError::NameTooLong => libc::ENAMETOOLONG,
            // "Too many users": the mount's limit on concurrent jobs.
            JobError::TooMany(_) => libc::EUSERS,
            // One user's share of the jobs: a quota.
            JobError::TooManyForUser { .. } => libc::EDQUOT,
        }
    }
}

/// Who asks for a job: the requesting user, and whether it is root or the mount's owner (who
/// are not held to `jobs.per_user` and always find a slot kept for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requester {
    pub uid: u32,
    pub privileged: bool,
}

impl Requester {
    /// Root or the mount's owner.
    pub const OWNER: Requester = Requester { uid: 0, privileged: true };
}

/// Checks a job name: 1 to [`MAX_NAME_LEN`] bytes of `[A-Za-z0-9._-]`, not starting with `.`
/// (so never `.` or `..`, and never a path).
pub fn check_name(name: &[u8]) -> Result<&str, JobError> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.len() > MAX_NAME_LEN {
        return Err(JobError::NameTooLong);
    }
    let ok = !name.is_empty()
        && name[0] != b'.'
        && name.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(JobError::BadName(shown()));
    }
    std::str::from_utf8(name).map_err(|_| JobError::BadName(shown()))
}

/// What [`Job::choose`] decided for one open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The sample to serve.
    pub sample: FileId,
    /// Whether it stands in for the requested one.
    pub substituted: bool,
    /// Whether the sample is claimed for this open (released by [`Job::unclaim`] if never read).
    pub claimed: bool,
}

/// A job's figures (live, relaxed).
#[derive(Debug, Default)]
pub struct JobCounters {
    pub opens: AtomicU64,
    pub served: AtomicU64,
    pub hits_augmented: AtomicU64,
    pub hits_decoded: AtomicU64,
    pub hits_encoded: AtomicU64,
    pub misses: AtomicU64,
    pub substitutions: AtomicU64,
    pub prefetched: AtomicU64,
}

/// One directory's listing as handed to the job, kept for prefetch.
struct Listing {
    order: Arc<[FileId]>,
    epoch: u64,
    /// Where prefetch has got to.
    cursor: usize,
    /// When it was made, to forget the oldest first.
    made: u64,
}

/// What the per-job lock guards: listing orders, and the sequencing of choices and epochs.
#[derive(Default)]
struct JobState {
    listings: HashMap<DirId, Listing>,
    listings_made: u64,
}

/// One training job: see the module documentation.
pub struct Job {
    name: String,
    /// The uid that made the job: its directory is theirs.
    owner: u32,
    slot: usize,
    code: u32,
    seed: u64,
    /// The name hashed: the job's part in its listings' shuffles.
    key: u64,
    /// This epoch: the samples served in it.
    epoch: Pass,
    claimed: Bitset,
    state: Mutex<JobState>,
    last_active_ms: AtomicU64,
    pub counters: JobCounters,
}

impl Job {
    fn new(name: &str, slot: usize, code: u32, files: usize, samples: u64, seed: u64, now_ms: u64) -> Job {
        Job {
            name: name.to_owned(),
            owner: 0,
            slot,
            code,
            seed,
            key: crate::shared::fnv1a64(&[name.as_bytes()]),
            epoch: Pass::new(files, samples),
            claimed: Bitset::new(files),
            state: Mutex::new(JobState::default()),
            last_active_ms: AtomicU64::new(now_ms),
            counters: JobCounters::default(),
        }
    }

    /// The job's name (its directory under `jobs/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The uid that made the job.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// The job's slot: its bit in an augmented output's used-by mask.
    pub fn bit(&self) -> u64 {
        1u64 << self.slot
    }

    /// The code its inodes carry.
    pub fn code(&self) -> u32 {
        self.code
    }

    /// The current epoch, counting from 1.
    pub fn epoch(&self) -> u64 {
        self.epoch.number() + 1
    }

    /// Samples served in the current epoch.
    pub fn served_this_epoch(&self) -> u64 {
        self.epoch.served()
    }

    /// Whether the job has been served `sample` in its current epoch.
    pub fn has_seen(&self, sample: FileId) -> bool {
        self.epoch.has_seen(sample)
    }

    /// Whether `sample` is neither served this epoch nor pinned to an open handle.
    fn free(&self, sample: FileId) -> bool {
        !self.epoch.has_seen(sample) && !self.claimed.get(sample)
    }

    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock_or_recover()
    }

    /// Notes activity at `now_ms` (for idle retirement).
    pub fn touch(&self, now_ms: u64) {
        self.last_active_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// Milliseconds of the mount's clock at the last activity.
    pub fn last_active_ms(&self) -> u64 {
        self.last_active_ms.load(Ordering::Relaxed)
    }

    /// Chooses what an open of `requested` (a sample of a directory whose samples are
    /// `dir_samples`) serves, and claims it. `rank` says how cheaply each sample can be served in
    /// this view (0: not cached), `top` is the best rank the view has, `start` spreads the scan.
    /// With `ods` off the requested sample is always served (the job's epochs are still kept).
    pub fn choose(
        &self,
        requested: FileId,
        dir_samples: &[FileId],
        rank: impl Fn(FileId) -> Rank,
        top: Rank,
        start: usize,
        ods: bool,
    ) -> Choice {
        let _state = self.lock();
        let mut rolled = false;
        loop {
            let pick = if ods {
                self.pick_substitute(requested, dir_samples, &rank, top, start)
            } else if self.free(requested) {
                Some(requested)
            } else if self.claimed.get(requested) {
                // Another handle holds it unread: share the sample, not a second claim.
                return Choice { sample: requested, substituted: false, claimed: false };
            } else {
                None
            };
            match pick {
                Some(sample) => {
                    self.claimed.set(sample);
                    let substituted = sample != requested;
                    return Choice { sample, substituted, claimed: true };
                }
                None if !rolled => {
                    // Nothing unseen left in this directory: the job has started its next pass.
                    self.epoch.next();
                    rolled = true;
                }
                // Everything left is pinned to open handles: serve the request as it is.
                None => return Choice { sample: requested, substituted: false, claimed: false },
            }
        }
    }

    /// The ODS pick: see the module documentation. `None` when nothing in the directory is free.
    fn pick_substitute(
        &self,
        requested: FileId,
        dir_samples: &[FileId],
        rank: &impl Fn(FileId) -> Rank,
        top: Rank,
        start: usize,
    ) -> Option<FileId> {
        let own = if self.free(requested) { Some(rank(requested)) } else { None };
        if own == Some(top) && top > 0 {
            return Some(requested);
        }
        // The best-cached free sample of the directory, scanning from a random start.
        let n = dir_samples.len();
        let (mut best, mut best_rank, mut any_free) = (None, 0u8, None);
        for k in 0..n.min(SCAN_LIMIT) {
            let c = dir_samples[(start + k) % n];
            if !self.free(c) {
                continue;
            }
            any_free.get_or_insert(c);
            let r = rank(c);
            if r > best_rank {
                (best, best_rank) = (Some(c), r);
                if r == top {
                    break;
                }
            }
        }
        match own {
            Some(r) if r >= best_rank => Some(requested),
            _ if best.is_some() => best,
            Some(_) => Some(requested),
            None => any_free,
        }
    }

    /// Marks `sample` served to this job (its bytes were first read). Returns whether it was new
    /// this epoch. The epoch ends when every sample has been served. `holds_claim`: the reading
    /// handle is the one that claimed the sample; only its read releases the claim (a handle
    /// sharing the sample unclaimed must not free it while the claimant is still open).
    pub fn mark_served(&self, sample: FileId, holds_claim: bool) -> bool {
        let _state = self.lock();
        if holds_claim {
            self.claimed.clear(sample);
        }
        let new = self.epoch.mark(sample);
        if new {
            self.counters.served.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    /// Releases a claim that was never read (the handle closed unread).
    pub fn unclaim(&self, sample: FileId) {
        self.claimed.clear(sample);
    }

    /// A fresh order for listing `dir` (its samples `dir_samples`): shuffled per (seed, job,
    /// epoch, directory), with the cached samples the job has not seen first. Remembered for
    /// prefetch. With `ods` off, the samples in name order.
    pub fn listing_order(&self, dir: DirId, dir_samples: &[FileId], rank: impl Fn(FileId) -> Rank, ods: bool) -> Arc<[FileId]> {
        if !ods {
            return dir_samples.into();
        }
        let epoch = self.epoch.number();
        let mut rng = draw_rng(self.seed, self.key, epoch, u64::from(dir) | 1 << 40);
        let mut order: Vec<FileId> = dir_samples.to_vec();
        order.shuffle(&mut rng);
        // A stable partition keeps each part shuffled.
        let (mut first, rest): (Vec<FileId>, Vec<FileId>) =
            order.into_iter().partition(|&c| self.free(c) && rank(c) > 0);
        first.extend(rest);
        let order: Arc<[FileId]> = first.into();
        let mut state = self.lock();
        state.listings_made += 1;
        let made = state.listings_made;
        if state.listings.len() >= LISTINGS_KEPT && !state.listings.contains_key(&dir) {
            if let Some(oldest) = state.listings.iter().min_by_key(|(_, l)| l.made).map(|(d, _)| *d) {
                state.listings.remove(&oldest);
            }
        }
        state.listings.insert(dir, Listing { order: Arc::clone(&order), epoch, cursor: 0, made });
        order
    }

    /// The next samples to prepare after an open of `requested` in `dir`: up to `window` entries
    /// of the job's listing of `dir` past the opened one that are free and not cached
    /// (`cached`), each returned once. Empty when the job has no current listing of `dir`.
    pub fn prefetch_candidates(
        &self,
        dir: DirId,
        requested: FileId,
        window: usize,
        cached: impl Fn(FileId) -> bool,
    ) -> Vec<FileId> {
        if window == 0 {
            return Vec::new();
        }
        let epoch = self.epoch.number();
        let mut state = self.lock();
        let Some(listing) = state.listings.get_mut(&dir) else { return Vec::new() };
        if listing.epoch != epoch {
            return Vec::new();
        }
        // A loader that follows the listing opens entry k near the cursor: move up to it.
        let look = listing.cursor..listing.order.len().min(listing.cursor + 4 * window);
        if let Some(k) = look.clone().find(|&k| listing.order[k] == requested) {
            listing.cursor = listing.cursor.max(k + 1);
        }
        let mut out = Vec::new();
        while listing.cursor < listing.order.len() && out.len() < window {
            let c = listing.order[listing.cursor];
            listing.cursor += 1;
            if self.free(c) && !cached(c) {
                out.push(c);
            }
        }
        out
    }

    /// Bytes of per-sample state (seen and claimed bits).
    pub fn state_bytes(&self) -> usize {
        self.epoch.bytes() + self.claimed.bytes()
    }
}

/// A job in the registry, with the slot's generation.
struct SlotState {
    job: Option<Arc<Job>>,
    generation: u32,
}

/// The mount's jobs, by name and by slot.
pub struct Jobs {
    slots: RwLock<Vec<SlotState>>,
    max: usize,
    /// Jobs one unprivileged user may hold.
    per_user: usize,
    files: usize,
    samples: u64,
    seed: u64,
    started: Instant,
    retired: AtomicU64,
    created: AtomicU32,
}

/// Bits of an inode code that hold the slot.
const SLOT_BITS: u32 = 6;
/// Generations wrap here (codes fit in 23 bits).
const GENERATIONS: u32 = 1 << 17;

impl Jobs {
    /// An empty registry for a dataset of `files` file ids and `samples` samples, allowing
    /// `max` active jobs (at most [`MAX_JOBS`]).
    pub fn new(max: usize, files: usize, samples: u64, seed: u64) -> Jobs {
        let max = max.clamp(1, MAX_JOBS);
        Jobs {
            slots: RwLock::new((0..max).map(|_| SlotState { job: None, generation: 0 }).collect()),
            max,
            per_user: max,
            files,
            samples,
            seed,
            started: Instant::now(),
            retired: AtomicU64::new(0),
            created: AtomicU32::new(0),
        }
    }

    /// Milliseconds since the registry was made: the clock of activity and idleness.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<SlotState>> {
        self.slots.read_or_recover()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<SlotState>> {
        self.slots.write_or_recover()
    }

    /// The same registry, holding each unprivileged user to `per_user` jobs.
    pub fn with_per_user(mut self, per_user: usize) -> Jobs {
        self.per_user = per_user.max(1);
        self
    }

    /// The job named `name`, made for `who` if it does not exist yet (a job exists from first
    /// use). An unprivileged user may hold `per_user` jobs and never takes the last free slot,
    /// so root and the mount's owner can always start one.
    pub fn get_or_create(&self, name: &[u8], who: Requester) -> Result<Arc<Job>, JobError> {
        let name = check_name(name)?;
        if let Some(job) = self.by_name(name) {
            job.touch(self.now_ms());
            return Ok(job);
        }
        let mut slots = self.write();
        if let Some(job) = slots.iter().filter_map(|s| s.job.as_ref()).find(|j| j.name == name) {
            return Ok(Arc::clone(job));
        }
        let Some(slot) = slots.iter().position(|s| s.job.is_none()) else {
            tracing::warn!(job = name, uid = who.uid, max = self.max, "job refused: every slot is taken (jobs.max)");
            return Err(JobError::TooMany(self.max));
        };
        if !who.privileged {
            let free = slots.iter().filter(|s| s.job.is_none()).count();
            let held = slots.iter().filter_map(|s| s.job.as_ref()).filter(|j| j.owner == who.uid).count();
            if held >= self.per_user {
                tracing::warn!(job = name, uid = who.uid, held, "job refused: the user holds jobs.per_user jobs");
                return Err(JobError::TooManyForUser { uid: who.uid, held });
            }
            if free <= 1 && self.max > 1 {
                tracing::warn!(job = name, uid = who.uid, "job refused: the last slot is kept for root and the mount's owner");
                return Err(JobError::TooMany(self.max));
            }
        }
        let generation = (slots[slot].generation + 1) % GENERATIONS;
        let code = (generation << SLOT_BITS | slot as u32) + 1;
        let mut job = Job::new(name, slot, code, self.files, self.samples, self.seed, self.now_ms());
        job.owner = who.uid;
        let job = Arc::new(job);
        slots[slot] = SlotState { job: Some(Arc::clone(&job)), generation };
        self.created.fetch_add(1, Ordering::Relaxed);
        tracing::info!(job = name, "job started");
        Ok(job)
    }

    /// The active job named `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<Job>> {
        self.read().iter().filter_map(|s| s.job.as_ref()).find(|j| j.name == name).cloned()
    }

    /// The active job whose inodes carry `code` (none for a retired job's stale inode).
    pub fn by_code(&self, code: u32) -> Option<Arc<Job>> {
        let slot = (code.checked_sub(1)? & ((1 << SLOT_BITS) - 1)) as usize;
        let slots = self.read();
        let job = slots.get(slot)?.job.as_ref()?;
        (job.code == code).then(|| Arc::clone(job))
    }

    /// Every active job.
    pub fn active(&self) -> Vec<Arc<Job>> {
        self.read().iter().filter_map(|s| s.job.clone()).collect()
    }

    /// The used-by bits of every active job.
    pub fn active_mask(&self) -> u64 {
        self.read().iter().filter_map(|s| s.job.as_ref()).fold(0, |m, j| m | j.bit())
    }

    /// Retires the job named `name`; returns it, or `None` if there is none.
    pub fn retire(&self, name: &str) -> Option<Arc<Job>> {
        let mut slots = self.write();
        let slot = slots.iter().position(|s| s.job.as_ref().is_some_and(|j| j.name == name))?;
        let job = slots[slot].job.take();
        self.retired.fetch_add(1, Ordering::Relaxed);
        tracing::info!(job = name, "job retired");
        job
    }

    /// Retires every job idle for at least `idle_ms`; returns them.
    pub fn retire_idle(&self, idle_ms: u64) -> Vec<Arc<Job>> {
        let now = self.now_ms();
        let idle: Vec<String> = self
            .active()
            .iter()
            .filter(|j| now.saturating_sub(j.last_active_ms()) >= idle_ms)
            .map(|j| j.name.clone())
            .collect();
        idle.iter().filter_map(|n| self.retire(n)).collect()
    }

    /// Figures for stats: each active job, and the totals.
    pub fn stats(&self) -> serde_json::Value {
        let now = self.now_ms();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let jobs: Vec<serde_json::Value> = self
            .active()
            .iter()
            .map(|j| {
                let c = &j.counters;
                let hits = get(&c.hits_augmented) + get(&c.hits_decoded) + get(&c.hits_encoded);
                let looked = hits + get(&c.misses);
                serde_json::json!({
                    "name": j.name,
                    "epoch": j.epoch(),
                    "served_this_epoch": j.served_this_epoch(),
                    "samples_served": get(&c.served),
                    "opens": get(&c.opens),
                    "hits": {
                        "augmented": get(&c.hits_augmented),
                        "decoded": get(&c.hits_decoded),
                        "encoded": get(&c.hits_encoded),
                    },
                    "misses": get(&c.misses),
                    "hit_rate": if looked == 0 { 0.0 } else { hits as f64 / looked as f64 },
                    "substitutions": get(&c.substitutions),
                    "prefetched": get(&c.prefetched),
                    "idle_s": now.saturating_sub(j.last_active_ms()) as f64 / 1000.0,
                    "state_bytes": j.state_bytes(),
                })
            })
            .collect();
        serde_json::json!({
            "active": jobs,
            "max": self.max,
            "per_user": self.per_user,
            "started": self.created.load(Ordering::Relaxed),
            "retired": get(&self.retired),
        })
    }

    /// A random start for a scan of `n` entries (spreads substitutions over a directory).
    pub fn scan_start(n: usize) -> usize {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        if n == 0 {
            return 0;
        }
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        draw_rng(0x0d5, call, 0, 0).gen_range(0..n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn jobs(files: usize) -> Jobs {
        Jobs::new(8, files, files as u64, 7)
    }

    #[test]
    fn a_user_holds_at_most_per_user_jobs_and_never_the_last_slot() {
        let reg = Jobs::new(4, 10, 10, 0).with_per_user(2);
        let nobody = Requester { uid: 65534, privileged: false };
        let other = Requester { uid: 1000, privileged: false };
        reg.get_or_create(b"n1", nobody).expect("first");
        reg.get_or_create(b"n2", nobody).expect("second");
        assert_eq!(reg.get_or_create(b"n3", nobody).err(), Some(JobError::TooManyForUser { uid: 65534, held: 2 }));
        assert_eq!(reg.get_or_create(b"n1", nobody).expect("its own job again").owner(), 65534);
        reg.get_or_create(b"o1", other).expect("another user");
        assert_eq!(reg.get_or_create(b"o2", other).err(), Some(JobError::TooMany(4)), "the last slot is kept");
        let train = reg.get_or_create(b"train", Requester::OWNER).expect("root always finds one");
        assert_eq!(train.owner(), 0);
    }

    #[test]
    fn bitsets_set_clear_and_count_their_memory() {
        let b = Bitset::new(130);
        assert!(!b.get(129));
        assert!(b.set(129));
        assert!(!b.set(129), "already set");
        assert!(b.get(129) && !b.get(128));
        assert!(b.clear(129) && !b.clear(129));
        b.set(3);
        b.clear_all();
        assert!(!b.get(3));
        assert_eq!(b.bytes(), 24);
        assert!(!b.get(10_000) && !b.set(10_000), "out of range is never set");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(check_name(b"resnet50-run_2.a"), Ok("resnet50-run_2.a"));
        for bad in [&b""[..], b".", b"..", b".hidden", b"a/b", b"a b", b"caf\xc3\xa9", b"x\0y"] {
            assert!(matches!(check_name(bad), Err(JobError::BadName(_))), "{bad:?}");
        }
        assert_eq!(check_name(&[b'a'; MAX_NAME_LEN + 1]), Err(JobError::NameTooLong));
        assert!(check_name(&[b'a'; MAX_NAME_LEN]).is_ok());
    }

    #[test]
    fn jobs_exist_from_first_use_and_are_bounded() {
        let reg = Jobs::new(2, 10, 10, 0);
        let a = reg.get_or_create(b"a", Requester::OWNER).expect("a");
        assert!(Arc::ptr_eq(&a, &reg.get_or_create(b"a", Requester::OWNER).expect("a again")));
        let b = reg.get_or_create(b"b", Requester::OWNER).expect("b");
        assert_ne!(a.bit(), b.bit());
        assert_eq!(reg.active_mask(), a.bit() | b.bit());
        assert_eq!(reg.get_or_create(b"c", Requester::OWNER).err(), Some(JobError::TooMany(2)));
        assert!(reg.by_code(a.code()).is_some());
        // Retiring frees the slot; the successor in that slot gets a new code.
        let old_code = a.code();
        assert!(reg.retire("a").is_some());
        assert!(reg.retire("a").is_none());
        assert!(reg.by_code(old_code).is_none(), "a retired job's inodes are stale");
        let c = reg.get_or_create(b"c", Requester::OWNER).expect("c");
        assert_eq!(c.bit(), a.bit());
        assert_ne!(c.code(), old_code);
        assert!(reg.by_code(old_code).is_none());
    }

    #[test]
    fn idle_jobs_retire() {
        let reg = jobs(4);
        reg.get_or_create(b"busy", Requester::OWNER).expect("busy");
        reg.get_or_create(b"idle", Requester::OWNER).expect("idle");
        std::thread::sleep(std::time::Duration::from_millis(30));
        reg.by_name("busy").expect("busy").touch(reg.now_ms());
        let retired = reg.retire_idle(20);
        assert_eq!(retired.iter().map(|j| j.name()).collect::<Vec<_>>(), ["idle"]);
        assert!(reg.by_name("busy").is_some() && reg.by_name("idle").is_none());
    }

    /// One epoch of opens of every sample of one directory in a random order, each read at once;
    /// returns what was served.
    fn epoch(job: &Job, dir: &[FileId], cached: &HashSet<FileId>, order_seed: u64) -> Vec<FileId> {
        let mut order = dir.to_vec();
        order.shuffle(&mut draw_rng(order_seed, 0, 0, 0));
        order
            .iter()
            .map(|&s| {
                let rank = |c: FileId| u8::from(cached.contains(&c)) * 2;
                let choice = job.choose(s, dir, rank, 2, Jobs::scan_start(dir.len()), true);
                assert!(choice.claimed);
                job.mark_served(choice.sample, true);
                choice.sample
            })
            .collect()
    }

    #[test]
    fn each_sample_is_served_once_per_epoch_with_cached_ones_first() {
        let reg = jobs(40);
        let job = reg.get_or_create(b"j", Requester::OWNER).expect("job");
        let dir: Vec<FileId> = (0..40).collect();
        let cached: HashSet<FileId> = (0..40).filter(|i| i % 4 == 0).collect();
        for e in 0..3 {
            assert_eq!(job.epoch(), e + 1);
            let served = epoch(&job, &dir, &cached, e);
            let distinct: HashSet<_> = served.iter().copied().collect();
            assert_eq!(distinct.len(), 40, "epoch {e}: a sample was served twice");
            // The first ten opens got the ten cached samples, whatever they asked for.
            assert!(served[..10].iter().all(|s| cached.contains(s)), "epoch {e}: {served:?}");
        }
        assert_eq!(job.epoch(), 4);
        assert_eq!(job.counters.served.load(Ordering::Relaxed), 120);
    }

    #[test]
    fn an_open_that_is_never_read_gives_its_claim_back() {
        let reg = jobs(3);
        let job = reg.get_or_create(b"j", Requester::OWNER).expect("job");
        let dir = [0, 1, 2];
        let none = |_c: FileId| 0u8;
        let a = job.choose(0, &dir, none, 2, 0, true);
        assert_eq!(a.sample, 0);
        // A second open of the same name while the first is unread gets another sample.
        let b = job.choose(0, &dir, none, 2, 0, true);
        assert_ne!(b.sample, a.sample);
        job.unclaim(b.sample);
        job.mark_served(a.sample, true);
        // The requested sample was served: the next open of it is served an unseen one.
        let c = job.choose(0, &dir, none, 2, 0, true);
        assert!(c.substituted && c.sample != 0);
    }

    #[test]
    fn reopening_an_exhausted_directory_starts_the_next_pass() {
        // Two directories; the job reads one of them twice before touching the other.
        let reg = jobs(4);
        let job = reg.get_or_create(b"partial", Requester::OWNER).expect("job");
        let d0 = [0, 1];
        let none = |_c: FileId| 0u8;
        for s in [0, 1] {
            let c = job.choose(s, &d0, none, 2, 0, true);
            job.mark_served(c.sample, true);
        }
        assert_eq!(job.epoch(), 1, "two of four samples served");
        let c = job.choose(0, &d0, none, 2, 0, true);
        assert_eq!(job.epoch(), 2, "a pass over d0 again is the next epoch");
        assert!(!c.substituted);
    }

    #[test]
    fn without_ods_the_requested_sample_is_served() {
        let reg = jobs(10);
        let job = reg.get_or_create(b"plain", Requester::OWNER).expect("job");
        let dir: Vec<FileId> = (0..10).collect();
        let all = |_c: FileId| 3u8;
        for s in (0..10).rev() {
            let c = job.choose(s, &dir, all, 3, 0, false);
            assert_eq!(c.sample, s);
            job.mark_served(c.sample, true);
        }
        assert_eq!(job.epoch(), 2);
        assert_eq!(&*job.listing_order(0, &dir, all, false), &dir[..]);
    }

    #[test]
    fn listings_put_cached_unseen_samples_first_and_reshuffle_each_epoch() {
        let reg = jobs(100);
        let job = reg.get_or_create(b"lister", Requester::OWNER).expect("job");
        let dir: Vec<FileId> = (0..100).collect();
        let cached = |c: FileId| u8::from(c % 10 == 0);
        let first = job.listing_order(0, &dir, cached, true);
        assert_eq!(first.len(), 100);
        assert!(first[..10].iter().all(|c| c % 10 == 0), "{first:?}");
        assert_eq!(first.iter().copied().collect::<HashSet<_>>().len(), 100);
        assert_eq!(job.listing_order(0, &dir, cached, true), first, "same epoch, same order");
        for &s in first.iter() {
            job.mark_served(s, true);
        }
        assert_eq!(job.epoch(), 2);
        assert_ne!(job.listing_order(0, &dir, cached, true), first, "a new epoch reshuffles");
        // Another job gets its own order.
        let other = reg.get_or_create(b"other", Requester::OWNER).expect("job");
        assert_ne!(other.listing_order(0, &dir, cached, true)[10..], first[10..]);
    }

    #[test]
    fn prefetch_runs_ahead_along_the_listing() {
        let reg = jobs(20);
        let job = reg.get_or_create(b"p", Requester::OWNER).expect("job");
        let dir: Vec<FileId> = (0..20).collect();
        let order = job.listing_order(3, &dir, |_| 0, true);
        let none_cached = |_c: FileId| false;
        let ahead = job.prefetch_candidates(3, order[0], 4, none_cached);
        assert_eq!(ahead, order[1..5]);
        // The next call continues where the last stopped, never repeating a candidate.
        let more = job.prefetch_candidates(3, order[1], 4, none_cached);
        assert_eq!(more, order[5..9]);
        // Cached or seen samples are skipped.
        job.mark_served(order[9], true);
        let skip = job.prefetch_candidates(3, order[2], 2, |c| c == order[10]);
        assert_eq!(skip, order[11..13]);
        assert!(job.prefetch_candidates(4, 0, 4, none_cached).is_empty(), "no listing of dir 4");
    }

    #[test]
    fn per_sample_state_is_two_bits_per_sample() {
        // 1.3 million samples, 8 jobs: the paper's budget is single megabytes.
        let reg = Jobs::new(8, 1_300_000, 1_300_000, 0);
        let total: usize = (0..8).map(|i| reg.get_or_create(format!("j{i}").as_bytes(), Requester::OWNER).expect("job").state_bytes()).sum();
        assert!(total <= 2_700_000, "{total} bytes");
    }
}
