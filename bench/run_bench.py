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
# Mount configs derived from the base one (pure text functions: the harness needs no YAML
# library), and the wait for the cache's background refill (its decision is a pure function)

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
               "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_size(text: str) -> float:
    """prepfs's size syntax: a number of bytes, or with B, KB, MB, GB (powers of ten) or KiB,
    MiB, GiB; a rate may end in "/s" ("10MB/s" -> 10e6). ValueError if it is none of those."""
    t = str(text).strip().replace(" ", "")
    if t.endswith("/s"):
        t = t[:-2]
    i = len(t)
    while i and not (t[i - 1].isdigit() or t[i - 1] == "."):
        i -= 1
    num, unit = t[:i], t[i:].lower()
    if not num or unit not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r}")
    return float(num) * _SIZE_UNITS[unit]


def fmt_bytes(n: Optional[float]) -> str:
    """Decimal units, as prepfs's configs and the data set's size are given."""
    if n is None:
        return "-"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n:.0f} B"


def strip_top_level(text: str, keys: Sequence[str]) -> str:
    """`text` (YAML) without the top-level sections `keys`: each key's line and the indented
    (or blank) lines that follow it. A line at column 0 (another key, a comment) ends one."""
    out, skipping = [], False
    for line in text.splitlines():
        top = line[:1] not in (" ", "\t", "")
        if top:
            skipping = any(line.startswith(k + ":") for k in keys)
        if not skipping:
            out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def derive_config(base: str, cache: Optional[str] = None, source: Optional[str] = None,
                  read_limit: Optional[str] = None, note: str = "") -> str:
    """A mount config from the base config's text: its `cache:` section replaced by `cache`
    (a flow mapping such as "{ memory: 7250000, split: auto }"; None: no cache at all), and,
    with `read_limit`, its `source:` replaced by `{ path: SOURCE, read_limit: LIMIT }` (the
    mount's --source overrides the path; the limit stays)."""
    keys = ["cache"] + (["source"] if read_limit else [])
    out = strip_top_level(base, keys)
    out += f"\n# added by bench/run_bench.py{': ' + note if note else ''}\n"
    if read_limit:
        out += f"source: {{ path: {json.dumps(source or '.')}, read_limit: {read_limit} }}\n"
    if cache:
        out += f"cache: {cache}\n"
    return out


def cache_of_share(data_bytes: float, share: float) -> int:
    """Seneca's convention: "X% of the data cached" is a cache X% the size of the data set on
    storage (its encoded bytes), whatever forms the cache then holds."""
    return max(1, int(data_bytes * share))


def cache_memory(stats: Optional[dict]) -> int:
    """The mount's cache budget in bytes from its stats.json (0: no cache, or not known)."""
    try:
        return int(((stats or {}).get("cache") or {}).get("memory") or 0)
    except (TypeError, ValueError):
        return 0


def aug_entries(stats: Optional[dict]) -> Optional[int]:
    """cache.augmented.entries of a stats.json, or None."""
    try:
        return int(((stats or {}).get("cache") or {}).get("augmented", {}).get("entries"))
    except (TypeError, ValueError, AttributeError):
        return None


# Before a measured warm (or floor) run: poll stats.json until the augmented cache has stopped
# growing for REFILL_STABLE_S, or holds every sample, or REFILL_MAX_S have passed.
REFILL_STABLE_S = 1.5
REFILL_MAX_S = 90.0
REFILL_POLL_S = 0.25


def refill_decision(history: Sequence[tuple], target: Optional[int],
                    stable_s: float = REFILL_STABLE_S,
                    max_s: float = REFILL_MAX_S) -> Optional[str]:
    """Whether the wait for the refill is over, from the polls so far: `history` is
    [(seconds since the wait began, augmented entries or None), ...] in order. Returns None
    (keep waiting) or why it is over: "full" (entries >= target, the number of samples),
    "stable" (no new high for `stable_s`), "timeout" (`max_s` passed), "no-stats" (no figure
    after 5 polls: nothing to wait for)."""
    if not history:
        return None
    now = history[-1][0]
    seen = [(t, e) for t, e in history if e is not None]
    if not seen:
        return "no-stats" if len(history) >= 5 else None
    if target and seen[-1][1] >= target:
        return "full"
    if now >= max_s:
        return "timeout"
    high, since = None, seen[0][0]
    for t, e in seen:
        if high is None or e > high:
            high, since = e, t
    if now - since >= stable_s:
        return "stable"
    return None


def wait_for_refill(stats: Callable[[], Optional[dict]], target: Optional[int] = None,
                    stable_s: float = REFILL_STABLE_S, max_s: float = REFILL_MAX_S,
                    poll_s: float = REFILL_POLL_S,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> dict:
    """Polls `stats` (a mount's stats.json) until refill_decision says the refill has caught
    up. Returns {"waited_s", "reason", "augmented_entries_start" (at the end of the wait: the
    measured run starts with these), "augmented_entries_before" (when the wait began),
    "target"}. `target` defaults to the mount's sample count."""
    t0 = clock()
    history = []
    first = None
    while True:
        st = stats()
        if target is None and st and isinstance(st.get("samples"), int):
            target = st["samples"]
        e = aug_entries(st)
        if first is None:
            first = e
        history.append((clock() - t0, e))
        why = refill_decision(history, target, stable_s, max_s)
        if why:
            return {"waited_s": round(clock() - t0, 3), "reason": why,
                    "augmented_entries_start": e, "augmented_entries_before": first,
                    "target": target}
        sleep(poll_s)


# --------------------------------------------------------------------------------------------
# The plan


@dataclasses.dataclass
class Case:
    id: str  # "1a": scenario number + loader letter, as in issue 3
    scenario: str  # "cold", "warm", "warm25" (2p), "floor"
    loader: str  # a key of loaders.LOADERS
    label: str  # the loader, for people
    reads: str  # what it reads, for people
    data: str  # the directory it reads
    cold: bool = False  # drop the page cache (and empty prepfs's cache) before each run
    warmup: int = 0  # unmeasured runs first
    prepfs: bool = False  # reads through prepfs: account the daemon's CPU and memory
    source: str = "ppm"  # which prepfs mount it reads: "ppm", "npy" (the output format) or
    # "ppm25" (the PPM config with a cache of 25% of the data set, scenario 2p)
    chart_reads: str = ""  # a shorter `reads` for chart labels ("": the same)


SCENARIO_TITLES = {
    "cold": "1 cold",
    "warm": "2 warm",
    "warm25": "2p warm, 25% cache",
    "floor": "3 floor",
    "jobs": "4 concurrent jobs",
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
         npy_reads: str = "", cache_on: Optional[bool] = None,
         augmented25: Optional[str] = None, reads25: str = "") -> List[Case]:
    """The cases to run, in order: cold ones first, then warm, then the floor. Quick runs
    leave out the PIL peer, the warm peers (their warm rate is their cold rate: they are
    CPU-bound; ratios fall back to the cold rows) and 3g. With `npy_augmented` (prepfs with
    npy float32 output), 1n and 2n: torch over np.load with no transform at all.

    cache_on: whether the prepfs mount has a sample cache (None: unknown, or not prepfs).
    Without one (False), "warm" for prepfs rows only means the source JPEGs are in the page
    cache, and 3d reads outputs computed at open, not cached ones: their `reads` say so.

    augmented25: `augmented/` of a second PPM mount whose cache is 25% of the data set
    (scenario 2p): rows 2pc and 2pd, the loaders of 2c and 2d after a warm-up pass, right after
    the warm rows (quick runs too)."""
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
    if augmented25:
        for letter, loader in ours:
            cases.append(Case("2p" + letter, "warm25", loader, LABELS[loader],
                              reads25 + ", after a warm-up pass", augmented25, warmup=1,
                              prepfs=prepfs, source="ppm25", chart_reads=reads25))
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
        "refill_wait": refill_summary(runs),
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
    "warm25": (("2a", "1a"), ("2b", "1b")),
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


def targets(results: Sequence[dict], cache_on: Optional[bool] = None,
            jobs: Optional[dict] = None) -> List[dict]:
    """The issue's targets: measured ratio, whether it is met (None: not measured), and a note
    saying what the measured cases stand for where that differs from the target's premise
    (no prepfs cache yet; warm peers left out by --quick); then scenario 4's (jobs_targets).
    "shown" is the measured value as the report prints it."""
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
                    "shown": fmt_ratio(r),
                    "met": None if r is None else r >= want, "note": "; ".join(notes)})
    return out + jobs_targets(jobs)


