#!/usr/bin/env python3
"""Back-to-back epochs from a cold mount, for one or more prepfs builds side by side (issues 2
and 12: what the first epoch costs, and how soon the cache pays it back).

Each run: the page cache dropped, a fresh prepfs mount (read-only, `mount-configs/imagenet.yaml`
as shipped), then N epochs of `augmented/` back to back with the raw reader of row 3d (2 threads,
whole files, a fresh shuffle per epoch; `warm_floor.one_pass`), no pause between them. Builds
are alternated run by run, `--repeats` times, so load that comes and goes on the machine falls on
all of them. Per epoch it records files/s, the daemon's CPU per sample (all its threads, and by
kind of thread), and the work `stats.json` counted in it: full decodes, region decodes (a miss's
fast path), resamples of kept pixels, refills.

Usage: PYTHONPATH=bench python3 -m prepfs_bench.cold_epochs --prepfs target/release/prepfs[,OTHER_BUILD...] --data DIR
                                                 [--labels new,old] [--epochs 4] [--repeats 3] [--out bench/results/DATE-cold-epochs]
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
from .mount import mount_prepfs, proc_cpu_seconds
from .runs import write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md
from .warm_floor import one_pass, stats_of  # the raw reader's pass and stats.json, as bench-floor

WORK_KEYS = ("full_decodes", "decode_augments", "pixel_augments")


def drop_page_cache():
    """Drops the page cache (as make bench's cold rows do); needs root, else says so once."""
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        print(f"page cache not dropped ({e}): epoch 1 reads the source from memory", file=sys.stderr)


def epoch_record(before, after, cpu_seconds, files, rate, threads):
    """One epoch's figures from the stats.json before and after it and the daemon's CPU in it."""
    wb, wa = before.get("work", {}), after.get("work", {})
    rec = {"samples": files, "rate": rate, "cpu_ms_per_sample": cpu_seconds * 1e3 / files,
           "refills": after["refills"] - before["refills"],
           "threads_cpu_us_per_open": threads}
    rec.update({k: wa.get(k, 0) - wb.get(k, 0) for k in WORK_KEYS})
    return rec


def one_run(binary, config, data, epochs, seed, work):
    """A fresh mount of `binary` over `data`, then `epochs` passes back to back."""
    drop_page_cache()
    mount = mount_prepfs(binary, config, data, os.path.join(work, "mnt"))
    ready = time.monotonic()
    try:
        files = loaders.list_files(mount.view("augmented"))
        out = []
        for e in range(epochs):
            before, cpu = stats_of(mount), proc_cpu_seconds(mount.pid)
            r = one_pass(files, seed * 100 + e, mount.pid)
            after = stats_of(mount)
            out.append(epoch_record(before, after, proc_cpu_seconds(mount.pid) - cpu, len(files), r["rate"],
                                    r["threads_cpu_us_per_open"]))
            if e == 0:
                # The refill's head start: what it made between the mount being ready and the
                # first read (the reader's start-up included), served in epoch 1 but not
                # counted in its work or CPU. Builds compare fairly only with similar ones.
                out[0]["made_before"] = before["refills"]
                out[0]["ready_to_first_read_s"] = round(time.monotonic() - ready - r["seconds"], 3)
        return out
    finally:
        mount.close()


def summarize(runs, epochs):
    """Median of each epoch's figures over a build's runs."""
    med = lambda key, e: statistics.median(run[e][key] for run in runs)
    rows = [{k: med(k, e) for k in ("samples", "rate", "cpu_ms_per_sample", "refills") + WORK_KEYS} for e in range(epochs)]
    rows[0]["made_before"] = statistics.median(run[0].get("made_before", 0) for run in runs)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prepfs", required=True, help="one prepfs binary, or several separated by commas")
    ap.add_argument("--labels", help="a name for each binary (default: their paths)")
    ap.add_argument("--data", required=True, help="a JPEG tree (bench/run.sh's data set)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-cold-epochs"))
    args = ap.parse_args()
    binaries = args.prepfs.split(",")
    labels = args.labels.split(",") if args.labels else binaries
    if len(labels) != len(binaries):
        ap.error("--labels needs one name per binary")
    config = os.path.join(ROOT, "mount-configs", "imagenet.yaml")
    runs = {label: [] for label in labels}
    work = tempfile.mkdtemp(prefix="prepfs-cold-epochs-")
    try:
        for rep in range(args.repeats):
            # Alternate which build goes first in each repeat.
            order = list(zip(binaries, labels))
            for binary, label in (order if rep % 2 == 0 else order[::-1]):
                run = one_run(binary, config, args.data, args.epochs, rep, work)
                runs[label].append(run)
                print(label, json.dumps([{k: round(v, 3) if isinstance(v, float) else v for k, v in e.items()} for e in run]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {label: summarize(r, args.epochs) for label, r in runs.items()}
    n = args.epochs
    lines = [f"Back-to-back epochs from a cold mount (page cache dropped), the raw reader of row 3d over augmented/ "
             f"of {args.data}; medians of {args.repeats} alternated runs per build.", "",
             "| build | " + " | ".join(f"epoch {e + 1} files/s" for e in range(n)) + " | total s | "
             + " | ".join(f"e{e + 1} CPU ms/sample" for e in range(n)) + " |",
             "| --- " + "| ---: " * (2 * n + 1) + "|"]
    for label, rows in summary.items():
        total = sum(r["samples"] / r["rate"] for r in rows)
        lines.append(f"| {label} | " + " | ".join(f"{r['rate']:,.0f}" for r in rows) + f" | {total:.2f} | "
                     + " | ".join(f"{r['cpu_ms_per_sample']:.2f}" for r in rows) + " |")
    lines += ["", "Work per epoch (medians): full decodes / region decodes / resamples of kept pixels / refills. "
              "Outputs the refill made before epoch 1's first read (medians, per build): "
              + ", ".join(f"{label} {rows[0]['made_before']:.0f}" for label, rows in summary.items()) + ".", "",
              "| build | " + " | ".join(f"epoch {e + 1}" for e in range(n)) + " |", "| --- " + "| --- " * n + "|"]
    for label, rows in summary.items():
        lines.append(f"| {label} | " + " | ".join(
            f"{r['full_decodes']:.0f} / {r['decode_augments']:.0f} / {r['pixel_augments']:.0f} / {r['refills']:.0f}" for r in rows) + " |")
    write_report(args.out, {"summary": summary, "runs": runs, "argv": sys.argv}, lines)


if __name__ == "__main__":
    sys.exit(main())
