//! The filesystem core: the mount's tree of views over the catalog, inode numbers, open file
//! handles, jobs' namespaces, and the request operations (lookup, getattr, readdir, open, read,
//! release, and mkdir/rmdir under `jobs/`).
//!
//! It knows nothing of FUSE: `fuse.rs` adapts `fuser` callbacks onto it, and tests call it
//! directly. The hot path reads top to bottom in [`Filesystem::open`]: resolve the inode; in a
//! job's view, let opportunistic sampling choose the sample to serve ([`crate::sampling`]); ask
//! the producer for its bytes (cache lookup, decode, augment: [`crate::producer`]); pin them to a
//! handle. [`Filesystem::read`] then slices them. No lock is held across decoding or I/O: the
//! handle table is locked only to insert, find or remove a handle.
//!
//! Inodes are computed, not allocated: an inode number packs the job (none for the top-level
//! views), the node's kind, the form and the catalog index. So `forget` has nothing to free and
//! top-level inodes are stable across remounts.

pub mod open_budget;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use crate::cache::disk::DiskCache;
use crate::cache::{Origin, SampleCache, Tiers};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::pixels::output;
use crate::pixels::work::PixelWork;
use crate::planner::{initial_split, PlanController};
use crate::producer::{Consumer, SampleProducer};
use crate::sampling::{Bitset, Job, Jobs, Pass, Requester};
pub use crate::shared::Form;
use crate::source::catalog::{Catalog, DirId, Entry, FileId};
use crate::source::{FileMeta, LocalSource, Observed, Sample, SampleReader, Source, SourceFile, SourceIo};
use crate::stats::{bump, Stats, ViewCounters};
use open_budget::{Lease, OpenBudget, OPEN_WAIT};
use crate::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// Who makes a request: the uid and gid the kernel sends with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

impl Caller {
    /// Root (tests, and the mount's own checks).
    pub const ROOT: Caller = Caller { uid: 0, gid: 0 };
}

/// A view: one form of the whole tree, top-level or one job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct View {
    pub form: Form,
    /// 0 for the top-level views, else the code of the job (see [`crate::sampling::Job::code`]).
    pub job: u32,
}

impl View {
    /// A top-level view.
    pub fn top(form: Form) -> View {
        View { form, job: 0 }
    }
}

/// A node of the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Root,
    /// `.prepfs/`
    ControlDir,
    /// `.prepfs/stats.json`
    StatsFile,
    /// `.prepfs/config.yaml`
    ConfigFile,
    /// `jobs/`
    JobsDir,
    /// `jobs/<job>/`, by the job's code.
    JobRoot(u32),
    Dir(View, DirId),
    File(View, FileId),
}

// Inode numbers: the fixed nodes are 1 to 5; the others pack, from the top, the job code
// (24 bits, 0 for top-level views), a kind (4 bits), the form (2 bits) and a catalog index
// (32 bits).
const ROOT_INO: u64 = 1;
const CONTROL_DIR_INO: u64 = 2;
const STATS_INO: u64 = 3;
const CONFIG_INO: u64 = 4;
const JOBS_DIR_INO: u64 = 5;
const JOB_SHIFT: u32 = 40;
const KIND_SHIFT: u32 = 36;
const FORM_SHIFT: u32 = 34;
const KIND_DIR: u64 = 1;
const KIND_FILE: u64 = 2;
const KIND_JOB_ROOT: u64 = 3;

impl Node {
    /// The inode number of this node.
    pub fn ino(self) -> u64 {
        let pack = |job: u32, kind: u64, form: Form, index: u32| {
            u64::from(job) << JOB_SHIFT | kind << KIND_SHIFT | form.index() << FORM_SHIFT | u64::from(index)
        };
        match self {
            Node::Root => ROOT_INO,
            Node::ControlDir => CONTROL_DIR_INO,
            Node::StatsFile => STATS_INO,
            Node::ConfigFile => CONFIG_INO,
            Node::JobsDir => JOBS_DIR_INO,
            Node::JobRoot(code) => pack(code, KIND_JOB_ROOT, Form::Encoded, 0),
            Node::Dir(view, d) => pack(view.job, KIND_DIR, view.form, d),
            Node::File(view, f) => pack(view.job, KIND_FILE, view.form, f),
        }
    }

    /// The node an inode number names, if it names one.
    pub fn from_ino(ino: u64) -> Option<Node> {
        match ino {
            ROOT_INO => return Some(Node::Root),
            CONTROL_DIR_INO => return Some(Node::ControlDir),
            STATS_INO => return Some(Node::StatsFile),
            CONFIG_INO => return Some(Node::ConfigFile),
            JOBS_DIR_INO => return Some(Node::JobsDir),
            _ => {}
        }
        let job = (ino >> JOB_SHIFT) as u32;
        let form = Form::from_index((ino >> FORM_SHIFT) & 3)?;
        let index = ino as u32;
        let view = View { form, job };
        match (ino >> KIND_SHIFT) & 0xf {
            KIND_DIR => Some(Node::Dir(view, index)),
            KIND_FILE => Some(Node::File(view, index)),
            KIND_JOB_ROOT if job != 0 => Some(Node::JobRoot(job)),
            _ => None,
        }
    }
}

/// Directory or regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// The attributes the core reports for a node. Owner and mode are the source's (write bits
/// cleared) for everything made of the source, so the kernel (`default_permissions`) refuses
/// through the mount what the source refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    pub uid: u32,
    pub gid: u32,
    /// Permission bits.
    pub perm: u16,
    /// The node may go away soon (a job's directory): names of it should be kept briefly.
    pub volatile: bool,
}

/// One listing entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: OsString,
}

/// How the kernel should cache an opened file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachePolicy {
    /// Immutable content: keep the page cache across opens (`FOPEN_KEEP_CACHE`).
    KeepCache,
    /// Content differs per open: bypass the page cache (`FOPEN_DIRECT_IO`).
    DirectIo,
    /// Immutable content whose source changed since the kernel may have cached it: drop the
    /// page cache at this open (neither flag), keep it again from the next open on.
    Refresh,
}

/// What `open` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub fh: u64,
    pub cache: CachePolicy,
}

/// An open handle: what it serves, and the bytes it pins leased from the open budget.
struct Handle {
    data: HandleData,
    _lease: Option<Lease>,
}

/// What an open handle serves.
enum HandleData {
    /// A source file read through on demand (the top-level `encoded` view).
    Source { file: Arc<dyn SourceFile> },
    /// Bytes produced at open and pinned to the handle; in a job's view, the sample served.
    Bytes { bytes: Arc<[u8]>, form: Form, served: Option<Served> },
    /// A directory listing snapshotted at `opendir`.
    Listing(Vec<DirEntry>),
    /// The control files' text.
    Control(Arc<[u8]>),
}

/// The sample a job-view handle serves. It counts as served to the job at its first read;
/// dropped unread (the last handle sharing it released), it gives its claim back.
struct Served {
    job: Arc<Job>,
    sample: FileId,
    claimed: bool,
    read: AtomicBool,
    /// The key of the handle in [`Filesystem::shares`].
    share: (u32, Form, FileId),
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.claimed && !self.read.load(Ordering::Relaxed) {
            self.job.unclaim(self.sample);
        }
    }
}

