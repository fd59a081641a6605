//! The YAML writer: a [`Config`] printed in the keys and units [`Config::parse`] reads, so that
//! what `prepfs check` prints and `.prepfs/config.yaml` serves is a config file itself.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::{RefillWhen, 
    BadSamplesConfig, Config, DiskConfig, EvictionPolicy, LoaderConfig, OutputConfig, Recipe, RemoteConfig, SplitChoice,
};
use prepfs_pixels::augment::AugmentOp;

impl Config {
    /// The effective configuration as YAML, in the keys and units [`Config::parse`] reads
    /// (sizes in bytes, durations in seconds), so that it is a config file itself: what
    /// `prepfs check` prints and the mount serves as `.prepfs/config.yaml`.
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(&WrittenConfig::from(self)).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    }
}

/// A [`Config`] in the shape of the YAML it is read from ([`Config::to_yaml`]).
#[derive(Serialize)]
struct WrittenConfig<'a> {
    source: WrittenSource<'a>,
    mountpoint: &'a Path,
    seed: u64,
    threads: usize,
    fuse_threads: usize,
    passthrough: bool,
    max_pixels: u64,
    augment: &'a [AugmentOp],
    output: &'a OutputConfig,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    recipes: BTreeMap<&'a str, &'a Recipe>,
    cache: WrittenCache<'a>,
    jobs: WrittenJobs,
    allow_other: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gid: Option<u32>,
    control_public: bool,
    max_open_bytes: u64,
    bad_samples: BadSamplesConfig,
    loader: &'a LoaderConfig,
    stop: WrittenStop,
    placement: super::Placement,
}

/// `stop:`, in seconds.
#[derive(Serialize)]
struct WrittenStop {
    drain: f64,
    drain_max: f64,
}

/// `source` in its mapping form.
#[derive(Serialize)]
struct WrittenSource<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shards: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    /// A password in it shown as `***`, as the Redis URL's.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_timeout: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    listing_max_age: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index_dir: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_limit: Option<u64>,
    max_file_size: u64,
    timeout: f64,
}

#[derive(Serialize)]
struct WrittenCache<'a> {
    memory: u64,
    /// `auto` or `E-D-A`.
    split: String,
    policy: EvictionPolicy,
    refill: RefillWhen,
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_samples_per_s: Option<f64>,
    epochs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<&'a DiskConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remote: Option<&'a RemoteConfig>,
}

#[derive(Serialize)]
struct WrittenJobs {
    max: usize,
    idle_timeout: f64,
    prefetch_window: usize,
    ods: bool,
    per_user: usize,
    shared: bool,
}

impl<'a> From<&'a Config> for WrittenConfig<'a> {
    fn from(c: &'a Config) -> Self {
        WrittenConfig {
            source: WrittenSource {
                path: (c.shards.is_none() && c.object_store.is_none()).then_some(c.source.as_path()),
                shards: c.shards.as_ref().map(|s| s.pattern.as_str()),
                url: c.object_store.as_ref().map(|o| o.url.as_str()),
                endpoint: c.object_store.as_ref().and_then(|o| o.endpoint.as_deref()).map(prepfs_cache::remote::redacted),
                region: c.object_store.as_ref().and_then(|o| o.region.as_deref()),
                retry_timeout: c.object_store.as_ref().map(|o| o.retry_timeout_s),
                listing_max_age: c.object_store.as_ref().map(|o| o.listing_max_age_s),
                index_dir: c.shards.as_ref().and_then(|s| s.index_dir.as_deref()).or_else(|| c.object_store.as_ref().and_then(|o| o.index_dir.as_deref())),
                read_limit: c.source_read_limit,
                max_file_size: c.source_limits.max_file_size,
                timeout: c.source_limits.timeout_s,
            },
            mountpoint: &c.mountpoint,
            seed: c.seed,
            threads: c.threads,
            fuse_threads: c.fuse_threads,
            passthrough: c.passthrough,
            max_pixels: c.max_pixels,
            augment: &c.augment,
            output: &c.output,
            recipes: c.recipes.iter().map(|r| (r.name.as_str(), r)).collect(),
            cache: WrittenCache {
                memory: c.cache.memory,
                split: match c.cache.split {
                    SplitChoice::Auto => "auto".to_string(),
                    SplitChoice::Fixed(split) => split.to_string(),
                },
                policy: c.cache.policy,
                refill: c.cache.refill,
                consumer_samples_per_s: c.cache.consumer_samples_per_s,
                epochs: c.cache.epochs,
                disk: c.cache.disk.as_ref(),
                remote: c.cache.remote.as_ref(),
            },
            jobs: WrittenJobs {
                max: c.jobs.max,
                idle_timeout: c.jobs.idle_timeout_s,
                prefetch_window: c.jobs.prefetch_window,
                ods: c.jobs.ods,
                per_user: c.jobs.per_user,
                shared: c.jobs.shared,
            },
            allow_other: c.access.allow_other,
            uid: c.access.uid,
            gid: c.access.gid,
            control_public: c.access.control_public,
            max_open_bytes: c.access.max_open_bytes,
            bad_samples: c.bad_samples,
            loader: &c.loader,
            stop: WrittenStop { drain: c.stop.quiet.as_secs_f64(), drain_max: c.stop.max.as_secs_f64() },
            placement: c.placement,
        }
    }
}
