//! The plan over the run: what each epoch to come should take, and the first-touch policy that
//! serves the run fastest. prepfs's model (`prepfs.rs`) predicts a steady state: every form
//! holds what the split gives it. The first epochs are not that: epoch 1 finds nothing cached
//! and every sample is read, and what its misses keep decides epoch 2.
//!
//! For one job (or the top-level views), with `h_E`, `h_D`, `h_A` the fractions of the samples
//! each form holds under the split (the model's fill, spill included), and the policy for a
//! sample met the first time while decoded has room (`keep`: decode it in full and keep the
//! pixels, with a spare output while augmented has room; else decode only the crop's region
//! and keep the bytes, the mount's choice where the split gives decoded no share of its own):
//!
//! - **Epoch 1**, every sample a miss read from the storage: of the samples, `k_D = h_D` (with
//!   `keep`, a split with a decoded share, or room for augmented outputs, whose refill keeps the
//!   pixels of what it decodes; else 0) are decoded in full (`1 / t_full`: a full
//!   decode and an augment), `k_A = min(k_D, h_A)` of them with a spare (`1 / t_a` more), and
//!   the rest decode their region (`1 / t_da`), `k_E = min(h_E, 1 - k_D)` kept as bytes.
//!   work `k_D / t_full + k_A / t_a + (1 - k_D) / t_da + c_r` (`c_r`, a storage read's CPU:
//!   `prepfs::read_seconds`), storage `s_data` a sample.
//! - **Epoch 2**: a spare is an augmented hit; its refill, for the next epoch, waits while
//!   readers take outputs from a full stock (the refill's marks, docs/cache-and-planner.md, "The cache"), so it
//!   is epoch 3's (with a spare for every sample nothing is made meanwhile, and serving runs at
//!   the pure-hit rate, `prepfs::PURE_HIT_SPEEDUP` times `t_serve`, for the share of the epoch
//!   no pixel work runs beside the spares); the other pixels are augmented (`(k_D - k_A) / t_a`); samples kept as bytes are decoded in full
//!   and kept as pixels while decoded has room (`p = min(k_E, h_D - k_D)` of them, `1 / t_full`)
//!   or decode their region (`1 / t_da`); the rest are read (`c_r`) and decode their region.
//! - **Epochs 3 on**: the steady state (`prepfs::evaluate`).
//!
//! Epoch 2 is predicted twice: from the split's fill (above, to choose the split), and as it
//! starts from what memory holds sample by sample ([`Holding`], [`second_from`]), which is what
//! `stats.json` shows.
//!
//! **Several jobs** (`jobs > 1`, opportunistic sampling): the steady model's shared window
//! (`prepfs.rs`, "Several jobs") gives every epoch but the first; the first finds nothing held
//! from an earlier epoch, so every sample is read at least once whatever the cache holds
//! (`prepfs::first_epoch_shared`). Three jobs over a set the cache holds whole, behind 10 MB/s,
//! spend nearly all their run reading it once: 15.3 s of 15.3 for the 1600x1200 set, where
//! every epoch at the steady rate predicted 1.3 s.
//!
//! Times per sample add up over the paths, made ahead of the readers or waited for as the
//! steady model says (augmented room or none); the rate is bounded as the steady model bounds it
//! (CPU, storage, consumers, PCIe; with one job and a remote tier, which only the steady model
//! knows, every epoch is predicted at the steady rate). The policy chosen is the
//! one with the least time over the epochs left: with one epoch left a region decode is
//! cheaper; with more, keeping the pixels saves the region decode a second touch would pay.

use super::prepfs::{self, A, D, E};
use super::params::PlanParams;
use super::split::Split;

/// Predicted samples a second, epoch by epoch, under one first-touch policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epochs {
    /// Epoch 1, from an empty cache.
    pub first: f64,
    /// Epoch 2.
    pub second: f64,
    /// Epochs 3 on.
    pub steady: f64,
}