impl HandleData {
    /// Bytes of memory the handle pins while open.
    fn pinned_bytes(&self) -> u64 {
        match self {
            HandleData::Source { .. } => 0,
            HandleData::Bytes { bytes, .. } | HandleData::Control(bytes) => bytes.len() as u64,
            HandleData::Listing(entries) => {
                entries.iter().map(|e| (std::mem::size_of::<DirEntry>() + e.name.len()) as u64).sum()
            }
        }
    }
}

/// Open handles, sharded so that many FUSE threads rarely meet on one lock.
struct HandleTable {
    next: AtomicU64,
    shards: Vec<Mutex<HashMap<u64, Arc<Handle>>>>,
}

const HANDLE_SHARDS: usize = 16;

impl HandleTable {
    fn new() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            shards: (0..HANDLE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
    fn shard(&self, fh: u64) -> &Mutex<HashMap<u64, Arc<Handle>>> {
        &self.shards[fh as usize % HANDLE_SHARDS]
    }
    fn insert(&self, data: Arc<Handle>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh).lock_or_recover().insert(fh, data);
        fh
    }
    fn get(&self, fh: u64) -> Result<Arc<Handle>> {
        let shard = self.shard(fh).lock_or_recover();
        shard.get(&fh).cloned().ok_or(Error::BadHandle)
    }
    fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        self.shard(fh).lock_or_recover().remove(&fh)
    }
}

/// Samples waiting to be prepared ahead of the jobs that will read them.
#[derive(Default)]
struct PrefetchQueue {
    pending: Mutex<(VecDeque<(FileId, Form, Arc<Job>)>, HashSet<FileId>)>,
    ready: Condvar,
}

/// Prefetch work queued at most (the rest is dropped: the window bounds it anyway).
const PREFETCH_QUEUE_MAX: usize = 4096;

impl PrefetchQueue {
    fn push(&self, sample: FileId, form: Form, job: &Arc<Job>) {
        let mut pending = self.pending.lock_or_recover();
        if pending.0.len() < PREFETCH_QUEUE_MAX && pending.1.insert(sample) {
            pending.0.push_back((sample, form, Arc::clone(job)));
            self.ready.notify_one();
        }
    }
    fn pop(&self, wait: Duration) -> Option<(FileId, Form, Arc<Job>)> {
        let mut pending = self.pending.lock_or_recover();
        if pending.0.is_empty() && !wait.is_zero() {
            pending = self.ready.wait_timeout_or_recover(pending, wait);
        }
        pending.0.pop_front()
    }
    fn done(&self, sample: FileId) {
        self.pending.lock_or_recover().1.remove(&sample);
    }
}

/// Inodes whose source changed: the kernel's cached pages and attributes of them are stale.
/// The mount's notifier thread tells the kernel (never a request thread: a notification may
/// wait on pages that a request in flight holds).
#[derive(Default)]
pub struct StaleInodes {
    queue: Mutex<Vec<u64>>,
    ready: Condvar,
}

impl StaleInodes {
    fn push(&self, inodes: impl IntoIterator<Item = u64>) {
        self.queue.lock_or_recover().extend(inodes);
        self.ready.notify_one();
    }

    /// The inodes queued so far, waiting up to `wait` for one.
    pub fn drain(&self, wait: Duration) -> Vec<u64> {
        let mut queue = self.queue.lock_or_recover();
        if queue.is_empty() && !wait.is_zero() {
            queue = self.ready.wait_timeout_or_recover(queue, wait);
        }
        std::mem::take(&mut *queue)
    }
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
    /// Open job-view handles by (job code, form, requested sample): a second open of one path
    /// while the first is open (PIL opens a PPM twice to try mmap) shares the first's content.
    shares: Mutex<HashMap<(u32, Form, FileId), Weak<Handle>>>,
    /// What open handles may pin.
    open_budget: Arc<OpenBudget>,
    /// Inodes the kernel should drop what it cached of.
    pub stale: StaleInodes,
    /// Files changed since the kernel last opened them: their next open drops the page cache.
    refresh: Bitset,
    /// The mount's owner (the daemon's uid and gid).
    owner: (u32, u32),
    prefetch: PrefetchQueue,
    /// Samples served by top-level `augmented/` opens in the current pass over the set: the
    /// refill prepares the others first.
    top_pass: Pass,
    mounted_at: SystemTime,
}

impl Filesystem {
    /// A filesystem over a scanned catalog of the local source.
    pub fn new(config: Config, catalog: Catalog) -> std::io::Result<Filesystem> {
        let io = Arc::new(LocalSource::new(catalog.root())?);
        Filesystem::with_source(config, catalog, io)
    }

    /// A filesystem reading its source through `io` (a fault-injecting one in tests).
    pub fn with_source(config: Config, catalog: Catalog, io: Arc<dyn SourceIo>) -> std::io::Result<Filesystem> {
        let jobs = Jobs::new(config.jobs.max, catalog.file_count(), catalog.sample_count() as u64, config.seed)
            .with_per_user(config.jobs.per_user);
        let top_pass = Pass::new(catalog.file_count(), catalog.sample_count() as u64);
        let open_budget = OpenBudget::new(config.access.max_open_bytes, OPEN_WAIT);
        let refresh = Bitset::new(catalog.file_count());
        let config = Arc::new(config);
        let catalog = Arc::new(catalog);
        let stats = Arc::new(Stats::default());
        let cache = Arc::new(SampleCache::new(
            config.cache.memory,
            initial_split(config.cache.split),
            config.cache.policy,
            catalog.file_count(),
        ));
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
        let tiers = Tiers::new(Arc::clone(&cache), disk, catalog.root().to_path_buf());
        let pixels = PixelWork::new(&config, catalog.file_count(), Arc::clone(&stats));
        let producer = SampleProducer::new(Arc::clone(&catalog), Arc::clone(&reader), tiers, pixels, Arc::clone(&stats));
        let plan = PlanController::new(&config, reader.read_limit(), Arc::clone(&cache), Arc::clone(&stats));
        Ok(Filesystem {
            top_pass,
            config,
            catalog,
            stats,
            cache,
            reader,
            producer,
            plan,
            jobs,
            handles: HandleTable::new(),
            shares: Mutex::new(HashMap::new()),
            open_budget,
            stale: StaleInodes::default(),
            refresh,
            owner: (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()),
            prefetch: PrefetchQueue::default(),
            mounted_at: SystemTime::now(),
        })
    }

    /// Makes throttled source reads give up at once (the start of an unmount).
    pub fn interrupt(&self) {
        self.reader.interrupt();
    }

    /// Ends the mount's work: source I/O stopped, the disk tier's queued writes written.
    pub fn shutdown(&self) {
        self.reader.shutdown();
        self.producer.flush();
    }

    /// Whether `caller` is root or the mount's owner.
    fn privileged(&self, caller: Caller) -> bool {
        caller.uid == 0 || caller.uid == self.owner.0
    }

    fn requester(&self, caller: Caller) -> Requester {
        Requester { uid: caller.uid, privileged: self.privileged(caller) }
    }

    /// Resolves `file` for this request: its path and the version `stat` finds, checked
    /// against the one seen before (see `SampleReader::resolve`); a changed file's inodes in
    /// every view are queued for the kernel to drop what it cached of them.
    fn resolve(&self, file: FileId) -> Result<Sample> {
        let (sample, observed) = self.reader.resolve(file)?;
        if observed == Observed::Changed {
            self.queue_stale(file);
        }
        Ok(sample)
    }

