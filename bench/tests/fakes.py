"""The self-test's shared fakes: temporary directories removed at exit, fake runs, cases and
reports, a tiny image tree, the base mount config, stand-ins for the `prepfs` and `floorfs`
binaries (scripts, no FUSE), the arguments run_case reads."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
import textwrap
import types

from prepfs_bench import ROOT, plan, stats

# No test records a run in the repository's BENCHMARKS.md: those that write reports name a
# temporary one (prepfs_bench.runs.benchmarks_md reads this).
os.environ["PREPFS_BENCH_MD"] = "-"

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

def fake_report(cases, quick=False, prepfs=None, **more):
    """A driver's report over CASES as cli.new_report frames it: the command (with --quick when
    QUICK), a 2-CPU test machine, ten samples in two classes, PREPFS as the settings' prepfs
    (default: not measured), and MORE on top."""
    return {"command": "python3 -m prepfs_bench --data d" + (" --quick" if quick else ""),
            "date": "2026-01-01", "quick": quick, "page_cache_drop": "yes",
            "machine": {"cpu_model": "Test CPU", "nproc": 2, "mem_gib": 24.0, "kernel": "6.1",
                        "loadavg_before": [0.1, 0.1, 0.1]},
            "settings": {"cpus": [0, 1], "data_samples": 10, "data_classes": 2, "data_mb": 1.2,
                         "data_mean_kb": 120.0, "reps": 3, "samples_desc": "10 samples",
                         "workers": 2, "prepfs": prepfs or {"desc": "not measured"}},
            "cases": cases, **more}


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


# The base mount config the derived ones start from (2p's 25% cache, scenario 4's read limit).
BASE_CONFIG = textwrap.dedent("""\
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


def install_fake_prepfs(directory: str) -> str:
    """FAKE_PREPFS written to DIRECTORY/prepfs, executable; its path."""
    binary = os.path.join(directory, "prepfs")
    with open(binary, "w") as f:
        f.write(FAKE_PREPFS.format(python=sys.executable))
    os.chmod(binary, os.stat(binary).st_mode | stat.S_IXUSR)
    return binary


def case_args(reps: int = 2):
    """The arguments run_case reads, as the driver's argparse would give them."""
    return types.SimpleNamespace(python=sys.executable, workers=2, reps=reps, limit=None,
                                 timeout=60)

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
FLOORFS_RS = os.path.join(ROOT, "crates", "prepfs", "examples", "floorfs.rs")
REAL_FLOORFS = os.path.join(ROOT, "target", "release", "examples", "floorfs")
