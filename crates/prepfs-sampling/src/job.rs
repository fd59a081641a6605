//! One training job's state and the two decisions opportunistic sampling makes for it: which
//! sample an open is served ([`Job::choose`]), and in what order a directory is listed
//! ([`Job::listing_order`], which prefetch then runs along).

use std::collections::{BTreeMap, HashMap};
// Statistics and the registry's counters are std's atomics (added to relaxed); the seen
// and claimed bits and the pass counters, which synchronise, are prepfs_base::sync's (shuttle's under
// `--features shuttle`; in `pass`), as are the locks.
use std::sync::atomic::{AtomicU64, Ordering};
use prepfs_base::sync::{Arc, LockExt, Mutex, MutexGuard};

use rand::seq::SliceRandom;

use prepfs_pixels::draw::draw_rng;
use prepfs_source::catalog::{DirId, FileId};

use prepfs_cache::shared_jobs::SharedJob;
use crate::ledger::LedgerView;
use super::{Bitset, Pass, Rank, SCAN_LIMIT};

/// Listing orders remembered per job for prefetch.
const LISTINGS_KEPT: usize = 64;
/// A shared job's claim offers the store this many candidates, best first.
const SHARED_CANDIDATES: usize = 8;
/// A shared job's choice asks the store at most this many times before serving the request as
/// it is.
const SHARED_ROUNDS: usize = 16;

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
/// A job's figures across every view it reads ([`Job::across_views`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcrossViews {
    /// Samples served in all its views.
    pub served: u64,
    /// The furthest epoch any of its views has reached.
    pub epoch: u64,
    /// Samples served in that view's epoch.
    pub served_this_epoch: u64,
}

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
    /// Opens of a sample known bad, or found bad at the open, that were served another instead.
    pub bad_skipped: AtomicU64,
    /// A shared job's samples claimed in the shared store by this mount.
    pub shared_claims: AtomicU64,
    /// Candidates the shared store said were taken by another open (another mount's, or a
    /// concurrent one on this mount).
    pub(crate) taken_elsewhere: AtomicU64,
    /// Choices a shared job made alone because the store did not answer (an outage).
    pub decided_alone: AtomicU64,
}

impl JobCounters {
    /// Opens served from any cache form.
    pub fn hits(&self) -> u64 {
        [&self.hits_augmented, &self.hits_decoded, &self.hits_encoded].iter().map(|h| h.load(Ordering::Relaxed)).sum()
    }
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
    /// A shared job's claims in the store not yet read, with the epoch each was made in (a
    /// claim given back names its own epoch, never a later one's).
    shared_claims: HashMap<FileId, u64>,
}

/// One training job: see the module documentation.
pub struct Job {
    pub(super) name: String,
    /// The uid that made the job: its directory is theirs.
    pub(super) owner: u32,
    slot: usize,
    pub(super) code: u32,
    seed: u64,
    /// The name hashed: the job's part in its listings' shuffles.
    key: u64,
    /// This epoch: the samples served in it. For a shared job, the samples this mount knows
    /// are taken anywhere, and the store's epoch number.
    epoch: Pass,
    /// The state shared with other mounts (`jobs.shared` with a remote tier), if any.
    pub(super) shared: Option<Box<dyn SharedJob>>,
    claimed: Bitset,
    state: Mutex<JobState>,
    /// The job's own sampling state in each recipe's view it reads (`jobs/<job>/<recipe>/`),
    /// by recipe number, made at first use: a job reading two recipes has an epoch and
    /// seen/claimed bits in each, as if each were a job of its own with the job's slot.
    recipes: Mutex<HashMap<u8, Arc<Job>>>,
    /// The loader socket's walks of the job in progress, by the epoch each walks: the readers
    /// that will serve the rest of an epoch (see [`Job::end_epoch_unless_walked`]).
    walks: Mutex<BTreeMap<u64, usize>>,
    last_active_ms: AtomicU64,
    pub counters: JobCounters,
    /// Where this view's epoch and served samples are kept across a restart of the server
    /// (`ledger.rs`), if the mount has an epoch ledger.
    pub(super) ledger: Option<LedgerView>,
}

impl Job {
    pub(super) fn new(name: &str, slot: usize, code: u32, files: usize, samples: u64, seed: u64, now_ms: u64) -> Job {
        Job {
            name: name.to_owned(),
            owner: 0,
            slot,
            code,
            seed,
            key: prepfs_base::hash::fnv1a64(&[name.as_bytes()]),
            epoch: Pass::new(files, samples),
            shared: None,
            claimed: Bitset::new(files),
            state: Mutex::new(JobState::default()),
            recipes: Mutex::new(HashMap::new()),
            walks: Mutex::new(BTreeMap::new()),
            last_active_ms: AtomicU64::new(now_ms),
            counters: JobCounters::default(),
            ledger: None,
        }
    }

