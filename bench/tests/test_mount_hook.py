"""prepfs_bench.mount's prepfs mount hook, against a fake `prepfs` script (no FUSE)."""

from __future__ import annotations

import os
import time
import unittest

from prepfs_bench import mount

from .fakes import install_fake_prepfs, mkdtemp


class MountHookTest(unittest.TestCase):
    def setUp(self):
        self.dir = mkdtemp()
        self.bin = install_fake_prepfs(self.dir)
        self.mnt = os.path.join(self.dir, "mnt")
        os.environ.pop("FAKE_PREPFS_FAIL", None)
        os.environ.pop("FAKE_PREPFS_HANG", None)

    def test_a_mount_serves_its_stats_pinned_and_closes_cleanly(self):
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

    def test_a_mount_that_never_appears_times_out(self):
        os.environ["FAKE_PREPFS_HANG"] = "1"
        t = time.monotonic()
        with self.assertRaises(mount.PrepfsError) as e:
            mount.mount_prepfs(self.bin, "cfg.yaml", "/src", self.mnt, timeout=0.5)
        self.assertIn("did not appear", str(e.exception))
        self.assertLess(time.monotonic() - t, 10)

    def test_a_missing_binary_is_refused(self):
        with self.assertRaises(mount.PrepfsError):
            mount.mount_prepfs(os.path.join(self.dir, "nope"), "c", "/s", self.mnt)

    def test_is_mounted_tells_a_mount_point_from_a_directory(self):
        self.assertTrue(mount.is_mounted("/"))
        self.assertFalse(mount.is_mounted(self.dir))

    def tearDown(self):
        os.environ.pop("FAKE_PREPFS_FAIL", None)
        os.environ.pop("FAKE_PREPFS_HANG", None)
