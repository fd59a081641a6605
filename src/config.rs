//! The mount configuration: one typed struct, parsed from YAML and validated once.
//!
//! Everything that reads configuration reads a [`Config`]; nothing re-parses YAML. Unknown keys,
//! bad values and a missing source are refused before mounting, with the key (and, where the
//! YAML has it, the line) named in the message.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_norway::Value;

use crate::pixels::augment::AugmentOp;
use crate::planner::Split;
use crate::shared::Size2;
use crate::yaml::{self, Line};

/// Default limit on the pixels a sample's header may claim (64 megapixels).
pub const DEFAULT_MAX_PIXELS: u64 = 64_000_000;

/// A refused configuration: which key, where, and why.
#[derive(Debug, thiserror::Error)]
#[error("config: {message}")]
pub struct ConfigError {
    message: String,
    /// The value parser's error, where a key's value was refused by one.
    value: Option<ValueError>,
}

impl ConfigError {
    /// `key` is the key's dotted path (`cache.memory`); the line is that of its last part.
    fn at(text: &str, key: &str, why: impl fmt::Display) -> Self {
        let last = key.rsplit('.').next().unwrap_or(key);
        ConfigError { message: format!("`{key}`{}: {why}", Line::of(text, last)), value: None }
    }
    /// [`ConfigError::at`] for a refused value, keeping the typed error.
    fn value(text: &str, key: &str, why: ValueError) -> Self {
        ConfigError { value: Some(why.clone()), ..ConfigError::at(text, key, why) }
    }
    fn plain(message: impl Into<String>) -> Self {
        ConfigError { message: message.into(), value: None }
    }
    /// Why the value was refused, where a value parser refused it.
    #[cfg(test)]
    pub(crate) fn value_error(&self) -> Option<&ValueError> {
        self.value.as_ref()
    }
}

/// What a value parser reads; names it in messages, with an example and its units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// Bytes ([`parse_bytes`]).
    Size,
    /// Bytes per second ([`parse_rate`]).
    Rate,
    /// Seconds ([`parse_duration`]).
    Duration,
}

impl Quantity {
    fn example(self) -> &'static str {
        match self {
            Quantity::Size => "8GiB or 500MB",
            Quantity::Rate => "200MB/s",
            Quantity::Duration => "90s, 10m or 1h",
        }
    }
    /// The units this quantity takes, listed from the table the parser reads.
    fn units(self) -> String {
        match self {
            Quantity::Size | Quantity::Rate => {
                let named = |binary: bool| {
                    SIZE_UNITS
                        .iter()
                        .filter(|(_, bytes)| *bytes > 1 && bytes.is_power_of_two() == binary)
                        .map(|(name, _)| *name)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let bytes: Vec<&str> = SIZE_UNITS.iter().filter(|(_, b)| *b == 1).map(|(n, _)| *n).collect();
                format!(
                    "no unit or {} for bytes; {} (powers of 1000); {} (powers of 1024); in any case{}",
                    bytes.join(", "),
                    named(false),
                    named(true),
                    if self == Quantity::Rate { ", then `/s`" } else { "" }
                )
            }
            Quantity::Duration => {
                let names: Vec<&str> = DURATION_UNITS.iter().map(|(name, _)| *name).collect();
                format!("no unit for seconds, or {}", names.join(", "))
            }
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quantity::Size => "size",
            Quantity::Rate => "rate",
            Quantity::Duration => "duration",
        })
    }
}

/// Why a value was refused. [`ConfigError`] puts the key and its line in front.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// No number where one belongs (`fast`, `MB`, `.nan`).
    #[error("`{text}` is not a {quantity} like {}", quantity.example())]
    NotANumber { text: String, quantity: Quantity },
    /// A value of the wrong YAML type (a list, a mapping, a boolean).
    #[error("must be a {quantity} like {}", quantity.example())]
    WrongType { quantity: Quantity },
    /// A unit the table does not hold; the message lists every unit it does.
    #[error("unknown unit `{unit}` in `{text}`; a {quantity} takes {}", quantity.units())]
    UnknownUnit { text: String, unit: String, quantity: Quantity },
    /// Below zero.
    #[error("`{text}` is negative")]
    Negative { text: String, quantity: Quantity },
    /// Zero where it means nothing.
    #[error("must be positive")]
    NotPositive,
    /// Past what the quantity can hold (a size over 2^64 - 1 bytes, a duration over a year).
    #[error("`{text}` is too large; a {quantity} is at most {}", max_of(*quantity))]
    TooLarge { text: String, quantity: Quantity },
    /// A whole number outside its bounds.
    #[error("must be {min} to {max}")]
    OutOfRange { min: u64, max: u64 },
    /// A size under its floor.
    #[error("must be at least {}", human_bytes(*min))]
    TooSmall { min: u64 },
    /// A memory budget over the machine's physical memory.
    #[error("{} is more than this machine's memory ({})", figure(written, *bytes), human_bytes(*machine))]
    MoreThanMachine { written: String, bytes: u64, machine: u64 },
}

/// The longest duration accepted: a year. Longer ones would overflow the timers they set.
pub const MAX_DURATION_S: f64 = 365.0 * 24.0 * 3600.0;

fn max_of(quantity: Quantity) -> String {
    match quantity {
        Quantity::Size => format!("{} bytes (16EiB)", u64::MAX),
        Quantity::Rate => format!("{} bytes/s", u64::MAX),
        Quantity::Duration => "8760h (a year)".to_string(),
    }
}

/// A size as written, with its bytes where they are not what was written.
fn figure(written: &str, bytes: u64) -> String {
    if written == bytes.to_string() {
        format!("{bytes} bytes")
    } else {
        format!("{written} ({bytes} bytes)")
    }
}

/// Bytes for people: `23.5 GiB`, `512 B`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    let mut value = bytes as f64;
    let mut unit = "B";
    for next in ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    if unit == "B" {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// Every unit a size (and a rate, before its `/s`) takes, matched in any case. `K`, `M`, `G`,
/// `T` and `KB`, `MB`, `GB`, `TB` are powers of 1000 (as disks, networks, Kubernetes' `8G`
/// and `gsutil`'s figures are written); `Ki`, `KiB` and the rest are powers of 1024. The parser
/// and the error's list of units both read this table.
pub const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("K", 1_000),
    ("KB", 1_000),
    ("M", 1_000_000),
    ("MB", 1_000_000),
    ("G", 1_000_000_000),
    ("GB", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("TB", 1_000_000_000_000),
    ("Ki", 1 << 10),
    ("KiB", 1 << 10),
    ("Mi", 1 << 20),
    ("MiB", 1 << 20),
    ("Gi", 1 << 30),
    ("GiB", 1 << 30),
    ("Ti", 1 << 40),
    ("TiB", 1 << 40),
];

/// Every unit a duration takes, as written (lower case: `m` is minutes), in seconds.
pub const DURATION_UNITS: &[(&str, f64)] = &[("ms", 0.001), ("s", 1.0), ("m", 60.0), ("min", 60.0), ("h", 3600.0)];

/// `text` split into its number (digits, `.`, a sign) and its unit, both trimmed.
fn split_number(text: &str) -> (&str, &str) {
    let t = text.trim();
    let end = t.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+'))).unwrap_or(t.len());
    (&t[..end], t[end..].trim())
}

/// `value` units of `scale` bytes, as whole bytes (rounded): refused if NaN, negative or past
/// `u64`.
fn whole_bytes(value: f64, scale: u64, text: &str, quantity: Quantity) -> Result<u64, ValueError> {
    if value.is_nan() {
        return Err(ValueError::NotANumber { text: text.to_string(), quantity });
    }
    if value < 0.0 {
        return Err(ValueError::Negative { text: text.to_string(), quantity });
    }
    let bytes = (value * scale as f64).round();
    // 2^64 as f64: every f64 below it fits a u64.
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(ValueError::TooLarge { text: text.to_string(), quantity });
    }
    Ok(bytes as u64)
}

