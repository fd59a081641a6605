//! An open in a job's view, read top to bottom: the job made or found, then a loop of choose
//! (opportunistic sampling picks the requested sample or a cached, unseen one of its directory,
//! never one known bad where the view hides them), resolve (a substitute like the requested
//! sample: nothing stale is served), check (a substitute only where the caller may read it),
//! produce (the chosen form, shared with the other jobs that still need it) and, on a failure,
//! retry (a bad sample or a forbidden substitute passed over, at most [`BAD_SKIPS_PER_OPEN`]
//! times; a failed substitute replaced once); the bytes then pinned to the handle. The loader
//! socket's choice within an epoch ([`Filesystem::choose_within_epoch`]) is here too.

use std::borrow::Cow;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::handles::{Handle, HandleData, Served};
use super::{Caller, Filesystem, View};
use prepfs_cache::{Origin, SampleCache};
use crate::error::{Error, Result};
use crate::stats::latency::Outcome;
use prepfs_sampling::{Choice, Job, Jobs};
use prepfs_cache::form::Form;
use prepfs_source::catalog::FileId;
use prepfs_source::Sample;
use crate::stats::bump;

/// Bad samples one open of a job view passes over before it gives up with `EIO` (a directory
/// whose every sample is bad).
const BAD_SKIPS_PER_OPEN: u32 = 16;

impl Filesystem {
    /// An open in a job's view: opportunistic sampling chooses the sample (the requested one, or
    /// an unseen one of the same directory that is cached), prefetch is queued along the job's
    /// listing, and the chosen sample's bytes are pinned to the handle (with whether it was a hit).
    /// `given_before`: the sample an earlier try of this very request was given (the kernel sent
    /// it again after a server died): given again, whatever the job's epoch says of it.
    pub(super) fn open_in_job(&self, ino: u64, view: View, requested: Sample, caller: Caller, mut given_before: Option<FileId>) -> Result<(Arc<Handle>, Outcome)> {
        // An open inside a pending name's view makes its job.
        let job = self.job_for(view.job, caller, true)?.ok_or(Error::NotFound)?;
        bump(&job.counters.opens, 1);
        // PIL's second open of a path it holds open (to try mmap) sees the same content.
        if let Some(live) = self.shared(ino) {
            return Ok((live, Outcome::Hit));
        }
        let catalog = self.catalog();
        if !catalog.is_image(requested.id) {
            // Not a sample (a README in encoded/): served as it is, outside the job's epochs.
            let (bytes, origin) = self.producer.encoded(&requested)?;
            let handle = self.pin(HandleData::bytes(bytes, view.form, None), caller)?;
            return Ok((self.share(ino, handle), Outcome::served(origin.is_miss())));
        }
        let dir = catalog.file_dir(requested.id);
        let samples = catalog.images(dir);
        // In a recipe's view the job samples with its state there (its own epoch); its figures
        // stay the job's.
        let parent = Arc::clone(&job);
        let job = self.job_in_view(&job, view);
        self.queue_prefetch(&job, view.cached_form(), dir, requested.id);
        // A substitute that cannot be served is replaced, once, rather than fail the request; a
        // sample found bad (where the view hides them) or a substitute the caller may not read
        // is passed over ([`Filesystem::choose_again_after`]).
        let (mut retried, mut bad_skips) = (false, 0);
        loop {
            let choice = match given_before.take() {
                Some(sample) => Choice { sample, substituted: sample != requested.id, claimed: false },
                None => self.choose_in_job(&job, view, requested.id, samples),
            };
            let served = Served { job: Arc::clone(&job), sample: choice.sample, claimed: choice.claimed, read: AtomicBool::new(false) };
            // A substitute is resolved like the requested sample: nothing stale is served.
            // and only what the caller may read (the kernel checked the requested file).
            let resolved = if choice.substituted {
                self.resolve(choice.sample).and_then(|s| self.check_substitute(&s.meta, caller).map(|()| Cow::Owned(s)))
            } else {
                Ok(Cow::Borrowed(&requested))
            };
            let produced = resolved.and_then(|sample| match view.form {
                // Shared with the jobs that still need this sample this epoch in this view
                // (`augmented/` or the recipe's).
                Form::Augmented => self.producer.output(view.recipe, &sample, self.job_consumer(&job, view.recipe, sample.id)),
                Form::Decoded => self.producer.decoded(&sample),
                Form::Encoded => self.producer.encoded(&sample).map(|(bytes, origin)| (bytes.into(), origin)),
            });
            let (bytes, origin) = match produced {
                Ok(out) => out,
                Err(e) => {
                    // A sample that cannot be served counts as the job's (its epoch can end).
                    job.mark_served(choice.sample, choice.claimed);
                    drop(served);
                    if self.choose_again_after(&job, view, &e, choice.substituted, &mut bad_skips) {
                        continue;
                    }
                    if !choice.substituted || retried {
                        return Err(e);
                    }
                    retried = true;
                    continue;
                }
            };
            let c = &parent.counters;
            bump(
                match origin {
                    Origin::Augmented => &c.hits_augmented,
                    Origin::Decoded => &c.hits_decoded,
                    Origin::Encoded => &c.hits_encoded,
                    Origin::Disk | Origin::Remote | Origin::Source => &c.misses,
                },
                1,
            );
            if choice.substituted {
                bump(&c.substitutions, 1);
            }
            // The cache is the jobs' window: bytes and pixels no other job needs this epoch (in
            // any view it reads: the recipes share them) make room first, however this job was
            // served (an augmented output is dropped once its jobs have used it).
            if !self.needed_elsewhere(&parent, view, choice.sample) {
                self.cache().done_with(choice.sample);
            }
            let handle = self.pin(HandleData::bytes(bytes, view.form, Some(served)), caller)?;
            return Ok((self.share(ino, handle), Outcome::served(origin.is_miss())));
        }
    }

