//! An `augment:` entry's arguments as the ops read them ([`Args`]), and why an entry is refused
//! ([`OpError`]): below every op, so each op's module parses its own arguments.

use std::collections::BTreeMap;

use serde_norway::Value;

use crate::interpolation::Interpolation;
use crate::rgb::Size2;

/// Why an `augment:` entry is refused; the message names the operation and the argument (the
/// configuration's error puts the entry's place in front).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// Not a mapping of exactly one operation name to its arguments.
    #[error("each entry is one operation, like `- random_horizontal_flip: {{p: 0.5}}`")]
    NotOneOperation,
    /// An operation prepfs does not know; `known` lists every one it does.
    #[error("unknown operation `{op}`; known: {known}")]
    UnknownOperation { op: String, known: String },
    /// The arguments are not a mapping.
    #[error("{op}: arguments go in a mapping, like `{op}: {{size: 224}}`")]
    NotAMapping { op: String },
    /// An argument name that is not a string.
    #[error("{op}: argument names are strings")]
    NameNotAString { op: String },
    /// An argument the operation does not take.
    #[error("{op}: unknown argument `{arg}`; known: {known}")]
    UnknownArgument { op: String, arg: String, known: String },
    /// A required argument is missing.
    #[error("{op}: `{arg}` is required")]
    Missing { op: String, arg: String },
    /// An argument's value is out of range or of the wrong shape; `rule` says what it must be.
    #[error("{op}: `{arg}` must {rule}")]
    BadValue { op: String, arg: String, rule: String },
    /// A setting other than the ones prepfs implements.
    #[error("{op}: only `{setting}` is supported")]
    Unsupported { op: String, setting: &'static str },
    /// A pixel op placed where it cannot run with torchvision's result (`pixel_ops`' rules).
    #[error("{op}: {why}")]
    Placement { op: String, why: &'static str },
}

/// The arguments of one operation, read with errors that name the argument.
pub struct Args<'a> {
    op: &'a str,
    map: BTreeMap<String, &'a Value>,
}

impl<'a> Args<'a> {
    pub(crate) fn new(op: &'a str, value: &'a Value) -> Result<Self, OpError> {
        let mut map = BTreeMap::new();
        match value {
            Value::Null => {}
            Value::Mapping(m) => {
                for (k, v) in m {
                    let k = k.as_str().ok_or_else(|| OpError::NameNotAString { op: op.to_string() })?;
                    map.insert(k.to_string(), v);
                }
            }
            _ => return Err(OpError::NotAMapping { op: op.to_string() }),
        }
        Ok(Args { op, map })
    }
    /// `key` is required and missing.
    pub fn missing(&self, key: &str) -> OpError {
        OpError::Missing { op: self.op.to_string(), arg: key.to_string() }
    }
    /// `key`'s value breaks `rule` ("be a number").
    pub fn bad(&self, key: &str, rule: impl Into<String>) -> OpError {
        OpError::BadValue { op: self.op.to_string(), arg: key.to_string(), rule: rule.into() }
    }
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).copied()
    }
    pub fn only(&self, known: &[&str]) -> Result<(), OpError> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(OpError::UnknownArgument { op: self.op.to_string(), arg: k.clone(), known: known.join(", ") }),
            None => Ok(()),
        }
    }
    pub fn float(&self, key: &str) -> Result<Option<f64>, OpError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(key, "be a number")),
        }
    }
    pub(crate) fn side(&self, key: &str) -> Result<u32, OpError> {
        let v = self.get(key).and_then(Value::as_u64).unwrap_or(0);
        if v == 0 || v > 16384 {
            return Err(self.bad(key, "be a whole number from 1 to 16384"));
        }
        Ok(v as u32)
    }
    /// torchvision's size: `n` for a square, or `[h, w]`.
    pub fn size(&self, key: &str) -> Result<Option<Size2>, OpError> {
        let bad = || self.bad(key, "be n or [h, w], whole numbers from 1 to 16384");
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(_)) => {
                let n = self.side(key)?;
                Ok(Some(Size2::new(n, n)))
            }
            Some(Value::Sequence(s)) if s.len() == 2 => {
                let dim = |v: &Value| v.as_u64().filter(|n| (1..=16384).contains(n)).ok_or_else(bad);
                Ok(Some(Size2::new(dim(&s[1])? as u32, dim(&s[0])? as u32)))
            }
            Some(_) => Err(bad()),
        }
    }
    pub fn range(&self, key: &str, default: (f64, f64)) -> Result<(f64, f64), OpError> {
        let bad = || self.bad(key, "be [low, high] with 0 < low <= high");
        match self.get(key) {
            None => Ok(default),
            Some(Value::Sequence(s)) if s.len() == 2 => {
                let lo = s[0].as_f64().ok_or_else(bad)?;
                let hi = s[1].as_f64().ok_or_else(bad)?;
                if lo > 0.0 && lo <= hi && hi.is_finite() {
                    Ok((lo, hi))
                } else {
                    Err(bad())
                }
            }
            Some(_) => Err(bad()),
        }
    }
    pub fn triple(&self, key: &str) -> Result<Option<[f32; 3]>, OpError> {
        let bad = || self.bad(key, "be three numbers, one per RGB channel");
        match self.get(key) {
            None => Ok(None),
            Some(Value::Sequence(s)) if s.len() == 3 => {
                let mut out = [0f32; 3];
                for (o, v) in out.iter_mut().zip(s) {
                    *o = v.as_f64().ok_or_else(bad)? as f32;
                }
                Ok(Some(out))
            }
            Some(_) => Err(bad()),
        }
    }
    /// The operation's name, for errors built elsewhere.
    pub fn op(&self) -> &str {
        self.op
    }
    /// `interpolation` (bilinear by default) with antialiasing, the only resampling prepfs does;
    /// say so if a config asks for another.
    pub(crate) fn interpolation(&self) -> Result<Interpolation, OpError> {
        let unsupported = |setting| OpError::Unsupported { op: self.op.to_string(), setting };
        if let Some(v) = self.get("antialias") {
            if v.as_bool() != Some(true) {
                return Err(unsupported("antialias: true"));
            }
        }
        match self.get("interpolation") {
            None => Ok(Interpolation::Bilinear),
            Some(v) => v
                .as_str()
                .and_then(Interpolation::parse)
                .ok_or_else(|| unsupported("interpolation: bilinear, bicubic or random")),
        }
    }
}