/// A size or rate's number and unit (see [`SIZE_UNITS`]) to bytes.
fn parse_size_as(text: &str, quantity: Quantity) -> Result<u64, ValueError> {
    let (num, unit) = split_number(text);
    let value: f64 = num.parse().map_err(|_| ValueError::NotANumber { text: text.trim().to_string(), quantity })?;
    let scale = if unit.is_empty() {
        1
    } else {
        SIZE_UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit))
            .map(|(_, bytes)| *bytes)
            .ok_or_else(|| ValueError::UnknownUnit { text: text.trim().to_string(), unit: unit.to_string(), quantity })?
    };
    if num.starts_with('-') {
        return Err(ValueError::Negative { text: text.trim().to_string(), quantity });
    }
    // Whole numbers exactly (an f64 holds 53 bits); fractions through f64.
    match num.parse::<u64>() {
        Ok(whole) => whole.checked_mul(scale).ok_or_else(|| ValueError::TooLarge { text: text.trim().to_string(), quantity }),
        Err(_) => whole_bytes(value, scale, text.trim(), quantity),
    }
}

/// Parses a byte size: a number of bytes, or a number with a unit of [`SIZE_UNITS`] (`8G`,
/// `8GB`, `8GiB`, `8 g`, `1.5GiB`). Zero is a size; callers refuse it where it means nothing.
pub fn parse_bytes(text: &str) -> Result<u64, ValueError> {
    parse_size_as(text, Quantity::Size)
}

/// Parses a rate in bytes per second: a size with an optional `/s` (`200MB/s`, `1GiB/s`).
pub fn parse_rate(text: &str) -> Result<u64, ValueError> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    parse_size_as(t, Quantity::Rate).map_err(|e| match e {
        // Name the rate as written, `/s` included.
        ValueError::NotANumber { quantity, .. } => ValueError::NotANumber { text: text.trim().to_string(), quantity },
        other => other,
    })
}

/// Checks a duration in seconds: a positive number of at most [`MAX_DURATION_S`].
fn checked_duration(secs: f64, text: &str) -> Result<f64, ValueError> {
    let text = text.trim().to_string();
    let quantity = Quantity::Duration;
    if secs.is_nan() {
        Err(ValueError::NotANumber { text, quantity })
    } else if secs < 0.0 {
        Err(ValueError::Negative { text, quantity })
    } else if secs == 0.0 {
        Err(ValueError::NotPositive)
    } else if secs > MAX_DURATION_S {
        Err(ValueError::TooLarge { text, quantity })
    } else {
        Ok(secs)
    }
}

/// Parses a duration in seconds: a number of seconds, or a number with a unit of
/// [`DURATION_UNITS`]; positive and at most a year.
pub fn parse_duration(text: &str) -> Result<f64, ValueError> {
    let (num, unit) = split_number(text);
    let value: f64 = num
        .parse()
        .map_err(|_| ValueError::NotANumber { text: text.trim().to_string(), quantity: Quantity::Duration })?;
    let scale = if unit.is_empty() {
        1.0
    } else {
        DURATION_UNITS.iter().find(|(name, _)| *name == unit).map(|(_, secs)| *secs).ok_or_else(|| {
            ValueError::UnknownUnit { text: text.trim().to_string(), unit: unit.to_string(), quantity: Quantity::Duration }
        })?
    };
    if num.starts_with('-') {
        return Err(ValueError::Negative { text: text.trim().to_string(), quantity: Quantity::Duration });
    }
    checked_duration(value * scale, text)
}

/// A YAML value as the user wrote it, for messages.
fn written(value: &Value) -> String {
    match value {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// A size or rate from a YAML value: a number of bytes, or text with a unit.
fn bytes_of(value: &Value, quantity: Quantity) -> Result<u64, ValueError> {
    match value {
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(bytes), _) => Ok(bytes),
            (None, Some(f)) => whole_bytes(f, 1, &n.to_string(), quantity),
            (None, None) => Err(ValueError::NotANumber { text: n.to_string(), quantity }),
        },
        Value::String(s) if quantity == Quantity::Rate => parse_rate(s),
        Value::String(s) => parse_size_as(s, quantity),
        _ => Err(ValueError::WrongType { quantity }),
    }
}

/// The size (a number of bytes, or a string with a unit) of the key `key`.
fn size_value(text: &str, key: &str, value: &Value) -> Result<u64, ConfigError> {
    bytes_of(value, Quantity::Size).map_err(|e| ConfigError::value(text, key, e))
}

/// A positive size of the key `key`.
fn positive_size_value(text: &str, key: &str, value: &Value) -> Result<u64, ConfigError> {
    match size_value(text, key, value)? {
        0 => Err(ConfigError::value(text, key, ValueError::NotPositive)),
        bytes => Ok(bytes),
    }
}

/// A memory budget of the key `key`: a size no larger than the machine's memory (`machine`,
/// where known).
fn memory_value(text: &str, key: &str, value: &Value, machine: Option<u64>) -> Result<u64, ConfigError> {
    let bytes = size_value(text, key, value)?;
    match machine {
        Some(machine) if bytes > machine => {
            Err(ConfigError::value(text, key, ValueError::MoreThanMachine { written: written(value), bytes, machine }))
        }
        _ => Ok(bytes),
    }
}

/// A positive duration in seconds from a YAML value: a number of seconds, or text with a unit.
fn duration_value(text: &str, key: &str, value: &Value) -> Result<f64, ConfigError> {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(secs) => checked_duration(secs, &n.to_string()),
            None => Err(ValueError::NotANumber { text: n.to_string(), quantity: Quantity::Duration }),
        },
        Value::String(s) => parse_duration(s),
        _ => Err(ValueError::WrongType { quantity: Quantity::Duration }),
    }
    .map_err(|e| ConfigError::value(text, key, e))
}

/// This machine's physical memory in bytes: `/proc/meminfo`'s `MemTotal`, else
/// `sysconf(_SC_PHYS_PAGES)` pages of `sysconf(_SC_PAGESIZE)`; `None` where neither answers.
pub(crate) fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(kib) = total_kib {
        return Some(kib.saturating_mul(1024));
    }
    // SAFETY: sysconf has no preconditions.
    let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    match (u64::try_from(pages), u64::try_from(page_size)) {
        (Ok(pages), Ok(size)) if pages > 0 && size > 0 => Some(pages.saturating_mul(size)),
        _ => None,
    }
}

/// The serialised form of the mounted pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Binary PPM (P6, maxval 255): PIL and torchvision read it as it is.
    Ppm,
    /// A numpy `.npy` array: uint8 HWC, or float32 CHW.
    Npy,
    /// PNG, uncompressed (stored deflate blocks): `torchvision.io.decode_image` and PIL read it.
    Png,
    /// Baseline JPEG at `quality`, padded to a size fixed by the image's size and the quality
    /// (src/pixels/encode_jpeg.rs): nvJPEG, DALI and `decode_jpeg` read it.
    Jpeg,
}

/// Element type of an `npy` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// uint8, height x width x 3.
    Uint8,
    /// float32, 3 x height x width, `(x / 255 - mean) / std`.
    Float32,
}

/// How samples are written into the `decoded` and `augmented` views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    #[serde(default = "OutputConfig::default_format")]
    pub format: Format,
    #[serde(default = "OutputConfig::default_dtype")]
    pub dtype: Dtype,
    #[serde(default = "OutputConfig::default_mean")]
    pub mean: [f32; 3],
    #[serde(default = "OutputConfig::default_std")]
    pub std: [f32; 3],
    /// JPEG quality, 1 to 100 (`format: jpeg` only); [`OutputConfig::DEFAULT_QUALITY`] when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<u8>,
}

impl OutputConfig {
    fn default_format() -> Format {
        Format::Ppm
    }
    fn default_dtype() -> Dtype {
        Dtype::Uint8
    }
    fn default_mean() -> [f32; 3] {
        [0.0; 3]
    }
    fn default_std() -> [f32; 3] {
        [1.0; 3]
    }
    /// The JPEG quality when `quality` is unset.
    pub const DEFAULT_QUALITY: u8 = 90;
    /// The file name extension of this format.
    pub fn extension(&self) -> &'static str {
        match self.format {
            Format::Ppm => "ppm",
            Format::Npy => "npy",
            Format::Png => "png",
            Format::Jpeg => "jpg",
        }
    }
    /// The JPEG quality asked for.
    pub fn jpeg_quality(&self) -> u8 {
        self.quality.unwrap_or(Self::DEFAULT_QUALITY)
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            format: Format::Ppm,
            dtype: Dtype::Uint8,
            mean: Self::default_mean(),
            std: Self::default_std(),
            quality: None,
        }
    }
}

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
}

/// `stop:` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStop {
    drain: Option<Value>,
    drain_max: Option<Value>,
}

