//! Samples known bad as the views show them (`bad_samples` in the config): which views hide
//! them ([`Filesystem::hides_bad`]: job views by default, every view with `hide: all`), a job's
//! choice that never hands one out and chooses again when the sample it picked turns out bad
//! (or is a substitute the caller may not read: `fs::access`) ([`Filesystem::choose_in_job`],
//! [`Filesystem::choose_again_after`]), and the mount-time
//! validation (`validate: headers | scan`, [`Filesystem::validate_samples`]).
//!
//! The record of which samples are bad, and why, is the reader's (`source::SampleReader`:
//! marked once, listed in `stats.json`'s `bad_samples`, forgotten when the file changes); this
//! module only reads it.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::{Filesystem, View};
use crate::cache::SampleCache;
use crate::config::{HideBad, Validate};
use crate::error::Error;
use crate::sampling::{Choice, Job, Jobs};
use crate::source::catalog::FileId;
use crate::stats::bump;

/// Bad samples one open of a job view passes over before it gives up with `EIO` (a directory
/// whose every sample is bad).
const BAD_SKIPS_PER_OPEN: u32 = 16;

impl Filesystem {
    /// Whether `view` hides the samples known bad from its listings and never serves one.
    pub(super) fn hides_bad(&self, view: View) -> bool {
        match self.config().bad_samples.hide {
            HideBad::None => false,
            HideBad::Jobs => view.job != 0,
            HideBad::All => true,
        }
    }

    /// Whether `view`'s listings leave `sample` out.
    pub(super) fn hidden(&self, view: View, sample: FileId) -> bool {
        self.hides_bad(view) && self.reader.known_bad(sample)
    }

    /// What an open of `requested` in `job`'s `view` serves (ODS's choice), never a sample
    /// known bad where the view hides them.
    pub(super) fn choose_in_job(&self, job: &Job, view: View, requested: FileId, dir_samples: &[FileId]) -> Choice {
        let rank = |c: FileId| if self.reader.known_bad(c) { 0 } else { self.cache.preference(c, view.form, job.bit()) };
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
    pub(super) fn choose_within_epoch(&self, job: &Job, view: View, requested: FileId, dir_samples: &[FileId]) -> Choice {
        let rank = |c: FileId| if self.reader.known_bad(c) { 0 } else { self.cache.preference(c, view.form, job.bit()) };
        let start = Jobs::scan_start(dir_samples.len());
        let top = SampleCache::top_preference(view.form);
        job.choose_within_epoch(requested, dir_samples, rank, top, start, |c| self.hidden(view, c))
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

    /// Checks every sample at mount, as `bad_samples.validate` says (nothing for `first-touch`):
    /// the header of each (`headers`), or each read and fully decoded (`scan`), on the fill
    /// pool (`prepfs-fill-<i>`). Those found bad are marked (one log line each, listed in
    /// `stats.json`). `done` is told of every sample checked; `stop` ends the work early.
    /// Returns how many samples are known bad afterwards.
    pub(crate) fn validate_samples(&self, done: impl Fn() + Sync, stop: &AtomicBool) -> usize {
        let mode = self.config().bad_samples.validate;
        if mode == Validate::FirstTouch {
            return 0;
        }
        let catalog = self.catalog();
        let max_pixels = self.config().max_pixels;
        let samples: Vec<FileId> = (0..catalog.dir_count() as u32).flat_map(|d| catalog.images(d).to_vec()).collect();
        self.fill.install(|| samples.par_iter().for_each(|&id| {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            // A failure is marked bad where it is found (the reader, the producer); other
            // failures (a source I/O error) are not the sample's and are found again at open.
            let _ = match mode {
                Validate::Headers => self.producer.check_header(id, max_pixels),
                _ => self.resolve(id).and_then(|sample| self.producer.check_decodes(&sample)),
            };
            done();
        }));
        samples.iter().filter(|&&id| self.reader.known_bad(id)).count()
    }
}
