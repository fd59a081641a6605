//! prepfs's own throughput model of a cache split (the default; how it differs from Seneca's
//! and why is in the planner's module documentation).
//!
//! For a split `E-D-A` of `s_cache` bytes, with one job (or the top-level views) reading:
//!
//! - **Fill, with spill.** The augmented share holds `min(n, B_A / s_augmented)` samples; what
//!   it does not need flows to the decoded share, which holds `min(n, (B_D + rest) / s_decoded)`;
//!   what that does not need flows to the encoded share (`s_data` a sample); what is left after
//!   that goes back to decoded, then augmented. Each form thus holds a fraction `h_A`, `h_D`,
//!   `h_E` of the samples.
//! - **Paths.** A request takes the cheapest form holding its sample. The forms fill disjointly
//!   first, as in Seneca (the decoded share holds samples the augmented share does not), and
//!   overlap only with memory to spare: the path fractions are `f_A = h_A`,
//!   `f_D = min(h_D, 1 - f_A)`, `f_E = min(h_E, 1 - f_A - f_D)`, `f_S = 1 - f_A - f_D - f_E`.
//!   Of the augmented samples, a share `r_D = (h_D - f_D) / f_A` is also held decoded and
//!   `r_E` encoded: what their refills start from.
//! - **Work per sample**, in seconds of the whole machine (rates are all cores' together,
//!   counted once): `W = f_D / t_a + (f_E + f_S) / t_da + f_S c_r`, plus the augmented hits'
//!   refills `f_A (r_D / t_a + (1 - r_D) / t_da + (1 - r_D - r_E) c_r)`, with `c_r = t_read /
//!   cores` the CPU a storage read takes (on local storage a read from the page cache is a copy
//!   and fresh pages: 0.2 ms of a core for the real photographs' 33 KB, 0.5 ms for 370 KB).
//! - **Made ahead or waited for.** With room for augmented outputs (a few dozen at least), the
//!   refill makes outputs for samples still to come in the pass, whatever form they are made
//!   from (`producer::background`), while readers wait on their round trips: a share `m` of the
//!   reads ([`made_ahead`]: `h_A`, the share of the outputs there is room for) find theirs
//!   made, and readers wait for the work of the rest. A sample takes
//!   `max(1 / t_serve + (1 - m) W, c_s / t_serve + W)`, `c_s` ([`SERVE_CPU_SHARE`]) the share of
//!   serving that keeps the cores busy. (On 2 cores with a cache of half the set, 0-0-100 ran
//!   1.12-1.42x faster than 0-100-0, which the sum of times alone ranked first:
//!   BENCHMARKS.md#2026-11-26-plan-matrix-local.)
//! - **Storage bytes per sample**: `(f_S + f_A (1 - r_D - r_E)) * s_data`.
//! - **The remote tier** (`s_remote` > 0), shared by the nodes, holds the share
//!   `h_R = min(1, s_remote / (n s_remote_entry))` of the samples, a share `remote_decoded` of
//!   them as pixels (an augment left to do) and the rest as encoded bytes (a decode and an
//!   augment), and each read takes `t_remote` of the node's time (its round trip and transfer):
//!   `w_R = t_remote / nodes + remote_decoded / t_a + (1 - remote_decoded) / t_da`. Whatever a node
//!   would read from the storage (a miss, an augmented hit's refill) comes from the remote in
//!   the share `h_R`: `f_R = h_R f_S` of the samples take the remote path, costing `w_R` and
//!   `s_remote_entry` bytes across the NIC; only the rest reads the storage.
//! - **Rate** = the minimum of the cores' and storage's rate together ([`cores_and_storage`]: the
//!   threads wait on reads, so it is below both `1 / seconds` and `b_storage / storage bytes`), `nodes * t_gpu`, and the
//!   links: `nodes (b_pcie - c_pcie) / s_augmented`, and `nodes (b_nic - c_nw)` over the bytes
//!   a sample brings across the NIC. With a remote tier those are the remote path's bytes (the
//!   node's memory is its own); without one, Seneca's setting, the cache is across the NIC and
//!   every path's bytes cross it. The mount measures `nodes`, `b_nic` and `c_nw` from the
//!   remote tier (`cache/remote/network.rs`).
//!
//! The per-path rates in the [`Evaluation`] are each path's rate on its own (`1 / (1 / t_serve +
//! its work)`); its sample counts are `n` times the path fractions.
//!
//! # Several jobs
//!
//! With `jobs > 1` reading at once (each sample once per epoch, opportunistic sampling), the
//! cache is less a store than a window: what one job's request made (an augmented output, the
//! decoded pixels, the encoded bytes) is kept until the other jobs have taken it, and then
//! makes room (the mount evicts by LRU and moves what no job still needs to the eviction end).
//! A job takes it when its own request reaches the sample's directory (a substitute keeps the
//! label), so a window of `w` entries lets a made item serve the other jobs in the share
//! `φ(w) = 1 - exp(-w / (WINDOW_PER_DIR · dirs))`: each item then serves `g(w) = 1 + (jobs-1)
//! φ(w)` jobs. A job served from any window that holds the sample needs nothing made for it: an
//! augmentation is saved by the augmented window, a decode by the augmented or decoded one, a
//! read by any. A window holds a sample from one epoch to the next only when it holds the whole
//! set (LRU under random orders keeps next to nothing else): `H_D`, `H_E` are 1 then, else 0;
//! in the jobs' first epoch they are 0 (nothing is held yet: every sample is read once).
//! (A decoded share of the plan's own that holds more samples than the augmented share holds
//! outputs is a window like the others: a decode evicts what no job needs, then the least
//! recently used (`cache::fill`). Beside a larger augmented share, and in memory that only
//! flowed to decoded, pixels are a stock, kept only while there is room, so part of what the
//! first epoch kept stays: three jobs behind 10 MB/s with every output held and 23-25% of the
//! pixels beside them read 0.25-0.28 of a sample per sample served, where 1/3 is predicted.
//! That stock is not credited. Crediting it, `H_D = h_D` where `w_A >= w_D`, made the plan
//! prefer a large decoded share beside a small augmented one (34-51-15 for 34-0-66), which ran
//! 15% slower though it decoded less
//! (BENCHMARKS.md#2026-11-27-plan-matrix-3jobs-10MBps-kept-pixels); crediting only memory
//! that flowed to decoded made it prefer a large encoded share spilling into decoded beside a
//! small augmented one (81-0-19 for 14-0-86, on the recorded inputs), the same shape.)
//! Per sample served, with `w_A`, `w_D`, `w_E` the entries each form's share holds:
//!
//! - augmentations `a = 1 / g(w_A)`; decodes `d = min(a, (1 - H_D) / g(max(w_A, w_D)))`;
//!   storage reads `r = min(d, (1 - H_E) / g(max(w_A, w_D, w_E)))`;
//! - CPU time `1 / t_serve + (a - d) / t_a + d / t_da + a c_o + r c_r`, storage bytes
//!   `r · s_data`, with `c_o` the CPU an output made costs beyond its pixel work and read (its
//!   writing and round trips: `t_output`, from the serving probe's fit) and `c_r` a read's own;
//! - with a remote tier, the reads come from it in the share `h_R` (`r h_R` samples cross the
//!   NIC, `s_remote_entry` bytes each, costing `t_remote / nodes`, and those held as pixels
//!   save their decode), and only
//!   `r (1 - h_R)` read the storage;
//! - the predicted hit rate (served without reading the source) is `1 - r (1 - h_R)`.
//! - with recipes (several pipelines, each keeping its own outputs in its share of the
//!   augmented room, counted by [`room_size`]), an output serves only the jobs reading its pipeline:
//!   `a = 1 / g'(w_A)`, `g'` with `output_jobs` (the read-weighted mean of each pipeline's jobs)
//!   in place of `jobs`, and where that splits the jobs, decodes and reads are shared through
//!   the decoded and encoded windows only (`w_D`, `max(w_D, w_E)`).

