//! The filesystem core: the mount's tree of views over the catalog, inode numbers, open file
//! handles, jobs' namespaces, and the request operations (lookup, getattr, readdir, open, read,
//! release, and mkdir/rmdir under `jobs/`).
//!
//! It knows nothing of FUSE: `fuse.rs` adapts `fuser` callbacks onto it, and tests call it
//! directly. The hot path reads top to bottom in [`Filesystem::open`]: resolve the inode; in a
//! job's view, let opportunistic sampling choose the sample to serve ([`prepfs_sampling`]); ask
//! the producer for its bytes (cache lookup, decode, augment: [`crate::producer`]); pin them to a
//! handle. [`Filesystem::read`] then slices them. No lock is held across decoding or I/O: the
//! handle table is locked only to insert, find or remove a handle.
//!
//! Inodes are computed, not allocated: an inode number packs the job (none for the top-level
//! views), the node's kind, the form and the catalog index. So `forget` has nothing to free and
//! top-level inodes are stable across remounts.
//!
//! Where things are:
//! - here: [`Filesystem`] (its state, constructor and accessors) and [`Caller`];
//! - `inodes.rs`: [`Node`], [`View`] and the inode-number packing;
//! - `tree.rs`: [`Attr`], [`Kind`], [`DirEntry`]; lookup, getattr, opendir, readdir, releasedir;
//! - `open.rs`: [`Filesystem::open`] and the choice of what an open serves (the hot path);
//! - `handles.rs`: open handles, [`CachePolicy`], [`Opened`]; read and release;
//! - `passthrough.rs`: kernel passthrough's core half: on or off, and an open's [`Backing`];
//! - `jobs.rs`: mkdir/rmdir under `jobs/`, prefetch, the refill's wanted samples, retiring jobs;
//! - `access.rs`: the owner shown (`--uid`/`--gid`) and the core's access check that goes with it;
//! - `bad.rs`: samples known bad as the views show them (hidden, skipped), validation at mount;
//! - `loader.rs`: what the loader socket asks of the core (a job's next samples into a slot);
//! - `recipes.rs`: the recipes' views (`recipes:`): names, files, a job's state in each, what
//!   ODS prefers there (a kept output of the recipe's), their figures in `stats.json`;
//! - `remote_work.rs`: a round of asking `prepfs worker`s and keeping what they made;
//! - `stale.rs`: source changes seen while serving ([`StaleInodes`]);
//! - `control.rs`: the `.prepfs/` control files;
//! - [`open_budget`]: the bound on what open handles pin.

pub(crate) mod open_budget;

mod access;
mod bad;
mod control;
mod handles;
mod inodes;
mod job_open;
mod jobs;
mod loader;
mod open;
mod passthrough;
mod recent_opens;
mod recipes;
mod remote_work;
mod stale;
mod tree;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod ledger_tests;
#[cfg(test)]
mod recipe_tests;
#[cfg(test)]
mod reftests;

pub use handles::{CachePolicy, Opened};

pub use passthrough::Backing;
pub use recent_opens::OpenRequest;
pub use inodes::{is_control, ROOT_INO};
pub(crate) use inodes::{Node, View};
pub(crate) use stale::StaleInodes;
pub use tree::{Attr, DirEntry, Kind};

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::SystemTime;

use std::time::Duration;

use prepfs_cache::disk::DiskCache;
use prepfs_cache::remote::{self, RemoteTier};
use prepfs_cache::{SampleCache, Tiers};
use crate::config::Config;
use crate::pixel_work::PixelWork;
use crate::plan::{initial_split, PlanController};
use crate::producer::SampleProducer;
use prepfs_sampling::{Job, Jobs, Pass, Requester};
pub(crate) use prepfs_cache::form::Form;
use prepfs_source::catalog::Catalog;
use crate::sample_reader::SampleReader;
use prepfs_source::{LocalSource, Source, SourceIo};
use crate::stats::{Stats, ViewCounters};
use prepfs_pixels::served::OutputFiles;
use prepfs_base::tasks::{self, Parallel};
use handles::HandleTable;
use jobs::{PendingNames, PrefetchQueue};
use open_budget::{OpenBudget, OPEN_WAIT};

