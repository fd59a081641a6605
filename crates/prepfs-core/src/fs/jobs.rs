//! The jobs' side of the core: mkdir and rmdir under `jobs/`, the job a job view's inode names
//! (and the pending names of jobs not made yet: [`PendingNames`]),
//! prefetch along a job's listing ([`PrefetchQueue`], [`Filesystem::run_prefetch`]), which samples
//! the refill prepares, and freeing what retired or served-out jobs hold in the cache.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::recipes::states_in;
use super::{Attr, Caller, Filesystem, Node};
use crate::config::RefillWhen;
use crate::error::{Error, Result};
use super::inodes::PENDING_JOB;
use crate::producer::{Consumer, RefillScope};
use prepfs_sampling::{check_name, Job};
use prepfs_cache::form::Form;
use prepfs_source::catalog::{DirId, FileId};
use crate::stats::bump;
use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// Samples waiting to be prepared ahead of the jobs that will read them.
#[derive(Default)]
pub(super) struct PrefetchQueue {
    pending: Mutex<(VecDeque<(FileId, Form, Arc<Job>)>, HashSet<FileId>)>,
    ready: Condvar,
}

/// Prefetch work queued at most (the rest is dropped: the window bounds it anyway).
const PREFETCH_QUEUE_MAX: usize = 4096;

impl PrefetchQueue {
    /// Wakes every prefetch worker waiting for work (at unmount: they see the stop at once).
    pub(super) fn wake(&self) {
        let _pending = self.pending.lock_or_recover();
        self.ready.notify_all();
    }

    fn push(&self, sample: FileId, form: Form, job: &Arc<Job>) {
        let mut pending = self.pending.lock_or_recover();
        if pending.0.len() < PREFETCH_QUEUE_MAX && pending.1.insert(sample) {
            pending.0.push_back((sample, form, Arc::clone(job)));
            self.ready.notify_one();
        }
    }
    fn pop(&self, wait: Duration) -> Option<(FileId, Form, Arc<Job>)> {
        let mut pending = self.pending.lock_or_recover();
        if pending.0.is_empty() && !wait.is_zero() {
            pending = self.ready.wait_timeout_or_recover(pending, wait);
        }
        pending.0.pop_front()
    }
    fn done(&self, sample: FileId) {
        self.pending.lock_or_recover().1.remove(&sample);
    }
}

/// Names looked up under `jobs/` that were no job: each gets a pending code (with
/// [`PENDING_JOB`] set) for the inodes of its empty directory and of everything under it, so a
/// path into a job not made yet resolves, while a lookup makes nothing (no registry entry, no
/// `jobs.max` slot, nothing listed in `jobs/`); the first open inside makes the job. Bounded:
/// past [`PENDING_KEPT`] names the oldest is forgotten (its inodes then answer `ENOENT`, and the
/// kernel looks the name up again).
///
/// A supervised mount keeps them in a memory file the supervisor holds (issue 53): the kernel
/// keeps a pending name's inodes across a restart of the server (a reader's `jobs/j/augmented/c`
/// looked up before `j` was made), and the next server must still know what they name. Slot
/// `n % PENDING_KEPT` of the file holds the name given code `PENDING_JOB | n`: the one that
/// code's making pushed out of memory is the one its slot held.
#[derive(Default)]
pub(super) struct PendingNames {
    inner: Mutex<PendingInner>,
    kept: std::sync::OnceLock<std::fs::File>,
}

/// A kept pending name's slot: code (4), name's length (1), name (up to 255), checksum (4).
const PENDING_SLOT: u64 = 264;

#[derive(Default)]
struct PendingInner {
    by_name: HashMap<String, u32>,
    by_code: HashMap<u32, String>,
    order: VecDeque<u32>,
    next: u32,
}

/// Pending job names remembered at most.
const PENDING_KEPT: usize = 4096;

fn pending_check(code: u32, name: &[u8]) -> u32 {
    prepfs_base::hash::fnv1a64(&[&code.to_le_bytes(), name]) as u32
}