    /// What an open of `requested` in `job`'s `view` serves (ODS's choice), never a sample
    /// known bad where the view hides them.
    pub(super) fn choose_in_job(&self, job: &Job, view: View, requested: FileId, dir_samples: &[FileId]) -> Choice {
        let rank = |c: FileId| if self.reader.known_bad(c) { 0 } else { self.preference_in(view, c, job.bit()) };
        if self.hidden(view, requested) {
            bump(&job.counters.bad_skipped, 1);
        }
        let start = Jobs::scan_start(dir_samples.len());
        let top = SampleCache::top_preference(view.form);
        let ods = self.config().jobs.ods;
        job.choose_usable(requested, dir_samples, rank, top, start, ods, |c| self.hidden(view, c))
    }

    /// [`Filesystem::choose_in_job`] for a reader that walks the epoch itself (the loader
    /// socket): never begins the job's next epoch; an unclaimed choice says the request's
    /// directory has nothing left.
    pub(super) fn choose_within_epoch(&self, job: &Job, epoch: u64, view: View, requested: FileId, dir_samples: &[FileId]) -> Choice {
        let rank = |c: FileId| if self.reader.known_bad(c) { 0 } else { self.preference_in(view, c, job.bit()) };
        let start = Jobs::scan_start(dir_samples.len());
        let top = SampleCache::top_preference(view.form);
        job.choose_within_epoch(epoch, requested, dir_samples, rank, top, start, |c| self.hidden(view, c))
    }

    /// Whether an open in `job`'s `view` whose chosen sample failed with `err` chooses again
    /// (the failed sample now counts as the job's for this epoch, so the next choice passes
    /// over it): a sample found bad where the view hides bad samples, or a substitute the
    /// caller may not read (`fs::access`); `skips` (counted here) stays within
    /// [`BAD_SKIPS_PER_OPEN`].
    pub(super) fn choose_again_after(&self, job: &Job, view: View, err: &Error, substituted: bool, skips: &mut u32) -> bool {
        let bad = matches!(err, Error::Decode { .. }) && self.hides_bad(view);
        let denied = matches!(err, Error::Denied) && substituted;
        if !(bad || denied) || *skips >= BAD_SKIPS_PER_OPEN {
            return false;
        }
        *skips += 1;
        if bad {
            bump(&job.counters.bad_skipped, 1);
        }
        true
    }
}
