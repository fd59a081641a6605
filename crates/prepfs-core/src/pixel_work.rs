//! The mount's pixel work: each fresh augmentation's draw (never a crop served before), the
//! decodes and augmentations themselves, timed in the CPU time they took (the model's `t_da`
//! and `t_a`), and the encoding of what is served.
//!
//! It holds no cache and does no I/O; a failure is the [`PixelError`] the pipeline gave, and
//! whoever asked decides what a failed sample means (the serving path marks it bad, but for
//! [`PixelError::Refused`]).
//!
//! Each piece of work reserves what it holds at its peak from the bound on pixel work in flight
//! ([`WorkBudget`], `max_open_bytes`) before it starts, once its size is known (the image's
//! header probed, the draw made): the region it decodes, and the output it makes
//! ([`output::making_len`]). Refused work is said in the log, at most a line a second.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::config::{Config, OutputConfig};
use prepfs_pixels::augment::AugmentOp;
use prepfs_pixels::augment::plan_sample;
use prepfs_pixels::budget::{WorkBudget, WorkLease, WorkSize, WORK_WAIT};
use prepfs_pixels::output::{self, Dest};
use prepfs_pixels::pipeline::{self, PixelError};
use prepfs_pixels::served::{OutputFiles, ServedBytes};
use prepfs_pixels::draw::draw_rng;
use prepfs_pixels::rgb::Rgb;
use prepfs_pixels::rgb::Size2;
use prepfs_base::thread_time::thread_cpu_nanos;
use prepfs_source::catalog::FileId;
use crate::stats::latency::PixelKind;
use crate::stats::{bump, Stats};

/// Pixel work for one mount: see the module documentation.
pub(crate) struct PixelWork {
    /// Augmentations drawn so far of each sample: the next draw's index, so no draw repeats.
    draws: Vec<AtomicU32>,
    seed: u64,
    /// `augmented/`'s pipeline (0), then each recipe's (its number): never empty.
    pipelines: Vec<Pipeline>,
    max_pixels: u64,
    /// Whether outputs are made into output files (kernel passthrough is on), while the
    /// descriptor budget has room ([`OutputFiles::may_make_ahead`]).
    seal: AtomicBool,
    /// The mount's output files.
    files: Arc<OutputFiles>,
    stats: Arc<Stats>,
    /// The bound on pixel work in flight.
    budget: WorkBudget,
}

/// One pipeline the mount serves and how its outputs are written: `augmented/`'s, or a
/// recipe's (`recipes:`).
struct Pipeline {
    augment: Vec<AugmentOp>,
    output: OutputConfig,
    size: Size2,
    /// Bytes of one output.
    out_len: u64,
}

impl Pipeline {
    fn new(augment: &[AugmentOp], output: &OutputConfig) -> Pipeline {
        let size = prepfs_pixels::augment::fixed_output_size(augment).unwrap_or(Size2::new(224, 224));
        Pipeline { augment: augment.to_vec(), output: output.clone(), size, out_len: output::encoded_len(output, size) }
    }
}

/// Which rate a timed piece of pixel work feeds.
#[derive(Clone, Copy)]
enum Timing {
    /// A full decode (decoded view, or a miss keeping pixels).
    Decode,
    /// Decode and augment from encoded bytes (the model's `t_da`) through a pipeline.
    DecodeAugment(u8),
    /// Augment from decoded pixels (the model's `t_a`) through a pipeline.
    AugmentPixels(u8),
}

impl PixelWork {
    pub(crate) fn new(config: &Config, files: usize, stats: Arc<Stats>, output_files: Arc<OutputFiles>) -> PixelWork {
        let top = std::iter::once(Pipeline::new(&config.augment, &config.output));
        let recipes = config.recipes.iter().map(|r| Pipeline::new(&r.augment, &r.output));
        PixelWork {
            draws: (0..files).map(|_| AtomicU32::new(0)).collect(),
            seed: config.seed,
            pipelines: top.chain(recipes).collect(),
            max_pixels: config.max_pixels,
            seal: AtomicBool::new(false),
            files: output_files,
            stats,
            budget: WorkBudget::new(config.access.max_open_bytes, WORK_WAIT),
        }
    }

