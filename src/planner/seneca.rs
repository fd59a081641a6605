//! Seneca's DSI throughput model (Desai et al., "Preparation Meets Opportunity", FAST '26,
//! section 5.1, Eqs. 1-9) as pure functions: `prepfs plan --model seneca`, the anchor prepfs's
//! own model (see [`super::prepfs`]) is compared with.
//!
//! This module owns the model and its inputs: the parameter file (`prepfs plan --params`), the
//! `E-D-A` split, the evaluation of one split, the search for the best one, and the JSON the
//! `plan` subcommand prints. It reads no clock and measures nothing; whoever measures the machine
//! (the `split: auto` path) builds a [`PlanParams`] and searches (`run::best_over_the_run` for
//! prepfs's model, [`best_split`] for this one).
//!
//! # The model
//!
//! The cache (`s_cache` bytes) is split into three budgets, `x_E`, `x_D`, `x_A` (fractions of it)
//! for encoded, decoded and augmented samples. Under random sampling a sample is found in the
//! form that holds it, so the share of samples each form holds is the share of requests that
//! take that form's path. Augmented samples are admitted first, then decoded, then encoded
//! (Seneca's fill order):
//!
//! - Eq. 2: `N_A = min(n_total, x_A * s_cache / s_augmented)`
//! - Eq. 4: `N_D = min(n_total - N_A, x_D * s_cache / s_decoded)`
//! - Eq. 6: `N_E = min(n_total - N_A - N_D, x_E * s_cache / s_data)`
//! - Eq. 8: `N_S = n_total - N_A - N_D - N_E` (fetched from storage)
//!
//! Each path's rate is the minimum over the resources it crosses. With `n = nodes`, the links
//! and compute rates are per node and scale with the nodes (homogeneous data-parallel nodes);
//! gradient synchronisation takes `c_nw` of each node's NIC and `c_pcie` of its PCIe link
//! (0 with NVLink, and `c_nw` is 0 on one node). `b_cache` and `b_storage` are the shared
//! services' aggregate rates:
//!
//! - Eq. 1: `DSI_A = min(b_cache / s_augmented, n (b_nic - c_nw) / s_augmented,
//!   n (b_pcie - c_pcie) / s_augmented, n t_gpu)`
//! - Eq. 3: `DSI_D = min(b_cache / s_decoded, n (b_nic - c_nw) / s_decoded, n t_a,
//!   n (b_pcie - c_pcie) / s_augmented, n t_gpu)`
//! - Eq. 5: `DSI_E = min(b_cache / s_data, n (b_nic - c_nw) / s_data, n t_da,
//!   n (b_pcie - c_pcie) / s_augmented, n t_gpu)`
//! - Eq. 7: `DSI_S = min(b_storage / s_data, DSI_E)` (a storage fetch then takes the encoded path)
//! - Eq. 9: `DSI_overall = (N_A DSI_A + N_D DSI_D + N_E DSI_E + N_S DSI_S) / n_total`
//!
//! What reaches the GPU over PCIe is always the augmented sample; what crosses the cache's
//! bandwidth and the NIC is the form the path reads. The search ([`best_split`]) tries every
//! split at 1% steps (5151 of them), as the paper does.
//!
//! Sources: the equations' shape and numbering (N_A, N_D, N_E are Eqs. 2, 4 and 6; the weighted
//! sum is Eq. 9) follow the paper's section 5.1; the odd numbers for the path rates and Eq. 8 for
//! `N_S` follow from that interleaving. The exact terms were checked against the authors'
//! released code (`utility/model_driven_partition.py` in `swiftomkar/seneca-fast26-pytorch`).
//! Where that code differs from the paper's text we follow the text: the augmented path has a
//! PCIe term (the code omits it); the encoded budget is divided by `s_data` (the code allows a
//! separate in-memory size of an encoded entry; and it sizes an augmented entry at
//! `2 * M * s_data` — give `s_augmented` that value to reproduce it); the search includes the
//! splits with `x_E = 100%` (the code's loop stops at 99).
//!
//! # The generalisation
//!
//! The paper uses one inflation factor `M`: decoded and augmented samples are both `M * s_data`
//! bytes. Here they are two sizes, `s_decoded` and `s_augmented` (a 500x375 JPEG decodes to
//! 562,500 bytes but is served as a 224x224 crop of 150,528), each used wherever the paper has
//! `M * s_data` for that form. With both equal to `M * s_data` (in a parameter file: `m: M`) the
//! results are the paper's.
//!
//! Sample counts are real numbers, as in the paper (no rounding to whole samples).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

pub use crate::yaml::Line;