impl Epochs {
    /// Seconds a sample takes over `left` epochs from the start of epoch `from` (1-based).
    fn seconds(&self, from: u64, left: u64) -> f64 {
        (from..from + left)
            .map(|e| match e {
                1 => 1.0 / self.first,
                2 => 1.0 / self.second,
                _ => 1.0 / self.steady,
            })
            .sum()
    }

    /// The rate predicted for epoch `e` (1-based).
    pub fn at(&self, e: u64) -> f64 {
        match e {
            0 | 1 => self.first,
            2 => self.second,
            _ => self.steady,
        }
    }
}

/// The plan over the run for one split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunPlan {
    /// Whether a first touch decodes in full and keeps the pixels wherever decoded has room.
    pub keep_pixels: bool,
    pub epochs: Epochs,
}

/// Whether the one-job epochs below do not apply: several jobs (their first epoch and then the
/// steady state, [`epochs`]) or a remote tier, which only the steady model knows.
fn at_the_steady_rate(p: &PlanParams) -> bool {
    p.jobs > 1 || p.s_remote > 0.0
}

/// The epochs of a run under `split`, with `t_full` the rate (samples/s, per node, on all its
/// cores) of a full decode followed by an augment, and `keep` the first-touch policy.
pub fn epochs(p: &PlanParams, split: Split, t_full: f64, keep: bool) -> Epochs {
    let steady = prepfs::evaluate(p, split).samples_per_s;
    if p.jobs > 1 {
        // The jobs' first epoch reads every sample at least once; from the second on, the
        // steady state.
        return Epochs { first: prepfs::first_epoch_shared(p, split), second: steady, steady };
    }
    if at_the_steady_rate(p) {
        return Epochs { first: steady, second: steady, steady };
    }
    let held = prepfs::fill_fractions(p, split);
    let (t_serve, t_a, t_da) = prepfs::cpu_rates(p);
    let t_full = f64::from(p.nodes) * t_full;
    // With room for augmented outputs the refill makes a share of the outputs ahead of their
    // readers, who wait for the rest's work; a spare is made for the next epoch, never waited for.
    let ahead = prepfs::made_ahead(p, held[A]);
    // The refill keeps the pixels of what it decodes while decoded has room, whatever the
    // policy for a reader's miss (`Admit::Fill`).
    let k_d = if keep || split.d() > 0 || ahead > 0.0 { held[D] } else { 0.0 };
    let k_a = k_d.min(held[A]);
    let k_e = held[E].min(1.0 - k_d).max(0.0);
    // Every sample is read from the storage once, its read's CPU included.
    let read_cpu = prepfs::read_seconds(p);
    let work_1 = k_d / t_full + (1.0 - k_d) / t_da + read_cpu;
    let first = prepfs::bounded(p, prepfs::machine_seconds(t_serve, (1.0 - ahead) * work_1, work_1 + k_a / t_a), p.s_data, 0.0);
    let second = second_epoch(p, held, t_full, Holding::of_forms(k_e, k_d, k_a));
    Epochs { first, second, steady }
}

/// What memory holds as an epoch starts, sample by sample, each a fraction of the samples:
/// samples with a spare (an augmented output made ahead), and of those without one, samples
/// kept as pixels and samples kept as bytes alone; the rest memory holds in no form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Holding {
    pub spares: f64,
    pub pixels: f64,
    pub bytes: f64,
    /// Samples kept as pixels, a spare or not (decoded's room left for promotions).
    pub decoded: f64,
    /// The mean bytes of a sample held in no form, where known (else the set's mean).
    pub unheld_bytes: Option<f64>,
}

impl Holding {
    /// The holding from each form's share of the samples (each sample counted once: as pixels,
    /// else as bytes), the spares falling first on the samples kept as pixels (the model's
    /// epoch 1 makes them from those), then on those kept as bytes, then on the rest.
    pub(crate) fn of_forms(encoded: f64, decoded: f64, augmented: f64) -> Holding {
        let spares = augmented.clamp(0.0, 1.0);
        let on_pixels = spares.min(decoded);
        let on_bytes = (spares - on_pixels).min(encoded).max(0.0);
        Holding {
            spares,
            pixels: (decoded - on_pixels).max(0.0),
            bytes: (encoded - on_bytes).max(0.0),
            decoded: decoded.max(0.0),
            unheld_bytes: None,
        }
    }
}