impl PendingNames {
    /// Keeps the names in `file` from now on, after putting back those an earlier server of
    /// this mount kept there. Called before serving.
    pub(super) fn keep_in(&self, file: std::fs::File) -> usize {
        use std::os::unix::fs::FileExt;
        let mut found: Vec<(u32, String)> = Vec::new();
        let mut slot = [0u8; PENDING_SLOT as usize];
        for i in 0..PENDING_KEPT as u64 {
            if file.read_exact_at(&mut slot, i * PENDING_SLOT).is_err() {
                break;
            }
            let code = u32::from_le_bytes([slot[0], slot[1], slot[2], slot[3]]);
            let len = usize::from(slot[4]);
            let name = &slot[5..5 + len];
            let sum = u32::from_le_bytes([slot[260], slot[261], slot[262], slot[263]]);
            if code & PENDING_JOB == 0 || sum != pending_check(code, name) {
                continue;
            }
            if let Ok(name) = std::str::from_utf8(name) {
                found.push((code, name.to_owned()));
            }
        }
        found.sort_by_key(|&(code, _)| code & !PENDING_JOB);
        let mut p = self.inner.lock_or_recover();
        for (code, name) in &found {
            p.by_name.insert(name.clone(), *code);
            p.by_code.insert(*code, name.clone());
            p.order.push_back(*code);
            p.next = p.next.max(code & !PENDING_JOB);
        }
        drop(p);
        let _ = self.kept.set(file);
        found.len()
    }

    /// Writes `name`'s code to its slot of the kept file, if any (outside the lock).
    fn keep(&self, code: u32, name: &str) {
        use std::os::unix::fs::FileExt;
        let Some(file) = self.kept.get() else { return };
        let bytes = name.as_bytes();
        if bytes.len() > 255 {
            return;
        }
        let mut slot = [0u8; PENDING_SLOT as usize];
        slot[..4].copy_from_slice(&code.to_le_bytes());
        slot[4] = bytes.len() as u8;
        slot[5..5 + bytes.len()].copy_from_slice(bytes);
        slot[260..].copy_from_slice(&pending_check(code, bytes).to_le_bytes());
        let at = u64::from(code & !PENDING_JOB) % PENDING_KEPT as u64 * PENDING_SLOT;
        if let Err(e) = file.write_at(&slot, at) {
            tracing::warn!(error = %e, "cannot keep a pending job name for the next server");
        }
    }

    /// The pending code of `name` (the same while it is remembered).
    fn code_of(&self, name: &str) -> u32 {
        let code = self.code_in_memory(name);
        if let Some(code) = code.1 {
            self.keep(code, name);
        }
        code.0
    }

    /// The code of `name`, and it again if it is new (to keep).
    fn code_in_memory(&self, name: &str) -> (u32, Option<u32>) {
        let mut p = self.inner.lock_or_recover();
        if let Some(&code) = p.by_name.get(name) {
            return (code, None);
        }
        if p.order.len() >= PENDING_KEPT {
            if let Some(old) = p.order.pop_front() {
                if let Some(n) = p.by_code.remove(&old) {
                    p.by_name.remove(&n);
                }
            }
        }
        p.next = (p.next % (PENDING_JOB - 1)) + 1;
        let code = PENDING_JOB | p.next;
        p.by_name.insert(name.to_owned(), code);
        p.by_code.insert(code, name.to_owned());
        p.order.push_back(code);
        (code, Some(code))
    }

    /// The name a pending code stands for, while remembered.
    fn name_of(&self, code: u32) -> Option<String> {
        self.inner.lock_or_recover().by_code.get(&code).cloned()
    }
}

/// Whether a view's job code is a pending name's.
pub(super) fn is_pending(code: u32) -> bool {
    code & PENDING_JOB != 0
}

impl Filesystem {
    /// The active job whose inodes carry `code`, marked active now.
    pub(super) fn job(&self, code: u32) -> Result<Arc<Job>> {
        let job = self.jobs.by_code(code).ok_or(Error::NotFound)?;
        job.touch(self.jobs.now_ms());
        Ok(job)
    }

