//! The smaller sections of the config, each as written (`Raw*`), validated, and its defaults:
//! `stop:` (the drain), `loader:` (the socket), `bad_samples:`, `jobs:`, `source:` (its path and
//! read bounds) and the access keys (`allow_other`, `uid`/`gid`, `max_open_bytes`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_norway::Value;

use super::error::{ConfigError, Quantity, ValueError};
use super::values::{bytes_of, duration_or_zero, duration_value, positive_size_value};

/// `stop:` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStop {
    pub(super) drain: Option<Value>,
    pub(super) drain_max: Option<Value>,
}


/// `stop:`: the drain of a stopping mount (`crate::drain`), from the YAML; the defaults where
/// it says nothing.
pub(super) fn stop_config(text: &str, raw: Option<RawStop>) -> Result<crate::drain::DrainConfig, ConfigError> {
    let mut stop = crate::drain::DrainConfig::default();
    let raw = raw.unwrap_or_default();
    if let Some(drain) = raw.drain {
        stop.quiet = std::time::Duration::from_secs_f64(duration_or_zero(text, "stop.drain", &drain)?);
    }
    if let Some(max) = raw.drain_max {
        stop.max = std::time::Duration::from_secs_f64(duration_value(text, "stop.drain_max", &max)?);
    }
    Ok(stop)
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLoader {
    pub(super) enabled: Option<bool>,
    pub(super) socket: Option<PathBuf>,
    pub(super) ring_memory: Option<Value>,
    pub(super) ring_memory_per_user: Option<Value>,
}

/// The loader socket (`prepfs.Loader`, `crate::loader`): batches of a job's samples over a
/// Unix socket and shared memory, for frameworks that do not read files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoaderConfig {
    /// Whether the mount opens the socket.
    pub enabled: bool,
    /// Where; `None`: `/run/prepfs/<mount>.sock`, else under the temporary directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// The shared memory every connection's ring may take together, in bytes.
    pub(crate) ring_memory: u64,
    /// What the rings of one user other than root and the mount's owner may take; as much again
    /// of `ring_memory` is kept for root and the owner.
    pub(crate) ring_memory_per_user: u64,
}

/// Default [`LoaderConfig::ring_memory`].
pub const DEFAULT_RING_MEMORY: u64 = 2 << 30;
/// Default [`LoaderConfig::ring_memory_per_user`].
pub const DEFAULT_RING_MEMORY_PER_USER: u64 = 512 << 20;

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig { enabled: true, socket: None, ring_memory: DEFAULT_RING_MEMORY, ring_memory_per_user: DEFAULT_RING_MEMORY_PER_USER }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBadSamples {
    pub(super) hide: Option<HideBad>,
    pub(super) validate: Option<Validate>,
}

/// Which views hide the samples known bad from their listings and never hand one out
/// (`bad_samples.hide`, `--hide-bad-samples`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HideBad {
    /// Job views (`jobs/<name>/...`) only: the default. A job's open of a bad sample is served
    /// another sample of the directory instead, so an epoch never dies on `EIO`.
    #[default]
    Jobs,
    /// Job views and the top-level views (whose opens never substitute: a sample first found
    /// bad at its open still gets `EIO`, and is hidden from the next listing).
    All,
    /// No view: a bad sample stays listed and gets `EIO` at every open.
    None,
}

impl std::str::FromStr for HideBad {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jobs" => Ok(HideBad::Jobs),
            "all" => Ok(HideBad::All),
            "none" => Ok(HideBad::None),
            _ => Err(format!("`{s}`: one of jobs, all, none")),
        }
    }
}

/// When samples are checked for being decodable (`bad_samples.validate`, `--validate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Validate {
    /// At their first open (the default): found bad, remembered until the file changes.
    #[default]
    FirstTouch,
    /// At mount, each sample's header (size and `max_pixels`): cheap, finds unreadable and
    /// oversized ones; damage further in is still found at first touch.
    Headers,
    /// At mount, each sample read and fully decoded (its pixels and bytes kept while the
    /// cache has room): every undecodable sample is known before the first epoch.
    Scan,
}

