"""prepfs_bench.refill: the wait for the background refill before warm and floor runs."""

from __future__ import annotations

import unittest

from prepfs_bench import refill, stats
from prepfs_bench import report as reporting

from .fakes import fake_case, fake_run


class RefillWaitTest(unittest.TestCase):
    """The wait for the background refill before warm and floor runs."""

    def test_the_refill_wait_ends_full_stable_timed_out_or_without_stats(self):
        d = refill.refill_decision
        self.assertIsNone(d([], 800))
        self.assertEqual(d([(0.0, 100), (0.25, 800)], 800), "full")
        self.assertEqual(d([(0.0, 900)], 800), "full")
        self.assertIsNone(d([(0.0, 10), (0.5, 50), (1.0, 90)], 800))  # still growing
        self.assertIsNone(d([(0.0, 90), (1.0, 90)], 800, stable_s=1.5))
        self.assertEqual(d([(0.0, 90), (1.0, 90), (1.6, 90)], 800, stable_s=1.5), "stable")
        # growth restarts the clock; a dip is not growth
        self.assertIsNone(d([(0.0, 10), (1.0, 20), (2.0, 20)], 800, stable_s=1.5))
        self.assertEqual(d([(0.0, 20), (1.0, 15), (1.6, 18)], 800, stable_s=1.5), "stable")
        self.assertEqual(d([(0.0, 1), (5.0, 2), (10.0, 3)], 800, max_s=10.0), "timeout")
        self.assertEqual(d([(0.0, 50), (1.6, 50)], None), "stable")  # no target known
        self.assertIsNone(d([(0.0, None)] * 4, 800))
        self.assertEqual(d([(0.0, None)] * 5, 800), "no-stats")

    def fake_wait(self, entries, samples=800, **kw):
        clock = [0.0]
        seq = iter(entries)
        calls = []

        def stats():
            calls.append(clock[0])
            e = next(seq, entries[-1])
            return None if e is None else {"samples": samples,
                                           "cache": {"memory": 1, "augmented": {"entries": e}}}

        def sleep(s):
            clock[0] += s
        return refill.wait_for_refill(stats, clock=lambda: clock[0], sleep=sleep, **kw), calls

    def test_the_refill_wait_polls_until_it_decides_and_is_bounded(self):
        w, calls = self.fake_wait([0, 100, 400, 800, 800])
        self.assertEqual((w["reason"], w["augmented_entries_start"], w["target"]),
                         ("full", 800, 800))
        self.assertEqual(w["augmented_entries_before"], 0)
        self.assertAlmostEqual(w["waited_s"], 0.75)
        w, _ = self.fake_wait([0, 30, 60, 60])  # a small cache: stops growing at 60
        self.assertEqual((w["reason"], w["augmented_entries_start"]), ("stable", 60))
        self.assertGreaterEqual(w["waited_s"], refill.REFILL_STABLE_S)
        self.assertLess(w["waited_s"], refill.REFILL_STABLE_S + 1.0)
        w, _ = self.fake_wait(list(range(0, 10000)), max_s=5.0)  # never settles: bounded
        self.assertEqual(w["reason"], "timeout")
        self.assertLessEqual(w["waited_s"], 5.0 + refill.REFILL_POLL_S)
        w, _ = self.fake_wait([None])
        self.assertEqual(w["reason"], "no-stats")

    def test_refill_waits_are_summarized_and_shown_in_the_warm_starts_table(self):
        runs = [dict(fake_run(), refill_wait={"waited_s": 2.0, "reason": "full",
                                               "augmented_entries_start": 800, "target": 800}),
                dict(fake_run(), refill_wait={"waited_s": 4.0, "reason": "stable",
                                               "augmented_entries_start": 790, "target": 800})]
        s = stats.summarize(runs)
        rw = s["refill_wait"]
        self.assertEqual(rw["waited_s"]["median"], 3.0)
        self.assertEqual((rw["augmented_entries_start"]["min"],
                          rw["augmented_entries_start"]["max"]), (790, 800))
        self.assertEqual(rw["reasons"], {"full": 1, "stable": 1})
        self.assertIsNone(stats.summarize([fake_run()])["refill_wait"])
        case = fake_case("2c", "warm", "torchvision-ppm", [100])
        case["summary"] = s
        rows = reporting.warm_start_rows([case, fake_case("1a", "cold", "torchvision", [1])])
        self.assertEqual(rows, [["2c", "3.0, 4.0", "790 - 800", "800", "full x1, stable x1"]])
        self.assertEqual(len(rows[0]), len(reporting.WARM_HEADER))
        self.assertIn("[refill wait 3.0 s, 790-800 augmented at start]",
                      reporting.progress_line(case))
        self.assertEqual(refill.cache_memory({"cache": {"memory": 5}}), 5)
        self.assertEqual(refill.cache_memory(None), 0)
        self.assertIsNone(refill.aug_entries({"cache": {"memory": 5}}))