/// Who makes a request: the uid and gid the kernel sends with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

#[cfg(test)]
impl Caller {
    /// Root.
    pub(crate) const ROOT: Caller = Caller { uid: 0, gid: 0 };
}

/// The filesystem core.
pub struct Filesystem {
    config: Arc<Config>,
    catalog: Arc<Catalog>,
    stats: Arc<Stats>,
    /// The memory tiers (the producer fills them; sampling ranks by them; the plan sizes them).
    cache: Arc<SampleCache>,
    /// The source as samples: resolution once per open, reads, bad-sample marks.
    reader: Arc<SampleReader>,
    /// A resolved sample's bytes in one form.
    producer: SampleProducer,
    /// The plan's control loop.
    plan: PlanController,
    jobs: Jobs,
    handles: HandleTable,
    /// Open handles, and which of them later opens of an inode share.
    /// Kernel passthrough: on, or off and why.
    passthrough: passthrough::PassthroughState,
    /// What open handles may pin.
    open_budget: Arc<OpenBudget>,
    /// Inodes the kernel should drop what it cached of.
    pub stale: StaleInodes,
    /// The mount's owner (the daemon's uid and gid).
    owner: (u32, u32),
    prefetch: PrefetchQueue,
    /// Names under `jobs/` looked up before any job had them.
    pending: PendingNames,
    /// Samples served by each pipeline's top-level view (`top_passes[0]`: `augmented/`'s,
    /// `top_passes[r]`: recipe `r`'s) in the current pass over the set: the refill prepares the
    /// others first.
    top_passes: Vec<Pass>,
    mounted_at: SystemTime,
    /// Whether a reader has come (an open of a sample's file, or a loader's batch): the refill
    /// waits for one unless `cache.refill: warm`.
    reader_seen: AtomicBool,
    /// The threads a loader's batch and the mount's validation are produced on in parallel
    /// (`prepfs-fill-<i>`), joined when the filesystem drops.
    fill: Parallel,
    /// What this mount asked `prepfs worker`s for (with a remote tier).
    remote_work: Option<crate::remote_work::RemoteWork>,
    /// The samples recent job-view opens were given, for an open the kernel sends again after a
    /// server died (`recent_opens.rs`; a supervised mount's, else none).
    recent_opens: std::sync::OnceLock<recent_opens::RecentOpens>,
    /// This server's place among the mount's (`stats.json`'s `server`).
    server_life: std::sync::OnceLock<crate::stats::ServerLife>,
}

impl Filesystem {
    /// A filesystem over a scanned catalog of the local source.
    pub fn new(config: Config, catalog: Catalog) -> std::io::Result<Filesystem> {
        let io = Arc::new(LocalSource::new(catalog.root())?);
        Filesystem::with_source(config, catalog, io)
    }

    /// A filesystem over indexed WebDataset shards (`source::shards`), its catalog theirs.
    pub fn over_shards(config: Config, catalog: Catalog, shards: &prepfs_source::shards::Shards) -> std::io::Result<Filesystem> {
        Filesystem::with_source(config, catalog, shards.io())
    }

    /// A filesystem over an S3-compatible object store's listed objects (`source::s3`), its
    /// catalog theirs.
    pub fn over_object_store(config: Config, catalog: Catalog, store: &prepfs_source::s3::ObjectStore) -> std::io::Result<Filesystem> {
        Filesystem::with_source(config, catalog, store.io())
    }