    fn queue_stale(&self, file: FileId) {
        self.refresh.set(file);
        let codes: Vec<u32> = std::iter::once(0).chain(self.jobs.active().iter().map(|j| j.code())).collect();
        self.stale.push(codes.into_iter().flat_map(|job| Form::ALL.map(|form| Node::File(View { form, job }, file).ino())));
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

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The jobs under `jobs/`.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Measures the cache model's inputs and applies the split (see the producer).
    pub fn plan_cache(&self) {
        self.plan.plan_at_mount(&self.catalog, &self.config, |f| self.reader.read_uncounted(f));
    }

    /// Re-plans the cache split from the rates measured while serving, when enough samples were
    /// timed since the last plan.
    pub fn replan(&self) -> bool {
        self.plan.tick(self.jobs.active().len())
    }

    /// One unit of background refill of the augmented cache, with samples some active job has not
    /// seen (any sample, with no jobs). Returns false when there is nothing to do.
    pub fn refill_once(&self, cursor: &mut usize) -> bool {
        self.refill_lane_once(cursor, (0, 1))
    }

    /// [`Filesystem::refill_once`] for one of several refill workers: the samples of `lane`.
    /// With jobs, the samples some job has not seen this epoch; without, those top-level readers
    /// have not read in this pass (so the refill works ahead of them, not on the next pass).
    pub fn refill_lane_once(&self, cursor: &mut usize, lane: (usize, usize)) -> bool {
        let jobs = self.jobs.active();
        self.producer.refill_once(cursor, lane, |f| {
            if jobs.is_empty() {
                !self.top_pass.has_seen(f)
            } else {
                jobs.iter().any(|j| !j.has_seen(f))
            }
        })
    }

    /// Runs queued prefetch work until the queue stays empty for `wait` (or at once with a zero
    /// `wait`, returning when it is empty). Returns how many samples it prepared.
    pub fn run_prefetch(&self, wait: Duration, stop: &AtomicBool) -> usize {
        let mut prepared = 0;
        while !stop.load(Ordering::Relaxed) {
            let Some((sample, form, job)) = self.prefetch.pop(wait) else { break };
            if !job.has_seen(sample) && self.producer.prepare(sample, form) {
                bump(&job.counters.prefetched, 1);
                prepared += 1;
            }
            self.prefetch.done(sample);
        }
        prepared
    }

    /// The used-by bits of the active jobs that have not been served `sample` this epoch.
    fn jobs_needing(&self, sample: FileId) -> u64 {
        self.jobs.active().iter().filter(|j| !j.has_seen(sample)).fold(0, |m, j| m | j.bit())
    }

    /// Drops the augmented outputs kept for jobs that have all been served their sample since
    /// (by another path): they would wait an epoch for a taker, taking room from outputs that
    /// can be shared now. Outputs no job has used yet stay. Returns how many were dropped.
    pub fn drop_outputs_no_job_needs(&self) -> u64 {
        if self.jobs.active().is_empty() {
            return 0;
        }
        self.cache().augmented.retain(|id, entry| entry.used_by == 0 || self.jobs_needing(id) & !entry.used_by != 0)
    }

    /// Retires the jobs idle past `jobs.idle_timeout`; returns how many.
    pub fn retire_idle_jobs(&self) -> usize {
        let idle_ms = (self.config().jobs.idle_timeout_s * 1000.0) as u64;
        let retired = self.jobs.retire_idle(idle_ms);
        for job in &retired {
            self.forget_job(job);
        }
        retired.len()
    }

    /// What retiring `job` frees in the cache: its uses of augmented outputs.
    fn forget_job(&self, job: &Job) {
        let dropped = self.cache().forget_job(job.bit(), self.jobs.active_mask());
        tracing::info!(job = job.name(), outputs_dropped = dropped, "job state freed");
    }

    fn counters(&self, form: Form) -> &ViewCounters {
        let stats = self.stats();
        match form {
            Form::Encoded => &stats.encoded,
            Form::Decoded => &stats.decoded,
            Form::Augmented => &stats.augmented,
        }
    }

    /// A node of prepfs's own (not made of the source): the mount's owner's, with `perm`.
    fn own_attr(&self, node: Node, kind: Kind, size: u64, perm: u16) -> Attr {
        let (uid, gid) = self.owner;
        let volatile = matches!(node, Node::JobRoot(_));
        Attr { ino: node.ino(), kind, size, mtime: self.mounted_at, uid, gid, perm, volatile }
    }

    /// A directory made of a source directory: its owner and mode, write bits cleared.
    fn source_dir_attr(&self, node: Node, dir: DirId) -> Result<Attr> {
        let meta = self.reader.metadata(&self.catalog().dir_path(dir))?;
        Ok(Attr { mtime: meta.mtime, ..self.made_of(node, Kind::Dir, 0, &meta) })
    }

    fn made_of(&self, node: Node, kind: Kind, size: u64, meta: &FileMeta) -> Attr {
        Attr {
            ino: node.ino(),
            kind,
            size,
            mtime: meta.mtime,
            uid: meta.uid,
            gid: meta.gid,
            perm: (meta.mode & 0o555) as u16,
            volatile: false,
        }
    }

    /// `.prepfs/` and its files: the owner's only, unless `control_public`.
    fn control_perm(&self, dir: bool) -> u16 {
        match (self.config().access.control_public, dir) {
            (true, true) => 0o555,
            (true, false) => 0o444,
            (false, true) => 0o500,
            (false, false) => 0o400,
        }
    }

    /// The active job whose inodes carry `code`, marked active now.
    fn job(&self, code: u32) -> Result<Arc<Job>> {
        let job = self.jobs.by_code(code).ok_or(Error::NotFound)?;
        job.touch(self.jobs.now_ms());
        Ok(job)
    }

    /// Finds `name` in the directory `parent` for `caller` (under `jobs/`, a job is made for
    /// them on first use).
    pub fn lookup(&self, parent: u64, name: &OsStr, caller: Caller) -> Result<Attr> {
        let form_named = |name: &OsStr| Form::ALL.into_iter().find(|f| f.dir_name().as_bytes() == name.as_bytes());
        let node = match Node::from_ino(parent).ok_or(Error::NotFound)? {
            Node::Root => match name.to_str() {
                Some(".prepfs") => Node::ControlDir,
                Some("jobs") => Node::JobsDir,
                _ => Node::Dir(View::top(form_named(name).ok_or(Error::NotFound)?), 0),
            },
            Node::ControlDir => match name.to_str() {
                Some("stats.json") => Node::StatsFile,
                Some("config.yaml") => Node::ConfigFile,
                _ => return Err(Error::NotFound),
            },
            // A job exists from the first lookup of its name.
            Node::JobsDir => Node::JobRoot(self.jobs.get_or_create(name.as_bytes(), self.requester(caller))?.code()),
            Node::JobRoot(code) => {
                self.job(code)?;
                Node::Dir(View { form: form_named(name).ok_or(Error::NotFound)?, job: code }, 0)
            }
            Node::Dir(view, dir) => {
                if view.job != 0 {
                    self.job(view.job)?;
                }
                let catalog = self.catalog();
                let entry = match view.form {
                    Form::Encoded => catalog.lookup(dir, name),
                    Form::Decoded | Form::Augmented => catalog.lookup_image(dir, name, self.config().output.extension()),
                };
                match entry.ok_or(Error::NotFound)? {
                    Entry::Dir(d) => Node::Dir(view, d),
                    Entry::File(f) => Node::File(view, f),
                }
            }
            Node::StatsFile | Node::ConfigFile | Node::File(..) => return Err(Error::NotADirectory),
        };
        self.attr_of(node)
    }

    /// The attributes of an inode.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.attr_of(Node::from_ino(ino).ok_or(Error::NotFound)?)
    }

