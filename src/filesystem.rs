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

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, SystemTime};

use crate::cache::SampleCache;
use crate::catalog::{Catalog, DirId, Entry, FileId};
use crate::config::Config;
use crate::disk_cache::DiskCache;
use crate::error::{Error, Result};
use crate::output;
pub use crate::producer::Form;
use crate::producer::{Consumer, Origin, SampleProducer};
use crate::sampling::{Job, Jobs, Pass};
use crate::stats::{bump, Stats, ViewCounters};

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

/// The attributes the core reports for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    /// The node may go away soon (a job's directory): names of it should be kept briefly.
    pub volatile: bool,
    /// Entries may be made and removed in it (`jobs/`).
    pub writable: bool,
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
}

/// What `open` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub fh: u64,
    pub cache: CachePolicy,
}

/// What an open handle serves.
enum HandleData {
    /// A source file read through on demand (the top-level `encoded` view).
    Source { file: File },
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

/// Open handles, sharded so that many FUSE threads rarely meet on one lock.
struct HandleTable {
    next: AtomicU64,
    shards: Vec<Mutex<HashMap<u64, Arc<HandleData>>>>,
}

const HANDLE_SHARDS: usize = 16;

impl HandleTable {
    fn new() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            shards: (0..HANDLE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
    fn shard(&self, fh: u64) -> &Mutex<HashMap<u64, Arc<HandleData>>> {
        &self.shards[fh as usize % HANDLE_SHARDS]
    }
    fn insert(&self, data: Arc<HandleData>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh).lock().unwrap_or_else(|p| p.into_inner()).insert(fh, data);
        fh
    }
    fn get(&self, fh: u64) -> Result<Arc<HandleData>> {
        let shard = self.shard(fh).lock().unwrap_or_else(|p| p.into_inner());
        shard.get(&fh).cloned().ok_or(Error::BadHandle)
    }
    fn remove(&self, fh: u64) -> Option<Arc<HandleData>> {
        self.shard(fh).lock().unwrap_or_else(|p| p.into_inner()).remove(&fh)
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
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.0.len() < PREFETCH_QUEUE_MAX && pending.1.insert(sample) {
            pending.0.push_back((sample, form, Arc::clone(job)));
            self.ready.notify_one();
        }
    }
    fn pop(&self, wait: Duration) -> Option<(FileId, Form, Arc<Job>)> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.0.is_empty() && !wait.is_zero() {
            pending = self.ready.wait_timeout(pending, wait).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
        pending.0.pop_front()
    }
    fn done(&self, sample: FileId) {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).1.remove(&sample);
    }
}

/// The filesystem core.
pub struct Filesystem {
    producer: SampleProducer,
    jobs: Jobs,
    handles: HandleTable,
    /// Open job-view handles by (job code, form, requested sample): a second open of one path
    /// while the first is open (PIL opens a PPM twice to try mmap) shares the first's content.
    shares: Mutex<HashMap<(u32, Form, FileId), Weak<HandleData>>>,
    prefetch: PrefetchQueue,
    /// Samples served by top-level `augmented/` opens in the current pass over the set: the
    /// refill prepares the others first.
    top_pass: Pass,
    mounted_at: SystemTime,
}

impl Filesystem {
    /// A filesystem over a scanned catalog.
    pub fn new(config: Config, catalog: Catalog) -> Filesystem {
        let jobs = Jobs::new(config.jobs.max, catalog.file_count(), catalog.sample_count() as u64, config.seed);
        let top_pass = Pass::new(catalog.file_count(), catalog.sample_count() as u64);
        Filesystem {
            top_pass,
            producer: SampleProducer::new(config, catalog),
            jobs,
            handles: HandleTable::new(),
            shares: Mutex::new(HashMap::new()),
            prefetch: PrefetchQueue::default(),
            mounted_at: SystemTime::now(),
        }
    }