/// Epoch 2's rate when epoch 1 left `k` in memory (`t_full` on all the nodes' cores), `held` the
/// split's fill (the room decoded has for promotions, the room augmented has to make outputs
/// ahead). A spare serves its sample (its refill is the next epoch's). Of the samples without
/// one, pixels are augmented, bytes decoded in full and kept while decoded has room or else
/// region-decoded, and the rest read and region-decoded.
///
/// Spares are served at the pure-hit rate (`prepfs::PURE_HIT_SPEEDUP`) for the share of the
/// epoch's time no pixel work runs beside them: all of it when every sample has a spare, next
/// to none when the misses' decodes fill the epoch. (A step at "every sample" mispredicted a
/// whole-set cache whose spares fell a few samples short: 3,600 predicted, 6,247 measured.)
fn second_epoch(p: &PlanParams, held: [f64; 3], t_full: f64, k: Holding) -> f64 {
    let (t_serve, t_a, t_da) = prepfs::cpu_rates(p);
    let read_cpu = prepfs::read_seconds(p);
    let ahead = prepfs::made_ahead(p, held[A]);
    let k_a = k.spares.clamp(0.0, 1.0);
    let rest = (1.0 - k_a - k.pixels - k.bytes).max(0.0);
    let promoted = k.bytes.min((held[D] - k.decoded).max(0.0));
    let work = k.pixels / t_a + promoted / t_full + (k.bytes - promoted) / t_da + rest * (1.0 / t_da + read_cpu);
    // Of the reads without a spare, those not made ahead wait.
    let waited = if k_a < 1.0 { work * ((1.0 - ahead) / (1.0 - k_a)).min(1.0) } else { 0.0 };
    let hits = k_a / t_serve;
    let idle = if hits > 0.0 { hits / (hits + work) } else { 0.0 };
    let serve = t_serve * (1.0 + (prepfs::PURE_HIT_SPEEDUP - 1.0) * idle);
    let read = k.unheld_bytes.unwrap_or(p.s_data);
    prepfs::bounded(p, prepfs::machine_seconds(serve, waited, work), rest * read, 0.0)
}

/// Epoch 2's rate from what epoch 1 actually left in memory (`k`, counted as it starts) rather
/// than what the split's fill says it leaves: the fill is a mean (each form's bytes over the
/// mean size), and where the samples kept as bytes and as pixels nearly cover the set, the few
/// left to read decide epoch 2 behind slow storage (a fifth of the 1600x1200 set at 10 MB/s: 14
/// of 400 samples held nowhere, where the fill said none). One job, no remote tier (else every
/// epoch is predicted at the steady rate, as [`epochs`] does).
pub fn second_from(p: &PlanParams, split: Split, t_full: f64, k: Holding) -> Option<f64> {
    if at_the_steady_rate(p) {
        return None;
    }
    Some(second_epoch(p, prepfs::fill_fractions(p, split), f64::from(p.nodes) * t_full, k))
}

/// The first-touch policy with the least time over the `left` epochs from epoch `from` on
/// (1-based), and its epochs. A tie keeps the pixels.
pub fn over_the_run(p: &PlanParams, split: Split, t_full: f64, from: u64, left: u64) -> RunPlan {
    let keep = epochs(p, split, t_full, true);
    let region = epochs(p, split, t_full, false);
    let keep_pixels = left >= 2 && keep.seconds(from, left) <= region.seconds(from, left);
    RunPlan { keep_pixels, epochs: if keep_pixels { keep } else { region } }
}

