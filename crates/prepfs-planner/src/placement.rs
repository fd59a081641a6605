//! Past one machine, on paper: how fast N accelerator hosts are fed when M remote worker
//! machines make part of their samples, and how many workers a given demand needs. Pure
//! functions of the inputs ([`PlacementInputs`]); no clock, no I/O. `prepfs plan --demand ...`
//! prints it (`crates/prepfs/src/plan_placement.rs`); `prepfs worker` is what it sizes.
//!
//! The question is Pecan's (Graur et al., USENIX ATC '24): its AutoPlacement keeps the hosts'
//! own cores making samples and adds the fewest remote workers that reach the shortest epoch
//! time, asking the remote for no more than the hosts' deficit. cedar (Zhao et al., VLDB '25)
//! places a pipeline's work the same way, local and remote, by measured costs. Here, per host:
//!
//! - The host's `host_cores` make samples locally at `host_cost` core-seconds each, and every
//!   sample received from a worker costs the host `recv_cost` core-seconds (receiving it,
//!   admitting the output). With `r` samples/s received, the host makes
//!   `local(r) = (host_cores - r * recv_cost) / host_cost` itself.
//! - The workers' output is shared out evenly: `r <= workers * worker_cores / worker_cost /
//!   hosts`; the host's link carries it: `r <= link / output_bytes`; and the host must have the
//!   cores to receive it: `r * recv_cost <= host_cores`.
//! - The host's rate is `R = min(demand, r + local(r))`. It is linear in `r` with slope
//!   `1 - recv_cost / host_cost`: where receiving a sample costs less than making it, `r` goes
//!   to its largest value; where it costs as much or more, workers cannot help (`r = 0`).
//! - Pecan's rule: never ask for more than the deficit. Where the host alone makes
//!   `H = host_cores / host_cost >= demand`, `r = 0`; else `r` is at most the rate that just
//!   meets the demand, `(demand - H) / (1 - recv_cost / host_cost)` (the deficit, grown by the
//!   host's cores that receiving takes from its own making).
//! - The epoch takes `samples_per_epoch / R` seconds, and the bound named is the one that
//!   stops `R` growing: the demand, the host's cores (receiving fills them, or costs more than
//!   making), the link, or the workers (more of them would help).
//!
//! [`workers_needed`] is the fewest workers whose epoch is as short as any number's (up to
//! [`WORKERS_CAP`]).

use serde::Serialize;

/// The most workers [`workers_needed`] considers: with no bound but the workers (no demand,
/// an unbounded link, free receiving) the rate grows without end, and this is the answer.
pub const WORKERS_CAP: u32 = 1024;

/// The model's inputs: per host, homogeneous hosts and workers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PlacementInputs {
    /// Seconds of one host core to make one sample (the measured decode + augment cost).
    pub host_cost: f64,
    /// Host cores given to preprocessing (making and receiving samples); may be fractional.
    pub host_cores: f64,
    /// Seconds of one worker core to make one sample.
    pub worker_cost: f64,
    /// Cores per worker machine, each making samples.
    pub worker_cores: u32,
    /// Seconds of one host core per sample received from a worker (receiving it and admitting
    /// the output; measured).
    pub recv_cost: f64,
    /// Bytes moved per sample a worker makes (an output's size).
    pub output_bytes: f64,
    /// Bandwidth of each host's link from the workers, bytes/s (`f64::INFINITY`: unbounded;
    /// `null` in JSON).
    pub link: f64,
    /// Samples/s each host's accelerators would consume; `None` (or infinite): as fast as the
    /// samples can be made.
    pub demand: Option<f64>,
    /// Accelerator hosts, sharing the workers evenly.
    pub hosts: u32,
    /// Remote worker machines.
    pub workers: u32,
    /// Samples each host reads per epoch.
    pub samples_per_epoch: u64,
}

/// What stops the per-host rate from growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The accelerators' demand is met.
    Demand,
    /// The host's cores: receiving fills them, or receiving costs as much as making.
    HostCores,
    /// More workers would raise the rate.
    Workers,
    /// The link carries no more outputs.
    Link,
}

impl Bound {
    /// Its name in `prepfs plan`'s JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Demand => "demand",
            Bound::HostCores => "host cores",
            Bound::Workers => "workers",
            Bound::Link => "link",
        }
    }
}

/// The model's prediction for one worker count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// Samples/s each host gets (made locally and received).
    pub rate: f64,
    /// Samples/s each host receives from the workers.
    pub remote_rate: f64,
    /// The share of `rate` made remotely, 0 to 1.
    pub remote_share: f64,
    /// Seconds an epoch takes (`samples_per_epoch / rate`).
    pub epoch_s: f64,
    /// What binds.
    pub bound: Bound,
}