/// A duration that may be 0 (`stop.drain: 0`: no drain), else as [`duration_value`].
fn duration_or_zero(text: &str, key: &str, value: &Value) -> Result<f64, ConfigError> {
    let zero = match value {
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => {
            let (num, _) = split_number(s);
            !num.starts_with('-') && num.parse::<f64>().is_ok_and(|n| n == 0.0)
        }
        _ => false,
    };
    if zero {
        Ok(0.0)
    } else {
        duration_value(text, key, value)
    }
}

/// `stop:`: the drain of a stopping mount (`crate::drain`), from the YAML; the defaults where
/// it says nothing.
fn stop_config(text: &str, raw: Option<RawStop>) -> Result<crate::drain::DrainConfig, ConfigError> {
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
struct RawLoader {
    enabled: Option<bool>,
    socket: Option<PathBuf>,
    ring_memory: Option<Value>,
    ring_memory_per_user: Option<Value>,
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
    pub ring_memory: u64,
    /// What the rings of one user other than root and the mount's owner may take; as much again
    /// of `ring_memory` is kept for root and the owner.
    pub ring_memory_per_user: u64,
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
struct RawBadSamples {
    hide: Option<HideBad>,
    validate: Option<Validate>,
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
struct RawJobs {
    max: Option<usize>,
    idle_timeout: Option<Value>,
    prefetch_window: Option<usize>,
    ods: Option<bool>,
    per_user: Option<usize>,
    shared: Option<bool>,
}

/// Concurrent jobs under `jobs/` (opportunistic sampling).
#[derive(Debug, Clone, PartialEq)]
pub struct JobsConfig {
    /// Jobs active at once (at most 64).
    pub max: usize,
    /// A job idle this long is retired (its state freed), seconds.
    pub idle_timeout_s: f64,
    /// Samples prepared ahead of a job along its listing order.
    pub prefetch_window: usize,
    /// Substitution at open and cached-first listings; off, job views serve what is asked.
    pub ods: bool,
    /// Jobs one user (uid) may hold at once; root and the mount's owner are not limited, and
    /// one slot is always kept for them.
    pub per_user: usize,
    /// With `cache.remote`: a job name is one job on every mount sharing the remote (its seen
    /// and claimed bits and its epoch in Redis). Off: each mount's jobs are its own.
    pub shared: bool,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig { max: 16, idle_timeout_s: 600.0, prefetch_window: 16, ods: true, per_user: 4, shared: true }
    }
}

fn jobs_config(text: &str, raw: Option<RawJobs>) -> Result<JobsConfig, ConfigError> {
    let mut jobs = JobsConfig::default();
    let Some(raw) = raw else { return Ok(jobs) };
    if let Some(max) = raw.max {
        if !(1..=crate::sampling::MAX_JOBS).contains(&max) {
            let range = ValueError::OutOfRange { min: 1, max: crate::sampling::MAX_JOBS as u64 };
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
    pub max_file_size: u64,
    /// A source read not answered within this many seconds fails (EIO) instead of hanging.
    pub timeout_s: f64,
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
    pub control_public: bool,
    /// Bytes of served output that open files may pin at once; opens past it wait for
    /// releases, then fail with ENFILE. One user may take at most half of it.
    pub max_open_bytes: u64,
}

/// Default [`AccessConfig::max_open_bytes`]: about 1,700 open augmented files.
pub const DEFAULT_MAX_OPEN_BYTES: u64 = 256 << 20;

/// The least [`AccessConfig::max_open_bytes`] accepted.
pub const MIN_MAX_OPEN_BYTES: u64 = 1 << 20;

/// `source` as written: a path, or a mapping with `path`, `read_limit`, `max_file_size` and
/// `timeout`.
fn source_value(text: &str, value: Value) -> Result<(PathBuf, Option<u64>, SourceLimits), ConfigError> {
    let mut limits = SourceLimits::default();
    match value {
        Value::String(s) => Ok((PathBuf::from(s), None, limits)),
        Value::Mapping(map) => {
            let (mut path, mut limit) = (None, None);
            for (k, v) in map {
                match (k.as_str(), v) {
                    (Some("path"), Value::String(p)) => path = Some(PathBuf::from(p)),
                    (Some("path"), _) => return Err(ConfigError::at(text, "source.path", "must be a directory path")),
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
                            format!("unknown key `{other}` in `source`; known: path, read_limit, max_file_size, timeout"),
                        ))
                    }
                    (None, _) => return Err(ConfigError::at(text, "source", "keys are names")),
                }
            }
            let path = path.ok_or_else(|| ConfigError::at(text, "source", "`path` is missing"))?;
            Ok((path, limit, limits))
        }
        _ => Err(ConfigError::at(text, "source", "a directory path, or { path: DIR, read_limit: 200MB/s }")),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    memory: Option<Value>,
    split: Option<String>,
    policy: Option<String>,
    refill: Option<bool>,
    consumer_samples_per_s: Option<f64>,
    epochs: Option<u64>,
    disk: Option<RawDisk>,
    remote: Option<RawRemote>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemote {
    url: Option<String>,
    size: Option<Value>,
    secret_file: Option<PathBuf>,
    password_file: Option<PathBuf>,
    tls_ca_file: Option<PathBuf>,
}

/// The cache's remote tier: a Redis server every mount naming it shares, and the bytes prepfs
/// keeps within there (`crate::cache::remote`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteConfig {
    /// `redis[s]://[USER:PASSWORD@]HOST:PORT[/DB]` (or a cluster's). Printed with its password
    /// as `***`: `password_file` keeps a password out of the config.
    #[serde(serialize_with = "redacted_url")]
    pub url: String,
    /// Bytes prepfs writes there at most (the server's `maxmemory` is the operator's bound).
    pub size: u64,
    /// The deployment's shared secret, which every value's MAC is keyed with: a private file
    /// (mode 0600 or stricter), the same on every machine sharing the tier. Required.
    pub secret_file: PathBuf,
    /// The server's password (Redis AUTH, or the URL's ACL user's), instead of one in the URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// PEM roots that `rediss://` trusts instead of the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
}

fn redacted_url<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::cache::remote::redacted(url))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDisk {
    path: Option<PathBuf>,
    size: Option<Value>,
}

/// The cache's disk tier: a local directory and its byte budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskConfig {
    /// The directory (created if missing; never inside the source or the mountpoint).
    pub path: PathBuf,
    /// Bytes of disk for cached encoded and decoded samples.
    pub size: u64,
}

/// How the memory is split among the three forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitChoice {
    /// Seneca's model picks the split from measured rates.
    Auto,
    /// Percentages for (encoded, decoded, augmented).
    Fixed(Split),
}

/// Whether encoded and decoded entries stay once admitted (Seneca) or make room by LRU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictionPolicy {
    /// Admit while there is room; never evict (no thrashing under random access).
    Keep,
    /// Evict the least recently used entry to admit a new one.
    Lru,
    /// Keep with one job (or none), LRU while several jobs share the cache: with opportunistic
    /// sampling, what one job's miss admitted is what the others are served next, so eviction
    /// then follows use instead of thrashing.
    Auto,
}

/// The sample cache's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Bytes of memory for cached samples (all three forms); 0 disables the cache. Default
    /// (`auto`): a share of the machine's budget for prepfs mounts ([`auto_cache_memory`]).
    pub memory: u64,
    /// How `auto` decided `memory`, with its figures; `None` when `memory` was set.
    pub auto: Option<crate::machine_memory::AutoMemory>,
    pub split: SplitChoice,
    pub policy: EvictionPolicy,
    /// Refill free augmented room in the background with fresh augmentations.
    pub refill: bool,
    /// The consumers' rate for the model (`t_gpu`); `None`: unbounded.
    pub consumer_samples_per_s: Option<f64>,
    /// How many epochs the plan expects a run to read (a hint: the plan counts the epochs
    /// read so far against it).
    pub epochs: u64,
    /// The disk tier, if any.
    pub disk: Option<DiskConfig>,
    /// The remote tier, if any.
    pub remote: Option<RemoteConfig>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            memory: 0,
            auto: None,
            split: SplitChoice::Auto,
            policy: EvictionPolicy::Auto,
            refill: true,
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
            return Err(ConfigError::at(text, "cache.disk.path", format!("{} is not a directory", resolved.display())));
        }
        return Ok(DiskConfig { path: resolved, size });
    }
    std::fs::create_dir_all(&resolved)
        .map_err(|e| ConfigError::at(text, "cache.disk.path", format!("cannot create {}: {e}", resolved.display())))?;
    let path = resolved.canonicalize().map_err(|e| ConfigError::at(text, "cache.disk.path", e))?;
    Ok(DiskConfig { path, size })
}

