"""prepfs_bench.stats: the summaries of a case's runs, the ratios against the peers, the targets."""

from __future__ import annotations

import unittest

from prepfs_bench import stats

from .fakes import fake_case, fake_results, fake_run


class StatsTest(unittest.TestCase):
    def test_a_spread_is_the_median_min_and_max_of_the_values_given(self):
        s = stats.spread([3.0, 1.0, 2.0, None])
        self.assertEqual((s["median"], s["min"], s["max"], s["n"]), (2.0, 1.0, 3.0, 3))
        self.assertEqual(stats.spread([])["median"], None)
        self.assertEqual(stats.spread([1.0, 2.0, 3.0, 4.0])["median"], 2.5)

    def test_a_summary_adds_the_daemons_cpu_and_memory_to_the_loaders(self):
        runs = [fake_run(100, 1.0, 0.5, rss=200, pss=150, fs_cpu=0.5, fs_rss=50),
                fake_run(100, 2.0, 0.7, rss=300, pss=120, fs_cpu=0.3, fs_rss=40),
                fake_run(100, 4.0, 0.9, rss=250, pss=None, fs_cpu=0.1, fs_rss=60)]
        s = stats.summarize(runs)
        self.assertEqual(s["samples_per_s"]["median"], 50.0)
        self.assertEqual((s["samples_per_s"]["min"], s["samples_per_s"]["max"]), (25.0, 100.0))
        # CPU per sample: (loader + daemon) / samples, median of 0.010, 0.010, 0.010
        self.assertAlmostEqual(s["cpu_s_per_sample"]["median"], 0.010)
        self.assertAlmostEqual(s["loader_cpu_s_per_sample"], 0.007)
        self.assertAlmostEqual(s["fs_cpu_s_per_sample"], 0.003)
        self.assertEqual(s["peak_rss_mb"], 340)  # 300 + 40
        self.assertEqual(s["peak_pss_mb"], 200)  # 150 + 50; the run without PSS is skipped
        self.assertEqual((s["runs"], s["samples_per_run"]), (3, 100))

    def test_a_summary_without_a_daemon_counts_the_loader_alone(self):
        s = stats.summarize([fake_run(64, 0.5, 1.28)])
        self.assertEqual(s["samples_per_s"]["median"], 128.0)
        self.assertAlmostEqual(s["cpu_s_per_sample"]["median"], 0.02)
        self.assertEqual(s["fs_cpu_s_per_sample"], 0.0)
        self.assertIsNone(s["peak_pss_mb"])


class RatioTest(unittest.TestCase):
    def test_a_ratio_is_none_when_either_side_is_missing_or_zero(self):
        self.assertEqual(stats.ratio(10, 5), 2.0)
        self.assertIsNone(stats.ratio(None, 5))
        self.assertIsNone(stats.ratio(10, 0))
        self.assertIsNone(stats.ratio(10, None))

    def test_ratios_compare_rows_in_the_same_cache_state(self):
        r = stats.ratios(fake_results())
        self.assertAlmostEqual(r["1c"]["torchvision"], 10.0)
        self.assertAlmostEqual(r["1c"]["dali"], 5.0)
        self.assertAlmostEqual(r["1a"]["torchvision"], 1.0)
        self.assertAlmostEqual(r["2c"]["torchvision"], 25.0)  # against 2a, not 1a
        self.assertAlmostEqual(r["2c"]["dali"], 10.0)
        self.assertAlmostEqual(r["3f"]["torchvision"], 100.0)  # floor: against the warm rows

    def test_warm_ratios_fall_back_to_the_cold_peers_without_warm_ones(self):
        r = stats.ratios(fake_results(quick=True))
        self.assertAlmostEqual(r["2c"]["torchvision"], 25.0)  # 2a missing: 1a
        self.assertAlmostEqual(r["2c"]["dali"], 12.5)

    def test_a_failed_baseline_gives_no_ratio_against_it(self):
        res = fake_results()
        res[0] = fake_case("1a", "cold", "torchvision", [], error="boom")
        r = stats.ratios(res)
        self.assertIsNone(r["1c"]["torchvision"])
        self.assertAlmostEqual(r["1c"]["dali"], 5.0)

    def test_the_targets_are_met_or_missed_by_their_ratios(self):
        t = {x["cases"].split(" ")[0] + "/" + x["cases"].split(" ")[-1]: x
             for x in stats.targets(fake_results())}
        self.assertTrue(t["1c/1a"]["met"])  # 10x >= 5x
        self.assertTrue(t["1c/1b"]["met"])  # 5x >= 3x
        self.assertTrue(t["2c/2a"]["met"])  # 25x >= 20x
        self.assertFalse(t["3d/3f"]["met"])  # 0.4 < 0.5
        self.assertAlmostEqual(t["3d/3f"]["ratio"], 0.4)
        peers_only = [c for c in fake_results() if c["id"] in ("1a", "1b")]
        self.assertTrue(all(x["met"] is None and x["ratio"] is None
                            for x in stats.targets(peers_only)))
