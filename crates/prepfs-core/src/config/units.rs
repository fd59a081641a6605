//! Sizes, rates and durations as people write them (`8GiB`, `200MB/s`, `10m`): the unit tables,
//! the text parsers, and bytes written back for people.

use super::error::{Quantity, ValueError};

/// The longest duration accepted: a year. Longer ones would overflow the timers they set.
pub(crate) const MAX_DURATION_S: f64 = 365.0 * 24.0 * 3600.0;

pub(super) fn max_of(quantity: Quantity) -> String {
    match quantity {
        Quantity::Size => format!("{} bytes (16EiB)", u64::MAX),
        Quantity::Rate => format!("{} bytes/s", u64::MAX),
        Quantity::Duration => "8760h (a year)".to_string(),
    }
}

/// A size as written, with its bytes where they are not what was written.
pub(super) fn figure(written: &str, bytes: u64) -> String {
    if written == bytes.to_string() {
        format!("{bytes} bytes")
    } else {
        format!("{written} ({bytes} bytes)")
    }
}


/// Every unit a size (and a rate, before its `/s`) takes, matched in any case. `K`, `M`, `G`,
/// `T` and `KB`, `MB`, `GB`, `TB` are powers of 1000 (as disks, networks, Kubernetes' `8G`
/// and `gsutil`'s figures are written); `Ki`, `KiB` and the rest are powers of 1024. The parser
/// and the error's list of units both read this table.
pub(crate) const SIZE_UNITS: &[(&str, u64)] = &[
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
pub(crate) const DURATION_UNITS: &[(&str, f64)] = &[("ms", 0.001), ("s", 1.0), ("m", 60.0), ("min", 60.0), ("h", 3600.0)];

/// `text` split into its number (digits, `.`, a sign) and its unit, both trimmed.
pub(super) fn split_number(text: &str) -> (&str, &str) {
    let t = text.trim();
    let end = t.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+'))).unwrap_or(t.len());
    (&t[..end], t[end..].trim())
}

/// `value` units of `scale` bytes, as whole bytes (rounded): refused if NaN, negative or past
/// `u64`.
pub(super) fn whole_bytes(value: f64, scale: u64, text: &str, quantity: Quantity) -> Result<u64, ValueError> {
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
pub(super) fn parse_size_as(text: &str, quantity: Quantity) -> Result<u64, ValueError> {
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
pub(super) fn checked_duration(secs: f64, text: &str) -> Result<f64, ValueError> {
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
