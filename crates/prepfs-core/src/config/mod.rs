//! The mount configuration: one typed struct, parsed from YAML and validated once.
//!
//! Everything that reads configuration reads a [`Config`]; nothing re-parses YAML. Unknown keys,
//! bad values and a missing source are refused before mounting, with the key (and, where the
//! YAML has it, the line) named in the message.
//!
//! One concern per file: [`error`] (refusals), [`units`] (sizes, rates, durations as written),
//! [`values`] (a YAML value read as one), [`machine`] (memory probing), [`output`], [`cache`],
//! [`sections`] (stop, loader, bad samples, jobs, source, access), [`write`] (the YAML writer),
//! [`warnings`] (what a valid config should still be told: the memory bound);
//! this file holds [`Config`] itself and the parse that builds it.

mod cache;
mod error;
mod machine;
mod output;
mod recipes;
mod sections;
#[cfg(test)]
mod tests;
mod units;
mod values;
mod warnings;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_norway::Value;

pub use cache::{RefillWhen, DEFAULT_EPOCHS};
pub(crate) use cache::{CacheConfig, DiskConfig, SplitChoice};
pub use prepfs_cache::settings::{EvictionPolicy, RemoteConfig};
pub use error::ValueError;
pub(crate) use error::ConfigError;
pub use prepfs_pixels::output_config::{Dtype, Format, OutputConfig};
pub use prepfs_source::settings::{ObjectStoreConfig, ShardsConfig, DEFAULT_LISTING_MAX_AGE_S};
pub(crate) use recipes::{Recipe, MAX_RECIPES};
pub use sections::{
    AccessConfig, BadSamplesConfig, HideBad, JobsConfig, LoaderConfig, SourceLimits, Validate, DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_OPEN_BYTES, DEFAULT_RING_MEMORY, DEFAULT_RING_MEMORY_PER_USER, MAX_ID, MIN_MAX_OPEN_BYTES,
};
pub use sections::is_object_store_url;
pub use units::{parse_bytes, parse_duration, parse_rate};
#[cfg(test)]
use error::Quantity;
#[cfg(test)]
use units::{DURATION_UNITS, MAX_DURATION_S, SIZE_UNITS};

use cache::{cache_config, RawCache};
use machine::machine_memory;
use output::validate_output;
use recipes::{augment_ops, recipes_config, RawRecipe};
use sections::{jobs_config, source_value, stop_config, RawBadSamples, RawJobs, RawLoader, RawStop, SourceGiven};
use values::memory_value;
use prepfs_pixels::augment::AugmentOp;
use prepfs_pixels::rgb::Size2;
use prepfs_base::yaml;

/// Default limit on the pixels a sample's header may claim (64 megapixels).
pub const DEFAULT_MAX_PIXELS: u64 = 64_000_000;

/// The YAML as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    /// A path, or `{ path: DIR, read_limit: 200MB/s }`.
    source: Option<Value>,
    mountpoint: Option<PathBuf>,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    threads: usize,
    #[serde(default)]
    fuse_threads: usize,
    #[serde(default)]
    passthrough: Option<bool>,
    #[serde(default)]
    max_pixels: Option<u64>,
    #[serde(default)]
    augment: Option<Vec<BTreeMap<String, Value>>>,
    #[serde(default)]
    output: Option<OutputConfig>,
    #[serde(default)]
    recipes: Option<BTreeMap<String, RawRecipe>>,
    #[serde(default)]
    cache: Option<RawCache>,
    #[serde(default)]
    jobs: Option<RawJobs>,
    #[serde(default)]
    allow_other: Option<bool>,
    #[serde(default)]
    uid: Option<u32>,
    #[serde(default)]
    gid: Option<u32>,
    #[serde(default)]
    control_public: Option<bool>,
    #[serde(default)]
    max_open_bytes: Option<Value>,
    #[serde(default)]
    bad_samples: Option<RawBadSamples>,
    #[serde(default)]
    loader: Option<RawLoader>,
    #[serde(default)]
    stop: Option<RawStop>,
    #[serde(default)]
    placement: Option<Placement>,
}

