#!/usr/bin/env python3
"""Row 3d against the FUSE floor, measured side by side (issue 12's warm target).

`make bench` times row 3d (prepfs's cached outputs) and rows 3h/3k (the trivial fuser
filesystem, plain and with passthrough over distinct files) one row after the other, five runs
each; with the default 800-sample set a run lasts about 45 ms, so load that comes and goes
between rows moves their ratio by tens of percent. This script measures the same three with the
same raw reader in alternating passes, round after round, all three mounts up at once (an idle
one only sleeps), and reports each round's ratios and their medians, with the daemons' CPU per
open (steadier than samples/s).

Before each prepfs pass the refill restocks every output (the pass reads cached outputs only,
as row 3d does); the floor passes wait the same way, so every pass starts on a quiet machine.

Usage: PYTHONPATH=bench python3 -m prepfs_bench.warm_floor --prepfs target/release/prepfs --floorfs target/release/examples/floorfs
                                                --data DIR [--rounds 15] [--out bench/results/DATE-warm-floor]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from . import BENCH_DIR, ROOT, loaders
from .config import derive_config  # a mount config with its cache: replaced
from .floor import mount_floorfs, prepfs_fuse_threads  # floorfs started, probed and ended
from .mount import mount_prepfs  # prepfs mounted read-only, pinned, as row 3d
from .refill import wait_for_refill  # the wait for the refill before a warm run, as row 3d's
from .runs import summary_of, write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md

# One pass in a child process (a FUSE request that never gets its answer holds the child, not
# this driver): 2 threads read every listed file whole in a shuffled order, as row 3d's raw reader.
READER = """\
import json, random, sys, time
from concurrent.futures import ThreadPoolExecutor
files = sys.argv[2:]
random.Random(int(sys.argv[1])).shuffle(files)
def chunk(paths):
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            n += len(f.readall())
    return n
chunks = [files[i:i + 16] for i in range(0, len(files), 16)]
with ThreadPoolExecutor(2) as pool:
    t0 = time.perf_counter()
    nbytes = sum(pool.map(chunk, chunks))
    dt = time.perf_counter() - t0
print(json.dumps({"files": len(files), "bytes": nbytes, "seconds": dt}))
"""


def stats_of(mount):
    """The mount's stats.json, which must be readable."""
    st = mount.stats()
    if st is None:
        raise RuntimeError(f"no stats.json at {mount.mountpoint}: {mount.log_tail()}")
    return st