impl std::str::FromStr for Validate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first-touch" => Ok(Validate::FirstTouch),
            "headers" => Ok(Validate::Headers),
            "scan" => Ok(Validate::Scan),
            _ => Err(format!("`{s}`: one of first-touch, headers, scan")),
        }
    }
}

/// What the mount does with samples that cannot be decoded (`bad_samples`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct BadSamplesConfig {
    pub hide: HideBad,
    pub validate: Validate,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJobs {
    pub(super) max: Option<usize>,
    pub(super) idle_timeout: Option<Value>,
    pub(super) prefetch_window: Option<usize>,
    pub(super) ods: Option<bool>,
    pub(super) per_user: Option<usize>,
    pub(super) shared: Option<bool>,
}

/// Concurrent jobs under `jobs/` (opportunistic sampling).
#[derive(Debug, Clone, PartialEq)]
pub struct JobsConfig {
    /// Jobs active at once (at most 64).
    pub(crate) max: usize,
    /// A job idle this long is retired (its state freed), seconds.
    pub(crate) idle_timeout_s: f64,
    /// Samples prepared ahead of a job along its listing order.
    pub(crate) prefetch_window: usize,
    /// Substitution at open and cached-first listings; off, job views serve what is asked.
    pub(crate) ods: bool,
    /// Jobs one user (uid) may hold at once; root and the mount's owner are not limited, and
    /// one slot is always kept for them.
    pub(crate) per_user: usize,
    /// With `cache.remote`: a job name is one job on every mount sharing the remote (its seen
    /// and claimed bits and its epoch in Redis). Off: each mount's jobs are its own.
    pub(crate) shared: bool,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig { max: 16, idle_timeout_s: 600.0, prefetch_window: 16, ods: true, per_user: 4, shared: true }
    }
}

pub(super) fn jobs_config(text: &str, raw: Option<RawJobs>) -> Result<JobsConfig, ConfigError> {
    let mut jobs = JobsConfig::default();
    let Some(raw) = raw else { return Ok(jobs) };
    if let Some(max) = raw.max {
        if !(1..=prepfs_cache::MAX_JOBS).contains(&max) {
            let range = ValueError::OutOfRange { min: 1, max: prepfs_cache::MAX_JOBS as u64 };
            return Err(ConfigError::value(text, "jobs.max", range));
        }
        jobs.max = max;
    }
    if let Some(idle) = raw.idle_timeout {
        jobs.idle_timeout_s = duration_value(text, "jobs.idle_timeout", &idle)?;
    }
    if let Some(window) = raw.prefetch_window {
        if window > 1024 {
            return Err(ConfigError::value(text, "jobs.prefetch_window", ValueError::OutOfRange { min: 0, max: 1024 }));
        }
        jobs.prefetch_window = window;
    }
    if let Some(ods) = raw.ods {
        jobs.ods = ods;
    }
    if let Some(shared) = raw.shared {
        jobs.shared = shared;
    }
    jobs.per_user = match raw.per_user {
        Some(0) => return Err(ConfigError::value(text, "jobs.per_user", ValueError::NotPositive)),
        Some(n) => n.min(jobs.max),
        None => (jobs.max / 4).max(1),
    };
    Ok(jobs)
}

/// How the source is read: bounds that keep one file from taking the daemon down.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceLimits {
    /// Files larger than this are refused (EIO, one log line) without being read.
    pub(crate) max_file_size: u64,
    /// A source read not answered within this many seconds fails (EIO) instead of hanging.
    pub(crate) timeout_s: f64,
}

/// Default [`SourceLimits::max_file_size`]: far above any training image, far below memory.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 256 << 20;

impl Default for SourceLimits {
    fn default() -> Self {
        SourceLimits { max_file_size: DEFAULT_MAX_FILE_SIZE, timeout_s: 30.0 }
    }
}

