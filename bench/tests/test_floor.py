"""Rows 3h-3k, issue 12's FUSE floor (prepfs_bench.floor): the plan, what floorfs must serve, its
mount hook (against a fake floorfs script, and the real one where FUSE and the build are
there), the refusal of passthrough, the figures and the report."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import time
import unittest

from prepfs_bench import cli, floor, loaders, mount, plan, stats
from prepfs_bench import report as reporting

from .fakes import (FAKE_FLOORFS, FLOORFS_RS, REAL_FLOORFS, case_args, fake_case, fake_results,
                    make_tree, mkdtemp)


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

    def test_the_plan_adds_the_floor_rows_after_3f(self):
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

    def test_prepfs_fuse_threads_are_read_from_a_config_or_its_default(self):
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

    def test_floorfs_is_mounted_probed_and_closed(self):
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

    def test_the_floors_figures_and_its_report_section(self):
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
    def test_the_real_floorfs_serves_what_the_harness_asks(self):
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
