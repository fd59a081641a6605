//! The plan's control loop, owned in one place: the split made at mount from calibration
//! ([`PlanController::plan_at_mount`]), re-made about once a second from what the mount
//! measures while serving ([`PlanController::tick`]: the pixel rates, the source's rate, the
//! serving rate `t_serve`, how many jobs share the cache, and, with a remote tier, the nodes
//! sharing it, its link and what it holds), applied to the cache as budgets, and shown in
//! `stats.json` ([`PlanController::plan_json`]).
//!
//! The models it asks are the pure functions of [`prepfs_planner`]; what it measures comes from
//! the mount's counters ([`Stats`]) and the machine's CPU time.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use prepfs_cache::remote::RemoteGauge;
use prepfs_cache::{SampleCache, ENTRY_OVERHEAD};
use crate::config::{Config, EvictionPolicy, SplitChoice};
use crate::plan::calibrate::{self, machine_busy_seconds};
use prepfs_planner::serve_fit::ServeFit;
use prepfs_planner::{run, Model, PlanParams, Split};
use prepfs_source::catalog::{Catalog, FileId};
use crate::stats::Stats;
use prepfs_base::sync::{LockExt, Mutex};

/// How many timed samples the plan waits for before it trusts live rates over the mount-time
/// calibration.
const REPLAN_MIN_SAMPLES: u64 = 64;

/// Samples an interval of the serving probe must have served to count.
const SERVE_PROBE_MIN: u64 = 200;

/// Intervals the probe costs serving over, with several jobs, before its figure replaces the
/// model's default: one second's figure swung from a sixth to five times the rate.
const SERVE_PROBE_INTERVALS: u32 = 3;

/// The split a cache starts with: the configured one, or, until the model has measured inputs,
/// one that favours the forms that save CPU per epoch.
pub(crate) fn initial_split(choice: SplitChoice) -> Split {
    match choice {
        SplitChoice::Fixed(split) => split,
        SplitChoice::Auto => Split::new(0, 50, 50).expect("sums to 100"),
    }
}

/// The plan's owner: see the module documentation.
pub(crate) struct PlanController {
    split: SplitChoice,
    policy: EvictionPolicy,
    /// Decodes that can run at once (the model's CPU rates are per thread times these).
    threads: f64,
    /// The source's read limit, bytes a second, if one is set.
    read_limit: Option<u64>,
    cache: Arc<SampleCache>,
    stats: Arc<Stats>,
    /// The plan in force (split, prediction, inputs).
    plan: Mutex<Option<PlanState>>,
    /// Jobs active now: how many share each augmented output (the model's `jobs`).
    jobs_sharing: AtomicU32,
    /// The mount's own serving rate (the model's `t_serve`).
    serve: Mutex<ServeProbe>,
    /// The remote tier's measurements, if there is one.
    remote: Option<RemoteGauge>,
    /// Epochs the run is expected to read (`cache.epochs`).
    epochs_expected: u64,
    /// Epochs read so far (the most of the top-level passes and any job's epochs).
    epochs_done: AtomicU64,
    /// What memory held as epoch 2 started (counted the first time the plan is read or ticks
    /// once epoch 1 is done): epoch 2's prediction starts from it (`run::second_from`).
    after_epoch_1: Mutex<Option<run::Holding>>,
    /// One output's bytes in each pipeline (`augmented/`, then the recipes): the augmented
    /// form's room is theirs, split by reads (`prepfs::room_size`).
    output_sizes: Vec<f64>,
    /// The jobs one augmented output may serve, where recipes split them (the model's
    /// `output_jobs`), as the last tick counted them.
    output_jobs: Mutex<Option<f64>>,
}

/// The model's remote-tier inputs as measured now (see `cache/remote/network.rs`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct RemoteInputs {
    nodes: u32,
    b_nic: f64,
    c_nw: f64,
    s_remote: f64,
    s_remote_entry: f64,
    remote_decoded: f64,
    t_remote: f64,
}

