//! Why a configuration is refused: [`ConfigError`] (the key, its line and why) and the value
//! parsers' typed [`ValueError`], with the [`Quantity`] each parser reads.

use std::fmt;

use prepfs_base::human::human_bytes;
use super::units::{figure, max_of, DURATION_UNITS, SIZE_UNITS};
use prepfs_base::yaml::Line;

/// A refused configuration: which key, where, and why.
#[derive(Debug, thiserror::Error)]
#[error("config: {message}")]
pub struct ConfigError {
    pub(super) message: String,
    /// The value parser's error, where a key's value was refused by one.
    pub(super) value: Option<ValueError>,
}

impl ConfigError {
    /// `key` is the key's dotted path (`cache.memory`); the line is that of its last part.
    pub(super) fn at(text: &str, key: &str, why: impl fmt::Display) -> Self {
        let last = key.rsplit('.').next().unwrap_or(key);
        ConfigError { message: format!("`{key}`{}: {why}", Line::of(text, last)), value: None }
    }
    /// [`ConfigError::at`] for a refused value, keeping the typed error.
    pub(super) fn value(text: &str, key: &str, why: ValueError) -> Self {
        ConfigError { value: Some(why.clone()), ..ConfigError::at(text, key, why) }
    }
    pub(super) fn plain(message: impl Into<String>) -> Self {
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
