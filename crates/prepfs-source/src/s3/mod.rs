//! An S3-compatible object store as the source: `prepfs mount s3://BUCKET/PREFIX MNT`, or
//! `source: { url: s3://BUCKET/PREFIX, endpoint: http://HOST:PORT, region: REGION }`. The keys
//! under `PREFIX/` are served as the tree a directory holding them would be (`PREFIX/<class>/
//! <file>` is `<class>/<file>`, laid out as the local scan lays out a directory), so every view,
//! the cache, the plan and opportunistic sampling work on them as on files.
//!
//! - [`client`]: the `object_store` client (credentials, endpoint, retries) and the one tokio
//!   runtime the source owns; everything else blocks on it.
//! - [`io`]: the objects as a `SourceIo`: metadata from the listing, each read one ranged GET
//!   of the version listed (an object changed since is a replaced file).
//! - [`kept`]: the listing kept between mounts, and when a kept one is used.
//!
//! [`ObjectStore::list`] runs at mount in place of the directory scan and gives the catalog.

mod client;
mod io;
mod kept;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;

use crate::settings::ObjectStoreConfig;
use crate::catalog::Catalog;
use crate::SourceIo;
use client::Client;
use io::{Object, S3Source};

/// What listing the store found, for the log and the bench.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListingReport {
    /// Keys listed under the prefix, and of them the files served.
    pub keys: usize,
    pub files: usize,
    /// Keys not served: a name no file can have (an empty, `.` or `..` part, a control
    /// character, a leading `/`, a part longer than 255 bytes: each said in a line, escaped), or
    /// a key where another key makes a directory (`a` beside `a/b`; a directory marker `a/`
    /// too, which `object_store` reads as `a`).
    pub skipped: usize,
    pub samples: usize,
    pub bytes: u64,
    pub seconds: f64,
    /// Whether a kept listing was served (no listing request made), and how old it was then
    /// (seconds); else 0.
    pub reused: bool,
    pub age_s: f64,
    /// Bytes of the kept listing file (read or written; 0 with none).
    pub kept_bytes: u64,
}

/// The listed objects, ready to serve: see the module documentation.
pub struct ObjectStore {
    source: Arc<S3Source>,
    catalog: Option<Catalog>,
    report: ListingReport,
}

/// The longest name a served file or directory may have (as `NAME_MAX`).
const NAME_MAX: usize = 255;

impl ObjectStore {
    /// The objects under `config`'s prefix: from the listing kept in `listing_dir` where the
    /// rule of [`kept`] lets it be used, else listed from the store (paginated, as the store
    /// pages them, calling `progress` with the keys found so far) and kept there. Gives up with
    /// `Interrupted` once `stop` is set. Fails, saying why, when the store cannot be listed
    /// (after its retries).
    pub fn list(config: &ObjectStoreConfig, listing_dir: Option<&Path>, progress: impl FnMut(usize), stop: &AtomicBool) -> std::io::Result<ObjectStore> {
        ObjectStore::list_through(Client::new(config)?, config, listing_dir, progress, stop)
    }

    /// [`ObjectStore::list`] through `client`.
    pub(crate) fn list_through(client: Client, config: &ObjectStoreConfig, listing_dir: Option<&Path>, progress: impl FnMut(usize), stop: &AtomicBool) -> std::io::Result<ObjectStore> {
        let started = Instant::now();
        let strip = if config.prefix.is_empty() { String::new() } else { format!("{}/", config.prefix) };
        let store = kept::store_of(config);
        let max_age = Duration::from_secs_f64(config.listing_max_age_s.max(0.0));
        let dir = listing_dir.filter(|_| !max_age.is_zero());
        let found = match dir.map(|d| (d, kept::load(d, &store, &strip, max_age))) {
            Some((d, Ok(listing))) => {
                let bytes = std::fs::metadata(kept::file_for(d, &store)).map_or(0, |m| m.len());
                Some((listing, bytes))
            }
            Some((d, Err(why))) => {
                match why {
                    kept::NotUsed::Missing => {}
                    kept::NotUsed::Stale { age_s } => tracing::info!(age_s, max_age_s = max_age.as_secs_f64(), "the kept listing is too old (or from the future); listing the store again"),
                    kept::NotUsed::Damaged(why) => tracing::warn!(file = %kept::file_for(d, &store).display(), "the kept listing is not used ({why}); listing the store again"),
                }
                None
            }
            None => None,
        };
        let (listing, reused, kept_bytes) = match found {
            Some((listing, bytes)) => (listing, true, bytes),
            None => {
                let listing = list_store(&client, config, &strip, progress, stop)?;
                let bytes = match dir.map(|d| kept::save(d, &store, &listing)) {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(e)) => {
                        tracing::warn!("cannot keep the object store's listing ({e}); the next mount lists the store again");
                        0
                    }
                    None => 0,
                };
                (listing, false, bytes)
            }
        };
        let age_s = if reused { SystemTime::now().duration_since(listing.listed_at).map_or(0.0, |d| d.as_secs_f64()) } else { 0.0 };
        let mut report = ListingReport { keys: listing.keys, skipped: listing.skipped, reused, age_s, kept_bytes, ..ListingReport::default() };
        let (objects, listed_at) = (listing.objects, listing.listed_at);
        let (objects, catalog) = served(objects, &config.url, &mut report);
        report.seconds = started.elapsed().as_secs_f64();
        tracing::info!(url = %config.url, keys = report.keys, files = report.files, skipped = report.skipped, samples = report.samples, reused, age_s, secs = report.seconds, "listed the object store");
        let kept_file = dir.map(|d| kept::file_for(d, &store));
        let source = S3Source::new(client, &PathBuf::from(&config.url), &config.url, &strip, objects, listed_at, kept_file);
        Ok(ObjectStore { source: Arc::new(source), catalog: Some(catalog), report })
    }

    /// The catalog of the served tree (taken once, to build the filesystem).
    pub fn take_catalog(&mut self) -> Option<Catalog> {
        self.catalog.take()
    }

    /// What listing found.
    pub fn report(&self) -> &ListingReport {
        &self.report
    }

    /// The objects as the filesystem reads its source.
    pub fn io(&self) -> Arc<dyn SourceIo> {
        Arc::clone(&self.source) as Arc<dyn SourceIo>
    }

    /// The names of the objects directly below the prefix (a shard pattern's candidates).
    pub(crate) fn names_at_root(&self) -> Vec<String> {
        self.source.names_at_root()
    }

    /// The root the catalog's paths begin with (the URL, as a path).
    pub fn root(&self) -> &Path {
        self.source.root()
    }
}