    /// A filesystem reading its source through `io` (a fault-injecting one in tests).
    pub(crate) fn with_source(config: Config, catalog: Catalog, io: Arc<dyn SourceIo>) -> std::io::Result<Filesystem> {
        let top_passes = (0..=config.recipes.len()).map(|_| Pass::new(catalog.file_count(), catalog.sample_count() as u64)).collect();
        let open_budget = OpenBudget::new(config.access.max_open_bytes, OPEN_WAIT);
        let config = Arc::new(config);
        let catalog = Arc::new(catalog);
        let stale = StaleInodes::new(catalog.file_count());
        let stats = Arc::new(Stats::default());
        let cache = Arc::new(SampleCache::new(
            config.cache.memory,
            initial_split(config.cache.split),
            config.cache.policy,
            catalog.file_count(),
        )
        .with_recipe_outputs(config.recipes.len()));
        let source = Source::new(
            io,
            config.threads.max(4),
            Duration::from_secs_f64(config.source_limits.timeout_s),
            config.source_limits.max_file_size,
            config.source_read_limit,
        )?;
        // A changed source file: what was made of the old version is dropped.
        let forget = Arc::clone(&cache);
        let on_change = Box::new(move |id| forget.forget_sample(id));
        let reader = Arc::new(SampleReader::new(Arc::clone(&catalog), source, Arc::clone(&stats), on_change));
        // A disk tier that cannot be opened leaves the mount serving from memory and the source.
        let disk = config.cache.disk.as_ref().and_then(|d| match DiskCache::open(&d.path, d.size) {
            Ok(disk) => Some(disk),
            Err(e) => {
                tracing::warn!("{e}; serving without the disk tier");
                None
            }
        });
        // So does a remote tier whose URL the client refuses (config checked it; this is rare).
        let remote = config.cache.remote.as_ref().and_then(|r| {
            let started = std::time::Instant::now();
            let fingerprint = remote::dataset_fingerprint(&catalog);
            tracing::info!(fingerprint = %format!("{fingerprint:016x}"), secs = started.elapsed().as_secs_f64(), "dataset fingerprint for the remote tier");
            let recipe = remote::recipe_fingerprint(&config.augment, &config.output);
            // The secret and password files were checked with the config; one changed since
            // leaves the mount without the tier rather than sharing unauthenticated values.
            let opened = remote::Access::load(r).and_then(|access| RemoteTier::open(&r.url, &access, r.size, fingerprint, recipe, Some(Arc::clone(&cache.status))));
            match opened {
                Ok(remote) => Some(remote),
                Err(e) => {
                    tracing::warn!("{e}; serving without the remote tier");
                    None
                }
            }
        });
        // Jobs of the same name on every mount sharing the remote are one job (`jobs.shared`;
        // with `ods` off a job view serves what is asked, and there is nothing to share). The
        // store forgets a job idle on every mount for twice the idle timeout.
        let job_store = match (&remote, config.jobs.shared && config.jobs.ods) {
            (Some(remote), true) => {
                let ttl = Duration::from_secs_f64((2.0 * config.jobs.idle_timeout_s).max(60.0));
                Some(Arc::new(remote.jobs(ttl)) as Arc<dyn prepfs_sampling::SharedJobs>)
            }
            _ => None,
        };
        let jobs = Jobs::new(config.jobs.max, catalog.file_count(), catalog.sample_count() as u64, config.seed)
            .with_per_user(config.jobs.per_user)
            .with_shared(job_store);
        let remote_gauge = remote.as_ref().map(RemoteTier::gauge);
        let pipelines = 1 + config.recipes.len() as u8;
        let remote_work = remote.as_ref().map(|r| {
            crate::remote_work::RemoteWork::new(r.work_queue(mount_number(&catalog)), config.placement, pipelines, catalog.file_count())
        });
        let tiers = Tiers::new(Arc::clone(&cache), disk, catalog.root().to_path_buf()).with_remote(remote);
        let output_files = OutputFiles::new();
        let pixels = PixelWork::new(&config, catalog.file_count(), Arc::clone(&stats), Arc::clone(&output_files));
        let producer = SampleProducer::new(Arc::clone(&catalog), Arc::clone(&reader), tiers, pixels, Arc::clone(&stats));
        let plan = PlanController::new(&config, reader.read_limit(), Arc::clone(&cache), Arc::clone(&stats), remote_gauge);
        let passthrough = passthrough::PassthroughState::new(config.passthrough, Arc::clone(&output_files));
        let fill = Parallel::start("prepfs-fill", config.threads, tasks::REQUEST)?;
        Ok(Filesystem {
            fill,
            passthrough,
            top_passes,
            config,
            catalog,
            stats,
            cache,
            reader,
            producer,
            plan,
            jobs,
            handles: HandleTable::new(),
            open_budget,
            stale,
            owner: (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()),
            prefetch: PrefetchQueue::default(),
            pending: PendingNames::default(),
            mounted_at: SystemTime::now(),
            reader_seen: AtomicBool::new(false),
            remote_work,
            recent_opens: std::sync::OnceLock::new(),
            server_life: std::sync::OnceLock::new(),
        })
    }