    /// The job's sampling state in recipe `recipe`'s view (its number, from 1): its own epoch
    /// and seen and claimed bits, with the job's name, owner, slot and code; made at first use,
    /// kept until the job is retired. Not shared with other mounts:
    /// a recipe's view of a shared job samples on this mount alone.
    pub(super) fn in_recipe(&self, recipe: u8, files: usize, samples: u64) -> Arc<Job> {
        self.recipe_view(recipe, files, samples, None)
    }

    /// [`Job::in_recipe`]; a state made here keeps its place in the epoch ledger in `restored`
    /// (a region read back at replay), else in a fresh region of the job's, if it has one.
    pub(super) fn recipe_view(&self, recipe: u8, files: usize, samples: u64, restored: Option<LedgerView>) -> Arc<Job> {
        let mut recipes = self.recipes.lock_or_recover();
        let job = recipes.entry(recipe).or_insert_with(|| {
            let mut job = Job::new(&self.name, self.slot, self.code, files, samples, self.seed, self.last_active_ms());
            job.owner = self.owner;
            job.key = self.key ^ u64::from(recipe);
            job.ledger = restored.or_else(|| self.ledger.as_ref().map(|l| l.for_recipe(recipe, &self.name, self.owner)));
            Arc::new(job)
        });
        Arc::clone(job)
    }

    /// The job is retired: its places in the epoch ledger are given up (each view's marks in
    /// flight land first, none is written after).
    pub(super) fn retire_ledger(&self) {
        // Held so no recipe state is made meanwhile (one made after is made retired).
        let recipes = self.recipes.lock_or_recover();
        for ledger in self.ledger.iter().chain(recipes.values().filter_map(|r| r.ledger.as_ref())) {
            ledger.retire();
        }
    }

    /// Puts the job (a view of it) back in epoch `number` (from 0) having been served `served`
    /// in it, as the epoch ledger kept them; when they are every sample, the epoch ends. A
    /// shared job's epochs are its store's: nothing is put back. Returns the samples put back.
    pub(super) fn restore_epoch(&self, number: u64, served: &[FileId]) -> u64 {
        if self.shared.is_some() {
            return 0;
        }
        let _state = self.lock();
        self.epoch.restart_at(number);
        for &s in served {
            self.epoch.note(s);
        }
        let noted = self.epoch.served();
        if noted >= self.ledger_samples() && noted > 0 {
            self.epoch.next();
            self.record_roll();
            return 0;
        }
        noted
    }

    /// Samples in an epoch (what the ledger was made for).
    fn ledger_samples(&self) -> u64 {
        self.ledger.as_ref().map_or(u64::MAX, |l| l.ledger().samples())
    }

    /// Writes the current epoch to the ledger (under the job's lock: epochs' ends never land out
    /// of order). A shared job's epochs are its store's.
    fn record_roll(&self) {
        if let (None, Some(ledger)) = (&self.shared, &self.ledger) {
            ledger.rolled(self.epoch.number());
        }
    }

    /// The job's sampling states in the recipes' views it has read, by recipe number.
    pub fn recipe_states(&self) -> Vec<(u8, Arc<Job>)> {
        let mut states: Vec<(u8, Arc<Job>)> = self.recipes.lock_or_recover().iter().map(|(r, j)| (*r, Arc::clone(j))).collect();
        states.sort_by_key(|(r, _)| *r);
        states
    }

    /// The job across every view it reads: the samples served in all of them, and the furthest
    /// epoch any of them has reached with the samples served in it. A job is one job in every
    /// view (one read only through a recipe's view would otherwise show epoch 1 and 0 served);
    /// `stats.json` and the exposition both read it here.
    pub fn across_views(&self) -> AcrossViews {
        let recipes = self.recipe_states();
        let served = self.counters.served.load(Ordering::Relaxed)
            + recipes.iter().map(|(_, r)| r.counters.served.load(Ordering::Relaxed)).sum::<u64>();
        let (epoch, served_this_epoch) = recipes
            .iter()
            .map(|(_, r)| (r.epoch(), r.served_this_epoch()))
            .fold((self.epoch(), self.served_this_epoch()), |a, b| a.max(b));
        AcrossViews { served, epoch, served_this_epoch }
    }

