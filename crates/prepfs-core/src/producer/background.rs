//! Background work through the serving path, below the priority of requests: the refill (fresh
//! augmentations into each pipeline's free room: `augmented/`'s and every recipe's) and
//! prefetch (a sample made cached for a view before a job asks). The threads that run it are
//! the mount's (`crate::mount`); what is wanted is the jobs' (`crate::fs`): here is only the
//! unit of work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prepfs_cache::{Admit, AugmentedEntry, ENTRY_OVERHEAD, HELD_AUGMENTED};
use prepfs_cache::form::Form;
use prepfs_cache::remote::work::WorkItem;
use prepfs_source::catalog::FileId;
use prepfs_source::Sample;
use crate::stats::bump;

use super::{Consumer, SampleProducer};

/// Readers that have taken no output for this long have paused: the refill tops the stock up.
const READERS_PAUSED: Duration = Duration::from_millis(20);
/// The low-water mark: below this share of its budget the augmented stock is refilled even while
/// readers take from it, and then on until it is full.
const LOW_WATER: f64 = 0.5;
/// The stock counts as full from this share on (a few samples may never get an output: bad
/// ones, or ones a reader is taking as the refill passes).
const FULL: f64 = 0.95;

/// What the refill may work on now ([`RefillPacer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefillScope {
    /// Readers are taking outputs: only samples still to come in their pass (some job has not
    /// seen it this epoch; with no jobs, the top-level readers have not read it in this pass).
    /// The next pass's outputs would be no use to them, and would take the cores they use.
    ThisPass,
    /// Readers have paused: anything, the next pass's outputs too.
    Any,
}

/// When the refill works: whenever readers pause (anything), and, while they take outputs, once
/// the stock has fallen below the low-water mark, then on to full (the marks of a producer with
/// hysteresis), on the samples still to come in their pass only. Above the mark, a reader is
/// served from the stock whether or not the refill runs, and refill work then only takes cores
/// from readers (the 2-core warm figures of issue 12); a refill that tops up after every output
/// taken never lets them have the cores. Below it, outputs the readers will meet in this pass
/// are worth the cores; the next pass's are not, until they pause.
pub(crate) struct RefillPacer {
    /// Set below the low-water mark, cleared when the stock is full.
    filling: AtomicBool,
    /// The augmented hits last seen, and when they changed (µs since `start`).
    hits_seen: AtomicU64,
    changed_at: AtomicU64,
    start: Instant,
}

impl Default for RefillPacer {
    fn default() -> Self {
        RefillPacer { filling: AtomicBool::new(true), hits_seen: AtomicU64::new(0), changed_at: AtomicU64::new(0), start: Instant::now() }
    }
}

impl RefillPacer {
    /// What the refill may work on at `now` (since `start`), if anything, given the readers'
    /// hits so far, the stock's share of its budget and whether it is full.
    fn scope(&self, now: Duration, hits: u64, stock: f64, full: bool) -> Option<RefillScope> {
        let now = now.as_micros() as u64;
        if self.hits_seen.swap(hits, Ordering::Relaxed) != hits {
            self.changed_at.store(now, Ordering::Relaxed);
        }
        if stock < LOW_WATER {
            self.filling.store(true, Ordering::Relaxed);
        } else if full {
            self.filling.store(false, Ordering::Relaxed);
        }
        let paused = now.saturating_sub(self.changed_at.load(Ordering::Relaxed)) >= READERS_PAUSED.as_micros() as u64;
        if paused {
            Some(RefillScope::Any)
        } else {
            self.filling.load(Ordering::Relaxed).then_some(RefillScope::ThisPass)
        }
    }
}

impl SampleProducer {
    /// What the background refill may work on now for pipeline `pipeline` (0: `augmented/`'s,
    /// else the recipe's number), if anything ([`RefillPacer`]: each pipeline's own, by the
    /// readers taking its outputs and its stock). The stock is measured against what its room
    /// can hold of this data set: one output per sample at most, so a room larger than the set
    /// is full once every sample has one.
    pub(crate) fn refill_scope(&self, pipeline: u8) -> Option<RefillScope> {
        let pacer = self.pacers.get(usize::from(pipeline))?;
        self.refill_scope_at(pipeline, pacer.start.elapsed())
    }

