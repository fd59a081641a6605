"""prepfs_bench.restarts's parts that need no mount and no build: the readers' shares of an
epoch, the credits of a paced job, when the restarts happen, which reads were in flight during a
stall and their latencies, the epoch checks of both jobs, the supervisor's log lines, the
report's tables (from canned reads), and the reader process over a tiny tree of plain files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

from prepfs_bench import module_command, runs, restarts as R


def read(job, e, t, lat, path, **kw):
    view = "augmented" if job == "train" else "encoded"
    return {"job": job, "view": view, "e": e, "t": t, "lat": lat, "path": path, **kw}


class SharesTest(unittest.TestCase):
    def test_the_readers_share_each_epochs_shuffle_and_the_shuffle_changes_with_the_epoch(self):
        paths = [f"c{i % 3}/s{i}.ppm" for i in range(30)]
        for epoch in (1, 2):
            a, b = R.shuffled_share(paths, epoch, 0, 2), R.shuffled_share(paths, epoch, 1, 2)
            self.assertEqual(sorted(a + b), sorted(paths))
            self.assertFalse(set(a) & set(b))
        self.assertNotEqual(R.shuffled_share(paths, 1, 0, 1), R.shuffled_share(paths, 2, 0, 1))
        self.assertEqual(R.shuffled_share(paths, 1, 0, 1), R.shuffled_share(paths, 1, 0, 1))

    def test_a_follower_keeps_its_leaders_share_plus_a_lead_and_gets_the_rest_at_its_end(self):
        self.assertEqual(R.credits(0, 400, 400), 8)  # 2% of 400
        self.assertEqual(R.credits(100, 400, 200), 50 + 4)
        self.assertEqual(R.credits(399, 400, 200), 200)
        self.assertEqual(R.credits(400, 400, 200), 200)
        self.assertEqual(R.credits(0, 400, 10), 1)  # at least one

    def test_the_restarts_happen_at_their_share_of_all_the_reads(self):
        self.assertEqual(R.event_thresholds(800), [("kill", 0.20, 160), ("kill", 0.45, 360), ("upgrade", 0.55, 440),
                                                   ("kill", 0.70, 560)])


class FiguresTest(unittest.TestCase):
    def test_a_read_is_around_a_stall_when_in_flight_at_some_time_of_it(self):
        ev = [{"t0": 10.0, "t1": 11.0}]
        reads = [read("train", 1, 9.0, 0.5, "a"), read("train", 1, 9.5, 0.6, "b"), read("train", 1, 10.5, 2.0, "c"),
                 read("train", 1, 11.5, 0.1, "d")]
        near, away = R.around(reads, ev)
        self.assertEqual([r["path"] for r in near], ["b", "c"])
        self.assertEqual([r["path"] for r in away], ["a", "d"])
        f = R.event_figures({"t0": 10.0, "t1": 11.0}, reads + [read("check", 1, 10.2, 0.3, "e", err="EIO")])
        self.assertEqual(f["reads_in_flight"], 3)
        self.assertEqual(f["max_latency_s"], 2.0)
        self.assertEqual(f["max_latency_by_view"], {"augmented": 2.0, "encoded": 0.3})
        self.assertEqual(f["errors"], 1)
        self.assertIsNone(R.event_figures({"t0": None}, reads)["max_latency_s"])

    def test_latencies_are_in_milliseconds_and_the_makespan_from_first_start_to_last_end(self):
        reads = [read("train", 1, 1.0, 0.010, "a"), read("train", 1, 1.2, 0.020, "b"), read("check", 1, 0.5, 0.030, "c")]
        f = R.latency_figures(reads)
        self.assertEqual(f["reads"], 3)
        self.assertAlmostEqual(f["p50_ms"], 20.0)
        self.assertAlmostEqual(f["max_ms"], 30.0)
        self.assertAlmostEqual(R.makespan(reads), 1.22 - 0.5)
        self.assertIsNone(R.makespan([]))

    def test_an_augmented_epoch_must_read_the_listing_without_error(self):
        reads = [read("train", 1, 0, 0.1, f"c0/s{i}.ppm", hash=f"h{i}") for i in range(4)]
        reads += [read("train", 2, 0, 0.1, f"c0/s{i}.ppm", hash="same") for i in range(3)]
        reads.append(read("train", 2, 0, 0.1, "c0/s3.ppm", err="[Errno 5] Input/output error"))
        ok, bad = R.check_augmented(reads, 4)
        self.assertTrue(ok["ok"])
        self.assertEqual((ok["files"], ok["distinct_outputs"], ok["outputs_repeated"]), (4, 4, 0))
        self.assertFalse(bad["ok"])
        self.assertEqual((bad["files"], bad["errors"], bad["distinct_outputs"], bad["outputs_repeated"]), (4, 1, 1, 2))
        (again,) = R.check_augmented([read("train", 1, 0, 0.1, "c0/a.ppm", hash="h"), read("train", 1, 0, 0.1, "c0/b.ppm", hash="h")], 2, 1)
        self.assertFalse(again["ok"])  # all read, no error, but one output served twice

    def test_an_encoded_epoch_serves_each_sample_once_from_the_source_under_its_class(self):
        sources = ["c0/a.jpg", "c0/b.jpg", "c1/c.jpg"]
        good = [read("check", 1, 0, 0.1, "c0/a.jpg", sample="c0/b.jpg"), read("check", 1, 0, 0.1, "c0/b.jpg", sample="c0/a.jpg"),
                read("check", 1, 0, 0.1, "c1/c.jpg", sample="c1/c.jpg")]
        bad = [read("check", 2, 0, 0.1, "c0/a.jpg", sample="c0/a.jpg"), read("check", 2, 0, 0.1, "c0/b.jpg", sample="c0/a.jpg"),
               read("check", 2, 0, 0.1, "c1/c.jpg", sample="c0/b.jpg"), read("check", 2, 0, 0.1, "c1/d.jpg", sample=None)]
        e1, e2 = R.check_encoded(good + bad, sources)
        self.assertTrue(e1["ok"])
        self.assertFalse(e2["ok"])
        self.assertEqual((e2["served_twice"], e2["extra_reads"], e2["never_served"], e2["not_a_source_file"],
                          e2["wrong_class"]), (1, 1, 1, 1, 1))
        self.assertEqual(e2["examples_missing"], ["c1/c.jpg"])

    def test_the_supervisors_lines_about_its_servers_and_each_servers_time_to_serve(self):
        log = ("2025-01-01T00:00:00Z  INFO prepfs::supervisor: server started pid=10 binary=/x restarts=0\n"
               "2025-01-01T00:00:00Z  INFO prepfs::mount: something else\n"
               "\x1b[32m INFO\x1b[0m prepfs::supervisor: the server serves pid=10 restarts=0 seconds=\"0.42\"\n"
               " ERROR prepfs::supervisor: the server ended with the mount still in place pid=10 why=\"killed by signal 9 (SIGKILL)\"\n"
               " INFO prepfs::supervisor: the server serves pid=11 restarts=1 seconds=0.30\n")
        lines, serves = R.supervisor_lines(log)
        self.assertEqual(len(lines), 4)
        self.assertNotIn("\x1b", "".join(lines))
        self.assertEqual(serves, [0.42, 0.30])

    def test_the_supervisors_backoff_is_from_a_servers_end_to_the_next_ones_start(self):
        lines = ["2026-11-28T07:56:46.752264Z ERROR prepfs::supervisor: the server ended with the mount still in place",
                 "2026-11-28T07:56:46.853214Z  INFO prepfs::supervisor: server started pid=2 restarts=1",
                 "2026-11-28T07:56:47.360519Z  INFO prepfs::supervisor: upgrade: asking the server to hand over",
                 "2026-11-28T07:56:47.411690Z  INFO prepfs::supervisor: server started pid=3 restarts=2"]
        (d,) = R.restart_delays(lines)
        self.assertAlmostEqual(d, 0.10095, places=5)

    def test_the_errors_after_each_restart_are_counted_until_the_next_by_kind(self):
        ev = [{"t0": 1.0, "t1": 1.5}, {"t0": 3.0, "t1": 3.2}, {"t0": None}]
        enoent = "[Errno 2] No such file or directory: '/m/jobs/train/augmented/c0/a.ppm'"
        reads = [read("train", 1, 0.5, 0.1, "a", err="[Errno 5] Input/output error"),  # before any
                 read("train", 1, 0.9, 0.6, "b", err=enoent), read("train", 1, 2.0, 0.1, "c", err=enoent),
                 read("train", 1, 2.5, 0.1, "d"), read("check", 1, 3.1, 0.1, "e", err="[Errno 107] Transport endpoint is not connected")]
        after = R.errors_after(ev, reads)
        self.assertEqual(after, [{"[Errno 2] No such file or directory": 2},
                                 {"[Errno 107] Transport endpoint is not connected": 1}, None])
        self.assertEqual(R.fmt_kinds(after[0]), "2 ([Errno 2] No such file or directory)")
        self.assertEqual(R.fmt_kinds({}), "0")
        self.assertEqual(sum(R.error_kinds(reads).values()), 4)


def canned_run(label, kills):
    """A run record as run_once leaves it, 2 epochs of 4 samples per job."""
    sources = ["c0/a.jpg", "c0/b.jpg", "c1/c.jpg", "c1/d.jpg"]
    reads, t = [], 0.0
    for e in (1, 2):
        for i, p in enumerate(sources):
            lat = 0.5 if (kills and e == 2 and i == 0) else 0.01
            reads.append(read("train", e, t, lat, p.replace(".jpg", ".ppm"), hash=f"{label}{e}{i}"))
            reads.append(read("check", e, t, 0.005, p, sample=p))
            t += lat + 0.01
    events = [{"what": "kill", "share": 0.2, "at_reads": 9, "t0": reads[8]["t"], "t1": reads[8]["t"] + 0.4,
               "stall_s": 0.4, "old_pid": 10, "new_pid": 11}] if kills else []
    rec = {"label": label, "epochs": 2, "sources": sources, "listing": {"train": 4, "check": 4}, "reads": reads,
           "events": events, "total_reads": 16, "server": {"restarts": 1, "last_restart_cause": "killed by signal 9"} if kills else None,
           "jobs": [{"name": "train", "epoch": 2, "served_this_epoch": 4, "samples_served": 8, "substitutions": 0}],
           "log_lines": ["INFO prepfs::supervisor: server started pid=10"], "serves_s": [0.4, 0.3]}
    rec["figures"] = R.run_figures(rec)
    return rec


class ReportTest(unittest.TestCase):
    def report(self):
        s = {"data": "target/bench-data/restarts-gen-2x2", "info": {"samples": 4, "classes": 2, "source_mb": 0.1},
             "baseline": canned_run("b", False), "restarts": canned_run("r", True)}
        s["problems"] = R.verdict(s)
        return {"config": R.CONFIG, "epochs": 2, "load_before": [0.5], "load_after": [0.7], "commit": "abc",
                "sets": {"gen": s}}

    def test_the_summary_has_a_row_per_set_with_makespans_stalls_and_the_epoch_checks(self):
        report = self.report()
        self.assertEqual(report["sets"]["gen"]["problems"], [])
        lines = R.summary_lines(report)
        table = runs.summary_of(lines)
        row = [ln for ln in table if ln.startswith("| gen ")][0]
        f = report["sets"]["gen"]
        mb, mr = f["baseline"]["figures"]["makespan_s"], f["restarts"]["figures"]["makespan_s"]
        self.assertIn(f"{mb:.2f} / {mr:.2f}", row)
        self.assertIn(f"{mr - mb:+.2f}", row)
        self.assertIn("| 0.40 | 0.50 |", row)  # the stall, the readers' longest read around it
        self.assertIn("| 4 / 4 | 0, 0 / 0, 0 |", row)
        text = "\n".join(lines)
        self.assertIn("Every check passed.", text)
        self.assertIn('"last_restart_cause": "killed by signal 9"', text)
        self.assertIn("0.40, 0.30 s", text)
        self.assertEqual(lines[:4 + 1], table)  # what main() puts in BENCHMARKS.md

    def test_read_errors_and_an_epoch_not_served_once_fail_the_set_and_are_said_in_bold(self):
        report = self.report()
        s = report["sets"]["gen"]
        s["restarts"]["reads"][3]["sample"] = s["restarts"]["reads"][1]["sample"]  # check, epoch 1: a sample twice
        s["restarts"]["reads"][4]["err"] = "[Errno 107] Transport endpoint is not connected"
        s["restarts"]["figures"] = R.run_figures(s["restarts"])
        s["problems"] = R.verdict(s)
        self.assertTrue(any("1 read errors" in p for p in s["problems"]), s["problems"])
        self.assertTrue(any("check epoch 1" in p and "1 served twice" in p for p in s["problems"]), s["problems"])
        text = "\n".join(R.summary_lines(report))
        self.assertIn("**Failed:**", text)
        self.assertIn("Transport endpoint", text)

    def test_a_report_rewritten_from_its_json_recomputes_the_figures_and_checks_from_the_reads(self):
        report = self.report()
        report["sets"]["gen"]["restarts"]["reads"][1]["sample"] = None  # check: equal to no source file
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            with open(path, "w") as f:
                json.dump(report, f)
            old = os.environ.get("PREPFS_BENCH_MD")
            os.environ["PREPFS_BENCH_MD"] = "-"
            try:
                with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                    self.assertEqual(R.main(["--report-only", path, "--out", os.path.join(d, "again")]), 0)
            finally:
                if old is None:
                    del os.environ["PREPFS_BENCH_MD"]
                else:
                    os.environ["PREPFS_BENCH_MD"] = old
            with open(os.path.join(d, "again.json")) as f:
                again = json.load(f)
            self.assertTrue(any("1 not a source file" in p for p in again["sets"]["gen"]["problems"]))
            with open(os.path.join(d, "again.md")) as f:
                self.assertIn("**Failed:**", f.read())

    def test_a_failed_run_is_a_problem(self):
        s = {"baseline": {"error": "RuntimeError: boom\nmore"}, "restarts": canned_run("r", True)}
        self.assertEqual(R.verdict(s), ["baseline: RuntimeError: boom"])


class ReaderTest(unittest.TestCase):
    def run_reader(self, extra, stdin, sources=None):
        with tempfile.TemporaryDirectory() as d:
            files = {}
            for c in ("c0", "c1"):
                os.makedirs(os.path.join(d, "view", c))
                for i in range(3):
                    data = f"{c}-{i}".encode()
                    with open(os.path.join(d, "view", c, f"s{i}.jpg"), "wb") as f:
                        f.write(data)
                    files[f"{c}/s{i}.jpg"] = data
            self.assertEqual(R.image_folder(os.path.join(d, "view")), sorted(files))
            lst = os.path.join(d, "list")
            with open(lst, "w") as f:
                f.write("".join(p + "\n" for p in sorted(files)))
            args = ["read", lst, "--root", os.path.join(d, "view"), "--epochs", "2", "--out", os.path.join(d, "out.json")]
            if sources:
                hashes = os.path.join(d, "hashes.json")
                with open(hashes, "w") as f:
                    json.dump({hashlib.blake2b(v, digest_size=16).hexdigest(): k for k, v in files.items() if k in sources}, f)
                args += ["--sources", hashes]
            proc = subprocess.run(module_command(sys.executable, "restarts") + args + extra, input=stdin,
                                  capture_output=True, text=True, timeout=60)
            out = None
            if os.path.exists(os.path.join(d, "out.json")):
                with open(os.path.join(d, "out.json")) as f:
                    out = json.load(f)
            return proc, out, files

    def test_the_reader_waits_for_each_epoch_reads_its_share_and_names_each_files_source(self):
        proc, out, files = self.run_reader(["--share", "1", "--of", "2"], "go 1\ngo 2\n", sources=["c0/s0.jpg", "c0/s1.jpg"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        said = proc.stdout.split()
        self.assertEqual(said[0], "@@ready")
        self.assertEqual(said.count("@@r"), 6)
        self.assertEqual(said[-1], "@@done")
        self.assertEqual([r["e"] for r in out], [1, 1, 1, 2, 2, 2])
        self.assertEqual([r["path"] for r in out if r["e"] == 1], R.shuffled_share(sorted(files), 1, 1, 2))
        for r in out:
            self.assertEqual(r["hash"], hashlib.blake2b(files[r["path"]], digest_size=16).hexdigest())
            self.assertEqual(r["sample"], r["path"] if r["path"] in ("c0/s0.jpg", "c0/s1.jpg") else None)
            self.assertGreaterEqual(r["lat"], 0)
            self.assertNotIn("err", r)

    def test_a_paced_reader_reads_only_on_credits_and_stops_without_them(self):
        proc, out, _ = self.run_reader(["--paced"], "+2\ngo 1\n+3\n+1\n+6\ngo 2\n")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len(out), 12)
        proc, out, _ = self.run_reader(["--paced"], "go 1\n+4\n")
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(proc.stdout.split().count("@@r"), 4)
        self.assertIsNone(out)

    def test_an_unreadable_file_is_an_error_of_that_read_and_the_reader_goes_on(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "c0"))
            with open(os.path.join(d, "c0", "a.jpg"), "wb") as f:
                f.write(b"x")
            lst = os.path.join(d, "list")
            with open(lst, "w") as f:
                f.write("c0/a.jpg\nc0/gone.jpg\n")
            proc = subprocess.run(module_command(sys.executable, "restarts")
                                  + ["read", lst, "--root", d, "--epochs", "1", "--out", os.path.join(d, "o.json")],
                                  input="go 1\n", capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(d, "o.json")) as f:
                out = {r["path"]: r for r in json.load(f)}
            self.assertNotIn("err", out["c0/a.jpg"])
            self.assertIn("No such file", out["c0/gone.jpg"]["err"])


if __name__ == "__main__":
    unittest.main()