impl RemoteInputs {
    /// `params` with these inputs, or with no remote path and an unbounded link for none.
    fn apply_to(this: Option<RemoteInputs>, params: &mut PlanParams) {
        let r = this.unwrap_or(RemoteInputs { nodes: 1, b_nic: f64::INFINITY, c_nw: 0.0, s_remote: 0.0, s_remote_entry: params.s_data, remote_decoded: 0.0, t_remote: 0.0 });
        params.nodes = r.nodes;
        params.b_nic = r.b_nic;
        params.c_nw = r.c_nw;
        params.s_remote = r.s_remote;
        params.s_remote_entry = r.s_remote_entry;
        params.remote_decoded = r.remote_decoded;
        params.t_remote = r.t_remote;
    }

    /// Whether the plan should be made again for `now` (a node came or went, the tier came or
    /// went, or the link's room moved by a fifth).
    fn moved(then: &PlanParams, now: Option<RemoteInputs>) -> bool {
        match now {
            None => then.s_remote > 0.0,
            Some(now) => {
                let room = |b: f64, c: f64| (b - c).max(1.0);
                then.s_remote == 0.0
                    || then.nodes != now.nodes
                    || (room(now.b_nic, now.c_nw) / room(then.b_nic, then.c_nw) - 1.0).abs() > 0.2
                    || (now.remote_decoded - then.remote_decoded).abs() > 0.2
                    || (now.t_remote - then.t_remote).abs() > 0.2 * then.t_remote.max(1e-4)
            }
        }
    }
}

struct PlanState {
    doc: serde_json::Value,
    params: PlanParams,
    /// Timed samples (both paths) when the plan was last made.
    timed: u64,
    /// The rate of a full decode and an augment (`run::epochs`'s `t_full`).
    t_full: f64,
    /// What each epoch should take under the plan (see `planner::run`).
    epochs: run::Epochs,
    /// The first-touch policy the run model chose for a run from its first epoch.
    keep_pixels: bool,
    split: Split,
}

/// Measures `t_serve`: see [`PlanController::probe_serve`].
struct ServeProbe {
    at: Instant,
    opens: u64,
    work: u64,
    best: Option<f64>,
    /// The machine's busy core-seconds and the pixel work's CPU nanoseconds at `at`.
    busy: Option<f64>,
    pixel_ns: u64,
    /// Source reads, outputs made and the jobs sharing at `at`.
    reads: u64,
    made: u64,
    jobs: u32,
    /// Over the intervals that served enough with the same jobs throughout: intervals, samples
    /// served, and core-seconds spent on them beyond the pixel work.
    costed: (u32, u64, f64),
    /// The same intervals, fitted as a cost per sample served and per output made.
    fit: ServeFit,
}

/// What the serving probe found: the model's `t_serve`, and with several jobs, where the
/// intervals tell it apart, what an output made costs beyond its pixel work (core-seconds) and
/// the source reads per output made it was measured at (`serve_fit`).
struct Serving {
    t_serve: Option<f64>,
    per_made: Option<(f64, f64)>,
}

impl PlanController {
    pub(crate) fn new(config: &Config, read_limit: Option<u64>, cache: Arc<SampleCache>, stats: Arc<Stats>, remote: Option<RemoteGauge>) -> PlanController {
        PlanController {
            split: config.cache.split,
            policy: config.cache.policy,
            threads: config.decode_parallelism() as f64,
            read_limit,
            cache,
            stats,
            plan: Mutex::new(None),
            jobs_sharing: AtomicU32::new(1),
            serve: Mutex::new(ServeProbe {
                at: Instant::now(),
                opens: 0,
                work: 0,
                best: None,
                busy: machine_busy_seconds(),
                pixel_ns: 0,
                reads: 0,
                made: 0,
                jobs: 1,
                costed: (0, 0, 0.0),
                fit: ServeFit::default(),
            }),
            remote,
            epochs_expected: config.cache.epochs,
            epochs_done: AtomicU64::new(0),
            after_epoch_1: Mutex::new(None),
            output_sizes: calibrate::output_sizes(config),
            output_jobs: Mutex::new(None),
        }
    }