/// The split with the least time over the `left` epochs from epoch `from` on (1-based), its
/// first-touch policy and its epochs: a run of a few epochs weighs the cold first epoch, a long
/// one the steady state. Ties go to the first split in [`Split::all`]'s order.
pub fn best_over_the_run(p: &PlanParams, t_full: f64, from: u64, left: u64) -> (Split, RunPlan) {
    let mut best: Option<(Split, RunPlan, f64)> = None;
    for split in Split::all() {
        let run = over_the_run(p, split, t_full, from, left);
        let seconds = run.epochs.seconds(from, left);
        if best.as_ref().is_none_or(|(_, _, b)| seconds < b * (1.0 - 1e-9)) {
            best = Some((split, run, seconds));
        }
    }
    match best {
        Some((split, run, _)) => (split, run),
        None => (Split::AUGMENTED_ONLY, over_the_run(p, Split::AUGMENTED_ONLY, t_full, from, left)),
    }
}

/// What `prepfs plan` adds under `run` for prepfs's model: the epochs of a run of `epochs`
/// under `split` (else the best split) and its first-touch policy.
pub fn plan_json(p: &PlanParams, split: Option<Split>, epochs: u64, t_full: f64) -> serde_json::Value {
    let (split, run) = match split {
        Some(split) => (split, over_the_run(p, split, t_full, 1, epochs.max(1))),
        None => best_over_the_run(p, t_full, 1, epochs.max(1)),
    };
    serde_json::json!({
        "split": split.as_array(),
        "epochs": epochs,
        "first_touch": if run.keep_pixels { "full decode, pixels kept" } else { "region decode" },
        "epoch_1_samples_per_s": run.epochs.first,
        "epoch_2_samples_per_s": run.epochs.second,
        "steady_samples_per_s": run.epochs.steady,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    // 1000 samples of 100 B encoded, 500 B decoded, 250 B augmented; region decode and augment
    // 1,000/s, augment 5,000/s; served 4,000/s; storage 10,000 samples/s (a full decode and
    // augment is given as 800/s below).
    use crate::prepfs::tests::{assert_close, base, split};

    #[test]
    fn a_cache_that_holds_the_set_as_pixels_pays_the_full_decode_once_when_they_are_kept_at_first_touch() {
        // Room for every sample as bytes and as pixels, none for outputs: no refill runs ahead.
        let p = PlanParams { s_cache: 1000.0 * (100.0 + 500.0), ..base() };
        let keep = epochs(&p, split("100-0-0"), 800.0, true);
        // Epoch 1: a full decode and augment each, waited for.
        assert_close(keep.first, 1.0 / (1.0 / 4000.0 + 1.0 / 800.0));
        // Epoch 2: an augment of the pixels kept.
        assert_close(keep.second, 1.0 / (1.0 / 4000.0 + 1.0 / 5000.0));
        let region = epochs(&p, split("100-0-0"), 800.0, false);
        // A region decode first, kept as bytes; at the second touch a full decode.
        assert_close(region.first, 1.0 / (1.0 / 4000.0 + 1.0 / 1000.0));
        assert_close(region.second, 1.0 / (1.0 / 4000.0 + 1.0 / 800.0));
        assert_eq!(keep.steady, region.steady);
        // Over one epoch the region decode wins; over two or more, keeping the pixels.
        assert!(!over_the_run(&p, split("100-0-0"), 800.0, 1, 1).keep_pixels);
        assert!(over_the_run(&p, split("100-0-0"), 800.0, 1, 3).keep_pixels);
        assert!(over_the_run(&p, split("100-0-0"), 800.0, 1, 90).keep_pixels);
    }

    #[test]
    fn epoch_2_from_what_memory_holds_is_the_fills_prediction_when_memory_holds_what_the_fill_says() {
        let p = PlanParams { s_cache: 500.0 * 500.0, b_storage: 100.0 * 2000.0, ..base() };
        for s in ["100-0-0", "0-100-0", "34-33-33", "50-50-0", "0-50-50", "10-60-30"] {
            let held = prepfs::fill_fractions(&p, split(s));
            let k = Holding::of_forms(held[E].min(1.0 - held[D]), held[D], held[D].min(held[A]));
            let second = second_from(&p, split(s), 800.0, k).expect("one job");
            assert_close(second, epochs(&p, split(s), 800.0, true).second);
        }
    }

    #[test]
    fn samples_memory_holds_in_no_form_are_read_in_epoch_2_and_slow_it_behind_slow_storage() {
        // Storage at 20 samples a second; bytes and pixels cover the set, or leave 5% out.
        let p = PlanParams { s_cache: 500.0 * 500.0, b_storage: 100.0 * 20.0, ..base() };
        let covered = second_from(&p, split("50-50-0"), 800.0, Holding::of_forms(0.5, 0.5, 0.0));
        let short = second_from(&p, split("50-50-0"), 800.0, Holding::of_forms(0.45, 0.5, 0.0));
        let (covered, short) = (covered.expect("one job"), short.expect("one job"));
        assert!(short < covered, "{short} >= {covered}");
        // No faster than the storage lets 5% of the samples be read, where the CPU alone allows more.
        assert!(short <= 20.0 / 0.05 + 1e-9 && covered > 20.0 / 0.05, "{short} {covered}");
        // The samples a full cache turned away are its largest: reading them takes longer.
        let large = Holding { unheld_bytes: Some(4.0 * p.s_data), ..Holding::of_forms(0.45, 0.5, 0.0) };
        let large = second_from(&p, split("50-50-0"), 800.0, large).expect("one job");
        assert!(large < short, "{large} >= {short}");
        // Several jobs: no prediction from memory's holding (every epoch at the steady rate).
        assert_eq!(second_from(&PlanParams { jobs: 3, ..p }, split("50-50-0"), 800.0, Holding::of_forms(0.5, 0.5, 0.0)), None);
    }

    #[test]
    fn spares_a_few_samples_short_of_the_set_serve_nearly_at_the_pure_hit_rate() {
        let p = PlanParams { s_cache: 1000.0 * (100.0 + 500.0 + 250.0), ..base() };
        let held = prepfs::fill_fractions(&p, split("0-0-100"));
        let at = |spares: f64| second_epoch(&p, held, 800.0, Holding::of_forms(0.0, 1.0, spares));
        let pure = 4000.0 * crate::prepfs::PURE_HIT_SPEEDUP;
        assert_close(at(1.0), pure);
        // 2 of 1000 samples without a spare: their augments take a sliver of the epoch.
        assert!(at(0.998) > 0.97 * pure, "{} against {pure}", at(0.998));
        // No spares: every sample's augment runs beside the serving (made ahead of the readers,
        // augmented has room), at the serving's own rate.
        let share = crate::prepfs::SERVE_CPU_SHARE;
        assert_close(at(0.0), 1.0 / (share / 4000.0 + 1.0 / 5000.0));
        // Fewer spares, slower epoch.
        assert!(at(0.5) < at(0.9) && at(0.9) < at(0.998));
    }

    #[test]
    fn several_jobs_read_every_sample_in_their_first_epoch_whatever_the_cache_holds() {
        // Three jobs in 10 directories, room for the whole set in every form; storage at 20
        // samples a second.
        let p = PlanParams { jobs: 3, dirs: 10, s_cache: 1000.0 * (100.0 + 500.0 + 250.0), b_storage: 100.0 * 20.0, ..base() };
        let e = epochs(&p, split("0-0-100"), 800.0, true);
        // The steady state reads nothing (the set is held from epoch to epoch); the first
        // epoch reads each sample once, shared by up to 3 jobs: at most 3 x 20 served a second.
        assert_close(e.steady, prepfs::evaluate(&p, split("0-0-100")).samples_per_s);
        assert_eq!(e.second, e.steady);
        assert!(e.steady > 1000.0, "{}", e.steady);
        assert!(e.first <= 3.0 * 20.0 * (1.0 + 1e-9) && e.first > 0.8 * 3.0 * 20.0 * 0.95, "{}", e.first);
        // Without a storage limit the first epoch still costs each sample's decode.
        let fast = PlanParams { b_storage: f64::INFINITY, ..p };
        let e = epochs(&fast, split("0-0-100"), 800.0, true);
        assert!(e.first < e.steady, "{} {}", e.first, e.steady);
    }

    #[test]
    fn with_room_for_outputs_the_first_epoch_keeps_the_pixels_whatever_the_policy() {
        // Room for every sample in every form: all of it given to augmented, the rest flows on.
        // The refill, making outputs ahead of the readers, keeps the pixels of what it decodes.
        let p = PlanParams { s_cache: 1000.0 * (100.0 + 500.0 + 250.0), ..base() };
        let keep = epochs(&p, split("0-0-100"), 800.0, true);
        assert_eq!(keep, epochs(&p, split("0-0-100"), 800.0, false));
        // Epoch 1: a full decode and augment plus a spare augment each, made ahead of the
        // readers (augmented has room), so the serving's CPU share counts, not its round trips.
        let share = crate::prepfs::SERVE_CPU_SHARE;
        assert_close(keep.first, 1.0 / (share / 4000.0 + 1.0 / 800.0 + 1.0 / 5000.0));
        // Epoch 2: the spares are taken (their refills are the next epoch's): nothing is made
        // meanwhile, and serving runs at the pure-hit rate.
        assert_close(keep.second, 4000.0 * crate::prepfs::PURE_HIT_SPEEDUP);
    }

    #[test]
    fn a_short_run_weighs_its_cold_first_epoch_and_a_long_one_the_steady_state() {
        // Room for half the outputs and half the pixels' worth of bytes.
        let p = PlanParams { s_cache: 500.0 * 500.0, t_serve: Some(1000.0), ..base() };
        for left in [1, 2, 3, 90] {
            let (split, run) = best_over_the_run(&p, 800.0, 1, left);
            let seconds = run.epochs.seconds(1, left);
            // No split serves the run faster than the one chosen.
            for other in Split::all() {
                let theirs = over_the_run(&p, other, 800.0, 1, left).epochs.seconds(1, left);
                assert!(theirs >= seconds * (1.0 - 1e-9), "{left} epochs: {other} {theirs} beats {split} {seconds}");
            }
        }
        // From epoch 3 on only the steady state is left: the steady model's best split.
        let (late, _) = best_over_the_run(&p, 800.0, 3, 10);
        let steady_best = crate::search::best_split_by(&p, prepfs::evaluate).1.samples_per_s;
        assert_close(prepfs::evaluate(&p, late).samples_per_s, steady_best);
    }

    #[test]
    fn with_no_cache_every_epoch_reads_and_decodes_a_region() {
        let p = base();
        let e = epochs(&p, split("0-100-0"), 800.0, true);
        let cold = 1.0 / (1.0 / 4000.0 + 1.0 / 1000.0);
        assert_close(e.first, cold);
        assert_close(e.second, cold);
        assert_close(e.steady, cold);
    }

    #[test]
    fn a_split_that_gives_decoded_a_share_keeps_pixels_whatever_the_policy() {
        // Half the set fits as pixels.
        let p = PlanParams { s_cache: 500.0 * 500.0, ..base() };
        assert_eq!(epochs(&p, split("0-100-0"), 800.0, true), epochs(&p, split("0-100-0"), 800.0, false));
        let e = epochs(&p, split("0-100-0"), 800.0, true);
        assert_close(e.first, 1.0 / (1.0 / 4000.0 + 0.5 / 800.0 + 0.5 / 1000.0));
        // Epoch 2: half augmented from pixels, half read and region-decoded (storage is ample).
        assert_close(e.second, 1.0 / (1.0 / 4000.0 + 0.5 / 5000.0 + 0.5 / 1000.0));
    }

    #[test]
    fn predictions_of_an_epoch_follow_the_run() {
        let e = Epochs { first: 1.0, second: 2.0, steady: 4.0 };
        assert_eq!((e.at(1), e.at(2), e.at(3), e.at(90)), (1.0, 2.0, 4.0, 4.0));
        assert_close(e.seconds(1, 3), 1.0 + 0.5 + 0.25);
        assert_close(e.seconds(2, 2), 0.5 + 0.25);
    }
}