/// Validates `cache.remote`: `url`, `size` and `secret_file` given, a single server's
/// `redis[s]://` URL or a cluster's `redis[s]+cluster://` the client accepts, and the files it
/// names readable and private (nothing is connected here: a server down at mount is an outage
/// like any other).
fn remote_config(text: &str, raw: RawRemote) -> Result<RemoteConfig, ConfigError> {
    use crate::cache::remote::{Access, RemoteError, HOW_TO_MAKE};
    let url = raw.url.ok_or_else(|| ConfigError::at(text, "cache.remote", "`url` is missing"))?;
    let size = raw.size.ok_or_else(|| ConfigError::at(text, "cache.remote", "`size` is missing"))?;
    let size = positive_size_value(text, "cache.remote.size", &size)?;
    let url = url.trim().to_string();
    let shown = crate::cache::remote::redacted(&url);
    crate::cache::remote::server_urls(&url).map_err(|why| ConfigError::at(text, "cache.remote.url", format!("`{shown}`: {why}")))?;
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
    let absolute = |key: &str, path: PathBuf| resolve(&path).map_err(|e| ConfigError::at(text, key, format!("{}: {e}", path.display())));
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

/// `cache.memory: auto` (the default): this mount's share of the machine-wide budget of all
/// prepfs mounts (src/machine_memory.rs; a quarter of the memory available now when no other
/// mount runs). The planner gives each form no more than the set needs in it, so a small set
/// takes only what it needs.
#[cfg(test)]
pub(crate) fn auto_cache_memory() -> u64 {
    crate::machine_memory::auto_share().memory
}

fn cache_config(
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
        cache.refill = refill;
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

/// The validated configuration of one mount.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The dataset directory served (never written).
    pub source: PathBuf,
    /// Bytes per second the source may be read at (shared storage); `None`: unlimited.
    pub source_read_limit: Option<u64>,
    /// Where the filesystem is mounted.
    pub mountpoint: PathBuf,
    /// Seed of every random draw: a draw is a pure function of (seed, job, epoch, sample).
    pub seed: u64,
    /// Threads of the decode/augment pool (they also read the source).
    pub threads: usize,
    /// Threads reading FUSE requests.
    pub fuse_threads: usize,
    /// Kernel FUSE passthrough (Linux 6.9+, the daemon with CAP_SYS_ADMIN): reads of an open
    /// file go to a backing file (the source's, or a memory file of the output), not to the
    /// daemon. Default on; where the kernel refuses, the mount says so and serves reads itself.
    pub passthrough: bool,
    /// Samples whose header claims more pixels than this are refused (EIO).
    pub max_pixels: u64,
    /// The augmentation pipeline, in order.
    pub augment: Vec<AugmentOp>,
    /// How pixels are written out.
    pub output: OutputConfig,
    /// The sample cache.
    pub cache: CacheConfig,
    /// Concurrent jobs.
    pub jobs: JobsConfig,
    /// Bounds on reading the source.
    pub source_limits: SourceLimits,
    /// Who may use the mount, and what open files may pin.
    pub access: AccessConfig,
    /// Hiding and skipping samples known bad, and when they are found.
    pub bad_samples: BadSamplesConfig,
    /// The loader socket.
    pub loader: LoaderConfig,
    /// How a stop drains the mount (`stop:`; `--drain`, `--drain-max` win).
    pub stop: crate::drain::DrainConfig,
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
            .map_err(|e| ConfigError::plain(format!("cannot read {}: {e}", path.display())))?;
        Config::parse_with(&text, overrides, effects)
            .map_err(|e| ConfigError { message: format!("{}: {}", path.display(), e.message), ..e })
    }

    /// Parses and validates YAML text.
    pub fn parse(text: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::parse_with(text, overrides, Effects::Mount)
    }

    fn parse_with(text: &str, overrides: &Overrides, effects: Effects) -> Result<Config, ConfigError> {
        let raw: RawConfig = if text.trim().is_empty() {
            serde_norway::from_str("{}")
        } else {
            serde_norway::from_str(text)
        }
        .map_err(|e| ConfigError::plain(yaml::describe_error(&e)))?;

        let (yaml_source, source_read_limit, source_limits) = match raw.source {
            Some(v) => {
                let (path, limit, limits) = source_value(text, v)?;
                (Some(path), limit, limits)
            }
            None => (None, None, SourceLimits::default()),
        };
        let source = overrides
            .source
            .clone()
            .or(yaml_source)
            .ok_or_else(|| ConfigError::at(text, "source", "missing (set it or pass --source)"))?;
        if !source.is_dir() {
            return Err(ConfigError::at(
                text,
                "source",
                format!("{} is not a readable directory", source.display()),
            ));
        }
        let mountpoint = overrides.mountpoint.clone().or(raw.mountpoint).ok_or_else(|| {
            ConfigError::at(text, "mountpoint", "missing (set it or pass --mountpoint)")
        })?;
        let source = source.canonicalize().map_err(|e| ConfigError::at(text, "source", e))?;
        if mountpoint.starts_with(&source) {
            let why = format!("{} is inside source {}: the source would hold its own mount", mountpoint.display(), source.display());
            return Err(ConfigError::at(text, "mountpoint", why));
        }

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
            Some(list) => {
                let mut ops = Vec::with_capacity(list.len());
                for (i, entry) in list.iter().enumerate() {
                    let op = AugmentOp::from_yaml(entry).map_err(|why| {
                        let key = entry.keys().next().map_or("augment", String::as_str);
                        ConfigError::at(text, key, format!("augment[{i}]: {why}"))
                    })?;
                    ops.push(op);
                }
                ops
            }
        };
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
        Ok(Config {
            loader,
            stop,
            bad_samples,
            source_limits,
            access,
            source,
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
            cache,
        })
    }

    /// The effective configuration as YAML, in the keys and units [`Config::parse`] reads
    /// (sizes in bytes, durations in seconds), so that it is a config file itself: what
    /// `prepfs check` prints and the mount serves as `.prepfs/config.yaml`.
    pub fn to_yaml(&self) -> String {
        serde_norway::to_string(&WrittenConfig::from(self)).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    }

    /// How many decodes can run at once: the pool's threads, at most one per core. The model's
    /// compute rates are one thread's rate times this.
    pub fn decode_parallelism(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.threads.clamp(1, cores)
    }

    /// The size of every `augmented` output, if the pipeline fixes it.
    pub fn augmented_size(&self) -> Option<Size2> {
        crate::pixels::augment::fixed_output_size(&self.augment)
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
    path: &'a Path,
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
    refill: bool,
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
                path: &c.source,
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
        }
    }
}

/// Folds a `normalize` op into the output settings and checks they fit together.
fn validate_output(
    text: &str,
    output: &mut OutputConfig,
    augment: &[AugmentOp],
) -> Result<(), ConfigError> {
    for op in augment {
        if let AugmentOp::Normalize { mean, std } = op {
            if output.format != Format::Npy || output.dtype != Dtype::Float32 {
                return Err(ConfigError::at(
                    text,
                    "normalize",
                    "needs `output: {format: npy, dtype: float32}`",
                ));
            }
            output.mean = *mean;
            output.std = *std;
        }
    }
    if output.std.iter().any(|s| !(*s > 0.0 && s.is_finite())) {
        return Err(ConfigError::at(text, "std", "every value must be positive"));
    }
    if output.mean.iter().any(|m| !m.is_finite()) {
        return Err(ConfigError::at(text, "mean", "every value must be a finite number"));
    }
    let normalizes = output.mean != [0.0; 3] || output.std != [1.0; 3];
    if normalizes && (output.format != Format::Npy || output.dtype != Dtype::Float32) {
        return Err(ConfigError::at(
            text,
            "mean",
            "mean/std apply to `format: npy` with `dtype: float32` only",
        ));
    }
    if output.format != Format::Npy && output.dtype != Dtype::Uint8 {
        let why = format!("{} output is uint8; use `format: npy`", output.extension());
        return Err(ConfigError::at(text, "dtype", &why));
    }
    match output.quality {
        Some(_) if output.format != Format::Jpeg => {
            return Err(ConfigError::at(text, "quality", "applies to `format: jpeg` only"));
        }
        Some(q) if !(1..=100).contains(&q) => {
            return Err(ConfigError::at(text, "quality", "must be 1 to 100"));
        }
        _ => {}
    }
    if fixed_size_missing(augment) {
        return Err(ConfigError::at(
            text,
            "augment",
            "the pipeline must end in a fixed size (random_resized_crop, center_crop or \
             resize to [h, w]) so every augmented file has one exact size",
        ));
    }
    Ok(())
}

