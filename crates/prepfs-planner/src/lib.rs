//! The cache planner: how to split the cache's memory among the three forms (encoded, decoded,
//! augmented), as pure functions of measured inputs ([`PlanParams`]). It reads no clock and
//! measures nothing, and depends on prepfs-base alone; prepfs-core's `plan` builds the inputs at
//! mount (`plan/calibrate.rs`) and owns the plan's control loop while serving
//! (`plan/controller.rs`, `PlanController`).
//!
//! Two models evaluate a split:
//!
//! - [`Model::Seneca`] ([`seneca`]): the paper's Eqs. 1-9 exactly (generalised sizes), as
//!   `prepfs plan --model seneca`; the anchor we reproduce.
//! - [`Model::Prepfs`] ([`prepfs`]): the default, behind `split: auto` and `prepfs plan`. It
//!   differs from Seneca's where Seneca's does not predict what the mount measures:
//!   1. **Times add up, rates do not.** Seneca's Eq. 9 averages the paths' rates weighted by
//!      their sample counts, so a sliver of "free" hits at memory speed dominates the mean. Here
//!      each sample costs CPU time on the machine's cores (serving it, plus its path's decode
//!      or augment work); the times add up over the paths and the rate is their reciprocal (a
//!      harmonic combination), then bounded by storage, links and the consumer.
//!   2. **A use-once output costs its refill.** Seneca rates an augmented hit at memory-copy
//!      speed; but the output is used once and replaced by a fresh augmentation from the same
//!      CPUs. So an augmented hit costs the work of its refill (an augment when the sample's
//!      pixels are also held, else a decode and augment, plus a storage read when nothing else
//!      holds it). It is free only when spare CPU pays for it: when storage or the consumer
//!      bounds the rate below what the CPUs could do, which the `min` over the bounds gives.
//!   3. **Memory left over flows on.** Once a form holds every sample, the rest of its share
//!      goes to the next form in the fill order (augmented, decoded, encoded), so a cache larger
//!      than the set holds it in every form it can, not 0-0-100 with memory idle.
//!   4. **Several jobs share through a window, not a store.** Seneca counts ODS's sharing only
//!      in the hit rate. With jobs reading at once, what one job's miss made (the output, the
//!      pixels, the bytes) serves the others if the cache keeps it until their requests reach
//!      its directory; so each form's share buys a window, and an item made serves `1 + (jobs -
//!      1)(1 - exp(-window / (3 · directories)))` jobs (the constant from a simulation, see
//!      [`prepfs`]). The work and the storage reads per sample are divided by that.
//!   5. **The inputs are the mount's.** The rate it serves a sample at beyond the pixel work
//!      (`t_serve`: FUSE round trips, copies and the readers' own work on the same cores, not a
//!      memory copy; measured while serving as the machine's busy CPU per sample less the pixel
//!      work's), the decode+augment and augment
//!      rates on all its cores counted once (`t_da`, `t_a`), the storage rate or `read_limit`,
//!      and the consumers' rate (`t_gpu`, given or left unbounded).
//!   6. **A remote tier is a path of its own.** Seneca puts the cache across the NIC; here
//!      memory is the node's own, and the remote tier (shared by the nodes) serves what memory
//!      misses, where it holds it, before the storage. Only those reads cross the NIC, and
//!      `nodes`, `b_nic`, `c_nw` and the read's time `t_remote` are the mount's measurements of
//!      the remote (`cache/remote/network.rs`).
//!
//!   7. **A plan over the run, not a steady state.** [`run`] predicts each epoch to come (epoch
//!      1 from an empty cache, epoch 2 from what epoch 1's misses kept, then the steady state)
//!      and picks the first-touch policy (decode a first-met sample in full and keep its pixels,
//!      or decode only the crop's region) with the least time over the epochs left
//!      (`cache.epochs`, less those read).
//!
//! Both models share the search (all 5151 splits at 1% steps; the mount's `auto` picks prepfs's
//! by the least time over the epochs left, `run::best_over_the_run`) and the parameter file.

mod params;
/// Past one machine: hosts' own cores plus remote workers, and the workers a demand needs.
pub mod placement;
pub mod prepfs;
pub mod run;
pub mod search;
pub mod serve_fit;
pub mod seneca;
mod split;

pub use prepfs::budgets;
pub use params::load_params;
pub use params::PlanParams;
pub use search::Evaluation;
pub use seneca::{evaluate, plan_json};
pub use split::Split;

use std::str::FromStr;

/// Which model evaluates a split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// The paper's Eqs. 1-9.
    Seneca,
    /// prepfs's own (see the module documentation): the default.
    #[default]
    Prepfs,
}

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        match s {
            "seneca" => Ok(Model::Seneca),
            "prepfs" => Ok(Model::Prepfs),
            other => Err(format!("unknown model `{other}`: use prepfs (the default) or seneca")),
        }
    }
}

impl Model {
    /// Evaluates `split` under this model.
    pub fn evaluate(self, params: &PlanParams, split: Split) -> Evaluation {
        match self {
            Model::Seneca => seneca::evaluate(params, split),
            Model::Prepfs => prepfs::evaluate(params, split),
        }
    }

    /// The best split under this model in the steady state, and its evaluation.
    #[cfg(test)]
    pub(crate) fn best_split(self, params: &PlanParams) -> (Split, Evaluation) {
        match self {
            Model::Seneca => seneca::best_split(params),
            Model::Prepfs => search::best_split_by(params, prepfs::evaluate),
        }
    }

    /// What `prepfs plan` prints under this model.
    pub fn plan_json(self, params: &PlanParams, split: Option<Split>) -> serde_json::Value {
        match self {
            Model::Seneca => seneca::plan_json(params, split),
            Model::Prepfs => search::plan_json_by(params, split, prepfs::evaluate),
        }
    }
}