/// Where outputs are made (`placement`, issue 52): this machine's cores only, or also `prepfs
/// worker`s on other machines reached through the remote tier (`cache.remote`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Workers are asked for the deficit only: while readers wait on outputs this mount makes
    /// at open, or its stock of ready outputs runs low (the default).
    #[default]
    Auto,
    /// Never ask workers.
    Local,
    /// Ask workers for every output the stock has room for, and leave this machine's cores to
    /// the training job: its own refill stops while workers are alive (a read that misses is
    /// still made here at once).
    Remote,
}

/// The validated configuration of one mount.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The dataset directory served (never written); with `shards`, the shards' directory.
    pub source: PathBuf,
    /// WebDataset shards served in place of the directory tree.
    pub shards: Option<ShardsConfig>,
    /// An S3-compatible object store served in place of the directory tree (`source` is then
    /// its URL as a path, `s3://BUCKET/PREFIX`, never a local directory).
    pub object_store: Option<ObjectStoreConfig>,
    /// Bytes per second the source may be read at (shared storage); `None`: unlimited.
    pub(crate) source_read_limit: Option<u64>,
    /// Where the filesystem is mounted.
    pub mountpoint: PathBuf,
    /// Seed of every random draw: a draw is a pure function of (seed, job, epoch, sample).
    pub(crate) seed: u64,
    /// Threads of the decode/augment pool (they also read the source).
    pub threads: usize,
    /// Threads reading FUSE requests.
    pub fuse_threads: usize,
    /// Kernel FUSE passthrough (Linux 6.9+, the daemon with CAP_SYS_ADMIN): reads of an open
    /// file go to a backing file (the source's, or a memory file of the output), not to the
    /// daemon. Default on; where the kernel refuses, the mount says so and serves reads itself.
    pub passthrough: bool,
    /// Samples whose header claims more pixels than this are refused (EIO).
    pub(crate) max_pixels: u64,
    /// The augmentation pipeline, in order.
    pub augment: Vec<AugmentOp>,
    /// How pixels are written out.
    pub(crate) output: OutputConfig,
    /// Named pipelines, each a view beside `augmented/` (`recipes:`), in name order.
    pub(crate) recipes: Vec<Recipe>,
    /// The sample cache.
    pub cache: CacheConfig,
    /// Concurrent jobs.
    pub(crate) jobs: JobsConfig,
    /// Bounds on reading the source.
    pub(crate) source_limits: SourceLimits,
    /// Who may use the mount, and what open files may pin.
    pub access: AccessConfig,
    /// Hiding and skipping samples known bad, and when they are found.
    pub bad_samples: BadSamplesConfig,
    /// The loader socket.
    pub loader: LoaderConfig,
    /// How a stop drains the mount (`stop:`; `--drain`, `--drain-max` win).
    pub stop: crate::drain::DrainConfig,
    /// Where outputs are made: here, or also on `prepfs worker`s (`cache.remote` needed).
    pub placement: Placement,
}

/// Overrides given on the command line; each wins over the YAML.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub source: Option<PathBuf>,
    pub mountpoint: Option<PathBuf>,
    pub seed: Option<u64>,
}

/// Whether validating a config may change the machine: a mount's makes the disk tier's
/// directory; `prepfs check`'s makes nothing (and so accepts a directory its user could not
/// make, such as the shipped `/var/cache/prepfs` for a user other than root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effects {
    Mount,
    CheckOnly,
}

impl Config {
    /// Where shard indexes are kept between mounts: beside the disk tier's entries
    /// (`<cache.disk.path>/shard-index`) when there is one, else `source.index_dir`; `None`
    /// when not serving shards, or nowhere is named.
    pub fn shard_index_dir(&self) -> Option<PathBuf> {
        let shards = self.shards.as_ref()?;
        match &self.cache.disk {
            Some(disk) => Some(disk.path.join("shard-index")),
            None => shards.index_dir.clone(),
        }
    }

