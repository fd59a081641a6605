#!/usr/bin/env python3
"""The planner's acceptance matrix: in each cell (data set x cache x storage), `split: auto`
against every fixed split over three back-to-back epochs, and each epoch's prediction against
its measurement.

Data sets: the generator's at 500x375 and at 1600x1200, and JPEGs cut from real photographs
(prepfs_bench.real_photos). Cache: one that holds the set (6 GiB), and 50% and 20% of the set's
decoded bytes.
Storage: local (page cache warmed before each run), or 10 MB/s (`source.read_limit`). Reads:
2 reader processes over augmented/ (prepfs_bench.epochs's `run`), one job; or (`--jobs 3`) three
jobs at once, one reader each over jobs/job<i>/augmented. Every config is told the run is 3
epochs (`cache.epochs: 3`), as a user would tell it.

Targets per cell (issue 32): auto within 10% of the best fixed split over the three epochs;
every per-epoch prediction (with three jobs, the makespan's) within 30%; epoch 2 at least 2x epoch 1 when the set fits in
memory. A cell that misses is a finding for the model, not for this script.

Usage: PYTHONPATH=bench python3 -m prepfs_bench.plan_matrix --prepfs target/release/prepfs --gen target/release/examples/make_dataset
                                                 [--sets real,gen500,gen1600] [--caches whole,half,fifth]
                                                 [--storage local,10MBps] [--jobs 1,3] [--splits auto,100-0-0,...] [--out PREFIX]
Writes PREFIX.json and PREFIX.md (default bench/results/DATE-plan-matrix), and the table to
BENCHMARKS.md's Runs (prepfs_bench.runs), all three again after each cell.
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

from . import BENCH_DIR, ROOT, module_command
from .epochs import run, warm
from .jobs import predicted_makespan, three_jobs
from .mount import Mount
from .runs import write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md
SPLITS = ["auto", "100-0-0", "0-100-0", "0-0-100", "34-33-33", "50-50-0", "0-50-50"]


def make_set(kind, gen, root):
    path = os.path.join(root, kind)
    if os.path.isdir(path):
        return path
    if kind == "real":
        subprocess.run(module_command(sys.executable, "real_photos") + ["--out", path, "--classes", "20",
                        "--per-class", "150"], check=True)
    elif kind == "gen500":
        subprocess.run([gen, "--out", path, "--classes", "20", "--per-class", "150", "--width", "500", "--height", "375",
                        "--quiet"], check=True)
    elif kind == "gen1600":
        subprocess.run([gen, "--out", path, "--classes", "10", "--per-class", "40", "--width", "1600", "--height", "1200",
                        "--quiet"], check=True)
    else:
        raise SystemExit(f"unknown set {kind}")
    readme = os.path.join(path, "README.txt")
    if os.path.exists(readme):
        os.remove(readme)
    return path


def run_jobs(prepfs, source, workdir, name, yaml, epochs):
    """Three jobs at once, one reader process each over jobs/job<i>/augmented, `epochs` epochs
    each: the makespan, and the plan's prediction of it (each epoch's samples at the rate the
    plan predicted for that epoch: `predicted_makespan`)."""
    warm(source)
    mount = Mount(prepfs, source, workdir, name, yaml)
    try:
        took, seen = three_jobs(mount, epochs)
        st = mount.stats()
    finally:
        mount.close()
    served = sum(j["samples_served"] for j in st["jobs"]["active"])
    predicted = predicted_makespan(served, epochs, seen)
    work = st.get("work") or {}
    per = lambda k: (work.get(k) or 0) / served if served else None
    return {"config": name, "yaml": yaml.strip(), "jobs": 3, "samples_served": served, "total_s": took,
            "predicted_total_s": predicted, "split": (st.get("plan") or {}).get("split"),
            "error": (predicted / took - 1) if predicted else None,
            # What the work came to per sample served (the several-jobs model's augments,
            # decodes and reads), and the plan's per-epoch rates as they were seen.
            "per_sample": {"augments": per("pixel_augments") + per("decode_augments") if served else None,
                           "decodes": per("decode_augments") + per("full_decodes") if served else None,
                           "reads": per("source_reads")},
            "plan_epochs_seen": seen[:1] + seen[-1:],
            # The model's inputs as the plan last measured them (t_read, t_da, t_serve, ...).
            "plan_inputs": (st.get("plan") or {}).get("inputs"), "work": work}


def decoded_bytes(source):
    """The set's decoded size (width x height x 3 summed), from the files' headers (PIL)."""
    from PIL import Image, UnidentifiedImageError
    total = 0
    for d, _, names in os.walk(source):
        for n in names:
            try:
                with Image.open(os.path.join(d, n)) as im:
                    total += im.size[0] * im.size[1] * 3
            except UnidentifiedImageError:
                pass  # not an image (the generator's README): no sample
    return total


def report(out, cells):
    """Writes the table of the cells measured so far (after each cell, so a run cut short keeps them)."""
    lines = ["The planner's matrix: 3 back-to-back epochs per run; `auto` against each fixed split. One job: 2 "
             "readers over augmented/, predictions the plan's for each epoch, read just before it starts. Three "
             "jobs: one reader each over jobs/job<i>/augmented at once, the makespan's prediction from the plan's "
             "rate for each epoch (its first epoch reads the set once). Totals: the mean of each split's "
             "rounds (`--repeat`; the runs in brackets where more than one).", "",
             "| set | cache | storage | jobs | auto split | auto total s | best fixed | best total s | auto/best | "
             "auto epochs /s (predicted) | worst error (auto / any split) | e2/e1 |",
             "| --- | --- | --- | ---: | --- | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    for c in cells:
        auto = next(r for r in c["rows"] if r["split_config"] == "auto")
        if c["jobs"] == 3:
            eps = f"makespan predicted {c['auto_predicted_total_s'] or 0:.2f} s"
            ratio = "-"
        else:
            eps = ", ".join(f"{m:,.0f} ({p or 0:,.0f})" for m, p in zip(c["auto_epochs"], c["auto_predicted"]))
            ratio = f"{c['epoch2_over_epoch1']:.2f}x"
        pct = lambda e: "-" if e is None else f"{e * 100:.0f}%"
        err = f"{pct(c['auto_worst_prediction_error'])} / {pct(c['worst_prediction_error'])}"
        runs = lambda key: "" if c.get("rounds", 1) < 2 else " (" + ", ".join(f"{t:.1f}" for t in c[key]) + ")"
        lines.append(f"| {c['set']} | {c['cache']} | {c['storage']} | {c['jobs']} | {auto['split']} | {c['auto_total_s']:.2f}{runs('auto_runs_s')} | "
                     f"{c['best_fixed']} | {c['best_total_s']:.2f}{runs('best_runs_s')} | {c['auto_over_best']:.2f}x | {eps} | {err} | {ratio} |")
    write_report(out, {"cells": cells}, lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prepfs", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--sets", default="real,gen500,gen1600")
    ap.add_argument("--caches", default="whole,half,fifth")
    ap.add_argument("--storage", default="local,10MBps")
    ap.add_argument("--splits", default=",".join(SPLITS))
    ap.add_argument("--jobs", default="1,3", help="1 (2 readers of one stream), 3 (three jobs at once), or both: 1,3")
    ap.add_argument("--data", default=os.path.join(ROOT, "target", "plan-matrix-data"),
                    help="where the data sets are made (kept between runs)")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-plan-matrix"))
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every split; the totals are their means")
    args = ap.parse_args()
    os.makedirs(args.data, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="prepfs-plan-matrix-")
    cells = []
    try:
        for kind in args.sets.split(","):
            source = make_set(kind, args.gen, args.data)
            whole = decoded_bytes(source)
            for cache in args.caches.split(","):
                memory = {"whole": "6GiB", "half": str(whole // 2), "fifth": str(whole // 5)}[cache]
                for storage, jobs in [(st, j) for st in args.storage.split(",") for j in args.jobs.split(",")]:
                    limit = "source: { path: /unused, read_limit: 10MB/s }\n" if storage == "10MBps" else ""
                    rows = []
                    # Rounds of every split in turn, so that a drift of the machine falls on all alike.
                    for round_ in range(args.repeat):
                        for split in args.splits.split(","):
                            yaml = f"{limit}cache: {{ memory: {memory}, split: {split}, epochs: 3 }}\n"
                            name = f"{kind}-{cache}-{storage}-{split}" + ("-3jobs" if jobs == "3" else "")
                            if jobs == "3":
                                row = run_jobs(args.prepfs, source, workdir, name, yaml, 3)
                            else:
                                row = run(args.prepfs, source, workdir, name, yaml, 3)
                                row["total_s"] = sum(row["samples"] / row[f"epoch{e}_samples_per_s"] for e in (1, 2, 3))
                            row["split_config"], row["round"] = split, round_
                            rows.append(row)
                            print(json.dumps({k: row[k] for k in ("config", "split", "total_s")}), flush=True)
                    # Each split's total: the mean of its rounds (a best of many single runs is
                    # biased low: the least of six noisy totals).
                    mean = lambda split: statistics.mean(r["total_s"] for r in rows if r["split_config"] == split)
                    auto = next(r for r in rows if r["split_config"] == "auto")
                    fixed = [sp for sp in dict.fromkeys(r["split_config"] for r in rows) if sp != "auto"]
                    best = min(fixed, key=mean) if fixed else "auto"
                    cell = {
                        "set": kind, "cache": cache, "storage": storage, "jobs": int(jobs), "rows": rows, "rounds": args.repeat,
                        "auto_total_s": mean("auto"), "best_fixed": best, "best_total_s": mean(best),
                        "auto_over_best": mean("auto") / mean(best),
                        "auto_runs_s": [r["total_s"] for r in rows if r["split_config"] == "auto"],
                        "best_runs_s": [r["total_s"] for r in rows if r["split_config"] == best],
                    }
                    if jobs == "3":
                        errors = [r["error"] for r in rows if r["error"] is not None]
                        cell.update({"auto_predicted_total_s": auto["predicted_total_s"],
                                     "auto_worst_prediction_error": None if auto["error"] is None else abs(auto["error"]),
                                     "worst_prediction_error": max((abs(e) for e in errors), default=None)})
                    else:
                        errors = [r[f"epoch{e}_error"] for r in rows for e in (1, 2, 3) if r[f"epoch{e}_error"] is not None]
                        mine = [auto[f"epoch{e}_error"] for e in (1, 2, 3) if auto[f"epoch{e}_error"] is not None]
                        cell.update({
                            "auto_worst_prediction_error": max((abs(e) for e in mine), default=None),
                            "auto_epochs": [auto[f"epoch{e}_samples_per_s"] for e in (1, 2, 3)],
                            "auto_predicted": [auto[f"epoch{e}_predicted"] for e in (1, 2, 3)],
                            "worst_prediction_error": max((abs(e) for e in errors), default=None),
                            "epoch2_over_epoch1": auto["epoch2_over_epoch1"],
                        })
                    cells.append(cell)
                    report(args.out, cells)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