    fn attr_of(&self, node: Node) -> Result<Attr> {
        let catalog = self.catalog();
        match node {
            // Briefly cached: the kernel asks again soon, so a mount whose daemon died is found
            // dead (ENOTCONN) at once, however long ago it died.
            Node::Root => self
                .source_dir_attr(node, 0)
                .or_else(|_| Ok(self.own_attr(node, Kind::Dir, 0, 0o555)))
                .map(|a| Attr { volatile: true, ..a }),
            // Anyone may start a job (mkdir); only its owner, the mount's owner or root may
            // retire it (the sticky bit).
            Node::JobsDir => Ok(self.own_attr(node, Kind::Dir, 0, 0o1777)),
            Node::ControlDir => Ok(self.own_attr(node, Kind::Dir, 0, self.control_perm(true))),
            Node::JobRoot(code) => {
                let job = self.jobs.by_code(code).ok_or(Error::NotFound)?;
                // A job's views are its owner's: another user cannot read from (and so steal
                // samples of) someone else's epoch.
                Ok(Attr { uid: job.owner(), ..self.own_attr(node, Kind::Dir, 0, 0o500) })
            }
            Node::Dir(view, d) => {
                if d as usize >= catalog.dir_count() || (view.job != 0 && self.jobs.by_code(view.job).is_none()) {
                    return Err(Error::NotFound);
                }
                self.source_dir_attr(node, d)
            }
            Node::StatsFile => Ok(self.own_attr(node, Kind::File, self.stats_json().len() as u64, self.control_perm(false))),
            Node::ConfigFile => {
                Ok(self.own_attr(node, Kind::File, self.config().to_yaml().len() as u64, self.control_perm(false)))
            }
            Node::File(view, file) => {
                if file as usize >= catalog.file_count() || (view.job != 0 && self.jobs.by_code(view.job).is_none()) {
                    return Err(Error::NotFound);
                }
                let meta = self.resolve(file)?.meta;
                let size = match view.form {
                    Form::Encoded => meta.len(),
                    // An undecodable header still lists (size 0); opening it gets EIO.
                    Form::Decoded => {
                        let output = &self.config().output;
                        self.reader.size(file).map_or(0, |s| output::encoded_len(output, s))
                    }
                    Form::Augmented => output::encoded_len(&self.config().output, self.producer.augmented_size()),
                };
                Ok(self.made_of(node, Kind::File, size, &meta))
            }
        }
    }

    /// Snapshots a directory listing; [`Filesystem::readdir`] pages through it. In a job's view
    /// the samples come in the job's order for this epoch (cached and unseen first).
    pub fn opendir(&self, ino: u64, caller: Caller) -> Result<u64> {
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let catalog = self.catalog();
        let parent_ino = match node {
            Node::Dir(view, d) if d != 0 => Node::Dir(view, catalog.dir_parent(d)).ino(),
            Node::Dir(view, _) if view.job != 0 => Node::JobRoot(view.job).ino(),
            Node::JobRoot(_) => JOBS_DIR_INO,
            _ => ROOT_INO,
        };
        let mut entries = vec![
            DirEntry { ino, kind: Kind::Dir, name: ".".into() },
            DirEntry { ino: parent_ino, kind: Kind::Dir, name: "..".into() },
        ];
        let dir = |node: Node, name: &OsStr| DirEntry { ino: node.ino(), kind: Kind::Dir, name: name.to_owned() };
        let file = |node: Node, name: OsString| DirEntry { ino: node.ino(), kind: Kind::File, name };
        let views = |job: u32| Form::ALL.map(|form| dir(Node::Dir(View { form, job }, 0), OsStr::new(form.dir_name())));
        match node {
            Node::Root => {
                entries.extend(views(0));
                entries.push(dir(Node::JobsDir, OsStr::new("jobs")));
                entries.push(dir(Node::ControlDir, OsStr::new(".prepfs")));
            }
            Node::ControlDir => {
                entries.push(file(Node::StatsFile, "stats.json".into()));
                entries.push(file(Node::ConfigFile, "config.yaml".into()));
            }
            Node::JobsDir => {
                for job in self.jobs.active() {
                    entries.push(dir(Node::JobRoot(job.code()), OsStr::new(job.name())));
                }
            }
            Node::JobRoot(code) => {
                self.job(code)?;
                entries.extend(views(code));
            }
            Node::Dir(view, d) => {
                if d as usize >= catalog.dir_count() {
                    return Err(Error::NotFound);
                }
                for sub in catalog.subdirs(d) {
                    entries.push(dir(Node::Dir(view, sub), catalog.dir_name(sub)));
                }
                let samples: Arc<[FileId]> = if view.job == 0 {
                    catalog.images(d).into()
                } else {
                    let job = self.job(view.job)?;
                    let rank = |c: FileId| self.cache.rank_for_job(c, view.form, job.bit());
                    job.listing_order(d, catalog.images(d), rank, self.config().jobs.ods)
                };
                let ext = self.config().output.extension();
                match view.form {
                    Form::Encoded => {
                        for &f in samples.iter() {
                            entries.push(file(Node::File(view, f), catalog.file_name(f).to_owned()));
                        }
                        // Files that are not samples (and images hidden by a stem collision).
                        let listed: HashSet<FileId> = samples.iter().copied().collect();
                        for f in catalog.files(d).filter(|f| !listed.contains(f)) {
                            entries.push(file(Node::File(view, f), catalog.file_name(f).to_owned()));
                        }
                    }
                    Form::Decoded | Form::Augmented => {
                        for &f in samples.iter() {
                            let mut name = OsString::from(OsStr::from_bytes(catalog.stem(f)));
                            name.push(".");
                            name.push(ext);
                            entries.push(file(Node::File(view, f), name));
                        }
                    }
                }
            }
            Node::StatsFile | Node::ConfigFile | Node::File(..) => return Err(Error::NotADirectory),
        }
        let handle = self.pin(HandleData::Listing(entries), caller)?;
        Ok(self.handles.insert(handle))
    }

    /// A handle for `data`, its bytes leased from the open budget (waiting a moment for
    /// releases when the budget is spent, then refused).
    fn pin(&self, data: HandleData, caller: Caller) -> Result<Arc<Handle>> {
        let bytes = data.pinned_bytes();
        let lease = if bytes == 0 {
            None
        } else {
            match self.open_budget.lease(caller.uid, self.privileged(caller), bytes) {
                Some(lease) => Some(lease),
                None => {
                    bump(&self.stats().opens_refused, 1);
                    crate::warn_limited!("open-budget", uid = caller.uid, "open refused: open files pin max_open_bytes");
                    return Err(Error::TooManyOpen);
                }
            }
        };
        Ok(Arc::new(Handle { data, _lease: lease }))
    }