    /// Makes throttled source reads give up at once (the start of an unmount), and wakes the
    /// prefetch workers and the notifier waiting for work, so they see the stop at once.
    pub fn interrupt(&self) {
        self.reader.interrupt();
        self.prefetch.wake();
        self.stale.wake();
    }

    /// Ends the mount's work: the outputs no reader here used offered to the other mounts
    /// sharing a remote tier, source I/O stopped, the disk tier's queued writes written and the
    /// remote tier's sent.
    pub fn shutdown(&self) {
        let offered = self.producer.offer_unused_outputs();
        if offered > 0 {
            tracing::info!(outputs = offered, "unused augmented outputs offered to the other mounts");
        }
        self.reader.shutdown();
        self.producer.flush();
    }

    /// Before a handover (`prepfs upgrade`, issue 53): the disk tier's queued writes written,
    /// so that the next server finds them. The rest of the mount's work is left as it is: the
    /// process exits next, holding nothing the next server needs.
    pub fn flush_for_handover(&self) {
        self.producer.flush();
    }

    /// Keeps the pending job names (a path into a job not made yet) in `file`, a memory file
    /// the supervisor holds (issue 53), after putting back those an earlier server kept there:
    /// the kernel's inodes of such a path stay meaningful across a restart. Returns how many
    /// were put back. Called before serving.
    pub fn attach_pending_names(&self, file: std::fs::File) -> usize {
        self.pending.keep_in(file)
    }

    /// Keeps the samples job-view opens are given in `file` (a memory file the supervisor
    /// holds, issue 53), so that an open sent again after a server died gets the sample its
    /// first try was given. Called before serving.
    pub fn attach_recent_opens(&self, file: std::fs::File) {
        let _ = self.recent_opens.set(recent_opens::RecentOpens::new(file));
    }

    /// Says which server of the mount this is (called once, before serving).
    pub fn set_server_life(&self, life: crate::stats::ServerLife) {
        let _ = self.server_life.set(life);
    }

    /// This server's place among the mount's.
    pub(crate) fn server_life(&self) -> crate::stats::ServerLife {
        self.server_life.get().cloned().unwrap_or_default()
    }

    /// This server's handles are numbered from `first` on: a server taking a mount over starts
    /// above every number an earlier one gave, so that a release of an old handle the kernel
    /// still holds never ends a new one. Called before serving.
    pub fn number_handles_from(&self, first: u64) {
        self.handles.number_from(first);
    }

    /// Whether `caller` is root or the mount's owner.
    pub(crate) fn is_privileged(&self, caller: Caller) -> bool {
        caller.uid == 0 || caller.uid == self.owner.0
    }

