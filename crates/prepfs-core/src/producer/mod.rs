//! The serving path's middle: a resolved sample's bytes in one form (augmented, decoded,
//! encoded) by the cheapest path that holds it, composed of the rooms that do the work.
//!
//! - the source ([`SampleReader`]): the sample was resolved once by the open (its path and
//!   version, a [`Sample`]); reads, bad-sample marks;
//! - the tiers ([`Tiers`]): memory, then the tiers below memory (disk, remote); a miss in all
//!   is read from the source here, once however many requests miss together (the single flight
//!   is the producer's: the tiers never call back into it), and kept in Seneca's fill order;
//! - the pixel work ([`PixelWork`]): fresh draws, decodes and augmentations, timed;
//! - background work (`background.rs`): refill and prefetch, through the same path.
//!
//! The hot path reads top to bottom in [`SampleProducer::output`]: a kept output of the view's
//! pipeline, else augment what the tiers hold or read. It knows nothing of inodes, handles or jobs' rules: the
//! filesystem core decides *which* sample an open serves and resolves it, then asks for its
//! bytes here. No lock is held across decoding or I/O.
//!
//! A sample the pixel work cannot make pixels of is marked bad here (refused in every view until
//! its file changes); a failed source access keeps the source's `io::Error` as it came. The
//! requests that wait on one load share its result, error included, typed as it is.

mod background;

pub(crate) use background::RefillScope;

use std::sync::Arc;

use prepfs_cache::{Admit, AugmentedEntry, PixelsOrBytes, MissOutputs, Origin, SingleFlight, Tiers};
use crate::error::Result;
use prepfs_pixels::pipeline::{self, PixelError};
use crate::pixel_work::PixelWork;
use prepfs_pixels::served::ServedBytes;
use prepfs_pixels::rgb::Size2;
use prepfs_source::catalog::{Catalog, FileId};
use crate::sample_reader::SampleReader;
use prepfs_source::Sample;
use prepfs_source::Observed;
use crate::stats::{bump, Stats};

/// Who an augmented output is for, which decides what the cache keeps of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Consumer {
    /// A top-level open (`augmented/` or a recipe's view): takes a cached output whole; a miss
    /// in `augmented/` keeps a spare, fresh augmentation for a later open while augmented has
    /// room.
    TopLevel,
    /// An open in a job's view (`augmented/` or a recipe's; `bit` its used-by bit, `active`
    /// the bits of the jobs still needing the sample in that view, its own included): uses a
    /// cached output of the view's pipeline it has not used; a miss shares its own output with
    /// the other jobs.
    Job { bit: u64, active: u64 },
    /// Prefetch: the output goes to the cache, unused.
    Prefetch,
}

/// The producer: see the module documentation.
pub(crate) struct SampleProducer {
    catalog: Arc<Catalog>,
    reader: Arc<SampleReader>,
    tiers: Tiers,
    pixels: PixelWork,
    stats: Arc<Stats>,
    /// When the background refill works (`background.rs`), for each pipeline (0:
    /// `augmented/`'s, else the recipe's number): each keeps outputs of its own.
    pacers: Vec<background::RefillPacer>,
    /// Concurrent misses of one sample look below memory and read and decode it once; they
    /// all get its result, a failure as the typed error it is (cheap to clone).
    loads: SingleFlight<Result<(PixelsOrBytes, Origin)>>,
}