    /// The job a view's inodes name, for `caller`: the active job of a real code; for a pending
    /// code, the job of its name if one exists, else one made now for `caller` when `make` (an
    /// open inside it), else `None`. Another user's job reached through a pending name is refused
    /// as its directory would refuse it (`EACCES`).
    pub(super) fn job_for(&self, code: u32, caller: Caller, make: bool) -> Result<Option<Arc<Job>>> {
        if !is_pending(code) {
            return self.job(code).map(Some);
        }
        let name = self.pending.name_of(code).ok_or(Error::NotFound)?;
        let job = match self.jobs.by_name(&name) {
            Some(job) => job,
            None if make => self.jobs.get_or_create(name.as_bytes(), self.requester(caller))?,
            None => return Ok(None),
        };
        self.check_may_join(&job, caller)?;
        job.touch(self.jobs.now_ms());
        Ok(Some(job))
    }

    /// The one rule of who may use a job, as its directory (mode 0500, its owner's) says:
    /// its owner, or root.
    pub(super) fn check_may_join(&self, job: &Job, caller: Caller) -> Result<()> {
        if job.owner() == caller.uid || caller.uid == 0 {
            Ok(())
        } else {
            Err(Error::Denied)
        }
    }

    /// The node `jobs/<name>` names: the job's directory if it exists, else the pending name's
    /// (a lookup makes no job). A name no job could have is refused (`EINVAL`, `ENAMETOOLONG`).
    pub(super) fn job_root_named(&self, name: &OsStr) -> Result<Node> {
        let name = check_name(name.as_bytes())?;
        Ok(match self.jobs.by_name(name) {
            Some(job) => Node::JobRoot(job.code()),
            None => Node::JobRoot(self.pending.code_of(name)),
        })
    }

    /// The name of the job a pending code stands for, and that job if it exists now.
    pub(super) fn pending_job(&self, code: u32) -> Result<Option<Arc<Job>>> {
        let name = self.pending.name_of(code).ok_or(Error::NotFound)?;
        Ok(self.jobs.by_name(&name))
    }