def thread_cpu(pid):
    """CPU seconds of a daemon's threads by kind: the name up to its last '-' (fuser-0 -> fuser,
    prepfs-refill-1 -> prepfs-refill), from schedstat (nanoseconds, not clock ticks)."""
    by_kind = {}
    task = f"/proc/{pid}/task"
    for tid in os.listdir(task):
        try:
            with open(f"{task}/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"{task}/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue  # the thread ended meanwhile
        kind = name.rsplit("-", 1)[0] if name[-1:].isdigit() else name
        by_kind[kind] = by_kind.get(kind, 0.0) + ns / 1e9
    return by_kind


def one_pass(files, seed, pid, timeout=120):
    """One pass of the reader over `files`: its rate, and the CPU the daemon `pid` spent during
    it per file read, by kind of thread and in all."""
    before = thread_cpu(pid)
    out = subprocess.run([sys.executable, "-c", READER, str(seed)] + files, capture_output=True,
                         text=True, timeout=timeout, check=True)
    after = thread_cpu(pid)
    r = json.loads(out.stdout)
    r["rate"] = r["files"] / r["seconds"]
    spent = {k: (v - before.get(k, 0.0)) * 1e6 / r["files"] for k, v in after.items()}
    r["threads_cpu_us_per_open"] = {k: round(v, 1) for k, v in spent.items() if v >= 0.05}
    r["daemon_cpu_us_per_open"] = sum(spent.values())
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prepfs", required=True)
    ap.add_argument("--floorfs", required=True)
    ap.add_argument("--data", required=True, help="a JPEG tree (bench/run.sh's data set)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cache", default="1GiB", help="prepfs's memory cache (it must hold an output of every sample)")
    ap.add_argument("--fuse-threads", type=int, default=0,
                    help="FUSE threads of prepfs and of the floor (0: prepfs's default, and the floor the same)")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-warm-floor"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="prepfs-warm-floor-")
    with open(os.path.join(ROOT, "mount-configs", "imagenet.yaml")) as f:
        yaml = derive_config(f.read(), cache=f"{{ memory: {args.cache} }}", note="prepfs_bench.warm_floor")
    if args.fuse_threads:
        yaml += f"fuse_threads: {args.fuse_threads}\n"
    config = os.path.join(work, "prepfs.yaml")
    with open(config, "w") as f:
        f.write(yaml)
    mount = mount_prepfs(args.prepfs, config, args.data, os.path.join(work, "mnt-prepfs"))
    floors = {}
    try:
        files = {"prepfs": loaders.list_files(mount.view("augmented"))}
        n = len(files["prepfs"])
        size = os.stat(files["prepfs"][0]).st_size
        for mode in ("plain", "passthrough-distinct"):
            fm = mount_floorfs(args.floorfs, os.path.join(work, "floor-" + mode), n, size, mode=mode,
                               threads=prepfs_fuse_threads(yaml))
            floors[mode] = fm
            files[mode] = loaders.list_files(fm.mountpoint)
        pids = {"prepfs": mount.pid, **{m: fm.pid for m, fm in floors.items()}}
        # One unmeasured pass each: prepfs makes every output once (cold), the floors warm up.
        for name in files:
            one_pass(files[name], 0, pids[name])
        rounds = []
        for r in range(args.rounds):
            row = {}
            # Alternate which goes first, so neither always follows the other's pass.
            order = list(files) if r % 2 == 0 else list(files)[::-1]
            for name in order:
                row["prepfs_outputs_held"] = wait_for_refill(lambda: stats_of(mount), target=n)["augmented_entries_start"]
                before = stats_of(mount)
                row[name] = one_pass(files[name], r + 1, pids[name])
                if name == "prepfs":
                    after = stats_of(mount)
                    aug = lambda s: s["views"]["augmented"]
                    row[name]["hits"] = aug(after)["hits"] - aug(before)["hits"]
                    row[name]["requests_per_open"] = after.get("fuse_requests_per_open")
                    row[name]["refills"] = after["refills"] - before["refills"]
            row["prepfs_over_plain"] = row["prepfs"]["rate"] / row["plain"]["rate"]
            row["prepfs_over_passthrough"] = row["prepfs"]["rate"] / row["passthrough-distinct"]["rate"]
            row["passthrough_over_plain"] = row["passthrough-distinct"]["rate"] / row["plain"]["rate"]
            rounds.append(row)
            print(json.dumps({k: (round(v["rate"]) if isinstance(v, dict) else round(v, 3)) for k, v in row.items()}), flush=True)
            print("  prepfs threads, CPU us per open:", row["prepfs"]["threads_cpu_us_per_open"], "refills during the pass:", row["prepfs"]["refills"], flush=True)
    finally:
        mount.close()
        for fm in floors.values():
            fm.close()
        shutil.rmtree(work, ignore_errors=True)
    med = lambda key, sub=None: statistics.median(r[key][sub] if sub else r[key] for r in rounds)
    summary = {
        "files": n, "size": size, "rounds": args.rounds,
        "median_rate": {k: med(k, "rate") for k in files},
        "median_daemon_cpu_us_per_open": {k: med(k, "daemon_cpu_us_per_open") for k in files},
        "median_ratio": {k: med(k) for k in ("prepfs_over_plain", "prepfs_over_passthrough", "passthrough_over_plain")},
        "prepfs_hits": sum(r["prepfs"]["hits"] for r in rounds), "prepfs_opens": n * args.rounds,
        "prepfs_median_refills_per_pass": med("prepfs", "refills"),
    }
    kinds = sorted({k for r in rounds for k in r["prepfs"]["threads_cpu_us_per_open"]})
    summary["prepfs_median_threads_cpu_us_per_open"] = {
        k: statistics.median(r["prepfs"]["threads_cpu_us_per_open"].get(k, 0.0) for r in rounds) for k in kinds}
    lines = [
        f"Row 3d against the FUSE floor side by side: {n} files of {size} bytes, {args.rounds} rounds, each "
        "a pass of each filesystem in alternating order (2 reader threads, whole files, shuffled), "
        f"prepfs restocked before every pass ({summary['prepfs_hits']} of {summary['prepfs_opens']} prepfs opens were cached outputs).",
        "",
        "| | prepfs cached (3d) | floor plain (3h) | floor passthrough, distinct (3k) |",
        "| --- | ---: | ---: | ---: |",
        "| median samples/s | " + " | ".join(f"{summary['median_rate'][k]:,.0f}" for k in files) + " |",
        "| median daemon CPU µs per open | " + " | ".join(f"{summary['median_daemon_cpu_us_per_open'][k]:.0f}" for k in files) + " |",
        "",
        "| ratio (median of the rounds' ratios) | value | min - max |",
        "| --- | ---: | --- |",
    ]
    for k in ("prepfs_over_plain", "prepfs_over_passthrough", "passthrough_over_plain"):
        vals = [r[k] for r in rounds]
        lines.append(f"| {k.replace('_', ' ')} | {summary['median_ratio'][k]:.2f}x | {min(vals):.2f} - {max(vals):.2f} |")
    threads = summary["prepfs_median_threads_cpu_us_per_open"]
    lines += ["", "prepfs's CPU per open during its passes, by thread (µs, median of the rounds; the refill makes "
              f"the next pass's outputs once the stock is below half: {summary['prepfs_median_refills_per_pass']:.0f} "
              "per pass): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v >= 0.5) + "."]
    # the run's summary: the setting and the ratios (the second table)
    write_report(args.out, {"summary": summary, "rounds": rounds, "argv": sys.argv}, lines,
                 summary=[lines[0], ""] + summary_of(lines, 1))


if __name__ == "__main__":
    sys.exit(main())
