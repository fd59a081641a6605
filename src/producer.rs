//! The sample producer: a sample's bytes in one form by the cheapest path that holds it, and the
//! admissions that path makes.
//!
//! The hot path reads top to bottom in [`SampleProducer::augmented`]: an augmented hit, else
//! augment decoded pixels (memory cache), else decode and augment encoded bytes (memory cache,
//! disk tier, or the source, read once however many requests miss together). A miss admits what
//! it made in Seneca's fill order: augmented while it has room, then decoded, then encoded; the
//! pixels or bytes also spill to the disk tier.
//!
//! It owns the sample cache and its disk tier, source reads (and the read limit), the draws of
//! fresh augmentations, undecodable-sample bookkeeping, the counters of that work, and the
//! background work that keeps the cache useful: refill, prefetch, and the cache plan. It knows
//! nothing of inodes, handles or jobs' rules: the filesystem core decides *which* sample an open
//! serves, then asks for its bytes here. No lock is held across decoding or I/O.
//!
//! A sample it refuses as undecodable is a [`SampleError`] (`EIO` to a reader); a failed source
//! access keeps the source's `io::Error` as it came. The requests that wait on one load share
//! its result, error included, typed as it is.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pixels::augment::{plan_sample, SamplePlan};
use crate::shared::{draw_rng, Size2};
use crate::cache::{AugmentedEntry, SampleCache, SingleFlight, HELD_AUGMENTED, HELD_DECODED, HELD_ENCODED};
use crate::source::catalog::{Catalog, FileId};
use crate::config::{Config, SplitChoice};
use crate::cache::disk::{self, DiskCache, DiskHit, DiskKind};
use crate::error::{Error, Result, ToErrno};
use crate::pixels::output;
use crate::pixels::pipeline::{self, PixelError};
use crate::planner::Split;
use crate::sampling::Rank;
use crate::shared::{Form, Rgb};
use crate::source::{FileMeta, Freshness, Identity, Observed, Source, SourceFile, SourceIo};
use crate::stats::{bump, Stats};
use crate::sync::{LockExt, Mutex};


/// Where an output came from: the cache form that held the sample, the disk tier, or the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Augmented,
    Decoded,
    Encoded,
    Disk,
    Source,
}

/// Who an augmented output is for, which decides what the cache keeps of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    /// A top-level `augmented/` open: takes a cached output whole; a miss keeps a spare, fresh
    /// augmentation for a later open while augmented has room.
    TopLevel,
    /// An open in a job's view (`bit` its used-by bit, `active` every active job's): uses a
    /// cached output it has not used; a miss shares its own output with the other active jobs.
    Job { bit: u64, active: u64 },
    /// Prefetch: the output goes to the cache, unused.
    Prefetch,
}

/// What a miss should admit besides what it returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Admit {
    /// Full pixels are wanted (the `decoded` view).
    Pixels,
    /// Anything to augment; `spare`: also keep a fresh augmentation while augmented has room.
    Augmented { spare: bool },
    /// Nothing is served: fill decoded, else encoded (prefetch without augmented room).
    Fill,
}

/// A sample in the cheapest form at hand.
#[derive(Clone)]
enum Loaded {
    /// Full-resolution pixels: augmenting is a crop and a resize.
    Pixels(Arc<Rgb>),
    /// Source bytes: augmenting decodes (the fast path).
    Bytes(Arc<[u8]>),
}

/// Why a sample is refused as undecodable, in every view, until its file changes. Every one is
/// `EIO` to a reader: the file is there, but no pixels can be served of it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SampleError {
    /// The pipeline could not make pixels of it (corrupt, truncated, too many pixels, ...).
    #[error(transparent)]
    Pixels(#[from] PixelError),
    /// The source file is no sample prepfs will read (over `source.max_file_size`, not a
    /// regular file): the source's error, as it came.
    #[error("{0}")]
    NotASample(Arc<std::io::Error>),
    /// Its header was found unreadable when its size was probed earlier.
    #[error("unreadable header")]
    UnreadableHeader,
    /// It was found undecodable earlier; the first log line says why.
    #[error("undecodable (found earlier; see the first log line)")]
    FoundEarlier,
}

impl ToErrno for SampleError {
    fn to_errno(&self) -> libc::c_int {
        match self {
            SampleError::Pixels(e) => e.to_errno(),
            // A refused file, not a missing or forbidden one: the same errno as a damaged sample.
            SampleError::NotASample(_) | SampleError::UnreadableHeader | SampleError::FoundEarlier => libc::EIO,
        }
    }
}

/// How many timed samples the plan waits for before it trusts live rates over the mount-time
/// calibration.
const REPLAN_MIN_SAMPLES: u64 = 64;

