//! The jobs' side of the core: mkdir and rmdir under `jobs/`, the job a job view's inode names,
//! prefetch along a job's listing ([`PrefetchQueue`], [`Filesystem::run_prefetch`]), which samples
//! the refill prepares, and freeing what retired or served-out jobs hold in the cache.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Attr, Caller, Filesystem, Node};
use crate::error::{Error, Result};
use crate::sampling::Job;
use crate::shared::Form;
use crate::source::catalog::{DirId, FileId};
use crate::stats::bump;
use crate::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// Samples waiting to be prepared ahead of the jobs that will read them.
#[derive(Default)]
pub(super) struct PrefetchQueue {
    pending: Mutex<(VecDeque<(FileId, Form, Arc<Job>)>, HashSet<FileId>)>,
    ready: Condvar,
}

/// Prefetch work queued at most (the rest is dropped: the window bounds it anyway).
const PREFETCH_QUEUE_MAX: usize = 4096;

impl PrefetchQueue {
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

impl Filesystem {
    /// The active job whose inodes carry `code`, marked active now.
    pub(super) fn job(&self, code: u32) -> Result<Arc<Job>> {
        let job = self.jobs.by_code(code).ok_or(Error::NotFound)?;
        job.touch(self.jobs.now_ms());
        Ok(job)
    }

    /// Makes a job: `mkdir jobs/<name>` (a lookup makes one too). Anything else is read-only.
    pub(crate) fn mkdir(&self, parent: u64, name: &OsStr, caller: Caller) -> Result<Attr> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let job = self.jobs.get_or_create(name.as_bytes(), self.requester(caller))?;
        self.attr_of(Node::JobRoot(job.code()))
    }

    /// Retires a job: `rmdir jobs/<name>` frees its state now rather than after its idle time.
    /// Anything else is read-only.
    pub(crate) fn rmdir(&self, parent: u64, name: &OsStr) -> Result<()> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let name = name.to_str().ok_or(Error::NotFound)?;
        let job = self.jobs.retire(name).ok_or(Error::NotFound)?;
        self.forget_job(&job);
        Ok(())
    }

    /// Whether a node takes changes (only `jobs/`, for mkdir and rmdir).
    pub(crate) fn accepts_changes(&self, ino: u64) -> bool {
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

    /// One unit of background refill of the augmented cache, with samples some active job has not
    /// seen (any sample, with no jobs). Returns false when there is nothing to do.
    #[cfg(test)]
    pub(crate) fn refill_once(&self, cursor: &mut usize) -> bool {
        self.refill_lane_once(cursor, (0, 1))
    }

    /// [`Filesystem::refill_once`] for one of several refill workers: the samples of `lane`.
    /// With jobs, the samples some job has not seen this epoch; without, those top-level readers
    /// have not read in this pass (so the refill works ahead of them, not on the next pass).
    pub(crate) fn refill_lane_once(&self, cursor: &mut usize, lane: (usize, usize)) -> bool {
        let jobs = self.jobs.active();
        self.producer.refill_once(cursor, lane, |f| {
            if jobs.is_empty() {
                !self.top_pass.has_seen(f)
            } else {
                jobs.iter().any(|j| !j.has_seen(f))
            }
        })
    }

    /// Runs queued prefetch work until the queue stays empty for `wait` (or at once with a zero
    /// `wait`, returning when it is empty). Returns how many samples it prepared.
    pub(crate) fn run_prefetch(&self, wait: Duration, stop: &AtomicBool) -> usize {
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

    /// The used-by bits of the active jobs that have not been served `sample` this epoch.
    pub(super) fn jobs_needing(&self, sample: FileId) -> u64 {
        self.jobs.active().iter().filter(|j| !j.has_seen(sample)).fold(0, |m, j| m | j.bit())
    }

    /// Drops the augmented outputs kept for jobs that have all been served their sample since
    /// (by another path): they would wait an epoch for a taker, taking room from outputs that
    /// can be shared now. Outputs no job has used yet stay. Returns how many were dropped.
    pub(crate) fn drop_outputs_no_job_needs(&self) -> u64 {
        if self.jobs.active().is_empty() {
            return 0;
        }
        self.cache().augmented.retain(|id, entry| entry.used_by == 0 || self.jobs_needing(id) & !entry.used_by != 0)
    }

    /// Retires the jobs idle past `jobs.idle_timeout`; returns how many.
    pub(crate) fn retire_idle_jobs(&self) -> usize {
        let idle_ms = (self.config().jobs.idle_timeout_s * 1000.0) as u64;
        let retired = self.jobs.retire_idle(idle_ms);
        for job in &retired {
            self.forget_job(job);
        }
        retired.len()
    }

    /// What retiring `job` frees in the cache: its uses of augmented outputs.
    fn forget_job(&self, job: &Job) {
        let dropped = self.cache().forget_job(job.bit(), self.jobs.active_mask());
        tracing::info!(job = job.name(), outputs_dropped = dropped, "job state freed");
    }
}
