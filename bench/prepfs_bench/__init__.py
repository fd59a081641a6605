"""prepfs_bench: the driver of `make bench` (issue 3), run as bench/run_bench.py.

It measures prepfs against the data loaders a user would pick instead, in the same run, on the
same data and the same cores, and writes the results JSON, BENCHMARKS.md and the PNG charts.
Its modules, by what they own:

- ``cli``: the command line and ``main`` (the prepfs sources, the report's frame, the loop over
  the cases, scenario 4, the exit status);
- ``plan``: the cases of scenarios 1-3 and scenario 4's variants;
- ``mount``: mounting prepfs (``mount_prepfs``, ``PrepfsMount``, ``PrepfsSource``), the
  mount-table probe, lazy unmounts, the daemon's CPU and memory;
- ``config``: the mount configs derived from the base one, ``prepfs check``;
- ``units``: prepfs's size syntax (``parse_size``) and the number formats;
- ``refill``: the wait for the cache's background refill before warm runs;
- ``runner``: running one case in a child process (``run_case``), the machine's description;
- ``scenario4``: running scenario 4, concurrent jobs;
- ``stats``: summaries, ratios, targets, scenario 4's figures (pure functions);
- ``report``: ``write_report``, BENCHMARKS.md's Markdown and tables, the progress lines;
- ``charts``: the PNG charts (matplotlib).

The loaders themselves are bench/loaders.py, a CLI of its own that every case runs in a child
process; this package imports it (standard library only at import time) for its helpers.
Everything but ``charts`` (and the loaders' children) needs only the standard library, so
bench/test_harness.py tests it without torch, DALI or FUSE.
"""

from __future__ import annotations

import os
import sys

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(BENCH_DIR)  # the repository
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)  # for `import loaders`


def show_path(p: str) -> str:
    """`p` relative to the repository when it is inside it."""
    rel = os.path.relpath(p, ROOT)
    return p if rel.startswith("..") else rel