/// The producer: see the module documentation.
pub struct SampleProducer {
    config: Config,
    catalog: Catalog,
    stats: Stats,
    cache: SampleCache,
    disk: Option<DiskCache>,
    /// Every read of the source: bounded, timed out, within the read limit.
    source: Source,
    /// Each source file's version as last seen.
    fresh: Freshness,
    /// Augmentations drawn so far of each sample: the next draw's index, so no draw repeats.
    draws: Vec<AtomicU32>,
    augmented_size: Size2,
    /// Bytes of one augmented output.
    out_len: u64,
    /// Concurrent misses of one sample read and decode it once; they all get its result, a
    /// failure as the typed error it is (cheap to clone).
    loads: SingleFlight<Result<(Loaded, Origin)>>,
    /// The plan in force (split, prediction, inputs) and the inputs measured at mount.
    plan: Mutex<Option<PlanState>>,
    /// Jobs active now: how many share each augmented output (the model's `jobs`).
    jobs_sharing: AtomicU32,
    /// The mount's own serving rate, measured in seconds with no pixel work (the model's
    /// `t_serve`).
    serve: Mutex<ServeProbe>,
}

/// Measures `t_serve`: opens per second over one-second windows in which every open was a hit
/// (no decode, no source read); the best window seen.
/// Samples an interval of the serving probe must have served to count.
const SERVE_PROBE_MIN: u64 = 200;

struct ServeProbe {
    at: Instant,
    opens: u64,
    work: u64,
    best: Option<f64>,
    /// The machine's busy core-seconds and the pixel work's CPU nanoseconds at `at`.
    busy: Option<f64>,
    pixel_ns: u64,
    /// Over the intervals that served enough: samples served, and core-seconds spent on them
    /// beyond the pixel work.
    costed: (u64, f64),
}

struct PlanState {
    doc: serde_json::Value,
    params: crate::planner::PlanParams,
    /// Timed samples (both paths) when the plan was last made.
    timed: u64,
}

