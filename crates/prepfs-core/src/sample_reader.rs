//! A sample's source file as the serving path sees it: resolved once per open (its path and the
//! version `stat` found), read whole, in part or by its header through the bounded [`Source`],
//! its pixel size probed once, and the marks of samples refused as undecodable.
//!
//! [`SampleReader::resolve`] is the one place an open turns a catalog id into a path and a
//! version; every later step of that open takes the [`Sample`] it made. A version different from
//! the one seen before is reported to the owner of what was made of the old one (the tiers drop
//! it) through the hook given at construction: this module knows nothing of the cache.
//!
//! Failures are the core's [`Error`]: the source's `io::Error` as it came (counted, and logged at
//! most a line a second), or a [`SampleError`] for a file that is no sample prepfs will read,
//! which is marked bad like an undecodable one.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, SampleError};
use prepfs_pixels::pipeline;
use prepfs_pixels::rgb::Size2;
use prepfs_source::catalog::{Catalog, FileId};
use prepfs_source::{FileMeta, Freshness, Observed, Sample, Source, SourceFile};
use crate::stats::{bump, Stats};
use prepfs_base::sync::{LockExt, Mutex};


/// What a changed source file makes its owner drop (the cached forms of the old version).
type OnChange = Box<dyn Fn(FileId) + Send + Sync>;

/// The source as samples: see the module documentation.
pub(crate) struct SampleReader {
    catalog: Arc<Catalog>,
    source: Source,
    /// Each source file's version as last seen.
    fresh: Freshness,
    stats: Arc<Stats>,
    on_change: OnChange,
    /// The samples found bad and why, in the order found (the first [`BAD_LISTED`]), for
    /// `stats.json`; a file that changes leaves the list.
    bad: Mutex<Vec<(FileId, String)>>,
}

/// Bad samples `stats.json` lists by name (all are counted).
const BAD_LISTED: usize = 1000;
/// Bad samples logged on a line each; past these, one line a second at most (`log::allow`).
const BAD_LOGGED_EACH: u64 = 100;

impl SampleReader {
    pub(crate) fn new(catalog: Arc<Catalog>, source: Source, stats: Arc<Stats>, on_change: OnChange) -> SampleReader {
        SampleReader { fresh: Freshness::new(catalog.file_count()), catalog, source, stats, on_change, bad: Mutex::new(Vec::new()) }
    }

    /// Stats `id` in the source and checks its version against the one last seen: a changed
    /// file's cached forms and probed size are dropped here, before anything is served.
    pub(crate) fn resolve(&self, id: FileId) -> Result<(Sample, Observed)> {
        let path = self.catalog.file_path(id);
        let meta = match self.source.metadata(&path) {
            Ok(meta) => meta,
            Err(e) => return Err(self.failure(id, &path, e)),
        };
        let observed = self.observe(id, &meta);
        Ok((Sample { id, path, meta }, observed))
    }

    /// `statvfs` of the source's file system (`root`: the source's root, named in an error).
    pub(crate) fn space(&self, root: &Path) -> Result<prepfs_source::Space> {
        self.source.space().map_err(|e| Error::source_io(root, e))
    }

    /// `stat` of a source path (a directory's owner and mode, say).
    pub(crate) fn metadata(&self, path: &Path) -> Result<FileMeta> {
        self.source.metadata(path).map_err(|e| Error::source_io(path, e))
    }

    /// Whether `meta` is the newest version of `id` seen (an older one is served, never kept).
    pub(crate) fn is_current(&self, id: FileId, meta: &FileMeta) -> bool {
        self.fresh.is_current(id, &meta.identity)
    }

    /// Records the version of `id` just seen; a changed one drops what was made of the old.
    fn observe(&self, id: FileId, meta: &FileMeta) -> Observed {
        let observed = self.fresh.observe(id, &meta.identity);
        if observed == Observed::Changed {
            (self.on_change)(id);
            self.catalog.forget_size(id);
            self.bad.lock_or_recover().retain(|(f, _)| *f != id);
            bump(&self.stats.source_changes, 1);
            tracing::info!(file = %prepfs_base::escape::escaped(&self.catalog.file_path(id)), "source file changed; its cached forms are dropped");
        }
        observed
    }