fn fixed_size_missing(augment: &[AugmentOp]) -> bool {
    crate::pixels::augment::fixed_output_size(augment).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir();
        let overrides = Overrides { source: Some(dir), mountpoint: Some("/mnt/x".into()), seed: None };
        Config::parse(yaml, &overrides)
    }

    #[test]
    fn minimal_config_gets_the_imagenet_defaults() {
        let c = parse("seed: 7\n").expect("valid");
        assert_eq!(c.seed, 7);
        assert_eq!(c.output.format, Format::Ppm);
        assert_eq!(c.augmented_size(), Some(Size2 { width: 224, height: 224 }));
        assert_eq!(c.max_pixels, DEFAULT_MAX_PIXELS);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = parse("seed: 1\nthreds: 4\n").unwrap_err().to_string();
        assert!(err.contains("threds"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn unknown_operation_is_named_with_its_line() {
        let err = parse("seed: 1\naugment:\n  - random_crop: { size: 3 }\n").unwrap_err().to_string();
        assert!(err.contains("random_crop"), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_by_key() {
        let err = parse("augment:\n  - random_resized_crop: { size: 224, scale: [0.9, 0.1] }\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("random_resized_crop") && err.contains("scale"), "{err}");
        let err = parse("output: { format: webp }\n").unwrap_err().to_string();
        assert!(err.contains("webp"), "{err}");
        let err = parse("output: { format: png, quality: 90 }\n").unwrap_err().to_string();
        assert!(err.contains("quality") && err.contains("jpeg` only"), "{err}");
        let err = parse("output: { format: jpeg, quality: 0 }\n").unwrap_err().to_string();
        assert!(err.contains("quality") && err.contains("1 to 100"), "{err}");
        let err = parse("output: { format: png, dtype: float32 }\n").unwrap_err().to_string();
        assert!(err.contains("png output is uint8"), "{err}");
        let jpeg = parse("output: { format: jpeg, quality: 75 }\n").expect("jpeg at 75");
        assert_eq!((jpeg.output.jpeg_quality(), jpeg.output.extension()), (75, "jpg"));
        assert_eq!(parse("output: { format: jpeg }\n").expect("jpeg").output.jpeg_quality(), 90);
        let err = parse("output: { format: ppm, mean: [0.5, 0.5, 0.5] }\n").unwrap_err().to_string();
        assert!(err.contains("mean"), "{err}");
        let err = parse("max_pixels: 0\n").unwrap_err().to_string();
        assert!(err.contains("max_pixels") && err.contains("line 1"), "{err}");
    }

    #[test]
    fn missing_source_is_refused() {
        let overrides = Overrides { mountpoint: Some("/mnt/x".into()), ..Default::default() };
        let err = Config::parse("seed: 1\n", &overrides).unwrap_err().to_string();
        assert!(err.contains("source"), "{err}");
        let overrides = Overrides {
            source: Some("/definitely/not/here".into()),
            mountpoint: Some("/mnt/x".into()),
            seed: None,
        };
        let err = Config::parse("seed: 1\n", &overrides).unwrap_err().to_string();
        assert!(err.contains("source") && err.contains("/definitely/not/here"), "{err}");
    }

    #[test]
    fn normalize_needs_float_npy_and_sets_mean_std() {
        let yaml = "augment:\n  - random_resized_crop: { size: 32 }\n  - normalize: { mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25] }\noutput: { format: npy, dtype: float32 }\n";
        let c = parse(yaml).expect("valid");
        assert_eq!(c.output.mean, [0.5; 3]);
        assert_eq!(c.output.std, [0.25; 3]);
        let err = parse("augment:\n  - random_resized_crop: { size: 32 }\n  - normalize: { mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25] }\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("normalize"), "{err}");
    }

    #[test]
    fn the_default_cache_is_on_with_a_quarter_of_available_memory_and_auto_settings() {
        let c = parse("").expect("valid");
        assert!(c.cache.memory > 0, "a cache by default");
        // Available memory moves between two readings while other tests run: within 10%.
        let near = |bytes: u64| bytes.abs_diff(auto_cache_memory()) <= auto_cache_memory() / 10;
        assert!(near(c.cache.memory), "{} against {}", c.cache.memory, auto_cache_memory());
        assert_eq!((c.cache.split, c.cache.policy), (SplitChoice::Auto, EvictionPolicy::Auto));
        assert!(near(parse("cache: { memory: auto }\n").expect("valid").cache.memory));
        assert_eq!(parse("cache: { memory: 0 }\n").expect("valid").cache.memory, 0, "0 turns it off");
        assert_eq!(parse("cache: { policy: auto }\n").expect("valid").cache.policy, EvictionPolicy::Auto);
    }

    #[test]
    fn cache_settings_parse_sizes_and_splits() {
        let c = parse("cache: { memory: 2GiB, split: 20-30-50, policy: lru }\n").expect("valid");
        assert_eq!(c.cache.memory, 2 << 30);
        assert_eq!(c.cache.split, SplitChoice::Fixed(Split::new(20, 30, 50).expect("sums to 100")));
        assert_eq!(c.cache.policy, EvictionPolicy::Lru);
        assert_eq!(parse("cache: { memory: 500MB }\n").expect("valid").cache.split, SplitChoice::Auto);
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        let err = parse("cache:\n  memory: 8 GiBs\n").unwrap_err().to_string();
        assert!(err.contains("memory") && err.contains("line 2"), "{err}");
        let err = parse("cache:\n  split: 50-50-10\n").unwrap_err().to_string();
        assert!(err.contains("split") && err.contains("line 2"), "{err}");
        assert!(err.contains("sum to 110") && err.contains("E-D-A"), "the planner's wording: {err}");
        let err = parse("cache: { memroy: 1GB }\n").unwrap_err().to_string();
        assert!(err.contains("memroy"), "{err}");
    }

    #[test]
    fn cache_disk_settings_parse_and_are_checked() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let source = tmp.path().join("src");
        std::fs::create_dir_all(&source).expect("mkdir");
        let overrides = Overrides { source: Some(source.clone()), mountpoint: Some(tmp.path().join("mnt")), seed: None };
        let parse = |yaml: &str| Config::parse(yaml, &overrides);
        let disk = tmp.path().join("nvme/cache");
        let yaml = format!("cache:\n  memory: 1GiB\n  disk: {{ path: {}, size: 100GiB }}\n", disk.display());
        let c = parse(&yaml).expect("valid");
        let d = c.cache.disk.expect("disk");
        assert_eq!(d.size, 100 << 30);
        assert!(disk.is_dir(), "the path is created");
        assert_eq!(d.path, disk.canonicalize().expect("canonical"));
        assert_eq!(parse("cache: { memory: 1MiB }\n").expect("valid").cache.disk, None);

        let err = parse(&format!("cache:\n  disk:\n    path: {}\n    size: 10 GiBs\n", disk.display())).unwrap_err().to_string();
        assert!(err.contains("size") && err.contains("line 4"), "{err}");
        let err = parse(&format!("cache:\n  disk:\n    path: {}\n    sise: 1GiB\n", disk.display())).unwrap_err().to_string();
        assert!(err.contains("sise") && err.contains("line"), "{err}");
        let err = parse("cache:\n  disk: { size: 1GiB }\n").unwrap_err().to_string();
        assert!(err.contains("disk") && err.contains("path"), "{err}");
        let inside = source.join("cache");
        let err = parse(&format!("cache:\n  disk: {{ path: {}, size: 1GiB }}\n", inside.display())).unwrap_err().to_string();
        assert!(err.contains("path") && err.contains("inside the source"), "{err}");
        assert!(!inside.exists(), "a refused path is not created in the source");
    }

    #[test]
    fn cache_remote_settings_parse_with_a_server_or_a_cluster_and_bad_urls_are_refused() {
        let parse = |yaml: &str| Config::parse(yaml, &Overrides { source: Some(std::env::temp_dir()), mountpoint: Some("/mnt/x".into()), seed: None });
        let tmp = tempfile::tempdir().expect("tempdir");
        let secret = private_file(tmp.path(), "secret", &[9; 32], 0o600);
        let s = secret.display();
        let c = parse(&format!("cache:\n  remote: {{ url: \"redis://127.0.0.1:6379\", size: 32GiB, secret_file: {s} }}\n")).expect("valid");
        let expected = RemoteConfig { url: "redis://127.0.0.1:6379".into(), size: 32 << 30, secret_file: secret.clone(), password_file: None, tls_ca_file: None };
        assert_eq!(c.cache.remote, Some(expected));
        let c = parse(&format!("cache:\n  remote:\n    url: \"redis+cluster://h1:7000,h2:7001\"\n    size: 1GiB\n    secret_file: {s}\n")).expect("a cluster");
        assert_eq!(c.cache.remote.map(|r| r.url), Some("redis+cluster://h1:7000,h2:7001".to_string()));
        let c = parse(&format!("cache:\n  remote: {{ url: \"rediss://u:pw@h1:7000\", size: 1GiB, secret_file: {s} }}\n")).expect("TLS");
        assert_eq!(c.cache.remote.map(|r| r.url), Some("rediss://u:pw@h1:7000".to_string()));
        let err = parse(&format!("cache:\n  remote:\n    url: \"redis+cluster://\"\n    size: 1GiB\n    secret_file: {s}\n")).unwrap_err().to_string();
        assert!(err.contains("cache.remote.url") && err.contains("names its nodes") && err.contains("line 3"), "{err}");
        let refused = |url: &str| parse(&format!("cache:\n  remote: {{ url: \"{url}\", size: 1GiB, secret_file: {s} }}\n")).unwrap_err().to_string();
        let err = refused("redis+cluster://h1:7000/2");
        assert!(err.contains("no databases"), "{err}");
        let err = refused("http://h:6379");
        assert!(err.contains("redis://HOST:PORT"), "{err}");
        let err = refused("redis://u:hunter2@h:notaport");
        assert!(err.contains("cache.remote.url") && !err.contains("hunter2"), "a refused URL's password is not shown: {err}");
        let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", secret_file: {s} }}\n")).unwrap_err().to_string();
        assert!(err.contains("size") && err.contains("missing"), "{err}");
        let err = parse(&format!("cache:\n  remote: {{ size: 1GiB, secret_file: {s} }}\n")).unwrap_err().to_string();
        assert!(err.contains("url") && err.contains("missing"), "{err}");
        let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", size: 0, secret_file: {s} }}\n")).unwrap_err().to_string();
        assert!(err.contains("cache.remote.size"), "{err}");
        let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", size: 1GiB, ttl: 5, secret_file: {s} }}\n")).unwrap_err().to_string();
        assert!(err.contains("ttl"), "{err}");
        let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", size: 1GiB, secret_file: {s}, tls_ca_file: {s} }}\n")).unwrap_err().to_string();
        assert!(err.contains("cache.remote.tls_ca_file") && err.contains("rediss://"), "{err}");
    }

    /// A file of `bytes` at `dir/name` with `mode`.
    fn private_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path.canonicalize().expect("canonical")
    }

    #[test]
    fn a_remote_tier_without_a_private_secret_file_is_refused_saying_how_to_make_one() {
        let parse = |yaml: &str| Config::parse(yaml, &Overrides { source: Some(std::env::temp_dir()), mountpoint: Some("/mnt/x".into()), seed: None });
        let tmp = tempfile::tempdir().expect("tempdir");
        let err = parse("cache:\n  remote: { url: \"redis://h:6379\", size: 1GiB }\n").unwrap_err().to_string();
        assert!(err.contains("`cache.remote`") && err.contains("secret_file") && err.contains("head -c 32 /dev/urandom") && err.contains("chmod 600"), "{err}");
        let with = |path: &Path| parse(&format!("cache:\n  remote:\n    url: \"redis://h:6379\"\n    size: 1GiB\n    secret_file: {}\n", path.display())).unwrap_err().to_string();
        let open = private_file(tmp.path(), "open", &[9; 32], 0o644);
        let err = with(&open);
        assert!(err.contains("cache.remote.secret_file") && err.contains("line 5") && err.contains("group or others") && err.contains("0644"), "{err}");
        let err = with(&private_file(tmp.path(), "empty", b"", 0o600));
        assert!(err.contains("cache.remote.secret_file") && err.contains("0 bytes"), "{err}");
        let err = with(&tmp.path().join("missing"));
        assert!(err.contains("cache.remote.secret_file") && err.contains("cannot read"), "{err}");
        let err = with(tmp.path());
        assert!(err.contains("not a regular file"), "{err}");
        // A password file is private too; the printed config shows neither the URL's password
        // nor the file's.
        let secret = private_file(tmp.path(), "secret", &[9; 32], 0o600);
        let pw = private_file(tmp.path(), "pw", b"filepass\n", 0o644);
        let yaml = |pw: &Path| format!("cache:\n  remote: {{ url: \"redis://app:urlpass@h:6379\", size: 1GiB, secret_file: {}, password_file: {} }}\n", secret.display(), pw.display());
        let err = parse(&yaml(&pw)).unwrap_err().to_string();
        assert!(err.contains("cache.remote.password_file") && err.contains("group or others"), "{err}");
        let pw = private_file(tmp.path(), "pw-private", b"filepass\n", 0o600);
        let c = parse(&yaml(&pw)).expect("valid");
        let printed = c.to_yaml();
        assert!(!printed.contains("urlpass") && !printed.contains("filepass") && printed.contains("redis://app:***@h:6379"), "{printed}");
        assert!(printed.contains("secret_file") && printed.contains("password_file"), "{printed}");
    }

    #[test]
    fn jobs_and_read_limits_parse_and_are_checked() {
        let c = parse("jobs: { max: 3, idle_timeout: 2m, prefetch_window: 4, ods: false }\n").expect("valid");
        assert_eq!(c.jobs, JobsConfig { max: 3, idle_timeout_s: 120.0, prefetch_window: 4, ods: false, per_user: 1, shared: true });
        assert_eq!(parse("seed: 1\n").expect("valid").jobs, JobsConfig::default());
        assert_eq!(parse("jobs: { idle_timeout: 45 }\n").expect("valid").jobs.idle_timeout_s, 45.0);
        let err = parse("jobs:\n  max: 65\n").unwrap_err().to_string();
        assert!(err.contains("max") && err.contains("line 2"), "{err}");
        let err = parse("jobs:\n  idle_timeout: 10 fortnights\n").unwrap_err().to_string();
        assert!(err.contains("idle_timeout") && err.contains("line 2"), "{err}");
        let err = parse("jobs: { odss: true }\n").unwrap_err().to_string();
        assert!(err.contains("odss"), "{err}");

        let dir = std::env::temp_dir();
        let overrides = Overrides { mountpoint: Some("/mnt/x".into()), ..Default::default() };
        let yaml = format!("source:\n  path: {}\n  read_limit: 200MB/s\n", dir.display());
        let c = Config::parse(&yaml, &overrides).expect("valid");
        assert_eq!(c.source_read_limit, Some(200_000_000));
        assert_eq!(c.source, dir.canonicalize().expect("canonical"));
        let plain = Config::parse(&format!("source: {}\n", dir.display()), &overrides).expect("valid");
        assert_eq!(plain.source_read_limit, None);
        let err = Config::parse(&format!("source:\n  path: {}\n  read_limit: fast\n", dir.display()), &overrides)
            .unwrap_err()
            .to_string();
        assert!(err.contains("read_limit") && err.contains("line 3"), "{err}");
        let err = Config::parse(&format!("source:\n  path: {}\n  limit: 1MB/s\n", dir.display()), &overrides)
            .unwrap_err()
            .to_string();
        assert!(err.contains("limit") && err.contains("line 3"), "{err}");
        assert_eq!(parse_rate("1.5GiB/s"), Ok(1_610_612_736));
        assert_eq!(parse_duration("500ms"), Ok(0.5));
    }

    #[test]
    fn the_stop_drain_parses_takes_zero_and_is_printed() {
        let d = parse("seed: 1\n").expect("valid").stop;
        assert_eq!(d, crate::drain::DrainConfig::default());
        let c = parse("stop: { drain: 500ms, drain_max: 2m }\n").expect("valid");
        assert_eq!((c.stop.quiet.as_secs_f64(), c.stop.max.as_secs_f64()), (0.5, 120.0));
        for zero in ["0", "0s", "\"0\""] {
            assert_eq!(parse(&format!("stop: {{ drain: {zero} }}\n")).expect(zero).stop.quiet, std::time::Duration::ZERO, "{zero}");
        }
        let err = parse("stop:\n  drain_max: 0\n").unwrap_err().to_string();
        assert!(err.contains("stop.drain_max") && err.contains("line 2"), "{err}");
        assert!(parse("stop: { drain: -1s }\n").is_err());
        assert!(parse("stop: { linger: 1s }\n").is_err());
        let printed = c.to_yaml();
        assert!(printed.contains("drain: 0.5") && printed.contains("drain_max: 120"), "{printed}");
    }

    #[test]
    fn a_size_with_a_unit_users_type_is_accepted() {
        let gib = 1u64 << 30;
        for (written, bytes) in [
            ("8G", 8_000_000_000),
            ("8GB", 8_000_000_000),
            ("8g", 8_000_000_000),
            ("8 gb", 8_000_000_000),
            ("8GiB", 8 * gib),
            ("8 GiB", 8 * gib),
            ("8gib", 8 * gib),
            ("8Gi", 8 * gib),
            ("500M", 500_000_000),
            ("500 MB", 500_000_000),
            ("512MiB", 512 << 20),
            ("1.5GiB", 3 * gib / 2),
            ("2T", 2_000_000_000_000),
            ("1TiB", 1 << 40),
            ("3k", 3_000),
            ("1.5KiB", 1536),
            ("7250000", 7_250_000),
            ("0", 0),
            ("+2KB", 2_000),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_bytes(written), Ok(bytes), "{written}");
        }
        assert_eq!(parse("cache: { memory: 1G }\n").expect("valid").cache.memory, 1_000_000_000);
        assert_eq!(parse("cache: { memory: 64 MiB }\n").expect("valid").cache.memory, 64 << 20);
        assert_eq!(parse("max_open_bytes: 8388608\n").expect("valid").access.max_open_bytes, 8 << 20);
        assert_eq!(parse_rate("200MB/s"), Ok(200_000_000));
        assert_eq!(parse_rate("1.5GiB/s"), Ok(1_610_612_736));
        assert_eq!(parse_rate("5 k/s"), Ok(5_000));
    }

    #[test]
    fn an_unknown_unit_is_refused_with_every_unit_the_parser_accepts() {
        let err = parse_bytes("8 GiBs").unwrap_err();
        assert_eq!(
            err,
            ValueError::UnknownUnit { text: "8 GiBs".into(), unit: "GiBs".into(), quantity: Quantity::Size }
        );
        let message = err.to_string();
        // The list is the table the parser reads: every unit listed parses, in any case.
        for (name, bytes) in SIZE_UNITS {
            assert!(message.contains(&format!(" {name},")) || message.contains(&format!(" {name} ")), "{name}: {message}");
            assert_eq!(parse_bytes(&format!("2{name}")), Ok(2 * bytes), "{name}");
            assert_eq!(parse_bytes(&format!("2 {}", name.to_lowercase())), Ok(2 * bytes), "{name}");
        }
        assert!(message.contains("powers of 1000") && message.contains("powers of 1024"), "{message}");
        let err = parse("cache:\n  memory: 8 GiBs\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`cache.memory` (line 2)") && text.contains("unknown unit `GiBs`"), "{text}");
        assert!(matches!(err.value_error(), Some(ValueError::UnknownUnit { .. })), "{err:?}");
        let err = parse_duration("10 fortnights").unwrap_err().to_string();
        assert!(err.contains("`fortnights`"), "{err}");
        for (name, secs) in DURATION_UNITS {
            assert!(err.contains(name), "{name}: {err}");
            assert_eq!(parse_duration(&format!("2{name}")), Ok(2.0 * secs), "{name}");
        }
        let err = parse_rate("5 XB/s").unwrap_err().to_string();
        assert!(err.contains("`XB`") && err.contains("a rate takes") && err.contains("/s"), "{err}");
    }

    #[test]
    fn negative_nan_and_overflowing_sizes_are_refused_with_a_clear_error() {
        let size = Quantity::Size;
        assert_eq!(parse_bytes("-5GiB"), Err(ValueError::Negative { text: "-5GiB".into(), quantity: size }));
        assert_eq!(parse_bytes("-0.5 MB"), Err(ValueError::Negative { text: "-0.5 MB".into(), quantity: size }));
        assert_eq!(parse_bytes("fast"), Err(ValueError::NotANumber { text: "fast".into(), quantity: size }));
        assert_eq!(parse_bytes("MB"), Err(ValueError::NotANumber { text: "MB".into(), quantity: size }));
        assert_eq!(parse_bytes("NaN"), Err(ValueError::NotANumber { text: "NaN".into(), quantity: size }));
        assert_eq!(parse_bytes("1.2.3GB"), Err(ValueError::NotANumber { text: "1.2.3GB".into(), quantity: size }));
        assert_eq!(parse_bytes(""), Err(ValueError::NotANumber { text: "".into(), quantity: size }));
        for too_large in ["18446744073709551616", "20000000TiB", "99999999999999999999999GB", "16777216.5TiB"] {
            assert_eq!(parse_bytes(too_large), Err(ValueError::TooLarge { text: too_large.into(), quantity: size }));
        }
        let err = parse_bytes("20000000TiB").unwrap_err().to_string();
        assert!(err.contains("too large") && err.contains(&u64::MAX.to_string()), "{err}");
        assert_eq!(parse_bytes("-5GiB").unwrap_err().to_string(), "`-5GiB` is negative");

        let err = parse("cache:\n  memory: -1\n").unwrap_err();
        assert!(matches!(err.value_error(), Some(ValueError::Negative { .. })), "{err}");
        assert!(err.to_string().contains("`cache.memory` (line 2)"), "{err}");
        let err = parse("cache: { memory: .nan }\n").unwrap_err();
        assert!(matches!(err.value_error(), Some(ValueError::NotANumber { .. })), "{err}");
        let err = parse("seed: 1\nmax_open_bytes: 1.0e+30\n").unwrap_err();
        assert!(matches!(err.value_error(), Some(ValueError::TooLarge { .. })), "{err}");
        assert!(err.to_string().contains("`max_open_bytes` (line 2)"), "{err}");
        let err = parse("cache: { memory: [1, 2] }\n").unwrap_err();
        assert_eq!(err.value_error(), Some(&ValueError::WrongType { quantity: size }));
        let err = parse("max_open_bytes: 1KiB\n").unwrap_err();
        assert!(err.to_string().contains("must be at least 1.0 MiB"), "{err}");
        let dir = std::env::temp_dir();
        let err = parse(&format!("source: {{ path: {}, read_limit: 0MB/s }}\n", dir.display())).unwrap_err();
        assert_eq!(err.value_error(), Some(&ValueError::NotPositive));
        let err = parse(&format!("source: {{ path: {}, max_file_size: -1KB }}\n", dir.display())).unwrap_err();
        assert!(err.to_string().contains("`source.max_file_size` (line 1)"), "{err}");
    }

    #[test]
    fn a_duration_that_is_zero_negative_or_over_a_year_is_refused() {
        let duration = Quantity::Duration;
        assert_eq!(parse_duration("0s"), Err(ValueError::NotPositive));
        assert_eq!(parse_duration("-1s"), Err(ValueError::Negative { text: "-1s".into(), quantity: duration }));
        assert_eq!(parse_duration("9000h"), Err(ValueError::TooLarge { text: "9000h".into(), quantity: duration }));
        assert_eq!(parse_duration("8760h"), Ok(MAX_DURATION_S));
        assert_eq!(parse_duration("90"), Ok(90.0));
        assert_eq!(parse_duration("1.5 min"), Ok(90.0));
        let err = parse("jobs:\n  idle_timeout: 1.0e+300\n").unwrap_err().to_string();
        assert!(err.contains("`jobs.idle_timeout` (line 2)") && err.contains("at most 8760h"), "{err}");
        let err = parse("jobs: { idle_timeout: .nan }\n").unwrap_err();
        assert!(matches!(err.value_error(), Some(ValueError::NotANumber { .. })), "{err}");
        let err = parse("jobs: { idle_timeout: 0 }\n").unwrap_err();
        assert_eq!(err.value_error(), Some(&ValueError::NotPositive));
    }

    #[test]
    fn a_cache_larger_than_the_machine_is_refused_with_the_figure() {
        let machine = machine_memory().expect("Linux reports its memory");
        let err = parse("seed: 1\ncache:\n  memory: 1000000TiB\n").unwrap_err();
        let expected = format!(
            "`cache.memory` (line 3): 1000000TiB (1099511627776000000 bytes) is more than this machine's memory ({})",
            human_bytes(machine)
        );
        assert!(err.to_string().contains(&expected), "{err}\nwanted {expected}");
        assert!(matches!(err.value_error(), Some(ValueError::MoreThanMachine { .. })), "{err:?}");
        let over = machine + 1;
        let err = parse(&format!("max_open_bytes: {over}\n")).unwrap_err().to_string();
        assert!(err.contains(&format!("`max_open_bytes` (line 1): {over} bytes is more than this machine's memory")), "{err}");
        assert_eq!(parse(&format!("cache: {{ memory: {machine} }}\n")).expect("all of it").cache.memory, machine);
        let example = ValueError::MoreThanMachine { written: "1TiB".into(), bytes: 1 << 40, machine: 24_682_416 * 1024 };
        assert_eq!(example.to_string(), "1TiB (1099511627776 bytes) is more than this machine's memory (23.5 GiB)");
    }

    #[test]
    fn bad_samples_default_to_hidden_in_jobs_found_at_first_touch() {
        let c = parse("").expect("defaults");
        assert_eq!(c.bad_samples, BadSamplesConfig { hide: HideBad::Jobs, validate: Validate::FirstTouch });
        let c = parse("bad_samples: { hide: none, validate: headers }\n").expect("valid");
        assert_eq!(c.bad_samples, BadSamplesConfig { hide: HideBad::None, validate: Validate::Headers });
        let err = parse("bad_samples: { hide: sometimes }\n").unwrap_err().to_string();
        assert!(err.contains("sometimes"), "{err}");
        assert_eq!("first-touch".parse::<Validate>(), Ok(Validate::FirstTouch));
        assert!("loud".parse::<HideBad>().is_err());
    }

    #[test]
    fn bytes_are_written_for_people_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1 << 40), "1.0 TiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    /// A config with every section and key set, its paths in `tmp`.
    fn every_section(tmp: &Path) -> (String, PathBuf) {
        let source = tmp.join("source");
        std::fs::create_dir_all(&source).expect("source");
        let yaml = format!(
            "source:\n  path: {source}\n  read_limit: 1.5GiB/s\n  max_file_size: 64MiB\n  timeout: 2m\n\
             mountpoint: {mnt}\nseed: 42\nthreads: 3\nfuse_threads: 5\nmax_pixels: 1000000\n\
             augment:\n  - random_resized_crop: {{ size: [300, 320], scale: [0.2, 0.9], ratio: [0.5, 2.0] }}\n\
             \x20 - resize: {{ size: [256, 260] }}\n  - center_crop: {{ size: [200, 224] }}\n\
             \x20 - random_horizontal_flip: {{ p: 0.25 }}\n\
             \x20 - normalize: {{ mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] }}\n\
             output: {{ format: npy, dtype: float32 }}\n\
             cache:\n  memory: 64MiB\n  split: 20-30-50\n  policy: lru\n  refill: false\n  consumer_samples_per_s: 1234.5\n\
             \x20 disk: {{ path: {disk}, size: 10G }}\n\
             \x20 remote: {{ url: \"redis://127.0.0.1:6390/2\", size: 32GiB, secret_file: {secret} }}\n\
             jobs: {{ max: 8, idle_timeout: 90s, prefetch_window: 7, ods: false, per_user: 3, shared: false }}\n\
             allow_other: true\nuid: 1000\ngid: 100\ncontrol_public: true\nmax_open_bytes: 32MiB\n\
             bad_samples: {{ hide: all, validate: scan }}\n",
            source = source.display(),
            mnt = tmp.join("mnt").display(),
            disk = tmp.join("disk").display(),
            secret = private_file(tmp, "secret", &[9; 32], 0o600).display(),
        );
        (yaml, source)
    }

    #[test]
    fn what_check_prints_is_accepted_as_a_config() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (yaml, _) = every_section(tmp.path());
        let first = Config::parse(&yaml, &Overrides::default()).expect("valid");
        assert_eq!(first.cache.split, SplitChoice::Fixed(Split::new(20, 30, 50).expect("sums to 100")));
        assert_eq!(first.source_read_limit, Some(1_610_612_736));
        assert!(first.cache.disk.is_some() && first.access.allow_other && !first.jobs.ods && !first.jobs.shared);
        assert_eq!(first.bad_samples, BadSamplesConfig { hide: HideBad::All, validate: Validate::Scan });
        assert_eq!((first.access.uid, first.access.gid), (Some(1000), Some(100)));
        let secret_file = tmp.path().join("secret").canonicalize().expect("secret");
        assert_eq!(first.cache.remote, Some(RemoteConfig { url: "redis://127.0.0.1:6390/2".into(), size: 32 << 30, secret_file, password_file: None, tls_ca_file: None }));
        // `prepfs check` prints `to_yaml`, and `.prepfs/config.yaml` serves it.
        let printed = first.to_yaml();
        let again = Config::parse(&printed, &Overrides::default()).unwrap_or_else(|e| panic!("{e}\n{printed}"));
        assert_eq!(again, first, "{printed}");
        assert_eq!(again.to_yaml(), printed, "printing is stable");
    }

    #[test]
    fn the_default_config_as_printed_is_accepted_as_a_config() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let source = tmp.path().join("source");
        std::fs::create_dir_all(&source).expect("source");
        let first = Config::parse(&format!("source: {}\nmountpoint: /mnt/x\n", source.display()), &Overrides::default())
            .expect("valid");
        let printed = first.to_yaml();
        assert!(!printed.contains("read_limit") && !printed.contains("disk") && !printed.contains("remote"), "unset keys are left out: {printed}");
        assert!(printed.contains("split: auto") && printed.contains("idle_timeout: 600"), "{printed}");
        let again = Config::parse(&printed, &Overrides::default()).unwrap_or_else(|e| panic!("{e}\n{printed}"));
        // `memory: auto` is printed as the figure it chose, which reads back as a set memory.
        assert!(first.cache.auto.is_some() && again.cache.auto.is_none());
        let first = Config { cache: CacheConfig { auto: None, ..first.cache.clone() }, ..first };
        assert_eq!(again, first, "{printed}");
    }

    #[test]
    fn the_shipped_mount_configs_are_valid() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-configs");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).expect("mount-configs") {
            let path = entry.expect("entry").path();
            // plan-example.yaml holds the planner's parameters, not a mount (planner tests it).
            if path.extension().is_none_or(|e| e != "yaml") || path.ends_with("plan-example.yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read").replace("/var/cache/prepfs", &tmp.path().join("disk").display().to_string());
            let source = tmp.path().join("source");
            std::fs::create_dir_all(&source).expect("source");
            let overrides = Overrides { source: Some(source), mountpoint: Some("/mnt/x".into()), seed: None };
            Config::parse(&text, &overrides).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            checked += 1;
        }
        assert!(checked >= 3, "{checked} configs");
    }

    #[test]
    fn check_accepts_a_missing_disk_directory_and_makes_nothing_where_a_mount_makes_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let source = tmp.path().join("source");
        std::fs::create_dir_all(&source).expect("source");
        let disk = tmp.path().join("disk/tier");
        let file = tmp.path().join("mount.yaml");
        std::fs::write(&file, format!("mountpoint: /mnt/x\ncache:\n  disk: {{ path: {}, size: 1GiB }}\n", disk.display())).expect("write");
        let overrides = Overrides { source: Some(source), mountpoint: None, seed: None };
        let checked = Config::check(&file, &overrides).expect("check");
        assert_eq!(checked.cache.disk.map(|d| d.path), Some(disk.clone()));
        assert!(!tmp.path().join("disk").exists(), "check made the disk directory");
        Config::load(&file, &overrides).expect("load");
        assert!(disk.is_dir(), "a mount's load makes it");
    }

    #[test]
    fn cli_overrides_win() {
        let overrides = Overrides {
            source: Some(std::env::temp_dir()),
            mountpoint: Some("/mnt/cli".into()),
            seed: Some(99),
        };
        let c = Config::parse("seed: 1\nmountpoint: /mnt/yaml\n", &overrides).expect("valid");
        assert_eq!(c.seed, 99);
        assert_eq!(c.mountpoint, PathBuf::from("/mnt/cli"));
    }
}
