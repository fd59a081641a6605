//! A key's YAML value read as a size, memory budget or duration: the unit parsers applied to
//! a YAML number or string, refusals named with the key and its line.

use serde_norway::Value;

use super::error::{ConfigError, Quantity, ValueError};
use super::units::{checked_duration, parse_duration, parse_rate, parse_size_as, split_number, whole_bytes};

/// A YAML value as the user wrote it, for messages.
pub(super) fn written(value: &Value) -> String {
    match value {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// A size or rate from a YAML value: a number of bytes, or text with a unit.
pub(super) fn bytes_of(value: &Value, quantity: Quantity) -> Result<u64, ValueError> {
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
pub(super) fn size_value(text: &str, key: &str, value: &Value) -> Result<u64, ConfigError> {
    bytes_of(value, Quantity::Size).map_err(|e| ConfigError::value(text, key, e))
}

/// A positive size of the key `key`.
pub(super) fn positive_size_value(text: &str, key: &str, value: &Value) -> Result<u64, ConfigError> {
    match size_value(text, key, value)? {
        0 => Err(ConfigError::value(text, key, ValueError::NotPositive)),
        bytes => Ok(bytes),
    }
}

/// A memory budget of the key `key`: a size no larger than the machine's memory (`machine`,
/// where known).
pub(super) fn memory_value(text: &str, key: &str, value: &Value, machine: Option<u64>) -> Result<u64, ConfigError> {
    let bytes = size_value(text, key, value)?;
    match machine {
        Some(machine) if bytes > machine => {
            Err(ConfigError::value(text, key, ValueError::MoreThanMachine { written: written(value), bytes, machine }))
        }
        _ => Ok(bytes),
    }
}

/// A positive duration in seconds from a YAML value: a number of seconds, or text with a unit.
pub(super) fn duration_value(text: &str, key: &str, value: &Value) -> Result<f64, ConfigError> {
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

/// A duration that may be 0 (`stop.drain: 0`: no drain), else as [`duration_value`].
pub(super) fn duration_or_zero(text: &str, key: &str, value: &Value) -> Result<f64, ConfigError> {
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