    fn requester(&self, caller: Caller) -> Requester {
        Requester { uid: caller.uid, privileged: self.is_privileged(caller) }
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

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Keeps the jobs' place in their epochs in `file` from now on (the epoch ledger: in
    /// production a memfd the server's supervisor holds and hands to each server it starts on
    /// the mount), after putting back the jobs a previous server recorded there: each in its
    /// slot with its generation (the same inodes), owner, epoch and samples served in it, in
    /// each view. An empty file is made a ledger. Call it once, before serving. A ledger made
    /// for another catalog, or one that does not check, is refused, left as it is, and the
    /// mount serves without one; one made with another seed is put back and the report says so.
    pub fn attach_ledger(&self, file: std::fs::File) -> Result<prepfs_sampling::LedgerReport, prepfs_sampling::LedgerError> {
        self.jobs.attach_ledger(file)
    }

    /// The jobs under `jobs/`.
    #[cfg(test)]
    pub(crate) fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Measures the cache model's inputs and applies the split (see the producer).
    pub fn plan_cache(&self) {
        if !self.cache().enabled() {
            return;
        }
        let samples = crate::plan::calibrate::PROBE_SAMPLES.min(self.catalog.sample_count()) as u64;
        let progress = crate::progress::Progress::start("calibrating the cache model", "samples", Some(samples));
        self.plan.plan_at_mount(
            &self.catalog,
            &self.config,
            |f| {
                let read = self.reader.read_uncounted(f);
                progress.add(1);
                read
            },
            |f| self.reader.metadata(&self.catalog.file_path(f)).ok().map(|meta| meta.len()),
        );
        progress.finish();
    }

    /// Re-plans the cache split from the rates measured while serving, when enough samples were
    /// timed since the last plan.
    /// Each pipeline's share of the augmented budget follows its reads so far.
    pub fn replan(&self) -> bool {
        self.cache.set_output_reads(&self.stats.pipeline_reads(self.cache.pipelines()));
        let jobs = self.jobs.active();
        self.plan.tick(jobs.len(), self.output_jobs(&jobs), self.epochs_done_by(&jobs))
    }

    /// With recipes, the jobs one augmented output may serve, averaged over the pipelines by
    /// their shares of the room (their reads): in each pipeline's view (`augmented/`'s or a
    /// recipe's), the active `jobs` reading it (an output made at one's open is kept for the
    /// others that still need it there), at least one (a top-level reader's output serves it
    /// alone). `None` without recipes.
    fn output_jobs(&self, jobs: &[Arc<Job>]) -> Option<f64> {
        let pipelines = self.cache.pipelines();
        if pipelines < 2 {
            return None;
        }
        let readers = |p: u8| recipes::states_in(jobs, p).iter().filter(|j| j.epoch() > 1 || j.served_this_epoch() > 0).count().max(1);
        let shares = self.cache.output_shares();
        Some((0..pipelines).zip(&shares).map(|(p, (w, _))| w * readers(p) as f64).sum())
    }

    /// Epochs read so far: the top-level readers' passes, or the furthest job's.
    pub(crate) fn epochs_done(&self) -> u64 {
        self.epochs_done_by(&self.jobs.active())
    }

    /// A job's epochs are its furthest view's: its own, or its state in a recipe's view (a job
    /// reading only `jobs/<job>/<recipe>/` counts its epochs there).
    fn epochs_done_by(&self, jobs: &[Arc<Job>]) -> u64 {
        let recipes = self.config().recipes.len() as u8;
        let furthest = |j: &Arc<Job>| (1..=recipes).filter_map(|r| j.recipe_state(r)).map(|s| s.epoch()).fold(j.epoch(), u64::max);
        jobs.iter().map(|j| furthest(j).saturating_sub(1)).max().unwrap_or(0).max(self.top_passes[0].number())
    }

    fn counters(&self, form: Form) -> &ViewCounters {
        let stats = self.stats();
        match form {
            Form::Encoded => &stats.encoded,
            Form::Decoded => &stats.decoded,
            Form::Augmented => &stats.augmented,
        }
    }
}

/// A number for this mount in the work queue, unique among the mounts sharing it: the host, the
/// process, the time, the dataset's size.
fn mount_number(catalog: &Catalog) -> u64 {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    prepfs_base::hash::fnv1a64(&[host.as_bytes(), &std::process::id().to_le_bytes(), &now.to_le_bytes(), &(catalog.file_count() as u64).to_le_bytes()])
}