    /// [`SampleProducer::refill_scope`] at `now`, the time since the pacer began.
    pub(crate) fn refill_scope_at(&self, pipeline: u8, now: Duration) -> Option<RefillScope> {
        let (pacer, store) = (self.pacers.get(usize::from(pipeline))?, self.tiers.memory().outputs(pipeline)?);
        let out_len = self.pixels.recipe_out_len(pipeline);
        let room = store.budget().min(self.catalog.sample_count() as u64 * (out_len + ENTRY_OVERHEAD));
        let stock = if room == 0 { 1.0 } else { store.used() as f64 / room as f64 };
        let full = stock >= FULL || !store.has_room_for(out_len);
        pacer.scope(now, store.hit_count(), stock, full)
    }

    /// Whether pipeline `pipeline`'s stock of kept outputs is below the low-water mark (of what
    /// its room can hold of this data set), read without moving its pacer.
    pub(crate) fn stock_is_low(&self, pipeline: u8) -> bool {
        let Some(store) = self.tiers.memory().outputs(pipeline) else { return false };
        let out_len = self.pixels.recipe_out_len(pipeline);
        let room = store.budget().min(self.catalog.sample_count() as u64 * (out_len + ENTRY_OVERHEAD));
        room > 0 && (store.used() as f64 / room as f64) < LOW_WATER && store.has_room_for(out_len)
    }

    /// A work item for a `prepfs worker` (`crate::remote_work`): one fresh output of `sample`
    /// through pipeline `pipeline`, its draw reserved here (this mount never makes that draw),
    /// as item `seq` of mount `mount`.
    pub(crate) fn work_item(&self, pipeline: u8, sample: &Sample, (mount, seq): (u64, u64)) -> WorkItem {
        let key = self.tiers.lower_key(sample, &sample.meta);
        WorkItem {
            mount,
            seq,
            id: sample.id,
            rel: key.rel.to_path_buf(),
            len: key.version.len,
            mtime_ns: key.version.mtime_ns,
            pipeline,
            recipe: self.pixels.pipeline_fingerprint(pipeline),
            seed: self.pixels.seed(),
            draw: self.pixels.reserve_draw(sample.id),
            queued_ms: prepfs_cache::remote::work::unix_ms(),
        }
    }

    /// Keeps a worker's output of `id` in pipeline `pipeline`'s stock as a fresh output (no
    /// reader has used it); whether it was kept (not where it is empty or not the size the
    /// pipeline fixes, where the stock holds one already or has no room).
    pub(crate) fn keep_worker_output(&self, pipeline: u8, id: FileId, output: &[u8]) -> bool {
        let Some(store) = self.tiers.memory().outputs(pipeline) else { return false };
        if output.is_empty() || self.pixels.fixed_out_len(pipeline).is_some_and(|len| len != output.len() as u64) {
            return false;
        }
        store.admit(id, AugmentedEntry::fresh(self.pixels.served_from(output)))
    }

    /// The pipelines (0: `augmented/`'s, else the recipe's number), the emptiest stock of kept
    /// outputs first: the order the refill serves them in, so each pipeline's share of the room
    /// fills alike.
    pub(crate) fn refill_order(&self) -> Vec<u8> {
        let cache = self.tiers.memory();
        let stock = |p: u8| cache.outputs(p).map_or(1.0, |s| if s.budget() == 0 { 1.0 } else { s.used() as f64 / s.budget() as f64 });
        let mut order: Vec<u8> = (0..cache.pipelines()).collect();
        order.sort_by(|a, b| stock(*a).total_cmp(&stock(*b)));
        order
    }

