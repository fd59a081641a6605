//! The search shared by both models: every split at 1% steps evaluated, the best one picked
//! with the ties broken one way ([`best_split_by`]), and what `prepfs plan` prints
//! ([`plan_json_by`]).

use serde::Serialize;

use super::params::PlanParams;
use super::split::Split;

/// One split evaluated: how many samples each form holds, each path's rate, and the overall
/// predicted rate (samples/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Evaluation {
    /// Samples held augmented (Eq. 2).
    pub(crate) n_a: f64,
    /// Samples held decoded (Eq. 4).
    pub(crate) n_d: f64,
    /// Samples held encoded (Eq. 6).
    pub(crate) n_e: f64,
    /// Samples read from storage (Eq. 8).
    pub n_storage: f64,
    /// prepfs's model only: samples read from the remote tier (0 in Seneca's).
    pub(crate) n_remote: f64,
    /// Rate of the augmented-hit path (Eq. 1).
    pub(crate) dsi_a: f64,
    /// Rate of the decoded-hit path (Eq. 3).
    pub(crate) dsi_d: f64,
    /// Rate of the encoded-hit path (Eq. 5).
    pub(crate) dsi_e: f64,
    /// Rate of the storage path (Eq. 7).
    pub(crate) dsi_s: f64,
    /// `DSI_overall` (Eq. 9), samples/s.
    pub samples_per_s: f64,
}

/// Two predicted rates closer than this (relative) are a tie, so that rounding in the last bits
/// cannot decide the split.
const TIE_TOLERANCE: f64 = 1e-9;

/// The best split at 1% steps (all 5151) under `evaluate`, and its evaluation.
///
/// Ties: every split whose rate is within one part in 10^9 of the best counts as best, and of
/// those the one with the largest augmented share wins, then the largest decoded share (the
/// order of [`Split::all`]). At equal predicted throughput that is the split whose hits need the
/// least CPU work, and when the cache is larger than the data needs, it puts the spare bytes
/// where the model is indifferent rather than inventing a preference.
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

/// What `prepfs plan` prints under `evaluate`: `{"split": [E, D, A], "samples_per_s": X}` for
/// the best split, plus `"evaluated": {"split": [...], "samples_per_s": Y}` for `split` when one
/// is given.
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