    /// Reserves `size` of the bound on pixel work in flight; a refusal is said in the log (at
    /// most a line a second) and is the work's error.
    fn reserve(&self, size: WorkSize) -> Result<WorkLease<'_>, PixelError> {
        self.budget.reserve(size).map_err(|refused| {
            prepfs_base::warn_limited!("pixel-work", "{refused}");
            PixelError::Refused(refused)
        })
    }

    /// Bytes of pixel work in flight now, and the bound on them.
    pub(crate) fn work_in_flight(&self) -> (u64, u64) {
        (self.budget.held(), self.budget.max())
    }

    /// Bytes of every output of pipeline `recipe` where its ops fix the output's size (0:
    /// `augmented/`'s); `None` where outputs vary with the image.
    pub(crate) fn fixed_out_len(&self, recipe: u8) -> Option<u64> {
        let p = self.pipeline(recipe);
        prepfs_pixels::augment::fixed_output_size(&p.augment).map(|_| p.out_len)
    }

    /// Pipeline `recipe`'s output size (0: `augmented/`'s).
    pub(crate) fn recipe_size(&self, recipe: u8) -> Size2 {
        self.pipeline(recipe).size
    }

    /// How many pipelines: `augmented/`'s and one per recipe.
    pub(crate) fn pipelines(&self) -> u8 {
        self.pipelines.len() as u8
    }

    /// Bytes of one augmented output.
    pub(crate) fn out_len(&self) -> u64 {
        self.pipeline(0).out_len
    }

    /// Bytes of one output of pipeline `recipe` (0: `augmented/`'s; else the recipe's number).
    pub(crate) fn recipe_out_len(&self, recipe: u8) -> u64 {
        self.pipeline(recipe).out_len
    }

    /// Pipeline `recipe`; `augmented/`'s for a number no recipe has (the filesystem refuses
    /// such inodes before asking).
    fn pipeline(&self, recipe: u8) -> &Pipeline {
        let top = &self.pipelines[0]; // never empty: made with augmented/'s first
        self.pipelines.get(usize::from(recipe)).unwrap_or(top)
    }

    /// Makes outputs into output files from now on (`true`: passthrough is on), or in
    /// memory.
    pub(crate) fn seal_outputs(&self, seal: bool) {
        self.seal.store(seal, Ordering::Relaxed);
    }

    /// Where the next output is made: an output file while passthrough is on and the
    /// descriptor budget has room, else memory.
    fn dest(&self) -> Dest<'_> {
        if self.seal.load(Ordering::Relaxed) && self.files.may_make_ahead() {
            Dest::File(&self.files)
        } else {
            Dest::Memory
        }
    }

    /// A fresh augmentation of `id` from its full pixels through pipeline `recipe` (0:
    /// `augmented/`'s). Every pipeline's work is timed into the same rates, so the plan's
    /// augment cost is the mean over what readers read.
    pub(crate) fn augment_pixels(&self, recipe: u8, id: FileId, pixels: &Rgb) -> Result<ServedBytes, PixelError> {
        let size = Size2::new(pixels.width, pixels.height);
        let mut rng = self.next_draw(id, size);
        let dest = self.dest();
        let p = self.pipeline(recipe);
        self.timed(Timing::AugmentPixels(recipe), || {
            let plan = plan_sample(&p.augment, size, &mut rng);
            let _work = self.reserve(WorkSize { decode: 0, output: output::making_len(&p.output, plan.size()) })?;
            pipeline::augment_pixels_served(pixels, &plan, &p.output, dest)
        })
    }

    /// The image's width and height from its header; `None` when it has none this reads.
    pub(crate) fn probe(&self, bytes: &[u8]) -> Option<Size2> {
        pipeline::probe_size(std::io::Cursor::new(bytes)).ok()
    }

    /// A fresh augmentation of `id` from its encoded bytes through pipeline `recipe` (0:
    /// `augmented/`'s): only what the crop needs is decoded.
    /// `size`: the image's, when its header was probed already (else it is probed here). The
    /// time taken includes writing the served bytes.
    pub(crate) fn decode_augment(&self, recipe: u8, id: FileId, bytes: &[u8], size: Option<Size2>) -> Result<ServedBytes, PixelError> {
        self.decode_augment_drawn(recipe, id, bytes, size, None)
    }

    /// [`PixelWork::decode_augment`] with the draw `(seed, number)` of the sample (one a mount
    /// reserved for a worker: [`PixelWork::reserve_draw`]), else this mount's next draw; always
    /// in memory when the draw is given (the bytes go to the asking mount).
    pub(crate) fn decode_augment_drawn(&self, recipe: u8, id: FileId, bytes: &[u8], size: Option<Size2>, draw: Option<(u64, u64)>) -> Result<ServedBytes, PixelError> {
        let dest = if draw.is_some() { Dest::Memory } else { self.dest() };
        let p = self.pipeline(recipe);
        self.timed(Timing::DecodeAugment(recipe), || {
            let size = match size {
                Some(size) => size,
                None => pipeline::probe_size(std::io::Cursor::new(bytes))?,
            };
            let (seed, draw) = draw.unwrap_or_else(|| (self.seed, self.next_draw_number(id, size)));
            let mut rng = draw_rng(seed, 0, draw, u64::from(id));
            // As decode_augment_served, with the work's size reserved once the draw says it.
            pipeline::check_pixels(size, self.max_pixels)?;
            let plan = plan_sample(&p.augment, size, &mut rng);
            let decode = match pipeline::Codec::sniff(bytes) {
                // The region the crop needs, at the DCT scale it is decoded at.
                pipeline::Codec::Jpeg => {
                    let cut = pipeline::jpeg_cut(size, &plan);
                    u64::from(cut.region.width) * u64::from(cut.region.height) * 3
                }
                pipeline::Codec::Other => size.area() * 3,
            };
            let _work = self.reserve(WorkSize { decode, output: output::making_len(&p.output, plan.size()) })?;
            pipeline::augment_served(bytes, &plan, self.max_pixels, &p.output, dest)
        })
    }

    /// The full pixels of encoded bytes.
    pub(crate) fn decode_full(&self, bytes: &[u8]) -> Result<Rgb, PixelError> {
        let size = pipeline::probe_size(std::io::Cursor::new(bytes))?;
        pipeline::check_pixels(size, self.max_pixels)?;
        let _work = self.reserve(WorkSize { decode: size.area() * 3, output: 0 })?;
        self.timed(Timing::Decode, || pipeline::decode_full(bytes, self.max_pixels))
    }

    /// The `decoded` view's bytes of encoded bytes: the full pixels, encoded as served, the
    /// decode and the output reserved together (both are held while the output is written).
    pub(crate) fn decode_encode(&self, bytes: &[u8]) -> Result<ServedBytes, PixelError> {
        let size = pipeline::probe_size(std::io::Cursor::new(bytes))?;
        pipeline::check_pixels(size, self.max_pixels)?;
        let _work = self.reserve(WorkSize { decode: size.area() * 3, output: output::making_len(&self.pipeline(0).output, size) })?;
        let pixels = self.timed(Timing::Decode, || pipeline::decode_full(bytes, self.max_pixels))?;
        self.encode_reserved(&pixels)
    }

    /// Full pixels as the `decoded` view serves them. Fails only where the format's encoder
    /// does (`format: jpeg`).
    pub(crate) fn encode(&self, pixels: &Rgb) -> Result<ServedBytes, PixelError> {
        let size = Size2::new(pixels.width, pixels.height);
        let _work = self.reserve(WorkSize { decode: 0, output: output::making_len(&self.pipeline(0).output, size) })?;
        self.encode_reserved(pixels)
    }

    /// [`PixelWork::encode`], its work reserved by the caller.
    fn encode_reserved(&self, pixels: &Rgb) -> Result<ServedBytes, PixelError> {
        let size = Size2::new(pixels.width, pixels.height);
        output::served_to(&self.pipeline(0).output, size, self.dest(), |dst| {
            let n = dst.len().min(pixels.pixels.len());
            dst[..n].copy_from_slice(&pixels.pixels[..n]);
            Ok::<(), PixelError>(())
        })
    }

    /// `bytes` made elsewhere (a worker's output) as this mount serves its own: in an output file
    /// while passthrough is on and the descriptor budget has room (the kernel then reads it
    /// without the daemon), else in memory.
    pub(crate) fn served_from(&self, bytes: &[u8]) -> ServedBytes {
        match self.dest() {
            Dest::File(files) => files.try_make(bytes).map_or_else(|| ServedBytes::Memory(bytes.into()), |f| ServedBytes::File(Arc::new(f))),
            Dest::Memory => ServedBytes::Memory(bytes.into()),
        }
    }

    /// Reserves the next draw of `id` for a worker to make (its number): this mount never makes
    /// it itself, so no two outputs share a draw.
    pub(crate) fn reserve_draw(&self, id: FileId) -> u64 {
        u64::from(self.draws[id as usize].fetch_add(1, Ordering::Relaxed))
    }

    /// The seed of every draw.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// The fingerprint of pipeline `recipe`'s augmentations and output (0: `augmented/`'s): a
    /// worker makes an item only for a pipeline whose fingerprint it shares.
    pub(crate) fn pipeline_fingerprint(&self, recipe: u8) -> u64 {
        let p = self.pipeline(recipe);
        prepfs_cache::remote::recipe_fingerprint(&p.augment, &p.output)
    }

    /// The random source of `id`'s next augmentation: (seed, 0, draw, sample), a new draw each
    /// call. `size`: the image's; its first draw counts its pixels' bytes into the set's
    /// decoded size (`Stats::sized_samples`).
    fn next_draw(&self, id: FileId, size: Size2) -> impl rand::Rng {
        draw_rng(self.seed, 0, self.next_draw_number(id, size), u64::from(id))
    }

    /// The number of `id`'s next draw (see [`PixelWork::next_draw`]).
    fn next_draw_number(&self, id: FileId, size: Size2) -> u64 {
        let draw = u64::from(self.draws[id as usize].fetch_add(1, Ordering::Relaxed));
        if draw == 0 {
            bump(&self.stats.sized_samples, 1);
            bump(&self.stats.sized_pixel_bytes, u64::from(size.width) * u64::from(size.height) * 3);
        }
        draw
    }

    /// Runs pixel work, timing it into stats. The time is this thread's CPU time, not wall
    /// time: with more decode threads than cores, wall time would count a core's time once per
    /// thread sharing it, and the model's CPU rates (per core, times the cores) would come out
    /// too low.
    fn timed<T>(&self, kind: Timing, work: impl FnOnce() -> Result<T, PixelError>) -> Result<T, PixelError> {
        let started = thread_cpu_nanos();
        let pixels = work()?;
        let nanos = thread_cpu_nanos().saturating_sub(started).max(1);
        let (count, total, histogram) = match kind {
            Timing::Decode => (&self.stats.full_decodes, &self.stats.full_decode_nanos, PixelKind::Decode),
            Timing::DecodeAugment(_) => (&self.stats.decode_augments, &self.stats.decode_augment_nanos, PixelKind::DecodeAugment),
            Timing::AugmentPixels(_) => (&self.stats.pixel_augments, &self.stats.pixel_augment_nanos, PixelKind::Augment),
        };
        // Each pipeline's own cost too (per recipe in stats, read-weighted in the plan).
        if let Timing::DecodeAugment(p) | Timing::AugmentPixels(p) = kind {
            let own = self.stats.pipeline(p);
            bump(&own.made, 1);
            bump(&own.made_nanos, nanos);
            if let Timing::AugmentPixels(_) = kind {
                bump(&own.augments, 1);
                bump(&own.augment_nanos, nanos);
            }
        }
        bump(count, 1);
        bump(total, nanos);
        self.stats.latency.record_pixel(histogram, std::time::Duration::from_nanos(nanos));
        Ok(pixels)
    }
}


