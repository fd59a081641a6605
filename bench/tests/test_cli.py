"""prepfs_bench.cli: the driver's options and the steps of its main."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import unittest

from prepfs_bench import cli

from .fakes import BASE_CONFIG, make_tree, mkdtemp


class CliTest(unittest.TestCase):
    """The driver's options and the steps of its main."""

    def parse(self, *argv):
        ap = cli.build_parser()
        args = ap.parse_args(list(argv))
        cli.resolve_args(ap, args)
        return args

    def test_quick_changes_the_defaults_and_explicit_options_win(self):
        a = self.parse("--data", "d")
        self.assertEqual((a.reps, a.limit, a.jobs_reps, a.jobs_per_class), (5, None, 3, None))
        self.assertEqual((a.workers, a.cores, a.jobs, a.jobs_epochs, a.cache_share),
                         (2, 2, 3, 2, 0.25))
        q = self.parse("--data", "d", "--quick")
        self.assertEqual((q.reps, q.limit, q.jobs_reps, q.jobs_per_class), (3, 512, 1, 16))
        q = self.parse("--data", "d", "--quick", "--reps", "7", "--limit", "9")
        self.assertEqual((q.reps, q.limit), (7, 9))

    def test_missing_contradictory_or_bad_options_are_refused(self):
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

    def test_the_driver_derives_its_mount_configs_and_the_reports_frame(self):
        d, cfgs = mkdtemp(), mkdtemp()
        base = os.path.join(d, "base.yaml")
        with open(base, "w") as f:
            f.write(BASE_CONFIG)
        dinfo = {"data_bytes": 1000, "data_samples": 10}
        for status in (0, 1):
            args = self.parse("--data", d, "--prepfs-bin", self.fake_binary(status),
                              "--prepfs-config", base, "--prepfs-npy-config", base,
                              "--mountpoint", os.path.join(d, "mnt"))
            with contextlib.redirect_stdout(io.StringIO()):
                pf = cli.setup_prepfs(args, d, dinfo, [0], cfgs)
            with open(os.path.join(cfgs, "imagenet-cache25.yaml")) as f:
                self.assertIn("cache: { memory: 250, split: auto }", f.read())
            self.assertEqual(pf.base_text, BASE_CONFIG)
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

    def test_main_runs_the_floor_over_a_stand_in_directory(self):
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
