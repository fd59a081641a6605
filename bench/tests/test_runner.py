"""prepfs_bench.runner: run_case drives a real child process (the raw reader)."""

from __future__ import annotations

import os
import unittest

from prepfs_bench import plan, runner

from .fakes import FakeSource, case_args, make_tree, mkdtemp


class RunCaseTest(unittest.TestCase):
    """run_case drives a real child process (the raw reader: standard library only)."""

    def test_a_case_runs_its_repetitions_in_a_child_process(self):
        d = mkdtemp()
        make_tree(d, junk=False)

        Args = case_args(2)

        cpus = sorted(os.sched_getaffinity(0))[:2]
        case = plan.Case("1d", "cold", "raw", "raw", "files", d, cold=True)
        rec = runner.run_case(case, Args, cpus, None)
        self.assertIsNone(rec["error"], rec.get("stderr_tail"))
        self.assertEqual(len(rec["runs"]), 2)
        self.assertEqual(rec["summary"]["samples_per_run"], 6)
        self.assertIn(rec["runs"][0]["page_cache_dropped"], (True, False))
        warm = plan.Case("2d", "warm", "raw", "raw", "files", d, warmup=1)
        rec = runner.run_case(warm, Args, cpus, None)
        self.assertEqual((len(rec["runs"]), len(rec["warmup_runs"])), (2, 1))
        self.assertGreaterEqual(rec["runs"][0]["wall_s"], 1.0)  # --min-seconds 1 when warm

    def test_a_failing_case_reports_its_error_and_no_summary(self):
        Args = case_args(1)

        case = plan.Case("1d", "cold", "raw", "raw", "files", "/nonexistent/dir")
        rec = runner.run_case(case, Args, sorted(os.sched_getaffinity(0))[:1], None)
        self.assertIn("FileNotFoundError", rec["error"])
        self.assertNotIn("summary", rec)


class RunCaseRefillTest(unittest.TestCase):
    def test_warm_case_waits_for_the_refill(self):
        d = mkdtemp()
        make_tree(d, junk=False)

        Args = case_args(2)

        src = FakeSource()
        case = plan.Case("2d", "warm", "raw", "raw", "files", d, warmup=1, prepfs=True)
        rec = runner.run_case(case, Args, sorted(os.sched_getaffinity(0))[:1], src)
        self.assertIsNone(rec["error"], rec.get("stderr_tail"))
        self.assertNotIn("refill_wait", rec["warmup_runs"][0])  # not before the warm-up
        for r in rec["runs"]:
            self.assertEqual(r["refill_wait"]["augmented_entries_start"], 6)
            self.assertEqual(r["refill_wait"]["reason"], "full")
        self.assertEqual(rec["summary"]["refill_wait"]["target"], 6)
        cold = plan.Case("1d", "cold", "raw", "raw", "files", d, cold=True, prepfs=True)
        rec = runner.run_case(cold, Args, sorted(os.sched_getaffinity(0))[:1], FakeSource())
        self.assertTrue(all("refill_wait" not in r for r in rec["runs"]))