/// The model's inputs, in the paper's symbols and SI units: bytes, bytes/s, samples/s.
///
/// Rates marked "per node" are one node's and are multiplied by `nodes`. A rate may be
/// `f64::INFINITY` (`.inf` in YAML) where that resource is not on the data path (for example
/// `b_nic` when the cache is in local memory), except `b_cache` and `b_storage`, which must be
/// finite so that every path has a finite rate.
///
/// Parsed from YAML with unknown keys refused; in a file, `m` may stand for both `s_decoded` and
/// `s_augmented` (as `m * s_data`), and `t_gpu` may be left out or null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPlanParams")]
pub struct PlanParams {
    /// Samples in the dataset.
    pub n_total: u64,
    /// Mean size of an encoded sample (the source file), bytes.
    pub s_data: f64,
    /// Mean size of a decoded sample (pixels), bytes. The paper's `M * s_data`.
    pub s_decoded: f64,
    /// Mean size of an augmented sample (what the consumer receives), bytes. The paper's
    /// `M * s_data`.
    pub s_augmented: f64,
    /// Cache capacity, bytes (0: no cache).
    pub s_cache: f64,
    /// Cache read bandwidth, bytes/s, aggregate (finite).
    pub b_cache: f64,
    /// NIC bandwidth between the cache/storage and a training node, bytes/s, per node.
    pub b_nic: f64,
    /// Host-to-accelerator (PCIe) bandwidth, bytes/s, per node.
    pub b_pcie: f64,
    /// Storage read bandwidth, bytes/s, aggregate (finite).
    pub b_storage: f64,
    /// Consumer (GPU training) rate, samples/s, per node; `None`: unbounded.
    pub t_gpu: Option<f64>,
    /// CPU decode + augment rate, samples/s, per node.
    pub t_da: f64,
    /// CPU augment-only rate (from decoded pixels), samples/s, per node.
    pub t_a: f64,
    /// Training nodes (homogeneous, data parallel).
    pub nodes: u32,
    /// NIC bandwidth taken by gradient synchronisation, bytes/s, per node (0 on one node).
    pub c_nw: f64,
    /// PCIe bandwidth taken by gradient synchronisation, bytes/s, per node (0 with NVLink).
    pub c_pcie: f64,
    /// prepfs's model only: the rate the mount serves a cached output at, FUSE round trips and
    /// the readers' own work included, samples/s, per node, on all its cores; `None`: not
    /// measured (the model then takes [`super::prepfs::DEFAULT_SERVE_PER_CORE`] per core).
    pub t_serve: Option<f64>,
    /// prepfs's model only: the training jobs that share each augmented output (1: one job).
    pub jobs: u32,
    /// prepfs's model only: the cores the CPU rates (`t_da`, `t_a`, `t_serve`) were measured
    /// on, for the default serve rate.
    pub cores: u32,
    /// prepfs's model only: the directories (classes) the samples are in. A job's substitute
    /// comes from the requested file's directory, so what one job's miss made waits in the
    /// cache until the other jobs' requests reach that directory (1: one directory).
    pub dirs: u32,
    /// prepfs's model only: bytes the remote tier shared by the nodes holds (0: none). A
    /// sample missing from a node's memory is read from it, across that node's NIC, where it
    /// holds the sample, before the storage.
    pub s_remote: f64,
    /// prepfs's model only: the mean bytes of a sample in the remote tier (encoded bytes or
    /// decoded pixels, as the mounts wrote it).
    pub s_remote_entry: f64,
    /// prepfs's model only: the share of the remote tier's samples held as decoded pixels
    /// (only an augment left to do); the rest are encoded bytes (a decode and an augment).
    pub remote_decoded: f64,
    /// prepfs's model only: seconds a read from the remote tier takes (its round trip and the
    /// transfer), charged to the node's time per sample read from it.
    pub t_remote: f64,
    /// prepfs's model only: core-seconds a read from the storage costs the node's CPU (the
    /// system call, the copy, the buffer's pages; 0: free, as behind a slow link).
    pub t_read: f64,
}


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

/// One split evaluated: how many samples each form holds, each path's rate, and the overall
/// predicted rate (samples/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Evaluation {
    /// Samples held augmented (Eq. 2).
    pub n_a: f64,
    /// Samples held decoded (Eq. 4).
    pub n_d: f64,
    /// Samples held encoded (Eq. 6).
    pub n_e: f64,
    /// Samples read from storage (Eq. 8).
    pub n_storage: f64,
    /// prepfs's model only: samples read from the remote tier (0 in Seneca's).
    pub n_remote: f64,
    /// Rate of the augmented-hit path (Eq. 1).
    pub dsi_a: f64,
    /// Rate of the decoded-hit path (Eq. 3).
    pub dsi_d: f64,
    /// Rate of the encoded-hit path (Eq. 5).
    pub dsi_e: f64,
    /// Rate of the storage path (Eq. 7).
    pub dsi_s: f64,
    /// `DSI_overall` (Eq. 9), samples/s.
    pub samples_per_s: f64,
}