use super::params::PlanParams;
use super::search::Evaluation;
use super::split::Split;

/// Cached outputs one core serves a second, FUSE round trips and a reader's copy included, with
/// an output made for each one served ([`PURE_HIT_SPEEDUP`]), until the mount has measured its
/// own (`t_serve`). Measured on this project's 2-core test
/// machine: 2 Python readers took 3,548 cached 224x224 PPM outputs a second from a warm mount.
/// (With passthrough a fully cached epoch runs at about 5,600/s here, but the mount never
/// measures `t_serve` while misses go on, and 2,800 a core made the predictions of every cell
/// with a partial cache 36-47% high: BENCHMARKS.md#2026-11-26-plan-matrix-local.)
pub(crate) const DEFAULT_SERVE_PER_CORE: f64 = 1800.0;

/// How much faster cached outputs are served when no output is being made meanwhile (the
/// refill idle, no miss): `t_serve` and [`DEFAULT_SERVE_PER_CORE`] are the rate with an output
/// made for each one served, as in every epoch but a second one that finds every sample's
/// spare made (its refills wait for the next epoch). With a cache that holds the set, such
/// epochs ran at 5,562-6,449 samples/s on 2 cores (BENCHMARKS.md#2026-11-26-plan-matrix-run-local),
/// 1.65x the 3,600 of the default; the mount's own probe of `t_serve` (intervals with no
/// pixel work) measures pure serving and divides by this.
pub const PURE_HIT_SPEEDUP: f64 = 1.65;

/// The scale, in entries per directory, of how a window shares (see "Several jobs"). From a
/// simulation of 3 jobs, each reading 30 directories of 40 samples in its own random order for 2
/// epochs, substituting within the directory, with a window evicting its oldest entry: windows
/// of 16, 32, 64, 128 and 256 entries served each made item to 1.2, 1.5, 1.9, 2.7 and 3.0 jobs;
/// `1 + 2 (1 - exp(-w / (3 · 30)))` is within 0.16 of each.
pub(super) const WINDOW_PER_DIR: f64 = 3.0;

/// The output size the augmented form's budget is counted in where several pipelines
/// (`augmented/` and each recipe) split it, as the cache does, in `shares` (summing to 1), each
/// kept output serving only its own pipeline's reads: the bytes of room per sample at which
/// every pipeline that is `read` (every one, before any is) holds every sample of its own,
/// `max_p size_p / share_p`. Two pipelines read alike with outputs of one size: twice the size
/// (each holds half as many as one would). Where sizes or shares differ, a pipeline holds at
/// least the share of its samples the model counts, so the model's hits are a floor and a form
/// it plans to hold every sample is given room for every pipeline to hold them all. One
/// pipeline: its own size.
pub fn room_size(shares: &[f64], sizes: &[f64], read: &[bool]) -> Option<f64> {
    let any_read = read.iter().any(|&r| r);
    let per_sample = shares
        .iter()
        .zip(sizes)
        .zip(read)
        .filter(|&((&w, _), &r)| w > 0.0 && (r || !any_read))
        .map(|((w, s), _)| s / w)
        .fold(0.0, f64::max);
    (per_sample > 0.0 && shares.len() == sizes.len() && sizes.len() == read.len()).then_some(per_sample)
}

/// Fractions of the samples each form holds, and the bytes each holds.
struct Fill {
    held: [f64; 3],
    bytes: [f64; 3],
}

/// Encoded, decoded, augmented.
pub const E: usize = 0;
pub(super) const D: usize = 1;
pub(super) const A: usize = 2;

fn fill(p: &PlanParams, split: Split) -> Fill {
    let n = p.n_total as f64;
    let size = [p.s_data, p.s_decoded, p.s_augmented];
    let share = [split.e(), split.d(), split.a()].map(|pct| f64::from(pct) / 100.0 * p.s_cache);
    let mut bytes = [0.0; 3];
    let mut given = [false; 3];
    let mut rest = 0.0;
    // Seneca's fill order, each form passing on what it cannot use, then back up the order.
    for form in [A, D, E, D, A] {
        let budget = if given[form] { rest } else { share[form] + rest };
        given[form] = true;
        let room = (n * size[form] - bytes[form]).max(0.0);
        let take = budget.min(room);
        bytes[form] += take;
        rest = budget - take;
    }
    let held = [E, D, A].map(|f| (bytes[f] / (n * size[f])).min(1.0));
    Fill { held, bytes }
}

/// The fractions of the samples each form (encoded, decoded, augmented) holds under `split`.
pub fn fill_fractions(p: &PlanParams, split: Split) -> [f64; 3] {
    fill(p, split).held
}

/// The bytes the mount gives each form (encoded, decoded, augmented) for `split`: what each
/// holds after the spill, each entry charged `overhead` bytes more; a form that holds every
/// sample gets 5% more, for a set whose samples are larger than the mean measured; never more
/// than `s_cache` in all. Where that is more than the cache, the forms that hold every sample
/// are served first, so a form planned to hold every sample does (cut alike, the real
/// photographs' decoded form, planned to hold all 3,000 samples in a cache 10% larger than
/// their pixels, held 2,999), and the forms that hold part of the set share what is left.
pub fn budgets(p: &PlanParams, split: Split, overhead: f64) -> [u64; 3] {
    let f = fill(p, split);
    let size = [p.s_data, p.s_decoded, p.s_augmented];
    let whole = [E, D, A].map(|i| f.held[i] >= 1.0);
    let want = [E, D, A].map(|i| f.bytes[i] * (1.0 + overhead / size[i]) * if whole[i] { 1.05 } else { 1.0 });
    // The forms that hold every sample first: those the split gives a share, in its fill order,
    // then those the spill reached, in its order.
    let share = [split.e(), split.d(), split.a()];
    let order = [A, D, E].into_iter().filter(|&i| share[i] > 0).chain([E, D, A].into_iter().filter(|&i| share[i] == 0));
    let mut budget = [0.0; 3];
    let mut left = p.s_cache;
    for i in order.filter(|&i| whole[i]) {
        budget[i] = want[i].min(left);
        left -= budget[i];
    }
    // The rest share what is left as the split shares it.
    let part: f64 = [E, D, A].iter().filter(|&&i| !whole[i]).map(|&i| want[i]).sum();
    let scale = if part > left { left / part } else { 1.0 };
    for i in [E, D, A].into_iter().filter(|&i| !whole[i]) {
        budget[i] = want[i] * scale;
    }
    budget.map(|b| b as u64)
}