/// The largest uid or gid prepfs shows: 2^31 - 1. Larger ones are refused wherever they are
/// given (`--uid`/`--gid`, `-o uid=`/`gid=`, `uid:`/`gid:`): many tools and kernel paths hold
/// ids in signed 32-bit integers, and 4294967295 is `(uid_t)-1`, which chown(2) and setuid(2)
/// read as "no change", not as a user.
pub const MAX_ID: u32 = i32::MAX as u32;

/// Who may use the mount.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AccessConfig {
    /// Let users other than the one mounting use the mount (FUSE `allow_other`). The kernel
    /// checks every access against the source's owners and modes either way.
    pub allow_other: bool,
    /// The owner every node is shown with (`--uid`/`--gid`, `uid:`/`gid:`), as mount-s3 and
    /// gcsfuse do, instead of each source file's own. The core then checks each access against
    /// the source's own owner and mode as well as the kernel's check against the shown ones
    /// (`fs::access`), so nothing the source denies a user is served to them.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `.prepfs/` (stats, config) readable by every user, not only the mount's owner.
    pub(crate) control_public: bool,
    /// Bytes of served output that open files may pin at once; opens past it wait for
    /// releases, then fail with ENFILE. One user may take at most half of it.
    pub(crate) max_open_bytes: u64,
}

/// Default [`AccessConfig::max_open_bytes`]: about 1,700 open augmented files.
pub const DEFAULT_MAX_OPEN_BYTES: u64 = 256 << 20;

/// The least [`AccessConfig::max_open_bytes`] accepted.
pub const MIN_MAX_OPEN_BYTES: u64 = 1 << 20;

/// What `source` names: a dataset directory, shards by their pattern, or an object store.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum SourceGiven {
    Dir(PathBuf),
    Shards(String),
    ObjectStore(String),
}

/// Whether `text` names an object store source (`s3://...`) rather than a path.
pub fn is_object_store_url(text: &str) -> bool {
    text.starts_with("s3://")
}

impl SourceGiven {
    /// A path as given: shards where it is a shard pattern (`source::shards::is_shard_pattern`;
    /// in an object store too: `s3://BUCKET/train-*.tar`), an object store where it is another
    /// `s3://` URL.
    pub(super) fn of(text: &str) -> SourceGiven {
        if prepfs_source::shards::is_shard_pattern(text) {
            SourceGiven::Shards(text.to_string())
        } else if is_object_store_url(text) {
            SourceGiven::ObjectStore(text.to_string())
        } else {
            SourceGiven::Dir(PathBuf::from(text))
        }
    }
}

/// `source` as written.
pub(super) struct RawSource {
    pub(super) given: SourceGiven,
    pub(super) read_limit: Option<u64>,
    pub(super) limits: SourceLimits,
    pub(super) index_dir: Option<PathBuf>,
    /// An object store's `endpoint`, `region` and `retry_timeout` (seconds).
    pub(super) endpoint: Option<String>,
    pub(super) region: Option<String>,
    pub(super) retry_timeout_s: Option<f64>,
    /// An object store's `listing_max_age` (seconds).
    pub(super) listing_max_age_s: Option<f64>,
}