    /// Entries of an open listing from `offset` on (offset k resumes after the k-th entry).
    pub fn readdir(&self, fh: u64, offset: u64, mut add: impl FnMut(&DirEntry, u64) -> bool) -> Result<()> {
        let handle = self.handles.get(fh)?;
        let HandleData::Listing(entries) = &handle.data else { return Err(Error::NotADirectory) };
        for (i, entry) in entries.iter().enumerate().skip(offset as usize) {
            if add(entry, i as u64 + 1) {
                break; // the reply buffer is full
            }
        }
        Ok(())
    }

    /// Releases an open listing.
    pub fn releasedir(&self, fh: u64) {
        self.handles.remove(fh);
    }

    /// Makes a job: `mkdir jobs/<name>` (a lookup makes one too). Anything else is read-only.
    pub fn mkdir(&self, parent: u64, name: &OsStr, caller: Caller) -> Result<Attr> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let job = self.jobs.get_or_create(name.as_bytes(), self.requester(caller))?;
        self.attr_of(Node::JobRoot(job.code()))
    }

    /// Retires a job: `rmdir jobs/<name>` frees its state now rather than after its idle time.
    /// Anything else is read-only.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> Result<()> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let name = name.to_str().ok_or(Error::NotFound)?;
        let job = self.jobs.retire(name).ok_or(Error::NotFound)?;
        self.forget_job(&job);
        Ok(())
    }

    /// Whether a node takes changes (only `jobs/`, for mkdir and rmdir).
    pub fn accepts_changes(&self, ino: u64) -> bool {
        Node::from_ino(ino) == Some(Node::JobsDir)
    }

    /// Opens a file: for pixel views this decodes and augments (the caller runs it on the
    /// decode pool) and pins the result to the returned handle.
    pub fn open(&self, ino: u64, write: bool, caller: Caller) -> Result<Opened> {
        if write {
            return Err(Error::ReadOnly);
        }
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let (data, cache) = match node {
            Node::Root | Node::ControlDir | Node::JobsDir | Node::JobRoot(_) | Node::Dir(..) => {
                return Err(Error::IsADirectory)
            }
            Node::StatsFile => {
                (self.pin(HandleData::Control(self.stats_json().into_bytes().into()), caller)?, CachePolicy::DirectIo)
            }
            Node::ConfigFile => {
                (self.pin(HandleData::Control(self.config().to_yaml().into_bytes().into()), caller)?, CachePolicy::DirectIo)
            }
            Node::File(view, file) => {
                if file as usize >= self.catalog().file_count() {
                    return Err(Error::NotFound);
                }
                bump(&self.counters(view.form).opens, 1);
                // Every open resolves the sample once (path, version): nothing stale is served.
                let sample = self.resolve(file)?;
                let (data, cache) = if view.job != 0 {
                    (self.open_in_job(view, sample, caller)?, CachePolicy::DirectIo)
                } else {
                    self.open_top_level(view.form, &sample, caller)?
                };
                // Changed since the kernel may have cached its pages: this open drops them.
                let cache = match cache {
                    CachePolicy::KeepCache if self.refresh.clear(file) => CachePolicy::Refresh,
                    other => other,
                };
                (data, cache)
            }
        };
        bump(&self.stats().open_handles, 1);
        Ok(Opened { fh: self.handles.insert(data), cache })
    }

    /// Whether opening `ino` needs no decoding or augmenting (a control file, or a sample the
    /// cache holds in the form the view serves), so the caller may run it in place rather than
    /// on the decode pool. A guess: the entry may be taken meanwhile, and the open then does the
    /// work itself.
    pub fn open_is_cheap(&self, ino: u64) -> bool {
        match Node::from_ino(ino) {
            Some(Node::File(view, file)) if (file as usize) < self.catalog().file_count() => match (view.job, view.form) {
                // Opening a source file is I/O (it may be a network share).
                (0, Form::Encoded) => false,
                (0, form) => self.cache.rank(file, form) == form.top_rank(),
                (_, form) => self.cache.rank(file, form) == form.top_rank() && self.jobs.by_code(view.job).is_some_and(|j| !j.has_seen(file)),
            },
            Some(Node::StatsFile | Node::ConfigFile) => true,
            _ => false,
        }
    }

    /// An open in a top-level view: the requested sample, always.
    fn open_top_level(&self, form: Form, sample: &Sample, caller: Caller) -> Result<(Arc<Handle>, CachePolicy)> {
        if form == Form::Encoded {
            let (opened, observed) = self.reader.open(sample)?;
            if observed == Observed::Changed {
                self.queue_stale(sample.id);
            }
            return Ok((self.pin(HandleData::Source { file: opened }, caller)?, CachePolicy::KeepCache));
        }
        let (bytes, origin) = match form {
            Form::Decoded => self.producer.decoded(sample)?,
            _ => {
                self.top_pass.mark(sample.id);
                self.producer.augmented(sample, Consumer::TopLevel)?
            }
        };
        let counters = self.counters(form);
        bump(if origin.is_miss() { &counters.misses } else { &counters.hits }, 1);
        let cache = if form == Form::Decoded { CachePolicy::KeepCache } else { CachePolicy::DirectIo };
        Ok((self.pin(HandleData::Bytes { bytes, form, served: None }, caller)?, cache))
    }

    /// An open in a job's view: opportunistic sampling chooses the sample (the requested one, or
    /// an unseen one of the same directory that is cached), prefetch is queued along the job's
    /// listing, and the chosen sample's bytes are pinned to the handle.
    fn open_in_job(&self, view: View, requested: Sample, caller: Caller) -> Result<Arc<Handle>> {
        let job = self.job(view.job)?;
        bump(&job.counters.opens, 1);
        let share = (view.job, view.form, requested.id);
        // PIL's second open of a path it holds open (to try mmap) sees the same content.
        if let Some(shared) = self.shares.lock_or_recover().get(&share).and_then(Weak::upgrade) {
            return Ok(shared);
        }
        let catalog = self.catalog();
        if !catalog.is_image(requested.id) {
            // Not a sample (a README in encoded/): served as it is, outside the job's epochs.
            let (bytes, _) = self.producer.encoded(&requested)?;
            return self.pin(HandleData::Bytes { bytes, form: view.form, served: None }, caller);
        }
        let dir = catalog.file_dir(requested.id);
        let samples = catalog.images(dir);
        let rank = |c: FileId| if self.reader.known_bad(c) { 0 } else { self.cache.rank_for_job(c, view.form, job.bit()) };
        self.queue_prefetch(&job, view.form, dir, requested.id);
        // A substitute that cannot be served is replaced, once, rather than fail the request.
        let mut retried = false;
        loop {
            let choice = job.choose(requested.id, samples, rank, view.form.top_rank(), Jobs::scan_start(samples.len()), self.config().jobs.ods);
            let served = Served { job: Arc::clone(&job), sample: choice.sample, claimed: choice.claimed, read: AtomicBool::new(false), share };
            // A substitute is resolved like the requested sample: nothing stale is served.
            let resolved = if choice.substituted { self.resolve(choice.sample) } else { Ok(requested.clone()) };
            // The other active jobs that still need this sample this epoch.
            let others = self.jobs_needing(choice.sample) & !job.bit();
            let produced = resolved.and_then(|sample| match view.form {
                Form::Augmented => {
                    // Shared with the jobs that still need this sample this epoch: an output kept
                    // for a job that has seen the sample would wait an epoch, clogging the room.
                    let consumer = Consumer::Job { bit: job.bit(), active: others | job.bit() };
                    self.producer.augmented(&sample, consumer)
                }
                Form::Decoded => self.producer.decoded(&sample),
                Form::Encoded => self.producer.encoded(&sample),
            });
            let (bytes, origin) = match produced {
                Ok(out) => out,
                Err(e) => {
                    // A sample that cannot be served counts as the job's (its epoch can end).
                    job.mark_served(choice.sample, choice.claimed);
                    drop(served);
                    if !choice.substituted || retried {
                        return Err(e);
                    }
                    retried = true;
                    continue;
                }
            };
            let c = &job.counters;
            bump(
                match origin {
                    Origin::Augmented => &c.hits_augmented,
                    Origin::Decoded => &c.hits_decoded,
                    Origin::Encoded => &c.hits_encoded,
                    Origin::Disk | Origin::Source => &c.misses,
                },
                1,
            );
            if choice.substituted {
                bump(&c.substitutions, 1);
            }
            // The cache is the jobs' window: bytes and pixels no other job needs this epoch
            // make room first, however this job was served (an augmented output is dropped
            // once its jobs have used it).
            if others == 0 {
                self.cache().done_with(choice.sample);
            }
            let data = self.pin(HandleData::Bytes { bytes, form: view.form, served: Some(served) }, caller)?;
            let mut shares = self.shares.lock_or_recover();
            shares.retain(|_, w| w.strong_count() > 0);
            shares.insert(share, Arc::downgrade(&data));
            return Ok(data);
        }
    }

    /// Queues the next samples of the job's listing of `dir` for preparation (the prefetch
    /// window, bounded again by what the cache has room for when the work runs).
    fn queue_prefetch(&self, job: &Arc<Job>, form: Form, dir: DirId, requested: FileId) {
        let window = self.config().jobs.prefetch_window;
        if window == 0 || !self.cache().enabled() {
            return;
        }
        for sample in job.prefetch_candidates(dir, requested, window, |c| self.cache.rank(c, form) > 0) {
            self.prefetch.push(sample, form, job);
        }
    }

    /// Reads up to `size` bytes at `offset` of an open file and hands them to `reply`. The first
    /// read of a job-view handle counts its sample as served to the job.
    pub fn read<R>(&self, fh: u64, offset: u64, size: u32, reply: impl FnOnce(Result<&[u8]>) -> R) -> R {
        let handle = match self.handles.get(fh) {
            Ok(h) => h,
            Err(e) => return reply(Err(e)),
        };
        match &handle.data {
            HandleData::Bytes { bytes, form, served } => {
                if let Some(s) = served {
                    if !s.read.swap(true, Ordering::Relaxed) {
                        s.job.mark_served(s.sample, s.claimed);
                        s.job.touch(self.jobs.now_ms());
                    }
                }
                let start = (offset as usize).min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                bump(&self.counters(*form).bytes_served, (end - start) as u64);
                reply(Ok(&bytes[start..end]))
            }
            HandleData::Control(bytes) => {
                let start = (offset as usize).min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                reply(Ok(&bytes[start..end]))
            }
            HandleData::Source { file } => match self.reader.read_at(file, offset, size) {
                Ok(buf) => {
                    bump(&self.stats().encoded.bytes_served, buf.len() as u64);
                    reply(Ok(&buf))
                }
                Err(e) => reply(Err(e)),
            },
            HandleData::Listing(_) => reply(Err(Error::IsADirectory)),
        }
    }

    /// Releases an open file.
    pub fn release(&self, fh: u64) {
        let Some(data) = self.handles.remove(fh) else { return };
        self.stats().open_handles.fetch_sub(1, Ordering::Relaxed);
        if let HandleData::Bytes { served: Some(served), .. } = &data.data {
            // The last handle sharing this content: forget the share.
            if Arc::strong_count(&data) == 1 {
                let mut shares = self.shares.lock_or_recover();
                if shares.get(&served.share).is_some_and(|w| w.as_ptr() == Arc::as_ptr(&data)) {
                    shares.remove(&served.share);
                }
            }
        }
    }

    /// Bytes of opportunistic-sampling metadata: the status byte per sample and every active
    /// job's bits.
    pub fn ods_metadata_bytes(&self) -> usize {
        self.cache().status.bytes() + self.jobs.active().iter().map(|j| j.state_bytes()).sum::<usize>()
    }

    /// The live figures, as served in `.prepfs/stats.json`.
    pub fn stats_json(&self) -> String {
        let catalog = self.catalog();
        let extra = serde_json::json!({
            "source": self.config().source,
            "samples": catalog.sample_count(),
            "files": catalog.file_count(),
            "directories": catalog.dir_count(),
            "stem_collisions": catalog.stem_collisions,
            "catalog_bytes_per_sample": catalog.bytes_per_sample(),
            "cache": self.producer.cache_stats(),
            "plan": self.plan.plan_json(),
            "jobs": self.jobs.stats(),
            "ods_metadata_bytes": self.ods_metadata_bytes(),
            "open_bytes": self.open_budget.held(),
            "max_open_bytes": self.config().access.max_open_bytes,
        });
        let mut text = serde_json::to_string_pretty(&self.stats().to_json(extra)).unwrap_or_default();
        text.push('\n');
        text
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::source::{Fault, FaultySource};
    use std::collections::HashSet;

    /// [`core`] reading its source through a fault-injecting [`FaultySource`].
    fn faulty_core(n: usize, yaml: &str) -> (tempfile::TempDir, Filesystem, Arc<FaultySource>) {
        let (dir, fs) = core(n, yaml);
        let faulty = Arc::new(FaultySource::new(LocalSource::new(&dir.path().join("src")).expect("root")));
        let overrides = Overrides { source: Some(dir.path().join("src")), mountpoint: Some(dir.path().join("mnt")), seed: Some(3) };
        let config = Config::parse(&format!("threads: 1\n{yaml}"), &overrides).expect("config");
        let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
        drop(fs);
        let io: Arc<dyn SourceIo> = faulty.clone();
        (dir, Filesystem::with_source(config, catalog, io).expect("filesystem"), faulty)
    }

    #[test]
    fn an_output_a_job_has_used_ranks_as_no_augmented_hit_for_it_but_does_for_the_others() {
        let (_dir, fs) = core(2, "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
        let job_ino = |job: &str, name: &str| {
            let jobs = fs.lookup(ROOT_INO, OsStr::new("jobs"), Caller::ROOT).expect("jobs").ino;
            let root = fs.lookup(jobs, OsStr::new(job), Caller::ROOT).expect("job").ino;
            let view = fs.lookup(root, OsStr::new("augmented"), Caller::ROOT).expect("view").ino;
            let class = fs.lookup(view, OsStr::new("c0"), Caller::ROOT).expect("class").ino;
            fs.lookup(class, OsStr::new(name), Caller::ROOT).expect("file").ino
        };
        job_ino("b", "s000.ppm"); // both jobs active: a miss's output is kept for the other
        read_file(&fs, job_ino("a", "s000.ppm"));
        let (a, b) = (fs.jobs().by_name("a").expect("a"), fs.jobs().by_name("b").expect("b"));
        let served = (0..2).find(|&f| a.has_seen(f)).expect("a was served a sample");
        assert_eq!(fs.cache.rank_for_job(served, Form::Augmented, b.bit()), 3, "b can take it");
        assert!(fs.cache.rank_for_job(served, Form::Augmented, a.bit()) < 3, "a used it already");
        // Kept for b while b needs the sample; dropped once b was served it another way.
        assert_eq!(fs.drop_outputs_no_job_needs(), 0);
        b.mark_served(served, false);
        assert_eq!(fs.drop_outputs_no_job_needs(), 1);
        assert_eq!(fs.cache().augmented.entries(), 0);
    }

    #[test]
    fn a_hung_source_fails_its_open_within_the_timeout_and_the_rest_still_serve() {
        let (dir, fs, faulty) = faulty_core(3, "source: { path: /x, timeout: 1s }\ncache: { memory: 64MiB, refill: false }\n");
        faulty.inject(&dir.path().join("src/c0/s001.jpg"), Fault::Hang);
        let started = std::time::Instant::now();
        let err = fs.open(ino_of(&fs, "augmented", "s001.ppm"), false, Caller::ROOT).expect_err("hung");
        assert_eq!(err.errno(), libc::EIO, "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
        for name in ["s000.ppm", "s002.ppm"] {
            assert!(!read_file(&fs, ino_of(&fs, "augmented", name)).is_empty());
        }
        faulty.release_hangs();
        fs.shutdown();
    }

    #[test]
    fn a_source_error_reaches_the_reader_as_its_errno_and_is_not_remembered() {
        let (dir, fs, faulty) = faulty_core(2, "cache: { memory: 64MiB, refill: false }\n");
        let path = dir.path().join("src/c0/s000.jpg");
        let ino = ino_of(&fs, "decoded", "s000.ppm");
        faulty.inject(&path, Fault::Error(std::io::ErrorKind::PermissionDenied));
        assert_eq!(fs.open(ino, false, Caller::ROOT).expect_err("denied").errno(), libc::EACCES);
        faulty.clear();
        assert!(!read_file(&fs, ino).is_empty(), "a transient failure is not a bad sample");
    }

    #[test]
    fn a_changed_source_file_drops_its_cached_forms_and_its_inodes_are_made_stale() {
        let (dir, fs) = core(2, "cache: { memory: 64MiB, split: 40-40-20, refill: false }\n");
        let ino = ino_of(&fs, "decoded", "s000.ppm");
        let first = read_file(&fs, ino);
        assert!(fs.cache().status.held(0) != 0, "cached");
        assert!(fs.stale.drain(Duration::ZERO).is_empty());
        // Replace it (by rename) with a bigger image.
        let path = dir.path().join("src/c0/s000.jpg");
        let tmp = dir.path().join("src/c0/.new");
        std::fs::write(&tmp, crate::pixels::pipeline::tests::photo_jpeg(640, 480, turbojpeg::Subsamp::Sub2x2)).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        let attr = fs.getattr(ino).expect("getattr");
        assert_eq!(attr.size, 3 * 640 * 480 + "P6\n640 480\n255\n".len() as u64, "the new size, not the one probed before");
        let stale = fs.stale.drain(Duration::ZERO);
        assert!(stale.contains(&ino) && stale.contains(&ino_of(&fs, "encoded", "s000.jpg")), "{stale:?}");
        let opened = fs.open(ino, false, Caller::ROOT).expect("open");
        let second = fs.read(opened.fh, 0, u32::MAX, |r| r.expect("read").to_vec());
        fs.release(opened.fh);
        assert_eq!(opened.cache, CachePolicy::Refresh, "the kernel's cached pages of it are dropped");
        assert_ne!(first, second);
        assert_eq!(second.len() as u64, attr.size);
        assert_eq!(fs.stats().source_changes.load(Ordering::Relaxed), 1);
        // Unchanged since: the page cache may be kept again.
        assert_eq!(fs.open(ino, false, Caller::ROOT).expect("open").cache, CachePolicy::KeepCache);
    }

    /// A dataset of `n` photo-like JPEGs in one class, and a core over it with `cache_yaml`.
    fn core(n: usize, cache_yaml: &str) -> (tempfile::TempDir, Filesystem) {
        let dir = tempfile::tempdir().expect("tempdir");
        let class = dir.path().join("src/c0");
        std::fs::create_dir_all(&class).expect("mkdir");
        for i in 0..n {
            let jpeg = crate::pixels::pipeline::tests::photo_jpeg(320 + 8 * i, 240, turbojpeg::Subsamp::Sub2x2);
            std::fs::write(class.join(format!("s{i:03}.jpg")), jpeg).expect("write");
        }
        let overrides = Overrides {
            source: Some(dir.path().join("src")),
            mountpoint: Some(dir.path().join("mnt")),
            seed: Some(3),
        };
        let config = Config::parse(&format!("threads: 1\n{cache_yaml}"), &overrides).expect("config");
        let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
        (dir, Filesystem::new(config, catalog).expect("filesystem"))
    }

    fn ino_of(fs: &Filesystem, view: &str, name: &str) -> u64 {
        let root = fs.lookup(ROOT_INO, OsStr::new(view), Caller::ROOT).expect("view").ino;
        let class = fs.lookup(root, OsStr::new("c0"), Caller::ROOT).expect("class").ino;
        fs.lookup(class, OsStr::new(name), Caller::ROOT).expect("file").ino
    }

    /// Opens, reads whole and releases one file through the core, as the kernel would.
    fn read_file(fs: &Filesystem, ino: u64) -> Vec<u8> {
        let opened = fs.open(ino, false, Caller::ROOT).expect("open");
        let data = fs.read(opened.fh, 0, u32::MAX, |r| r.expect("read").to_vec());
        fs.release(opened.fh);
        data
    }

    fn epoch(fs: &Filesystem, n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| read_file(fs, ino_of(fs, "augmented", &format!("s{i:03}.ppm")))).collect()
    }

    fn source_bytes(fs: &Filesystem) -> u64 {
        fs.stats().source_bytes_read.load(Ordering::Relaxed)
    }

    #[test]
    fn a_second_epoch_over_a_set_that_fits_reads_nothing_from_the_source() {
        for split in ["0-100-0", "100-0-0", "0-50-50"] {
            let (_dir, fs) = core(6, &format!("cache: {{ memory: 256MiB, split: {split}, refill: false }}\n"));
            epoch(&fs, 6);
            let after_first = source_bytes(&fs);
            assert!(after_first > 0);
            epoch(&fs, 6);
            assert_eq!(source_bytes(&fs), after_first, "split {split}: epoch 2 read the source");
        }
    }

    #[test]
    fn without_a_cache_every_open_reads_the_source() {
        let (_dir, fs) = core(3, "cache: { memory: 0 }\n");
        epoch(&fs, 3);
        let first = source_bytes(&fs);
        epoch(&fs, 3);
        assert_eq!(source_bytes(&fs), 2 * first);
    }

    #[test]
    fn augmented_outputs_are_used_once_then_refilled_with_fresh_crops() {
        let (_dir, fs) = core(5, "cache: { memory: 256MiB, split: 0-50-50, refill: false }\n");
        let mut seen = HashSet::new();
        for out in epoch(&fs, 5) {
            assert!(seen.insert(out), "a crop was served twice");
        }
        // Epoch 1 kept one spare augmentation per sample; epoch 2 uses each once.
        assert_eq!(fs.cache().augmented.entries(), 5);
        for out in epoch(&fs, 5) {
            assert!(seen.insert(out), "a crop was served twice");
        }
        assert_eq!(fs.cache().augmented.entries(), 0, "used outputs are dropped");
        // The refill makes fresh ones from the decoded cache, without the source.
        let before = source_bytes(&fs);
        let mut cursor = 0;
        while fs.refill_once(&mut cursor) {}
        assert_eq!(fs.cache().augmented.entries(), 5);
        assert_eq!(source_bytes(&fs), before);
        for out in epoch(&fs, 5) {
            assert!(seen.insert(out), "a refilled crop repeated an earlier one");
        }
        assert_eq!(fs.stats().refills.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn the_refill_works_ahead_of_top_level_readers_from_the_source_and_stops() {
        // Augmented only: the refill must read the source itself.
        let (_dir, fs) = core(6, "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
        // Readers have read three samples in this pass: the refill prepares the other three.
        for i in 0..3 {
            read_file(&fs, ino_of(&fs, "augmented", &format!("s{i:03}.ppm")));
        }
        let mut cursor = 0;
        let mut rounds = 0;
        while fs.refill_once(&mut cursor) {
            rounds += 1;
            assert!(rounds < 100, "the refill does not stop");
        }
        assert_eq!(fs.cache().augmented.entries(), 3);
        assert_eq!(fs.stats().refills.load(Ordering::Relaxed), 3, "refills count what was admitted");
        assert!((3..6).all(|f| fs.cache().status.held(f) & crate::cache::HELD_AUGMENTED != 0));
        // Reading the rest of the pass hits them; the next pass is then prepared in turn.
        let before = source_bytes(&fs);
        for i in 3..6 {
            read_file(&fs, ino_of(&fs, "augmented", &format!("s{i:03}.ppm")));
        }
        assert_eq!(source_bytes(&fs), before, "the prepared samples were hits");
        while fs.refill_once(&mut cursor) {}
        assert_eq!(fs.cache().augmented.entries(), 6, "a new pass: every sample prepared");
    }

    #[test]
    fn misses_fill_augmented_then_decoded_then_encoded() {
        // Room for one augmented output (150 KB) and one decoded sample (about 230-300 KB).
        let memory = 1_000_000u64;
        let (_dir, fs) = core(4, &format!("cache: {{ memory: {memory}, split: 50-32-18, refill: false }}\n"));
        epoch(&fs, 4);
        let cache = fs.cache();
        assert_eq!(cache.augmented.entries(), 1, "augmented fills first");
        assert!(cache.decoded.entries() >= 1, "then decoded");
        assert!(cache.encoded.entries() >= 1, "then encoded");
        assert!(cache.used() <= memory);
    }

    #[test]
    fn memory_stays_within_the_budget_far_past_it() {
        let memory = 600_000u64;
        for policy in ["keep", "lru"] {
            let (_dir, fs) = core(12, &format!("cache: {{ memory: {memory}, split: 30-40-30, policy: {policy} }}\n"));
            for _ in 0..3 {
                epoch(&fs, 12);
                let mut cursor = 0;
                while fs.refill_once(&mut cursor) {}
                let c = fs.cache();
                assert!(c.encoded.used() <= c.encoded.budget());
                assert!(c.decoded.used() <= c.decoded.budget());
                assert!(c.augmented.used() <= c.augmented.budget());
                assert!(c.used() <= memory, "{policy}: {} > {memory}", c.used());
            }
        }
    }

    #[test]
    fn concurrent_opens_of_one_missing_sample_read_it_once() {
        let (_dir, fs) = core(1, "cache: { memory: 256MiB, split: 0-100-0, refill: false }\n");
        let fs = Arc::new(fs);
        let ino = ino_of(&fs, "decoded", "s000.ppm");
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (fs, barrier) = (Arc::clone(&fs), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    read_file(&fs, ino)
                })
            })
            .collect();
        let outputs: Vec<_> = threads.into_iter().map(|t| t.join().expect("thread")).collect();
        assert!(outputs.windows(2).all(|w| w[0] == w[1]));
        let size = std::fs::metadata(fs.catalog().file_path(0)).expect("stat").len();
        assert_eq!(source_bytes(&fs), size, "the source was read more than once");
        assert_eq!(fs.stats().decodes(), 1, "decoded more than once");
    }

    #[test]
    fn the_plan_is_redone_from_rates_measured_while_serving() {
        let (_dir, fs) = core(6, "cache: { memory: 256MiB, split: auto, refill: false }\n");
        fs.plan_cache();
        let planned: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
        assert_eq!(planned["plan"]["from"], "mount-time calibration", "{}", planned["plan"]);
        assert!(!fs.replan(), "nothing new measured yet");
        let mut epochs = 0;
        while !fs.replan() {
            epoch(&fs, 6);
            epochs += 1;
            assert!(epochs < 40, "no re-plan after {epochs} epochs");
        }
        let replanned: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
        let plan = &replanned["plan"];
        assert_eq!(plan["from"], "rates measured while serving", "{plan}");
        assert!(plan["inputs"]["t_a"].as_f64().unwrap_or(0.0) > 0.0, "{plan}");
        assert!(plan["samples_timed"].as_u64().unwrap_or(0) >= 64, "{plan}");
        let split: Vec<u64> = plan["split"].as_array().expect("split").iter().filter_map(|v| v.as_u64()).collect();
        assert_eq!(split.iter().sum::<u64>(), 100);
        assert_eq!(replanned["cache"]["split"], plan["split"], "the plan's split is the one in force");
    }

    #[test]
    fn source_reads_keep_to_the_read_limit() {
        // The path is overridden (as --source does); the limit stays.
        let (_dir, fs) = core(6, "source: { path: /overridden, read_limit: 1MB/s }\n");
        let started = std::time::Instant::now();
        epoch(&fs, 6);
        let read = source_bytes(&fs);
        let took = started.elapsed().as_secs_f64();
        // The 20 ms burst allowance, and the first header probe's 16 KiB, may run ahead.
        let floor = read as f64 / 1e6 - 0.04;
        assert!(took >= floor, "{read} bytes at 1 MB/s took {took:.3} s (< {floor:.3} s)");
        let stats: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
        assert_eq!(stats["cache"]["read_limit_bytes_per_s"], 1_000_000);
    }

    #[test]
    fn stats_show_each_form() {
        let (_dir, fs) = core(2, "cache: { memory: 64MiB, split: 10-40-50 }\n");
        epoch(&fs, 2);
        let stats: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
        for form in ["encoded", "decoded", "augmented"] {
            for key in ["bytes_used", "budget", "entries", "hits", "misses"] {
                assert!(stats["cache"][form][key].is_u64(), "{form}.{key}: {stats}");
            }
        }
        assert_eq!(stats["cache"]["split"], serde_json::json!([10, 40, 50]));
    }
}
