"""bench/test_harness.py: self-test of the benchmark harness's own logic, on tiny fake data.

Owns no benchmark: it checks the driver, the package bench/prepfs_bench/ that
bench/run_bench.py runs (the statistics, ratios, targets and table formatting, the derived
mount configs, the options, the run of a case and of scenario 4), the listing/sampling/measuring
helpers and the run protocol of loaders.py (with the raw reader, which needs only the standard
library), and the prepfs mount hook against a fake `prepfs` script. Needs no torch, DALI or
FUSE; charts are checked when matplotlib is there, the derived configs' YAML when PyYAML is.

    python3 bench/test_harness.py        # prints "N passed, N failed" last
    python3 -m pytest bench/test_harness.py
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import json
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import textwrap
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepfs_bench import (charts, cli, cold_epochs, config, floor, loaders, mount,  # noqa: E402
                          plan, refill, runner, scenario4, stats, units, warm_floor)
from prepfs_bench import report as reporting  # noqa: E402


_TMPDIRS = []


def mkdtemp() -> str:
    """A temporary directory, removed when the tests end."""
    d = tempfile.mkdtemp(prefix="prepfs-bench-test-")
    _TMPDIRS.append(d)
    return d


@atexit.register
def _remove_tmpdirs() -> None:
    for d in _TMPDIRS:
        shutil.rmtree(d, ignore_errors=True)


def fake_run(samples=100, wall=1.0, cpu=2.0, rss=100.0, pss=None, fs_cpu=None, fs_rss=None):
    r = {"samples": samples, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss,
         "peak_pss_mb": pss}
    if fs_cpu is not None:
        r["fs_cpu_s"] = fs_cpu
    if fs_rss is not None:
        r["fs_peak_rss_mb"] = fs_rss
    return r


def fake_case(cid, scenario, loader, sps_list, error=None):
    runs = [fake_run(samples=100, wall=100.0 / s) for s in sps_list]
    c = {"id": cid, "scenario": scenario, "loader": loader,
         "label": plan.LABELS.get(loader, loader),
         "reads": "JPEG files", "runs": runs, "error": error}
    if runs:
        c["summary"] = stats.summarize(runs)
    return c


class ColdEpochsTest(unittest.TestCase):
    """bench/cold_epochs.py's parts that need no mount."""

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
    """bench/warm_floor.py's parts that need no mount."""

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


class StatsTest(unittest.TestCase):
    def test_spread(self):
        s = stats.spread([3.0, 1.0, 2.0, None])
        self.assertEqual((s["median"], s["min"], s["max"], s["n"]), (2.0, 1.0, 3.0, 3))
        self.assertEqual(stats.spread([])["median"], None)
        self.assertEqual(stats.spread([1.0, 2.0, 3.0, 4.0])["median"], 2.5)

    def test_summarize_adds_the_daemon(self):
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

    def test_summarize_without_daemon(self):
        s = stats.summarize([fake_run(64, 0.5, 1.28)])
        self.assertEqual(s["samples_per_s"]["median"], 128.0)
        self.assertAlmostEqual(s["cpu_s_per_sample"]["median"], 0.02)
        self.assertEqual(s["fs_cpu_s_per_sample"], 0.0)
        self.assertIsNone(s["peak_pss_mb"])


def fake_results(quick=False):
    cases = [fake_case("1a", "cold", "torchvision", [90, 100, 110]),
             fake_case("1b", "cold", "dali", [200, 190, 210]),
             fake_case("1c", "cold", "torchvision-ppm", [1000, 900, 1100]),
             fake_case("1d", "cold", "raw", [5000])]
    if not quick:
        cases += [fake_case("2a", "warm", "torchvision", [100]),
                  fake_case("2b", "warm", "dali", [250])]
    cases += [fake_case("2c", "warm", "torchvision-ppm", [2500]),
              fake_case("3d", "floor", "raw", [4000]),
              fake_case("3f", "floor", "raw", [10000])]
    return cases


class RatioTest(unittest.TestCase):
    def test_ratio(self):
        self.assertEqual(stats.ratio(10, 5), 2.0)
        self.assertIsNone(stats.ratio(None, 5))
        self.assertIsNone(stats.ratio(10, 0))
        self.assertIsNone(stats.ratio(10, None))

    def test_ratios_same_cache_state(self):
        r = stats.ratios(fake_results())
        self.assertAlmostEqual(r["1c"]["torchvision"], 10.0)
        self.assertAlmostEqual(r["1c"]["dali"], 5.0)
        self.assertAlmostEqual(r["1a"]["torchvision"], 1.0)
        self.assertAlmostEqual(r["2c"]["torchvision"], 25.0)  # against 2a, not 1a
        self.assertAlmostEqual(r["2c"]["dali"], 10.0)
        self.assertAlmostEqual(r["3f"]["torchvision"], 100.0)  # floor: against the warm rows

    def test_ratios_fall_back_to_cold(self):
        r = stats.ratios(fake_results(quick=True))
        self.assertAlmostEqual(r["2c"]["torchvision"], 25.0)  # 2a missing: 1a
        self.assertAlmostEqual(r["2c"]["dali"], 12.5)

    def test_failed_baseline(self):
        res = fake_results()
        res[0] = fake_case("1a", "cold", "torchvision", [], error="boom")
        r = stats.ratios(res)
        self.assertIsNone(r["1c"]["torchvision"])
        self.assertAlmostEqual(r["1c"]["dali"], 5.0)

    def test_targets(self):
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


class FormatTest(unittest.TestCase):
    def test_numbers(self):
        self.assertEqual(units.fmt_num(None), "-")
        self.assertEqual(units.fmt_num(12345.6), "12,346")
        self.assertEqual(units.fmt_num(99.6), "100")
        self.assertEqual(units.fmt_num(0.1234, 2), "0.12")
        self.assertEqual(units.fmt_ratio(None), "-")
        self.assertEqual(units.fmt_ratio(2.345), "2.35x")
        self.assertEqual(units.fmt_ratio(23.45), "23.4x")

    def test_table_rows(self):
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

    def test_markdown_table(self):
        t = reporting.markdown_table(["a", "b|c"], [["1", "x|y"]])
        self.assertEqual(t.splitlines(), ["| a | b\\|c |", "|---|---|", "| 1 | x\\|y |"])

    def test_render_markdown(self):
        d = mkdtemp()
        report = {
            "command": "python bench/run_bench.py --data d --quick", "date": "2026-01-01",
            "quick": True, "page_cache_drop": "yes", "json_path": os.path.join(d, "r", "x.json"),
            "machine": {"cpu_model": "Test CPU", "nproc": 2, "mem_gib": 24.0, "kernel": "6.1",
                        "loadavg_before": [0.1, 0.1, 0.1]},
            "settings": {"cpus": [0, 1], "data_samples": 10, "data_classes": 2, "data_mb": 1.2,
                         "data_mean_kb": 120.0, "reps": 3, "samples_desc": "10 samples",
                         "workers": 2, "prepfs": {"desc": "not measured"}},
            "cases": fake_results(quick=True),
        }
        report["targets"] = stats.targets(report["cases"])
        md = reporting.render_markdown(report, [os.path.join(d, "r", "x-throughput.png")], d)
        self.assertIn("`python bench/run_bench.py --data d --quick`", md)
        self.assertIn("![x-throughput.png](r/x-throughput.png)", md)
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
                      "`python bench/run_bench.py --data d --quick`.", md)
        self.assertIn("- Build: prepfs abc123", md)
        self.assertIn("- prepfs cache: none", md)
        self.assertIn("**Warning:** the machine was busy", md)
        self.assertIn("prepfs has no cache yet: 3d reads outputs computed at open", md)
        self.assertIn("| 4 | 4 concurrent jobs |", md)
        self.assertIn("| 2p | 2 warm, 25% cache |", md)
        widths = {ln.count(" | ") for ln in md.splitlines()
                  if ln.startswith("| ") and ln.split(" | ")[0][2:] in ("1a", "4", "2p")}
        self.assertEqual(widths, {len(reporting.TABLE_HEADER) - 1})

    def test_report_only(self):
        d = mkdtemp()
        report = {
            "command": "python bench/run_bench.py --data d", "date": "2026-01-01",
            "quick": False, "page_cache_drop": "yes",
            "machine": {"cpu_model": "Test CPU", "nproc": 2, "mem_gib": 24.0, "kernel": "6.1",
                        "loadavg_before": [0.1, 0.1, 0.1]},
            "settings": {"cpus": [0, 1], "data_samples": 10, "data_classes": 2, "data_mb": 1.2,
                         "data_mean_kb": 120.0, "reps": 3, "samples_desc": "10 samples",
                         "workers": 2, "prepfs": {"desc": "not measured"}},
            "cases": fake_results() + [fake_case("3g", "floor", "torchvision-ppm", [150])],
        }
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

    def test_pending_rows(self):
        rows = reporting.pending_rows(cache_on=False)
        self.assertEqual([r[0] for r in rows], ["2p", "4"])
        self.assertTrue(all(len(r) == len(reporting.TABLE_HEADER) for r in rows))
        self.assertTrue(all(r[4].startswith("pending") for r in rows))
        self.assertEqual([r[0] for r in reporting.pending_rows(cache_on=True)], ["2p", "4"])

    def test_target_notes(self):
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

    def test_cache_counts(self):
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

    def test_progress_line(self):
        c = fake_case("1a", "cold", "torchvision", [90, 100, 110])
        line = reporting.progress_line(c)
        self.assertTrue(line.startswith("[bench] 1a  cold  torchvision on JPEG files: 100.0"))
        self.assertIn("[3 x 100]", line)
        bad = fake_case("1b", "cold", "dali", [], error="RuntimeError: x")
        self.assertIn("FAILED: RuntimeError: x", reporting.progress_line(bad))

    def test_plan(self):
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

    def test_charts(self):
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


