"""prepfs_bench.report and units: the number formats, the table rows, BENCHMARKS.md's
Markdown (and --report-only), the pending rows, the target notes, the cache counts, the progress
lines, the charts."""

from __future__ import annotations

import json
import os
import unittest

from prepfs_bench import charts, cli, stats, units
from prepfs_bench import report as reporting

from .fakes import fake_case, fake_report, fake_results, fake_run, mkdtemp


class ReportTest(unittest.TestCase):
    def test_numbers_and_ratios_are_formatted_for_the_table(self):
        self.assertEqual(units.fmt_num(None), "-")
        self.assertEqual(units.fmt_num(12345.6), "12,346")
        self.assertEqual(units.fmt_num(99.6), "100")
        self.assertEqual(units.fmt_num(0.1234, 2), "0.12")
        self.assertEqual(units.fmt_ratio(None), "-")
        self.assertEqual(units.fmt_ratio(2.345), "2.35x")
        self.assertEqual(units.fmt_ratio(23.45), "23.4x")

    def test_table_rows_show_the_median_the_spread_and_the_ratios_or_the_failure(self):
        res = fake_results()
        res.append(fake_case("1e", "cold", "pil", [], error="ImportError: no PIL\nmore"))
        rows = {r[0]: r for r in reporting.table_rows(res)}
        self.assertEqual(len(rows["1a"]), len(reporting.TABLE_HEADER))
        self.assertEqual(rows["1a"][4], "100")
        self.assertEqual(rows["1a"][5], "90 - 110")
        self.assertEqual(rows["1a"][8], "1.00x")
        self.assertEqual(rows["1a"][9], "0.50x")
        self.assertEqual(rows["1c"][8], "10.0x")
        self.assertEqual(rows["1c"][9], "5.00x")
        self.assertEqual(rows["1c"][6], "20.00")  # 1 s CPU per run / 100 samples... x1000
        self.assertEqual(rows["1e"][4], "failed: ImportError: no PIL")

    def test_a_markdown_table_escapes_pipes(self):
        t = reporting.markdown_table(["a", "b|c"], [["1", "x|y"]])
        self.assertEqual(t.splitlines(), ["| a | b\\|c |", "|---|---|", "| 1 | x\\|y |"])

    def test_benchmarks_md_shows_the_command_machine_targets_and_one_row_per_case(self):
        d = mkdtemp()
        report = fake_report(fake_results(quick=True), quick=True,
                             json_path=os.path.join(d, "r", "x.json"))
        report["targets"] = stats.targets(report["cases"])
        md = reporting.render_markdown(report, [os.path.join(d, "r", "x-throughput.png")], d)
        self.assertIn("`python3 -m prepfs_bench --data d --quick`", md)
        self.assertIn("Charts (not in git): `r/x-throughput.png`.", md)
        self.assertIn("| cold: prepfs >= 5x torchvision | 1c / 1a | 10.0x | met |  |", md)
        self.assertIn("| floor: prepfs cached >= 1/2 tmpfs | 3d / 3f | 0.40x | **missed** |",
                      md)
        self.assertIn("| warm: prepfs >= 20x torchvision | 2c / 1a | 25.0x | met | 2a not run: "
                      "against 1a |", md)
        self.assertIn("(quick run)", md)
        self.assertIn("## How to read this", md)
        self.assertIn("- Machine: Test CPU; nproc 2;", md)
        self.assertNotIn("Warning", md)
        self.assertNotIn("pending", md)  # peers only: no prepfs rows to wait for
        self.assertEqual(sum(1 for ln in md.splitlines() if ln.startswith("| 1a ")), 1)

        # as bench/run.sh runs it: the user's command, a prepfs mount without a cache, busy
        report["invoked_as"] = "make bench QUICK=1"
        report["build_info"] = "prepfs abc123"
        report["machine"]["loadavg_before"] = [2.5, 2.0, 1.0]
        report["settings"]["prepfs"] = {"desc": "mounted", "kind": "driver-mount",
                                         "cache_on": False, "stats": {"samples": 10}}
        report["targets"] = stats.targets(report["cases"], cache_on=False)
        md = reporting.render_markdown(report, [], d)
        self.assertIn("Produced by `make bench QUICK=1` (a quick run), which ran "
                      "`python3 -m prepfs_bench --data d --quick`.", md)
        self.assertIn("- Build: prepfs abc123", md)
        self.assertIn("- prepfs cache: none", md)
        self.assertIn("**Warning:** the machine was busy", md)
        self.assertIn("prepfs has no cache yet: 3d reads outputs computed at open", md)
        self.assertIn("| 4 | 4 concurrent jobs |", md)
        self.assertIn("| 2p | 2 warm, 25% cache |", md)
        widths = {ln.count(" | ") for ln in md.splitlines()
                  if ln.startswith("| ") and ln.split(" | ")[0][2:] in ("1a", "4", "2p")}
        self.assertEqual(widths, {len(reporting.TABLE_HEADER) - 1})

    def test_report_only_rewrites_the_markdown_from_a_saved_json(self):
        d = mkdtemp()
        report = fake_report(fake_results() + [fake_case("3g", "floor", "torchvision-ppm", [150])])
        js = os.path.join(d, "r.json")
        with open(js, "w") as f:
            json.dump(report, f)
        md = os.path.join(d, "B.md")
        self.assertEqual(cli.main(["--report-only", js, "--md", md, "--charts-dir", d]), 0)
        with open(md) as f:
            text = f.read()
        self.assertIn("| 3d / 3f | 0.40x | **missed** |", text)
        self.assertIn("this loop alone, over tmpfs (3g), reaches 1.50x", text)
        with open(js) as f:
            self.assertEqual(len(json.load(f)["targets"]),
                             len(stats.TARGETS) + len(stats.JOB_TARGETS))

    def test_rows_not_run_yet_are_shown_pending(self):
        rows = reporting.pending_rows(cache_on=False)
        self.assertEqual([r[0] for r in rows], ["2p", "4"])
        self.assertTrue(all(len(r) == len(reporting.TABLE_HEADER) for r in rows))
        self.assertTrue(all(r[4].startswith("pending") for r in rows))
        self.assertEqual([r[0] for r in reporting.pending_rows(cache_on=True)], ["2p", "4"])

    def test_target_notes_say_when_the_cache_was_off_or_served_only_part(self):
        t = {x["cases"]: x for x in stats.targets(fake_results(), cache_on=False)}
        self.assertIn("no cache yet", t["2c / 2a"]["note"])
        self.assertIn("no cache yet", t["3d / 3f"]["note"])
        self.assertEqual(t["1c / 1a"]["note"], "")
        self.assertTrue(all(x["note"] == "" for x in stats.targets(fake_results(), cache_on=True)))
        res = fake_results()
        by_id = {c["id"]: c for c in res}
        by_id["3d"]["summary"]["cache"] = {"augmented_hit_rate": 0.5}
        by_id["2c"]["summary"]["cache"] = {"augmented_hit_rate": 1.0}
        t = {x["cases"]: x for x in stats.targets(res, cache_on=True)}
        self.assertEqual(t["3d / 3f"]["note"], "only 50% of 3d's outputs came from the cache")
        self.assertEqual(t["2c / 2a"]["note"], "")

    def test_cache_counts_come_from_stats_json_and_give_the_hit_rate(self):
        self.assertIsNone(stats.cache_counts(None))
        self.assertIsNone(stats.cache_counts({"samples": 3}))
        self.assertIsNone(stats.cache_counts({"cache": {"memory": 0}}))
        st = {"cache": {"memory": 10, "augmented": {"hits": 3, "misses": 1},
                        "decoded": {"hits": 0, "misses": 1}, "encoded": {}}}
        c = stats.cache_counts(st)
        self.assertEqual((c["augmented_hits"], c["augmented_misses"], c["encoded_hits"]),
                         (3, 1, 0))
        runs = [dict(fake_run(), cache={"augmented_hits": 3, "augmented_misses": 1}),
                dict(fake_run(), cache={"augmented_hits": 0, "augmented_misses": 4})]
        s = stats.summarize(runs)
        self.assertEqual(s["cache"]["augmented_hits"], 3)
        self.assertAlmostEqual(s["cache"]["augmented_hit_rate"], 3 / 8)
        self.assertIsNone(stats.summarize([fake_run()])["cache"])
        case = fake_case("2c", "warm", "torchvision-ppm", [100])
        case["summary"] = s
        self.assertEqual(reporting.table_rows([case])[0][-1], "38%")

    def test_a_progress_line_shows_the_rate_and_the_runs_or_the_failure(self):
        c = fake_case("1a", "cold", "torchvision", [90, 100, 110])
        line = reporting.progress_line(c)
        self.assertTrue(line.startswith("[bench] 1a  cold  torchvision on JPEG files: 100.0"))
        self.assertIn("[3 x 100]", line)
        bad = fake_case("1b", "cold", "dali", [], error="RuntimeError: x")
        self.assertIn("FAILED: RuntimeError: x", reporting.progress_line(bad))

    def test_the_charts_are_png_files(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("no matplotlib")
        d = mkdtemp()
        report = {"cases": fake_results(), "settings": {"data_samples": 10, "cpus": [0, 1]}}
        paths = charts.write_charts(report, os.path.join(d, "x"))
        self.assertEqual([os.path.basename(p) for p in paths], ["x-throughput.png", "x-cpu.png"])
        for p in paths:
            with open(p, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