    /// The first-touch policy over the rest of the run (`planner::run`): in the first epoch, the
    /// run model's choice for the epochs expected; later, keep the pixels of a sample met the
    /// first time while decoded has room as long as another epoch is expected after this one
    /// (every later epoch then resamples it), and decode only its region in the last (which
    /// gains nothing from keeping them).
    fn keep_pixels_at_first_touch(&self, model_choice: bool) -> bool {
        let done = self.epochs_done.load(Ordering::Relaxed);
        let left = self.epochs_expected.saturating_sub(done);
        if done == 0 { model_choice } else { left >= 2 }
    }

    /// The epochs left to the run (at least the current one).
    fn epochs_left(&self) -> u64 {
        self.epochs_expected.saturating_sub(self.epochs_done.load(Ordering::Relaxed)).max(1)
    }

    /// The remote tier's figures now; none without a tier, while it is down, or before its
    /// link was measured. What else the link carries is held below 95% of it.
    fn remote_inputs(&self) -> Option<RemoteInputs> {
        let gauge = self.remote.as_ref()?;
        let network = gauge.network()?;
        let (s_remote_entry, remote_decoded) = gauge.entries()?;
        Some(RemoteInputs {
            nodes: network.nodes.max(1),
            b_nic: network.b_nic,
            c_nw: network.c_nw.min(0.95 * network.b_nic),
            s_remote: gauge.size() as f64,
            s_remote_entry,
            remote_decoded,
            t_remote: gauge.hit_seconds().unwrap_or(0.0),
        })
    }

    /// Measures the model's inputs on a few samples (their bytes from `read`, the sizes of more
    /// from `size`) and applies the
    /// split: the best one for `split: auto`, else the configured one, with the model's
    /// prediction for it in stats either way.
    pub(crate) fn plan_at_mount(
        &self,
        catalog: &Catalog,
        config: &Config,
        read: impl Fn(FileId) -> Option<Vec<u8>> + Sync,
        size: impl Fn(FileId) -> Option<u64>,
    ) {
        if !self.cache.enabled() {
            return;
        }
        let Some(calibration) = calibrate::measure(catalog, config, read, size) else {
            tracing::warn!("no sample could be timed; keeping split {}", self.cache.split());
            return;
        };
        let mut params = calibration.params;
        self.behind_read_limit(&mut params);
        self.apply(params, calibration.t_full, "mount-time calibration", calibration.samples_timed as u64);
    }

    /// One turn of the loop (about once a second): `jobs` share the cache now (`output_jobs`
    /// each augmented output, where recipes split them); re-plans from the rates measured while
    /// serving once enough samples were timed since the last plan, or the serving rate or the
    /// jobs moved. Returns whether it re-planned.
    pub(crate) fn tick(&self, jobs: usize, output_jobs: Option<f64>, epochs_done: u64) -> bool {
        self.set_jobs_sharing(jobs);
        *self.output_jobs.lock_or_recover() = output_jobs;
        self.epochs_done.store(epochs_done, Ordering::Relaxed);
        if epochs_done >= 1 {
            self.after_epoch_1();
        }
        let chosen = self.plan.lock_or_recover().as_ref().is_some_and(|p| p.keep_pixels);
        self.cache.set_keep_pixels_at_first_touch(self.keep_pixels_at_first_touch(chosen));
        self.replan_from_live_rates()
    }

    /// Sets how many jobs are active (they share each augmented output); under `policy: auto`
    /// the cache evicts by LRU while more than one is.
    fn set_jobs_sharing(&self, jobs: usize) {
        self.jobs_sharing.store(jobs.max(1) as u32, Ordering::Relaxed);
        if self.policy == EvictionPolicy::Auto {
            self.cache.set_lru(jobs > 1);
        }
        self.cache.set_shared_outputs(jobs > 1);
    }

