"""bench/run_bench.py: the driver of `make bench` (issue 3).

This module owns the benchmark plan and its report: which scenario runs which loader on which
directory, how often, in which cache state; the summary statistics; the JSON results, the
Markdown table and the PNG charts; and the hook that mounts prepfs for the runs that read it.

    python bench/run_bench.py --data DIR [--quick] [--prepfs-bin target/release/prepfs
        --prepfs-config mount-configs/imagenet.yaml
        [--prepfs-npy-config mount-configs/imagenet-npy.yaml]
        | --prepfs-mount MNT | --augmented-dir DIR [--augmented-npy-dir DIR]]

Scenarios (ids as in the table; see issue 3):

- 1 cold (page cache dropped before each measured run; prepfs remounted with an empty cache when
  the driver mounts it): 1a torchvision on the JPEGs, 1b DALI CPU, 1e plain PIL (an extra peer),
  1c torchvision over prepfs ``augmented/`` with only ToTensor + Normalize, 1d the raw reader of
  ``augmented/``.
  With a second, npy float32 mount: 1n, torch over ``np.load`` with no transform at all.
- 2 warm (one unmeasured warm-up run first, so the page cache, or prepfs's cache, holds the set):
  2a, 2b, 2e, 2c, 2d (2n), the same loaders.
- 3 floor: the raw reader over prepfs's cached outputs (3d) against the same number of augmented
  files copied to tmpfs (/dev/shm) and read by the same reader (3f); 3g is the torchvision loop of
  1c over the tmpfs copy (what that loop costs by itself).

Every measured run is a fresh run of a loader (bench/loaders.py) in a child process that has
already imported its framework; the children of one case run its repetitions one after another
and wait for the driver before each (see loaders.run_reps), which drops caches or remounts.
The loader process and its workers, and the prepfs daemon, are pinned to the same cores; when
the driver mounts prepfs, only the daemon a case reads runs during that case.

Without any prepfs option only the peers run (1a 1b 1e 2a 2b 2e). ``--augmented-dir`` points
1c/1d/2c/2d/3 at a plain directory of augmented PPMs instead (e.g. one written by
``python bench/loaders.py fake-augmented``), to exercise the harness without a mount.

The pure functions here (summaries, ratios, targets, the table) import nothing beyond the
standard library, so bench/test_harness.py tests them without torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import loaders  # noqa: E402  (standard library only at import time)

# --------------------------------------------------------------------------------------------
# The prepfs hook


class PrepfsError(RuntimeError):
    pass


def is_mounted(path: str) -> bool:
    """Whether `path` is a mount point (per /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mnt = line.split()[4]
                # mountinfo escapes space, tab, newline and backslash as octal
                mnt = (mnt.replace("\\040", " ").replace("\\011", "\t")
                       .replace("\\012", "\n").replace("\\134", "\\"))
                if mnt == real:
                    return True
    except OSError:
        pass
    return False


def lazy_unmount(mountpoint: str) -> bool:
    """`fusermount3 -u -z`, falling back to `umount -l`; True if it is no longer mounted."""
    for cmd in (["fusermount3", "-u", "-z", mountpoint], ["umount", "-l", mountpoint]):
        try:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if not is_mounted(mountpoint):
            return True
    return not is_mounted(mountpoint)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process, all its threads included."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class PrepfsMount:
    """A running `prepfs mount`. close() ends it (SIGTERM, then SIGKILL) and makes sure the
    mount point is released (lazy unmount as a fallback); it also deletes the log when the log
    is a temporary file of its own (`own_log`). Usable as a context manager."""

    def __init__(self, proc: subprocess.Popen, mountpoint: str, log_path: str,
                 own_log: bool = False):
        self.proc = proc
        self.mountpoint = mountpoint
        self.log_path = log_path
        self.own_log = own_log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def view(self, name: str) -> str:
        return os.path.join(self.mountpoint, name)

    def stats(self) -> Optional[dict]:
        """The live figures of .prepfs/stats.json, or None."""
        try:
            with open(os.path.join(self.mountpoint, ".prepfs", "stats.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.proc.pid)

    def rss_mb(self) -> float:
        return loaders.tree_memory_mb(self.proc.pid, use_pss=False)

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def close(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if is_mounted(self.mountpoint):
            lazy_unmount(self.mountpoint)
        if self.own_log:
            try:
                os.remove(self.log_path)
            except OSError:
                pass

    def __enter__(self) -> "PrepfsMount":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def mount_prepfs(binary: str, config_yaml: str, source: str, mountpoint: str,
                 timeout: float = 60.0, cpus: Optional[Sequence[int]] = None,
                 log_path: Optional[str] = None, extra_args: Sequence[str] = ()) -> PrepfsMount:
    """Start `BINARY mount CONFIG --source SRC --mountpoint MNT` (pinned to `cpus`) and wait
    until MNT/.prepfs/stats.json exists. Raises PrepfsError (with the end of its log) if the
    process exits or `timeout` passes first. A mount left behind at MNT is released first.
    The daemon's output goes to `log_path` (appended), or to a temporary file deleted when the
    mount is closed."""
    if not os.path.isfile(binary):
        raise PrepfsError(f"{binary} not found: build it first (cargo build --release)")
    if is_mounted(mountpoint):
        lazy_unmount(mountpoint)
    os.makedirs(mountpoint, exist_ok=True)
    own_log = log_path is None
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="prepfs-bench-", suffix=".log")
        os.close(fd)
    cmd = [binary, "mount", config_yaml, "--source", source, "--mountpoint", mountpoint,
           *extra_args]
    pin = (lambda: os.sched_setaffinity(0, set(cpus))) if cpus else None
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=pin,
                                start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
    handle = PrepfsMount(proc, mountpoint, log_path, own_log)
    stats = os.path.join(mountpoint, ".prepfs", "stats.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = handle.log_tail()
            handle.close()
            raise PrepfsError(f"{shlex.join(cmd)} exited with status {proc.returncode}:\n"
                              + tail)
        if os.path.exists(stats):
            return handle
        time.sleep(0.1)
    tail = handle.log_tail()
    handle.close()
    raise PrepfsError(f"{stats} did not appear within {timeout:.0f} s:\n" + tail)


def find_mount_daemon(mountpoint: str) -> Optional[int]:
    """The pid of a running `... mount ... MOUNTPOINT ...` process, if one is found."""
    real = os.path.realpath(mountpoint)
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if "mount" in args[1:] and any(os.path.realpath(a) == real for a in args[2:]
                                       if a.startswith(("/", "."))):
            return int(d)
    return None


class PrepfsSource:
    """Where the prepfs views come from: a mount the driver starts (and can restart with an
    empty cache), one mounted by someone else, or a plain directory standing in for
    `augmented/`. `pid` is the daemon's, when there is one to account CPU and memory to."""

    def __init__(self, kind: str, augmented: str, mount: Optional[PrepfsMount] = None,
                 restart: Optional[Callable[[], PrepfsMount]] = None):
        self.kind = kind  # "driver-mount", "external-mount", "stand-in"
        self.augmented = augmented
        self.mount = mount
        self._restart = restart
        self._external_pid = (find_mount_daemon(os.path.dirname(augmented))
                              if kind == "external-mount" else None)

    @property
    def pid(self) -> Optional[int]:
        return self.mount.pid if self.mount else self._external_pid

    @property
    def can_empty_cache(self) -> bool:
        return self._restart is not None

    def fresh(self) -> None:
        """Remount with an empty cache (driver mounts only)."""
        if self._restart is None:
            return
        if self.mount:
            self.mount.close()
            self.mount = None
        self.mount = self._restart()

    def ensure(self) -> None:
        """Mounted, if the driver mounts it (after close(), or lazily)."""
        if self._restart is not None and self.mount is None:
            self.mount = self._restart()

    def stats(self) -> Optional[dict]:
        if self.mount:
            return self.mount.stats()
        if self.kind == "external-mount":
            try:
                with open(os.path.join(os.path.dirname(self.augmented), ".prepfs",
                                       "stats.json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None
        return None

    def close(self) -> None:
        if self.mount and self._restart is not None:
            self.mount.close()
            self.mount = None


# --------------------------------------------------------------------------------------------
# The plan


@dataclasses.dataclass
class Case:
    id: str  # "1a": scenario number + loader letter, as in issue 3
    scenario: str  # "cold", "warm", "floor"
    loader: str  # a key of loaders.LOADERS
    label: str  # the loader, for people
    reads: str  # what it reads, for people
    data: str  # the directory it reads
    cold: bool = False  # drop the page cache (and empty prepfs's cache) before each run
    warmup: int = 0  # unmeasured runs first
    prepfs: bool = False  # reads through prepfs: account the daemon's CPU and memory
    source: str = "ppm"  # which prepfs source it reads: "ppm" or "npy" (the output format)
    chart_reads: str = ""  # a shorter `reads` for chart labels ("": the same)


SCENARIO_TITLES = {
    "cold": "1 cold",
    "warm": "2 warm",
    "floor": "3 floor",
}
LABELS = {
    "torchvision": "torchvision ImageFolder + DataLoader, full transform",
    "dali": "DALI CPU pipeline",
    "pil": "PIL + numpy, no torch",
    "torchvision-ppm": "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
    "torch-npy": "torch DatasetFolder(np.load) + DataLoader, no transform",
    "raw": "raw reader (whole files)",
}
SHORT = {
    "torchvision": "torchvision",
    "dali": "DALI CPU",
    "pil": "PIL",
    "torchvision-ppm": "torchvision, ToTensor+Normalize",
    "torch-npy": "torch, np.load",
    "raw": "raw reader",
}


# What "warm" and "cached outputs" mean for rows that read prepfs, by whether the mount has a
# cache: (warm rows' suffix, the floor row's suffix, the same for chart labels).
NO_CACHE_WARM = ", source page-cache warm (prepfs has no cache)"
NO_CACHE_FLOOR = ", no cache: computed at open, source warm"


def plan(data: str, augmented: Optional[str], aug_reads: str, floor_dir: Optional[str],
         prepfs: bool, quick: bool = False, npy_augmented: Optional[str] = None,
         npy_reads: str = "", cache_on: Optional[bool] = None) -> List[Case]:
    """The cases to run, in order: cold ones first, then warm, then the floor. Quick runs
    leave out the PIL peer, the warm peers (their warm rate is their cold rate: they are
    CPU-bound; ratios fall back to the cold rows) and 3g. With `npy_augmented` (prepfs with
    npy float32 output), 1n and 2n: torch over np.load with no transform at all.

    cache_on: whether the prepfs mount has a sample cache (None: unknown, or not prepfs).
    Without one (False), "warm" for prepfs rows only means the source JPEGs are in the page
    cache, and 3d reads outputs computed at open, not cached ones: their `reads` say so."""
    warm_sfx = floor_sfx = ""
    warm_chart = floor_chart = ""
    if cache_on is False:
        warm_sfx, floor_sfx = NO_CACHE_WARM, NO_CACHE_FLOOR
        warm_chart, floor_chart = ", source warm, no cache", ", no cache, source warm"
    elif cache_on:
        warm_sfx = warm_chart = ", cache on, after a warm-up pass"
        floor_sfx = floor_chart = ", cache on, after a warm-up pass"
    cases = []
    peers = [("a", "torchvision"), ("b", "dali"), ("e", "pil")]
    ours = [("c", "torchvision-ppm"), ("d", "raw")]
    for num, scen in (("1", "cold"), ("2", "warm")):
        for letter, loader in peers:
            if quick and (loader == "pil" or scen == "warm"):
                continue
            cases.append(Case(num + letter, scen, loader, LABELS[loader], "JPEG files", data,
                              cold=scen == "cold", warmup=int(scen == "warm")))
        sfx, csfx = (warm_sfx, warm_chart) if scen == "warm" else ("", "")
        if augmented:
            for letter, loader in ours:
                cases.append(Case(num + letter, scen, loader, LABELS[loader], aug_reads + sfx,
                                  augmented, cold=scen == "cold", warmup=int(scen == "warm"),
                                  prepfs=prepfs, chart_reads=aug_reads + csfx))
        if npy_augmented:
            cases.append(Case(num + "n", scen, "torch-npy", LABELS["torch-npy"],
                              npy_reads + sfx, npy_augmented, cold=scen == "cold",
                              warmup=int(scen == "warm"), prepfs=prepfs, source="npy",
                              chart_reads=npy_reads + csfx))
    if augmented and floor_dir:
        cases.append(Case("3d", "floor", "raw", LABELS["raw"],
                          aug_reads + (floor_sfx or ", after a warm-up"), augmented, warmup=1,
                          prepfs=prepfs, chart_reads=aug_reads + floor_chart))
        cases.append(Case("3f", "floor", "raw", LABELS["raw"], "tmpfs copy of the same outputs",
                          floor_dir, warmup=1))
        if not quick:
            cases.append(Case("3g", "floor", "torchvision-ppm", LABELS["torchvision-ppm"],
                              "tmpfs copy of the same outputs", floor_dir, warmup=1))
    return cases


# --------------------------------------------------------------------------------------------
# Statistics and the report (pure functions, tested by bench/test_harness.py)


def spread(values: Sequence[float]) -> Dict[str, float]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def cache_counts(stats: Optional[dict]) -> Optional[Dict[str, int]]:
    """The sample cache's counters from prepfs's stats.json: hits and misses of each form
    (augmented outputs taken, decoded pixels, encoded bytes); None without a cache."""
    cache = (stats or {}).get("cache")
    if not isinstance(cache, dict) or not cache.get("memory"):
        return None
    out = {}
    for form in ("augmented", "decoded", "encoded"):
        f = cache.get(form) or {}
        out[f"{form}_hits"] = int(f.get("hits") or 0)
        out[f"{form}_misses"] = int(f.get("misses") or 0)
    return out


def summarize(runs: Sequence[dict]) -> dict:
    """Aggregate the measured runs of one case: samples/s median/min/max; CPU seconds per
    sample (loader + prepfs daemon), median; peak memory, the largest of the runs."""
    sps = [r["samples"] / r["wall_s"] for r in runs if r.get("wall_s")]
    cpu = [(r["cpu_s"] + r.get("fs_cpu_s", 0.0)) / r["samples"] for r in runs if r["samples"]]
    loader_cpu = [r["cpu_s"] / r["samples"] for r in runs if r["samples"]]
    fs_cpu = [r.get("fs_cpu_s", 0.0) / r["samples"] for r in runs if r["samples"]]

    def peak(key: str) -> Optional[float]:
        vals = [r[key] + r.get("fs_peak_rss_mb", 0.0) for r in runs if r.get(key) is not None]
        return max(vals) if vals else None

    cache = None
    if any(r.get("cache") for r in runs):
        cache = {}
        for r in runs:
            for k, v in (r.get("cache") or {}).items():
                cache[k] = cache.get(k, 0) + v
        looked = cache.get("augmented_hits", 0) + cache.get("augmented_misses", 0)
        cache["augmented_hit_rate"] = cache.get("augmented_hits", 0) / looked if looked else None
    return {
        "cache": cache,
        "samples_per_s": spread(sps),
        "cpu_s_per_sample": spread(cpu),
        "loader_cpu_s_per_sample": statistics.median(loader_cpu) if loader_cpu else None,
        "fs_cpu_s_per_sample": statistics.median(fs_cpu) if fs_cpu else None,
        "peak_rss_mb": peak("peak_rss_mb"),
        "peak_pss_mb": peak("peak_pss_mb"),
        "samples_per_run": max((r["samples"] for r in runs), default=0),
        "runs": len(runs),
    }


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or not den:
        return None
    return num / den


def _median_sps(cases: Dict[str, dict], cid: str) -> Optional[float]:
    c = cases.get(cid)
    if not c or c.get("error") or not c.get("summary"):
        return None
    return c["summary"]["samples_per_s"]["median"]


# The baselines of each cache state, in order of preference: the warm rows for the warm and
# floor scenarios, the cold ones where those were not run (quick runs).
BASELINE = {
    "cold": (("1a",), ("1b",)),
    "warm": (("2a", "1a"), ("2b", "1b")),
    "floor": (("2a", "1a"), ("2b", "1b")),
}


def baseline_ids(results: Sequence[dict], scenario: str) -> Dict[str, Optional[str]]:
    """The torchvision and the DALI case that a case of `scenario` is compared with."""
    by_id = {c["id"]: c for c in results}
    tv, dali = BASELINE.get(scenario, BASELINE["warm"])
    first = lambda ids: next((i for i in ids if _median_sps(by_id, i)), None)  # noqa: E731
    return {"torchvision": first(tv), "dali": first(dali)}


def ratios(results: Sequence[dict]) -> Dict[str, Dict[str, Optional[float]]]:
    """Per case: samples/s over the torchvision and the DALI case of the same cache state."""
    by_id = {c["id"]: c for c in results}
    out = {}
    for c in results:
        base = baseline_ids(results, c["scenario"])
        mine = _median_sps(by_id, c["id"])
        out[c["id"]] = {k: ratio(mine, _median_sps(by_id, v) if v else None)
                        for k, v in base.items()}
    return out


# (description, numerator case, denominator cases in order of preference, at least this ratio)
TARGETS = [
    ("cold: prepfs >= 5x torchvision", "1c", ("1a",), 5.0),
    ("cold: prepfs >= 3x DALI CPU", "1c", ("1b",), 3.0),
    ("warm: prepfs >= 20x torchvision", "2c", ("2a", "1a"), 20.0),
    ("floor: prepfs cached >= 1/2 tmpfs", "3d", ("3f",), 0.5),
]


def targets(results: Sequence[dict], cache_on: Optional[bool] = None) -> List[dict]:
    """The issue's targets: measured ratio, whether it is met (None: not measured), and a note
    saying what the measured cases stand for where that differs from the target's premise
    (no prepfs cache yet; warm peers left out by --quick)."""
    by_id = {c["id"]: c for c in results}
    out = []
    for desc, num, dens, want in TARGETS:
        den = next((d for d in dens if _median_sps(by_id, d)), dens[0])
        r = ratio(_median_sps(by_id, num), _median_sps(by_id, den))
        notes = []
        if r is not None and cache_on is False and num in ("2c", "3d"):
            notes.append("prepfs has no cache yet: " + (
                "2c reads outputs computed at open from a page-cache-warm source"
                if num == "2c" else "3d reads outputs computed at open, not cached ones"))
        hit = ((by_id.get(num) or {}).get("summary") or {}).get("cache") or {}
        rate = hit.get("augmented_hit_rate")
        if r is not None and cache_on and num in ("2c", "3d") and rate is not None \
                and rate < 0.9:
            notes.append(f"only {rate * 100:.0f}% of {num}'s outputs came from the cache")
        if r is not None and den != dens[0]:
            notes.append(f"{dens[0]} not run: against {den}")
        loop = ratio(_median_sps(by_id, "3g"), _median_sps(by_id, den))
        if r is not None and num in ("1c", "2c") and loop is not None:
            notes.append(f"this loop alone, over tmpfs (3g), reaches {fmt_ratio(loop)}")
        out.append({"target": desc, "cases": f"{num} / {den}", "want": want, "ratio": r,
                    "met": None if r is None else r >= want, "note": "; ".join(notes)})
    return out


def pending_rows(cache_on: Optional[bool]) -> List[List[str]]:
    """Table rows for the scenarios of issue 3 that cannot run yet, as wide as TABLE_HEADER."""
    blank = [""] * (len(TABLE_HEADER) - 5)
    rows = [["2p", "2 warm, 25% cache", "prepfs with a cache of 25% of the set",
             "prepfs augmented/",
             "pending: the harness does not mount a 25% cache yet" if cache_on
             else "pending: needs a prepfs cache"] + blank]
    rows.append(["4", "4 concurrent jobs", "3 jobs x 2 epochs, cache 25%, read-limited source: "
                 "torchvision, prepfs without jobs, prepfs with ODS", "makespan, hit rate",
                 "pending: needs the jobs issue"] + blank)
    return rows


def fmt_num(x: Optional[float], digits: int = 0) -> str:
    if x is None:
        return "-"
    if digits == 0 and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def fmt_ratio(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def fmt_hit_rate(cache: Optional[dict]) -> str:
    """Share of the measured runs' augmented outputs taken from prepfs's cache ("" for rows
    without a prepfs cache)."""
    if not cache or cache.get("augmented_hit_rate") is None:
        return ""
    return f"{cache['augmented_hit_rate'] * 100:.0f}%"


def table_rows(results: Sequence[dict]) -> List[List[str]]:
    rat = ratios(results)
    rows = []
    for c in results:
        head = [c["id"], SCENARIO_TITLES.get(c["scenario"], c["scenario"]), c["label"],
                c["reads"]]
        if c.get("error"):
            rows.append(head + [f"failed: {c['error'].splitlines()[0][:80]}"]
                        + [""] * (len(TABLE_HEADER) - 5))
            continue
        s = c["summary"]
        sps = s["samples_per_s"]
        cpu = s["cpu_s_per_sample"]["median"]
        mem = s["peak_pss_mb"] if s.get("peak_pss_mb") is not None else s["peak_rss_mb"]
        rows.append(head + [
            fmt_num(sps["median"]),
            f"{fmt_num(sps['min'])} - {fmt_num(sps['max'])}",
            fmt_num(None if cpu is None else cpu * 1000, 2),
            fmt_num(mem),
            fmt_ratio(rat[c["id"]]["torchvision"]),
            fmt_ratio(rat[c["id"]]["dali"]),
            fmt_hit_rate(s.get("cache")),
        ])
    return rows


TABLE_HEADER = ["#", "scenario", "loader", "reads", "samples/s (median)", "min - max",
                "CPU ms/sample", "peak mem MB", "vs torchvision", "vs DALI",
                "outputs from prepfs cache"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def cache_desc(cache_on: Optional[bool], stats: Optional[dict]) -> str:
    if cache_on is None:
        return "not known (no prepfs statistics)"
    if not cache_on:
        return ("none: the mount config sets no cache (or this prepfs has none), so every open "
                "of `augmented/` decodes and augments afresh; \"warm\" rows for prepfs have "
                "only the source JPEGs in the kernel page cache")
    c = (stats or {}).get("cache") or {}
    mem, split = c.get("memory"), c.get("split")
    out = f"{mem / 2**20:.0f} MiB" if isinstance(mem, (int, float)) else "on"
    if isinstance(split, (list, tuple)) and len(split) == 3:
        out += (f", split encoded-decoded-augmented {'-'.join(str(x) for x in split)} "
                f"(as the mount chose it)")
    return out + ("; remounted empty before every cold run; the last column of the table is "
                  "the share of a row's outputs taken from it (the rest computed at open)")


def render_markdown(report: dict, charts: Sequence[str], md_dir: str) -> str:
    """BENCHMARKS.md: the command and the machine, how to read it, the targets, the table, the
    charts, the method."""
    m, s = report["machine"], report["settings"]
    tgt = report["targets"]
    cache_on = s.get("prepfs", {}).get("cache_on")
    invoked = report.get("invoked_as")
    out = ["# prepfs benchmarks", ""]
    if invoked:
        out.append(f"Produced by `{invoked}`" + (" (a quick run)" if report["quick"] else "")
                   + f", which ran `{report['command']}`.")
    else:
        out.append(f"Produced by `{report['command']}`"
                   + (" (quick run)" if report["quick"] else "") + ".")
    out.append("")
    cpus = ",".join(str(c) for c in s["cpus"])
    pk = m.get("packages") or {}
    pkgs = ", ".join(f"{k} {v}" for k, v in pk.items() if v)
    la = m["loadavg_before"]
    after = m.get("loadavg_after")
    out += [
        f"- Date: {report['date']}",
        f"- Machine: {m['cpu_model']}; nproc {m['nproc']}; every process of a case (loader, "
        f"its workers, the prepfs daemon) pinned to CPUs {cpus}; {m['mem_gib']:.0f} GiB "
        f"memory; Linux {m['kernel']}; Python {m.get('python', '?')}"
        + (f" ({pkgs})" if pkgs else ""),
        f"- Load average (1 min) {la[0]:.2f} before the runs"
        + (f", {after[0]:.2f} after" if after else ""),
    ]
    if report.get("build_info"):
        out.append(f"- Build: {report['build_info']}")
    out.append(f"- Data: {s['data_samples']} JPEGs in {s['data_classes']} classes, "
               f"{s['data_mb']:.0f} MB (mean {s['data_mean_kb']:.0f} KB)"
               + (f", {s['data_info']}" if s.get("data_info") else ""))
    out.append(f"- Each case: {s['reps']} measured runs of {s['samples_desc']}, "
               f"{s['workers']} workers or threads, batch {loaders.BATCH_SIZE}; page cache "
               f"dropped before cold runs: {report['page_cache_drop']}")
    out.append(f"- prepfs: {s['prepfs']['desc']}")
    if s.get("prepfs", {}).get("kind") in ("driver-mount", "external-mount"):
        out.append(f"- prepfs cache: {cache_desc(cache_on, s['prepfs'].get('stats'))}")
    if la[0] > 0.5:
        out.append("")
        out.append(f"**Warning:** the machine was busy when the runs started (load average "
                   f"{la[0]:.2f} on {m['nproc']} CPUs: other work was running); samples/s is "
                   f"lower and noisier than on an idle machine. CPU ms per sample is the "
                   f"steadier figure.")
    out.append("")
    out += [
        "## How to read this", "",
        "- Each row is one loader, as a user would write it, reading one tree in one cache "
        "state, on the same cores and the same images. The id is scenario + loader: 1 cold "
        "(nothing cached anywhere), 2 warm (after one unmeasured pass), 3 floor (the raw rate "
        "of prepfs against tmpfs); a torchvision, b DALI CPU, e plain PIL (the peers, doing the "
        "whole ImageNet train transform themselves on the JPEGs), c the same torchvision loop "
        "over prepfs `augmented/` with only ToTensor + Normalize left, n torch over prepfs's "
        "normalized float32 `.npy` with no transform, d a raw reader of whole files (the "
        "filesystem's own rate: no loader can beat it), f/g the same over a tmpfs copy.",
        "- samples/s: higher is better; the median of the runs, min - max the spread. "
        "vs torchvision / vs DALI: this row's samples/s over 1a / 1b for cold rows, over 2a / "
        "2b for warm and floor rows (1a / 1b when the warm peers were not run).",
        "- CPU ms/sample: all the CPU one sample cost, the prepfs daemon's included: on a "
        "training machine these are cores taken from the job. Less sensitive to other load "
        "than samples/s.",
        "- The headline is 1c against 1a and 1b: the same training loop, pointed at "
        "`augmented/` instead of the JPEGs. 3d against 3f is what FUSE costs.",
    ]
    pending = (pending_rows(cache_on)
               if s.get("prepfs", {}).get("kind") in ("driver-mount", "external-mount") else [])
    if cache_on is False:
        out.append("- prepfs has no sample cache yet, so its warm rows (2c, 2d, 2n) and 3d "
                   "measure outputs computed at open from a source already in the page cache, "
                   "not cached outputs; the warm and floor targets are about cached outputs.")
    elif cache_on:
        out.append("- prepfs runs with its sample cache on (see above): cold rows start with it "
                   "empty (their hits are outputs its background refill made ahead of the "
                   "reader during the run), warm rows and 3d come after one unmeasured pass; "
                   "the last column says how many of the row's outputs it served.")
    if pending:
        out.append("- Rows marked pending are scenarios of issue 3 that need work not yet "
                   "done; they are listed so the table shows the whole plan.")
    out.append("")
    if any(t["ratio"] is not None for t in tgt):
        out += ["## Targets", ""]
        rows = [[t["target"], t["cases"], fmt_ratio(t["ratio"]),
                 "-" if t["met"] is None else ("met" if t["met"] else "**missed**"),
                 t.get("note", "")]
                for t in tgt]
        out += [markdown_table(["target", "cases", "measured", "", "note"], rows), ""]
    rows = table_rows(report["cases"]) + pending
    out += ["## Results", "", markdown_table(TABLE_HEADER, rows), ""]
    for ch in charts:
        rel = os.path.relpath(ch, md_dir)
        out += [f"![{os.path.basename(ch)}]({rel})", ""]
    out += [
        "## How it is measured", "",
        "- samples/s: samples delivered to the consumer over the wall time from the first "
        "request to the last sample (building the dataset or pipeline excluded); the median of "
        "the runs, with the smallest and the largest.",
        "- CPU ms/sample: user + system CPU of the loader process, its threads and its worker "
        "processes, plus the prepfs daemon's for rows that read prepfs; the median of the runs.",
        "- peak mem: the largest, over the runs, of the summed memory of the loader process and "
        "its workers (PSS: pages shared by forked workers counted once; sampled 0.3 s and 1 s into "
        "each run, then every 2 s, so short peaks may be missed; the RSS sum where no PSS "
        "sample was taken) plus the prepfs daemon's RSS. RSS sums are in the JSON.",
        "- cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before each measured run, and prepfs "
        "remounted with an empty cache when the harness mounts it; warm: one unmeasured run "
        "first (the raw reader repeats its pass over the files for at least 1 s). "
        "vs torchvision / vs DALI: against 1a / 1b for cold rows, 2a / 2b otherwise (1a / 1b "
        "where the warm peers were not run).",
        f"- Raw JSON: `{os.path.relpath(report['json_path'], md_dir)}`.",
        "",
    ]
    return "\n".join(out)


def chart_label(case: dict) -> str:
    return (f"{case['id']}  {SHORT.get(case['loader'], case['loader'])} | "
            f"{case.get('chart_reads') or case['reads']}")


def write_charts(report: dict, prefix: str) -> List[str]:
    """PNG charts beside the JSON, one horizontal bar per case, grouped by scenario (cold,
    warm, floor), coloured by loader, with min-max whiskers. PREFIX-throughput.png: samples/s
    on a log scale, each bar labelled with its ratio to torchvision, each scenario's torchvision
    and DALI rates drawn as lines. PREFIX-cpu.png: CPU ms per sample on a linear scale, split
    into the loader's part and the prepfs daemon's (hatched). Returns the paths ([] without
    matplotlib or results)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        print("[bench] matplotlib missing: no charts", file=sys.stderr)
        return []
    cases = [c for c in report["cases"] if not c.get("error") and c.get("summary")]
    if not cases:
        return []
    order = {"cold": 0, "warm": 1, "floor": 2}
    cases = sorted(cases, key=lambda c: order.get(c["scenario"], 9))  # stable: plan order
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # one colour per loader and kind of source, the same in every report
    fixed = ["torchvision", "dali", "pil", "torchvision-ppm", "raw", "torch-npy", "raw tmpfs",
             "torchvision-ppm tmpfs"]

    def color_of(c: dict) -> str:
        key = c["loader"] + (" tmpfs" if "tmpfs" in c["reads"] else "")
        return colors[(fixed.index(key) if key in fixed else len(fixed)) % len(colors)]
    bar_colors = [color_of(c) for c in cases]
    # y positions, top to bottom, with a gap between scenarios
    ys, y, prev = [], 0.0, None
    for c in cases:
        if prev is not None and c["scenario"] != prev:
            y += 0.6
        ys.append(-y)
        y += 1
        prev = c["scenario"]
    groups = {scen: [yy for yy, c in zip(ys, cases) if c["scenario"] == scen] for scen in order}
    groups = {k: v for k, v in groups.items() if v}
    st = report.get("settings", {})
    m = report.get("machine", {})
    sub = f"{st.get('data_samples', '?')} images"
    if st.get("limit") and st.get("data_samples") and st["limit"] < st["data_samples"]:
        sub += f", {st['limit']} per run"
    sub += f", {len(st.get('cpus', []))} CPUs"
    if report.get("quick"):
        sub += ", quick run"
    load = (m.get("loadavg_before") or [0])[0]
    if load > 0.5:
        sub += f", busy machine (load {load:.1f})"
    all_ratios = ratios(report["cases"])

    def frame(ax, title):
        ax.set_yticks(ys)
        ax.set_yticklabels([chart_label(c) for c in cases], fontsize=8)
        for scen, sy in groups.items():
            ax.text(1.01, (max(sy) + min(sy)) / 2, SCENARIO_TITLES[scen],
                    transform=ax.get_yaxis_transform(), va="center", fontsize=9, rotation=-90)
        ax.set_title(f"{title}\n{sub}", fontsize=10)
        ax.grid(axis="x", which="major", alpha=0.3)

    paths = []
    height = 0.42 * len(cases) + 1.9

    # samples/s
    fig, ax = plt.subplots(figsize=(11, height))
    med = [c["summary"]["samples_per_s"]["median"] for c in cases]
    lo = [v - c["summary"]["samples_per_s"]["min"] for v, c in zip(med, cases)]
    hi = [c["summary"]["samples_per_s"]["max"] - v for v, c in zip(med, cases)]
    bars = ax.barh(ys, med, xerr=[lo, hi], capsize=2, height=0.8, color=bar_colors,
                   error_kw={"elinewidth": 0.8})
    labels = []
    for v, c in zip(med, cases):
        r = all_ratios.get(c["id"], {}).get("torchvision")
        lab = fmt_num(v, 0 if v >= 10 else 2)
        if r is not None and c["loader"] != "torchvision":
            lab += f"  ({fmt_ratio(r)})"
        labels.append(lab)
    ax.bar_label(bars, labels=labels, fontsize=8, padding=4)
    ax.set_xscale("log")
    ax.set_xlim(min(v for v in med if v > 0) / 2, max(v + h for v, h in zip(med, hi)) * 10)
    by_id = {c["id"]: c for c in report["cases"]}
    handles = []
    for scen, sy in groups.items():
        base = baseline_ids(report["cases"], scen)
        for key, style, name in (("torchvision", "--", "torchvision"),
                                 ("dali", ":", "DALI CPU")):
            cid = base.get(key)
            v = _median_sps(by_id, cid) if cid else None
            if v:
                ax.vlines(v, min(sy) - 0.5, max(sy) + 0.5, colors="0.25", linestyles=style,
                          linewidth=1)
    handles += [Line2D([], [], color="0.25", linestyle="--", label="torchvision rate of the "
                       "scenario (1a; 2a when run)"),
                Line2D([], [], color="0.25", linestyle=":", label="DALI CPU rate of the "
                       "scenario (1b; 2b when run)")]
    ax.legend(handles=handles, fontsize=7, loc="upper right", framealpha=0.9)
    frame(ax, "samples/s (median, whiskers min-max, log scale; higher is better)\n"
          "in brackets: x the torchvision rate of the same scenario")
    fig.tight_layout()
    path = f"{prefix}-throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    # CPU per sample, split into the loader's and the daemon's
    fig, ax = plt.subplots(figsize=(11, height))
    tot = [c["summary"]["cpu_s_per_sample"]["median"] * 1e3 for c in cases]
    fs = [min(t, (c["summary"].get("fs_cpu_s_per_sample") or 0.0) * 1e3)
          for t, c in zip(tot, cases)]
    own = [t - f for t, f in zip(tot, fs)]
    lo = [t - c["summary"]["cpu_s_per_sample"]["min"] * 1e3 for t, c in zip(tot, cases)]
    hi = [c["summary"]["cpu_s_per_sample"]["max"] * 1e3 - t for t, c in zip(tot, cases)]
    ax.barh(ys, own, height=0.8, color=bar_colors)
    bars = ax.barh(ys, fs, left=own, height=0.8, color=bar_colors, alpha=0.45, hatch="///",
                   edgecolor="white", xerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
    labels = [fmt_num(t, 2) + (f"  (prepfs {fmt_num(f, 2)})" if f > 0 else "")
              for t, f in zip(tot, fs)]
    ax.bar_label(bars, labels=labels, fontsize=8, padding=4)
    ax.set_xlim(0, max(t + h for t, h in zip(tot, hi)) * 1.4)
    if any(f > 0 for f in fs):
        ax.legend(handles=[Patch(facecolor="0.5", label="loader process and its workers"),
                           Patch(facecolor="0.5", alpha=0.45, hatch="///", edgecolor="white",
                                 label="prepfs daemon")],
                  fontsize=7, loc="lower right", framealpha=0.9)
    frame(ax, "CPU ms per sample, all processes of the case (median; lower is better)")
    fig.tight_layout()
    path = f"{prefix}-cpu.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths


# --------------------------------------------------------------------------------------------
# Running


def machine_info() -> dict:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0.0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) / 1024 / 1024
    except (OSError, ValueError, IndexError):
        pass
    versions = {}
    try:
        import importlib.metadata as md
        for p in ("torch", "torchvision", "nvidia-dali-cuda120", "pillow", "numpy"):
            try:
                versions[p] = md.version(p)
            except md.PackageNotFoundError:
                versions[p] = None
    except ImportError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": versions,
        "loadavg_before": list(os.getloadavg()),
    }


def dataset_info(data: str) -> dict:
    classes, samples = loaders.list_image_folder(data)
    total = sum(os.stat(p).st_size for p, _ in samples)
    return {"data_samples": len(samples), "data_classes": len(classes),
            "data_mb": total / 1e6, "data_mean_kb": total / len(samples) / 1e3}


class RunSampler:
    """During one run, from outside it: the peak summed PSS of the loader's process tree
    (0.3 s and 1 s into the run, then every 2 s: reading PSS costs tens of ms per torch
    process, too much to do often or inside the run; None for runs shorter than 0.3 s) and the
    peak RSS of the prepfs daemon (every 0.1 s)."""

    def __init__(self, child_pid: int, fs_pid: Optional[int]):
        self.child_pid, self.fs_pid = child_pid, fs_pid
        self.peak_pss_mb = 0.0
        self.fs_peak_rss_mb = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _loop(self) -> None:
        tick = 0
        while not self._stop.is_set():
            if tick in (3, 10) or tick % 20 == 10:  # 0.3 s and 1 s in, then every 2 s
                self.peak_pss_mb = max(self.peak_pss_mb,
                                       loaders.tree_memory_mb(self.child_pid, use_pss=True))
            if self.fs_pid:
                self.fs_peak_rss_mb = max(self.fs_peak_rss_mb,
                                          loaders.tree_memory_mb(self.fs_pid, use_pss=False))
            tick += 1
            self._stop.wait(0.1)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


def run_case(case: Case, args, cpus: List[int], src: Optional[PrepfsSource],
             verbose: bool = False) -> dict:
    """All runs of one case in one child process; returns the case's result record."""
    record = dataclasses.asdict(case)
    record.update(runs=[], warmup_runs=[], error=None)
    cmd = [args.python, os.path.join(HERE, "loaders.py"), "run", "--loader", case.loader,
           "--data", case.data, "--workers", str(args.workers), "--reps", str(args.reps),
           "--warmup", str(case.warmup), "--sync", "--cpus", ",".join(map(str, cpus))]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if case.loader.startswith("raw") and not case.cold:
        cmd += ["--min-seconds", "1"]  # a warm pass over cached files is over in milliseconds
    errf = tempfile.TemporaryFile(mode="w+")
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf,
                             text=True, bufsize=1)
    deadline = time.monotonic() + args.timeout
    timer = threading.Timer(args.timeout, child.kill)
    timer.start()
    fs_cpu0 = 0.0
    cache0: Optional[Dict[str, int]] = None
    sampler: Optional[RunSampler] = None
    try:
        for line in child.stdout:
            if line.startswith(loaders.READY_TAG):
                info = json.loads(line[len(loaders.READY_TAG):])
                if case.cold and not info["warmup"]:
                    if case.prepfs and src is not None and src.can_empty_cache:
                        src.fresh()
                    info["page_cache_dropped"] = loaders.drop_page_cache()
                fs_pid = src.pid if (case.prepfs and src is not None) else None
                fs_cpu0 = proc_cpu_seconds(fs_pid) if fs_pid else 0.0
                cache0 = cache_counts(src.stats()) if fs_pid else None
                sampler = RunSampler(child.pid, fs_pid)
                sampler.start()
                record.setdefault("_pending", []).append(info)
                child.stdin.write("go\n")
                child.stdin.flush()
            elif line.startswith(loaders.RESULT_TAG):
                res = json.loads(line[len(loaders.RESULT_TAG):])
                if sampler:
                    sampler.stop()
                    res["peak_pss_mb"] = sampler.peak_pss_mb or None
                    if sampler.fs_pid:
                        res["fs_cpu_s"] = proc_cpu_seconds(sampler.fs_pid) - fs_cpu0
                    if cache0 is not None and src is not None:
                        c1 = cache_counts(src.stats())
                        if c1 is not None:
                            res["cache"] = {k: c1[k] - cache0[k] for k in c1}
                        res["fs_peak_rss_mb"] = sampler.fs_peak_rss_mb
                    sampler = None
                pending = record["_pending"].pop(0) if record.get("_pending") else {}
                res["page_cache_dropped"] = pending.get("page_cache_dropped")
                (record["warmup_runs"] if res["extra"].get("warmup") else record["runs"]).append(
                    res)
                if verbose:
                    tag = "warm-up" if res["extra"].get("warmup") else "run"
                    print(f"[bench]     {case.id} {tag}: {res['samples']} samples in "
                          f"{res['wall_s']:.2f} s = {res['samples_per_s']:.1f}/s, CPU "
                          f"{res['cpu_s'] + res.get('fs_cpu_s', 0):.2f} s", flush=True)
        child.wait()
    finally:
        timer.cancel()
        if sampler:
            sampler.stop()
        if child.poll() is None:
            child.kill()
            child.wait()
    record.pop("_pending", None)
    if child.returncode != 0 or len(record["runs"]) < args.reps:
        errf.seek(0)
        tail = errf.read()[-3000:]
        why = "timed out" if time.monotonic() >= deadline else f"exit status {child.returncode}"
        last = [ln for ln in tail.strip().splitlines() if ln.strip()][-1:] or [why]
        record["error"] = f"{last[0]} ({why})"
        record["stderr_tail"] = tail
    if record["runs"]:
        record["summary"] = summarize(record["runs"])
    if case.prepfs and src is not None:
        record["prepfs_stats"] = src.stats()
    return record


def progress_line(rec: dict) -> str:
    head = f"[bench] {rec['id']:<3} {rec['scenario']:<5} {SHORT.get(rec['loader'], rec['loader'])}" \
           f" on {rec['reads']}"
    if rec.get("error") and not rec.get("summary"):
        return f"{head}: FAILED: {rec['error']}"
    s = rec["summary"]
    sp = s["samples_per_s"]
    mem = s["peak_pss_mb"] if s.get("peak_pss_mb") is not None else s["peak_rss_mb"]
    line = (f"{head}: {fmt_num(sp['median'], 1)} samples/s ({fmt_num(sp['min'], 1)} - "
            f"{fmt_num(sp['max'], 1)}), {s['cpu_s_per_sample']['median'] * 1e3:.2f} ms CPU/sample,"
            f" {fmt_num(mem)} MB  [{s['runs']} x {s['samples_per_run']}]")
    if rec.get("error"):
        line += f"  (partly failed: {rec['error']})"
    return line


def copy_floor(src_dir: str, dst_dir: str, limit: Optional[int]) -> int:
    """Copy (the same subset of) the files of src_dir, keeping their relative paths."""
    files = loaders.pick(loaders.list_files(src_dir), limit)
    for p in files:
        out = os.path.join(dst_dir, os.path.relpath(p, src_dir))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(p, "rb") as f, open(out, "wb") as g:
            g.write(f.read())
    return len(files)


def _show_path(p: str) -> str:
    """`p` relative to the repository when it is inside it."""
    rel = os.path.relpath(p, ROOT)
    return p if rel.startswith("..") else rel


def main(argv: Optional[Sequence[str]] = None) -> int:
    today = _dt.date.today().isoformat()
    ap = argparse.ArgumentParser(description="prepfs benchmark driver (issue 3)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", help="JPEG ImageFolder tree (class dirs); required unless "
                                    "--report-only")
    ap.add_argument("--report-only", metavar="JSON",
                    help="run nothing: rewrite the charts and the Markdown of an earlier "
                         "results JSON (with this version's report code), and the JSON itself")
    g = ap.add_argument_group("prepfs (pick one; none: the peers only)")
    g.add_argument("--prepfs-bin", help="mount prepfs with this binary (target/release/prepfs)")
    g.add_argument("--prepfs-config", default=os.path.join(ROOT, "mount-configs",
                                                           "imagenet.yaml"),
                   help="mount config for --prepfs-bin")
    g.add_argument("--mountpoint", default=f"/tmp/prepfs-bench-{os.getpid()}",
                   help="where --prepfs-bin mounts")
    g.add_argument("--prepfs-mount", help="an already mounted prepfs over --data")
    g.add_argument("--augmented-dir",
                   help="a plain directory of augmented PPMs standing in for augmented/")
    g.add_argument("--prepfs-npy-config",
                   help="with --prepfs-bin: also mount this npy float32 config (e.g. "
                        "mount-configs/imagenet-npy.yaml) for rows 1n/2n")
    g.add_argument("--augmented-npy-dir",
                   help="with --augmented-dir: a plain directory of augmented .npy files for "
                        "rows 1n/2n")
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    ap.add_argument("--limit", type=int, default=None,
                    help="samples per run (default: 512 with --quick, else the whole set)")
    ap.add_argument("--reps", type=int, default=None,
                    help="measured runs per case (default: 3 with --quick, else 5)")
    ap.add_argument("--workers", type=int, default=2, help="loader workers / threads")
    ap.add_argument("--cores", type=int, default=2, help="pin everything to this many CPUs")
    ap.add_argument("--only", default=None, help="comma-separated case ids to run, e.g. 1a,1b")
    ap.add_argument("--out", default=os.path.join(HERE, "results", f"{today}.json"))
    ap.add_argument("--md", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--charts-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--python", default=sys.executable, help="interpreter for the loaders")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per case")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per run too")
    ap.add_argument("--invoked-as", default=None,
                    help="the command a user ran (e.g. `make bench`), for the report")
    ap.add_argument("--build-info", default=None, help="which prepfs build, for the report")
    ap.add_argument("--data-info", default=None, help="how the data set was made, for the report")
    ap.add_argument("--log-dir", default=None,
                    help="keep the prepfs daemons' logs here (prepfs-ppm.log, prepfs-npy.log; "
                         "appended over remounts); default: temporary files, deleted")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            report = json.load(f)
        write_report(report, args.report_only, args.charts_dir, args.md)
        return 0
    if not args.data:
        ap.error("--data is required")
    if sum(x is not None for x in (args.prepfs_bin, args.prepfs_mount, args.augmented_dir)) > 1:
        ap.error("give at most one of --prepfs-bin, --prepfs-mount, --augmented-dir")
    if args.prepfs_npy_config and not args.prepfs_bin:
        ap.error("--prepfs-npy-config needs --prepfs-bin")
    if args.augmented_npy_dir and not args.augmented_dir:
        ap.error("--augmented-npy-dir needs --augmented-dir")
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.limit is None and args.quick:
        args.limit = 512
    data = os.path.abspath(args.data)
    # SIGTERM / SIGHUP (e.g. from bench/run.sh's trap) unwind like Ctrl-C, so that every
    # `finally` runs: the loader child killed, prepfs unmounted, the tmpfs copy removed.
    def _interrupt(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    cpus = sorted(os.sched_getaffinity(0))[: max(1, args.cores)]
    os.sched_setaffinity(0, set(cpus))  # the driver too: all on the same cores

    machine = machine_info()
    dinfo = dataset_info(data)
    n = dinfo["data_samples"] if not args.limit else min(args.limit, dinfo["data_samples"])
    print(f"[bench] {dinfo['data_samples']} images in {data}; {args.reps} runs x {n} samples per "
          f"case; CPUs {cpus}; load average {machine['loadavg_before'][0]:.2f}", flush=True)
    if machine["loadavg_before"][0] > 0.5:
        print("[bench] warning: the machine is busy; throughput figures will be low",
              flush=True)

    src: Optional[PrepfsSource] = None
    npy_src: Optional[PrepfsSource] = None
    prepfs_desc = "not measured"
    floor_dir = None
    aug_reads = "prepfs augmented/"
    npy_reads = "prepfs augmented/ (npy)"
    if args.prepfs_bin:
        binary = os.path.abspath(args.prepfs_bin)

        def mounter(config: str, mnt: str, key: str) -> Callable[[], PrepfsMount]:
            log = None
            if args.log_dir:
                os.makedirs(args.log_dir, exist_ok=True)
                log = os.path.join(os.path.abspath(args.log_dir), f"prepfs-{key}.log")

            def restart() -> PrepfsMount:
                return mount_prepfs(binary, config, data, mnt, cpus=cpus, log_path=log)
            return restart

        configs = [("ppm", os.path.abspath(args.prepfs_config), os.path.abspath(args.mountpoint))]
        if args.prepfs_npy_config:
            configs.append(("npy", os.path.abspath(args.prepfs_npy_config),
                            os.path.abspath(args.mountpoint) + "-npy"))
        for key, config, mnt in configs:
            print(f"[bench] prepfs: {_show_path(binary)} mount {_show_path(config)} at {mnt}",
                  flush=True)
            s = PrepfsSource("driver-mount", os.path.join(mnt, "augmented"), None,
                             mounter(config, mnt, key))
            if key == "ppm":
                src = s
            else:
                npy_src = s
        prepfs_desc = (f"mounted by the harness (`{_show_path(binary)} mount "
                       + " / ".join(_show_path(c) for _, c, _ in configs)
                       + "`), remounted with an empty cache for cold runs")
    elif args.prepfs_mount:
        src = PrepfsSource("external-mount",
                           os.path.join(os.path.abspath(args.prepfs_mount), "augmented"))
        prepfs_desc = (f"an existing mount at {args.prepfs_mount} (its cache not emptied for "
                       f"cold runs)")
    elif args.augmented_dir:
        src = PrepfsSource("stand-in", os.path.abspath(args.augmented_dir))
        aug_reads = "PPM files (stand-in, no prepfs)"
        prepfs_desc = (f"not measured: rows 1c/1d/2c/2d/3 read a plain directory of augmented "
                       f"PPMs ({args.augmented_dir}) in its place")
        if args.augmented_npy_dir:
            npy_src = PrepfsSource("stand-in", os.path.abspath(args.augmented_npy_dir))
            npy_reads = ".npy files (stand-in, no prepfs)"
    report = {
        "schema": 1,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(["python", os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)]
                              + list(argv if argv is not None else sys.argv[1:])),
        "quick": args.quick,
        "invoked_as": args.invoked_as,
        "build_info": args.build_info,
        "machine": machine,
        "settings": {
            "data": data, **dinfo, "data_info": args.data_info, "reps": args.reps,
            "limit": args.limit,
            "samples_desc": f"{n} samples" + (" (the whole set)" if n == dinfo["data_samples"]
                                              else " (a fixed random subset)"),
            "workers": args.workers, "batch_size": loaders.BATCH_SIZE, "cpus": cpus,
            "prepfs": {"kind": src.kind if src else None, "desc": prepfs_desc,
                       "augmented": src.augmented if src else None},
        },
        "cases": [],
    }
    sources = {k: v for k, v in (("ppm", src), ("npy", npy_src)) if v is not None}
    report["settings"]["prepfs"]["augmented_npy"] = npy_src.augmented if npy_src else None
    try:
        for s in sources.values():
            s.ensure()
            if not os.path.isdir(s.augmented):
                raise PrepfsError(f"{s.augmented} is not a directory")
        cache_on = None
        if src is not None and src.kind != "stand-in":
            st = src.stats()
            if st is not None:
                # prepfs reports its cache under "cache" (memory 0: disabled); none: no cache
                mem = (st.get("cache") or {}).get("memory") or 0
                cache_on = mem > 0
            report["settings"]["prepfs"]["stats"] = st
        report["settings"]["prepfs"]["cache_on"] = cache_on
        if src is not None:
            floor_dir = tempfile.mkdtemp(prefix=f"prepfs-bench-floor-{os.getpid()}-",
                                         dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        cases = plan(data, src.augmented if src else None, aug_reads, floor_dir,
                     prepfs=src is not None and src.kind != "stand-in", quick=args.quick,
                     npy_augmented=npy_src.augmented if npy_src else None, npy_reads=npy_reads,
                     cache_on=cache_on)
        if args.only:
            keep = set(args.only.split(","))
            cases = [c for c in cases if c.id in keep]
        floor_ready = False
        for case in cases:
            # one prepfs daemon at a time: its cache should have the memory to itself
            for key, s in sources.items():
                if key != case.source or not case.prepfs:
                    s.close()
            case_src = sources.get(case.source) if case.prepfs else None
            if case_src is not None:
                case_src.ensure()
            if case.data == floor_dir and not floor_ready:
                src.ensure()
                k = copy_floor(src.augmented, floor_dir, args.limit)
                src.close()
                print(f"[bench] copied {k} augmented outputs to {floor_dir} for the floor",
                      flush=True)
                floor_ready = True
            rec = run_case(case, args, cpus, case_src, verbose=args.verbose)
            report["cases"].append(rec)
            print(progress_line(rec), flush=True)
    except PrepfsError as e:
        print(f"[bench] error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt as e:
        print(f"[bench] interrupted ({e or 'SIGINT'}); unmounting, no report written",
              file=sys.stderr, flush=True)
        return 130
    finally:
        for s in sources.values():
            s.close()
        if floor_dir:
            shutil.rmtree(floor_dir, ignore_errors=True)

    drops = [r.get("page_cache_dropped") for c in report["cases"] for r in c["runs"]
             if c["cold"]]
    report["page_cache_drop"] = ("not needed" if not drops else "yes" if all(drops)
                                 else "no (drop_caches refused)" if not any(drops)
                                 else "partly")
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    write_report(report, args.out, args.charts_dir, args.md)
    return 1 if any(c.get("error") for c in report["cases"]) else 0


def write_report(report: dict, out: str, charts_dir: str, md: str) -> None:
    """Targets and ratios from the cases, then the JSON, the charts and BENCHMARKS.md."""
    report["targets"] = targets(report["cases"],
                                report["settings"].get("prepfs", {}).get("cache_on"))
    for c in report["cases"]:
        c["ratios"] = ratios(report["cases"])[c["id"]]
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    report["json_path"] = out
    charts_dir = os.path.abspath(charts_dir)
    os.makedirs(charts_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(out))[0]
    charts = write_charts(report, os.path.join(charts_dir, stem))
    report["charts"] = charts
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    md = os.path.abspath(md)
    with open(md, "w") as f:
        f.write(render_markdown(report, charts, os.path.dirname(md)))
    print(f"[bench] wrote {out}, {md}" + "".join(f", {c}" for c in charts), flush=True)
    for t in report["targets"]:
        if t["ratio"] is not None:
            print(f"[bench] target {t['target']}: {fmt_ratio(t['ratio'])} "
                  f"({'met' if t['met'] else 'missed'})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