def pending_rows(cache_on: Optional[bool], done: Sequence[str] = (),
                 why: Optional[str] = None) -> List[List[str]]:
    """Table rows for the scenarios of issue 3 that were not run (2p: rows 2pc/2pd; 4: rows
    4a-4c; `done` lists the ids that were), as wide as TABLE_HEADER. `why`: the reason to
    show (default: what each needs)."""
    blank = [""] * (len(TABLE_HEADER) - 5)
    rows = []
    if not any(d.startswith("2p") for d in done):
        rows.append(["2p", "2 warm, 25% cache", "prepfs with a cache of 25% of the set",
                     "prepfs augmented/",
                     f"pending: {why}" if why else
                     "pending: needs the harness to mount prepfs (--prepfs-bin)" if cache_on
                     else "pending: needs a prepfs cache"] + blank)
    if not any(d.startswith("4") for d in done):
        rows.append(["4", "4 concurrent jobs", "3 jobs x 2 epochs, cache 25%, read-limited "
                     "source: torchvision, prepfs without jobs, prepfs with ODS",
                     "makespan, hit rate",
                     f"pending: {why}" if why else
                     "pending: needs the harness to mount prepfs (--prepfs-bin)"] + blank)
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


# --------------------------------------------------------------------------------------------
# Scenario 4, concurrent jobs: figures of one run and of a variant (pure functions)

# The variants, in order: (id, key, loader of each job, label, what the jobs read)
JOB_VARIANTS = [
    ("4a", "torchvision", "job-torchvision",
     "torchvision ImageFolder + DataLoader, full transform",
     "prepfs encoded/ as storage limited to {R} (no cache), page cache dropped per file"),
    ("4b", "prepfs", "job-ppm", "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
     "prepfs augmented/ (no jobs), {C} cache, source limited to {R}"),
    ("4c", "prepfs-ods", "job-ppm", "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
     "prepfs jobs/job<i>/augmented/ (ODS), {C} cache, source limited to {R}"),
    ("4d", "prepfs-ods-tuned", "job-ppm",
     "torchvision ImageFolder + DataLoader, ToTensor + Normalize",
     "prepfs jobs/job<i>/augmented/ (ODS), {C} cache as README advises for concurrent jobs "
     "(policy: lru, consumer_samples_per_s: {T}), source limited to {R}"),
]
SENECA = {"makespan_reduction": 0.45, "hit_rate": 0.54, "cached_share": 0.20}


def makespan(jobs: Sequence[dict]) -> Optional[float]:
    """From the first job's start to the last job's end (t_start / t_end on one clock)."""
    starts = [j["t_start"] for j in jobs if j.get("t_start") is not None]
    ends = [j["t_end"] for j in jobs if j.get("t_end") is not None]
    if not starts or not ends or len(ends) < len(jobs):
        return None
    return max(ends) - min(starts)


def view_hits(st0: Optional[dict], st1: Optional[dict],
              view: str = "augmented") -> Dict[str, Optional[float]]:
    """Hits and misses of a top-level view between two stats.json snapshots (the opens served
    from a cache form without reading the source, and the others), and their rate."""
    def get(st, k):
        return int((((st or {}).get("views") or {}).get(view) or {}).get(k) or 0)
    h = get(st1, "hits") - get(st0, "hits")
    m = get(st1, "misses") - get(st0, "misses")
    return {"hits": h, "misses": m, "hit_rate": h / (h + m) if h + m else None}


def merge_job_stats(known: Dict[str, dict], stats: Optional[dict]) -> Dict[str, dict]:
    """Keeps the latest figures of every job seen in stats.json's jobs.active (a job that
    retires drops out of it; its last figures stay here)."""
    for j in (((stats or {}).get("jobs") or {}).get("active") or []):
        if isinstance(j, dict) and j.get("name"):
            known[j["name"]] = j
    return known


def job_hits(jobs: Sequence[dict]) -> Dict[str, Optional[float]]:
    """Summed over the jobs' stats: hits in every form (augmented, decoded, encoded: served
    without reading the source) and misses, and their rate."""
    h = m = 0
    for j in jobs:
        hits = j.get("hits") or {}
        h += sum(int(hits.get(k) or 0) for k in ("augmented", "decoded", "encoded"))
        m += int(j.get("misses") or 0)
    return {"hits": h, "misses": m, "hit_rate": h / (h + m) if h + m else None}


def jobs_run_record(variant: str, jobs: Sequence[dict], st0: Optional[dict],
                    st1: Optional[dict], fs_cpu_s: float,
                    job_stats: Optional[Dict[str, dict]] = None,
                    expected_source_bytes: Optional[float] = None) -> dict:
    """One run of a variant: `jobs` are the jobs' RunResults (JSON), in job order; st0/st1 the
    mount's stats.json before the start and after the last job's end; fs_cpu_s the daemon's
    CPU over the run; job_stats the per-job figures of prepfs (ODS runs)."""
    samples = sum(j.get("samples") or 0 for j in jobs)
    loader_cpu = sum(j.get("cpu_s") or 0.0 for j in jobs)
    src = None
    if st0 is not None and st1 is not None:
        src = int(st1.get("source_bytes_read") or 0) - int(st0.get("source_bytes_read") or 0)
    if variant == "torchvision":
        hit = {"hits": 0, "misses": samples, "hit_rate": 0.0}
        hit_from = "none: no cache by construction"
    elif variant.startswith("prepfs-ods"):
        hit = job_hits(list((job_stats or {}).values()))
        hit_from = "jobs.active[].hits / (hits + misses), summed over the jobs"
    else:
        hit = view_hits(st0, st1, "augmented")
        hit_from = "views.augmented hits / (hits + misses), deltas over the run"
    ms = makespan([j.get("extra", j) for j in jobs])
    rec = {
        "jobs": [{"job": i, "t_start": (j.get("extra") or {}).get("t_start"),
                  "t_end": (j.get("extra") or {}).get("t_end"), "wall_s": j.get("wall_s"),
                  "samples": j.get("samples"), "cpu_s": j.get("cpu_s"),
                  "epoch_walls": (j.get("extra") or {}).get("epoch_walls"),
                  "peak_rss_mb": j.get("peak_rss_mb")}
                 for i, j in enumerate(jobs)],
        "makespan_s": ms, "samples": samples,
        "samples_per_s": samples / ms if ms else None,
        "loader_cpu_s": loader_cpu, "fs_cpu_s": fs_cpu_s, "cpu_s": loader_cpu + fs_cpu_s,
        "source_bytes_read": src, **hit, "hit_from": hit_from,
    }
    if expected_source_bytes and src is not None:
        rec["expected_source_bytes"] = expected_source_bytes
        rec["source_read_share"] = src / expected_source_bytes
    if job_stats:
        rec["job_stats"] = [{k: v for k, v in js.items() if k != "state_bytes"}
                            for _, js in sorted(job_stats.items())]
    return rec


