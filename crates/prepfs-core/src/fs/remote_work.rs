//! The filesystem's half of preprocessing on other machines' CPUs (issue 52): one round of the
//! mount's remote-work loop ([`Filesystem::remote_work_round`], run by the mount's
//! `prepfs-remote-work` thread): the results that arrived kept in the stocks the readers take
//! from, then, where the placement says to ask, new items chosen along what the readers will
//! want, as the refill chooses (`jobs.rs`). The bookkeeping is `crate::remote_work`'s.

use std::sync::Arc;
use std::time::Duration;

use super::recipes::states_in;
use super::Filesystem;
use crate::remote_work::Decision;
use prepfs_cache::HELD_AUGMENTED;
use prepfs_sampling::Job;
use prepfs_source::catalog::FileId;

/// Samples one round looks at per pipeline, at most, for the items it asks.
const LOOK_PER_ROUND: usize = 4096;

impl Filesystem {
    /// Whether this mount can ask `prepfs worker`s (it has a remote tier): the mount then runs
    /// the remote-work loop.
    pub fn has_remote_work(&self) -> bool {
        self.remote_work.is_some()
    }

    /// One round of the remote-work loop: waits up to `wait` for results, keeps those that
    /// came, and asks for more where the placement says so. Returns whether anything arrived or
    /// was asked. Nothing without a remote tier.
    pub fn remote_work_round(&self, wait: Duration) -> bool {
        let Some(work) = &self.remote_work else { return false };
        let mut happened = false;
        for (asked, result) in work.receive(wait) {
            happened = true;
            // Only for the version asked: a file changed since gets nothing made of its old bytes.
            let current = self.reader.resolve(asked.id).is_ok_and(|(s, _)| {
                s.meta.identity.len == asked.len && s.meta.identity.mtime_ns == asked.mtime_ns
            });
            let late = !self.still_to_come(asked.pipeline, &self.jobs.active(), asked.id);
            let kept = current && self.producer.keep_worker_output(asked.pipeline, asked.id, result.output());
            work.arrived(late, kept);
        }
        let made_at_open: u64 = (0..self.cache().pipelines()).map(|p| crate::stats::get(&self.stats().pipeline(p).made_at_open)).sum();
        let stock_low = (0..self.cache().pipelines()).any(|p| self.pipeline_is_read(p) && self.producer.stock_is_low(p));
        // As the refill: once a reader has come (an idle mount asks nothing), or from the mount
        // on with `cache.refill: warm`; whether or not this mount refills itself.
        let readers_came = self.reader_seen.load(std::sync::atomic::Ordering::Relaxed) || self.config().cache.refill == crate::config::RefillWhen::FromMount;
        if let Decision::Ask(_) = work.decide(readers_came, made_at_open, stock_low) {
            let room = work.room();
            if room > 0 {
                happened |= self.ask_workers(room) > 0;
            }
        }
        happened
    }

    /// Asks workers for up to `n` outputs, the emptiest stock's pipeline first, of samples its
    /// readers have still to come to (as the refill's first choice), none held, asked, loading
    /// or known bad. Returns how many were asked.
    fn ask_workers(&self, n: usize) -> usize {
        let Some(work) = &self.remote_work else { return 0 };
        let jobs = self.jobs.active();
        let catalog = self.catalog();
        let files = catalog.file_count();
        let mut items = Vec::new();
        for pipeline in self.producer.refill_order() {
            if !self.pipeline_is_read(pipeline) {
                continue;
            }
            let Some(store) = self.cache().outputs(pipeline) else { continue };
            let out_len = self.producer.recipe_out_len(pipeline);
            let held = |f: FileId| if pipeline == 0 { self.cache().status.held(f) & HELD_AUGMENTED != 0 } else { store.contains(f) };
            let start = work.cursor(pipeline, 0);
            let mut looked = 0;
            while items.len() < n && looked < LOOK_PER_ROUND.min(files) {
                // Offset by half the set, as the refill is: readers in name order start at the
                // beginning, so the asks run ahead of them.
                let file = ((start + looked + files / 2) % files) as FileId;
                looked += 1;
                if !catalog.is_image(file) || held(file) || work.is_asked(pipeline, file) || self.reader.known_bad(file) {
                    continue;
                }
                if self.producer.loading(file) || !self.still_to_come(pipeline, &jobs, file) {
                    continue;
                }
                // Room for what is asked and not yet in: the outputs must fit when they come.
                if !store.has_room_for(out_len * (items.len() as u64 + 1)) {
                    break;
                }
                let Ok((sample, _)) = self.reader.resolve(file) else { continue };
                items.push(self.producer.work_item(pipeline, &sample, work.next_item()));
            }
            work.cursor(pipeline, looked);
            if items.len() >= n {
                break;
            }
        }
        work.ask(items)
    }

    /// Whether pipeline `pipeline`'s readers have still to come to `file` in their pass: with
    /// jobs reading it, some job has not seen it this epoch; without, its top-level readers have
    /// not read it in this pass.
    pub(super) fn still_to_come(&self, pipeline: u8, jobs: &[Arc<Job>], file: FileId) -> bool {
        let states = states_in(jobs, pipeline);
        if states.is_empty() {
            self.top_pass_of(pipeline).is_none_or(|p| !p.has_seen(file))
        } else {
            states.iter().any(|j| !j.has_seen(file))
        }
    }

    /// Whether any reader has opened pipeline `pipeline`'s files (0: `augmented/`'s, else the
    /// recipe's): outputs of a view no one reads may never be wanted.
    pub(super) fn pipeline_is_read(&self, pipeline: u8) -> bool {
        self.stats().pipeline(pipeline).opens() > 0
    }

    /// Whether samples asked of workers in `pipeline` are left to them by the refill.
    pub(super) fn asked_of_workers(&self, pipeline: u8, file: FileId) -> bool {
        self.remote_work.as_ref().is_some_and(|w| w.is_asked(pipeline, file))
    }

    /// Whether this mount's own refill leaves the cores to the job (`placement: remote`, a
    /// worker alive).
    pub(super) fn refill_left_to_workers(&self) -> bool {
        self.remote_work.as_ref().is_some_and(|w| w.refill_is_remote())
    }

    /// The remote work's series for the metrics (`None` without a remote tier).
    pub(super) fn remote_work_figures(&self) -> Option<crate::metrics::RemoteWorkFigures> {
        let work = self.remote_work.as_ref()?;
        Some(crate::metrics::RemoteWorkFigures {
            items: work.counts().to_vec(),
            bytes: work.bytes_received(),
            workers: work.workers_seen().into_iter().map(|(w, ago)| (w.name, w.host, w.rate, ago)).collect(),
        })
    }

    /// The `remote_work` section of stats.json (null without a remote tier).
    pub(super) fn remote_work_stats(&self) -> serde_json::Value {
        self.remote_work.as_ref().map_or(serde_json::Value::Null, |w| w.stats())
    }
}