    /// One unit of background refill for pipeline `pipeline` (0: `augmented/`'s, else the
    /// recipe's number): a fresh output into the free room of its store of a sample `wanted`
    /// (some reader of the pipeline has not seen it), made from the decoded or encoded cache
    /// when they hold it, else from the source. Workers share the samples out by `lane` of
    /// `lanes` (sample ids equal to `lane` modulo `lanes`), so they never make the same one.
    /// Returns false when there is nothing to do (no room, or every wanted sample of the lane
    /// already has one).
    pub(crate) fn refill_once(&self, pipeline: u8, cursor: &mut usize, (lane, lanes): (usize, usize), wanted: impl Fn(FileId) -> bool) -> bool {
        let cache = self.tiers.memory();
        let Some(store) = cache.outputs(pipeline) else { return false };
        if !store.has_room_for(self.pixels.recipe_out_len(pipeline)) {
            return false;
        }
        // augmented/'s store keeps the status bits; a recipe's is asked.
        let held = |file: FileId| if pipeline == 0 { cache.status.held(file) & HELD_AUGMENTED != 0 } else { store.contains(file) };
        let lanes = lanes.max(1);
        let n = self.catalog.file_count().saturating_sub(lane).div_ceil(lanes);
        for _ in 0..n {
            // Offset by half the lane: readers that go in name order start at the beginning, so
            // the refill works ahead of them rather than on the sample they are decoding.
            let file = (((*cursor + n / 2) % n) * lanes + lane) as FileId;
            *cursor = cursor.wrapping_add(1);
            if held(file) || !self.catalog.is_image(file) {
                continue;
            }
            if self.reader.known_bad(file) || !wanted(file) || self.loading(file) {
                continue;
            }
            let Ok((sample, _)) = self.reader.resolve(file) else { return true };
            // From the decoded or encoded cache when they hold it (bytes promoted to pixels
            // while decoded has room), else from the source (which also fills decoded or
            // encoded while they have room).
            let refilled = self
                .load_promoting(&sample, Admit::Fill)
                .and_then(|(loaded, _)| self.augment(pipeline, &sample, &loaded))
                .map(|out| store.admit(file, AugmentedEntry::fresh(out)));
            if matches!(refilled, Ok(true)) {
                bump(&self.stats.refills, 1);
                bump(&self.stats.pipeline(pipeline).refills, 1);
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
                self.output(0, &sample, Consumer::Prefetch).is_ok()
            }
            Form::Encoded if encoded_fits() => self.encoded(&sample).is_ok(),
            Form::Augmented | Form::Decoded if decoded_fits() || encoded_fits() => self.load(&sample, Admit::Fill).is_ok(),
            _ => false,
        };
        done && cache.rank(file, form) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The time of the looks that come at once (the pacer's clock is passed in).
    const T0: Duration = Duration::from_secs(1);

    #[test]
    fn while_readers_take_outputs_the_refill_fills_to_full_then_waits_until_the_stock_is_below_half_and_makes_only_what_their_pass_needs() {
        let pacer = RefillPacer::default();
        // From the start it fills, readers or not, until the stock is full.
        assert_eq!(pacer.scope(T0, 1, 0.0, false), Some(RefillScope::ThisPass));
        assert_eq!(pacer.scope(T0, 2, 0.6, false), Some(RefillScope::ThisPass));
        assert_eq!(pacer.scope(T0, 3, 0.99, false), Some(RefillScope::ThisPass));
        // Full: while readers take outputs (hits change at every look) and the stock is above
        // the low-water mark, it waits.
        assert_eq!(pacer.scope(T0, 4, 1.0, true), None);
        assert_eq!(pacer.scope(T0, 5, 0.8, false), None);
        assert_eq!(pacer.scope(T0, 6, 0.5, false), None);
        // Below the mark it works alongside the readers, and on until full again.
        assert_eq!(pacer.scope(T0, 7, 0.49, false), Some(RefillScope::ThisPass));
        assert_eq!(pacer.scope(T0, 8, 0.7, false), Some(RefillScope::ThisPass));
        assert_eq!(pacer.scope(T0, 9, 0.95, false), Some(RefillScope::ThisPass));
        assert_eq!(pacer.scope(T0, 10, 1.0, true), None);
        assert_eq!(pacer.scope(T0, 11, 0.9, false), None);
    }

    #[test]
    fn readers_that_pause_let_the_refill_top_the_stock_up_with_the_next_passs_outputs_too() {
        let pacer = RefillPacer::default();
        assert_eq!(pacer.scope(T0, 1, 1.0, true), None);
        assert_eq!(pacer.scope(T0, 2, 0.9, false), None);
        // No output taken since the last look, for less than the pause: it waits.
        let almost = T0 + READERS_PAUSED - Duration::from_millis(1);
        assert_eq!(pacer.scope(almost, 2, 0.9, false), None);
        // For longer than the pause: it tops up.
        let later = T0 + READERS_PAUSED + Duration::from_millis(5);
        assert_eq!(pacer.scope(later, 2, 0.9, false), Some(RefillScope::Any));
        // Taking again: it waits again.
        assert_eq!(pacer.scope(later, 3, 0.9, false), None);
    }
}