    // ---- reads --------------------------------------------------------------------------------

    /// Opens a sample's file for reading through (the top-level `encoded` view), and says how
    /// the version opened compares with the one seen before.
    pub(crate) fn open(&self, sample: &Sample) -> Result<(Arc<dyn SourceFile>, Observed)> {
        let opened = self.source.open(&sample.path).map_err(|e| self.failure(sample.id, &sample.path, e))?;
        let observed = self.observe(sample.id, opened.meta());
        Ok((opened, observed))
    }

    /// Reads up to `size` bytes at `offset` of an open source file, within the read limit (what
    /// was read is charged, not what was asked for: a 1 MiB read of a 13 KB file costs 13 KB).
    pub(crate) fn read_at(&self, f: &Arc<dyn SourceFile>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let buf = self.source.read_at(f, offset, size).map_err(|e| {
            bump(&self.stats.source_errors, 1);
            Error::source_io("(open source file)", e)
        })?;
        bump(&self.stats.source_bytes_read, buf.len() as u64);
        Ok(buf)
    }

    /// Reads a sample's whole file (bounded, within the read limit; no second `stat`: the size is
    /// the resolved one), with the metadata of the version read (which may be newer than the one
    /// resolved).
    pub(crate) fn read(&self, sample: &Sample) -> Result<(Arc<[u8]>, FileMeta)> {
        let started = Instant::now();
        let (buf, meta, cost) = self.source.read_sized(&sample.path, sample.meta.len()).map_err(|e| self.failure(sample.id, &sample.path, e))?;
        self.observe(sample.id, &meta);
        bump(&self.stats.source_bytes_read, buf.len() as u64);
        bump(&self.stats.source_reads, 1);
        bump(&self.stats.source_read_nanos, started.elapsed().as_nanos() as u64);
        bump(&self.stats.source_read_cpu_nanos, cost.cpu_nanos);
        bump(&self.stats.source_read_blocked_nanos, cost.blocked_nanos);
        Ok((buf, meta))
    }

    /// Reads `id`'s whole file outside serving (the mount-time calibration): bounded and within
    /// the read limit, but neither counted as served reads nor taken as a version seen.
    pub(crate) fn read_uncounted(&self, id: FileId) -> Option<Vec<u8>> {
        self.source.read_whole(&self.catalog.file_path(id)).ok().map(|(bytes, _)| bytes)
    }

    /// The error a failed source access gives. A file that is no sample prepfs will read (over
    /// `max_file_size`, not a regular file) is marked bad like an undecodable one: refused in
    /// every view, logged once, until the file changes. Other failures are counted and logged
    /// (at most a line a second, however many requests fail).
    fn failure(&self, id: FileId, path: &Path, e: std::io::Error) -> Error {
        use std::io::ErrorKind;
        if matches!(e.kind(), ErrorKind::FileTooLarge | ErrorKind::InvalidInput) {
            return self.mark_bad(id, path, SampleError::NotASample(Arc::new(e)));
        }
        bump(&self.stats.source_errors, 1);
        let err = Error::source_io(path, e);
        prepfs_base::warn_limited!("source", "{err}");
        err
    }

    // ---- sizes and bad samples ----------------------------------------------------------------

    /// A sample's pixel size from its header, probed once and remembered.
    pub(crate) fn size(&self, id: FileId) -> Result<Size2> {
        if let Some(known) = self.catalog.known_size(id) {
            return known.map_err(|()| Error::decode(self.catalog.file_path(id), SampleError::UnreadableHeader));
        }
        let path = self.catalog.file_path(id);
        match self.probe(id, &path) {
            Ok(size) => {
                self.catalog.remember_size(id, Ok(size));
                Ok(size)
            }
            Err(Error::Decode { reason, .. }) if !self.known_bad(id) => Err(self.mark_bad(id, &path, reason)),
            Err(e) => Err(e),
        }
    }

