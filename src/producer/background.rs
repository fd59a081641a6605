//! Background work through the serving path, below the priority of requests: the refill (fresh
//! augmentations into free augmented room) and prefetch (a sample made cached for a view before
//! a job asks). The threads that run it are the mount's (`crate::mount`); what is wanted is the
//! jobs' (`crate::fs`): here is only the unit of work.

use crate::cache::{Admit, AugmentedEntry, HELD_AUGMENTED};
use crate::shared::Form;
use crate::source::catalog::FileId;
use crate::stats::bump;

use super::{Consumer, SampleProducer};

impl SampleProducer {
    /// One unit of background refill: a fresh augmentation into free augmented room of a sample
    /// `wanted` (some job has not seen it), made from the decoded or encoded cache when they hold
    /// it, else from the source. Workers share the samples out by `lane` of `lanes` (sample ids
    /// equal to `lane` modulo `lanes`), so they never make the same one. Returns false when there
    /// is nothing to do (no room, or every wanted sample of the lane already has one).
    pub(crate) fn refill_once(&self, cursor: &mut usize, (lane, lanes): (usize, usize), wanted: impl Fn(FileId) -> bool) -> bool {
        let cache = self.tiers.memory();
        if !cache.augmented.has_room_for(self.pixels.out_len()) {
            return false;
        }
        let lanes = lanes.max(1);
        let n = self.catalog.file_count().saturating_sub(lane).div_ceil(lanes);
        for _ in 0..n {
            // Offset by half the lane: readers that go in name order start at the beginning, so
            // the refill works ahead of them rather than on the sample they are decoding.
            let file = (((*cursor + n / 2) % n) * lanes + lane) as FileId;
            *cursor = cursor.wrapping_add(1);
            if cache.status.held(file) & HELD_AUGMENTED != 0 || !self.catalog.is_image(file) {
                continue;
            }
            if self.reader.known_bad(file) || !wanted(file) || self.tiers.loading(file) {
                continue;
            }
            let Ok((sample, _)) = self.reader.resolve(file) else { return true };
            // From the decoded or encoded cache when they hold it, else from the source (which
            // also fills decoded or encoded while they have room).
            let refilled = self
                .load(&sample, Admit::Fill)
                .and_then(|(loaded, _)| self.augment(&sample, &loaded))
                .map(|out| cache.augmented.admit(file, AugmentedEntry::fresh(out)));
            if matches!(refilled, Ok(true)) {
                bump(&self.stats.refills, 1);
            }
            return true;
        }
        false
    }

    /// Prefetch: makes `file` cached for `form`'s view if a form that view can use has room now.
    /// Returns whether it is cached now because of this call. Nothing is read from the source
    /// when no such form has room (the work would be thrown away).
    pub(crate) fn prepare(&self, file: FileId, form: Form) -> bool {
        let cache = self.tiers.memory();
        if cache.rank(file, form) > 0 || self.reader.known_bad(file) || !self.catalog.is_image(file) || !cache.enabled() {
            return false;
        }
        let Ok((sample, _)) = self.reader.resolve(file) else { return false };
        let encoded_fits = || cache.encoded.has_room_for(sample.meta.len());
        let decoded_fits = || match self.catalog.known_size(file) {
            Some(Ok(size)) => cache.decoded.has_room_for(size.area() * 3),
            _ => false,
        };
        let done = match form {
            Form::Augmented if cache.augmented.has_room_for(self.pixels.out_len()) => {
                self.augmented(&sample, Consumer::Prefetch).is_ok()
            }
            Form::Encoded if encoded_fits() => self.encoded(&sample).is_ok(),
            Form::Augmented | Form::Decoded if decoded_fits() || encoded_fits() => self.load(&sample, Admit::Fill).is_ok(),
            _ => false,
        };
        done && cache.rank(file, form) > 0
    }
}
