//! WebDataset tar shards as a source: `prepfs mount '/data/train-{000000..000099}.tar' MNT`, or
//! `source: { shards: "/data/train-*.tar" }`, in a directory or in an object store
//! (`s3://BUCKET/PREFIX/train-*.tar`: the shards read through `source::s3`'s `SourceIo`). The samples (the members sharing a key: an image,
//! and a `.cls` or `.json` label) are served as the ImageFolder tree `<class>/<KEY>.<ext>`, so
//! every view, the cache, the plan and opportunistic sampling work on them as on files.
//!
//! - [`pattern`]: the shard pattern (braces, globs) to the shard files, in one directory.
//! - [`index`]: one shard's index, from its tar headers (the data seeked over).
//! - [`persist`]: the indexes kept between mounts, reused while a shard is unchanged.
//! - [`names`], [`label`]: keys and labels made safe single names; class directories.
//! - [`io`]: the tree as a `SourceIo`, each sample one ranged read of its shard.
//!
//! [`Shards::index`] runs at mount in place of the directory scan and gives the catalog.

mod index;
mod io;
mod label;
mod names;
mod pattern;
mod persist;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use pattern::is_shard_pattern;
pub use pattern::{expand, split_pattern};

use crate::settings::{ObjectStoreConfig, ShardsConfig};
use crate::catalog::Catalog;
use crate::s3::ObjectStore;
use crate::{LocalSource, SourceIo};
use index::{ShardIndex, Stamp};
use io::{Placed, Shard, ShardSource};
use prepfs_base::escape::escaped;
use label::Naming;

/// The window a shard in an object store is indexed in: one ranged GET of up to 8 MiB holds
/// the headers of every member in it (a shard of ~100 KB images: ~80 headers a request, where
/// a GET per header would pay a round trip each); a shard this small is one GET.
const STORE_WINDOW: usize = 8 << 20;

/// What indexing the shards found, for the log and the bench.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardReport {
    pub shards: usize,
    pub samples: usize,
    /// Shards whose kept index was used, and shards indexed from their headers.
    pub reused: usize,
    pub indexed: usize,
    /// Samples dropped for a label that does not parse.
    pub bad_labels: usize,
    /// Shards cut short (truncated, a damaged header): the members before the cut are served.
    pub cut_shards: usize,
    /// Samples not served because another has their class and name (the first is served), or
    /// their key or class makes no file name.
    pub duplicates: usize,
    pub unnamed: usize,
    /// Bytes of the kept index files, all shards together (0 with none kept).
    pub index_file_bytes: u64,
    /// Bytes of memory the served tree takes per sample (beside the catalog's).
    pub memory_bytes_per_sample: f64,
    pub seconds: f64,
}

/// The indexed shards, ready to serve: see the module documentation.
pub struct Shards {
    source: Arc<ShardSource>,
    catalog: Option<Catalog>,
    report: ShardReport,
}

impl Shards {
    /// Indexes the shards `config` names (reusing the kept index of each unchanged shard, and
    /// keeping each new one, in `index_dir` if given), calling `progress` with the samples
    /// found so far; gives up with `Interrupted` once `stop` is set. Fails, naming it, on a
    /// pattern that matches nothing or a shard that cannot be opened, and with `InvalidData`
    /// when no shard gave a sample (each shard not readable as a tar, a compressed one, said).
    /// A shard that cannot be read as a tar (compressed, a damaged first header, a header
    /// larger than a header may be) is said in an error line and not served; the others are.
    pub fn index(config: &ShardsConfig, index_dir: Option<&Path>, progress: impl FnMut(usize), stop: &AtomicBool) -> std::io::Result<Shards> {
        let (dir, names) = pattern::expand(&config.pattern)?;
        let root = dir.canonicalize().map_err(|e| named(&dir, e))?;
        let inner: Arc<dyn SourceIo> = Arc::new(LocalSource::new(&root)?);
        Shards::index_over(inner, &root, names, 0, index_dir, progress, stop)
    }

    /// [`Shards::index`] of shards in an object store (`s3://BUCKET/PREFIX/train-*.tar`: the
    /// pattern's directory is `store`'s prefix): the keys below the prefix are listed (or the
    /// listing kept in `listing_dir` reused, as for any object store), those the pattern names
    /// indexed from their tar headers by ranged GETs, and each sample served by one ranged GET.
    pub fn index_in_store(
        config: &ShardsConfig,
        store: &ObjectStoreConfig,
        index_dir: Option<&Path>,
        listing_dir: Option<&Path>,
        progress: impl FnMut(usize),
        stop: &AtomicBool,
    ) -> std::io::Result<Shards> {
        Shards::index_listed(config, ObjectStore::list(store, listing_dir, |_| {}, stop)?, index_dir, progress, stop)
    }