def summarize_jobs(runs: Sequence[dict]) -> dict:
    """A variant over its runs: makespan median/min/max, each job's wall time (median over the
    runs, by job index), the hit rate, source bytes, CPU seconds, samples/s (all jobs' samples
    over the makespan), medians; every figure None where not measured."""
    def med(key):
        vals = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(vals) if vals else None
    n_jobs = max((len(r["jobs"]) for r in runs), default=0)
    walls = []
    for i in range(n_jobs):
        w = [r["jobs"][i]["wall_s"] for r in runs
             if i < len(r["jobs"]) and r["jobs"][i].get("wall_s") is not None]
        walls.append(statistics.median(w) if w else None)
    cpu_per = [r["cpu_s"] / r["samples"] for r in runs if r.get("samples")]
    return {
        "makespan_s": spread([r.get("makespan_s") for r in runs]),
        "samples_per_s": spread([r.get("samples_per_s") for r in runs]),
        "job_wall_s": walls,
        "hit_rate": med("hit_rate"),
        "source_bytes_read": med("source_bytes_read"),
        "source_read_share": med("source_read_share"),
        "cpu_s": med("cpu_s"), "loader_cpu_s": med("loader_cpu_s"), "fs_cpu_s": med("fs_cpu_s"),
        "cpu_s_per_sample": statistics.median(cpu_per) if cpu_per else None,
        "samples": med("samples"),
        "runs": len(runs),
    }


def _variant(jobs: Optional[dict], vid: str) -> Optional[dict]:
    for v in (jobs or {}).get("variants") or []:
        if v.get("id") == vid and v.get("summary") and not v.get("error"):
            return v
    return None


def _median_makespan(jobs: Optional[dict], vid: str) -> Optional[float]:
    v = _variant(jobs, vid)
    return v["summary"]["makespan_s"]["median"] if v else None


def makespan_reduction(jobs: Optional[dict], vid: str, base: str = "4a") -> Optional[float]:
    """1 - makespan(vid) / makespan(base), medians: 0.45 is "45% less makespan"."""
    a, b = _median_makespan(jobs, vid), _median_makespan(jobs, base)
    if a is None or not b:
        return None
    return 1.0 - a / b


def fmt_pct(x: Optional[float], signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.0f}%" if signed else f"{x * 100:.0f}%"


def jobs_rows(jobs: Optional[dict]) -> List[List[str]]:
    """Rows of the main table for scenario 4 (as wide as TABLE_HEADER): samples/s is all the
    jobs' samples over the makespan; vs torchvision is against 4a; the last column the hit
    rate."""
    rows = []
    base = _variant(jobs, "4a")
    base_sps = base["summary"]["samples_per_s"]["median"] if base else None
    st = (jobs or {}).get("settings") or {}
    head_label = f"{st.get('jobs', 3)} x "
    for v in (jobs or {}).get("variants") or []:
        head = [v["id"], SCENARIO_TITLES["jobs"], head_label + v["label"]
                + f", {st.get('epochs', 2)} epochs each", v["reads"]]
        if v.get("error") and not v.get("summary"):
            rows.append(head + [f"failed: {v['error'].splitlines()[0][:80]}"]
                        + [""] * (len(TABLE_HEADER) - 5))
            continue
        s = v["summary"]
        sps = s["samples_per_s"]
        cpu = s.get("cpu_s_per_sample")
        hit = s.get("hit_rate")
        rows.append(head + [
            fmt_num(sps["median"]),
            f"{fmt_num(sps['min'])} - {fmt_num(sps['max'])}",
            fmt_num(None if cpu is None else cpu * 1000, 2),
            "-",
            fmt_ratio(ratio(sps["median"], base_sps)),
            "-",
            ("0% (no cache)" if v["key"] == "torchvision" else fmt_pct(hit)),
        ])
    return rows


JOBS_HEADER = ["#", "variant", "makespan s (median)", "min - max", "each job's wall s",
               "hit rate", "source read", "CPU s (loaders + daemon)", "makespan vs 4a"]


def jobs_table(jobs: dict) -> List[List[str]]:
    """The scenario's own table: one row per variant."""
    rows = []
    data_bytes = ((jobs or {}).get("settings") or {}).get("data_bytes")
    for v in jobs.get("variants") or []:
        if v.get("error") and not v.get("summary"):
            rows.append([v["id"], v["key"], f"failed: {v['error'].splitlines()[0][:80]}"]
                        + [""] * (len(JOBS_HEADER) - 3))
            continue
        s = v["summary"]
        ms = s["makespan_s"]
        src = s.get("source_bytes_read")
        src_txt = fmt_bytes(src)
        if src is not None and data_bytes:
            src_txt += f" ({src / data_bytes:.1f}x the set)"
        red = makespan_reduction(jobs, v["id"])
        hit = "0% (no cache)" if v["key"] == "torchvision" else fmt_pct(s.get("hit_rate"))
        rows.append([
            v["id"], v["key"], fmt_num(ms["median"], 1),
            f"{fmt_num(ms['min'], 1)} - {fmt_num(ms['max'], 1)}",
            ", ".join(fmt_num(w, 1) for w in s["job_wall_s"]),
            hit, src_txt, fmt_num(s.get("cpu_s"), 1),
            "-" if v["id"] == "4a" else ("-" if red is None else f"{-red * 100:+.0f}%"),
        ])
    return rows


# (description, case, baseline case or None, at least this, what is measured)
JOB_TARGETS = [
    ("jobs: ODS makespan >= 45% below torchvision's (Seneca: 45% less than PyTorch)",
     "4c", "4a", SENECA["makespan_reduction"], "makespan_reduction"),
    ("jobs: ODS hit rate >= 54% (Seneca: 54% with 20% cached)", "4c", None,
     SENECA["hit_rate"], "hit_rate"),
    ("jobs, cache set for jobs: ODS makespan >= 45% below torchvision's", "4d", "4a",
     SENECA["makespan_reduction"], "makespan_reduction"),
    ("jobs, cache set for jobs: ODS hit rate >= 54%", "4d", None, SENECA["hit_rate"],
     "hit_rate"),
]


