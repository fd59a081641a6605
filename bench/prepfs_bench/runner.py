"""prepfs_bench.runner: running the cases of scenarios 1-3.

Owns `run_case` (all runs of one case in one child process, `loaders run --sync`: before
each run it drops the page cache and remounts prepfs empty for cold runs, or waits for the
cache's refill for warm ones; it samples memory from outside the run (`RunSampler`) and the
daemon's CPU (prepfs's, or the FUSE floor's for rows 3h/3i) and cache counters around it), the tmpfs copy of the floor (`copy_floor`), and the
description of the machine and of the data set the report starts with.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import tempfile
import threading
import time
from typing import Dict, List, Optional

from . import loaders, module_command
from .mount import PrepfsSource, proc_cpu_seconds
from .plan import Case
from .refill import cache_memory, wait_for_refill
from .stats import cache_counts, summarize


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
    cmd = module_command(args.python, "loaders") + ["run", "--loader", case.loader,
           "--data", case.data, "--workers", str(args.workers), "--reps", str(args.reps),
           "--warmup", str(case.warmup), "--sync", "--cpus", ",".join(map(str, cpus))]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if case.loader.startswith("raw") and not case.cold and not case.prepfs and not case.floorfs:
        # A warm pass over tmpfs is over in milliseconds: repeat it for a second. Not over prepfs:
        # its cache holds one output per sample, used once, so a second pass would time misses.
        # Nor over the FUSE floor (3h, 3i): it is read exactly as 3d is, one pass per run.
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
                # the daemon the row reads: prepfs's, or the floor's (3h, 3i: a FloorMount)
                fs_pid = src.pid if ((case.prepfs or case.floorfs) and src is not None) else None
                fs_cpu0 = proc_cpu_seconds(fs_pid) if fs_pid else 0.0
                cache0 = cache_counts(src.stats()) if fs_pid and case.prepfs else None
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


def copy_floor(src_dir: str, dst_dir: str, limit: Optional[int]) -> int:
    """Copy (the same subset of) the files of src_dir, keeping their relative paths."""
    files = loaders.pick(loaders.list_files(src_dir), limit)
    for p in files:
        out = os.path.join(dst_dir, os.path.relpath(p, src_dir))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(p, "rb") as f, open(out, "wb") as g:
            g.write(f.read())
    return len(files)
