//! `prepfs worker`'s core (issue 52): a machine that reaches the source and the shared tier
//! lends its CPUs to the mounts that share it. It takes work items from the tier's queue
//! ([`prepfs_cache::remote::work`]), makes each with the mount's own code (the source read by
//! [`SampleReader`], the pixels by [`PixelWork`] with the draw the mount reserved), sends the
//! output to the asking mount under the deployment's MAC and acknowledges the item.
//!
//! An item is made only as asked: for a pipeline whose ops and output this worker's config
//! gives the same fingerprint (else `other_recipe`), of the sample at the path and version named
//! (else `stale`: the file changed, or the worker's catalog differs), not older than
//! [`ITEM_MAX_AGE`] (`stale`: its mount stopped waiting). An item whose MAC fails, written
//! without the secret or by another format, is `refused`; one whose sample cannot be read or
//! decoded `failed`. Each is acknowledged all the same, so it is not handed out again; the mount
//! makes such samples itself.
//!
//! Threads: `threads` making threads (`prepfs-worker-<i>`), each taking one item at a time, and
//! the beat (`prepfs-worker-beat`), all owned by [`Worker::run`]'s [`Workers`], stopped and
//! joined when it returns: a stop (SIGTERM) lets each thread finish the item in hand and take no
//! more, then the worker's beat is removed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::pixel_work::PixelWork;
use crate::sample_reader::SampleReader;
use crate::stats::Stats;
use prepfs_base::tasks::{self, Workers};
use prepfs_base::thread_time::thread_cpu_nanos;
use prepfs_cache::remote::work::{unix_ms, Refusal, Taken, WorkItem, WorkTaker, WorkerBeat, ITEM_MAX_AGE};
use prepfs_cache::remote::{self, RemoteError, RemoteTier};
use prepfs_pixels::served::OutputFiles;
use prepfs_source::catalog::Catalog;
use prepfs_source::{Source, SourceIo};

/// How long a making thread waits on the queue for an item before it looks at the stop again.
const TAKE_WAIT: Duration = Duration::from_millis(90);
/// The window the beat's rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Why a worker cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("a worker needs the shared tier its mounts use: set `cache.remote` (url, size and secret_file, {})", remote::HOW_TO_MAKE)]
    NoRemote,
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("the worker name `{0}` is not 1 to 64 of ASCII letters, digits, `-`, `_` and `.`")]
    Name(String),
    #[error("cannot start the worker: {0}")]
    Io(#[from] std::io::Error),
}

/// What a worker did, by outcome (its metrics and its last line say them).
#[derive(Debug, Default)]
struct WorkerCounters {
    done: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    stale: AtomicU64,
    other_recipe: AtomicU64,
    /// Items taken over from a worker that died holding them.
    takeovers: AtomicU64,
    /// CPU nanoseconds of making (reading, decoding, augmenting, encoding).
    make_nanos: AtomicU64,
    bytes_sent: AtomicU64,
}

/// A worker: see the module documentation.
pub struct Worker {
    catalog: Arc<Catalog>,
    reader: SampleReader,
    pixels: PixelWork,
    /// Kept for its connections (and closed with the worker).
    remote: RemoteTier,
    taker: WorkTaker,
    /// The fingerprint of each pipeline this worker can make (0: `augmented/`'s).
    fingerprints: Vec<u64>,
    threads: usize,
    host: String,
    counters: WorkerCounters,
}

