#!/usr/bin/env python3
"""Back-to-back epochs through prepfs's augmented/ view, with the plan's prediction beside each
measurement (the cache-pays-off issue's table).

For each cache setting: mount, read every file of augmented/ with 2 parallel reader processes
(epoch 1), then at once again and again (epochs 2..N, no pause for the refill), and record each
epoch's samples/s, the source bytes it read, and the plan's predicted_samples_per_s in force at
its end.

Usage: PYTHONPATH=bench python3 -m prepfs_bench.epochs --prepfs target/release/prepfs --gen target/release/examples/make_dataset
                                            [--classes 30 --per-class 100] [--epochs 4] [--out bench/results/DATE-epochs]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool

from . import BENCH_DIR, ROOT
from .jobs import common_args
from .mount import Mount  # mounting a config (unmounted on every way out)
from .runs import write_report  # the run's JSON and Markdown, its section in BENCHMARKS.md


def read_file(path):
    with open(path, "rb") as f:
        return len(f.read())


def started(_):
    return os.getpid()


def epoch(files, seed):
    """Samples/s of one pass over `files` in a shuffled order by 2 reader processes. The clock
    starts once both readers are up: starting them (12-50 ms here) is the client's, not the
    mount's, and is a fifth to a third of a 400-sample epoch at 5,000 samples/s."""
    order = list(files)
    random.Random(seed).shuffle(order)
    with Pool(2) as pool:
        pool.map(started, range(2), chunksize=1)
        begun = time.time()
        n = sum(1 for _ in pool.imap_unordered(read_file, order, chunksize=4))
        return n / (time.time() - begun)


def warm(source):
    """Reads the source once, so every config starts with it in the page cache alike (the first
    config would otherwise pay the disk for all)."""
    for d, _, names in os.walk(source):
        for n in names:
            read_file(os.path.join(d, n))


def run(prepfs, source, workdir, name, yaml, epochs):
    warm(source)
    mount = Mount(prepfs, source, workdir, name, yaml)
    try:
        root = os.path.join(mount.mnt, "augmented")
        files = sorted(os.path.join(root, c, n) for c in os.listdir(root) for n in os.listdir(os.path.join(root, c)))
        row = {"config": name, "yaml": yaml.strip(), "samples": len(files)}
        before = mount.stats()["source_bytes_read"]
        for e in range(1, epochs + 1):
            # The plan's prediction for the epoch about to be read (the run model's, where the
            # mount has one; else the cold pass for epoch 1 and the steady state after).
            plan = mount.stats().get("plan") or {}
            run = plan.get("epochs") or {}
            predicted = run.get("predicted_current_samples_per_s") if run.get("current") == e else None
            if predicted is None:
                predicted = plan.get("predicted_cold_samples_per_s" if e == 1 else "predicted_samples_per_s")
            rate = epoch(files, e)
            st = mount.stats()
            row[f"epoch{e}_samples_per_s"] = rate
            plan = st.get("plan") or {}
            row[f"epoch{e}_predicted"] = predicted
            row[f"epoch{e}_first_touch"] = plan.get("first_touch")
            row[f"epoch{e}_source_mb"] = (st["source_bytes_read"] - before) / 1e6
            before = st["source_bytes_read"]
            row["split"] = plan.get("split")
        row["epochs"] = epochs
        row["epoch2_over_epoch1"] = row["epoch2_samples_per_s"] / row["epoch1_samples_per_s"]
        row["last_over_first"] = row[f"epoch{epochs}_samples_per_s"] / row["epoch1_samples_per_s"]
        for e in range(1, epochs + 1):
            pred = row[f"epoch{e}_predicted"]
            row[f"epoch{e}_error"] = None if not pred else pred / row[f"epoch{e}_samples_per_s"] - 1
        row["work_ms"] = {k: v for k, v in st.get("work", {}).items() if k.endswith("_ms_mean")}
        return row
    finally:
        mount.close()


def main():
    ap = argparse.ArgumentParser()
    common_args(ap, per_class=100)
    ap.add_argument("--epochs", type=int, default=4, help="back-to-back epochs per config (at least 2)")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results", time.strftime("%Y-%m-%d") + "-epochs"))
    ap.add_argument("--source", help="an existing data set (e.g. prepfs_bench.real_photos's) instead of the generator's")
    ap.add_argument("--configs", help="comma-separated names of the configs to run (default: all)")
    args = ap.parse_args()
    if args.epochs < 2:
        ap.error("--epochs must be at least 2")
    workdir = tempfile.mkdtemp(prefix="prepfs-epochs-")
    try:
        source = args.source or os.path.join(workdir, "source")
        if not args.source:
            subprocess.run([args.gen, "--out", source, "--classes", str(args.classes), "--per-class",
                            str(args.per_class), "--quiet"], check=True)
        set_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(source) for f in fs)
        shipped = open(os.path.join(ROOT, "mount-configs", "imagenet.yaml")).read()
        quarter = max(1 << 20, set_bytes // 4)
        configs = [
            ("no-cache", "cache: { memory: 0 }\n"),
            ("shipped", shipped),
            ("whole-auto", "cache: { memory: 6GiB, split: auto }\n"),
            ("whole-100-0-0", "cache: { memory: 6GiB, split: 100-0-0 }\n"),
            ("whole-0-100-0", "cache: { memory: 6GiB, split: 0-100-0 }\n"),
            ("whole-0-0-100", "cache: { memory: 6GiB, split: 0-0-100 }\n"),
            ("whole-auto-one-epoch", "cache: { memory: 6GiB, split: auto, epochs: 1 }\n"),
            ("quarter-10MBps", f"source: {{ path: /unused, read_limit: 10MB/s }}\ncache: {{ memory: {quarter}, split: auto }}\n"),
        ]
        if args.configs:
            chosen = args.configs.split(",")
            configs = [c for c in configs if c[0] in chosen]
        rows = []
        for name, yaml in configs:
            row = run(args.prepfs, source, workdir, name, yaml, args.epochs)
            rows.append(row)
            print(json.dumps(row), flush=True)
        n = args.epochs
        later = " ".join(f"| epoch {e} /s" for e in range(2, n + 1))
        lines = [f"Back-to-back epochs, 2 reader processes over augmented/, {rows[0]['samples']} samples "
                 f"({set_bytes / 1e6:.0f} MB). Predictions: the plan in force at the epoch's end, for an empty cache (epoch 1) "
                 f"and for the cache as planned (epoch {n}).",
                 "", f"| config | split | epoch 1 /s | predicted {later} | predicted | e{n}/e1 | source MB by epoch |",
                 "| --- | --- | ---: | ---: " + "| ---: " * (n - 1) + "| ---: | ---: | --- |"]
        for r in rows:
            fmt = lambda v: "-" if v is None else f"{v:,.0f}"
            rates = " ".join(f"| {fmt(r[f'epoch{e}_samples_per_s'])}" for e in range(2, n + 1))
            source_mb = ", ".join(f"{r[f'epoch{e}_source_mb']:.0f}" for e in range(1, n + 1))
            lines.append(f"| {r['config']} | {r['split']} | {fmt(r['epoch1_samples_per_s'])} | {fmt(r['epoch1_predicted'])} "
                         f"{rates} | {fmt(r[f'epoch{n}_predicted'])} | {r['last_over_first']:.2f}x | {source_mb} |")
        write_report(args.out, {"set_bytes": set_bytes, "rows": rows}, lines)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