    /// Probes a sample's size from the first bytes of its file (the whole file, bounded, when
    /// its header lies further in).
    fn probe(&self, id: FileId, path: &Path) -> Result<Size2> {
        const HEAD: usize = 64 * 1024;
        let (head, meta) = self.source.read_head(path, HEAD).map_err(|e| self.failure(id, path, e))?;
        self.observe(id, &meta);
        match pipeline::probe_size(std::io::Cursor::new(&head[..])) {
            Ok(size) => Ok(size),
            Err(_) if (head.len() as u64) < meta.len() => {
                let (all, _) = self.read(&Sample { id, path: path.to_path_buf(), meta })?;
                pipeline::probe_size(std::io::Cursor::new(&all[..])).map_err(|why| Error::decode(path, why))
            }
            Err(why) => Err(Error::decode(path, why)),
        }
    }

    /// Whether `id` was found undecodable earlier.
    pub(crate) fn known_bad(&self, id: FileId) -> bool {
        matches!(self.catalog.known_size(id), Some(Err(())))
    }

    /// Records an undecodable sample: one log line naming the file and the reason, a count in
    /// stats, and a mark so every later open refuses it at once.
    pub(crate) fn mark_bad(&self, id: FileId, path: &Path, reason: SampleError) -> Error {
        bump(&self.stats.decode_errors, 1);
        let why = reason.to_string();
        let err = Error::decode(path, reason);
        // Once per file (and version): later opens are refused without a line. A set of many
        // bad files (the refill over a tree of empty ones logged 451k lines in minutes) gets a
        // line each for the first ones, then at most one a second saying how many it held back.
        if self.stats.decode_errors.load(std::sync::atomic::Ordering::Relaxed) <= BAD_LOGGED_EACH {
            tracing::warn!("{err}");
        } else {
            prepfs_base::warn_limited!("bad-sample", "{err}");
        }
        self.catalog.remember_size(id, Err(()));
        let mut bad = self.bad.lock_or_recover();
        if bad.len() < BAD_LISTED && !bad.iter().any(|(f, _)| *f == id) {
            bad.push((id, why));
        }
        err
    }

    /// The bad samples found so far, with their reasons (relative paths), for `stats.json`.
    pub(crate) fn bad_samples_json(&self) -> serde_json::Value {
        let bad = self.bad.lock_or_recover().clone();
        let listed: Vec<_> = bad
            .iter()
            .map(|(id, why)| {
                let path = self.catalog.file_path(*id);
                let rel = path.strip_prefix(self.catalog.root()).unwrap_or(&path).to_string_lossy().into_owned();
                serde_json::json!({"path": rel, "reason": why})
            })
            .collect();
        serde_json::json!({"found": listed.len(), "listed_at_most": BAD_LISTED, "samples": listed})
    }

    /// The refusal of a sample found undecodable earlier: a region decode may have missed damage
    /// outside its rows once, but a bad sample stays refused, consistently, in every view.
    pub(crate) fn refuse_known_bad(&self, sample: &Sample) -> Result<()> {
        if self.known_bad(sample.id) {
            bump(&self.stats.decode_errors, 1);
            return Err(Error::decode(&sample.path, SampleError::FoundEarlier));
        }
        Ok(())
    }

    // ---- the source's bounds and end ----------------------------------------------------------

    /// The read limit, in bytes a second, if one is set.
    pub(crate) fn read_limit(&self) -> Option<u64> {
        self.source.read_limit().map(|l| l.bytes_per_s())
    }

    /// Makes throttled source reads give up at once.
    pub(crate) fn interrupt(&self) {
        self.source.interrupt();
    }

    /// Stops the source's I/O: throttled reads return, the I/O threads are joined.
    pub(crate) fn shutdown(&self) {
        self.source.shutdown(Duration::from_secs(2));
    }
}