    /// Re-plans from the rates measured while serving: decode+augment and augment-only rates
    /// per thread times the decodes that can run at once, and the source's read rate.
    fn replan_from_live_rates(&self) -> bool {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let Serving { t_serve, per_made } = self.probe_serve();
        let s = &self.stats;
        let (da_n, da_ns) = (get(&s.decode_augments), get(&s.decode_augment_nanos));
        // Recipes: each pipeline's measured augment cost, weighted by its reads (`stats.rs`).
        let (a_n, a_ns) = s.read_weighted_augments(self.cache.pipelines());
        let (full_n, full_ns) = (get(&s.full_decodes), get(&s.full_decode_nanos));
        let (sized_n, sized_bytes) = (get(&s.sized_samples), get(&s.sized_pixel_bytes));
        let (reads, read_bytes) = (get(&s.source_reads), get(&s.source_bytes_read));
        let (read_cpu_ns, read_blocked_ns) = (get(&s.source_read_cpu_nanos), get(&s.source_read_blocked_nanos));
        let timed = da_n + a_n;
        let jobs = self.jobs_sharing.load(Ordering::Relaxed).max(1);
        let output_jobs = *self.output_jobs.lock_or_recover();
        let remote = self.remote_inputs();
        let (mut params, mut t_full) = {
            let plan = self.plan.lock_or_recover();
            let moved = |p: &PlanState| {
                let serve_moved = match (t_serve, p.params.t_serve) {
                    (Some(now), Some(then)) => (now / then - 1.0).abs() > 0.2,
                    (now, then) => now.is_some() != then.is_some(),
                };
                // Recipes' readers: a job more or less on a pipeline, not its reads' drift.
                let output_jobs_moved = match (output_jobs, p.params.output_jobs) {
                    (Some(now), Some(then)) => (now - then).abs() > 0.5,
                    (now, then) => now.is_some() != then.is_some(),
                };
                serve_moved || output_jobs_moved || p.params.jobs != jobs || RemoteInputs::moved(&p.params, remote)
            };
            match plan.as_ref() {
                Some(p) if timed >= p.timed + REPLAN_MIN_SAMPLES || moved(p) => (p.params.clone(), p.t_full),
                _ => return false,
            }
        };
        if t_serve.is_some() {
            params.t_serve = t_serve;
        }
        RemoteInputs::apply_to(remote, &mut params);
        let threads = self.threads;
        let planned_t_full = t_full;
        if full_n >= REPLAN_MIN_SAMPLES / 4 && a_n > 0 {
            // A first touch that keeps the pixels: a full decode, then an augment.
            let per = full_ns as f64 / full_n as f64 + a_ns as f64 / a_n as f64;
            t_full = threads * 1e9 / per.max(1.0);
        }
        if da_n >= REPLAN_MIN_SAMPLES {
            // A region decode's cost follows its crop's area (a random resized crop's is 8-100%
            // of the image): the mean of a few swings. Measured from 16, a 1600x1200 set's put
            // the rate at 758/s, then 410/s, and the plan went to 14-0-86 and back within two
            // epochs, evicting the outputs made for epoch 2 (predicted 1,092/s, measured 601).
            params.t_da = threads * da_n as f64 / (da_ns as f64 / 1e9).max(1e-9);
        } else if t_full != planned_t_full {
            // Few region decodes yet (a first epoch that keeps pixels decodes in full until
            // decoded is full): the region decode keeps its ratio to the full decode as planned,
            // scaled with the full decode's live rate. (Taking the full decode's rate for it put
            // the second epoch of 1600x1200 JPEGs 36% low.)
            params.t_da *= t_full / planned_t_full;
        }
        if a_n >= REPLAN_MIN_SAMPLES / 4 {
            params.t_a = threads * a_n as f64 / (a_ns as f64 / 1e9).max(1e-9);
        }
        if sized_n >= REPLAN_MIN_SAMPLES {
            // Sizes as this data set's reads measure them, each sample once, not calibration's
            // dozen samples: a form planned to hold every sample's pixels must hold the set's
            // mean, not theirs. (Not the full decodes' mean: with little room in decoded, the
            // samples it took were the smallest, and the generator's 500x375 set, 552 KB a
            // sample, measured 29 KB, which put a split with a decoded share 10x fast.)
            params.s_decoded = sized_bytes as f64 / sized_n as f64;
        }
        let mut read_cpu = None;
        if reads >= REPLAN_MIN_SAMPLES / 4 {
            let cores = f64::from(params.cores.max(1));
            // A read's CPU on its I/O thread (the page cache's copy, fresh pages) and its time
            // blocked on the storage, not its wall time (`source::ReadCost`).
            read_cpu = Some(read_cpu_ns as f64 / 1e9 / reads as f64);
            // The storage's rate as the model reads it (`prepfs::bounded`): its time for a read
            // is what the read takes beyond its CPU's share of the cores, here the time blocked.
            // Behind a read limit the storage gives the limit: reads queued at the throttle take
            // longer each, and bytes over their summed times would come out below it.
            let seconds = (read_blocked_ns as f64 + read_cpu_ns as f64 / cores) / 1e9;
            let rate = match self.read_limit {
                Some(limit) => limit as f64,
                None => read_bytes as f64 / seconds.max(1e-9),
            };
            params.b_storage = rate.min(1e12);
            // The mean file as read while serving, once the reads outnumber the files
            // calibration sized: the first reads to finish are the small files (behind 10 MB/s,
            // the first 16 of the 1600x1200 set read 255 KB a file against the set's 368 KB,
            // which put three jobs' first epoch 30% fast).
            if reads >= calibrate::SIZE_SAMPLES as u64 {
                params.s_data = read_bytes as f64 / reads as f64;
            }
        }
        self.behind_read_limit(&mut params);
        // A read's CPU, measured on its thread: behind a limit too (calibration's read time
        // is the link's, which `behind_read_limit` takes out).
        if let Some(cpu) = read_cpu {
            params.t_read = cpu;
        }
        // With several jobs, what an output made costs beyond its pixel work where the serving
        // probe tells it apart from serving (`serve_fit`: the output written, the round trips,
        // the read where it read), less the reads' own CPU it was measured with: only that is
        // spared where the encoded form spares the read.
        if let Some((per_made, reads_per_made)) = per_made {
            params.t_output = (per_made - reads_per_made * read_cpu.unwrap_or(0.0)).max(0.0);
        }
        self.apply(params, t_full, "rates measured while serving", timed);
        true
    }

