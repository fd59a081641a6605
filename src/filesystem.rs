//! The filesystem core: the mount's tree of views over the catalog, inode numbers, open file
//! handles, and the request operations (lookup, getattr, readdir, open, read, release).
//!
//! It knows nothing of FUSE: `fuse.rs` adapts `fuser` callbacks onto it, and tests call it
//! directly. The hot path reads top to bottom in [`Filesystem::open`]: resolve the inode, read
//! the source, run the pipeline, pin the bytes to a handle; [`Filesystem::read`] then slices
//! them. No lock is held across decoding or I/O: the handle table is locked only to insert, find
//! or remove a handle.
//!
//! Inodes are computed, not allocated: an inode number packs the view (top-level `encoded`,
//! `decoded`, `augmented`; later, each job's views), whether it is a file, and the catalog index.
//! So `forget` has nothing to free and inodes are stable across remounts.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::augment::{draw_rng, plan_sample, SamplePlan, Size2};
use crate::cache::{SampleCache, SingleFlight};
use crate::catalog::{Catalog, DirId, Entry, FileId};
use crate::config::{Config, SplitChoice};
use crate::disk_cache::{self, DiskCache, DiskHit, DiskKind};
use crate::jpeg::Rgb;
use crate::error::{Error, Result};
use crate::output;
use crate::pipeline;
use crate::stats::{bump, Stats, ViewCounters};

/// The three forms a view serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// The source bytes, byte for byte.
    Encoded,
    /// The full-resolution RGB decode.
    Decoded,
    /// A fresh augmentation at every open.
    Augmented,
}

impl Form {
    pub const ALL: [Form; 3] = [Form::Encoded, Form::Decoded, Form::Augmented];

    /// The view's directory name.
    pub fn dir_name(self) -> &'static str {
        match self {
            Form::Encoded => "encoded",
            Form::Decoded => "decoded",
            Form::Augmented => "augmented",
        }
    }
    fn index(self) -> u64 {
        match self {
            Form::Encoded => 0,
            Form::Decoded => 1,
            Form::Augmented => 2,
        }
    }
    fn from_index(i: u64) -> Option<Form> {
        Form::ALL.get(i as usize).copied()
    }
}

/// A view: one form of the whole tree. Job views (a later issue) add the job here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct View {
    pub form: Form,
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
    Dir(View, DirId),
    File(View, FileId),
}

const ROOT_INO: u64 = 1;
const CONTROL_DIR_INO: u64 = 2;
const STATS_INO: u64 = 3;
const CONFIG_INO: u64 = 4;
const VIEW_SHIFT: u32 = 48;
const FILE_BIT: u64 = 1 << 47;
const INDEX_MASK: u64 = FILE_BIT - 1;

impl Node {
    /// The inode number of this node.
    pub fn ino(self) -> u64 {
        match self {
            Node::Root => ROOT_INO,
            Node::ControlDir => CONTROL_DIR_INO,
            Node::StatsFile => STATS_INO,
            Node::ConfigFile => CONFIG_INO,
            Node::Dir(view, d) => (view.form.index() + 1) << VIEW_SHIFT | u64::from(d),
            Node::File(view, f) => (view.form.index() + 1) << VIEW_SHIFT | FILE_BIT | u64::from(f),
        }
    }