def jobs_targets(jobs: Optional[dict]) -> List[dict]:
    """Scenario 4's targets, from Seneca's published figures: measured value (a share), met or
    not (None: not measured), notes on how our setting differs."""
    out = []
    st = (jobs or {}).get("settings") or {}
    for desc, vid, base, want, what in JOB_TARGETS:
        v = _variant(jobs, vid)
        if what == "makespan_reduction":
            val = makespan_reduction(jobs, vid, base)
        else:
            val = v["summary"].get("hit_rate") if v else None
        notes = []
        if val is not None:
            share = st.get("cache_share")
            if share is not None:
                notes.append(f"{share * 100:.0f}% of the set cached here "
                             f"(Seneca's figure: {SENECA['cached_share'] * 100:.0f}%)")
            if what == "hit_rate":
                notes.append("a hit is an open served from any cache form without reading "
                             "the source")
            if st.get("reps") == 1:
                notes.append("1 run")
            if st.get("subset"):
                notes.append(st["subset"])
        out.append({"target": desc, "cases": f"{vid} / {base}" if base else vid,
                    "want": want, "ratio": val,
                    "shown": (fmt_pct(val) if what != "makespan_reduction" or val is None
                              else f"{fmt_pct(val)} less" if val >= 0
                              else f"{fmt_pct(-val)} more"),
                    "met": None if val is None else val >= want,
                    "note": "; ".join(notes)})
    return out


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
    if s.get("prepfs", {}).get("cache25_bytes"):
        c25 = s["prepfs"]
        out.append(f"- prepfs cache of rows 2pc/2pd: {fmt_bytes(c25['cache25_bytes'])}, 25% of the "
                   f"data set's bytes on storage, `split: {c25.get('cache25_split_asked', 'auto')}`, "
                   f"`policy: {c25.get('cache25_policy', 'keep')}`"
                   + (f" (the mount chose encoded-decoded-augmented {c25['cache25_split']})"
                      if c25.get("cache25_split") else ""))
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
        "- 2pc / 2pd: the loaders of 2c / 2d on a second mount whose cache is 25% of the data "
        "set's size on storage (Seneca's convention: \"X% cached\" is a cache X% the size of "
        "the data set), split as prepfs's model picks it, after one unmeasured pass.",
        "- 4a-4c: three training jobs started together, each reading the whole set for two "
        "epochs from read-limited storage (see \"Scenario 4\" below): 4a torchvision on the "
        "JPEGs, 4b the same jobs over prepfs `augmented/` (no jobs), 4c over "
        "`jobs/job<i>/augmented/` (opportunistic sampling); samples/s is all the jobs' samples "
        "over the makespan, vs torchvision is against 4a, the last column the hit rate.",
    ]
    jobs = report.get("jobs")
    done = ([c["id"] for c in report["cases"]]
            + [v["id"] for v in ((jobs or {}).get("variants") or [])])
    pending = (pending_rows(cache_on, done, s.get("pending_why"))
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
        rows = [[t["target"], t["cases"], t.get("shown") or fmt_ratio(t["ratio"]),
                 "-" if t["met"] is None else ("met" if t["met"] else "**missed**"),
                 t.get("note", "")]
                for t in tgt]
        out += [markdown_table(["target", "cases", "measured", "", "note"], rows), ""]
    rows = table_rows(report["cases"]) + jobs_rows(jobs) + pending
    out += ["## Results", "", markdown_table(TABLE_HEADER, rows), ""]
    main_charts = [c for c in charts if not c.endswith("-jobs.png")]
    for ch in main_charts:
        rel = os.path.relpath(ch, md_dir)
        out += [f"![{os.path.basename(ch)}]({rel})", ""]
    warm = warm_start_rows(report["cases"])
    if warm:
        out += ["## Warm starts", "",
                "Before each measured run of a warm or floor row that reads a prepfs cache, the "
                "harness waits for the background refill to catch up (the augmented cache is "
                f"use-once: a pass empties it): it polls `stats.json` until "
                f"`cache.augmented.entries` has not grown for {REFILL_STABLE_S:g} s or holds "
                f"every sample, for at most {REFILL_MAX_S:.0f} s. What the measured runs "
                "started with:", "",
                markdown_table(WARM_HEADER, warm), ""]
    if jobs:
        out += render_jobs_section(jobs, [c for c in charts if c.endswith("-jobs.png")],
                                   md_dir)
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
        "first (the raw reader repeats its pass for at least 1 s over tmpfs; over prepfs it "
        "reads one pass, as the cache holds one output per sample, used once). "
        "vs torchvision / vs DALI: against 1a / 1b for cold rows, 2a / 2b otherwise (1a / 1b "
        "where the warm peers were not run).",
        "- warm and floor rows over a prepfs cache (2c, 2d, 2n, 2pc, 2pd, 3d): after the "
        "warm-up pass and before each measured run, the wait for the refill described under "
        "\"Warm starts\" (its length and the cache's augmented entries at the start of each "
        "run are in the JSON, `refill_wait`); the wait is not part of the measured run.",
        "- scenario 4: see its section; each variant on a freshly mounted prepfs (empty cache) "
        "and a dropped page cache, the three job processes started together once their imports "
        "are done; makespan from the first job's start to the last job's end (CLOCK_MONOTONIC, "
        "listing the tree included); CPU: the job processes, their DataLoader workers and the "
        "daemon.",
        f"- Raw JSON: `{os.path.relpath(report['json_path'], md_dir)}`.",
        "",
    ]
    return "\n".join(out)


WARM_HEADER = ["#", "refill wait s (median, max)", "augmented entries at the start (min - max)",
               "of samples", "how the waits ended"]


def refill_summary(runs: Sequence[dict]) -> Optional[dict]:
    """The refill waits before a case's measured runs (None if it had none)."""
    waits = [r["refill_wait"] for r in runs if r.get("refill_wait")]
    if not waits:
        return None
    reasons: Dict[str, int] = {}
    for w in waits:
        reasons[w.get("reason") or "?"] = reasons.get(w.get("reason") or "?", 0) + 1
    return {"waited_s": spread([w.get("waited_s") for w in waits]),
            "augmented_entries_start": spread([w.get("augmented_entries_start")
                                               for w in waits]),
            "target": next((w.get("target") for w in waits if w.get("target")), None),
            "reasons": reasons}


def warm_start_rows(results: Sequence[dict]) -> List[List[str]]:
    rows = []
    for c in results:
        rw = (c.get("summary") or {}).get("refill_wait")
        if not rw:
            continue
        w, e = rw["waited_s"], rw["augmented_entries_start"]
        rows.append([c["id"], f"{fmt_num(w['median'], 1)}, {fmt_num(w['max'], 1)}",
                     f"{fmt_num(e['min'])} - {fmt_num(e['max'])}",
                     fmt_num(rw.get("target")),
                     ", ".join(f"{k} x{v}" for k, v in sorted(rw["reasons"].items()))])
    return rows


def render_jobs_section(jobs: dict, charts: Sequence[str], md_dir: str) -> List[str]:
    """BENCHMARKS.md's section on scenario 4: the setting, the table, Seneca's figures."""
    st = jobs.get("settings") or {}
    out = ["## Scenario 4: concurrent jobs", ""]
    rate = st.get("read_limit_bytes_per_s")
    mean = (st["data_bytes"] / st["data_samples"]) if st.get("data_samples") else None
    per_sample = rate / mean if rate and mean else None
    cpus = ",".join(str(c) for c in st.get("cpus") or [])
    text = (f"{st.get('jobs', 3)} training jobs started together, each a process running "
            f"torchvision `ImageFolder` + `DataLoader(shuffle=True, num_workers="
            f"{st.get('workers', 2)}, batch_size={st.get('batch_size', 64)})` for "
            f"{st.get('epochs', 2)} epochs over {st.get('data_samples', '?')} images "
            f"({fmt_bytes(st.get('data_bytes'))})")
    if st.get("subset"):
        text += f" ({st['subset']})"
    text += (f"; everything (jobs, their workers, the prepfs daemons) pinned to CPUs {cpus}, "
             f"as the other rows. Storage: every read of the source goes through prepfs's "
             f"read limit, `{st.get('read_limit')}`")
    if per_sample:
        text += f" ({per_sample:.0f} samples/s of the mean {mean / 1e3:.0f} KB JPEG)"
    mi = st.get("model_inputs") or {}
    if mi.get("t_da"):
        text += (f"; prepfs measured, while serving, decode + augment at {mi['t_da']:.0f} "
                 f"samples/s on these cores")
        if mi.get("b_storage"):
            text += f" and the storage at {mi['b_storage'] / 1e6:.1f} MB/s"
    a = _variant(jobs, "4a")
    if a and a["summary"]["samples_per_s"]["median"]:
        text += (f"; the torchvision jobs of 4a together reached "
                 f"{a['summary']['samples_per_s']['median']:.0f} samples/s")
    text += (f". Cache for 4b and 4c: {fmt_pct(st.get('cache_share'))} of the set's bytes on "
             f"storage ({fmt_bytes(st.get('cache_bytes'))}), `split: {st.get('cache_split', 'auto')}`, "
             f"`policy: {st.get('cache_policy', 'keep')}`")
    if st.get("split"):
        text += f" (the mount chose encoded-decoded-augmented {st['split']})"
    text += (f". Each variant on a freshly mounted prepfs (empty cache) after dropping the page "
             f"cache; the median of {st.get('reps', '?')} run(s) (min - max).")
    out += [text, ""]
    out += [f"- 4a: torchvision with the full ImageNet train transform on the JPEGs, read from "
            f"`encoded/` of a second prepfs mount that is only the read-limited storage (no "
            f"cache); its `ImageFolder` loader reads each file and drops it from the page cache "
            f"({st.get('uncached_desc') or 'posix_fadvise DONTNEED'}) so each epoch of each job "
            f"reads the storage, as with a data set larger than memory. Hit rate 0% by "
            f"construction.",
            "- 4b: the same jobs over prepfs's top-level `augmented/` with only ToTensor + "
            "Normalize; no job names, so no opportunistic sampling. Hit rate: "
            "`views.augmented` hits / (hits + misses) over the run (a hit: an open served from "
            "any cache form without reading the source).",
            "- 4c: the same, job i reading `jobs/job<i>/augmented/` (opportunistic sampling). "
            "Hit rate: the jobs' hits (augmented, decoded, encoded) over hits + misses, summed "
            "over `jobs.active` in stats.json.",
            "- 4d: as 4c, with the cache set as README advises for concurrent jobs: `policy: lru` "
            "(with ODS, entries just admitted are what the other jobs are served next) and the "
            "consumers' rate given to the model (`consumer_samples_per_s`, row 3g's figure), so "
            "`split: auto` does not rate augmented hits at memory speed.", ""]
    out += [markdown_table(JOBS_HEADER, jobs_table(jobs)), ""]
    red_c, red_b = makespan_reduction(jobs, "4c"), makespan_reduction(jobs, "4b")
    vc, vb = _variant(jobs, "4c"), _variant(jobs, "4b")
    line = ("Against Seneca's published figures (FAST '26; 45% less makespan than PyTorch, a "
            "54% hit rate with 20% of the data cached): makespan ")
    def vs_a(red: float) -> str:
        return (f"{fmt_pct(red)} below 4a's" if red >= 0 else f"{fmt_pct(-red)} above 4a's")
    line += (f"{vs_a(red_c)} with ODS (4c)" if red_c is not None else "not measured with ODS")
    if red_b is not None:
        line += f", {vs_a(red_b)} without jobs (4b)"
    line += "; hit rate "
    line += fmt_pct(vc["summary"].get("hit_rate")) + " with ODS" if vc else "not measured"
    if vb:
        line += f", {fmt_pct(vb['summary'].get('hit_rate'))} without jobs"
    vd, red_d = _variant(jobs, "4d"), makespan_reduction(jobs, "4d")
    if vd:
        line += (f"; with the cache set for concurrent jobs (4d: policy lru, the consumers' rate "
                 f"given to the model), makespan {vs_a(red_d) if red_d is not None else 'n/a'} "
                 f"and hit rate {fmt_pct(vd['summary'].get('hit_rate'))}")
    line += f", with {fmt_pct(st.get('cache_share'))} cached."
    out += [line, ""]
    checks = jobs_checks(jobs)
    if checks:
        out += ["Checks:", ""] + [f"- {c}" for c in checks] + [""]
    for ch in charts:
        rel = os.path.relpath(ch, md_dir)
        out += [f"![{os.path.basename(ch)}]({rel})", ""]
    return out