def make_tree(root, classes=2, per_class=3, size=1000, junk=True):
    for c in range(classes):
        d = os.path.join(root, f"class{c}")
        os.makedirs(d)
        for i in range(per_class):
            with open(os.path.join(d, f"img{i}.JPEG"), "wb") as f:
                f.write(bytes([i]) * (size + i))
    if junk:
        with open(os.path.join(root, "class0", "notes.txt"), "w") as f:
            f.write("x")


class LoaderHelpersTest(unittest.TestCase):
    def test_list_image_folder(self):
        d = mkdtemp()
        make_tree(d)
        classes, samples = loaders.list_image_folder(d)
        self.assertEqual(classes, ["class0", "class1"])
        self.assertEqual(len(samples), 6)  # notes.txt is not an image
        self.assertEqual([c for _, c in samples], [0, 0, 0, 1, 1, 1])
        self.assertEqual(len(loaders.list_files(d)), 7)

    def test_pick_is_a_fixed_subset(self):
        items = list(range(100))
        a = loaders.pick(items, 10)
        self.assertEqual(a, loaders.pick(items, 10))
        self.assertEqual(a, sorted(a))
        self.assertEqual(len(set(a)), 10)
        self.assertEqual(loaders.pick(items, None), items)
        self.assertEqual(loaders.pick(items, 1000), items)

    def test_rrc_params(self):
        rng = random.Random(1)
        for w, h in ((500, 375), (375, 500), (224, 224), (50, 2000), (2000, 50)):
            for _ in range(200):
                top, left, ch, cw = loaders.rrc_params(w, h, rng)
                self.assertTrue(0 <= top and top + ch <= h and 0 <= left and left + cw <= w,
                                (w, h, top, left, ch, cw))
                self.assertGreater(ch, 0)
                self.assertGreater(cw, 0)
        # a very thin image cannot fit the ratio: the centre crop with the clamped ratio
        top, left, ch, cw = loaders.rrc_params(2000, 10, random.Random(0),
                                               scale=(1.0, 1.0))
        self.assertEqual((ch, cw), (10, 13))
        self.assertEqual(left, (2000 - 13) // 2)

    def test_raw_reader_and_protocol(self):
        d = mkdtemp()
        make_tree(d, junk=False)
        out = io.StringIO()
        inp = io.StringIO("go\n" * 3)
        res = loaders.run_reps("raw", d, workers=2, reps=2, warmup=1, sync=True, out=out,
                               inp=inp)
        self.assertEqual(len(res), 2)
        lines = out.getvalue().splitlines()
        self.assertEqual([ln.split(" ")[0] for ln in lines],
                         ["@@ready", "@@result"] * 3)
        last = json.loads(lines[-1][len(loaders.RESULT_TAG):])
        self.assertEqual(last["samples"], 6)
        self.assertEqual(last["bytes"], 2 * (3000 + 0 + 1 + 2))
        self.assertFalse(last["extra"]["warmup"])
        self.assertTrue(json.loads(lines[1][len(loaders.RESULT_TAG):])["extra"]["warmup"])
        self.assertGreater(last["samples_per_s"], 0)
        self.assertGreaterEqual(last["cpu_s"], 0)

    def test_raw_min_seconds_and_processes(self):
        d = mkdtemp()
        make_tree(d, junk=False)
        r = loaders.run_raw(d, workers=2, min_seconds=0.2)
        self.assertGreaterEqual(r.wall_s, 0.2)
        self.assertEqual(r.samples % 6, 0)
        self.assertGreater(r.samples, 6)
        p = loaders.LOADERS["raw-proc"](d, workers=2, limit=4)
        self.assertEqual(p.samples, 4)
        self.assertEqual(p.loader, "raw-proc")

    def test_tree_memory(self):
        self.assertGreater(loaders.tree_memory_mb(os.getpid()), 1.0)
        self.assertEqual(loaders.tree_memory_mb(2 ** 22 + 12345), 0.0)  # no such process


FAKE_PREPFS = textwrap.dedent("""\
    #!{python}
    # a stand-in for `prepfs mount CONFIG --source SRC --mountpoint MNT`: no FUSE, it only
    # writes MNT/.prepfs/stats.json, then waits for SIGTERM and removes it.
    import json, os, signal, sys, time
    args = sys.argv[1:]
    assert args[0] == "mount" and args[2] == "--source" and args[4] == "--mountpoint", args
    mnt = args[5]
    if os.environ.get("FAKE_PREPFS_FAIL"):
        print("prepfs: bad config", file=sys.stderr); sys.exit(3)
    if not os.environ.get("FAKE_PREPFS_HANG"):
        time.sleep(0.2)
        os.makedirs(os.path.join(mnt, ".prepfs"), exist_ok=True)
        with open(os.path.join(mnt, ".prepfs", "stats.json"), "w") as f:
            json.dump({{"samples": 6, "source": args[3], "cpus": sorted(os.sched_getaffinity(0))}}, f)
    def bye(*_):
        try:
            os.remove(os.path.join(mnt, ".prepfs", "stats.json"))
        except OSError:
            pass
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    while True:
        time.sleep(1)
""")


class MountHookTest(unittest.TestCase):
    def setUp(self):
        self.dir = mkdtemp()
        self.bin = os.path.join(self.dir, "prepfs")
        with open(self.bin, "w") as f:
            f.write(FAKE_PREPFS.format(python=sys.executable))
        os.chmod(self.bin, os.stat(self.bin).st_mode | stat.S_IXUSR)
        self.mnt = os.path.join(self.dir, "mnt")
        os.environ.pop("FAKE_PREPFS_FAIL", None)
        os.environ.pop("FAKE_PREPFS_HANG", None)

    def test_mount_and_close(self):
        cpu = sorted(os.sched_getaffinity(0))[:1]
        with mount.mount_prepfs(self.bin, "cfg.yaml", "/src", self.mnt, timeout=10,
                                cpus=cpu) as h:
            st = h.stats()
            self.assertEqual(st["source"], "/src")
            self.assertEqual(st["cpus"], cpu)  # pinned like the loaders
            self.assertIsNone(h.proc.poll())
            self.assertGreaterEqual(h.cpu_seconds(), 0.0)
            self.assertEqual(h.view("augmented"), os.path.join(self.mnt, "augmented"))
            self.assertEqual(mount.find_mount_daemon(self.mnt), h.pid)
        self.assertEqual(h.proc.returncode, 0)  # ended by SIGTERM, cleanly
        self.assertFalse(os.path.exists(os.path.join(self.mnt, ".prepfs", "stats.json")))
        self.assertFalse(os.path.exists(h.log_path))  # its own temporary log: removed

    def test_log_path_is_kept(self):
        log = os.path.join(self.dir, "logs", "prepfs-ppm.log")
        os.makedirs(os.path.dirname(log))
        for _ in range(2):  # a remount appends
            mount.mount_prepfs(self.bin, "cfg.yaml", "/src", self.mnt, timeout=10,
                               log_path=log).close()
        self.assertTrue(os.path.isfile(log))

    def test_exit_is_reported(self):
        os.environ["FAKE_PREPFS_FAIL"] = "1"
        with self.assertRaises(mount.PrepfsError) as e:
            mount.mount_prepfs(self.bin, "cfg.yaml", "/src", self.mnt, timeout=10)
        self.assertIn("exited with status 3", str(e.exception))
        self.assertIn("bad config", str(e.exception))

    def test_timeout(self):
        os.environ["FAKE_PREPFS_HANG"] = "1"
        t = time.monotonic()
        with self.assertRaises(mount.PrepfsError) as e:
            mount.mount_prepfs(self.bin, "cfg.yaml", "/src", self.mnt, timeout=0.5)
        self.assertIn("did not appear", str(e.exception))
        self.assertLess(time.monotonic() - t, 10)

    def test_missing_binary(self):
        with self.assertRaises(mount.PrepfsError):
            mount.mount_prepfs(os.path.join(self.dir, "nope"), "c", "/s", self.mnt)

    def test_is_mounted(self):
        self.assertTrue(mount.is_mounted("/"))
        self.assertFalse(mount.is_mounted(self.dir))

    def tearDown(self):
        os.environ.pop("FAKE_PREPFS_FAIL", None)
        os.environ.pop("FAKE_PREPFS_HANG", None)


def case_args(reps: int = 2):
    """The arguments run_case reads, as the driver's argparse would give them."""
    return types.SimpleNamespace(python=sys.executable, workers=2, reps=reps, limit=None,
                                 timeout=60)


class RunCaseTest(unittest.TestCase):
    """run_case drives a real child process (the raw reader: standard library only)."""

    def test_run_case_raw(self):
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

    def test_run_case_failure(self):
        Args = case_args(1)

        case = plan.Case("1d", "cold", "raw", "raw", "files", "/nonexistent/dir")
        rec = runner.run_case(case, Args, sorted(os.sched_getaffinity(0))[:1], None)
        self.assertIn("FileNotFoundError", rec["error"])
        self.assertNotIn("summary", rec)


class ConfigTest(unittest.TestCase):
    """Mount configs derived from the base one (2p's 25% cache, scenario 4's read limit)."""

    BASE = textwrap.dedent("""\
        # a comment
        source: /data/imagenet/train
        seed: 0
        augment:
          - random_resized_crop: { size: 224 }
        output:
          format: ppm

        # added by bench/run.sh
        cache: { memory: 1GiB }
        """)

    def test_parse_size(self):
        self.assertEqual(units.parse_size("10MB/s"), 10e6)
        self.assertEqual(units.parse_size("1GiB"), 2 ** 30)
        self.assertEqual(units.parse_size("512 KiB"), 512 * 1024)
        self.assertEqual(units.parse_size("7250000"), 7250000)
        self.assertEqual(units.parse_size("1.5kb/s"), 1500)
        for bad in ("", "fast", "10XB/s", "MB"):
            with self.assertRaises(ValueError):
                units.parse_size(bad)
        self.assertEqual(units.fmt_bytes(29_000_000), "29.0 MB")
        self.assertEqual(units.fmt_bytes(None), "-")
        self.assertEqual(config.cache_of_share(29_000_000, 0.25), 7_250_000)

    def test_parse_size_agrees_with_prepfs(self):
        """units.parse_size mirrors the Rust parser (config::parse_bytes): where a built
        `prepfs` is at hand, `prepfs check` reads the same sizes to the same bytes and refuses
        what parse_size refuses. Skipped when none is built (the harness builds nothing)."""
        import subprocess
        from prepfs_bench import ROOT
        binary = os.environ.get("PREPFS_BIN") or next(
            (p for p in (os.path.join(ROOT, "target", kind, "prepfs") for kind in ("debug", "release"))
             if os.access(p, os.X_OK)), None)
        if not binary:
            self.skipTest("no built prepfs (cargo build)")
        d = mkdtemp()
        source, mnt = os.path.join(d, "source"), os.path.join(d, "mnt")
        os.makedirs(source)
        os.makedirs(mnt)

        def check(size):
            path = os.path.join(d, "c.yaml")
            with open(path, "w") as f:
                f.write(f"cache: {{ memory: \"{size}\", split: auto }}\n")
            return subprocess.run([binary, "check", path, "--source", source, "--mountpoint", mnt],
                                  capture_output=True, text=True, timeout=60)

        for size in ("512MiB", "1GiB", "1.5KiB", "7250000", "500MB", "2 GiB", "3kb"):
            out = check(size)
            self.assertEqual(out.returncode, 0, f"{size}: {out.stderr}")
            memory = [line.split(":", 1)[1] for line in out.stdout.splitlines()
                      if line.strip().startswith("memory:")]
            self.assertEqual([int(m) for m in memory], [int(units.parse_size(size))], size)
        for bad in ("fast", "10XB", "MB"):
            self.assertNotEqual(check(bad).returncode, 0, bad)
            with self.assertRaises(ValueError):
                units.parse_size(bad)

    def test_strip_top_level(self):
        text = "a: 1\ncache:\n  memory: 1GiB\n  split: auto\nb: 2\n"
        self.assertEqual(config.strip_top_level(text, ["cache"]), "a: 1\nb: 2\n")
        self.assertEqual(config.strip_top_level(text, ["nothing"]), text)
        # a key that only starts like another is kept
        self.assertIn("cache_x: 1", config.strip_top_level("cache_x: 1\ncache: 2\n", ["cache"]))

    def test_derive_config(self):
        c25 = config.derive_config(self.BASE, "{ memory: 7250000, split: auto }", note="2p")
        self.assertEqual(c25.count("cache:"), 1)
        self.assertIn("cache: { memory: 7250000, split: auto }", c25)
        self.assertIn("source: /data/imagenet/train", c25)  # untouched without a read limit
        self.assertIn("random_resized_crop", c25)
        self.assertIn("# added by prepfs_bench: 2p", c25)
        storage = config.derive_config(self.BASE, None, "/d/my data", "10MB/s")
        self.assertNotIn("cache:", storage)  # no cache at all
        self.assertNotIn("/data/imagenet/train", storage)
        self.assertIn('source: { path: "/d/my data", read_limit: 10MB/s }', storage)
        both = config.derive_config(self.BASE, "{ memory: 1 }", "/d", "1MB/s")
        self.assertEqual([ln.split(":")[0] for ln in both.splitlines()
                          if ln.startswith(("source", "cache"))], ["source", "cache"])


class ConfigTextTest(unittest.TestCase):
    """The one place that edits mount configs as text: which lines a dropped section owns."""

    def test_top_level_key(self):
        k = config.top_level_key
        self.assertEqual(k("source: /d"), "source")
        self.assertEqual(k("cache:"), "cache")
        self.assertEqual(k("cache: { memory: 1GiB }"), "cache")
        self.assertEqual(k("cache : 1"), "cache")
        self.assertEqual(k('"cache": 1'), "cache")
        self.assertEqual(k("'cache':"), "cache")
        self.assertEqual(k("cache_x: 1"), "cache_x")
        for line in ("  memory: 1", "\tx: 1", "", "# cache: 1", "- a: 1", "-", "---", "...",
                     "cache", "a:b: 1"):
            self.assertIsNone(k(line), line)

    def test_strip_keeps_what_is_not_the_section(self):
        s = config.strip_top_level
        # a comment at column 0 after the section belongs to what follows: kept
        self.assertEqual(s("cache:\n  memory: 1\n\n# the seed\nseed: 0\n", ["cache"]),
                         "# the seed\nseed: 0\n")
        self.assertEqual(s("a: 1\ncache: 2\n# end\n", ["cache"]), "a: 1\n# end\n")
        self.assertEqual(s("cache: 1\n---\nb: 2\n", ["cache"]), "---\nb: 2\n")
        self.assertEqual(s('a: 1\n"cache": { memory: 1 }\nb: 2\n', ["cache"]), "a: 1\nb: 2\n")

    def test_strip_drops_all_of_the_section(self):
        s = config.strip_top_level
        # a comment at column 0 that more of the section follows is the section's
        self.assertEqual(s("cache:\n# the budget\n  memory: 1\nseed: 0\n", ["cache"]),
                         "seed: 0\n")
        self.assertEqual(s("cache:\n  memory: 1\n# split\n\n  split: auto\nb: 2\n", ["cache"]),
                         "b: 2\n")
        # a block sequence at column 0 is the key's value
        self.assertEqual(s("source:\n- /a\n- /b\nseed: 0\n", ["source"]), "seed: 0\n")
        self.assertEqual(s("augment:\n- flip: {}\ncache: 1\n", ["cache"]),
                         "augment:\n- flip: {}\n")

    def test_derived_configs_of_the_repository(self):
        """Every config in mount-configs/ (and each with run.sh's cache appended) gives, for
        2p and for scenario 4, the same mapping with only `cache` (and `source`) replaced."""
        try:
            import yaml
        except ImportError:
            self.skipTest("no PyYAML")
        import glob
        from prepfs_bench import ROOT
        paths = sorted(glob.glob(os.path.join(ROOT, "mount-configs", "*.yaml")))
        self.assertTrue(paths)
        for path in paths:
            with open(path) as f:
                text = f.read()
            for base in (text, text + "\n# added by bench/run.sh: a sample cache that holds "
                                      "the bench set\ncache: { memory: 1GiB }\n"):
                want = yaml.safe_load(base) or {}
                c25 = yaml.safe_load(config.derive_config(
                    base, "{ memory: 7250000, split: auto, policy: keep }", note="2p"))
                self.assertEqual(c25, {**{k: v for k, v in want.items() if k != "cache"},
                                       "cache": {"memory": 7250000, "split": "auto",
                                                 "policy": "keep"}}, path)
                st = yaml.safe_load(config.derive_config(base, None, "/d/my data", "10MB/s"))
                self.assertEqual(st, {**{k: v for k, v in want.items()
                                         if k not in ("cache", "source")},
                                      "source": {"path": "/d/my data", "read_limit": "10MB/s"}},
                                 path)


class CliTest(unittest.TestCase):
    """bench/run_bench.py's options and the steps of its main."""

    def parse(self, *argv):
        ap = cli.build_parser()
        args = ap.parse_args(list(argv))
        cli.resolve_args(ap, args)
        return args

    def test_defaults(self):
        a = self.parse("--data", "d")
        self.assertEqual((a.reps, a.limit, a.jobs_reps, a.jobs_per_class), (5, None, 3, None))
        self.assertEqual((a.workers, a.cores, a.jobs, a.jobs_epochs, a.cache_share),
                         (2, 2, 3, 2, 0.25))
        q = self.parse("--data", "d", "--quick")
        self.assertEqual((q.reps, q.limit, q.jobs_reps, q.jobs_per_class), (3, 512, 1, 16))
        q = self.parse("--data", "d", "--quick", "--reps", "7", "--limit", "9")
        self.assertEqual((q.reps, q.limit), (7, 9))

    def test_refused(self):
        for argv in ([], ["--data", "d", "--read-limit", "fast"],
                     ["--data", "d", "--cache-share", "0"],
                     ["--data", "d", "--prepfs-bin", "b", "--augmented-dir", "a"],
                     ["--data", "d", "--prepfs-npy-config", "c"],
                     ["--data", "d", "--augmented-npy-dir", "n"]):
            with self.assertRaises(SystemExit, msg=argv), \
                    contextlib.redirect_stderr(io.StringIO()):
                self.parse(*argv)

    def fake_binary(self, check_status: int) -> str:
        d = mkdtemp()
        binary = os.path.join(d, "prepfs")
        with open(binary, "w") as f:
            f.write(f"#!/bin/sh\n[ \"$1\" = check ] && {{ echo 'prepfs: no' >&2; "
                    f"exit {check_status}; }}\nexit 9\n")
        os.chmod(binary, 0o755)
        return binary

    def test_driver_mounts(self):
        d, cfgs = mkdtemp(), mkdtemp()
        base = os.path.join(d, "base.yaml")
        with open(base, "w") as f:
            f.write(ConfigTest.BASE)
        dinfo = {"data_bytes": 1000, "data_samples": 10}
        for status in (0, 1):
            args = self.parse("--data", d, "--prepfs-bin", self.fake_binary(status),
                              "--prepfs-config", base, "--prepfs-npy-config", base,
                              "--mountpoint", os.path.join(d, "mnt"))
            with contextlib.redirect_stdout(io.StringIO()):
                pf = cli.setup_prepfs(args, d, dinfo, [0], cfgs)
            with open(os.path.join(cfgs, "imagenet-cache25.yaml")) as f:
                self.assertIn("cache: { memory: 250, split: auto }", f.read())
            self.assertEqual(pf.base_text, ConfigTest.BASE)
            want = ["ppm", "npy"] + (["ppm25"] if status == 0 else [])
            self.assertEqual(list(pf.sources()), want)
            self.assertTrue(all(s.kind == "driver-mount" and s.mount is None
                                for s in pf.sources().values()))  # nothing mounted yet
            self.assertEqual(pf.sources()["npy"].augmented,
                             os.path.join(d, "mnt-npy", "augmented"))
            self.assertEqual(pf.pending_why,
                             None if status == 0 else "prepfs check refused the 25% config: "
                                                      "prepfs: no")
            report = cli.new_report(args, [], {}, dict(dinfo, data_mb=1), d, 10, [0], pf)
            self.assertEqual(list(report["settings"]["prepfs"]),
                             ["kind", "desc", "augmented", "augmented25", "cache25_split_asked",
                              "cache25_policy", "cache25_bytes", "augmented_npy"])
            self.assertEqual(report["settings"]["prepfs"]["cache25_bytes"],
                             250 if status == 0 else None)
            self.assertEqual(list(report["settings"])[-3:],
                             ["prepfs", "pending_why", "fuse_floor"])
            self.assertEqual(report["settings"]["fuse_floor"]["why"],
                             "no --floorfs-bin (the harness mounts examples/floorfs)")
            self.assertEqual(report["settings"]["fuse_floor"]["mountpoint"],
                             os.path.join(d, "mnt") + "-floor")

    def test_main_with_a_stand_in(self):
        """A whole run without prepfs: the floor over a stand-in directory, its report."""
        d, aug, out = mkdtemp(), mkdtemp(), mkdtemp()
        make_tree(d, junk=False)
        make_tree(aug, junk=False)
        affinity = os.sched_getaffinity(0)
        handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            with contextlib.redirect_stdout(io.StringIO()) as log:
                rc = cli.main(["--data", d, "--augmented-dir", aug, "--only", "3f", "--reps",
                               "1", "--cores", "1", "--out", os.path.join(out, "r.json"),
                               "--md", os.path.join(out, "B.md"), "--charts-dir", out])
        finally:
            os.sched_setaffinity(0, affinity)
            for s, h in handlers.items():
                signal.signal(s, h)
        self.assertEqual(rc, 0, log.getvalue())
        with open(os.path.join(out, "r.json")) as f:
            report = json.load(f)
        self.assertEqual([c["id"] for c in report["cases"]], ["3f"])
        n = report["cases"][0]["summary"]["samples_per_run"]  # passes for at least 1 s
        self.assertTrue(n > 0 and n % 6 == 0, n)
        self.assertEqual(report["settings"]["prepfs"]["kind"], "stand-in")
        self.assertIn("copied 6 augmented outputs", log.getvalue())
        with open(os.path.join(out, "B.md")) as f:
            self.assertIn("| 3f | 3 floor | raw reader (whole files) |", f.read())


class RefillWaitTest(unittest.TestCase):
    """The wait for the background refill before warm and floor runs."""

    def test_decision(self):
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

    def test_wait(self):
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

    def test_summary_and_rows(self):
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


def fake_job(start, end, samples=200, cpu=10.0):
    return {"samples": samples, "wall_s": end - start, "cpu_s": cpu, "peak_rss_mb": 300.0,
            "extra": {"t_start": start, "t_end": end, "epoch_walls": [(end - start) / 2] * 2}}


def fake_jobs_report(makespans=None, hit_b=0.3, hit_c=0.6, reps=3):
    """Scenario 4 with variants whose makespans (per run) are given."""
    makespans = makespans or {"4a": [100.0, 110.0, 90.0], "4b": [70.0], "4c": [50.0]}
    settings = {"jobs": 3, "epochs": 2, "reps": reps, "workers": 2, "batch_size": 64,
                "cpus": [0, 1], "data_samples": 100, "data_bytes": 3_600_000,
                "read_limit": "10MB/s", "read_limit_bytes_per_s": 1e7, "cache_share": 0.25,
                "cache_bytes": 900_000, "uncached": "fadvise", "split": "10-20-70"}
    variants = []
    for vid, key, loader, label, reads in plan.JOB_VARIANTS:
        if vid not in makespans:
            continue
        runs = []
        for m in makespans[vid]:
            jobs = [fake_job(1000.0, 1000.0 + m), fake_job(1000.5, 1000.0 + m - 5),
                    fake_job(1001.0, 1000.0 + m - 1)]
            hr = {"4a": None, "4b": hit_b, "4c": hit_c}[vid]
            st0 = {"source_bytes_read": 0, "views": {"augmented": {"hits": 0, "misses": 0}}}
            st1 = {"source_bytes_read": 21_600_000 if vid == "4a" else 5_000_000,
                   "views": {"augmented": {"hits": int(600 * (hr or 0)),
                                           "misses": 600 - int(600 * (hr or 0))}}}
            js = {f"job{i}": {"name": f"job{i}", "samples_served": 200, "epoch": 2,
                              "hits": {"augmented": int(200 * (hr or 0)), "decoded": 0,
                                       "encoded": 0},
                              "misses": 200 - int(200 * (hr or 0))} for i in range(3)}
            runs.append(stats.jobs_run_record(key, jobs, st0, st1, 20.0,
                                              js if key == "prepfs-ods" else None,
                                              21_600_000 if key == "torchvision" else None))
        variants.append({"id": vid, "key": key, "loader": loader, "label": label,
                         "reads": reads.format(R="10MB/s", C="25%"), "runs": runs,
                         "error": None, "summary": stats.summarize_jobs(runs)})
    return {"settings": settings, "variants": variants}


class JobsTest(unittest.TestCase):
    """Scenario 4's figures: makespan, hit rates, the rows, the targets."""

    def test_makespan(self):
        self.assertEqual(stats.makespan([{"t_start": 5, "t_end": 20}, {"t_start": 3, "t_end": 9}]),
                         17)
        self.assertIsNone(stats.makespan([{"t_start": 5, "t_end": 20}, {"t_start": 3}]))
        self.assertIsNone(stats.makespan([]))

    def test_hit_rates(self):
        st0 = {"views": {"augmented": {"hits": 10, "misses": 5}}}
        st1 = {"views": {"augmented": {"hits": 40, "misses": 35}}}
        self.assertEqual(stats.view_hits(st0, st1), {"hits": 30, "misses": 30, "hit_rate": 0.5})
        self.assertIsNone(stats.view_hits(st0, st0)["hit_rate"])
        jobs = [{"hits": {"augmented": 5, "decoded": 3, "encoded": 2}, "misses": 10},
                {"hits": {"augmented": 0}, "misses": 0}]
        self.assertEqual(stats.job_hits(jobs), {"hits": 10, "misses": 10, "hit_rate": 0.5})
        known = stats.merge_job_stats({}, {"jobs": {"active": [{"name": "job0", "misses": 1},
                                                               {"name": "job1", "misses": 2}]}})
        # job0 retired: its last figures stay; job1 updated
        stats.merge_job_stats(known, {"jobs": {"active": [{"name": "job1", "misses": 7}]}})
        self.assertEqual({k: v["misses"] for k, v in known.items()}, {"job0": 1, "job1": 7})
        self.assertEqual(stats.merge_job_stats(known, None), known)

    def test_run_record(self):
        jobs = [fake_job(10.0, 50.0), fake_job(11.0, 61.0, cpu=12.0)]
        r = stats.jobs_run_record("torchvision", jobs, {"source_bytes_read": 100},
                                  {"source_bytes_read": 1100}, 3.0, None, 1000)
        self.assertEqual(r["makespan_s"], 51.0)
        self.assertEqual((r["samples"], r["loader_cpu_s"], r["cpu_s"]), (400, 22.0, 25.0))
        self.assertEqual(r["source_bytes_read"], 1000)
        self.assertEqual(r["source_read_share"], 1.0)
        self.assertEqual(r["hit_rate"], 0.0)  # no cache by construction
        self.assertAlmostEqual(r["samples_per_s"], 400 / 51.0)
        self.assertEqual([j["wall_s"] for j in r["jobs"]], [40.0, 50.0])
        st0 = {"views": {"augmented": {"hits": 0, "misses": 0}}}
        st1 = {"views": {"augmented": {"hits": 100, "misses": 300}}}
        self.assertEqual(stats.jobs_run_record("prepfs", jobs, st0, st1, 1.0)["hit_rate"], 0.25)
        js = {"job0": {"name": "job0", "hits": {"augmented": 150, "decoded": 50}, "misses": 0,
                       "state_bytes": 8}}
        r = stats.jobs_run_record("prepfs-ods", jobs, st0, st1, 1.0, js)
        self.assertEqual(r["hit_rate"], 1.0)  # from the jobs, not the top-level view
        self.assertNotIn("state_bytes", r["job_stats"][0])

    def test_summary_and_reduction(self):
        jr = fake_jobs_report()
        a = stats.find_variant(jr, "4a")["summary"]
        self.assertEqual(a["makespan_s"]["median"], 100.0)  # first start to last end
        self.assertEqual((a["makespan_s"]["min"], a["makespan_s"]["max"]), (90.0, 110.0))
        self.assertEqual(a["job_wall_s"], [100.0, 94.5, 98.0])
        self.assertEqual(len(a["job_wall_s"]), 3)
        self.assertEqual(a["source_read_share"], 1.0)
        self.assertAlmostEqual(stats.makespan_reduction(jr, "4c"), 0.5)
        self.assertAlmostEqual(stats.makespan_reduction(jr, "4b"), 0.3)
        self.assertAlmostEqual(stats.find_variant(jr, "4c")["summary"]["hit_rate"], 0.6)
        self.assertAlmostEqual(stats.find_variant(jr, "4b")["summary"]["hit_rate"], 0.3)
        self.assertIsNone(stats.makespan_reduction(jr, "4x"))
        self.assertIsNone(stats.makespan_reduction({"variants": []}, "4c"))

    def test_rows_and_table(self):
        jr = fake_jobs_report()
        rows = {r[0]: r for r in reporting.jobs_rows(jr)}
        self.assertEqual(sorted(rows), ["4a", "4b", "4c"])
        self.assertTrue(all(len(r) == len(reporting.TABLE_HEADER) for r in rows.values()))
        self.assertEqual(rows["4a"][-1], "0% (no cache)")
        self.assertEqual(rows["4c"][-1], "60%")
        self.assertEqual(rows["4a"][8], "1.00x")
        self.assertEqual(rows["4c"][8], "2.00x")  # all samples over the makespan, vs 4a's
        self.assertIn("3 x torchvision", rows["4a"][2])
        self.assertIn("10MB/s", rows["4b"][3])
        tab = {r[0]: r for r in reporting.jobs_table(jr)}
        self.assertTrue(all(len(r) == len(reporting.JOBS_HEADER) for r in tab.values()))
        self.assertEqual(tab["4c"][2], "50.0")
        self.assertEqual(tab["4c"][4], "50.0, 44.5, 48.0")
        self.assertEqual(tab["4c"][-1], "-50%")
        self.assertEqual(tab["4a"][-1], "-")
        self.assertIn("6.0x the set", tab["4a"][6])
        failed = {"settings": {}, "variants": [{"id": "4b", "key": "prepfs", "label": "x",
                                                "reads": "y", "error": "boom\nmore"}]}
        self.assertEqual(reporting.jobs_rows(failed)[0][4], "failed: boom")
        self.assertEqual(reporting.jobs_table(failed)[0][2], "failed: boom")

    def test_targets(self):
        t = {x["target"]: x for x in stats.jobs_targets(fake_jobs_report())}
        red = next(v for k, v in t.items() if "makespan" in k)
        hit = next(v for k, v in t.items() if "hit rate" in k)
        self.assertTrue(red["met"])  # 50% less >= 45%
        self.assertEqual(red["shown"], "50% less")
        self.assertEqual(red["cases"], "4c / 4a")
        self.assertTrue(hit["met"])  # 60% >= 54%
        self.assertIn("25% of the set cached here (Seneca's figure: 20%)", hit["note"])
        t = stats.jobs_targets(fake_jobs_report({"4a": [100.0], "4c": [80.0]}, hit_c=0.2))
        # 4c's two targets missed; 4d's not measured in this report.
        self.assertEqual([x["met"] for x in t], [False, False, None, None])
        self.assertEqual(t[0]["shown"], "20% less")
        t = stats.jobs_targets(fake_jobs_report({"4a": [100.0], "4c": [130.0]}))
        self.assertEqual(t[0]["shown"], "30% more")
        t = stats.jobs_targets(None)
        self.assertEqual([(x["ratio"], x["met"], x["shown"]) for x in t],
                         [(None, None, "-")] * len(stats.JOB_TARGETS))
        all_t = stats.targets(fake_results(), jobs=fake_jobs_report())
        self.assertEqual(len(all_t), len(stats.TARGETS) + len(stats.JOB_TARGETS))

    def test_checks(self):
        jr = fake_jobs_report()
        checks = reporting.jobs_checks(jr)
        self.assertTrue(any("every epoch of every job read the storage" in c for c in checks))
        self.assertTrue(any("200 samples served to every job" in c for c in checks))
        for r in stats.find_variant(jr, "4a")["runs"]:
            r["source_read_share"] = 0.5
        self.assertTrue(any("served from the page cache" in c for c in reporting.jobs_checks(jr)))

    def test_markdown_and_chart(self):
        d = mkdtemp()
        report = {
            "command": "python bench/run_bench.py --data d", "date": "2026-01-01",
            "quick": False, "page_cache_drop": "yes", "json_path": os.path.join(d, "x.json"),
            "machine": {"cpu_model": "Test CPU", "nproc": 2, "mem_gib": 24.0, "kernel": "6.1",
                        "loadavg_before": [0.1, 0.1, 0.1]},
            "settings": {"cpus": [0, 1], "data_samples": 10, "data_classes": 2, "data_mb": 1.2,
                         "data_mean_kb": 120.0, "reps": 3, "samples_desc": "10 samples",
                         "workers": 2, "prepfs": {"desc": "mounted", "kind": "driver-mount",
                                                  "cache_on": True}},
            "cases": fake_results() + [fake_case("2pc", "warm25", "torchvision-ppm", [300]),
                                       fake_case("2pd", "warm25", "raw", [900])],
            "jobs": fake_jobs_report(),
        }
        report["targets"] = stats.targets(report["cases"], True, report["jobs"])
        md = reporting.render_markdown(report, [os.path.join(d, "x-jobs.png")], d)
        self.assertIn("## Scenario 4: concurrent jobs", md)
        self.assertIn("| 4c | 4 concurrent jobs |", md)
        self.assertIn("| 2pc | 2p warm, 25% cache |", md)
        self.assertNotIn("pending", md)  # 2p and 4 ran
        self.assertIn("| jobs: ODS makespan >= 45% below torchvision's (Seneca: 45% less than "
                      "PyTorch) | 4c / 4a | 50% less | met |", md)
        self.assertIn("![x-jobs.png](x-jobs.png)", md)
        self.assertIn("the mount chose encoded-decoded-augmented 10-20-70", md)
        self.assertIn("(278 samples/s of the mean 36 KB JPEG)", md)
        results = md.split("## Results")[1].split("##")[0]
        widths = {ln.count(" | ") for ln in results.splitlines()
                  if ln.startswith("| ") and ln.split(" | ")[0][2:] in ("1a", "4a", "2pc")}
        self.assertEqual(widths, {len(reporting.TABLE_HEADER) - 1})
        section = md.split("## Scenario 4")[1].split("## How")[0]
        widths = {ln.count(" | ") for ln in section.splitlines() if ln.startswith("| 4")}
        self.assertEqual(widths, {len(reporting.JOBS_HEADER) - 1})
        # only 4 ran: 2p still pending, with the reason given
        report["cases"] = fake_results()
        report["settings"]["pending_why"] = "not run (--only)"
        md = reporting.render_markdown(report, [], d)
        self.assertIn("| 2p | 2 warm, 25% cache | prepfs with a cache of 25% of the set | "
                      "prepfs augmented/ | pending: not run (--only) |", md)
        self.assertNotIn("| 4 | 4 concurrent jobs |", md)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return
        paths = charts.write_jobs_chart(report, os.path.join(d, "x"))
        self.assertEqual([os.path.basename(p) for p in paths], ["x-jobs.png"])
        with open(paths[0], "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(charts.write_jobs_chart({"jobs": None}, os.path.join(d, "y")), [])

    def test_pending_rows_done(self):
        self.assertEqual([r[0] for r in reporting.pending_rows(True, ["2pc", "2pd"])], ["4"])
        self.assertEqual([r[0] for r in reporting.pending_rows(True, ["4a"])], ["2p"])
        self.assertEqual(reporting.pending_rows(True, ["2pc", "4c"]), [])

    def test_plan_2p(self):
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

    def test_subset_tree(self):
        d, out = mkdtemp(), mkdtemp()
        make_tree(d, classes=3, per_class=5)
        self.assertEqual(scenario4.make_subset_tree(d, os.path.join(out, "t"), 2), 6)
        classes, samples = loaders.list_image_folder(os.path.join(out, "t"))
        self.assertEqual((len(classes), len(samples)), (3, 6))
        self.assertEqual(scenario4.make_subset_tree(d, os.path.join(out, "u"), 100), 15)


class UncachedReadTest(unittest.TestCase):
    def test_read_uncached(self):
        d = mkdtemp()
        p = os.path.join(d, "f.bin")
        data = bytes(range(256)) * 5000 + b"tail"
        with open(p, "wb") as f:
            f.write(data)
        self.assertEqual(loaders.read_uncached(p, "fadvise"), data)
        self.assertEqual(loaders.read_uncached(p, "none"), data)
        try:
            self.assertEqual(loaders.read_uncached(p, "direct"), data)
        except OSError:
            pass  # O_DIRECT is not supported by every file system (tmpfs)
        self.assertEqual(set(loaders.UNCACHED_MODES), {"fadvise", "direct", "none"})


class FakeSource:
    """Stands in for a PrepfsSource with a cache whose refill is done at the second poll."""

    kind = "driver-mount"
    pid = None
    can_empty_cache = False

    def __init__(self):
        self.polls = 0

    def stats(self):
        self.polls += 1
        return {"samples": 6, "cache": {"memory": 100, "augmented": {
            "entries": 6 if self.polls >= 2 else 1, "hits": 0, "misses": 0}}}


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


class JobsVariantTest(unittest.TestCase):
    """run_jobs_variant drives real job processes (the raw reader) against a fake prepfs."""

    def test_variant(self):
        d, tools = mkdtemp(), mkdtemp()
        make_tree(d, junk=False)
        binary = os.path.join(tools, "prepfs")
        with open(binary, "w") as f:
            f.write(FAKE_PREPFS.format(python=sys.executable))
        os.chmod(binary, os.stat(binary).st_mode | stat.S_IXUSR)
        mnt = os.path.join(tools, "mnt")
        mounts = []

        def mounter():
            m = mount.mount_prepfs(binary, "cfg.yaml", d, mnt, timeout=10)
            mounts.append(m.pid)
            return m
        mounter.mountpoint = mnt

        class Args:
            python = sys.executable
            workers = 1
            jobs_timeout = 60
            verbose = False

        settings = {"jobs": 2, "reps": 2, "epochs": 1, "data_bytes": 6000, "uncached": "none"}
        v = scenario4.run_jobs_variant("4b", "prepfs", "raw", "raw", "files", args=Args,
                                       cpus=sorted(os.sched_getaffinity(0))[:1], mounter=mounter,
                                       data_for=lambda m, i: d, settings=settings)
        self.assertIsNone(v["error"], v.get("stderr_tail"))
        self.assertEqual(len(v["runs"]), 2)
        self.assertEqual(len(set(mounts)), 2)  # a fresh mount for every run
        self.assertEqual([r["samples"] for r in v["runs"]], [12, 12])
        self.assertFalse(mount.is_mounted(mnt))
        self.assertIn("fake", reporting.jobs_progress_line(v) + "fake")
        bad = scenario4.run_jobs_variant("4b", "prepfs", "raw", "raw", "files", args=Args,
                                         cpus=sorted(os.sched_getaffinity(0))[:1], mounter=mounter,
                                         data_for=lambda m, i: "/nonexistent", settings=settings)
        self.assertIn("failed in run 0", bad["error"])
        self.assertIn("FAILED", reporting.jobs_progress_line(bad))



FAKE_FLOORFS = textwrap.dedent("""\
    #!{python}
    # a stand-in for `floorfs MNT --files N --size B --threads T [--passthrough]`: no FUSE, it
    # writes N files of B bytes into MNT, says what floorfs says on stderr, and at SIGTERM
    # removes them and prints its counts, as floorfs does at unmount.
    import json, os, signal, sys, time
    a = sys.argv[1:]
    mnt, files, size, threads = a[0], int(a[2]), int(a[4]), int(a[6])
    assert a[1::2][:3] == ["--files", "--size", "--threads"], a
    mode = "passthrough" if "--passthrough" in a else "plain"
    env = os.environ.get
    if env("FAKE_FLOORFS_FAIL"):
        print("floorfs: cannot mount at " + mnt + ": Permission denied", file=sys.stderr)
        sys.exit(1)
    if env("FAKE_FLOORFS_HANG"):
        time.sleep(3600)
    for i in range(files):
        with open(os.path.join(mnt, "%05d.ppm" % i), "wb") as f:
            f.write(b"x" * (size - int(env("FAKE_FLOORFS_SHORT") or 0)))
    print("floorfs: %d files of %d bytes at %s (%s, %d threads)" % (files, size, mnt, mode,
          threads), file=sys.stderr, flush=True)
    if mode == "passthrough" and env("FAKE_FLOORFS_REFUSE"):
        print("floorfs: the kernel refused the backing file (FUSE_DEV_IOC_BACKING_OPEN: "
              "Operation not permitted (os error 1), errno 1): serving plainly",
              file=sys.stderr, flush=True)
    def bye(*_):
        for n in os.listdir(mnt):
            os.remove(os.path.join(mnt, n))
        print("floorfs: SIGTERM: unmounting", file=sys.stderr)
        print(json.dumps({{"lookup": files, "getattr": 1, "open": 2 * files, "read": 0,
                          "read_bytes": 0, "flush": 1, "release": 2 * files,
                          "ioctl": 2 * files, "opendir": 1, "readdir": 2, "forget": 0,
                          "backing_open": 0, "backing_close": 0, "open_errors": 0,
                          "plain_fallback": 0}}), file=sys.stderr)
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    while True:
        time.sleep(1)
""")
FLOORFS_RS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "prepfs",
                          "examples", "floorfs.rs")
REAL_FLOORFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target",
                            "release", "examples", "floorfs")