    /// The job's sampling state in recipe `recipe`'s view, if it has read it.
    pub fn recipe_state(&self, recipe: u8) -> Option<Arc<Job>> {
        self.recipes.lock_or_recover().get(&recipe).cloned()
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
    pub(crate) fn last_active_ms(&self) -> u64 {
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
        self.choose_usable(requested, dir_samples, rank, top, start, ods, |_| false)
    }

    /// [`Job::choose`], never picking a sample `unusable` says cannot be served (one known bad):
    /// an unusable requested sample is replaced by a free usable one of its directory, with
    /// `ods` off too. Only when none is left, even after starting the next pass, is the request
    /// returned as it is (unclaimed), for its open to fail.
    #[allow(clippy::too_many_arguments)]
    pub fn choose_usable(
        &self,
        requested: FileId,
        dir_samples: &[FileId],
        rank: impl Fn(FileId) -> Rank,
        top: Rank,
        start: usize,
        ods: bool,
        unusable: impl Fn(FileId) -> bool,
    ) -> Choice {
        if let Some(shared) = self.shared.as_ref().filter(|_| ods) {
            match self.choose_shared(shared.as_ref(), requested, dir_samples, &rank, start, &unusable, true) {
                Some(choice) => return choice,
                // The store did not answer: decide alone, on what this mount knows.
                None => {
                    self.counters.decided_alone.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let _state = self.lock();
        let mut rolled = false;
        loop {
            let pick = if ods {
                self.pick_substitute(requested, dir_samples, &rank, top, start, &unusable)
            } else if unusable(requested) {
                self.any_free(dir_samples, start, &unusable)
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
                    self.record_roll();
                    rolled = true;
                }
                // Everything left is pinned to open handles: serve the request as it is.
                None => return Choice { sample: requested, substituted: false, claimed: false },
            }
        }
    }

    /// [`Job::choose_usable`] with opportunistic sampling on, never beginning the next epoch:
    /// a reader that walks the epoch itself (the loader socket) passes over a request whose
    /// directory has nothing free, told so by an unclaimed choice. `epoch` is the epoch the
    /// reader walks ([`Job::epoch`]): once the job is past it (another reader served its last
    /// sample), nothing is claimed, so no sample of the next epoch is served as the walk's.
    #[allow(clippy::too_many_arguments)]
    pub fn choose_within_epoch(
        &self,
        epoch: u64,
        requested: FileId,
        dir_samples: &[FileId],
        rank: impl Fn(FileId) -> Rank,
        top: Rank,
        start: usize,
        unusable: impl Fn(FileId) -> bool,
    ) -> Choice {
        let unclaimed = Choice { sample: requested, substituted: false, claimed: false };
        if let Some(shared) = &self.shared {
            if self.epoch() != epoch {
                return unclaimed;
            }
            match self.choose_shared(shared.as_ref(), requested, dir_samples, &rank, start, &unusable, false) {
                Some(choice) => return choice,
                None => {
                    self.counters.decided_alone.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let _state = self.lock();
        if self.epoch() != epoch {
            return unclaimed;
        }
        match self.pick_substitute(requested, dir_samples, &rank, top, start, &unusable) {
            Some(sample) => {
                self.claimed.set(sample);
                Choice { sample, substituted: sample != requested, claimed: true }
            }
            None => unclaimed,
        }
    }

    /// A shared job's choice: the candidates ODS ranks (best first) are offered to the store,
    /// which claims the first no mount has taken in its current epoch. Candidates it finds taken
    /// are learned (noted in the mirror), and a directory found all taken begins the next epoch
    /// there, once (if `may_roll`; else the choice is unclaimed). `None`: the store did not
    /// answer.
    #[allow(clippy::too_many_arguments)]
    fn choose_shared(
        &self,
        shared: &dyn SharedJob,
        requested: FileId,
        dir_samples: &[FileId],
        rank: &impl Fn(FileId) -> Rank,
        start: usize,
        unusable: &impl Fn(FileId) -> bool,
        may_roll: bool,
    ) -> Option<Choice> {
        let mut rolled = false;
        for _ in 0..SHARED_ROUNDS {
            let seen_epoch = self.epoch.number();
            let candidates = self.ranked_free(requested, dir_samples, rank, start, unusable);
            if candidates.is_empty() && (rolled || !may_roll) {
                break;
            }
            // No lock is held across the store's round trip.
            let reply = shared.claim(seen_epoch, candidates.is_empty(), &candidates)?;
            let mut state = self.lock();
            if reply.epoch != seen_epoch {
                // Ranked on a stale mirror (the store claimed nothing): look again.
                self.adopt_epoch(reply.epoch);
                rolled = true;
                continue;
            }
            let taken = reply.got.unwrap_or(candidates.len());
            for &c in &candidates[..taken] {
                if self.epoch.note(c) {
                    self.counters.taken_elsewhere.fetch_add(1, Ordering::Relaxed);
                }
            }
            rolled |= reply.epoch_after != seen_epoch;
            if let Some(i) = reply.got {
                let sample = candidates[i];
                self.epoch.note(sample);
                self.claimed.set(sample);
                state.shared_claims.insert(sample, reply.epoch);
                self.adopt_epoch(reply.epoch_after);
                self.counters.shared_claims.fetch_add(1, Ordering::Relaxed);
                return Some(Choice { sample, substituted: sample != requested, claimed: true });
            }
            self.adopt_epoch(reply.epoch_after);
        }
        // Everything left is pinned to this mount's open handles: serve the request as it is.
        Some(Choice { sample: requested, substituted: false, claimed: false })
    }

    /// Makes the mirror follow the store's epoch `number` (a fresh mirror when it differs).
    fn adopt_epoch(&self, number: u64) {
        if self.epoch.number() != number {
            self.epoch.restart_at(number);
        }
    }

    /// The free, usable samples of the directory in ODS's order of preference, at most
    /// [`SHARED_CANDIDATES`]: the best rank first; among equals the requested sample, then scan
    /// order from `start`. The first is what [`Job::pick_substitute`] picks.
    fn ranked_free(
        &self,
        requested: FileId,
        dir_samples: &[FileId],
        rank: &impl Fn(FileId) -> Rank,
        start: usize,
        unusable: &impl Fn(FileId) -> bool,
    ) -> Vec<FileId> {
        let usable = |c: FileId| self.free(c) && !unusable(c);
        let n = dir_samples.len();
        let mut free: Vec<(Rank, bool, usize, FileId)> = Vec::new();
        if usable(requested) {
            free.push((rank(requested), true, 0, requested));
        }
        for k in 0..n.min(SCAN_LIMIT) {
            let c = dir_samples[(start + k) % n];
            if c != requested && usable(c) {
                free.push((rank(c), false, k, c));
            }
        }
        let order = |a: &(Rank, bool, usize, FileId), b: &(Rank, bool, usize, FileId)| {
            b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2))
        };
        if free.len() > SHARED_CANDIDATES {
            free.select_nth_unstable_by(SHARED_CANDIDATES - 1, order);
            free.truncate(SHARED_CANDIDATES);
        }
        free.sort_unstable_by(order);
        free.into_iter().map(|(_, _, _, c)| c).collect()
    }

    /// The first free, usable sample of the directory, scanning from `start`.
    fn any_free(&self, dir_samples: &[FileId], start: usize, unusable: &impl Fn(FileId) -> bool) -> Option<FileId> {
        let n = dir_samples.len();
        (0..n.min(SCAN_LIMIT)).map(|k| dir_samples[(start + k) % n]).find(|&c| self.free(c) && !unusable(c))
    }

    /// The ODS pick: see the module documentation. `None` when nothing usable in the directory
    /// is free.
    fn pick_substitute(
        &self,
        requested: FileId,
        dir_samples: &[FileId],
        rank: &impl Fn(FileId) -> Rank,
        top: Rank,
        start: usize,
        unusable: &impl Fn(FileId) -> bool,
    ) -> Option<FileId> {
        let own = if self.free(requested) && !unusable(requested) { Some(rank(requested)) } else { None };
        if own == Some(top) && top > 0 {
            return Some(requested);
        }
        // The best-cached free sample of the directory, scanning from a random start.
        let n = dir_samples.len();
        let (mut best, mut best_rank, mut any_free) = (None, 0u8, None);
        for k in 0..n.min(SCAN_LIMIT) {
            let c = dir_samples[(start + k) % n];
            if !self.free(c) || unusable(c) {
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
        let mut state = self.lock();
        if holds_claim {
            self.claimed.clear(sample);
        }
        // The ledger's mark, written once the lock is released (the epoch it was served in).
        let mut unwritten = None;
        let new = match &self.shared {
            // A shared job's mirror noted the sample at its claim, in the epoch the claim was
            // made in; the store begins its epochs. A claim of an epoch since ended is not
            // noted in the next one's mirror (the sample is free there).
            Some(_) => match holds_claim.then(|| state.shared_claims.remove(&sample)).flatten() {
                Some(epoch) => {
                    if epoch == self.epoch.number() {
                        self.epoch.note(sample);
                    }
                    true
                }
                None => self.epoch.note(sample),
            },
            None => {
                let number = self.epoch.number();
                let new = self.epoch.mark(sample);
                if let Some(ledger) = self.ledger.as_ref().filter(|_| new) {
                    if self.epoch.number() != number {
                        // The epoch's last sample: its mark, then the next epoch, before another
                        // mark of the job can begin.
                        if let Some(writing) = ledger.begin() {
                            ledger.mark(&writing, sample, number);
                        }
                        self.record_roll();
                    } else {
                        unwritten = ledger.begin().map(|writing| (ledger, writing, number));
                    }
                }
                new
            }
        };
        drop(state);
        if let Some((ledger, writing, number)) = unwritten {
            ledger.mark(&writing, sample, number);
        }
        if new {
            self.counters.served.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    /// Releases a claim that was never read (the handle closed unread); a shared job gives it
    /// back to the store, in the epoch it was made in.
    pub fn unclaim(&self, sample: FileId) {
        if !self.claimed.clear(sample) {
            return;
        }
        let Some(shared) = &self.shared else { return };
        let given_back = {
            let mut state = self.lock();
            let epoch = state.shared_claims.remove(&sample);
            if epoch == Some(self.epoch.number()) {
                self.epoch.unnote(sample);
            }
            epoch
        };
        if let Some(epoch) = given_back {
            shared.release(epoch, sample);
        }
    }

    /// A loader's walk begins in the job's current epoch, which is returned (from 1): the walk
    /// is in progress there until [`Job::walk_ended`] (its order walked through, abandoned, or
    /// its connection gone). Counted atomically with [`Job::end_epoch_unless_walked`], so a walk
    /// never begins in an epoch just ended for want of walkers.
    pub fn walk_begun(&self) -> u64 {
        let mut walks = self.walks.lock_or_recover();
        let epoch = self.epoch();
        *walks.entry(epoch).or_default() += 1;
        epoch
    }

    /// A walk begun in `epoch` ([`Job::walk_begun`]) is no longer in progress.
    pub fn walk_ended(&self, epoch: u64) {
        let mut walks = self.walks.lock_or_recover();
        if let Some(n) = walks.get_mut(&epoch) {
            *n -= 1;
            if *n == 0 {
                walks.remove(&epoch);
            }
        }
    }

    /// A loader's walk resumes the job's epoch `epoch` (from 1) with `served` served in it (a
    /// training run restarted from its saved state, or a loader reconnected to a restarted
    /// daemon), and is counted in progress there as [`Job::walk_begun`] counts one; returns the
    /// epoch it walks. Where no other walk is in that epoch, the job's epoch becomes exactly
    /// that: begun anew at that number (the samples served in it forgotten: the daemon served
    /// more than the loader yielded) with `served` served. Where another walk already walks it
    /// (the other ranks of the job resuming), `served` is added to it. Served through
    /// [`Job::mark_served`], so a `served` holding every sample begins the next epoch, which
    /// is then the one walked. Not for a shared job (whose epochs are its store's).
    pub fn resume_walk(&self, epoch: u64, served: &[FileId]) -> u64 {
        let mut walks = self.walks.lock_or_recover();
        let joined = self.epoch() == epoch && walks.contains_key(&epoch);
        if !joined {
            let _state = self.lock();
            self.epoch.restart_at(epoch.max(1) - 1);
        }
        for &sample in served {
            self.mark_served(sample, false);
        }
        let now = self.epoch();
        *walks.entry(now).or_default() += 1;
        now
    }

    /// Whether the job is past `epoch`, ending it first when nothing is left to serve the rest
    /// of it: no loader walks it ([`Job::walk_begun`]) and no open holds a claim in the job (a
    /// sample chosen and not yet read). Its samples not served are then not served in it: a
    /// loader that ended its walk early (`for batch in loader: break`) begins the next epoch
    /// rather than wait for one that no one finishes. A shared job's epochs are its store's,
    /// which other mounts' readers may still be walking: it ends only by being served.
    pub fn end_epoch_unless_walked(&self, epoch: u64) -> bool {
        let walks = self.walks.lock_or_recover();
        if self.epoch() != epoch {
            return true;
        }
        if self.shared.is_some() || walks.contains_key(&epoch) {
            return false;
        }
        let _state = self.lock();
        if self.claimed.count() != 0 {
            return false;
        }
        if self.epoch() == epoch {
            self.epoch.next();
            self.record_roll();
        }
        true
    }

    /// Whether the job's state is shared with other mounts.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// The job is being removed: a shared job begins a fresh epoch on every mount, so starting
    /// it again starts anew (as a local job's fresh state does).
    pub fn restart_everywhere(&self) {
        if let Some(shared) = &self.shared {
            shared.restart();
        }
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