def jobs_checks(jobs: dict) -> List[str]:
    """What the figures say about the runs themselves: whether 4a really read the storage every
    epoch, and whether each ODS job was served every sample once per epoch."""
    out = []
    st = jobs.get("settings") or {}
    a = _variant(jobs, "4a")
    if a:
        shares = [r.get("source_read_share") for r in a.get("runs") or []
                  if r.get("source_read_share") is not None]
        if shares:
            ok = all(x >= 0.95 for x in shares)
            out.append(f"4a read {min(shares) * 100:.0f}% - {max(shares) * 100:.0f}% of "
                       f"{st.get('jobs', 3)} jobs x {st.get('epochs', 2)} epochs x the set's "
                       f"bytes from the storage mount: "
                       + ("every epoch of every job read the storage" if ok else
                          "**some reads were served from the page cache**"))
    for vid in ("4b", "4c", "4d"):
        v = _variant(jobs, vid)
        if not v:
            continue
        for r in v.get("runs") or []:
            want = st.get("data_samples", 0) * st.get("epochs", 2)
            got = [j.get("samples") for j in r.get("jobs") or []]
            if want and any(g != want for g in got):
                out.append(f"{vid}: jobs delivered {got} samples, not {want} each")
                break
    for vid in ("4c", "4d"):
        c = _variant(jobs, vid)
        if not c:
            continue
        served = []
        for r in c.get("runs") or []:
            served += [(js.get("name"), js.get("samples_served"), js.get("epoch"))
                       for js in r.get("job_stats") or []]
        want = st.get("data_samples", 0) * st.get("epochs", 2)
        if served:
            bad = [x for x in served if x[1] != want]
            out.append(f"{vid}: prepfs counted " + (
                f"{want} samples served to every job ({st.get('epochs', 2)} epochs of "
                f"{st.get('data_samples')})" if not bad else
                "samples served per job " + ", ".join(f"{n}: {k}" for n, k, _ in served)
                + f" (expected {want} each)"))
    return out