/// Lists the keys under `config`'s prefix from the store (`strip`: the prefix and its `/`):
/// those a file can be named by, and the counts of keys listed and skipped.
fn list_store(client: &Client, config: &ObjectStoreConfig, strip: &str, mut progress: impl FnMut(usize), stop: &AtomicBool) -> std::io::Result<kept::KeptListing> {
    let listed_at = SystemTime::now();
    let prefix = (!config.prefix.is_empty()).then(|| object_store::path::Path::from(config.prefix.as_str()));
    let (mut keys, mut skipped, mut objects) = (0, 0, Vec::new());
    let mut said: Vec<String> = Vec::new();
    let outcome: std::io::Result<()> = client.block_on(async {
        let mut stream = object_store::ObjectStore::list(&client.store, prefix.as_ref());
        while let Some(item) = stream.next().await {
            if stop.load(Ordering::Relaxed) {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "listing stopped"));
            }
            let meta = item.map_err(|e| io::store_error(client, &config.url, "", &e))?;
            keys += 1;
            if keys % 1000 == 0 {
                progress(keys);
            }
            match meta.location.as_ref().strip_prefix(strip).filter(|rel| servable(rel)) {
                Some(rel) => objects.push(Object::of(rel, &meta)),
                None => {
                    skipped += 1;
                    if said.len() < SKIPPED_SAID {
                        said.push(meta.location.as_ref().to_string());
                    }
                }
            }
        }
        Ok(())
    })?;
    outcome?;
    // The keys taken out of the pages before `object_store` saw them (it refuses them).
    let unnamed = client.take_unnamed();
    keys += unnamed.count;
    skipped += unnamed.count;
    said.extend(unnamed.first);
    say_skipped(&config.url, skipped, &said);
    progress(keys);
    Ok(kept::KeptListing { listed_at, keys, skipped, objects })
}

/// How many skipped keys are said by name, each once; the rest are counted.
const SKIPPED_SAID: usize = 20;

/// Says the keys skipped (`said` of the `skipped`, escaped) in a line each, then the rest's count.
fn say_skipped(url: &str, skipped: usize, said: &[String]) {
    for key in said.iter().take(SKIPPED_SAID) {
        tracing::warn!(url, key = %prepfs_base::escape::escaped(key.as_str()), "object store key skipped: it cannot be a path name (an empty, `.` or `..` part, a control character, a leading `/`, or a part over 255 bytes)");
    }
    if skipped > SKIPPED_SAID.min(said.len()) {
        tracing::warn!(url, skipped, "object store keys skipped: {} more not said by name", skipped - SKIPPED_SAID.min(said.len()));
    }
}

/// The objects served of those `listed` (a key where another key makes a directory, `a` beside
/// `a/b`, is not: a directory cannot be a file too), sorted by name, and their catalog (rooted
/// at `url`); `report` counts them.
fn served(mut listed: Vec<Object>, url: &str, report: &mut ListingReport) -> (Vec<Object>, Catalog) {
    listed.sort_by(|a, b| a.rel.cmp(&b.rel));
    let dirs: std::collections::HashSet<&str> = listed.iter().flat_map(|o| parents(&o.rel)).collect();
    let hidden: std::collections::HashSet<usize> = listed.iter().enumerate().filter(|(_, o)| dirs.contains(o.rel.as_ref())).map(|(i, _)| i).collect();
    if !hidden.is_empty() {
        tracing::warn!(keys = hidden.len(), "keys that are also a prefix of other keys are not served (a directory cannot be a file too)");
    }
    report.skipped += hidden.len();
    let objects: Vec<Object> = listed.into_iter().enumerate().filter(|(i, _)| !hidden.contains(i)).map(|(_, o)| o).collect();
    let paths: Vec<Vec<&[u8]>> = objects.iter().map(|o| o.rel.split('/').map(str::as_bytes).collect()).collect();
    let catalog = Catalog::of_paths(Path::new(url), &paths);
    drop(paths);
    report.files = objects.len();
    report.bytes = objects.iter().map(|o| o.size).sum();
    report.samples = catalog.sample_count();
    (objects, catalog)
}

/// Whether a key below the prefix names a file the tree can hold: no empty name (`a//b`), no
/// `.` or `..`, no control character, no name longer than [`NAME_MAX`] (the listing's pages
/// are cleaned of most of these before they are parsed: `client::key_is_name`).
fn servable(rel: &str) -> bool {
    !rel.is_empty() && rel.split('/').all(|n| !n.is_empty() && n != "." && n != ".." && n.len() <= NAME_MAX && !n.chars().any(char::is_control))
}

/// The directories a key lies in (`a/b/c` is in `a` and `a/b`).
fn parents(rel: &str) -> impl Iterator<Item = &str> {
    rel.match_indices('/').map(move |(i, _)| &rel[..i])
}

#[cfg(test)]
pub mod tests;
