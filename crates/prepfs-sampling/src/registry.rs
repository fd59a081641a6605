//! The mount's registry of jobs ([`Jobs`]): slots and generations (a job's inode code), the limits
//! on how many jobs there are and who holds them, idle retirement, and the jobs' figures. Jobs
//! made and retired are written to the epoch ledger, if the mount has one (`ledger.rs`; read
//! back by `replay.rs`).

// The registry's counters are std's atomics; its lock is prepfs_base::sync's (shuttle's under
// `--features shuttle`).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use prepfs_base::sync::{Arc, OnceLock, RwLock, RwLockExt, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use rand::Rng;

use prepfs_pixels::draw::draw_rng;

use crate::ledger::{EpochLedger, LedgerView};
use super::{check_name, Job, JobError, Requester, SharedJobs, MAX_JOBS};

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
    /// Where jobs' state shared with other mounts is kept (`jobs.shared` with a remote tier).
    store: Option<Arc<dyn SharedJobs>>,
    /// Where the jobs' epochs are kept across a restart of the server, once attached
    /// ([`Jobs::attach_ledger`]).
    ledger: OnceLock<Arc<EpochLedger>>,
}

/// Bits of an inode code that hold the slot.
const SLOT_BITS: u32 = 6;
/// Generations wrap here: codes stay at most 2^22, below the bit that marks a pending job
/// name's code (`fs::inodes::PENDING_JOB`).
const GENERATIONS: u32 = 1 << 16;

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
            store: None,
            ledger: OnceLock::new(),
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

    /// The same registry, sharing each job's state with the other mounts that use `store`.
    pub fn with_shared(mut self, store: Option<Arc<dyn SharedJobs>>) -> Jobs {
        self.store = store;
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
        job.shared = self.store.as_ref().map(|store| store.job(name, self.samples));
        // Written before the job can be used (a shared job's identity only).
        job.ledger = self.ledger.get().map(|l| LedgerView::create(l, slot, 0, name, who.uid, generation, job.shared.is_some()));
        let job = Arc::new(job);
        slots[slot] = SlotState { job: Some(Arc::clone(&job)), generation };
        self.created.fetch_add(1, Ordering::Relaxed);
        tracing::info!(job = name, "job started");
        Ok(job)
    }

    /// Puts back a job the epoch ledger kept: `name`, made by `owner`, in `slot` with its
    /// `generation` (so its inode code is the same), its place in the ledger `ledger`. Refused
    /// (why, for the log) when the name is bad or taken, or the slot is not this registry's or
    /// is taken.
    pub(crate) fn restore(&self, name: &str, owner: u32, slot: usize, generation: u32, ledger: LedgerView) -> Result<Arc<Job>, String> {
        let name = check_name(name.as_bytes()).map_err(|e| e.to_string())?;
        let mut slots = self.write();
        if slot >= slots.len() || generation >= GENERATIONS {
            return Err(format!("slot {slot} generation {generation} is past this mount's {} slots", slots.len()));
        }
        if slots[slot].job.is_some() || slots.iter().filter_map(|s| s.job.as_ref()).any(|j| j.name == name) {
            return Err("its slot or its name is taken".to_owned());
        }
        let code = (generation << SLOT_BITS | slot as u32) + 1;
        let mut job = Job::new(name, slot, code, self.files, self.samples, self.seed, self.now_ms());
        job.owner = owner;
        job.shared = self.store.as_ref().map(|store| store.job(name, self.samples));
        job.ledger = Some(ledger);
        let job = Arc::new(job);
        slots[slot] = SlotState { job: Some(Arc::clone(&job)), generation };
        Ok(job)
    }

    /// The catalog's file ids and samples the registry is for.
    pub(crate) fn catalog_size(&self) -> (usize, u64) {
        (self.files, self.samples)
    }

    /// The seed of the listings' shuffles.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Records from now on in `ledger`; false if one was attached already.
    pub(crate) fn set_ledger(&self, ledger: Arc<EpochLedger>) -> bool {
        let mut fresh = false;
        self.ledger.get_or_init(|| {
            fresh = true;
            ledger
        });
        fresh
    }

    /// Whether an epoch ledger is attached.
    pub(crate) fn has_ledger(&self) -> bool {
        self.ledger.get().is_some()
    }

    /// `job`'s sampling state in recipe `recipe`'s view (its number, from 1): see
    /// [`Job::in_recipe`].
    pub fn in_recipe(&self, job: &Arc<Job>, recipe: u8) -> Arc<Job> {
        if recipe == 0 {
            return Arc::clone(job);
        }
        job.in_recipe(recipe, self.files, self.samples)
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
        // Its regions are given up before the slot can be taken again.
        if let Some(job) = &job {
            job.retire_ledger();
        }
        self.retired.fetch_add(1, Ordering::Relaxed);
        tracing::info!(job = name, "job retired");
        job
    }

    /// Retires every job idle for at least `idle_ms` at `now` (ms of [`Jobs::now_ms`]'s clock);
    /// returns them.
    pub fn retire_idle(&self, now: u64, idle_ms: u64) -> Vec<Arc<Job>> {
        let idle: Vec<String> = self
            .active()
            .iter()
            .filter(|j| now.saturating_sub(j.last_active_ms()) >= idle_ms)
            .map(|j| j.name.clone())
            .collect();
        idle.iter().filter_map(|n| self.retire(n)).collect()
    }

    /// Figures for stats: each active job, and the totals. A job's recipe views are keyed by
    /// the recipe's name, `recipe_names[r - 1]` for recipe `r` (its number where none is given).
    pub fn stats(&self, recipe_names: &[String]) -> serde_json::Value {
        let now = self.now_ms();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let jobs: Vec<serde_json::Value> = self
            .active()
            .iter()
            .map(|j| {
                let c = &j.counters;
                let hits = c.hits();
                let looked = hits + get(&c.misses);
                let (recipes, all) = (j.recipe_states(), j.across_views());
                let views: serde_json::Map<String, serde_json::Value> = recipes
                    .iter()
                    .map(|(n, r)| {
                        let figures = serde_json::json!({
                            "epoch": r.epoch(),
                            "served_this_epoch": r.served_this_epoch(),
                            "samples_served": get(&r.counters.served),
                        });
                        let name = usize::from(*n).checked_sub(1).and_then(|i| recipe_names.get(i));
                        (name.cloned().unwrap_or_else(|| n.to_string()), figures)
                    })
                    .collect();
                serde_json::json!({
                    "name": j.name,
                    "epoch": all.epoch,
                    "served_this_epoch": all.served_this_epoch,
                    "samples_served": all.served,
                    "recipes": views,
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
                    "bad_skipped": get(&c.bad_skipped),
                    "shared": j.is_shared(),
                    "shared_claims": get(&c.shared_claims),
                    "taken_elsewhere": get(&c.taken_elsewhere),
                    "decided_alone": get(&c.decided_alone),
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
            "ledger": self.ledger.get().map(|l| serde_json::json!({
                "bytes": l.bytes_in_use(),
                "write_failures": l.failures(),
            })),
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