def write_jobs_chart(report: dict, prefix: str) -> List[str]:
    """PREFIX-jobs.png: scenario 4's makespan per variant (median, whiskers min-max), each bar
    annotated with its hit rate and its makespan against 4a; Seneca's "45% less than PyTorch"
    drawn as a line at 0.55 x 4a's makespan. [] without matplotlib or results."""
    jobs = report.get("jobs")
    vs = [v for v in ((jobs or {}).get("variants") or []) if v.get("summary")
          and v["summary"]["makespan_s"]["median"] is not None]
    if not vs:
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    st = jobs.get("settings") or {}
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.8 * len(vs) + 1.0))
    ys = list(range(len(vs)))[::-1]
    med = [v["summary"]["makespan_s"]["median"] for v in vs]
    lo = [m - v["summary"]["makespan_s"]["min"] for m, v in zip(med, vs)]
    hi = [v["summary"]["makespan_s"]["max"] - m for m, v in zip(med, vs)]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bars = ax.barh(ys, med, xerr=[lo, hi], capsize=3, height=0.6,
                   color=[colors[i % len(colors)] for i in range(len(vs))])
    labels = []
    for v, m in zip(vs, med):
        hit = "0% (no cache)" if v["key"] == "torchvision" else fmt_pct(v["summary"]["hit_rate"])
        lab = f"{m:.1f} s, hit rate {hit}"
        red = makespan_reduction(jobs, v["id"])
        if v["id"] != "4a" and red is not None:
            lab += f", {-red * 100:+.0f}% vs 4a"
        labels.append(lab)
    ax.bar_label(bars, labels=labels, fontsize=8, padding=4)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{v['id']}  {v['key']}" for v in vs], fontsize=9)
    base = _median_makespan(jobs, "4a")
    if base:
        ax.axvline(base * (1 - SENECA["makespan_reduction"]), color="0.3", linestyle="--",
                   linewidth=1, label="Seneca: 45% less makespan than PyTorch (x 4a)")
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    ax.set_xlim(0, max(m + h for m, h in zip(med, hi)) * 1.7)
    sub = (f"{st.get('jobs', 3)} jobs x {st.get('epochs', 2)} epochs, "
           f"{st.get('data_samples', '?')} images, storage {st.get('read_limit')}, "
           f"cache {fmt_pct(st.get('cache_share'))} of the set, "
           f"{len(st.get('cpus') or [])} CPUs, {st.get('reps', '?')} run(s)")
    ax.set_title("scenario 4: makespan of concurrent jobs (median, whiskers min-max; lower is "
                 f"better)\n{sub}", fontsize=10)
    ax.set_xlabel("seconds")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = f"{prefix}-jobs.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


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
    order = {"cold": 0, "warm": 1, "warm25": 2, "floor": 3}
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
    return {"data_samples": len(samples), "data_classes": len(classes), "data_bytes": total,
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
    if case.loader.startswith("raw") and not case.cold and not case.prepfs:
        # A warm pass over tmpfs is over in milliseconds: repeat it for a second. Not over prepfs:
        # its cache holds one output per sample, used once, so a second pass would time misses.
        cmd += ["--min-seconds", "1"]
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
                elif (case.warmup and not info["warmup"] and case.prepfs and src is not None
                      and src.kind != "stand-in" and cache_memory(src.stats()) > 0):
                    # warm means "the cache holds the set": the warm-up (or the previous run)
                    # used the augmented outputs up; let the refill make new ones first
                    info["refill_wait"] = wait_for_refill(src.stats)
                    if verbose:
                        w = info["refill_wait"]
                        print(f"[bench]     {case.id} refill wait {w['waited_s']:.1f} s "
                              f"({w['reason']}): {w['augmented_entries_before']} -> "
                              f"{w['augmented_entries_start']} augmented entries of "
                              f"{w['target']}", flush=True)
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
                if pending.get("refill_wait"):
                    res["refill_wait"] = pending["refill_wait"]
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
    rw = s.get("refill_wait")
    if rw:
        line += (f"  [refill wait {fmt_num(rw['waited_s']['median'], 1)} s, "
                 f"{fmt_num(rw['augmented_entries_start']['min'])}-"
                 f"{fmt_num(rw['augmented_entries_start']['max'])} augmented at start]")
    if rec.get("error"):
        line += f"  (partly failed: {rec['error']})"
    return line


# --------------------------------------------------------------------------------------------
# Running scenario 4


def make_subset_tree(src: str, dst: str, per_class: int) -> int:
    """`per_class` images of each class of the ImageFolder tree `src` (a fixed random pick)
    under `dst`, same class directories, hard-linked (copied across file systems)."""
    classes, samples = loaders.list_image_folder(src)
    n = 0
    for ci, c in enumerate(classes):
        paths = [p for p, k in samples if k == ci]
        for p in loaders.pick(paths, per_class):
            out = os.path.join(dst, os.path.relpath(p, src))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            try:
                os.link(p, out)
            except OSError:
                shutil.copyfile(p, out)
            n += 1
    return n


def check_config(binary: str, config: str, source: str) -> Optional[str]:
    """None if `prepfs check CONFIG --source SRC` accepts it, else its complaint."""
    try:
        p = subprocess.run([binary, "check", config, "--source", source], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode == 0:
        return None
    lines = [ln for ln in (p.stderr + p.stdout).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {p.returncode}"


class JobProcs:
    """The job processes of one variant (`loaders.py run --sync`, one per job), each running
    `reps` runs; their output lines, read by one thread each, arrive on one queue."""

    def __init__(self, cmds: Sequence[Sequence[str]]):
        import queue

        self.queue: "queue.Queue" = queue.Queue()
        self.procs, self.errs = [], []
        for i, cmd in enumerate(cmds):
            errf = tempfile.TemporaryFile(mode="w+")
            p = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=errf, text=True, bufsize=1)
            self.procs.append(p)
            self.errs.append(errf)
            threading.Thread(target=self._pump, args=(i, p), daemon=True).start()

    def _pump(self, i: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            self.queue.put((i, line))
        self.queue.put((i, None))

    def next(self, deadline: float):
        """(job index, line or None at its end); raises TimeoutError at the deadline."""
        import queue

        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            return self.queue.get(timeout=left)
        except queue.Empty:
            raise TimeoutError from None

    def go(self) -> None:
        for p in self.procs:
            p.stdin.write("go\n")
            p.stdin.flush()

    def stderr_tail(self, i: int, n: int = 3000) -> str:
        self.errs[i].seek(0)
        return self.errs[i].read()[-n:]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in self.errs:
            f.close()


def _trim_stats(st: Optional[dict]) -> Optional[dict]:
    if not st:
        return None
    return {k: st.get(k) for k in ("source_bytes_read", "views", "cache", "plan", "refills",
                                   "jobs", "decode_errors", "source_errors", "samples")}


def run_jobs_variant(vid: str, key: str, loader: str, label: str, reads: str, *, args,
                     cpus: List[int], mounter: Callable[[], PrepfsMount],
                     data_for: Callable[[str, int], str], settings: dict) -> dict:
    """All runs of one variant of scenario 4: the job processes start (importing torch) and
    wait; before each run the mount is made afresh (empty cache), the page cache dropped, then
    every job is told to go at once; figures come from the jobs' results and the mount's
    stats.json."""
    rec = {"id": vid, "key": key, "loader": loader, "label": label, "reads": reads,
           "runs": [], "error": None}
    n_jobs, reps = settings["jobs"], settings["reps"]
    mnt_root = None
    cmds = []
    for i in range(n_jobs):
        cmd = [args.python, os.path.join(HERE, "loaders.py"), "run", "--loader", loader,
               "--data", "@DATA@", "--workers", str(args.workers), "--reps", str(reps),
               "--epochs", str(settings["epochs"]), "--seed", str(1000 * (i + 1)), "--sync",
               "--cpus", ",".join(map(str, cpus))]
        if loader == "job-torchvision":
            cmd += ["--uncached", settings["uncached"]]
        cmds.append(cmd)
    mount: Optional[PrepfsMount] = None
    procs: Optional[JobProcs] = None
    try:
        # the path each job reads is known once the mount point is (the same every run)
        mnt_root = mounter.mountpoint  # type: ignore[attr-defined]
        cmds = [[data_for(mnt_root, i) if a == "@DATA@" else a for a in c]
                for i, c in enumerate(cmds)]
        procs = JobProcs(cmds)
        deadline = time.monotonic() + args.jobs_timeout
        early: set = set()  # jobs whose next @@ready came while the run was being collected
        for rep in range(reps):
            ready, ended = set(early), set()
            early = set()
            while len(ready) < n_jobs:
                i, line = procs.next(deadline)
                if line is None:
                    raise RuntimeError(f"job {i} exited before run {rep}: "
                                       + (procs.stderr_tail(i).strip().splitlines() or ["?"])[-1])
                if line.startswith(loaders.READY_TAG):
                    ready.add(i)
            if mount:
                mount.close()
            mount = mounter()
            dropped = loaders.drop_page_cache()
            st0 = mount.stats()
            cpu0 = mount.cpu_seconds()
            known: Dict[str, dict] = {}
            results: Dict[int, dict] = {}
            procs.go()
            while len(results) + len(ended) < n_jobs:
                i, line = procs.next(deadline)
                if line is None:
                    ended.add(i)
                    continue
                if line.startswith(loaders.RESULT_TAG):
                    results[i] = json.loads(line[len(loaders.RESULT_TAG):])
                    merge_job_stats(known, mount.stats())
                elif line.startswith(loaders.READY_TAG):
                    early.add(i)
            fs_cpu = mount.cpu_seconds() - cpu0
            st1 = mount.stats()
            merge_job_stats(known, st1)
            if len(results) < n_jobs:
                bad = sorted(set(range(n_jobs)) - set(results))
                raise RuntimeError(f"job {bad[0]} failed in run {rep}: "
                                   + (procs.stderr_tail(bad[0]).strip().splitlines()
                                      or ["?"])[-1])
            expected = (settings["data_bytes"] * settings["epochs"] * n_jobs
                        if key == "torchvision" else None)
            run = jobs_run_record(key, [results[i] for i in range(n_jobs)], st0, st1, fs_cpu,
                                  known if key.startswith("prepfs-ods") else None, expected)
            run["rep"] = rep
            run["page_cache_dropped"] = dropped
            run["fs_stats_end"] = _trim_stats(st1)
            rec["runs"].append(run)
            split = ((st1 or {}).get("cache") or {}).get("split")
            if key != "torchvision" and isinstance(split, list) and "split" not in settings:
                settings["split"] = "-".join(str(x) for x in split)
            inputs = (((st1 or {}).get("plan") or {}).get("inputs") or {})
            if key != "torchvision" and inputs and "model_inputs" not in settings:
                settings["model_inputs"] = {k: inputs.get(k) for k in
                                            ("t_da", "t_a", "b_storage", "s_data", "b_cache")}
                settings["model_inputs"]["predicted_samples_per_s"] = (
                    (st1.get("plan") or {}).get("predicted_samples_per_s"))
            if args.verbose:
                print(f"[bench]     {vid} run {rep}: makespan {run['makespan_s']:.1f} s, hit "
                      f"rate {fmt_pct(run.get('hit_rate'))}, source "
                      f"{fmt_bytes(run.get('source_bytes_read'))}, CPU {run['cpu_s']:.1f} s",
                      flush=True)
            mount.close()
            mount = None
    except TimeoutError:
        rec["error"] = f"timed out after {args.jobs_timeout:.0f} s"
    except (RuntimeError, PrepfsError, ValueError, OSError) as e:
        rec["error"] = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        if mount is not None:
            rec["log_tail"] = mount.log_tail()
    finally:
        if procs is not None:
            if rec["error"]:
                rec["stderr_tail"] = "\n".join(procs.stderr_tail(i, 1000)
                                               for i in range(n_jobs))
            procs.close()
        if mount is not None:
            mount.close()
    if rec["runs"]:
        rec["summary"] = summarize_jobs(rec["runs"])
    return rec


def jobs_progress_line(v: dict) -> str:
    head = f"[bench] {v['id']:<3} jobs  {v['key']} on {v['reads']}"
    if v.get("error") and not v.get("summary"):
        return f"{head}: FAILED: {v['error']}"
    s = v["summary"]
    ms = s["makespan_s"]
    hit = "0% (no cache)" if v["key"] == "torchvision" else fmt_pct(s.get("hit_rate"))
    line = (f"{head}: makespan {fmt_num(ms['median'], 1)} s ({fmt_num(ms['min'], 1)} - "
            f"{fmt_num(ms['max'], 1)}), jobs {', '.join(fmt_num(w, 1) for w in s['job_wall_s'])}"
            f" s, hit rate {hit}, source {fmt_bytes(s.get('source_bytes_read'))}, CPU "
            f"{fmt_num(s.get('cpu_s'), 1)} s  [{s['runs']} run(s)]")
    if v.get("error"):
        line += f"  (partly failed: {v['error']})"
    return line


def run_jobs_scenario(args, cpus: List[int], binary: str, base_text: str, data: str,
                      mountpoint: str, config_dir: str, keep: Optional[set]) -> dict:
    """Scenario 4: the three variants, each on fresh mounts. Returns report["jobs"]."""
    tmp = None
    jobs_data = data
    subset = None
    try:
        if args.jobs_per_class:
            tmp = tempfile.mkdtemp(prefix=f"prepfs-bench-jobs-data-{os.getpid()}-")
            k = make_subset_tree(data, tmp, args.jobs_per_class)
            jobs_data = tmp
            subset = f"quick: {args.jobs_per_class} images per class, {k} in all"
        _, samples = loaders.list_image_folder(jobs_data)
        data_bytes = sum(os.stat(p).st_size for p, _ in samples)
        cache_bytes = cache_of_share(data_bytes, args.cache_share)
        settings = {
            "jobs": args.jobs, "epochs": args.jobs_epochs, "reps": args.jobs_reps,
            "workers": args.workers, "batch_size": loaders.BATCH_SIZE, "cpus": cpus,
            "data": jobs_data, "data_samples": len(samples), "data_bytes": data_bytes,
            "subset": subset, "read_limit": args.read_limit,
            "read_limit_bytes_per_s": parse_size(args.read_limit),
            "cache_share": args.cache_share, "cache_bytes": cache_bytes,
            "cache_split": args.cache_split, "cache_policy": args.cache_policy,
            "uncached": args.jobs_uncached,
            "uncached_desc": {"fadvise": "`posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)` after "
                                         "reading it",
                              "direct": "opened with `O_DIRECT`",
                              "none": "no: read normally"}[args.jobs_uncached],
        }
        storage_cfg = os.path.join(config_dir, "jobs-storage.yaml")
        prepfs_cfg = os.path.join(config_dir, "jobs-prepfs.yaml")
        tuned_cfg = os.path.join(config_dir, "jobs-prepfs-tuned.yaml")
        settings["consumer_rate"] = args.consumer_rate
        configs = [
            (storage_cfg, None, "scenario 4's storage: read-limited, no cache"),
            (prepfs_cfg, f"{{ memory: {cache_bytes}, split: {args.cache_split}, "
                         f"policy: {args.cache_policy} }}",
             f"scenario 4: read-limited source, a cache of {args.cache_share * 100:.0f}% of the "
             f"set's bytes"),
            (tuned_cfg, f"{{ memory: {cache_bytes}, split: auto, policy: lru, "
                        f"consumer_samples_per_s: {args.consumer_rate} }}",
             "scenario 4d: the same cache, set as README advises for concurrent jobs"),
        ]
        for path, cache, note in configs:
            with open(path, "w") as f:
                f.write(derive_config(base_text, cache, jobs_data, args.read_limit, note))
        settings["configs"] = {"storage": storage_cfg, "prepfs": prepfs_cfg, "tuned": tuned_cfg}
        out = {"settings": settings, "variants": []}
        for cfg in (storage_cfg, prepfs_cfg, tuned_cfg):
            err = check_config(binary, cfg, jobs_data)
            if err:
                out["error"] = f"prepfs check {_show_path(cfg)}: {err}"
                print(f"[bench] 4: not run: {out['error']}", flush=True)
                return out
        log_dir = os.path.abspath(args.log_dir) if args.log_dir else None

        def mounter_for(cfg: str, mnt: str, key: str):
            log = os.path.join(log_dir, f"prepfs-{key}.log") if log_dir else None

            def m() -> PrepfsMount:
                return mount_prepfs(binary, cfg, jobs_data, mnt, cpus=cpus, log_path=log)
            m.mountpoint = mnt  # type: ignore[attr-defined]
            return m
        storage = mounter_for(storage_cfg, mountpoint + "-storage", "jobs-storage")
        shared = mounter_for(prepfs_cfg, mountpoint + "-jobs", "jobs")
        tuned = mounter_for(tuned_cfg, mountpoint + "-jobs", "jobs-tuned")
        paths = {
            "prepfs-ods-tuned": (tuned, lambda mnt, i: os.path.join(mnt, "jobs", f"job{i}",
                                                                     "augmented")),
            "torchvision": (storage, lambda mnt, i: os.path.join(mnt, "encoded")),
            "prepfs": (shared, lambda mnt, i: os.path.join(mnt, "augmented")),
            "prepfs-ods": (shared, lambda mnt, i: os.path.join(mnt, "jobs", f"job{i}",
                                                               "augmented")),
        }
        rate = settings["read_limit_bytes_per_s"] / (data_bytes / len(samples))
        print(f"[bench] 4: {args.jobs} jobs x {args.jobs_epochs} epochs over {len(samples)} "
              f"images ({fmt_bytes(data_bytes)}), storage {args.read_limit} (~{rate:.0f} "
              f"samples/s), cache {fmt_bytes(cache_bytes)}, {args.jobs_reps} run(s) per variant",
              flush=True)
        for vid, key, loader, label, reads in JOB_VARIANTS:
            if keep is not None and vid not in keep and "4" not in keep:
                continue
            mounter, data_for = paths[key]
            reads = reads.format(R=args.read_limit, C=fmt_pct(args.cache_share),
                                 T=args.consumer_rate)
            v = run_jobs_variant(vid, key, loader, label, reads, args=args, cpus=cpus,
                                 mounter=mounter, data_for=data_for, settings=settings)
            out["variants"].append(v)
            print(jobs_progress_line(v), flush=True)
        return out
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


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
                    help="keep the prepfs daemons' logs here (prepfs-ppm.log, prepfs-npy.log, "
                         "prepfs-ppm25.log, prepfs-jobs*.log; appended over remounts); default: "
                         "temporary files, deleted")
    ap.add_argument("--config-dir", default=None,
                    help="write the derived mount configs here (2p's 25%% cache, scenario 4's); "
                         "default: a temporary directory, deleted")
    g4 = ap.add_argument_group("scenarios 2p and 4 (with --prepfs-bin)")
    g4.add_argument("--cache-share", type=float, default=0.25,
                    help="2p's and scenario 4's cache, as a share of the data set's bytes")
    g4.add_argument("--cache-split", default=os.environ.get("BENCH_SPLIT") or "auto",
                    help="the split of the 2p and 4b/4c caches: auto (the model's) or E-D-A")
    g4.add_argument("--cache-policy", default=os.environ.get("BENCH_POLICY") or "keep",
                    choices=["keep", "lru"], help="the 2p and 4b/4c caches' policy")
    g4.add_argument("--consumer-rate", type=float,
                    default=float(os.environ.get("BENCH_CONSUMER_RATE") or 900),
                    help="4d: the consumers' rate given to the cache model (samples/s; default "
                         "900, what the torchvision loop absorbs on 2 cores, row 3g)")
    g4.add_argument("--read-limit", default=os.environ.get("BENCH_READ_LIMIT") or "10MB/s",
                    help="scenario 4's storage read limit (prepfs source.read_limit; env "
                         "BENCH_READ_LIMIT)")
    g4.add_argument("--jobs", type=int, default=3, help="scenario 4: concurrent jobs")
    g4.add_argument("--jobs-epochs", type=int, default=2, help="scenario 4: epochs per job")
    g4.add_argument("--jobs-reps", type=int, default=None,
                    help="scenario 4: runs per variant (default: 1 with --quick, else 3)")
    g4.add_argument("--jobs-per-class", type=int, default=None,
                    help="scenario 4: only this many images per class (default: 16 with "
                         "--quick, else all)")
    g4.add_argument("--jobs-uncached", choices=loaders.UNCACHED_MODES, default="fadvise",
                    help="scenario 4a: how the torchvision jobs keep files out of the page cache")
    g4.add_argument("--jobs-timeout", type=float, default=1200,
                    help="scenario 4: seconds per variant, all its runs")
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
    if args.jobs_reps is None:
        args.jobs_reps = 1 if args.quick else 3
    if args.jobs_per_class is None and args.quick:
        args.jobs_per_class = 16
    try:
        parse_size(args.read_limit)
    except ValueError:
        ap.error(f"--read-limit {args.read_limit!r}: not a rate (e.g. 10MB/s)")
    if not 0 < args.cache_share <= 1:
        ap.error("--cache-share must be in (0, 1]")
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
    src25: Optional[PrepfsSource] = None
    base_text = binary = None
    pending_why = None
    own_config_dir = args.config_dir is None
    config_dir = tempfile.mkdtemp(prefix="prepfs-bench-configs-") if own_config_dir \
        else os.path.abspath(args.config_dir)
    os.makedirs(config_dir, exist_ok=True)
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
        # 2p: the PPM config with a cache of 25% of the data set's bytes (Seneca's convention)
        with open(os.path.abspath(args.prepfs_config)) as f:
            base_text = f.read()
        cache25 = cache_of_share(dinfo["data_bytes"], args.cache_share)
        cfg25 = os.path.join(config_dir, "imagenet-cache25.yaml")
        with open(cfg25, "w") as f:
            f.write(derive_config(base_text, f"{{ memory: {cache25}, split: {args.cache_split}, "
                                             f"policy: {args.cache_policy} }}",
                                  note=f"scenario 2p: a cache of {args.cache_share * 100:g}% "
                                       f"of the data set's {dinfo['data_bytes']} bytes"))
        why25 = check_config(binary, cfg25, data)
        if why25:
            print(f"[bench] 2p: prepfs check refused {cfg25}: {why25}; 2p not run", flush=True)
            pending_why = f"prepfs check refused the 25% config: {why25}"
        else:
            configs.append(("ppm25", cfg25, os.path.abspath(args.mountpoint) + "-25"))
        for key, config, mnt in configs:
            print(f"[bench] prepfs: {_show_path(binary)} mount {_show_path(config)} at {mnt}",
                  flush=True)
            s = PrepfsSource("driver-mount", os.path.join(mnt, "augmented"), None,
                             mounter(config, mnt, key))
            if key == "ppm":
                src = s
            elif key == "npy":
                npy_src = s
            else:
                src25 = s
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
    sources = {k: v for k, v in (("ppm", src), ("npy", npy_src), ("ppm25", src25))
               if v is not None}
    report["settings"]["prepfs"]["augmented25"] = src25.augmented if src25 else None
    report["settings"]["prepfs"]["cache25_split_asked"] = args.cache_split
    report["settings"]["prepfs"]["cache25_policy"] = args.cache_policy
    report["settings"]["prepfs"]["cache25_bytes"] = (
        cache_of_share(dinfo["data_bytes"], args.cache_share) if src25 else None)
    report["settings"]["pending_why"] = pending_why
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
                     cache_on=cache_on, augmented25=src25.augmented if src25 else None,
                     reads25=f"prepfs augmented/, cache {args.cache_share * 100:g}% of the set "
                             f"({fmt_bytes(report['settings']['prepfs']['cache25_bytes'])})")
        keep = None
        if args.only:
            keep = set(args.only.split(","))
            if report["settings"]["pending_why"] is None and binary:
                report["settings"]["pending_why"] = "not run (--only)"
            cases = [c for c in cases if c.id in keep or (c.id.startswith("2p") and "2p" in keep)]
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
            if case.source == "ppm25" and case_src is not None:
                split = ((rec.get("prepfs_stats") or {}).get("cache") or {}).get("split")
                if isinstance(split, list):
                    report["settings"]["prepfs"]["cache25_split"] = "-".join(map(str, split))
            report["cases"].append(rec)
            print(progress_line(rec), flush=True)
        # scenario 4: concurrent jobs, on mounts of its own (the others closed first)
        for s in sources.values():
            s.close()
        if binary and (keep is None or any(k.startswith("4") for k in keep)):
            report["jobs"] = run_jobs_scenario(args, cpus, binary, base_text, data,
                                               os.path.abspath(args.mountpoint), config_dir,
                                               keep)
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
        if own_config_dir:
            shutil.rmtree(config_dir, ignore_errors=True)

    drops = [r.get("page_cache_dropped") for c in report["cases"] for r in c["runs"]
             if c["cold"]]
    report["page_cache_drop"] = ("not needed" if not drops else "yes" if all(drops)
                                 else "no (drop_caches refused)" if not any(drops)
                                 else "partly")
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    write_report(report, args.out, args.charts_dir, args.md)
    failed = any(c.get("error") for c in report["cases"]) or any(
        v.get("error") for v in (report.get("jobs") or {}).get("variants") or [])
    return 1 if failed else 0


def write_report(report: dict, out: str, charts_dir: str, md: str) -> None:
    """Targets and ratios from the cases, then the JSON, the charts and BENCHMARKS.md."""
    report["targets"] = targets(report["cases"],
                                report["settings"].get("prepfs", {}).get("cache_on"),
                                report.get("jobs"))
    for c in report["cases"]:
        c["ratios"] = ratios(report["cases"])[c["id"]]
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    report["json_path"] = out
    charts_dir = os.path.abspath(charts_dir)
    os.makedirs(charts_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(out))[0]
    charts = write_charts(report, os.path.join(charts_dir, stem))
    charts += write_jobs_chart(report, os.path.join(charts_dir, stem))
    report["charts"] = charts
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    md = os.path.abspath(md)
    with open(md, "w") as f:
        f.write(render_markdown(report, charts, os.path.dirname(md)))
    print(f"[bench] wrote {out}, {md}" + "".join(f", {c}" for c in charts), flush=True)
    for t in report["targets"]:
        if t["ratio"] is not None:
            print(f"[bench] target {t['target']}: {t.get('shown') or fmt_ratio(t['ratio'])} "
                  f"({'met' if t['met'] else 'missed'})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
