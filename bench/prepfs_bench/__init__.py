"""prepfs_bench: the benchmarks of prepfs, a package whose modules run as scripts.

Run from the repository with bench/ on the path: ``PYTHONPATH=bench python3 -m prepfs_bench``
is `make bench`'s driver (issue 3: prepfs against the data loaders a user would pick instead,
in the same run, on the same data and the same cores; the results JSON, its PNG charts and
BENCHMARKS.md), and ``PYTHONPATH=bench python3 -m prepfs_bench.<script>`` runs one of the
standalone measurements. Its modules, by what they own:

The driver of `make bench`:

- ``__main__``: the entry point (runs ``cli.main``), and what the scenarios are;
- ``cli``: the command line and ``main`` (the prepfs sources, the report's frame, the loop over
  the cases, scenario 4, the exit status);
- ``plan``: the cases of scenarios 1-3 and scenario 4's variants;
- ``loaders``: the loaders themselves, a command line of its own that every case runs in a child
  process (standard library only at import time, so the driver imports it for its helpers);
- ``mount``: mounting prepfs (``mount_prepfs``, ``PrepfsMount``, ``PrepfsSource``, and ``Mount``,
  the standalone scripts' mount), the mount-table probe, lazy unmounts, the daemon's CPU and
  memory;
- ``floor``: issue 12's FUSE floor (examples/floorfs) mounted, probed and ended;
- ``config``: the mount configs derived from the base one, ``prepfs check``;
- ``units``: prepfs's size syntax (``parse_size``) and the number formats;
- ``refill``: the wait for the cache's background refill before warm runs;
- ``runner``: running one case in a child process (``run_case``), the machine's description;
- ``scenario4``: running scenario 4, concurrent jobs;
- ``stats``: summaries, ratios, targets, scenario 4's figures (pure functions);
- ``report``: ``write_report``, BENCHMARKS.md's Markdown and tables, the progress lines;
- ``runs``: BENCHMARKS.md's "Runs" section, one summary table per run, newest first;
- ``charts``: the PNG charts (matplotlib).

The standalone measurements (each ``python3 -m prepfs_bench.<name> --help``): ``epochs``,
``jobs``, ``plan_matrix``, ``cold_epochs``, ``warm_floor`` (Makefile targets bench-epochs,
bench-jobs, bench-plan, bench-cold-epochs, bench-floor), ``loader`` (issue 14),
``remote_two_mounts`` (issue 13), ``workers`` (issue 52, ``make bench-workers``), ``profile`` (issue 55, ``make profile``), ``floor_read``, ``augment_ops_torchvision``, and
``real_photos`` (a data set cut from real photographs).

Everything the driver imports but ``charts`` needs only the standard library, so the self-test
(bench/tests) tests it without torch, DALI or FUSE.
"""

from __future__ import annotations

import os
from typing import List

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(BENCH_DIR)  # the repository


def show_path(p: str) -> str:
    """`p` relative to the repository when it is inside it."""
    rel = os.path.relpath(p, ROOT)
    return p if rel.startswith("..") else rel


def module_command(python: str, module: str) -> List[str]:
    """The command that runs prepfs_bench.MODULE as a script in a child process, as
    `python -m prepfs_bench.MODULE` does, with bench/ put first on the child's path so it finds
    this package whatever its working directory and PYTHONPATH."""
    return [python, "-c", "import runpy, sys; sys.path.insert(0, %r); "
            "runpy.run_module(%r, run_name='__main__', alter_sys=True)"
            % (BENCH_DIR, "prepfs_bench." + module)]
