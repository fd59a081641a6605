"""prepfs_bench.workers's parts that need no mount, no worker and no build: the percentiles, the
summaries and ratios against the target, the model's prediction and the fit of its receive cost,
the kill test's checks, the report's tables (from canned numbers), and the reader process over a
tiny tree of plain files."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

from prepfs_bench import BENCH_DIR, module_command, runs, workers as W


def run(case, rate, round_no=0, done=None, files=600, **remote):
    """A canned run record as run_case writes it."""
    rem = {"placement": "local" if case in ("a", "e_alone") else "auto", "asking": bool(done), "why": "readers miss"
           if done else "no deficit", "done": done, "late": remote.get("late", 0), "dropped": 0, "lost": 0,
           "queue_ms": {"p50": remote.get("p50", 2.0), "p99": remote.get("p99", 9.0)},
           "bytes_per_remote_sample": 150_600.0 if done else None}
    return {"case": case, "round": round_no, "rate": rate, "files": files, "files_read": files, "bytes": files * 150_543,
            "seconds": files / rate,
            "cpu_s": remote.get("cpu", {"mount": 1.0, "readers": 0.4, "workers": 0.0, "redis": 0.1}),
            "remote": rem, "placement_seen": ["asking (readers miss)"] if done else []}


C_CPU = {"mount": 1.0, "readers": 0.4, "workers": 0.5, "redis": 0.4}  # over 1.46 s: core 0 0.96 busy, core 1 0.61
CANNED = ([run("a", r, i) for i, r in enumerate((250.0, 260.0, 240.0))]
          + [run("b", r, i) for i, r in enumerate((255.0, 245.0, 250.0))]
          + [run("c", r, i, done=280, cpu=C_CPU) for i, r in enumerate((420.0, 400.0, 410.0))]
          + [run("d", r, i, done=300) for i, r in enumerate((415.0, 430.0, 405.0))]
          + [run("e_alone", r, i, files=1200) for i, r in enumerate((300.0, 310.0, 290.0))]
          + [run("e_worker", r, i, done=500, files=1200) for i, r in enumerate((450.0, 470.0, 460.0))])


class MathTest(unittest.TestCase):
    def test_percentiles_interpolate_between_the_closest_ranks_as_numpy_does(self):
        self.assertEqual(W.percentile([4, 1, 3, 2], 50), 2.5)
        self.assertAlmostEqual(W.percentile([10, 20, 30, 40, 50], 90), 46.0)
        self.assertAlmostEqual(W.percentile(list(range(1, 101)), 99), 99.01)
        self.assertEqual(W.percentile([7], 99), 7)
        self.assertIsNone(W.percentile([None], 50))

    def test_a_case_is_its_median_its_range_and_its_spread_over_the_median(self):
        s = W.summarize([100.0, 120.0, 110.0])
        self.assertEqual((s["median"], s["min"], s["max"], s["n"]), (110.0, 100.0, 120.0, 3))
        self.assertAlmostEqual(s["spread_pct"], 20 / 110 * 100)
        self.assertEqual(W.summarize([])["n"], 0)

    def test_a_ratio_is_of_the_medians_and_its_range_what_the_runs_allow(self):
        r = W.ratio(W.summarize([400, 410, 420]), W.summarize([240, 250, 260]))
        self.assertAlmostEqual(r["median"], 410 / 250)
        self.assertAlmostEqual(r["low"], 400 / 260)
        self.assertAlmostEqual(r["high"], 420 / 240)
        self.assertIsNone(W.ratio(None, W.summarize([1])))

    def test_the_prediction_adds_what_the_workers_send_to_what_the_mounts_core_has_left(self):
        # 4 ms a sample made at home, 5 ms on the worker's core, 1 ms to take one in: the worker
        # sends 200/s, which leaves 0.8 of the core: 200 more made at home.
        p = W.predict(0.004, 0.005, 0.001, workers=1)
        self.assertAlmostEqual(p["rate"], 400.0)
        self.assertEqual((p["remote_rate"], p["bound"]), (200.0, "workers"))
        # Two workers on one core have that core's capacity, not twice it.
        self.assertAlmostEqual(W.predict(0.004, 0.005, 0.001, workers=2, worker_cores=1)["rate"], 400.0)
        self.assertAlmostEqual(W.predict(0.004, 0.005, 0.001, workers=2, worker_cores=2)["rate"], 400 + 150)
        # A link of 100 outputs/s bounds what comes from afar.
        p = W.predict(0.004, 0.005, 0.001, workers=1, link=150_543 * 100, output_bytes=150_543)
        self.assertAlmostEqual(p["rate"], 100 + 0.9 / 0.004)
        self.assertEqual(p["bound"], "link")
        # Receiving dearer than the workers' rate allows: every sample from afar, at 1/recv.
        p = W.predict(0.004, 0.001, 0.002, workers=1)
        self.assertEqual((p["rate"], p["bound"]), (500.0, "receiving"))
        self.assertEqual(W.predict(0.004, 0.005, 0.001, workers=1, demand=300)["rate"], 300)
        self.assertAlmostEqual(W.predict(0.004, None, 0.001, workers=0)["rate"], 250.0)

    def test_the_receive_cost_is_what_core_0_spent_beyond_the_local_samples_per_received_one(self):
        self.assertAlmostEqual(W.fit_recv(3.0, 600, 200, 0.004), (3.0 - 400 * 0.004) / 200)
        self.assertIsNone(W.fit_recv(3.0, 600, 29, 0.004))  # under 5% of the files came from afar
        self.assertIsNone(W.fit_recv(3.0, 600, None, 0.004))
        self.assertEqual(W.fit_recv(1.0, 600, 300, 0.004), 0.0)  # never negative

    def test_the_error_is_signed_and_in_percent_of_the_measured(self):
        self.assertAlmostEqual(W.prediction_error(400, 380), 20 / 380 * 100)
        self.assertAlmostEqual(W.prediction_error(300, 400), -25.0)
        self.assertIsNone(W.prediction_error(None, 400))

    def test_the_listing_is_shuffled_with_a_fixed_seed_into_disjoint_halves_covering_it(self):
        paths = [f"c/{i}.ppm" for i in range(11)]
        a, b = W.halves(paths)
        self.assertEqual((a, b), tuple(W.halves(paths)))
        self.assertEqual(sorted(a + b), sorted(paths))
        self.assertEqual((len(a), len(b)), (6, 5))
        self.assertNotEqual(a + b, paths)


class ModelTest(unittest.TestCase):
    def test_the_costs_come_from_the_runs_and_the_prediction_from_them(self):
        core0 = lambda files, done: {"mount": files * 0.004 + done * 0.001 - 0.6, "readers": 0.6}
        canned = ([run("a", r, i, cpu={"mount": 1.8, "readers": 0.6, "workers": 0.0, "redis": 0.1})
                   for i, r in enumerate((250.0, 260.0, 240.0))]
                  + [run("c", r, i, done=280, cpu={**core0(320, 280), "workers": 1.0, "redis": 0.4})
                     for i, r in enumerate((420.0, 400.0, 410.0))]
                  + [run("d", r, i, done=300, cpu={**core0(300, 300), "workers": 1.1, "redis": 0.4})
                     for i, r in enumerate((415.0, 430.0, 405.0))])
        info = {"files": 600, "source_mb": 21.6, "decoded_bytes_per_sample": 562_500.0, "output_bytes": 150_543}
        m = W.model("/nonexistent/prepfs", canned, info)  # no binary: the formula
        self.assertAlmostEqual(m["t_local_ms"], 4.0)
        self.assertAlmostEqual(m["t_worker_ms"], 5.0)  # the worker's and Redis's core-1 seconds
        self.assertAlmostEqual(m["t_worker_only_ms"], 1000 / 280)
        self.assertAlmostEqual(m["recv_ms"], 1.0)
        self.assertEqual(m["recv_from"], "d")
        self.assertAlmostEqual(m["predicted_c"], 400.0)
        self.assertEqual(m["bound_c"], "workers")
        self.assertAlmostEqual(m["error_pct"], (400 - 410) / 410 * 100)
        self.assertAlmostEqual(m["predicted_a"], 250.0)
        self.assertAlmostEqual(m["predicted_d"], 400.0)  # two workers on one core: one core's worth
        self.assertIn("prepfs plan has no placement flags", m["source"])
        self.assertIsNone(W.model("/nonexistent/prepfs", canned[:3], info))  # no worker case

    def test_a_workers_items_are_its_own_count_and_the_served_ones_the_results_kept_in_time(self):
        r = run("c", 400.0, done=300, late=20)
        r["remote"]["dropped"] = 5
        self.assertEqual(W.served_remote(r), 275)
        self.assertEqual(W.made(r), 300)  # no metrics: the mount's count
        r["worker_metrics"] = {"w1": {'prepfs_worker_items_total{outcome="done"}': 290.0}, "w2": None,
                               "w3": {'prepfs_worker_items_total{outcome="done"}': 12.0}}
        self.assertEqual(W.made(r), 302)

    def test_prepfs_plans_parameters_are_the_set_and_one_core_making_at_the_measured_cost(self):
        y = W.plan_params_yaml({"files": 600, "source_mb": 21.6, "decoded_bytes_per_sample": 562_500.0,
                                "output_bytes": 150_543}, 0.004)
        for part in ("n_total: 600\n", "s_data: 36000\n", "s_decoded: 562500\n", "s_augmented: 150543\n",
                     "t_da: 250.000\n", "cores: 1\n", "b_nic: .inf\n", "b_storage: 1.0e12\n"):
            self.assertIn(part, y)


class KillTestChecksTest(unittest.TestCase):
    def test_outputs_are_distinct_unless_two_hashes_are_equal(self):
        self.assertEqual(W.distinct_outputs(["a", "b", "c"]), (3, {}))
        self.assertEqual(W.distinct_outputs(["a", "b", "a", "a"]), (2, {"a": 3}))

    def test_counters_show_each_file_served_once_and_each_result_counted_once(self):
        # 300 asked: 280 answered (20 of them late, for samples made here first), 15 given up,
        # 5 in flight; 40 dropped (results no stock took, and second results after a takeover).
        good = {"views": {"augmented": {"opens": 600, "hits": 450, "misses": 150}},
                "remote_work": {"queued": 300, "done": 280, "late": 20, "dropped": 40, "lost": 15, "outstanding": 5}}
        self.assertEqual(W.served_once(good, 600), [])
        bad = json.loads(json.dumps(good))
        bad["views"]["augmented"]["opens"] = 601
        bad["remote_work"]["done"] = 290
        problems = W.served_once(bad, 600)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("augmented/ opened 601 times for 600 files", problems[0])
        self.assertEqual("done + lost + outstanding = 310 != queued 300: an item ended twice", problems[2])
        self.assertEqual(W.item_bounds({"queued": 300, "done": 100, "dropped": 10, "lost": 0, "outstanding": 0}),
                         ["done + lost + outstanding = 100 != queued 300"])
        self.assertEqual(W.item_bounds({"queued": 1, "done": 1, "late": 2}), ["late 2 > done 1"])
        self.assertEqual(W.served_once({"views": good["views"]}, 600), ["stats.json has no remote_work"])

    def test_network_bytes_per_remote_sample_stand_beside_the_decoded_pixels(self):
        stats = {"remote_work": {"placement": "auto", "asking": True, "why": "readers miss", "done": 200,
                                 "bytes_received": 200 * 150_600, "queue_ms": {"p50": 1.5, "p99": 8.0},
                                 "workers": [{"name": "w1"}]}}
        f = W.remote_figures(stats, decoded_per_sample=562_500)
        self.assertEqual(f["bytes_per_remote_sample"], 150_600)
        self.assertAlmostEqual(f["pixels_over_outputs"], 562_500 / 150_600)
        self.assertNotIn("workers", f)
        self.assertIsNone(W.remote_figures({}, 562_500)["bytes_per_remote_sample"])

    def test_a_prometheus_exposition_is_read_by_series(self):
        text = ('# HELP prepfs_worker_items_total items\n# TYPE prepfs_worker_items_total counter\n'
                'prepfs_worker_items_total{outcome="done"} 42\nprepfs_worker_takeovers_total 1\n')
        self.assertEqual(W.parse_prometheus(text), {'prepfs_worker_items_total{outcome="done"}': 42.0,
                                                    "prepfs_worker_takeovers_total": 1.0})


class ReportTest(unittest.TestCase):
    def report(self):
        summary = W.set_summary(CANNED, 562_500.0)
        return {"mount_threads": 2, "repeats": 3, "sets": {"gen": {
            "info": {"files": 600, "source_mb": 21.6, "decoded_bytes_per_sample": 562_500.0, "output_bytes": 150_543},
            "summary": summary,
            "prediction": {"source": "the formula", "t_local_ms": 4.0, "t_worker_ms": 5.0, "recv_ms": 1.0,
                           "recv_from": "d", "link": 4.3e8, "output_bytes": 150_543, "predicted_c": 400.0,
                           "bound_c": "workers", "measured_c": 410.0, "error_pct": -2.44, "predicted_a": 250.0,
                           "measured_a": 250.0, "error_a_pct": 0.0},
            "kill": {"files": 600, "files_read": 600, "read_errors": 0, "distinct": 600, "killed_at_files": 300,
                     "successor_ready_s": 0.21, "remote": {"done": 150, "late": 3, "dropped": 0, "lost": 2,
                                                          "outstanding": 0},
                     "problems": [], "passed": True}}}}

    def test_the_ratios_are_the_medians_of_each_case_against_the_target(self):
        r = W.set_summary(CANNED)["ratios"]
        self.assertAlmostEqual(r["c/a"]["median"], 410 / 250)
        self.assertTrue(r["c/a"]["met"])
        self.assertAlmostEqual(r["d/a"]["median"], 415 / 250)
        self.assertAlmostEqual(r["e(worker)/e(alone)"]["median"], 460 / 300)
        self.assertFalse(r["e(worker)/e(alone)"]["met"])
        self.assertIsNone(r["b/a"]["met"])  # no target: it should only equal a within noise
        self.assertTrue(r["b/a"]["within_noise"])
        slow_b = [x for x in CANNED if x["case"] != "b"] + [run("b", 200.0), run("b", 210.0)]
        self.assertFalse(W.set_summary(slow_b)["ratios"]["b/a"]["within_noise"])
        cases = W.set_summary(CANNED)["cases"]
        self.assertEqual(cases["c"]["done"], 280)
        self.assertEqual(cases["c"]["placement"], ["auto: asking (readers miss)"])
        self.assertEqual(cases["a"]["asked_during"], [])

    def test_the_summary_table_has_a_row_per_set_with_met_or_missed_and_the_prediction(self):
        lines = W.summary_lines(self.report())
        table = runs.summary_of(lines)
        self.assertTrue(table[0].startswith("`prepfs worker` (issue 52)"))
        rows = [ln for ln in table if ln.startswith("| gen")]
        self.assertEqual(rows, ["| gen | 250 | 410 | 1.64x (1.54 - 1.75) met | 1.66x (1.56 - 1.79) met | "
                                "1.53x (1.45 - 1.62) **missed** | 1.00x (0.94 - 1.06) within noise | 400 files/s, -2% |"])
        text = "\n".join(lines)
        self.assertIn("| c: one worker | 410 (400 - 420, 5%) | 0.96 / 0.61 | 280 | 0 | 0 | 0 | 2.0 / 9.0 | 150,600 | 3.7x | "
                      "auto: asking (readers miss) |", text)
        self.assertIn("| a: alone, placement local | 250 (240 - 260, 8%) | 0.58 / 0.04 | - |", text)
        self.assertIn("predicted 400 files/s (workers-bound), measured 410: error -2.4%", text)
        self.assertIn("Kill test passed: 600 files read of 600, 0 read errors, 600 distinct outputs", text)

    def test_a_failed_kill_test_and_failed_runs_are_said_in_bold(self):
        report = self.report()
        s = report["sets"]["gen"]
        s["kill"] = {"passed": False, "problems": ["the run failed: RuntimeError: worker w1 exited\nits log"],
                     "files": None}
        s["failed_runs"] = [{"case": "d", "round": 1, "error": "RuntimeError: worker w2 not serving\nlog"}]
        s["runs"] = [dict(run("c", 400.0), worker_exit={"w1": 1}, worker_exit_bad={"w1": 1})]
        text = "\n".join(W.summary_lines(report))
        self.assertIn("**c: one worker, round 1:** workers ended by SIGTERM exited w1: 1 (not 0)", text)
        self.assertIn("Kill test **failed**: the run failed: RuntimeError: worker w1 exited.", text)
        self.assertIn("**d: two workers (one core), round 2, failed:** RuntimeError: worker w2 not serving", text)
        self.assertNotIn("its log", text)

    def test_a_report_rewritten_from_its_json_keeps_the_runs_command_and_date(self):
        report = self.report()
        report["sets"]["gen"]["runs"] = CANNED
        report.update(command="`python3 -m prepfs_bench.workers --quick`", date="2026-11-28 04:56 UTC")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "2026-11-28-workers")
            with open(out + ".json", "w") as f:
                json.dump(report, f)
            md = os.path.join(d, "BENCHMARKS.md")
            old = os.environ.get("PREPFS_BENCH_MD")
            os.environ["PREPFS_BENCH_MD"] = md
            try:
                with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                    self.assertEqual(W.main(["--report-only", out + ".json"]), 0)
            finally:
                if old is None:
                    del os.environ["PREPFS_BENCH_MD"]
                else:
                    os.environ["PREPFS_BENCH_MD"] = old
            with open(md) as f:
                text = f.read()
        self.assertIn("### 2026-11-28-workers\n\n- Date: 2026-11-28 04:56 UTC\n"
                      "- Command: `python3 -m prepfs_bench.workers --quick`\n", text)
        self.assertIn("| gen | 250 | 410 | 1.64x", text)

    def test_the_config_is_the_mounts_and_the_workers_alike(self):
        class FakeRedis:
            secret = "/tmp/x/redis.secret"

            def url(self):
                return "redis://127.0.0.1:6390"
        y = W.config_yaml("/data/set", FakeRedis(), "auto")
        for part in ("source: /data/set\n", "threads: 2\n", "placement: auto\n", "memory: 512MiB",
                     'remote: { url: "redis://127.0.0.1:6390", size: 2GiB, secret_file: /tmp/x/redis.secret }'):
            self.assertIn(part, y)


class ReaderTest(unittest.TestCase):
    """The reader process itself, over plain files (no mount)."""

    def test_the_reader_waits_for_go_reads_every_file_whole_and_hashes_each(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i in range(5):
                p = os.path.join(d, f"{i}.ppm")
                with open(p, "wb") as f:
                    f.write(bytes([i]) * (1000 + i))
                paths.append(p)
            paths.append(os.path.join(d, "missing.ppm"))
            lst = os.path.join(d, "list")
            with open(lst, "w") as f:
                f.write("".join(p + "\n" for p in paths))
            proc = subprocess.run(module_command(sys.executable, "workers") + ["read", lst, "--hash", "--progress"],
                                  input="go\n", capture_output=True, text=True, timeout=60, cwd=BENCH_DIR)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            out = proc.stdout.splitlines()
            self.assertEqual(out[0], "@@ready")
            self.assertEqual(out[1:7], [f"@@{n}" for n in range(1, 7)])
            res = json.loads(out[7])
            self.assertEqual((res["files"], res["bytes"], res["error_count"]), (6, 5 * 1000 + 10, 1))
            self.assertIn("missing.ppm", res["errors"][0])
            self.assertEqual(W.distinct_outputs(res["hashes"])[0], 5)
            self.assertLessEqual(res["first_open"], res["last_close"])


if __name__ == "__main__":
    unittest.main()