/// A refused parameter file or split.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The parameter file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Something in a parameter file was refused.
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<PlanError>,
    },
    /// Not YAML, an unknown key, or a value of the wrong type; serde_norway's message names the
    /// key and the line.
    #[error("{0}")]
    Yaml(String),
    /// A required key is absent.
    #[error("missing key `{key}`{hint}")]
    Missing { key: &'static str, hint: &'static str },
    /// A required key is present but null.
    #[error("`{key}`{line}: null, but a value is needed")]
    Null { key: &'static str, line: Line },
    /// `m` given together with an explicit size it stands for.
    #[error(
        "`m` and `{key}`{line} both given: `m` stands for both `s_decoded` and `s_augmented` \
         (as m * s_data); give `m` or the two sizes"
    )]
    Conflict { key: &'static str, line: Line },
    /// A value out of its range.
    #[error("`{key}`{line}: {reason}")]
    Invalid { key: &'static str, line: Line, reason: String },
    /// A split that is not `E-D-A` in whole percent summing to 100.
    #[error("bad split `{input}`: {reason} (expected E-D-A: three whole percentages for encoded, decoded and augmented that sum to 100, e.g. 20-30-50)")]
    Split { input: String, reason: String },
}

// ---------------------------------------------------------------------------------------------
// Splits

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

// ---------------------------------------------------------------------------------------------
// The model

/// Evaluates one split: Eqs. 1-9.
///
/// `params` should have passed `PlanParams::validate_in` (as a parameter file's are); for parameters that did not, the
/// numbers are meaningless (but nothing panics).
pub fn evaluate(params: &PlanParams, split: Split) -> Evaluation {
    let p = params;
    let n_total = p.n_total as f64;
    let fraction = |percent: u32| f64::from(percent) / 100.0;

    // Eqs. 2, 4, 6, 8: fill order augmented, decoded, encoded; the rest comes from storage.
    let n_a = n_total.min(fraction(split.a) * p.s_cache / p.s_augmented);
    let n_d = (n_total - n_a).max(0.0).min(fraction(split.d) * p.s_cache / p.s_decoded);
    let n_e = (n_total - n_a - n_d).max(0.0).min(fraction(split.e) * p.s_cache / p.s_data);
    let n_storage = (n_total - n_a - n_d - n_e).max(0.0);

    let nodes = f64::from(p.nodes);
    let nic = nodes * (p.b_nic - p.c_nw);
    let pcie = nodes * (p.b_pcie - p.c_pcie) / p.s_augmented;
    let gpu = p.t_gpu.map_or(f64::INFINITY, |t| nodes * t);

    // Eqs. 1, 3, 5, 7.
    let dsi_a = min_of(&[p.b_cache / p.s_augmented, nic / p.s_augmented, pcie, gpu]);
    let dsi_d = min_of(&[p.b_cache / p.s_decoded, nic / p.s_decoded, nodes * p.t_a, pcie, gpu]);
    let dsi_e = min_of(&[p.b_cache / p.s_data, nic / p.s_data, nodes * p.t_da, pcie, gpu]);
    let dsi_s = min_of(&[p.b_storage / p.s_data, dsi_e]);

    // Eq. 9.
    let samples_per_s = (n_a * dsi_a + n_d * dsi_d + n_e * dsi_e + n_storage * dsi_s) / n_total;

    Evaluation { n_a, n_d, n_e, n_storage, n_remote: 0.0, dsi_a, dsi_d, dsi_e, dsi_s, samples_per_s }
}

fn min_of(rates: &[f64]) -> f64 {
    rates.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Two predicted rates closer than this (relative) are a tie, so that rounding in the last bits
/// cannot decide the split.
const TIE_TOLERANCE: f64 = 1e-9;

/// The best split at 1% steps (all 5151) and its evaluation.
///
/// Ties: every split whose rate is within one part in 10^9 of the best counts as best, and of
/// those the one with the largest augmented share wins, then the largest decoded share (the
/// order of [`Split::all`]). At equal predicted throughput that is the split whose hits need the
/// least CPU work, and when the cache is larger than the data needs, it puts the spare bytes
/// where the model is indifferent rather than inventing a preference.
#[cfg(test)]
pub(crate) fn best_split(params: &PlanParams) -> (Split, Evaluation) {
    best_split_by(params, evaluate)
}

/// [`best_split`] for any model's evaluation function (same search, same ties).
pub(crate) fn best_split_by(params: &PlanParams, evaluate: impl Fn(&PlanParams, Split) -> Evaluation) -> (Split, Evaluation) {
    let all: Vec<(Split, Evaluation)> = Split::all().map(|s| (s, evaluate(params, s))).collect();
    let best = all.iter().map(|(_, ev)| ev.samples_per_s).fold(f64::NEG_INFINITY, f64::max);
    let floor = best - best.abs() * TIE_TOLERANCE;
    all.iter()
        .find(|(_, ev)| ev.samples_per_s >= floor)
        .or_else(|| all.first())
        .copied()
        .unwrap_or_else(|| (Split::AUGMENTED_ONLY, evaluate(params, Split::AUGMENTED_ONLY)))
}

/// What `prepfs plan` prints: `{"split": [E, D, A], "samples_per_s": X}` for the best split,
/// plus `"evaluated": {"split": [...], "samples_per_s": Y}` for `split` when one is given.
pub fn plan_json(params: &PlanParams, split: Option<Split>) -> serde_json::Value {
    plan_json_by(params, split, evaluate)
}

/// [`plan_json`] for any model's evaluation function.
pub(crate) fn plan_json_by(
    params: &PlanParams,
    split: Option<Split>,
    evaluate: impl Fn(&PlanParams, Split) -> Evaluation + Copy,
) -> serde_json::Value {
    let (best, best_eval) = best_split_by(params, evaluate);
    let mut out = serde_json::json!({
        "split": best.as_array(),
        "samples_per_s": best_eval.samples_per_s,
    });
    if let (Some(split), Some(map)) = (split, out.as_object_mut()) {
        let ev = evaluate(params, split);
        map.insert(
            "evaluated".to_string(),
            serde_json::json!({ "split": split.as_array(), "samples_per_s": ev.samples_per_s }),
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Parameters

impl PlanParams {
    /// Checks every value's range (see the field docs), naming the key's line of `text`.
    fn validate_in(&self, text: &str) -> Result<(), PlanError> {
        let invalid = |key: &'static str, reason: String| PlanError::Invalid {
            key,
            line: Line::of(text, key),
            reason,
        };
        if self.n_total == 0 {
            return Err(invalid("n_total", "must be at least 1".into()));
        }
        if self.nodes == 0 {
            return Err(invalid("nodes", "must be at least 1".into()));
        }
        for (key, v) in [
            ("s_data", self.s_data),
            ("s_decoded", self.s_decoded),
            ("s_augmented", self.s_augmented),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(key, format!("must be a positive number of bytes, got {v}")));
            }
        }
        if !(self.s_cache.is_finite() && self.s_cache >= 0.0) {
            return Err(invalid(
                "s_cache",
                format!("must be a number of bytes, 0 or more, got {}", self.s_cache),
            ));
        }
        for (key, v) in [("b_cache", self.b_cache), ("b_storage", self.b_storage)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(
                    key,
                    format!("must be a positive, finite rate in bytes/s, got {v}"),
                ));
            }
        }
        let rates = [
            ("b_nic", self.b_nic),
            ("b_pcie", self.b_pcie),
            ("t_da", self.t_da),
            ("t_a", self.t_a),
        ];
        let optional = self.t_gpu.map(|t| ("t_gpu", t)).into_iter().chain(self.t_serve.map(|t| ("t_serve", t)));
        for (key, v) in rates.into_iter().chain(optional) {
            if v.is_nan() || v <= 0.0 {
                return Err(invalid(
                    key,
                    format!("must be a positive rate (or .inf for no limit), got {v}"),
                ));
            }
        }
        if !(self.s_remote.is_finite() && self.s_remote >= 0.0) {
            return Err(invalid("s_remote", format!("must be a number of bytes, 0 or more, got {}", self.s_remote)));
        }
        if !(self.s_remote_entry.is_finite() && self.s_remote_entry > 0.0) {
            return Err(invalid("s_remote_entry", format!("must be a positive number of bytes, got {}", self.s_remote_entry)));
        }
        if !(self.t_remote.is_finite() && self.t_remote >= 0.0) {
            return Err(invalid("t_remote", format!("must be a number of seconds, 0 or more, got {}", self.t_remote)));
        }
        if !(self.t_read.is_finite() && self.t_read >= 0.0) {
            return Err(invalid("t_read", format!("must be a number of seconds, 0 or more, got {}", self.t_read)));
        }
        if !(0.0..=1.0).contains(&self.remote_decoded) {
            return Err(invalid("remote_decoded", format!("must be a share from 0 to 1, got {}", self.remote_decoded)));
        }
        for (key, c, link, b) in [
            ("c_nw", self.c_nw, "b_nic", self.b_nic),
            ("c_pcie", self.c_pcie, "b_pcie", self.b_pcie),
        ] {
            if !(c.is_finite() && c >= 0.0) {
                return Err(invalid(key, format!("must be a rate in bytes/s, 0 or more, got {c}")));
            }
            if c >= b {
                return Err(invalid(
                    key,
                    format!("{c} leaves nothing of `{link}` ({b}) for samples"),
                ));
            }
        }
        Ok(())
    }
}