impl Worker {
    /// A worker named `name` making `threads` items at once, over `catalog` (scanned as a mount
    /// of `config` scans it: the same ids) read through `io`.
    pub fn new(config: &Config, catalog: Catalog, io: Arc<dyn SourceIo>, name: &str, threads: usize) -> Result<Worker, WorkerError> {
        if !remote::work::valid_worker_name(name) {
            return Err(WorkerError::Name(name.to_string()));
        }
        let r = config.cache.remote.as_ref().ok_or(WorkerError::NoRemote)?;
        let access = remote::Access::load(r)?;
        let catalog = Arc::new(catalog);
        let fingerprint = remote::dataset_fingerprint(&catalog);
        let remote = RemoteTier::open(&r.url, &access, r.size, fingerprint, remote::recipe_fingerprint(&config.augment, &config.output), None)?;
        let taker = remote.work_taker(name);
        let stats = Arc::new(Stats::default());
        let source = Source::new(
            io,
            threads.max(1),
            Duration::from_secs_f64(config.source_limits.timeout_s),
            config.source_limits.max_file_size,
            config.source_read_limit,
        )?;
        // Nothing the worker reads is cached: a changed file needs no forgetting here.
        let reader = SampleReader::new(Arc::clone(&catalog), source, Arc::clone(&stats), Box::new(|_| {}));
        let pixels = PixelWork::new(config, catalog.file_count(), stats, OutputFiles::new());
        let fingerprints = (0..pixels.pipelines()).map(|p| pixels.pipeline_fingerprint(p)).collect();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
        tracing::info!(name, threads, fingerprint = %format!("{fingerprint:016x}"), url = %remote::redacted(&r.url), "worker ready");
        Ok(Worker { catalog, reader, pixels, remote, taker, fingerprints, threads: threads.max(1), host, counters: WorkerCounters::default() })
    }

