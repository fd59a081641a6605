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
use std::io::BufReader;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use crate::augment::{draw_rng, plan_sample, Size2};
use crate::catalog::{Catalog, DirId, Entry, FileId};
use crate::config::Config;
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
}

impl Filesystem {
    /// A filesystem over a scanned catalog.
    pub fn new(config: Config, catalog: Catalog) -> Filesystem {
        let augmented_size = config.augmented_size().unwrap_or(Size2::new(224, 224));
        let draws = (0..catalog.file_count()).map(|_| AtomicU32::new(0)).collect();
        Filesystem {
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

    /// Reads the source, decodes, augments and encodes one sample. The cache (a later issue)
    /// slots in here: look up the cheapest form held before reading the source.
    fn produce(&self, file: FileId, form: Form) -> Result<Arc<[u8]>> {
        let path = self.catalog.file_path(file);
        if let Some(Err(())) = self.catalog.known_size(file) {
            // Known bad: a region decode may have missed damage outside its rows once, but a
            // sample found undecodable stays refused, consistently, in every view.
            bump(&self.stats.decode_errors, 1);
            return Err(Error::decode(&path, "undecodable (found earlier; see the first log line)"));
        }
        let bytes = std::fs::read(&path).map_err(|e| self.source_error(&path, e))?;
        bump(&self.stats.source_bytes_read, bytes.len() as u64);
        let started = Instant::now();
        let max_pixels = self.config.max_pixels;
        let pixels = match form {
            Form::Decoded => pipeline::decode_full(&bytes, max_pixels),
            _ => {
                let epoch = self.draws[file as usize].fetch_add(1, Ordering::Relaxed);
                pipeline::probe_size(std::io::Cursor::new(&bytes)).and_then(|size| {
                    pipeline::check_pixels(size, max_pixels)?;
                    let mut rng = draw_rng(self.config.seed, 0, u64::from(epoch), u64::from(file));
                    let plan = plan_sample(&self.config.augment, size, &mut rng);
                    pipeline::augment(&bytes, &plan, max_pixels)
                })
            }
        };
        let pixels = pixels.map_err(|why| self.mark_bad(file, why))?;
        bump(&self.stats.decodes, 1);
        bump(&self.stats.decode_nanos, started.elapsed().as_nanos() as u64);
        if form == Form::Decoded {
            self.catalog.remember_size(file, Ok(Size2::new(pixels.width, pixels.height)));
        }
        Ok(output::encode(&self.config.output, &pixels).into())
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

    /// The live figures, as served in `.prepfs/stats.json`.
    pub fn stats_json(&self) -> String {
        let extra = serde_json::json!({
            "source": self.config.source,
            "samples": self.catalog.sample_count(),
            "files": self.catalog.file_count(),
            "directories": self.catalog.dir_count(),
            "stem_collisions": self.catalog.stem_collisions,
            "catalog_bytes_per_sample": self.catalog.bytes_per_sample(),
        });
        let mut text = serde_json::to_string_pretty(&self.stats.to_json(extra)).unwrap_or_default();
        text.push('\n');
        text
    }
}