    /// [`Shards::index_in_store`] of the objects `listed`.
    pub(crate) fn index_listed(config: &ShardsConfig, listed: ObjectStore, index_dir: Option<&Path>, progress: impl FnMut(usize), stop: &AtomicBool) -> std::io::Result<Shards> {
        let (_, name) = pattern::split_pattern(&config.pattern).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let at_root = listed.names_at_root();
        let known: std::collections::HashSet<&str> = at_root.iter().map(String::as_str).collect();
        let names = pattern::expand_in(&config.pattern, name, || Ok(at_root.clone()), |n| known.contains(n))?;
        Shards::index_over(listed.io(), listed.root(), names, STORE_WINDOW, index_dir, progress, stop)
    }

    /// [`Shards::index`] of the shards `names` in `root`, read through `inner` (the local
    /// directory, an object store's objects; an instrumented one in tests), each shard's walk
    /// in reads of `window` bytes (0: a read per header; see `index::index`).
    pub(crate) fn index_over(
        inner: Arc<dyn SourceIo>,
        root: &Path,
        names: Vec<String>,
        window: usize,
        index_dir: Option<&Path>,
        mut progress: impl FnMut(usize),
        stop: &AtomicBool,
    ) -> std::io::Result<Shards> {
        let started = Instant::now();
        let root = root.to_path_buf();
        let mut report = ShardReport { shards: names.len(), ..ShardReport::default() };
        let mut shards = Vec::with_capacity(names.len());
        let mut indexes = Vec::with_capacity(names.len());
        let mut found = 0;
        // The shards that could not be read as a tar, each with why.
        let mut unreadable: Vec<String> = Vec::new();
        for name in names {
            if stop.load(Ordering::Relaxed) {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "indexing stopped"));
            }
            let path = root.join(&name);
            let (index, reused) = index_one(&*inner, &path, window, index_dir)?;
            if reused {
                report.reused += 1;
            } else {
                report.indexed += 1;
            }
            if let Some(dir) = index_dir {
                report.index_file_bytes += std::fs::metadata(persist::file_for(dir, &path)).map_or(0, |m| m.len());
            }
            let p = &index.problems;
            let shown = escaped(&path).to_string();
            let why = p.first.as_deref().unwrap_or("");
            if index.unreadable() {
                tracing::error!(shard = %shown, why, "shard not served: it cannot be read as a tar; the other shards are indexed");
                unreadable.push(format!("{shown}: {why}"));
            } else if p.any() {
                tracing::warn!(shard = %shown, bad_labels = p.bad_labels, extra_images = p.extra_images, cut = p.cut, first = why, "shard has bad members; the rest are served");
            }
            report.bad_labels += p.bad_labels as usize;
            report.cut_shards += usize::from(p.cut);
            found += index.samples.len();
            progress(found);
            shards.push(Shard { path, stamp: index.stamp });
            indexes.push(index);
        }
        if found == 0 {
            // Nothing to serve: a mount of no samples is refused, saying why.
            let why = match unreadable.len() {
                0 => "the shards hold no samples (no image members: `KEY.jpg`, `KEY.png`, ...)".to_string(),
                n => format!("no shard could be indexed ({n} of {} not readable as a tar): {}", report.shards, unreadable.iter().take(3).cloned().collect::<Vec<_>>().join("; ")),
            };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
        }
        let naming = Naming::of(indexes.iter().flat_map(|i| i.samples.iter().map(|s| &s.label)));
        let mut classes: BTreeMap<Vec<u8>, Vec<Placed>> = BTreeMap::new();
        for (shard, index) in indexes.into_iter().enumerate() {
            for s in index.samples {
                let (Some(class), Some(mut name)) = (naming.dir(&s.label), names::safe_name(&s.key)) else {
                    report.unnamed += 1;
                    continue;
                };
                name.push(b'.');
                name.extend_from_slice(&s.ext);
                classes.entry(class).or_default().push((name, shard as u32, s.offset, s.len));
            }
        }
        for placed in classes.values_mut() {
            // Stable: of two samples with one name, the first shard's stays.
            placed.sort_by(|a, b| a.0.cmp(&b.0));
            let before = placed.len();
            placed.dedup_by(|b, a| a.0 == b.0);
            report.duplicates += before - placed.len();
        }
        if report.unnamed + report.duplicates > 0 {
            tracing::warn!(duplicates = report.duplicates, unnamed = report.unnamed, "samples not served: a key served twice (the first shard's is served) or a key or class that makes no file name");
        }
        let listing: Vec<(OsString, Vec<OsString>)> = classes
            .iter()
            .map(|(class, placed)| (OsString::from_vec(class.clone()), placed.iter().map(|p| OsString::from_vec(p.0.clone())).collect()))
            .collect();
        let catalog = Catalog::of_classes(&root, listing);
        let source = ShardSource::new(inner, &root, shards, classes.into_iter().collect());
        report.samples = catalog.sample_count();
        report.memory_bytes_per_sample = source.bytes_per_sample();
        report.seconds = started.elapsed().as_secs_f64();
        tracing::info!(shards = report.shards, samples = report.samples, reused = report.reused, indexed = report.indexed, secs = report.seconds, "indexed the shards");
        Ok(Shards { source: Arc::new(source), catalog: Some(catalog), report })
    }

    /// The catalog of the served tree (taken once, to build the filesystem).
    pub fn take_catalog(&mut self) -> Option<Catalog> {
        self.catalog.take()
    }

    /// What indexing found.
    pub fn report(&self) -> &ShardReport {
        &self.report
    }

    /// The shards as the filesystem reads its source.
    pub fn io(&self) -> Arc<dyn SourceIo> {
        Arc::clone(&self.source) as Arc<dyn SourceIo>
    }
}