    /// Where an object store's listing is kept between mounts: beside the disk tier's entries
    /// (`<cache.disk.path>/s3-listing`) when there is one, else `source.index_dir`; `None` when
    /// the source is no object store, nowhere is named, or `source.listing_max_age` is 0.
    pub fn listing_dir(&self) -> Option<PathBuf> {
        let store = self.object_store.as_ref().filter(|s| s.listing_max_age_s > 0.0)?;
        match &self.cache.disk {
            Some(disk) => Some(disk.path.join("s3-listing")),
            None => store.index_dir.clone(),
        }
    }

    /// Reads, parses and validates a config file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::load_with(path, overrides, Effects::Mount)
    }

    /// [`Config::load`] making nothing (`prepfs check`): a missing disk tier directory is
    /// accepted as the mount would make it.
    pub fn check(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::load_with(path, overrides, Effects::CheckOnly)
    }

    fn load_with(path: &Path, overrides: &Overrides, effects: Effects) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::plain(format!("cannot read {}: {e}", prepfs_base::escape::escaped(path))))?;
        Config::parse_with(&text, overrides, effects)
            .map_err(|e| ConfigError { message: format!("{}: {}", prepfs_base::escape::escaped(path), e.message), ..e })
    }

    /// Parses and validates YAML text.
    pub fn parse(text: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::parse_with(text, overrides, Effects::Mount)
    }

    fn parse_with(text: &str, overrides: &Overrides, effects: Effects) -> Result<Config, ConfigError> {
        let mut raw: RawConfig = if text.trim().is_empty() {
            serde_norway::from_str("{}")
        } else {
            serde_norway::from_str(text)
        }
        .map_err(|e| ConfigError::plain(yaml::describe_error(&e)))?;

        let (yaml_source, source_read_limit, source_limits, index_dir, store_keys) = match raw.source.take() {
            Some(v) => {
                let raw = source_value(text, v)?;
                (Some(raw.given), raw.read_limit, raw.limits, raw.index_dir, (raw.endpoint, raw.region, raw.retry_timeout_s, raw.listing_max_age_s))
            }
            None => (None, None, SourceLimits::default(), None, (None, None, None, None)),
        };
        let given = overrides
            .source
            .as_ref()
            .map(|p| SourceGiven::of(&p.to_string_lossy()))
            .or(yaml_source)
            .ok_or_else(|| ConfigError::at(text, "source", "missing (set it or pass --source)"))?;
        // An object store: its keys under a prefix, or WebDataset shards among them
        // (`s3://BUCKET/PREFIX/train-*.tar`: the prefix is the pattern's directory).
        let in_store = match &given {
            SourceGiven::ObjectStore(url) => Some((url.clone(), None)),
            SourceGiven::Shards(pattern) if is_object_store_url(pattern) => {
                let (dir, _) = prepfs_source::shards::split_pattern(pattern).map_err(|e| ConfigError::at(text, "source", e))?;
                Some((dir.to_string_lossy().into_owned(), Some(pattern.clone())))
            }
            SourceGiven::Dir(_) | SourceGiven::Shards(_) => None,
        };
        if let Some((url, pattern)) = in_store {
            let (endpoint, region, retry, max_age) = store_keys;
            // Retried for a third of the source's timeout by default (at most 10 s), so that
            // a request that gives up says why before the I/O thread's timeout speaks for it.
            let timeout = source_limits.timeout_s;
            let retry_timeout_s = retry.unwrap_or((timeout / 3.0).min(10.0));
            if retry_timeout_s * 2.0 > timeout {
                return Err(ConfigError::at(text, "source.retry_timeout", format!("at most half of source.timeout ({timeout} s): a request is retried, then its last try may take as long again")));
            }
            let mut store = ObjectStoreConfig::of_url(&url, endpoint, region, retry_timeout_s).map_err(|e| ConfigError::at(text, "source", e))?;
            store.index_dir = index_dir.map(|d| std::path::absolute(&d).unwrap_or(d));
            store.listing_max_age_s = max_age.unwrap_or(DEFAULT_LISTING_MAX_AGE_S);
            let mountpoint = overrides.mountpoint.clone().or(raw.mountpoint.take()).ok_or_else(|| {
                ConfigError::at(text, "mountpoint", "missing (set it or pass --mountpoint)")
            })?;
            let shards = pattern.map(|pattern| ShardsConfig { pattern, index_dir: store.index_dir.clone() });
            return Config::finish(text, raw, overrides, effects, PathBuf::from(&store.url), shards, Some(store), mountpoint, source_read_limit, source_limits);
        }
        let (source, shards) = match given {
            // Served from the store above.
            SourceGiven::ObjectStore(url) => return Err(ConfigError::at(text, "source", format!("{url}: an object store, not a directory"))),
            SourceGiven::Dir(dir) => (dir, None),
            // Shards: their directory is the source (the served tree's root, never written,
            // never holding the mount or the disk tier).
            SourceGiven::Shards(pattern) => {
                let (dir, name) = prepfs_source::shards::split_pattern(&pattern).map_err(|e| ConfigError::at(text, "source", e))?;
                let dir = dir.canonicalize().map_err(|e| ConfigError::at(text, "source", format!("{}: {e}", prepfs_base::escape::escaped(&dir))))?;
                let pattern = format!("{}/{name}", dir.display().to_string().trim_end_matches('/'));
                // Refused here, with the key, where it names no shard (a mount indexes them).
                prepfs_source::shards::expand(&pattern).map_err(|e| ConfigError::at(text, "source", e))?;
                let index_dir = index_dir.map(|d| std::path::absolute(&d).unwrap_or(d));
                if index_dir.as_ref().is_some_and(|d| d.starts_with(&dir)) {
                    return Err(ConfigError::at(text, "source.index_dir", "the shard index must not lie inside the shards' directory (the source is never written)"));
                }
                (dir, Some(ShardsConfig { pattern, index_dir }))
            }
        };
        if !source.is_dir() {
            return Err(ConfigError::at(
                text,
                "source",
                format!("{} is not a readable directory", prepfs_base::escape::escaped(&source)),
            ));
        }
        let mountpoint = overrides.mountpoint.clone().or(raw.mountpoint.take()).ok_or_else(|| {
            ConfigError::at(text, "mountpoint", "missing (set it or pass --mountpoint)")
        })?;
        let source = source.canonicalize().map_err(|e| ConfigError::at(text, "source", e))?;
        if mountpoint.starts_with(&source) {
            let why = format!("{} is inside source {}: the source would hold its own mount", prepfs_base::escape::escaped(&mountpoint), prepfs_base::escape::escaped(&source));
            return Err(ConfigError::at(text, "mountpoint", why));
        }
        Config::finish(text, raw, overrides, effects, source, shards, None, mountpoint, source_read_limit, source_limits)
    }

    /// The rest of [`Config::parse_with`], once the source is known.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        text: &str,
        raw: RawConfig,
        overrides: &Overrides,
        effects: Effects,
        source: PathBuf,
        shards: Option<ShardsConfig>,
        object_store: Option<ObjectStoreConfig>,
        mountpoint: PathBuf,
        source_read_limit: Option<u64>,
        source_limits: SourceLimits,
    ) -> Result<Config, ConfigError> {

        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Twice the cores by default: a thread waiting on the source (network storage, a read
        // limit) leaves its core to another thread's decode.
        let threads = if raw.threads == 0 { 2 * cores } else { raw.threads };
        if threads > 1024 {
            return Err(ConfigError::value(text, "threads", ValueError::OutOfRange { min: 0, max: 1024 }));
        }
        // One per core by default (at least 2, at most 16): more threads than cores contend
        // for the kernel's FUSE queue (docs/COLD_PATH.md). Decodes, source reads and a shared
        // job's round trips to its store run on the pools, not on these.
        let fuse_threads = if raw.fuse_threads == 0 { cores.clamp(2, 16) } else { raw.fuse_threads };
        if fuse_threads > 256 {
            return Err(ConfigError::value(text, "fuse_threads", ValueError::OutOfRange { min: 0, max: 256 }));
        }
        let max_pixels = raw.max_pixels.unwrap_or(DEFAULT_MAX_PIXELS);
        if max_pixels == 0 {
            return Err(ConfigError::value(text, "max_pixels", ValueError::NotPositive));
        }

        let mut output = raw.output.unwrap_or_default();
        let augment = match raw.augment {
            None => AugmentOp::imagenet_train(),
            Some(list) => augment_ops(text, "augment", &list)?,
        };
        let recipes = recipes_config(text, raw.recipes, &output)?;
        validate_output(text, &mut output, &augment)?;
        let machine = machine_memory();
        let cache = cache_config(text, raw.cache, &source, &mountpoint, machine, effects)?;
        let jobs = jobs_config(text, raw.jobs)?;
        let max_open_bytes = match &raw.max_open_bytes {
            Some(v) => memory_value(text, "max_open_bytes", v, machine)?,
            None => DEFAULT_MAX_OPEN_BYTES,
        };
        if max_open_bytes < MIN_MAX_OPEN_BYTES {
            return Err(ConfigError::value(text, "max_open_bytes", ValueError::TooSmall { min: MIN_MAX_OPEN_BYTES }));
        }
        for (key, id) in [("uid", raw.uid), ("gid", raw.gid)] {
            if id.is_some_and(|id| id > MAX_ID) {
                return Err(ConfigError::value(text, key, ValueError::OutOfRange { min: 0, max: u64::from(MAX_ID) }));
            }
        }
        let access = AccessConfig {
            allow_other: raw.allow_other.unwrap_or(false),
            uid: raw.uid,
            gid: raw.gid,
            control_public: raw.control_public.unwrap_or(false),
            max_open_bytes,
        };
        let bad_samples = match raw.bad_samples {
            None => BadSamplesConfig::default(),
            Some(b) => BadSamplesConfig { hide: b.hide.unwrap_or_default(), validate: b.validate.unwrap_or_default() },
        };
        let loader = match raw.loader {
            None => LoaderConfig::default(),
            Some(l) => {
                if l.socket.as_ref().is_some_and(|p| !p.is_absolute()) {
                    return Err(ConfigError::at(text, "loader.socket", "give an absolute path"));
                }
                let ring_memory = match &l.ring_memory {
                    Some(v) => memory_value(text, "loader.ring_memory", v, machine)?,
                    None => DEFAULT_RING_MEMORY,
                };
                let ring_memory_per_user = match &l.ring_memory_per_user {
                    Some(v) => memory_value(text, "loader.ring_memory_per_user", v, machine)?,
                    None => DEFAULT_RING_MEMORY_PER_USER.min(ring_memory),
                };
                if ring_memory_per_user > ring_memory {
                    return Err(ConfigError::at(text, "loader.ring_memory_per_user", "must not be more than loader.ring_memory"));
                }
                LoaderConfig { enabled: l.enabled.unwrap_or(true), socket: l.socket, ring_memory, ring_memory_per_user }
            }
        };
        let stop = stop_config(text, raw.stop)?;
        let placement = raw.placement.unwrap_or_default();
        if placement == Placement::Remote && cache.remote.is_none() {
            return Err(ConfigError::at(text, "placement", "`remote` asks `prepfs worker`s through the remote tier: set `cache.remote` (url, size, secret_file)"));
        }
        Ok(Config {
            placement,
            loader,
            stop,
            bad_samples,
            source_limits,
            access,
            source,
            shards,
            object_store,
            source_read_limit,
            jobs,
            mountpoint,
            seed: overrides.seed.unwrap_or(raw.seed),
            threads,
            fuse_threads,
            passthrough: raw.passthrough.unwrap_or(true),
            max_pixels,
            augment,
            output,
            recipes,
            cache,
        })
    }

    /// How many decodes can run at once: the pool's threads, at most one per core. The model's
    /// compute rates are one thread's rate times this.
    pub fn decode_parallelism(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.threads.clamp(1, cores)
    }

    /// The size of every `augmented` output, if the pipeline fixes it.
    pub fn augmented_size(&self) -> Option<Size2> {
        prepfs_pixels::augment::fixed_output_size(&self.augment)
    }
}