    /// The storage's terms behind the source's read limit, if one is set: no faster than the
    /// limit, and calibration's read time (the link's) not taken as CPU; the live plan puts back
    /// a read's CPU as measured on its thread.
    fn behind_read_limit(&self, params: &mut PlanParams) {
        if let Some(limit) = self.read_limit {
            params.b_storage = params.b_storage.min(limit as f64);
            params.t_read = 0.0;
        }
    }

    /// One step of the serving-rate probe (called about once a second); the rate found so far.
    ///
    /// Serving costs CPU beyond the pixel work: FUSE round trips, copies and the readers' own
    /// work on the same cores. With one reading stream it is the best rate of an interval of a
    /// second that served at least [`SERVE_PROBE_MIN`] samples from the cache alone (no pixel
    /// work, no source reads); until one has, the model's default. With several jobs, whose
    /// misses never stop, it is the machine's busy core-seconds less the pixel work's CPU time,
    /// per sample served, over the intervals that served enough: that also counts what a miss
    /// costs beyond its timed pixel work (the source read, the output's encoding) at the jobs'
    /// steady mix of hits and misses, and any other load on the machine. (With one stream that
    /// mix changes from the first epoch to the second, so a lumped cost would mispredict both.)
    /// With several jobs, only intervals with the same jobs throughout count, and only once
    /// [`SERVE_PROBE_INTERVALS`] have; where their mixes tell them apart, the cost is split into
    /// one per sample served and one per output made (`serve_fit`), so that a first epoch of
    /// misses does not price the later epochs' hits.
    fn probe_serve(&self) -> Serving {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let s = &self.stats;
        let opens = get(&s.encoded.opens) + get(&s.decoded.opens) + get(&s.augmented.opens);
        let reads = get(&s.source_reads);
        let made = get(&s.decode_augments) + get(&s.pixel_augments);
        let work = s.decodes() + reads;
        let pixel_ns = get(&s.full_decode_nanos) + get(&s.decode_augment_nanos) + get(&s.pixel_augment_nanos);
        let busy = machine_busy_seconds();
        let jobs = self.jobs_sharing.load(Ordering::Relaxed);
        let mut probe = self.serve.lock_or_recover();
        let secs = probe.at.elapsed().as_secs_f64();
        if secs >= 0.9 {
            let served = opens.saturating_sub(probe.opens);
            if work == probe.work && served >= SERVE_PROBE_MIN {
                let rate = served as f64 / secs;
                probe.best = Some(probe.best.map_or(rate, |b: f64| b.max(rate)));
            }
            let (mut costed, mut fit) = (probe.costed, probe.fit);
            // An interval in which jobs joined or left costs their start (the readers' processes,
            // imports and listings: 3 jobs' first second put serving at a sixth of its rate).
            if let (Some(now), Some(then), true) = (busy, probe.busy, jobs == probe.jobs) {
                let spent = now - then - pixel_ns.saturating_sub(probe.pixel_ns) as f64 / 1e9;
                if served >= SERVE_PROBE_MIN && spent > 0.0 {
                    costed = (costed.0 + 1, costed.1 + served, costed.2 + spent);
                    fit.add(served, made.saturating_sub(probe.made), reads.saturating_sub(probe.reads), spent);
                }
            }
            *probe = ServeProbe { at: Instant::now(), opens, work, best: probe.best, busy, pixel_ns, reads, made, jobs, costed, fit };
        }
        let costed = probe.costed.0 >= SERVE_PROBE_INTERVALS;
        match (probe.best, probe.costed, probe.fit.costs()) {
            // Core-seconds a sample on `cores` cores: the machine serves cores / that a second;
            // an output's cost apart where the intervals tell it apart (`serve_fit`).
            (_, _, Some(c)) if jobs > 1 && costed => {
                Serving { t_serve: Some(self.threads / c.per_sample), per_made: Some((c.per_made, c.reads_per_made)) }
            }
            (_, (_, n, spent), _) if jobs > 1 && costed => Serving { t_serve: Some(self.threads * n as f64 / spent), per_made: None },
            // Pure serving, measured where nothing was made: the model's `t_serve` has an
            // output made for each one served.
            (best, _, _) => Serving { t_serve: best.map(|rate| rate / prepfs_planner::prepfs::PURE_HIT_SPEEDUP), per_made: None },
        }
    }

