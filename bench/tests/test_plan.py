"""prepfs_bench.plan: the cases of scenarios 1-3 each setting of the driver runs."""

from __future__ import annotations

import dataclasses
import unittest

from prepfs_bench import charts, plan, stats

from .fakes import fake_case, fake_results


class PlanTest(unittest.TestCase):
    """The cases each setting runs."""

    def test_the_plan_lists_the_cases_each_setting_runs(self):
        full = [c.id for c in plan.plan("/d", "/m/augmented", "prepfs augmented/", "/dev/shm/f",
                                        True)]
        self.assertEqual(full, ["1a", "1b", "1e", "1c", "1d", "2a", "2b", "2e", "2c", "2d",
                                "3d", "3f", "3g"])
        quick = [c.id for c in plan.plan("/d", "/m/augmented", "x", "/dev/shm/f", True, True)]
        self.assertEqual(quick, ["1a", "1b", "1c", "1d", "2c", "2d", "3d", "3f"])
        npy = plan.plan("/d", "/m/augmented", "x", "/dev/shm/f", True, True, "/n/augmented", "n")
        self.assertEqual([c.id for c in npy],
                         ["1a", "1b", "1c", "1d", "1n", "2c", "2d", "2n", "3d", "3f"])
        self.assertEqual({c.id for c in npy if c.source == "npy"}, {"1n", "2n"})
        self.assertTrue(all(c.loader == "torch-npy" and c.prepfs for c in npy
                            if c.source == "npy"))
        peers = plan.plan("/d", None, "x", None, False)
        self.assertEqual([c.id for c in peers], ["1a", "1b", "1e", "2a", "2b", "2e"])
        self.assertTrue(all(c.cold == (c.scenario == "cold") for c in peers))
        self.assertTrue(all(c.warmup == (c.scenario == "warm") for c in peers))
        # without a prepfs cache, the warm and floor prepfs rows say what they really read
        nc = {c.id: c for c in plan.plan("/d", "/m/augmented", "prepfs augmented/", "/dev/shm/f",
                                         True, True, cache_on=False)}
        self.assertEqual(nc["1c"].reads, "prepfs augmented/")
        self.assertIn("page-cache warm (prepfs has no cache)", nc["2c"].reads)
        self.assertIn("no cache", nc["3d"].reads)
        self.assertIn("no cache", charts.chart_label(dataclasses.asdict(nc["2d"])))
        self.assertEqual(nc["3f"].reads, "tmpfs copy of the same outputs")

    def test_the_plan_adds_2p_on_the_mount_with_a_25_percent_cache(self):
        ids = [c.id for c in plan.plan("/d", "/m/augmented", "x", "/dev/shm/f", True, True,
                                       augmented25="/m-25/augmented", reads25="p25")]
        self.assertEqual(ids, ["1a", "1b", "1c", "1d", "2c", "2d", "2pc", "2pd", "3d", "3f"])
        cs = {c.id: c for c in plan.plan("/d", "/m/augmented", "x", "/dev/shm/f", True,
                                         augmented25="/m-25/augmented", reads25="p25")}
        self.assertEqual((cs["2pc"].loader, cs["2pd"].loader), ("torchvision-ppm", "raw"))
        self.assertTrue(all(cs[i].source == "ppm25" and cs[i].warmup == 1 and cs[i].prepfs
                            and not cs[i].cold and cs[i].data == "/m-25/augmented"
                            for i in ("2pc", "2pd")))
        self.assertEqual(stats.baseline_ids([], "warm25"), {"torchvision": None, "dali": None})
        r = stats.ratios(fake_results() + [fake_case("2pc", "warm25", "torchvision-ppm", [300])])
        self.assertAlmostEqual(r["2pc"]["torchvision"], 3.0)  # against 2a, as the warm rows
