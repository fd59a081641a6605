//! `prepfs plan`'s placement flags (`--demand`, `--hosts`, `--workers`, ...): what they mean
//! and how they and the parameter file make the inputs of the planner's placement model
//! (`prepfs_planner::placement`: the hosts' own cores plus remote workers, and the workers a
//! demand needs).

use prepfs_planner::placement::{self, PlacementInputs};
use prepfs_planner::PlanParams;

/// What a receive costs the host by default: 0.2 ms of a core a sample.
const DEFAULT_RECV_COST: f64 = 0.0002;

/// The placement flags of `prepfs plan`. Given any of `--demand`, `--hosts` or `--workers`, the
/// plan gains a `"placement"` object.
#[derive(clap::Args, Debug, Clone)]
pub struct PlacementArgs {
    /// Placement: samples/s each host's accelerators would consume (`inf`: as fast as possible;
    /// default: the parameters' t_gpu).
    #[arg(long, value_name = "SAMPLES_PER_S")]
    demand: Option<f64>,
    /// Placement: accelerator hosts sharing the workers; each reads n_total / N an epoch
    /// (default 1).
    #[arg(long, value_name = "N")]
    hosts: Option<u32>,
    /// Placement: evaluate this many remote workers (default: the number needed).
    #[arg(long, value_name = "N")]
    workers: Option<u32>,
    /// Placement: cores per worker machine.
    #[arg(long, value_name = "N", default_value_t = 1)]
    worker_cores: u32,
    /// Placement: seconds of a worker core per sample (default: the host's, cores / t_da).
    #[arg(long, value_name = "S")]
    worker_cost: Option<f64>,
    /// Placement: seconds of a host core per sample received from a worker.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_RECV_COST)]
    recv_cost: f64,
    /// Placement: each host's link from the workers, bytes/s (default: the parameters' b_nic
    /// less c_nw).
    #[arg(long, value_name = "BYTES_PER_S")]
    link: Option<f64>,
    /// Placement: bytes moved per sample a worker makes (default: the parameters' s_augmented).
    #[arg(long, value_name = "B")]
    output_bytes: Option<f64>,
}

impl PlacementArgs {
    /// The model's inputs from these flags and `params`: the host's per-core cost is
    /// `cores / t_da` (t_da is the decode + augment rate on all the `cores`), all of them given
    /// to preprocessing.
    pub fn inputs(&self, params: &PlanParams) -> Result<PlacementInputs, String> {
        if !params.t_da.is_finite() {
            return Err("placement: the parameters' t_da is unbounded, so a sample costs the host nothing and no worker is needed; give a measured t_da".into());
        }
        let host_cost = f64::from(params.cores) / params.t_da;
        let hosts = self.hosts.unwrap_or(1);
        let inputs = PlacementInputs {
            host_cost,
            host_cores: f64::from(params.cores),
            worker_cost: self.worker_cost.unwrap_or(host_cost),
            worker_cores: self.worker_cores,
            recv_cost: self.recv_cost,
            output_bytes: self.output_bytes.unwrap_or(params.s_augmented),
            link: self.link.unwrap_or(params.b_nic - params.c_nw),
            demand: self.demand.or(params.t_gpu).filter(|d| *d != f64::INFINITY),
            hosts,
            workers: self.workers.unwrap_or(0),
            samples_per_epoch: params.n_total.div_ceil(u64::from(hosts.max(1))),
        };
        inputs.check().map_err(|e| format!("placement: {e}"))?;
        Ok(inputs)
    }

    /// The plan's `"placement"` object, where `--demand`, `--hosts` or `--workers` was given.
    pub fn plan_json(&self, params: &PlanParams) -> Result<Option<serde_json::Value>, String> {
        if self.demand.is_none() && self.hosts.is_none() && self.workers.is_none() {
            return Ok(None);
        }
        Ok(Some(placement::plan_json(&self.inputs(params)?, self.workers)))
    }
}