    /// Makes the plan for `params` and applies it to the cache (logged when the split changes).
    fn apply(&self, mut params: PlanParams, t_full: f64, from: &str, timed: u64) {
        params.jobs = self.jobs_sharing.load(Ordering::Relaxed).max(1);
        params.output_jobs = *self.output_jobs.lock_or_recover();
        // With recipes, each pipeline keeps outputs for its own reads in its share of the room.
        let (shares, read): (Vec<f64>, Vec<bool>) = self.cache.output_shares().into_iter().unzip();
        if let (true, Some(size)) = (shares.len() > 1, prepfs_planner::prepfs::room_size(&shares, &self.output_sizes, &read)) {
            params.s_augmented = size;
        }
        let done = self.epochs_done.load(Ordering::Relaxed);
        // The split and first-touch policy with the least time over the epochs left.
        let (split, over_the_run) = match self.split {
            SplitChoice::Auto => run::best_over_the_run(&params, t_full, done + 1, self.epochs_left()),
            SplitChoice::Fixed(split) => (split, run::over_the_run(&params, split, t_full, done + 1, self.epochs_left())),
        };
        let evaluation = Model::Prepfs.evaluate(&params, split);
        let previous = self.cache.split();
        // Memory a form cannot use (it holds every sample) flows to the next form.
        let budgets = prepfs_planner::budgets(&params, split, ENTRY_OVERHEAD as f64);
        let evicted = self.cache.set_split_budgets(split, budgets);
        let keep_pixels = self.keep_pixels_at_first_touch(over_the_run.keep_pixels);
        self.cache.set_keep_pixels_at_first_touch(keep_pixels);
        // Encoded planned to hold every sample holds every sample, those kept as pixels too (the
        // model's fill counts their bytes there).
        self.cache.set_bytes_beside_pixels(prepfs_planner::prepfs::fill_fractions(&params, split)[prepfs_planner::prepfs::E] >= 1.0);
        if previous != split || from.starts_with("mount") {
            tracing::info!(
                split = %split,
                evicted,
                predicted_samples_per_s = format!("{:.0}", evaluation.samples_per_s),
                t_da = format!("{:.0}", params.t_da),
                t_a = format!("{:.0}", params.t_a),
                b_storage_mb_s = format!("{:.0}", params.b_storage / 1e6),
                s_data = format!("{:.0}", params.s_data),
                s_decoded = format!("{:.0}", params.s_decoded),
                s_augmented = format!("{:.0}", params.s_augmented),
                t_serve = format!("{:.0}", params.t_serve.unwrap_or(0.0)),
                epochs_done = done,
                from,
                "cache plan"
            );
        }
        let doc = serde_json::json!({
            "split": split.as_array(),
            "model": "prepfs",
            "budgets": budgets,
            // With a remote tier shared by several mounts (`inputs.nodes`), for all of them.
            "predicted_samples_per_s": evaluation.samples_per_s,
            // Of the samples served, those not read from the source (with several jobs: what
            // the jobs' hit rates should come to).
            "predicted_hit_rate": 1.0 - evaluation.n_storage / (params.n_total.max(1) as f64),
            "seneca_predicted_samples_per_s": Model::Seneca.evaluate(&params, split).samples_per_s,
            // A first pass, with nothing cached yet: every sample a miss (`run`'s epoch 1).
            "predicted_cold_samples_per_s": over_the_run.epochs.first,
            "first_touch": if keep_pixels { "full decode, pixels kept" } else { "region decode" },
            "t_full": t_full,
            "inputs": params,
            // Where recipes split the augmented room: each pipeline's share and output size
            // (`inputs.s_augmented` is the room's size per output a read finds of its own).
            "pipelines": { "shares": shares, "read": read, "output_bytes": self.output_sizes },
            "from": from,
            "samples_timed": timed,
        });
        *self.plan.lock_or_recover() =
            Some(PlanState { doc, params, timed, t_full, epochs: over_the_run.epochs, keep_pixels: over_the_run.keep_pixels, split });
    }

