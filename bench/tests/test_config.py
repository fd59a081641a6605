"""prepfs_bench.config and units: prepfs's size syntax, the mount configs derived from the base
one."""

from __future__ import annotations

import os
import unittest

from prepfs_bench import config, units

from .fakes import BASE_CONFIG, mkdtemp


class ConfigTest(unittest.TestCase):
    """Mount configs derived from the base one (2p's 25% cache, scenario 4's read limit)."""

    BASE = BASE_CONFIG

    def test_sizes_parse_in_prepfs_syntax_and_bad_ones_are_refused(self):
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

    def test_strip_top_level_drops_only_the_named_sections(self):
        text = "a: 1\ncache:\n  memory: 1GiB\n  split: auto\nb: 2\n"
        self.assertEqual(config.strip_top_level(text, ["cache"]), "a: 1\nb: 2\n")
        self.assertEqual(config.strip_top_level(text, ["nothing"]), text)
        # a key that only starts like another is kept
        self.assertIn("cache_x: 1", config.strip_top_level("cache_x: 1\ncache: 2\n", ["cache"]))

    def test_a_derived_config_replaces_the_cache_and_the_source(self):
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

    def test_a_top_level_key_is_found_only_at_column_0(self):
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