    /// The catalog served.
    pub fn catalog(&self) -> &Catalog {
        self.producer.catalog()
    }

    /// The live counters.
    pub fn stats(&self) -> &Stats {
        self.producer.stats()
    }

    /// The sample cache.
    pub fn cache(&self) -> &SampleCache {
        self.producer.cache()
    }

    /// The cache's disk tier, if one is open.
    pub fn disk_cache(&self) -> Option<&DiskCache> {
        self.producer.disk_cache()
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        self.producer.config()
    }

    /// The jobs under `jobs/`.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Measures the cache model's inputs and applies the split (see the producer).
    pub fn plan_cache(&self) {
        self.producer.plan_cache();
    }

    /// Re-plans the cache split from the rates measured while serving, when enough samples were
    /// timed since the last plan.
    pub fn replan(&self) -> bool {
        self.producer.replan_from_live_rates()
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

    fn dir_attr(&self, node: Node) -> Attr {
        let volatile = matches!(node, Node::JobRoot(_));
        let writable = node == Node::JobsDir;
        Attr { ino: node.ino(), kind: Kind::Dir, size: 0, mtime: self.mounted_at, volatile, writable }
    }

    fn file_attr(&self, node: Node, size: u64) -> Attr {
        Attr { ino: node.ino(), kind: Kind::File, size, mtime: self.mounted_at, volatile: false, writable: false }
    }

    /// The active job whose inodes carry `code`, marked active now.
    fn job(&self, code: u32) -> Result<Arc<Job>> {
        let job = self.jobs.by_code(code).ok_or(Error::NotFound)?;
        job.touch(self.jobs.now_ms());
        Ok(job)
    }

    /// Finds `name` in the directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr> {
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
            Node::JobsDir => Node::JobRoot(self.jobs.get_or_create(name.as_bytes())?.code()),
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
            Node::Root | Node::ControlDir | Node::JobsDir => Ok(self.dir_attr(node)),
            Node::JobRoot(code) => self.jobs.by_code(code).map(|_| self.dir_attr(node)).ok_or(Error::NotFound),
            Node::Dir(view, d) => {
                if d as usize >= catalog.dir_count() || (view.job != 0 && self.jobs.by_code(view.job).is_none()) {
                    return Err(Error::NotFound);
                }
                Ok(self.dir_attr(node))
            }
            Node::StatsFile => Ok(self.file_attr(node, self.stats_json().len() as u64)),
            Node::ConfigFile => Ok(self.file_attr(node, self.config().to_yaml().len() as u64)),
            Node::File(view, file) => {
                if file as usize >= catalog.file_count() || (view.job != 0 && self.jobs.by_code(view.job).is_none()) {
                    return Err(Error::NotFound);
                }
                match view.form {
                    Form::Encoded => {
                        let path = catalog.file_path(file);
                        let meta = std::fs::metadata(&path).map_err(|e| Error::source_io(&path, e))?;
                        let mut attr = self.file_attr(node, meta.len());
                        attr.mtime = meta.modified().unwrap_or(self.mounted_at);
                        Ok(attr)
                    }
                    Form::Decoded => {
                        // An undecodable header still lists (size 0); opening it gets EIO.
                        let output = &self.config().output;
                        let size = self.producer.source_size(file).map_or(0, |s| output::encoded_len(output, s));
                        Ok(self.file_attr(node, size))
                    }
                    Form::Augmented => Ok(self.file_attr(
                        node,
                        output::encoded_len(&self.config().output, self.producer.augmented_size()),
                    )),
                }
            }
        }
    }

    /// Snapshots a directory listing; [`Filesystem::readdir`] pages through it. In a job's view
    /// the samples come in the job's order for this epoch (cached and unseen first).
    pub fn opendir(&self, ino: u64) -> Result<u64> {
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
                    let rank = |c: FileId| self.producer.rank(c, view.form);
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
        Ok(self.handles.insert(Arc::new(HandleData::Listing(entries))))
    }

    /// Entries of an open listing from `offset` on (offset k resumes after the k-th entry).
    pub fn readdir(&self, fh: u64, offset: u64, mut add: impl FnMut(&DirEntry, u64) -> bool) -> Result<()> {
        let handle = self.handles.get(fh)?;
        let HandleData::Listing(entries) = &*handle else { return Err(Error::NotADirectory) };
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
    pub fn mkdir(&self, parent: u64, name: &OsStr) -> Result<Attr> {
        if Node::from_ino(parent) != Some(Node::JobsDir) {
            return Err(Error::ReadOnly);
        }
        let job = self.jobs.get_or_create(name.as_bytes())?;
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
    pub fn open(&self, ino: u64, write: bool) -> Result<Opened> {
        if write {
            return Err(Error::ReadOnly);
        }
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let (data, cache) = match node {
            Node::Root | Node::ControlDir | Node::JobsDir | Node::JobRoot(_) | Node::Dir(..) => {
                return Err(Error::IsADirectory)
            }
            Node::StatsFile => (Arc::new(HandleData::Control(self.stats_json().into_bytes().into())), CachePolicy::DirectIo),
            Node::ConfigFile => {
                (Arc::new(HandleData::Control(self.config().to_yaml().into_bytes().into())), CachePolicy::DirectIo)
            }
            Node::File(view, file) => {
                if file as usize >= self.catalog().file_count() {
                    return Err(Error::NotFound);
                }
                bump(&self.counters(view.form).opens, 1);
                if view.job != 0 {
                    (self.open_in_job(view, file)?, CachePolicy::DirectIo)
                } else {
                    self.open_top_level(view.form, file)?
                }
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
                (0, form) => self.producer.rank(file, form) == form.top_rank(),
                (_, form) => self.producer.rank(file, form) == form.top_rank() && self.jobs.by_code(view.job).is_some_and(|j| !j.has_seen(file)),
            },
            Some(Node::StatsFile | Node::ConfigFile) => true,
            _ => false,
        }
    }

    /// An open in a top-level view: the requested sample, always.
    fn open_top_level(&self, form: Form, file: FileId) -> Result<(Arc<HandleData>, CachePolicy)> {
        if form == Form::Encoded {
            let source = HandleData::Source { file: self.producer.open_source(file)? };
            return Ok((Arc::new(source), CachePolicy::KeepCache));
        }
        let (bytes, origin) = match form {
            Form::Decoded => self.producer.decoded(file)?,
            _ => {
                self.top_pass.mark(file);
                self.producer.augmented(file, Consumer::TopLevel)?
            }
        };
        let counters = self.counters(form);
        bump(if matches!(origin, Origin::Disk | Origin::Source) { &counters.misses } else { &counters.hits }, 1);
        let cache = if form == Form::Decoded { CachePolicy::KeepCache } else { CachePolicy::DirectIo };
        Ok((Arc::new(HandleData::Bytes { bytes, form, served: None }), cache))
    }

    /// An open in a job's view: opportunistic sampling chooses the sample (the requested one, or
    /// an unseen one of the same directory that is cached), prefetch is queued along the job's
    /// listing, and the chosen sample's bytes are pinned to the handle.
    fn open_in_job(&self, view: View, requested: FileId) -> Result<Arc<HandleData>> {
        let job = self.job(view.job)?;
        bump(&job.counters.opens, 1);
        let share = (view.job, view.form, requested);
        // PIL's second open of a path it holds open (to try mmap) sees the same content.
        if let Some(shared) = self.shares.lock().unwrap_or_else(|p| p.into_inner()).get(&share).and_then(Weak::upgrade) {
            return Ok(shared);
        }
        let catalog = self.catalog();
        if !catalog.is_image(requested) {
            // Not a sample (a README in encoded/): served as it is, outside the job's epochs.
            let (bytes, _) = self.producer.encoded(requested)?;
            return Ok(Arc::new(HandleData::Bytes { bytes, form: view.form, served: None }));
        }
        let dir = catalog.file_dir(requested);
        let samples = catalog.images(dir);
        let rank = |c: FileId| if self.producer.known_bad(c) { 0 } else { self.producer.rank(c, view.form) };
        self.queue_prefetch(&job, view.form, dir, requested);
        // A substitute that cannot be served is replaced, once, rather than fail the request.
        let mut retried = false;
        loop {
            let choice = job.choose(requested, samples, rank, view.form.top_rank(), Jobs::scan_start(samples.len()), self.config().jobs.ods);
            let served = Served { job: Arc::clone(&job), sample: choice.sample, claimed: choice.claimed, read: AtomicBool::new(false), share };
            let produced = match view.form {
                Form::Augmented => {
                    let consumer = Consumer::Job { bit: job.bit(), active: self.jobs.active_mask() | job.bit() };
                    self.producer.augmented(choice.sample, consumer)
                }
                Form::Decoded => self.producer.decoded(choice.sample),
                Form::Encoded => self.producer.encoded(choice.sample),
            };
            let (bytes, origin) = match produced {
                Ok(out) => out,
                Err(e) => {
                    // A sample that cannot be served counts as the job's (its epoch can end).
                    job.mark_served(choice.sample);
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
            let data = Arc::new(HandleData::Bytes { bytes, form: view.form, served: Some(served) });
            let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
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
        for sample in job.prefetch_candidates(dir, requested, window, |c| self.producer.rank(c, form) > 0) {
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
        match &*handle {
            HandleData::Bytes { bytes, form, served } => {
                if let Some(s) = served {
                    if !s.read.swap(true, Ordering::Relaxed) {
                        s.job.mark_served(s.sample);
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
            HandleData::Source { file } => match self.producer.read_source_at(file, offset, size) {
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
        if let HandleData::Bytes { served: Some(served), .. } = &*data {
            // The last handle sharing this content: forget the share.
            if Arc::strong_count(&data) == 1 {
                let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
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
            "plan": self.producer.plan_json(),
            "jobs": self.jobs.stats(),
            "ods_metadata_bytes": self.ods_metadata_bytes(),
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
    use std::collections::HashSet;

    /// A dataset of `n` photo-like JPEGs in one class, and a core over it with `cache_yaml`.
    fn core(n: usize, cache_yaml: &str) -> (tempfile::TempDir, Filesystem) {
        let dir = tempfile::tempdir().expect("tempdir");
        let class = dir.path().join("src/c0");
        std::fs::create_dir_all(&class).expect("mkdir");
        for i in 0..n {
            let jpeg = crate::pipeline::tests::photo_jpeg(320 + 8 * i, 240, turbojpeg::Subsamp::Sub2x2);
            std::fs::write(class.join(format!("s{i:03}.jpg")), jpeg).expect("write");
        }
        let overrides = Overrides {
            source: Some(dir.path().join("src")),
            mountpoint: Some(dir.path().join("mnt")),
            seed: Some(3),
        };
        let config = Config::parse(&format!("threads: 1\n{cache_yaml}"), &overrides).expect("config");
        let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
        (dir, Filesystem::new(config, catalog))
    }

    fn ino_of(fs: &Filesystem, view: &str, name: &str) -> u64 {
        let root = fs.lookup(ROOT_INO, OsStr::new(view)).expect("view").ino;
        let class = fs.lookup(root, OsStr::new("c0")).expect("class").ino;
        fs.lookup(class, OsStr::new(name)).expect("file").ino
    }

    /// Opens, reads whole and releases one file through the core, as the kernel would.
    fn read_file(fs: &Filesystem, ino: u64) -> Vec<u8> {
        let opened = fs.open(ino, false).expect("open");
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
        let (_dir, fs) = core(3, "");
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