impl SampleProducer {
    /// A producer over a scanned catalog, reading the source through `io`.
    pub fn new(config: Config, catalog: Catalog, io: Arc<dyn SourceIo>) -> std::io::Result<SampleProducer> {
        let augmented_size = config.augmented_size().unwrap_or(Size2::new(224, 224));
        let draws = (0..catalog.file_count()).map(|_| AtomicU32::new(0)).collect();
        let split = match config.cache.split {
            SplitChoice::Fixed(split) => split,
            // Until the model has measured inputs, favour the forms that save CPU per epoch.
            SplitChoice::Auto => Split::new(0, 50, 50).expect("sums to 100"),
        };
        let cache = SampleCache::new(config.cache.memory, split, config.cache.policy, catalog.file_count());
        // A disk tier that cannot be opened leaves the mount serving from memory and the source.
        let disk = config.cache.disk.as_ref().and_then(|d| match DiskCache::open(&d.path, d.size) {
            Ok(disk) => Some(disk),
            Err(e) => {
                tracing::warn!("{e}; serving without the disk tier");
                None
            }
        });
        let source = Source::new(
            io,
            config.threads.max(4),
            Duration::from_secs_f64(config.source_limits.timeout_s),
            config.source_limits.max_file_size,
            config.source_read_limit,
        )?;
        Ok(SampleProducer {
            source,
            fresh: Freshness::new(catalog.file_count()),
            out_len: output::encoded_len(&config.output, augmented_size),
            cache,
            disk,
            loads: SingleFlight::default(),
            plan: Mutex::new(None),
            jobs_sharing: AtomicU32::new(1),
            serve: Mutex::new(ServeProbe {
                at: Instant::now(),
                opens: 0,
                work: 0,
                best: None,
                busy: crate::planner::calibrate::machine_busy_seconds(),
                pixel_ns: 0,
                costed: (0, 0.0),
            }),
            config,
            catalog,
            stats: Stats::default(),
            draws,
            augmented_size,
        })
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The catalog served.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The live counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The sample cache.
    pub fn cache(&self) -> &SampleCache {
        &self.cache
    }

    /// The cache's disk tier, if one is open.
    pub fn disk_cache(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    /// The size of every augmented output.
    pub fn augmented_size(&self) -> Size2 {
        self.augmented_size
    }

    /// How cheaply `file` can be served in `form`'s view now: 0 when no cache form that view can
    /// use holds it, up to [`Form::top_rank`].
    pub fn rank(&self, file: FileId, form: Form) -> Rank {
        let held = self.cache.status.held(file);
        let has = |bit: u8| held & bit != 0;
        match form {
            Form::Augmented if has(HELD_AUGMENTED) => 3,
            Form::Augmented | Form::Decoded if has(HELD_DECODED) => 2,
            _ if has(HELD_ENCODED) => 1,
            _ => 0,
        }
    }

    /// [`SampleProducer::rank`] for one job (its used-by bit `job`): an augmented output this job
    /// has used already (it waits for the other jobs) is no hit for it, so the sample ranks as
    /// the next form that holds it.
    pub fn rank_for_job(&self, file: FileId, form: Form, job: u64) -> Rank {
        let rank = self.rank(file, form);
        if form == Form::Augmented && rank == 3 && !self.cache.augmented_usable_by(file, job) {
            let held = self.cache.status.held(file);
            return if held & HELD_DECODED != 0 { 2 } else if held & HELD_ENCODED != 0 { 1 } else { 0 };
        }
        rank
    }

    // ---- source reads -------------------------------------------------------------------------

    /// Stats `file` in the source and checks its version against the one last seen: a changed
    /// file's cached forms and probed size are dropped here, before anything is served.
    pub fn check_source(&self, file: FileId) -> Result<(FileMeta, Observed)> {
        let path = self.catalog.file_path(file);
        let meta = self.source.metadata(&path).map_err(|e| self.source_failure(file, &path, e))?;
        let observed = self.observe(file, &meta.identity);
        Ok((meta, observed))
    }

    /// `stat` of a source path (a directory's owner and mode, say).
    pub fn source_metadata(&self, path: &Path) -> Result<FileMeta> {
        self.source.metadata(path).map_err(|e| Error::source_io(path, e))
    }

    /// Records the version of `file` just seen; a changed one drops what was made of the old.
    fn observe(&self, file: FileId, identity: &Identity) -> Observed {
        let observed = self.fresh.observe(file, identity);
        if observed == Observed::Changed {
            self.cache.forget_sample(file);
            self.catalog.forget_size(file);
            bump(&self.stats.source_changes, 1);
            tracing::info!(file = %self.catalog.file_path(file).display(), "source file changed; its cached forms are dropped");
        }
        observed
    }

    /// Opens a source file for reading through (the top-level `encoded` view), and says how
    /// the version opened compares with the one seen before.
    pub fn open_source(&self, file: FileId) -> Result<(Arc<dyn SourceFile>, Observed)> {
        let path = self.catalog.file_path(file);
        let opened = self.source.open(&path).map_err(|e| self.source_failure(file, &path, e))?;
        let observed = self.observe(file, &opened.meta().identity);
        Ok((opened, observed))
    }

    /// Reads up to `size` bytes at `offset` of an open source file, within the read limit (what
    /// was read is charged, not what was asked for: a 1 MiB read of a 13 KB file costs 13 KB).
    pub fn read_source_at(&self, f: &Arc<dyn SourceFile>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let buf = self.source.read_at(f, offset, size).map_err(|e| {
            bump(&self.stats.source_errors, 1);
            Error::source_io("(open source file)", e)
        })?;
        bump(&self.stats.source_bytes_read, buf.len() as u64);
        Ok(buf)
    }

    /// Reads a whole source file (bounded, within the read limit), with the metadata of the
    /// version read.
    fn read_source(&self, file: FileId) -> std::io::Result<(Vec<u8>, FileMeta)> {
        let path = self.catalog.file_path(file);
        let started = Instant::now();
        let (buf, meta) = self.source.read_whole(&path)?;
        self.observe(file, &meta.identity);
        bump(&self.stats.source_bytes_read, buf.len() as u64);
        bump(&self.stats.source_reads, 1);
        bump(&self.stats.source_read_nanos, started.elapsed().as_nanos() as u64);
        Ok((buf, meta))
    }

    /// The error a failed source access gives. A file that is no sample prepfs will read (over
    /// `max_file_size`, not a regular file) is marked bad like an undecodable one: refused in
    /// every view, logged once, until the file changes. Other failures are counted and logged
    /// (at most a line a second, however many requests fail).
    fn source_failure(&self, file: FileId, path: &Path, e: std::io::Error) -> Error {
        use std::io::ErrorKind;
        if matches!(e.kind(), ErrorKind::FileTooLarge | ErrorKind::InvalidInput) {
            return self.mark_bad(file, SampleError::NotASample(Arc::new(e)));
        }
        bump(&self.stats.source_errors, 1);
        let err = Error::source_io(path, e);
        crate::warn_limited!("source", "{err}");
        err
    }

    // ---- sample sizes and bad samples ---------------------------------------------------------

    /// A sample's pixel size from its header, probed once and remembered.
    pub fn source_size(&self, file: FileId) -> Result<Size2> {
        if let Some(known) = self.catalog.known_size(file) {
            return known.map_err(|()| Error::decode(self.catalog.file_path(file), SampleError::UnreadableHeader));
        }
        let path = self.catalog.file_path(file);
        let probed = self.probe_source(file, &path);
        match probed {
            Ok(size) => {
                self.catalog.remember_size(file, Ok(size));
                Ok(size)
            }
            Err(Error::Decode { reason, .. }) if !self.known_bad(file) => Err(self.mark_bad(file, reason)),
            Err(e) => Err(e),
        }
    }

    /// Probes a sample's size from the first bytes of its file (the whole file, bounded, when
    /// its header lies further in).
    fn probe_source(&self, file: FileId, path: &Path) -> Result<Size2> {
        const HEAD: usize = 64 * 1024;
        let (head, meta) = self.source.read_head(path, HEAD).map_err(|e| self.source_failure(file, path, e))?;
        self.observe(file, &meta.identity);
        match pipeline::probe_size(std::io::Cursor::new(&head[..])) {
            Ok(size) => Ok(size),
            Err(_) if (head.len() as u64) < meta.len() => {
                let (all, _) = self.read_source(file).map_err(|e| self.source_failure(file, path, e))?;
                pipeline::probe_size(std::io::Cursor::new(&all[..])).map_err(|why| Error::decode(path, why))
            }
            Err(why) => Err(Error::decode(path, why)),
        }
    }

    /// Whether `file` was found undecodable earlier.
    pub fn known_bad(&self, file: FileId) -> bool {
        matches!(self.catalog.known_size(file), Some(Err(())))
    }

    /// Records an undecodable sample: one log line naming the file and the reason, a count in
    /// stats, and a mark so every later open refuses it at once.
    fn mark_bad(&self, file: FileId, reason: SampleError) -> Error {
        bump(&self.stats.decode_errors, 1);
        let err = Error::decode(self.catalog.file_path(file), reason);
        // Once per file (and version): later opens are refused without a line.
        tracing::warn!("{err}");
        self.catalog.remember_size(file, Err(()));
        err
    }

    /// The refusal of a sample found undecodable earlier: a region decode may have missed damage
    /// outside its rows once, but a bad sample stays refused, consistently, in every view.
    fn refuse_known_bad(&self, file: FileId) -> Result<()> {
        if self.known_bad(file) {
            bump(&self.stats.decode_errors, 1);
            let path = self.catalog.file_path(file);
            return Err(Error::decode(path, SampleError::FoundEarlier));
        }
        Ok(())
    }

    // ---- the three forms ----------------------------------------------------------------------

    /// The bytes of one `augmented` file of `file` for `consumer`, and where they came from.
    pub fn augmented(&self, file: FileId, consumer: Consumer) -> Result<(Arc<[u8]>, Origin)> {
        self.refuse_known_bad(file)?;
        let hit = match consumer {
            Consumer::TopLevel => self.cache.augmented.take(file).map(|e| e.bytes),
            Consumer::Job { bit, active } => self.cache.take_augmented_for_job(file, bit, active),
            Consumer::Prefetch => None,
        };
        if let Some(out) = hit {
            return Ok((out, Origin::Augmented));
        }
        // Another active job will be handed this job's output; else a spare is worth making.
        let shared = matches!(consumer, Consumer::Job { bit, active } if active & !bit != 0);
        let spare = !shared && consumer != Consumer::Prefetch;
        let (loaded, origin) = self.load(file, Admit::Augmented { spare })?;
        let out = self.augment(file, &loaded)?;
        match consumer {
            // Shared with the other active jobs (Seneca): dropped once they all used it.
            Consumer::Job { bit, .. } if shared => {
                self.cache.augmented.admit(file, AugmentedEntry { bytes: Arc::clone(&out), used_by: bit });
            }
            Consumer::Prefetch => {
                self.cache.augmented.admit(file, AugmentedEntry::fresh(Arc::clone(&out)));
            }
            _ => {}
        }
        Ok((out, origin))
    }

    /// The bytes of `file`'s `decoded` file, and where they came from.
    pub fn decoded(&self, file: FileId) -> Result<(Arc<[u8]>, Origin)> {
        self.refuse_known_bad(file)?;
        let (loaded, origin) = self.load(file, Admit::Pixels)?;
        let pixels = match loaded {
            Loaded::Pixels(p) => p,
            Loaded::Bytes(b) => Arc::new(self.timed(file, Timing::Decode, || pipeline::decode_full(&b, self.config.max_pixels))?),
        };
        Ok((output::encode(&self.config.output, &pixels).into(), origin))
    }

    /// The whole source bytes of `file`, from the encoded cache or the source (then admitted
    /// while encoded has room), and where they came from.
    pub fn encoded(&self, file: FileId) -> Result<(Arc<[u8]>, Origin)> {
        if let Some(bytes) = self.cache.encoded.get(file) {
            return Ok((bytes, Origin::Encoded));
        }
        let path = self.catalog.file_path(file);
        let (bytes, meta) = self.read_source(file).map_err(|e| self.source_failure(file, &path, e))?;
        let bytes: Arc<[u8]> = bytes.into();
        if self.cache.enabled() && self.fresh.is_current(file, &meta.identity) {
            self.cache.encoded.admit(file, Arc::clone(&bytes));
        }
        let key = self.disk.as_ref().map(|_| self.disk_key(file, &meta));
        self.spill(key, None, &bytes);
        Ok((bytes, Origin::Source))
    }

    /// One fresh augmentation of a loaded sample (a new draw: never a crop served before).
    fn augment(&self, file: FileId, loaded: &Loaded) -> Result<Arc<[u8]>> {
        let draw = u64::from(self.draws[file as usize].fetch_add(1, Ordering::Relaxed));
        let mut rng = draw_rng(self.config.seed, 0, draw, u64::from(file));
        let max_pixels = self.config.max_pixels;
        let pixels = match loaded {
            Loaded::Pixels(p) => {
                let plan = plan_sample(&self.config.augment, Size2::new(p.width, p.height), &mut rng);
                self.timed(file, Timing::AugmentPixels, || pipeline::augment_pixels(p, &plan))?
            }
            Loaded::Bytes(bytes) => self.timed(file, Timing::DecodeAugment, || {
                let size = pipeline::probe_size(std::io::Cursor::new(&bytes[..]))?;
                pipeline::check_pixels(size, max_pixels)?;
                let plan: SamplePlan = plan_sample(&self.config.augment, size, &mut rng);
                pipeline::augment(bytes, &plan, max_pixels)
            })?,
        };
        Ok(output::encode(&self.config.output, &pixels).into())
    }

    /// Runs pixel work, timing it into stats and marking the sample bad if it fails.
    /// The time is this thread's CPU time, not wall time: with more decode threads than cores,
    /// wall time would count a core's time once per thread sharing it, and the model's CPU
    /// rates (per core, times the cores) would come out too low.
    fn timed(&self, file: FileId, kind: Timing, work: impl FnOnce() -> std::result::Result<Rgb, PixelError>) -> Result<Rgb> {
        let started = thread_cpu_nanos();
        let pixels = work().map_err(|why| self.mark_bad(file, why.into()))?;
        let nanos = thread_cpu_nanos().saturating_sub(started).max(1);
        let (count, total) = match kind {
            Timing::Decode => (&self.stats.full_decodes, &self.stats.full_decode_nanos),
            Timing::DecodeAugment => (&self.stats.decode_augments, &self.stats.decode_augment_nanos),
            Timing::AugmentPixels => (&self.stats.pixel_augments, &self.stats.pixel_augment_nanos),
        };
        bump(count, 1);
        bump(total, nanos);
        Ok(pixels)
    }

    // ---- loading through the tiers ------------------------------------------------------------

    /// The sample in the cheapest form held, else read from the disk tier or the source (once,
    /// however many requests miss together) and admitted in Seneca's fill order.
    fn load(&self, file: FileId, want: Admit) -> Result<(Loaded, Origin)> {
        if let Some(p) = self.cache.decoded.get(file) {
            return Ok((Loaded::Pixels(p), Origin::Decoded));
        }
        if let Some(b) = self.cache.encoded.get(file) {
            return Ok((Loaded::Bytes(b), Origin::Encoded));
        }
        let work = || match self.load_from_disk(file) {
            Some(loaded) => Ok((loaded, Origin::Disk)),
            None => self.load_from_source(file, want).map(|l| (l, Origin::Source)),
        };
        self.loads.run(file, work)
    }

    /// The disk tier's key for a source file: its relative path and version.
    fn disk_key(&self, file: FileId, meta: &FileMeta) -> u64 {
        let path = self.catalog.file_path(file);
        let rel = path.strip_prefix(self.catalog.root()).unwrap_or(&path);
        disk::key_of(rel, &meta.identity)
    }

    /// The sample from the disk tier (decoded pixels first, then encoded bytes), promoted into
    /// the memory form while it has room. A damaged entry reads as a miss (the tier drops it).
    fn load_from_disk(&self, file: FileId) -> Option<Loaded> {
        let disk = self.disk.as_ref()?;
        let meta = self.source.metadata(&self.catalog.file_path(file)).ok()?;
        self.observe(file, &meta.identity);
        match disk.get(self.disk_key(file, &meta))? {
            DiskHit::Pixels(pixels) => {
                let pixels = Arc::new(pixels);
                self.cache.decoded.admit(file, Arc::clone(&pixels));
                Some(Loaded::Pixels(pixels))
            }
            DiskHit::Bytes(bytes) => {
                let bytes: Arc<[u8]> = bytes.into();
                self.cache.encoded.admit(file, Arc::clone(&bytes));
                Some(Loaded::Bytes(bytes))
            }
        }
    }

    /// Spills what a miss produced to the disk tier: the pixels, or the source bytes when the
    /// pixels do not fit (augmented outputs never go to disk). Queued, not written, here.
    fn spill(&self, key: Option<u64>, pixels: Option<&Arc<Rgb>>, bytes: &Arc<[u8]>) {
        let (Some(disk), Some(key)) = (self.disk.as_ref(), key) else { return };
        let pixels_spilled = pixels.is_some_and(|p| disk.admit_decoded(key, Arc::clone(p)));
        if !pixels_spilled && !disk.contains(DiskKind::Decoded, key) {
            disk.admit_encoded(key, Arc::clone(bytes));
        }
    }

    /// Reads a sample from the source and admits it in Seneca's fill order: a spare fresh
    /// augmentation while augmented has room (when `want` asks for one and the pixels are kept),
    /// the pixels while decoded has room, else the bytes while encoded has room. The bytes or pixels also spill
    /// to the disk tier, whether or not memory took them.
    fn load_from_source(&self, file: FileId, want: Admit) -> Result<Loaded> {
        let path = self.catalog.file_path(file);
        let (bytes, meta) = self.read_source(file).map_err(|e| self.source_failure(file, &path, e))?;
        let bytes: Arc<[u8]> = bytes.into();
        let key = self.disk.as_ref().map(|_| self.disk_key(file, &meta));
        // A version older than one seen meanwhile is served to this request, never kept.
        if !self.cache.enabled() || !self.fresh.is_current(file, &meta.identity) {
            self.spill(key, None, &bytes);
            return Ok(Loaded::Bytes(bytes));
        }
        // The header is in hand: no second read of the file for its size.
        let decoded_len = pipeline::probe_size(std::io::Cursor::new(&bytes[..])).map_or(0, |s| s.area() * 3);
        // A full decode (rather than the region fast path) only when the pixels are kept; a spare
        // augmentation only when the pixels are in hand anyway (it then costs a resample, not a
        // second decode). Otherwise the refill fills augmented room, off the request path.
        let keep_pixels = decoded_len > 0 && self.cache.decoded.has_room_for(decoded_len);
        let spare = want == Admit::Augmented { spare: true }
            && (keep_pixels || want == Admit::Pixels)
            && self.cache.augmented.has_room_for(self.out_len);
        if spare || keep_pixels || want == Admit::Pixels {
            let pixels = self
                .timed(file, Timing::Decode, || pipeline::decode_full(&bytes, self.config.max_pixels))
                .map(Arc::new)?;
            if spare {
                if let Ok(extra) = self.augment(file, &Loaded::Pixels(Arc::clone(&pixels))) {
                    self.cache.augmented.admit(file, AugmentedEntry::fresh(extra));
                }
            }
            // The pixels are in hand: keep them while decoded has room (so refill can make later
            // augmentations without the source), else the bytes while encoded has room.
            if !self.cache.decoded.admit(file, Arc::clone(&pixels)) {
                self.cache.encoded.admit(file, Arc::clone(&bytes));
            }
            self.spill(key, Some(&pixels), &bytes);
            return Ok(Loaded::Pixels(pixels));
        }
        self.cache.encoded.admit(file, Arc::clone(&bytes));
        self.spill(key, None, &bytes);
        Ok(Loaded::Bytes(bytes))
    }

    // ---- background work ----------------------------------------------------------------------

    /// One unit of background refill: a fresh augmentation into free augmented room of a sample
    /// `wanted` (some job has not seen it), made from the decoded or encoded cache when they hold
    /// it, else from the source. Workers share the samples out by `lane` of `lanes` (sample ids
    /// equal to `lane` modulo `lanes`), so they never make the same one. Returns false when there
    /// is nothing to do (no room, or every wanted sample of the lane already has one).
    pub fn refill_once(&self, cursor: &mut usize, (lane, lanes): (usize, usize), wanted: impl Fn(FileId) -> bool) -> bool {
        if !self.cache.augmented.has_room_for(self.out_len) {
            return false;
        }
        let lanes = lanes.max(1);
        let n = self.catalog.file_count().saturating_sub(lane).div_ceil(lanes);
        for _ in 0..n {
            // Offset by half the lane: readers that go in name order start at the beginning, so
            // the refill works ahead of them rather than on the sample they are decoding.
            let file = (((*cursor + n / 2) % n) * lanes + lane) as FileId;
            *cursor = cursor.wrapping_add(1);
            if self.cache.status.held(file) & HELD_AUGMENTED != 0 || !self.catalog.is_image(file) {
                continue;
            }
            if self.known_bad(file) || !wanted(file) || self.loads.in_flight(file) {
                continue;
            }
            // From the decoded or encoded cache when they hold it, else from the source (which
            // also fills decoded or encoded while they have room).
            let refilled = self
                .load(file, Admit::Fill)
                .and_then(|(loaded, _)| self.augment(file, &loaded))
                .map(|out| self.cache.augmented.admit(file, AugmentedEntry::fresh(out)));
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
    pub fn prepare(&self, file: FileId, form: Form) -> bool {
        if self.rank(file, form) > 0 || self.known_bad(file) || !self.catalog.is_image(file) || !self.cache.enabled() {
            return false;
        }
        let encoded_fits = || {
            let len = self.source.metadata(&self.catalog.file_path(file)).map_or(u64::MAX, |m| m.len());
            self.cache.encoded.has_room_for(len)
        };
        let decoded_fits = || match self.catalog.known_size(file) {
            Some(Ok(size)) => self.cache.decoded.has_room_for(size.area() * 3),
            _ => false,
        };
        let done = match form {
            Form::Augmented if self.cache.augmented.has_room_for(self.out_len) => {
                self.augmented(file, Consumer::Prefetch).is_ok()
            }
            Form::Encoded if encoded_fits() => self.encoded(file).is_ok(),
            Form::Augmented | Form::Decoded if decoded_fits() || encoded_fits() => self.load(file, Admit::Fill).is_ok(),
            _ => false,
        };
        done && self.rank(file, form) > 0
    }

    // ---- the cache plan -----------------------------------------------------------------------

    /// Measures the model's inputs here and applies the split: the best one for `split: auto`,
    /// else the configured one, with the model's prediction for it in stats either way.
    pub fn plan_cache(&self) {
        if !self.cache.enabled() {
            return;
        }
        let read = |f: FileId| self.source.read_whole(&self.catalog.file_path(f)).ok().map(|(bytes, _)| bytes);
        let Some(calibration) = crate::planner::calibrate::measure(&self.catalog, &self.config, read) else {
            tracing::warn!("no sample could be timed; keeping split {}", self.cache.split());
            return;
        };
        let mut params = calibration.params;
        if let Some(limit) = self.source.read_limit() {
            params.b_storage = params.b_storage.min(limit.bytes_per_s() as f64);
        }
        self.apply_plan(params, "mount-time calibration", calibration.samples_timed as u64);
    }

    /// Re-plans from the rates measured while serving, once enough samples were timed since the
    /// last plan: decode+augment and augment-only rates per thread times the decodes that can run at once, and
    /// the source's read rate. Returns whether it re-planned.
    pub fn replan_from_live_rates(&self) -> bool {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let t_serve = self.probe_serve();
        let (da_n, da_ns) = (get(&self.stats.decode_augments), get(&self.stats.decode_augment_nanos));
        let (a_n, a_ns) = (get(&self.stats.pixel_augments), get(&self.stats.pixel_augment_nanos));
        let (full_n, full_ns) = (get(&self.stats.full_decodes), get(&self.stats.full_decode_nanos));
        let (reads, read_ns, read_bytes) =
            (get(&self.stats.source_reads), get(&self.stats.source_read_nanos), get(&self.stats.source_bytes_read));
        let timed = da_n + a_n;
        let jobs = self.jobs_sharing.load(Ordering::Relaxed).max(1);
        let mut params = {
            let plan = self.plan.lock_or_recover();
            let moved = |p: &PlanState| {
                let serve_moved = match (t_serve, p.params.t_serve) {
                    (Some(now), Some(then)) => (now / then - 1.0).abs() > 0.2,
                    (now, then) => now.is_some() != then.is_some(),
                };
                serve_moved || p.params.jobs != jobs
            };
            match plan.as_ref() {
                Some(p) if timed >= p.timed + REPLAN_MIN_SAMPLES || moved(p) => p.params.clone(),
                _ => return false,
            }
        };
        if t_serve.is_some() {
            params.t_serve = t_serve;
        }
        let threads = self.config.decode_parallelism() as f64;
        if da_n >= REPLAN_MIN_SAMPLES / 4 {
            params.t_da = threads * da_n as f64 / (da_ns as f64 / 1e9).max(1e-9);
        } else if full_n > 0 && a_n > 0 {
            // Decoded-cache hits only: a full decode followed by an augment.
            let per = full_ns as f64 / full_n as f64 + a_ns as f64 / a_n as f64;
            params.t_da = threads * 1e9 / per.max(1.0);
        }
        if a_n >= REPLAN_MIN_SAMPLES / 4 {
            params.t_a = threads * a_n as f64 / (a_ns as f64 / 1e9).max(1e-9);
        }
        if reads >= REPLAN_MIN_SAMPLES / 4 && read_ns > 0 {
            // Behind a read limit the storage gives the limit: reads queued at the throttle take
            // longer each, and bytes over their summed times would come out below it.
            let rate = match self.source.read_limit() {
                Some(limit) => limit.bytes_per_s() as f64,
                None => read_bytes as f64 / (read_ns as f64 / 1e9),
            };
            params.b_storage = rate.min(1e12);
            // The mean file as read while serving: calibration's dozen samples can miss it.
            params.s_data = read_bytes as f64 / reads as f64;
        }
        self.apply_plan(params, "rates measured while serving", timed);
        true
    }

    /// Sets how many jobs are active (they share each augmented output); under `policy: auto`
    /// the cache evicts by LRU while more than one is.
    pub fn set_jobs_sharing(&self, jobs: usize) {
        self.jobs_sharing.store(jobs.max(1) as u32, Ordering::Relaxed);
        if self.config.cache.policy == crate::config::EvictionPolicy::Auto {
            self.cache.set_lru(jobs > 1);
        }
        self.cache.set_shared_outputs(jobs > 1);
    }

    /// One step of the serving-rate probe (called about once a second); the rate found so far.
    ///
    /// Serving costs CPU beyond the pixel work: FUSE round trips, copies and the readers' own
    /// work on the same cores. With one reading stream it is the best rate of an interval of a
    /// second that served at least [`SERVE_PROBE_MIN`] samples from the cache alone (no pixel
    /// work, no source reads); until one has, the model's default. With several jobs, whose
    /// misses never stop, it is the machine's busy core-seconds less the pixel work's CPU time,
    /// per sample served, over the intervals that served enough: that also counts what a miss
    /// costs beyond its timed pixel work (the source read, the output's encoding) at the jobs'
    /// steady mix of hits and misses, and any other load on the machine. (With one stream that
    /// mix changes from the first epoch to the second, so a lumped cost would mispredict both.)
    fn probe_serve(&self) -> Option<f64> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let s = &self.stats;
        let opens = get(&s.encoded.opens) + get(&s.decoded.opens) + get(&s.augmented.opens);
        let work = s.decodes() + get(&s.source_reads);
        let pixel_ns = get(&s.full_decode_nanos) + get(&s.decode_augment_nanos) + get(&s.pixel_augment_nanos);
        let busy = crate::planner::calibrate::machine_busy_seconds();
        let cores = self.config.decode_parallelism() as f64;
        let mut probe = self.serve.lock_or_recover();
        let secs = probe.at.elapsed().as_secs_f64();
        if secs >= 0.9 {
            let served = opens.saturating_sub(probe.opens);
            if work == probe.work && served >= SERVE_PROBE_MIN {
                let rate = served as f64 / secs;
                probe.best = Some(probe.best.map_or(rate, |b: f64| b.max(rate)));
            }
            let mut costed = probe.costed;
            if let (Some(now), Some(then)) = (busy, probe.busy) {
                let spent = now - then - pixel_ns.saturating_sub(probe.pixel_ns) as f64 / 1e9;
                if served >= SERVE_PROBE_MIN && spent > 0.0 {
                    costed = (costed.0 + served, costed.1 + spent);
                }
            }
            *probe = ServeProbe { at: Instant::now(), opens, work, best: probe.best, busy, pixel_ns, costed };
        }
        let jobs = self.jobs_sharing.load(Ordering::Relaxed);
        match (probe.best, probe.costed) {
            // Core-seconds a sample on `cores` cores: the machine serves cores / that a second.
            (_, (n, spent)) if jobs > 1 && n > 0 => Some(cores * n as f64 / spent),
            (best, _) => best,
        }
    }

    fn apply_plan(&self, mut params: crate::planner::PlanParams, from: &str, timed: u64) {
        use crate::planner::Model;
        params.jobs = self.jobs_sharing.load(Ordering::Relaxed).max(1);
        let (split, evaluation) = match self.config.cache.split {
            SplitChoice::Auto => Model::Prepfs.best_split(&params),
            SplitChoice::Fixed(split) => (split, Model::Prepfs.evaluate(&params, split)),
        };
        let previous = self.cache.split();
        // Memory a form cannot use (it holds every sample) flows to the next form.
        let budgets = crate::planner::budgets(&params, split, crate::cache::ENTRY_OVERHEAD as f64);
        self.cache.set_split_budgets(split, budgets);
        if previous != split || from.starts_with("mount") {
            tracing::info!(
                split = %split,
                predicted_samples_per_s = format!("{:.0}", evaluation.samples_per_s),
                t_da = format!("{:.0}", params.t_da),
                t_a = format!("{:.0}", params.t_a),
                b_storage_mb_s = format!("{:.0}", params.b_storage / 1e6),
                from,
                "cache plan"
            );
        }
        let doc = serde_json::json!({
            "split": split.as_array(),
            "model": "prepfs",
            "budgets": budgets,
            "predicted_samples_per_s": evaluation.samples_per_s,
            // Of the samples served, those not read from the source (with several jobs: what
            // the jobs' hit rates should come to).
            "predicted_hit_rate": 1.0 - evaluation.n_storage / (params.n_total.max(1) as f64),
            "seneca_predicted_samples_per_s": crate::planner::Model::Seneca.evaluate(&params, split).samples_per_s,
            // A first pass, with nothing cached yet: every sample a miss.
            "predicted_cold_samples_per_s":
                Model::Prepfs.evaluate(&crate::planner::PlanParams { s_cache: 0.0, ..params.clone() }, split).samples_per_s,
            "inputs": params,
            "from": from,
            "samples_timed": timed,
        });
        *self.plan.lock_or_recover() = Some(PlanState { doc, params, timed });
    }

    /// The plan in force, for stats.
    pub fn plan_json(&self) -> serde_json::Value {
        self.plan.lock_or_recover().as_ref().map_or(serde_json::Value::Null, |p| p.doc.clone())
    }

    /// Makes throttled source reads give up at once.
    pub fn interrupt(&self) {
        self.source.interrupt();
    }

    /// Stops the source's I/O (throttled reads return, the I/O threads are joined) and writes
    /// out the disk tier's queued entries: the end of a mount.
    pub fn shutdown(&self) {
        self.source.shutdown(Duration::from_secs(2));
        if let Some(disk) = &self.disk {
            if !disk.flush(Duration::from_secs(10)) {
                tracing::warn!("the disk tier's queued writes did not finish within 10 s; some are lost");
            }
        }
    }

    /// The cache's figures, with the disk tier's under `disk` (null without one).
    pub fn cache_stats(&self) -> serde_json::Value {
        let mut stats = self.cache.stats();
        if let Some(obj) = stats.as_object_mut() {
            obj.insert("disk".into(), self.disk.as_ref().map_or(serde_json::Value::Null, DiskCache::stats));
            obj.insert(
                "read_limit_bytes_per_s".into(),
                self.source.read_limit().map_or(serde_json::Value::Null, |l| l.bytes_per_s().into()),
            );
        }
        stats
    }
}

/// CPU time the calling thread has used, nanoseconds.
fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// Which rate a timed piece of pixel work feeds.
#[derive(Clone, Copy)]
enum Timing {
    /// A full decode (decoded view, or a miss keeping pixels).
    Decode,
    /// Decode and augment from encoded bytes (the model's `t_da`).
    DecodeAugment,
    /// Augment from decoded pixels (the model's `t_a`).
    AugmentPixels,
}