    /// The node an inode number names, if it names one.
    pub fn from_ino(ino: u64) -> Option<Node> {
        match ino {
            ROOT_INO => return Some(Node::Root),
            CONTROL_DIR_INO => return Some(Node::ControlDir),
            STATS_INO => return Some(Node::StatsFile),
            CONFIG_INO => return Some(Node::ConfigFile),
            _ => {}
        }
        let form = Form::from_index((ino >> VIEW_SHIFT).checked_sub(1)?)?;
        let index = u32::try_from(ino & INDEX_MASK).ok()?;
        let view = View { form };
        Some(if ino & FILE_BIT != 0 { Node::File(view, index) } else { Node::Dir(view, index) })
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

/// What a miss should leave in hand: pixels for the `decoded` view, anything for `augmented`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Admit {
    Pixels,
    Augmented,
}

/// What an open handle serves.
enum HandleData {
    /// A source file read through on demand (the `encoded` view).
    Source { file: File, form: Form },
    /// Bytes produced at open and pinned to the handle.
    Bytes { bytes: Arc<[u8]>, form: Form },
    /// A directory listing snapshotted at `opendir`.
    Listing(Vec<DirEntry>),
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
    fn insert(&self, data: HandleData) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh).lock().unwrap_or_else(|p| p.into_inner()).insert(fh, Arc::new(data));
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

/// The filesystem core.
pub struct Filesystem {
    config: Config,
    catalog: Catalog,
    stats: Stats,
    handles: HandleTable,
    /// Opens so far of each sample's top-level `augmented` file: the epoch of its next draw.
    draws: Vec<AtomicU32>,
    augmented_size: Size2,
    mounted_at: SystemTime,
    cache: SampleCache,
    /// The cache's disk tier, when configured (and its directory could be opened).
    disk: Option<DiskCache>,
    /// The model's prediction for the split in force: (split, samples/s).
    plan: Mutex<Option<serde_json::Value>>,
    /// Concurrent misses of one sample read and decode it once.
    loads: SingleFlight<std::result::Result<Loaded, LoadFailure>>,
}

/// A sample in the cheapest form at hand.
#[derive(Clone)]
enum Loaded {
    /// Full-resolution pixels: augmenting is a crop and a resize.
    Pixels(Arc<Rgb>),
    /// Source bytes: augmenting decodes (the fast path).
    Bytes(Arc<[u8]>),
}

/// A failed load, shareable between the requests of one flight.
#[derive(Clone, Debug)]
enum LoadFailure {
    Decode(String),
    Source(std::io::ErrorKind, String),
}

impl Filesystem {
    /// A filesystem over a scanned catalog.
    pub fn new(config: Config, catalog: Catalog) -> Filesystem {
        let augmented_size = config.augmented_size().unwrap_or(Size2::new(224, 224));
        let draws = (0..catalog.file_count()).map(|_| AtomicU32::new(0)).collect();
        let split = match config.cache.split {
            SplitChoice::Fixed(split) => split,
            // Until the model has measured inputs, favour the forms that save CPU per epoch.
            SplitChoice::Auto => [0, 50, 50],
        };
        let cache = SampleCache::new(config.cache.memory, split, config.cache.policy);
        // A disk tier that cannot be opened leaves the mount serving from memory and the source.
        let disk = config.cache.disk.as_ref().and_then(|d| match DiskCache::open(&d.path, d.size) {
            Ok(disk) => Some(disk),
            Err(e) => {
                tracing::warn!("{e}; serving without the disk tier");
                None
            }
        });
        Filesystem {
            cache,
            disk,
            plan: Mutex::new(None),
            loads: SingleFlight::default(),
            config,
            catalog,
            stats: Stats::default(),
            handles: HandleTable::new(),
            draws,
            augmented_size,
            mounted_at: SystemTime::now(),
        }
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

    /// Measures the model's inputs here and applies the split: the best one for `split: auto`,
    /// else the configured one, with the model's prediction for it in stats either way.
    pub fn plan_cache(&self) {
        if !self.cache.enabled() {
            return;
        }
        let Some(calibration) = crate::calibrate::measure(&self.catalog, &self.config) else {
            tracing::warn!("no sample could be timed; keeping split {:?}", self.cache.split());
            return;
        };
        let params = &calibration.params;
        let (split, evaluation) = match self.config.cache.split {
            SplitChoice::Auto => crate::planner::best_split(params),
            SplitChoice::Fixed([e, d, a]) => match crate::planner::Split::new(e, d, a) {
                Ok(split) => (split, crate::planner::evaluate(params, split)),
                Err(_) => return,
            },
        };
        self.cache.set_split(split.as_array());
        tracing::info!(
            split = %split,
            predicted_samples_per_s = format!("{:.0}", evaluation.samples_per_s),
            t_da = format!("{:.0}", params.t_da),
            t_a = format!("{:.0}", params.t_a),
            b_storage_mb_s = format!("{:.0}", params.b_storage / 1e6),
            "cache plan"
        );
        let doc = serde_json::json!({
            "split": split.as_array(),
            "predicted_samples_per_s": evaluation.samples_per_s,
            "inputs": params,
            "samples_timed": calibration.samples_timed,
        });
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = Some(doc);
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn counters(&self, form: Form) -> &ViewCounters {
        match form {
            Form::Encoded => &self.stats.encoded,
            Form::Decoded => &self.stats.decoded,
            Form::Augmented => &self.stats.augmented,
        }
    }

    fn dir_attr(&self, node: Node) -> Attr {
        Attr { ino: node.ino(), kind: Kind::Dir, size: 0, mtime: self.mounted_at }
    }

    fn file_attr(&self, node: Node, size: u64) -> Attr {
        Attr { ino: node.ino(), kind: Kind::File, size, mtime: self.mounted_at }
    }

    /// Finds `name` in the directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr> {
        let node = match Node::from_ino(parent).ok_or(Error::NotFound)? {
            Node::Root => match name.to_str() {
                Some(".prepfs") => Node::ControlDir,
                Some(n) => {
                    let form = Form::ALL.into_iter().find(|f| f.dir_name() == n).ok_or(Error::NotFound)?;
                    Node::Dir(View { form }, 0)
                }
                None => return Err(Error::NotFound),
            },
            Node::ControlDir => match name.to_str() {
                Some("stats.json") => Node::StatsFile,
                Some("config.yaml") => Node::ConfigFile,
                _ => return Err(Error::NotFound),
            },
            Node::Dir(view, dir) => {
                let entry = match view.form {
                    Form::Encoded => self.catalog.lookup(dir, name),
                    Form::Decoded | Form::Augmented => {
                        self.catalog.lookup_image(dir, name, self.config.output.extension())
                    }
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
        match node {
            Node::Root | Node::ControlDir | Node::Dir(..) => {
                if let Node::Dir(_, d) = node {
                    if d as usize >= self.catalog.dir_count() {
                        return Err(Error::NotFound);
                    }
                }
                Ok(self.dir_attr(node))
            }
            Node::StatsFile => Ok(self.file_attr(node, self.stats_json().len() as u64)),
            Node::ConfigFile => Ok(self.file_attr(node, self.config.to_yaml().len() as u64)),
            Node::File(view, file) => {
                if file as usize >= self.catalog.file_count() {
                    return Err(Error::NotFound);
                }
                match view.form {
                    Form::Encoded => {
                        let path = self.catalog.file_path(file);
                        let meta = std::fs::metadata(&path).map_err(|e| Error::source_io(&path, e))?;
                        let mut attr = self.file_attr(node, meta.len());
                        attr.mtime = meta.modified().unwrap_or(self.mounted_at);
                        Ok(attr)
                    }
                    Form::Decoded => {
                        // An undecodable header still lists (size 0); opening it gets EIO.
                        let size = self.source_size(file).map_or(0, |s| output::encoded_len(&self.config.output, s));
                        Ok(self.file_attr(node, size))
                    }
                    Form::Augmented => {
                        Ok(self.file_attr(node, output::encoded_len(&self.config.output, self.augmented_size)))
                    }
                }
            }
        }
    }

    /// A sample's pixel size from its header, probed once and remembered.
    fn source_size(&self, file: FileId) -> Result<Size2> {
        if let Some(known) = self.catalog.known_size(file) {
            return known.map_err(|()| Error::decode(self.catalog.file_path(file), "unreadable header"));
        }
        let path = self.catalog.file_path(file);
        let probed = File::open(&path).map_err(|e| Error::source_io(&path, e)).and_then(|f| {
            pipeline::probe_size(BufReader::with_capacity(16 * 1024, f)).map_err(|why| Error::decode(&path, why))
        });
        match probed {
            Ok(size) => {
                self.catalog.remember_size(file, Ok(size));
                Ok(size)
            }
            Err(Error::Decode { reason, .. }) => Err(self.mark_bad(file, reason)),
            Err(e) => Err(e),
        }
    }

    /// Records an undecodable sample: one log line naming the file and the reason, a count in
    /// stats, and a mark so every later open refuses it at once.
    fn mark_bad(&self, file: FileId, reason: String) -> Error {
        bump(&self.stats.decode_errors, 1);
        let err = Error::decode(self.catalog.file_path(file), reason);
        tracing::warn!("{err}");
        self.catalog.remember_size(file, Err(()));
        err
    }

    /// Snapshots a directory listing; [`Filesystem::readdir`] pages through it.
    pub fn opendir(&self, ino: u64) -> Result<u64> {
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let parent_ino = match node {
            Node::Dir(view, d) if d != 0 => Node::Dir(view, self.catalog.dir_parent(d)).ino(),
            _ => ROOT_INO,
        };
        let mut entries = vec![
            DirEntry { ino, kind: Kind::Dir, name: ".".into() },
            DirEntry { ino: parent_ino, kind: Kind::Dir, name: "..".into() },
        ];
        let dir = |node: Node, name: &str| DirEntry { ino: node.ino(), kind: Kind::Dir, name: name.into() };
        match node {
            Node::Root => {
                entries.extend(Form::ALL.map(|form| dir(Node::Dir(View { form }, 0), form.dir_name())));
                entries.push(dir(Node::ControlDir, ".prepfs"));
            }
            Node::ControlDir => {
                for (node, name) in [(Node::StatsFile, "stats.json"), (Node::ConfigFile, "config.yaml")] {
                    entries.push(DirEntry { ino: node.ino(), kind: Kind::File, name: name.into() });
                }
            }
            Node::Dir(view, d) => {
                if d as usize >= self.catalog.dir_count() {
                    return Err(Error::NotFound);
                }
                for sub in self.catalog.subdirs(d) {
                    entries.push(DirEntry {
                        ino: Node::Dir(view, sub).ino(),
                        kind: Kind::Dir,
                        name: self.catalog.dir_name(sub).to_owned(),
                    });
                }
                match view.form {
                    Form::Encoded => {
                        for f in self.catalog.files(d) {
                            entries.push(DirEntry {
                                ino: Node::File(view, f).ino(),
                                kind: Kind::File,
                                name: self.catalog.file_name(f).to_owned(),
                            });
                        }
                    }
                    Form::Decoded | Form::Augmented => {
                        let ext = self.config.output.extension();
                        for &f in self.catalog.images(d) {
                            let mut name = OsString::from(OsStr::from_bytes(self.catalog.stem(f)));
                            name.push(".");
                            name.push(ext);
                            entries.push(DirEntry { ino: Node::File(view, f).ino(), kind: Kind::File, name });
                        }
                    }
                }
            }
            Node::StatsFile | Node::ConfigFile | Node::File(..) => return Err(Error::NotADirectory),
        }
        Ok(self.handles.insert(HandleData::Listing(entries)))
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

    /// Opens a file: for pixel views this decodes and augments (the caller runs it on the
    /// decode pool) and pins the result to the returned handle.
    pub fn open(&self, ino: u64, write: bool) -> Result<Opened> {
        if write {
            return Err(Error::ReadOnly);
        }
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let (data, cache) = match node {
            Node::Root | Node::ControlDir | Node::Dir(..) => return Err(Error::IsADirectory),
            Node::StatsFile => (HandleData::Bytes { bytes: self.stats_json().into_bytes().into(), form: Form::Encoded }, CachePolicy::DirectIo),
            Node::ConfigFile => (HandleData::Bytes { bytes: self.config.to_yaml().into_bytes().into(), form: Form::Encoded }, CachePolicy::DirectIo),
            Node::File(view, file) => {
                if file as usize >= self.catalog.file_count() {
                    return Err(Error::NotFound);
                }
                bump(&self.counters(view.form).opens, 1);
                match view.form {
                    Form::Encoded => {
                        let path = self.catalog.file_path(file);
                        let f = File::open(&path).map_err(|e| self.source_error(&path, e))?;
                        (HandleData::Source { file: f, form: Form::Encoded }, CachePolicy::KeepCache)
                    }
                    Form::Decoded => {
                        let bytes = self.produce(file, view.form)?;
                        (HandleData::Bytes { bytes, form: view.form }, CachePolicy::KeepCache)
                    }
                    Form::Augmented => {
                        let bytes = self.produce(file, view.form)?;
                        (HandleData::Bytes { bytes, form: view.form }, CachePolicy::DirectIo)
                    }
                }
            }
        };
        bump(&self.stats.open_handles, 1);
        Ok(Opened { fh: self.handles.insert(data), cache })
    }

    /// The bytes of one sample's `decoded` or `augmented` file, by the cheapest path that holds
    /// the sample: an augmented hit, else augment from decoded pixels, else decode and augment
    /// encoded bytes (cached or read from the source).
    fn produce(&self, file: FileId, form: Form) -> Result<Arc<[u8]>> {
        if let Some(Err(())) = self.catalog.known_size(file) {
            // Known bad: a region decode may have missed damage outside its rows once, but a
            // sample found undecodable stays refused, consistently, in every view.
            bump(&self.stats.decode_errors, 1);
            let path = self.catalog.file_path(file);
            return Err(Error::decode(path, "undecodable (found earlier; see the first log line)"));
        }
        match form {
            Form::Decoded => {
                let pixels = match self.load(file, Admit::Pixels)? {
                    Loaded::Pixels(p) => p,
                    Loaded::Bytes(b) => Arc::new(self.timed_decode(file, || pipeline::decode_full(&b, self.config.max_pixels))?),
                };
                Ok(output::encode(&self.config.output, &pixels).into())
            }
            _ => {
                if let Some(out) = self.cache.augmented.take(file) {
                    return Ok(out);
                }
                let loaded = self.load(file, Admit::Augmented)?;
                self.augment(file, &loaded)
            }
        }
    }

    /// One fresh augmentation of a loaded sample (a new draw: never a crop served before).
    fn augment(&self, file: FileId, loaded: &Loaded) -> Result<Arc<[u8]>> {
        let epoch = u64::from(self.draws[file as usize].fetch_add(1, Ordering::Relaxed));
        let mut rng = draw_rng(self.config.seed, 0, epoch, u64::from(file));
        let max_pixels = self.config.max_pixels;
        let pixels = match loaded {
            Loaded::Pixels(p) => {
                let plan = plan_sample(&self.config.augment, Size2::new(p.width, p.height), &mut rng);
                self.timed_decode(file, || pipeline::augment_pixels(p, &plan))?
            }
            Loaded::Bytes(bytes) => self.timed_decode(file, || {
                let size = pipeline::probe_size(std::io::Cursor::new(&bytes[..]))?;
                pipeline::check_pixels(size, max_pixels)?;
                let plan: SamplePlan = plan_sample(&self.config.augment, size, &mut rng);
                pipeline::augment(bytes, &plan, max_pixels)
            })?,
        };
        Ok(output::encode(&self.config.output, &pixels).into())
    }

    /// Runs pixel work, timing it into stats and marking the sample bad if it fails.
    fn timed_decode(&self, file: FileId, work: impl FnOnce() -> std::result::Result<Rgb, String>) -> Result<Rgb> {
        let started = Instant::now();
        let pixels = work().map_err(|why| self.mark_bad(file, why))?;
        bump(&self.stats.decodes, 1);
        bump(&self.stats.decode_nanos, started.elapsed().as_nanos() as u64);
        Ok(pixels)
    }

    /// The sample in the cheapest form held, else read from the source (once, however many
    /// requests miss together) and admitted in Seneca's fill order.
    fn load(&self, file: FileId, want: Admit) -> Result<Loaded> {
        if let Some(p) = self.cache.decoded.get(file) {
            return Ok(Loaded::Pixels(p));
        }
        if let Some(b) = self.cache.encoded.get(file) {
            return Ok(Loaded::Bytes(b));
        }
        let path = self.catalog.file_path(file);
        let work = || match self.load_from_disk(file) {
            Some(loaded) => Ok(loaded),
            None => self.load_from_source(file, want),
        };
        self.loads.run(file, work).map_err(|f| match f {
            LoadFailure::Decode(why) => Error::decode(&path, why),
            LoadFailure::Source(kind, why) => Error::source_io(&path, std::io::Error::new(kind, why)),
        })
    }

    /// The disk tier's key for a source file: its relative path, size and mtime.
    fn disk_key(&self, file: FileId, meta: &std::fs::Metadata) -> u64 {
        let path = self.catalog.file_path(file);
        let rel = path.strip_prefix(self.catalog.root()).unwrap_or(&path);
        disk_cache::key_of(rel, meta.len(), meta.modified().unwrap_or(UNIX_EPOCH))
    }

    /// The sample from the disk tier (decoded pixels first, then encoded bytes), promoted into
    /// the memory form while it has room. A damaged entry reads as a miss (the tier drops it).
    fn load_from_disk(&self, file: FileId) -> Option<Loaded> {
        let disk = self.disk.as_ref()?;
        let meta = std::fs::metadata(self.catalog.file_path(file)).ok()?;
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

    /// Reads a sample from the source and admits it in Seneca's fill order: augmented while it
    /// has room (a second, fresh augmentation of the same decode is kept for a later open; the
    /// pixels go to decoded too if it has room), then decoded, then encoded. The encoded bytes or
    /// decoded pixels also spill to the disk tier, whether or not memory took them.
    fn load_from_source(&self, file: FileId, want: Admit) -> std::result::Result<Loaded, LoadFailure> {
        let path = self.catalog.file_path(file);
        // The metadata comes from the open file, so the disk key names the bytes read.
        let read = || -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
            let mut f = File::open(&path)?;
            let meta = f.metadata()?;
            let mut buf = Vec::with_capacity(meta.len() as usize);
            f.read_to_end(&mut buf)?;
            Ok((buf, meta))
        };
        let (bytes, meta) = read().map_err(|e| {
            let kind = e.kind();
            LoadFailure::Source(kind, self.source_error(&path, e).to_string())
        })?;
        let bytes: Arc<[u8]> = bytes.into();
        bump(&self.stats.source_bytes_read, bytes.len() as u64);
        let key = self.disk.as_ref().map(|_| self.disk_key(file, &meta));
        if !self.cache.enabled() {
            self.spill(key, None, &bytes);
            return Ok(Loaded::Bytes(bytes));
        }
        // The header is in hand: no second read of the file for its size.
        let decoded_len = pipeline::probe_size(std::io::Cursor::new(&bytes[..])).map_or(0, |s| s.area() * 3);
        let full_decode = |fs: &Self| {
            fs.timed_decode(file, || pipeline::decode_full(&bytes, fs.config.max_pixels))
                .map(Arc::new)
                .map_err(|e| LoadFailure::Decode(e.to_string()))
        };
        let out_len = output::encoded_len(&self.config.output, self.augmented_size);
        if self.cache.augmented.has_room_for(out_len) && decoded_len > 0 {
            let pixels = full_decode(self)?;
            if let Ok(extra) = self.augment(file, &Loaded::Pixels(Arc::clone(&pixels))) {
                self.cache.augmented.admit(file, extra);
            }
            // The pixels are in hand: keep them too while decoded has room, so the refill
            // worker can make later augmentations without the source.
            self.cache.decoded.admit(file, Arc::clone(&pixels));
            self.spill(key, Some(&pixels), &bytes);
            return Ok(Loaded::Pixels(pixels));
        }
        if want == Admit::Pixels || self.cache.decoded.has_room_for(decoded_len) {
            let pixels = full_decode(self)?;
            self.cache.decoded.admit(file, Arc::clone(&pixels));
            self.spill(key, Some(&pixels), &bytes);
            return Ok(Loaded::Pixels(pixels));
        }
        self.cache.encoded.admit(file, Arc::clone(&bytes));
        self.spill(key, None, &bytes);
        Ok(Loaded::Bytes(bytes))
    }

    /// One unit of background refill: a fresh augmentation into free augmented room, made from
    /// the decoded or encoded cache when they hold the sample, else from the source. Returns
    /// false when there is nothing to do (no room, or every sample already has one).
    pub fn refill_once(&self, cursor: &mut usize) -> bool {
        let out_len = output::encoded_len(&self.config.output, self.augmented_size);
        if !self.cache.augmented.has_room_for(out_len) {
            return false;
        }
        let n = self.catalog.file_count();
        for _ in 0..n {
            let file = (*cursor % n.max(1)) as FileId;
            *cursor = cursor.wrapping_add(1);
            if self.cache.augmented.contains(file) || !self.catalog.is_image(file) {
                continue;
            }
            if matches!(self.catalog.known_size(file), Some(Err(()))) {
                continue;
            }
            let cached = if self.cache.decoded.contains(file) {
                self.cache.decoded.get(file).map(Loaded::Pixels)
            } else if self.cache.encoded.contains(file) {
                self.cache.encoded.get(file).map(Loaded::Bytes)
            } else {
                None
            };
            let refilled = match cached {
                Some(loaded) => self.augment(file, &loaded).map(|out| self.cache.augmented.admit(file, out)),
                // Not cached in any form: a load from the source admits a fresh augmentation
                // itself (augmented comes first in the fill order).
                None => self.load(file, Admit::Augmented).map(|_| true),
            };
            if matches!(refilled, Ok(true)) {
                bump(&self.stats.refills, 1);
            }
            return true;
        }
        false
    }

    fn source_error(&self, path: &std::path::Path, e: std::io::Error) -> Error {
        bump(&self.stats.source_errors, 1);
        let err = Error::source_io(path, e);
        tracing::warn!("{err}");
        err
    }

    /// Reads up to `size` bytes at `offset` of an open file and hands them to `reply`.
    pub fn read<R>(&self, fh: u64, offset: u64, size: u32, reply: impl FnOnce(Result<&[u8]>) -> R) -> R {
        let handle = match self.handles.get(fh) {
            Ok(h) => h,
            Err(e) => return reply(Err(e)),
        };
        match &*handle {
            HandleData::Bytes { bytes, form } => {
                let start = (offset as usize).min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                bump(&self.counters(*form).bytes_served, (end - start) as u64);
                reply(Ok(&bytes[start..end]))
            }
            HandleData::Source { file, form } => {
                let mut buf = vec![0u8; size as usize];
                let mut filled = 0;
                while filled < buf.len() {
                    match file.read_at(&mut buf[filled..], offset + filled as u64) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return reply(Err(Error::source_io("(open source file)", e))),
                    }
                }
                bump(&self.stats.source_bytes_read, filled as u64);
                bump(&self.counters(*form).bytes_served, filled as u64);
                reply(Ok(&buf[..filled]))
            }
            HandleData::Listing(_) => reply(Err(Error::IsADirectory)),
        }
    }

    /// Releases an open file.
    pub fn release(&self, fh: u64) {
        if self.handles.remove(fh).is_some() {
            self.stats.open_handles.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The cache's figures, with the disk tier's under `disk` (null without one).
    fn cache_stats(&self) -> serde_json::Value {
        let mut stats = self.cache.stats();
        if let Some(obj) = stats.as_object_mut() {
            obj.insert("disk".into(), self.disk.as_ref().map_or(serde_json::Value::Null, DiskCache::stats));
        }
        stats
    }

    /// The live figures, as served in `.prepfs/stats.json`.
    pub fn stats_json(&self) -> String {
        let extra = serde_json::json!({
            "source": self.config.source,
            "samples": self.catalog.sample_count(),
            "files": self.catalog.file_count(),
            "directories": self.catalog.dir_count(),
            "stem_collisions": self.catalog.stem_collisions,
            "catalog_bytes_per_sample": self.catalog.bytes_per_sample(),
            "cache": self.cache_stats(),
            "plan": self.plan.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        });
        let mut text = serde_json::to_string_pretty(&self.stats.to_json(extra)).unwrap_or_default();
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
        assert_eq!(fs.stats().decodes.load(Ordering::Relaxed), 1, "decoded more than once");
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