/// Evaluates one split (see the module documentation).
pub(super) fn evaluate(p: &PlanParams, split: Split) -> Evaluation {
    if p.jobs > 1 {
        return evaluate_shared(p, split, true);
    }
    let n = p.n_total as f64;
    let Fill { held, .. } = fill(p, split);
    let f_a = held[A];
    let f_d = held[D].min(1.0 - f_a).max(0.0);
    let f_e = held[E].min(1.0 - f_a - f_d).max(0.0);
    let f_s = (1.0 - f_a - f_d - f_e).max(0.0);
    let (r_d, r_e) = if f_a > 0.0 {
        let r_d = ((held[D] - f_d) / f_a).clamp(0.0, 1.0);
        (r_d, ((held[E] - f_e) / f_a).clamp(0.0, 1.0 - r_d))
    } else {
        (0.0, 0.0)
    };

    let (t_serve, t_a, t_da) = cpu_rates(p);
    let remote = Remote::of(p, t_a, t_da);
    // What memory does not hold comes from the remote tier where it holds it, else the storage.
    let f_r = f_s * remote.held;
    let f_src = f_s - f_r;
    // An augmented hit's refill starts from what memory holds, else reads like a miss.
    let refill_reads = (1.0 - r_d - r_e).max(0.0);
    let read_work = remote.held * remote.work + (1.0 - remote.held) / t_da;

    // Seconds of the machine's CPU per sample: times add up over the paths, a storage read's
    // own CPU included.
    let read_cpu = read_seconds(p);
    let refill = r_d / t_a + r_e / t_da + refill_reads * (read_work + (1.0 - remote.held) * read_cpu);
    let work = f_d / t_a + (f_e + f_src) / t_da + f_src * read_cpu + f_r * remote.work + f_a * refill;
    // The readers wait for the work of the samples whose output was not made ahead.
    let cpu = machine_seconds(t_serve, (1.0 - made_ahead(p, held[A])) * work, work);
    let storage = (f_src + f_a * refill_reads * (1.0 - remote.held)) * p.s_data;
    let nic_bytes = match p.s_remote > 0.0 {
        true => (f_r + f_a * refill_reads * remote.held) * p.s_remote_entry,
        false => f_a * p.s_augmented + f_d * p.s_decoded + (f_e + f_s) * p.s_data,
    };

    let alone = |work: f64| 1.0 / (1.0 / t_serve + work);
    Evaluation {
        n_a: f_a * n,
        n_d: f_d * n,
        n_e: f_e * n,
        n_storage: f_src * n,
        n_remote: f_r * n,
        dsi_a: alone(refill),
        dsi_d: alone(1.0 / t_a),
        dsi_e: alone(1.0 / t_da),
        dsi_s: alone(1.0 / t_da).min(p.b_storage / p.s_data),
        samples_per_s: bounded(p, cpu, storage, nic_bytes),
    }
}

/// Several jobs' first epoch, which finds nothing cached: every sample is read at least once,
/// however many jobs each read serves (`run.rs`'s epoch 1 for several jobs).
pub(super) fn first_epoch_shared(p: &PlanParams, split: Split) -> f64 {
    evaluate_shared(p, split, false).samples_per_s
}

/// Several jobs at once: the cache as a window shared by the jobs (see "Several jobs" in the
/// module documentation). `carried`: whether a form that holds the whole set still holds it
/// from an earlier epoch (false in the jobs' first epoch).
fn evaluate_shared(p: &PlanParams, split: Split, carried: bool) -> Evaluation {
    let n = p.n_total as f64;
    let Fill { held, bytes } = fill(p, split);
    let size = [p.s_data, p.s_decoded, p.s_augmented];
    let others = f64::from(p.jobs.max(1) - 1);
    let scale = f64::from(p.dirs.max(1)) * WINDOW_PER_DIR;
    // How many jobs one item made serves, with `items` entries to wait in, among `others` more.
    let serves_among = |others: f64, items: f64| 1.0 + others * (1.0 - (-items / scale).exp());
    let serves = |items: f64| serves_among(others, items);
    let [w_e, w_d, w_a] = [E, D, A].map(|f| bytes[f] / size[f]);
    let whole = |f: usize| if carried && held[f] >= 1.0 { 1.0 } else { 0.0 };
    // An output serves only the jobs reading its pipeline (recipes); pixels and bytes all.
    let output_others = p.output_jobs.map_or(others, |j| (j - 1.0).clamp(0.0, others));
    let augments = 1.0 / serves_among(output_others, w_a);
    // The window a decode is shared in: where recipes split the jobs, another pipeline's
    // outputs hold no pixels this one can use; the decoded pixels serve them all.
    let split_jobs = p.output_jobs.is_some_and(|j| j < f64::from(p.jobs) - 0.5);
    let w_pixels = if split_jobs { w_d } else { w_a.max(w_d) };
    let decodes = augments.min((1.0 - whole(D)) / serves(w_pixels));
    let reads = decodes.min((1.0 - whole(E)) / serves(w_pixels.max(w_e)));

    let (t_serve, t_a, t_da) = cpu_rates(p);
    let remote = Remote::of(p, t_a, t_da);
    // Reads come from the remote tier where it holds the sample; those it holds as pixels
    // need an augment, not a decode.
    let remote_reads = reads * remote.held;
    let saved_decodes = remote_reads * p.remote_decoded;
    let cpu = 1.0 / t_serve
        + (augments - decodes + saved_decodes) / t_a
        + (decodes - saved_decodes) / t_da
        + remote_reads * remote.read
        + (reads - remote_reads) * read_seconds(p)
        + augments * output_seconds(p);
    let storage = (reads - remote_reads) * p.s_data;
    let nic_bytes = match p.s_remote > 0.0 {
        true => remote_reads * p.s_remote_entry,
        false => (1.0 - augments) * p.s_augmented + (augments - decodes) * p.s_decoded + decodes * p.s_data,
    };

    let alone = |work: f64| 1.0 / (1.0 / t_serve + work);
    Evaluation {
        n_a: (1.0 - augments) * n,
        n_d: (augments - decodes) * n,
        n_e: (decodes - reads) * n,
        n_storage: (reads - remote_reads) * n,
        n_remote: remote_reads * n,
        dsi_a: alone(0.0),
        dsi_d: alone(1.0 / t_a),
        dsi_e: alone(1.0 / t_da),
        dsi_s: alone(1.0 / t_da).min(p.b_storage / p.s_data),
        samples_per_s: bounded(p, cpu, storage, nic_bytes),
    }
}

/// The remote tier as the model sees it: the share of samples it holds, and the CPU time a
/// sample read from it still needs.
struct Remote {
    held: f64,
    /// The node's time for one read: the read itself, then the pixel work left.
    read: f64,
    work: f64,
}

impl Remote {
    fn of(p: &PlanParams, t_a: f64, t_da: f64) -> Remote {
        let held = match p.s_remote > 0.0 {
            true => (p.s_remote / (p.n_total.max(1) as f64 * p.s_remote_entry)).min(1.0),
            false => 0.0,
        };
        let read = p.t_remote / f64::from(p.nodes.max(1));
        Remote { held, read, work: read + p.remote_decoded / t_a + (1.0 - p.remote_decoded) / t_da }
    }
}

/// The share of a cached output's serving time (`1 / t_serve`) that keeps the cores busy; the
/// rest is the readers waiting on round trips, when work made ahead of them can run. Fitted on
/// the generator's 500x375 set with a cache of half its decoded bytes (2 readers, 2 cores):
/// 0-0-100 ran its later epochs at 2,200 samples/s, 0-100-0 at 1,960
/// (BENCHMARKS.md#2026-11-26-plan-matrix-local); checked on the real photographs' cells.
pub(super) const SERVE_CPU_SHARE: f64 = 0.5;

