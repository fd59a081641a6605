"""prepfs_bench.runs: BENCHMARKS.md's "Runs", one section per run, newest first, written on
temporary copies (never the repository's BENCHMARKS.md)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import unittest

from prepfs_bench import ROOT, runs
from prepfs_bench import report as reporting

from .fakes import fake_report, fake_results, mkdtemp

REPORT_LINES = ["Back-to-back epochs, 2 readers, 800 samples.", "",
                "| config | epoch 1 /s | epoch 2 /s |", "| --- | ---: | ---: |",
                "| shipped | 900 | 2,100 |", "",
                "Work per epoch (medians):", "",
                "| config | decodes |", "|---|---|", "| shipped | 800 |"]


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class RunsTest(unittest.TestCase):
    def setUp(self):
        self.dir = mkdtemp()
        self.real = os.path.join(ROOT, "BENCHMARKS.md")
        self.before = digest(self.real)
        self.md = os.path.join(self.dir, "BENCHMARKS.md")
        shutil.copyfile(self.real, self.md)

    def tearDown(self):
        self.assertEqual(digest(self.real), self.before, "the repository's BENCHMARKS.md changed")

    def read(self) -> str:
        with open(self.md) as f:
            return f.read()

    def test_the_summary_is_the_paragraph_before_a_table_and_the_table(self):
        self.assertEqual(runs.summary_of(REPORT_LINES),
                         ["Back-to-back epochs, 2 readers, 800 samples.", "",
                          "| config | epoch 1 /s | epoch 2 /s |", "| --- | ---: | ---: |",
                          "| shipped | 900 | 2,100 |"])
        self.assertEqual(runs.summary_of(REPORT_LINES, 1),
                         ["Work per epoch (medians):", "", "| config | decodes |", "|---|---|",
                          "| shipped | 800 |"])
        self.assertEqual(runs.summary_of(["no table here", "at all"]), ["no table here", "at all"])
        self.assertEqual(runs.summary_of(["| a |", "| --- |", "| 1 |"]), ["| a |", "| --- |", "| 1 |"])

    def test_a_run_goes_first_under_runs_and_the_rest_of_the_file_is_kept(self):
        head_before, _ = runs.split_runs(self.read())
        runs.append_run(self.md, "2099-01-01-epochs", "`python3 -m prepfs_bench.epochs`",
                        runs.summary_of(REPORT_LINES), "`bench/results/2099-01-01-epochs.json`",
                        date="2099-01-01 10:00 UTC")
        runs.append_run(self.md, "2099-01-02-jobs", "`make bench-jobs`", ["| a |", "| --- |", "| 1 |"],
                        date="2099-01-02 10:00 UTC")
        text = self.read()
        head, tail = runs.split_runs(text)
        self.assertEqual(head.rstrip("\n"), head_before.rstrip("\n"))
        self.assertEqual(text.count("\n## Runs\n"), 1)
        names = [n for n, _ in runs.sections(tail)]
        self.assertEqual(names[:2], ["2099-01-02-jobs", "2099-01-01-epochs"])  # newest first
        section = dict(runs.sections(tail))["2099-01-01-epochs"]
        self.assertIn("- Date: 2099-01-01 10:00 UTC\n", section)
        self.assertIn("- Command: `python3 -m prepfs_bench.epochs`\n", section)
        self.assertIn("- Full results: `bench/results/2099-01-01-epochs.json`\n", section)
        self.assertIn("| shipped | 900 | 2,100 |", section)
        self.assertNotIn("| shipped | 800 |", section)  # one table per run
        self.assertIn("\n### 2099-01-02-jobs\n", text)

    def test_a_run_written_again_replaces_its_section(self):
        for rate in ("900", "950"):
            runs.append_run(self.md, "2099-01-01-plan-matrix", "`make bench-plan`",
                            [f"| cell | {rate} |", "| --- | --- |"])
        tail = runs.split_runs(self.read())[1]
        names = [n for n, _ in runs.sections(tail)]
        self.assertEqual(names.count("2099-01-01-plan-matrix"), 1)
        self.assertEqual(names[0], "2099-01-01-plan-matrix")
        self.assertIn("| cell | 950 |", tail)
        self.assertNotIn("| cell | 900 |", tail)

    def test_runs_is_created_at_the_end_of_a_file_without_it(self):
        with open(self.md, "w") as f:
            f.write("# prepfs benchmarks\n\nSome text.\n")
        runs.append_run(self.md, "2099-01-01-x", "`c`", ["| a |", "| --- |"])
        text = self.read()
        self.assertTrue(text.startswith("# prepfs benchmarks\n\nSome text.\n\n## Runs\n\n"))
        self.assertIn(runs.RUNS_INTRO, text)
        missing = os.path.join(self.dir, "new", "B.md")
        os.makedirs(os.path.dirname(missing))
        runs.append_run(missing, "2099-01-01-x", "`c`", ["| a |", "| --- |"])
        with open(missing) as f:
            self.assertIn("### 2099-01-01-x", f.read())

    def test_a_scripts_report_writes_its_results_and_its_run_section(self):
        out = os.path.join(self.dir, "results", "2099-01-03-epochs.json")  # the suffix is dropped
        argv = sys.argv
        sys.argv = [os.path.join(ROOT, "bench", "prepfs_bench", "epochs.py"), "--epochs", "4"]
        try:
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                runs.write_report(out, {"rows": [1]}, REPORT_LINES, md=self.md)
        finally:
            sys.argv = argv
        out = out[:-len(".json")]
        with open(out + ".json") as f:
            self.assertEqual(json.load(f), {"rows": [1]})
        with open(out + ".md") as f:
            self.assertEqual(f.read(), "\n".join(REPORT_LINES) + "\n")
        self.assertIn("| shipped | 900 | 2,100 |", printed.getvalue())
        section = dict(runs.sections(runs.split_runs(self.read())[1]))["2099-01-03-epochs"]
        self.assertIn("- Command: `python3 -m prepfs_bench.epochs --epochs 4`", section)
        self.assertIn("2099-01-03-epochs.json`, `.md` (kept out of git)", section)

    def test_no_run_is_recorded_where_prepfs_bench_md_says_none(self):
        self.assertIsNone(runs.benchmarks_md())  # the self-test sets PREPFS_BENCH_MD=-
        out = os.path.join(self.dir, "2099-01-04-jobs")
        with contextlib.redirect_stdout(io.StringIO()):
            runs.write_report(out, {}, REPORT_LINES)
        self.assertTrue(os.path.exists(out + ".md"))
        self.assertEqual(digest(self.md), digest(self.real))

    def test_make_bench_rewrites_its_report_and_keeps_the_runs(self):
        runs.append_run(self.md, "2099-01-01-epochs", "`c`", runs.summary_of(REPORT_LINES))
        report = fake_report(fake_results(), invoked_as="make bench", date="2099-01-05")
        for stem in ("2099-01-05", "2099-01-06"):
            with contextlib.redirect_stdout(io.StringIO()):
                reporting.write_report(dict(report), os.path.join(self.dir, "r", stem + ".json"),
                                       os.path.join(self.dir, "r"), self.md)
        text = self.read()
        head, tail = runs.split_runs(text)
        self.assertEqual(head.count("## Results"), 1)  # the latest run's report, once
        self.assertIn("Produced by `make bench`", head)
        self.assertIn(reporting.RUNS_POINTER, head)
        self.assertEqual([n for n, _ in runs.sections(tail)][:3],
                         ["2099-01-06", "2099-01-05", "2099-01-01-epochs"])
        section = dict(runs.sections(tail))["2099-01-06"]
        self.assertIn("- Command: `make bench`, which ran `python3 -m prepfs_bench --data d`", section)
        rows = [ln for ln in section.splitlines() if ln.startswith("| ")]
        self.assertEqual([r.split(" | ")[0][2:] for r in rows[1:]], [c["id"] for c in fake_results()])
        self.assertEqual(rows[0], "| " + " | ".join(reporting.TABLE_HEADER) + " |")
