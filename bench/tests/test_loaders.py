"""prepfs_bench.loaders with the raw reader (standard library only): listing, sampling, the
crop parameters, the run protocol, the memory probe, uncached reads."""

from __future__ import annotations

import io
import json
import os
import random
import unittest

from prepfs_bench import loaders

from .fakes import make_tree, mkdtemp


class LoaderHelpersTest(unittest.TestCase):
    def test_an_image_folder_lists_its_classes_and_images_and_skips_other_files(self):
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

    def test_random_resized_crop_params_stay_inside_the_image(self):
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

    def test_the_raw_reader_follows_the_ready_and_result_protocol(self):
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

    def test_the_raw_reader_repeats_for_min_seconds_and_runs_in_processes(self):
        d = mkdtemp()
        make_tree(d, junk=False)
        r = loaders.run_raw(d, workers=2, min_seconds=0.2)
        self.assertGreaterEqual(r.wall_s, 0.2)
        self.assertEqual(r.samples % 6, 0)
        self.assertGreater(r.samples, 6)
        p = loaders.LOADERS["raw-proc"](d, workers=2, limit=4)
        self.assertEqual(p.samples, 4)
        self.assertEqual(p.loader, "raw-proc")

    def test_tree_memory_counts_a_live_process_and_nothing_for_a_missing_one(self):
        self.assertGreater(loaders.tree_memory_mb(os.getpid()), 1.0)
        self.assertEqual(loaders.tree_memory_mb(2 ** 22 + 12345), 0.0)  # no such process


class UncachedReadTest(unittest.TestCase):
    def test_uncached_reads_return_the_files_bytes(self):
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