/// Augmented outputs the cache must have room for before the refill makes any ahead of the
/// readers (a few per reader, above the refill's low-water mark).
const MADE_AHEAD_MIN_OUTPUTS: f64 = 32.0;

/// The share of a pass's reads that find their output made ahead, with room for the share `s`
/// of the samples' outputs: `s`. The refill keeps that room stocked with outputs for samples
/// still to come in the pass (`producer::background`). A random order over a stock that stayed
/// full would find more (`s (1 + ln(1 / s))`: 0.55 for `s` = 0.22), but the refill tops the stock
/// up only below its low-water mark while readers take from it, and on the cores the readers'
/// own work leaves: with 12% of the cache given to augmented outputs (`s` = 0.22) the later
/// epochs ran at 1,791 samples/s, as all to decoded (1,795), where the logarithm predicted 2,450
/// (BENCHMARKS.md#2026-11-26-plan-matrix-run-local).
pub(super) fn made_ahead(p: &PlanParams, s: f64) -> f64 {
    let s = s.clamp(0.0, 1.0);
    match s * p.n_total as f64 >= MADE_AHEAD_MIN_OUTPUTS {
        true => s,
        false => 0.0,
    }
}

/// Seconds of the machine a sample takes, with `work` the pixel work per sample (machine
/// seconds: rates on all cores) of which the readers wait for `waited` (the rest was made ahead
/// of them): the readers' round trips and the work they wait for add up, and all the work with
/// the serving's own CPU share must fit the cores; the slower of the two.
pub(super) fn machine_seconds(t_serve: f64, waited: f64, work: f64) -> f64 {
    (1.0 / t_serve + waited).max(SERVE_CPU_SHARE / t_serve + work)
}

/// Machine seconds a read from the storage costs the CPU: `t_read` core-seconds on one of the
/// nodes' cores.
pub(super) fn read_seconds(p: &PlanParams) -> f64 {
    p.t_read / f64::from(p.nodes.max(1) * p.cores.max(1))
}

/// Machine seconds an output made costs the CPU beyond its pixel work and read (several jobs):
/// `t_output` core-seconds on one of the nodes' cores.
pub(super) fn output_seconds(p: &PlanParams) -> f64 {
    p.t_output / f64::from(p.nodes.max(1) * p.cores.max(1))
}

/// The serve, augment and decode+augment rates of all nodes' cores.
pub(super) fn cpu_rates(p: &PlanParams) -> (f64, f64, f64) {
    let nodes = f64::from(p.nodes);
    let t_serve = nodes * p.t_serve.unwrap_or(DEFAULT_SERVE_PER_CORE * f64::from(p.cores.max(1)));
    (t_serve, nodes * p.t_a, nodes * p.t_da)
}

/// The rate given CPU seconds, storage bytes and NIC bytes per sample: the least of the cores
/// and storage together ([`cores_and_storage`]), the consumer and the link bounds.
pub(super) fn bounded(p: &PlanParams, cpu: f64, storage: f64, nic_bytes: f64) -> f64 {
    let nodes = f64::from(p.nodes);
    // The storage's own time: what a read takes beyond its CPU, which the cores' time already
    // counts (a read from the page cache is CPU alone; behind a read limit the link's time).
    let reads = if p.s_data > 0.0 { storage / p.s_data } else { 0.0 };
    let storage_seconds = if storage > 0.0 { (storage / p.b_storage - reads * read_seconds(p)).max(0.0) } else { 0.0 };
    let bounds = [
        cores_and_storage(cpu, storage_seconds, p.nodes.max(1) * p.cores.max(1), requesters(p)),
        p.t_gpu.map_or(f64::INFINITY, |t| nodes * t),
        nodes * (p.b_pcie - p.c_pcie) / p.s_augmented,
        if nic_bytes > 0.0 { nodes * (p.b_nic - p.c_nw).max(0.0) / nic_bytes } else { f64::INFINITY },
    ];
    bounds.into_iter().fold(f64::INFINITY, f64::min)
}

/// Requests in flight at once, each taking a sample through the cores and the storage in turn:
/// one a core, as the mount's own threads and one job's readers keep them (two readers on two
/// cores fit: [`cores_and_storage`]), or one a job where more jobs read at once, each job's
/// readers waiting on their own reads. Three jobs of one reader each behind 10 MB/s kept the
/// storage busy 95-99% of their run where two in flight predicted 79%: auto's makespans there
/// were predicted 0-24% high, and 0-12% with a request in flight a job
/// (BENCHMARKS.md#2026-11-27-plan-matrix-3jobs-10MBps-whole-half, `-mva-auto`).
pub(super) fn requesters(p: &PlanParams) -> u32 {
    (p.nodes.max(1) * p.cores.max(1)).max(p.jobs)
}