/// The parameter file as written: every key optional here so that a missing one is reported by
/// name, and null told apart from absent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlanParams {
    #[serde(default, deserialize_with = "present")]
    n_total: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    s_data: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    s_decoded: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    s_augmented: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    m: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    s_cache: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_cache: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_nic: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_pcie: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_storage: Option<Option<f64>>,
    #[serde(default)]
    t_gpu: Option<f64>,
    #[serde(default, deserialize_with = "present")]
    t_da: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    t_a: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    nodes: Option<Option<u32>>,
    #[serde(default, deserialize_with = "present")]
    c_nw: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    c_pcie: Option<Option<f64>>,
    #[serde(default)]
    t_serve: Option<f64>,
    #[serde(default)]
    jobs: Option<u32>,
    #[serde(default)]
    cores: Option<u32>,
    #[serde(default)]
    dirs: Option<u32>,
    #[serde(default)]
    s_remote: Option<f64>,
    #[serde(default)]
    s_remote_entry: Option<f64>,
    #[serde(default)]
    remote_decoded: Option<f64>,
    #[serde(default)]
    t_remote: Option<f64>,
    #[serde(default)]
    t_read: Option<f64>,
}

/// A key that is present deserialises to `Some(value or None for null)`; `#[serde(default)]`
/// makes an absent one `None`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl RawPlanParams {
    fn resolve(self, text: &str) -> Result<PlanParams, PlanError> {
        fn need<T>(text: &str, key: &'static str, v: Option<Option<T>>) -> Result<T, PlanError> {
            match v {
                Some(Some(v)) => Ok(v),
                Some(None) => Err(PlanError::Null { key, line: Line::of(text, key) }),
                None => Err(PlanError::Missing { key, hint: "" }),
            }
        }
        let s_data = need(text, "s_data", self.s_data)?;
        let (s_decoded, s_augmented) = match self.m {
            Some(m) => {
                for (key, given) in [
                    ("s_decoded", self.s_decoded.is_some()),
                    ("s_augmented", self.s_augmented.is_some()),
                ] {
                    if given {
                        return Err(PlanError::Conflict {
                            key,
                            line: Line::of(text, key),
                        });
                    }
                }
                let m =
                    m.ok_or(PlanError::Null { key: "m", line: Line::of(text, "m") })?;
                if !(m.is_finite() && m > 0.0) {
                    return Err(PlanError::Invalid {
                        key: "m",
                        line: Line::of(text, "m"),
                        reason: format!("must be a positive factor, got {m}"),
                    });
                }
                (m * s_data, m * s_data)
            }
            None => {
                const HINT: &str =
                    " (or give `m`: decoded and augmented samples are then m * s_data bytes)";
                let size = |key: &'static str, v: Option<Option<f64>>| match v {
                    None => Err(PlanError::Missing { key, hint: HINT }),
                    v => need(text, key, v),
                };
                (size("s_decoded", self.s_decoded)?, size("s_augmented", self.s_augmented)?)
            }
        };
        let params = PlanParams {
            n_total: need(text, "n_total", self.n_total)?,
            s_data,
            s_decoded,
            s_augmented,
            s_cache: need(text, "s_cache", self.s_cache)?,
            b_cache: need(text, "b_cache", self.b_cache)?,
            b_nic: need(text, "b_nic", self.b_nic)?,
            b_pcie: need(text, "b_pcie", self.b_pcie)?,
            b_storage: need(text, "b_storage", self.b_storage)?,
            t_gpu: self.t_gpu.filter(|t| *t != f64::INFINITY),
            t_da: need(text, "t_da", self.t_da)?,
            t_a: need(text, "t_a", self.t_a)?,
            nodes: need(text, "nodes", self.nodes)?,
            c_nw: need(text, "c_nw", self.c_nw)?,
            c_pcie: need(text, "c_pcie", self.c_pcie)?,
            t_serve: self.t_serve.filter(|t| *t != f64::INFINITY),
            jobs: self.jobs.unwrap_or(1).max(1),
            cores: self.cores.unwrap_or(1).max(1),
            dirs: self.dirs.unwrap_or(1).max(1),
            s_remote: self.s_remote.unwrap_or(0.0),
            s_remote_entry: self.s_remote_entry.unwrap_or(s_data),
            remote_decoded: self.remote_decoded.unwrap_or(0.0),
            t_remote: self.t_remote.unwrap_or(0.0),
            t_read: self.t_read.unwrap_or(0.0),
        };
        params.validate_in(text)?;
        Ok(params)
    }
}

impl TryFrom<RawPlanParams> for PlanParams {
    type Error = PlanError;

    fn try_from(raw: RawPlanParams) -> Result<PlanParams, PlanError> {
        raw.resolve("")
    }
}

/// Parses and validates a parameter file's text.
pub(crate) fn parse_params(text: &str) -> Result<PlanParams, PlanError> {
    let text_or_empty_map = if text.trim().is_empty() { "{}" } else { text };
    let raw: RawPlanParams =
        serde_norway::from_str(text_or_empty_map).map_err(|e| PlanError::Yaml(crate::yaml::describe_error(&e)))?;
    raw.resolve(text)
}

