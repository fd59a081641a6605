//! Samples known bad as the views show them (`bad_samples` in the config): which views hide
//! them ([`Filesystem::hides_bad`]: job views by default, every view with `hide: all`; a job's
//! open passes over them, `fs/job_open.rs`), and the mount-time validation (`validate: headers |
//! scan`, [`Filesystem::validate_samples`]).
//!
//! The record of which samples are bad, and why, is the reader's (`sample_reader::SampleReader`:
//! marked once, listed in `stats.json`'s `bad_samples`, forgotten when the file changes); this
//! module only reads it.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::{Filesystem, View};
use crate::config::{HideBad, Validate};
use prepfs_source::catalog::FileId;

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

    /// Checks every sample at mount, as `bad_samples.validate` says (nothing for `first-touch`):
    /// the header of each (`headers`), or each read and fully decoded (`scan`), on the fill
    /// pool (`prepfs-fill-<i>`). Those found bad are marked (one log line each, listed in
    /// `stats.json`). `done` is told of every sample checked; `stop` ends the work early.
    /// Returns how many samples are known bad afterwards.
    pub fn validate_samples(&self, done: impl Fn() + Sync, stop: &AtomicBool) -> usize {
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
