//! `cache:`: the memory budget and its split, the eviction policy, and the disk and remote
//! tiers below memory, as written and validated (paths resolved, never inside the source).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_norway::Value;

use super::error::{ConfigError, ValueError};
use super::values::{memory_value, positive_size_value};
use super::Effects;
use prepfs_planner::Split;
use prepfs_cache::settings::{EvictionPolicy, RemoteConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub(super) memory: Option<Value>,
    pub(super) split: Option<String>,
    pub(super) policy: Option<String>,
    pub(super) refill: Option<Value>,
    pub(super) consumer_samples_per_s: Option<f64>,
    pub(super) epochs: Option<u64>,
    pub(super) disk: Option<RawDisk>,
    pub(super) remote: Option<RawRemote>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemote {
    pub(super) url: Option<String>,
    pub(super) size: Option<Value>,
    pub(super) secret_file: Option<PathBuf>,
    pub(super) password_file: Option<PathBuf>,
    pub(super) tls_ca_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDisk {
    pub(super) path: Option<PathBuf>,
    pub(super) size: Option<Value>,
}

/// The cache's disk tier: a local directory and its byte budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DiskConfig {
    /// The directory (created if missing; never inside the source or the mountpoint).
    pub(crate) path: PathBuf,
    /// Bytes of disk for cached encoded and decoded samples.
    pub(crate) size: u64,
}

/// How the memory is split among the three forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitChoice {
    /// Seneca's model picks the split from measured rates.
    Auto,
    /// Percentages for (encoded, decoded, augmented).
    Fixed(Split),
}

/// When the background refill works (`cache.refill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefillWhen {
    /// Never (`false`).
    Off,
    /// Once a reader has come (`true`, the default): an idle mount spends no CPU.
    AfterFirstRead,
    /// From the mount on, before any reader (`warm`): the stock is ready for the first epoch.
    FromMount,
}

impl serde::Serialize for RefillWhen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RefillWhen::Off => s.serialize_bool(false),
            RefillWhen::AfterFirstRead => s.serialize_bool(true),
            RefillWhen::FromMount => s.serialize_str("warm"),
        }
    }
}

/// The sample cache's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Bytes of memory for cached samples (all three forms); 0 disables the cache. Default
    /// (`auto`): a share of the machine's budget for prepfs mounts (`crate::machine_memory`).
    pub memory: u64,
    /// How `auto` decided `memory`, with its figures; `None` when `memory` was set.
    pub auto: Option<crate::machine_memory::AutoMemory>,
    pub(crate) split: SplitChoice,
    pub(crate) policy: EvictionPolicy,
    /// When the background refill fills free augmented room with fresh augmentations.
    pub refill: RefillWhen,
    /// The consumers' rate for the model (`t_gpu`); `None`: unbounded.
    pub(crate) consumer_samples_per_s: Option<f64>,
    /// How many epochs the plan expects a run to read (a hint: the plan counts the epochs
    /// read so far against it).
    pub(crate) epochs: u64,
    /// The disk tier, if any.
    pub(crate) disk: Option<DiskConfig>,
    /// The remote tier, if any.
    pub(crate) remote: Option<RemoteConfig>,
}

impl CacheConfig {
    /// Whether a remote tier is configured (`cache.remote`).
    pub fn has_remote(&self) -> bool {
        self.remote.is_some()
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            memory: 0,
            auto: None,
            split: SplitChoice::Auto,
            policy: EvictionPolicy::Auto,
            refill: RefillWhen::AfterFirstRead,
            consumer_samples_per_s: None,
            epochs: DEFAULT_EPOCHS,
            disk: None,
            remote: None,
        }
    }
}

/// Default [`CacheConfig::epochs`]: a run of many epochs (torchvision's ResNet recipe reads 90).
pub const DEFAULT_EPOCHS: u64 = 90;