/// Samples a second through the cores and the storage at once, each sample taking `cpu`
/// seconds of the whole machine (`cores` cores) and `storage` seconds of the storage (one
/// device serving one read at a time, as a read limit does), with `threads` requests in flight
/// ([`requesters`]), each taking a sample through both in turn.
///
/// Neither bound alone: a thread waiting on a read leaves its core idle, so with few threads
/// the rate falls short of the lesser of `1 / cpu` and `1 / storage`, most where the two are
/// close. This is mean value analysis of that closed network (Reiser and Lavenberg,
/// "Mean-value analysis of closed multichain queuing networks", JACM 27(2), 1980), the storage
/// a queue and the cores a station of `cores` servers, each sample one core's time
/// (`cores * cpu`): the chance of `j` threads at the cores is carried from one population to
/// the next (the algorithm's load-dependent form), so a thread waits for a core only when
/// more threads than cores are there. With no more threads than cores that is a plain delay.
/// With the generator's 500x375 set at 10 MB/s and a fifth of it cached, epoch 2 took 0.95 ms
/// of the machine and 0.4 ms of the storage a sample on 2 cores: 1,357 samples/s measured,
/// where the lesser bound said 2,100 and this says 1,360.
pub(super) fn cores_and_storage(cpu: f64, storage: f64, cores: u32, threads: u32) -> f64 {
    let (threads, cores) = (threads.max(1) as usize, cores.max(1) as usize);
    let one_core = cores as f64 * cpu;
    // `found[j]`: the chance of `j` threads at the cores, one thread fewer in all. A thread
    // that finds `j - 1 >= cores` others there waits `(j - cores) / cores` of a sample's time
    // more than its own.
    let mut found = vec![1.0];
    let (mut queued, mut rate) = (0.0, 1.0 / cpu);
    for n in 1..=threads {
        let waits: f64 = (cores + 1..=n).map(|j| (j - cores) as f64 / cores as f64 * found[j - 1]).sum();
        let cores_time = one_core * (1.0 + waits);
        let storage_time = storage * (1.0 + queued);
        rate = n as f64 / (cores_time + storage_time);
        let mut now = vec![0.0; n + 1];
        for j in 1..=n {
            now[j] = rate * one_core / j.min(cores) as f64 * found[j - 1];
        }
        now[0] = (1.0 - now[1..].iter().sum::<f64>()).max(0.0);
        found = now;
        queued = rate * storage_time;
    }
    rate.min(1.0 / cpu)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::Model;

    /// Seneca's tests' set (1000 samples of 100 B encoded, 500 B decoded, 250 B augmented;
    /// decode and augment 1,000/s, augment 5,000/s; storage 10,000 samples/s), served at
    /// 4,000/s.
    /// Seneca's tests' set on 2 cores; no storage limit (the storage's 10,000 reads a second
    /// of that set would take a few percent off every rate here: [`cores_and_storage`]), unless
    /// a test brings one in.
    pub(in crate) fn base() -> PlanParams {
        PlanParams { t_serve: Some(4000.0), cores: 2, b_storage: f64::INFINITY, ..crate::seneca::tests::base() }
    }

    pub(in crate) fn split(s: &str) -> Split {
        s.parse().expect("split")
    }

    /// A rate the storage bounds: at most `bound`, and less only by the cores' time the threads
    /// spend on each sample beside its read (within 20% in these tests' sets).
    #[track_caller]
    fn assert_storage_bound(rate: f64, bound: f64) {
        assert!(rate <= bound * (1.0 + 1e-9) && rate > 0.8 * bound, "expected a rate just under the storage's {bound}, got {rate}");
    }

    #[track_caller]
    pub(in crate) fn assert_close(actual: f64, expected: f64) {
        assert!((actual - expected).abs() <= 1e-9 * expected.abs().max(1.0), "expected {expected}, got {actual}");
    }

    #[test]
    fn pipelines_splitting_the_augmented_budget_each_find_only_their_own_share_of_it() {
        assert_eq!(room_size(&[1.0], &[250.0], &[true]), Some(250.0));
        assert_eq!(room_size(&[0.5, 0.5], &[250.0, 250.0], &[true, true]), Some(500.0));
        assert_eq!(room_size(&[1.0], &[0.0], &[false]), None);
        // Two recipes read alike, outputs of 27.6 and 12.3 KB, `augmented/` unread with a
        // sliver: the room every read one needs to hold all its samples; the sliver left out.
        let shares = [1.0 / 27.0, 13.0 / 27.0, 13.0 / 27.0];
        let s = room_size(&shares, &[150_528.0, 27_663.0, 12_303.0], &[false, true, true]).expect("sizes");
        assert_close(s, 27_663.0 * 27.0 / 13.0);
        // Before any read, every pipeline counts.
        let s = room_size(&[0.5, 0.5], &[100.0, 300.0], &[false, false]).expect("sizes");
        assert_close(s, 600.0);
        // Two pipelines read alike hold half the augmented fraction one would, and hold every
        // sample only with room for both sizes.
        let one = base();
        let two = PlanParams { s_augmented: room_size(&[0.5, 0.5], &[250.0, 250.0], &[true, true]).expect("sizes"), ..base() };
        let a = split("0-0-100");
        let small = PlanParams { s_cache: 100_000.0, ..one.clone() };
        assert_close(fill_fractions(&PlanParams { s_cache: 100_000.0, ..two.clone() }, a)[A], fill_fractions(&small, a)[A] / 2.0);
        assert!(fill_fractions(&PlanParams { s_cache: 250_000.0, ..two.clone() }, a)[A] < 1.0);
        assert!(fill_fractions(&PlanParams { s_cache: 500_000.0, ..two }, a)[A] >= 1.0);
    }

    #[test]
    fn with_no_cache_a_sample_costs_its_serving_plus_a_decode_and_augment() {
        // 1/4000 + 1/1000 = 1.25 ms of CPU: 800/s (storage could give 10,000/s).
        assert_close(evaluate(&base(), split("0-100-0")).samples_per_s, 800.0);
    }

    #[test]
    fn times_add_up_over_the_paths_rather_than_rates() {
        // Half the samples decoded (5,000/s to augment), half from storage (1,000/s):
        // 1/4000 + 0.5/5000 + 0.5/1000 = 0.85 ms: 1176.47/s. Seneca's mean of rates says 3,000.
        let p = PlanParams { s_cache: 500.0 * 500.0, ..base() };
        let ev = evaluate(&p, split("0-100-0"));
        assert_close(ev.n_d, 500.0);
        assert_close(ev.samples_per_s, 1.0 / (1.0 / 4000.0 + 0.5 / 5000.0 + 0.5 / 1000.0));
        let seneca = Model::Seneca.evaluate(&PlanParams { b_storage: 1e9, ..p }, split("0-100-0"));
        assert!(seneca.samples_per_s > 2.0 * ev.samples_per_s, "{}", seneca.samples_per_s);
    }

    #[test]
    fn memory_a_form_cannot_use_flows_to_the_next() {
        // Room for every sample augmented and decoded, all given to augmented: the rest is
        // decoded, so a refill is an augment from pixels, and nothing is read from storage.
        let p = PlanParams { s_cache: 1000.0 * (250.0 + 500.0), ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        assert_close(ev.n_a, 1000.0);
        // Each output is made ahead of its reader: the serving's CPU share and the refill's
        // augment fit the cores, beside the readers' round trips.
        assert_close(ev.samples_per_s, 1.0 / (SERVE_CPU_SHARE / 4000.0 + 1.0 / 5000.0));
        // All of it to decoded instead: decoded holds every sample, the rest flows to encoded
        // (every sample) and back to augmented, which has room for 600 outputs: 40% of the
        // reads wait for their augment.
        let waits: f64 = 1.0 / 4000.0 + 0.4 / 5000.0;
        assert_close(evaluate(&p, split("0-100-0")).samples_per_s, 1.0 / waits.max(SERVE_CPU_SHARE / 4000.0 + 1.0 / 5000.0));
        let b = budgets(&p, split("0-0-100"), 0.0);
        assert!(b[1] > 0 && b[2] > 0 && b[0] == 0, "{b:?}");
        assert!(b.iter().sum::<u64>() as f64 <= p.s_cache);
    }

    #[test]
    fn a_storage_reads_cpu_adds_to_the_work_of_what_is_read_and_not_of_what_memory_holds() {
        // A read costs 1 ms of one of the 2 cores: 0.5 ms of the machine.
        let p = PlanParams { t_read: 1e-3, ..base() };
        let cold = 1.0 / (1.0 / 4000.0 + 1.0 / 1000.0 + 0.5e-3);
        assert_close(evaluate(&p, split("100-0-0")).samples_per_s, cold);
        // Every sample's bytes held: nothing is read, only the region decode is left.
        let held = PlanParams { s_cache: 1000.0 * 100.0, ..p.clone() };
        assert_close(evaluate(&held, split("100-0-0")).samples_per_s, 1.0 / (1.0 / 4000.0 + 1.0 / 1000.0));
        // The run: epoch 1 reads every sample, whatever the cache holds.
        let run = crate::run::epochs(&held, split("100-0-0"), 800.0, false);
        assert_close(run.first, cold);
    }

    #[test]
    fn a_form_planned_to_hold_every_sample_keeps_its_slack_and_what_only_flowed_on_gives_way() {
        // Room for every sample's pixels and 20% more: decoded holds the set, with 5% to spare
        // for samples larger than the mean; the rest flowed to encoded (part of the set).
        let p = PlanParams { s_cache: 1000.0 * 500.0 * 1.2, ..base() };
        let [e, d, a] = budgets(&p, split("0-100-0"), 0.0);
        assert_eq!(d, (1000.0 * 500.0 * 1.05) as u64);
        assert_eq!((e, a), ((1000.0 * 500.0 * 0.15) as u64, 0));
        // Just room for the pixels: decoded still holds the set; encoded gets nothing.
        let p = PlanParams { s_cache: 1000.0 * 500.0 * 1.02, ..base() };
        let [e, d, _] = budgets(&p, split("0-100-0"), 0.0);
        assert_eq!((e, d), (0, (1000.0 * 500.0 * 1.02) as u64));
        // Every form holds part of the set: the budgets are the split's.
        let p = PlanParams { s_cache: 1000.0 * 100.0, ..base() };
        let b = budgets(&p, split("50-50-0"), 0.0);
        assert_eq!(b, [50_000, 50_000, 0]);
    }

    #[test]
    fn an_augmented_hit_costs_its_refill_shared_among_the_jobs() {
        // Every sample augmented and nothing else: each refill decodes from storage.
        let p = PlanParams { s_cache: 1000.0 * 250.0, ..base() };
        let one = evaluate(&p, split("0-0-100"));
        // Better than no cache (800/s) only by the round trips the refill's work overlaps.
        assert_close(one.samples_per_s, 1.0 / (SERVE_CPU_SHARE / 4000.0 + 1.0 / 1000.0));
        let three = evaluate(&PlanParams { jobs: 3, ..p.clone() }, split("0-0-100"));
        assert_close(three.samples_per_s, 1.0 / (1.0 / 4000.0 + 1.0 / 3000.0));
    }

    #[test]
    fn a_reader_waits_for_its_work_without_augmented_room_and_not_with_it() {
        // Half the set decoded, the other half read: the reader waits for each sample's work.
        let p = PlanParams { s_cache: 500.0 * 500.0, ..base() };
        let waits = 1.0 / 4000.0 + 0.5 / 5000.0 + 0.5 / 1000.0;
        assert_close(evaluate(&p, split("0-100-0")).samples_per_s, 1.0 / waits);
        // Room for every output instead: the refill makes them all ahead of their readers (from
        // storage, nothing else held), so only the work and the serving's CPU share count.
        let q = PlanParams { s_cache: 1000.0 * 250.0, t_serve: Some(1000.0), ..base() };
        assert_close(evaluate(&q, split("0-0-100")).samples_per_s, 1.0 / (SERVE_CPU_SHARE / 1000.0 + 1.0 / 1000.0));
        // All of it to encoded, which holds every sample and passes the rest to decoded (300
        // samples): no augmented room, so the readers wait for every augment and decode.
        let waits = 1.0 / 1000.0 + 0.3 / 5000.0 + 0.7 / 1000.0;
        assert_close(evaluate(&q, split("100-0-0")).samples_per_s, 1.0 / waits);
        // A few outputs' room is no stock to make ahead into.
        let tiny = PlanParams { s_cache: 10.0 * 250.0, ..base() };
        assert_close(evaluate(&tiny, split("0-0-100")).samples_per_s, 800.0);
    }

    #[test]
    fn room_for_a_quarter_of_the_outputs_makes_a_quarter_of_them_ahead() {
        // Room for 250 of 1000 outputs, nothing else held: every sample is one region decode
        // (0.2 ms of the machine), served in 1 ms of round trips.
        let p = PlanParams { s_cache: 250.0 * 250.0, t_serve: Some(1000.0), t_da: 5000.0, ..base() };
        let ahead = made_ahead(&p, 0.25);
        assert_close(ahead, 0.25);
        assert_close(evaluate(&p, split("0-0-100")).samples_per_s, 1.0 / (1.0 / 1000.0 + (1.0 - ahead) / 5000.0));
        // Without augmented room the readers wait for every decode.
        let none = PlanParams { s_cache: 0.0, ..p.clone() };
        assert_close(evaluate(&none, split("0-0-100")).samples_per_s, 1.0 / (1.0 / 1000.0 + 1.0 / 5000.0));
        assert_eq!(made_ahead(&p, 1.0), 1.0);
        assert_eq!(made_ahead(&p, 0.0), 0.0);
    }

    #[test]
    fn a_slow_consumer_lets_spare_cpu_pay_for_refills() {
        let p = PlanParams { s_cache: 1000.0 * 250.0, t_gpu: Some(500.0), ..base() };
        assert_close(evaluate(&p, split("0-0-100")).samples_per_s, 500.0);
    }

    #[test]
    fn slow_storage_bounds_the_misses_and_the_refills_it_must_feed() {
        // 10 kB/s: 100 samples/s from storage. Half held decoded: 200/s.
        let p = PlanParams { b_storage: 1e4, s_cache: 500.0 * 500.0, ..base() };
        assert_storage_bound(evaluate(&p, split("0-100-0")).samples_per_s, 200.0);
        // Held augmented with nothing behind them, the refills read storage too.
        let p = PlanParams { b_storage: 1e4, s_cache: 500.0 * 250.0, ..base() };
        assert_storage_bound(evaluate(&p, split("0-0-100")).samples_per_s, 100.0);
    }

    #[test]
    fn a_read_that_is_all_cpu_is_counted_once_on_the_cores_and_never_again_as_storage_time() {
        // 2 threads each reading a 100-byte sample in 1 ms of a core, as from the page cache:
        // the storage's measured rate is 2e5 B/s, all of it the reads' CPU.
        let p = PlanParams { t_read: 1e-3, b_storage: 2.0 * 100.0 / 1e-3, ..base() };
        let unlimited = PlanParams { b_storage: f64::INFINITY, ..p.clone() };
        assert_close(evaluate(&p, split("100-0-0")).samples_per_s, evaluate(&unlimited, split("100-0-0")).samples_per_s);
        // Behind a limit the read's CPU is not counted (`t_read` 0) and all its time is the storage's.
        let limited = PlanParams { t_read: 0.0, ..p };
        let cores_alone = PlanParams { b_storage: f64::INFINITY, ..limited.clone() };
        assert!(evaluate(&limited, split("100-0-0")).samples_per_s < 0.95 * evaluate(&cores_alone, split("100-0-0")).samples_per_s);
    }

    #[test]
    fn one_thread_adds_its_cpu_and_storage_times_and_more_threads_overlap_them() {
        // One thread: a sample is 1 ms of CPU then 1 ms of storage.
        assert_close(cores_and_storage(1e-3, 1e-3, 1, 1), 500.0);
        // Two threads, the machine 1 ms a sample (2 ms of one core), storage 1 ms: by hand, one
        // thread alone runs 1/3 samples a ms and keeps 1/3 of a read queued, so with two a
        // read waits 4/3 ms: 2 samples in 2 + 4/3 ms.
        assert_close(cores_and_storage(1e-3, 1e-3, 2, 2), 2.0 / (2e-3 + 4.0 / 3.0 * 1e-3));
        // More threads come to the lesser bound from below.
        let rates: Vec<f64> = [1, 2, 4, 16, 64].iter().map(|&t| cores_and_storage(1e-3, 1e-3, t, t)).collect();
        assert!(rates.windows(2).all(|w| w[0] < w[1]) && rates[4] < 1000.0 && rates[4] > 850.0, "{rates:?}");
        // Storage far faster than the cores leaves the cores' rate; none at all is exactly it.
        let fast = cores_and_storage(1e-3, 1e-6, 2, 2);
        assert!(fast < 1000.0 && fast > 999.0, "{fast}");
        assert_close(cores_and_storage(1e-3, 0.0, 2, 2), 1000.0);
    }

    #[test]
    fn the_seneca_model_prints_exactly_what_plan_printed_before() {
        let p = crate::load_params(concat!(env!("CARGO_MANIFEST_DIR"), "/../../mount-configs/plan-example.yaml")).expect("example");
        let split = Some(split("20-30-50"));
        assert_eq!(Model::Seneca.plan_json(&p, split), crate::plan_json(&p, split));
        assert_ne!(Model::Prepfs.plan_json(&p, split), Model::Seneca.plan_json(&p, split));
        assert_eq!("seneca".parse::<Model>(), Ok(Model::Seneca));
        assert!("magic".parse::<Model>().is_err());
    }

    /// How many jobs an item serves with `items` entries to wait in, 3 jobs in `dirs` directories.
    fn serves(items: f64, dirs: f64) -> f64 {
        1.0 + 2.0 * (1.0 - (-items / (3.0 * dirs)).exp())
    }

    #[test]
    fn with_several_jobs_what_one_job_read_waits_in_the_window_for_the_others() {
        // 100 directories, 250 samples' bytes cached (a quarter of the set), storage 100
        // samples/s. One job reads the three quarters the cache does not hold: 133.3/s.
        let p = PlanParams { b_storage: 1e4, s_cache: 250.0 * 100.0, dirs: 100, ..base() };
        assert_storage_bound(evaluate(&p, split("100-0-0")).samples_per_s, 1e4 / 75.0);
        // Three jobs: a window of 250 entries for 100 directories (scale 300) lets each read
        // serve 1 + 2 (1 - e^(-250/300)) = 1.87 jobs: 187/s, and 53% of the samples served
        // are hits. (Nothing stays from one epoch to the next: the window is not the set.)
        let three = evaluate(&PlanParams { jobs: 3, ..p.clone() }, split("100-0-0"));
        let g = serves(250.0, 100.0);
        assert_storage_bound(three.samples_per_s, 100.0 * g);
        assert_close(three.n_storage, 1000.0 / g);
        // Ten directories: the window covers them and each read serves nearly all three jobs.
        let ten = evaluate(&PlanParams { jobs: 3, dirs: 10, ..p }, split("100-0-0"));
        assert_storage_bound(ten.samples_per_s, 100.0 * serves(250.0, 10.0));
    }

    #[test]
    fn with_several_jobs_a_shared_output_saves_its_decode_and_its_read() {
        // Room for 50 outputs in 10 directories: an output serves 1 + 2 (1 - e^(-50/30)) = 2.62
        // jobs, so a sample costs 1/2.62 of a decode and of a read.
        let p = PlanParams { jobs: 3, dirs: 10, s_cache: 50.0 * 250.0, ..base() };
        let ev = evaluate(&p, split("0-0-100"));
        let a = 1.0 / serves(50.0, 10.0);
        assert_close(ev.samples_per_s, 1.0 / (1.0 / 4000.0 + a / 1000.0));
        assert_close(ev.n_a, 1000.0 * (1.0 - a));
        assert_close(ev.n_storage, 1000.0 * a);
        // The same memory as bytes shares only the reads: every job decodes (800/s).
    }

    #[test]
    fn with_several_jobs_an_output_made_costs_its_writing_and_bytes_held_spare_only_the_reads_own_cpu() {
        // An output made costs 1 ms of a core beyond its pixel work, a read 0.1 ms (2 cores).
        let p = PlanParams { jobs: 3, dirs: 10, s_cache: 50.0 * 250.0, t_output: 1e-3, t_read: 1e-4, ..base() };
        let a = 1.0 / serves(50.0, 10.0);
        let all_outputs = evaluate(&p, split("0-0-100"));
        assert_close(all_outputs.samples_per_s, 1.0 / (1.0 / 4000.0 + a / 1000.0 + a * 0.5e-3 + a * 0.05e-3));
        // Half the room as encoded bytes: 62.5 of them spare reads, but every output still
        // costs its writing; only the reads' 0.05 ms is saved.
        let (a, r) = (1.0 / serves(25.0, 10.0), 1.0 / serves(62.5, 10.0));
        let half_bytes = evaluate(&p, split("50-0-50"));
        assert_close(half_bytes.samples_per_s, 1.0 / (1.0 / 4000.0 + a / 1000.0 + a * 0.5e-3 + r * 0.05e-3));
        assert!(half_bytes.samples_per_s < all_outputs.samples_per_s);
        // One job: serving's measured rate has an output made in it; nothing is added.
        let one = PlanParams { jobs: 1, ..p.clone() };
        assert_eq!(evaluate(&one, split("0-0-100")), evaluate(&PlanParams { t_output: 0.0, ..one }, split("0-0-100")));
    }

    #[test]
    fn with_recipes_an_output_serves_only_its_own_pipelines_jobs() {
        // Three jobs, each reading a recipe of its own: an output serves its maker alone, so
        // every sample is an augment, and a decode too where only outputs are kept.
        let p = PlanParams { jobs: 3, dirs: 10, s_cache: 50.0 * 250.0, ..base() };
        let apart = evaluate(&PlanParams { output_jobs: Some(1.0), ..p.clone() }, split("0-0-100"));
        assert_close(apart.n_a, 0.0);
        assert_close(apart.samples_per_s, 1.0 / (1.0 / 4000.0 + 1.0 / 1000.0));
        // Kept as pixels, a decode still serves all three jobs: an augment each, a decode shared.
        let pixels = evaluate(&PlanParams { output_jobs: Some(1.0), s_cache: 50.0 * 500.0, ..p.clone() }, split("0-100-0"));
        let d = 1.0 / serves(50.0, 10.0);
        assert_close(pixels.samples_per_s, 1.0 / (1.0 / 4000.0 + (1.0 - d) / 5000.0 + d / 1000.0));
        // All three on one pipeline: as without recipes.
        let together = evaluate(&PlanParams { output_jobs: Some(3.0), ..p.clone() }, split("0-0-100"));
        assert_eq!(together, evaluate(&p, split("0-0-100")));
    }

    #[test]
    fn more_requests_in_flight_than_cores_wait_for_the_cores_and_keep_the_storage_busier() {
        // Two cores, the machine 1 ms a sample (2 ms of a core), the storage 1 ms: two threads
        // run 600/s (above). By hand, in ms: one thread, 1/3 a ms, at the cores 2/3 of the
        // time; two, 2 / (2 + 4/3) = 3/5, none, one or two at the cores 1/5, 2/5 and 2/5 of
        // the time, 4/5 of a read queued; three, waiting for a core only behind two:
        // 3 / (2/5 * 2 + 2/5 * 2 + 2/5 * 3 + 9/5) = 5/7.
        assert_close(cores_and_storage(1e-3, 1e-3, 2, 3), 5.0 / 7.0 * 1000.0);
        // Many threads come to the lesser bound; the cores' never passed, and without storage
        // time three threads on two cores keep both busy.
        let many = cores_and_storage(1e-3, 1e-3, 2, 64);
        assert!(many > 950.0 && many <= 1000.0, "{many}");
        assert_close(cores_and_storage(1e-3, 0.0, 2, 3), 1000.0);
        // One request in flight a core, or one a job where more jobs read.
        assert_eq!(requesters(&base()), 2);
        assert_eq!(requesters(&PlanParams { jobs: 3, ..base() }), 3);
    }

    #[test]
    fn with_several_jobs_a_form_holding_the_whole_set_ends_its_work() {
        // Every sample's pixels fit: no decode and no read after the first epoch, whatever the
        // windows; each sample is an augment from pixels (1/4000 + 1/5000 s).
        let p = PlanParams { jobs: 3, dirs: 10, s_cache: 1000.0 * 500.0, ..base() };
        let ev = evaluate(&p, split("0-100-0"));
        assert_close(ev.n_storage, 0.0);
        assert_close(ev.samples_per_s, 1.0 / (1.0 / 4000.0 + 1.0 / 5000.0));
    }

    #[test]
    fn the_best_split_holds_what_the_cpus_need_most() {
        // A cache for half the set decoded: the best is to hold pixels, not use-once outputs.
        let p = PlanParams { s_cache: 500.0 * 500.0, ..base() };
        let (best, ev) = Model::Prepfs.best_split(&p);
        assert!(ev.samples_per_s >= evaluate(&p, split("0-0-100")).samples_per_s);
        assert!(best.d() > 0, "{best}");
        // With three jobs in 100 directories and room for 200 outputs, augmented outputs win:
        // a shared output saves a decode for each job it serves, pixels only the decode.
        let (best, _) = Model::Prepfs.best_split(&PlanParams { jobs: 3, dirs: 100, s_cache: 200.0 * 250.0, ..base() });
        assert_eq!(best.a(), 100, "{best}");
    }

    // --- the remote tier ------------------------------------------------------------------------

    /// No memory, a storage of 100 samples/s (1e4 B/s), CPU 800/s (1 / (1/4000 + 1/1000)).
    fn remote_base() -> PlanParams {
        PlanParams { b_storage: 1e4, ..base() }
    }

    #[test]
    fn a_remote_tier_holding_every_sample_replaces_the_storage_and_its_link_bounds_the_rate() {
        let alone = evaluate(&remote_base(), Split::new(0, 0, 100).expect("split"));
        assert_storage_bound(alone.samples_per_s, 100.0);
        let p = PlanParams { s_remote: 1000.0 * 100.0, s_remote_entry: 100.0, b_nic: 5e4, ..remote_base() };
        let ev = evaluate(&p, Split::new(0, 0, 100).expect("split"));
        assert!((ev.n_remote - 1000.0).abs() < 1e-9 && ev.n_storage.abs() < 1e-9, "{ev:?}");
        // 5e4 B/s over 100 B a sample.
        assert!((ev.samples_per_s - 500.0).abs() < 1e-9, "{ev:?}");
        // An unbounded link leaves the CPU: a decode and an augment a sample.
        let ev = evaluate(&PlanParams { b_nic: f64::INFINITY, ..p }, Split::new(0, 0, 100).expect("split"));
        assert!((ev.samples_per_s - 800.0).abs() < 1e-9, "{ev:?}");
    }

    #[test]
    fn a_remote_tier_holding_half_the_set_halves_the_storage_reads() {
        let p = PlanParams { s_remote: 500.0 * 100.0, s_remote_entry: 100.0, ..remote_base() };
        let ev = evaluate(&p, Split::new(0, 0, 100).expect("split"));
        assert!((ev.n_remote - 500.0).abs() < 1e-9 && (ev.n_storage - 500.0).abs() < 1e-9, "{ev:?}");
        // 1e4 B/s over 50 B of storage a sample.
        assert_storage_bound(ev.samples_per_s, 200.0);
    }

    #[test]
    fn pixels_from_the_remote_tier_need_only_their_augment() {
        let p = PlanParams { s_remote: 1000.0 * 500.0, s_remote_entry: 500.0, remote_decoded: 1.0, ..remote_base() };
        let ev = evaluate(&p, Split::new(0, 0, 100).expect("split"));
        // 1 / (1/4000 + 1/5000).
        assert!((ev.samples_per_s - 1e3 / (0.25 + 0.2)).abs() < 1e-6, "{ev:?}");
    }

    #[test]
    fn a_remote_reads_time_is_charged_to_each_sample_read_from_it() {
        let p = PlanParams { s_remote: 1000.0 * 100.0, s_remote_entry: 100.0, t_remote: 1e-3, ..remote_base() };
        let ev = evaluate(&p, Split::new(0, 0, 100).expect("split"));
        // 1 / (1/4000 + 1/1000 + 1/1000).
        assert!((ev.samples_per_s - 1e3 / 2.25).abs() < 1e-6, "{ev:?}");
    }

    #[test]
    fn the_nodes_and_what_else_the_link_carries_set_the_link_bound() {
        let p = PlanParams { s_remote: 1000.0 * 100.0, s_remote_entry: 100.0, b_nic: 5e4, c_nw: 2.5e4, nodes: 2, ..remote_base() };
        let ev = evaluate(&p, Split::new(0, 0, 100).expect("split"));
        // Two nodes, each with 2.5e4 B/s of its link left, 100 B a sample.
        assert!((ev.samples_per_s - 500.0).abs() < 1e-9, "{ev:?}");
        // A link taken whole by other traffic serves nothing from the remote tier.
        let ev = evaluate(&PlanParams { c_nw: 5e4, ..p }, Split::new(0, 0, 100).expect("split"));
        assert_eq!(ev.samples_per_s, 0.0, "{ev:?}");
    }

    #[test]
    fn jobs_sharing_the_cache_read_from_the_remote_tier_before_the_storage() {
        let p = PlanParams { jobs: 3, dirs: 10, ..remote_base() };
        let without = evaluate(&p, Split::new(0, 0, 100).expect("split"));
        let with = evaluate(&PlanParams { s_remote: 1000.0 * 100.0, s_remote_entry: 100.0, ..p }, Split::new(0, 0, 100).expect("split"));
        assert!(without.n_storage > 0.0 && with.n_storage.abs() < 1e-9, "{without:?} {with:?}");
        assert!((with.n_remote - without.n_storage).abs() < 1e-9, "{without:?} {with:?}");
        assert!(with.samples_per_s > without.samples_per_s, "{without:?} {with:?}");
    }

    #[test]
    fn without_a_remote_tier_the_model_is_unchanged_by_the_remote_inputs_defaults() {
        let text = "n_total: 1000\ns_data: 100\nm: 5\ns_cache: 0\nb_cache: 1e9\nb_nic: .inf\nb_pcie: .inf\nb_storage: 1e6\nt_da: 1000\nt_a: 5000\nnodes: 1\nc_nw: 0\nc_pcie: 0\n";
        let p = crate::params::parse_params(text).expect("parses");
        assert_eq!((p.s_remote, p.s_remote_entry, p.remote_decoded), (0.0, 100.0, 0.0));
        let with = crate::params::parse_params(&format!("{text}s_remote: 5e4\nremote_decoded: 0.5\n")).expect("parses");
        assert_eq!((with.s_remote, with.remote_decoded), (5e4, 0.5));
        let bad = crate::params::parse_params(&format!("{text}remote_decoded: 2\n")).expect_err("refused");
        assert!(bad.to_string().contains("remote_decoded"), "{bad}");
    }
}