impl PlacementInputs {
    /// Checks every value's range, naming the first out of it.
    pub fn check(&self) -> Result<(), String> {
        let positive_finite = [
            ("host cost", self.host_cost),
            ("host cores", self.host_cores),
            ("worker cost", self.worker_cost),
        ];
        for (name, v) in positive_finite {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} must be a positive number, got {v}"));
            }
        }
        for (name, v) in [("receive cost", self.recv_cost), ("output bytes", self.output_bytes)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} must be a number, 0 or more, got {v}"));
            }
        }
        if self.link.is_nan() || self.link <= 0.0 {
            return Err(format!("the link must be a positive rate in bytes/s, got {}", self.link));
        }
        if let Some(d) = self.demand {
            if d.is_nan() || d <= 0.0 {
                return Err(format!("the demand must be a positive rate in samples/s, got {d}"));
            }
        }
        if self.worker_cores == 0 {
            return Err("a worker needs at least 1 core".into());
        }
        if self.hosts == 0 {
            return Err("at least 1 host is needed".into());
        }
        if self.samples_per_epoch == 0 {
            return Err("an epoch needs at least 1 sample".into());
        }
        Ok(())
    }

    /// Samples/s one worker makes.
    pub fn worker_rate(&self) -> f64 {
        f64::from(self.worker_cores) / self.worker_cost
    }

    /// Samples/s the host makes alone, receiving nothing.
    pub fn host_rate(&self) -> f64 {
        self.host_cores / self.host_cost
    }

    /// The demand, infinite for none.
    fn demand_rate(&self) -> f64 {
        self.demand.unwrap_or(f64::INFINITY)
    }
}

/// The per-host rate, its remote share, the epoch's time and what binds, for `inputs.workers`
/// workers (see the module documentation). `inputs` must pass [`PlacementInputs::check`].
pub fn evaluate(inputs: &PlacementInputs) -> Placement {
    debug_assert_eq!(inputs.check(), Ok(()));
    let demand = inputs.demand_rate();
    let host = inputs.host_rate();
    // What a received sample adds to the rate: itself, less the host's own making it displaces.
    let gain = 1.0 - inputs.recv_cost / inputs.host_cost;
    let (remote, bound) = if host >= demand {
        (0.0, Bound::Demand)
    } else if gain <= 0.0 {
        (0.0, Bound::HostCores)
    } else {
        // The tightest of the caps on what is received; on a tie, the one more workers cannot
        // lift. The demand's (Pecan's rule) comes first: met, nothing else binds.
        let caps = [
            ((demand - host) / gain, Bound::Demand),
            (inputs.host_cores / inputs.recv_cost, Bound::HostCores),
            (inputs.link / inputs.output_bytes, Bound::Link),
            (f64::from(inputs.workers) * inputs.worker_rate() / f64::from(inputs.hosts), Bound::Workers),
        ];
        caps.into_iter().fold((f64::INFINITY, Bound::Workers), |best, cap| if cap.0 < best.0 { cap } else { best })
    };
    let local = ((inputs.host_cores - remote * inputs.recv_cost) / inputs.host_cost).max(0.0);
    // Where the demand binds, the rate is the demand, not a sum a few ulps short of it.
    let rate = if bound == Bound::Demand { demand } else { (remote + local).min(demand) };
    Placement {
        rate,
        remote_rate: remote,
        remote_share: if rate > 0.0 { remote / rate } else { 0.0 },
        epoch_s: inputs.samples_per_epoch as f64 / rate,
        bound,
    }
}