impl SampleProducer {
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        reader: Arc<SampleReader>,
        tiers: Tiers,
        pixels: PixelWork,
        stats: Arc<Stats>,
    ) -> SampleProducer {
        let pacers = (0..pixels.pipelines()).map(|_| background::RefillPacer::default()).collect();
        SampleProducer { catalog, reader, tiers, pixels, stats, pacers, loads: SingleFlight::default() }
    }

    /// Whether a miss of `id` is being loaded now.
    pub(crate) fn loading(&self, id: FileId) -> bool {
        self.loads.in_flight(id)
    }

    /// Makes outputs into output files from now on (kernel passthrough is on), so the
    /// cache holds them ready for the kernel; `false`: in memory.
    pub(crate) fn seal_outputs(&self, seal: bool) {
        self.pixels.seal_outputs(seal);
    }

    // ---- the three forms ----------------------------------------------------------------------

    /// The bytes of one file of pipeline `pipeline`'s view of `sample` (0: `augmented/`, else the
    /// recipe's number) for `consumer`, and where they came from: an output of the pipeline's
    /// kept ahead (by the refill) or by another job's open, else a fresh draw of the pipeline
    /// from what the encoded and decoded forms hold (which every view shares), else from the
    /// source, kept in the fill order of an augmented read. Each pipeline keeps its outputs in a
    /// store of its own ([`prepfs_cache::SampleCache::outputs`]), so no view is ever served
    /// another's output; jobs share a pipeline's outputs alike in every pipeline.
    pub(crate) fn output(&self, pipeline: u8, sample: &Sample, consumer: Consumer) -> Result<(ServedBytes, Origin)> {
        self.reader.refuse_known_bad(sample)?;
        let cache = self.tiers.memory();
        let counters = self.stats.pipeline(pipeline);
        let hit = match consumer {
            Consumer::TopLevel => cache.outputs(pipeline).and_then(|store| store.take(sample.id)).map(|e| e.bytes),
            Consumer::Job { bit, active } => cache.take_output_for_job(pipeline, sample.id, bit, active),
            Consumer::Prefetch => None,
        };
        if let Some(out) = hit {
            bump(&counters.served_kept, 1);
            return Ok((out, Origin::Augmented));
        }
        // An output another mount made and offered (`augmented/`'s only), taken so no one else
        // gets it.
        if pipeline == 0 && consumer != Consumer::Prefetch {
            let claimed = self.tiers.exchange().and_then(|exchange| exchange.claim(&self.tiers.lower_key(sample, &sample.meta)));
            if let Some(out) = claimed {
                bump(&counters.served_kept, 1);
                return Ok((ServedBytes::Memory(out), Origin::Remote));
            }
        }
        // Another active job will be handed this job's output; else a spare (`augmented/`'s, made
        // beside the pixels a read decodes) is worth making.
        let shared = matches!(consumer, Consumer::Job { bit, active } if active & !bit != 0);
        let spare = pipeline == 0 && !shared && consumer != Consumer::Prefetch;
        let (loaded, origin) = self.load_promoting(sample, Admit::Augmented { spare })?;
        let out = self.augment(pipeline, sample, &loaded)?;
        let keep = match consumer {
            // Shared with the other active jobs (Seneca): dropped once they all used it.
            Consumer::Job { bit, .. } if shared => Some(AugmentedEntry { bytes: out.clone(), used_by: bit }),
            Consumer::Prefetch => Some(AugmentedEntry::fresh(out.clone())),
            _ => None,
        };
        if let (Some(entry), Some(store)) = (keep, cache.outputs(pipeline)) {
            store.admit(sample.id, entry);
        }
        if consumer != Consumer::Prefetch {
            bump(&counters.made_at_open, 1);
        }
        Ok((out, origin))
    }

    /// Bytes of pixel work in flight now, and the bound on them (`max_open_bytes`).
    pub(crate) fn pixels_in_flight(&self) -> (u64, u64) {
        self.pixels.work_in_flight()
    }

    /// Bytes of one file of pipeline `recipe` (0: `augmented/`'s; else the recipe's number).
    pub(crate) fn recipe_out_len(&self, recipe: u8) -> u64 {
        self.pixels.recipe_out_len(recipe)
    }

    /// The output size of pipeline `recipe` (0: `augmented/`'s).
    pub(crate) fn recipe_size(&self, recipe: u8) -> Size2 {
        self.pixels.recipe_size(recipe)
    }

    /// The bytes of `sample`'s `decoded` file, and where they came from.
    pub(crate) fn decoded(&self, sample: &Sample) -> Result<(ServedBytes, Origin)> {
        self.reader.refuse_known_bad(sample)?;
        let (loaded, origin) = self.load_promoting(sample, Admit::Pixels)?;
        let out = match loaded {
            PixelsOrBytes::Pixels(p) => self.pixels.encode(&p).map_err(|why| self.bad(sample, why))?,
            PixelsOrBytes::Bytes { bytes: b, .. } => self.pixels.decode_encode(&b).map_err(|why| self.bad(sample, why))?,
        };
        Ok((out, origin))
    }

    /// The whole source bytes of `sample`, from the encoded cache or the source (then kept
    /// while encoded has room), and where they came from.
    pub(crate) fn encoded(&self, sample: &Sample) -> Result<(Arc<[u8]>, Origin)> {
        if let Some(bytes) = self.tiers.encoded(sample) {
            return Ok((bytes, Origin::Encoded));
        }
        let (bytes, meta) = self.reader.read(sample)?;
        let current = self.reader.is_current(sample.id, &meta);
        self.tiers.keep(sample, &meta, current, MissOutputs { bytes: Arc::clone(&bytes), pixels: None, spare: None });
        Ok((bytes, Origin::Source))
    }

    // ---- validation at mount -----------------------------------------------------------------

    /// Checks `id`'s header (`validate: headers`): readable, and within `max_pixels`. A sample
    /// that is not is marked bad.
    pub(crate) fn check_header(&self, id: FileId, max_pixels: u64) -> Result<()> {
        let size = self.reader.size(id)?;
        pipeline::check_pixels(size, max_pixels).map_err(|why| self.reader.mark_bad(id, &self.catalog.file_path(id), why.into()))
    }

    /// Reads and fully decodes `sample` (`validate: scan`), keeping what the fill order admits,
    /// as a miss of `decoded/` would. A sample that does not decode is marked bad.
    pub(crate) fn check_decodes(&self, sample: &Sample) -> Result<()> {
        self.reader.refuse_known_bad(sample)?;
        if let (PixelsOrBytes::Bytes { bytes, .. }, _) = self.load(sample, Admit::Pixels)? {
            self.pixels.decode_full(&bytes).map_err(|why| self.bad(sample, why))?;
        }
        Ok(())
    }

    // ---- the work ----------------------------------------------------------------------------

    /// The sample as memory holds it, else as a tier below memory does, else read from the
    /// source and kept (see [`SampleProducer::read_and_keep`]); the last two once, however many
    /// requests miss together.
    fn load(&self, sample: &Sample, want: Admit) -> Result<(PixelsOrBytes, Origin)> {
        if let Some(hit) = self.tiers.in_memory(sample) {
            return Ok(hit);
        }
        self.loads.run(sample.id, || match self.tiers.below_memory(sample) {
            Some(hit) => Ok(hit),
            None => self.read_and_keep(sample, want).map(|loaded| (loaded, Origin::Source)),
        })
    }

    /// [`SampleProducer::load`], and a sample memory holds only as bytes is also decoded in full
    /// and kept as pixels while decoded has room ([`Tiers::promote`]), by whoever meets it first:
    /// a request or the background. So the room decoded has fills with the samples readers
    /// missed on the fast path (a region decode, kept as bytes), and each is decoded in full once:
    /// a request that met it again would otherwise decode a region again, and the refill would
    /// still decode it in full later. A sample read from the source here is kept as `want`'s
    /// fill order says (a first miss decodes only its region where the plan gives decoded no
    /// share).
    fn load_promoting(&self, sample: &Sample, want: Admit) -> Result<(PixelsOrBytes, Origin)> {
        let (loaded, origin) = self.load(sample, want)?;
        let PixelsOrBytes::Bytes { bytes, size } = loaded else { return Ok((loaded, origin)) };
        if origin != Origin::Encoded {
            return Ok((PixelsOrBytes::Bytes { bytes, size }, origin));
        }
        // Probed once: what admission reads of the header, augmenting reuses.
        let size = size.or_else(|| self.pixels.probe(&bytes));
        let current = self.reader.is_current(sample.id, &sample.meta);
        if !self.tiers.admission(decoded_len(size), Admit::Fill, current, self.pixels.out_len()).decode {
            return Ok((PixelsOrBytes::Bytes { bytes, size }, origin));
        }
        let pixels = Arc::new(self.pixels.decode_full(&bytes).map_err(|why| self.bad(sample, why))?);
        self.tiers.promote(sample, Arc::clone(&pixels));
        Ok((PixelsOrBytes::Pixels(pixels), origin))
    }

    /// Reads a sample from the source, makes what the fill order admits (full pixels, a spare
    /// augmentation) and keeps it; returns the pixels when they were made, else the bytes.
    fn read_and_keep(&self, sample: &Sample, want: Admit) -> Result<PixelsOrBytes> {
        let (bytes, meta) = self.reader.read(sample)?;
        let current = self.reader.is_current(sample.id, &meta);
        // The header is in hand: probed once here, for admission and for augmenting.
        let size = self.pixels.probe(&bytes);
        let admission = self.tiers.admission(decoded_len(size), want, current, self.pixels.out_len());
        if !admission.decode {
            self.tiers.keep(sample, &meta, current, MissOutputs { bytes: Arc::clone(&bytes), pixels: None, spare: None });
            return Ok(PixelsOrBytes::Bytes { bytes, size });
        }
        let pixels = Arc::new(self.pixels.decode_full(&bytes).map_err(|why| self.bad(sample, why))?);
        // A spare that fails is no loss: the pixels decoded, and the request is served.
        let spare = admission.spare.then(|| self.pixels.augment_pixels(0, sample.id, &pixels).ok()).flatten();
        self.tiers.keep(sample, &meta, current, MissOutputs { bytes, pixels: Some(Arc::clone(&pixels)), spare });
        Ok(PixelsOrBytes::Pixels(pixels))
    }

    /// One fresh augmentation of a loaded sample through pipeline `recipe` (0: `augmented/`'s;
    /// a new draw: never a crop served before).
    fn augment(&self, recipe: u8, sample: &Sample, loaded: &PixelsOrBytes) -> Result<ServedBytes> {
        let made = match loaded {
            PixelsOrBytes::Pixels(p) => self.pixels.augment_pixels(recipe, sample.id, p),
            PixelsOrBytes::Bytes { bytes, size } => self.pixels.decode_augment(recipe, sample.id, bytes, *size),
        };
        made.map_err(|why| self.bad(sample, why))
    }

    /// A sample the pixel work failed on: marked bad, the reader's error; what the tiers below
    /// memory hold of it is dropped. Work the bound on pixel work in flight refused is no fault
    /// of the sample: only the reader's error (`ENOMEM`).
    fn bad(&self, sample: &Sample, why: PixelError) -> crate::error::Error {
        if let PixelError::Refused(refused) = why {
            return refused.into();
        }
        self.tiers.forget_lower(sample);
        self.reader.mark_bad(sample.id, &sample.path, why.into())
    }

    // ---- stats and the end of a mount ---------------------------------------------------------

    /// The cache's figures, with the disk tier's under `disk` (null without one) and the read
    /// limit.
    pub(crate) fn cache_stats(&self) -> serde_json::Value {
        let mut stats = self.tiers.stats();
        if let Some(obj) = stats.as_object_mut() {
            obj.insert("read_limit_bytes_per_s".into(), self.reader.read_limit().map_or(serde_json::Value::Null, Into::into));
        }
        stats
    }

    /// The end of a mount sharing a remote tier: the augmented outputs no reader here used are
    /// offered to the other mounts (use-once there too) rather than thrown away; only those of a
    /// file still at the version they were made from. Returns how many were queued.
    pub(crate) fn offer_unused_outputs(&self) -> usize {
        let Some(exchange) = self.tiers.exchange().filter(|exchange| exchange.is_open()) else {
            return 0;
        };
        let mut unused = Vec::new();
        self.tiers.memory().augmented.retain(|id, entry| {
            let keep = entry.used_by != 0;
            if !keep {
                unused.push((id, entry.bytes.clone()));
            }
            keep
        });
        unused
            .into_iter()
            .filter(|(id, out)| {
                let Ok((sample, Observed::Same)) = self.reader.resolve(*id) else { return false };
                out.to_vec().is_ok_and(|bytes| exchange.offer(&self.tiers.lower_key(&sample, &sample.meta), bytes.into()))
            })
            .count()
    }

    /// Writes out the disk tier's queued entries: the end of a mount.
    pub(crate) fn flush(&self) {
        self.tiers.flush();
    }
}

/// The bytes of an image's full pixels (RGB) from its probed size; 0 where none was read.
fn decoded_len(size: Option<Size2>) -> u64 {
    size.map_or(0, |s| s.area() * 3)
}
