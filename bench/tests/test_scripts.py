"""The standalone scripts' parts that need no mount: prepfs_bench.cold_epochs's epoch records
and their medians, prepfs_bench.warm_floor's CPU by kind of thread, prepfs_bench.remote_two_mounts's
summary table."""

from __future__ import annotations

import os
import time
import unittest

from prepfs_bench import cold_epochs, remote_two_mounts, warm_floor


class ColdEpochsTest(unittest.TestCase):
    """prepfs_bench.cold_epochs's parts that need no mount."""

    def test_an_epoch_counts_the_work_stats_json_counted_between_its_ends(self):
        before = {"refills": 10, "work": {"full_decodes": 5, "decode_augments": 100, "pixel_augments": 7}}
        after = {"refills": 14, "work": {"full_decodes": 9, "decode_augments": 100, "pixel_augments": 27}}
        rec = cold_epochs.epoch_record(before, after, 2.0, 1000, 500.0, {"fuser": 40.0})
        self.assertEqual((rec["full_decodes"], rec["decode_augments"], rec["pixel_augments"], rec["refills"]), (4, 0, 20, 4))
        self.assertAlmostEqual(rec["cpu_ms_per_sample"], 2.0)
        self.assertEqual((rec["samples"], rec["rate"]), (1000, 500.0))

    def test_each_epoch_is_the_median_of_that_epoch_over_the_runs(self):
        def run(*rates):
            return [{"samples": 8, "rate": r, "cpu_ms_per_sample": r / 1000, "refills": 1, "full_decodes": 0,
                     "decode_augments": 0, "pixel_augments": 0} for r in rates]
        summary = cold_epochs.summarize([run(100, 900), run(300, 500), run(200, 700)], 2)
        self.assertEqual([e["rate"] for e in summary], [200, 700])
        self.assertEqual([e["cpu_ms_per_sample"] for e in summary], [0.2, 0.7])


class WarmFloorTest(unittest.TestCase):
    """prepfs_bench.warm_floor's parts that need no mount."""

    def test_a_threads_cpu_is_counted_under_its_kind_the_name_before_its_number(self):
        import ctypes
        import threading

        libc = ctypes.CDLL(None, use_errno=True)
        named, release = threading.Event(), threading.Event()

        def burn():
            libc.prctl(15, b"burner-7", 0, 0, 0)  # PR_SET_NAME
            start = time.thread_time()
            while time.thread_time() - start < 0.05:
                pass
            named.set()
            release.wait(10)

        t = threading.Thread(target=burn)
        t.start()
        try:
            self.assertTrue(named.wait(10))
            by_kind = warm_floor.thread_cpu(os.getpid())
        finally:
            release.set()
            t.join()
        self.assertIn("burner", by_kind)
        self.assertGreaterEqual(by_kind["burner"], 0.045)
        self.assertNotIn("burner-7", by_kind)


class RemoteTwoMountsTest(unittest.TestCase):
    """prepfs_bench.remote_two_mounts's parts that need no mount."""

    def test_the_summary_has_a_row_per_setting_and_tier_and_the_hit_cost(self):
        def setting(makespan, rates):
            mounts = {name: {"job": {"hit_rate": h}, "plan": {"predicted_samples_per_s": p}}
                      for name, h, p in rates}
            return {"makespan_s": makespan, "source_bytes_read": 29_500_000,
                    "second_epoch_samples_per_s_both": 1227, "mounts": mounts}
        report = {"storage": "5 MB/s per mount (10 MB/s in all)",
                  "one_job_each": {"alone": setting(7.07, [("a", 0.66, 1297), ("b", 0.5, 1295)]),
                                   "shared": setting(4.47, [("a", 0.64, 1310), ("b", 0.62, 1300)])},
                  "one_job_across_both": {"alone": setting(5.63, [("a", 0.69, 1233), ("b", 0.67, 1259)]),
                                          "shared": setting(3.79, [("a", 0.67, 1242), ("b", 0.69, 1195)])},
                  "hit_cost": {"local": {"ms_per_sample": 1.049},
                               "remote": {"ms_per_sample": 2.477, "remote_hits": 797}}}
        lines = remote_two_mounts.summary_lines(report)
        rows = [ln for ln in lines if ln.startswith("| ")]
        self.assertEqual(len(rows), 1 + 4)
        self.assertIn("| one job each | alone | 7.07 | 29.5 | 66%, 50% | 1,227 | 1,297, 1,295 |", rows)
        self.assertIn("| one job across both | shared | 3.79 | 29.5 | 67%, 69% | 1,227 | 1,242, 1,195 |", rows)
        self.assertIn("from the remote tier: 2.477 ms (797 remote hits)", lines[-1])
        del report["hit_cost"]
        self.assertTrue(remote_two_mounts.summary_lines(report)[-1].startswith("| one job across both"))


class JobsTest(unittest.TestCase):
    """prepfs_bench.jobs's job process, run in this process over a tiny tree (no mount)."""

    def test_a_job_opens_and_decodes_every_image_of_its_tree_each_epoch_read_past_the_page_cache(self):
        try:
            from PIL import Image
        except ImportError:
            self.skipTest("skipped: needs Pillow")
        import tempfile
        from unittest import mock
        from prepfs_bench import jobs, loaders
        with tempfile.TemporaryDirectory() as root:
            for c in ("a", "b"):
                os.makedirs(os.path.join(root, c))
                Image.new("RGB", (40, 30), (10, 20, 30)).save(os.path.join(root, c, "x.jpg"))
            with mock.patch.object(loaders, "read_uncached", wraps=loaders.read_uncached) as read:
                jobs.job(root, True, seed=1, epochs=2, uncached=True)
            self.assertEqual(sorted(os.path.relpath(c.args[0], root) for c in read.call_args_list),
                             ["a/x.jpg", "a/x.jpg", "b/x.jpg", "b/x.jpg"])


class PredictedMakespanTest(unittest.TestCase):
    """prepfs_bench.jobs.predicted_makespan: each epoch's samples at the rate the plan gave it."""

    @staticmethod
    def seen(current, now, nxt, steady):
        return {"current": current, "predicted_current_samples_per_s": now,
                "predicted_next_samples_per_s": nxt, "predicted_steady_samples_per_s": steady}

    def test_each_epoch_takes_its_samples_at_the_rate_first_predicted_while_it_ran(self):
        from prepfs_bench.jobs import predicted_makespan
        seen = [self.seen(1, 100, 1000, 1000), self.seen(1, 90, 900, 900), self.seen(2, 800, 800, 800)]
        # 3 epochs of 300 samples: 300/100 + 300/800 + (epoch 3 unseen: epoch 2's next) 300/800.
        self.assertAlmostEqual(predicted_makespan(900, 3, seen), 3.0 + 0.375 + 0.375)

    def test_an_epoch_never_seen_takes_the_next_prediction_from_the_one_before_or_the_steady_state(self):
        from prepfs_bench.jobs import predicted_makespan
        # Only epoch 1 seen: epoch 2 at its next, epoch 3 at its steady rate.
        self.assertAlmostEqual(predicted_makespan(300, 3, [self.seen(1, 100, 200, 400)]), 1.0 + 0.5 + 0.25)
        self.assertIsNone(predicted_makespan(300, 3, []))