/// The fewest workers whose epoch is as short as any number's up to [`WORKERS_CAP`]'s (more
/// workers would not shorten it): 0 where the host meets its demand alone or receiving costs
/// as much as making; [`WORKERS_CAP`] where even that many leave the workers the bound.
/// `inputs.workers` is ignored.
pub fn workers_needed(inputs: &PlacementInputs) -> u32 {
    let epoch = |workers: u32| evaluate(&PlacementInputs { workers, ..*inputs }).epoch_s;
    let shortest = epoch(WORKERS_CAP);
    // Within rounding of the shortest: the rate is piecewise linear in the workers, and a
    // worker count that just reaches a bound may land a few ulps short of it.
    let reaches = |workers: u32| epoch(workers) <= shortest * (1.0 + 1e-9);
    // The epoch shortens with every worker until a bound other than the workers binds, then
    // stays: the first count that reaches the shortest, by bisection.
    let (mut lo, mut hi) = (0, WORKERS_CAP);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if reaches(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// What `prepfs plan` prints under `"placement"`: the inputs, the workers needed, and the
/// prediction for `workers` (default: the workers needed).
pub fn plan_json(inputs: &PlacementInputs, workers: Option<u32>) -> serde_json::Value {
    let needed = workers_needed(inputs);
    let evaluated = PlacementInputs { workers: workers.unwrap_or(needed), ..*inputs };
    let p = evaluate(&evaluated);
    serde_json::json!({
        "inputs": evaluated,
        "workers_needed": needed,
        "workers": evaluated.workers,
        "samples_per_s_per_host": p.rate,
        "remote_samples_per_s_per_host": p.remote_rate,
        "remote_share": p.remote_share,
        "epoch_s": p.epoch_s,
        "bound": p.bound.as_str(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One host of 2 cores at 5 ms a sample (400 samples/s alone), workers of 1 core at the
    /// same cost, 0.2 ms to receive a sample, 150 KB outputs over 10 GB/s, 1,000 samples an
    /// epoch, no demand.
    fn inputs() -> PlacementInputs {
        PlacementInputs {
            host_cost: 0.005,
            host_cores: 2.0,
            worker_cost: 0.005,
            worker_cores: 1,
            recv_cost: 0.0002,
            output_bytes: 150_528.0,
            link: 1e10,
            demand: None,
            hosts: 1,
            workers: 0,
            samples_per_epoch: 1000,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn a_host_that_meets_its_demand_alone_needs_no_worker() {
        let demand = PlacementInputs { demand: Some(300.0), ..inputs() };
        assert_eq!(workers_needed(&demand), 0);
        let p = evaluate(&PlacementInputs { workers: 4, ..demand });
        assert_eq!(p.bound, Bound::Demand);
        assert_eq!((p.rate, p.remote_rate, p.remote_share), (300.0, 0.0, 0.0), "no worker is asked, even when there are some");
        assert!(close(p.epoch_s, 1000.0 / 300.0), "{p:?}");
    }

    #[test]
    fn with_no_worker_the_host_makes_every_sample_and_the_workers_bind() {
        let p = evaluate(&inputs());
        assert!(close(p.rate, 400.0), "{p:?}");
        assert_eq!((p.remote_share, p.bound), (0.0, Bound::Workers));
        assert!(close(p.epoch_s, 2.5), "{p:?}");
    }

    #[test]
    fn one_worker_on_an_equal_core_nearly_doubles_a_one_core_host() {
        let one_core = PlacementInputs { host_cores: 1.0, workers: 1, ..inputs() };
        let alone = evaluate(&PlacementInputs { workers: 0, ..one_core }).rate;
        let p = evaluate(&one_core);
        // 200 received, and the host makes 200 less the 4% of its core that receiving takes.
        assert!(close(p.rate, 200.0 + (1.0 - 200.0 * 0.0002) / 0.005), "{p:?}");
        assert!(p.rate > 1.9 * alone && p.rate < 2.0 * alone, "{} vs {alone}", p.rate);
        assert!(p.remote_share > 0.5 && p.remote_share < 0.52, "{p:?}");
        assert_eq!(p.bound, Bound::Workers);
    }

    #[test]
    fn the_link_bounds_the_rate_when_outputs_are_large() {
        // 10 MB outputs over 1 GB/s: 100 received a second however many workers there are.
        let large = PlacementInputs { output_bytes: 1e7, link: 1e9, workers: 8, ..inputs() };
        let p = evaluate(&large);
        assert_eq!(p.bound, Bound::Link);
        assert!(close(p.remote_rate, 100.0), "{p:?}");
        assert!(close(p.rate, 100.0 + (2.0 - 100.0 * 0.0002) / 0.005), "{p:?}");
        // One worker makes 200/s: the link caps it already, and more would not help.
        assert_eq!(workers_needed(&large), 1);
        assert_eq!(evaluate(&PlacementInputs { workers: 1, ..large }).rate, p.rate);
    }

    #[test]
    fn the_deficit_is_all_that_is_asked_of_the_workers() {
        // 500/s asked of a 400/s host: the workers make the deficit, grown by what receiving
        // takes from the host, and no more, however many there are.
        let demand = PlacementInputs { demand: Some(500.0), workers: 10, ..inputs() };
        let p = evaluate(&demand);
        assert_eq!(p.bound, Bound::Demand);
        assert!(close(p.rate, 500.0), "{p:?}");
        let asked = 100.0 / (1.0 - 0.0002 / 0.005);
        assert!(close(p.remote_rate, asked), "{p:?}");
        assert!(p.remote_rate < 2.0 * 100.0 && p.remote_share < 0.25, "{p:?}");
    }

    #[test]
    fn the_fewest_workers_reach_the_shortest_epoch() {
        // 2,000/s asked of a 400/s host with 1-core workers at 200/s each.
        let demand = PlacementInputs { demand: Some(2000.0), ..inputs() };
        let needed = workers_needed(&demand);
        let epoch = |workers| evaluate(&PlacementInputs { workers, ..demand }).epoch_s;
        assert!(close(epoch(needed), epoch(WORKERS_CAP)), "{needed} workers");
        assert!(epoch(needed - 1) > epoch(needed) * 1.001, "{needed} workers");
        // The deficit of 1,600 grown by receiving's 4%: 1,666.7 received, 9 workers' worth.
        assert_eq!(needed, 9);
        assert_eq!(evaluate(&PlacementInputs { workers: needed, ..demand }).bound, Bound::Demand);
        assert_eq!(evaluate(&PlacementInputs { workers: needed - 1, ..demand }).bound, Bound::Workers);
    }

    #[test]
    fn a_worker_count_that_just_meets_the_demand_is_not_rounded_up() {
        // Free receiving: 8 workers at 200/s make exactly the 1,600 missing.
        let exact = PlacementInputs { demand: Some(2000.0), recv_cost: 0.0, ..inputs() };
        assert_eq!(workers_needed(&exact), 8);
    }

    #[test]
    fn workers_are_shared_out_among_the_hosts() {
        let two_hosts = PlacementInputs { hosts: 2, workers: 2, ..inputs() };
        let one_host = PlacementInputs { hosts: 1, workers: 1, ..inputs() };
        assert!(close(evaluate(&two_hosts).rate, evaluate(&one_host).rate));
        let demand = PlacementInputs { demand: Some(2000.0), ..two_hosts };
        assert_eq!(workers_needed(&demand), 2 * workers_needed(&PlacementInputs { hosts: 1, ..demand }) - 1, "17 workers' worth over 2 hosts, 9 for 1");
    }

    #[test]
    fn receiving_that_costs_as_much_as_making_gains_nothing() {
        let dear = PlacementInputs { recv_cost: 0.005, workers: 4, ..inputs() };
        let p = evaluate(&dear);
        assert_eq!((p.remote_rate, p.bound), (0.0, Bound::HostCores));
        assert!(close(p.rate, 400.0), "{p:?}");
        assert_eq!(workers_needed(&dear), 0);
    }

    #[test]
    fn the_host_cores_bound_the_rate_when_receiving_fills_them() {
        // 1 ms to receive, 2 cores: at most 2,000 received a second, and then the host makes none.
        let busy = PlacementInputs { recv_cost: 0.001, workers: 100, ..inputs() };
        let p = evaluate(&busy);
        assert_eq!(p.bound, Bound::HostCores);
        assert!(close(p.rate, 2000.0) && close(p.remote_share, 1.0), "{p:?}");
        assert_eq!(workers_needed(&busy), 10);
    }

    #[test]
    fn with_no_bound_but_the_workers_the_cap_is_the_answer() {
        let unbounded = PlacementInputs { recv_cost: 0.0, link: f64::INFINITY, ..inputs() };
        assert_eq!(workers_needed(&unbounded), WORKERS_CAP);
    }

    #[test]
    fn out_of_range_inputs_are_named() {
        assert_eq!(inputs().check(), Ok(()));
        let bad = PlacementInputs { worker_cost: 0.0, ..inputs() };
        assert!(bad.check().unwrap_err().contains("worker cost"));
        let bad = PlacementInputs { demand: Some(f64::NAN), ..inputs() };
        assert!(bad.check().unwrap_err().contains("demand"));
        let bad = PlacementInputs { hosts: 0, ..inputs() };
        assert!(bad.check().unwrap_err().contains("host"));
    }

    #[test]
    fn the_plan_json_names_the_inputs_the_workers_needed_and_the_bound() {
        let demand = PlacementInputs { demand: Some(2000.0), link: f64::INFINITY, ..inputs() };
        let json = plan_json(&demand, None);
        assert_eq!(json["workers_needed"], 9);
        assert_eq!(json["workers"], 9);
        assert_eq!(json["bound"], "demand");
        assert_eq!(json["inputs"]["demand"], 2000.0);
        assert!(json["inputs"]["link"].is_null(), "an unbounded link: {json}");
        let two = plan_json(&demand, Some(2));
        assert_eq!((two["workers_needed"].as_u64(), two["workers"].as_u64()), (Some(9), Some(2)));
        assert_eq!(two["bound"], "workers");
        assert!(close(two["samples_per_s_per_host"].as_f64().unwrap(), 400.0 + 400.0 * (1.0 - 0.0002 / 0.005)), "{two}");
    }
}