/// What the header walk found in a shard held in memory ([`walk_in_memory`]): for the fuzz
/// target over shard headers (`fuzz/fuzz_targets/shard_headers.rs`), not for mounts.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderWalk {
    pub samples: Vec<WalkedSample>,
    /// Whether the walk ended early, and the first problem in words.
    pub cut: bool,
    pub first_problem: Option<String>,
    /// The largest single read the walk made, and the bytes of all its reads.
    pub largest_read: u64,
    pub bytes_read: u64,
}

/// A sample [`walk_in_memory`] found: its key, extension, offset and length in the shard, its
/// label (as text).
#[doc(hidden)]
pub(crate) type WalkedSample = (Vec<u8>, Vec<u8>, u64, u64, String);

/// The most bytes an extension header (`L`, `K`, `x`, `g`) of a shard may hold.
#[doc(hidden)]
pub const MAX_HEADER_BYTES: u64 = index::MAX_EXTENSION_BYTES;

/// Indexes `bytes` as a shard `len` bytes long (zeros after `bytes`, as a sparse file reads),
/// read in windows of `window` bytes (0: a read per header): see [`HeaderWalk`].
#[doc(hidden)]
pub fn walk_in_memory(bytes: &[u8], len: u64, window: usize) -> HeaderWalk {
    let file = InMemory { meta: in_memory_meta(len), bytes, reads: std::sync::Mutex::new((0, 0)) };
    let index = index::index(&file, window);
    let (largest_read, bytes_read) = *file.reads.lock().unwrap_or_else(|e| e.into_inner());
    HeaderWalk {
        samples: index.samples.into_iter().map(|s| (s.key, s.ext, s.offset, s.len, format!("{:?}", s.label))).collect(),
        cut: index.problems.cut,
        first_problem: index.problems.first,
        largest_read,
        bytes_read,
    }
}

fn in_memory_meta(len: u64) -> crate::FileMeta {
    crate::FileMeta::of_fields(crate::StatFields { dev: 0, ino: 1, len, mtime: (0, 0), ctime: (0, 0), uid: 0, gid: 0, mode: libc::S_IFREG | 0o644 })
}

/// A shard's bytes in memory, as a file of `meta.len()` bytes (zeros past `bytes`), counting
/// the largest read and all bytes read.
struct InMemory<'a> {
    meta: crate::FileMeta,
    bytes: &'a [u8],
    reads: std::sync::Mutex<(u64, u64)>,
}

impl crate::SourceFile for InMemory<'_> {
    fn meta(&self) -> &crate::FileMeta {
        &self.meta
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        {
            let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
            *reads = (reads.0.max(buf.len() as u64), reads.1 + buf.len() as u64);
        }
        let n = (buf.len() as u64).min(self.meta.len().saturating_sub(offset)) as usize;
        let from = usize::try_from(offset).unwrap_or(usize::MAX).min(self.bytes.len());
        let held = &self.bytes[from..(from + n).min(self.bytes.len())];
        buf[..held.len()].copy_from_slice(held);
        buf[held.len()..n].fill(0);
        Ok(n)
    }
}

/// An error that names the path it is about (escaped).
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("shard {}: {e}", escaped(path)))
}

/// The index of the shard at `path`: the one kept in `index_dir` if it is of this version of
/// the shard, else made from its headers (and kept). Whether the kept one was used.
fn index_one(inner: &dyn SourceIo, path: &Path, window: usize, index_dir: Option<&Path>) -> std::io::Result<(ShardIndex, bool)> {
    let meta = inner.metadata(path).map_err(|e| named(path, e))?;
    if let Some(kept) = index_dir.and_then(|dir| persist::load(dir, path, Stamp::of(&meta))) {
        return Ok((kept, true));
    }
    let file = inner.open(path).map_err(|e| named(path, e))?;
    let index = index::index(&*file, window);
    if let Some(dir) = index_dir {
        if let Err(e) = persist::save(dir, path, &index) {
            tracing::warn!(dir = %escaped(dir), "cannot keep the shard index ({e}); the next mount indexes the shard again");
        }
    }
    Ok((index, false))
}

#[cfg(test)]
mod tests;