/// Reads, parses and validates a parameter file (YAML).
pub fn load_params(path: impl AsRef<Path>) -> Result<PlanParams, PlanError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|source| PlanError::Read { path: path.to_path_buf(), source })?;
    parse_params(&text)
        .map_err(|e| PlanError::InFile { path: path.to_path_buf(), source: Box::new(e) })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small dataset with round numbers; every limit is far away unless a test brings it in.
    /// Rates: cache 1e9 B/s gives 4e6/s augmented, 2e6/s decoded, 1e7/s encoded; storage
    /// 1e6 B/s gives 1e4/s; CPU 1,000/s decode+augment, 5,000/s augment.
    pub(crate) fn base() -> PlanParams {
        PlanParams {
            n_total: 1000,
            s_data: 100.0,
            s_decoded: 500.0,
            s_augmented: 250.0,
            s_cache: 0.0,
            b_cache: 1e9,
            b_nic: f64::INFINITY,
            b_pcie: f64::INFINITY,
            b_storage: 1e6,
            t_gpu: None,
            t_da: 1000.0,
            t_a: 5000.0,
            nodes: 1,
            c_nw: 0.0,
            c_pcie: 0.0,
            t_serve: None,
            jobs: 1,
            cores: 1,
            dirs: 1,
            s_remote: 0.0,
            s_remote_entry: 100.0,
            remote_decoded: 0.0,
            t_remote: 0.0,
            t_read: 0.0,
        }
    }

    fn split(s: &str) -> Split {
        s.parse().expect("valid split")
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[track_caller]
    fn assert_close(actual: f64, expected: f64) {
        assert!(close(actual, expected), "expected {expected}, got {actual}");
    }

    const BASE_YAML: &str = "\
n_total: 1000
s_data: 100
s_decoded: 500
s_augmented: 250
s_cache: 0
b_cache: 1.0e9
b_nic: .inf
b_pcie: .inf
b_storage: 1.0e6
t_gpu: null
t_da: 1000
t_a: 5000
nodes: 1
c_nw: 0
c_pcie: 0
";

    // --- the model, hand-worked -------------------------------------------------------------

    #[test]
    fn a_dataset_that_fits_entirely_is_all_augmented_hits_at_dsi_a() {
        let p = PlanParams { s_cache: 1000.0 * 250.0, ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        assert_close(ev.n_a, 1000.0);
        assert_eq!((ev.n_d, ev.n_e, ev.n_storage), (0.0, 0.0, 0.0));
        assert_close(ev.dsi_a, 1e9 / 250.0);
        assert_close(ev.samples_per_s, ev.dsi_a);
        let (best, best_ev) = best_split(&p);
        assert_eq!(best, split("0-0-100"));
        assert_eq!(best_ev, ev);
    }

    #[test]
    fn a_mixed_split_weights_each_path_by_the_samples_on_it() {
        // 1e5 bytes, 20-30-50: augmented 5e4/250 = 200, decoded 3e4/500 = 60,
        // encoded 2e4/100 = 200, storage 540.
        let p = PlanParams { s_cache: 1e5, b_storage: 5e4, ..base() };
        let ev = evaluate(&p, split("20-30-50"));
        assert_close(ev.n_a, 200.0);
        assert_close(ev.n_d, 60.0);
        assert_close(ev.n_e, 200.0);
        assert_close(ev.n_storage, 540.0);
        assert_close(ev.dsi_a, 4e6);
        assert_close(ev.dsi_d, 5000.0); // t_a
        assert_close(ev.dsi_e, 1000.0); // t_da
        assert_close(ev.dsi_s, 500.0); // 5e4 B/s over 100 B
        assert_close(
            ev.samples_per_s,
            (200.0 * 4e6 + 60.0 * 5000.0 + 200.0 * 1000.0 + 540.0 * 500.0) / 1000.0,
        );
        assert_close(ev.samples_per_s, 800_770.0);
    }

    #[test]
    fn forms_fill_in_order_and_never_hold_more_than_the_dataset() {
        // 3e5 bytes, 20-30-50: augmented 1.5e5/250 = 600, decoded 9e4/500 = 180,
        // encoded could hold 600 but only 220 are left.
        let p = PlanParams { s_cache: 3e5, ..base() };
        let ev = evaluate(&p, split("20-30-50"));
        assert_close(ev.n_a, 600.0);
        assert_close(ev.n_d, 180.0);
        assert_close(ev.n_e, 220.0);
        assert_eq!(ev.n_storage, 0.0);
        // A cache ten times the augmented dataset: augmented takes all, the others nothing.
        let p = PlanParams { s_cache: 2.5e6, ..base() };
        let ev = evaluate(&p, split("30-30-40"));
        assert_close(ev.n_a, 1000.0);
        assert_eq!((ev.n_d, ev.n_e, ev.n_storage), (0.0, 0.0, 0.0));
    }

    #[test]
    fn storage_bound() {
        // No cache: every sample comes from storage at 1e4 B/s / 100 B = 100/s, below t_da.
        let p = PlanParams { b_storage: 1e4, ..base() };
        for s in ["100-0-0", "0-100-0", "0-0-100", "20-30-50"] {
            let ev = evaluate(&p, split(s));
            assert_close(ev.n_storage, 1000.0);
            assert_close(ev.dsi_s, 100.0);
            assert_close(ev.samples_per_s, 100.0);
        }
        // Every split ties; the tie rule picks the most augmented.
        assert_eq!(best_split(&p).0, split("0-0-100"));
    }

    #[test]
    fn cpu_decode_bound() {
        // Storage is fast (1e4/s), so the storage path is bound by decode+augment: 1,000/s.
        let ev = evaluate(&base(), split("100-0-0"));
        assert_close(ev.dsi_s, 1000.0);
        assert_close(ev.samples_per_s, 1000.0);
        // All encoded in cache: still 1,000/s, so caching encoded bytes buys nothing here.
        let p = PlanParams { s_cache: 1e5, ..base() };
        let ev = evaluate(&p, split("100-0-0"));
        assert_close(ev.n_e, 1000.0);
        assert_close(ev.dsi_e, 1000.0);
        assert_close(ev.samples_per_s, 1000.0);
    }

    #[test]
    fn cpu_augment_bound() {
        // All decoded in cache (1000 * 500 bytes): augment-only at 5,000/s.
        let p = PlanParams { s_cache: 5e5, ..base() };
        let ev = evaluate(&p, split("0-100-0"));
        assert_close(ev.n_d, 1000.0);
        assert_close(ev.dsi_d, 5000.0);
        assert_close(ev.samples_per_s, 5000.0);
    }

    #[test]
    fn cache_bandwidth_bound() {
        // 2.5e6 B/s: augmented hits 2.5e6 / 250 = 1e4/s.
        let p = PlanParams { s_cache: 2.5e5, b_cache: 2.5e6, ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        assert_close(ev.dsi_a, 1e4);
        assert_close(ev.samples_per_s, 1e4);
        // Decoded hits read 500 bytes each: 2e6 / 500 = 4,000/s, below t_a (5,000/s); the
        // decoded size, not the augmented one, is what crosses the cache's bandwidth.
        let p = PlanParams { s_cache: 5e5, b_cache: 2e6, ..base() };
        let ev = evaluate(&p, split("0-100-0"));
        assert_close(ev.dsi_d, 4000.0);
        assert_close(ev.samples_per_s, 4000.0);
    }

    #[test]
    fn consumer_bound() {
        let p = PlanParams { s_cache: 2.5e5, t_gpu: Some(2000.0), ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        assert_close(ev.dsi_a, 2000.0);
        assert_close(ev.samples_per_s, 2000.0);
        // The consumer rate is per node.
        let p = PlanParams { nodes: 2, ..p };
        assert_close(evaluate(&p, split("0-0-100")).samples_per_s, 4000.0);
        // Every path is capped by it.
        let p = PlanParams { t_gpu: Some(10.0), ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        for r in [ev.dsi_a, ev.dsi_d, ev.dsi_e, ev.dsi_s, ev.samples_per_s] {
            assert_close(r, 10.0);
        }
    }

    #[test]
    fn pcie_bound_carries_the_augmented_sample_on_every_path() {
        // 2.5e5 B/s over 250-byte augmented samples: 1,000/s.
        let p = PlanParams { s_cache: 2.5e5, b_pcie: 2.5e5, t_a: 1e6, t_da: 1e6, ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        assert_close(ev.samples_per_s, 1000.0);
        for r in [ev.dsi_a, ev.dsi_d, ev.dsi_e] {
            assert_close(r, 1000.0);
        }
        // Gradient traffic takes its share of the link...
        let p = PlanParams { c_pcie: 1.25e5, ..p };
        assert_close(evaluate(&p, split("0-0-100")).samples_per_s, 500.0);
        // ...and the links are per node.
        let p = PlanParams { nodes: 2, ..p };
        assert_close(evaluate(&p, split("0-0-100")).samples_per_s, 1000.0);
    }

    #[test]
    fn nic_bound_carries_the_form_the_path_reads() {
        let p = PlanParams { s_cache: 2.5e5, b_nic: 5e5, t_a: 1e6, t_da: 1e6, ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        assert_close(ev.dsi_a, 2000.0); // 5e5 / 250
        assert_close(ev.dsi_d, 1000.0); // 5e5 / 500
        assert_close(ev.dsi_e, 5000.0); // 5e5 / 100
        assert_close(ev.samples_per_s, 2000.0);
        // Two nodes, each losing 2.5e5 B/s to gradient synchronisation: 2 * 2.5e5 / 250.
        let p = PlanParams { nodes: 2, c_nw: 2.5e5, ..p };
        assert_close(evaluate(&p, split("0-0-100")).samples_per_s, 2000.0);
    }

    #[test]
    fn compute_rates_scale_with_nodes() {
        let p = PlanParams { nodes: 4, ..base() };
        let ev = evaluate(&p, split("100-0-0"));
        assert_close(ev.dsi_e, 4000.0);
        assert_close(ev.dsi_d, 20_000.0);
        assert_close(ev.samples_per_s, 4000.0);
    }

    // --- the generalisation and the paper -----------------------------------------------------

    /// The paper's model, written out with one inflation factor `m` (decoded = augmented =
    /// m * s_data), independently of [`evaluate`].
    fn paper_rate(p: &PlanParams, m: f64, x: (f64, f64, f64)) -> f64 {
        let (xe, xd, xa) = x;
        let (n, ms) = (p.n_total as f64, m * p.s_data);
        let na = n.min(xa * p.s_cache / ms);
        let nd = (n - na).min(xd * p.s_cache / ms);
        let ne = (n - na - nd).min(xe * p.s_cache / p.s_data);
        let ns = n - na - nd - ne;
        let k = f64::from(p.nodes);
        let gpu = p.t_gpu.map_or(f64::INFINITY, |t| k * t);
        let nic = k * (p.b_nic - p.c_nw);
        let pcie = k * (p.b_pcie - p.c_pcie) / ms;
        let a = (p.b_cache / ms).min(nic / ms).min(pcie).min(gpu);
        let d = (p.b_cache / ms).min(nic / ms).min(k * p.t_a).min(pcie).min(gpu);
        let e = (p.b_cache / p.s_data).min(nic / p.s_data).min(k * p.t_da).min(pcie).min(gpu);
        let s = (p.b_storage / p.s_data).min(e);
        (na * a + nd * d + ne * e + ns * s) / n
    }

    #[test]
    fn the_m_shorthand_equals_explicit_sizes_and_gives_the_papers_results() {
        let with_m = parse_params(
            &BASE_YAML
                .replace("s_decoded: 500\ns_augmented: 250\n", "m: 3\n")
                .replace("s_cache: 0", "s_cache: 150000"),
        )
        .expect("valid");
        let explicit = parse_params(
            &BASE_YAML
                .replace("s_decoded: 500", "s_decoded: 300")
                .replace("s_augmented: 250", "s_augmented: 300")
                .replace("s_cache: 0", "s_cache: 150000"),
        )
        .expect("valid");
        assert_eq!(with_m, explicit);
        assert_eq!((with_m.s_decoded, with_m.s_augmented), (300.0, 300.0));
        let p =
            PlanParams { b_nic: 2e6, b_pcie: 3e6, t_gpu: Some(7000.0), b_storage: 2e5, ..with_m };
        for s in Split::all() {
            let x = (f64::from(s.e()) / 100.0, f64::from(s.d()) / 100.0, f64::from(s.a()) / 100.0);
            assert_close(evaluate(&p, s).samples_per_s, paper_rate(&p, 3.0, x));
        }
    }

    #[test]
    fn best_split_beats_every_single_form_split_and_is_the_brute_force_maximum() {
        let cases = [
            PlanParams { s_cache: 1e5, b_storage: 5e4, ..base() },
            PlanParams { s_cache: 2e5, b_storage: 2e4, t_gpu: Some(3000.0), ..base() },
            PlanParams { s_cache: 4e4, b_storage: 1e5, t_da: 400.0, t_a: 900.0, ..base() },
            PlanParams { s_cache: 1e9, ..base() },
            base(),
        ];
        for p in cases {
            let (best, ev) = best_split(&p);
            assert_eq!(ev, evaluate(&p, best));
            for s in ["100-0-0", "0-100-0", "0-0-100"] {
                assert!(ev.samples_per_s >= evaluate(&p, split(s)).samples_per_s, "{best} vs {s}");
            }
            let mut brute = f64::NEG_INFINITY;
            for e in 0..=100 {
                for d in 0..=100 - e {
                    let s = Split::new(e, d, 100 - e - d).expect("sums to 100");
                    brute = brute.max(evaluate(&p, s).samples_per_s);
                }
            }
            assert_close(ev.samples_per_s, brute);
        }
    }

    #[test]
    fn best_split_follows_the_bottleneck() {
        // Storage 5e4 B/s = 500/s, cache 1e5 bytes, consumer unbounded: augmented hits (4e6/s)
        // are worth the most per byte. 0-0-100 holds 400 augmented, 600 come from storage:
        // (400 * 4e6 + 600 * 500) / 1000 = 1,600,300/s.
        let p = PlanParams { s_cache: 1e5, b_storage: 5e4, ..base() };
        let (best, ev) = best_split(&p);
        assert_eq!(best, split("0-0-100"));
        assert_close(ev.samples_per_s, 1_600_300.0);
        // A consumer at 600/s caps every cached path at 600/s; only caching every sample beats
        // storage (500/s), and only the encoded form fits all 1000 (exactly 1e5 bytes).
        let p = PlanParams { t_gpu: Some(600.0), ..p };
        let (best, ev) = best_split(&p);
        assert_eq!(best, split("100-0-0"));
        assert_close(ev.samples_per_s, 600.0);
    }

    #[test]
    fn best_split_can_be_a_mix() {
        // Cache 1.5e5 bytes; consumer 2,000/s; decode+augment 1,800/s; storage 500/s.
        // Per cached byte, encoded gains (1800 - 500) / 100 = 13/s and augmented
        // (2000 - 500) / 250 = 6/s: cache every sample encoded (1e5 bytes), then upgrade to
        // augmented with what is left, each upgrade 150 more bytes for 200/s more.
        // 45-0-55: 82,500 / 250 = 330 augmented, the other 670 encoded (room for 675):
        // (330 * 2000 + 670 * 1800) / 1000 = 1,866/s. One more percent augmented (44-0-56)
        // leaves 4 samples to storage: (336 * 2000 + 660 * 1800 + 4 * 500) / 1000 = 1,862/s.
        let p = PlanParams {
            s_cache: 1.5e5,
            b_storage: 5e4,
            t_gpu: Some(2000.0),
            t_da: 1800.0,
            ..base()
        };
        let (best, ev) = best_split(&p);
        assert_eq!(best, split("45-0-55"));
        assert_close(ev.n_a, 330.0);
        assert_close(ev.n_e, 670.0);
        assert_close(ev.samples_per_s, 1866.0);
        assert_close(evaluate(&p, split("44-0-56")).samples_per_s, 1862.0);
        assert_close(evaluate(&p, split("100-0-0")).samples_per_s, 1800.0);
        assert_close(
            evaluate(&p, split("0-0-100")).samples_per_s,
            (600.0 * 2000.0 + 400.0 * 500.0) / 1000.0,
        );
    }

    #[test]
    fn there_are_5151_splits_each_once() {
        let all: Vec<Split> = Split::all().collect();
        assert_eq!(all.len(), 5151);
        let unique: std::collections::HashSet<Split> = all.iter().copied().collect();
        assert_eq!(unique.len(), 5151);
        assert_eq!(all[0], split("0-0-100"));
        assert_eq!(all[5150], split("100-0-0"));
    }

    // --- splits ---------------------------------------------------------------------------------

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

    // --- parameter files ---------------------------------------------------------------------

    #[test]
    fn a_full_file_parses() {
        let p = parse_params(BASE_YAML).expect("valid");
        assert_eq!(p, base());
    }

    #[test]
    fn t_gpu_may_be_absent_null_or_infinite() {
        for yaml in [
            BASE_YAML.replace("t_gpu: null\n", ""),
            BASE_YAML.replace("t_gpu: null", "t_gpu: .inf"),
            BASE_YAML.to_string(),
        ] {
            assert_eq!(parse_params(&yaml).expect("valid").t_gpu, None);
        }
        let p = parse_params(&BASE_YAML.replace("t_gpu: null", "t_gpu: 1500")).expect("valid");
        assert_eq!(p.t_gpu, Some(1500.0));
    }

    #[test]
    fn unknown_keys_are_refused_by_name_and_line() {
        let err = parse_params(&BASE_YAML.replace("c_pcie: 0", "c_pcie: 0\nb_nicc: 5"))
            .expect_err("unknown");
        let msg = err.to_string();
        assert!(matches!(err, PlanError::Yaml(_)));
        assert!(msg.contains("b_nicc") && msg.contains("line 16"), "{msg}");
    }

    #[test]
    fn missing_keys_are_refused_by_name() {
        for key in [
            "n_total",
            "s_data",
            "s_cache",
            "b_cache",
            "b_nic",
            "b_pcie",
            "b_storage",
            "t_da",
            "t_a",
            "nodes",
            "c_nw",
            "c_pcie",
        ] {
            let yaml: String = BASE_YAML
                .lines()
                .filter(|l| !l.starts_with(&format!("{key}:")))
                .map(|l| format!("{l}\n"))
                .collect();
            let msg = parse_params(&yaml).expect_err(key).to_string();
            assert_eq!(msg, format!("missing key `{key}`"));
        }
        let msg = parse_params(&BASE_YAML.replace("s_augmented: 250\n", ""))
            .expect_err("no size")
            .to_string();
        assert!(msg.starts_with("missing key `s_augmented`") && msg.contains("`m`"), "{msg}");
        let msg = parse_params("").expect_err("empty").to_string();
        assert!(msg.starts_with("missing key `"), "{msg}");
    }

    #[test]
    fn null_values_are_refused_by_name_and_line() {
        let msg = parse_params(&BASE_YAML.replace("b_nic: .inf", "b_nic: null"))
            .expect_err("null")
            .to_string();
        assert_eq!(msg, "`b_nic` (line 7): null, but a value is needed");
        let msg = parse_params(&BASE_YAML.replace("b_nic: .inf", "b_nic:"))
            .expect_err("null")
            .to_string();
        assert!(msg.contains("`b_nic` (line 7)"), "{msg}");
    }

    #[test]
    fn m_and_an_explicit_size_together_are_refused() {
        let err =
            parse_params(&BASE_YAML.replace("s_augmented: 250\n", "m: 3\n")).expect_err("both");
        let msg = err.to_string();
        assert!(matches!(err, PlanError::Conflict { key: "s_decoded", .. }), "{msg}");
        assert!(msg.contains("`m` and `s_decoded` (line 3)"), "{msg}");
        let yaml = BASE_YAML.replace("s_decoded: 500\n", "m: 3\n");
        assert!(matches!(parse_params(&yaml), Err(PlanError::Conflict { key: "s_augmented", .. })));
    }

    #[test]
    fn wrong_types_and_bad_values_name_the_key_and_line() {
        let msg = parse_params(&BASE_YAML.replace("b_cache: 1.0e9", "b_cache: 8GB/s"))
            .expect_err("type")
            .to_string();
        assert!(msg.contains("b_cache") && msg.contains("line 6"), "{msg}");
        let msg = parse_params(&BASE_YAML.replace("nodes: 1", "nodes: 1.5"))
            .expect_err("type")
            .to_string();
        assert!(msg.contains("nodes") && msg.contains("line 13"), "{msg}");
        for (from, to, key, line) in [
            ("s_data: 100", "s_data: -1", "s_data", 2),
            ("s_decoded: 500", "s_decoded: 0", "s_decoded", 3),
            ("s_cache: 0", "s_cache: -5", "s_cache", 5),
            ("b_cache: 1.0e9", "b_cache: .inf", "b_cache", 6),
            ("b_storage: 1.0e6", "b_storage: 0", "b_storage", 9),
            ("t_gpu: null", "t_gpu: 0", "t_gpu", 10),
            ("t_da: 1000", "t_da: .nan", "t_da", 11),
            ("n_total: 1000", "n_total: 0", "n_total", 1),
            ("nodes: 1", "nodes: 0", "nodes", 13),
            ("c_nw: 0", "c_nw: -1", "c_nw", 14),
        ] {
            let msg = parse_params(&BASE_YAML.replace(from, to)).expect_err(to).to_string();
            assert!(msg.starts_with(&format!("`{key}` (line {line}): ")), "{to}: {msg}");
        }
        let yaml =
            BASE_YAML.replace("b_pcie: .inf", "b_pcie: 1e6").replace("c_pcie: 0", "c_pcie: 1e6");
        let msg = parse_params(&yaml).expect_err("c >= b").to_string();
        assert!(msg.contains("`c_pcie` (line 15)") && msg.contains("b_pcie"), "{msg}");
        let msg = parse_params(&BASE_YAML.replace("s_decoded: 500\ns_augmented: 250", "m: -2"))
            .expect_err("m")
            .to_string();
        assert!(msg.starts_with("`m` (line 3): "), "{msg}");
    }

    #[test]
    fn load_params_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("params.yaml");
        std::fs::write(&path, BASE_YAML).expect("write");
        assert_eq!(load_params(&path).expect("valid"), base());
        std::fs::write(&path, BASE_YAML.replace("t_a: 5000\n", "")).expect("write");
        let msg = load_params(&path).expect_err("missing").to_string();
        assert_eq!(msg, format!("{}: missing key `t_a`", path.display()));
        let msg = load_params(dir.path().join("absent.yaml")).expect_err("absent").to_string();
        assert!(msg.starts_with("cannot read ") && msg.contains("absent.yaml"), "{msg}");
    }

    #[test]
    fn params_deserialise_through_serde_too() {
        let p: PlanParams = serde_norway::from_str(BASE_YAML).expect("valid");
        assert_eq!(p, base());
        let err = serde_norway::from_str::<PlanParams>(&BASE_YAML.replace("t_a: 5000\n", ""))
            .expect_err("missing");
        assert!(err.to_string().contains("missing key `t_a`"), "{err}");
    }

    #[test]
    fn the_example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-configs/plan-example.yaml");
        let p = load_params(&path).expect("the example parses");
        assert_eq!(p.n_total, 1_281_167);
        let (_, ev) = best_split(&p);
        for s in ["100-0-0", "0-100-0", "0-0-100"] {
            assert!(ev.samples_per_s >= evaluate(&p, split(s)).samples_per_s);
        }
    }

    // --- output ---------------------------------------------------------------------------------

    #[test]
    fn plan_json_has_exactly_the_documented_keys() {
        let p = PlanParams { s_cache: 1e5, b_storage: 5e4, ..base() };
        let v = plan_json(&p, None);
        let obj = v.as_object().expect("object");
        assert_eq!(obj.len(), 2);
        assert_eq!(v["split"], serde_json::json!([0, 0, 100]));
        assert_close(v["samples_per_s"].as_f64().expect("number"), 1_600_300.0);

        let v = plan_json(&p, Some(split("20-30-50")));
        let obj = v.as_object().expect("object");
        assert_eq!(obj.len(), 3);
        assert_eq!(v["split"], serde_json::json!([0, 0, 100]));
        let evaluated = v["evaluated"].as_object().expect("object");
        assert_eq!(evaluated.len(), 2);
        assert_eq!(v["evaluated"]["split"], serde_json::json!([20, 30, 50]));
        assert_close(v["evaluated"]["samples_per_s"].as_f64().expect("number"), 800_770.0);
    }
}