    /// Makes a job: `mkdir jobs/<name>`. Anything else is read-only. (Through the kernel this
    /// is reached only for a name whose lookup failed: a lookup answers every valid name, so
    /// `mkdir` sees it exist first; see [`PendingNames`].)
    pub fn mkdir(&self, parent: u64, name: &OsStr, caller: Caller) -> Result<Attr> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let job = self.jobs.get_or_create(name.as_bytes(), self.requester(caller))?;
        self.attr_of(Node::JobRoot(job.code()))
    }

    /// Retires a job: `rmdir jobs/<name>` frees its state now rather than after its idle time.
    /// Anything else is read-only.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> Result<()> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let name = name.to_str().ok_or(Error::NotFound)?;
        self.end_job(name)
    }

    /// Resets job `name` for `caller` (its owner, or root) as `rmdir jobs/<name>` does, but
    /// through the loader socket (`prepfs job reset`), which a read-only mount still answers.
    pub fn reset_job(&self, name: &str, caller: Caller) -> Result<()> {
        let job = self.jobs.by_name(name).ok_or(Error::NotFound)?;
        self.check_may_join(&job, caller)?;
        self.end_job(name)
    }

    /// The one rule of a job's end: retired here, a fresh epoch begun on every mount sharing
    /// it, its uses of the kept outputs forgotten.
    fn end_job(&self, name: &str) -> Result<()> {
        let job = self.jobs.retire(name).ok_or(Error::NotFound)?;
        job.restart_everywhere();
        self.forget_job(&job);
        tracing::info!(job = name, "job reset: its next reader begins epoch 1");
        Ok(())
    }

    /// Whether a node takes changes (only `jobs/`, for mkdir and rmdir).
    pub fn accepts_changes(&self, ino: u64) -> bool {
        Node::from_ino(ino) == Some(Node::JobsDir)
    }

    /// Queues the next samples of the job's listing of `dir` for preparation (the prefetch
    /// window, bounded again by what the cache has room for when the work runs).
    pub(super) fn queue_prefetch(&self, job: &Arc<Job>, form: Form, dir: DirId, requested: FileId) {
        let window = self.config().jobs.prefetch_window;
        if window == 0 || !self.cache().enabled() {
            return;
        }
        for sample in job.prefetch_candidates(dir, requested, window, |c| self.cache.rank(c, form) > 0) {
            self.prefetch.push(sample, form, job);
        }
    }

    /// One unit of background refill of every pipeline's kept outputs, as when readers pause:
    /// samples some reader has not seen (any sample, with no readers), then the others. Returns
    /// false when there is nothing to do.
    #[cfg(test)]
    pub(crate) fn refill_once(&self, cursor: &mut usize) -> bool {
        self.refill_lane_once(cursor, (0, 1), RefillScope::Any)
    }

    /// What the background refill may work on now for `augmented/` (each pipeline has its own
    /// pacer: [`Filesystem::refill_lane`]), on the refill's clock at `now` (tests pass time in).
    #[cfg(test)]
    pub(crate) fn refill_scope_at(&self, now: std::time::Duration) -> Option<RefillScope> {
        self.producer.refill_scope_at(0, now)
    }

    /// Whether the background refill may work at all: not with `cache.refill: false`; with
    /// `true` (the default) once a reader has come, so an idle mount spends no CPU; with `warm`
    /// from the mount on.
    pub(crate) fn refill_may_start(&self) -> bool {
        match self.config().cache.refill {
            RefillWhen::Off => false,
            RefillWhen::AfterFirstRead => self.reader_seen.load(Ordering::Relaxed),
            RefillWhen::FromMount => true,
        }
    }

    /// A reader has come (an open of a sample's file, or a loader's batch): the refill may start.
    pub(super) fn note_reader(&self) {
        // A load first: every open passes here, and only the first may write the flag.
        if self.reader_seen.load(Ordering::Relaxed) {
            return;
        }
        if !self.reader_seen.swap(true, Ordering::Relaxed) && self.config().cache.refill == RefillWhen::AfterFirstRead {
            tracing::info!("a reader came: the background refill starts");
        }
    }

    /// One unit of a refill worker's work (its samples: `lane`): for the pipelines (`augmented/`
    /// and each recipe, the emptiest stock first), what each one's pacer lets it work on now:
    /// anything when its readers have paused; while they take its outputs, only once its stock
    /// has fallen below its low-water mark (and then until it is full), and only what their
    /// pass still needs. Returns false when no pipeline had work.
    pub fn refill_lane(&self, cursor: &mut usize, lane: (usize, usize)) -> bool {
        if !self.refill_may_start() || self.refill_left_to_workers() {
            return false;
        }
        let jobs = self.jobs.active();
        self.producer.refill_order().into_iter().any(|pipeline| {
            self.producer.refill_scope(pipeline).is_some_and(|scope| self.refill_pipeline_once(pipeline, &jobs, cursor, lane, scope))
        })
    }

    /// [`Filesystem::refill_lane`] with every pipeline under `scope` (tests set the scope).
    #[cfg(test)]
    pub(crate) fn refill_lane_once(&self, cursor: &mut usize, lane: (usize, usize), scope: RefillScope) -> bool {
        let jobs = self.jobs.active();
        self.producer.refill_order().into_iter().any(|pipeline| self.refill_pipeline_once(pipeline, &jobs, cursor, lane, scope))
    }

    /// One unit of refill of `pipeline` (0: `augmented/`, else the recipe's number) for one of
    /// several refill workers: the samples of `lane`. First the samples still to come in this
    /// pass: with jobs reading the pipeline, those some job has not seen this epoch there;
    /// without, those its top-level readers have not read in this pass (so the refill works
    /// ahead of the readers). When each of those has an output and room is left, and `scope`
    /// allows (readers have paused), the others, for the next pass: readers that take part of the
    /// set per pass (a subset sampler), or an epoch that begins with room to spare, then find them
    /// made. While readers take outputs, the next pass's would only take their cores.
    /// A recipe no one has read yet gets none: its outputs may never be wanted, and the cores
    /// are the readers'.
    fn refill_pipeline_once(&self, pipeline: u8, jobs: &[Arc<Job>], cursor: &mut usize, lane: (usize, usize), scope: RefillScope) -> bool {
        if pipeline != 0 && self.stats().pipeline(pipeline).opens() == 0 {
            return false;
        }
        // The readers of the pipeline: the jobs themselves in augmented/, their states in a
        // recipe's view (those that read it).
        // Samples asked of `prepfs worker`s are theirs to make.
        let to_come = |f: FileId| self.still_to_come(pipeline, jobs, f) && !self.asked_of_workers(pipeline, f);
        self.producer.refill_once(pipeline, cursor, lane, to_come)
            || (scope == RefillScope::Any && self.producer.refill_once(pipeline, cursor, lane, |f| !self.asked_of_workers(pipeline, f)))
    }

    /// Runs queued prefetch work until the queue stays empty for `wait` (or at once with a zero
    /// `wait`, returning when it is empty). Returns how many samples it prepared.
    pub fn run_prefetch(&self, wait: Duration, stop: &AtomicBool) -> usize {
        let mut prepared = 0;
        while !stop.load(Ordering::Relaxed) {
            let Some((sample, form, job)) = self.prefetch.pop(wait) else { break };
            if !job.has_seen(sample) && self.producer.prepare(sample, form) {
                bump(&job.counters.prefetched, 1);
                prepared += 1;
            }
            self.prefetch.done(sample);
        }
        prepared
    }

    /// The used-by bits of the active jobs whose state in pipeline `pipeline`'s view (0:
    /// `augmented/`, the jobs themselves; else the recipe's, of the jobs that read it) has not
    /// been served `sample` this epoch.
    pub(super) fn jobs_needing(&self, pipeline: u8, sample: FileId) -> u64 {
        needing(&states_in(&self.jobs.active(), pipeline), sample)
    }

    /// How `job` (its state in pipeline `pipeline`'s view) takes an output of `sample`: one it
    /// has not used, and a miss's kept for the other jobs that still need the sample there (an
    /// output kept for a job that has seen the sample would wait an epoch, clogging the room).
    pub(super) fn job_consumer(&self, job: &Job, pipeline: u8, sample: FileId) -> Consumer {
        let others = self.jobs_needing(pipeline, sample) & !job.bit();
        Consumer::Job { bit: job.bit(), active: others | job.bit() }
    }

    /// Drops the outputs (of every pipeline) kept for jobs that have all been served their
    /// sample in that pipeline's view since (by another path): they would wait an epoch for a
    /// taker, taking room from outputs that can be shared now. Outputs no job has used yet stay.
    /// Returns how many were dropped.
    pub fn drop_outputs_no_job_needs(&self) -> u64 {
        let jobs = self.jobs.active();
        if jobs.is_empty() {
            return 0;
        }
        let cache = self.cache();
        let drop_in = |pipeline: u8| {
            let states = states_in(&jobs, pipeline);
            let store = cache.outputs(pipeline);
            store.map_or(0, |s| s.retain(|id, entry| entry.used_by == 0 || needing(&states, id) & !entry.used_by != 0))
        };
        (0..cache.pipelines()).map(drop_in).sum()
    }

    /// Retires the jobs idle past `jobs.idle_timeout`; returns how many.
    pub fn retire_idle_jobs(&self) -> usize {
        let idle_ms = (self.config().jobs.idle_timeout_s * 1000.0) as u64;
        let retired = self.jobs.retire_idle(self.jobs.now_ms(), idle_ms);
        for job in &retired {
            self.forget_job(job);
        }
        retired.len()
    }

    /// What retiring `job` frees in the cache: its uses of every pipeline's outputs.
    fn forget_job(&self, job: &Job) {
        let dropped = self.cache().forget_job(job.bit(), self.jobs.active_mask());
        tracing::info!(job = job.name(), outputs_dropped = dropped, "job state freed");
    }
}

/// The used-by bits of the job states in `states` that have not been served `sample` this epoch.
fn needing(states: &[Arc<Job>], sample: FileId) -> u64 {
    states.iter().filter(|j| !j.has_seen(sample)).fold(0, |m, j| m | j.bit())
}