/// Validates `cache.disk`: both keys given, the directory made if missing (`effects`; else
/// only a file in its place is refused), and not inside the source (nor the mountpoint, which
/// would hide it).
fn disk_config(text: &str, raw: RawDisk, source: &Path, mountpoint: &Path, effects: Effects) -> Result<DiskConfig, ConfigError> {
    let path = raw.path.ok_or_else(|| ConfigError::at(text, "cache.disk", "`path` is missing"))?;
    let size = raw.size.ok_or_else(|| ConfigError::at(text, "cache.disk", "`size` is missing"))?;
    let size = positive_size_value(text, "cache.disk.size", &size)?;
    // Resolved before anything is created, so that a refused path never writes into the source.
    let resolved = resolve(&path).map_err(|e| ConfigError::at(text, "cache.disk.path", e))?;
    if resolved.starts_with(source) {
        return Err(ConfigError::at(text, "cache.disk.path", "the disk cache must not lie inside the source"));
    }
    let mountpoint = resolve(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    if resolved.starts_with(&mountpoint) {
        return Err(ConfigError::at(text, "cache.disk.path", "the disk cache must not lie inside the mountpoint"));
    }
    if effects == Effects::CheckOnly {
        if resolved.exists() && !resolved.is_dir() {
            return Err(ConfigError::at(text, "cache.disk.path", format!("{} is not a directory", prepfs_base::escape::escaped(&resolved))));
        }
        return Ok(DiskConfig { path: resolved, size });
    }
    // Made private, or refused where another user could redirect or read it (`PrivateDir`).
    prepfs_base::private_dir::PrivateDir::open(&resolved)
        .map_err(|e| ConfigError::at(text, "cache.disk.path", format!("cannot use {}: {e}", prepfs_base::escape::escaped(&resolved))))?;
    let path = resolved.canonicalize().map_err(|e| ConfigError::at(text, "cache.disk.path", e))?;
    Ok(DiskConfig { path, size })
}

/// Validates `cache.remote`: `url`, `size` and `secret_file` given, a single server's
/// `redis[s]://` URL or a cluster's `redis[s]+cluster://` the client accepts, and the files it
/// names readable and private (nothing is connected here: a server down at mount is an outage
/// like any other).
fn remote_config(text: &str, raw: RawRemote) -> Result<RemoteConfig, ConfigError> {
    use prepfs_cache::remote::{Access, RemoteError, HOW_TO_MAKE};
    let url = raw.url.ok_or_else(|| ConfigError::at(text, "cache.remote", "`url` is missing"))?;
    let size = raw.size.ok_or_else(|| ConfigError::at(text, "cache.remote", "`size` is missing"))?;
    let size = positive_size_value(text, "cache.remote.size", &size)?;
    let url = url.trim().to_string();
    let shown = prepfs_cache::remote::redacted(&url);
    prepfs_cache::remote::server_urls(&url).map_err(|why| ConfigError::at(text, "cache.remote.url", format!("`{shown}`: {why}")))?;
    let secret_file = raw.secret_file.ok_or_else(|| {
        ConfigError::at(
            text,
            "cache.remote",
            format!("`secret_file` is missing: the values every mount shares are authenticated with a secret they all hold; {HOW_TO_MAKE}"),
        )
    })?;
    if raw.tls_ca_file.is_some() && !url.starts_with("rediss") {
        return Err(ConfigError::at(text, "cache.remote.tls_ca_file", "needs a TLS URL (rediss:// or rediss+cluster://)"));
    }
    // Absolute, so that a mount that leaves its directory reads the same files.
    let absolute = |key: &str, path: PathBuf| resolve(&path).map_err(|e| ConfigError::at(text, key, format!("{}: {e}", prepfs_base::escape::escaped(&path))));
    let secret_file = absolute("cache.remote.secret_file", secret_file)?;
    let password_file = raw.password_file.map(|p| absolute("cache.remote.password_file", p)).transpose()?;
    let tls_ca_file = raw.tls_ca_file.map(|p| absolute("cache.remote.tls_ca_file", p)).transpose()?;
    let config = RemoteConfig { url, size, secret_file, password_file, tls_ca_file };
    match Access::load(&config) {
        Ok(_) => Ok(config),
        Err(RemoteError::File { key, source }) => Err(ConfigError::at(text, &format!("cache.remote.{key}"), source.to_string())),
        Err(e) => Err(ConfigError::at(text, "cache.remote", e.to_string())),
    }
}

/// `path` made absolute with its longest existing prefix canonicalized (symlinks followed);
/// the part that does not exist yet is appended as written.
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name.to_owned());
                existing = parent;
            }
            _ => break,
        }
    }
    let mut out = existing.canonicalize()?;
    out.extend(missing.iter().rev());
    Ok(out)
}

pub(super) fn cache_config(
    text: &str,
    raw: Option<RawCache>,
    source: &Path,
    mountpoint: &Path,
    machine: Option<u64>,
    effects: Effects,
) -> Result<CacheConfig, ConfigError> {
    let auto = crate::machine_memory::auto_share();
    let mut cache = CacheConfig { memory: auto.memory, auto: Some(auto), ..CacheConfig::default() };
    let Some(raw) = raw else { return Ok(cache) };
    match raw.memory {
        Some(Value::String(s)) if s.trim() == "auto" => {}
        Some(memory) => {
            cache.memory = memory_value(text, "cache.memory", &memory, machine)?;
            cache.auto = None;
        }
        None => {}
    }
    if let Some(disk) = raw.disk {
        cache.disk = Some(disk_config(text, disk, source, mountpoint, effects)?);
    }
    if let Some(remote) = raw.remote {
        cache.remote = Some(remote_config(text, remote)?);
    }
    if let Some(split) = raw.split {
        cache.split = if split.trim() == "auto" {
            SplitChoice::Auto
        } else {
            SplitChoice::Fixed(split.parse().map_err(|e| ConfigError::at(text, "cache.split", e))?)
        };
    }
    if let Some(policy) = raw.policy {
        cache.policy = match policy.as_str() {
            "keep" => EvictionPolicy::Keep,
            "lru" => EvictionPolicy::Lru,
            "auto" => EvictionPolicy::Auto,
            other => return Err(ConfigError::at(text, "cache.policy", format!("`{other}`: use auto, keep or lru"))),
        };
    }
    if let Some(refill) = raw.refill {
        cache.refill = match &refill {
            Value::Bool(false) => RefillWhen::Off,
            Value::Bool(true) => RefillWhen::AfterFirstRead,
            Value::String(s) if s == "warm" => RefillWhen::FromMount,
            _ => return Err(ConfigError::at(text, "cache.refill", "use true (once a reader comes), warm (from the mount on) or false")),
        };
    }
    if let Some(rate) = raw.consumer_samples_per_s {
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(ConfigError::at(text, "cache.consumer_samples_per_s", "must be a positive number"));
        }
        cache.consumer_samples_per_s = Some(rate);
    }
    if let Some(epochs) = raw.epochs {
        if epochs == 0 {
            return Err(ConfigError::value(text, "cache.epochs", ValueError::NotPositive));
        }
        cache.epochs = epochs;
    }
    Ok(cache)
}