    /// What memory held as epoch 2 started: counted once, the first time it is asked for.
    /// None before the first plan (which knows the samples).
    fn after_epoch_1(&self) -> Option<run::Holding> {
        let samples = self.plan.lock_or_recover().as_ref()?.params.n_total;
        let mut kept = self.after_epoch_1.lock_or_recover();
        Some(*kept.get_or_insert_with(|| {
            let n = samples.max(1) as f64;
            let share = |count: u64| (count as f64 / n).min(1.0);
            // Sample by sample: a form's entry count says how many it holds, not whether
            // those are the samples without a spare.
            let c = self.cache.status.held_counts();
            run::Holding {
                spares: share(c.spares),
                pixels: share(c.pixels),
                bytes: share(c.bytes),
                decoded: share(c.decoded),
                unheld_bytes: self.cache.unkept_mean_bytes(),
            }
        }))
    }

    /// The plan in force, for stats, with its predictions for the epoch being read (after
    /// `epochs_done`, as the mount counts them now), the next one and the steady state.
    pub(crate) fn plan_json(&self, epochs_done: u64) -> serde_json::Value {
        let current = epochs_done + 1;
        let left = if current == 2 { self.after_epoch_1() } else { None };
        let plan = self.plan.lock_or_recover();
        let Some(p) = plan.as_ref() else { return serde_json::Value::Null };
        let mut doc = p.doc.clone();
        // Epoch 2 from what epoch 1 left in memory, where the model predicts epochs apart.
        let second = left.and_then(|k| run::second_from(&p.params, p.split, p.t_full, k)).unwrap_or(p.epochs.second);
        let at = |e: u64| if e == 2 { second } else { p.epochs.at(e) };
        if let Some(map) = doc.as_object_mut() {
            map.insert(
                "epochs".into(),
                serde_json::json!({
                    "expected": self.epochs_expected,
                    "current": current,
                    "predicted_current_samples_per_s": at(current),
                    "predicted_next_samples_per_s": at(current + 1),
                    "predicted_steady_samples_per_s": p.epochs.steady,
                }),
            );
        }
        doc
    }
}