    /// Takes and makes items until `stop` is set, then finishes the items in hand, removes its
    /// beat and returns.
    pub fn run(self: &Arc<Self>, stop: &Arc<AtomicBool>) -> std::io::Result<()> {
        self.taker.join();
        let mut workers = Workers::default();
        for i in 0..self.threads {
            let me = Arc::clone(self);
            let outer = Arc::clone(stop);
            workers.spawn(format!("prepfs-worker-{i}"), tasks::REQUEST, move |own| {
                while !own.load(Ordering::Relaxed) && !outer.load(Ordering::Relaxed) {
                    for taken in me.taker.take(1, TAKE_WAIT) {
                        me.work(taken);
                    }
                }
            })?;
        }
        let me = Arc::clone(self);
        let outer = Arc::clone(stop);
        workers.spawn("prepfs-worker-beat".into(), tasks::REQUEST, move |own| {
            let mut window: std::collections::VecDeque<(Instant, u64)> = std::collections::VecDeque::new();
            while !own.load(Ordering::Relaxed) && !outer.load(Ordering::Relaxed) {
                let done = me.counters.done.load(Ordering::Relaxed);
                window.push_back((Instant::now(), done));
                while window.len() > 2 && window.front().is_some_and(|(t, _)| t.elapsed() > RATE_WINDOW) {
                    window.pop_front();
                }
                let rate = match (window.front(), window.back()) {
                    (Some((t0, d0)), Some((t1, d1))) if t1 > t0 => (d1 - d0) as f64 / t1.duration_since(*t0).as_secs_f64(),
                    _ => 0.0,
                };
                me.taker.beat(&WorkerBeat { name: me.taker.name().to_string(), host: me.host.clone(), threads: me.threads as u32, rate, done, at_ms: unix_ms() });
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until && !own.load(Ordering::Relaxed) && !outer.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        })?;
        // The threads watch `stop` themselves; the owner joins them once it is set.
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        workers.stop();
        workers.join();
        self.taker.leave();
        self.remote.close();
        Ok(())
    }

    /// One item taken: made and delivered, or acknowledged with why not.
    fn work(&self, taken: Taken) {
        let c = &self.counters;
        if taken.delivered > 1 {
            c.takeovers.fetch_add(1, Ordering::Relaxed);
        }
        let item = match taken.item {
            Ok(item) => item,
            Err(why) => {
                match why {
                    Refusal::Forged => prepfs_base::warn_limited!("worker-forged", "a work item fails its MAC (written without the deployment's secret): refused"),
                    Refusal::Format => prepfs_base::warn_limited!("worker-format", "a work item of another format (another version of prepfs?): refused"),
                }
                c.refused.fetch_add(1, Ordering::Relaxed);
                self.taker.discard(&taken.entry);
                return;
            }
        };
        let taken_ms = unix_ms();
        if self.fingerprints.get(usize::from(item.pipeline)) != Some(&item.recipe) {
            prepfs_base::warn_limited!("worker-recipe", pipeline = item.pipeline, "an item of a pipeline this worker's config does not have (its augment or output differ from the mount's): passed back to the mount");
            c.other_recipe.fetch_add(1, Ordering::Relaxed);
            self.taker.discard(&taken.entry);
            return;
        }
        if taken_ms.saturating_sub(item.queued_ms) > ITEM_MAX_AGE.as_millis() as u64 {
            c.stale.fetch_add(1, Ordering::Relaxed);
            self.taker.discard(&taken.entry);
            return;
        }
        let started = thread_cpu_nanos();
        match self.make(&item) {
            Ok(Some(output)) => {
                let nanos = thread_cpu_nanos().saturating_sub(started);
                c.make_nanos.fetch_add(nanos, Ordering::Relaxed);
                if let Some(sent) = self.taker.deliver(&taken.entry, &item, taken_ms, nanos / 1000, &output) {
                    c.done.fetch_add(1, Ordering::Relaxed);
                    c.bytes_sent.fetch_add(sent, Ordering::Relaxed);
                }
            }
            Ok(None) => {
                c.stale.fetch_add(1, Ordering::Relaxed);
                self.taker.discard(&taken.entry);
            }
            Err(e) => {
                prepfs_base::warn_limited!("worker-failed", error = %e, "a work item's sample cannot be made; the mount makes it itself");
                c.failed.fetch_add(1, Ordering::Relaxed);
                self.taker.discard(&taken.entry);
            }
        }
    }

    /// The output `item` asks for; `None` where the sample is not the one the item names (another
    /// path at that id, or another version).
    fn make(&self, item: &WorkItem) -> crate::error::Result<Option<Vec<u8>>> {
        if item.id as usize >= self.catalog.file_count() || !self.catalog.is_image(item.id) {
            return Ok(None);
        }
        let (sample, _) = self.reader.resolve(item.id)?;
        let rel = sample.path.strip_prefix(self.catalog.root()).unwrap_or(&sample.path);
        let version = &sample.meta.identity;
        if rel != item.rel || version.len != item.len || version.mtime_ns != item.mtime_ns {
            return Ok(None);
        }
        let (bytes, _) = self.reader.read(&sample)?;
        let out = self
            .pixels
            .decode_augment_drawn(item.pipeline, item.id, &bytes, None, Some((item.seed, item.draw)))
            .map_err(|why| self.reader.mark_bad(item.id, &sample.path, why.into()))?;
        // An output is made in memory (`decode_augment_drawn` with a draw): this cannot fail.
        Ok(Some(out.to_vec().map_err(|e| crate::error::Error::source_io(&sample.path, e))?))
    }

    /// The worker's figures in Prometheus's text format (its `--metrics-addr`).
    pub fn metrics_text(&self) -> String {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut t = String::new();
        t.push_str("# HELP prepfs_worker_items_total Work items this worker took, by outcome.\n# TYPE prepfs_worker_items_total counter\n");
        for (outcome, n) in [("done", &c.done), ("failed", &c.failed), ("refused", &c.refused), ("stale", &c.stale), ("other_recipe", &c.other_recipe)] {
            t.push_str(&format!("prepfs_worker_items_total{{outcome=\"{outcome}\"}} {}\n", get(n)));
        }
        t.push_str(&format!("# HELP prepfs_worker_takeovers_total Items taken over from a worker that died holding them.\n# TYPE prepfs_worker_takeovers_total counter\nprepfs_worker_takeovers_total {}\n", get(&c.takeovers)));
        t.push_str(&format!("# HELP prepfs_worker_make_seconds_total CPU seconds spent making items.\n# TYPE prepfs_worker_make_seconds_total counter\nprepfs_worker_make_seconds_total {}\n", get(&c.make_nanos) as f64 / 1e9));
        t.push_str(&format!("# HELP prepfs_worker_bytes_sent_total Bytes of results sent to the mounts.\n# TYPE prepfs_worker_bytes_sent_total counter\nprepfs_worker_bytes_sent_total {}\n", get(&c.bytes_sent)));
        t
    }

    /// A line of what it did, for its exit.
    pub fn summary(&self) -> String {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{} done, {} failed, {} refused, {} stale, {} of another recipe, {} taken over; {:.1} s of CPU making",
            get(&c.done),
            get(&c.failed),
            get(&c.refused),
            get(&c.stale),
            get(&c.other_recipe),
            get(&c.takeovers),
            get(&c.make_nanos) as f64 / 1e9
        )
    }
}
