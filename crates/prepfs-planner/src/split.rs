//! A cache split in whole percent, `E-D-A` (encoded, decoded, augmented): its one parser (the
//! mount config's `split`, `prepfs plan --split` and parameter files all read it here), every
//! split at 1% steps, and a split's byte budgets.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::params::PlanError;

/// A cache split in whole percent: encoded, decoded, augmented, summing to 100.
///
/// Written `E-D-A`, e.g. `20-30-50`: the one parser of that syntax (the mount config's `split`,
/// `prepfs plan --split` and parameter files all read it here). Serialised as `[E, D, A]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "[u32; 3]")]
pub struct Split {
    e: u32,
    d: u32,
    a: u32,
}


impl Split {
    /// Everything to the augmented form: where a search with nothing to choose from falls back.
    pub(crate) const AUGMENTED_ONLY: Split = Split { e: 0, d: 0, a: 100 };

    /// A split from whole percentages; they must sum to 100.
    pub fn new(e: u32, d: u32, a: u32) -> Result<Split, PlanError> {
        if u64::from(e) + u64::from(d) + u64::from(a) != 100 {
            return Err(PlanError::Split {
                input: format!("{e}-{d}-{a}"),
                reason: format!(
                    "the parts sum to {}, not 100",
                    u64::from(e) + u64::from(d) + u64::from(a)
                ),
            });
        }
        Ok(Split { e, d, a })
    }

    /// Percent of the cache for encoded samples.
    pub fn e(self) -> u32 {
        self.e
    }

    /// Percent of the cache for decoded samples.
    pub fn d(self) -> u32 {
        self.d
    }

    /// Percent of the cache for augmented samples.
    pub fn a(self) -> u32 {
        self.a
    }

    /// `[E, D, A]` in percent.
    pub fn as_array(self) -> [u32; 3] {
        [self.e, self.d, self.a]
    }

    /// The byte budget of each form, `[encoded, decoded, augmented]`, for a cache of `bytes`:
    /// each its percent of `bytes`, rounded down, and the augmented budget takes the rounding,
    /// so the three add up to `bytes`. The one rule for budgets from a split (the cache's own
    /// uses it).
    pub fn budgets(self, bytes: u64) -> [u64; 3] {
        let part = |p: u32| (u128::from(bytes) * u128::from(p) / 100) as u64;
        let (e, d) = (part(self.e), part(self.d));
        [e, d, bytes - e - d]
    }

    /// Every split at 1% steps (5151), most augmented first, then most decoded: the order in
    /// which [`best_split`] breaks ties.
    pub fn all() -> impl Iterator<Item = Split> {
        (0..=100u32)
            .rev()
            .flat_map(|a| (0..=100 - a).rev().map(move |d| Split { e: 100 - a - d, d, a }))
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.e, self.d, self.a)
    }
}

impl FromStr for Split {
    type Err = PlanError;

    fn from_str(s: &str) -> Result<Split, PlanError> {
        let bad =
            |reason: &str| PlanError::Split { input: s.to_string(), reason: reason.to_string() };
        let parts: Vec<&str> = s.trim().split('-').map(str::trim).collect();
        let [e, d, a] = parts.as_slice() else {
            return Err(bad("not three parts separated by `-`"));
        };
        let num = |p: &str| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("each part must be a whole number from 0 to 100"));
            }
            p.parse::<u32>()
                .ok()
                .filter(|&v| v <= 100)
                .ok_or_else(|| bad("each part must be a whole number from 0 to 100"))
        };
        let (e, d, a) = (num(e)?, num(d)?, num(a)?);
        if e + d + a != 100 {
            return Err(bad(&format!("the parts sum to {}, not 100", e + d + a)));
        }
        Ok(Split { e, d, a })
    }
}

impl From<Split> for [u32; 3] {
    fn from(split: Split) -> [u32; 3] {
        split.as_array()
    }
}

impl TryFrom<String> for Split {
    type Error = PlanError;

    fn try_from(s: String) -> Result<Split, PlanError> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seneca::tests::split;

    #[test]
    fn splits_parse_from_e_d_a() {
        let s = split("20-30-50");
        assert_eq!((s.e(), s.d(), s.a()), (20, 30, 50));
        assert_eq!(s.as_array(), [20, 30, 50]);
        assert_eq!(s.to_string(), "20-30-50");
        assert_eq!(split(" 100-0-0 "), Split::new(100, 0, 0).expect("valid"));
        assert_eq!(split("0 - 48 - 52"), Split::new(0, 48, 52).expect("valid"));
        let s: Split = serde_norway::from_str("\"58-42-0\"").expect("valid");
        assert_eq!(s, split("58-42-0"));
    }

    #[test]
    fn bad_splits_are_refused_with_the_reason() {
        for (input, why) in [
            ("20-30-40", "sum to 90"),
            ("60-30-50", "sum to 140"),
            ("20-30", "three parts"),
            ("20-30-50-0", "three parts"),
            ("a-b-c", "whole number"),
            ("20.5-29.5-50", "whole number"),
            ("-20-70-50", "three parts"),
            ("+20-30-50", "whole number"),
            ("200-0-0", "whole number"),
            ("", "three parts"),
            ("auto", "three parts"),
        ] {
            let err = input.parse::<Split>().expect_err(input).to_string();
            assert!(err.contains(why) && err.contains("E-D-A"), "{input}: {err}");
        }
        assert!(Split::new(50, 50, 1).is_err());
    }

    #[test]
    fn budgets_add_up_to_the_cache() {
        let [e, d, a] = split("33-33-34").budgets(1001);
        assert_eq!(e + d + a, 1001);
        assert_eq!((e, d), (330, 330));
        assert_eq!(split("0-0-100").budgets(u64::MAX), [0, 0, u64::MAX]);
    }
}
