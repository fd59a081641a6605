//! Seneca's DSI throughput model (Desai et al., "Preparation Meets Opportunity", FAST '26,
//! section 5.1, Eqs. 1-9) as pure functions: `prepfs plan --model seneca`, the anchor prepfs's
//! own model (see [`super::prepfs`]) is compared with.
//!
//! This file owns the model only: Eqs. 1-9 ([`evaluate`]) and its entry points, the best split
//! under it ([`best_split`]) and the JSON the `plan` subcommand prints ([`plan_json`]). What both
//! models share lives beside it: the inputs and the parameter file (`params.rs`), the `E-D-A`
//! split (`split.rs`), and the search and its JSON (`search.rs`). It reads no clock and measures
//! nothing; whoever measures the machine (the `split: auto` path) builds a [`PlanParams`] and
//! searches (`run::best_over_the_run` for prepfs's model, [`best_split`] for this one).
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

use super::params::PlanParams;
#[cfg(test)]
use super::search::best_split_by;
use super::search::{plan_json_by, Evaluation};
use super::split::Split;

/// Evaluates one split: Eqs. 1-9.
///
/// `params` should have passed `PlanParams::validate_in` (as a parameter file's are); for parameters that did not, the
/// numbers are meaningless (but nothing panics).
pub fn evaluate(params: &PlanParams, split: Split) -> Evaluation {
    let p = params;
    let n_total = p.n_total as f64;
    let fraction = |percent: u32| f64::from(percent) / 100.0;

    // Eqs. 2, 4, 6, 8: fill order augmented, decoded, encoded; the rest comes from storage.
    let n_a = n_total.min(fraction(split.a()) * p.s_cache / p.s_augmented);
    let n_d = (n_total - n_a).max(0.0).min(fraction(split.d()) * p.s_cache / p.s_decoded);
    let n_e = (n_total - n_a - n_d).max(0.0).min(fraction(split.e()) * p.s_cache / p.s_data);
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

/// The best split at 1% steps (all 5151) under this model, and its evaluation (the search and
/// its ties: [`best_split_by`]).
#[cfg(test)]
pub(crate) fn best_split(params: &PlanParams) -> (Split, Evaluation) {
    best_split_by(params, evaluate)
}

/// What `prepfs plan` prints: `{"split": [E, D, A], "samples_per_s": X}` for the best split,
/// plus `"evaluated": {"split": [...], "samples_per_s": Y}` for `split` when one is given.
pub fn plan_json(params: &PlanParams, split: Option<Split>) -> serde_json::Value {
    plan_json_by(params, split, evaluate)
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::params::parse_params;

    /// A small dataset with round numbers; every limit is far away unless a test brings it in.
    /// Rates: cache 1e9 B/s gives 4e6/s augmented, 2e6/s decoded, 1e7/s encoded; storage
    /// 1e6 B/s gives 1e4/s; CPU 1,000/s decode+augment, 5,000/s augment.
    pub fn base() -> PlanParams {
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
            output_jobs: None,
            cores: 1,
            dirs: 1,
            s_remote: 0.0,
            s_remote_entry: 100.0,
            remote_decoded: 0.0,
            t_remote: 0.0,
            t_read: 0.0,
            t_output: 0.0,
        }
    }

    pub fn split(s: &str) -> Split {
        s.parse().expect("valid split")
    }

    pub fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[track_caller]
    pub(crate) fn assert_close(actual: f64, expected: f64) {
        assert!(close(actual, expected), "expected {expected}, got {actual}");
    }

    pub(crate) const BASE_YAML: &str = "\
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