/// `source` as written: a path (or shard pattern, or `s3://` URL), or a mapping with `path`,
/// `shards` or `url` (with `endpoint`, `region`, `retry_timeout`, `listing_max_age`), `index_dir`, `read_limit`,
/// `max_file_size` and `timeout`.
pub(super) fn source_value(text: &str, value: Value) -> Result<RawSource, ConfigError> {
    let mut limits = SourceLimits::default();
    match value {
        Value::String(s) => Ok(RawSource { given: SourceGiven::of(&s), read_limit: None, limits, index_dir: None, endpoint: None, region: None, retry_timeout_s: None, listing_max_age_s: None }),
        Value::Mapping(map) => {
            let (mut given, mut limit, mut index_dir) = (None, None, None);
            let (mut endpoint, mut region, mut retry_timeout_s, mut listing_max_age_s) = (None, None, None, None);
            for (k, v) in map {
                match (k.as_str(), v) {
                    (Some("path"), Value::String(p)) => given = Some(SourceGiven::Dir(PathBuf::from(p))),
                    (Some("path"), _) => return Err(ConfigError::at(text, "source.path", "must be a directory path")),
                    (Some("shards"), Value::String(p)) => given = Some(SourceGiven::Shards(p)),
                    (Some("shards"), _) => return Err(ConfigError::at(text, "source.shards", "must be a shard pattern (\"/data/train-{000000..000099}.tar\")")),
                    (Some("url"), Value::String(u)) if is_object_store_url(&u) => given = Some(SourceGiven::of(&u)),
                    (Some("url"), _) => return Err(ConfigError::at(text, "source.url", "must be an object store URL (s3://BUCKET/PREFIX)")),
                    (Some("endpoint"), Value::String(e)) if e.starts_with("http://") || e.starts_with("https://") => endpoint = Some(e),
                    (Some("endpoint"), Value::Null) => {}
                    (Some("endpoint"), _) => return Err(ConfigError::at(text, "source.endpoint", "must be an http:// or https:// URL")),
                    (Some("region"), Value::String(r)) => region = Some(r),
                    (Some("region"), Value::Null) => {}
                    (Some("region"), _) => return Err(ConfigError::at(text, "source.region", "must be a region name")),
                    (Some("retry_timeout"), v) => retry_timeout_s = Some(duration_value(text, "source.retry_timeout", &v)?),
                    (Some("listing_max_age"), v) => listing_max_age_s = Some(duration_or_zero(text, "source.listing_max_age", &v)?),
                    (Some("index_dir"), Value::String(p)) => index_dir = Some(PathBuf::from(p)),
                    (Some("index_dir"), Value::Null) => {}
                    (Some("index_dir"), _) => return Err(ConfigError::at(text, "source.index_dir", "must be a directory path")),
                    (Some("read_limit"), Value::Null) => {}
                    (Some("read_limit"), v) => {
                        let rate = bytes_of(&v, Quantity::Rate).map_err(|e| ConfigError::value(text, "source.read_limit", e))?;
                        if rate == 0 {
                            return Err(ConfigError::value(text, "source.read_limit", ValueError::NotPositive));
                        }
                        limit = Some(rate);
                    }
                    (Some("max_file_size"), v) => {
                        limits.max_file_size = positive_size_value(text, "source.max_file_size", &v)?;
                    }
                    (Some("timeout"), v) => limits.timeout_s = duration_value(text, "source.timeout", &v)?,
                    (Some(other), _) => {
                        return Err(ConfigError::at(
                            text,
                            other,
                            format!("unknown key `{other}` in `source`; known: path, shards, url, endpoint, region, retry_timeout, listing_max_age, index_dir, read_limit, max_file_size, timeout"),
                        ))
                    }
                    (None, _) => return Err(ConfigError::at(text, "source", "keys are names")),
                }
            }
            let given = given.ok_or_else(|| ConfigError::at(text, "source", "`path` (or `shards`, or `url`) is missing"))?;
            let in_store = match &given {
                SourceGiven::ObjectStore(_) => true,
                SourceGiven::Shards(pattern) => is_object_store_url(pattern),
                SourceGiven::Dir(_) => false,
            };
            if !in_store && (endpoint.is_some() || region.is_some() || retry_timeout_s.is_some() || listing_max_age_s.is_some()) {
                return Err(ConfigError::at(text, "source", "`endpoint`, `region`, `retry_timeout` and `listing_max_age` are an object store's (`url: s3://BUCKET/PREFIX`)"));
            }
            Ok(RawSource { given, read_limit: limit, limits, index_dir, endpoint, region, retry_timeout_s, listing_max_age_s })
        }
        _ => Err(ConfigError::at(text, "source", "a directory path, or { path: DIR, read_limit: 200MB/s }, or { shards: PATTERN }, or { url: s3://BUCKET/PREFIX }")),
    }
}