class FloorTest(unittest.TestCase):
    """Rows 3h/3i, issue 12's FUSE floor: the plan, what floorfs must serve, its mount hook
    (against a fake floorfs script, and against the real one where FUSE and the build are
    there), the refusal of passthrough, the figures and the report."""

    def setUp(self):
        self.dir = mkdtemp()
        self.bin = os.path.join(self.dir, "floorfs")
        with open(self.bin, "w") as f:
            f.write(FAKE_FLOORFS.format(python=sys.executable))
        os.chmod(self.bin, 0o755)
        for k in ("FAIL", "HANG", "SHORT", "REFUSE"):
            os.environ.pop("FAKE_FLOORFS_" + k, None)

    tearDown = setUp

    def test_plan(self):
        cases = plan.plan("/d", "/m/augmented", "prepfs augmented/", "/dev/shm/f", True, True,
                          fuse_floor="/tmp/b-floor")
        self.assertEqual([c.id for c in cases][-6:], ["3d", "3f", "3h", "3i", "3j", "3k"])
        h, i, j, k = cases[-4:]
        self.assertEqual((h.data, i.data), ("/tmp/b-floor-plain", "/tmp/b-floor-passthrough"))
        self.assertEqual((h.floorfs, i.floorfs), ("plain", "passthrough"))
        self.assertEqual((j.floorfs, k.floorfs), ("plain-distinct", "passthrough-distinct"))
        self.assertEqual([plan.floor_flags(c.floorfs) for c in (h, i, j, k)],
                         [[], ["--passthrough"], ["--distinct"], ["--passthrough", "--distinct"]])
        d = cases[-6]
        # read as 3d is: the same loader, one warm-up pass, no cold remount; not prepfs's daemon
        for c in (h, i, j, k):
            self.assertEqual((c.loader, c.warmup, c.cold, c.scenario, c.prepfs),
                             (d.loader, d.warmup, d.cold, d.scenario, False))
        self.assertEqual(h.chart_reads, "floor (trivial fuser, plain)")
        self.assertEqual(i.chart_reads, "floor (passthrough)")
        self.assertNotIn("3h", [c.id for c in plan.plan("/d", "/m/augmented", "x", "/f", True)])

    def test_spec_is_what_3d_reads(self):
        d = mkdtemp()
        make_tree(d, classes=3, per_class=4, size=1000, junk=False)  # sizes 1000..1003
        with open(os.path.join(d, "class0", "img0.JPEG"), "wb") as f:
            f.write(b"y" * 1002)  # now 1002 is the most common size (2 files)
        for limit in (None, 5):
            spec = floor.floor_spec(d, limit)
            picked = loaders.pick(loaders.list_files(d), limit)
            self.assertEqual(spec["files"], len(picked))
            sizes = [os.stat(p).st_size for p in picked]
            self.assertEqual(spec["size"], max(set(sizes), key=sizes.count))
            self.assertEqual(sum(spec["sizes_seen"].values()), len(picked))
        with self.assertRaises(floor.FloorError):
            floor.floor_spec(mkdtemp(), None)

    def test_fuse_threads_of_a_config(self):
        here = min(max(len(os.sched_getaffinity(0)), 2), 16)
        self.assertEqual(floor.prepfs_fuse_threads(None), here)
        self.assertEqual(floor.prepfs_fuse_threads("seed: 0\nfuse_threads: 6  # more\n"), 6)
        self.assertEqual(floor.prepfs_fuse_threads("fuse_threads: 0\n"), here)
        self.assertEqual(floor.prepfs_fuse_threads("jobs:\n  fuse_threads: 9\n"), here)
        self.assertEqual([floor.default_fuse_threads(n) for n in (1, 2, 8, 64)], [2, 2, 8, 16])
        config_rs = os.path.join(os.path.dirname(FLOORFS_RS), "..", "..", "prepfs-core", "src", "config",
                                 "mod.rs")
        with open(config_rs) as f:
            self.assertIn("if raw.fuse_threads == 0 { %s }" % floor.PREPFS_FUSE_THREADS_RULE,
                          f.read())

    def test_floorfs_says_what_the_harness_reads(self):
        """Every line floorfs prints when it serves plainly in spite of --passthrough carries
        the mark the harness looks for, and its counts have the keys the harness sums."""
        with open(FLOORFS_RS) as f:
            src = f.read()
        plainly = [ln for ln in src.splitlines() if "serving plainly" in ln]
        self.assertGreaterEqual(len(plainly), 3)  # no offer, backing refused, no memfd
        self.assertTrue(all(floor.REFUSAL_MARK in ln for ln in plainly))
        for key in ("lookup", "open", "read", "release", "ioctl", "backing_open"):
            self.assertIn(f'\\"{key}\\":{{}}', src)
        self.assertIsNone(floor.passthrough_refusal("floorfs: 8 files of 9 bytes at /m "
                                                    "(passthrough, 4 threads)\n"))
        c = floor.floorfs_counters('floorfs: x\n{"lookup":8,"open":16,"read":32,"release":16,'
                                   '"ioctl":16,"backing_open":3}\n')
        self.assertEqual(c["open"], 16)
        self.assertEqual(floor.requests_per_open(c), (8 + 16 + 32 + 16 + 16) / 16)
        self.assertIsNone(floor.requests_per_open(None))

    def test_mount_probe_close(self):
        mnt = os.path.join(self.dir, "m-floor-plain")
        cpu = sorted(os.sched_getaffinity(0))[:1]
        fm = floor.mount_floorfs(self.bin, mnt, 5, 300, cpus=cpu, timeout=10)
        try:
            self.assertEqual(fm.probe, {"files": 5, "first_read": 300})
            self.assertEqual(sorted(os.sched_getaffinity(fm.pid)), cpu)  # pinned
            self.assertIsNone(fm.refusal())
        finally:
            fm.close()
        self.assertIsNotNone(fm.proc.poll())
        self.assertFalse(os.path.exists(mnt))  # released and removed
        self.assertEqual(floor.floorfs_counters(fm.log_text)["open"], 10)
        self.assertFalse(os.path.exists(fm.log_path))  # its own temporary log

    def test_mount_failures_leave_nothing_running(self):
        mnt = os.path.join(self.dir, "m")
        for env, want, timeout in (("FAIL", "exited with status 1", 10),
                                   ("HANG", "did not mount within", 0.5),
                                   ("SHORT", "reads 290 bytes (want 300)", 10)):
            os.environ["FAKE_FLOORFS_" + env] = "10"
            before = set(os.listdir("/proc"))
            t = time.monotonic()
            with self.assertRaises(floor.FloorError) as e:
                floor.mount_floorfs(self.bin, mnt, 5, 300, timeout=timeout)
            os.environ.pop("FAKE_FLOORFS_" + env)
            self.assertIn(want, str(e.exception))
            self.assertLess(time.monotonic() - t, 15)
            for pid in set(os.listdir("/proc")) - before:  # no fake floorfs left running
                with contextlib.suppress(OSError):
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        self.assertNotIn(self.bin.encode(), f.read())
            self.assertFalse(os.path.exists(mnt))
        with self.assertRaises(floor.FloorError):
            floor.mount_floorfs(os.path.join(self.dir, "nope"), mnt, 1, 1)

    def floor_setting(self, files=6, size=700):
        return {"binary": self.bin, "threads": 3, "why": None,
                "spec": {"files": files, "size": size}}

    def test_floor_rows_read_as_3d(self):
        """run_floor_case mounts, reads with the raw reader of 3d (one pass per run, the
        daemon's CPU counted), unmounts, and keeps floorfs's counts."""
        args = case_args(2)
        args.verbose, args.limit = False, 6
        cpus = sorted(os.sched_getaffinity(0))[:2]
        base = os.path.join(self.dir, "b-floor")
        cases = {c.id: c for c in plan.plan("/d", "/m/augmented", "x", None, True, True,
                                            fuse_floor=base)}
        rec = cli.run_floor_case(cases["3h"], args, cpus, self.floor_setting())
        self.assertIsNone(rec["error"], rec.get("stderr_tail"))
        self.assertEqual((len(rec["runs"]), len(rec["warmup_runs"])), (2, 1))
        for r in rec["runs"]:
            self.assertEqual((r["samples"], r["bytes"]), (6, 6 * 700))  # one pass, same size
            self.assertIn("fs_cpu_s", r)  # floorfs's CPU is the row's daemon's
        self.assertLess(rec["runs"][0]["wall_s"], 1.0)  # no --min-seconds, as 3d
        self.assertEqual(rec["floor"]["counters"]["open"], 12)
        self.assertEqual((rec["floor"]["mode"], rec["floor"]["threads"]), ("plain", 3))
        self.assertFalse(os.path.exists(base + "-plain"))
        # passthrough refused: the row says so, is not measured, and is no failure
        os.environ["FAKE_FLOORFS_REFUSE"] = "1"
        rec_i = cli.run_floor_case(cases["3i"], args, cpus, self.floor_setting())
        self.assertIsNone(rec_i["error"])
        self.assertEqual(rec_i["runs"], [])
        self.assertIn("passthrough refused by the kernel", rec_i["skipped"])
        self.assertIn("Operation not permitted", rec_i["floor"]["refused"])
        self.assertIn("passthrough refused", reporting.progress_line(rec_i))
        self.assertFalse(os.path.exists(base + "-passthrough"))
        # a floorfs that cannot mount: the row's error
        os.environ["FAKE_FLOORFS_FAIL"] = "1"
        rec_f = cli.run_floor_case(cases["3h"], args, cpus, self.floor_setting())
        self.assertIn("Permission denied", rec_f["error"])

    def floor_report(self):
        h = fake_case("3h", "floor", "raw", [2500, 2400, 2600])
        for r in h["runs"]:
            r["bytes"] = r["samples"] * 150543
        h.update(chart_reads="floor (trivial fuser, plain)", floorfs="plain",
                 floor={"mode": "plain", "files": 100, "size": 150543, "threads": 4,
                        "requests_per_open": 5.0})
        i = {"id": "3i", "scenario": "floor", "loader": "raw", "label": "raw reader",
             "reads": "floor (passthrough): ...", "chart_reads": "floor (passthrough)",
             "floorfs": "passthrough", "runs": [], "warmup_runs": [], "error": None,
             "skipped": "passthrough refused by the kernel, not measured (floorfs: x)"}
        return fake_results(quick=True) + [h, i]

    def test_figures_and_report(self):
        cases = self.floor_report()
        ff = stats.fuse_floor(cases)
        self.assertEqual(ff["prepfs_case"], "3d")
        self.assertEqual(ff["prepfs_samples_per_s"], 4000)
        h, i = ff["rows"]
        self.assertAlmostEqual(h["prepfs_ratio"], 4000 / 2500)
        self.assertEqual((h["size"], h["requests_per_open"]), (150543, 5.0))
        self.assertIsNone(i["prepfs_ratio"])
        self.assertIn("passthrough refused", i["not_measured"])
        # without 3d, 2d stands in; without floor rows there is nothing
        no3d = [c for c in cases if c["id"] != "3d"] + [fake_case("2d", "warm", "raw", [3000])]
        self.assertEqual(stats.fuse_floor(no3d)["prepfs_case"], "2d")
        self.assertIsNone(stats.fuse_floor(fake_results()))
        t = [t for t in stats.targets(cases, True) if "trivial fuser" in t["target"]][0]
        self.assertEqual((t["cases"], t["met"]), ("3d / 3h", True))
        self.assertAlmostEqual(t["ratio"], 1.6)
        d = mkdtemp()
        report = {"schema": 1, "date": "x", "command": "c", "quick": True, "machine": {
            "nproc": 2, "cpu_model": "cpu", "mem_gib": 4, "kernel": "k",
            "loadavg_before": [0.1, 0, 0]}, "page_cache_drop": "yes",
            "settings": {"data_samples": 100, "data_classes": 2, "data_mb": 3.0,
                         "data_mean_kb": 30, "reps": 3, "samples_desc": "100 samples",
                         "workers": 2, "cpus": [0, 1],
                         "prepfs": {"kind": "driver-mount", "desc": "d", "cache_on": True},
                         "fuse_floor": {"threads": 4, "why": None, "spec": {
                             "files": 100, "size": 150543, "size_from": "stat"}}},
            "cases": cases}
        out = os.path.join(d, "r.json")
        with contextlib.redirect_stdout(io.StringIO()) as said:
            reporting.write_report(report, out, d, os.path.join(d, "B.md"))
        self.assertIn("[bench] FUSE floor: prepfs warm (3d) 4,000 files/s = 1.60x of floor "
                      "(trivial fuser, plain) (2,500 files/s), floor (passthrough): "
                      "passthrough refused", said.getvalue())
        with open(out) as f:
            self.assertEqual(json.load(f)["fuse_floor"]["rows"][0]["prepfs_ratio"], 1.6)
        with open(os.path.join(d, "B.md")) as f:
            md = f.read()
        section = md.split("## FUSE floor (issue 12)")[1].split("\n## ")[0]
        self.assertIn("| 3h | floor (trivial fuser, plain) | 2,500 | 2,400 - 2,600 | "
                      "100 x 150,543 | 150,543 | 5.0 | 1.60x |", section)
        self.assertIn("| 3i | floor (passthrough) | passthrough refused", section)
        self.assertIn("1.60x of floor (trivial fuser, plain)", section)
        results = md.split("## Results")[1].split("##")[0]
        widths = {ln.count(" | ") for ln in results.splitlines()
                  if ln.startswith("| 3")}
        self.assertEqual(widths, {len(reporting.TABLE_HEADER) - 1})
        self.assertIn("| 3i | 3 floor | raw reader | floor (passthrough): ... | passthrough "
                      "refused", results)
        # not run: a pending row says why
        report["cases"] = fake_results(quick=True)
        report["settings"]["fuse_floor"]["why"] = "no --floorfs-bin"
        report["targets"] = stats.targets(report["cases"], True)
        report["fuse_floor"] = stats.fuse_floor(report["cases"])
        md = reporting.render_markdown(report, [], d)
        self.assertIn("| 3h-3k | 3 floor | raw reader (whole files) | floor (trivial fuser, "
                      "plain / passthrough) | pending: no --floorfs-bin |", md)
        self.assertNotIn("## FUSE floor", md)

    @unittest.skipUnless(os.path.exists(REAL_FLOORFS) and os.path.exists("/dev/fuse")
                         and os.geteuid() == 0 and shutil.which("fusermount3"),
                         "needs target/release/examples/floorfs, /dev/fuse and root")
    def test_real_floorfs(self):
        """The real floorfs, plain and with passthrough, read by the raw reader: each file
        reads its size, FUSE sees the opens; nothing stays mounted."""
        args = case_args(1)
        args.verbose, args.limit = False, None
        cpus = sorted(os.sched_getaffinity(0))[:2]
        base = os.path.join(self.dir, "real-floor")
        cases = {c.id: c for c in plan.plan("/d", "/m/augmented", "x", None, True, True,
                                            fuse_floor=base)}
        setting = dict(self.floor_setting(files=8, size=150543), binary=REAL_FLOORFS)
        for cid in ("3h", "3i", "3j", "3k"):
            rec = cli.run_floor_case(cases[cid], args, cpus, setting)
            self.assertFalse(mount.is_mounted(cases[cid].data))
            self.assertIsNone(rec["error"], rec.get("stderr_tail"))
            c = rec["floor"]["counters"]
            self.assertGreaterEqual(c["open"], 8 * 2 + 1)  # warm-up, run, the probe
            if rec.get("skipped"):  # passthrough refused here: said, and nothing read
                self.assertIn(cid, ("3i", "3k"))
                continue
            self.assertEqual(rec["runs"][0]["bytes"], 8 * 150543)
            if cid in ("3h", "3j"):
                self.assertGreaterEqual(c["read"], c["open"])  # every read a FUSE READ
            else:
                self.assertEqual(c["read"], 0)  # passthrough: no READ reaches the daemon
                self.assertGreaterEqual(c["backing_open"], 1)

    @unittest.skipUnless(os.path.exists(REAL_FLOORFS) and os.path.exists("/dev/fuse")
                         and os.geteuid() == 0 and shutil.which("fusermount3"),
                         "needs target/release/examples/floorfs, /dev/fuse and root")
    def test_distinct_floor_files_each_have_their_own_content(self):
        """3j/3k's floorfs serves each file its own bytes (3h/3i's, one buffer for all), plain
        and with passthrough, every file as long as asked."""
        for mode in ("plain", "plain-distinct", "passthrough", "passthrough-distinct"):
            with floor.mount_floorfs(REAL_FLOORFS, os.path.join(self.dir, "m-" + mode), 4,
                                     150543, mode=mode, threads=2) as fm:
                names = sorted(os.listdir(fm.mountpoint))
                contents = []
                for n in names:
                    with open(os.path.join(fm.mountpoint, n), "rb") as f:
                        contents.append(f.read())
                self.assertEqual([len(c) for c in contents], [150543] * 4)
                self.assertEqual(len(set(contents)), 4 if mode.endswith("-distinct") else 1, mode)
                self.assertTrue(all(c.startswith(b"P6\n") for c in contents))
            self.assertFalse(mount.is_mounted(fm.mountpoint))



if __name__ == "__main__":
    result = unittest.TextTestRunner(verbosity=1).run(
        unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__]))
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    sys.exit(1 if failed else 0)
